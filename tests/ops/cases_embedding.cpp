// Op cases: embedding gather from every table type into f32, f16 and bf16 rows, with ids
// outside [0, vocab) (zero rows). The values must be exactly the dequantized table values
// rounded once to the output type.
#include <climits>

#include "onepass/ops/ops.h"
#include "onepass/ops/embedding.h"
#include "onepass/ops/quant.h"
#include "ops/quant_cases.h"
#include "support/op_harness.h"

namespace onepass::testing {

ONEPASS_OP_CASES(embedding) {
  for (DType t : quant_cases::weight_types()) {
    for (DType o : kFloatTypes) {
      const int64_t vocab = 37;
      const int64_t dim = dtype_block_elems(t) == 1 ? 45 : dtype_block_elems(t) == 32 ? 96 : 512;
      cases.push_back({cat("embedding/", dtype_name(t), "_", dtype_name(o), "/v", vocab, "_d", dim),
                       [=](OpContext& c) {
        const std::vector<int32_t> ids = {3, 0, 36, -1, 37, 5, 5, INT_MAX, INT_MIN, 20};
        std::vector<double> table_values, offsets;
        TensorView table = quant_cases::weight_input(c, t, {vocab, dim}, table_values, offsets,
                                                     dtype_is_quantized(t));
        TensorView id_tensor = c.input_i32({static_cast<int64_t>(ids.size())}, ids);
        TensorView out = c.output(o, {static_cast<int64_t>(ids.size()), dim});
        ops::embedding(c.session(), table, id_tensor, out);
        c.run();
        std::vector<double> ref(ids.size() * static_cast<size_t>(dim), 0.0);
        for (size_t r = 0; r < ids.size(); ++r) {
          if (ids[r] < 0 || ids[r] >= vocab) continue;
          std::copy_n(table_values.begin() + ids[r] * dim, dim, ref.begin() + static_cast<int64_t>(r) * dim);
        }
        c.expect_near(out, rounded(o, ref), Tolerance{0.0, 0.0});
      }});
    }
  }
  cases.push_back({"embedding/errors", [](OpContext& c) {
    std::vector<double> values, offsets;
    TensorView table = quant_cases::weight_input(c, DType::q4_0, {10, 64}, values, offsets, false);
    TensorView ids = c.input_i32({3}, {1, 2, 3});
    EXPECT_THROW(ops::embedding(c.session(), table, ids, c.output(DType::f32, {3, 32})), Error);
    EXPECT_THROW(ops::embedding(c.session(), table, c.random_input(DType::f32, {3}), c.output(DType::f32, {3, 64})),
                 Error);
    EXPECT_THROW(ops::embedding(c.session(), table, ids, c.output(DType::i32, {3, 64})), Error);
    c.run();
  }});
}

}  // namespace onepass::testing

// CPU kernels: embedding_<W>_<O> (row gather from a dense or quantized table).
#include "onepass/ops/embedding.h"

#include <cstring>

#include "../cpu_kernels.h"
#include "float_types.h"
#include "onepass/core/error.h"
#include "onepass/ops/quant.h"
#include "quant_blocks.h"

namespace onepass::cpu {
namespace {

// One block per token. Rows are decoded with the host dequantize(), so the values are
// exactly those GGUF tools produce, then rounded once to the output type.
template <DType W, DType O>
void embedding_kernel(const void* raw, const LaunchDims&, uint64_t first, uint64_t end) {
  using E = Elem<O>;
  using S = typename E::storage;
  const auto& a = *static_cast<const ops::EmbeddingArgs*>(raw);
  for (uint64_t b = first; b < end; ++b) {
    const auto t = static_cast<int64_t>(b);
    S* out = static_cast<S*>(a.out) + t * a.out_stride;
    const int32_t id = a.ids[t];
    if (id < 0 || id >= a.vocab) {  // ids come from device memory: never read past the table
      for (int64_t j = 0; j < a.dim; ++j) out[j] = E::store(0.0f);
      continue;
    }
    const void* row = static_cast<const uint8_t*>(a.table) + id * a.table_row_bytes;
    if constexpr (W == O) {
      std::memcpy(out, row, static_cast<size_t>(a.dim) * sizeof(S));
    } else {
      float* values = thread_scratch(a.dim);
      ops::dequantize(W, row, a.dim, values);
      for (int64_t j = 0; j < a.dim; ++j) out[j] = E::store(values[j]);
    }
  }
}

}  // namespace

void register_embedding_kernels(KernelRegistry& registry) {
  auto add = [&]<DType W>() {
    for_each_float_type([&]<DType O>() {
      registry.add(make_cpu_kernel<ops::EmbeddingArgs>(
          cat("embedding_", dtype_name(W), "_", dtype_name(O)), embedding_kernel<W, O>));
    });
  };
  add.template operator()<DType::f32>();
  add.template operator()<DType::f16>();
  add.template operator()<DType::bf16>();
  add.template operator()<DType::q4_0>();
  add.template operator()<DType::q4_1>();
  add.template operator()<DType::q8_0>();
  add.template operator()<DType::q4_k>();
  add.template operator()<DType::q5_k>();
  add.template operator()<DType::q6_k>();
  add.template operator()<DType::q5_0>();
  add.template operator()<DType::q5_1>();
  add.template operator()<DType::q2_k>();
  add.template operator()<DType::q3_k>();
  add.template operator()<DType::iq4_nl>();
  add.template operator()<DType::iq4_xs>();
}

}  // namespace onepass::cpu

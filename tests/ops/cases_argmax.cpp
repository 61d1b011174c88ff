// Op cases: argmax (random rows, explicit ties, NaN and infinities).
#include <cmath>
#include <cstring>
#include <limits>

#include "support/op_harness.h"

namespace onepass::testing {
namespace {

// Lowest index of the largest non-NaN value; 0 when the row is all NaN.
std::vector<int32_t> argmax_reference(const std::vector<double>& x, int64_t rows, int64_t cols) {
  std::vector<int32_t> out(static_cast<size_t>(rows), 0);
  for (int64_t r = 0; r < rows; ++r) {
    int64_t best = -1;
    for (int64_t c = 0; c < cols; ++c) {
      const double v = x[r * cols + c];
      if (std::isnan(v)) continue;
      if (best < 0 || v > x[r * cols + best]) best = c;
    }
    out[static_cast<size_t>(r)] = static_cast<int32_t>(best < 0 ? 0 : best);
  }
  return out;
}

// Runs argmax over explicit rows (of equal length) and expects `expected`, which the
// reference must agree with.
void expect_argmax_of_rows(OpContext& c, DType t, const std::vector<std::vector<float>>& rows,
                           const std::vector<int32_t>& expected) {
  const auto n = static_cast<int64_t>(rows.size());
  const auto cols = static_cast<int64_t>(rows.front().size());
  std::vector<float> values;
  for (const auto& r : rows) values.insert(values.end(), r.begin(), r.end());
  TensorView x = c.input_from(t, {n, cols}, values);
  TensorView out = c.output(DType::i32, {n});
  ops::argmax(c.session(), x, out);
  c.run();
  ASSERT_EQ(argmax_reference(c.host(x), n, cols), expected);  // the reference agrees
  c.expect_i32(out, expected);
}

}  // namespace

ONEPASS_OP_CASES(argmax) {
  const std::vector<std::pair<int64_t, int64_t>> shapes = {
      {1, 1}, {1, 32001}, {7, 333}, {3, 4097}, {130, 31}, {2, 128256}, {1, 16384}};
  for (DType t : kFloatTypes) {
    for (auto [rows, cols] : shapes) {
      // f16 / bf16 rounding makes ties common in long rows: lowest index must win.
      cases.push_back({cat("argmax/", dtype_name(t), "/", rows, "x", cols), [=](OpContext& c) {
        TensorView x = c.random_input(t, {rows, cols}, -10.0f, 10.0f);
        TensorView out = c.output(DType::i32, {rows});
        ops::argmax(c.session(), x, out);
        c.run();
        c.expect_i32(out, argmax_reference(c.host(x), rows, cols));
      }});
    }
    cases.push_back({cat("argmax/", dtype_name(t), "/strided_9x77"), [=](OpContext& c) {
      TensorView x = c.random_input_strided(t, {9, 77}, 5, -10.0f, 10.0f);
      TensorView out = c.output(DType::i32, {9});
      ops::argmax(c.session(), x, out);
      c.run();
      c.expect_i32(out, argmax_reference(c.host(x), 9, 77));
    }});
    cases.push_back({cat("argmax/", dtype_name(t), "/ties_nan_inf"), [=](OpContext& c) {
      constexpr int64_t kCols = 37;  // not a multiple of 8 lanes or a warp
      constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
      constexpr float kInf = std::numeric_limits<float>::infinity();
      std::vector<std::vector<float>> rows;
      auto row = [&](float fill) { return std::vector<float>(kCols, fill); };
      rows.push_back(row(0.5f));                               // all equal -> index 0
      rows.push_back(row(-1.0f));                              // ties at 5, 17, 30 -> index 5
      rows.back()[5] = rows.back()[17] = rows.back()[30] = 2.0f;
      rows.push_back(row(-1.0f));                              // ties in other lanes: 13, 6 -> index 6
      rows.back()[13] = rows.back()[6] = 3.0f;
      rows.push_back(row(0.0f));                               // NaN first, max at 3 -> index 3
      rows.back()[0] = kNan;
      rows.back()[3] = 1.0f;
      rows.push_back(row(kNan));                               // all NaN -> index 0
      rows.push_back(row(kNan));                               // only -inf is a number -> index 1
      rows.back()[1] = -kInf;
      rows.push_back(row(-kInf));                              // all -inf -> index 0
      rows.push_back(row(1.0f));                               // +inf twice -> index 9
      rows.back()[9] = rows.back()[20] = kInf;
      rows.push_back(row(kNan));                               // max in the tail -> index 36
      rows.back()[2] = 1.0f;
      rows.back()[36] = 4.0f;
      rows.push_back(row(-3.0f));                              // NaNs around ties -> index 8
      rows.back()[7] = kNan;
      rows.back()[8] = rows.back()[16] = rows.back()[24] = -2.0f;
      expect_argmax_of_rows(c, t, rows, {0, 5, 6, 3, 0, 1, 0, 9, 36, 8});
    }});
    // Rows long enough for CUDA's cluster kernel (cuda::cuda_argmax_chunks: 5 chunks of
    // 8,000 values): ties and NaNs across chunks, the lowest index must still win.
    cases.push_back({cat("argmax/", dtype_name(t), "/ties_across_chunks"), [=](OpContext& c) {
      constexpr int64_t kCols = 40000;
      constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
      constexpr float kInf = std::numeric_limits<float>::infinity();
      std::vector<std::vector<float>> rows;
      auto row = [&](float fill) { return std::vector<float>(kCols, fill); };
      rows.push_back(row(-1.0f));  // ties in the last and the first chunk -> index 5
      rows.back()[39999] = rows.back()[5] = rows.back()[20000] = 2.0f;
      rows.push_back(row(-1.0f));  // ties in chunks 4 and 2 only -> index 16001
      rows.back()[32003] = rows.back()[16001] = 3.0f;
      rows.push_back(row(kNan));   // all NaN -> index 0
      rows.push_back(row(kNan));   // one -inf in chunk 3 -> index 25000
      rows.back()[25000] = -kInf;
      rows.push_back(row(0.0f));   // NaN in chunk 0, the max at the end -> index 39999
      rows.back()[0] = kNan;
      rows.back()[39999] = 1.0f;
      expect_argmax_of_rows(c, t, rows, {5, 16001, 0, 25000, 39999});
    }});
  }
  // feed_token: the next decode step's inputs from an argmax. Position 5 feeds history[6];
  // position 7 is the last one a history of 8 holds (history[8] does not exist: no
  // write); without a history only the inputs advance.
  for (int32_t position : {5, 7, -1}) {
    for (bool with_history : {true, false}) {
      cases.push_back({cat("feed_token/position_", position, with_history ? "" : "_no_history"), [=](OpContext& c) {
        TensorView token = c.input_i32({1}, {42});
        TensorView ids = c.input_i32({1}, {7});
        TensorView positions = c.input_i32({1}, {position});
        TensorView kv_length = c.input_i32({1}, {position + 1});
        TensorView history = with_history ? c.output(DType::i32, {8}) : TensorView{};
        ops::feed_token(c.session(), token, ids, positions, kv_length, history);
        c.run();
        c.expect_i32(ids, {42}, "ids");
        c.expect_i32(positions, {position + 1}, "positions");
        c.expect_i32(kv_length, {position + 2}, "kv_length");
        if (with_history) {
          int32_t poison = 0;
          std::memset(&poison, kPoisonByte, sizeof(poison));
          std::vector<int32_t> expected(8, poison);
          if (position + 1 >= 0 && position + 1 < 8) expected[static_cast<size_t>(position + 1)] = 42;
          c.expect_i32(history, expected, "history");
        }
      }});
    }
  }
}

TEST(ArgmaxValidation, RejectsBadArguments) {
  expect_op_error("feed_token", [](GraphSession& s, Backend& b) {
    TensorView i = b.alloc_tensor(DType::i32, {1});
    ops::feed_token(s, b.alloc_tensor(DType::f32, {1}), i, i, i, TensorView{});  // a float token
  });
  expect_op_error("argmax", [](GraphSession& s, Backend& b) {
    ops::argmax(s, b.alloc_tensor(DType::f32, {3, 10}), b.alloc_tensor(DType::f32, {3}));
  });
  expect_op_error("argmax", [](GraphSession& s, Backend& b) {
    ops::argmax(s, b.alloc_tensor(DType::f32, {3, 10}), b.alloc_tensor(DType::i32, {2}));
  });
}

}  // namespace onepass::testing

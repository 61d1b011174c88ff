// Op cases: rms_norm (with/without weight, fused with mul), add, mul, scale, copy.
#include <cmath>

#include "support/op_harness.h"

namespace onepass::testing {
namespace {

std::string shape_name(int64_t rows, int64_t cols) { return cat(rows, "x", cols); }

// Row shapes covering one element, one row, odd sizes and sizes past block boundaries.
const std::vector<std::pair<int64_t, int64_t>> kRowShapes = {
    {1, 1}, {1, 333}, {7, 333}, {3, 4097}, {64, 576}, {130, 31}};

std::vector<double> rms_norm_reference(const std::vector<double>& x, const std::vector<double>* w,
                                       const std::vector<double>* s, bool s_broadcast, int64_t rows,
                                       int64_t cols, double eps) {
  std::vector<double> out(x.size());
  for (int64_t r = 0; r < rows; ++r) {
    double sum = 0;
    for (int64_t c = 0; c < cols; ++c) sum += x[r * cols + c] * x[r * cols + c];
    const double inv = 1.0 / std::sqrt(sum / static_cast<double>(cols) + eps);
    for (int64_t c = 0; c < cols; ++c) {
      double v = x[r * cols + c] * inv;
      if (w) v *= (*w)[c];
      if (s) v *= (*s)[(s_broadcast ? 0 : r) * cols + c];
      out[r * cols + c] = v;
    }
  }
  return out;
}

}  // namespace

ONEPASS_OP_CASES(norm) {
  for (DType t : kFloatTypes) {
    for (auto [rows, cols] : kRowShapes) {
      const std::string shape = shape_name(rows, cols);
      cases.push_back({cat("rms_norm/", dtype_name(t), "/", shape), [=](OpContext& c) {
        TensorView x = c.random_input(t, {rows, cols});
        TensorView w = c.random_input(DType::f32, {cols}, 0.5f, 1.5f);
        TensorView out = c.output(t, {rows, cols});
        ops::rms_norm(c.session(), x, w, out, 1e-5f);
        c.run();
        c.expect_near(out, rms_norm_reference(c.host(x), &c.host(w), nullptr, false, rows, cols, 1e-5),
                      tolerance(t));
      }});
      cases.push_back({cat("rms_norm_no_weight/", dtype_name(t), "/", shape), [=](OpContext& c) {
        TensorView x = c.random_input(t, {rows, cols}, -4.0f, 4.0f);
        TensorView out = c.output(t, {rows, cols});
        ops::rms_norm_no_weight(c.session(), x, out, 1e-6f);
        c.run();
        c.expect_near(out, rms_norm_reference(c.host(x), nullptr, nullptr, false, rows, cols, 1e-6),
                      tolerance(t));
      }});
      for (bool broadcast : {false, true}) {
        cases.push_back({cat("rms_norm_mul/", dtype_name(t), "/", shape, broadcast ? "/bcast" : ""),
                         [=](OpContext& c) {
          TensorView x = c.random_input(t, {rows, cols});
          TensorView w = c.random_input(DType::f32, {cols}, 0.5f, 1.5f);
          TensorView s = c.random_input(t, {broadcast ? 1 : rows, cols});
          TensorView out = c.output(t, {rows, cols});
          ops::rms_norm_mul(c.session(), x, w, s, out, 1e-5f);
          c.run();
          c.expect_near(out,
                        rms_norm_reference(c.host(x), &c.host(w), &c.host(s), broadcast, rows, cols, 1e-5),
                        tolerance(t));
        }});
      }
    }
    // Strided rows (padding between rows).
    cases.push_back({cat("rms_norm/", dtype_name(t), "/strided_5x100"), [=](OpContext& c) {
      TensorView x = c.random_input_strided(t, {5, 100}, 13);
      TensorView w = c.random_input(DType::f32, {100});
      TensorView out = c.output(t, {5, 100});
      ops::rms_norm(c.session(), x, w, out, 1e-5f);
      c.run();
      c.expect_near(out, rms_norm_reference(c.host(x), &c.host(w), nullptr, false, 5, 100, 1e-5),
                    tolerance(t));
    }});
  }
}

ONEPASS_OP_CASES(elementwise) {
  for (DType t : kFloatTypes) {
    for (auto [rows, cols] : kRowShapes) {
      const std::string shape = shape_name(rows, cols);
      for (bool broadcast : {false, true}) {
        for (const char* op : {"add", "mul"}) {
          const std::string name = cat(op, "/", dtype_name(t), "/", shape, broadcast ? "/bcast" : "");
          const bool is_add = std::string(op) == "add";
          cases.push_back({name, [=](OpContext& c) {
            TensorView a = c.random_input(t, {rows, cols}, -2.0f, 2.0f);
            TensorView b = c.random_input(t, {broadcast ? 1 : rows, cols}, -2.0f, 2.0f);
            TensorView out = c.output(t, {rows, cols});
            if (is_add) {
              ops::add(c.session(), a, b, out);
            } else {
              ops::mul(c.session(), a, b, out);
            }
            c.run();
            std::vector<double> ref(static_cast<size_t>(rows * cols));
            for (int64_t r = 0; r < rows; ++r) {
              for (int64_t k = 0; k < cols; ++k) {
                const double x = c.host(a)[r * cols + k];
                const double y = c.host(b)[(broadcast ? 0 : r) * cols + k];
                ref[r * cols + k] = is_add ? x + y : x * y;
              }
            }
            c.expect_near(out, ref, tolerance(t, 1e-6));
          }});
        }
      }
      cases.push_back({cat("scale/", dtype_name(t), "/", shape), [=](OpContext& c) {
        TensorView x = c.random_input(t, {rows, cols}, -3.0f, 3.0f);
        TensorView out = c.output(t, {rows, cols});
        ops::scale(c.session(), x, -0.375f, out);
        c.run();
        std::vector<double> ref = c.host(x);
        for (double& v : ref) v *= -0.375;
        c.expect_near(out, ref, tolerance(t, 1e-6));
      }});
    }
    cases.push_back({cat("add/", dtype_name(t), "/strided_9x77"), [=](OpContext& c) {
      TensorView a = c.random_input_strided(t, {9, 77}, 3);
      TensorView b = c.random_input_strided(t, {9, 77}, 5);
      TensorView out = c.output(t, {9, 77});
      ops::add(c.session(), a, b, out);
      c.run();
      std::vector<double> ref(c.host(a));
      for (size_t i = 0; i < ref.size(); ++i) ref[i] += c.host(b)[i];
      c.expect_near(out, ref, tolerance(t, 1e-6));
    }});
  }
}

ONEPASS_OP_CASES(copy) {
  for (DType from : kFloatTypes) {
    for (DType to : kFloatTypes) {
      for (auto [rows, cols] : std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {3, 4097}, {33, 65}}) {
        cases.push_back({cat("copy/", dtype_name(from), "_", dtype_name(to), "/", shape_name(rows, cols)),
                         [=](OpContext& c) {
          TensorView src = c.random_input(from, {rows, cols}, -100.0f, 100.0f);
          TensorView dst = c.output(to, {rows, cols});
          ops::copy(c.session(), src, dst);
          c.run();
          // Conversion must round to nearest: exactly the reference rounding.
          c.expect_near(dst, rounded(to, c.host(src)), Tolerance{0.0, 0.0});
        }});
      }
    }
  }
  for (int64_t bytes : {1, 15, 16, 4099, 100000}) {
    cases.push_back({cat("copy_bytes/", bytes), [=](OpContext& c) {
      std::vector<uint8_t> data(static_cast<size_t>(bytes));
      for (uint8_t& b : data) b = static_cast<uint8_t>(c.rng()());
      TensorView src = c.input_bytes(DType::u8, {bytes}, data);
      TensorView dst = c.output(DType::u8, {bytes});
      ops::copy_bytes(c.session(), src.view, dst.view);
      c.run();
      c.expect_bytes(dst, data);
    }});
  }
  cases.push_back({"copy/f32_f16/reshape_6x10_to_4x15", [](OpContext& c) {
    TensorView src = c.random_input(DType::f32, {6, 10});
    TensorView dst = c.output(DType::f16, {4, 15});
    ops::copy(c.session(), src, dst);
    c.run();
    c.expect_near(dst, rounded(DType::f16, c.host(src)), Tolerance{0.0, 0.0});
  }});
}

}  // namespace onepass::testing

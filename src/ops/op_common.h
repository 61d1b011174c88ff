// Helpers shared by the op implementations: argument validation and launch shapes.
// Internal to src/ops.
#pragma once

#include <string>
#include <string_view>

#include "onepass/core/error.h"
#include "onepass/core/tensor.h"
#include "onepass/exec/backend.h"
#include "onepass/exec/kernel.h"

namespace onepass::ops::detail {

/// "<base>_<dtype>", e.g. kernel_name("rms_norm", f16) == "rms_norm_f16".
inline std::string kernel_name(std::string_view base, DType t) {
  return cat(base, "_", dtype_name(t));
}

inline void require_float(const TensorView& t, std::string_view op, std::string_view what) {
  check(dtype_is_float(t.dtype), op, what, " must be f32, f16 or bf16, got ", dtype_name(t.dtype));
}

inline void require_dtype(const TensorView& t, DType expected, std::string_view op,
                          std::string_view what) {
  check(t.dtype == expected, op, what, " must be ", dtype_name(expected), ", got ",
        dtype_name(t.dtype));
}

inline void require_same_dtype(const TensorView& a, const TensorView& b, std::string_view op,
                               std::string_view what_a, std::string_view what_b) {
  check(a.dtype == b.dtype, op, what_a, " is ", dtype_name(a.dtype), " but ", what_b, " is ",
        dtype_name(b.dtype));
}

inline void require_same_shape(const TensorView& a, const TensorView& b, std::string_view op,
                               std::string_view what_a, std::string_view what_b) {
  check(a.rows() == b.rows() && a.cols() == b.cols(), op, what_b, " has shape ", b.shape.str(),
        ", expected ", a.shape.str(), " like ", what_a);
}

inline void require_data(const TensorView& t, std::string_view op, std::string_view what) {
  check(static_cast<bool>(t.view), op, what, " has no buffer");
}

/// Row stride in elements; throws when the byte stride is not a whole number of elements.
inline int64_t element_stride(const TensorView& t, std::string_view op, std::string_view what) {
  const size_t elem = dtype_size(t.dtype);
  check(!dtype_is_quantized(t.dtype) && t.row_stride % elem == 0, op, what, " row stride ",
        t.row_stride, " is not a multiple of the element size ", elem);
  return static_cast<int64_t>(t.row_stride / elem);
}

/// True on the CPU backend (launch shapes differ per backend).
inline bool on_cpu(const Backend& backend) { return backend.kind() == BackendKind::cpu; }

/// Grid for elementwise kernels over `elements` values: CPU blocks of 4096 values, CUDA
/// blocks of 256 threads, each handling 4 values with a grid-stride loop.
LaunchDims elementwise_dims(const Backend& backend, int64_t elements);

/// One block per row (norms, softmax): CPU one row per block; CUDA `threads` per block.
LaunchDims row_dims(const Backend& backend, int64_t rows, int64_t cols);

}  // namespace onepass::ops::detail

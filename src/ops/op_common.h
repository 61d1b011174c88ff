// Helpers shared by the op implementations: argument validation and the kernel request.
// Internal to src/ops.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "onepass/core/error.h"
#include "onepass/core/tensor.h"
#include "onepass/exec/backend.h"
#include "onepass/exec/kernel.h"
#include "onepass/exec/kernel_choice.h"
#include "onepass/exec/dispatch.h"

namespace onepass::ops::detail {

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

/// The backend's kernel for `request` (with `args` as its argument struct, which the
/// backend may complete) as a dispatch of `kind` labelled with the op; throws when the
/// backend has none. `choice` receives the backend's answer (early operands, merge step).
template <typename Args>
Dispatch plan_dispatch(const Backend& backend, KernelRequest request, Args& args, OpKind kind,
                       KernelChoice* choice = nullptr) {
  request.args = &args;
  request.args_size = sizeof(Args);
  const KernelChoice c = backend.choose_kernel(request);
  check(c.kernel != nullptr, request.op, "the ", backend_name(backend.kind()), " backend has no kernel for ",
        request.op, " on ", dtype_name(request.type));
  Dispatch d(*c.kernel, c.dims, args, kind, std::string(request.op));
  d.op = request.op;
  d.type = request.type;
  if (choice != nullptr) *choice = c;
  return d;
}

/// A fusion rule's dispatch: the backend's kernel for the fused op, or nullopt when it
/// has none (the pair then stays unfused). The fuse pass fills in reads and writes.
template <typename Args>
std::optional<Dispatch> plan_fused(const Backend& backend, KernelRequest request, Args& args, OpKind kind,
                                   KernelChoice* choice = nullptr) {
  request.args = &args;
  request.args_size = sizeof(Args);
  const KernelChoice c = backend.choose_kernel(request);
  if (c.kernel == nullptr) return std::nullopt;
  Dispatch d(*c.kernel, c.dims, args, kind);
  d.op = request.op;
  d.type = request.type;
  if (choice != nullptr) *choice = c;
  return d;
}

/// Declares a read of `t`, early when the backend's choice lists `operand` among the
/// operands its kernel reads before its programmatic-launch wait.
template <typename View>
void read_operand(Dispatch& d, const KernelChoice& choice, uint32_t operand, const View& t) {
  if ((choice.early_operands & operand) != 0) {
    d.read_early(t);
  } else {
    d.read(t);
  }
}

}  // namespace onepass::ops::detail

#include "onepass/core/tensor.h"

#include "onepass/core/error.h"

namespace onepass {

Shape::Shape(std::initializer_list<int64_t> dims) {
  check(dims.size() <= static_cast<size_t>(kMaxDims), "Shape", "at most ", kMaxDims,
        " dimensions, got ", dims.size());
  for (int64_t d : dims) {
    check(d >= 0, "Shape", "negative dimension ", d);
    dims_[static_cast<size_t>(ndim_++)] = d;
  }
}

int64_t Shape::numel() const {
  int64_t n = 1;
  for (int i = 0; i < ndim_; ++i) {
    if (__builtin_mul_overflow(n, dims_[static_cast<size_t>(i)], &n)) {
      fail("Shape", str(), " has more elements than int64 holds");
    }
  }
  return n;
}

int64_t Shape::rows() const {
  int64_t n = 1;
  for (int i = 0; i + 1 < ndim_; ++i) {
    if (__builtin_mul_overflow(n, dims_[static_cast<size_t>(i)], &n)) {
      fail("Shape", str(), " has more rows than int64 holds");
    }
  }
  return n;
}

std::string Shape::str() const {
  std::string out = "[";
  for (int i = 0; i < ndim_; ++i) {
    if (i) out += ", ";
    out += std::to_string(dims_[static_cast<size_t>(i)]);
  }
  return out + "]";
}

bool operator==(const Shape& a, const Shape& b) {
  if (a.ndim_ != b.ndim_) return false;
  for (int i = 0; i < a.ndim_; ++i) {
    if (a.dims_[static_cast<size_t>(i)] != b.dims_[static_cast<size_t>(i)]) return false;
  }
  return true;
}

TensorView::TensorView(BufferView view_in, DType dtype_in, Shape shape_in)
    : TensorView(std::move(view_in), dtype_in, shape_in, dtype_bytes(dtype_in, shape_in.cols())) {}

TensorView::TensorView(BufferView view_in, DType dtype_in, Shape shape_in, uint64_t stride)
    : view(std::move(view_in)), dtype(dtype_in), shape(shape_in), row_stride(stride) {
  check(row_stride >= row_bytes(), "TensorView", "row stride ", row_stride,
        " is smaller than a row of ", row_bytes(), " bytes");
  check(span_bytes() <= view.size(), "TensorView", "tensor ", shape.str(), " ",
        dtype_name(dtype), " needs ", span_bytes(), " bytes, view has ", view.size());
}

size_t TensorView::span_bytes() const {
  const int64_t n_rows = rows();
  if (n_rows == 0 || cols() == 0) return 0;
  return static_cast<size_t>(n_rows - 1) * row_stride + row_bytes();
}

MemRange TensorView::range() const {
  const uint64_t begin = view.address();
  return {begin, begin + span_bytes()};
}

TensorView TensorView::rows_slice(int64_t first, int64_t count) const {
  check(first >= 0 && count >= 0 && first + count <= rows(), "TensorView::rows_slice", "rows [",
        first, ", ", first + count, ") outside ", rows(), " rows");
  const size_t offset = static_cast<size_t>(first) * row_stride;
  const size_t bytes =
      count == 0 ? 0 : static_cast<size_t>(count - 1) * row_stride + row_bytes();
  return TensorView(view.slice(offset, bytes), dtype, Shape{count, cols()}, row_stride);
}

TensorView TensorView::reshaped(Shape new_shape) const {
  check(contiguous(), "TensorView::reshaped", "tensor with padded rows cannot be reshaped");
  check(new_shape.numel() == numel(), "TensorView::reshaped", "cannot view ", shape.str(),
        " as ", new_shape.str());
  return TensorView(view, dtype, new_shape);
}

std::string TensorView::describe() const {
  return cat(dtype_name(dtype), shape.str(), contiguous() ? "" : " strided");
}

}  // namespace onepass

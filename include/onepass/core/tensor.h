// TensorView: a BufferView plus dtype, shape and row stride. Ops take and check these.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "onepass/core/buffer.h"
#include "onepass/core/dtype.h"

namespace onepass {

/// Up to 4 dimensions, outermost first, innermost (contiguous) last.
class Shape {
 public:
  static constexpr int kMaxDims = 4;
  Shape() = default;
  Shape(std::initializer_list<int64_t> dims);

  int ndim() const { return ndim_; }
  int64_t operator[](int i) const { return dims_[static_cast<size_t>(i)]; }
  int64_t& operator[](int i) { return dims_[static_cast<size_t>(i)]; }
  int64_t numel() const;
  /// Innermost extent (1 for a scalar shape).
  int64_t cols() const { return ndim_ == 0 ? 1 : dims_[static_cast<size_t>(ndim_ - 1)]; }
  /// Product of all dimensions but the innermost.
  int64_t rows() const;
  std::string str() const;
  friend bool operator==(const Shape& a, const Shape& b);

 private:
  std::array<int64_t, kMaxDims> dims_{};
  int ndim_ = 0;
};

/// A typed, shaped window into a buffer. Rows (all dims but the innermost) are
/// `row_stride` bytes apart; within a row elements are contiguous.
struct TensorView {
  BufferView view;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t row_stride = 0;  // bytes between consecutive rows

  TensorView() = default;
  /// Contiguous tensor over `view`; throws when the view is too small.
  TensorView(BufferView view, DType dtype, Shape shape);
  TensorView(BufferView view, DType dtype, Shape shape, uint64_t row_stride);

  int64_t rows() const { return shape.rows(); }
  int64_t cols() const { return shape.cols(); }
  int64_t numel() const { return shape.numel(); }
  /// Bytes of one row's data (without padding).
  size_t row_bytes() const { return dtype_bytes(dtype, cols()); }
  bool contiguous() const { return row_stride == row_bytes(); }
  /// Bytes spanned from the first to the last byte of the tensor.
  size_t span_bytes() const;
  void* data() const { return view.data(); }
  /// The memory range the tensor touches (used for dependency tracking).
  MemRange range() const;

  /// Rows [first, first+count) of the tensor seen as 2-D {rows, cols}.
  TensorView rows_slice(int64_t first, int64_t count) const;
  /// Same bytes seen with another shape (must be contiguous and hold as many elements).
  TensorView reshaped(Shape new_shape) const;
  std::string describe() const;
};

}  // namespace onepass

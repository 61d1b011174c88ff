// Element access for the CPU kernels: load any float type as f32, store f32 as any type.
#pragma once

#include <algorithm>
#include <cstdint>

#include "../cpu_launch.h"
#include "onepass/core/dtype.h"
#include "onepass/core/half.h"
#include "onepass/exec/kernel.h"
#include "onepass/ops/elementwise.h"

namespace onepass::cpu {

template <DType T>
struct Elem;

template <>
struct Elem<DType::f32> {
  using storage = float;
  static float load(storage v) { return v; }
  static storage store(float v) { return v; }
  static constexpr const char* name = "f32";
};

template <>
struct Elem<DType::f16> {
  using storage = uint16_t;
  static float load(storage v) { return f16_to_f32(v); }
  static storage store(float v) { return f32_to_f16(v); }
  static constexpr const char* name = "f16";
};

template <>
struct Elem<DType::bf16> {
  using storage = uint16_t;
  static float load(storage v) { return bf16_to_f32(v); }
  static storage store(float v) { return f32_to_bf16(v); }
  static constexpr const char* name = "bf16";
};

/// Visits the values of blocks [first, end) of an elementwise kernel (kCpuElementwiseBlock
/// values per block, row-major over rows x cols) as (row, col_begin, col_end) spans, so
/// inner loops run over contiguous columns and vectorise.
template <typename F>
void for_spans(int64_t rows, int64_t cols, uint64_t first, uint64_t end, F&& f) {
  const int64_t total = rows * cols;
  int64_t i = static_cast<int64_t>(first) * kCpuElementwiseBlock;
  const int64_t stop = std::min<int64_t>(total, static_cast<int64_t>(end) * kCpuElementwiseBlock);
  while (i < stop) {
    const int64_t r = i / cols;
    const int64_t c0 = i % cols;
    const int64_t c1 = std::min<int64_t>(cols, c0 + (stop - i));
    f(r, c0, c1);
    i += c1 - c0;
  }
}

/// A Kernel entry for a CPU function taking `Args`.
template <typename Args>
Kernel make_cpu_kernel(std::string name, CpuKernelFn fn) {
  Kernel k;
  k.name = std::move(name);
  k.args_size = sizeof(Args);
  k.cpu = fn;
  return k;
}

/// Calls f(std::integral_constant-like tag) for f32, f16 and bf16, for registering the
/// three instantiations of a kernel template in one line.
template <typename F>
void for_each_float_type(F&& f) {
  f.template operator()<DType::f32>();
  f.template operator()<DType::f16>();
  f.template operator()<DType::bf16>();
}

}  // namespace onepass::cpu

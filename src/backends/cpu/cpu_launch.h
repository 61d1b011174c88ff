// Launch shapes of the CPU kernels: how the grid a kernel runs is cut into blocks. A
// block is the unit of work a pool thread takes; every output element is computed by one
// block, so results do not depend on how blocks are spread over threads.
#pragma once

#include <cstdint>

namespace onepass::cpu {

/// Elementwise kernels and conversions: values per block (the flattened [rows, cols]).
inline constexpr int64_t kCpuElementwiseBlock = 4096;
/// copy_bytes: bytes per block.
inline constexpr uint64_t kCpuCopyBytesBlock = 4096;
/// Matrix-vector products (at most ops::kMatmulMvMaxRows rows of x): output columns
/// (weight rows) per block; each block decodes its weight rows once for all rows of x.
inline constexpr int64_t kCpuMvRowsPerBlock = 16;
/// Matrix-matrix products: a tile of kCpuMmRowsPerBlock weight rows x kCpuMmColsPerBlock
/// rows of x per block (weights dequantized to f32 once per tile).
inline constexpr int64_t kCpuMmRowsPerBlock = 16;
inline constexpr int64_t kCpuMmColsPerBlock = 64;

/// Guided scheduling of a dispatch over a pool of T threads: each task takes
/// 1 / (kCpuTasksPerThread * T) of the blocks not yet handed out (at least one block), so a
/// dispatch of B blocks makes about kCpuTasksPerThread * T * ln(B) tasks, shrinking to one
/// block at the end; threads take them one at a time from a shared counter.
inline constexpr uint64_t kCpuTasksPerThread = 2;

/// An id of the level of dispatches whose task the calling thread runs, unique in the
/// process, or 0 outside the scheduler (a kernel called directly). A dispatch's inputs do not
/// change while its level runs, so a kernel may keep what it prepares from them (the integer
/// GEMM's rounded x) for its next tasks of the same level on the same thread.
uint64_t cpu_level_id();

/// A dispatch that touches fewer bytes than this (its moved_bytes, else its declared reads
/// and writes) runs as one task on the calling thread: handing a microsecond of work to
/// another thread costs about as much as the work (the job's cache lines cross cores).
inline constexpr uint64_t kCpuOneThreadBytes = 16 << 10;

}  // namespace onepass::cpu

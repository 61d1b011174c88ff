// Launch shapes of the CUDA matrix products, shared by their host-side choice (select.cpp)
// and the kernels that rely on them (the .cu files of this folder and kernels/).
#pragma once

#include <cstdint>

#include "onepass/core/dtype.h"
#include "onepass/exec/kernel.h"

namespace onepass::cuda {

/// Rows of x from which a product on block-format or 16-bit weights runs as a cuBLAS
/// GEMM on f16 (bf16) operands (gemm_<W>_f32, Options::cublas on): below it, expanding the
/// whole weight to f16 costs more than it saves.
inline constexpr int64_t kCudaGemmMinRows = 64;

/// mv_<W>_f32 (M <= ops::kMatmulMvMaxRows): 4 warps per block, each warp two weight rows
/// at a time, a persistent grid of at most kCudaMvBlocksPerSm blocks per SM looping over
/// row pairs; x staged in dynamic shared memory once per block (block formats: int8 per 32
/// values plus a 16-byte record per group; dense weights: f32).
inline constexpr int64_t kCudaMvRowsPerBlock = 4;
inline constexpr int64_t kCudaMvBlocksPerSm = 4;  // all resident (96-124 registers x 128 threads)
inline constexpr int64_t kCudaMvSharedLimit = 100 * 1024;
/// mv_id_x8_<W>_f32 (matmul_id of one token on block formats): outputs per block, two per
/// warp; x of the block's slot staged as cuda_mv_shared_bytes(true, 1, K).
inline constexpr int64_t kCudaMvIdX8Rows = 16;
/// mm_f32_f32 on the CUDA cores: 64 x 64 tiles of out, 256 threads.
inline constexpr int64_t kCudaMmTile = 64;

/// Tensor-core mm (W != f32): tiles of out, K step and threads of a block; the dynamic
/// shared memory depends on W (the kernel's max_shared_bytes).
inline constexpr int64_t kCudaTcTileM = 64;
inline constexpr int64_t kCudaTcTileN = 64;
inline constexpr int64_t kCudaTcStepK = 64;
inline constexpr int64_t kCudaTcThreads = 128;

/// Dynamic shared memory of an mv launch.
inline int64_t cuda_mv_shared_bytes(bool quantized, int64_t m, int64_t k) {
  return quantized ? (m * k + 15) / 16 * 16 + m * (k / 32) * 16 : m * k * 4;
}

/// mv1_* (one row of x, the decode step): blocks of S warps, each its own stream of row
/// pairs, times P parts of K (block (32 S, P, 1); the P warps of a slot take the same row
/// pairs and consecutive ranges of their 1024-value chunks, and part 0 adds the sums). At
/// most kCudaMv1MaxThreads threads per block (128 registers each) and kCudaMv1MaxParts parts.
inline constexpr uint32_t kCudaMv1MaxThreads = 512;
inline constexpr int64_t kCudaMv1MaxParts = 2;
/// q6_k's mv1 body: each warp's ring of 3 stages of a row pair's 8 super-blocks (16-byte
/// words, one more for an unaligned start), in place of the other formats' staging area.
inline constexpr int64_t kCudaMv1Q6kStageBytes = 3 * 2 * ((8 * 210 + 15) / 16 + 1) * 16;
/// Short rows: the one-unit block formats (q4_0, q4_1, q8_0) with rows of at most 32 units
/// (K <= 1024) and at least kCudaMv1ShortMinRows weight rows (an LM head) take
/// mv1_short_<W>_f32: items of two row pairs, a row per 8 lanes, each warp's weights copied
/// into a ring of kCudaMv1ShortStages stages of 4 rows (cuda_mv1_short_row_words 16-byte
/// words each), at most 8 warps per block and 2 blocks per SM. Below that row count the
/// register ring of mv1_<W>_f32 is faster (onepass bench, smollm2's products).
inline constexpr int64_t kCudaMv1ShortMinRows = 8192;
inline constexpr int64_t kCudaMv1ShortStages = 3;
inline bool cuda_mv1_short_rows(DType w, int64_t weight_rows, int64_t k) {
  return (w == DType::q4_0 || w == DType::q4_1 || w == DType::q8_0) && k <= 1024 &&
         weight_rows >= kCudaMv1ShortMinRows;
}
#if defined(__CUDACC__)
__host__ __device__
#endif
inline int64_t cuda_mv1_short_row_words(int64_t row_bytes) { return (row_bytes + 15) / 16 + 1; }
/// mv1_bulk_<W>_f32 (W = q4_0, q4_1, q8_0): the mv1 body with each warp's weight chunks
/// copied by the TMA unit (cp.async.bulk) into a ring of kCudaMv1BulkDepth shared-memory
/// slots per warp, one block of 16 warps per SM (unless K is split), for rows whose bytes
/// and start addresses are whole 16-byte words and at least kCudaMv1BulkMinK values long.
/// Dynamic shared memory up to kCudaMv1BulkSharedLimit.
inline constexpr int64_t kCudaMv1BulkMinK = 2048;
inline constexpr uint32_t kCudaMv1BulkSharedLimit = 200 * 1024;
inline constexpr int64_t kCudaMv1BulkDepth = 3;

/// Whether a product of N rows of K values (row_bytes apart, starting at `address`) of
/// type w takes mv1_bulk_<W>_f32.
bool cuda_mv1_bulk(DType w, int64_t n, int64_t k, int64_t row_bytes, uint64_t address);
/// The mv launch for N weight rows on a device with `sms` multiprocessors.
LaunchDims cuda_mv_dims(bool quantized, int64_t m, int64_t n, int64_t k, int sms);
/// The mv1 launch for N weight rows of K values (row_bytes apart) of type w on a device
/// with `sms` multiprocessors, with its dynamic shared memory (x, then each warp's staging
/// area for the block formats, or its ring for mv1_bulk); shared_bytes above
/// kCudaMvSharedLimit (kCudaMv1BulkSharedLimit for mv1_bulk): use mv_*.
LaunchDims cuda_mv1_dims(DType w, int64_t n, int64_t k, int64_t row_bytes, int sms, bool bulk = false);
/// The tensor-core mm launch for M rows of x and N weight rows.
LaunchDims cuda_mm_tc_dims(int64_t m, int64_t n, uint32_t shared_bytes);
/// mm_split_m<BM>_<W>_f32 (gemm_tc_split.cu): the tensor-core mm for a few dozen rows of x
/// (M <= 16: BM = 16, else 32) with K split among the `splits` blocks of a cluster (grid
/// {splits, N tiles, M tiles}), for products whose weight tiles alone leave SMs idle. The
/// number of splits: about kCudaMmSplitBlocksPerSm blocks per SM, at most
/// kMaxClusterBlocks, each split at least kCudaMmSplitMinK values of K; 1 means unsplit.
inline constexpr int64_t kCudaMmSplitMaxRows = 63;
inline constexpr int64_t kCudaMmSplitMinK = 512;
inline constexpr int64_t kCudaMmSplitBlocksPerSm = 3;
inline int64_t cuda_mm_split_tile_rows(int64_t m) { return m <= 16 ? 16 : 32; }
int64_t cuda_mm_splits(int64_t m, int64_t n, int64_t k, int sms);
LaunchDims cuda_mm_split_dims(int64_t m, int64_t n, int64_t splits, uint32_t shared_bytes);
/// mm_x8_<W>_f32 and mm_x8_m32_<W>_f32 (mm_x8.cu): the product of kCudaMmX8MinRows ..
/// kCudaMmX8MaxRows rows of x (one x tile of 8 rows, or 4 of them for more; the kernel pads
/// fewer rows with zeros) with block-format weights on the 8-bit integer tensor
/// cores (x rounded to int8 per 32 values, as the mv kernels do), in K stages of
/// kCudaMmX8StageK values: K a whole number of stages, weight rows whole 16-byte words (q6_k:
/// 8-byte words) at such an address. K is split among the `splits` blocks of a cluster (one
/// per stage, at most kMaxClusterBlocks; a block's int8 x, kCudaMmX8XRowBytes per row and
/// stage, fits kCudaMmX8XBytes); each block of 8 warps rounds its range of x to int8 once and
/// takes N tiles of kCudaMmX8BlockRows rows in turn; grid {splits, tile groups}, about 2
/// blocks per SM. Dynamic shared memory: a weight ring of up to kCudaMmX8RingBytes (at least
/// 3 stages) and the partial sums of cuda_mm_x8_flush_tiles tiles (together the kernel's
/// max_shared_bytes less kCudaMmX8XBytes), then that x. One split per stage up to the
/// cluster's 8: fewer, longer splits make the whole batched step slower (onepass bench
/// --parallel 8). The weights are read once per block for all rows of x and x once per
/// block for all its tiles, where the split products read x again for every 64 weight rows.
/// The rows it takes: exactly 8, and 25 to 32 for q6_k, which gemm_x8 does not take (at 16
/// rows, padded to 32, the split products are faster).
inline constexpr int64_t kCudaMmX8MinRows = 8;
inline constexpr int64_t kCudaMmX8MaxRows = 32;
inline constexpr int64_t kCudaMmX8M32MinRows = 25;
inline constexpr int64_t kCudaMmX8TileRows = 8;
inline constexpr int64_t kCudaMmX8StageK = 256;
inline constexpr int64_t kCudaMmX8BlockRows = 128;  // weight rows of a block: 16 per warp
inline constexpr int64_t kCudaMmX8RingBytes = 56 * 1024;
inline constexpr int64_t kCudaMmX8ScaleRowBytes = 144;
inline constexpr int64_t kCudaMmX8XRowBytes = kCudaMmX8StageK + 16 + kCudaMmX8ScaleRowBytes;
inline constexpr int64_t kCudaMmX8XBytes = 96 * 1024;
/// x tiles of 8 rows of a product of m rows (1 or 4), and the tiles whose partial sums a
/// cluster keeps before adding them (16 KiB of sums per block at most).
constexpr int cuda_mm_x8_tiles(int64_t m) { return m <= kCudaMmX8TileRows ? 1 : 4; }
constexpr int cuda_mm_x8_flush_tiles(int x_tiles) { return 4 / x_tiles; }
bool cuda_mm_x8(DType w, int64_t m, int64_t k, int64_t row_bytes, uint64_t address);
int64_t cuda_mm_x8_splits(int64_t m, int64_t k);
LaunchDims cuda_mm_x8_dims(int64_t m, int64_t n, int64_t k, int sms, uint32_t max_shared_bytes);
/// gemm_x8_<W>_f32 (gemm_x8.cu, a host entry point): the product of kCudaGemmX8MinRows ..
/// kCudaGemmX8MaxRows rows of x with block-format weights (not q6_k) on the 8-bit integer
/// tensor cores, x rounded to int8 per 32 values once per call; K a whole number of
/// kCudaMmX8StageK stages, weight rows whole 16-byte words at such an address. A block takes
/// a tile of weight rows by a tile of x rows and a range of the K stages (cuda_gemm_x8_splits
/// ranges), with a ring of weight and x stages in its share of kCudaGemmX8SharedBytes of
/// shared memory: 256 x 32 tiles, 2 blocks per SM, up to 32 rows of x; 128 x 32, 3 per SM,
/// up to 64; 128 x 64, 2 per SM, above (chosen by onepass bench --parallel 32, 64 and 128 on
/// llama-8b q4_0, H200: 4,304, 5,614 and 7,134 decode tok/s, where mm_x8_m32 gives 2,928
/// at 32 rows and cuBLAS 3,469 and 6,266 at 64 and 128).
inline constexpr int64_t kCudaGemmX8MinRows = 25;
inline constexpr int64_t kCudaGemmX8MaxRows = 256;
inline constexpr int64_t kCudaGemmX8SharedBytes = 200 * 1024;
bool cuda_gemm_x8(DType w, int64_t m, int64_t k, int64_t row_bytes, uint64_t address);
/// K ranges for `tiles` blocks' worth of tiles of `stages` stages each on `slots` resident
/// blocks: the fewest that minimise waves x stages per range.
int64_t cuda_gemm_x8_splits(int64_t tiles, int64_t stages, int slots);

}  // namespace onepass::cuda

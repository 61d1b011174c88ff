// Dense and GGML block-quantized matmul: out [M, N] = x [M, K] · wᵀ, w [N, K].
// Argument structs are shared by the CPU and CUDA kernels.
#pragma once

#include <cstdint>

#include "onepass/core/dtype.h"
#include "onepass/exec/kernel.h"

namespace onepass {
enum class BackendKind : uint8_t;
}

namespace onepass::ops {

/// Kernels (W = f32, f16, bf16, q4_0, q4_1, q8_0, q4_k, q5_k, q6_k):
///   mv_<W>_f32  matrix-vector, M <= kMatmulMvMaxRows: every weight row is read once and
///               dotted with all M rows of x.
///               CUDA: grid (ceil(N / kCudaMvRowsPerBlock), 1, 1), block (128, 1, 1): one
///               warp per output row n, its lanes striding over the row's blocks (a lane
///               takes one quant block, or 8 values of a dense row, at a time) and keeping
///               M partial sums; warp-shuffle reduction, lane 0 writes out[m, n].
///               CPU: grid (ceil(N / kCpuMvRowsPerBlock)): a block computes its columns
///               for all M rows, decoding each weight row once.
///   mv1_<W>_f32 (CUDA) mv_<W>_f32 for M = 1, the decode step: same arguments;
///               a warp's row pairs are one stream of weight chunks, 3-4 of them in flight
///               across row pairs; launch shape cuda_mv1_dims (blocks may split K).
///               The op picks it for one row of x (dense weights: when K and the rows
///               allow 16-byte loads).
///   mm_<W>_f32  matrix-matrix, larger M.
///               CUDA, W = f32: grid (ceil(N / kCudaMmTile), ceil(M / kCudaMmTile), 1),
///               block (256, 1, 1): one block per 64 x 64 tile of out on the CUDA cores,
///               K in steps of 32 staged in shared memory.
///               CUDA, other W: tensor cores (cuda_mm_tc_dims): grid (ceil(M / kCudaTcTileM),
///               ceil(N / kCudaTcTileN), 1), block (kCudaTcThreads, 1, 1), the kernel's
///               max_shared_bytes of dynamic shared memory; x rounded to f16 (bf16 for bf16 weights), block
///               formats dequantized to f16, f32 accumulation.
///               CPU: grid (ceil(N / kCpuMmRowsPerBlock), ceil(M / kCpuMmColsPerBlock)): a
///               block dequantizes its weight rows to f32 once and runs a small GEMM.
/// Both accumulate in f32. x and out are f32; w rows are K values of the weight type
/// (whole blocks), w_row_bytes apart. Every output element is computed by exactly one
/// block, so results do not depend on how blocks are spread over threads.
struct MatmulArgs {
  const float* x;       // [M, K], rows x_stride floats apart
  const void* w;        // [N, K] in the kernel's weight type
  float* out;           // [M, N], rows out_stride floats apart
  int64_t m;            // rows of x and out
  int64_t n;            // rows of w = columns of out
  int64_t k;            // reduction length (whole blocks for the block formats)
  int64_t x_stride;     // floats between rows of x (>= k)
  int64_t w_row_bytes;  // bytes between rows of w (>= the bytes of K values)
  int64_t out_stride;   // floats between rows of out (>= n)
};

/// Kernels mv_<W>_f32_fused (CUDA): the matrix-vector product with what the fusion pass
/// folds into it (ops/fusion_rules.h), each optional:
///   norm_weight  x rows are first RMS-normalised (eps) and scaled by norm_weight [K]
///   silu         out[m, j] = silu(w_j · x) * (w_{j+n} · x): w has 2n rows (gate, then up)
///   residual     out[m, j] += residual[m * residual_stride + j] (0: one broadcast row);
///                residual may be out itself
///   rope         (rope.positions set) the product is one token's Q/K/V, [q | k | v] in
///                out, and rope_kv_write (normal layout) is folded into the epilogue:
///                see MatvecRope
/// mm.n is the number of outputs per row of x. Launch shape: that of mv_<W>_f32 for the
/// weight's rows.
struct MatvecRope {
  const int32_t* positions;   // [1]: the token's position; null when no RoPE is fused
  const float* freq_factors;  // optional [rotary_dims / 2]
  void* k_cache;              // [n_kv_head, ctx, head_dim] of cache_type
  void* v_cache;
  int64_t n_head;
  int64_t n_kv_head;
  int64_t head_dim;
  int64_t ctx;
  int32_t rotary_dims;
  float theta;
  float freq_scale;
  DType cache_type;         // f32, f16 or bf16
  float* cos_sin_out;       // rope_kv_write's RopeCosSin::store: (cos, sin) per pair, else null
  const float* cos_sin_in;  // RopeCosSin::load: read before the PDL wait, else null
};
/// With `rope`, out ends as rope_kv_write leaves the product's output: q rotated in place,
/// k and v as computed; the rotated k and v go to the caches at the token's position (not
/// written when it lies outside [0, ctx)). Each warp's output pair (2i, 2i + 1) is one
/// RoPE pair, so the rotation needs no other warp.
struct FusedMatvecArgs {
  MatmulArgs mm;
  const float* norm_weight;
  float eps;
  int32_t silu;
  const float* residual;
  int64_t residual_stride;
  MatvecRope rope;
  /// Nonzero when the residual is an early read of the dispatch (matvec+add declares it):
  /// CUDA kernels may then load it before their PDL wait.
  int32_t residual_before_wait;
};

/// The op uses mv_* up to this many rows of x, mm_* beyond.
inline constexpr int64_t kMatmulMvMaxRows = 8;

/// CPU launch shapes: mv blocks own this many output columns (weight rows); mm blocks a
/// tile of kCpuMmRowsPerBlock weight rows x kCpuMmColsPerBlock rows of x.
inline constexpr int64_t kCpuMvRowsPerBlock = 16;
inline constexpr int64_t kCpuMmRowsPerBlock = 16;
inline constexpr int64_t kCpuMmColsPerBlock = 64;

/// CUDA, W != f32, at least this many rows of x, Options::cublas on: gemm_<W>_f32, a host
/// entry point (Kernel::cuda_host) that converts x to f16 (bf16), expands block-format
/// weights to f16 in backend scratch and multiplies with cublasGemmEx (f32 sums); same
/// rounding as the tensor-core mm. Below it the dequantization of the whole weight costs
/// more than it saves.
inline constexpr int64_t kCudaGemmMinRows = 64;

/// CUDA launch shapes (see MatmulArgs).
inline constexpr int64_t kCudaMvRowsPerBlock = 4;
inline constexpr int64_t kCudaMmTile = 64;

/// CUDA tensor-core mm (W != f32): tiles of out, K step and threads of a block. Its dynamic
/// shared memory depends on W (the kernel's max_shared_bytes).
inline constexpr int64_t kCudaTcTileM = 64;
inline constexpr int64_t kCudaTcTileN = 64;
inline constexpr int64_t kCudaTcStepK = 64;
inline constexpr int64_t kCudaTcThreads = 128;
/// The CUDA tensor-core mm launch for M rows of x and N weight rows.
LaunchDims cuda_mm_tc_dims(int64_t m, int64_t n, uint32_t shared_bytes);

/// Launch shape of mv_* (mv) or mm_* for M rows of x and N weight rows on a backend, as
/// documented at MatmulArgs; the MLX affine kernels use the same shapes.
LaunchDims matmul_launch_dims(BackendKind backend, bool mv, int64_t m, int64_t n);

/// CUDA mv kernels as implemented (src/backends/cuda/kernels/matmul.cu): 4 warps per
/// block, each warp two weight rows at a time, a persistent grid of at most
/// kCudaMvBlocksPerSm blocks per SM looping over row pairs. x is staged in dynamic shared
/// memory once per block: for the block formats quantized to int8 per 32 values (1.5 bytes
/// per value: the int8 values and a 16-byte record per group), for dense weights as f32.
inline constexpr int64_t kCudaMvBlocksPerSm = 4;  // all resident (96-124 registers x 128 threads)
inline constexpr int64_t kCudaMvSharedLimit = 100 * 1024;
/// Dynamic shared memory of a CUDA mv launch.
inline int64_t cuda_mv_shared_bytes(bool quantized, int64_t m, int64_t k) {
  return quantized ? (m * k + 15) / 16 * 16 + m * (k / 32) * 16 : m * k * 4;
}
/// The CUDA mv launch for N weight rows on a device with `sms` multiprocessors.
LaunchDims cuda_mv_dims(bool quantized, int64_t m, int64_t n, int64_t k, int sms);
/// mv1_* (the decode step's M = 1 kernels) as implemented: blocks of S warps, each its
/// own stream of row pairs, times P parts of K (block (32 S, P, 1); the P warps of a slot
/// take the same row pairs and consecutive ranges of their 1024-value chunks, and part 0
/// adds the sums). At most kCudaMv1MaxThreads threads per block (128 registers each) and
/// kCudaMv1MaxParts parts.
inline constexpr uint32_t kCudaMv1MaxThreads = 512;
inline constexpr int64_t kCudaMv1MaxParts = 2;
/// q6_k's mv1 body: each warp's ring of 3 stages of a row pair's 8 super-blocks (16-byte
/// words, one more for an unaligned start), in place of the other formats' staging area;
/// K is not split and fewer than 8 warps share a block when x and the rings need it.
inline constexpr int64_t kCudaMv1Q6kStageBytes = 3 * 2 * ((8 * 210 + 15) / 16 + 1) * 16;
/// Short rows: the one-unit block formats (q4_0, q4_1, q8_0) with rows of at most 32
/// units (K <= 1024) and at least kCudaMv1ShortMinRows weight rows (an LM head, such as
/// smollm2's q8_0 49152 x 576) take mv1_short_<W>_f32: items of two row pairs, a row per 8
/// lanes, each warp's weights copied into a ring of kCudaMv1ShortStages stages of 4 rows
/// (cuda_mv1_short_row_words 16-byte words each: the row and one more for an unaligned
/// start), at most 8 warps per block and 2 blocks per SM; K is not split. (For smollm2's
/// products of 576 to 3072 rows it measured 1.5% slower than mv1_<W>_f32 on an H200.)
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
/// and start addresses are whole 16-byte words and at least kCudaMv1BulkMinK values long
/// (the llama-1b products and LM head; smollm2's rows are shorter). Dynamic shared memory
/// up to kCudaMv1BulkSharedLimit.
inline constexpr int64_t kCudaMv1BulkMinK = 2048;
inline constexpr uint32_t kCudaMv1BulkSharedLimit = 200 * 1024;
inline constexpr int64_t kCudaMv1BulkDepth = 3;
bool cuda_mv1_bulk(DType w, int64_t n, int64_t k, int64_t row_bytes, uint64_t address);
/// The mv1 launch for N weight rows of K values (row_bytes apart) of type w on a device
/// with `sms` multiprocessors, with its dynamic shared memory (x, then each warp's staging
/// area for the block formats, or its ring for mv1_bulk); shared_bytes above
/// kCudaMvSharedLimit (kCudaMv1BulkSharedLimit for mv1_bulk): use mv_*.
LaunchDims cuda_mv1_dims(DType w, int64_t n, int64_t k, int64_t row_bytes, int sms, bool bulk = false);

}  // namespace onepass::ops

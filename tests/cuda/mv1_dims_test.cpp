// cuda::cuda_mv1_dims, the launch shape of the CUDA one-row products (decode): a host
// function, so its promises to the kernels in src/backends/cuda/matmul/ are checked here
// without a GPU (in every build with the CUDA backend).
#include <gtest/gtest.h>

#include "onepass/core/dtype.h"
#include "onepass/ops/matmul.h"

#if ONEPASS_HAVE_CUDA
#include "backends/cuda/matmul/launch.h"

namespace onepass {
namespace {

constexpr int kSms = 132;  // H100 / H200
// Shared memory per SM on sm_90 (228 KB) less the 1 KB the runtime keeps per block.
constexpr int64_t kSmSharedPerBlockPair = 2 * (227 * 1024);

int64_t row_bytes(DType t, int64_t k) { return static_cast<int64_t>(dtype_bytes(t, k)); }

TEST(CudaMv1Dims, EveryShapeKeepsTheKernelsLimits) {
  for (DType t : {DType::f32, DType::f16, DType::bf16, DType::q4_0, DType::q4_1, DType::q8_0, DType::q4_k,
                  DType::q5_k, DType::q6_k, DType::q5_0, DType::q5_1, DType::q2_k, DType::q3_k, DType::iq4_nl,
                  DType::iq4_xs}) {
    for (int64_t n : {1, 7, 576, 2048, 3072, 16384, 128256}) {
      for (int64_t k : {256, 576, 2048, 2560, 8192, 14336}) {
        if (k % dtype_block_elems(t) != 0) continue;
        SCOPED_TRACE(::testing::Message() << dtype_name(t) << " n " << n << " k " << k);
        const LaunchDims d = cuda::cuda_mv1_dims(t, n, k, row_bytes(t, k), kSms);
        EXPECT_GE(d.grid.x, 1u);
        EXPECT_LE(d.grid.x, 2u * kSms);
        EXPECT_EQ(d.block.x % 32, 0u);
        EXPECT_GE(d.block.x, 32u);
        EXPECT_LE(d.block.x * d.block.y, cuda::kCudaMv1MaxThreads);
        EXPECT_LE(d.block.y, static_cast<uint32_t>(cuda::kCudaMv1MaxParts));
        // Split K: one named barrier per slot (barrier 0 is __syncthreads'), so 15 slots at most.
        if (d.block.y > 1) {
          EXPECT_LE(d.block.x, 32u * 15);
        }
      }
    }
  }
}

// q6_k's body gives each warp a ring of kCudaMv1Q6kStageBytes after x, never splits K, and
// takes fewer warps when x and 8 rings would pass the shared-memory limit.
TEST(CudaMv1Dims, Q6kRingsFitTheSharedMemoryLimit) {
  struct Case {
    int64_t n, k;
    uint32_t warps;  // expected block.x / 32
  };
  // llama-1b's LM head (K = 2048), an 8B model's rows (4096) and down product (14336).
  for (const Case& c : {Case{128256, 2048, 8}, Case{4096, 4096, 8}, Case{4096, 14336, 7}}) {
    SCOPED_TRACE(::testing::Message() << "n " << c.n << " k " << c.k);
    const LaunchDims d = cuda::cuda_mv1_dims(DType::q6_k, c.n, c.k, row_bytes(DType::q6_k, c.k), kSms);
    EXPECT_EQ(d.block.x, 32 * c.warps);
    EXPECT_EQ(d.block.y, 1u);
    const int64_t x_bytes = cuda::cuda_mv_shared_bytes(true, 1, c.k);
    EXPECT_EQ(d.shared_bytes, x_bytes + c.warps * cuda::kCudaMv1Q6kStageBytes);
    EXPECT_LE(d.shared_bytes, cuda::kCudaMvSharedLimit);
    // Two blocks per SM, as the kernel's 128-register budget assumes.
    EXPECT_LE(2 * int64_t{d.shared_bytes}, kSmSharedPerBlockPair);
  }
  // Rows so long that x alone leaves no room for a ring: past the limit, so the op takes
  // the general mv kernel instead.
  const int64_t k = 64 * 1024;
  EXPECT_GT(cuda::cuda_mv1_dims(DType::q6_k, 4096, k, row_bytes(DType::q6_k, k), kSms).shared_bytes,
            cuda::kCudaMvSharedLimit);
}

// The short-row kernels (mv1_short_*: one-unit formats, K <= 1024, >= 8192 rows) give
// each warp a ring of 3 stages of 4 rows after x, take two row pairs per warp item, never
// split K, and keep 8 warps while the rings fit (smollm2's LM head, K = 576) or fewer.
TEST(CudaMv1Dims, ShortRowRingsFitTheSharedMemoryLimit) {
  for (DType t : {DType::q4_0, DType::q4_1, DType::q8_0}) {
    for (int64_t k : {32, 576, 1024}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " k " << k);
      const int64_t n = 49152;
      ASSERT_TRUE(cuda::cuda_mv1_short_rows(t, n, k));
      const LaunchDims d = cuda::cuda_mv1_dims(t, n, k, row_bytes(t, k), kSms);
      const uint32_t warps = d.block.x / 32;
      EXPECT_EQ(d.block.y, 1u);
      EXPECT_GE(warps, 1u);
      EXPECT_LE(warps, 8u);
      const int64_t ring = cuda::kCudaMv1ShortStages * 4 * cuda::cuda_mv1_short_row_words(row_bytes(t, k)) * 16;
      EXPECT_EQ(d.shared_bytes, cuda::cuda_mv_shared_bytes(true, 1, k) + warps * ring);
      EXPECT_LE(d.shared_bytes, cuda::kCudaMvSharedLimit);
      EXPECT_LE(2 * int64_t{d.shared_bytes}, kSmSharedPerBlockPair);
      if (k <= 576) {
        EXPECT_EQ(warps, 8u);
      }
      // Enough warps for every item of two row pairs, or all that 2 blocks per SM hold.
      const int64_t items = (n / 2 + 1) / 2;
      EXPECT_EQ(int64_t{d.grid.x}, std::min<int64_t>((items + warps - 1) / warps, 2 * kSms));
    }
  }
  // Not short: longer rows, fewer rows, other formats.
  EXPECT_FALSE(cuda::cuda_mv1_short_rows(DType::q8_0, 49152, 1056));
  EXPECT_FALSE(cuda::cuda_mv1_short_rows(DType::q8_0, 3072, 576));
  EXPECT_FALSE(cuda::cuda_mv1_short_rows(DType::q6_k, 49152, 512));
  EXPECT_FALSE(cuda::cuda_mv1_short_rows(DType::f16, 49152, 576));
}

// The TMA-ring kernels (mv1_bulk_*: one-unit formats, rows of whole aligned 16-byte words,
// K >= kCudaMv1BulkMinK): the llama-1b shapes qualify and smollm2's do not; one block of
// 16 warps per SM (or the K split's 2 x 8), kCudaMv1BulkDepth slots of both rows' chunk
// per warp after x, within the kernels' shared-memory limit and one SM.
TEST(CudaMv1Dims, BulkRingsFitOneSm) {
  for (DType t : {DType::q4_0, DType::q4_1, DType::q8_0}) {
    SCOPED_TRACE(dtype_name(t));
    EXPECT_FALSE(cuda::cuda_mv1_bulk(t, 960, 576, row_bytes(t, 576), 0)) << "smollm2's rows";
    EXPECT_FALSE(cuda::cuda_mv1_bulk(t, 2048, 2048, row_bytes(t, 2048), 8)) << "an unaligned start";
    EXPECT_FALSE(cuda::cuda_mv1_bulk(DType::q6_k, 2048, 2048, row_bytes(DType::q6_k, 2048), 0)) << "q6_k";
    const int64_t chunk_bytes = 1024 / dtype_block_elems(t) * static_cast<int64_t>(dtype_size(t));
    EXPECT_EQ(chunk_bytes % 16, 0);
    for (int64_t n : {2048, 3072, 16384, 128256}) {
      for (int64_t k : {2048, 8192}) {
        SCOPED_TRACE(::testing::Message() << "n " << n << " k " << k);
        ASSERT_TRUE(cuda::cuda_mv1_bulk(t, n, k, row_bytes(t, k), 0));
        const LaunchDims d = cuda::cuda_mv1_dims(t, n, k, row_bytes(t, k), kSms, true);
        const int64_t warps = d.block.x / 32 * d.block.y;
        EXPECT_EQ(warps, 16);
        EXPECT_LE(d.grid.x, static_cast<uint32_t>(kSms));
        EXPECT_EQ(d.shared_bytes,
                  cuda::cuda_mv_shared_bytes(true, 1, k) + warps * cuda::kCudaMv1BulkDepth * 2 * chunk_bytes);
        EXPECT_LE(d.shared_bytes, cuda::kCudaMv1BulkSharedLimit);
      }
    }
  }
}

}  // namespace
}  // namespace onepass

#endif  // ONEPASS_HAVE_CUDA

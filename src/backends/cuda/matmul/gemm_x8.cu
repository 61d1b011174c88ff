// CUDA host entry points gemm_x8_<W>_f32 (Kernel::cuda_host): the product of a few dozen
// to a few hundred rows of x (batched decode steps of many sequences, cuda_gemm_x8) with
// block-format weights on the 8-bit integer tensor cores, out [M, N] = x [M, K] · wᵀ.
//
// x_to_int8_kernel rounds x to int8 once per call into scratch slot 0, as the other integer
// products do (each 32 values of a row with one scale d = amax / 127, their exact f32 sum,
// and z, which folds the conversion of the int32 sum and the format's offset into one fma).
// It writes the layout the product copies into shared memory: for each tile of MT rows and
// stage of 256 values, the rows' int8 values, then (d, z) of each unit, unit-major, so that
// two adjacent rows' pairs are one 16-byte load, then Σ x of each unit (formats with a min).
// Rows past M are zeros.
//
// gemm_x8_kernel: a block takes one tile of weight rows by a tile of x rows and one range of
// K stages (grid {x tiles, weight tiles, splits}, x tiles fastest, so that the blocks that
// read the same weights run together). Its warps split the tile into 32 weight rows by 8 NTW
// rows of x each: a warp decodes each 32-value unit of its rows once into two A fragments
// and multiplies them by its NTW x tiles of 8 rows. Weight and x stages stream through one
// cp.async ring. An unsplit product stores its sums; with K split, each split stores its
// partial sums in scratch slot 1 and sum_splits_kernel adds them in split order, so every
// run gives the same sums.
#include <atomic>
#include <cstring>
#include <string>

#include "../cuda_check.h"
#include "../host_context.h"
#include "../kernels/ptx.cuh"
#include "../kernels/registration.h"
#include "onepass/ops/matmul.h"
#include "x8_units.cuh"

namespace onepass::cuda {
namespace {

using ptx::cp_async16;
using ptx::cp_async_commit;
using ptx::cp_async_wait;
using ptx::smem_addr;
using x8::biased;
using x8::kIntBias;
using x8::kStageK;
using x8::ld_u32;
using x8::Unit;
using x8::WeightStage;
using x8::X8;

constexpr int kQuantThreads = 256;
constexpr int kXPitch = kStageK + 16;  // int8 x of a row in shared memory: 4 (mod 8) words
// Bytes per row and stage in the scratch layout: int8 values, (d, z), Σ x.
constexpr int kXBytes = kStageK, kDzBytes = 8 * 8, kSumBytes = 8 * 4;
constexpr int kImageRowBytes = kXBytes + kDzBytes + kSumBytes;

// A block's shape: WN warps along the weight rows (32 rows each) by WM along x (NTW x tiles
// of 8 rows each), MINB blocks per SM.
template <int NTW, int WN, int WM, int MINB>
struct Shape {
  static constexpr int ntw = NTW, wn = WN, wm = WM, minb = MINB;
  static constexpr int threads = 32 * WN * WM;
  static constexpr int weight_rows = 32 * WN;
  static constexpr int rows = 8 * NTW * WM;                                   // of x
  static constexpr int image_bytes = rows * kImageRowBytes;                   // one stage in scratch
  static constexpr int smem_bytes = rows * (kXPitch + kDzBytes + kSumBytes);  // ... in shared memory
};

// The ring: stages of weights and x, as many as a block's share of kCudaGemmX8SharedBytes
// holds (2 to 4).
template <DType W, typename B>
struct Ring {
  static constexpr int slot_bytes = WeightStage<W, B::weight_rows>::stage_bytes + B::smem_bytes;
  static constexpr int fit = static_cast<int>(kCudaGemmX8SharedBytes) / B::minb / slot_bytes;
  static constexpr int stages = fit < 2 ? 2 : fit > 4 ? 4 : fit;
  static constexpr int bytes = stages * slot_bytes;
};

// Rounds x [M, K] into the scratch layout of MT-row tiles: a warp per (row, stage), 8
// values per lane, 4 lanes per unit.
template <int MT>
__global__ void __launch_bounds__(kQuantThreads)
    x_to_int8_kernel(const float* x, int64_t x_stride, int64_t m, int64_t stages, int64_t tiles, float kc,
                     unsigned char* image) {
  const int lane = static_cast<int>(threadIdx.x) & 31;
  const int64_t item = (int64_t{blockIdx.x} * kQuantThreads + threadIdx.x) >> 5;
  if (item >= tiles * MT * stages) return;
  const int64_t s = item % stages;
  const int64_t row = item / stages;  // of the padded rows
  const int64_t tile = row / MT;
  const int r = static_cast<int>(row % MT);
  const int j = lane >> 2;
  float v[8] = {};
  if (row < m) {
    const float* src = x + row * x_stride + s * kStageK + 8 * lane;
    if (x_stride % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0) {
      const float4 a = reinterpret_cast<const float4*>(src)[0], b = reinterpret_cast<const float4*>(src)[1];
      v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    } else {
#pragma unroll
      for (int e = 0; e < 8; ++e) v[e] = src[e];
    }
  }
  float amax = 0.0f, sum = 0.0f;
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    amax = fmaxf(amax, fabsf(v[e]));
    sum += v[e];
  }
#pragma unroll
  for (int o = 1; o < 4; o <<= 1) {
    amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
    sum += __shfl_xor_sync(0xffffffffu, sum, o);
  }
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f;
  uint32_t words[2] = {0u, 0u};
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    const int q = max(-127, min(127, __float2int_rn(v[e] * inv)));
    words[e >> 2] |= (static_cast<uint32_t>(q) & 0xFFu) << (8 * (e & 3));
  }
  unsigned char* img = image + (tile * stages + s) * int64_t{MT * kImageRowBytes};
  *reinterpret_cast<uint2*>(img + r * kXBytes + 8 * lane) = make_uint2(words[0], words[1]);
  if ((lane & 3) == 0) {
    const float d = amax / 127.0f;
    *reinterpret_cast<float2*>(img + MT * kXBytes + (j * MT + r) * 8) = make_float2(d, fmaf(kc, sum, -kIntBias * d));
    *reinterpret_cast<float*>(img + MT * (kXBytes + kDzBytes) + (j * MT + r) * 4) = sum;
  }
}

template <DType W, typename B>
__global__ void __launch_bounds__(B::threads, B::minb)
    gemm_x8_kernel(const __grid_constant__ ops::MatmulArgs a, const unsigned char* image, int64_t stages, float* part) {
  using S = WeightStage<W, B::weight_rows>;
  using R = Ring<W, B>;
  constexpr int NTW = B::ntw, kThreads = B::threads;
  using F = X8<W>;
  constexpr int MT = B::rows;
  static_assert(S::aligned, "weight stages of whole 16-byte words");
  extern __shared__ __align__(16) unsigned char smem[];
  const int64_t per = (stages + gridDim.z - 1) / gridDim.z;
  const int64_t first = int64_t{blockIdx.z} * per < stages ? int64_t{blockIdx.z} * per : stages;
  const int count = static_cast<int>((first + per < stages ? first + per : stages) - first);
  const int64_t m0 = int64_t{blockIdx.x} * MT, n0 = int64_t{blockIdx.y} * B::weight_rows;
  const int tid = static_cast<int>(threadIdx.x);
  const auto* w = static_cast<const uint8_t*>(a.w) + first * S::bytes;
  const unsigned char* xi = image + (int64_t{blockIdx.x} * stages + first) * B::image_bytes;
  const uint32_t base = smem_addr(smem);

  // Each thread copies the same pieces of every stage: weight pieces (rows past N are not
  // copied), then the x tile's int8 rows into rows of kXPitch bytes, then its scales.
  constexpr int kWPieces = B::weight_rows * S::pieces;
  constexpr int kXPieces = MT * (kXBytes + kDzBytes + (F::kMin ? kSumBytes : 0)) / 16;
  auto issue = [&](int c) {
    const uint32_t slot = base + static_cast<uint32_t>((c % R::stages) * R::slot_bytes);
    for (int i = tid; i < kWPieces; i += kThreads) {
      const int r = i / S::pieces, p = i - r * S::pieces;
      if (n0 + r < a.n) cp_async16(slot + r * S::pitch + 16 * p, w + (n0 + r) * a.w_row_bytes + c * S::bytes + 16 * p);
    }
    const unsigned char* src = xi + int64_t{c} * B::image_bytes;
    const uint32_t xs = slot + S::stage_bytes;
    for (int i = tid; i < kXPieces; i += kThreads) {
      if (i < MT * kXBytes / 16) {
        const int r = i >> 4, p = i & 15;
        cp_async16(xs + r * kXPitch + 16 * p, src + r * kXBytes + 16 * p);
      } else {
        const int q = i - MT * kXBytes / 16;
        cp_async16(xs + MT * kXPitch + 16 * q, src + MT * kXBytes + 16 * q);
      }
    }
  };
#pragma unroll
  for (int i = 0; i < R::stages - 1; ++i) {
    if (i < count) issue(i);
    cp_async_commit();
  }

  const int warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
  const int wn = warp % B::wn, wm = warp / B::wn;
  float acc[2][NTW][4] = {};
  for (int c = 0; c < count; ++c) {
    cp_async_wait<R::stages - 2>();
    __syncthreads();
    if (c + R::stages - 1 < count) issue(c + R::stages - 1);
    cp_async_commit();
    const unsigned char* slot = smem + (c % R::stages) * R::slot_bytes;
    const unsigned char* rows = slot + (32 * wn + g) * S::pitch;  // rows g, g + 8, g + 16, g + 24
    const unsigned char* xs = slot + S::stage_bytes;
    const unsigned char* dz = xs + MT * kXPitch;
    const unsigned char* sums = dz + MT * kDzBytes;
#pragma unroll(NTW <= 4 ? 2 : 1)
    for (int j = 0; j < 8; ++j) {
      Unit u[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) u[i] = F::unit(rows + 8 * i * S::pitch, j, t);
#pragma unroll
      for (int nt = 0; nt < NTW; ++nt) {
        const int xr = 8 * (wm * NTW + nt);
        const unsigned char* xrow = xs + (xr + g) * kXPitch + 32 * j + 4 * t;
        const uint32_t b0 = ld_u32(xrow), b1 = ld_u32(xrow + 16);
        // (d, z) of x rows xr + 2t and xr + 2t + 1.
        const float4 s = *reinterpret_cast<const float4*>(dz + (j * MT + xr + 2 * t) * 8);
        float2 sx = make_float2(0.0f, 0.0f);
        if constexpr (F::kMin) sx = *reinterpret_cast<const float2*>(sums + (j * MT + xr + 2 * t) * 4);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const Unit& lo = u[2 * h];
          const Unit& hi = u[2 * h + 1];
          int c4[4] = {0, 0, 0, 0};
          const uint32_t af[4] = {lo.lo, hi.lo, lo.hi, hi.hi};
          ptx::mma_i8<F::kUnsigned>(c4, af, b0, b1);
          float* o = acc[h][nt];
          o[0] = fmaf(lo.a, fmaf(s.x, biased(c4[0]), s.y), o[0]);
          o[1] = fmaf(lo.a, fmaf(s.z, biased(c4[1]), s.w), o[1]);
          o[2] = fmaf(hi.a, fmaf(s.x, biased(c4[2]), s.y), o[2]);
          o[3] = fmaf(hi.a, fmaf(s.z, biased(c4[3]), s.w), o[3]);
          if constexpr (F::kMin) {
            o[0] = fmaf(lo.b, sx.x, o[0]);
            o[1] = fmaf(lo.b, sx.y, o[1]);
            o[2] = fmaf(hi.b, sx.x, o[2]);
            o[3] = fmaf(hi.b, sx.y, o[3]);
          }
        }
      }
    }
  }
  cp_async_wait<0>();
  // Slot e of acc[h][nt]: weight row 16h + g (+ 8 for e >= 2) of the warp's 32, x row
  // 2t (+ 1 for odd e) of its tile nt.
  float* out = gridDim.z == 1 ? a.out : part + int64_t{blockIdx.z} * a.m * a.n;
  const int64_t stride = gridDim.z == 1 ? a.out_stride : a.n;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
#pragma unroll
    for (int nt = 0; nt < NTW; ++nt) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t n = n0 + 32 * wn + 16 * h + g + 8 * (e >> 1);
        const int64_t m = m0 + 8 * (wm * NTW + nt) + 2 * t + (e & 1);
        if (m < a.m && n < a.n) out[m * stride + n] = acc[h][nt][e];
      }
    }
  }
}

// out [M, N] = the sum of the splits' partial sums [splits, M, N], in split order.
__global__ void sum_splits_kernel(const float* part, int64_t splits, int64_t m, int64_t n, float* out,
                                  int64_t out_stride) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= m * n) return;
  float sum = part[i];
  for (int64_t s = 1; s < splits; ++s) sum += part[s * m * n + i];
  out[(i / n) * out_stride + i % n] = sum;
}

template <DType W, typename B>
void gemm_x8_launch(const ops::MatmulArgs& a, const HostContext& ctx, int sms) {
  constexpr int MT = B::rows;
  const int64_t stages = a.k / kStageK;
  const int64_t m_tiles = (a.m + MT - 1) / MT;
  const int64_t n_tiles = (a.n + B::weight_rows - 1) / B::weight_rows;
  auto* image = static_cast<unsigned char*>(ctx.scratch(0, static_cast<size_t>(m_tiles * stages * B::image_bytes)));
  const int64_t warps = m_tiles * MT * stages;
  x_to_int8_kernel<MT><<<static_cast<unsigned>((warps * 32 + kQuantThreads - 1) / kQuantThreads), kQuantThreads, 0,
                             ctx.stream>>>(
      a.x, a.x_stride, a.m, stages, m_tiles, X8<W>::kC, image);
  ONEPASS_CUDA_CHECK(cudaGetLastError());
  const int64_t splits = cuda_gemm_x8_splits(m_tiles * n_tiles, stages, sms * B::minb);
  float* part = splits > 1 ? static_cast<float*>(ctx.scratch(1, static_cast<size_t>(splits * a.m * a.n) * sizeof(float)))
                           : nullptr;
  // Opted in to its dynamic shared memory once per device.
  static std::atomic<uint64_t> configured{0};
  int device = 0;
  ONEPASS_CUDA_CHECK(cudaGetDevice(&device));
  const uint64_t bit = uint64_t{1} << (device & 63);
  if ((configured.load() & bit) == 0) {
    const void* kernel = reinterpret_cast<const void*>(&gemm_x8_kernel<W, B>);
    ONEPASS_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Ring<W, B>::bytes));
    configured.fetch_or(bit);
  }
  const dim3 grid(static_cast<unsigned>(m_tiles), static_cast<unsigned>(n_tiles), static_cast<unsigned>(splits));
  gemm_x8_kernel<W, B><<<grid, B::threads, Ring<W, B>::bytes, ctx.stream>>>(a, image, stages, part);
  ONEPASS_CUDA_CHECK(cudaGetLastError());
  if (splits > 1) {
    const int64_t outputs = a.m * a.n;
    sum_splits_kernel<<<static_cast<unsigned>((outputs + 255) / 256), 256, 0, ctx.stream>>>(part, splits, a.m, a.n,
                                                                                            a.out, a.out_stride);
    ONEPASS_CUDA_CHECK(cudaGetLastError());
  }
}

template <DType W>
void gemm_x8_host(const void* args, void* context) {
  ops::MatmulArgs a;
  std::memcpy(&a, args, sizeof a);
  const HostContext& ctx = *static_cast<const HostContext*>(context);
  // The block shapes chosen by onepass bench --parallel 32, 64 and 128 (llama-8b q4_0, H200).
  if (a.m <= 32) {
    gemm_x8_launch<W, Shape<4, 8, 1, 2>>(a, ctx, ctx.multiprocessors);
  } else if (a.m <= 64) {
    gemm_x8_launch<W, Shape<4, 4, 1, 3>>(a, ctx, ctx.multiprocessors);
  } else {
    gemm_x8_launch<W, Shape<4, 4, 2, 2>>(a, ctx, ctx.multiprocessors);
  }
}

template <DType W>
void register_gemm_x8(KernelRegistry& registry) {
  // (The largest formats' rings, 2 stages, leave room for fewer blocks per SM than MINB.)
  static_assert(Ring<W, Shape<4, 8, 1, 2>>::bytes <= 227 * 1024, "shared memory");
  static_assert(Ring<W, Shape<4, 4, 1, 3>>::bytes <= 227 * 1024, "shared memory");
  static_assert(Ring<W, Shape<4, 4, 2, 2>>::bytes <= 227 * 1024, "shared memory");
  Kernel k;
  k.name = "gemm_x8_" + std::string(dtype_name(W)) + "_f32";
  k.args_size = sizeof(ops::MatmulArgs);
  k.cuda_host = &gemm_x8_host<W>;
  registry.add(std::move(k));
}

}  // namespace

void register_matmul_gemm_x8_cuda_kernels(KernelRegistry& registry) {
  register_gemm_x8<DType::q4_0>(registry);
  register_gemm_x8<DType::q4_1>(registry);
  register_gemm_x8<DType::q8_0>(registry);
  register_gemm_x8<DType::q5_0>(registry);
  register_gemm_x8<DType::q5_1>(registry);
  register_gemm_x8<DType::q4_k>(registry);
  register_gemm_x8<DType::q5_k>(registry);
}

}  // namespace onepass::cuda

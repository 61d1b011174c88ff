// CUDA host entry points gemm_<W>_f32 (Kernel::cuda_host): the matrix-matrix product of
// many rows of x (prefill) through cuBLAS, out [M, N] = x [M, K] · wᵀ:
//   x  is converted to f16 (bf16 for bf16 weights) into scratch slot 0;
//   w  is used as it is (f16, bf16), or expanded to f16 into scratch slot 1 (block
//      formats: the same f16 values as the tensor-core mm decodes, dequant_unit.cuh);
// then cublasGemmEx multiplies on the tensor cores with f32 sums and writes f32 out.
// The rounding is that of the tensor-core mm (x and w rounded to the operand type, f32
// products and sums); only the order of the sums differs.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "../cublas_library.h"
#include "../cuda_check.h"
#include "../host_context.h"
#include "../kernels/common.cuh"
#include "../kernels/registration.h"
#include "dequant_unit.cuh"
#include "onepass/ops/matmul.h"

namespace onepass::cuda {
namespace {

// out [M, K] (dense rows) = x rounded to the operand type of W. Rows along grid y (looping
// past 65535), four values per thread along x; float4 loads when `vec` (K, the stride and x
// 16-byte aligned).
template <DType W, typename T = typename dequant::Operand<W>::T>
__global__ void x_to_operand_kernel(const float* x, int64_t x_stride, int64_t m, int64_t k, bool vec, T* out) {
  const int64_t quads = (k + 3) / 4;
  for (int64_t row = blockIdx.y; row < m; row += gridDim.y) {
    const float* xr = x + row * x_stride;
    T* o = out + row * k;
    for (int64_t q = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; q < quads; q += int64_t{gridDim.x} * blockDim.x) {
      const int64_t c = 4 * q;
      if (vec) {
        const float4 v = *reinterpret_cast<const float4*>(xr + c);
        uint2 packed;
        packed.x = dequant::Operand<W>::pack(v.x, v.y);
        packed.y = dequant::Operand<W>::pack(v.z, v.w);
        *reinterpret_cast<uint2*>(o + c) = packed;
      } else {
        for (int64_t i = c; i < c + 4 && i < k; ++i) o[i] = static_cast<T>(xr[i]);
      }
    }
  }
}

// out [N, K] (dense f16 rows) = w dequantized, one 32-value unit per thread.
template <DType W>
__global__ void w_to_f16_kernel(const uint8_t* w, int64_t w_row_bytes, int64_t n, int64_t k, __half* out) {
  using F = quantdot::Format<W>;
  constexpr int kUnitsPerBlock = F::kUnits;
  const int64_t units_per_row = k / 32;
  const int64_t unit = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (unit >= n * units_per_row) return;
  const int64_t row = unit / units_per_row;
  const int64_t in_row = unit - row * units_per_row;
  const int u = static_cast<int>(in_row % kUnitsPerBlock);
  const uint8_t* block = w + row * w_row_bytes + in_row / kUnitsPerBlock * F::kBlockBytes;
  typename dequant::WUnit<W>::Raw raw;
  dequant::WUnit<W>::load(block, u, raw);
  uint32_t h[16];
  dequant::WUnit<W>::decode(raw, u, h);
  uint4* dst = reinterpret_cast<uint4*>(out + row * k + in_row * 32);
#pragma unroll
  for (int i = 0; i < 4; ++i) dst[i] = make_uint4(h[4 * i], h[4 * i + 1], h[4 * i + 2], h[4 * i + 3]);
}

template <DType W>
constexpr bool kDense = W == DType::f16 || W == DType::bf16;

template <DType W>
void gemm_host(const void* args, void* context) {
  using T = typename dequant::Operand<W>::T;
  ops::MatmulArgs a;
  std::memcpy(&a, args, sizeof a);
  const HostContext& ctx = *static_cast<const HostContext*>(context);
  // The op only picks this path for shapes whose sizes fit cuBLAS's int arguments.
  auto* xh = static_cast<T*>(ctx.scratch(0, static_cast<size_t>(a.m * a.k) * sizeof(T)));
  const bool vec = a.k % 4 == 0 && a.x_stride % 4 == 0 && reinterpret_cast<uintptr_t>(a.x) % 16 == 0;
  const int64_t quads = (a.k + 3) / 4;
  const dim3 x_grid(static_cast<unsigned>(std::min<int64_t>((quads + 255) / 256, 64)),
                    static_cast<unsigned>(std::min<int64_t>(a.m, 65535)));
  x_to_operand_kernel<W><<<x_grid, 256, 0, ctx.stream>>>(a.x, a.x_stride, a.m, a.k, vec, xh);
  ONEPASS_CUDA_CHECK(cudaGetLastError());
  const void* wh = a.w;
  int64_t ldw = a.w_row_bytes / 2;
  if constexpr (!kDense<W>) {
    auto* expanded = static_cast<__half*>(ctx.scratch(1, static_cast<size_t>(a.n * a.k) * sizeof(__half)));
    const int64_t units = a.n * (a.k / 32);
    w_to_f16_kernel<W><<<static_cast<unsigned>((units + 255) / 256), 256, 0, ctx.stream>>>(
        static_cast<const uint8_t*>(a.w), a.w_row_bytes, a.n, a.k, expanded);
    ONEPASS_CUDA_CHECK(cudaGetLastError());
    wh = expanded;
    ldw = a.k;
  }
  // Column-major view: out^T [N, M] = W [N, K] · x^T [K, M], with W stored as K x N
  // (ld = its row length) and x^T as K x M (ld = K).
  const float one = 1.0f, zero = 0.0f;
  const cudaDataType_t type = W == DType::bf16 ? CUDA_R_16BF : CUDA_R_16F;
  check_cublas(cublas_library().gemm_ex(ctx.cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(a.n), static_cast<int>(a.m),
                            static_cast<int>(a.k), &one, wh, type, static_cast<int>(ldw), xh, type,
                            static_cast<int>(a.k), &zero, a.out, CUDA_R_32F, static_cast<int>(a.out_stride),
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
               "cublasGemmEx");
}

template <DType W>
void register_gemm(KernelRegistry& registry) {
  Kernel k;
  k.name = "gemm_" + std::string(dtype_name(W)) + "_f32";
  k.args_size = sizeof(ops::MatmulArgs);
  k.cuda_host = &gemm_host<W>;
  registry.add(std::move(k));
}

}  // namespace

void register_matmul_blas_cuda_kernels(KernelRegistry& registry) {
  register_gemm<DType::f16>(registry);
  register_gemm<DType::bf16>(registry);
  register_gemm<DType::q4_0>(registry);
  register_gemm<DType::q4_1>(registry);
  register_gemm<DType::q8_0>(registry);
  register_gemm<DType::q4_k>(registry);
  register_gemm<DType::q5_k>(registry);
  register_gemm<DType::q6_k>(registry);
  register_gemm<DType::q5_0>(registry);
  register_gemm<DType::q5_1>(registry);
  register_gemm<DType::q2_k>(registry);
  register_gemm<DType::q3_k>(registry);
  register_gemm<DType::iq4_nl>(registry);
  register_gemm<DType::iq4_xs>(registry);
}

}  // namespace onepass::cuda

// CUDA kernels: embedding_<W>_<O> (gather rows of a table, dequantized). One block per
// token; threads stride over the row's 32-value units (block formats) or values (dense).
#include "common.cuh"
#include "onepass/ops/embedding.h"
#include "quant_dot.cuh"
#include "registration.h"

namespace onepass::cuda {
namespace {

template <DType W, DType O>
__global__ void embedding_kernel(const __grid_constant__ ops::EmbeddingArgs a) {
  using Out = Elem<O>;
  pdl_wait();
  const int64_t t = blockIdx.x;
  const int32_t id = a.ids[t];
  auto* out = static_cast<typename Out::storage*>(a.out) + t * a.out_stride;
  if (id < 0 || id >= a.vocab) {
    for (int64_t c = threadIdx.x; c < a.dim; c += blockDim.x) out[c] = Out::store(0.0f);
    return;
  }
  const auto* row = static_cast<const uint8_t*>(a.table) + int64_t{id} * a.table_row_bytes;
  if constexpr (W == DType::f32 || W == DType::f16 || W == DType::bf16) {
    const auto* values = reinterpret_cast<const typename Elem<W>::storage*>(row);
    for (int64_t c = threadIdx.x; c < a.dim; c += blockDim.x) out[c] = Out::store(Elem<W>::load(values[c]));
  } else {
    using F = quantdot::Format<W>;
    float vals[32];
    for (int64_t u = threadIdx.x; u < a.dim / 32; u += blockDim.x) {
      const int64_t block = u / F::kUnits;
      F::dequant(row + block * F::kBlockBytes, static_cast<int>(u - block * F::kUnits), vals);
#pragma unroll
      for (int l = 0; l < 32; ++l) out[u * 32 + l] = Out::store(vals[l]);
    }
  }
}

template <DType W>
void register_table_type(KernelRegistry& registry) {
  for_each_float_type([&]<DType O>() {
    registry.add(make_cuda_kernel<ops::EmbeddingArgs>(std::string("embedding_") + std::string(dtype_name(W)) + "_" +
                                                          Elem<O>::name,
                                                      reinterpret_cast<const void*>(&embedding_kernel<W, O>)));
  });
}

}  // namespace

void register_embedding_cuda_kernels(KernelRegistry& registry) {
  register_table_type<DType::f32>(registry);
  register_table_type<DType::f16>(registry);
  register_table_type<DType::bf16>(registry);
  register_table_type<DType::q4_0>(registry);
  register_table_type<DType::q4_1>(registry);
  register_table_type<DType::q8_0>(registry);
  register_table_type<DType::q4_k>(registry);
  register_table_type<DType::q5_k>(registry);
  register_table_type<DType::q6_k>(registry);
  register_table_type<DType::q5_0>(registry);
  register_table_type<DType::q5_1>(registry);
  register_table_type<DType::q2_k>(registry);
  register_table_type<DType::q3_k>(registry);
  register_table_type<DType::iq4_nl>(registry);
  register_table_type<DType::iq4_xs>(registry);
}

}  // namespace onepass::cuda

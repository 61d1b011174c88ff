// GraphSession::matmul: dense and GGML block-quantized out = x · wᵀ.
#include "onepass/ops/matmul.h"

#include <algorithm>

#include "onepass/exec/graph_session.h"
#include "onepass/ops/quant.h"
#include "op_common.h"

namespace onepass {
namespace ops {

LaunchDims matmul_launch_dims(BackendKind backend, bool mv, int64_t m, int64_t n) {
  auto blocks = [](int64_t count, int64_t per_block) {
    const int64_t b = std::max<int64_t>(1, (count + per_block - 1) / per_block);
    check(b <= 0x7fffffff, "matmul", "launch of ", b, " blocks in one dimension is too large");
    return static_cast<uint32_t>(b);
  };
  LaunchDims dims;
  if (backend == BackendKind::cpu) {
    if (mv) {
      dims.grid.x = blocks(n, kCpuMvRowsPerBlock);
    } else {
      dims.grid.x = blocks(n, kCpuMmRowsPerBlock);
      dims.grid.y = blocks(m, kCpuMmColsPerBlock);
    }
    return dims;
  }
  if (mv) {
    dims.grid.x = blocks(n, kCudaMvRowsPerBlock);
    dims.block.x = 128;
  } else {
    dims.grid.x = blocks(n, kCudaMmTile);
    dims.grid.y = blocks(m, kCudaMmTile);
    dims.block.x = 256;
  }
  return dims;
}

LaunchDims cuda_mm_tc_dims(int64_t m, int64_t n, uint32_t shared_bytes) {
  const int64_t m_tiles = (m + kCudaTcTileM - 1) / kCudaTcTileM;
  const int64_t n_tiles = (n + kCudaTcTileN - 1) / kCudaTcTileN;
  check(m_tiles <= 0x7fffffff && n_tiles <= 65535, "matmul", "tensor-core launch of ", m_tiles, " x ", n_tiles,
        " tiles is too large");
  LaunchDims dims;
  dims.grid.x = static_cast<uint32_t>(std::max<int64_t>(1, m_tiles));
  dims.grid.y = static_cast<uint32_t>(std::max<int64_t>(1, n_tiles));
  dims.block.x = static_cast<uint32_t>(kCudaTcThreads);
  dims.shared_bytes = shared_bytes;
  return dims;
}

LaunchDims cuda_mv_dims(bool quantized, int64_t m, int64_t n, int64_t k, int sms) {
  LaunchDims dims;
  dims.block.x = 128;
  const int64_t row_groups = (n + 7) / 8;  // 4 warps x 2 rows
  dims.grid.x = static_cast<uint32_t>(std::clamp<int64_t>(row_groups, 1, std::max(1, sms) * kCudaMvBlocksPerSm));
  dims.shared_bytes = static_cast<uint32_t>(cuda_mv_shared_bytes(quantized, m, k));
  return dims;
}

bool cuda_mv1_bulk(DType w, int64_t n, int64_t k, int64_t row_bytes, uint64_t address) {
  return (w == DType::q4_0 || w == DType::q4_1 || w == DType::q8_0) && !cuda_mv1_short_rows(w, n, k) &&
         k >= kCudaMv1BulkMinK && row_bytes % 16 == 0 && address % 16 == 0;
}

LaunchDims cuda_mv1_dims(DType w, int64_t n, int64_t k, int64_t row_bytes, int sms, bool bulk) {
  const bool quantized = dtype_is_quantized(w);
  sms = std::max(1, sms);
  // 1024-value chunks per row: a warp's unit of loading (32 lanes x 32 values, or 64
  // 16-byte words of dense weights).
  const int64_t chunk_bytes = quantized ? 1024 / dtype_block_elems(w) * dtype_size(w) : 1024;
  const int64_t chunks = quantized ? (k / 32 + 31) / 32 : (k * static_cast<int64_t>(dtype_size(w)) / 16 + 63) / 64;
  const int64_t pairs = (n + 1) / 2;
  const bool short_rows = cuda_mv1_short_rows(w, n, k);
  // Blocks of 8 warps, 2 per SM: fewer, larger blocks than the general mv kernels' 4 x
  // 4 (x is staged once per block; measured 1-3% faster on the reference models, where
  // a second wave of blocks or 16-warp blocks for every product lost).
  constexpr int64_t kMv1BulkSlots = 16;
  int64_t slots = 8, parts = 1, blocks_per_sm = 2;
  // Products with few row pairs and long rows (llama-1b's O and down) split K in two
  // between the warps of a slot, in 16-warp blocks, 1 per SM: twice the warps keep twice
  // the weight bytes in flight, and x is staged once per SM.
  if ((n + 7) / 8 <= 2 * int64_t{sms} && (quantized ? k / 32 >= 128 : row_bytes >= 4096)) {
    parts = kCudaMv1MaxParts;
    blocks_per_sm = 1;
  }
  parts = std::max<int64_t>(1, std::min(parts, chunks));  // every part has a chunk
  if (w == DType::q6_k) {
    parts = 1;
    blocks_per_sm = 2;
    const int64_t room = (kCudaMvSharedLimit - cuda_mv_shared_bytes(true, 1, k)) / kCudaMv1Q6kStageBytes;
    slots = std::clamp<int64_t>(room, 1, slots);
  }
  // Short rows: as many 8-warp slots as the rings leave room for (8 for K = 576).
  const int64_t short_warp_bytes =
      kCudaMv1ShortStages * 4 * cuda_mv1_short_row_words(k / 32 * static_cast<int64_t>(dtype_size(w))) * 16;
  if (short_rows) {
    parts = 1;
    slots = std::clamp<int64_t>((kCudaMvSharedLimit - cuda_mv_shared_bytes(true, 1, k)) / short_warp_bytes, 1, slots);
  }
  // mv1_bulk holds no weights in registers (~70 of them, where the register ring takes
  // 128): one block of 16 warps per SM, x staged once per SM. H100 short decode, llama-1b
  // q8_0 / q4_0 (2 x 8 warps with the register ring: 1523 / 1986): 2 x 8 warps 1506 / 1980,
  // 3 x 8 1576 / 1977, 2 x 12 1536 / 2021, 1 x 16 1608 / 2027 (ring depth 3; 2: 1581 /
  // 2027, 4: 1589 / 2013).
  if (bulk && parts == 1) {
    slots = kMv1BulkSlots;
    blocks_per_sm = 1;
  }
  // A short-row warp takes two row pairs per item.
  const int64_t items = short_rows ? (pairs + 1) / 2 : pairs;
  const int64_t grid = std::min((items + slots - 1) / slots, blocks_per_sm * sms);
  LaunchDims dims;
  dims.grid.x = static_cast<uint32_t>(std::max<int64_t>(1, grid));
  dims.block.x = static_cast<uint32_t>(32 * slots);
  dims.block.y = static_cast<uint32_t>(parts);
  int64_t shared = cuda_mv_shared_bytes(quantized, 1, k);
  if (w == DType::q6_k) {
    shared += slots * kCudaMv1Q6kStageBytes;
  } else if (short_rows) {
    shared += slots * short_warp_bytes;
  } else if (bulk) {
    // Ring per warp: kCudaMv1BulkDepth slots of both rows' chunk.
    shared += slots * parts * kCudaMv1BulkDepth * 2 * chunk_bytes;
  } else if (quantized) {
    // Staging area per warp: both rows' chunk plus one 16-byte word for an unaligned
    // start, in 16-byte loads per lane.
    const int64_t loads = ((chunk_bytes + 15) / 16 + 1 + 31) / 32;
    shared += slots * parts * 2 * loads * 32 * 16;
  }
  dims.shared_bytes = static_cast<uint32_t>(std::min<int64_t>(shared, int64_t{1} << 30));
  return dims;
}

}  // namespace ops

void GraphSession::matmul(const TensorView& x, const TensorView& w, const TensorView& out) {
  using namespace ops::detail;
  const char* op = "matmul";
  require_data(x, op, "x");
  require_data(w, op, "w");
  require_data(out, op, "out");
  require_dtype(x, DType::f32, op, "x");
  require_dtype(out, DType::f32, op, "out");
  check(is_weight_type(w.dtype), op, "w has type ", dtype_name(w.dtype),
        ", expected f32, f16, bf16, q4_0, q4_1, q8_0, q4_k, q5_k or q6_k");
  const int64_t k = w.cols();
  const int64_t n = w.rows();
  const int64_t m = x.rows();
  check(k > 0, op, "w ", w.shape.str(), " has no columns");
  check(x.cols() == k, op, "x ", x.shape.str(), " has ", x.cols(), " columns, expected K = ", k,
        " to match w ", w.shape.str());
  check(out.rows() == m && out.cols() == n, op, "out has shape ", out.shape.str(), ", expected [",
        m, ", ", n, "] for x ", x.shape.str(), " and w ", w.shape.str());
  if (!dtype_is_quantized(w.dtype)) {
    const size_t elem = dtype_size(w.dtype);
    check(w.row_stride % elem == 0 && w.view.address() % elem == 0, op,
          "w rows must be aligned to its ", elem, "-byte elements");
  }
  ops::MatmulArgs args{};
  args.x = static_cast<const float*>(x.data());
  args.w = w.data();
  args.out = static_cast<float*>(out.data());
  args.m = m;
  args.n = n;
  args.k = k;
  args.x_stride = element_stride(x, op, "x");
  args.w_row_bytes = static_cast<int64_t>(w.row_stride);
  args.out_stride = element_stride(out, op, "out");
  if (m == 0 || n == 0) return;
  const bool quantized = dtype_is_quantized(w.dtype);
  const bool cuda = !on_cpu(backend());
  // CUDA mv stages x in shared memory: larger x goes to the matrix-matrix kernel.
  const bool mv = m <= ops::kMatmulMvMaxRows &&
                  (!cuda || ops::cuda_mv_shared_bytes(quantized, m, k) <= ops::kCudaMvSharedLimit);
  // Many rows on CUDA: cuBLAS on f16/bf16 operands (gemm_*), when its int sizes hold the
  // shape and the weight rows are 2-byte aligned (block fields are read as half words).
  const auto fits_int = [](int64_t v) { return v <= int64_t{0x7fffffff}; };
  const bool gemm = cuda && !mv && w.dtype != DType::f32 && backend().options().cublas &&
                    m >= ops::kCudaGemmMinRows && fits_int(m) && fits_int(n) && fits_int(k) &&
                    fits_int(args.x_stride) && fits_int(args.out_stride) && fits_int(args.w_row_bytes) &&
                    w.view.address() % 2 == 0 && w.row_stride % 2 == 0 &&
                    backend().registry().contains(cat("gemm_", dtype_name(w.dtype), "_f32"));
  if (gemm) {
    Dispatch d(backend().registry().get(cat("gemm_", dtype_name(w.dtype), "_f32")), LaunchDims{}, args,
               OpKind::matmul, op);
    d.read(x).read(w).write(out);
    dispatch(std::move(d));
    return;
  }
  // One row of x on CUDA (the decode step): the one-row kernels (mv1_*) where registered.
  const bool bulk = cuda && ops::cuda_mv1_bulk(w.dtype, n, k, static_cast<int64_t>(w.row_stride), w.view.address());
  const std::string one_row = cat(ops::cuda_mv1_short_rows(w.dtype, n, k) ? "mv1_short_" : bulk ? "mv1_bulk_" : "mv1_",
                                  dtype_name(w.dtype), "_f32");
  // The dense ones load 16-byte words of whole rows: K and the rows must allow that.
  const bool dense_words = !quantized && k % static_cast<int64_t>(16 / dtype_size(w.dtype)) == 0 &&
                           w.row_stride % 16 == 0 && w.view.address() % 16 == 0;
  // They index rows, outputs and row bytes with 32-bit integers.
  const bool small = n < (int64_t{1} << 30) && w.row_stride < (uint64_t{1} << 30);
  const int sms = backend().info().multiprocessors;
  const LaunchDims mv1_dims =
      ops::cuda_mv1_dims(w.dtype, n, k, static_cast<int64_t>(w.row_stride), sms, bulk);
  const int64_t mv1_shared_limit = bulk ? int64_t{ops::kCudaMv1BulkSharedLimit} : ops::kCudaMvSharedLimit;
  const bool mv1 = cuda && mv && m == 1 && small && (quantized || dense_words) &&
                   mv1_dims.shared_bytes <= mv1_shared_limit && backend().registry().contains(one_row);
  const Kernel& kernel =
      backend().registry().get(mv1 ? one_row : cat(mv ? "mv_" : "mm_", dtype_name(w.dtype), "_f32"));
  const LaunchDims dims = mv1                               ? mv1_dims
                          : cuda && mv                      ? ops::cuda_mv_dims(quantized, m, n, k, sms)
                          : cuda && w.dtype != DType::f32 ? ops::cuda_mm_tc_dims(m, n, kernel.max_shared_bytes)
                                                          : ops::matmul_launch_dims(backend().kind(), mv, m, n);
  Dispatch d(kernel, dims, args, OpKind::matmul, op);
  // The CUDA matrix-vector kernels load their first weight chunks before the PDL wait.
  if (cuda && mv) {
    d.read(x).read_early(w).write(out);
  } else {
    d.read(x).read(w).write(out);
  }
  dispatch(std::move(d));
}

}  // namespace onepass

// The CUDA backend's choice of product kernels: cuBLAS GEMMs for many rows of x, the
// tensor-core mm below that (16- or 32-row tiles with K split across a cluster for a few
// dozen rows), the mv kernels for a few rows and the one-row mv1 kernels
// (register ring, TMA ring, short rows, q6_k, dense) for the decode step; their launch
// shapes (launch.h).
#include "select.h"

#include <algorithm>

#include "../../kernel_names.h"
#include "launch.h"
#include "onepass/core/error.h"
#include "onepass/exec/backend.h"
#include "onepass/ops/affine.h"
#include "onepass/ops/matmul.h"
#include "onepass/ops/matmul_id.h"

namespace onepass::cuda {

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

int64_t cuda_mm_splits(int64_t m, int64_t n, int64_t k, int sms) {
  const int64_t tile_m = cuda_mm_split_tile_rows(m);
  const int64_t tiles = (m + tile_m - 1) / tile_m * ((n + kCudaTcTileN - 1) / kCudaTcTileN);
  const int64_t wanted = (kCudaMmSplitBlocksPerSm * std::max(1, sms) + tiles - 1) / tiles;
  return std::clamp<int64_t>(std::min<int64_t>(wanted, k / kCudaMmSplitMinK), 1, kMaxClusterBlocks);
}

// The most K stages of a block whose int8 x (of m rows) fits kCudaMmX8XBytes.
static int64_t x8_block_stages(int64_t m) {
  return kCudaMmX8XBytes / (kCudaMmX8TileRows * cuda_mm_x8_tiles(m) * kCudaMmX8XRowBytes);
}

bool cuda_mm_x8(DType w, int64_t m, int64_t k, int64_t row_bytes, uint64_t address) {
  const bool formats = w == DType::q4_0 || w == DType::q4_1 || w == DType::q8_0 || w == DType::q5_0 ||
                       w == DType::q5_1 || w == DType::q4_k || w == DType::q5_k || w == DType::q6_k;
  const int64_t word = w == DType::q6_k ? 8 : 16;
  // 25..32 rows: q6_k (the other formats take gemm_x8).
  const bool rows = m == kCudaMmX8TileRows || (m >= kCudaMmX8M32MinRows && m <= kCudaMmX8MaxRows && w == DType::q6_k);
  return formats && rows && k % kCudaMmX8StageK == 0 &&
         k / kCudaMmX8StageK <= int64_t{kMaxClusterBlocks} * x8_block_stages(m) && row_bytes % word == 0 &&
         address % word == 0;
}

int64_t cuda_mm_x8_splits(int64_t m, int64_t k) {
  const int64_t stages = k / kCudaMmX8StageK;
  const int64_t needed = (stages + x8_block_stages(m) - 1) / x8_block_stages(m);
  return std::clamp<int64_t>(std::max(needed, stages), 1, kMaxClusterBlocks);
}

LaunchDims cuda_mm_x8_dims(int64_t m, int64_t n, int64_t k, int sms, uint32_t max_shared_bytes) {
  const int64_t splits = cuda_mm_x8_splits(m, k);
  const int64_t stages = k / kCudaMmX8StageK;
  const int64_t per = (stages + splits - 1) / splits;
  const int64_t n_tiles = (n + kCudaMmX8BlockRows - 1) / kCudaMmX8BlockRows;
  // About 2 blocks per SM, each group of splits taking an even share of the tiles.
  const int64_t groups = std::clamp<int64_t>((2 * int64_t{std::max(1, sms)} + splits - 1) / splits, 1, n_tiles);
  const int64_t tiles_per_group = (n_tiles + groups - 1) / groups;
  LaunchDims dims;
  dims.grid.x = static_cast<uint32_t>(splits);
  dims.grid.y = static_cast<uint32_t>(std::min<int64_t>((n_tiles + tiles_per_group - 1) / tiles_per_group, 65535));
  dims.block.x = static_cast<uint32_t>(2 * kCudaMmX8BlockRows);
  dims.shared_bytes = static_cast<uint32_t>(max_shared_bytes - kCudaMmX8XBytes +
                                            per * kCudaMmX8TileRows * cuda_mm_x8_tiles(m) * kCudaMmX8XRowBytes);
  return dims;
}

bool cuda_gemm_x8(DType w, int64_t m, int64_t k, int64_t row_bytes, uint64_t address) {
  const bool formats = w == DType::q4_0 || w == DType::q4_1 || w == DType::q8_0 || w == DType::q5_0 ||
                       w == DType::q5_1 || w == DType::q4_k || w == DType::q5_k;
  return formats && m >= kCudaGemmX8MinRows && m <= kCudaGemmX8MaxRows && k % kCudaMmX8StageK == 0 &&
         row_bytes % 16 == 0 && address % 16 == 0;
}

int64_t cuda_gemm_x8_splits(int64_t tiles, int64_t stages, int slots) {
  slots = std::max(1, slots);
  int64_t best = 1, best_cost = -1;
  for (int64_t s = 1; s <= std::min<int64_t>(stages, 16); ++s) {
    const int64_t waves = (tiles * s + slots - 1) / slots;
    const int64_t cost = waves * ((stages + s - 1) / s);
    if (best_cost < 0 || cost < best_cost) best = s, best_cost = cost;
  }
  return best;
}

LaunchDims cuda_mm_split_dims(int64_t m, int64_t n, int64_t splits, uint32_t shared_bytes) {
  const int64_t tile_m = cuda_mm_split_tile_rows(m);
  const int64_t m_tiles = (m + tile_m - 1) / tile_m;
  const int64_t n_tiles = (n + kCudaTcTileN - 1) / kCudaTcTileN;
  check(m_tiles <= 65535 && n_tiles <= 65535, "matmul", "split tensor-core launch of ", m_tiles, " x ", n_tiles,
        " tiles is too large");
  LaunchDims dims;
  dims.grid.x = static_cast<uint32_t>(splits);
  dims.grid.y = static_cast<uint32_t>(std::max<int64_t>(1, n_tiles));
  dims.grid.z = static_cast<uint32_t>(std::max<int64_t>(1, m_tiles));
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
  // Blocks of 8 warps, 2 per SM: x is staged once per block, and fewer, larger blocks than
  // the mv kernels' 4 x 4 suit one row of x (chosen by onepass bench decode).
  constexpr int64_t kMv1BulkSlots = 16;
  int64_t slots = 8, parts = 1, blocks_per_sm = 2;
  // Products with few row pairs and long rows split K in two between the warps of a slot,
  // in 16-warp blocks, 1 per SM: twice the warps keep twice the weight bytes in flight,
  // and x is staged once per SM.
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
  // mv1_bulk holds no weights in registers: one block of 16 warps per SM, x staged once
  // per SM, a ring of kCudaMv1BulkDepth slots per warp (shape and depth chosen by onepass
  // bench decode of llama-1b q4_0 and q8_0).
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

namespace {

// The product kernel for `a` with `weight_rows` rows of w (the fused gate/up product
// computes a.n outputs from twice as many rows).
struct Product {
  std::string name;
  LaunchDims dims;
  bool matvec = false;  // mv_*, mv1_*, mm_x8_*: loads its first weight chunks before the PDL wait
};

Product choose_product(const Backend& b, const ops::MatmulArgs& a, DType w, int64_t weight_rows) {
  const std::string type(dtype_name(w));
  const bool quantized = dtype_is_quantized(w);
  const int64_t m = a.m, n = weight_rows, k = a.k;
  const auto address = reinterpret_cast<uint64_t>(a.w);
  const KernelRegistry& registry = b.registry();
  // mv stages x in shared memory: larger x goes to the matrix-matrix kernels.
  const bool mv = m <= ops::kMatmulMvMaxRows && cuda_mv_shared_bytes(quantized, m, k) <= kCudaMvSharedLimit;
  // A few dozen to a few hundred rows on block formats: the 8-bit integer tensor cores with
  // x rounded once per call (cuda_gemm_x8).
  const std::string gemm_x8 = cat("gemm_x8_", type, "_f32");
  if (cuda_gemm_x8(w, m, k, a.w_row_bytes, address) && registry.contains(gemm_x8)) return {gemm_x8, LaunchDims{}, false};
  // 8 rows of x on block formats, or 25..32 of q6_k: the 8-bit integer tensor cores (cuda_mm_x8).
  const std::string x8 = cat(cuda_mm_x8_tiles(m) == 1 ? "mm_x8_" : "mm_x8_m32_", type, "_f32");
  if (cuda_mm_x8(w, m, k, a.w_row_bytes, address) && registry.contains(x8)) {
    return {x8, cuda_mm_x8_dims(m, n, k, b.info().multiprocessors, registry.get(x8).max_shared_bytes), true};
  }
  // Many rows: cuBLAS on f16/bf16 operands, when its int sizes hold the shape and the
  // weight rows are 2-byte aligned (block fields are read as half words).
  const auto fits_int = [](int64_t v) { return v <= int64_t{0x7fffffff}; };
  const std::string gemm = cat("gemm_", type, "_f32");
  if (!mv && w != DType::f32 && b.options().cublas && m >= kCudaGemmMinRows && fits_int(m) && fits_int(n) &&
      fits_int(k) && fits_int(a.x_stride) && fits_int(a.out_stride) && fits_int(a.w_row_bytes) &&
      address % 2 == 0 && a.w_row_bytes % 2 == 0 && registry.contains(gemm)) {
    return {gemm, LaunchDims{}, false};
  }
  // One row of x (the decode step): the one-row kernels where registered.
  const bool bulk = cuda_mv1_bulk(w, n, k, a.w_row_bytes, address);
  const std::string one_row =
      cat(cuda_mv1_short_rows(w, n, k) ? "mv1_short_" : bulk ? "mv1_bulk_" : "mv1_", type, "_f32");
  // The dense ones load 16-byte words of whole rows: K and the rows must allow that.
  const bool dense_words = !quantized && k % static_cast<int64_t>(16 / dtype_size(w)) == 0 &&
                           a.w_row_bytes % 16 == 0 && address % 16 == 0;
  // They index rows, outputs and row bytes with 32-bit integers.
  const bool small = n < (int64_t{1} << 30) && a.w_row_bytes < (int64_t{1} << 30);
  const int sms = b.info().multiprocessors;
  const LaunchDims mv1_dims = cuda_mv1_dims(w, n, k, a.w_row_bytes, sms, bulk);
  const int64_t mv1_shared_limit = bulk ? int64_t{kCudaMv1BulkSharedLimit} : kCudaMvSharedLimit;
  if (mv && m == 1 && small && (quantized || dense_words) && mv1_dims.shared_bytes <= mv1_shared_limit &&
      registry.contains(one_row)) {
    return {one_row, mv1_dims, true};
  }
  if (mv) return {cat("mv_", type, "_f32"), cuda_mv_dims(quantized, m, n, k, sms), true};
  const std::string mm = cat("mm_", type, "_f32");
  if (w != DType::f32) {
    // A few dozen rows: the 16- or 32-row tiles, K split where the tiles alone are few.
    const std::string split = cat("mm_split_m", cuda_mm_split_tile_rows(m), "_", type, "_f32");
    if (m <= kCudaMmSplitMaxRows && registry.contains(split)) {
      const int64_t splits = cuda_mm_splits(m, n, k, sms);
      return {split, cuda_mm_split_dims(m, n, splits, registry.get(split).max_shared_bytes), false};
    }
    return {mm, cuda_mm_tc_dims(m, n, registry.get(mm).max_shared_bytes), false};
  }
  LaunchDims dims;
  dims.grid.x = grid_blocks(n, kCudaMmTile, "matmul");
  dims.grid.y = grid_blocks(m, kCudaMmTile, "matmul");
  dims.block.x = 256;
  return {mm, dims, false};
}

KernelChoice matmul(const Backend& b, const KernelRequest& r) {
  const auto& a = r.args_as<ops::MatmulArgs>();
  const Product p = choose_product(b, a, r.type, a.n);
  return KernelChoice{&b.registry().get(p.name), p.dims, p.matvec ? ops::kMatmulWeights : 0u};
}

// The matrix-vector kernels' fused variants (norm, residual, SiLU, RoPE epilogue); none
// for the matrix-matrix kernels.
KernelChoice matmul_fused(const Backend& b, const KernelRequest& r) {
  auto& f = r.args_as<ops::FusedMatvecArgs>();
  const Product p = choose_product(b, f.mm, r.type, f.silu ? 2 * f.mm.n : f.mm.n);
  const Kernel* kernel = p.matvec ? b.registry().find(p.name + "_fused") : nullptr;
  if (kernel == nullptr) return {};
  KernelChoice choice{kernel, p.dims, ops::kMatmulWeights};
  // The kernels copy the residual of their first rows before the PDL wait (it was
  // written two or more dispatches earlier in a decode step).
  if (f.residual != nullptr) {
    f.residual_early = 1;
    choice.early_operands |= ops::kMatvecResidual;
  }
  return choice;
}

// One warp per output row (mv) or 64 x 64 tiles (mm), as the block-format products.
KernelChoice matmul_affine(const Backend& b, const KernelRequest& r) {
  const auto& a = r.args_as<ops::AffineMatmulArgs>();
  const bool mv = r.rows <= ops::kMatmulMvMaxRows;
  LaunchDims dims;
  if (mv) {
    dims.grid.x = grid_blocks(r.cols, kCudaMvRowsPerBlock, r.op);
    dims.block.x = 128;
  } else {
    dims.grid.x = grid_blocks(r.cols, kCudaMmTile, r.op);
    dims.grid.y = grid_blocks(r.rows, kCudaMmTile, r.op);
    dims.block.x = 256;
  }
  return KernelChoice{&b.registry().get(affine_kernel_name(mv, a.bits, a.group_size, r.type)), dims};
}

// One token: block formats take mv_id_x8 (int8 x, dp4a) where x fits its shared memory and
// the weights are 2-byte aligned (its loads of block fields); otherwise mv_id, a warp per
// output column with f32 x.
KernelChoice matmul_id(const Backend& b, const KernelRequest& r) {
  const auto& a = r.args_as<ops::MatmulIdArgs>();
  const std::string x8 = cat("mv_id_x8_", dtype_name(r.type), "_f32");
  const int64_t x8_shared = cuda_mv_shared_bytes(true, 1, a.k);
  if (dtype_is_quantized(r.type) && a.k % 32 == 0 && x8_shared <= kCudaMvSharedLimit &&
      reinterpret_cast<uint64_t>(a.w) % 2 == 0 && a.w_row_bytes % 2 == 0 && b.registry().contains(x8)) {
    LaunchDims dims;
    dims.grid.x = grid_blocks(a.n, kCudaMvIdX8Rows, r.op);
    dims.grid.y = grid_extent(a.slots, r.op);
    dims.grid.z = grid_extent(a.tokens, r.op);
    dims.block.x = static_cast<uint32_t>(kCudaMvIdX8Rows / 2 * 32);
    dims.shared_bytes = static_cast<uint32_t>(x8_shared);
    return KernelChoice{&b.registry().get(x8), dims};
  }
  LaunchDims dims;
  dims.grid.x = grid_blocks(a.n, kCudaMvRowsPerBlock, r.op);
  dims.grid.y = grid_extent(a.slots, r.op);
  dims.grid.z = grid_extent(a.tokens, r.op);
  dims.block.x = 128;
  return KernelChoice{&b.registry().get(cat("mv_id_", dtype_name(r.type), "_f32")), dims};
}

KernelChoice matmul_id_group(const Backend& b, const KernelRequest&) {
  LaunchDims dims;
  dims.block.x = 256;
  return KernelChoice{&b.registry().get("matmul_id_group"), dims};
}

// Tensor cores (mm_id_tc: 64 x 64 tiles of (pairs, columns), grid z splits an expert's pair
// tiles between about twice as many blocks as an even share of the pairs needs) for the
// block formats, and for f16/bf16 from as many tokens as the dense products round x to
// f16 for (more than the mv kernels' rows); else the CUDA-core tiles of mm_id, f32 x.
KernelChoice matmul_id_grouped(const Backend& b, const KernelRequest& r) {
  const auto& a = r.args_as<ops::MatmulIdArgs>();
  const std::string tc = cat("mm_id_tc_", dtype_name(r.type), "_f32");
  const bool tensor_cores =
      dtype_is_quantized(r.type) || (r.type != DType::f32 && a.tokens > ops::kMatmulMvMaxRows);
  if (tensor_cores && b.registry().contains(tc)) {
    const Kernel& kernel = b.registry().get(tc);
    const int64_t pairs = a.tokens * a.slots;
    const int64_t tiles = (pairs + kCudaTcTileM - 1) / kCudaTcTileM;
    const int64_t even_share = (2 * pairs + kCudaTcTileM * a.n_experts - 1) / (kCudaTcTileM * a.n_experts);
    LaunchDims dims;
    dims.grid.x = grid_blocks(a.n, kCudaTcTileN, r.op);
    dims.grid.y = grid_extent(a.n_experts + 1, r.op);
    dims.grid.z = static_cast<uint32_t>(std::clamp<int64_t>(std::min(even_share, tiles), 1, 16));
    dims.block.x = static_cast<uint32_t>(kCudaTcThreads);
    dims.shared_bytes = kernel.max_shared_bytes;
    return KernelChoice{&kernel, dims};
  }
  LaunchDims dims;
  dims.grid.x = grid_blocks(a.n, kCudaMmTile, r.op);
  dims.grid.y = grid_extent(a.n_experts + 1, r.op);
  dims.block.x = 256;
  return KernelChoice{&b.registry().get(cat("mm_id_", dtype_name(r.type), "_f32")), dims};
}

}  // namespace

void register_matmul_selectors(KernelSelectors& s) {
  s.add("matmul", matmul);
  s.add("matmul_fused", matmul_fused);
  s.add("matmul_affine", matmul_affine);
  s.add("matmul_id", matmul_id);
  s.add("matmul_id_group", matmul_id_group);
  s.add("matmul_id_grouped", matmul_id_grouped);
}

}  // namespace onepass::cuda

// Which instruction set the CPU matrix kernels use (the CPU's widest, capped by
// ONEPASS_CPU_ISA or set_active_isa), and the table of row kernels per set and weight type.
#include <array>
#include <atomic>
#include <cstdlib>
#include <string_view>

#include "../simd_x86.h"
#include "amx_tiles.h"
#include "onepass/core/error.h"
#include "onepass/core/half.h"
#include "rows.h"

namespace onepass::cpu {

// Filled during static initialisation, before any kernel can run.
const float* const kHalfToFloat = [] {
  static std::array<float, 65536> table;
  for (uint32_t h = 0; h < table.size(); ++h) table[h] = f16_to_f32(static_cast<uint16_t>(h));
  return table.data();
}();

bool isa_supported(Isa isa) {
#if ONEPASS_CPU_X86
  static const bool avx2 = [] {
    __builtin_cpu_init();
#if defined(__clang__)
    // Clang cannot ask for F16C; every CPU with AVX2 and FMA has it.
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
           __builtin_cpu_supports("f16c");
#endif
  }();
  static const bool avx512 = avx2 && __builtin_cpu_supports("avx512f");
  static const bool avx512_vnni =
      avx512 && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
      __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("gfni");
  static const bool amx = avx512_vnni && amx_allowed(amx_support());
  return isa == Isa::portable || (isa == Isa::avx2 && avx2) || (isa == Isa::avx512 && avx512) ||
         (isa == Isa::avx512_vnni && avx512_vnni) || (isa == Isa::amx && amx);
#else
  return isa == Isa::portable;
#endif
}

Isa best_isa() {
  static const Isa isa = isa_supported(Isa::amx)           ? Isa::amx
                         : isa_supported(Isa::avx512_vnni) ? Isa::avx512_vnni
                         : isa_supported(Isa::avx512)    ? Isa::avx512
                         : isa_supported(Isa::avx2)      ? Isa::avx2
                                                         : Isa::portable;
  return isa;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::portable: return "portable";
    case Isa::avx2: return "avx2";
    case Isa::avx512: return "avx512";
    case Isa::avx512_vnni: return "avx512_vnni";
    case Isa::amx: return "amx";
  }
  return "unknown";
}

Isa capped_isa(Isa best, std::string_view name) {
  if (name.empty()) return best;
  for (Isa isa : {Isa::portable, Isa::avx2, Isa::avx512, Isa::avx512_vnni, Isa::amx}) {
    if (name == isa_name(isa)) return std::min(best, isa);
  }
  check(false, "cpu", "ONEPASS_CPU_ISA must be portable, avx2, avx512, avx512_vnni or amx, got '", name, "'");
  return best;
}

namespace {

Isa initial_isa() {
  const char* cap = std::getenv("ONEPASS_CPU_ISA");
  return cap != nullptr ? capped_isa(best_isa(), cap) : best_isa();
}

std::atomic<Isa>& isa_in_use() {
  static std::atomic<Isa> isa{initial_isa()};
  return isa;
}

using KernelTable = std::array<RowKernels, kDTypeCount>;

// The row kernels of every matmul weight type for `isa` (a vector set, never Isa::amx):
// the families' SIMD kernels where they have them, the portable ones elsewhere.
KernelTable make_table(Isa isa) {
  KernelTable table{};
  for (DType w : kMatmulWeightTypes) {
    RowKernels kernels = portable_row_kernels(w);
#if ONEPASS_CPU_X86
    if (isa != Isa::portable) {
      for (auto family : {dense_row_kernels, block32_row_kernels, kquant_row_kernels,
                          q5_blocks_row_kernels, iq4_row_kernels, kquant_low_row_kernels}) {
        const RowKernels simd = family(w, isa);
        if (simd.dot != nullptr) kernels = simd;
      }
    }
    if (isa != Isa::portable) {
      kernels.dot_int16 = block32_int16_dot(w, isa);
      if (kernels.dot_int16 == nullptr) kernels.dot_int16 = kquant_int16_dot(w, isa);
      if (kernels.dot_int16 == nullptr) kernels.dot_int16 = kquant_low_int16_dot(w, isa);
      if (kernels.dot_int16 == nullptr) kernels.dot_int16 = iq4_xs_int16_dot(w, isa);
      kernels.dot_weight_rows_int16 = block32_int16_dot_weight_rows(w, isa);
      for (auto more : {kquant_int16_dot_weight_rows, kquant_low_int16_dot_weight_rows, iq4_xs_int16_dot_weight_rows}) {
        if (kernels.dot_weight_rows_int16 == nullptr) kernels.dot_weight_rows_int16 = more(w, isa);
      }
      // The formats with an additive min per block take x's block sums.
      kernels.int16_block_sums = kernels.dot_int16 != nullptr && (w == DType::q4_1 || w == DType::q5_1 ||
                                                                  w == DType::q4_k || w == DType::q5_k);
      if (isa == Isa::avx512_vnni && w == DType::q6_k) kernels.int16_order = XInt16Order::even_odd;
      kernels.decode_int16 = block32_int16_decode(w, isa);
      if (kernels.decode_int16 == nullptr) kernels.decode_int16 = kquant_int16_decode(w, isa);
      if (kernels.decode_int16 == nullptr) kernels.decode_int16 = kquant_low_int16_decode(w, isa);
      if (kernels.decode_int16 == nullptr) kernels.decode_int16 = iq4_xs_int16_decode(w, isa);
      if (kernels.decode_int16 == nullptr) {
        kernels.decode_int16 = kquant16_decode_int16(w, isa);
        kernels.decode_int16_half_blocks = kernels.decode_int16 != nullptr;
      }
      kernels.dot_weight_rows_bytes = q4_split_x_dot_weight_rows(w, isa);
      kernels.bytes_lane_sums = kernels.dot_weight_rows_bytes != nullptr && (w == DType::q4_1 || w == DType::q5_1);
      kernels.dot_weight_rows_group_bytes = kquant_low_split_x_dot_weight_rows(w, isa);
      if (kernels.dot_weight_rows_group_bytes == nullptr) {
        kernels.dot_weight_rows_group_bytes = kquant_split_x_dot_weight_rows(w, isa);
        if (kernels.dot_weight_rows_group_bytes != nullptr) {
          kernels.group_bytes_order = w == DType::q6_k ? XInt16GroupOrder::values : XInt16GroupOrder::nibbles;
        }
      }
    }
#else
    (void)isa;
#endif
    table[static_cast<size_t>(w)] = kernels;
  }
  return table;
}

}  // namespace

Isa active_isa() {
  return isa_in_use().load(std::memory_order_relaxed);
}

void set_active_isa(Isa isa) {
  // Only between runs: blocks of one dispatch must all take the same path.
  check(isa_supported(isa), "cpu", "this CPU cannot run the requested instruction set");
  isa_in_use().store(isa, std::memory_order_relaxed);
}

const RowKernels& row_kernels(DType weight_type, Isa isa) {
  static const KernelTable tables[] = {make_table(Isa::portable), make_table(Isa::avx2),
                                       make_table(Isa::avx512), make_table(Isa::avx512_vnni)};
  check(isa_supported(isa), "cpu", "row kernels for an instruction set this CPU lacks");
  const RowKernels& k = tables[static_cast<size_t>(vector_isa(isa))][static_cast<size_t>(weight_type)];
  check(k.dot != nullptr, "cpu", "no matmul row kernels for weight type ", dtype_name(weight_type));
  return k;
}

}  // namespace onepass::cpu

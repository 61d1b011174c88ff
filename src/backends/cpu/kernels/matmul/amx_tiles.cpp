// Whether this process may use AMX (CPUID, XCR0, Linux's tile data permission), and the AMX
// mm path (amx_tiles.inl) on a plain C++ model of the tile instructions, for tests on any
// CPU: TILELOADD, TILESTORED, TILEZERO, TDPBSSD and TDPBUSD as Intel's SDM defines them, on
// 8 tiles of 16 rows x 64 bytes (the configuration amx_kernel.cpp loads).
#include "amx_tiles.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#if defined(__x86_64__)
#include <cpuid.h>
#endif
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "../../cpu_launch.h"
#include "onepass/core/error.h"
#include "rows.h"
#include "simd.h"

namespace onepass::cpu {

namespace amx_model {

#include "amx_tiles.inl"

// Tile registers as memory; every tile is 16 rows of 64 bytes (C tiles: 16 int32 columns).
class ModelTiles {
 public:
  void load_b(const uint8_t* high, const uint8_t* low) {
    load(kTileBHigh, high, kTileRowBytes);
    load(kTileBLow, low, kTileRowBytes);
  }
  template <int P>
  void load_a(const uint8_t* a) {
    load(P == 0 ? kTileA0 : kTileA1, a, kTileRowBytes);
  }
  template <int P>
  void multiply() {
    const int a = P == 0 ? kTileA0 : kTileA1;
    const int high = P == 0 ? kTileC0High : kTileC1High;
    const int low = P == 0 ? kTileC0Low : kTileC1Low;
    zero(high);
    zero(low);
    dot_bytes<true>(high, a, kTileBHigh);   // TDPBSSD
    dot_bytes<false>(low, a, kTileBLow);    // TDPBUSD
  }
  template <int P>
  void store_c(int32_t* high, int32_t* low) {
    store(P == 0 ? kTileC0High : kTileC1High, high, kTileRowBytes);
    store(P == 0 ? kTileC0Low : kTileC1Low, low, kTileRowBytes);
  }

 private:
  static constexpr int kRows = 16;

  void load(int t, const void* p, int64_t stride) {
    for (int r = 0; r < kRows; ++r) std::memcpy(tiles_[t][r], static_cast<const uint8_t*>(p) + r * stride, kTileRowBytes);
  }
  void store(int t, void* p, int64_t stride) {
    for (int r = 0; r < kRows; ++r) std::memcpy(static_cast<uint8_t*>(p) + r * stride, tiles_[t][r], kTileRowBytes);
  }
  void zero(int t) { std::memset(tiles_[t], 0, sizeof(tiles_[t])); }

  // TDPBSSD (A signed) / TDPBUSD (A unsigned), B signed: for each row m of C and each
  // dword k of A's row (A.colsb / 4 = 16 of them, so B has 16 rows), C[m].dword[n] +=
  // Σ_i A[m].byte[4k + i] · B[k].byte[4n + i] for the 16 dwords n of C's row, in 32-bit
  // arithmetic that wraps.
  template <bool kSignedA>
  void dot_bytes(int c, int a, int b) {
    for (int m = 0; m < kRows; ++m) {
      uint32_t row[16];
      std::memcpy(row, tiles_[c][m], sizeof(row));
      for (int k = 0; k < 16; ++k) {
        for (int n = 0; n < 16; ++n) {
          int32_t sum = 0;
          for (int i = 0; i < 4; ++i) {
            const uint8_t av = tiles_[a][m][4 * k + i];
            const int32_t x = kSignedA ? static_cast<int8_t>(av) : av;
            sum += x * static_cast<int8_t>(tiles_[b][k][4 * n + i]);
          }
          row[n] += static_cast<uint32_t>(sum);
        }
      }
      std::memcpy(tiles_[c][m], row, sizeof(row));
    }
  }

  alignas(64) uint8_t tiles_[8][kRows][kTileRowBytes] = {};
};

}  // namespace amx_model

bool amx_allowed(const AmxSupport& s) {
  constexpr uint64_t kTileState = (1ull << 17) | (1ull << 18);  // XTILECFG, XTILEDATA
  return s.cpu_tile && s.cpu_int8 && (s.xcr0 & kTileState) == kTileState && s.tile_data_permitted;
}

const AmxSupport& amx_support() {
  static const AmxSupport support = [] {
    AmxSupport s;
#if defined(__x86_64__)
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx) != 0) {
      s.cpu_tile = (edx >> 24) & 1;
      s.cpu_int8 = (edx >> 25) & 1;
    }
    const bool osxsave = __get_cpuid(1, &eax, &ebx, &ecx, &edx) != 0 && ((ecx >> 27) & 1) != 0;
    if (osxsave) {
      uint32_t low = 0, high = 0;
      __asm__ volatile("xgetbv" : "=a"(low), "=d"(high) : "c"(0));
      s.xcr0 = (static_cast<uint64_t>(high) << 32) | low;
    }
#if defined(__linux__)
    // Only where the CPU and the OS's XSAVE state have tiles; the request is per process.
    if (s.cpu_tile && s.cpu_int8 && ((s.xcr0 >> 18) & 1) != 0) {
      constexpr long kArchGetXcompPerm = 0x1022, kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
      if (syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0) {
        uint64_t permitted = 0;
        s.tile_data_permitted = syscall(SYS_arch_prctl, kArchGetXcompPerm, &permitted) == 0 &&
                                ((permitted >> kXfeatureXtiledata) & 1) != 0;
      }
    }
#endif
#endif
    return s;
  }();
  return support;
}

bool amx_mm_type(DType w) { return w == DType::q4_0 || w == DType::q4_1 || w == DType::q8_0; }

void amx_mm_blocks_emulated(DType w, const ops::MatmulArgs& a, uint64_t grid_x, uint64_t first, uint64_t end) {
  amx_model::mm_blocks_of<amx_model::ModelTiles>(w, a, grid_x, first, end);
}

namespace {
std::atomic<bool>& emulation_flag() {
  static std::atomic<bool> on{false};
  return on;
}
}  // namespace

void set_amx_emulation(bool on) { emulation_flag().store(on, std::memory_order_relaxed); }
bool amx_emulation() { return emulation_flag().load(std::memory_order_relaxed); }

}  // namespace onepass::cpu

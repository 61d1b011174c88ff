// The AMX path of mm_<W>_f32 (amx_tiles.inl) with the real tile instructions: Isa::amx only.
// Tile configuration is per thread and may be changed by other code on the thread between
// calls, so every call loads it (LDTILECFG) first and releases the tiles (TILERELEASE) at
// the end, which also keeps the tile state out of the thread's context switches between
// calls.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "../../cpu_launch.h"
#include "amx_tiles.h"
#include "onepass/core/error.h"
#include "rows.h"
#include "simd.h"

#if ONEPASS_CPU_X86
ONEPASS_AMX_BEGIN
namespace onepass::cpu::amx_hardware {

#include "amx_tiles.inl"

static_assert(kTileA0 == 0 && kTileA1 == 1 && kTileBHigh == 2 && kTileBLow == 3 && kTileC0High == 4 &&
                  kTileC0Low == 5 && kTileC1High == 6 && kTileC1Low == 7,
              "the tile numbers below are the constants of amx_tiles.inl");

// LDTILECFG's 64-byte operand, palette 1: bytes per row and rows of each tile.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t row_bytes[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

// The tile instructions take tile numbers as immediates, hence one branch per register.
class HardwareTiles {
 public:
  HardwareTiles() {
    TileConfig config;
    for (int t = 0; t < 8; ++t) {
      config.row_bytes[t] = static_cast<uint16_t>(kTileRowBytes);
      config.rows[t] = 16;
    }
    _tile_loadconfig(&config);
  }
  ~HardwareTiles() { _tile_release(); }
  HardwareTiles(const HardwareTiles&) = delete;
  HardwareTiles& operator=(const HardwareTiles&) = delete;

  void load_b(const uint8_t* high, const uint8_t* low) {
    _tile_loadd(2, high, kTileRowBytes);
    _tile_loadd(3, low, kTileRowBytes);
  }
  template <int P>
  void load_a(const uint8_t* a) {
    if constexpr (P == 0) {
      _tile_loadd(0, a, kTileRowBytes);
    } else {
      _tile_loadd(1, a, kTileRowBytes);
    }
  }
  template <int P>
  void multiply() {
    if constexpr (P == 0) {
      _tile_zero(4);
      _tile_zero(5);
      _tile_dpbssd(4, 0, 2);
      _tile_dpbusd(5, 0, 3);
    } else {
      _tile_zero(6);
      _tile_zero(7);
      _tile_dpbssd(6, 1, 2);
      _tile_dpbusd(7, 1, 3);
    }
  }
  template <int P>
  void store_c(int32_t* high, int32_t* low) {
    if constexpr (P == 0) {
      _tile_stored(4, high, kTileRowBytes);
      _tile_stored(5, low, kTileRowBytes);
    } else {
      _tile_stored(6, high, kTileRowBytes);
      _tile_stored(7, low, kTileRowBytes);
    }
  }
};

void mm_blocks_hardware(DType w, const ops::MatmulArgs& a, uint64_t grid_x, uint64_t first, uint64_t end) {
  mm_blocks_of<HardwareTiles>(w, a, grid_x, first, end);
}

}  // namespace onepass::cpu::amx_hardware
ONEPASS_AMX_END
#endif  // ONEPASS_CPU_X86

namespace onepass::cpu {

void amx_mm_blocks(DType w, const ops::MatmulArgs& a, uint64_t grid_x, uint64_t first, uint64_t end) {
#if ONEPASS_CPU_X86
  amx_hardware::mm_blocks_hardware(w, a, grid_x, first, end);
#else
  (void)w, (void)a, (void)grid_x, (void)first, (void)end;
  check(false, "cpu", "AMX is an x86-64 instruction set");
#endif
}

}  // namespace onepass::cpu

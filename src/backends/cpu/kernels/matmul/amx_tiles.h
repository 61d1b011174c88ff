// The AMX path of mm_<W>_f32 for q4_0, q4_1 and q8_0 (amx_tiles.inl holds the code, compiled
// twice: with the real tile instructions in amx_kernel.cpp, with a plain C++ model of them in
// amx_tiles.cpp), and how the CPU backend finds out whether it may use AMX at all.
#pragma once

#include <cstdint>

#include "onepass/core/dtype.h"
#include "onepass/ops/matmul.h"

namespace onepass::cpu {

/// What decides whether AMX is usable: CPUID's AMX-TILE and AMX-INT8 bits, XCR0 (the OS
/// saves the tile state: bits 17 and 18), and Linux's answer to
/// arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) (tile data is off until asked for).
struct AmxSupport {
  bool cpu_tile = false;
  bool cpu_int8 = false;
  uint64_t xcr0 = 0;
  bool tile_data_permitted = false;
};
/// Whether `s` allows the tile instructions (all four conditions).
bool amx_allowed(const AmxSupport& s);
/// This process's AmxSupport, asked once (the permission request is made at most once; a
/// refusal leaves the process as it was).
const AmxSupport& amx_support();

/// Whether the AMX mm path covers weight type `w` (q4_0, q4_1, q8_0).
bool amx_mm_type(DType w);

/// mm_<w>_f32's blocks [first, end) (the grid of mm.cpp: grid_x weight-row tiles of
/// kCpuMmRowsPerBlock fastest, then tiles of kCpuMmColsPerBlock rows of x) through the AMX
/// tiles; Isa::amx only (the caller checks), for amx_mm_type(w).
void amx_mm_blocks(DType w, const ops::MatmulArgs& a, uint64_t grid_x, uint64_t first, uint64_t end);
/// The same blocks through the plain C++ model of the tile instructions (same packing and
/// scaling code, same results bit for bit): for tests on machines without AMX.
void amx_mm_blocks_emulated(DType w, const ops::MatmulArgs& a, uint64_t grid_x, uint64_t first,
                            uint64_t end);

/// Tests: while set, mm_<w>_f32 for amx_mm_type(w) takes amx_mm_blocks_emulated on any CPU,
/// whatever the Isa in use, AMX machines included (call only while no work is running, as
/// set_active_isa).
void set_amx_emulation(bool on);
bool amx_emulation();

}  // namespace onepass::cpu

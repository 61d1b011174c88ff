// mm_<W>_f32 for q4_0, q4_1 and q8_0 on AMX tiles (TDPBSSD, TDPBUSD), with x rounded to
// 16-bit integers: the packing of x and of the weights into tile layouts, the per-block
// scaling in f32, and the loop over a call's blocks. Included (after every standard header
// the file needs) into a namespace of amx_kernel.cpp, whose `Tiles` issues the tile
// instructions, and of amx_tiles.cpp, whose `Tiles` models them in plain C++; nothing here
// differs between the two.
//
// Numbers. Each 32-value block of a row of x gets its own f32 step s = max |x| / 32767 and
// integers q = round(x / s) in [-32767, 32767] (off by at most s / 2, 2^-16 of the block's
// largest value), split as q = 256 h + l, h signed (s8), l unsigned (u8). The weights are
// the blocks' integers as s8 (q8_0's q; q4_0's nibble - 8; q4_1's nibble, its min m apart).
// Per block, tile row r (a row of x) and column n (a weight row), with |w| <= 128:
//   Σ w · q = 256 · Σ w · h + Σ w · l,
//   |Σ w · h| <= 32 · 128 · 128 = 2^19 (TDPBSSD),  |Σ w · l| <= 32 · 255 · 128 < 2^20 (TDPBUSD),
// and the C tiles are zeroed every block, so both int32 sums are exact, and so is
// 256 · Σ w · h + Σ w · l (|Σ w · q| <= 32 · 32767 · 128 < 2^27); its f32 conversion rounds
// once (exact below 2^24: always for the 4-bit formats, |w| <= 15). The block's share of
// the output is that total times s · d (d the weight block's scale), plus for q4_1
// m · Σ x with the f32 sum of the unrounded x.
//
// Tiles (16 rows x 64 bytes each, 8 of them). One TDP instruction per block and tile pair
// covers K = 32 values: an A tile row holds a block's 32 bytes h, then its 32 bytes l; B
// tiles come from one buffer per weight tile of 16 rows, in VNNI order (tile row j, bytes
// 4n .. 4n + 3: weight row n's values 4j .. 4j + 3) with 8 zero rows before each block's 8
// rows, and a last 8 zero rows: B_high = (block, zeros) multiplies the h half of A, B_low =
// (zeros, block) the l half, so a pair of TDPs with one A and the two B gives Σ w · h and
// Σ w · l without shifting bytes inside A. Tiles: A0, A1 (two panels of 16 rows of x),
// B_high, B_low, and a C pair (high, low) per panel: 2 x 2 x 2 = 8. Per block, the B pair is
// loaded once for all panels of the mm tile (kCpuMmColsPerBlock rows of x); the C tiles are
// zeroed, filled, stored and scaled into f32 accumulators every block, because every block
// has its own weight scales (a scale per output column per 32 values).
//
// Packing. x is packed once per run of blocks of one tile of rows of x (a call's blocks take
// the weight tiles of one row tile in turn, so a call packs x about once per thread); the
// weights once per block, for all its panels.

// Tile registers.
inline constexpr int kTileA0 = 0, kTileA1 = 1, kTileBHigh = 2, kTileBLow = 3;
inline constexpr int kTileC0High = 4, kTileC0Low = 5, kTileC1High = 6, kTileC1Low = 7;

inline constexpr int64_t kPanelRows = 16;   // rows of x per A / C tile
inline constexpr int64_t kTileColumns = 16;  // weight rows per B / C tile
inline constexpr int64_t kBlockValues = 32;  // values per weight block
inline constexpr int64_t kTileRowBytes = 64;
inline constexpr int64_t kATileBytes = kPanelRows * kTileRowBytes;   // one panel, one block
inline constexpr int64_t kBHalfBytes = 8 * kTileRowBytes;            // one block of weights
inline constexpr int64_t kCTileValues = kPanelRows * kTileColumns;  // int32 or f32

/// Rows of x in tile layout: `panels` panels of 16 rows; per panel and block kATileBytes
/// (row r: h of its 32 values, then l), then per panel and block 16 steps and 16 sums.
struct PackedX {
  uint8_t* bytes = nullptr;  // [panels][blocks][16][64]
  float* scale = nullptr;    // [panels][blocks][16]
  float* sum = nullptr;      // [panels][blocks][16], Σ x of the unrounded values (q4_1)
  int64_t blocks = 0;
  int64_t panels = 0;
  const uint8_t* a_tile(int64_t panel, int64_t block) const { return bytes + (panel * blocks + block) * kATileBytes; }
  const float* scales(int64_t panel, int64_t block) const { return scale + (panel * blocks + block) * kPanelRows; }
  const float* sums(int64_t panel, int64_t block) const { return sum + (panel * blocks + block) * kPanelRows; }
};

inline int64_t packed_x_bytes(int64_t rows, int64_t k) {
  const int64_t panels = (rows + kPanelRows - 1) / kPanelRows;
  const int64_t blocks = k / kBlockValues;
  return panels * blocks * (kATileBytes + 2 * kPanelRows * 4);
}

/// Packs `rows` rows of x (k values each, x_stride floats apart) into `buffer` (64-byte
/// aligned, packed_x_bytes); rows past `rows` up to the panel's 16 read as zero. A block with
/// a value that is not finite gets a NaN step (its products are NaN, as x's are).
inline PackedX pack_x(const float* x, int64_t x_stride, int64_t rows, int64_t k, uint8_t* buffer, bool sums) {
  PackedX p;
  p.blocks = k / kBlockValues;
  p.panels = (rows + kPanelRows - 1) / kPanelRows;
  p.bytes = buffer;
  p.scale = reinterpret_cast<float*>(buffer + p.panels * p.blocks * kATileBytes);
  p.sum = p.scale + p.panels * p.blocks * kPanelRows;
  for (int64_t panel = 0; panel < p.panels; ++panel) {
    for (int64_t r = 0; r < kPanelRows; ++r) {
      const int64_t row = panel * kPanelRows + r;
      for (int64_t b = 0; b < p.blocks; ++b) {
        uint8_t* high = p.bytes + (panel * p.blocks + b) * kATileBytes + r * kTileRowBytes;
        uint8_t* low = high + kBlockValues;
        float* scale = p.scale + (panel * p.blocks + b) * kPanelRows + r;
        float* sum = p.sum + (panel * p.blocks + b) * kPanelRows + r;
        if (row >= rows) {
          std::memset(high, 0, kTileRowBytes);
          *scale = 0.0f;
          *sum = 0.0f;
          continue;
        }
        const float* v = x + row * x_stride + b * kBlockValues;
        float amax = 0.0f, total = 0.0f, non_finite = 0.0f;  // v * 0 is NaN exactly for inf or NaN v
        for (int64_t j = 0; j < kBlockValues; ++j) {
          amax = std::max(amax, std::fabs(v[j]));
          non_finite += v[j] * 0.0f;
          total += v[j];
        }
        const bool finite = non_finite == 0.0f;
        *scale = finite ? amax / 32767.0f : NAN;
        *sum = sums ? total : 0.0f;
        const float inverse = finite && amax > 0.0f ? 32767.0f / amax : 0.0f;
        for (int64_t j = 0; j < kBlockValues; ++j) {
          const float t = finite ? std::nearbyint(v[j] * inverse) : 0.0f;
          const auto q = static_cast<int32_t>(std::clamp(t, -32767.0f, 32767.0f));
          high[j] = static_cast<uint8_t>(static_cast<int8_t>(q >> 8));  // arithmetic: h in [-128, 127]
          low[j] = static_cast<uint8_t>(q & 0xFF);
        }
      }
    }
  }
  return p;
}

/// Up to 16 weight rows in tile layout: 2 · blocks + 1 halves of kBHalfBytes (zeros, block
/// 0, zeros, block 1, ..., zeros), each block's half in VNNI order; per block 16 scales d
/// and 16 mins m (0 for the missing rows, and m for the formats without one).
struct PackedW {
  uint8_t* bytes = nullptr;
  float* d = nullptr;  // [blocks][16]
  float* m = nullptr;  // [blocks][16]
  int64_t blocks = 0;
  const uint8_t* b_high(int64_t block) const { return bytes + (2 * block + 1) * kBHalfBytes; }
  const uint8_t* b_low(int64_t block) const { return bytes + 2 * block * kBHalfBytes; }
};

inline int64_t packed_w_bytes(int64_t k) {
  const int64_t blocks = k / kBlockValues;
  return (2 * blocks + 1) * kBHalfBytes + 2 * blocks * kTileColumns * 4;
}

/// Block formats: bytes per block, its scale and min, and its 32 integers as s8 in 8 dwords
/// (dword j: values 4j .. 4j + 3, the VNNI rows of one weight row).
template <DType W>
struct AmxFormat;

inline uint32_t dword_at(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

template <>
struct AmxFormat<DType::q8_0> {
  static constexpr int64_t kBytes = 34;
  static float min(const uint8_t*) { return 0.0f; }
  static void dwords(const uint8_t* block, uint32_t* q) {
    for (int j = 0; j < 8; ++j) q[j] = dword_at(block + 2 + 4 * j);
  }
};

// Nibble bytes at `nibbles`: byte i holds value i (low) and value i + 16 (high).
inline void nibble_dwords(const uint8_t* nibbles, uint32_t* q) {
  for (int j = 0; j < 4; ++j) {
    const uint32_t v = dword_at(nibbles + 4 * j);
    q[j] = v & 0x0F0F0F0Fu;
    q[j + 4] = (v >> 4) & 0x0F0F0F0Fu;
  }
}

template <>
struct AmxFormat<DType::q4_0> {
  static constexpr int64_t kBytes = 18;
  static float min(const uint8_t*) { return 0.0f; }
  static void dwords(const uint8_t* block, uint32_t* q) {
    nibble_dwords(block + 2, q);
    // Each byte q - 8 in two's complement: (q + 0x80 - 8) ^ 0x80 never borrows across bytes.
    for (int j = 0; j < 8; ++j) q[j] = ((q[j] | 0x80808080u) - 0x08080808u) ^ 0x80808080u;
  }
};

template <>
struct AmxFormat<DType::q4_1> {
  static constexpr int64_t kBytes = 20;
  static float min(const uint8_t* block) { return half_at(block + 2); }
  static void dwords(const uint8_t* block, uint32_t* q) { nibble_dwords(block + 4, q); }
};

/// Packs `rows` (<= 16) weight rows of k values, w_row_bytes apart, into `buffer` (64-byte
/// aligned, packed_w_bytes).
template <DType W>
PackedW pack_w(const uint8_t* w, int64_t w_row_bytes, int64_t rows, int64_t k, uint8_t* buffer) {
  PackedW p;
  p.blocks = k / kBlockValues;
  p.bytes = buffer;
  p.d = reinterpret_cast<float*>(buffer + (2 * p.blocks + 1) * kBHalfBytes);
  p.m = p.d + p.blocks * kTileColumns;
  for (int64_t b = 0; b <= p.blocks; ++b) std::memset(buffer + 2 * b * kBHalfBytes, 0, kBHalfBytes);
  for (int64_t b = 0; b < p.blocks; ++b) {
    uint8_t* half = buffer + (2 * b + 1) * kBHalfBytes;
    if (rows < kTileColumns) std::memset(half, 0, kBHalfBytes);
    for (int64_t n = 0; n < kTileColumns; ++n) {
      float& d = p.d[b * kTileColumns + n];
      float& m = p.m[b * kTileColumns + n];
      if (n >= rows) {
        d = m = 0.0f;
        continue;
      }
      const uint8_t* block = w + n * w_row_bytes + b * AmxFormat<W>::kBytes;
      d = half_at(block);
      m = AmxFormat<W>::min(block);
      uint32_t q[kBlockValues / 4];
      AmxFormat<W>::dwords(block, q);
      for (int64_t j = 0; j < kBlockValues / 4; ++j) std::memcpy(half + j * kTileRowBytes + 4 * n, &q[j], 4);
    }
  }
  return p;
}

/// acc[r][n] += (256 · high[r][n] + low[r][n]) · scale[r] · d[n] (+ sum[r] · m[n] with
/// kOffset) over one panel's 16 x 16 outputs, all row-major with 16 columns. A row is one
/// 16-value vector (GCC's vector extension: one AVX-512 register where the target has it);
/// left to itself, GCC vectorises across rows through transposes.
template <bool kOffset>
void scale_block(const int32_t* high, const int32_t* low, const float* scale, const float* sum, const float* d,
                 const float* m, float* acc) {
  using Floats = float __attribute__((vector_size(4 * kTileColumns)));
  using Ints = int32_t __attribute__((vector_size(4 * kTileColumns)));
  Floats dv, mv;
  std::memcpy(&dv, d, sizeof(dv));
  std::memcpy(&mv, m, sizeof(mv));
  for (int64_t r = 0; r < kPanelRows; ++r) {
    Ints h, l;
    Floats row;
    std::memcpy(&h, high + r * kTileColumns, sizeof(h));
    std::memcpy(&l, low + r * kTileColumns, sizeof(l));
    std::memcpy(&row, acc + r * kTileColumns, sizeof(row));
    const Floats total = __builtin_convertvector(h * 256 + l, Floats);
    // Separate roundings (both files that include this one compile with -ffp-contract=off):
    // the tile path (AVX-512 target) and the model of the tiles (baseline target) round alike.
    row += total * (scale[r] * dv);
    if constexpr (kOffset) row += sum[r] * mv;
    std::memcpy(acc + r * kTileColumns, &row, sizeof(row));
  }
}

/// acc (panels x 16 x 16, zeroed by the caller) += the panels [first_panel, first_panel +
/// panels) of x times the weight tile w, block by block through `tiles` (with q4_1's min
/// term when kOffset).
template <bool kOffset, typename Tiles>
void tile_product(Tiles& tiles, const PackedX& x, int64_t first_panel, int64_t panels, const PackedW& w, float* acc) {
  alignas(64) int32_t c[4][kCTileValues];
  for (int64_t b = 0; b < w.blocks; ++b) {
    tiles.load_b(w.b_high(b), w.b_low(b));
    for (int64_t p = 0; p < panels; p += 2) {
      const int64_t panel = first_panel + p;
      const bool pair = p + 1 < panels;
      tiles.template load_a<0>(x.a_tile(panel, b));
      tiles.template multiply<0>();
      if (pair) {
        tiles.template load_a<1>(x.a_tile(panel + 1, b));
        tiles.template multiply<1>();
      }
      tiles.template store_c<0>(c[0], c[1]);
      scale_block<kOffset>(c[0], c[1], x.scales(panel, b), x.sums(panel, b), w.d + b * kTileColumns,
                           w.m + b * kTileColumns, acc + p * kCTileValues);
      if (pair) {
        tiles.template store_c<1>(c[2], c[3]);
        scale_block<kOffset>(c[2], c[3], x.scales(panel + 1, b), x.sums(panel + 1, b), w.d + b * kTileColumns,
                             w.m + b * kTileColumns, acc + (p + 1) * kCTileValues);
      }
    }
  }
}

/// mm_<W>_f32's blocks [first, end) (mm.cpp's grid; see amx_mm_blocks) through `Tiles`.
template <typename Tiles, DType W>
void mm_blocks(const ops::MatmulArgs& a, uint64_t grid_x, uint64_t first, uint64_t end) {
  static_assert(kCpuMmRowsPerBlock == kTileColumns, "an mm block's weight rows are one B tile");
  static_assert(kCpuMmColsPerBlock % kPanelRows == 0, "an mm block's rows of x are whole panels");
  constexpr int64_t kPanelsPerBlock = kCpuMmColsPerBlock / kPanelRows;
  constexpr bool kOffset = W == DType::q4_1;
  const auto* w = static_cast<const uint8_t*>(a.w);
  // Slot 1: the packed x; slot 0: the packed weights, then the accumulators.
  auto* x_buffer = reinterpret_cast<uint8_t*>(thread_scratch((packed_x_bytes(kCpuMmColsPerBlock, a.k) + 3) / 4, 1));
  const int64_t w_floats = (packed_w_bytes(a.k) + 63) / 64 * 16;
  float* w_buffer = thread_scratch(w_floats + kPanelsPerBlock * kCTileValues, 0);
  float* acc = w_buffer + w_floats;
  Tiles tiles;
  PackedX x;
  int64_t packed_m0 = -1;
  for (uint64_t b = first; b < end; ++b) {
    const int64_t n0 = static_cast<int64_t>(b % grid_x) * kCpuMmRowsPerBlock;
    const int64_t m0 = static_cast<int64_t>(b / grid_x) * kCpuMmColsPerBlock;
    const int64_t n_count = std::min(a.n - n0, kCpuMmRowsPerBlock);
    const int64_t m_count = std::min(a.m - m0, kCpuMmColsPerBlock);
    if (n_count <= 0 || m_count <= 0) continue;
    if (m0 != packed_m0) {
      x = pack_x(a.x + m0 * a.x_stride, a.x_stride, m_count, a.k, x_buffer, kOffset);
      packed_m0 = m0;
    }
    const PackedW packed =
        pack_w<W>(w + n0 * a.w_row_bytes, a.w_row_bytes, n_count, a.k, reinterpret_cast<uint8_t*>(w_buffer));
    std::fill_n(acc, x.panels * kCTileValues, 0.0f);
    tile_product<kOffset>(tiles, x, 0, x.panels, packed, acc);
    for (int64_t i = 0; i < m_count; ++i) {
      const float* row = acc + (i / kPanelRows) * kCTileValues + (i % kPanelRows) * kTileColumns;
      std::copy_n(row, n_count, a.out + (m0 + i) * a.out_stride + n0);
    }
  }
}

/// mm_blocks for weight type w (amx_mm_type).
template <typename Tiles>
void mm_blocks_of(DType w, const ops::MatmulArgs& a, uint64_t grid_x, uint64_t first, uint64_t end) {
  switch (w) {
    case DType::q4_0: return mm_blocks<Tiles, DType::q4_0>(a, grid_x, first, end);
    case DType::q4_1: return mm_blocks<Tiles, DType::q4_1>(a, grid_x, first, end);
    case DType::q8_0: return mm_blocks<Tiles, DType::q8_0>(a, grid_x, first, end);
    default: check(false, "cpu", "no AMX matmul for weight type ", dtype_name(w));
  }
}

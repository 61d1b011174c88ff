// Row kernels written once over a SIMD traits type S (simd.h): S::V holds S::kWidth
// floats, and a run of 32 weight values is kRun = 32 / S::kWidth vectors.
//
// No include guard: simd.h includes this file once per instruction set, inside that set's
// target region and namespace. It includes nothing itself.
//
// Each Rows type below is a family of row kernels:
//   template <int M> static void dot(w, x, x_stride, k, out, out_stride)
//       out[i * out_stride] = x row i · weight row w, for i < M
//   static void decode(w, k, dst)   the weight row as f32 (DecodeRowFn)

// How a scaled decoder's run of 32 integer values v turns into weights.
enum class Combine {
  scale,         // w = s0 * v
  scale_offset,  // w = s0 * v + s1
  two_scales,    // w = s0 * v for the first 16 values, s1 * v for the last 16
};

// Accumulator set of a run for WeightBlocks: runs alternate between two sets so that
// consecutive runs do not wait on each other's FMA.
template <int kSet>
using Set = std::integral_constant<int, kSet>;

// v[0] + ... + v[N - 1], as a balanced tree: ((v0 + v1) + (v2 + v3)) for N = 4.
template <typename S, int N>
inline typename S::V sum_tree(const typename S::V* v) {
  if constexpr (N == 1) {
    return v[0];
  } else {
    return S::add(sum_tree<S, N / 2>(v), sum_tree<S, N - N / 2>(v + N / 2));
  }
}

// Σ x[j] · v[j] for j in [kBegin, kEnd): one multiply, then one FMA per vector.
template <typename S, int kBegin, int kEnd>
inline typename S::V dot_run(const typename S::V* x, const typename S::V* v) {
  typename S::V p = S::mul(x[kBegin], v[kBegin]);
  for (int j = kBegin + 1; j < kEnd; ++j) p = S::fmadd(x[j], v[j], p);
  return p;
}

// Rows::dot<take>(...) for 1 <= take <= M.
template <typename Rows, int M>
inline void dot_take(int64_t take, const uint8_t* w, const float* x, int64_t x_stride, int64_t k,
                     float* out, int64_t out_stride) {
  if constexpr (M > 1) {
    if (take < M) return dot_take<Rows, M - 1>(take, w, x, x_stride, k, out, out_stride);
  }
  Rows::template dot<M>(w, x, x_stride, k, out, out_stride);
}

// DotRowsFn: groups of up to S::kMaxRows rows of x share one decode of the weight row.
template <typename S, typename Rows>
void dot_rows(const void* row, const float* x, int64_t x_stride, int64_t m, int64_t k, float* out,
              int64_t out_stride) {
  const auto* w = static_cast<const uint8_t*>(row);
  while (m > 0) {
    const int64_t take = std::min<int64_t>(m, S::kMaxRows);
    dot_take<Rows, S::kMaxRows>(take, w, x, x_stride, k, out, out_stride);
    m -= take;
    x += take * x_stride;
    out += take * out_stride;
  }
}

template <typename S, typename Rows>
constexpr RowKernels row_kernels_of() {
  return {dot_rows<S, Rows>, Rows::decode};
}

// Dense rows (f32, f16, bf16): two accumulators per row of x over steps of 2 vectors, one
// more vector if it fits, then the horizontal sum and the scalar tail.
template <typename S, DType W>
struct Dense {
  using V = typename S::V;
  static constexpr int64_t kW = S::kWidth;

  template <int M>
  static void dot(const uint8_t* w, const float* x, int64_t x_stride, int64_t k, float* out,
                  int64_t out_stride) {
    V acc_a[M];
    V acc_b[M];
    for (int i = 0; i < M; ++i) {
      acc_a[i] = S::zero();
      acc_b[i] = S::zero();
    }
    int64_t j = 0;
    for (; j + 2 * kW <= k; j += 2 * kW) {
      const V v0 = S::template load_dense<W>(w, j);
      const V v1 = S::template load_dense<W>(w, j + kW);
      for (int i = 0; i < M; ++i) {
        const float* xr = x + i * x_stride + j;
        acc_a[i] = S::fmadd(S::load(xr), v0, acc_a[i]);
        acc_b[i] = S::fmadd(S::load(xr + kW), v1, acc_b[i]);
      }
    }
    if (j + kW <= k) {
      const V v0 = S::template load_dense<W>(w, j);
      for (int i = 0; i < M; ++i) acc_a[i] = S::fmadd(S::load(x + i * x_stride + j), v0, acc_a[i]);
      j += kW;
    }
    for (int i = 0; i < M; ++i) {
      float sum = S::hsum(S::add(acc_a[i], acc_b[i]));
      for (int64_t t = j; t < k; ++t) sum += x[i * x_stride + t] * load_dense_one<W>(w, t);
      out[i * out_stride] = sum;
    }
  }

  static void decode(const void* row, int64_t k, float* dst) {
    const auto* w = static_cast<const uint8_t*>(row);
    int64_t j = 0;
    for (; j + kW <= k; j += kW) S::store(dst + j, S::template load_dense<W>(w, j));
    for (; j < k; ++j) dst[j] = load_dense_one<W>(w, j);
  }
};

// Block rows whose decoder hands out integer values and scales. Fmt::decode(block, f)
// calls f(sub, v, s0, s1) for each run of 32 values (sub = the run's index in the block,
// v = kRun vectors) and Fmt::kCombine says how they make weights. Per run and row of x:
// p = Σ x·v, then acc_a += s0·p and acc_b += s1·Σx (or s1·p' for the second half of a
// two-scale run): two accumulators per row keep the loop-carried chains one FMA long.
template <typename S, typename Fmt>
struct ScaledBlocks {
  using V = typename S::V;
  static constexpr int kRun = 32 / S::kWidth;

  template <int M>
  static void dot(const uint8_t* w, const float* x, int64_t x_stride, int64_t k, float* out,
                  int64_t out_stride) {
    V acc_a[M];
    V acc_b[M];
    for (int i = 0; i < M; ++i) {
      acc_a[i] = S::zero();
      acc_b[i] = S::zero();
    }
    const int64_t blocks = k / Fmt::kElems;
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const float* xb = x + blk * Fmt::kElems;
      Fmt::decode(w + blk * Fmt::kBytes, [&](int sub, const V* v, float s0, float s1) {
        const V scale0 = S::set1(s0);
        const V scale1 = S::set1(s1);
        for (int i = 0; i < M; ++i) {
          const float* xr = xb + i * x_stride + 32 * sub;
          V xv[kRun];
          for (int j = 0; j < kRun; ++j) xv[j] = S::load(xr + S::kWidth * j);
          if constexpr (Fmt::kCombine == Combine::two_scales) {
            acc_a[i] = S::fmadd(scale0, dot_run<S, 0, kRun / 2>(xv, v), acc_a[i]);
            acc_b[i] = S::fmadd(scale1, dot_run<S, kRun / 2, kRun>(xv, v), acc_b[i]);
          } else {
            acc_a[i] = S::fmadd(scale0, dot_run<S, 0, kRun>(xv, v), acc_a[i]);
            if constexpr (Fmt::kCombine == Combine::scale_offset)
              acc_b[i] = S::fmadd(scale1, sum_tree<S, kRun>(xv), acc_b[i]);
          }
        }
      });
    }
    for (int i = 0; i < M; ++i) out[i * out_stride] = S::hsum(S::add(acc_a[i], acc_b[i]));
  }

  static void decode(const void* row, int64_t k, float* dst) {
    const auto* w = static_cast<const uint8_t*>(row);
    for (int64_t blk = 0; blk < k / Fmt::kElems; ++blk) {
      float* o = dst + blk * Fmt::kElems;
      Fmt::decode(w + blk * Fmt::kBytes, [&](int sub, const V* v, float s0, float s1) {
        const V scale0 = S::set1(s0);
        const V scale1 = S::set1(s1);
        for (int j = 0; j < kRun; ++j) {
          V value;
          if constexpr (Fmt::kCombine == Combine::scale) {
            value = S::mul(scale0, v[j]);
          } else if constexpr (Fmt::kCombine == Combine::scale_offset) {
            value = S::add(S::mul(scale0, v[j]), scale1);
          } else {
            value = S::mul(j < kRun / 2 ? scale0 : scale1, v[j]);
          }
          S::store(o + 32 * sub + S::kWidth * j, value);
        }
      });
    }
  }
};

// Block rows whose decoder hands out the final f32 weights, so the dot products are plain
// FMAs. Fmt::decode<kSet>(block, f) calls f(Set<s>{}, sub, w) for each run of 32 values
// (w = kRun vectors); blocks alternate between kSet 0 and 1. Up to 2 rows of x use both
// accumulator sets, more rows have enough independent chains with one.
template <typename S, typename Fmt>
struct WeightBlocks {
  using V = typename S::V;
  static constexpr int kRun = 32 / S::kWidth;

  template <int M>
  static void dot(const uint8_t* w, const float* x, int64_t x_stride, int64_t k, float* out,
                  int64_t out_stride) {
    constexpr int kSets = M <= 2 ? 2 : 1;
    V acc[M][kRun * kSets];
    for (int i = 0; i < M; ++i) {
      for (int j = 0; j < kRun * kSets; ++j) acc[i][j] = S::zero();
    }
    const int64_t blocks = k / Fmt::kElems;
    auto body = [&](const float* xb) {
      return [&, xb](auto set, int sub, const V* wv) {
        constexpr int a = kRun * (decltype(set)::value % kSets);
        for (int i = 0; i < M; ++i) {
          const float* xr = xb + i * x_stride + 32 * sub;
          for (int j = 0; j < kRun; ++j)
            acc[i][a + j] = S::fmadd(S::load(xr + S::kWidth * j), wv[j], acc[i][a + j]);
        }
      };
    };
    int64_t blk = 0;
    for (; blk + 2 <= blocks; blk += 2) {
      Fmt::template decode<0>(w + blk * Fmt::kBytes, body(x + blk * Fmt::kElems));
      Fmt::template decode<1>(w + (blk + 1) * Fmt::kBytes, body(x + (blk + 1) * Fmt::kElems));
    }
    if (blk < blocks) Fmt::template decode<0>(w + blk * Fmt::kBytes, body(x + blk * Fmt::kElems));
    for (int i = 0; i < M; ++i) {
      V sum = sum_tree<S, kRun>(acc[i]);
      if constexpr (kSets == 2) sum = S::add(sum, sum_tree<S, kRun>(acc[i] + kRun));
      out[i * out_stride] = S::hsum(sum);
    }
  }

  static void decode(const void* row, int64_t k, float* dst) {
    const auto* w = static_cast<const uint8_t*>(row);
    for (int64_t blk = 0; blk < k / Fmt::kElems; ++blk) {
      float* o = dst + blk * Fmt::kElems;
      Fmt::template decode<0>(w + blk * Fmt::kBytes, [&](auto, int sub, const V* wv) {
        for (int j = 0; j < kRun; ++j) S::store(o + 32 * sub + S::kWidth * j, wv[j]);
      });
    }
  }
};

// FlashAttention-2 backward on the CPU. See sdpa_fused_backward.h for the algorithm and
// sdpa_reference.h for the meaning of every parameter.
#include "sdpa_fused_backward.h"

#include <immintrin.h>

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "workspace.h"

// GCC 12 reports the AVX-512 intrinsics' internal _mm512_undefined_ps() as possibly uninitialised
// once they are inlined into target("avx512f") functions: a false positive (GCC bug 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace attn::kernels {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
// Tiles of 64 x 64: with D = 64 every product is a 64 x 64 x 64 block, the per-thread working set
// (k, v of the key block, transposed copies, dK and dV accumulators, one score tile and one dS
// tile: about 100 KiB) stays in L2, and the micro-kernels' 6-row blocks waste nothing (64 = 10 * 6
// + 4). 128-wide tiles measured the same or slightly slower.
constexpr int64_t kBr = 64;  // query rows per tile
constexpr int64_t kBc = 64;  // keys per tile (a multiple of 16: the tile's column vectors)

int64_t round_up8(int64_t n) { return (n + 7) / 8 * 8; }

// ---- the two tile primitives, one implementation per instruction set ----------------------------

// C (M, N) = [C +] A (M, K) B (K, N), with A[m][k] at A[m * a_m + k * a_k] (either a_m or a_k is
// 1), B row-major with leading dimension ldb, C row-major with ldc; N is a multiple of 8.
using GemmFn = void (*)(int64_t M, int64_t N, int64_t K, const float* A, int64_t a_m, int64_t a_k,
                        const float* B, int64_t ldb, float* C, int64_t ldc, bool accumulate);

// The softmax gradient of one tile of nr rows and kBc columns, in place:
//   in:  S  = q . k (raw dot products),   dP = dO . v
//   out: S  = P o Z,                       dP = scale * P o (Z o dP - D_i)
// with P = exp(scale * S + bias - lse), bias (-inf masks; optional, row stride ld_bias, 0 for one
// row shared by all), Z (dropout factors; optional, row stride kBc), and P = 0 outside the
// columns [col_lo[r], col_hi[r]] of row r that causal masking and the window leave (optional).
struct TileArgs {
  int64_t nr;
  float* S;
  float* dP;
  const float* lse;  // (nr) log-sum-exp per row, +inf for a fully masked row
  const float* Di;   // (nr) rowsum(dO o O)
  float scale;
  const float* bias;
  int64_t ld_bias;
  const float* z;
  const int32_t* col_lo;
  const int32_t* col_hi;
};
using TileFn = void (*)(const TileArgs&);

// Dropout factors of a tile: z[r * kBc + jj] = keep_scale or 0 for weight index
// first + r * row_step + jj (the counter of dropout_keep), jj < nc; 0 for jj >= nc.
struct DropoutArgs {
  float* z;
  int64_t nr, nc;
  uint64_t first, row_step, seed, offset;
  uint32_t threshold;
  float keep_scale;
};
using DropoutFn = void (*)(const DropoutArgs&);

struct Isa {
  GemmFn gemm;
  TileFn tile;
  DropoutFn dropout;
};

// ---- scalar -------------------------------------------------------------------------------------

void gemm_scalar(int64_t M, int64_t N, int64_t K, const float* A, int64_t a_m, int64_t a_k,
                 const float* B, int64_t ldb, float* C, int64_t ldc, bool accumulate) {
  for (int64_t m = 0; m < M; ++m) {
    float* c = C + m * ldc;
    if (!accumulate) std::fill(c, c + N, 0.0f);
    for (int64_t k = 0; k < K; ++k) {
      const float a = A[m * a_m + k * a_k];
      const float* b = B + k * ldb;
      for (int64_t n = 0; n < N; ++n) c[n] += a * b[n];
    }
  }
}

void tile_scalar(const TileArgs& t) {
  for (int64_t r = 0; r < t.nr; ++r) {
    float* s = t.S + r * kBc;
    float* dp = t.dP + r * kBc;
    const float* bias = t.bias ? t.bias + r * t.ld_bias : nullptr;
    const float* z = t.z ? t.z + r * kBc : nullptr;
    const int64_t lo = t.col_lo ? t.col_lo[r] : 0, hi = t.col_hi ? t.col_hi[r] : kBc;
    for (int64_t c = 0; c < kBc; ++c) {
      float x = s[c] * t.scale;
      if (bias) x += bias[c];
      if (c < lo || c > hi) x = -std::numeric_limits<float>::infinity();
      float p = std::exp(x - t.lse[r]);
      float g = dp[c];
      if (z) g *= z[c];
      dp[c] = t.scale * p * (g - t.Di[r]);
      s[c] = z ? p * z[c] : p;
    }
  }
}

void dropout_scalar(const DropoutArgs& a) {
  for (int64_t r = 0; r < a.nr; ++r) {
    float* z = a.z + r * kBc;
    // The generator's state advances by kDropoutGamma per index along the row.
    uint64_t state = dropout_state(a.seed, a.offset, a.first + uint64_t(r) * a.row_step);
    for (int64_t jj = 0; jj < a.nc; ++jj, state += kDropoutGamma)
      z[jj] = uint32_t(dropout_mix(state) >> 32) >= a.threshold ? a.keep_scale : 0.0f;
    std::fill(z + a.nc, z + kBc, 0.0f);
  }
}

// ---- AVX2 / FMA ---------------------------------------------------------------------------------

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define ATTN_HAVE_AVX2_PATH 1
#define ATTN_AVX2 __attribute__((target("avx2,fma")))

// exp(x) for 8 floats: Cephes' expf (range reduction by ln 2, degree-6 polynomial; about 1 ulp).
// Arguments below ln(FLT_MIN) give exactly 0 (so exp(-inf) == 0 for masked scores).
ATTN_AVX2 inline __m256 exp256(__m256 x) {
  const __m256 underflow = _mm256_cmp_ps(x, _mm256_set1_ps(-87.33654475f), _CMP_LT_OQ);
  x = _mm256_min_ps(x, _mm256_set1_ps(88.3762626647949f));
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.33654475f));
  const __m256 fx = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(fx, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, x, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_fmadd_ps(y, _mm256_mul_ps(x, x), _mm256_add_ps(x, _mm256_set1_ps(1.0f)));
  const __m256i e =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(fx), _mm256_set1_epi32(127)), 23);
  y = _mm256_mul_ps(y, _mm256_castsi256_ps(e));
  return _mm256_andnot_ps(underflow, y);
}

// One MR x (8 NV) block of C, the K products accumulated in registers. A[m][k] is read as
// broadcasts: AM1 means a_m == 1 (A's rows for one k are contiguous), else a_k == 1.
template <int MR, int NV, bool AM1>
ATTN_AVX2 inline void micro_avx2(int64_t K, const float* A, int64_t a_m, int64_t a_k,
                                 const float* B, int64_t ldb, float* C, int64_t ldc,
                                 bool accumulate) {
  __m256 acc[MR][NV];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm256_setzero_ps();
  if constexpr (AM1) {
    for (int64_t k = 0; k < K; ++k) {
      const float* a = A + k * a_k;
      const float* b = B + k * ldb;
      __m256 bv[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) bv[v] = _mm256_loadu_ps(b + 8 * v);
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const __m256 ai = _mm256_broadcast_ss(a + i);
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[i][v] = _mm256_fmadd_ps(ai, bv[v], acc[i][v]);
      }
    }
  } else {
    const float* a[MR];
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) a[i] = A + i * a_m;
    for (int64_t k = 0; k < K; ++k) {
      const float* b = B + k * ldb;
      __m256 bv[NV];
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) bv[v] = _mm256_loadu_ps(b + 8 * v);
#pragma GCC unroll 8
      for (int i = 0; i < MR; ++i) {
        const __m256 ai = _mm256_broadcast_ss(a[i] + k);
#pragma GCC unroll 4
        for (int v = 0; v < NV; ++v) acc[i][v] = _mm256_fmadd_ps(ai, bv[v], acc[i][v]);
      }
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      float* c = C + i * ldc + 8 * v;
      _mm256_storeu_ps(c, accumulate ? _mm256_add_ps(_mm256_loadu_ps(c), acc[i][v]) : acc[i][v]);
    }
}

// A strip of columns [8 NV): full blocks of 6 rows, then the remainder.
template <int NV, bool AM1>
ATTN_AVX2 void strip_avx2(int64_t M, int64_t K, const float* A, int64_t a_m, int64_t a_k,
                          const float* B, int64_t ldb, float* C, int64_t ldc, bool accumulate) {
  constexpr int MR = 6;
  int64_t m = 0;
  for (; m + MR <= M; m += MR)
    micro_avx2<MR, NV, AM1>(K, A + m * a_m, a_m, a_k, B, ldb, C + m * ldc, ldc, accumulate);
  const float* a = A + m * a_m;
  float* c = C + m * ldc;
  switch (M - m) {
    case 1: micro_avx2<1, NV, AM1>(K, a, a_m, a_k, B, ldb, c, ldc, accumulate); break;
    case 2: micro_avx2<2, NV, AM1>(K, a, a_m, a_k, B, ldb, c, ldc, accumulate); break;
    case 3: micro_avx2<3, NV, AM1>(K, a, a_m, a_k, B, ldb, c, ldc, accumulate); break;
    case 4: micro_avx2<4, NV, AM1>(K, a, a_m, a_k, B, ldb, c, ldc, accumulate); break;
    case 5: micro_avx2<5, NV, AM1>(K, a, a_m, a_k, B, ldb, c, ldc, accumulate); break;
    default: break;
  }
}

template <bool AM1>
ATTN_AVX2 void gemm_avx2_impl(int64_t M, int64_t N, int64_t K, const float* A, int64_t a_m,
                              int64_t a_k, const float* B, int64_t ldb, float* C, int64_t ldc,
                              bool accumulate) {
  int64_t n = 0;
  for (; n + 16 <= N; n += 16)
    strip_avx2<2, AM1>(M, K, A, a_m, a_k, B + n, ldb, C + n, ldc, accumulate);
  if (n < N) strip_avx2<1, AM1>(M, K, A, a_m, a_k, B + n, ldb, C + n, ldc, accumulate);
}

ATTN_AVX2 void gemm_avx2(int64_t M, int64_t N, int64_t K, const float* A, int64_t a_m, int64_t a_k,
                         const float* B, int64_t ldb, float* C, int64_t ldc, bool accumulate) {
  assert(N % 8 == 0 && (a_m == 1 || a_k == 1));
  if (a_k == 1)
    gemm_avx2_impl<false>(M, N, K, A, a_m, a_k, B, ldb, C, ldc, accumulate);
  else
    gemm_avx2_impl<true>(M, N, K, A, a_m, a_k, B, ldb, C, ldc, accumulate);
}

ATTN_AVX2 void tile_avx2(const TileArgs& t) {
  const __m256 scale = _mm256_set1_ps(t.scale);
  for (int64_t r = 0; r < t.nr; ++r) {
    float* s = t.S + r * kBc;
    float* dp = t.dP + r * kBc;
    const float* bias = t.bias ? t.bias + r * t.ld_bias : nullptr;
    const float* z = t.z ? t.z + r * kBc : nullptr;
    const __m256 lse = _mm256_set1_ps(t.lse[r]);
    const __m256 Di = _mm256_set1_ps(t.Di[r]);
    // Columns outside [lo, hi] are masked: lo - 1 < c < hi + 1 with signed compares.
    const __m256i lo = _mm256_set1_epi32(t.col_lo ? t.col_lo[r] - 1 : -1);
    const __m256i hi = _mm256_set1_epi32(t.col_hi ? t.col_hi[r] + 1 : int32_t(kBc));
    __m256i col = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int64_t c = 0; c < kBc; c += 8, col = _mm256_add_epi32(col, _mm256_set1_epi32(8))) {
      __m256 x = _mm256_loadu_ps(s + c);
      x = bias ? _mm256_sub_ps(_mm256_fmadd_ps(x, scale, _mm256_loadu_ps(bias + c)), lse)
               : _mm256_fmsub_ps(x, scale, lse);
      if (t.col_lo) {
        const __m256i in =
            _mm256_and_si256(_mm256_cmpgt_epi32(col, lo), _mm256_cmpgt_epi32(hi, col));
        x = _mm256_blendv_ps(_mm256_set1_ps(-kInf), x, _mm256_castsi256_ps(in));
      }
      __m256 p = exp256(x);
      __m256 g = _mm256_loadu_ps(dp + c);
      if (z) {
        const __m256 zz = _mm256_loadu_ps(z + c);
        g = _mm256_mul_ps(g, zz);
        _mm256_storeu_ps(dp + c, _mm256_mul_ps(_mm256_mul_ps(scale, p), _mm256_sub_ps(g, Di)));
        p = _mm256_mul_ps(p, zz);
      } else {
        _mm256_storeu_ps(dp + c, _mm256_mul_ps(_mm256_mul_ps(scale, p), _mm256_sub_ps(g, Di)));
      }
      _mm256_storeu_ps(s + c, p);
    }
  }
}

// ---- AVX-512 ------------------------------------------------------------------------------------
// The same products on 16-float registers. With 32 registers a micro-tile holds 6 rows x 64
// columns (24 accumulators), so each k step issues 4 loads and 6 broadcasts for 24 FMAs: fewer
// instructions per FMA than AVX2's 6 x 16 tile, which is what limits AVX2 here.
#define ATTN_AVX512 __attribute__((target("avx512f,avx2,fma")))

template <int MR, int NV, bool AM1>
ATTN_AVX512 inline void micro_avx512(int64_t K, const float* A, int64_t a_m, int64_t a_k,
                                     const float* B, int64_t ldb, float* C, int64_t ldc,
                                     bool accumulate) {
  __m512 acc[MR][NV];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_setzero_ps();
  const float* a[MR];
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i) a[i] = A + i * a_m;
  for (int64_t k = 0; k < K; ++k) {
    const float* b = B + k * ldb;
    __m512 bv[NV];
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) bv[v] = _mm512_loadu_ps(b + 16 * v);
#pragma GCC unroll 8
    for (int i = 0; i < MR; ++i) {
      const __m512 ai = _mm512_set1_ps(AM1 ? A[k * a_k + i] : a[i][k]);
#pragma GCC unroll 4
      for (int v = 0; v < NV; ++v) acc[i][v] = _mm512_fmadd_ps(ai, bv[v], acc[i][v]);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < MR; ++i)
#pragma GCC unroll 4
    for (int v = 0; v < NV; ++v) {
      float* c = C + i * ldc + 16 * v;
      _mm512_storeu_ps(c, accumulate ? _mm512_add_ps(_mm512_loadu_ps(c), acc[i][v]) : acc[i][v]);
    }
}

template <int NV, bool AM1>
ATTN_AVX512 void strip_avx512(int64_t M, int64_t K, const float* A, int64_t a_m, int64_t a_k,
                              const float* B, int64_t ldb, float* C, int64_t ldc, bool accumulate) {
  constexpr int MR = 6;
  int64_t m = 0;
  for (; m + MR <= M; m += MR)
    micro_avx512<MR, NV, AM1>(K, A + m * a_m, a_m, a_k, B, ldb, C + m * ldc, ldc, accumulate);
  const float* a = A + m * a_m;
  float* c = C + m * ldc;
  switch (M - m) {
    case 1: micro_avx512<1, NV, AM1>(K, a, a_m, a_k, B, ldb, c, ldc, accumulate); break;
    case 2: micro_avx512<2, NV, AM1>(K, a, a_m, a_k, B, ldb, c, ldc, accumulate); break;
    case 3: micro_avx512<3, NV, AM1>(K, a, a_m, a_k, B, ldb, c, ldc, accumulate); break;
    case 4: micro_avx512<4, NV, AM1>(K, a, a_m, a_k, B, ldb, c, ldc, accumulate); break;
    case 5: micro_avx512<5, NV, AM1>(K, a, a_m, a_k, B, ldb, c, ldc, accumulate); break;
    default: break;
  }
}

template <bool AM1>
ATTN_AVX512 void gemm_avx512_impl(int64_t M, int64_t N, int64_t K, const float* A, int64_t a_m,
                                  int64_t a_k, const float* B, int64_t ldb, float* C, int64_t ldc,
                                  bool accumulate) {
  int64_t n = 0;
  for (; n + 64 <= N; n += 64)
    strip_avx512<4, AM1>(M, K, A, a_m, a_k, B + n, ldb, C + n, ldc, accumulate);
  switch ((N - n) / 16) {
    case 1: strip_avx512<1, AM1>(M, K, A, a_m, a_k, B + n, ldb, C + n, ldc, accumulate); break;
    case 2: strip_avx512<2, AM1>(M, K, A, a_m, a_k, B + n, ldb, C + n, ldc, accumulate); break;
    case 3: strip_avx512<3, AM1>(M, K, A, a_m, a_k, B + n, ldb, C + n, ldc, accumulate); break;
    default: break;
  }
  n += (N - n) / 16 * 16;
  if (n < N)  // the last 8 columns
    strip_avx2<1, AM1>(M, K, A, a_m, a_k, B + n, ldb, C + n, ldc, accumulate);
}

ATTN_AVX512 void gemm_avx512(int64_t M, int64_t N, int64_t K, const float* A, int64_t a_m,
                             int64_t a_k, const float* B, int64_t ldb, float* C, int64_t ldc,
                             bool accumulate) {
  assert(N % 8 == 0 && (a_m == 1 || a_k == 1));
  if (a_k == 1)
    gemm_avx512_impl<false>(M, N, K, A, a_m, a_k, B, ldb, C, ldc, accumulate);
  else
    gemm_avx512_impl<true>(M, N, K, A, a_m, a_k, B, ldb, C, ldc, accumulate);
}

// The softmax-gradient tile on 16 lanes. P = 2^((S * scale - lse) * log2(e)) with the
// power of two split as 2^n * 2^f, n = round(t), |f| <= 1/2, 2^f by a degree-6 polynomial
// (relative error ~2e-9 before rounding; the forward kernel uses the same approximation) and
// 2^n applied by vscalefps; t is clamped at -200 so that masked scores (-inf) give exactly 0.
ATTN_AVX512 inline __m512 exp2_512(__m512 t) {
  t = _mm512_max_ps(t, _mm512_set1_ps(-200.0f));
  t = _mm512_min_ps(t, _mm512_set1_ps(127.0f));
  const __m512 n = _mm512_roundscale_ps(t, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(t, n);
  __m512 y = _mm512_set1_ps(0.00015356390775861652f);
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(0.001339911648654465f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(0.009618426086612486f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(0.055503316168044145f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(0.2402264801106379f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(0.6931472035320722f));
  y = _mm512_fmadd_ps(y, f, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(y, n);
}

ATTN_AVX512 void tile_avx512(const TileArgs& t) {
  static_assert(kBc % 16 == 0);
  constexpr float kLog2e = 1.44269504088896341f;
  const __m512 scale = _mm512_set1_ps(t.scale);
  const __m512 log2e = _mm512_set1_ps(kLog2e);
  const __m512 iota = _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  for (int64_t r = 0; r < t.nr; ++r) {
    float* s = t.S + r * kBc;
    float* dp = t.dP + r * kBc;
    const float* bias = t.bias ? t.bias + r * t.ld_bias : nullptr;
    const float* z = t.z ? t.z + r * kBc : nullptr;
    const __m512 lse = _mm512_set1_ps(t.lse[r]);
    const __m512 Di = _mm512_set1_ps(t.Di[r]);
    const __m512 lo = _mm512_set1_ps(t.col_lo ? float(t.col_lo[r]) : 0.0f);
    const __m512 hi = _mm512_set1_ps(t.col_hi ? float(t.col_hi[r]) : float(kBc));
    for (int64_t c = 0; c < kBc; c += 16) {
      // x = scale * S + bias - lse in natural units first: near the row max it is small and
      // carries only its own rounding (scaling lse by log2(e) first would add ulp(|lse|)).
      __m512 x = _mm512_loadu_ps(s + c);
      x = bias ? _mm512_sub_ps(_mm512_fmadd_ps(x, scale, _mm512_loadu_ps(bias + c)), lse)
               : _mm512_fmsub_ps(x, scale, lse);
      __m512 p = exp2_512(_mm512_mul_ps(x, log2e));
      if (t.col_lo) {  // keep columns lo <= c <= hi
        const __m512 col = _mm512_add_ps(iota, _mm512_set1_ps(float(c)));
        const __mmask16 in =
            _mm512_cmp_ps_mask(col, lo, _CMP_GE_OQ) & _mm512_cmp_ps_mask(col, hi, _CMP_LE_OQ);
        p = _mm512_maskz_mov_ps(in, p);
      }
      __m512 g = _mm512_loadu_ps(dp + c);
      if (z) {
        const __m512 zz = _mm512_loadu_ps(z + c);
        g = _mm512_mul_ps(g, zz);
        _mm512_storeu_ps(dp + c, _mm512_mul_ps(_mm512_mul_ps(scale, p), _mm512_sub_ps(g, Di)));
        p = _mm512_mul_ps(p, zz);
      } else {
        _mm512_storeu_ps(dp + c, _mm512_mul_ps(_mm512_mul_ps(scale, p), _mm512_sub_ps(g, Di)));
      }
      _mm512_storeu_ps(s + c, p);
    }
  }
}
#endif  // x86

// SplitMix64 on 8 lanes (AVX512DQ has the 64-bit multiply), 16 factors per step.
#define ATTN_AVX512DQ __attribute__((target("avx512f,avx512dq,avx2,fma")))

ATTN_AVX512DQ inline __mmask8 keep8(__m512i state, __m512i threshold) {
  __m512i z = state;
  z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 30)),
                         _mm512_set1_epi64(int64_t(kDropoutMul1)));
  z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 27)),
                         _mm512_set1_epi64(int64_t(kDropoutMul2)));
  z = _mm512_xor_si512(z, _mm512_srli_epi64(z, 31));
  return _mm512_cmpge_epu64_mask(_mm512_srli_epi64(z, 32), threshold);
}

ATTN_AVX512DQ void dropout_avx512(const DropoutArgs& a) {
  static_assert(kBc % 16 == 0);
  const __m512i threshold = _mm512_set1_epi64(int64_t(a.threshold));
  const __m512i lane = _mm512_mullo_epi64(_mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7),
                                          _mm512_set1_epi64(int64_t(kDropoutGamma)));
  const __m512i step8 = _mm512_set1_epi64(int64_t(8 * kDropoutGamma));
  const __m512 keep_scale = _mm512_set1_ps(a.keep_scale);
  for (int64_t r = 0; r < a.nr; ++r) {
    float* z = a.z + r * kBc;
    const uint64_t s0 = dropout_state(a.seed, a.offset, a.first + uint64_t(r) * a.row_step);
    __m512i state = _mm512_add_epi64(_mm512_set1_epi64(int64_t(s0)), lane);
    for (int64_t jj = 0; jj < kBc; jj += 16) {
      const __mmask8 lo = keep8(state, threshold);
      state = _mm512_add_epi64(state, step8);
      const __mmask8 hi = keep8(state, threshold);
      state = _mm512_add_epi64(state, step8);
      __mmask16 keep = __mmask16(lo | (unsigned(hi) << 8));
      if (jj + 16 > a.nc)  // columns past nc get 0
        keep &= __mmask16(a.nc > jj ? (1u << (a.nc - jj)) - 1 : 0);
      _mm512_storeu_ps(z + jj, _mm512_maskz_mov_ps(keep, keep_scale));
    }
  }
}

bool cpu_has(FusedBackwardIsa isa) {
#ifdef ATTN_HAVE_AVX2_PATH
  static const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  static const bool avx512 =
      avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
  if (isa == FusedBackwardIsa::Avx2) return avx2;
  if (isa == FusedBackwardIsa::Avx512) return avx512;
#endif
  return isa == FusedBackwardIsa::Scalar || isa == FusedBackwardIsa::Auto;
}

// The requested instruction set, or the best one below it that this CPU has.
Isa pick_isa(FusedBackwardIsa want) {
#ifdef ATTN_HAVE_AVX2_PATH
  if ((want == FusedBackwardIsa::Auto || want == FusedBackwardIsa::Avx512) &&
      cpu_has(FusedBackwardIsa::Avx512))
    return {gemm_avx512, tile_avx512, dropout_avx512};
  if (want != FusedBackwardIsa::Scalar && cpu_has(FusedBackwardIsa::Avx2))
    return {gemm_avx2, tile_avx2, dropout_scalar};
#endif
  return {gemm_scalar, tile_scalar, dropout_scalar};
}

// ---- the driver (instruction-set independent) ---------------------------------------------------

// Per-thread tiles.
struct Scratch {
  std::vector<float> Kt;    // (D, kBc)     k of the key block, transposed
  std::vector<float> Vt;    // (D_v, kBc)   v of the key block, transposed
  std::vector<float> Kn;    // (kBc, D_p)   k of the key block, rows padded (when D % 8 != 0)
  std::vector<float> dK;    // (kBc, D_p)   dk of the key block, accumulated over query tiles
  std::vector<float> dV;    // (kBc, D_vp)
  std::vector<float> S;     // (kBr, kBc)   scores, then P o Z
  std::vector<float> dP;    // (kBr, kBc)   dO . v, then dS
  std::vector<float> bias;  // (kBr, kBc)   additive masks of a partial tile
  std::vector<float> z;     // (kBr, kBc)   dropout factors
  std::vector<float> Qp;    // (kBr, D_p)   q rows padded (when D % 8 != 0)
  std::vector<float> dOp;   // (kBr, D_vp)  dout rows padded (when D_v % 8 != 0)
  std::vector<float> kpad;  // (kBc)        key padding as 0 / -inf
  std::vector<int32_t> col_lo, col_hi;  // (kBr) visible columns of each row of a partial tile
};

// Visibility from causal masking and the sliding window, as offsets t = j - i - off of key j
// from query i: visible iff lo <= t <= hi.
struct Band {
  int64_t off, lo, hi;
};

Band make_band(const SdpaParams& p) {
  const int64_t big = p.L_q + p.L_k + 1;  // beyond any |j - i - off|
  Band band{p.causal_bottom_right ? p.L_k - p.L_q : 0, -big, big};
  if (p.causal) band.hi = 0;
  if (p.window_right >= 0) band.hi = std::min(band.hi, p.window_right);
  if (p.window_left >= 0) band.lo = std::max(band.lo, -p.window_left);
  return band;
}

struct Driver {
  const SdpaBackwardParams& bp;
  const SdpaParams& p;
  Isa isa;
  int64_t G, Dp, Dvp, nkb, C;
  bool direct;  // chunk 0 accumulates dQ straight into dq
  Band band;
  std::vector<float> lse;    // (B, H, L_q)  saved lse, +inf for fully masked rows
  std::vector<float> Di;     // (B, H, L_q)  rowsum(dout o out)
  std::vector<float> dqbuf;  // (C or C - 1, B, H, L_q, D_p)

  Driver(const SdpaBackwardParams& bp_, Isa isa_) : bp(bp_), p(bp_.fwd), isa(isa_) {}

  // dQ accumulator of chunk c for (b, h): pointer to row 0 and row stride.
  std::pair<float*, int64_t> dq_chunk(int64_t c, int64_t b, int64_t h) {
    if (direct && c == 0)
      return {bp.dq + b * bp.dq_batch_stride + h * bp.dq_head_stride, bp.dq_row_stride};
    const int64_t slot = direct ? c - 1 : c;
    return {dqbuf.data() + ((slot * p.B + b) * p.H + h) * p.L_q * Dp, Dp};
  }

  void run(bool parallel);
  void unit(int64_t b, int64_t h_kv, int64_t chunk, Scratch& sc);
  void key_block(int64_t b, int64_t h_kv, int64_t chunk, int64_t kb, Scratch& sc);
};

void Driver::run(bool parallel) {
  const int64_t B = p.B, H = p.H, L_q = p.L_q, rows = B * H * L_q;
  G = H / p.H_kv;
  Dp = round_up8(p.D), Dvp = round_up8(p.D_v);
  nkb = (p.L_k + kBc - 1) / kBc;
  band = make_band(p);

  // ---- how many dQ chunks: enough work units to keep threads busy, at most 32 MiB extra -------
  // C is a power of two (thread counts usually are, so the units divide evenly among them) and
  // depends on the sizes only, never on the number of threads.
  direct = p.D % 8 == 0;
  const int64_t units_bh = std::max<int64_t>(B * p.H_kv, 1);
  const int64_t chunk_bytes = std::max<int64_t>(rows * Dp * int64_t(sizeof(float)), 1);
  const int64_t budget = (int64_t(32) << 20) / chunk_bytes + (direct ? 1 : 0);
  C = 1;
  while (units_bh * C < 16 && 2 * C <= nkb && 2 * C <= budget) C *= 2;
  const int64_t n_buf = direct ? C - 1 : C;

  lse.resize(size_t(rows));
  Di.resize(size_t(rows));
  dqbuf.assign(size_t(n_buf * rows * Dp), 0.0f);

  // ---- per-row statistics; zero dq when it is accumulated in place -----------------------------
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = r % L_q, bh = r / L_q, b = bh / H, h = bh % H;
    const float l = p.lse[r];
    lse[r] = l == -kInf ? kInf : l;  // exp(s - inf) == 0: a fully masked row has no gradient
    const float* o = p.out + b * p.out_batch_stride + h * p.out_head_stride + i * p.out_row_stride;
    const float* g =
        bp.dout + b * bp.dout_batch_stride + h * bp.dout_head_stride + i * bp.dout_row_stride;
    double acc = 0;
    for (int64_t e = 0; e < p.D_v; ++e) acc += double(o[e]) * double(g[e]);
    Di[r] = float(acc);
    if (direct) {
      float* dq = bp.dq + b * bp.dq_batch_stride + h * bp.dq_head_stride + i * bp.dq_row_stride;
      std::fill(dq, dq + p.D, 0.0f);
    }
  }

  // ---- the work units (b, h_kv, chunk) ---------------------------------------------------------
  const int64_t units = B * p.H_kv * C;
  const double scratch_floats = double(p.D + p.D_v) * kBc + (p.D % 8 ? double(kBc) * Dp : 0.0) +
                                double(kBc) * (Dp + Dvp) + 4.0 * kBr * kBc +
                                (p.D % 8 ? double(kBr) * Dp : 0.0) +
                                (p.D_v % 8 ? double(kBr) * Dvp : 0.0) + kBc + 2.0 * kBr;
  ThreadScratch scratch(scratch_floats * sizeof(float),
                        "the fused attention backward's per-thread scratch");
#pragma omp parallel if (parallel)
  {
    Scratch sc;
    scratch.allocate([&] {
      sc.Kt.assign(size_t(p.D * kBc), 0.0f);
      sc.Vt.assign(size_t(p.D_v * kBc), 0.0f);
      if (p.D % 8) sc.Kn.assign(size_t(kBc * Dp), 0.0f);
      sc.dK.resize(size_t(kBc * Dp));
      sc.dV.resize(size_t(kBc * Dvp));
      sc.S.resize(size_t(kBr * kBc));
      sc.dP.resize(size_t(kBr * kBc));
      sc.bias.resize(size_t(kBr * kBc));
      sc.z.resize(size_t(kBr * kBc));
      if (p.D % 8) sc.Qp.assign(size_t(kBr * Dp), 0.0f);
      if (p.D_v % 8) sc.dOp.assign(size_t(kBr * Dvp), 0.0f);
      sc.kpad.resize(size_t(kBc));
      sc.col_lo.resize(size_t(kBr));
      sc.col_hi.resize(size_t(kBr));
    });
#pragma omp for schedule(dynamic, 1)
    for (int64_t u = 0; u < units; ++u) {
      if (scratch.failed()) continue;  // reported after the region
      const int64_t chunk = u % C, bh = u / C;
      unit(bh / p.H_kv, bh % p.H_kv, chunk, sc);
    }
  }
  scratch.check();

  // ---- dq = sum of the chunks, in chunk order --------------------------------------------------
  if (n_buf == 0) return;
#pragma omp parallel for schedule(static) if (parallel)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = r % L_q, bh = r / L_q, b = bh / H, h = bh % H;
    float* dq = bp.dq + b * bp.dq_batch_stride + h * bp.dq_head_stride + i * bp.dq_row_stride;
    for (int64_t c = 0; c < C; ++c) {
      auto [buf, ld] = dq_chunk(c, b, h);
      const float* src = buf + i * ld;
      if (c == 0 && !direct)
        std::copy(src, src + p.D, dq);
      else if (c > 0)
        for (int64_t d = 0; d < p.D; ++d) dq[d] += src[d];
    }
  }
}

void Driver::unit(int64_t b, int64_t h_kv, int64_t chunk, Scratch& sc) {
  for (int64_t kb = chunk; kb < nkb; kb += C) key_block(b, h_kv, chunk, kb, sc);
}

void Driver::key_block(int64_t b, int64_t h_kv, int64_t chunk, int64_t kb, Scratch& sc) {
  const int64_t D = p.D, D_v = p.D_v, L_q = p.L_q;
  const int64_t j0 = kb * kBc, nc = std::min(kBc, p.L_k - j0);
  const float* k = p.k + b * p.k_batch_stride + h_kv * p.k_head_stride + j0 * p.k_row_stride;
  const float* v = p.v + b * p.v_batch_stride + h_kv * p.v_head_stride + j0 * p.v_row_stride;

  // ---- the key block: transposed copies of k and v (zero columns past nc), k rows for dQ -------
  for (int64_t jj = 0; jj < kBc; ++jj) {
    const bool in = jj < nc;
    for (int64_t d = 0; d < D; ++d) sc.Kt[d * kBc + jj] = in ? k[jj * p.k_row_stride + d] : 0.0f;
    for (int64_t e = 0; e < D_v; ++e) sc.Vt[e * kBc + jj] = in ? v[jj * p.v_row_stride + e] : 0.0f;
  }
  const float* Kn = k;
  int64_t ld_Kn = p.k_row_stride;
  if (D % 8) {
    for (int64_t jj = 0; jj < nc; ++jj)
      std::copy(k + jj * p.k_row_stride, k + jj * p.k_row_stride + D, sc.Kn.data() + jj * Dp);
    Kn = sc.Kn.data(), ld_Kn = Dp;
  }
  std::fill(sc.dK.begin(), sc.dK.end(), 0.0f);
  std::fill(sc.dV.begin(), sc.dV.end(), 0.0f);

  // ---- key padding of this block as an additive row ---------------------------------------------
  bool kpad_any = false;
  if (p.key_padding) {
    const uint8_t* pad = p.key_padding + b * p.key_padding_batch_stride + j0;
    for (int64_t jj = 0; jj < kBc; ++jj) {
      const bool masked = jj >= nc || pad[jj];
      sc.kpad[jj] = masked ? -kInf : 0.0f;
      kpad_any |= jj < nc && pad[jj];
    }
  }

  // ---- query rows that see at least one key of the block: [i_begin, i_end) ----------------------
  const int64_t j1 = j0 + nc;
  const int64_t i_begin = std::max<int64_t>(0, j0 - band.off - band.hi);
  const int64_t i_end = std::min<int64_t>(L_q, j1 - 1 - band.off - band.lo + 1);
  const float scale = float(p.scale);

  for (int64_t g = 0; g < G && i_begin < i_end; ++g) {
    const int64_t h = h_kv * G + g;
    const float* q = p.q + b * p.q_batch_stride + h * p.q_head_stride;
    const float* dout = bp.dout + b * bp.dout_batch_stride + h * bp.dout_head_stride;
    const int64_t row0 = (b * p.H + h) * L_q;  // index of row 0 of (b, h) in (B, H, L_q)
    auto [dq, ld_dq] = dq_chunk(chunk, b, h);

    for (int64_t i0 = i_begin / kBr * kBr; i0 < i_end; i0 += kBr) {
      const int64_t nr = std::min(kBr, L_q - i0);
      const float* q_t = q + i0 * p.q_row_stride;            // (nr, D)
      const float* dout_t = dout + i0 * bp.dout_row_stride;  // (nr, D_v)

      // S = q k^T and dP = dout v^T for the tile.
      isa.gemm(nr, kBc, D, q_t, p.q_row_stride, 1, sc.Kt.data(), kBc, sc.S.data(), kBc, false);
      isa.gemm(nr, kBc, D_v, dout_t, bp.dout_row_stride, 1, sc.Vt.data(), kBc, sc.dP.data(), kBc,
               false);

      // Causal masking and the window: a tile entirely inside the band needs nothing, a partial
      // one gets each row's visible columns.
      const bool inside =
          j1 - 1 - i0 - band.off <= band.hi && j0 - (i0 + nr - 1) - band.off >= band.lo;
      if (!inside)
        for (int64_t r = 0; r < nr; ++r) {
          const int64_t i = i0 + r;
          sc.col_lo[r] = int32_t(std::clamp<int64_t>(i + band.off + band.lo - j0, 0, kBc));
          sc.col_hi[r] = int32_t(std::clamp<int64_t>(i + band.off + band.hi - j0, -1, nc - 1));
        }
      // Explicit masks and key padding as an additive bias (key padding alone: one shared row).
      const float* bias = nullptr;
      int64_t ld_bias = 0;
      if (p.mask_kind != MaskKind::None) {
        const int64_t mbase =
            b * p.mask_batch_stride + h * p.mask_head_stride + j0 * p.mask_col_stride;
        for (int64_t r = 0; r < nr; ++r) {
          float* brow = sc.bias.data() + r * kBc;
          const int64_t m0 = mbase + (i0 + r) * p.mask_row_stride, cs = p.mask_col_stride;
          if (p.mask_kind == MaskKind::Bool) {
            const auto* m = static_cast<const uint8_t*>(p.mask) + m0;
            for (int64_t jj = 0; jj < nc; ++jj) brow[jj] = m[jj * cs] ? 0.0f : -kInf;
          } else {
            const auto* m = static_cast<const float*>(p.mask) + m0;
            for (int64_t jj = 0; jj < nc; ++jj) brow[jj] = m[jj * cs];
          }
          if (p.key_padding)
            for (int64_t jj = 0; jj < nc; ++jj) brow[jj] += sc.kpad[jj];
          std::fill(brow + nc, brow + kBc, -kInf);
        }
        bias = sc.bias.data(), ld_bias = kBc;
      } else if (kpad_any) {
        bias = sc.kpad.data();
      }

      // Dropout factors, regenerated from the seed (or read from the materialised factors).
      const float* z = nullptr;
      if (p.dropout_scale) {
        for (int64_t r = 0; r < nr; ++r) {
          float* zrow = sc.z.data() + r * kBc;
          const float* src = p.dropout_scale + (row0 + i0 + r) * p.L_k + j0;
          std::copy(src, src + nc, zrow);
          std::fill(zrow + nc, zrow + kBc, 0.0f);
        }
        z = sc.z.data();
      } else if (p.dropout_p > 0.0) {
        isa.dropout({sc.z.data(), nr, nc, uint64_t((row0 + i0) * p.L_k + j0), uint64_t(p.L_k),
                     p.dropout_seed, p.dropout_offset, dropout_threshold(p.dropout_p),
                     dropout_keep_scale(p.dropout_p)});
        z = sc.z.data();
      }

      isa.tile({nr, sc.S.data(), sc.dP.data(), lse.data() + row0 + i0, Di.data() + row0 + i0, scale,
                bias, ld_bias, z, inside ? nullptr : sc.col_lo.data(),
                inside ? nullptr : sc.col_hi.data()});

      // B operands with padded rows when the head dims are not multiples of 8.
      const float* dO_b = dout_t;
      int64_t ld_dO = bp.dout_row_stride;
      if (D_v % 8) {
        for (int64_t r = 0; r < nr; ++r)
          std::copy(dout_t + r * bp.dout_row_stride, dout_t + r * bp.dout_row_stride + D_v,
                    sc.dOp.data() + r * Dvp);
        dO_b = sc.dOp.data(), ld_dO = Dvp;
      }
      const float* Q_b = q_t;
      int64_t ld_Q = p.q_row_stride;
      if (D % 8) {
        for (int64_t r = 0; r < nr; ++r)
          std::copy(q_t + r * p.q_row_stride, q_t + r * p.q_row_stride + D, sc.Qp.data() + r * Dp);
        Q_b = sc.Qp.data(), ld_Q = Dp;
      }

      // dV += (P o Z)^T dO,  dK += dS^T Q,  dQ += dS K  (scale is inside dS).
      isa.gemm(nc, Dvp, nr, sc.S.data(), 1, kBc, dO_b, ld_dO, sc.dV.data(), Dvp, true);
      isa.gemm(nc, Dp, nr, sc.dP.data(), 1, kBc, Q_b, ld_Q, sc.dK.data(), Dp, true);
      isa.gemm(nr, Dp, nc, sc.dP.data(), kBc, 1, Kn, ld_Kn, dq + i0 * ld_dq, ld_dq, true);
    }
  }

  // ---- write the block's dk and dv
  // ----------------------------------------------------------------
  float* dk = bp.dk + b * bp.dk_batch_stride + h_kv * bp.dk_head_stride + j0 * bp.dk_row_stride;
  float* dv = bp.dv + b * bp.dv_batch_stride + h_kv * bp.dv_head_stride + j0 * bp.dv_row_stride;
  for (int64_t jj = 0; jj < nc; ++jj) {
    std::copy(sc.dK.data() + jj * Dp, sc.dK.data() + jj * Dp + D, dk + jj * bp.dk_row_stride);
    std::copy(sc.dV.data() + jj * Dvp, sc.dV.data() + jj * Dvp + D_v, dv + jj * bp.dv_row_stride);
  }
}

}  // namespace

bool sdpa_fused_backward_supported(FusedBackwardIsa isa) { return cpu_has(isa); }

void sdpa_fused_backward(const SdpaBackwardParams& params, FusedBackwardIsa isa) {
  const SdpaParams& p = params.fwd;
  assert(p.B >= 0 && p.H >= 1 && p.H_kv >= 1 && p.H % p.H_kv == 0);
  assert(p.L_q >= 0 && p.L_k >= 0 && p.D >= 0 && p.D_v >= 0);
  assert(p.mask_kind == MaskKind::None || p.mask != nullptr);
  assert(p.out && p.lse && params.dout && params.dq && params.dk && params.dv);
  if (p.B == 0) return;
  // Threads pay off once there is real work; tiny problems stay serial.
  const bool parallel = p.B * p.H * (p.L_q + 1) * (p.L_k + 1) * (p.D + p.D_v + 1) > (1 << 18);
  Driver driver(params, pick_isa(isa));
  driver.run(parallel);
}

}  // namespace attn::kernels

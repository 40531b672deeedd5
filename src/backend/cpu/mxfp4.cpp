// mxfp4.h: MXFP4 products and decoding.
#include "mxfp4.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "gemm.h"
#include "isa.h"
#include "onednn_matmul.h"
#include "simd.h"
#include "threads.h"

namespace attn::kernels {

namespace {

// The E2M1 codes' values (sign in the top bit of the nibble).
constexpr float kFp4[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                            -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// 2^(e - 127): built in the exponent bits where that is a normal float (a call to ldexp cost a
// fifth of the streaming product's time), by ldexp at the edges (subnormal, overflow).
inline float pow2_biased(int e) {
  return e > 0 && e < 255 ? std::bit_cast<float>(uint32_t(e) << 23) : std::ldexp(1.0f, e - 127);
}

// 2^(s - 127) (E8M0; 255 is NaN), times `times` (a power of two: exact).
inline float e8m0(uint8_t s, float times = 1.0f) {
  return s == 255 ? std::numeric_limits<float>::quiet_NaN() : pow2_biased(s) * times;
}

// The scale of a group's sums of doubled codes times a row of X held as integers times 2^k:
// 2^(s - 1 + k) (the doubled code's 2^-1, the E8M0 2^(s - 127), X's 2^k); NaN where s is 255.
inline float combined_scale(int s, int32_t k) {
  return s == 255 ? std::numeric_limits<float>::quiet_NaN() : pow2_biased(s - 1 + k);
}

// The 32 weights of one group: its 16 bytes of codes (low nibble first) times its scale.
inline void decode_group(const uint8_t* b, float scale, float* w) {
  for (int i = 0; i < 16; ++i) {
    w[2 * i] = kFp4[b[i] & 0xF] * scale;
    w[2 * i + 1] = kFp4[b[i] >> 4] * scale;
  }
}

// Rows [r0, r1) of the product, one output row at a time: the group's 32 weights decoded into a
// small buffer, then their products with each of the M rows of X.
void rows_scalar(int64_t M, int64_t r0, int64_t r1, int64_t C, const float* X, int64_t ldx,
                 const uint8_t* blocks, const uint8_t* scales, float* Y, int64_t ldy) {
  const int64_t G = C / 32;
  float w[32];
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t m0 = 0; m0 < M; m0 += 8) {  // 8 rows of X per pass
      const int64_t mn = M - m0 < 8 ? M - m0 : 8;
      float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int64_t g = 0; g < G; ++g) {
        decode_group(blocks + (r * G + g) * 16, e8m0(scales[r * G + g]), w);
        for (int64_t m = 0; m < mn; ++m) {
          const float* x = X + (m0 + m) * ldx + g * 32;
          float s = 0;
          for (int i = 0; i < 32; ++i) s += w[i] * x[i];
          acc[m] += s;
        }
      }
      for (int64_t m = 0; m < mn; ++m) Y[(m0 + m) * ldy + r] = acc[m];
    }
  }
}

#if ATTN_SIMD_X86
ATTN_TARGET_AVX2 inline float hsum_avx2(__m256 v) {
  const __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  return _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
}

// The same with AVX2: 16 bytes of codes become 32 int8 values (twice the E2M1 value: the table
// holds 0, 1, 2, 3, 4, 6, 8, 12 and their negatives) by two shuffles: the low nibbles (the even
// positions of the group) and the high ones (the odd positions).
struct CodesAvx2 {
  __m128i even, odd;
};
ATTN_TARGET_AVX2 inline CodesAvx2 codes_avx2(const uint8_t* b16) {
  const __m128i table = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
  const __m128i low = _mm_set1_epi8(0x0F);
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b16));
  return {_mm_shuffle_epi8(table, _mm_and_si128(b, low)),
          _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(b, 4), low))};
}

// The 32 codes' doubled values as four vectors of 8 floats, in the group's order, times `times`
// (half the group's scale for the weights, exact; 1 for the doubled values).
struct GroupAvx2 {
  __m256 w0, w1, w2, w3;
};
ATTN_TARGET_AVX2 inline GroupAvx2 decode_group_avx2(const uint8_t* b16, __m256 times) {
  const CodesAvx2 c = codes_avx2(b16);
  const __m128i first = _mm_unpacklo_epi8(c.even, c.odd), second = _mm_unpackhi_epi8(c.even, c.odd);
  return {
      _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(first)), times),
      _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(first, 8))), times),
      _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(second)), times),
      _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(second, 8))), times)};
}

// One group's step of row_pass_avx2 for NR rows of X into acc (one of the pass's two sets).
template <int NR>
ATTN_TARGET_AVX2 ATTN_ALWAYS_INLINE void group_step_avx2(const uint8_t* b16, uint8_t s,
                                                         const float* X, int64_t ldx,
                                                         __m256 (&acc)[NR]) {
  const auto [w0, w1, w2, w3] = decode_group_avx2(b16, _mm256_set1_ps(1.0f));
  const __m256 half = _mm256_set1_ps(e8m0(s, 0.5f));
  for (int m = 0; m < NR; ++m) {
    const float* x = X + m * ldx;
    __m256 a = _mm256_mul_ps(w0, _mm256_loadu_ps(x));
    a = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + 8), a);
    a = _mm256_fmadd_ps(w2, _mm256_loadu_ps(x + 16), a);
    a = _mm256_fmadd_ps(w3, _mm256_loadu_ps(x + 24), a);
    acc[m] = _mm256_fmadd_ps(a, half, acc[m]);
  }
}

// The streaming product with float X, NR rows of X at a time (a template, so that the
// accumulators stay in registers): per row, the group's products with the doubled code values
// summed in 8 lanes, then added times half the group's scale (exact: a power of two) to one of
// two accumulators (even and odd groups: two chains of additions in flight); the lanes summed at
// the end of the row.
template <int NR>
ATTN_TARGET_AVX2 void row_pass_avx2(int64_t G, const float* X, int64_t ldx, const uint8_t* blocks,
                                    const uint8_t* scales, float* Y, int64_t ldy) {
  __m256 even[NR], odd[NR];  // named sets, so that they stay in registers
  for (int m = 0; m < NR; ++m) even[m] = odd[m] = _mm256_setzero_ps();
  int64_t g = 0;
  for (; g + 2 <= G; g += 2) {
    group_step_avx2<NR>(blocks + g * 16, scales[g], X + g * 32, ldx, even);
    group_step_avx2<NR>(blocks + (g + 1) * 16, scales[g + 1], X + (g + 1) * 32, ldx, odd);
  }
  if (g < G) group_step_avx2<NR>(blocks + g * 16, scales[g], X + g * 32, ldx, even);
  for (int m = 0; m < NR; ++m) Y[m * ldy] = hsum_avx2(_mm256_add_ps(even[m], odd[m]));
}

ATTN_TARGET_AVX2 void rows_avx2(int64_t M, int64_t r0, int64_t r1, int64_t C, const float* X,
                                int64_t ldx, const uint8_t* blocks, const uint8_t* scales, float* Y,
                                int64_t ldy) {
  const int64_t G = C / 32;
  for (int64_t r = r0; r < r1; ++r) {
    const uint8_t *b = blocks + r * G * 16, *s = scales + r * G;
    int64_t m = 0;
    for (; m + 4 <= M; m += 4) row_pass_avx2<4>(G, X + m * ldx, ldx, b, s, Y + m * ldy + r, ldy);
    if (M - m == 3) row_pass_avx2<3>(G, X + m * ldx, ldx, b, s, Y + m * ldy + r, ldy);
    if (M - m == 2) row_pass_avx2<2>(G, X + m * ldx, ldx, b, s, Y + m * ldy + r, ldy);
    if (M - m == 1) row_pass_avx2<1>(G, X + m * ldx, ldx, b, s, Y + m * ldy + r, ldy);
  }
}

// The combined scales of 8 groups for one row of X: 2^(s - 1 + k) (the doubled code's 2^-1, the
// group's E8M0 2^(s - 127), the row's 2^k), built in the exponent bits 8 at a time, by
// combined_scale lane by lane where one leaves the normal range or s is 255.
ATTN_TARGET_AVX2 inline void combined_scales8(const uint8_t* s8, const int32_t* k8, float* out) {
  const __m256i s = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(s8)));
  const __m256i e =
      _mm256_add_epi32(s, _mm256_sub_epi32(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(k8)),
                                           _mm256_set1_epi32(1)));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(out), _mm256_slli_epi32(e, 23));
  // lanes with e outside [1, 254], or s = 255: again, one by one
  const __m256i bad =
      _mm256_or_si256(_mm256_or_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(1), e),
                                      _mm256_cmpgt_epi32(e, _mm256_set1_epi32(254))),
                      _mm256_cmpeq_epi32(s, _mm256_set1_epi32(255)));
  if (!_mm256_testz_si256(bad, bad))
    for (int i = 0; i < 8; ++i) out[i] = combined_scale(s8[i], k8[i]);
}

// The combined scales of groups [g0, g0 + gn) (gn <= 8) for NR rows of X with exponents K (NR, G).
template <int NR>
ATTN_TARGET_AVX2 inline void chunk_scales(int64_t G, int64_t g0, int64_t gn, const uint8_t* scales,
                                          const int32_t* K, float (*sc)[8]) {
  for (int m = 0; m < NR; ++m) {
    if (gn == 8) {
      combined_scales8(scales + g0, K + m * G + g0, sc[m]);
      continue;
    }
    for (int64_t i = 0; i < gn; ++i) sc[m][i] = combined_scale(scales[g0 + i], K[m * G + g0 + i]);
  }
}

// One group's step of row_pass_avx2_int16 for NR rows of X (Q + g * 32 for row 0, rows C apart)
// with their combined scales sc[m] into acc (one of the pass's two sets).
template <int NR>
ATTN_TARGET_AVX2 ATTN_ALWAYS_INLINE void group_step_avx2_int16(const uint8_t* b16, const int16_t* Q,
                                                               int64_t C, const float (*sc)[8],
                                                               int64_t i, __m256 (&acc)[NR]) {
  const CodesAvx2 c = codes_avx2(b16);
  const __m256i even = _mm256_cvtepi8_epi16(c.even), odd = _mm256_cvtepi8_epi16(c.odd);
  for (int m = 0; m < NR; ++m) {
    const int16_t* q = Q + m * C;
    const __m256i p = _mm256_add_epi32(
        _mm256_madd_epi16(even, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q))),
        _mm256_madd_epi16(odd, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 16))));
    acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_broadcast_ss(&sc[m][i]), acc[m]);
  }
}

// The streaming product with X rounded to 16-bit integers (Int16Rows below), NR rows of X against
// NW rows of W at a time (b, s: their codes and scales; y: their outputs): per group, the doubled
// code values widened to int16 and multiplied with the group's integers by two madd (exact int32
// sums: at most 32 * 12 * 32767 < 2^24), converted to float once and added times the group's
// combined power of two, to two accumulators as above.
template <int NR, int NW>
ATTN_TARGET_AVX2 void row_pass_avx2_int16(int64_t G, const int16_t* Q, const int32_t* K,
                                          const uint8_t* const (&b)[NW],
                                          const uint8_t* const (&s)[NW], float* const (&y)[NW],
                                          int64_t ldy) {
  const int64_t C = G * 32;
  __m256 even[NW][NR], odd[NW][NR];  // compile-time indices: kept in registers
  for (int w = 0; w < NW; ++w)
    for (int m = 0; m < NR; ++m) even[w][m] = odd[w][m] = _mm256_setzero_ps();
  alignas(32) float sc[NW][NR][8];
  for (int64_t g0 = 0; g0 < G; g0 += 8) {
    const int64_t gn = G - g0 < 8 ? G - g0 : 8;
    for (int w = 0; w < NW; ++w) chunk_scales<NR>(G, g0, gn, s[w], K, sc[w]);
    int64_t i = 0;
    for (; i + 2 <= gn; i += 2) {
      const int64_t g = g0 + i;
      for (int w = 0; w < NW; ++w) {
        group_step_avx2_int16<NR>(b[w] + g * 16, Q + g * 32, C, sc[w], i, even[w]);
        group_step_avx2_int16<NR>(b[w] + (g + 1) * 16, Q + (g + 1) * 32, C, sc[w], i + 1, odd[w]);
      }
    }
    if (i < gn)
      for (int w = 0; w < NW; ++w)
        group_step_avx2_int16<NR>(b[w] + (g0 + i) * 16, Q + (g0 + i) * 32, C, sc[w], i, even[w]);
  }
  for (int w = 0; w < NW; ++w)
    for (int m = 0; m < NR; ++m) y[w][m * ldy] = hsum_avx2(_mm256_add_ps(even[w][m], odd[w][m]));
}

// Rows [r0, r1) of W through pass.template operator()<NR, NW>(m, b, s, y): NW rows of W (b, s:
// their codes and scales; y: their outputs) against NR rows of X from row m. One row of X reads
// row r beside row r + half (two streams of memory in flight, as gemm_rows_bf16dot.cpp's
// dot_two_streams); more rows take one row of W at a time against 4 rows of X at a time.
template <class Pass>
ATTN_TARGET_AVX2 void row_passes_avx2(int64_t M, int64_t r0, int64_t r1, int64_t G,
                                      const uint8_t* blocks, const uint8_t* scales, float* Y,
                                      int64_t ldy, const Pass& pass) {
  const auto codes = [&](int64_t r) { return blocks + r * G * 16; };
  const auto exps = [&](int64_t r) { return scales + r * G; };
  if (M == 1) {
    const int64_t half = (r1 - r0) / 2;
    for (int64_t r = r0; r < r0 + half; ++r) {
      const int64_t t = r + half;
      pass.template operator()<1, 2>(0, {codes(r), codes(t)}, {exps(r), exps(t)}, {Y + r, Y + t});
    }
    if ((r1 - r0) % 2)
      pass.template operator()<1, 1>(0, {codes(r1 - 1)}, {exps(r1 - 1)}, {Y + r1 - 1});
    return;
  }
  for (int64_t r = r0; r < r1; ++r) {
    int64_t m = 0;
    for (; m + 4 <= M; m += 4)
      pass.template operator()<4, 1>(m, {codes(r)}, {exps(r)}, {Y + m * ldy + r});
    if (M - m == 3) pass.template operator()<3, 1>(m, {codes(r)}, {exps(r)}, {Y + m * ldy + r});
    if (M - m == 2) pass.template operator()<2, 1>(m, {codes(r)}, {exps(r)}, {Y + m * ldy + r});
    if (M - m == 1) pass.template operator()<1, 1>(m, {codes(r)}, {exps(r)}, {Y + m * ldy + r});
  }
}

// The arguments of one pass of row_passes_avx2.
template <int NW>
using Codes = const uint8_t* const (&)[NW];
template <int NW>
using Outs = float* const (&)[NW];

ATTN_TARGET_AVX2 void rows_avx2_int16(int64_t M, int64_t r0, int64_t r1, int64_t C,
                                      const int16_t* Q, const int32_t* K, const uint8_t* blocks,
                                      const uint8_t* scales, float* Y, int64_t ldy) {
  const int64_t G = C / 32;
  row_passes_avx2(M, r0, r1, G, blocks, scales, Y, ldy,
                  [&]<int NR, int NW>(int64_t m, Codes<NW> b, Codes<NW> s, Outs<NW> y) {
                    row_pass_avx2_int16<NR, NW>(G, Q + m * C, K + m * G, b, s, y, ldy);
                  });
}

// The 8-bit path (Int8Rows below): a group's 32 codes as unsigned bytes, their doubled values
// plus 12 (0 .. 24), in the order of codes_avx2 (16 even positions, then 16 odd ones).
ATTN_TARGET_AVX2 inline __m256i codes_offset_avx2(const uint8_t* b16) {
  const __m256i table = _mm256_setr_epi8(12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0,
                                         12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0);
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b16));
  const __m256i both = _mm256_inserti128_si256(_mm256_castsi128_si256(b), _mm_srli_epi16(b, 4), 1);
  return _mm256_shuffle_epi8(table, _mm256_and_si256(both, _mm256_set1_epi8(0x0F)));
}

// One group's step of row_pass_avx2_int8 for NR rows of X (Q and O at the group, rows C and C / 2
// apart): (doubled code + 12) times x's integer in pairs (maddubs: at most 2 * 24 * 127, no
// saturation), the offset's share taken off each pair (O: -12 times the pair's integers), the
// pairs summed in 8 int32 lanes (madd): the group's exact sum, added in float times its scale.
template <int NR>
ATTN_TARGET_AVX2 ATTN_ALWAYS_INLINE void group_step_avx2_int8(const uint8_t* b16, const int8_t* Q,
                                                              const int16_t* O, int64_t C,
                                                              const float (*sc)[8], int64_t i,
                                                              __m256 (&acc)[NR]) {
  const __m256i w = codes_offset_avx2(b16), ones = _mm256_set1_epi16(1);
  for (int m = 0; m < NR; ++m) {
    const __m256i q = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(Q + m * C));
    const __m256i o = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(O + m * C / 2));
    const __m256i p = _mm256_madd_epi16(_mm256_add_epi16(_mm256_maddubs_epi16(w, q), o), ones);
    acc[m] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(p), _mm256_broadcast_ss(&sc[m][i]), acc[m]);
  }
}

// The streaming product with X rounded to 8-bit integers (Int8Rows below), NR rows of X against
// NW rows of W at a time (b, s: their codes and scales; y: their outputs): per group, one byte
// shuffle gives the codes' doubled values plus 12 as unsigned bytes for maddubs, the offset
// taken off in the integers, and the exact sum added in float times the group's scale
// 2^(s - 128 + k) * step (the doubled code's 2^-1, the E8M0 scale, x's step step * 2^k), to two
// accumulators as above.
template <int NR, int NW>
ATTN_TARGET_AVX2 void row_pass_avx2_int8(int64_t G, const int8_t* Q, const int16_t* O,
                                         const int32_t* K, const float* step,
                                         const uint8_t* const (&b)[NW],
                                         const uint8_t* const (&s)[NW], float* const (&y)[NW],
                                         int64_t ldy) {
  const int64_t C = G * 32;
  __m256 even[NW][NR], odd[NW][NR];  // compile-time indices: kept in registers
  for (int w = 0; w < NW; ++w)
    for (int m = 0; m < NR; ++m) even[w][m] = odd[w][m] = _mm256_setzero_ps();
  alignas(32) float sc[NW][NR][8];
  for (int64_t g0 = 0; g0 < G; g0 += 8) {
    const int64_t gn = G - g0 < 8 ? G - g0 : 8;
    for (int w = 0; w < NW; ++w) {
      chunk_scales<NR>(G, g0, gn, s[w], K, sc[w]);
      for (int m = 0; m < NR; ++m)
        for (int64_t i = 0; i < gn; ++i) sc[w][m][i] *= step[m * G + g0 + i];
    }
    int64_t i = 0;
    for (; i + 2 <= gn; i += 2) {
      const int64_t g = g0 + i;
      for (int w = 0; w < NW; ++w) {
        group_step_avx2_int8<NR>(b[w] + g * 16, Q + g * 32, O + g * 16, C, sc[w], i, even[w]);
        group_step_avx2_int8<NR>(b[w] + (g + 1) * 16, Q + (g + 1) * 32, O + (g + 1) * 16, C, sc[w],
                                 i + 1, odd[w]);
      }
    }
    if (i < gn)
      for (int w = 0; w < NW; ++w)
        group_step_avx2_int8<NR>(b[w] + (g0 + i) * 16, Q + (g0 + i) * 32, O + (g0 + i) * 16, C,
                                 sc[w], i, even[w]);
  }
  for (int w = 0; w < NW; ++w)
    for (int m = 0; m < NR; ++m) y[w][m * ldy] = hsum_avx2(_mm256_add_ps(even[w][m], odd[w][m]));
}

ATTN_TARGET_AVX2 void rows_avx2_int8(int64_t M, int64_t r0, int64_t r1, int64_t C, const int8_t* Q,
                                     const int16_t* O, const int32_t* K, const float* step,
                                     const uint8_t* blocks, const uint8_t* scales, float* Y,
                                     int64_t ldy) {
  const int64_t G = C / 32;
  row_passes_avx2(M, r0, r1, G, blocks, scales, Y, ldy,
                  [&]<int NR, int NW>(int64_t m, Codes<NW> b, Codes<NW> s, Outs<NW> y) {
                    row_pass_avx2_int8<NR, NW>(G, Q + m * C, O + m * C / 2, K + m * G, step + m * G,
                                               b, s, y, ldy);
                  });
}

// The top halves of 8 + 8 floats as 16 bfloat16 bits, in order (packus works within 128-bit
// lanes: the 64-bit quarters reordered after).
ATTN_TARGET_AVX2 inline __m256i top_halves(__m256 a, __m256 b) {
  const __m256i p = _mm256_packus_epi32(_mm256_srli_epi32(_mm256_castps_si256(a), 16),
                                        _mm256_srli_epi32(_mm256_castps_si256(b), 16));
  return _mm256_permute4x64_epi64(p, 0xD8);
}

// Rows [r0, r1) of W decoded into W (r1 - r0, C), 32 weights at a time (a zero's sign is lost:
// for products only), as floats or as bfloat16 bits (Out = uint16_t): every MXFP4 weight is a
// bfloat16 (3 significant bits, float's exponent range), so the float's top half is exact.
template <class Out>
ATTN_TARGET_AVX2 void decode_rows_avx2(int64_t r0, int64_t r1, int64_t C, const uint8_t* blocks,
                                       const uint8_t* scales, Out* W) {
  const int64_t G = C / 32;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t g = 0; g < G; ++g) {
      const GroupAvx2 d = decode_group_avx2(blocks + (r * G + g) * 16,
                                            _mm256_set1_ps(e8m0(scales[r * G + g], 0.5f)));
      Out* w = W + (r - r0) * C + g * 32;
      if constexpr (std::is_same_v<Out, float>) {
        _mm256_storeu_ps(w, d.w0), _mm256_storeu_ps(w + 8, d.w1);
        _mm256_storeu_ps(w + 16, d.w2), _mm256_storeu_ps(w + 24, d.w3);
      } else {
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(w), top_halves(d.w0, d.w1));
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(w + 16), top_halves(d.w2, d.w3));
      }
    }
}
#endif  // ATTN_SIMD_X86

// The largest |x| of a group of 32, or -1 where the group holds inf or NaN.
inline float group_largest(const float* x) {
  float big = 0;
  for (int i = 0; i < 32; ++i) {
    const float a = std::abs(x[i]);
    if (!(a < std::numeric_limits<float>::infinity())) return -1.0f;
    big = std::max(big, a);
  }
  return big;
}

// The rows of X (M, C) rounded to 16-bit integers group by group: x = q * 2^k with k chosen per
// group of 32 so that the group's largest |x| becomes an integer in [2^14, 2^15) (2^15 - 1 where
// rounding reaches 2^15): each x within 2^-15 of the group's largest |x|, exact where it is a
// bfloat16 no smaller than 2^-8 of that largest. q holds each group in the order of a block's
// codes: its 16 even positions, then its 16 odd ones. finite is false where X holds inf or NaN
// (then the float path runs).
struct Int16Rows {
  std::vector<int16_t> q;
  std::vector<int32_t> k;
  bool finite = true;
  Int16Rows(int64_t M, int64_t C, const float* X, int64_t ldx)
      : q(std::size_t(M * C)), k(std::size_t(M * (C / 32))) {
    const int64_t G = C / 32;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t g = 0; g < G; ++g) {
        const float* x = X + m * ldx + g * 32;
        const float big = group_largest(x);
        if (big < 0) {
          finite = false;
          return;
        }
        const int e = big == 0 ? 0 : std::ilogb(big) - 14;
        k[std::size_t(m * G + g)] = e;
        const double times = std::ldexp(1.0, -e);  // in double: exact for any float's e
        int16_t* out = q.data() + m * C + g * 32;
        for (int i = 0; i < 32; ++i) {
          const double v = std::nearbyint(double(x[i]) * times);
          out[(i & 1) * 16 + i / 2] = int16_t(std::min(v, 32767.0));
        }
      }
  }
};

// The rows of X (M, C) rounded to 8-bit integers group by group, as llama.cpp's q8_0 does:
// x = q * d with the step d = (the group's largest |x|) / 127 and q = x / d rounded to the
// nearest (ties to even), in -127 .. 127: each x within d / 2 of its value. d is held as
// step * 2^k, step a float in [2^-7, 2^-6) (normal for any x: no precision lost to subnormal
// steps). q holds each group in the order of a block's codes (16 even positions, then 16 odd
// ones); o, per pair of q in that order, -12 times the pair's sum (the offset of the codes'
// unsigned bytes). finite as in Int16Rows.
struct Int8Rows {
  std::vector<int8_t> q;
  std::vector<int16_t> o;
  std::vector<int32_t> k;
  std::vector<float> step;
  bool finite = true;
  Int8Rows(int64_t M, int64_t C, const float* X, int64_t ldx)
      : q(std::size_t(M * C)),
        o(std::size_t(M * C / 2)),
        k(std::size_t(M * (C / 32))),
        step(k.size()) {
    const int64_t G = C / 32;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t g = 0; g < G; ++g) {
        const float* x = X + m * ldx + g * 32;
        const float big = group_largest(x);
        if (big < 0) {
          finite = false;
          return;
        }
        const std::size_t j = std::size_t(m * G + g);
        const int e = big == 0 ? 0 : std::ilogb(big);
        k[j] = e;
        step[j] = float(std::ldexp(double(big), -e) / 127.0);
        const double times = big == 0 ? 0.0 : 127.0 / double(big);  // in double: no overflow
        int8_t* out = q.data() + m * C + g * 32;
        for (int i = 0; i < 32; ++i)
          out[(i & 1) * 16 + i / 2] = int8_t(std::nearbyint(double(x[i]) * times));
        int16_t* off = o.data() + m * C / 2 + g * 16;
        for (int i = 0; i < 16; ++i) off[i] = int16_t(-12 * (out[2 * i] + out[2 * i + 1]));
      }
  }
};

// Rows [r0, r1) of W decoded into W (r1 - r0, C) as floats or bfloat16 bits (Out = uint16_t: the
// float's top half, exact for every MXFP4 weight): decode_rows_avx2 where avx2, else group by
// group from the table.
template <class Out>
void decode_rows(bool avx2, int64_t r0, int64_t r1, int64_t C, const uint8_t* blocks,
                 const uint8_t* scales, Out* W) {
#if ATTN_SIMD_X86
  if (avx2) return decode_rows_avx2(r0, r1, C, blocks, scales, W);
#endif
  (void)avx2;
  const int64_t G = C / 32;
  float f[32];
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t g = 0; g < G; ++g) {
      Out* w = W + (r - r0) * C + g * 32;
      const float scale = e8m0(scales[r * G + g]);
      if constexpr (std::is_same_v<Out, float>) {
        decode_group(blocks + (r * G + g) * 16, scale, w);
      } else {
        decode_group(blocks + (r * G + g) * 16, scale, f);
        for (int i = 0; i < 32; ++i) w[i] = uint16_t(std::bit_cast<uint32_t>(f[i]) >> 16);
      }
    }
}

}  // namespace

void mxfp4_rows(int64_t M, int64_t R, int64_t C, const float* X, int64_t ldx, const uint8_t* blocks,
                const uint8_t* scales, float* Y, int64_t ldy, Mxfp4X x_as) {
  if (M <= 0 || R <= 0) return;
  const bool avx2 = ATTN_SIMD_X86 && (active_isa() == Isa::Avx2 || active_isa() == Isa::Avx512);
  // A row of W is C / 2 bytes: split when there are enough of them to pay for waking threads.
  const int64_t threads = threads_for(R * C / 2, int64_t(1) << 18);
#if ATTN_SIMD_X86
  if (avx2 && x_as == Mxfp4X::Int16) {
    const Int16Rows q(M, C, X, ldx);
    if (q.finite) {
      parallel_ranges(R, threads, [&](int64_t r0, int64_t r1) {
        rows_avx2_int16(M, r0, r1, C, q.q.data(), q.k.data(), blocks, scales, Y, ldy);
      });
      return;
    }
  }
  if (avx2 && x_as == Mxfp4X::Int8) {
    const Int8Rows q(M, C, X, ldx);
    if (q.finite) {
      parallel_ranges(R, threads, [&](int64_t r0, int64_t r1) {
        rows_avx2_int8(M, r0, r1, C, q.q.data(), q.o.data(), q.k.data(), q.step.data(), blocks,
                       scales, Y, ldy);
      });
      return;
    }
  }
#endif
  (void)x_as;
  parallel_ranges(R, threads, [&](int64_t r0, int64_t r1) {
#if ATTN_SIMD_X86
    if (avx2) return rows_avx2(M, r0, r1, C, X, ldx, blocks, scales, Y, ldy);
#endif
    (void)avx2;
    rows_scalar(M, r0, r1, C, X, ldx, blocks, scales, Y, ldy);
  });
}

void mxfp4_dequantize(int64_t R, int64_t C, const uint8_t* blocks, const uint8_t* scales,
                      float* W) {
  const int64_t G = C / 32;
  parallel_ranges(R, threads_for(R * C), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t g = 0; g < G; ++g)
        decode_group(blocks + (r * G + g) * 16, e8m0(scales[r * G + g]), W + r * C + g * 32);
  });
}

void mxfp4_gemm(int64_t M, int64_t R, int64_t C, const float* X, int64_t ldx, const uint8_t* blocks,
                const uint8_t* scales, float* Y, int64_t ldy) {
  if (M <= 0 || R <= 0) return;
  constexpr int64_t kBlock = 128;  // rows of W decoded at a time (C = 2880: 1.5 MB of floats)
  const bool avx2 = ATTN_SIMD_X86 && (active_isa() == Isa::Avx2 || active_isa() == Isa::Avx512);
  sgemm_by_blocks(true, M, R, C, kBlock, X, ldx, Y, ldy, [&](int64_t r0, int64_t nb, float* w) {
    decode_rows(avx2, r0, r0 + nb, C, blocks, scales, w);
  });
}

void mxfp4_gemm_w(int64_t M, int64_t R, int64_t C, const float* G, int64_t ldg,
                  const uint8_t* blocks, const uint8_t* scales, float* DX, int64_t lddx) {
  if (M <= 0 || C <= 0) return;
  constexpr int64_t kBlock = 128;  // columns of W decoded at a time (R = 2880: 1.5 MB of floats)
  const bool avx2 = ATTN_SIMD_X86 && (active_isa() == Isa::Avx2 || active_isa() == Isa::Avx512);
  sgemm_by_blocks(false, M, C, R, kBlock, G, ldg, DX, lddx, [&](int64_t c0, int64_t nb, float* w) {
    for (int64_t r = 0; r < R; ++r)  // columns [c0, c0 + nb) of row r: whole groups of 32
      decode_rows(avx2, 0, 1, nb, blocks + (r * C + c0) / 2, scales + (r * C + c0) / 32,
                  w + r * nb);
  });
}

bool mxfp4_gemm_bf16(int64_t M, int64_t R, int64_t C, const uint16_t* X, const uint8_t* blocks,
                     const uint8_t* scales, uint16_t* Y, int64_t ldy) {
  if (M <= 0 || R <= 0) return true;
  constexpr int64_t kBlock = 1024;  // rows of W decoded at a time (C = 2880: 5.9 MB)
  // Asked before any decoding: without a fast kernel (no AVX512-BF16) the caller's float path
  // runs, and a block decoded here would be wasted on every call.
  if (!onednn_matmul_bf16_fast(false, true, M, std::min(R, kBlock), C, C, C, ldy, false))
    return false;
  const bool avx2 = ATTN_SIMD_X86 && (active_isa() == Isa::Avx2 || active_isa() == Isa::Avx512);
  std::vector<uint16_t> w(std::size_t(std::min(R, kBlock) * C));
  for (int64_t r0 = 0; r0 < R; r0 += kBlock) {
    const int64_t nb = std::min(kBlock, R - r0);
    parallel_ranges(nb, threads_for(nb * C), [&](int64_t a, int64_t b) {
      decode_rows(avx2, r0 + a, r0 + b, C, blocks, scales, w.data() + a * C);
    });
    if (!onednn_matmul_bf16(false, true, M, nb, C, X, C, w.data(), C, nullptr, Y + r0, ldy))
      return false;
  }
  return true;
}

}  // namespace attn::kernels

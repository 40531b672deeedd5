// mxfp4.h: MXFP4 products and decoding.
#include "mxfp4.h"

#include <cmath>
#include <limits>

#include "gemm.h"
#include "isa.h"
#include "simd.h"
#include "threads.h"

namespace attn::kernels {

namespace {

// The E2M1 codes' values (sign in the top bit of the nibble).
constexpr float kFp4[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                            -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// 2^(s - 127) (E8M0; 255 is NaN), times `times`.
inline float e8m0(uint8_t s, float times = 1.0f) {
  return s == 255 ? std::numeric_limits<float>::quiet_NaN() : std::ldexp(times, int(s) - 127);
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
// The same with AVX2: 16 bytes of codes become 32 int8 values (twice the E2M1 value: the table
// holds 0, 1, 2, 3, 4, 6, 8, 12 and their negatives) by two shuffles, widened to four vectors of
// 8 floats and multiplied by half the group's scale: the weights, exact.
struct GroupAvx2 {
  __m256 w0, w1, w2, w3;
};
ATTN_TARGET_AVX2 inline GroupAvx2 decode_group_avx2(const uint8_t* b16, uint8_t s) {
  const __m128i table = _mm_setr_epi8(0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12);
  const __m128i low = _mm_set1_epi8(0x0F);
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b16));
  const __m128i lo = _mm_shuffle_epi8(table, _mm_and_si128(b, low));
  const __m128i hi = _mm_shuffle_epi8(table, _mm_and_si128(_mm_srli_epi16(b, 4), low));
  const __m128i first = _mm_unpacklo_epi8(lo, hi), second = _mm_unpackhi_epi8(lo, hi);
  const __m256 half = _mm256_set1_ps(e8m0(s, 0.5f));
  return {_mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(first)), half),
          _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(first, 8))), half),
          _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(second)), half),
          _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(second, 8))), half)};
}

// The streaming product with those: four accumulators of 8 lanes, one per row of X (4 rows a
// pass), summed across lanes at the end of the row.
ATTN_TARGET_AVX2 void rows_avx2(int64_t M, int64_t r0, int64_t r1, int64_t C, const float* X,
                                int64_t ldx, const uint8_t* blocks, const uint8_t* scales, float* Y,
                                int64_t ldy) {
  const int64_t G = C / 32;
  for (int64_t r = r0; r < r1; ++r) {
    for (int64_t m0 = 0; m0 < M; m0 += 4) {
      const int64_t mn = M - m0 < 4 ? M - m0 : 4;
      __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                       _mm256_setzero_ps()};
      for (int64_t g = 0; g < G; ++g) {
        const auto [w0, w1, w2, w3] =
            decode_group_avx2(blocks + (r * G + g) * 16, scales[r * G + g]);
        for (int64_t m = 0; m < mn; ++m) {
          const float* x = X + (m0 + m) * ldx + g * 32;
          __m256 a = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x), acc[m]);
          a = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + 8), a);
          a = _mm256_fmadd_ps(w2, _mm256_loadu_ps(x + 16), a);
          acc[m] = _mm256_fmadd_ps(w3, _mm256_loadu_ps(x + 24), a);
        }
      }
      for (int64_t m = 0; m < mn; ++m) {
        const __m128 s4 =
            _mm_add_ps(_mm256_castps256_ps128(acc[m]), _mm256_extractf128_ps(acc[m], 1));
        const __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
        Y[(m0 + m) * ldy + r] = _mm_cvtss_f32(_mm_add_ss(s2, _mm_movehdup_ps(s2)));
      }
    }
  }
}

// Rows [r0, r1) of W decoded into W (r1 - r0, C), 32 weights at a time (a zero's sign is lost:
// for products only).
ATTN_TARGET_AVX2 void decode_rows_avx2(int64_t r0, int64_t r1, int64_t C, const uint8_t* blocks,
                                       const uint8_t* scales, float* W) {
  const int64_t G = C / 32;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t g = 0; g < G; ++g) {
      const GroupAvx2 d = decode_group_avx2(blocks + (r * G + g) * 16, scales[r * G + g]);
      float* w = W + (r - r0) * C + g * 32;
      _mm256_storeu_ps(w, d.w0), _mm256_storeu_ps(w + 8, d.w1);
      _mm256_storeu_ps(w + 16, d.w2), _mm256_storeu_ps(w + 24, d.w3);
    }
}
#endif  // ATTN_SIMD_X86

}  // namespace

void mxfp4_rows(int64_t M, int64_t R, int64_t C, const float* X, int64_t ldx, const uint8_t* blocks,
                const uint8_t* scales, float* Y, int64_t ldy) {
  if (M <= 0 || R <= 0) return;
  const bool avx2 = ATTN_SIMD_X86 && (active_isa() == Isa::Avx2 || active_isa() == Isa::Avx512);
  // A row of W is C / 2 bytes: split when there are enough of them to pay for waking threads.
  parallel_ranges(R, threads_for(R * C / 2, int64_t(1) << 18), [&](int64_t r0, int64_t r1) {
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
  const int64_t G = C / 32;
  const bool avx2 = ATTN_SIMD_X86 && (active_isa() == Isa::Avx2 || active_isa() == Isa::Avx512);
  (void)avx2;
  sgemm_by_blocks(true, M, R, C, kBlock, X, ldx, Y, ldy, [&](int64_t r0, int64_t nb, float* w) {
#if ATTN_SIMD_X86
    if (avx2) return decode_rows_avx2(r0, r0 + nb, C, blocks, scales, w);
#endif
    for (int64_t r = 0; r < nb; ++r)
      for (int64_t g = 0; g < G; ++g)
        decode_group(blocks + ((r0 + r) * G + g) * 16, e8m0(scales[(r0 + r) * G + g]),
                     w + r * C + g * 32);
  });
}

}  // namespace attn::kernels

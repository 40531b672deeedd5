// gemm_half.h: products with bfloat16 / float16 weights, by streaming (few rows) or by widening
// blocks of the weight for sgemm.
#include "gemm_half.h"

#include <attn/half.h>

#include <algorithm>
#include <vector>

#include "gemm.h"
#include "gemm_rows.h"
#include "isa.h"
#include "threads.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace attn::kernels {

namespace {

// Rows of B widened at a time for sgemm: 128 rows of K floats (512 KB at K = 1024) stay in L2
// while every row of A passes over them.
constexpr int64_t kHalfBlock = 128;

// The products with nothing to sum: true where M or N is 0 (nothing to write) or K is 0 (C's
// M x N block zeroed), for the caller to return.
bool trivial_product(int64_t M, int64_t N, int64_t K, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return true;
  if (K != 0) return false;
  for (int64_t m = 0; m < M; ++m) std::fill(C + m * ldc, C + m * ldc + N, 0.0f);
  return true;
}

// body(n0, n1) over C's columns [0, N) in units of 16 shared among the threads (K sizes the work):
// each column's sums depend on K only, so the split never changes the bits.
template <typename F>
void by_column_units(int64_t N, int64_t K, F&& body) {
  parallel_ranges((N + 15) / 16, threads_for(N * K), [&](int64_t u0, int64_t u1) {
    const int64_t n0 = u0 * 16, n1 = std::min(N, u1 * 16);
    if (n1 > n0) body(n0, n1);
  });
}

}  // namespace

#if defined(__x86_64__)
// float16 to float with F16C (every CPU with AVX2 has it), 8 at a time; exact.
static __attribute__((target("avx,f16c"))) void widen_fp16_f16c(const uint16_t* src, float* dst,
                                                                int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i,
                     _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; ++i) dst[i] = fp16_bits_to_float(src[i]);
}

// float to float16 with F16C, 8 at a time, rounding to nearest even as float_to_fp16_bits does;
// a NaN becomes float_to_fp16_bits' quiet NaN of its sign (F16C would keep part of the payload).
static __attribute__((target("avx,f16c"))) void narrow_fp16_f16c(const float* src, uint16_t* dst,
                                                                 int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(src + i);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)))
      for (int64_t j = i; j < i + 8; ++j) dst[j] = float_to_fp16_bits(src[j]);
  }
  for (; i < n; ++i) dst[i] = float_to_fp16_bits(src[i]);
}
#endif

void widen_half(HalfKind kind, const uint16_t* src, float* dst, int64_t n) {
  if (kind == HalfKind::BFloat16) {
    for (int64_t i = 0; i < n; ++i) dst[i] = bf16_bits_to_float(src[i]);
    return;
  }
#if defined(__x86_64__)
  if (active_isa() == Isa::Avx2 || active_isa() == Isa::Avx512) return widen_fp16_f16c(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_bits_to_float(src[i]);
}

void narrow_half(HalfKind kind, const float* src, uint16_t* dst, int64_t n) {
  if (kind == HalfKind::BFloat16) {
    for (int64_t i = 0; i < n; ++i) dst[i] = float_to_bf16_bits(src[i]);
    return;
  }
#if defined(__x86_64__)
  if (active_isa() == Isa::Avx2 || active_isa() == Isa::Avx512)
    return narrow_fp16_f16c(src, dst, n);
#endif
  for (int64_t i = 0; i < n; ++i) dst[i] = float_to_fp16_bits(src[i]);
}

namespace {

// Columns [n0, n1) of gemm_half_rows_kn, kCols at a time: their M rows of sums stay in a local
// block while every row of B's columns is widened and added in.
template <bool kBf16>
ATTN_ISA_INLINE void rows_kn_body(int64_t M, int64_t n0, int64_t n1, int64_t K, const float* A,
                                  int64_t lda, const uint16_t* B, int64_t ldb, float* C,
                                  int64_t ldc) {
  constexpr int64_t kCols = 256;
  alignas(64) float acc[kGemmRowsMax][kCols];
  alignas(64) float w[kCols];
  for (int64_t c0 = n0; c0 < n1; c0 += kCols) {
    const int64_t nc = std::min(kCols, n1 - c0);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t j = 0; j < nc; ++j) acc[m][j] = 0.0f;
    for (int64_t k = 0; k < K; ++k) {
      const uint16_t* b = B + k * ldb + c0;
      for (int64_t j = 0; j < nc; ++j)
        w[j] = kBf16 ? bf16_bits_to_float(b[j]) : fp16_bits_to_float(b[j]);
      for (int64_t m = 0; m < M; ++m) {
        const float a = A[m * lda + k];
        float* r = acc[m];
        for (int64_t j = 0; j < nc; ++j) r[j] += a * w[j];
      }
    }
    for (int64_t m = 0; m < M; ++m) std::copy(acc[m], acc[m] + nc, C + m * ldc + c0);
  }
}
ATTN_ISA_INLINE void bf16_rows_kn_body(int64_t M, int64_t n0, int64_t n1, int64_t K, const float* A,
                                       int64_t lda, const uint16_t* B, int64_t ldb, float* C,
                                       int64_t ldc) {
  rows_kn_body<true>(M, n0, n1, K, A, lda, B, ldb, C, ldc);
}
ATTN_ISA_INLINE void fp16_rows_kn_body(int64_t M, int64_t n0, int64_t n1, int64_t K, const float* A,
                                       int64_t lda, const uint16_t* B, int64_t ldb, float* C,
                                       int64_t ldc) {
  rows_kn_body<false>(M, n0, n1, K, A, lda, B, ldb, C, ldc);
}
ATTN_ISA_VARIANTS(void, bf16_rows_kn,
                  (int64_t M, int64_t n0, int64_t n1, int64_t K, const float* A, int64_t lda,
                   const uint16_t* B, int64_t ldb, float* C, int64_t ldc),
                  (M, n0, n1, K, A, lda, B, ldb, C, ldc))
ATTN_ISA_VARIANTS(void, fp16_rows_kn,
                  (int64_t M, int64_t n0, int64_t n1, int64_t K, const float* A, int64_t lda,
                   const uint16_t* B, int64_t ldb, float* C, int64_t ldc),
                  (M, n0, n1, K, A, lda, B, ldb, C, ldc))

}  // namespace

void gemm_half_rows_kn(HalfKind kind, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                       const uint16_t* B, int64_t ldb, float* C, int64_t ldc) {
  if (trivial_product(M, N, K, C, ldc)) return;
  if (M > kGemmRowsMax) {
    // Blocks of kHalfBlock columns of B widened (K, nb) for sgemm: B read once, sgemm's rate.
    sgemm_by_blocks(false, M, N, K, kHalfBlock, A, lda, C, ldc,
                    [&](int64_t n0, int64_t nb, float* w) {
                      for (int64_t k = 0; k < K; ++k)
                        widen_half(kind, B + k * ldb + n0, w + k * nb, nb);
                    });
    return;
  }
  by_column_units(N, K, [&](int64_t n0, int64_t n1) {
    for (int64_t m0 = 0; m0 < M; m0 += kGemmRowsMax) {  // B once per 8 rows
      const int64_t mn = std::min(kGemmRowsMax, M - m0);
      if (kind == HalfKind::BFloat16)
        bf16_rows_kn(mn, n0, n1, K, A + m0 * lda, lda, B, ldb, C + m0 * ldc, ldc);
      else
        fp16_rows_kn(mn, n0, n1, K, A + m0 * lda, lda, B, ldb, C + m0 * ldc, ldc);
    }
  });
}

void gemm_half_weights(HalfKind kind, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                       const uint16_t* B, int64_t ldb, float* C, int64_t ldc) {
  if (trivial_product(M, N, K, C, ldc)) return;
  BlasSingleThread single;
  if (M <= kGemmRowsMax) {
    // Columns in units of 16 rows of B; each element's sum depends on K only (gemm_rows.h).
    const bool bf16 = kind == HalfKind::BFloat16;
    by_column_units(N, K, [&](int64_t n0, int64_t n1) {
      gemm_rows_half(bf16, M, n1 - n0, K, 1.0f, A, lda, B + n0 * ldb, ldb, 0.0f, C + n0, ldc);
    });
    return;
  }
  // Blocks of kHalfBlock rows of B widened for sgemm; a block's bits depend on (M, nb, K) only.
  sgemm_by_blocks(true, M, N, K, kHalfBlock, A, lda, C, ldc, [&](int64_t n0, int64_t nb, float* w) {
    for (int64_t r = 0; r < nb; ++r) widen_half(kind, B + (n0 + r) * ldb, w + r * K, K);
  });
}

bool gemm_bf16_weights_dot(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
                           const uint16_t* B, int64_t ldb, float* C, int64_t ldc) {
  if (M > kGemmRowsMax || !bf16_dot_enabled()) return false;
  if (trivial_product(M, N, K, C, ldc)) return true;
  by_column_units(N, K, [&](int64_t n0, int64_t n1) {
    gemm_rows_bf16_dot(M, n1 - n0, K, A, lda, B + n0 * ldb, ldb, C + n0, ldc);
  });
  return true;
}

}  // namespace attn::kernels

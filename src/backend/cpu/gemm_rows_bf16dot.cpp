// gemm_rows.h: few-row products of bfloat16 by bfloat16 with AVX512-BF16's dot product.
//
// vdpbf16ps multiplies 32 pairs of bfloat16 and adds each lane's two products to a float: a
// bfloat16 product is exact in float, so each lane is two float additions of exact products,
// against gemm_rows_half's widening of every weight (a lane-crossing vpmovzxwd and a shift per 16)
// and twice the bytes of X. Decoding Llama-3.2-1B in bfloat16 on a 2-core Zen 4 reads its weights
// at 31-32 GB/s on two threads this way, against 21-29 GB/s for the widening kernel (the down
// projection, whose 8192 floats of X no longer fit L1 beside the stream, is the slowest there);
// bench/decoder_compare.py measures the whole decoder.
#include <attn/half.h>

#include <algorithm>

#include "gemm_rows.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

// GCC 12 warns about the deliberately undefined pass-through operand inside the AVX-512
// intrinsics (GCC bug 105593), as in gemm_rows.cpp.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace attn::kernels {

#if defined(__x86_64__)

#define ATTN_TARGET_AVX512_BF16 \
  __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx512bf16,fma")))

namespace {

// Rows of X that share one pass over B: 4 x 4 accumulators, 4 vectors of B and one of X.
constexpr int kDotRows = 4;

ATTN_TARGET_AVX512_BF16 inline __m512 dot(__m512 acc, __m512i b, __m512i x) {
  return _mm512_dpbf16_ps(acc, reinterpret_cast<__m512bh&>(b), reinterpret_cast<__m512bh&>(x));
}

ATTN_TARGET_AVX512_BF16 inline __m512i load(const uint16_t* p) { return _mm512_loadu_si512(p); }

// The sums of one row of X with one row of B: four accumulators taking every fourth 32-element
// block, the remaining whole blocks in the first, the partial one (zeros after it, in X and in B)
// in the second, then (a0 + a1) + (a2 + a3) reduced across lanes. Every kernel below sums in this
// order, whatever it computes alongside.
struct Acc {
  __m512 a0, a1, a2, a3;
};
ATTN_TARGET_AVX512_BF16 inline Acc acc_zero() {
  const __m512 z = _mm512_setzero_ps();
  return {z, z, z, z};
}
ATTN_TARGET_AVX512_BF16 inline void acc_block(Acc& a, const uint16_t* r, const uint16_t* x) {
  a.a0 = dot(a.a0, load(r), load(x));
  a.a1 = dot(a.a1, load(r + 32), load(x + 32));
  a.a2 = dot(a.a2, load(r + 64), load(x + 64));
  a.a3 = dot(a.a3, load(r + 96), load(x + 96));
}
// The blocks after the last whole 128 (k0 = K rounded down to 128), and the sum.
ATTN_TARGET_AVX512_BF16 inline float acc_finish(Acc& a, int64_t k, int64_t K, const uint16_t* r,
                                                const uint16_t* x) {
  for (; k + 32 <= K; k += 32) a.a0 = dot(a.a0, load(r + k), load(x + k));
  if (k < K) {
    const __mmask32 rest = (1u << (K - k)) - 1;
    a.a1 = dot(a.a1, _mm512_maskz_loadu_epi16(rest, r + k), _mm512_maskz_loadu_epi16(rest, x + k));
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a.a0, a.a1), _mm512_add_ps(a.a2, a.a3)));
}

// Rows [0, rows) of X (1 <= rows <= MR) in one pass over B, sharing each load of B.
template <int MR>
ATTN_TARGET_AVX512_BF16 void dot_pass(int rows, int64_t N, int64_t K, const uint16_t* X,
                                      int64_t ldx, const uint16_t* B, int64_t ldb, float* Y,
                                      int64_t ldy) {
  if constexpr (MR > 1)
    if (rows < MR) return dot_pass<MR - 1>(rows, N, K, X, ldx, B, ldb, Y, ldy);
  const int64_t K128 = K / 128 * 128;
  for (int64_t n = 0; n < N; ++n) {
    const uint16_t* r = B + n * ldb;
    Acc a[MR];
    for (int m = 0; m < MR; ++m) a[m] = acc_zero();
    for (int64_t k = 0; k < K128; k += 128) {
      const __m512i b0 = load(r + k), b1 = load(r + k + 32), b2 = load(r + k + 64),
                    b3 = load(r + k + 96);
      for (int m = 0; m < MR; ++m) {
        const uint16_t* x = X + m * ldx + k;
        a[m].a0 = dot(a[m].a0, b0, load(x));
        a[m].a1 = dot(a[m].a1, b1, load(x + 32));
        a[m].a2 = dot(a[m].a2, b2, load(x + 64));
        a[m].a3 = dot(a[m].a3, b3, load(x + 96));
      }
    }
    for (int m = 0; m < MR; ++m) Y[m * ldy + n] = acc_finish(a[m], K128, K, r, X + m * ldx);
  }
}

// One row of X against rows [0, N) of B read as two streams at once: row n beside row n + N / 2
// (and the last alone when N is odd). One core keeps more of memory's lines in flight this way,
// two pages apart: each of a thread's matrices of a Llama-3.2-1B-shaped model came 15-35% faster
// on one thread of a Zen 4 (the 128256-row head 31-32 GB/s against 23-26).
ATTN_TARGET_AVX512_BF16 void dot_two_streams(int64_t N, int64_t K, const uint16_t* x,
                                             const uint16_t* B, int64_t ldb, float* Y) {
  const int64_t half = N / 2, K128 = K / 128 * 128;
  for (int64_t n = 0; n < half; ++n) {
    const uint16_t *r = B + n * ldb, *s = B + (n + half) * ldb;
    Acc a = acc_zero(), c = acc_zero();
    for (int64_t k = 0; k < K128; k += 128) {
      acc_block(a, r + k, x + k);
      acc_block(c, s + k, x + k);
    }
    Y[n] = acc_finish(a, K128, K, r, x);
    Y[n + half] = acc_finish(c, K128, K, s, x);
  }
  if (N % 2) dot_pass<1>(1, 1, K, x, 0, B + (N - 1) * ldb, ldb, Y + N - 1, 0);
}

}  // namespace

void gemm_rows_bf16_dot(int64_t M, int64_t N, int64_t K, const uint16_t* X, int64_t ldx,
                        const uint16_t* B, int64_t ldb, float* Y, int64_t ldy) {
  // With more than kDotRows rows, B goes by blocks of about 32 KB that every group of rows passes
  // over in turn (gemm_rows' blocking), so B still comes from memory once.
  if (M == 1) return dot_two_streams(N, K, X, B, ldb, Y);
  const int64_t block =
      M <= kDotRows ? N : std::max<int64_t>(1, (int64_t(16) << 10) / std::max<int64_t>(K, 1));
  for (int64_t n0 = 0; n0 < N; n0 += block) {
    const int64_t nb = std::min(block, N - n0);
    for (int64_t m = 0; m < M; m += kDotRows)
      dot_pass<kDotRows>(int(std::min<int64_t>(kDotRows, M - m)), nb, K, X + m * ldx, ldx,
                         B + n0 * ldb, ldb, Y + m * ldy + n0, ldy);
  }
}

#else  // no AVX512-BF16 here (bf16_dot_enabled() is false): the same sums, one product at a time

void gemm_rows_bf16_dot(int64_t M, int64_t N, int64_t K, const uint16_t* X, int64_t ldx,
                        const uint16_t* B, int64_t ldb, float* Y, int64_t ldy) {
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      float s = 0.0f;
      for (int64_t k = 0; k < K; ++k)
        s += bf16_bits_to_float(X[m * ldx + k]) * bf16_bits_to_float(B[n * ldb + k]);
      Y[m * ldy + n] = s;
    }
}

#endif

}  // namespace attn::kernels

// Vector backends for the fused attention kernel: one struct per instruction set, all with the same
// static interface, so the kernel (sdpa_fused_kernel.inc) is written once and compiled three times.
//
//   Scalar  portable C++ on W = 8 lanes held in an array (any CPU)
//   Avx2    AVX2 + FMA, W = 8 lanes in a __m256                       (x86-64)
//   Avx512  AVX-512 F/DQ/BW/VL, W = 16 lanes in a __m512              (x86-64)
//   Neon    Advanced SIMD, W = 4 lanes in a float32x4_t               (AArch64, always present)
//   Sve     SVE at a vector length fixed when compiling (ATTN_SVE_BITS, with GCC's
//           -msve-vector-bits), W = ATTN_SVE_BITS / 32 lanes          (AArch64 with SVE)
//
// The library is compiled for the baseline ISA; only functions marked ATTN_TARGET_AVX2 /
// ATTN_TARGET_AVX512 use the wider x86 instructions, and sdpa_fused.cpp calls them only after
// __builtin_cpu_supports has said the CPU has them. NEON is part of the AArch64 baseline; SVE code
// (ATTN_TARGET_SVE) runs only where the kernel's vector length is the CPU's (sdpa_fused.cpp asks
// the kernel with prctl).
//
// The vector math built on these primitives (2^x) is written once, in simd_math.inc.
//
// Interface of a backend V (T is one vector of W floats; kRegs vector registers):
//   load, store, set1, zero, add, sub, mul, fmadd(a, b, c) = a * b + c, max, min (max and min
//                           return b where a lane of b is NaN)
//   div(a, b), abs(x)       a / b, |x|
//   select_lt(c, t, a, b)   lane-wise c < t ? a : b (b where c or t is NaN)
//   round(x)                to the nearest integer, ties to even
//   pow2i(n)                2^n for integral n in [-127, 127], built in the exponent bits (n = -127
//                           gives +0)
//   load_partial(p, n)      the first n floats at p, zeros after (reads nothing past p + n)
//   store_partial(p, a, n)  the first n lanes of a to p (writes nothing past p + n)
//   reduce_add, reduce_max  horizontal sum / max of the lanes
//   reduce_add4(a, b, c, d, out)
//                           the horizontal sums of four vectors to out[0 .. 3], sharing the work
//                           (in another order than reduce_add's: may differ in the last bits)
//   zero_if_neginf(x)       x with -inf lanes replaced by 0
//   mask_rows(s, i, lo, hi) s with lanes whose row index i[lane] (int32) is outside [lo, hi] set to
//                           -inf
//   transpose(r)            r[0 .. W-1] in place: lane l of r[k] becomes lane k of r[l]
//   dropout(p, base, add, threshold, keep_scale)
//                           p * keep_scale where the lane is kept, 0 where it is dropped; lane l is
//                           kept iff dropout_bits_from_state(base[l] + add) >> 32 >= threshold
//                           (see dropout_keep in sdpa_dropout.h)
#pragma once

#if defined(__x86_64__) || defined(__i386__)
#define ATTN_SIMD_X86 1
#include <immintrin.h>
#else
#define ATTN_SIMD_X86 0
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
#define ATTN_SIMD_NEON 1
#include <arm_neon.h>
#else
#define ATTN_SIMD_NEON 0
#endif

#include <attn/half.h>

#include <cmath>
#include <cstdint>
#include <limits>

#include "../sdpa_dropout.h"

#define ATTN_TARGET_AVX2 __attribute__((target("avx2,fma,f16c")))
#define ATTN_TARGET_AVX512 \
  __attribute__((target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma,f16c")))
#define ATTN_ALWAYS_INLINE inline __attribute__((always_inline))
// SVE kernels need GCC's -msve-vector-bits=ATTN_SVE_BITS for the whole build (it changes nothing
// outside SVE code) and are compiled for SVE function by function, as the x86 ones are.
#if ATTN_SIMD_NEON && defined(ATTN_SVE_BITS) && defined(__GNUC__) && !defined(__clang__)
#define ATTN_SIMD_SVE 1
#define ATTN_TARGET_SVE __attribute__((target("+sve")))
#else
#define ATTN_SIMD_SVE 0
#endif

namespace attn::kernels::simd {

// 2^f = 1 + f * (c1 + f * (c2 + f * (c3 + f * (c4 + f * (c5 + f * c6))))) on f in [-1/2, 1/2]:
// a near-minimax fit of the relative error (2e-9 in exact arithmetic, far below float's 6e-8),
// with the constant term exactly 1 so that 2^0 == 1 (an unchanged running max rescales by exactly
// 1). With x = n + f, n = round(x), 2^x = 2^n * 2^f and 2^n is built in the exponent bits.
inline constexpr float kExp2C1 = 0.6931472035320722f, kExp2C2 = 0.2402264801106379f,
                       kExp2C3 = 0.055503316168044145f, kExp2C4 = 0.009618426086612486f,
                       kExp2C5 = 0.001339911648654465f, kExp2C6 = 0.00015356390775861652f;

// Scalar 2^x with the same range reduction and polynomial (no FMA, so it may differ by an ulp).
inline float exp2_scalar(float x) {
  if (!(x >= -127.0f)) return std::isnan(x) ? x : 0.0f;  // -inf and tiny results flush to 0
  if (x > 127.0f) x = 127.0f;
  const float n = std::nearbyint(x);
  const float f = x - n;
  float p = kExp2C6;
  p = p * f + kExp2C5;
  p = p * f + kExp2C4;
  p = p * f + kExp2C3;
  p = p * f + kExp2C2;
  p = p * f + kExp2C1;
  p = p * f + 1.0f;
  const int32_t e = (int32_t(n) + 127) << 23;  // 2^n; n == -127 gives +0
  float scale;
  __builtin_memcpy(&scale, &e, sizeof scale);
  return p * scale;
}

inline constexpr float kNegInfF = -std::numeric_limits<float>::infinity();

// The bits of a bfloat16 or float16 value as a type of their own, so that a kernel templated on
// the element it reads (float, Bf16Bits or Fp16Bits) overloads its loads on it (simd_elems.inc).
struct Bf16Bits {
  uint16_t bits;
};
struct Fp16Bits {
  uint16_t bits;
};

// ---- portable
// -------------------------------------------------------------------------------------

struct Scalar {
  static constexpr int W = 8;
  static constexpr int kRegs = 16;  // vector registers
  struct T {
    float v[W];
  };
  static ATTN_ALWAYS_INLINE T load(const float* p) {
    T r;
    for (int l = 0; l < W; ++l) r.v[l] = p[l];
    return r;
  }
  static ATTN_ALWAYS_INLINE void store(float* p, const T& a) {
    for (int l = 0; l < W; ++l) p[l] = a.v[l];
  }
  static ATTN_ALWAYS_INLINE T set1(float x) {
    T r;
    for (int l = 0; l < W; ++l) r.v[l] = x;
    return r;
  }
  static ATTN_ALWAYS_INLINE T zero() { return set1(0.0f); }
  static ATTN_ALWAYS_INLINE T load_partial(const float* p, int n) {
    T r;
    for (int l = 0; l < W; ++l) r.v[l] = l < n ? p[l] : 0.0f;
    return r;
  }
  static ATTN_ALWAYS_INLINE void store_partial(float* p, const T& a, int n) {
    for (int l = 0; l < n; ++l) p[l] = a.v[l];
  }
  // W bfloat16 values (their bits) at p as floats (exact), and the first n of them, zeros after.
  static ATTN_ALWAYS_INLINE T load_bf16(const uint16_t* p) { return load_bf16_partial(p, W); }
  static ATTN_ALWAYS_INLINE T load_bf16_partial(const uint16_t* p, int n) {
    T r;
    for (int l = 0; l < W; ++l) r.v[l] = l < n ? bf16_bits_to_float(p[l]) : 0.0f;
    return r;
  }
  // The same for float16 (IEEE binary16) bits.
  static ATTN_ALWAYS_INLINE T load_fp16(const uint16_t* p) { return load_fp16_partial(p, W); }
  static ATTN_ALWAYS_INLINE T load_fp16_partial(const uint16_t* p, int n) {
    T r;
    for (int l = 0; l < W; ++l) r.v[l] = l < n ? fp16_bits_to_float(p[l]) : 0.0f;
    return r;
  }
  static ATTN_ALWAYS_INLINE float reduce_add(const T& a) {
    float s = 0.0f;
    for (int l = 0; l < W; ++l) s += a.v[l];
    return s;
  }
  static ATTN_ALWAYS_INLINE void reduce_add4(const T& a, const T& b, const T& c, const T& d,
                                             float* out) {
    out[0] = reduce_add(a), out[1] = reduce_add(b), out[2] = reduce_add(c), out[3] = reduce_add(d);
  }
  static ATTN_ALWAYS_INLINE float reduce_max(const T& a) {
    float s = a.v[0];
    for (int l = 1; l < W; ++l) s = a.v[l] > s ? a.v[l] : s;
    return s;
  }
#define ATTN_SCALAR_BINARY(name, expr)                \
  static ATTN_ALWAYS_INLINE T name(T a, const T& b) { \
    for (int l = 0; l < W; ++l) a.v[l] = (expr);      \
    return a;                                         \
  }
  ATTN_SCALAR_BINARY(add, a.v[l] + b.v[l])
  ATTN_SCALAR_BINARY(sub, a.v[l] - b.v[l])
  ATTN_SCALAR_BINARY(mul, a.v[l] * b.v[l])
  // NaN in b propagates, as with the x86 max instructions' operand order used below.
  ATTN_SCALAR_BINARY(max, a.v[l] > b.v[l] ? a.v[l] : b.v[l])
  ATTN_SCALAR_BINARY(min, a.v[l] < b.v[l] ? a.v[l] : b.v[l])
  ATTN_SCALAR_BINARY(div, a.v[l] / b.v[l])
#undef ATTN_SCALAR_BINARY
  static ATTN_ALWAYS_INLINE T abs(T x) {
    for (int l = 0; l < W; ++l) x.v[l] = std::fabs(x.v[l]);
    return x;
  }
  static ATTN_ALWAYS_INLINE T select_lt(const T& c, const T& t, const T& a, T b) {
    for (int l = 0; l < W; ++l)
      if (c.v[l] < t.v[l]) b.v[l] = a.v[l];
    return b;
  }
  static ATTN_ALWAYS_INLINE T round(T x) {
    for (int l = 0; l < W; ++l) x.v[l] = std::nearbyint(x.v[l]);
    return x;
  }
  static ATTN_ALWAYS_INLINE T pow2i(T n) {
    for (int l = 0; l < W; ++l) {
      if (std::isnan(n.v[l])) continue;  // NaN stays NaN (no conversion of it to an integer)
      const int32_t e = (int32_t(n.v[l]) + 127) << 23;
      __builtin_memcpy(&n.v[l], &e, sizeof e);
    }
    return n;
  }
  static ATTN_ALWAYS_INLINE T fmadd(const T& a, const T& b, T c) {
    for (int l = 0; l < W; ++l) c.v[l] = a.v[l] * b.v[l] + c.v[l];
    return c;
  }
  static ATTN_ALWAYS_INLINE T zero_if_neginf(T x) {
    for (int l = 0; l < W; ++l)
      if (x.v[l] == kNegInfF) x.v[l] = 0.0f;
    return x;
  }
  static ATTN_ALWAYS_INLINE T mask_rows(T s, const int32_t* i, int32_t lo, int32_t hi) {
    for (int l = 0; l < W; ++l)
      if (i[l] < lo || i[l] > hi) s.v[l] = kNegInfF;
    return s;
  }
  static ATTN_ALWAYS_INLINE void transpose(T* r) {
    for (int k = 0; k < W; ++k)
      for (int l = k + 1; l < W; ++l) {
        const float t = r[k].v[l];
        r[k].v[l] = r[l].v[k];
        r[l].v[k] = t;
      }
  }
  static ATTN_ALWAYS_INLINE T dropout(T p, const uint64_t* base, uint64_t add, uint32_t threshold,
                                      float keep_scale) {
    for (int l = 0; l < W; ++l)
      p.v[l] = uint32_t(dropout_mix(base[l] + add) >> 32) >= threshold ? p.v[l] * keep_scale : 0.0f;
    return p;
  }
};

#if ATTN_SIMD_X86
// ---- AVX2 + FMA
// -----------------------------------------------------------------------------------

struct Avx2 {
  static constexpr int W = 8;
  static constexpr int kRegs = 16;  // vector registers
  using T = __m256;
  static ATTN_TARGET_AVX2 ATTN_ALWAYS_INLINE T load(const float* p) { return _mm256_loadu_ps(p); }
  static ATTN_TARGET_AVX2 ATTN_ALWAYS_INLINE void store(float* p, T a) { _mm256_storeu_ps(p, a); }
  static ATTN_TARGET_AVX2 ATTN_ALWAYS_INLINE T set1(float x) { return _mm256_set1_ps(x); }
  static ATTN_TARGET_AVX2 ATTN_ALWAYS_INLINE T zero() { return _mm256_setzero_ps(); }
  // The first n (0 <= n <= W) floats at p, zeros after them; nothing past p + n is read.
  static ATTN_TARGET_AVX2 ATTN_ALWAYS_INLINE T load_partial(const float* p, int n) {
    const __m256i live =
        _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    return _mm256_maskload_ps(p, live);
  }
  static ATTN_TARGET_AVX2 ATTN_ALWAYS_INLINE void store_partial(float* p, T a, int n) {
    const __m256i live =
        _mm256_cmpgt_epi32(_mm256_set1_epi32(n), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
    _mm256_maskstore_ps(p, live, a);
  }
  // W bfloat16 values (their bits) at p as floats: zero-extended and shifted up, exact.
  static ATTN_TARGET_AVX2 ATTN_ALWAYS_INLINE T load_bf16(const uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
  }
  static ATTN_TARGET_AVX2 ATTN_ALWAYS_INLINE T load_bf16_partial(const uint16_t* p, int n) {
    alignas(16) uint16_t buf[W] = {};
    for (int l = 0; l < n; ++l) buf[l] = p[l];
    return load_bf16(buf);
  }
  // W float16 values (their bits) at p as floats: F16C's conversion, exact.
  static ATTN_TARGET_AVX2 ATTN_ALWAYS_INLINE T load_fp16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  static ATTN_TARGET_AVX2 ATTN_ALWAYS_INLINE T load_fp16_partial(const uint16_t* p, int n) {
    alignas(16) uint16_t buf[W] = {};
    for (int l = 0; l < n; ++l) buf[l] = p[l];
    return load_fp16(buf);
  }
  static ATTN_TARGET_AVX2 ATTN_ALWAYS_INLINE float reduce_add(T a) {
    __m128 x = _mm_add_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    x = _mm_add_ps(x, _mm_movehl_ps(x, x));
    x = _mm_add_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
  }
  static ATTN_TARGET_AVX2 ATTN_ALWAYS_INLINE void reduce_add4(T a, T b, T c, T d, float* out) {
    // Pairs of lanes, then quadruples, per 128-bit half; then the halves.
    const __m256 q = _mm256_hadd_ps(_mm256_hadd_ps(a, b), _mm256_hadd_ps(c, d));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(q), _mm256_extractf128_ps(q, 1)));
  }
  static ATTN_TARGET_AVX2 ATTN_ALWAYS_INLINE float reduce_max(T a) {
    __m128 x = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
    x = _mm_max_ps(x, _mm_movehl_ps(x, x));
    x = _mm_max_ss(x, _mm_movehdup_ps(x));
    return _mm_cvtss_f32(x);
  }
  static ATTN_TARGET_AVX2 ATTN_ALWAYS_INLINE T add(T a, T b) { return _mm256_add_ps(a, b); }
  static ATTN_TARGET_AVX2 ATTN_ALWAYS_INLINE T sub(T a, T b) { return _mm256_sub_ps(a, b); }
  static ATTN_TARGET_AVX2 ATTN_ALWAYS_INLINE T mul(T a, T b) { return _mm256_mul_ps(a, b); }
  // maxps returns its second operand when either is NaN: a NaN in b propagates.
  static ATTN_TARGET_AVX2 ATTN_ALWAYS_INLINE T max(T a, T b) { return _mm256_max_ps(a, b); }
  static ATTN_TARGET_AVX2 ATTN_ALWAYS_INLINE T min(T a, T b) { return _mm256_min_ps(a, b); }
  static ATTN_TARGET_AVX2 ATTN_ALWAYS_INLINE T div(T a, T b) { return _mm256_div_ps(a, b); }
  static ATTN_TARGET_AVX2 ATTN_ALWAYS_INLINE T abs(T x) {
    return _mm256_andnot_ps(_mm256_set1_ps(-0.0f), x);
  }
  static ATTN_TARGET_AVX2 ATTN_ALWAYS_INLINE T select_lt(T c, T t, T a, T b) {
    return _mm256_blendv_ps(b, a, _mm256_cmp_ps(c, t, _CMP_LT_OQ));
  }
  static ATTN_TARGET_AVX2 ATTN_ALWAYS_INLINE T round(T x) {
    return _mm256_round_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static ATTN_TARGET_AVX2 ATTN_ALWAYS_INLINE T pow2i(T n) {
    const __m256i e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
    return _mm256_castsi256_ps(_mm256_slli_epi32(e, 23));
  }
  static ATTN_TARGET_AVX2 ATTN_ALWAYS_INLINE T fmadd(T a, T b, T c) {
    return _mm256_fmadd_ps(a, b, c);
  }
  static ATTN_TARGET_AVX2 ATTN_ALWAYS_INLINE T zero_if_neginf(T x) {
    const T is_inf = _mm256_cmp_ps(x, _mm256_set1_ps(kNegInfF), _CMP_EQ_OQ);
    return _mm256_andnot_ps(is_inf, x);
  }
  static ATTN_TARGET_AVX2 ATTN_ALWAYS_INLINE T mask_rows(T s, const int32_t* i, int32_t lo,
                                                         int32_t hi) {
    const __m256i iv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(i));
    const __m256i out = _mm256_or_si256(_mm256_cmpgt_epi32(_mm256_set1_epi32(lo), iv),
                                        _mm256_cmpgt_epi32(iv, _mm256_set1_epi32(hi)));
    return _mm256_blendv_ps(s, _mm256_set1_ps(kNegInfF), _mm256_castsi256_ps(out));
  }
  // 8 x 8: interleave pairs of rows, then pairs of pairs within each 128-bit half, then the halves.
  static ATTN_TARGET_AVX2 ATTN_ALWAYS_INLINE void transpose(T* r) {
    T t[8], u[8];
    for (int k = 0; k < 8; k += 2) {
      t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);      // a0 b0 a1 b1 | a4 b4 a5 b5
      t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);  // a2 b2 a3 b3 | a6 b6 a7 b7
    }
    for (int k = 0; k < 8; k += 4) {
      u[k] = _mm256_shuffle_ps(t[k], t[k + 2], 0x44);          // a0 b0 c0 d0 | a4 b4 c4 d4
      u[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], 0xEE);      // column 1 | 5
      u[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0x44);  // column 2 | 6
      u[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], 0xEE);  // column 3 | 7
    }
    for (int c = 0; c < 4; ++c) {
      r[c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x20);
      r[4 + c] = _mm256_permute2f128_ps(u[c], u[4 + c], 0x31);
    }
  }
  // a * c mod 2^64 for four 64-bit lanes (AVX2 has only 32 x 32 -> 64-bit multiplies).
  static ATTN_TARGET_AVX2 ATTN_ALWAYS_INLINE __m256i mul64(__m256i a, uint64_t c) {
    const __m256i c_lo = _mm256_set1_epi64x(int64_t(c & 0xffffffffu));
    const __m256i c_hi = _mm256_set1_epi64x(int64_t(c >> 32));
    const __m256i lo = _mm256_mul_epu32(a, c_lo);
    const __m256i cross = _mm256_add_epi64(_mm256_mul_epu32(_mm256_srli_epi64(a, 32), c_lo),
                                           _mm256_mul_epu32(a, c_hi));
    return _mm256_add_epi64(lo, _mm256_slli_epi64(cross, 32));
  }
  // The high 32 bits of dropout_mix for four 64-bit states, in the low 128 bits.
  static ATTN_TARGET_AVX2 ATTN_ALWAYS_INLINE __m128i mix_hi(__m256i z) {
    z = mul64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 30)), kDropoutMul1);
    z = mul64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 27)), kDropoutMul2);
    z = _mm256_srli_epi64(_mm256_xor_si256(z, _mm256_srli_epi64(z, 31)), 32);
    z = _mm256_permutevar8x32_epi32(z, _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7));
    return _mm256_castsi256_si128(z);
  }
  static ATTN_TARGET_AVX2 ATTN_ALWAYS_INLINE T dropout(T p, const uint64_t* base, uint64_t add,
                                                       uint32_t threshold, float keep_scale) {
    const __m256i a = _mm256_set1_epi64x(int64_t(add));
    const __m256i z0 =
        _mm256_add_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(base)), a);
    const __m256i z1 =
        _mm256_add_epi64(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(base + 4)), a);
    const __m256i r = _mm256_inserti128_si256(_mm256_castsi128_si256(mix_hi(z0)), mix_hi(z1), 1);
    // r >= threshold (unsigned)  <=>  max(r, threshold) == r
    const __m256i keep =
        _mm256_cmpeq_epi32(_mm256_max_epu32(r, _mm256_set1_epi32(int32_t(threshold))), r);
    return _mm256_and_ps(_mm256_castsi256_ps(keep), _mm256_mul_ps(p, _mm256_set1_ps(keep_scale)));
  }
};

// ---- AVX-512
// --------------------------------------------------------------------------------------

struct Avx512 {
  static constexpr int W = 16;
  static constexpr int kRegs = 32;  // vector registers
  using T = __m512;
  static ATTN_TARGET_AVX512 ATTN_ALWAYS_INLINE T load(const float* p) { return _mm512_loadu_ps(p); }
  static ATTN_TARGET_AVX512 ATTN_ALWAYS_INLINE void store(float* p, T a) { _mm512_storeu_ps(p, a); }
  static ATTN_TARGET_AVX512 ATTN_ALWAYS_INLINE T set1(float x) { return _mm512_set1_ps(x); }
  static ATTN_TARGET_AVX512 ATTN_ALWAYS_INLINE T zero() { return _mm512_setzero_ps(); }
  static ATTN_TARGET_AVX512 ATTN_ALWAYS_INLINE T load_partial(const float* p, int n) {
    return _mm512_maskz_loadu_ps(__mmask16((1u << n) - 1), p);
  }
  static ATTN_TARGET_AVX512 ATTN_ALWAYS_INLINE void store_partial(float* p, T a, int n) {
    _mm512_mask_storeu_ps(p, __mmask16((1u << n) - 1), a);
  }
  // W bfloat16 values (their bits) at p as floats: zero-extended and shifted up, exact.
  static ATTN_TARGET_AVX512 ATTN_ALWAYS_INLINE T load_bf16(const uint16_t* p) {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  static ATTN_TARGET_AVX512 ATTN_ALWAYS_INLINE T load_bf16_partial(const uint16_t* p, int n) {
    const __m256i h = _mm256_maskz_loadu_epi16(__mmask16((1u << n) - 1), p);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
  // W float16 values (their bits) at p as floats, exact.
  static ATTN_TARGET_AVX512 ATTN_ALWAYS_INLINE T load_fp16(const uint16_t* p) {
    return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
  }
  static ATTN_TARGET_AVX512 ATTN_ALWAYS_INLINE T load_fp16_partial(const uint16_t* p, int n) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(__mmask16((1u << n) - 1), p));
  }
  static ATTN_TARGET_AVX512 ATTN_ALWAYS_INLINE float reduce_add(T a) {
    return _mm512_reduce_add_ps(a);
  }
  static ATTN_TARGET_AVX512 ATTN_ALWAYS_INLINE __m256 halves(T x) {
    return _mm256_add_ps(_mm512_castps512_ps256(x),
                         _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(x), 1)));
  }
  static ATTN_TARGET_AVX512 ATTN_ALWAYS_INLINE void reduce_add4(T a, T b, T c, T d, float* out) {
    // The 256-bit halves added, then as Avx2's.
    const __m256 q =
        _mm256_hadd_ps(_mm256_hadd_ps(halves(a), halves(b)), _mm256_hadd_ps(halves(c), halves(d)));
    _mm_storeu_ps(out, _mm_add_ps(_mm256_castps256_ps128(q), _mm256_extractf128_ps(q, 1)));
  }
  static ATTN_TARGET_AVX512 ATTN_ALWAYS_INLINE float reduce_max(T a) {
    return _mm512_reduce_max_ps(a);
  }
  static ATTN_TARGET_AVX512 ATTN_ALWAYS_INLINE T add(T a, T b) { return _mm512_add_ps(a, b); }
  static ATTN_TARGET_AVX512 ATTN_ALWAYS_INLINE T sub(T a, T b) { return _mm512_sub_ps(a, b); }
  static ATTN_TARGET_AVX512 ATTN_ALWAYS_INLINE T mul(T a, T b) { return _mm512_mul_ps(a, b); }
  static ATTN_TARGET_AVX512 ATTN_ALWAYS_INLINE T max(T a, T b) { return _mm512_max_ps(a, b); }
  static ATTN_TARGET_AVX512 ATTN_ALWAYS_INLINE T min(T a, T b) { return _mm512_min_ps(a, b); }
  static ATTN_TARGET_AVX512 ATTN_ALWAYS_INLINE T div(T a, T b) { return _mm512_div_ps(a, b); }
  static ATTN_TARGET_AVX512 ATTN_ALWAYS_INLINE T abs(T x) {
    return _mm512_castsi512_ps(
        _mm512_and_si512(_mm512_castps_si512(x), _mm512_set1_epi32(0x7fffffff)));
  }
  static ATTN_TARGET_AVX512 ATTN_ALWAYS_INLINE T select_lt(T c, T t, T a, T b) {
    return _mm512_mask_mov_ps(b, _mm512_cmp_ps_mask(c, t, _CMP_LT_OQ), a);
  }
  static ATTN_TARGET_AVX512 ATTN_ALWAYS_INLINE T round(T x) {
    return _mm512_roundscale_ps(x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  }
  static ATTN_TARGET_AVX512 ATTN_ALWAYS_INLINE T pow2i(T n) {
    const __m512i e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
    return _mm512_castsi512_ps(_mm512_slli_epi32(e, 23));
  }
  static ATTN_TARGET_AVX512 ATTN_ALWAYS_INLINE T fmadd(T a, T b, T c) {
    return _mm512_fmadd_ps(a, b, c);
  }
  static ATTN_TARGET_AVX512 ATTN_ALWAYS_INLINE T zero_if_neginf(T x) {
    const __mmask16 is_inf = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kNegInfF), _CMP_EQ_OQ);
    return _mm512_mask_mov_ps(x, is_inf, _mm512_setzero_ps());
  }
  static ATTN_TARGET_AVX512 ATTN_ALWAYS_INLINE T mask_rows(T s, const int32_t* i, int32_t lo,
                                                           int32_t hi) {
    const __m512i iv = _mm512_loadu_si512(i);
    const __mmask16 out = _mm512_cmplt_epi32_mask(iv, _mm512_set1_epi32(lo)) |
                          _mm512_cmpgt_epi32_mask(iv, _mm512_set1_epi32(hi));
    return _mm512_mask_mov_ps(s, out, _mm512_set1_ps(kNegInfF));
  }
  // 16 x 16: within each 128-bit lane as the 4 x 4 transposes of unpack{lo,hi}_{ps,pd}, then the
  // 128-bit lanes of four rows at a time in two rounds of shuffle_f32x4.
  static ATTN_TARGET_AVX512 ATTN_ALWAYS_INLINE void transpose(T* r) {
    T t[16], u[16];
    for (int k = 0; k < 16; k += 2) {
      t[k] = _mm512_unpacklo_ps(r[k], r[k + 1]);
      t[k + 1] = _mm512_unpackhi_ps(r[k], r[k + 1]);
    }
    // u[4 g + m]: in 128-bit lane q, rows 4 g .. 4 g + 3 of column 4 q + m.
    for (int g = 0; g < 4; ++g) {
      const __m512d a = _mm512_castps_pd(t[4 * g]), b = _mm512_castps_pd(t[4 * g + 1]),
                    c = _mm512_castps_pd(t[4 * g + 2]), d = _mm512_castps_pd(t[4 * g + 3]);
      u[4 * g] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
      u[4 * g + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
      u[4 * g + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
      u[4 * g + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
    }
    for (int m = 0; m < 4; ++m) {
      // x: groups 0, 1; y: groups 2, 3; lanes (column m, 8 + m) or (4 + m, 12 + m) of each.
      const T x0 = _mm512_shuffle_f32x4(u[m], u[4 + m], 0x88);
      const T x1 = _mm512_shuffle_f32x4(u[m], u[4 + m], 0xDD);
      const T y0 = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], 0x88);
      const T y1 = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], 0xDD);
      r[m] = _mm512_shuffle_f32x4(x0, y0, 0x88);
      r[8 + m] = _mm512_shuffle_f32x4(x0, y0, 0xDD);
      r[4 + m] = _mm512_shuffle_f32x4(x1, y1, 0x88);
      r[12 + m] = _mm512_shuffle_f32x4(x1, y1, 0xDD);
    }
  }
  static ATTN_TARGET_AVX512 ATTN_ALWAYS_INLINE __m256i mix_hi(__m512i z) {
    z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 30)),
                           _mm512_set1_epi64(int64_t(kDropoutMul1)));
    z = _mm512_mullo_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 27)),
                           _mm512_set1_epi64(int64_t(kDropoutMul2)));
    z = _mm512_srli_epi64(_mm512_xor_si512(z, _mm512_srli_epi64(z, 31)), 32);
    return _mm512_cvtepi64_epi32(z);
  }
  static ATTN_TARGET_AVX512 ATTN_ALWAYS_INLINE T dropout(T p, const uint64_t* base, uint64_t add,
                                                         uint32_t threshold, float keep_scale) {
    const __m512i a = _mm512_set1_epi64(int64_t(add));
    const __m512i z0 = _mm512_add_epi64(_mm512_loadu_si512(base), a);
    const __m512i z1 = _mm512_add_epi64(_mm512_loadu_si512(base + 8), a);
    const __m512i r = _mm512_inserti64x4(_mm512_castsi256_si512(mix_hi(z0)), mix_hi(z1), 1);
    const __mmask16 keep = _mm512_cmpge_epu32_mask(r, _mm512_set1_epi32(int32_t(threshold)));
    return _mm512_maskz_mul_ps(keep, p, _mm512_set1_ps(keep_scale));
  }
};
#endif  // ATTN_SIMD_X86

#if ATTN_SIMD_NEON
// ---- AArch64 Advanced SIMD (NEON)
// ---------------------------------------------------------------------------------

struct Neon {
  static constexpr int W = 4;
  static constexpr int kRegs = 32;  // vector registers
  using T = float32x4_t;
  static ATTN_ALWAYS_INLINE T load(const float* p) { return vld1q_f32(p); }
  static ATTN_ALWAYS_INLINE void store(float* p, T a) { vst1q_f32(p, a); }
  static ATTN_ALWAYS_INLINE T set1(float x) { return vdupq_n_f32(x); }
  static ATTN_ALWAYS_INLINE T zero() { return vdupq_n_f32(0.0f); }
  static ATTN_ALWAYS_INLINE T load_partial(const float* p, int n) {
    float buf[W] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int l = 0; l < n; ++l) buf[l] = p[l];
    return vld1q_f32(buf);
  }
  static ATTN_ALWAYS_INLINE void store_partial(float* p, T a, int n) {
    float buf[W];
    vst1q_f32(buf, a);
    for (int l = 0; l < n; ++l) p[l] = buf[l];
  }
  // W bfloat16 values (their bits) at p as floats: widened and shifted up, exact.
  static ATTN_ALWAYS_INLINE T load_bf16(const uint16_t* p) {
    return vreinterpretq_f32_u32(vshll_n_u16(vld1_u16(p), 16));
  }
  static ATTN_ALWAYS_INLINE T load_bf16_partial(const uint16_t* p, int n) {
    uint16_t buf[W] = {0, 0, 0, 0};
    for (int l = 0; l < n; ++l) buf[l] = p[l];
    return load_bf16(buf);
  }
  // W float16 values (their bits) at p as floats, exact.
  static ATTN_ALWAYS_INLINE T load_fp16(const uint16_t* p) {
    return vcvt_f32_f16(vreinterpret_f16_u16(vld1_u16(p)));
  }
  static ATTN_ALWAYS_INLINE T load_fp16_partial(const uint16_t* p, int n) {
    uint16_t buf[W] = {0, 0, 0, 0};
    for (int l = 0; l < n; ++l) buf[l] = p[l];
    return load_fp16(buf);
  }
  static ATTN_ALWAYS_INLINE float reduce_add(T a) { return vaddvq_f32(a); }
  static ATTN_ALWAYS_INLINE void reduce_add4(T a, T b, T c, T d, float* out) {
    vst1q_f32(out, vpaddq_f32(vpaddq_f32(a, b), vpaddq_f32(c, d)));
  }
  static ATTN_ALWAYS_INLINE float reduce_max(T a) { return vmaxvq_f32(a); }
  static ATTN_ALWAYS_INLINE T add(T a, T b) { return vaddq_f32(a, b); }
  static ATTN_ALWAYS_INLINE T sub(T a, T b) { return vsubq_f32(a, b); }
  static ATTN_ALWAYS_INLINE T mul(T a, T b) { return vmulq_f32(a, b); }
  // fmax propagates a NaN in either operand (the interface asks for one in b).
  static ATTN_ALWAYS_INLINE T max(T a, T b) { return vmaxq_f32(a, b); }
  static ATTN_ALWAYS_INLINE T min(T a, T b) { return vminq_f32(a, b); }
  static ATTN_ALWAYS_INLINE T div(T a, T b) { return vdivq_f32(a, b); }
  static ATTN_ALWAYS_INLINE T abs(T x) { return vabsq_f32(x); }
  static ATTN_ALWAYS_INLINE T select_lt(T c, T t, T a, T b) {
    return vbslq_f32(vcltq_f32(c, t), a, b);
  }
  static ATTN_ALWAYS_INLINE T round(T x) { return vrndnq_f32(x); }  // ties to even
  static ATTN_ALWAYS_INLINE T pow2i(T n) {
    return vreinterpretq_f32_s32(vshlq_n_s32(vaddq_s32(vcvtq_s32_f32(n), vdupq_n_s32(127)), 23));
  }
  static ATTN_ALWAYS_INLINE T fmadd(T a, T b, T c) { return vfmaq_f32(c, a, b); }
  static ATTN_ALWAYS_INLINE T zero_if_neginf(T x) {
    const uint32x4_t is_inf = vceqq_f32(x, vdupq_n_f32(kNegInfF));
    return vreinterpretq_f32_u32(vbicq_u32(vreinterpretq_u32_f32(x), is_inf));
  }
  static ATTN_ALWAYS_INLINE T mask_rows(T s, const int32_t* i, int32_t lo, int32_t hi) {
    const int32x4_t iv = vld1q_s32(i);
    const uint32x4_t out =
        vorrq_u32(vcltq_s32(iv, vdupq_n_s32(lo)), vcgtq_s32(iv, vdupq_n_s32(hi)));
    return vbslq_f32(out, vdupq_n_f32(kNegInfF), s);
  }
  static ATTN_ALWAYS_INLINE void transpose(T* r) {
    const float32x4x2_t ab = vtrnq_f32(r[0], r[1]);  // a0 b0 a2 b2, a1 b1 a3 b3
    const float32x4x2_t cd = vtrnq_f32(r[2], r[3]);
    r[0] = vcombine_f32(vget_low_f32(ab.val[0]), vget_low_f32(cd.val[0]));
    r[1] = vcombine_f32(vget_low_f32(ab.val[1]), vget_low_f32(cd.val[1]));
    r[2] = vcombine_f32(vget_high_f32(ab.val[0]), vget_high_f32(cd.val[0]));
    r[3] = vcombine_f32(vget_high_f32(ab.val[1]), vget_high_f32(cd.val[1]));
  }
  // NEON has no 64-bit lane multiply: the generator runs per lane (as Scalar does).
  static ATTN_ALWAYS_INLINE T dropout(T p, const uint64_t* base, uint64_t add, uint32_t threshold,
                                      float keep_scale) {
    uint32_t keep[W];
    for (int l = 0; l < W; ++l)
      keep[l] = uint32_t(dropout_mix(base[l] + add) >> 32) >= threshold ? ~0u : 0u;
    const T scaled = vmulq_f32(p, vdupq_n_f32(keep_scale));
    return vreinterpretq_f32_u32(vandq_u32(vld1q_u32(keep), vreinterpretq_u32_f32(scaled)));
  }
};
#endif  // ATTN_SIMD_NEON

#if ATTN_SIMD_SVE
// ---- AArch64 SVE at a fixed vector length
// ------------------------------------------------------------------------

#pragma GCC push_options
#pragma GCC target("+sve")
}  // namespace attn::kernels::simd
#include <arm_sve.h>
namespace attn::kernels::simd {

struct Sve {
  static constexpr int W = ATTN_SVE_BITS / 32;
  static constexpr int kRegs = 32;  // vector registers
  using T = svfloat32_t __attribute__((arm_sve_vector_bits(ATTN_SVE_BITS)));
  using U64 = svuint64_t __attribute__((arm_sve_vector_bits(ATTN_SVE_BITS)));
  static ATTN_ALWAYS_INLINE svbool_t all() { return svptrue_b32(); }
  static ATTN_ALWAYS_INLINE T load(const float* p) { return svld1_f32(all(), p); }
  static ATTN_ALWAYS_INLINE void store(float* p, T a) { svst1_f32(all(), p, a); }
  static ATTN_ALWAYS_INLINE T set1(float x) { return svdup_n_f32(x); }
  static ATTN_ALWAYS_INLINE T zero() { return svdup_n_f32(0.0f); }
  // Predicated: inactive lanes are neither read nor written (and read as zero).
  static ATTN_ALWAYS_INLINE T load_partial(const float* p, int n) {
    return svld1_f32(svwhilelt_b32(0, n), p);
  }
  static ATTN_ALWAYS_INLINE void store_partial(float* p, T a, int n) {
    svst1_f32(svwhilelt_b32(0, n), p, a);
  }
  static ATTN_ALWAYS_INLINE float reduce_add(T a) { return svaddv_f32(all(), a); }
  static ATTN_ALWAYS_INLINE void reduce_add4(T a, T b, T c, T d, float* out) {
    out[0] = reduce_add(a), out[1] = reduce_add(b), out[2] = reduce_add(c), out[3] = reduce_add(d);
  }
  static ATTN_ALWAYS_INLINE float reduce_max(T a) { return svmaxv_f32(all(), a); }
  static ATTN_ALWAYS_INLINE T add(T a, T b) { return svadd_f32_x(all(), a, b); }
  static ATTN_ALWAYS_INLINE T sub(T a, T b) { return svsub_f32_x(all(), a, b); }
  static ATTN_ALWAYS_INLINE T mul(T a, T b) { return svmul_f32_x(all(), a, b); }
  // FMAX propagates a NaN in either operand (the interface asks for one in b).
  static ATTN_ALWAYS_INLINE T max(T a, T b) { return svmax_f32_x(all(), a, b); }
  static ATTN_ALWAYS_INLINE T min(T a, T b) { return svmin_f32_x(all(), a, b); }
  static ATTN_ALWAYS_INLINE T div(T a, T b) { return svdiv_f32_x(all(), a, b); }
  static ATTN_ALWAYS_INLINE T abs(T x) { return svabs_f32_x(all(), x); }
  static ATTN_ALWAYS_INLINE T select_lt(T c, T t, T a, T b) {
    return svsel_f32(svcmplt_f32(all(), c, t), a, b);
  }
  static ATTN_ALWAYS_INLINE T round(T x) { return svrintn_f32_x(all(), x); }  // ties to even
  static ATTN_ALWAYS_INLINE T pow2i(T n) {
    const svint32_t e = svadd_n_s32_x(all(), svcvt_s32_f32_x(all(), n), 127);
    return svreinterpret_f32_s32(svlsl_n_s32_x(all(), e, 23));
  }
  static ATTN_ALWAYS_INLINE T fmadd(T a, T b, T c) { return svmla_f32_x(all(), c, a, b); }
  static ATTN_ALWAYS_INLINE T zero_if_neginf(T x) {
    return svsel_f32(svcmpeq_n_f32(all(), x, kNegInfF), svdup_n_f32(0.0f), x);
  }
  static ATTN_ALWAYS_INLINE T mask_rows(T s, const int32_t* i, int32_t lo, int32_t hi) {
    const svint32_t iv = svld1_s32(all(), i);
    const svbool_t out =
        svorr_b_z(all(), svcmplt_n_s32(all(), iv, lo), svcmpgt_n_s32(all(), iv, hi));
    return svsel_f32(out, svdup_n_f32(kNegInfF), s);
  }
  // W x W as log2(W) rounds of a perfect shuffle: row k and row k + W / 2 zip into rows 2k, 2k + 1.
  static ATTN_ALWAYS_INLINE void transpose(T* r) {
    for (int round = 1; round < W; round *= 2) {
      T z[W];
      for (int k = 0; k < W / 2; ++k) {
        z[2 * k] = svzip1_f32(r[k], r[k + W / 2]);
        z[2 * k + 1] = svzip2_f32(r[k], r[k + W / 2]);
      }
      for (int k = 0; k < W; ++k) r[k] = z[k];
    }
  }
  static ATTN_ALWAYS_INLINE U64 mix(U64 z) {
    const svbool_t all64 = svptrue_b64();
    z = svmul_n_u64_x(all64, sveor_u64_x(all64, z, svlsr_n_u64_x(all64, z, 30)), kDropoutMul1);
    z = svmul_n_u64_x(all64, sveor_u64_x(all64, z, svlsr_n_u64_x(all64, z, 27)), kDropoutMul2);
    return sveor_u64_x(all64, z, svlsr_n_u64_x(all64, z, 31));
  }
  static ATTN_ALWAYS_INLINE T dropout(T p, const uint64_t* base, uint64_t add, uint32_t threshold,
                                      float keep_scale) {
    const svbool_t all64 = svptrue_b64();
    const U64 z0 = mix(svadd_n_u64_x(all64, svld1_u64(all64, base), add));
    const U64 z1 = mix(svadd_n_u64_x(all64, svld1_u64(all64, base + W / 2), add));
    // The high halves of the 64-bit lanes are the odd 32-bit ones: z0's lanes, then z1's.
    const svuint32_t r = svuzp2_u32(svreinterpret_u32_u64(z0), svreinterpret_u32_u64(z1));
    const svbool_t keep = svcmpge_n_u32(all(), r, threshold);
    return svsel_f32(keep, svmul_n_f32_x(all(), p, keep_scale), svdup_n_f32(0.0f));
  }
};

#pragma GCC pop_options
#endif  // ATTN_SIMD_SVE

}  // namespace attn::kernels::simd

// Branch-free float exp, tanh, log, sin, cos and erfc that vectorise inside element loops (loops
// built per instruction set with ATTN_ISA_VARIANTS, isa.h, get an AVX-512, an AVX2+FMA and a
// baseline version, the one of active_isa() called).
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

// Before a loop: its iterations carry no dependence through memory that GCC must check for
// (ivdep), so it vectorises without a run-time overlap test. Nothing under clang, which builds
// only the sanitizer checks here (its assume_safety warns where the sanitizers stop
// vectorisation).
#if defined(__GNUC__) && !defined(__clang__)
#define ATTN_IVDEP _Pragma("GCC ivdep")
#else
#define ATTN_IVDEP
#endif

namespace attn::kernels::vmath {

// e^(x - n ln2) for an integer n with |x - n ln2| <= ln2 / 2: r = x - n ln2 with ln2 split in two
// so that n * ln2_hi is exact, then e^r by its Taylor series to r^7 (truncation error below 6e-9).
__attribute__((always_inline)) inline float exp_reduced(float x, float n) {
  float r = x - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  return p;
}

// e^x with a relative error of about 1 ulp for x in [-87, 88]; saturates outside (1e-38 below,
// 2.4e38 above). x = n ln2 + r with |r| <= ln2 / 2, e^r by exp_reduced, scaled by 2^n through
// the exponent bits.
__attribute__((always_inline)) inline float exp(float x) {
  // Ternaries and int arithmetic rather than fmin/floor calls, so that callers vectorise. The
  // comparisons send NaN to -87 so that the int conversion below stays defined: exp(NaN) returns
  // e^-87, not NaN (a final select would stop GCC vectorising the callers). Every caller here
  // also feeds its NaN input through another term (t in erfc_pos), so NaN still propagates to
  // the results; tests check that it does.
  float xc = x > -87.0f ? x : -87.0f;
  xc = xc < 88.0f ? xc : 88.0f;
  const float y = xc * 1.44269504088896341f + 0.5f;
  int32_t ni = int32_t(y);       // truncation toward zero ...
  ni -= int32_t(float(ni) > y);  // ... then floor
  const int32_t bits = (ni + 127) * (1 << 23);
  return exp_reduced(xc, float(ni)) * std::bit_cast<float>(bits);
}

// e^x for x in [-87, 88] only (callers keep other inputs away: they give wrong results), the
// polynomial of exp() with less around it: no clamping, and n = round(x log2 e) by adding and
// subtracting 1.5 * 2^23, the sum's low bits giving 2^n.
__attribute__((always_inline)) inline float exp_in_range(float x) {
  constexpr float kShift = 12582912.0f;  // 1.5 * 2^23: its ulp is 1
  const float t = x * 1.44269504088896341f + kShift;
  const int32_t ni = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kShift);
  return exp_reduced(x, t - kShift) * std::bit_cast<float>((ni + 127) * (1 << 23));
}

// tanh(x) for |x| = a: below 0.55, a + a^3 P(a^2), P of degree 4 fitted (least squares, weighted
// toward the minimax) to the relative error of tanh, 1e-9 on [0, 0.55]; from there on,
// 1 - 2 / (e^{2c} + 1) with c = min(a, 9.5) (the float result is 1 from 9.5 on), whose
// subtraction loses nothing there (the quotient is below a half). Within 2 ulp for every x.
// NaN: c is 9.5 (exp_in_range's integer steps must not see a NaN) and the polynomial, which the
// comparison selects for it, gives NaN. Both forms are computed and one selected: a select
// vectorises (callers build with -fno-trapping-math), one exp and one division an element.
__attribute__((always_inline)) inline float tanh(float x) {
  const float a = std::fabs(x);
  const float c = a < 9.5f ? a : 9.5f;  // NaN: 9.5
  const float t = a * a;
  float p = -6.274239160120487e-3f;
  p = p * t + 2.1071678027510643e-2f;
  p = p * t - 5.385230854153633e-2f;
  p = p * t + 1.3332585990428925e-1f;
  p = p * t - 3.3333316445350647e-1f;
  const float small = a + (a * t) * p;
  const float large = 1.0f - 2.0f / (exp_in_range(2.0f * c) + 1.0f);
  return std::copysign(a >= 0.55f ? large : small, x);  // NaN: small
}

// ln x for positive normal x only (callers keep other inputs away), within 2 ulp: x = m 2^e
// with m in [sqrt(1/2), sqrt(2)), ln m = 2 atanh(s) with s = (m - 1) / (m + 1), |s| < 0.172, by
// its series to s^11 (truncation error below 3e-9 of it), e ln 2 with ln 2 split in two.
__attribute__((always_inline)) inline float log_normal(float x) {
  const int32_t bits = std::bit_cast<int32_t>(x);
  int32_t e = (bits >> 23) - 127;
  float m = std::bit_cast<float>((bits & 0x007fffff) | 0x3f800000);  // [1, 2)
  const int32_t big = int32_t(m > 1.41421356f);
  m = big ? m * 0.5f : m;
  e += big;
  const float s = (m - 1.0f) / (m + 1.0f), z = s * s;
  float p = 1.0f / 11.0f;
  p = p * z + 1.0f / 9.0f;
  p = p * z + 1.0f / 7.0f;
  p = p * z + 1.0f / 5.0f;
  p = p * z + 1.0f / 3.0f;
  const float fe = float(e);
  // 2 s + 2 s z p: the leading term kept apart from the small rest.
  const float rest = fe * -2.12194440e-4f + (2.0f * s) * (z * p);
  return fe * 0.693359375f + (2.0f * s + rest);
}

// sin x and cos x for |x| <= 8192 only (callers keep other inputs away), within 2 ulp of the C
// library's: k = round(x 2 / pi), r = x - k pi / 2 in double with pi / 2 in two parts, the first
// of 33 bits so that its product with k is exact (Cody and Waite): r keeps its float precision
// even where x lies within 1e-7 of a multiple of pi / 2. Then the Taylor series of sin r (to
// r^11) and cos r (to r^12) on |r| <= pi / 4 (a hair more where k's float rounding errs), picked
// and signed by k mod 4.
__attribute__((always_inline)) inline void sincos_reduced(float x, float& r, int32_t& k) {
  constexpr float kShift = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float t = x * 0.636619772f + kShift;
  k = std::bit_cast<int32_t>(t) - std::bit_cast<int32_t>(kShift);
  const double kd = double(t - kShift);
  r = float((double(x) - kd * 1.5707963267341256) - kd * 6.077100506506192e-11);
}
__attribute__((always_inline)) inline float sin_poly(float r) {
  const float z = r * r;
  float p = -1.0f / 39916800.0f;
  p = p * z + 1.0f / 362880.0f;
  p = p * z - 1.0f / 5040.0f;
  p = p * z + 1.0f / 120.0f;
  p = p * z - 1.0f / 6.0f;
  return r + r * z * p;
}
__attribute__((always_inline)) inline float cos_poly(float r) {
  const float z = r * r;
  float p = 1.0f / 479001600.0f;
  p = p * z - 1.0f / 3628800.0f;
  p = p * z + 1.0f / 40320.0f;
  p = p * z - 1.0f / 720.0f;
  p = p * z + 1.0f / 24.0f;
  return 1.0f - 0.5f * z + z * z * p;
}
// sin: k mod 4 = 0, 1, 2, 3 give sin r, cos r, -sin r, -cos r; cos: cos r, -sin r, -cos r, sin r.
// Selects (not arithmetic blends) keep the sign of a zero: sin(-0) is -0.
__attribute__((always_inline)) inline float sin_small(float x) {
  float r;
  int32_t k;
  sincos_reduced(x, r, k);
  const float v = (k & 1) ? cos_poly(r) : sin_poly(r);
  return (k & 2) ? -v : v;
}
__attribute__((always_inline)) inline float cos_small(float x) {
  float r;
  int32_t k;
  sincos_reduced(x, r, k);
  const float v = (k & 1) ? sin_poly(r) : cos_poly(r);
  return ((k + 1) & 2) ? -v : v;
}

// erfc(z) for z >= 0 with a relative error below about 2e-7: the Chebyshev-fitted form
// t exp(-z^2 + P(t)), t = 1 / (1 + z / 2) (Numerical Recipes, section 6.2).
__attribute__((always_inline)) inline float erfc_pos(float z) {
  const float t = 1.0f / (1.0f + 0.5f * z);
  float p = 0.17087277f;
  p = p * t - 0.82215223f;
  p = p * t + 1.48851587f;
  p = p * t - 1.13520398f;
  p = p * t + 0.27886807f;
  p = p * t - 0.18628806f;
  p = p * t + 0.09678418f;
  p = p * t + 0.37409196f;
  p = p * t + 1.00002368f;
  p = p * t - 1.26551223f;
  return t * exp(-z * z + p);
}

}  // namespace attn::kernels::vmath

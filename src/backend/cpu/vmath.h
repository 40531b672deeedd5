// Branch-free float exp, tanh and erfc that vectorise inside element loops (loops built per
// instruction set with ATTN_ISA_VARIANTS, isa.h, get an AVX-512, an AVX2+FMA and a baseline
// version, the one of active_isa() called).
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

// e^x with a relative error of about 1 ulp for x in [-87, 88]; saturates outside (1e-38 below,
// 2.4e38 above). x = n ln2 + r with |r| <= ln2 / 2, e^r by its Taylor series to r^7 (truncation
// error below 6e-9), scaled by 2^n through the exponent bits.
__attribute__((always_inline)) inline float exp(float x) {
  // Ternaries and int arithmetic rather than fmin/floor calls, so that callers vectorise. The
  // comparisons send NaN to -87 so that the int conversion below stays defined: exp(NaN) returns
  // e^-87, not NaN (a final select would stop GCC vectorising the callers). Every caller here
  // also feeds its NaN input through another term (t in erfc_pos, the Taylor branch in tanh), so
  // NaN still propagates to the results; tests check that it does.
  float xc = x > -87.0f ? x : -87.0f;
  xc = xc < 88.0f ? xc : 88.0f;
  const float y = xc * 1.44269504088896341f + 0.5f;
  int32_t ni = int32_t(y);       // truncation toward zero ...
  ni -= int32_t(float(ni) > y);  // ... then floor
  const float n = float(ni);
  // ln2 split in two so that n * ln2_hi is exact.
  float r = xc - n * 0.693359375f;
  r = r + n * 2.12194440e-4f;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const int32_t bits = (ni + 127) * (1 << 23);
  return p * std::bit_cast<float>(bits);
}

// tanh(x): 1 - 2 / (e^{2|x|} + 1) with the sign of x, and near 0 (|x| < 1/16, where that form
// cancels) its Taylor series to x^7. Error within a few ulp. The two are blended arithmetically:
// GCC does not vectorise a select between them.
__attribute__((always_inline)) inline float tanh(float x) {
  const float a = std::fabs(x);
  const float big = 1.0f - 2.0f / (exp(2.0f * a) + 1.0f);
  const float a2 = a * a;
  const float small = a + a * a2 * (-1.0f / 3.0f + a2 * (2.0f / 15.0f + a2 * (-17.0f / 315.0f)));
  const float m = float(a < 0.0625f);
  return std::copysign(m * small + (1.0f - m) * big, x);
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

// The two 2-byte float types, bfloat16 and float16 (IEEE binary16), and their conversions to and
// from float32, bit for bit as PyTorch converts them on the CPU:
//   * float32 -> bfloat16 keeps the top 16 bits, rounded to nearest even; NaN stays NaN (a quiet
//     NaN of the same sign: 0x7FC0 or 0xFFC0; PyTorch 1.13 writes 0x7FC0 or 0xFFFF, depending on
//     the code path, which are NaNs too).
//   * float32 -> float16 rounds to nearest even, into float16's subnormals below 2^-14, to
//     infinity from 65520 up; NaN becomes a quiet NaN of the same sign (0x7E00 | sign).
//   * back to float32 is exact (bfloat16's bits shifted up; float16's value, a float16 NaN becoming
//     a quiet float32 NaN with its payload).
// Plain scalar code: the compiler vectorises the loops that call it.
#pragma once

#include <bit>
#include <cstdint>

namespace attn {

inline float bf16_bits_to_float(uint16_t bits) {
  return std::bit_cast<float>(uint32_t(bits) << 16);
}

inline uint16_t float_to_bf16_bits(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return uint16_t((u >> 16) | 0x7FC0u);  // NaN, sign kept
  // Round to nearest even: add 0x7FFF plus the lowest kept bit, then truncate. Overflow of the
  // exponent gives infinity, as it should.
  return uint16_t((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16);
}

inline float fp16_bits_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1Fu;
  uint32_t mant = h & 0x3FFu;
  if (exp == 0x1F)  // infinity, or NaN (made quiet, payload kept)
    return std::bit_cast<float>(sign | 0x7F800000u | (mant << 13) | (mant ? 0x400000u : 0u));
  if (exp != 0) return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
  if (mant == 0) return std::bit_cast<float>(sign);  // +-0
  // A subnormal, mant * 2^-24: normalise it into float32's exponent range.
  uint32_t e = 113;  // float32's biased exponent of 2^-14
  while (!(mant & 0x400u)) {
    mant <<= 1;
    --e;
  }
  return std::bit_cast<float>(sign | (e << 23) | ((mant & 0x3FFu) << 13));
}

inline uint16_t float_to_fp16_bits(float f) {
  const uint32_t u = std::bit_cast<uint32_t>(f);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const uint32_t a = u & 0x7FFFFFFFu;
  if (a > 0x7F800000u) return uint16_t(sign | 0x7E00u);   // NaN
  if (a >= 0x47800000u) return uint16_t(sign | 0x7C00u);  // >= 2^16 (and infinity): infinity
  const uint32_t e = a >> 23;                             // float32's biased exponent
  if (a >= 0x38800000u) {                                 // >= 2^-14: a normal float16
    uint32_t h = ((e - 112u) << 10) | ((a >> 13) & 0x3FFu);
    const uint32_t rest = a & 0x1FFFu;                         // the 13 bits dropped
    if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;  // a carry may reach infinity
    return uint16_t(sign | h);
  }
  // Below 2^-14: a multiple of 2^-24 (a subnormal, or 0, or the smallest normal after rounding).
  // The value is m * 2^(e - 150) with the implicit bit in m; in units of 2^-24 that is m >> s.
  if (e < 102) return uint16_t(sign);  // below 2^-25 (float32 subnormals too): rounds to zero
  const uint32_t m = (a & 0x7FFFFFu) | 0x800000u;
  const uint32_t s = 126u - e;  // 14..24
  uint32_t q = m >> s;
  const uint32_t rest = m & ((1u << s) - 1u), half = 1u << (s - 1u);
  if (rest > half || (rest == half && (q & 1u))) ++q;
  return uint16_t(sign | q);
}

// Storage types of the two dtypes (Dtype::BFloat16, Dtype::Float16): two bytes, converted to and
// from float explicitly. attn computes in float32; these only hold values.
struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float f) : bits(float_to_bf16_bits(f)) {}
  static BFloat16 from_bits(uint16_t b) {
    BFloat16 x;
    x.bits = b;
    return x;
  }
  explicit operator float() const { return bf16_bits_to_float(bits); }
};

struct Half {
  uint16_t bits = 0;
  Half() = default;
  explicit Half(float f) : bits(float_to_fp16_bits(f)) {}
  static Half from_bits(uint16_t b) {
    Half x;
    x.bits = b;
    return x;
  }
  explicit operator float() const { return fp16_bits_to_float(bits); }
};

static_assert(sizeof(BFloat16) == 2 && sizeof(Half) == 2);

}  // namespace attn

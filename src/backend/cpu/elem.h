// Elements of the CPU kernels written once for float32, bfloat16 and float16: E is the stored
// element (float, or the 2-byte types' bits, uint16_t) and kKind says which (0 float32,
// 1 bfloat16, 2 float16). Reading widens exactly; writing rounds once, as include/attn/half.h.
#pragma once

#include <attn/half.h>

#include <cstdint>
#include <type_traits>

namespace attn::kernels {

template <int kKind, typename E>
inline float load_elem(E v) {
  static_assert((kKind == 0) == std::is_same_v<E, float> &&
                (kKind == 0 || kKind == 1 || kKind == 2));
  if constexpr (kKind == 0)
    return v;
  else if constexpr (kKind == 1)
    return bf16_bits_to_float(v);
  else
    return fp16_bits_to_float(v);
}

template <int kKind, typename E>
inline E store_elem(float f) {
  static_assert((kKind == 0) == std::is_same_v<E, float> &&
                (kKind == 0 || kKind == 1 || kKind == 2));
  if constexpr (kKind == 0)
    return f;
  else if constexpr (kKind == 1)
    return float_to_bf16_bits(f);
  else
    return float_to_fp16_bits(f);
}

// f rounded to the element type and widened back (float32: f itself).
template <int kKind>
inline float round_elem(float f) {
  if constexpr (kKind == 0)
    return f;
  else
    return load_elem<kKind>(store_elem<kKind, uint16_t>(f));
}

}  // namespace attn::kernels

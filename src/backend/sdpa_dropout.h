// The counter-based dropout mask of attention, shared by every kernel (the reference, the fused
// CPU kernels and the CUDA kernels, host and device code): a seed gives the same dropped weights
// on every backend.
//
// The keep decision for weight number `index` (((b * H + h) * L_q + i) * L_k + j, see
// SdpaGeometry in sdpa_params.h) is a pure function of (seed, offset, index): the
// (offset + index)-th output of SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom
// number generators", OOPSLA 2014) seeded with `seed`:
//   state = seed + (offset + index + 1) * gamma          (mod 2^64)
//   bits  = dropout_mix(state)                           (SplitMix64's output function)
//   keep  = (bits >> 32) >= dropout_threshold(p)         (probability 1 - p, to within 2^-32)
// A kernel therefore regenerates any part of the mask in any order (the backward pass, any tile,
// any thread) without storing it. Kernels may add j * gamma to a row's state to step along a row.
#pragma once

#include <cstdint>

#include "sdpa_params.h"  // ATTN_HOST_DEVICE_INLINE

namespace attn::kernels {

inline constexpr uint64_t kDropoutGamma = 0x9E3779B97F4A7C15ull;
inline constexpr uint64_t kDropoutMul1 = 0xBF58476D1CE4E5B9ull;
inline constexpr uint64_t kDropoutMul2 = 0x94D049BB133111EBull;

ATTN_HOST_DEVICE_INLINE uint64_t dropout_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * kDropoutMul1;
  z = (z ^ (z >> 27)) * kDropoutMul2;
  return z ^ (z >> 31);
}
ATTN_HOST_DEVICE_INLINE uint64_t dropout_state(uint64_t seed, uint64_t offset, uint64_t index) {
  return seed + (offset + index + 1) * kDropoutGamma;
}
// floor(p * 2^32) for p in [0, 1): a 32-bit draw below it means "drop".
ATTN_HOST_DEVICE_INLINE uint32_t dropout_threshold(double p) { return uint32_t(p * 4294967296.0); }

// Bernoulli(1 - p) keep decision for one attention weight (see above); identical in every kernel.
ATTN_HOST_DEVICE_INLINE bool dropout_keep(uint64_t seed, uint64_t offset, uint64_t index,
                                          double p) {
  return uint32_t(dropout_mix(dropout_state(seed, offset, index)) >> 32) >= dropout_threshold(p);
}
// The factor a kept weight is multiplied by: 1 / (1 - p), rounded to float.
ATTN_HOST_DEVICE_INLINE float dropout_keep_scale(double p) { return float(1.0 / (1.0 - p)); }

}  // namespace attn::kernels

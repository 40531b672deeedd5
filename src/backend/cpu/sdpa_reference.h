// The naive reference attention kernel: raw pointers, explicit strides, no Tensor in sight.
//
// It defines what attention means in attn. Every faster kernel must agree with it, and the tests
// run both on the same cases. It is deliberately simple: for one query row at a time it
// materialises the (L_k) score row, takes a max-subtracted softmax of it, and forms the weighted
// sum of value rows, all in double precision.
//
// Dimension names (as in include/attn/attention.h), outermost first:
//   B    batch                 H    query heads          H_kv  key/value heads (H % H_kv == 0)
//   L_q  query length          L_k  key/value length
//   D    query/key head dim    D_v  value head dim
//
// For batch b, query head h, query row i (key/value head h_kv = h / (H / H_kv)):
//
//   s[j]   = scale * sum_d q[b, h, i, d] * k[b, h_kv, j, d]          j in [0, L_k)
//          + mask[b, h, i, j]              (float mask)
//          = -inf  where the bool mask is false, where key_padding[b, j] is set, or where
//                  causal masking or the sliding window hides key j (see below)
//   m      = max_j s[j]
//   p[j]   = exp(s[j] - m) / sum_j' exp(s[j'] - m)                   (the attention weights)
//   p[j]  *= dropout_scale[b, h, i, j]     (when given: 0 or 1 / (1 - p_drop))
//          or, when dropout_p > 0 without dropout_scale, the counter-based mask:
//   p[j]  *= dropout_keep(seed, offset, ((b * H + h) * L_q + i) * L_k + j, p_drop)
//            ? 1 / (1 - p_drop) : 0
//   out[b, h, i, e] = sum_j p[j] * v[b, h_kv, j, e]                  e in [0, D_v)
//   lse[b, h, i]    = m + log(sum_j exp(s[j] - m))   (before dropout; for a backward pass)
//
// Subtracting the row max m makes the softmax exact for huge scores (the step-by-step multi-head
// tutorial, `attn walkthrough 001`, has -318 before scaling): every exponent is <= 0, and the
// largest is exactly 1.
//
// A key whose weight is exactly zero (masked, or dropped by dropout) contributes nothing, even if
// its value row holds inf or NaN (PyTorch's math backend would form 0 * inf = NaN).
//
// A row in which every key is masked (m == -inf) has no well-defined softmax. PyTorch's math
// backend returns NaN there; attn returns a zero output row, zero weights and lse = -inf, so a
// padded or causally empty row never poisons the rest of a computation.
//
// Causal masking, for L_q != L_k:
//   top-left      (PyTorch's is_causal): key j is visible to query i iff j <= i
//   bottom-right  (decoding with a cache): key j is visible to query i iff j <= i + (L_k - L_q)
// With bottom-right alignment and L_q > L_k the first L_q - L_k rows see no key at all (zeros).
// The sliding window uses the same alignment: with off = L_k - L_q (bottom-right) or 0, key j is
// visible to query i iff i + off - window_left <= j <= i + off + window_right, a side being
// unbounded when its window is -1; causal masking is window_right = 0 (the smaller one wins).
//
// Strides are in elements. The innermost dimension of q, k, v and out must be contiguous (stride
// 1), as in FlashAttention's Qkv_params; any other stride may be 0 (a broadcast dimension) or
// arbitrary, so (B, H, L, D) and (B, L, H, D) layouts need no copies.
#pragma once

#include <cstdint>

namespace attn::kernels {

enum class MaskKind {
  None,   // no mask
  Bool,   // one byte per element: non-zero means "may attend", zero means "masked"
  Float,  // float32 added to the scaled scores (-inf masks)
};

// What every attention kernel (this one, the fused CPU kernels, the CUDA kernels) is given besides
// the element pointers of q, k, v and out, whose types differ by backend: strides, sizes, how the
// scores are formed and masked, and dropout.
struct SdpaGeometry {
  // ---- strides ----------------------------------------------------------------------------------
  // of q (B, H, L_q, D), k (B, H_kv, L_k, D), v (B, H_kv, L_k, D_v) and out (B, H, L_q, D_v)
  int64_t q_batch_stride = 0, q_head_stride = 0, q_row_stride = 0;
  int64_t k_batch_stride = 0, k_head_stride = 0, k_row_stride = 0;
  int64_t v_batch_stride = 0, v_head_stride = 0, v_row_stride = 0;
  int64_t out_batch_stride = 0, out_head_stride = 0, out_row_stride = 0;

  // ---- sizes ------------------------------------------------------------------------------------
  int64_t B = 1, H = 1, H_kv = 1, L_q = 0, L_k = 0, D = 0, D_v = 0;

  // ---- scores -----------------------------------------------------------------------------------
  double scale = 1.0;                // multiplies q . k (typically 1 / sqrt(D))
  bool causal = false;               // hide keys "in the future" of each query
  bool causal_bottom_right = false;  // alignment of the causal diagonal (see above)

  // Optional mask (B, H, L_q, L_k) given by its four strides; broadcast dims have stride 0.
  // Bool: one byte per element; Float: additive, in the kernel's element type (float32 here).
  MaskKind mask_kind = MaskKind::None;
  const void* mask = nullptr;
  int64_t mask_batch_stride = 0, mask_head_stride = 0, mask_row_stride = 0, mask_col_stride = 0;

  // ---- sliding window ---------------------------------------------------------------------------
  // With off = causal_bottom_right ? L_k - L_q : 0, key j is visible to query i only if
  //   j >= i + off - window_left  (when window_left >= 0)   and   j <= i + off + window_right
  //   (when window_right >= 0). -1 means unbounded on that side. causal is window_right = 0.
  int64_t window_left = -1, window_right = -1;

  // ---- key padding ------------------------------------------------------------------------------
  // Optional (B, L_k) bytes: non-zero means "this key is padding, never attend to it" (PyTorch's
  // key_padding_mask convention). Row stride in elements; column stride 1.
  const uint8_t* key_padding = nullptr;
  int64_t key_padding_batch_stride = 0;

  // ---- counter-based dropout (used when SdpaParams::dropout_scale is null) ----------------------
  // Weight (b, h, i, j) is kept iff dropout_keep(dropout_seed, dropout_offset, flat index) with
  // flat index ((b * H + h) * L_q + i) * L_k + j; kept weights are scaled by 1 / (1 - p). The mask
  // is a pure function of its coordinates, so a backward pass regenerates it instead of storing
  // it.
  double dropout_p = 0.0;
  uint64_t dropout_seed = 0, dropout_offset = 0;
};

// The CPU kernels' parameters: the geometry and float32 tensors.
struct SdpaParams : SdpaGeometry {
  const float* q = nullptr;  // (B, H,    L_q, D)
  const float* k = nullptr;  // (B, H_kv, L_k, D)
  const float* v = nullptr;  // (B, H_kv, L_k, D_v)
  float* out = nullptr;      // (B, H, L_q, D_v)

  // Optional dropout factors, contiguous (B, H, L_q, L_k): each weight p[j] is multiplied by
  // its factor before the weighted sum of values (torch's dropout on the materialised weights).
  const float* dropout_scale = nullptr;

  // ---- optional extra outputs -------------------------------------------------------------------
  float* weights = nullptr;  // contiguous (B, H, L_q, L_k): the weights after dropout
  float* lse = nullptr;      // contiguous (B, H, L_q): log-sum-exp of each score row
};

// The strides of dout (B, H, L_q, D_v), dq (B, H, L_q, D), dk (B, H_kv, L_k, D) and dv
// (B, H_kv, L_k, D_v), as those of q, k, v: what the CPU and CUDA backward passes share.
struct SdpaGradStrides {
  int64_t dout_batch_stride = 0, dout_head_stride = 0, dout_row_stride = 0;
  int64_t dq_batch_stride = 0, dq_head_stride = 0, dq_row_stride = 0;
  int64_t dk_batch_stride = 0, dk_head_stride = 0, dk_row_stride = 0;
  int64_t dv_batch_stride = 0, dv_head_stride = 0, dv_row_stride = 0;
};

// The gradient pass. "In the forward pass this was out = softmax(scale * q k^T + mask) v with
// lse the per-row log-sum-exp": given dout it produces dq, dk, dv (same layouts and strides
// conventions as q, k, v). With H_kv < H, dk and dv sum over the query heads of each group.
struct SdpaBackwardParams : SdpaGradStrides {
  SdpaParams fwd;  // the forward's parameters; fwd.out and fwd.lse must be set
  const float* dout = nullptr;
  float* dq = nullptr;
  float* dk = nullptr;
  float* dv = nullptr;
};

// ---- counter-based dropout ----------------------------------------------------------------------
// The keep decision for weight number `index` is a pure function of (seed, offset, index): the
// (offset + index)-th output of SplitMix64 (Steele, Lea and Flood, "Fast splittable pseudorandom
// number generators", OOPSLA 2014) seeded with `seed`:
//   state = seed + (offset + index + 1) * gamma          (mod 2^64)
//   bits  = dropout_mix(state)                           (SplitMix64's output function)
//   keep  = (bits >> 32) >= dropout_threshold(p)         (probability 1 - p, to within 2^-32)
// A kernel therefore regenerates any part of the mask in any order (the backward pass, any tile,
// any thread) without storing it. Kernels may add j * gamma to a row's state to step along a row.
inline constexpr uint64_t kDropoutGamma = 0x9E3779B97F4A7C15ull;
inline constexpr uint64_t kDropoutMul1 = 0xBF58476D1CE4E5B9ull;
inline constexpr uint64_t kDropoutMul2 = 0x94D049BB133111EBull;

inline uint64_t dropout_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * kDropoutMul1;
  z = (z ^ (z >> 27)) * kDropoutMul2;
  return z ^ (z >> 31);
}
inline uint64_t dropout_state(uint64_t seed, uint64_t offset, uint64_t index) {
  return seed + (offset + index + 1) * kDropoutGamma;
}
// floor(p * 2^32) for p in [0, 1): a 32-bit draw below it means "drop".
inline uint32_t dropout_threshold(double p) { return uint32_t(p * 4294967296.0); }

// Bernoulli(1 - p) keep decision for one attention weight (see above); identical in every kernel.
inline bool dropout_keep(uint64_t seed, uint64_t offset, uint64_t index, double p) {
  return uint32_t(dropout_mix(dropout_state(seed, offset, index)) >> 32) >= dropout_threshold(p);
}
// The factor a kept weight is multiplied by: 1 / (1 - p), rounded to float.
inline float dropout_keep_scale(double p) { return float(1.0 / (1.0 - p)); }

// Computes attention as described above. Rows (b, h, i) are independent and are processed in
// parallel with OpenMP; the result does not depend on the number of threads. The caller
// validates the parameters (the kernel only asserts them).
void sdpa_reference_forward(const SdpaParams& params);

// The naive gradient: recomputes each score row, materialises it, and forms dq, dk, dv.
void sdpa_reference_backward(const SdpaBackwardParams& params);

}  // namespace attn::kernels

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
//            then the score modifiers of sdpa_params.h (softcap, ALiBi, relative bias:
//            modified_score below)
//          + mask[b, h, i, j]              (float mask)
//          = -inf  where the bool mask is false, where key_padding[b, j] is set, or where
//                  causal masking or the sliding window hides key j (see below)
//   m      = max_j s[j]
//   p[j]   = exp(s[j] - m) / sum_j' exp(s[j'] - m)                   (the attention weights;
//            with sinks, exp(sinks[h] - m) joins the sum and m is at least sinks[h])
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
// Causal masking and the sliding window hide keys j of query i by SdpaBand's rule (sdpa_params.h,
// shared by every kernel): with bottom-right alignment and L_q > L_k the first L_q - L_k rows see
// no key at all (zeros).
//
// The parameters (sizes, strides, mask, window, key padding, dropout) are SdpaGeometry and
// SdpaGradStrides (sdpa_params.h), which the CUDA kernels share; the counter-based dropout mask is
// sdpa_dropout.h's. Strides are in elements; the innermost dimension of q, k, v, out and their
// gradients is contiguous.
#pragma once

#include <cmath>
#include <cstdint>

#include "../sdpa_dropout.h"
#include "../sdpa_params.h"

namespace attn::kernels {

namespace flex {
struct FlexCall;
}

// The CPU kernels' parameters: the geometry (sdpa_params.h) and float32 tensors.
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
  // The fused forward only: contiguous (B, H, L_q), each row's largest score after the modifiers
  // and masks (-inf when every key is masked; a sink's logit counts as a score), or null.
  float* row_max = nullptr;

  // The fused forward only (split-K decoding, sdpa_fused.cpp): the keys [key_lo, key_hi) that
  // this call covers, on top of every other rule; the results are then those of attention over
  // these keys alone.
  int64_t key_lo = 0, key_hi = INT64_MAX;

  // flex_attention's traced score_mod, mask_mod and block mask (flex_eval.h): the fused kernels
  // only (forward and backward). The built-in modifiers, masks, the band and dropout are then
  // unused.
  const ::attn::kernels::flex::FlexCall* flex = nullptr;
};

// The gradient pass. "In the forward pass this was out = softmax(scale * q k^T + mask) v with
// lse the per-row log-sum-exp": given dout it produces dq, dk, dv (same layouts and strides
// conventions as q, k, v). With H_kv < H, dk and dv sum over the query heads of each group.
struct SdpaBackwardParams : SdpaGradStrides, SdpaModGrads {
  SdpaParams fwd;  // the forward's parameters; fwd.out and fwd.lse must be set
  const float* dout = nullptr;
  float* dq = nullptr;
  float* dk = nullptr;
  float* dv = nullptr;
};

// The score of key j for query row (b, h, i) after the score modifiers (sdpa_params.h: softcap,
// ALiBi, the relative-position bias), from s = scale * q . k, in double precision; `t`, when not
// null, receives tanh(s / softcap) (0 without softcap), for the backward pass.
inline double modified_score(const SdpaGeometry& p, int64_t b, int64_t h, int64_t i, int64_t j,
                             double s, double* t = nullptr) {
  if (p.softcap > 0.0) {
    const double th = std::tanh(s / p.softcap);
    s = p.softcap * th;
    if (t) *t = th;
  } else if (t) {
    *t = 0.0;
  }
  const int64_t off = sdpa_band(p).diagonal_offset;
  if (p.alibi_slopes) {
    const int64_t dist = i + off - j;
    s -= double(p.alibi_slopes[b * p.alibi_batch_stride + h]) * double(dist < 0 ? -dist : dist);
  }
  if (p.rel_bias)
    s += double(p.rel_bias[h * p.rel_bias_head_stride +
                           rel_bias_column(j - i - off, p.rel_bias_max_distance)]);
  return s;
}

// Computes attention as described above. Rows (b, h, i) are independent and are processed in
// parallel with OpenMP; the result does not depend on the number of threads. The caller
// validates the parameters (the kernel only asserts them).
void sdpa_reference_forward(const SdpaParams& params);

// The naive gradient: recomputes each score row, materialises it, and forms dq, dk, dv.
void sdpa_reference_backward(const SdpaBackwardParams& params);

}  // namespace attn::kernels

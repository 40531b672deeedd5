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
//          = -inf  where the bool mask is false, or where causal masking hides key j
//   m      = max_j s[j]
//   p[j]   = exp(s[j] - m) / sum_j' exp(s[j'] - m)                   (the attention weights)
//   p[j]  *= dropout_scale[b, h, i, j]     (when given: 0 or 1 / (1 - p_drop))
//   out[b, h, i, e] = sum_j p[j] * v[b, h_kv, j, e]                  e in [0, D_v)
//   lse[b, h, i]    = m + log(sum_j exp(s[j] - m))                    (for a backward pass)
//
// Subtracting the row max m makes the softmax exact for huge scores (seed 001 has -318 before
// scaling): every exponent is <= 0, and the largest is exactly 1.
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

struct SdpaParams {
  // ---- inputs -----------------------------------------------------------------------------------
  const float* q = nullptr;  // (B, H,    L_q, D)
  const float* k = nullptr;  // (B, H_kv, L_k, D)
  const float* v = nullptr;  // (B, H_kv, L_k, D_v)
  int64_t q_batch_stride = 0, q_head_stride = 0, q_row_stride = 0;
  int64_t k_batch_stride = 0, k_head_stride = 0, k_row_stride = 0;
  int64_t v_batch_stride = 0, v_head_stride = 0, v_row_stride = 0;

  // ---- output -----------------------------------------------------------------------------------
  float* out = nullptr;  // (B, H, L_q, D_v)
  int64_t out_batch_stride = 0, out_head_stride = 0, out_row_stride = 0;

  // ---- sizes ------------------------------------------------------------------------------------
  int64_t B = 1, H = 1, H_kv = 1, L_q = 0, L_k = 0, D = 0, D_v = 0;

  // ---- scores -----------------------------------------------------------------------------------
  double scale = 1.0;                // multiplies q . k (typically 1 / sqrt(D))
  bool causal = false;               // hide keys "in the future" of each query
  bool causal_bottom_right = false;  // alignment of the causal diagonal (see above)

  // Optional mask (B, H, L_q, L_k) given by its four strides; broadcast dims have stride 0.
  MaskKind mask_kind = MaskKind::None;
  const void* mask = nullptr;  // const bool* / uint8_t* for Bool, const float* for Float
  int64_t mask_batch_stride = 0, mask_head_stride = 0, mask_row_stride = 0, mask_col_stride = 0;

  // Optional dropout factors, contiguous (B, H, L_q, L_k): each weight p[j] is multiplied by
  // its factor before the weighted sum of values (torch's dropout on the materialised weights).
  const float* dropout_scale = nullptr;

  // ---- optional extra outputs -------------------------------------------------------------------
  float* weights = nullptr;  // contiguous (B, H, L_q, L_k): the weights after dropout
  float* lse = nullptr;      // contiguous (B, H, L_q): log-sum-exp of each score row
};

// Computes attention as described above. Rows (b, h, i) are independent and are processed in
// parallel with OpenMP; the result does not depend on the number of threads. The caller
// validates the parameters (the kernel only asserts them).
void sdpa_reference_forward(const SdpaParams& params);

}  // namespace attn::kernels

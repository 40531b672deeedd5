// The parameters of attention shared by every kernel: the reference (cpu/sdpa_reference.h), the
// fused CPU kernels (cpu/sdpa_fused.h, cpu/sdpa_fused_backward.h) and the CUDA kernels
// (cuda/sdpa_cuda.h, whose device-side parameter block in cuda/sdpa_cuda_common.cuh uses the same
// field names). What attention computes with them is defined in cpu/sdpa_reference.h.
//
// Plain structs and constexpr functions on <cstdint> only, nothing CPU- or CUDA-specific, so that
// host C++ and nvcc (host and device code) compile the same definitions.
//
// Dimension names (as in include/attn/attention.h), outermost first:
//   B    batch                 H    query heads          H_kv  key/value heads (H % H_kv == 0)
//   L_q  query length          L_k  key/value length
//   D    query/key head dim    D_v  value head dim
//
// Strides are in elements. The innermost dimension of q, k, v, out and of their gradients must be
// contiguous (stride 1), as in FlashAttention's Qkv_params; any other stride may be 0 (a broadcast
// dimension) or arbitrary, so (B, H, L, D) and (B, L, H, D) layouts need no copies.
#pragma once

#include <cstdint>

// Marks an inline function that CUDA device code calls too: forced inline on both sides under
// nvcc (as the kernels' own helpers are), a plain inline function elsewhere.
#if defined(__CUDACC__)
#define ATTN_HOST_DEVICE_INLINE __host__ __device__ __forceinline__
#else
#define ATTN_HOST_DEVICE_INLINE inline
#endif

namespace attn::kernels {

enum class MaskKind : int {
  None = 0,   // no mask
  Bool = 1,   // one byte per element: non-zero means "may attend", zero means "masked"
  Float = 2,  // additive, in the kernel's element type, added to the scaled scores (-inf masks)
};

// The strides of q (B, H, L_q, D), k (B, H_kv, L_k, D), v (B, H_kv, L_k, D_v) and
// out (B, H, L_q, D_v).
struct SdpaStrides {
  int64_t q_batch_stride = 0, q_head_stride = 0, q_row_stride = 0;
  int64_t k_batch_stride = 0, k_head_stride = 0, k_row_stride = 0;
  int64_t v_batch_stride = 0, v_head_stride = 0, v_row_stride = 0;
  int64_t out_batch_stride = 0, out_head_stride = 0, out_row_stride = 0;
};

// What every attention kernel is given besides the element pointers of q, k, v and out, whose
// types differ by backend: strides, sizes, how the scores are formed and masked, and dropout.
struct SdpaGeometry : SdpaStrides {
  // ---- sizes ------------------------------------------------------------------------------------
  int64_t B = 1, H = 1, H_kv = 1, L_q = 0, L_k = 0, D = 0, D_v = 0;

  // ---- scores -----------------------------------------------------------------------------------
  double scale = 1.0;                // multiplies q . k (typically 1 / sqrt(D))
  bool causal = false;               // hide keys "in the future" of each query (see SdpaBand)
  bool causal_bottom_right = false;  // alignment of the causal diagonal (see SdpaBand)

  // Optional mask (B, H, L_q, L_k) given by its four strides; broadcast dims have stride 0.
  // Bool: one byte per element; Float: additive, in the kernel's element type.
  MaskKind mask_kind = MaskKind::None;
  const void* mask = nullptr;
  int64_t mask_batch_stride = 0, mask_head_stride = 0, mask_row_stride = 0, mask_col_stride = 0;

  // ---- sliding window ---------------------------------------------------------------------------
  // Keys visible to each query on either side of the (causal) diagonal; -1 means unbounded on
  // that side. The rule, with causal masking folded in, is SdpaBand's (below).
  int64_t window_left = -1, window_right = -1;

  // ---- key padding ------------------------------------------------------------------------------
  // Optional (B, L_k) bytes: non-zero means "this key is padding, never attend to it" (PyTorch's
  // key_padding_mask convention). Row stride in elements; column stride 1.
  const uint8_t* key_padding = nullptr;
  int64_t key_padding_batch_stride = 0;

  // ---- score modifiers: applied in this order to s = scale * q . k, before the masks ------------
  // Softcap (Gemma 2, Grok; FlashAttention's softcap), when > 0: s = softcap * tanh(s / softcap).
  double softcap = 0.0;
  // ALiBi (Press et al., 2022; FlashAttention's alibi_slopes): s -= slope * |i + off - j|, with
  // off = SdpaBand::diagonal_offset and slope = alibi_slopes[b * alibi_batch_stride + h].
  const float* alibi_slopes = nullptr;
  int64_t alibi_batch_stride = 0;
  // A relative-position bias table (T5 and Shaw et al. style, one entry per clipped distance):
  // s += rel_bias[h * rel_bias_head_stride + rel_bias_column(j - i - off, rel_bias_max_distance)],
  // the table holding 2 R + 1 entries per head (R = rel_bias_max_distance).
  const float* rel_bias = nullptr;
  int64_t rel_bias_head_stride = 0, rel_bias_max_distance = 0;
  // Attention sinks (StreamingLLM; gpt-oss's learned per-head logits): sinks[h] joins every row's
  // softmax as one more score whose value row is zero, so the weights of the real keys sum to
  // less than 1: p_j = exp(s_j) / (exp(sinks[h]) + sum_j' exp(s_j')). lse includes it, and a row
  // whose keys are all masked gives zeros with lse = sinks[h].
  const float* sinks = nullptr;

  bool has_score_mods() const { return softcap > 0.0 || alibi_slopes || rel_bias || sinks; }

  // ---- counter-based dropout (sdpa_dropout.h) ---------------------------------------------------
  // Weight (b, h, i, j) is kept iff dropout_keep(dropout_seed, dropout_offset, flat index) with
  // flat index ((b * H + h) * L_q + i) * L_k + j; kept weights are scaled by 1 / (1 - p). The mask
  // is a pure function of its coordinates, so a backward pass regenerates it instead of storing
  // it. (The CPU kernels may instead be given the factors themselves, SdpaParams::dropout_scale.)
  double dropout_p = 0.0;
  uint64_t dropout_seed = 0, dropout_offset = 0;
};

// The strides of dout (B, H, L_q, D_v), dq (B, H, L_q, D), dk (B, H_kv, L_k, D) and dv
// (B, H_kv, L_k, D_v), as those of q, k, v: what the CPU and CUDA backward passes share.
struct SdpaGradStrides {
  int64_t dout_batch_stride = 0, dout_head_stride = 0, dout_row_stride = 0;
  int64_t dq_batch_stride = 0, dq_head_stride = 0, dq_row_stride = 0;
  int64_t dk_batch_stride = 0, dk_head_stride = 0, dk_row_stride = 0;
  int64_t dv_batch_stride = 0, dv_head_stride = 0, dv_row_stride = 0;
};

// The gradients of the score modifiers' parameters, each in its parameter's layout (the strides
// of SdpaGeometry's alibi_slopes, rel_bias and sinks). A backward pass ADDS to them (null: not
// wanted), in a fixed order: bitwise the same for any number of threads.
struct SdpaModGrads {
  float* dalibi_slopes = nullptr;
  float* drel_bias = nullptr;
  float* dsinks = nullptr;
};

// Column of the relative-position bias table for the offset t = j - i - off: t clipped to
// [-R, R], shifted to [0, 2 R].
ATTN_HOST_DEVICE_INLINE constexpr int64_t rel_bias_column(int64_t t, int64_t R) {
  return (t < -R ? -R : t > R ? R : t) + R;
}

// ---- visibility: causal masking and the sliding window ------------------------------------------
// The one rule every kernel applies. Causal masking, for L_q != L_k:
//   top-left      (PyTorch's is_causal): key j is visible to query i iff j <= i
//   bottom-right  (decoding with a cache): key j is visible to query i iff j <= i + (L_k - L_q)
// With bottom-right alignment and L_q > L_k the first L_q - L_k rows see no key at all (zeros).
// The sliding window uses the same alignment. With
//   diagonal_offset = causal_bottom_right ? L_k - L_q : 0
// key j is visible to query i iff
//   (window_left < 0  || j >= i + diagonal_offset - window_left)  and
//   (window_right < 0 || j <= i + diagonal_offset + window_right),
// where causal masking is window_right = 0 (the smaller window wins). Masks, key padding and the
// lengths (0 <= j < L_k) hide keys on top of this.
struct SdpaBand {
  int64_t diagonal_offset = 0;  // L_k - L_q (bottom-right alignment) or 0 (top-left)
  int64_t window_left = -1;     // SdpaGeometry::window_left; -1: unbounded
  int64_t window_right = -1;    // SdpaGeometry::window_right with causal folded in; -1: unbounded

  ATTN_HOST_DEVICE_INLINE constexpr bool visible(int64_t i, int64_t j) const {
    return (window_left < 0 || j >= i + diagonal_offset - window_left) &&
           (window_right < 0 || j <= i + diagonal_offset + window_right);
  }
};

// The band of a geometry: its window with causal masking folded into window_right.
ATTN_HOST_DEVICE_INLINE constexpr SdpaBand sdpa_band(const SdpaGeometry& g) {
  SdpaBand band;
  band.diagonal_offset = g.causal_bottom_right ? g.L_k - g.L_q : 0;
  band.window_left = g.window_left < 0 ? -1 : g.window_left;
  band.window_right = g.window_right < 0 ? -1 : g.window_right;
  if (g.causal) band.window_right = 0;  // the smaller of 0 and any window_right >= 0
  return band;
}

}  // namespace attn::kernels

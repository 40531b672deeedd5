// Scaled dot-product attention: the one kernel behind self-, causal- and cross-attention.
//
// Dimension names used throughout attn (outermost first):
//   B    batch                 H    query heads          H_kv  key/value heads
//   L_q  query length          L_k  key/value length
//   D    query/key head dim    D_v  value head dim
//
// attention(q, k, v) = softmax(q @ k^T * scale + mask) @ v, with
//   q (..., L_q, D), k (..., L_k, D), v (..., L_k, D_v)  ->  out (..., L_q, D_v)
// where the leading dims "..." of q, k and v broadcast (typically (B, H)).
#pragma once

#include <attn/random.h>
#include <attn/tensor.h>

#include <optional>
#include <tuple>

namespace attn {

// Where the causal diagonal sits when L_q != L_k.
//   TopLeft:     query i sees keys j <= i (PyTorch's is_causal, torch.tril of an (L_q, L_k)
//   matrix). BottomRight: query i sees keys j <= i + (L_k - L_q): the last query sees the last key,
//   as in
//                incremental decoding with a cache.
enum class CausalAlign { TopLeft, BottomRight };

// Which implementation computes attention.
//   Reference: the naive kernel that materialises the (L_q, L_k) scores; it defines the meaning.
//   Auto:      the best available kernel (the reference until the fused kernel lands).
enum class SdpaBackend { Auto, Reference };

struct SdpaOptions {
  // Optional mask broadcastable to (..., L_q, L_k) (it may not enlarge the output's batch dims).
  // Bool: true means "may attend" (PyTorch's convention for scaled_dot_product_attention).
  // Float32: added to the scaled scores (-inf masks).
  Tensor attn_mask;
  double dropout_p = 0.0;  // dropout on the attention weights, in [0, 1)
  bool is_causal = false;  // may not be combined with attn_mask, as in PyTorch
  CausalAlign causal_align = CausalAlign::TopLeft;
  std::optional<double> scale;  // default 1 / sqrt(D); must be finite and > 0
  // Grouped-query attention (torch 2.5's enable_gqa): q (..., H, L_q, D) with k, v
  // (..., H_kv, L_k, D) where H % H_kv == 0; query head h uses key/value head h / (H / H_kv).
  bool enable_gqa = false;
  Generator* generator = nullptr;  // for dropout; default_generator() when null
  SdpaBackend backend = SdpaBackend::Auto;
};

// torch.nn.functional.scaled_dot_product_attention (PyTorch 2.x semantics):
//   q (..., L_q, D), k (..., L_k, D), v (..., L_k, D_v) float32, rank >= 2 each, whose leading
//   dims broadcast together to "..."; returns out (..., L_q, D_v), contiguous.
// A query row whose keys are all masked gives a zero output row (never NaN; PyTorch's math
// backend gives NaN). Stable for huge scores (the softmax subtracts the row max).
// Dropout (dropout_p > 0) multiplies the weights (..., L_q, L_k) by factors drawn with
// fill_dropout_mask in row-major order over the weights of q @ k^T's broadcast shape, so for the
// same generator state the result equals torch's dropout applied to the materialised weights;
// dropout_p == 0 draws nothing.
// Throws attn::Error naming the function and the shapes for: undefined or non-float32 q/k/v,
// rank < 2, differing head dims, k/v length mismatch, batch dims that do not broadcast, a mask
// that is not bool/float32 or does not broadcast to (..., L_q, L_k), is_causal with attn_mask,
// dropout_p outside [0, 1), a scale that is not finite and positive, and bad GQA head counts.
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const SdpaOptions& options = {});

// The same computation, also returning the attention weights (..., L_q, L_k) after dropout, as the
// seeds print them. Always uses the reference kernel.
std::tuple<Tensor, Tensor> scaled_dot_product_attention_with_weights(
    const Tensor& q, const Tensor& k, const Tensor& v, const SdpaOptions& options = {});

// The boolean (L_q, L_k) mask of positions a query may attend under causal masking:
// TopLeft is torch.ones(L_q, L_k).tril(0).bool(), BottomRight is .tril(L_k - L_q).
Tensor causal_mask(int64_t L_q, int64_t L_k, CausalAlign align = CausalAlign::TopLeft);

}  // namespace attn

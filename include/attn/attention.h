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
#include <vector>

namespace attn {

// Where the causal diagonal sits when L_q != L_k.
//   TopLeft:     query i sees keys j <= i (PyTorch's is_causal, torch.tril of an (L_q, L_k)
//   matrix). BottomRight: query i sees keys j <= i + (L_k - L_q): the last query sees the last key,
//   as in
//                incremental decoding with a cache.
enum class CausalAlign { TopLeft, BottomRight };

// Which implementation computes attention.
//   Auto:      Fused, except where attention weights are requested (then Reference).
//   Fused:     the FlashAttention-2-style kernel (Dao, 2023): tiled, online softmax, O(L * D)
//              memory (the (L_q, L_k) matrix is never formed), vectorised (AVX-512 or AVX2 + FMA,
//              chosen at run time, with a portable fallback), multithreaded with OpenMP and
//              bitwise reproducible for any number of threads. fp32 throughout, so it agrees with
//              Reference to fp32 rounding, not bitwise.
//   Reference: the naive kernel that materialises each (L_k) score row in double precision; it
//              defines the meaning, and is the only kernel that can return the weights.
enum class SdpaBackend { Auto, Fused, Reference };

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
  // Sliding window (local attention): with off = L_k - L_q under BottomRight alignment (else 0),
  // query i sees only keys j with i + off - window_left <= j <= i + off + window_right.
  // -1 leaves that side unbounded; combined with is_causal the right side is at most 0.
  int64_t window_left = -1, window_right = -1;
  // Optional bool (B, L_k) mask of keys to ignore (true = padding; PyTorch's key_padding_mask
  // convention, the opposite of attn_mask's). B is the batch dim just before the heads (q's
  // dim -4 for (B, H, L_q, D) inputs); (1, L_k) or (L_k) applies to every batch.
  Tensor key_padding_mask;
  Generator* generator = nullptr;  // for dropout; default_generator() when null
  SdpaBackend backend = SdpaBackend::Auto;

  // ---- score modifiers, applied in this order to s = scale * q . k before the masks -----------
  // With off = L_k - L_q under BottomRight alignment (else 0), and H, B the last two batch dims
  // (q's dims -3 and -4 for (B, H, L_q, D) inputs). The fused kernels apply them tile by tile,
  // forward and backward; the tensors may require grad (their gradients are summed in a fixed
  // order: bitwise the same for any number of threads). On a GPU (bf16/fp16) softcap, ALiBi and
  // sinks run forward and backward (dq, dk, dv); the relative bias table and the gradients of the
  // slopes and sinks are CPU-only for now (refused there with NotImplementedError).
  //
  // Softcap (Gemma 2, Grok; FlashAttention's softcap), when > 0: s = softcap * tanh(s / softcap).
  double softcap = 0.0;
  // ALiBi (Press et al., 2022; FlashAttention's alibi_slopes): float32 (H) or (B, H);
  // s -= slope[b, h] * |i + off - j| (also without causal masking, as FlashAttention).
  Tensor alibi_slopes;
  // A learned relative-position bias (T5 / Shaw et al. style, one entry per clipped distance):
  // float32 (H, 2 R + 1) or (1, 2 R + 1) shared by the heads;
  // s += relative_bias[h, clamp(j - i - off, -R, R) + R].
  Tensor relative_bias;
  // Attention sinks (gpt-oss: a learned logit per head): float32 (H). sinks[h] joins every row's
  // softmax as a score whose value row is zero, so the weights of the real keys sum to less than
  // 1; lse includes it, and a row whose keys are all masked gives zeros with lse = sinks[h].
  Tensor sinks;
};

// torch.nn.functional.scaled_dot_product_attention (PyTorch 2.x semantics):
//   q (..., L_q, D), k (..., L_k, D), v (..., L_k, D_v) float32, rank >= 2 each, whose leading
//   dims broadcast together to "..."; returns out (..., L_q, D_v), contiguous.
// A query row whose keys are all masked (by attn_mask, causal masking, the window or key padding)
// gives a zero output row (never NaN; PyTorch's math backend gives NaN). Stable for huge scores
// (the softmax subtracts the row max).
// Dropout (dropout_p > 0) zeroes each weight with probability dropout_p and scales the others by
// 1 / (1 - dropout_p). Here (Fused or Reference backend) the mask is counter-based: weight
// (..., i, j) is kept iff kernels::dropout_keep(seed, 0, flat index) (SplitMix64 of the seed and
// the weight's row-major index over (..., L_q, L_k)), with the seed drawn once per call from the
// generator (one random64()), so results are reproducible under manual_seed and a backward pass
// regenerates the mask instead of storing it. This is NOT the stream torch's dropout draws: for
// torch-identical dropout use scaled_dot_product_attention_with_weights (below).
// dropout_p == 0 draws nothing.
// Throws attn::Error naming the function and the shapes for: undefined or non-float32 q/k/v,
// rank < 2, differing head dims, k/v length mismatch, batch dims that do not broadcast, a mask
// that is not bool/float32 or does not broadcast to (..., L_q, L_k), is_causal with attn_mask,
// dropout_p outside [0, 1), a scale that is not finite and positive, bad GQA head counts (not a
// multiple), a window side below -1, and a key_padding_mask that is not bool (B, L_k).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const SdpaOptions& options = {});

// The same computation, also returning the attention weights (..., L_q, L_k) after dropout, as the
// reference tutorials print them (the steps of docs/tour-python.md). Always uses the reference
// kernel. Its dropout is torch's: factors drawn with fill_dropout_mask in row-major order over the
// weights of q @ k^T's broadcast shape, so for the same generator state the weights equal torch's
// dropout applied to the materialised weights (and differ from scaled_dot_product_attention's
// counter-based mask).
std::tuple<Tensor, Tensor> scaled_dot_product_attention_with_weights(
    const Tensor& q, const Tensor& k, const Tensor& v, const SdpaOptions& options = {});

// Forward and backward at the Tensor level, for autograd and for tests. The forward also returns
// the per-row log-sum-exp (B..., H, L_q) that the backward needs; the backward recomputes the
// scores (never stores the (L_q, L_k) matrix on the fused path) and, with dropout, regenerates
// the mask from the same seed: pass the `dropout_seed` the forward reported.
// The forward takes the same options and validation as scaled_dot_product_attention (backend
// Auto = Fused; counter-based dropout) and records no autograd node.
struct SdpaForwardResult {
  Tensor out;  // (..., H, L_q, D_v)
  Tensor lse;  // (..., H, L_q), float32; -inf for fully masked rows
  // The counter-based dropout mask used (see scaled_dot_product_attention): the seed drawn from
  // the generator and the offset of index 0 (0 and 0 when dropout_p == 0).
  uint64_t dropout_seed = 0, dropout_offset = 0;
};
SdpaForwardResult scaled_dot_product_attention_forward(const Tensor& q, const Tensor& k,
                                                       const Tensor& v,
                                                       const SdpaOptions& options = {});
std::tuple<Tensor, Tensor, Tensor> scaled_dot_product_attention_backward(
    const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
    const SdpaForwardResult& forward, const SdpaOptions& options = {});

// The backward with the gradients of the score modifiers' tensors too (each undefined when the
// option is not set).
struct SdpaGradients {
  Tensor q, k, v;
  Tensor alibi_slopes, relative_bias, sinks;
};
SdpaGradients scaled_dot_product_attention_gradients(const Tensor& dout, const Tensor& q,
                                                     const Tensor& k, const Tensor& v,
                                                     const SdpaForwardResult& forward,
                                                     const SdpaOptions& options = {});

// ---- packed variable-length batches (FlashAttention's flash_attn_varlen_func) ------------------
// N sequences packed along dim 0: q (total_q, H, D), k (total_k, H_kv, D), v (total_k, H_kv, D_v),
// sequence b's rows [cu_seqlens_q[b], cu_seqlens_q[b + 1]) of q attend to its rows
// [cu_seqlens_k[b], cu_seqlens_k[b + 1]) of k and v only: no padding is stored or computed.
// cu_seqlens_* are int64 (N + 1) offsets from 0, non-decreasing, ending at total_q / total_k;
// max_seqlen_* bound the lengths (checked). H % H_kv == 0 (grouped-query heads need no flag).
// The options are scaled_dot_product_attention's, per sequence: is_causal and the window with
// causal_align (FlashAttention aligns bottom-right: set CausalAlign::BottomRight for its
// semantics), scale, dropout_p, softcap, alibi_slopes ((H) or (N, H)), relative_bias, sinks; no
// attn_mask or key_padding_mask. Returns out (total_q, H, D_v); autograd gives dq, dk, dv and the
// modifiers' gradients through the fused backward, sequence by sequence.
// Throws attn::Error naming the argument for offsets that are not int64, do not start at 0,
// decrease, miss the packed length or exceed max_seqlen, and for mismatched sequence counts.
struct VarlenResult {
  Tensor out;                           // (total_q, H, D_v)
  Tensor lse;                           // (H, total_q) float32, as FlashAttention's softmax_lse
  std::vector<uint64_t> dropout_seeds;  // per sequence, the counter-based dropout's seed
};
VarlenResult varlen_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                      const Tensor& cu_seqlens_q, const Tensor& cu_seqlens_k,
                                      int64_t max_seqlen_q, int64_t max_seqlen_k,
                                      const SdpaOptions& options = {});
Tensor varlen_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& cu_seqlens_q, const Tensor& cu_seqlens_k,
                        int64_t max_seqlen_q, int64_t max_seqlen_k,
                        const SdpaOptions& options = {});

// ---- attention against paged key/value pools (vLLM's PagedAttention) ---------------------------
// The keys and values of many sequences live in pools of fixed-size pages; sequence b's page n is
// page block_table[b, n]. attn::PagedKVCache (include/attn/kv_cache.h) owns such pools and keeps
// the tables; these functions read them.
enum class KVCacheDtype { Float32, BFloat16, Int8, Float16 };

// A view of pools that another object owns, on the CPU. The row of page p, key/value head h and
// row r of the page starts at element p * page_stride + h * head_stride + r * row_stride of
// `keys` (D elements) and of `values` (D_v elements); the strides are multiples of the row
// length. Int8 rows carry one float scale per 32 elements at key_scales[row start / D *
// ceil(D / 32) + c / 32] (value_scales likewise): value = int8 * scale.
struct PagedKVView {
  KVCacheDtype dtype = KVCacheDtype::Float32;
  const void* keys = nullptr;
  const void* values = nullptr;
  const float* key_scales = nullptr;
  const float* value_scales = nullptr;
  int64_t num_pages = 0, page_size = 0, num_kv_heads = 0, head_dim = 0, head_dim_v = 0;
  int64_t key_page_stride = 0, key_head_stride = 0, key_row_stride = 0;
  int64_t value_page_stride = 0, value_head_stride = 0, value_row_stride = 0;
};

// q (B, L_q, H, D) float32 against the pools: block_table (B, max_pages) int64 (attn's integer
// dtype; FlashAttention's is int32), seqlens (B) int64 with 0 <= seqlens[b] <= max_pages *
// page_size. A sequence's L_q queries are its last positions, so causal masking and the window
// align bottom-right (query i sits at position i + seqlens[b] - L_q; options.causal_align is not
// consulted). H % H_kv == 0. Options used: is_causal, window_left (window_right only as causal's
// 0), scale, softcap, alibi_slopes (H), sinks (H); attn_mask, key_padding_mask, dropout,
// relative_bias and a window_right without causal masking are refused. Returns out (B, L_q, H,
// D_v), and with lse also (B, H, L_q). No autograd: this is for inference.
// Throws attn::Error naming the argument for wrong dtypes or shapes, a page index outside
// [0, num_pages) among the pages a sequence uses (entries after them are never read), or a
// length outside its table.
// evicted (optional, StreamingLLM): int64 (B, 2), (start, count) per sequence: its keys from
// logical index start on (and its queries) sit count positions further, the tokens between having
// been evicted (PagedKVCache::evict); ALiBi and the window measure these real positions.
Tensor paged_attention(const Tensor& q, const PagedKVView& kv, const Tensor& block_table,
                       const Tensor& seqlens, const SdpaOptions& options = {},
                       Tensor* lse = nullptr, const Tensor& evicted = Tensor());

// FlashAttention's flash_attn_with_kvcache on pools held as tensors: k_cache (num_pages,
// page_size, H_kv, D) and v_cache (num_pages, page_size, H_kv, D_v), both float32, both bfloat16
// or both float16, on the CPU; otherwise paged_attention's arguments and rules.
Tensor attention_with_kvcache(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                              const Tensor& cache_seqlens, const Tensor& block_table,
                              const SdpaOptions& options = {}, Tensor* lse = nullptr);

// The boolean (L_q, L_k) mask of positions a query may attend under causal masking:
// TopLeft is torch.ones(L_q, L_k).tril(0).bool(), BottomRight is .tril(L_k - L_q).
Tensor causal_mask(int64_t L_q, int64_t L_k, CausalAlign align = CausalAlign::TopLeft);

}  // namespace attn

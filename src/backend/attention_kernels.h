// The kernels of scaled_dot_product_attention (src/ops/attention.cpp), one table per backend
// indexed by the dtype of q, k and v (src/backend/dispatch.h): the CPU has float32
// (src/backend/cpu/attention.cpp), the GPU bfloat16 and float16 (src/backend/cuda/attention.cpp).
//
// The op validates and broadcasts the inputs, allocates the results and calls a kernel once for
// every index over the batch dims before the last two: each call covers the (B, H) heads that
// kernels::SdpaGeometry (sdpa_params.h) describes, with its strides, masks, window and dropout
// counters. Element pointers are to the slot's dtype on the tensors' device; lse is float32.
#pragma once

#include <cstddef>
#include <cstdint>

#include "dispatch.h"
#include "sdpa_params.h"

namespace attn::backend {

// One forward call: out (and lse, when not null) from q, k, v.
struct SdpaForward : kernels::SdpaGeometry {
  const char* op = "";  // the public function, for errors (scratch memory the kernel lacks)
  int device = 0;       // the GPU's index (0 on the CPU)
  const void *q = nullptr, *k = nullptr, *v = nullptr;
  void* out = nullptr;
  float* lse = nullptr;
  // The reference kernel (SdpaBackend::Reference) in place of the fused one, where a backend has
  // both.
  bool reference = false;
  // sdpa_weights only (the weights are materialised): the weights after dropout, contiguous
  // (B, H, L_q, L_k), and the dropout factors to multiply them by (same layout; null: none).
  float* weights = nullptr;
  const float* dropout_scale = nullptr;
  // When not null, also receives the counter-based dropout factors (keep ? 1 / (1 - p) : 0) of
  // this call, contiguous (B, H, L_q, L_k): for the autograd graph's composed backward.
  float* dropout_factors = nullptr;
};

// One backward call: dq, dk and dv from dout and the forward's out and lse (in `fwd`, with the
// forward's geometry and dropout counters). Every element of dq, dk and dv is written.
// With score modifiers, the gradients of their parameters are added to the SdpaModGrads
// pointers that are set.
struct SdpaBackward : kernels::SdpaGradStrides, kernels::SdpaModGrads {
  SdpaForward fwd;
  const void* dout = nullptr;
  void *dq = nullptr, *dk = nullptr, *dv = nullptr;
  // Scratch of sdpa_backward_workspace(fwd) bytes on the device, shared by the calls (they run
  // in order).
  void* workspace = nullptr;
};

// Ring attention's merge of a partial result (out_p (BH, n, D_v), lse_p (BH, n), contiguous) for
// the query rows [start, start + n) into the accumulators out (BH, L, D_v) and lse (BH, L),
// contiguous: the rows combined by their log-sum-exp, as one call over all the keys would give.
struct SdpaMerge {
  void *out, *lse;
  const void *out_p, *lse_p;
  int64_t BH, n, L, D_v, start;
};

// Attention of a few queries per sequence against a paged key/value cache (vLLM's PagedAttention,
// FlashAttention's flash_attn_with_kvcache with a block_table): the keys and values of sequence b
// live in pages of page_size rows; its page n is page block_table[b * block_table_stride + n] of
// the pools k_pages and v_pages, where the row of key r of a page for key/value head h starts at
// element page * page_stride + h * head_stride + r * row_stride (the strides of k and v alike):
// FlashAttention's (num_pages, page_size, H_kv, D) or, better for a CPU (each head's page one
// contiguous block), (num_pages, H_kv, page_size, D). The pools hold float32, bfloat16, float16
// or int8 (kv_storage); int8 rows carry one float scale per 32 consecutive elements at
// k_scales[(that row's start) / D * ceil(D / 32) + c / 32] (v_scales likewise, with D_v):
// value = int8 * scale. q (B, L_q, H, D) and out (B, L_q, H, D_v) are contiguous float32; lse
// (B, H, L_q) may be null. Sequence b has seqlens[b] keys and its L_q queries are its last
// positions: query i sits at i + seqlens[b] - L_q (bottom-right alignment), which causal masking
// and the window refer to. Score modifiers as SdpaGeometry's (softcap, alibi_slopes (H), sinks
// (H)). The caller has checked every page index against num_pages.
enum class KvStorage : int { Float32 = 0, BFloat16 = 1, Int8 = 2, Float16 = 3 };
struct SdpaPaged {
  const char* op = "";
  const float* q = nullptr;
  float* out = nullptr;
  float* lse = nullptr;
  int64_t B = 0, H = 1, H_kv = 1, L_q = 0, D = 0, D_v = 0;
  KvStorage kv_storage = KvStorage::Float32;
  const void *k_pages = nullptr, *v_pages = nullptr;
  const float *k_scales = nullptr, *v_scales = nullptr;
  int64_t num_pages = 0, page_size = 0;
  int64_t k_page_stride = 0, k_head_stride = 0, k_row_stride = 0;
  int64_t v_page_stride = 0, v_head_stride = 0, v_row_stride = 0;
  const int64_t* block_table = nullptr;
  int64_t block_table_stride = 0;
  const int64_t* seqlens = nullptr;
  // Evicted positions (StreamingLLM), or null: sequence b's keys from logical index
  // evicted[2 b] on sit evicted[2 b + 1] positions further (the tokens between were dropped), and
  // so do its queries, which come after them. ALiBi and the window measure real positions.
  const int64_t* evicted = nullptr;
  double scale = 1.0;
  bool causal = false;
  int64_t window_left = -1;  // keys at most window_left before the query's position; -1: all
  double softcap = 0.0;
  const float* alibi_slopes = nullptr;
  const float* sinks = nullptr;
};
// Elements of one int8 scale block.
inline constexpr int64_t kKvScaleBlock = 32;

using SdpaForwardFn = void(const SdpaForward&);
using SdpaPagedFn = void(const SdpaPaged&);
using SdpaMergeFn = void(const SdpaMerge&);
using SdpaBackwardFn = void(const SdpaBackward&);
using SdpaWorkspaceFn = std::size_t(const SdpaForward&);

#define ATTN_ATTENTION_KERNELS(X)                                                         \
  X(SdpaForwardFn, sdpa_forward)   /* the fused (or reference) forward */                 \
  X(SdpaForwardFn, sdpa_weights)   /* the reference forward, materialising the weights */ \
  X(SdpaBackwardFn, sdpa_backward) /* the fused (or reference) backward */                \
  X(SdpaWorkspaceFn, sdpa_backward_workspace)                                             \
  X(SdpaMergeFn, sdpa_merge)                                                              \
  X(SdpaPagedFn, sdpa_paged) /* paged key/value cache, q float32 */

ATTN_ATTENTION_KERNELS(ATTN_BACKEND_KERNELS)

}  // namespace attn::backend

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

using SdpaForwardFn = void(const SdpaForward&);
using SdpaMergeFn = void(const SdpaMerge&);
using SdpaBackwardFn = void(const SdpaBackward&);
using SdpaWorkspaceFn = std::size_t(const SdpaForward&);

#define ATTN_ATTENTION_KERNELS(X)                                                         \
  X(SdpaForwardFn, sdpa_forward)   /* the fused (or reference) forward */                 \
  X(SdpaForwardFn, sdpa_weights)   /* the reference forward, materialising the weights */ \
  X(SdpaBackwardFn, sdpa_backward) /* the fused (or reference) backward */                \
  X(SdpaWorkspaceFn, sdpa_backward_workspace)                                             \
  X(SdpaMergeFn, sdpa_merge)

ATTN_ATTENTION_KERNELS(ATTN_BACKEND_KERNELS)

}  // namespace attn::backend

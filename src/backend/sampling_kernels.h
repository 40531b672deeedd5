// The kernel of GPT.generate's next-token draw (src/ops/sampling_ops.h), one table per backend
// indexed by the logits' dtype (src/backend/dispatch.h).
#pragma once

#include <cstdint>

#include "dispatch.h"

namespace attn::backend {

// For each of B contiguous rows of V logits: the probabilities exp(logit / temperature - max)
// over the top_k largest logits (all when top_k <= 0 or >= V), then the token at u[b] (uniform
// in [0, 1)) times their sum along the cumulative distribution, into out[b]. Returns the first
// row whose sum is not finite and positive (NaN or inf logits; out[b] from it on unwritten), or -1.
struct SampleRows {
  const void* logits;
  int64_t B, V;
  double temperature;
  int64_t top_k;
  const double* u;
  int64_t* out;
};
using SampleRowsFn = int64_t(const SampleRows&);

ATTN_BACKEND_KERNELS(SampleRowsFn, sample_rows)

}  // namespace attn::backend

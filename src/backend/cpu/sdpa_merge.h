// Merging attention computed over blocks of keys (ring attention): each block's partial output
// and log-sum-exp are combined row by row, as one kernel call over all the keys would have given.
#pragma once

#include <cstdint>

namespace attn::kernels {

// Merges a partial result (out_p (BH, n, D_v), lse_p (BH, n), contiguous) for the query rows
// [start, start + n) into the accumulators out (BH, L, D_v) and lse (BH, L). A row with lse -inf
// saw no key: it contributes nothing, and a row that no block reaches keeps out 0 and lse -inf,
// as the single-process kernel gives. The weights are computed in double; rows are shared among
// the threads, each row's arithmetic the same whatever the split.
void merge_attention_rows(float* out, float* lse, const float* out_p, const float* lse_p,
                          int64_t BH, int64_t n, int64_t L, int64_t D_v, int64_t start);

}  // namespace attn::kernels

// The fused attention kernel: FlashAttention-2 (Dao, 2023) on the CPU, forward pass.
//
// It computes exactly what sdpa_reference_forward defines (see sdpa_reference.h: scores, causal
// alignment, sliding window, key padding, bool/float masks broadcast through strides, grouped-query
// heads, D_v != D, counter-based dropout, fully masked rows -> zeros and lse = -inf), in fp32,
// without ever forming the L_q x L_k matrix: memory is O(threads * tile), beyond q, k, v, out, lse.
//
//   - Tiles: a block of query rows (64 with AVX-512, 32 with AVX2; narrower for a last partial
//     block) stays resident while keys stream past in tiles of 64; the online softmax (running max
//     m, running sum l, rescaled accumulator) merges the tiles; lse = m + log(l) per row is
//     written for the backward pass. Blocks of at most 4 rows (decoding) use a row kernel with
//     the keys along the vector lanes instead; under GQA the query heads sharing a key/value head
//     are packed into one block when L_q is short.
//   - Tiles that causal masking, the sliding window or key padding hide entirely are never
//     computed.
//   - Split-K (flash-decoding, Dao et al. 2023): when the blocks are few (decoding with few heads)
//     and the keys many, the keys are cut into up to 16 ranges computed as separate work items
//     (each a partial output and lse), merged row by row in range order. The number of ranges
//     depends on the sizes only.
//   - Parallel with OpenMP over (batch, key/value head, query block). Each block is computed by
//     one thread in a fixed order, so the result is bitwise identical for any number of threads.
//   - Vectorised with AVX-512 or AVX2 + FMA (x86-64) or NEON (AArch64), including a polynomial
//     2^x, chosen at run time from what the CPU supports; a portable scalar build of the same code
//     is the fallback.
//
// Not supported (the caller uses sdpa_reference_forward instead): materialised weights
// (params.weights) and precomputed dropout factors (params.dropout_scale).
// One difference from the reference: a masked or dropped key inside a computed tile contributes
// 0 * v[j], so an inf or NaN in such a value row gives NaN (the reference skips zero weights;
// PyTorch's math backend gives NaN too). Keys in skipped tiles are never read.
#pragma once

#include "isa.h"
#include "sdpa_reference.h"

namespace attn::kernels {

// The instruction set (isa.h) is active_isa() unless a call names one.

// The forward pass. params.out must be set; params.lse may be null. params.weights and
// params.dropout_scale must be null. The caller validates the parameters (asserts only here).
void sdpa_fused_forward(const SdpaParams& params);

// The vectorised 2^x of the current instruction set applied to n floats (for tests of its
// accuracy; x <= 127).
void fused_exp2(const float* x, float* y, int64_t n);

}  // namespace attn::kernels

// The fused attention backward: FlashAttention-2's backward pass on the CPU.
//
// Tri Dao, "FlashAttention-2: Faster Attention with Better Parallelism and Work Partitioning",
// 2023, Algorithm 2. In the forward pass this was out = softmax(scale * q k^T + mask) v, computed
// tile by tile with an online softmax, saving only out (B, H, L_q, D_v) and the per-row
// log-sum-exp lse (B, H, L_q). The backward never forms the (L_q, L_k) matrix either: for one tile
// of Br query rows and Bc keys it recomputes
//
//   S  = scale * Q K^T (+ mask)         P  = exp(S - lse)             (the forward's weights)
//   dP = (dO V^T) o Z                   dS = P o (dP - D_i),  D_i = rowsum(dO o O)
//
// (Z the dropout factors, regenerated from the seed, o the elementwise product) and accumulates
//
//   dV += (P o Z)^T dO        dK += scale * dS^T Q        dQ += scale * dS K.
//
// Work partitioning (no atomics, so the result is bitwise the same for any number of threads):
// the key blocks of each (b, h_kv) are dealt round-robin into C chunks, C a power of two that
// depends on the sizes only (enough (b, h_kv, chunk) units to share among threads, at most 32 MiB
// of dQ buffers). A work unit (b, h_kv, chunk) owns dK and dV of its key blocks, accumulated over
// every query head of the group (GQA) in a fixed order, and a private dQ buffer for the group's
// query heads; after all units finish, the C dQ buffers are summed in chunk order. This does the
// 5 tile products of FlashAttention-2's backward (no recomputation for dQ) and needs no atomic
// adds. Extra memory is O(C * L_q * D) plus per-thread tiles, never O(L_q * L_k). Tiles fully
// hidden by causal masking or the sliding window are skipped; query rows whose lse is -inf (fully
// masked) contribute nothing.
//
// The tile products (register-blocked micro-kernels), the softmax-gradient tile (with the forward
// kernel's vectorised 2^x) and the dropout generator are written once over the vector backends of
// simd.h (sdpa_fused_backward_kernel.inc) and run on the instruction set the forward kernel uses
// (AVX-512, AVX2 + FMA, NEON or portable scalar code; see sdpa_fused.h); they agree to rounding.
#pragma once

#include "sdpa_fused.h"
#include "sdpa_reference.h"

namespace attn::kernels {

// Computes dq, dk, dv as sdpa_reference_backward defines them (same parameters), from the saved
// fwd.out and fwd.lse (contiguous (B, H, L_q); -inf marks a fully masked row, whose gradients are
// zero). Overwrites dq, dk and dv. The caller validates the parameters.
// `isa` picks the instruction set (Auto, or one the CPU lacks: the forward kernel's current
// choice, active_isa()).
void sdpa_fused_backward(const SdpaBackwardParams& params, Isa isa = Isa::Auto);

}  // namespace attn::kernels

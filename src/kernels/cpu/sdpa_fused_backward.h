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
// The tile products run on AVX-512 or AVX2/FMA micro-kernels, with a vectorised exp (and, with
// AVX-512, a vectorised dropout generator), when the CPU has them (checked at run time with
// __builtin_cpu_supports; the library is not built with -march=native), else on portable scalar
// code; they agree to rounding.
#pragma once

#include "sdpa_reference.h"

namespace attn::kernels {

// Which instruction set the fused backward uses. Auto picks the widest the CPU supports;
// a set the CPU lacks falls back to the next narrower one (Avx512 -> Avx2 -> Scalar).
enum class FusedBackwardIsa { Auto, Scalar, Avx2, Avx512 };

// Whether this CPU runs `isa` (Auto and Scalar: always).
bool sdpa_fused_backward_supported(FusedBackwardIsa isa);

// Computes dq, dk, dv as sdpa_reference_backward defines them (same parameters), from the saved
// fwd.out and fwd.lse (contiguous (B, H, L_q); -inf marks a fully masked row, whose gradients are
// zero). Overwrites dq, dk and dv. The caller validates the parameters.
void sdpa_fused_backward(const SdpaBackwardParams& params,
                         FusedBackwardIsa isa = FusedBackwardIsa::Auto);

}  // namespace attn::kernels

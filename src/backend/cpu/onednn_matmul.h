// bfloat16 products through oneDNN's matmul primitive, which multiplies bfloat16 with the CPU's
// own bfloat16 instructions (AVX512-BF16's dot products, AMX tiles) and accumulates in float: the
// kernels PyTorch's bfloat16 CPU products run on, at twice the float32 rate.
#pragma once

#include <cstdint>

namespace attn::kernels {

// C (M, N) = op(A) op(B) (+ bias), row-major; op(A) is (M, K) and op(B) (K, N), transposed when
// ta / tb (lda, ldb, ldc: row strides of the stored matrices). A, B, bias (N, may be null) and C
// are bfloat16 bits; every sum is float, the bias added, then rounded once to C. Runs on oneDNN's
// threads (the OpenMP pool; one thread inside a parallel region).
//
// Returns false, computing nothing, where attn is built without oneDNN or oneDNN has no fast
// bfloat16 kernel for this CPU (it would take its reference loops; CPUs before AVX512-BF16, or
// with ONEDNN_MAX_CPU_ISA below it): the caller then widens to float32 (gemm_half.h).
// The primitive made for each shape is kept (up to 64 shapes, the least recently used dropped).
bool onednn_matmul_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t* A,
                        int64_t lda, const uint16_t* B, int64_t ldb, const uint16_t* bias,
                        uint16_t* C, int64_t ldc);

// Whether onednn_matmul_bf16 runs a fast kernel for this shape (bias: whether one is added),
// asked before preparing its operands: builds and caches the shape's primitive as a call would.
bool onednn_matmul_bf16_fast(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t lda,
                             int64_t ldb, int64_t ldc, bool bias);

}  // namespace attn::kernels

// Products with a weight kept in a 2-byte float (bfloat16 or float16): the linear layer of a model
// whose parameters are bfloat16 reads them as they are stored, never widening the whole matrix.
#pragma once

#include <cstdint>

namespace attn::kernels {

enum class HalfKind { BFloat16, Float16 };

// Widens n 2-byte floats of `kind` (their bits) to float, exactly.
void widen_half(HalfKind kind, const uint16_t* src, float* dst, int64_t n);
// Rounds n floats to `kind` (their bits), to nearest even, as Tensor::to does.
void narrow_half(HalfKind kind, const float* src, uint16_t* dst, int64_t n);

// C (M, N) = A (M, K) B^T with B (N, K) stored in `kind` (row stride ldb), A and C float, C's row
// stride ldc; every sum is float. Threads share C by blocks of columns; the bits do not depend on
// the thread count:
//   * M <= kGemmRowsMax (a decoding step), bfloat16: gemm_rows_bf16 streams B once, widening as it
//     reads (half the bytes of a float32 weight);
//   * otherwise blocks of kHalfBlock rows of B are widened into a per-thread buffer and multiplied
//     by sgemm (gemm.h): the converting path, for any CPU.
void gemm_half_weights(HalfKind kind, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                       const uint16_t* B, int64_t ldb, float* C, int64_t ldc);

// gemm_half_weights for A and B both bfloat16 (a bfloat16 model's decoding step), by
// gemm_rows_bf16_dot, threads sharing C by blocks of columns (the bits do not depend on them).
// Returns false, doing nothing, where M > kGemmRowsMax or !bf16_dot_enabled() (isa.h): the caller
// widens A and calls gemm_half_weights.
bool gemm_bf16_weights_dot(int64_t M, int64_t N, int64_t K, const uint16_t* A, int64_t lda,
                           const uint16_t* B, int64_t ldb, float* C, int64_t ldc);

// C (M, N) = A (M, K) B with B (K, N) stored row by row in `kind` (row stride ldb; a matrix
// multiplied as stored, x @ W), A and C float; every sum is float. Up to kGemmRowsMax rows of A: B
// streamed once, each row widened as it is read, where widening all of B first would write 2x
// its bytes as floats and read them back; C[m, n] is summed over k in order, the bits depend on
// the instruction set, not on the threads (which share C by blocks of columns). More rows: blocks
// of columns of B widened into a per-thread buffer and multiplied by sgemm (gemm.h).
void gemm_half_rows_kn(HalfKind kind, int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                       const uint16_t* B, int64_t ldb, float* C, int64_t ldc);

}  // namespace attn::kernels

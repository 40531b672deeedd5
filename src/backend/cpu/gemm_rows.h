// Products of a few rows (a decoding step's tokens) with a matrix stored row by row (a Linear
// layer's weight): Y = alpha * X B^T + beta * Y. sgemm (gemm.h) sends them here: OpenBLAS's and
// oneDNN's sgemv read several rows of B at once and reach about two thirds of one core's memory
// bandwidth on rows of 768 floats, and their sgemm for 2-8 rows runs far below it
// (bench/bench_gemm, set decode_M1 and decode_M8).
#pragma once

#include <cstdint>

namespace attn::kernels {

// sgemm uses gemm_rows for products of at most this many rows.
inline constexpr int64_t kGemmRowsMax = 8;

// Y[m * ldy + n] = alpha * sum_k X[m * ldx + k] * B[n * ldb + k] + beta * Y[m * ldy + n] for
// m < M, n < N (Y is not read when beta is 0). Runs on the calling thread, with the instruction
// set of active_isa() (NEON where that is SVE). Each element is summed in an order that depends
// only on K: not on M, N, the other rows, or where B starts (so not on how sgemm splits the work).
void gemm_rows(int64_t M, int64_t N, int64_t K, float alpha, const float* X, int64_t ldx,
               const float* B, int64_t ldb, float beta, float* Y, int64_t ldy);

// gemm_rows with B in bfloat16 (bf16) or float16 (their bits), each element widened exactly to
// float as it is read: a weight kept in a 2-byte float streams half the bytes. The sums are float,
// in gemm_rows' order.
void gemm_rows_half(bool bf16, int64_t M, int64_t N, int64_t K, float alpha, const float* X,
                    int64_t ldx, const uint16_t* B, int64_t ldb, float beta, float* Y, int64_t ldy);

// Y[m * ldy + n] = sum_k X[m * ldx + k] * B[n * ldb + k] with X and B both bfloat16 (their bits),
// by AVX512-BF16's dot product; call it only where bf16_dot_enabled() (isa.h). Each product is
// exact in float, two of them are added to a float lane at a time, and input and output denormals
// are taken as zero as that instruction does (as oneDNN's and PyTorch's bfloat16 kernels on these
// CPUs do). The order of the sums depends only on K. Runs on the calling thread. Off x86-64 (where
// bf16_dot_enabled() is false) a plain loop in k's order.
void gemm_rows_bf16_dot(int64_t M, int64_t N, int64_t K, const uint16_t* X, int64_t ldx,
                        const uint16_t* B, int64_t ldb, float* Y, int64_t ldy);

}  // namespace attn::kernels

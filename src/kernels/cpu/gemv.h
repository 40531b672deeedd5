// The matrix-vector product of a decoding step: one row times a matrix stored row by row (a
// Linear layer's weight), y = alpha * B x + beta * y. sgemm (gemm.h) sends one-row products with
// a row-major B here; OpenBLAS's and oneDNN's sgemv read several rows of B at once and reach
// about two thirds of one core's memory bandwidth on rows of 768 floats (bench/bench_gemm).
#pragma once

#include <cstdint>

namespace attn::kernels {

// y[n] = alpha * sum_k B[n * ldb + k] * x[k] + beta * y[n] for n < N (y is not read when beta is
// 0). x is contiguous. Runs on the calling thread, with the instruction set of fused_isa()
// (NEON where that is SVE). Each element's sum does not depend on N or on where B starts.
void gemv_rows(int64_t N, int64_t K, float alpha, const float* B, int64_t ldb, const float* x,
               float beta, float* y);

}  // namespace attn::kernels

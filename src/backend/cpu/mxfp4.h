// Products with weights in OCP Microscaling FP4 (MXFP4), as gpt-oss's experts are released: each
// row of a matrix W (R, C) is C / 32 groups of 32 E2M1 codes (4 bits: sign, 2 exponent bits, 1
// mantissa bit; the values 0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives), two codes a byte with
// the lower-indexed code in the low nibble, and one E8M0 scale a group (the power of two
// 2^(s - 127); s = 255 is NaN). blocks: (R, C / 32, 16) bytes; scales: (R, C / 32) bytes.
#pragma once

#include <cstdint>

namespace attn::kernels {

// Y[m * ldy + r] = sum_c X[m * ldx + c] * W[r, c] for m < M, r < R, each weight decoded exactly
// to float as it is read (a code times a power of two) and the sums in float: 4.25 bits a weight
// streamed instead of 16 or 32. Split over rows r across num_threads() threads; AVX2 decodes 32
// codes with two byte shuffles (on AVX-512 CPUs too), elsewhere a table lookup each. The order of
// each sum depends only on C and the instruction set, not on M, R or the threads.
//
// x_as: how X is taken. Float: as it is. With AVX2 (else, or where X holds inf or NaN, the float
// path), X is first rounded group of 32 by group, each group's 32 products summed exactly in
// integers, then once in float:
// - Int16 (for X that held bfloat16 or float16 values, whose own rounding is coarser): to 16-bit
//   integers with a power-of-two scale per group (each x within 2^-15 of its group's largest |x|;
//   a bfloat16 no smaller than 2^-8 of it exactly), two madd a group: 1.6x faster per weight than
//   widening the codes to floats on a Zen 4 core.
// - Int8 (llama.cpp's q8_0 activations, its accuracy): to 8-bit integers with the step d =
//   (largest |x|) / 127 per group (each x within d / 2 of its value), one byte shuffle and one
//   maddubs a group. Its first version measured another 1.1-1.2x per weight on that core; the
//   kept one was not measured apart, and whole decodes ran slower with it (BENCHMARKS.md).
// One row of X reads two rows of W at once (two streams of memory in flight).
enum class Mxfp4X { Float, Int16, Int8 };
void mxfp4_rows(int64_t M, int64_t R, int64_t C, const float* X, int64_t ldx, const uint8_t* blocks,
                const uint8_t* scales, float* Y, int64_t ldy, Mxfp4X x_as = Mxfp4X::Float);

// The same product for many rows of X (a prompt): blocks of 128 rows of W decoded into a
// per-thread float buffer and multiplied by sgemm (gemm.h), so that W is never held decoded
// whole. Threads share the blocks; the bits depend on (M, C) and the BLAS, not on the threads.
void mxfp4_gemm(int64_t M, int64_t R, int64_t C, const float* X, int64_t ldx, const uint8_t* blocks,
                const uint8_t* scales, float* Y, int64_t ldy);

// The same for bfloat16 X and Y (their bits; X's row stride C, Y's ldy), as a bfloat16 model's
// prompt runs: blocks of 1024 rows of W decoded to bfloat16 (exact: every MXFP4 weight is one) and
// multiplied by oneDNN's bfloat16 matmul (onednn_matmul.h: AVX512-BF16 / AMX, float sums, one
// rounding), the dequantized bfloat16 model's own product. Returns false where oneDNN has no
// bfloat16 kernel for this CPU (Y may then be partly written: the caller runs mxfp4_gemm).
bool mxfp4_gemm_bf16(int64_t M, int64_t R, int64_t C, const uint16_t* X, const uint8_t* blocks,
                     const uint8_t* scales, uint16_t* Y, int64_t ldy);

// DX (M, C) = G (M, R) W: the product with W itself, not its transpose (the gradient of
// mxfp4_gemm's X). Blocks of 128 of W's columns (all R rows) are decoded into a per-thread float
// buffer and multiplied by sgemm (gemm.h: sgemm_by_blocks), so that W is never held decoded
// whole; the bits depend on (M, R, C) and the BLAS, not on the threads.
void mxfp4_gemm_w(int64_t M, int64_t R, int64_t C, const float* G, int64_t ldg,
                  const uint8_t* blocks, const uint8_t* scales, float* DX, int64_t lddx);

// W (R, C) row-major, decoded exactly (signed zeros kept). C % 32 == 0.
void mxfp4_dequantize(int64_t R, int64_t C, const uint8_t* blocks, const uint8_t* scales, float* W);

}  // namespace attn::kernels

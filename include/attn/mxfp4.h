// Matrices in OCP Microscaling FP4 (MXFP4), kept as released (gpt-oss's experts): 4.25 bits a
// weight instead of 16 (bfloat16) or 32, multiplied without widening the whole matrix first.
// Each row of a matrix (rows, cols) is cols / 32 groups of 32 E2M1 codes (the values 0, 0.5, 1,
// 1.5, 2, 3, 4, 6 and their negatives), two a byte with the lower-indexed code in the low nibble,
// and one E8M0 scale a group (2^(s - 127); 255 is NaN): transformers' `_blocks` (count, rows,
// cols / 32, 16) and `_scales` (count, rows, cols / 32), both uint8.
#pragma once

#include <attn/tensor.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace attn {

// `count` matrices (rows, cols) in MXFP4, their bytes shared (copies of this hold the same).
struct Mxfp4Matrices {
  int64_t count = 0, rows = 0, cols = 0;
  std::shared_ptr<const std::vector<uint8_t>> blocks, scales;

  Mxfp4Matrices() = default;
  // Throws attn::Error ("[Mxfp4Matrices] ...") when a size is < 1, cols is not a multiple of 32,
  // or the bytes are not count * rows * cols / 2 (blocks) and count * rows * cols / 32 (scales).
  Mxfp4Matrices(int64_t count, int64_t rows, int64_t cols, std::vector<uint8_t> blocks,
                std::vector<uint8_t> scales);
  // All weights zero (codes 0, scales 2^0).
  static Mxfp4Matrices zeros(int64_t count, int64_t rows, int64_t cols);
  bool defined() const { return blocks != nullptr; }
  // The bytes held (blocks and scales).
  int64_t nbytes() const;
};

// x (N, cols), a CPU float tensor, times matrix e of w transposed: (N, rows), in x's dtype, as
// x @ mxfp4_dequantize(w, e, x.dtype()).T with float32 sums. Up to 8 rows (decoding), the codes
// are decoded as they are streamed (mxfp4_rows); more (a prompt), 128 rows of the matrix at a time
// are decoded into floats for sgemm (mxfp4_gemm; a bfloat16 x: 1024 rows into bfloat16 for
// oneDNN's bfloat16 matmul where the CPU has one), never the whole matrix. The same product
// whether or not a gradient is recorded; x's gradient, g times the matrix, decodes 128 of its
// columns at a time too (the matrices are constants: no gradient reaches them).
// attn::Error naming the shapes for an x of another width, e out of range, an x not on the CPU or
// not floating.
// int8_activations: up to 8 rows with no gradient to record, x rounded to 8-bit integers per group
// of 32 as llama.cpp's q8_0 rounds its activations (step (largest |x|) / 127) instead of the
// 16-bit integers a bfloat16 / float16 x gets (or the floats of a float32 x): fewer instructions
// per weight, at llama.cpp's accuracy (not faster decoding end to end on the CPU measured in
// BENCHMARKS.md: the rounding of x costs what they save). Ignored otherwise, and without AVX2.
Tensor mxfp4_linear(const Tensor& x, const Mxfp4Matrices& w, int64_t e,
                    bool int8_activations = false);

// Matrix e decoded: (rows, cols) in dtype (float32, bfloat16 or float16; exact in the first two).
Tensor mxfp4_dequantize(const Mxfp4Matrices& w, int64_t e, Dtype dtype = Dtype::Float32);

}  // namespace attn

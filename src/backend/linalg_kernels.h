// The kernels of matmul (src/ops/linalg.cpp): one matrix product, and the long dot product of
// two vectors; one table per backend indexed by the operands' dtype (src/backend/dispatch.h).
// The op loops over the batch dims and calls the product once per matrix (or once for all of
// them when the rows of a merge).
#pragma once

#include <cstdint>

#include "dispatch.h"

namespace attn::backend {

// Whether an (M, K) x (K, N) product is small enough to be computed as each dot product's plain
// left-to-right sum of rounded products (no FMA), the order of a textbook loop, rather than by a
// BLAS: it reproduces the values the reference tutorials print (docs/tour-python.md), where
// OpenBLAS's FMA kernels differ in the last bit. Long dot products (K > 64) never are. Anything
// that must round exactly like matmul (the linear layer) asks.
inline bool textbook_product(int64_t M, int64_t N, int64_t K) {
  return K <= 64 && M * N * K <= (int64_t(1) << 15);
}

// out (M, N), contiguous row-major, = a (M, K) @ b (K, N); element (i, j) of a at
// a[i * a_rs + j * a_cs], of b likewise. Integer products wrap on overflow, as torch.
struct Matmul {
  const void* a;
  int64_t a_rs, a_cs;
  const void* b;
  int64_t b_rs, b_cs;
  void* out;
  int64_t M, N, K;
};
using MatmulFn = void(const Matmul&);

// *out = the dot product of n elements of a and b (strides in elements) with several
// accumulators, as torch.dot: for the long ones (n > 64).
struct Dot {
  const void *a, *b;
  int64_t a_stride, b_stride, n;
  void* out;
};
using DotFn = void(const Dot&);

#define ATTN_LINALG_KERNELS(X) \
  X(MatmulFn, matmul)          \
  X(DotFn, dot)

ATTN_LINALG_KERNELS(ATTN_BACKEND_KERNELS)

}  // namespace attn::backend

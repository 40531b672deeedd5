// The kernels of the reductions sum, mean, var, max, min, argmax and amax (src/ops/reduce.cpp)
// and of the scans cumsum and cumprod (src/ops/scan_clamp.cpp), and softmax / log_softmax, one
// table per backend indexed by the dtype they compute in (src/backend/dispatch.h).
#pragma once

#include <cstdint>

#include "dispatch.h"

namespace attn::backend {

enum class ReduceOp { Sum, Mean, Var, VarUnbiased };

// out[o] = op over x[o * inner .. (o + 1) * inner) for o < outer: the input arranged contiguous
// with the reduced dims last. innermost_reduced and columns (the elements of the kept dims after
// the last reduced one) tell the order in which PyTorch sums each output, which the float32
// kernel follows so that sums round as PyTorch's do.
struct Reduce {
  ReduceOp op;
  const void* x;
  void* out;
  int64_t outer, inner;
  bool innermost_reduced;
  int64_t columns;
  // CPU, Sum and Mean only: x is laid out (outer / columns, inner, columns) instead, the reduced
  // dims one run with kept dims after them (sum(0) or sum(1) of a contiguous tensor, read where it
  // lies rather than transposed first).
  bool columns_in_rows = false;
};
using ReduceFn = void(const Reduce&);

ATTN_BACKEND_KERNELS(ReduceFn, reduce)

// Per row of `inner` values (outer rows, contiguous): the max or min and, when `index` is not
// null, the index of its first occurrence; a NaN wins (the first one), as in PyTorch. values are
// of the table's dtype.
struct Extreme {
  bool is_max;
  const void* x;
  void* values;
  int64_t* index;
  int64_t outer, inner;
};
using ExtremeFn = void(const Extreme&);
ATTN_BACKEND_KERNELS(ExtremeFn, extreme)

// Along the middle dim of a contiguous (outer, n, inner) array: CumSum, CumProd (accumulated in
// double for float32, wrapping int64 for int64, as PyTorch); CumSumBackward, the reversed
// cumulative sum of x; CumProdBackward, from the forward's input x and the gradient g, the
// gradient of cumprod written out (zeros in x included). float32 only for the backwards.
enum class ScanOp { CumSum, CumProd, CumSumBackward, CumProdBackward };
struct Scan {
  ScanOp op;
  const void* x;
  const void* g;
  void* out;
  int64_t outer, n, inner;
};
using ScanFn = void(const Scan&);
ATTN_BACKEND_KERNELS(ScanFn, scan)

// softmax (or log_softmax) of `rows` contiguous rows of `cols`: forward out = softmax(x); with
// dy, the backward out = dx from the forward's result x = y and dy.
struct Softmax {
  const void* x;
  const void* dy;
  void* out;
  int64_t rows, cols;
  bool log;
};
using SoftmaxFn = void(const Softmax&);
ATTN_BACKEND_KERNELS(SoftmaxFn, softmax)

// How many of n contiguous elements of x are inf or NaN, and the first of them (its index, or -1,
// and its value): the trainer's health checks.
struct CountNonFinite {
  const void* x;
  int64_t n;
  int64_t* count;
  int64_t* first;
  float* value;
};
using CountNonFiniteFn = void(const CountNonFinite&);
ATTN_BACKEND_KERNELS(CountNonFiniteFn, count_nonfinite)

}  // namespace attn::backend

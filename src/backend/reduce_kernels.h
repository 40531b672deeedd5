// The kernels of the reductions sum, mean, var, max, min, argmax and amax (src/ops/reduce.cpp),
// one table per backend indexed by the dtype they compute in (src/backend/dispatch.h).
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

}  // namespace attn::backend

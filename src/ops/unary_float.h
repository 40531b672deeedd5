// The common path of the float unary ops (defined in elementwise.cpp; used there and by
// special.cpp): not installed.
#pragma once

#include <attn/tensor.h>

#include "../backend/elementwise_kernels.h"

namespace attn::detail {

// The gradient of a unary op from the output gradient g, the input x and the result y (each
// saved only when the formula reads it: UnarySaves).
using UnaryGrad = Tensor (*)(const Tensor& g, const Tensor& x, const Tensor& y);
enum UnarySaves { kSaveInput = 1, kSaveResult = 2 };

// The kernel of `op` over t's elements computed in float32. bfloat16 and float16 round each
// result back (they never require grad); float32 (and integers, computed as float32) record the
// node `node` (by default fn capitalised + "Backward0") with `grad`.
Tensor unary_float(const Tensor& t, const char* fn, backend::UnaryOp op, UnaryGrad grad, int saves,
                   const char* node = nullptr);

}  // namespace attn::detail

// Counting the infinities and NaNs of a tensor (the trainer's health checks): not installed.
#pragma once

#include <attn/tensor.h>

#include <cstdint>

namespace attn::detail {

// Of a float32 tensor (any strides; CPU): how many elements are inf or NaN, the flat index
// (row-major) of the first and its value, and the element count. Zeros for an undefined tensor
// or another dtype.
struct NonFiniteCount {
  int64_t count = 0, numel = 0, first = -1;
  float value = 0;
};
NonFiniteCount count_nonfinite(const Tensor& t);

}  // namespace attn::detail

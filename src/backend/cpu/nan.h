// Whether an element is NaN, for kernels templated over every dtype (sort's and max/min's
// orderings, where NaN is above every number as in torch): false for the integer types.
#pragma once

#include <cmath>
#include <type_traits>

namespace attn::kernels {

template <typename T>
bool is_nan(T x) {
  if constexpr (std::is_floating_point_v<T>)
    return std::isnan(x);
  else
    return false;
}

}  // namespace attn::kernels

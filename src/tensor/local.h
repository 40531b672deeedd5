// Helpers shared by several files of src/tensor (not by the rest of the library, which has
// internal.h): the shape check of the creation functions, the backward formulas of the view ops,
// the copies that involve a GPU.
#pragma once

#include <attn/autograd.h>
#include <attn/tensor.h>

#include <vector>

#include "internal.h"

namespace attn::detail {

// Throws "[fn] negative dimension in shape (2, -1)" (factories.cpp, random_tensors.cpp).
inline void check_shape(const Shape& s, const char* fn) {
  for (auto d : s)
    if (d < 0) fail(fn, "negative dimension in shape ", shape_str(s));
}

// Backward formulas of the view ops: each maps the gradient of the view back to the input's shape.
inline std::vector<Tensor> one(Tensor g) { return {std::move(g)}; }

inline BackwardFn reshape_back(Shape in_shape) {
  return [in_shape](const Node&, const Tensor& g) { return one(g.reshape(in_shape)); };
}

// dst.copy_(src) where either is on a GPU (copy_devices.cpp says how); copy_ calls it.
void copy_across_devices(const Tensor& dst, const Tensor& src);

}  // namespace attn::detail

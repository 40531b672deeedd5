// Gradients laid into flat buffers, shared by GradReducer (one buffer per bucket) and ZeroAdamW
// (one buffer for all parameters).
#pragma once

#include <attn/tensor.h>

#include <cstring>

namespace attn::distributed::detail {

// Writes p's gradient (p.numel() float32 values) to dst, or zeros when p has none: ranks must
// all contribute every parameter, used on this rank or not.
inline void copy_grad_or_zeros(const Tensor& p, float* dst) {
  const Tensor g = p.grad();
  const std::size_t bytes = std::size_t(p.numel()) * sizeof(float);
  if (g.defined())
    std::memcpy(dst, g.contiguous().data_ptr<float>(), bytes);
  else
    std::memset(dst, 0, bytes);
}

}  // namespace attn::distributed::detail

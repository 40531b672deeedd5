// Iterating over the elements of strided operands in row-major order: the loop under every
// element-wise kernel whose operands are views (broadcast, transposed, sliced).
#pragma once

#include <attn/common.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace attn::kernels {

// Calls f(offsets) for every element of `shape` in row-major order, where offsets[k] is the
// element offset of operand k given its strides (broadcast dims have stride 0).
template <std::size_t N, typename F>
void strided_loop(const Shape& shape, const std::array<const Shape*, N>& strides,
                  std::array<int64_t, N> base, F&& f) {
  const int64_t nd = int64_t(shape.size());
  for (int64_t d = 0; d < nd; ++d)
    if (shape[d] == 0) return;
  if (nd == 0) {
    f(base);
    return;
  }
  std::vector<int64_t> idx(nd, 0);
  std::array<int64_t, N> inner;
  for (std::size_t k = 0; k < N; ++k) inner[k] = (*strides[k])[nd - 1];
  const int64_t n_inner = shape[nd - 1];
  while (true) {
    std::array<int64_t, N> off = base;
    for (int64_t i = 0; i < n_inner; ++i) {
      f(off);
      for (std::size_t k = 0; k < N; ++k) off[k] += inner[k];
    }
    int64_t d = nd - 2;
    for (; d >= 0; --d) {
      ++idx[d];
      for (std::size_t k = 0; k < N; ++k) base[k] += (*strides[k])[d];
      if (idx[d] < shape[d]) break;
      for (std::size_t k = 0; k < N; ++k) base[k] -= (*strides[k])[d] * shape[d];
      idx[d] = 0;
    }
    if (d < 0) return;
  }
}

}  // namespace attn::kernels

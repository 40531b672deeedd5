// The embedding lookup (float32, bfloat16, float16: rows copied as they are) and its gradient on
// float32 (src/backend/layer_kernels.h).
#include <algorithm>
#include <vector>

#include "../layer_kernels.h"
#include "gemm_half.h"

namespace attn::kernels {
namespace {

template <typename T>
int64_t embedding_forward(const backend::EmbeddingForward& a) {
  const auto* wp = static_cast<const T*>(a.weight);
  auto* op = static_cast<T*>(a.out);
  const int64_t dim = a.dim;
  for (int64_t i = 0; i < a.n; ++i) {
    const int64_t r = a.index[i];
    if (r < 0 || r >= a.num) return i;
    std::copy(wp + r * dim, wp + (r + 1) * dim, op + i * dim);
  }
  return -1;
}

void embedding_backward_f32(const backend::EmbeddingBackward& a) {
  const auto* gp = static_cast<const float*>(a.dout);
  auto* dp = static_cast<float*>(a.dweight);
  const int64_t* ip = a.index;
  const int64_t dim = a.dim;
  for (int64_t i = 0; i < a.n; ++i)
    for (int64_t j = 0; j < dim; ++j) dp[ip[i] * dim + j] += gp[i * dim + j];
}

// bfloat16 / float16: the rows' sums in float, each rounded once at the end.
template <HalfKind kind>
void embedding_backward_half(const backend::EmbeddingBackward& a) {
  const int64_t dim = a.dim;
  int64_t rows = 0;
  for (int64_t i = 0; i < a.n; ++i) rows = std::max(rows, a.index[i] + 1);
  std::vector<float> g(static_cast<size_t>(a.n * dim)), dw(static_cast<size_t>(rows * dim));
  widen_half(kind, static_cast<const uint16_t*>(a.dout), g.data(), a.n * dim);
  embedding_backward_f32({a.index, g.data(), dw.data(), a.n, dim});
  // Rows never looked up keep the zeros the caller wrote.
  narrow_half(kind, dw.data(), static_cast<uint16_t*>(a.dweight), rows * dim);
}

}  // namespace
}  // namespace attn::kernels

namespace attn::backend::cpu {
const Kernels<EmbeddingForwardFn> embedding_forward = {
    kernels::embedding_forward<float>, nullptr, nullptr, kernels::embedding_forward<uint16_t>,
    kernels::embedding_forward<uint16_t>};
const Kernels<EmbeddingBackwardFn> embedding_backward = {
    kernels::embedding_backward_f32, nullptr, nullptr,
    kernels::embedding_backward_half<kernels::HalfKind::BFloat16>,
    kernels::embedding_backward_half<kernels::HalfKind::Float16>};
}  // namespace attn::backend::cpu

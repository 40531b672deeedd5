// The embedding lookup and its gradient on float32 (src/backend/layer_kernels.h).
#include <algorithm>

#include "../layer_kernels.h"

namespace attn::kernels {
namespace {

int64_t embedding_forward_f32(const backend::EmbeddingForward& a) {
  const auto* wp = static_cast<const float*>(a.weight);
  auto* op = static_cast<float*>(a.out);
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

}  // namespace
}  // namespace attn::kernels

namespace attn::backend::cpu {
const Kernels<EmbeddingForwardFn> embedding_forward = {kernels::embedding_forward_f32};
const Kernels<EmbeddingBackwardFn> embedding_backward = {kernels::embedding_backward_f32};
}  // namespace attn::backend::cpu

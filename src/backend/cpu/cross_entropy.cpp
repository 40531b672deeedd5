// Cross-entropy forward and backward on float32 logits (src/backend/layer_kernels.h).
#include <algorithm>
#include <cmath>

#include "../layer_kernels.h"
#include "threads.h"

namespace attn::kernels {
namespace {

// Rows x classes below this run on one thread (a parallel region costs more).
constexpr int64_t kMinParallelElems = 1 << 15;

// The row max m and log(sum exp(x - m)) (accumulated in double), kept apart so that
// x - m - log_sum stays exact for large logits (m + log_sum would round at m's magnitude).
struct RowLse {
  float max, log_sum;
};
RowLse row_logsumexp(const float* x, int64_t C) {
  float m = -INFINITY;
  for (int64_t c = 0; c < C; ++c) m = std::max(m, x[c]);
  // All -inf: the loss is -inf - -inf = NaN. A +inf logit: NaN too (inf - inf in the shifted sum),
  // for every target and in every gradient of the row, as PyTorch.
  if (std::isinf(m)) return {m, m > 0 ? NAN : 0.f};
  double s = 0.0;
  for (int64_t c = 0; c < C; ++c) s += std::exp(double(x[c] - m));
  return {m, float(std::log(s))};
}

void cross_entropy_forward_f32(const backend::CrossEntropyForward& a) {
  const int64_t N = a.rows, C = a.C, ignore = a.ignore_index;
  const auto* xp = static_cast<const float*>(a.x);
  const int64_t* tp = a.target;
  float* lp = a.lse;
  auto* lossp = static_cast<float*>(a.loss);
  parallel_ranges(N, threads_for(N * C, kMinParallelElems), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const RowLse l = row_logsumexp(xp + r * C, C);
      lp[2 * r] = l.max;
      lp[2 * r + 1] = l.log_sum;
      lossp[r] = tp[r] == ignore ? 0.f : (l.max - xp[r * C + tp[r]]) + l.log_sum;
    }
  });
  int64_t count = 0;
  double total = 0.0;
  for (int64_t r = 0; r < N; ++r) {
    if (tp[r] == ignore) continue;
    ++count;
    total += lossp[r];
  }
  *a.total = total;
  *a.count = count;
}

void cross_entropy_backward_f32(const backend::CrossEntropyBackward& a) {
  const int64_t N = a.rows, C = a.C, ignore = a.ignore_index;
  const auto *xp = static_cast<const float*>(a.x), *gp = static_cast<const float*>(a.dy);
  const float* lp = a.lse;
  const int64_t* tp = a.target;
  auto* dp = static_cast<float*>(a.dx);
  parallel_ranges(N, threads_for(N * C, kMinParallelElems), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* d = dp + r * C;
      if (tp[r] == ignore) {
        std::fill(d, d + C, 0.f);
        continue;
      }
      const float gr = (a.per_row ? gp[r] : gp[0]) * a.scale;
      const float* xr = xp + r * C;
      const float m = lp[2 * r], log_sum = lp[2 * r + 1];
      for (int64_t c = 0; c < C; ++c) d[c] = gr * std::exp((xr[c] - m) - log_sum);
      d[tp[r]] -= gr;
    }
  });
}

}  // namespace
}  // namespace attn::kernels

namespace attn::backend::cpu {
const Kernels<CrossEntropyForwardFn> cross_entropy_forward = {kernels::cross_entropy_forward_f32};
const Kernels<CrossEntropyBackwardFn> cross_entropy_backward = {
    kernels::cross_entropy_backward_f32};
}  // namespace attn::backend::cpu

// Drawing a token from one row of logits (sampling.h).
#include "sampling.h"

#include <algorithm>
#include <cmath>
#include <functional>

#include "../sampling_kernels.h"

namespace attn::kernels {

double temperature_probs(const float* lr, int64_t V, double temperature, int64_t top_k,
                         float* probs, std::vector<float>& top) {
  for (int64_t v = 0; v < V; ++v)  // (NaN would also break nth_element's ordering)
    if (std::isnan(lr[v])) return NAN;
  float threshold = -INFINITY;
  if (top_k > 0 && top_k < V) {  // the k-th largest value, on a copy of the values
    top.assign(lr, lr + V);
    std::nth_element(top.begin(), top.begin() + (top_k - 1), top.end(), std::greater<float>());
    threshold = top[std::size_t(top_k - 1)];
  }
  double m = -INFINITY;
  for (int64_t v = 0; v < V; ++v)
    if (lr[v] >= threshold) m = std::max(m, double(lr[v]) / temperature);
  double total = 0.0;
  for (int64_t v = 0; v < V; ++v) {
    const double p = lr[v] >= threshold ? std::exp(double(lr[v]) / temperature - m) : 0.0;
    probs[v] = float(p);
    total += p;
  }
  return total;
}

int64_t inverse_cdf(const float* probs, int64_t V, double u) {
  double acc = 0.0;
  int64_t pick = -1;
  for (int64_t v = 0; v < V; ++v) {
    if (probs[v] <= 0.f) continue;
    acc += double(probs[v]);
    pick = v;
    if (u < acc) break;
  }
  return pick;
}

}  // namespace attn::kernels

namespace attn::kernels {
namespace {

int64_t sample_rows_f32(const backend::SampleRows& a) {
  const auto* logits = static_cast<const float*>(a.logits);
  std::vector<float> probs(static_cast<std::size_t>(a.V)), scratch;
  for (int64_t b = 0; b < a.B; ++b) {
    const double total =
        temperature_probs(logits + b * a.V, a.V, a.temperature, a.top_k, probs.data(), scratch);
    if (!(total > 0.0) || !std::isfinite(total)) return b;
    a.out[b] = inverse_cdf(probs.data(), a.V, a.u[b] * total);
  }
  return -1;
}

}  // namespace
}  // namespace attn::kernels

namespace attn::backend::cpu {
const Kernels<SampleRowsFn> sample_rows = {kernels::sample_rows_f32};
}  // namespace attn::backend::cpu

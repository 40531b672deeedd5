// Gradient clipping: torch.nn.utils.clip_grad_norm_ (any norm_type) and clip_grad_value_.
#include <attn/autograd.h>
#include <attn/ops.h>
#include <attn/optim.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "../tensor/internal.h"

namespace attn::optim {

using detail::fail;

namespace {

// The gradients of the parameters that have one (float32, else attn::Error naming fn).
std::vector<Tensor> grads_of(const char* fn, const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  for (const Tensor& p : params)
    if (p.defined() && p.grad().defined()) {
      if (p.grad().dtype() != Dtype::Float32)
        fail(fn, "gradients must be float32, got ", detail::tensor_desc(p.grad()));
      grads.push_back(p.grad());
    }
  return grads;
}

// The p-norm of n values, as torch.norm: inf / -inf the largest / smallest |x|, 0 the count of
// non-zeros, otherwise (sum |x|^p)^(1/p); accumulated in double, rounded to float as torch's
// float result is.
template <typename Get>
float p_norm(int64_t n, double p, Get get) {
  const double inf = std::numeric_limits<double>::infinity();
  if (p == inf || p == -inf) {
    double m = p == inf ? 0.0 : inf;
    bool nan = false;
    for (int64_t i = 0; i < n; ++i) {
      const double a = std::fabs(double(get(i)));
      nan = nan || std::isnan(a);
      m = p == inf ? std::max(m, a) : std::min(m, a);
    }
    return nan ? std::numeric_limits<float>::quiet_NaN() : float(m);
  }
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double a = std::fabs(double(get(i)));
    if (p == 0.0)
      s += a != 0.0 ? 1.0 : 0.0;
    else if (p == 1.0)
      s += a;
    else if (p == 2.0)
      s += a * a;
    else
      s += std::pow(a, p);
  }
  if (p == 0.0 || p == 1.0) return float(s);
  if (p == 2.0) return float(std::sqrt(s));
  return float(std::pow(s, 1.0 / p));
}

}  // namespace

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  const char* fn = "clip_grad_norm_";
  if (std::isnan(norm_type)) fail(fn, "norm_type must be a number, got nan");
  if (std::isnan(max_norm)) fail(fn, "max_norm must be a number, got nan");
  NoGradGuard no_grad;
  std::vector<Tensor> grads = grads_of(fn, params);
  if (grads.empty()) return 0.0;
  // torch: the norm of the per-tensor norms (each a float), or the largest for inf.
  std::vector<float> norms;
  for (const Tensor& g : grads) {
    const Tensor c = g.contiguous();
    const float* d = c.data_ptr<float>();
    norms.push_back(p_norm(c.numel(), norm_type, [d](int64_t i) { return d[i]; }));
  }
  const float total =
      norms.size() == 1 ? norms[0] : p_norm(int64_t(norms.size()), norm_type, [&norms](int64_t i) {
        return norms[std::size_t(i)];
      });
  if (!std::isfinite(total) && error_if_nonfinite)
    fail(fn, "The total norm of order ", norm_type,
         " for gradients from `parameters` is non-finite, so it cannot be clipped. To disable "
         "this error and scale the gradients by the non-finite norm anyway, set "
         "`error_if_nonfinite=False`");
  // As torch computes it in float: max_norm * (1 / (total + 1e-6)), clamped to at most 1 (NaN
  // stays NaN), and every gradient multiplied by it.
  float coef = (1.0f / (total + 1e-6f)) * float(max_norm);
  if (coef > 1.0f) coef = 1.0f;
  if (coef != 1.0f) {
    for (Tensor& g : grads) {
      if (!g.is_contiguous()) {
        g.mul_(double(coef));
        continue;
      }
      float* d = g.data_ptr<float>();
      for (int64_t i = 0, n = g.numel(); i < n; ++i) d[i] *= coef;
      detail::bump_version(g);
    }
  }
  return double(total);
}

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm,
                       bool error_if_nonfinite) {
  return clip_grad_norm_(params, max_norm, 2.0, error_if_nonfinite);
}

void clip_grad_value_(const std::vector<Tensor>& params, double clip_value) {
  const char* fn = "clip_grad_value_";
  if (std::isnan(clip_value)) fail(fn, "clip_value must be a number, got nan");
  NoGradGuard no_grad;
  const float hi = float(clip_value), lo = -hi;
  for (Tensor& g : grads_of(fn, params)) {
    // A strided gradient is clamped in a contiguous copy, copied back.
    Tensor c = g.is_contiguous() ? g : g.contiguous();
    float* d = c.data_ptr<float>();
    // torch's clamp: NaN stays NaN; min(max(x, lo), hi).
    for (int64_t i = 0, n = c.numel(); i < n; ++i)
      if (!std::isnan(d[i])) d[i] = std::min(std::max(d[i], lo), hi);
    if (c.impl() != g.impl())
      g.copy_(c);
    else
      detail::bump_version(g);
  }
}

}  // namespace attn::optim

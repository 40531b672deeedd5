// Gradient clipping: torch.nn.utils.clip_grad_norm_ (any norm_type), its two halves (the total
// norm, and clip_grads_with_norm_) and clip_grad_value_.
#include <attn/autograd.h>
#include <attn/ops.h>
#include <attn/optim.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "../backend/cpu/dot.h"
#include "../backend/cpu/threads.h"
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

int threads_for(const std::vector<Tensor>& grads) {
  int64_t n = 0;
  for (const Tensor& g : grads) n += g.numel();
  return kernels::threads_for(n);
}

// torch: the norm of the per-tensor norms (each a float), or the largest for inf. Each tensor's
// norm is one thread's, so the result does not depend on the thread count.
float total_norm(const std::vector<Tensor>& grads, double norm_type) {
  if (grads.empty()) return 0.0f;
  std::vector<float> norms(grads.size());
  std::vector<Tensor> cs(grads.size());
  for (std::size_t i = 0; i < grads.size(); ++i) cs[i] = grads[i].contiguous();
  const int64_t count = int64_t(grads.size());
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads_for(grads)) if (count > 1)
  for (int64_t i = 0; i < count; ++i) {
    const Tensor& c = cs[std::size_t(i)];
    const float* d = c.data_ptr<float>();
    norms[std::size_t(i)] = norm_type == 2.0
                                ? float(std::sqrt(kernels::dot_double(d, d, c.numel())))
                                : p_norm(c.numel(), norm_type, [d](int64_t j) { return d[j]; });
  }
  return norms.size() == 1 ? norms[0]
                           : p_norm(int64_t(norms.size()), norm_type,
                                    [&norms](int64_t i) { return norms[std::size_t(i)]; });
}

// Every gradient multiplied by coef (nothing when it is 1).
void scale(std::vector<Tensor>& grads, float coef) {
  if (coef == 1.0f) return;
  for (Tensor& g : grads)
    if (!g.is_contiguous()) g.mul_(double(coef));
  const int64_t count = int64_t(grads.size());
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads_for(grads)) if (count > 1)
  for (int64_t i = 0; i < count; ++i) {
    Tensor& g = grads[std::size_t(i)];
    if (!g.is_contiguous()) continue;
    float* d = g.data_ptr<float>();
    for (int64_t j = 0, n = g.numel(); j < n; ++j) d[j] *= coef;
  }
  for (Tensor& g : grads)
    if (g.is_contiguous()) detail::bump_version(g);
}

}  // namespace

double total_grad_norm(const std::vector<Tensor>& params, double norm_type) {
  const char* fn = "total_grad_norm";
  if (std::isnan(norm_type)) fail(fn, "norm_type must be a number, got nan");
  NoGradGuard no_grad;
  return total_norm(grads_of(fn, params), norm_type);
}

void clip_grads_with_norm_(const std::vector<Tensor>& params, double max_norm, double total_norm) {
  const char* fn = "clip_grads_with_norm_";
  if (std::isnan(max_norm)) fail(fn, "max_norm must be a number, got nan");
  NoGradGuard no_grad;
  std::vector<Tensor> grads = grads_of(fn, params);
  scale(grads, clip_coefficient(total_norm, max_norm));
}

// As torch computes it in float: max_norm * (1 / (total + 1e-6)), clamped to at most 1 (NaN
// stays NaN).
float clip_coefficient(double total_norm, double max_norm) {
  const float coef = (1.0f / (float(total_norm) + 1e-6f)) * float(max_norm);
  return coef > 1.0f ? 1.0f : coef;
}

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  const char* fn = "clip_grad_norm_";
  if (std::isnan(norm_type)) fail(fn, "norm_type must be a number, got nan");
  if (std::isnan(max_norm)) fail(fn, "max_norm must be a number, got nan");
  NoGradGuard no_grad;
  std::vector<Tensor> grads = grads_of(fn, params);
  if (grads.empty()) return 0.0;
  const float total = total_norm(grads, norm_type);
  if (!std::isfinite(total) && error_if_nonfinite)
    fail(fn, "The total norm of order ", norm_type,
         " for gradients from `parameters` is non-finite, so it cannot be clipped. To disable "
         "this error and scale the gradients by the non-finite norm anyway, set "
         "`error_if_nonfinite=False`");
  scale(grads, clip_coefficient(total, max_norm));
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

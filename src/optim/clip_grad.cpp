// Gradient clipping: torch.nn.utils.clip_grad_norm_ (any norm_type), its two halves (the total
// norm, and clip_grads_with_norm_) and clip_grad_value_.
#include <attn/autograd.h>
#include <attn/ops.h>
#include <attn/optim.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "../ops/optim_ops.h"
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

// torch: the norm of the per-tensor norms (each a float), or the largest for inf. Each tensor's
// norm is one thread's, so the result does not depend on the thread count.
float total_norm(const char* fn, const std::vector<Tensor>& grads, double norm_type) {
  if (grads.empty()) return 0.0f;
  const std::vector<float> norms = detail::foreach_norm(fn, grads, norm_type);
  return norms.size() == 1 ? norms[0] : detail::norm_of(norms, norm_type);
}

// Every gradient multiplied by coef (nothing when it is 1).
void scale(const char* fn, std::vector<Tensor>& grads, float coef) {
  if (coef == 1.0f) return;
  detail::foreach_mul_(fn, grads, coef);
}

}  // namespace

double total_grad_norm(const std::vector<Tensor>& params, double norm_type) {
  const char* fn = "total_grad_norm";
  if (std::isnan(norm_type)) fail(fn, "norm_type must be a number, got nan");
  NoGradGuard no_grad;
  return total_norm(fn, grads_of(fn, params), norm_type);
}

void clip_grads_with_norm_(const std::vector<Tensor>& params, double max_norm, double total_norm) {
  const char* fn = "clip_grads_with_norm_";
  if (std::isnan(max_norm)) fail(fn, "max_norm must be a number, got nan");
  NoGradGuard no_grad;
  std::vector<Tensor> grads = grads_of(fn, params);
  scale(fn, grads, clip_coefficient(total_norm, max_norm));
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
  const float total = total_norm(fn, grads, norm_type);
  if (!std::isfinite(total) && error_if_nonfinite)
    fail(fn, "The total norm of order ", norm_type,
         " for gradients from `parameters` is non-finite, so it cannot be clipped. To disable "
         "this error and scale the gradients by the non-finite norm anyway, set "
         "`error_if_nonfinite=False`");
  scale(fn, grads, clip_coefficient(total, max_norm));
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
  std::vector<Tensor> grads = grads_of(fn, params);
  detail::foreach_clamp_(fn, grads, lo, hi);
}

}  // namespace attn::optim

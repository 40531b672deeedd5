// Gradient clipping: torch.nn.utils.clip_grad_norm_ (any norm_type), its two halves (the total
// norm, and clip_grads_with_norm_) and clip_grad_value_.
#include <attn/autograd.h>
#include <attn/half.h>
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

// The gradients of the parameters that have one (float32, bfloat16 or float16, else attn::Error
// naming fn).
std::vector<Tensor> grads_of(const char* fn, const std::vector<Tensor>& params) {
  std::vector<Tensor> grads;
  for (const Tensor& p : params)
    if (p.defined() && p.grad().defined()) {
      const Dtype dt = p.grad().dtype();
      if (dt != Dtype::Float32 && !is_reduced_float(dt))
        fail(fn, "gradients must be float32, bfloat16 or float16, got ",
             detail::tensor_desc(p.grad()));
      grads.push_back(p.grad());
    }
  return grads;
}

// The dtype of torch's total norm: the gradients' one dtype, float32 where they mix (torch.stack
// of the per-tensor norms promotes bfloat16 with float16 or float32 to float32).
Dtype norm_dtype(const std::vector<Tensor>& grads) {
  for (const Tensor& g : grads)
    if (g.dtype() != grads[0].dtype()) return Dtype::Float32;
  return grads.empty() ? Dtype::Float32 : grads[0].dtype();
}

// x rounded to dtype (float32: x).
float round_to(Dtype dtype, float x) {
  if (dtype == Dtype::BFloat16) return bf16_bits_to_float(float_to_bf16_bits(x));
  if (dtype == Dtype::Float16) return fp16_bits_to_float(float_to_fp16_bits(x));
  return x;
}

// torch: the norm of the per-tensor norms (each a float rounded to its tensor's dtype), or the
// largest for inf, rounded to norm_dtype. Each tensor's norm is one thread's, so the result does
// not depend on the thread count.
float total_norm(const char* fn, const std::vector<Tensor>& grads, double norm_type) {
  if (grads.empty()) return 0.0f;
  const std::vector<float> norms = detail::foreach_norm(fn, grads, norm_type);
  return norms.size() == 1 ? norms[0]
                           : round_to(norm_dtype(grads), detail::norm_of(norms, norm_type));
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
  scale(fn, grads, clip_coefficient(total_norm, max_norm, norm_dtype(grads)));
}

// As torch computes it on a tensor of `dtype`: R(R(1 / R(total + 1e-6)) * max_norm) (its
// max_norm / t is t.reciprocal() * max_norm), clamped to at most 1 (NaN stays NaN).
float clip_coefficient(double total_norm, double max_norm, Dtype dtype) {
  const float t = round_to(dtype, float(total_norm) + 1e-6f);
  const float coef = round_to(dtype, round_to(dtype, 1.0f / t) * float(max_norm));
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
  scale(fn, grads, clip_coefficient(total, max_norm, norm_dtype(grads)));
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

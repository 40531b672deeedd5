// AdamW, gradient-norm clipping and the cosine learning-rate schedule.
#include <attn/autograd.h>
#include <attn/ops.h>
#include <attn/optim.h>

#include <cmath>
#include <numbers>

#include "../kernels/cpu/vmath.h"
#include "../tensor/internal.h"
#include "adamw_kernel.h"

namespace attn::optim {

using detail::fail;

namespace kernels {

// One parameter's update, fused: the five element-wise passes of torch's single-tensor AdamW in
// one loop, with the same operations in the same order per element.
ATTN_VMATH_CLONES
void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, float decay, float beta1,
                  float one_minus_beta1, float beta2, float one_minus_beta2, float bc2_sqrt,
                  float eps, float neg_step_size) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    float pi = p[i] * decay;
    const float mi = m[i] * beta1 + one_minus_beta1 * gi;
    const float vi = v[i] * beta2 + one_minus_beta2 * (gi * gi);
    const float denom = std::sqrt(vi) / bc2_sqrt + eps;
    pi = pi + neg_step_size * (mi / denom);
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
  }
}

void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, int64_t step,
                  const AdamWOptions& o, double weight_decay) {
  const double bc1 = 1.0 - std::pow(o.beta1, double(step));
  const double bc2 = 1.0 - std::pow(o.beta2, double(step));
  const double step_size = o.lr / bc1;
  adamw_update(p, g, m, v, n, float(1.0 - o.lr * weight_decay), float(o.beta1),
               float(1.0 - o.beta1), float(o.beta2), float(1.0 - o.beta2), float(std::sqrt(bc2)),
               float(o.eps), float(-step_size));
}

}  // namespace kernels

namespace {

void check_options(const AdamWOptions& o) {
  const char* fn = "AdamW";
  if (!(o.lr >= 0.0)) fail(fn, "invalid learning rate ", o.lr);
  if (!(o.eps >= 0.0)) fail(fn, "invalid epsilon value ", o.eps);
  if (!(o.beta1 >= 0.0 && o.beta1 < 1.0)) fail(fn, "invalid beta1 ", o.beta1, " (need [0, 1))");
  if (!(o.beta2 >= 0.0 && o.beta2 < 1.0)) fail(fn, "invalid beta2 ", o.beta2, " (need [0, 1))");
  if (!(o.weight_decay >= 0.0)) fail(fn, "invalid weight_decay value ", o.weight_decay);
}

}  // namespace

AdamW::AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options)
    : groups_(std::move(groups)), options_(options) {
  check_options(options_);
  std::size_t n = 0;
  for (std::size_t gi = 0; gi < groups_.size(); ++gi) {
    const ParamGroup& g = groups_[gi];
    if (!(g.weight_decay >= 0.0))
      fail("AdamW", "invalid weight_decay ", g.weight_decay, " in parameter group ", gi);
    for (std::size_t i = 0; i < g.params.size(); ++i) {
      const Tensor& p = g.params[i];
      if (!p.defined() || p.dtype() != Dtype::Float32 || !p.requires_grad() || !p.is_leaf())
        fail("AdamW", "parameter ", i, " of group ", gi,
             " must be a float32 leaf tensor that requires grad, got ",
             p.defined() ? detail::tensor_desc(p) : std::string("an undefined tensor"));
      if (!p.is_contiguous())
        fail("AdamW", "parameter ", i, " of group ", gi, " must be contiguous");
      // The same tensor twice would be updated twice per step.
      for (const ParamGroup& h : groups_)
        for (const Tensor& q : h.params)
          if (&q != &p && q.impl() == p.impl())
            fail("AdamW", "parameter ", i, " of group ", gi, " ", shape_str(p.shape()),
                 " appears more than once");
      ++n;
    }
  }
  state_.resize(n);
}

AdamW::AdamW(const std::vector<Tensor>& params, const AdamWOptions& options)
    : AdamW(std::vector<ParamGroup>{ParamGroup{params, options.weight_decay}}, options) {}

void AdamW::set_lr(double lr) {
  if (!(lr >= 0.0)) fail("AdamW", "invalid learning rate ", lr);
  options_.lr = lr;
}

void AdamW::step() {
  NoGradGuard no_grad;
  const AdamWOptions& o = options_;
  std::size_t k = 0;
  for (ParamGroup& group : groups_) {
    for (Tensor& p : group.params) {
      State& s = state_[k++];
      Tensor g = p.grad();
      if (!g.defined()) continue;
      if (g.shape() != p.shape())
        fail("AdamW", "gradient ", shape_str(g.shape()), " does not match parameter ",
             shape_str(p.shape()));
      g = g.contiguous();
      if (!s.exp_avg.defined()) {
        s.exp_avg = zeros(p.shape());
        s.exp_avg_sq = zeros(p.shape());
      }
      s.step += 1;
      kernels::adamw_update(p.data_ptr<float>(), g.data_ptr<float>(), s.exp_avg.data_ptr<float>(),
                            s.exp_avg_sq.data_ptr<float>(), p.numel(), s.step, o,
                            group.weight_decay);
      detail::bump_version(p);
    }
  }
}

void AdamW::zero_grad(bool set_to_none) {
  for (ParamGroup& group : groups_)
    for (Tensor& p : group.params) {
      if (set_to_none) {
        p.set_grad(Tensor());
      } else if (p.grad().defined()) {
        Tensor g = p.grad();
        g.zero_();
      }
    }
}

nn::NamedTensors AdamW::state_dict() const {
  nn::NamedTensors out;
  for (std::size_t i = 0; i < state_.size(); ++i) {
    const State& s = state_[i];
    if (!s.exp_avg.defined()) continue;
    const std::string prefix = "state." + std::to_string(i) + ".";
    out.emplace_back(prefix + "exp_avg", s.exp_avg.clone());
    out.emplace_back(prefix + "exp_avg_sq", s.exp_avg_sq.clone());
    out.emplace_back(prefix + "step", tensor(NestedList(s.step), Dtype::Int64));
  }
  return out;
}

void AdamW::load_state_dict(const nn::NamedTensors& state) {
  const char* fn = "AdamW.load_state_dict";
  std::vector<const Tensor*> params;
  for (const ParamGroup& g : groups_)
    for (const Tensor& p : g.params) params.push_back(&p);
  std::vector<State> fresh(state_.size());
  std::vector<int> seen(state_.size(), 0);
  for (const auto& [name, t] : state) {
    // state.{i}.{exp_avg,exp_avg_sq,step}
    std::size_t i = 0;
    std::string field;
    {
      const std::string pre = "state.";
      const auto dot = name.find('.', pre.size());
      bool ok = name.rfind(pre, 0) == 0 && dot != std::string::npos && dot > pre.size();
      if (ok) {
        const std::string num = name.substr(pre.size(), dot - pre.size());
        ok = num.size() <= 9 && num.find_first_not_of("0123456789") == std::string::npos;
        if (ok) i = std::stoul(num);
        field = name.substr(dot + 1);
      }
      if (!ok || (field != "exp_avg" && field != "exp_avg_sq" && field != "step"))
        fail(fn, "unexpected key '", name, "'");
    }
    if (i >= params.size())
      fail(fn, "key '", name, "' refers to parameter ", i, " but the optimizer has ",
           params.size());
    if (!t.defined()) fail(fn, "'", name, "' is undefined");
    if (field == "step") {
      if (t.dtype() != Dtype::Int64 || t.numel() != 1)
        fail(fn, "'", name, "' must be one int64, got ", detail::tensor_desc(t));
      const int64_t step = t.contiguous().data_ptr<int64_t>()[0];
      if (step < 1) fail(fn, "'", name, "' must be >= 1, got ", step);
      fresh[i].step = step;
      seen[i] |= 1;
    } else {
      if (t.dtype() != Dtype::Float32 || t.shape() != params[i]->shape())
        fail(fn, "'", name, "' ", detail::tensor_desc(t), " does not match parameter ", i, " ",
             shape_str(params[i]->shape()));
      (field == "exp_avg" ? fresh[i].exp_avg : fresh[i].exp_avg_sq) = t.contiguous().clone();
      seen[i] |= field == "exp_avg" ? 2 : 4;
    }
  }
  for (std::size_t i = 0; i < seen.size(); ++i)
    if (seen[i] != 0 && seen[i] != 7)
      fail(fn, "incomplete state for parameter ", i,
           " (need exp_avg, exp_avg_sq and step together)");
  state_ = std::move(fresh);
}

double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm,
                       bool error_if_nonfinite) {
  const char* fn = "clip_grad_norm_";
  if (!(max_norm >= 0.0)) fail(fn, "max_norm must be non-negative, got ", max_norm);
  NoGradGuard no_grad;
  std::vector<Tensor> grads;
  for (const Tensor& p : params)
    if (p.defined() && p.grad().defined()) grads.push_back(p.grad());
  if (grads.empty()) return 0.0;
  // torch: norm of the per-tensor norms (each accumulated in float); accumulated here in double.
  double total_sq = 0.0;
  for (const Tensor& g : grads) {
    if (g.dtype() != Dtype::Float32) fail(fn, "gradients must be float32");
    const Tensor c = g.contiguous();
    const float* d = c.data_ptr<float>();
    double s = 0.0;
    for (int64_t i = 0, n = c.numel(); i < n; ++i) s += double(d[i]) * double(d[i]);
    total_sq += s;
  }
  const double total = std::sqrt(total_sq);
  if (!std::isfinite(total) && error_if_nonfinite)
    fail(fn, "the total norm of the gradients is ", total,
         ", so they cannot be clipped (error_if_nonfinite=true)");
  // As torch: multiply by min(1, max_norm / (total + 1e-6)) (a non-finite total scales by 0
  // or NaN).
  const double coef = std::fmin(max_norm / (total + 1e-6), 1.0);
  if (coef < 1.0 || std::isnan(coef)) {
    const float c = float(coef);
    for (Tensor& g : grads) {
      float* d = g.data_ptr<float>();
      if (!g.is_contiguous()) {
        g.mul_(double(c));
        continue;
      }
      for (int64_t i = 0, n = g.numel(); i < n; ++i) d[i] *= c;
      detail::bump_version(g);
    }
  }
  return total;
}

double cosine_lr(int64_t it, double lr, double min_lr, int64_t warmup_iters,
                 int64_t lr_decay_iters) {
  if (it < warmup_iters) return lr * double(it + 1) / double(warmup_iters + 1);
  if (it > lr_decay_iters) return min_lr;
  if (lr_decay_iters <= warmup_iters) return min_lr;
  const double ratio = double(it - warmup_iters) / double(lr_decay_iters - warmup_iters);
  const double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * ratio));
  return min_lr + coeff * (lr - min_lr);
}

}  // namespace attn::optim

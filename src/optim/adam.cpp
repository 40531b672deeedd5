// Adam and AdamW: torch.optim's single-tensor updates, fused into one loop per parameter.
#include <attn/autograd.h>
#include <attn/ops.h>
#include <attn/optim.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "../ops/optim_ops.h"
#include "../tensor/internal.h"
#include "state_names.h"

namespace attn::optim {

using detail::fail;

namespace {

ParamGroup adam_defaults(const AdamOptions& o) {
  ParamGroup d;
  d.lr = o.lr;
  d.beta1 = o.beta1;
  d.beta2 = o.beta2;
  d.eps = o.eps;
  d.weight_decay = o.weight_decay;
  d.amsgrad = o.amsgrad;
  d.maximize = o.maximize;
  return d;
}

AdamOptions from_adamw(const AdamWOptions& o) {
  return AdamOptions{o.lr, o.beta1, o.beta2, o.eps, o.weight_decay, o.amsgrad, o.maximize};
}

}  // namespace

Adam::Adam(std::string name, std::vector<ParamGroup> groups, const AdamOptions& options,
           bool decoupled)
    : Optimizer(std::move(name), adam_defaults(options)), decoupled_(decoupled) {
  check_group(defaults_);
  add_groups(std::move(groups));
}

Adam::Adam(std::vector<ParamGroup> groups, const AdamOptions& options)
    : Adam("Adam", std::move(groups), options, false) {}

Adam::Adam(const std::vector<Tensor>& params, const AdamOptions& options)
    : Adam(std::vector<ParamGroup>{ParamGroup{params}}, options) {}

AdamW::AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options)
    : Adam("AdamW", std::move(groups), from_adamw(options), true) {}

AdamW::AdamW(const std::vector<Tensor>& params, const AdamWOptions& options)
    : AdamW(std::vector<ParamGroup>{ParamGroup{params}}, options) {}

AdamWOptions AdamW::options() const {
  return AdamWOptions{lr(),
                      *defaults_.beta1,
                      *defaults_.beta2,
                      *defaults_.eps,
                      *defaults_.weight_decay,
                      *defaults_.amsgrad,
                      *defaults_.maximize};
}

void Adam::check_group(const ParamGroup& g) const {
  const char* fn = name_.c_str();
  // torch's words: "Invalid learning rate: -1.0", ...
  if (!(*g.lr >= 0.0)) fail(fn, "Invalid learning rate: ", *g.lr);
  if (!(*g.eps >= 0.0)) fail(fn, "Invalid epsilon value: ", *g.eps);
  if (!(*g.beta1 >= 0.0 && *g.beta1 < 1.0))
    fail(fn, "Invalid beta parameter at index 0: ", *g.beta1);
  if (!(*g.beta2 >= 0.0 && *g.beta2 < 1.0))
    fail(fn, "Invalid beta parameter at index 1: ", *g.beta2);
  if (!(*g.weight_decay >= 0.0)) fail(fn, "Invalid weight_decay value: ", *g.weight_decay);
  if (g.initial_lr && !(*g.initial_lr >= 0.0))
    fail(fn, "Invalid initial learning rate: ", *g.initial_lr);
}

void Adam::step() { step_scaled(1.0f); }

void Adam::step_scaled(float grad_scale) {
  NoGradGuard no_grad;
  state_.resize(num_params());
  // One update per parameter with a gradient, gathered first and then run over all parameters
  // together: their elements are split evenly across the threads in one parallel region (a small
  // parameter does not get a region of its own). Every element sees the same arithmetic whatever
  // the split.
  std::vector<detail::AdamUpdate> updates;
  std::vector<Tensor> keep;  // contiguous copies of strided gradients, alive until the updates ran
  std::vector<const Tensor*> updated;
  std::size_t k = 0;
  for (ParamGroup& group : groups_) {
    const double lr = *group.lr, beta1 = *group.beta1, beta2 = *group.beta2, eps = *group.eps;
    const double wd = *group.weight_decay;
    const bool amsgrad = *group.amsgrad, maximize = *group.maximize;
    for (Tensor& p : group.params) {
      State& s = state_[k++];
      Tensor g = p.grad();
      if (!g.defined()) continue;
      names::check_grad(name_.c_str(), g, p);
      if (!g.is_contiguous()) keep.push_back(g = g.contiguous());
      if (!s.exp_avg.defined()) {  // in the parameter's dtype, as torch's zeros_like
        s.exp_avg = zeros(p.shape(), p.dtype());
        s.exp_avg_sq = zeros(p.shape(), p.dtype());
      }
      if (amsgrad && !s.max_exp_avg_sq.defined()) s.max_exp_avg_sq = zeros(p.shape(), p.dtype());
      s.step += 1;
      const double bc1 = 1.0 - std::pow(beta1, double(s.step));
      const double bc2 = 1.0 - std::pow(beta2, double(s.step));
      const double step_size = lr / bc1;
      updates.push_back({p, g, s.exp_avg, s.exp_avg_sq, amsgrad ? s.max_exp_avg_sq : Tensor(),
                         decoupled_ && !amsgrad && !maximize, maximize ? -1.0f : 1.0f,
                         decoupled_ ? 0.0f : float(wd), decoupled_ ? float(1.0 - lr * wd) : 1.0f,
                         float(beta1), float(1.0 - beta1), float(beta2), float(1.0 - beta2),
                         float(std::sqrt(bc2)), float(eps), float(-step_size)});
      updated.push_back(&p);
    }
  }
  detail::fused_adam_(name_.c_str(), updates, grad_scale);
  for (const Tensor* p : updated) detail::bump_version(*p);
}

nn::NamedTensors Adam::state_dict() const {
  nn::NamedTensors out;
  for (std::size_t i = 0; i < state_.size(); ++i) {
    const State& s = state_[i];
    if (!s.exp_avg.defined()) continue;
    const std::string prefix = "state." + std::to_string(i) + ".";
    out.emplace_back(prefix + "exp_avg", s.exp_avg.clone());
    out.emplace_back(prefix + "exp_avg_sq", s.exp_avg_sq.clone());
    if (s.max_exp_avg_sq.defined())
      out.emplace_back(prefix + "max_exp_avg_sq", s.max_exp_avg_sq.clone());
    out.emplace_back(prefix + "step", tensor(NestedList(s.step), Dtype::Int64));
  }
  return out;
}

void Adam::load_state(const nn::NamedTensors& state, bool adopt) {
  const std::string fn_name = name_ + ".load_state_dict";
  const char* fn = fn_name.c_str();
  const std::vector<const Tensor*> params = const_params();
  std::vector<State> fresh(params.size());
  std::vector<int> seen(params.size(), 0);
  for (const auto& [name, t] : state) {
    const names::StateKey key = names::parse_state_key(
        fn, name, {"exp_avg", "exp_avg_sq", "max_exp_avg_sq", "step"}, params.size());
    const std::size_t i = key.index;
    if (!t.defined()) fail(fn, "'", name, "' is undefined");
    if (key.field == "step") {
      fresh[i].step = names::state_step(fn, name, t, 1);
      seen[i] |= 1;
      continue;
    }
    names::check_state_like(fn, name, t, *params[i], i);
    Tensor copy = state_tensor(t, adopt);
    if (key.field == "exp_avg") {
      fresh[i].exp_avg = copy;
      seen[i] |= 2;
    } else if (key.field == "exp_avg_sq") {
      fresh[i].exp_avg_sq = copy;
      seen[i] |= 4;
    } else {
      fresh[i].max_exp_avg_sq = copy;
      seen[i] |= 8;
    }
  }
  for (std::size_t i = 0; i < seen.size(); ++i)
    if (seen[i] != 0 && (seen[i] & 7) != 7)
      fail(fn, "incomplete state for parameter ", i,
           " (need exp_avg, exp_avg_sq and step together)");
  state_ = std::move(fresh);
}

}  // namespace attn::optim

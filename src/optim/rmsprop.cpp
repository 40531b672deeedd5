// RMSprop as torch.optim.RMSprop (1.13): the square average, and with centered the gradient
// average, with momentum a buffer, all in the parameter's dtype.
#include <attn/autograd.h>
#include <attn/ops.h>
#include <attn/optim.h>

#include <cmath>

#include "../ops/optim_ops.h"
#include "../tensor/internal.h"
#include "state_names.h"

namespace attn::optim {

using detail::fail;

namespace {

ParamGroup rmsprop_defaults(const RMSpropOptions& o) {
  ParamGroup d;
  d.lr = o.lr;
  d.alpha = o.alpha;
  d.eps = o.eps;
  d.weight_decay = o.weight_decay;
  d.momentum = o.momentum;
  d.centered = o.centered;
  d.maximize = o.maximize;
  return d;
}

}  // namespace

RMSprop::RMSprop(std::vector<ParamGroup> groups, const RMSpropOptions& options)
    : Optimizer("RMSprop", rmsprop_defaults(options)) {
  check_group(defaults_);
  add_groups(std::move(groups));
}

RMSprop::RMSprop(const std::vector<Tensor>& params, const RMSpropOptions& options)
    : RMSprop(std::vector<ParamGroup>{ParamGroup{params}}, options) {}

void RMSprop::check_group(const ParamGroup& g) const {
  const char* fn = "RMSprop";
  // torch's words and order.
  if (!(*g.lr >= 0.0)) fail(fn, "Invalid learning rate: ", *g.lr);
  if (!(*g.eps >= 0.0)) fail(fn, "Invalid epsilon value: ", *g.eps);
  if (!(*g.momentum >= 0.0)) fail(fn, "Invalid momentum value: ", *g.momentum);
  if (!(*g.weight_decay >= 0.0)) fail(fn, "Invalid weight_decay value: ", *g.weight_decay);
  if (!(*g.alpha >= 0.0)) fail(fn, "Invalid alpha value: ", *g.alpha);
  if (g.initial_lr && !(*g.initial_lr >= 0.0))
    fail(fn, "Invalid initial learning rate: ", *g.initial_lr);
}

void RMSprop::step() {
  NoGradGuard no_grad;
  state_.resize(num_params());
  std::size_t k = 0;
  for (ParamGroup& group : groups_) {
    const double alpha = *group.alpha, momentum = *group.momentum;
    for (Tensor& p : group.params) {
      State& s = state_[k++];
      Tensor g = p.grad();
      if (!g.defined()) continue;
      names::check_grad("RMSprop", g, p);
      g = g.contiguous();
      if (!s.square_avg.defined()) {  // torch makes the state at the first step, zeros_like(p)
        s.square_avg = zeros(p.shape(), p.dtype());
        if (momentum > 0.0) s.momentum_buffer = zeros(p.shape(), p.dtype());
        if (*group.centered) s.grad_avg = zeros(p.shape(), p.dtype());
      }
      // A group changed after the state was made (momentum or centered switched on) finds no
      // buffer in torch (a KeyError); here it starts from zeros.
      if (momentum > 0.0 && !s.momentum_buffer.defined())
        s.momentum_buffer = zeros(p.shape(), p.dtype());
      if (*group.centered && !s.grad_avg.defined()) s.grad_avg = zeros(p.shape(), p.dtype());
      s.step += 1;
      detail::fused_rmsprop_("RMSprop", p, g, s.square_avg, *group.centered ? s.grad_avg : Tensor(),
                             momentum > 0.0 ? s.momentum_buffer : Tensor(),
                             *group.maximize ? -1.0f : 1.0f, float(*group.weight_decay),
                             float(alpha), float(1.0 - alpha), float(*group.eps), float(momentum),
                             float(-*group.lr));
      detail::bump_version(p);
    }
  }
}

nn::NamedTensors RMSprop::state_dict() const {
  nn::NamedTensors out;
  for (std::size_t i = 0; i < state_.size(); ++i) {
    const State& s = state_[i];
    if (!s.square_avg.defined()) continue;
    const std::string prefix = "state." + std::to_string(i) + ".";
    out.emplace_back(prefix + "step", tensor(NestedList(s.step), Dtype::Int64));
    out.emplace_back(prefix + "square_avg", s.square_avg.clone());
    if (s.momentum_buffer.defined())
      out.emplace_back(prefix + "momentum_buffer", s.momentum_buffer.clone());
    if (s.grad_avg.defined()) out.emplace_back(prefix + "grad_avg", s.grad_avg.clone());
  }
  return out;
}

void RMSprop::load_state(const nn::NamedTensors& state, bool adopt) {
  const char* fn = "RMSprop.load_state_dict";
  const std::vector<const Tensor*> params = const_params();
  std::vector<State> fresh(params.size());
  std::vector<int> seen(params.size(), 0);
  for (const auto& [name, t] : state) {
    const names::StateKey key = names::parse_state_key(
        fn, name, {"step", "square_avg", "momentum_buffer", "grad_avg"}, params.size());
    const std::size_t i = key.index;
    if (!t.defined()) fail(fn, "'", name, "' is undefined");
    if (key.field == "step") {
      fresh[i].step = names::state_step(fn, name, t, 0);
      seen[i] |= 1;
      continue;
    }
    names::check_state_like(fn, name, t, *params[i], i);
    Tensor copy = state_tensor(t, adopt);
    if (key.field == "square_avg") {
      fresh[i].square_avg = copy;
      seen[i] |= 2;
    } else if (key.field == "momentum_buffer") {
      fresh[i].momentum_buffer = copy;
      seen[i] |= 4;
    } else {
      fresh[i].grad_avg = copy;
      seen[i] |= 4;
    }
  }
  for (std::size_t i = 0; i < seen.size(); ++i)
    if (seen[i] != 0 && (seen[i] & 3) != 3)
      fail(fn, "incomplete state for parameter ", i, " (need square_avg and step together)");
  state_ = std::move(fresh);
}

}  // namespace attn::optim

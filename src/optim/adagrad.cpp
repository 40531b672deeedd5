// Adagrad as torch.optim.Adagrad (1.13, dense gradients): the running sum of squared gradients in
// the parameter's dtype, made for every parameter when the optimizer is.
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

ParamGroup adagrad_defaults(const AdagradOptions& o) {
  ParamGroup d;
  d.lr = o.lr;
  d.lr_decay = o.lr_decay;
  d.weight_decay = o.weight_decay;
  d.initial_accumulator_value = o.initial_accumulator_value;
  d.eps = o.eps;
  d.maximize = o.maximize;
  return d;
}

}  // namespace

Adagrad::Adagrad(std::vector<ParamGroup> groups, const AdagradOptions& options)
    : Optimizer("Adagrad", adagrad_defaults(options)) {
  check_group(defaults_);
  add_groups(std::move(groups));
  init_state();
}

Adagrad::Adagrad(const std::vector<Tensor>& params, const AdagradOptions& options)
    : Adagrad(std::vector<ParamGroup>{ParamGroup{params}}, options) {}

void Adagrad::check_group(const ParamGroup& g) const {
  const char* fn = "Adagrad";
  // torch's words and order.
  if (!(*g.lr >= 0.0)) fail(fn, "Invalid learning rate: ", *g.lr);
  if (!(*g.lr_decay >= 0.0)) fail(fn, "Invalid lr_decay value: ", *g.lr_decay);
  if (!(*g.weight_decay >= 0.0)) fail(fn, "Invalid weight_decay value: ", *g.weight_decay);
  if (!(*g.initial_accumulator_value >= 0.0))
    fail(fn, "Invalid initial_accumulator_value value: ", *g.initial_accumulator_value);
  if (!(*g.eps >= 0.0)) fail(fn, "Invalid epsilon value: ", *g.eps);
  if (g.initial_lr && !(*g.initial_lr >= 0.0))
    fail(fn, "Invalid initial learning rate: ", *g.initial_lr);
}

// Every parameter without a state gets step 0 and a sum full of the optimizer's
// initial_accumulator_value (torch's full_like, in the parameter's dtype). As in torch, that is
// the constructor's value: a group's own initial_accumulator_value is kept but not used.
void Adagrad::init_state() {
  state_.resize(num_params());
  std::size_t k = 0;
  for (const ParamGroup& group : groups_)
    for (const Tensor& p : group.params) {
      State& s = state_[k++];
      if (!s.sum.defined())
        s.sum = full(p.shape(), *defaults_.initial_accumulator_value, p.dtype());
    }
}

void Adagrad::step() {
  NoGradGuard no_grad;
  init_state();
  std::size_t k = 0;
  for (ParamGroup& group : groups_) {
    for (Tensor& p : group.params) {
      State& s = state_[k++];
      Tensor g = p.grad();
      if (!g.defined()) continue;
      names::check_grad("Adagrad", g, p);
      g = g.contiguous();
      s.step += 1;
      // torch: clr = lr / (1 + (step - 1) * lr_decay) in Python floats (double).
      const double clr = *group.lr / (1.0 + double(s.step - 1) * *group.lr_decay);
      detail::fused_adagrad_("Adagrad", p, g, s.sum, *group.maximize ? -1.0f : 1.0f,
                             float(*group.weight_decay), float(*group.eps), float(-clr));
      detail::bump_version(p);
    }
  }
}

nn::NamedTensors Adagrad::state_dict() const {
  nn::NamedTensors out;
  for (std::size_t i = 0; i < state_.size(); ++i) {
    const State& s = state_[i];
    if (!s.sum.defined()) continue;
    const std::string prefix = "state." + std::to_string(i) + ".";
    out.emplace_back(prefix + "step", tensor(NestedList(s.step), Dtype::Int64));
    out.emplace_back(prefix + "sum", s.sum.clone());
  }
  return out;
}

void Adagrad::load_state(const nn::NamedTensors& state, bool adopt) {
  const char* fn = "Adagrad.load_state_dict";
  const std::vector<const Tensor*> params = const_params();
  std::vector<State> fresh(params.size());
  std::vector<int> seen(params.size(), 0);
  for (const auto& [name, t] : state) {
    const names::StateKey key = names::parse_state_key(fn, name, {"step", "sum"}, params.size());
    const std::size_t i = key.index;
    if (!t.defined()) fail(fn, "'", name, "' is undefined");
    if (key.field == "step") {
      fresh[i].step = names::state_step(fn, name, t, 0);
      seen[i] |= 1;
      continue;
    }
    names::check_state_like(fn, name, t, *params[i], i);
    fresh[i].sum = state_tensor(t, adopt);
    seen[i] |= 2;
  }
  for (std::size_t i = 0; i < seen.size(); ++i)
    if (seen[i] != 0 && seen[i] != 3)
      fail(fn, "incomplete state for parameter ", i, " (need sum and step together)");
  state_ = std::move(fresh);
  init_state();  // a parameter the state leaves out starts afresh, as a new one
}

}  // namespace attn::optim

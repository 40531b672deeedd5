// SGD with momentum, dampening, Nesterov momentum and L2 weight decay, as torch.optim.SGD; on
// float32, bfloat16 or float16 parameters, the momentum buffer in the parameter's dtype.
#include <attn/autograd.h>
#include <attn/ops.h>
#include <attn/optim.h>

#include <cmath>
#include <cstring>

#include "../ops/optim_ops.h"
#include "../tensor/internal.h"
#include "state_names.h"

namespace attn::optim {

using detail::fail;

namespace {

ParamGroup sgd_defaults(const SGDOptions& o) {
  ParamGroup d;
  d.lr = o.lr;
  d.momentum = o.momentum;
  d.dampening = o.dampening;
  d.weight_decay = o.weight_decay;
  d.nesterov = o.nesterov;
  d.maximize = o.maximize;
  return d;
}

}  // namespace

SGD::SGD(std::vector<ParamGroup> groups, const SGDOptions& options)
    : Optimizer("SGD", sgd_defaults(options)) {
  check_group(defaults_);
  add_groups(std::move(groups));
}

SGD::SGD(const std::vector<Tensor>& params, const SGDOptions& options)
    : SGD(std::vector<ParamGroup>{ParamGroup{params}}, options) {}

void SGD::check_group(const ParamGroup& g) const {
  const char* fn = "SGD";
  if (!(*g.lr >= 0.0)) fail(fn, "Invalid learning rate: ", *g.lr);
  if (!(*g.momentum >= 0.0)) fail(fn, "Invalid momentum value: ", *g.momentum);
  if (!(*g.weight_decay >= 0.0)) fail(fn, "Invalid weight_decay value: ", *g.weight_decay);
  if (!std::isfinite(*g.dampening)) fail(fn, "Invalid dampening value: ", *g.dampening);
  if (*g.nesterov && (*g.momentum <= 0.0 || *g.dampening != 0.0))
    fail(fn, "Nesterov momentum requires a momentum and zero dampening (momentum ", *g.momentum,
         ", dampening ", *g.dampening, ")");
  if (g.initial_lr && !(*g.initial_lr >= 0.0))
    fail(fn, "Invalid initial learning rate: ", *g.initial_lr);
}

void SGD::step() {
  NoGradGuard no_grad;
  momentum_buffer_.resize(num_params());
  std::size_t k = 0;
  for (ParamGroup& group : groups_) {
    const double momentum = *group.momentum;
    for (Tensor& p : group.params) {
      Tensor& buf = momentum_buffer_[k++];
      Tensor g = p.grad();
      if (!g.defined()) continue;
      names::check_grad("SGD", g, p);
      g = g.contiguous();
      const bool first = momentum != 0.0 && !buf.defined();
      if (first) buf = detail::make_tensor("SGD", p.shape(), p.dtype(), false);
      detail::fused_sgd_("SGD", p, g, momentum != 0.0 ? buf : Tensor(),
                         *group.maximize ? -1.0f : 1.0f, float(*group.weight_decay),
                         float(momentum), float(1.0 - *group.dampening), *group.nesterov, first,
                         float(-*group.lr));
      detail::bump_version(p);
    }
  }
}

nn::NamedTensors SGD::state_dict() const {
  nn::NamedTensors out;
  for (std::size_t i = 0; i < momentum_buffer_.size(); ++i)
    if (momentum_buffer_[i].defined())
      out.emplace_back("state." + std::to_string(i) + ".momentum_buffer",
                       momentum_buffer_[i].clone());
  return out;
}

void SGD::load_state(const nn::NamedTensors& state, bool adopt) {
  const char* fn = "SGD.load_state_dict";
  const std::vector<const Tensor*> params = const_params();
  std::vector<Tensor> fresh(params.size());
  for (const auto& [name, t] : state) {
    const names::StateKey key =
        names::parse_state_key(fn, name, {"momentum_buffer"}, params.size());
    if (!t.defined()) fail(fn, "'", name, "' is undefined");
    names::check_state_like(fn, name, t, *params[key.index], key.index);
    fresh[key.index] = state_tensor(t, adopt);
  }
  momentum_buffer_ = std::move(fresh);
}

}  // namespace attn::optim

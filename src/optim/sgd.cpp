// SGD with momentum, dampening, Nesterov momentum and L2 weight decay, as torch.optim.SGD.
#include <attn/autograd.h>
#include <attn/ops.h>
#include <attn/optim.h>

#include <cmath>
#include <cstring>

#include "../backend/cpu/vmath.h"
#include "../tensor/internal.h"
#include "state_names.h"

namespace attn::optim {

using detail::fail;

namespace kernels {

// One parameter's update, torch's operations in torch's order per element: d = g + wd p; then
// with momentum buf = momentum buf + (1 - dampening) d (or buf = d when `first`), d = nesterov ?
// d + momentum buf : buf; p = p - lr d (p + (-lr) d).
ATTN_VMATH_CLONES
void sgd_update(float* p, const float* g, float* buf, int64_t n, float gsign, float wd,
                float momentum, float one_minus_dampening, bool nesterov, bool first,
                float neg_lr) {
  for (int64_t i = 0; i < n; ++i) {
    float d = wd != 0.0f ? gsign * g[i] + wd * p[i] : gsign * g[i];
    if (buf) {
      const float b = first ? d : buf[i] * momentum + one_minus_dampening * d;
      buf[i] = b;
      d = nesterov ? d + momentum * b : b;
    }
    p[i] = p[i] + neg_lr * d;
  }
}

}  // namespace kernels

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
      if (g.shape() != p.shape() || g.dtype() != Dtype::Float32)
        fail("SGD", "gradient ", detail::tensor_desc(g), " does not match parameter ",
             detail::tensor_desc(p));
      g = g.contiguous();
      const bool first = momentum != 0.0 && !buf.defined();
      if (first) buf = detail::make_tensor("SGD", p.shape(), Dtype::Float32, false);
      kernels::sgd_update(p.data_ptr<float>(), g.data_ptr<float>(),
                          momentum != 0.0 ? buf.data_ptr<float>() : nullptr, p.numel(),
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
    if (t.dtype() != Dtype::Float32 || t.shape() != params[key.index]->shape())
      fail(fn, "'", name, "' ", detail::tensor_desc(t), " does not match parameter ", key.index,
           " ", shape_str(params[key.index]->shape()));
    fresh[key.index] = state_tensor(t, adopt);
  }
  momentum_buffer_ = std::move(fresh);
}

}  // namespace attn::optim

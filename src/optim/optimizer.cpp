// optim::Optimizer: parameter groups, their hyper-parameters and zero_grad, shared by Adam, AdamW,
// SGD, RMSprop and Adagrad.
#include <attn/autograd.h>
#include <attn/optim.h>

#include "../tensor/internal.h"
#include "state_names.h"

namespace attn::optim {

using detail::fail;

namespace {

// Copies every field set in `from` into `to` (params excepted).
void merge(ParamGroup& to, const ParamGroup& from) {
  auto take = [](auto& a, const auto& b) {
    if (b) a = b;
  };
  take(to.weight_decay, from.weight_decay);
  take(to.lr, from.lr);
  take(to.beta1, from.beta1);
  take(to.beta2, from.beta2);
  take(to.eps, from.eps);
  take(to.amsgrad, from.amsgrad);
  take(to.momentum, from.momentum);
  take(to.dampening, from.dampening);
  take(to.nesterov, from.nesterov);
  take(to.alpha, from.alpha);
  take(to.centered, from.centered);
  take(to.lr_decay, from.lr_decay);
  take(to.initial_accumulator_value, from.initial_accumulator_value);
  take(to.maximize, from.maximize);
  take(to.initial_lr, from.initial_lr);
}

// The name of a field set in g that `defaults` leaves unset (one the optimizer does not use).
const char* foreign_field(const ParamGroup& g, const ParamGroup& defaults) {
  if (g.weight_decay && !defaults.weight_decay) return "weight_decay";
  if (g.beta1 && !defaults.beta1) return "betas";
  if (g.beta2 && !defaults.beta2) return "betas";
  if (g.eps && !defaults.eps) return "eps";
  if (g.amsgrad && !defaults.amsgrad) return "amsgrad";
  if (g.momentum && !defaults.momentum) return "momentum";
  if (g.dampening && !defaults.dampening) return "dampening";
  if (g.nesterov && !defaults.nesterov) return "nesterov";
  if (g.alpha && !defaults.alpha) return "alpha";
  if (g.centered && !defaults.centered) return "centered";
  if (g.lr_decay && !defaults.lr_decay) return "lr_decay";
  if (g.initial_accumulator_value && !defaults.initial_accumulator_value)
    return "initial_accumulator_value";
  if (g.maximize && !defaults.maximize) return "maximize";
  return nullptr;
}

}  // namespace

Optimizer::Optimizer(std::string name, ParamGroup defaults)
    : name_(std::move(name)), defaults_(std::move(defaults)) {}

std::size_t Optimizer::num_params() const {
  std::size_t n = 0;
  for (const ParamGroup& g : groups_) n += g.params.size();
  return n;
}

std::vector<Tensor*> Optimizer::all_params() {
  std::vector<Tensor*> out;
  for (ParamGroup& g : groups_)
    for (Tensor& p : g.params) out.push_back(&p);
  return out;
}

std::vector<const Tensor*> Optimizer::const_params() const {
  std::vector<const Tensor*> out;
  for (const ParamGroup& g : groups_)
    for (const Tensor& p : g.params) out.push_back(&p);
  return out;
}

void Optimizer::add_groups(std::vector<ParamGroup> groups) {
  if (groups.empty()) fail(name_.c_str(), "optimizer got an empty parameter list");
  for (ParamGroup& g : groups) add_param_group(std::move(g));
}

void Optimizer::add_param_group(ParamGroup group) {
  const char* fn = name_.c_str();
  const std::size_t gi = groups_.size();
  if (const char* field = foreign_field(group, defaults_))
    fail(fn, "parameter group ", gi, " sets '", field, "', which ", name_, " does not use");
  ParamGroup g = defaults_;
  merge(g, group);
  g.params = std::move(group.params);
  check_group(g);
  for (std::size_t i = 0; i < g.params.size(); ++i) {
    const Tensor& p = g.params[i];
    // float32, bfloat16 or float16; the optimizer's state is kept in the parameter's dtype.
    const bool dtype_ok =
        p.defined() && (p.dtype() == Dtype::Float32 || is_reduced_float(p.dtype()));
    if (!dtype_ok || !p.is_leaf())
      fail(fn, "parameter ", i, " of group ", gi, " must be a ",
           "float32, bfloat16 or float16 leaf tensor, got ",
           p.defined() ? detail::tensor_desc(p) : std::string("an undefined tensor"));
    if (!p.is_contiguous()) fail(fn, "parameter ", i, " of group ", gi, " must be contiguous");
    // The same tensor twice would be updated twice per step.
    for (std::size_t j = 0; j < i; ++j)
      if (g.params[j].impl() == p.impl())
        fail(fn, "parameter ", i, " of group ", gi, " ", shape_str(p.shape()),
             " appears more than once in the group");
    for (const ParamGroup& h : groups_)
      for (const Tensor& q : h.params)
        if (q.impl() == p.impl())
          fail(fn, "some parameters appear in more than one parameter group (parameter ", i,
               " of group ", gi, " ", shape_str(p.shape()), ")");
  }
  groups_.push_back(std::move(g));
}

void Optimizer::zero_grad(bool set_to_none) {
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

double Optimizer::lr(std::size_t group) const {
  if (group >= groups_.size())
    fail(name_.c_str(), "group ", group, " out of range for ", groups_.size(), " groups");
  return *groups_[group].lr;
}

void Optimizer::set_lr(std::size_t group, double lr) {
  ParamGroup o;
  o.lr = lr;
  set_group_options(group, o);
}

void Optimizer::set_lr(double lr) {
  for (std::size_t i = 0; i < groups_.size(); ++i) set_lr(i, lr);
}

void Optimizer::set_initial_lr(std::size_t group, double lr) {
  ParamGroup o;
  o.initial_lr = lr;
  set_group_options(group, o);
}

void Optimizer::set_group_options(std::size_t group, const ParamGroup& options) {
  const char* fn = name_.c_str();
  if (group >= groups_.size())
    fail(fn, "group ", group, " out of range for ", groups_.size(), " groups");
  if (const char* field = foreign_field(options, defaults_))
    fail(fn, "parameter group ", group, " sets '", field, "', which ", name_, " does not use");
  ParamGroup g = groups_[group];
  merge(g, options);
  check_group(g);
  groups_[group] = std::move(g);
}

}  // namespace attn::optim

namespace attn::optim::names {

StateKey parse_state_key(const char* fn, const std::string& name,
                         std::initializer_list<const char*> fields, std::size_t n_params) {
  const std::string pre = "state.";
  const auto dot = name.find('.', pre.size());
  StateKey key;
  bool ok = name.rfind(pre, 0) == 0 && dot != std::string::npos && dot > pre.size();
  if (ok) {
    const std::string num = name.substr(pre.size(), dot - pre.size());
    ok = num.size() <= 9 && num.find_first_not_of("0123456789") == std::string::npos;
    if (ok) key.index = std::stoul(num);
    key.field = name.substr(dot + 1);
  }
  bool known = false;
  for (const char* f : fields) known = known || key.field == f;
  if (!ok || !known) attn::detail::fail(fn, "unexpected key '", name, "'");
  if (key.index >= n_params)
    attn::detail::fail(fn, "key '", name, "' refers to parameter ", key.index,
                       " but the optimizer has ", n_params);
  return key;
}

int64_t state_step(const char* fn, const std::string& name, const attn::Tensor& t,
                   int64_t min_step) {
  if (t.dtype() != attn::Dtype::Int64 || t.numel() != 1)
    attn::detail::fail(fn, "'", name, "' must be one int64, got ", attn::detail::tensor_desc(t));
  const int64_t step = t.contiguous().data_ptr<int64_t>()[0];
  if (step < min_step) attn::detail::fail(fn, "'", name, "' must be >= ", min_step, ", got ", step);
  return step;
}

void check_state_like(const char* fn, const std::string& name, const attn::Tensor& t,
                      const attn::Tensor& param, std::size_t i) {
  if (t.dtype() != param.dtype() || t.shape() != param.shape())
    attn::detail::fail(fn, "'", name, "' ", attn::detail::tensor_desc(t),
                       " does not match parameter ", i, " ", attn::detail::tensor_desc(param));
}

void check_grad(const char* fn, const attn::Tensor& g, const attn::Tensor& param) {
  if (g.shape() != param.shape() || g.dtype() != param.dtype())
    attn::detail::fail(fn, "gradient ", attn::detail::tensor_desc(g), " does not match parameter ",
                       attn::detail::tensor_desc(param));
}

}  // namespace attn::optim::names

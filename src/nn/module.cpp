// Module: named parameters, buffers and submodules; state_dict with PyTorch's dotted names.
#include <attn/autograd.h>
#include <attn/nn.h>
#include <attn/ops.h>

#include <optional>
#include <set>
#include <sstream>

#include "../common/error.h"

namespace attn::nn {

using detail::fail;

namespace {

void check_name(const std::string& name, const char* fn, const Module& m) {
  if (name.empty()) fail(fn, "name may not be empty (in ", m.name(), ")");
  if (name.find('.') != std::string::npos)
    fail(fn, "name \"", name, "\" may not contain \".\" (in ", m.name(), ")");
}

// "torch.Size([3, 2])", as PyTorch's load_state_dict messages print shapes.
std::string torch_size(const Shape& s) {
  std::ostringstream os;
  os << "torch.Size([";
  for (size_t i = 0; i < s.size(); ++i) os << (i ? ", " : "") << s[i];
  os << "])";
  return os.str();
}

}  // namespace

// Walks a module tree in PyTorch's order: a module's own entries, then each child's, depth first.
class ModuleAccess {
 public:
  template <typename F>
  static void walk(const Module& m, const std::string& prefix, bool recurse, F&& f) {
    f(m, prefix);
    if (!recurse) return;
    for (const auto& [name, child] : m.children_) walk(*child, prefix + name + ".", true, f);
  }
  static const std::vector<Module::Entry>& params(const Module& m) { return m.params_; }
  static const std::vector<Module::Entry>& buffers(const Module& m) { return m.buffers_; }
  static bool has_name(const Module& m, const std::string& name) {
    for (const auto& e : m.params_)
      if (e.name == name) return true;
    for (const auto& e : m.buffers_)
      if (e.name == name) return true;
    for (const auto& c : m.children_)
      if (c.first == name) return true;
    return false;
  }
};

Tensor& Module::register_parameter(const std::string& name, Tensor value, bool requires_grad) {
  const char* fn = "Module.register_parameter";
  check_name(name, fn, *this);
  if (ModuleAccess::has_name(*this, name))
    fail(fn, "attribute \"", name, "\" already exists in ", this->name());
  if (!value.defined()) fail(fn, "parameter \"", name, "\" is an undefined tensor");
  if (value.dtype() != Dtype::Float32)
    fail(fn, "parameter \"", name, "\" must be float32, got ", dtype_name(value.dtype()));
  // A parameter is a leaf, as nn.Parameter(t) is: a computed tensor is detached first.
  if (grad_fn(value)) value = value.detach();
  value.requires_grad_(requires_grad);
  params_.push_back({name, std::move(value), true});
  return params_.back().value;
}

Tensor& Module::register_buffer(const std::string& name, Tensor value, bool persistent) {
  const char* fn = "Module.register_buffer";
  check_name(name, fn, *this);
  if (ModuleAccess::has_name(*this, name))
    fail(fn, "attribute \"", name, "\" already exists in ", this->name());
  if (!value.defined()) fail(fn, "buffer \"", name, "\" is an undefined tensor");
  buffers_.push_back({name, std::move(value), persistent});
  return buffers_.back().value;
}

void Module::add_child(const std::string& name, std::shared_ptr<Module> m) {
  const char* fn = "Module.register_module";
  check_name(name, fn, *this);
  if (!m) fail(fn, "module \"", name, "\" is null");
  if (ModuleAccess::has_name(*this, name))
    fail(fn, "attribute \"", name, "\" already exists in ", this->name());
  children_.emplace_back(name, std::move(m));
}

NamedTensors Module::named_parameters(bool recurse) const {
  NamedTensors out;
  ModuleAccess::walk(*this, "", recurse, [&](const Module& m, const std::string& prefix) {
    for (const auto& e : ModuleAccess::params(m)) out.emplace_back(prefix + e.name, e.value);
  });
  return out;
}

std::vector<Tensor> Module::parameters(bool recurse) const {
  std::vector<Tensor> out;
  for (auto& [name, t] : named_parameters(recurse)) out.push_back(t);
  return out;
}

NamedTensors Module::named_buffers(bool recurse) const {
  NamedTensors out;
  ModuleAccess::walk(*this, "", recurse, [&](const Module& m, const std::string& prefix) {
    for (const auto& e : ModuleAccess::buffers(m)) out.emplace_back(prefix + e.name, e.value);
  });
  return out;
}

std::vector<std::pair<std::string, std::shared_ptr<Module>>> Module::named_children() const {
  return children_;
}

NamedTensors Module::state_dict() const {
  // PyTorch's Module._save_to_state_dict: own parameters, then own persistent buffers, then each
  // child with its name as prefix. Values are detached: they share storage with the module's
  // tensors but are outside the graph, as in PyTorch.
  NamedTensors out;
  ModuleAccess::walk(*this, "", true, [&](const Module& m, const std::string& prefix) {
    for (const auto& e : ModuleAccess::params(m))
      out.emplace_back(prefix + e.name, e.value.detach());
    for (const auto& e : ModuleAccess::buffers(m))
      if (e.persistent) out.emplace_back(prefix + e.name, e.value.detach());
  });
  return out;
}

namespace {

// load_state_dict's checks, as PyTorch words them: `shapes` holds the source's shape for each key
// (nullopt: an undefined tensor). Throws attn::Error listing every problem.
void check_state(const Module& m, const NamedTensors& own,
                 const std::map<std::string, std::optional<Shape>>& shapes, bool strict) {
  std::set<std::string> own_names;
  std::vector<std::string> missing, unexpected, errors;
  for (const auto& [name, t] : own) {
    own_names.insert(name);
    auto it = shapes.find(name);
    if (it == shapes.end()) {
      missing.push_back(name);
      continue;
    }
    if (!it->second) {
      errors.push_back("value for " + name + " is an undefined tensor");
    } else if (*it->second != t.shape()) {
      errors.push_back(
          "size mismatch for " + name + ": copying a param with shape " + torch_size(*it->second) +
          " from checkpoint, the shape in current model is " + torch_size(t.shape()) + ".");
    }
  }
  for (const auto& [name, shape] : shapes)
    if (!own_names.count(name)) unexpected.push_back(name);

  auto quoted = [](const std::vector<std::string>& v) {
    std::string s;
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", \"" : "\"") + v[i] + "\"";
    return s;
  };
  std::vector<std::string> all;
  if (strict && !missing.empty())  // PyTorch's order: missing, unexpected, then size mismatches
    all.push_back("Missing key(s) in state_dict: " + quoted(missing) + ".");
  if (strict && !unexpected.empty())
    all.push_back("Unexpected key(s) in state_dict: " + quoted(unexpected) + ".");
  all.insert(all.end(), errors.begin(), errors.end());
  if (!all.empty()) {
    std::string msg = "Error(s) in loading state_dict for " + m.name() + ":";
    for (const auto& e : all) msg += "\n\t" + e;
    fail("load_state_dict", msg);
  }
}

}  // namespace

void Module::load_state_dict(const std::map<std::string, Tensor>& state, bool strict) {
  // Everything is checked before anything is copied, so a failed load leaves the module as it was.
  std::map<std::string, std::optional<Shape>> shapes;
  for (const auto& [name, t] : state)
    shapes.emplace(name, t.defined() ? std::optional<Shape>(t.shape()) : std::nullopt);
  NamedTensors own = state_dict();
  check_state(*this, own, shapes, strict);
  NoGradGuard no_grad;  // torch copies under torch.no_grad(): parameters are leaves
  for (auto& [name, t] : own) {
    auto it = state.find(name);
    if (it != state.end()) t.copy_(it->second);  // writes through: t shares the module's storage
  }
}

void Module::load_state_dict_from(const std::map<std::string, Shape>& shapes,
                                  const TensorReader& read, bool strict) {
  if (!read) fail("load_state_dict_from", "the reader is empty");
  std::map<std::string, std::optional<Shape>> known(shapes.begin(), shapes.end());
  NamedTensors own = state_dict();
  check_state(*this, own, known, strict);
  NoGradGuard no_grad;
  for (auto& [name, t] : own)
    if (shapes.count(name)) read(name, t);
}

Tensor Module::parameter(const std::string& dotted_name) const {
  for (const auto& [name, t] : named_parameters())
    if (name == dotted_name) return t;
  std::string known;
  for (const auto& [name, t] : named_parameters()) known += (known.empty() ? "" : ", ") + name;
  fail("Module.parameter", name(), " has no parameter \"", dotted_name, "\" (it has: ", known, ")");
}

void Module::zero_grad(bool set_to_none) {
  for (auto& [name, t] : named_parameters()) {
    Tensor g = t.grad();
    if (!g.defined()) continue;
    if (set_to_none) {
      t.set_grad(Tensor());
    } else {
      NoGradGuard no_grad;
      g.zero_();
    }
  }
}

void Module::to(Dtype dtype) {
  if (!is_floating_point(dtype))
    detail::fail("Module.to", "modules hold floating point tensors, cannot convert to ",
                 dtype_name(dtype));
  NoGradGuard no_grad;
  for (auto& [name, t] : named_parameters())
    if (t.is_floating_point() && t.dtype() != dtype) t.set_data(t.detach().to(dtype));
  for (auto& [name, t] : named_buffers())
    if (t.is_floating_point() && t.dtype() != dtype) t.set_data(t.detach().to(dtype));
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

}  // namespace attn::nn

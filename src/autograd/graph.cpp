#include <attn/autograd.h>

#include "../tensor/internal.h"

namespace attn {

namespace {
thread_local bool grad_enabled = true;
}

bool is_grad_enabled() { return grad_enabled; }
void set_grad_enabled(bool enabled) { grad_enabled = enabled; }

std::shared_ptr<Node> grad_fn(const Tensor& t) {
  if (!t.defined() || !t.impl()->autograd) return nullptr;
  return t.impl()->autograd->grad_fn;
}

namespace detail {

namespace {
bool any_requires_grad(const std::vector<const Tensor*>& inputs) {
  for (const Tensor* t : inputs)
    if (t && t->defined() && t->requires_grad()) return true;
  return false;
}

std::shared_ptr<Node> make_node(const std::string& name, const std::vector<const Tensor*>& inputs) {
  auto node = std::make_shared<Node>();
  node->name = name;
  for (const Tensor* t : inputs) {
    if (!t || !t->defined() || !t->requires_grad()) continue;
    if (auto fn = grad_fn(*t))
      node->next.push_back(fn);
    else
      node->leaves.push_back(t->impl());
  }
  return node;
}
}  // namespace

Tensor record(Tensor out, const std::string& name, const std::vector<const Tensor*>& inputs) {
  if (!grad_enabled || !any_requires_grad(inputs)) {
    // A result that does not depend on anything trainable is a plain tensor (views of a leaf
    // that requires grad are handled by the caller passing the base as an input).
    if (out.impl()->requires_grad && !out.impl()->autograd) out.impl()->requires_grad = false;
    return out;
  }
  out.impl()->requires_grad = true;
  out.impl()->autograd = std::make_shared<AutogradMeta>();
  out.impl()->autograd->grad_fn = make_node(name, inputs);
  return out;
}

void check_inplace(const Tensor& self, const char* op) {
  if (grad_enabled && self.defined() && self.requires_grad() && !grad_fn(self))
    fail(op, "a leaf tensor that requires grad (", shape_str(self.shape()),
         ") is being used in an in-place operation; use detach() or attn::NoGradGuard");
}

void record_inplace(Tensor& self, const std::string& name,
                    const std::vector<const Tensor*>& inputs) {
  if (!grad_enabled || !any_requires_grad(inputs)) return;
  auto node = make_node(name, inputs);
  self.impl()->requires_grad = true;
  if (!self.impl()->autograd) self.impl()->autograd = std::make_shared<AutogradMeta>();
  self.impl()->autograd->grad_fn = node;
}

}  // namespace detail
}  // namespace attn

// The autograd graph: which operation produced a tensor, and from which inputs.
//
// Every op whose result depends on a tensor that requires grad records a Node named as PyTorch
// names its backward function ("MmBackward0", "SoftmaxBackward0", ...), so results print
// `grad_fn=<MmBackward0>` exactly as PyTorch prints them, and the graph is in place for the
// backward functions, which each Node will carry when gradients land.
#pragma once

#include <attn/tensor.h>

#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

namespace attn {

struct Node {
  std::string name;  // PyTorch's backward-node name
  // Graph edges: the nodes that produced the inputs, and the leaf inputs (which have no node).
  // Nodes never point at non-leaf tensors, so in-place ops cannot create reference cycles.
  std::vector<std::shared_ptr<Node>> next;
  std::vector<std::shared_ptr<TensorImpl>> leaves;
};

struct AutogradMeta {
  std::shared_ptr<Node> grad_fn;  // null for leaves
};

// The node that produced `t`, or null for a leaf / a tensor outside the graph.
std::shared_ptr<Node> grad_fn(const Tensor& t);

// Whether ops record the graph (false inside a NoGradGuard). Thread-local, like PyTorch's.
bool is_grad_enabled();
void set_grad_enabled(bool enabled);

// Disables graph recording for its scope (torch.no_grad()).
class NoGradGuard {
 public:
  NoGradGuard() : previous_(is_grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(previous_); }
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};

namespace detail {
// Marks `out` as produced by op `name` from `inputs` when grad mode is on and any input requires
// grad: out.requires_grad becomes true and its grad_fn a new Node. Returns `out`.
Tensor record(Tensor out, const std::string& name, const std::vector<const Tensor*>& inputs);
// Throws attn::Error naming `op` when `self` is a leaf that requires grad and grad mode is on:
// modifying it in place would lose the value its gradient refers to (PyTorch refuses too).
// In-place ops call it before they touch any element, so a refused call changes nothing.
void check_inplace(const Tensor& self, const char* op);
// The in-place form: `self` was modified by op `name` reading `inputs` (self included). Callers
// run check_inplace first.
void record_inplace(Tensor& self, const std::string& name,
                    const std::vector<const Tensor*>& inputs);
}  // namespace detail

}  // namespace attn

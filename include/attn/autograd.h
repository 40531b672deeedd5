// Reverse-mode automatic differentiation, modelled on PyTorch's autograd.
//
// The graph. Every op whose result depends on a tensor that requires grad records a Node named as
// PyTorch names its backward function ("MmBackward0", "SoftmaxBackward0", ...), so results print
// `grad_fn=<MmBackward0>` exactly as PyTorch prints them. A Node has one Edge per input of the op
// (to the Node that produced the input, or to the leaf tensor whose .grad accumulates, or nothing
// for inputs that do not require grad), the tensors its backward formula needs (SavedTensor), and
// the formula itself: given the gradient of the op's result it returns one gradient per input.
//
// The pass. Tensor::backward(gradient) runs the engine: it collects the nodes reachable from the
// root, counts for each node how many edges point at it, and runs a node once every consumer of
// its result has handed over its gradient (a topological order by dependency counting). Gradients
// reaching a leaf are summed into the leaf's .grad, across backward calls too, until the user (or
// Module::zero_grad) resets it. The pass itself records nothing (it runs under NoGradGuard), so
// higher-order gradients (create_graph) are not supported.
//
// retain_graph. By default a pass frees what it used: every node's saved tensors are released
// and a second pass through a node that needs them throws attn::Error, as PyTorch does (nodes
// that saved nothing, such as AddBackward0, stay usable, again as in PyTorch). retain_graph=true
// keeps them for another pass.
//
// In-place ops and version counters. Each Storage carries a version that every in-place write
// bumps (copy_, fill_, add_, masked_fill_, index_put_, uniform_, ...). A SavedTensor remembers the
// version it was saved at; a backward formula that finds its tensor modified since throws
// attn::Error ("modified by an inplace operation") instead of silently using the new values.
// An in-place op on a non-leaf result (the causal-attention tutorial's
// attn_scores.masked_fill_(mask, -inf), docs/tour-python.md) replaces the result's grad_fn with
// the op's node, whose edge for `self` leads to the node that produced the old value. An in-place
// op through a view (x[0] += y, x[:, 1] = v, scores.view(...).mul_(2)) rewrites the base's history
// as PyTorch's CopySlices does: the base gets a "CopySlices" node that routes the gradient of the
// viewed elements through the op, and views of the base whose grad_fn predates the write are
// regenerated ("AsStridedBackward0") when next used. In-place ops on leaves that require grad (and
// on views of such leaves) are refused while grad mode is on.
#pragma once

#include <attn/tensor.h>

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace attn {

struct Node;

// A tensor a backward formula needs, with the version of its storage when it was saved. It is a
// detached alias (it shares storage, not history), so saving never creates reference cycles.
struct SavedTensor {
  Tensor tensor;
  uint64_t version = 0;
};

// Where the gradient of one input of a node goes.
struct Edge {
  std::shared_ptr<Node> fn;          // the node that produced the input, or
  std::shared_ptr<TensorImpl> leaf;  // the leaf whose .grad accumulates it, or neither
  Shape shape;                       // the input's shape: the gradient must have it
  Dtype dtype = Dtype::Float32;      // the input's dtype: the gradient is converted to it
  bool defined() const { return fn || leaf; }
};

// Computes the gradients of a node's inputs (one per Edge, undefined where not needed) from the
// gradient of the node's result. It reads saved tensors through node.saved_tensor(i).
using BackwardFn = std::function<std::vector<Tensor>(const Node& node, const Tensor& grad)>;

// A hook on the gradient of a tensor (Tensor.register_hook): called with that gradient as a
// backward pass computes it; returns a replacement, or an undefined tensor to keep it.
using TensorHook = std::function<Tensor(const Tensor& grad)>;

struct Node {
  std::string name;  // PyTorch's backward-node name
  // Graph edges in input order, restricted to inputs that require grad: the nodes that produced
  // them, and the leaf inputs (which have no node). `inputs` has every input slot.
  std::vector<std::shared_ptr<Node>> next;
  std::vector<std::shared_ptr<TensorImpl>> leaves;
  std::vector<Edge> inputs;
  BackwardFn backward;
  std::vector<SavedTensor> saved;
  bool released = false;  // saved tensors freed by a backward pass without retain_graph
  // Creation order (torch's sequence_nr): backward runs the ready node created last first.
  uint64_t sequence_nr = 0;
  // Hooks on the gradient of the node's result (register_hook on a non-leaf), by handle, run in
  // registration order on the summed gradient before the formula; then, where retain_grad was
  // called on the result, that gradient is kept in its .grad (after the hooks, as torch does).
  std::vector<std::pair<int64_t, TensorHook>> pre_hooks;
  std::weak_ptr<TensorImpl> retain_grad_of;

  // Whether input i needs a gradient (a formula may skip the work otherwise).
  bool needs_input_grad(std::size_t i) const { return i < inputs.size() && inputs[i].defined(); }
  // Saved tensor i (undefined if nothing was saved there). Throws attn::Error naming the node if
  // the graph was freed by an earlier backward pass or the tensor was modified in place since.
  Tensor saved_tensor(std::size_t i) const;
};

// Called with the leaf after a backward pass has accumulated the leaf's last gradient of that pass
// (see register_post_accumulate_grad_hook).
using PostAccumulateGradHook = std::function<void(const Tensor& leaf)>;

struct AutogradMeta {
  std::shared_ptr<Node> grad_fn;  // null for leaves
  Tensor grad;                    // leaves: the accumulated gradient (undefined until a pass)
  // Leaves: hooks by handle, run in registration order.
  std::vector<std::pair<int64_t, PostAccumulateGradHook>> post_accumulate_grad_hooks;
  // Leaves: hooks on the gradient (register_hook), run on the pass's summed gradient before it
  // is accumulated.
  std::vector<std::pair<int64_t, TensorHook>> grad_hooks;
  // Views (tensors sharing storage with the tensor they were taken from): that tensor, never
  // itself a view, so in-place ops through the view can rewrite its history.
  std::shared_ptr<TensorImpl> base;
  uint64_t version = 0;  // storage version when grad_fn was last set (views)
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

// torch.autocast("cpu", dtype): the dtype the products of this thread run in, or none. While set,
// matmul (and mm, bmm, @), linear and scaled_dot_product_attention convert their float32 CPU
// operands to it (through the graph: gradients reach the float32 tensors in float32) and give
// results in it; cross_entropy widens a 2-byte input to float32. Every other op runs in its
// operands' dtype - the ops of torch's CPU autocast lists that attn has.
std::optional<Dtype> autocast_dtype();
void set_autocast_dtype(std::optional<Dtype> dtype);  // bfloat16 or float16; attn::Error else

// Sets the autocast dtype for its scope (none: autocast off) and restores the previous one.
class AutocastGuard {
 public:
  explicit AutocastGuard(std::optional<Dtype> dtype) : previous_(autocast_dtype()) {
    set_autocast_dtype(dtype);
  }
  ~AutocastGuard() { set_autocast_dtype(previous_); }
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  std::optional<Dtype> previous_;
};

// Sets grad mode for its scope and restores the previous one (torch.set_grad_enabled(mode) as a
// context manager; AutoGradMode in libtorch).
class GradModeGuard {
 public:
  explicit GradModeGuard(bool enabled) : previous_(is_grad_enabled()) { set_grad_enabled(enabled); }
  ~GradModeGuard() { set_grad_enabled(previous_); }
  GradModeGuard(const GradModeGuard&) = delete;
  GradModeGuard& operator=(const GradModeGuard&) = delete;

 private:
  bool previous_;
};

// Runs the backward pass from `root` (Tensor::backward is this function). `gradient` is the
// gradient of some scalar loss with respect to root; undefined means ones for a one-element root.
// Throws attn::Error ("[backward] ...") when root does not require grad, when a non-scalar root
// gets no gradient, or when the gradient's shape differs from root's.
void backward(const Tensor& root, const Tensor& gradient = Tensor(),
              std::optional<bool> retain_graph = std::nullopt);

// torch.autograd.backward: one pass from several roots at once, each with its gradient
// (undefined: ones, for a one-element root). Throws attn::Error as backward does, naming the root.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& gradients,
              std::optional<bool> retain_graph = std::nullopt);

// torch.autograd.grad: the gradients of `outputs` (weighted by `gradients`, as backward's) with
// respect to `inputs`, returned in inputs' order instead of accumulated into any .grad (no .grad
// changes, post-accumulate hooks do not run). An input the outputs do not depend on throws
// attn::Error, or gives an undefined tensor with allow_unused. Higher-order gradients
// (create_graph) are not supported.
std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& gradients = {},
                         std::optional<bool> retain_graph = std::nullopt,
                         bool allow_unused = false);

// torch.Tensor.register_hook: `hook` sees the gradient of `t` (a tensor that requires grad) each
// time a pass computes it, summed over t's uses, and may return a replacement (same shape) that
// then flows on: into t's grad_fn for a non-leaf, into .grad for a leaf. Returns a handle for
// remove_hook. Throws attn::Error if t does not require grad.
int64_t register_hook(const Tensor& t, TensorHook hook);
// Removes the hook with that handle from t (nothing if it is gone).
void remove_hook(const Tensor& t, int64_t handle);
// torch.Tensor.retain_grad: a non-leaf keeps the gradient passes compute for it in its .grad
// (summed across passes, as a leaf's). Nothing for a leaf; throws if t does not require grad.
void retain_grad(const Tensor& t);
bool retains_grad(const Tensor& t);

// torch.Tensor.register_post_accumulate_grad_hook: after each backward pass that reaches the leaf
// `t` (a tensor that requires grad and has no grad_fn), once every gradient of that pass for `t`
// has been added into t.grad (a leaf used twice, as tied weights are, gets one call), `hook(t)`
// runs, inside the pass and under no-grad. Distributed data parallelism starts a gradient
// bucket's all-reduce from it. Returns a handle for remove_post_accumulate_grad_hook. Throws
// attn::Error if `t` is not such a leaf.
int64_t register_post_accumulate_grad_hook(const Tensor& t, PostAccumulateGradHook hook);
// Removes the hook with that handle (nothing if it is gone).
void remove_post_accumulate_grad_hook(const Tensor& t, int64_t handle);

namespace detail {
// Whether an op reading `inputs` records a node now (grad mode on and an input requires grad).
bool should_record(const std::vector<const Tensor*>& inputs);
// Marks `out` as produced by op `name` from `inputs` when should_record(inputs): out.requires_grad
// becomes true and its grad_fn a new Node whose backward is `backward`, with `saved` saved (as
// detached aliases, versions noted). Returns `out`. A node without a backward formula throws
// when a pass reaches it.
Tensor record(Tensor out, const std::string& name, const std::vector<const Tensor*>& inputs,
              BackwardFn backward = nullptr, std::vector<Tensor> saved = {});
// Throws attn::Error naming `op` when `self` is a leaf that requires grad (or a view of one) and
// grad mode is on: modifying it in place would lose the value its gradient refers to (PyTorch
// refuses too); and, whatever the grad mode, when `self` is a broadcast view (a stride of 0 over
// more than one element), whose elements share memory. In-place ops call it before they touch
// any element, so a refused call changes nothing.
void check_inplace(const Tensor& self, const char* op);
// The in-place form: `self` (inputs[0]) was modified by op `name` reading `inputs`. The node's
// backward returns the gradient for the old value of self first. Callers run check_inplace first
// and bump_version after writing.
void record_inplace(Tensor& self, const std::string& name, const std::vector<const Tensor*>& inputs,
                    BackwardFn backward = nullptr, std::vector<Tensor> saved = {});
// Marks t's storage as written (every in-place write calls it).
void bump_version(const Tensor& t);
// `grad` summed over the dims that broadcasting added or expanded, down to `shape`.
Tensor sum_to(const Tensor& grad, const Shape& shape);
// Regenerates the grad_fn of a view whose base was modified in place since (see above).
void refresh_view(TensorImpl& impl);
}  // namespace detail

}  // namespace attn

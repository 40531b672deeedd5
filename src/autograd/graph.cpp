// The autograd graph (recording, in-place ops through views, version checks) and the engine that
// runs the backward pass. The backward formulas live next to their ops.
#include <attn/autograd.h>
#include <attn/ops.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <queue>
#include <unordered_map>
#include <utility>

#include "../tensor/internal.h"

namespace attn {

using detail::fail;

namespace {
thread_local bool grad_enabled = true;

// Guards every leaf's .grad: backward passes on several threads whose graphs share leaves (the
// parameters of one model) add into the same gradients, and take turns doing so, as torch's
// AccumulateGrad does; Tensor::grad() and set_grad() read and replace the handle under it too.
// The order of the additions, and so the last bits of the sum, is the threads' order.
std::mutex grad_mutex;
using GradLock = std::lock_guard<std::mutex>;

// Where a tensor's elements sit in its storage.
struct Geometry {
  Shape sizes, strides;
  int64_t offset = 0;
};

Geometry geometry_of(const TensorImpl& t) { return {t.sizes, t.strides, t.offset}; }

// One past the last storage element the geometry touches (its offset when it has no elements).
int64_t extent(const Geometry& g) {
  int64_t e = g.offset;
  for (std::size_t i = 0; i < g.sizes.size(); ++i) {
    if (g.sizes[i] == 0) return g.offset;
    e += (g.sizes[i] - 1) * g.strides[i];
  }
  return e + 1;
}

// A zero tensor of `dtype` laid out in a fresh storage of `storage_numel` elements with geometry
// g, so that a view geometry of the same original storage lines up with it.
Tensor strided_zeros(const Geometry& g, int64_t storage_numel, Dtype dtype) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = Storage::allocate(std::size_t(storage_numel) * itemsize(dtype));
  impl->sizes = g.sizes;
  impl->strides = g.strides;
  impl->offset = g.offset;
  impl->dtype = dtype;
  return Tensor(impl);
}

Tensor view_on(const Tensor& t, const Geometry& g) {
  return detail::make_view(t, g.sizes, g.strides, g.offset);
}

// The edge to the current history of `t` (its node, or t itself when it is a leaf that requires
// grad), or an empty edge.
Edge edge_to(const std::shared_ptr<TensorImpl>& t) {
  Edge e;
  e.shape = t->sizes;
  if (!t->requires_grad) return e;
  if (t->autograd && t->autograd->grad_fn)
    e.fn = t->autograd->grad_fn;
  else
    e.leaf = t;
  return e;
}

void link(Node& node) {
  static std::atomic<uint64_t> next_sequence_nr{1};
  node.sequence_nr = next_sequence_nr.fetch_add(1, std::memory_order_relaxed);
  node.next.clear();
  node.leaves.clear();
  for (const Edge& e : node.inputs) {
    if (e.fn)
      node.next.push_back(e.fn);
    else if (e.leaf)
      node.leaves.push_back(e.leaf);
  }
}

// A detached alias of t (same storage and geometry, no history), with t's current version.
SavedTensor save(const Tensor& t) {
  if (!t.defined()) return {};
  auto impl = std::make_shared<TensorImpl>();
  const TensorImpl& s = *t.impl();
  impl->storage = s.storage;
  impl->sizes = s.sizes;
  impl->strides = s.strides;
  impl->offset = s.offset;
  impl->dtype = s.dtype;
  return {Tensor(impl), s.storage->version};
}

std::shared_ptr<Node> make_node(const std::string& name, const std::vector<const Tensor*>& inputs,
                                BackwardFn backward, std::vector<Tensor> saved) {
  auto node = std::make_shared<Node>();
  node->name = name;
  for (const Tensor* t : inputs) {
    Edge e;
    if (t && t->defined()) {
      e.shape = t->shape();
      e.dtype = t->dtype();
      if (t->requires_grad()) {
        if (auto fn = grad_fn(*t))
          e.fn = fn;
        else
          e.leaf = t->impl();
      }
    }
    node->inputs.push_back(std::move(e));
  }
  link(*node);
  node->backward = std::move(backward);
  for (const Tensor& t : saved) node->saved.push_back(save(t));
  return node;
}

// "AsStridedBackward0": the view `vg` of a base (geometry bg, history `base_edge`) whose history
// was rewritten by an in-place op. Its gradient is scattered into zeros shaped like the base.
std::shared_ptr<Node> as_strided_node(Edge base_edge, const Geometry& bg, const Geometry& vg) {
  auto node = std::make_shared<Node>();
  node->name = "AsStridedBackward0";
  node->inputs.push_back(std::move(base_edge));
  link(*node);
  const int64_t n = std::max(extent(bg), extent(vg));
  node->backward = [bg, vg, n](const Node&, const Tensor& grad) {
    Tensor result = strided_zeros(bg, n, grad.dtype());
    view_on(result, vg).copy_(grad);
    return std::vector<Tensor>{result};
  };
  return node;
}

AutogradMeta& meta_of(TensorImpl& t) {
  if (!t.autograd) t.autograd = std::make_shared<AutogradMeta>();
  return *t.autograd;
}

// Whether `t` is the only handle on its elements: no other Tensor, view or saved tensor shares its
// TensorImpl or its storage, and it covers a contiguous storage of its own from the start. Such a
// gradient can be kept (as a leaf's .grad) or added into in place without anyone seeing it change,
// as torch's AccumulateGrad steals a gradient nobody else references.
bool sole_owner(const Tensor& t) {
  const auto& impl = t.impl();
  return impl.use_count() == 1 && impl->storage.use_count() == 1 && !impl->autograd &&
         impl->offset == 0 && is_floating_point(impl->dtype) && !impl->storage->device.is_cuda() &&
         t.is_contiguous();
}

// A gradient that is a view of a tensor nobody else holds (a product's result reshaped, as
// matmul returns it): the view forgets that base, so that sole_owner sees it as the storage's only
// holder and the gradient is kept or added into in place rather than copied (a 256 MiB gradient
// of gathered expert weights was cloned once more at its leaf).
void forget_orphan_base(Tensor& t) {
  if (!t.defined()) return;
  TensorImpl& impl = *t.impl();
  AutogradMeta* m = impl.autograd.get();
  if (!m || t.impl().use_count() != 1 || impl.requires_grad || m->grad_fn || m->grad.defined() ||
      !m->post_accumulate_grad_hooks.empty() || !m->base || m->base.use_count() != 1 ||
      m->base->storage != impl.storage)
    return;
  impl.autograd.reset();
}

void accumulate(TensorImpl& leaf, Tensor grad) {
  GradLock lock(grad_mutex);
  forget_orphan_base(grad);
  AutogradMeta& m = meta_of(leaf);
  if (m.grad.defined())
    m.grad.add_(grad);
  else if (sole_owner(grad))
    m.grad = std::move(grad);  // nobody else holds it: kept as it is, no copy
  else
    m.grad = grad.clone();  // never alias a gradient that other edges may still hold
}

bool has_grad(const TensorImpl& leaf) {
  GradLock lock(grad_mutex);
  return leaf.autograd && leaf.autograd->grad.defined();
}

bool has_post_hooks(const TensorImpl& leaf) {
  return leaf.autograd && !leaf.autograd->post_accumulate_grad_hooks.empty();
}

void run_post_hooks(const std::shared_ptr<TensorImpl>& leaf) {
  // A copy: a hook may register or remove hooks.
  auto hooks = leaf->autograd->post_accumulate_grad_hooks;
  const Tensor t(leaf);
  for (auto& [handle, hook] : hooks) hook(t);
}

}  // namespace

bool is_grad_enabled() { return grad_enabled; }
void set_grad_enabled(bool enabled) { grad_enabled = enabled; }

namespace {
thread_local std::optional<Dtype> autocast_to;
}  // namespace

std::optional<Dtype> autocast_dtype() { return autocast_to; }
void set_autocast_dtype(std::optional<Dtype> dtype) {
  if (dtype && !is_reduced_float(*dtype))
    fail("autocast", "the dtype must be bfloat16 or float16, got ", dtype_name(*dtype));
  autocast_to = dtype;
}

std::shared_ptr<Node> grad_fn(const Tensor& t) {
  if (!t.defined() || !t.impl()->autograd) return nullptr;
  detail::refresh_view(*t.impl());
  return t.impl()->autograd->grad_fn;
}

Tensor Node::saved_tensor(std::size_t i) const {
  if (released)
    fail("backward", "trying to backward through the graph a second time (or to use saved tensors ",
         "after they have been freed) at ", name,
         ": saved intermediate values are freed by backward(); pass retain_graph=true to "
         "backward through the graph again");
  if (i >= saved.size()) return Tensor();
  const SavedTensor& s = saved[i];
  if (s.tensor.defined() && s.tensor.impl()->storage->version != s.version)
    fail("backward",
         "one of the variables needed for gradient computation has been modified by an inplace "
         "operation: the ",
         detail::tensor_desc(s.tensor), " tensor saved by ", name, " is at version ",
         s.tensor.impl()->storage->version, "; expected version ", s.version,
         " instead. Clone it before modifying it in place");
  return s.tensor;
}

namespace detail {

bool should_record(const std::vector<const Tensor*>& inputs) {
  if (!grad_enabled) return false;
  for (const Tensor* t : inputs)
    if (t && t->defined() && t->requires_grad()) return true;
  return false;
}

void bump_version(const Tensor& t) {
  if (t.defined()) ++t.impl()->storage->version;
}

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  const int64_t lead = grad.dim() - int64_t(shape.size());
  if (lead < 0)
    fail("sum_to", "gradient ", shape_str(grad.shape()), " has fewer dims than ", shape_str(shape));
  Shape dims;
  for (int64_t i = 0; i < lead; ++i) dims.push_back(i);
  for (int64_t i = 0; i < int64_t(shape.size()); ++i)
    if (shape[i] == 1 && grad.shape()[lead + i] != 1) dims.push_back(lead + i);
  Tensor r = dims.empty() ? grad : grad.sum(dims, true);
  return r.reshape(shape);
}

void refresh_view(TensorImpl& impl) {
  AutogradMeta* m = impl.autograd.get();
  if (!m || !m->base) return;
  const uint64_t v = impl.storage->version;
  // A view is refreshed by whoever reads it first after its storage was written, and several
  // threads may read one view at once (an input they share, written in place earlier, as a
  // parameter's view is by an optimizer step): one of them rewrites grad_fn and requires_grad
  // under view_mutex and publishes the version last, so that a thread that sees the new version
  // without the lock also sees what was rewritten.
  if (std::atomic_ref<uint64_t>(m->version).load(std::memory_order_acquire) == v) return;
  static std::mutex view_mutex;
  std::lock_guard<std::mutex> lock(view_mutex);
  if (m->version == v) return;
  const TensorImpl& b = *m->base;
  // A leaf keeps its own identity.
  if (!(impl.requires_grad && !m->grad_fn) && is_floating_point(impl.dtype) && b.autograd &&
      b.autograd->grad_fn) {
    m->grad_fn = as_strided_node(edge_to(m->base), geometry_of(b), geometry_of(impl));
    impl.requires_grad = true;
  }
  std::atomic_ref<uint64_t>(m->version).store(v, std::memory_order_release);
}

Tensor record(Tensor out, const std::string& name, const std::vector<const Tensor*>& inputs,
              BackwardFn backward, std::vector<Tensor> saved) {
  TensorImpl& im = *out.impl();
  if (im.autograd && im.autograd->base) {
    // Only the results of view ops (which share an input's storage) are views for autograd; an
    // op that returns a view of its own fresh buffer (matmul's out.view(...)) is not.
    bool view = false;
    for (const Tensor* t : inputs)
      if (t && t->defined() && t->impl()->storage == im.storage) view = true;
    if (!view) im.autograd->base = nullptr;
  }
  if (!should_record(inputs)) {
    // A result that does not depend on anything trainable is a plain tensor (a view of a leaf
    // inherits requires_grad from make_view and loses it here when nothing was recorded).
    if (!im.autograd || !im.autograd->grad_fn) im.requires_grad = false;
    return out;
  }
  AutogradMeta& m = meta_of(im);
  m.grad_fn = make_node(name, inputs, std::move(backward), std::move(saved));
  m.version = im.storage->version;
  im.requires_grad = true;
  return out;
}

void check_inplace(const Tensor& self, const char* op) {
  // A write through a broadcast view (a stride of 0 over more than one element) would write
  // each memory location several times: torch refuses it, and so does attn, except where torch
  // lets it through: masked_fill_ and index_put_ (deprecated there), fill_ (attn's is copy_ of
  // one element; copy_ checks itself).
  const bool may_share = !std::strcmp(op, "masked_fill_") || !std::strcmp(op, "index_put_") ||
                         !std::strcmp(op, "index_add_") || !std::strcmp(op, "copy_");
  if (self.defined() && !may_share)
    for (std::size_t d = 0; d < self.shape().size(); ++d)
      if (self.strides()[d] == 0 && self.shape()[d] > 1)
        fail(op, "unsupported operation: more than one element of the written-to tensor ",
             shape_str(self.shape()), " refers to a single memory location (dim ", d,
             " has stride 0, as expand makes it). Please clone() the tensor before performing "
             "the operation.");
  if (!grad_enabled || !self.defined() || !self.requires_grad()) return;
  if (!grad_fn(self))
    fail(op, "a leaf tensor that requires grad (", shape_str(self.shape()),
         ") is being used in an in-place operation; use detach() or attn::NoGradGuard");
  const AutogradMeta* m = self.impl()->autograd.get();
  if (m && m->base && m->base->requires_grad && !(m->base->autograd && m->base->autograd->grad_fn))
    fail(op, "a view (", shape_str(self.shape()), ") of a leaf tensor that requires grad (",
         shape_str(m->base->sizes),
         ") is being used in an in-place operation; use detach() or attn::NoGradGuard");
}

void record_inplace(Tensor& self, const std::string& name, const std::vector<const Tensor*>& inputs,
                    BackwardFn backward, std::vector<Tensor> saved) {
  if (!should_record(inputs)) return;
  auto node = make_node(name, inputs, std::move(backward), std::move(saved));
  TensorImpl& im = *self.impl();
  AutogradMeta& m = meta_of(im);
  const uint64_t version = im.storage->version;
  if (!m.base) {
    m.grad_fn = node;
    m.version = version;
    im.requires_grad = true;
    return;
  }
  // Written through a view: the base's history becomes CopySlices(base's old history, node),
  // and the view a view of that.
  const std::shared_ptr<TensorImpl> base = m.base;
  const Geometry bg = geometry_of(*base), vg = geometry_of(im);
  const int64_t n = std::max(extent(bg), extent(vg));
  auto cs = std::make_shared<Node>();
  cs->name = "CopySlices";
  cs->inputs.push_back(edge_to(base));
  for (std::size_t i = 1; i < node->inputs.size(); ++i) cs->inputs.push_back(node->inputs[i]);
  link(*cs);
  cs->saved = node->saved;
  cs->backward = [fn = node->backward, name, bg, vg, n](const Node& self_node, const Tensor& grad) {
    if (!fn) fail("backward", name, " has no backward formula");
    Tensor result = strided_zeros(bg, n, grad.dtype());
    result.copy_(grad);
    Tensor viewed = view_on(result, vg);
    // The op's formula sees the gradient of the viewed elements; what it returns for the old
    // value of self replaces them, the base's other elements pass through unchanged.
    std::vector<Tensor> grads = fn(self_node, viewed.clone());
    if (grads.empty()) fail("backward", name, " returned no gradients");
    if (grads[0].defined())
      viewed.copy_(grads[0]);
    else
      viewed.zero_();
    grads[0] = result;
    return grads;
  };
  AutogradMeta& bm = meta_of(*base);
  bm.grad_fn = cs;
  bm.version = version;
  base->requires_grad = true;
  m.grad_fn = as_strided_node(edge_to(base), bg, vg);
  m.version = version;
  im.requires_grad = true;
}

}  // namespace detail

// ---- the engine -----------------------------------------------------------------------------

namespace {
// Frees a node's saved tensors after a pass without retain_graph; a later pass through the node
// then fails with saved_tensor's message. Nodes that saved nothing stay usable, as in torch.
void release_saved(Node& n) {
  bool any = false;
  for (const SavedTensor& s : n.saved) any |= s.tensor.defined();
  if (any) {
    n.saved.clear();
    n.released = true;
  }
}
}  // namespace

namespace {

// A root's gradient, checked as torch checks it (ones for an undefined one of a one-element root).
Tensor root_gradient(const Tensor& root, const Tensor& gradient, const char* fn) {
  if (!root.defined()) fail(fn, "called on an undefined tensor");
  if (!root.requires_grad())
    fail(fn, "element 0 of tensors does not require grad and does not have a grad_fn (",
         detail::tensor_desc(root), ")");
  if (!gradient.defined()) {
    if (root.numel() != 1)
      fail(fn, "grad can be implicitly created only for scalar outputs; the output has ", "shape ",
           shape_str(root.shape()), ": pass a gradient of that shape");
    return ones(root.shape(), root.dtype(), root.device());
  }
  if (gradient.dtype() != root.dtype())
    fail(fn, "gradient must have the output's dtype ", dtype_name(root.dtype()), ", got ",
         detail::tensor_desc(gradient));
  if (gradient.shape() != root.shape())
    fail(fn, "gradient has shape ", shape_str(gradient.shape()),
         " but the output it belongs to has shape ", shape_str(root.shape()));
  return gradient;
}

// `g` through hooks (each may replace it; the replacement must keep g's shape).
Tensor run_tensor_hooks(const std::vector<std::pair<int64_t, TensorHook>>& hooks_in, Tensor g) {
  auto hooks = hooks_in;  // a copy: a hook may register or remove hooks
  for (auto& [handle, hook] : hooks) {
    Tensor r = hook(g);
    if (!r.defined()) continue;
    if (r.shape() != g.shape())
      fail("register_hook", "hook returned a gradient of shape ", shape_str(r.shape()),
           " for one of shape ", shape_str(g.shape()));
    if (r.dtype() != g.dtype()) r = r.to(g.dtype());
    g = std::move(r);
  }
  return g;
}

bool has_grad_hooks(const TensorImpl& leaf) {
  return leaf.autograd && !leaf.autograd->grad_hooks.empty();
}

// Adds g into the .grad of the non-leaf whose retain_grad made `target`.
void keep_retained(const std::weak_ptr<TensorImpl>& target, const Tensor& g) {
  auto t = target.lock();
  if (!t) return;
  GradLock lock(grad_mutex);
  AutogradMeta& m = meta_of(*t);
  if (m.grad.defined())
    m.grad = m.grad + g;
  else
    m.grad = g.clone();
}

// One backward pass from `roots` with `grads` (checked). Without `capture`, gradients reaching
// leaves accumulate into their .grad; with it, the gradient of each captured tensor (a leaf, or
// the result of a node) is stored at its index instead and no .grad changes.
struct Capture {
  std::unordered_map<TensorImpl*, std::size_t> leaves;
  std::unordered_map<Node*, std::size_t> nodes;
  std::vector<Tensor> grads;
};

void run_pass(const std::vector<Tensor>& roots, std::vector<Tensor> grads, bool retain,
              Capture* capture) {
  NoGradGuard no_grad;
  // Leaves whose gradients are summed over the pass before they go on (hooks, post-accumulate
  // hooks, capture): how many edges will still deliver to each, and what they delivered.
  std::unordered_map<TensorImpl*, int64_t> leaf_deps;
  std::unordered_map<TensorImpl*, Tensor> leaf_sum;
  auto counted = [&](const TensorImpl& leaf) {
    return capture || has_post_hooks(leaf) || has_grad_hooks(leaf);
  };
  // Dependency counts: how many edges from nodes reachable from the roots point at each node.
  std::unordered_map<Node*, int64_t> deps;
  std::vector<std::shared_ptr<Node>> nodes;
  std::vector<std::shared_ptr<TensorImpl>> root_leaves;
  std::unordered_map<Node*, Tensor> pending;
  for (std::size_t r = 0; r < roots.size(); ++r) {
    if (std::shared_ptr<Node> fn = grad_fn(roots[r])) {
      if (deps.try_emplace(fn.get(), 0).second) nodes.push_back(fn);
      Tensor& p = pending[fn.get()];
      p = p.defined() ? p + grads[r] : grads[r];
    } else {
      root_leaves.push_back(roots[r].impl());
      ++leaf_deps[roots[r].impl().get()];
    }
  }
  for (std::size_t i = 0; i < nodes.size(); ++i)
    for (const Edge& e : nodes[i]->inputs) {
      if (e.leaf && counted(*e.leaf)) ++leaf_deps[e.leaf.get()];
      if (!e.fn) continue;
      auto [it, inserted] = deps.try_emplace(e.fn.get(), 0);
      if (inserted) nodes.push_back(e.fn);
      ++it->second;
    }

  // A leaf's gradient of this pass, complete: through its hooks, then captured or accumulated.
  auto finish_leaf = [&](const std::shared_ptr<TensorImpl>& leaf) {
    auto it = leaf_sum.find(leaf.get());
    Tensor g;
    if (it != leaf_sum.end()) {
      g = std::move(it->second);
      leaf_sum.erase(it);
    }
    if (g.defined() && has_grad_hooks(*leaf)) g = run_tensor_hooks(leaf->autograd->grad_hooks, g);
    if (capture) {
      auto c = capture->leaves.find(leaf.get());
      if (c != capture->leaves.end() && g.defined()) capture->grads[c->second] = std::move(g);
      return;
    }
    if (g.defined()) accumulate(*leaf, std::move(g));
    if (has_post_hooks(*leaf) && has_grad(*leaf)) run_post_hooks(leaf);
  };
  auto deliver_leaf = [&](const std::shared_ptr<TensorImpl>& leaf, Tensor g) {
    auto it = leaf_deps.find(leaf.get());
    if (it == leaf_deps.end()) {  // nothing waits for it: accumulated at once
      if (g.defined() && !capture) accumulate(*leaf, std::move(g));
      return;
    }
    if (g.defined()) {
      Tensor& s = leaf_sum[leaf.get()];
      s = s.defined() ? s + g : std::move(g);
    }
    if (--it->second == 0) finish_leaf(leaf);
  };
  for (std::size_t r = 0, l = 0; r < roots.size(); ++r)
    if (!grad_fn(roots[r])) deliver_leaf(root_leaves[l++], grads[r]);

  // Ready nodes run latest-created first, as in torch's engine: a node's gradient is used soon
  // after it is made (a product's gradient to its weights before the long way back through its
  // other input), so fewer gradients wait at once, and sums of several gradients are added in
  // torch's order.
  auto later_first = [](const Node* a, const Node* b) { return a->sequence_nr < b->sequence_nr; };
  std::priority_queue<Node*, std::vector<Node*>, decltype(later_first)> ready(later_first);
  for (const auto& [node, count] : deps)
    if (count == 0) ready.push(node);
  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    Tensor g = std::move(pending[node]);
    pending.erase(node);
    if (g.defined() && !node->pre_hooks.empty()) g = run_tensor_hooks(node->pre_hooks, g);
    if (g.defined() && !node->retain_grad_of.expired() && !capture)
      keep_retained(node->retain_grad_of, g);
    if (capture && g.defined()) {
      auto c = capture->nodes.find(node);
      if (c != capture->nodes.end()) capture->grads[c->second] = g;
    }
    std::vector<Tensor> grads;
    if (g.defined()) {
      if (!node->backward) fail("backward", node->name, " has no backward formula");
      grads = node->backward(*node, g);
      if (grads.size() != node->inputs.size())
        fail("backward", node->name, " returned ", grads.size(), " gradients for ",
             node->inputs.size(), " inputs");
    }
    g = Tensor();
    // Without retain_graph, a node's saved tensors go as soon as it has run (as torch's engine
    // frees them): the activations are released one by one while the pass goes on, so its peak
    // is not the forward's plus every gradient.
    if (!retain) release_saved(*node);
    for (std::size_t i = 0; i < node->inputs.size(); ++i) {
      const Edge& e = node->inputs[i];
      if (!e.defined()) continue;
      Tensor gi;
      if (i < grads.size() && grads[i].defined()) {
        gi = std::move(grads[i]);
        if (gi.shape() != e.shape || !is_floating_point(gi.dtype()))
          fail("backward", node->name, " returned a gradient ", detail::tensor_desc(gi),
               " for its input ", i, " of shape ", shape_str(e.shape));
        // A gradient reaches its input in the input's dtype (torch's engine casts it too): a
        // bfloat16 input of an op computed in float32 gets its gradient rounded once.
        if (gi.dtype() != e.dtype) gi = gi.to(e.dtype);
      }
      if (e.leaf) {
        deliver_leaf(e.leaf, std::move(gi));
        continue;
      }
      if (gi.defined()) {
        // The first gradient is taken as it is; later ones are added into it in place when no
        // one else holds it (else into a new tensor, as p + gi).
        Tensor& p = pending[e.fn.get()];
        forget_orphan_base(gi);
        if (!p.defined())
          p = std::move(gi);
        else if (sole_owner(p))
          p.add_(gi);
        else
          p = p + gi;
      }
      if (--deps[e.fn.get()] == 0) ready.push(e.fn.get());
    }
  }

  // The nodes that did not run (no gradient reached them) are released too.
  if (!retain)
    for (const auto& n : nodes) release_saved(*n);
}

}  // namespace

void backward(const Tensor& root, const Tensor& gradient, std::optional<bool> retain_graph) {
  Tensor g = root_gradient(root, gradient, "backward");
  run_pass({root}, {g}, retain_graph.value_or(false), nullptr);
}

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& gradients,
              std::optional<bool> retain_graph) {
  if (roots.empty()) fail("backward", "no tensors to differentiate");
  if (!gradients.empty() && gradients.size() != roots.size())
    fail("backward", "got ", gradients.size(), " gradients for ", roots.size(), " tensors");
  std::vector<Tensor> grads;
  for (std::size_t i = 0; i < roots.size(); ++i)
    grads.push_back(
        root_gradient(roots[i], gradients.empty() ? Tensor() : gradients[i], "backward"));
  run_pass(roots, std::move(grads), retain_graph.value_or(false), nullptr);
}

std::vector<Tensor> grad(const std::vector<Tensor>& outputs, const std::vector<Tensor>& inputs,
                         const std::vector<Tensor>& gradients, std::optional<bool> retain_graph,
                         bool allow_unused) {
  if (outputs.empty()) fail("grad", "no outputs to differentiate");
  if (!gradients.empty() && gradients.size() != outputs.size())
    fail("grad", "got ", gradients.size(), " gradients for ", outputs.size(), " outputs");
  std::vector<Tensor> grads;
  for (std::size_t i = 0; i < outputs.size(); ++i)
    grads.push_back(root_gradient(outputs[i], gradients.empty() ? Tensor() : gradients[i], "grad"));
  Capture capture;
  capture.grads.resize(inputs.size());
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const Tensor& t = inputs[i];
    if (!t.defined() || !t.requires_grad())
      fail("grad", "input ", i, " (", t.defined() ? detail::tensor_desc(t) : "undefined",
           ") does not require grad");
    if (auto fn = grad_fn(t))
      capture.nodes.emplace(fn.get(), i);
    else
      capture.leaves.emplace(t.impl().get(), i);
  }
  run_pass(outputs, std::move(grads), retain_graph.value_or(false), &capture);
  // An input listed twice gets its gradient at each place.
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    auto fn = grad_fn(inputs[i]);
    std::size_t first = fn ? capture.nodes[fn.get()] : capture.leaves[inputs[i].impl().get()];
    if (first != i) capture.grads[i] = capture.grads[first];
    if (!capture.grads[i].defined() && !allow_unused)
      fail("grad", "input ", i, " (", detail::tensor_desc(inputs[i]),
           ") appears to not have been used in the graph; set allow_unused=True if this is the "
           "desired behavior");
  }
  return capture.grads;
}

int64_t register_hook(const Tensor& t, TensorHook hook) {
  if (!t.defined() || !t.requires_grad())
    fail("register_hook", "cannot register a hook on a tensor that doesn't require gradient (",
         t.defined() ? detail::tensor_desc(t) : std::string("undefined"), ")");
  static std::atomic<int64_t> next_handle{1};
  const int64_t handle = next_handle++;
  if (auto fn = grad_fn(t))
    fn->pre_hooks.emplace_back(handle, std::move(hook));
  else
    meta_of(*t.impl()).grad_hooks.emplace_back(handle, std::move(hook));
  return handle;
}

void remove_hook(const Tensor& t, int64_t handle) {
  if (!t.defined() || !t.impl()->autograd) return;
  auto gone = [&](const auto& h) { return h.first == handle; };
  std::erase_if(t.impl()->autograd->grad_hooks, gone);
  if (auto fn = grad_fn(t)) std::erase_if(fn->pre_hooks, gone);
}

void retain_grad(const Tensor& t) {
  if (!t.defined() || !t.requires_grad())
    fail("retain_grad", "can't retain_grad on a tensor that has requires_grad=False (",
         t.defined() ? detail::tensor_desc(t) : std::string("undefined"), ")");
  if (auto fn = grad_fn(t)) fn->retain_grad_of = t.impl();
}

bool retains_grad(const Tensor& t) {
  if (!t.defined()) return false;
  auto fn = grad_fn(t);
  return fn && fn->retain_grad_of.lock() == t.impl();
}

int64_t register_post_accumulate_grad_hook(const Tensor& t, PostAccumulateGradHook hook) {
  if (!t.defined() || !t.requires_grad() || grad_fn(t))
    fail("register_post_accumulate_grad_hook",
         "post accumulate grad hooks can only be registered on leaf tensors that require grad, "
         "got ",
         t.defined() ? detail::tensor_desc(t) : std::string("an undefined tensor"));
  static std::atomic<int64_t> next_handle{1};
  const int64_t handle = next_handle++;
  meta_of(*t.impl()).post_accumulate_grad_hooks.emplace_back(handle, std::move(hook));
  return handle;
}

void remove_post_accumulate_grad_hook(const Tensor& t, int64_t handle) {
  if (!t.defined() || !t.impl()->autograd) return;
  auto& hooks = t.impl()->autograd->post_accumulate_grad_hooks;
  std::erase_if(hooks, [&](const auto& h) { return h.first == handle; });
}

// ---- Tensor's autograd methods ----------------------------------------------------------------

bool Tensor::is_leaf() const { return grad_fn(*this) == nullptr; }

Tensor Tensor::grad() const {
  if (!defined()) fail("grad", "undefined tensor");
  const TensorImpl& im = *impl();
  GradLock lock(grad_mutex);
  return im.autograd ? im.autograd->grad : Tensor();
}

void Tensor::set_grad(const Tensor& g) {
  if (!defined()) fail("set_grad", "undefined tensor");
  // The gradient replaced is freed after the lock is let go: freeing a tensor that views a
  // Python-owned buffer (a NumPy array) takes the GIL, and a thread holding the GIL may be waiting
  // for grad_mutex (Tensor::grad()), so taking it under the lock could deadlock.
  Tensor old;
  if (g.defined()) {
    if (g.dtype() != dtype() || g.shape() != shape())
      fail("set_grad", "assigned grad ", detail::tensor_desc(g), " must be ",
           dtype_name(dtype()).substr(6), " of shape ", shape_str(shape()));
    Tensor detached = g.detach();
    GradLock lock(grad_mutex);
    old = std::exchange(meta_of(*impl()).grad, std::move(detached));
  } else if (impl()->autograd) {
    GradLock lock(grad_mutex);
    old = std::exchange(impl()->autograd->grad, Tensor());
  }
}

void Tensor::backward(const Tensor& gradient, std::optional<bool> retain_graph) const {
  attn::backward(*this, gradient, retain_graph);
}

uint64_t Tensor::version() const { return impl()->storage->version; }

}  // namespace attn

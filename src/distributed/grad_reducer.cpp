// GradReducer: data-parallel gradient averaging in buckets that overlap with the backward pass
// (the scheme of PyTorch's DistributedDataParallel reducer, Li et al., VLDB 2020).
#include <attn/autograd.h>
#include <attn/distributed.h>

#include <chrono>
#include <cstring>
#include <unordered_set>

#include "../tensor/internal.h"
#include "backend.h"
#include "grads.h"

namespace attn::distributed {

using attn::detail::fail;

struct GradReducer::State {
  struct Bucket {
    std::vector<std::size_t> params;  // indices into State::params
    std::vector<int64_t> offsets;     // of each parameter in `flat`
    std::vector<float> flat;
    std::size_t ready = 0;  // parameters whose gradient is final in this pass
    Work work;
  };
  Communicator comm;
  std::vector<Tensor> params;
  std::vector<Bucket> buckets;
  std::vector<std::size_t> bucket_of;
  std::vector<char> is_ready;
  std::vector<int64_t> hooks;
  std::size_t next_launch = 0;
  double last_wait_s = 0;
  bool finish_in_backward = false, enabled = true, any_ready = false;
  std::function<void()> finish;  // GradReducer::finish, for finish_in_backward

  explicit State(Communicator c) : comm(std::move(c)) {}

  // Copies the bucket's gradients (zeros where a parameter has none) and starts its all-reduce.
  void launch(Bucket& b) {
    for (std::size_t k = 0; k < b.params.size(); ++k)
      detail::copy_grad_or_zeros(params[b.params[k]], b.flat.data() + b.offsets[k]);
    b.work = comm.all_reduce_async_raw(b.flat.data(), int64_t(b.flat.size()), ReduceOp::Avg);
  }

  // Starts every bucket that is complete, in bucket order (the same order on every rank, as MPI
  // requires of collectives), and lets the launched ones progress.
  void on_ready(std::size_t param) {
    if (!enabled || is_ready[param]) return;
    is_ready[param] = 1;
    any_ready = true;
    ++buckets[bucket_of[param]].ready;
    while (next_launch < buckets.size() &&
           buckets[next_launch].ready == buckets[next_launch].params.size())
      launch(buckets[next_launch++]);
    for (std::size_t i = 0; i < next_launch; ++i) buckets[i].work.is_completed();
    if (finish_in_backward && next_launch == buckets.size()) finish();
  }
};

GradReducer::GradReducer(std::vector<Tensor> params, Communicator comm, int64_t bucket_bytes,
                         bool finish_in_backward)
    : s_(std::make_shared<State>(std::move(comm))) {
  const char* fn = "GradReducer";
  if (bucket_bytes <= 0) fail(fn, "bucket_bytes must be positive, got ", bucket_bytes);
  std::string shapes;
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    if (!p.defined() || p.dtype() != Dtype::Float32 || !p.requires_grad() || !p.is_leaf() ||
        !p.is_contiguous())
      fail(fn, "parameter ", i, " must be a contiguous float32 leaf that requires grad, got ",
           p.defined() ? attn::detail::tensor_desc(p) : std::string("an undefined tensor"));
    for (std::size_t j = 0; j < i; ++j)
      if (params[j].is_same(p)) fail(fn, "parameter ", i, " is also parameter ", j);
    shapes += shape_str(p.shape());
  }
  State& s = *s_;
  s.comm.check_same("the parameters of GradReducer (shapes, in order; bucket size)",
                    shapes + "; bucket_bytes " + std::to_string(bucket_bytes));
  s.params = std::move(params);

  // Replicas start from rank 0's values.
  {
    NoGradGuard no_grad;
    for (Tensor& p : s.params) {
      Tensor view = p.detach();
      s.comm.broadcast(view, 0);
    }
  }

  // Buckets in reverse parameter order: a model's last layers get their gradients first.
  const int64_t cap = std::max<int64_t>(1, bucket_bytes / int64_t(sizeof(float)));
  s.bucket_of.assign(s.params.size(), 0);
  for (std::size_t k = s.params.size(); k-- > 0;) {
    const int64_t n = s.params[k].numel();
    if (s.buckets.empty() ||
        (!s.buckets.back().flat.empty() && int64_t(s.buckets.back().flat.size()) + n > cap))
      s.buckets.emplace_back();
    State::Bucket& b = s.buckets.back();
    b.params.push_back(k);
    b.offsets.push_back(int64_t(b.flat.size()));
    b.flat.resize(b.flat.size() + std::size_t(n));
    s.bucket_of[k] = s.buckets.size() - 1;
  }
  s.is_ready.assign(s.params.size(), 0);
  s.finish_in_backward = finish_in_backward;
  s.finish = [this] { finish(); };

  std::weak_ptr<State> weak = s_;
  for (std::size_t k = 0; k < s.params.size(); ++k)
    s.hooks.push_back(register_post_accumulate_grad_hook(s.params[k], [weak, k](const Tensor&) {
      if (auto st = weak.lock()) st->on_ready(k);
    }));
}

GradReducer::~GradReducer() {
  for (std::size_t k = 0; k < s_->params.size(); ++k)
    remove_post_accumulate_grad_hook(s_->params[k], s_->hooks[k]);
}

int64_t GradReducer::num_buckets() const { return int64_t(s_->buckets.size()); }
void GradReducer::set_enabled(bool enabled) { s_->enabled = enabled; }
bool GradReducer::enabled() const { return s_->enabled; }
bool GradReducer::pending() const { return s_->any_ready; }
void GradReducer::prepare_for_backward(const std::vector<Tensor>& outputs) {
  State& s = *s_;
  if (!s.enabled) return;
  std::unordered_set<const TensorImpl*> reached;
  std::unordered_set<const Node*> seen;
  std::vector<std::shared_ptr<Node>> stack;
  for (const Tensor& t : outputs) {
    if (!t.defined() || !t.requires_grad()) continue;
    if (auto fn = grad_fn(t))
      stack.push_back(fn);
    else
      reached.insert(t.impl().get());
  }
  while (!stack.empty()) {
    std::shared_ptr<Node> n = stack.back();
    stack.pop_back();
    if (!seen.insert(n.get()).second) continue;
    for (const Edge& e : n->inputs) {
      if (e.leaf) reached.insert(e.leaf.get());
      if (e.fn) stack.push_back(e.fn);
    }
  }
  for (std::size_t k = 0; k < s.params.size(); ++k)
    if (!reached.count(s.params[k].impl().get())) s.on_ready(k);
}

std::vector<int64_t> GradReducer::unready() const {
  std::vector<int64_t> out;
  if (!s_->any_ready) return out;
  for (std::size_t k = 0; k < s_->is_ready.size(); ++k)
    if (!s_->is_ready[k]) out.push_back(int64_t(k));
  return out;
}
double GradReducer::last_wait_s() const { return s_->last_wait_s; }

void GradReducer::finish() {
  State& s = *s_;
  const auto t0 = std::chrono::steady_clock::now();
  while (s.next_launch < s.buckets.size()) s.launch(s.buckets[s.next_launch++]);
  for (State::Bucket& b : s.buckets) b.work.wait();
  s.last_wait_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  NoGradGuard no_grad;
  for (State::Bucket& b : s.buckets) {
    for (std::size_t k = 0; k < b.params.size(); ++k) {
      Tensor& p = s.params[b.params[k]];
      const float* src = b.flat.data() + b.offsets[k];
      Tensor g = p.grad();
      if (!g.defined() || !g.is_contiguous()) {
        g = attn::detail::make_tensor(p.shape(), Dtype::Float32, /*zero=*/false);
        p.set_grad(g);
      }
      std::memcpy(g.data_ptr<float>(), src, std::size_t(p.numel()) * sizeof(float));
      attn::detail::bump_version(g);
    }
    b.ready = 0;
    b.work = Work();
  }
  std::fill(s.is_ready.begin(), s.is_ready.end(), 0);
  s.next_launch = 0;
  s.any_ready = false;
}

}  // namespace attn::distributed

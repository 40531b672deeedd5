// The optimizers' ops (optim_ops.h): checks, then the kernels of src/backend/optim_kernels.h for
// the tensors' device and dtype.
#include "optim_ops.h"

#include <attn/autograd.h>

#include <algorithm>
#include <cmath>

#include "../backend/optim_kernels.h"
#include "../tensor/internal.h"

namespace attn::detail {

namespace be = backend;

namespace {

// A tensor an optimizer op writes or reads: on `first`'s device, of its dtype.
void check_operand(const char* fn, const Tensor& t, const Tensor& first) {
  if (!t.defined()) return;
  if (t.device() != first.device())
    throw DeviceError(msg(fn, "expected all tensors on the same device, got ", first.device().str(),
                          " and ", t.device().str()));
  if (t.dtype() != first.dtype())
    fail(fn, "expected tensors of one dtype, got ", tensor_desc(first), " and ", tensor_desc(t));
}

// The kernel of `table` for xs's device and dtype (the first defined one's; the CPU's float32 for
// none).
template <typename Fn>
Fn* pick_for(const char* fn, const std::vector<const Tensor*>& xs, const be::Kernels<Fn>& cpu,
             const be::Kernels<Fn>& cuda) {
  const Tensor* first = nullptr;
  for (const Tensor* t : xs)
    if (t->defined()) {
      if (!first) first = t;
      check_operand(fn, *t, *first);
    }
  return first ? be::pick(fn, first->device(), first->dtype(), cpu, cuda)
               : be::pick(fn, Device(), Dtype::Float32, cpu, cuda);
}

// The host's float32 kernel of a table, for the flat host buffers of ZeRO and the communicator.
template <typename Fn>
Fn* host(const char* fn, const be::Kernels<Fn>& cpu, const be::Kernels<Fn>& cuda) {
  return be::pick(fn, Device(), Dtype::Float32, cpu, cuda);
}

void* ptr(const Tensor& t) { return t.defined() ? t.device_data() : nullptr; }

// The indices of items grouped by the dtype dtype_of gives each (in order of first appearance):
// one kernel call per dtype.
template <typename T, typename DtypeOf>
std::vector<std::vector<std::size_t>> by_dtype(const std::vector<T>& items, DtypeOf dtype_of) {
  std::vector<Dtype> dtypes;
  std::vector<std::vector<std::size_t>> groups;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const Dtype dt = dtype_of(items[i]);
    const auto it = std::find(dtypes.begin(), dtypes.end(), dt);
    if (it == dtypes.end()) {
      dtypes.push_back(dt);
      groups.push_back({i});
    } else {
      groups[std::size_t(it - dtypes.begin())].push_back(i);
    }
  }
  return groups;
}

Dtype tensor_dtype(const Tensor& t) { return t.dtype(); }

}  // namespace

void fused_adam_(const char* fn, const std::vector<AdamUpdate>& updates, float grad_scale) {
  // One kernel call per dtype of the parameters (float32, bfloat16, float16 may be mixed).
  for (const auto& group : by_dtype(updates, [](const AdamUpdate& u) { return u.p.dtype(); })) {
    std::vector<const Tensor*> all;
    for (std::size_t i : group) {
      const AdamUpdate& u = updates[i];
      for (const Tensor* t : {&u.p, &u.g, &u.m, &u.v, &u.vmax}) all.push_back(t);
    }
    const auto kernel = pick_for(fn, all, be::cpu::adam_step, be::cuda::adam_step);
    std::vector<be::AdamParam> params;
    for (std::size_t i : group) {
      const AdamUpdate& u = updates[i];
      params.push_back({ptr(u.p), ptr(u.g), ptr(u.m), ptr(u.v), ptr(u.vmax), u.p.numel(), u.fused,
                        u.gsign, u.l2, u.decay, u.beta1, u.one_minus_beta1, u.beta2,
                        u.one_minus_beta2, u.bc2_sqrt, u.eps, u.neg_step_size});
    }
    kernel({params.data(), int64_t(params.size()), grad_scale});
  }
}

void adamw_update_host(float* p, const float* g, float* m, float* v, int64_t n, int64_t step,
                       double lr, double beta1, double beta2, double eps, double weight_decay) {
  const double bc1 = 1.0 - std::pow(beta1, double(step));
  const double bc2 = 1.0 - std::pow(beta2, double(step));
  const double step_size = lr / bc1;
  const be::AdamParam u{p,
                        g,
                        m,
                        v,
                        nullptr,
                        n,
                        /*fused=*/true,
                        1.0f,
                        0.0f,
                        float(1.0 - lr * weight_decay),
                        float(beta1),
                        float(1.0 - beta1),
                        float(beta2),
                        float(1.0 - beta2),
                        float(std::sqrt(bc2)),
                        float(eps),
                        float(-step_size)};
  host("adamw_update", be::cpu::adam_step, be::cuda::adam_step)({&u, 1, 1.0f});
}

void scale_host(float* x, int64_t n, float coef) {
  host("scale", be::cpu::vector,
       be::cuda::vector)({be::VectorOp::Scale, x, n, coef, 0, 0, nullptr});
}
void divide_host(float* x, int64_t n, float d) {
  host("divide", be::cpu::vector, be::cuda::vector)({be::VectorOp::Divide, x, n, d, 0, 0, nullptr});
}
double sum_of_squares_host(const float* x, int64_t n) {
  double r = 0;
  host("sum_of_squares", be::cpu::vector,
       be::cuda::vector)({be::VectorOp::SumOfSquares, const_cast<float*>(x), n, 0, 0, 0, &r});
  return r;
}

void fused_sgd_(const char* fn, const Tensor& p, const Tensor& g, const Tensor& buf, float gsign,
                float wd, float momentum, float one_minus_dampening, bool nesterov, bool first,
                float neg_lr) {
  const auto kernel = pick_for(fn, {&p, &g, &buf}, be::cpu::sgd_step, be::cuda::sgd_step);
  kernel({ptr(p), ptr(g), ptr(buf), p.numel(), gsign, wd, momentum, one_minus_dampening, neg_lr,
          nesterov, first});
}

void fused_rmsprop_(const char* fn, const Tensor& p, const Tensor& g, const Tensor& square_avg,
                    const Tensor& grad_avg, const Tensor& buf, float gsign, float wd, float alpha,
                    float one_minus_alpha, float eps, float momentum, float neg_lr) {
  const auto kernel = pick_for(fn, {&p, &g, &square_avg, &grad_avg, &buf}, be::cpu::rmsprop_step,
                               be::cuda::rmsprop_step);
  kernel({ptr(p), ptr(g), ptr(square_avg), ptr(grad_avg), ptr(buf), p.numel(), gsign, wd, alpha,
          one_minus_alpha, eps, momentum, neg_lr});
}

void fused_adagrad_(const char* fn, const Tensor& p, const Tensor& g, const Tensor& sum,
                    float gsign, float wd, float eps, float neg_clr) {
  const auto kernel = pick_for(fn, {&p, &g, &sum}, be::cpu::adagrad_step, be::cuda::adagrad_step);
  kernel({ptr(p), ptr(g), ptr(sum), p.numel(), gsign, wd, eps, neg_clr});
}

std::vector<float> foreach_norm(const char* fn, const std::vector<Tensor>& xs, double norm_type) {
  std::vector<float> norms(xs.size());
  for (const auto& group : by_dtype(xs, tensor_dtype)) {
    std::vector<const Tensor*> all;
    std::vector<Tensor> cs;
    std::vector<const void*> ps;
    std::vector<int64_t> ns;
    for (std::size_t i : group) all.push_back(&xs[i]);
    const auto kernel = pick_for(fn, all, be::cpu::vector_norms, be::cuda::vector_norms);
    for (std::size_t i : group) {
      cs.push_back(xs[i].contiguous());
      ps.push_back(cs.back().device_data()), ns.push_back(cs.back().numel());
    }
    std::vector<float> out(group.size());
    kernel({ps.data(), ns.data(), int64_t(ps.size()), norm_type, out.data()});
    for (std::size_t j = 0; j < group.size(); ++j) norms[group[j]] = out[j];
  }
  return norms;
}

float norm_of(const std::vector<float>& values, double norm_type) {
  double r = 0;
  host("norm", be::cpu::vector,
       be::cuda::vector)({be::VectorOp::PNorm, const_cast<float*>(values.data()),
                          int64_t(values.size()), 0, 0, norm_type, &r});
  return float(r);
}

void foreach_mul_(const char* fn, std::vector<Tensor>& xs, float coef) {
  for (const auto& group : by_dtype(xs, tensor_dtype)) {
    std::vector<const Tensor*> all;
    for (std::size_t i : group) all.push_back(&xs[i]);
    const auto kernel = pick_for(fn, all, be::cpu::foreach_scale, be::cuda::foreach_scale);
    std::vector<void*> ps;
    std::vector<int64_t> ns;
    for (std::size_t i : group) {
      Tensor& x = xs[i];
      if (!x.is_contiguous()) {
        x.mul_(double(coef));
        continue;
      }
      ps.push_back(x.device_data()), ns.push_back(x.numel());
    }
    kernel({ps.data(), ns.data(), int64_t(ps.size()), coef});
    for (std::size_t i : group)
      if (xs[i].is_contiguous()) bump_version(xs[i]);
  }
}

void foreach_clamp_(const char* fn, std::vector<Tensor>& xs, float lo, float hi) {
  for (Tensor& x : xs) {
    const auto kernel = pick_for(fn, {&x}, be::cpu::vector, be::cuda::vector);
    // A strided tensor is clamped in a contiguous copy, copied back.
    Tensor c = x.is_contiguous() ? x : x.contiguous();
    kernel({be::VectorOp::Clamp, c.device_data(), c.numel(), lo, hi, 0, nullptr});
    if (c.impl() != x.impl())
      x.copy_(c);
    else
      bump_version(x);
  }
}

}  // namespace attn::detail

// The optimizers' ops (optim_ops.h): checks, then the element loops of src/backend/cpu/optim.h.
#include "optim_ops.h"

#include <attn/autograd.h>

#include <algorithm>
#include <cmath>

#include "../backend/cpu/optim.h"
#include "../backend/cpu/threads.h"
#include "../tensor/internal.h"

namespace attn::detail {

namespace {

// A tensor an optimizer op writes or reads: float32 on the CPU.
void check_operand(const char* fn, const Tensor& t) {
  if (!t.defined()) return;
  check_cpu(t, fn);
  if (t.dtype() != Dtype::Float32) fail(fn, "expected float32 tensors, got ", tensor_desc(t));
}

int threads_for(const std::vector<Tensor>& xs) {
  int64_t n = 0;
  for (const Tensor& x : xs) n += x.numel();
  return kernels::threads_for(n);
}

}  // namespace

void fused_adam_(const char* fn, const std::vector<AdamUpdate>& updates, float grad_scale) {
  for (const AdamUpdate& u : updates)
    for (const Tensor* t : {&u.p, &u.g, &u.m, &u.v, &u.vmax}) check_operand(fn, *t);
  // Elements [i0, i1) of update u.
  auto run = [grad_scale](const AdamUpdate& u, int64_t i0, int64_t i1) {
    float* p = u.p.data_ptr<float>() + i0;
    const float* g = u.g.data_ptr<float>() + i0;
    float* m = u.m.data_ptr<float>() + i0;
    float* v = u.v.data_ptr<float>() + i0;
    if (u.fused)
      kernels::adamw_update(p, g, m, v, i1 - i0, u.decay, u.beta1, u.one_minus_beta1, u.beta2,
                            u.one_minus_beta2, u.bc2_sqrt, u.eps, u.neg_step_size, grad_scale);
    else
      kernels::adam_update(p, g, m, v, u.vmax.defined() ? u.vmax.data_ptr<float>() + i0 : nullptr,
                           i1 - i0, u.gsign, u.l2, u.decay, u.beta1, u.one_minus_beta1, u.beta2,
                           u.one_minus_beta2, u.bc2_sqrt, u.eps, u.neg_step_size, grad_scale);
  };
  int64_t total = 0;
  for (const AdamUpdate& u : updates) total += u.p.numel();
  // Each thread's range of the elements of all parameters together.
  kernels::parallel_ranges(total, kernels::threads_for(total), [&](int64_t lo, int64_t hi) {
    int64_t start = 0;
    for (const AdamUpdate& u : updates) {
      const int64_t n = u.p.numel();
      const int64_t i0 = std::max(lo - start, int64_t(0)), i1 = std::min(hi - start, n);
      if (i0 < i1) run(u, i0, i1);
      start += n;
      if (start >= hi) break;
    }
  });
}

void adamw_update_host(float* p, const float* g, float* m, float* v, int64_t n, int64_t step,
                       double lr, double beta1, double beta2, double eps, double weight_decay) {
  const double bc1 = 1.0 - std::pow(beta1, double(step));
  const double bc2 = 1.0 - std::pow(beta2, double(step));
  const double step_size = lr / bc1;
  kernels::adamw_update(p, g, m, v, n, float(1.0 - lr * weight_decay), float(beta1),
                        float(1.0 - beta1), float(beta2), float(1.0 - beta2), float(std::sqrt(bc2)),
                        float(eps), float(-step_size), 1.0f);
}

void scale_host(float* x, int64_t n, float coef) { kernels::scale(x, n, coef); }
void divide_host(float* x, int64_t n, float d) { kernels::divide(x, n, d); }
double sum_of_squares_host(const float* x, int64_t n) { return kernels::sum_of_squares(x, n); }

void fused_sgd_(const char* fn, const Tensor& p, const Tensor& g, const Tensor& buf, float gsign,
                float wd, float momentum, float one_minus_dampening, bool nesterov, bool first,
                float neg_lr) {
  for (const Tensor* t : {&p, &g, &buf}) check_operand(fn, *t);
  kernels::sgd_update(p.data_ptr<float>(), g.data_ptr<float>(),
                      buf.defined() ? buf.data_ptr<float>() : nullptr, p.numel(), gsign, wd,
                      momentum, one_minus_dampening, nesterov, first, neg_lr);
}

std::vector<float> foreach_norm(const char* fn, const std::vector<Tensor>& xs, double norm_type) {
  std::vector<float> norms(xs.size());
  std::vector<Tensor> cs(xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) {
    check_operand(fn, xs[i]);
    cs[i] = xs[i].contiguous();
  }
  const int64_t count = int64_t(xs.size());
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads_for(xs)) if (count > 1)
  for (int64_t i = 0; i < count; ++i) {
    const Tensor& c = cs[std::size_t(i)];
    norms[std::size_t(i)] = kernels::vector_norm(c.data_ptr<float>(), c.numel(), norm_type);
  }
  return norms;
}

float norm_of(const std::vector<float>& values, double norm_type) {
  return kernels::p_norm(values.data(), int64_t(values.size()), norm_type);
}

void foreach_mul_(const char* fn, std::vector<Tensor>& xs, float coef) {
  for (Tensor& x : xs) {
    check_operand(fn, x);
    if (!x.is_contiguous()) x.mul_(double(coef));
  }
  const int64_t count = int64_t(xs.size());
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads_for(xs)) if (count > 1)
  for (int64_t i = 0; i < count; ++i) {
    Tensor& x = xs[std::size_t(i)];
    if (x.is_contiguous()) kernels::scale(x.data_ptr<float>(), x.numel(), coef);
  }
  for (Tensor& x : xs)
    if (x.is_contiguous()) bump_version(x);
}

void foreach_clamp_(const char* fn, std::vector<Tensor>& xs, float lo, float hi) {
  for (Tensor& x : xs) {
    check_operand(fn, x);
    // A strided tensor is clamped in a contiguous copy, copied back.
    Tensor c = x.is_contiguous() ? x : x.contiguous();
    kernels::clamp(c.data_ptr<float>(), c.numel(), lo, hi);
    if (c.impl() != x.impl())
      x.copy_(c);
    else
      bump_version(x);
  }
}

}  // namespace attn::detail

// The optimizers' element loops (optim.h).
#include "optim.h"

#include <attn/half.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "../optim_kernels.h"
#include "dot.h"
#include "elem.h"
#include "isa.h"
#include "threads.h"
#include "vmath.h"

namespace attn::kernels {

namespace {

// The p-norm of n values, as torch.norm: inf / -inf the largest / smallest |x|, 0 the count of
// non-zeros, otherwise (sum |x|^p)^(1/p); accumulated in double, rounded to float as torch's
// float result is.
template <typename Get>
float p_norm(int64_t n, double p, Get get) {
  const double inf = std::numeric_limits<double>::infinity();
  if (p == inf || p == -inf) {
    double m = p == inf ? 0.0 : inf;
    bool nan = false;
    for (int64_t i = 0; i < n; ++i) {
      const double a = std::fabs(double(get(i)));
      nan = nan || std::isnan(a);
      m = p == inf ? std::max(m, a) : std::min(m, a);
    }
    return nan ? std::numeric_limits<float>::quiet_NaN() : float(m);
  }
  double s = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const double a = std::fabs(double(get(i)));
    if (p == 0.0)
      s += a != 0.0 ? 1.0 : 0.0;
    else if (p == 1.0)
      s += a;
    else if (p == 2.0)
      s += a * a;
    else
      s += std::pow(a, p);
  }
  if (p == 0.0 || p == 1.0) return float(s);
  if (p == 2.0) return float(std::sqrt(s));
  return float(std::pow(s, 1.0 / p));
}

}  // namespace

// Adam's and AdamW's element loop, torch 1.13's single-tensor operations in torch's order per
// element, each rounded to float as its CPU kernels round them: a fused multiply-add where torch's
// build has one (add(other, alpha=a) is Vectorized::fmadd; addcmul's self + (value t1) t2 is
// contracted by its compiler), separate roundings elsewhere (mul, sqrt, the division, addcdiv's
// self + (value t1) / t2). So the float32 steps are torch's to the bit on x86-64
// (tests/python/test_optim_vs_torch.py):
//   g = gsign g (+ fma(p, l2, g)); p = p decay; m = fma(g, 1 - beta1, m beta1);
//   v = fma((1 - beta2) g, g, v beta2); vmax = max(vmax, v); d = sqrt(v) / bc2_sqrt + eps;
//   p = p + (neg_step_size m) / d.
// kGeneral false is AdamW without amsgrad or maximize, fused: the five element-wise passes of
// torch's single-tensor AdamW in one loop with nothing else in it (gsign 1, l2 0, vmax null).
// kGeneral true adds the gradient's sign gsign (-1: maximize), Adam's L2 term (l2 = 0 for AdamW)
// and, when vmax is not null, amsgrad's running maximum of v. Each gradient is first multiplied
// by gscale (gradient clipping's factor; 1 leaves it exact). kL2 (l2 != 0) and kAmsgrad (vmax not
// null) are template arguments: a branch on them in the loop became masked loads from the null
// vmax (AVX-512), each a slow fault-suppressing load on Zen 4 (Adam with weight decay took 6x
// AdamW's time).
template <bool kGeneral, bool kL2 = false, bool kAmsgrad = false>
__attribute__((always_inline)) inline void adam_loop(float* p, const float* g, float* m, float* v,
                                                     float* vmax, int64_t n, float gsign, float l2,
                                                     float decay, float beta1,
                                                     float one_minus_beta1, float beta2,
                                                     float one_minus_beta2, float bc2_sqrt,
                                                     float eps, float neg_step_size, float gscale) {
  for (int64_t i = 0; i < n; ++i) {
    float pi = p[i];
    float gi = g[i] * gscale;
    if constexpr (kGeneral) {
      gi = gsign * gi;
      if constexpr (kL2) gi = std::fma(pi, l2, gi);  // a template argument: no branch in the loop
    }
    pi = pi * decay;
    const float mi = std::fma(gi, one_minus_beta1, m[i] * beta1);
    const float vi = std::fma(one_minus_beta2 * gi, gi, v[i] * beta2);
    float vu = vi;
    if constexpr (kAmsgrad) {
      vu = std::max(vmax[i], vi);
      vmax[i] = vu;
    }
    const float denom = std::sqrt(vu) / bc2_sqrt + eps;
    pi = pi + (neg_step_size * mi) / denom;
    p[i] = pi;
    m[i] = mi;
    v[i] = vi;
  }
}

ATTN_ISA_INLINE void adamw_update_body(float* p, const float* g, float* m, float* v, int64_t n,
                                       float decay, float beta1, float one_minus_beta1, float beta2,
                                       float one_minus_beta2, float bc2_sqrt, float eps,
                                       float neg_step_size, float gscale) {
  adam_loop<false>(p, g, m, v, nullptr, n, 1.0f, 0.0f, decay, beta1, one_minus_beta1, beta2,
                   one_minus_beta2, bc2_sqrt, eps, neg_step_size, gscale);
}
ATTN_ISA_VARIANTS(void, adamw_update,
                  (float* p, const float* g, float* m, float* v, int64_t n, float decay,
                   float beta1, float one_minus_beta1, float beta2, float one_minus_beta2,
                   float bc2_sqrt, float eps, float neg_step_size, float gscale),
                  (p, g, m, v, n, decay, beta1, one_minus_beta1, beta2, one_minus_beta2, bc2_sqrt,
                   eps, neg_step_size, gscale))

ATTN_ISA_INLINE void adam_update_body(float* p, const float* g, float* m, float* v, float* vmax,
                                      int64_t n, float gsign, float l2, float decay, float beta1,
                                      float one_minus_beta1, float beta2, float one_minus_beta2,
                                      float bc2_sqrt, float eps, float neg_step_size,
                                      float gscale) {
  // Plain branches, not a lambda (see sgd_half_flags).
  if (l2 != 0.0f && vmax)
    adam_loop<true, true, true>(p, g, m, v, vmax, n, gsign, l2, decay, beta1, one_minus_beta1,
                                beta2, one_minus_beta2, bc2_sqrt, eps, neg_step_size, gscale);
  else if (l2 != 0.0f)
    adam_loop<true, true, false>(p, g, m, v, vmax, n, gsign, l2, decay, beta1, one_minus_beta1,
                                 beta2, one_minus_beta2, bc2_sqrt, eps, neg_step_size, gscale);
  else if (vmax)
    adam_loop<true, false, true>(p, g, m, v, vmax, n, gsign, l2, decay, beta1, one_minus_beta1,
                                 beta2, one_minus_beta2, bc2_sqrt, eps, neg_step_size, gscale);
  else
    adam_loop<true, false, false>(p, g, m, v, vmax, n, gsign, l2, decay, beta1, one_minus_beta1,
                                  beta2, one_minus_beta2, bc2_sqrt, eps, neg_step_size, gscale);
}
ATTN_ISA_VARIANTS(void, adam_update,
                  (float* p, const float* g, float* m, float* v, float* vmax, int64_t n,
                   float gsign, float l2, float decay, float beta1, float one_minus_beta1,
                   float beta2, float one_minus_beta2, float bc2_sqrt, float eps,
                   float neg_step_size, float gscale),
                  (p, g, m, v, vmax, n, gsign, l2, decay, beta1, one_minus_beta1, beta2,
                   one_minus_beta2, bc2_sqrt, eps, neg_step_size, gscale))

// One parameter's update, torch 1.13's operations in torch's order per element, its add(other,
// alpha=a) a fused multiply-add as in torch (Vectorized::fmadd): d = fma(p, wd, g); then with
// momentum buf = fma(d, 1 - dampening, buf momentum) (or buf = d when `first`), d = nesterov ?
// fma(buf, momentum, d) : buf; p = fma(d, -lr, p).
// The buffer's presence is a template argument (no branch in the loop: see adam_loop).
template <bool kBuf>
ATTN_ISA_INLINE void sgd_loop(float* p, const float* g, float* buf, int64_t n, float gsign,
                              float wd, float momentum, float one_minus_dampening, bool nesterov,
                              bool first, float neg_lr) {
  for (int64_t i = 0; i < n; ++i) {
    float d = wd != 0.0f ? std::fma(p[i], wd, gsign * g[i]) : gsign * g[i];
    if constexpr (kBuf) {
      const float b = first ? d : std::fma(d, one_minus_dampening, buf[i] * momentum);
      buf[i] = b;
      d = nesterov ? std::fma(b, momentum, d) : b;
    }
    p[i] = std::fma(d, neg_lr, p[i]);
  }
}
ATTN_ISA_INLINE void sgd_update_body(float* p, const float* g, float* buf, int64_t n, float gsign,
                                     float wd, float momentum, float one_minus_dampening,
                                     bool nesterov, bool first, float neg_lr) {
  if (buf)
    sgd_loop<true>(p, g, buf, n, gsign, wd, momentum, one_minus_dampening, nesterov, first, neg_lr);
  else
    sgd_loop<false>(p, g, buf, n, gsign, wd, momentum, one_minus_dampening, nesterov, first,
                    neg_lr);
}
ATTN_ISA_VARIANTS(void, sgd_update,
                  (float* p, const float* g, float* buf, int64_t n, float gsign, float wd,
                   float momentum, float one_minus_dampening, bool nesterov, bool first,
                   float neg_lr),
                  (p, g, buf, n, gsign, wd, momentum, one_minus_dampening, nesterov, first, neg_lr))

float p_norm(const float* x, int64_t n, double p) {
  return p_norm(n, p, [x](int64_t i) { return x[i]; });
}

float vector_norm(const float* x, int64_t n, double p) {
  return p == 2.0 ? float(std::sqrt(dot_double(x, x, n))) : p_norm(x, n, p);
}

void scale(float* x, int64_t n, float coef) {
  for (int64_t i = 0; i < n; ++i) x[i] *= coef;
}

void divide(float* x, int64_t n, float d) {
  for (int64_t i = 0; i < n; ++i) x[i] = x[i] / d;
}

double sum_of_squares(const float* x, int64_t n) {
  double sq = 0.0;
  for (int64_t i = 0; i < n; ++i) sq += double(x[i]) * double(x[i]);
  return sq;
}

void clamp(float* x, int64_t n, float lo, float hi) {
  for (int64_t i = 0; i < n; ++i)
    if (!std::isnan(x[i])) x[i] = std::min(std::max(x[i], lo), hi);
}

}  // namespace attn::kernels

// ---- the optimizers' tables (src/backend/optim_kernels.h), float32
// -------------------------------

namespace attn::kernels {
namespace {

// The parameters' elements as one range split across the threads: run(u, i0, i1) on the part
// [i0, i1) of each parameter u that falls in a thread's share.
template <typename F>
void for_each_share(const backend::AdamStep& s, F run) {
  int64_t total = 0;
  for (int64_t i = 0; i < s.count; ++i) total += s.params[i].n;
  parallel_ranges(total, threads_for(total), [&](int64_t lo, int64_t hi) {
    int64_t start = 0;
    for (int64_t i = 0; i < s.count; ++i) {
      const backend::AdamParam& u = s.params[i];
      const int64_t i0 = std::max(lo - start, int64_t(0)), i1 = std::min(hi - start, u.n);
      if (i0 < i1) run(u, i0, i1);
      start += u.n;
      if (start >= hi) break;
    }
  });
}

void adam_step_f32(const backend::AdamStep& s) {
  auto run = [&s](const backend::AdamParam& u, int64_t i0, int64_t i1) {
    float* p = static_cast<float*>(u.p) + i0;
    const float* g = static_cast<const float*>(u.g) + i0;
    float* m = static_cast<float*>(u.m) + i0;
    float* v = static_cast<float*>(u.v) + i0;
    if (u.fused)
      adamw_update(p, g, m, v, i1 - i0, u.decay, u.beta1, u.one_minus_beta1, u.beta2,
                   u.one_minus_beta2, u.bc2_sqrt, u.eps, u.neg_step_size, s.grad_scale);
    else
      adam_update(p, g, m, v, u.vmax ? static_cast<float*>(u.vmax) + i0 : nullptr, i1 - i0, u.gsign,
                  u.l2, u.decay, u.beta1, u.one_minus_beta1, u.beta2, u.one_minus_beta2, u.bc2_sqrt,
                  u.eps, u.neg_step_size, s.grad_scale);
  };
  for_each_share(s, run);
}

// bfloat16 / float16 parameters, their state in their dtype: torch's single-tensor step op by op,
// each op computed in float and rounded to the dtype (R), as its CPU kernels do:
//   g' = gsign R(g gscale) (+ R(l2) p, rounded), p = R(p decay), m = R(lerp(m, g', 1 - beta1)),
//   v = R(R(v beta2) + (1 - beta2) g' g'), vmax = max(vmax, v),
//   d = R(R(R(sqrt(v)) / bc2_sqrt) + R(eps)), p = R(p + neg_step_size (m / d)).
// (torch's add(other, alpha=a) and add(scalar) round the scalar to the dtype; mul, lerp, addcmul
// and addcdiv do not.)
// kL2 (l2 != 0) and kAmsgrad (vmax not null) are template arguments, so that the loop has no
// branch and vectorises where the dtype's conversions do (bfloat16); a decay or gscale of 1 is
// exact (R(x * 1) = x).
template <int kKind, bool kL2, bool kAmsgrad>  // kKind: 1 bfloat16, 2 float16
ATTN_ISA_INLINE void adam_half_loop(const backend::AdamParam& u, int64_t i0, int64_t i1,
                                    float gscale) {
  auto ld = [](uint16_t b) { return load_elem<kKind>(b); };
  auto st = [](float x) { return store_elem<kKind, uint16_t>(x); };
  auto R = [](float x) { return round_elem<kKind>(x); };
  auto* p = static_cast<uint16_t*>(u.p);
  const auto* g = static_cast<const uint16_t*>(u.g);
  auto* m = static_cast<uint16_t*>(u.m);
  auto* v = static_cast<uint16_t*>(u.v);
  [[maybe_unused]] auto* vmax = static_cast<uint16_t*>(u.vmax);
  const float w = u.one_minus_beta1;
  const bool lerp_from_start = std::fabs(w) < 0.5f;
  const float l2 = R(u.l2), eps = R(u.eps);  // torch's add rounds alpha / the scalar to the dtype
  for (int64_t i = i0; i < i1; ++i) {
    const float gi = u.gsign * R(ld(g[i]) * gscale);
    float pi = ld(p[i]);
    const float gd = kL2 ? R(gi + l2 * pi) : gi;
    pi = R(pi * u.decay);
    const float mo = ld(m[i]);
    const float mi = R(lerp_from_start ? mo + w * (gd - mo) : gd - (gd - mo) * (1.0f - w));
    const float vi = R(R(ld(v[i]) * u.beta2) + u.one_minus_beta2 * gd * gd);
    float vu = vi;
    if constexpr (kAmsgrad) {
      vu = std::max(ld(vmax[i]), vi);
      vmax[i] = st(vu);
    }
    const float d = R(R(R(std::sqrt(vu)) / u.bc2_sqrt) + eps);
    p[i] = st(pi + u.neg_step_size * (mi / d));
    m[i] = st(mi);
    v[i] = st(vi);
  }
}

template <int kKind>
ATTN_ISA_INLINE void adam_half_pick(const backend::AdamParam& u, int64_t i0, int64_t i1,
                                    float gscale) {
  if (u.l2 != 0.0f)
    u.vmax ? adam_half_loop<kKind, true, true>(u, i0, i1, gscale)
           : adam_half_loop<kKind, true, false>(u, i0, i1, gscale);
  else
    u.vmax ? adam_half_loop<kKind, false, true>(u, i0, i1, gscale)
           : adam_half_loop<kKind, false, false>(u, i0, i1, gscale);
}
ATTN_ISA_INLINE void adam_bf16_body(const backend::AdamParam& u, int64_t i0, int64_t i1,
                                    float gscale) {
  adam_half_pick<1>(u, i0, i1, gscale);
}
ATTN_ISA_VARIANTS(void, adam_bf16,
                  (const backend::AdamParam& u, int64_t i0, int64_t i1, float gscale),
                  (u, i0, i1, gscale))

template <int kKind>
void adam_step_half(const backend::AdamStep& s) {
  for_each_share(s, [&s](const backend::AdamParam& u, int64_t i0, int64_t i1) {
    if constexpr (kKind == 1)
      adam_bf16(u, i0, i1, s.grad_scale);
    else
      adam_half_pick<kKind>(u, i0, i1, s.grad_scale);
  });
}

// The elements split among the threads (each element's arithmetic is the same whatever the split).
void sgd_step_f32(const backend::SgdStep& s) {
  parallel_ranges(s.n, threads_for(s.n), [&s](int64_t i0, int64_t i1) {
    sgd_update(static_cast<float*>(s.p) + i0, static_cast<const float*>(s.g) + i0,
               s.buf ? static_cast<float*>(s.buf) + i0 : nullptr, i1 - i0, s.gsign, s.wd,
               s.momentum, s.one_minus_dampening, s.nesterov, s.first, s.neg_lr);
  });
}

// bfloat16 / float16 parameters, their momentum buffer in their dtype: torch's single-tensor step
// op by op, each op computed in float and rounded to the dtype (R):
//   d = gsign g (exact), then R(d + R(wd) p); buf = d (first step) or R(R(buf momentum) +
//   R(1 - dampening) d); d = nesterov ? R(d + R(momentum) buf) : buf; p = R(p + R(neg_lr) d).
// (torch's add(other, alpha=a) and add(scalar) round the scalar to the dtype; mul does not.)
// Weight decay, the buffer's presence, the first step and Nesterov are template arguments (no
// branch in the loop; with them as selects the bfloat16 loop took 10x torch's time).
template <int kKind, bool kWd, bool kBuf, bool kFirst, bool kNesterov>
ATTN_ISA_INLINE void sgd_half_loop(const backend::SgdStep& s, int64_t i0, int64_t i1) {
  auto ld = [](uint16_t b) { return load_elem<kKind>(b); };
  auto st = [](float x) { return store_elem<kKind, uint16_t>(x); };
  auto R = [](float x) { return round_elem<kKind>(x); };
  auto* p = static_cast<uint16_t*>(s.p);
  const auto* g = static_cast<const uint16_t*>(s.g);
  [[maybe_unused]] auto* buf = static_cast<uint16_t*>(s.buf);
  const float wd = R(s.wd), one_minus_dampening = R(s.one_minus_dampening),
              nesterov_momentum = R(s.momentum), neg_lr = R(s.neg_lr);
  for (int64_t i = i0; i < i1; ++i) {
    const float pi = ld(p[i]);
    float d = s.gsign * ld(g[i]);
    if constexpr (kWd) d = R(d + wd * pi);
    if constexpr (kBuf) {
      const float b = kFirst ? d : R(R(ld(buf[i]) * s.momentum) + one_minus_dampening * d);
      buf[i] = st(b);
      d = kNesterov ? R(d + nesterov_momentum * b) : b;
    }
    p[i] = st(pi + neg_lr * d);
  }
}

// The dispatch on the step's flags, in always-inline functions (not lambdas, which GCC may keep
// out of line and so compile for the baseline instruction set, not the caller's).
template <int kKind, bool kWd>
ATTN_ISA_INLINE void sgd_half_flags(const backend::SgdStep& s, int64_t i0, int64_t i1) {
  if (!s.buf)
    sgd_half_loop<kKind, kWd, false, false, false>(s, i0, i1);
  else if (s.first)
    s.nesterov ? sgd_half_loop<kKind, kWd, true, true, true>(s, i0, i1)
               : sgd_half_loop<kKind, kWd, true, true, false>(s, i0, i1);
  else
    s.nesterov ? sgd_half_loop<kKind, kWd, true, false, true>(s, i0, i1)
               : sgd_half_loop<kKind, kWd, true, false, false>(s, i0, i1);
}
template <int kKind>
ATTN_ISA_INLINE void sgd_half_pick(const backend::SgdStep& s, int64_t i0, int64_t i1) {
  s.wd != 0.0f ? sgd_half_flags<kKind, true>(s, i0, i1) : sgd_half_flags<kKind, false>(s, i0, i1);
}
ATTN_ISA_INLINE void sgd_bf16_body(const backend::SgdStep& s, int64_t i0, int64_t i1) {
  sgd_half_pick<1>(s, i0, i1);
}
ATTN_ISA_VARIANTS(void, sgd_bf16, (const backend::SgdStep& s, int64_t i0, int64_t i1), (s, i0, i1))

template <int kKind>
void sgd_step_half(const backend::SgdStep& s) {
  parallel_ranges(s.n, threads_for(s.n), [&s](int64_t i0, int64_t i1) {
    if constexpr (kKind == 1)
      sgd_bf16(s, i0, i1);
    else
      sgd_half_pick<kKind>(s, i0, i1);
  });
}

int threads_for_all(const int64_t* ns, int64_t count) {
  int64_t n = 0;
  for (int64_t i = 0; i < count; ++i) n += ns[i];
  return threads_for(n);
}

// One tensor per thread at a time.
void vector_norms_f32(const backend::VectorNorms& a) {
  const int64_t count = a.count;
#pragma omp parallel for schedule(dynamic, 1) \
    num_threads(threads_for_all(a.ns, count)) if (count > 1)
  for (int64_t i = 0; i < count; ++i)
    a.out[i] = vector_norm(static_cast<const float*>(a.xs[i]), a.ns[i], a.p);
}

void foreach_scale_f32(const backend::ForeachScale& a) {
  const int64_t count = a.count;
#pragma omp parallel for schedule(dynamic, 1) \
    num_threads(threads_for_all(a.ns, count)) if (count > 1)
  for (int64_t i = 0; i < count; ++i) scale(static_cast<float*>(a.xs[i]), a.ns[i], a.coef);
}

void vector_f32(const backend::Vector& a) {
  float* x = static_cast<float*>(a.x);
  switch (a.op) {
    case backend::VectorOp::Scale: scale(x, a.n, a.a); break;
    case backend::VectorOp::Divide: divide(x, a.n, a.a); break;
    case backend::VectorOp::Clamp: clamp(x, a.n, a.a, a.b); break;
    case backend::VectorOp::SumOfSquares: *a.result = sum_of_squares(x, a.n); break;
    case backend::VectorOp::PNorm: *a.result = kernels::p_norm(x, a.n, a.p); break;
  }
}

// bfloat16 / float16 tensors: each element widened exactly; a norm in double, rounded to float and
// then to the dtype (torch.linalg.vector_norm's result dtype); in-place ops computed in float and
// rounded once.
template <int kKind>
float half_norm(const uint16_t* x, int64_t n, double p) {
  return round_elem<kKind>(p_norm(n, p, [x](int64_t i) { return load_elem<kKind>(x[i]); }));
}

template <int kKind>
void vector_norms_half(const backend::VectorNorms& a) {
  const int64_t count = a.count;
#pragma omp parallel for schedule(dynamic, 1) \
    num_threads(threads_for_all(a.ns, count)) if (count > 1)
  for (int64_t i = 0; i < count; ++i)
    a.out[i] = half_norm<kKind>(static_cast<const uint16_t*>(a.xs[i]), a.ns[i], a.p);
}

// x = op(x) over n elements in float, each rounded once to the dtype.
template <int kKind, typename F>
void map_half(uint16_t* x, int64_t n, F op) {
  parallel_ranges(n, threads_for(n), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i)
      x[i] = store_elem<kKind, uint16_t>(op(load_elem<kKind>(x[i])));
  });
}

template <int kKind>
void foreach_scale_half(const backend::ForeachScale& a) {
  const float c = a.coef;
  for (int64_t i = 0; i < a.count; ++i)
    map_half<kKind>(static_cast<uint16_t*>(a.xs[i]), a.ns[i], [c](float v) { return v * c; });
}

template <int kKind>
void vector_half(const backend::Vector& a) {
  auto* x = static_cast<uint16_t*>(a.x);
  const float lo = a.a, hi = a.b;
  switch (a.op) {
    case backend::VectorOp::Scale: map_half<kKind>(x, a.n, [lo](float v) { return v * lo; }); break;
    case backend::VectorOp::Divide:
      map_half<kKind>(x, a.n, [lo](float v) { return v / lo; });
      break;
    case backend::VectorOp::Clamp:
      map_half<kKind>(
          x, a.n, [lo, hi](float v) { return std::isnan(v) ? v : std::min(std::max(v, lo), hi); });
      break;
    case backend::VectorOp::SumOfSquares: {
      double sq = 0.0;
      for (int64_t i = 0; i < a.n; ++i) {
        const double v = load_elem<kKind>(x[i]);
        sq += v * v;
      }
      *a.result = sq;
      break;
    }
    case backend::VectorOp::PNorm:
      *a.result = p_norm(a.n, a.p, [x](int64_t i) { return load_elem<kKind>(x[i]); });
      break;
  }
}

}  // namespace
}  // namespace attn::kernels

namespace attn::backend::cpu {
const Kernels<AdamStepFn> adam_step = {kernels::adam_step_f32, nullptr, nullptr,
                                       kernels::adam_step_half<1>, kernels::adam_step_half<2>};
const Kernels<SgdStepFn> sgd_step = {kernels::sgd_step_f32, nullptr, nullptr,
                                     kernels::sgd_step_half<1>, kernels::sgd_step_half<2>};
const Kernels<VectorNormsFn> vector_norms = {kernels::vector_norms_f32, nullptr, nullptr,
                                             kernels::vector_norms_half<1>,
                                             kernels::vector_norms_half<2>};
const Kernels<ForeachScaleFn> foreach_scale = {kernels::foreach_scale_f32, nullptr, nullptr,
                                               kernels::foreach_scale_half<1>,
                                               kernels::foreach_scale_half<2>};
const Kernels<VectorFn> vector = {kernels::vector_f32, nullptr, nullptr, kernels::vector_half<1>,
                                  kernels::vector_half<2>};
}  // namespace attn::backend::cpu

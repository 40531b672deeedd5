// The element loops of RMSprop and Adagrad (src/backend/optim_kernels.h), written once for
// float32, bfloat16 and float16: torch 1.13's single-tensor steps op by op, so that a split of the
// elements among threads never changes a result.
//
// float32: every op rounds to float as torch's CPU kernels do. Two of them are fused
// multiply-adds there, and so they are here: add(other, alpha=a) (Vectorized::fmadd) and addcmul,
// self + (value t1) t2, which its compiler contracts into fma(value t1, t2, self) (checked
// against torch 1.13: with separate roundings 0.08% of RMSprop's first centered steps differ);
// mul and addcdiv (self + (value t1) / t2) round each operation.
// bfloat16 / float16 (the state in the parameter's dtype): each op is computed in float and
// rounded once to the dtype (R); add(other, alpha=a) and add(scalar) round the scalar to the
// dtype first, mul, addcmul and addcdiv do not (as the Adam and SGD loops of optim.cpp).
#include <cmath>
#include <cstdint>

#include "../optim_kernels.h"
#include "elem.h"
#include "isa.h"
#include "threads.h"

namespace attn::kernels {
namespace {

template <int kKind>
struct Elems {
  using E = std::conditional_t<kKind == 0, float, uint16_t>;
  static float ld(E v) { return load_elem<kKind>(v); }
  static E st(float x) { return store_elem<kKind, E>(x); }
  static float R(float x) { return round_elem<kKind>(x); }
  // torch's a.add(b, alpha=alpha).
  static float add_alpha(float a, float b, float alpha) {
    if constexpr (kKind == 0)
      return std::fma(b, alpha, a);
    else
      return R(a + R(alpha) * b);
  }
  // torch's self.addcmul(t1, t2, value=value).
  static float addcmul(float self, float t1, float t2, float value) {
    if constexpr (kKind == 0)
      return std::fma(value * t1, t2, self);
    else
      return R(self + value * t1 * t2);
  }
};

// torch.optim.RMSprop's _single_tensor_rmsprop on elements [i0, i1):
//   grad = -grad (maximize); grad = grad.add(param, alpha=wd)
//   square_avg.mul_(alpha).addcmul_(grad, grad, value=1 - alpha)
//   centered: grad_avg.mul_(alpha).add_(grad, alpha=1 - alpha) (torch 2.x, the oracle of the
//             2-byte dtypes: grad_avg.lerp_(grad, 1 - alpha));
//             avg = square_avg.addcmul(grad_avg, grad_avg, value=-1).sqrt_()
//   else avg = square_avg.sqrt();  avg.add_(eps)
//   momentum: buf.mul_(momentum).addcdiv_(grad, avg); param.add_(buf, alpha=-lr)
//   else param.addcdiv_(grad, avg, value=-lr)
// The branches on weight decay, centered and momentum are template arguments, so that the loop
// has none and vectorises.
template <int kKind, bool kWd, bool kCentered, bool kMomentum>
ATTN_ISA_INLINE void rmsprop_range(const backend::RmspropStep& s, int64_t i0, int64_t i1) {
  using X = Elems<kKind>;
  using E = typename X::E;
  auto* p = static_cast<E*>(s.p);
  const auto* g = static_cast<const E*>(s.g);
  auto* sq = static_cast<E*>(s.square_avg);
  [[maybe_unused]] auto* ga = static_cast<E*>(s.grad_avg);
  [[maybe_unused]] auto* buf = static_cast<E*>(s.buf);
  const float eps = kKind == 0 ? s.eps : X::R(s.eps);
  for (int64_t i = i0; i < i1; ++i) {
    const float pi = X::ld(p[i]);
    float d = s.gsign * X::ld(g[i]);
    if constexpr (kWd) d = X::add_alpha(d, pi, s.wd);
    const float sa = X::addcmul(X::R(X::ld(sq[i]) * s.alpha), d, d, s.one_minus_alpha);
    sq[i] = X::st(sa);
    float avg;
    if constexpr (kCentered) {
      float a;
      if constexpr (kKind == 0) {  // torch 1.13: grad_avg.mul_(alpha).add_(grad, alpha=1 - alpha)
        a = X::add_alpha(X::R(X::ld(ga[i]) * s.alpha), d, s.one_minus_alpha);
      } else {  // torch 2.x, the oracle for 2-byte dtypes: grad_avg.lerp_(grad, 1 - alpha)
        const float go = X::ld(ga[i]), w = s.one_minus_alpha;
        a = X::R(std::fabs(w) < 0.5f ? go + w * (d - go) : d - (d - go) * (1.0f - w));
      }
      ga[i] = X::st(a);
      avg = X::R(std::sqrt(X::addcmul(sa, a, a, -1.0f)));
    } else {
      avg = X::R(std::sqrt(sa));
    }
    avg = X::R(avg + eps);
    if constexpr (kMomentum) {
      const float b = X::R(X::R(X::ld(buf[i]) * s.momentum) + 1.0f * d / avg);
      buf[i] = X::st(b);
      p[i] = X::st(X::add_alpha(pi, b, s.neg_lr));
    } else {
      p[i] = X::st(pi + s.neg_lr * d / avg);
    }
  }
}

// torch.optim.Adagrad's _single_tensor_adagrad (dense gradient) on elements [i0, i1):
//   grad = -grad (maximize); grad = grad.add(param, alpha=wd)
//   state_sum.addcmul_(grad, grad, value=1); std = state_sum.sqrt().add_(eps)
//   param.addcdiv_(grad, std, value=-clr)
template <int kKind, bool kWd>
ATTN_ISA_INLINE void adagrad_range(const backend::AdagradStep& s, int64_t i0, int64_t i1) {
  using X = Elems<kKind>;
  using E = typename X::E;
  auto* p = static_cast<E*>(s.p);
  const auto* g = static_cast<const E*>(s.g);
  auto* sum = static_cast<E*>(s.sum);
  const float eps = kKind == 0 ? s.eps : X::R(s.eps);
  for (int64_t i = i0; i < i1; ++i) {
    const float pi = X::ld(p[i]);
    float d = s.gsign * X::ld(g[i]);
    if constexpr (kWd) d = X::add_alpha(d, pi, s.wd);
    const float acc = X::addcmul(X::ld(sum[i]), d, d, 1.0f);
    sum[i] = X::st(acc);
    const float std_ = X::R(X::R(std::sqrt(acc)) + eps);
    p[i] = X::st(pi + s.neg_clr * d / std_);
  }
}

// The loop for the step's weight decay, centered and momentum.
template <int kKind, bool kWd>
ATTN_ISA_INLINE void rmsprop_pick(const backend::RmspropStep& s, int64_t i0, int64_t i1) {
  if (s.grad_avg)
    s.buf ? rmsprop_range<kKind, kWd, true, true>(s, i0, i1)
          : rmsprop_range<kKind, kWd, true, false>(s, i0, i1);
  else
    s.buf ? rmsprop_range<kKind, kWd, false, true>(s, i0, i1)
          : rmsprop_range<kKind, kWd, false, false>(s, i0, i1);
}
template <int kKind>
ATTN_ISA_INLINE void rmsprop_any(const backend::RmspropStep& s, int64_t i0, int64_t i1) {
  s.wd != 0.0f ? rmsprop_pick<kKind, true>(s, i0, i1) : rmsprop_pick<kKind, false>(s, i0, i1);
}
template <int kKind>
ATTN_ISA_INLINE void adagrad_any(const backend::AdagradStep& s, int64_t i0, int64_t i1) {
  s.wd != 0.0f ? adagrad_range<kKind, true>(s, i0, i1) : adagrad_range<kKind, false>(s, i0, i1);
}

// float32 in the instruction-set builds of isa.h (fma is one instruction from AVX2 on).
ATTN_ISA_INLINE void rmsprop_f32_body(const backend::RmspropStep& s, int64_t i0, int64_t i1) {
  rmsprop_any<0>(s, i0, i1);
}
ATTN_ISA_VARIANTS(void, rmsprop_f32, (const backend::RmspropStep& s, int64_t i0, int64_t i1),
                  (s, i0, i1))
ATTN_ISA_INLINE void adagrad_f32_body(const backend::AdagradStep& s, int64_t i0, int64_t i1) {
  adagrad_any<0>(s, i0, i1);
}
ATTN_ISA_VARIANTS(void, adagrad_f32, (const backend::AdagradStep& s, int64_t i0, int64_t i1),
                  (s, i0, i1))

// bfloat16 too, whose conversions vectorise (float16's do not: it runs the baseline build).
ATTN_ISA_INLINE void rmsprop_bf16_body(const backend::RmspropStep& s, int64_t i0, int64_t i1) {
  rmsprop_any<1>(s, i0, i1);
}
ATTN_ISA_VARIANTS(void, rmsprop_bf16, (const backend::RmspropStep& s, int64_t i0, int64_t i1),
                  (s, i0, i1))
ATTN_ISA_INLINE void adagrad_bf16_body(const backend::AdagradStep& s, int64_t i0, int64_t i1) {
  adagrad_any<1>(s, i0, i1);
}
ATTN_ISA_VARIANTS(void, adagrad_bf16, (const backend::AdagradStep& s, int64_t i0, int64_t i1),
                  (s, i0, i1))

template <int kKind>
void rmsprop_step(const backend::RmspropStep& s) {
  parallel_ranges(s.n, threads_for(s.n), [&s](int64_t i0, int64_t i1) {
    if constexpr (kKind == 0)
      rmsprop_f32(s, i0, i1);
    else if constexpr (kKind == 1)
      rmsprop_bf16(s, i0, i1);
    else
      rmsprop_any<kKind>(s, i0, i1);
  });
}

template <int kKind>
void adagrad_step(const backend::AdagradStep& s) {
  parallel_ranges(s.n, threads_for(s.n), [&s](int64_t i0, int64_t i1) {
    if constexpr (kKind == 0)
      adagrad_f32(s, i0, i1);
    else if constexpr (kKind == 1)
      adagrad_bf16(s, i0, i1);
    else
      adagrad_any<kKind>(s, i0, i1);
  });
}

}  // namespace
}  // namespace attn::kernels

namespace attn::backend::cpu {
const Kernels<RmspropStepFn> rmsprop_step = {kernels::rmsprop_step<0>, nullptr, nullptr,
                                             kernels::rmsprop_step<1>, kernels::rmsprop_step<2>};
const Kernels<AdagradStepFn> adagrad_step = {kernels::adagrad_step<0>, nullptr, nullptr,
                                             kernels::adagrad_step<1>, kernels::adagrad_step<2>};
}  // namespace attn::backend::cpu

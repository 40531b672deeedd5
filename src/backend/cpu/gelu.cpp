// GELU forward and backward on float32 and SiLU's forward on float32, bfloat16 and float16
// (src/backend/layer_kernels.h), and the element kernels
// that the product with GELU in its epilogue (ops/layer_ops.cpp, linear_gelu) runs on its rows.
//
// exp, tanh and erfc are vmath.h's branch-free polynomials, so that the loops vectorise; the loops
// are built for AVX-512, AVX2+FMA and baseline (ATTN_ISA_VARIANTS, isa.h).
#include "gelu.h"

#include <attn/half.h>
#include <omp.h>

#include <cmath>

#include "../layer_kernels.h"
#include "elem.h"
#include "isa.h"
#include "threads.h"
#include "vmath.h"

namespace attn::kernels {
namespace vm = vmath;
namespace {

// Element counts below this run on one thread (a parallel region costs more).
constexpr int64_t kMinParallelElems = 1 << 15;

constexpr float kSqrt1_2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;
constexpr float kBeta = 0.79788456080286536f;  // sqrt(2 / pi)
constexpr float kKappa = 0.044715f;

// Phi(x), the standard normal CDF, with small relative error on both tails.
inline float normal_cdf(float x) {
  const float e = 0.5f * vm::erfc_pos(std::fabs(x) * kSqrt1_2);
  return x < 0.f ? e : 1.f - e;
}

}  // namespace

// With `aux` (when a backward will follow) the forward also keeps what the backward would
// otherwise recompute: Phi(x), or for the tanh form tanh(sqrt(2/pi) (x + 0.044715 x^3)). The
// backward then evaluates one exp (or nothing) per element instead of erfc and exp (or tanh), with
// the same values, so the gradients are those of recomputing them, bit for bit.
ATTN_ISA_INLINE void gelu_fwd_body(const float* x, float* y, float* aux, int64_t n,
                                   bool tanh_approx) {
  if (tanh_approx) {
    for (int64_t i = 0; i < n; ++i) {
      const float v = x[i];
      const float t = vm::tanh(kBeta * (v + kKappa * v * v * v));
      y[i] = 0.5f * v * (1.f + t);
      if (aux) aux[i] = t;  // loop-invariant: GCC unswitches the loop
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      const float cdf = normal_cdf(x[i]);
      y[i] = x[i] * cdf;
      if (aux) aux[i] = cdf;
    }
  }
}
ATTN_ISA_VARIANTS(void, gelu_fwd,
                  (const float* x, float* y, float* aux, int64_t n, bool tanh_approx),
                  (x, y, aux, n, tanh_approx))

ATTN_ISA_INLINE void gelu_bwd_body(const float* x, const float* aux, const float* g, float* dx,
                                   int64_t n, bool tanh_approx) {
  if (tanh_approx) {
    for (int64_t i = 0; i < n; ++i) {
      const float v = x[i], t = aux[i];
      const float left = 0.5f * v, right = 1.f + t;
      const float inner_d = kBeta * (1.f + 3.f * kKappa * v * v);
      dx[i] = g[i] * (0.5f * right + left * (1.f - t * t) * inner_d);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      const float v = x[i];
      const float pdf = vm::exp(-0.5f * v * v) * kInvSqrt2Pi;
      dx[i] = g[i] * (aux[i] + v * pdf);
    }
  }
}
ATTN_ISA_VARIANTS(void, gelu_bwd,
                  (const float* x, const float* aux, const float* g, float* dx, int64_t n,
                   bool tanh_approx),
                  (x, aux, g, dx, n, tanh_approx))

void column_sums(const float* g, int64_t M, int64_t N, int64_t c0, int64_t c1, float* out) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = c0; j < c1; ++j) out[j] += g[i * N + j];
}

namespace {

void gelu_forward_f32(const backend::GeluForward& a) {
  const auto* x = static_cast<const float*>(a.x);
  auto *y = static_cast<float*>(a.y), *aux = static_cast<float*>(a.aux);
  parallel_ranges(a.n, threads_for(a.n, kMinParallelElems), [&](int64_t i0, int64_t i1) {
    gelu_fwd(x + i0, y + i0, aux ? aux + i0 : nullptr, i1 - i0, a.tanh_approx);
  });
}

void gelu_backward_f32(const backend::GeluBackward& a) {
  const auto *x = static_cast<const float*>(a.x), *aux = static_cast<const float*>(a.aux),
             *dy = static_cast<const float*>(a.dy);
  auto *dx = static_cast<float*>(a.dx), *db = static_cast<float*>(a.db);
  const int64_t M = a.rows, N = a.cols;
  if (!db) {
    const int64_t n = M * N;
    parallel_ranges(n, threads_for(n, kMinParallelElems), [&](int64_t i0, int64_t i1) {
      gelu_bwd(x + i0, aux + i0, dy + i0, dx + i0, i1 - i0, a.tanh_approx);
    });
    return;
  }
  // A product's GELU: the gradient by rows, then (after a barrier) the bias's column sums of it,
  // in one region.
  std::fill(db, db + N, 0.f);
  auto share = [&](int t, int nt) {
    const auto [r0, r1] = thread_share(M, t, nt);
    gelu_bwd(x + r0 * N, aux + r0 * N, dy + r0 * N, dx + r0 * N, (r1 - r0) * N, a.tanh_approx);
    if (nt > 1) {
#pragma omp barrier
    }
    const auto [c0, c1] = thread_share(N, t, nt, 16);  // whole vectors of columns
    column_sums(dx, M, N, c0, c1, db);
  };
  const int nt = threads_for(M * N);
  if (nt > 1) {
#pragma omp parallel num_threads(nt)
    share(omp_get_thread_num(), omp_get_num_threads());
  } else {
    share(0, 1);
  }
}

// SiLU, x / (1 + e^-x) as torch's CPU kernel writes it, over n elements; E and kKind as
// layer_norm.cpp's rms_norm_rows (0 float32, 1 bfloat16, 2 float16).
template <typename E, int kKind>
ATTN_ISA_INLINE void silu_elems(const E* x, E* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float v = load_elem<kKind>(x[i]);
    y[i] = store_elem<kKind, E>(v / (1.0f + vm::exp(-v)));
  }
}
ATTN_ISA_INLINE void silu_f32_body(const void* x, void* y, int64_t n) {
  silu_elems<float, 0>(static_cast<const float*>(x), static_cast<float*>(y), n);
}
ATTN_ISA_INLINE void silu_bf16_body(const void* x, void* y, int64_t n) {
  silu_elems<uint16_t, 1>(static_cast<const uint16_t*>(x), static_cast<uint16_t*>(y), n);
}
ATTN_ISA_INLINE void silu_fp16_body(const void* x, void* y, int64_t n) {
  silu_elems<uint16_t, 2>(static_cast<const uint16_t*>(x), static_cast<uint16_t*>(y), n);
}
ATTN_ISA_VARIANTS(void, silu_f32, (const void* x, void* y, int64_t n), (x, y, n))
ATTN_ISA_VARIANTS(void, silu_bf16, (const void* x, void* y, int64_t n), (x, y, n))
ATTN_ISA_VARIANTS(void, silu_fp16, (const void* x, void* y, int64_t n), (x, y, n))

template <void (*Elems)(const void*, void*, int64_t), int64_t kSize>
void silu_forward(const backend::SiluForward& a) {
  const auto* x = static_cast<const char*>(a.x);
  auto* y = static_cast<char*>(a.y);
  parallel_ranges(a.n, threads_for(a.n, kMinParallelElems),
                  [&](int64_t i0, int64_t i1) { Elems(x + i0 * kSize, y + i0 * kSize, i1 - i0); });
}

}  // namespace
}  // namespace attn::kernels

namespace attn::backend::cpu {
const Kernels<SiluForwardFn> silu_forward = {kernels::silu_forward<kernels::silu_f32, 4>, nullptr,
                                             nullptr, kernels::silu_forward<kernels::silu_bf16, 2>,
                                             kernels::silu_forward<kernels::silu_fp16, 2>};
const Kernels<GeluForwardFn> gelu_forward = {kernels::gelu_forward_f32};
const Kernels<GeluBackwardFn> gelu_backward = {kernels::gelu_backward_f32};
}  // namespace attn::backend::cpu

// The linear layer's products on float32 (src/backend/layer_kernels.h): y = act(x W^T + b) in one
// parallel region (the bias as the product's prologue, GELU as its epilogue), the two products of
// its backward, and the bias's gradient.
#include <algorithm>
#include <memory>
#include <vector>

#include "../layer_kernels.h"
#include "gelu.h"
#include "gemm.h"
#include "gemm_half.h"
#include "gemm_rows.h"
#include "onednn_matmul.h"
#include "threads.h"

namespace attn::kernels {
namespace {

// The bias's rows of the product's output, for sgemm's prologue (the product then adds with
// beta 1).
GemmRows fill_bias(const float* b, float* out, int64_t N) {
  if (!b) return {};
  return [b, out, N](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) std::copy(b, b + N, out + i * N);
  };
}

void linear_forward_f32(const backend::LinearForward& a) {
  const int64_t M = a.M, N = a.N, K = a.K;
  if (M == 0 || N == 0) return;
  const auto *x = static_cast<const float*>(a.x), *w = static_cast<const float*>(a.w),
             *b = static_cast<const float*>(a.b);
  auto* y = static_cast<float*>(a.y);
  if (a.act == backend::Activation::None) {
    if (K > 0)
      sgemm(false, true, M, N, K, 1.0f, x, K, w, K, b ? 1.0f : 0.0f, y, N, fill_bias(b, y, N), {});
    else if (b)
      fill_bias(b, y, N)(0, M);
    else
      std::fill(y, y + M * N, 0.f);
    return;
  }
  auto *pre = static_cast<float*>(a.pre), *aux = static_cast<float*>(a.aux);
  const bool tanh_approx = a.act == backend::Activation::GeluTanh;
  sgemm(false, true, M, N, K, 1.0f, x, K, w, K, b ? 1.0f : 0.0f, pre, N, fill_bias(b, pre, N),
        [=](int64_t r0, int64_t r1) {
          gelu_fwd(pre + r0 * N, y + r0 * N, aux ? aux + r0 * N : nullptr, (r1 - r0) * N,
                   tanh_approx);
        });
}

void linear_backward_f32(const backend::LinearBackward& a) {
  const int64_t M = a.M, N = a.N, K = a.K;
  if (M == 0 || K == 0 || N == 0) return;  // the caller's outputs hold zeros
  const auto *g = static_cast<const float*>(a.g), *x = static_cast<const float*>(a.x),
             *w = static_cast<const float*>(a.w);
  if (a.dx) sgemm(false, false, M, K, N, 1.0f, g, N, w, K, 0.0f, static_cast<float*>(a.dx), K);
  if (a.dw) sgemm(true, false, N, K, M, 1.0f, g, N, x, K, 0.0f, static_cast<float*>(a.dw), K);
}

void bias_backward_f32(const backend::BiasBackward& a) {
  const auto* g = static_cast<const float*>(a.g);
  auto* db = static_cast<float*>(a.db);
  const int64_t M = a.rows, N = a.cols;
  std::fill(db, db + N, 0.f);
  parallel_ranges(N, threads_for(M * N),
                  [&](int64_t c0, int64_t c1) { column_sums(g, M, N, c0, c1, db); });
}

// bfloat16 / float16 (kind): the product in float with the weight read as stored, the bias added
// in float, then GELU when asked, each output rounded once to the dtype (PyTorch's CPU semantics:
// float accumulation, one rounding). pre and aux, when asked, are rounded too. bfloat16 products
// of two rows or more go to oneDNN's bfloat16 kernels where the CPU has them (onednn_matmul.h:
// 2x the widening path on 8 rows and on 512, bench/half_linear_compare.py); one row, and the rest,
// to gemm_half.h: few rows by AVX512-BF16's dot product where the CPU has it (bfloat16), or
// streaming the weight and widening it as read; more rows widening it by blocks for sgemm.
template <HalfKind kind>
void linear_forward_half(const backend::LinearForward& a) {
  const int64_t M = a.M, N = a.N, K = a.K;
  if (M == 0 || N == 0) return;
  const auto *x = static_cast<const uint16_t*>(a.x), *w = static_cast<const uint16_t*>(a.w),
             *b = static_cast<const uint16_t*>(a.b);
  if (kind == HalfKind::BFloat16 && a.act == backend::Activation::None && M > 1 &&
      onednn_matmul_bf16(false, true, M, N, K, x, K, w, K, b, static_cast<uint16_t*>(a.y), N))
    return;
  // Written before read: not cleared (which cost as much as the rounding of the result).
  const auto yf = std::make_unique_for_overwrite<float[]>(size_t(M * N));
  if (kind != HalfKind::BFloat16 || !gemm_bf16_weights_dot(M, N, K, x, K, w, K, yf.get(), N)) {
    const auto xf = std::make_unique_for_overwrite<float[]>(size_t(M * K));
    widen_half(kind, x, xf.get(), M * K);
    gemm_half_weights(kind, M, N, K, xf.get(), K, w, K, yf.get(), N);
  }
  if (b) {
    std::vector<float> bf(static_cast<size_t>(N));
    widen_half(kind, b, bf.data(), N);
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) yf[size_t(m * N + n)] += bf[size_t(n)];
  }
  if (a.act != backend::Activation::None) {
    if (a.pre) narrow_half(kind, yf.get(), static_cast<uint16_t*>(a.pre), M * N);
    std::vector<float> aux(a.aux ? static_cast<size_t>(M * N) : 0);
    gelu_fwd(yf.get(), yf.get(), a.aux ? aux.data() : nullptr, M * N,
             a.act == backend::Activation::GeluTanh);
    if (a.aux) narrow_half(kind, aux.data(), static_cast<uint16_t*>(a.aux), M * N);
  }
  narrow_half(kind, yf.get(), static_cast<uint16_t*>(a.y), M * N);
}

// The backward's products in float from the widened operands, each result rounded once.
template <HalfKind kind>
void linear_backward_half(const backend::LinearBackward& a) {
  const int64_t M = a.M, N = a.N, K = a.K;
  if (M == 0 || K == 0 || N == 0) return;
  if (kind == HalfKind::BFloat16) {  // oneDNN's bfloat16 kernels where the CPU has them
    const auto *g = static_cast<const uint16_t*>(a.g), *x = static_cast<const uint16_t*>(a.x),
               *w = static_cast<const uint16_t*>(a.w);
    const bool dx = !a.dx || onednn_matmul_bf16(false, false, M, K, N, g, N, w, K, nullptr,
                                                static_cast<uint16_t*>(a.dx), K);
    const bool dw = !a.dw || onednn_matmul_bf16(true, false, N, K, M, g, N, x, K, nullptr,
                                                static_cast<uint16_t*>(a.dw), K);
    if (dx && dw) return;
  }
  std::vector<float> g(static_cast<size_t>(M * N));
  widen_half(kind, static_cast<const uint16_t*>(a.g), g.data(), M * N);
  if (a.dx) {
    std::vector<float> w(static_cast<size_t>(N * K)), dx(static_cast<size_t>(M * K));
    widen_half(kind, static_cast<const uint16_t*>(a.w), w.data(), N * K);
    sgemm(false, false, M, K, N, 1.0f, g.data(), N, w.data(), K, 0.0f, dx.data(), K);
    narrow_half(kind, dx.data(), static_cast<uint16_t*>(a.dx), M * K);
  }
  if (a.dw) {
    std::vector<float> x(static_cast<size_t>(M * K)), dw(static_cast<size_t>(N * K));
    widen_half(kind, static_cast<const uint16_t*>(a.x), x.data(), M * K);
    sgemm(true, false, N, K, M, 1.0f, g.data(), N, x.data(), K, 0.0f, dw.data(), K);
    narrow_half(kind, dw.data(), static_cast<uint16_t*>(a.dw), N * K);
  }
}

template <HalfKind kind>
void bias_backward_half(const backend::BiasBackward& a) {
  const int64_t M = a.rows, N = a.cols;
  std::vector<float> g(static_cast<size_t>(M * N)), db(static_cast<size_t>(N));
  widen_half(kind, static_cast<const uint16_t*>(a.g), g.data(), M * N);
  bias_backward_f32({g.data(), db.data(), M, N});
  narrow_half(kind, db.data(), static_cast<uint16_t*>(a.db), N);
}

}  // namespace
}  // namespace attn::kernels

namespace attn::backend::cpu {
using kernels::HalfKind;
const Kernels<LinearForwardFn> linear_forward = {kernels::linear_forward_f32, nullptr, nullptr,
                                                 kernels::linear_forward_half<HalfKind::BFloat16>,
                                                 kernels::linear_forward_half<HalfKind::Float16>};
const Kernels<LinearBackwardFn> linear_backward = {
    kernels::linear_backward_f32, nullptr, nullptr,
    kernels::linear_backward_half<HalfKind::BFloat16>,
    kernels::linear_backward_half<HalfKind::Float16>};
const Kernels<BiasBackwardFn> bias_backward = {kernels::bias_backward_f32, nullptr, nullptr,
                                               kernels::bias_backward_half<HalfKind::BFloat16>,
                                               kernels::bias_backward_half<HalfKind::Float16>};
}  // namespace attn::backend::cpu

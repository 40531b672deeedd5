// attn's vector backends (src/backend/cpu/simd.h) against Google Highway, on the same kernel
// source: the fused backward's tile primitives (sdpa_fused_backward_kernel.inc) compiled once over
// attn's Avx2 / Avx512 structs and once over a Highway backend (HwyV below) for Highway's AVX2 and
// AVX3 targets. One backward tile step is timed: the five 64 x 64 x 64 products and the
// softmax-gradient tile, on L1/L2-resident data, alternating backends, best of several rounds.
//
//   bench_simd_backends [rounds]
//
// Built only where Highway is installed (Debian's libhwy-dev); it is how the vector abstraction
// of the kernels was chosen (bench/README.md).

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "bench_simd_backends.cpp"
#include <hwy/foreach_target.h>  // re-includes this file once per Highway target
#include <hwy/highway.h>

#include "sdpa_fused_backward_tiles.h"
#include "simd.h"

HWY_BEFORE_NAMESPACE();
namespace attn_bench {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;
using namespace attn::kernels;
using namespace attn::kernels::bwd;

// The part of simd.h's backend interface the backward primitives use, on Highway's ops.
struct HwyV {
  using D = hn::ScalableTag<float>;
  using DI = hn::RebindToSigned<D>;
  static constexpr int W = HWY_LANES(float);
  using T = hn::Vec<D>;
  static HWY_INLINE T load(const float* p) { return hn::LoadU(D(), p); }
  static HWY_INLINE void store(float* p, T a) { hn::StoreU(a, D(), p); }
  static HWY_INLINE T set1(float x) { return hn::Set(D(), x); }
  static HWY_INLINE T zero() { return hn::Zero(D()); }
  static HWY_INLINE T load_partial(const float* p, int n) {
    return hn::MaskedLoad(hn::FirstN(D(), size_t(n)), D(), p);
  }
  static HWY_INLINE void store_partial(float* p, T a, int n) {
    hn::BlendedStore(a, hn::FirstN(D(), size_t(n)), D(), p);
  }
  static HWY_INLINE T add(T a, T b) { return hn::Add(a, b); }
  static HWY_INLINE T sub(T a, T b) { return hn::Sub(a, b); }
  static HWY_INLINE T mul(T a, T b) { return hn::Mul(a, b); }
  static HWY_INLINE T fmadd(T a, T b, T c) { return hn::MulAdd(a, b, c); }
  static HWY_INLINE T max(T a, T b) { return hn::Max(a, b); }
  static HWY_INLINE T min(T a, T b) { return hn::Min(a, b); }
  static HWY_INLINE T round(T x) { return hn::Round(x); }
  static HWY_INLINE T pow2i(T n) {
    return hn::BitCast(D(), hn::ShiftLeft<23>(hn::Add(hn::ConvertTo(DI(), n), hn::Set(DI(), 127))));
  }
  static HWY_INLINE T mask_rows(T s, const int32_t* i, int32_t lo, int32_t hi) {
    const auto iv = hn::LoadU(DI(), i);
    const auto out = hn::Or(hn::Lt(iv, hn::Set(DI(), lo)), hn::Gt(iv, hn::Set(DI(), hi)));
    return hn::IfThenElse(hn::RebindMask(D(), out), hn::Set(D(), simd::kNegInfF), s);
  }
  static HWY_INLINE void transpose(T* r) {  // through memory (the benchmark does not time it)
    HWY_ALIGN float m[W * W], t[W];
    for (int k = 0; k < W; ++k) hn::Store(r[k], D(), m + k * W);
    for (int l = 0; l < W; ++l) {
      for (int k = 0; k < W; ++k) t[k] = m[k * W + l];
      r[l] = hn::Load(D(), t);
    }
  }
  static HWY_INLINE T dropout(T p, const uint64_t* base, uint64_t add, uint32_t threshold,
                              float keep_scale) {  // per lane (the benchmark runs no dropout)
    HWY_ALIGN float f[W];
    hn::Store(p, D(), f);
    for (int l = 0; l < W; ++l)
      f[l] = uint32_t(dropout_mix(base[l] + add) >> 32) >= threshold ? f[l] * keep_scale : 0.0f;
    return hn::Load(D(), f);
  }
};

namespace kern {
using V = HwyV;
constexpr int GEMM_NV = HWY_LANES(float) >= 16 ? 4 : 2;
#define KTARGET
#include "sdpa_fused_backward_kernel.inc"
#undef KTARGET
}  // namespace kern

void primitives(GemmFn* gemm, TileFn* tile) {
  *gemm = kern::gemm;
  *tile = kern::tile;
}

}  // namespace HWY_NAMESPACE
}  // namespace attn_bench
HWY_AFTER_NAMESPACE();

#if HWY_ONCE
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

namespace attn_bench {
using namespace attn::kernels;
using namespace attn::kernels::bwd;

namespace attn_avx2 {
using V = simd::Avx2;
constexpr int GEMM_NV = 2;
#define KTARGET ATTN_TARGET_AVX2
#include "sdpa_fused_backward_kernel.inc"
#undef KTARGET
}  // namespace attn_avx2

namespace attn_avx512 {
using V = simd::Avx512;
constexpr int GEMM_NV = 4;
#define KTARGET ATTN_TARGET_AVX512
#include "sdpa_fused_backward_kernel.inc"
#undef KTARGET
}  // namespace attn_avx512

struct Backend {
  const char* name;
  GemmFn gemm;
  TileFn tile;
};

// One backward tile step (as Driver::key_block runs it), `reps` times; returns seconds per step.
struct Step {
  static constexpr int64_t n = 64;  // rows, keys and head dim
  std::vector<float> q, k, kt, vt, dout, S, dP, dq, dk, dv, lse, Di;
  Step() {
    std::mt19937 g(3);
    std::normal_distribution<float> nd;
    for (auto* v : {&q, &k, &kt, &vt, &dout}) {
      v->resize(n * n);
      for (float& x : *v) x = nd(g);
    }
    for (auto* v : {&S, &dP, &dq, &dk, &dv}) v->assign(n * n, 0.0f);
    lse.assign(n, 12.0f);
    Di.assign(n, 0.5f);
  }
  double run(const Backend& b, int reps) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) {
      b.gemm(n, n, n, q.data(), n, 1, kt.data(), n, S.data(), n, false, nullptr);
      b.gemm(n, n, n, dout.data(), n, 1, vt.data(), n, dP.data(), n, false, nullptr);
      b.tile({n, S.data(), dP.data(), lse.data(), Di.data(), 0.125f, nullptr, 0, nullptr, nullptr,
              nullptr});
      b.gemm(n, n, n, S.data(), 1, n, dout.data(), n, dv.data(), n, true, nullptr);
      b.gemm(n, n, n, dP.data(), 1, n, q.data(), n, dk.data(), n, true, nullptr);
      b.gemm(n, n, n, dP.data(), n, 1, k.data(), n, dq.data(), n, true, nullptr);
    }
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
  }
};

int main(int argc, char** argv) {
  const int rounds = argc > 1 ? std::max(1, std::atoi(argv[1])) : 15;
  std::vector<Backend> backends;
#if HWY_TARGETS & HWY_AVX2
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    backends.push_back({"attn avx2", attn_avx2::gemm, attn_avx2::tile});
    Backend h{"highway AVX2", nullptr, nullptr};
    N_AVX2::primitives(&h.gemm, &h.tile);
    backends.push_back(h);
  }
#endif
#if HWY_TARGETS & HWY_AVX3
  if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl")) {
    backends.push_back({"attn avx512", attn_avx512::gemm, attn_avx512::tile});
    Backend h{"highway AVX3", nullptr, nullptr};
    N_AVX3::primitives(&h.gemm, &h.tile);
    backends.push_back(h);
  }
#endif
  if (backends.empty()) {
    std::printf("no x86 vector backend on this CPU\n");
    return 0;
  }
  Step step;
  std::vector<double> best(backends.size(), 1e30);
  const int reps = 200;
  for (int r = 0; r < rounds; ++r)
    for (size_t i = 0; i < backends.size(); ++i)
      best[i] = std::min(best[i], step.run(backends[i], reps));
  const double flops = 5.0 * 2.0 * 64 * 64 * 64;
  std::printf(
      "backward tile step (5 products of 64x64x64 + softmax-gradient tile), one thread, "
      "best of %d rounds of %d steps\n",
      rounds, reps);
  for (size_t i = 0; i < backends.size(); ++i) {
    const size_t pair = i / 2 * 2;  // attn's backend, then Highway's, per instruction set
    std::printf("%-14s %8.2f us  %7.1f GFLOP/s  time / attn's %.3f\n", backends[i].name,
                best[i] * 1e6, flops / best[i] * 1e-9, best[i] / best[pair]);
  }
  return 0;
}
}  // namespace attn_bench

int main(int argc, char** argv) { return attn_bench::main(argc, argv); }
#endif  // HWY_ONCE

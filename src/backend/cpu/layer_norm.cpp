// LayerNorm forward and backward on float32 rows, and RMSNorm's forward on float32, bfloat16 and
// float16 rows (src/backend/layer_kernels.h).
//
// The element loops are plain C++ compiled three times (AVX-512, AVX2+FMA, baseline) with
// ATTN_ISA_VARIANTS (isa.h); the library itself is built for baseline x86-64.
#include <attn/half.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "../layer_kernels.h"
#include "elem.h"
#include "isa.h"
#include "threads.h"
#include "vmath.h"

namespace attn::kernels {
namespace {

// Rows x cols problems smaller than this run on one thread (a parallel region costs more).
constexpr int64_t kMinParallelElems = 1 << 15;

// At most this many chunks of rows in the backward (each keeps 2 C partial sums).
constexpr int64_t kMaxChunks = 16;

// A row's sums run in double as kLanes running sums (column c goes to sum c mod kLanes), added up
// pairwise at the end: the adds do not wait on one another, the loops vectorise along the row,
// and the order of the additions depends on C only. So a row's results are the same however the
// rows are split across threads, and on every instruction set with FMA (AVX2 and AVX-512 agree
// bit for bit; the baseline build rounds (x - m) * rstd * w + b without FMA).
constexpr int kLanes = 16;

__attribute__((always_inline)) inline double lanes_total(const double* s) {
  double t[kLanes / 2];
  for (int j = 0; j < kLanes / 2; ++j) t[j] = s[j] + s[j + kLanes / 2];
  for (int h = kLanes / 4; h >= 1; h /= 2)
    for (int j = 0; j < h; ++j) t[j] += t[j + h];
  return t[0];
}

// Rows [r0, r1) of y = LayerNorm(x), or with `res` of y = LayerNorm(x + res), the sum written to
// `sum` first and normalised from there while the row is in L1.
ATTN_ISA_INLINE void layer_norm_rows_body(const float* x, const float* res, float* sum,
                                          const float* w, const float* b, float* y, float* mean_out,
                                          float* rstd_out, int64_t r0, int64_t r1, int64_t C,
                                          float eps) {
  const int64_t full = C - C % kLanes;
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * C;
    if (res) {
      float* sr = sum + r * C;
      const float* rr = res + r * C;
      for (int64_t c = 0; c < C; ++c) sr[c] = xr[c] + rr[c];
      xr = sr;
    }
    float* yr = y + r * C;
    // Mean, then the mean square deviation from it (two passes: no cancellation).
    double s[kLanes] = {};
    for (int64_t c = 0; c < full; c += kLanes)
      for (int j = 0; j < kLanes; ++j) s[j] += double(xr[c + j]);
    for (int64_t c = full; c < C; ++c) s[c - full] += double(xr[c]);
    const double mean = lanes_total(s) / double(C);
    double ss[kLanes] = {};
    for (int64_t c = 0; c < full; c += kLanes)
      for (int j = 0; j < kLanes; ++j) {
        const double d = double(xr[c + j]) - mean;
        ss[j] += d * d;
      }
    for (int64_t c = full; c < C; ++c) {
      const double d = double(xr[c]) - mean;
      ss[c - full] += d * d;
    }
    const float rstd = float(1.0 / std::sqrt(lanes_total(ss) / double(C) + double(eps)));
    const float m = float(mean);
    if (w && b) {
      for (int64_t c = 0; c < C; ++c) yr[c] = (xr[c] - m) * rstd * w[c] + b[c];
    } else if (w) {
      for (int64_t c = 0; c < C; ++c) yr[c] = (xr[c] - m) * rstd * w[c];
    } else {
      for (int64_t c = 0; c < C; ++c) yr[c] = (xr[c] - m) * rstd;
    }
    mean_out[r] = m;
    rstd_out[r] = rstd;
  }
}
ATTN_ISA_VARIANTS(void, layer_norm_rows,
                  (const float* x, const float* res, float* sum, const float* w, const float* b,
                   float* y, float* mean_out, float* rstd_out, int64_t r0, int64_t r1, int64_t C,
                   float eps),
                  (x, res, sum, w, b, y, mean_out, rstd_out, r0, r1, C, eps))

// One row's backward: the row sums of dy w and dy w xhat (xhat = (x - mean) rstd, both terms
// rounded to float as formed, then added in double by lanes), and on the same pass over the row
// dw += dy xhat, db += dy (when asked); then dx = rstd (dy w - mean(dy w) - xhat mean(dy w xhat)).
template <bool kW, bool kParams>
__attribute__((always_inline)) inline void layer_norm_backward_row(const float* xr, const float* w,
                                                                   float m, float rs,
                                                                   const float* gr, float* dxr,
                                                                   float* dw, float* db,
                                                                   int64_t C) {
  const int64_t full = C - C % kLanes;
  double a[kLanes] = {}, bs[kLanes] = {};
  auto term = [&](int64_t c, int j) {
    const float xh = (xr[c] - m) * rs;
    const float gw = kW ? gr[c] * w[c] : gr[c];
    a[j] += double(gw);
    bs[j] += double(gw * xh);
    if constexpr (kParams) {
      dw[c] += gr[c] * xh;
      db[c] += gr[c];
    }
  };
  for (int64_t c = 0; c < full; c += kLanes)
    for (int j = 0; j < kLanes; ++j) term(c + j, j);
  for (int64_t c = full; c < C; ++c) term(c, int(c - full));
  if (!dxr) return;
  const float am = float(lanes_total(a) / double(C)), bm = float(lanes_total(bs) / double(C));
  for (int64_t c = 0; c < C; ++c) {
    const float gw = kW ? gr[c] * w[c] : gr[c];
    dxr[c] = rs * (gw - am - (xr[c] - m) * rs * bm);
  }
}

// dx for rows [r0, r1) (when dx is not null); dw and db (both or neither) accumulate this
// range's contribution.
ATTN_ISA_INLINE void layer_norm_backward_rows_body(const float* x, const float* w,
                                                   const float* mean, const float* rstd,
                                                   const float* dy, float* dx, float* dw, float* db,
                                                   int64_t r0, int64_t r1, int64_t C) {
  const bool params = dw != nullptr;
  if (!dx && !params) return;
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * C;
    const float* gr = dy + r * C;
    float* dxr = dx ? dx + r * C : nullptr;
    if (w) {
      if (params)
        layer_norm_backward_row<true, true>(xr, w, mean[r], rstd[r], gr, dxr, dw, db, C);
      else
        layer_norm_backward_row<true, false>(xr, w, mean[r], rstd[r], gr, dxr, dw, db, C);
    } else {
      if (params)
        layer_norm_backward_row<false, true>(xr, w, mean[r], rstd[r], gr, dxr, dw, db, C);
      else
        layer_norm_backward_row<false, false>(xr, w, mean[r], rstd[r], gr, dxr, dw, db, C);
    }
  }
}
ATTN_ISA_VARIANTS(void, layer_norm_backward_rows,
                  (const float* x, const float* w, const float* mean, const float* rstd,
                   const float* dy, float* dx, float* dw, float* db, int64_t r0, int64_t r1,
                   int64_t C),
                  (x, w, mean, rstd, dy, dx, dw, db, r0, r1, C))

void layer_norm_forward_f32(const backend::LayerNormForward& a) {
  const int64_t rows = a.rows, C = a.C;
  if (!rows || !C) return;
  const auto* x = static_cast<const float*>(a.x);
  const auto* res = static_cast<const float*>(a.res);
  auto* sum = static_cast<float*>(a.sum);
  const auto *w = static_cast<const float*>(a.w), *b = static_cast<const float*>(a.b);
  auto* y = static_cast<float*>(a.y);
  parallel_ranges(rows, threads_for(rows * C, kMinParallelElems), [&](int64_t r0, int64_t r1) {
    layer_norm_rows(x, res, sum, w, b, y, a.mean, a.rstd, r0, r1, C, a.eps);
  });
}

void layer_norm_backward_f32(const backend::LayerNormBackward& a) {
  const int64_t rows = a.rows, C = a.C;
  auto *dw = static_cast<float*>(a.dw), *db = static_cast<float*>(a.db);
  if (dw) std::fill(dw, dw + C, 0.f);
  if (db) std::fill(db, db + C, 0.f);
  if (!rows || !C) return;
  const bool params = dw || db;  // the row kernel forms dw and db together
  // The rows are cut into chunks by the shape alone, never by the thread count: dw and db are
  // the chunks' partial sums added up in chunk order, the same for every thread count (a split
  // by threads gave other bits at another count). Below kMinParallelElems one chunk.
  const int64_t chunks =
      std::max<int64_t>(1, std::min({rows, kMaxChunks, rows * C / kMinParallelElems}));
  const int nt = int(std::min<int64_t>(threads_for(rows * C, kMinParallelElems), chunks));
  std::vector<float> part(params ? std::size_t(chunks) * 2 * std::size_t(C) : 0, 0.f);
  const auto *x = static_cast<const float*>(a.x), *w = static_cast<const float*>(a.w),
             *dy = static_cast<const float*>(a.dy);
  auto* dx = static_cast<float*>(a.dx);
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
  for (int64_t t = 0; t < chunks; ++t) {
    const int64_t r0 = rows * t / chunks, r1 = rows * (t + 1) / chunks;
    float* pw = part.data() + t * 2 * C;
    layer_norm_backward_rows(x, w, a.mean, a.rstd, dy, dx, params ? pw : nullptr,
                             params ? pw + C : nullptr, r0, r1, C);
  }
  if (!params) return;
  for (int64_t t = 0; t < chunks; ++t) {
    const float* pw = part.data() + t * 2 * C;
    for (int64_t c = 0; c < C; ++c) {
      if (dw) dw[c] += pw[c];
      if (db) db[c] += pw[C + c];
    }
  }
}

// Rows [r0, r1) of RMSNorm. E: the element (float, or the 2-byte types' bits, uint16_t).
template <typename E, int kKind>  // kKind: 0 float32, 1 bfloat16, 2 float16
ATTN_ISA_INLINE void rms_norm_rows(const E* x, const E* w, E* y, float* rstd_out, int64_t r0,
                                   int64_t r1, int64_t C, float eps) {
  auto load = [](E v) { return load_elem<kKind>(v); };
  auto store = [](float v) { return store_elem<kKind, E>(v); };
  const int64_t full = C - C % kLanes;
  for (int64_t r = r0; r < r1; ++r) {
    const E* xr = x + r * C;
    E* yr = y + r * C;
    double s[kLanes] = {};
    for (int64_t c = 0; c < full; c += kLanes)
      for (int j = 0; j < kLanes; ++j) {
        const double v = load(xr[c + j]);
        s[j] += v * v;
      }
    for (int64_t c = full; c < C; ++c) {
      const double v = load(xr[c]);
      s[c - full] += v * v;
    }
    const float rstd = 1.0f / std::sqrt(float(lanes_total(s) / double(C)) + eps);
    if (rstd_out) rstd_out[r] = rstd;
    if (w) {
      for (int64_t c = 0; c < C; ++c) yr[c] = store(load(store(load(xr[c]) * rstd)) * load(w[c]));
    } else {
      for (int64_t c = 0; c < C; ++c) yr[c] = store(load(xr[c]) * rstd);
    }
  }
}
ATTN_ISA_INLINE void rms_norm_f32_body(const backend::RmsNormForward& a, int64_t r0, int64_t r1) {
  rms_norm_rows<float, 0>(static_cast<const float*>(a.x), static_cast<const float*>(a.w),
                          static_cast<float*>(a.y), a.rstd, r0, r1, a.C, a.eps);
}
ATTN_ISA_INLINE void rms_norm_bf16_body(const backend::RmsNormForward& a, int64_t r0, int64_t r1) {
  rms_norm_rows<uint16_t, 1>(static_cast<const uint16_t*>(a.x), static_cast<const uint16_t*>(a.w),
                             static_cast<uint16_t*>(a.y), a.rstd, r0, r1, a.C, a.eps);
}
ATTN_ISA_INLINE void rms_norm_fp16_body(const backend::RmsNormForward& a, int64_t r0, int64_t r1) {
  rms_norm_rows<uint16_t, 2>(static_cast<const uint16_t*>(a.x), static_cast<const uint16_t*>(a.w),
                             static_cast<uint16_t*>(a.y), a.rstd, r0, r1, a.C, a.eps);
}
ATTN_ISA_VARIANTS(void, rms_norm_f32, (const backend::RmsNormForward& a, int64_t r0, int64_t r1),
                  (a, r0, r1))
ATTN_ISA_VARIANTS(void, rms_norm_bf16, (const backend::RmsNormForward& a, int64_t r0, int64_t r1),
                  (a, r0, r1))
ATTN_ISA_VARIANTS(void, rms_norm_fp16, (const backend::RmsNormForward& a, int64_t r0, int64_t r1),
                  (a, r0, r1))

// Rows split across threads; each row's result does not depend on the split.
template <void (*Rows)(const backend::RmsNormForward&, int64_t, int64_t)>
void rms_norm_forward(const backend::RmsNormForward& a) {
  const int nt = a.rows * a.C < kMinParallelElems ? 1 : threads_for(a.rows * a.C);
  parallel_ranges(a.rows, nt, [&](int64_t r0, int64_t r1) { Rows(a, r0, r1); });
}

}  // namespace
}  // namespace attn::kernels

namespace attn::backend::cpu {
const Kernels<LayerNormForwardFn> layer_norm_forward = {kernels::layer_norm_forward_f32};
const Kernels<LayerNormBackwardFn> layer_norm_backward = {kernels::layer_norm_backward_f32};
const Kernels<RmsNormForwardFn> rms_norm_forward = {
    kernels::rms_norm_forward<kernels::rms_norm_f32>, nullptr, nullptr,
    kernels::rms_norm_forward<kernels::rms_norm_bf16>,
    kernels::rms_norm_forward<kernels::rms_norm_fp16>};
}  // namespace attn::backend::cpu

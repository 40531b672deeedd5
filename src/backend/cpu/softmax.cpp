#include "softmax.h"

#include <algorithm>
#include <cmath>

#include "../reduce_kernels.h"
#include "isa.h"
#include "threads.h"
#include "vmath.h"

namespace attn::kernels {
namespace {

constexpr int kLanes = 8;

// The largest of x[0, n), NaN ignored (std::fmax's), -inf when there is none: a max reduction
// over vector lanes (x > m ? x : m, which is the vector max instruction's own rule).
ATTN_ISA_INLINE float row_max(const float* x, int64_t n) {
  float m = -INFINITY;
#pragma omp simd reduction(max : m)
  for (int64_t c = 0; c < n; ++c) m = x[c] > m ? x[c] : m;
  return m;
}

// Sum of y[0, n) in double: lane j adds the elements j, j + 8, ..., the lanes then pairwise. The
// order is fixed by n alone.
ATTN_ISA_INLINE double row_sum(const float* y, int64_t n) {
  double lanes[kLanes] = {};
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes)
    for (int j = 0; j < kLanes; ++j) lanes[j] += double(y[c + j]);
  for (int j = 0; c < n; ++c, ++j) lanes[j] += double(y[c]);
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
         ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

// y = e^(x - m) over [0, n) for m the largest x: vmath's polynomial (within an ulp of the C
// library's) where x - m >= -87, the C library's exp elsewhere (NaN, -inf,
// results that would be denormal), a run of 256 at a time as the unary exp.
ATTN_ISA_INLINE void shifted_exp(const float* x, float* y, int64_t n, float m) {
  constexpr int64_t kRun = 256;
  for (int64_t i0 = 0; i0 < n; i0 += kRun) {
    const int64_t r = std::min(kRun, n - i0);
    const float* xr = x + i0;
    float* yr = y + i0;
    // x - m <= 0 for every x but NaN (m is the largest): only the lower end is checked.
    int outside = 0;
#pragma omp simd reduction(| : outside)
    for (int64_t i = 0; i < r; ++i) {
      const float d = xr[i] - m;
      yr[i] = d;
      outside |= int(!(d >= -87.0f));
    }
    if (!outside) {
      ATTN_IVDEP
      for (int64_t i = 0; i < r; ++i) yr[i] = vmath::exp_in_range(yr[i]);
      continue;
    }
    for (int64_t i = 0; i < r; ++i) {
      const float d = yr[i];
      yr[i] = d >= -87.0f ? vmath::exp_in_range(d) : std::exp(d);
    }
  }
}

ATTN_ISA_INLINE void softmax_rows_isa_body(const float* x, float* out, int64_t rows, int64_t cols,
                                           bool log) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = out + r * cols;
    const float m = row_max(xr, cols);
    shifted_exp(xr, yr, cols, m);
    const double s = row_sum(yr, cols);
    if (log) {
      const float ls = float(std::log(s));
      for (int64_t c = 0; c < cols; ++c) yr[c] = xr[c] - m - ls;
    } else {
      const float inv = float(1.0 / s);
      for (int64_t c = 0; c < cols; ++c) yr[c] *= inv;
    }
  }
}
ATTN_ISA_VARIANTS(void, softmax_rows_isa,
                  (const float* x, float* out, int64_t rows, int64_t cols, bool log),
                  (x, out, rows, cols, log))

ATTN_ISA_INLINE void softmax_backward_rows_isa_body(const float* y, const float* dy, float* dx,
                                                    int64_t rows, int64_t cols, bool log) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* yr = y + r * cols;
    const float* gr = dy + r * cols;
    float* dr = dx + r * cols;
    if (log) {
      const double s = row_sum(gr, cols);
      for (int64_t c = 0; c < cols; ++c) dr[c] = float(gr[c] - std::exp(double(yr[c])) * s);
    } else {
      double lanes[kLanes] = {};
      int64_t c = 0;
      for (; c + kLanes <= cols; c += kLanes)
        for (int j = 0; j < kLanes; ++j) lanes[j] += double(gr[c + j]) * yr[c + j];
      for (int j = 0; c < cols; ++c, ++j) lanes[j] += double(gr[c]) * yr[c];
      const double s = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
                       ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
      for (c = 0; c < cols; ++c) dr[c] = float(yr[c] * (gr[c] - s));
    }
  }
}
ATTN_ISA_VARIANTS(void, softmax_backward_rows_isa,
                  (const float* y, const float* dy, float* dx, int64_t rows, int64_t cols,
                   bool log),
                  (y, dy, dx, rows, cols, log))

// Rows shared among the threads above a size (a pass of a polynomial an element): each row is
// one thread's, so the bits do not depend on the thread count.
template <typename F>
void by_rows(int64_t rows, int64_t cols, F&& f) {
  parallel_ranges(rows, threads_for(rows * cols, int64_t(1) << 15),
                  [&](int64_t r0, int64_t r1) { f(r0, r1 - r0); });
}

}  // namespace

void softmax_rows(const float* x, float* out, int64_t rows, int64_t cols, bool log) {
  by_rows(rows, cols, [&](int64_t r0, int64_t n) {
    softmax_rows_isa(x + r0 * cols, out + r0 * cols, n, cols, log);
  });
}

void softmax_backward_rows(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols,
                           bool log) {
  by_rows(rows, cols, [&](int64_t r0, int64_t n) {
    softmax_backward_rows_isa(y + r0 * cols, dy + r0 * cols, dx + r0 * cols, n, cols, log);
  });
}

}  // namespace attn::kernels

namespace attn::backend::cpu {
namespace {
void softmax_f32(const Softmax& s) {
  const auto* x = static_cast<const float*>(s.x);
  auto* out = static_cast<float*>(s.out);
  if (s.dy)
    kernels::softmax_backward_rows(x, static_cast<const float*>(s.dy), out, s.rows, s.cols, s.log);
  else
    kernels::softmax_rows(x, out, s.rows, s.cols, s.log);
}
}  // namespace
const Kernels<SoftmaxFn> softmax = {softmax_f32};
}  // namespace attn::backend::cpu

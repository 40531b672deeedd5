#include "softmax.h"

#include <cmath>

#include "../reduce_kernels.h"
#include "isa.h"
#include "threads.h"
#include "unary.h"

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

// The sum of term(c) over c in [0, n) in double: lane j adds the terms j, j + 8, ..., the lanes
// then pairwise. The order is fixed by n alone.
template <typename Term>
ATTN_ISA_INLINE double lane_sum(int64_t n, Term&& term) {
  double lanes[kLanes] = {};
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes)
    for (int j = 0; j < kLanes; ++j) lanes[j] += term(c + j);
  for (int j = 0; c < n; ++c, ++j) lanes[j] += term(c);
  return ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) +
         ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]));
}

ATTN_ISA_INLINE void softmax_rows_isa_body(const float* x, float* out, int64_t rows, int64_t cols,
                                           bool log) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = out + r * cols;
    const float m = row_max(xr, cols);
    // e^(x - m): the unary exp's loop (x - m <= 0, or NaN, for every x).
    for (int64_t c = 0; c < cols; ++c) yr[c] = xr[c] - m;
    exp_floats(yr, yr, cols);
    const double s = lane_sum(cols, [&](int64_t c) { return double(yr[c]); });
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
      const double s = lane_sum(cols, [&](int64_t c) { return double(gr[c]); });
      for (int64_t c = 0; c < cols; ++c) dr[c] = float(gr[c] - std::exp(double(yr[c])) * s);
    } else {
      const double s = lane_sum(cols, [&](int64_t c) { return double(gr[c]) * yr[c]; });
      for (int64_t c = 0; c < cols; ++c) dr[c] = float(yr[c] * (gr[c] - s));
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

#include "softmax.h"

#include <cmath>

#include "../reduce_kernels.h"

namespace attn::kernels {

void softmax_rows(const float* x, float* out, int64_t rows, int64_t cols, bool log) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * cols;
    float* yr = out + r * cols;
    float m = -INFINITY;
    for (int64_t c = 0; c < cols; ++c) m = std::fmax(m, xr[c]);
    double s = 0;
    for (int64_t c = 0; c < cols; ++c) {
      float e = std::exp(xr[c] - m);
      yr[c] = e;
      s += e;
    }
    if (log) {
      float ls = float(std::log(s));
      for (int64_t c = 0; c < cols; ++c) yr[c] = xr[c] - m - ls;
    } else {
      float inv = float(1.0 / s);
      for (int64_t c = 0; c < cols; ++c) yr[c] *= inv;
    }
  }
}

void softmax_backward_rows(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols,
                           bool log) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* yr = y + r * cols;
    const float* gr = dy + r * cols;
    float* dr = dx + r * cols;
    double s = 0;
    if (log) {
      for (int64_t c = 0; c < cols; ++c) s += gr[c];
      for (int64_t c = 0; c < cols; ++c) dr[c] = float(gr[c] - std::exp(double(yr[c])) * s);
    } else {
      for (int64_t c = 0; c < cols; ++c) s += double(gr[c]) * yr[c];
      for (int64_t c = 0; c < cols; ++c) dr[c] = float(yr[c] * (gr[c] - s));
    }
  }
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

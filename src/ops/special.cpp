// Special functions: erfinv (torch.erfinv, used by nn.init.trunc_normal_).
#include <attn/autograd.h>
#include <attn/ops.h>

#include <cmath>
#include <limits>

#include "../tensor/internal.h"

namespace attn {

using detail::fail;

namespace {

// a * b + c rounded once, as the FMA that torch's AVX2 build contracts these polynomials to.
inline float fma_(float a, float b, float c) { return std::fma(a, b, c); }

// The inverse error function in float arithmetic as torch 1.13's CPU kernel computes it: a
// rational first guess (one formula for |y| <= 0.7, another in the tails), then two Newton steps
// on erf(x) - y. |y| > 1 gives NaN, y = +-1 gives +-inf.
float erfinv_float(float y) {
  const float ay = std::fabs(y);
  if (ay > 1.0f) return std::numeric_limits<float>::quiet_NaN();
  if (ay == 1.0f) return std::copysign(std::numeric_limits<float>::infinity(), y);
  float x;
  if (ay <= 0.7f) {
    const float z = y * y;
    const float num =
        fma_(fma_(fma_(-0.140543331f, z, 0.914624893f), z, -1.645349621f), z, 0.886226899f);
    const float den =
        fma_(fma_(fma_(fma_(0.012229801f, z, -0.329097515f), z, 1.442710462f), z, -2.118377725f), z,
             1.0f);
    x = y * num / den;
  } else {
    const float z = std::sqrt(-std::log((1.0f - ay) / 2.0f));
    const float num =
        fma_(fma_(fma_(1.641345311f, z, 3.429567803f), z, -1.624906493f), z, -1.970840454f);
    const float den = fma_(fma_(1.637067800f, z, 3.543889200f), z, 1.0f);
    x = std::copysign(num, y) / den;
  }
  const float two_over_sqrt_pi = 2.0f / static_cast<float>(std::sqrt(M_PI));
  for (int step = 0; step < 2; ++step)
    x = x - (std::erf(x) - y) / (two_over_sqrt_pi * std::exp(-x * x));
  return x;
}

}  // namespace

Tensor Tensor::erfinv() const {
  const char* fn = "erfinv";
  if (!defined()) fail(fn, "undefined tensor argument");
  if (dtype() == Dtype::Bool) fail(fn, "not implemented for bool tensors");
  Tensor src = to(Dtype::Float32);
  Tensor out = detail::make_tensor(fn, shape(), Dtype::Float32, false);
  float* po = out.data_ptr<float>();
  const float* ps = detail::base_ptr<float>(src);
  int64_t i = 0;
  detail::strided_loop<1>(
      src.shape(), {&src.strides()}, {src.storage_offset()},
      [&](const std::array<int64_t, 1>& o) { po[i++] = erfinv_float(ps[o[0]]); });
  if (is_reduced_float(dtype())) return out.to(dtype());  // computed in float32, rounded back
  // d/dy erfinv(y) = sqrt(pi) / 2 * exp(erfinv(y)^2)
  return detail::record(out, "ErfinvBackward0", {this},
                        [](const Node& n, const Tensor& g) {
                          const Tensor& y = n.saved_tensor(0);
                          return std::vector<Tensor>{g * ((y * y).exp() * (std::sqrt(M_PI) / 2.0))};
                        },
                        {out});
}

Tensor& Tensor::erfinv_() {
  if (!attn::is_floating_point(dtype()))
    fail("erfinv_", "expects a float32 tensor, got ", detail::tensor_desc(*this));
  return copy_(erfinv());
}

Tensor erfinv(const Tensor& t) { return t.erfinv(); }

}  // namespace attn

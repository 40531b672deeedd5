// LayerNorm, GELU and cross-entropy: the modules and the functional forms, whose computing ops
// (one fused kernel each way, recorded as one autograd node) are in src/ops/layer_ops.cpp; and
// RMSNorm (one pass over each row and one autograd node; composed of ops as PyTorch's CPU
// composite where the kernel does not apply).
#include <attn/nn.h>
#include <attn/ops.h>

#include <limits>
#include <string>
#include <utility>

#include "../ops/layer_ops.h"
#include "../tensor/internal.h"
#include "fused.h"

namespace attn::nn {

using detail::fail;

namespace functional {

Tensor layer_norm(const Tensor& x, int64_t normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  return detail::layer_norm("layer_norm", x, nullptr, nullptr, normalized_shape, weight, bias, eps);
}

Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                std::optional<double> eps) {
  const char* fn = "rms_norm";
  if (!x.defined()) fail(fn, "undefined tensor argument");
  const int64_t k = int64_t(normalized_shape.size());
  bool ok = k <= x.dim();
  for (int64_t i = 1; ok && i <= k; ++i) ok = x.size(-i) == normalized_shape[k - i];
  if (!ok) {
    std::string trailing = "(*";
    for (int64_t n : normalized_shape) trailing += ", " + std::to_string(n);
    fail(fn, "given normalized_shape=", shape_str(normalized_shape), ", expected input with shape ",
         trailing, "), but got input of size ", shape_str(x.shape()));
  }
  if (weight.defined() && weight.shape() != normalized_shape)
    fail(fn, "weight ", shape_str(weight.shape()), " must have the shape normalized_shape ",
         shape_str(normalized_shape));
  if (eps && !(*eps >= 0.0)) fail(fn, "eps must be non-negative, got ", *eps);
  // torch's None: the machine epsilon of float32 (the dtype rms_norm computes in).
  const double e = eps ? *eps : double(std::numeric_limits<float>::epsilon());
  // One pass over each row, the same roundings; one autograd node.
  int64_t C = 1;
  for (int64_t n : normalized_shape) C *= n;
  if (Tensor y = detail::rms_norm_fused(x, C, weight, e); y.defined()) return y;
  if (is_reduced_float(x.dtype())) {
    // As torch: normalized in float32 and rounded to the dtype, then times the weight in it.
    const Tensor y = rms_norm(detail::widen(x), normalized_shape, Tensor(), e).to(x.dtype());
    return weight.defined() ? y * weight : y;
  }
  Shape dims;
  for (int64_t i = k; i >= 1; --i) dims.push_back(-i);
  const Tensor r = (x.pow(Scalar(2)).mean(dims, true) + Scalar(e)).rsqrt();
  const Tensor y = x * r;
  return weight.defined() ? y * weight : y;
}

Tensor gelu(const Tensor& x, const std::string& approximate) {
  return detail::gelu(x, approximate);
}

Tensor cross_entropy(const Tensor& input, const Tensor& target, const std::string& reduction,
                     int64_t ignore_index) {
  return detail::cross_entropy(input, target, reduction, ignore_index);
}

}  // namespace functional

namespace fused {

AddNorm add_layer_norm(const Tensor& x, const Tensor& r, const LayerNorm& ln) {
  AddNorm out;
  out.normed = detail::layer_norm("add_layer_norm", x, &r, &out.sum, ln.normalized_shape, ln.weight,
                                  ln.bias, ln.eps);
  return out;
}

}  // namespace fused

// ---- modules
// ----------------------------------------------------------------------------------------

LayerNorm::LayerNorm(int64_t normalized_shape, double eps, bool elementwise_affine, bool bias)
    : normalized_shape(normalized_shape), eps(eps) {
  if (normalized_shape <= 0)
    fail("LayerNorm", "normalized_shape must be positive, got ", normalized_shape);
  if (!(eps >= 0.0)) fail("LayerNorm", "eps must be non-negative, got ", eps);
  if (elementwise_affine) {
    weight = register_parameter("weight", ones({normalized_shape}));
    if (bias) this->bias = register_parameter("bias", zeros({normalized_shape}));
  }
}

Tensor LayerNorm::forward(const Tensor& x) const {
  return functional::layer_norm(x, normalized_shape, weight, bias, eps);
}

RMSNorm::RMSNorm(Shape normalized_shape_, std::optional<double> eps_, bool elementwise_affine)
    : normalized_shape(std::move(normalized_shape_)), eps(eps_) {
  for (int64_t n : normalized_shape)
    if (n <= 0)
      fail("RMSNorm", "normalized_shape must be positive, got ", shape_str(normalized_shape));
  if (eps && !(*eps >= 0.0)) fail("RMSNorm", "eps must be non-negative, got ", *eps);
  if (elementwise_affine) weight = register_parameter("weight", ones(normalized_shape));
}

Tensor RMSNorm::forward(const Tensor& x) const {
  return functional::rms_norm(x, normalized_shape, weight, eps);
}

GELU::GELU(std::string approximate) : approximate(std::move(approximate)) {
  detail::gelu_tanh(this->approximate, "GELU");
}

Tensor GELU::forward(const Tensor& x) const { return functional::gelu(x, approximate); }

}  // namespace attn::nn

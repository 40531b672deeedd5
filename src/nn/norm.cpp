// LayerNorm, GELU and cross-entropy: the modules and the functional forms, whose computing ops
// (one fused kernel each way, recorded as one autograd node) are in src/ops/layer_ops.cpp.
#include <attn/nn.h>
#include <attn/ops.h>

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

GELU::GELU(std::string approximate) : approximate(std::move(approximate)) {
  detail::gelu_tanh(this->approximate, "GELU");
}

Tensor GELU::forward(const Tensor& x) const { return functional::gelu(x, approximate); }

}  // namespace attn::nn

// Special functions: erfinv (torch.erfinv, used by nn.init.trunc_normal_), and log1p, expm1, log2,
// log10, exp2, erf, erfc, tan, sinh, cosh, asin, acos, atan, asinh, acosh, atanh with torch's
// gradients.
#include <attn/autograd.h>
#include <attn/ops.h>

#include <cmath>

#include "../backend/elementwise_kernels.h"
#include "../tensor/internal.h"
#include "unary_float.h"

namespace attn {

using detail::fail;

Tensor Tensor::erfinv() const {
  const char* fn = "erfinv";
  if (!defined()) fail(fn, "undefined tensor argument");
  if (dtype() == Dtype::Bool) fail(fn, "not implemented for bool tensors");
  Tensor src = to(Dtype::Float32);
  const auto kernel =
      backend::pick(fn, src.device(), Dtype::Float32, backend::cpu::unary, backend::cuda::unary);
  Tensor out = detail::make_tensor(fn, shape(), Dtype::Float32, false);
  kernel({backend::UnaryOp::Erfinv, &src.shape(), src.impl()->storage->data, src.storage_offset(),
          &src.strides(), out.device_data()});
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

namespace {

// torch's special functions through the float unary path (unary_float.h), bool refused as torch's
// kernels refuse it.
Tensor special(const Tensor& t, const char* fn, backend::UnaryOp op, const char* node,
               detail::UnaryGrad grad, int saves) {
  if (t.defined() && t.dtype() == Dtype::Bool) fail(fn, "not implemented for bool tensors");
  return detail::unary_float(t, fn, op, grad, saves, node);
}

using detail::kSaveInput;
using detail::kSaveResult;

constexpr double kTwoOverSqrtPi = 1.1283791670955126;  // 2 / sqrt(pi)

}  // namespace

using backend::UnaryOp;
Tensor Tensor::log1p() const {
  return special(
      *this, "log1p", UnaryOp::Log1p, "Log1PBackward0",
      [](const Tensor& g, const Tensor& x, const Tensor&) { return g / (x + 1.0); }, kSaveInput);
}
Tensor Tensor::expm1() const {
  return special(
      *this, "expm1", UnaryOp::Expm1, "Expm1Backward0",
      [](const Tensor& g, const Tensor&, const Tensor& y) { return g * (y + 1.0); }, kSaveResult);
}
Tensor Tensor::log2() const {
  return special(
      *this, "log2", UnaryOp::Log2, "Log2Backward0",
      [](const Tensor& g, const Tensor& x, const Tensor&) { return g / (x * M_LN2); }, kSaveInput);
}
Tensor Tensor::log10() const {
  return special(
      *this, "log10", UnaryOp::Log10, "Log10Backward0",
      [](const Tensor& g, const Tensor& x, const Tensor&) { return g / (x * M_LN10); }, kSaveInput);
}
Tensor Tensor::exp2() const {
  return special(
      *this, "exp2", UnaryOp::Exp2, "Exp2Backward0",
      [](const Tensor& g, const Tensor&, const Tensor& y) { return g * y * M_LN2; }, kSaveResult);
}
Tensor Tensor::erf() const {
  return special(
      *this, "erf", UnaryOp::Erf, "ErfBackward0",
      [](const Tensor& g, const Tensor& x, const Tensor&) {
        return g * ((-(x * x)).exp() * kTwoOverSqrtPi);
      },
      kSaveInput);
}
Tensor Tensor::erfc() const {
  return special(
      *this, "erfc", UnaryOp::Erfc, "ErfcBackward0",
      [](const Tensor& g, const Tensor& x, const Tensor&) {
        return g * ((-(x * x)).exp() * -kTwoOverSqrtPi);
      },
      kSaveInput);
}
Tensor Tensor::tan() const {
  return special(
      *this, "tan", UnaryOp::Tan, "TanBackward0",
      [](const Tensor& g, const Tensor&, const Tensor& y) { return g * (y * y + 1.0); },
      kSaveResult);
}
Tensor Tensor::sinh() const {
  return special(
      *this, "sinh", UnaryOp::Sinh, "SinhBackward0",
      [](const Tensor& g, const Tensor& x, const Tensor&) { return g * x.cosh(); }, kSaveInput);
}
Tensor Tensor::cosh() const {
  return special(
      *this, "cosh", UnaryOp::Cosh, "CoshBackward0",
      [](const Tensor& g, const Tensor& x, const Tensor&) { return g * x.sinh(); }, kSaveInput);
}
Tensor Tensor::asin() const {
  return special(
      *this, "asin", UnaryOp::Asin, "AsinBackward0",
      [](const Tensor& g, const Tensor& x, const Tensor&) { return g * (1.0 - x * x).rsqrt(); },
      kSaveInput);
}
Tensor Tensor::acos() const {
  return special(
      *this, "acos", UnaryOp::Acos, "AcosBackward0",
      [](const Tensor& g, const Tensor& x, const Tensor&) { return g * -(1.0 - x * x).rsqrt(); },
      kSaveInput);
}
Tensor Tensor::atan() const {
  return special(
      *this, "atan", UnaryOp::Atan, "AtanBackward0",
      [](const Tensor& g, const Tensor& x, const Tensor&) { return g / (x * x + 1.0); },
      kSaveInput);
}

// torch's formulas: asinh' = (x^2 + 1)^-1/2, acosh' = (x^2 - 1)^-1/2, atanh' = 1 / (1 - x^2).
Tensor Tensor::asinh() const {
  return special(
      *this, "asinh", UnaryOp::Asinh, "AsinhBackward0",
      [](const Tensor& g, const Tensor& x, const Tensor&) { return g * (x * x + 1.0).rsqrt(); },
      kSaveInput);
}
Tensor Tensor::acosh() const {
  return special(
      *this, "acosh", UnaryOp::Acosh, "AcoshBackward0",
      [](const Tensor& g, const Tensor& x, const Tensor&) { return g * (x * x - 1.0).rsqrt(); },
      kSaveInput);
}
Tensor Tensor::atanh() const {
  return special(
      *this, "atanh", UnaryOp::Atanh, "AtanhBackward0",
      [](const Tensor& g, const Tensor& x, const Tensor&) { return g / (1.0 - x * x); },
      kSaveInput);
}

}  // namespace attn

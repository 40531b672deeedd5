// Special functions: erfinv (torch.erfinv, used by nn.init.trunc_normal_).
#include <attn/autograd.h>
#include <attn/ops.h>

#include <cmath>

#include "../backend/elementwise_kernels.h"
#include "../tensor/internal.h"

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

}  // namespace attn

// attn built without the CUDA backend: no tensor is ever on a GPU, so attention never gets here;
// the GPU side of attention_internal.h only says so.
#include "../tensor/internal.h"
#include "attention_internal.h"

namespace attn::sdpa_detail {

SdpaForwardResult cuda_forward(const Tensor&, const Tensor&, const Tensor&, const SdpaOptions&,
                               const char* fn) {
  throw DeviceError(detail::msg(fn, "attn was built without the CUDA backend"));
}

std::tuple<Tensor, Tensor, Tensor> cuda_backward(const Tensor&, const Tensor&, const Tensor&,
                                                 const Tensor&, const SdpaForwardResult&,
                                                 const SdpaOptions&, const char* fn) {
  throw DeviceError(detail::msg(fn, "attn was built without the CUDA backend"));
}

}  // namespace attn::sdpa_detail

// attn built without the CUDA backend: no tensor is ever on a GPU, so attention never gets here
// with real GPU memory; the GPU side of attention_internal.h validates as with CUDA (the same
// errors for mixed devices and dtypes) and then says that the backend is absent.
#include "../../common/error.h"
#include "../../ops/attention_internal.h"

namespace attn::sdpa_detail {

SdpaForwardResult cuda_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                               const SdpaOptions& o, const char* fn) {
  prepare(q, k, v, o, fn);
  throw DeviceError(detail::msg(fn, "attn was built without the CUDA backend"));
}

std::tuple<Tensor, Tensor, Tensor> cuda_backward(const Tensor&, const Tensor& q, const Tensor& k,
                                                 const Tensor& v, const SdpaForwardResult&,
                                                 const SdpaOptions& o, const char* fn) {
  prepare(q, k, v, o, fn);
  throw DeviceError(detail::msg(fn, "attn was built without the CUDA backend"));
}

}  // namespace attn::sdpa_detail

// Copies where a tensor is on a GPU: the bytes cross by cudaMemcpy; conversion and broadcasting
// run on the CPU, by copy_ (copy.cpp) on host tensors.
#include <attn/autograd.h>
#include <attn/tensor.h>

#include <utility>

#include "../backend/gpu_runtime.h"
#include "internal.h"
#include "local.h"

namespace attn {

namespace {

// The elements [lo, hi) of its storage that a tensor's view can reach (empty for no elements).
std::pair<int64_t, int64_t> element_span(const Tensor& t) {
  if (t.numel() == 0) return {t.storage_offset(), t.storage_offset()};
  int64_t lo = t.storage_offset(), hi = t.storage_offset();
  for (int64_t d = 0; d < t.dim(); ++d) {
    const int64_t reach = (t.shape()[d] - 1) * t.strides()[d];
    (reach < 0 ? lo : hi) += reach;
  }
  return {lo, hi + 1};
}

// A CPU tensor with t's sizes and strides over a host copy of the span of t's (GPU) storage.
Tensor download_span(const Tensor& t) {
  const auto [lo, hi] = element_span(t);
  const std::size_t isz = itemsize(t.dtype());
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = Storage::allocate(std::size_t(hi - lo) * isz, /*zero=*/false);
  impl->sizes = t.shape();
  impl->strides = t.strides();
  impl->offset = t.storage_offset() - lo;
  impl->dtype = t.dtype();
  const char* base = static_cast<const char*>(t.impl()->storage->data);
  cuda_rt::memcpy(impl->storage->data, -1, base + lo * int64_t(isz), t.device().index(),
                  std::size_t(hi - lo) * isz, "copy_");
  return Tensor(impl);
}

}  // namespace

namespace detail {

// dst.copy_(src) where either is on a GPU: the conversion and broadcasting run on the CPU (copy_
// of host tensors), the bytes cross by cudaMemcpy. A strided GPU destination is read back first,
// so that the elements between its strides keep their values. Same dtype, shape and contiguity on
// one GPU is a single device-to-device copy.
void copy_across_devices(const Tensor& dst, const Tensor& src) {
  if (dst.numel() == 0) return;
  const std::size_t isz = itemsize(dst.dtype());
  if (dst.is_cuda() && src.is_cuda() && dst.dtype() == src.dtype() && dst.shape() == src.shape() &&
      dst.is_contiguous() && src.is_contiguous()) {
    cuda_rt::memcpy(dst.device_data(), dst.device().index(), src.device_data(),
                    src.device().index(), std::size_t(dst.numel()) * isz, "copy_");
    return;
  }
  NoGradGuard no_grad;
  const Tensor host_src = src.is_cuda() ? download_span(src) : src;
  if (!dst.is_cuda()) {
    Tensor(dst).copy_(host_src);
    return;
  }
  if (dst.is_contiguous()) {
    Tensor host = detail::make_tensor("copy_", dst.shape(), dst.dtype(), /*zero=*/false);
    host.copy_(host_src);
    cuda_rt::memcpy(dst.device_data(), dst.device().index(), host.raw_data(), -1,
                    std::size_t(dst.numel()) * isz, "copy_");
    return;
  }
  Tensor host = download_span(dst);
  host.copy_(host_src);
  const auto [lo, hi] = element_span(dst);
  char* base = static_cast<char*>(dst.impl()->storage->data);
  cuda_rt::memcpy(base + lo * int64_t(isz), dst.device().index(), host.impl()->storage->data, -1,
                  std::size_t(hi - lo) * isz, "copy_");
}

}  // namespace detail

}  // namespace attn

// Copies and conversions: copy_ (between dtypes as torch converts, broadcasting, with its
// gradient), clone, contiguous, to (a dtype, a device), fill_, item and to_float_vector. Copies
// where a tensor is on a GPU go through copy_devices.cpp.
#include <attn/autograd.h>
#include <attn/ops.h>
#include <attn/tensor.h>

#include "../backend/elementwise_kernels.h"
#include "internal.h"
#include "local.h"

namespace attn {

using detail::copy_across_devices;
using detail::fail;

namespace {

bool overlaps(const Tensor& a, const Tensor& b) { return a.impl()->storage == b.impl()->storage; }

}  // namespace

Tensor& Tensor::copy_(const Tensor& src_in) {
  checked();
  detail::check_inplace(*this, "copy_");
  if (!src_in.defined()) fail("copy_", "source tensor is undefined");
  // Several elements of a broadcast destination share memory: refused, as torch refuses it,
  // unless one value goes to all of them (fill_, which torch allows).
  if (src_in.numel() > 1)
    for (std::size_t d = 0; d < shape().size(); ++d)
      if (strides()[d] == 0 && shape()[d] > 1)
        fail("copy_", "unsupported operation: more than one element of the written-to tensor ",
             shape_str(shape()), " refers to a single memory location (dim ", d,
             " has stride 0, as expand makes it). Please clone() the tensor before performing "
             "the operation.");
  try {
    Shape b = broadcast_shapes(shape(), src_in.shape(), "copy_");
    if (b != shape()) throw Error("");
  } catch (const Error&) {
    fail("copy_", "source ", shape_str(src_in.shape()), " does not broadcast to destination ",
         shape_str(shape()));
  }
  Tensor src;
  {
    NoGradGuard no_grad;
    src = overlaps(*this, src_in) ? src_in.clone() : src_in;
  }
  if (device() != src.device()) {
    copy_across_devices(*this, src);
  } else {
    // On one device: the backend's conversion; a GPU's copies between its own tensors (no table
    // yet) go through the device runtime, as copies between devices do.
    const auto kernel = backend::find(device(), dtype(), backend::cpu::copy, backend::cuda::copy);
    if (!kernel) {
      copy_across_devices(*this, src);
    } else {
      const Shape sst = detail::broadcast_strides(src, shape());
      kernel({&shape(), impl()->storage->data, storage_offset(), &strides(),
              src.impl()->storage->data, src.dtype(), src.storage_offset(), &sst});
    }
  }
  detail::bump_version(*this);
  // Only floating point tensors take part in the graph: x.long() or a copy into an int64 tensor
  // does not. The old value of self is overwritten (zero gradient); src, broadcast to self, gets
  // the rest, summed over the broadcast dims on the CPU (a GPU has no reduction) and moved to src's
  // device (the engine converts it to src's dtype: torch's ToCopyBackward0).
  if (attn::is_floating_point(dtype()) && attn::is_floating_point(src_in.dtype()) &&
      (src_in.requires_grad() || requires_grad())) {
    const Shape src_shape = src_in.shape();
    const Device src_device = src_in.device();
    detail::record_inplace(
        *this, "CopyBackwards", {this, &src_in},
        [src_shape, src_device](const Node& n, const Tensor& g) {
          Tensor src_grad;
          if (n.needs_input_grad(1)) {
            const Tensor summed = g.is_cuda() && g.shape() != src_shape ? g.cpu() : g;
            src_grad = detail::sum_to(summed, src_shape).to(src_device);
          }
          return std::vector<Tensor>{
              n.needs_input_grad(0) ? zeros(g.shape(), g.dtype(), g.device()) : Tensor(), src_grad};
        });
  }
  return *this;
}

Tensor Tensor::clone() const {
  Tensor out = detail::make_tensor("clone", shape(), dtype(), /*zero=*/false, device());
  {
    NoGradGuard no_grad;
    out.copy_(*this);
  }
  return detail::record(out, "CloneBackward0", {this},
                        [](const Node&, const Tensor& g) { return std::vector<Tensor>{g}; });
}

Tensor Tensor::contiguous() const {
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::to(Dtype dt) const {
  if (dt == dtype()) return *this;
  Tensor out = detail::make_tensor("to", shape(), dt, /*zero=*/false, device());
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(const Device& device) const { return to(device, dtype()); }

Tensor Tensor::to(const Device& device_in, Dtype dt) const {
  checked();
  const Device dev = resolve_device(device_in, "to");
  if (dev == device()) return to(dt);
  Tensor out = detail::make_tensor("to", shape(), dt, /*zero=*/false, dev);
  out.copy_(*this);  // records the gradient's way back to this device
  return out;
}

Tensor& Tensor::fill_(Scalar value) { return copy_(detail::scalar_tensor(value, dtype())); }

template <typename T>
T Tensor::item() const {
  if (numel() != 1)
    fail("item", "a Tensor with ", numel(), " elements cannot be converted to a scalar");
  Tensor c = cpu().contiguous();
  switch (dtype()) {
    case Dtype::Float32: return T(*static_cast<float*>(c.raw_data()));
    case Dtype::Int64: return T(*static_cast<int64_t*>(c.raw_data()));
    case Dtype::Bool: return T(*static_cast<bool*>(c.raw_data()));
    case Dtype::BFloat16: return T(float(*static_cast<BFloat16*>(c.raw_data())));
    case Dtype::Float16: return T(float(*static_cast<Half*>(c.raw_data())));
  }
  return T();
}
template float Tensor::item<float>() const;
template double Tensor::item<double>() const;
template int64_t Tensor::item<int64_t>() const;
template bool Tensor::item<bool>() const;
double Tensor::item_double() const { return item<double>(); }

std::vector<float> Tensor::to_float_vector() const {
  Tensor c = cpu().to(Dtype::Float32).contiguous();
  const float* p = c.data_ptr<float>();
  return std::vector<float>(p, p + c.numel());
}

}  // namespace attn

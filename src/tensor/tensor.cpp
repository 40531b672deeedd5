// Tensor metadata, storage, views, indexing, copies and creation functions.
#include <attn/autograd.h>
#include <attn/ops.h>
#include <attn/print.h>
#include <attn/tensor.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>
#include <ostream>

#include "../backend/gpu_runtime.h"
#include "internal.h"

namespace attn {

namespace {
// Whether truncating d towards zero gives an int64 (false for NaN and infinities).
bool fits_int64(double d) { return d >= -9223372036854775808.0 && d < 9223372036854775808.0; }
}  // namespace

int64_t Scalar::float_to_int(double v) {
  if (!fits_int64(v))
    detail::fail("Scalar", "value ", v, " cannot be converted to type int64 without overflow");
  return int64_t(v);
}

using detail::fail;
using detail::wrap_dim;

std::shared_ptr<Storage> Storage::allocate(std::size_t nbytes, bool zero) {
  std::size_t padded = ((nbytes + 63) / 64) * 64;
  if (padded < nbytes) padded = std::numeric_limits<std::size_t>::max();  // wrapped: cannot be had
  if (padded == 0) padded = 64;
  void* p =
      padded == std::numeric_limits<std::size_t>::max() ? nullptr : std::aligned_alloc(64, padded);
  if (!p)
    throw AllocationError("[Storage] cannot allocate " + bytes_str(double(nbytes)) + " (" +
                          std::to_string(nbytes) + " bytes): out of memory");
  // The deleter frees p if the control block itself cannot be allocated.
  const auto bookkeeping = [&] {
    return AllocationError("[Storage] cannot allocate the bookkeeping of a " +
                           bytes_str(double(nbytes)) + " storage: out of memory");
  };
  std::shared_ptr<void> owner;
  try {
    owner = std::shared_ptr<void>(p, [](void* q) { std::free(q); });
  } catch (const std::bad_alloc&) {
    throw bookkeeping();
  }
  std::shared_ptr<Storage> s;
  try {
    s = std::make_shared<Storage>();
  } catch (const std::bad_alloc&) {
    throw bookkeeping();
  }
  s->owner = std::move(owner);
  if (zero) std::memset(p, 0, padded);
  s->data = p;
  s->nbytes = nbytes;
  return s;
}

std::shared_ptr<Storage> Storage::allocate(std::size_t nbytes, const Device& device_in, bool zero,
                                           const char* fn) {
  const Device device = resolve_device(device_in, fn);
  if (device.is_cpu()) return allocate(nbytes, zero);
  const int index = device.index();
  void* p = cuda_rt::malloc(nbytes, index, fn);
  std::shared_ptr<void> owner;
  try {
    owner = std::shared_ptr<void>(p, [index](void* q) { cuda_rt::free(q, index); });
  } catch (const std::bad_alloc&) {
    cuda_rt::free(p, index);
    throw AllocationError("[Storage] cannot allocate the bookkeeping of a GPU storage");
  }
  auto s = std::make_shared<Storage>();
  s->owner = std::move(owner);
  if (zero) cuda_rt::memset_zero(p, index, nbytes, fn);
  s->data = p;
  s->nbytes = nbytes;
  s->device = device;
  return s;
}

namespace detail {

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* fn) {
  int64_t n = std::max<int64_t>(ndim, 1);
  if (dim < -n || dim >= n)
    throw IndexError(msg(fn, "dimension out of range (expected to be in range of [", -n, ", ",
                         n - 1, "], but got ", dim, ")"));
  return dim < 0 ? dim + n : dim;
}

Shape contiguous_strides(const Shape& shape) {
  Shape st(shape.size());
  int64_t acc = 1;
  for (int64_t i = int64_t(shape.size()) - 1; i >= 0; --i) {
    st[i] = acc;
    // Even an empty tensor ((0, 10^18, 10^18)) needs strides that fit in int64.
    if (i > 0 && __builtin_mul_overflow(acc, std::max<int64_t>(shape[i], 1), &acc))
      throw Error("[shape] the strides of " + shape_str(shape) + " overflow int64");
  }
  return st;
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (auto s : shape)
    if (__builtin_mul_overflow(n, s, &n))
      throw Error("[shape] the number of elements of " + shape_str(shape) + " overflows int64");
  return n;
}

// Throws AllocationError: "[fn] cannot allocate <asked> for a (2, 3) float32 tensor: <why>", or
// without <asked> when the size is not a number of bytes at all.
[[noreturn]] void fail_allocation(const char* fn, const Shape& shape, Dtype dtype,
                                  const std::string& asked, const std::string& why) {
  throw AllocationError(msg(fn, "cannot allocate ", asked.empty() ? "" : asked + " for ", "a ",
                            shape_str(shape), " ", dtype_name(dtype).substr(6), " tensor: ", why));
}

Tensor make_tensor(const char* fn, const Shape& shape, Dtype dtype, bool zero,
                   const Device& device) {
  for (auto s : shape)
    if (s < 0) fail(fn, "negative dimension in shape ", shape_str(shape));
  int64_t numel = 1;
  for (auto s : shape)
    if (__builtin_mul_overflow(numel, s, &numel))
      fail_allocation(fn, shape, dtype, "", "its number of elements overflows int64");
  // Bytes in 128 bits: numel < 2^63 and itemsize <= 8, so the product fits.
  const unsigned __int128 bytes = (unsigned __int128)numel * itemsize(dtype);
  const double approx = double(bytes);
  std::string exact;  // the decimal digits of bytes
  for (unsigned __int128 b = bytes; exact.empty() || b > 0; b /= 10)
    exact.insert(exact.begin(), char('0' + int(b % 10)));
  const std::string asked = bytes_str(approx) + " (" + exact + " bytes)";
  // Beyond 2^58 elements no machine has the memory, and the element offsets of kernels that
  // multiply them by a stride or an item size would overflow.
  if (numel > (int64_t(1) << 58))
    fail_allocation(fn, shape, dtype, asked, "more memory than any machine has");
  auto impl = std::make_shared<TensorImpl>();
  try {
    impl->storage = device.is_cpu() ? Storage::allocate(std::size_t(bytes), zero)
                                    : Storage::allocate(std::size_t(bytes), device, zero, fn);
  } catch (const AllocationError& e) {
    if (device.is_cuda()) throw;  // the CUDA message names the GPU and its free memory
    (void)e;
    fail_allocation(fn, shape, dtype, asked, "out of memory");
  }
  impl->sizes = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(impl);
}

Tensor make_tensor(const Shape& shape, Dtype dtype, bool zero) {
  return make_tensor("empty", shape, dtype, zero);
}

void check_cpu(const Tensor& t, const char* fn) {
  const Device d = t.impl()->storage->device;
  if (d.is_cpu()) return;
  throw DeviceError(msg(fn, "expected a tensor on the CPU, got one on ", d.str(),
                        ": this operation has no CUDA implementation (move the tensor with "
                        ".cpu() first)"));
}

void check_cpu_operands(const char* fn, std::initializer_list<const Tensor*> ts) {
  const Tensor* first = nullptr;
  for (const Tensor* t : ts) {
    if (!t->defined()) continue;
    if (first && t->device() != first->device())
      throw DeviceError(msg(fn, "expected all tensors on the same device, got ",
                            first->device().str(), " and ", t->device().str()));
    if (!first) first = t;
  }
  if (first) check_cpu(*first, fn);
}

Tensor make_view(const Tensor& base, Shape sizes, Shape strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.impl()->storage;
  impl->sizes = std::move(sizes);
  impl->strides = std::move(strides);
  impl->offset = offset;
  impl->dtype = base.dtype();
  impl->requires_grad = base.requires_grad();
  // Remember the tensor this one views (never itself a view), for in-place ops through views.
  const auto& bm = base.impl()->autograd;
  auto meta = std::make_shared<AutogradMeta>();
  meta->base = bm && bm->base ? bm->base : base.impl();
  meta->version = impl->storage->version;
  impl->autograd = std::move(meta);
  return Tensor(impl);
}

Shape broadcast_strides(const Tensor& t, const Shape& shape) {
  Shape st(shape.size(), 0);
  int64_t off = int64_t(shape.size()) - t.dim();
  for (int64_t i = 0; i < t.dim(); ++i)
    st[off + i] = (t.shape()[i] == 1 && shape[off + i] != 1) ? 0 : t.strides()[i];
  return st;
}

void check_float32(const Tensor& t, const char* what, const char* fn) {
  if (!t.defined()) fail(fn, what, " is an undefined tensor");
  if (t.dtype() != Dtype::Float32)
    fail(fn, what, " must be float32, got ", dtype_name(t.dtype()), " ", shape_str(t.shape()),
         is_reduced_float(t.dtype())
             ? " (bfloat16 and float16 are supported for storage and conversion; call .float())"
             : "");
}

void check_not_reduced(const Tensor& t, const char* fn) {
  if (t.defined() && is_reduced_float(t.dtype())) fail_reduced(t.dtype(), fn);
}

void fail_base_ptr(Dtype have, Dtype want) {
  fail("data_ptr", "internal: a ", dtype_name(have), " tensor read as ", dtype_name(want));
}

std::string tensor_desc(const Tensor& t) {
  return shape_str(t.shape()) + " " + dtype_name(t.dtype()).substr(6);
}

}  // namespace detail

// ---- metadata -----------------------------------------------------------------------------------

const TensorImpl& Tensor::checked() const {
  if (!impl_) throw Error("[Tensor] use of an undefined tensor");
  return *impl_;
}
const Shape& Tensor::shape() const { return checked().sizes; }
const Shape& Tensor::strides() const { return checked().strides; }
int64_t Tensor::size(int64_t d) const {
  if (dim() == 0)
    throw IndexError(
        detail::msg("size", "dimension specified as ", d, " but tensor has no dimensions"));
  return shape()[wrap_dim(d, dim(), "size")];
}
int64_t Tensor::stride(int64_t d) const {
  if (dim() == 0)
    throw IndexError(
        detail::msg("stride", "dimension specified as ", d, " but tensor has no dimensions"));
  return strides()[wrap_dim(d, dim(), "stride")];
}
int64_t Tensor::storage_offset() const { return checked().offset; }
int64_t Tensor::numel() const { return detail::shape_numel(shape()); }
Dtype Tensor::dtype() const { return checked().dtype; }

bool Tensor::is_contiguous() const {
  if (numel() == 0) return true;  // as torch: an empty tensor is contiguous whatever its strides
  int64_t expected = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (shape()[i] == 1) continue;
    if (strides()[i] != expected) return false;
    expected *= shape()[i];
  }
  return true;
}

Device Tensor::device() const { return checked().storage->device; }

void* Tensor::device_data() const {
  const auto& im = checked();
  return static_cast<char*>(im.storage->data) + im.offset * int64_t(itemsize(im.dtype));
}

void* Tensor::raw_data() const {
  detail::check_cpu(*this, "data_ptr");
  return device_data();
}

template <typename T>
T* Tensor::data_ptr() const {
  constexpr Dtype want = detail::dtype_of<T>();
  if (dtype() != want)
    fail("data_ptr", "tensor has dtype ", dtype_name(dtype()), ", asked for ", dtype_name(want));
  return static_cast<T*>(raw_data());
}
template float* Tensor::data_ptr<float>() const;
template int64_t* Tensor::data_ptr<int64_t>() const;
template bool* Tensor::data_ptr<bool>() const;
template BFloat16* Tensor::data_ptr<BFloat16>() const;
template Half* Tensor::data_ptr<Half>() const;

bool Tensor::requires_grad() const {
  const TensorImpl& im = checked();
  if (im.autograd && im.autograd->base) detail::refresh_view(*impl_);
  return im.requires_grad;
}
Tensor& Tensor::requires_grad_(bool value) {
  if (value && dtype() != Dtype::Float32)
    fail("requires_grad_", "only float32 tensors can require gradients, got ", dtype_name(dtype()));
  if (grad_fn(*this)) {
    if (!value)
      fail("requires_grad_",
           "you can only change requires_grad flags of leaf variables; use detach() to get a "
           "tensor that does not require grad");
    return *this;  // a result already requires grad
  }
  impl_->requires_grad = value;
  // A leaf stands for itself: in-place ops on a tensor it was viewed from do not rewrite it.
  if (value && impl_->autograd) impl_->autograd->base = nullptr;
  // Its autograd record exists from now on, so that backward passes on other threads, which
  // accumulate into its .grad, never create it while a forward pass reads it.
  if (value && !impl_->autograd) impl_->autograd = std::make_shared<AutogradMeta>();
  return *this;
}
Tensor Tensor::detach() const {
  Tensor t = detail::make_view(*this, shape(), strides(), storage_offset());
  t.impl()->requires_grad = false;
  t.impl()->autograd = nullptr;  // shares storage (and its version counter), not history
  return t;
}

// ---- copies and conversion ----------------------------------------------------------------------

namespace {

// One element converted as torch's static_cast_with_inter_type: a 2-byte float goes through float
// (to bool: non-zero, NaN included, is true; to int64: truncated), and into one every value goes
// through float (an int64 is rounded to float32 first, then to the 2-byte type, as c10 does).
template <typename To, typename From>
To convert_one(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (detail::is_half_type<From>) {
    return convert_one<To>(float(v));
  } else if constexpr (detail::is_half_type<To>) {
    return To(float(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else {
    return To(v);
  }
}

template <typename To, typename From>
void convert_loop(const Tensor& dst, const Tensor& src) {
  To* d = detail::base_ptr<To>(dst);
  const From* s = detail::base_ptr<From>(src);
  Shape sst = detail::broadcast_strides(src, dst.shape());
  detail::strided_loop<2>(
      dst.shape(), {&dst.strides(), &sst}, {dst.storage_offset(), src.storage_offset()},
      [&](const std::array<int64_t, 2>& o) { d[o[0]] = convert_one<To>(s[o[1]]); });
}

template <typename To>
void convert_from(const Tensor& dst, const Tensor& src) {
  detail::dispatch_dtype(src.dtype(), [&]<typename From>() { convert_loop<To, From>(dst, src); });
}

bool overlaps(const Tensor& a, const Tensor& b) { return a.impl()->storage == b.impl()->storage; }

// ---- copies between devices ---------------------------------------------------------------------
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

// dst.copy_(src) where either is on a GPU: the conversion and broadcasting run on the CPU
// (convert_from), the bytes cross by cudaMemcpy. A strided GPU destination is read back first,
// so that the elements between its strides keep their values. Same dtype, shape and contiguity
// on one GPU is a single device-to-device copy.
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

}  // namespace

Tensor& Tensor::copy_(const Tensor& src_in) {
  checked();
  detail::check_inplace(*this, "copy_");
  if (!src_in.defined()) fail("copy_", "source tensor is undefined");
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
  if (is_cuda() || src.is_cuda())
    copy_across_devices(*this, src);
  else
    detail::dispatch_dtype(dtype(), [&]<typename To>() { convert_from<To>(*this, src); });
  detail::bump_version(*this);
  // Only float32 tensors take part in the graph: x.long() or a copy into an int64 tensor does not.
  // The old value of self is overwritten (zero gradient); src, broadcast to self, gets the rest,
  // summed over the broadcast dims on the CPU (a GPU has no reduction) and moved to src's device.
  if (dtype() == Dtype::Float32 && (src_in.requires_grad() || requires_grad())) {
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
              n.needs_input_grad(0) ? zeros(g.shape(), Dtype::Float32, g.device()) : Tensor(),
              src_grad};
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

// ---- views --------------------------------------------------------------------------------------

namespace {

// Backward formulas of the view ops: each maps the gradient of the view back to the input's shape.
std::vector<Tensor> one(Tensor g) { return {std::move(g)}; }

BackwardFn reshape_back(Shape in_shape) {
  return [in_shape](const Node&, const Tensor& g) { return one(g.reshape(in_shape)); };
}
BackwardFn transpose_back(int64_t d0, int64_t d1) {
  return [d0, d1](const Node&, const Tensor& g) {
    return one(g.dim() == 0 ? g : g.transpose(d0, d1));
  };
}

// Resolves a single -1 and checks the element count.
Shape infer_shape(const Shape& shape, int64_t numel, const char* fn, const Shape& from) {
  Shape out = shape;
  int64_t known = 1, infer = -1;
  for (std::size_t i = 0; i < out.size(); ++i) {
    if (out[i] == -1) {
      if (infer >= 0) fail(fn, "only one dimension can be inferred in shape ", shape_str(shape));
      infer = int64_t(i);
    } else if (out[i] < 0) {
      fail(fn, "invalid shape dimension ", out[i], " in ", shape_str(shape));
    } else {
      known *= out[i];
    }
  }
  if (infer >= 0) {
    if (known == 0 || numel % known != 0)
      fail(fn, "shape ", shape_str(shape), " is invalid for input of size ", numel, " ",
           shape_str(from));
    out[infer] = numel / known;
  } else if (known != numel) {
    fail(fn, "shape ", shape_str(shape), " is invalid for input of size ", numel, " ",
         shape_str(from));
  }
  return out;
}

// PyTorch's computeStride: strides for viewing (old sizes, old strides) as new sizes, or nullopt.
std::optional<Shape> view_strides(const Shape& old_sizes, const Shape& old_strides,
                                  const Shape& new_sizes) {
  Shape ns(new_sizes.size(), 0);
  if (old_sizes.empty()) {
    std::fill(ns.begin(), ns.end(), 1);
    return ns;
  }
  int64_t numel = detail::shape_numel(old_sizes);
  if (numel == 0) return detail::contiguous_strides(new_sizes);
  int64_t view_d = int64_t(new_sizes.size()) - 1;
  int64_t chunk_base_stride = old_strides.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t td = int64_t(old_sizes.size()) - 1; td >= 0; --td) {
    tensor_numel *= old_sizes[td];
    if (td == 0 ||
        (old_sizes[td - 1] != 1 && old_strides[td - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || new_sizes[view_d] == 1)) {
        ns[view_d] = view_numel * chunk_base_stride;
        view_numel *= new_sizes[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return std::nullopt;
      if (td > 0) {
        chunk_base_stride = old_strides[td - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  if (view_d != -1) return std::nullopt;
  return ns;
}

}  // namespace

Tensor Tensor::view(Shape s) const {
  Shape ns = infer_shape(s, numel(), "view", shape());
  auto st = view_strides(shape(), strides(), ns);
  if (!st)
    fail("view", "view size ", shape_str(ns),
         " is not compatible with input tensor's size and stride ", shape_str(shape()), " ",
         shape_str(strides()),
         " (at least one dimension spans across two contiguous subspaces); "
         "use reshape instead");
  return detail::record(detail::make_view(*this, ns, *st, storage_offset()), "ViewBackward0",
                        {this}, reshape_back(shape()));
}

Tensor Tensor::reshape(Shape s) const {
  Shape ns = infer_shape(s, numel(), "reshape", shape());
  if (auto st = view_strides(shape(), strides(), ns))
    return detail::record(detail::make_view(*this, ns, *st, storage_offset()), "ViewBackward0",
                          {this}, reshape_back(shape()));
  // Not viewable: a copy, recorded as PyTorch's _unsafe_view of the clone.
  Tensor copy = clone();
  Tensor out;
  {
    NoGradGuard no_grad;
    out = copy.view(ns);
  }
  return detail::record(out, "UnsafeViewBackward0", {&copy}, reshape_back(shape()));
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  if (dim() == 0) return reshape({1});
  int64_t s = wrap_dim(start_dim, dim(), "flatten"), e = wrap_dim(end_dim, dim(), "flatten");
  if (s > e) fail("flatten", "start_dim ", start_dim, " cannot come after end_dim ", end_dim);
  Shape ns(shape().begin(), shape().begin() + s);
  int64_t m = 1;
  for (int64_t i = s; i <= e; ++i) m *= shape()[i];
  ns.push_back(m);
  ns.insert(ns.end(), shape().begin() + e + 1, shape().end());
  return reshape(ns);
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  if (dim() == 0) {
    wrap_dim(d0, 0, "transpose");
    wrap_dim(d1, 0, "transpose");
    return detail::record(detail::make_view(*this, shape(), strides(), storage_offset()),
                          "TransposeBackward0", {this}, transpose_back(0, 0));
  }
  d0 = wrap_dim(d0, dim(), "transpose");
  d1 = wrap_dim(d1, dim(), "transpose");
  Shape sz = shape(), st = strides();
  std::swap(sz[d0], sz[d1]);
  std::swap(st[d0], st[d1]);
  return detail::record(detail::make_view(*this, sz, st, storage_offset()), "TransposeBackward0",
                        {this}, transpose_back(d0, d1));
}

Tensor Tensor::permute(Shape dims) const {
  if (int64_t(dims.size()) != dim())
    fail("permute", "number of dims ", dims.size(), " in ", shape_str(dims),
         " does not match the tensor's ", dim(), " dims ", shape_str(shape()));
  Shape sz(dims.size()), st(dims.size());
  std::vector<bool> seen(dims.size(), false);
  for (std::size_t i = 0; i < dims.size(); ++i) {
    int64_t d = wrap_dim(dims[i], dim(), "permute");
    if (seen[d]) fail("permute", "repeated dim in ", shape_str(dims));
    seen[d] = true;
    sz[i] = shape()[d];
    st[i] = strides()[d];
  }
  Shape inverse(dims.size());
  for (std::size_t i = 0; i < dims.size(); ++i)
    inverse[wrap_dim(dims[i], dim(), "permute")] = int64_t(i);
  return detail::record(
      detail::make_view(*this, sz, st, storage_offset()), "PermuteBackward0", {this},
      [inverse](const Node&, const Tensor& g) { return one(g.permute(inverse)); });
}

Tensor Tensor::T() const {
  Shape dims(dim());
  for (int64_t i = 0; i < dim(); ++i) dims[i] = dim() - 1 - i;
  return permute(dims);
}

Tensor Tensor::mT() const {
  if (dim() < 2) fail("mT", "tensor of shape ", shape_str(shape()), " has fewer than 2 dims");
  return transpose(-2, -1);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = wrap_dim(d, dim() + 1, "unsqueeze");
  Shape sz = shape(), st = strides();
  int64_t new_stride = d < dim() ? sz[d] * st[d] : 1;
  sz.insert(sz.begin() + d, 1);
  st.insert(st.begin() + d, new_stride);
  return detail::record(detail::make_view(*this, sz, st, storage_offset()), "UnsqueezeBackward0",
                        {this}, [d](const Node&, const Tensor& g) { return one(g.squeeze(d)); });
}

Tensor Tensor::squeeze() const {
  Shape sz, st;
  for (int64_t i = 0; i < dim(); ++i)
    if (shape()[i] != 1) {
      sz.push_back(shape()[i]);
      st.push_back(strides()[i]);
    }
  return detail::record(detail::make_view(*this, sz, st, storage_offset()), "SqueezeBackward0",
                        {this}, reshape_back(shape()));
}

Tensor Tensor::squeeze(int64_t d) const {
  if (dim() == 0) {
    wrap_dim(d, 0, "squeeze");
    return detail::record(detail::make_view(*this, shape(), strides(), storage_offset()),
                          "SqueezeBackward1", {this}, reshape_back(shape()));
  }
  d = wrap_dim(d, dim(), "squeeze");
  if (shape()[d] != 1)
    return detail::record(detail::make_view(*this, shape(), strides(), storage_offset()),
                          "SqueezeBackward1", {this}, reshape_back(shape()));
  Shape sz = shape(), st = strides();
  sz.erase(sz.begin() + d);
  st.erase(st.begin() + d);
  return detail::record(detail::make_view(*this, sz, st, storage_offset()), "SqueezeBackward1",
                        {this}, reshape_back(shape()));
}

Tensor Tensor::expand(Shape s) const {
  if (int64_t(s.size()) < dim())
    fail("expand", "the number of sizes provided ", shape_str(s),
         " must be greater or equal to the number of dimensions of ", shape_str(shape()));
  Shape sz(s.size()), st(s.size());
  int64_t off = int64_t(s.size()) - dim();
  for (int64_t i = int64_t(s.size()) - 1; i >= 0; --i) {
    int64_t j = i - off;
    if (j >= 0) {
      int64_t want = s[i] == -1 ? shape()[j] : s[i];
      if (shape()[j] == want) {
        sz[i] = want;
        st[i] = strides()[j];
      } else if (shape()[j] == 1 && want >= 0) {
        sz[i] = want;
        st[i] = 0;
      } else {
        fail("expand", "the expanded size ", shape_str(s), " must match the existing size ",
             shape_str(shape()), " at non-singleton dimension ", i);
      }
    } else {
      if (s[i] < 0) fail("expand", "the expanded size -1 is not allowed in a leading, new dim");
      sz[i] = s[i];
      st[i] = 0;
    }
  }
  return detail::record(detail::make_view(*this, sz, st, storage_offset()), "ExpandBackward0",
                        {this}, [in_shape = shape()](const Node&, const Tensor& g) {
                          return one(detail::sum_to(g, in_shape));
                        });
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  if (dim() == 0) fail("select", "select() cannot be applied to a 0-dim tensor");
  d = wrap_dim(d, dim(), "select");
  int64_t n = shape()[d];
  if (index < -n || index >= n)
    throw IndexError(detail::msg("select", "index ", index, " is out of bounds for dimension ", d,
                                 " with size ", n));
  if (index < 0) index += n;
  Shape sz = shape(), st = strides();
  int64_t off = storage_offset() + index * st[d];
  sz.erase(sz.begin() + d);
  st.erase(st.begin() + d);
  return detail::record(detail::make_view(*this, sz, st, off), "SelectBackward0", {this},
                        [in_shape = shape(), d, index](const Node&, const Tensor& g) {
                          Tensor z = zeros(in_shape);
                          z.select(d, index).copy_(g);
                          return one(z);
                        });
}

Tensor Tensor::slice(int64_t d, std::optional<int64_t> start, std::optional<int64_t> stop,
                     int64_t step) const {
  if (dim() == 0) fail("slice", "cannot slice a 0-dim tensor");
  d = wrap_dim(d, dim(), "slice");
  if (step <= 0) fail("slice", "step must be positive, got ", step);
  int64_t n = shape()[d];
  int64_t s = start.value_or(0), e = stop.value_or(n);
  if (s < 0) s += n;
  if (e < 0) e += n;
  s = std::clamp<int64_t>(s, 0, n);
  e = std::clamp<int64_t>(e, 0, n);
  int64_t len = e > s ? (e - s + step - 1) / step : 0;
  Shape sz = shape(), st = strides();
  int64_t off = storage_offset() + s * st[d];
  sz[d] = len;
  st[d] *= step;
  return detail::record(detail::make_view(*this, sz, st, off), "SliceBackward0", {this},
                        [in_shape = shape(), d, s, e, step](const Node&, const Tensor& g) {
                          Tensor z = zeros(in_shape);
                          z.slice(d, s, e, step).copy_(g);
                          return one(z);
                        });
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  d = wrap_dim(d, dim(), "narrow");
  int64_t n = shape()[d];
  if (start < 0) start += n;
  if (start < 0 || length < 0 || start + length > n)
    throw IndexError(detail::msg("narrow", "start ", start, " and length ", length,
                                 " are out of range for dimension ", d, " of size ", n));
  return slice(d, start, start + length);
}

namespace {

// An int64 index tensor of any shape (contiguous), or an IndexError naming `fn`.
Tensor checked_index_tensor(const Tensor& t, const char* fn) {
  if (t.dtype() != Dtype::Int64)
    throw IndexError(detail::msg(fn, "tensors used as indices must be long or bool tensors, got ",
                                 dtype_name(t.dtype())));
  return t.contiguous();
}

// Entry i of a validated index tensor, wrapped into [0, n), or an IndexError.
int64_t wrap_index(int64_t k, int64_t n, int64_t d, const char* fn) {
  if (k < -n || k >= n)
    throw IndexError(
        detail::msg(fn, "index ", k, " is out of bounds for dimension ", d, " with size ", n));
  return k < 0 ? k + n : k;
}

// The basic-indexing part of x[indices]: a view of `self` where integers, slices, None and the
// Ellipsis are applied, and one index tensor (at most) is left as a full dimension whose position
// in the view is `tensor_dim` (-1 when there is none). The index tensor is flattened to 1-D
// `index`; in the result its dim becomes `index_shape` (the index tensor's shape). A bool mask
// over k dims is its true positions (row-major) in those dims, flattened into one dim of the
// view: with `need_view` (index_put_) that must be possible without a copy.
struct Indexed {
  Tensor view;
  int64_t tensor_dim = -1;
  Tensor index;       // the 1-D int64 index tensor, when tensor_dim >= 0
  Shape index_shape;  // what the index dim becomes in the result
};

Indexed apply_indices(const Tensor& self, const std::vector<TensorIndex>& indices, const char* fn,
                      bool need_view = false) {
  // Count the dims consumed, to expand an Ellipsis (a bool mask consumes as many as it has).
  int64_t consumed = 0, ellipses = 0;
  for (const auto& ix : indices) {
    if (ix.kind() == TensorIndex::Kind::Integer || ix.kind() == TensorIndex::Kind::Slice)
      ++consumed;
    if (ix.kind() == TensorIndex::Kind::Tensor)
      consumed += ix.tensor().defined() && ix.tensor().dtype() == Dtype::Bool
                      ? std::max<int64_t>(ix.tensor().dim(), 1)
                      : 1;
    if (ix.kind() == TensorIndex::Kind::Ellipsis) ++ellipses;
  }
  if (ellipses > 1) throw IndexError(detail::msg(fn, "an index can only have a single ellipsis"));
  if (consumed > self.dim())
    throw IndexError(detail::msg(fn, "too many indices for tensor of dimension ", self.dim(),
                                 " (got ", consumed, ")"));
  Indexed r;
  Tensor out = self;  // each view below records its node on top of self's
  int64_t d = 0;      // current dim in `out`
  for (const auto& ix : indices) {
    switch (ix.kind()) {
      case TensorIndex::Kind::Integer:
        out = out.select(d, wrap_index(ix.integer(), out.shape()[d], d, fn));
        break;
      case TensorIndex::Kind::Slice: {
        const auto& s = ix.slice();
        int64_t step = s.step.value_or(1);
        if (step == 0) fail(fn, "slice step cannot be zero");
        if (step < 0) fail(fn, "negative slice steps are not supported, got ", step);
        out = out.slice(d, s.start, s.stop, step);
        ++d;
        break;
      }
      case TensorIndex::Kind::None:
        out = out.unsqueeze(d);
        ++d;
        break;
      case TensorIndex::Kind::Ellipsis: d += self.dim() - consumed; break;
      case TensorIndex::Kind::Tensor: {
        const Tensor& t = ix.tensor();
        if (!t.defined()) fail(fn, "undefined index tensor");
        if (t.dim() == 0 && t.dtype() == Dtype::Int64) {
          out = out.select(d, wrap_index(t.item<int64_t>(), out.shape()[d], d, fn));
          break;
        }
        if (r.tensor_dim >= 0)
          fail(fn, "indexing with more than one index tensor is not supported");
        if (t.dtype() == Dtype::Bool) {
          if (t.dim() == 0) fail(fn, "indexing with a 0-dim bool tensor is not supported");
          const int64_t k = t.dim();
          for (int64_t j = 0; j < k; ++j)
            if (t.shape()[j] != out.shape()[d + j])
              throw IndexError(detail::msg(
                  fn, "the shape of the mask ", shape_str(t.shape()), " at index ", j,
                  " does not match the shape of the indexed tensor ", shape_str(out.shape())));
          if (k > 1) {  // flatten the k masked dims into one
            Shape flat(out.shape().begin(), out.shape().begin() + d);
            int64_t m = 1;
            for (int64_t j = 0; j < k; ++j) m *= out.shape()[d + j];
            flat.push_back(m);
            flat.insert(flat.end(), out.shape().begin() + d + k, out.shape().end());
            if (need_view) {
              try {
                out = out.view(flat);
              } catch (const Error&) {
                fail(fn, "assigning through a bool mask over ", k, " dims of a ",
                     shape_str(out.shape()), " tensor whose strides ", shape_str(out.strides()),
                     " do not allow flattening them is not supported; make it contiguous first");
              }
            } else {
              out = out.reshape(flat);
            }
          }
          Tensor mask = t.contiguous();
          const bool* mp = mask.data_ptr<bool>();
          std::vector<int64_t> pos;
          for (int64_t i = 0; i < mask.numel(); ++i)
            if (mp[i]) pos.push_back(i);
          Tensor idx = detail::make_tensor(fn, {int64_t(pos.size())}, Dtype::Int64);
          std::copy(pos.begin(), pos.end(), idx.data_ptr<int64_t>());
          r.index = idx;
          r.index_shape = {int64_t(pos.size())};
        } else {
          Tensor idx = checked_index_tensor(t, fn);
          const int64_t* ip = idx.data_ptr<int64_t>();
          for (int64_t i = 0; i < idx.numel(); ++i) wrap_index(ip[i], out.shape()[d], d, fn);
          r.index = idx.reshape({-1});
          r.index_shape = t.shape();
        }
        r.tensor_dim = d;
        ++d;
        break;
      }
    }
  }
  r.view = out;
  return r;
}

// dst[ip[i]] = src[i] (put) or dst[i] = src[ip[i]] (take) for 1-D tensors of one dtype: the
// element-per-index case of advanced indexing (x[mask], x[mask] = v) without a copy_ per element.
// The indices are wrapped and checked already.
template <typename T>
void move_1d(const Tensor& dst, const Tensor& src, const int64_t* ip, int64_t n, int64_t size,
             bool put) {
  T* pd = detail::base_ptr<T>(dst) + dst.storage_offset();
  const T* ps = detail::base_ptr<T>(src) + src.storage_offset();
  const int64_t sd = dst.strides()[0], ss = src.strides()[0];
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = ip[i] < 0 ? ip[i] + size : ip[i];
    if (put)
      pd[k * sd] = ps[i * ss];
    else
      pd[i * sd] = ps[k * ss];
  }
}

void move_1d(const Tensor& dst, const Tensor& src, const int64_t* ip, int64_t n, int64_t size,
             bool put) {
  if (src.dtype() != dst.dtype())
    fail("index", "internal: moving ", dtype_name(src.dtype()), " elements into ",
         dtype_name(dst.dtype()));
  detail::dispatch_dtype(dst.dtype(),
                         [&]<typename T>() { move_1d<T>(dst, src, ip, n, size, put); });
}

// The shape x[indices] has: the view's shape with the index dim replaced by index_shape.
Shape indexed_shape(const Indexed& ix) {
  Shape s(ix.view.shape().begin(), ix.view.shape().begin() + ix.tensor_dim);
  s.insert(s.end(), ix.index_shape.begin(), ix.index_shape.end());
  s.insert(s.end(), ix.view.shape().begin() + ix.tensor_dim + 1, ix.view.shape().end());
  return s;
}

}  // namespace

Tensor Tensor::index(const std::vector<TensorIndex>& indices) const {
  Indexed ix = apply_indices(*this, indices, "index");
  if (ix.tensor_dim < 0 && ix.view.is_same(*this))  // x[...]: an alias, as torch's
    return detail::record(detail::make_view(*this, shape(), strides(), storage_offset()),
                          "AliasBackward0", {this},
                          [](const Node&, const Tensor& g) { return one(g); });
  if (ix.tensor_dim < 0) return ix.view;
  // Advanced indexing with an index tensor: a copy, as in torch.
  const Tensor& v = ix.view;
  const int64_t d = ix.tensor_dim, n = v.shape()[d];
  Shape sz = v.shape();
  sz[d] = ix.index.numel();
  Tensor out = detail::make_tensor("index", sz, dtype());
  {
    NoGradGuard no_grad;
    const int64_t* ip = ix.index.data_ptr<int64_t>();
    if (v.dim() == 1)
      move_1d(out, v, ip, ix.index.numel(), n, false);
    else
      for (int64_t i = 0; i < ix.index.numel(); ++i)
        out.select(d, i).copy_(v.select(d, wrap_index(ip[i], n, d, "index")));
  }
  // The gradient of each picked slice is added back where it came from (repeats add up).
  out = detail::record(out, "IndexBackward0", {&v},
                       [in_shape = v.shape(), d, n](const Node& node, const Tensor& g) {
                         Tensor idx = node.saved_tensor(0);
                         Tensor z = zeros(in_shape);
                         const int64_t* ip = idx.data_ptr<int64_t>();
                         if (in_shape.size() == 1) {  // one element per index
                           Tensor gc = g.contiguous();
                           float* pz = z.data_ptr<float>();
                           const float* pg = gc.data_ptr<float>();
                           for (int64_t i = 0; i < idx.numel(); ++i)
                             pz[ip[i] < 0 ? ip[i] + n : ip[i]] += pg[i];
                           return one(z);
                         }
                         for (int64_t i = 0; i < idx.numel(); ++i)
                           z.select(d, ip[i] < 0 ? ip[i] + n : ip[i]).add_(g.select(d, i));
                         return one(z);
                       },
                       {ix.index});
  const Shape result = indexed_shape(ix);
  return result == out.shape() ? out : out.view(result);
}

Tensor& Tensor::index_put_(const std::vector<TensorIndex>& indices, const Tensor& value_in) {
  detail::check_inplace(*this, "index_put_");
  if (!value_in.defined()) fail("index_put_", "undefined value tensor");
  Indexed ix = apply_indices(*this, indices, "index_put_", true);
  if (ix.tensor_dim < 0) {
    Shape b = broadcast_shapes(ix.view.shape(), value_in.shape(), "index_put_");
    if (b != ix.view.shape())
      fail("index_put_", "shape mismatch: value tensor of shape ", shape_str(value_in.shape()),
           " cannot be broadcast to indexing result of shape ", shape_str(ix.view.shape()));
    ix.view.copy_(value_in);
    return *this;
  }
  // x[..., idx, ...] = value: value broadcasts to the shape x[..., idx, ...] would have.
  const Tensor& v = ix.view;
  const int64_t d = ix.tensor_dim, n = v.shape()[d];
  const Shape result = indexed_shape(ix);
  Shape flat = v.shape();
  flat[d] = ix.index.numel();
  Shape b = broadcast_shapes(result, value_in.shape(), "index_put_");
  if (b != result)
    fail("index_put_", "shape mismatch: value tensor of shape ", shape_str(value_in.shape()),
         " cannot be broadcast to indexing result of shape ", shape_str(result));
  {
    NoGradGuard no_grad;
    Tensor value = value_in.impl()->storage == impl()->storage ? value_in.clone() : value_in;
    Tensor ve = value.expand(result).reshape(flat);
    const int64_t* ip = ix.index.data_ptr<int64_t>();
    if (v.dim() == 1) {
      move_1d(v, ve.to(dtype()), ip, ix.index.numel(), n, true);
      detail::bump_version(*this);
    } else {
      for (int64_t i = 0; i < ix.index.numel(); ++i)
        v.select(d, wrap_index(ip[i], n, d, "index_put_")).copy_(ve.select(d, i));
    }
  }
  if (dtype() != Dtype::Float32) return *this;
  // torch's IndexPutBackward0: the overwritten elements get no gradient, the value gets the
  // gradient of every position it was written to (a repeated index counts each time).
  std::vector<TensorIndex> saved_indices = indices;
  detail::record_inplace(
      *this, "IndexPutBackward0", {this, &value_in},
      [saved_indices, d, n, flat, result, vshape = value_in.shape()](const Node& node,
                                                                     const Tensor& g) {
        Tensor gs = g.contiguous().clone();
        Indexed gi = apply_indices(gs, saved_indices, "index_put_", true);
        const int64_t* ip = gi.index.data_ptr<int64_t>();
        Tensor gv;
        const int64_t m = gi.index.numel();
        if (node.needs_input_grad(1)) {
          Tensor picked = detail::make_tensor("index_put_", flat, Dtype::Float32);
          if (gi.view.dim() == 1)
            move_1d(picked, gi.view, ip, m, n, false);
          else
            for (int64_t i = 0; i < m; ++i)
              picked.select(d, i).copy_(gi.view.select(d, ip[i] < 0 ? ip[i] + n : ip[i]));
          gv = detail::sum_to(picked.view(result), vshape);
        }
        if (gi.view.dim() == 1)
          move_1d(gi.view, zeros({m}), ip, m, n, true);
        else
          for (int64_t i = 0; i < m; ++i) gi.view.select(d, ip[i] < 0 ? ip[i] + n : ip[i]).zero_();
        return std::vector<Tensor>{gs, gv};
      });
  return *this;
}

Tensor& Tensor::index_put_(const std::vector<TensorIndex>& indices, Scalar value) {
  return index_put_(indices, detail::scalar_tensor(value, dtype()));
}

// ---- printing -----------------------------------------------------------------------------------

std::string Tensor::repr() const {
  if (!defined()) return "tensor(undefined)";
  Tensor c;
  {
    NoGradGuard no_grad;
    c = cpu().contiguous();
  }
  std::vector<std::string> suffixes;
  if (is_cuda()) suffixes.push_back("device='" + device().str() + "'");
  if (auto fn = grad_fn(*this))
    suffixes.push_back("grad_fn=<" + fn->name + ">");
  else if (requires_grad())
    suffixes.push_back("requires_grad=True");
  return format_tensor(c.shape(), c.dtype(), c.raw_data(), suffixes);
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.repr(); }

// ---- creation -----------------------------------------------------------------------------------

namespace {

void nested_shape(const NestedList& l, int64_t depth, Shape& shape, bool& any_float,
                  bool& all_bool) {
  if (l.is_leaf()) {
    if (depth != int64_t(shape.size()))
      fail("tensor", "expected a sequence at depth ", depth, " but found a number");
    any_float |= l.scalar().kind() == Scalar::Kind::Float;
    all_bool &= l.scalar().kind() == Scalar::Kind::Bool;
    return;
  }
  int64_t n = int64_t(l.items().size());
  if (depth == int64_t(shape.size())) {
    shape.push_back(n);
  } else if (depth > int64_t(shape.size()) || shape[depth] != n) {
    fail("tensor", "expected sequence of length ", depth < int64_t(shape.size()) ? shape[depth] : 0,
         " at dim ", depth, " (got ", n, ")");
  }
  for (const auto& it : l.items()) nested_shape(it, depth + 1, shape, any_float, all_bool);
}

// An element of an int64 tensor: floats are truncated (as torch) but must fit, NaN and inf do not
// (torch: "value cannot be converted to type int64 without overflow").
int64_t nested_int(const Scalar& s) {
  if (s.kind() == Scalar::Kind::Float && !fits_int64(s.to_double()))
    fail("tensor", "value ", s.to_double(), " cannot be converted to type int64 without overflow");
  return s.to_int();
}

template <typename T>
void nested_fill(const NestedList& l, T*& out) {
  if (l.is_leaf()) {
    if constexpr (std::is_same_v<T, bool>)
      *out++ = l.scalar().to_double() != 0;
    else if constexpr (std::is_same_v<T, int64_t>)
      *out++ = nested_int(l.scalar());
    else if constexpr (detail::is_half_type<T>)
      *out++ = T(float(l.scalar().to_double()));  // double -> float -> 2 bytes, as torch.tensor
    else
      *out++ = T(l.scalar().to_double());
    return;
  }
  for (const auto& it : l.items()) nested_fill(it, out);
}

}  // namespace

Tensor tensor(const NestedList& data, std::optional<Dtype> dtype, const Device& device) {
  if (!device.is_cpu()) {
    const Device dev = resolve_device(device, "tensor");
    return tensor(data, dtype).to(dev);
  }
  Shape shape;
  bool any_float = false, all_bool = true;
  // First pass fixes the shape from the first path; a leaf at the top is a 0-dim tensor.
  {
    const NestedList* p = &data;
    while (!p->is_leaf()) {
      shape.push_back(int64_t(p->items().size()));
      if (p->items().empty()) break;
      p = &p->items()[0];
    }
  }
  Shape checked;
  nested_shape(data, 0, checked, any_float, all_bool);
  if (checked != shape) fail("tensor", "ragged nested sequence: expected shape ", shape_str(shape));
  bool empty = detail::shape_numel(shape) == 0;
  Dtype dt = dtype.value_or(empty || any_float ? Dtype::Float32
                            : all_bool         ? Dtype::Bool
                                               : Dtype::Int64);
  Tensor out = detail::make_tensor("tensor", shape, dt);
  detail::dispatch_dtype(dt, [&]<typename T>() {
    T* p = out.data_ptr<T>();
    nested_fill(data, p);
  });
  return out;
}

Tensor from_vector(const std::vector<float>& values, Shape shape) {
  if (int64_t(values.size()) != detail::shape_numel(shape))
    fail("from_vector", values.size(), " values do not fill shape ", shape_str(shape));
  Tensor out = detail::make_tensor("from_vector", shape, Dtype::Float32);
  std::copy(values.begin(), values.end(), out.data_ptr<float>());
  return out;
}

namespace {
void check_shape(const Shape& s, const char* fn) {
  for (auto d : s)
    if (d < 0) fail(fn, "negative dimension in shape ", shape_str(s));
}
}  // namespace

Tensor empty(Shape shape, Dtype dtype, const Device& device) {
  check_shape(shape, "empty");
  return detail::make_tensor("empty", shape, dtype, /*zero=*/true, device);
}
Tensor zeros(Shape shape, Dtype dtype, const Device& device) {
  check_shape(shape, "zeros");
  return detail::make_tensor("zeros", shape, dtype, /*zero=*/true, device);
}
namespace {
Tensor full_named(const char* fn, const Shape& shape, Scalar value, std::optional<Dtype> dtype,
                  const Device& device) {
  check_shape(shape, fn);
  Dtype dt = dtype.value_or(value.kind() == Scalar::Kind::Float  ? Dtype::Float32
                            : value.kind() == Scalar::Kind::Bool ? Dtype::Bool
                                                                 : Dtype::Int64);
  Tensor out = detail::make_tensor(fn, shape, dt, /*zero=*/!device.is_cpu(), device);
  out.fill_(value);
  return out;
}
}  // namespace

Tensor ones(Shape shape, Dtype dtype, const Device& device) {
  return full_named("ones", shape, 1, dtype, device);
}
Tensor full(Shape shape, Scalar value, std::optional<Dtype> dtype, const Device& device) {
  return full_named("full", shape, value, dtype, device);
}
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.dtype(), t.device()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.dtype(), t.device()); }
Tensor empty_like(const Tensor& t) { return empty(t.shape(), t.dtype(), t.device()); }
Tensor full_like(const Tensor& t, Scalar value) {
  return full(t.shape(), value, t.dtype(), t.device());
}

Tensor arange(Scalar end) { return arange(0, end, 1); }
Tensor arange(Scalar start, Scalar end, Scalar step) {
  bool integral = !start.is_floating() && !end.is_floating() && !step.is_floating();
  double s = start.to_double(), e = end.to_double(), st = step.to_double();
  if (st == 0) fail("arange", "step must be nonzero");
  if (!std::isfinite(s) || !std::isfinite(e)) fail("arange", "unsupported range: ", s, " -> ", e);
  if ((st > 0 && e < s) || (st < 0 && e > s))
    fail("arange", "upper bound and larger bound inconsistent with step sign");
  const double count = std::ceil((e - s) / st);
  if (!(count < 9223372036854775808.0))
    throw AllocationError(detail::msg("arange", "cannot allocate a range of ", count,
                                      " elements: its number of elements overflows int64"));
  int64_t n = int64_t(count);
  if (integral) {
    Tensor out = detail::make_tensor("arange", {n}, Dtype::Int64);
    int64_t* p = out.data_ptr<int64_t>();
    for (int64_t i = 0; i < n; ++i) p[i] = start.to_int() + i * step.to_int();
    return out;
  }
  Tensor out = detail::make_tensor("arange", {n}, Dtype::Float32);
  float* p = out.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) p[i] = float(s + double(i) * st);
  return out;
}

namespace {
Tensor triangle(const Tensor& t, int64_t diagonal, bool lower, const char* fn) {
  if (t.dim() < 2)
    fail(fn, "input tensor must have at least 2 dimensions, got ", shape_str(t.shape()));
  const char* node = lower ? "TrilBackward0" : "TriuBackward0";
  // The gradient keeps the same triangle.
  auto backward = [diagonal, lower](const Node&, const Tensor& g) {
    return std::vector<Tensor>{lower ? g.tril(diagonal) : g.triu(diagonal)};
  };
  Tensor out;
  {
    NoGradGuard no_grad;
    out = t.clone();
    const int64_t R = t.size(-2), C = t.size(-1);
    // An empty tensor has nothing to zero ((-1, R, C) would be ambiguous).
    Tensor flat = out.numel() == 0 ? out : out.reshape({-1, R, C});
    Tensor zero = detail::scalar_tensor(0, t.dtype());
    for (int64_t i = 0; i < R && out.numel() > 0; ++i) {
      // lower keeps j <= i + diagonal; upper keeps j >= i + diagonal.
      int64_t lo = lower ? i + diagonal + 1 : 0;
      int64_t hi = lower ? C : i + diagonal;
      lo = std::clamp<int64_t>(lo, 0, C);
      hi = std::clamp<int64_t>(hi, 0, C);
      if (lo < hi) flat.select(1, i).slice(1, lo, hi).copy_(zero);
    }
  }
  return detail::record(out, node, {&t}, backward);
}
}  // namespace

Tensor tril(const Tensor& t, int64_t diagonal) { return triangle(t, diagonal, true, "tril"); }
Tensor triu(const Tensor& t, int64_t diagonal) { return triangle(t, diagonal, false, "triu"); }
Tensor Tensor::tril(int64_t diagonal) const { return attn::tril(*this, diagonal); }
Tensor Tensor::triu(int64_t diagonal) const { return attn::triu(*this, diagonal); }

Tensor from_blob(void* data, Shape shape, Shape strides, Dtype dtype, std::shared_ptr<void> owner) {
  if (shape.size() != strides.size())
    fail("from_blob", "shape ", shape_str(shape), " and strides ", shape_str(strides),
         " differ in length");
  auto st = std::make_shared<Storage>();
  st->data = data;
  int64_t span = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (strides[i] < 0) fail("from_blob", "negative strides are not supported");
    if (shape[i] == 0) span = 0;
    if (span) span += (shape[i] - 1) * strides[i];
  }
  st->nbytes = std::size_t(span) * itemsize(dtype);
  st->owner = std::move(owner);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = st;
  impl->sizes = std::move(shape);
  impl->strides = std::move(strides);
  impl->dtype = dtype;
  return Tensor(impl);
}

// ---- random tensors -----------------------------------------------------------------------------

namespace {
Generator& gen_or_default(Generator* g) { return g ? *g : default_generator(); }
}  // namespace

Tensor rand(Shape shape, Generator* gen) {
  check_shape(shape, "rand");
  Tensor out = detail::make_tensor("rand", shape, Dtype::Float32);
  fill_uniform(out.data_ptr<float>(), out.numel(), 0.0, 1.0, gen_or_default(gen));
  return out;
}

Tensor randn(Shape shape, Generator* gen) {
  check_shape(shape, "randn");
  Tensor out = detail::make_tensor("randn", shape, Dtype::Float32);
  fill_normal(out.data_ptr<float>(), out.numel(), 0.0, 1.0, gen_or_default(gen));
  return out;
}

Tensor randint(int64_t low, int64_t high, Shape shape, Generator* gen) {
  check_shape(shape, "randint");
  if (low >= high) fail("randint", "low ", low, " must be less than high ", high);
  Tensor out = detail::make_tensor("randint", shape, Dtype::Int64);
  fill_randint(out.data_ptr<int64_t>(), out.numel(), low, high, gen_or_default(gen));
  return out;
}
Tensor randint(int64_t high, Shape shape, Generator* gen) { return randint(0, high, shape, gen); }

namespace {
// Runs a contiguous fill on t directly, or on a contiguous temporary copied back.
template <typename F>
Tensor& fill_float(Tensor& t, const char* fn, F&& f) {
  detail::check_not_reduced(t, fn);
  if (t.dtype() != Dtype::Float32)
    fail(fn, "expects a float32 tensor, got ", dtype_name(t.dtype()));
  detail::check_inplace(t, fn);
  if (t.is_contiguous()) {
    f(t.data_ptr<float>(), t.numel(), true);
    detail::bump_version(t);
    // Random values do not depend on the old ones: a zero gradient for them.
    detail::record_inplace(t, "CopyBackwards", {&t}, [](const Node&, const Tensor& g) {
      return std::vector<Tensor>{zeros(g.shape())};
    });
    return t;
  }
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.shape()[d] > 1 && t.strides()[d] == 0)
      fail(fn, "more than one element of the written-to tensor ", shape_str(t.shape()),
           " with strides ", shape_str(t.strides()),
           " refers to a single memory location; clone() it first");
  // PyTorch draws the numbers in memory order: visit the dims by decreasing stride.
  Shape perm(t.dim());
  for (int64_t d = 0; d < t.dim(); ++d) perm[d] = d;
  std::stable_sort(perm.begin(), perm.end(),
                   [&](int64_t a, int64_t b) { return t.strides()[a] > t.strides()[b]; });
  Tensor in_memory_order = t.permute(perm);
  Tensor tmp = detail::make_tensor(in_memory_order.shape(), Dtype::Float32);
  f(tmp.data_ptr<float>(), tmp.numel(), false);
  in_memory_order.copy_(tmp);
  return t;
}
}  // namespace

Tensor& uniform_(Tensor& t, double from, double to, Generator* gen) {
  if (!(from <= to)) fail("uniform_", "expects from <= to, but got from=", from, " > to=", to);
  return fill_float(t, "uniform_", [&](float* p, int64_t n, bool) {
    fill_uniform(p, n, from, to, gen_or_default(gen));
  });
}

Tensor& normal_(Tensor& t, double mean, double std, Generator* gen) {
  if (!(std >= 0)) fail("normal_", "expects std >= 0.0, but found std ", std);
  return fill_float(t, "normal_", [&](float* p, int64_t n, bool contiguous) {
    if (contiguous)
      fill_normal(p, n, mean, std, gen_or_default(gen));
    else
      fill_normal_serial(p, n, mean, std, gen_or_default(gen));
  });
}

Tensor& bernoulli_(Tensor& t, double p, Generator* gen) {
  if (!(p >= 0 && p <= 1)) fail("bernoulli_", "expects 0 <= p <= 1, but got p=", p);
  return fill_float(t, "bernoulli_", [&](float* d, int64_t n, bool) {
    fill_bernoulli(d, n, p, gen_or_default(gen));
  });
}

}  // namespace attn

// Tensor's accessors: sizes, strides, offset, dtype, device and contiguity; the data pointers
// (data_ptr, raw_data, device_data); the autograd flags (requires_grad, requires_grad_, detach).
#include <attn/autograd.h>
#include <attn/tensor.h>

#include <algorithm>
#include <vector>

#include "internal.h"

namespace attn {

using detail::fail;
using detail::wrap_dim;

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

bool detail::is_non_overlapping_dense(const Tensor& t) {
  if (t.is_contiguous()) return true;
  // The dims of size > 1 by stride, largest first: each must step over exactly the block of the
  // next, the last by one element.
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.shape()[d] > 1) dims.push_back(d);
  std::sort(dims.begin(), dims.end(),
            [&](int64_t a, int64_t b) { return t.strides()[a] > t.strides()[b]; });
  int64_t expected = 1;
  for (auto d = dims.rbegin(); d != dims.rend(); ++d) {
    if (t.strides()[*d] != expected) return false;
    expected *= t.shape()[*d];
  }
  return true;
}

Shape detail::elementwise_strides(const Shape& shape,
                                  std::initializer_list<const Tensor*> operands) {
  const Tensor& first = **operands.begin();
  bool same_block = true;
  for (const Tensor* t : operands)
    same_block = same_block && t->shape() == shape && t->strides() == first.strides();
  if (same_block && is_non_overlapping_dense(first))
    return first.is_contiguous() ? Shape{} : first.strides();
  const int64_t n = int64_t(shape.size());
  std::vector<Shape> strides;
  for (const Tensor* t : operands) strides.push_back(broadcast_strides(*t, shape));
  // perm: the dims from fastest to slowest, by an insertion sort that moves a dim inward past one
  // of larger stride, or of equal stride and larger size, in the first operand that tells them
  // apart; a stride-0 dim tells nothing.
  std::vector<int64_t> perm(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) perm[i] = n - 1 - i;
  auto should_swap = [&](int64_t d0, int64_t d1) {
    for (const Shape& st : strides) {
      const int64_t s0 = st[d0], s1 = st[d1];
      if (s0 == 0 || s1 == 0) continue;
      if (s0 != s1) return s0 < s1 ? -1 : 1;
      if (shape[d0] > shape[d1]) return 1;
    }
    return 0;
  };
  for (int64_t i = 1; i < n; ++i) {
    int64_t d1 = i;
    for (int64_t d0 = i - 1; d0 >= 0; --d0) {
      const int c = should_swap(perm[d0], perm[d1]);
      if (c > 0) {
        std::swap(perm[d0], perm[d1]);
        d1 = d0;
      } else if (c < 0) {
        break;
      }
    }
  }
  bool row_major = true;
  for (int64_t i = 0; i < n; ++i) row_major = row_major && perm[i] == n - 1 - i;
  if (row_major) return {};
  Shape out(static_cast<std::size_t>(n));
  int64_t step = 1;
  for (int64_t d : perm) {
    out[d] = step;
    step *= shape[d];
  }
  return out;
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
  if (value && !attn::is_floating_point(dtype()))
    fail("requires_grad_", "only floating point tensors can require gradients, got ",
         dtype_name(dtype()));
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
void Tensor::set_data(const Tensor& src) {
  checked();
  TensorImpl& im = *impl_;
  if (!src.defined()) fail("set_data", "source tensor is undefined");
  if (grad_fn(*this)) fail("set_data", "cannot replace the data of a non-leaf tensor");
  if (im.requires_grad && !attn::is_floating_point(src.dtype()))
    fail("set_data", "a tensor that requires grad cannot hold ", dtype_name(src.dtype()));
  const TensorImpl& s = *src.impl();
  im.storage = s.storage;
  im.sizes = s.sizes;
  im.strides = s.strides;
  im.offset = s.offset;
  im.dtype = s.dtype;
  if (im.autograd) {
    im.autograd->grad = Tensor();
    im.autograd->base = nullptr;
  }
}

Tensor Tensor::detach() const {
  Tensor t = detail::make_view(*this, shape(), strides(), storage_offset());
  t.impl()->requires_grad = false;
  t.impl()->autograd = nullptr;  // shares storage (and its version counter), not history
  return t;
}

}  // namespace attn

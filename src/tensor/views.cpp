// The views that reorder, add, drop or pick dims without copying: transpose, permute, T, mT,
// unsqueeze, squeeze, expand, select, slice and narrow, with their gradients; and make_view,
// which makes every view (view() and reshape() too) and links it to the tensor it views.
#include <attn/autograd.h>
#include <attn/ops.h>
#include <attn/tensor.h>

#include <algorithm>
#include <optional>

#include "internal.h"
#include "local.h"

namespace attn {

using detail::fail;
using detail::one;
using detail::reshape_back;
using detail::wrap_dim;

namespace detail {

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

}  // namespace detail

namespace {

BackwardFn transpose_back(int64_t d0, int64_t d1) {
  return [d0, d1](const Node&, const Tensor& g) {
    return one(g.dim() == 0 ? g : g.transpose(d0, d1));
  };
}

}  // namespace

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

}  // namespace attn

// view, reshape and flatten: a new shape over the same elements, a view where the strides allow
// one (PyTorch's computeStride), else (reshape) a copy.
#include <attn/autograd.h>
#include <attn/tensor.h>

#include <algorithm>
#include <optional>

#include "internal.h"
#include "local.h"

namespace attn {

using detail::fail;
using detail::reshape_back;
using detail::wrap_dim;

namespace {

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

}  // namespace attn

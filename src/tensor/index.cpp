// Indexing: x[indices] (index) and x[indices] = v (index_put_) with integers, slices, None, the
// Ellipsis and one int64 or bool index tensor, as torch's basic and advanced indexing, with their
// gradients.
#include <attn/autograd.h>
#include <attn/ops.h>
#include <attn/tensor.h>

#include <algorithm>
#include <string>
#include <vector>

#include "../backend/index_kernels.h"
#include "internal.h"
#include "local.h"

namespace attn {

using detail::fail;
using detail::one;

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
  bool index_is_mask = false;
};

// t's dims [d, d + k) merged into one: a view when the result is assigned through
// (need_view; else the error "assigning through <what()> of a ... tensor whose strides ... do
// not allow <verb> them"), a reshape otherwise.
template <typename What>
Tensor merge_dims(const Tensor& t, int64_t d, int64_t k, bool need_view, const char* fn, What what,
                  const char* verb) {
  Shape merged(t.shape().begin(), t.shape().begin() + d);
  int64_t m = 1;
  for (int64_t j = 0; j < k; ++j) m *= t.shape()[d + j];
  merged.push_back(m);
  merged.insert(merged.end(), t.shape().begin() + d + k, t.shape().end());
  if (!need_view) return t.reshape(merged);
  try {
    return t.view(merged);
  } catch (const Error&) {
    fail(fn, "assigning through ", what(), " of a ", shape_str(t.shape()), " tensor whose strides ",
         shape_str(t.strides()), " do not allow ", verb,
         " them is not supported; make it contiguous first");
  }
}

// An int64 index tensor whose every value is a valid index into a dim of size n (dim d for the
// IndexError); negative values stay negative (wrapped where they are used).
Tensor checked_indices(const Tensor& t, int64_t n, int64_t d, const char* fn) {
  Tensor idx = checked_index_tensor(t, fn);
  const int64_t* ip = idx.data_ptr<int64_t>();
  for (int64_t i = 0; i < idx.numel(); ++i) wrap_index(ip[i], n, d, fn);
  return idx;
}

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
        if (r.tensor_dim >= 0) {
          // Index tensors on adjacent dims (x[rows, cols]) broadcast together, as torch's: the
          // two dims become one of their sizes' product, indexed by row * cols_size + col.
          if (r.tensor_dim != d - 1 || t.dtype() == Dtype::Bool || r.index_is_mask)
            fail(fn,
                 "several index tensors are supported on adjacent dims and without bool masks "
                 "(x[rows, cols], x[:, rows, cols]); index one dim at a time otherwise");
          const int64_t n0 = out.shape()[d - 1], n1 = out.shape()[d];
          const Tensor cur = checked_indices(t, n1, d, fn);
          const Tensor prev = r.index.reshape(r.index_shape);
          auto wrapped = [](const Tensor& i, int64_t n) {
            return where(i < Scalar(0), i + Scalar(n), i);
          };
          const Tensor lin = wrapped(prev, n0) * Scalar(n1) + wrapped(cur, n1);
          out = merge_dims(
              out, d - 1, 2, need_view, fn,
              [d] {
                return "index tensors on dims " + std::to_string(d - 1) + " and " +
                       std::to_string(d);
              },
              "merging");
          r.index = lin.reshape({-1}).contiguous();
          r.index_shape = lin.shape();
          break;  // the merged dim is still r.tensor_dim; d stays after it
        }
        if (t.dtype() == Dtype::Bool) {
          if (t.dim() == 0) fail(fn, "indexing with a 0-dim bool tensor is not supported");
          const int64_t k = t.dim();
          for (int64_t j = 0; j < k; ++j)
            if (t.shape()[j] != out.shape()[d + j])
              throw IndexError(detail::msg(
                  fn, "the shape of the mask ", shape_str(t.shape()), " at index ", j,
                  " does not match the shape of the indexed tensor ", shape_str(out.shape())));
          if (k > 1)  // flatten the k masked dims into one
            out = merge_dims(
                out, d, k, need_view, fn,
                [k] { return "a bool mask over " + std::to_string(k) + " dims"; }, "flattening");
          r.index = detail::true_positions(t, fn);
          r.index_shape = {r.index.numel()};
          r.index_is_mask = true;
        } else {
          r.index = checked_indices(t, out.shape()[d], d, fn).reshape({-1});
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

// The kernel that moves elements of t's dtype between 1-D tensors on t's device (index_move).
backend::IndexMoveFn* pick_move(const char* fn, const Tensor& t) {
  return backend::pick(fn, t.device(), t.dtype(), backend::cpu::index_move,
                       backend::cuda::index_move);
}

// Along dim d of dst and src (of one rank, equal in every other dim): dst[ip[i]] = src[i] (Put),
// dst[i] = src[ip[i]] (Take) or dst[ip[i]] += src[i] (Add), each index moving an element (1-D)
// or the slice of the other dims (backend::IndexMove), read and written where they lie: advanced
// indexing (x[idx], x[mask] = v and their gradients) without a copy_ per slice. The indices are
// checked already; negative ones are wrapped. The kernel is dst's (device, dtype)'s; src must be
// on dst's device.
void move(const char* fn, backend::IndexMoveOp op, const Tensor& dst, const Tensor& src, int64_t d,
          const int64_t* ip, int64_t n, int64_t size) {
  const auto kernel = pick_move(fn, dst);
  if (src.dtype() != dst.dtype())
    fail("index", "internal: moving ", dtype_name(src.dtype()), " elements into ",
         dtype_name(dst.dtype()));
  detail::check_same_device(fn, {&dst, &src});
  Shape slice, dst_strides, src_strides;
  for (int64_t j = 0; j < dst.dim(); ++j)
    if (j != d) {
      slice.push_back(dst.shape()[j]);
      dst_strides.push_back(dst.strides()[j]);
      src_strides.push_back(src.strides()[j]);
    }
  kernel({op, dst.device_data(), dst.strides()[d], src.device_data(), src.strides()[d], ip, n, size,
          &slice, &dst_strides, &src_strides});
}

// The shape x[indices] has: the view's shape with the index dim replaced by index_shape.
Shape indexed_shape(const Indexed& ix) {
  Shape s(ix.view.shape().begin(), ix.view.shape().begin() + ix.tensor_dim);
  s.insert(s.end(), ix.index_shape.begin(), ix.index_shape.end());
  s.insert(s.end(), ix.view.shape().begin() + ix.tensor_dim + 1, ix.view.shape().end());
  return s;
}

}  // namespace

Tensor detail::true_positions(const Tensor& mask, const char* fn) {
  const auto positions = backend::pick(fn, mask.device(), Dtype::Bool, backend::cpu::mask_positions,
                                       backend::cuda::mask_positions);
  const Tensor m = mask.contiguous();
  const bool* mp = static_cast<const bool*>(m.device_data());
  const int64_t count = positions({mp, m.numel(), nullptr});  // counted, then written
  Tensor idx = detail::make_tensor(fn, {count}, Dtype::Int64, /*zero=*/false);
  positions({mp, m.numel(), static_cast<int64_t*>(idx.device_data())});
  return idx;
}

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
  pick_move("index", v);  // a device or dtype without it: before allocating
  Tensor out = detail::make_tensor("index", sz, dtype(), /*zero=*/false);  // every slice written
  {
    NoGradGuard no_grad;
    move("index", backend::IndexMoveOp::Take, out, v, d, ix.index.data_ptr<int64_t>(),
         ix.index.numel(), n);
  }
  // The gradient of each picked slice is added back where it came from (repeats add up).
  out = detail::record(out, "IndexBackward0", {&v},
                       [in_shape = v.shape(), d, n](const Node& node, const Tensor& g) {
                         const Tensor idx = node.saved_tensor(0);
                         Tensor z = zeros(in_shape, g.dtype());
                         move("index", backend::IndexMoveOp::Add, z, g, d, idx.data_ptr<int64_t>(),
                              idx.numel(), n);
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
    const Tensor ve = value.to(dtype()).expand(result).reshape(flat);
    move("index_put_", backend::IndexMoveOp::Put, v, ve, d, ix.index.data_ptr<int64_t>(),
         ix.index.numel(), n);
    detail::bump_version(*this);
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
          Tensor picked = detail::make_tensor("index_put_", flat, Dtype::Float32, /*zero=*/false);
          move("index_put_", backend::IndexMoveOp::Take, picked, gi.view, d, ip, m, n);
          gv = detail::sum_to(picked.view(result), vshape);
        }
        Shape zero_shape = gi.view.shape();  // a zero read everywhere: strides of 0
        zero_shape[d] = m;
        move("index_put_", backend::IndexMoveOp::Put, gi.view, zeros({}).expand(zero_shape), d, ip,
             m, n);
        return std::vector<Tensor>{gs, gv};
      });
  return *this;
}

Tensor& Tensor::index_put_(const std::vector<TensorIndex>& indices, Scalar value) {
  return index_put_(indices, detail::scalar_tensor(value, dtype()));
}

namespace {

// index_add's checks; returns the wrapped dim and *idx, the index flat and contiguous. In [0, n)
// only: torch takes no negative index here.
int64_t check_index_add(const char* fn, const Tensor& input, int64_t dim, const Tensor& index,
                        const Tensor& source, Tensor* idx) {
  if (!input.defined() || !index.defined() || !source.defined())
    fail(fn, "undefined tensor argument");
  const int64_t d = detail::wrap_dim(dim, std::max<int64_t>(input.dim(), 1), fn);
  if (index.dim() > 1 || index.dtype() != Dtype::Int64)
    throw IndexError(
        detail::msg(fn, "index must be a vector of int64, got ", detail::tensor_desc(index)));
  if (source.dtype() != input.dtype())
    fail(fn, "self (", dtype_name(input.dtype()), ") and source (", dtype_name(source.dtype()),
         ") must have the same dtype");
  Shape want = input.dim() == 0 ? Shape{1} : input.shape();
  want[d] = index.numel();
  const Shape got = source.dim() == 0 ? Shape{1} : source.shape();
  if (got != want)
    fail(fn, "source ", shape_str(source.shape()), " does not fit self ", shape_str(input.shape()),
         " with ", index.numel(), " indices along dim ", d, " (expected ", shape_str(want), ")");
  *idx = index.reshape({-1}).contiguous();
  const int64_t* ip = idx->data_ptr<int64_t>();
  const int64_t n = input.dim() == 0 ? 1 : input.shape()[d];
  for (int64_t i = 0; i < idx->numel(); ++i)
    if (ip[i] < 0 || ip[i] >= n)
      throw IndexError(
          detail::msg(fn, "index ", ip[i], " is out of range for dim ", d, " of size ", n));
  return d;
}

// self[..., idx[i], ...] += alpha * source[..., i, ...] in place (self as a 1-D view when it has
// no dims), without autograd; idx flat and contiguous.
void add_slices(const char* fn, Tensor& self, int64_t d, const Tensor& idx, const Tensor& source,
                Scalar alpha) {
  NoGradGuard no_grad;
  Tensor src = source.impl()->storage == self.impl()->storage ? source.clone() : source;
  if (alpha.to_double() != 1.0) src = (src * alpha).to(self.dtype());
  Tensor dst = self.dim() == 0 ? self.view({1}) : self;
  if (src.dim() == 0) src = src.view({1});
  move(fn, backend::IndexMoveOp::Add, dst, src, d, idx.data_ptr<int64_t>(), idx.numel(),
       dst.shape()[d]);
}

// The gradients of index_add: the input's is the output's, the source's the output's slices at
// the index's positions (times alpha).
std::vector<Tensor> index_add_grads(const Node& n, const Tensor& g, int64_t d, Scalar alpha,
                                    const Shape& source_shape) {
  Tensor gs;
  if (n.needs_input_grad(1)) {
    const Tensor idx = n.saved_tensor(0);
    gs = (g.dim() == 0 ? g.view({1}) : g).index_select(d, idx);
    if (alpha.to_double() != 1.0) gs = gs * alpha;
    gs = gs.reshape(source_shape);
  }
  return {n.needs_input_grad(0) ? g : Tensor(), gs};
}

}  // namespace

Tensor index_add(const Tensor& input, int64_t dim, const Tensor& index, const Tensor& source,
                 Scalar alpha) {
  Tensor idx;
  const int64_t d = check_index_add("index_add", input, dim, index, source, &idx);
  pick_move("index_add", input);
  Tensor out;
  {
    NoGradGuard no_grad;
    out = input.clone();
  }
  add_slices("index_add", out, d, idx, source, alpha);
  return detail::record(out, "IndexAddBackward0", {&input, &source},
                        [d, alpha, ss = source.shape()](const Node& n, const Tensor& g) {
                          return index_add_grads(n, g, d, alpha, ss);
                        },
                        {idx});
}

Tensor& index_add_(Tensor& input, int64_t dim, const Tensor& index, const Tensor& source,
                   Scalar alpha) {
  detail::check_inplace(input, "index_add_");
  Tensor idx;
  const int64_t d = check_index_add("index_add_", input, dim, index, source, &idx);
  pick_move("index_add_", input);
  add_slices("index_add_", input, d, idx, source, alpha);
  detail::bump_version(input);
  detail::record_inplace(input, "IndexAddBackward0", {&input, &source},
                         [d, alpha, ss = source.shape()](const Node& n, const Tensor& g) {
                           return index_add_grads(n, g, d, alpha, ss);
                         },
                         {idx});
  return input;
}

}  // namespace attn

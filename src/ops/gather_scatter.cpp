// gather, scatter, scatter_add (with their gradients; the element loops are the gather_scatter
// kernels of src/backend/index_kernels.h) and split / chunk / unbind (views).
#include <attn/autograd.h>
#include <attn/ops.h>

#include <optional>
#include <string>

#include "../backend/index_kernels.h"
#include "../tensor/internal.h"

namespace attn {

using detail::fail;

namespace {

// Checks torch's rules for gather / scatter: index is int64 with self's number of dims (a 0-dim
// self takes a 0- or 1-dim index), index.size(d) <= src.size(d) for every d, and
// index.size(d) <= self.size(d) for d != dim. Returns the wrapped dim.
int64_t check_index(const char* fn, const Tensor& self, int64_t dim, const Tensor& index,
                    const Tensor* src) {
  if (!self.defined() || !index.defined() || (src && !src->defined()))
    fail(fn, "undefined tensor argument");
  const int64_t d = detail::wrap_dim(dim, self.dim(), fn);
  if (index.dtype() != Dtype::Int64)
    fail(fn, "expected dtype int64 for index, got ", dtype_name(index.dtype()));
  if (std::max<int64_t>(index.dim(), 1) != std::max<int64_t>(self.dim(), 1))
    fail(fn, "index ", shape_str(index.shape()), " should have the same number of dimensions as ",
         "self ", shape_str(self.shape()));
  if (src && index.numel() > 0 &&
      std::max<int64_t>(src->dim(), 1) != std::max<int64_t>(index.dim(), 1))
    fail(fn, "index ", shape_str(index.shape()), " should have the same number of dimensions as ",
         "src ", shape_str(src->shape()));
  for (int64_t i = 0; i < index.dim() && index.numel() > 0; ++i) {
    if (i != d && self.dim() > 0 && index.shape()[i] > self.shape()[i])
      fail(fn, "size of index ", shape_str(index.shape()), " does not match self ",
           shape_str(self.shape()), " apart from dimension ", d);
    if (src && src->dim() > 0 && index.shape()[i] > src->shape()[i])
      fail(fn, "size of index ", shape_str(index.shape()), " exceeds src ", shape_str(src->shape()),
           " at dimension ", i);
  }
  return d;
}

// Runs the gather / scatter kernel of `op` for every element of `index` (checked by
// check_index): `self` is read (gather) or written (scatter: a contiguous clone), `other` is
// written (gather's out) or read (scatter's src, of self's dtype) at the index element's
// position. An index outside self's size along d is torch's RuntimeError, raised after the
// elements before it are moved (into a result the caller then drops).
void gather_scatter(backend::GatherScatterFn* kernel, backend::GatherScatterOp op, const char* fn,
                    const Tensor& self, int64_t d, const Tensor& index, const Tensor& other) {
  if (index.numel() == 0) return;
  const Shape one{1};
  const Shape zero{0};
  const Shape& ish = index.dim() == 0 ? one : index.shape();
  const Shape& ist = index.dim() == 0 ? zero : index.strides();
  const Shape& ost = other.dim() == 0 ? zero : other.strides();
  const Shape& sst = self.dim() == 0 ? zero : self.strides();
  const int64_t limit = self.dim() == 0 ? 1 : self.shape()[d];
  const auto storage = [](const Tensor& t) { return t.impl()->storage->data; };
  const std::optional<int64_t> bad =
      kernel({op, &ish, static_cast<const int64_t*>(storage(index)), index.storage_offset(), &ist,
              storage(self), self.storage_offset(), &sst, storage(other), other.storage_offset(),
              &ost, d, limit});
  if (bad)  // torch takes no negative indices here (RuntimeError)
    fail(fn, "index ", *bad, " is out of bounds for dimension ", d, " with size ", limit);
}

// The kernel for self's device and dtype, once index (and src) are on self's device.
backend::GatherScatterFn* pick_gather_scatter(const char* fn, const Tensor& self,
                                              const Tensor& index, const Tensor* src = nullptr) {
  detail::check_same_device(fn, {&self, &index, src ? src : &index});
  return backend::pick(fn, self.device(), self.dtype(), backend::cpu::gather_scatter,
                       backend::cuda::gather_scatter);
}

// Writes into `out` (contiguous, self's dtype) in place: the scatter family's common body.
void scatter_into(backend::GatherScatterFn* kernel, const char* fn, Tensor& out, int64_t d,
                  const Tensor& index, const Tensor& src_in, bool add) {
  Tensor src = src_in.to(out.dtype());
  gather_scatter(kernel,
                 add ? backend::GatherScatterOp::ScatterAdd : backend::GatherScatterOp::Scatter, fn,
                 out, d, index, src);
}

}  // namespace

Tensor Tensor::gather(int64_t dim, const Tensor& index) const {
  const int64_t d = check_index("gather", *this, dim, index, nullptr);
  const auto kernel = pick_gather_scatter("gather", *this, index);
  Tensor out = detail::make_tensor("gather", index.shape(), dtype());
  gather_scatter(kernel, backend::GatherScatterOp::Gather, "gather", *this, d, index, out);
  if (dtype() != Dtype::Float32) return out;
  return detail::record(
      out, "GatherBackward0", {this},
      [in_shape = shape(), d](const Node& n, const Tensor& g) {
        return std::vector<Tensor>{zeros(in_shape).scatter_add(d, n.saved_tensor(0), g)};
      },
      {index});
}

Tensor Tensor::scatter(int64_t dim, const Tensor& index, const Tensor& src) const {
  const int64_t d = check_index("scatter", *this, dim, index, &src);
  if (src.dtype() != dtype())
    fail("scatter", "expected self and src to have the same dtype, got ", dtype_name(dtype()),
         " and ", dtype_name(src.dtype()));
  const auto kernel = pick_gather_scatter("scatter", *this, index, &src);
  Tensor out;
  {
    NoGradGuard no_grad;
    out = contiguous().clone();
    scatter_into(kernel, "scatter", out, d, index, src, false);
  }
  if (dtype() != Dtype::Float32) return out;
  return detail::record(out, "ScatterBackward0", {this, &src},
                        [d](const Node& n, const Tensor& g) {
                          const Tensor idx = n.saved_tensor(0);
                          return std::vector<Tensor>{
                              n.needs_input_grad(0) ? g.scatter(d, idx, Scalar(0.0)) : Tensor(),
                              n.needs_input_grad(1) ? g.gather(d, idx) : Tensor()};
                        },
                        {index});
}

Tensor Tensor::scatter(int64_t dim, const Tensor& index, Scalar value) const {
  const int64_t d = check_index("scatter", *this, dim, index, nullptr);
  const auto kernel = pick_gather_scatter("scatter", *this, index);
  Tensor out;
  {
    NoGradGuard no_grad;
    out = contiguous().clone();
    Tensor v = detail::scalar_tensor(value, dtype()).expand(index.shape());
    scatter_into(kernel, "scatter", out, d, index, v, false);
  }
  if (dtype() != Dtype::Float32) return out;
  return detail::record(out, "ScatterBackward1", {this},
                        [d](const Node& n, const Tensor& g) {
                          return std::vector<Tensor>{g.scatter(d, n.saved_tensor(0), Scalar(0.0))};
                        },
                        {index});
}

Tensor Tensor::scatter_add(int64_t dim, const Tensor& index, const Tensor& src) const {
  const int64_t d = check_index("scatter_add", *this, dim, index, &src);
  if (src.dtype() != dtype())
    fail("scatter_add", "expected self and src to have the same dtype, got ", dtype_name(dtype()),
         " and ", dtype_name(src.dtype()));
  const auto kernel = pick_gather_scatter("scatter_add", *this, index, &src);
  Tensor out;
  {
    NoGradGuard no_grad;
    out = contiguous().clone();
    scatter_into(kernel, "scatter_add", out, d, index, src, true);
  }
  if (dtype() != Dtype::Float32) return out;
  return detail::record(out, "ScatterAddBackward0", {this, &src},
                        [d](const Node& n, const Tensor& g) {
                          return std::vector<Tensor>{
                              n.needs_input_grad(0) ? g : Tensor(),
                              n.needs_input_grad(1) ? g.gather(d, n.saved_tensor(0)) : Tensor()};
                        },
                        {index});
}

// The in-place forms: the out-of-place result copied back (so autograd sees a copy_ of a result
// that depends on the old self, src and index).
Tensor& Tensor::scatter_(int64_t dim, const Tensor& index, const Tensor& src) {
  detail::check_inplace(*this, "scatter_");
  return copy_(scatter(dim, index, src));
}
Tensor& Tensor::scatter_(int64_t dim, const Tensor& index, Scalar value) {
  detail::check_inplace(*this, "scatter_");
  return copy_(scatter(dim, index, value));
}
Tensor& Tensor::scatter_add_(int64_t dim, const Tensor& index, const Tensor& src) {
  detail::check_inplace(*this, "scatter_add_");
  return copy_(scatter_add(dim, index, src));
}

// ---- splitting ----------------------------------------------------------------------------------

std::vector<Tensor> Tensor::split(int64_t split_size, int64_t dim) const {
  if (!defined()) fail("split", "undefined tensor argument");
  if (this->dim() == 0) fail("split", "expects at least a 1-dimensional tensor");
  const int64_t d = detail::wrap_dim(dim, this->dim(), "split");
  const int64_t n = shape()[d];
  if (split_size < 0)
    fail("split", "split_size can only be a non-negative integer, got ", split_size);
  if (split_size == 0 && n != 0)
    fail("split", "split_size can only be 0 if dimension size is 0, but got dimension size of ", n);
  std::vector<Tensor> out;
  if (split_size == 0) return {*this};
  for (int64_t s = 0; s < n || (n == 0 && out.empty()); s += split_size)
    out.push_back(narrow(d, s, std::min(split_size, n - s)));
  return out;
}

std::vector<Tensor> Tensor::split(const Shape& sizes, int64_t dim) const {
  if (!defined()) fail("split", "undefined tensor argument");
  if (this->dim() == 0) fail("split", "expects at least a 1-dimensional tensor");
  const int64_t d = detail::wrap_dim(dim, this->dim(), "split");
  int64_t total = 0;
  for (int64_t s : sizes) {
    if (s < 0) fail("split", "split sizes ", shape_str(sizes), " contain a negative size");
    total += s;
  }
  if (total != shape()[d])
    fail("split", "split sizes ", shape_str(sizes), " must sum exactly to the size ", shape()[d],
         " of dimension ", d, " of ", shape_str(shape()));
  std::vector<Tensor> out;
  int64_t start = 0;
  for (int64_t s : sizes) {
    out.push_back(narrow(d, start, s));
    start += s;
  }
  return out;
}

std::vector<Tensor> Tensor::chunk(int64_t chunks, int64_t dim) const {
  if (!defined()) fail("chunk", "undefined tensor argument");
  if (this->dim() == 0) fail("chunk", "expects at least a 1-dimensional tensor");
  if (chunks <= 0) fail("chunk", "number of chunks must be greater than 0, got ", chunks);
  const int64_t d = detail::wrap_dim(dim, this->dim(), "chunk");
  const int64_t n = shape()[d];
  const int64_t size = (n + chunks - 1) / chunks;
  if (size == 0 && n == 0) {  // torch: `chunks` empty pieces
    std::vector<Tensor> out;
    for (int64_t i = 0; i < chunks; ++i) out.push_back(narrow(d, 0, 0));
    return out;
  }
  return split(size, d);
}

std::vector<Tensor> Tensor::unbind(int64_t dim) const {
  if (!defined()) fail("unbind", "undefined tensor argument");
  if (this->dim() == 0) fail("unbind", "dimension specified as 0 but tensor has no dimensions");
  const int64_t d = detail::wrap_dim(dim, this->dim(), "unbind");
  std::vector<Tensor> out;
  for (int64_t i = 0; i < shape()[d]; ++i) out.push_back(select(d, i));
  return out;
}

Tensor gather(const Tensor& t, int64_t dim, const Tensor& index) { return t.gather(dim, index); }
Tensor scatter(const Tensor& t, int64_t dim, const Tensor& index, const Tensor& src) {
  return t.scatter(dim, index, src);
}
Tensor scatter(const Tensor& t, int64_t dim, const Tensor& index, Scalar value) {
  return t.scatter(dim, index, value);
}
Tensor scatter_add(const Tensor& t, int64_t dim, const Tensor& index, const Tensor& src) {
  return t.scatter_add(dim, index, src);
}
std::vector<Tensor> split(const Tensor& t, int64_t split_size, int64_t dim) {
  return t.split(split_size, dim);
}
std::vector<Tensor> split(const Tensor& t, const Shape& sizes, int64_t dim) {
  return t.split(sizes, dim);
}
std::vector<Tensor> chunk(const Tensor& t, int64_t chunks, int64_t dim) {
  return t.chunk(chunks, dim);
}
std::vector<Tensor> unbind(const Tensor& t, int64_t dim) { return t.unbind(dim); }

}  // namespace attn

// ---- index_select and the small math functions of attn/ops.h -----------------------------------

namespace attn {

Tensor Tensor::index_select(int64_t dim, const Tensor& index) const {
  if (!defined() || !index.defined()) fail("index_select", "undefined tensor argument");
  if (index.dtype() != Dtype::Int64)
    fail("index_select", "expected dtype int64 for index, got ", dtype_name(index.dtype()));
  if (index.dim() > 1)
    throw IndexError(detail::msg("index_select", "index must be a vector (0 or 1 dims), got ",
                                 shape_str(index.shape())));
  if (this->dim() == 0) {
    if (index.numel() != 1 || index.reshape({}).item<int64_t>() != 0)
      throw IndexError(detail::msg("index_select", "index out of range for a 0-dim tensor"));
    return clone();
  }
  const int64_t d = detail::wrap_dim(dim, this->dim(), "index_select");
  const int64_t n = shape()[d];
  Tensor idx = index.reshape({-1}).contiguous();
  const int64_t* ip = idx.data_ptr<int64_t>();
  for (int64_t i = 0; i < idx.numel(); ++i)
    if (ip[i] < 0 || ip[i] >= n)  // torch: no negative indices here (RuntimeError)
      fail("index_select", "index ", ip[i], " is out of range for dimension ", d, " of size ", n);
  std::vector<TensorIndex> key(d, indexing::Slice());
  key.emplace_back(idx);
  return this->index(key);
}

Tensor nonzero(const Tensor& t) {
  if (!t.defined()) fail("nonzero", "undefined tensor argument");
  Tensor lin;
  {
    NoGradGuard no_grad;
    lin = detail::true_positions(t.dtype() == Dtype::Bool ? t : t != Scalar(0), "nonzero");
  }
  const int64_t count = lin.numel(), nd = t.dim();
  Tensor out = detail::make_tensor("nonzero", {count, nd}, Dtype::Int64, /*zero=*/false);
  // Each flat position unravelled into its row of coordinates.
  const int64_t* lp = lin.data_ptr<int64_t>();
  int64_t* op = out.data_ptr<int64_t>();
  const Shape& s = t.shape();
  for (int64_t i = 0; i < count; ++i) {
    int64_t k = lp[i];
    for (int64_t d = nd - 1; d >= 0; --d) {
      op[i * nd + d] = k % s[d];
      k /= s[d];
    }
  }
  return out;
}

Tensor Tensor::square() const { return pow(Scalar(2)); }

Tensor index_select(const Tensor& t, int64_t dim, const Tensor& index) {
  return t.index_select(dim, index);
}
Tensor rsqrt(const Tensor& t) { return t.rsqrt(); }
Tensor sigmoid(const Tensor& t) { return t.sigmoid(); }
Tensor relu(const Tensor& t) { return t.relu(); }
Tensor neg(const Tensor& t) { return t.neg(); }
Tensor square(const Tensor& t) { return t.square(); }

Tensor bmm(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) fail("bmm", "undefined tensor argument");
  if (a.dim() != 3 || b.dim() != 3)
    fail("bmm", "batch1 must be a 3D tensor and batch2 too, got ", shape_str(a.shape()), " and ",
         shape_str(b.shape()));
  if (a.shape()[0] != b.shape()[0] || a.shape()[2] != b.shape()[1])
    fail("bmm", "expected (b, n, m) and (b, m, p), got ", shape_str(a.shape()), " and ",
         shape_str(b.shape()));
  return matmul(a, b);
}

}  // namespace attn

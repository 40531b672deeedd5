// gather, scatter, scatter_add (with their gradients) and split / chunk / unbind (views).
#include <attn/autograd.h>
#include <attn/ops.h>

#include <string>

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

// Calls f(self_offset, index_position_offset...) for every element of `index`: off[0] is the
// offset of that element in `index`, off[1] in `other` (src or out, read at the same position),
// and `pick` the index value, checked against self's size along d.
template <typename F>
void for_each_index(const char* fn, const Tensor& self, int64_t d, const Tensor& index,
                    const Tensor& other, F f) {
  if (index.numel() == 0) return;
  const int64_t nd = index.dim();
  const Shape one{1};
  const Shape zero{0};
  const Shape& ish = nd == 0 ? one : index.shape();
  const Shape& ist = nd == 0 ? zero : index.strides();
  const Shape& ost = other.dim() == 0 ? zero : other.strides();
  const Shape& sst = self.dim() == 0 ? zero : self.strides();
  const int64_t limit = self.dim() == 0 ? 1 : self.shape()[d];
  const int64_t* ip = detail::base_ptr<int64_t>(index);
  const int64_t rank = std::max<int64_t>(nd, 1);
  std::vector<int64_t> coord(rank, 0);
  while (true) {
    int64_t io = index.storage_offset(), oo = other.storage_offset(), so = self.storage_offset();
    for (int64_t i = 0; i < rank; ++i) {
      io += coord[i] * ist[i];
      oo += coord[i] * ost[i];
      if (i != d) so += coord[i] * sst[i];
    }
    const int64_t k = ip[io];
    if (k < 0 || k >= limit)  // torch takes no negative indices here (RuntimeError)
      fail(fn, "index ", k, " is out of bounds for dimension ", d, " with size ", limit);
    f(so + k * sst[d], oo);
    int64_t i = rank - 1;
    for (; i >= 0; --i) {
      if (++coord[i] < ish[i]) break;
      coord[i] = 0;
    }
    if (i < 0) return;
  }
}

template <typename T>
void gather_kernel(const Tensor& self, int64_t d, const Tensor& index, const Tensor& out) {
  const T* ps = detail::base_ptr<T>(self);
  T* po = detail::base_ptr<T>(out);
  for_each_index("gather", self, d, index, out, [&](int64_t so, int64_t oo) { po[oo] = ps[so]; });
}

// out (a clone of self) gets src's elements (or `value`) at the indexed positions; `add` sums.
template <typename T>
void scatter_kernel(const char* fn, const Tensor& out, int64_t d, const Tensor& index,
                    const Tensor& src, bool add) {
  T* po = detail::base_ptr<T>(out);
  const T* ps = detail::base_ptr<T>(src);
  for_each_index(fn, out, d, index, src, [&](int64_t so, int64_t oo) {
    if constexpr (std::is_same_v<T, bool>)
      po[so] = add ? (po[so] || ps[oo]) : ps[oo];
    else if constexpr (detail::is_half_type<T>)  // added in float32, rounded each time (torch)
      po[so] = add ? T(float(po[so]) + float(ps[oo])) : ps[oo];
    else
      po[so] = add ? T(po[so] + ps[oo]) : ps[oo];
  });
}

// Writes into `out` (contiguous, self's dtype) in place: the scatter family's common body.
void scatter_into(const char* fn, Tensor& out, int64_t d, const Tensor& index, const Tensor& src_in,
                  bool add) {
  Tensor src = src_in.to(out.dtype());
  detail::dispatch_dtype(out.dtype(),
                         [&]<typename T>() { scatter_kernel<T>(fn, out, d, index, src, add); });
}

}  // namespace

Tensor Tensor::gather(int64_t dim, const Tensor& index) const {
  const int64_t d = check_index("gather", *this, dim, index, nullptr);
  Tensor out = detail::make_tensor("gather", index.shape(), dtype());
  detail::dispatch_dtype(dtype(), [&]<typename T>() { gather_kernel<T>(*this, d, index, out); });
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
  Tensor out;
  {
    NoGradGuard no_grad;
    out = contiguous().clone();
    scatter_into("scatter", out, d, index, src, false);
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
  Tensor out;
  {
    NoGradGuard no_grad;
    out = contiguous().clone();
    Tensor v = detail::scalar_tensor(value, dtype()).expand(index.shape());
    scatter_into("scatter", out, d, index, v, false);
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
  Tensor out;
  {
    NoGradGuard no_grad;
    out = contiguous().clone();
    scatter_into("scatter_add", out, d, index, src, true);
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
  detail::check_not_reduced(a, "bmm");
  detail::check_not_reduced(b, "bmm");
  if (a.dim() != 3 || b.dim() != 3)
    fail("bmm", "batch1 must be a 3D tensor and batch2 too, got ", shape_str(a.shape()), " and ",
         shape_str(b.shape()));
  if (a.shape()[0] != b.shape()[0] || a.shape()[2] != b.shape()[1])
    fail("bmm", "expected (b, n, m) and (b, m, p), got ", shape_str(a.shape()), " and ",
         shape_str(b.shape()));
  return matmul(a, b);
}

}  // namespace attn

// Sorting and selection: sort, argsort, topk, argmin and argmax over the flattened tensor.
//
// Rows are ordered by the kernels of sort_rows and topk_rows (src/backend/index_kernels.h; on the
// CPU src/backend/cpu/sort.cpp) with the same standard algorithms, comparators and tie handling as
// PyTorch's CPU kernels, so that indices agree with torch's even where values tie.
#include <attn/autograd.h>
#include <attn/ops.h>

#include <tuple>

#include "../backend/index_kernels.h"
#include "../tensor/internal.h"

namespace attn {

using detail::fail;

namespace {

// The gradient of values picked along dim at `indices` (sort, topk): scattered back into zeros.
BackwardFn pick_backward(const Shape& in_shape, int64_t d) {
  return [in_shape, d](const Node& n, const Tensor& g) {
    Tensor idx = n.saved_tensor(0);
    if (in_shape.empty()) return std::vector<Tensor>{g.reshape({})};
    return std::vector<Tensor>{zeros(in_shape).scatter_add(d, idx, g)};
  };
}

// The first `keep` (value, position) pairs of every row of t along dim, ordered by the kernel of
// the table (sort_rows or topk_rows) for t's device and dtype; both results have size keep along
// dim.
std::tuple<Tensor, Tensor> select_rows(const Tensor& t, int64_t dim, int64_t keep, const char* fn,
                                       const backend::Kernels<backend::SortRowsFn>& cpu,
                                       const backend::Kernels<backend::SortRowsFn>& cuda,
                                       bool descending, bool stable, bool sorted) {
  const auto kernel = backend::pick(fn, t.device(), t.dtype(), cpu, cuda);
  Shape out_shape = t.shape();
  const int64_t d = detail::wrap_dim(dim, t.dim(), fn);
  if (t.dim() > 0) out_shape[d] = keep;
  Tensor values = detail::make_tensor(fn, out_shape, t.dtype());
  Tensor indices = detail::make_tensor(fn, out_shape, Dtype::Int64);
  NoGradGuard no_grad;
  if (t.dim() == 0) {
    values.copy_(t);
    return {values, indices};
  }
  // The rows contiguous, ordered into contiguous buffers, copied into the results' views.
  Tensor src = t.transpose(d, -1).contiguous();
  const int64_t n = t.shape()[d];
  const int64_t rows = n == 0 ? 0 : src.numel() / n;
  Tensor vt = values.transpose(d, -1), it = indices.transpose(d, -1);
  Tensor vbuf = detail::make_tensor(vt.shape(), t.dtype(), false);
  Tensor ibuf = detail::make_tensor(it.shape(), Dtype::Int64, false);
  kernel({src.device_data(), vbuf.device_data(), static_cast<int64_t*>(ibuf.device_data()), rows, n,
          keep, descending, stable, sorted});
  vt.copy_(vbuf);
  it.copy_(ibuf);
  return {values, indices};
}

}  // namespace

std::tuple<Tensor, Tensor> Tensor::sort(int64_t dim, bool descending, bool stable) const {
  if (!defined()) fail("sort", "undefined tensor argument");
  if (is_reduced_float(dtype())) {  // the order is float32's; the values go back exactly
    auto [v, i] = to(Dtype::Float32).sort(dim, descending, stable);
    return {v.to(dtype()), i};
  }
  const int64_t d = detail::wrap_dim(dim, this->dim(), "sort");
  const int64_t n = this->dim() == 0 ? 1 : shape()[d];
  auto [v, i] = select_rows(*this, dim, n, "sort", backend::cpu::sort_rows,
                            backend::cuda::sort_rows, descending, stable, false);
  if (dtype() == Dtype::Float32)
    v = detail::record(v, "SortBackward0", {this}, pick_backward(shape(), d), {i});
  return {v, i};
}

Tensor Tensor::argsort(int64_t dim, bool descending, bool stable) const {
  NoGradGuard no_grad;
  return std::get<1>(sort(dim, descending, stable));
}

std::tuple<Tensor, Tensor> Tensor::topk(int64_t k, int64_t dim, bool largest, bool sorted) const {
  if (!defined()) fail("topk", "undefined tensor argument");
  if (is_reduced_float(dtype())) {
    auto [v, i] = to(Dtype::Float32).topk(k, dim, largest, sorted);
    return {v.to(dtype()), i};
  }
  const int64_t d = detail::wrap_dim(dim, this->dim(), "topk");
  const int64_t n = this->dim() == 0 ? 1 : shape()[d];
  if (k < 0 || k > n)  // torch: RuntimeError
    fail("topk", "selected index k (", k, ") out of range for dimension ", d, " of size ", n,
         " (shape ", shape_str(shape()), ")");
  auto [v, i] = select_rows(*this, dim, k, "topk", backend::cpu::topk_rows,
                            backend::cuda::topk_rows, largest, false, sorted);
  if (dtype() == Dtype::Float32)
    v = detail::record(v, "TopkBackward0", {this}, pick_backward(shape(), d), {i});
  return {v, i};
}

Tensor Tensor::argmax() const {
  if (numel() == 0) fail("argmax", "expected a non-empty tensor, got ", shape_str(shape()));
  return reshape({-1}).argmax(0, false);
}
Tensor Tensor::argmin() const {
  if (numel() == 0) fail("argmin", "expected a non-empty tensor, got ", shape_str(shape()));
  return reshape({-1}).argmin(0, false);
}
Tensor Tensor::argmin(int64_t dim, bool keepdim) const {
  if (!defined()) fail("argmin", "undefined tensor argument");
  if (dtype() == Dtype::Bool) fail("argmin", "not implemented for bool tensors");
  NoGradGuard no_grad;
  const int64_t d = detail::wrap_dim(dim, this->dim(), "argmin");
  if (this->dim() > 0 && shape()[d] == 0)
    throw IndexError(detail::msg("argmin", "expected reduction dim ", d, " of ", shape_str(shape()),
                                 " to have a non-zero size"));
  return std::get<1>(min(dim, keepdim));
}

std::tuple<Tensor, Tensor> topk(const Tensor& t, int64_t k, int64_t dim, bool largest,
                                bool sorted) {
  return t.topk(k, dim, largest, sorted);
}
std::tuple<Tensor, Tensor> sort(const Tensor& t, int64_t dim, bool descending, bool stable) {
  return t.sort(dim, descending, stable);
}
Tensor argsort(const Tensor& t, int64_t dim, bool descending, bool stable) {
  return t.argsort(dim, descending, stable);
}
Tensor argmax(const Tensor& t) { return t.argmax(); }
Tensor argmax(const Tensor& t, int64_t dim, bool keepdim) { return t.argmax(dim, keepdim); }
Tensor argmin(const Tensor& t) { return t.argmin(); }
Tensor argmin(const Tensor& t, int64_t dim, bool keepdim) { return t.argmin(dim, keepdim); }

}  // namespace attn

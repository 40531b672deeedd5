// Sorting and selection: sort, argsort, topk, argmin and argmax over the flattened tensor.
//
// Rows are ordered with the same standard algorithms, comparators and tie handling as PyTorch's CPU
// kernels (libstdc++'s std::sort / std::stable_sort for sort, partial_sort or nth_element + sort
// for topk, NaN above every number), so that indices agree with torch's even where values tie.
#include <attn/autograd.h>
#include <attn/ops.h>

#include <algorithm>
#include <cmath>
#include <utility>

#include "../tensor/internal.h"

namespace attn {

using detail::fail;

namespace {

template <typename T>
bool is_nan_v(T x) {
  if constexpr (std::is_same_v<T, float>)
    return std::isnan(x);
  else
    return false;
}

// "a comes before b": descending puts NaN first, ascending last (torch's comparators).
template <typename T>
struct Before {
  bool descending;
  bool operator()(const std::pair<T, int64_t>& a, const std::pair<T, int64_t>& b) const {
    if (descending) return (is_nan_v(a.first) && !is_nan_v(b.first)) || a.first > b.first;
    return (!is_nan_v(a.first) && is_nan_v(b.first)) || a.first < b.first;
  }
};

// Runs `order(row)` on every row of `t` along `dim` (a vector of (value, index) pairs, index the
// position in the row) and writes the first `keep` pairs of each ordered row into (values,
// indices), whose size along dim is `keep`.
template <typename T, typename F>
void ordered_rows(const Tensor& t, int64_t d, int64_t keep, const Tensor& values,
                  const Tensor& indices, F order) {
  Tensor src = t.transpose(d, -1).contiguous();
  const int64_t n = t.dim() == 0 ? 1 : t.shape()[d];
  const int64_t rows = n == 0 ? 0 : src.numel() / n;
  Tensor vt = values.transpose(d, -1), it = indices.transpose(d, -1);  // contiguous buffers, views
  Tensor vbuf = detail::make_tensor(vt.shape(), t.dtype(), false);
  Tensor ibuf = detail::make_tensor(it.shape(), Dtype::Int64, false);
  const T* ps = src.data_ptr<T>();
  T* pv = vbuf.data_ptr<T>();
  int64_t* pi = ibuf.data_ptr<int64_t>();
  std::vector<std::pair<T, int64_t>> row(n);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < n; ++j) row[j] = {ps[r * n + j], j};
    order(row);
    for (int64_t j = 0; j < keep; ++j) {
      pv[r * keep + j] = row[j].first;
      pi[r * keep + j] = row[j].second;
    }
  }
  NoGradGuard no_grad;
  vt.copy_(vbuf);
  it.copy_(ibuf);
}

// The gradient of values picked along dim at `indices` (sort, topk): scattered back into zeros.
BackwardFn pick_backward(const Shape& in_shape, int64_t d) {
  return [in_shape, d](const Node& n, const Tensor& g) {
    Tensor idx = n.saved_tensor(0);
    if (in_shape.empty()) return std::vector<Tensor>{g.reshape({})};
    return std::vector<Tensor>{zeros(in_shape).scatter_add(d, idx, g)};
  };
}

template <typename F>
std::tuple<Tensor, Tensor> select_rows(const Tensor& t, int64_t dim, int64_t keep, const char* fn,
                                       F order_for_type) {
  Shape out_shape = t.shape();
  const int64_t d = detail::wrap_dim(dim, t.dim(), fn);
  if (t.dim() > 0) out_shape[d] = keep;
  Tensor values = detail::make_tensor(fn, out_shape, t.dtype());
  Tensor indices = detail::make_tensor(fn, out_shape, Dtype::Int64);
  if (t.dim() == 0) {
    NoGradGuard no_grad;
    values.copy_(t);
    return {values, indices};
  }
  switch (t.dtype()) {
    case Dtype::Float32: order_for_type(float{}, d, values, indices); break;
    case Dtype::Int64: order_for_type(int64_t{}, d, values, indices); break;
    case Dtype::Bool: order_for_type(bool{}, d, values, indices); break;
    case Dtype::BFloat16:
    case Dtype::Float16: detail::fail_reduced(t.dtype(), fn);  // sorted as float32 by the callers
  }
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
  auto [v, i] =
      select_rows(*this, dim, n, "sort", [&](auto tag, int64_t dd, Tensor& vs, Tensor& is) {
        using T = decltype(tag);
        ordered_rows<T>(*this, dd, n, vs, is, [&](std::vector<std::pair<T, int64_t>>& row) {
          if (stable)
            std::stable_sort(row.begin(), row.end(), Before<T>{descending});
          else
            std::sort(row.begin(), row.end(), Before<T>{descending});
        });
      });
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
  auto [v, i] =
      select_rows(*this, dim, k, "topk", [&](auto tag, int64_t dd, Tensor& vs, Tensor& is) {
        using T = decltype(tag);
        ordered_rows<T>(*this, dd, k, vs, is, [&](std::vector<std::pair<T, int64_t>>& row) {
          if (k == 0) return;
          const Before<T> before{largest};
          // torch's choice: a partial sort when k is small against the row, else nth_element and
          // (when sorted) a sort of the first k - 1.
          if (k * 64 <= int64_t(row.size())) {
            std::partial_sort(row.begin(), row.begin() + k, row.end(), before);
          } else {
            std::nth_element(row.begin(), row.begin() + k - 1, row.end(), before);
            if (sorted) std::sort(row.begin(), row.begin() + k - 1, before);
          }
        });
      });
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

// Reductions (sum, mean, var, max, min, argmax) and softmax.
#include <attn/autograd.h>
#include <attn/ops.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <limits>

#include "../backend/reduce_kernels.h"
#include "../tensor/internal.h"

namespace attn {

using detail::fail;

namespace {

struct Plan {
  Shape out_shape;  // with keepdim applied
  Tensor arranged;  // contiguous, reduced dims moved last: (outer, inner)
  int64_t outer = 1, inner = 1;
  bool innermost_reduced = true;  // the tensor's last dim is reduced (PyTorch's "inner" sum)
  int64_t columns = 1;            // elements of the kept dims after the last reduced dim
  // arranged is t itself, (outer / columns, inner, columns): the reduced dims are one run of a
  // contiguous CPU tensor with kept dims after it (sum(0), sum(1) of a 3-d tensor), and the kernel
  // reads each column where it lies (backend::Reduce::columns_in_rows).
  bool columns_in_rows = false;
};

// columns_ok: the caller's kernel reads columns in rows (a float32 Sum or Mean).
Plan plan(const Tensor& t, Shape dims, bool keepdim, const char* fn, bool columns_ok = false) {
  if (!t.defined()) fail(fn, "undefined tensor argument");
  NoGradGuard no_grad;  // the rearranged copy is internal, not part of the graph
  int64_t nd = t.dim();
  std::vector<bool> red(std::max<int64_t>(nd, 1), false);
  if (dims.empty())
    for (int64_t i = 0; i < nd; ++i) red[i] = true;
  for (auto d : dims) {
    int64_t w = detail::wrap_dim(d, nd, fn);
    if (nd > 0 && red[w] && !dims.empty()) {
      int count = 0;
      for (auto e : dims) count += detail::wrap_dim(e, nd, fn) == w;
      if (count > 1) fail(fn, "dim ", w, " appears multiple times in the list of dims");
    }
    if (nd > 0) red[w] = true;
  }
  Plan p;
  Shape perm, kept;
  for (int64_t i = 0; i < nd; ++i)
    if (!red[i]) {
      perm.push_back(i);
      p.outer *= t.shape()[i];
    }
  for (int64_t i = 0; i < nd; ++i)
    if (red[i]) {
      perm.push_back(i);
      p.inner *= t.shape()[i];
    }
  for (int64_t i = 0; i < nd; ++i) {
    if (!red[i])
      p.out_shape.push_back(t.shape()[i]);
    else if (keepdim)
      p.out_shape.push_back(1);
  }
  // The order of the sums follows PyTorch's, whose iterator drops dims of size 1 first: among the
  // other dims, whether the last one is reduced, and the kept elements after the last reduced one.
  std::vector<int64_t> dims_left;  // the dims of size other than 1
  for (int64_t i = 0; i < nd; ++i)
    if (t.shape()[i] != 1) dims_left.push_back(i);
  int64_t last_reduced = -1;
  for (int64_t i : dims_left)
    if (red[i]) last_reduced = i;
  p.innermost_reduced = last_reduced < 0 || last_reduced == dims_left.back();
  if (last_reduced >= 0)
    for (int64_t i = last_reduced + 1; i < nd; ++i) p.columns *= t.shape()[i];
  // The reduced dims (of those left) as one run followed by kept dims: read in place. A kept dim
  // after a reduced one and before the last reduced one splits the run.
  bool one_run = !p.innermost_reduced, reduced_seen = false;
  for (int64_t i : dims_left) {
    if (i > last_reduced) break;
    if (red[i])
      reduced_seen = true;
    else if (reduced_seen)
      one_run = false;
  }
  if (columns_ok && one_run && t.device().is_cpu()) {
    // Read in place, or for a view (an expanded gradient) from its copy in its own order: the
    // same sums as the permuted copy below gives, without one cascade call per output.
    p.columns_in_rows = true;
    p.arranged = t.contiguous();
    return p;
  }
  p.arranged = (nd == 0 ? t : t.permute(perm)).contiguous();
  return p;
}

// The reduction `op` of t over `dims` into a new float32 tensor (the kernel of its device).
Tensor reduce_float(const Tensor& t, Shape dims, bool keepdim, const char* fn,
                    backend::ReduceOp op) {
  const bool columns_ok = op == backend::ReduceOp::Sum || op == backend::ReduceOp::Mean;
  Plan p = plan(t, std::move(dims), keepdim, fn, columns_ok);
  Tensor src = p.arranged.to(Dtype::Float32);
  const auto kernel =
      backend::pick(fn, src.device(), Dtype::Float32, backend::cpu::reduce, backend::cuda::reduce);
  Tensor out = detail::make_tensor(fn, p.out_shape, Dtype::Float32);
  kernel({op, src.device_data(), out.device_data(), p.outer, p.inner, p.innermost_reduced,
          p.columns, p.columns_in_rows});
  return out;
}

}  // namespace

// ---- backward formulas of the reductions
// ----------------------------------------------------------
namespace {

// The dims a reduction over `dims` of an nd-dim tensor reduces (every dim when `dims` is empty),
// wrapped and sorted.
Shape reduced_dims(const Shape& dims, int64_t nd) {
  Shape red;
  if (dims.empty() || nd == 0) {
    for (int64_t i = 0; i < nd; ++i) red.push_back(i);
    return red;
  }
  // Invalid dims are skipped: the forward, which runs next, reports them with its own name.
  for (int64_t d : dims)
    if (d >= -nd && d < nd) red.push_back(d < 0 ? d + nd : d);
  std::sort(red.begin(), red.end());
  red.erase(std::unique(red.begin(), red.end()), red.end());
  return red;
}

// A reduction's result (or its gradient) broadcast back over the reduced dims of `in_shape`.
Tensor expand_back(const Tensor& r, const Shape& in_shape, const Shape& red, bool keepdim) {
  Tensor t = r;
  if (!keepdim)
    for (int64_t d : red) t = t.unsqueeze(d);
  return t.expand(in_shape);
}

int64_t reduced_count(const Shape& in_shape, const Shape& red) {
  int64_t n = 1;
  for (int64_t d : red) n *= in_shape[d];
  return n;
}

std::vector<Tensor> one(Tensor g) { return {std::move(g)}; }

// Sum: the gradient is copied to every reduced element; mean also divides by their count.
BackwardFn sum_backward(const Tensor& t, const Shape& dims, bool keepdim, bool mean) {
  const Shape in_shape = t.shape(), red = reduced_dims(dims, t.dim());
  const double count = double(reduced_count(in_shape, red));
  return [in_shape, red, keepdim, mean, count](const Node&, const Tensor& g) {
    Tensor e = expand_back(g, in_shape, red, keepdim);
    return one(mean ? e / count : e);
  };
}

// var = sum((x - mean)^2) / (n - correction): d/dx = 2 (x - mean) / (n - correction).
BackwardFn var_backward(const Tensor& t, const Shape& dims, bool unbiased, bool keepdim) {
  const Shape in_shape = t.shape(), red = reduced_dims(dims, t.dim());
  const double denom = double(reduced_count(in_shape, red) - (unbiased ? 1 : 0));
  return [in_shape, red, keepdim, denom](const Node& n, const Tensor& g) {
    const Tensor x = n.saved_tensor(0);
    Tensor centered = red.empty() ? x - x : x - x.mean(red, true);
    return one(expand_back(g, in_shape, red, keepdim) * centered * (2.0 / denom));
  };
}

// max() / min() / amax: the gradient is shared evenly by the elements equal to the result (NaN
// results select the NaN elements), as torch's evenly_distribute_backward and amax's backward.
BackwardFn evenly_backward(const Tensor& t, const Shape& dims, bool keepdim) {
  const Shape in_shape = t.shape(), red = reduced_dims(dims, t.dim());
  return [in_shape, red, keepdim](const Node& n, const Tensor& g) {
    const Tensor x = n.saved_tensor(0), r = expand_back(n.saved_tensor(1), in_shape, red, keepdim);
    Tensor mask = where(r.isnan(), x.isnan(), x == r).float_();
    Tensor count = red.empty() ? mask : mask.sum(red, true);
    return one(expand_back(g, in_shape, red, keepdim) * mask / count);
  };
}

// max(dim) / min(dim): the gradient goes to the selected index of each reduced row.
BackwardFn select_backward(const Tensor& t, int64_t dim, bool keepdim) {
  const Shape in_shape = t.shape();
  const int64_t nd = t.dim(), d = detail::wrap_dim(dim, nd, "max");
  return [in_shape, nd, d, keepdim](const Node& n, const Tensor& g) {
    if (nd == 0) return one(g.reshape(in_shape));
    Tensor gk = (keepdim ? g : g.unsqueeze(d)).contiguous();
    Tensor ik = n.saved_tensor(0);
    ik = (keepdim ? ik : ik.unsqueeze(d)).contiguous();
    Tensor z = zeros(in_shape);
    int64_t outer = 1, inner = 1;
    for (int64_t i = 0; i < d; ++i) outer *= in_shape[i];
    for (int64_t i = d + 1; i < nd; ++i) inner *= in_shape[i];
    const int64_t len = in_shape[d];
    const float* gp = gk.data_ptr<float>();
    const int64_t* ip = ik.data_ptr<int64_t>();
    float* zp = z.data_ptr<float>();
    for (int64_t o = 0; o < outer; ++o)
      for (int64_t i = 0; i < inner; ++i)
        zp[(o * len + ip[o * inner + i]) * inner + i] += gp[o * inner + i];
    return one(z);
  };
}

}  // namespace

Tensor Tensor::sum(Shape dims, bool keepdim) const {
  if (is_reduced_float(dtype()))  // float accumulation, one rounding (detail::widen)
    return detail::widen(*this).sum(std::move(dims), keepdim).to(dtype());
  if (dtype() != Dtype::Float32) {
    Plan p = plan(*this, std::move(dims), keepdim, "sum");
    Tensor src = p.arranged.to(Dtype::Int64);
    const auto kernel = backend::pick("sum", src.device(), Dtype::Int64, backend::cpu::reduce,
                                      backend::cuda::reduce);
    Tensor out = detail::make_tensor("sum", p.out_shape, Dtype::Int64);
    kernel({backend::ReduceOp::Sum, src.device_data(), out.device_data(), p.outer, p.inner,
            p.innermost_reduced, p.columns});
    return out;
  }
  const char* node = dims.empty() ? "SumBackward0" : "SumBackward1";
  BackwardFn backward = sum_backward(*this, dims, keepdim, false);
  return detail::record(
      reduce_float(*this, std::move(dims), keepdim, "sum", backend::ReduceOp::Sum), node, {this},
      std::move(backward));
}
Tensor Tensor::sum() const { return sum({}, false); }

Tensor Tensor::mean(Shape dims, bool keepdim) const {
  if (is_reduced_float(dtype()))
    return detail::widen(*this).mean(std::move(dims), keepdim).to(dtype());
  if (dtype() != Dtype::Float32)
    fail("mean", "could not infer output dtype: input dtype must be floating point, got ",
         dtype_name(dtype()));
  const char* node = dims.empty() ? "MeanBackward0" : "MeanBackward1";
  BackwardFn backward = sum_backward(*this, dims, keepdim, true);
  return detail::record(
      reduce_float(*this, std::move(dims), keepdim, "mean", backend::ReduceOp::Mean), node, {this},
      std::move(backward));
}
Tensor Tensor::mean() const { return mean({}, false); }

Tensor Tensor::var(Shape dims, bool unbiased, bool keepdim) const {
  if (is_reduced_float(dtype()))
    return detail::widen(*this).var(std::move(dims), unbiased, keepdim).to(dtype());
  if (dtype() != Dtype::Float32)
    fail("var", "expects a floating point tensor, got ", dtype_name(dtype()));
  BackwardFn backward = var_backward(*this, dims, unbiased, keepdim);
  return detail::record(
      reduce_float(*this, std::move(dims), keepdim, "var",
                   unbiased ? backend::ReduceOp::VarUnbiased : backend::ReduceOp::Var),
      "VarBackward0", {this}, std::move(backward), {*this});
}

namespace {

// Values and first index of the max (or min) along one dim; NaN wins, as in torch.
std::tuple<Tensor, Tensor> extreme(const Tensor& t, int64_t dim, bool keepdim, bool is_max,
                                   const char* fn) {
  int64_t d = detail::wrap_dim(dim, t.dim(), fn);
  if (t.dim() > 0 && t.shape()[d] == 0)
    throw IndexError(detail::msg(fn, "expected reduction dim ", d, " of ", shape_str(t.shape()),
                                 " to have a non-zero size"));
  if (is_reduced_float(t.dtype())) {  // exact in float32, and back
    auto [v, i] = extreme(t.to(Dtype::Float32), dim, keepdim, is_max, fn);
    return {v.to(t.dtype()), i};
  }
  Plan p = plan(t, {dim}, keepdim, fn);
  // Computed in the input's own dtype: int64 values above 2^24 would not survive float32.
  const auto kernel = backend::pick(fn, p.arranged.device(), t.dtype(), backend::cpu::extreme,
                                    backend::cuda::extreme);
  Tensor vals = detail::make_tensor(p.out_shape, t.dtype());
  Tensor idx = detail::make_tensor(p.out_shape, Dtype::Int64);
  kernel({is_max, p.arranged.device_data(), vals.device_data(),
          static_cast<int64_t*>(idx.device_data()), p.outer, p.inner});
  return {vals, idx};
}

Tensor extreme_all(const Tensor& t, bool is_max, const char* fn) {
  if (t.numel() == 0)
    fail(fn, "operation does not have an identity, so it cannot reduce an empty tensor ",
         shape_str(t.shape()));
  return std::get<0>(extreme(t.reshape({-1}), 0, false, is_max, fn));
}

}  // namespace

Tensor Tensor::max() const {
  Tensor r = extreme_all(*this, true, "max");
  return detail::record(r, "MaxBackward1", {this}, evenly_backward(*this, {}, false), {*this, r});
}
Tensor Tensor::min() const {
  Tensor r = extreme_all(*this, false, "min");
  return detail::record(r, "MinBackward1", {this}, evenly_backward(*this, {}, false), {*this, r});
}
std::tuple<Tensor, Tensor> Tensor::max(int64_t dim, bool keepdim) const {
  auto [v, i] = extreme(*this, dim, keepdim, true, "max");
  return {detail::record(v, "MaxBackward0", {this}, select_backward(*this, dim, keepdim), {i}), i};
}
std::tuple<Tensor, Tensor> Tensor::min(int64_t dim, bool keepdim) const {
  auto [v, i] = extreme(*this, dim, keepdim, false, "min");
  return {detail::record(v, "MinBackward0", {this}, select_backward(*this, dim, keepdim), {i}), i};
}
Tensor Tensor::argmax(int64_t dim, bool keepdim) const {
  return std::get<1>(extreme(*this, dim, keepdim, true, "argmax"));
}
Tensor Tensor::amax(Shape dims, bool keepdim) const {
  if (is_reduced_float(dtype())) return to(Dtype::Float32).amax(dims, keepdim).to(dtype());
  Plan p = plan(*this, dims, keepdim, "amax");
  if (p.inner == 0 && p.outer > 0)
    throw IndexError(detail::msg("amax", "expected the reduced dims ", shape_str(dims), " of ",
                                 shape_str(shape()), " to have a non-zero size"));
  const auto kernel = backend::pick("amax", p.arranged.device(), dtype(), backend::cpu::extreme,
                                    backend::cuda::extreme);
  Tensor out = detail::make_tensor("amax", p.out_shape, dtype());
  kernel({true, p.arranged.device_data(), out.device_data(), nullptr, p.outer, p.inner});
  return detail::record(out, "AmaxBackward0", {this}, evenly_backward(*this, dims, keepdim),
                        {*this, out});
}

namespace {
// all(): the minimum of the elements as bool (true when empty); any(): their maximum (false).
bool bool_extreme(const Tensor& t, bool is_max, const char* fn) {
  Tensor b = t.to(Dtype::Bool).contiguous();
  if (b.numel() == 0) return !is_max;
  const auto kernel =
      backend::pick(fn, b.device(), Dtype::Bool, backend::cpu::extreme, backend::cuda::extreme);
  bool result = false;
  int64_t at = 0;  // where it is (unused)
  kernel({is_max, b.device_data(), &result, &at, 1, b.numel()});
  return result;
}
}  // namespace

bool Tensor::all() const { return bool_extreme(*this, false, "all"); }
bool Tensor::any() const { return bool_extreme(*this, true, "any"); }

Tensor sum(const Tensor& t) { return t.sum(); }
Tensor sum(const Tensor& t, Shape dims, bool keepdim) { return t.sum(std::move(dims), keepdim); }
Tensor mean(const Tensor& t) { return t.mean(); }
Tensor mean(const Tensor& t, Shape dims, bool keepdim) { return t.mean(std::move(dims), keepdim); }
Tensor var(const Tensor& t, Shape dims, bool unbiased, bool keepdim) {
  return t.var(std::move(dims), unbiased, keepdim);
}

// ---- softmax ------------------------------------------------------------------------------------

namespace {
Tensor softmax_impl(const Tensor& t, int64_t dim, bool log, const char* fn) {
  if (!t.defined()) fail(fn, "undefined tensor argument");
  if (detail::widened_on_cpu(t))  // computed in float32, rounded once (detail::widen)
    return softmax_impl(detail::widen(t), dim, log, fn).to(t.dtype());
  const auto kernel =
      backend::pick(fn, t.device(), t.dtype(), backend::cpu::softmax, backend::cuda::softmax);
  int64_t d = detail::wrap_dim(dim, t.dim(), fn);
  // One fused node: the backward runs the row kernel's gradient on the saved result.
  BackwardFn backward = [d, log, fn, kernel](const Node& n, const Tensor& g) {
    const Tensor y = n.saved_tensor(0);
    if (y.dim() == 0) return std::vector<Tensor>{zeros({})};  // softmax of a scalar is constant
    Tensor yt = y.transpose(d, -1).contiguous(), gt = g.transpose(d, -1).contiguous();
    Tensor dx = detail::make_tensor(fn, yt.shape(), Dtype::Float32, /*zero=*/false);
    int64_t cols = yt.size(-1), rows = cols ? yt.numel() / cols : 0;
    kernel({yt.device_data(), gt.device_data(), dx.device_data(), rows, cols, log});
    return std::vector<Tensor>{dx.transpose(d, -1).contiguous()};
  };
  const char* node = log ? "LogSoftmaxBackward0" : "SoftmaxBackward0";
  Tensor out;
  if (t.dim() == 0) {
    out = detail::make_tensor(fn, {}, Dtype::Float32);
    *out.data_ptr<float>() = log ? 0.f : 1.f;
  } else {
    // Move `dim` last, run the row kernel, move it back.
    NoGradGuard no_grad;
    Tensor x = t.transpose(d, -1).contiguous();
    // The kernel writes every element: not cleared (a cleared megabyte is fresh pages).
    Tensor rows_out = detail::make_tensor(fn, x.shape(), Dtype::Float32, /*zero=*/false);
    int64_t cols = x.size(-1), rows = cols ? x.numel() / cols : 0;
    kernel({x.device_data(), nullptr, rows_out.device_data(), rows, cols, log});
    out = rows_out.transpose(d, -1).contiguous();
  }
  return detail::record(out, node, {&t}, std::move(backward), {out});
}
}  // namespace

Tensor Tensor::softmax(int64_t dim) const { return softmax_impl(*this, dim, false, "softmax"); }
Tensor Tensor::log_softmax(int64_t dim) const {
  return softmax_impl(*this, dim, true, "log_softmax");
}
Tensor softmax(const Tensor& t, int64_t dim) { return t.softmax(dim); }
Tensor log_softmax(const Tensor& t, int64_t dim) { return t.log_softmax(dim); }

}  // namespace attn

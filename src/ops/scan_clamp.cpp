// cumsum / cumprod, clamp (scalar and tensor bounds) and the in-place elementwise ops (exp_,
// tanh_, pow_, clamp_, ...), with their gradients.
#include <attn/autograd.h>
#include <attn/ops.h>

#include <cmath>
#include <string>

#include "../tensor/internal.h"

namespace attn {

using detail::fail;

namespace {

// Calls f(in, out, n, stride) for every row along dim d of the contiguous `src` and `dst`: the
// pointers to the row's first element, its length and the distance between its elements.
template <typename TI, typename TO, typename F>
void scan_rows(const Tensor& src, const Tensor& dst, int64_t d, F f) {
  const Shape& s = src.shape();
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < d; ++i) outer *= s[i];
  for (int64_t i = d + 1; i < int64_t(s.size()); ++i) inner *= s[i];
  const int64_t n = s.empty() ? 1 : s[d];
  const TI* pi = src.data_ptr<TI>();
  TO* po = dst.data_ptr<TO>();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t i = 0; i < inner; ++i) f(pi + o * n * inner + i, po + o * n * inner + i, n, inner);
}

// torch accumulates float32 scans in double (its CPU acc_type) and integer ones in int64.
Tensor scan(const Tensor& t, int64_t dim, bool prod, const char* fn) {
  if (!t.defined()) fail(fn, "undefined tensor argument");
  detail::check_not_reduced(t, fn);
  const int64_t d = detail::wrap_dim(dim, t.dim(), fn);
  NoGradGuard no_grad;
  const Dtype out_dtype = t.dtype() == Dtype::Float32 ? Dtype::Float32 : Dtype::Int64;
  Tensor src = t.to(out_dtype).contiguous();
  Tensor out = detail::make_tensor(fn, t.shape(), out_dtype, false);
  if (out_dtype == Dtype::Float32) {
    scan_rows<float, float>(src, out, d, [prod](const float* x, float* y, int64_t n, int64_t st) {
      double acc = prod ? 1.0 : 0.0;
      for (int64_t j = 0; j < n; ++j) {
        acc = prod ? acc * x[j * st] : acc + x[j * st];
        y[j * st] = float(acc);
      }
    });
  } else {
    scan_rows<int64_t, int64_t>(
        src, out, d, [prod](const int64_t* x, int64_t* y, int64_t n, int64_t st) {
          uint64_t acc = prod ? 1 : 0;  // wraps on overflow, as torch
          for (int64_t j = 0; j < n; ++j) {
            acc = prod ? acc * uint64_t(x[j * st]) : acc + uint64_t(x[j * st]);
            y[j * st] = int64_t(acc);
          }
        });
  }
  return out;
}

}  // namespace

Tensor Tensor::cumsum(int64_t dim) const {
  Tensor out = scan(*this, dim, false, "cumsum");
  if (dtype() != Dtype::Float32) return out;
  const int64_t d = this->dim() == 0 ? 0 : detail::wrap_dim(dim, this->dim(), "cumsum");
  // d/dx_i sum_{j >= i} g_j: the reversed cumulative sum of the gradient.
  return detail::record(out, "CumsumBackward0", {this}, [d](const Node&, const Tensor& g) {
    Tensor gc = g.contiguous();
    Tensor r = detail::make_tensor("cumsum", g.shape(), Dtype::Float32, false);
    scan_rows<float, float>(gc, r, d, [](const float* x, float* y, int64_t n, int64_t st) {
      double acc = 0;
      for (int64_t j = n - 1; j >= 0; --j) {
        acc += x[j * st];
        y[j * st] = float(acc);
      }
    });
    return std::vector<Tensor>{r};
  });
}

Tensor Tensor::cumprod(int64_t dim) const {
  Tensor out = scan(*this, dim, true, "cumprod");
  if (dtype() != Dtype::Float32) return out;
  const int64_t d = this->dim() == 0 ? 0 : detail::wrap_dim(dim, this->dim(), "cumprod");
  // d y_j / d x_i = prod_{k <= j, k != i} x_k for j >= i, written out (zeros included).
  return detail::record(out, "CumprodBackward0", {this},
                        [d](const Node& node, const Tensor& g) {
                          Tensor x = node.saved_tensor(0).contiguous(), gc = g.contiguous();
                          Tensor r = detail::make_tensor("cumprod", g.shape(), Dtype::Float32);
                          const float* px = x.data_ptr<float>();
                          const float* pg = gc.data_ptr<float>();
                          scan_rows<float, float>(
                              x, r, d, [&](const float* xr, float* rr, int64_t n, int64_t st) {
                                const float* gr = pg + (xr - px);
                                for (int64_t i = 0; i < n; ++i) {
                                  double before = 1;
                                  for (int64_t k = 0; k < i; ++k) before *= xr[k * st];
                                  double acc = 0, after = 1;
                                  for (int64_t j = i; j < n; ++j) {
                                    if (j > i) after *= xr[j * st];
                                    acc += gr[j * st] * before * after;
                                  }
                                  rr[i * st] = float(acc);
                                }
                              });
                          return std::vector<Tensor>{r};
                        },
                        {*this});
}

Tensor cumsum(const Tensor& t, int64_t dim) { return t.cumsum(dim); }
Tensor cumprod(const Tensor& t, int64_t dim) { return t.cumprod(dim); }

// ---- clamp --------------------------------------------------------------------------------------

namespace {

// min(max(x, lo), hi) elementwise (broadcast), NaN in x or in a bound propagating, as torch.
template <typename T>
T clamp_one(T x, const T* lo, const T* hi) {
  if constexpr (std::is_same_v<T, float>) {
    if (std::isnan(x)) return x;
    if (lo && (std::isnan(*lo) || x < *lo)) x = *lo;
    if (hi && (std::isnan(*hi) || x > *hi)) x = *hi;
    return x;
  } else {
    if (lo && x < *lo) x = *lo;
    if (hi && x > *hi) x = *hi;
    return x;
  }
}

Tensor clamp_forward(const Tensor& t, const Tensor& lo_in, const Tensor& hi_in, Dtype dt) {
  NoGradGuard no_grad;
  Shape shape = t.shape();
  if (lo_in.defined()) shape = broadcast_shapes(shape, lo_in.shape(), "clamp");
  if (hi_in.defined()) shape = broadcast_shapes(shape, hi_in.shape(), "clamp");
  Tensor x = t.to(dt), lo = lo_in.defined() ? lo_in.to(dt) : Tensor(),
         hi = hi_in.defined() ? hi_in.to(dt) : Tensor();
  Tensor out = detail::make_tensor("clamp", shape, dt, false);
  const Shape sx = detail::broadcast_strides(x, shape);
  const Shape sl = lo.defined() ? detail::broadcast_strides(lo, shape) : Shape(shape.size(), 0);
  const Shape sh = hi.defined() ? detail::broadcast_strides(hi, shape) : Shape(shape.size(), 0);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    const T* px = detail::base_ptr<T>(x);
    const T* pl = lo.defined() ? detail::base_ptr<T>(lo) : nullptr;
    const T* ph = hi.defined() ? detail::base_ptr<T>(hi) : nullptr;
    T* po = out.data_ptr<T>();
    int64_t i = 0;
    detail::strided_loop<3>(shape, {&sx, &sl, &sh},
                            {x.storage_offset(), lo.defined() ? lo.storage_offset() : 0,
                             hi.defined() ? hi.storage_offset() : 0},
                            [&](const std::array<int64_t, 3>& o) {
                              po[i++] = clamp_one<T>(px[o[0]], pl ? pl + o[1] : nullptr,
                                                     ph ? ph + o[2] : nullptr);
                            });
  };
  switch (dt) {
    case Dtype::Float32: run(float{}); break;
    case Dtype::Int64: run(int64_t{}); break;
    case Dtype::Bool: fail("clamp", "not implemented for bool tensors");
    case Dtype::BFloat16:
    case Dtype::Float16: detail::fail_reduced(dt, "clamp");  // clamped in float32 by clamp_impl
  }
  return out;
}

Tensor clamp_impl(const Tensor& t, const Tensor& lo, const Tensor& hi) {
  if (!t.defined()) fail("clamp", "undefined tensor argument");
  if (!lo.defined() && !hi.defined())
    fail("clamp", "at least one of 'min' or 'max' must not be None");
  Dtype dt = t.dtype();
  if (lo.defined()) dt = detail::promote(dt, lo.dtype());
  if (hi.defined()) dt = detail::promote(dt, hi.dtype());
  if (dt == Dtype::Bool) fail("clamp", "not implemented for bool tensors");
  if (is_reduced_float(dt)) {
    // The bounds rounded to the dtype first (as torch's kernel), then compared exactly in float32;
    // every result is an input or a bound, so converting back is exact.
    NoGradGuard no_grad;
    return clamp_forward(t.to(dt), lo.defined() ? lo.to(dt) : Tensor(),
                         hi.defined() ? hi.to(dt) : Tensor(), Dtype::Float32)
        .to(dt);
  }
  Tensor out = clamp_forward(t, lo, hi, dt);
  if (dt != Dtype::Float32) return out;
  const Shape xs = t.shape(), ls = lo.defined() ? lo.shape() : Shape(),
              hs = hi.defined() ? hi.shape() : Shape();
  const bool has_lo = lo.defined(), has_hi = hi.defined();
  // torch's clamp_backward and clamp_backward_min_max.
  return detail::record(out, "ClampBackward1", {&t, &lo, &hi},
                        [xs, ls, hs, has_lo, has_hi](const Node& n, const Tensor& g) {
                          const Tensor x = n.saved_tensor(0), l = n.saved_tensor(1),
                                       h = n.saved_tensor(2);
                          Tensor zero = zeros({});
                          Tensor gx, gl, gh;
                          if (n.needs_input_grad(0)) {
                            Tensor keep = full(x.shape(), true, Dtype::Bool);
                            if (has_lo) keep = keep & (x >= l);
                            if (has_hi) keep = keep & (x <= h);
                            gx = detail::sum_to(where(keep, g, zero), xs);
                          }
                          if (n.needs_input_grad(1)) {
                            Tensor m = x < l;
                            if (has_hi) m = m & (l < h);
                            gl = detail::sum_to(where(m, g, zero), ls);
                          }
                          if (n.needs_input_grad(2)) {
                            Tensor m = x > h;
                            if (has_lo) m = m | (h < l);
                            gh = detail::sum_to(where(m, g, zero), hs);
                          }
                          return std::vector<Tensor>{gx, gl, gh};
                        },
                        {t, lo, hi});
}

Tensor bound(const std::optional<Scalar>& s, Dtype like) {
  if (!s) return Tensor();
  return detail::scalar_tensor(*s, detail::promote_scalar(like, *s));
}

}  // namespace

Tensor Tensor::clamp(std::optional<Scalar> min, std::optional<Scalar> max) const {
  if (!defined()) fail("clamp", "undefined tensor argument");
  return clamp_impl(*this, bound(min, dtype()), bound(max, dtype()));
}
Tensor Tensor::clamp(const Tensor& min, const Tensor& max) const {
  return clamp_impl(*this, min, max);
}
Tensor clamp(const Tensor& t, std::optional<Scalar> min, std::optional<Scalar> max) {
  return t.clamp(min, max);
}
Tensor clamp(const Tensor& t, const Tensor& min, const Tensor& max) { return t.clamp(min, max); }

// ---- in-place elementwise ops -------------------------------------------------------------------

namespace {

// self = f(self), in place. The result is computed out of place from a copy of self (so the op's
// saved tensors are not the storage being overwritten) and copied back: autograd then routes the
// gradient through the op to self's old history, and the version counter moves once. The result
// must keep self's dtype (torch: "result type Float can't be cast to the desired output type").
template <typename F>
Tensor& inplace_from(Tensor& self, const char* fn, F f) {
  if (!self.defined()) fail(fn, "undefined tensor argument");
  detail::check_inplace(self, fn);
  // (With grad mode on the op may record a node saving its input even when self does not
  // require grad, pow_'s exponent may; the copy keeps that input intact.)
  Tensor r = is_grad_enabled() ? f(self.clone()) : f(self);
  if (r.dtype() != self.dtype() &&
      !(attn::is_floating_point(r.dtype()) && attn::is_floating_point(self.dtype())))
    fail(fn, "result type ", dtype_name(r.dtype()), " can't be cast to the desired output type ",
         dtype_name(self.dtype()));
  return self.copy_(r);
}

}  // namespace

Tensor& Tensor::clamp_(std::optional<Scalar> min, std::optional<Scalar> max) {
  return inplace_from(*this, "clamp_", [&](const Tensor& x) { return x.clamp(min, max); });
}
Tensor& Tensor::clamp_(const Tensor& min, const Tensor& max) {
  return inplace_from(*this, "clamp_", [&](const Tensor& x) { return x.clamp(min, max); });
}
Tensor& Tensor::exp_() {
  return inplace_from(*this, "exp_", [](const Tensor& x) { return x.exp(); });
}
Tensor& Tensor::log_() {
  return inplace_from(*this, "log_", [](const Tensor& x) { return x.log(); });
}
Tensor& Tensor::sqrt_() {
  return inplace_from(*this, "sqrt_", [](const Tensor& x) { return x.sqrt(); });
}
Tensor& Tensor::rsqrt_() {
  return inplace_from(*this, "rsqrt_", [](const Tensor& x) { return x.rsqrt(); });
}
Tensor& Tensor::tanh_() {
  return inplace_from(*this, "tanh_", [](const Tensor& x) { return x.tanh(); });
}
Tensor& Tensor::sigmoid_() {
  return inplace_from(*this, "sigmoid_", [](const Tensor& x) { return x.sigmoid(); });
}
Tensor& Tensor::relu_() {
  return inplace_from(*this, "relu_", [](const Tensor& x) { return x.relu(); });
}
Tensor& Tensor::abs_() {
  return inplace_from(*this, "abs_", [](const Tensor& x) { return x.abs(); });
}
Tensor& Tensor::neg_() {
  return inplace_from(*this, "neg_", [](const Tensor& x) { return x.neg(); });
}
Tensor& Tensor::pow_(Scalar e) {
  return inplace_from(*this, "pow_", [&](const Tensor& x) { return x.pow(e); });
}
Tensor& Tensor::pow_(const Tensor& e) {
  return inplace_from(*this, "pow_", [&](const Tensor& x) { return x.pow(e); });
}

}  // namespace attn

// cumsum / cumprod, clamp (scalar and tensor bounds) and the in-place elementwise ops (exp_,
// tanh_, pow_, clamp_, ...), with their gradients.
#include <attn/autograd.h>
#include <attn/ops.h>

#include <cmath>
#include <string>

#include "../backend/elementwise_kernels.h"
#include "../backend/reduce_kernels.h"
#include "../tensor/internal.h"

namespace attn {

using detail::fail;

namespace {

// The scan kernel of (device, dtype) over t arranged as (outer, n, inner) around dim d, into out
// (both contiguous, t's shape); g: cumprod's gradient (or undefined).
void run_scan(backend::ScanOp op, const Tensor& x, const Tensor& g, const Tensor& out, int64_t d,
              const char* fn) {
  const auto kernel =
      backend::pick(fn, x.device(), x.dtype(), backend::cpu::scan, backend::cuda::scan);
  const Shape& s = x.shape();
  int64_t outer = 1, inner = 1;
  for (int64_t i = 0; i < d; ++i) outer *= s[i];
  for (int64_t i = d + 1; i < int64_t(s.size()); ++i) inner *= s[i];
  const int64_t n = s.empty() ? 1 : s[d];
  kernel({op, x.device_data(), g.defined() ? g.device_data() : nullptr, out.device_data(), outer, n,
          inner});
}

// torch accumulates float32 scans in double (its CPU acc_type) and integer ones in int64.
Tensor scan(const Tensor& t, int64_t dim, bool prod, const char* fn) {
  if (!t.defined()) fail(fn, "undefined tensor argument");
  if (is_reduced_float(t.dtype()))  // float accumulation, one rounding (detail::widen)
    return scan(detail::widen(t), dim, prod, fn).to(t.dtype());
  const int64_t d = detail::wrap_dim(dim, t.dim(), fn);
  NoGradGuard no_grad;
  const Dtype out_dtype = t.dtype() == Dtype::Float32 ? Dtype::Float32 : Dtype::Int64;
  Tensor src = t.to(out_dtype).contiguous();
  Tensor out = detail::make_tensor(fn, t.shape(), out_dtype, false);
  run_scan(prod ? backend::ScanOp::CumProd : backend::ScanOp::CumSum, src, Tensor(), out, d, fn);
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
    run_scan(backend::ScanOp::CumSumBackward, gc, Tensor(), r, d, "cumsum");
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
                          run_scan(backend::ScanOp::CumProdBackward, x, gc, r, d, "cumprod");
                          return std::vector<Tensor>{r};
                        },
                        {*this});
}

Tensor cumsum(const Tensor& t, int64_t dim) { return t.cumsum(dim); }
Tensor cumprod(const Tensor& t, int64_t dim) { return t.cumprod(dim); }

// ---- clamp --------------------------------------------------------------------------------------

namespace {

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
  if (dt == Dtype::Bool) fail("clamp", "not implemented for bool tensors");
  const auto kernel =
      backend::pick("clamp", x.device(), dt, backend::cpu::clamp, backend::cuda::clamp);
  auto operand = [](const Tensor& t, const Shape& strides) {
    return backend::StridedOperand{t.defined() ? t.impl()->storage->data : nullptr,
                                   t.defined() ? t.storage_offset() : 0, &strides};
  };
  kernel({&shape, operand(x, sx), operand(lo, sl), operand(hi, sh), out.device_data()});
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
Tensor& Tensor::cos_() {
  return inplace_from(*this, "cos_", [](const Tensor& x) { return x.cos(); });
}
Tensor& Tensor::sin_() {
  return inplace_from(*this, "sin_", [](const Tensor& x) { return x.sin(); });
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

// Broadcasting elementwise arithmetic, comparisons and unary math with PyTorch's type promotion.
#include <attn/autograd.h>
#include <attn/ops.h>

#include <cctype>
#include <cmath>
#include <cstring>
#include <optional>
#include <string_view>

#include "../backend/elementwise_kernels.h"
#include "../tensor/internal.h"
#include "unary_float.h"

namespace attn {

using detail::fail;

namespace detail {

Dtype promote(Dtype a, Dtype b) {
  if (a == b) return a;
  // Two different float dtypes meet in float32 (bfloat16 with float16 too, as in torch); a float
  // dtype with an int or bool keeps the float dtype.
  if (is_floating_point(a) && is_floating_point(b)) return Dtype::Float32;
  if (is_floating_point(a)) return a;
  if (is_floating_point(b)) return b;
  if (a == Dtype::Int64 || b == Dtype::Int64) return Dtype::Int64;
  return Dtype::Bool;
}

// A Python scalar only raises the category (bool < int < float), never the width: a float scalar
// keeps a bfloat16 tensor bfloat16.
Dtype promote_scalar(Dtype a, const Scalar& s) {
  if (s.kind() == Scalar::Kind::Float) return is_floating_point(a) ? a : Dtype::Float32;
  if (s.kind() == Scalar::Kind::Int && a == Dtype::Bool) return Dtype::Int64;
  return a;
}

namespace {
float scalar_float(const Scalar& s) {
  return s.kind() == Scalar::Kind::Float ? float(s.to_double()) : float(s.to_int());
}
}  // namespace

Tensor scalar_tensor(const Scalar& s, Dtype dtype) {
  Tensor t = make_tensor({}, dtype);
  switch (dtype) {
    case Dtype::Float32: *t.data_ptr<float>() = float(s.to_double()); break;
    case Dtype::Int64: *t.data_ptr<int64_t>() = s.to_int(); break;
    case Dtype::Bool: *t.data_ptr<bool>() = s.to_double() != 0; break;
    // Through float, as c10::convert does: a double or an int is rounded to float first.
    case Dtype::BFloat16: *t.data_ptr<BFloat16>() = BFloat16(scalar_float(s)); break;
    case Dtype::Float16: *t.data_ptr<Half>() = Half(scalar_float(s)); break;
  }
  return t;
}

}  // namespace detail

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* fn) {
  std::size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (std::size_t i = 0; i < n; ++i) {
    int64_t x = i < n - a.size() ? 1 : a[i - (n - a.size())];
    int64_t y = i < n - b.size() ? 1 : b[i - (n - b.size())];
    if (x != y && x != 1 && y != 1)
      fail(fn, "shapes ", shape_str(a), " and ", shape_str(b), " cannot be broadcast together",
           " (size ", x, " vs ", y, " at dim ", i, ")");
    out[i] = x == 1 ? y : x;
  }
  return out;
}

namespace {

using Op = backend::BinaryOp;

const char* op_name(Op op) {
  switch (op) {
    case Op::Add: return "add";
    case Op::Sub: return "sub";
    case Op::Mul: return "mul";
    case Op::Div: return "div";
    case Op::Pow: return "pow";
    case Op::Max: return "maximum";
    case Op::Min: return "minimum";
    case Op::FloorDiv: return "floor_divide";
    case Op::TruncDiv: return "div";
    case Op::Rem: return "remainder";
    case Op::Fmod: return "fmod";
    case Op::Eq: return "eq";
    case Op::Ne: return "ne";
    case Op::Lt: return "lt";
    case Op::Le: return "le";
    case Op::Gt: return "gt";
    case Op::Ge: return "ge";
    case Op::And: return "logical_and";
    case Op::Or: return "logical_or";
  }
  return "?";
}

using backend::is_comparison;

bool is_rounding(Op op) {
  return op == Op::FloorDiv || op == Op::TruncDiv || op == Op::Rem || op == Op::Fmod;
}

Tensor binary_tt(Op op, const Tensor& a, const Tensor& b, const char* no_grad_op = nullptr);

// c10's ScalarType name, as torch's "result type Float can't be cast to ..." spells it.
const char* torch_type_name(Dtype d) {
  switch (d) {
    case Dtype::Float32: return "Float";
    case Dtype::Int64: return "Long";
    case Dtype::Bool: return "Bool";
    case Dtype::BFloat16: return "BFloat16";
    case Dtype::Float16: return "Half";
  }
  return "?";
}

// PyTorch's backward-node name for `op`; `form` 0 tensor-tensor, 1 tensor-scalar, 2 scalar-tensor.
const char* node_name(Op op, int form) {
  switch (op) {
    case Op::Add: return "AddBackward0";
    case Op::Sub: return form == 2 ? "RsubBackward1" : "SubBackward0";
    case Op::Mul: return "MulBackward0";
    case Op::Div: return form == 2 ? "MulBackward0" : "DivBackward0";  // 2 / x: x.reciprocal() * 2
    case Op::Pow: return form == 0 ? "PowBackward1" : form == 1 ? "PowBackward0" : "PowBackward2";
    case Op::Max: return "MaximumBackward0";
    case Op::Min: return "MinimumBackward0";
    // Through div(rounding_mode=...); floor_divide itself has no derivative (no_derivative).
    case Op::FloorDiv:
    case Op::TruncDiv: return "DivBackward2";
    // torch has no derivative for remainder(Scalar, Tensor) (binary_st refuses it).
    case Op::Rem: return form == 0 ? "RemainderBackward1" : "RemainderBackward0";
    case Op::Fmod: return form == 0 ? "FmodBackward1" : "FmodBackward0";
    default: return nullptr;
  }
}

// ---- backward formulas of the arithmetic ops
// ------------------------------------------------------
//
// form 0: a op b with tensors a, b (slots 0, 1); form 1: a op s; form 2: s op b (the tensor is in
// slot 0). Saved tensors: slot 0 the first tensor operand, slot 1 the second (form 0), slot 2 the
// result. Gradients of broadcast operands are summed back to their shapes.
std::vector<Tensor> binary_grads(Op op, int form, const Scalar& s, const Node& n, const Tensor& g,
                                 const Shape& sa, const Shape& sb) {
  const bool need_a = n.needs_input_grad(0), need_b = form == 0 && n.needs_input_grad(1);
  Tensor ga, gb;
  if (form == 1) {  // a op s
    switch (op) {
      case Op::Add:
      case Op::Sub: ga = g; break;
      case Op::Mul: ga = g * s; break;
      case Op::Div: ga = g / s; break;
      case Op::Pow:  // PowBackward0: e * x^(e-1), zero for e == 0
        ga = s.to_double() == 0.0 ? zeros(g.shape())
                                  : g * (n.saved_tensor(0).pow(Scalar(s.to_double() - 1.0)) * s);
        break;
      case Op::FloorDiv:
      case Op::TruncDiv: ga = g * 0.0; break;  // torch's `grad * 0`: NaN stays NaN
      case Op::Rem:
      case Op::Fmod: ga = g; break;
      default: break;
    }
    return {ga, Tensor()};
  }
  if (form == 2) {  // s op b, b in slot 0
    const Tensor x = n.saved_tensor(0), r = n.saved_tensor(2);
    switch (op) {
      case Op::Add: ga = g; break;
      case Op::Sub: ga = -g; break;
      case Op::Mul: ga = g * s; break;
      case Op::Div: ga = -(g * s) / (x * x); break;  // s / x
      case Op::Pow: {  // PowBackward2: s^x log(s), 0 where s == 0, x >= 0
        Tensor d = g * r * std::log(s.to_double());
        ga = s.to_double() == 0.0 ? where(x >= Scalar(0), zeros(d.shape()), d) : d;
        break;
      }
      case Op::FloorDiv:
      case Op::TruncDiv: ga = g * 0.0; break;
      default: break;
    }
    return {ga, Tensor()};
  }
  const Tensor a = n.saved_tensor(0), b = n.saved_tensor(1);
  switch (op) {
    case Op::Add:
      ga = g;
      gb = g;
      break;
    case Op::Sub:
      ga = g;
      if (need_b) gb = -g;
      break;
    case Op::Mul:
      if (need_a) ga = g * b;
      if (need_b) gb = g * a;
      break;
    case Op::Div:
      if (need_a) ga = g / b;
      if (need_b) gb = -(g * a) / (b * b);
      break;
    case Op::Pow: {  // PowBackward1
      if (need_a) ga = where(b == Scalar(0), zeros(g.shape()), g * b * a.pow(b - Scalar(1)));
      if (need_b) {
        Tensor d = g * n.saved_tensor(2) * a.log();
        gb = where((a == Scalar(0)) & (b >= Scalar(0)), zeros(d.shape()), d);
      }
      break;
    }
    case Op::FloorDiv:
    case Op::TruncDiv:
      if (need_a) ga = g * 0.0;
      if (need_b) gb = g * 0.0;
      break;
    case Op::Rem:   // RemainderBackward1: -grad * self.div(other, rounding_mode="floor")
    case Op::Fmod:  // FmodBackward1: -grad * self.div(other, rounding_mode="trunc")
      if (need_a) ga = g;
      if (need_b) gb = -g * binary_tt(op == Op::Rem ? Op::FloorDiv : Op::TruncDiv, a, b);
      break;
    case Op::Max:
    case Op::Min: {  // ties split the gradient in halves, as torch.maximum's backward
      Tensor shared = where(a == b, g / 2.0, g);
      if (need_a) ga = shared.masked_fill(op == Op::Max ? a < b : a > b, 0.0);
      if (need_b) gb = shared.masked_fill(op == Op::Max ? a > b : a < b, 0.0);
      break;
    }
    default: break;
  }
  if (ga.defined()) ga = detail::sum_to(ga, sa);
  if (gb.defined()) gb = detail::sum_to(gb, sb);
  return {need_a ? ga : Tensor(), need_b ? gb : Tensor()};
}

// The backward of an op whose derivative torch does not implement (floor_divide,
// remainder(Scalar, Tensor)): a pass that reaches it is refused, naming the op, as torch's.
BackwardFn refused_backward(const char* op) {
  const std::string what = std::string("derivative for aten::") + op + " is not implemented";
  return [what](const Node&, const Tensor&) -> std::vector<Tensor> {
    throw NotImplementedError(detail::msg("backward", what));
  };
}

// Such an op's result: it requires grad as torch's does, with refused_backward.
Tensor no_derivative(Tensor out, const char* op, const Tensor* a, const Tensor* b) {
  if (!detail::should_record({a, b})) return out;
  return detail::record(out, "NotImplemented", {a, b}, refused_backward(op));
}

Tensor graph(Tensor out, Op op, int form, const Tensor* a, const Tensor* b, const Scalar& s = 0) {
  const char* name = node_name(op, form);
  if (!name) return out;
  if (!detail::should_record({a, b})) return detail::record(out, name, {a, b});
  // Save only what the formulas read (an operand is read for the other operand's gradient).
  std::vector<Tensor> saved(3);
  if (form == 0) {
    const bool ra = a->requires_grad(), rb = b->requires_grad();
    switch (op) {
      case Op::Mul: saved = {rb ? *a : Tensor(), ra ? *b : Tensor(), Tensor()}; break;
      case Op::Div: saved = {rb ? *a : Tensor(), *b, Tensor()}; break;
      case Op::Pow: saved = {*a, *b, rb ? out : Tensor()}; break;
      case Op::Max:
      case Op::Min: saved = {*a, *b, Tensor()}; break;
      case Op::Rem:
      case Op::Fmod:
        if (rb) saved = {*a, *b, Tensor()};
        break;
      default: break;
    }
  } else if (form == 1) {
    if (op == Op::Pow) saved[0] = *a;
  } else {
    if (op == Op::Div || (op == Op::Pow && s.to_double() == 0.0)) saved[0] = *a;
    if (op == Op::Pow) saved[2] = out;
  }
  const Shape sa = a->shape(), sb = b ? b->shape() : Shape{};
  return detail::record(
      out, name, {a, b},
      [op, form, s, sa, sb](const Node& n, const Tensor& g) {
        return binary_grads(op, form, s, n, g, sa, sb);
      },
      std::move(saved));
}

Dtype compute_type(Op op, Dtype a, Dtype b) {
  Dtype t = detail::promote(a, b);
  if (op == Op::Div) return is_floating_point(t) ? t : Dtype::Float32;  // true division
  // torch's "div_floor_cpu" not implemented for 'Bool' (a bool tensor and an int promote to int)
  if (t == Dtype::Bool && is_rounding(op))
    fail(op_name(op), "not implemented for two bool operands (torch.bool and torch.bool)");
  if (t == Dtype::Bool && (op == Op::Add || op == Op::Mul || op == Op::Max || op == Op::Min))
    return Dtype::Bool;
  if (t == Dtype::Bool && !is_comparison(op)) return Dtype::Int64;
  return t;
}

// Computes into `out` if given (in-place forms), else a new tensor.
Tensor binary(Op op, const Tensor& a, const Tensor& b, Dtype ct, Tensor out = Tensor()) {
  const char* fn = op_name(op);
  if (!a.defined() || !b.defined()) fail(fn, "undefined tensor argument");
  detail::check_cpu_operands(fn, {&a, &b});
  Shape shape = broadcast_shapes(a.shape(), b.shape(), fn);
  // As torch's sub_check: any bool operand (a Python scalar counts as its tensor) is refused.
  if (op == Op::Sub && (a.dtype() == Dtype::Bool || b.dtype() == Dtype::Bool))
    fail(fn,
         "subtraction, the `-` operator, with a bool tensor is not supported; use ~ or "
         "logical_not() to invert a mask");
  // bfloat16 and float16 compute in float32, as torch's CPU kernels do: the operands are first
  // made the common dtype (a float32 0-dim tensor is rounded to bfloat16 like a scalar), then
  // widened exactly, and each result is rounded back to the common dtype once. The CPU kernels
  // do that per element (their bfloat16 / float16 slots); elsewhere the operands are widened here.
  const Dtype kt = is_reduced_float(ct) && !a.device().is_cpu() ? Dtype::Float32 : ct;
  Tensor ca = a.to(ct).to(kt), cb = b.to(ct).to(kt);
  if (is_rounding(op) && ct == Dtype::Int64 && (cb == Scalar(int64_t(0))).any())
    fail(fn, "ZeroDivisionError: integer division by zero (divisor ", detail::tensor_desc(b),
         " holds 0)");
  Dtype out_dtype = is_comparison(op) ? Dtype::Bool : ct;
  Dtype tmp_dtype = is_comparison(op) ? Dtype::Bool : kt;
  if (out.defined()) {
    if (shape != out.shape())
      fail(fn, "output with shape ", shape_str(out.shape()), " doesn't match the broadcast shape ",
           shape_str(shape));
    if (out.dtype() != out_dtype && !is_floating_point(out.dtype()))
      fail(fn, "result type ", dtype_name(out_dtype), " can't be cast to the desired output type ",
           dtype_name(out.dtype()));
  }
  // An in-place form writes `out` directly where that reads each input element before writing
  // the same position (each input either elsewhere in memory or laid out exactly as out), else
  // through a temporary and a copy.
  auto direct_ok = [&out](const Tensor& t) {
    return t.impl()->storage != out.impl()->storage ||
           (t.storage_offset() == out.storage_offset() && t.shape() == out.shape() &&
            t.strides() == out.strides());
  };
  const bool direct = out.defined() && out.dtype() == tmp_dtype && direct_ok(ca) && direct_ok(cb);
  const auto kernel =
      backend::pick(fn, ca.device(), kt, backend::cpu::binary, backend::cuda::binary);
  Tensor res = direct ? out
                      : detail::make_tensor(fn, shape, tmp_dtype,
                                            /*zero=*/false);  // the kernel writes it all
  // A new result is laid out as torch's (detail::elementwise_strides): x.t() * 2 is x.t()-shaped
  // in memory. Where each operand is that block or one element, the op runs over the block as one
  // run.
  const Shape layout = out.defined() ? Shape{} : detail::elementwise_strides(shape, {&ca, &cb});
  if (!layout.empty()) res.impl()->strides = layout;
  auto in_block = [&](const Tensor& t) {
    return t.numel() == 1 || (t.shape() == shape && t.strides() == layout);
  };
  const Shape flat{res.numel()}, unit{1}, none{0};
  const bool one_run = !layout.empty() && in_block(ca) && in_block(cb);
  const Shape sa = !one_run              ? detail::broadcast_strides(ca, shape)
                   : ca.shape() == shape ? unit
                                         : none;
  const Shape sb = !one_run              ? detail::broadcast_strides(cb, shape)
                   : cb.shape() == shape ? unit
                                         : none;
  auto operand = [&](const Tensor& t, const Shape& strides) {
    const bool block = one_run && t.shape() == shape;
    return backend::BinaryOperand{t.impl()->storage->data, t.storage_offset(),
                                  block ? &flat : &t.shape(), &strides, block || t.is_contiguous()};
  };
  kernel({op, one_run ? &flat : &shape, operand(ca, sa), operand(cb, sb), res.impl()->storage->data,
          res.storage_offset(), one_run ? &unit : &res.strides(), one_run || res.is_contiguous()});
  if (out.defined()) {
    if (direct)
      detail::bump_version(out);  // as copy_ would: saved views of out are now stale
    else
      out.copy_(res);
    return out;
  }
  return tmp_dtype == out_dtype ? res : res.to(out_dtype);
}

// no_grad_op: the result has no derivative (no_derivative), as torch's `op`.
Tensor binary_tt(Op op, const Tensor& a, const Tensor& b, const char* no_grad_op) {
  if (!a.defined() || !b.defined()) fail(op_name(op), "undefined tensor argument");
  if (op == Op::Pow && a.dtype() == Dtype::Bool && b.dtype() == Dtype::Bool)
    fail("pow", "not implemented for two bool tensors ", detail::tensor_desc(a), " and ",
         detail::tensor_desc(b));
  // A 0-dim tensor behaves like a scalar of its category (as in PyTorch's promotion): one of no
  // higher a category (bool < int < float) than the other operand takes the other's dtype
  // (a float32 0-dim tensor times a bfloat16 tensor is bfloat16); one of a higher category
  // promotes as a tensor would.
  const auto category = [](Dtype d) {
    return is_floating_point(d) ? 2 : d == Dtype::Int64 ? 1 : 0;
  };
  Dtype ct;
  if (a.dim() == 0 && b.dim() > 0 && category(a.dtype()) <= category(b.dtype()))
    ct = compute_type(op, b.dtype(), b.dtype());
  else if (b.dim() == 0 && a.dim() > 0 && category(b.dtype()) <= category(a.dtype()))
    ct = compute_type(op, a.dtype(), a.dtype());
  else
    ct = compute_type(op, a.dtype(), b.dtype());
  if (no_grad_op) return no_derivative(binary(op, a, b, ct), no_grad_op, &a, &b);
  return graph(binary(op, a, b, ct), op, 0, &a, &b);
}

Tensor binary_ts(Op op, const Tensor& a, const Scalar& s, const char* no_grad_op = nullptr) {
  if (!a.defined()) fail(op_name(op), "undefined tensor argument");
  Dtype st = detail::promote_scalar(a.dtype(), s);
  Dtype ct = compute_type(op, a.dtype(), st);
  // Only a tensor ** negative Python int is refused; tensor exponents follow int_pow.
  if (op == Op::Pow && ct == Dtype::Int64 && s.to_int() < 0)
    fail("pow", "integers to negative integer powers are not allowed (exponent ", s.to_int(), ")");
  Tensor out = binary(op, a, detail::scalar_tensor(s, ct), ct);
  if (no_grad_op) return no_derivative(out, no_grad_op, &a, nullptr);
  return graph(out, op, 1, &a, nullptr, s);
}

Tensor binary_st(Op op, const Scalar& s, const Tensor& b, const char* no_grad_op = nullptr) {
  if (!b.defined()) fail(op_name(op), "undefined tensor argument");
  Dtype st = detail::promote_scalar(b.dtype(), s);
  Dtype ct = compute_type(op, st, b.dtype());
  Tensor out = binary(op, detail::scalar_tensor(s, ct), b, ct);
  if (no_grad_op) return no_derivative(out, no_grad_op, &b, nullptr);
  return graph(out, op, 2, &b, nullptr, s);
}

Tensor& inplace(Op op, Tensor& self, const Tensor& other, const char* no_grad_op = nullptr) {
  detail::check_inplace(self, (std::string(op_name(op)) + "_").c_str());
  Dtype ct = compute_type(op, self.dtype(), other.dtype());
  if (is_floating_point(ct) && !is_floating_point(self.dtype()))
    fail(op_name(op), "result type ", torch_type_name(ct),
         " can't be cast to the desired output type ", dtype_name(self.dtype()));
  const char* name = no_grad_op ? "NotImplemented" : node_name(op, 0);
  const bool rec = name && detail::should_record({&self, &other});
  // Mul and div read the other operand for self's gradient and the old self for other's (the
  // remainders both for other's): save them before self is overwritten (other too when it shares
  // self's storage).
  Tensor other_saved, self_old;
  if (rec && !no_grad_op && (op == Op::Mul || op == Op::Div || op == Op::Rem || op == Op::Fmod)) {
    NoGradGuard no_grad;
    other_saved = other.impl()->storage == self.impl()->storage ? other.clone() : other;
    if (other.requires_grad()) self_old = self.clone();
  }
  {
    NoGradGuard no_grad;  // the internal copy into self is not part of the graph
    binary(op, self, other, ct, self);
  }
  if (!rec) return self;
  if (no_grad_op) {
    detail::record_inplace(self, name, {&self, &other}, refused_backward(no_grad_op));
    return self;
  }
  const Shape other_shape = other.shape();
  detail::record_inplace(self, name, {&self, &other},
                         [op, other_shape](const Node& n, const Tensor& g) {
                           Tensor gs, go;
                           const Tensor o = n.saved_tensor(0), old = n.saved_tensor(1);
                           switch (op) {
                             case Op::Add: gs = g, go = g; break;
                             case Op::Sub: gs = g, go = -g; break;
                             case Op::Mul:
                               if (n.needs_input_grad(0)) gs = g * o;
                               if (n.needs_input_grad(1)) go = g * old;
                               break;
                             case Op::Div:
                               if (n.needs_input_grad(0)) gs = g / o;
                               if (n.needs_input_grad(1)) go = -(g * old) / (o * o);
                               break;
                             case Op::FloorDiv:
                             case Op::TruncDiv: gs = g * 0.0, go = g * 0.0; break;
                             case Op::Rem:
                             case Op::Fmod:
                               gs = g;
                               if (n.needs_input_grad(1))
                                 go = -g * binary_tt(op == Op::Rem ? Op::FloorDiv : Op::TruncDiv,
                                                     old, o);
                               break;
                             default: break;
                           }
                           return std::vector<Tensor>{
                               n.needs_input_grad(0) ? gs : Tensor(),
                               n.needs_input_grad(1) ? detail::sum_to(go, other_shape) : Tensor()};
                         },
                         {other_saved, self_old});
  return self;
}

Tensor& inplace_s(Op op, Tensor& self, const Scalar& s, const char* no_grad_op = nullptr) {
  detail::check_inplace(self, (std::string(op_name(op)) + "_").c_str());
  Dtype ct = compute_type(op, self.dtype(), detail::promote_scalar(self.dtype(), s));
  if (is_floating_point(ct) && !is_floating_point(self.dtype()))
    fail(op_name(op), "result type ", torch_type_name(ct),
         " can't be cast to the desired output type ", dtype_name(self.dtype()));
  {
    NoGradGuard no_grad;  // the internal copy into self is not part of the graph
    binary(op, self, detail::scalar_tensor(s, ct), ct, self);
  }
  if (no_grad_op) {
    if (detail::should_record({&self}))
      detail::record_inplace(self, "NotImplemented", {&self}, refused_backward(no_grad_op));
    return self;
  }
  if (const char* name = node_name(op, 1))
    detail::record_inplace(self, name, {&self}, [op, s](const Node&, const Tensor& g) {
      if (op == Op::FloorDiv || op == Op::TruncDiv) return std::vector<Tensor>{g * 0.0};
      return std::vector<Tensor>{op == Op::Mul ? g * s : op == Op::Div ? g / s : g};
    });
  return self;
}

using detail::kSaveInput;
using detail::kSaveResult;
using detail::unary_float;

// The kernel of `op` on t's device, over t's elements computed in float32, into a new tensor
// of `out_dtype` (float32, or bool for the predicates), rounded to `result_dtype` (t's 2-byte
// float dtype, or out_dtype), laid out as torch's (detail::elementwise_strides): a view that fills
// a block of its storage in another order than row-major (x.t()) is computed over that block in
// memory order and its result takes its strides; any other view that is not row-major is first
// gathered into a float32 block of the result's layout. A row-major view's elements are gathered
// by the kernel itself (and on a GPU, any view but a block). Either way each element's bits are
// those of its contiguous copy's.
Tensor unary_kernel(const Tensor& t, const char* fn, backend::UnaryOp op, Dtype out_dtype,
                    Dtype result_dtype) {
  if (!t.defined()) fail(fn, "undefined tensor argument");
  NoGradGuard no_grad;  // unary_float records the op on t itself
  // On a GPU (whose copies between layouts go through the host) only a block keeps its layout.
  const bool block = detail::is_non_overlapping_dense(t);
  Shape layout = detail::elementwise_strides(t);
  if (!t.is_cpu() && !block) layout.clear();
  Tensor src = t;
  bool gathered = false;
  if (!layout.empty()) {
    if (block) {
      src = detail::make_view(t, {t.numel()}, {1}, t.storage_offset());
    } else {
      src = detail::make_tensor(fn, {t.numel()}, Dtype::Float32, /*zero=*/false, t.device());
      src.impl()->sizes = t.shape();
      src.impl()->strides = layout;
      src.copy_(t);
      src.impl()->sizes = {t.numel()};
      src.impl()->strides = {1};
      gathered = true;
    }
  }
  src = src.to(Dtype::Float32);
  const auto kernel =
      backend::pick(fn, src.device(), Dtype::Float32, backend::cpu::unary, backend::cuda::unary);
  // The kernel (pick refuses devices without one) writes every element: out is not cleared. A
  // float32 result of a gathered view overwrites what it was computed from.
  Tensor out = gathered && out_dtype == Dtype::Float32
                   ? src
                   : detail::make_tensor(fn, src.shape(), out_dtype, /*zero=*/false, src.device());
  kernel({op, &src.shape(), src.impl()->storage->data, src.storage_offset(), &src.strides(),
          out.device_data()});
  if (result_dtype != out_dtype) out = out.to(result_dtype);
  if (!layout.empty()) {  // out is new and held nowhere else: it takes the layout in place
    out.impl()->sizes = t.shape();
    out.impl()->strides = layout;
  }
  return out;
}

}  // namespace

Tensor detail::unary_float(const Tensor& t, const char* fn, backend::UnaryOp op, UnaryGrad grad,
                           int saves, const char* node) {
  // bfloat16 and float16 compute in float32 and round each result back (they never require
  // grad, so nothing is recorded for them).
  if (is_reduced_float(t.dtype())) return unary_kernel(t, fn, op, Dtype::Float32, t.dtype());
  Tensor out = unary_kernel(t, fn, op, Dtype::Float32, Dtype::Float32);
  std::string name = node ? std::string(node) : std::string(fn) + "Backward0";
  if (!node) name[0] = char(std::toupper(name[0]));
  return detail::record(out, name, {&t},
                        [grad](const Node& n, const Tensor& g) {
                          return std::vector<Tensor>{grad(g, n.saved_tensor(0), n.saved_tensor(1))};
                        },
                        {saves & kSaveInput ? t : Tensor(), saves & kSaveResult ? out : Tensor()});
}

namespace {

// sign(x) as float: -1, 0 or 1 (abs's derivative, 0 at 0 as torch's).
Tensor sign(const Tensor& x) { return (x > Scalar(0)).float_() - (x < Scalar(0)).float_(); }

Tensor unary_pred(const Tensor& t, const char* fn, backend::UnaryOp op) {
  return unary_kernel(t, fn, op, Dtype::Bool, Dtype::Bool);
}

}  // namespace

Tensor operator+(const Tensor& a, const Tensor& b) { return binary_tt(Op::Add, a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return binary_tt(Op::Sub, a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return binary_tt(Op::Mul, a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return binary_tt(Op::Div, a, b); }
Tensor operator+(const Tensor& a, Scalar b) { return binary_ts(Op::Add, a, b); }
Tensor operator-(const Tensor& a, Scalar b) { return binary_ts(Op::Sub, a, b); }
Tensor operator*(const Tensor& a, Scalar b) { return binary_ts(Op::Mul, a, b); }
Tensor operator/(const Tensor& a, Scalar b) { return binary_ts(Op::Div, a, b); }
Tensor operator+(Scalar a, const Tensor& b) { return binary_st(Op::Add, a, b); }
Tensor operator-(Scalar a, const Tensor& b) { return binary_st(Op::Sub, a, b); }
Tensor operator*(Scalar a, const Tensor& b) { return binary_st(Op::Mul, a, b); }
Tensor operator/(Scalar a, const Tensor& b) { return binary_st(Op::Div, a, b); }
Tensor operator-(const Tensor& a) { return a.neg(); }
Tensor operator==(const Tensor& a, const Tensor& b) { return binary_tt(Op::Eq, a, b); }
Tensor operator!=(const Tensor& a, const Tensor& b) { return binary_tt(Op::Ne, a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return binary_tt(Op::Lt, a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return binary_tt(Op::Le, a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return binary_tt(Op::Gt, a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return binary_tt(Op::Ge, a, b); }
Tensor operator==(const Tensor& a, Scalar b) { return binary_ts(Op::Eq, a, b); }
Tensor operator!=(const Tensor& a, Scalar b) { return binary_ts(Op::Ne, a, b); }
Tensor operator<(const Tensor& a, Scalar b) { return binary_ts(Op::Lt, a, b); }
Tensor operator<=(const Tensor& a, Scalar b) { return binary_ts(Op::Le, a, b); }
Tensor operator>(const Tensor& a, Scalar b) { return binary_ts(Op::Gt, a, b); }
Tensor operator>=(const Tensor& a, Scalar b) { return binary_ts(Op::Ge, a, b); }
Tensor operator&(const Tensor& a, const Tensor& b) {
  if (a.dtype() != Dtype::Bool || b.dtype() != Dtype::Bool)
    fail("logical_and", "expects bool tensors, got ", detail::tensor_desc(a), " and ",
         detail::tensor_desc(b));
  return binary_tt(Op::And, a, b);
}
Tensor operator|(const Tensor& a, const Tensor& b) {
  if (a.dtype() != Dtype::Bool || b.dtype() != Dtype::Bool)
    fail("logical_or", "expects bool tensors, got ", detail::tensor_desc(a), " and ",
         detail::tensor_desc(b));
  return binary_tt(Op::Or, a, b);
}
Tensor operator~(const Tensor& a) {
  if (a.dtype() != Dtype::Bool)
    fail("bitwise_not", "only bool tensors are supported, got ", detail::tensor_desc(a));
  return a.logical_not();
}

Tensor add(const Tensor& a, const Tensor& b) { return a + b; }
Tensor sub(const Tensor& a, const Tensor& b) { return a - b; }
Tensor mul(const Tensor& a, const Tensor& b) { return a * b; }
Tensor div(const Tensor& a, const Tensor& b) { return a / b; }
Tensor maximum(const Tensor& a, const Tensor& b) { return binary_tt(Op::Max, a, b); }

namespace {
// torch.div's rounding_mode: none (true division), "trunc" or "floor".
std::optional<Op> rounding_op(std::optional<std::string_view> mode) {
  if (!mode) return std::nullopt;
  if (*mode == "floor") return Op::FloorDiv;
  if (*mode == "trunc") return Op::TruncDiv;
  fail("div", "expected rounding_mode to be one of None, 'trunc', or 'floor' but found '", *mode,
       "'");
}
}  // namespace

Tensor floor_divide(const Tensor& a, const Tensor& b) {
  return binary_tt(Op::FloorDiv, a, b, "floor_divide");
}
Tensor floor_divide(const Tensor& a, Scalar b) {
  return binary_ts(Op::FloorDiv, a, b, "floor_divide");
}
Tensor floor_divide(Scalar a, const Tensor& b) {
  return binary_st(Op::FloorDiv, a, b, "floor_divide");
}
Tensor remainder(const Tensor& a, const Tensor& b) { return binary_tt(Op::Rem, a, b); }
Tensor remainder(const Tensor& a, Scalar b) { return binary_ts(Op::Rem, a, b); }
Tensor remainder(Scalar a, const Tensor& b) { return binary_st(Op::Rem, a, b, "remainder"); }
Tensor fmod(const Tensor& a, const Tensor& b) { return binary_tt(Op::Fmod, a, b); }
Tensor fmod(const Tensor& a, Scalar b) { return binary_ts(Op::Fmod, a, b); }
Tensor div(const Tensor& a, const Tensor& b, std::optional<std::string_view> rounding_mode) {
  const std::optional<Op> op = rounding_op(rounding_mode);
  return op ? binary_tt(*op, a, b) : a / b;
}
Tensor div(const Tensor& a, Scalar b, std::optional<std::string_view> rounding_mode) {
  const std::optional<Op> op = rounding_op(rounding_mode);
  return op ? binary_ts(*op, a, b) : a / b;
}
Tensor div(Scalar a, const Tensor& b, std::optional<std::string_view> rounding_mode) {
  const std::optional<Op> op = rounding_op(rounding_mode);
  return op ? binary_st(*op, a, b) : a / b;
}

Tensor Tensor::floor_divide(const Tensor& o) const { return attn::floor_divide(*this, o); }
Tensor Tensor::floor_divide(Scalar o) const { return attn::floor_divide(*this, o); }
Tensor Tensor::remainder(const Tensor& o) const { return attn::remainder(*this, o); }
Tensor Tensor::remainder(Scalar o) const { return attn::remainder(*this, o); }
Tensor Tensor::fmod(const Tensor& o) const { return attn::fmod(*this, o); }
Tensor Tensor::fmod(Scalar o) const { return attn::fmod(*this, o); }
Tensor Tensor::div(const Tensor& o, std::optional<std::string_view> rounding_mode) const {
  return attn::div(*this, o, rounding_mode);
}
Tensor Tensor::div(Scalar o, std::optional<std::string_view> rounding_mode) const {
  return attn::div(*this, o, rounding_mode);
}
Tensor& Tensor::floor_divide_(const Tensor& o) {
  return inplace(Op::FloorDiv, *this, o, "floor_divide");
}
Tensor& Tensor::floor_divide_(Scalar o) {
  return inplace_s(Op::FloorDiv, *this, o, "floor_divide");
}
Tensor& Tensor::remainder_(const Tensor& o) { return inplace(Op::Rem, *this, o); }
Tensor& Tensor::remainder_(Scalar o) { return inplace_s(Op::Rem, *this, o); }
Tensor& Tensor::fmod_(const Tensor& o) { return inplace(Op::Fmod, *this, o); }
Tensor& Tensor::fmod_(Scalar o) { return inplace_s(Op::Fmod, *this, o); }
Tensor& Tensor::div_(const Tensor& o, std::optional<std::string_view> rounding_mode) {
  const std::optional<Op> op = rounding_op(rounding_mode);
  return op ? inplace(*op, *this, o) : div_(o);
}
Tensor& Tensor::div_(Scalar o, std::optional<std::string_view> rounding_mode) {
  const std::optional<Op> op = rounding_op(rounding_mode);
  return op ? inplace_s(*op, *this, o) : div_(o);
}
Tensor minimum(const Tensor& a, const Tensor& b) { return binary_tt(Op::Min, a, b); }
Tensor pow(const Tensor& a, Scalar e) { return a.pow(e); }
Tensor pow(Scalar base, const Tensor& e) { return binary_st(Op::Pow, base, e); }
Tensor exp(const Tensor& t) { return t.exp(); }
Tensor log(const Tensor& t) { return t.log(); }
Tensor sqrt(const Tensor& t) { return t.sqrt(); }
Tensor abs(const Tensor& t) { return t.abs(); }
Tensor tanh(const Tensor& t) { return t.tanh(); }
Tensor cos(const Tensor& t) { return t.cos(); }
Tensor sin(const Tensor& t) { return t.sin(); }

Tensor& Tensor::add_(const Tensor& o) { return inplace(Op::Add, *this, o); }
Tensor& Tensor::add_(Scalar o) { return inplace_s(Op::Add, *this, o); }
Tensor& Tensor::sub_(const Tensor& o) { return inplace(Op::Sub, *this, o); }
Tensor& Tensor::sub_(Scalar o) { return inplace_s(Op::Sub, *this, o); }
Tensor& Tensor::mul_(const Tensor& o) { return inplace(Op::Mul, *this, o); }
Tensor& Tensor::mul_(Scalar o) { return inplace_s(Op::Mul, *this, o); }
Tensor& Tensor::div_(const Tensor& o) { return inplace(Op::Div, *this, o); }
Tensor& Tensor::div_(Scalar o) { return inplace_s(Op::Div, *this, o); }

Tensor Tensor::pow(Scalar e) const { return binary_ts(Op::Pow, *this, e); }
Tensor Tensor::pow(const Tensor& e) const { return binary_tt(Op::Pow, *this, e); }

Tensor Tensor::exp() const {
  return unary_float(
      *this, "exp", backend::UnaryOp::Exp,
      [](const Tensor& g, const Tensor&, const Tensor& y) { return g * y; }, kSaveResult);
}
Tensor Tensor::log() const {
  return unary_float(
      *this, "log", backend::UnaryOp::Log,
      [](const Tensor& g, const Tensor& x, const Tensor&) { return g / x; }, kSaveInput);
}
Tensor Tensor::sqrt() const {
  return unary_float(
      *this, "sqrt", backend::UnaryOp::Sqrt,
      [](const Tensor& g, const Tensor&, const Tensor& y) { return g / (y * 2.0); }, kSaveResult);
}
Tensor Tensor::rsqrt() const {
  return unary_float(
      *this, "rsqrt", backend::UnaryOp::Rsqrt,
      [](const Tensor& g, const Tensor&, const Tensor& y) { return g * (y * y * y) * -0.5; },
      kSaveResult);
}
Tensor Tensor::tanh() const {
  return unary_float(
      *this, "tanh", backend::UnaryOp::Tanh,
      [](const Tensor& g, const Tensor&, const Tensor& y) { return g * (1.0 - y * y); },
      kSaveResult);
}
Tensor Tensor::cos() const {
  return unary_float(
      *this, "cos", backend::UnaryOp::Cos,
      [](const Tensor& g, const Tensor& x, const Tensor&) { return g * -x.sin(); }, kSaveInput);
}
Tensor Tensor::sin() const {
  return unary_float(
      *this, "sin", backend::UnaryOp::Sin,
      [](const Tensor& g, const Tensor& x, const Tensor&) { return g * x.cos(); }, kSaveInput);
}
Tensor Tensor::sigmoid() const {
  return unary_float(
      *this, "sigmoid", backend::UnaryOp::Sigmoid,
      [](const Tensor& g, const Tensor&, const Tensor& y) { return g * (y * (1.0 - y)); },
      kSaveResult);
}
Tensor Tensor::abs() const {
  if (dtype() == Dtype::Bool) fail("abs", "not implemented for bool tensors");
  if (dtype() == Dtype::Int64) return where(*this < Scalar(0), -*this, *this);
  return unary_float(
      *this, "abs", backend::UnaryOp::Abs,
      [](const Tensor& g, const Tensor& x, const Tensor&) { return g * sign(x); }, kSaveInput);
}
Tensor Tensor::neg() const {
  if (dtype() == Dtype::Bool)
    fail("neg", "negation, the `-` operator, on a bool tensor is not supported; use ~");
  if (dtype() == Dtype::Int64) return binary_st(Op::Sub, Scalar(0), *this);
  return unary_float(
      *this, "neg", backend::UnaryOp::Neg,
      [](const Tensor& g, const Tensor&, const Tensor&) { return -g; }, 0);
}
Tensor Tensor::relu() const {
  if (!attn::is_floating_point(dtype())) return where(*this > Scalar(0), *this, zeros_like(*this));
  return unary_float(
      *this, "relu", backend::UnaryOp::Relu,
      [](const Tensor& g, const Tensor&, const Tensor& y) { return g * (y > Scalar(0)).float_(); },
      kSaveResult);  // -0, NaN kept
}
Tensor Tensor::ceil() const {
  if (!attn::is_floating_point(dtype())) return clone();
  return unary_float(
      *this, "ceil", backend::UnaryOp::Ceil,
      [](const Tensor& g, const Tensor&, const Tensor&) { return zeros(g.shape()); }, 0);
}
Tensor Tensor::floor() const {
  if (!attn::is_floating_point(dtype())) return clone();
  return unary_float(
      *this, "floor", backend::UnaryOp::Floor,
      [](const Tensor& g, const Tensor&, const Tensor&) { return zeros(g.shape()); }, 0);
}
Tensor Tensor::isnan() const { return unary_pred(*this, "isnan", backend::UnaryOp::IsNan); }
Tensor Tensor::isinf() const { return unary_pred(*this, "isinf", backend::UnaryOp::IsInf); }
Tensor Tensor::isfinite() const {
  return unary_pred(*this, "isfinite", backend::UnaryOp::IsFinite);
}
Tensor Tensor::logical_not() const { return *this == Scalar(0); }

namespace {

backend::StridedOperand operand(const Tensor& t) {
  return {t.impl()->storage->data, t.storage_offset(), &t.strides()};
}

// out = cond ? a : b, each broadcast to out's shape (a view: strides of 0) and read in place, in
// one pass (backend::Select). out may be b itself (masked_fill_). cond is bool; a, b and out share
// a dtype.
void select_into(const char* fn, Tensor& out, const Tensor& cond, const Tensor& a,
                 const Tensor& b) {
  const Shape& s = out.shape();
  const Tensor c = cond.expand(s), av = a.expand(s), bv = b.expand(s);
  const auto kernel =
      backend::pick(fn, out.device(), out.dtype(), backend::cpu::select, backend::cuda::select);
  kernel({&s, operand(c), operand(av), operand(bv), out.impl()->storage->data, out.storage_offset(),
          &out.strides()});
}

void check_mask(const char* fn, const Tensor& mask) {
  if (!mask.defined() || mask.dtype() != Dtype::Bool)
    fail(fn, "mask must be a bool tensor, got ",
         mask.defined() ? detail::tensor_desc(mask) : std::string("undefined"));
}

void check_fill_value(const char* fn, Dtype dtype, Scalar value) {
  if (!attn::is_floating_point(dtype) && value.is_floating() && !std::isfinite(value.to_double()))
    fail(fn, "value ", value.to_double(), " cannot be converted to ", dtype_name(dtype),
         " without overflow");
}

Tensor where_impl(const Tensor& cond, const Tensor& a, const Tensor& b) {
  if (cond.dtype() != Dtype::Bool)
    fail("where", "condition must be a bool tensor, got ", detail::tensor_desc(cond));
  Shape s =
      broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  Dtype dt = detail::promote(a.dtype(), b.dtype());
  Tensor out = detail::make_tensor("where", s, dt, /*zero=*/false);  // every element written
  NoGradGuard no_grad;  // the dtype conversions are not part of the graph
  select_into("where", out, cond, a.to(dt), b.to(dt));
  return out;
}

}  // namespace

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  Tensor out = where_impl(cond, a, b);
  // Each operand gets the gradient where it was picked, summed back to its shape.
  return detail::record(
      out, "WhereBackward0", {&a, &b},
      [sa = a.shape(), sb = b.shape()](const Node& n, const Tensor& g) {
        const Tensor c = n.saved_tensor(0);
        const Tensor z = zeros({});  // broadcast: read as a zero everywhere
        return std::vector<Tensor>{
            n.needs_input_grad(0) ? detail::sum_to(where(c, g, z), sa) : Tensor(),
            n.needs_input_grad(1) ? detail::sum_to(where(c, z, g), sb) : Tensor()};
      },
      {cond});
}

Tensor& Tensor::masked_fill_(const Tensor& mask, Scalar value) {
  detail::check_inplace(*this, "masked_fill_");
  check_mask("masked_fill_", mask);
  Shape s;
  try {
    s = broadcast_shapes(shape(), mask.shape(), "masked_fill_");
  } catch (const Error&) {
    s = {};
  }
  if (s != shape())
    fail("masked_fill_", "mask ", shape_str(mask.shape()), " does not broadcast to the tensor ",
         shape_str(shape()));
  check_fill_value("masked_fill_", dtype(), value);
  // A mask in this tensor's own memory is read before any of it is written.
  const Tensor m = mask.impl()->storage == impl()->storage ? mask.clone() : mask;
  select_into("masked_fill_", *this, m, detail::scalar_tensor(value, dtype()), *this);
  detail::bump_version(*this);
  // The filled elements no longer depend on the old value.
  detail::record_inplace(*this, "MaskedFillBackward0", {this},
                         [](const Node& n, const Tensor& g) {
                           return std::vector<Tensor>{g.masked_fill(n.saved_tensor(0), 0.0)};
                         },
                         {mask});
  return *this;
}

Tensor Tensor::masked_fill(const Tensor& mask, Scalar value) const {
  check_mask("masked_fill", mask);
  Shape s = broadcast_shapes(shape(), mask.shape(), "masked_fill");
  check_fill_value("masked_fill", dtype(), value);
  Tensor out = detail::make_tensor("masked_fill", s, dtype(), /*zero=*/false);
  {
    NoGradGuard no_grad;
    select_into("masked_fill", out, mask, detail::scalar_tensor(value, dtype()), *this);
  }
  // The filled elements no longer depend on the input; the rest is summed back to its shape.
  return detail::record(
      out, "MaskedFillBackward0", {this},
      [sa = shape()](const Node& n, const Tensor& g) {
        return std::vector<Tensor>{detail::sum_to(g.masked_fill(n.saved_tensor(0), 0.0), sa)};
      },
      {mask});
}

Tensor masked_fill(const Tensor& t, const Tensor& mask, Scalar value) {
  return t.masked_fill(mask, value);
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
  Shape s = broadcast_shapes(a.shape(), b.shape(), "allclose");
  Tensor x = a.to(Dtype::Float32).expand(s).contiguous();
  Tensor y = b.to(Dtype::Float32).expand(s).contiguous();
  const float* px = x.data_ptr<float>();
  const float* py = y.data_ptr<float>();
  for (int64_t i = 0; i < x.numel(); ++i) {
    double u = px[i], v = py[i];
    if (std::isnan(u) || std::isnan(v)) {
      if (equal_nan && std::isnan(u) && std::isnan(v)) continue;
      return false;
    }
    if (u == v) continue;  // equal infinities
    // As torch's isclose: the difference must be finite (inf vs -inf is never close).
    double diff = std::fabs(u - v);
    if (!std::isfinite(diff) || !(diff <= atol + std::fabs(rtol * v))) return false;
  }
  return true;
}

bool equal(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape()) return false;
  return (a == b).all();
}

}  // namespace attn

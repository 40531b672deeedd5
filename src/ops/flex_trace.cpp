// flex_attention's tracing: flex::Expr values record what a score_mod or mask_mod computes into a
// program (backend/flex_program.h); flex::Captured reads a tensor's elements; the Modifier keeps
// the program and the captured tensors.
#include <attn/flex.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <string>
#include <utility>

#include "../tensor/internal.h"
#include "flex_internal.h"

namespace attn::flex {

namespace kf = kernels::flex;
using detail::fail;

namespace {

constexpr const char* kTrace = "flex_attention";

kf::Type kt(Expr::Type t) { return static_cast<kf::Type>(t); }
Expr::Type et(kf::Type t) { return static_cast<Expr::Type>(t); }
const char* type_name(Expr::Type t) {
  return t == Expr::Type::Bool ? "bool" : t == Expr::Type::Int ? "int32" : "float32";
}

int32_t append(Trace& tr, kf::Node node) {
  tr.program.nodes.push_back(node);
  return int32_t(tr.program.nodes.size() - 1);
}

Expr make(const std::shared_ptr<Trace>& tr, kf::Op op, Expr::Type type, int32_t a, int32_t b = -1,
          int32_t c = -1) {
  kf::Node n;
  n.op = op, n.type = kt(type), n.a = a, n.b = b, n.c = c;
  return Expr(tr, append(*tr, n), type);
}

// The trace shared by the operands (an error for values of two traces).
std::shared_ptr<Trace> trace_of(std::initializer_list<const Expr*> xs) {
  std::shared_ptr<Trace> tr;
  for (const Expr* x : xs) {
    if (!x->trace()) continue;
    if (tr && tr != x->trace())
      fail(kTrace, "a value of one traced function was used in another (", x->str(), ")");
    tr = x->trace();
  }
  return tr;
}

// x's node in tr (a constant becomes a Const node), converted to `to`.
int32_t place(const std::shared_ptr<Trace>& tr, const Expr& x, Expr::Type to) {
  int32_t node = x.node();
  if (x.is_constant()) {
    kf::Node n;
    n.op = kf::Op::Const, n.type = kt(to);
    if (to == Expr::Type::Float)
      n.fvalue = float(x.constant());
    else if (to == Expr::Type::Int)
      n.ivalue = int32_t(std::clamp(x.constant(), -2147483648.0, 2147483647.0));
    else
      n.ivalue = x.constant() != 0.0;
    return append(*tr, n);
  }
  if (x.type() == to) return node;
  if (to == Expr::Type::Float) return make(tr, kf::Op::ToFloat, to, node).node();
  if (to == Expr::Type::Int && x.type() == Expr::Type::Bool) return node;  // 0 / 1 already
  return make(tr, to == Expr::Type::Int ? kf::Op::ToInt : kf::Op::ToBool, to, node).node();
}

Expr::Type promote(const Expr& a, const Expr& b) {
  if (a.type() == Expr::Type::Float || b.type() == Expr::Type::Float) return Expr::Type::Float;
  return Expr::Type::Int;
}

// Constant folding of two constants (so that constant sub-expressions need no trace).
double fold(kf::Op op, double a, double b) {
  switch (op) {
    case kf::Op::Add: return a + b;
    case kf::Op::Sub: return a - b;
    case kf::Op::Mul: return a * b;
    case kf::Op::Div: return a / b;
    case kf::Op::FloorDiv: return b == 0 ? 0.0 : std::floor(a / b);
    case kf::Op::Mod: return b == 0 ? 0.0 : a - std::floor(a / b) * b;
    case kf::Op::Min: return std::min(a, b);
    case kf::Op::Max: return std::max(a, b);
    case kf::Op::Pow: return std::pow(a, b);
    case kf::Op::Eq: return a == b;
    case kf::Op::Ne: return a != b;
    case kf::Op::Lt: return a < b;
    case kf::Op::Le: return a <= b;
    case kf::Op::Gt: return a > b;
    case kf::Op::Ge: return a >= b;
    case kf::Op::And: return double(int64_t(a) & int64_t(b));
    case kf::Op::Or: return double(int64_t(a) | int64_t(b));
    case kf::Op::Xor: return double(int64_t(a) ^ int64_t(b));
    default: return 0.0;
  }
}

Expr constant(double value, Expr::Type t) {
  if (t == Expr::Type::Float) return Expr(value);
  if (t == Expr::Type::Int) {  // int32 arithmetic wraps, as the kernels' does
    const double v = std::isfinite(value) && std::fabs(value) < 9e18 ? std::trunc(value) : 0.0;
    return Expr(int64_t(int32_t(uint32_t(uint64_t(int64_t(v))))));
  }
  return Expr(value != 0.0);
}

// A binary operation with operands converted to `in` and a result of type `out`.
Expr binary(kf::Op op, const Expr& a, const Expr& b, Expr::Type in, Expr::Type out) {
  auto tr = trace_of({&a, &b});
  if (!tr) return constant(fold(op, a.constant(), b.constant()), out);
  const int32_t na = place(tr, a, in), nb = place(tr, b, in);
  return make(tr, op, out, na, nb);
}

Expr arith(kf::Op op, const Expr& a, const Expr& b) {
  const Expr::Type t = promote(a, b);
  return binary(op, a, b, t, t);
}

Expr compare(kf::Op op, const Expr& a, const Expr& b) {
  return binary(op, a, b, promote(a, b), Expr::Type::Bool);
}

Expr logical(kf::Op op, const Expr& a, const Expr& b) {
  if (a.type() == Expr::Type::Float || b.type() == Expr::Type::Float)
    fail(kTrace, kf::op_name(op), " of float32 values (", a.str(), ", ", b.str(),
         "): &, | and ^ take bool or integer values");
  const Expr::Type t = a.type() == Expr::Type::Bool && b.type() == Expr::Type::Bool
                           ? Expr::Type::Bool
                           : Expr::Type::Int;
  return binary(op, a, b, t, t);
}

// A floating-point function (integers are converted first, as torch does).
Expr math(kf::Op op, const Expr& a, double (*f)(double)) {
  if (a.is_constant()) return Expr(f(a.constant()));
  return make(a.trace(), op, Expr::Type::Float, place(a.trace(), a, Expr::Type::Float));
}

}  // namespace

Expr::Expr(double value) : type_(Type::Float), value_(value) {}
Expr::Expr(float value) : type_(Type::Float), value_(value) {}
Expr::Expr(int value) : type_(Type::Int), value_(value) {}
Expr::Expr(int64_t value) : type_(Type::Int), value_(double(value)) {
  if (value < INT32_MIN || value > INT32_MAX)
    fail(kTrace, "the integer constant ", value, " is outside int32: traced integers are 32-bit");
}
Expr::Expr(bool value) : type_(Type::Bool), value_(value ? 1.0 : 0.0) {}

std::string Expr::str() const {
  std::ostringstream os;
  if (is_constant())
    os << (type_ == Type::Bool ? (value_ != 0.0 ? "True" : "False") : std::to_string(value_));
  else
    os << "%" << node_ << " (" << type_name(type_) << ")";
  return os.str();
}

Expr operator+(const Expr& a, const Expr& b) { return arith(kf::Op::Add, a, b); }
Expr operator-(const Expr& a, const Expr& b) { return arith(kf::Op::Sub, a, b); }
Expr operator*(const Expr& a, const Expr& b) { return arith(kf::Op::Mul, a, b); }
Expr operator/(const Expr& a, const Expr& b) {
  return binary(kf::Op::Div, a, b, Expr::Type::Float, Expr::Type::Float);
}
Expr operator%(const Expr& a, const Expr& b) { return arith(kf::Op::Mod, a, b); }
Expr floor_divide(const Expr& a, const Expr& b) { return arith(kf::Op::FloorDiv, a, b); }
Expr minimum(const Expr& a, const Expr& b) { return arith(kf::Op::Min, a, b); }
Expr maximum(const Expr& a, const Expr& b) { return arith(kf::Op::Max, a, b); }
Expr pow(const Expr& a, const Expr& b) {
  return binary(kf::Op::Pow, a, b, Expr::Type::Float, Expr::Type::Float);
}
Expr operator==(const Expr& a, const Expr& b) { return compare(kf::Op::Eq, a, b); }
Expr operator!=(const Expr& a, const Expr& b) { return compare(kf::Op::Ne, a, b); }
Expr operator<(const Expr& a, const Expr& b) { return compare(kf::Op::Lt, a, b); }
Expr operator<=(const Expr& a, const Expr& b) { return compare(kf::Op::Le, a, b); }
Expr operator>(const Expr& a, const Expr& b) { return compare(kf::Op::Gt, a, b); }
Expr operator>=(const Expr& a, const Expr& b) { return compare(kf::Op::Ge, a, b); }
Expr operator&(const Expr& a, const Expr& b) { return logical(kf::Op::And, a, b); }
Expr operator|(const Expr& a, const Expr& b) { return logical(kf::Op::Or, a, b); }
Expr operator^(const Expr& a, const Expr& b) { return logical(kf::Op::Xor, a, b); }

Expr operator-(const Expr& a) {
  if (a.type() == Expr::Type::Bool)
    fail(kTrace, "negation of a bool value (", a.str(), "): use ~ or logical_not");
  if (a.is_constant()) return constant(-a.constant(), a.type());
  return make(a.trace(), kf::Op::Neg, a.type(), a.node());
}

Expr operator!(const Expr& a) {
  if (a.type() != Expr::Type::Bool)
    fail(kTrace, "logical not of a ", type_name(a.type()), " value (", a.str(),
         "): compare it first (x != 0)");
  if (a.is_constant()) return Expr(a.constant() == 0.0);
  return make(a.trace(), kf::Op::Not, Expr::Type::Bool, a.node());
}
Expr operator~(const Expr& a) { return !a; }

Expr where(const Expr& condition, const Expr& a, const Expr& b) {
  if (condition.type() != Expr::Type::Bool)
    fail(kTrace, "where: the condition must be bool, got ", condition.str());
  const Expr::Type t = a.type() == b.type() ? a.type() : promote(a, b);
  auto tr = trace_of({&condition, &a, &b});
  if (!tr)
    return condition.constant() != 0.0 ? constant(a.constant(), t) : constant(b.constant(), t);
  const int32_t c = place(tr, condition, Expr::Type::Bool);
  const int32_t na = place(tr, a, t), nb = place(tr, b, t);
  return make(tr, kf::Op::Where, t, c, na, nb);
}

Expr clamp(const Expr& x, const std::optional<Expr>& lo, const std::optional<Expr>& hi) {
  Expr r = x;
  if (lo) r = maximum(r, *lo);
  if (hi) r = minimum(r, *hi);
  return r;
}

Expr abs(const Expr& a) {
  if (a.type() == Expr::Type::Bool) return a;
  if (a.is_constant()) return constant(std::fabs(a.constant()), a.type());
  return make(a.trace(), kf::Op::Abs, a.type(), a.node());
}
Expr exp(const Expr& a) {
  return math(kf::Op::Exp, a, [](double x) { return std::exp(x); });
}
Expr log(const Expr& a) {
  return math(kf::Op::Log, a, [](double x) { return std::log(x); });
}
Expr sqrt(const Expr& a) {
  return math(kf::Op::Sqrt, a, [](double x) { return std::sqrt(x); });
}
Expr rsqrt(const Expr& a) { return Expr(1.0) / sqrt(a); }
Expr tanh(const Expr& a) {
  return math(kf::Op::Tanh, a, [](double x) { return std::tanh(x); });
}
Expr sigmoid(const Expr& a) {
  return math(kf::Op::Sigmoid, a, [](double x) { return 1.0 / (1.0 + std::exp(-x)); });
}
Expr sin(const Expr& a) {
  return math(kf::Op::Sin, a, [](double x) { return std::sin(x); });
}
Expr cos(const Expr& a) {
  return math(kf::Op::Cos, a, [](double x) { return std::cos(x); });
}
Expr floor(const Expr& a) {
  if (a.type() != Expr::Type::Float) return a;
  return math(kf::Op::Floor, a, [](double x) { return std::floor(x); });
}
Expr ceil(const Expr& a) {
  if (a.type() != Expr::Type::Float) return a;
  return math(kf::Op::Ceil, a, [](double x) { return std::ceil(x); });
}
Expr to(const Expr& a, Expr::Type type) {
  if (a.type() == type) return a;
  if (a.is_constant()) {
    const double v = a.constant();
    return constant(type == Expr::Type::Int ? std::trunc(v) : v, type);
  }
  return Expr(a.trace(), place(a.trace(), a, type), type);
}

// ---- captured tensors ---------------------------------------------------------------------------

Captured::Captured(Tensor tensor) : tensor_(std::move(tensor)) {
  if (!tensor_.defined()) fail(kTrace, "a captured tensor is undefined");
  if (!tensor_.device().is_cpu())
    fail(kTrace, "captured tensor ", detail::tensor_desc(tensor_), " is on ",
         tensor_.device().str(), ": traced modifiers run on the CPU only");
  const Dtype d = tensor_.dtype();
  if (d != Dtype::Float32 && d != Dtype::Int64 && d != Dtype::Bool)
    fail(kTrace, "captured tensor ", detail::tensor_desc(tensor_),
         ": expected float32, int64 or bool");
  if (tensor_.dim() > 8)
    fail(kTrace, "captured tensor ", detail::tensor_desc(tensor_), " has more than 8 dims");
  int64_t span = 0;  // the largest element offset: the kernels index with int32
  for (int64_t d = 0; d < tensor_.dim(); ++d) {
    if (tensor_.size(d) >= (int64_t(1) << 31) || tensor_.stride(d) < 0)
      fail(kTrace, "captured tensor ", detail::tensor_desc(tensor_), " is too large");
    span += (tensor_.size(d) - 1) * tensor_.stride(d);
  }
  if (span >= (int64_t(1) << 31))
    fail(kTrace, "captured tensor ", detail::tensor_desc(tensor_),
         " spans more than 2^31 elements: the kernels index captured tensors with int32");
}

Expr Captured::at(const std::vector<Expr>& index, const Expr& context) const {
  if (int64_t(index.size()) != tensor_.dim())
    fail(kTrace, "captured tensor ", detail::tensor_desc(tensor_), " indexed with ", index.size(),
         " indices: a modifier must read single elements (one index per dimension)");
  std::shared_ptr<Trace> tr;
  for (const Expr& x : index) {
    if (x.type() == Expr::Type::Float)
      fail(kTrace, "captured tensor ", detail::tensor_desc(tensor_), " indexed with float ",
           x.str(), ": indices must be integers");
    if (x.trace()) {
      if (tr && tr != x.trace()) fail(kTrace, "indices from two traced functions");
      tr = x.trace();
    }
  }
  if (!tr) tr = context.trace();
  if (!tr)
    fail(kTrace, "captured tensor ", detail::tensor_desc(tensor_),
         " indexed with constants only: index it with b, h, q_idx or kv_idx (or read the "
         "element before the trace)");
  // The tensor's slot (one per tensor, however often it is read).
  const void* data = tensor_.numel() ? tensor_.raw_data() : nullptr;
  int32_t slot = -1;
  for (size_t i = 0; i < tr->tensors.size(); ++i) {
    const Tensor& t = tr->tensors[i];
    if (t.raw_data() == data && t.shape() == tensor_.shape() && t.strides() == tensor_.strides() &&
        t.dtype() == tensor_.dtype())
      slot = int32_t(i);
  }
  if (slot < 0) {
    kf::Captured c;
    c.kind = tensor_.dtype() == Dtype::Float32 ? kf::Captured::Kind::Float32
             : tensor_.dtype() == Dtype::Int64 ? kf::Captured::Kind::Int64
                                               : kf::Captured::Kind::Bool;
    c.sizes.assign(tensor_.shape().begin(), tensor_.shape().end());
    c.strides.assign(tensor_.strides().begin(), tensor_.strides().end());
    c.name = "captured tensor " + std::to_string(tr->tensors.size()) + " " +
             detail::tensor_desc(tensor_);
    tr->program.tensors.push_back(c);
    tr->tensors.push_back(tensor_);
    slot = int32_t(tr->tensors.size() - 1);
  }
  const int32_t first = int32_t(tr->program.load_index.size());
  for (const Expr& x : index) tr->program.load_index.push_back(place(tr, x, Expr::Type::Int));
  kf::Node n;
  n.op = kf::Op::Load;
  n.type = tensor_.dtype() == Dtype::Float32 ? kf::Type::Float
           : tensor_.dtype() == Dtype::Int64 ? kf::Type::Int
                                             : kf::Type::Bool;
  n.tensor = slot, n.first = first;
  return Expr(tr, append(*tr, n), et(n.type));
}

// ---- tracing ------------------------------------------------------------------------------------

std::vector<Expr> begin_trace(bool mask) {
  auto tr = std::make_shared<Trace>();
  tr->mask = mask;
  std::vector<Expr> leaves;
  auto leaf = [&](kf::Op op, Expr::Type t) {
    kf::Node n;
    n.op = op, n.type = kt(t);
    leaves.emplace_back(tr, append(*tr, n), t);
    tr->leaves.push_back(leaves.back().node());
  };
  if (!mask) leaf(kf::Op::Score, Expr::Type::Float);
  leaf(kf::Op::Batch, Expr::Type::Int);
  leaf(kf::Op::Head, Expr::Type::Int);
  leaf(kf::Op::QIdx, Expr::Type::Int);
  leaf(kf::Op::KvIdx, Expr::Type::Int);
  return leaves;
}

Modifier finish_trace(const std::vector<Expr>& leaves, const Expr& result, bool mask) {
  const std::shared_ptr<Trace>& tr = leaves.at(0).trace();
  if (result.trace() && result.trace() != tr)
    fail(kTrace, "the traced function returned a value of another trace");
  if (mask) {
    if (result.type() == Expr::Type::Float)
      fail(kTrace, "mask_mod returned a float32 value (", result.str(),
           "): it must return a bool (True: may attend)");
    tr->program.output = place(tr, result, Expr::Type::Bool);
  } else {
    tr->program.output = place(tr, result, Expr::Type::Float);
  }
  // Nodes after the output (dead code of the function) are kept: they are never read.
  tr->program.nodes.resize(size_t(tr->program.output + 1));
  return Modifier(tr);
}

Modifier trace_score_mod(const ScoreMod& fn) {
  if (!fn) return Modifier();
  const std::vector<Expr> l = begin_trace(false);
  return finish_trace(l, fn(l[0], l[1], l[2], l[3], l[4]), false);
}

Modifier trace_mask_mod(const MaskMod& fn) {
  if (!fn) fail(kTrace, "mask_mod is empty");
  const std::vector<Expr> l = begin_trace(true);
  return finish_trace(l, fn(l[0], l[1], l[2], l[3]), true);
}

MaskMod and_masks(std::vector<MaskMod> masks) {
  return [masks](Expr b, Expr h, Expr q, Expr kv) {
    Expr r(true);
    for (const MaskMod& m : masks) r = r & m(b, h, q, kv);
    return r;
  };
}
MaskMod or_masks(std::vector<MaskMod> masks) {
  return [masks](Expr b, Expr h, Expr q, Expr kv) {
    Expr r(false);
    for (const MaskMod& m : masks) r = r | m(b, h, q, kv);
    return r;
  };
}
MaskMod noop_mask() {
  return [](Expr, Expr, Expr, Expr) { return Expr(true); };
}

bool Modifier::is_mask() const { return impl_ && impl_->mask; }

std::vector<Tensor> Modifier::captured() const {
  return impl_ ? impl_->tensors : std::vector<Tensor>();
}

std::string Modifier::str() const {
  if (!impl_) return "(none)";
  std::ostringstream os;
  const kf::Program& p = impl_->program;
  for (size_t k = 0; k < p.nodes.size(); ++k) {
    const kf::Node& n = p.nodes[k];
    os << "%" << k << " = " << kf::op_name(n.op);
    if (n.op == kf::Op::Const)
      os << " "
         << (n.type == kf::Type::Float ? std::to_string(n.fvalue) : std::to_string(n.ivalue));
    if (n.op == kf::Op::Load) {
      os << " t" << n.tensor << "[";
      for (size_t d = 0; d < p.tensors[size_t(n.tensor)].sizes.size(); ++d)
        os << (d ? ", %" : "%") << p.load_index[size_t(n.first) + d];
      os << "]";
    }
    for (int32_t x : {n.a, n.b, n.c})
      if (x >= 0) os << " %" << x;
    os << " : " << type_name(et(n.type)) << "\n";
  }
  os << "return %" << p.output << "\n";
  return os.str();
}

}  // namespace attn::flex

// flex_attention: tracing score_mod / mask_mod into programs (backend/flex_program.h), the block
// mask, and the op with its autograd node over the fused CPU kernels.
#include <attn/autograd.h>
#include <attn/flex.h>
#include <attn/ops.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <sstream>
#include <tuple>
#include <utility>

#include "../backend/cpu/flex_eval.h"
#include "../backend/cpu/sdpa_fused.h"
#include "../backend/cpu/sdpa_fused_backward.h"
#include "../backend/cpu/workspace.h"
#include "../tensor/internal.h"

namespace attn {

namespace kf = kernels::flex;
using detail::fail;

namespace flex {

// The program being recorded and the tensors it captured (program.tensors[i] describes
// tensors[i]; its pointers are refreshed at every call).
struct Trace {
  kf::Program program;
  std::vector<Tensor> tensors;
  bool mask = false;
  std::vector<int32_t> leaves;  // score (score traces), b, h, q_idx, kv_idx
};

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
double fold(kf::Op op, double a, double b, Expr::Type t) {
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
    default: (void)t; return 0.0;
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
  if (!tr) return constant(fold(op, a.constant(), b.constant(), out), out);
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

}  // namespace flex

// ---- the programs as a call sees them -----------------------------------------------------------

namespace {

constexpr const char* kFn = "flex_attention";

// The program of a modifier with its captured tensors' current pointers and grad flags.
kf::Program bind(const flex::Modifier& m) {
  kf::Program p = m.impl()->program;
  const std::vector<Tensor>& ts = m.impl()->tensors;
  for (size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    p.tensors[i].data = t.numel() ? t.raw_data() : nullptr;
    p.tensors[i].requires_grad = t.requires_grad() && is_grad_enabled();
  }
  return p;
}

[[noreturn]] void index_error(const kf::IndexError& e, const kf::Program& p, const char* what) {
  const kf::Captured& t = p.tensors[size_t(e.tensor)];
  throw IndexError(detail::msg(kFn, what, " reads ", t.name, " at index ", e.index, " of dim ",
                               e.dim, " (size ", e.size, "): out of range"));
}

}  // namespace

BlockMask::BlockMask(flex::Modifier mask_mod, int64_t B_, int64_t H_, int64_t Q_LEN_,
                     int64_t KV_LEN_, int64_t q_block, int64_t kv_block,
                     std::vector<uint8_t> fine_kinds, int64_t fine_q, int64_t fine_kv)
    : B(B_),
      H(H_),
      Q_LEN(Q_LEN_),
      KV_LEN(KV_LEN_),
      Q_BLOCK_SIZE(q_block),
      KV_BLOCK_SIZE(kv_block),
      mask_mod_(std::move(mask_mod)),
      fine_kinds_(std::move(fine_kinds)),
      fine_q_(fine_q),
      fine_kv_(fine_kv) {
  // The blocks from the fine ones: empty (full) when all of theirs are.
  const int64_t nq = num_q_blocks(), nkv = num_kv_blocks();
  const int64_t nfq = (Q_LEN + fine_q - 1) / fine_q, nfkv = (KV_LEN + fine_kv - 1) / fine_kv;
  const int64_t rq = q_block / fine_q, rkv = kv_block / fine_kv;
  kinds_.assign(size_t(B * H * nq * nkv), 0);
  for (int64_t bh = 0; bh < B * H; ++bh)
    for (int64_t qb = 0; qb < nq; ++qb)
      for (int64_t kb = 0; kb < nkv; ++kb) {
        bool all_empty = true, all_full = true;
        for (int64_t fq = qb * rq; fq < std::min(nfq, (qb + 1) * rq); ++fq)
          for (int64_t fk = kb * rkv; fk < std::min(nfkv, (kb + 1) * rkv); ++fk) {
            const auto k = kf::TileKind(fine_kinds_[size_t((bh * nfq + fq) * nfkv + fk)]);
            all_empty &= k == kf::TileKind::Empty;
            all_full &= k == kf::TileKind::Full;
          }
        kinds_[size_t((bh * nq + qb) * nkv + kb)] = uint8_t(all_empty  ? kf::TileKind::Empty
                                                            : all_full ? kf::TileKind::Full
                                                                       : kf::TileKind::Partial);
      }
}

BlockMask create_block_mask(const flex::MaskMod& mask_mod, int64_t B, int64_t H, int64_t Q_LEN,
                            int64_t KV_LEN, int64_t BLOCK_SIZE) {
  return create_block_mask(flex::trace_mask_mod(mask_mod), B, H, Q_LEN, KV_LEN, BLOCK_SIZE,
                           BLOCK_SIZE);
}

BlockMask create_block_mask(const flex::Modifier& mask_mod, int64_t B, int64_t H, int64_t Q_LEN,
                            int64_t KV_LEN, int64_t Q_BLOCK_SIZE, int64_t KV_BLOCK_SIZE) {
  const char* fn = "create_block_mask";
  if (!mask_mod.defined() || !mask_mod.is_mask())
    fail(fn, "mask_mod must be a traced mask_mod (b, h, q_idx, kv_idx) -> bool");
  if (B < 1 || H < 1 || Q_LEN < 1 || KV_LEN < 1)
    fail(fn, "B, H, Q_LEN and KV_LEN must be positive, got ", B, ", ", H, ", ", Q_LEN, ", ",
         KV_LEN);
  if (Q_BLOCK_SIZE < 1 || KV_BLOCK_SIZE < 1)
    fail(fn, "BLOCK_SIZE must be positive, got (", Q_BLOCK_SIZE, ", ", KV_BLOCK_SIZE, ")");
  const int64_t big = int64_t(1) << 30;
  if (B >= big || H >= big || Q_LEN >= big || KV_LEN >= big)
    fail(fn, "sizes must be below 2^30 (indices are int32), got ", B, ", ", H, ", ", Q_LEN, ", ",
         KV_LEN);
  const int64_t fq = Q_BLOCK_SIZE % 64 == 0 ? 64 : Q_BLOCK_SIZE;
  const int64_t fkv = KV_BLOCK_SIZE % 64 == 0 ? 64 : KV_BLOCK_SIZE;
  const int64_t nfq = (Q_LEN + fq - 1) / fq, nfkv = (KV_LEN + fkv - 1) / fkv;
  std::vector<uint8_t> kinds(size_t(B * H * nfq * nfkv));
  const kf::Program prog = bind(mask_mod);
  kf::ErrorSlot errors;
  kf::classify_blocks(prog, B, H, Q_LEN, KV_LEN, fq, fkv, kinds.data(), errors);
  if (errors.error().set) index_error(errors.error(), prog, "mask_mod");
  return BlockMask(mask_mod, B, H, Q_LEN, KV_LEN, Q_BLOCK_SIZE, KV_BLOCK_SIZE, std::move(kinds), fq,
                   fkv);
}

namespace {
// torch's (num_blocks, indices) of the blocks of one kind, int64 here (attn has no int32).
std::pair<Tensor, Tensor> block_lists(const BlockMask& m, kf::TileKind kind) {
  const int64_t nq = m.num_q_blocks(), nkv = m.num_kv_blocks(), rows = m.B * m.H * nq;
  Tensor num = zeros({m.B, m.H, nq}, Dtype::Int64);
  Tensor idx = zeros({m.B, m.H, nq, nkv}, Dtype::Int64);
  int64_t* pn = num.data_ptr<int64_t>();
  int64_t* pi = idx.data_ptr<int64_t>();
  for (int64_t r = 0; r < rows; ++r) {
    int64_t c = 0;
    for (int64_t kb = 0; kb < nkv; ++kb)
      if (kf::TileKind(m.kinds()[size_t(r * nkv + kb)]) == kind) pi[r * nkv + c++] = kb;
    pn[r] = c;
  }
  return {num, idx};
}
}  // namespace

Tensor BlockMask::kv_num_blocks() const { return block_lists(*this, kf::TileKind::Partial).first; }
Tensor BlockMask::kv_indices() const { return block_lists(*this, kf::TileKind::Partial).second; }
Tensor BlockMask::full_kv_num_blocks() const {
  return block_lists(*this, kf::TileKind::Full).first;
}
Tensor BlockMask::full_kv_indices() const { return block_lists(*this, kf::TileKind::Full).second; }

Tensor BlockMask::to_dense() const {
  Tensor d = zeros({B, H, num_q_blocks(), num_kv_blocks()}, Dtype::Bool);
  uint8_t* p = static_cast<uint8_t*>(d.raw_data());
  for (size_t i = 0; i < kinds_.size(); ++i) p[i] = kinds_[i] != uint8_t(kf::TileKind::Empty);
  return d;
}

double BlockMask::sparsity() const {
  if (kinds_.empty()) return 0.0;
  size_t empty = 0;
  for (uint8_t k : kinds_) empty += k == uint8_t(kf::TileKind::Empty);
  return 100.0 * double(empty) / double(kinds_.size());
}

std::string BlockMask::str() const {
  std::ostringstream os;
  os << "BlockMask(shape=(" << B << ", " << H << ", " << Q_LEN << ", " << KV_LEN
     << "), BLOCK_SIZE=(" << Q_BLOCK_SIZE << ", " << KV_BLOCK_SIZE << "), sparsity=" << sparsity()
     << "%)";
  return os.str();
}

// ---- flex_attention -----------------------------------------------------------------------------

namespace {

struct Call {
  Tensor q, k, v;  // (B, H, L, D) with unit inner stride; k, v expanded over B
  int64_t B, H, H_kv, L_q, L_k, D, D_v;
  double scale;
};

Call validate(const Tensor& q, const Tensor& k, const Tensor& v, const flex::Modifier& score_mod,
              const BlockMask* bm, const FlexOptions& o) {
  for (auto [t, name] : {std::pair{&q, "query"}, {&k, "key"}, {&v, "value"}}) {
    if (!t->defined()) fail(kFn, name, " is undefined");
    if (t->dim() != 4) fail(kFn, name, " must be (B, H, L, D), got ", shape_str(t->shape()));
    if (t->dtype() != Dtype::Float32)
      fail(kFn, name, " must be float32, got ", detail::tensor_desc(*t));
    if (!t->device().is_cpu())
      throw NotImplementedError(detail::msg(kFn, name, " is on ", t->device().str(),
                                            ": flex_attention runs on the CPU only"));
  }
  Call c;
  c.B = q.size(0), c.H = q.size(1), c.L_q = q.size(2), c.D = q.size(3);
  c.H_kv = k.size(1), c.L_k = k.size(2), c.D_v = v.size(3);
  if (k.size(3) != c.D)
    fail(kFn, "query ", shape_str(q.shape()), " and key ", shape_str(k.shape()),
         " differ in head dim");
  if (k.size(0) != v.size(0) || k.size(1) != v.size(1) || k.size(2) != v.size(2))
    fail(kFn, "key ", shape_str(k.shape()), " and value ", shape_str(v.shape()),
         " differ in batch, heads or length");
  if (k.size(0) != c.B && k.size(0) != 1)
    fail(kFn, "key ", shape_str(k.shape()), " has batch ", k.size(0), ", query ",
         shape_str(q.shape()), " has ", c.B);
  if (c.H_kv != c.H) {
    if (!o.enable_gqa)
      fail(kFn, "query has ", c.H, " heads and key ", c.H_kv, ": pass enable_gqa=True");
    if (c.H_kv == 0 || c.H % c.H_kv != 0)
      fail(kFn, "query heads ", c.H, " must be a multiple of key/value heads ", c.H_kv);
  }
  const int64_t big = int64_t(1) << 30;
  if (c.B >= big || c.H >= big || c.L_q >= big || c.L_k >= big)
    fail(kFn, "sizes must be below 2^30 (indices are int32)");
  if (o.scale && !(std::isfinite(*o.scale) && *o.scale > 0.0))
    fail(kFn, "scale must be finite and positive, got ", *o.scale);
  c.scale = o.scale ? *o.scale : 1.0 / std::sqrt(double(std::max<int64_t>(c.D, 1)));
  if (score_mod.defined() && score_mod.is_mask())
    fail(kFn, "score_mod is a traced mask_mod: pass it through create_block_mask");
  if (bm) {
    if (bm->Q_LEN != c.L_q || bm->KV_LEN != c.L_k)
      fail(kFn, "block_mask was made for Q_LEN ", bm->Q_LEN, " and KV_LEN ", bm->KV_LEN,
           ", the inputs have ", c.L_q, " and ", c.L_k);
    if (bm->B != 1 && bm->B != c.B)
      fail(kFn, "block_mask has B ", bm->B, ", the inputs ", c.B, " (1 shares it)");
    if (bm->H != 1 && bm->H != c.H)
      fail(kFn, "block_mask has H ", bm->H, ", the inputs ", c.H, " (1 shares it)");
  }
  auto prep = [&](const Tensor& t) {
    Tensor u = t.stride(3) == 1 ? t : t.contiguous();
    return u.size(0) == c.B ? u : u.expand({c.B, u.size(1), u.size(2), u.size(3)});
  };
  c.q = prep(q), c.k = prep(k), c.v = prep(v);
  return c;
}

kernels::SdpaParams params(const Call& c, const Tensor& out, const Tensor& lse,
                           const kf::FlexCall* fx) {
  kernels::SdpaParams p;
  p.B = c.B, p.H = c.H, p.H_kv = c.H_kv, p.L_q = c.L_q, p.L_k = c.L_k, p.D = c.D, p.D_v = c.D_v;
  p.scale = c.scale;
  p.q = c.q.data_ptr<float>();
  p.k = c.k.data_ptr<float>();
  p.v = c.v.data_ptr<float>();
  p.q_batch_stride = c.q.stride(0), p.q_head_stride = c.q.stride(1), p.q_row_stride = c.q.stride(2);
  p.k_batch_stride = c.k.stride(0), p.k_head_stride = c.k.stride(1), p.k_row_stride = c.k.stride(2);
  p.v_batch_stride = c.v.stride(0), p.v_head_stride = c.v.stride(1), p.v_row_stride = c.v.stride(2);
  p.out = const_cast<float*>(out.data_ptr<float>());
  p.out_batch_stride = out.stride(0), p.out_head_stride = out.stride(1);
  p.out_row_stride = out.stride(2);
  p.lse = const_cast<float*>(lse.data_ptr<float>());
  p.flex = fx;
  return p;
}

// The kernels' view of a call's modifiers and block mask.
struct Flex {
  kf::Program score, mask;
  kf::FlexCall call;
  kf::ErrorSlot errors;
  Flex(const flex::Modifier& sm, const BlockMask* bm) {
    if (sm.defined()) score = bind(sm), call.score = &score;
    if (bm) {
      mask = bind(bm->mask_mod());
      call.mask = &mask;
      call.blocks = bm->fine_kinds().data();
      call.blocks_B = bm->B, call.blocks_H = bm->H;
      call.q_block = bm->fine_q(), call.kv_block = bm->fine_kv();
      call.nq = (bm->Q_LEN + call.q_block - 1) / call.q_block;
      call.nkv = (bm->KV_LEN + call.kv_block - 1) / call.kv_block;
    }
    call.errors = &errors;
  }
  void check() const {
    if (!errors.error().set) return;
    const kf::IndexError& e = errors.error();
    const bool in_score = e.program == &score;
    index_error(e, in_score ? score : mask, in_score ? "score_mod" : "mask_mod");
  }
};

template <typename F>
void run_kernel(F&& f) {
  try {
    f();
  } catch (const kernels::WorkspaceError& e) {
    detail::fail_workspace(kFn, e.bytes, e.purpose);
  } catch (const std::bad_alloc&) {
    throw AllocationError(detail::msg(kFn, "cannot allocate the kernel's scratch: out of memory"));
  }
}

}  // namespace

std::tuple<Tensor, Tensor> flex_attention_with_lse(const Tensor& q, const Tensor& k,
                                                   const Tensor& v, const flex::Modifier& score_mod,
                                                   const BlockMask* block_mask,
                                                   const FlexOptions& options) {
  const Call c = validate(q, k, v, score_mod, block_mask, options);
  Tensor out = detail::make_tensor(kFn, {c.B, c.H, c.L_q, c.D_v}, Dtype::Float32, true);
  Tensor lse = detail::make_tensor(kFn, {c.B, c.H, c.L_q}, Dtype::Float32, true);
  {
    Flex fx(score_mod, block_mask);
    const kernels::SdpaParams p = params(c, out, lse, &fx.call);
    run_kernel([&] { kernels::sdpa_fused_forward(p); });
    fx.check();
  }

  // The graph: q, k, v and the captured tensors of score_mod (the mask's take no gradient).
  const std::vector<Tensor> captured =
      score_mod.defined() ? score_mod.captured() : std::vector<Tensor>();
  std::vector<const Tensor*> inputs{&q, &k, &v};
  for (const Tensor& t : captured) inputs.push_back(&t);
  if (!detail::should_record(inputs)) return {out, lse};
  std::shared_ptr<const BlockMask> bm =
      block_mask ? std::make_shared<const BlockMask>(*block_mask) : nullptr;
  const Shape k_shape = k.shape(), v_shape = v.shape();
  const bool expanded_kv = k.size(0) != c.B;
  out = detail::record(
      out, "FlexAttentionBackward0", inputs,
      [score_mod, bm, options, k_shape, v_shape, expanded_kv](const Node& n, const Tensor& g) {
        const Tensor q = n.saved_tensor(0), k = n.saved_tensor(1), v = n.saved_tensor(2);
        const Tensor out = n.saved_tensor(3), lse = n.saved_tensor(4);
        const Call c = validate(q, k, v, score_mod, bm.get(), options);
        Tensor dq = zeros({c.B, c.H, c.L_q, c.D}, Dtype::Float32);
        Tensor dk = zeros({c.B, c.H_kv, c.L_k, c.D}, Dtype::Float32);
        Tensor dv = zeros({c.B, c.H_kv, c.L_k, c.D_v}, Dtype::Float32);
        const Tensor dout = g.stride(3) == 1 ? g : g.contiguous();
        Flex fx(score_mod, bm.get());
        const std::vector<Tensor> caps =
            score_mod.defined() ? score_mod.captured() : std::vector<Tensor>();
        std::vector<Tensor> dcaps(caps.size());
        for (size_t i = 0; i < caps.size(); ++i)
          if (n.needs_input_grad(3 + i) && caps[i].dtype() == Dtype::Float32) {
            dcaps[i] = zeros(caps[i].shape(), Dtype::Float32);
            fx.score.tensors[i].requires_grad = true;
            fx.call.tensor_grads.push_back(dcaps[i].data_ptr<float>());
          } else {
            fx.score.tensors[i].requires_grad = false;
            fx.call.tensor_grads.push_back(nullptr);
          }
        kernels::SdpaBackwardParams bp;
        bp.fwd = params(c, out, lse, &fx.call);
        bp.dout = dout.data_ptr<float>();
        bp.dout_batch_stride = dout.stride(0), bp.dout_head_stride = dout.stride(1);
        bp.dout_row_stride = dout.stride(2);
        bp.dq = dq.data_ptr<float>();
        bp.dq_batch_stride = dq.stride(0), bp.dq_head_stride = dq.stride(1);
        bp.dq_row_stride = dq.stride(2);
        bp.dk = dk.data_ptr<float>();
        bp.dk_batch_stride = dk.stride(0), bp.dk_head_stride = dk.stride(1);
        bp.dk_row_stride = dk.stride(2);
        bp.dv = dv.data_ptr<float>();
        bp.dv_batch_stride = dv.stride(0), bp.dv_head_stride = dv.stride(1);
        bp.dv_row_stride = dv.stride(2);
        run_kernel([&] { kernels::sdpa_fused_backward(bp); });
        fx.check();
        if (expanded_kv) {  // k, v of batch 1 broadcast over B: their gradients summed back
          dk = dk.sum(Shape{0}, true);
          dv = dv.sum(Shape{0}, true);
        }
        std::vector<Tensor> grads{n.needs_input_grad(0) ? dq : Tensor(),
                                  n.needs_input_grad(1) ? dk.reshape(k_shape) : Tensor(),
                                  n.needs_input_grad(2) ? dv.reshape(v_shape) : Tensor()};
        for (Tensor& d : dcaps) grads.push_back(d);
        return grads;
      },
      {q, k, v, out, lse});
  return {out, lse};
}

Tensor flex_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                      const flex::Modifier& score_mod, const BlockMask* block_mask,
                      const FlexOptions& options) {
  return std::get<0>(flex_attention_with_lse(q, k, v, score_mod, block_mask, options));
}

Tensor flex_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                      const flex::ScoreMod& score_mod, const BlockMask* block_mask,
                      const FlexOptions& options) {
  return flex_attention(q, k, v, flex::trace_score_mod(score_mod), block_mask, options);
}

}  // namespace attn

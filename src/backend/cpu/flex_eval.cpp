// Tile-wise evaluation of flex_attention's traced modifiers; see flex_eval.h.
#include "flex_eval.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>

#include "isa.h"
#include "threads.h"
#include "vmath.h"

namespace attn::kernels::flex {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// The shape of a node's value over a tile: bit 0 varies along the outer dimension, bit 1 along
// the inner one.
constexpr uint8_t kScalar = 0, kOuter = 1, kInner = 2, kFull = 3;

// The registers of one operation: its output and up to three operands, as float or int views.
struct Regs {
  float* fo;
  int32_t* io;
  const float *fa, *fb, *fc;
  const int32_t *ia, *ib, *ic;
};

// Python's (and torch's) floor division and remainder of integers; 0 for a zero divisor.
inline int32_t floor_div(int32_t a, int32_t b) {
  if (b == 0) return 0;
  if (b == -1) return int32_t(0u - uint32_t(a));  // INT32_MIN / -1 wraps
  const int32_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
inline int32_t floor_mod(int32_t a, int32_t b) {
  if (b == 0 || b == -1) return 0;
  const int32_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

// One operation over n elements. `t` is the result's type, `ta` the first operand's; an operand
// flagged scalar (SA, SB, SC) is its element 0 for every e (no broadcast copy).
#define FA(e) (SA ? fa[0] : fa[e])
#define FB(e) (SB ? fb[0] : fb[e])
#define FC(e) (SC ? fc[0] : fc[e])
#define IA(e) (SA ? ia[0] : ia[e])
#define IB(e) (SB ? ib[0] : ib[e])
#define IC(e) (SC ? ic[0] : ic[e])
template <bool SA, bool SB, bool SC>
ATTN_ISA_INLINE void exec_t(Op op, Type t, Type ta, const Regs& r, int n) {
  float* fo = r.fo;
  int32_t* io = r.io;
  const float *fa = r.fa, *fb = r.fb, *fc = r.fc;
  const int32_t *ia = r.ia, *ib = r.ib, *ic = r.ic;
  const bool fl = ta == Type::Float;
  switch (op) {
    case Op::Neg:
      if (fl)
        for (int e = 0; e < n; ++e) fo[e] = -FA(e);
      else
        for (int e = 0; e < n; ++e) io[e] = int32_t(0u - uint32_t(IA(e)));  // wraps, as int32
      break;
    case Op::Abs:
      if (fl)
        for (int e = 0; e < n; ++e) fo[e] = std::fabs(FA(e));
      else
        for (int e = 0; e < n; ++e) io[e] = IA(e) < 0 ? int32_t(0u - uint32_t(IA(e))) : IA(e);
      break;
    case Op::Exp:
      for (int e = 0; e < n; ++e) fo[e] = std::exp(FA(e));
      break;
    case Op::Log:
      for (int e = 0; e < n; ++e) fo[e] = std::log(FA(e));
      break;
    case Op::Sqrt:
      for (int e = 0; e < n; ++e) fo[e] = std::sqrt(FA(e));
      break;
    case Op::Tanh:
      for (int e = 0; e < n; ++e) fo[e] = vmath::tanh(FA(e));
      break;
    case Op::Sigmoid:
      for (int e = 0; e < n; ++e) fo[e] = 1.0f / (1.0f + std::exp(-FA(e)));
      break;
    case Op::Sin:
      for (int e = 0; e < n; ++e) fo[e] = std::sin(FA(e));
      break;
    case Op::Cos:
      for (int e = 0; e < n; ++e) fo[e] = std::cos(FA(e));
      break;
    case Op::Floor:
      for (int e = 0; e < n; ++e) fo[e] = std::floor(FA(e));
      break;
    case Op::Ceil:
      for (int e = 0; e < n; ++e) fo[e] = std::ceil(FA(e));
      break;
    case Op::Not:
      for (int e = 0; e < n; ++e) io[e] = IA(e) == 0;
      break;
    case Op::ToFloat:
      for (int e = 0; e < n; ++e) fo[e] = float(IA(e));
      break;
    case Op::ToInt:  // torch's .to(int32): toward zero; NaN gives 0, values beyond saturate
      if (fl)
        for (int e = 0; e < n; ++e) {
          const float x = FA(e);
          io[e] = x != x                ? 0
                  : x >= 2147483648.0f  ? INT32_MAX
                  : x <= -2147483648.0f ? INT32_MIN
                                        : int32_t(x);
        }
      else
        for (int e = 0; e < n; ++e) io[e] = IA(e);
      break;
    case Op::ToBool:
      if (fl)
        for (int e = 0; e < n; ++e) io[e] = FA(e) != 0.0f;
      else
        for (int e = 0; e < n; ++e) io[e] = IA(e) != 0;
      break;
#define ATTN_FLEX_ARITH(OP, EXPR_F, EXPR_I) \
  case Op::OP:                              \
    if (fl)                                 \
      for (int e = 0; e < n; ++e) {         \
        const float a = FA(e), b = FB(e);   \
        fo[e] = EXPR_F;                     \
      }                                     \
    else                                    \
      for (int e = 0; e < n; ++e) {         \
        const int32_t a = IA(e), b = IB(e); \
        io[e] = EXPR_I;                     \
      }                                     \
    break;
      ATTN_FLEX_ARITH(Add, a + b, int32_t(uint32_t(a) + uint32_t(b)))
      ATTN_FLEX_ARITH(Sub, a - b, int32_t(uint32_t(a) - uint32_t(b)))
      ATTN_FLEX_ARITH(Mul, a * b, int32_t(uint32_t(a) * uint32_t(b)))
      ATTN_FLEX_ARITH(FloorDiv, std::floor(a / b), floor_div(a, b))
      ATTN_FLEX_ARITH(Mod, a - std::floor(a / b) * b, floor_mod(a, b))
      ATTN_FLEX_ARITH(Min, (a < b || a != a) ? a : b, a < b ? a : b)
      ATTN_FLEX_ARITH(Max, (a > b || a != a) ? a : b, a > b ? a : b)
#undef ATTN_FLEX_ARITH
    case Op::Div:
      for (int e = 0; e < n; ++e) fo[e] = FA(e) / FB(e);
      break;
    case Op::Pow:
      for (int e = 0; e < n; ++e) fo[e] = std::pow(FA(e), FB(e));
      break;
#define ATTN_FLEX_CMP(OP, CMP)                                      \
  case Op::OP:                                                      \
    if (fl)                                                         \
      for (int e = 0; e < n; ++e) io[e] = int32_t(FA(e) CMP FB(e)); \
    else                                                            \
      for (int e = 0; e < n; ++e) io[e] = int32_t(IA(e) CMP IB(e)); \
    break;
      ATTN_FLEX_CMP(Eq, ==)
      ATTN_FLEX_CMP(Ne, !=)
      ATTN_FLEX_CMP(Lt, <)
      ATTN_FLEX_CMP(Le, <=)
      ATTN_FLEX_CMP(Gt, >)
      ATTN_FLEX_CMP(Ge, >=)
#undef ATTN_FLEX_CMP
    case Op::And:
      for (int e = 0; e < n; ++e) io[e] = IA(e) & IB(e);
      break;
    case Op::Or:
      for (int e = 0; e < n; ++e) io[e] = IA(e) | IB(e);
      break;
    case Op::Xor:
      for (int e = 0; e < n; ++e) io[e] = IA(e) ^ IB(e);
      break;
    case Op::Where:
      if (t == Type::Float)
        for (int e = 0; e < n; ++e) fo[e] = IA(e) ? FB(e) : FC(e);
      else
        for (int e = 0; e < n; ++e) io[e] = IA(e) ? IB(e) : IC(e);
      break;
    default: break;  // leaves and loads: Evaluator::run
  }
}
#undef FA
#undef FB
#undef FC
#undef IA
#undef IB
#undef IC

ATTN_ISA_INLINE void exec_body(Op op, Type t, Type ta, const Regs& r, int n, int scalars) {
  switch (scalars) {
    case 0: return exec_t<false, false, false>(op, t, ta, r, n);
    case 1: return exec_t<true, false, false>(op, t, ta, r, n);
    case 2: return exec_t<false, true, false>(op, t, ta, r, n);
    case 3: return exec_t<true, true, false>(op, t, ta, r, n);
    case 4: return exec_t<false, false, true>(op, t, ta, r, n);
    case 5: return exec_t<true, false, true>(op, t, ta, r, n);
    case 6: return exec_t<false, true, true>(op, t, ta, r, n);
    default: return exec_t<true, true, true>(op, t, ta, r, n);
  }
}
ATTN_ISA_VARIANTS(void, exec, (Op op, Type t, Type ta, const Regs& r, int n, int scalars),
                  (op, t, ta, r, n, scalars))

// off[e] (= 0 first) += the element offset of index x[e] in a dimension of `size` (negative
// indices count from the end; one outside reads offset 0). Returns whether one was outside.
ATTN_ISA_INLINE bool load_offsets_body(const int32_t* x, int n, int32_t size, int32_t stride,
                                       int32_t* off, bool first, bool scalar) {
  if (scalar) {  // one index for every element
    const int32_t v = x[0] < 0 ? x[0] + size : x[0];
    const bool out = uint32_t(v) >= uint32_t(size);
    const int32_t add = out ? 0 : v * stride;
    for (int e = 0; e < n; ++e) off[e] = (first ? 0 : off[e]) + add;
    return out;
  }
  int32_t bad = 0;
  for (int e = 0; e < n; ++e) {
    const int32_t v = x[e] < 0 ? x[e] + size : x[e];
    const int32_t out = uint32_t(v) >= uint32_t(size);
    bad |= out;
    off[e] = (first ? 0 : off[e]) + (out ? 0 : v) * stride;
  }
  return bad != 0;
}
ATTN_ISA_VARIANTS(bool, load_offsets,
                  (const int32_t* x, int n, int32_t size, int32_t stride, int32_t* off, bool first,
                   bool scalar),
                  (x, n, size, stride, off, first, scalar))

ATTN_ISA_INLINE void gather_f32_body(const float* src, const int32_t* off, float* out, int n) {
  for (int e = 0; e < n; ++e) out[e] = src[off[e]];
}
ATTN_ISA_VARIANTS(void, gather_f32, (const float* src, const int32_t* off, float* out, int n),
                  (src, off, out, n))

// Whether d(op)/d(operand) can be non-zero: the differentiable operations on Float values.
bool differentiable(Op op) {
  switch (op) {
    case Op::Neg:
    case Op::Abs:
    case Op::Exp:
    case Op::Log:
    case Op::Sqrt:
    case Op::Tanh:
    case Op::Sigmoid:
    case Op::Sin:
    case Op::Cos:
    case Op::Add:
    case Op::Sub:
    case Op::Mul:
    case Op::Div:
    case Op::Min:
    case Op::Max:
    case Op::Pow:
    case Op::Where:
    case Op::Mod: return true;
    default: return false;
  }
}

}  // namespace

Evaluator::Evaluator(const Program& program, int capacity) : prog_(program), cap_(capacity) {
  const size_t N = program.nodes.size();
  slot_.assign(N, -1);
  adj_slot_.assign(N, -1);
  needs_grad_.assign(N, 0);
  int32_t nf = 0, ni = 0, na = 0;
  for (size_t k = 0; k < N; ++k) {
    const Node& node = program.nodes[k];
    if (node.op != Op::Score) slot_[k] = node.type == Type::Float ? nf++ : ni++;  // read in place
    bool g = false;
    if (node.op == Op::Score) g = true;
    if (node.op == Op::Load) g = program.tensors[size_t(node.tensor)].requires_grad;
    if (differentiable(node.op) && node.type == Type::Float)
      for (int32_t operand : {node.a, node.b, node.c})
        if (operand >= 0 && needs_grad_[size_t(operand)] &&
            program.nodes[size_t(operand)].type == Type::Float)
          g = true;
    needs_grad_[k] = g && node.type == Type::Float;
    if (needs_grad_[k]) adj_slot_[k] = na++;
  }
  // Registers are written before they are read: no zero fill (a call's set-up stays cheap).
  n_adj_ = na;
  fregs_ = std::make_unique_for_overwrite<float[]>(size_t(nf) * size_t(cap_) + 1);
  iregs_ = std::make_unique_for_overwrite<int32_t[]>(size_t(ni) * size_t(cap_) + 1);
  offsets_ = std::make_unique_for_overwrite<int32_t[]>(size_t(cap_));
  shape_.assign(N, kFull);
  mask_out_ = std::make_unique_for_overwrite<int32_t[]>(size_t(cap_));
  size_t max_rank = 1;
  for (const Captured& t : program.tensors) max_rank = std::max(max_rank, t.sizes.size());
  ftmp_ = std::make_unique_for_overwrite<float[]>(size_t(3) * size_t(cap_));
  itmp_ = std::make_unique_for_overwrite<int32_t[]>(size_t(3) * size_t(cap_));
  idx_tmp_ = std::make_unique_for_overwrite<int32_t[]>(max_rank * size_t(cap_));
}

// The number of values of a node of shape `sh` over the grid.
int length(uint8_t sh, const Grid& g) {
  return sh == kFull ? g.n() : sh == kOuter ? g.n_outer : sh == kInner ? g.ld : 1;
}

// Broadcast `v` of shape `from` to `to` (from is contained in to) over the grid: dst gets len(to)
// values.
template <typename T>
void expand(const T* v, uint8_t from, uint8_t to, const Grid& g, T* dst) {
  const int n = length(to, g), ld = g.ld;
  if (from == kScalar) {
    const T x = v[0];
    for (int e = 0; e < n; ++e) dst[e] = x;
  } else if (from == kOuter) {  // to == kFull
    for (int o = 0; o < g.n_outer; ++o) {
      const T x = v[o];
      T* row = dst + o * ld;
      for (int c = 0; c < ld; ++c) row[c] = x;
    }
  } else {  // kInner -> kFull
    for (int o = 0; o < g.n_outer; ++o) {
      T* row = dst + o * ld;
      for (int c = 0; c < ld; ++c) row[c] = v[c];
    }
  }
}

// The element offsets of a Load (its indices given at its own shape, `n` of them) into offsets_
// (an index outside its dimension is recorded and read as 0; negative indices count from the
// end, as Python's), then the values into the node's register.
void Evaluator::load(const Node& node, int n, const int32_t* const* index, uint32_t scalars,
                     size_t out_at) {
  const Captured& t = prog_.tensors[size_t(node.tensor)];
  const int rank = int(t.sizes.size());
  int32_t* off = offsets_.get();
  if (rank == 0) std::fill(off, off + n, 0);  // a 0-dim tensor: its one element
  for (int d = 0; d < rank; ++d) {
    const int32_t size = int32_t(t.sizes[size_t(d)]), stride = int32_t(t.strides[size_t(d)]);
    const bool scalar = scalars >> d & 1;
    if (load_offsets(index[d], n, size, stride, off, d == 0, scalar) && !error_.set)
      for (int e = 0; e < (scalar ? 1 : n); ++e) {  // the first bad index, for the message
        const int64_t x = index[d][e];
        if (x < -int64_t(size) || x >= size) {
          error_ = {true, &prog_, node.tensor, d, x, int64_t(size)};
          break;
        }
      }
  }
  const int32_t k = int32_t(&node - prog_.nodes.data());
  if (!t.data) {  // an empty tensor: every index is outside it
    if (!error_.set && n > 0 && rank > 0)
      error_ = {true, &prog_, node.tensor, 0, int64_t(index[0][0]), 0};
    if (t.kind == Captured::Kind::Float32)
      std::fill(f(k) + out_at, f(k) + out_at + n, 0.0f);
    else
      std::fill(i(k) + out_at, i(k) + out_at + n, 0);
    return;
  }
  switch (t.kind) {
    case Captured::Kind::Float32:
      gather_f32(static_cast<const float*>(t.data), off, f(k) + out_at, n);
      break;
    case Captured::Kind::Int64: {
      const int64_t* src = static_cast<const int64_t*>(t.data);
      int32_t* out = i(k) + out_at;
      for (int e = 0; e < n; ++e) out[e] = int32_t(src[off[e]]);
      break;
    }
    case Captured::Kind::Bool: {
      const uint8_t* src = static_cast<const uint8_t*>(t.data);
      int32_t* out = i(k) + out_at;
      for (int e = 0; e < n; ++e) out[e] = src[off[e]] != 0;
      break;
    }
  }
}

// Each node is computed at its shape: over the whole tile only when it depends on both the
// tile's rows and its columns (or on the score); a value of the rows alone (doc_id[q_idx],
// slopes[h]) is computed once per row and broadcast where a full-tile operation reads it. With
// `compact` false (the backward, whose adjoints are per element) every node is full.
void Evaluator::run(const Grid& g, const float* s, bool compact) {
  for (size_t k = 0; k < prog_.nodes.size(); ++k) {
    const Node& node = prog_.nodes[k];
    const int32_t kk = int32_t(k);
    uint8_t sh = kScalar;
    switch (node.op) {
      case Op::Score: sh = kFull; break;
      case Op::Batch:
      case Op::Const: sh = kScalar; break;
      case Op::Head: sh = g.h_outer ? kOuter : kInner; break;
      case Op::QIdx: sh = g.q_outer ? kOuter : kInner; break;
      case Op::KvIdx: sh = g.kv_outer ? kOuter : kInner; break;
      case Op::Load:
        for (int d = 0; d < int(prog_.tensors[size_t(node.tensor)].sizes.size()); ++d)
          sh |= shape_[size_t(prog_.load_index[size_t(node.first + d)])];
        break;
      default:
        for (int32_t x : {node.a, node.b, node.c})
          if (x >= 0) sh |= shape_[size_t(x)];
    }
    if (!compact) sh = kFull;
    shape_[k] = sh;
    const int len = length(sh, g);
    switch (node.op) {
      case Op::Score: score_ = s; break;  // read where it lies
      case Op::Batch: i(kk)[0] = g.b; break;
      case Op::Head:
      case Op::QIdx:
      case Op::KvIdx: {
        const int32_t* src = node.op == Op::Head ? g.h : node.op == Op::QIdx ? g.q : g.kv;
        const uint8_t own = node.op == Op::Head   ? (g.h_outer ? kOuter : kInner)
                            : node.op == Op::QIdx ? (g.q_outer ? kOuter : kInner)
                                                  : (g.kv_outer ? kOuter : kInner);
        if (own == sh)
          std::copy(src, src + len, i(kk));
        else
          expand(src, own, sh, g, i(kk));
        break;
      }
      case Op::Const:
        if (node.type == Type::Float)
          std::fill(f(kk), f(kk) + len, node.fvalue);
        else
          std::fill(i(kk), i(kk) + len, node.ivalue);
        break;
      case Op::Load: {  // indices of a narrower shape broadcast, scalars read as one value
        const int rank = int(prog_.tensors[size_t(node.tensor)].sizes.size());
        const int32_t* index[8];
        uint32_t scalars = 0;
        for (int d = 0; d < rank; ++d) {
          const int32_t x = prog_.load_index[size_t(node.first + d)];
          const uint8_t xs = shape_[size_t(x)];
          index[d] = i(x);
          if (xs == kScalar) {
            scalars |= 1u << d;
          } else if (xs != sh) {
            int32_t* dst = idx_tmp_.get() + size_t(d) * cap_;
            expand(i(x), xs, sh, g, dst);
            index[d] = dst;
          }
        }
        load(node, len, index, scalars, 0);
        break;
      }
      default: {
        // Operands of this node's shape are read as they are, scalars as one value, row-only or
        // column-only operands of a full node broadcast into scratch first.
        const Type ta = prog_.nodes[size_t(node.op == Op::Where ? node.b : node.a)].type;
        const int32_t ops[3] = {node.a, node.b, node.c};
        const float* fp[3] = {nullptr, nullptr, nullptr};
        const int32_t* ip[3] = {nullptr, nullptr, nullptr};
        int scalars = 0;
        for (int a = 0; a < 3; ++a) {
          const int32_t x = ops[a];
          if (x < 0) continue;
          const uint8_t xs = shape_[size_t(x)];
          if (xs == kScalar) scalars |= 1 << a;
          const bool wide = xs != sh && xs != kScalar;  // broadcast into scratch
          if (prog_.nodes[size_t(x)].type == Type::Float) {
            fp[a] = f(x);
            if (wide) {
              float* dst = ftmp_.get() + size_t(a) * cap_;
              expand(f(x), xs, sh, g, dst);
              fp[a] = dst;
            }
          } else {
            ip[a] = i(x);
            if (wide) {
              int32_t* dst = itmp_.get() + size_t(a) * cap_;
              expand(i(x), xs, sh, g, dst);
              ip[a] = dst;
            }
          }
        }
        const Regs r{node.type == Type::Float ? f(kk) : nullptr,
                     node.type == Type::Float ? nullptr : i(kk),
                     fp[0],
                     fp[1],
                     fp[2],
                     ip[0],
                     ip[1],
                     ip[2]};
        exec(node.op, node.type, ta, r, len, scalars);
      }
    }
  }
}

// A tile is evaluated in strips of whole outer rows, about kStrip elements each, so that every
// register of the program stays in the L1 cache.
constexpr int kStrip = 512;

Grid strip_of(const Grid& g, int o0, int rows) {
  Grid s = g;
  s.n_outer = rows;
  if (g.h_outer) s.h = g.h + o0;
  if (g.q_outer) s.q = g.q + o0;
  if (g.kv_outer) s.kv = g.kv + o0;
  return s;
}

int strip_rows(const Grid& g) { return std::max(1, kStrip / std::max(1, g.ld)); }

void Evaluator::apply_score(const Grid& g, float* s) {
  const int32_t out = prog_.output;
  const int step = strip_rows(g);
  for (int o0 = 0; o0 < g.n_outer; o0 += step) {
    const Grid sg = strip_of(g, o0, std::min(step, g.n_outer - o0));
    float* ss = s + size_t(o0) * size_t(g.ld);
    run(sg, ss, true);
    if (f(out) == ss) continue;  // score_mod returned the score itself
    if (shape_[size_t(out)] == kFull)
      std::copy(f(out), f(out) + sg.n(), ss);
    else
      expand(f(out), shape_[size_t(out)], kFull, sg, ss);
  }
}

const int32_t* Evaluator::eval_mask(const Grid& g) {
  run(g, nullptr, true);
  const int32_t out = prog_.output;
  if (shape_[size_t(out)] == kFull) return i(out);
  expand(i(out), shape_[size_t(out)], kFull, g, mask_out_.get());
  return mask_out_.get();
}

void Evaluator::apply_mask(const Grid& g, float* s) {
  const int step = strip_rows(g);
  for (int o0 = 0; o0 < g.n_outer; o0 += step) {
    const Grid sg = strip_of(g, o0, std::min(step, g.n_outer - o0));
    const int32_t* keep = eval_mask(sg);
    float* ss = s + size_t(o0) * size_t(g.ld);
    const int n = sg.n();
    for (int e = 0; e < n; ++e) ss[e] = keep[e] ? ss[e] : -kInf;
  }
}

void Evaluator::backward(const Grid& g, const float* s, float* grad, TensorGradSums* sums) {
  const int step = strip_rows(g);
  for (int o0 = 0; o0 < g.n_outer; o0 += step) {
    const size_t at = size_t(o0) * size_t(g.ld);
    backward_strip(strip_of(g, o0, std::min(step, g.n_outer - o0)), s + at, grad + at, sums);
  }
}

void Evaluator::backward_strip(const Grid& g, const float* s, float* grad, TensorGradSums* sums) {
  const int n = g.n();
  run(g, s, false);
  const int32_t out = prog_.output;
  if (!needs_grad_[size_t(out)]) {  // the output ignores the score: no gradient reaches it
    std::fill(grad, grad + n, 0.0f);
    return;
  }
  if (!adjs_) adjs_ = std::make_unique<float[]>(size_t(n_adj_) * size_t(cap_) + 1);
  for (size_t k = 0; k < prog_.nodes.size(); ++k)
    if (needs_grad_[k]) std::fill(adj(int32_t(k)), adj(int32_t(k)) + n, 0.0f);
  std::copy(grad, grad + n, adj(out));
  std::fill(grad, grad + n, 0.0f);

  // g * local, but 0 where g is 0: a masked score's infinities never meet its zero gradient.
  auto flow = [](float gk, float local) { return gk == 0.0f ? 0.0f : gk * local; };
  for (int32_t k = out; k >= 0; --k) {
    if (!needs_grad_[size_t(k)]) continue;
    const Node& node = prog_.nodes[size_t(k)];
    const float* gk = adj(k);
    const float* y = f(k);
    auto wants = [&](int32_t x) { return x >= 0 && needs_grad_[size_t(x)]; };
    float* ga = wants(node.a) ? adj(node.a) : nullptr;
    float* gb = wants(node.b) ? adj(node.b) : nullptr;
    const float* a =
        node.a >= 0 && prog_.nodes[size_t(node.a)].type == Type::Float ? f(node.a) : nullptr;
    const float* b =
        node.b >= 0 && prog_.nodes[size_t(node.b)].type == Type::Float ? f(node.b) : nullptr;
    switch (node.op) {
      case Op::Score:
        for (int e = 0; e < n; ++e) grad[e] += gk[e];
        break;
      case Op::Load: {
        if (!sums) break;
        std::vector<double>& acc = sums->sums[size_t(node.tensor)];
        if (acc.empty()) break;
        // Offsets again (the forward's were overwritten by later loads); as contiguous indices.
        const Captured& t = prog_.tensors[size_t(node.tensor)];
        const int rank = int(t.sizes.size());
        for (int e = 0; e < n; ++e) {
          if (gk[e] == 0.0f) continue;
          int64_t flat = 0;
          for (int d = 0; d < rank; ++d) {
            int64_t x = i(prog_.load_index[size_t(node.first + d)])[e];
            const int64_t size = t.sizes[size_t(d)];
            if (x < 0) x += size;
            if (x < 0 || x >= size) x = 0;  // recorded by the forward evaluation
            flat = flat * size + x;
          }
          acc[size_t(flat)] += double(gk[e]);
        }
        break;
      }
      case Op::Neg:
        for (int e = 0; e < n; ++e) ga[e] -= gk[e];
        break;
      case Op::Abs:
        for (int e = 0; e < n; ++e) ga[e] += a[e] > 0 ? gk[e] : a[e] < 0 ? -gk[e] : 0.0f;
        break;
      case Op::Exp:
        for (int e = 0; e < n; ++e) ga[e] += flow(gk[e], y[e]);
        break;
      case Op::Log:
        for (int e = 0; e < n; ++e) ga[e] += flow(gk[e], 1.0f / a[e]);
        break;
      case Op::Sqrt:
        for (int e = 0; e < n; ++e) ga[e] += flow(gk[e], 0.5f / y[e]);
        break;
      case Op::Tanh:
        for (int e = 0; e < n; ++e) ga[e] += flow(gk[e], 1.0f - y[e] * y[e]);
        break;
      case Op::Sigmoid:
        for (int e = 0; e < n; ++e) ga[e] += flow(gk[e], y[e] * (1.0f - y[e]));
        break;
      case Op::Sin:
        for (int e = 0; e < n; ++e) ga[e] += flow(gk[e], std::cos(a[e]));
        break;
      case Op::Cos:
        for (int e = 0; e < n; ++e) ga[e] -= flow(gk[e], std::sin(a[e]));
        break;
      case Op::Add:
        if (ga)
          for (int e = 0; e < n; ++e) ga[e] += gk[e];
        if (gb)
          for (int e = 0; e < n; ++e) gb[e] += gk[e];
        break;
      case Op::Sub:
        if (ga)
          for (int e = 0; e < n; ++e) ga[e] += gk[e];
        if (gb)
          for (int e = 0; e < n; ++e) gb[e] -= gk[e];
        break;
      case Op::Mul:
        if (ga)
          for (int e = 0; e < n; ++e) ga[e] += flow(gk[e], b[e]);
        if (gb)
          for (int e = 0; e < n; ++e) gb[e] += flow(gk[e], a[e]);
        break;
      case Op::Div:
        if (ga)
          for (int e = 0; e < n; ++e) ga[e] += flow(gk[e], 1.0f / b[e]);
        if (gb)
          for (int e = 0; e < n; ++e) gb[e] -= flow(gk[e], y[e] / b[e]);
        break;
      case Op::Mod:  // a - floor(a / b) b: d/da = 1, d/db = -floor(a / b)
        if (ga)
          for (int e = 0; e < n; ++e) ga[e] += gk[e];
        if (gb)
          for (int e = 0; e < n; ++e) gb[e] -= flow(gk[e], std::floor(a[e] / b[e]));
        break;
      case Op::Min:
      case Op::Max:  // the selected operand takes the gradient; a tie splits it (as torch)
        for (int e = 0; e < n; ++e) {
          const float wa = a[e] == b[e] ? 0.5f : (y[e] == a[e] ? 1.0f : 0.0f);
          if (ga) ga[e] += gk[e] * wa;
          if (gb) gb[e] += gk[e] * (1.0f - wa);
        }
        break;
      case Op::Pow:
        if (ga)
          for (int e = 0; e < n; ++e)
            ga[e] += flow(gk[e], b[e] == 0.0f ? 0.0f : b[e] * std::pow(a[e], b[e] - 1.0f));
        if (gb)
          for (int e = 0; e < n; ++e)
            gb[e] += flow(gk[e], a[e] > 0.0f ? y[e] * std::log(a[e]) : 0.0f);
        break;
      case Op::Where: {
        const int32_t* c = i(node.a);
        float* g1 = wants(node.b) ? adj(node.b) : nullptr;
        float* g2 = wants(node.c) ? adj(node.c) : nullptr;
        if (g1)
          for (int e = 0; e < n; ++e) g1[e] += c[e] ? gk[e] : 0.0f;
        if (g2)
          for (int e = 0; e < n; ++e) g2[e] += c[e] ? 0.0f : gk[e];
        break;
      }
      default: break;
    }
  }
}

void classify_blocks(const Program& mask, int64_t B, int64_t H, int64_t Q_LEN, int64_t KV_LEN,
                     int64_t q_block, int64_t kv_block, uint8_t* kinds, ErrorSlot& errors) {
  const int64_t nq = (Q_LEN + q_block - 1) / q_block, nkv = (KV_LEN + kv_block - 1) / kv_block;
  // Each block is evaluated in strips of at most kStrip entries (rows of up to kCols keys).
  constexpr int64_t kCols = 256, kStrip = 4096;
  const int64_t cols = std::min(kv_block, kCols), rows = std::max<int64_t>(1, kStrip / cols);
  const int64_t blocks = B * H * nq;
  const bool parallel = blocks > 1 && B * H * Q_LEN * KV_LEN > (int64_t(1) << 16);
#pragma omp parallel if (parallel) num_threads(num_threads())
  {
    Evaluator ev(mask, int(rows * cols));
    std::vector<int32_t> hv(static_cast<size_t>(rows)), qv(static_cast<size_t>(rows));
    std::vector<int32_t> kvv(static_cast<size_t>(cols));
#pragma omp for schedule(dynamic, 1)
    for (int64_t blk = 0; blk < blocks; ++blk) {
      const int64_t qb = blk % nq, h = blk / nq % H, b = blk / nq / H;
      const int64_t i_end = std::min(Q_LEN, (qb + 1) * q_block);
      uint8_t* out = kinds + blk * nkv;
      for (int64_t kb = 0; kb < nkv; ++kb) {
        const int64_t j_end = std::min(KV_LEN, (kb + 1) * kv_block);
        bool any = false, all = true;
        for (int64_t i0 = qb * q_block; i0 < i_end && (all || !any); i0 += rows) {
          const int64_t nr = std::min(rows, i_end - i0);
          for (int64_t r = 0; r < nr; ++r)
            hv[size_t(r)] = int32_t(h), qv[size_t(r)] = int32_t(i0 + r);
          for (int64_t j0 = kb * kv_block; j0 < j_end && (all || !any); j0 += cols) {
            const int64_t nc = std::min(cols, j_end - j0);
            for (int64_t c = 0; c < nc; ++c) kvv[size_t(c)] = int32_t(j0 + c);
            Grid g;
            g.n_outer = int(nr), g.ld = int(nc), g.b = int32_t(b);
            g.h = hv.data(), g.q = qv.data(), g.kv = kvv.data();
            g.h_outer = g.q_outer = true;
            const int32_t* keep = ev.eval_mask(g);
            int64_t n_keep = 0;
            for (int64_t e = 0; e < nr * nc; ++e) n_keep += keep[e] != 0;
            any |= n_keep > 0;
            all &= n_keep == nr * nc;
          }
        }
        out[kb] = uint8_t(!any ? TileKind::Empty : all ? TileKind::Full : TileKind::Partial);
      }
    }
    if (ev.error().set) errors.report(ev.error());
  }
}

}  // namespace attn::kernels::flex

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

// The shape of a node's value over a tile: one value (scalar), one per outer row, one per inner
// column, one per element (full), or one per diagonal: a function of q_idx - kv_idx alone where
// the two count up by one along different dimensions (Grid::q_step1, kv_step1). A diagonal value
// is stored for u = c - o + (n_outer - 1) in [0, n_outer + ld - 1), element (o, c) reading u, so
// that row o's values are the contiguous run from n_outer - 1 - o.
constexpr uint8_t kScalar = 0, kOuter = 1, kInner = 2, kFull = 3, kDiag = 4;

// The shape of an operation's result from its operands'.
uint8_t join(uint8_t a, uint8_t b) {
  if (a == b || b == kScalar) return a;
  if (a == kScalar) return b;
  return kFull;
}

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

// How far each register moves from one row to the next when an operation runs row by row (a
// full result whose operands have other shapes, read in place instead of broadcast first).
struct Rows {
  int count = 1;                     // rows of n elements
  int out = 0, a = 0, b = 0, c = 0;  // steps of the output and the operands, in elements
};

// The registers of row o.
struct RowRegs : Regs {
  bool once = true;
  RowRegs(const Regs& r, const Rows& rows, int o) : Regs(r) {
    auto at = [o](auto* p, int step) { return p ? p + ptrdiff_t(o) * step : p; };
    fo = at(r.fo, rows.out), io = at(r.io, rows.out);
    fa = at(r.fa, rows.a), fb = at(r.fb, rows.b), fc = at(r.fc, rows.c);
    ia = at(r.ia, rows.a), ib = at(r.ib, rows.b), ic = at(r.ic, rows.c);
  }
};

// Each element e of each row (the registers of the row in P).
#define FOR_E                                           \
  for (int o = 0; o < rows.count; ++o)                  \
    for (RowRegs P(r, rows, o); P.once; P.once = false) \
      for (int e = 0; e < n; ++e)
#define FA(e) (SA ? P.fa[0] : P.fa[e])
#define FB(e) (SB ? P.fb[0] : P.fb[e])
#define FC(e) (SC ? P.fc[0] : P.fc[e])
#define IA(e) (SA ? P.ia[0] : P.ia[e])
#define IB(e) (SB ? P.ib[0] : P.ib[e])
#define IC(e) (SC ? P.ic[0] : P.ic[e])
// One operation over rows.count rows of n elements. `t` is the result's type, `ta` the first
// operand's; an operand flagged scalar (SA, SB, SC) is its element 0 for every e of a row (no
// broadcast copy). One template per arity, so that each operation is compiled only for the
// combinations of scalar operands it can have (2 for unary operations, 4 for binary, 8 for
// where), in each of the instruction sets.
template <bool SA>
ATTN_ISA_INLINE void exec_unary(Op op, Type ta, const Regs& r, int n, const Rows& rows) {
  const bool fl = ta == Type::Float;
  switch (op) {
    case Op::Neg:
      if (fl)
        FOR_E P.fo[e] = -FA(e);
      else
        FOR_E P.io[e] = int32_t(0u - uint32_t(IA(e)));  // wraps, as int32
      break;
    case Op::Abs:
      if (fl)
        FOR_E P.fo[e] = std::fabs(FA(e));
      else
        FOR_E P.io[e] = IA(e) < 0 ? int32_t(0u - uint32_t(IA(e))) : IA(e);
      break;
    case Op::Exp: FOR_E P.fo[e] = std::exp(FA(e)); break;
    case Op::Log: FOR_E P.fo[e] = std::log(FA(e)); break;
    case Op::Sqrt: FOR_E P.fo[e] = std::sqrt(FA(e)); break;
    case Op::Tanh: FOR_E P.fo[e] = vmath::tanh(FA(e)); break;
    case Op::Sigmoid: FOR_E P.fo[e] = 1.0f / (1.0f + std::exp(-FA(e))); break;
    case Op::Sin: FOR_E P.fo[e] = std::sin(FA(e)); break;
    case Op::Cos: FOR_E P.fo[e] = std::cos(FA(e)); break;
    case Op::Floor: FOR_E P.fo[e] = std::floor(FA(e)); break;
    case Op::Ceil: FOR_E P.fo[e] = std::ceil(FA(e)); break;
    case Op::Not: FOR_E P.io[e] = IA(e) == 0; break;
    case Op::ToFloat: FOR_E P.fo[e] = float(IA(e)); break;
    case Op::ToInt:  // torch's .to(int32): toward zero; NaN gives 0, values beyond saturate
      if (fl) FOR_E {
          const float x = FA(e);
          P.io[e] = x != x                ? 0
                    : x >= 2147483648.0f  ? INT32_MAX
                    : x <= -2147483648.0f ? INT32_MIN
                                          : int32_t(x);
        }
      else
        FOR_E P.io[e] = IA(e);
      break;
    case Op::ToBool:
      if (fl)
        FOR_E P.io[e] = FA(e) != 0.0f;
      else
        FOR_E P.io[e] = IA(e) != 0;
      break;
    default: break;
  }
}

template <bool SA, bool SB>
ATTN_ISA_INLINE void exec_binary(Op op, Type ta, const Regs& r, int n, const Rows& rows) {
  const bool fl = ta == Type::Float;
  switch (op) {
#define ATTN_FLEX_ARITH(OP, EXPR_F, EXPR_I) \
  case Op::OP:                              \
    if (fl) FOR_E {                         \
        const float a = FA(e), b = FB(e);   \
        P.fo[e] = EXPR_F;                   \
      }                                     \
    else                                    \
      FOR_E {                               \
        const int32_t a = IA(e), b = IB(e); \
        P.io[e] = EXPR_I;                   \
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
    case Op::Div: FOR_E P.fo[e] = FA(e) / FB(e); break;
    case Op::Pow: FOR_E P.fo[e] = std::pow(FA(e), FB(e)); break;
#define ATTN_FLEX_CMP(OP, CMP)                  \
  case Op::OP:                                  \
    if (fl)                                     \
      FOR_E P.io[e] = int32_t(FA(e) CMP FB(e)); \
    else                                        \
      FOR_E P.io[e] = int32_t(IA(e) CMP IB(e)); \
    break;
      ATTN_FLEX_CMP(Eq, ==)
      ATTN_FLEX_CMP(Ne, !=)
      ATTN_FLEX_CMP(Lt, <)
      ATTN_FLEX_CMP(Le, <=)
      ATTN_FLEX_CMP(Gt, >)
      ATTN_FLEX_CMP(Ge, >=)
#undef ATTN_FLEX_CMP
    case Op::And: FOR_E P.io[e] = IA(e) & IB(e); break;
    case Op::Or: FOR_E P.io[e] = IA(e) | IB(e); break;
    case Op::Xor: FOR_E P.io[e] = IA(e) ^ IB(e); break;
    default: break;
  }
}

template <bool SA, bool SB, bool SC>
ATTN_ISA_INLINE void exec_where(Type t, const Regs& r, int n, const Rows& rows) {
  if (t == Type::Float)
    FOR_E P.fo[e] = IA(e) ? FB(e) : FC(e);
  else
    FOR_E P.io[e] = IA(e) ? IB(e) : IC(e);
}
#undef FA
#undef FB
#undef FC
#undef IA
#undef IB
#undef IC
#undef FOR_E

static_assert(Op::Neg > Op::Load && Op::Add > Op::ToBool && Op::Where > Op::Xor,
              "exec_body tells an operation's arity by its place in flex::Op");
ATTN_ISA_INLINE void exec_body(Op op, Type t, Type ta, const Regs& r, int n, int scalars,
                               const Rows& rows) {
  if (op == Op::Where) {
    switch (scalars) {
      case 0: return exec_where<false, false, false>(t, r, n, rows);
      case 1: return exec_where<true, false, false>(t, r, n, rows);
      case 2: return exec_where<false, true, false>(t, r, n, rows);
      case 3: return exec_where<true, true, false>(t, r, n, rows);
      case 4: return exec_where<false, false, true>(t, r, n, rows);
      case 5: return exec_where<true, false, true>(t, r, n, rows);
      case 6: return exec_where<false, true, true>(t, r, n, rows);
      default: return exec_where<true, true, true>(t, r, n, rows);
    }
  }
  if (op >= Op::Add) {  // binary
    switch (scalars & 3) {
      case 0: return exec_binary<false, false>(op, ta, r, n, rows);
      case 1: return exec_binary<true, false>(op, ta, r, n, rows);
      case 2: return exec_binary<false, true>(op, ta, r, n, rows);
      default: return exec_binary<true, true>(op, ta, r, n, rows);
    }
  }
  if (op >= Op::Neg) {  // unary; leaves and loads are Evaluator::run's
    if (scalars & 1) return exec_unary<true>(op, ta, r, n, rows);
    return exec_unary<false>(op, ta, r, n, rows);
  }
}
ATTN_ISA_VARIANTS(void, exec,
                  (Op op, Type t, Type ta, const Regs& r, int n, int scalars, const Rows& rows),
                  (op, t, ta, r, n, scalars, rows))

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
  diagonal_seed_.assign(N, 0);
  mask_out_ = std::make_unique_for_overwrite<int32_t[]>(size_t(cap_));
  size_t max_rank = 1;
  for (const Captured& t : program.tensors) max_rank = std::max(max_rank, t.sizes.size());
  idx_tmp_ = std::make_unique_for_overwrite<int32_t[]>(max_rank * size_t(cap_));
}

// The number of values of a node of shape `sh` over the grid.
int length(uint8_t sh, const Grid& g) {
  switch (sh) {
    case kFull: return g.n();
    case kOuter: return g.n_outer;
    case kInner: return g.ld;
    case kDiag: return g.n_outer + g.ld - 1;
    default: return 1;
  }
}

// Broadcast `v` of shape `from` to `to` (a scalar to anything, anything to full) over the grid:
// dst gets length(to) values.
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
  } else if (from == kInner) {  // -> kFull
    for (int o = 0; o < g.n_outer; ++o) std::copy(v, v + ld, dst + o * ld);
  } else {  // kDiag -> kFull: row o is the run of diagonals from n_outer - 1 - o
    for (int o = 0; o < g.n_outer; ++o) {
      const T* src = v + (g.n_outer - 1 - o);
      std::copy(src, src + ld, dst + o * ld);
    }
  }
}

// Whether the n values count up by one from x[0] (step) or are all x[0] (uniform).
bool counts_up(const int32_t* x, int n) {
  for (int e = 1; e < n; ++e)
    if (x[e] != int32_t(uint32_t(x[0]) + uint32_t(e))) return false;
  return n > 0;
}
bool uniform(const int32_t* x, int n) {
  for (int e = 1; e < n; ++e)
    if (x[e] != x[0]) return false;
  return n > 0;
}

// Grid's derived flags (a copy with them filled in).
Grid described(const Grid& g) {
  Grid d = g;
  const int nh = g.h_outer ? g.n_outer : g.ld, nq = g.q_outer ? g.n_outer : g.ld,
            nkv = g.kv_outer ? g.n_outer : g.ld;
  d.h_uniform = uniform(g.h, nh);
  d.q_uniform = uniform(g.q, nq);
  d.kv_uniform = uniform(g.kv, nkv);
  d.q_step1 = counts_up(g.q, nq);
  d.kv_step1 = counts_up(g.kv, nkv);
  return d;
}

// Whether node k is q_idx - kv_idx, kv_idx - q_idx or a comparison of the two, with a value per
// diagonal on this grid.
bool diagonal_of_indices(const Program& prog, const Node& node, const std::vector<uint8_t>& shape,
                         const Grid& g) {
  switch (node.op) {
    case Op::Sub:
    case Op::Eq:
    case Op::Ne:
    case Op::Lt:
    case Op::Le:
    case Op::Gt:
    case Op::Ge: break;
    default: return false;
  }
  if (!g.q_step1 || !g.kv_step1 || g.q_outer == g.kv_outer) return false;
  const Op x = prog.nodes[size_t(node.a)].op, y = prog.nodes[size_t(node.b)].op;
  const bool pair = (x == Op::QIdx && y == Op::KvIdx) || (x == Op::KvIdx && y == Op::QIdx);
  return pair && shape[size_t(node.a)] != kScalar && shape[size_t(node.b)] != kScalar;
}

// The values per diagonal of such a node: a - b is q_idx - kv_idx (or its negation), which at
// diagonal u is q[0] - kv[0] + (u - (n_outer - 1)) when q runs along the inner dimension and
// q[0] - kv[0] - (u - (n_outer - 1)) when it runs along the outer one.
void diagonal_values(Op op, bool a_is_q, const Grid& g, int32_t* out) {
  const int len = length(kDiag, g);
  // a - b at u = first + step * u (indices are below 2^31, so their differences fit in int32)
  const int32_t q_minus_kv0 =
      int32_t(int64_t(g.q[0]) - int64_t(g.kv[0]) + (g.q_outer ? 1 : -1) * int64_t(g.n_outer - 1));
  const int32_t first = a_is_q ? q_minus_kv0 : -q_minus_kv0;
  const int32_t step = (g.q_outer ? -1 : 1) * (a_is_q ? 1 : -1);
  switch (op) {
#define ATTN_FLEX_DIAG(OP, EXPR)          \
  case Op::OP:                            \
    for (int u = 0; u < len; ++u) {       \
      const int32_t d = first + step * u; \
      out[u] = EXPR;                      \
    }                                     \
    break;
    ATTN_FLEX_DIAG(Sub, d)
    ATTN_FLEX_DIAG(Eq, d == 0)
    ATTN_FLEX_DIAG(Ne, d != 0)
    ATTN_FLEX_DIAG(Lt, d < 0)
    ATTN_FLEX_DIAG(Le, d <= 0)
    ATTN_FLEX_DIAG(Gt, d > 0)
    default: ATTN_FLEX_DIAG(Ge, d >= 0)
#undef ATTN_FLEX_DIAG
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
// slopes[h]) is computed once per row, one of q_idx - kv_idx alone once per diagonal, and a
// full-tile operation reads such operands in place, row by row. With `compact` false (the
// backward, whose adjoints are per element) every node is full.
void Evaluator::shapes(const Grid& g, bool compact) {
  auto own_shape = [](bool is_uniform, bool outer) {
    return is_uniform ? kScalar : outer ? kOuter : kInner;
  };
  for (size_t k = 0; k < prog_.nodes.size(); ++k) {
    const Node& node = prog_.nodes[k];
    // q_idx - kv_idx (or a comparison of the two) computed once per diagonal
    const bool diagonal_seed = compact && diagonal_of_indices(prog_, node, shape_, g);
    diagonal_seed_[k] = diagonal_seed;
    uint8_t sh = kScalar;
    switch (node.op) {
      case Op::Score: sh = kFull; break;
      case Op::Batch:
      case Op::Const: sh = kScalar; break;
      case Op::Head: sh = own_shape(g.h_uniform, g.h_outer); break;
      case Op::QIdx: sh = own_shape(g.q_uniform, g.q_outer); break;
      case Op::KvIdx: sh = own_shape(g.kv_uniform, g.kv_outer); break;
      case Op::Load:
        for (int d = 0; d < int(prog_.tensors[size_t(node.tensor)].sizes.size()); ++d)
          sh = join(sh, shape_[size_t(prog_.load_index[size_t(node.first + d)])]);
        break;
      default:
        if (diagonal_seed) {
          sh = kDiag;
          break;
        }
        for (int32_t x : {node.a, node.b, node.c})
          if (x >= 0) sh = join(sh, shape_[size_t(x)]);
    }
    shape_[k] = compact ? sh : kFull;
  }
}

void Evaluator::run(const Grid& g, const float* s, float* out) {
  out_aliased_ = false;
  for (size_t k = 0; k < prog_.nodes.size(); ++k) {
    const Node& node = prog_.nodes[k];
    const int32_t kk = int32_t(k);
    const uint8_t sh = shape_[k];
    const bool diagonal_seed = diagonal_seed_[k];
    const int len = length(sh, g);
    switch (node.op) {
      case Op::Score: score_ = s; break;  // read where it lies
      case Op::Batch: i(kk)[0] = g.b; break;
      case Op::Head:
      case Op::QIdx:
      case Op::KvIdx: {
        const int32_t* src = node.op == Op::Head ? g.h : node.op == Op::QIdx ? g.q : g.kv;
        const bool outer = node.op == Op::Head   ? g.h_outer
                           : node.op == Op::QIdx ? g.q_outer
                                                 : g.kv_outer;
        const uint8_t own = outer ? kOuter : kInner;
        if (sh == kScalar || own == sh)
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
        if (diagonal_seed) {
          diagonal_values(node.op, prog_.nodes[size_t(node.a)].op == Op::QIdx, g, i(kk));
          break;
        }
        // Operands of this node's shape are read as they are, scalars as one value. A full node
        // with operands of other shapes runs row by row, each such operand read in place: one
        // value per row (outer), the same run of columns (inner), or the row's run of diagonals.
        const Type ta = prog_.nodes[size_t(node.op == Op::Where ? node.b : node.a)].type;
        const int32_t ops[3] = {node.a, node.b, node.c};
        const float* fp[3] = {nullptr, nullptr, nullptr};
        const int32_t* ip[3] = {nullptr, nullptr, nullptr};
        int steps[3] = {0, 0, 0};
        int scalars = 0;
        bool by_rows = false;
        for (int a = 0; a < 3; ++a)
          if (ops[a] >= 0) {
            const uint8_t xs = shape_[size_t(ops[a])];
            by_rows |= sh == kFull && xs != kFull && xs != kScalar;
          }
        for (int a = 0; a < 3; ++a) {
          const int32_t x = ops[a];
          if (x < 0) continue;
          const uint8_t xs = shape_[size_t(x)];
          ptrdiff_t start = 0;
          if (xs == kScalar) {
            scalars |= 1 << a;
          } else if (by_rows) {
            switch (xs) {
              case kFull: steps[a] = g.ld; break;
              case kOuter: steps[a] = 1, scalars |= 1 << a; break;
              case kInner: steps[a] = 0; break;
              default: start = g.n_outer - 1, steps[a] = -1; break;  // kDiag
            }
          }
          if (prog_.nodes[size_t(x)].type == Type::Float)
            fp[a] = f(x) + start;
          else
            ip[a] = i(x) + start;
        }
        const bool float_out = node.type == Type::Float;
        float* fo = float_out ? f(kk) : nullptr;
        if (out && kk + 1 == int32_t(prog_.nodes.size()) && kk == prog_.output && float_out &&
            sh == kFull) {
          fo = out;
          out_aliased_ = true;
        }
        const Regs r{fo, float_out ? nullptr : i(kk), fp[0], fp[1], fp[2], ip[0], ip[1], ip[2]};
        Rows rows;
        if (by_rows) rows = {g.n_outer, g.ld, steps[0], steps[1], steps[2]};
        exec(node.op, node.type, ta, r, by_rows ? g.ld : len, scalars, rows);
      }
    }
  }
}

// A tile is evaluated in strips of whole outer rows, so that the registers of the program's
// full-tile values (the output written in place aside) fit in kStripBytes, within the L1 cache:
// fewer and longer strips when most values are scalars, rows or diagonals.
constexpr int kStripBytes = 24 * 1024, kMinStrip = 512;

Grid strip_of(const Grid& g, int o0, int rows) {
  Grid s = g;
  s.n_outer = rows;
  if (g.h_outer) s.h = g.h + o0;
  if (g.q_outer) s.q = g.q + o0;
  if (g.kv_outer) s.kv = g.kv + o0;
  return s;
}

int Evaluator::strip_rows(const Grid& g) const {
  int full = 0;
  for (size_t k = 0; k + 1 < prog_.nodes.size(); ++k)
    full += shape_[k] == kFull && prog_.nodes[k].op != Op::Score;
  const int elems = std::max(kMinStrip, kStripBytes / int(sizeof(float)) / std::max(1, full));
  return std::clamp(std::min(elems, cap_) / std::max(1, g.ld), 1, std::max(1, g.n_outer));
}

void Evaluator::apply_score(const Grid& grid, float* s) {
  const Grid g = described(grid);
  shapes(g, true);
  const int32_t out = prog_.output;
  const int step = strip_rows(g);
  for (int o0 = 0; o0 < g.n_outer; o0 += step) {
    const Grid sg = strip_of(g, o0, std::min(step, g.n_outer - o0));
    float* ss = s + size_t(o0) * size_t(g.ld);
    run(sg, ss, ss);
    if (out_aliased_ || f(out) == ss) continue;  // written in place, or the score itself
    if (shape_[size_t(out)] == kFull)
      std::copy(f(out), f(out) + sg.n(), ss);
    else
      expand(f(out), shape_[size_t(out)], kFull, sg, ss);
  }
}

const int32_t* Evaluator::mask_values(const Grid& g) {
  run(g, nullptr);
  const int32_t out = prog_.output;
  if (shape_[size_t(out)] == kFull) return i(out);
  expand(i(out), shape_[size_t(out)], kFull, g, mask_out_.get());
  return mask_out_.get();
}

const int32_t* Evaluator::eval_mask(const Grid& grid) {
  const Grid g = described(grid);
  shapes(g, true);
  return mask_values(g);
}

void Evaluator::apply_mask(const Grid& grid, float* s) {
  const Grid g = described(grid);
  shapes(g, true);
  const int step = strip_rows(g);
  for (int o0 = 0; o0 < g.n_outer; o0 += step) {
    const Grid sg = strip_of(g, o0, std::min(step, g.n_outer - o0));
    const int32_t* keep = mask_values(sg);
    float* ss = s + size_t(o0) * size_t(g.ld);
    const int n = sg.n();
    for (int e = 0; e < n; ++e) ss[e] = keep[e] ? ss[e] : -kInf;
  }
}

void Evaluator::backward(const Grid& g, const float* s, float* grad, TensorGradSums* sums) {
  shapes(g, false);  // every value per element: the adjoints are
  const int step = std::clamp(kMinStrip / std::max(1, g.ld), 1, std::max(1, g.n_outer));
  for (int o0 = 0; o0 < g.n_outer; o0 += step) {
    const size_t at = size_t(o0) * size_t(g.ld);
    backward_strip(strip_of(g, o0, std::min(step, g.n_outer - o0)), s + at, grad + at, sums);
  }
}

void Evaluator::backward_strip(const Grid& g, const float* s, float* grad, TensorGradSums* sums) {
  const int n = g.n();
  run(g, s);
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

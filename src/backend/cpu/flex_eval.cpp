// Tile-wise evaluation of flex_attention's traced modifiers; see flex_eval.h.
#include "flex_eval.h"

#include <algorithm>
#include <cmath>

#include "isa.h"
#include "threads.h"
#include "vmath.h"

namespace attn::kernels::flex {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

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
  const int32_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
inline int32_t floor_mod(int32_t a, int32_t b) {
  if (b == 0) return 0;
  const int32_t r = a % b;
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}

// One operation over n elements. `t` is the result's type, `ta` the first operand's.
ATTN_ISA_INLINE void exec_body(Op op, Type t, Type ta, const Regs& r, int n) {
  float* fo = r.fo;
  int32_t* io = r.io;
  const float *fa = r.fa, *fb = r.fb, *fc = r.fc;
  const int32_t *ia = r.ia, *ib = r.ib, *ic = r.ic;
  const bool fl = ta == Type::Float;
  switch (op) {
    case Op::Neg:
      if (fl)
        for (int e = 0; e < n; ++e) fo[e] = -fa[e];
      else
        for (int e = 0; e < n; ++e) io[e] = -ia[e];
      break;
    case Op::Abs:
      if (fl)
        for (int e = 0; e < n; ++e) fo[e] = std::fabs(fa[e]);
      else
        for (int e = 0; e < n; ++e) io[e] = ia[e] < 0 ? -ia[e] : ia[e];
      break;
    case Op::Exp:
      for (int e = 0; e < n; ++e) fo[e] = std::exp(fa[e]);
      break;
    case Op::Log:
      for (int e = 0; e < n; ++e) fo[e] = std::log(fa[e]);
      break;
    case Op::Sqrt:
      for (int e = 0; e < n; ++e) fo[e] = std::sqrt(fa[e]);
      break;
    case Op::Tanh:
      for (int e = 0; e < n; ++e) fo[e] = vmath::tanh(fa[e]);
      break;
    case Op::Sigmoid:
      for (int e = 0; e < n; ++e) fo[e] = 1.0f / (1.0f + std::exp(-fa[e]));
      break;
    case Op::Sin:
      for (int e = 0; e < n; ++e) fo[e] = std::sin(fa[e]);
      break;
    case Op::Cos:
      for (int e = 0; e < n; ++e) fo[e] = std::cos(fa[e]);
      break;
    case Op::Floor:
      for (int e = 0; e < n; ++e) fo[e] = std::floor(fa[e]);
      break;
    case Op::Ceil:
      for (int e = 0; e < n; ++e) fo[e] = std::ceil(fa[e]);
      break;
    case Op::Not:
      for (int e = 0; e < n; ++e) io[e] = ia[e] == 0;
      break;
    case Op::ToFloat:
      for (int e = 0; e < n; ++e) fo[e] = float(ia[e]);
      break;
    case Op::ToInt:  // torch's .to(int32): toward zero (values outside int32 are the caller's)
      if (fl)
        for (int e = 0; e < n; ++e) io[e] = std::isfinite(fa[e]) ? int32_t(fa[e]) : 0;
      else
        for (int e = 0; e < n; ++e) io[e] = ia[e];
      break;
    case Op::ToBool:
      if (fl)
        for (int e = 0; e < n; ++e) io[e] = fa[e] != 0.0f;
      else
        for (int e = 0; e < n; ++e) io[e] = ia[e] != 0;
      break;
#define ATTN_FLEX_ARITH(OP, EXPR_F, EXPR_I) \
  case Op::OP:                              \
    if (fl)                                 \
      for (int e = 0; e < n; ++e) {         \
        const float a = fa[e], b = fb[e];   \
        fo[e] = EXPR_F;                     \
      }                                     \
    else                                    \
      for (int e = 0; e < n; ++e) {         \
        const int32_t a = ia[e], b = ib[e]; \
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
      for (int e = 0; e < n; ++e) fo[e] = fa[e] / fb[e];
      break;
    case Op::Pow:
      for (int e = 0; e < n; ++e) fo[e] = std::pow(fa[e], fb[e]);
      break;
#define ATTN_FLEX_CMP(OP, CMP)                                      \
  case Op::OP:                                                      \
    if (fl)                                                         \
      for (int e = 0; e < n; ++e) io[e] = int32_t(fa[e] CMP fb[e]); \
    else                                                            \
      for (int e = 0; e < n; ++e) io[e] = int32_t(ia[e] CMP ib[e]); \
    break;
      ATTN_FLEX_CMP(Eq, ==)
      ATTN_FLEX_CMP(Ne, !=)
      ATTN_FLEX_CMP(Lt, <)
      ATTN_FLEX_CMP(Le, <=)
      ATTN_FLEX_CMP(Gt, >)
      ATTN_FLEX_CMP(Ge, >=)
#undef ATTN_FLEX_CMP
    case Op::And:
      for (int e = 0; e < n; ++e) io[e] = ia[e] & ib[e];
      break;
    case Op::Or:
      for (int e = 0; e < n; ++e) io[e] = ia[e] | ib[e];
      break;
    case Op::Xor:
      for (int e = 0; e < n; ++e) io[e] = ia[e] ^ ib[e];
      break;
    case Op::Where:
      if (t == Type::Float)
        for (int e = 0; e < n; ++e) fo[e] = ia[e] ? fb[e] : fc[e];
      else
        for (int e = 0; e < n; ++e) io[e] = ia[e] ? ib[e] : ic[e];
      break;
    default: break;  // leaves and loads: Evaluator::run
  }
}
ATTN_ISA_VARIANTS(void, exec, (Op op, Type t, Type ta, const Regs& r, int n), (op, t, ta, r, n))

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
    slot_[k] = node.type == Type::Float ? nf++ : ni++;
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
  fregs_.assign(size_t(nf) * size_t(cap_), 0.0f);
  iregs_.assign(size_t(ni) * size_t(cap_), 0);
  adjs_.assign(size_t(na) * size_t(cap_), 0.0f);
  offsets_.assign(size_t(cap_), 0);
}

// The element offsets of a Load into offsets_ (an index outside its dimension is recorded and
// read as 0; negative indices count from the end, as Python's), then the values.
void Evaluator::load(const Node& node, int n) {
  const Captured& t = prog_.tensors[size_t(node.tensor)];
  const int rank = int(t.sizes.size());
  std::fill(offsets_.begin(), offsets_.begin() + n, int64_t(0));
  for (int d = 0; d < rank; ++d) {
    const int32_t* idx = i(prog_.load_index[size_t(node.first + d)]);
    const int64_t size = t.sizes[size_t(d)], stride = t.strides[size_t(d)];
    for (int e = 0; e < n; ++e) {
      int64_t x = idx[e];
      if (x < 0) x += size;
      if (x < 0 || x >= size) {
        if (!error_.set) error_ = {true, &prog_, node.tensor, d, int64_t(idx[e]), size};
        x = 0;
      }
      offsets_[size_t(e)] += x * stride;
    }
  }
  const int64_t* off = offsets_.data();
  const int32_t k = int32_t(&node - prog_.nodes.data());
  switch (t.kind) {
    case Captured::Kind::Float32: {
      const float* src = static_cast<const float*>(t.data);
      float* out = f(k);
      for (int e = 0; e < n; ++e) out[e] = src[off[e]];
      break;
    }
    case Captured::Kind::Int32: {
      const int32_t* src = static_cast<const int32_t*>(t.data);
      int32_t* out = i(k);
      for (int e = 0; e < n; ++e) out[e] = src[off[e]];
      break;
    }
    case Captured::Kind::Int64: {
      const int64_t* src = static_cast<const int64_t*>(t.data);
      int32_t* out = i(k);
      for (int e = 0; e < n; ++e) out[e] = int32_t(src[off[e]]);
      break;
    }
    case Captured::Kind::Bool: {
      const uint8_t* src = static_cast<const uint8_t*>(t.data);
      int32_t* out = i(k);
      for (int e = 0; e < n; ++e) out[e] = src[off[e]] != 0;
      break;
    }
  }
}

void Evaluator::run(const Grid& g, const float* s) {
  const int n = g.n();
  for (size_t k = 0; k < prog_.nodes.size(); ++k) {
    const Node& node = prog_.nodes[k];
    const int32_t kk = int32_t(k);
    switch (node.op) {
      case Op::Score: std::copy(s, s + n, f(kk)); break;
      case Op::Batch: std::fill(i(kk), i(kk) + n, g.b); break;
      case Op::Head:
      case Op::QIdx:
      case Op::KvIdx: {
        const int32_t* src = node.op == Op::Head ? g.h : node.op == Op::QIdx ? g.q : g.kv;
        const bool outer = node.op == Op::Head   ? g.h_outer
                           : node.op == Op::QIdx ? g.q_outer
                                                 : g.kv_outer;
        int32_t* out = i(kk);
        for (int o = 0; o < g.n_outer; ++o)
          for (int x = 0; x < g.ld; ++x) out[o * g.ld + x] = outer ? src[o] : src[x];
        break;
      }
      case Op::Const:
        if (node.type == Type::Float)
          std::fill(f(kk), f(kk) + n, node.fvalue);
        else
          std::fill(i(kk), i(kk) + n, node.ivalue);
        break;
      case Op::Load: load(node, n); break;
      default: {
        auto fr = [&](int32_t x) -> const float* {
          return x >= 0 && prog_.nodes[size_t(x)].type == Type::Float ? f(x) : nullptr;
        };
        auto ir = [&](int32_t x) -> const int32_t* {
          return x >= 0 && prog_.nodes[size_t(x)].type != Type::Float ? i(x) : nullptr;
        };
        const Regs r{node.type == Type::Float ? f(kk) : nullptr,
                     node.type == Type::Float ? nullptr : i(kk),
                     fr(node.a),
                     fr(node.b),
                     fr(node.c),
                     ir(node.a),
                     ir(node.b),
                     ir(node.c)};
        const Type ta = prog_.nodes[size_t(node.op == Op::Where ? node.b : node.a)].type;
        exec(node.op, node.type, node.op == Op::Where ? ta : ta, r, n);
      }
    }
  }
}

void Evaluator::apply_score(const Grid& g, float* s) {
  run(g, s);
  const float* out = f(prog_.output);
  std::copy(out, out + g.n(), s);
}

const int32_t* Evaluator::eval_mask(const Grid& g) {
  run(g, nullptr);
  return i(prog_.output);
}

void Evaluator::apply_mask(const Grid& g, float* s) {
  const int32_t* keep = eval_mask(g);
  const int n = g.n();
  for (int e = 0; e < n; ++e) s[e] = keep[e] ? s[e] : -kInf;
}

void Evaluator::backward(const Grid& g, const float* s, float* grad, TensorGradSums* sums) {
  const int n = g.n();
  run(g, s);
  const int32_t out = prog_.output;
  if (!needs_grad_[size_t(out)]) {  // the output ignores the score: no gradient reaches it
    std::fill(grad, grad + n, 0.0f);
    return;
  }
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

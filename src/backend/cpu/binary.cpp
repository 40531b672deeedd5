// The element-wise binary ops on the CPU (src/backend/elementwise_kernels.h): float32, int64 and
// bool, with PyTorch's per-element arithmetic.
#include <attn/half.h>

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "../elementwise_kernels.h"
#include "isa.h"
#include "strided.h"
#include "threads.h"
#include "vmath.h"

namespace attn::kernels {
namespace {

using backend::Binary;
using backend::BinaryOp;
using Op = BinaryOp;

// torch's integer power (c10 powi): exponentiation by squaring with wrap-around on overflow;
// a negative exponent gives 1 for base 1, +-1 for base -1 and 0 otherwise.
inline int64_t int_pow(int64_t a, int64_t b) {
  if (b < 0) {
    if (a == 1) return 1;
    if (a == -1) return (-b) % 2 ? -1 : 1;
    return 0;
  }
  uint64_t result = 1, base = uint64_t(a);
  while (b) {
    if (b & 1) result *= base;
    b /= 2;
    base *= base;
  }
  return int64_t(result);
}

// torch's rounding divisions and remainders (c10's div_floor_floating, div_floor_integer and the
// CPU remainder and fmod kernels). Floats: a divisor of 0 gives IEEE's inf or nan; the floor
// quotient is Python's (fmod first, so that 7 // 0.1 is 69, not 70). Integers: a divisor of 0
// never reaches here (refused with ZeroDivisionError), and -1 wraps around where INT64_MIN / -1
// would trap (torch 1.13 dies of SIGFPE there).
inline float floor_div(float a, float b) {
  if (b == 0) return a / b;
  const float mod = std::fmod(a, b);
  float div = (a - mod) / b;
  if (mod != 0 && (b < 0) != (mod < 0)) div -= 1;
  if (div == 0) return std::copysign(0.0f, a / b);
  float fl = std::floor(div);
  if (div - fl > 0.5f) fl += 1;
  return fl;
}
inline float remainder(float a, float b) {
  float mod = std::fmod(a, b);
  if (mod != 0 && (b < 0) != (mod < 0)) mod += b;
  return mod;
}
inline int64_t int_round_div(Op op, int64_t a, int64_t b) {
  if (b == 0) return 0;  // refused before the kernel runs
  if (b == -1) {
    const int64_t neg = int64_t(0 - uint64_t(a));  // wraps for INT64_MIN
    return op == Op::FloorDiv || op == Op::TruncDiv ? neg : 0;
  }
  const int64_t q = a / b, r = a % b;
  const bool adjust = r != 0 && (r < 0) != (b < 0);
  switch (op) {
    case Op::FloorDiv: return adjust ? q - 1 : q;
    case Op::TruncDiv: return q;
    case Op::Rem: return adjust ? r + b : r;
    default: return r;  // Fmod
  }
}

template <typename T>
T apply(Op op, T a, T b) {
  if constexpr (std::is_same_v<T, bool>) {
    switch (op) {
      case Op::Add:
      case Op::Max: return a || b;
      case Op::Mul:
      case Op::Min: return a && b;
      default: return false;
    }
  } else {
    if constexpr (std::is_same_v<T, int64_t>) {
      // Two's-complement wrap-around on overflow, as torch (and without signed-overflow UB).
      switch (op) {
        case Op::Add: return int64_t(uint64_t(a) + uint64_t(b));
        case Op::Sub: return int64_t(uint64_t(a) - uint64_t(b));
        case Op::Mul: return int64_t(uint64_t(a) * uint64_t(b));
        case Op::FloorDiv:
        case Op::TruncDiv:
        case Op::Rem:
        case Op::Fmod: return int_round_div(op, a, b);
        default: break;
      }
    }
    switch (op) {
      case Op::Add: return a + b;
      case Op::Sub: return a - b;
      case Op::Mul: return a * b;
      case Op::Div: return a / b;
      case Op::Pow:
        if constexpr (std::is_same_v<T, float>) {
          return std::pow(a, b);
        } else {
          return int_pow(a, b);
        }
      case Op::Max:
        if constexpr (std::is_same_v<T, float>)
          if (std::isnan(a) || std::isnan(b)) return a + b;
        return a > b ? a : b;
      case Op::Min:
        if constexpr (std::is_same_v<T, float>)
          if (std::isnan(a) || std::isnan(b)) return a + b;
        return a < b ? a : b;
      case Op::FloorDiv:
        if constexpr (std::is_same_v<T, float>) return floor_div(a, b);
        return T(0);
      case Op::TruncDiv:
        if constexpr (std::is_same_v<T, float>) return std::trunc(a / b);
        return T(0);
      case Op::Rem:
        if constexpr (std::is_same_v<T, float>) return remainder(a, b);
        return T(0);
      case Op::Fmod:
        if constexpr (std::is_same_v<T, float>) return std::fmod(a, b);
        return T(0);
      default: return T(0);
    }
  }
}

template <typename T>
bool compare(Op op, T a, T b) {
  switch (op) {
    case Op::Eq: return a == b;
    case Op::Ne: return a != b;
    case Op::Lt: return a < b;
    case Op::Le: return a <= b;
    case Op::Gt: return a > b;
    case Op::Ge: return a >= b;
    case Op::And: return a != T(0) && b != T(0);
    case Op::Or: return a != T(0) || b != T(0);
    default: return false;
  }
}

// Float add/sub/mul/div of contiguous operands where b (or a) is the same shape as out or a
// contiguous block repeated along leading dims (a bias, a position table): plain loops,
// vectorised (built per instruction set, isa.h) with the same per-element arithmetic as apply(),
// so the results are identical.
enum class FloatOp { kAdd, kSub, kRSub, kMul, kDiv, kRDiv };  // kR*: b op a

// o[i] = a[i] op b[i]. `o` may be `a` or `b` itself (in-place forms; the op goes through a
// temporary when an input overlaps `out` any other way), so no element is read after an earlier
// iteration wrote it: ATTN_IVDEP lets the compiler vectorise without its run-time overlap test,
// which fails for o == a.
ATTN_ISA_INLINE void float_binary_body(FloatOp op, const float* a, const float* b, float* o,
                                       int64_t n) {
  switch (op) {
    case FloatOp::kAdd:
      ATTN_IVDEP
      for (int64_t i = 0; i < n; ++i) o[i] = a[i] + b[i];
      break;
    case FloatOp::kSub:
      ATTN_IVDEP
      for (int64_t i = 0; i < n; ++i) o[i] = a[i] - b[i];
      break;
    case FloatOp::kRSub:
      ATTN_IVDEP
      for (int64_t i = 0; i < n; ++i) o[i] = b[i] - a[i];
      break;
    case FloatOp::kMul:
      ATTN_IVDEP
      for (int64_t i = 0; i < n; ++i) o[i] = a[i] * b[i];
      break;
    case FloatOp::kDiv:
      ATTN_IVDEP
      for (int64_t i = 0; i < n; ++i) o[i] = a[i] / b[i];
      break;
    case FloatOp::kRDiv:
      ATTN_IVDEP
      for (int64_t i = 0; i < n; ++i) o[i] = b[i] / a[i];
      break;
  }
}
ATTN_ISA_VARIANTS(void, float_binary,
                  (FloatOp op, const float* a, const float* b, float* o, int64_t n),
                  (op, a, b, o, n))

// o[i] = a[i] op s: float_binary against one element repeated (x * 2), one loop (not one call an
// element). `o` may be `a`.
ATTN_ISA_INLINE void float_binary_scalar_body(FloatOp op, const float* a, float s, float* o,
                                              int64_t n) {
  switch (op) {
    case FloatOp::kAdd:
      ATTN_IVDEP
      for (int64_t i = 0; i < n; ++i) o[i] = a[i] + s;
      break;
    case FloatOp::kSub:
      ATTN_IVDEP
      for (int64_t i = 0; i < n; ++i) o[i] = a[i] - s;
      break;
    case FloatOp::kRSub:
      ATTN_IVDEP
      for (int64_t i = 0; i < n; ++i) o[i] = s - a[i];
      break;
    case FloatOp::kMul:
      ATTN_IVDEP
      for (int64_t i = 0; i < n; ++i) o[i] = a[i] * s;
      break;
    case FloatOp::kDiv:
      ATTN_IVDEP
      for (int64_t i = 0; i < n; ++i) o[i] = a[i] / s;
      break;
    case FloatOp::kRDiv:
      ATTN_IVDEP
      for (int64_t i = 0; i < n; ++i) o[i] = s / a[i];
      break;
  }
}
ATTN_ISA_VARIANTS(void, float_binary_scalar,
                  (FloatOp op, const float* a, float s, float* o, int64_t n), (op, a, s, o, n))

// float_binary over n elements of `a` against `b`, either as long as `a` or (b_rep) nb elements
// repeated. Parallel above threads_for's size: each thread a contiguous range of the output (of
// whole repeats of b when b repeats), the same per-element arithmetic whatever the split.
void repeat_loop(FloatOp op, const float* a, const float* b, float* o, int64_t n, int64_t nb,
                 bool b_rep) {
  const int nt = threads_for(n);
  if (b_rep && nb == 1) {
    const float s = *b;
    parallel_ranges(n, nt, [&](int64_t i0, int64_t i1) {
      float_binary_scalar(op, a + i0, s, o + i0, i1 - i0);
    });
    return;
  }
  if (!b_rep) {
    parallel_ranges(
        n, nt, [&](int64_t i0, int64_t i1) { float_binary(op, a + i0, b + i0, o + i0, i1 - i0); });
    return;
  }
  parallel_ranges(n / nb, nt, [&](int64_t r0, int64_t r1) {
    for (int64_t base = r0 * nb; base < r1 * nb; base += nb)
      float_binary(op, a + base, b, o + base, nb);
  });
}

int64_t numel(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

// Whether `small` (contiguous) equals the trailing dims of `shape` after dropping its own
// leading size-1 dims, so that it repeats every numel(small) elements.
bool repeats_into(const Shape& small, const Shape& shape) {
  Shape s = small;
  std::size_t k = 0;
  while (k < s.size() && s[k] == 1) ++k;
  s.erase(s.begin(), s.begin() + std::ptrdiff_t(k));
  if (s.size() > shape.size()) return false;
  return std::equal(s.begin(), s.end(), shape.end() - std::ptrdiff_t(s.size()));
}

// op as the float loops' operation (add, sub, mul, div; false for the rest), with its arguments
// swapped back when `swap` (the loops get the operands the other way round).
bool float_op(Op op, bool swap, FloatOp& f) {
  switch (op) {
    case Op::Add: f = FloatOp::kAdd; return true;
    case Op::Mul: f = FloatOp::kMul; return true;
    case Op::Sub: f = swap ? FloatOp::kRSub : FloatOp::kSub; return true;
    case Op::Div: f = swap ? FloatOp::kRDiv : FloatOp::kDiv; return true;
    default: return false;
  }
}

// The fast case of a binary op (binary_fast_float, binary_fast_half): add/sub/mul/div of
// contiguous operands, one of them as long as the output (`full`), the other as long or a
// repeating block (`rep`, nb elements); the op with its arguments swapped back when `rep` is a.
struct FastPlan {
  FloatOp op;
  int64_t n, nb;
  bool repeats;
  bool full_is_a;
};

bool fast_plan(const Binary& p, FastPlan& plan) {
  const Op op = p.op;
  if (op != Op::Add && op != Op::Sub && op != Op::Mul && op != Op::Div) return false;
  if (!p.out_contiguous || !p.a.contiguous || !p.b.contiguous) return false;
  const Shape& shape = *p.shape;
  const int64_t n = numel(shape);
  const bool a_full = *p.a.shape == shape, b_full = *p.b.shape == shape;
  if (!a_full && !b_full) return false;
  const Shape& other = a_full ? *p.b.shape : *p.a.shape;
  const bool rep = !(a_full && b_full);
  const int64_t nb = numel(other);
  if (rep && (nb == 0 || !repeats_into(other, shape))) return false;
  if (!float_op(op, !a_full, plan.op)) return false;
  plan.n = n, plan.nb = nb, plan.repeats = rep, plan.full_is_a = a_full;
  return true;
}

// bfloat16 / float16 operands of the fast case: blocks widened to float on the stack, the float
// loop, each result rounded once (the arithmetic of the widening path, without its temporaries).
template <bool kBf16>
ATTN_ISA_INLINE void half_binary_body(FloatOp op, const uint16_t* a, const uint16_t* b, uint16_t* o,
                                      int64_t n) {
  constexpr int64_t kBlock = 512;
  alignas(64) float fa[kBlock], fb[kBlock];
  for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
    const int64_t m = std::min(kBlock, n - i0);
    for (int64_t i = 0; i < m; ++i) {
      fa[i] = kBf16 ? bf16_bits_to_float(a[i0 + i]) : fp16_bits_to_float(a[i0 + i]);
      fb[i] = kBf16 ? bf16_bits_to_float(b[i0 + i]) : fp16_bits_to_float(b[i0 + i]);
    }
    float_binary_body(op, fa, fb, fa, m);
    for (int64_t i = 0; i < m; ++i)
      o[i0 + i] = kBf16 ? float_to_bf16_bits(fa[i]) : float_to_fp16_bits(fa[i]);
  }
}
ATTN_ISA_INLINE void bf16_binary_body(FloatOp op, const uint16_t* a, const uint16_t* b, uint16_t* o,
                                      int64_t n) {
  half_binary_body<true>(op, a, b, o, n);
}
ATTN_ISA_INLINE void fp16_binary_body(FloatOp op, const uint16_t* a, const uint16_t* b, uint16_t* o,
                                      int64_t n) {
  half_binary_body<false>(op, a, b, o, n);
}
ATTN_ISA_VARIANTS(void, bf16_binary,
                  (FloatOp op, const uint16_t* a, const uint16_t* b, uint16_t* o, int64_t n),
                  (op, a, b, o, n))
ATTN_ISA_VARIANTS(void, fp16_binary,
                  (FloatOp op, const uint16_t* a, const uint16_t* b, uint16_t* o, int64_t n),
                  (op, a, b, o, n))

template <typename H>
bool binary_fast_half(const Binary& p) {
  FastPlan plan;
  if (!fast_plan(p, plan)) return false;
  if (plan.n == 0) return true;
  const auto* pa = static_cast<const uint16_t*>(p.a.storage) + p.a.offset;
  const auto* pb = static_cast<const uint16_t*>(p.b.storage) + p.b.offset;
  auto* po = static_cast<uint16_t*>(p.out_storage) + p.out_offset;
  const uint16_t* pf = plan.full_is_a ? pa : pb;
  const uint16_t* pr = plan.full_is_a ? pb : pa;
  auto f = std::is_same_v<H, BFloat16> ? bf16_binary : fp16_binary;
  const int nt = threads_for(plan.n);
  if (!plan.repeats) {
    parallel_ranges(plan.n, nt, [&](int64_t i0, int64_t i1) {
      f(plan.op, pf + i0, pr + i0, po + i0, i1 - i0);
    });
    return true;
  }
  const int64_t nb = plan.nb;
  if (nb == 1) {  // one element repeated (x * 2): runs against a block of copies, not one call each
    constexpr int64_t kRun = 512;
    uint16_t copies[kRun];
    std::fill(copies, copies + kRun, *pr);
    parallel_ranges(plan.n, nt, [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; i += kRun)
        f(plan.op, pf + i, copies, po + i, std::min(kRun, i1 - i));
    });
    return true;
  }
  parallel_ranges(plan.n / nb, nt, [&](int64_t r0, int64_t r1) {
    for (int64_t base = r0 * nb; base < r1 * nb; base += nb)
      f(plan.op, pf + base, pr, po + base, nb);
  });
  return true;
}

bool binary_fast_float(const Binary& p) {
  FastPlan plan;
  if (!fast_plan(p, plan)) return false;
  if (plan.n == 0) return true;
  const float* pa = static_cast<const float*>(p.a.storage) + p.a.offset;
  const float* pb = static_cast<const float*>(p.b.storage) + p.b.offset;
  float* po = static_cast<float*>(p.out_storage) + p.out_offset;
  // The repeated operand is passed second (plan.op has the arguments swapped back).
  repeat_loop(plan.op, plan.full_is_a ? pa : pb, plan.full_is_a ? pb : pa, po, plan.n, plan.nb,
              plan.repeats);
  return true;
}

// Float add/sub/mul/div whose innermost dim (after merging the dims all three step through as one)
// has out and one operand at stride 1 and the other at 1 or 0: each row is one call of
// float_binary or float_binary_scalar, the rows shared among the threads (x * col: one value a
// row; a bias along a middle dim; operands laid out as the result in part). Rows of fewer than 16
// elements are left to the element loop.
bool binary_rows_float(const Binary& p) {
  FloatOp fop;
  if (!float_op(p.op, false, fop)) return false;
  const Walk<3> w = coalesce<3>(*p.shape, {p.out_strides, p.a.strides, p.b.strides});
  if (w.empty || w.shape.empty()) return false;
  const std::size_t last = w.shape.size() - 1;
  const int64_t cols = w.shape[last], so = w.strides[0][last], sa = w.strides[1][last],
                sb = w.strides[2][last];
  if (so != 1 || cols < 16) return false;
  // swap: b is the operand at stride 1, a the other (the op's arguments swapped back).
  const bool swap = !(sa == 1 && (sb == 1 || sb == 0));
  if (swap && !(sa == 0 && sb == 1)) return false;
  float_op(p.op, swap, fop);
  const bool one_value = (swap ? sa : sb) == 0;
  const float* pa = static_cast<const float*>(p.a.storage);
  const float* pb = static_cast<const float*>(p.b.storage);
  float* po = static_cast<float*>(p.out_storage);
  const int64_t rows = w.rows();
  parallel_ranges(rows, threads_for(rows * cols), [&](int64_t r0, int64_t r1) {
    walk_rows(w, {p.out_offset, p.a.offset, p.b.offset}, r0, r1,
              [&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>&) {
                const float* full = swap ? pb + off[2] : pa + off[1];
                const float* other = swap ? pa + off[1] : pb + off[2];
                if (one_value)
                  float_binary_scalar(fop, full, *other, po + off[0], n);
                else
                  float_binary(fop, full, other, po + off[0], n);
              });
  });
  return true;
}

// Whether pow_scalar computes a ** e by arithmetic (one of torch's formulas below), not std::pow.
bool pow_by_formula(float e) {
  return e == 2.0f || e == 3.0f || e == 0.5f || e == -0.5f || e == -1.0f || e == -2.0f ||
         e == 1.0f || e == 0.0f;
}

// a ** e for one exponent e, as torch's CPU kernel: x * x for 2, x * x * x for 3, sqrt for 0.5,
// 1 / sqrt for -0.5, 1 / x for -1, 1 / (x * x) for -2 (so that -0 and -inf follow those
// formulas, not std::pow), a copy for 1 and ones for 0 (as torch's pow_out; std::pow's values
// too, NaN included: pow(x, 1) is x, pow(x, 0) is 1), std::pow otherwise; one loop per exponent
// (vectorised where it is arithmetic), not the per-element switch. Exponent 1 is what the
// gradient of x.pow(2) raises x to.
ATTN_ISA_INLINE void pow_scalar_body(const float* a, float e, float* o, int64_t n) {
  if (e == 1.0f) {
    if (o != a) std::copy(a, a + n, o);  // o may be a (pow_)
  } else if (e == 0.0f) {
    std::fill_n(o, n, 1.0f);
  } else if (e == 2.0f) {
    ATTN_IVDEP
    for (int64_t i = 0; i < n; ++i) o[i] = a[i] * a[i];
  } else if (e == 3.0f) {
    ATTN_IVDEP
    for (int64_t i = 0; i < n; ++i) o[i] = a[i] * a[i] * a[i];
  } else if (e == 0.5f) {
    ATTN_IVDEP
    for (int64_t i = 0; i < n; ++i) o[i] = std::sqrt(a[i]);
  } else if (e == -0.5f) {
    ATTN_IVDEP
    for (int64_t i = 0; i < n; ++i) o[i] = 1.0f / std::sqrt(a[i]);
  } else if (e == -1.0f) {
    ATTN_IVDEP
    for (int64_t i = 0; i < n; ++i) o[i] = 1.0f / a[i];
  } else if (e == -2.0f) {
    ATTN_IVDEP
    for (int64_t i = 0; i < n; ++i) o[i] = 1.0f / (a[i] * a[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) o[i] = std::pow(a[i], e);
  }
}
ATTN_ISA_VARIANTS(void, pow_scalar, (const float* a, float e, float* o, int64_t n), (a, e, o, n))

// A contiguous float tensor to one exponent (x.pow(2), the mean square of an RMSNorm), on the
// threads above a size: pow_scalar.
bool binary_pow_scalar(const Binary& p) {
  if (p.op != Op::Pow || !p.out_contiguous || !p.a.contiguous || *p.a.shape != *p.shape)
    return false;
  if (numel(*p.b.shape) != 1) return false;
  const int64_t n = numel(*p.shape);
  const float* pa = static_cast<const float*>(p.a.storage) + p.a.offset;
  const float e = static_cast<const float*>(p.b.storage)[p.b.offset];
  float* po = static_cast<float*>(p.out_storage) + p.out_offset;
  parallel_ranges(n, threads_for(n, pow_by_formula(e) ? kParallelElems : int64_t(1) << 12),
                  [&](int64_t i0, int64_t i1) { pow_scalar(pa + i0, e, po + i0, i1 - i0); });
  return true;
}

// out[i] = a[i] op b[i] in compute type T (broadcast views allowed). OpT is Op (the op read per
// element: one loop for every op) or std::integral_constant<Op, kOp> (each loop compiled for its
// one operation: no switch per element, integer loops vectorise).
template <typename T, typename OpT>
void binary_loop(const Binary& p, OpT op) {
  const T* pa = static_cast<const T*>(p.a.storage);
  const T* pb = static_cast<const T*>(p.b.storage);
  int64_t n = 1;
  for (int64_t d : *p.shape) n *= d;
  // Each element is written once: shared among the threads above a size.
  const int nt = threads_for(n);
  if (backend::is_comparison(op)) {
    bool* po = static_cast<bool*>(p.out_storage);
    parallel_strided_loop<3>(
        *p.shape, {p.out_strides, p.a.strides, p.b.strides}, {p.out_offset, p.a.offset, p.b.offset},
        nt,
        [&](const std::array<int64_t, 3>& o) { po[o[0]] = compare(Op(op), pa[o[1]], pb[o[2]]); });
  } else {
    T* po = static_cast<T*>(p.out_storage);
    parallel_strided_loop<3>(
        *p.shape, {p.out_strides, p.a.strides, p.b.strides}, {p.out_offset, p.a.offset, p.b.offset},
        nt, [&](const std::array<int64_t, 3>& o) { po[o[0]] = apply(Op(op), pa[o[1]], pb[o[2]]); });
  }
}

template <typename T, Op kOp>
void run_op(const Binary& p) {
  binary_loop<T>(p, std::integral_constant<Op, kOp>{});
}

// p with its dims in out's memory order (out's strides decreasing, ties in place), so that the
// strided loops below write out as one run where it is dense, whatever its layout (a result laid
// out as a transposed operand: x.t() + y).
struct InOutOrder {
  Shape shape, out, a, b;
  Binary p;
  explicit InOutOrder(const Binary& in) : p(in) {
    const std::size_t n = in.shape->size();
    std::vector<std::size_t> perm(n);
    for (std::size_t i = 0; i < n; ++i) perm[i] = i;
    std::stable_sort(perm.begin(), perm.end(), [&](std::size_t x, std::size_t y) {
      return (*in.out_strides)[x] > (*in.out_strides)[y];
    });
    for (std::size_t d : perm) {
      shape.push_back((*in.shape)[d]);
      out.push_back((*in.out_strides)[d]);
      a.push_back((*in.a.strides)[d]);
      b.push_back((*in.b.strides)[d]);
    }
    p.shape = &shape, p.out_strides = &out, p.a.strides = &a, p.b.strides = &b;
  }
};

// Whether every operand's innermost stride is 0 or 1: the inner loop then reads runs the
// compiler vectorises well once the op is fixed; across strides (a transposed operand) its
// vector code is slower than the plain loop (measured: x * y.t(), 1024 x 1024, 1.2x).
bool unit_inner_strides(const Binary& p) {
  if (p.shape->empty()) return true;
  for (const Shape* st : {p.out_strides, p.a.strides, p.b.strides})
    if (st->back() != 0 && st->back() != 1) return false;
  return true;
}

// bfloat16 / float16: the fast case above, else each element widened, the float op (apply,
// compare), the result rounded once.
template <typename H>
void run_binary_half(const Binary& in) {
  if (binary_fast_half<H>(in)) return;
  const InOutOrder ordered(in);
  const Binary& p = ordered.p;
  const H* pa = static_cast<const H*>(p.a.storage);
  const H* pb = static_cast<const H*>(p.b.storage);
  const Op op = p.op;
  int64_t n = 1;
  for (int64_t d : *p.shape) n *= d;
  // Each element is written once: shared among the threads above a size, as binary_loop's.
  const int nt = threads_for(n);
  if (backend::is_comparison(op)) {
    bool* po = static_cast<bool*>(p.out_storage);
    parallel_strided_loop<3>(*p.shape, {p.out_strides, p.a.strides, p.b.strides},
                             {p.out_offset, p.a.offset, p.b.offset}, nt,
                             [&](const std::array<int64_t, 3>& o) {
                               po[o[0]] = compare(op, float(pa[o[1]]), float(pb[o[2]]));
                             });
    return;
  }
  H* po = static_cast<H*>(p.out_storage);
  parallel_strided_loop<3>(*p.shape, {p.out_strides, p.a.strides, p.b.strides},
                           {p.out_offset, p.a.offset, p.b.offset}, nt,
                           [&](const std::array<int64_t, 3>& o) {
                             po[o[0]] = H(apply(op, float(pa[o[1]]), float(pb[o[2]])));
                           });
}

template <typename T>
void run_binary(const Binary& in) {
  if constexpr (std::is_same_v<T, float>) {
    if (binary_fast_float(in) || binary_pow_scalar(in)) return;
  }
  const InOutOrder ordered(in);
  const Binary& p = ordered.p;
  if constexpr (std::is_same_v<T, float>) {
    if (binary_rows_float(p)) return;
  }
  if (!unit_inner_strides(p)) return binary_loop<T>(p, p.op);
  switch (p.op) {
    case Op::Add: return run_op<T, Op::Add>(p);
    case Op::Sub: return run_op<T, Op::Sub>(p);
    case Op::Mul: return run_op<T, Op::Mul>(p);
    case Op::Div: return run_op<T, Op::Div>(p);
    case Op::Pow: return run_op<T, Op::Pow>(p);
    case Op::Max: return run_op<T, Op::Max>(p);
    case Op::Min: return run_op<T, Op::Min>(p);
    case Op::FloorDiv: return run_op<T, Op::FloorDiv>(p);
    case Op::TruncDiv: return run_op<T, Op::TruncDiv>(p);
    case Op::Rem: return run_op<T, Op::Rem>(p);
    case Op::Fmod: return run_op<T, Op::Fmod>(p);
    case Op::Eq: return run_op<T, Op::Eq>(p);
    case Op::Ne: return run_op<T, Op::Ne>(p);
    case Op::Lt: return run_op<T, Op::Lt>(p);
    case Op::Le: return run_op<T, Op::Le>(p);
    case Op::Gt: return run_op<T, Op::Gt>(p);
    case Op::Ge: return run_op<T, Op::Ge>(p);
    case Op::And: return run_op<T, Op::And>(p);
    case Op::Or: return run_op<T, Op::Or>(p);
  }
}

}  // namespace
}  // namespace attn::kernels

namespace attn::backend::cpu {
// float32, int64, bool; bfloat16 and float16 in float32 per element, rounded once.
const Kernels<BinaryFn> binary = {kernels::run_binary<float>, kernels::run_binary<int64_t>,
                                  kernels::run_binary<bool>, kernels::run_binary_half<BFloat16>,
                                  kernels::run_binary_half<Half>};
}  // namespace attn::backend::cpu

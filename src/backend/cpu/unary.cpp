// The unary float functions on the CPU (src/backend/elementwise_kernels.h), as PyTorch's: exp,
// the sigmoid (1 / (1 + exp(-x))), tanh, log, sin and cos as vector polynomials (vmath.h) within a
// few ulp of the C library's, as torch's vectorised Sleef kernels are; sqrt, rsqrt, abs, neg, relu
// (keeping -0 and NaN), ceil, floor and the predicates vectorised with the C library's bits;
// log1p, expm1, log2, log10, exp2, erf, erfc, tan, sinh, cosh, asin, acos, atan, ... one C
// library call an element, correctly rounded or within an ulp; erfinv as torch 1.13's CPU kernel.
// Every element-wise loop runs on the threads above a size. And the selection of where() and
// masked_fill().
#include "unary.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "../elementwise_kernels.h"
#include "isa.h"
#include "strided.h"
#include "threads.h"
#include "vmath.h"

namespace attn::kernels {
namespace {

using backend::Unary;
using backend::UnaryOp;

// a * b + c rounded once, as the FMA that torch's AVX2 build contracts these polynomials to.
inline float fma_(float a, float b, float c) { return std::fma(a, b, c); }

// The inverse error function in float arithmetic as torch 1.13's CPU kernel computes it: a
// rational first guess (one formula for |y| <= 0.7, another in the tails), then two Newton steps
// on erf(x) - y. |y| > 1 gives NaN, y = +-1 gives +-inf.
float erfinv_float(float y) {
  const float ay = std::fabs(y);
  if (ay > 1.0f) return std::numeric_limits<float>::quiet_NaN();
  if (ay == 1.0f) return std::copysign(std::numeric_limits<float>::infinity(), y);
  float x;
  if (ay <= 0.7f) {
    const float z = y * y;
    const float num =
        fma_(fma_(fma_(-0.140543331f, z, 0.914624893f), z, -1.645349621f), z, 0.886226899f);
    const float den =
        fma_(fma_(fma_(fma_(0.012229801f, z, -0.329097515f), z, 1.442710462f), z, -2.118377725f), z,
             1.0f);
    x = y * num / den;
  } else {
    const float z = std::sqrt(-std::log((1.0f - ay) / 2.0f));
    const float num =
        fma_(fma_(fma_(1.641345311f, z, 3.429567803f), z, -1.624906493f), z, -1.970840454f);
    const float den = fma_(fma_(1.637067800f, z, 3.543889200f), z, 1.0f);
    x = std::copysign(num, y) / den;
  }
  const float two_over_sqrt_pi = 2.0f / static_cast<float>(std::sqrt(M_PI));
  for (int step = 0; step < 2; ++step)
    x = x - (std::erf(x) - y) / (two_over_sqrt_pi * std::exp(-x * x));
  return x;
}

// The value of `Op` at x as the C library computes it (and relu keeping -0 and NaN, the sigmoid
// as 1 / (1 + e^-x), erfinv as torch 1.13's): the result wherever no vector form applies.
template <UnaryOp Op>
ATTN_ISA_INLINE auto exact(float x) {
  using enum UnaryOp;
  if constexpr (Op == Exp)
    return std::exp(x);
  else if constexpr (Op == Log)
    return std::log(x);
  else if constexpr (Op == Sqrt)
    return std::sqrt(x);
  else if constexpr (Op == Rsqrt)
    return 1.0f / std::sqrt(x);
  else if constexpr (Op == Tanh)
    return std::tanh(x);
  else if constexpr (Op == Sigmoid)
    return 1.0f / (1.0f + std::exp(-x));
  else if constexpr (Op == Abs)
    return std::fabs(x);
  else if constexpr (Op == Neg)
    return -x;
  else if constexpr (Op == Relu)
    return x < 0 ? 0.f : x;
  else if constexpr (Op == Ceil)
    return std::ceil(x);
  else if constexpr (Op == Floor)
    return std::floor(x);
  else if constexpr (Op == Erfinv)
    return erfinv_float(x);
  else if constexpr (Op == Cos)
    return std::cos(x);
  else if constexpr (Op == Sin)
    return std::sin(x);
  else if constexpr (Op == Log1p)
    return std::log1p(x);
  else if constexpr (Op == Expm1)
    return std::expm1(x);
  else if constexpr (Op == Log2)
    return std::log2(x);
  else if constexpr (Op == Log10)
    return std::log10(x);
  else if constexpr (Op == Exp2)
    return std::exp2(x);
  else if constexpr (Op == Erf)
    return std::erf(x);
  else if constexpr (Op == Erfc)
    return std::erfc(x);
  else if constexpr (Op == Tan)
    return std::tan(x);
  else if constexpr (Op == Sinh)
    return std::sinh(x);
  else if constexpr (Op == Cosh)
    return std::cosh(x);
  else if constexpr (Op == Asin)
    return std::asin(x);
  else if constexpr (Op == Acos)
    return std::acos(x);
  else if constexpr (Op == Atan)
    return std::atan(x);
  else if constexpr (Op == Asinh)
    return std::asinh(x);
  else if constexpr (Op == Acosh)
    return std::acosh(x);
  else if constexpr (Op == Atanh)
    return std::atanh(x);
  else if constexpr (Op == IsNan)
    return bool(std::isnan(x));
  else if constexpr (Op == IsInf)
    return bool(std::isinf(x));
  else
    return bool(std::isfinite(x));
}

// exp, the sigmoid, tanh, log, sin and cos in vector form (vmath.h's polynomials: within 1, 2,
// 2, 2, 2 and 2 ulp of the C library's, as torch's Sleef kernels are within 1 of the exact value),
// for inputs in [lo, hi]: where exp and the sigmoid neither saturate nor meet a denormal result,
// log's positive normal numbers, sin's and cos's |x| <= 8192 (their argument reduction's range).
// NaN, infinities and the rest take exact().
template <UnaryOp Op>
constexpr bool kVectorForm = Op == UnaryOp::Exp || Op == UnaryOp::Sigmoid || Op == UnaryOp::Tanh ||
                             Op == UnaryOp::Log || Op == UnaryOp::Sin || Op == UnaryOp::Cos;
template <UnaryOp Op>
constexpr float kLo = Op == UnaryOp::Tanh  ? -std::numeric_limits<float>::max()
                      : Op == UnaryOp::Log ? std::numeric_limits<float>::min()
                      : Op == UnaryOp::Sin || Op == UnaryOp::Cos ? -8192.0f
                                                                 : -87.0f;
template <UnaryOp Op>
constexpr float kHi = Op == UnaryOp::Tanh || Op == UnaryOp::Log  ? std::numeric_limits<float>::max()
                      : Op == UnaryOp::Sin || Op == UnaryOp::Cos ? 8192.0f
                      : Op == UnaryOp::Exp                       ? 88.0f
                                                                 : 87.0f;

// Whether x takes the vector form: in [lo, hi], and for sin not a zero (whose sign the polynomial
// would lose: sin(-0) is -0).
template <UnaryOp Op>
ATTN_ISA_INLINE bool in_domain(float x) {
  if constexpr (Op == UnaryOp::Sin)
    return x >= kLo<Op> && x <= kHi<Op> && x != 0.0f;
  else
    return x >= kLo<Op> && x <= kHi<Op>;
}

template <UnaryOp Op>
ATTN_ISA_INLINE float vector_form(float x) {
  if constexpr (Op == UnaryOp::Exp)
    return vmath::exp_in_range(x);
  else if constexpr (Op == UnaryOp::Sigmoid)
    return 1.0f / (1.0f + vmath::exp_in_range(-x));
  else if constexpr (Op == UnaryOp::Tanh)
    return vmath::tanh(x);
  else if constexpr (Op == UnaryOp::Log)
    return vmath::log_normal(x);
  else if constexpr (Op == UnaryOp::Sin)
    return vmath::sin_small(x);
  else
    return vmath::cos_small(x);
}

// y[i] = Op(x[i]) for i < n, contiguous; y may be x (in place). Loops GCC vectorises: those of the
// element-exact ops (sqrt, rsqrt, abs, neg, relu, ceil, floor, the predicates) give exact()'s
// bits, those of kVectorForm the polynomials in runs of kRun, a run with any input outside
// [lo, hi] taking exact() there. The C library's other functions run one call an element.
template <UnaryOp Op>
ATTN_ISA_INLINE void run(const float* x, void* out, int64_t n) {
  using R = decltype(exact<Op>(0.0f));
  R* y = static_cast<R*>(out);
  if constexpr (kVectorForm<Op>) {
    constexpr int64_t kRun = 256;
    alignas(64) float fast[kRun];
    for (int64_t i0 = 0; i0 < n; i0 += kRun) {
      const int64_t m = std::min(kRun, n - i0);
      const float* xr = x + i0;
      float* yr = y + i0;
      int outside = 0;
      for (int64_t i = 0; i < m; ++i) outside |= int(!in_domain<Op>(xr[i]));
      if (!outside) {
        ATTN_IVDEP
        for (int64_t i = 0; i < m; ++i) yr[i] = vector_form<Op>(xr[i]);
        continue;
      }
      // The polynomials' integer steps would overflow outside their domain: 1 there instead
      // (inside every domain), its result replaced below.
      for (int64_t i = 0; i < m; ++i)
        fast[i] = vector_form<Op>(in_domain<Op>(xr[i]) ? xr[i] : 1.0f);
      for (int64_t i = 0; i < m; ++i) yr[i] = in_domain<Op>(xr[i]) ? fast[i] : exact<Op>(xr[i]);
    }
  } else {
    ATTN_IVDEP
    for (int64_t i = 0; i < n; ++i) y[i] = exact<Op>(x[i]);
  }
}

ATTN_ISA_INLINE void run_op_body(UnaryOp op, const float* x, void* out, int64_t n) {
  switch (op) {
#define ATTN_UNARY_CASE(name) \
  case UnaryOp::name: return run<UnaryOp::name>(x, out, n);
    // clang-format off
    ATTN_UNARY_CASE(Exp) ATTN_UNARY_CASE(Log) ATTN_UNARY_CASE(Sqrt) ATTN_UNARY_CASE(Rsqrt)
    ATTN_UNARY_CASE(Tanh) ATTN_UNARY_CASE(Sigmoid) ATTN_UNARY_CASE(Abs) ATTN_UNARY_CASE(Neg)
    ATTN_UNARY_CASE(Relu) ATTN_UNARY_CASE(Ceil) ATTN_UNARY_CASE(Floor) ATTN_UNARY_CASE(Erfinv)
    ATTN_UNARY_CASE(Cos) ATTN_UNARY_CASE(Sin) ATTN_UNARY_CASE(Log1p) ATTN_UNARY_CASE(Expm1)
    ATTN_UNARY_CASE(Log2) ATTN_UNARY_CASE(Log10) ATTN_UNARY_CASE(Exp2) ATTN_UNARY_CASE(Erf)
    ATTN_UNARY_CASE(Erfc) ATTN_UNARY_CASE(Tan) ATTN_UNARY_CASE(Sinh) ATTN_UNARY_CASE(Cosh)
    ATTN_UNARY_CASE(Asin) ATTN_UNARY_CASE(Acos) ATTN_UNARY_CASE(Atan) ATTN_UNARY_CASE(Asinh)
    ATTN_UNARY_CASE(Acosh) ATTN_UNARY_CASE(Atanh) ATTN_UNARY_CASE(IsNan) ATTN_UNARY_CASE(IsInf)
    ATTN_UNARY_CASE(IsFinite)
    // clang-format on
#undef ATTN_UNARY_CASE
  }
}
ATTN_ISA_VARIANTS(void, run_op, (UnaryOp op, const float* x, void* out, int64_t n), (op, x, out, n))

// Elements per thread below which a region costs more than it saves: a few flops an element for
// the element-exact ops, a polynomial for the vector forms, a call to the C library for the rest.
int64_t min_parallel_elems(UnaryOp op) {
  switch (op) {
    case UnaryOp::Sqrt:
    case UnaryOp::Rsqrt:
    case UnaryOp::Abs:
    case UnaryOp::Neg:
    case UnaryOp::Relu:
    case UnaryOp::Ceil:
    case UnaryOp::Floor:
    case UnaryOp::IsNan:
    case UnaryOp::IsInf:
    case UnaryOp::IsFinite: return kParallelElems;
    case UnaryOp::Exp:
    case UnaryOp::Sigmoid:
    case UnaryOp::Tanh:
    case UnaryOp::Log:
    case UnaryOp::Sin:
    case UnaryOp::Cos: return int64_t(1) << 15;
    default: return int64_t(1) << 12;
  }
}

// out = op(x) in row-major order. A strided input is gathered first (copy's kernel) into the
// output, or for the predicates (whose bool output cannot hold it) into a buffer, and computed from
// there, so that a view's results are those of its contiguous copy, bit for bit.
void unary_f32(const Unary& u) {
  const Shape& shape = *u.shape;
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  if (n == 0) return;
  const float* x = static_cast<const float*>(u.storage) + u.offset;
  std::vector<float> gathered;
  const Walk<1> walk = coalesce<1>(shape, {u.strides});
  if (!walk.shape.empty() && (walk.shape.size() > 1 || walk.strides[0][0] != 1)) {
    float* y = static_cast<float*>(u.out);
    if (backend::is_predicate(u.op)) {
      gathered.resize(static_cast<std::size_t>(n));
      y = gathered.data();
    }
    const Shape dense = row_major_strides(shape);
    backend::cpu::copy[int(Dtype::Float32)](
        {&shape, y, 0, &dense, u.storage, Dtype::Float32, u.offset, u.strides});
    x = y;
  }
  const int64_t size = backend::is_predicate(u.op) ? int64_t(sizeof(bool)) : int64_t(sizeof(float));
  char* out = static_cast<char*>(u.out);
  parallel_ranges(n, threads_for(n, min_parallel_elems(u.op)),
                  [&](int64_t i0, int64_t i1) { run_op(u.op, x + i0, out + i0 * size, i1 - i0); });
}

// c ? x : y without a branch (a random mask would mispredict half of them): y with the bits where
// x differs flipped under a mask of all ones or all zeros. Loops of it vectorise.
template <typename T>
inline T pick_bits(bool c, T x, T y) {
  return T(y ^ ((x ^ y) & T(T(0) - T(c))));
}

// out = cond ? a : b along one row of n elements (operands from their row offsets, inner: their
// strides along the row). The common layouts (everything contiguous along the row, a or b one
// value repeated) are loops the compiler vectorises. In place (out is b), each element is read
// before it is written.
template <typename T>
inline void select_row(T* out, const bool* c, const T* a, const T* b, int64_t n,
                       const std::array<int64_t, 4>& in) {
  if (in[0] == 1 && in[1] == 1) {
    if (in[2] == 0 && in[3] == 1) {
      const T v = *a;
      for (int64_t i = 0; i < n; ++i) out[i] = pick_bits(c[i], v, b[i]);
      return;
    }
    if (in[2] == 1 && in[3] == 0) {
      const T v = *b;
      for (int64_t i = 0; i < n; ++i) out[i] = pick_bits(c[i], a[i], v);
      return;
    }
    if (in[2] == 1 && in[3] == 1) {
      for (int64_t i = 0; i < n; ++i) out[i] = pick_bits(c[i], a[i], b[i]);
      return;
    }
  }
  for (int64_t i = 0; i < n; ++i)
    out[i * in[0]] = pick_bits(c[i * in[1]], a[i * in[2]], b[i * in[3]]);
}

// T: an unsigned integer as wide as the element, so that a copy keeps its bits. Every element of
// out is written once (out repeats none), so the rows are shared among the threads above a size.
template <typename T>
void select(const backend::Select& s) {
  int64_t n = 1;
  for (int64_t d : *s.shape) n *= d;
  T* out = static_cast<T*>(s.out);
  const bool* c = static_cast<const bool*>(s.cond.storage);
  const T* a = static_cast<const T*>(s.a.storage);
  const T* b = static_cast<const T*>(s.b.storage);
  parallel_strided_rows<4>(
      *s.shape, {s.out_strides, s.cond.strides, s.a.strides, s.b.strides},
      {s.out_offset, s.cond.offset, s.a.offset, s.b.offset}, threads_for(n),
      [&](const std::array<int64_t, 4>& o, int64_t len, const std::array<int64_t, 4>& in) {
        select_row(out + o[0], c + o[1], a + o[2], b + o[3], len, in);
      });
}

}  // namespace

void exp_floats(const float* x, float* y, int64_t n) { run_op(UnaryOp::Exp, x, y, n); }

}  // namespace attn::kernels

namespace attn::backend::cpu {
// float32 (the op computes every floating dtype in float32).
const Kernels<UnaryFn> unary = {kernels::unary_f32};
// Every dtype, by the width of its elements.
const Kernels<SelectFn> select = {kernels::select<uint32_t>, kernels::select<uint64_t>,
                                  kernels::select<uint8_t>, kernels::select<uint16_t>,
                                  kernels::select<uint16_t>};
}  // namespace attn::backend::cpu

// The unary float functions on the CPU (src/backend/elementwise_kernels.h), as PyTorch's: the C
// library's exp, log, sqrt, tanh, cos, sin (and log1p, expm1, log2, log10, exp2, erf, erfc, tan,
// sinh, cosh, asin, acos, atan; correctly rounded or within an ulp, where torch's vectorised
// Sleef kernels may round differently), the sigmoid as 1 / (1 + exp(-x)), relu keeping -0 and
// NaN, erfinv as torch 1.13's CPU kernel; and the masked assignment of where() and masked_fill_().
#include <cmath>
#include <cstdint>
#include <limits>

#include "../elementwise_kernels.h"
#include "strided.h"

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

// out[i] = f(x) over the strided input, in row-major order.
template <typename T, typename F>
void map(const Unary& u, F f) {
  const float* ps = static_cast<const float*>(u.storage);
  T* po = static_cast<T*>(u.out);
  int64_t i = 0;
  strided_loop<1>(*u.shape, {u.strides}, {u.offset},
                  [&](const std::array<int64_t, 1>& o) { po[i++] = f(ps[o[0]]); });
}

void unary_f32(const Unary& u) {
  switch (u.op) {
    case UnaryOp::Exp: return map<float>(u, [](float x) { return std::exp(x); });
    case UnaryOp::Log: return map<float>(u, [](float x) { return std::log(x); });
    case UnaryOp::Sqrt: return map<float>(u, [](float x) { return std::sqrt(x); });
    case UnaryOp::Rsqrt: return map<float>(u, [](float x) { return 1.0f / std::sqrt(x); });
    case UnaryOp::Tanh: return map<float>(u, [](float x) { return std::tanh(x); });
    case UnaryOp::Sigmoid:
      return map<float>(u, [](float x) { return 1.0f / (1.0f + std::exp(-x)); });
    case UnaryOp::Abs: return map<float>(u, [](float x) { return std::fabs(x); });
    case UnaryOp::Neg: return map<float>(u, [](float x) { return -x; });
    case UnaryOp::Relu: return map<float>(u, [](float x) { return x < 0 ? 0.f : x; });
    case UnaryOp::Ceil: return map<float>(u, [](float x) { return std::ceil(x); });
    case UnaryOp::Floor: return map<float>(u, [](float x) { return std::floor(x); });
    case UnaryOp::Erfinv: return map<float>(u, erfinv_float);
    case UnaryOp::Cos: return map<float>(u, [](float x) { return std::cos(x); });
    case UnaryOp::Sin: return map<float>(u, [](float x) { return std::sin(x); });
    case UnaryOp::Log1p: return map<float>(u, [](float x) { return std::log1p(x); });
    case UnaryOp::Expm1: return map<float>(u, [](float x) { return std::expm1(x); });
    case UnaryOp::Log2: return map<float>(u, [](float x) { return std::log2(x); });
    case UnaryOp::Log10: return map<float>(u, [](float x) { return std::log10(x); });
    case UnaryOp::Exp2: return map<float>(u, [](float x) { return std::exp2(x); });
    case UnaryOp::Erf: return map<float>(u, [](float x) { return std::erf(x); });
    case UnaryOp::Erfc: return map<float>(u, [](float x) { return std::erfc(x); });
    case UnaryOp::Tan: return map<float>(u, [](float x) { return std::tan(x); });
    case UnaryOp::Sinh: return map<float>(u, [](float x) { return std::sinh(x); });
    case UnaryOp::Cosh: return map<float>(u, [](float x) { return std::cosh(x); });
    case UnaryOp::Asin: return map<float>(u, [](float x) { return std::asin(x); });
    case UnaryOp::Acos: return map<float>(u, [](float x) { return std::acos(x); });
    case UnaryOp::Atan: return map<float>(u, [](float x) { return std::atan(x); });
    case UnaryOp::Asinh: return map<float>(u, [](float x) { return std::asinh(x); });
    case UnaryOp::Acosh: return map<float>(u, [](float x) { return std::acosh(x); });
    case UnaryOp::Atanh: return map<float>(u, [](float x) { return std::atanh(x); });
    case UnaryOp::IsNan: return map<bool>(u, [](float x) { return std::isnan(x); });
    case UnaryOp::IsInf: return map<bool>(u, [](float x) { return std::isinf(x); });
    case UnaryOp::IsFinite: return map<bool>(u, [](float x) { return std::isfinite(x); });
  }
}

// T: an unsigned integer as wide as the element, so that a copy keeps its bits.
template <typename T>
void masked_assign(const backend::MaskedAssign& m) {
  T* base = static_cast<T*>(m.storage);
  const T* src = static_cast<const T*>(m.src);
  int64_t i = 0;
  if (m.src_scalar) {
    const T v = *src;
    strided_loop<1>(*m.shape, {m.strides}, {m.offset}, [&](const std::array<int64_t, 1>& o) {
      if (m.mask[i++]) base[o[0]] = v;
    });
  } else {
    strided_loop<1>(*m.shape, {m.strides}, {m.offset}, [&](const std::array<int64_t, 1>& o) {
      if (m.mask[i]) base[o[0]] = src[i];
      ++i;
    });
  }
}

}  // namespace
}  // namespace attn::kernels

namespace attn::backend::cpu {
// float32 (the op computes every floating dtype in float32).
const Kernels<UnaryFn> unary = {kernels::unary_f32};
// Every dtype, by the width of its elements.
const Kernels<MaskedAssignFn> masked_assign = {
    kernels::masked_assign<uint32_t>, kernels::masked_assign<uint64_t>,
    kernels::masked_assign<uint8_t>, kernels::masked_assign<uint16_t>,
    kernels::masked_assign<uint16_t>};
}  // namespace attn::backend::cpu

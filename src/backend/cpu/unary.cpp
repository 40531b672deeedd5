// The unary float functions on the CPU (src/backend/elementwise_kernels.h), as PyTorch's: the C
// library's exp, log, sqrt, tanh, the sigmoid as 1 / (1 + exp(-x)), relu keeping -0 and NaN;
// and the masked assignment of where() and masked_fill_().
#include <cmath>
#include <cstdint>

#include "../elementwise_kernels.h"
#include "strided.h"

namespace attn::kernels {
namespace {

using backend::Unary;
using backend::UnaryOp;

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

// The kernels of the element-wise ops (src/ops/elementwise.cpp; clamp in src/ops/scan_clamp.cpp;
// copy_ and the dtype conversions in src/tensor/copy.cpp):
// the binary ones (arithmetic, maximum and minimum, comparisons and logical and/or on broadcast
// operands), the unary float functions, clamp, and the masked assignment of where and
// masked_fill; one table per backend indexed by the dtype the op computes in
// (src/backend/dispatch.h).
#pragma once

#include <attn/common.h>

#include <cstdint>

#include "dispatch.h"

namespace attn::backend {

// In this order: the ops from Eq on are comparisons and write bool. FloorDiv, TruncDiv, Rem and
// Fmod are torch's div(rounding_mode="floor"), div(rounding_mode="trunc"), remainder (the sign of
// the divisor) and fmod (the sign of the dividend); an integer divisor of 0 is refused before a
// kernel runs (ops/elementwise.cpp).
// clang-format off
enum class BinaryOp {
  Add, Sub, Mul, Div, Pow, Max, Min, FloorDiv, TruncDiv, Rem, Fmod, Eq, Ne, Lt, Le, Gt, Ge, And, Or
};
// clang-format on
inline bool is_comparison(BinaryOp op) { return op >= BinaryOp::Eq; }

// One operand of a binary op: its storage (elements of the compute dtype), its own shape and
// contiguity, and its strides broadcast to the output's shape (0 along broadcast dims).
struct BinaryOperand {
  const void* storage;
  int64_t offset;
  const Shape* shape;
  const Shape* strides;
  bool contiguous;
};
// out = a op b over `shape` (out has it; bool for comparisons, else the compute dtype). out may
// be a or b themselves (the in-place forms), laid out exactly as out.
struct Binary {
  BinaryOp op;
  const Shape* shape;
  BinaryOperand a, b;
  void* out_storage;
  int64_t out_offset;
  const Shape* out_strides;
  bool out_contiguous;
};
using BinaryFn = void(const Binary&);

ATTN_BACKEND_KERNELS(BinaryFn, binary)

// The ops from IsNan on are predicates and write bool.
// clang-format off
enum class UnaryOp {
  Exp, Log, Sqrt, Rsqrt, Tanh, Sigmoid, Abs, Neg, Relu, Ceil, Floor, Erfinv, Cos, Sin,
  Log1p, Expm1, Log2, Log10, Exp2, Erf, Erfc, Tan, Sinh, Cosh, Asin, Acos, Atan, Asinh, Acosh, Atanh,
  IsNan, IsInf, IsFinite
};
// clang-format on
inline bool is_predicate(UnaryOp op) { return op >= UnaryOp::IsNan; }
// out (contiguous, row-major) = op(x) for x of `shape` with `strides` from `offset` in `storage`.
struct Unary {
  UnaryOp op;
  const Shape* shape;
  const void* storage;
  int64_t offset;
  const Shape* strides;
  void* out;
};
using UnaryFn = void(const Unary&);
ATTN_BACKEND_KERNELS(UnaryFn, unary)

// An operand of an element-wise kernel: `strides` from `offset` in `storage`, broadcast to the
// op's shape (a stride of 0 repeats an element).
struct StridedOperand {
  const void* storage;
  int64_t offset;
  const Shape* strides;
};

// out[k] = cond[k] ? a[k] : b[k] for the elements k of `shape`, every operand strided (cond bool,
// a, b and out of one dtype; the slots copy elements bit for bit). out may be b itself (same
// storage, offset and strides: masked_fill_, which writes only where cond holds); out repeats no
// element. where() and masked_fill().
struct Select {
  const Shape* shape;
  StridedOperand cond, a, b;
  void* out;
  int64_t out_offset;
  const Shape* out_strides;
};
using SelectFn = void(const Select&);
ATTN_BACKEND_KERNELS(SelectFn, select)

// The product of complex numbers stored as float32 (real, imaginary) pairs: out[k] = a[k] * b[k],
// or a[k] * conj(b[k]) with conj_b, for the elements k of `shape` (the complex dims, without the
// pair). Each operand's strides count floats and step between pairs (broadcast: 0); the two floats
// of a pair are adjacent. out is contiguous. As torch's complex64 multiply, each part is two
// products and one sum, each rounded: (ar br - ai bi) + i (ar bi + ai br).
struct ComplexMul {
  const Shape* shape;
  StridedOperand a, b;
  bool conj_b;
  float* out;
};
using ComplexMulFn = void(const ComplexMul&);
ATTN_BACKEND_KERNELS(ComplexMulFn, complex_mul)

// out (contiguous, `shape`) = min(max(x, lo), hi), the bounds optional (null storage), each
// operand strided and broadcast to `shape`; a NaN in x or in a bound propagates, as PyTorch.
struct Clamp {
  const Shape* shape;
  StridedOperand x, lo, hi;
  void* out;
};
using ClampFn = void(const Clamp&);
ATTN_BACKEND_KERNELS(ClampFn, clamp)

// dst = src converted to dst's dtype (the table's slot) element by element over `shape`, as
// torch's static_cast_with_inter_type: a 2-byte float goes through float (to bool: non-zero, NaN
// included, is true; to int64: truncated), and into one every value goes through float. Each
// operand is its storage, offset and strides (src's broadcast to shape: 0 along broadcast dims).
struct Copy {
  const Shape* shape;
  void* dst;
  int64_t dst_offset;
  const Shape* dst_strides;
  const void* src;
  Dtype src_dtype;
  int64_t src_offset;
  const Shape* src_strides;
};
using CopyFn = void(const Copy&);
ATTN_BACKEND_KERNELS(CopyFn, copy)

}  // namespace attn::backend

// Helpers shared by the tensor and ops layers (not installed).
#pragma once

#include <attn/tensor.h>

#include <array>
#include <string>
#include <type_traits>

#include "../common/error.h"  // msg, fail, fail_workspace, fail_reduced

namespace attn::detail {

// ---- dtypes and their C++ types -----------------------------------------------------------------

template <typename T>
inline constexpr bool is_half_type = std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>;

// The dtype whose elements have C++ type T (float, int64_t, bool, BFloat16, Half).
template <typename T>
constexpr Dtype dtype_of() {
  if constexpr (std::is_same_v<T, float>)
    return Dtype::Float32;
  else if constexpr (std::is_same_v<T, int64_t>)
    return Dtype::Int64;
  else if constexpr (std::is_same_v<T, bool>)
    return Dtype::Bool;
  else if constexpr (std::is_same_v<T, BFloat16>)
    return Dtype::BFloat16;
  else {
    static_assert(std::is_same_v<T, Half>, "no dtype has this C++ type");
    return Dtype::Float16;
  }
}

// Calls f.template operator()<T>() with the C++ type T of `dtype`: every dtype, so that code
// written once over T (copies, conversions, element moves) covers them all.
template <typename F>
decltype(auto) dispatch_dtype(Dtype dtype, F&& f) {
  switch (dtype) {
    case Dtype::Float32: return f.template operator()<float>();
    case Dtype::Int64: return f.template operator()<int64_t>();
    case Dtype::Bool: return f.template operator()<bool>();
    case Dtype::BFloat16: return f.template operator()<BFloat16>();
    case Dtype::Float16: return f.template operator()<Half>();
  }
  throw Error("[dtype] unknown dtype " + std::to_string(static_cast<int>(dtype)));
}

// Ops that compute (matmul, reductions, softmax, nn layers, ...) call this on each tensor input:
// a bfloat16 or float16 tensor is refused with
//   "[matmul] expected float32 tensors, got torch.bfloat16 (bfloat16 and float16 are supported
//    for storage and conversion; call .float())"
// and every other dtype passes (the op's own checks follow).
void check_not_reduced(const Tensor& t, const char* fn);

// bfloat16 / float16 operands of an op without kernels of their own for them: the op runs on them
// widened to float32 (exactly) and rounds its result once to their dtype, which is how PyTorch's
// CPU kernels compute them (float accumulation, one rounding). widen(t) is t.to(float32) for such
// a tensor and t itself otherwise. Tensors of these dtypes never require grad (requires_grad_
// takes float32 only), so the widened copy loses nothing from the graph.
inline Tensor widen(const Tensor& t) {
  return t.defined() && is_reduced_float(t.dtype()) ? t.to(Dtype::Float32) : t;
}
// Whether an op whose GPU backend has bfloat16 / float16 kernels widens `t` (a 2-byte float tensor
// on the CPU, whose backend computes them through float32).
inline bool widened_on_cpu(const Tensor& t) {
  return t.defined() && is_reduced_float(t.dtype()) && t.device().is_cpu();
}

// Wraps a negative dim and checks the range; `ndim` 0 accepts dims -1 and 0 like torch.
int64_t wrap_dim(int64_t dim, int64_t ndim, const char* fn);
Shape contiguous_strides(const Shape& shape);
int64_t shape_numel(const Shape& shape);
// A new contiguous tensor, zero-filled unless `zero` is false. Kernels that write every element
// ask for `zero` false: a cleared tensor of a megabyte or more is a fresh mapping from glibc, so
// each call pays a page fault and a page clearing per 4 KB, where uncleared memory is reused
// between calls (a tenth of a short attention, half of a small product). A shape whose size
// overflows, or memory that cannot be had, throws AllocationError naming `fn` ("empty" when not
// given), the bytes asked and the shape.
Tensor make_tensor(const char* fn, const Shape& shape, Dtype dtype, bool zero = true,
                   const Device& device = Device());
Tensor make_tensor(const Shape& shape, Dtype dtype, bool zero = true);
Tensor make_view(const Tensor& base, Shape sizes, Shape strides, int64_t offset);
// Whether t's elements fill a block of its storage exactly once, in some order of its dims (torch's
// "non-overlapping and dense": strides a permutation of a contiguous layout's, size-1 dims with any
// stride). Then its first element is the block's first.
bool is_non_overlapping_dense(const Tensor& t);
// The strides of an element-wise op's result of `shape` on `operands` (broadcast to it), as
// torch's TensorIterator lays it out: where every operand has `shape` and is non-overlapping and
// dense with the same strides, those strides (the op then runs over the block as one run);
// otherwise dense, its dims nested in the order of the operands' strides (the first operand's
// first; a stride-0 dim, or a tie, keeps its place). Empty where that is row-major: a contiguous
// result.
Shape elementwise_strides(const Shape& shape, std::initializer_list<const Tensor*> operands);
inline Shape elementwise_strides(const Tensor& t) { return elementwise_strides(t.shape(), {&t}); }
// Type of a binary arithmetic result (PyTorch promotion, with Python scalars as weak types).
Dtype promote(Dtype a, Dtype b);
Dtype promote_scalar(Dtype a, const Scalar& s);
Tensor scalar_tensor(const Scalar& s, Dtype dtype);
// The positions of mask's (bool) true elements in row-major order, a 1-D int64 tensor; fn names
// the op in errors (a device without the kernel).
Tensor true_positions(const Tensor& mask, const char* fn);
std::string tensor_desc(const Tensor& t);  // "(2, 3) float32" for messages
// Throws "[fn] what is an undefined tensor" or "[fn] what must be float32, got int64 (2, 3)".
void check_float32(const Tensor& t, const char* what, const char* fn);

[[noreturn]] void fail_base_ptr(Dtype have, Dtype want);

// Strides of `t` broadcast to `shape` (0 where t's dim is 1 or missing). Assumes compatibility.
Shape broadcast_strides(const Tensor& t, const Shape& shape);

// Throws attn::DeviceError unless t is on the CPU: what every CPU kernel's pointer access goes
// through (Tensor::data_ptr, raw_data, base_ptr), so no operation without a CUDA implementation
// ever reads GPU memory.
void check_cpu(const Tensor& t, const char* fn);
// attn::DeviceError naming fn when two of the defined tensors are on different devices ("expected
// all tensors on the same device, got cuda:0 and cpu", torch's wording); returns the first defined
// one (null when none is).
const Tensor* check_same_device(const char* fn, std::initializer_list<const Tensor*> ts);
// For an operation of several tensors that runs on the CPU only: attn::DeviceError naming fn when
// two are on different devices ("expected all tensors on the same device, got cuda:0 and cpu",
// torch's wording) or when they are on a GPU.
void check_cpu_operands(const char* fn, std::initializer_list<const Tensor*> ts);

// The storage's first element as T (offsets are added by the caller). T must be the tensor's
// element type: a mismatch is a bug in attn, refused rather than read as the wrong type. CPU
// tensors only (check_cpu).
template <typename T>
inline T* base_ptr(const Tensor& t) {
  if (!t.impl()->storage->device.is_cpu()) check_cpu(t, "data_ptr");
  if (t.dtype() != dtype_of<T>()) fail_base_ptr(t.dtype(), dtype_of<T>());
  return static_cast<T*>(t.impl()->storage->data);
}

}  // namespace attn::detail

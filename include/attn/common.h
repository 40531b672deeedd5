// Basic vocabulary shared by every layer of attn: dtypes, shapes and the error type.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace attn {

// Element types. Float32 for values, Int64 for indices, Bool for masks (stored one byte each).
// BFloat16 and Float16 (IEEE binary16) are the 2-byte floats (attn/half.h). Ops compute on them
// with PyTorch's CPU semantics: in float32, each result rounded once to the dtype (products,
// reductions, softmax, norms, attention, embedding, ...; the linear layer reads its weight as
// stored), and autograd carries gradients in the dtype of each tensor. Drawing random numbers
// into them is refused with an attn::Error that says to call .float() first.
enum class Dtype { Float32, Int64, Bool, BFloat16, Float16 };

// Size in bytes of one element of `dtype`.
inline std::size_t itemsize(Dtype dtype) {
  switch (dtype) {
    case Dtype::Float32: return 4;
    case Dtype::Int64: return 8;
    case Dtype::Bool: return 1;
    case Dtype::BFloat16:
    case Dtype::Float16: return 2;
  }
  return 0;
}

// float32, bfloat16 or float16 (torch's dtype.is_floating_point).
inline bool is_floating_point(Dtype dtype) {
  return dtype == Dtype::Float32 || dtype == Dtype::BFloat16 || dtype == Dtype::Float16;
}

// bfloat16 or float16: the dtypes attn computes on through float32, rounding each result once.
inline bool is_reduced_float(Dtype dtype) {
  return dtype == Dtype::BFloat16 || dtype == Dtype::Float16;
}

// PyTorch's name for a dtype: "torch.float32", "torch.int64", "torch.bool", "torch.bfloat16",
// "torch.float16".
std::string dtype_name(Dtype dtype);

using Shape = std::vector<int64_t>;

// "(2, 4, 8)", as PyTorch prints a tuple of sizes.
std::string shape_str(const Shape& shape);

// Every error attn raises on bad input. The message starts with the function name in brackets:
//   [scaled_dot_product_attention] q (2, 4, 8, 16) and k (2, 4, 9, 32) differ in head dim
// Python sees ValueError.
class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& what) : std::runtime_error(what) {}
};

// An index out of range. Python sees IndexError.
class IndexError : public Error {
 public:
  explicit IndexError(const std::string& what) : Error(what) {}
};

// Memory that cannot be had: a tensor or workspace larger than the memory the process may use, or
// a shape whose size overflows int64. The message names the function, the bytes asked and the
// shape: "[zeros] cannot allocate 1.2 TB (1200000000000 bytes) for a (1000000, 300000) float32
// tensor: out of memory". Nothing is left half-done: the process goes on working. Python sees
// RuntimeError, as PyTorch raises for "DefaultCPUAllocator: can't allocate memory".
class AllocationError : public Error {
 public:
  explicit AllocationError(const std::string& what) : Error(what) {}
};

// A device that cannot be used or tensors on different devices: "[zeros] CUDA is not available:
// attn was built without the CUDA backend", "[matmul] expected all tensors on the same device,
// got cuda:0 and cpu", a CUDA runtime error ("[to] CUDA error: out of memory ..."). Python sees
// RuntimeError, as PyTorch raises for these.
class DeviceError : public Error {
 public:
  explicit DeviceError(const std::string& what) : Error(what) {}
};

// An op whose kernels on the tensors' device lack their dtype (or the device lacks the op):
// "[layer_norm] not implemented for torch.int64 tensors on cpu (it has: torch.float32)",
// "[sum] not implemented for torch.float32 tensors on cuda:0 (it has none of them)". A DeviceError
// (the backend cannot run it); Python sees NotImplementedError, a RuntimeError, as PyTorch raises
// for an op a backend lacks.
class NotImplementedError : public DeviceError {
 public:
  explicit NotImplementedError(const std::string& what) : DeviceError(what) {}
};

// "1.2 TB", "512 bytes": a byte count for messages (decimal units, as PyTorch and df print them).
std::string bytes_str(double bytes);

}  // namespace attn

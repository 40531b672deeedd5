// The error helpers of every layer of attn (not installed): messages that start with the function
// name in brackets, and the errors for memory and dtypes that need no Tensor. Code that needs
// Tensor internals as well includes src/tensor/internal.h, which includes this.
#pragma once

#include <attn/common.h>

#include <sstream>
#include <string>

namespace attn::detail {

// Builds an error message: fail("view", "shape ", shape_str(s), " is invalid").
template <typename... Args>
std::string msg(const char* fn, const Args&... args) {
  std::ostringstream os;
  os << "[" << fn << "] ";
  (os << ... << args);
  return os.str();
}
template <typename... Args>
[[noreturn]] void fail(const char* fn, const Args&... args) {
  throw Error(msg(fn, args...));
}

// Throws AllocationError "[fn] cannot allocate 1.2 TB (1200000000000 bytes) for <what>: out of
// memory" (memory that is not a tensor: kernel workspaces).
[[noreturn]] void fail_workspace(const char* fn, double bytes, const std::string& what);

// Throws "[matmul] expected float32 tensors, got torch.bfloat16 (bfloat16 and float16 are
// supported for storage and conversion; call .float())": the refusal of check_not_reduced
// (tensor/internal.h), for code that has only the dtype.
[[noreturn]] void fail_reduced(Dtype dtype, const char* fn);

// Throws NotImplementedError "[layer_norm] not implemented for torch.int64 tensors on cpu (it has:
// torch.float32)", or "(it has none of them)" when `available` is empty, and for a 2-byte float
// where float32 is available "; call .float() to compute in float32": an op whose backend lacks
// the dtype (backend::pick, src/backend/dispatch.h).
[[noreturn]] void fail_unsupported(const char* op, const std::string& device, Dtype dtype,
                                   const std::string& available);

}  // namespace attn::detail

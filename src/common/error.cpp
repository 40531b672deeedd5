// The error helpers of src/common/error.h that are not templates.
#include "error.h"

#include <cstdint>

namespace attn::detail {

void fail_workspace(const char* fn, double bytes, const std::string& what) {
  std::string exact = bytes < 1.8e19 ? std::to_string(uint64_t(bytes)) : std::to_string(bytes);
  throw AllocationError(msg(fn, "cannot allocate ", bytes_str(bytes), " (", exact, " bytes) for ",
                            what, ": out of memory"));
}

void fail_reduced(Dtype dtype, const char* fn) {
  fail(fn, "expected float32 tensors, got ", dtype_name(dtype),
       " (bfloat16 and float16 are supported for storage and conversion; call .float())");
}

void fail_unsupported(const char* op, const std::string& device, Dtype dtype,
                      const std::string& available) {
  std::string has = available.empty() ? "it has none of them" : "it has: " + available;
  // A 2-byte float where float32 is there: the way out, as fail_reduced says it.
  if ((dtype == Dtype::BFloat16 || dtype == Dtype::Float16) &&
      available.find(dtype_name(Dtype::Float32)) != std::string::npos)
    has += "; call .float() to compute in float32";
  throw NotImplementedError(
      msg(op, "not implemented for ", dtype_name(dtype), " tensors on ", device, " (", has, ")"));
}

}  // namespace attn::detail

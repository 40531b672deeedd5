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

}  // namespace attn::detail

// The CUDA runtime as the rest of attn sees it: device memory, copies and streams behind plain C++
// signatures, so that only src/backend/cuda/cuda_runtime.cpp and the kernels (src/backend/cuda)
// include CUDA's headers. Built without CUDA (src/backend/no_gpu/cuda_none.cpp) every function
// throws attn::DeviceError, which callers never reach: a CUDA tensor cannot be created then.
//
// Errors: every CUDA call's status is checked; a failure throws attn::DeviceError naming `fn` (the
// public function that asked) and CUDA's own message, out of memory as attn::AllocationError with
// the bytes asked.
#pragma once

#include <attn/device.h>

#include <cstddef>

namespace attn::cuda_rt {

// Device memory on GPU `index` (a concrete index, see resolve_device). malloc(0) is nullptr.
// Blocks come from a cache of freed ones when one of the (rounded) size is there.
void* malloc(std::size_t nbytes, int index, const char* fn);
// Returns what malloc gave to the cache; never throws.
void free(void* ptr, int index) noexcept;
// Gives every cached block back to CUDA (attn.cuda.empty_cache()).
void empty_cache();
// Copies nbytes; the direction is given by which side is a GPU (-1 for host memory). The copy is
// complete when the call returns (host memory is pageable).
void memcpy(void* dst, int dst_index, const void* src, int src_index, std::size_t nbytes,
            const char* fn);
void memset_zero(void* ptr, int index, std::size_t nbytes, const char* fn);

// Makes GPU `index` the current device (where kernels launch) for its scope, restoring the
// previous one after.
class DeviceGuard {
 public:
  DeviceGuard(int index, const char* fn);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace attn::cuda_rt

// The CUDA runtime behind src/device/cuda.h and attn::cuda (include/attn/device.h).
#include <cuda_runtime_api.h>

#include <mutex>

#include "cuda.h"

namespace attn {
namespace {

std::string prefix(const char* fn) { return std::string("[") + fn + "] "; }

void check(cudaError_t status, const char* fn, const char* what) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // clears a sticky-free error so that the next call starts clean
  throw DeviceError(prefix(fn) + "CUDA error in " + what + ": " + cudaGetErrorName(status) + " (" +
                    cudaGetErrorString(status) + ")");
}

// Makes GPU `index` current for the scope, restoring the previous one after.
class DeviceScope {
 public:
  DeviceScope(int index, const char* fn) {
    check(cudaGetDevice(&previous_), fn, "cudaGetDevice");
    if (index != previous_) check(cudaSetDevice(index), fn, "cudaSetDevice");
  }
  ~DeviceScope() { cudaSetDevice(previous_); }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
};

int count_devices() {
  int count = 0;
  // No driver, or a driver without devices: CUDA is simply unavailable.
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

void check_index(int index, const char* fn) {
  const int count = cuda::device_count();
  if (count == 0)
    throw DeviceError(prefix(fn) + "CUDA is not available: no NVIDIA GPU (or no driver) was found");
  if (index < 0 || index >= count)
    throw DeviceError(prefix(fn) + "invalid device cuda:" + std::to_string(index) + ": " +
                      std::to_string(count) + " CUDA device" + (count == 1 ? "" : "s") +
                      " present");
}

}  // namespace

namespace cuda {
bool is_built() { return true; }
bool is_available() { return device_count() > 0; }
int device_count() {
  static const int count = count_devices();
  return count;
}
int current_device() {
  check_index(0, "cuda.current_device");
  int index = 0;
  check(cudaGetDevice(&index), "cuda.current_device", "cudaGetDevice");
  return index;
}
void set_device(int index) {
  check_index(index, "cuda.set_device");
  check(cudaSetDevice(index), "cuda.set_device", "cudaSetDevice");
}
void synchronize(int index) {
  const int i = index < 0 ? current_device() : index;
  check_index(i, "cuda.synchronize");
  DeviceScope scope(i, "cuda.synchronize");
  check(cudaDeviceSynchronize(), "cuda.synchronize", "cudaDeviceSynchronize");
}
std::string get_device_name(int index) {
  const int i = index < 0 ? current_device() : index;
  check_index(i, "cuda.get_device_name");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, i), "cuda.get_device_name", "cudaGetDeviceProperties");
  return prop.name;
}
}  // namespace cuda

namespace cuda_rt {

void* malloc(std::size_t nbytes, int index, const char* fn) {
  if (nbytes == 0) return nullptr;
  check_index(index, fn);
  DeviceScope scope(index, fn);
  void* ptr = nullptr;
  const cudaError_t status = cudaMalloc(&ptr, nbytes);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    std::size_t free_bytes = 0, total_bytes = 0;
    cudaMemGetInfo(&free_bytes, &total_bytes);
    throw AllocationError(
        prefix(fn) + "CUDA out of memory: cannot allocate " + bytes_str(double(nbytes)) + " (" +
        std::to_string(nbytes) + " bytes) on cuda:" + std::to_string(index) + " (" +
        bytes_str(double(free_bytes)) + " free of " + bytes_str(double(total_bytes)) + ")");
  }
  check(status, fn, "cudaMalloc");
  return ptr;
}

void free(void* ptr, int index) noexcept {
  if (ptr == nullptr) return;
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess) return;
  if (previous != index) cudaSetDevice(index);
  cudaFree(ptr);
  if (previous != index) cudaSetDevice(previous);
  cudaGetLastError();
}

void memcpy(void* dst, int dst_index, const void* src, int src_index, std::size_t nbytes,
            const char* fn) {
  if (nbytes == 0) return;
  const int index = dst_index >= 0 ? dst_index : src_index;
  DeviceScope scope(index, fn);
  if (dst_index >= 0 && src_index >= 0 && dst_index != src_index) {
    check(cudaMemcpyPeer(dst, dst_index, src, src_index, nbytes), fn, "cudaMemcpyPeer");
    return;
  }
  // cudaMemcpyDefault: unified addressing tells the direction from the pointers.
  check(cudaMemcpy(dst, src, nbytes, cudaMemcpyDefault), fn, "cudaMemcpy");
}

void memset_zero(void* ptr, int index, std::size_t nbytes, const char* fn) {
  if (nbytes == 0) return;
  DeviceScope scope(index, fn);
  check(cudaMemset(ptr, 0, nbytes), fn, "cudaMemset");
}

}  // namespace cuda_rt
}  // namespace attn

// The CUDA runtime behind src/backend/gpu_runtime.h and attn::cuda (include/attn/device.h).
#include <cuda_runtime_api.h>

#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "../gpu_runtime.h"

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
void empty_cache() { cuda_rt::empty_cache(); }
std::string get_device_name(int index) {
  const int i = index < 0 ? current_device() : index;
  check_index(i, "cuda.get_device_name");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, i), "cuda.get_device_name", "cudaGetDeviceProperties");
  return prop.name;
}
}  // namespace cuda

namespace cuda_rt {

// ---- the caching allocator ---------------------------------------------------------------------
// cudaMalloc and cudaFree are slow (cudaFree waits for the whole device), and a training step or an
// attention backward allocates and frees the same sizes every call. Freed blocks are kept per
// (device, rounded size) and handed out again, as PyTorch's caching allocator does. Every kernel
// and copy of attn runs on the legacy default stream, which orders all work, so a block freed by
// the host may be reused at once: the kernels still reading it run before any kernel of the new
// owner. When cudaMalloc runs out of memory the cache is released and the allocation tried again.
namespace {

struct Cache {
  std::mutex mutex;
  std::map<std::pair<int, std::size_t>, std::vector<void*>> free_blocks;
  std::map<void*, std::size_t> sizes;  // every live or cached block: its rounded size
};

Cache& cache() {
  static Cache* c = new Cache();  // never destroyed: tensors may be freed during exit
  return *c;
}

// Sizes rounded so that near sizes share blocks: 512 bytes below 1 MiB, 2 MiB above.
std::size_t round_size(std::size_t n) {
  const std::size_t unit = n < (std::size_t(1) << 20) ? 512 : (std::size_t(2) << 20);
  return (n + unit - 1) / unit * unit;
}

void release_cached(int index) {
  Cache& c = cache();
  for (auto it = c.free_blocks.begin(); it != c.free_blocks.end();) {
    if (index >= 0 && it->first.first != index) {
      ++it;
      continue;
    }
    for (void* p : it->second) {
      cudaFree(p);
      c.sizes.erase(p);
    }
    it = c.free_blocks.erase(it);
  }
  cudaGetLastError();
}

}  // namespace

void* malloc(std::size_t nbytes, int index, const char* fn) {
  if (nbytes == 0) return nullptr;
  check_index(index, fn);
  const std::size_t size = round_size(nbytes);
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  auto it = c.free_blocks.find({index, size});
  if (it != c.free_blocks.end() && !it->second.empty()) {
    void* p = it->second.back();
    it->second.pop_back();
    return p;
  }
  DeviceScope scope(index, fn);
  void* ptr = nullptr;
  cudaError_t status = cudaMalloc(&ptr, size);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();
    release_cached(index);
    status = cudaMalloc(&ptr, size);
  }
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
  c.sizes[ptr] = size;
  return ptr;
}

void free(void* ptr, int index) noexcept {
  if (ptr == nullptr) return;
  Cache& c = cache();
  try {
    std::lock_guard<std::mutex> lock(c.mutex);
    auto it = c.sizes.find(ptr);
    if (it != c.sizes.end()) {
      c.free_blocks[{index, it->second}].push_back(ptr);
      return;
    }
  } catch (...) {  // bookkeeping without memory: give the block back to CUDA instead
  }
  int previous = 0;
  if (cudaGetDevice(&previous) != cudaSuccess) return;
  if (previous != index) cudaSetDevice(index);
  cudaFree(ptr);
  if (previous != index) cudaSetDevice(previous);
  cudaGetLastError();
}

void empty_cache() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  release_cached(-1);
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

DeviceGuard::DeviceGuard(int index, const char* fn) {
  check_index(index, fn);
  check(cudaGetDevice(&previous_), fn, "cudaGetDevice");
  if (index != previous_) check(cudaSetDevice(index), fn, "cudaSetDevice");
}

DeviceGuard::~DeviceGuard() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

}  // namespace cuda_rt
}  // namespace attn

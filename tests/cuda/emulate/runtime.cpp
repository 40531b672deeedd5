// The CUDA runtime (cudart) on host memory, for the emulation build (run.sh): every cudart entry
// point that libattn's CUDA objects (src/backend/cuda/cuda_runtime.cpp, the kernels' host code) and
// tests/cuda/*.cpp call, and nothing of attn itself: attn::cuda::is_available() and the caching
// allocator are libattn's own, running on top of this.
//
// The emulated machine: ATTN_EMU_DEVICES GPUs (default 1, at most 64; 0 for none) of 64 GiB each,
// compute capability 9.0 with 227 KiB of opt-in shared memory per block (ATTN_EMU_SMEM_OPTIN
// overrides, e.g. 101376 for the 99 KiB of sm_86/sm_89). Everything is synchronous. "Device" memory
// is host memory, but every block cudaMalloc gives is registered with its device, so that the
// runtime can check what a GPU would: copies name device and host memory on the right sides and
// stay inside one allocation, cudaFree/cudaMemset get device pointers, kernels get device pointers
// whose whole extent lies in device memory (emu_check_launch, from emu.h's emu_launch). New blocks
// are filled with 0xff (NaN in every float type), so that a read of memory nobody wrote shows. A
// check that fails prints what was wrong on stderr and returns the error a GPU would
// (cudaErrorInvalidValue, cudaErrorIllegalAddress for a kernel).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>

namespace {

constexpr std::size_t kGiB = std::size_t(1) << 30;
constexpr std::size_t kDeviceBytes = 64 * kGiB;

int env_int(const char* name, int fallback) {
  const char* s = std::getenv(name);
  return s && *s ? std::atoi(s) : fallback;
}

int device_count() {
  static const int n = std::clamp(env_int("ATTN_EMU_DEVICES", 1), 0, 64);  // 0: no GPU
  return n;
}

struct Block {
  std::size_t bytes;
  int device;
};

struct Registry {
  std::mutex mutex;
  std::map<std::uintptr_t, Block> blocks;  // by base address
  std::size_t used[64] = {};
};

Registry& registry() {
  static Registry* r = new Registry();  // never destroyed: tensors may be freed during exit
  return *r;
}

thread_local int current_device = 0;
thread_local cudaError_t last_error = cudaSuccess;

cudaError_t fail(cudaError_t e) {
  last_error = e;
  return e;
}

// The block holding [p, p + n), or nullptr when p is not device memory. *whole tells whether all
// of the range is inside the block.
const Block* find(const void* p, std::size_t n, bool* whole, std::uintptr_t* base = nullptr) {
  Registry& r = registry();
  const auto a = reinterpret_cast<std::uintptr_t>(p);
  auto it = r.blocks.upper_bound(a);
  if (it == r.blocks.begin()) return nullptr;
  --it;
  if (a >= it->first + it->second.bytes) return nullptr;
  *whole = a + n <= it->first + it->second.bytes;
  if (base) *base = it->first;
  return &it->second;
}

void complain(const char* fn, const std::string& what) {
  std::fprintf(stderr, "emulated %s: %s\n", fn, what.c_str());
}

std::string ptr_str(const void* p) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%p", p);
  return buf;
}

// Checks one side of a copy: `device` says which side the direction asks for (-1: either).
// Returns the device of the memory (-1 for host), or -2 after complaining.
int side(const char* fn, const char* name, const void* p, std::size_t n, int device) {
  bool whole = false;
  const Block* b = find(p, n, &whole);
  if (b && !whole) {
    complain(fn, std::string(name) + " " + ptr_str(p) + " + " + std::to_string(n) +
                     " bytes runs past the end of its device allocation");
    return -2;
  }
  if (device == 1 && !b) {
    complain(fn, std::string(name) + " " + ptr_str(p) + " is not device memory");
    return -2;
  }
  if (device == 0 && b) {
    complain(fn, std::string(name) + " " + ptr_str(p) + " is device memory, host memory expected");
    return -2;
  }
  return b ? b->device : -1;
}

const char* error_name(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "cudaSuccess";
    case cudaErrorInvalidValue: return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation: return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidDevice: return "cudaErrorInvalidDevice";
    case cudaErrorIllegalAddress: return "cudaErrorIllegalAddress";
    case cudaErrorNoDevice: return "cudaErrorNoDevice";
    case cudaErrorInvalidResourceHandle: return "cudaErrorInvalidResourceHandle";
    case cudaErrorInvalidConfiguration: return "cudaErrorInvalidConfiguration";
    default: return "cudaErrorUnknown";
  }
}

const char* error_string(cudaError_t e) {
  switch (e) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorIllegalAddress: return "an illegal memory access was encountered";
    case cudaErrorNoDevice: return "no CUDA-capable device is detected";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    default: return "unknown error";
  }
}

}  // namespace

// ---- emu.h's hook: the pointers a kernel is launched with --------------------------------------
// Whether [p, p + bytes) lies inside one device allocation of the current device; complains
// naming `kernel` and `what` otherwise. bytes == 0 (nothing read) passes.
bool emu_check_device_range(const char* kernel, const char* what, const void* p,
                            std::size_t bytes) {
  if (bytes == 0) return true;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  bool whole = false;
  std::uintptr_t base = 0;
  const Block* b = find(p, bytes, &whole, &base);
  std::string why;
  if (!b)
    why = "is not device memory";
  else if (!whole)
    why = "+ " + std::to_string(bytes) + " bytes runs " +
          std::to_string(reinterpret_cast<std::uintptr_t>(p) + bytes - base - b->bytes) +
          " bytes past the end of its allocation of " + std::to_string(b->bytes);
  else if (b->device != current_device)
    why = "is memory of device " + std::to_string(b->device) + ", the kernel runs on device " +
          std::to_string(current_device);
  if (why.empty()) return true;
  complain("kernel launch", std::string(kernel) + ": " + what + " " + ptr_str(p) + " " + why);
  return false;
}

void emu_set_launch_error(cudaError_t e) { fail(e); }
int emu_smem_optin() { return env_int("ATTN_EMU_SMEM_OPTIN", 227 * 1024); }

extern "C" {

// ---- errors -------------------------------------------------------------------------------------
const char* cudaGetErrorName(cudaError_t e) { return error_name(e); }
const char* cudaGetErrorString(cudaError_t e) { return error_string(e); }
cudaError_t cudaGetLastError(void) {
  const cudaError_t e = last_error;
  last_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError(void) { return last_error; }

// ---- devices ------------------------------------------------------------------------------------
cudaError_t cudaGetDeviceCount(int* count) {
  *count = device_count();
  return *count > 0 ? cudaSuccess : fail(cudaErrorNoDevice);
}
cudaError_t cudaGetDevice(int* device) {
  *device = current_device;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) {
  if (device < 0 || device >= device_count()) return fail(cudaErrorInvalidDevice);
  current_device = device;
  return cudaSuccess;
}
cudaError_t cudaDeviceSynchronize(void) { return cudaSuccess; }

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device < 0 || device >= device_count()) return fail(cudaErrorInvalidDevice);
  std::memset(prop, 0, sizeof *prop);
  std::snprintf(prop->name, sizeof prop->name, "attn emulated GPU %d (host threads)", device);
  prop->totalGlobalMem = kDeviceBytes;
  prop->sharedMemPerBlock = 48 * 1024;
  prop->sharedMemPerBlockOptin = std::size_t(emu_smem_optin());
  prop->warpSize = 32;
  prop->maxThreadsPerBlock = 1024;
  prop->major = 9, prop->minor = 0;
  prop->multiProcessorCount = 132;
  prop->unifiedAddressing = 1;
  return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attr, int device) {
  if (device < 0 || device >= device_count()) return fail(cudaErrorInvalidDevice);
  switch (attr) {
    case cudaDevAttrMaxSharedMemoryPerBlockOptin:
      *value = emu_smem_optin();
      return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = 48 * 1024; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMajor: *value = 9; return cudaSuccess;
    case cudaDevAttrComputeCapabilityMinor: *value = 0; return cudaSuccess;
    case cudaDevAttrMultiProcessorCount: *value = 132; return cudaSuccess;
    case cudaDevAttrWarpSize: *value = 32; return cudaSuccess;
    case cudaDevAttrMaxThreadsPerBlock: *value = 1024; return cudaSuccess;
    default:
      complain("cudaDeviceGetAttribute", "attribute " + std::to_string(int(attr)) +
                                             " is not emulated (add it to runtime.cpp)");
      return fail(cudaErrorInvalidValue);
  }
}

// ---- memory -------------------------------------------------------------------------------------
cudaError_t cudaMalloc(void** p, size_t n) {
  *p = nullptr;
  if (n == 0) return cudaSuccess;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::size_t& used = r.used[current_device];
  if (n > kDeviceBytes - used) return fail(cudaErrorMemoryAllocation);
  const std::size_t rounded = (n + 255) / 256 * 256;
  void* q = std::aligned_alloc(256, rounded);
  if (!q) return fail(cudaErrorMemoryAllocation);
  std::memset(q, 0xff, rounded);  // uninitialised device memory reads as NaN
  r.blocks[reinterpret_cast<std::uintptr_t>(q)] = {n, current_device};
  used += n;
  *p = q;
  return cudaSuccess;
}

cudaError_t cudaFree(void* p) {
  if (!p) return cudaSuccess;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.blocks.find(reinterpret_cast<std::uintptr_t>(p));
  if (it == r.blocks.end()) {
    complain("cudaFree", ptr_str(p) + " is not the start of a device allocation");
    return fail(cudaErrorInvalidValue);
  }
  r.used[it->second.device] -= it->second.bytes;
  r.blocks.erase(it);
  std::free(p);
  return cudaSuccess;
}

cudaError_t cudaMallocAsync(void** p, size_t n, cudaStream_t) { return cudaMalloc(p, n); }
cudaError_t cudaFreeAsync(void* p, cudaStream_t) { return cudaFree(p); }

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  *total = kDeviceBytes;
  *free_bytes = kDeviceBytes - r.used[current_device];
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t n, cudaMemcpyKind kind) {
  if (n == 0) return cudaSuccess;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  // Which side must be device memory: 1 yes, 0 no, -1 either (cudaMemcpyDefault).
  int want_dst = -1, want_src = -1;
  switch (kind) {
    case cudaMemcpyHostToHost: want_dst = 0, want_src = 0; break;
    case cudaMemcpyHostToDevice: want_dst = 1, want_src = 0; break;
    case cudaMemcpyDeviceToHost: want_dst = 0, want_src = 1; break;
    case cudaMemcpyDeviceToDevice: want_dst = 1, want_src = 1; break;
    case cudaMemcpyDefault: break;
    default: complain("cudaMemcpy", "invalid cudaMemcpyKind"); return fail(cudaErrorInvalidValue);
  }
  const int d = side("cudaMemcpy", "dst", dst, n, want_dst);
  const int s = side("cudaMemcpy", "src", src, n, want_src);
  if (d == -2 || s == -2) return fail(cudaErrorInvalidValue);
  std::memmove(dst, src, n);
  return cudaSuccess;
}

cudaError_t cudaMemcpyPeer(void* dst, int dst_device, const void* src, int src_device, size_t n) {
  if (dst_device < 0 || dst_device >= device_count() || src_device < 0 ||
      src_device >= device_count())
    return fail(cudaErrorInvalidDevice);
  if (n == 0) return cudaSuccess;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  const int d = side("cudaMemcpyPeer", "dst", dst, n, 1);
  const int s = side("cudaMemcpyPeer", "src", src, n, 1);
  if (d == -2 || s == -2) return fail(cudaErrorInvalidValue);
  if (d != dst_device || s != src_device) {
    complain("cudaMemcpyPeer", "dst is on device " + std::to_string(d) + " (" +
                                   std::to_string(dst_device) + " given), src on device " +
                                   std::to_string(s) + " (" + std::to_string(src_device) +
                                   " given)");
    return fail(cudaErrorInvalidValue);
  }
  std::memmove(dst, src, n);
  return cudaSuccess;
}

cudaError_t cudaMemset(void* p, int value, size_t n) {
  if (n == 0) return cudaSuccess;
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (side("cudaMemset", "ptr", p, n, 1) == -2) return fail(cudaErrorInvalidValue);
  std::memset(p, value, n);
  return cudaSuccess;
}

// ---- streams (everything is synchronous) --------------------------------------------------------
cudaError_t cudaStreamCreate(cudaStream_t* s) {
  static char handles[64];
  static int next = 0;
  *s = reinterpret_cast<cudaStream_t>(&handles[next++ % 64]);
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }

}  // extern "C"

// attn::Device: where a tensor's elements live, the CPU or one of the CUDA GPUs, with PyTorch's
// names ("cpu", "cuda", "cuda:1") and semantics.
//
// Every tensor carries the device of its storage (Tensor::device()). Tensor::to(device), cuda()
// and cpu() copy between devices; an operation given tensors on two devices throws
// attn::DeviceError naming both, as PyTorch's "Expected all tensors to be on the same device".
// Operations without a CUDA implementation throw attn::DeviceError for CUDA tensors, never read
// GPU memory from the CPU.
//
// The CUDA backend is built when the CUDA toolkit is found (CMake ATTN_CUDA, see docs/gpu.md).
// attn::cuda::is_available() says whether this process can use a GPU: built with CUDA, a driver
// and at least one device. Without one, moving a tensor to "cuda" throws attn::DeviceError.
#pragma once

#include <attn/common.h>

#include <cstddef>
#include <cstdint>
#include <string>

namespace attn {

enum class DeviceType : uint8_t { CPU, CUDA };

class Device {
 public:
  // The CPU; Device(DeviceType::CUDA) is the current GPU ("cuda", index -1), as torch.device.
  Device() = default;
  Device(DeviceType type, int index = -1);  // NOLINT(google-explicit-constructor)
  // "cpu", "cuda", "cuda:N" (torch.device's strings). Anything else throws attn::Error.
  Device(const std::string& spec);                         // NOLINT(google-explicit-constructor)
  Device(const char* spec) : Device(std::string(spec)) {}  // NOLINT(google-explicit-constructor)

  DeviceType type() const { return type_; }
  // The GPU's ordinal; -1 for the CPU and for "cuda" without an index (the current device).
  int index() const { return index_; }
  bool has_index() const { return index_ >= 0; }
  bool is_cpu() const { return type_ == DeviceType::CPU; }
  bool is_cuda() const { return type_ == DeviceType::CUDA; }
  // "cpu", "cuda", "cuda:0", as str(torch.device(...)).
  std::string str() const;

  bool operator==(const Device& other) const = default;

 private:
  DeviceType type_ = DeviceType::CPU;
  int index_ = -1;
};

// The GPU side of the runtime, with torch.cuda's names.
namespace cuda {
// Whether attn was built with the CUDA backend (CMake ATTN_CUDA).
bool is_built();
// Built with CUDA, a working driver and at least one GPU.
bool is_available();
// The number of GPUs this process sees (0 without a driver or when built without CUDA).
int device_count();
// The device "cuda" means: 0 unless set_device changed it (per thread, as CUDA's).
int current_device();
void set_device(int index);
// Waits until every kernel queued on the device (the current one for -1) has finished.
void synchronize(int index = -1);
// Gives the GPU memory that freed tensors left in attn's cache back to CUDA (torch's
// cuda.empty_cache()); a no-op without CUDA.
void empty_cache();
// "NVIDIA H100 80GB HBM3"; throws attn::DeviceError without that device.
std::string get_device_name(int index = -1);
}  // namespace cuda

namespace cpu {
// Freed host blocks of 128 KiB and more stay in attn's cache for the next tensors of about their
// size (src/tensor/host_cache.h), at most ATTN_CPU_CACHE_BYTES (default 1 GiB; 0: no cache).
// empty_cache gives them back to the C library and returns their bytes; cached_bytes is what
// the cache holds now.
std::size_t empty_cache();
std::size_t cached_bytes();
}  // namespace cpu

// A concrete device: "cuda" resolved to the current GPU, the index checked against the GPUs
// present. Throws attn::DeviceError naming `fn` when the device cannot be used (no CUDA build,
// no GPU, index out of range).
Device resolve_device(const Device& device, const char* fn);

}  // namespace attn

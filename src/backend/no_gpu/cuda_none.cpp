// attn built without the CUDA backend: no GPU is ever available (see src/backend/gpu_runtime.h).
#include "../gpu_runtime.h"

namespace attn {
namespace {
[[noreturn]] void unavailable(const char* fn) {
  throw DeviceError(std::string("[") + fn +
                    "] CUDA is not available: attn was built without the CUDA backend");
}
}  // namespace

namespace cuda {
bool is_built() { return false; }
bool is_available() { return false; }
int device_count() { return 0; }
int current_device() { unavailable("cuda.current_device"); }
void set_device(int) { unavailable("cuda.set_device"); }
void synchronize(int) { unavailable("cuda.synchronize"); }
void empty_cache() {}
std::string get_device_name(int) { unavailable("cuda.get_device_name"); }
}  // namespace cuda

namespace cuda_rt {
void* malloc(std::size_t, int, const char* fn) { unavailable(fn); }
void free(void*, int) noexcept {}
void empty_cache() {}
void memcpy(void*, int, const void*, int, std::size_t, const char* fn) { unavailable(fn); }
void memset_zero(void*, int, std::size_t, const char* fn) { unavailable(fn); }
DeviceGuard::DeviceGuard(int, const char* fn) { unavailable(fn); }
DeviceGuard::~DeviceGuard() = default;
}  // namespace cuda_rt

}  // namespace attn

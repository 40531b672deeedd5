// Device names and their resolution against the GPUs present (include/attn/device.h).
#include <attn/device.h>

#include <charconv>

namespace attn {

Device::Device(DeviceType type, int index) : type_(type), index_(index) {
  if (type == DeviceType::CPU && index > 0)
    throw Error("[device] the CPU has no index " + std::to_string(index) + " (only cpu or cpu:0)");
  if (type == DeviceType::CPU) index_ = -1;
  if (index < -1)
    throw Error("[device] device index must be -1 (the current device) or >= 0, got " +
                std::to_string(index));
}

Device::Device(const std::string& spec) {
  const auto colon = spec.find(':');
  const std::string kind = spec.substr(0, colon);
  if (kind == "cpu") {
    type_ = DeviceType::CPU;
  } else if (kind == "cuda") {
    type_ = DeviceType::CUDA;
  } else {
    throw Error("[device] expected one of cpu, cuda device type at start of device string: " +
                spec);
  }
  if (colon == std::string::npos) return;
  const std::string digits = spec.substr(colon + 1);
  int index = -1;
  const auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
  if (digits.empty() || ec != std::errc() || end != digits.data() + digits.size() || index < 0)
    throw Error("[device] invalid device string: '" + spec + "'");
  if (type_ == DeviceType::CPU && index != 0)
    throw Error("[device] the CPU has no index " + digits + " (only cpu or cpu:0)");
  index_ = type_ == DeviceType::CPU ? -1 : index;
}

std::string Device::str() const {
  if (is_cpu()) return "cpu";
  return has_index() ? "cuda:" + std::to_string(index_) : "cuda";
}

Device resolve_device(const Device& device, const char* fn) {
  if (device.is_cpu()) return device;
  if (!cuda::is_built())
    throw DeviceError(std::string("[") + fn +
                      "] CUDA is not available: attn was built without the CUDA backend "
                      "(CMake ATTN_CUDA needs nvcc from the CUDA toolkit)");
  const int count = cuda::device_count();
  if (count == 0)
    throw DeviceError(std::string("[") + fn +
                      "] CUDA is not available: no NVIDIA GPU (or no driver) was found "
                      "(attn.cuda.is_available() is False)");
  const int index = device.has_index() ? device.index() : cuda::current_device();
  if (index >= count)
    throw DeviceError(std::string("[") + fn + "] invalid device " + device.str() + ": " +
                      std::to_string(count) + " CUDA device" + (count == 1 ? "" : "s") +
                      " present");
  return Device(DeviceType::CUDA, index);
}

}  // namespace attn

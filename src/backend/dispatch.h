// How an op reaches the kernel for its tensors' device and dtype.
//
// Each op a backend implements is a table of kernels, one slot per dtype (Kernels<Fn>), declared
// once in a header of src/backend/ for both backends (backend::cpu::X and backend::cuda::X) and
// defined by each backend in its own folder: src/backend/cpu/, and src/backend/cuda/ or, in a
// build without CUDA, src/backend/no_gpu/. An empty slot is a dtype the backend lacks; a backend
// that lacks the op altogether defines the table empty, in one line. The op (src/ops/) validates
// its arguments and then asks pick() for the kernel before it allocates anything:
//
//   const auto f = backend::pick("layer_norm", x.device(), x.dtype(),
//                                backend::cpu::layer_norm_forward,
//                                backend::cuda::layer_norm_forward);
//
// pick() raises NotImplementedError naming the op, the device and the dtype, and the dtypes the
// device has, for an empty slot: "[layer_norm] not implemented for torch.int64 tensors on cpu
// (it has: torch.float32)". Adding a dtype or a device to an op is filling a slot in the
// backend's own file.
#pragma once

#include <attn/device.h>

#include <array>
#include <string>

#include "../common/error.h"

namespace attn::backend {

inline constexpr int kNumDtypes = 5;  // Float32, Int64, Bool, BFloat16, Float16 (attn/common.h)
static_assert(int(Dtype::Float16) + 1 == kNumDtypes, "a table has one slot per Dtype");

// An op's kernels on one backend, indexed by Dtype; nullptr where the backend lacks that dtype.
template <typename Fn>
using Kernels = std::array<Fn*, kNumDtypes>;

template <typename Fn>
std::string dtypes_of(const Kernels<Fn>& k) {
  std::string s;
  for (int i = 0; i < kNumDtypes; ++i)
    if (k[i]) s += (s.empty() ? "" : ", ") + dtype_name(Dtype(i));
  return s;
}

// The kernel of `cpu` or `cuda` for (device, dtype), or the error above.
template <typename Fn>
Fn* pick(const char* op, Device device, Dtype dtype, const Kernels<Fn>& cpu,
         const Kernels<Fn>& cuda) {
  const Kernels<Fn>& k = device.is_cpu() ? cpu : cuda;
  Fn* f = k[int(dtype)];
  if (!f) detail::fail_unsupported(op, device.str(), dtype, dtypes_of(k));
  return f;
}

// The kernel of `cpu` or `cuda` for (device, dtype), or nullptr: for an op with a choice of
// kernels (matmul's dot product where the backend has one).
template <typename Fn>
Fn* find(Device device, Dtype dtype, const Kernels<Fn>& cpu, const Kernels<Fn>& cuda) {
  return (device.is_cpu() ? cpu : cuda)[int(dtype)];
}

}  // namespace attn::backend

// Declares the table `name` of kernels of type Fn on every backend (backend::cpu::name and
// backend::cuda::name), in a header of src/backend/ (inside namespace attn::backend).
#define ATTN_BACKEND_KERNELS(Fn, name)            \
  namespace cpu {                                 \
  extern const ::attn::backend::Kernels<Fn> name; \
  }                                               \
  namespace cuda {                                \
  extern const ::attn::backend::Kernels<Fn> name; \
  }

// Defines the table `name` empty: a backend that lacks the op (kernel_tables.h lists the tables).
#define ATTN_NO_KERNELS(Fn, name) const ::attn::backend::Kernels<Fn> name = {};

// Storage: the memory of tensors, on the CPU (64-byte aligned) and on GPUs (through the CUDA
// runtime); and make_tensor, which allocates a new contiguous tensor or says why the memory cannot
// be had (AllocationError naming the function, the bytes asked and the shape).
#include <attn/tensor.h>

#include <cstdlib>
#include <cstring>
#include <limits>
#include <new>

#include "../backend/gpu_runtime.h"
#include "host_cache.h"
#include "internal.h"

namespace attn {

namespace {

// From this size on a zeroed storage is mapped (zero pages on first touch) rather than cleared.
constexpr std::size_t kLazyZeroBytes = std::size_t(1) << 20;

}  // namespace

std::shared_ptr<Storage> Storage::allocate(std::size_t nbytes, bool zero) {
  std::size_t padded = ((nbytes + 63) / 64) * 64;
  if (padded < nbytes) padded = std::numeric_limits<std::size_t>::max();  // wrapped: cannot be had
  if (padded == 0) padded = 64;
  const bool wrapped = padded == std::numeric_limits<std::size_t>::max();
  // Large zeroed storages are fresh anonymous pages, which the kernel zeroes when first touched
  // (calloc's trick): zeros() / empty() of a big tensor costs nothing until written, so a model
  // built only to be overwritten by a checkpoint (or mapped from one) never holds its zeros.
  bool lazy_zero = zero && !wrapped && padded >= kLazyZeroBytes;
  void* p = nullptr;
  bool mapped = false;
  // Large storages: a block kept from an earlier one (detail::host_cache_take), else a new one;
  // where none can be had, the cached blocks are freed and the allocation tried again. A zeroed
  // storage too takes a kept block where there is one, and clears it: its pages are resident,
  // so clearing is cheaper than fresh pages, which fault in one by one when touched, and twice
  // (the zero page, then a copy, with a TLB flush on every thread) where the first touch reads,
  // as an accumulation into zeros (a gradient's scatter) does. Mapped blocks are kept too.
  std::size_t block = wrapped ? padded : detail::host_block_size(padded);
  if (!wrapped) p = detail::host_cache_take(block, &block, &mapped);
  // A fresh block from `alloc`, tried again after the cached blocks are freed.
  const auto fresh = [](auto alloc) {
    void* q = alloc();
    if (!q && detail::host_cache_release() > 0) q = alloc();
    return q;
  };
  const bool taken = p != nullptr;
  if (taken) {
    lazy_zero = false;
  } else if (lazy_zero) {
    mapped = true;
    p = fresh([&] { return detail::host_map_zeroed(block); });
  } else if (!wrapped && block >= detail::kHostCacheMinBytes) {
    p = fresh([&] { return detail::host_map_block(block, &mapped); });
  } else if (!wrapped) {
    p = fresh([&] { return std::aligned_alloc(64, block); });
  }
  if (p && !taken && !wrapped) detail::host_cache_note_fresh(block);
  if (!p)
    throw AllocationError("[Storage] cannot allocate " + bytes_str(double(nbytes)) + " (" +
                          std::to_string(nbytes) + " bytes): out of memory");
  // The deleter frees p if the control block itself cannot be allocated.
  const auto bookkeeping = [&] {
    return AllocationError("[Storage] cannot allocate the bookkeeping of a " +
                           bytes_str(double(nbytes)) + " storage: out of memory");
  };
  std::shared_ptr<void> owner;
  try {
    owner = std::shared_ptr<void>(
        p, [block, mapped](void* q) { detail::host_cache_give(q, block, mapped); });
  } catch (const std::bad_alloc&) {
    throw bookkeeping();
  }
  std::shared_ptr<Storage> s;
  try {
    s = std::make_shared<Storage>();
  } catch (const std::bad_alloc&) {
    throw bookkeeping();
  }
  s->owner = std::move(owner);
  if (zero && !lazy_zero) std::memset(p, 0, padded);
  s->data = p;
  s->nbytes = nbytes;
  return s;
}

std::shared_ptr<Storage> Storage::allocate(std::size_t nbytes, const Device& device_in, bool zero,
                                           const char* fn) {
  const Device device = resolve_device(device_in, fn);
  if (device.is_cpu()) return allocate(nbytes, zero);
  const int index = device.index();
  void* p = cuda_rt::malloc(nbytes, index, fn);
  std::shared_ptr<void> owner;
  try {
    owner = std::shared_ptr<void>(p, [index](void* q) { cuda_rt::free(q, index); });
  } catch (const std::bad_alloc&) {
    cuda_rt::free(p, index);
    throw AllocationError("[Storage] cannot allocate the bookkeeping of a GPU storage");
  }
  auto s = std::make_shared<Storage>();
  s->owner = std::move(owner);
  if (zero) cuda_rt::memset_zero(p, index, nbytes, fn);
  s->data = p;
  s->nbytes = nbytes;
  s->device = device;
  return s;
}

namespace detail {

// Throws AllocationError: "[fn] cannot allocate <asked> for a (2, 3) float32 tensor: <why>", or
// without <asked> when the size is not a number of bytes at all.
[[noreturn]] void fail_allocation(const char* fn, const Shape& shape, Dtype dtype,
                                  const std::string& asked, const std::string& why) {
  throw AllocationError(msg(fn, "cannot allocate ", asked.empty() ? "" : asked + " for ", "a ",
                            shape_str(shape), " ", dtype_name(dtype).substr(6), " tensor: ", why));
}

Tensor make_tensor(const char* fn, const Shape& shape, Dtype dtype, bool zero,
                   const Device& device) {
  for (auto s : shape)
    if (s < 0) fail(fn, "negative dimension in shape ", shape_str(shape));
  int64_t numel = 1;
  for (auto s : shape)
    if (__builtin_mul_overflow(numel, s, &numel))
      fail_allocation(fn, shape, dtype, "", "its number of elements overflows int64");
  // Bytes in 128 bits: numel < 2^63 and itemsize <= 8, so the product fits.
  const unsigned __int128 bytes = (unsigned __int128)numel * itemsize(dtype);
  const double approx = double(bytes);
  std::string exact;  // the decimal digits of bytes
  for (unsigned __int128 b = bytes; exact.empty() || b > 0; b /= 10)
    exact.insert(exact.begin(), char('0' + int(b % 10)));
  const std::string asked = bytes_str(approx) + " (" + exact + " bytes)";
  // Beyond 2^58 elements no machine has the memory, and the element offsets of kernels that
  // multiply them by a stride or an item size would overflow.
  if (numel > (int64_t(1) << 58))
    fail_allocation(fn, shape, dtype, asked, "more memory than any machine has");
  auto impl = std::make_shared<TensorImpl>();
  try {
    impl->storage = device.is_cpu() ? Storage::allocate(std::size_t(bytes), zero)
                                    : Storage::allocate(std::size_t(bytes), device, zero, fn);
  } catch (const AllocationError& e) {
    if (device.is_cuda()) throw;  // the CUDA message names the GPU and its free memory
    (void)e;
    fail_allocation(fn, shape, dtype, asked, "out of memory");
  }
  impl->sizes = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(impl);
}

Tensor make_tensor(const Shape& shape, Dtype dtype, bool zero) {
  return make_tensor("empty", shape, dtype, zero);
}

}  // namespace detail

}  // namespace attn

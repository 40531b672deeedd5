// copy_'s CPU table (src/backend/elementwise_kernels.h): every pair of dtypes, converted as
// torch converts.
#include <attn/half.h>

#include <type_traits>

#include "../elementwise_kernels.h"
#include "strided.h"

namespace attn::kernels {
namespace {

template <typename T>
inline constexpr bool is_half = std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>;

// One element converted as torch's static_cast_with_inter_type.
template <typename To, typename From>
To convert_one(From v) {
  if constexpr (std::is_same_v<To, From>) {
    return v;
  } else if constexpr (is_half<From>) {
    return convert_one<To>(float(v));
  } else if constexpr (is_half<To>) {
    return To(float(v));
  } else if constexpr (std::is_same_v<To, bool>) {
    return v != From(0);
  } else {
    return To(v);
  }
}

template <typename To, typename From>
void convert(const backend::Copy& c) {
  To* d = static_cast<To*>(c.dst);
  const From* s = static_cast<const From*>(c.src);
  strided_loop<2>(*c.shape, {c.dst_strides, c.src_strides}, {c.dst_offset, c.src_offset},
                  [&](const std::array<int64_t, 2>& o) { d[o[0]] = convert_one<To>(s[o[1]]); });
}

template <typename To>
void copy_to(const backend::Copy& c) {
  switch (c.src_dtype) {
    case Dtype::Float32: return convert<To, float>(c);
    case Dtype::Int64: return convert<To, int64_t>(c);
    case Dtype::Bool: return convert<To, bool>(c);
    case Dtype::BFloat16: return convert<To, BFloat16>(c);
    case Dtype::Float16: return convert<To, Half>(c);
  }
}

}  // namespace
}  // namespace attn::kernels

namespace attn::backend::cpu {
const Kernels<CopyFn> copy = {kernels::copy_to<float>, kernels::copy_to<int64_t>,
                              kernels::copy_to<bool>, kernels::copy_to<BFloat16>,
                              kernels::copy_to<Half>};
}  // namespace attn::backend::cpu

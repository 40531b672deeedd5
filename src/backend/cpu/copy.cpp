// copy_'s CPU table (src/backend/elementwise_kernels.h): every pair of dtypes, converted as
// torch converts, in any two layouts (strided.h: copy_strided, on the threads, transposes in
// tiles).
#include <attn/half.h>

#include <algorithm>
#include <type_traits>

#include "../elementwise_kernels.h"
#include "isa.h"
#include "strided.h"
#include "threads.h"
#include "transpose.h"

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

// n elements at unit strides: a loop the compiler vectorises (for the two-byte floats, in one build
// per instruction set: ATTN_ISA_VARIANTS).
template <typename To, typename From>
ATTN_ISA_INLINE void convert_run_body(To* d, const From* s, int64_t n) {
  if constexpr (std::is_same_v<To, From>) {
    std::copy(s, s + n, d);
  } else {
    for (int64_t i = 0; i < n; ++i) d[i] = convert_one<To>(s[i]);
  }
}
#define ATTN_CONVERT_RUN(name, To, From)                                                           \
  ATTN_ISA_INLINE void name##_body(To* d, const From* s, int64_t n) { convert_run_body(d, s, n); } \
  ATTN_ISA_VARIANTS(void, name, (To * d, const From* s, int64_t n), (d, s, n))
ATTN_CONVERT_RUN(float_to_bf16, BFloat16, float)
ATTN_CONVERT_RUN(bf16_to_float, float, BFloat16)
ATTN_CONVERT_RUN(float_to_half, Half, float)
ATTN_CONVERT_RUN(half_to_float, float, Half)
#undef ATTN_CONVERT_RUN

// The conversion of copy_strided (strided.h).
template <typename To, typename From>
struct Convert {
  static To one(From v) { return convert_one<To>(v); }
  static void run(To* d, const From* s, int64_t n) {
    if constexpr (std::is_same_v<To, BFloat16> && std::is_same_v<From, float>) {
      float_to_bf16(d, s, n);
    } else if constexpr (std::is_same_v<To, float> && std::is_same_v<From, BFloat16>) {
      bf16_to_float(d, s, n);
    } else if constexpr (std::is_same_v<To, Half> && std::is_same_v<From, float>) {
      float_to_half(d, s, n);
    } else if constexpr (std::is_same_v<To, float> && std::is_same_v<From, Half>) {
      half_to_float(d, s, n);
    } else {
      convert_run_body(d, s, n);
    }
  }
  // float32 in registers (transpose.h); the rest through a buffer of kTile x kTile, filled along
  // s's rows and emptied along d's, so that both sides move whole cache lines once.
  static void tile(const From* s, int64_t lds, To* d, int64_t ldd, int64_t ni, int64_t nj) {
    if constexpr (std::is_same_v<To, float> && std::is_same_v<From, float>) {
      transpose_f32(s, lds, d, ldd, ni, nj);
    } else {
      constexpr int64_t kTile = 32;
      To buf[kTile * kTile];  // buf[i - i0][j - j0]
      for (int64_t j0 = 0; j0 < nj; j0 += kTile) {
        const int64_t j1 = std::min(nj, j0 + kTile);
        for (int64_t i0 = 0; i0 < ni; i0 += kTile) {
          const int64_t i1 = std::min(ni, i0 + kTile);
          for (int64_t i = i0; i < i1; ++i)
            for (int64_t j = j0; j < j1; ++j) buf[(i - i0) * kTile + j - j0] = one(s[i * lds + j]);
          for (int64_t j = j0; j < j1; ++j)
            for (int64_t i = i0; i < i1; ++i) d[j * ldd + i] = buf[(i - i0) * kTile + j - j0];
        }
      }
    }
  }
};

template <typename To, typename From>
void convert(const backend::Copy& c) {
  copy_strided<Convert<To, From>>(*c.shape, static_cast<To*>(c.dst) + c.dst_offset, *c.dst_strides,
                                  static_cast<const From*>(c.src) + c.src_offset, *c.src_strides,
                                  num_threads());
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

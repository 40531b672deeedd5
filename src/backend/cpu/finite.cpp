// Finding infinities and NaNs in float arrays (finite.h).
#include "finite.h"

#include <cmath>
#include <cstdint>
#include <cstring>

#include "isa.h"
#include "vmath.h"

namespace attn::kernels {

ATTN_ISA_INLINE bool all_finite_body(const float* x, int64_t n) {
  uint32_t bad = 0;
  for (int64_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, x + i, sizeof u);
    bad |= uint32_t((u & 0x7f800000u) == 0x7f800000u);
  }
  return bad == 0;
}
ATTN_ISA_VARIANTS(bool, all_finite, (const float* x, int64_t n), (x, n))

NonFinite count_nonfinite(const float* x, int64_t n) {
  NonFinite r;
  if (all_finite(x, n)) return r;  // the common case, vectorised; then the count, serially
  for (int64_t i = 0; i < n; ++i) {
    if (std::isfinite(x[i])) continue;
    if (r.count++ == 0) r.first = i, r.value = x[i];
  }
  return r;
}

}  // namespace attn::kernels

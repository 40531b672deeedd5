#include "dot.h"

#include "isa.h"
#include "vmath.h"

namespace attn::kernels {

ATTN_ISA_INLINE double dot_double_body(const float* a, const float* b, int64_t n) {
  double acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += double(a[i + j]) * double(b[i + j]);
  for (int j = 0; i < n; ++i, ++j) acc[j] += double(a[i]) * double(b[i]);
  return ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}
ATTN_ISA_VARIANTS(double, dot_double, (const float* a, const float* b, int64_t n), (a, b, n))

}  // namespace attn::kernels

// Merging attention over blocks of keys (sdpa_merge.h).
#include "sdpa_merge.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "../attention_kernels.h"
#include "threads.h"

namespace attn::kernels {

void merge_attention_rows(float* o, float* l, const float* op, const float* lp, int64_t BH,
                          int64_t n, int64_t L, int64_t Dv, int64_t start) {
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
#pragma omp parallel for schedule(static) if (BH * n * Dv > (1 << 16)) num_threads(num_threads())
  for (int64_t r = 0; r < BH * n; ++r) {
    const int64_t bh = r / n, i = r % n;
    const int64_t row = bh * L + start + i;
    const float lb = lp[r];
    if (lb == kNegInf) continue;  // nothing seen in this block
    float* orow = o + row * Dv;
    const float* prow = op + r * Dv;
    const float la = l[row];
    if (la == kNegInf) {  // first block this row sees
      std::copy(prow, prow + Dv, orow);
      l[row] = lb;
      continue;
    }
    // logaddexp, stable: max + log1p(exp(-|a - b|)). NaN in either propagates to the row.
    const double a = la, b = lb;
    const double m = std::max(a, b), merged = m + std::log1p(std::exp(-std::abs(a - b)));
    const double wa = std::exp(a - merged), wb = std::exp(b - merged);
    for (int64_t e = 0; e < Dv; ++e) orow[e] = float(wa * double(orow[e]) + wb * double(prow[e]));
    l[row] = float(merged);
  }
}

}  // namespace attn::kernels

namespace attn::backend::cpu {
namespace {
void merge_f32(const SdpaMerge& a) {
  kernels::merge_attention_rows(static_cast<float*>(a.out), static_cast<float*>(a.lse),
                                static_cast<const float*>(a.out_p),
                                static_cast<const float*>(a.lse_p), a.BH, a.n, a.L, a.D_v, a.start);
}
}  // namespace
const Kernels<SdpaMergeFn> sdpa_merge = {merge_f32};
}  // namespace attn::backend::cpu

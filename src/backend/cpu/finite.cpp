// Finding infinities and NaNs in float arrays (finite.h).
#include "finite.h"

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>

#include "../reduce_kernels.h"
#include "isa.h"
#include "threads.h"
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

bool all_finite_strided(const float* base, int nd, const int64_t* size, const int64_t* stride) {
  for (int d = 0; d < nd; ++d)
    if (size[d] == 0) return true;
  if (nd == 0) return std::isfinite(*base);
  // The innermost run: the last dim, and the dims before it while they continue it contiguously.
  int inner = nd - 1;
  int64_t n = size[nd - 1];
  const int64_t s = n == 1 ? 1 : stride[nd - 1];
  if (s == 1)
    while (inner > 0 && (stride[inner - 1] == n || size[inner - 1] == 1)) n *= size[--inner];
  auto run_ok = [n, s](const float* r) {
    if (s == 1) return all_finite(r, n);
    uint32_t bad = 0;
    for (int64_t i = 0; i < n; ++i) bad |= uint32_t(!std::isfinite(r[i * s]));
    return bad == 0;
  };
  // The outer dims, broadcast (stride 0) ones visited once.
  int64_t outer_size[8], outer_stride[8];
  int64_t runs = 1;
  for (int d = 0; d < inner; ++d) {
    outer_size[d] = stride[d] == 0 ? 1 : size[d];
    outer_stride[d] = stride[d];
    runs *= outer_size[d];
  }
  // Split across the threads (the array was mostly just written by several threads, each part in
  // its own core's cache): a single run by elements, else by runs.
  std::atomic<bool> ok{true};
  const int nt = threads_for(runs * n);
  if (runs == 1 && s == 1) {
    parallel_ranges(n, nt, [&](int64_t i0, int64_t i1) {
      if (!all_finite(base + i0, i1 - i0)) ok = false;
    });
    return ok;
  }
  parallel_ranges(runs, nt, [&](int64_t r0, int64_t r1) {
    int64_t idx[8], off = 0;
    int64_t rest = r0;
    for (int d = inner - 1; d >= 0; --d) {  // run r0's index and offset
      idx[d] = rest % outer_size[d], rest /= outer_size[d];
      off += idx[d] * outer_stride[d];
    }
    bool all = true;
    for (int64_t r = r0; r < r1; ++r) {
      all = run_ok(base + off) && all;
      for (int d = inner - 1; d >= 0; --d) {  // the next run
        off += outer_stride[d];
        if (++idx[d] < outer_size[d]) break;
        off -= outer_stride[d] * outer_size[d];
        idx[d] = 0;
      }
    }
    if (!all) ok = false;
  });
  return ok;
}

}  // namespace attn::kernels

namespace attn::backend::cpu {
namespace {
void count_nonfinite_f32(const CountNonFinite& a) {
  const kernels::NonFinite k = kernels::count_nonfinite(static_cast<const float*>(a.x), a.n);
  *a.count = k.count, *a.first = k.first, *a.value = k.value;
}
}  // namespace
const Kernels<CountNonFiniteFn> count_nonfinite = {count_nonfinite_f32};
}  // namespace attn::backend::cpu

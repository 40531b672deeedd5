// cumsum / cumprod and clamp on the CPU (src/backend/scan_clamp_kernels.h), with PyTorch's
// arithmetic: built without FMA contraction (src/backend/cpu/CMakeLists.txt), as the float sums
// and products must round as PyTorch's do.
#include <array>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "../elementwise_kernels.h"
#include "../reduce_kernels.h"
#include "strided.h"

namespace attn::kernels {
namespace {

using backend::ScanOp;

// Calls f(row_in, row_g, row_out, n, stride) for every row along the middle dim.
template <typename T, typename F>
void scan_rows(const backend::Scan& s, F f) {
  const T* pi = static_cast<const T*>(s.x);
  const T* pg = static_cast<const T*>(s.g);
  T* po = static_cast<T*>(s.out);
  const int64_t n = s.n, inner = s.inner;
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t i = 0; i < inner; ++i) {
      const int64_t at = o * n * inner + i;
      f(pi + at, pg ? pg + at : nullptr, po + at, n, inner);
    }
}

// torch accumulates float32 scans in double (its CPU acc_type).
void scan_f32(const backend::Scan& s) {
  switch (s.op) {
    case ScanOp::CumSum:
    case ScanOp::CumProd: {
      const bool prod = s.op == ScanOp::CumProd;
      return scan_rows<float>(
          s, [prod](const float* x, const float*, float* y, int64_t n, int64_t st) {
            double acc = prod ? 1.0 : 0.0;
            for (int64_t j = 0; j < n; ++j) {
              acc = prod ? acc * x[j * st] : acc + x[j * st];
              y[j * st] = float(acc);
            }
          });
    }
    case ScanOp::CumSumBackward:
      return scan_rows<float>(s, [](const float* x, const float*, float* y, int64_t n, int64_t st) {
        double acc = 0;
        for (int64_t j = n - 1; j >= 0; --j) {
          acc += x[j * st];
          y[j * st] = float(acc);
        }
      });
    case ScanOp::CumProdBackward:
      // d y_j / d x_i = prod_{k <= j, k != i} x_k for j >= i.
      return scan_rows<float>(
          s, [](const float* xr, const float* gr, float* rr, int64_t n, int64_t st) {
            for (int64_t i = 0; i < n; ++i) {
              double before = 1;
              for (int64_t k = 0; k < i; ++k) before *= xr[k * st];
              double acc = 0, after = 1;
              for (int64_t j = i; j < n; ++j) {
                if (j > i) after *= xr[j * st];
                acc += gr[j * st] * before * after;
              }
              rr[i * st] = float(acc);
            }
          });
  }
}

// int64 scans wrap on overflow, as torch's.
void scan_i64(const backend::Scan& s) {
  const bool prod = s.op == ScanOp::CumProd;
  scan_rows<int64_t>(s,
                     [prod](const int64_t* x, const int64_t*, int64_t* y, int64_t n, int64_t st) {
                       uint64_t acc = prod ? 1 : 0;
                       for (int64_t j = 0; j < n; ++j) {
                         acc = prod ? acc * uint64_t(x[j * st]) : acc + uint64_t(x[j * st]);
                         y[j * st] = int64_t(acc);
                       }
                     });
}

// min(max(x, lo), hi), NaN in x or in a bound propagating, as torch.
template <typename T>
T clamp_one(T x, const T* lo, const T* hi) {
  if constexpr (std::is_same_v<T, float>) {
    if (std::isnan(x)) return x;
    if (lo && (std::isnan(*lo) || x < *lo)) x = *lo;
    if (hi && (std::isnan(*hi) || x > *hi)) x = *hi;
    return x;
  } else {
    if (lo && x < *lo) x = *lo;
    if (hi && x > *hi) x = *hi;
    return x;
  }
}

// One loop per (dtype, which bounds are given): no test of a missing bound per element.
template <typename T, bool kLo, bool kHi>
void clamp_loop(const backend::Clamp& c) {
  const T* px = static_cast<const T*>(c.x.storage);
  const T* pl = static_cast<const T*>(c.lo.storage);
  const T* ph = static_cast<const T*>(c.hi.storage);
  T* po = static_cast<T*>(c.out);
  int64_t i = 0;
  strided_loop<3>(*c.shape, {c.x.strides, c.lo.strides, c.hi.strides},
                  {c.x.offset, c.lo.offset, c.hi.offset}, [&](const std::array<int64_t, 3>& o) {
                    po[i++] = clamp_one<T>(px[o[0]], kLo ? pl + o[1] : nullptr,
                                           kHi ? ph + o[2] : nullptr);
                  });
}

// Bounds that are one value each (clamp(min, max) with numbers): read once, not per element.
template <typename T, bool kLo, bool kHi>
void clamp_by_values(const backend::Clamp& c) {
  const T* px = static_cast<const T*>(c.x.storage);
  const T lo = kLo ? static_cast<const T*>(c.lo.storage)[c.lo.offset] : T(0);
  const T hi = kHi ? static_cast<const T*>(c.hi.storage)[c.hi.offset] : T(0);
  T* po = static_cast<T*>(c.out);
  int64_t i = 0;
  strided_loop<1>(*c.shape, {c.x.strides}, {c.x.offset}, [&](const std::array<int64_t, 1>& o) {
    po[i++] = clamp_one<T>(px[o[0]], kLo ? &lo : nullptr, kHi ? &hi : nullptr);
  });
}

bool all_zero(const Shape& strides) {
  for (int64_t s : strides)
    if (s != 0) return false;
  return true;
}

template <typename T>
void clamp(const backend::Clamp& c) {
  const bool lo = c.lo.storage != nullptr, hi = c.hi.storage != nullptr;
  if ((!lo || all_zero(*c.lo.strides)) && (!hi || all_zero(*c.hi.strides))) {
    if (lo && hi) return clamp_by_values<T, true, true>(c);
    if (lo) return clamp_by_values<T, true, false>(c);
    if (hi) return clamp_by_values<T, false, true>(c);
  }
  if (lo && hi) return clamp_loop<T, true, true>(c);
  if (lo) return clamp_loop<T, true, false>(c);
  if (hi) return clamp_loop<T, false, true>(c);
  clamp_loop<T, false, false>(c);
}

}  // namespace
}  // namespace attn::kernels

namespace attn::backend::cpu {
const Kernels<ScanFn> scan = {kernels::scan_f32, kernels::scan_i64};
const Kernels<ClampFn> clamp = {kernels::clamp<float>, kernels::clamp<int64_t>};
}  // namespace attn::backend::cpu

// The row orderings of sort and topk on the CPU (src/backend/index_kernels.h): float32, int64 and
// bool, with the standard algorithms, comparators and tie handling of PyTorch's CPU kernels
// (libstdc++'s std::sort / std::stable_sort for sort, partial_sort or nth_element + sort for
// topk, NaN above every number), so that indices agree with torch's even where values tie.
#include <algorithm>
#include <cmath>
#include <type_traits>
#include <utility>
#include <vector>

#include "../index_kernels.h"
#include "nan.h"

namespace attn::kernels {
namespace {

// "a comes before b": descending puts NaN first, ascending last (torch's comparators).
template <typename T>
struct Before {
  bool descending;
  bool operator()(const std::pair<T, int64_t>& a, const std::pair<T, int64_t>& b) const {
    if (descending) return (is_nan(a.first) && !is_nan(b.first)) || a.first > b.first;
    return (!is_nan(a.first) && is_nan(b.first)) || a.first < b.first;
  }
};

// Runs `order(row)` on every row (a vector of (value, position) pairs) and writes the first `keep`
// pairs of each ordered row.
template <typename T, typename F>
void ordered_rows(const backend::SortRows& a, F order) {
  const T* ps = static_cast<const T*>(a.src);
  T* pv = static_cast<T*>(a.values);
  int64_t* pi = a.indices;
  const int64_t n = a.n, keep = a.keep;
  std::vector<std::pair<T, int64_t>> row(n);
  for (int64_t r = 0; r < a.rows; ++r) {
    for (int64_t j = 0; j < n; ++j) row[j] = {ps[r * n + j], j};
    order(row);
    for (int64_t j = 0; j < keep; ++j) {
      pv[r * keep + j] = row[j].first;
      pi[r * keep + j] = row[j].second;
    }
  }
}

template <typename T>
void sort_rows(const backend::SortRows& a) {
  const Before<T> before{a.descending};
  ordered_rows<T>(a, [&](std::vector<std::pair<T, int64_t>>& row) {
    if (a.stable)
      std::stable_sort(row.begin(), row.end(), before);
    else
      std::sort(row.begin(), row.end(), before);
  });
}

template <typename T>
void topk_rows(const backend::SortRows& a) {
  const int64_t k = a.keep;
  const Before<T> before{a.descending};
  ordered_rows<T>(a, [&](std::vector<std::pair<T, int64_t>>& row) {
    if (k == 0) return;
    // torch's choice: a partial sort when k is small against the row, else nth_element and (when
    // sorted) a sort of the first k - 1.
    if (k * 64 <= int64_t(row.size())) {
      std::partial_sort(row.begin(), row.begin() + k, row.end(), before);
    } else {
      std::nth_element(row.begin(), row.begin() + k - 1, row.end(), before);
      if (a.sorted) std::sort(row.begin(), row.begin() + k - 1, before);
    }
  });
}

}  // namespace
}  // namespace attn::kernels

// bfloat16 and float16 are ordered as float32 by the ops (their values go back exactly).
namespace attn::backend::cpu {
const Kernels<SortRowsFn> sort_rows = {kernels::sort_rows<float>, kernels::sort_rows<int64_t>,
                                       kernels::sort_rows<bool>};
const Kernels<SortRowsFn> topk_rows = {kernels::topk_rows<float>, kernels::topk_rows<int64_t>,
                                       kernels::topk_rows<bool>};
}  // namespace attn::backend::cpu

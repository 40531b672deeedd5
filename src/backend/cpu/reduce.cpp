// sum, mean and var on the CPU (src/backend/reduce_kernels.h): float32 in PyTorch's summation
// order, int64 sums.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "../reduce_kernels.h"
#include "nan.h"
#include "threads.h"

namespace attn::kernels {
namespace {

double sum_of(const float* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i];
  return s;
}

// Float32 summation in PyTorch's order (its CPU cascade sum: four interleaved partial sums, each
// a cascade of levels of 16 additions; rows of at least 8 floats are summed as 8-lane vectors),
// so that sums round exactly as PyTorch's do (a softmax row sums to 1.0000, not 1.).
// `lanes` values are summed per lane (lane l holds x[i * lanes + l]).
// Row i starts at x + i * row_stride (by default the rows follow each other).
template <int64_t Lanes, int64_t Ilp = 4>
std::array<std::array<float, Lanes>, Ilp> multi_row_sum(const float* x, int64_t rows,
                                                        int64_t row_stride = Ilp * Lanes) {
  constexpr int64_t kLevels = 4;
  int64_t ceil_log2 = 0;
  while ((int64_t(1) << ceil_log2) < rows) ++ceil_log2;
  const int64_t level_power = std::max<int64_t>(4, ceil_log2 / kLevels);
  const int64_t level_step = int64_t(1) << level_power;
  const int64_t level_mask = level_step - 1;
  // acc[level][ilp][lane]; a "row" is Ilp groups of Lanes floats.
  std::array<std::array<std::array<float, Lanes>, Ilp>, kLevels> acc{};
  auto add_row = [&](int64_t i) {
    const float* r = x + i * row_stride;
    for (int64_t k = 0; k < Ilp; ++k)
      for (int64_t l = 0; l < Lanes; ++l) acc[0][k][l] += r[k * Lanes + l];
  };
  int64_t i = 0;
  while (i + level_step <= rows) {
    for (int64_t j = 0; j < level_step; ++j, ++i) add_row(i);
    for (int64_t j = 1; j < kLevels; ++j) {
      for (int64_t k = 0; k < Ilp; ++k)
        for (int64_t l = 0; l < Lanes; ++l) {
          acc[j][k][l] += acc[j - 1][k][l];
          acc[j - 1][k][l] = 0;
        }
      if ((i & (level_mask << (j * level_power))) != 0) break;
    }
  }
  for (; i < rows; ++i) add_row(i);
  for (int64_t j = 1; j < kLevels; ++j)
    for (int64_t k = 0; k < Ilp; ++k)
      for (int64_t l = 0; l < Lanes; ++l) acc[0][k][l] += acc[j][k][l];
  return acc[0];
}

// PyTorch's order when the reduced dim is not the innermost one (its "outer" sum over `columns`
// contiguous outputs): columns go in blocks (32 when there are at least 8 columns, else 4), each
// column of a full block summed by one cascade; the leftover columns use the interleaved row_sum.
float cascade_sum(const float* x, int64_t n) { return multi_row_sum<1, 1>(x, n)[0][0]; }

// PyTorch's row_sum: groups of 4 (interleaved), the remainder added to the first partial sum.
template <int64_t Lanes>
std::array<float, Lanes> row_sum(const float* x, int64_t n_groups) {
  const int64_t rows = n_groups / 4;
  auto partial = multi_row_sum<Lanes>(x, rows);
  for (int64_t g = rows * 4; g < n_groups; ++g)
    for (int64_t l = 0; l < Lanes; ++l) partial[0][l] += x[g * Lanes + l];
  for (int64_t k = 1; k < 4; ++k)
    for (int64_t l = 0; l < Lanes; ++l) partial[0][l] += partial[k][l];
  return partial[0];
}

float torch_sum(const float* x, int64_t n) {
  constexpr int64_t kVec = 8;  // floats per AVX2 vector
  if (n < kVec) return row_sum<1>(x, n)[0];
  const int64_t vecs = n / kVec;
  auto lanes = row_sum<kVec>(x, vecs);
  float acc = 0;
  for (int64_t k = vecs * kVec; k < n; ++k) acc += x[k];
  for (int64_t l = 0; l < kVec; ++l) acc += lanes[l];
  return acc;
}

enum class SumOrder { Inner, OuterRow, OuterCascade };

float sum_in_order(const float* x, int64_t n, SumOrder order) {
  switch (order) {
    case SumOrder::Inner: return torch_sum(x, n);
    case SumOrder::OuterRow: return row_sum<1>(x, n)[0];
    case SumOrder::OuterCascade: return cascade_sum(x, n);
  }
  return 0;
}

// A mean from its sum: NaN over no elements, as torch's.
float mean_from_sum(float sum, int64_t n) {
  return n == 0 ? std::numeric_limits<float>::quiet_NaN() : sum / float(n);
}

// One output's reduction of n contiguous floats summed in `order`.
float reduce_one(backend::ReduceOp op, const float* x, int64_t n, SumOrder order) {
  switch (op) {
    case backend::ReduceOp::Sum: return sum_in_order(x, n, order);
    case backend::ReduceOp::Mean: return mean_from_sum(sum_in_order(x, n, order), n);
    case backend::ReduceOp::Var:
    case backend::ReduceOp::VarUnbiased: {
      const int64_t denom = n - (op == backend::ReduceOp::VarUnbiased ? 1 : 0);
      if (denom <= 0) return std::numeric_limits<float>::quiet_NaN();
      double m = sum_of(x, n) / double(n), s = 0;
      for (int64_t i = 0; i < n; ++i) s += (x[i] - m) * (x[i] - m);
      return float(s / double(denom));
    }
  }
  return 0;
}

// Sum or Mean of each column of x, `rows` rows of `cols` floats, in the order reduce_one takes
// over the column's copy: blocks of columns (32, or 4 below 8 columns) summed together, one lane
// a column, in the cascade's order; the columns left over copied out and summed in row_sum's.
template <int64_t Block>
void sum_column_blocks(const float* x, float* out, int64_t rows, int64_t cols, int64_t b0,
                       int64_t b1) {
  for (int64_t b = b0; b < b1; ++b) {
    const auto sums = multi_row_sum<Block, 1>(x + b * Block, rows, cols)[0];
    for (int64_t l = 0; l < Block; ++l) out[b * Block + l] = sums[l];
  }
}

void reduce_columns(const backend::Reduce& r) {
  const auto* x = static_cast<const float*>(r.x);
  auto* out = static_cast<float*>(r.out);
  const int64_t rows = r.inner, cols = r.outer;
  const int64_t block = cols >= 8 ? 32 : 4;
  const int64_t blocks = cols / block;
  const int nt = threads_for(rows * cols);
  parallel_ranges(blocks, nt, [&](int64_t b0, int64_t b1) {
    if (block == 32)
      sum_column_blocks<32>(x, out, rows, cols, b0, b1);
    else
      sum_column_blocks<4>(x, out, rows, cols, b0, b1);
  });
  std::vector<float> column(static_cast<std::size_t>(rows));
  for (int64_t c = blocks * block; c < cols; ++c) {
    for (int64_t i = 0; i < rows; ++i) column[i] = x[i * cols + c];
    out[c] = row_sum<1>(column.data(), rows)[0];
  }
  if (r.op == backend::ReduceOp::Mean)
    for (int64_t c = 0; c < cols; ++c) out[c] = mean_from_sum(out[c], rows);
}

void reduce_f32(const backend::Reduce& r) {
  if (r.columns_in_rows) return reduce_columns(r);
  const auto* ps = static_cast<const float*>(r.x);
  auto* po = static_cast<float*>(r.out);
  // PyTorch's order per output (see sum_in_order): the last dim reduced, or columns in blocks.
  const int64_t block = r.columns >= 8 ? 32 : 4;
  const int64_t blocked = (r.columns / block) * block;
  // Outputs shared among the threads: each one's order is its own, so the bits do not depend on
  // the thread count.
  parallel_ranges(r.outer, threads_for(r.outer * r.inner), [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      const SumOrder order = r.innermost_reduced        ? SumOrder::Inner
                             : o % r.columns >= blocked ? SumOrder::OuterRow
                                                        : SumOrder::OuterCascade;
      po[o] = reduce_one(r.op, ps + o * r.inner, r.inner, order);
    }
  });
}

// int64 sums (sum of an integer or bool tensor), wrapping around on overflow as PyTorch's.
void reduce_i64(const backend::Reduce& r) {
  const auto* ps = static_cast<const int64_t*>(r.x);
  auto* po = static_cast<int64_t*>(r.out);
  for (int64_t o = 0; o < r.outer; ++o) {
    int64_t s = 0;
    for (int64_t i = 0; i < r.inner; ++i) s = int64_t(uint64_t(s) + uint64_t(ps[o * r.inner + i]));
    po[o] = s;
  }
}

// max / min with the first index (index not null), or amax: the running max that stops at the
// first NaN (its values the same as max's).
template <typename T>
void extreme_rows(const backend::Extreme& e) {
  const T* ps = static_cast<const T*>(e.x);
  T* pv = static_cast<T*>(e.values);
  parallel_ranges(e.outer, threads_for(e.outer * e.inner), [&](int64_t o0, int64_t o1) {
    for (int64_t o = o0; o < o1; ++o) {
      const T* x = ps + o * e.inner;
      if (!e.index) {  // amax
        T m = x[0];
        for (int64_t i = 1; i < e.inner && !is_nan(m); ++i)
          if (is_nan(x[i]) || x[i] > m) m = x[i];
        pv[o] = m;
        continue;
      }
      int64_t best = 0;
      for (int64_t i = 1; i < e.inner; ++i) {
        if (is_nan(x[best])) break;
        if (is_nan(x[i]) || (e.is_max ? x[i] > x[best] : x[i] < x[best])) best = i;
      }
      pv[o] = x[best];
      e.index[o] = best;
    }
  });
}

}  // namespace
}  // namespace attn::kernels

namespace attn::backend::cpu {
// float32: sum, mean, var; int64: sum only (the op computes mean and var in float32).
const Kernels<ReduceFn> reduce = {kernels::reduce_f32, kernels::reduce_i64};
// In each dtype's own values (int64 above 2^24 would not survive float32); bfloat16 and float16
// go through float32 exactly.
const Kernels<ExtremeFn> extreme = {kernels::extreme_rows<float>, kernels::extreme_rows<int64_t>,
                                    kernels::extreme_rows<bool>};
}  // namespace attn::backend::cpu

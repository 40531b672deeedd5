// sum, mean and var on the CPU (src/backend/reduce_kernels.h): float32 in PyTorch's summation
// order, int64 sums.
#include <algorithm>
#include <array>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "../reduce_kernels.h"
#include "isa.h"
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
ATTN_ISA_INLINE std::array<std::array<float, Lanes>, Ilp> multi_row_sum(
    const float* x, int64_t rows, int64_t row_stride = Ilp * Lanes) {
  using Acc = std::array<std::array<float, Lanes>, Ilp>;  // [ilp][lane]: a "row" of Ilp * Lanes
  constexpr int64_t kLevels = 4;
  int64_t ceil_log2 = 0;
  while ((int64_t(1) << ceil_log2) < rows) ++ceil_log2;
  const int64_t level_power = std::max<int64_t>(4, ceil_log2 / kLevels);
  const int64_t level_step = int64_t(1) << level_power;
  const int64_t level_mask = level_step - 1;
  // Level 0 (rows [i0, i1) summed from zero) in a fresh local each time, which the compiler keeps
  // in registers; the levels above in acc[1..3].
  auto add_rows = [&](int64_t i0, int64_t i1) {
    Acc a{};
    for (int64_t i = i0; i < i1; ++i) {
      const float* r = x + i * row_stride;
      for (int64_t k = 0; k < Ilp; ++k)
        for (int64_t l = 0; l < Lanes; ++l) a[k][l] += r[k * Lanes + l];
    }
    return a;
  };
  auto add_to = [](Acc& to, const Acc& from) {
    for (int64_t k = 0; k < Ilp; ++k)
      for (int64_t l = 0; l < Lanes; ++l) to[k][l] += from[k][l];
  };
  if (rows < level_step) {  // no level is ever carried: the empty levels' zeros added once
    Acc a = add_rows(0, rows);
    add_to(a, Acc{});  // + 0: a -0 sum becomes +0, as the cascade's three additions make it
    return a;
  }
  std::array<Acc, kLevels> acc{};
  int64_t i = 0;
  while (i + level_step <= rows) {
    add_to(acc[1], add_rows(i, i + level_step));
    i += level_step;
    for (int64_t j = 2; j < kLevels; ++j) {  // carried up while i is a multiple of the level
      if ((i & (level_mask << ((j - 1) * level_power))) != 0) break;
      add_to(acc[j], acc[j - 1]);
      acc[j - 1] = Acc{};
    }
  }
  Acc a = add_rows(i, rows);
  for (int64_t j = 1; j < kLevels; ++j) add_to(a, acc[j]);
  return a;
}

// PyTorch's order when the reduced dim is not the innermost one (its "outer" sum over `columns`
// contiguous outputs): columns go in blocks (32 when there are at least 8 columns, else 4), each
// column of a full block summed by one cascade; the leftover columns use the interleaved row_sum.
ATTN_ISA_INLINE float cascade_sum(const float* x, int64_t n) {
  return multi_row_sum<1, 1>(x, n)[0][0];
}

// PyTorch's row_sum: groups of 4 (interleaved), the remainder added to the first partial sum.
template <int64_t Lanes>
ATTN_ISA_INLINE std::array<float, Lanes> row_sum(const float* x, int64_t n_groups) {
  const int64_t rows = n_groups / 4;
  auto partial = multi_row_sum<Lanes>(x, rows);
  for (int64_t g = rows * 4; g < n_groups; ++g)
    for (int64_t l = 0; l < Lanes; ++l) partial[0][l] += x[g * Lanes + l];
  for (int64_t k = 1; k < 4; ++k)
    for (int64_t l = 0; l < Lanes; ++l) partial[0][l] += partial[k][l];
  return partial[0];
}

ATTN_ISA_INLINE float torch_sum(const float* x, int64_t n) {
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

ATTN_ISA_INLINE float sum_in_order(const float* x, int64_t n, SumOrder order) {
  switch (order) {
    case SumOrder::Inner: return torch_sum(x, n);
    case SumOrder::OuterRow: return row_sum<1>(x, n)[0];
    case SumOrder::OuterCascade: return cascade_sum(x, n);
  }
  return 0;
}

// A mean from its sum: NaN over no elements, as torch's.
ATTN_ISA_INLINE float mean_from_sum(float sum, int64_t n) {
  return n == 0 ? std::numeric_limits<float>::quiet_NaN() : sum / float(n);
}

// Outputs [o0, o1) of a Sum (or a Mean), each of `inner` contiguous floats, summed in PyTorch's
// order for the output's place: the last dim reduced (Inner), or else `columns` kept elements
// after the reduced dims, in blocks (32 when there are at least 8 columns, else 4) summed by one
// cascade each, the columns left over by row_sum. Built per instruction set, the same additions
// in the same order on each (only the width of the vectors that hold the lanes differs, so the
// bits do not).
ATTN_ISA_INLINE void sum_outputs_body(const float* x, float* out, int64_t o0, int64_t o1,
                                      int64_t inner, int64_t columns, bool innermost, bool mean) {
  const int64_t block = columns >= 8 ? 32 : 4;
  const int64_t blocked = (columns / block) * block;
  for (int64_t o = o0; o < o1; ++o) {
    const SumOrder order = innermost                ? SumOrder::Inner
                           : o % columns >= blocked ? SumOrder::OuterRow
                                                    : SumOrder::OuterCascade;
    const float sum = sum_in_order(x + o * inner, inner, order);
    out[o] = mean ? mean_from_sum(sum, inner) : sum;
  }
}
ATTN_ISA_VARIANTS(void, sum_outputs,
                  (const float* x, float* out, int64_t o0, int64_t o1, int64_t inner,
                   int64_t columns, bool innermost, bool mean),
                  (x, out, o0, o1, inner, columns, innermost, mean))

// The variance of n floats (divided by n - 1 when unbiased), accumulated in double.
float variance(const float* x, int64_t n, bool unbiased) {
  const int64_t denom = n - (unbiased ? 1 : 0);
  if (denom <= 0) return std::numeric_limits<float>::quiet_NaN();
  double m = sum_of(x, n) / double(n), s = 0;
  for (int64_t i = 0; i < n; ++i) s += (x[i] - m) * (x[i] - m);
  return float(s / double(denom));
}

// Sum or Mean of each column of x, `rows` rows of `cols` floats, in the order sum_outputs takes
// over the column's copy: blocks of columns (32, or 4 below 8 columns) summed together, one lane
// a column, in the cascade's order; the columns left over copied out and summed in row_sum's.
template <int64_t Block>
ATTN_ISA_INLINE void block_sums(const float* x, float* out, int64_t rows, int64_t cols) {
  const auto sums = multi_row_sum<Block, 1>(x, rows, cols)[0];
  for (int64_t l = 0; l < Block; ++l) out[l] = sums[l];
}
// The sums of the `block` (32 or 4) columns from x on, rows rows cols apart, into out[0, block).
ATTN_ISA_INLINE void column_block_sums_body(const float* x, float* out, int64_t rows, int64_t cols,
                                            int64_t block) {
  if (block == 32)
    block_sums<32>(x, out, rows, cols);
  else
    block_sums<4>(x, out, rows, cols);
}
ATTN_ISA_VARIANTS(void, column_block_sums,
                  (const float* x, float* out, int64_t rows, int64_t cols, int64_t block),
                  (x, out, rows, cols, block))

// x laid out (batches, rows, cols): each batch's column sums (or means) into out's (batches, cols).
// Blocks of columns on the threads; the columns left over (fewer than a block) copied out one
// at a time.
void reduce_columns(const backend::Reduce& r) {
  const auto* x = static_cast<const float*>(r.x);
  auto* out = static_cast<float*>(r.out);
  const int64_t rows = r.inner, cols = r.columns;
  const int64_t batches = cols == 0 ? 0 : r.outer / cols;
  if (batches == 0) return;
  const int64_t block = cols >= 8 ? 32 : 4;
  const int64_t blocks = cols / block, left = cols - blocks * block;
  const int nt = threads_for(batches * rows * cols);
  parallel_ranges(batches * blocks, nt, [&](int64_t q0, int64_t q1) {
    for (int64_t q = q0; q < q1; ++q) {
      const int64_t b = q / blocks, c = (q % blocks) * block;
      column_block_sums(x + b * rows * cols + c, out + b * cols + c, rows, cols, block);
    }
  });
  if (left > 0)
    parallel_ranges(batches * left, nt, [&](int64_t q0, int64_t q1) {
      std::vector<float> column(static_cast<std::size_t>(rows));
      for (int64_t q = q0; q < q1; ++q) {
        const int64_t b = q / left, c = blocks * block + q % left;
        const float* xb = x + b * rows * cols;
        for (int64_t i = 0; i < rows; ++i) column[i] = xb[i * cols + c];
        out[b * cols + c] = row_sum<1>(column.data(), rows)[0];
      }
    });
  if (r.op == backend::ReduceOp::Mean)
    for (int64_t o = 0; o < r.outer; ++o) out[o] = mean_from_sum(out[o], rows);
}

void reduce_f32(const backend::Reduce& r) {
  if (r.columns_in_rows) return reduce_columns(r);
  const auto* ps = static_cast<const float*>(r.x);
  auto* po = static_cast<float*>(r.out);
  // Outputs shared among the threads: each one's order is its own, so the bits do not depend on
  // the thread count.
  const bool sum = r.op == backend::ReduceOp::Sum || r.op == backend::ReduceOp::Mean;
  parallel_ranges(r.outer, threads_for(r.outer * r.inner), [&](int64_t o0, int64_t o1) {
    if (sum) {
      sum_outputs(ps, po, o0, o1, r.inner, r.columns, r.innermost_reduced,
                  r.op == backend::ReduceOp::Mean);
      return;
    }
    for (int64_t o = o0; o < o1; ++o)
      po[o] = variance(ps + o * r.inner, r.inner, r.op == backend::ReduceOp::VarUnbiased);
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

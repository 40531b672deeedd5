// The kernels of the indexing ops: gather and the scatter family (src/ops/gather_scatter.cpp), the
// row orderings of sort and topk (src/ops/sort.cpp), and the element moves of advanced indexing on
// 1-D tensors and a bool mask's true positions (src/tensor/index.cpp); one table per op and
// backend, indexed by the dtype of the elements moved (src/backend/dispatch.h).
// The ops validate the indices they can (the wrap of advanced indexing); the kernels move
// elements only.
#pragma once

#include <attn/common.h>

#include <cstdint>
#include <optional>

#include "dispatch.h"

namespace attn::backend {

// gather: other[p] = self[p with p[dim] = k]; scatter: self[p with p[dim] = k] = other[p];
// scatter_add: self[...] += other[p] (bool: ||; bfloat16 and float16: added in float32 and
// rounded each time, as torch).
enum class GatherScatterOp { Gather, Scatter, ScatterAdd };
// For every position p of `shape` (index's shape, rank >= 1: a 0-dim operand comes as one
// element of stride 0) in row-major order, with k = index[p]: the op above. Each operand is its
// storage, its offset there and its strides along shape's dims (self's stride along dim is the
// step of k), in elements of the slot's dtype. `limit` is self's size along dim.
struct GatherScatter {
  GatherScatterOp op;
  const Shape* shape;
  const int64_t* index;
  int64_t index_offset;
  const Shape* index_strides;
  void* self;
  int64_t self_offset;
  const Shape* self_strides;
  void* other;
  int64_t other_offset;
  const Shape* other_strides;
  int64_t dim, limit;
};
// Returns the first k outside [0, limit) (the positions before it are done, none after), or
// nullopt.
using GatherScatterFn = std::optional<int64_t>(const GatherScatter&);

// Each of `rows` contiguous rows of n elements of src as (value, position in the row) pairs,
// ordered with torch's comparators (NaN above every number: first when descending, last when
// ascending), then the first `keep` pairs into values and indices (rows x keep, contiguous).
// sort: std::stable_sort or std::sort of the whole row (keep = n). topk: keep = k, the k first of
// the row by a partial sort when 64 k <= n, else by nth_element and, when `sorted`, a sort of the
// first k - 1 (torch's choice, so that ties pick the same positions).
struct SortRows {
  const void* src;
  void* values;
  int64_t* indices;
  int64_t rows, n, keep;
  bool descending;  // sort: descending; topk: largest
  bool stable;      // sort only
  bool sorted;      // topk only
};
using SortRowsFn = void(const SortRows&);

// For i < n and k = index[i] (+ size when negative; the caller checked it against size):
// Take dst[i] = src[k]; Put dst[k] = src[i]; Add dst[k] += src[i] (as scatter_add). dst and src
// are the addresses of element 0 of the operands, with their strides along the indexed dim in
// elements. Without a slice shape (or with an empty one) each index moves one element; with one,
// each moves a slice of that shape (the other dims of a tensor indexed along one), its elements
// at dst_slice_strides / src_slice_strides from the slice's first. The indices are taken in order
// (Put: the last of a repeated index is kept; Add: its sums in index order) on any number of
// threads, which share the elements of the slices.
enum class IndexMoveOp { Take, Put, Add };
struct IndexMove {
  IndexMoveOp op;
  void* dst;
  int64_t dst_stride;
  const void* src;
  int64_t src_stride;
  const int64_t* index;
  int64_t n, size;
  const Shape* slice_shape = nullptr;
  const Shape* dst_slice_strides = nullptr;
  const Shape* src_slice_strides = nullptr;
};
using IndexMoveFn = void(const IndexMove&);

// The positions of the true elements of the contiguous mask (n elements), in order, written to
// `out` when it is not null; returns their count.
struct MaskPositions {
  const bool* mask;
  int64_t n;
  int64_t* out;
};
using MaskPositionsFn = int64_t(const MaskPositions&);

// Every table of this header, as X(function type, name): for the declarations below and for a
// backend that defines tables in bulk (kernel_tables.h).
#define ATTN_INDEX_KERNELS(X)        \
  X(GatherScatterFn, gather_scatter) \
  X(SortRowsFn, sort_rows)           \
  X(SortRowsFn, topk_rows)           \
  X(IndexMoveFn, index_move)         \
  X(MaskPositionsFn, mask_positions)

ATTN_INDEX_KERNELS(ATTN_BACKEND_KERNELS)

}  // namespace attn::backend

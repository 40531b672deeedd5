// The indexing kernels on the CPU (src/backend/index_kernels.h): gather and the scatter family,
// the element moves of advanced indexing on 1-D tensors, a mask's true positions; every dtype.
#include <attn/half.h>

#include <array>
#include <cstring>
#include <type_traits>
#include <vector>

#include "../index_kernels.h"
#include "strided.h"
#include "threads.h"

namespace attn::kernels {
namespace {

using backend::GatherScatterOp;
using backend::IndexMoveOp;

// d += s as scatter_add adds: bool ||, the 2-byte floats in float32 rounded each time (torch).
template <typename T>
void accumulate(T& d, const T& s) {
  if constexpr (std::is_same_v<T, bool>)
    d = d || s;
  else if constexpr (std::is_same_v<T, BFloat16> || std::is_same_v<T, Half>)
    d = T(float(d) + float(s));
  else
    d = T(d + s);
}

template <typename T>
std::optional<int64_t> gather_scatter(const backend::GatherScatter& a) {
  const Shape& shape = *a.shape;
  const Shape &ist = *a.index_strides, &sst = *a.self_strides, &ost = *a.other_strides;
  const int64_t rank = int64_t(shape.size());
  for (int64_t i = 0; i < rank; ++i)
    if (shape[i] == 0) return std::nullopt;
  T* self = static_cast<T*>(a.self);
  T* other = static_cast<T*>(a.other);
  const int64_t d = a.dim;
  std::vector<int64_t> coord(rank, 0);
  while (true) {
    int64_t io = a.index_offset, oo = a.other_offset, so = a.self_offset;
    for (int64_t i = 0; i < rank; ++i) {
      io += coord[i] * ist[i];
      oo += coord[i] * ost[i];
      if (i != d) so += coord[i] * sst[i];
    }
    const int64_t k = a.index[io];
    if (k < 0 || k >= a.limit) return k;
    so += k * sst[d];
    switch (a.op) {
      case GatherScatterOp::Gather: other[oo] = self[so]; break;
      case GatherScatterOp::Scatter: self[so] = other[oo]; break;
      case GatherScatterOp::ScatterAdd: accumulate(self[so], other[oo]); break;
    }
    int64_t i = rank - 1;
    for (; i >= 0; --i) {
      if (++coord[i] < shape[i]) break;
      coord[i] = 0;
    }
    if (i < 0) return std::nullopt;
  }
}

// One slice's part of index_move: n elements at inner strides.
template <typename T>
inline void move_part(IndexMoveOp op, T* d, const T* s, int64_t n, int64_t dstep, int64_t sstep) {
  if (dstep == 1 && sstep == 1) {
    if (op == IndexMoveOp::Add) {
      for (int64_t j = 0; j < n; ++j) accumulate(d[j], s[j]);
    } else {
      std::memcpy(static_cast<void*>(d), static_cast<const void*>(s), std::size_t(n) * sizeof(T));
    }
    return;
  }
  if (op == IndexMoveOp::Add) {
    for (int64_t j = 0; j < n; ++j) accumulate(d[j * dstep], s[j * sstep]);
  } else {
    for (int64_t j = 0; j < n; ++j) d[j * dstep] = s[j * sstep];
  }
}

template <typename T>
void index_move(const backend::IndexMove& a) {
  T* pd = static_cast<T*>(a.dst);
  const T* ps = static_cast<const T*>(a.src);
  const int64_t sd = a.dst_stride, ss = a.src_stride;
  const auto at = [&](int64_t i) { return a.index[i] < 0 ? a.index[i] + a.size : a.index[i]; };
  if (a.slice_shape == nullptr || a.slice_shape->empty()) {
    for (int64_t i = 0; i < a.n; ++i) {
      const int64_t k = at(i);
      switch (a.op) {
        case IndexMoveOp::Take: pd[i * sd] = ps[k * ss]; break;
        case IndexMoveOp::Put: pd[k * sd] = ps[i * ss]; break;
        case IndexMoveOp::Add: accumulate(pd[k * sd], ps[i * ss]); break;
      }
    }
    return;
  }
  int64_t m = 1;
  for (int64_t e : *a.slice_shape) m *= e;
  const bool take = a.op == IndexMoveOp::Take;  // i indexes dst, else src
  // The threads share the slices' elements (each goes through every index in order for its own
  // elements): no two write one element, and repeated indices keep their order.
  parallel_strided_rows<2>(
      *a.slice_shape, {a.dst_slice_strides, a.src_slice_strides}, {0, 0}, threads_for(a.n * m),
      [&](const std::array<int64_t, 2>& off, int64_t len, const std::array<int64_t, 2>& in) {
        for (int64_t i = 0; i < a.n; ++i) {
          const int64_t k = at(i);
          move_part(a.op, pd + (take ? i : k) * sd + off[0], ps + (take ? k : i) * ss + off[1], len,
                    in[0], in[1]);
        }
      });
}

int64_t mask_positions(const backend::MaskPositions& a) {
  int64_t count = 0;
  for (int64_t i = 0; i < a.n; ++i)
    if (a.mask[i]) {
      if (a.out) a.out[count] = i;
      ++count;
    }
  return count;
}

}  // namespace
}  // namespace attn::kernels

namespace attn::backend::cpu {
const Kernels<GatherScatterFn> gather_scatter = {
    kernels::gather_scatter<float>, kernels::gather_scatter<int64_t>, kernels::gather_scatter<bool>,
    kernels::gather_scatter<BFloat16>, kernels::gather_scatter<Half>};
const Kernels<IndexMoveFn> index_move = {kernels::index_move<float>, kernels::index_move<int64_t>,
                                         kernels::index_move<bool>, kernels::index_move<BFloat16>,
                                         kernels::index_move<Half>};
const Kernels<MaskPositionsFn> mask_positions = {nullptr, nullptr, kernels::mask_positions};
}  // namespace attn::backend::cpu

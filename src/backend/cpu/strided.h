// Iterating over the elements of strided operands: the loops under every element-wise kernel whose
// operands are views (broadcast, transposed, sliced), and the copy between two layouts.
#pragma once

#include <attn/common.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "threads.h"

namespace attn::kernels {

// The iteration space of N strided operands, simplified: dims of size 1 dropped, and neighbours
// merged where every operand steps through the pair as through one dim (stride[d] == stride[d + 1]
// * shape[d + 1]). The same elements in the same row-major order; no dims: one element.
template <std::size_t N>
struct Walk {
  Shape shape;
  std::array<Shape, N> strides;
  bool empty = false;  // a dim of size 0: no elements

  // The offsets of row r's first element (rows as in rows(), in row-major order).
  std::array<int64_t, N> row_offsets(int64_t r) const {
    std::array<int64_t, N> off{};
    for (int64_t d = int64_t(shape.size()) - 2; d >= 0; --d) {
      const int64_t i = r % shape[d];
      r /= shape[d];
      for (std::size_t k = 0; k < N; ++k) off[k] += i * strides[k][d];
    }
    return off;
  }
  // The elements of every dim but the last (1 when there are fewer than two dims).
  int64_t rows() const {
    int64_t r = 1;
    for (std::size_t d = 0; d + 1 < shape.size(); ++d) r *= shape[d];
    return r;
  }
};

template <std::size_t N>
Walk<N> coalesce(const Shape& shape, const std::array<const Shape*, N>& strides) {
  Walk<N> w;
  for (int64_t s : shape)
    if (s == 0) w.empty = true;
  if (w.empty) return w;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    bool merge = !w.shape.empty();
    for (std::size_t k = 0; k < N && merge; ++k)
      merge = w.strides[k].back() == (*strides[k])[d] * shape[d];
    if (merge) {
      w.shape.back() *= shape[d];
      for (std::size_t k = 0; k < N; ++k) w.strides[k].back() = (*strides[k])[d];
      continue;
    }
    w.shape.push_back(shape[d]);
    for (std::size_t k = 0; k < N; ++k) w.strides[k].push_back((*strides[k])[d]);
  }
  return w;
}

// The strides of a contiguous tensor of `shape` (row-major).
inline Shape row_major_strides(const Shape& shape) {
  Shape s(shape.size());
  int64_t step = 1;
  for (std::size_t d = shape.size(); d-- > 0;) {
    s[d] = step;
    step *= shape[d];
  }
  return s;
}

// Calls row(offsets, n, inner) for rows [r0, r1) of w (w.rows() of them, in row-major order; w not
// empty and with at least one dim): offsets of the row's first element from `base`, the row's
// length and the operands' strides along it.
template <std::size_t N, typename F>
void walk_rows(const Walk<N>& w, std::array<int64_t, N> base, int64_t r0, int64_t r1, F&& row) {
  const int64_t nd = int64_t(w.shape.size());
  std::array<int64_t, N> inner;
  for (std::size_t k = 0; k < N; ++k) inner[k] = w.strides[k][nd - 1];
  std::vector<int64_t> idx(std::size_t(std::max<int64_t>(nd - 1, 0)), 0);
  for (int64_t d = nd - 2, r = r0; d >= 0; --d) {  // row r0's index and offsets
    idx[d] = r % w.shape[d];
    r /= w.shape[d];
    for (std::size_t k = 0; k < N; ++k) base[k] += idx[d] * w.strides[k][d];
  }
  for (int64_t r = r0; r < r1; ++r) {
    row(base, w.shape[nd - 1], inner);
    for (int64_t d = nd - 2; d >= 0; --d) {
      for (std::size_t k = 0; k < N; ++k) base[k] += w.strides[k][d];
      if (++idx[d] < w.shape[d]) break;
      for (std::size_t k = 0; k < N; ++k) base[k] -= w.strides[k][d] * w.shape[d];
      idx[d] = 0;
    }
  }
}

// Calls f(offsets) for every element of `shape` in row-major order, where offsets[k] is the
// element offset of operand k given its strides (broadcast dims have stride 0).
template <std::size_t N, typename F>
void strided_loop(const Shape& shape, const std::array<const Shape*, N>& strides,
                  std::array<int64_t, N> base, F&& f) {
  const Walk<N> w = coalesce<N>(shape, strides);
  if (w.empty) return;
  if (w.shape.empty()) {
    f(base);
    return;
  }
  walk_rows(w, base, 0, w.rows(),
            [&](std::array<int64_t, N> off, int64_t n, const std::array<int64_t, N>& inner) {
              for (int64_t i = 0; i < n; ++i) {
                f(off);
                for (std::size_t k = 0; k < N; ++k) off[k] += inner[k];
              }
            });
}

// The rows of `shape`'s iteration space (its dims simplified as by coalesce) shared among `nt`
// threads: row(offsets, n, inner) for whole rows of the merged dims, or, with fewer rows than
// threads, for each row cut in nt parts (offsets of the part's first element from `base`, its
// length n and the operands' strides along it). For element-wise work where every element is
// written once (no destination repeats one): the results do not depend on nt.
template <std::size_t N, typename F>
void parallel_strided_rows(const Shape& shape, const std::array<const Shape*, N>& strides,
                           std::array<int64_t, N> base, int nt, F&& row) {
  const Walk<N> w = coalesce<N>(shape, strides);
  if (w.empty) return;
  if (w.shape.empty()) {
    row(base, int64_t(1), std::array<int64_t, N>{});
    return;
  }
  const int64_t rows = w.rows(), cols = w.shape.back();
  if (nt <= 1 || rows >= nt) {
    parallel_ranges(rows, nt, [&](int64_t r0, int64_t r1) { walk_rows(w, base, r0, r1, row); });
    return;
  }
  std::array<int64_t, N> inner;
  for (std::size_t k = 0; k < N; ++k) inner[k] = w.strides[k].back();
  parallel_ranges(rows * nt, nt, [&](int64_t q0, int64_t q1) {
    for (int64_t q = q0; q < q1; ++q) {
      const std::pair<int64_t, int64_t> part = thread_share(cols, int(q % nt), nt);
      std::array<int64_t, N> off = w.row_offsets(q / nt);
      for (std::size_t k = 0; k < N; ++k) off[k] += base[k] + part.first * inner[k];
      row(off, part.second - part.first, inner);
    }
  });
}

// strided_loop with the elements shared among `nt` threads as by parallel_strided_rows.
template <std::size_t N, typename F>
void parallel_strided_loop(const Shape& shape, const std::array<const Shape*, N>& strides,
                           std::array<int64_t, N> base, int nt, F&& f) {
  parallel_strided_rows<N>(
      shape, strides, base, nt,
      [&](std::array<int64_t, N> off, int64_t n, const std::array<int64_t, N>& inner) {
        for (int64_t i = 0; i < n; ++i) {
          f(off);
          for (std::size_t k = 0; k < N; ++k) off[k] += inner[k];
        }
      });
}

// dst = C::one(src) element by element over `shape`, both strided from the given pointers, shared
// among `nt` threads (a destination that repeats an element, with a stride of 0, is written in
// row-major order on one thread, so the last element written is torch's). C, the conversion:
//   To one(From)                                  one element
//   void run(To* d, const From* s, int64_t n)     n elements at unit strides (a vectorised loop)
//   void tile(const From* s, int64_t lds, To* d, int64_t ldd, int64_t ni, int64_t nj)
//                                                 d[j * ldd + i] = one(s[i * lds + j]) for i < ni,
//                                                 j < nj (a transpose, in cache-sized tiles)
// Where src steps by 1 along another dim than dst's last (a transpose made contiguous), the two
// dims are cut in blocks of kBlock x kBlock, each transposed by C::tile, in the order that reads
// src along its rows (kBlock rows at a time: few pages in flight).
template <typename C, typename To, typename From>
void copy_strided(const Shape& shape, To* dst, const Shape& dst_strides, const From* src,
                  const Shape& src_strides, int nt) {
  Walk<2> w = coalesce<2>(shape, {&dst_strides, &src_strides});
  if (w.empty) return;
  if (w.shape.empty()) {
    *dst = C::one(*src);
    return;
  }
  Shape& ds = w.strides[0];
  Shape& ss = w.strides[1];
  const int64_t nd = int64_t(w.shape.size());
  const auto row = [&](std::array<int64_t, 2> off, int64_t n, const std::array<int64_t, 2>& inner) {
    To* d = dst + off[0];
    const From* s = src + off[1];
    if (inner[0] == 1 && inner[1] == 1) {
      C::run(d, s, n);
    } else if (inner[0] == 1 && inner[1] == 0) {  // a broadcast value (fill_, expand)
      std::fill_n(d, n, C::one(*s));
    } else {
      for (int64_t i = 0; i < n; ++i) d[i * inner[0]] = C::one(s[i * inner[1]]);
    }
  };
  if (std::find(ds.begin(), ds.end(), 0) != ds.end()) {
    walk_rows(w, {0, 0}, 0, w.rows(), row);
    return;
  }
  constexpr int64_t kBlock = 64;
  int64_t unit = -1;  // src's dim of stride 1, if dst's last is not it
  if (nd >= 2 && ds[nd - 1] == 1 && ss[nd - 1] != 1 && w.shape[nd - 1] >= kBlock)
    for (int64_t d = 0; d + 1 < nd; ++d)
      if (ss[d] == 1 && w.shape[d] >= kBlock) unit = d;
  if (unit >= 0) {
    // Walk dims (the rest..., unit, last); items: blocks of (unit, last) at one index of the rest.
    for (Shape* v : {&w.shape, &ds, &ss})
      std::rotate(v->begin() + unit, v->begin() + unit + 1, v->end() - 1);
    const int64_t nj = w.shape[nd - 2], ni = w.shape[nd - 1], dj = ds[nd - 2], si = ss[nd - 1];
    const int64_t bands = (nj + kBlock - 1) / kBlock, blocks = (ni + kBlock - 1) / kBlock;
    Walk<2> rest;  // one row per element of the rest
    for (int64_t d = 0; d + 2 < nd; ++d) {
      rest.shape.push_back(w.shape[d]);
      rest.strides[0].push_back(ds[d]);
      rest.strides[1].push_back(ss[d]);
    }
    rest.shape.push_back(1);
    rest.strides[0].push_back(0);
    rest.strides[1].push_back(0);
    const int64_t items = rest.rows() * blocks * bands, elems = rest.rows() * ni * nj;
    parallel_ranges(items, elems >= kParallelElems ? nt : 1, [&](int64_t a, int64_t b) {
      for (int64_t item = a; item < b; ++item) {
        const int64_t j0 = item % bands * kBlock, j1 = std::min(nj, j0 + kBlock);
        const int64_t i0 = item / bands % blocks * kBlock, i1 = std::min(ni, i0 + kBlock);
        const std::array<int64_t, 2> off = rest.row_offsets(item / bands / blocks);
        C::tile(src + off[1] + j0 + i0 * si, si, dst + off[0] + j0 * dj + i0, dj, i1 - i0, j1 - j0);
      }
    });
    return;
  }
  // Rows, or when there are fewer rows than threads, parts of rows.
  const int64_t rows = w.rows(), n = w.shape[nd - 1];
  const int threads = rows * n >= kParallelElems ? nt : 1;
  const int64_t parts = rows >= threads ? 1 : threads;
  parallel_ranges(rows * parts, threads, [&](int64_t a, int64_t b) {
    if (parts == 1) {
      walk_rows(w, {0, 0}, a, b, row);
      return;
    }
    for (int64_t item = a; item < b; ++item) {
      // (not a structured binding: clang 14 cannot capture one in the lambda below)
      const std::pair<int64_t, int64_t> part = thread_share(n, int(item % parts), int(parts));
      const int64_t i0 = part.first, i1 = part.second;
      walk_rows(w, {0, 0}, item / parts, item / parts + 1,
                [&](std::array<int64_t, 2> off, int64_t, const std::array<int64_t, 2>& inner) {
                  off[0] += i0 * inner[0];
                  off[1] += i0 * inner[1];
                  row(off, i1 - i0, inner);
                });
    }
  });
}

}  // namespace attn::kernels

// Shape and stride arithmetic shared by every op: dims wrapped and checked (wrap_dim), the strides
// of a contiguous tensor, element counts that must not overflow, strides for broadcasting.
#include <algorithm>

#include "internal.h"

namespace attn::detail {

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* fn) {
  int64_t n = std::max<int64_t>(ndim, 1);
  if (dim < -n || dim >= n)
    throw IndexError(msg(fn, "dimension out of range (expected to be in range of [", -n, ", ",
                         n - 1, "], but got ", dim, ")"));
  return dim < 0 ? dim + n : dim;
}

Shape contiguous_strides(const Shape& shape) {
  Shape st(shape.size());
  int64_t acc = 1;
  for (int64_t i = int64_t(shape.size()) - 1; i >= 0; --i) {
    st[i] = acc;
    // Even an empty tensor ((0, 10^18, 10^18)) needs strides that fit in int64.
    if (i > 0 && __builtin_mul_overflow(acc, std::max<int64_t>(shape[i], 1), &acc))
      throw Error("[shape] the strides of " + shape_str(shape) + " overflow int64");
  }
  return st;
}

int64_t shape_numel(const Shape& shape) {
  int64_t n = 1;
  for (auto s : shape)
    if (__builtin_mul_overflow(n, s, &n))
      throw Error("[shape] the number of elements of " + shape_str(shape) + " overflows int64");
  return n;
}

Shape broadcast_strides(const Tensor& t, const Shape& shape) {
  Shape st(shape.size(), 0);
  int64_t off = int64_t(shape.size()) - t.dim();
  for (int64_t i = 0; i < t.dim(); ++i)
    st[off + i] = (t.shape()[i] == 1 && shape[off + i] != 1) ? 0 : t.strides()[i];
  return st;
}

}  // namespace attn::detail

// tril and triu: a copy with the elements above (tril) or below (triu) a diagonal of the last two
// dims zeroed, and their gradient, which keeps the same triangle.
#include <attn/autograd.h>
#include <attn/ops.h>
#include <attn/tensor.h>

#include <algorithm>

#include "internal.h"

namespace attn {

using detail::fail;

namespace {
Tensor triangle(const Tensor& t, int64_t diagonal, bool lower, const char* fn) {
  if (t.dim() < 2)
    fail(fn, "input tensor must have at least 2 dimensions, got ", shape_str(t.shape()));
  const char* node = lower ? "TrilBackward0" : "TriuBackward0";
  // The gradient keeps the same triangle.
  auto backward = [diagonal, lower](const Node&, const Tensor& g) {
    return std::vector<Tensor>{lower ? g.tril(diagonal) : g.triu(diagonal)};
  };
  Tensor out;
  {
    NoGradGuard no_grad;
    out = t.clone();
    const int64_t R = t.size(-2), C = t.size(-1);
    // An empty tensor has nothing to zero ((-1, R, C) would be ambiguous).
    Tensor flat = out.numel() == 0 ? out : out.reshape({-1, R, C});
    Tensor zero = detail::scalar_tensor(0, t.dtype());
    for (int64_t i = 0; i < R && out.numel() > 0; ++i) {
      // lower keeps j <= i + diagonal; upper keeps j >= i + diagonal.
      int64_t lo = lower ? i + diagonal + 1 : 0;
      int64_t hi = lower ? C : i + diagonal;
      lo = std::clamp<int64_t>(lo, 0, C);
      hi = std::clamp<int64_t>(hi, 0, C);
      if (lo < hi) flat.select(1, i).slice(1, lo, hi).copy_(zero);
    }
  }
  return detail::record(out, node, {&t}, backward);
}
}  // namespace

Tensor tril(const Tensor& t, int64_t diagonal) { return triangle(t, diagonal, true, "tril"); }
Tensor triu(const Tensor& t, int64_t diagonal) { return triangle(t, diagonal, false, "triu"); }
Tensor Tensor::tril(int64_t diagonal) const { return attn::tril(*this, diagonal); }
Tensor Tensor::triu(int64_t diagonal) const { return attn::triu(*this, diagonal); }

}  // namespace attn

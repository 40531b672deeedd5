// Free functions for the ops small PyTorch programs use beyond the basics of attn/ops.h: sampling
// (multinomial), sorting and selection (topk, sort, argsort, argmax, argmin), scans (cumsum,
// cumprod), clamping, gather / scatter and splitting. Each is the Tensor method of the same name
// (attn/tensor.h), validates its inputs and throws attn::Error (attn::IndexError for indices)
// naming itself and the offending shapes or values.
#pragma once

#include <attn/random.h>
#include <attn/tensor.h>

#include <optional>
#include <tuple>
#include <vector>

namespace attn {

// ---- sampling (bit for bit torch 1.13's CPU stream for the same generator state) ---------------
// Tensor.exponential_(lambd): -log(1 - u) / lambd per element, u a 53-bit uniform double.
Tensor& exponential_(Tensor& t, double lambd = 1.0, Generator* gen = nullptr);
// torch.multinomial: without replacement argmax / topk of probs / Exp(1) noise;
// with replacement torch's inverse-CDF binary search. probs is 1-D or 2-D float32, rows need not
// sum to one but must be finite, non-negative and not all zero.
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement = false,
                   Generator* gen = nullptr);

// ---- sorting and selection ---------------------------------------------------------------------
std::tuple<Tensor, Tensor> topk(const Tensor& t, int64_t k, int64_t dim = -1, bool largest = true,
                                bool sorted = true);
std::tuple<Tensor, Tensor> sort(const Tensor& t, int64_t dim = -1, bool descending = false,
                                bool stable = false);
Tensor argsort(const Tensor& t, int64_t dim = -1, bool descending = false, bool stable = false);
Tensor argmax(const Tensor& t);  // index into the flattened tensor
Tensor argmax(const Tensor& t, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& t);
Tensor argmin(const Tensor& t, int64_t dim, bool keepdim = false);

// ---- one-dim reductions, as torch.sum(t, 1, keepdim=True) ---------------------------------------
template <std::integral I>
requires(!std::same_as<I, bool>) Tensor sum(const Tensor& t, I dim, bool keepdim = false) {
  return t.sum(dim, keepdim);
}
template <std::integral I>
requires(!std::same_as<I, bool>) Tensor mean(const Tensor& t, I dim, bool keepdim = false) {
  return t.mean(dim, keepdim);
}

// ---- scans and clamping ------------------------------------------------------------------------
Tensor cumsum(const Tensor& t, int64_t dim);
Tensor cumprod(const Tensor& t, int64_t dim);
Tensor clamp(const Tensor& t, std::optional<Scalar> min, std::optional<Scalar> max = std::nullopt);
Tensor clamp(const Tensor& t, const Tensor& min, const Tensor& max = Tensor());
inline Tensor clip(const Tensor& t, std::optional<Scalar> min,
                   std::optional<Scalar> max = std::nullopt) {
  return t.clamp(min, max);
}

// ---- gather / scatter --------------------------------------------------------------------------
// out[i][j][k] = t[i][index[i][j][k]][k] for dim 1 (and so on); index has t's number of dims.
Tensor gather(const Tensor& t, int64_t dim, const Tensor& index);
Tensor scatter(const Tensor& t, int64_t dim, const Tensor& index, const Tensor& src);
Tensor scatter(const Tensor& t, int64_t dim, const Tensor& index, Scalar value);
Tensor scatter_add(const Tensor& t, int64_t dim, const Tensor& index, const Tensor& src);

// ---- splitting (views) -------------------------------------------------------------------------
std::vector<Tensor> split(const Tensor& t, int64_t split_size, int64_t dim = 0);
std::vector<Tensor> split(const Tensor& t, const Shape& sizes, int64_t dim = 0);
std::vector<Tensor> chunk(const Tensor& t, int64_t chunks, int64_t dim = 0);
std::vector<Tensor> unbind(const Tensor& t, int64_t dim = 0);

// ---- small math the torch namespace has as functions
// ---------------------------------------------
Tensor rsqrt(const Tensor& t);
Tensor sigmoid(const Tensor& t);
Tensor relu(const Tensor& t);
Tensor neg(const Tensor& t);
Tensor square(const Tensor& t);  // t.pow(2)
// torch.bmm: (b, n, m) x (b, m, p) -> (b, n, p), no broadcasting.
Tensor bmm(const Tensor& a, const Tensor& b);
// torch.index_select: the slices of t along dim at the positions of the 1-D int64 index.
Tensor index_select(const Tensor& t, int64_t dim, const Tensor& index);

}  // namespace attn

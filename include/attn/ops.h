// Free functions mirroring torch's namespace: creation, random tensors, math, reductions.
// Each validates its inputs and throws attn::Error naming itself and the offending shapes.
#pragma once

#include <attn/random.h>
#include <attn/tensor.h>

#include <optional>
#include <tuple>
#include <vector>

namespace attn {

// ---- creation
// ---------------------------------------------------------------------------------------
// torch.tensor: dtype inferred from the values (float32 if any float, else int64, bool if all bool)
// unless given.
Tensor tensor(const NestedList& data, std::optional<Dtype> dtype = std::nullopt,
              const Device& device = Device());
// A tensor that copies `values` into the given shape.
Tensor from_vector(const std::vector<float>& values, Shape shape);
// The creation functions take the device last ("cpu" by default); the *_like ones keep t's.
Tensor empty(Shape shape, Dtype dtype = Dtype::Float32, const Device& device = Device());
Tensor zeros(Shape shape, Dtype dtype = Dtype::Float32, const Device& device = Device());
Tensor ones(Shape shape, Dtype dtype = Dtype::Float32, const Device& device = Device());
Tensor full(Shape shape, Scalar value, std::optional<Dtype> dtype = std::nullopt,
            const Device& device = Device());
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor empty_like(const Tensor& t);
Tensor full_like(const Tensor& t, Scalar value);
// torch.arange: int64 when every argument is an integer, else float32.
Tensor arange(Scalar end);
Tensor arange(Scalar start, Scalar end, Scalar step = 1);
// Lower / upper triangle of the last two dims; `diagonal` shifts the boundary as in torch.
Tensor tril(const Tensor& t, int64_t diagonal = 0);
Tensor triu(const Tensor& t, int64_t diagonal = 0);
// Wraps memory owned elsewhere (NumPy) without copying. `owner` keeps it alive.
Tensor from_blob(void* data, Shape shape, Shape strides, Dtype dtype, std::shared_ptr<void> owner);

// ---- random (bitwise identical to PyTorch's CPU generator for the same seed and call sequence)
// ------
Tensor rand(Shape shape, Generator* gen = nullptr);
Tensor randn(Shape shape, Generator* gen = nullptr);
Tensor randint(int64_t low, int64_t high, Shape shape, Generator* gen = nullptr);
Tensor randint(int64_t high, Shape shape, Generator* gen = nullptr);
// In-place fills, as torch.Tensor.uniform_ / normal_ (contiguous and strided tensors).
Tensor& uniform_(Tensor& t, double from = 0.0, double to = 1.0, Generator* gen = nullptr);
Tensor& normal_(Tensor& t, double mean = 0.0, double std = 1.0, Generator* gen = nullptr);
Tensor& bernoulli_(Tensor& t, double p, Generator* gen = nullptr);
// ---- randperm and random_ (torch 1.13's CPU stream; src/tensor/random_int.cpp)
// torch.randperm(n): a shuffle of 0..n-1 (int64, or float32 for n <= 2^24), one 32-bit draw per
// swap of a Fisher-Yates pass, as torch 1.13.
Tensor randperm(int64_t n, Generator* gen = nullptr, Dtype dtype = Dtype::Int64);
// Tensor.random_(): int64 in [0, 2^63 - 1] (one 64-bit draw each), float32 in [0, 2^24], bool.
Tensor& random_(Tensor& t, Generator* gen = nullptr);
// Tensor.random_(from, to): integers in [from, to); to = nullopt means the dtype's largest value
// (+1). Values are draw % (to - from) + from with a 64-bit draw when the range is >= 2^32.
Tensor& random_(Tensor& t, int64_t from, std::optional<int64_t> to, Generator* gen = nullptr);
Tensor erfinv(const Tensor& t);

// ---- math
// ---------------------------------------------------------------------------------------------
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
// torch.div(a, b, rounding_mode=): "floor", "trunc" or none (true division); see Tensor::div.
Tensor div(const Tensor& a, const Tensor& b, std::optional<std::string_view> rounding_mode);
Tensor div(const Tensor& a, Scalar b, std::optional<std::string_view> rounding_mode);
Tensor div(Scalar a, const Tensor& b, std::optional<std::string_view> rounding_mode);
// torch.floor_divide, torch.remainder, torch.fmod (see Tensor::floor_divide).
Tensor floor_divide(const Tensor& a, const Tensor& b);
Tensor floor_divide(const Tensor& a, Scalar b);
Tensor floor_divide(Scalar a, const Tensor& b);
Tensor remainder(const Tensor& a, const Tensor& b);
Tensor remainder(const Tensor& a, Scalar b);
Tensor remainder(Scalar a, const Tensor& b);  // no derivative, as torch's
Tensor fmod(const Tensor& a, const Tensor& b);
Tensor fmod(const Tensor& a, Scalar b);
Tensor pow(const Tensor& a, Scalar exponent);
Tensor pow(Scalar base, const Tensor& exponent);
Tensor exp(const Tensor& t);
Tensor log(const Tensor& t);
Tensor sqrt(const Tensor& t);
Tensor abs(const Tensor& t);
Tensor tanh(const Tensor& t);
Tensor cos(const Tensor& t);
Tensor sin(const Tensor& t);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
// where(cond, a, b): a where cond is true, else b (all broadcast together).
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor masked_fill(const Tensor& t, const Tensor& mask, Scalar value);
// The product of complex64 numbers held as float32 (real, imaginary) pairs in a last dim of 2 (the
// layout of torch.view_as_real): a * b, or a * conj(b) with conj_b, the pairs broadcast as
// complex numbers; each part rounded as torch's complex multiply. Differentiable in both, with
// torch's complex gradients (g * conj(b) for a). Python's complex64 tensors multiply through it.
Tensor complex_mul(const Tensor& a, const Tensor& b, bool conj_b = false);
Tensor sum(const Tensor& t);
Tensor sum(const Tensor& t, Shape dims, bool keepdim = false);
Tensor mean(const Tensor& t);
Tensor mean(const Tensor& t, Shape dims, bool keepdim = false);
// As Tensor::var: var(t) and var(t, false) reduce everything, var(t, 1) and var(t, {0, 2}) dims.
inline Tensor var(const Tensor& t) { return t.var(); }
template <std::same_as<bool> B>
Tensor var(const Tensor& t, B unbiased) {
  return t.var(unbiased);
}
template <std::integral I>
requires(!std::same_as<I, bool>) Tensor
    var(const Tensor& t, I dim, bool unbiased = true, bool keepdim = false) {
  return t.var(dim, unbiased, keepdim);
}
Tensor var(const Tensor& t, Shape dims, bool unbiased = true, bool keepdim = false);
Tensor softmax(const Tensor& t, int64_t dim);
Tensor log_softmax(const Tensor& t, int64_t dim);
// torch.matmul: 1-D and 2-D products and batched products with broadcast batch dims. float32 goes
// through BLAS, reading transposed and broadcast operands in place; int64 is exact integer
// arithmetic (wrapping on overflow, as torch). Bool is refused.
Tensor matmul(const Tensor& a, const Tensor& b);
Tensor dot(const Tensor& a, const Tensor& b);
// torch.outer (torch.ger): a (n) times b (m) into (n, m).
Tensor outer(const Tensor& a, const Tensor& b);
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);
// |a - b| <= atol + rtol * |b| elementwise (broadcast); NaNs are equal only with equal_nan.
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8,
              bool equal_nan = false);
bool equal(const Tensor& a, const Tensor& b);  // same shape and identical elements

// Shape both arguments broadcast to, or attn::Error naming `fn`.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* fn);

// Threads used by attn's kernels and by OpenBLAS (torch.set_num_threads).
void set_num_threads(int n);
int get_num_threads();

inline constexpr double inf = __builtin_inf();
inline constexpr double nan = __builtin_nan("");

// ---- sampling, sorting and selection, scans, clamping, gather / scatter, splitting
// ------------------ The ops small PyTorch programs use beyond the basics above; each is also the
// Tensor method of the same name (attn/tensor.h).
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
// torch.index_add: input with alpha times source's slices along dim added at the positions of the
// 1-D int64 index (each in [0, input.size(dim))), in index order (a repeated index adds each of
// its slices, as torch's CPU kernel); source has input's shape but index.numel() along dim and
// input's dtype. Differentiable in input and source. index_add_ adds into input in place.
Tensor index_add(const Tensor& input, int64_t dim, const Tensor& index, const Tensor& source,
                 Scalar alpha = 1);
Tensor& index_add_(Tensor& input, int64_t dim, const Tensor& index, const Tensor& source,
                   Scalar alpha = 1);
// torch.nonzero: the indices of t's non-zero (true; NaN counts) elements in row-major order, as a
// (count, t.dim()) int64 tensor (count rows of none for a 0-dim t).
Tensor nonzero(const Tensor& t);

}  // namespace attn

// Tensor.exponential_ and torch.multinomial, drawing from attn::Generator exactly as PyTorch 1.13's
// CPU kernels draw from its generator (built without MKL, as Debian's):
//
// * exponential_(lambd): one random64() per element in memory order, u = (r & (2^53 - 1)) * 2^-53,
//   value = float(-1 / lambd * log(1 - u)) computed in double (torch's serial CPU kernel).
// * multinomial without replacement: q = empty_like(p).exponential_(1), then argmax(p / q) (one
//   sample) or topk(p / q, n) (the "exponential trick", Gumbel-max in disguise).
// * multinomial with replacement (one sample too, in torch 1.13): per row, torch's float cumulative
// distribution
//   normalised by its sum, then per sample one 53-bit uniform double and a binary search.
// Kept apart from random.cpp (the generator and the fill kernels).
#include <attn/autograd.h>
#include <attn/ops.h>

#include <algorithm>
#include <cmath>
#include <mutex>

#include "../tensor/internal.h"

namespace attn {

using detail::fail;

namespace {

Generator& gen_or_default_(Generator* g) { return g ? *g : default_generator(); }

// u in [0, 1) from 53 bits of one 64-bit draw (torch's uniform_real_distribution<double>).
inline double uniform53(Generator& gen) {
  constexpr uint64_t kMask = (uint64_t{1} << 53) - 1;
  constexpr double kDiv = 1.0 / double(uint64_t{1} << 53);
  return double(gen.random64() & kMask) * kDiv;
}

void fill_exponential(float* data, int64_t n, double lambd, Generator& gen) {
  std::lock_guard<std::mutex> lock(gen.mutex());
  for (int64_t i = 0; i < n; ++i) {
    const double u = uniform53(gen);
    data[i] = float(-1.0 / lambd * std::log(1.0 - u));
  }
}

// An uninitialised float32 tensor shaped like t whose memory order keeps t's (dims by decreasing
// stride, as for p.t() or p[::2].t()): torch's empty_like, whose layout decides the order in which
// exponential_ draws.
Tensor like_layout(const Tensor& t) {
  const int64_t nd = t.dim();
  Shape perm(nd);
  for (int64_t d = 0; d < nd; ++d) perm[d] = d;
  std::stable_sort(perm.begin(), perm.end(),
                   [&](int64_t a, int64_t b) { return t.strides()[a] > t.strides()[b]; });
  if (t.is_contiguous())
    return detail::make_tensor("multinomial", t.shape(), Dtype::Float32, false);
  Shape sorted_shape(nd), inverse(nd);
  for (int64_t i = 0; i < nd; ++i) {
    sorted_shape[i] = t.shape()[perm[i]];
    inverse[perm[i]] = i;
  }
  return detail::make_tensor("multinomial", sorted_shape, Dtype::Float32, false).permute(inverse);
}

}  // namespace

Tensor& Tensor::exponential_(double lambd, Generator* gen) {
  if (!defined()) fail("exponential_", "undefined tensor argument");
  detail::check_not_reduced(*this, "exponential_");
  if (dtype() != Dtype::Float32)
    fail("exponential_", "expects a float32 tensor, got ", dtype_name(dtype()));
  if (!(lambd >= 0.0)) fail("exponential_", "expects lambda >= 0.0, but found lambda=", lambd);
  detail::check_inplace(*this, "exponential_");
  for (int64_t d = 0; d < this->dim(); ++d)
    if (shape()[d] > 1 && strides()[d] == 0)
      fail("exponential_", "more than one element of the written-to tensor ", shape_str(shape()),
           " refers to a single memory location; clone() it first");
  Generator& g = gen_or_default_(gen);
  if (is_contiguous()) {
    fill_exponential(data_ptr<float>(), numel(), lambd, g);
    detail::bump_version(*this);
  } else {
    // Drawn in memory order (dims by decreasing stride), as torch's iterator visits them.
    Shape perm(this->dim());
    for (int64_t d = 0; d < this->dim(); ++d) perm[d] = d;
    std::stable_sort(perm.begin(), perm.end(),
                     [&](int64_t a, int64_t b) { return strides()[a] > strides()[b]; });
    Tensor in_memory_order = permute(perm);
    Tensor tmp =
        detail::make_tensor("exponential_", in_memory_order.shape(), Dtype::Float32, false);
    fill_exponential(tmp.data_ptr<float>(), tmp.numel(), lambd, g);
    NoGradGuard no_grad;
    in_memory_order.copy_(tmp);
  }
  // Random values do not depend on the old ones: a zero gradient for them.
  detail::record_inplace(*this, "ExponentialBackward0", {this}, [](const Node&, const Tensor& gr) {
    return std::vector<Tensor>{zeros(gr.shape())};
  });
  return *this;
}

Tensor& exponential_(Tensor& t, double lambd, Generator* gen) { return t.exponential_(lambd, gen); }

Tensor Tensor::multinomial(int64_t n_sample, bool replacement, Generator* gen) const {
  const char* fn = "multinomial";
  if (!defined()) fail(fn, "undefined tensor argument");
  if (dim() < 1 || dim() > 2) fail(fn, "prob_dist must be 1 or 2 dim, got ", shape_str(shape()));
  detail::check_not_reduced(*this, fn);
  if (dtype() != Dtype::Float32)
    fail(fn, "only supports floating-point dtypes for input, got: ", dtype_name(dtype()));
  if (n_sample <= 0) fail(fn, "cannot sample n_sample <= 0 samples (got ", n_sample, ")");
  const int64_t n_categories = size(-1);
  if (!replacement && n_sample > n_categories)
    fail(fn, "cannot sample n_sample > prob_dist.size(-1) samples without replacement (", n_sample,
         " > ", n_categories, ")");
  if (n_categories > (int64_t{1} << 24))
    fail(fn, "number of categories cannot exceed 2^24, got ", n_categories);
  NoGradGuard no_grad;
  const Tensor p = contiguous();
  const int64_t n_dist = dim() == 2 ? size(0) : 1;
  Shape out_shape = dim() == 1 ? Shape{n_sample} : Shape{n_dist, n_sample};
  Generator& g = gen_or_default_(gen);

  if (!replacement) {
    const float* pp = p.data_ptr<float>();
    bool any_bad = false;
    for (int64_t i = 0; i < p.numel(); ++i)
      if (!(pp[i] >= 0.f && pp[i] < INFINITY)) any_bad = true;
    if (any_bad || p.numel() == 0)
      fail(fn, "probability tensor contains either `inf`, `nan` or element < 0");
    for (int64_t r = 0; r < n_dist; ++r) {
      bool all_zero = true;
      for (int64_t j = 0; j < n_categories; ++j) all_zero &= pp[r * n_categories + j] == 0.f;
      if (all_zero) fail(fn, "invalid multinomial distribution (sum of probabilities <= 0)");
    }
    Tensor q = like_layout(*this);
    q.exponential_(1.0, &g);
    q = p / q.contiguous();
    if (n_sample == 1) return q.argmax(-1, true);
    return std::get<1>(q.topk(n_sample, -1, true, true));
  }

  Tensor out = detail::make_tensor(fn, out_shape, Dtype::Int64, false);
  int64_t* po = out.data_ptr<int64_t>();
  const float* pp = p.data_ptr<float>();
  std::vector<float> cum(n_categories);
  std::lock_guard<std::mutex> lock(g.mutex());
  for (int64_t i = 0; i < n_dist; ++i) {
    const float* row = pp + i * n_categories;
    float sum = 0;
    for (int64_t j = 0; j < n_categories; ++j) {
      const float v = row[j];
      if (!(v >= 0))
        fail(fn, "invalid multinomial distribution (encountering probability entry < 0)");
      if (!std::isfinite(v))
        fail(fn,
             "invalid multinomial distribution (encountering probability entry = infinity or "
             "NaN)");
      sum += v;
      cum[j] = sum;
    }
    if (!(sum > 0)) fail(fn, "invalid multinomial distribution (sum of probabilities <= 0)");
    for (int64_t j = 0; j < n_categories; ++j) cum[j] /= sum;
    cum[n_categories - 1] = 1;
    for (int64_t s = 0; s < n_sample; ++s) {
      const double u = uniform53(g);
      int64_t left = 0, right = n_categories;
      while (right - left > 0) {
        const int64_t mid = left + (right - left) / 2;
        if (double(cum[mid]) < u)
          left = mid + 1;
        else
          right = mid;
      }
      po[i * n_sample + s] = left;
    }
  }
  return out;
}

Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement, Generator* gen) {
  return probs.multinomial(num_samples, replacement, gen);
}

}  // namespace attn

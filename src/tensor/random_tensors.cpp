// Random tensors from an attn::Generator (the default one when none is given): rand, randn,
// randint, and the in-place fills uniform_, normal_ and bernoulli_, drawn in torch 1.13's order
// by random.cpp's fill kernels.
#include <attn/autograd.h>
#include <attn/ops.h>
#include <attn/random.h>
#include <attn/tensor.h>

#include <algorithm>

#include "internal.h"
#include "local.h"

namespace attn {

using detail::check_shape;
using detail::fail;

namespace {
Generator& gen_or_default(Generator* g) { return g ? *g : default_generator(); }
}  // namespace

Tensor rand(Shape shape, Generator* gen) {
  check_shape(shape, "rand");
  Tensor out = detail::make_tensor("rand", shape, Dtype::Float32);
  fill_uniform(out.data_ptr<float>(), out.numel(), 0.0, 1.0, gen_or_default(gen));
  return out;
}

Tensor randn(Shape shape, Generator* gen) {
  check_shape(shape, "randn");
  Tensor out = detail::make_tensor("randn", shape, Dtype::Float32);
  fill_normal(out.data_ptr<float>(), out.numel(), 0.0, 1.0, gen_or_default(gen));
  return out;
}

Tensor randint(int64_t low, int64_t high, Shape shape, Generator* gen) {
  check_shape(shape, "randint");
  if (low >= high) fail("randint", "low ", low, " must be less than high ", high);
  Tensor out = detail::make_tensor("randint", shape, Dtype::Int64);
  fill_randint(out.data_ptr<int64_t>(), out.numel(), low, high, gen_or_default(gen));
  return out;
}
Tensor randint(int64_t high, Shape shape, Generator* gen) { return randint(0, high, shape, gen); }

namespace {
// Runs a contiguous fill on t directly, or on a contiguous temporary copied back.
template <typename F>
Tensor& fill_float(Tensor& t, const char* fn, F&& f) {
  detail::check_not_reduced(t, fn);
  if (t.dtype() != Dtype::Float32)
    fail(fn, "expects a float32 tensor, got ", dtype_name(t.dtype()));
  detail::check_inplace(t, fn);
  if (t.is_contiguous()) {
    f(t.data_ptr<float>(), t.numel(), true);
    detail::bump_version(t);
    // Random values do not depend on the old ones: a zero gradient for them.
    detail::record_inplace(t, "CopyBackwards", {&t}, [](const Node&, const Tensor& g) {
      return std::vector<Tensor>{zeros(g.shape())};
    });
    return t;
  }
  for (int64_t d = 0; d < t.dim(); ++d)
    if (t.shape()[d] > 1 && t.strides()[d] == 0)
      fail(fn, "more than one element of the written-to tensor ", shape_str(t.shape()),
           " with strides ", shape_str(t.strides()),
           " refers to a single memory location; clone() it first");
  // PyTorch draws the numbers in memory order: visit the dims by decreasing stride.
  Shape perm(t.dim());
  for (int64_t d = 0; d < t.dim(); ++d) perm[d] = d;
  std::stable_sort(perm.begin(), perm.end(),
                   [&](int64_t a, int64_t b) { return t.strides()[a] > t.strides()[b]; });
  Tensor in_memory_order = t.permute(perm);
  Tensor tmp = detail::make_tensor(in_memory_order.shape(), Dtype::Float32);
  f(tmp.data_ptr<float>(), tmp.numel(), false);
  in_memory_order.copy_(tmp);
  return t;
}
}  // namespace

Tensor& uniform_(Tensor& t, double from, double to, Generator* gen) {
  if (!(from <= to)) fail("uniform_", "expects from <= to, but got from=", from, " > to=", to);
  return fill_float(t, "uniform_", [&](float* p, int64_t n, bool) {
    fill_uniform(p, n, from, to, gen_or_default(gen));
  });
}

Tensor& normal_(Tensor& t, double mean, double std, Generator* gen) {
  if (!(std >= 0)) fail("normal_", "expects std >= 0.0, but found std ", std);
  return fill_float(t, "normal_", [&](float* p, int64_t n, bool contiguous) {
    if (contiguous)
      fill_normal(p, n, mean, std, gen_or_default(gen));
    else
      fill_normal_serial(p, n, mean, std, gen_or_default(gen));
  });
}

Tensor& bernoulli_(Tensor& t, double p, Generator* gen) {
  if (!(p >= 0 && p <= 1)) fail("bernoulli_", "expects 0 <= p <= 1, but got p=", p);
  return fill_float(t, "bernoulli_", [&](float* d, int64_t n, bool) {
    fill_bernoulli(d, n, p, gen_or_default(gen));
  });
}

}  // namespace attn

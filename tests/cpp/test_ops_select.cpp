// The C++ API of attn/ops.h: multinomial and exponential_ against values printed by torch 1.13
// (commands in the comments), sorting, scans, clamp, gather / scatter and splitting against naive
// loops written here, gradients against their formulas, and the errors.
#include <attn/attn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <vector>

using namespace attn;

namespace {

std::vector<int64_t> ints(const Tensor& t) {
  Tensor c = t.contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}
std::vector<float> floats(const Tensor& t) { return t.contiguous().to_float_vector(); }

Tensor randn_like_seeded(Shape s, uint64_t seed) {
  Generator g(seed);
  return randn(std::move(s), &g);
}

}  // namespace

// torch.manual_seed(0); torch.multinomial(p, 8, True) / (p, 3, False) / (p[0], 1) with
// p = torch.tensor([[0.1, 0.2, 0.3, 0.4], [1.0, 0.0, 2.0, 5.0]]).
TEST(OpsSelect, MultinomialMatchesTorchStream) {
  Tensor p = tensor({{0.1, 0.2, 0.3, 0.4}, {1.0, 0.0, 2.0, 5.0}});
  manual_seed(0);
  EXPECT_EQ(ints(multinomial(p, 8, true)),
            (std::vector<int64_t>{3, 3, 2, 3, 3, 3, 1, 2, 3, 2, 3, 2, 2, 3, 3, 3}));
  manual_seed(0);
  Tensor r = p.multinomial(3);
  EXPECT_EQ(r.shape(), (Shape{2, 3}));
  EXPECT_EQ(ints(r), (std::vector<int64_t>{2, 1, 3, 3, 2, 0}));
  manual_seed(0);
  Tensor one = multinomial(p[0], 1);
  EXPECT_EQ(one.shape(), (Shape{1}));
  EXPECT_EQ(ints(one), (std::vector<int64_t>{2}));
  // a generator of its own gives the same as the default one seeded alike
  Generator g(0);
  EXPECT_EQ(ints(multinomial(p, 3, false, &g)), (std::vector<int64_t>{2, 1, 3, 3, 2, 0}));
}

// torch.manual_seed(7); torch.empty(5).exponential_(2.0).view(torch.int32)
TEST(OpsSelect, ExponentialMatchesTorchStream) {
  manual_seed(7);
  Tensor e = empty({5});
  const uint64_t v0 = e.version();
  exponential_(e, 2.0);
  EXPECT_GT(e.version(), v0);
  const std::vector<uint32_t> want = {0x3e27c0f2, 0x3e23baa9, 0x3f7d9728, 0x3f08d8d2, 0x3fa3b3eb};
  std::vector<float> got = floats(e);
  for (std::size_t i = 0; i < want.size(); ++i) {
    uint32_t bits;
    std::memcpy(&bits, &got[i], 4);
    EXPECT_EQ(bits, want[i]) << i;
  }
  EXPECT_THROW(empty({2}).exponential_(-1.0), Error);
  EXPECT_THROW(empty({2}, Dtype::Int64).exponential_(), Error);
}

TEST(OpsSelect, MultinomialErrors) {
  for (bool rep : {false, true}) {
    EXPECT_THROW(multinomial(tensor({0.5, -0.1}), 1, rep), Error);
    EXPECT_THROW(multinomial(tensor({0.5, attn::inf}), 1, rep), Error);
    EXPECT_THROW(multinomial(tensor({0.5, attn::nan}), 1, rep), Error);
    EXPECT_THROW(multinomial(tensor({{1.0, 1.0}, {0.0, 0.0}}), 1, rep), Error);
    EXPECT_THROW(multinomial(ones({2, 2, 2}), 1, rep), Error);
    EXPECT_THROW(multinomial(ones({3}), 0, rep), Error);
    EXPECT_THROW(multinomial(tensor({1, 2}), 1, rep), Error);
  }
  EXPECT_THROW(multinomial(ones({3}), 4, false), Error);
  EXPECT_EQ(multinomial(ones({3}), 4, true).shape(), (Shape{4}));
  try {
    multinomial(ones({3}), 4, false);
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("[multinomial]", 0), 0u) << e.what();
  }
}

// sort against std::stable_sort of (value, index); stable ties keep their order.
TEST(OpsSelect, SortMatchesNaiveStableSort) {
  Tensor x =
      tensor({{3.0, 1.0, 2.0, 1.0, 3.0, attn::nan, 0.0}, {1.0, 1.0, 1.0, 0.0, 2.0, 2.0, -1.0}});
  for (bool desc : {false, true}) {
    auto [v, i] = x.sort(-1, desc, true);
    std::vector<float> xv = floats(x);
    for (int r = 0; r < 2; ++r) {
      std::vector<int64_t> want(7);
      std::iota(want.begin(), want.end(), 0);
      auto key = [&](int64_t j) { return xv[r * 7 + j]; };
      std::stable_sort(want.begin(), want.end(), [&](int64_t a, int64_t b) {
        float ka = key(a), kb = key(b);
        if (desc) return (std::isnan(ka) && !std::isnan(kb)) || ka > kb;
        return (!std::isnan(ka) && std::isnan(kb)) || ka < kb;
      });
      std::vector<int64_t> got = ints(i);
      EXPECT_EQ(std::vector<int64_t>(got.begin() + r * 7, got.begin() + r * 7 + 7), want);
    }
    EXPECT_EQ(ints(argsort(x, -1, desc, true)), ints(i));
  }
  auto [v0, i0] = sort(tensor({3, 1, 2}), 0);
  EXPECT_EQ(ints(v0), (std::vector<int64_t>{1, 2, 3}));
  EXPECT_EQ(ints(i0), (std::vector<int64_t>{1, 2, 0}));
}

TEST(OpsSelect, TopkValuesIndicesAndGradient) {
  Tensor x = tensor({{1.0, 5.0, 3.0, 4.0}, {2.0, 0.0, 7.0, 6.0}});
  auto [v, i] = topk(x, 2);
  EXPECT_EQ(floats(v), (std::vector<float>{5, 4, 7, 6}));
  EXPECT_EQ(ints(i), (std::vector<int64_t>{1, 3, 2, 3}));
  auto [vs, is] = x.topk(1, 0, false);
  EXPECT_EQ(floats(vs), (std::vector<float>{1, 0, 3, 4}));
  EXPECT_EQ(ints(is), (std::vector<int64_t>{0, 1, 0, 0}));
  EXPECT_THROW(x.topk(5), Error);
  Tensor w = x.clone().requires_grad_();
  std::get<0>(w.topk(2)).sum().backward();
  EXPECT_EQ(floats(w.grad()), (std::vector<float>{0, 1, 0, 1, 0, 0, 1, 1}));
  EXPECT_EQ(grad_fn(std::get<0>(w.topk(2)))->name, "TopkBackward0");
}

TEST(OpsSelect, ArgmaxArgminAndDimOverloads) {
  Tensor x = tensor({{1.0, 5.0, -3.0}, {2.0, -7.0, 6.0}});
  EXPECT_EQ(argmax(x).item<int64_t>(), 5);
  EXPECT_EQ(argmin(x).item<int64_t>(), 4);
  EXPECT_EQ(ints(argmin(x, 1)), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(x.argmin(0, true).shape(), (Shape{1, 3}));
  // sum / mean with one int dim, as torch's x.sum(1, keepdim=True)
  EXPECT_EQ(x.sum(1).shape(), (Shape{2}));
  EXPECT_EQ(x.sum(1, true).shape(), (Shape{2, 1}));
  EXPECT_EQ(floats(x.sum(-1)), floats(x.sum({-1})));
  EXPECT_EQ(floats(sum(x, 0, true)), floats(x.sum({0}, true)));
  EXPECT_EQ(floats(mean(x, 1)), (std::vector<float>{1.0f, 1.0f / 3.0f * 1.0f}));
  EXPECT_EQ(x.mean(0, true).shape(), (Shape{1, 3}));
  EXPECT_EQ(x.sum().shape(), Shape{});  // no-argument forms unchanged
}

// cumsum against a double-accumulated loop (torch's CPU acc type), its gradient the reverse sum.
TEST(OpsSelect, CumsumCumprod) {
  Tensor x = randn_like_seeded({3, 50}, 1);
  std::vector<float> xv = floats(x), got = floats(cumsum(x, 1));
  for (int r = 0; r < 3; ++r) {
    double acc = 0;
    for (int j = 0; j < 50; ++j) {
      acc += xv[r * 50 + j];
      EXPECT_EQ(got[r * 50 + j], float(acc));
    }
  }
  EXPECT_EQ(ints(cumsum(tensor({true, false, true}), 0)), (std::vector<int64_t>{1, 1, 2}));
  EXPECT_EQ(ints(cumprod(tensor({2, 3, -1}), 0)), (std::vector<int64_t>{2, 6, -6}));
  Tensor w = tensor({1.0, 2.0, 3.0}).requires_grad_();
  cumsum(w, 0).sum().backward();
  EXPECT_EQ(floats(w.grad()), (std::vector<float>{3, 2, 1}));
  Tensor p = tensor({2.0, 0.0, 3.0}).requires_grad_();
  cumprod(p, 0).sum().backward();  // y = (2, 0, 0): dy/dp0 = 1, dy/dp1 = 2 + 2*3, dy/dp2 = 0
  EXPECT_EQ(floats(p.grad()), (std::vector<float>{1, 8, 0}));
}

TEST(OpsSelect, ClampScalarsTensorsAndGradients) {
  Tensor x = tensor({-2.0, -0.5, 0.0, 0.5, 2.0, attn::nan});
  std::vector<float> c = floats(clamp(x, -1.0, 1.0));
  EXPECT_EQ(std::vector<float>(c.begin(), c.end() - 1), (std::vector<float>{-1, -0.5, 0, 0.5, 1}));
  EXPECT_TRUE(std::isnan(c.back()));
  EXPECT_EQ(floats(x.clamp(std::nullopt, 0.0))[4], 0.0f);
  EXPECT_EQ(floats(clip(x, 0.0))[0], 0.0f);
  EXPECT_EQ(clamp(tensor({1, 5}), 2, 3).dtype(), Dtype::Int64);
  EXPECT_EQ(clamp(tensor({1, 5}), 2.5).dtype(), Dtype::Float32);
  EXPECT_THROW(x.clamp(std::nullopt, std::nullopt), Error);
  Tensor lo = tensor({0.0, 1.0}), hi = tensor({{0.5}, {3.0}});
  EXPECT_EQ(floats(clamp(tensor({-1.0, 2.0}), lo, hi)), (std::vector<float>{0, 0.5, 0, 2}));
  Tensor w = tensor({-2.0, 0.5, 2.0}).requires_grad_();
  w.clamp(-1.0, 1.0).sum().backward();
  EXPECT_EQ(floats(w.grad()), (std::vector<float>{0, 1, 0}));
  Tensor y = tensor({-2.0, 0.5, 2.0});
  const uint64_t v0 = y.version();
  y.clamp_(-1.0, 1.0);
  EXPECT_GT(y.version(), v0);
  EXPECT_EQ(floats(y), (std::vector<float>{-1, 0.5, 1}));
}

// gather / scatter / scatter_add against loops over the index.
TEST(OpsSelect, GatherScatter) {
  Tensor x = arange(12.0).reshape({3, 4});
  Tensor idx = tensor({{0, 3}, {2, 2}, {1, 0}});
  EXPECT_EQ(floats(gather(x, 1, idx)), (std::vector<float>{0, 3, 6, 6, 9, 8}));
  EXPECT_EQ(floats(x.gather(0, tensor({{2, 0, 1, 1}}))), (std::vector<float>{8, 1, 6, 7}));
  Tensor src = tensor({{10.0, 20.0}, {30.0, 40.0}, {50.0, 60.0}});
  Tensor s = scatter(zeros({3, 4}), 1, idx, src);
  EXPECT_EQ(floats(s), (std::vector<float>{10, 0, 0, 20, 0, 0, 40, 0, 60, 50, 0, 0}));
  Tensor a = scatter_add(zeros({3, 4}), 1, idx, src);
  EXPECT_EQ(floats(a), (std::vector<float>{10, 0, 0, 20, 0, 0, 70, 0, 60, 50, 0, 0}));
  EXPECT_EQ(floats(zeros({2, 2}).scatter(1, tensor({{1}, {0}}), Scalar(5.0))),
            (std::vector<float>{0, 5, 5, 0}));
  Tensor z = zeros({3, 4});
  z.scatter_add_(1, idx, src);
  EXPECT_EQ(floats(z), floats(a));
  // gradients: gather's is a scatter_add of the output gradient
  Tensor w = x.clone().requires_grad_();
  w.gather(1, idx).sum().backward();
  EXPECT_EQ(floats(w.grad()), (std::vector<float>{1, 0, 0, 1, 0, 0, 2, 0, 1, 1, 0, 0}));
  Tensor sw = src.clone().requires_grad_();
  (scatter_add(zeros({3, 4}), 1, idx, sw) * arange(12.0).reshape({3, 4})).sum().backward();
  EXPECT_EQ(floats(sw.grad()), (std::vector<float>{0, 3, 6, 6, 9, 8}));
  // errors: out of range (negative too, as torch), wrong dtype, wrong rank
  EXPECT_THROW(x.gather(1, tensor({{4}})), Error);
  EXPECT_THROW(x.gather(1, tensor({{-1}})), Error);
  EXPECT_THROW(x.gather(1, tensor({{0.0}})), Error);
  EXPECT_THROW(x.gather(1, tensor({0, 1})), Error);
  EXPECT_THROW(x.gather(2, tensor({{0}})), IndexError);
}

TEST(OpsSelect, SplitChunkUnbind) {
  Tensor x = arange(10.0).reshape({2, 5});
  auto parts = split(x, 2, 1);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[2].shape(), (Shape{2, 1}));
  EXPECT_EQ(floats(parts[1]), (std::vector<float>{2, 3, 7, 8}));
  auto sized = x.split(Shape{1, 4}, 1);
  EXPECT_EQ(sized[1].shape(), (Shape{2, 4}));
  EXPECT_THROW(x.split(Shape{1, 3}, 1), Error);
  auto ch = chunk(x, 3, 1);
  ASSERT_EQ(ch.size(), 3u);
  EXPECT_EQ(ch[0].shape(), (Shape{2, 2}));
  EXPECT_THROW(x.chunk(0), Error);
  auto rows = unbind(x, 0);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(floats(rows[1]), (std::vector<float>{5, 6, 7, 8, 9}));
  // views: writing a piece writes x
  parts[0].fill_(-1.0);
  EXPECT_EQ(floats(x)[0], -1.0f);
  Tensor w = arange(6.0).requires_grad_();
  auto p = w.split(4);
  (p[0].sum() + p[1].sum() * 2.0).backward();
  EXPECT_EQ(floats(w.grad()), (std::vector<float>{1, 1, 1, 1, 2, 2}));
}

TEST(OpsSelect, InplaceMath) {
  Tensor x = tensor({0.25, 1.0, 4.0});
  const uint64_t v0 = x.version();
  x.sqrt_();
  EXPECT_EQ(floats(x), (std::vector<float>{0.5, 1, 2}));
  x.pow_(2);
  EXPECT_EQ(floats(x), (std::vector<float>{0.25, 1, 4}));
  x.neg_().abs_();
  EXPECT_EQ(floats(x), (std::vector<float>{0.25, 1, 4}));
  EXPECT_GT(x.version(), v0);
  // through the graph: d/dw exp(w * 2) summed = 2 exp(2w)
  Tensor w = tensor({0.0, 1.0}).requires_grad_();
  Tensor y = w * 2.0;
  y.exp_();
  y.sum().backward();
  std::vector<float> g = floats(w.grad());
  EXPECT_FLOAT_EQ(g[0], 2.0f);
  EXPECT_FLOAT_EQ(g[1], 2.0f * std::exp(2.0f));
  EXPECT_THROW(w.tanh_(), Error);              // a leaf that requires grad
  EXPECT_THROW(tensor({1, 2}).exp_(), Error);  // int64 cannot hold the result
}

// Indexing with bool masks and N-D index tensors, as torch's x[mask] and x[idx].
TEST(OpsSelect, MaskAndTensorIndexing) {
  using namespace attn::indexing;
  Tensor x = arange(6.0).reshape({2, 3});
  Tensor m = x > Scalar(2.5);
  EXPECT_EQ(floats(x.index({m})), (std::vector<float>{3, 4, 5}));
  EXPECT_EQ(x.index({tensor({{1, 0}, {1, 1}})}).shape(), (Shape{2, 2, 3}));
  EXPECT_EQ(floats(x.index({Slice(), tensor({true, false, true})})),
            (std::vector<float>{0, 2, 3, 5}));
  x.index_put_({m}, Scalar(0.0));
  EXPECT_EQ(floats(x), (std::vector<float>{0, 1, 2, 0, 0, 0}));
  x.index_put_({x == Scalar(0.0)}, tensor({7.0, 8.0, 9.0, 10.0}));
  EXPECT_EQ(floats(x), (std::vector<float>{7, 1, 2, 8, 9, 10}));
  EXPECT_THROW(x.index({tensor({true, false, true})}), IndexError);
}

TEST(OpsSelect, SmallMathBmmIndexSelect) {
  Tensor x = tensor({{1.0, -2.0, 3.0}, {4.0, 0.25, -1.0}});
  EXPECT_EQ(floats(square(x)), (std::vector<float>{1, 4, 9, 16, 0.0625f, 1}));
  EXPECT_EQ(floats(neg(x)), floats(-x));
  EXPECT_EQ(floats(relu(x)), (std::vector<float>{1, 0, 3, 4, 0.25f, 0}));
  EXPECT_EQ(floats(rsqrt(tensor({4.0, 0.25}))), (std::vector<float>{0.5f, 2.0f}));
  EXPECT_FLOAT_EQ(sigmoid(tensor(0.0)).item<float>(), 0.5f);
  EXPECT_EQ(ints(square(tensor({3, -2}))), (std::vector<int64_t>{9, 4}));
  // index_select against the rows it names
  Tensor s = index_select(x, 1, tensor({2, 0, 2}));
  EXPECT_EQ(s.shape(), (Shape{2, 3}));
  EXPECT_EQ(floats(s), (std::vector<float>{3, 1, 3, -1, 4, -1}));
  EXPECT_EQ(floats(x.index_select(0, tensor({1}))), (std::vector<float>{4, 0.25f, -1}));
  EXPECT_THROW(x.index_select(1, tensor({3})), Error);
  EXPECT_THROW(x.index_select(1, tensor({-1})), Error);
  EXPECT_THROW(x.index_select(1, tensor({{0}})), IndexError);
  // bmm: each batch is its own matrix product
  Tensor a = arange(12.0).reshape({2, 2, 3}), b = ones({2, 3, 1});
  EXPECT_EQ(floats(bmm(a, b)), (std::vector<float>{3, 12, 21, 30}));
  EXPECT_THROW(bmm(ones({2, 3}), ones({3, 2})), Error);
  EXPECT_THROW(bmm(ones({2, 2, 3}), ones({3, 3, 1})), Error);
}

// Reverse-mode autograd (include/attn/autograd.h): every op's and module's gradient against
// central finite differences, and the engine's behaviour (accumulation, broadcasting, no_grad,
// detach, retain_graph, in-place ops and version counters, errors).
//
// Finite differences. attn computes in float32 only, so the check is done in float32 with care:
//  - the loss is L(x) = sum_i out_i * R_i for a fixed random R, summed in double by the test
//    (no float32 summation error in L), and the analytic gradient comes from out.backward(R);
//  - the step is h = 1e-2 on inputs of magnitude O(1). The central difference's truncation error
//    is h^2/6 |L'''| ~ 2e-5 |L'''|; its rounding error is about eps32 * |out| * sqrt(n) / h
//    ~ 6e-8 * 10 * 10 / 1e-2 ~ 6e-4 for our sizes (n <= a few hundred outputs of magnitude <= 10).
//    The tolerance |fd - analytic| <= 2e-3 + 1e-2 |analytic| covers both with a margin of about
//    3x, while any wrong formula (a missing factor, a transposed operand, a dropped broadcast sum)
//    is off by O(|analytic|);
//  - inputs of non-smooth ops (relu, abs, max, maximum, masked comparisons) are kept at least
//    0.05 > h away from their kinks and ties, so the difference never straddles one. Ties are
//    tested separately against PyTorch's documented rule.
#include <attn/attn.h>
#include <attn/autograd.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace attn {
namespace {

using indexing::Ellipsis;
using indexing::None;
using indexing::Slice;

constexpr double kStep = 1e-2;
constexpr double kAtol = 2e-3;
constexpr double kRtol = 1e-2;

// Uniform values in [lo, hi), optionally requiring grad.
Tensor uniform(Shape shape, double lo = -1.0, double hi = 1.0, bool grad = true) {
  Tensor t = rand(std::move(shape)) * (hi - lo) + lo;
  t = t.detach();
  if (grad) t.requires_grad_();
  return t;
}

// Values in [lo, hi) with magnitude at least `gap` (away from 0, for relu/abs/sign).
Tensor away_from_zero(Shape shape, double gap = 0.1, double hi = 1.0) {
  Tensor m = rand(shape) * (hi - gap) + gap;
  Tensor s = where(rand(shape) > 0.5, ones(shape), -ones(shape));
  return (m * s).detach().requires_grad_();
}

// Distinct values: a random permutation of 0.1 * (1..n) - 0.05 n, reshaped (no ties in max/min).
Tensor distinct(Shape shape) {
  int64_t n = 1;
  for (auto s : shape) n *= s;
  std::vector<float> v(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = float(0.1 * double(i + 1) - 0.05 * double(n));
  Tensor perm = randint(0, 1 << 30, {n});
  std::vector<std::pair<int64_t, float>> order;
  const int64_t* pp = perm.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) order.emplace_back(pp[i], v[i]);
  std::sort(order.begin(), order.end());
  for (int64_t i = 0; i < n; ++i) v[i] = order[i].second;
  return from_vector(v, shape).requires_grad_();
}

double dot_double(const Tensor& out, const std::vector<float>& r) {
  std::vector<float> o = out.to_float_vector();
  double s = 0;
  for (std::size_t i = 0; i < o.size(); ++i) s += double(o[i]) * double(r[i]);
  return s;
}

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

// Compares the gradients backward() accumulates into each input that requires grad with central
// differences of L = sum(f(inputs) * R). Returns the largest error relative to the tolerance.
void check_gradients(const std::string& name, const Fn& f, std::vector<Tensor> inputs,
                     double step = kStep, double atol = kAtol, double rtol = kRtol) {
  SCOPED_TRACE(name);
  for (auto& t : inputs)
    if (t.requires_grad()) t.set_grad(Tensor());
  Tensor out = f(inputs);
  ASSERT_TRUE(out.requires_grad()) << name << ": the result does not require grad";
  ASSERT_EQ(out.dtype(), Dtype::Float32);
  manual_seed(4242);
  Tensor R = randn(out.shape());
  const std::vector<float> r = R.to_float_vector();
  out.backward(R);
  NoGradGuard no_grad;
  for (std::size_t k = 0; k < inputs.size(); ++k) {
    Tensor& x = inputs[k];
    if (!x.requires_grad()) continue;
    Tensor analytic = x.grad();
    ASSERT_TRUE(analytic.defined()) << name << ": input " << k << " got no gradient";
    ASSERT_EQ(analytic.shape(), x.shape()) << name << ": input " << k;
    const std::vector<float> a = analytic.to_float_vector();
    ASSERT_TRUE(x.is_contiguous()) << name << ": input " << k << " " << shape_str(x.shape());
    float* p = x.data_ptr<float>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      const float orig = p[i];
      const float plus = float(orig + step), minus = float(orig - step);
      p[i] = plus;
      const double lp = dot_double(f(inputs), r);
      p[i] = minus;
      const double lm = dot_double(f(inputs), r);
      p[i] = orig;
      const double fd = (lp - lm) / (double(plus) - double(minus));
      EXPECT_NEAR(a[i], fd, atol + rtol * std::fabs(fd))
          << name << ": input " << k << " element " << i << " of " << shape_str(x.shape());
    }
  }
}

class AutogradTest : public ::testing::Test {
 protected:
  void SetUp() override {
    set_grad_enabled(true);
    manual_seed(7);
  }
  void TearDown() override { set_grad_enabled(true); }
};

// ---- views ------------------------------------------------------------------------------------

TEST_F(AutogradTest, Views) {
  Tensor x = uniform({2, 3, 4});
  Tensor v = uniform({3});
  Tensor idx = tensor({2, 0, 2, -1});  // repeats and a negative index
  struct Case {
    const char* name;
    Fn f;
    std::vector<Tensor> in;
  } cases[] = {
      {"view",
       [](auto& a) {
         return a[0].view({4, 6}) * 1.5;
       },
       {x}},
      {"view -1", [](auto& a) { return a[0].view({-1}); }, {x}},
      {"reshape (view)",
       [](auto& a) {
         return a[0].reshape({6, 4});
       },
       {x}},
      {"reshape (copy)", [](auto& a) { return a[0].transpose(0, 2).reshape({24}); }, {x}},
      {"flatten", [](auto& a) { return a[0].flatten(1); }, {x}},
      {"transpose", [](auto& a) { return a[0].transpose(0, 2); }, {x}},
      {"permute",
       [](auto& a) {
         return a[0].permute({2, 0, 1});
       },
       {x}},
      {"T", [](auto& a) { return a[0].T(); }, {x}},
      {"mT", [](auto& a) { return a[0].mT(); }, {x}},
      {"unsqueeze", [](auto& a) { return a[0].unsqueeze(1).unsqueeze(-1); }, {x}},
      {"squeeze()", [](auto& a) { return a[0].unsqueeze(0).unsqueeze(3).squeeze(); }, {x}},
      {"squeeze(d)", [](auto& a) { return a[0].unsqueeze(2).squeeze(2).squeeze(0); }, {x}},
      {"expand",
       [](auto& a) {
         return a[0].expand({2, 4, 3});
       },
       {v}},
      {"expand leading and unit dims",
       [](auto& a) {
         return a[0].unsqueeze(0).expand({5, 3}) * a[0];
       },
       {v}},
      {"select", [](auto& a) { return a[0].select(1, -1); }, {x}},
      {"operator[]", [](auto& a) { return a[0][1]; }, {x}},
      {"slice with step", [](auto& a) { return a[0].slice(2, 1, std::nullopt, 2); }, {x}},
      {"narrow", [](auto& a) { return a[0].narrow(1, 1, 2); }, {x}},
      {"index int/slice/None/Ellipsis",
       [](auto& a) {
         return a[0].index({1, Slice(None, 2), None, Ellipsis});
       },
       {x}},
      {"index ...", [](auto& a) { return a[0].index({Ellipsis}); }, {x}},
      {"index tensor (repeats, negative)",
       [idx](auto& a) {
         return a[0].index({Slice(), Slice(), idx});
       },
       {x}},
      {"index tensor dim 0", [idx](auto& a) { return a[0].index({idx}); }, {v}},
      {"clone", [](auto& a) { return a[0].clone(); }, {x}},
      {"contiguous", [](auto& a) { return a[0].transpose(0, 1).contiguous(); }, {x}},
  };
  for (auto& c : cases) check_gradients(c.name, c.f, c.in);
}

// ---- arithmetic -------------------------------------------------------------------------------

TEST_F(AutogradTest, ArithmeticWithBroadcasting) {
  Tensor a = uniform({3, 4}), b = uniform({4}), c = uniform({3, 1});
  Tensor pos = uniform({3, 4}, 0.5, 2.0), bpos = uniform({4}, 0.5, 2.0);
  Tensor plain = uniform({3, 4}, 0.5, 2.0, false);
  struct Case {
    const char* name;
    Fn f;
    std::vector<Tensor> in;
  } cases[] = {
      {"a + b", [](auto& t) { return t[0] + t[1]; }, {a, b}},
      {"a - c", [](auto& t) { return t[0] - t[1]; }, {a, c}},
      {"b * c", [](auto& t) { return t[0] * t[1]; }, {b, c}},
      {"a * a", [](auto& t) { return t[0] * t[0]; }, {a}},
      {"a / bpos", [](auto& t) { return t[0] / t[1]; }, {a, bpos}},
      {"a * plain", [](auto& t) { return t[0] * t[1]; }, {a, plain}},
      {"plain / pos", [](auto& t) { return t[1] / t[0]; }, {pos, plain}},
      {"a + 2", [](auto& t) { return t[0] + 2; }, {a}},
      {"a - 0.5", [](auto& t) { return t[0] - 0.5; }, {a}},
      {"a * 3", [](auto& t) { return t[0] * 3.0; }, {a}},
      {"a / 4", [](auto& t) { return t[0] / 4.0; }, {a}},
      {"2 + a", [](auto& t) { return 2.0 + t[0]; }, {a}},
      {"1 - a (rsub)", [](auto& t) { return 1.0 - t[0]; }, {a}},
      {"3 * a", [](auto& t) { return 3 * t[0]; }, {a}},
      {"2 / pos", [](auto& t) { return 2.0 / t[0]; }, {pos}},
      {"-a", [](auto& t) { return -t[0]; }, {a}},
      {"neg", [](auto& t) { return t[0].neg(); }, {a}},
      {"pos ** 2", [](auto& t) { return t[0].pow(2); }, {pos}},
      {"pos ** 0.5", [](auto& t) { return t[0].pow(0.5); }, {pos}},
      {"pos ** -1.5", [](auto& t) { return t[0].pow(-1.5); }, {pos}},
      {"a ** 3 (int)", [](auto& t) { return t[0].pow(3); }, {a}},
      {"pos ** bpos", [](auto& t) { return t[0].pow(t[1]); }, {pos, bpos}},
      {"2 ** a", [](auto& t) { return pow(2.0, t[0]); }, {a}},
      {"0.5 ** a", [](auto& t) { return pow(0.5, t[0]); }, {a}},
  };
  for (auto& c : cases) check_gradients(c.name, c.f, c.in);
}

TEST_F(AutogradTest, UnaryMath) {
  Tensor a = uniform({2, 5}, -2.0, 2.0), pos = uniform({2, 5}, 0.5, 3.0);
  Tensor nz = away_from_zero({2, 5});
  struct Case {
    const char* name;
    Fn f;
    std::vector<Tensor> in;
  } cases[] = {
      {"exp", [](auto& t) { return t[0].exp(); }, {a}},
      {"log", [](auto& t) { return t[0].log(); }, {pos}},
      {"sqrt", [](auto& t) { return t[0].sqrt(); }, {pos}},
      {"rsqrt", [](auto& t) { return t[0].rsqrt(); }, {pos}},
      {"abs", [](auto& t) { return t[0].abs(); }, {nz}},
      {"tanh", [](auto& t) { return t[0].tanh(); }, {a}},
      {"sigmoid", [](auto& t) { return t[0].sigmoid(); }, {a}},
      {"relu", [](auto& t) { return t[0].relu(); }, {nz}},
      {"free functions",
       [](auto& t) { return attn::tanh(attn::exp(t[0]) + attn::abs(t[0])); },
       {a}},
  };
  for (auto& c : cases) check_gradients(c.name, c.f, c.in);
  // Piecewise-constant ops have a zero gradient.
  Tensor x = uniform({4});
  (x.ceil() + x.floor()).sum().backward();
  EXPECT_TRUE(equal(x.grad(), zeros({4})));
}

TEST_F(AutogradTest, SelectionOps) {
  Tensor a = distinct({3, 4}), b = distinct({4});
  Tensor cond = rand({3, 4}) > 0.5;
  struct Case {
    const char* name;
    Fn f;
    std::vector<Tensor> in;
  } cases[] = {
      {"maximum", [](auto& t) { return maximum(t[0], t[1]); }, {a, b}},
      {"minimum", [](auto& t) { return minimum(t[0], t[1]); }, {a, b}},
      {"where", [cond](auto& t) { return where(cond, t[0], t[1]); }, {a, b}},
      {"where scalar-like", [cond](auto& t) { return where(cond, t[0], zeros({})); }, {a}},
      {"masked_fill", [cond](auto& t) { return t[0].masked_fill(cond, -3.0); }, {a}},
      {"masked_fill broadcast",
       [cond](auto& t) { return t[0].masked_fill(cond, 2.0); },
       {b}},  // (4) filled with a (3, 4) mask: the result is (3, 4)
  };
  for (auto& c : cases) check_gradients(c.name, c.f, c.in);
}

TEST_F(AutogradTest, TiesFollowPyTorch) {
  // torch.maximum/minimum split the gradient in halves at ties; max()/min()/amax share it evenly
  // among the tied elements; max(dim) gives it all to the selected index.
  Tensor a = tensor({1.0, 2.0, 3.0}).requires_grad_();
  Tensor b = tensor({1.0, 5.0, 0.0}).requires_grad_();
  maximum(a, b).sum().backward();
  EXPECT_TRUE(equal(a.grad(), tensor({0.5, 0.0, 1.0})));
  EXPECT_TRUE(equal(b.grad(), tensor({0.5, 1.0, 0.0})));
  Tensor x = tensor({{3.0, 1.0, 3.0}, {2.0, 2.0, 0.0}}).requires_grad_();
  x.max().backward();
  EXPECT_TRUE(equal(x.grad(), tensor({{0.5, 0.0, 0.5}, {0.0, 0.0, 0.0}})));
  x.set_grad(Tensor());
  x.amax({1}).sum().backward();
  EXPECT_TRUE(equal(x.grad(), tensor({{0.5, 0.0, 0.5}, {0.5, 0.5, 0.0}})));
  x.set_grad(Tensor());
  std::get<0>(x.max(1)).sum().backward();
  EXPECT_TRUE(equal(x.grad(), tensor({{1.0, 0.0, 0.0}, {1.0, 0.0, 0.0}})));
  x.set_grad(Tensor());
  x.min().backward();
  EXPECT_TRUE(equal(x.grad(), tensor({{0.0, 0.0, 0.0}, {0.0, 0.0, 1.0}})));
}

// ---- reductions and softmax -------------------------------------------------------------------

TEST_F(AutogradTest, Reductions) {
  Tensor x = uniform({2, 3, 4});
  Tensor d = distinct({2, 3, 4});
  Tensor s = uniform({});
  struct Case {
    const char* name;
    Fn f;
    std::vector<Tensor> in;
  } cases[] = {
      {"sum()", [](auto& t) { return t[0].sum(); }, {x}},
      {"sum(1)", [](auto& t) { return t[0].sum({1}); }, {x}},
      {"sum(-1, keepdim)", [](auto& t) { return t[0].sum({-1}, true); }, {x}},
      {"sum({0, 2})",
       [](auto& t) {
         return t[0].sum({0, 2});
       },
       {x}},
      {"sum of a 0-dim", [](auto& t) { return t[0].sum() * 2.0; }, {s}},
      {"mean()", [](auto& t) { return t[0].mean(); }, {x}},
      {"mean({0, -1}, keepdim)",
       [](auto& t) {
         return t[0].mean({0, -1}, true);
       },
       {x}},
      {"var()", [](auto& t) { return t[0].var(); }, {x}},
      {"var(biased)", [](auto& t) { return t[0].var(false); }, {x}},
      {"var(1)", [](auto& t) { return t[0].var(Shape{1}); }, {x}},
      {"var({0, 2}, biased, keepdim)",
       [](auto& t) {
         return t[0].var({0, 2}, false, true);
       },
       {x}},
      {"max()", [](auto& t) { return t[0].max(); }, {d}},
      {"min()", [](auto& t) { return t[0].min(); }, {d}},
      {"max(1)", [](auto& t) { return std::get<0>(t[0].max(1)); }, {d}},
      {"min(-1, keepdim)", [](auto& t) { return std::get<0>(t[0].min(-1, true)); }, {d}},
      {"amax(-1)", [](auto& t) { return t[0].amax({-1}); }, {d}},
      {"amax({0, 1}, keepdim)",
       [](auto& t) {
         return t[0].amax({0, 1}, true);
       },
       {d}},
      {"free sum/mean/var",
       [](auto& t) { return attn::sum(t[0], {0}) + attn::mean(t[0], {0}) * attn::var(t[0], {0}); },
       {x}},
  };
  for (auto& c : cases) check_gradients(c.name, c.f, c.in);
}

TEST_F(AutogradTest, SoftmaxIsOneFusedNode) {
  Tensor x = uniform({2, 3, 5}, -3.0, 3.0);
  struct Case {
    const char* name;
    Fn f;
    std::vector<Tensor> in;
  } cases[] = {
      {"softmax(-1)", [](auto& t) { return softmax(t[0], -1); }, {x}},
      {"softmax(0)", [](auto& t) { return softmax(t[0], 0); }, {x}},
      {"softmax(1) of a transpose", [](auto& t) { return softmax(t[0].transpose(1, 2), 1); }, {x}},
      {"log_softmax(-1)", [](auto& t) { return log_softmax(t[0], -1); }, {x}},
      {"log_softmax(1)", [](auto& t) { return t[0].log_softmax(1); }, {x}},
      {"softmax with -inf",
       [](auto& t) { return softmax(t[0].masked_fill(t[0] > 2.5, -inf), -1); },
       {x}},
  };
  for (auto& c : cases) check_gradients(c.name, c.f, c.in);
  Tensor y = softmax(x, -1);
  EXPECT_EQ(grad_fn(y)->name, "SoftmaxBackward0");
  ASSERT_EQ(grad_fn(y)->leaves.size(), 1u) << "one node straight to the leaf";
  EXPECT_TRUE(grad_fn(y)->next.empty());
  // The gradient of a softmax row sums to zero.
  Tensor g = uniform({2, 3, 5}, -1, 1, false);
  x.set_grad(Tensor());
  softmax(x, -1).backward(g);
  EXPECT_LT(x.grad().sum({-1}).abs().max().item<double>(), 1e-6);
}

// ---- linear algebra, joins, triangles ---------------------------------------------------------

TEST_F(AutogradTest, MatmulVariants) {
  struct Case {
    const char* name;
    Shape a, b;
  } cases[] = {
      {"dot", {5}, {5}},
      {"vec @ mat (SqueezeBackward4)", {3}, {3, 4}},
      {"mat @ vec (mv)", {4, 3}, {3}},
      {"mm", {4, 3}, {3, 2}},
      {"batched @ mat", {2, 4, 3}, {3, 2}},
      {"mat @ batched (folded)", {4, 3}, {2, 3, 2}},
      {"batched @ batched", {2, 4, 3}, {2, 3, 5}},
      {"broadcast batch dims", {2, 1, 4, 3}, {5, 3, 2}},
      {"batched @ vec", {2, 4, 3}, {3}},
      {"vec @ batched", {3}, {2, 3, 4}},
      {"length-1 dims", {1, 1, 3}, {1, 3, 1}},
  };
  for (const auto& c : cases) {
    Tensor a = uniform(c.a), b = uniform(c.b);
    check_gradients(c.name, [](auto& t) { return matmul(t[0], t[1]); }, {a, b});
    // Only one operand trainable, and transposed (strided) operands.
    Tensor p = uniform(c.a, -1, 1, false);
    check_gradients(std::string(c.name) + " (b only)", [](auto& t) { return matmul(t[1], t[0]); },
                    {b, p});
  }
  Tensor a = uniform({5}), b = uniform({5});
  check_gradients("Tensor::dot", [](auto& t) { return t[0].dot(t[1]); }, {a, b});
  Tensor m = uniform({3, 4});
  check_gradients("m @ m.T", [](auto& t) { return matmul(t[0], t[0].T()); }, {m});
  // A long dot product (the BLAS sdot path) and a product large enough for sgemm.
  Tensor la = uniform({100}), lb = uniform({100});
  check_gradients(
      "long dot", [](auto& t) { return dot(t[0], t[1]); }, {la, lb}, kStep, 5e-3);
  Tensor big = uniform({9, 70}), w = uniform({70, 3});
  check_gradients(
      "sgemm-sized", [](auto& t) { return matmul(t[0], t[1]); }, {big, w}, kStep, 5e-3);
}

TEST_F(AutogradTest, CatStackTriangles) {
  Tensor a = uniform({2, 3}), b = uniform({2, 1}), c = uniform({2, 3});
  Tensor empty = zeros({0}).requires_grad_();
  Tensor sq = uniform({2, 4, 4});
  struct Case {
    const char* name;
    Fn f;
    std::vector<Tensor> in;
  } cases[] = {
      {"cat dim 1",
       [](auto& t) {
         return cat({t[0], t[1], t[0]}, 1);
       },
       {a, b}},
      {"cat dim 0",
       [](auto& t) {
         return cat({t[0], t[1]}, 0);
       },
       {a, c}},
      {"cat with a skipped (0,) tensor",
       [](auto& t) {
         return cat({t[0], t[1]}, -1);
       },
       {a, empty}},
      {"stack dim 0",
       [](auto& t) {
         return stack({t[0], t[1]});
       },
       {a, c}},
      {"stack dim -1",
       [](auto& t) {
         return stack({t[0], t[1], t[0]}, -1);
       },
       {a, c}},
      {"tril", [](auto& t) { return tril(t[0]); }, {sq}},
      {"tril(-1)", [](auto& t) { return t[0].tril(-1); }, {sq}},
      {"triu(1)", [](auto& t) { return triu(t[0], 1); }, {sq}},
      {"triu(-2) of a transpose", [](auto& t) { return t[0].transpose(1, 2).triu(-2); }, {sq}},
  };
  for (auto& c : cases) check_gradients(c.name, c.f, c.in);
  EXPECT_EQ(empty.grad().shape(), (Shape{0}));
}

// ---- modules ----------------------------------------------------------------------------------

TEST_F(AutogradTest, EmbeddingLinearDropout) {
  manual_seed(1);
  nn::Embedding emb(6, 3);
  Tensor ids = tensor({{0, 4, 4}, {5, 0, 1}});
  check_gradients("embedding (repeated ids)",
                  [&](auto& t) { return nn::functional::embedding(ids, t[0]); }, {emb.weight});
  // Rows never looked up get zero gradient.
  EXPECT_TRUE(equal(emb.weight.grad()[2], zeros({3})));

  nn::Linear lin(4, 3), nobias(4, 2, false);
  Tensor x1 = uniform({4}), x2 = uniform({5, 4}), x3 = uniform({2, 5, 4});
  for (Tensor x : {x1, x2, x3}) {
    check_gradients("linear " + shape_str(x.shape()),
                    [&](auto& t) { return nn::functional::linear(t[0], t[1], t[2]); },
                    {x, lin.weight, lin.bias});
    check_gradients("linear without bias " + shape_str(x.shape()),
                    [&](auto& t) { return nobias(t[0]); }, {x, nobias.weight});
  }
  // Bias only trainable: the matmul result is a plain tensor that y += bias joins to the graph.
  Tensor plain = uniform({5, 4}, -1, 1, false);
  check_gradients("linear, bias only",
                  [&](auto& t) { return nn::functional::linear(plain, t[0], t[1]); },
                  {lin.weight.detach(), lin.bias});

  // Dropout: the mask is saved (the same generator state gives the same mask in each evaluation).
  Tensor x = uniform({4, 5});
  check_gradients("dropout(0.3)",
                  [](auto& t) {
                    manual_seed(99);
                    return nn::functional::dropout(t[0], 0.3, true);
                  },
                  {x});
  manual_seed(99);
  Tensor noise = nn::functional::dropout(ones({4, 5}), 0.3, true);
  x.set_grad(Tensor());
  manual_seed(99);
  nn::functional::dropout(x, 0.3, true).sum().backward();
  EXPECT_TRUE(equal(x.grad(), noise)) << "grad = mask / (1 - p)";
  nn::Dropout drop(0.5);
  drop.eval();
  check_gradients("Dropout in eval", [&](auto& t) { return drop(t[0]) * 1.0; }, {x});
}

// The sdpa options of one table case.
struct AttnCase {
  std::string name;
  Shape q, k, v;
  bool causal = false;
  CausalAlign align = CausalAlign::TopLeft;
  int mask = 0;  // 0 none, 1 bool, 2 float (trainable), 3 bool with a fully masked row
  bool gqa = false;
  double dropout = 0.0;
  std::optional<double> scale;
};

Tensor attn_mask_for(const AttnCase& c, int64_t L_q, int64_t L_k) {
  if (c.mask == 1) return rand({L_q, L_k}) > 0.3;
  if (c.mask == 2) return uniform({1, L_q, L_k}, -1.0, 1.0);
  if (c.mask == 3) {
    Tensor m = rand({L_q, L_k}) > 0.3;
    m.index_put_({0}, false);  // query 0 sees nothing: zero output, zero gradient
    return m;
  }
  return Tensor();
}

TEST_F(AutogradTest, ScaledDotProductAttention) {
  const std::vector<AttnCase> cases = {
      {"plain", {2, 3, 4}, {2, 5, 4}, {2, 5, 3}},
      {"L=1", {1, 1, 4}, {1, 1, 4}, {1, 1, 4}},
      {"causal top-left", {2, 4, 3}, {2, 6, 3}, {2, 6, 3}, true},
      {"causal bottom-right",
       {1, 2, 4, 3},
       {1, 2, 6, 3},
       {1, 2, 6, 2},
       true,
       CausalAlign::BottomRight},
      {"bool mask", {2, 4, 3}, {2, 5, 3}, {2, 5, 3}, false, CausalAlign::TopLeft, 1},
      {"float mask (trainable)", {2, 4, 3}, {2, 5, 3}, {2, 5, 3}, false, CausalAlign::TopLeft, 2},
      {"fully masked row", {3, 4}, {5, 4}, {5, 2}, false, CausalAlign::TopLeft, 3},
      {"GQA", {1, 4, 3, 2}, {1, 2, 5, 2}, {1, 2, 5, 3}, false, CausalAlign::TopLeft, 0, true},
      {"GQA causal", {2, 6, 3, 2}, {2, 2, 3, 2}, {2, 2, 3, 2}, true, CausalAlign::TopLeft, 0, true},
      {"broadcast batch", {2, 1, 3, 4}, {1, 3, 5, 4}, {1, 3, 5, 4}},
      {"dropout", {2, 3, 4}, {2, 5, 4}, {2, 5, 3}, false, CausalAlign::TopLeft, 0, false, 0.3},
      {"scale", {2, 3, 4}, {2, 5, 4}, {2, 5, 3}, false, CausalAlign::TopLeft, 0, false, 0.0, 0.9},
  };
  for (const AttnCase& c : cases) {
    Tensor q = uniform(c.q), k = uniform(c.k), v = uniform(c.v);
    SdpaOptions o;
    o.is_causal = c.causal;
    o.causal_align = c.align;
    o.attn_mask = attn_mask_for(c, c.q[c.q.size() - 2], c.k[c.k.size() - 2]);
    o.enable_gqa = c.gqa;
    o.dropout_p = c.dropout;
    o.scale = c.scale;
    std::vector<Tensor> in{q, k, v};
    if (c.mask == 2) in.push_back(o.attn_mask);
    auto run = [o](const std::vector<Tensor>& t, bool weights) {
      SdpaOptions oo = o;
      if (t.size() > 3) oo.attn_mask = t[3];
      manual_seed(5);
      if (!weights) return scaled_dot_product_attention(t[0], t[1], t[2], oo);
      auto [out, w] = scaled_dot_product_attention_with_weights(t[0], t[1], t[2], oo);
      return out * 2.0 + w.sum({-1}, true) + w.mean({-2}, true).sum({-1}, true);
    };
    check_gradients(
        "sdpa " + c.name, [&](auto& t) { return run(t, false); }, in);
    check_gradients(
        "sdpa with weights " + c.name, [&](auto& t) { return run(t, true); }, in);
    if (c.mask == 3) {
      q.set_grad(Tensor());
      scaled_dot_product_attention(q, k, v, o).sum().backward();
      EXPECT_TRUE(equal(q.grad()[0], zeros({4}))) << "a fully masked row has zero gradient";
      EXPECT_FALSE(q.grad().isnan().any());
    }
  }
}

TEST_F(AutogradTest, AttentionModules) {
  manual_seed(123);
  Tensor x = uniform({2, 5, 3});
  {
    nn::SelfAttentionV1 m(3, 2);
    check_gradients("SelfAttentionV1", [&](auto& t) { return m(t[0]); },
                    {x, m.W_query, m.W_key, m.W_value});
    check_gradients("SelfAttentionV1 weights", [&](auto& t) { return m.attention_weights(t[0]); },
                    {x, m.W_query, m.W_key});
  }
  {
    nn::SelfAttentionV2 m(3, 4, /*qkv_bias=*/true);
    check_gradients("SelfAttentionV2", [&](auto& t) { return m(t[0]); },
                    {x, m.W_query->weight, m.W_key->bias, m.W_value->weight, m.W_value->bias});
  }
  {
    nn::CausalAttention m(3, 2, 6, 0.5);
    m.eval();
    check_gradients("CausalAttention (eval)", [&](auto& t) { return m(t[0]); },
                    {x, m.W_query, m.W_key, m.W_value});
    m.train();
    check_gradients("CausalAttention (train, dropout)",
                    [&](auto& t) {
                      manual_seed(3);
                      return m(t[0]);
                    },
                    {x, m.W_query, m.W_key, m.W_value});
  }
  {
    nn::Head h(3, 4, true);
    check_gradients("Head", [&](auto& t) { return h(t[0]); },
                    {x, h.key->weight, h.query->weight, h.value->weight});
  }
  {
    nn::CrossAttention m(3, 4, 2);
    Tensor ctx = uniform({2, 7, 4});
    check_gradients("CrossAttention", [&](auto& t) { return m.forward(t[0], t[1]); },
                    {x, ctx, m.W_query->weight, m.W_key->weight, m.W_value->weight});
  }
  {
    Tensor Wq = uniform({3, 4}), Wk = uniform({3, 4}), Wv = uniform({3, 4});
    check_gradients("multi_head_attention_steps",
                    [](auto& t) {
                      return nn::multi_head_attention_steps(t[0], t[1], t[2], t[3], 2, 0.0).output;
                    },
                    {x, Wq, Wk, Wv});
  }
}

TEST_F(AutogradTest, MultiheadAttention) {
  manual_seed(11);
  nn::MultiheadAttention mha(4, 2);
  Tensor q = uniform({3, 2, 4}), k = uniform({5, 2, 4}), v = uniform({5, 2, 4});
  std::vector<Tensor> params{mha.in_proj_weight, mha.in_proj_bias, mha.out_proj->weight,
                             mha.out_proj->bias};
  std::vector<Tensor> in{q, k, v};
  in.insert(in.end(), params.begin(), params.end());
  Tensor kpm = tensor({{false, false, true, false, false}, {false, true, false, false, false}});
  Tensor am = rand({3, 5}) > 0.8;
  check_gradients(
      "MultiheadAttention", [&](auto& t) { return mha.forward(t[0], t[1], t[2]).output; }, in);
  check_gradients(
      "MultiheadAttention need_weights=false, masks",
      [&](auto& t) { return mha.forward(t[0], t[1], t[2], kpm, false, am).output; }, in);
  check_gradients("MultiheadAttention weights",
                  [&](auto& t) { return mha.forward(t[0], t[1], v, kpm, true).weights; },
                  {q, k, mha.in_proj_weight, mha.in_proj_bias});
  nn::MultiheadAttention kv(4, 2, 0.0, true, 3, 5, /*batch_first=*/true);
  Tensor qb = uniform({2, 3, 4}), kb = uniform({2, 6, 3}), vb = uniform({2, 6, 5});
  check_gradients(
      "MultiheadAttention kdim/vdim, batch_first, causal",
      [&](auto& t) {
        return kv.forward(t[0], t[1], t[2], Tensor(), false, Tensor(), true, true).output;
      },
      {qb, kb, vb, kv.q_proj_weight, kv.k_proj_weight, kv.v_proj_weight});
}

// ---- in-place ops -----------------------------------------------------------------------------

TEST_F(AutogradTest, InPlaceOpsOnResults) {
  Tensor a = uniform({3, 4}), b = uniform({4}), pos = uniform({4}, 0.5, 2.0);
  Tensor mask = rand({3, 4}) > 0.5;
  struct Case {
    const char* name;
    Fn f;
    std::vector<Tensor> in;
  } cases[] = {
      {"add_ tensor",
       [](auto& t) {
         Tensor y = t[0] * 2.0;
         y.add_(t[1]);
         return y;
       },
       {a, b}},
      {"add_ scalar, sub_",
       [](auto& t) {
         Tensor y = t[0] * 1.0;
         y += 3;
         y -= t[1];
         return y;
       },
       {a, b}},
      {"mul_ tensor (both trainable)",
       [](auto& t) {
         Tensor y = t[0] * 2.0;
         y.mul_(t[1]);
         return y * y;
       },
       {a, b}},
      {"mul_ scalar",
       [](auto& t) {
         Tensor y = t[0] * 1.0;
         y *= 3.0;
         return y;
       },
       {a}},
      {"div_ tensor",
       [](auto& t) {
         Tensor y = t[0] + 1.0;
         y /= t[1];
         return y;
       },
       {a, pos}},
      {"div_ scalar",
       [](auto& t) {
         Tensor y = t[0] + 1.0;
         y /= 4.0;
         return y;
       },
       {a}},
      {"x.mul_(x)",
       [](auto& t) {
         Tensor y = t[0] + 0.5;
         y.mul_(y);
         return y;
       },
       {a}},
      {"masked_fill_ (seed 003)",
       [mask](auto& t) {
         Tensor s = matmul(t[0], t[0].T());
         s.masked_fill_(tril(ones({3, 3})) == 0.0, -inf);
         return softmax(s / 2.0, -1);
       },
       {a}},
      {"masked_fill_ finite",
       [mask](auto& t) {
         Tensor y = t[0] * 1.0;
         y.masked_fill_(mask, 1.5);
         return y * t[0];
       },
       {a}},
      {"copy_ broadcast into a result",
       [](auto& t) {
         Tensor y = t[0] * 1.0;
         y.copy_(t[1]);
         return y * t[0];
       },
       {a, b}},
      {"plain tensor absorbs a trainable one",
       [](auto& t) {
         Tensor y = zeros({3, 4});
         y += t[1];
         y.mul_(t[0]);
         return y;
       },
       {a, b}},
      {"chain of in-place ops",
       [](auto& t) {
         Tensor y = t[0] * 1.5;  // (not tanh: its saved result would be modified below)
         y.mul_(2.0);
         y.add_(t[1]);
         y.div_(3.0);
         y.sub_(t[0]);
         return y.sigmoid();
       },
       {a, b}},
  };
  for (auto& c : cases) check_gradients(c.name, c.f, c.in);
}

TEST_F(AutogradTest, InPlaceOpsThroughViews) {
  Tensor a = uniform({3, 4}), b = uniform({4}), c = uniform({3});
  struct Case {
    const char* name;
    Fn f;
    std::vector<Tensor> in;
  } cases[] = {
      {"y[1] += b",
       [](auto& t) {
         Tensor y = t[0] * 1.0;
         y[1].add_(t[1]);
         return y * t[0];
       },
       {a, b}},
      {"y[:, 2].mul_(c)",
       [](auto& t) {
         Tensor y = t[0] * 1.0;
         y.select(1, 2).mul_(t[1]);
         return y;
       },
       {a, c}},
      {"index_put_ x[0] = b",
       [](auto& t) {
         Tensor y = t[0] * 2.0;
         y.index_put_({0}, t[1]);
         return y;
       },
       {a, b}},
      {"index_put_ into a plain tensor",
       [](auto& t) {
         Tensor y = zeros({3, 4});
         y.index_put_({Slice(), 1}, t[0]);
         return y * 2.0;
       },
       {c}},
      {"index_put_ with an index tensor",
       [](auto& t) {
         Tensor y = t[0] * 1.0;
         y.index_put_({tensor({2, 0})}, t[1]);
         return y;
       },
       {a, b}},
      {"view(...).mul_ then use the base",
       [](auto& t) {
         Tensor y = t[0] + 0.0;
         y.view({12}).mul_(3.0);
         return y.exp();
       },
       {a}},
      {"view taken before a write to its base",
       [](auto& t) {
         Tensor y = t[0] * 1.0;
         Tensor row = y[2];
         y.mul_(t[0]);  // row's values (and its history) change with y
         return row * 2.0;
       },
       {a}},
      {"slice written twice",
       [](auto& t) {
         Tensor y = t[0].clone();
         y.slice(1, 0, 2).mul_(2.0);
         y.slice(1, 1, 3).add_(t[0].slice(1, 0, 2));
         return y;
       },
       {a}},
  };
  for (auto& c : cases) check_gradients(c.name, c.f, c.in);
  Tensor y = a * 1.0;
  y[1].add_(b);
  EXPECT_EQ(grad_fn(y)->name, "CopySlices");
}

TEST_F(AutogradTest, VersionCountersCatchModifiedSavedTensors) {
  Tensor a = uniform({3});
  Tensor e = a.exp();  // ExpBackward0 saves its result
  Tensor loss = (e * 2.0).sum();
  e.add_(1.0);  // e is saved: modified in place
  try {
    loss.backward();
    ADD_FAILURE() << "expected attn::Error";
  } catch (const Error& err) {
    const std::string what = err.what();
    EXPECT_NE(what.find("[backward]"), std::string::npos) << what;
    EXPECT_NE(what.find("modified by an inplace operation"), std::string::npos) << what;
    EXPECT_NE(what.find("ExpBackward0"), std::string::npos) << what;
  }
  // A saved input modified in place (through a view) is caught as well.
  Tensor b = uniform({2, 2});
  Tensor x = b * 1.0;
  Tensor prod = (x * b).sum();  // MulBackward0 saves x for b's gradient
  x[0].mul_(2.0);
  EXPECT_THROW(prod.backward(), Error);
  // Versions count every in-place write.
  Tensor t = zeros({2});
  const uint64_t v0 = t.version();
  t.add_(1.0);
  t.masked_fill_(t > 0.5, 0.0);
  t.index_put_({0}, 3.0);
  EXPECT_EQ(t.version(), v0 + 3);
  EXPECT_EQ(t.detach().version(), t.version()) << "views share the counter";
}

// ---- the engine -------------------------------------------------------------------------------

TEST_F(AutogradTest, AccumulationAcrossCallsAndSharedInputs) {
  Tensor w = tensor({1.0, 2.0, 3.0}).requires_grad_();
  (w * w).sum().backward();  // 2w
  EXPECT_TRUE(allclose(w.grad(), tensor({2.0, 4.0, 6.0})));
  (w * 3.0).sum().backward();  // + 3
  EXPECT_TRUE(allclose(w.grad(), tensor({5.0, 7.0, 9.0})));
  // A diamond: y feeds two consumers whose gradients meet again.
  w.set_grad(Tensor());
  Tensor y = w * 2.0;
  Tensor z = (y * y + y.exp() + y).sum();
  z.backward();
  Tensor expect = (y.detach() * 2.0 + y.detach().exp() + 1.0) * 2.0;
  EXPECT_TRUE(allclose(w.grad(), expect, 1e-5, 1e-5));
  // backward from a leaf itself.
  Tensor s = tensor(2.0).requires_grad_();
  s.backward();
  EXPECT_EQ(s.grad().item<float>(), 1.0f);
  // Broadcast inputs receive gradients of their own shape.
  Tensor row = zeros({1, 4}).requires_grad_(), col = zeros({3, 1}).requires_grad_();
  Tensor scalar = zeros({}).requires_grad_();
  (row + col + scalar).sum().backward();
  EXPECT_TRUE(equal(row.grad(), full({1, 4}, 3.0)));
  EXPECT_TRUE(equal(col.grad(), full({3, 1}, 4.0)));
  EXPECT_TRUE(equal(scalar.grad(), full({}, 12.0)));
  // A non-scalar root with an explicit gradient.
  Tensor v = uniform({2, 3});
  Tensor g = tensor({{1.0, 0.0, -1.0}, {2.0, 0.5, 0.0}});
  (v * 3.0).backward(g);
  EXPECT_TRUE(allclose(v.grad(), g * 3.0));
  // Results have no .grad; leaves that took no part keep none.
  Tensor unused = uniform({2});
  Tensor r = w * 2.0;
  r.sum().backward();
  EXPECT_FALSE(r.grad().defined());
  EXPECT_FALSE(unused.grad().defined());
}

// The engine keeps a gradient as a leaf's .grad without copying it only when nothing else holds
// it: gradients handed to several inputs, or given by the caller, are copied.
TEST_F(AutogradTest, KeptGradientsAliasNothing) {
  Tensor a = tensor({1.0, 2.0}).requires_grad_(), b = tensor({3.0, 4.0}).requires_grad_();
  (a + b).sum().backward();  // add's backward hands the same gradient to both
  {
    NoGradGuard no_grad;
    a.grad().add_(1.0);
  }
  EXPECT_TRUE(equal(a.grad(), tensor({2.0, 2.0})));
  EXPECT_TRUE(equal(b.grad(), tensor({1.0, 1.0})));
  Tensor v = tensor({1.0, 2.0}).requires_grad_();
  Tensor g = tensor({5.0, 6.0});
  v.backward(g);
  {
    NoGradGuard no_grad;
    g.mul_(2.0);
  }
  EXPECT_TRUE(equal(v.grad(), tensor({5.0, 6.0})));
  // A fresh gradient (mul's) is kept; the next pass adds into it.
  Tensor w = tensor({1.0, 2.0}).requires_grad_();
  (w * 3.0).sum().backward();
  Tensor first = w.grad();
  (w * 3.0).sum().backward();
  EXPECT_TRUE(equal(first, tensor({6.0, 6.0})));
}

TEST_F(AutogradTest, RetainGraph) {
  Tensor w = tensor({1.0, 2.0}).requires_grad_();
  Tensor loss = (w.exp() * w).sum();
  loss.backward(Tensor(), /*retain_graph=*/true);
  Tensor first = w.grad().clone();
  loss.backward();  // the graph was kept: works, and accumulates
  EXPECT_TRUE(allclose(w.grad(), first * 2.0));
  try {
    loss.backward();  // freed by the previous call
    ADD_FAILURE() << "expected attn::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("second time"), std::string::npos) << e.what();
  }
  // Nodes that saved nothing can be run again, as in PyTorch.
  Tensor sum = (w + 1.0).sum();
  sum.backward();
  EXPECT_NO_THROW(sum.backward());
}

TEST_F(AutogradTest, NoGradDetachAndZeroGrad) {
  Tensor w = uniform({3});
  {
    NoGradGuard guard;
    Tensor y = w * 2.0;
    EXPECT_FALSE(y.requires_grad());
    EXPECT_THROW(y.sum().backward(), Error);
  }
  {
    GradModeGuard off(false);
    EXPECT_FALSE(is_grad_enabled());
    GradModeGuard on(true);
    EXPECT_TRUE(is_grad_enabled());
  }
  EXPECT_TRUE(is_grad_enabled());
  // detach cuts the graph: the detached branch contributes nothing.
  Tensor y = w * 2.0;
  (y.detach() * w).sum().backward();
  EXPECT_TRUE(allclose(w.grad(), y.detach()));
  // zero_grad: set_to_none (default) or zeros.
  nn::Linear lin(3, 2);
  lin(uniform({4, 3})).sum().backward();
  EXPECT_TRUE(lin.weight.grad().defined());
  lin.zero_grad(/*set_to_none=*/false);
  EXPECT_TRUE(equal(lin.weight.grad(), zeros({2, 3})));
  EXPECT_TRUE(equal(lin.bias.grad(), zeros({2})));
  lin.zero_grad();
  EXPECT_FALSE(lin.weight.grad().defined());
  EXPECT_FALSE(lin.bias.grad().defined());
  // set_grad validates the shape.
  EXPECT_THROW(w.set_grad(zeros({4})), Error);
  w.set_grad(ones({3}));
  EXPECT_TRUE(equal(w.grad(), ones({3})));
  // requires_grad_(false) is refused on a result (use detach()).
  EXPECT_THROW((w * 2.0).requires_grad_(false), Error);
}

// `f` must throw attn::Error whose message starts with "[backward]" and contains `part`.
void expect_backward_error(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "expected attn::Error containing " << part;
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.rfind("[backward]", 0), 0u) << what;
    EXPECT_NE(what.find(part), std::string::npos) << what;
  }
}

TEST_F(AutogradTest, Errors) {
  Tensor plain = ones({2});
  expect_backward_error([&] { plain.sum().backward(); }, "does not require grad");
  Tensor w = uniform({2, 3});
  expect_backward_error([&] { (w * 2.0).backward(); }, "scalar outputs");
  expect_backward_error([&] { (w * 2.0).backward(ones({3, 2})); }, "(3, 2)");
  expect_backward_error([&] { (w * 2.0).backward(ones({2, 3}, Dtype::Int64)); }, "float32");
  // In-place ops on a leaf that requires grad, or on a view of one.
  EXPECT_THROW(w.add_(1.0), Error);
  try {
    w[0].mul_(2.0);
    ADD_FAILURE() << "expected attn::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("view"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[mul_]"), std::string::npos) << e.what();
  }
  // Under no_grad both are allowed (an optimizer step).
  {
    NoGradGuard guard;
    w.add_(1.0);
    w[0].mul_(2.0);
  }
  EXPECT_TRUE(w.is_leaf());
}

TEST_F(AutogradTest, GraphsAreFreedWithTheirTensors) {
  // Saved tensors are detached aliases and views point only at their base, so no graph forms a
  // reference cycle: once the results are gone, so are the nodes (also after in-place ops
  // through views and after a backward pass).
  Tensor w = uniform({3, 4});
  std::weak_ptr<Node> a, b, c;
  {
    Tensor y = w * 2.0 + 1.0;
    Tensor row = y[1];
    y.index_put_({0}, w[2] * 3.0);
    row.mul_(w[0]);
    Tensor loss = (y * y).sum() + row.sum();
    a = grad_fn(y);
    b = grad_fn(row);
    c = grad_fn(loss);
    ASSERT_FALSE(a.expired());
    loss.backward();
  }
  EXPECT_TRUE(a.expired());
  EXPECT_TRUE(b.expired());
  EXPECT_TRUE(c.expired());
}

TEST_F(AutogradTest, PostAccumulateGradHookRunsOncePerPassAfterTheLastGradient) {
  // w is used twice (as tied weights are): the hook sees the sum of both contributions, once.
  Tensor w = tensor({1.0, 2.0}).requires_grad_();
  Tensor b = tensor({0.5}).requires_grad_();
  std::vector<std::vector<float>> seen;
  int b_calls = 0;
  const int64_t h = register_post_accumulate_grad_hook(w, [&](const Tensor& leaf) {
    EXPECT_TRUE(leaf.is_same(w));
    Tensor g = leaf.grad();
    seen.push_back({g[0].item<float>(), g[1].item<float>()});
    EXPECT_FALSE(is_grad_enabled());
  });
  register_post_accumulate_grad_hook(b, [&](const Tensor&) { ++b_calls; });
  auto loss = [&] { return (w * 3.0).sum() + (w * w).sum() + b.sum() * 0.0; };
  loss().backward();
  ASSERT_EQ(seen.size(), 1u);
  EXPECT_FLOAT_EQ(seen[0][0], 3.0f + 2.0f);  // d/dw of 3w + w^2 at w = 1, 2
  EXPECT_FLOAT_EQ(seen[0][1], 3.0f + 4.0f);
  EXPECT_EQ(b_calls, 1);
  loss().backward();  // accumulates: the hook sees the running sum
  ASSERT_EQ(seen.size(), 2u);
  EXPECT_FLOAT_EQ(seen[1][0], 10.0f);
  remove_post_accumulate_grad_hook(w, h);
  loss().backward();
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_EQ(b_calls, 3);
  // A leaf used as the root itself runs its hooks too; a non-leaf cannot have them.
  b.backward(ones({1}));
  EXPECT_EQ(b_calls, 4);
  Tensor y = w * 2.0;
  EXPECT_THROW(register_post_accumulate_grad_hook(y, [](const Tensor&) {}), Error);
  EXPECT_THROW(register_post_accumulate_grad_hook(ones({2}), [](const Tensor&) {}), Error);
}

TEST_F(AutogradTest, TensorHooksSeeTheSummedGradientAndMayReplaceIt) {
  Tensor x = tensor({1.0, 2.0, 3.0}).requires_grad_();
  Tensor h = x * 2.0;
  std::vector<std::string> calls;
  std::vector<float> seen_h;
  const int64_t hh = register_hook(h, [&](const Tensor& g) {
    calls.push_back("h");
    seen_h = {g[0].item<float>(), g[1].item<float>(), g[2].item<float>()};
    return g * 10.0;
  });
  register_hook(x, [&](const Tensor& g) {
    calls.push_back("x");
    EXPECT_FALSE(is_grad_enabled());
    return Tensor();  // unchanged
  });
  // h used twice: d/dh (h^2 + h) = 2h + 1, seen once; x's gradient is 10 (2h + 1) * 2.
  Tensor loss = (h * h).sum() + h.sum();
  loss.backward(Tensor(), true);
  ASSERT_EQ(calls, (std::vector<std::string>{"h", "x"}));
  EXPECT_FLOAT_EQ(seen_h[2], 13.0f);
  EXPECT_FLOAT_EQ(x.grad()[0].item<float>(), 100.0f);
  EXPECT_FLOAT_EQ(x.grad()[2].item<float>(), 260.0f);
  remove_hook(h, hh);
  x.set_grad(Tensor());
  loss.backward();
  EXPECT_FLOAT_EQ(x.grad()[2].item<float>(), 26.0f);
  EXPECT_EQ(calls.size(), 3u);
  // A leaf's hook replaces what accumulates; a wrong shape or a tensor without grad is refused.
  Tensor w = tensor({-2.0, 0.25, 2.0}).requires_grad_();
  register_hook(w, [](const Tensor& g) { return g.clamp(-1.0, 1.0); });
  (w * w).sum().backward();  // 2w clamped
  EXPECT_FLOAT_EQ(w.grad()[0].item<float>(), -1.0f);
  EXPECT_FLOAT_EQ(w.grad()[1].item<float>(), 0.5f);
  Tensor v = tensor({1.0, 2.0}).requires_grad_();
  register_hook(v, [](const Tensor&) { return ones({3}); });
  EXPECT_THROW((v * 2.0).sum().backward(), Error);
  EXPECT_THROW(register_hook(ones({2}), [](const Tensor& g) { return g; }), Error);
}

TEST_F(AutogradTest, RetainGradKeepsANonLeafsGradientAfterItsHooks) {
  Tensor x = tensor({0.5, -1.0}).requires_grad_();
  Tensor a = x * 3.0;
  Tensor b = a * a;
  retain_grad(a);
  register_hook(b, [](const Tensor& g) { return g * 2.0; });
  retain_grad(b);  // after the hook, whatever the order (torch 2.x)
  EXPECT_TRUE(retains_grad(a));
  EXPECT_FALSE(retains_grad(x));
  b.sum().backward(Tensor(), true);
  EXPECT_FLOAT_EQ(b.grad()[0].item<float>(), 2.0f);
  EXPECT_FLOAT_EQ(a.grad()[0].item<float>(), 2.0f * 2 * 1.5f);  // 2 * 2a
  b.sum().backward();                                           // accumulates
  EXPECT_FLOAT_EQ(a.grad()[1].item<float>(), 2 * (2.0f * 2 * -3.0f));
  EXPECT_THROW(retain_grad(ones({2})), Error);
}

TEST_F(AutogradTest, GradReturnsGradientsWithoutTouchingDotGrad) {
  Tensor x = tensor({1.0, 2.0}).requires_grad_();
  Tensor w = tensor({3.0, -1.0}).requires_grad_();
  Tensor unused = tensor({0.0}).requires_grad_();
  Tensor h = x * w;
  Tensor y1 = h.sum(), y2 = (h * h).sum();
  // d(y1 + y2)/dx = w (1 + 2h), /dw = x (1 + 2h), /dh = 1 + 2h; with y1 weighted 2: 2 + 2h.
  std::vector<Tensor> g = grad({y1, y2}, {x, w, h}, {tensor(2.0), Tensor()}, true);
  ASSERT_EQ(g.size(), 3u);
  EXPECT_FLOAT_EQ(g[0][0].item<float>(), 3.0f * (2 + 6));
  EXPECT_FLOAT_EQ(g[1][1].item<float>(), 2.0f * (2 - 4));
  EXPECT_FLOAT_EQ(g[2][1].item<float>(), 2.0f - 4);
  EXPECT_FALSE(x.grad().defined());
  EXPECT_FALSE(w.grad().defined());
  // An input listed twice gets its gradient twice; an unused one throws unless allowed.
  g = grad({y1}, {x, unused, x}, {}, true, true);
  EXPECT_FALSE(g[1].defined());
  EXPECT_FLOAT_EQ(g[2][0].item<float>(), 3.0f);
  EXPECT_THROW(grad({y1}, {x, unused}, {}, true), Error);
  EXPECT_THROW(grad({y1}, {ones({2})}, {}, true), Error);
  grad({y2}, {x});  // not retained: the graph's saved tensors go
  EXPECT_THROW(grad({y2}, {x}), Error);
}

TEST_F(AutogradTest, BackwardFromSeveralRootsIsOnePass) {
  Tensor x = tensor({1.0, 2.0}).requires_grad_();
  Tensor a = x * 3.0;
  Tensor b = (a * a).sum();  // b depends on a: a's node waits for b's gradient
  int calls = 0;
  register_hook(a, [&](const Tensor& g) {
    ++calls;
    return Tensor();
  });
  backward({a, b}, {tensor({1.0, 10.0}), Tensor()});
  EXPECT_EQ(calls, 1);
  // d/dx: 3 * (r + 2a) with r = (1, 10), a = (3, 6)
  EXPECT_FLOAT_EQ(x.grad()[0].item<float>(), 3.0f * (1 + 6));
  EXPECT_FLOAT_EQ(x.grad()[1].item<float>(), 3.0f * (10 + 12));
  backward(std::vector<Tensor>{x}, std::vector<Tensor>{tensor({1.0, 1.0})});  // a leaf root
  EXPECT_FLOAT_EQ(x.grad()[0].item<float>(), 22.0f);
  EXPECT_THROW(backward({a, b}, {Tensor()}), Error);  // two roots, one gradient
  EXPECT_THROW(backward(std::vector<Tensor>{}, std::vector<Tensor>{}), Error);
}

TEST_F(AutogradTest, NodesRunLatestCreatedFirstAsTorchsEngine) {
  // torch 2.15 runs the ready node of the highest sequence number first: b's product (made after
  // a's) delivers its gradient first, whichever operand of the sum it is; both print ['b', 'a'].
  Tensor a = ones({3}).requires_grad_(), b = ones({3}).requires_grad_();
  std::string order;
  register_post_accumulate_grad_hook(a, [&](const Tensor&) { order += 'a'; });
  register_post_accumulate_grad_hook(b, [&](const Tensor&) { order += 'b'; });
  {
    Tensor y1 = a * 2.0, y2 = b * 3.0;
    (y2 + y1).sum().backward();
  }
  EXPECT_EQ(order, "ba");
  order.clear();
  {
    Tensor y1 = a * 2.0, y2 = b * 3.0;
    (y1 + y2).sum().backward();
  }
  EXPECT_EQ(order, "ba");
}

TEST_F(AutogradTest, SavedTensorsGoAsSoonAsTheirNodeHasRunWithoutRetainGraph) {
  // x * big saves big for x's gradient; once that node has run, big's storage is gone while the
  // pass goes on (x's hook runs inside it), as torch frees a node's saved variables.
  Tensor x = ones({4}).requires_grad_();
  Tensor big = full({4}, 2.0f) * 1.0;
  std::weak_ptr<Storage> big_storage = big.impl()->storage;
  Tensor y = x * big;
  big = Tensor();
  ASSERT_FALSE(big_storage.expired());  // held by the graph
  bool seen = false;
  const int64_t hook = register_post_accumulate_grad_hook(x, [&](const Tensor& leaf) {
    seen = true;
    EXPECT_TRUE(big_storage.expired()) << "MulBackward0's saved tensor outlived its node";
    EXPECT_FLOAT_EQ(leaf.grad()[0].item<float>(), 2.0f * std::exp(2.0f));
  });
  (y.exp() * 1.0).sum().backward();
  EXPECT_TRUE(seen);
  remove_post_accumulate_grad_hook(x, hook);
  // A second pass through the freed node names it.
  try {
    (y * 1.0).sum().backward();
    ADD_FAILURE() << "a second pass through released nodes did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("retain_graph"), std::string::npos) << e.what();
  }
  // With retain_graph the saved tensors stay for the next pass.
  Tensor z = x * (full({4}, 3.0f) * 1.0);
  z.sum().backward(Tensor(), true);
  z.sum().backward();
  EXPECT_FLOAT_EQ(x.grad()[0].item<float>(), 2.0f * std::exp(2.0f) + 3.0f + 3.0f);
}

TEST_F(AutogradTest, AGradientThatIsAViewOfANewTensorIsKeptNotCopied) {
  // A formula returning a view of a tensor only it made (matmul's results are such views): the
  // leaf keeps that storage as its .grad, and a non-leaf input adds later gradients into it in
  // place, rather than copying (a 256 MiB gradient of gathered expert weights was cloned).
  Tensor x = ones({8, 4}).requires_grad_();
  const void* made = nullptr;
  auto viewed_grad = [&made](const Node&, const Tensor& g) {
    Tensor fresh = g.reshape({4, 8}) * 1.0;  // a new tensor, then a view of it
    made = fresh.data_ptr<float>();
    return std::vector<Tensor>{fresh.view({8, 4})};
  };
  Tensor y = detail::record(x * 1.0, "TestViewBackward", {&x}, viewed_grad);
  y.sum().backward();
  ASSERT_NE(made, nullptr);
  EXPECT_EQ(static_cast<const void*>(x.grad().data_ptr<float>()), made);
  EXPECT_FLOAT_EQ(x.grad()[7][3].item<float>(), 1.0f);
}

TEST_F(AutogradTest, SeedStyleTrainingStep) {
  // Seed 003's SelfAttention_v1 trained one step by hand: loss decreases along -grad.
  manual_seed(123);
  nn::SelfAttentionV1 m(3, 2);
  Tensor x = rand({6, 3});
  Tensor target = rand({6, 2});
  auto loss_of = [&] { return (m(x) - target).pow(2).mean(); };
  Tensor loss = loss_of();
  loss.backward();
  const double before = loss.item<double>();
  {
    NoGradGuard guard;
    for (Tensor p : m.parameters()) p.sub_(p.grad() * 0.5);
  }
  m.zero_grad();
  EXPECT_LT(loss_of().item<double>(), before);
  for (Tensor p : m.parameters()) EXPECT_FALSE(p.grad().defined());
}

}  // namespace
}  // namespace attn

// The ops of today's model programs in the C++ API: RMSNorm (functional and module), cos and sin
// with their gradients, outer. References: the formulas in double on the same float inputs, and
// the C library's cosf/sinf (the CPU kernel's own functions, so exact).
#include <attn/attn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "test_util.h"

namespace {

using attn::Shape;
using attn::Tensor;
using attn::testing::outcome;

std::vector<float> values(const Tensor& t) { return t.contiguous().to_float_vector(); }

TEST(ModelOps, RmsNormMatchesTheFormulaAndDifferentiates) {
  attn::manual_seed(0);
  const Tensor x = attn::randn({3, 4, 16}).requires_grad_();
  const Tensor w = attn::randn({16}).requires_grad_();
  const double eps = 1e-6;
  const Tensor y = attn::nn::functional::rms_norm(x, {16}, w, eps);
  ASSERT_EQ(y.shape(), (Shape{3, 4, 16}));
  const auto xv = values(x), wv = values(w), yv = values(y);
  for (int64_t r = 0; r < 12; ++r) {
    double ss = 0;
    for (int64_t j = 0; j < 16; ++j) ss += double(xv[r * 16 + j]) * xv[r * 16 + j];
    const double rs = 1.0 / std::sqrt(ss / 16 + eps);
    for (int64_t j = 0; j < 16; ++j)
      EXPECT_NEAR(yv[r * 16 + j], xv[r * 16 + j] * rs * wv[j], 1e-5) << r << " " << j;
  }
  // d/dw sum(y) = sum over rows of x * rsqrt(mean(x^2) + eps).
  y.sum().backward();
  const auto gw = values(w.grad());
  for (int64_t j = 0; j < 16; ++j) {
    double want = 0;
    for (int64_t r = 0; r < 12; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < 16; ++i) ss += double(xv[r * 16 + i]) * xv[r * 16 + i];
      want += xv[r * 16 + j] / std::sqrt(ss / 16 + eps);
    }
    EXPECT_NEAR(gw[j], want, 1e-4);
  }
  EXPECT_TRUE(x.grad().defined());
}

TEST(ModelOps, RmsNormModuleOverTrailingDims) {
  attn::nn::RMSNorm m({2, 8});
  ASSERT_TRUE(m.weight.defined());
  EXPECT_EQ(m.weight.shape(), (Shape{2, 8}));
  EXPECT_EQ(m.named_parameters().size(), 1u);
  attn::manual_seed(1);
  const Tensor x = attn::randn({5, 2, 8});
  // eps unset: float32's machine epsilon, as torch's None.
  const Tensor want = attn::nn::functional::rms_norm(x, {2, 8}, m.weight, 1.1920928955078125e-07);
  EXPECT_TRUE(attn::equal(m(x), want));
  attn::nn::RMSNorm plain({8}, 1e-5, false);
  EXPECT_FALSE(plain.weight.defined());
  EXPECT_TRUE(plain.named_parameters().empty());
}

TEST(ModelOps, RmsNormNamesTheShapes) {
  const Tensor x = attn::ones({2, 3});
  EXPECT_EQ(outcome([&] { attn::nn::functional::rms_norm(x, {4}); }),
            "[rms_norm] given normalized_shape=(4,), expected input with shape (*, 4), but got "
            "input of size (2, 3)");
  EXPECT_EQ(outcome([&] { attn::nn::functional::rms_norm(x, {3}, attn::ones({2})); }),
            "[rms_norm] weight (2,) must have the shape normalized_shape (3,)");
  EXPECT_NE(outcome([&] { attn::nn::RMSNorm({0}); }), "");
}

// cos and sin are vector polynomials within 2 ulp of the C library's (tests/cpp/test_unary.cpp).
TEST(ModelOps, CosSinAreWithinUlpsOfTheCLibraryAndDifferentiate) {
  attn::manual_seed(2);
  const Tensor x = (attn::randn({65}) * 4.0).detach().requires_grad_();
  const Tensor c = attn::cos(x), s = x.sin();
  const auto xv = values(x), cv = values(c), sv = values(s);
  for (std::size_t i = 0; i < xv.size(); ++i) {
    EXPECT_NEAR(cv[i], std::cos(xv[i]), 2.5e-7 * std::fabs(std::cos(xv[i])));
    EXPECT_NEAR(sv[i], std::sin(xv[i]), 2.5e-7 * std::fabs(std::sin(xv[i])));
  }
  (c + s).sum().backward();
  const auto g = values(x.grad());
  for (std::size_t i = 0; i < xv.size(); ++i)
    EXPECT_FLOAT_EQ(g[i], std::cos(xv[i]) - std::sin(xv[i]));
  Tensor y = x.detach().clone();
  y.cos_();
  EXPECT_TRUE(attn::equal(y, c.detach()));
}

TEST(ModelOps, OuterIsEachProductOnce) {
  const Tensor a = attn::tensor({1.5, -2.0, 3.0}), b = attn::tensor({0.1, 7.0});
  const Tensor o = attn::outer(a, b);
  ASSERT_EQ(o.shape(), (Shape{3, 2}));
  const auto av = values(a), bv = values(b), ov = values(o);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 2; ++j) EXPECT_EQ(ov[i * 2 + j], av[i] * bv[j]);
  EXPECT_EQ(outcome([&] {
              attn::outer(attn::ones({2, 2}), b);
            }),
            "[outer] expected 1-D vectors, got (2, 2) and (2,)");
}

TEST(ModelOps, SeveralIndexTensorsOnAdjacentDims) {
  using attn::TensorIndex;
  const Tensor x = attn::arange(24).reshape({2, 3, 4});
  const Tensor rows = attn::tensor({int64_t(1), int64_t(0), int64_t(-1)}),
               cols = attn::tensor({int64_t(3), int64_t(0), int64_t(2)});
  // x[:, rows, cols] -> (2, 3): x[b, rows[i], cols[i]].
  const Tensor y = x.index({attn::indexing::Slice(), rows, cols});
  ASSERT_EQ(y.shape(), (Shape{2, 3}));
  const std::vector<int64_t> want = {7, 0, 10, 19, 12, 22};
  for (int64_t i = 0; i < 6; ++i) EXPECT_EQ(y.reshape({-1}).index({i}).item<int64_t>(), want[i]);
  Tensor z = attn::zeros({3, 4});
  z.index_put_({rows, cols}, attn::Scalar(5.0));
  EXPECT_EQ(z.sum().item<float>(), 15.0f);
  EXPECT_EQ(z.index({1, 3}).item<float>(), 5.0f);
  EXPECT_NE(outcome([&] {
              x.index({rows, attn::indexing::Slice(), cols});
            }).find("several index tensors are supported on adjacent dims"),
            std::string::npos);
}

}  // namespace

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

// The complex product of Meta's rotary embeddings (view_as_complex(x) * freqs_cis): each part two
// float products and one float sum, each rounded (torch's complex64 multiply). The reference
// rounds every step to float from double, which is exact for one product or one sum.
float cmul_part(float p1, float q1, float p2, float q2, bool minus) {
  const float x = float(double(p1) * double(q1)), y = float(double(p2) * double(q2));
  return float(minus ? double(x) - double(y) : double(x) + double(y));
}

TEST(ModelOps, ComplexMulIsTorchsRoundingOnStridedBroadcastPairs) {
  const int threads = attn::get_num_threads();
  attn::Generator gen(7);
  // a: (B, L, H, D/2) pairs read through a transposed view; b: (L, 1, D/2) broadcast over B and H.
  const int64_t B = 3, L = 70, H = 4, P = 24;
  const Tensor a = attn::randn({B, H, L, P, 2}, &gen).transpose(1, 2);
  const Tensor b = attn::randn({L, 1, P, 2}, &gen);
  const auto av = values(a), bv = values(b);
  for (int nt : {1, 2}) {
    attn::set_num_threads(nt);
    for (bool conj : {false, true}) {
      SCOPED_TRACE("threads " + std::to_string(nt) + " conj " + std::to_string(conj));
      const Tensor ab = attn::complex_mul(a, b, conj);
      ASSERT_EQ(ab.shape(), (Shape{B, L, H, P, 2}));
      const auto o = values(ab);
      int64_t bad = 0;
      for (int64_t k = 0; k < B * L * H * P; ++k) {
        const int64_t l = (k / (H * P)) % L, p = k % P;
        const float ar = av[2 * k], ai = av[2 * k + 1];
        const float br = bv[2 * (l * P + p)], bi = bv[2 * (l * P + p) + 1];
        const float re = conj ? cmul_part(ar, br, ai, bi, false) : cmul_part(ar, br, ai, bi, true);
        const float im = conj ? cmul_part(ai, br, ar, bi, true) : cmul_part(ar, bi, ai, br, false);
        bad += o[2 * k] != re || o[2 * k + 1] != im;
      }
      EXPECT_EQ(bad, 0);
      if (!conj) {  // b * a: the same bits (the broadcast operand first)
        EXPECT_TRUE(attn::equal(attn::complex_mul(b, a), ab));
      }
    }
  }
  attn::set_num_threads(threads);
}

TEST(ModelOps, ComplexMulGradientsAreTorchsComplexOnes) {
  attn::Generator gen(8);
  for (bool conj : {false, true}) {
    SCOPED_TRACE(conj ? "a * conj(b)" : "a * b");
    const Tensor a = attn::randn({2, 5, 3, 2}, &gen).requires_grad_();
    const Tensor b = attn::randn({5, 1, 2}, &gen).requires_grad_();
    const Tensor w = attn::randn({2, 5, 3, 2}, &gen);  // the upstream gradient g
    (attn::complex_mul(a, b, conj) * w).sum().backward();
    // For a real loss, with g = w as complex numbers: d/da = g * conj(b') and d/db' = g * conj(a),
    // where b' = conj(b) when conj is set (and then d/db = conj(d/db')).
    const auto av = values(a), bv = values(b), wv = values(w);
    const auto ga = values(a.grad()), gb = values(b.grad());
    std::vector<double> want_b(10, 0.0);
    for (int64_t k = 0; k < 30; ++k) {
      const int64_t j = (k / 3) % 5;
      const double gr = wv[2 * k], gi = wv[2 * k + 1], ar = av[2 * k], ai = av[2 * k + 1];
      const double br = bv[2 * j], bi = conj ? -bv[2 * j + 1] : bv[2 * j + 1];
      EXPECT_NEAR(ga[2 * k], gr * br + gi * bi, 1e-5) << k;
      EXPECT_NEAR(ga[2 * k + 1], gi * br - gr * bi, 1e-5) << k;
      want_b[2 * j] += gr * ar + gi * ai;
      want_b[2 * j + 1] += (gi * ar - gr * ai) * (conj ? -1 : 1);
    }
    for (int j = 0; j < 10; ++j) EXPECT_NEAR(gb[j], want_b[j], 1e-4) << j;
  }
}

TEST(ModelOps, ComplexMulRefusesWhatIsNotPairs) {
  EXPECT_EQ(outcome([] { attn::complex_mul(attn::ones({3, 3}), attn::ones({3, 2})); }),
            "[complex_mul] a must be float32 (real, imaginary) pairs in a last dim of 2, got (3, 3) "
            "float32");
  EXPECT_EQ(outcome([] {
              attn::complex_mul(attn::ones({2, 2}), attn::ones({2}, attn::Dtype::Int64));
            }),
            "[complex_mul] b must be float32 (real, imaginary) pairs in a last dim of 2, got (2,) "
            "int64");
  EXPECT_NE(outcome([] { attn::complex_mul(attn::ones({3, 2}), attn::ones({4, 2})); })
                .find("[complex_mul]"),
            std::string::npos);
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

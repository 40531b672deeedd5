// The special and trigonometric functions of src/ops/special.cpp (log1p, expm1, log2, log10, exp2,
// erf, erfc, tan, sinh, cosh, asin, acos, atan): values are the C library's float functions, and
// gradients are their derivatives evaluated in double (tests/python/test_special_vs_torch.py
// compares both with torch).
#include <attn/autograd.h>
#include <attn/ops.h>
#include <attn/tensor.h>
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>
#include <vector>

#include "test_util.h"

namespace attn {
namespace {

struct Case {
  std::string name;
  Tensor (Tensor::*fn)() const;
  float (*value)(float);
  double (*derivative)(double);
  std::vector<double> xs;
};

TEST(Special, ValuesAreTheCLibrarysAndGradientsTheDerivatives) {
  const std::vector<double> wide = {-3.5, -1.0, -0.25, 0.0, 1e-6, 0.5, 2.0, 7.0};
  const std::vector<double> unit = {-0.9, -0.5, 0.0, 0.3, 0.99};
  const std::vector<double> pos = {1e-6, 0.1, 1.0, 3.0, 1e6};
  const std::vector<double> above_one = {1.05, 1.5, 3.0, 1e3};  // x^2 - 1 in float: cancels near 1
  const std::vector<Case> cases = {
      {"log1p",
       &Tensor::log1p,
       [](float x) { return std::log1p(x); },
       [](double x) { return 1 / (1 + x); },
       {-0.5, 1e-7, 0.0, 3.0}},
      {"expm1", &Tensor::expm1, [](float x) { return std::expm1(x); },
       [](double x) { return std::exp(x); }, wide},
      {"log2", &Tensor::log2, [](float x) { return std::log2(x); },
       [](double x) { return 1 / (x * std::log(2.0)); }, pos},
      {"log10", &Tensor::log10, [](float x) { return std::log10(x); },
       [](double x) { return 1 / (x * std::log(10.0)); }, pos},
      {"exp2", &Tensor::exp2, [](float x) { return std::exp2(x); },
       [](double x) { return std::exp2(x) * std::log(2.0); }, wide},
      {"erf", &Tensor::erf, [](float x) { return std::erf(x); },
       [](double x) { return 2 / std::sqrt(M_PI) * std::exp(-x * x); }, wide},
      {"erfc", &Tensor::erfc, [](float x) { return std::erfc(x); },
       [](double x) { return -2 / std::sqrt(M_PI) * std::exp(-x * x); }, wide},
      {"tan", &Tensor::tan, [](float x) { return std::tan(x); },
       [](double x) { return 1 / (std::cos(x) * std::cos(x)); }, unit},
      {"sinh", &Tensor::sinh, [](float x) { return std::sinh(x); },
       [](double x) { return std::cosh(x); }, wide},
      {"cosh", &Tensor::cosh, [](float x) { return std::cosh(x); },
       [](double x) { return std::sinh(x); }, wide},
      {"asin", &Tensor::asin, [](float x) { return std::asin(x); },
       [](double x) { return 1 / std::sqrt(1 - x * x); }, unit},
      {"acos", &Tensor::acos, [](float x) { return std::acos(x); },
       [](double x) { return -1 / std::sqrt(1 - x * x); }, unit},
      {"atan", &Tensor::atan, [](float x) { return std::atan(x); },
       [](double x) { return 1 / (1 + x * x); }, wide},
      {"asinh", &Tensor::asinh, [](float x) { return std::asinh(x); },
       [](double x) { return 1 / std::sqrt(x * x + 1); }, wide},
      {"acosh", &Tensor::acosh, [](float x) { return std::acosh(x); },
       [](double x) { return 1 / std::sqrt(x * x - 1); }, above_one},
      {"atanh", &Tensor::atanh, [](float x) { return std::atanh(x); },
       [](double x) { return 1 / (1 - x * x); }, unit},
  };
  for (const Case& c : cases) {
    std::vector<float> xf(c.xs.begin(), c.xs.end());
    const Tensor x = from_vector(xf, {int64_t(xf.size())}).requires_grad_();
    const Tensor y = (x.*c.fn)();
    y.sum().backward();
    const Tensor g = x.grad();
    for (std::size_t i = 0; i < xf.size(); ++i) {
      EXPECT_EQ(y.data_ptr<float>()[i], c.value(xf[i])) << c.name << "(" << xf[i] << ")";
      const double want = c.derivative(double(xf[i]));
      EXPECT_NEAR(g.data_ptr<float>()[i], want, 1e-5 * std::max(1.0, std::fabs(want)))
          << c.name << "'(" << xf[i] << ")";
    }
  }
}

TEST(Special, IntegersBecomeFloatAndBoolIsRefused) {
  const Tensor y = tensor({1, 2}).log2();
  EXPECT_EQ(y.dtype(), Dtype::Float32);
  EXPECT_EQ(y.data_ptr<float>()[1], 1.0f);
  EXPECT_ERROR_HAS(tensor({true}).erf(), "[erf] not implemented for bool");
}

}  // namespace
}  // namespace attn

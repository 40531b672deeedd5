// The unary float kernels (src/backend/cpu/unary.cpp) on every instruction set: exp, sigmoid and
// tanh in vector form within a few ulp of the C library (NaN, infinities, overflow and denormal
// results exactly its values), the element-exact ops bit for bit the C library's, and a strided
// view's results those of its contiguous copy.
#include <attn/ops.h>
#include <attn/tensor.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "isa_scope.h"

namespace attn {
namespace {

namespace K = kernels;
using testing::IsaScope;

// Inputs across each function's range, with the edges where the vector forms hand over to the C
// library (the saturation of exp near +-88, tanh at +-9) and the special values, scattered so that
// most runs of 256 mix both.
std::vector<float> inputs() {
  std::vector<float> xs;
  for (int i = -4000; i <= 4000; ++i) xs.push_back(float(i) * 0.025f);  // [-100, 100]
  for (float v = 1e-6f; v < 1e2f; v *= 1.37f) {
    xs.push_back(v);
    xs.push_back(-v);
  }
  // Log-uniform magnitudes from 1e-8 to 1e2 of either sign: every binade of the polynomials.
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> exponent(-8.0f, 2.0f);
  for (int i = 0; i < 60000; ++i)
    xs.push_back((i % 2 ? -1.0f : 1.0f) * std::pow(10.0f, exponent(gen)));
  // log's whole normal range; sin's and cos's reduction range and past it.
  std::uniform_real_distribution<float> wide_exponent(-37.5f, 38.0f), angle(-9000.0f, 9000.0f);
  for (int i = 0; i < 20000; ++i) {
    xs.push_back(std::pow(10.0f, wide_exponent(gen)));
    xs.push_back(angle(gen));
  }
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {
      0.0f, -0.0f, inf, -inf, std::nanf(""), 1e-40f, -1e-40f, -87.0f, -87.5f, -88.0f, -88.5f,
      -103.0f, -104.0f, 88.0f, 88.5f, 88.8f, 89.0f, 9.0f, -9.0f, 9.01f, -9.01f, 3.0e38f, -3.0e38f,
      // sin, cos: at and past the reduction's range, near multiples of pi/2
      8192.0f, -8192.0f, 8192.5f, -8192.5f, 1e5f, 355.0f, 3.14159274f, 1.57079637f, 6.28318548f,
      1e-30f,
      // log: the normal range's ends, below it, around the split at sqrt 2
      1.0f, std::numeric_limits<float>::min(), std::numeric_limits<float>::max(), 1.1e-38f,
      0.70710677f, 1.41421354f, 1.41421366f};
  for (size_t i = 0; i < sizeof(specials) / sizeof(float); ++i)
    xs.insert(xs.begin() + int64_t(i * 331 % xs.size()), specials[i]);
  return xs;
}

// The distance in units in the last place between two finite floats of one sign (or zeros).
int64_t ulps(float a, float b) {
  auto key = [](float v) {
    const int32_t i = std::bit_cast<int32_t>(v);
    return i < 0 ? int64_t(std::numeric_limits<int32_t>::min()) - i : int64_t(i);
  };
  return std::llabs(key(a) - key(b));
}

std::vector<float> values(const Tensor& t) {
  const Tensor c = t.contiguous();
  return {c.data_ptr<float>(), c.data_ptr<float>() + c.numel()};
}

struct Fn {
  const char* name;
  Tensor (Tensor::*op)() const;
  float (*c_library)(float);
  int64_t max_ulps;  // 0: bit for bit
};

const std::vector<Fn>& functions() {
  static const std::vector<Fn> fns = {
      {"exp", &Tensor::exp, [](float x) { return std::exp(x); }, 2},
      {"sigmoid", &Tensor::sigmoid, [](float x) { return 1.0f / (1.0f + std::exp(-x)); }, 3},
      {"tanh", &Tensor::tanh, [](float x) { return std::tanh(x); }, 2},
      {"sqrt", &Tensor::sqrt, [](float x) { return std::sqrt(x); }, 0},
      {"rsqrt", &Tensor::rsqrt, [](float x) { return 1.0f / std::sqrt(x); }, 0},
      {"abs", &Tensor::abs, [](float x) { return std::fabs(x); }, 0},
      {"neg", &Tensor::neg, [](float x) { return -x; }, 0},
      {"relu", &Tensor::relu, [](float x) { return x < 0 ? 0.0f : x; }, 0},
      {"ceil", &Tensor::ceil, [](float x) { return std::ceil(x); }, 0},
      {"floor", &Tensor::floor, [](float x) { return std::floor(x); }, 0},
      {"cos", &Tensor::cos, [](float x) { return std::cos(x); }, 2},
      {"sin", &Tensor::sin, [](float x) { return std::sin(x); }, 2},
      {"log", &Tensor::log, [](float x) { return std::log(x); }, 2},
      {"log1p", &Tensor::log1p, [](float x) { return std::log1p(x); }, 0},
  };
  return fns;
}

void check_against_c_library(const std::vector<float>& xs, const std::string& isa) {
  const Tensor x = from_vector(xs, {int64_t(xs.size())});
  for (const Fn& fn : functions()) {
    SCOPED_TRACE(isa + " " + fn.name);
    const std::vector<float> got = values((x.*fn.op)());
    ASSERT_EQ(got.size(), xs.size());
    int64_t worst = 0, mismatches = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
      const float want = fn.c_library(xs[i]);
      bool ok;
      if (std::isnan(want) || std::isinf(want) || want == 0.0f ||
          std::fpclassify(want) == FP_SUBNORMAL || fn.max_ulps == 0) {
        ok = std::bit_cast<uint32_t>(got[i]) == std::bit_cast<uint32_t>(want) ||
             (std::isnan(want) && std::isnan(got[i]));
      } else {
        const int64_t u = std::signbit(got[i]) == std::signbit(want) && std::isfinite(got[i])
                              ? ulps(got[i], want)
                              : std::numeric_limits<int64_t>::max();
        worst = std::max(worst, u);
        ok = u <= fn.max_ulps;
      }
      if (!ok && ++mismatches <= 5)
        ADD_FAILURE() << fn.name << "(" << xs[i] << ") = " << got[i] << ", the C library " << want;
    }
    EXPECT_EQ(mismatches, 0);
    EXPECT_LE(worst, fn.max_ulps);
  }
}

TEST(Unary, WithinUlpsOfTheCLibraryOnEveryInstructionSet) {
  const std::vector<float> xs = inputs();
  int tried = 0;
  for (K::Isa isa : {K::Isa::Scalar, K::Isa::Avx2, K::Isa::Avx512, K::Isa::Neon, K::Isa::Sve}) {
    IsaScope scope(isa);
    if (!scope.ok()) continue;
    ++tried;
    check_against_c_library(xs, K::isa_name(isa));
  }
  EXPECT_GE(tried, 2);  // the baseline and the machine's own
}

TEST(Unary, ViewsGiveTheirContiguousCopysBits) {
  std::vector<float> xs = inputs();
  xs.resize(xs.size() / 64 * 64);
  const Tensor x = from_vector(xs, {64, int64_t(xs.size()) / 64});
  const Tensor xt = x.transpose(0, 1);  // strided: gathered, then computed in place
  ASSERT_FALSE(xt.is_contiguous());
  for (const Fn& fn : functions()) {
    SCOPED_TRACE(fn.name);
    const std::vector<float> a = values((xt.*fn.op)()), b = values((xt.contiguous().*fn.op)());
    ASSERT_EQ(a.size(), b.size());
    for (size_t i = 0; i < a.size(); ++i)
      ASSERT_TRUE(std::bit_cast<uint32_t>(a[i]) == std::bit_cast<uint32_t>(b[i]) ||
                  (std::isnan(a[i]) && std::isnan(b[i])))
          << i << ": " << a[i] << " vs " << b[i];
  }
  // The predicates read a strided input where it lies.
  const Tensor nan_t = xt.isnan(), inf_t = xt.isinf(), fin_t = xt.isfinite();
  const Tensor c = xt.contiguous();
  const std::vector<float> cv = values(c);
  const Tensor nan_c = nan_t.contiguous(), inf_c = inf_t.contiguous(), fin_c = fin_t.contiguous();
  for (int64_t i = 0; i < c.numel(); ++i) {
    ASSERT_EQ(nan_c.data_ptr<bool>()[i], std::isnan(cv[i])) << i;
    ASSERT_EQ(inf_c.data_ptr<bool>()[i], std::isinf(cv[i])) << i;
    ASSERT_EQ(fin_c.data_ptr<bool>()[i], std::isfinite(cv[i])) << i;
  }
}

// As torch's: a permuted view that fills a block of its storage (a transpose, a permutation with
// size-1 dims anywhere) gives a result with its strides, computed in memory order; a view that
// skips elements gives a contiguous one. Values, bfloat16 rounding and gradients are the
// contiguous copy's.
TEST(Unary, PermutedViewsKeepTheirLayout) {
  const Tensor x = randn({3, 1, 40, 50});
  const Tensor p = x.permute({2, 1, 0, 3}).transpose(0, 3);  // (50, 1, 3, 40)
  const Tensor y = p.exp();
  EXPECT_EQ(y.shape(), p.shape());
  EXPECT_EQ(y.strides()[0], p.strides()[0]);
  EXPECT_EQ(y.strides()[2], p.strides()[2]);
  EXPECT_EQ(y.strides()[3], p.strides()[3]);
  EXPECT_FALSE(y.is_contiguous());
  EXPECT_EQ(values(y), values(p.contiguous().exp()));
  EXPECT_EQ(values(p.isnan().to(Dtype::Float32)),
            values(p.contiguous().isnan().to(Dtype::Float32)));
  EXPECT_EQ(p.isnan().strides(), y.strides());

  // Elements skipped: gathered into a block whose dims nest as the view's strides do.
  const Tensor stepped = x.transpose(2, 3).slice(2, 0, std::nullopt, 2);  // (3, 1, 25, 40)
  const Tensor st = stepped.tanh();
  EXPECT_EQ(st.strides()[0], 1000);
  EXPECT_EQ(st.strides()[2], 1);
  EXPECT_EQ(st.strides()[3], 25);
  EXPECT_EQ(values(st), values(stepped.contiguous().tanh()));
  EXPECT_EQ(values(stepped.isinf().to(Dtype::Float32)),
            values(stepped.contiguous().isinf().to(Dtype::Float32)));
  // A repeated element decides nothing: row-major.
  const Tensor expanded = randn({40, 1}).expand({40, 30}).transpose(0, 1);
  EXPECT_TRUE(expanded.log().is_contiguous());
  EXPECT_EQ(values(expanded.exp()), values(expanded.contiguous().exp()));

  // bfloat16: computed in float32, rounded once, in the view's layout.
  const Tensor b = x.to(Dtype::BFloat16).permute({2, 1, 0, 3}).transpose(0, 3);
  ASSERT_FALSE(b.is_contiguous());
  const Tensor bs = b.sin();
  EXPECT_EQ(bs.dtype(), Dtype::BFloat16);
  EXPECT_FALSE(bs.is_contiguous());
  EXPECT_EQ(values(bs.to(Dtype::Float32)), values(b.contiguous().sin().to(Dtype::Float32)));

  // The gradient reaches the leaf in its own layout.
  Tensor w = randn({7, 9}).requires_grad_();
  Tensor e = w.transpose(0, 1).sigmoid();
  (e * e).sum().backward();
  const Tensor s = w.detach().sigmoid();
  EXPECT_LT((w.grad() - 2 * s * s * (1 - s)).abs().max().item<float>(), 1e-6f);
}

}  // namespace
}  // namespace attn

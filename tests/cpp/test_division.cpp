// Rounded division and remainders (src/ops/elementwise.cpp, src/backend/cpu/binary.cpp):
// floor_divide, remainder, fmod and div with a rounding mode, against Python's own // and % and
// C's fmod (the values below are what Python 3 prints for the same operands), with torch 1.13's
// gradients and refusals. tests/python/test_division_vs_torch.py compares every case with torch.
#include <attn/autograd.h>
#include <attn/ops.h>
#include <attn/tensor.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "test_util.h"

namespace attn {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

std::vector<float> floats(const Tensor& t) {
  const Tensor c = t.contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}
std::vector<int64_t> ints(const Tensor& t) {
  const Tensor c = t.contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

TEST(Division, IntegersRoundAsPython) {
  const Tensor a = tensor({-7, 7, -7, 7, 6, -6}), b = tensor({2, -2, -2, 2, -3, 4});
  // Python: [-7 // 2, 7 // -2, -7 // -2, 7 // 2, 6 // -3, -6 // 4] and the same with %.
  EXPECT_EQ(ints(floor_divide(a, b)), (std::vector<int64_t>{-4, -4, 3, 3, -2, -2}));
  EXPECT_EQ(ints(remainder(a, b)), (std::vector<int64_t>{1, -1, -1, 1, 0, 2}));
  EXPECT_EQ(ints(fmod(a, b)), (std::vector<int64_t>{-1, 1, -1, 1, 0, -2}));
  EXPECT_EQ(ints(div(a, b, "trunc")), (std::vector<int64_t>{-3, -3, 3, 3, -2, -1}));
  EXPECT_EQ(ints(div(a, b, "floor")), ints(floor_divide(a, b)));
  EXPECT_EQ(floor_divide(a, b).dtype(), Dtype::Int64);
  EXPECT_EQ(ints(floor_divide(Scalar(int64_t(7)), tensor({2, -2}))), (std::vector<int64_t>{3, -4}));
  EXPECT_EQ(ints(remainder(Scalar(int64_t(7)), tensor({2, -2}))), (std::vector<int64_t>{1, -1}));
  // A float scalar makes the result float: -7 // 2.5 == -3.0, -7 % 2.5 == 0.5.
  EXPECT_EQ(floats(tensor({-7}).floor_divide(Scalar(2.5))), (std::vector<float>{-3.0f}));
  EXPECT_EQ(floats(tensor({-7}).remainder(Scalar(2.5))), (std::vector<float>{0.5f}));
  // INT64_MIN // -1 wraps around (torch 1.13 dies of SIGFPE there).
  const int64_t lo = std::numeric_limits<int64_t>::min();
  EXPECT_EQ(ints(floor_divide(tensor({lo}), Scalar(int64_t(-1)))), (std::vector<int64_t>{lo}));
  EXPECT_EQ(ints(remainder(tensor({lo}), Scalar(int64_t(-1)))), (std::vector<int64_t>{0}));
}

TEST(Division, FloatsRoundAsPython) {
  const Tensor a = tensor({7.0, -7.0, 7.0, 5.0, -5.0, 5.0, kInf, 1.0, -1.0, -0.0});
  const Tensor b = tensor({0.1, 2.0, -2.0, kInf, kInf, -kInf, 2.0, 0.0, 0.0, 3.0});
  const std::vector<float> q = floats(floor_divide(a, b));
  // Python: 7.0 // 0.1 == 69.0 (not 70), -7.0 // 2 == -4, 7.0 // -2 == -4, 5 // inf == 0,
  // -5 // inf == -1, 5 // -inf == -1, inf // 2 is nan, 1 // 0 and -1 // 0 are +-inf (IEEE, as
  // torch), -0.0 // 3 == -0.0.
  EXPECT_EQ(q[0], 69.0f);
  EXPECT_EQ(q[1], -4.0f);
  EXPECT_EQ(q[2], -4.0f);
  EXPECT_EQ(q[3], 0.0f);
  EXPECT_EQ(q[4], -1.0f);
  EXPECT_EQ(q[5], -1.0f);
  EXPECT_TRUE(std::isnan(q[6]));
  EXPECT_EQ(q[7], kInf);
  EXPECT_EQ(q[8], -kInf);
  EXPECT_TRUE(q[9] == 0.0f && std::signbit(q[9]));
  const std::vector<float> r = floats(remainder(a, b));
  // Python: -7.0 % 2 == 1.0, 7.0 % -2 == -1.0, 5 % inf == 5, -5 % inf == inf, 5 % -inf == -inf.
  EXPECT_EQ(r[1], 1.0f);
  EXPECT_EQ(r[2], -1.0f);
  EXPECT_EQ(r[3], 5.0f);
  EXPECT_EQ(r[4], kInf);
  EXPECT_EQ(r[5], -kInf);
  EXPECT_TRUE(std::isnan(r[7]));  // a float divisor of 0: nan, as torch
  const std::vector<float> f = floats(fmod(a, b));
  EXPECT_EQ(f[1], -1.0f);
  EXPECT_EQ(f[2], 1.0f);
  EXPECT_EQ(f[4], -5.0f);
  const std::vector<float> t = floats(div(tensor({-7.0, 7.5}), Scalar(2.0), "trunc"));
  EXPECT_EQ(t, (std::vector<float>{-3.0f, 3.0f}));
}

TEST(Division, BroadcastsAndWorksInPlace) {
  Tensor x = tensor({{7.0, -7.0}, {9.0, -9.0}});
  const Tensor d = tensor({{2.0}, {-4.0}});
  EXPECT_EQ(floats(x.remainder(d)), (std::vector<float>{1.0f, 1.0f, -3.0f, -1.0f}));
  x.floor_divide_(d);
  EXPECT_EQ(floats(x), (std::vector<float>{3.0f, -4.0f, -3.0f, 2.0f}));
  Tensor i = tensor({7, -7});
  i.div_(Scalar(int64_t(2)), "trunc");
  EXPECT_EQ(ints(i), (std::vector<int64_t>{3, -3}));
  i.fmod_(Scalar(int64_t(-2)));
  EXPECT_EQ(ints(i), (std::vector<int64_t>{1, -1}));
  EXPECT_ERROR_HAS(i.remainder_(Scalar(1.5)), "can't be cast");
}

TEST(Division, RefusesIntegerZeroDivisorsBoolPairsAndUnknownModes) {
  Tensor x = tensor({7, 8});
  EXPECT_ERROR_HAS(floor_divide(x, tensor({2, 0})), "ZeroDivisionError");
  EXPECT_ERROR_HAS(remainder(x, Scalar(int64_t(0))), "[remainder]");
  EXPECT_ERROR_HAS(x.fmod_(tensor({0})), "ZeroDivisionError");
  EXPECT_EQ(ints(x), (std::vector<int64_t>{7, 8}));  // refused before anything was written
  EXPECT_ERROR_HAS(floor_divide(tensor({true}), tensor({true})), "two bool operands");
  EXPECT_ERROR_HAS(div(x, x, "round"), "one of None, 'trunc', or 'floor' but found 'round'");
}

TEST(Division, GradientsAsTorch) {
  const Tensor a = tensor({5.0, -5.0, 7.5}).requires_grad_();
  const Tensor b = tensor({2.0, 2.0, -2.0}).requires_grad_();
  remainder(a, b).sum().backward();
  // torch: d/da = 1, d/db = -floor(a / b) = {-2, 3, 4}.
  EXPECT_EQ(floats(a.grad()), (std::vector<float>{1.0f, 1.0f, 1.0f}));
  EXPECT_EQ(floats(b.grad()), (std::vector<float>{-2.0f, 3.0f, 4.0f}));
  const Tensor a2 = tensor({5.0, -5.0, 7.5}).requires_grad_();
  const Tensor b2 = tensor({2.0, 2.0, -2.0}).requires_grad_();
  fmod(a2, b2).sum().backward();  // d/db = -trunc(a / b) = {-2, 2, 3}
  EXPECT_EQ(floats(b2.grad()), (std::vector<float>{-2.0f, 2.0f, 3.0f}));
  const Tensor a3 = tensor({5.0, -5.0}).requires_grad_();
  a3.div(Scalar(2.0), "floor").sum().backward();
  EXPECT_EQ(floats(a3.grad()), (std::vector<float>{0.0f, 0.0f}));
  // floor_divide has no derivative in torch: the result is in the graph, a pass is refused.
  const Tensor y = floor_divide(a3, Scalar(2.0));
  EXPECT_TRUE(y.requires_grad());
  EXPECT_THROW(y.sum().backward(), NotImplementedError);
  EXPECT_THROW(remainder(Scalar(3.0), a3).sum().backward(), NotImplementedError);
}

}  // namespace
}  // namespace attn

// attn::randperm, attn::random_, Tensor::erfinv and the nn::init functions added with them,
// against values printed by PyTorch 1.13 (Debian python3-torch, CPU) with the calls quoted above
// each expectation. The Python tests (tests/python/test_data_vs_torch.py,
// test_nn_surface_vs_torch.py) compare against torch itself on many more cases.
#include <attn/attn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

namespace {

using attn::Dtype;
using attn::Tensor;

std::vector<int64_t> ints(const Tensor& t) {
  std::vector<int64_t> out;
  Tensor c = t.contiguous();
  for (int64_t i = 0; i < c.numel(); ++i) out.push_back(c.data_ptr<int64_t>()[i]);
  return out;
}

std::vector<int32_t> float_bits(const Tensor& t) {
  std::vector<int32_t> out;
  Tensor c = t.contiguous();
  for (int64_t i = 0; i < c.numel(); ++i) {
    int32_t b;
    std::memcpy(&b, c.data_ptr<float>() + i, 4);
    out.push_back(b);
  }
  return out;
}

TEST(RandomInt, RandpermMatchesTorch) {
  // torch.manual_seed(0); torch.randperm(10)
  attn::manual_seed(0);
  EXPECT_EQ(ints(attn::randperm(10)), (std::vector<int64_t>{4, 1, 7, 5, 3, 9, 0, 8, 6, 2}));
  // torch.randperm(5, generator=torch.Generator().manual_seed(42))
  attn::Generator g;
  g.manual_seed(42);
  EXPECT_EQ(ints(attn::randperm(5, &g)), (std::vector<int64_t>{2, 4, 3, 0, 1}));
  EXPECT_EQ(attn::randperm(0).numel(), 0);
  EXPECT_EQ(attn::randperm(4, nullptr, Dtype::Float32).dtype(), Dtype::Float32);
}

TEST(RandomInt, RandomMatchesTorch) {
  // torch.manual_seed(1); torch.empty(3, dtype=torch.int64).random_();
  // then .random_(-5, 5) on 4 elements and torch.empty(3).random_(0, 100)
  attn::manual_seed(1);
  Tensor a = attn::empty({3}, Dtype::Int64);
  attn::random_(a);
  EXPECT_EQ(ints(a), (std::vector<int64_t>{7692698082559361259LL, 4064269471072392264LL,
                                           2109959069025161LL}));
  Tensor b = attn::empty({4}, Dtype::Int64);
  attn::random_(b, -5, 5);
  EXPECT_EQ(ints(b), (std::vector<int64_t>{-4, -4, 4, -3}));
  Tensor c = attn::empty({3});
  attn::random_(c, 0, 100);
  EXPECT_EQ(c.to_float_vector(), (std::vector<float>{48.0f, 49.0f, 16.0f}));
  // torch.manual_seed(2); torch.empty(2, dtype=torch.int64).random_(0, 2**40): 64-bit draws
  attn::manual_seed(2);
  Tensor d = attn::empty({2}, Dtype::Int64);
  attn::random_(d, 0, int64_t{1} << 40);
  EXPECT_EQ(ints(d), (std::vector<int64_t>{722349427215LL, 1021908186696LL}));
}

TEST(RandomInt, RandomRejectsBadRanges) {
  Tensor t = attn::empty({2}, Dtype::Int64);
  try {
    attn::random_(t, 5, 5);
    FAIL() << "expected an error";
  } catch (const attn::Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("[random_] expects 'from' to be less than 'to'", 0), 0u)
        << e.what();
  }
  Tensor f = attn::empty({2});
  EXPECT_THROW(attn::random_(f, 0, int64_t{1} << 30), attn::Error);
  EXPECT_THROW(attn::randperm(-1), attn::Error);
}

TEST(Erfinv, MatchesTorchBits) {
  // torch.tensor([-0.999, -0.5, 0.0, 0.3, 0.7, 0.71, 0.9999]).erfinv(), as int32 bits
  Tensor x = attn::from_vector({-0.999f, -0.5f, 0.0f, 0.3f, 0.7f, 0.71f, 0.9999f}, {7});
  EXPECT_EQ(float_bits(x.erfinv()), (std::vector<int32_t>{-1072371307, -1091292930, 0, 1049329724,
                                                          1060871502, 1061128797, 1076891899}));
  Tensor edge = attn::from_vector({-1.0f, 1.0f, 1.5f}, {3});
  std::vector<float> y = edge.erfinv().to_float_vector();
  EXPECT_TRUE(std::isinf(y[0]) && y[0] < 0);
  EXPECT_TRUE(std::isinf(y[1]) && y[1] > 0);
  EXPECT_TRUE(std::isnan(y[2]));
}

TEST(InitMore, MatchesTorchBits) {
  // torch.manual_seed(3); t = torch.empty(2, 3); nn.init.trunc_normal_(t, std=0.5, a=-0.4, b=0.4)
  attn::manual_seed(3);
  Tensor t = attn::empty({2, 3});
  attn::nn::init::trunc_normal_(t, 0.0, 0.5, -0.4, 0.4);
  EXPECT_EQ(float_bits(t), (std::vector<int32_t>{-1094016302, -1097151312, -1105133116, -1094755749,
                                                 -1129840603, -1095794705}));
  // torch.manual_seed(3); t = torch.empty(3, 4);
  // nn.init.kaiming_normal_(t, mode='fan_out', nonlinearity='relu')
  attn::manual_seed(3);
  Tensor k = attn::empty({3, 4});
  attn::nn::init::kaiming_normal_(k, 0.0, "fan_out", "relu");
  EXPECT_EQ(float_bits(k), (std::vector<int32_t>{1059579709, 1041378633, 1033161136, -1090500608,
                                                 1025143682, -1081147464, 1049433772, 1062426810,
                                                 -1080689110, 1061965388, 1054490035, 1065443433}));
  EXPECT_DOUBLE_EQ(attn::nn::init::calculate_gain("tanh"), 5.0 / 3);
  EXPECT_THROW(attn::nn::init::calculate_gain("swish"), attn::Error);
  Tensor v = attn::empty({3});
  EXPECT_THROW(attn::nn::init::kaiming_normal_(v), attn::Error);  // fewer than 2 dims
  Tensor w = attn::empty({2, 2});
  EXPECT_THROW(attn::nn::init::kaiming_normal_(w, 0.0, "fan_avg"), attn::Error);
}

}  // namespace

// Tensors on a GPU (include/attn/device.h): creation, copies in every direction, strided views,
// conversions, errors. Runs only where a GPU is present (ctest label cuda; scripts/test_cuda.sh);
// elsewhere every test reports SKIPPED.
#include <attn/attn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <vector>

namespace {

using attn::Device;
using attn::Dtype;
using attn::Tensor;

#define REQUIRE_GPU() \
  if (!attn::cuda::is_available()) GTEST_SKIP() << "no CUDA GPU"

// Values that a lossy path would change: non-integers, negatives, a large magnitude.
Tensor sample(const attn::Shape& shape) {
  int64_t n = 1;
  for (int64_t s : shape) n *= s;
  Tensor t = attn::arange(0, n).to(Dtype::Float32);
  return (t * 0.37 - 5.5).reshape(shape);
}

bool same(const Tensor& a, const Tensor& b) {
  return a.shape() == b.shape() && a.dtype() == b.dtype() && attn::equal(a.cpu(), b.cpu());
}

TEST(CudaDevice, QueriesAndNames) {
  REQUIRE_GPU();
  EXPECT_GE(attn::cuda::device_count(), 1);
  EXPECT_EQ(attn::cuda::current_device(), 0);
  EXPECT_FALSE(attn::cuda::get_device_name(0).empty());
  Tensor g = attn::zeros({2}, Dtype::Float32, Device("cuda"));
  EXPECT_EQ(g.device(), Device("cuda:0"));  // "cuda" resolves to the current GPU
  EXPECT_TRUE(g.is_cuda());
  EXPECT_NE(g.repr().find("device='cuda:0'"), std::string::npos) << g.repr();
}

TEST(CudaDevice, RoundTripsEveryDtype) {
  REQUIRE_GPU();
  Tensor f = sample({3, 5, 7});
  for (const Tensor& t : {f, f.to(Dtype::Int64), f > 0.0}) {
    Tensor g = t.cuda();
    EXPECT_TRUE(g.is_cuda());
    EXPECT_EQ(g.dtype(), t.dtype());
    EXPECT_TRUE(same(g.cpu(), t));
    EXPECT_TRUE(g.cuda().is_same(g));  // already there: no copy
  }
}

TEST(CudaDevice, CreationOnTheGpu) {
  REQUIRE_GPU();
  EXPECT_TRUE(same(attn::zeros({4, 3}, Dtype::Float32, Device("cuda")), attn::zeros({4, 3})));
  EXPECT_TRUE(same(attn::ones({4}, Dtype::Int64, Device("cuda:0")), attn::ones({4}, Dtype::Int64)));
  EXPECT_TRUE(same(attn::full({2, 2}, 2.5, std::nullopt, Device("cuda")), attn::full({2, 2}, 2.5)));
  EXPECT_TRUE(same(attn::tensor({{1.0, 2.0}, {3.0, 4.0}}, std::nullopt, Device("cuda")),
                   attn::tensor({{1.0, 2.0}, {3.0, 4.0}})));
  Tensor g = attn::zeros({3}, Dtype::Float32, Device("cuda"));
  EXPECT_TRUE(attn::zeros_like(g).is_cuda());
  EXPECT_TRUE(attn::empty_like(g).is_cuda());
  EXPECT_TRUE(g.clone().is_cuda());
  g.fill_(7.0);
  EXPECT_FLOAT_EQ(g[1].item<float>(), 7.0f);
}

TEST(CudaDevice, StridedViewsCopyBothWays) {
  REQUIRE_GPU();
  Tensor c = sample({4, 6, 5});
  Tensor g = c.cuda();
  // A non-contiguous GPU view read back.
  EXPECT_TRUE(same(g.transpose(0, 2).cpu(), c.transpose(0, 2).contiguous()));
  EXPECT_TRUE(same(g.slice(1, 1, 6, 2).cpu(), c.slice(1, 1, 6, 2).contiguous()));
  EXPECT_TRUE(same(g.transpose(0, 2).contiguous().cpu(), c.transpose(0, 2).contiguous()));
  // A write into a strided GPU view leaves the elements between its strides alone.
  Tensor src = attn::full({4, 3, 5}, -1.0);
  g.slice(1, 0, 6, 2).copy_(src.cuda());
  c.slice(1, 0, 6, 2).copy_(src);
  EXPECT_TRUE(same(g, c));
  // Broadcast and conversion on the way.
  g.select(0, 2).copy_(attn::tensor({1, 2, 3, 4, 5}));
  c.select(0, 2).copy_(attn::tensor({1, 2, 3, 4, 5}));
  EXPECT_TRUE(same(g, c));
  // Device to device, and to a GPU with another dtype.
  Tensor g2 = attn::empty({4, 6, 5}, Dtype::Float32, Device("cuda"));
  g2.copy_(g);
  EXPECT_TRUE(same(g2, c));
  EXPECT_TRUE(same(c.to(Device("cuda"), Dtype::Int64), c.to(Dtype::Int64)));
}

TEST(CudaDevice, GradientsFlowBackAcrossDevices) {
  REQUIRE_GPU();
  Tensor x = sample({3, 4}).requires_grad_();
  Tensor y = x.cuda().cpu();
  EXPECT_FALSE(y.is_leaf());
  (y * 2.0).sum().backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_TRUE(x.grad().is_cpu());
  EXPECT_TRUE(attn::equal(x.grad(), attn::full({3, 4}, 2.0)));
  // A CPU tensor broadcast into a GPU one: its gradient sums over the broadcast dim.
  Tensor b = attn::tensor({1.0, 2.0, 3.0, 4.0}).to(Dtype::Float32).requires_grad_();
  Tensor g = attn::zeros({3, 4}, Dtype::Float32, Device("cuda"));
  g.copy_(b);
  (g.cpu() * 2.0).sum().backward();
  ASSERT_TRUE(b.grad().defined());
  EXPECT_TRUE(b.grad().is_cpu());
  EXPECT_TRUE(attn::equal(b.grad(), attn::full({4}, 6.0)));
}

// Two GPUs (tests/cuda/emulate/run.sh with ATTN_EMU_DEVICES=2 emulates them): peer copies,
// strided ones through the host, the current device, attention on the inputs' GPU.
TEST(CudaDevice, MovesBetweenGpus) {
  REQUIRE_GPU();
  if (attn::cuda::device_count() < 2) GTEST_SKIP() << "one GPU";
  Tensor c = sample({3, 4});
  Tensor g0 = c.cuda(0), g1 = g0.to(Device("cuda:1"));
  EXPECT_EQ(g1.device(), Device("cuda:1"));
  EXPECT_TRUE(same(g1, c));
  EXPECT_TRUE(same(g0.transpose(0, 1).to(Device("cuda:1")), c.transpose(0, 1).contiguous()));
  Tensor z = attn::zeros({4, 3}, Dtype::Float32, Device("cuda:1"));
  z.transpose(0, 1).copy_(g0);
  EXPECT_TRUE(same(z, c.transpose(0, 1).contiguous()));
  attn::cuda::set_device(1);
  EXPECT_EQ(attn::zeros({2}, Dtype::Float32, Device("cuda")).device(), Device("cuda:1"));
  attn::cuda::set_device(0);
  Tensor q = attn::randn({1, 2, 8, 16}).to(Dtype::BFloat16).to(Dtype::Float32);
  Tensor out = attn::scaled_dot_product_attention(q.to(Device("cuda:1"), Dtype::BFloat16),
                                                  q.to(Device("cuda:1"), Dtype::BFloat16),
                                                  q.to(Device("cuda:1"), Dtype::BFloat16));
  EXPECT_EQ(out.device(), Device("cuda:1"));
  Tensor want = attn::scaled_dot_product_attention(q, q, q);
  const double err = (out.cpu().to(Dtype::Float32) - want).abs().max().item<double>();
  EXPECT_LT(err / std::max(1.0, want.abs().max().item<double>()), 2e-2);
  EXPECT_EQ(attn::cuda::current_device(), 0);
}

TEST(CudaDevice, ErrorsNameTheFunction) {
  REQUIRE_GPU();
  const int n = attn::cuda::device_count();
  try {
    attn::ones({2}).to(Device("cuda:" + std::to_string(n)));
    ADD_FAILURE() << "expected attn::DeviceError";
  } catch (const attn::DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("[to] invalid device"), std::string::npos) << e.what();
  }
  Tensor g = attn::ones({2, 3}, Dtype::Float32, Device("cuda"));
  // Operations without a CUDA implementation refuse GPU tensors (never read GPU memory).
  EXPECT_THROW(g.data_ptr<float>(), attn::DeviceError);
  EXPECT_THROW(attn::ones({2, 3}) + g, attn::DeviceError);
  // Out of GPU memory: AllocationError naming the bytes asked; the process goes on.
  try {
    attn::empty({int64_t(1) << 45}, Dtype::Float32, Device("cuda"));
    ADD_FAILURE() << "expected attn::AllocationError";
  } catch (const attn::AllocationError& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA out of memory"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(same(attn::ones({2}).cuda(), attn::ones({2})));
}

}  // namespace

// attn::Device and the device of a tensor (include/attn/device.h), on any machine: names as
// torch.device spells them, what happens without a GPU, and the guard that keeps every CPU kernel
// away from GPU memory. The GPU side (copies, kernels) is tested in tests/cuda (ctest label cuda).
#include <attn/attn.h>
#include <gtest/gtest.h>

#include <memory>
#include <string>

#include "test_util.h"

namespace {

using attn::Device;
using attn::DeviceType;
using attn::Tensor;
using attn::testing::contains;
using attn::testing::error_of;
using attn::testing::fake_gpu_tensor;

TEST(Device, NamesAsTorchDevice) {
  EXPECT_EQ(Device().str(), "cpu");
  EXPECT_TRUE(Device().is_cpu());
  EXPECT_EQ(Device("cpu").str(), "cpu");
  EXPECT_EQ(Device("cpu:0"), Device("cpu"));
  EXPECT_EQ(Device("cuda").str(), "cuda");
  EXPECT_FALSE(Device("cuda").has_index());
  EXPECT_EQ(Device("cuda:0").str(), "cuda:0");
  EXPECT_EQ(Device("cuda:12").index(), 12);
  EXPECT_EQ(Device(DeviceType::CUDA, 1), Device("cuda:1"));
  EXPECT_NE(Device("cuda:0"), Device("cuda"));
  EXPECT_NE(Device("cuda:0"), Device("cpu"));
  EXPECT_TRUE(Device("cuda:3").is_cuda());
}

TEST(Device, BadNamesThrowNamingTheString) {
  for (const char* bad : {"gpu", "cuda:", "cuda:-1", "cuda:1x", "cuda:0:1", "CPU", "", "cpu:1"}) {
    const std::string what = error_of([&] { Device d(bad); });
    EXPECT_TRUE(contains(what, "[device]")) << bad << ": " << what;
  }
  EXPECT_TRUE(contains(error_of([] { Device(DeviceType::CUDA, -2); }), "[device]"));
}

TEST(Device, TensorsAreOnTheCpuByDefault) {
  Tensor t = attn::ones({2, 3});
  EXPECT_TRUE(t.is_cpu());
  EXPECT_FALSE(t.is_cuda());
  EXPECT_EQ(t.device(), Device("cpu"));
  EXPECT_EQ(t.transpose(0, 1).device(), Device("cpu"));  // views share the device
  EXPECT_TRUE(t.to(Device("cpu")).is_same(t));           // no copy when already there
  EXPECT_TRUE(t.cpu().is_same(t));
  EXPECT_EQ(t.device_data(), t.raw_data());
  Tensor l = t.to(Device("cpu"), attn::Dtype::Int64);
  EXPECT_EQ(l.dtype(), attn::Dtype::Int64);
  EXPECT_EQ(attn::zeros({2}, attn::Dtype::Float32, Device("cpu")).device(), Device("cpu"));
  EXPECT_EQ(attn::zeros_like(t).device(), Device("cpu"));
}

TEST(Device, NoGpuIsAClearDeviceError) {
  if (attn::cuda::is_available()) GTEST_SKIP() << "a GPU is present (tests/cuda covers it)";
  EXPECT_EQ(attn::cuda::device_count(), 0);
  Tensor t = attn::ones({2});
  const auto check = [](auto&& f, const char* fn) {
    try {
      f();
      ADD_FAILURE() << fn << ": expected attn::DeviceError";
    } catch (const attn::DeviceError& e) {
      EXPECT_TRUE(contains(e.what(), std::string("[") + fn + "]")) << e.what();
      EXPECT_TRUE(contains(e.what(), "CUDA is not available")) << e.what();
    }
  };
  check([&] { t.cuda(); }, "to");
  check([&] { t.to(Device("cuda:1")); }, "to");
  check([&] { attn::zeros({2}, attn::Dtype::Float32, Device("cuda")); }, "zeros");
  check([&] { attn::full({2}, 1.5, std::nullopt, Device("cuda")); }, "full");
  check([&] { attn::tensor({1.0, 2.0}, std::nullopt, Device("cuda:0")); }, "tensor");
  EXPECT_THROW(attn::cuda::synchronize(), attn::DeviceError);
  EXPECT_THROW(attn::cuda::get_device_name(0), attn::DeviceError);
  // The tensor is untouched and still usable.
  EXPECT_FLOAT_EQ((t + 1).sum().item<float>(), 4.0f);
}

TEST(Device, CpuKernelsRefuseGpuTensors) {
  Tensor g = fake_gpu_tensor({2, 4, 8});
  Tensor c = attn::ones({2, 4, 8});
  EXPECT_TRUE(g.is_cuda());
  EXPECT_EQ(g.device().str(), "cuda:0");
  EXPECT_EQ(g.transpose(0, 1).device().str(), "cuda:0");  // views need no data
  const auto refuses = [](auto&& f, bool names_device = true) {
    try {
      f();
      ADD_FAILURE() << "expected attn::DeviceError";
    } catch (const attn::DeviceError& e) {
      if (names_device) EXPECT_TRUE(contains(e.what(), "cuda:0")) << e.what();
    }
  };
  // Two devices in one operation: torch's "expected all tensors on the same device".
  for (auto f : {+[](const Tensor&x, const Tensor&y) { return x + y; },
                 +[](const Tensor&x, const Tensor&y) { return attn::matmul(x, y); }}) {
    try {
      f(g, c);
      ADD_FAILURE() << "expected attn::DeviceError";
    } catch (const attn::DeviceError& e) {
      EXPECT_TRUE(contains(e.what(), "expected all tensors on the same device, got cuda:0 and cpu"))
          << e.what();
    }
  }
  // The op, the device and the dtype, in one message.
  EXPECT_TRUE(contains(error_of([&] { g* g; }),
                       "[mul] expected a tensor on the CPU, got a float32 tensor on cuda:0: this "
                       "operation has no CUDA implementation for float32"));
  refuses([&] { g.data_ptr<float>(); });
  refuses([&] { g.raw_data(); });
  refuses([&] { g + c; });
  refuses([&] { c + g; });
  refuses([&] { g.sum(); });
  refuses([&] { attn::matmul(g, c.transpose(1, 2)); });
  refuses([&] { attn::softmax(g, -1); });
  refuses([&] { attn::scaled_dot_product_attention(g, c, c); });
  refuses([&] { attn::scaled_dot_product_attention(c, c, g); });
  refuses([&] { g.exp(); });
  if (!attn::cuda::is_available()) {
    // Copies go through the CUDA runtime, which has no GPU here.
    refuses([&] { g.clone(); }, false);
    refuses([&] { c.clone().copy_(g); }, false);
    refuses([&] { fake_gpu_tensor({1}).item<float>(); }, false);
    refuses([&] { g.repr(); }, false);
  }
  // Attention on a GPU takes bfloat16 or float16 (the CUDA kernel's dtypes), named in the error
  // (with CUDA; without it the GPU has none).
  try {
    attn::scaled_dot_product_attention(g, g, g);
    ADD_FAILURE() << "expected attn::Error";
  } catch (const attn::Error& e) {
    EXPECT_TRUE(contains(e.what(), "[scaled_dot_product_attention]")) << e.what();
    EXPECT_TRUE(contains(e.what(), "not implemented for torch.float32 tensors on cuda:0"))
        << e.what();
    EXPECT_TRUE(contains(
        e.what(), attn::cuda::is_built() ? "torch.bfloat16, torch.float16" : "it has none of them"))
        << e.what();
  }
  EXPECT_THROW(attn::scaled_dot_product_attention_with_weights(g, g, g), attn::DeviceError);
  // The CPU operand was not written.
  EXPECT_FLOAT_EQ(c.sum().item<float>(), 64.0f);
}

}  // namespace

// backend::pick (src/backend/dispatch.h): every op of src/ops/layer_ops.h reaches its kernel
// through the tables of its tensors' (device, dtype), and a pair a backend lacks raises
// NotImplementedError naming the op, the device and the dtype.
#include <attn/attn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>

#include "../../src/backend/layer_kernels.h"
#include "test_util.h"

namespace {

namespace F = attn::nn::functional;
using attn::Dtype;
using attn::Tensor;
using attn::testing::fake_gpu_tensor;

std::string not_implemented(const std::function<void()>& f) {
  try {
    f();
  } catch (const attn::NotImplementedError& e) {
    return e.what();
  } catch (const std::exception& e) {
    return std::string("another error: ") + e.what();
  }
  return "no error";
}

TEST(Dispatch, PickNamesOpDeviceAndDtype) {
  namespace be = attn::backend;
  // The CPU has float32 LayerNorm; asking for int64 names what it has.
  EXPECT_EQ(not_implemented([] {
              be::pick("layer_norm", attn::Device("cpu"), Dtype::Int64, be::cpu::layer_norm_forward,
                       be::cuda::layer_norm_forward);
            }),
            "[layer_norm] not implemented for torch.int64 tensors on cpu (it has: torch.float32)");
  // The GPU has no LayerNorm kernel (with or without the CUDA backend built): it says so, before
  // any memory is touched. A Device object needs no GPU.
  EXPECT_EQ(not_implemented([] {
              be::pick("layer_norm", attn::Device(attn::DeviceType::CUDA, 0), Dtype::Float32,
                       be::cpu::layer_norm_forward, be::cuda::layer_norm_forward);
            }),
            "[layer_norm] not implemented for torch.float32 tensors on cuda:0 (it has none of "
            "them)");
  // The kernel that is there is returned.
  EXPECT_EQ(be::pick("gelu", attn::Device("cpu"), Dtype::Float32, be::cpu::gelu_forward,
                     be::cuda::gelu_forward),
            be::cpu::gelu_forward[int(Dtype::Float32)]);
}

TEST(Dispatch, OpsOnADeviceWithoutTheirKernelNameOpDeviceAndDtype) {
  const Tensor g = fake_gpu_tensor({4, 8});
  const std::string tail =
      " not implemented for torch.float32 tensors on cuda:0 (it has none of them)";
  EXPECT_EQ(not_implemented([&] { F::layer_norm(g, 8); }), "[layer_norm]" + tail);
  EXPECT_EQ(not_implemented([&] { F::gelu(g); }), "[gelu]" + tail);
  EXPECT_EQ(not_implemented([&] { g.sum(); }), "[sum]" + tail);
  EXPECT_EQ(not_implemented([&] { g.mean(); }), "[mean]" + tail);
  // NotImplementedError is a DeviceError: code that catches the device's refusal catches it.
  try {
    g.var();
    ADD_FAILURE() << "no error";
  } catch (const attn::DeviceError& e) {
    EXPECT_EQ(std::string(e.what()), "[var]" + tail);
  }
}

// The indexing ops (src/backend/index_kernels.h) pick their kernel by the device too: on a GPU,
// which has none of them, they name the op before reading a byte.
TEST(Dispatch, IndexOpsOnADeviceWithoutTheirKernelNameOpDeviceAndDtype) {
  const Tensor g = fake_gpu_tensor({4, 8});
  // An int64 index on the same "GPU" (fake_gpu_tensor's way, over host zeros).
  auto impl = std::make_shared<attn::TensorImpl>(*attn::zeros({4, 2}, Dtype::Int64).impl());
  impl->storage = std::make_shared<attn::Storage>(*impl->storage);
  impl->storage->device = attn::Device("cuda:0");
  const Tensor gi(impl);
  const std::string tail =
      " not implemented for torch.float32 tensors on cuda:0 (it has none of them)";
  EXPECT_EQ(not_implemented([&] { g.gather(1, gi); }), "[gather]" + tail);
  EXPECT_EQ(not_implemented([&] { g.scatter(1, gi, 0.5); }), "[scatter]" + tail);
  EXPECT_EQ(not_implemented([&] { g.sort(-1); }), "[sort]" + tail);
  EXPECT_EQ(not_implemented([&] { g.topk(2, -1); }), "[topk]" + tail);
  // An index on another device than self: torch's message, before any kernel reads it.
  try {
    g.gather(1, attn::zeros({4, 2}, Dtype::Int64));
    ADD_FAILURE() << "no error";
  } catch (const attn::NotImplementedError& e) {
    ADD_FAILURE() << e.what();
  } catch (const attn::DeviceError& e) {
    EXPECT_EQ(std::string(e.what()),
              "[gather] expected all tensors on the same device, got cuda:0 and cpu");
  }
}

TEST(Dispatch, ProductsAndAttentionOnADeviceWithoutTheKernelNameOpDeviceAndDtype) {
  const Tensor g = fake_gpu_tensor({2, 4, 8});
  EXPECT_EQ(not_implemented([&] { attn::matmul(g, g.mT()); }),
            "[matmul] not implemented for torch.float32 tensors on cuda:0 (it has none of them)");
  // The GPU's attention has bfloat16 and float16 where attn is built with CUDA.
  EXPECT_EQ(not_implemented([&] { attn::scaled_dot_product_attention(g, g, g); }),
            std::string("[scaled_dot_product_attention] not implemented for torch.float32 tensors "
                        "on cuda:0 (it has") +
                (attn::cuda::is_built() ? ": torch.bfloat16, torch.float16)" : " none of them)"));
  // The CPU has no int64 attention: the same error, before anything is allocated.
  const Tensor i = attn::ones({2, 4, 8}, Dtype::Int64);
  EXPECT_EQ(not_implemented([&] { attn::scaled_dot_product_attention(i, i, i); }),
            "[scaled_dot_product_attention] not implemented for torch.int64 tensors on cpu (it "
            "has: torch.float32)");
}

TEST(Dispatch, LayerOpsRefuseDtypesTheirBackendLacks) {
  const Tensor i = attn::ones({2, 3}, Dtype::Int64);
  const Tensor b = attn::ones({2, 3}, Dtype::BFloat16);
  EXPECT_EQ(not_implemented([&] { F::gelu(i); }),
            "[gelu] not implemented for torch.int64 tensors on cpu (it has: torch.float32)");
  EXPECT_EQ(not_implemented([&] { F::layer_norm(i, 3); }),
            "[layer_norm] not implemented for torch.int64 tensors on cpu (it has: torch.float32)");
  EXPECT_EQ(not_implemented([&] {
              F::linear(i, attn::ones({4, 3}, Dtype::Int64));
            }),
            "[linear] not implemented for torch.int64 tensors on cpu (it has: torch.float32, "
            "torch.bfloat16, torch.float16)");
  EXPECT_EQ(not_implemented([&] { F::cross_entropy(i, attn::zeros({2}, Dtype::Int64)); }),
            "[cross_entropy] not implemented for torch.int64 tensors on cpu (it has: "
            "torch.float32)");
  EXPECT_EQ(not_implemented([&] { F::embedding(attn::zeros({2}, Dtype::Int64), i); }),
            "[embedding] not implemented for torch.int64 tensors on cpu (it has: torch.float32, "
            "torch.bfloat16, torch.float16)");
  EXPECT_EQ(F::embedding(attn::zeros({2}, Dtype::Int64), b).dtype(), Dtype::BFloat16);
  // Mixed dtypes are the op's own check (an Error naming both), before any dispatch.
  try {
    F::layer_norm(attn::ones({2, 3}), 3, attn::ones({3}, Dtype::Int64));
    ADD_FAILURE() << "no error";
  } catch (const attn::NotImplementedError&) {
    ADD_FAILURE() << "mixed dtypes reached the dispatch";
  } catch (const attn::Error& e) {
    EXPECT_NE(std::string(e.what()).find("weight must have the input's dtype torch.float32"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace

namespace {

// Tensor::all() and any() reduce through the bool slot of the extreme table (min and max of the
// elements as bool), with torch's answers for empty tensors and NaN (true as a bool).
TEST(Dispatch, AllAndAnyAsTorch) {
  EXPECT_TRUE(attn::zeros({0}).all());
  EXPECT_FALSE(attn::zeros({0}).any());
  EXPECT_FALSE(attn::tensor({1.0, 0.0, 2.0}).all());
  EXPECT_TRUE(attn::tensor({1.0, 0.0, 2.0}).any());
  EXPECT_TRUE(attn::ones({3, 1000}).all());
  EXPECT_FALSE(attn::zeros({3, 1000}).any());
  EXPECT_TRUE(attn::tensor({NAN}).all());
  EXPECT_TRUE(attn::ones({4}, Dtype::BFloat16).all());
  // Views: the last element of a transposed block decides.
  Tensor t = attn::ones({3, 4});
  t[2][3].fill_(0.0);
  EXPECT_FALSE(t.transpose(0, 1).all());
  EXPECT_TRUE(t.transpose(0, 1).any());
}

}  // namespace

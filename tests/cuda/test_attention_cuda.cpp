// scaled_dot_product_attention on GPU tensors (src/backend/cuda/attention.cpp): the dispatch, the
// validation shared with the CPU, and results against the CPU on the same bf16/fp16-rounded
// inputs. The kernels themselves are tested case by case in test_sdpa_cuda.cpp. Skipped without
// a GPU.
#include <attn/attn.h>
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

namespace {

using attn::Device;
using attn::Dtype;
using attn::SdpaOptions;
using attn::Tensor;

#define REQUIRE_GPU() \
  if (!attn::cuda::is_available()) GTEST_SKIP() << "no CUDA GPU"

// Largest |a - b| over max(1, max|b|): a GPU result in bf16/fp16 against the CPU's float32.
double rel_err(const Tensor& gpu, const Tensor& cpu) {
  Tensor a = gpu.cpu().to(Dtype::Float32), b = cpu.to(Dtype::Float32);
  const double diff = (a - b).abs().max().item<double>();
  return diff / std::max(1.0, b.abs().max().item<double>());
}

struct Inputs {
  Tensor q, k, v;  // float32 on the CPU, already rounded to the GPU dtype
};

Inputs make(int64_t B, int64_t H, int64_t H_kv, int64_t L_q, int64_t L_k, int64_t D, Dtype dt,
            uint64_t seed) {
  attn::manual_seed(seed);
  auto r = [&](int64_t h, int64_t l) {
    return attn::randn({B, h, l, D}).to(dt).to(Dtype::Float32);
  };
  return {r(H, L_q), r(H_kv, L_k), r(H_kv, L_k)};
}

Tensor gpu(const Tensor& t, Dtype dt) { return t.to(Device("cuda"), dt); }

class CudaAttention : public ::testing::TestWithParam<Dtype> {};

TEST_P(CudaAttention, ForwardMatchesTheCpu) {
  REQUIRE_GPU();
  const Dtype dt = GetParam();
  const double tol = dt == Dtype::BFloat16 ? 2e-2 : 4e-3;
  for (bool causal : {false, true}) {
    Inputs in = make(2, 4, 4, 77, 77, 64, dt, 1);
    SdpaOptions o;
    o.is_causal = causal;
    Tensor want = attn::scaled_dot_product_attention(in.q, in.k, in.v, o);
    Tensor got = attn::scaled_dot_product_attention(gpu(in.q, dt), gpu(in.k, dt), gpu(in.v, dt), o);
    EXPECT_TRUE(got.is_cuda());
    EXPECT_EQ(got.dtype(), dt);
    EXPECT_EQ(got.shape(), want.shape());
    EXPECT_LT(rel_err(got, want), tol) << "causal " << causal;
  }
}

TEST_P(CudaAttention, MasksGqaAndLayoutsMatchTheCpu) {
  REQUIRE_GPU();
  const Dtype dt = GetParam();
  const double tol = dt == Dtype::BFloat16 ? 2e-2 : 4e-3;
  Inputs in = make(2, 8, 2, 33, 50, 40, dt, 2);
  SdpaOptions o;
  o.enable_gqa = true;
  o.attn_mask = attn::rand({2, 1, 33, 50}) > 0.3;  // bool, broadcast over heads
  Tensor want = attn::scaled_dot_product_attention(in.q, in.k, in.v, o);
  SdpaOptions og = o;
  og.attn_mask = o.attn_mask.cuda();
  Tensor got = attn::scaled_dot_product_attention(gpu(in.q, dt), gpu(in.k, dt), gpu(in.v, dt), og);
  EXPECT_LT(rel_err(got, want), tol);
  // (B, L, H, D) views: no copies, same result.
  Tensor qt = gpu(in.q.transpose(1, 2).contiguous(), dt).transpose(1, 2);
  Tensor got2 = attn::scaled_dot_product_attention(qt, gpu(in.k, dt), gpu(in.v, dt), og);
  EXPECT_LT(rel_err(got2, want), tol);
}

TEST_P(CudaAttention, DropoutDropsTheSameWeightsAsTheCpu) {
  REQUIRE_GPU();
  const Dtype dt = GetParam();
  Inputs in = make(1, 2, 2, 64, 64, 32, dt, 3);
  SdpaOptions o;
  o.dropout_p = 0.3;
  attn::manual_seed(77);
  Tensor want = attn::scaled_dot_product_attention(in.q, in.k, in.v, o);
  attn::manual_seed(77);
  Tensor got = attn::scaled_dot_product_attention(gpu(in.q, dt), gpu(in.k, dt), gpu(in.v, dt), o);
  EXPECT_LT(rel_err(got, want), dt == Dtype::BFloat16 ? 3e-2 : 6e-3);
}

TEST_P(CudaAttention, BackwardMatchesTheCpu) {
  REQUIRE_GPU();
  const Dtype dt = GetParam();
  const double tol = dt == Dtype::BFloat16 ? 3e-2 : 6e-3;
  Inputs in = make(2, 4, 4, 65, 65, 64, dt, 4);
  Tensor dout = attn::randn({2, 4, 65, 64}).to(dt).to(Dtype::Float32);
  SdpaOptions o;
  o.is_causal = true;
  attn::SdpaForwardResult f = attn::scaled_dot_product_attention_forward(in.q, in.k, in.v, o);
  auto [dq, dk, dv] = attn::scaled_dot_product_attention_backward(dout, in.q, in.k, in.v, f, o);
  Tensor q = gpu(in.q, dt), k = gpu(in.k, dt), v = gpu(in.v, dt);
  attn::SdpaForwardResult fg = attn::scaled_dot_product_attention_forward(q, k, v, o);
  EXPECT_LT(rel_err(fg.lse, f.lse), 1e-2);
  auto [gq, gk, gv] = attn::scaled_dot_product_attention_backward(gpu(dout, dt), q, k, v, fg, o);
  EXPECT_LT(rel_err(gq, dq), tol);
  EXPECT_LT(rel_err(gk, dk), tol);
  EXPECT_LT(rel_err(gv, dv), tol);
}

// Softcap, ALiBi and sinks on the GPU: the CPU's outputs, lse and q, k, v gradients. Training the
// slopes or sinks there is refused up front (their gradients are CPU-only), and the relative bias
// table is CPU-only.
TEST_P(CudaAttention, ScoreModifiersMatchTheCpu) {
  REQUIRE_GPU();
  const Dtype dt = GetParam();
  const double tol = dt == Dtype::BFloat16 ? 3e-2 : 6e-3;
  Inputs in = make(2, 4, 2, 40, 70, 32, dt, 5);
  Tensor dout = attn::randn({2, 4, 40, 32}).to(dt).to(Dtype::Float32);
  SdpaOptions o;
  o.enable_gqa = true;
  o.is_causal = true;
  o.causal_align = attn::CausalAlign::BottomRight;
  o.softcap = 4.0;
  o.alibi_slopes = attn::rand({4}) * 0.2;
  o.sinks = attn::randn({4});
  attn::SdpaForwardResult f = attn::scaled_dot_product_attention_forward(in.q, in.k, in.v, o);
  auto [dq, dk, dv] = attn::scaled_dot_product_attention_backward(dout, in.q, in.k, in.v, f, o);
  SdpaOptions og = o;
  og.alibi_slopes = o.alibi_slopes.cuda();
  og.sinks = o.sinks.cuda();
  Tensor q = gpu(in.q, dt), k = gpu(in.k, dt), v = gpu(in.v, dt);
  attn::SdpaForwardResult fg = attn::scaled_dot_product_attention_forward(q, k, v, og);
  EXPECT_LT(rel_err(fg.out, f.out), tol);
  EXPECT_LT(rel_err(fg.lse, f.lse), 1e-2);
  EXPECT_LT(rel_err(attn::scaled_dot_product_attention(q, k, v, og), f.out), tol);
  auto [gq, gk, gv] = attn::scaled_dot_product_attention_backward(gpu(dout, dt), q, k, v, fg, og);
  EXPECT_LT(rel_err(gq, dq), tol);
  EXPECT_LT(rel_err(gk, dk), tol);
  EXPECT_LT(rel_err(gv, dv), tol);

  SdpaOptions trained = og;
  trained.sinks = og.sinks.clone().requires_grad_();
  try {
    attn::scaled_dot_product_attention(q, k, v, trained);
    ADD_FAILURE() << "trainable sinks on the GPU were not refused";
  } catch (const attn::NotImplementedError& e) {
    EXPECT_NE(std::string(e.what()).find("computed on the CPU only"), std::string::npos)
        << e.what();
  }
  SdpaOptions rel = og;
  rel.alibi_slopes = rel.sinks = Tensor();
  rel.relative_bias = attn::zeros({4, 5}).cuda();
  EXPECT_THROW(attn::scaled_dot_product_attention(q, k, v, rel), attn::NotImplementedError);
}

// Packed variable-length batches on the GPU: each sequence a kernel call on strided views of the
// packed tensors, as on the CPU (forward; bf16 and fp16 tensors record no autograd graph).
TEST_P(CudaAttention, VarlenMatchesTheCpu) {
  REQUIRE_GPU();
  const Dtype dt = GetParam();
  const double tol = dt == Dtype::BFloat16 ? 3e-2 : 6e-3;
  attn::manual_seed(6);
  const std::vector<int64_t> lens = {5, 0, 40, 17};  // an empty sequence too
  int64_t total = 0;
  Tensor cu = attn::zeros({int64_t(lens.size()) + 1}, Dtype::Int64);
  for (size_t b = 0; b < lens.size(); ++b) cu.data_ptr<int64_t>()[b + 1] = total += lens[b];
  auto r = [&](int64_t heads) { return attn::randn({total, heads, 32}).to(dt).to(Dtype::Float32); };
  Tensor q = r(4), k = r(2), v = r(2);
  SdpaOptions o;
  o.is_causal = true;
  o.causal_align = attn::CausalAlign::BottomRight;
  o.softcap = 3.0;
  o.sinks = attn::randn({4});
  attn::VarlenResult want = attn::varlen_attention_forward(q, k, v, cu, cu, 40, 40, o);
  SdpaOptions og = o;
  og.sinks = o.sinks.cuda();
  attn::VarlenResult got =
      attn::varlen_attention_forward(gpu(q, dt), gpu(k, dt), gpu(v, dt), cu, cu, 40, 40, og);
  EXPECT_TRUE(got.out.is_cuda());
  EXPECT_LT(rel_err(got.out, want.out), tol);
  EXPECT_LT(rel_err(got.lse, want.lse), 1e-2);
}

// The dispatch's less common paths: batch dims before (B, H) (one kernel call each, dropout offsets
// running on), a mask broadcast over them, key padding, a window with an additive mask in the
// GPU dtype, and q broadcast over k's batch.
TEST_P(CudaAttention, OuterDimsPaddingAndBroadcastMatchTheCpu) {
  REQUIRE_GPU();
  const Dtype dt = GetParam();
  const bool bf16 = dt == Dtype::BFloat16;
  auto r = [&](const attn::Shape& s) { return attn::randn(s).to(dt).to(Dtype::Float32); };
  auto check_backward = [&](const Tensor& q, const Tensor& k, const Tensor& v, const SdpaOptions& o,
                            const SdpaOptions& og, uint64_t seed) {
    attn::manual_seed(seed);
    attn::SdpaForwardResult f = attn::scaled_dot_product_attention_forward(q, k, v, o);
    attn::manual_seed(seed);
    attn::SdpaForwardResult fg =
        attn::scaled_dot_product_attention_forward(gpu(q, dt), gpu(k, dt), gpu(v, dt), og);
    EXPECT_LT(rel_err(fg.out, f.out), bf16 ? 3e-2 : 6e-3);
    EXPECT_LT(rel_err(fg.lse, f.lse), 1e-2);
    Tensor dout = r(f.out.shape());
    auto [dq, dk, dv] = attn::scaled_dot_product_attention_backward(dout, q, k, v, f, o);
    auto [gq, gk, gv] = attn::scaled_dot_product_attention_backward(gpu(dout, dt), gpu(q, dt),
                                                                    gpu(k, dt), gpu(v, dt), fg, og);
    const double tol = bf16 ? 3e-2 : 6e-3;
    EXPECT_LT(rel_err(gq, dq), tol);
    EXPECT_LT(rel_err(gk, dk), tol);
    EXPECT_LT(rel_err(gv, dv), tol);
  };
  attn::manual_seed(5);
  {
    Tensor q = r({2, 2, 3, 20, 16}), k = r({2, 2, 3, 24, 16}), v = r({2, 2, 3, 24, 8});
    SdpaOptions o;
    o.attn_mask = attn::rand({2, 1, 1, 20, 24}) > 0.3;
    o.dropout_p = 0.2;
    SdpaOptions og = o;
    og.attn_mask = o.attn_mask.cuda();
    check_backward(q, k, v, o, og, 9);
  }
  {
    Tensor q = r({3, 2, 20, 16}), k = r({3, 2, 30, 16}), v = r({3, 2, 30, 16});
    SdpaOptions o;
    o.key_padding_mask = attn::rand({3, 30}) > 0.7;
    o.window_left = 5;
    o.attn_mask = r({2, 20, 30});
    SdpaOptions og = o;
    og.key_padding_mask = o.key_padding_mask.cuda();
    og.attn_mask = gpu(o.attn_mask, dt);
    check_backward(q, k, v, o, og, 10);
  }
  Tensor q = r({1, 2, 10, 16}), k = r({3, 2, 12, 16}), v = r({3, 2, 12, 16});
  Tensor want = attn::scaled_dot_product_attention(q, k, v);
  Tensor got = attn::scaled_dot_product_attention(gpu(q, dt), gpu(k, dt), gpu(v, dt));
  EXPECT_EQ(got.shape(), want.shape());
  EXPECT_LT(rel_err(got, want), bf16 ? 2e-2 : 4e-3);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CudaAttention, ::testing::Values(Dtype::BFloat16, Dtype::Float16),
                         [](const auto& info) {
                           return std::string(info.param == Dtype::BFloat16 ? "bf16" : "fp16");
                         });

// No keys: zero outputs and lse = -inf, as on the CPU; no queries: zero dk and dv.
TEST(CudaAttentionEdges, EmptySequences) {
  REQUIRE_GPU();
  Tensor q = attn::randn({1, 2, 5, 16}), k = attn::randn({1, 2, 0, 16});
  const Dtype dt = Dtype::BFloat16;
  attn::SdpaForwardResult f = attn::scaled_dot_product_attention_forward(q, k, k);
  attn::SdpaForwardResult g =
      attn::scaled_dot_product_attention_forward(gpu(q, dt), gpu(k, dt), gpu(k, dt));
  EXPECT_TRUE(attn::equal(g.out.cpu().to(Dtype::Float32), f.out));
  EXPECT_TRUE(attn::equal(g.lse.cpu(), f.lse));
  Tensor q0 = attn::randn({1, 2, 0, 16}), k0 = attn::randn({1, 2, 4, 16});
  attn::SdpaForwardResult g0 =
      attn::scaled_dot_product_attention_forward(gpu(q0, dt), gpu(k0, dt), gpu(k0, dt));
  EXPECT_EQ(g0.out.numel(), 0);
  auto [gq, gk, gv] = attn::scaled_dot_product_attention_backward(gpu(q0, dt), gpu(q0, dt),
                                                                  gpu(k0, dt), gpu(k0, dt), g0, {});
  EXPECT_EQ(gq.numel(), 0);
  EXPECT_TRUE(attn::equal(gk.cpu().to(Dtype::Float32), attn::zeros({1, 2, 4, 16})));
  EXPECT_TRUE(attn::equal(gv.cpu().to(Dtype::Float32), attn::zeros({1, 2, 4, 16})));
}

TEST(CudaAttentionErrors, NameTheFunctionAndTheDevice) {
  REQUIRE_GPU();
  Tensor g = attn::randn({1, 2, 8, 16}).to(Device("cuda"), Dtype::BFloat16);
  Tensor c = attn::randn({1, 2, 8, 16}).to(Dtype::BFloat16);
  try {
    attn::scaled_dot_product_attention(g, c, g);
    ADD_FAILURE() << "expected attn::DeviceError";
  } catch (const attn::DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("same device"), std::string::npos) << e.what();
  }
  EXPECT_THROW(attn::scaled_dot_product_attention(g.to(Dtype::Float32), g.to(Dtype::Float32),
                                                  g.to(Dtype::Float32)),
               attn::Error);
  Tensor big = attn::randn({1, 1, 8, 512}).to(Device("cuda"), Dtype::BFloat16);  // head dim 512
  EXPECT_THROW(attn::scaled_dot_product_attention(big, big, big), attn::Error);
  EXPECT_THROW(attn::scaled_dot_product_attention_with_weights(g, g, g), attn::DeviceError);
}

}  // namespace

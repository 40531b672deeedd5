// The fused pairs of nn/fused.h against the two ops they stand for, bit for bit: linear + GELU
// and residual add + LayerNorm, forward and every gradient, with and without bias, both GELU
// forms, products split by rows and by columns, at 1 and 2 threads; their graphs and errors; and
// sgemm's prologue and epilogue, which run once on every row of C.
#include <attn/attn.h>
#include <attn/gpt.h>
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstring>
#include <mutex>
#include <vector>

#include "../../src/backend/cpu/gemm.h"
#include "../../src/backend/cpu/threads.h"
#include "../../src/nn/fused.h"
#include "test_util.h"

namespace {

using namespace attn;
namespace F = attn::nn::functional;
namespace fused = attn::nn::fused;
using attn::testing::error_of;

bool same_bits(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined();
  if (a.shape() != b.shape()) return false;
  const Tensor x = a.contiguous(), y = b.contiguous();
  return std::memcmp(x.data_ptr<float>(), y.data_ptr<float>(), sizeof(float) * x.numel()) == 0;
}

class ThreadCount {
 public:
  explicit ThreadCount(int n) : before_(kernels::num_threads()) { set_num_threads(n); }
  ~ThreadCount() { set_num_threads(before_); }

 private:
  int before_;
};

struct Result {
  Tensor y, dx, dw, db;
};

// y = f(x, w, b) and the gradients of (y * g).sum() for a fixed g.
template <typename Fn>
Result run(const Tensor& x0, const Tensor& w0, const Tensor& b0, const Tensor& g, Fn f) {
  Tensor x = x0.clone().requires_grad_(true), w = w0.clone().requires_grad_(true);
  Tensor b = b0.defined() ? b0.clone().requires_grad_(true) : Tensor();
  Tensor y = f(x, w, b);
  (y * g).sum().backward();
  return {y.detach(), x.grad(), w.grad(), b.defined() ? b.grad() : Tensor()};
}

TEST(Fused, LinearGeluIsLinearThenGeluBitForBit) {
  manual_seed(7);
  struct Case {
    Shape x;
    int64_t n;
  };
  // (M, K) x (N, K): more rows than columns (split by rows), fewer (split by columns), 3-D.
  for (const Case& c : {Case{{300, 64}, 256}, Case{{24, 96}, 1000}, Case{{4, 50, 48}, 192}}) {
    const int64_t K = c.x.back();
    const Tensor x = randn(c.x), w = randn({c.n, K}) * 0.2, b = randn({c.n});
    Shape ys = c.x;
    ys.back() = c.n;
    const Tensor g = randn(ys);
    for (const char* approx : {"none", "tanh"})
      for (bool bias : {true, false})
        for (int threads : {1, 2}) {
          ThreadCount tc(threads);
          const Tensor bb = bias ? b : Tensor();
          const Result want =
              run(x, w, bb, g, [&](const Tensor& x, const Tensor& w, const Tensor& b) {
                return F::gelu(F::linear(x, w, b), approx);
              });
          const Result got =
              run(x, w, bb, g, [&](const Tensor& x, const Tensor& w, const Tensor& b) {
                Tensor y = fused::linear_gelu(x, w, b, approx);
                EXPECT_EQ(grad_fn(y)->name, "LinearGeluBackward");
                return y;
              });
          const std::string what = shape_str(c.x) + " " + approx + (bias ? " bias" : "") + " " +
                                   std::to_string(threads) + " threads";
          EXPECT_TRUE(same_bits(got.y, want.y)) << what;
          EXPECT_TRUE(same_bits(got.dx, want.dx)) << what;
          EXPECT_TRUE(same_bits(got.dw, want.dw)) << what;
          EXPECT_TRUE(same_bits(got.db, want.db)) << what;
          NoGradGuard no_grad;  // without a graph: no node, the same values
          const Tensor y = fused::linear_gelu(x, w, bb, approx);
          EXPECT_FALSE(y.requires_grad());
          EXPECT_TRUE(same_bits(y, want.y)) << what << " under no_grad";
        }
  }
}

TEST(Fused, LinearGeluSmallAndOddInputsAreTheTwoOps) {
  manual_seed(3);
  // A product small enough for matmul's plain loop, a vector, no rows: the two ops as they are.
  const Tensor w = randn({3, 4}), b = randn({3});
  for (const Shape& s : {Shape{2, 4}, Shape{4}, Shape{0, 4}}) {
    const Tensor x = randn(s);
    EXPECT_TRUE(same_bits(fused::linear_gelu(x, w, b, "none"), F::gelu(F::linear(x, w, b))))
        << shape_str(s);
  }
  const Tensor x = randn({2, 4}).requires_grad_(true);
  EXPECT_EQ(grad_fn(fused::linear_gelu(x, w, b, "tanh"))->name, "GeluBackward0");
}

TEST(Fused, LinearGeluErrorsAreLinearsAndGelus) {
  const Tensor x = zeros({8, 5}), w = zeros({6, 4});
  EXPECT_EQ(error_of([&] { fused::linear_gelu(x, w, Tensor(), "none"); }),
            error_of([&] { F::linear(x, w); }));
  const Tensor w5 = zeros({6, 5});
  EXPECT_EQ(error_of([&] { fused::linear_gelu(x, w5, zeros({5}), "none"); }),
            error_of([&] { F::linear(x, w5, zeros({5})); }));
  EXPECT_EQ(error_of([&] { fused::linear_gelu(x, w5, Tensor(), "erf"); }),
            error_of([&] { F::gelu(x, "erf"); }));
}

TEST(Fused, LayerNormGradientsAreTheSameAtEveryThreadCount) {
  // LayerNorm's backward sums dw and db over chunks of rows cut by the shape, never by the thread
  // count: bitwise the same at 1, 2, 3 and 5 threads (large enough to run in parallel).
  manual_seed(5);
  for (const Shape& s : {Shape{8, 128, 96}, Shape{3, 1000, 40}}) {
    const int64_t C = s.back();
    const Tensor x0 = randn(s), g = randn(s), w0 = randn({C}), b0 = randn({C});
    std::vector<Result> results;
    for (int threads : {1, 2, 3, 5}) {
      ThreadCount tc(threads);
      results.push_back(run(x0, w0, b0, g, [&](const Tensor& x, const Tensor& w, const Tensor& b) {
        return F::layer_norm(x, C, w, b, 1e-5);
      }));
    }
    for (std::size_t i = 1; i < results.size(); ++i) {
      EXPECT_TRUE(same_bits(results[i].y, results[0].y)) << shape_str(s) << " run " << i;
      EXPECT_TRUE(same_bits(results[i].dx, results[0].dx)) << shape_str(s) << " run " << i;
      EXPECT_TRUE(same_bits(results[i].dw, results[0].dw)) << shape_str(s) << " run " << i;
      EXPECT_TRUE(same_bits(results[i].db, results[0].db)) << shape_str(s) << " run " << i;
    }
  }
}

TEST(Fused, AddLayerNormIsAddThenLayerNormBitForBit) {
  manual_seed(11);
  for (bool affine_bias : {true, false})
    for (int threads : {1, 2})
      for (const Shape& s : {Shape{4, 64, 96}, Shape{3, 7}}) {
        ThreadCount tc(threads);
        nn::LayerNorm ln(s.back(), 1e-5, true, affine_bias);
        {
          NoGradGuard no_grad;
          ln.weight.copy_(randn({s.back()}));
          if (affine_bias) ln.bias.copy_(randn({s.back()}));
        }
        const Tensor x0 = randn(s), r0 = randn(s), gs = randn(s), gn = randn(s);
        auto grads = [&](bool use_fused) {
          Tensor x = x0.clone().requires_grad_(true), r = r0.clone().requires_grad_(true);
          ln.zero_grad();
          Tensor sum, normed;
          if (use_fused) {
            const fused::AddNorm o = fused::add_layer_norm(x, r, ln);
            sum = o.sum;
            normed = o.normed;
            EXPECT_EQ(grad_fn(sum)->name, "AddBackward0");
            EXPECT_EQ(grad_fn(normed)->name, "NativeLayerNormBackward0");
          } else {
            sum = x + r;
            normed = ln(sum);
          }
          // Both outputs feed the loss, as a block's residual stream and its LayerNorm do.
          ((sum * gs).sum() + (normed * gn).sum()).backward();
          return std::vector<Tensor>{sum.detach(),
                                     normed.detach(),
                                     x.grad(),
                                     r.grad(),
                                     ln.weight.grad().clone(),
                                     affine_bias ? ln.bias.grad().clone() : Tensor()};
        };
        const std::vector<Tensor> want = grads(false), got = grads(true);
        for (std::size_t i = 0; i < want.size(); ++i)
          EXPECT_TRUE(same_bits(got[i], want[i]))
              << shape_str(s) << " output " << i << (affine_bias ? " bias" : "") << " " << threads
              << " threads";
      }
}

TEST(Fused, AddLayerNormErrors) {
  nn::LayerNorm ln(4);
  EXPECT_NE(error_of([&] {
              fused::add_layer_norm(zeros({2, 4}), zeros({3, 4}), ln);
            }).find("[add_layer_norm] residual (3, 4) must have the input's shape (2, 4)"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              fused::add_layer_norm(zeros({2, 5}), zeros({2, 5}), ln);
            }).find("does not end in normalized_shape (4)"),
            std::string::npos);
}

TEST(Fused, GemmHooksRunOnceOnEveryRow) {
  // By rows (M >= N) and by columns (M < N), serial and parallel: before() sees every row once
  // before the product, after() every row once with the product in it.
  struct P {
    int64_t M, N, K;
  };
  for (int threads : {1, 2})
    for (const P p : {P{512, 96, 64}, P{40, 4000, 64}, P{8, 8, 8}}) {
      ThreadCount tc(threads);
      std::vector<float> A(std::size_t(p.M * p.K)), B(std::size_t(p.N * p.K));
      for (std::size_t i = 0; i < A.size(); ++i) A[i] = float(i % 7) - 3.f;
      for (std::size_t i = 0; i < B.size(); ++i) B[i] = float(i % 5) - 2.f;
      std::vector<float> plain(std::size_t(p.M * p.N), 1.f), hooked(plain.size(), 0.f);
      kernels::sgemm(false, true, p.M, p.N, p.K, 1.f, A.data(), p.K, B.data(), p.K, 1.f,
                     plain.data(), p.N);
      std::vector<int> seen_before(std::size_t(p.M), 0), seen_after(std::size_t(p.M), 0);
      std::vector<float> copy_after(plain.size(), 0.f);
      std::mutex mu;
      kernels::sgemm(
          false, true, p.M, p.N, p.K, 1.f, A.data(), p.K, B.data(), p.K, 1.f, hooked.data(), p.N,
          [&](int64_t r0, int64_t r1) {
            std::lock_guard<std::mutex> lock(mu);
            for (int64_t r = r0; r < r1; ++r) {
              ++seen_before[std::size_t(r)];
              std::fill_n(hooked.begin() + r * p.N, p.N, 1.f);  // what beta 1 adds to
            }
          },
          [&](int64_t r0, int64_t r1) {
            std::lock_guard<std::mutex> lock(mu);
            for (int64_t r = r0; r < r1; ++r) {
              ++seen_after[std::size_t(r)];
              std::copy_n(hooked.begin() + r * p.N, p.N, copy_after.begin() + r * p.N);
            }
          });
      const std::string what = std::to_string(p.M) + "x" + std::to_string(p.N) + " " +
                               std::to_string(threads) + " threads";
      EXPECT_EQ(seen_before, std::vector<int>(std::size_t(p.M), 1)) << what;
      EXPECT_EQ(seen_after, std::vector<int>(std::size_t(p.M), 1)) << what;
      EXPECT_EQ(hooked, plain) << what;
      EXPECT_EQ(copy_after, plain) << what;  // after() saw the finished rows
    }
}

TEST(Fused, GptForwardAndGradientsMatchTheUnfusedBlocks) {
  // The model's forward (run_blocks: every residual add fused with the next LayerNorm, the MLP's
  // first product with its GELU) against the same model's modules called one op at a time.
  manual_seed(5);
  nn::GPTConfig c;
  c.vocab_size = 50;
  c.block_size = 16;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 32;
  c.bias = true;
  nn::GPT model(c);
  const Tensor idx = randint(0, 50, {3, 16});
  auto unfused = [&]() {
    const int64_t T = idx.size(1);
    Tensor x = (*model.wte)(idx) + model.wpe->weight.narrow(0, 0, T);
    for (const auto& blk : model.h) {
      Tensor h = (*blk->ln_1)(x);
      Tensor a =
          blk->attn->forward(h, h, h, Tensor(), false, Tensor(), true, /*is_causal=*/true).output;
      x = x + a;
      Tensor m = F::gelu((*blk->mlp->c_fc)((*blk->ln_2)(x)), c.gelu_approximate);
      x = x + (*blk->mlp->c_proj)(m);
    }
    return F::linear((*model.ln_f)(x), model.wte->weight);
  };
  auto grads = [&](const Tensor& logits) {
    model.zero_grad();
    (logits * logits).mean().backward();
    std::vector<Tensor> out{logits.detach()};
    for (auto& [name, p] : model.named_parameters()) out.push_back(p.grad().clone());
    return out;
  };
  const std::vector<Tensor> want = grads(unfused()), got = grads(model.forward(idx));
  ASSERT_EQ(want.size(), got.size());
  for (std::size_t i = 0; i < want.size(); ++i) EXPECT_TRUE(same_bits(got[i], want[i])) << i;
}

}  // namespace

namespace {

// The values' bits (exact in float32 for the 16-bit dtypes), every NaN as one: the sign of a
// NaN depends on which instructions made it.
std::vector<uint32_t> bits_of(const Tensor& t) {
  const Tensor c = t.to(Dtype::Float32).contiguous();
  std::vector<uint32_t> out(std::size_t(c.numel()));
  const float* p = c.data_ptr<float>();
  for (std::size_t i = 0; i < out.size(); ++i)
    out[i] = std::isnan(p[i]) ? 0x7FC00000u : std::bit_cast<uint32_t>(p[i]);
  return out;
}

}  // namespace

// gpt-oss's clamped SwiGLU in one pass against the ops DecoderMoE runs with a gradient, bit for
// bit in float32, bfloat16 and float16: gates and ups past the limit on both sides, NaN and inf
// among them, alpha and limit that the 16-bit dtypes round.
TEST(Fused, GptOssGluIsTheOpsBitForBit) {
  const int64_t N = 5, I = 37;
  for (const Dtype dt : {Dtype::Float32, Dtype::BFloat16, Dtype::Float16})
    for (const auto [alpha, limit] : {std::pair{1.702, 7.0}, std::pair{0.3, 2.6}}) {
      SCOPED_TRACE(std::string(dtype_name(dt)) + " alpha " + std::to_string(alpha));
      Generator gen(7);
      Tensor gu = (randn({N, 2 * I}, &gen) * 5.0).contiguous();
      float* p = gu.data_ptr<float>();
      p[3] = NAN, p[10] = INFINITY, p[11] = -INFINITY, p[20] = NAN, p[40] = -INFINITY;
      gu = gu.to(dt);
      const Tensor pairs = gu.view({N, I, 2});
      const Tensor gate = clamp(pairs.select(-1, 0), std::nullopt, Scalar(limit));
      const Tensor up = clamp(pairs.select(-1, 1), Scalar(-limit), Scalar(limit));
      const Tensor want = (up + 1.0) * (gate * sigmoid(gate * alpha));
      const Tensor got = fused::gpt_oss_glu(gu, alpha, limit);
      EXPECT_EQ(got.dtype(), dt);
      EXPECT_EQ(got.shape(), want.shape());
      EXPECT_EQ(bits_of(got), bits_of(want));
      // a strided input (a transposed copy's transpose) gives the same
      EXPECT_EQ(bits_of(fused::gpt_oss_glu(gu.transpose(0, 1).contiguous().transpose(0, 1), alpha,
                                           limit)),
                bits_of(want));
    }
  EXPECT_ERROR_HAS(fused::gpt_oss_glu(zeros({4}), 1.0, 7.0), "gpt_oss_glu");
  EXPECT_ERROR_HAS(fused::gpt_oss_glu(zeros({2, 5}), 1.0, 7.0), "(2, 5)");
  EXPECT_ERROR_HAS(fused::gpt_oss_glu(zeros({2, 4}, Dtype::Int64), 1.0, 7.0), "int64");
}

// Concurrent use of the library from several std::threads (docs/threads.md): attention
// forward and backward, MultiheadAttention and GPT (own models, and one model shared), training
// steps, elementwise ops, reductions and in-place ops, views shared after an in-place write, the
// shared default generator, grad mode and the thread count. Each thread works on its own inputs;
// results must be bitwise those of the same computation on one thread, except gradients that
// several threads add into the same parameters, whose order of addition is the threads' (checked
// against the sum of the one-thread gradients, see check_shared_model).
//
// scripts/tsan.sh runs these tests (Concurrency.*) under ThreadSanitizer.
#include <attn/attn.h>
#include <attn/gpt.h>
#include <attn/optim.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <exception>
#include <latch>
#include <thread>
#include <vector>

namespace attn {
namespace {

constexpr int kThreads = 6;

// Runs body(i) for i in [0, n) on n threads that start together; rethrows the first exception.
template <typename F>
void run_threads(int n, F&& body) {
  std::latch start(n);
  std::vector<std::exception_ptr> errors(static_cast<std::size_t>(n));
  std::vector<std::thread> threads;
  for (int i = 0; i < n; ++i)
    threads.emplace_back([&, i] {
      start.arrive_and_wait();
      try {
        body(i);
      } catch (...) {
        errors[std::size_t(i)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

::testing::AssertionResult same_bits(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) return ::testing::AssertionFailure() << "undefined tensor";
  if (a.shape() != b.shape() || a.dtype() != b.dtype())
    return ::testing::AssertionFailure()
           << shape_str(a.shape()) << " " << dtype_name(a.dtype()) << " vs " << shape_str(b.shape())
           << " " << dtype_name(b.dtype());
  const Tensor ca = a.contiguous(), cb = b.contiguous();
  if (std::memcmp(ca.raw_data(), cb.raw_data(), std::size_t(a.numel()) * itemsize(a.dtype())) != 0)
    return ::testing::AssertionFailure() << "values differ";
  return ::testing::AssertionSuccess();
}

// Each thread's results against the one-thread ones, bitwise.
void expect_same_bits(const std::vector<std::vector<Tensor>>& got,
                      const std::vector<std::vector<Tensor>>& expected) {
  for (std::size_t i = 0; i < expected.size(); ++i) {
    ASSERT_EQ(got[i].size(), expected[i].size());
    for (std::size_t j = 0; j < expected[i].size(); ++j)
      EXPECT_TRUE(same_bits(got[i][j], expected[i][j])) << "thread " << i << " result " << j;
  }
}

// One model shared by kThreads threads, each running run(model, i): a forward and backward pass
// on its own inputs. `reference` and `shared` are built the same way; run goes through
// `reference` once per i on this thread (zeroed gradients each time), then through `shared` on
// all threads at once, whose first backward passes these are. Each thread's results must be
// bitwise the one-thread ones, and each parameter's gradient the sum of the one-thread gradients
// to rounding: adding n float32 terms in two orders gives results at most 2 (n - 1) 2^-24 times
// the sum of their magnitudes apart (6e-7 for n = 6), and 1e-6 times it is allowed. (Not a
// tolerance relative to the result: a gradient that nearly cancels has partial sums far larger
// than itself, and their rounding shows.)
template <typename Model, typename Run>
void check_shared_model(Model& reference, Model& shared, Run run) {
  const std::vector<Tensor> ref_params = reference.parameters(), params = shared.parameters();
  std::vector<Tensor> sum(params.size()), magnitude(params.size());
  std::vector<std::vector<Tensor>> expected, got(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    reference.zero_grad();
    expected.push_back(run(reference, i));
    for (std::size_t p = 0; p < params.size(); ++p) {
      const Tensor g = ref_params[p].grad();
      sum[p] = sum[p].defined() ? sum[p] + g : g;
      magnitude[p] = magnitude[p].defined() ? magnitude[p] + g.abs() : g.abs();
    }
  }
  run_threads(kThreads, [&](int i) { got[std::size_t(i)] = run(shared, i); });
  expect_same_bits(got, expected);
  for (std::size_t p = 0; p < params.size(); ++p)
    EXPECT_TRUE(((params[p].grad() - sum[p]).abs() <= magnitude[p] * 1e-6).all())
        << "parameter " << p;
}

// ---- fused attention --------------------------------------------------------------------------

struct SdpaCase {
  Tensor q, k, v, w;  // inputs and the weights of the loss sum(out * w)
  SdpaOptions options;
};

// Per thread: causal; a bool attn_mask; key padding with a sliding window.
std::vector<SdpaCase> sdpa_cases(int seed) {
  Generator g(uint64_t(100 + seed));
  const int64_t B = 2, H = 2, L = 64, D = 32;
  std::vector<SdpaCase> cases(3);
  for (auto& c : cases) {
    c.q = randn({B, H, L, D}, &g);
    c.k = randn({B, H, L, D}, &g);
    c.v = randn({B, H, L, D}, &g);
    c.w = randn({B, H, L, D}, &g);
  }
  cases[0].options.is_causal = true;
  cases[1].options.attn_mask = rand({L, L}, &g) > 0.3;
  cases[2].options.key_padding_mask = rand({B, L}, &g) > 0.8;
  cases[2].options.window_left = 9;
  return cases;
}

// out, dq, dk, dv of each case.
std::vector<Tensor> sdpa_run(const std::vector<SdpaCase>& cases) {
  std::vector<Tensor> results;
  for (const SdpaCase& c : cases) {
    Tensor q = c.q.clone().requires_grad_(true), k = c.k.clone().requires_grad_(true),
           v = c.v.clone().requires_grad_(true);
    Tensor out = scaled_dot_product_attention(q, k, v, c.options);
    (out * c.w).sum().backward();
    results.insert(results.end(), {out.detach(), q.grad(), k.grad(), v.grad()});
  }
  return results;
}

TEST(Concurrency, FusedAttentionForwardBackwardMatchesOneThread) {
  std::vector<std::vector<SdpaCase>> cases;
  std::vector<std::vector<Tensor>> expected, got(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    cases.push_back(sdpa_cases(i));
    expected.push_back(sdpa_run(cases.back()));
  }
  run_threads(kThreads, [&](int i) {
    for (int rep = 0; rep < 2; ++rep) got[std::size_t(i)] = sdpa_run(cases[std::size_t(i)]);
  });
  expect_same_bits(got, expected);
}

// ---- one MultiheadAttention shared by every thread ---------------------------------------------

TEST(Concurrency, SharedMultiheadAttentionForwardBackward) {
  const int64_t L = 16, B = 2, E = 32;
  manual_seed(7);
  nn::MultiheadAttention reference(E, 4);
  manual_seed(7);
  nn::MultiheadAttention shared(E, 4);
  std::vector<Tensor> xs, masks;
  for (int i = 0; i < kThreads; ++i) {
    Generator g(uint64_t(200 + i));
    xs.push_back(randn({L, B, E}, &g));
    masks.push_back(rand({B, L}, &g) > 0.85);  // key padding
  }
  const Tensor causal = ones({L, L}, Dtype::Bool).triu(1);  // true: not allowed
  check_shared_model(reference, shared, [&](const nn::MultiheadAttention& mha, int i) {
    Tensor x = xs[std::size_t(i)].clone().requires_grad_(true);
    auto r = mha.forward(x, x, x, masks[std::size_t(i)], false, causal);
    (r.output * r.output).sum().backward();
    return std::vector<Tensor>{r.output.detach(), x.grad()};
  });
}

// ---- GPT ----------------------------------------------------------------------------------------

nn::GPTConfig tiny_gpt() {
  nn::GPTConfig c;
  c.vocab_size = 32;
  c.block_size = 16;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 64;  // the MLP's products (64 x 256 x 64) are large enough to run on OpenMP threads
  return c;
}

std::pair<Tensor, Tensor> batch(int seed) {
  Generator g(uint64_t(300 + seed));
  return {randint(0, 32, {4, 16}, &g), randint(0, 32, {4, 16}, &g)};
}

// Three AdamW steps of a GPT of its own per thread: the losses and the final weights.
std::vector<Tensor> train_own_model(int i) {
  Generator init(uint64_t(400 + i));
  nn::GPT model(tiny_gpt(), &init);
  optim::AdamWOptions o;
  o.lr = 1e-2;
  optim::AdamW opt(model.parameters(), o);
  auto [idx, targets] = batch(i);
  std::vector<Tensor> out;
  for (int step = 0; step < 3; ++step) {
    Tensor loss = model.forward(idx, targets).loss;
    loss.backward();
    opt.step();
    opt.zero_grad();
    out.push_back(loss.detach());
  }
  for (const Tensor& p : model.parameters()) out.push_back(p.detach().clone());
  return out;
}

TEST(Concurrency, GPTTrainingStepsOnOwnModelsMatchOneThread) {
  std::vector<std::vector<Tensor>> expected, got(kThreads);
  for (int i = 0; i < kThreads; ++i) expected.push_back(train_own_model(i));
  run_threads(kThreads, [&](int i) { got[std::size_t(i)] = train_own_model(i); });
  expect_same_bits(got, expected);
}

TEST(Concurrency, SharedGPTForwardBackwardAndCachedGeneration) {
  Generator init(5), same_init(5);
  nn::GPT reference(tiny_gpt(), &init), shared(tiny_gpt(), &same_init);
  check_shared_model(reference, shared, [](const nn::GPT& model, int i) {
    auto [idx, targets] = batch(i);
    auto out = model.forward(idx, targets);
    out.loss.backward();
    Generator g(uint64_t(500 + i));
    nn::GPT::GenerateOptions o;
    o.max_new_tokens = 4;
    o.top_k = 5;
    Tensor tokens = model.generate(idx.narrow(1, 0, 4), o, &g);
    return std::vector<Tensor>{out.logits.detach(), out.loss.detach(), tokens};
  });
}

// ---- elementwise ops, reductions, in-place ops, views ------------------------------------------

// What the Python bindings run without the GIL besides attention and the models: elementwise ops
// and comparisons, reductions, scans, copies, indexing, in-place ops (also through a view) and a
// backward pass, on each thread's own tensors, every step feeding the next through `state`.
std::vector<Tensor> elementwise_run(const Tensor& x, const Tensor& y, int64_t seed) {
  Generator g(static_cast<uint64_t>(seed));
  Tensor state = x.clone();
  std::vector<Tensor> out;
  for (int it = 0; it < 20; ++it) {
    Tensor noise = randn(x.shape(), &g) * 0.1;
    Tensor a = (state * 0.5 + y) / double(1 + it % 3) - noise;
    Tensor b = where(a > 0.0, a.exp().clamp(std::nullopt, 4.0), (-a).sqrt().neg());
    Tensor c = maximum(b.tanh(), a.sigmoid() - 0.5).pow(2.0) + (a.abs() + 1.0).log();
    auto [vmax, imax] = b.max(1);
    out.insert(out.end(), {b.sum(), a.mean(1), a.var(0), vmax, imax, c.amax({0, 1}), a.argmax(1),
                           c.cumsum(1), c.softmax(-1), a.transpose(0, 1).contiguous()});
    state.mul_(0.9).add_(c.mean(0, true)).sub_(noise);
    state.clamp_(-3.0, 3.0);
    state.masked_fill_(state.abs() < 0.01, 0.0);
    state.index({indexing::Slice(), indexing::Slice(0, std::nullopt, 7)}).mul_(0.5).exp_();
    Tensor p = x.clone().requires_grad_(true);
    Tensor q = (p * state).tanh() + p.exp().clamp(std::nullopt, 3.0) - p.sigmoid() * y;
    Tensor loss = (q.softmax(-1) * y).sum() + q.var() + p.pow(2.0).mean();
    loss.backward();
    out.insert(out.end(), {loss, p.grad()});
  }
  out.push_back(state);
  return out;
}

TEST(Concurrency, ElementwiseReductionsInPlaceAndBackwardMatchOneThread) {
  Generator g(31);
  std::vector<std::pair<Tensor, Tensor>> inputs;
  for (int i = 0; i < kThreads; ++i) inputs.emplace_back(randn({48, 80}, &g), randn({48, 80}, &g));
  std::vector<std::vector<Tensor>> expected, got(kThreads);
  for (int i = 0; i < kThreads; ++i)
    expected.push_back(elementwise_run(inputs[i].first, inputs[i].second, 700 + i));
  run_threads(kThreads, [&](int i) {
    got[std::size_t(i)] = elementwise_run(inputs[i].first, inputs[i].second, 700 + i);
  });
  expect_same_bits(got, expected);
}

// A view is brought up to date (grad_fn, requires_grad) by the first read after its storage was
// written in place. Views that several threads share as inputs they only read are read by all of
// them at once: a transposed plain tensor after an optimizer-like step under no_grad, and a
// transposed non-leaf whose history an in-place op rewrote (every thread records a graph through
// the view's new AsStridedBackward0). ThreadSanitizer checks the refresh; the results must be
// bitwise the one-thread ones.
TEST(Concurrency, ViewsSharedAfterAnInPlaceWrite) {
  Generator g(32);
  const Tensor w = randn({24, 16}, &g), leaf = randn({24, 16}, &g).requires_grad_(true);
  std::vector<Tensor> xs;
  for (int i = 0; i < kThreads; ++i) xs.push_back(randn({16, 24}, &g));
  auto make_views = [&] {
    Tensor plain = w.clone(), base = leaf * 2.0;
    Tensor plain_t = plain.transpose(0, 1), base_t = base.transpose(0, 1);
    {
      NoGradGuard no_grad;
      plain.add_(1.0);
    }
    base.mul_(3.0);
    return std::pair{plain_t, base_t};
  };
  auto run = [&](const Tensor& plain_t, const Tensor& base_t, int i) {
    Tensor y = (plain_t * xs[std::size_t(i)]).sum(1);
    Tensor z = base_t * xs[std::size_t(i)];
    EXPECT_FALSE(y.requires_grad());
    EXPECT_TRUE(z.requires_grad());
    auto fn = grad_fn(base_t);
    EXPECT_TRUE(fn && fn->name == "AsStridedBackward0");
    return std::vector<Tensor>{y, z.detach()};
  };
  std::vector<std::vector<Tensor>> expected, got(kThreads);
  for (int i = 0; i < kThreads; ++i) {
    auto [plain_t, base_t] = make_views();
    expected.push_back(run(plain_t, base_t, i));
  }
  const auto shared = make_views();  // (not a structured binding: clang 14 cannot capture one)
  run_threads(kThreads, [&](int i) { got[std::size_t(i)] = run(shared.first, shared.second, i); });
  expect_same_bits(got, expected);
}

// ---- the default generator, grad mode, the thread count ---------------------------------------

// Every rand() call takes a contiguous run of the shared stream: the threads' tensors are the
// one-thread sequence's tensors in some order, and the generator ends in the same state.
TEST(Concurrency, DefaultGeneratorDrawsWholeRunsPerCall) {
  constexpr int kCalls = 20;
  const Shape shape{37};
  manual_seed(11);
  std::vector<std::vector<float>> expected;
  for (int c = 0; c < kThreads * kCalls; ++c) {
    Tensor t = rand(shape);
    expected.emplace_back(t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
  }
  const auto end_state = default_generator().get_state();

  manual_seed(11);
  std::vector<std::vector<std::vector<float>>> got(kThreads);
  run_threads(kThreads, [&](int i) {
    for (int c = 0; c < kCalls; ++c) {
      Tensor t = rand(shape);
      got[std::size_t(i)].emplace_back(t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
    }
  });
  std::vector<std::vector<float>> all;
  for (auto& g : got) all.insert(all.end(), g.begin(), g.end());
  std::sort(all.begin(), all.end());
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(all, expected);
  EXPECT_EQ(default_generator().get_state(), end_state);
}

// Dropout in attention, in nn::functional::dropout and randn draw from the shared default
// generator at once (for ThreadSanitizer; the values depend on the order).
TEST(Concurrency, DropoutOnTheSharedGenerator) {
  manual_seed(12);
  run_threads(kThreads, [&](int i) {
    Generator g(uint64_t(600 + i));
    Tensor q = randn({2, 2, 32, 16}, &g).requires_grad_(true);
    SdpaOptions o;
    o.dropout_p = 0.2;
    o.is_causal = true;
    for (int rep = 0; rep < 3; ++rep) {
      Tensor out = scaled_dot_product_attention(q, q, q, o);
      nn::functional::dropout(out, 0.1).sum().backward();
      EXPECT_EQ(randn({40}).numel(), 40);
    }
    EXPECT_TRUE(q.grad().defined());
  });
}

TEST(Concurrency, GradModeIsPerThread) {
  Tensor x = ones({3}).requires_grad_(true);
  std::latch entered(2), checked(2);  // thread 0 is in no-grad mode from `entered` to `checked`
  run_threads(2, [&](int i) {
    if (i == 0) {
      NoGradGuard no_grad;
      entered.arrive_and_wait();
      EXPECT_FALSE((x * 2).requires_grad());
      checked.arrive_and_wait();
    } else {
      entered.arrive_and_wait();
      EXPECT_TRUE(is_grad_enabled());
      EXPECT_TRUE((x * 2).requires_grad());
      checked.arrive_and_wait();
    }
  });
  EXPECT_TRUE(is_grad_enabled());
}

// Large results made and freed on every thread at once: the cache of freed host blocks
// (src/tensor/host_cache.h) hands each block to one storage at a time.
TEST(Concurrency, HostBlocksFreedAndReusedOnManyThreads) {
  run_threads(kThreads, [](int i) {
    for (int round = 0; round < 30; ++round) {
      const int64_t n = (int64_t(1) << 16) + 1024 * ((i + round) % 5);
      const float v = float(i * 100 + round);
      Tensor t = full({n}, v) * 1.0;
      Tensor u = t + 1.0;
      for (int64_t k = 0; k < n; k += 997) {
        ASSERT_EQ(t.data_ptr<float>()[k], v);
        ASSERT_EQ(u.data_ptr<float>()[k], v + 1.0f);
      }
    }
  });
  EXPECT_LE(cpu::cached_bytes(), std::size_t(1) << 30);
}

TEST(Concurrency, NumThreadsIsProcessWide) {
  const int before = get_num_threads();
  set_num_threads(1);
  int seen = 0;
  std::thread([&] { seen = get_num_threads(); }).join();
  EXPECT_EQ(seen, 1);
  set_num_threads(before);
  std::thread([&] { seen = get_num_threads(); }).join();
  EXPECT_EQ(seen, before);
}

}  // namespace
}  // namespace attn

// The error model and the NaN policy of docs/errors.md, statement by statement.
//
//   ErrorModel.*  what throws (attn::Error / attn::IndexError, "[function] ..." messages), what the
//                 `attn` tool prints and returns (0 / 1 / 2), and that failed writes leave the old
//                 file as it was.
//   NanPolicy.*   fully masked attention rows, keys of weight zero, NaN and inf inputs, large
//                 scores and logits, softmax, cross_entropy, layer_norm and temperature, checked
//                 against a naive double-precision attention written here and against values
//                 PyTorch 1.13 prints for the same inputs.
// tests/python/test_error_model.py checks the same statements from Python against torch itself.
#include <attn/attn.h>
#include <attn/gpt.h>
#include <attn/io.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <span>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "test_util.h"

namespace attn {
namespace {

namespace fs = std::filesystem;
using attn::testing::FileSizeLimit;
using attn::testing::TempDir;

constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// ================================================================================================
// Errors
// ================================================================================================

static_assert(std::is_base_of_v<std::runtime_error, Error>);
static_assert(std::is_base_of_v<Error, IndexError>);

enum class Kind { Error, IndexError };

struct Expected {
  Kind kind;
  std::string message;  // the whole what()
};

// Runs f and reports what it threw: the kind and the message. Anything other than attn::Error
// (or no exception) fails the test.
Expected thrown_by(const std::function<void()>& f) {
  try {
    f();
  } catch (const IndexError& e) {
    return {Kind::IndexError, e.what()};
  } catch (const Error& e) {
    return {Kind::Error, e.what()};
  } catch (const std::exception& e) {
    ADD_FAILURE() << "not an attn::Error: " << e.what();
    return {Kind::Error, ""};
  }
  ADD_FAILURE() << "nothing thrown";
  return {Kind::Error, ""};
}

Tensor i64(std::vector<float> values) {
  Shape s{int64_t(values.size())};
  return from_vector(values, s).to(Dtype::Int64);
}

TEST(ErrorModel, PublicFunctionsThrowErrorsNamingFunctionAndShapes) {
  const std::vector<std::pair<std::function<void()>, Expected>> cases = {
      {[] {
         matmul(zeros({2, 3}), zeros({4, 5}));
       },
       {Kind::Error, "[matmul] shapes (2, 3) and (4, 5) cannot be multiplied (2x3 and 4x5)"}},
      {[] {
         (void)(zeros({2, 3}) + zeros({4}));
       },
       {Kind::Error,
        "[add] shapes (2, 3) and (4,) cannot be broadcast together (size 3 vs 4 at dim 1)"}},
      {[] {
         zeros({2, 3}).view({4});
       },
       {Kind::Error, "[view] shape (4,) is invalid for input of size 6 (2, 3)"}},
      {[] {
         zeros({-1, 3});
       },
       {Kind::Error, "[zeros] negative dimension in shape (-1, 3)"}},
      {[] { (void)(Tensor() + Tensor()); }, {Kind::Error, "[add] undefined tensor argument"}},
      {[] {
         softmax(zeros({2, 3}, Dtype::Int64), 1);
       },
       {Kind::Error,
        "[softmax] not implemented for torch.int64 tensors on cpu (it has: torch.float32)"}},
      {[] {
         scaled_dot_product_attention(zeros({2, 4, 8, 16}), zeros({2, 4, 9, 32}),
                                      zeros({2, 4, 9, 32}));
       },
       {Kind::Error,
        "[scaled_dot_product_attention] q (2, 4, 8, 16) and k (2, 4, 9, 32) differ in head dim"}},
      {[] {
         SdpaOptions o;
         o.attn_mask = ones({3, 3}, Dtype::Bool);
         scaled_dot_product_attention(zeros({2, 4}), zeros({2, 4}), zeros({2, 4}), o);
       },
       {Kind::Error,
        "[scaled_dot_product_attention] attn_mask (3, 3) does not broadcast to the attention "
        "weights (2, 2) of q (2, 4) and k (2, 4)"}},
      {[] {
         SdpaOptions o;
         o.dropout_p = 1.0;
         scaled_dot_product_attention(zeros({2, 4}), zeros({2, 4}), zeros({2, 4}), o);
       },
       {Kind::Error, "[scaled_dot_product_attention] dropout_p must be in [0, 1), got 1"}},
      {[] {
         nn::functional::layer_norm(zeros({2, 3}), 4, Tensor(), Tensor(), 1e-5);
       },
       {Kind::Error, "[layer_norm] input (2, 3) does not end in normalized_shape (4)"}},
      {[] {
         nn::MultiheadAttention m(4, 2);
         m.forward(zeros({3, 1, 5}), zeros({3, 1, 4}), zeros({3, 1, 4}));
       },
       {Kind::Error,
        "[MultiheadAttention] query (3, 1, 5) has embedding dim 5, expected embed_dim 4"}},
      {[] {
         auto x = zeros({2});
         x.requires_grad_();
         (x * 2.0).backward();
       },
       {Kind::Error,
        "[backward] grad can be implicitly created only for scalar outputs; the output has shape "
        "(2,): pass a gradient of that shape"}},
      {[] { io::load_safetensors("/nonexistent/attn/model.safetensors"); },
       {Kind::Error,
        "[load_safetensors] cannot open '/nonexistent/attn/model.safetensors': No such file or "
        "directory"}},
      // Out-of-range indices and dims: IndexError (which is an Error).
      {[] {
         zeros({2, 3})[5];
       },
       {Kind::IndexError, "[select] index 5 is out of bounds for dimension 0 with size 2"}},
      {[] {
         softmax(zeros({2, 3}), 2);
       },
       {Kind::IndexError,
        "[softmax] dimension out of range (expected to be in range of [-2, 1], but got 2)"}},
      {[] { zeros({2}).narrow(0, 1, 5); },
       {Kind::IndexError,
        "[narrow] start 1 and length 5 are out of range for dimension 0 of size 2"}},
      {[] {
         nn::functional::cross_entropy(zeros({2, 3}), i64({0, 3}));
       },
       {Kind::IndexError, "[cross_entropy] target 3 at position 1 is out of bounds for 3 classes"}},
      {[] {
         nn::Embedding e(5, 2);
         e(i64({7}));
       },
       {Kind::IndexError,
        "[embedding] index 7 is out of range for a table of 5 embeddings (weight (5, 2))"}},
  };
  for (const auto& [f, want] : cases) {
    const Expected got = thrown_by(f);
    EXPECT_EQ(got.message, want.message);
    EXPECT_EQ(got.kind == Kind::IndexError, want.kind == Kind::IndexError) << want.message;
    // Every message starts with the function name in brackets.
    EXPECT_EQ(got.message.rfind('[', 0), 0u) << got.message;
  }
}

TEST(ErrorModel, IndexErrorIsCaughtAsError) {
  bool caught = false;
  try {
    zeros({3}).select(0, 3);
  } catch (const Error& e) {
    caught = dynamic_cast<const IndexError*>(&e) != nullptr;
  }
  EXPECT_TRUE(caught);
}

// ---- the command-line tool ----------------------------------------------------------------------

using attn::testing::CliResult;
using attn::testing::run_cli;

const std::string kHint = "Try 'attn --help' for more information.\n";

TEST(ErrorModel, CliSuccessIsExitZero) {
  CliResult r = run_cli({"--version"});
  EXPECT_EQ(r.code, 0);
  EXPECT_EQ(r.out, "attn 0.1.0\n");
  EXPECT_EQ(r.err, "");
}

TEST(ErrorModel, CliUsageErrorsExitTwoWithHint) {
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{}, "attn: no command given\n"},
      {{"frobnicate"}, "attn: unknown command 'frobnicate'\n"},
      {{"--frobnicate"}, "attn: unknown option '--frobnicate'\n"},
      {{"walkthrough", "007"},
       "attn: walkthrough: unknown seed '007' (expected one of 000 001 002 003 004)\n"},
      {{"train", "--max-iters", "-5"},
       "attn: train: invalid value '-5' for --max-iters: expected an integer >= 1\n"},
      {{"generate", "--ckpt", "x", "--temperature", "0"},
       "attn: generate: invalid value '0' for --temperature: expected a number > 0\n"},
  };
  for (const auto& [args, first_line] : cases) {
    CliResult r = run_cli(args);
    EXPECT_EQ(r.code, 2) << first_line;
    EXPECT_EQ(r.err, first_line + kHint);
    EXPECT_EQ(r.out, "");
  }
}

TEST(ErrorModel, CliRuntimeErrorsExitOneWithOneLine) {
  CliResult r = run_cli({"generate", "--ckpt", "/nonexistent/attn_ckpt"});
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err,
            "attn: error: [generate] no checkpoint '/nonexistent/attn_ckpt' (train one with `attn "
            "train --out DIR`, then pass --ckpt DIR)\n");
  EXPECT_EQ(r.out, "");
}

TEST(ErrorModel, CliNeverThrowsAndAlwaysUsesOneOfTheTwoFormats) {
  TempDir dir("attn_err_cli");
  const std::string empty = dir.write("empty.txt", "");
  const std::string junk = dir.write("junk.safetensors", std::string(64, '\xff'));
  fs::create_directories(dir.file("ckpt"));
  io::write_file_atomic(dir.file("ckpt") + "/model.safetensors", "\x08\x00\x00\x00");
  const std::vector<std::vector<std::string>> cases = {
      {"train", "--data", empty, "--out", dir.file("o1")},
      {"train", "--data", dir.file("missing.txt"), "--out", dir.file("o2")},
      {"train", "--block-size", "0", "--out", dir.file("o3")},
      {"train", "--lr", "nan", "--out", dir.file("o4")},
      {"train", "--n-embd", "30", "--n-head", "4", "--data", empty, "--out", dir.file("o5")},
      {"generate", "--ckpt", dir.file("ckpt")},
      {"generate", "--ckpt", junk},
      {"heatmap", "--mechanism", "multihead", "--heads", "3", "--out", dir.file("h.png")},
      {"heatmap", "--mechanism", "causal", "--out", dir.path()},
      {"heatmap", "--mechanism", "causal", "--sentence", "", "--out", dir.file("h.png")},
      {"walkthrough", "--plots"},
      {"help", "nope"},
      {"--version", "extra"},
  };
  for (const auto& args : cases) {
    std::string joined;
    for (const auto& a : args) joined += " " + a;
    CliResult r;
    EXPECT_NO_THROW(r = run_cli(args)) << joined;
    ASSERT_TRUE(r.code == 1 || r.code == 2) << joined << " -> " << r.code << "\n" << r.err;
    if (r.code == 2) {
      EXPECT_EQ(r.err.rfind("attn: ", 0), 0u) << r.err;
      ASSERT_GE(r.err.size(), kHint.size());
      EXPECT_EQ(r.err.substr(r.err.size() - kHint.size()), kHint) << r.err;
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 2) << r.err;
    } else {
      EXPECT_EQ(r.err.rfind("attn: error: [", 0), 0u) << joined << ": " << r.err;
      EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
      EXPECT_EQ(r.err.back(), '\n');
    }
  }
}

// ---- files are never half-written
// -----------------------------------------------------------------

std::string slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

TEST(ErrorModel, FailedAtomicWriteLeavesTheOldFile) {
  TempDir dir("attn_err_write");
  const std::string path = dir.write("data.bin", "the old contents");
  const std::string big(100000, 'x');
  std::string message;
  {
    FileSizeLimit limit(1000);
    ASSERT_TRUE(limit.ok());
    message = attn::testing::error_of([&] { io::write_file_atomic(path, big); });
  }
  EXPECT_EQ(message.rfind("[write_file_atomic] cannot write '" + path + "': write failed: ", 0), 0u)
      << message;
  EXPECT_EQ(slurp(path), "the old contents");
  EXPECT_EQ(dir.files(), std::vector<std::string>{"data.bin"});  // no temporary file left
}

TEST(ErrorModel, FailedHeatmapLeavesTheOldFile) {
  TempDir dir("attn_err_heatmap");
  const std::string path = dir.write("weights.png", "not really a png");
  CliResult r;
  {
    FileSizeLimit limit(64);  // smaller than any PNG
    ASSERT_TRUE(limit.ok());
    r = run_cli({"heatmap", "--mechanism", "causal", "--out", path});
  }
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err.rfind("attn: error: [", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("'" + path + "'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("File too large"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(path), "not really a png");
  EXPECT_EQ(dir.files(), std::vector<std::string>{"weights.png"});
  // Without the limit the same command replaces the file with a PNG.
  r = run_cli({"heatmap", "--mechanism", "causal", "--out", path});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(slurp(path).substr(1, 3), "PNG");
}

TEST(ErrorModel, FailedTrainingRunKeepsTheLastCheckpoint) {
  TempDir dir("attn_err_train");
  std::string text;
  for (int i = 0; i < 40; ++i) text += "the cat sat on the mat.\nthe dog ran to the fog.\n";
  const std::string corpus = dir.write("corpus.txt", text);
  const std::string out = dir.file("run");
  auto args = [&](int iters) {
    return attn::testing::tiny_train_args(corpus, out, iters, /*eval_interval=*/10,
                                          /*eval_iters=*/2);
  };
  CliResult first = run_cli(args(10));
  ASSERT_EQ(first.code, 0) << first.err;
  std::map<std::string, std::string> before;
  for (const auto& e : fs::directory_iterator(out))
    before[e.path().filename().string()] = slurp(e.path().string());
  // model.safetensors, ckpt.safetensors, loss.png, and train.lock (which records the last run).
  ASSERT_EQ(before.size(), 4u);
  before.erase("train.lock");

  std::vector<std::string> poisoned = args(20);
  for (const char* a : {"--resume", "--debug-nan-at", "15"}) poisoned.push_back(a);
  CliResult r = run_cli(poisoned);
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err.rfind("attn: error: [train] step 15: loss is nan; stopping without saving", 0),
            0u)
      << r.err;
  std::map<std::string, std::string> after;
  for (const auto& e : fs::directory_iterator(out))
    after[e.path().filename().string()] = slurp(e.path().string());
  after.erase("train.lock");
  EXPECT_TRUE(after == before) << "the failed run changed or added files in " << out;
}

// ================================================================================================
// NaN policy: attention
// ================================================================================================

std::vector<float> values(const Tensor& t) { return t.contiguous().to_float_vector(); }

// A naive attention in double over (B, H, L_q, D) inputs: bias(b, h, i, j) is added to the scaled
// score (-inf masks). A row without any key of finite bias gives zeros.
struct Naive {
  std::vector<double> out, weights;
};
Naive naive_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                      const std::function<double(int64_t, int64_t, int64_t, int64_t)>& bias) {
  const int64_t B = q.size(0), H = q.size(1), Lq = q.size(2), D = q.size(3), Lk = k.size(2),
                Dv = v.size(3);
  const std::vector<float> qv = values(q), kv = values(k), vv = values(v);
  Naive r;
  r.out.assign(size_t(B * H * Lq * Dv), 0.0);
  r.weights.assign(size_t(B * H * Lq * Lk), 0.0);
  const double scale = 1.0 / std::sqrt(double(D));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < Lq; ++i) {
        std::vector<double> s(static_cast<size_t>(Lk));
        double m = -kInf;
        for (int64_t j = 0; j < Lk; ++j) {
          const double bj = bias(b, h, i, j);
          if (bj == -kInf) {
            s[j] = -kInf;
            continue;
          }
          double dot = 0;
          for (int64_t d = 0; d < D; ++d)
            dot += double(qv[((b * H + h) * Lq + i) * D + d]) * kv[((b * H + h) * Lk + j) * D + d];
          s[j] = dot * scale + bj;
          m = std::max(m, s[j]);
        }
        if (m == -kInf) continue;  // fully masked: zeros
        double sum = 0;
        for (double& x : s) sum += (x = std::exp(x - m));
        for (int64_t j = 0; j < Lk; ++j) {
          const double w = s[j] / sum;
          r.weights[size_t(((b * H + h) * Lq + i) * Lk + j)] = w;
          if (w == 0) continue;
          for (int64_t e = 0; e < Dv; ++e)
            r.out[size_t(((b * H + h) * Lq + i) * Dv + e)] +=
                w * vv[((b * H + h) * Lk + j) * Dv + e];
        }
      }
  return r;
}

enum class Path { Fused, Reference, Weights };
const char* path_name(Path p) {
  return p == Path::Fused ? "fused" : p == Path::Reference ? "reference" : "with_weights";
}
constexpr Path kPaths[] = {Path::Fused, Path::Reference, Path::Weights};

// Attention through one of the three paths; weights (when asked for) only on Path::Weights.
Tensor attend(Path path, const Tensor& q, const Tensor& k, const Tensor& v, SdpaOptions o,
              Tensor* weights = nullptr) {
  if (path == Path::Weights) {
    auto [out, w] = scaled_dot_product_attention_with_weights(q, k, v, o);
    if (weights) *weights = w;
    return out;
  }
  o.backend = path == Path::Fused ? SdpaBackend::Auto : SdpaBackend::Reference;
  return scaled_dot_product_attention(q, k, v, o);
}

struct MaskCase {
  std::string name;
  int64_t L_q, L_k;
  std::function<void(SdpaOptions&)> set;
  std::function<double(int64_t, int64_t, int64_t, int64_t)> bias;
};

// Every way a query row can lose all its keys. B = 2, H = 2.
std::vector<MaskCase> mask_cases() {
  std::vector<MaskCase> cases;
  {
    // Bool mask (true = may attend): row 5 of every head masked entirely, a few other holes.
    const int64_t Lq = 37, Lk = 29;
    Tensor m = ones({Lq, Lk}, Dtype::Bool);
    for (int64_t j = 0; j < Lk; ++j) m.index({5, j}).fill_(false);
    m.index({7, 3}).fill_(false);
    const std::vector<float> mv = values(m.to(Dtype::Float32));
    cases.push_back({"bool mask", Lq, Lk, [m](SdpaOptions& o) { o.attn_mask = m; },
                     [=](int64_t, int64_t, int64_t i, int64_t j) {
                       return mv[size_t(i * Lk + j)] != 0 ? 0.0 : -kInf;
                     }});
  }
  {
    // Float mask: row 0 all -inf; other rows random finite offsets.
    const int64_t Lq = 20, Lk = 33;
    Tensor m = randn({Lq, Lk});
    for (int64_t j = 0; j < Lk; ++j) m.index({0, j}).fill_(-kInf);
    const std::vector<float> mv = values(m);
    cases.push_back(
        {"float -inf mask", Lq, Lk, [m](SdpaOptions& o) { o.attn_mask = m; },
         [=](int64_t, int64_t, int64_t i, int64_t j) { return double(mv[size_t(i * Lk + j)]); }});
  }
  {
    // key_padding_mask (true = ignore): batch 1 has every key padded.
    const int64_t Lq = 18, Lk = 18;
    Tensor kp = zeros({2, Lk}, Dtype::Bool);
    for (int64_t j = 0; j < Lk; ++j) kp.index({1, j}).fill_(true);
    kp.index({0, 4}).fill_(true);
    cases.push_back(
        {"key_padding_mask", Lq, Lk, [kp](SdpaOptions& o) { o.key_padding_mask = kp; },
         [](int64_t b, int64_t, int64_t, int64_t j) { return b == 1 || j == 4 ? -kInf : 0.0; }});
  }
  {
    // Causal, bottom-right, more queries than keys: the first L_q - L_k rows see nothing.
    const int64_t Lq = 40, Lk = 23;
    cases.push_back(
        {"causal bottom-right L_q > L_k", Lq, Lk,
         [](SdpaOptions& o) {
           o.is_causal = true;
           o.causal_align = CausalAlign::BottomRight;
         },
         [=](int64_t, int64_t, int64_t i, int64_t j) { return j <= i + (Lk - Lq) ? 0.0 : -kInf; }});
  }
  {
    // Sliding window (0, 1) top-left with L_q > L_k: rows i >= L_k see no key.
    const int64_t Lq = 30, Lk = 21;
    cases.push_back({"window (0, 1)", Lq, Lk,
                     [](SdpaOptions& o) {
                       o.window_left = 0;
                       o.window_right = 1;
                     },
                     [](int64_t, int64_t, int64_t i, int64_t j) {
                       return j >= i && j <= i + 1 ? 0.0 : -kInf;
                     }});
  }
  return cases;
}

TEST(NanPolicy, FullyMaskedRowsGiveZerosEverywhere) {
  manual_seed(11);
  for (const MaskCase& c : mask_cases()) {
    const int64_t B = 2, H = 2, D = 16, Dv = 12;
    Tensor q = randn({B, H, c.L_q, D}), k = randn({B, H, c.L_k, D}), v = randn({B, H, c.L_k, Dv});
    SdpaOptions o;
    c.set(o);
    const Naive want = naive_attention(q, k, v, c.bias);
    int64_t empty_rows = 0;
    for (int64_t r = 0; r < B * H * c.L_q; ++r) {
      bool any = false;
      for (int64_t j = 0; j < c.L_k; ++j)
        any = any || c.bias(r / (H * c.L_q), (r / c.L_q) % H, r % c.L_q, j) != -kInf;
      empty_rows += !any;
    }
    ASSERT_GT(empty_rows, 0) << c.name;
    for (Path path : kPaths) {
      SCOPED_TRACE(c.name + std::string(", ") + path_name(path));
      Tensor w;
      const std::vector<float> got = values(attend(path, q, k, v, o, &w));
      ASSERT_EQ(got.size(), want.out.size());
      for (size_t n = 0; n < got.size(); ++n) {
        if (want.out[n] == 0.0) {  // a fully masked row (random data never gives an exact 0)
          ASSERT_EQ(got[n], 0.0f) << "element " << n;
        } else {
          ASSERT_NEAR(got[n], want.out[n], 2e-5) << "element " << n;
        }
      }
      if (path == Path::Weights) {
        const std::vector<float> wv = values(w);
        for (size_t n = 0; n < wv.size(); ++n) ASSERT_NEAR(wv[n], want.weights[n], 1e-6) << n;
      }
    }
  }
}

TEST(NanPolicy, FullyMaskedRowsGetZeroGradientsAndGiveNone) {
  manual_seed(12);
  for (const MaskCase& c : mask_cases()) {
    const int64_t B = 2, H = 2, D = 16, Dv = 12;
    Tensor q0 = randn({B, H, c.L_q, D}), k0 = randn({B, H, c.L_k, D}),
           v0 = randn({B, H, c.L_k, Dv});
    Tensor g = randn({B, H, c.L_q, Dv});
    // The same upstream gradient with the fully masked rows' entries set to zero.
    Tensor g_cut = g.clone();
    std::vector<bool> empty(size_t(B * H * c.L_q));
    for (int64_t r = 0; r < B * H * c.L_q; ++r) {
      bool any = false;
      for (int64_t j = 0; j < c.L_k; ++j)
        any = any || c.bias(r / (H * c.L_q), (r / c.L_q) % H, r % c.L_q, j) != -kInf;
      empty[size_t(r)] = !any;
      if (!any) g_cut.index({r / (H * c.L_q), (r / c.L_q) % H, r % c.L_q}).fill_(0.0);
    }
    SdpaOptions o;
    c.set(o);
    for (Path path : kPaths) {
      SCOPED_TRACE(c.name + std::string(", ") + path_name(path));
      auto grads = [&](const Tensor& up) {
        Tensor q = q0.clone().requires_grad_(), k = k0.clone().requires_grad_(),
               v = v0.clone().requires_grad_();
        (attend(path, q, k, v, o) * up).sum().backward();
        return std::vector<std::vector<float>>{values(q.grad()), values(k.grad()),
                                               values(v.grad())};
      };
      const auto full = grads(g), cut = grads(g_cut);
      for (int64_t r = 0; r < B * H * c.L_q; ++r)
        if (empty[size_t(r)]) {
          for (int64_t d = 0; d < D; ++d) ASSERT_EQ(full[0][size_t(r * D + d)], 0.0f) << r;
        }
      // The masked rows contribute nothing to dk and dv: same as with their gradient cut off.
      for (int t = 0; t < 3; ++t)
        for (size_t n = 0; n < full[t].size(); ++n) {
          ASSERT_TRUE(std::isfinite(full[t][n]));
          ASSERT_NEAR(full[t][n], cut[t][n], 1e-6) << "input " << t << " element " << n;
        }
    }
  }
}

TEST(NanPolicy, MultiheadAttentionFullyMaskedRowIsTheOutputBias) {
  manual_seed(13);
  nn::MultiheadAttention mha(8, 2, 0.0, true, std::nullopt, std::nullopt, /*batch_first=*/true);
  {
    NoGradGuard no_grad;
    mha.out_proj->bias.copy_(randn({8}));
  }
  const std::vector<float> bias = values(mha.out_proj->bias);
  Tensor x = randn({2, 5, 8});
  Tensor kpm = zeros({2, 5}, Dtype::Bool);  // true = ignore: batch 1 entirely
  for (int64_t j = 0; j < 5; ++j) kpm.index({1, j}).fill_(true);
  Tensor am = zeros({5, 5}, Dtype::Bool);  // true = not allowed: query 2 entirely
  for (int64_t j = 0; j < 5; ++j) am.index({2, j}).fill_(true);
  for (bool need_weights : {true, false}) {
    auto r = mha.forward(x, x, x, kpm, need_weights, am);
    const std::vector<float> out = values(r.output);
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t i = 0; i < 5; ++i) {
        const bool masked = b == 1 || i == 2;
        for (int64_t e = 0; e < 8; ++e) {
          const float o = out[size_t((b * 5 + i) * 8 + e)];
          ASSERT_TRUE(std::isfinite(o));
          if (masked) {
            ASSERT_EQ(o, bias[size_t(e)]) << b << " " << i << " " << e;
          }
        }
      }
    if (need_weights) {
      const std::vector<float> w = values(r.weights);  // (2, 5, 5), averaged over heads
      for (int64_t b = 0; b < 2; ++b)
        for (int64_t i = 0; i < 5; ++i) {
          double sum = 0;
          for (int64_t j = 0; j < 5; ++j) sum += w[size_t((b * 5 + i) * 5 + j)];
          EXPECT_NEAR(sum, b == 1 || i == 2 ? 0.0 : 1.0, 1e-6);
        }
    } else {
      EXPECT_FALSE(r.weights.defined());
    }
  }
}

// Puts `value` in row `j` of the (B, H, L, D) tensor t (every batch and head).
Tensor with_row(const Tensor& t, int64_t j, double value) {
  Tensor r = t.clone();
  r.index({indexing::Slice(), indexing::Slice(), j}).fill_(value);
  return r;
}

TEST(NanPolicy, MaskedKeysWithInfOrNanTakeNoPart) {
  manual_seed(14);
  const int64_t B = 2, H = 2, L = 40, D = 16, Dv = 12;
  Tensor q0 = randn({B, H, L, D}), k0 = randn({B, H, L, D}), v0 = randn({B, H, L, Dv});
  Tensor g = randn({B, H, L, Dv});
  // Key 6 is padding in every batch; key L - 1 is seen by the last query only (causal).
  Tensor kp = zeros({B, L}, Dtype::Bool);
  kp.index({indexing::Slice(), 6}).fill_(true);
  struct Setup {
    std::string name;
    int64_t key;
    std::function<void(SdpaOptions&)> set;
  };
  const std::vector<Setup> setups = {
      {"key_padding_mask", 6, [kp](SdpaOptions& o) { o.key_padding_mask = kp; }},
      {"bool mask", 6,
       [&](SdpaOptions& o) {
         Tensor m = ones({L, L}, Dtype::Bool);
         m.index({indexing::Slice(), 6}).fill_(false);
         o.attn_mask = m;
       }},
      {"causal", L - 1, [](SdpaOptions& o) { o.is_causal = true; }},
  };
  for (const Setup& s : setups) {
    SdpaOptions o;
    s.set(o);
    for (double poison : {kNaN, kInf, -kInf}) {
      for (Path path : kPaths) {
        SCOPED_TRACE(s.name + ", poison " + std::to_string(poison) + ", " + path_name(path));
        auto run = [&](const Tensor& k_in, const Tensor& v_in) {
          Tensor q = q0.clone().requires_grad_(), k = k_in.clone().requires_grad_(),
                 v = v_in.clone().requires_grad_();
          Tensor out = attend(path, q, k, v, o);
          (out * g).sum().backward();
          return std::vector<std::vector<float>>{values(out), values(q.grad()), values(k.grad()),
                                                 values(v.grad())};
        };
        const auto clean = run(k0, v0);
        const auto bad = run(with_row(k0, s.key, poison), with_row(v0, s.key, poison));
        // Query rows that cannot see the key: every output and q gradient as without the poison.
        // (Under "causal" the last row sees it and is NaN, as its dk and dv contributions.)
        const bool last_sees = s.name == "causal";
        for (int64_t r = 0; r < B * H * L; ++r) {
          const bool sees = last_sees && r % L == L - 1;
          for (int64_t e = 0; e < Dv; ++e) {
            const float x = bad[0][size_t(r * Dv + e)];
            if (sees) {
              if (!std::isnan(poison) && poison < 0) continue;  // -inf in v: -inf or NaN
              ASSERT_FALSE(std::isfinite(x)) << r;
            } else {
              ASSERT_NEAR(x, clean[0][size_t(r * Dv + e)], 1e-5) << r;
            }
          }
          if (!sees) {
            for (int64_t d = 0; d < D; ++d)
              ASSERT_NEAR(bad[1][size_t(r * D + d)], clean[1][size_t(r * D + d)], 1e-5) << r;
          }
        }
        if (!last_sees) {
          // Nothing saw the key: dk and dv are the clean ones, and zero for the poisoned key.
          for (int t = 2; t < 4; ++t)
            for (size_t n = 0; n < bad[t].size(); ++n)
              ASSERT_NEAR(bad[t][n], clean[t][n], 1e-5) << "input " << t << " element " << n;
          const std::vector<float>& dv = bad[3];
          for (int64_t bh = 0; bh < B * H; ++bh)
            for (int64_t e = 0; e < Dv; ++e) ASSERT_EQ(dv[size_t((bh * L + s.key) * Dv + e)], 0.0f);
        }
      }
    }
  }
}

TEST(NanPolicy, NonFiniteInputsReachExactlyTheRowsThatSeeThem) {
  manual_seed(15);
  const int64_t L = 24, D = 8, Dv = 8;
  Tensor q0 = randn({1, 1, L, D}), k0 = randn({1, 1, L, D}), v0 = randn({1, 1, L, Dv});
  k0.index({0, 0, 0, 3}).fill_(1.0);  // so that +inf in q[9, 3] gives a score of +inf
  SdpaOptions causal;
  causal.is_causal = true;
  for (Path path : kPaths) {
    SCOPED_TRACE(path_name(path));
    const std::vector<float> clean = values(attend(path, q0, k0, v0, causal));
    auto check = [&](const Tensor& q, const Tensor& k, const Tensor& v, const SdpaOptions& o,
                     const std::function<bool(int64_t, int64_t)>& nan_at) {
      const std::vector<float> got = values(attend(path, q, k, v, o));
      for (int64_t i = 0; i < L; ++i)
        for (int64_t e = 0; e < Dv; ++e) {
          const float x = got[size_t(i * Dv + e)];
          if (nan_at(i, e)) {
            ASSERT_TRUE(std::isnan(x)) << i << " " << e;
          } else {
            ASSERT_NEAR(x, clean[size_t(i * Dv + e)], 1e-5) << i << " " << e;
          }
        }
    };
    // NaN in query row 9: that output row.
    Tensor q = q0.clone();
    q.index({0, 0, 9, 3}).fill_(kNaN);
    check(q, k0, v0, causal, [](int64_t i, int64_t) { return i == 9; });
    // +inf in query row 9: its scores are +-inf, inf - inf = NaN: that output row.
    q = q0.clone();
    q.index({0, 0, 9, 3}).fill_(kInf);
    check(q, k0, v0, causal, [](int64_t i, int64_t) { return i == 9; });
    // NaN in key row 5: every row that sees key 5 (causal: rows 5 and later).
    Tensor k = k0.clone();
    k.index({0, 0, 5, 2}).fill_(kNaN);
    check(q0, k, v0, causal, [](int64_t i, int64_t) { return i >= 5; });
    // NaN in v[5, 4]: column 4 of every row that sees key 5.
    Tensor v = v0.clone();
    v.index({0, 0, 5, 4}).fill_(kNaN);
    check(q0, k0, v, causal, [](int64_t i, int64_t e) { return i >= 5 && e == 4; });
    // A float mask adds: NaN or +inf in an entry makes that row NaN; NaN in a key row is not
    // hidden by a -inf float mask entry (NaN + -inf = NaN).
    Tensor m = zeros({L, L});
    for (int64_t i = 0; i < L; ++i)
      for (int64_t j = i + 1; j < L; ++j) m.index({i, j}).fill_(-kInf);
    SdpaOptions fm;
    fm.attn_mask = m.clone();
    fm.attn_mask.index({3, 1}).fill_(kNaN);
    fm.attn_mask.index({7, 2}).fill_(kInf);
    check(q0, k0, v0, fm, [](int64_t i, int64_t) { return i == 3 || i == 7; });
    fm.attn_mask = m;
    check(q0, k, v0, fm, [](int64_t, int64_t) { return true; });
  }
}

TEST(NanPolicy, LargeScoresDoNotOverflow) {
  manual_seed(16);
  const int64_t L = 9, D = 8;
  Tensor q = randn({1, 1, L, D}) * 1e20, k = randn({1, 1, L, D}), v = randn({1, 1, L, D});
  const Naive want =
      naive_attention(q, k, v, [](int64_t, int64_t, int64_t, int64_t) { return 0.0; });
  for (Path path : kPaths) {
    const std::vector<float> got = values(attend(path, q, k, v, SdpaOptions()));
    for (size_t n = 0; n < got.size(); ++n)
      ASSERT_NEAR(got[n], want.out[n], 1e-6) << path_name(path) << " " << n;
  }
  // The weights are one-hot: each row is the value row of its largest score.
  for (double w : want.weights) EXPECT_TRUE(w == 0.0 || w == 1.0);
}

// ================================================================================================
// NaN policy: softmax, cross_entropy, layer_norm, temperature (expected values: PyTorch 1.13)
// ================================================================================================

void expect_row(const Tensor& t, const std::vector<double>& want, const std::string& what) {
  const std::vector<float> got = values(t);
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t n = 0; n < got.size(); ++n) {
    if (std::isnan(want[n])) {
      EXPECT_TRUE(std::isnan(got[n])) << what << " [" << n << "] = " << got[n];
    } else if (std::isinf(want[n])) {
      EXPECT_EQ(double(got[n]), want[n]) << what << " [" << n << "]";
    } else {
      EXPECT_NEAR(got[n], want[n], 1e-6 * std::max(1.0, std::fabs(want[n]))) << what << n;
    }
  }
}

TEST(NanPolicy, SoftmaxRowsAsPyTorch) {
  auto row = [](std::vector<float> v) { return from_vector(v, {int64_t(v.size())}); };
  const float inf = INFINITY, nan = NAN;
  expect_row(softmax(row({-inf, -inf}), 0), {kNaN, kNaN}, "all -inf");
  expect_row(log_softmax(row({-inf, -inf}), 0), {kNaN, kNaN}, "log, all -inf");
  expect_row(softmax(row({1, inf}), 0), {kNaN, kNaN}, "+inf");
  expect_row(softmax(row({1, nan, 2}), 0), {kNaN, kNaN, kNaN}, "NaN");
  expect_row(softmax(row({1, -inf, 2}), 0), {0.2689414213699951, 0, 0.7310585786300049}, "-inf");
  expect_row(log_softmax(row({1, -inf, 2}), 0), {-1.3132616875182228, -kInf, -0.3132616875182228},
             "log, -inf");
  expect_row(softmax(row({1e30f, 5e29f, -1e30f}), 0), {1, 0, 0}, "large");
  expect_row(softmax(row({3e38f, -3e38f}), 0), {1, 0}, "near float max");
  expect_row(log_softmax(row({3e38f, -3e38f}), 0), {0, -kInf}, "log, near float max");
  // Seed 004's temperature trick softmax(t * 8), and temperature 0 (t / 0 = +-inf): NaN.
  Tensor t = row({0.1f, -0.2f, -0.3f, 0.5f});
  expect_row(softmax(t * 8.0, 0), {0.0389650, 0.0035348, 0.0015883, 0.9559118}, "t * 8");
  expect_row(softmax(t / 0.0, 0), {kNaN, kNaN, kNaN, kNaN}, "t / 0");
}

TEST(NanPolicy, GenerateRejectsTemperatureZeroNegativeOrNaN) {
  nn::GPTConfig c;
  c.vocab_size = 5, c.n_layer = 1, c.n_head = 1, c.n_embd = 4, c.block_size = 4;
  nn::GPT model(c);
  for (double t : {0.0, -1.0, kNaN, kInf}) {
    nn::GPT::GenerateOptions o;
    o.temperature = t;
    const std::string m = attn::testing::error_of([&] {
      model.generate(zeros({1, 1}, Dtype::Int64), o);
    });
    EXPECT_EQ(m.rfind("[GPT.generate] temperature must be positive and finite, got ", 0), 0u) << m;
  }
}

TEST(NanPolicy, CrossEntropyAsPyTorch) {
  const float inf = INFINITY, nan = NAN;
  struct Case {
    std::vector<float> logits;
    int64_t target;
    double loss;
    std::vector<double> grad;
  };
  const std::vector<Case> cases = {
      {{1e30f, 0, -1e30f}, 1, 1e30, {1, -1, 0}},
      {{1e30f, 0, -1e30f}, 0, 0, {0, 0, 0}},
      {{3e38f, -3e38f}, 1, kInf, {1, -1}},
      {{0, -inf, 1}, 1, kInf, {0.2689414, -1, 0.7310586}},
      {{0, -inf, 1}, 0, 1.3132617, {-0.7310586, 0, 0.7310586}},
      {{0, inf, 1}, 0, kNaN, {kNaN, kNaN, kNaN}},
      {{0, inf, 1}, 1, kNaN, {kNaN, kNaN, kNaN}},
      {{-inf, -inf}, 0, kNaN, {kNaN, kNaN}},
      {{0, nan}, 0, kNaN, {kNaN, kNaN}},
  };
  for (const Case& c : cases) {
    Tensor x = from_vector(c.logits, {1, int64_t(c.logits.size())}).requires_grad_();
    Tensor loss = nn::functional::cross_entropy(x, i64({float(c.target)}));
    std::ostringstream what;
    for (float l : c.logits) what << l << " ";
    what << "target " << c.target;
    expect_row(loss.detach(), {c.loss}, what.str());
    loss.backward();
    expect_row(x.grad(), c.grad, what.str() + " grad");
  }
  // A NaN row does not touch the other rows; every target ignored gives a NaN mean.
  Tensor x = from_vector({0, nan, 1, 2}, {2, 2});
  expect_row(nn::functional::cross_entropy(x, i64({0, 1}), "none"), {kNaN, 0.3132617}, "rows");
  expect_row(nn::functional::cross_entropy(x, i64({-100, -100})), {kNaN}, "all ignored");
}

TEST(NanPolicy, LayerNormNonFiniteRowsAndLargeRows) {
  const float inf = INFINITY, nan = NAN;
  Tensor x = from_vector({1, nan, 3, 1, 2, 3, 1, inf, 3, 5, 5, 5}, {4, 3});
  expect_row(nn::functional::layer_norm(x, 3, Tensor(), Tensor(), 1e-5),
             {kNaN, kNaN, kNaN, -1.2247357, 0, 1.2247357, kNaN, kNaN, kNaN, 0, 0, 0},
             "NaN and inf rows");
  // Statistics in double: where PyTorch's float32 variance overflows (NaN, or zeros), attn
  // normalises these rows as it would (1, 2, 3) and (1, -1, 0).
  Tensor big = from_vector({1e20f, 2e20f, 3e20f, 1e30f, -1e30f, 0}, {2, 3});
  expect_row(nn::functional::layer_norm(big, 3, Tensor(), Tensor(), 1e-5),
             {-1.2247449, 0, 1.2247449, 1.2247449, -1.2247449, 0}, "large rows");
}

}  // namespace
}  // namespace attn

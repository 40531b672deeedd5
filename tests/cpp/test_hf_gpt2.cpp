// Hugging Face GPT-2 checkpoints (attn/hf_gpt2.h): the exported file run by a naive GPT-2 forward
// written here from GPT-2's definition on the file's own tensors (Conv1D y = x W + b with W
// (in, out), packed q|k|v, tanh or exact GELU), which must give the model's logits; load after
// save gives the same model; every defect of a foreign directory is an attn::Error naming the
// file, the field or the keys. (Logits against transformers itself: tests/python/test_hf_gpt2.py.)
#include <attn/attn.h>
#include <attn/hf_gpt2.h>
#include <attn/io.h>
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

namespace fs = std::filesystem;
using attn::Tensor;
using attn::nn::GPT;
using attn::nn::GPTConfig;
using attn::testing::contains;
using attn::testing::error_of;
using attn::testing::slurp;
using attn::testing::spit;
using attn::testing::TempDir;
using json = nlohmann::json;

// Plain loops over the HF tensors: (T) ids -> (T, V) logits.
std::vector<float> naive_gpt2(const attn::io::SafeTensors& st, const json& cfg,
                              const std::vector<int64_t>& ids) {
  const int64_t V = cfg["vocab_size"], C = cfg["n_embd"], L = cfg["n_layer"], H = cfg["n_head"];
  const int64_t I = cfg["n_inner"].is_null() ? 4 * C : cfg["n_inner"].get<int64_t>();
  const double eps = cfg["layer_norm_epsilon"];
  const bool tanh_gelu = cfg["activation_function"] == "gelu_new";
  const int64_t T = int64_t(ids.size()), D = C / H;
  auto w = [&](const std::string& name) {
    const Tensor& t = st.at("transformer." + name);
    return std::vector<float>(t.data_ptr<float>(), t.data_ptr<float>() + t.numel());
  };
  using Mat = std::vector<std::vector<double>>;
  auto layer_norm = [&](const Mat& x, const std::string& name) {
    auto g = w(name + ".weight"), b = w(name + ".bias");
    Mat y = x;
    for (auto& row : y) {
      double mean = 0, var = 0;
      for (double v : row) mean += v / double(C);
      for (double v : row) var += (v - mean) * (v - mean) / double(C);
      for (int64_t c = 0; c < C; ++c)
        row[std::size_t(c)] = (row[std::size_t(c)] - mean) / std::sqrt(var + eps) * g[c] + b[c];
    }
    return y;
  };
  auto conv1d = [&](const Mat& x, const std::string& name, int64_t in, int64_t out) {
    auto W = w(name + ".weight"), b = w(name + ".bias");
    Mat y(x.size(), std::vector<double>(std::size_t(out)));
    for (std::size_t t = 0; t < x.size(); ++t)
      for (int64_t o = 0; o < out; ++o) {
        double s = b[o];
        for (int64_t i = 0; i < in; ++i) s += x[t][std::size_t(i)] * W[i * out + o];
        y[t][std::size_t(o)] = s;
      }
    return y;
  };
  auto wte = w("wte.weight"), wpe = w("wpe.weight");
  Mat x(std::size_t(T), std::vector<double>(std::size_t(C), 0.0));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t c = 0; c < C; ++c) x[t][c] = wte[ids[t] * C + c] + wpe[t * C + c];
  for (int64_t l = 0; l < L; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    Mat qkv = conv1d(layer_norm(x, h + "ln_1"), h + "attn.c_attn", C, 3 * C);
    Mat a(std::size_t(T), std::vector<double>(std::size_t(C), 0.0));
    for (int64_t hd = 0; hd < H; ++hd)
      for (int64_t t = 0; t < T; ++t) {
        std::vector<double> s(std::size_t(t + 1));
        double m = -1e300, z = 0;
        for (int64_t u = 0; u <= t; ++u) {
          double dot = 0;
          for (int64_t d = 0; d < D; ++d) dot += qkv[t][hd * D + d] * qkv[u][C + hd * D + d];
          s[u] = dot / std::sqrt(double(D));
          m = std::max(m, s[u]);
        }
        for (auto& v : s) z += (v = std::exp(v - m));
        for (int64_t d = 0; d < D; ++d) {
          double acc = 0;
          for (int64_t u = 0; u <= t; ++u) acc += s[u] / z * qkv[u][2 * C + hd * D + d];
          a[t][hd * D + d] = acc;
        }
      }
    Mat proj = conv1d(a, h + "attn.c_proj", C, C);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) x[t][c] += proj[t][c];
    Mat f = conv1d(layer_norm(x, h + "ln_2"), h + "mlp.c_fc", C, I);
    for (auto& row : f)
      for (auto& v : row)
        v = tanh_gelu ? 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)))
                      : 0.5 * v * (1 + std::erf(v / std::sqrt(2.0)));
    Mat m = conv1d(f, h + "mlp.c_proj", I, C);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < C; ++c) x[t][c] += m[t][c];
  }
  x = layer_norm(x, "ln_f");
  std::vector<float> logits(std::size_t(T * V));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t v = 0; v < V; ++v) {
      double s = 0;
      for (int64_t c = 0; c < C; ++c) s += x[t][c] * wte[v * C + c];
      logits[t * V + v] = float(s);
    }
  return logits;
}

GPTConfig small(bool bias = true) {
  GPTConfig c;
  c.vocab_size = 29;
  c.block_size = 12;
  c.n_layer = 2;
  c.n_head = 2;
  c.n_embd = 8;
  c.bias = bias;
  return c;
}

// A model whose LayerNorm and bias values are not their initial 1 and 0, so that a misplaced one
// shows in the logits, and whose matrices are 10 times nanoGPT's 0.02: with weights that small the
// exact and the tanh GELU differ by ~1e-6 in the logits, at 0.2 by ~1e-3.
std::shared_ptr<GPT> random_model(const GPTConfig& c, uint64_t seed) {
  attn::Generator g(seed);
  auto m = std::make_shared<GPT>(c, &g);
  attn::NoGradGuard ng;
  for (auto& [name, p] : m->named_parameters()) {
    if (p.dim() == 1)
      p.copy_(attn::randn(p.shape(), &g) * 0.3 + (name.ends_with("weight") ? 1 : 0));
    else
      p.mul_(10.0);
  }
  m->eval();
  return m;
}

std::vector<float> logits_of(const GPT& m, const std::vector<int64_t>& ids) {
  Tensor idx = attn::empty({1, int64_t(ids.size())}, attn::Dtype::Int64);
  std::copy(ids.begin(), ids.end(), idx.data_ptr<int64_t>());
  Tensor out = m.forward(idx).contiguous();
  return std::vector<float>(out.data_ptr<float>(), out.data_ptr<float>() + out.numel());
}

// float32 agreement relative to the logits' scale; returns the largest difference.
double expect_near(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) {
    worst = std::max(worst, std::abs(double(a[i]) - double(b[i])));
    scale = std::max(scale, std::abs(double(b[i])));
  }
  EXPECT_GT(scale, 0.5);  // not a degenerate model
  EXPECT_LE(worst, 2e-5 * scale) << "scale " << scale;
  return worst;
}

TEST(HfGpt2, ExportedFileRunsAsGpt2AndLoadsBack) {
  for (int variant = 0; variant < 4; ++variant) {
    GPTConfig c = small(variant != 1);
    if (variant == 2) c.gelu_approximate = "tanh", c.layer_norm_eps = 1e-3;
    if (variant == 3) c.n_inner = 20;
    auto model = random_model(c, 10 + uint64_t(variant));
    TempDir dir;
    attn::nn::save_hf_gpt2(*model, dir.path());
    EXPECT_EQ(dir.files(), (std::vector<std::string>{"config.json", "model.safetensors"}));
    const json cfg = json::parse(slurp(dir.file("config.json")));
    EXPECT_EQ(cfg["architectures"], json::array({"GPT2LMHeadModel"}));
    EXPECT_EQ(cfg["n_positions"], c.block_size);
    EXPECT_EQ(cfg["activation_function"], variant == 2 ? "gelu_new" : "gelu");
    const attn::io::SafeTensors st = attn::io::load_safetensors(dir.file("model.safetensors"));
    EXPECT_EQ(st.metadata.at("format"), "pt");
    EXPECT_FALSE(st.contains("lm_head.weight"));
    const int64_t I = c.mlp_width();
    EXPECT_EQ(st.at("transformer.h.1.attn.c_attn.weight").shape(), (attn::Shape{8, 24}));
    EXPECT_EQ(st.at("transformer.h.0.mlp.c_fc.weight").shape(), (attn::Shape{8, I}));
    EXPECT_EQ(st.at("transformer.h.0.mlp.c_proj.weight").shape(), (attn::Shape{I, 8}));
    const std::vector<int64_t> ids = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8};
    const std::vector<float> want = naive_gpt2(st, cfg, ids);
    expect_near(logits_of(*model, ids), want);
    // The other GELU is far outside that tolerance: the test tells them apart.
    json other = cfg;
    other["activation_function"] = cfg["activation_function"] == "gelu" ? "gelu_new" : "gelu";
    const std::vector<float> wrong = naive_gpt2(st, other, ids);
    double apart = 0;
    for (std::size_t i = 0; i < want.size(); ++i)
      apart = std::max(apart, std::abs(double(want[i]) - double(wrong[i])));
    EXPECT_GT(apart, 1e-4) << "variant " << variant;
    auto again = attn::nn::load_hf_gpt2(dir.path());
    EXPECT_TRUE(again->config().bias);
    EXPECT_EQ(again->config().gelu_approximate, c.gelu_approximate);
    EXPECT_EQ(again->config().n_inner, c.n_inner);
    EXPECT_EQ(logits_of(*again, ids), logits_of(*model, ids)) << "variant " << variant;
  }
}

// A saved model's directory, and helpers to damage it.
struct Saved {
  TempDir dir;
  json cfg;
  attn::io::SafeTensors st;
  Saved() {
    attn::nn::save_hf_gpt2(*random_model(small(), 1), dir.path());
    cfg = json::parse(slurp(dir.file("config.json")));
    st = attn::io::load_safetensors(dir.file("model.safetensors"));
  }
  void write_config(const json& j) const { spit(dir.file("config.json"), j.dump()); }
  void write_weights(const std::vector<std::pair<std::string, Tensor>>& t) const {
    attn::io::save_safetensors(dir.file("model.safetensors"), t, {{"format", "pt"}});
  }
  std::string load_error() const {
    return error_of([&] { attn::nn::load_hf_gpt2(dir.path()); });
  }
};

TEST(HfGpt2, UnsupportedConfigFieldsAreNamed) {
  Saved s;
  const std::vector<std::pair<json, std::string>> cases = {
      {{{"scale_attn_by_inverse_layer_idx", true}}, "'scale_attn_by_inverse_layer_idx' is true"},
      {{{"reorder_and_upcast_attn", true}}, "'reorder_and_upcast_attn' is true"},
      {{{"scale_attn_weights", false}}, "'scale_attn_weights' is false"},
      {{{"add_cross_attention", true}}, "'add_cross_attention' is true"},
      {{{"tie_word_embeddings", false}}, "'tie_word_embeddings' is false"},
      {{{"activation_function", "relu"}}, "'activation_function' is 'relu'"},
      {{{"model_type", "llama"}}, "model_type is 'llama'"},
      {{{"resid_pdrop", 0.2}}, "resid_pdrop 0.2, embd_pdrop 0 and attn_pdrop 0 differ"},
      {{{"n_layer", "2"}}, "field 'n_layer' must be an integer, got \"2\""},
      {{{"n_inner", 0}}, "field 'n_inner' must be null or >= 1, got 0"},
      {{{"n_head", 3}}, "n_embd 8 must be divisible by n_head 3"},
      {{{"layer_norm_epsilon", -1}}, "layer_norm_eps must be positive"},
  };
  for (const auto& [patch, want] : cases) {
    json j = s.cfg;
    j.update(patch);
    s.write_config(j);
    const std::string m = s.load_error();
    EXPECT_TRUE(contains(m, "[load_hf_gpt2] '" + s.dir.file("config.json") + "'")) << m;
    EXPECT_TRUE(contains(m, want)) << m;
  }
  json many = s.cfg;
  many["n_layer"] = int64_t(1) << 40;  // refused before anything of that size is built
  s.write_config(many);
  EXPECT_TRUE(contains(s.load_error(), "the config's n_layer 1099511627776 needs"))
      << s.load_error();
  spit(s.dir.file("config.json"), "{\n\"n_embd\": 8,\n oops}");
  const std::string m = s.load_error();
  EXPECT_TRUE(contains(m, "not valid JSON") && contains(m, "line 3")) << m;
}

TEST(HfGpt2, WeightDefectsNameTheKeys) {
  Saved s;
  auto without = [&](const std::string& key) {
    std::vector<std::pair<std::string, Tensor>> t;
    for (const auto& e : s.st.tensors)
      if (e.first != key) t.push_back(e);
    return t;
  };
  s.write_weights(without("transformer.h.1.mlp.c_fc.bias"));
  EXPECT_TRUE(contains(s.load_error(), "missing weights: transformer.h.1.mlp.c_fc.bias"));
  auto extra = s.st.tensors;
  extra.emplace_back("transformer.h.7.attn.c_attn.weight", attn::zeros({8, 24}));
  s.write_weights(extra);
  EXPECT_TRUE(contains(s.load_error(), "unexpected weights: transformer.h.7.attn.c_attn.weight"));
  auto reshaped = without("transformer.h.0.attn.c_attn.weight");
  reshaped.emplace_back("transformer.h.0.attn.c_attn.weight", attn::zeros({24, 8}));
  s.write_weights(reshaped);
  std::string m = s.load_error();
  EXPECT_TRUE(contains(
      m, "'transformer.h.0.attn.c_attn.weight' has shape (24, 8), the config needs (8, 24)"))
      << m;
  auto ints = without("transformer.ln_f.bias");
  ints.emplace_back("transformer.ln_f.bias", attn::zeros({8}, attn::Dtype::Int64));
  s.write_weights(ints);
  m = s.load_error();
  EXPECT_TRUE(contains(m, "'transformer.ln_f.bias' is I64, expected F32")) << m;
  // An untied head.
  auto untied = s.st.tensors;
  untied.emplace_back("lm_head.weight", attn::zeros({29, 8}));
  s.write_weights(untied);
  EXPECT_TRUE(contains(s.load_error(), "'lm_head.weight' differs from the token embedding"));
  // The first element that differs is named.
  untied.back().second = s.st.at("transformer.wte.weight").clone();
  untied.back().second.view({-1})[37].fill_(1e3);
  untied.back().second.view({-1})[90].fill_(1e3);
  s.write_weights(untied);
  EXPECT_TRUE(contains(s.load_error(), "differs from the token embedding (at element 37)"))
      << s.load_error();
  // A head of another shape is refused from the header, before any weight is read.
  untied.back().second = attn::zeros({30, 8});
  s.write_weights(untied);
  m = s.load_error();
  EXPECT_TRUE(contains(m,
                       "'lm_head.weight' is (30, 8) F32, expected float32 with wte's shape "
                       "(29, 8)"))
      << m;
  // A tied head saved anyway, and the mask buffers of older files, without the prefix: accepted.
  std::vector<std::pair<std::string, Tensor>> plain;
  for (const auto& [k, t] : s.st.tensors) plain.emplace_back(k.substr(12), t);
  plain.emplace_back("lm_head.weight", s.st.at("transformer.wte.weight").clone());
  plain.emplace_back("h.0.attn.bias", attn::ones({1, 1, 12, 12}));
  plain.emplace_back("h.1.attn.masked_bias", attn::full({}, -1e4));
  s.write_weights(plain);
  s.write_config(s.cfg);
  EXPECT_NO_THROW(attn::nn::load_hf_gpt2(s.dir.path()));
  // F64: the key and the dtype (the safetensors header written by hand).
  const std::string header =
      R"({"__metadata__":{"format":"pt"},"transformer.wte.weight":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}})";
  std::string bytes(8, '\0');
  for (int i = 0; i < 8; ++i) bytes[std::size_t(i)] = char((header.size() >> (8 * i)) & 0xFF);
  spit(s.dir.file("model.safetensors"), bytes + header + std::string(8, '\0'));
  m = s.load_error();
  EXPECT_TRUE(contains(m, "'transformer.wte.weight' has unsupported dtype F64") &&
              contains(m, "model.float()"))
      << m;
}

// A model saved after .half() or .bfloat16(): its weights are widened to float32 on loading (as
// transformers' from_pretrained does by default), the same model as the widened float32 file.
TEST(HfGpt2, HalfAndBfloat16CheckpointsAreWidenedToFloat32) {
  Saved s;
  for (attn::Dtype dt : {attn::Dtype::Float16, attn::Dtype::BFloat16}) {
    std::vector<std::pair<std::string, Tensor>> low, widened;
    for (const auto& [k, t] : s.st.tensors) {
      low.emplace_back(k, t.to(dt));
      widened.emplace_back(k, t.to(dt).to(attn::Dtype::Float32));
    }
    s.write_weights(low);
    auto a = attn::nn::load_hf_gpt2(s.dir.path());
    s.write_weights(widened);
    auto b = attn::nn::load_hf_gpt2(s.dir.path());
    const auto sa = a->state_dict(), sb = b->state_dict();
    ASSERT_EQ(sa.size(), sb.size());
    for (std::size_t i = 0; i < sa.size(); ++i) {
      EXPECT_EQ(sa[i].first, sb[i].first);
      EXPECT_EQ(sa[i].second.dtype(), attn::Dtype::Float32);
      EXPECT_TRUE(attn::equal(sa[i].second, sb[i].second)) << sa[i].first;
    }
  }
}

TEST(HfGpt2, MissingFilesAreNamed) {
  TempDir dir;
  auto err = [&] { return error_of([&] { attn::nn::load_hf_gpt2(dir.path()); }); };
  EXPECT_TRUE(contains(err(), "has no config.json"));
  spit(dir.file("config.json"), "{}");
  EXPECT_TRUE(contains(err(), "has no model.safetensors"));
  spit(dir.file("pytorch_model.bin"), "x");
  EXPECT_TRUE(contains(err(), "safe_serialization=True"));
  spit(dir.file("model.safetensors.index.json"), "{}");
  EXPECT_TRUE(contains(err(), "sharded checkpoint"));
  EXPECT_TRUE(
      contains(error_of([&] { attn::nn::load_hf_gpt2(dir.file("nope")); }), "not a directory"));
  EXPECT_FALSE(attn::nn::is_hf_checkpoint_dir(dir.file("nope")));
  EXPECT_TRUE(attn::nn::is_hf_checkpoint_dir(dir.path()));
}

TEST(HfGpt2, ConfigFieldsAreValidated) {
  GPTConfig c = small();
  c.gelu_approximate = "sigmoid";
  EXPECT_TRUE(contains(error_of([&] { GPT m(c); }), "gelu_approximate must be 'none' or 'tanh'"));
  c = small();
  c.n_inner = -1;
  EXPECT_TRUE(contains(error_of([&] { GPT m(c); }), "n_inner must be >= 0"));
  c = small();
  c.layer_norm_eps = 0;
  EXPECT_TRUE(contains(error_of([&] { GPT m(c); }), "layer_norm_eps must be positive"));
}

}  // namespace

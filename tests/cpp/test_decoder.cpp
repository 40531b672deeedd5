// attn::nn::Decoder against a naive forward written here in double from the families' published
// definitions (explicit scores, masks and softmax; RoPE angles in double), for configurations of
// every family, Qwen3's QK-norm, Gemma 3's sliding pattern, local RoPE base and linear RoPE
// scaling, gpt-oss's sinks, yarn RoPE and mixture of experts, and Mixtral's and Qwen2-MoE's
// mixtures (a shared expert, dense layers among sparse ones) included (the comparison with
// transformers itself, for the families its test version has, is
// tests/python/test_decoder_vs_transformers.py). Also: the key/value cache gives the full forward's
// logits token by token, greedy generation with stop tokens, config.json parsing per family, and
// refusals.
#include <attn/autograd.h>
#include <attn/decoder.h>
#include <attn/hf_decoder.h>
#include <attn/io.h>
#include <attn/ops.h>
#include <attn/tensor.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "../../src/backend/cpu/isa.h"
#include "test_util.h"

namespace {

using attn::Tensor;
using attn::nn::Decoder;
using attn::nn::DecoderConfig;
using Vec = std::vector<double>;

Vec values(const Tensor& t) {
  const Tensor c = t.contiguous();
  return Vec(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

// y (rows, out) = x (rows, in) W^T (+ b), W (out, in).
Vec linear(const Vec& x, int64_t rows, const attn::nn::Linear& l) {
  const Vec w = values(l.weight), b = l.bias.defined() ? values(l.bias) : Vec();
  const int64_t in = l.in_features, out = l.out_features;
  Vec y(std::size_t(rows * out));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o) {
      double s = b.empty() ? 0.0 : b[std::size_t(o)];
      for (int64_t i = 0; i < in; ++i) s += x[std::size_t(r * in + i)] * w[std::size_t(o * in + i)];
      y[std::size_t(r * out + o)] = s;
    }
  return y;
}

// RMSNorm over consecutive groups of `dim`.
Vec rms(const Vec& x, const attn::nn::DecoderRMSNorm& n) {
  const Vec w = values(n.weight);
  const std::size_t dim = w.size();
  Vec y(x.size());
  for (std::size_t g = 0; g < x.size(); g += dim) {
    double ss = 0;
    for (std::size_t i = 0; i < dim; ++i) ss += x[g + i] * x[g + i];
    const double r = 1.0 / std::sqrt(ss / double(dim) + n.eps);
    for (std::size_t i = 0; i < dim; ++i)
      y[g + i] = x[g + i] * r * (n.plus_one ? 1.0 + w[i] : w[i]);
  }
  return y;
}

Vec add(Vec a, const Vec& b) {
  for (std::size_t i = 0; i < a.size(); ++i) a[i] += b[i];
  return a;
}

// The logits (T, V) of one sequence.
Vec naive_forward(const Decoder& m, const std::vector<int64_t>& ids) {
  const DecoderConfig& c = m.config();
  const int64_t T = int64_t(ids.size()), C = c.hidden_size, D = c.head_size();
  const int64_t H = c.num_attention_heads, Hkv = c.num_key_value_heads;
  const Vec emb = values(m.model->embed_tokens->weight);
  Vec x(std::size_t(T * C));
  const double escale = c.scale_embeddings ? double(float(std::sqrt(double(C)))) : 1.0;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < C; ++i)
      x[std::size_t(t * C + i)] = emb[std::size_t(ids[std::size_t(t)] * C + i)] * escale;
  // yarn: the ramp between the dims that keep their frequency and those divided by factor, and
  // the scale of cos and sin.
  double yarn_low = 0, yarn_high = 1, yarn_scale = 1;
  if (c.rope_type == "yarn") {
    const double L = double(c.rope_original_max_position_embeddings), b = c.rope_theta;
    auto dim_of = [&](double turns) {
      return double(D) * std::log(L / (turns * 2 * M_PI)) / (2 * std::log(b));
    };
    yarn_low = std::max(0.0, dim_of(c.rope_beta_fast));
    yarn_high = std::min(double(D - 1), dim_of(c.rope_beta_slow));
    yarn_scale = 0.1 * std::log(c.rope_factor) + 1.0;
  }
  auto rope = [&](Vec& v, int64_t heads, bool local) {
    const double base = local ? c.rope_local_base_freq : c.rope_theta;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t h = 0; h < heads; ++h) {
        double* p = &v[std::size_t((t * heads + h) * D)];
        Vec out(static_cast<std::size_t>(D), 0.0);
        for (int64_t i = 0; i < D / 2; ++i) {
          double f = 1.0 / std::pow(base, double(2 * i) / double(D));
          if (!local && c.rope_type == "linear") f /= c.rope_factor;
          if (!local && c.rope_type == "llama3") {  // Llama 3.1's frequency scaling
            const double old = double(c.rope_original_max_position_embeddings);
            const double wavelen = 2 * M_PI / f;
            if (wavelen > old / c.rope_low_freq_factor) {
              f /= c.rope_factor;
            } else if (wavelen >= old / c.rope_high_freq_factor) {
              const double smooth = (old / wavelen - c.rope_low_freq_factor) /
                                    (c.rope_high_freq_factor - c.rope_low_freq_factor);
              f = (1 - smooth) * f / c.rope_factor + smooth * f;
            }
          }
          if (!local && c.rope_type == "yarn") {
            const double ramp =
                std::clamp((double(i) - yarn_low) / (yarn_high - yarn_low), 0.0, 1.0);
            f = f / c.rope_factor * ramp + f * (1 - ramp);
          }
          const double a = double(t) * f;
          const double co = std::cos(a) * yarn_scale, si = std::sin(a) * yarn_scale;
          out[std::size_t(i)] = p[i] * co - p[i + D / 2] * si;
          out[std::size_t(i + D / 2)] = p[i + D / 2] * co + p[i] * si;
        }
        std::copy(out.begin(), out.end(), p);
      }
  };
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const auto& L = *m.model->layers[std::size_t(l)];
    const auto& A = *L.self_attn;
    const Vec h = rms(x, *L.input_layernorm);
    Vec q = linear(h, T, *A.q_proj), k = linear(h, T, *A.k_proj), v = linear(h, T, *A.v_proj);
    if (A.q_norm) q = rms(q, *A.q_norm), k = rms(k, *A.k_norm);
    const bool local = c.is_sliding(l) && c.rope_local_base_freq > 0;
    rope(q, H, local);
    rope(k, Hkv, local);
    const double scale =
        1.0 / std::sqrt(c.query_pre_attn_scalar > 0 ? c.query_pre_attn_scalar : double(D));
    Vec o(std::size_t(T * H * D), 0.0);
    for (int64_t hh = 0; hh < H; ++hh) {
      const int64_t g = hh / (H / Hkv);
      for (int64_t i = 0; i < T; ++i) {
        Vec s(std::size_t(i + 1), -INFINITY);
        // A sink: one more logit in the softmax, with no value.
        const double sink = A.sinks.defined() ? values(A.sinks)[std::size_t(hh)] : -INFINITY;
        double mx = sink;
        for (int64_t j = 0; j <= i; ++j) {
          if (c.is_sliding(l) && i - j >= c.sliding_window) continue;
          double d = 0;
          for (int64_t e = 0; e < D; ++e)
            d += q[std::size_t((i * H + hh) * D + e)] * k[std::size_t((j * Hkv + g) * D + e)];
          d *= scale;
          if (c.attn_logit_softcapping > 0)
            d = c.attn_logit_softcapping * std::tanh(d / c.attn_logit_softcapping);
          s[std::size_t(j)] = d;
          mx = std::max(mx, d);
        }
        double z = std::exp(sink - mx);
        for (double& e : s) z += (e = std::exp(e - mx));
        for (int64_t j = 0; j <= i; ++j)
          for (int64_t e = 0; e < D; ++e)
            o[std::size_t((i * H + hh) * D + e)] +=
                s[std::size_t(j)] / z * v[std::size_t((j * Hkv + g) * D + e)];
      }
    }
    Vec a = linear(o, T, *A.o_proj);
    if (L.pre_feedforward_layernorm) a = rms(a, *L.post_attention_layernorm);
    x = add(x, a);
    const Vec h2 = L.pre_feedforward_layernorm ? rms(x, *L.pre_feedforward_layernorm)
                                               : rms(x, *L.post_attention_layernorm);
    if (L.moe) {  // top-k experts of the router's logits, weighted by their softmax
      const auto& E = *L.moe->experts;
      const Vec router = linear(h2, T, *L.moe->router), gu_w = values(E.gate_up_proj),
                gu_b = values(E.gate_up_proj_bias), dn_w = values(E.down_proj),
                dn_b = values(E.down_proj_bias);
      const int64_t NE = c.num_local_experts, I = c.intermediate_size, K = c.num_experts_per_tok;
      Vec mo(std::size_t(T * C), 0.0);
      for (int64_t t = 0; t < T; ++t) {
        std::vector<int64_t> order(static_cast<std::size_t>(NE));
        for (int64_t e = 0; e < NE; ++e) order[std::size_t(e)] = e;
        const double* lg = &router[std::size_t(t * NE)];
        std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return lg[a] > lg[b]; });
        double z = 0;
        for (int64_t j = 0; j < K; ++j) z += std::exp(lg[order[std::size_t(j)]] - lg[order[0]]);
        for (int64_t j = 0; j < K; ++j) {
          const int64_t e = order[std::size_t(j)];
          const double w = std::exp(lg[e] - lg[order[0]]) / z;
          Vec act(static_cast<std::size_t>(I));
          for (int64_t u = 0; u < I; ++u) {
            double g = gu_b[std::size_t(e * 2 * I + 2 * u)],
                   up = gu_b[std::size_t(e * 2 * I + 2 * u + 1)];
            for (int64_t i = 0; i < C; ++i) {
              const double xi = h2[std::size_t(t * C + i)];
              g += xi * gu_w[std::size_t((e * C + i) * 2 * I + 2 * u)];
              up += xi * gu_w[std::size_t((e * C + i) * 2 * I + 2 * u + 1)];
            }
            g = std::min(g, c.swiglu_limit);
            up = std::clamp(up, -c.swiglu_limit, c.swiglu_limit);
            act[std::size_t(u)] = (up + 1) * g / (1 + std::exp(-c.swiglu_alpha * g));
          }
          for (int64_t o = 0; o < C; ++o) {
            double y = dn_b[std::size_t(e * C + o)];
            for (int64_t u = 0; u < I; ++u)
              y += act[std::size_t(u)] * dn_w[std::size_t((e * I + u) * C + o)];
            mo[std::size_t(t * C + o)] += w * y;
          }
        }
      }
      x = add(x, mo);
      continue;
    }
    // A SwiGLU (or GELU-tanh gated) MLP of rows (n, C).
    auto mlp = [&](const attn::nn::DecoderMLP& M, const Vec& rows, int64_t n) {
      Vec gate = linear(rows, n, *M.gate_proj);
      const Vec up = linear(rows, n, *M.up_proj);
      for (std::size_t i = 0; i < gate.size(); ++i) {
        const double z = gate[i];
        const double act =
            c.hidden_act == "silu"
                ? z / (1.0 + std::exp(-z))
                : 0.5 * z * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (z + 0.044715 * z * z * z)));
        gate[i] = act * up[i];
      }
      return linear(gate, n, *M.down_proj);
    };
    if (L.sparse_moe) {  // the top-k of the softmax over every expert (renormalised or not),
                         // each chosen expert's MLP times its weight; a gated shared expert
      const auto& S = *L.sparse_moe;
      const Vec router = linear(h2, T, *S.gate);
      const int64_t NE = c.num_local_experts, K = c.num_experts_per_tok;
      Vec mo(std::size_t(T * C), 0.0);
      for (int64_t t = 0; t < T; ++t) {
        const Vec row(h2.begin() + t * C, h2.begin() + (t + 1) * C);
        const double* lg = &router[std::size_t(t * NE)];
        std::vector<int64_t> order(static_cast<std::size_t>(NE));
        for (int64_t e = 0; e < NE; ++e) order[std::size_t(e)] = e;
        std::sort(order.begin(), order.end(), [&](int64_t a, int64_t b) { return lg[a] > lg[b]; });
        double z = 0, z_top = 0;
        for (int64_t e = 0; e < NE; ++e) z += std::exp(lg[e] - lg[order[0]]);
        for (int64_t j = 0; j < K; ++j) z_top += std::exp(lg[order[std::size_t(j)]] - lg[order[0]]);
        for (int64_t j = 0; j < K; ++j) {
          const int64_t e = order[std::size_t(j)];
          const double w = std::exp(lg[e] - lg[order[0]]) / (c.norm_topk_prob ? z_top : z);
          const Vec y = mlp(*S.experts[std::size_t(e)], row, 1);
          for (int64_t o = 0; o < C; ++o) mo[std::size_t(t * C + o)] += w * y[std::size_t(o)];
        }
        if (S.shared_expert) {
          const double g = linear(row, 1, *S.shared_expert_gate)[0];
          const Vec y = mlp(*S.shared_expert, row, 1);
          for (int64_t o = 0; o < C; ++o)
            mo[std::size_t(t * C + o)] += y[std::size_t(o)] / (1.0 + std::exp(-g));
        }
      }
      x = add(x, mo);
      continue;
    }
    Vec mo = mlp(*L.mlp, h2, T);
    if (L.post_feedforward_layernorm) mo = rms(mo, *L.post_feedforward_layernorm);
    x = add(x, mo);
  }
  x = rms(x, *m.model->norm);
  Vec logits;
  if (m.lm_head) {
    logits = linear(x, T, *m.lm_head);
  } else {
    attn::nn::Linear tied(C, c.vocab_size, false);
    tied.weight = m.model->embed_tokens->weight;
    logits = linear(x, T, tied);
  }
  if (c.final_logit_softcapping > 0)
    for (double& z : logits)
      z = c.final_logit_softcapping * std::tanh(z / c.final_logit_softcapping);
  return logits;
}

DecoderConfig small(const std::string& family) {
  DecoderConfig c;
  c.model_type = family;
  c.vocab_size = 53, c.hidden_size = 32, c.intermediate_size = 48, c.num_hidden_layers = 3;
  c.num_attention_heads = 4, c.num_key_value_heads = 2;
  if (family == "qwen3") {
    c.qk_norm = true, c.head_dim = 12, c.rope_theta = 1e6;
  } else if (family == "gemma3") {
    c.qk_norm = true, c.head_dim = 16, c.norm_plus_one = true, c.sandwich_norms = true;
    c.scale_embeddings = true, c.hidden_act = "gelu_tanh", c.tie_word_embeddings = true;
    c.query_pre_attn_scalar = 20, c.sliding_window = 4, c.sliding_layers = {true, true, false};
    c.rope_theta = 1e6, c.rope_local_base_freq = 1e4, c.rope_type = "linear", c.rope_factor = 8;
  } else if (family == "gemma2") {
    c.head_dim = 8, c.norm_plus_one = true, c.sandwich_norms = true, c.scale_embeddings = true;
    c.hidden_act = "gelu_tanh", c.tie_word_embeddings = true, c.query_pre_attn_scalar = 10;
    c.sliding_window = 3, c.sliding_layers = {true, false, true};
    c.attn_logit_softcapping = 4, c.final_logit_softcapping = 2;
  } else if (family == "gpt_oss") {
    c.head_dim = 8, c.qkv_bias = c.o_bias = true, c.attention_sinks = true;
    c.norm_in_float32 = true, c.sliding_window = 3, c.sliding_layers = {true, false, true};
    c.num_local_experts = 5, c.num_experts_per_tok = 2, c.intermediate_size = 24;
    c.rope_type = "yarn", c.rope_factor = 4, c.rope_original_max_position_embeddings = 8;
    c.rope_truncate = false, c.rope_theta = 150000;
  } else if (family == "mixtral") {  // every layer slides; 4 experts, 2 per token, renormalised
    c.sliding_window = 4, c.sliding_layers = {true, true, true}, c.rope_theta = 1e6;
    c.num_local_experts = 4, c.num_experts_per_tok = 2, c.moe_type = "qwen3_moe";
    c.norm_topk_prob = true;
  } else if (family == "qwen2_moe") {  // layer 1 dense; 5 experts of 16, top 3; a shared expert
    c.qkv_bias = true, c.num_local_experts = 5, c.num_experts_per_tok = 3;
    c.moe_type = "qwen3_moe", c.moe_intermediate_size = 16;
    c.shared_expert_intermediate_size = 24, c.mlp_only_layers = {1};
  } else if (family == "llama3") {
    c.rope_type = "llama3", c.rope_factor = 8, c.rope_original_max_position_embeddings = 8;
    c.rope_theta = 5e5, c.qkv_bias = c.o_bias = c.mlp_bias = true;
  }
  return c;
}

// A model of `c` with every weight random (the norms too, so that they matter).
std::shared_ptr<Decoder> random_model(const DecoderConfig& c, uint64_t seed) {
  attn::Generator gen(seed);
  auto m = std::make_shared<Decoder>(c, &gen);
  attn::NoGradGuard no_grad;
  for (auto& [name, p] : m->named_parameters()) {
    Tensor r = attn::randn(p.shape(), &gen);
    if (name.find("norm") != std::string::npos) {
      p.add_(r * 0.3);
    } else {
      p.copy_(r * 0.3);
    }
  }
  return m;
}

const std::vector<int64_t> kIds = {3, 17, 52, 0, 9, 9, 41, 23, 5, 30, 12, 7};

// int64 (rows, ids.size() / rows).
Tensor id_tensor(const std::vector<int64_t>& ids, int64_t rows = 1) {
  Tensor t = attn::empty({rows, int64_t(ids.size()) / rows}, attn::Dtype::Int64);
  std::copy(ids.begin(), ids.end(), t.data_ptr<int64_t>());
  return t;
}

// The largest |a - b| over the largest |b| (at least 1).
double relative_error(const Vec& a, const Vec& b) {
  double scale = 1, err = 0;
  for (std::size_t i = 0; i < b.size(); ++i) {
    scale = std::max(scale, std::abs(b[i]));
    err = std::max(err, std::abs(a[i] - b[i]));
  }
  return err / scale;
}

class Families : public ::testing::TestWithParam<std::string> {};

TEST_P(Families, ForwardEqualsTheNaiveDefinition) {
  const auto m = random_model(small(GetParam()), 11);
  const Tensor logits = m->forward(id_tensor(kIds));
  const Vec ours = values(logits), ref = naive_forward(*m, kIds);
  ASSERT_EQ(ours.size(), ref.size());
  EXPECT_LT(relative_error(ours, ref), 2e-5) << GetParam();
}

// 40 ids fed through a cache in pieces that take each of its paths: a prompt (the fused kernel on
// the fresh keys), single tokens and a chunk of 3 (read in the cache, paged_attention's kernel),
// and a chunk of 20 after others (the fused kernel over the cached prefix).
const std::vector<int64_t> kLongIds = {3,  17, 52, 0,  9,  9,  41, 23, 5,  30, 12, 7,  44, 2,
                                       19, 33, 8,  50, 27, 1,  36, 11, 48, 6,  14, 29, 40, 21,
                                       4,  38, 25, 16, 47, 10, 31, 22, 13, 45, 35, 28};
const std::vector<int64_t> kPieces = {5, 1, 1, 3, 1, 20, 1, 1, 1, 1, 5};

// Two rows, kLongIds and its reverse: (2, 40).
Tensor long_ids() {
  std::vector<int64_t> ids = kLongIds;
  ids.insert(ids.end(), kLongIds.rbegin(), kLongIds.rend());
  return id_tensor(ids, 2);
}

// The logits of ids (B, 40) fed through the cache in kPieces, laid out as forward's (B, 40, V).
Vec cached_logits(const Decoder& m, const Tensor& ids, attn::nn::DecoderCache& cache) {
  std::vector<Tensor> parts;
  int64_t t = 0;
  for (int64_t n : kPieces) {
    parts.push_back(m.forward_cached(ids.narrow(1, t, n), cache));
    t += n;
  }
  return values(attn::cat(parts, 1));
}

TEST_P(Families, CachedDecodingGivesTheFullForwardsLogits) {
  const auto m = random_model(small(GetParam()), 12);
  const Tensor ids = long_ids();
  const Vec full = values(m->forward(ids));
  attn::nn::DecoderCache cache;
  const Vec stepped = cached_logits(*m, ids, cache);
  EXPECT_EQ(cache.length, 40);
  EXPECT_EQ(cache.k[0].dtype(), attn::Dtype::Float32);
  ASSERT_EQ(stepped.size(), full.size());
  EXPECT_LT(relative_error(stepped, full), 1e-5);
}

TEST_P(Families, CachedDecodingInBfloat16AndFloat16ReadsACacheOfTheModelsDtype) {
  // The full forward in the 2-byte dtype is the reference, to its rounding: the paths' float32
  // sums differ in order, and a rounding of their results can land on either side.
  for (const attn::Dtype dt : {attn::Dtype::BFloat16, attn::Dtype::Float16}) {
    SCOPED_TRACE(attn::dtype_name(dt));
    auto m = random_model(small(GetParam()), 12);
    const Tensor ids = long_ids();
    const Vec full32 = values(m->forward(ids));
    m->to(dt);
    const Vec full = values(m->forward(ids));
    attn::nn::DecoderCache cache;
    const Vec stepped = cached_logits(*m, ids, cache);
    EXPECT_EQ(cache.length, 40);
    EXPECT_EQ(cache.k[0].dtype(), dt);
    ASSERT_EQ(stepped.size(), full.size());
    // As close to the 2-byte forward as that is to the float32 one, at most.
    EXPECT_LT(relative_error(stepped, full), std::max(0.02, relative_error(full, full32)));
  }
}

// The family's config with one layer (the first): its keys and values depend on the tokens and
// their positions alone, so a cache after eviction must equal a fresh forward of the kept tokens.
DecoderConfig one_layer(const std::string& family) {
  DecoderConfig c = small(family);
  c.num_hidden_layers = 1;
  if (!c.sliding_layers.empty()) c.sliding_layers.resize(1);
  c.mlp_only_layers.clear();
  return c;
}

// Evicting tokens 3 .. 12 of 30 leaves the first 3 and the last 17, rotated to positions 3 ..
// 19: the next 5 tokens' logits are those of a forward over the 25 kept tokens (in float32, and
// in the 2-byte dtypes to their rounding).
TEST_P(Families, EvictionRotatesTheKeptKeysToTheirNewPositions) {
  for (const attn::Dtype dt : {attn::Dtype::Float32, attn::Dtype::BFloat16, attn::Dtype::Float16}) {
    SCOPED_TRACE(attn::dtype_name(dt));
    auto m = random_model(one_layer(GetParam()), 21);
    const Tensor ids = id_tensor(kLongIds);
    std::vector<int64_t> kept(kLongIds.begin(), kLongIds.begin() + 3);
    kept.insert(kept.end(), kLongIds.begin() + 13, kLongIds.begin() + 35);
    const Vec full32 = values(m->forward(id_tensor(kept)).narrow(1, 20, 5));
    if (dt != attn::Dtype::Float32) m->to(dt);
    const Vec full = values(m->forward(id_tensor(kept)).narrow(1, 20, 5));
    attn::nn::DecoderCache cache;
    m->forward_cached(ids.narrow(1, 0, 30), cache);
    m->evict(cache, 3, 10);
    EXPECT_EQ(cache.length, 20);
    const Vec stepped = values(m->forward_cached(ids.narrow(1, 30, 5), cache));
    EXPECT_EQ(cache.length, 25);
    ASSERT_EQ(stepped.size(), full.size());
    const double tol =
        dt == attn::Dtype::Float32 ? 2e-5 : std::max(0.02, relative_error(full, full32));
    EXPECT_LT(relative_error(stepped, full), tol);
  }
}

// save_hf_decoder writes what load_hf_decoder reads back as the same model: the same logits,
// bit for bit, in float32 and in bfloat16 (the file's dtype and torch_dtype follow the model's).
TEST_P(Families, SavedAsAHuggingFaceDirectoryItLoadsAsTheSameModel) {
  DecoderConfig c = small(GetParam());
  if (c.model_type == "llama3") c.model_type = "llama";  // the test's names for HF's types
  if (c.model_type == "gemma3") c.model_type = "gemma3_text";
  auto m = random_model(c, 8);
  m->eval();
  const Tensor ids = id_tensor(kIds, 2);
  for (const attn::Dtype dt : {attn::Dtype::Float32, attn::Dtype::BFloat16}) {
    SCOPED_TRACE(attn::dtype_name(dt));
    if (dt != attn::Dtype::Float32) m->to(dt);
    attn::testing::TempDir dir;
    attn::nn::save_hf_decoder(*m, dir.file("saved"));
    const std::string config = attn::io::read_file(dir.file("saved/config.json"));
    EXPECT_NE(config.find("\"torch_dtype\": \"" + attn::dtype_name(dt).substr(6) + "\""),
              std::string::npos)
        << config;
    auto back = attn::nn::load_hf_decoder(dir.file("saved"), dt);
    EXPECT_EQ(back->config().head_size(), c.head_size());
    EXPECT_EQ(back->config().sliding_layers.empty() ? std::vector<bool>(3, false)
                                                    : back->config().sliding_layers,
              c.sliding_layers.empty() ? std::vector<bool>(3, false) : c.sliding_layers);
    EXPECT_EQ(values(back->forward(ids)), values(m->forward(ids)));
  }
}

// gpt-oss's experts kept in MXFP4 are saved as released (NAME_blocks, NAME_scales: the bytes
// held, and a quantization_config) and load back as the same kept model, bit for bit; saved with
// dequantize_mxfp4 they are floats that load as the dequantized model. A config.json whose
// quantization_config says "dequantize": true is decoded on load.
namespace {

// A small gpt-oss Decoder whose experts are kept in MXFP4, random codes and scales around 2^0.
std::shared_ptr<attn::nn::Decoder> random_mxfp4_model(DecoderConfig& c) {
  c = small("gpt_oss");
  c.intermediate_size = 32, c.mxfp4_experts = true;  // whole groups of 32 in both products
  auto m = random_model(c, 9);
  attn::Generator gen(10);
  auto bytes = [&gen](int64_t n, int lo, int hi) {
    const Tensor r = attn::randint(lo, hi, {n}, &gen);
    std::vector<uint8_t> out(std::size_t(n), 0);
    for (int64_t i = 0; i < n; ++i) out[std::size_t(i)] = uint8_t(r.data_ptr<int64_t>()[i]);
    return out;
  };
  const int64_t E = c.num_local_experts, I = c.intermediate_size, H = c.hidden_size;
  for (auto& layer : m->model->layers) {
    attn::nn::DecoderExperts& ex = *layer->moe->experts;
    ex.gate_up_mxfp4 = attn::Mxfp4Matrices(E, 2 * I, H, bytes(E * 2 * I * H / 2, 0, 256),
                                           bytes(E * 2 * I * H / 32, 122, 129));
    ex.down_mxfp4 =
        attn::Mxfp4Matrices(E, H, I, bytes(E * H * I / 2, 0, 256), bytes(E * H * I / 32, 122, 129));
  }
  m->eval();
  return m;
}

}  // namespace

TEST(HfDecoder, KeptMxfp4ExpertsAreSavedAsReleasedOrDecoded) {
  DecoderConfig c;
  auto m = random_mxfp4_model(c);
  const int64_t E = c.num_local_experts, I = c.intermediate_size, H = c.hidden_size;
  const Tensor ids = id_tensor(kIds, 2);
  const Vec want = values(m->forward(ids));
  attn::testing::TempDir dir;
  attn::nn::save_hf_decoder(*m, dir.file("kept"));
  const std::string config = attn::io::read_file(dir.file("kept/config.json"));
  EXPECT_NE(config.find("\"quant_method\": \"mxfp4\""), std::string::npos) << config;
  const attn::io::SafeTensorsFile f(dir.file("kept/model.safetensors"));
  const auto& ex0 = *m->model->layers[1]->moe->experts;
  EXPECT_EQ(f.find("model.layers.1.mlp.experts.gate_up_proj_blocks")->shape,
            (attn::Shape{E, 2 * I, H / 32, 16}));
  EXPECT_EQ(f.read_u8("model.layers.1.mlp.experts.gate_up_proj_blocks"), *ex0.gate_up_mxfp4.blocks);
  EXPECT_EQ(f.read_u8("model.layers.1.mlp.experts.down_proj_scales"), *ex0.down_mxfp4.scales);
  EXPECT_EQ(f.find("model.layers.1.mlp.experts.gate_up_proj"), nullptr);
  auto back = attn::nn::load_hf_decoder(dir.file("kept"));
  ASSERT_TRUE(back->config().mxfp4_experts);
  EXPECT_EQ(*back->model->layers[2]->moe->experts->down_mxfp4.blocks,
            *m->model->layers[2]->moe->experts->down_mxfp4.blocks);
  EXPECT_EQ(values(back->forward(ids)), want);

  attn::nn::save_hf_decoder(*m, dir.file("decoded"), /*dequantize_mxfp4=*/true);
  EXPECT_EQ(attn::io::read_file(dir.file("decoded/config.json")).find("quantization_config"),
            std::string::npos);
  auto decoded = attn::nn::load_hf_decoder(dir.file("decoded"));
  ASSERT_FALSE(decoded->config().mxfp4_experts);
  EXPECT_TRUE(attn::equal(
      decoded->parameter("model.layers.0.mlp.experts.down_proj").select(0, 3),
      attn::mxfp4_dequantize(m->model->layers[0]->moe->experts->down_mxfp4, 3).transpose(0, 1)));
  EXPECT_LT(relative_error(values(decoded->forward(ids)), want), 2e-5);

  // "dequantize": true in the saved config: decoded on load, as transformers does.
  std::string asks = config;
  asks.replace(asks.find("\"quant_method\""), 0, "\"dequantize\": true, ");
  attn::io::write_file_atomic(dir.file("kept/config.json"), asks);
  EXPECT_FALSE(attn::nn::load_hf_decoder(dir.file("kept"))->config().mxfp4_experts);
  asks.replace(asks.find("true, \"quant_method\""), 4, "1");
  attn::io::write_file_atomic(dir.file("kept/config.json"), asks);
  EXPECT_ERROR_HAS(attn::nn::load_hf_decoder(dir.file("kept")),
                   "quantization_config dequantize must be true or false, got 1");
}

// set_mxfp4_int8_activations: a few tokens' expert products with x rounded to 8 bits (llama.cpp's
// q8_0) move the logits by about what bfloat16 activations do, and off again gives the same bits as
// before; a model without MXFP4 experts refuses it.
TEST(HfDecoder, Mxfp4Int8ActivationsRoundLikeLlamaCpp) {
  using attn::kernels::Isa;
  const Isa isa = attn::kernels::active_isa();  // ATTN_CPU_ISA may cap it below the CPU's
  if (isa != Isa::Avx2 && isa != Isa::Avx512)
    GTEST_SKIP() << "the 8-bit path needs AVX2 (elsewhere the request is ignored)";
  DecoderConfig c;
  auto m = random_mxfp4_model(c);
  attn::NoGradGuard no_grad;  // products with a gradient decode the matrices instead
  const Tensor ids = id_tensor({3, 1, 4, 1, 5}, 1);  // 5 rows: the streaming product
  const Vec want = values(m->forward(ids));
  m->set_mxfp4_int8_activations(true);
  const Vec got = values(m->forward(ids));
  EXPECT_NE(got, want);
  // about as far from float32's logits as the same model's in bfloat16, whose activations round
  // to 8 significant bits as 8-bit integers round a group's largest (here 0.066 against 0.031)
  DecoderConfig c16;
  auto m16 = random_mxfp4_model(c16);
  m16->to(attn::Dtype::BFloat16);
  const double err16 = relative_error(values(m16->forward(ids).to(attn::Dtype::Float32)), want);
  EXPECT_LT(relative_error(got, want), 4 * err16);
  m->set_mxfp4_int8_activations(false);
  EXPECT_EQ(values(m->forward(ids)), want);
  EXPECT_ERROR_HAS(random_model(small("llama"), 1)->set_mxfp4_int8_activations(true),
                   "Decoder::set_mxfp4_int8_activations] the model keeps no experts in MXFP4");
}

TEST(HfDecoderConfig, WhatAFamilyCannotSayIsRefusedBeforeAnythingIsWritten) {
  DecoderConfig c = small("llama");
  c.qk_norm = true;
  auto m = random_model(c, 1);
  attn::testing::TempDir dir;
  EXPECT_EQ(attn::testing::error_of([&] { attn::nn::save_hf_decoder(*m, dir.file("out")); }),
            "[save_hf_decoder] a llama config.json cannot hold this model's qk_norm true "
            "(written as false)");
  EXPECT_FALSE(std::filesystem::exists(dir.file("out")));
  c = small("gemma2");
  c.model_type = "gemma";  // Gemma 1 has no sliding window
  EXPECT_NE(attn::testing::error_of([&] {
              attn::nn::decoder_config_to_hf_json(c);
            }).find("sliding_layers [true,false,true] (written as [false,false,false])"),
            std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Decoder, Families,
                         ::testing::Values("llama", "llama3", "qwen3", "gemma2", "gemma3",
                                           "gpt_oss", "mixtral", "qwen2_moe"));

TEST(Decoder, GreedyGenerationFollowsTheArgmaxAndStops) {
  const auto m = random_model(small("qwen3"), 13);
  const Tensor prompt = id_tensor({3, 17, 52, 0, 9, 1}, 2);
  Decoder::GenerateOptions o;
  o.max_new_tokens = 6;
  const Tensor out = m->generate(prompt, o);
  ASSERT_EQ(out.size(1), 9);
  for (int64_t b = 0; b < 2; ++b) {  // each new token is the argmax of the full forward
    for (int64_t t = 3; t < 9; ++t) {
      const Tensor logits = m->forward(out.narrow(0, b, 1).narrow(1, 0, t));
      const int64_t want = attn::argmax(logits.select(1, t - 1)).item<int64_t>();
      EXPECT_EQ(out.data_ptr<int64_t>()[b * 9 + t], want) << b << " " << t;
    }
  }
  o.stop_tokens = {out.data_ptr<int64_t>()[4]};  // row 0 stops at its second token
  const Tensor stopped = m->generate(prompt, o);
  const Tensor sc = stopped.contiguous();
  for (int64_t t = 4; t < sc.size(1); ++t) EXPECT_EQ(sc.data_ptr<int64_t>()[t], o.stop_tokens[0]);
}

// With window_length 12 and 2 sink tokens, a model of 16 positions generates 40 tokens: each is
// the argmax of a forward over the tokens the cache holds at that step (one layer: see
// one_layer), which a simulation of the eviction rule here gives.
TEST(Decoder, StreamingGenerationRunsPastTheContextInABoundedCache) {
  DecoderConfig c = one_layer("llama3");
  c.max_position_embeddings = 16;
  const auto m = random_model(c, 22);
  const std::vector<int64_t> prompt = {3, 17, 52, 0, 9};
  Decoder::GenerateOptions o;
  o.max_new_tokens = 40, o.window_length = 12, o.sink_tokens = 2;
  const Tensor out = m->generate(id_tensor(prompt), o).contiguous();
  ASSERT_EQ(out.size(1), 45);
  const int64_t* got = out.data_ptr<int64_t>();
  std::vector<int64_t> cached, pending = prompt;
  int evictions = 0;
  for (int64_t t = 5; t < 45; ++t) {
    const int64_t n = int64_t(cached.size()), T = int64_t(pending.size());
    if (n + T > o.window_length) {
      const int64_t drop = std::max(n + T - o.window_length, (n - o.sink_tokens) / 2);
      cached.erase(cached.begin() + o.sink_tokens, cached.begin() + o.sink_tokens + drop);
      ++evictions;
    }
    cached.insert(cached.end(), pending.begin(), pending.end());
    ASSERT_LE(int64_t(cached.size()), o.window_length);
    const Tensor logits = m->forward(id_tensor(cached));
    const int64_t want = attn::argmax(logits.select(1, int64_t(cached.size()) - 1)).item<int64_t>();
    ASSERT_EQ(got[t], want) << "token " << t;
    pending = {got[t]};
  }
  EXPECT_GE(evictions, 5);
  // Without a window the same model stops at its 16 positions.
  o.window_length = 0;
  EXPECT_ERROR_HAS(m->generate(id_tensor(prompt), o), "max_position_embeddings");
  o.window_length = 17;
  EXPECT_ERROR_HAS(m->generate(id_tensor(prompt), o), "window_length 17 exceeds");
  o.window_length = 3;
  EXPECT_ERROR_HAS(m->generate(id_tensor(prompt), o), "sink_tokens 2");
  attn::nn::DecoderCache cache;
  m->forward_cached(id_tensor(prompt), cache);
  EXPECT_ERROR_HAS(m->evict(cache, 2, 4), "Decoder.evict");
  EXPECT_ERROR_HAS(m->evict(cache, -1, 1), "keep_first -1");
  EXPECT_EQ(cache.length, 5);  // nothing changed by the refusals
}

TEST(Decoder, BadConfigsAndInputsAreRefused) {
  auto refused = [](auto edit) {
    DecoderConfig c = small("llama");
    edit(c);
    return attn::testing::error_of([&] { Decoder d(c); });
  };
  EXPECT_NE(
      refused([](DecoderConfig& c) { c.num_key_value_heads = 3; }).find("num_key_value_heads 3"),
      std::string::npos);
  EXPECT_NE(refused([](DecoderConfig& c) { c.head_dim = 7; }).find("even"), std::string::npos);
  EXPECT_NE(refused([](DecoderConfig& c) { c.hidden_act = "relu"; }).find("'relu'"),
            std::string::npos);
  EXPECT_NE(refused([](DecoderConfig& c) { c.sliding_layers = {true}; }).find("sliding_layers"),
            std::string::npos);
  const auto m = random_model(small("llama"), 1);
  EXPECT_THROW(m->forward(id_tensor({1, 53})), attn::IndexError);
  EXPECT_ERROR_HAS(m->forward(attn::zeros({1, 2})), "ids must be int64");
  Decoder::GenerateOptions o;
  o.temperature = -1;
  EXPECT_ERROR_HAS(m->generate(id_tensor({1}), o), "temperature");
}

TEST(HfDecoderConfig, MixtralAndQwen2MoeMixturesAndTheirCheckpointNames) {
  using attn::nn::decoder_config_from_hf_json;
  using attn::nn::hf_parameter_name;
  const DecoderConfig mx = decoder_config_from_hf_json(
      R"({"model_type": "mixtral", "num_hidden_layers": 2, "sliding_window": 64,
          "router_jitter_noise": 0.0, "router_aux_loss_coef": 0.02})");
  EXPECT_EQ(mx.num_local_experts, 8);
  EXPECT_EQ(mx.num_experts_per_tok, 2);
  EXPECT_EQ(mx.moe_type, "qwen3_moe");
  EXPECT_TRUE(mx.norm_topk_prob);
  EXPECT_EQ(mx.sliding_layers, (std::vector<bool>{true, true}));
  EXPECT_TRUE(mx.is_sparse(0) && mx.is_sparse(1));
  EXPECT_EQ(hf_parameter_name("mixtral", "model.layers.3.mlp.experts.7.gate_proj.weight"),
            "model.layers.3.block_sparse_moe.experts.7.w1.weight");
  EXPECT_EQ(hf_parameter_name("mixtral", "model.layers.3.mlp.experts.17.up_proj.weight"),
            "model.layers.3.block_sparse_moe.experts.17.w3.weight");
  EXPECT_EQ(hf_parameter_name("mixtral", "model.layers.0.mlp.experts.0.down_proj.weight"),
            "model.layers.0.block_sparse_moe.experts.0.w2.weight");
  EXPECT_EQ(hf_parameter_name("mixtral", "model.layers.0.mlp.gate.weight"),
            "model.layers.0.block_sparse_moe.gate.weight");
  EXPECT_EQ(hf_parameter_name("mixtral", "model.norm.weight"), "model.norm.weight");
  EXPECT_EQ(hf_parameter_name("qwen2_moe", "model.layers.0.mlp.gate.weight"),
            "model.layers.0.mlp.gate.weight");
  EXPECT_ERROR_HAS(decoder_config_from_hf_json(R"({"model_type": "mixtral",
                                                   "router_jitter_noise": 0.1})"),
                   "router_jitter_noise 0.1 is not supported");
  const DecoderConfig q2 = decoder_config_from_hf_json(
      R"({"model_type": "qwen2_moe", "num_hidden_layers": 6, "decoder_sparse_step": 2,
          "mlp_only_layers": [3], "num_experts": 4, "qkv_bias": true})");
  EXPECT_EQ(q2.num_local_experts, 4);
  EXPECT_EQ(q2.shared_expert_intermediate_size, 5632);
  EXPECT_EQ(q2.moe_intermediate_size, 1408);
  EXPECT_TRUE(q2.qkv_bias);
  std::vector<bool> sparse;
  for (int64_t l = 0; l < 6; ++l) sparse.push_back(q2.is_sparse(l));
  EXPECT_EQ(sparse, (std::vector<bool>{false, true, false, false, false, true}));
  EXPECT_ERROR_HAS(decoder_config_from_hf_json(R"({"model_type": "qwen2_moe",
                                                   "num_hidden_layers": 2,
                                                   "mlp_only_layers": [2]})"),
                   "mlp_only_layers must name layers in [0, 2), got 2");
  EXPECT_ERROR_HAS(decoder_config_from_hf_json(R"({"model_type": "qwen2_moe",
                                                   "decoder_sparse_step": 0})"),
                   "decoder_sparse_step must be >= 1, got 0");
  EXPECT_ERROR_HAS(decoder_config_from_hf_json(R"({"model_type": "qwen2_moe",
                                                   "mlp_only_layers": ["1"]})"),
                   "mlp_only_layers must be a list of layers");
  DecoderConfig c = small("gpt_oss");
  c.shared_expert_intermediate_size = 8;
  EXPECT_ERROR_HAS(Decoder d(c),
                   "a shared expert (shared_expert_intermediate_size 8) needs "
                   "moe_type 'qwen3_moe', got 'gpt_oss'");
}

// A family's behaviour (what transformers' config class defaults), attn's small sizes.
TEST(HfDecoderConfig, AFamilysBehaviourWithAttnsSizes) {
  using attn::nn::decoder_config_for_family;
  const DecoderConfig plain;
  const DecoderConfig mixtral = decoder_config_for_family("mixtral");
  EXPECT_EQ(mixtral.model_type, "mixtral");
  EXPECT_EQ(mixtral.moe_type, "qwen3_moe");
  EXPECT_TRUE(mixtral.norm_topk_prob);
  EXPECT_EQ(mixtral.rope_theta, 1e6);
  EXPECT_EQ(mixtral.hidden_size, plain.hidden_size);
  EXPECT_EQ(mixtral.num_local_experts, 0);  // experts are the caller's
  const DecoderConfig gemma2 = decoder_config_for_family("gemma2");
  EXPECT_TRUE(gemma2.norm_plus_one && gemma2.sandwich_norms && gemma2.scale_embeddings);
  EXPECT_TRUE(gemma2.tie_word_embeddings);
  EXPECT_EQ(gemma2.hidden_act, "gelu_tanh");
  EXPECT_EQ(gemma2.attn_logit_softcapping, 50.0);
  EXPECT_EQ(gemma2.final_logit_softcapping, 30.0);
  EXPECT_EQ(gemma2.sliding_window, 0);  // sliding layers are the caller's
  const DecoderConfig oss = decoder_config_for_family("gpt_oss");
  EXPECT_TRUE(oss.attention_sinks && oss.qkv_bias && oss.o_bias && oss.norm_in_float32);
  EXPECT_EQ(oss.rope_type, "yarn");
  EXPECT_EQ(oss.moe_type, "gpt_oss");
  EXPECT_TRUE(decoder_config_for_family("qwen2").qkv_bias);
  EXPECT_TRUE(decoder_config_for_family("qwen3").qk_norm);
  EXPECT_FALSE(decoder_config_for_family("llama").qkv_bias);
  for (const char* family : {"llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3",
                             "qwen3_moe", "gemma", "gemma2", "gemma3_text", "gpt_oss"})
    EXPECT_NO_THROW(Decoder(decoder_config_for_family(family))) << family;
  EXPECT_ERROR_HAS(decoder_config_for_family("phi3"),
                   "[decoder_config_for_family] model_type 'phi3' is not a family");
  EXPECT_ERROR_HAS(decoder_config_for_family("gemma3"), "model_type 'gemma3' is not a family");
}

TEST(HfDecoderConfig, EachFamilysFieldsAndDefaults) {
  using attn::nn::decoder_config_from_hf_json;
  const DecoderConfig q3 = decoder_config_from_hf_json(
      R"({"model_type": "qwen3", "hidden_size": 64, "num_attention_heads": 4,
          "num_key_value_heads": 2, "head_dim": 32, "attention_bias": false,
          "torch_dtype": "bfloat16", "architectures": ["Qwen3ForCausalLM"]})");
  EXPECT_TRUE(q3.qk_norm);
  EXPECT_FALSE(q3.qkv_bias);
  EXPECT_EQ(q3.head_size(), 32);
  EXPECT_EQ(q3.vocab_size, 151936);
  const DecoderConfig g3 = decoder_config_from_hf_json(
      R"({"model_type": "gemma3_text", "num_hidden_layers": 7, "sliding_window": 512,
          "rope_scaling": {"rope_type": "linear", "factor": 8.0}})");
  EXPECT_EQ(g3.sliding_layers, (std::vector<bool>{true, true, true, true, true, false, true}));
  EXPECT_EQ(g3.rope_local_base_freq, 10000);
  EXPECT_EQ(g3.rope_theta, 1e6);
  EXPECT_EQ(g3.rope_type, "linear");
  EXPECT_TRUE(g3.qk_norm && g3.norm_plus_one && g3.sandwich_norms && g3.scale_embeddings);
  EXPECT_EQ(g3.attn_logit_softcapping, 0);
  const DecoderConfig g3t = decoder_config_from_hf_json(
      R"({"model_type": "gemma3_text", "num_hidden_layers": 2,
          "layer_types": ["full_attention", "sliding_attention"]})");
  EXPECT_EQ(g3t.sliding_layers, (std::vector<bool>{false, true}));
  // As transformers 5 writes Gemma 3: the pattern beside layer_types, rope_parameters per layer
  // type; attn_logit_softcapping read and not applied, as transformers' Gemma 3 does.
  const DecoderConfig g35 = decoder_config_from_hf_json(
      R"({"model_type": "gemma3_text", "num_hidden_layers": 3, "sliding_window": 8,
          "_sliding_window_pattern": 3, "use_bidirectional_attention": false,
          "attn_logit_softcapping": 5.0,
          "rope_parameters": {"full_attention": {"rope_type": "default", "rope_theta": 1e5},
                              "sliding_attention": {"rope_type": "default", "rope_theta": 50.0}}})");
  EXPECT_EQ(g35.sliding_layers, (std::vector<bool>{true, true, false}));
  EXPECT_EQ(g35.rope_theta, 1e5);
  EXPECT_EQ(g35.rope_local_base_freq, 50);
  EXPECT_EQ(g35.attn_logit_softcapping, 0);
  EXPECT_THROW(decoder_config_from_hf_json(
                   R"({"model_type": "gemma3_text", "use_bidirectional_attention": true})"),
               attn::Error);
  // gpt-oss: transformers' defaults (biases, sinks, yarn without truncation, even layers slide).
  const DecoderConfig go = decoder_config_from_hf_json(
      R"({"model_type": "gpt_oss", "num_hidden_layers": 4, "num_local_experts": 8,
          "num_experts_per_tok": 2, "router_aux_loss_coef": 0.9, "swiglu_limit": 5.0})");
  EXPECT_EQ(go.sliding_layers, (std::vector<bool>{true, false, true, false}));
  EXPECT_EQ(go.sliding_window, 128);
  EXPECT_TRUE(go.qkv_bias && go.o_bias && go.attention_sinks && go.norm_in_float32);
  EXPECT_EQ(go.rope_type, "yarn");
  EXPECT_EQ(go.rope_factor, 32);
  EXPECT_FALSE(go.rope_truncate);
  EXPECT_EQ(go.rope_original_max_position_embeddings, 4096);
  EXPECT_EQ(go.num_local_experts, 8);
  EXPECT_EQ(go.num_experts_per_tok, 2);
  EXPECT_EQ(go.swiglu_limit, 5.0);
  EXPECT_EQ(go.swiglu_alpha, 1.702);
  const DecoderConfig gob = decoder_config_from_hf_json(
      R"({"model_type": "gpt_oss", "attention_bias": false,
          "rope_parameters": {"rope_type": "yarn", "factor": 2.0, "rope_theta": 1000.0,
                              "original_max_position_embeddings": 64, "beta_fast": 16.0}})");
  EXPECT_FALSE(gob.qkv_bias || gob.o_bias);
  EXPECT_EQ(gob.rope_factor, 2);
  EXPECT_EQ(gob.rope_theta, 1000);
  EXPECT_EQ(gob.rope_beta_fast, 16);
  EXPECT_TRUE(gob.rope_truncate);  // transformers' default when the field is absent
  EXPECT_THROW(
      decoder_config_from_hf_json(
          R"({"model_type": "gpt_oss", "num_local_experts": 2, "num_experts_per_tok": 3})"),
      attn::Error);
  const DecoderConfig g2 = decoder_config_from_hf_json(
      R"({"model_type": "gemma2", "num_hidden_layers": 3, "final_logit_softcapping": null})");
  EXPECT_EQ(g2.sliding_layers, (std::vector<bool>{true, false, true}));
  EXPECT_EQ(g2.final_logit_softcapping, 0);
  EXPECT_EQ(g2.attn_logit_softcapping, 50);

  // transformers 5 writes rope_parameters (rope_theta inside), per layer type where layers differ.
  const DecoderConfig l5 = decoder_config_from_hf_json(
      R"({"model_type": "llama", "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0,
          "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192}})");
  EXPECT_EQ(l5.rope_theta, 500000.0);
  EXPECT_EQ(l5.rope_type, "llama3");
  EXPECT_EQ(l5.rope_factor, 32.0);
  const DecoderConfig g5 = decoder_config_from_hf_json(
      R"({"model_type": "gemma3_text", "num_hidden_layers": 2, "rope_parameters": {
          "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1000000.0},
          "sliding_attention": {"rope_type": "default", "rope_theta": 10000.0}}})");
  EXPECT_EQ(g5.rope_type, "linear");
  EXPECT_EQ(g5.rope_factor, 8.0);
  EXPECT_EQ(g5.rope_theta, 1e6);
  EXPECT_EQ(g5.rope_local_base_freq, 1e4);

  EXPECT_ERROR_HAS(decoder_config_from_hf_json(R"({"model_type": "qwen3", "num_experts": 8})"),
                   "num_experts");
  EXPECT_ERROR_HAS(decoder_config_from_hf_json(R"({"model_type": "llama", "sliding_window": 8})",
                                               "x/config.json"),
                   "'x/config.json'");
  EXPECT_ERROR_HAS(decoder_config_from_hf_json(R"({"model_type": "qwen2",
                                                   "use_sliding_window": true})"),
                   "use_sliding_window");
  EXPECT_ERROR_HAS(decoder_config_from_hf_json(R"({"hidden_size": 8})"), "no model_type");
  EXPECT_ERROR_HAS(decoder_config_from_hf_json(R"({"model_type": "gemma3_text",
                                                   "layer_types": ["full_attention"]})"),
                   "layer_types");
  EXPECT_ERROR_HAS(attn::nn::load_hf_decoder("/nonexistent/dir"), "is not a directory");
}

}  // namespace

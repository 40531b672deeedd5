// GPT: nanoGPT's architecture on attn's modules, and cached generation.
#include <attn/attention.h>
#include <attn/autograd.h>
#include <attn/gpt.h>
#include <attn/ops.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <utility>

#include "../ops/sampling_ops.h"
#include "../tensor/internal.h"
#include "fused.h"

namespace attn::nn {

using detail::fail;

void GPTConfig::validate(const char* fn) const {
  auto positive = [&](int64_t v, const char* what) {
    if (v < 1) fail(fn, what, " must be at least 1, got ", v);
  };
  positive(vocab_size, "vocab_size");
  positive(block_size, "block_size");
  positive(n_layer, "n_layer");
  positive(n_head, "n_head");
  positive(n_embd, "n_embd");
  if (n_embd % n_head != 0) fail(fn, "n_embd ", n_embd, " must be divisible by n_head ", n_head);
  if (!(dropout >= 0.0 && dropout < 1.0)) fail(fn, "dropout must be in [0, 1), got ", dropout);
  if (n_inner < 0) fail(fn, "n_inner must be >= 0 (0: 4 * n_embd), got ", n_inner);
  if (!(layer_norm_eps > 0.0) || !std::isfinite(layer_norm_eps))
    fail(fn, "layer_norm_eps must be positive and finite, got ", layer_norm_eps);
  if (gelu_approximate != "none" && gelu_approximate != "tanh")
    fail(fn, "gelu_approximate must be 'none' or 'tanh', got '", gelu_approximate, "'");
}

// ---- modules
// ----------------------------------------------------------------------------------------

MLP::MLP(int64_t n_embd, bool bias, double p, int64_t hidden, std::string approximate)
    : gelu_approximate(std::move(approximate)) {
  if (hidden <= 0) hidden = 4 * n_embd;
  c_fc = register_module("c_fc", std::make_shared<Linear>(n_embd, hidden, bias));
  c_proj = register_module("c_proj", std::make_shared<Linear>(hidden, n_embd, bias));
  dropout = register_module("dropout", std::make_shared<Dropout>(p));
}

Tensor MLP::forward(const Tensor& x) const {
  // gelu(c_fc(x)) as one op: the bias and GELU applied in the product's parallel region.
  Tensor h = fused::linear_gelu(x, c_fc->weight, c_fc->bias, gelu_approximate);
  h = (*c_proj)(h);
  return dropout->p > 0.0 ? (*dropout)(h) : h;
}

Block::Block(const GPTConfig& c) {
  ln_1 = register_module("ln_1",
                         std::make_shared<LayerNorm>(c.n_embd, c.layer_norm_eps, true, c.bias));
  attn = register_module("attn", std::make_shared<MultiheadAttention>(
                                     c.n_embd, c.n_head, c.dropout, c.bias, std::nullopt,
                                     std::nullopt, /*batch_first=*/true));
  ln_2 = register_module("ln_2",
                         std::make_shared<LayerNorm>(c.n_embd, c.layer_norm_eps, true, c.bias));
  mlp = register_module(
      "mlp", std::make_shared<MLP>(c.n_embd, c.bias, c.dropout, c.mlp_width(), c.gelu_approximate));
}

Block::Residual Block::forward(const Residual& in, const LayerNorm* next,
                               const std::function<Tensor(const Tensor&)>& attend) const {
  // y = x + attn(ln_1(x)) with ln_2(y) in the same pass, then y + mlp(ln_2(y)) with next's
  // LayerNorm of it.
  const fused::AddNorm mid = fused::add_layer_norm(in.x, attend(in.normed), *ln_2);
  Tensor m = mlp->forward(mid.normed);
  if (!next) return {mid.sum + m, Tensor()};
  const fused::AddNorm out = fused::add_layer_norm(mid.sum, m, *next);
  return {out.sum, out.normed};
}

namespace {

// A block's attention step in forward(): causal self-attention through the fused kernel.
Tensor causal_self_attention(const MultiheadAttention& attn, const Tensor& h) {
  return attn
      .forward(h, h, h, Tensor(), /*need_weights=*/false, Tensor(),
               /*average_attn_weights=*/true, /*is_causal=*/true)
      .output;
}

}  // namespace

Tensor Block::forward(const Tensor& x) const {
  return forward({x, (*ln_1)(x)}, nullptr,
                 [&](const Tensor& h) { return causal_self_attention(*attn, h); })
      .x;
}

Tensor Block::forward_with(const Tensor& x,
                           const MultiheadAttention::AttentionFn& attention) const {
  return forward({x, (*ln_1)(x)}, nullptr,
                 [&](const Tensor& h) { return attn->forward_with(h, attention); })
      .x;
}

Tensor Block::forward_cached(const Tensor& x, Tensor& k_cache, Tensor& v_cache,
                             int64_t start) const {
  return forward({x, (*ln_1)(x)}, nullptr,
                 [&](const Tensor& h) { return attn->forward_cached(h, k_cache, v_cache, start); })
      .x;
}

Tensor GPT::run_blocks(const Tensor& x,
                       const std::function<Tensor(int64_t, const Tensor&)>& attend) const {
  // Each block's closing residual add goes with the next LayerNorm (the next block's ln_1, or
  // ln_f after the last), in one pass.
  Block::Residual r{x, (*h.front()->ln_1)(x)};
  for (std::size_t l = 0; l < h.size(); ++l) {
    const LayerNorm& next = l + 1 < h.size() ? *h[l + 1]->ln_1 : *ln_f;
    r = h[l]->forward(r, &next, [&](const Tensor& in) { return attend(int64_t(l), in); });
  }
  return r.normed;
}

GPT::GPT(const GPTConfig& config, Generator* gen) : config_(config) {
  config.validate("GPT");
  const GPTConfig& c = config_;
  wte = register_module("wte", std::make_shared<Embedding>(c.vocab_size, c.n_embd));
  wpe = register_module("wpe", std::make_shared<Embedding>(c.block_size, c.n_embd));
  drop = register_module("drop", std::make_shared<Dropout>(c.dropout));
  auto blocks = register_module("h", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < c.n_layer; ++i) h.push_back(blocks->append(std::make_shared<Block>(c)));
  ln_f = register_module("ln_f",
                         std::make_shared<LayerNorm>(c.n_embd, c.layer_norm_eps, true, c.bias));

  // nanoGPT's initialisation, in parameter registration order.
  NoGradGuard no_grad;
  const double std_resid = 0.02 / std::sqrt(2.0 * double(c.n_layer));
  for (auto& [name, p] : named_parameters()) {
    const bool resid = name.ends_with("out_proj.weight") || name.ends_with("c_proj.weight");
    if (p.dim() == 2) {
      init::normal_(p, 0.0, resid ? std_resid : 0.02, gen);
    } else if (name.find(".ln_") != std::string::npos || name.starts_with("ln_f")) {
      if (name.ends_with("weight"))
        init::ones_(p);
      else
        init::zeros_(p);
    } else {
      init::zeros_(p);  // Linear and in-projection biases
    }
  }
}

namespace {

void check_idx(const Tensor& idx, const GPTConfig& c, const char* fn, int64_t offset = 0) {
  if (!idx.defined()) fail(fn, "idx is an undefined tensor");
  if (idx.dtype() != Dtype::Int64)
    fail(fn, "idx must be int64 token ids, got ", detail::tensor_desc(idx));
  if (idx.dim() != 2) fail(fn, "idx ", shape_str(idx.shape()), " must be 2-D (batch, time)");
  if (idx.size(1) < 1) fail(fn, "idx ", shape_str(idx.shape()), " has no tokens");
  if (offset + idx.size(1) > c.block_size)
    fail(fn, "cannot process a sequence of length ", offset + idx.size(1), ": block_size is only ",
         c.block_size);
  Tensor ic = idx.contiguous();
  const int64_t* p = ic.data_ptr<int64_t>();
  for (int64_t i = 0, n = ic.numel(); i < n; ++i)
    if (p[i] < 0 || p[i] >= c.vocab_size)
      throw IndexError(detail::msg(fn, "token id ", p[i], " at position ", i,
                                   " is outside the vocabulary [0, ", c.vocab_size, ")"));
}

void check_targets(const Tensor& targets, const Tensor& idx, const char* fn) {
  if (!targets.defined() || targets.dtype() != Dtype::Int64 || targets.shape() != idx.shape())
    fail(fn, "targets must be int64 with idx's shape ", shape_str(idx.shape()), ", got ",
         targets.defined() ? detail::tensor_desc(targets) : std::string("undefined"));
}

}  // namespace

void GPT::GenerateOptions::validate(const char* fn) const {
  if (!(temperature > 0.0) || !std::isfinite(temperature))
    fail(fn, "temperature must be positive and finite, got ", temperature);
  if (top_k < 0) fail(fn, "top_k must be >= 0 (0 = off), got ", top_k);
  if (max_new_tokens < 0) fail(fn, "max_new_tokens must be >= 0, got ", max_new_tokens);
}

GPT::Output GPT::forward_at_positions(const Tensor& idx, const Tensor& targets,
                                      const Tensor& positions,
                                      const MultiheadAttention::AttentionFn& attention) const {
  Tensor x = (*wte)(idx) + (*wpe)(positions);
  if (drop->p > 0.0) x = (*drop)(x);
  x = run_blocks(x, [&](int64_t l, const Tensor& in) {
    return h[std::size_t(l)]->attn->forward_with(in, attention);
  });
  Tensor logits = functional::linear(x, wte->weight);
  const int64_t V = config_.vocab_size;
  Tensor loss = functional::cross_entropy(logits.reshape({-1, V}), targets.reshape({-1}));
  return {logits, loss};
}

Tensor GPT::forward(const Tensor& idx) const {
  check_idx(idx, config_, "GPT");
  const int64_t T = idx.size(1);
  Tensor x = (*wte)(idx) + wpe->weight.narrow(0, 0, T);
  if (drop->p > 0.0) x = (*drop)(x);
  x = run_blocks(x, [&](int64_t l, const Tensor& in) {
    return causal_self_attention(*h[std::size_t(l)]->attn, in);
  });
  return functional::linear(x, wte->weight);  // tied output weights
}

Tensor GPT::attention_maps(const Tensor& idx) const {
  check_idx(idx, config_, "GPT.attention_maps");
  NoGradGuard no_grad;
  const int64_t T = idx.size(1);
  const Tensor future = triu(ones({T, T}, Dtype::Bool), 1);  // keys after the query
  std::vector<Tensor> maps;
  auto attention = [&](const Tensor& q, const Tensor& k, const Tensor& v) {
    const double scale = 1.0 / std::sqrt(double(q.size(-1)));
    Tensor w = (q.matmul(k.mT()) * scale).masked_fill(future, -inf).softmax(-1);
    maps.push_back(w);
    return w.matmul(v);
  };
  Tensor x = (*wte)(idx) + wpe->weight.narrow(0, 0, T);
  for (const auto& block : h) x = block->forward_with(x, attention);
  return stack(maps, 0);
}

GPT::Output GPT::forward(const Tensor& idx, const Tensor& targets) const {
  Tensor logits = forward(idx);
  check_targets(targets, idx, "GPT");
  const int64_t V = config_.vocab_size;
  Tensor loss = functional::cross_entropy(logits.reshape({-1, V}), targets.reshape({-1}));
  return {logits, loss};
}

GPT::Output GPT::forward_sharded(const Tensor& idx, const Tensor& targets, const Tensor& positions,
                                 const MultiheadAttention::AttentionFn& attention) const {
  const char* fn = "GPT.forward_sharded";
  check_idx(idx, config_, fn);
  const int64_t T = idx.size(1);
  if (!positions.defined() || positions.dtype() != Dtype::Int64 || positions.shape() != Shape{T})
    fail(fn, "positions must be int64 (", T, ") for idx ", shape_str(idx.shape()), ", got ",
         positions.defined() ? detail::tensor_desc(positions) : std::string("undefined"));
  {
    const Tensor pc = positions.contiguous();
    for (int64_t i = 0; i < T; ++i)
      if (pc.data_ptr<int64_t>()[i] < 0 || pc.data_ptr<int64_t>()[i] >= config_.block_size)
        fail(fn, "position ", pc.data_ptr<int64_t>()[i], " is outside [0, block_size ",
             config_.block_size, ")");
  }
  check_targets(targets, idx, fn);
  return forward_at_positions(idx, targets, positions, attention);
}

GPT::Output GPT::forward_packed(const Tensor& idx, const Tensor& targets,
                                const Tensor& positions) const {
  const char* fn = "GPT.forward_packed";
  check_idx(idx, config_, fn);
  const int64_t B = idx.size(0), T = idx.size(1);
  check_targets(targets, idx, fn);
  if (!positions.defined() || positions.dtype() != Dtype::Int64 || positions.shape() != idx.shape())
    fail(fn, "positions must be int64 with idx's shape ", shape_str(idx.shape()), ", got ",
         positions.defined() ? detail::tensor_desc(positions) : std::string("undefined"));
  // The sequences' offsets in the flattened (B * T) tokens.
  std::vector<int64_t> cu;
  int64_t max_len = 0;
  {
    const Tensor pc = positions.contiguous();
    const int64_t* p = pc.data_ptr<int64_t>();
    for (int64_t b = 0; b < B; ++b)
      for (int64_t t = 0; t < T; ++t) {
        const int64_t v = p[b * T + t];
        if (t == 0 && v != 0)
          fail(fn, "positions[", b, ", 0] is ", v, ": every row must begin a sequence (0)");
        if (t > 0 && v != 0 && v != p[b * T + t - 1] + 1)
          fail(fn, "positions[", b, ", ", t, "] is ", v, " after ", p[b * T + t - 1],
               ": each position must be 0 (a new sequence) or the previous one plus 1");
        if (v == 0) {
          if (!cu.empty()) max_len = std::max(max_len, b * T + t - cu.back());
          cu.push_back(b * T + t);
        }
      }
    max_len = std::max(max_len, B * T - cu.back());
    cu.push_back(B * T);
  }
  Tensor cu_seqlens = empty({int64_t(cu.size())}, Dtype::Int64);
  std::copy(cu.begin(), cu.end(), cu_seqlens.data_ptr<int64_t>());
  const int64_t H = config_.n_head, D = config_.n_embd / H;
  SdpaOptions so;
  so.is_causal = true;
  so.dropout_p = is_training() ? config_.dropout : 0.0;
  auto attention = [&](const Tensor& q, const Tensor& k, const Tensor& v) {
    // (B, H, T, D) <-> the packed (B * T, H, D) of varlen_attention.
    auto flat = [&](const Tensor& t) { return t.transpose(1, 2).reshape({B * T, H, D}); };
    Tensor out =
        varlen_attention(flat(q), flat(k), flat(v), cu_seqlens, cu_seqlens, max_len, max_len, so);
    return out.reshape({B, T, H, D}).transpose(1, 2);
  };
  return forward_at_positions(idx, targets, positions, attention);
}

Tensor GPT::forward_cached(const Tensor& idx, KVCache& cache) const {
  const char* fn = "GPT.forward_cached";
  NoGradGuard no_grad;
  const GPTConfig& c = config_;
  check_idx(idx, c, fn, cache.length);
  const int64_t B = idx.size(0), T = idx.size(1), C = c.n_embd, H = c.n_head, D = C / H;
  const int64_t L0 = cache.length, L = L0 + T;
  if (cache.length == 0) {
    cache.k.assign(std::size_t(c.n_layer), Tensor());
    cache.v.assign(std::size_t(c.n_layer), Tensor());
  }
  if (cache.k.size() != std::size_t(c.n_layer) || cache.v.size() != std::size_t(c.n_layer))
    fail(fn, "the cache holds ", cache.k.size(), " layers, the model has ", c.n_layer);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    Tensor& kc = cache.k[std::size_t(l)];
    Tensor& vc = cache.v[std::size_t(l)];
    if (!kc.defined()) {
      kc = zeros({B, H, c.block_size, D});
      vc = zeros({B, H, c.block_size, D});
    } else if (kc.size(0) != B) {
      fail(fn, "batch size ", B, " differs from the cache's ", kc.size(0));
    }
  }
  Tensor x =
      run_blocks((*wte)(idx) + wpe->weight.narrow(0, L0, T), [&](int64_t l, const Tensor& in) {
        return h[std::size_t(l)]->attn->forward_cached(in, cache.k[std::size_t(l)],
                                                       cache.v[std::size_t(l)], L0);
      });
  cache.length = L;
  return functional::linear(x, wte->weight);
}

Tensor GPT::generate(const Tensor& idx_in, const GenerateOptions& opt, Generator* gen,
                     const std::function<void(const Tensor&)>& on_token) const {
  const char* fn = "GPT.generate";
  opt.validate(fn);
  if (!idx_in.defined() || idx_in.dtype() != Dtype::Int64 || idx_in.dim() != 2 ||
      idx_in.size(1) < 1)
    fail(fn, "idx must be int64 (batch, time) with at least one token, got ",
         idx_in.defined() ? detail::tensor_desc(idx_in) : std::string("undefined"));
  NoGradGuard no_grad;
  Generator& g = gen ? *gen : default_generator();
  const GPTConfig& c = config_;
  const int64_t B = idx_in.size(0);
  // The sequences so far, row-major (B, len).
  std::vector<std::vector<int64_t>> seq(static_cast<std::size_t>(B));
  {
    Tensor ic = idx_in.contiguous();
    const int64_t T0 = ic.size(1);
    for (int64_t b = 0; b < B; ++b)
      seq[std::size_t(b)].assign(ic.data_ptr<int64_t>() + b * T0,
                                 ic.data_ptr<int64_t>() + (b + 1) * T0);
  }
  auto window = [&](int64_t from) {  // tokens [from, len) of every row as (B, len - from)
    const int64_t len = int64_t(seq[0].size()), n = len - from;
    Tensor t = detail::make_tensor({B, n}, Dtype::Int64, false);
    for (int64_t b = 0; b < B; ++b)
      std::copy(seq[std::size_t(b)].begin() + from, seq[std::size_t(b)].end(),
                t.data_ptr<int64_t>() + b * n);
    return t;
  };
  KVCache cache;
  for (int64_t step = 0; step < opt.max_new_tokens; ++step) {
    const int64_t len = int64_t(seq[0].size());
    Tensor logits;  // (B, V): the last position's
    if (opt.use_cache && cache.length > 0 && len <= c.block_size) {
      logits = forward_cached(window(len - 1), cache);
    } else if (opt.use_cache) {
      // Empty cache, or the context outgrew block_size: the positions of every kept token
      // change, so the cache is rebuilt from the cropped context.
      cache = KVCache{};
      logits = forward_cached(window(std::max<int64_t>(0, len - c.block_size)), cache);
    } else {
      logits = forward(window(std::max<int64_t>(0, len - c.block_size)));
    }
    logits = logits.select(1, logits.size(1) - 1).contiguous();
    const Tensor next = detail::sample_tokens(logits, opt.temperature, opt.top_k, g, fn, step);
    for (int64_t b = 0; b < B; ++b) seq[std::size_t(b)].push_back(next.data_ptr<int64_t>()[b]);
    if (on_token) on_token(next.reshape({B}));
  }
  return window(0);
}

std::vector<Tensor> GPT::decay_parameters() const {
  std::vector<Tensor> out;
  for (const Tensor& p : parameters())
    if (p.dim() >= 2) out.push_back(p);
  return out;
}

std::vector<Tensor> GPT::no_decay_parameters() const {
  std::vector<Tensor> out;
  for (const Tensor& p : parameters())
    if (p.dim() < 2) out.push_back(p);
  return out;
}

int64_t GPT::num_parameters() const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return n;
}

}  // namespace attn::nn

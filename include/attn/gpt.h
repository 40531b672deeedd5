// A GPT language model (nanoGPT's architecture) built from attn's modules, with key/value-cached
// generation.
//
//   x = wte(idx) + wpe(0..T-1), dropout
//   each of n_layer blocks:  x = x + attn(ln_1(x))   (causal MultiheadAttention, fused kernel)
//                            x = x + mlp(ln_2(x))    (Linear 4C, GELU, Linear C, dropout)
// (the MLP width, the GELU approximation and the LayerNorm epsilon are configurable, so that
// Hugging Face GPT-2 checkpoints load: include/attn/hf_gpt2.h)
//   logits = ln_f(x) @ wte.weight^T                  (output weights tied to the token table)
//
// Initialisation follows nanoGPT: every Linear and Embedding weight N(0, 0.02), biases zero,
// LayerNorm weight one / bias zero, and the residual projections (attn.out_proj.weight,
// mlp.c_proj.weight) N(0, 0.02 / sqrt(2 n_layer)). Draws come from the given generator in
// parameter registration order.
//
// state_dict names: wte.weight, wpe.weight, h.{i}.ln_1.{weight,bias}, h.{i}.attn.in_proj_weight,
// h.{i}.attn.in_proj_bias, h.{i}.attn.out_proj.{weight,bias}, h.{i}.ln_2.*, h.{i}.mlp.c_fc.*,
// h.{i}.mlp.c_proj.*, ln_f.*. The tied output layer has no entry of its own.
#pragma once

#include <attn/kv_cache.h>
#include <attn/nn.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace attn::nn {

struct GPTConfig {
  int64_t vocab_size = 65;
  int64_t block_size = 64;  // longest context
  int64_t n_layer = 4;
  int64_t n_head = 4;
  int64_t n_embd = 128;
  double dropout = 0.0;
  bool bias = true;  // biases in Linear layers and LayerNorms
  // GELU of the MLP: "none" (exact erf, nanoGPT's) or "tanh" (GPT-2's "gelu_new").
  std::string gelu_approximate = "none";
  double layer_norm_eps = 1e-5;  // every LayerNorm's epsilon
  int64_t n_inner = 0;           // MLP hidden width; 0 means 4 * n_embd
  int64_t mlp_width() const { return n_inner > 0 ? n_inner : 4 * n_embd; }
  // Throws attn::Error naming `fn` and the offending field for sizes < 1, n_embd not divisible by
  // n_head, dropout outside [0, 1), n_inner < 0, layer_norm_eps not positive and finite, or
  // gelu_approximate other than "none" and "tanh".
  void validate(const char* fn) const;
  bool operator==(const GPTConfig&) const = default;
};

class MLP : public Module {
 public:
  MLP(int64_t n_embd, bool bias, double dropout, int64_t hidden = 0,
      std::string gelu_approximate = "none");  // hidden 0: 4 * n_embd
  Tensor forward(const Tensor& x) const;
  std::string name() const override { return "MLP"; }
  std::shared_ptr<Linear> c_fc, c_proj;
  std::shared_ptr<Dropout> dropout;
  std::string gelu_approximate;
};

class Block : public Module {
 public:
  explicit Block(const GPTConfig& config);
  Tensor forward(const Tensor& x) const;  // (B, T, C) -> (B, T, C)
  // The same with the attention step replaced (MultiheadAttention::forward_with).
  Tensor forward_with(const Tensor& x, const MultiheadAttention::AttentionFn& attention) const;
  // The same for the T newest tokens of a sequence, with this block's key/value cache (see
  // MultiheadAttention::forward_cached): rows [start, start + T) are written.
  Tensor forward_cached(const Tensor& x, Tensor& k_cache, Tensor& v_cache, int64_t start) const;
  // The block on the residual stream x and ln_1(x), with `attend` for the attention step (what
  // the three forms above pass): returns the stream after the block and, when `next` is given,
  // next(stream) (the following block's ln_1, or the final LayerNorm), each residual add formed in
  // the same pass as the LayerNorm that reads it. The floats of the separate ops.
  struct Residual {
    Tensor x, normed;
  };
  Residual forward(const Residual& in, const LayerNorm* next,
                   const std::function<Tensor(const Tensor&)>& attend) const;
  std::string name() const override { return "Block"; }
  std::shared_ptr<LayerNorm> ln_1, ln_2;
  std::shared_ptr<MultiheadAttention> attn;
  std::shared_ptr<MLP> mlp;
};

// Keys and values of every layer for the tokens decoded so far (incremental decoding).
struct KVCache {
  std::vector<Tensor> k, v;  // per layer: (B, H, capacity, head_dim); first `length` rows valid
  int64_t length = 0;
};

class GPT : public Module {
 public:
  explicit GPT(const GPTConfig& config, Generator* gen = nullptr);

  // idx: int64 (B, T) with T <= block_size and ids in [0, vocab_size). Returns logits (B, T, V).
  Tensor forward(const Tensor& idx) const;
  // Mean cross-entropy of the logits against targets (int64 (B, T)), and the logits.
  struct Output {
    Tensor logits, loss;
  };
  Output forward(const Tensor& idx, const Tensor& targets) const;

  // A shard of the sequence (context parallelism): idx and targets (B, T_local) hold the tokens
  // at the global positions `positions` (int64 (T_local), each < block_size) of sequences that
  // other ranks hold the rest of, and `attention` is the causal self-attention over the whole
  // sequence (attn::distributed::ring_attention over the same sharding). Returns the logits of
  // these tokens and the mean cross-entropy over them. Every other step of the model is per token,
  // so it runs on the shard alone. Dropout on the attention weights is not applied (the attention
  // function owns that step); GPT dropout elsewhere is.
  Output forward_sharded(const Tensor& idx, const Tensor& targets, const Tensor& positions,
                         const MultiheadAttention::AttentionFn& attention) const;

  // Packed documents (attn train --pack): each row of idx (B, T) holds several sequences one after
  // the other, marked by positions (B, T) int64 in Hugging Face's position_ids convention: 0 where
  // a sequence begins (every row begins one), the previous position plus one elsewhere. Each token
  // gets the position embedding of its position, and attention stays inside its sequence (causal
  // varlen_attention over the flattened rows: nothing is padded, no score across a boundary is
  // computed). targets as forward()'s, with -100 (ignored) where nothing is to be predicted; the
  // loss is the mean over the other targets. A row that is one sequence gives forward()'s numbers.
  // Throws attn::Error naming the row and column of a position that breaks the convention.
  Output forward_packed(const Tensor& idx, const Tensor& targets, const Tensor& positions) const;

  // The attention weights of every layer and head on idx (B, T): (n_layer, B, n_head, T, T), row
  // i of a map the causal softmax over keys 0..i (what the heads attend to). Computed without
  // recording gradients, through the explicit softmax(q k^T / sqrt(d)) (the fused kernel keeps no
  // weights), so it costs O(T^2) memory per head. No dropout on the weights; the residual
  // branches' dropout applies in training mode, as in forward(): call eval() first.
  Tensor attention_maps(const Tensor& idx) const;

  // Logits (B, T_new, V) of new tokens idx (B, T_new) that follow the cache's tokens; appends
  // their keys and values to the cache. The cache starts empty (KVCache{}) and holds at most
  // block_size tokens. Runs without recording gradients.
  Tensor forward_cached(const Tensor& idx, KVCache& cache) const;

  struct GenerateOptions {
    int64_t max_new_tokens = 100;
    double temperature = 1.0;  // > 0
    int64_t top_k = 0;         // 0: no top-k filtering
    bool use_cache = true;     // false: recompute the whole (cropped) sequence every step
    // Throws attn::Error naming fn for temperature <= 0 or not finite, top_k < 0 or
    // max_new_tokens < 0.
    void validate(const char* fn) const;
  };
  // Samples max_new_tokens continuations of idx (B, T) (int64) and returns (B, T + new). Each new
  // token is drawn from softmax(logits / temperature) restricted to the logits >= the top_k-th
  // largest (ties kept), by inverse CDF with one 53-bit uniform draw from gen (not
  // torch.multinomial's stream). When the sequence outgrows block_size the context is cropped to
  // the last block_size tokens and, since every kept token's position changes, the cache is
  // rebuilt from it: cached and uncached generation give the same tokens. on_token, if set, is
  // called with each new (B) column as it is produced (streaming). Runs without recording
  // gradients. Throws attn::Error for temperature <= 0, top_k < 0 or a malformed idx.
  Tensor generate(const Tensor& idx, const GenerateOptions& options, Generator* gen = nullptr,
                  const std::function<void(const Tensor&)>& on_token = nullptr) const;

  // ---- several sequences at once through a paged key/value cache (include/attn/kv_cache.h) ----
  // A cache shaped for this model (n_layer layers, n_head heads of n_embd / n_head).
  PagedKVCache make_paged_cache(int64_t num_pages, int64_t page_size = 16,
                                KVCacheDtype dtype = KVCacheDtype::Float32) const;
  // Logits (N, T, V) of the tokens idx (N, T) that follow the tokens of the cache's sequences
  // seqs (one per row; positions continue from each sequence's length, which may differ), whose
  // keys and values are appended. Throws attn::Error for a cache of another shape, a sequence
  // that would outgrow block_size, or a pool without the pages (the sequences are then left as
  // they were). No gradients.
  Tensor forward_paged(const Tensor& idx, PagedKVCache& cache,
                       const std::vector<int64_t>& seqs) const;
  // generate() for prompts of different lengths at once (no padding computed): each prompt is
  // prefilled once, identical prompts share their pages (fork, copy on write), then every step
  // decodes one token of every sequence in one batch against the paged cache, whose pool holds
  // kv_dtype. Draws one uniform per sequence per step in prompt order, as generate() does per
  // row: prompts of one length give generate()'s tokens. Each prompt plus max_new_tokens must fit
  // in block_size (no cropping). on_token gets each step's (N) tokens. Returns each prompt
  // followed by its new tokens.
  std::vector<std::vector<int64_t>> generate_paged(
      const std::vector<std::vector<int64_t>>& prompts, const GenerateOptions& options,
      Generator* gen = nullptr, KVCacheDtype kv_dtype = KVCacheDtype::Float32,
      int64_t page_size = 16, const std::function<void(const Tensor&)>& on_token = nullptr) const;

  // nanoGPT's optimizer groups: 2-D parameters (matrices, embeddings) decay, the rest do not.
  std::vector<Tensor> decay_parameters() const;
  std::vector<Tensor> no_decay_parameters() const;
  int64_t num_parameters() const;

  std::string name() const override { return "GPT"; }
  const GPTConfig& config() const { return config_; }

  std::shared_ptr<Embedding> wte, wpe;
  std::vector<std::shared_ptr<Block>> h;
  std::shared_ptr<LayerNorm> ln_f;
  std::shared_ptr<Dropout> drop;

 private:
  // The blocks and ln_f on the embedded tokens x, attend(l, h) being block l's attention step.
  Tensor run_blocks(const Tensor& x,
                    const std::function<Tensor(int64_t, const Tensor&)>& attend) const;
  // The logits and loss of idx at `positions` (broadcast against idx), every block's attention
  // step being `attention` (forward_sharded, forward_packed); dropout as forward().
  Output forward_at_positions(const Tensor& idx, const Tensor& targets, const Tensor& positions,
                              const MultiheadAttention::AttentionFn& attention) const;
  GPTConfig config_;
};

}  // namespace attn::nn

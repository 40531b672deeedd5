// One decoder-only transformer for today's open model families, configured to be each of them:
//
//   Llama 3.x  RoPE (with llama3 frequency scaling), grouped-query attention, SwiGLU MLP, RMSNorm,
//              tied or untied output
//   Qwen2      the same with q/k/v biases
//   Qwen3      the same with QK-norm (RMSNorm over head_dim on q and k, before RoPE)
//   Gemma 2    sliding-window and global layers alternating, attention and final logit softcaps,
//              pre and post norms around attention and MLP, RMSNorm as x * (1 + w), embeddings
//              scaled by sqrt(hidden_size), query_pre_attn_scalar, GELU-tanh MLP
//   Gemma 3    Gemma 2's layout with QK-norm, no softcaps, a pattern of sliding layers and their
//              own RoPE base
//   gpt-oss    attention sinks, sliding and global layers alternating, q/k/v/o biases, yarn
//              RoPE, a mixture of experts (top-k routing, clamped SwiGLU) in place of the MLP
//
//   x = embed_tokens(ids) (* sqrt(hidden_size))
//   each layer:  h = input_layernorm(x); a = attention(h) (post_attention_layernorm(a) when
//                sandwich norms); x = x + a
//                h = post_attention_layernorm(x) (pre_feedforward_layernorm with sandwich norms);
//                m = down(act(gate(h)) * up(h)) (post_feedforward_layernorm(m)); x = x + m
//   logits = lm_head(norm(x)) (lm_head tied to embed_tokens or not; final softcap)
//   attention: q, k, v projections into heads, QK-norm, RoPE on q and k, causal scaled
//              dot-product attention over the fused kernel (GQA, window, softcap), o projection
//
// Parameter names are Hugging Face transformers' (model.embed_tokens.weight,
// model.layers.{i}.self_attn.q_proj.weight, ..., model.norm.weight, lm_head.weight), so that the
// state_dict of a checkpoint loads as it is (include/attn/hf_decoder.h). float32.
#pragma once

#include <attn/mxfp4.h>
#include <attn/nn.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace attn::nn {

struct DecoderConfig {
  std::string model_type = "llama";  // what config.json called it: llama, qwen2, qwen3, gemma2, ...
  int64_t vocab_size = 256;
  int64_t hidden_size = 64;
  int64_t intermediate_size = 128;
  int64_t num_hidden_layers = 2;
  int64_t num_attention_heads = 4;
  int64_t num_key_value_heads = 4;  // < num_attention_heads: grouped-query attention
  int64_t head_dim = 0;             // 0: hidden_size / num_attention_heads
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  double rope_theta = 10000.0;
  // RoPE frequency scaling: "default" (none), "llama3" (Llama 3.1's: wavelengths above
  // original / low_freq_factor divided by factor, below original / high_freq_factor kept, a
  // smooth blend between) or "linear" (every frequency divided by factor; Gemma 3's global
  // layers).
  // "yarn" (gpt-oss): frequencies blended between divided by factor (below beta_slow rotations
  // over the original context) and kept (above beta_fast), the correction range floored/ceiled
  // when rope_truncate; cos and sin scaled by rope_attention_factor (0: 0.1 ln(factor) + 1).
  std::string rope_type = "default";
  double rope_factor = 1.0, rope_low_freq_factor = 1.0, rope_high_freq_factor = 4.0;
  int64_t rope_original_max_position_embeddings = 8192;
  double rope_beta_fast = 32.0, rope_beta_slow = 1.0, rope_attention_factor = 0.0;
  bool rope_truncate = true;
  bool qkv_bias = false;  // biases on q_proj, k_proj, v_proj (Qwen2; Llama's attention_bias)
  bool o_bias = false;    // a bias on o_proj (Llama's attention_bias)
  bool mlp_bias = false;
  bool qk_norm = false;  // Qwen3, Gemma 3
  bool tie_word_embeddings = false;
  std::string hidden_act = "silu";  // "silu" or "gelu_tanh" (GELU's tanh approximation)
  // ---- Gemma
  bool norm_plus_one = false;        // every RMSNorm scales by (1 + weight); weights start at zero
  bool sandwich_norms = false;       // post_attention_layernorm on the attention output and
                                     // pre/post_feedforward_layernorm around the MLP
  bool scale_embeddings = false;     // x = embed_tokens(ids) * sqrt(hidden_size)
  double query_pre_attn_scalar = 0;  // attention scale query_pre_attn_scalar^-1/2 (0: head_dim)
  double attn_logit_softcapping = 0, final_logit_softcapping = 0;  // 0: none
  int64_t sliding_window = 0;  // keys within the last sliding_window positions (sliding layers)
  std::vector<bool> sliding_layers;  // per layer, whether it is a sliding-window layer
  double rope_local_base_freq = 0;   // RoPE base of the sliding layers (0: rope_theta)
  // ---- gpt-oss
  bool attention_sinks = false;     // self_attn.sinks: a learned logit per head in each softmax
  bool norm_in_float32 = false;     // RMSNorm times its weight in float32, rounded once
  int64_t num_local_experts = 0;    // > 0: the MLP is a mixture of experts (mlp.router, .experts)
  int64_t num_experts_per_tok = 0;  // top-k experts per token, weighted by the softmax of their
                                    // router logits
  double swiglu_alpha = 1.702, swiglu_limit = 7.0;  // the experts' clamped SwiGLU
  // gpt_oss: the experts' matrices kept in MXFP4 (DecoderExperts::gate_up_mxfp4, down_mxfp4; as
  // released, 4.25 bits a weight), not as the parameters gate_up_proj and down_proj. They are
  // constants: no gradient reaches them, and Module::to leaves them as they are.
  bool mxfp4_experts = false;
  // ---- the mixture's kind: "gpt_oss" (above: DecoderMoE) or "qwen3_moe" (DecoderSparseMoE: the
  // router mlp.gate without bias, the softmax over every expert in float32, the top
  // num_experts_per_tok, renormalised to sum to 1 when norm_topk_prob; each expert a SwiGLU MLP
  // of moe_intermediate_size, experts.{e}.gate_proj / up_proj / down_proj, without biases).
  // Qwen3-MoE's, and Mixtral's (norm_topk_prob true) and Qwen2-MoE's (with a shared expert).
  std::string moe_type = "gpt_oss";
  int64_t moe_intermediate_size = 0;  // qwen3_moe's experts' width (0: intermediate_size)
  bool norm_topk_prob = false;
  // Qwen2-MoE's shared expert (qwen3_moe kind only): mlp.shared_expert, a SwiGLU MLP of this
  // width, times sigmoid(mlp.shared_expert_gate(x)) (a Linear to 1, no bias), added to the
  // mixture's output. 0: none.
  int64_t shared_expert_intermediate_size = 0;
  // Which layers are mixtures (qwen3_moe kind; the others a DecoderMLP of intermediate_size):
  // layer l when (l + 1) % decoder_sparse_step == 0 and l is not in mlp_only_layers.
  int64_t decoder_sparse_step = 1;
  std::vector<int64_t> mlp_only_layers;

  int64_t head_size() const { return head_dim > 0 ? head_dim : hidden_size / num_attention_heads; }
  bool is_sparse(int64_t layer) const;  // whether the layer's MLP is a mixture of experts
  bool is_sliding(int64_t layer) const {
    return sliding_window > 0 && layer < int64_t(sliding_layers.size()) &&
           sliding_layers[std::size_t(layer)];
  }
  // Throws attn::Error naming `fn` and the field: sizes < 1, heads that do not divide, a head
  // size that does not fit hidden_size when head_dim is 0, an odd head size (RoPE), non-positive
  // eps / theta, an unknown rope_type or hidden_act, sliding_layers of another length.
  void validate(const char* fn) const;
};

// torch.nn.RMSNorm, or Gemma's x_normed * (1 + weight).
class DecoderRMSNorm : public Module {
 public:
  // plus_one: scales by (1 + weight) (Gemma); in_float32: the product with the weight in float32
  // and one rounding to x's dtype (gpt-oss; Gemma's always is), else normalized, rounded, times
  // the weight in x's dtype (Llama).
  DecoderRMSNorm(int64_t dim, double eps, bool plus_one, bool in_float32 = false);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  std::string name() const override { return "RMSNorm"; }
  double eps;
  bool plus_one, in_float32;
  Tensor weight;
};

class DecoderAttention : public Module {
 public:
  DecoderAttention(const DecoderConfig& c, int64_t layer);
  // x (B, T, hidden) at positions start .. start + T - 1, with cos / sin (T, head_size). Without
  // caches: causal attention over x. With caches (B, H_kv, capacity, head_size): the new keys and
  // values are written at [start, start + T) and the queries attend to everything up to them.
  Tensor forward(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor* k_cache,
                 Tensor* v_cache, int64_t start) const;
  std::string name() const override { return "Attention"; }
  std::shared_ptr<Linear> q_proj, k_proj, v_proj, o_proj;
  std::shared_ptr<DecoderRMSNorm> q_norm, k_norm;  // QK-norm, or null
  Tensor sinks;                                    // (num_heads) attention sinks, or undefined
  int64_t num_heads, num_kv_heads, head_size, window;
  double scale, softcap;
};

class DecoderMLP : public Module {
 public:
  explicit DecoderMLP(const DecoderConfig& c);
  Tensor forward(const Tensor& x) const;
  std::string name() const override { return "MLP"; }
  std::shared_ptr<Linear> gate_proj, up_proj, down_proj;
  std::string act;
};

// The experts of a mixture (gpt-oss's layout, stored as transformers stores it): per expert e,
// gate_up_proj[e] (hidden, 2 intermediate) whose even columns are the gate and odd ones the up
// projection, down_proj[e] (intermediate, hidden), each with its bias. With
// DecoderConfig::mxfp4_experts the two matrices are gate_up_mxfp4 (E matrices (2 intermediate,
// hidden): gate_up_proj[e] transposed) and down_mxfp4 (E of (hidden, intermediate)) instead,
// all zero until loaded; the biases stay parameters.
class DecoderExperts : public Module {
 public:
  explicit DecoderExperts(const DecoderConfig& c);
  std::string name() const override { return "Experts"; }
  // x (n, hidden) through expert e's first matrix: (n, 2 intermediate), with its bias.
  Tensor gate_up(const Tensor& x, int64_t e) const;
  // a (n, intermediate) through expert e's second matrix: (n, hidden), with its bias.
  Tensor down(const Tensor& a, int64_t e) const;
  Tensor gate_up_proj, gate_up_proj_bias, down_proj, down_proj_bias;
  Mxfp4Matrices gate_up_mxfp4, down_mxfp4;
  // The MXFP4 products' int8_activations (mxfp4_linear): llama.cpp's 8-bit rounding of a decoded
  // token's activations, to match its numbers. Set by Decoder::set_mxfp4_int8_activations.
  bool mxfp4_int8_activations = false;
};

// A mixture of experts: the router's logits (Linear with bias), the top num_experts_per_tok of
// each token, their softmax as weights; each chosen expert computes
// (clamp(up, -limit, limit) + 1) * g * sigmoid(alpha g), g = clamp(gate, max = limit), then its
// down projection; the weighted outputs summed in expert order (in float32, rounded once).
class DecoderMoE : public Module {
 public:
  explicit DecoderMoE(const DecoderConfig& c);
  Tensor forward(const Tensor& x) const;
  std::string name() const override { return "MoE"; }
  std::shared_ptr<Linear> router;
  std::shared_ptr<DecoderExperts> experts;
  int64_t top_k;
  double alpha, limit;
};

// Qwen3-MoE's, Mixtral's and Qwen2-MoE's mixture (DecoderConfig::moe_type "qwen3_moe"):
// softmax(gate(x)) over the experts in float32, the top num_experts_per_tok (renormalised when
// norm_topk_prob) rounded to the model's dtype as weights; each chosen expert's SwiGLU MLP output
// times its weight, summed in float32 in expert order and rounded once (transformers sums in the
// model's dtype: in bfloat16 the two differ by its rounding). With a shared expert (Qwen2-MoE),
// sigmoid(shared_expert_gate(x)) * shared_expert(x) is added to that sum.
class DecoderSparseMoE : public Module {
 public:
  explicit DecoderSparseMoE(const DecoderConfig& c);
  Tensor forward(const Tensor& x) const;
  std::string name() const override { return "SparseMoE"; }
  std::shared_ptr<Linear> gate;
  std::shared_ptr<ModuleList> experts_list;
  std::vector<std::shared_ptr<DecoderMLP>> experts;
  std::shared_ptr<DecoderMLP> shared_expert;   // or null
  std::shared_ptr<Linear> shared_expert_gate;  // or null
  int64_t top_k;
  bool norm_topk_prob;
};

class DecoderLayer : public Module {
 public:
  DecoderLayer(const DecoderConfig& c, int64_t layer);
  Tensor forward(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor* k_cache,
                 Tensor* v_cache, int64_t start) const;
  std::string name() const override { return "DecoderLayer"; }
  Tensor feed_forward(const Tensor& x) const {
    return mlp ? mlp->forward(x) : moe ? moe->forward(x) : sparse_moe->forward(x);
  }
  std::shared_ptr<DecoderAttention> self_attn;
  // One of the three, named "mlp": in the layers that are mixtures (DecoderConfig::is_sparse),
  // moe (moe_type gpt_oss) or sparse_moe (qwen3_moe); in the others mlp.
  std::shared_ptr<DecoderMLP> mlp;
  std::shared_ptr<DecoderMoE> moe;
  std::shared_ptr<DecoderSparseMoE> sparse_moe;
  std::shared_ptr<DecoderRMSNorm> input_layernorm, post_attention_layernorm;
  std::shared_ptr<DecoderRMSNorm> pre_feedforward_layernorm, post_feedforward_layernorm;  // Gemma
  bool sliding;
};

// transformers' *Model: the embeddings, the layers and the final norm ("model." in names).
class DecoderModel : public Module {
 public:
  explicit DecoderModel(const DecoderConfig& c);
  std::string name() const override { return "DecoderModel"; }
  std::shared_ptr<Embedding> embed_tokens;
  std::shared_ptr<ModuleList> layers_list;
  std::vector<std::shared_ptr<DecoderLayer>> layers;
  std::shared_ptr<DecoderRMSNorm> norm;
};

// Keys and values of every layer for the tokens seen so far.
struct DecoderCache {
  // Per layer: (B, H_kv, capacity, head_size), `length` rows valid, in the model's dtype (float32,
  // bfloat16 or float16: the same bits the model computed). A step of a few tokens reads bfloat16
  // and float16 rows where they lie (paged_attention's kernel, one page per row of the batch),
  // half the bytes of float32; a float32 cache goes to the fused kernel.
  std::vector<Tensor> k, v;
  int64_t length = 0;
  // Rows to allocate when the cache is first filled, if more than that call needs (generate
  // reserves its prompt plus max_new_tokens); growth beyond doubles the capacity.
  int64_t reserve = 0;
};

class Decoder : public Module {
 public:
  // Initialised as transformers does (Linear and Embedding weights N(0, 0.02), norms one, or
  // zero under norm_plus_one), drawn from gen in parameter order.
  explicit Decoder(const DecoderConfig& config, Generator* gen = nullptr);

  // ids: int64 (B, T) in [0, vocab_size), T <= max_position_embeddings. Logits (B, T, V); with
  // logits_to_keep n > 0 those of the last min(n, T) positions only, (B, min(n, T), V), the
  // output product of the others skipped (transformers' logits_to_keep; 0 keeps every position).
  Tensor forward(const Tensor& ids, int64_t logits_to_keep = 0) const;
  // Logits (B, T, V) of ids (B, T) that follow the cache's tokens; appends their keys and values
  // (the cache starts empty and grows as needed). No gradients.
  Tensor forward_cached(const Tensor& ids, DecoderCache& cache) const;
  // Drops `count` tokens of the cache after its first keep_first (the attention sinks) in every
  // layer: the later tokens move down and their keys are rotated back by `count` positions, so
  // that the cache's tokens sit at positions 0 .. length - 1 again, as StreamingLLM and
  // llama.cpp's context shift place them (the model sees positions within the cache). A key
  // rotated back equals the key computed at its new position to float rounding (in a 2-byte
  // cache, one more rounding to its dtype). Throws attn::Error unless 0 <= keep_first, 0 <=
  // count and keep_first + count <= cache.length.
  void evict(DecoderCache& cache, int64_t keep_first, int64_t count) const;
  // Every MXFP4 expert's products for up to 8 tokens with x rounded to 8-bit integers as
  // llama.cpp's q8_0 rounds its activations (mxfp4_linear's int8_activations): llama.cpp's
  // accuracy, not faster decoding end to end on the Zen 4 measured in BENCHMARKS.md (false:
  // 16-bit integers, the default). attn::Error when the model keeps no experts in MXFP4.
  void set_mxfp4_int8_activations(bool on);
  // llama.cpp's context shift, StreamingLLM's window: when `incoming` more tokens would take the
  // cache past `window` tokens, evicts after the first sink_tokens the larger of what they need
  // and half of the others. Returns how many tokens went (0 when they fit); the cache's tokens
  // after the sinks move down by that many.
  int64_t make_room(DecoderCache& cache, int64_t incoming, int64_t window,
                    int64_t sink_tokens) const;

  // Sampling as transformers' generate applies its processors, in this order: the repetition
  // penalty (the logit of a token already in the row divided by it when positive, multiplied
  // when negative), the temperature, top_k (the k largest logits and their ties), top_p (the most
  // likely tokens whose probabilities sum to at least top_p), min_p (tokens at least min_p times
  // as likely as the most likely); then one draw from what is left (one 53-bit uniform from the
  // generator, by inverse CDF in token order).
  struct GenerateOptions {
    int64_t max_new_tokens = 32;
    double temperature = 0.0;          // 0: greedy (argmax, the first of ties); > 0: sampled
    int64_t top_k = 0;                 // 0: no top-k filtering
    double top_p = 1.0;                // in (0, 1]; 1: none
    double min_p = 0.0;                // in [0, 1]; 0: none
    double repetition_penalty = 1.0;   // > 0; 1: none
    std::vector<int64_t> stop_tokens;  // a row that produces one stops (and keeps it)
    // StreamingLLM (Xiao et al., 2023) with llama.cpp's context shift: with window_length > 0
    // the cache never holds more than window_length tokens. When the next token would not fit,
    // the first sink_tokens stay (the attention sinks) and the oldest half of the others go
    // (make_room() above), so generation goes on past max_position_embeddings with bounded memory.
    // Requires sink_tokens + 2 <= window_length <= max_position_embeddings.
    int64_t window_length = 0;  // 0: the cache keeps every token
    int64_t sink_tokens = 4;
    // attn::Error naming fn and the option out of range.
    void validate(const char* fn) const;
  };
  // Continues each row of ids (B, T) by up to max_new_tokens tokens through the key/value cache;
  // rows that stopped are padded with their stop token. on_token gets each step's (B) column.
  Tensor generate(const Tensor& ids, const GenerateOptions& options, Generator* gen = nullptr,
                  const std::function<void(const Tensor&)>& on_token = nullptr) const;

  std::string name() const override { return "Decoder"; }
  const DecoderConfig& config() const { return config_; }
  int64_t num_parameters() const;

  std::shared_ptr<DecoderModel> model;
  std::shared_ptr<Linear> lm_head;  // null when tied to model->embed_tokens

 private:
  // keep > 0: the logits of the last min(keep, T) positions only (generate's prompt keeps 1).
  Tensor run(const Tensor& ids, DecoderCache* cache, int64_t keep = 0) const;
  DecoderConfig config_;
};

// The distribution the next token is drawn from, after the processors of
// Decoder::GenerateOptions on one row of logits (`vocab` floats) that follows `history`; all
// its mass on the argmax when the temperature is 0. attn::Error when no logit is finite.
std::vector<double> next_token_probabilities(const float* logits, int64_t vocab,
                                             const Decoder::GenerateOptions& options,
                                             const std::vector<int64_t>& history);
// One draw from next_token_probabilities (the argmax when the temperature is 0).
int64_t sample_next_token(const float* logits, int64_t vocab,
                          const Decoder::GenerateOptions& options,
                          const std::vector<int64_t>& history, Generator& gen);

}  // namespace attn::nn

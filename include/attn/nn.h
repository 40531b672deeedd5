// Modules (attn::nn) and functional forms (attn::nn::functional), mirroring torch.nn.
//
// Modules own named parameters, buffers and submodules; state_dict() uses PyTorch's dotted names
// so weights move between attn and PyTorch by name. Modules accept batched (B, L, E) and
// unbatched (L, E) input like PyTorch's.
#pragma once

#include <attn/attention.h>
#include <attn/random.h>
#include <attn/tensor.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace attn::nn {

using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

class Module {
 public:
  virtual ~Module() = default;

  // Parameters are float32 tensors that require grad (unless registered with requires_grad false).
  Tensor& register_parameter(const std::string& name, Tensor value, bool requires_grad = true);
  // Buffers are state that is not trained (masks); non-persistent ones stay out of state_dict.
  Tensor& register_buffer(const std::string& name, Tensor value, bool persistent = true);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    add_child(name, module);
    return module;
  }

  NamedTensors named_parameters(bool recurse = true) const;
  std::vector<Tensor> parameters(bool recurse = true) const;
  NamedTensors named_buffers(bool recurse = true) const;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> named_children() const;
  // Parameters and persistent buffers, in registration order, with dotted names.
  NamedTensors state_dict() const;
  // Copies values in by name. strict: every key must match both ways. Shapes must match.
  // Throws attn::Error listing missing / unexpected keys or the mismatching shapes.
  void load_state_dict(const std::map<std::string, Tensor>& state, bool strict = true);
  // load_state_dict for values not in memory yet (a file read tensor by tensor): `shapes` names
  // what the source holds. The same checks come first, and nothing is read if they fail; then
  // `read(name, dst)` fills each of the module's tensors that the source names, in place (dst has
  // the module's shape and dtype). A read that throws leaves the tensors before it loaded.
  using TensorReader = std::function<void(const std::string& name, Tensor& dst)>;
  void load_state_dict_from(const std::map<std::string, Shape>& shapes, const TensorReader& read,
                            bool strict = true);
  Tensor parameter(const std::string& dotted_name) const;

  // Resets the gradients of every parameter: undefined (set_to_none, PyTorch's default) or zero.
  void zero_grad(bool set_to_none = true);

  // Converts every floating parameter and buffer of this module and its children to `dtype`
  // (float32, bfloat16 or float16; each rounded once), in place (Tensor::set_data: the handles
  // modules hold see the new values). attn::Error for another dtype.
  void to(Dtype dtype);

  virtual void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }
  virtual std::string name() const = 0;

 protected:
  void add_child(const std::string& name, std::shared_ptr<Module> m);
  bool training_ = true;

 private:
  struct Entry {
    std::string name;
    Tensor value;
    bool persistent = true;
  };
  std::vector<Entry> params_, buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  friend class ModuleAccess;
};

// torch.nn.ModuleList: children named "0", "1", ... in order.
class ModuleList : public Module {
 public:
  template <typename M>
  std::shared_ptr<M> append(std::shared_ptr<M> module) {
    add_child(std::to_string(size_++), module);
    return module;
  }
  int64_t size() const { return size_; }
  std::string name() const override { return "ModuleList"; }

 private:
  int64_t size_ = 0;
};

// y = x @ W^T + b, W (out, in). Initialised like torch.nn.Linear: kaiming_uniform_(a=sqrt(5)) for
// W and U(-1/sqrt(in), 1/sqrt(in)) for b, drawn from the generator in the same order.
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  std::string name() const override { return "Linear"; }
  int64_t in_features, out_features;
  Tensor weight;  // (out, in)
  Tensor bias;    // (out) or undefined
};

// Lookup table (num_embeddings, embedding_dim) initialised N(0, 1) like torch.nn.Embedding.
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim);
  Tensor forward(const Tensor& indices) const;  // int64 (...) -> (..., embedding_dim)
  Tensor operator()(const Tensor& indices) const { return forward(indices); }
  std::string name() const override { return "Embedding"; }
  int64_t num_embeddings, embedding_dim;
  Tensor weight;
};

// Zeroes elements with probability p and scales survivors by 1/(1-p) in training; identity in eval.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  std::string name() const override { return "Dropout"; }
  double p;
};

// torch.nn.LayerNorm over the last dim: (x - mean) / sqrt(var + eps) * weight + bias, with the
// biased variance. weight ones, bias zeros (bias optional, as nanoGPT's LayerNorm).
class LayerNorm : public Module {
 public:
  explicit LayerNorm(int64_t normalized_shape, double eps = 1e-5, bool elementwise_affine = true,
                     bool bias = true);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  std::string name() const override { return "LayerNorm"; }
  int64_t normalized_shape;
  double eps;
  Tensor weight, bias;  // (normalized_shape) or undefined
};

// torch.nn.RMSNorm (Llama, Qwen, Gemma) over the trailing dims `normalized_shape`:
// x * rsqrt(mean(x^2) + eps) * weight. eps unset: the dtype's machine epsilon, as torch's None.
// weight ones (undefined without elementwise_affine).
class RMSNorm : public Module {
 public:
  explicit RMSNorm(Shape normalized_shape, std::optional<double> eps = std::nullopt,
                   bool elementwise_affine = true);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  std::string name() const override { return "RMSNorm"; }
  Shape normalized_shape;
  std::optional<double> eps;
  Tensor weight;  // normalized_shape, or undefined
};

// torch.nn.GELU: x * Phi(x) with the exact erf ("none") or the tanh approximation ("tanh").
class GELU : public Module {
 public:
  explicit GELU(std::string approximate = "none");
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  std::string name() const override { return "GELU"; }
  std::string approximate;
};

// ---- the attention classes of the reference tutorials -------------------------------------------
//
// attn began as the computations of five PyTorch tutorials, numbered 000 to 004, which
// `attn walkthrough N` replays step by step (tools/attn/walkthrough.cpp) and whose code the tours
// run (docs/tour-python.md, docs/tour-cpp.md): 000 vocabulary, embeddings and the attention of one
// word; 001 multi-head attention step by step; 002 self-attention with trainable weights; 003
// simplified, trainable and causal self-attention; 004 the bag-of-words averaging trick, one head,
// cross-attention. The classes below are theirs, with their parameter names and draw order, so
// that the same manual_seed gives the numbers the tutorials print.

// How raw weight matrices are initialised (tutorial 002 uses randn, tutorial 003 uses rand).
enum class Init { Rand, Randn };

// Self-attention with raw (d_in, d_out) parameter matrices W_query, W_key, W_value (tutorials
// 002, 003): context = softmax(x W_q (x W_k)^T / sqrt(d_out)) x W_v.
class SelfAttentionV1 : public Module {
 public:
  SelfAttentionV1(int64_t d_in, int64_t d_out, Init init = Init::Rand, bool requires_grad = true);
  Tensor forward(const Tensor& x) const;  // (L, d_in) or (B, L, d_in) -> (..., L, d_out)
  Tensor operator()(const Tensor& x) const { return forward(x); }
  // The attention weights (..., L, L) that forward uses.
  Tensor attention_weights(const Tensor& x) const;
  std::string name() const override { return "SelfAttentionV1"; }
  Tensor W_query, W_key, W_value;
};

// Self-attention with Linear projections, bias optional (tutorials 003, 004).
class SelfAttentionV2 : public Module {
 public:
  SelfAttentionV2(int64_t d_in, int64_t d_out, bool qkv_bias = false);
  Tensor forward(const Tensor& x) const;
  Tensor operator()(const Tensor& x) const { return forward(x); }
  Tensor attention_weights(const Tensor& x) const;
  std::string name() const override { return "SelfAttentionV2"; }
  std::shared_ptr<Linear> W_query, W_key, W_value;
};

// Causal self-attention with a (context_length, context_length) mask buffer and dropout on the
// weights (tutorial 003). Raw parameter matrices initialised with rand, as in that tutorial.
class CausalAttention : public Module {
 public:
  CausalAttention(int64_t d_in, int64_t d_out, int64_t context_length, double dropout,
                  Init init = Init::Rand);
  Tensor forward(const Tensor& x);  // (L, d_in) or (B, L, d_in), L <= context_length
  Tensor operator()(const Tensor& x) { return forward(x); }
  // After dropout, as forward uses them (in training each call draws new dropout factors).
  Tensor attention_weights(const Tensor& x);
  std::string name() const override { return "CausalAttention"; }
  int64_t context_length;
  Tensor W_query, W_key, W_value;
  Tensor mask;  // buffer: triu(ones, diagonal=1), 1 above the diagonal
  std::shared_ptr<Dropout> dropout;
};

// One head of tutorial 004: Linear key/query/value (no bias), causal (decoder) or not (encoder).
class Head : public Module {
 public:
  Head(int64_t n_embd, int64_t head_size, bool causal = true);
  Tensor forward(const Tensor& x) const;  // (B, T, C) -> (B, T, head_size)
  Tensor operator()(const Tensor& x) const { return forward(x); }
  Tensor attention_weights(const Tensor& x) const;
  std::string name() const override { return "Head"; }
  int64_t head_size;
  bool causal;
  std::shared_ptr<Linear> key, query, value;
};

// Cross-attention (tutorial 004's notes): queries from x (L_q, d_in), keys and values from
// `context` (L_k, d_context), which may differ in length and width.
class CrossAttention : public Module {
 public:
  CrossAttention(int64_t d_in, int64_t d_context, int64_t d_out, bool qkv_bias = false);
  Tensor forward(const Tensor& x, const Tensor& context) const;
  Tensor attention_weights(const Tensor& x, const Tensor& context) const;
  std::string name() const override { return "CrossAttention"; }
  std::shared_ptr<Linear> W_query, W_key, W_value;
};

// Tutorial 001's step-by-step multi-head attention, each intermediate kept for printing.
struct MultiHeadSteps {
  Tensor Q, K, V;                    // (B, L, d_out)
  Tensor Q_heads, K_heads, V_heads;  // (B, H, L, head_dim) after view + transpose
  Tensor K_T;                        // (B, H, head_dim, L)
  Tensor scores;                     // (B, H, L, L)
  Tensor mask;                       // (L, L) bool, true above the diagonal
  Tensor masked_scores;              // scores with -inf above the diagonal
  Tensor weights;                    // softmax(masked / sqrt(head_dim))
  Tensor dropped;                    // weights after dropout
  Tensor context;                    // (B, H, L, head_dim)
  Tensor context_t;                  // (B, L, H, head_dim)
  Tensor output;                     // (B, L, d_out)
};
MultiHeadSteps multi_head_attention_steps(const Tensor& x, const Tensor& Wq, const Tensor& Wk,
                                          const Tensor& Wv, int64_t num_heads, double dropout_p,
                                          bool causal = true, Generator* gen = nullptr);

// torch.nn.MultiheadAttention. Parameter names follow PyTorch: in_proj_weight (3E, E) and
// in_proj_bias when kdim == vdim == embed_dim, else q_proj_weight, k_proj_weight, v_proj_weight;
// out_proj.weight, out_proj.bias. add_bias_kv and add_zero_attn are not supported.
class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout = 0.0, bool bias = true,
                     std::optional<int64_t> kdim = std::nullopt,
                     std::optional<int64_t> vdim = std::nullopt, bool batch_first = false);
  struct Output {
    Tensor output;   // (L, B, E) or (B, L, E) when batch_first, or (L, E) unbatched
    Tensor weights;  // (B, L_q, L_k) averaged or (B, H, L_q, L_k); undefined unless need_weights
  };
  // key_padding_mask: (B, L_k) ((L_k) unbatched) bool, true means "ignore this key" (PyTorch's
  // convention), or float added. attn_mask: (L_q, L_k) or (B*H, L_q, L_k) ((H, L_q, L_k)
  // unbatched); bool true means "not allowed" (PyTorch's MultiheadAttention convention), float
  // added. Both masks are turned into additive float masks and summed, as PyTorch 2.x does.
  // is_causal applies the top-left causal mask; PyTorch 2.x treats it as a hint that attn_mask is
  // that mask, so with a causal attn_mask the result is the same as PyTorch's. Dropout (training
  // and dropout > 0) draws over the weights (B, H, L_q, L_k) in row-major order, as torch does
  // over (B*H, L_q, L_k). A query whose keys are all masked gives zero attention (out_proj's bias
  // alone) and zero weights where torch gives NaN. Throws attn::Error naming MultiheadAttention
  // and the shapes for wrong ranks, widths, lengths, batch sizes, mask shapes or dtypes.
  Output forward(const Tensor& query, const Tensor& key, const Tensor& value,
                 const Tensor& key_padding_mask = Tensor(), bool need_weights = true,
                 const Tensor& attn_mask = Tensor(), bool average_attn_weights = true,
                 bool is_causal = false) const;
  // Causal self-attention for incremental decoding (GPT's KV cache). x (B, T, E), batch first,
  // holds the T newest tokens; their keys and values are written to rows [start, start + T) of
  // k_cache and v_cache (B, H, capacity, head_dim), and each new query attends to rows
  // [0, start + T) up to its own position (bottom-right causal). No masks, no dropout, no
  // weights; self-attention modules only (kdim = vdim = embed_dim). Returns (B, T, E).
  Tensor forward_cached(const Tensor& x, Tensor& k_cache, Tensor& v_cache, int64_t start) const;
  // Self-attention of x (B, T, E) (batch_first, kdim = vdim = embed_dim) whose attention step is
  // `attention` (q, k, v (B, H, T, head_dim) -> (B, H, T, head_dim)) instead of this module's
  // scaled_dot_product_attention: the projections are the module's, the rest is the caller's
  // (context-parallel ring attention over a sharded sequence; no dropout is applied here).
  using AttentionFn = std::function<Tensor(const Tensor& q, const Tensor& k, const Tensor& v)>;
  Tensor forward_with(const Tensor& x, const AttentionFn& attention) const;
  std::string name() const override { return "MultiheadAttention"; }
  int64_t embed_dim, num_heads, head_dim, kdim, vdim;
  double dropout;
  bool batch_first, same_embed_dim;
  Tensor in_proj_weight, in_proj_bias, q_proj_weight, k_proj_weight, v_proj_weight;
  std::shared_ptr<Linear> out_proj;

 private:
  // Self-attention's q, k and v from one (B L, E) x (E, 3E) product: (3, B, H, L, head_dim).
  Tensor packed_qkv(const Tensor& x) const;
};

// ---- vocabulary (tutorial 000) ------------------------------------------------------------------

// Words of a sentence (commas removed, split on whitespace), sorted, each mapped to its index.
class Vocabulary {
 public:
  explicit Vocabulary(const std::string& sentence);
  // Sorted unique words. A repeated word gets one id, so ids are 0..size()-1 (tutorial 000's dict
  // comprehension would give it the index of its last copy, leaving gaps; its sentence has none).
  const std::vector<std::string>& words() const { return words_; }
  int64_t size() const { return int64_t(words_.size()); }
  int64_t id(const std::string& word) const;         // attn::IndexError for unknown words
  Tensor encode(const std::string& sentence) const;  // int64 (num_words)
  // {'Life': 0, 'dessert': 1, ...} as Python prints the dict.
  std::string repr() const;
  static std::vector<std::string> tokenize(const std::string& sentence);

 private:
  std::vector<std::string> words_;
  std::map<std::string, int64_t> ids_;
};

// ---- initialisation (torch.nn.init), drawing from the generator exactly as PyTorch does ---------
namespace init {
// While one lives on this thread, every init:: function checks its arguments and then leaves the
// tensor as it is, drawing nothing from any generator: the parameters of modules that initialise
// through them (Linear, Embedding, LayerNorm, MultiheadAttention, GPT) keep what they are allocated
// with (zeros; LayerNorm's weight is allocated as ones). SelfAttentionV1 and CausalAttention draw
// their raw matrices with rand/randn, as the reference tutorials do, and still draw. For a model
// whose every weight a checkpoint is about to overwrite, as torch.nn.utils.skip_init (which leaves
// them uninitialised): GPT-2 small's 124M draws take seconds.
class SkipInitGuard {
 public:
  SkipInitGuard();
  ~SkipInitGuard();
  SkipInitGuard(const SkipInitGuard&) = delete;
  SkipInitGuard& operator=(const SkipInitGuard&) = delete;
  static bool active();  // whether one lives on this thread
};
Tensor& uniform_(Tensor& t, double a = 0.0, double b = 1.0, Generator* gen = nullptr);
Tensor& normal_(Tensor& t, double mean = 0.0, double std = 1.0, Generator* gen = nullptr);
Tensor& zeros_(Tensor& t);
Tensor& ones_(Tensor& t);
// kaiming_uniform_(t, a, mode="fan_in", nonlinearity="leaky_relu"): U(-bound, bound) with
// bound = sqrt(3) * gain / sqrt(fan_in), gain = sqrt(2 / (1 + a^2)).
Tensor& kaiming_uniform_(Tensor& t, double a = 0.0, Generator* gen = nullptr);
// xavier_uniform_: U(-b, b), b = gain * sqrt(6 / (fan_in + fan_out)).
Tensor& xavier_uniform_(Tensor& t, double gain = 1.0, Generator* gen = nullptr);
// ---- the rest of torch.nn.init (src/nn/init.cpp), with torch 1.13's arithmetic and draws
Tensor& constant_(Tensor& t, double value);
// torch.nn.init.calculate_gain; param is leaky_relu's negative slope (0.01 when not given).
double calculate_gain(const std::string& nonlinearity, std::optional<double> param = std::nullopt);
// kaiming_*_(t, a, mode "fan_in" | "fan_out", nonlinearity): std = gain / sqrt(fan).
Tensor& kaiming_uniform_(Tensor& t, double a, const std::string& mode,
                         const std::string& nonlinearity, Generator* gen = nullptr);
Tensor& kaiming_normal_(Tensor& t, double a = 0.0, const std::string& mode = "fan_in",
                        const std::string& nonlinearity = "leaky_relu", Generator* gen = nullptr);
// xavier_normal_: N(0, std), std = gain * sqrt(2 / (fan_in + fan_out)).
Tensor& xavier_normal_(Tensor& t, double gain = 1.0, Generator* gen = nullptr);
// trunc_normal_: N(mean, std) truncated to [a, b] by inverse-CDF sampling (uniform_, erfinv_,
// then clamp), the same numbers as torch for the same seed.
Tensor& trunc_normal_(Tensor& t, double mean = 0.0, double std = 1.0, double a = -2.0,
                      double b = 2.0, Generator* gen = nullptr);
}  // namespace init

// ---- functional ---------------------------------------------------------------------------------
namespace functional {
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
Tensor embedding(const Tensor& indices, const Tensor& weight);
// Same draws as torch.nn.functional.dropout on the CPU for the same generator state.
Tensor dropout(const Tensor& x, double p = 0.5, bool training = true, Generator* gen = nullptr);
Tensor softmax(const Tensor& x, int64_t dim);
// Normalises over the last dim (normalized_shape must equal x.size(-1)). One fused kernel forward
// and backward (NativeLayerNormBackward0).
Tensor layer_norm(const Tensor& x, int64_t normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
// torch.nn.functional.rms_norm over the trailing dims normalized_shape, as PyTorch's CPU
// composite: x * rsqrt(mean(x^2 over those dims) + eps), then * weight (when defined, of shape
// normalized_shape); eps unset: the dtype's machine epsilon. Differentiable through its ops.
Tensor rms_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                std::optional<double> eps = std::nullopt);
// approximate: "none" (erf) or "tanh". GeluBackward0.
Tensor gelu(const Tensor& x, const std::string& approximate = "none");
// silu(x) = x * sigmoid(x) (torch.nn.functional.silu; src/nn/init.cpp).
Tensor silu(const Tensor& x);
// Mean (or "sum" / "none") negative log-likelihood of targets under softmax(input):
// input (N, C) float logits, target (N) int64 class ids; entries equal to ignore_index do not
// count. Fused log-softmax and NLL (NllLossBackward0 after LogSoftmaxBackward0 in torch; one
// node here). Throws attn::IndexError for a target outside [0, C).
Tensor cross_entropy(const Tensor& input, const Tensor& target,
                     const std::string& reduction = "mean", int64_t ignore_index = -100);
using attn::scaled_dot_product_attention;
}  // namespace functional

}  // namespace attn::nn

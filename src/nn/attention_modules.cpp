// The reference tutorials' attention classes (see include/attn/nn.h), built from ops (projections
// + scaled_dot_product_attention).
#include <attn/nn.h>
#include <attn/ops.h>

#include <cmath>

#include "../tensor/internal.h"

namespace attn::nn {

using detail::fail;

namespace {

// x must be a float32 (L, width) or (B, L, width) sequence.
void check_seq(const Tensor& x, int64_t width, const char* fn, const char* what = "input") {
  detail::check_float32(x, what, fn);
  if (x.dim() != 2 && x.dim() != 3)
    fail(fn, what, " ", shape_str(x.shape()), " must be (L, ", width, ") or (B, L, ", width, ")");
  if (x.size(-1) != width)
    fail(fn, what, " ", shape_str(x.shape()), " has width ", x.size(-1), ", expected ", width);
}

void check_dims(const char* fn, std::initializer_list<std::pair<const char*, int64_t>> dims) {
  for (auto [name, d] : dims)
    if (d <= 0) fail(fn, name, " must be positive, got ", d);
}

Tensor raw_matrix(int64_t rows, int64_t cols, Init init) {
  return init == Init::Rand ? rand({rows, cols}) : randn({rows, cols});
}

Tensor weights_of(const Tensor& q, const Tensor& k, const Tensor& v, const SdpaOptions& o) {
  return std::get<1>(scaled_dot_product_attention_with_weights(q, k, v, o));
}

}  // namespace

// ---- SelfAttentionV1 ----------------------------------------------------------------------------

SelfAttentionV1::SelfAttentionV1(int64_t d_in, int64_t d_out, Init init, bool requires_grad) {
  check_dims("SelfAttentionV1", {{"d_in", d_in}, {"d_out", d_out}});
  // The tutorials draw W_query, W_key, W_value in this order (torch.rand or torch.randn).
  W_query = register_parameter("W_query", raw_matrix(d_in, d_out, init), requires_grad);
  W_key = register_parameter("W_key", raw_matrix(d_in, d_out, init), requires_grad);
  W_value = register_parameter("W_value", raw_matrix(d_in, d_out, init), requires_grad);
}

Tensor SelfAttentionV1::forward(const Tensor& x) const {
  check_seq(x, W_query.size(0), "SelfAttentionV1");
  // softmax(x W_q (x W_k)^T / sqrt(d_out)) x W_v: the default scale is 1 / sqrt(d_out).
  return scaled_dot_product_attention(matmul(x, W_query), matmul(x, W_key), matmul(x, W_value));
}

Tensor SelfAttentionV1::attention_weights(const Tensor& x) const {
  check_seq(x, W_query.size(0), "SelfAttentionV1.attention_weights");
  return weights_of(matmul(x, W_query), matmul(x, W_key), matmul(x, W_value), {});
}

// ---- SelfAttentionV2 ----------------------------------------------------------------------------

SelfAttentionV2::SelfAttentionV2(int64_t d_in, int64_t d_out, bool qkv_bias) {
  check_dims("SelfAttentionV2", {{"d_in", d_in}, {"d_out", d_out}});
  W_query = register_module("W_query", std::make_shared<Linear>(d_in, d_out, qkv_bias));
  W_key = register_module("W_key", std::make_shared<Linear>(d_in, d_out, qkv_bias));
  W_value = register_module("W_value", std::make_shared<Linear>(d_in, d_out, qkv_bias));
}

Tensor SelfAttentionV2::forward(const Tensor& x) const {
  check_seq(x, W_query->in_features, "SelfAttentionV2");
  return scaled_dot_product_attention((*W_query)(x), (*W_key)(x), (*W_value)(x));
}

Tensor SelfAttentionV2::attention_weights(const Tensor& x) const {
  check_seq(x, W_query->in_features, "SelfAttentionV2.attention_weights");
  return weights_of((*W_query)(x), (*W_key)(x), (*W_value)(x), {});
}

// ---- CausalAttention ----------------------------------------------------------------------------

CausalAttention::CausalAttention(int64_t d_in, int64_t d_out, int64_t context_length,
                                 double dropout_p, Init init)
    : context_length(context_length) {
  const char* fn = "CausalAttention";
  check_dims(fn, {{"d_in", d_in}, {"d_out", d_out}, {"context_length", context_length}});
  if (!(dropout_p >= 0.0 && dropout_p <= 1.0))
    fail(fn, "dropout probability has to be between 0 and 1, but got ", dropout_p);
  W_query = register_parameter("W_query", raw_matrix(d_in, d_out, init));
  W_key = register_parameter("W_key", raw_matrix(d_in, d_out, init));
  W_value = register_parameter("W_value", raw_matrix(d_in, d_out, init));
  dropout = register_module("dropout", std::make_shared<Dropout>(dropout_p));
  // 1.0 above the diagonal: the positions each query may NOT see (float, as in tutorial 003).
  mask = register_buffer("mask", triu(ones({context_length, context_length}), 1));
}

namespace {
// Runs CausalAttention's computation; weights_out receives the weights when non-null.
Tensor causal_forward(const CausalAttention& m, const Tensor& x, Tensor* weights_out,
                      const char* fn) {
  check_seq(x, m.W_query.size(0), fn);
  const int64_t L = x.size(-2);
  if (L > m.context_length)
    fail(fn, "input ", shape_str(x.shape()), " has ", L, " tokens, more than context_length ",
         m.context_length);
  Tensor q = matmul(x, m.W_query), k = matmul(x, m.W_key), v = matmul(x, m.W_value);
  SdpaOptions o;
  // Tutorial 003's mask.bool()[:L, :L] marks what is hidden; sdpa's bool mask marks what is
  // visible.
  o.attn_mask = m.mask.slice(0, 0, L).slice(1, 0, L) == 0.0;
  const double p = m.dropout->is_training() ? m.dropout->p : 0.0;
  if (p == 1.0) {
    // torch's dropout(p=1) is weights * 0, drawing nothing (sdpa itself takes p in [0, 1) only).
    Tensor w = std::get<1>(scaled_dot_product_attention_with_weights(q, k, v, o)) * 0.0;
    if (weights_out) *weights_out = w;
    return matmul(w, v);
  }
  o.dropout_p = p;
  if (weights_out) {
    auto [out, w] = scaled_dot_product_attention_with_weights(q, k, v, o);
    *weights_out = w;
    return out;
  }
  return scaled_dot_product_attention(q, k, v, o);
}
}  // namespace

Tensor CausalAttention::forward(const Tensor& x) {
  return causal_forward(*this, x, nullptr, "CausalAttention");
}

Tensor CausalAttention::attention_weights(const Tensor& x) {
  Tensor w;
  causal_forward(*this, x, &w, "CausalAttention.attention_weights");
  return w;
}

// ---- Head ---------------------------------------------------------------------------------------

Head::Head(int64_t n_embd, int64_t head_size, bool causal) : head_size(head_size), causal(causal) {
  check_dims("Head", {{"n_embd", n_embd}, {"head_size", head_size}});
  // Tutorial 004 creates key, query, value in this order.
  key = register_module("key", std::make_shared<Linear>(n_embd, head_size, false));
  query = register_module("query", std::make_shared<Linear>(n_embd, head_size, false));
  value = register_module("value", std::make_shared<Linear>(n_embd, head_size, false));
}

namespace {
SdpaOptions head_options(const Head& h) {
  SdpaOptions o;
  o.is_causal = h.causal;                         // decoder: tril mask; encoder: none
  o.scale = std::pow(double(h.head_size), -0.5);  // tutorial 004's head_size ** -0.5
  return o;
}
}  // namespace

Tensor Head::forward(const Tensor& x) const {
  check_seq(x, key->in_features, "Head");
  return scaled_dot_product_attention((*query)(x), (*key)(x), (*value)(x), head_options(*this));
}

Tensor Head::attention_weights(const Tensor& x) const {
  check_seq(x, key->in_features, "Head.attention_weights");
  return weights_of((*query)(x), (*key)(x), (*value)(x), head_options(*this));
}

// ---- CrossAttention -----------------------------------------------------------------------------

CrossAttention::CrossAttention(int64_t d_in, int64_t d_context, int64_t d_out, bool qkv_bias) {
  check_dims("CrossAttention", {{"d_in", d_in}, {"d_context", d_context}, {"d_out", d_out}});
  W_query = register_module("W_query", std::make_shared<Linear>(d_in, d_out, qkv_bias));
  W_key = register_module("W_key", std::make_shared<Linear>(d_context, d_out, qkv_bias));
  W_value = register_module("W_value", std::make_shared<Linear>(d_context, d_out, qkv_bias));
}

namespace {
void check_cross(const CrossAttention& m, const Tensor& x, const Tensor& context, const char* fn) {
  check_seq(x, m.W_query->in_features, fn, "x");
  check_seq(context, m.W_key->in_features, fn, "context");
  if (x.dim() == 3 && context.dim() == 3 && x.size(0) != context.size(0))
    fail(fn, "x ", shape_str(x.shape()), " and context ", shape_str(context.shape()),
         " differ in batch size");
}
}  // namespace

Tensor CrossAttention::forward(const Tensor& x, const Tensor& context) const {
  check_cross(*this, x, context, "CrossAttention");
  return scaled_dot_product_attention((*W_query)(x), (*W_key)(context), (*W_value)(context));
}

Tensor CrossAttention::attention_weights(const Tensor& x, const Tensor& context) const {
  check_cross(*this, x, context, "CrossAttention.attention_weights");
  return weights_of((*W_query)(x), (*W_key)(context), (*W_value)(context), {});
}

// ---- tutorial 001: multi-head attention, step by step -------------------------------------------

MultiHeadSteps multi_head_attention_steps(const Tensor& x, const Tensor& Wq, const Tensor& Wk,
                                          const Tensor& Wv, int64_t num_heads, double dropout_p,
                                          bool causal, Generator* gen) {
  const char* fn = "multi_head_attention_steps";
  if (!x.defined() || x.dtype() != Dtype::Float32 || x.dim() != 3)
    fail(fn, "x must be a float32 (batch, seq_len, d_model) tensor, got ",
         x.defined() ? detail::tensor_desc(x) : std::string("an undefined tensor"));
  const int64_t B = x.size(0), L = x.size(1), d_model = x.size(2);
  int64_t d_out = -1;
  for (auto [W, name] : {std::pair{&Wq, "Wq"}, {&Wk, "Wk"}, {&Wv, "Wv"}}) {
    if (!W->defined() || W->dtype() != Dtype::Float32 || W->dim() != 2 || W->size(0) != d_model)
      fail(fn, name, " must be a float32 (", d_model, ", d_out) matrix for x ",
           shape_str(x.shape()), ", got ",
           W->defined() ? detail::tensor_desc(*W) : std::string("an undefined tensor"));
    if (d_out >= 0 && W->size(1) != d_out)
      fail(fn, "Wq, Wk and Wv differ in width: ", shape_str(Wq.shape()), ", ",
           shape_str(Wk.shape()), ", ", shape_str(Wv.shape()));
    d_out = W->size(1);
  }
  if (num_heads <= 0 || d_out % num_heads != 0)
    fail(fn, "num_heads ", num_heads, " must be positive and divide d_out ", d_out);
  if (!(dropout_p >= 0.0 && dropout_p <= 1.0))
    fail(fn, "dropout probability has to be between 0 and 1, but got ", dropout_p);
  const int64_t head_dim = d_out / num_heads;

  MultiHeadSteps s;
  s.Q = matmul(x, Wq);  // (B, L, d_out)
  s.K = matmul(x, Wk);
  s.V = matmul(x, Wv);
  // (B, L, H, head_dim) -> (B, H, L, head_dim)
  s.Q_heads = s.Q.view({B, L, num_heads, head_dim}).transpose(1, 2);
  s.K_heads = s.K.view({B, L, num_heads, head_dim}).transpose(1, 2);
  s.V_heads = s.V.view({B, L, num_heads, head_dim}).transpose(1, 2);
  s.K_T = s.K_heads.transpose(2, 3);               // (B, H, head_dim, L)
  s.scores = matmul(s.Q_heads, s.K_T);             // (B, H, L, L)
  s.mask = triu(ones({L, L}), 1).to(Dtype::Bool);  // true above the diagonal
  s.masked_scores = causal ? s.scores.masked_fill(s.mask, -inf) : s.scores;
  s.weights = softmax(s.masked_scores / std::sqrt(double(head_dim)), -1);
  s.dropped = functional::dropout(s.weights, dropout_p, true, gen);
  s.context = matmul(s.dropped, s.V_heads);                      // (B, H, L, head_dim)
  s.context_t = s.context.transpose(1, 2);                       // (B, L, H, head_dim)
  s.output = s.context_t.reshape({B, L, num_heads * head_dim});  // (B, L, d_out)
  return s;
}

}  // namespace attn::nn

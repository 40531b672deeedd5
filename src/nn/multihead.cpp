// MultiheadAttention: torch.nn.MultiheadAttention built from linear + scaled_dot_product_attention.
#include <attn/autograd.h>
#include <attn/nn.h>
#include <attn/ops.h>

#include "../ops/attention_internal.h"
#include "../tensor/internal.h"

namespace attn::nn {

using detail::fail;

MultiheadAttention::MultiheadAttention(int64_t embed_dim, int64_t num_heads, double dropout,
                                       bool bias, std::optional<int64_t> kdim_opt,
                                       std::optional<int64_t> vdim_opt, bool batch_first)
    : embed_dim(embed_dim),
      num_heads(num_heads),
      kdim(kdim_opt.value_or(embed_dim)),
      vdim(vdim_opt.value_or(embed_dim)),
      dropout(dropout),
      batch_first(batch_first) {
  const char* fn = "MultiheadAttention";
  if (embed_dim <= 0 || num_heads <= 0)
    fail(fn, "embed_dim ", embed_dim, " and num_heads ", num_heads, " must be positive");
  if (embed_dim % num_heads != 0)
    fail(fn, "embed_dim ", embed_dim, " must be divisible by num_heads ", num_heads);
  if (kdim <= 0 || vdim <= 0) fail(fn, "kdim ", kdim, " and vdim ", vdim, " must be positive");
  if (!(dropout >= 0.0 && dropout <= 1.0))
    fail(fn, "dropout probability has to be between 0 and 1, but got ", dropout);
  head_dim = embed_dim / num_heads;
  same_embed_dim = kdim == embed_dim && vdim == embed_dim;
  const int64_t E = embed_dim;

  // Registration order = PyTorch's state_dict order.
  if (same_embed_dim) {
    in_proj_weight = register_parameter("in_proj_weight", empty({3 * E, E}));
  } else {
    q_proj_weight = register_parameter("q_proj_weight", empty({E, E}));
    k_proj_weight = register_parameter("k_proj_weight", empty({E, kdim}));
    v_proj_weight = register_parameter("v_proj_weight", empty({E, vdim}));
  }
  if (bias) in_proj_bias = register_parameter("in_proj_bias", empty({3 * E}));
  // out_proj is a (NonDynamicallyQuantizable)Linear: its constructor draws kaiming_uniform_ for
  // the weight and U(-1/sqrt(E), 1/sqrt(E)) for the bias BEFORE _reset_parameters runs.
  out_proj = register_module("out_proj", std::make_shared<Linear>(E, E, bias));

  // torch 1.13's MultiheadAttention._reset_parameters, in its order.
  if (same_embed_dim) {
    init::xavier_uniform_(in_proj_weight);
  } else {
    init::xavier_uniform_(q_proj_weight);
    init::xavier_uniform_(k_proj_weight);
    init::xavier_uniform_(v_proj_weight);
  }
  if (bias) {
    init::zeros_(in_proj_bias);
    init::zeros_(out_proj->bias);
  }
}

namespace {

// A bool mask (true = not allowed) as a float mask of 0 / -inf; a float mask as it is.
Tensor additive(const Tensor& m) {
  return m.dtype() == Dtype::Bool ? zeros(m.shape()).masked_fill(m, -inf) : m;
}

}  // namespace

MultiheadAttention::Output MultiheadAttention::forward(
    const Tensor& query, const Tensor& key, const Tensor& value, const Tensor& key_padding_mask,
    bool need_weights, const Tensor& attn_mask, bool average_attn_weights, bool is_causal) const {
  const char* fn = "MultiheadAttention";
  detail::check_float32(query, "query", fn);
  detail::check_float32(key, "key", fn);
  detail::check_float32(value, "value", fn);
  const bool batched = query.dim() == 3;
  if (!batched && query.dim() != 2)
    fail(fn, "query ", shape_str(query.shape()), " must be unbatched 2-D (L, E) or batched 3-D ",
         batch_first ? "(B, L, E)" : "(L, B, E)");
  if (key.dim() != query.dim() || value.dim() != query.dim())
    fail(fn, "for ", query.dim(), "-D query ", shape_str(query.shape()), ", key ",
         shape_str(key.shape()), " and value ", shape_str(value.shape()), " must be ", query.dim(),
         "-D too");

  // Everything internally is batch first: (B, L, features).
  auto to_bf = [&](const Tensor& t) {
    return !batched ? t.unsqueeze(0) : batch_first ? t : t.transpose(0, 1);
  };
  Tensor q_in = to_bf(query), k_in = to_bf(key), v_in = to_bf(value);
  const int64_t B = q_in.size(0), L_q = q_in.size(1), L_k = k_in.size(1);
  const int64_t E = embed_dim, H = num_heads;
  if (q_in.size(2) != E)
    fail(fn, "query ", shape_str(query.shape()), " has embedding dim ", q_in.size(2),
         ", expected embed_dim ", E);
  if (k_in.size(2) != kdim)
    fail(fn, "key ", shape_str(key.shape()), " has feature dim ", k_in.size(2), ", expected kdim ",
         kdim);
  if (v_in.size(2) != vdim)
    fail(fn, "value ", shape_str(value.shape()), " has feature dim ", v_in.size(2),
         ", expected vdim ", vdim);
  if (k_in.size(0) != v_in.size(0) || k_in.size(1) != v_in.size(1))
    fail(fn, "key ", shape_str(key.shape()), " and value ", shape_str(value.shape()),
         " differ in sequence length or batch size");
  if (k_in.size(0) != B)
    fail(fn, "query ", shape_str(query.shape()), " and key ", shape_str(key.shape()),
         " differ in batch size");

  // ---- masks, merged into one additive float mask broadcastable to (B, H, L_q, L_k) -------------
  Tensor mask;
  if (attn_mask.defined()) {
    if (attn_mask.dtype() != Dtype::Bool && attn_mask.dtype() != Dtype::Float32)
      fail(fn, "attn_mask must be bool or float32, got ", dtype_name(attn_mask.dtype()));
    if (attn_mask.dim() == 2) {
      if (attn_mask.size(0) != L_q || attn_mask.size(1) != L_k)
        fail(fn, "the shape of the 2-D attn_mask is ", shape_str(attn_mask.shape()),
             ", but should be ", shape_str({L_q, L_k}));
      mask = additive(attn_mask);  // (L_q, L_k)
    } else if (attn_mask.dim() == 3) {
      if (attn_mask.size(0) != B * H || attn_mask.size(1) != L_q || attn_mask.size(2) != L_k)
        fail(fn, "the shape of the 3-D attn_mask is ", shape_str(attn_mask.shape()),
             ", but should be ", shape_str({B * H, L_q, L_k}), " (batch * num_heads, L_q, L_k)");
      mask = additive(attn_mask).reshape({B, H, L_q, L_k});
    } else {
      fail(fn, "attn_mask ", shape_str(attn_mask.shape()), " must be 2-D (L_q, L_k) or 3-D ",
           "(batch * num_heads, L_q, L_k)");
    }
  }
  if (key_padding_mask.defined()) {
    const Tensor& kpm = key_padding_mask;
    if (kpm.dtype() != Dtype::Bool && kpm.dtype() != Dtype::Float32)
      fail(fn, "key_padding_mask must be bool or float32, got ", dtype_name(kpm.dtype()));
    Shape expected = batched ? Shape{B, L_k} : Shape{L_k};
    if (kpm.shape() != expected)
      fail(fn, "key_padding_mask ", shape_str(kpm.shape()), " should be ", shape_str(expected),
           " for key ", shape_str(key.shape()));
    Tensor kp = additive(kpm).reshape({B, 1, 1, L_k});  // true = ignore this key
    mask = mask.defined() ? mask + kp : kp;
  }
  SdpaOptions o;
  if (is_causal) {
    // PyTorch 2.x treats is_causal as a hint that attn_mask is causal; attn applies the causal mask
    // itself, so is_causal alone works and is_causal with a causal attn_mask gives the same result.
    if (mask.defined())
      mask = mask + zeros({L_q, L_k}).masked_fill(~causal_mask(L_q, L_k), -inf);
    else
      o.is_causal = true;
  }
  if (mask.defined()) o.attn_mask = mask;

  // ---- projections ------------------------------------------------------------------------------
  Tensor w_q, w_k, w_v, b_q, b_k, b_v;
  if (same_embed_dim) {
    w_q = in_proj_weight.narrow(0, 0, E);
    w_k = in_proj_weight.narrow(0, E, E);
    w_v = in_proj_weight.narrow(0, 2 * E, E);
  } else {
    w_q = q_proj_weight, w_k = k_proj_weight, w_v = v_proj_weight;
  }
  if (in_proj_bias.defined()) {
    b_q = in_proj_bias.narrow(0, 0, E);
    b_k = in_proj_bias.narrow(0, E, E);
    b_v = in_proj_bias.narrow(0, 2 * E, E);
  }
  // (B, L, E) -> (B, H, L, head_dim)
  auto heads = [&](const Tensor& t, int64_t L) {
    return t.reshape({B, L, H, head_dim}).transpose(1, 2);
  };
  // Dropout on the attention weights only while training, as torch.
  const double p = training_ ? dropout : 0.0;
  const bool drop_all = p == 1.0;  // torch's dropout(p=1) zeroes every weight without drawing
  o.dropout_p = drop_all ? 0.0 : p;
  const bool self_attention =
      same_embed_dim && query.impl() == key.impl() && key.impl() == value.impl();
  Tensor q, k, v;
  if (self_attention && !need_weights && !drop_all && !q_in.is_cuda() &&
      !(mask.defined() && mask.requires_grad()) &&
      detail::should_record({&q_in, &in_proj_weight, &in_proj_bias})) {
    // Training self-attention: the attention of the packed projection as one graph node, whose
    // backward yields the projection's gradient in one piece.
    Tensor qkv = functional::linear(q_in, in_proj_weight, in_proj_bias);  // (B, L, 3 E)
    Tensor ctx = sdpa_detail::packed_self_attention(qkv, H, o);
    Tensor out = (*out_proj)(ctx.transpose(1, 2).reshape({B, L_q, E}));
    return {!batched      ? out.squeeze(0)
            : batch_first ? out
                          : out.transpose(0, 1).contiguous(),
            Tensor()};
  }
  if (self_attention) {
    // Self-attention: one (B L, E) x (E, 3E) product for q, k and v together, as PyTorch does.
    Tensor qkv = packed_qkv(q_in);
    q = qkv[0], k = qkv[1], v = qkv[2];
  } else {
    q = heads(functional::linear(q_in, w_q, b_q), L_q);
    k = heads(functional::linear(k_in, w_k, b_k), L_k);
    v = heads(functional::linear(v_in, w_v, b_v), L_k);
  }

  // ---- attention
  // ----------------------------------------------------------------------------------
  Tensor ctx, weights;  // (B, H, L_q, head_dim), (B, H, L_q, L_k)
  if (need_weights) {
    std::tie(ctx, weights) = scaled_dot_product_attention_with_weights(q, k, v, o);
  } else {
    ctx = scaled_dot_product_attention(q, k, v, o);
  }
  if (drop_all) {  // weights * 0, as torch's dropout(p=1)
    if (!weights.defined())
      weights = std::get<1>(scaled_dot_product_attention_with_weights(q, k, v, o));
    weights = weights * 0.0;
    ctx = matmul(weights, v);
  }
  Tensor out = (*out_proj)(ctx.transpose(1, 2).reshape({B, L_q, E}));  // (B, L_q, E)

  Output result;
  result.output = !batched ? out.squeeze(0) : batch_first ? out : out.transpose(0, 1).contiguous();
  if (need_weights) {
    if (average_attn_weights) weights = weights.sum({1}) / double(H);  // (B, L_q, L_k)
    result.weights = batched ? weights : weights.squeeze(0);
  }
  return result;
}

Tensor MultiheadAttention::packed_qkv(const Tensor& x) const {
  return functional::linear(x, in_proj_weight, in_proj_bias)
      .reshape({x.size(0), x.size(1), 3, num_heads, head_dim})
      .permute({2, 0, 3, 1, 4});  // (3, B, H, L, head_dim)
}

Tensor MultiheadAttention::forward_cached(const Tensor& x, Tensor& k_cache, Tensor& v_cache,
                                          int64_t start) const {
  const char* fn = "MultiheadAttention.forward_cached";
  if (!same_embed_dim) fail(fn, "needs a self-attention module (kdim = vdim = embed_dim)");
  if (!x.defined() || x.dim() != 3 || x.size(2) != embed_dim)
    fail(fn, "x must be (B, T, ", embed_dim, "), got ",
         x.defined() ? shape_str(x.shape()) : std::string("undefined"));
  const int64_t B = x.size(0), T = x.size(1), H = num_heads;
  for (const Tensor* c : {&k_cache, &v_cache})
    if (!c->defined() || c->dim() != 4 || c->size(0) != B || c->size(1) != H ||
        c->size(3) != head_dim || start < 0 || c->size(2) < start + T)
      fail(fn, "caches must be (", B, ", ", H, ", >= ", start + T, ", ", head_dim, ") for x ",
           shape_str(x.shape()), " at start ", start, ", got ",
           c->defined() ? shape_str(c->shape()) : std::string("undefined"));
  Tensor qkv = packed_qkv(x);
  k_cache.narrow(2, start, T).copy_(qkv[1]);
  v_cache.narrow(2, start, T).copy_(qkv[2]);
  SdpaOptions o;
  o.is_causal = true;
  o.causal_align = CausalAlign::BottomRight;  // the new queries are the last T of start + T
  Tensor ctx = scaled_dot_product_attention(qkv[0], k_cache.narrow(2, 0, start + T),
                                            v_cache.narrow(2, 0, start + T), o);
  return (*out_proj)(ctx.transpose(1, 2).reshape({B, T, embed_dim}));
}

Tensor MultiheadAttention::forward_with(const Tensor& x, const AttentionFn& attention) const {
  const char* fn = "MultiheadAttention.forward_with";
  if (!same_embed_dim) fail(fn, "needs a self-attention module (kdim = vdim = embed_dim)");
  if (!x.defined() || x.dim() != 3 || x.size(2) != embed_dim)
    fail(fn, "x must be (B, T, ", embed_dim, "), got ",
         x.defined() ? shape_str(x.shape()) : std::string("undefined"));
  if (!attention) fail(fn, "no attention function given");
  const int64_t B = x.size(0), T = x.size(1);
  Tensor qkv = packed_qkv(x);
  Tensor ctx = attention(qkv[0], qkv[1], qkv[2]);
  if (!ctx.defined() || ctx.shape() != Shape{B, num_heads, T, head_dim})
    fail(fn, "the attention function returned ",
         ctx.defined() ? shape_str(ctx.shape()) : std::string("undefined"), ", expected ",
         shape_str(Shape{B, num_heads, T, head_dim}));
  return (*out_proj)(ctx.transpose(1, 2).reshape({B, T, embed_dim}));
}

}  // namespace attn::nn

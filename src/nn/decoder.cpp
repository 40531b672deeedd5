// The decoder of today's model families (include/attn/decoder.h).
#include <attn/attention.h>
#include <attn/autograd.h>
#include <attn/decoder.h>
#include <attn/device.h>
#include <attn/ops.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <utility>

#include "../ops/attention_internal.h"
#include "../tensor/internal.h"
#include "fused.h"

namespace attn::nn {

using detail::fail;

void DecoderConfig::validate(const char* fn) const {
  for (auto [v, what] : {std::pair{vocab_size, "vocab_size"},
                         {hidden_size, "hidden_size"},
                         {intermediate_size, "intermediate_size"},
                         {num_hidden_layers, "num_hidden_layers"},
                         {num_attention_heads, "num_attention_heads"},
                         {num_key_value_heads, "num_key_value_heads"},
                         {max_position_embeddings, "max_position_embeddings"}})
    if (v < 1) fail(fn, what, " must be at least 1, got ", v);
  if (num_attention_heads % num_key_value_heads != 0)
    fail(fn, "num_attention_heads ", num_attention_heads,
         " must be a multiple of num_key_value_heads ", num_key_value_heads);
  if (head_dim < 0) fail(fn, "head_dim must be >= 0 (0: hidden_size / heads), got ", head_dim);
  if (head_dim == 0 && hidden_size % num_attention_heads != 0)
    fail(fn, "hidden_size ", hidden_size, " must be divisible by num_attention_heads ",
         num_attention_heads, " when head_dim is not given");
  if (head_size() % 2 != 0) fail(fn, "the head size must be even (RoPE), got ", head_size());
  if (!(rms_norm_eps > 0 && std::isfinite(rms_norm_eps)))
    fail(fn, "rms_norm_eps must be positive and finite, got ", rms_norm_eps);
  if (!(rope_theta > 0 && std::isfinite(rope_theta)))
    fail(fn, "rope_theta must be positive and finite, got ", rope_theta);
  if (!(rope_local_base_freq >= 0 && std::isfinite(rope_local_base_freq)))
    fail(fn, "rope_local_base_freq must be >= 0 and finite, got ", rope_local_base_freq);
  if (rope_type != "default" && rope_type != "llama3" && rope_type != "linear" &&
      rope_type != "yarn")
    fail(fn, "rope_type must be 'default', 'llama3', 'linear' or 'yarn', got '", rope_type, "'");
  if (rope_type == "yarn" &&
      !(rope_original_max_position_embeddings > 0 && rope_beta_fast > 0 && rope_beta_slow > 0 &&
        rope_attention_factor >= 0 && std::isfinite(rope_attention_factor)))
    fail(fn,
         "yarn rope scaling needs original_max_position_embeddings, beta_fast and beta_slow > 0 "
         "and attention_factor >= 0, got ",
         rope_original_max_position_embeddings, ", ", rope_beta_fast, ", ", rope_beta_slow, ", ",
         rope_attention_factor);
  if (!(rope_factor > 0 && std::isfinite(rope_factor)))
    fail(fn, "the rope scaling factor must be positive and finite, got ", rope_factor);
  if (rope_type == "llama3" &&
      !(rope_factor > 0 && rope_low_freq_factor > 0 &&
        rope_high_freq_factor > rope_low_freq_factor && rope_original_max_position_embeddings > 0))
    fail(fn,
         "llama3 rope scaling needs factor > 0, 0 < low_freq_factor < high_freq_factor and "
         "original_max_position_embeddings > 0, got factor ",
         rope_factor, ", low_freq_factor ", rope_low_freq_factor, ", high_freq_factor ",
         rope_high_freq_factor, ", original_max_position_embeddings ",
         rope_original_max_position_embeddings);
  if (hidden_act != "silu" && hidden_act != "gelu_tanh")
    fail(fn, "hidden_act must be 'silu' or 'gelu_tanh', got '", hidden_act, "'");
  for (auto [v, what] : {std::pair{query_pre_attn_scalar, "query_pre_attn_scalar"},
                         {attn_logit_softcapping, "attn_logit_softcapping"},
                         {final_logit_softcapping, "final_logit_softcapping"}})
    if (!(v >= 0 && std::isfinite(v))) fail(fn, what, " must be >= 0 and finite, got ", v);
  if (sliding_window < 0) fail(fn, "sliding_window must be >= 0 (0: none), got ", sliding_window);
  if (num_local_experts < 0) fail(fn, "num_local_experts must be >= 0, got ", num_local_experts);
  if (num_local_experts > 0 && (num_experts_per_tok < 1 || num_experts_per_tok > num_local_experts))
    fail(fn, "num_experts_per_tok must be in [1, num_local_experts = ", num_local_experts,
         "], got ", num_experts_per_tok);
  if (moe_type != "gpt_oss" && moe_type != "qwen3_moe")
    fail(fn, "moe_type must be 'gpt_oss' or 'qwen3_moe', got '", moe_type, "'");
  if (decoder_sparse_step < 1)
    fail(fn, "decoder_sparse_step must be >= 1, got ", decoder_sparse_step);
  for (int64_t l : mlp_only_layers)
    if (l < 0 || l >= num_hidden_layers)
      fail(fn, "mlp_only_layers must name layers in [0, ", num_hidden_layers, "), got ", l);
  if (shared_expert_intermediate_size < 0)
    fail(fn, "shared_expert_intermediate_size must be >= 0 (0: none), got ",
         shared_expert_intermediate_size);
  if (shared_expert_intermediate_size > 0 && num_local_experts > 0 && moe_type != "qwen3_moe")
    fail(fn, "a shared expert (shared_expert_intermediate_size ", shared_expert_intermediate_size,
         ") needs moe_type 'qwen3_moe', got '", moe_type, "'");
  if (mxfp4_experts && (num_local_experts < 1 || moe_type != "gpt_oss" || hidden_size % 32 != 0 ||
                        intermediate_size % 32 != 0))
    fail(fn,
         "mxfp4_experts needs gpt_oss experts (num_local_experts >= 1, moe_type 'gpt_oss') whose "
         "hidden_size and intermediate_size are multiples of 32, got ",
         num_local_experts, " experts of moe_type '", moe_type, "', hidden_size ", hidden_size,
         ", intermediate_size ", intermediate_size);
  if (moe_intermediate_size < 0)
    fail(fn, "moe_intermediate_size must be >= 0 (0: intermediate_size), got ",
         moe_intermediate_size);
  if (!(swiglu_limit > 0 && std::isfinite(swiglu_limit) && std::isfinite(swiglu_alpha)))
    fail(fn, "swiglu_limit must be positive and finite and swiglu_alpha finite, got ", swiglu_limit,
         " and ", swiglu_alpha);
  if (!sliding_layers.empty() && int64_t(sliding_layers.size()) != num_hidden_layers)
    fail(fn, "sliding_layers has ", sliding_layers.size(), " entries for ", num_hidden_layers,
         " layers");
}

bool DecoderConfig::is_sparse(int64_t layer) const {
  return num_local_experts > 0 && (layer + 1) % std::max<int64_t>(decoder_sparse_step, 1) == 0 &&
         std::find(mlp_only_layers.begin(), mlp_only_layers.end(), layer) == mlp_only_layers.end();
}

namespace {

// inv_freq of RoPE over `dim` (dim / 2 frequencies) in float32, computed as transformers does
// (base ** (2i / dim) in float32, then the scaling when `scaled`), so that the tables agree to
// float rounding.
std::vector<float> inverse_frequencies(const DecoderConfig& c, double base, int64_t dim,
                                       bool scaled) {
  std::vector<float> inv(std::size_t(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i)
    inv[std::size_t(i)] = 1.0f / std::pow(float(base), float(2 * i) / float(dim));
  if (scaled && c.rope_type == "linear")
    for (float& f : inv) f /= float(c.rope_factor);
  if (scaled && c.rope_type == "yarn") {
    // transformers' _compute_yarn_parameters: the dims whose wavelength completes more than
    // beta_fast turns over the original context keep their frequency, those under beta_slow turns
    // are divided by factor, a linear ramp (in float32) between.
    const double d = double(dim), b = base, L = double(c.rope_original_max_position_embeddings);
    auto correction_dim = [&](double turns) {
      return d * std::log(L / (turns * 2 * M_PI)) / (2 * std::log(b));
    };
    double low = correction_dim(c.rope_beta_fast), high = correction_dim(c.rope_beta_slow);
    if (c.rope_truncate) low = std::floor(low), high = std::ceil(high);
    low = std::max(low, 0.0), high = std::min(high, d - 1);
    if (low == high) high += 0.001;
    const float factor = float(c.rope_factor);
    for (int64_t i = 0; i < dim / 2; ++i) {
      const float pos = std::pow(float(base), float(2 * i) / float(dim));
      const float extrapolation = 1.0f / pos, interpolation = 1.0f / (factor * pos);
      float ramp = (float(i) - float(low)) / (float(high) - float(low));
      ramp = std::min(std::max(ramp, 0.0f), 1.0f);
      const float keep = 1.0f - ramp;
      inv[std::size_t(i)] = interpolation * (1.0f - keep) + extrapolation * keep;
    }
  }
  if (scaled && c.rope_type == "llama3") {
    const float factor = float(c.rope_factor), lo = float(c.rope_low_freq_factor),
                hi = float(c.rope_high_freq_factor);
    const float old_len = float(c.rope_original_max_position_embeddings);
    const float low_wavelen = old_len / lo, high_wavelen = old_len / hi;
    for (float& f : inv) {
      const float wavelen = (1.0f / f) * float(2 * M_PI);
      float scaled = wavelen > low_wavelen ? f / factor : f;
      if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
        const float smooth = (old_len / wavelen - lo) / (hi - lo);
        scaled = (1 - smooth) * scaled / factor + smooth * scaled;
      }
      f = scaled;
    }
  }
  return inv;
}

// The frequencies of the global layers, and of Gemma 3's sliding layers when the model has
// rope_local_base_freq > 0 (their own base, no scaling; the others use the global ones).
std::vector<float> global_frequencies(const DecoderConfig& c) {
  return inverse_frequencies(c, c.rope_theta, c.head_size(), true);
}
std::vector<float> local_frequencies(const DecoderConfig& c) {
  return inverse_frequencies(c, c.rope_local_base_freq, c.head_size(), false);
}

// The factor yarn scales cos and sin by (1 elsewhere): attention_factor, or 0.1 ln(factor) + 1.
double rope_attention_scaling(const DecoderConfig& c) {
  if (c.rope_type != "yarn") return 1.0;
  if (c.rope_attention_factor > 0) return c.rope_attention_factor;
  return c.rope_factor <= 1 ? 1.0 : 0.1 * std::log(c.rope_factor) + 1.0;
}

// cos and sin (T, dim) of positions start .. start + T - 1: [freqs, freqs] with
// freqs = position * inv_freq, as transformers' rotary embedding.
std::pair<Tensor, Tensor> rope_tables(const std::vector<float>& inv, int64_t start, int64_t T) {
  const int64_t half = int64_t(inv.size()), dim = 2 * half;
  Tensor cos = detail::make_tensor({T, dim}, Dtype::Float32, false);
  Tensor sin = detail::make_tensor({T, dim}, Dtype::Float32, false);
  float* pc = cos.data_ptr<float>();
  float* ps = sin.data_ptr<float>();
  for (int64_t t = 0; t < T; ++t)
    for (int64_t i = 0; i < half; ++i) {
      const float angle = float(start + t) * inv[std::size_t(i)];
      const float c = float(std::cos(double(angle))), s = float(std::sin(double(angle)));
      pc[t * dim + i] = pc[t * dim + half + i] = c;
      ps[t * dim + i] = ps[t * dim + half + i] = s;
    }
  return {cos, sin};
}

// x * cos + rotate_half(x) * sin, rotate_half(x) = [-x2, x1] (the halves of the last dim).
Tensor apply_rope(const Tensor& x, const Tensor& cos, const Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  const Tensor rotated = cat({neg(x.narrow(-1, half, half)), x.narrow(-1, 0, half)}, -1);
  return x * cos + rotated * sin;
}

Tensor int64_tensor(const std::vector<int64_t>& v) {
  Tensor t = empty({int64_t(v.size())}, Dtype::Int64);
  std::copy(v.begin(), v.end(), t.data_ptr<int64_t>());
  return t;
}

void init_linear(Linear& l, Generator* gen) {
  init::normal_(l.weight, 0.0, 0.02, gen);
  if (l.bias.defined()) init::zeros_(l.bias);
}

}  // namespace

DecoderRMSNorm::DecoderRMSNorm(int64_t dim, double eps_, bool plus_one_, bool in_float32_)
    : eps(eps_), plus_one(plus_one_), in_float32(in_float32_) {
  weight = register_parameter("weight", plus_one ? zeros({dim}) : ones({dim}));
}

Tensor DecoderRMSNorm::forward(const Tensor& x) const {
  const Shape shape{weight.size(0)};
  // Llama's: normalized in float32, rounded to x's dtype, times the weight (rms_norm does that).
  if (!plus_one && (!in_float32 || x.dtype() == Dtype::Float32))
    return functional::rms_norm(x, shape, weight, eps);
  // Gemma's and gpt-oss's: everything in float32, one rounding to x's dtype at the end.
  const Tensor w = weight.to(Dtype::Float32);
  const Tensor y =
      functional::rms_norm(x.to(Dtype::Float32), shape, Tensor(), eps) * (plus_one ? w + 1.0 : w);
  return y.to(x.dtype());
}

DecoderAttention::DecoderAttention(const DecoderConfig& c, int64_t layer)
    : num_heads(c.num_attention_heads),
      num_kv_heads(c.num_key_value_heads),
      head_size(c.head_size()),
      window(c.is_sliding(layer) ? c.sliding_window : 0),
      scale(1.0 / std::sqrt(c.query_pre_attn_scalar > 0 ? c.query_pre_attn_scalar
                                                        : double(c.head_size()))),
      softcap(c.attn_logit_softcapping) {
  q_proj = register_module(
      "q_proj", std::make_shared<Linear>(c.hidden_size, num_heads * head_size, c.qkv_bias));
  k_proj = register_module(
      "k_proj", std::make_shared<Linear>(c.hidden_size, num_kv_heads * head_size, c.qkv_bias));
  v_proj = register_module(
      "v_proj", std::make_shared<Linear>(c.hidden_size, num_kv_heads * head_size, c.qkv_bias));
  o_proj = register_module(
      "o_proj", std::make_shared<Linear>(num_heads * head_size, c.hidden_size, c.o_bias));
  if (c.qk_norm) {
    q_norm = register_module(
        "q_norm", std::make_shared<DecoderRMSNorm>(head_size, c.rms_norm_eps, c.norm_plus_one));
    k_norm = register_module(
        "k_norm", std::make_shared<DecoderRMSNorm>(head_size, c.rms_norm_eps, c.norm_plus_one));
  }
  if (c.attention_sinks) sinks = register_parameter("sinks", zeros({num_heads}));
}

namespace {

// Queries per row up to which a step reads a bfloat16 or float16 cache in place (paged_attention's
// kernel, made for a few queries); a longer chunk goes to the fused kernel, whose tiles suit it
// better.
constexpr int64_t kCachedQueries = 16;

// Attention of q (B, T, H, D) float32, the last T of len positions, against the first len rows of
// the caches (B, H_kv, capacity, D): each row of the batch one page of `capacity` rows, so that
// paged_attention's kernel reads each head's keys as one contiguous run. (B, T, H, D) float32.
Tensor cached_attention(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, int64_t len,
                        const SdpaOptions& o) {
  const int64_t B = k_cache.size(0), H_kv = k_cache.size(1), cap = k_cache.size(2);
  const int64_t D = k_cache.size(3);
  PagedKVView kv;
  kv.dtype = sdpa_detail::kv_cache_dtype(k_cache.dtype());
  kv.keys = k_cache.raw_data(), kv.values = v_cache.raw_data();
  kv.num_pages = B, kv.page_size = cap, kv.num_kv_heads = H_kv, kv.head_dim = D;
  kv.head_dim_v = v_cache.size(3);
  kv.key_page_stride = H_kv * cap * D, kv.key_head_stride = cap * D, kv.key_row_stride = D;
  kv.value_page_stride = H_kv * cap * kv.head_dim_v, kv.value_head_stride = cap * kv.head_dim_v;
  kv.value_row_stride = kv.head_dim_v;
  return paged_attention(q, kv, arange(0, B).view({B, 1}), full({B}, len, Dtype::Int64), o);
}

}  // namespace

Tensor DecoderAttention::forward(const Tensor& x, const Tensor& cos, const Tensor& sin,
                                 Tensor* k_cache, Tensor* v_cache, int64_t start) const {
  const int64_t B = x.size(0), T = x.size(1);
  Tensor q = (*q_proj)(x).view({B, T, num_heads, head_size});
  Tensor k = (*k_proj)(x).view({B, T, num_kv_heads, head_size});
  Tensor v = (*v_proj)(x).view({B, T, num_kv_heads, head_size}).transpose(1, 2);
  if (q_norm) {
    q = (*q_norm)(q);
    k = (*k_norm)(k);
  }
  q = apply_rope(q.transpose(1, 2), cos, sin);
  k = apply_rope(k.transpose(1, 2), cos, sin);
  SdpaOptions o;
  o.is_causal = true;
  o.causal_align = CausalAlign::BottomRight;  // the queries are the last T of start + T
  o.enable_gqa = num_heads != num_kv_heads;
  o.scale = scale;
  o.softcap = softcap;
  if (window > 0) o.window_left = window - 1;
  if (sinks.defined()) o.sinks = sinks.to(Dtype::Float32);
  if (k_cache) {  // Decoder::run's cache, in the model's dtype
    k_cache->narrow(2, start, T).copy_(k);
    v_cache->narrow(2, start, T).copy_(v);
    if (start > 0 && T <= kCachedQueries && k_cache->dtype() != Dtype::Float32) {
      // A decoding step over 2-byte rows: read where they lie, q (B, T, H, D) in float32.
      // (A float32 cache goes to the fused kernel below: faster on float32 rows.)
      const Tensor ctx =
          cached_attention(q.transpose(1, 2).to(Dtype::Float32), *k_cache, *v_cache, start + T, o);
      return (*o_proj)(ctx.to(x.dtype()).reshape({B, T, num_heads * head_size}));
    }
    if (start > 0) {  // the fused kernel over the cached prefix
      k = k_cache->narrow(2, 0, start + T);
      v = v_cache->narrow(2, 0, start + T);
      q = q.to(k.dtype());
    }
  }
  // In x's dtype: attention over 2-byte operands rounds its float32 result once, as here.
  const Tensor ctx = scaled_dot_product_attention(q, k, v, o).to(x.dtype());
  return (*o_proj)(ctx.transpose(1, 2).reshape({B, T, num_heads * head_size}));
}

DecoderMLP::DecoderMLP(const DecoderConfig& c) : act(c.hidden_act) {
  gate_proj = register_module(
      "gate_proj", std::make_shared<Linear>(c.hidden_size, c.intermediate_size, c.mlp_bias));
  up_proj = register_module(
      "up_proj", std::make_shared<Linear>(c.hidden_size, c.intermediate_size, c.mlp_bias));
  down_proj = register_module(
      "down_proj", std::make_shared<Linear>(c.intermediate_size, c.hidden_size, c.mlp_bias));
}

Tensor DecoderMLP::forward(const Tensor& x) const {
  const Tensor g = (*gate_proj)(x);
  const Tensor a = act == "silu" ? functional::silu(g) : functional::gelu(g, "tanh");
  return (*down_proj)(a * (*up_proj)(x));
}

DecoderExperts::DecoderExperts(const DecoderConfig& c) {
  const int64_t E = c.num_local_experts, H = c.hidden_size, I = c.intermediate_size;
  if (c.mxfp4_experts) {
    gate_up_mxfp4 = Mxfp4Matrices::zeros(E, 2 * I, H);
    down_mxfp4 = Mxfp4Matrices::zeros(E, H, I);
  } else {
    gate_up_proj = register_parameter("gate_up_proj", zeros({E, H, 2 * I}));
  }
  gate_up_proj_bias = register_parameter("gate_up_proj_bias", zeros({E, 2 * I}));
  if (!c.mxfp4_experts) down_proj = register_parameter("down_proj", zeros({E, I, H}));
  down_proj_bias = register_parameter("down_proj_bias", zeros({E, H}));
}

Tensor DecoderExperts::gate_up(const Tensor& x, int64_t e) const {
  return (gate_up_mxfp4.defined() ? mxfp4_linear(x, gate_up_mxfp4, e, mxfp4_int8_activations)
                                  : matmul(x, gate_up_proj.select(0, e))) +
         gate_up_proj_bias.select(0, e);
}

Tensor DecoderExperts::down(const Tensor& a, int64_t e) const {
  return (down_mxfp4.defined() ? mxfp4_linear(a, down_mxfp4, e, mxfp4_int8_activations)
                               : matmul(a, down_proj.select(0, e))) +
         down_proj_bias.select(0, e);
}

DecoderMoE::DecoderMoE(const DecoderConfig& c)
    : top_k(c.num_experts_per_tok), alpha(c.swiglu_alpha), limit(c.swiglu_limit) {
  router =
      register_module("router", std::make_shared<Linear>(c.hidden_size, c.num_local_experts, true));
  experts = register_module("experts", std::make_shared<DecoderExperts>(c));
}

namespace fused {

namespace {

// The ops of gpt_oss_glu in T's rounding (float: none), on rows [0, N) of gp (N, 2I) into out.
// The sigmoid is the op's own kernel (vectorised), on the rounded gate * alpha of every element.
template <typename T>
void gpt_oss_glu_rows(int64_t N, int64_t I, const T* gp, T* out, double alpha, double limit) {
  const auto r = [](float v) { return float(T(v)); };  // rounded to T, as each op's result is
  const float a = r(float(alpha)), lim = r(float(limit)), one = r(1.0f);
  // clamp as the op: NaN kept (std::min / max return their first argument when unordered)
  const auto gate = [&](int64_t n, int64_t i) {
    return std::min(float(gp[n * 2 * I + 2 * i]), lim);
  };
  Tensor z = empty({N, I});
  float* pz = z.data_ptr<float>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t i = 0; i < I; ++i) pz[n * I + i] = r(gate(n, i) * a);
  const Tensor sig = sigmoid(z);
  const float* ps = sig.data_ptr<float>();
  for (int64_t n = 0; n < N; ++n) {
    const T* p = gp + n * 2 * I;
    T* o = out + n * I;
    for (int64_t i = 0; i < I; ++i) {
      const float g = gate(n, i), up = float(p[2 * i + 1]);
      const float u = std::min(std::max(up, -lim), lim);
      o[i] = T(r(u + one) * r(g * r(ps[n * I + i])));
    }
  }
}

struct Identity {  // float32: no rounding
  float v;
  explicit Identity(float x) : v(x) {}
  explicit operator float() const { return v; }
};

}  // namespace

Tensor gpt_oss_glu(const Tensor& gate_up, double alpha, double limit) {
  const char* fn = "gpt_oss_glu";
  if (!gate_up.defined() || !gate_up.is_cpu() || !is_floating_point(gate_up.dtype()) ||
      gate_up.dim() != 2 || gate_up.size(1) % 2 != 0)
    fail(fn, "gate_up must be a CPU float tensor (N, 2I), got ",
         gate_up.defined() ? shape_str(gate_up.shape()) + " " + dtype_name(gate_up.dtype())
                           : std::string("an undefined tensor"));
  const Tensor gp = gate_up.contiguous();
  const int64_t N = gp.size(0), I = gp.size(1) / 2;
  Tensor out = empty({N, I}, gp.dtype());
  switch (gp.dtype()) {
    case Dtype::BFloat16:
      gpt_oss_glu_rows(N, I, static_cast<const BFloat16*>(gp.raw_data()),
                       static_cast<BFloat16*>(out.raw_data()), alpha, limit);
      break;
    case Dtype::Float16:
      gpt_oss_glu_rows(N, I, static_cast<const Half*>(gp.raw_data()),
                       static_cast<Half*>(out.raw_data()), alpha, limit);
      break;
    default:
      gpt_oss_glu_rows(N, I, static_cast<const Identity*>(gp.raw_data()),
                       static_cast<Identity*>(out.raw_data()), alpha, limit);
  }
  return out;
}

}  // namespace fused

namespace {

// The mixture's sum: each token's chosen experts (chosen (N, k) int64, distinct per token), their
// outputs expert(e, the rows of flat (N, H) that chose e) times weights (N, k), summed in float32
// in expert order and rounded once to flat's dtype. (N, H).
Tensor mix_experts(const Tensor& flat, const Tensor& chosen, const Tensor& weights, int64_t E,
                   const std::function<Tensor(int64_t, const Tensor&)>& expert) {
  const int64_t N = flat.size(0), H = flat.size(1), top_k = chosen.size(1);
  const Tensor ids = chosen.contiguous();
  const int64_t* pi = ids.data_ptr<int64_t>();
  // The tokens of each expert and the slot of their weight, in token order.
  std::vector<std::vector<int64_t>> rows(static_cast<std::size_t>(E)), slots(rows.size());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t j = 0; j < top_k; ++j) {
      const int64_t e = pi[n * top_k + j];
      rows[std::size_t(e)].push_back(n);
      slots[std::size_t(e)].push_back(n * top_k + j);
    }
  const Tensor flat_weights = weights.reshape({N * top_k, 1});
  Tensor out = zeros({N, H});  // float32
  for (int64_t e = 0; e < E; ++e) {
    const auto& r = rows[std::size_t(e)];
    if (r.empty()) continue;
    const int64_t n = int64_t(r.size());
    const Tensor idx = int64_tensor(r);
    const Tensor y = expert(e, index_select(flat, 0, idx));
    const Tensor w = index_select(flat_weights, 0, int64_tensor(slots[std::size_t(e)]));
    out = scatter_add(out, 0, idx.view({n, 1}).expand({n, H}).contiguous(),
                      (y * w).to(Dtype::Float32));
  }
  return out.to(flat.dtype());
}

}  // namespace

Tensor DecoderMoE::forward(const Tensor& x) const {
  const int64_t H = x.size(-1), E = router->weight.size(0),
                I = experts->gate_up_proj_bias.size(1) / 2;
  const Tensor flat = x.reshape({-1, H});
  auto [top, chosen] = topk((*router)(flat), top_k, -1);  // (N, k) each
  const Tensor weights = softmax(top, -1);                // in the model's dtype, as transformers
  return mix_experts(flat, chosen, weights, E,
                     [&](int64_t e, const Tensor& xe) {
                       const Tensor gu = experts->gate_up(xe, e);
                       if (!(is_grad_enabled() && gu.requires_grad()))  // the ops in one pass
                         return experts->down(fused::gpt_oss_glu(gu, alpha, limit), e);
                       // columns 2i (gate) and 2i + 1 (up)
                       const Tensor pairs = gu.view({xe.size(0), I, 2});
                       const Tensor gate = clamp(pairs.select(-1, 0), std::nullopt, Scalar(limit));
                       const Tensor up = clamp(pairs.select(-1, 1), Scalar(-limit), Scalar(limit));
                       const Tensor act = (up + 1.0) * (gate * sigmoid(gate * alpha));
                       return experts->down(act, e);
                     })
      .view(x.shape());
}

DecoderSparseMoE::DecoderSparseMoE(const DecoderConfig& c)
    : top_k(c.num_experts_per_tok), norm_topk_prob(c.norm_topk_prob) {
  gate =
      register_module("gate", std::make_shared<Linear>(c.hidden_size, c.num_local_experts, false));
  DecoderConfig expert = c;
  if (c.moe_intermediate_size > 0) expert.intermediate_size = c.moe_intermediate_size;
  expert.mlp_bias = false;
  experts_list = register_module("experts", std::make_shared<ModuleList>());
  for (int64_t e = 0; e < c.num_local_experts; ++e)
    experts.push_back(experts_list->append(std::make_shared<DecoderMLP>(expert)));
  if (c.shared_expert_intermediate_size > 0) {
    expert.intermediate_size = c.shared_expert_intermediate_size;
    shared_expert = register_module("shared_expert", std::make_shared<DecoderMLP>(expert));
    shared_expert_gate =
        register_module("shared_expert_gate", std::make_shared<Linear>(c.hidden_size, 1, false));
  }
}

Tensor DecoderSparseMoE::forward(const Tensor& x) const {
  const int64_t H = x.size(-1);
  const Tensor flat = x.reshape({-1, H});
  const Tensor probs = softmax((*gate)(flat).to(Dtype::Float32), -1);
  auto [top, chosen] = topk(probs, top_k, -1);  // (N, k) each
  if (norm_topk_prob) top = top / sum(top, -1, true);
  Tensor out = mix_experts(
      flat, chosen, top.to(x.dtype()), int64_t(experts.size()),
      [&](int64_t e, const Tensor& xe) { return experts[std::size_t(e)]->forward(xe); });
  if (shared_expert)
    out = out + sigmoid((*shared_expert_gate)(flat)) * shared_expert->forward(flat);
  return out.view(x.shape());
}

DecoderLayer::DecoderLayer(const DecoderConfig& c, int64_t layer) : sliding(c.is_sliding(layer)) {
  self_attn = register_module("self_attn", std::make_shared<DecoderAttention>(c, layer));
  if (c.is_sparse(layer) && c.moe_type == "qwen3_moe")
    sparse_moe = register_module("mlp", std::make_shared<DecoderSparseMoE>(c));
  else if (c.is_sparse(layer))
    moe = register_module("mlp", std::make_shared<DecoderMoE>(c));
  else
    mlp = register_module("mlp", std::make_shared<DecoderMLP>(c));
  auto norm = [&] {
    return std::make_shared<DecoderRMSNorm>(c.hidden_size, c.rms_norm_eps, c.norm_plus_one,
                                            c.norm_in_float32);
  };
  input_layernorm = register_module("input_layernorm", norm());
  post_attention_layernorm = register_module("post_attention_layernorm", norm());
  if (c.sandwich_norms) {
    pre_feedforward_layernorm = register_module("pre_feedforward_layernorm", norm());
    post_feedforward_layernorm = register_module("post_feedforward_layernorm", norm());
  }
}

Tensor DecoderLayer::forward(const Tensor& x, const Tensor& cos, const Tensor& sin, Tensor* k_cache,
                             Tensor* v_cache, int64_t start) const {
  Tensor a = self_attn->forward((*input_layernorm)(x), cos, sin, k_cache, v_cache, start);
  if (pre_feedforward_layernorm) {  // Gemma: norms on both sides of each branch
    const Tensor h = x + (*post_attention_layernorm)(a);
    return h + (*post_feedforward_layernorm)(feed_forward((*pre_feedforward_layernorm)(h)));
  }
  const Tensor h = x + a;
  return h + feed_forward((*post_attention_layernorm)(h));
}

DecoderModel::DecoderModel(const DecoderConfig& c) {
  embed_tokens =
      register_module("embed_tokens", std::make_shared<Embedding>(c.vocab_size, c.hidden_size));
  layers_list = register_module("layers", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < c.num_hidden_layers; ++i)
    layers.push_back(layers_list->append(std::make_shared<DecoderLayer>(c, i)));
  norm =
      register_module("norm", std::make_shared<DecoderRMSNorm>(c.hidden_size, c.rms_norm_eps,
                                                               c.norm_plus_one, c.norm_in_float32));
}

Decoder::Decoder(const DecoderConfig& config, Generator* gen) : config_(config) {
  config_.validate("Decoder");
  model = register_module("model", std::make_shared<DecoderModel>(config_));
  if (!config_.tie_word_embeddings)
    lm_head = register_module(
        "lm_head", std::make_shared<Linear>(config_.hidden_size, config_.vocab_size, false));
  // transformers' _init_weights: every Linear and Embedding N(0, 0.02), biases zero.
  init::normal_(model->embed_tokens->weight, 0.0, 0.02, gen);
  for (const auto& l : model->layers) {
    for (auto* p : {&l->self_attn->q_proj, &l->self_attn->k_proj, &l->self_attn->v_proj,
                    &l->self_attn->o_proj})
      init_linear(**p, gen);
    if (l->mlp) {
      for (auto* p : {&l->mlp->gate_proj, &l->mlp->up_proj, &l->mlp->down_proj})
        init_linear(**p, gen);
    } else if (l->sparse_moe) {  // Qwen3-MoE's: the router and every expert N(0, 0.02)
      init_linear(*l->sparse_moe->gate, gen);
      auto experts = l->sparse_moe->experts;
      if (l->sparse_moe->shared_expert) {
        experts.push_back(l->sparse_moe->shared_expert);
        init_linear(*l->sparse_moe->shared_expert_gate, gen);
      }
      for (const auto& m : experts)
        for (auto* p : {&m->gate_proj, &m->up_proj, &m->down_proj}) init_linear(**p, gen);
    } else {  // gpt-oss's _init_weights: router weight and bias, expert matrices N(0, 0.02)
      init::normal_(l->moe->router->weight, 0.0, 0.02, gen);
      init::normal_(l->moe->router->bias, 0.0, 0.02, gen);
      if (!config_.mxfp4_experts) {  // MXFP4 experts stay zero until loaded
        init::normal_(l->moe->experts->gate_up_proj, 0.0, 0.02, gen);
        init::normal_(l->moe->experts->down_proj, 0.0, 0.02, gen);
      }
    }
    if (l->self_attn->sinks.defined()) init::normal_(l->self_attn->sinks, 0.0, 0.02, gen);
  }
  if (lm_head) init_linear(*lm_head, gen);
  eval();
}

int64_t Decoder::num_parameters() const {
  int64_t n = 0;
  for (const Tensor& p : parameters()) n += p.numel();
  return n;
}

Tensor Decoder::run(const Tensor& ids, DecoderCache* cache, int64_t keep) const {
  const char* fn = cache ? "Decoder.forward_cached" : "Decoder.forward";
  const DecoderConfig& c = config_;
  if (!ids.defined() || ids.dtype() != Dtype::Int64 || ids.dim() != 2 || ids.size(1) < 1)
    fail(fn, "ids must be int64 (batch, time) with at least one token, got ",
         ids.defined() ? detail::tensor_desc(ids) : std::string("undefined"));
  const int64_t B = ids.size(0), T = ids.size(1);
  const int64_t start = cache ? cache->length : 0;
  if (start + T > c.max_position_embeddings)
    fail(fn, start + T, " positions exceed max_position_embeddings ", c.max_position_embeddings);
  if (cache && cache->length > 0 && cache->k[0].size(0) != B)
    fail(fn, "the cache holds ", cache->k[0].size(0), " rows, ids has ", B);
  {
    const Tensor ic = ids.contiguous();
    const int64_t* p = ic.data_ptr<int64_t>();
    for (int64_t i = 0; i < ic.numel(); ++i)
      if (p[i] < 0 || p[i] >= c.vocab_size)
        throw IndexError(detail::msg(fn, "token id ", p[i], " at flat index ", i,
                                     " is outside the vocabulary [0, ", c.vocab_size, ")"));
  }
  const int64_t D = c.head_size();
  // The dtype the model computes in: its parameters' (float32, or bfloat16 / float16 after
  // Module::to). The cache holds the keys and values in it, the same bits.
  const Dtype dt = model->embed_tokens->weight.dtype();
  if (cache) {  // room for start + T rows in every layer (doubling)
    const int64_t need = start + T;
    if (cache->k.empty() || cache->k[0].size(2) < need || cache->k[0].dtype() != dt) {
      const int64_t cap = std::max({need, cache->k.empty() ? 0 : 2 * cache->k[0].size(2),
                                    cache->k.empty() ? cache->reserve : 0});
      for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
        // Only rows [0, length) are ever read: no clearing (its pages stay unmapped until used).
        Tensor k = empty({B, c.num_key_value_heads, cap, D}, dt);
        Tensor v = empty({B, c.num_key_value_heads, cap, D}, dt);
        if (!cache->k.empty() && start > 0) {
          k.narrow(2, 0, start).copy_(cache->k[std::size_t(l)].narrow(2, 0, start));
          v.narrow(2, 0, start).copy_(cache->v[std::size_t(l)].narrow(2, 0, start));
        }
        if (cache->k.size() <= std::size_t(l)) {
          cache->k.push_back(k);
          cache->v.push_back(v);
        } else {
          cache->k[std::size_t(l)] = k;
          cache->v[std::size_t(l)] = v;
        }
      }
    }
  }
  // The tables in float32, then in the model's dtype (transformers' cos.to(x.dtype)).
  const double rope_scale = rope_attention_scaling(c);  // yarn's; 1 otherwise
  auto tables = [dt, start, T, rope_scale](const std::vector<float>& inv) {
    auto [cos, sin] = rope_tables(inv, start, T);
    if (rope_scale != 1.0) cos = cos * rope_scale, sin = sin * rope_scale;
    return std::pair<Tensor, Tensor>{cos.to(dt), sin.to(dt)};
  };
  const auto global = tables(global_frequencies(c));
  std::pair<Tensor, Tensor> local = global;
  if (c.rope_local_base_freq > 0) local = tables(local_frequencies(c));

  Tensor x = (*model->embed_tokens)(ids);
  if (c.scale_embeddings)  // sqrt(hidden) as a tensor of the model's dtype, as Gemma's code has it
    x = x * tensor({std::sqrt(double(c.hidden_size))}, dt).item<double>();
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) {
    const auto& layer = model->layers[std::size_t(l)];
    const auto& [cos, sin] = layer->sliding ? local : global;
    Tensor* kc = cache ? &cache->k[std::size_t(l)] : nullptr;
    Tensor* vc = cache ? &cache->v[std::size_t(l)] : nullptr;
    x = layer->forward(x, cos, sin, kc, vc, start);
  }
  if (keep > 0 && keep < T) x = x.narrow(1, T - keep, keep);
  x = (*model->norm)(x);
  Tensor logits = lm_head ? (*lm_head)(x) : functional::linear(x, model->embed_tokens->weight);
  if (c.final_logit_softcapping > 0)
    logits = tanh(logits / c.final_logit_softcapping) * c.final_logit_softcapping;
  if (cache) cache->length = start + T;
  return logits.to(Dtype::Float32);  // transformers' logits.float()
}

Tensor Decoder::forward(const Tensor& ids, int64_t logits_to_keep) const {
  if (logits_to_keep < 0)
    fail("Decoder.forward", "logits_to_keep must be >= 0, got ", logits_to_keep);
  return run(ids, nullptr, logits_to_keep);
}

Tensor Decoder::forward_cached(const Tensor& ids, DecoderCache& cache) const {
  NoGradGuard no_grad;
  return run(ids, &cache);
}

void Decoder::set_mxfp4_int8_activations(bool on) {
  if (!config_.mxfp4_experts)
    fail("Decoder::set_mxfp4_int8_activations", "the model keeps no experts in MXFP4 (model_type ",
         config_.model_type, ")");
  for (const auto& l : model->layers)
    if (l->moe) l->moe->experts->mxfp4_int8_activations = on;
}

void Decoder::evict(DecoderCache& cache, int64_t keep_first, int64_t count) const {
  const char* fn = "Decoder.evict";
  if (keep_first < 0 || count < 0 || keep_first + count > cache.length)
    fail(fn, "keep_first ", keep_first, " and count ", count,
         " must be >= 0 and together at most the cache's length ", cache.length);
  if (count == 0) return;
  NoGradGuard no_grad;
  const int64_t moved = cache.length - keep_first - count;
  if (moved > 0) {
    // A rotation by -count positions: rotate_half's form with cos and sin of -count * inv_freq
    // (yarn's attention factor is already in the keys and stays).
    const auto back = [count](const std::vector<float>& inv) {
      return rope_tables(inv, -count, 1);
    };
    const auto global = back(global_frequencies(config_));
    const auto local = config_.rope_local_base_freq > 0 ? back(local_frequencies(config_)) : global;
    for (std::size_t l = 0; l < cache.k.size(); ++l) {
      const auto& [cos, sin] = model->layers[l]->sliding ? local : global;
      Tensor& k = cache.k[l];
      Tensor& v = cache.v[l];
      const Tensor rotated =
          apply_rope(k.narrow(2, keep_first + count, moved).to(Dtype::Float32), cos, sin);
      k.narrow(2, keep_first, moved).copy_(rotated.to(k.dtype()));
      v.narrow(2, keep_first, moved).copy_(v.narrow(2, keep_first + count, moved).clone());
    }
  }
  cache.length -= count;
}

int64_t Decoder::make_room(DecoderCache& cache, int64_t incoming, int64_t window,
                           int64_t sink_tokens) const {
  const int64_t over = cache.length + incoming - window;
  if (over <= 0) return 0;
  const int64_t count = std::max(over, (cache.length - sink_tokens) / 2);
  evict(cache, sink_tokens, count);
  return count;
}

void Decoder::GenerateOptions::validate(const char* fn) const {
  if (max_new_tokens < 0) fail(fn, "max_new_tokens must be >= 0, got ", max_new_tokens);
  if (window_length < 0)
    fail(fn, "window_length must be >= 0 (0: no eviction), got ", window_length);
  if (window_length > 0 && (sink_tokens < 0 || sink_tokens + 2 > window_length))
    fail(fn, "sink_tokens ", sink_tokens,
         " must be >= 0 and leave room for 2 tokens in window_length ", window_length);
  if (!(temperature >= 0 && std::isfinite(temperature)))
    fail(fn, "temperature must be >= 0 and finite (0: greedy), got ", temperature);
  if (top_k < 0) fail(fn, "top_k must be >= 0, got ", top_k);
  if (!(top_p > 0 && top_p <= 1)) fail(fn, "top_p must be in (0, 1], got ", top_p);
  if (!(min_p >= 0 && min_p <= 1)) fail(fn, "min_p must be in [0, 1], got ", min_p);
  if (!(repetition_penalty > 0 && std::isfinite(repetition_penalty)))
    fail(fn, "repetition_penalty must be positive and finite, got ", repetition_penalty);
}

std::vector<double> next_token_probabilities(const float* logits, int64_t V,
                                             const Decoder::GenerateOptions& o,
                                             const std::vector<int64_t>& history) {
  std::vector<double> s(logits, logits + V);
  if (o.repetition_penalty != 1.0) {
    std::vector<bool> seen(static_cast<std::size_t>(V), false);
    for (int64_t t : history) {  // each distinct token once
      if (t < 0 || t >= V || seen[std::size_t(t)]) continue;
      seen[std::size_t(t)] = true;
      double& x = s[std::size_t(t)];
      x = x < 0 ? x * o.repetition_penalty : x / o.repetition_penalty;
    }
  }
  int64_t best = -1;
  for (int64_t v = 0; v < V; ++v)
    if (!std::isnan(s[std::size_t(v)]) && (best < 0 || s[std::size_t(v)] > s[std::size_t(best)]))
      best = v;
  if (best < 0 || !std::isfinite(s[std::size_t(best)]))
    fail("sample_next_token", "no finite logit to choose from (the model produced NaN or inf)");
  std::vector<double> p(s.size(), 0.0);
  if (o.temperature == 0) {
    p[std::size_t(best)] = 1.0;
    return p;
  }
  for (double& x : s) x = std::isnan(x) ? -INFINITY : x / o.temperature;
  if (o.top_k > 0 && o.top_k < V) {  // the k largest and their ties
    std::vector<double> sorted = s;
    std::nth_element(sorted.begin(), sorted.begin() + (o.top_k - 1), sorted.end(),
                     std::greater<double>());
    const double kth = sorted[std::size_t(o.top_k - 1)];
    for (double& x : s)
      if (x < kth) x = -INFINITY;
  }
  const double mx = s[std::size_t(best)];
  double z = 0;
  for (std::size_t v = 0; v < s.size(); ++v) z += (p[v] = std::exp(s[v] - mx));
  for (double& x : p) x /= z;
  if (o.top_p < 1.0) {  // the most likely tokens until their mass reaches top_p
    std::vector<int64_t> order(static_cast<std::size_t>(V));
    for (int64_t v = 0; v < V; ++v) order[std::size_t(v)] = v;
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t b) { return p[std::size_t(a)] > p[std::size_t(b)]; });
    double mass = 0;
    std::size_t keep = 0;
    while (keep < order.size() && (keep == 0 || mass < o.top_p))
      mass += p[std::size_t(order[keep++])];
    for (std::size_t k = keep; k < order.size(); ++k) p[std::size_t(order[k])] = 0;
  }
  if (o.min_p > 0) {
    const double floor = o.min_p * p[std::size_t(best)];
    for (double& x : p)
      if (x < floor) x = 0;
  }
  double total = 0;
  for (double x : p) total += x;
  for (double& x : p) x /= total;
  return p;
}

int64_t sample_next_token(const float* logits, int64_t V, const Decoder::GenerateOptions& o,
                          const std::vector<int64_t>& history, Generator& gen) {
  const std::vector<double> p = next_token_probabilities(logits, V, o, history);
  if (o.temperature == 0) return int64_t(std::max_element(p.begin(), p.end()) - p.begin());
  const double u = double(gen.random64() >> 11) * 0x1.0p-53;
  double acc = 0;
  int64_t last = 0;
  for (int64_t v = 0; v < V; ++v) {
    if (p[std::size_t(v)] <= 0) continue;
    acc += p[std::size_t(v)];
    last = v;
    if (u < acc) return v;
  }
  return last;
}

namespace {
// Prompts of this many tokens and more give their pass's cached blocks back (generate).
constexpr int64_t kLongPrompt = 1024;
}  // namespace

Tensor Decoder::generate(const Tensor& ids, const GenerateOptions& opt, Generator* gen,
                         const std::function<void(const Tensor&)>& on_token) const {
  const char* fn = "Decoder.generate";
  opt.validate(fn);
  if (!ids.defined() || ids.dtype() != Dtype::Int64 || ids.dim() != 2 || ids.size(1) < 1)
    fail(fn, "ids must be int64 (batch, time) with at least one token, got ",
         ids.defined() ? detail::tensor_desc(ids) : std::string("undefined"));
  NoGradGuard no_grad;
  Generator& g = gen ? *gen : default_generator();
  const int64_t B = ids.size(0), V = config_.vocab_size;
  std::vector<Tensor> columns{ids.contiguous()};
  std::vector<std::vector<int64_t>> rows(
      static_cast<std::size_t>(B));  // each row so far (repetition penalty)
  for (int64_t b = 0; b < B; ++b)
    rows[std::size_t(b)].assign(columns[0].data_ptr<int64_t>() + b * ids.size(1),
                                columns[0].data_ptr<int64_t>() + (b + 1) * ids.size(1));
  std::vector<int64_t> stopped(std::size_t(B), -1);  // the stop token a row produced, or -1
  const int64_t W = opt.window_length, S = opt.sink_tokens;
  if (W > config_.max_position_embeddings)
    fail(fn, "window_length ", W, " exceeds max_position_embeddings ",
         config_.max_position_embeddings);
  DecoderCache cache;
  cache.reserve = W > 0 ? std::max(ids.size(1), W) : ids.size(1) + opt.max_new_tokens;
  Tensor next_in = columns[0];
  for (int64_t step = 0; step < opt.max_new_tokens; ++step) {
    if (W > 0) make_room(cache, next_in.size(1), W, S);
    Tensor logits = run(next_in, &cache, /*keep=*/1);  // (B, 1, V), no grad (above)
    // A long prompt's pass leaves its activations' blocks in the host cache (up to 1 GiB), sized
    // for its length: no step after it asks for them, so they are given back and a generation
    // holds its weights and its key/value cache (float32 at 4096 tokens of a Llama-3.2-1B
    // shape: 6.06 GB resident before, 5.25 after, for 5.21 GB of both). After a short prompt
    // they are kept: given back there, the steps of two threads on a 2-core Zen 4 took 0.07-0.10
    // s a token against 0.06-0.09 (6 alternating pairs; one thread: no difference).
    if (step == 0 && next_in.size(1) >= kLongPrompt) cpu::empty_cache();
    logits = logits.select(1, 0).contiguous();  // (B, V)
    Tensor next = detail::make_tensor({B, 1}, Dtype::Int64, false);
    int64_t* p = next.data_ptr<int64_t>();
    for (int64_t b = 0; b < B; ++b) {
      p[b] = sample_next_token(logits.data_ptr<float>() + b * V, V, opt, rows[std::size_t(b)], g);
      rows[std::size_t(b)].push_back(p[b]);
    }
    bool all = true;
    for (int64_t b = 0; b < B; ++b) {
      if (stopped[std::size_t(b)] >= 0)
        p[b] = stopped[std::size_t(b)];
      else if (std::find(opt.stop_tokens.begin(), opt.stop_tokens.end(), p[b]) !=
               opt.stop_tokens.end())
        stopped[std::size_t(b)] = p[b];
      all = all && stopped[std::size_t(b)] >= 0;
    }
    columns.push_back(next);
    if (on_token) on_token(next.reshape({B}));
    if (all) break;
    next_in = next;
  }
  return cat(columns, 1);
}

}  // namespace attn::nn

// Hugging Face checkpoints of the decoder families (include/attn/hf_decoder.h).
#include <attn/autograd.h>
#include <attn/device.h>
#include <attn/hf_decoder.h>
#include <attn/io.h>
#include <attn/mxfp4.h>
#include <attn/ops.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "../tensor/internal.h"

namespace attn::nn {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
constexpr const char* kLoad = "load_hf_decoder";

// What every transformers config may carry that does not change the function the model computes.
const std::set<std::string> kGeneric = {
    "architectures",        "torch_dtype",       "dtype",
    "transformers_version", "bos_token_id",      "eos_token_id",
    "pad_token_id",         "use_cache",         "initializer_range",
    "_name_or_path",        "attention_dropout", "pretraining_tp",
    "cache_implementation", "output_attentions", "output_hidden_states",
    "return_dict",          "tokenizer_class",   "_attn_implementation_autoset",
    "attn_implementation"};

// The fields each model_type has (beyond kGeneric), transformers' defaults for it.
struct Family {
  std::set<std::string> fields;
  DecoderConfig defaults;
};

const std::map<std::string, Family>& families() {
  static const std::map<std::string, Family> f = [] {
    const std::set<std::string> base = {"model_type",
                                        "vocab_size",
                                        "hidden_size",
                                        "intermediate_size",
                                        "num_hidden_layers",
                                        "num_attention_heads",
                                        "num_key_value_heads",
                                        "head_dim",
                                        "max_position_embeddings",
                                        "rms_norm_eps",
                                        "rope_theta",
                                        "rope_scaling",
                                        "rope_parameters",
                                        "tie_word_embeddings",
                                        "hidden_act"};
    auto with = [&](std::initializer_list<const char*> extra) {
      std::set<std::string> s = base;
      s.insert(extra.begin(), extra.end());
      return s;
    };
    std::map<std::string, Family> m;
    DecoderConfig llama;
    llama.model_type = "llama";
    llama.vocab_size = 32000, llama.hidden_size = 4096, llama.intermediate_size = 11008;
    llama.num_hidden_layers = 32, llama.num_attention_heads = 32, llama.num_key_value_heads = 32;
    llama.max_position_embeddings = 2048;
    m["llama"] = {with({"attention_bias", "mlp_bias"}), llama};

    DecoderConfig mistral = llama;  // transformers 5's MistralConfig defaults (Mistral 7B's)
    mistral.model_type = "mistral";
    mistral.intermediate_size = 14336, mistral.num_key_value_heads = 8;
    mistral.max_position_embeddings = 131072, mistral.rms_norm_eps = 1e-6;
    mistral.sliding_window = 4096;
    m["mistral"] = {with({"sliding_window", "attention_bias", "layer_types"}), mistral};

    DecoderConfig qwen2 = llama;
    qwen2.model_type = "qwen2";
    qwen2.vocab_size = 151936, qwen2.intermediate_size = 22016;
    qwen2.max_position_embeddings = 32768, qwen2.qkv_bias = true;
    m["qwen2"] = {
        with({"use_sliding_window", "sliding_window", "max_window_layers", "layer_types"}), qwen2};

    DecoderConfig qwen3 = qwen2;
    qwen3.model_type = "qwen3";
    qwen3.qkv_bias = false, qwen3.qk_norm = true, qwen3.head_dim = 128;
    m["qwen3"] = {with({"attention_bias", "use_sliding_window", "sliding_window",
                        "max_window_layers", "layer_types"}),
                  qwen3};

    DecoderConfig qwen3_moe = qwen3;  // transformers' Qwen3MoeConfig defaults
    qwen3_moe.model_type = "qwen3_moe";
    qwen3_moe.hidden_size = 2048, qwen3_moe.intermediate_size = 6144;
    qwen3_moe.num_hidden_layers = 24, qwen3_moe.num_attention_heads = 32;
    qwen3_moe.num_key_value_heads = 4, qwen3_moe.head_dim = 0;
    qwen3_moe.num_local_experts = 128, qwen3_moe.num_experts_per_tok = 8;
    qwen3_moe.moe_type = "qwen3_moe", qwen3_moe.moe_intermediate_size = 768;
    m["qwen3_moe"] = {
        with({"attention_bias", "use_sliding_window", "sliding_window", "max_window_layers",
              "layer_types", "num_experts", "num_local_experts", "num_experts_per_tok",
              "moe_intermediate_size", "norm_topk_prob", "decoder_sparse_step", "mlp_only_layers",
              "router_aux_loss_coef", "output_router_logits"}),
        qwen3_moe};

    DecoderConfig mixtral = mistral;  // transformers' MixtralConfig defaults (Mixtral 8x7B's)
    mixtral.model_type = "mixtral";
    mixtral.rms_norm_eps = 1e-5, mixtral.rope_theta = 1e6, mixtral.sliding_window = 0;
    mixtral.num_local_experts = 8, mixtral.num_experts_per_tok = 2;
    mixtral.moe_type = "qwen3_moe", mixtral.norm_topk_prob = true;
    m["mixtral"] = {with({"sliding_window", "num_local_experts", "num_experts_per_tok",
                          "router_aux_loss_coef", "router_jitter_noise", "output_router_logits"}),
                    mixtral};

    DecoderConfig qwen2_moe = qwen2;  // transformers' Qwen2MoeConfig defaults
    qwen2_moe.model_type = "qwen2_moe";
    qwen2_moe.hidden_size = 2048, qwen2_moe.intermediate_size = 5632;
    qwen2_moe.num_hidden_layers = 24, qwen2_moe.num_attention_heads = 16;
    qwen2_moe.num_key_value_heads = 16;
    qwen2_moe.num_local_experts = 60, qwen2_moe.num_experts_per_tok = 4;
    qwen2_moe.moe_type = "qwen3_moe", qwen2_moe.moe_intermediate_size = 1408;
    qwen2_moe.shared_expert_intermediate_size = 5632;
    m["qwen2_moe"] = {
        with({"qkv_bias", "use_sliding_window", "sliding_window", "max_window_layers",
              "layer_types", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
              "shared_expert_intermediate_size", "norm_topk_prob", "decoder_sparse_step",
              "mlp_only_layers", "router_aux_loss_coef", "output_router_logits"}),
        qwen2_moe};

    DecoderConfig gemma;
    gemma.model_type = "gemma";
    gemma.vocab_size = 256000, gemma.hidden_size = 3072, gemma.intermediate_size = 24576;
    gemma.num_hidden_layers = 28, gemma.num_attention_heads = 16, gemma.num_key_value_heads = 16;
    gemma.head_dim = 256, gemma.max_position_embeddings = 8192;
    gemma.tie_word_embeddings = true, gemma.hidden_act = "gelu_tanh";
    gemma.norm_plus_one = true, gemma.scale_embeddings = true;
    m["gemma"] = {with({"hidden_activation", "attention_bias"}), gemma};

    DecoderConfig gemma2 = gemma;
    gemma2.model_type = "gemma2";
    // transformers 4.44's Gemma2Config defaults (its sizes are Gemma's); transformers 5 changed
    // them to gemma-2-2b's. Released Gemma 2 configs give every size.
    gemma2.sandwich_norms = true, gemma2.query_pre_attn_scalar = 224;
    gemma2.sliding_window = 4096, gemma2.attn_logit_softcapping = 50;
    gemma2.final_logit_softcapping = 30;
    m["gemma2"] = {with({"hidden_activation", "attention_bias", "query_pre_attn_scalar",
                         "sliding_window", "attn_logit_softcapping", "final_logit_softcapping",
                         "layer_types", "use_bidirectional_attention"}),
                   gemma2};

    DecoderConfig gemma3 = gemma2;
    gemma3.model_type = "gemma3_text";
    gemma3.vocab_size = 262208, gemma3.hidden_size = 2304, gemma3.intermediate_size = 9216;
    gemma3.num_hidden_layers = 26, gemma3.num_attention_heads = 8, gemma3.num_key_value_heads = 4;
    gemma3.max_position_embeddings = 131072, gemma3.rope_theta = 1e6;
    gemma3.query_pre_attn_scalar = 256, gemma3.attn_logit_softcapping = 0;
    gemma3.final_logit_softcapping = 0, gemma3.qk_norm = true;
    gemma3.rope_local_base_freq = 10000;
    m["gemma3_text"] = {
        with({"hidden_activation", "attention_bias", "query_pre_attn_scalar", "sliding_window",
              "attn_logit_softcapping", "final_logit_softcapping", "rope_local_base_freq",
              "sliding_window_pattern", "_sliding_window_pattern", "layer_types",
              "use_bidirectional_attention"}),
        gemma3};

    DecoderConfig gpt_oss;  // transformers' GptOssConfig defaults (gpt-oss-20b's shape)
    gpt_oss.model_type = "gpt_oss";
    gpt_oss.vocab_size = 201088, gpt_oss.hidden_size = 2880, gpt_oss.intermediate_size = 2880;
    gpt_oss.num_hidden_layers = 36, gpt_oss.num_attention_heads = 64;
    gpt_oss.num_key_value_heads = 8, gpt_oss.head_dim = 64;
    gpt_oss.max_position_embeddings = 131072, gpt_oss.rms_norm_eps = 1e-5;
    gpt_oss.rope_theta = 150000, gpt_oss.sliding_window = 128;
    gpt_oss.qkv_bias = gpt_oss.o_bias = true, gpt_oss.attention_sinks = true;
    gpt_oss.norm_in_float32 = true;
    gpt_oss.num_local_experts = 128, gpt_oss.num_experts_per_tok = 4;
    gpt_oss.rope_type = "yarn", gpt_oss.rope_factor = 32, gpt_oss.rope_truncate = false;
    gpt_oss.rope_original_max_position_embeddings = 4096;
    m["gpt_oss"] = {with({"attention_bias", "sliding_window", "layer_types", "num_local_experts",
                          "num_experts_per_tok", "swiglu_alpha", "swiglu_limit",
                          "router_aux_loss_coef", "output_router_logits", "quantization_config"}),
                    gpt_oss};
    return m;
  }();
  return f;
}

template <typename... Args>
[[noreturn]] void bad(const std::string& what, const Args&... args) {
  detail::fail(kLoad, "'", what, "': ", args...);
}

int64_t get_int(const json& j, const std::string& what, const char* key, int64_t fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) bad(what, key, " must be an integer, got ", it->dump());
  return it->get<int64_t>();
}

double get_number(const json& j, const std::string& what, const char* key, double fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number()) bad(what, key, " must be a number, got ", it->dump());
  return it->get<double>();
}

bool get_bool(const json& j, const std::string& what, const char* key, bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) bad(what, key, " must be true or false, got ", it->dump());
  return it->get<bool>();
}

std::string get_string(const json& j, const std::string& what, const char* key,
                       const std::string& fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_string()) bad(what, key, " must be a string, got ", it->dump());
  return it->get<std::string>();
}

std::string activation(const json& j, const std::string& what, const char* key,
                       const std::string& fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  const std::string a = get_string(j, what, key, fallback);
  if (a == "silu" || a == "swish") return "silu";
  if (a == "gelu_pytorch_tanh" || a == "gelu_new" || a == "gelu_fast") return "gelu_tanh";
  bad(what, key, " '", a, "' is not supported (attn has silu and gelu_pytorch_tanh)");
}

// attn::Error naming the fields of j that are neither kGeneric nor `allowed` (a `type` model does
// not have them: they would be ignored).
void refuse_unknown_fields(const json& j, const std::string& what, const std::string& type,
                           const std::set<std::string>& allowed) {
  std::string unknown;
  for (auto it = j.begin(); it != j.end(); ++it)
    if (!allowed.count(it.key()) && !kGeneric.count(it.key()))
      unknown += (unknown.empty() ? "" : ", ") + it.key();
  if (!unknown.empty())
    bad(what, "fields that a ", type,
        " model does not have in attn (they would be ignored): ", unknown);
}

DecoderConfig config_from_json(const json& j, const std::string& what) {
  if (!j.is_object()) bad(what, "expected a JSON object");
  // Gemma 3 with images (Gemma3ForConditionalGeneration, model_type gemma3): its language model
  // is a gemma3_text model under text_config; the vision tower is not read (text only).
  if (j.contains("model_type") && j["model_type"] == "gemma3") {
    static const std::set<std::string> kGemma3Top = {
        "model_type",          "tie_word_embeddings", "text_config",     "vision_config",
        "mm_tokens_per_image", "image_token_index",   "boi_token_index", "eoi_token_index",
        "image_token_id",      "boi_token_id",        "eoi_token_id",    "initializer_range"};
    refuse_unknown_fields(j, what, "gemma3", kGemma3Top);
    auto tc = j.find("text_config");
    if (tc == j.end() || !tc->is_object())
      bad(what, "a gemma3 (image and text) config needs a text_config object");
    json text = *tc;
    if (!text.contains("model_type")) text["model_type"] = "gemma3_text";
    if (text["model_type"] != "gemma3_text")
      bad(what, "text_config.model_type must be gemma3_text, got ", text["model_type"].dump());
    return config_from_json(text, what + " (text_config)");
  }
  auto mt = j.find("model_type");
  if (mt == j.end() || !mt->is_string())
    bad(what,
        "no model_type (expected one of llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, "
        "qwen3_moe, gemma, gemma2, gemma3_text, gpt_oss)");
  const std::string type = mt->get<std::string>();
  auto fam = families().find(type);
  if (fam == families().end())
    bad(what, "model_type '", type,
        "' is not supported (attn has llama, mistral, mixtral, qwen2, qwen2_moe, qwen3, "
        "qwen3_moe, gemma, gemma2, gemma3_text, gpt_oss)");
  refuse_unknown_fields(j, what, type, fam->second.fields);

  DecoderConfig c = fam->second.defaults;
  c.vocab_size = get_int(j, what, "vocab_size", c.vocab_size);
  c.hidden_size = get_int(j, what, "hidden_size", c.hidden_size);
  c.intermediate_size = get_int(j, what, "intermediate_size", c.intermediate_size);
  c.num_hidden_layers = get_int(j, what, "num_hidden_layers", c.num_hidden_layers);
  c.num_attention_heads = get_int(j, what, "num_attention_heads", c.num_attention_heads);
  // Left out: Llama's is its num_attention_heads; the other families' their own default.
  c.num_key_value_heads = get_int(j, what, "num_key_value_heads",
                                  type == "llama" ? c.num_attention_heads : c.num_key_value_heads);
  c.head_dim = get_int(j, what, "head_dim", c.head_dim);
  c.max_position_embeddings =
      get_int(j, what, "max_position_embeddings", c.max_position_embeddings);
  c.rms_norm_eps = get_number(j, what, "rms_norm_eps", c.rms_norm_eps);
  c.rope_theta = get_number(j, what, "rope_theta", c.rope_theta);
  c.tie_word_embeddings = get_bool(j, what, "tie_word_embeddings", c.tie_word_embeddings);
  const bool gemma_family = type.rfind("gemma", 0) == 0;
  c.hidden_act = activation(j, what, "hidden_act", c.hidden_act);
  if (gemma_family) c.hidden_act = activation(j, what, "hidden_activation", "gelu_tanh");
  // q, k, v and o (transformers' Mistral has no biases, whatever its config says)
  if (type != "mistral" && j.contains("attention_bias") && !j["attention_bias"].is_null())
    c.qkv_bias = c.o_bias = get_bool(j, what, "attention_bias", false);
  c.mlp_bias = get_bool(j, what, "mlp_bias", c.mlp_bias);
  if (type == "qwen2_moe")  // transformers 5's field; transformers 4's Qwen2-MoE always has them
    c.qkv_bias = get_bool(j, what, "qkv_bias", c.qkv_bias);
  if (type == "qwen3_moe" || type == "qwen2_moe") {
    c.num_local_experts =
        get_int(j, what, "num_experts", get_int(j, what, "num_local_experts", c.num_local_experts));
    c.moe_intermediate_size = get_int(j, what, "moe_intermediate_size", c.moe_intermediate_size);
    c.norm_topk_prob = get_bool(j, what, "norm_topk_prob", c.norm_topk_prob);
    c.decoder_sparse_step = get_int(j, what, "decoder_sparse_step", c.decoder_sparse_step);
    if (j.contains("mlp_only_layers") && !j["mlp_only_layers"].is_null()) {
      const json& ml = j["mlp_only_layers"];
      if (!ml.is_array()) bad(what, "mlp_only_layers must be a list of layers, got ", ml.dump());
      for (const json& l : ml) {
        if (!l.is_number_integer())
          bad(what, "mlp_only_layers must be a list of layers, got ", ml.dump());
        c.mlp_only_layers.push_back(l.get<int64_t>());
      }
    }
  }
  if (type == "qwen2_moe")
    c.shared_expert_intermediate_size =
        get_int(j, what, "shared_expert_intermediate_size", c.shared_expert_intermediate_size);
  if (type == "mixtral" || type == "gpt_oss")
    c.num_local_experts = get_int(j, what, "num_local_experts", c.num_local_experts);
  if (type == "mixtral") {
    if (get_number(j, what, "router_jitter_noise", 0.0) != 0)
      bad(what, "router_jitter_noise ", j["router_jitter_noise"].dump(),
          " is not supported (attn's router has no noise)");
  }
  if (c.num_local_experts > 0) {
    c.num_experts_per_tok = get_int(j, what, "num_experts_per_tok", c.num_experts_per_tok);
    if (get_bool(j, what, "output_router_logits", false))
      bad(what, "output_router_logits true is not supported (attn returns the logits only)");
  }
  if (type == "qwen2" || type == "qwen3" || type == "qwen3_moe" || type == "qwen2_moe") {
    if (get_bool(j, what, "use_sliding_window", false))
      bad(what, "use_sliding_window true is not supported (Qwen's per-layer windows)");
  } else if ((type == "mistral" || type == "mixtral") && j.contains("sliding_window") &&
             j["sliding_window"].is_null()) {
    c.sliding_window = 0;  // Mistral 7B v0.2 on: no window (left out: the default's 4096)
  } else {
    c.sliding_window = get_int(j, what, "sliding_window", c.sliding_window);
  }
  c.query_pre_attn_scalar = get_number(j, what, "query_pre_attn_scalar", c.query_pre_attn_scalar);
  c.attn_logit_softcapping =
      get_number(j, what, "attn_logit_softcapping",
                 j.contains("attn_logit_softcapping") ? 0.0 : c.attn_logit_softcapping);
  c.final_logit_softcapping =
      get_number(j, what, "final_logit_softcapping",
                 j.contains("final_logit_softcapping") ? 0.0 : c.final_logit_softcapping);
  // transformers' Gemma 3 keeps attn_logit_softcapping in its config but never passes it to the
  // attention (Gemma 3 checkpoints set it null): the function it computes has no cap, nor has ours.
  if (type == "gemma3_text") c.attn_logit_softcapping = 0;
  c.rope_local_base_freq = get_number(j, what, "rope_local_base_freq", c.rope_local_base_freq);
  if (type == "gpt_oss") {
    c.swiglu_alpha = get_number(j, what, "swiglu_alpha", c.swiglu_alpha);
    c.swiglu_limit = get_number(j, what, "swiglu_limit", c.swiglu_limit);
    // gpt-oss's released checkpoints: the experts' weights in MXFP4 (kept so, or decoded on
    // load), all else in bfloat16.
    if (j.contains("quantization_config") && !j["quantization_config"].is_null()) {
      const json& q = j["quantization_config"];
      if (!q.is_object()) bad(what, "quantization_config must be an object, got ", q.dump());
      for (auto it = q.begin(); it != q.end(); ++it)
        if (it.key() != "quant_method" && it.key() != "modules_to_not_convert" &&
            it.key() != "dequantize")
          bad(what, "quantization_config has '", it.key(),
              "', which attn does not know (it has quant_method mxfp4, modules_to_not_convert, "
              "dequantize)");
      if (q.contains("dequantize") && !q["dequantize"].is_boolean())
        bad(what, "quantization_config dequantize must be true or false, got ",
            q["dequantize"].dump());
      const std::string method = get_string(q, what, "quant_method", "");
      if (method != "mxfp4")
        bad(what, "quantization_config quant_method '", method,
            "' is not supported (attn reads mxfp4: gpt-oss's experts)");
    }
  }

  // Which layers slide: layer_types when given, else the family's pattern.
  if (c.sliding_window > 0 && (type == "gemma2" || type == "gemma3_text" || type == "gpt_oss" ||
                               type == "mistral" || type == "mixtral")) {
    c.sliding_layers.assign(std::size_t(std::max<int64_t>(c.num_hidden_layers, 0)), false);
    if (j.contains("layer_types") && !j["layer_types"].is_null()) {
      const json& lt = j["layer_types"];
      if (!lt.is_array() || int64_t(lt.size()) != c.num_hidden_layers)
        bad(what, "layer_types must list ", c.num_hidden_layers, " layers, got ", lt.dump());
      for (std::size_t i = 0; i < lt.size(); ++i) {
        if (lt[i] == "sliding_attention") {
          c.sliding_layers[i] = true;
        } else if (lt[i] != "full_attention") {
          bad(what, "layer_types[", i, "] must be sliding_attention or full_attention, got ",
              lt[i].dump());
        }
      }
    } else if (type == "mistral" || type == "mixtral") {  // every layer slides
      c.sliding_layers.assign(c.sliding_layers.size(), true);
    } else if (type == "gemma2" || type == "gpt_oss") {  // even layers slide
      for (int64_t i = 0; i < c.num_hidden_layers; ++i)
        c.sliding_layers[std::size_t(i)] = i % 2 == 0;
    } else {
      // transformers 5 writes the pattern as _sliding_window_pattern beside layer_types.
      const int64_t pattern = get_int(j, what, "sliding_window_pattern",
                                      get_int(j, what, "_sliding_window_pattern", 6));
      if (pattern < 1) bad(what, "sliding_window_pattern must be >= 1, got ", pattern);
      for (int64_t i = 0; i < c.num_hidden_layers; ++i)
        c.sliding_layers[std::size_t(i)] = (i + 1) % pattern != 0;
    }
  } else if (j.contains("layer_types") && !j["layer_types"].is_null()) {
    for (const json& t : j["layer_types"])
      if (t != "full_attention")
        bad(what, "layer_types ", t.dump(),
            " needs sliding_window (attn has full attention only "
            "for ",
            type, ")");
  }
  if (type == "gemma") c.sliding_window = 0;
  if (get_bool(j, what, "use_bidirectional_attention", false))
    bad(what, "use_bidirectional_attention true is not supported (attn's decoder is causal)");

  // RoPE: rope_theta with rope_scaling (transformers 4), or rope_parameters holding both
  // (transformers 5), per layer type for models with sliding layers.
  auto rope_scaling = [&](const json& rs, const char* field) {
    if (!rs.is_object()) bad(what, field, " must be an object or null, got ", rs.dump());
    const std::string kind =
        get_string(rs, what, "rope_type", get_string(rs, what, "type", "default"));
    if (kind == "llama3") {
      c.rope_type = "llama3";
      c.rope_factor = get_number(rs, what, "factor", 8.0);
      c.rope_low_freq_factor = get_number(rs, what, "low_freq_factor", 1.0);
      c.rope_high_freq_factor = get_number(rs, what, "high_freq_factor", 4.0);
      c.rope_original_max_position_embeddings =
          get_int(rs, what, "original_max_position_embeddings", 8192);
    } else if (kind == "linear") {
      c.rope_type = "linear";
      c.rope_factor = get_number(rs, what, "factor", 1.0);
    } else if (kind == "yarn") {
      for (const char* k : {"mscale", "mscale_all_dim", "partial_rotary_factor"})
        if (rs.contains(k) && !rs[k].is_null())
          bad(what, field, ": yarn's ", k, " is not supported, in ", rs.dump());
      if (!rs.contains("original_max_position_embeddings"))
        bad(what, field, ": yarn needs original_max_position_embeddings, in ", rs.dump());
      c.rope_type = "yarn";
      c.rope_original_max_position_embeddings =
          get_int(rs, what, "original_max_position_embeddings", 0);
      c.rope_factor = get_number(
          rs, what, "factor",
          double(c.max_position_embeddings) / double(c.rope_original_max_position_embeddings));
      c.rope_beta_fast = get_number(rs, what, "beta_fast", 32.0);
      c.rope_beta_slow = get_number(rs, what, "beta_slow", 1.0);
      c.rope_attention_factor = get_number(rs, what, "attention_factor", 0.0);
      c.rope_truncate = get_bool(rs, what, "truncate", true);
    } else if (kind != "default") {
      bad(what, field, " type '", kind,
          "' is not supported (attn has llama3, linear and yarn), in ", rs.dump());
    }
  };
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null())
    rope_scaling(j["rope_scaling"], "rope_scaling");
  if (j.contains("rope_parameters") && !j["rope_parameters"].is_null()) {
    const json& rp = j["rope_parameters"];
    if (rp.is_object() && (rp.contains("full_attention") || rp.contains("sliding_attention"))) {
      if (rp.contains("full_attention")) {
        rope_scaling(rp["full_attention"], "rope_parameters.full_attention");
        c.rope_theta = get_number(rp["full_attention"], what, "rope_theta", c.rope_theta);
      }
      if (rp.contains("sliding_attention")) {
        const json& sl = rp["sliding_attention"];
        if (!sl.is_object() || get_string(sl, what, "rope_type", "default") != "default")
          bad(what,
              "rope_parameters.sliding_attention: attn's sliding layers take a plain RoPE, "
              "got ",
              sl.dump());
        c.rope_local_base_freq = get_number(sl, what, "rope_theta", c.rope_local_base_freq);
      }
    } else {
      rope_scaling(rp, "rope_parameters");
      if (rp.is_object()) c.rope_theta = get_number(rp, what, "rope_theta", c.rope_theta);
    }
  }
  try {
    c.validate(kLoad);
  } catch (const Error& e) {
    bad(what, e.what());
  }
  return c;
}

}  // namespace

std::string hf_parameter_name(const std::string& model_type, const std::string& name) {
  if (model_type != "mixtral") return name;
  const std::size_t mlp = name.find(".mlp.");
  if (mlp == std::string::npos) return name;
  std::string rest = name.substr(mlp + 5);  // gate.weight or experts.E.gate_proj.weight
  if (rest.rfind("experts.", 0) == 0) {
    const std::size_t dot = rest.find('.', 8);
    if (dot != std::string::npos)
      for (auto [from, to] :
           {std::pair{"gate_proj.", "w1."}, {"up_proj.", "w3."}, {"down_proj.", "w2."}})
        if (rest.compare(dot + 1, std::strlen(from), from) == 0)
          rest = rest.substr(0, dot + 1) + to + rest.substr(dot + 1 + std::strlen(from));
  }
  return name.substr(0, mlp) + ".block_sparse_moe." + rest;
}

DecoderConfig decoder_config_from_hf_json(std::string_view text, const std::string& what) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    bad(what, "not valid JSON: ", e.what());
  }
  return config_from_json(j, what);
}

DecoderConfig decoder_config_for_family(const std::string& model_type) {
  static const std::set<std::string> families = {"llama",     "mistral",     "mixtral",   "qwen2",
                                                 "qwen2_moe", "qwen3",       "qwen3_moe", "gemma",
                                                 "gemma2",    "gemma3_text", "gpt_oss"};
  if (!families.count(model_type))
    detail::fail("decoder_config_for_family", "model_type '", model_type,
                 "' is not a family of attn's decoder (llama, mistral, mixtral, qwen2, qwen2_moe, "
                 "qwen3, qwen3_moe, gemma, gemma2, gemma3_text, gpt_oss)");
  const DecoderConfig f = config_from_json(json{{"model_type", model_type}}, "model_type");
  DecoderConfig c;  // attn's small sizes, the family's behaviour
  c.model_type = f.model_type;
  c.rms_norm_eps = f.rms_norm_eps, c.rope_theta = f.rope_theta, c.rope_type = f.rope_type;
  c.rope_factor = f.rope_factor, c.rope_low_freq_factor = f.rope_low_freq_factor;
  c.rope_high_freq_factor = f.rope_high_freq_factor;
  c.rope_original_max_position_embeddings = f.rope_original_max_position_embeddings;
  c.rope_beta_fast = f.rope_beta_fast, c.rope_beta_slow = f.rope_beta_slow;
  c.rope_attention_factor = f.rope_attention_factor, c.rope_truncate = f.rope_truncate;
  c.rope_local_base_freq = f.rope_local_base_freq;
  c.qkv_bias = f.qkv_bias, c.o_bias = f.o_bias, c.mlp_bias = f.mlp_bias, c.qk_norm = f.qk_norm;
  c.tie_word_embeddings = f.tie_word_embeddings, c.hidden_act = f.hidden_act;
  c.norm_plus_one = f.norm_plus_one, c.sandwich_norms = f.sandwich_norms;
  c.scale_embeddings = f.scale_embeddings;
  c.attn_logit_softcapping = f.attn_logit_softcapping;
  c.final_logit_softcapping = f.final_logit_softcapping;
  c.attention_sinks = f.attention_sinks, c.norm_in_float32 = f.norm_in_float32;
  c.swiglu_alpha = f.swiglu_alpha, c.swiglu_limit = f.swiglu_limit;
  c.moe_type = f.moe_type, c.norm_topk_prob = f.norm_topk_prob;
  return c;
}

namespace {

// The checkpoint's tensors: each name, its shape and the file that holds it.
struct Weights {
  std::map<std::string, io::SafeTensorsFile> files;  // by file name
  std::map<std::string, std::string> where;          // tensor -> file name
  std::map<std::string, Shape> shapes;
  std::map<std::string, std::string> stored;  // the name in the file, where it is another

  const io::SafeTensorsFile& file(const std::string& name) const {
    return files.at(where.at(name));
  }
  const std::string& in_file(const std::string& name) const {
    auto it = stored.find(name);
    return it == stored.end() ? name : it->second;
  }
};

// Gemma 3 with images: its language model's tensors under the decoder's names
// (language_model.model.X as the released files have it, or model.language_model.X, become
// model.X; language_model.lm_head.X, lm_head.X), the vision tower's and the projector's left out.
// Other checkpoints are left as they are.
void rename_multimodal(Weights& w) {
  const auto starts = [](const std::string& s, const char* p) { return s.rfind(p, 0) == 0; };
  bool multimodal = false;
  for (const auto& [name, shape] : w.shapes)
    multimodal =
        multimodal || starts(name, "language_model.") || starts(name, "model.language_model.");
  if (!multimodal) return;
  Weights out;
  out.files = std::move(w.files);
  for (const auto& [name, shape] : w.shapes) {
    std::string to;
    for (const char* from : {"language_model.model.", "model.language_model."})
      if (starts(name, from)) to = "model." + name.substr(std::strlen(from));
    if (starts(name, "language_model.lm_head.")) to = name.substr(std::strlen("language_model."));
    if (starts(name, "lm_head.")) to = name;
    if (to.empty()) {
      bool vision = false;
      for (const char* p : {"vision_tower.", "multi_modal_projector.", "model.vision_tower.",
                            "model.multi_modal_projector."})
        vision = vision || starts(name, p);
      if (vision) continue;
      to = name;  // reported as unexpected by the load
    }
    out.where[to] = w.where.at(name);
    out.shapes[to] = shape;
    if (to != name) out.stored[to] = name;
  }
  w = std::move(out);
}

// The family's checkpoint names of the model's parameters (hf_parameter_name) taken as the
// parameters' own: the tensor keeps its file and its stored name.
void rename_family(Weights& w, const Decoder& model) {
  for (const auto& [name, p] : model.named_parameters()) {
    const std::string hf = hf_parameter_name(model.config().model_type, name);
    if (hf == name || !w.shapes.count(hf) || w.shapes.count(name)) continue;
    w.shapes[name] = w.shapes.at(hf);
    w.where[name] = w.where.at(hf);
    w.stored[name] = w.in_file(hf);
    w.shapes.erase(hf), w.where.erase(hf), w.stored.erase(hf);
  }
}

Weights open_weights(const std::string& dir) {
  Weights w;
  std::error_code ec;
  const fs::path single = fs::path(dir) / "model.safetensors";
  const fs::path index = fs::path(dir) / "model.safetensors.index.json";
  auto add_file = [&](const std::string& name) -> const io::SafeTensorsFile& {
    auto it = w.files.find(name);
    if (it != w.files.end()) return it->second;
    const fs::path p = fs::path(dir) / name;
    if (!fs::exists(p, ec)) bad(index.string(), "names shard '", name, "', which is missing");
    return w.files.emplace(name, io::SafeTensorsFile(p.string())).first->second;
  };
  if (fs::exists(single, ec)) {
    const auto& f = add_file("model.safetensors");
    for (const auto& e : f.entries()) {
      w.where[e.name] = "model.safetensors";
      w.shapes[e.name] = e.shape;
    }
    return w;
  }
  if (!fs::exists(index, ec)) {
    if (fs::exists(fs::path(dir) / "pytorch_model.bin", ec))
      detail::fail(kLoad, "'", dir,
                   "' has only pytorch_model.bin: save it with save_pretrained(dir, "
                   "safe_serialization=True) to get model.safetensors");
    detail::fail(kLoad, "'", dir,
                 "' has neither model.safetensors nor model.safetensors.index.json");
  }
  json j;
  try {
    j = json::parse(io::read_file(index.string()));
  } catch (const json::exception& e) {
    bad(index.string(), "not valid JSON: ", e.what());
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    bad(index.string(), "expected {\"weight_map\": {tensor: shard, ...}}");
  for (auto it = j["weight_map"].begin(); it != j["weight_map"].end(); ++it) {
    if (!it.value().is_string())
      bad(index.string(), "weight_map['", it.key(), "'] must be a file name, got ",
          it.value().dump());
    const std::string shard = it.value().get<std::string>();
    if (shard.find('/') != std::string::npos || shard == ".." || shard.empty())
      bad(index.string(), "weight_map['", it.key(), "'] must name a file in the directory, got '",
          shard, "'");
    const auto& f = add_file(shard);
    const auto* e = f.find(it.key());
    if (!e) bad(index.string(), "puts '", it.key(), "' in '", shard, "', which does not hold it");
    w.where[it.key()] = shard;
    w.shapes[it.key()] = e->shape;
  }
  return w;
}

// An experts' matrix stored as transformers' MXFP4 pair (include/attn/mxfp4.h): NAME_blocks,
// uint8 (E, R, C / 32, 16), and NAME_scales, uint8 (E, R, C / 32), for the parameter NAME of
// shape (E, C, R) (the product's layout: the dequantized (E, R, C) transposed, as transformers'
// dequantization) or, kept in MXFP4, DecoderExperts' E matrices (R, C).
struct Mxfp4 {
  int64_t layer;
  bool gate_up;  // gate_up_proj, else down_proj
  std::string name, blocks, scales;
  int64_t E, R, C;
};

// The experts' matrices of a gpt_oss config that the checkpoint has as MXFP4 pairs (a matrix
// stored as a float tensor too is read from that), each pair checked against the config's shape.
std::vector<Mxfp4> find_mxfp4(const DecoderConfig& c, const Weights& w) {
  std::vector<Mxfp4> out;
  if (c.num_local_experts < 1 || c.moe_type != "gpt_oss") return out;
  const int64_t E = c.num_local_experts, H = c.hidden_size, I = c.intermediate_size;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l)
    for (const bool gate_up : {true, false}) {
      const std::string name = "model.layers." + std::to_string(l) + ".mlp.experts." +
                               (gate_up ? "gate_up_proj" : "down_proj");
      Mxfp4 mx{l,
               gate_up,
               name,
               name + "_blocks",
               name + "_scales",
               E,
               gate_up ? 2 * I : H,
               gate_up ? H : I};
      if (w.shapes.count(name) || (!w.shapes.count(mx.blocks) && !w.shapes.count(mx.scales)))
        continue;
      for (const std::string* t : {&mx.blocks, &mx.scales}) {
        const std::string& other = t == &mx.blocks ? mx.scales : mx.blocks;
        if (!w.shapes.count(*t))
          bad(w.where.at(other), "has '", other, "' but not '", *t, "' (MXFP4 comes as a pair)");
        if (!w.files.at(w.where.at(*t)).find(*t)->u8)
          bad(w.where.at(*t), "'", *t, "' must be U8 (MXFP4), got ",
              io::SafeTensorsFile::dtype_name(w.files.at(w.where.at(*t)).find(*t)->dtype));
      }
      if (mx.C % 32 != 0)
        bad(w.where.at(mx.blocks), "'", name, "' has ", mx.C,
            " inputs, which MXFP4's groups of 32 cannot hold");
      const Shape want_blocks{E, mx.R, mx.C / 32, 16}, want_scales{E, mx.R, mx.C / 32};
      if (w.shapes.at(mx.blocks) != want_blocks || w.shapes.at(mx.scales) != want_scales)
        bad(w.where.at(mx.blocks), "'", mx.blocks, "' ", shape_str(w.shapes.at(mx.blocks)),
            " and '", mx.scales, "' ", shape_str(w.shapes.at(mx.scales)), " do not fit '", name,
            "' ", shape_str(Shape{E, mx.C, mx.R}), ": expected ", shape_str(want_blocks), " and ",
            shape_str(want_scales));
      out.push_back(mx);
    }
  return out;
}

Mxfp4Matrices read_mxfp4(const Weights& w, const Mxfp4& mx) {
  return Mxfp4Matrices(mx.E, mx.R, mx.C, w.files.at(w.where.at(mx.blocks)).read_u8(mx.blocks),
                       w.files.at(w.where.at(mx.scales)).read_u8(mx.scales));
}

// dst (E, C, R) = the pair's values, one expert at a time into dst's dtype (exact in float32 and
// bfloat16: a code times a power of two; a scale of 255 is NaN, as the MX specification has it).
void read_mxfp4_into(const Weights& w, const Mxfp4& mx, Tensor& dst) {
  const Mxfp4Matrices m = read_mxfp4(w, mx);
  NoGradGuard no_grad;
  for (int64_t e = 0; e < mx.E; ++e) dst.select(0, e).copy_(mxfp4_dequantize(m, e).transpose(0, 1));
}

}  // namespace

std::shared_ptr<Decoder> load_hf_decoder(const std::string& dir, Dtype dtype,
                                         bool dequantize_mxfp4) {
  std::error_code ec;
  if (!is_floating_point(dtype))
    detail::fail(kLoad, "dtype must be float32, bfloat16 or float16, got ", dtype_name(dtype));
  if (!fs::is_directory(dir, ec))
    detail::fail(kLoad, "'", dir, "' is not a directory (expected config.json and the weights)");
  const std::string config_path = (fs::path(dir) / "config.json").string();
  if (!fs::exists(config_path, ec))
    detail::fail(kLoad, "'", dir, "' has no config.json (not a Hugging Face checkpoint)");
  const std::string config_text = io::read_file(config_path);
  DecoderConfig config = decoder_config_from_hf_json(config_text, config_path);
  // transformers' Mxfp4Config(dequantize=True), saved in the checkpoint's config: decoded on
  // load (decoder_config_from_hf_json checked the field's place and type).
  if (config.model_type == "gpt_oss") {
    const json j = json::parse(config_text);
    if (j.contains("quantization_config") && j["quantization_config"].is_object() &&
        j["quantization_config"].value("dequantize", false))
      dequantize_mxfp4 = true;
  }
  Weights w = open_weights(dir);
  rename_multimodal(w);
  const std::vector<Mxfp4> mxfp4 = find_mxfp4(config, w);
  for (const Mxfp4& mx : mxfp4) {  // the pairs leave the tensors the load reads
    w.shapes.erase(mx.blocks), w.shapes.erase(mx.scales);
    if (dequantize_mxfp4) w.shapes[mx.name] = Shape{mx.E, mx.C, mx.R};
  }
  if (!mxfp4.empty() && !dequantize_mxfp4) {
    if (int64_t(mxfp4.size()) != 2 * config.num_hidden_layers)
      bad(dir, "has ", mxfp4.size(), " of the ", 2 * config.num_hidden_layers,
          " experts' matrices in MXFP4 (e.g. '", mxfp4.front().blocks,
          "'): attn keeps all of them in MXFP4 or none (load with dequantize_mxfp4)");
    config.mxfp4_experts = true;
  }
  if (config.tie_word_embeddings) w.shapes.erase("lm_head.weight");  // tied: the embeddings'
  std::shared_ptr<Decoder> model;
  {
    init::SkipInitGuard skip;  // every weight is read next
    model = std::make_shared<Decoder>(config);
    // Placeholders in the dtype until read, never written (untouched pages cost no memory):
    // converting the float32 ones would write a copy of every weight first.
    if (dtype != Dtype::Float32)
      for (auto& [name, t] : model->named_parameters()) t.set_data(attn::empty(t.shape(), dtype));
  }
  rename_family(w, *model);
  std::map<std::string, const Mxfp4*> dequantized;
  for (const Mxfp4& mx : mxfp4) dequantized[mx.name] = &mx;
  try {
    model->load_state_dict_from(w.shapes, [&](const std::string& name, Tensor& dst) {
      if (auto mx = dequantized.find(name); mx != dequantized.end())
        return read_mxfp4_into(w, *mx->second, dst);
      const io::SafeTensorsFile& f = w.file(name);
      const std::string& stored = w.in_file(name);
      // The file's pages, not a copy, given to the parameter itself (dst is a detached handle).
      if (dtype != Dtype::Float32 && f.find(stored)->dtype == dtype)
        model->parameter(name).set_data(f.map(stored));
      else
        f.read_into(stored, dst);
    });
    if (config.mxfp4_experts)  // after the checks of every other tensor
      for (const Mxfp4& mx : mxfp4) {
        DecoderExperts& ex = *model->model->layers[std::size_t(mx.layer)]->moe->experts;
        (mx.gate_up ? ex.gate_up_mxfp4 : ex.down_mxfp4) = read_mxfp4(w, mx);
      }
  } catch (const Error& e) {
    std::string m = e.what();
    if (m.rfind("[" + std::string(kLoad) + "]", 0) == 0) throw;
    detail::fail(kLoad, "'", dir, "': ", m);
  }
  model->eval();
  // The placeholders that the file's pages replaced went to the host cache (up to 1 GiB of
  // blocks that no step of a model this size asks for again): given back, so that a loaded model
  // holds its weights and nothing else.
  cpu::empty_cache();
  return model;
}

}  // namespace attn::nn

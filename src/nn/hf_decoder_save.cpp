// Writing a Decoder as the Hugging Face directory its family's save_pretrained writes
// (include/attn/hf_decoder.h): config.json in transformers' fields, model.safetensors under
// transformers' parameter names.
#include <attn/hf_decoder.h>
#include <attn/io.h>
#include <attn/mxfp4.h>
#include <attn/ops.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "../tensor/internal.h"

namespace attn::nn {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
constexpr const char* kSave = "save_hf_decoder";

const char* architecture(const std::string& type) {
  if (type == "llama") return "LlamaForCausalLM";
  if (type == "mistral") return "MistralForCausalLM";
  if (type == "qwen2") return "Qwen2ForCausalLM";
  if (type == "qwen3") return "Qwen3ForCausalLM";
  if (type == "qwen3_moe") return "Qwen3MoeForCausalLM";
  if (type == "qwen2_moe") return "Qwen2MoeForCausalLM";
  if (type == "mixtral") return "MixtralForCausalLM";
  if (type == "gemma") return "GemmaForCausalLM";
  if (type == "gemma2") return "Gemma2ForCausalLM";
  if (type == "gemma3_text") return "Gemma3ForCausalLM";
  if (type == "gpt_oss") return "GptOssForCausalLM";
  detail::fail(kSave, "model_type '", type,
               "' has no Hugging Face class in attn (llama, mistral, mixtral, qwen2, qwen2_moe, "
               "qwen3, qwen3_moe, gemma, gemma2, gemma3_text, gpt_oss)");
}

json null_if_zero(double v) { return v == 0 ? json(nullptr) : json(v); }

// A whole number as an integer (transformers 5's configs check the field's type: Gemma's
// query_pre_attn_scalar is an int), others as they are.
json number(double v) {
  return v == std::floor(v) && std::abs(v) < 9.0e15 ? json(int64_t(v)) : json(v);
}

// The fields of c that change the function the model computes, with defaults made explicit
// (head_dim, the sliding layers' RoPE base, the attention scale), and the RoPE fields only of the
// rope_type that reads them: two configs of the same model compare equal.
std::map<std::string, std::string> effective(const DecoderConfig& c) {
  std::map<std::string, std::string> f;
  auto put = [&f](const char* k, const auto& v) { f[k] = json(v).dump(); };
  put("model_type", c.model_type), put("vocab_size", c.vocab_size);
  put("hidden_size", c.hidden_size), put("intermediate_size", c.intermediate_size);
  put("num_hidden_layers", c.num_hidden_layers);
  put("num_attention_heads", c.num_attention_heads);
  put("num_key_value_heads", c.num_key_value_heads), put("head_dim", c.head_size());
  put("max_position_embeddings", c.max_position_embeddings);
  put("rms_norm_eps", c.rms_norm_eps), put("rope_theta", c.rope_theta);
  put("rope_type", c.rope_type);
  if (c.rope_type != "default") put("rope_factor", c.rope_factor);
  if (c.rope_type == "llama3") {
    put("rope_low_freq_factor", c.rope_low_freq_factor);
    put("rope_high_freq_factor", c.rope_high_freq_factor);
  }
  if (c.rope_type == "llama3" || c.rope_type == "yarn")
    put("rope_original_max_position_embeddings", c.rope_original_max_position_embeddings);
  if (c.rope_type == "yarn") {
    put("rope_beta_fast", c.rope_beta_fast), put("rope_beta_slow", c.rope_beta_slow);
    put("rope_attention_factor", c.rope_attention_factor), put("rope_truncate", c.rope_truncate);
  }
  put("qkv_bias", c.qkv_bias), put("o_bias", c.o_bias), put("mlp_bias", c.mlp_bias);
  put("qk_norm", c.qk_norm), put("tie_word_embeddings", c.tie_word_embeddings);
  put("hidden_act", c.hidden_act), put("norm_plus_one", c.norm_plus_one);
  put("sandwich_norms", c.sandwich_norms), put("scale_embeddings", c.scale_embeddings);
  put("query_pre_attn_scalar",
      c.query_pre_attn_scalar > 0 ? c.query_pre_attn_scalar : double(c.head_size()));
  put("attn_logit_softcapping", c.attn_logit_softcapping);
  put("final_logit_softcapping", c.final_logit_softcapping);
  std::vector<bool> sliding;
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) sliding.push_back(c.is_sliding(l));
  const bool any_sliding = std::find(sliding.begin(), sliding.end(), true) != sliding.end();
  put("sliding_layers", sliding);
  put("sliding_window", any_sliding ? c.sliding_window : 0);
  if (any_sliding)
    put("rope_local_base_freq", c.rope_local_base_freq > 0 ? c.rope_local_base_freq : c.rope_theta);
  put("attention_sinks", c.attention_sinks), put("norm_in_float32", c.norm_in_float32);
  put("num_local_experts", c.num_local_experts);
  if (c.num_local_experts > 0) {
    put("num_experts_per_tok", c.num_experts_per_tok), put("moe_type", c.moe_type);
    if (c.moe_type == "gpt_oss") {
      put("swiglu_alpha", c.swiglu_alpha), put("swiglu_limit", c.swiglu_limit);
    } else {
      put("moe_intermediate_size",
          c.moe_intermediate_size > 0 ? c.moe_intermediate_size : c.intermediate_size);
      put("norm_topk_prob", c.norm_topk_prob);
      put("shared_expert_intermediate_size", c.shared_expert_intermediate_size);
    }
    std::vector<bool> sparse;
    for (int64_t l = 0; l < c.num_hidden_layers; ++l) sparse.push_back(c.is_sparse(l));
    put("sparse_layers", sparse);
  }
  return f;
}

}  // namespace

std::string decoder_config_to_hf_json(const DecoderConfig& c, Dtype dtype) {
  c.validate(kSave);
  const std::string& type = c.model_type;
  json j = {{"architectures", {architecture(type)}}, {"model_type", type}};
  j["vocab_size"] = c.vocab_size;
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_hidden_layers;
  j["num_attention_heads"] = c.num_attention_heads;
  j["num_key_value_heads"] = c.num_key_value_heads;
  j["head_dim"] = c.head_size();
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["rms_norm_eps"] = c.rms_norm_eps;
  j["rope_theta"] = c.rope_theta;
  if (c.rope_type != "default") {
    json rs = {{"rope_type", c.rope_type}, {"factor", c.rope_factor}};
    if (c.rope_type == "llama3") {
      rs["low_freq_factor"] = c.rope_low_freq_factor;
      rs["high_freq_factor"] = c.rope_high_freq_factor;
    }
    if (c.rope_type == "llama3" || c.rope_type == "yarn")
      rs["original_max_position_embeddings"] = c.rope_original_max_position_embeddings;
    if (c.rope_type == "yarn") {
      rs["beta_fast"] = c.rope_beta_fast;
      rs["beta_slow"] = c.rope_beta_slow;
      rs["truncate"] = c.rope_truncate;
      if (c.rope_attention_factor > 0) rs["attention_factor"] = c.rope_attention_factor;
    }
    j["rope_scaling"] = rs;
  }
  j["tie_word_embeddings"] = c.tie_word_embeddings;
  const std::string act = c.hidden_act == "gelu_tanh" ? "gelu_pytorch_tanh" : c.hidden_act;
  if (type.rfind("gemma", 0) == 0)
    j["hidden_activation"] = act;
  else
    j["hidden_act"] = act;
  // q, k, v and o (qwen2, qwen2_moe: q, k, v; mistral, mixtral: none)
  if (type == "qwen2_moe")
    j["qkv_bias"] = c.qkv_bias;
  else if (type != "qwen2" && type != "mistral" && type != "mixtral")
    j["attention_bias"] = c.qkv_bias;
  if (type == "llama") j["mlp_bias"] = c.mlp_bias;
  if (type == "qwen2" || type == "qwen3" || type == "qwen3_moe" || type == "qwen2_moe")
    j["use_sliding_window"] = false;
  if (type == "qwen3_moe" || type == "qwen2_moe") {
    j["num_experts"] = c.num_local_experts;
    j["num_experts_per_tok"] = c.num_experts_per_tok;
    j["moe_intermediate_size"] =
        c.moe_intermediate_size > 0 ? c.moe_intermediate_size : c.intermediate_size;
    j["norm_topk_prob"] = c.norm_topk_prob;
    j["decoder_sparse_step"] = c.decoder_sparse_step;
    j["mlp_only_layers"] = c.mlp_only_layers;
  }
  if (type == "qwen2_moe") j["shared_expert_intermediate_size"] = c.shared_expert_intermediate_size;
  if (type == "mixtral") {
    j["num_local_experts"] = c.num_local_experts;
    j["num_experts_per_tok"] = c.num_experts_per_tok;
  }
  if (type == "gemma2" || type == "gemma3_text") {
    j["query_pre_attn_scalar"] =
        number(c.query_pre_attn_scalar > 0 ? c.query_pre_attn_scalar : double(c.head_size()));
    j["attn_logit_softcapping"] = null_if_zero(c.attn_logit_softcapping);
    j["final_logit_softcapping"] = null_if_zero(c.final_logit_softcapping);
  }
  if (type == "gemma3_text")
    j["rope_local_base_freq"] = c.rope_local_base_freq > 0 ? c.rope_local_base_freq : c.rope_theta;
  // every layer or none slides (a mixture is lost, and refused below)
  if (type == "mistral" || type == "mixtral")
    j["sliding_window"] = c.is_sliding(0) ? json(c.sliding_window) : json(nullptr);
  if (type == "gemma2" || type == "gemma3_text" || type == "gpt_oss") {
    j["sliding_window"] = c.sliding_window > 0 ? json(c.sliding_window) : json(nullptr);
    json types = json::array();
    for (int64_t l = 0; l < c.num_hidden_layers; ++l)
      types.push_back(c.is_sliding(l) ? "sliding_attention" : "full_attention");
    j["layer_types"] = types;
  }
  if (type == "gpt_oss") {
    j["num_local_experts"] = c.num_local_experts;
    j["num_experts_per_tok"] = c.num_experts_per_tok;
    j["swiglu_alpha"] = c.swiglu_alpha;
    j["swiglu_limit"] = c.swiglu_limit;
    // Experts kept in MXFP4 are written as released: blocks and scales, which this field
    // announces (the modules it lists are those gpt-oss's releases keep in bfloat16).
    if (c.mxfp4_experts)
      j["quantization_config"] = {{"modules_to_not_convert",
                                   {"model.layers.*.self_attn", "model.layers.*.mlp.router",
                                    "model.embed_tokens", "lm_head"}},
                                  {"quant_method", "mxfp4"}};
  }
  j["torch_dtype"] = dtype_name(dtype).substr(6);  // "torch.bfloat16" -> "bfloat16"
  const std::string text = j.dump(2) + "\n";

  // What the family's fields cannot say (a Llama with QK-norm, a Qwen2 without q/k/v biases, ...)
  // would be lost: refused, naming the fields.
  const auto want = effective(c), got = effective(decoder_config_from_hf_json(text, kSave));
  std::string lost;
  for (const auto& [k, v] : want) {
    const auto it = got.find(k);
    if (it == got.end() || it->second != v)
      lost += (lost.empty() ? "" : ", ") + k + " " + v + " (written as " +
              (it == got.end() ? std::string("nothing") : it->second) + ")";
  }
  if (!lost.empty())
    detail::fail(kSave, "a ", type, " config.json cannot hold this model's ", lost);
  return text;
}

void save_hf_decoder(const Decoder& model, const std::string& dir, bool dequantize_mxfp4) {
  const NamedTensors params = model.named_parameters();
  const Dtype dtype = params.empty() ? Dtype::Float32 : params.front().second.dtype();
  DecoderConfig c = model.config();
  const bool kept = c.mxfp4_experts;
  if (dequantize_mxfp4) c.mxfp4_experts = false;
  const std::string config = decoder_config_to_hf_json(c, dtype);
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir, ec))
    detail::fail(kSave, "cannot create the directory '", dir, "'",
                 ec ? ": " + ec.message() : std::string());
  // Each file written whole or not at all; the weights first, so that a directory with the new
  // config.json has the new weights.
  NamedTensors named;
  for (const auto& [name, t] : params) named.emplace_back(hf_parameter_name(c.model_type, name), t);
  // Experts kept in MXFP4: as transformers' pair NAME_blocks (E, R, C / 32, 16) and NAME_scales
  // (E, R, C / 32), the bytes as they are held; or, asked to dequantize, decoded in the
  // parameters' dtype as transformers' dequantized model has them, (E, C, R).
  std::vector<io::ByteTensor> u8;
  if (kept)
    for (std::size_t l = 0; l < model.model->layers.size(); ++l) {
      const DecoderExperts& ex = *model.model->layers[l]->moe->experts;
      for (const auto* m : {&ex.gate_up_mxfp4, &ex.down_mxfp4}) {
        const std::string name = "model.layers." + std::to_string(l) + ".mlp.experts." +
                                 (m == &ex.gate_up_mxfp4 ? "gate_up_proj" : "down_proj");
        if (!dequantize_mxfp4) {
          u8.push_back({name + "_blocks", Shape{m->count, m->rows, m->cols / 32, 16}, m->blocks});
          u8.push_back({name + "_scales", Shape{m->count, m->rows, m->cols / 32}, m->scales});
          continue;
        }
        std::vector<Tensor> experts;
        for (int64_t e = 0; e < m->count; ++e)
          experts.push_back(mxfp4_dequantize(*m, e, dtype).transpose(0, 1));
        named.emplace_back(name, stack(experts).contiguous());
      }
    }
  io::save_safetensors((fs::path(dir) / "model.safetensors").string(), named, {{"format", "pt"}},
                       u8);
  io::write_file_atomic((fs::path(dir) / "config.json").string(), config);
}

}  // namespace attn::nn

// attn.nn.Decoder over attn::nn::Decoder (include/attn/decoder.h) and its Hugging Face loader
// (include/attn/hf_decoder.h): _C.decoder.
#include <attn/decoder.h>
#include <attn/hf_decoder.h>
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "convert.h"

namespace attn::python {

void register_decoder(py::module_& m) {
  py::module_ d =
      m.def_submodule("decoder", "the decoder of Llama, Qwen, Gemma and gpt-oss (attn/decoder.h)");
  py::class_<nn::DecoderConfig>(d, "DecoderConfig")
      .def(py::init<>())
      .def_readwrite("model_type", &nn::DecoderConfig::model_type)
      .def_readwrite("vocab_size", &nn::DecoderConfig::vocab_size)
      .def_readwrite("hidden_size", &nn::DecoderConfig::hidden_size)
      .def_readwrite("intermediate_size", &nn::DecoderConfig::intermediate_size)
      .def_readwrite("num_hidden_layers", &nn::DecoderConfig::num_hidden_layers)
      .def_readwrite("num_attention_heads", &nn::DecoderConfig::num_attention_heads)
      .def_readwrite("num_key_value_heads", &nn::DecoderConfig::num_key_value_heads)
      .def_readwrite("head_dim", &nn::DecoderConfig::head_dim)
      .def_readwrite("max_position_embeddings", &nn::DecoderConfig::max_position_embeddings)
      .def_readwrite("rms_norm_eps", &nn::DecoderConfig::rms_norm_eps)
      .def_readwrite("rope_theta", &nn::DecoderConfig::rope_theta)
      .def_readwrite("rope_type", &nn::DecoderConfig::rope_type)
      .def_readwrite("rope_factor", &nn::DecoderConfig::rope_factor)
      .def_readwrite("qkv_bias", &nn::DecoderConfig::qkv_bias)
      .def_readwrite("o_bias", &nn::DecoderConfig::o_bias)
      .def_readwrite("mlp_bias", &nn::DecoderConfig::mlp_bias)
      .def_readwrite("qk_norm", &nn::DecoderConfig::qk_norm)
      .def_readwrite("tie_word_embeddings", &nn::DecoderConfig::tie_word_embeddings)
      .def_readwrite("hidden_act", &nn::DecoderConfig::hidden_act)
      .def_readwrite("norm_plus_one", &nn::DecoderConfig::norm_plus_one)
      .def_readwrite("sandwich_norms", &nn::DecoderConfig::sandwich_norms)
      .def_readwrite("scale_embeddings", &nn::DecoderConfig::scale_embeddings)
      .def_readwrite("query_pre_attn_scalar", &nn::DecoderConfig::query_pre_attn_scalar)
      .def_readwrite("attn_logit_softcapping", &nn::DecoderConfig::attn_logit_softcapping)
      .def_readwrite("final_logit_softcapping", &nn::DecoderConfig::final_logit_softcapping)
      .def_readwrite("sliding_window", &nn::DecoderConfig::sliding_window)
      .def_readwrite("sliding_layers", &nn::DecoderConfig::sliding_layers)
      .def_readwrite("rope_local_base_freq", &nn::DecoderConfig::rope_local_base_freq)
      .def_readwrite("rope_low_freq_factor", &nn::DecoderConfig::rope_low_freq_factor)
      .def_readwrite("rope_high_freq_factor", &nn::DecoderConfig::rope_high_freq_factor)
      .def_readwrite("rope_original_max_position_embeddings",
                     &nn::DecoderConfig::rope_original_max_position_embeddings)
      .def_readwrite("rope_beta_fast", &nn::DecoderConfig::rope_beta_fast)
      .def_readwrite("rope_beta_slow", &nn::DecoderConfig::rope_beta_slow)
      .def_readwrite("rope_attention_factor", &nn::DecoderConfig::rope_attention_factor)
      .def_readwrite("rope_truncate", &nn::DecoderConfig::rope_truncate)
      .def_readwrite("attention_sinks", &nn::DecoderConfig::attention_sinks)
      .def_readwrite("norm_in_float32", &nn::DecoderConfig::norm_in_float32)
      .def_readwrite("num_local_experts", &nn::DecoderConfig::num_local_experts)
      .def_readwrite("num_experts_per_tok", &nn::DecoderConfig::num_experts_per_tok)
      .def_readwrite("swiglu_alpha", &nn::DecoderConfig::swiglu_alpha)
      .def_readwrite("swiglu_limit", &nn::DecoderConfig::swiglu_limit)
      .def_readwrite("moe_type", &nn::DecoderConfig::moe_type)
      .def_readwrite("moe_intermediate_size", &nn::DecoderConfig::moe_intermediate_size)
      .def_readwrite("norm_topk_prob", &nn::DecoderConfig::norm_topk_prob)
      .def_readwrite("shared_expert_intermediate_size",
                     &nn::DecoderConfig::shared_expert_intermediate_size)
      .def_readwrite("decoder_sparse_step", &nn::DecoderConfig::decoder_sparse_step)
      .def_readwrite("mlp_only_layers", &nn::DecoderConfig::mlp_only_layers)
      .def_readwrite("mxfp4_experts", &nn::DecoderConfig::mxfp4_experts);
  py::class_<nn::Decoder, std::shared_ptr<nn::Decoder>>(d, "Decoder")
      .def(py::init([](const nn::DecoderConfig& c, const py::object& g) {
             Generator* gen = gen_arg(g);
             return without_gil([&] { return std::make_shared<nn::Decoder>(c, gen); });
           }),
           py::arg("config"), py::arg("generator") = py::none())
      .def("named_parameters",
           [](const nn::Decoder& m) {
             std::vector<std::pair<std::string, Tensor>> out;
             for (auto& [n, t] : m.named_parameters()) out.emplace_back(n, t);
             return out;
           })
      .def_property_readonly("config", &nn::Decoder::config)
      .def("train", [](nn::Decoder& m, bool on) { m.train(on); })
      .def("set_mxfp4_int8_activations", &nn::Decoder::set_mxfp4_int8_activations, py::arg("on"))
      .def(
          "to_dtype", [](nn::Decoder& m, Dtype dt) { m.to(dt); }, release(), py::arg("dtype"))
      .def(
          "forward",
          [](const nn::Decoder& m, const Tensor& ids, int64_t logits_to_keep) {
            return m.forward(ids, logits_to_keep);
          },
          release(), py::arg("ids"), py::arg("logits_to_keep") = 0)
      .def(
          "generate",
          [](const nn::Decoder& m, const Tensor& ids, int64_t max_new_tokens, double temperature,
             int64_t top_k, double top_p, double min_p, double repetition_penalty,
             const std::vector<int64_t>& stop_tokens, const py::object& g,
             const std::function<void(const Tensor&)>& callback, int64_t window_length,
             int64_t sink_tokens) {
            nn::Decoder::GenerateOptions o;
            o.max_new_tokens = max_new_tokens;
            o.window_length = window_length;
            o.sink_tokens = sink_tokens;
            o.temperature = temperature;
            o.top_k = top_k;
            o.top_p = top_p;
            o.min_p = min_p;
            o.repetition_penalty = repetition_penalty;
            o.stop_tokens = stop_tokens;
            Generator* gen = gen_arg(g);
            if (!callback) return without_gil([&] { return m.generate(ids, o, gen); });
            // The callback runs Python: the GIL is taken back for each call.
            auto on_token = [&](const Tensor& t) {
              py::gil_scoped_acquire gil;
              callback(t);
            };
            return without_gil([&] { return m.generate(ids, o, gen, on_token); });
          },
          py::arg("ids"), py::arg("max_new_tokens"), py::arg("temperature") = 0.0,
          py::arg("top_k") = 0, py::arg("top_p") = 1.0, py::arg("min_p") = 0.0,
          py::arg("repetition_penalty") = 1.0, py::arg("stop_tokens") = std::vector<int64_t>(),
          py::arg("generator") = py::none(), py::arg("callback") = nullptr,
          py::arg("window_length") = 0, py::arg("sink_tokens") = 4);
  d.def(
      "next_token_probabilities",
      [](const Tensor& logits, const std::vector<int64_t>& history, double temperature,
         int64_t top_k, double top_p, double min_p, double repetition_penalty) {
        nn::Decoder::GenerateOptions o;
        o.temperature = temperature, o.top_k = top_k, o.top_p = top_p, o.min_p = min_p;
        o.repetition_penalty = repetition_penalty;
        o.validate("next_token_probabilities");
        const Tensor l = logits.contiguous();
        if (l.dtype() != Dtype::Float32 || l.dim() != 1)
          throw Error("[next_token_probabilities] logits must be float32 (vocab)");
        return nn::next_token_probabilities(l.data_ptr<float>(), l.size(0), o, history);
      },
      py::arg("logits"), py::arg("history"), py::arg("temperature") = 1.0, py::arg("top_k") = 0,
      py::arg("top_p") = 1.0, py::arg("min_p") = 0.0, py::arg("repetition_penalty") = 1.0);
  d.def(
      "load_hf",
      [](const std::string& dir, Dtype dtype, bool dequantize_mxfp4) {
        return nn::load_hf_decoder(dir, dtype, dequantize_mxfp4);
      },
      release(), py::arg("dir"), py::arg("dtype") = Dtype::Float32,
      py::arg("dequantize_mxfp4") = false);
  d.def("config_from_hf_json", &nn::decoder_config_from_hf_json, py::arg("json"),
        py::arg("what") = "config.json");
  d.def("config_for_family", &nn::decoder_config_for_family, py::arg("model_type"));
  d.def("config_to_hf_json", &nn::decoder_config_to_hf_json, py::arg("config"),
        py::arg("dtype") = Dtype::Float32);
  d.def(
      "save_hf",
      [](const nn::Decoder& model, const std::string& dir, bool dequantize_mxfp4) {
        nn::save_hf_decoder(model, dir, dequantize_mxfp4);
      },
      release(), py::arg("model"), py::arg("dir"), py::arg("dequantize_mxfp4") = false);
}

}  // namespace attn::python

// Hugging Face GPT-2 checkpoints: attn's GPT (include/attn/gpt.h) loaded from, and exported to,
// the directory layout of transformers' GPT2LMHeadModel.save_pretrained(dir,
// safe_serialization=True):
//
//   DIR/config.json          GPT2Config as JSON (vocab_size, n_positions, n_embd, n_layer, n_head,
//                            n_inner, activation_function, layer_norm_epsilon, *_pdrop, ...)
//   DIR/model.safetensors    the weights, F32 (F16 and BF16 are widened to float32 on loading, as
//                            from_pretrained does by default), named "transformer.wte.weight",
//                            "transformer.h.0.attn.c_attn.weight", ... (with or without the
//                            "transformer." prefix); lm_head.weight is tied to wte and may be
//                            absent
//
// The mapping: GPT-2's Conv1D weights are stored (in, out), attn's Linear weights (out, in), so
// every c_attn / c_proj / c_fc weight is transposed; c_attn packs q, k, v along its output, as
// attn's in_proj_weight does along its rows. activation_function "gelu_new" (and
// "gelu_pytorch_tanh") is the tanh GELU, "gelu" the exact one. The attn.bias / attn.masked_bias
// buffers of older files are ignored. A model without biases (GPTConfig::bias false) exports zero
// biases, which is the same function.
//
// What attn's GPT cannot represent is refused with attn::Error "[load_hf_gpt2] 'DIR/config.json':
// ..." naming the field and its value: scale_attn_weights false, scale_attn_by_inverse_layer_idx
// or reorder_and_upcast_attn true, add_cross_attention true, tie_word_embeddings false, another
// activation, resid/embd/attn_pdrop that differ (attn has one dropout), a model_type other than
// gpt2. Weights are checked before the model is allocated: missing and unexpected keys are listed
// by name, a wrong shape names the key and both shapes, I64/BOOL tensors name the key and dtype
// (attn's GPT is float32).
#pragma once

#include <attn/gpt.h>
#include <attn/io.h>

#include <memory>
#include <string>
#include <string_view>

namespace attn::nn {

// config.json's text -> GPTConfig (fields transformers leaves out take GPT2Config's defaults).
// `what` names the file in error messages.
GPTConfig gpt_config_from_hf_json(std::string_view json, const std::string& what = "config.json");
// GPTConfig -> config.json's text (GPT2Config's fields, architectures ["GPT2LMHeadModel"]).
std::string gpt_config_to_hf_json(const GPTConfig& config);

// The weights of a GPT-2 safetensors file as attn GPT's state_dict (validated against `config`,
// see above). `what` names the file in error messages.
NamedTensors gpt_state_from_hf(const GPTConfig& config, const io::SafeTensors& st,
                               const std::string& what);
// The GPT's weights under GPT-2's names ("transformer." prefix, Conv1D layout), no lm_head.
NamedTensors gpt_state_to_hf(const GPT& model);

// Loads DIR/config.json and DIR/model.safetensors, in evaluation mode (dropout off) as
// transformers' from_pretrained. Throws attn::Error "[load_hf_gpt2] ..." naming the file (a
// missing file, a sharded or PyTorch-pickle-only checkpoint included).
std::shared_ptr<GPT> load_hf_gpt2(const std::string& dir);
// Writes DIR/config.json and DIR/model.safetensors (metadata {"format": "pt"}), each atomically
// (io::write_file_atomic); creates DIR if missing. transformers' GPT2LMHeadModel.from_pretrained
// loads the result.
void save_hf_gpt2(const GPT& model, const std::string& dir);

// Whether DIR looks like a Hugging Face checkpoint (holds config.json).
bool is_hf_checkpoint_dir(const std::string& dir);

}  // namespace attn::nn

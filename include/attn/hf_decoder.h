// Hugging Face checkpoints of the decoder families (include/attn/decoder.h): the directory that
// transformers' save_pretrained writes for LlamaForCausalLM, MistralForCausalLM,
// MixtralForCausalLM, Qwen2ForCausalLM, Qwen2MoeForCausalLM, Qwen3ForCausalLM,
// Qwen3MoeForCausalLM, GemmaForCausalLM, Gemma2ForCausalLM, Gemma3ForCausalLM (text) and
// GptOssForCausalLM (its experts in float, or as MXFP4 blocks and scales, kept so), and the
// language model of Gemma3ForConditionalGeneration (model_type gemma3: text_config, the tensors
// language_model.model.*; the vision tower is not read):
//
//   DIR/config.json                    model_type and the sizes, RoPE, norms and attention fields
//   DIR/model.safetensors              the weights under transformers' names, or
//   DIR/model.safetensors.index.json   a sharded checkpoint: {"weight_map": {name: shard}}
//
// In float32 (the default, as transformers' from_pretrained) weights are read tensor by tensor
// straight into the model's parameters (no copy of a file is held), F16 and BF16 widened. With
// dtype bfloat16 or float16 the model keeps and computes in that dtype (torch_dtype=...): weights
// stored in it are the file's own pages, memory-mapped copy-on-write (SafeTensorsFile::map), and
// others are rounded to it. lm_head.weight is absent (or ignored) when tie_word_embeddings holds.
//
// Refused with attn::Error "[load_hf_decoder] 'DIR/config.json': ..." naming the field: a
// model_type other than those above, a config field that none of them has (a feature attn would
// silently ignore), values attn cannot represent (rope_scaling other than llama3 / linear on
// Gemma 3, use_sliding_window on Qwen2, an activation other than SiLU / GELU-tanh). Weights:
// missing and unexpected names listed, a wrong shape with both shapes, a shard that the index
// names but the directory lacks, a tensor the index puts in a shard that lacks it. Nothing is
// allocated before the config and every header passed their checks.
#pragma once

#include <attn/decoder.h>

#include <memory>
#include <string>
#include <string_view>

namespace attn::nn {

// config.json's text -> DecoderConfig (fields transformers leaves out take its defaults for the
// model_type). `what` names the file in error messages.
DecoderConfig decoder_config_from_hf_json(std::string_view json,
                                          const std::string& what = "config.json");

// A config of attn's small default sizes (DecoderConfig's) with what makes the family's model
// what it is, as transformers' config class of that model_type has it by default: biases, QK-norm,
// norms (Gemma's 1 + weight, sandwich norms, float32 norms), activation, embedding scaling and
// tying, RoPE base and scaling, softcaps, attention sinks, and the mixture's kind (Mixtral and
// the Qwen MoEs: moe_type qwen3_moe; Mixtral's renormalised top-k). Sizes, experts and sliding
// layers are left to the caller. attn::Error for another model_type (gemma3, a model with images,
// included: its language model is gemma3_text).
DecoderConfig decoder_config_for_family(const std::string& model_type);

// The name that parameter `name` of a `model_type` Decoder has in the family's checkpoints:
// attn's own but for Mixtral's mixtures (mlp.gate -> block_sparse_moe.gate,
// mlp.experts.E.gate_proj / up_proj / down_proj -> block_sparse_moe.experts.E.w1 / w3 / w2).
std::string hf_parameter_name(const std::string& model_type, const std::string& name);

// Loads DIR (see above), in evaluation mode, its parameters in `dtype` (float32, bfloat16 or
// float16; attn::Error otherwise). gpt-oss's experts stored in MXFP4 stay in MXFP4
// (DecoderConfig::mxfp4_experts: a quarter of bfloat16's bytes, multiplied by mxfp4_linear), all
// of them or none; with dequantize_mxfp4, or when config.json's quantization_config says
// "dequantize": true, they are decoded into the parameters gate_up_proj and down_proj in
// `dtype`, as transformers' Mxfp4Config(dequantize=True) does.
std::shared_ptr<Decoder> load_hf_decoder(const std::string& dir, Dtype dtype = Dtype::Float32,
                                         bool dequantize_mxfp4 = false);

// The config.json that the family's transformers class reads as `c` (architectures, model_type,
// the sizes, rope_scaling, the family's fields, layer_types; torch_dtype `dtype`). attn::Error
// "[save_hf_decoder] ..." when the family's fields cannot say what c does (a Llama with QK-norm,
// a Gemma with a sliding window, a Qwen2 without q/k/v biases, ...), naming the fields: the file
// is read back and compared before it is returned.
std::string decoder_config_to_hf_json(const DecoderConfig& c, Dtype dtype = Dtype::Float32);

// Writes DIR/model.safetensors (the parameters under transformers' names, in their dtype; no
// lm_head.weight when tied) and DIR/config.json, creating DIR: what transformers'
// save_pretrained writes, so that its from_pretrained (and load_hf_decoder) read this model.
// Each file is replaced whole or not at all, the weights first. Experts kept in MXFP4
// (DecoderConfig::mxfp4_experts) are written as gpt-oss is released: NAME_blocks and
// NAME_scales (U8) and a quantization_config (quant_method mxfp4), the bytes held; with
// dequantize_mxfp4, decoded into NAME in the parameters' dtype and without a
// quantization_config, as transformers' dequantized model saves them (all of them are then
// decoded in memory for the write: the bytes of a dequantized model's experts).
void save_hf_decoder(const Decoder& model, const std::string& dir, bool dequantize_mxfp4 = false);

}  // namespace attn::nn

// The config.json reader of Hugging Face decoders (attn::nn::decoder_config_from_hf_json: every
// family's fields, rope_scaling / rope_parameters, layer_types) on arbitrary text.
// It succeeds or throws attn::Error. An accepted config is valid (validate() passes) and, when
// small enough to build here, is a working model: a Decoder of it runs a forward of three tokens
// and a cached decoding step, with finite logits of the right shape.
#include <attn/decoder.h>
#include <attn/hf_decoder.h>

#include <cmath>
#include <string>

#include "fuzz_util.h"

namespace {

using attn::nn::DecoderConfig;

// Small enough to build and run in a fuzzing iteration.
bool small(const DecoderConfig& c) {
  return c.vocab_size <= 64 && c.hidden_size <= 64 && c.intermediate_size <= 64 &&
         c.num_hidden_layers <= 4 && c.num_attention_heads <= 8 && c.head_size() <= 32 &&
         c.num_local_experts <= 8 && c.max_position_embeddings >= 4;
}

void run(const DecoderConfig& c) {
  attn::Generator gen(1);
  attn::nn::Decoder m(c, &gen);
  attn::Tensor ids = attn::empty({1, 3}, attn::Dtype::Int64);
  for (int64_t i = 0; i < 3; ++i) ids.data_ptr<int64_t>()[i] = i % c.vocab_size;
  const attn::Tensor logits = m.forward(ids);
  FUZZ_CHECK(logits.dim() == 3 && logits.size(1) == 3 && logits.size(2) == c.vocab_size);
  attn::nn::DecoderCache cache;
  const attn::Tensor step = m.forward_cached(ids.narrow(1, 0, 1), cache);
  FUZZ_CHECK(step.size(2) == c.vocab_size && cache.length == 1);
  const attn::Tensor lc = logits.contiguous();
  for (int64_t i = 0; i < lc.numel(); ++i) FUZZ_CHECK(std::isfinite(lc.data_ptr<float>()[i]));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string text(attn_fuzz::as_view(data, size));
  DecoderConfig c;
  try {
    c = attn::nn::decoder_config_from_hf_json(text, "config.json");
  } catch (const attn::Error&) {
    return 0;
  }
  c.validate("fuzz_hf_config");  // accepted: valid (throws, and so fails, otherwise)
  FUZZ_CHECK(c.sliding_layers.empty() ||
             int64_t(c.sliding_layers.size()) == c.num_hidden_layers);
  if (small(c)) run(c);
  return 0;
}

// The checkpoint readers of the CLI on arbitrary bytes, as they run after reading the file:
// `attn generate` (parse_checkpoint for Generate, then generate_from_checkpoint with a couple of
// tokens: model built from the file's config, weights loaded, sampling) and `attn train --resume`
// (parse_checkpoint for Resume, then weights, optimiser state and generator state restored).
// Every step either succeeds or throws attn::Error; what was accepted is consistent.
#include <optional>
#include <sstream>

#include "../tools/attn/train.h"
#include "fuzz_util.h"

namespace {

using attn::tools::Checkpoint;
using attn::tools::CheckpointUse;

const std::string kPath = "fuzz/ckpt.safetensors";

void check_accepted(const Checkpoint& ck, CheckpointUse use) {
  ck.config.validate("fuzz");  // throws (escapes: a crash) if the reader let a bad config through
  FUZZ_CHECK(ck.tokenizer.vocab_size() == ck.config.vocab_size);
  if (use == CheckpointUse::Resume) {
    FUZZ_CHECK(ck.step >= 0);
    FUZZ_CHECK(ck.rng_state.size() == attn::Generator::kStateSize);
    for (const auto& e : ck.history) FUZZ_CHECK(e.step < ck.step);
  }
}

void generate(const Checkpoint& ck) {
  attn::tools::GenerateArgs a;
  a.ckpt = kPath;
  a.options.max_new_tokens = 2;
  a.options.top_k = 3;
  a.threads = 1;
  std::ostringstream out, err;
  try {
    attn::tools::generate_from_checkpoint(ck, kPath, a, out, err);
  } catch (const attn::Error&) {
    return;
  }
  FUZZ_CHECK(!out.str().empty());
}

void resume(const Checkpoint& ck) {
  attn::tools::TrainOptions o;
  o.model = ck.config;
  attn::Generator gen(1);
  attn::nn::GPT model(ck.config, &gen);
  try {
    attn::tools::load_checkpoint_weights(model, ck, kPath, CheckpointUse::Resume);
    attn::optim::AdamW opt = attn::tools::make_optimizer(model, o);
    attn::tools::restore_training_state(ck, kPath, opt, gen);
  } catch (const attn::Error&) {
    return;
  }
  // The state is normalised on the way in (ignored bytes and bits dropped), so compare what it
  // became: stable under another round trip, and drawing the same numbers.
  const std::vector<uint8_t> state = gen.get_state();
  attn::Generator again(2);
  again.set_state(state);
  FUZZ_CHECK(again.get_state() == state);
  FUZZ_CHECK(again.random() == gen.random());
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  attn_fuzz::init_single_thread();
  return 0;
}

extern "C" std::size_t LLVMFuzzerCustomMutator(uint8_t* data, std::size_t size,
                                               std::size_t max_size, unsigned seed) {
  return attn_fuzz::mutate_safetensors(data, size, max_size, seed);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string_view bytes = attn_fuzz::as_view(data, size);
  for (CheckpointUse use : {CheckpointUse::Generate, CheckpointUse::Resume}) {
    std::optional<Checkpoint> ck;
    try {
      ck.emplace(attn::tools::parse_checkpoint(bytes, kPath, use));
    } catch (const attn::Error&) {
      continue;
    }
    check_accepted(*ck, use);
    if (use == CheckpointUse::Generate)
      generate(*ck);
    else
      resume(*ck);
  }
  return 0;
}

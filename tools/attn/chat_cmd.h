// `attn chat --ckpt DIR`: a streaming terminal chat with a Hugging Face Llama / Qwen / Gemma
// directory (config.json, the weights, tokenizer.json, and the chat template of
// tokenizer_config.json or chat_template.jinja).
#pragma once

#include <attn/decoder.h>

#include <istream>
#include <ostream>
#include <span>
#include <string>

namespace attn::tools {

struct ChatArgs {
  std::string ckpt;
  std::string system;                    // a system message first, when not empty
  nn::Decoder::GenerateOptions options;  // max_new_tokens, temperature, top_k, top_p, min_p, ...
  std::string stop;                      // a text that ends a reply (not shown), when not empty
  uint64_t seed = 1337;
  int64_t threads = 0;
  Dtype dtype = Dtype::Float32;  // the model's (load_hf_decoder)
  // The most tokens the conversation may hold (0: the model's max_position_embeddings). A turn
  // that would not fit drops the oldest exchanges; a reply that fills it shifts the cache
  // (Decoder::evict: the first sink_tokens stay, the oldest half of the others go).
  int64_t context = 0;
  int64_t sink_tokens = 4;
};
// The flags of `attn chat`. Throws FlagError.
ChatArgs parse_chat_args(std::span<const std::string> args);
// Reads the user's turns from `in` (a line each; "/reset" clears the conversation, "/exit" or the
// end of input quits) and streams each reply to `out`; timing per reply goes to `err`.
int chat_session(const ChatArgs& a, std::istream& in, std::ostream& out, std::ostream& err);
int chat_command(std::span<const std::string> args, std::ostream& out, std::ostream& err);

inline constexpr const char* kChatUsage = "--ckpt DIR";
inline constexpr const char* kChatSummary =
    "chat with a Hugging Face Llama, Qwen or Gemma directory (its tokenizer and chat template)";
inline constexpr const char* kChatHelp =
    "  Each line read from stdin is a user turn; the reply streams as it is sampled. The\n"
    "  conversation is rendered with the chat template of DIR/tokenizer_config.json (or\n"
    "  DIR/chat_template.jinja) and encoded with DIR/tokenizer.json; the key/value cache is kept\n"
    "  between turns where the rendered conversation extends what it holds. /reset starts over,\n"
    "  /exit (or the end of input) quits. A reply ends at an eos_token_id of config.json or\n"
    "  generation_config.json, the template's eos_token, --stop, or --max-new-tokens.\n"
    "  The conversation holds at most --context tokens. Before a turn, the oldest exchanges\n"
    "  (a user message and its reply; the system message stays) are dropped until the rendered\n"
    "  conversation leaves room for min(--max-new-tokens, context / 4) tokens of reply; a message\n"
    "  that does not fit alone is refused and the conversation kept. A reply that reaches the\n"
    "  context shifts the cache as llama.cpp does: the first --sink-tokens tokens stay and the\n"
    "  oldest half of the others go (StreamingLLM), so the reply goes on.\n"
    "    --system TEXT             a system message first\n"
    "    --max-new-tokens N        512\n"
    "    --temperature T           0.7 (0: greedy)\n"
    "    --top-k K                 0 (none)\n"
    "    --top-p P                 1.0 (none)\n"
    "    --min-p P                 0.0 (none)\n"
    "    --repetition-penalty R    1.0 (none)\n"
    "    --stop TEXT               end a reply at this text\n"
    "    --seed N                  1337\n"
    "    --context N               the model's max_position_embeddings\n"
    "    --sink-tokens S           4: tokens a shift keeps at the start\n"
    "    --threads N               0 (all cores)\n"
    "    --dtype T                 float32 (default), bfloat16 or float16: the dtype the model\n"
    "                              keeps its weights and computes in\n";

}  // namespace attn::tools

// Hugging Face GPT-2 checkpoints in the CLI:
//
//   attn generate --ckpt DIR      (DIR with config.json: a Hugging Face GPT-2 directory) samples
//                                 from it with its byte-level BPE (vocab.json + merges.txt), or
//                                 with attn_tokenizer.json, the character tokenizer that
//                                 `attn export` writes next to an attn model.
//   attn export --ckpt DIR|FILE --out DIR
//                                 writes an attn checkpoint (`attn train`'s model.safetensors or
//                                 ckpt.safetensors) as a Hugging Face GPT-2 directory:
//                                 config.json, model.safetensors and attn_tokenizer.json.
#pragma once

#include <cstdint>
#include <filesystem>
#include <ostream>
#include <set>
#include <span>
#include <string>

#include "train.h"

namespace attn::tools {

// The file `attn export` writes the character tokenizer to (CharTokenizer::to_json).
inline constexpr const char* kHfCharTokenizerFile = "attn_tokenizer.json";

// The end-of-text ids of DIR/config.json and DIR/generation_config.json (eos_token_id, an id or a
// list); attn::Error "[command] 'file': not valid JSON".
std::set<int64_t> hf_eos_token_ids(const std::filesystem::path& dir, const char* command);

// `attn generate` on a Hugging Face directory (nn::is_hf_checkpoint_dir(a.ckpt)).
int generate_hf(const GenerateArgs& a, std::ostream& out, std::ostream& err);

struct ExportArgs {
  std::string ckpt, out;
};
// The flags of `attn export`. Throws FlagError.
ExportArgs parse_export_args(std::span<const std::string> args);
int export_command(std::span<const std::string> args, std::ostream& out, std::ostream& err);

inline constexpr const char* kExportUsage = "--ckpt DIR|FILE --out DIR";
inline constexpr const char* kExportSummary =
    "write an attn checkpoint as a Hugging Face GPT-2 directory";
inline constexpr const char* kExportHelp =
    "  Reads DIR/model.safetensors (or the .safetensors FILE given; a checkpoint of `attn train`)\n"
    "  and writes --out as transformers' GPT2LMHeadModel.save_pretrained would: config.json and\n"
    "  model.safetensors (GPT-2's names, Conv1D weights transposed, a model without biases gets\n"
    "  zero biases), plus attn_tokenizer.json, the character tokenizer. Each file is written\n"
    "  atomically. GPT2LMHeadModel.from_pretrained(DIR) then gives attn's logits, and\n"
    "  `attn generate --ckpt DIR` samples from the exported directory.\n"
    "\n"
    "    --ckpt DIR|FILE        attn checkpoint directory or file (required)\n"
    "    --out DIR              output directory, created if missing (required)\n";

}  // namespace attn::tools

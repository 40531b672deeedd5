// `attn train` and `attn generate`: a character-level GPT trained on a text file (nanoGPT's
// shakespeare_char recipe) with crash-safe checkpoints, and sampling from such a checkpoint.
//
//   attn train [--data PATH] [--out DIR] [--resume] [model and optimiser flags]
//   attn generate --ckpt DIR|FILE [--prompt TEXT] [--max-new-tokens N] [--temperature T] ...
//
// `attn train` is attn::train::train (include/attn/train.h: the loop, the checkpoint format, data
// and context parallelism under mpirun, the checks of non-finite values) behind its flags: each
// flag sets the TrainOptions field of its name ('-' for '_'); --no-progress is the tool's own
// (log lines instead of the progress bar).
//
// Fault injection is not in `attn`: the test-only attn_debug (built with the tests,
// ATTN_BUILD_TESTS) is this tool plus tools/attn/debug_faults.cpp, which adds the hidden --debug-*
// flags through TrainFlagExtension below and turns them into attn::train::TrainHooks (see
// debug_faults.cpp).
#pragma once

#include <attn/gpt.h>
#include <attn/train.h>

#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <ostream>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace attn::tools {

// A mistake on the command line of `train` or `generate` (unknown flag, missing or invalid
// value). The CLI reports it as a usage error (exit code 2).
class FlagError : public std::runtime_error {
 public:
  explicit FlagError(const std::string& what) : std::runtime_error(what) {}
};

// The library's names, used by the commands (generate, heatmap, export) and their tests.
using train::Checkpoint;
using train::checkpoint_model;
using train::CheckpointUse;
using train::load_checkpoint_weights;
using train::make_optimizer;
using train::parse_checkpoint;
using train::read_checkpoint;
using train::restore_training_state;
using train::ThreadsGuard;
using train::TrainEval;
using train::TrainOptions;

// ---- command lines: parsed and validated without running anything (fuzz/fuzz_cli.cpp) ----------

struct TrainArgs {
  TrainOptions options;
  bool no_progress = false;  // log lines instead of a progress bar on a terminal
  train::TrainHooks hooks;   // from the flags of the TrainFlagExtension (none in `attn`)
};
// The flags of `attn train` (the arguments after "train"). Throws FlagError.
TrainArgs parse_train_args(std::span<const std::string> args);

class Flags;
// More flags for `attn train`, added by a build of the tool: `valued` are their names (without
// "--"), each taking a value, and `hooks` reads them (only those given are set in the Flags),
// throwing FlagError for a bad value, and returns the hooks they ask for. The `attn` users run
// has none; attn_debug and the test programs link tools/attn/debug_faults.cpp, which sets the
// fault-injection flags here when the program starts.
struct TrainFlagExtension {
  std::vector<std::string> valued;
  std::function<train::TrainHooks(const Flags&)> hooks;
};
// Sets the extension (or none); returns the previous one.
TrainFlagExtension set_train_flag_extension(TrainFlagExtension extension);

struct GenerateArgs {
  std::string ckpt;  // directory or file, non-empty
  bool has_prompt = false;
  std::string prompt;
  nn::GPT::GenerateOptions options;  // max_new_tokens, temperature, top_k, use_cache
  uint64_t seed = 1337;
  int64_t threads = 0;
  // --kv-dtype: "" (the contiguous float32 cache) or a paged cache of "float32", "bfloat16",
  // "float16", "int8" (nn::GPT::generate_paged).
  std::string kv_dtype;
  // --dtype: the dtype a Llama / Qwen / Gemma directory's model computes in (load_hf_decoder);
  // GPT checkpoints compute in float32 only.
  Dtype dtype = Dtype::Float32;
  // --window-length, --sink-tokens: StreamingLLM for a Llama / Qwen / Gemma directory
  // (nn::Decoder::GenerateOptions); 0: the cache keeps every token.
  int64_t window_length = 0, sink_tokens = 4;
};
// The flags of `attn generate` (the arguments after "generate"). Throws FlagError.
GenerateArgs parse_generate_args(std::span<const std::string> args);

// ---- checkpoints ------------------------------------------------------------------------------

// The checkpoint file `--ckpt` names: DIR/model.safetensors for a directory, else the path itself.
// Throws attn::Error "[command] no checkpoint 'path' (train one with ...)" when it does not exist.
std::string checkpoint_file(const std::string& ckpt, const char* command);
// `attn generate` after its arguments and checkpoint are read: loads the weights into a new model
// and streams the continuation of the prompt to `out` (timing to `err`).
void generate_from_checkpoint(const Checkpoint& ck, const std::string& path, const GenerateArgs& a,
                              std::ostream& out, std::ostream& err);
// The prompt's ids from `encode`, its attn::Error reported as "[generate] the prompt cannot be
// encoded with the checkpoint's vocabulary: ...".
std::vector<int64_t> encode_prompt(const std::function<std::vector<int64_t>()>& encode);
// attn::Error when `a` asks what a GPT (`model`, for the message) cannot do: --window-length (its
// learned positions end at its block, so its cache cannot be shifted) or a --dtype other than
// float32 (GPT checkpoints compute in float32).
void refuse_decoder_options_for_gpt(const GenerateArgs& a, const std::string& model);
// The part of `attn generate` every model shares: crops ids to the model's last block, writes
// `shown`, streams the continuation (each new id through `decode`) to `out`, ends the output with
// a newline unless its last byte (`last` before anything is sampled) is one, and writes the timing
// line to `err`. The model is in eval mode.
void stream_generation(const nn::GPT& model, std::vector<int64_t> ids, const std::string& shown,
                       char last, const std::function<std::string(int64_t)>& decode,
                       const GenerateArgs& a, std::ostream& out, std::ostream& err);

// The handlers: `args` are the arguments after the command name. Results go to `out`; `err`
// receives diagnostics that are not results (generate's timing line). attn::Error (bad data,
// unreadable checkpoint, non-finite loss) propagates; so does FlagError.
int train_command(std::span<const std::string> args, std::ostream& out, std::ostream& err);
int generate_command(std::span<const std::string> args, std::ostream& out, std::ostream& err);

// Adapts a handler to main.cpp's command table: FlagError becomes the CLI's UsageError type and
// diagnostics go to std::cerr.
template <typename UsageErrorT,
          int (*Handler)(std::span<const std::string>, std::ostream&, std::ostream&)>
int run_command(std::span<const std::string> args, std::ostream& out) {
  try {
    return Handler(args, out, std::cerr);
  } catch (const FlagError& e) {
    throw UsageErrorT(e.what());
  }
}

// Table entries (usage line, summary, further help lines).
inline constexpr const char* kTrainUsage = "[options]";
inline constexpr const char* kTrainSummary =
    "train a character-level GPT on a text file, with checkpoints";
inline constexpr const char* kTrainHelp =
    "  Trains nanoGPT's model on the characters of a UTF-8 text file (default: Debian's\n"
    "  /usr/share/games/fortunes/songs-poems, installed by scripts/setup.sh), evaluates every\n"
    "  --eval-interval steps, and writes model.safetensors and ckpt.safetensors (atomically) and\n"
    "  loss.png to --out. One run at a time per --out: DIR/train.lock keeps a second one out.\n"
    "  Programs run the same loop through attn::train::train (C++, <attn/train.h>) or\n"
    "  attn.train.train (Python), with the flags' names as options (--max-iters: max_iters).\n"
    "  Every flag takes `--flag VALUE` or `--flag=VALUE`.\n"
    "\n"
    "  data and output:\n"
    "    --data PATH            training text (UTF-8); 90% train, 10% validation\n"
    "    --out DIR              checkpoint directory, created if missing (default out)\n"
    "    --resume               continue from DIR/ckpt.safetensors (model flags must match)\n"
    "  model:\n"
    "    --n-layer N            transformer blocks (default 4)\n"
    "    --n-head N             attention heads (default 4; must divide --n-embd)\n"
    "    --n-embd N             embedding width (default 128)\n"
    "    --block-size N         context length (default 64)\n"
    "    --dropout P            dropout probability in [0, 1) (default 0.0)\n"
    "    --bias, --no-bias      biases in Linear layers and LayerNorms (default --no-bias,\n"
    "                           nanoGPT's)\n"
    "  optimisation:\n"
    "    --batch-size N         sequences per step (default 12)\n"
    "    --max-iters N          training steps (default 2000)\n"
    "    --lr LR                peak learning rate (default 1e-3)\n"
    "    --min-lr LR            final learning rate (default 1e-4)\n"
    "    --warmup-iters N       linear warm-up steps (default 100)\n"
    "    --lr-decay-iters N     end of the cosine decay (default 2000)\n"
    "    --weight-decay W       AdamW weight decay of matrices and embeddings (default 0.1)\n"
    "    --beta1 B, --beta2 B   AdamW betas in [0, 1) (default 0.9, 0.99)\n"
    "    --grad-clip C          clip the gradient norm to C, 0 = off (default 1.0)\n"
    "    --seed S               random seed (default 1337)\n"
    "  several processes (mpirun -np N attn train ...; --batch-size is per rank):\n"
    "    --zero 0|1             1 shards the AdamW state over the ranks (ZeRO-1; default 0)\n"
    "    --bucket-kib N         gradient all-reduce bucket size in KiB (default 1024)\n"
    "    --context-parallel     shard every sequence over the ranks (ring attention) instead\n"
    "                           of the batch: block sizes beyond one rank's memory\n"
    "  packed documents:\n"
    "    --pack                 the text is documents: attention never crosses a document\n"
    "                           boundary, positions restart with each document, and a\n"
    "                           document's last character predicts nothing (varlen attention,\n"
    "                           nothing padded); the windows drawn are the same\n"
    "    --doc-separator S      what ends each document, \\n a newline, \\t a tab, \\\\ a\n"
    "                           backslash (default \\n%\\n, the fortune files' separator line)\n"
    "  non-finite values (NaN, inf):\n"
    "    --on-nonfinite stop|skip\n"
    "                           a step whose loss or gradients are not finite is refused with\n"
    "                           a message naming the step and the first offending parameter;\n"
    "                           stop (default) ends the run there, keeping the last checkpoint,\n"
    "                           like clip_grad_norm_(error_if_nonfinite=True) in PyTorch; skip\n"
    "                           leaves the weights and AdamW state alone and goes on, like\n"
    "                           torch.amp.GradScaler skipping optimizer.step(). (Plain PyTorch\n"
    "                           would step on and write NaN into the weights.) Non-finite\n"
    "                           weights always stop the run, and nothing non-finite is saved\n"
    "  evaluation and output:\n"
    "    --eval-interval N      evaluate and checkpoint every N steps (default 250)\n"
    "    --eval-iters N         batches per split and evaluation (default 200)\n"
    "    --log-interval N       steps between log lines without a progress bar (default 10)\n"
    "    --no-progress          log lines instead of the progress bar\n"
    "    --threads N            worker threads, 0 = all cores (divided among the ranks on\n"
    "                           one machine; default 0)\n"
    "\n"
    "  The last line is `done: iters=N ms_per_iter=X train_loss=Y val_loss=Z tokens_per_s=W`.\n";

inline constexpr const char* kGenerateUsage = "--ckpt DIR";
inline constexpr const char* kGenerateSummary =
    "sample text from a model of `attn train` or a Hugging Face GPT-2";
inline constexpr const char* kGenerateHelp =
    "  Loads DIR/model.safetensors (or the .safetensors FILE given) and continues the prompt,\n"
    "  printing each character as it is produced. Timing goes to stderr.\n"
    "  A DIR with config.json is a Hugging Face GPT-2 (GPT2LMHeadModel.save_pretrained's\n"
    "  config.json and model.safetensors, with GPT-2's vocab.json and merges.txt, or the\n"
    "  attn_tokenizer.json of `attn export`): the prompt is encoded with GPT-2's byte-level BPE,\n"
    "  an empty one starts from <|endoftext|>, and tokens (not characters) are counted.\n"
    "\n"
    "    --ckpt DIR|FILE        checkpoint directory or file (required)\n"
    "    --prompt TEXT          text to continue (default: a newline)\n"
    "    --max-new-tokens N     characters to generate (default 500)\n"
    "    --temperature T        softmax temperature, > 0 (default 0.8)\n"
    "    --top-k K              sample among the K most likely characters, 0 = all (default 200)\n"
    "    --seed S               random seed (default 1337)\n"
    "    --threads N            worker threads, 0 = all cores (default 0)\n"
    "    --no-cache             recompute the whole context at every step (no key/value cache)\n"
    "    --kv-dtype T           a paged key/value cache holding float32, bfloat16, float16 or\n"
    "                           int8 (per-32 scales): what a narrower cache does to the text; the\n"
    "                           prompt plus --max-new-tokens must fit in the model's block\n"
    "    --dtype T              float32 (default), bfloat16 or float16: a Llama / Qwen / Gemma\n"
    "                           directory's model keeps its weights and computes in T\n"
    "    --window-length N      a Llama / Qwen / Gemma directory: the key/value cache holds at\n"
    "                           most N tokens (StreamingLLM): when full, the first --sink-tokens\n"
    "                           stay and the oldest half of the others go, so the text can run\n"
    "                           past the model's context (default: keep every token)\n"
    "    --sink-tokens N        tokens kept at the start of the cache (default 4)\n";

}  // namespace attn::tools

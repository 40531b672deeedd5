// `attn train` and `attn generate`: a character-level GPT trained on a text file (nanoGPT's
// shakespeare_char recipe) with crash-safe checkpoints, and sampling from such a checkpoint.
//
//   attn train [--data PATH] [--out DIR] [--resume] [model and optimiser flags]
//   attn generate --ckpt DIR|FILE [--prompt TEXT] [--max-new-tokens N] [--temperature T] ...
//
// The training protocol (order of the random draws, evaluation, learning-rate schedule) is the
// one bench/train_torch.py follows in PyTorch, so that the two can be compared loss for loss.
//
// Checkpoints in --out, each written atomically (temporary file, fsync, rename):
//   model.safetensors  the model's state_dict and metadata {format: "attn-gpt", config (GPTConfig
//                      as JSON), tokenizer (CharTokenizer JSON), step}; read by `attn generate`
//                      and by PyTorch (safetensors.torch.load_file).
//   ckpt.safetensors   the weights, the optimiser state ("optim.state.{i}.*") and metadata
//                      {format: "attn-train", config, train_config (the flags), tokenizer, step
//                      (the next iteration to run), rng_state (hex of Generator::get_state()
//                      taken before that step's evaluation), history ([{step, train_loss,
//                      val_loss}, ...])}; read by `attn train --resume`.
// A resumed run repeats the evaluation of its first step (same weights, same generator state,
// hence the same numbers) and then continues exactly as the uninterrupted run would have. (Under
// mpirun, resuming with another global batch, N x --batch-size, is allowed: it continues the
// same model and optimizer state on other batches, so that evaluation then differs.)
//
// Data parallel: `mpirun -np N attn train ...` trains one model on N ranks. --batch-size is per
// rank; at every step all ranks draw the same N * batch-size offsets from the same generator and
// rank r trains on rows [r B, (r + 1) B), so N ranks with batch B see exactly the examples of one
// process with batch N B (and give its losses, to fp32 rounding). Gradients are averaged in buckets
// during the backward (attn::distributed::GradReducer); evaluation batches are sharded the same
// way and their losses averaged. Rank 0 alone prints and writes the files.
//
// Context parallel: `mpirun -np N attn train --context-parallel ...` splits every sequence instead
// of the batch: all ranks draw the same batch of --batch-size sequences, rank r keeps the zigzag
// shard of each (chunks r and 2N-1-r of 2N, attn::distributed::Sharding::Zigzag), and the model
// runs on its T/N tokens with ring attention across the ranks (GPT::forward_sharded). Losses and
// gradients are averaged over the ranks (every rank holds as many tokens), so N ranks give the
// losses of one process with the same batch. Needs --block-size divisible by 2N and --dropout 0.
//
// Hidden flag for tests: `attn train --debug-nan-at STEP` overwrites the token embedding with NaN
// just before training step STEP, so that the non-finite loss check can be exercised.
// `attn train --debug-fault KIND:RANK:STEP` makes rank RANK raise an error, die (SIGKILL) or hang
// just before step STEP, so that the distributed fault handling can be exercised.
// `attn train --debug-nonfinite KIND:STEP[:PARAM][@RANK]` (KIND loss-nan, loss-inf, grad-nan,
// grad-inf) multiplies the loss of step STEP by NaN or inf before the backward, or sets the first
// value of the gradient of PARAM (a state_dict name; default the last parameter) to NaN or inf
// after it (and after the data-parallel all-reduce), on every rank or on rank RANK only, so that
// --on-nonfinite can be exercised without poisoning the weights.
// `attn train --debug-slow-save MS` pauses every checkpoint write for MS milliseconds halfway
// through its temporary file (scripts/faults.sh kills the run there).
//
// Faults (docs/reliability.md): DIR/train.lock is locked (flock) while a run writes to DIR; a
// second run with the same --out is refused at once, naming the holder (PID, host, start time)
// that the lock file records; the kernel drops the lock of a killed run. At start, and before
// every write, the temporary files that killed writers left in DIR are removed.
#pragma once

#include <attn/data.h>
#include <attn/gpt.h>
#include <attn/io.h>
#include <attn/ops.h>
#include <attn/optim.h>
#include <attn/random.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <iostream>
#include <memory>
#include <ostream>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace attn::tools {

// A mistake on the command line of `train` or `generate` (unknown flag, missing or invalid
// value). The CLI reports it as a usage error (exit code 2).
class FlagError : public std::runtime_error {
 public:
  explicit FlagError(const std::string& what) : std::runtime_error(what) {}
};

// ---- command lines: parsed and validated without running anything (fuzz/fuzz_cli.cpp) ----------

struct TrainOptions {
  nn::GPTConfig model;  // vocab_size comes from the data
  int64_t batch_size = 12, max_iters = 2000, warmup_iters = 100, lr_decay_iters = 2000;
  int64_t eval_interval = 250, eval_iters = 200, log_interval = 10, threads = 0;
  int64_t debug_nan_at = -1;
  // Hidden, for fault tests: "raise|kill|hang:RANK:STEP" makes rank RANK fail that way just
  // before training step STEP.
  std::string debug_fault;
  // What a step whose loss or gradients are not finite does: stop the run (the default) or skip
  // the step (no optimizer update) and go on.
  enum class OnNonFinite { Stop, Skip } on_nonfinite = OnNonFinite::Stop;
  // Hidden, for fault tests: "loss-nan|loss-inf|grad-nan|grad-inf:STEP[:PARAM][@RANK]" puts a NaN
  // or an inf into the loss, or into one value of the gradient of PARAM (default: the last
  // parameter), at training step STEP (see the comment at the top).
  std::string debug_nonfinite;
  // Hidden, for fault tests: every checkpoint write pauses this many milliseconds halfway through
  // its temporary file (0: no pause), so that a kill lands inside a write.
  int64_t debug_slow_save_ms = 0;
  double lr = 1e-3, min_lr = 1e-4, weight_decay = 0.1, beta1 = 0.9, beta2 = 0.99, grad_clip = 1.0;
  uint64_t seed = 1337;
  std::string data, out = "out";
  bool resume = false, no_progress = false;
  // Distributed (under mpirun): ZeRO stage (0: every rank keeps the whole AdamW state; 1: the
  // state is sharded over the ranks) and the gradient bucket size of the data-parallel reducer.
  int64_t zero = 0, bucket_kib = 1024;
  // Context parallel: every rank holds 1/N of each sequence (zigzag shards) and attention runs as
  // ring attention, so block sizes beyond one rank's memory train (see the comment above).
  bool context_parallel = false;
};
// The flags of `attn train` (the arguments after "train"). Throws FlagError.
TrainOptions parse_train_args(std::span<const std::string> args);

struct GenerateArgs {
  std::string ckpt;  // directory or file, non-empty
  bool has_prompt = false;
  std::string prompt;
  nn::GPT::GenerateOptions options;  // max_new_tokens, temperature, top_k, use_cache
  uint64_t seed = 1337;
  int64_t threads = 0;
};
// The flags of `attn generate` (the arguments after "generate"). Throws FlagError.
GenerateArgs parse_generate_args(std::span<const std::string> args);

// Sets the worker threads (0 = all cores) for the lifetime of the guard; the previous count is
// restored afterwards, so that in-process callers (tests) keep their setting.
class ThreadsGuard {
 public:
  explicit ThreadsGuard(int64_t threads) : previous_(get_num_threads()) {
    int n = int(threads);
    if (n == 0) n = int(std::max(1u, std::thread::hardware_concurrency()));
    set_num_threads(n);
  }
  ~ThreadsGuard() {
    try {
      set_num_threads(previous_);
    } catch (...) {
    }
  }
  ThreadsGuard(const ThreadsGuard&) = delete;
  ThreadsGuard& operator=(const ThreadsGuard&) = delete;

 private:
  int previous_;
};

// ---- checkpoints: parsed from the bytes of the file (fuzz/fuzz_checkpoint.cpp) ------------------

struct TrainEval {
  int64_t step;
  double train_loss, val_loss;
};

// Who reads a checkpoint: `attn generate` (model.safetensors or ckpt.safetensors, format
// "attn-gpt" or "attn-train") or `attn train --resume` (ckpt.safetensors, "attn-train" only, with
// the step, generator state and history).
enum class CheckpointUse { Generate, Resume };

struct Checkpoint {
  io::SafeTensorsFile file;  // header read and checked; tensors read when loaded
  nn::GPTConfig config;
  data::CharTokenizer tokenizer;  // as many characters as config.vocab_size
  // CheckpointUse::Resume only:
  int64_t step = 0;                // the next iteration to run
  std::vector<uint8_t> rng_state;  // Generator::kStateSize bytes
  std::vector<TrainEval> history;  // the evaluations before `step`
};

// Parses and validates a checkpoint file's bytes: the safetensors container, the metadata (format,
// config, tokenizer; for Resume also step, rng_state and history), and that the tensors hold at
// least as many values as a model of that config has parameters (so that a config cannot make the
// reader allocate a model far larger than the file). Throws attn::Error naming `path`:
// "[generate] 'path': ..." or "[train] 'path': ..." ("[load_safetensors] 'path': ..." for a broken
// container). Never reads out of bounds; allocates no more than a small multiple of the input.
Checkpoint parse_checkpoint(std::string_view bytes, const std::string& path, CheckpointUse use);
// The same for the file at `path`, reading its header only: the tensors are read when loaded
// (load_checkpoint_weights, restore_training_state), so no copy of the file is held in memory.
Checkpoint read_checkpoint(const std::string& path, CheckpointUse use);
// The checkpoint file `--ckpt` names: DIR/model.safetensors for a directory, else the path itself.
// Throws attn::Error "[command] no checkpoint 'path' (train one with ...)" when it does not exist.
std::string checkpoint_file(const std::string& ckpt, const char* command);
// Reads the checkpoint's weights (every tensor not prefixed "optim.") into `model`, one tensor at
// a time (strict: names and shapes must match, checked before anything is read). Throws
// attn::Error "[fn] 'path': weights do not fit the model: ...", or the reader's error when the
// file changed since it was opened.
void load_checkpoint_weights(nn::GPT& model, const Checkpoint& ck, const std::string& path,
                             CheckpointUse use);
// The model of a checkpoint read for generation (generate, heatmap, export): constructed under
// nn::init::SkipInitGuard, since every weight is loaded next, then loaded as above.
std::shared_ptr<nn::GPT> checkpoint_model(const Checkpoint& ck, const std::string& path);
// Restores the optimiser state ("optim.*" tensors) and the generator state of a Resume
// checkpoint. Throws attn::Error "[train] 'path': optimizer or generator state does not fit: ...".
void restore_training_state(const Checkpoint& ck, const std::string& path, optim::AdamW& opt,
                            Generator& gen);
// nanoGPT's optimiser for `model`: AdamW over the decaying and the non-decaying parameters.
optim::AdamW make_optimizer(nn::GPT& model, const TrainOptions& o);
// `attn generate` after its arguments and checkpoint are read: loads the weights into a new model
// and streams the continuation of the prompt to `out` (timing to `err`).
void generate_from_checkpoint(const Checkpoint& ck, const std::string& path, const GenerateArgs& a,
                              std::ostream& out, std::ostream& err);
// The prompt's ids from `encode`, its attn::Error reported as "[generate] the prompt cannot be
// encoded with the checkpoint's vocabulary: ...".
std::vector<int64_t> encode_prompt(const std::function<std::vector<int64_t>()>& encode);
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
    "    --no-cache             recompute the whole context at every step (no key/value cache)\n";

}  // namespace attn::tools

// attn::train: the training loop of `attn train` as a library. A character-level GPT trained on a
// text file (nanoGPT's shakespeare_char recipe) with crash-safe checkpoints, resume, checks of
// non-finite values and data or context parallelism under mpirun. `attn train` is this loop behind
// its flags; Python calls it as attn.train.train(...). The same options give the same printed
// losses and the same checkpoint files, byte for byte, whichever entry point runs them.
//
//   attn::train::TrainOptions o;
//   o.data = "input.txt";
//   o.out = "out";
//   o.max_iters = 500;
//   attn::train::TrainResult r = attn::train::train(o, std::cout);
//
// The training protocol (order of the random draws, evaluation, learning-rate schedule) is the
// one bench/train_torch.py follows in PyTorch, so that the two can be compared loss for loss.
//
// Checkpoints in `out`, each written atomically (temporary file, fsync, rename):
//   model.safetensors  the model's state_dict and metadata {format: "attn-gpt", config (GPTConfig
//                      as JSON), tokenizer (CharTokenizer JSON), step}; read by `attn generate`
//                      and by PyTorch (safetensors.torch.load_file).
//   ckpt.safetensors   the weights, the optimiser state ("optim.state.{i}.*") and metadata
//                      {format: "attn-train", config, train_config (the options), tokenizer, step
//                      (the next iteration to run), rng_state (hex of Generator::get_state()
//                      taken before that step's evaluation), history ([{step, train_loss,
//                      val_loss}, ...])}; read when resuming.
//   loss.png           train and validation loss of every evaluation.
// A resumed run repeats the evaluation of its first step (same weights, same generator state,
// hence the same numbers) and then continues exactly as the uninterrupted run would have. (Under
// mpirun, resuming with another global batch, N x batch_size, is allowed: it continues the same
// model and optimizer state on other batches, so that evaluation then differs.)
//
// Data parallel (a world of N ranks, attn::distributed::world()): batch_size is per rank; at
// every step all ranks draw the same N * batch_size offsets from the same generator and rank r
// trains on rows [r B, (r + 1) B), so N ranks with batch B see exactly the examples of one process
// with batch N B (and give its losses, to fp32 rounding). Gradients are averaged in buckets during
// the backward (attn::distributed::GradReducer); evaluation batches are sharded the same way and
// their losses averaged. Rank 0 alone prints and writes the files.
//
// Context parallel (context_parallel): every sequence is split instead of the batch: all ranks
// draw the same batch of batch_size sequences, rank r keeps the zigzag shard of each (chunks r and
// 2N-1-r of 2N, attn::distributed::Sharding::Zigzag), and the model runs on its T/N tokens with
// ring attention across the ranks (GPT::forward_sharded). Losses and gradients are averaged over
// the ranks, so N ranks give the losses of one process with the same batch. Needs block_size
// divisible by 2N and dropout 0.
//
// Faults (docs/reliability.md): OUT/train.lock is locked (flock) while a run writes to OUT; a
// second run with the same `out` is refused at once, naming the holder (PID, host, start time)
// that the lock file records; the kernel drops the lock of a killed run. At start, and before
// every write, the temporary files that killed writers left in OUT are removed.
//
// Errors are attn::Error with the prefix "[train]" (bad data, options or checkpoint, a
// non-finite loss, a full disk); the messages name the options as `attn train` spells its flags
// (--max-iters), which are the option names with '-' for '_'.
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
#include <memory>
#include <ostream>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace attn::train {

// ---- options ------------------------------------------------------------------------------------

struct TrainOptions {
  // The model: vocab_size comes from the data; the defaults are `attn train`'s (4 layers, 4 heads,
  // 128 wide, block 64, no dropout) and nanoGPT train.py's bias = False.
  nn::GPTConfig model = [] {
    nn::GPTConfig c;
    c.bias = false;
    return c;
  }();
  int64_t batch_size = 12, max_iters = 2000, warmup_iters = 100, lr_decay_iters = 2000;
  // Evaluate and checkpoint every eval_interval steps, on eval_iters batches per split. The
  // default progress report prints a line every log_interval steps.
  int64_t eval_interval = 250, eval_iters = 200, log_interval = 10;
  // Worker threads, 0 = all cores (divided among the ranks on one machine).
  int64_t threads = 0;
  // What a step whose loss or gradients are not finite does: stop the run (the default) or skip
  // the step (no optimizer update) and go on. Non-finite weights always stop the run, and nothing
  // non-finite is ever saved.
  enum class OnNonFinite { Stop, Skip } on_nonfinite = OnNonFinite::Stop;
  double lr = 1e-3, min_lr = 1e-4, weight_decay = 0.1, beta1 = 0.9, beta2 = 0.99, grad_clip = 1.0;
  uint64_t seed = 1337;
  // The training text (UTF-8; 90% train, 10% validation; "" = Debian's
  // /usr/share/games/fortunes/songs-poems) and the checkpoint directory (created if missing).
  std::string data, out = "out";
  // Continue from OUT/ckpt.safetensors (the model options and the data's vocabulary must match).
  bool resume = false;
  // Distributed (under mpirun): ZeRO stage (0: every rank keeps the whole AdamW state; 1: the
  // state is sharded over the ranks) and the gradient bucket size of the data-parallel reducer.
  int64_t zero = 0, bucket_kib = 1024;
  // Context parallel: every rank holds 1/N of each sequence (see the comment at the top).
  bool context_parallel = false;
  // Packed documents: the text is cut into documents after every doc_separator (fortune files'
  // "\n%\n" by default; the separator ends the document it closes). The batches are the same
  // windows of the text, but attention never crosses a document boundary, positions restart at 0
  // with each document, and the last token of a document predicts nothing
  // (data::TextDataset::packed_batch, nn::GPT::forward_packed). Not with context_parallel.
  bool pack = false;
  std::string doc_separator = "\n%\n";

  // Checks every value (ranges, n_embd divisible by n_head, lr_decay_iters > warmup_iters, ...)
  // without reading the data. Throws attn::Error "[train] ..." naming the option as a flag.
  void validate() const;
};

// The default training text when TrainOptions::data is empty.
inline constexpr const char* kDefaultData = "/usr/share/games/fortunes/songs-poems";

// ---- checkpoints (parsed from the bytes of the file: fuzz/fuzz_checkpoint.cpp) ------------------

inline constexpr const char* kModelFile = "model.safetensors";
inline constexpr const char* kCkptFile = "ckpt.safetensors";
inline constexpr const char* kLossFile = "loss.png";
inline constexpr const char* kLockFile = "train.lock";

struct TrainEval {
  int64_t step;
  double train_loss, val_loss;
};

// Who reads a checkpoint: generation (model.safetensors or ckpt.safetensors, format "attn-gpt" or
// "attn-train") or a resumed run (ckpt.safetensors, "attn-train" only, with the step, generator
// state and history).
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
// Reads the checkpoint's weights (every tensor not prefixed "optim.") into `model`, one tensor at
// a time (strict: names and shapes must match, checked before anything is read). Throws
// attn::Error "[fn] 'path': weights do not fit the model: ...", or the reader's error when the
// file changed since it was opened.
void load_checkpoint_weights(nn::GPT& model, const Checkpoint& ck, const std::string& path,
                             CheckpointUse use);
// The model of a checkpoint read for generation: constructed under nn::init::SkipInitGuard, since
// every weight is loaded next, then loaded as above.
std::shared_ptr<nn::GPT> checkpoint_model(const Checkpoint& ck, const std::string& path);
// Restores the optimiser state ("optim.*" tensors) and the generator state of a Resume
// checkpoint. Throws attn::Error "[train] 'path': optimizer or generator state does not fit: ...".
void restore_training_state(const Checkpoint& ck, const std::string& path, optim::AdamW& opt,
                            Generator& gen);

// What a checkpoint records besides the tensors.
struct CheckpointInfo {
  nn::GPTConfig config;
  const data::CharTokenizer* tokenizer = nullptr;
  const TrainOptions* options = nullptr;  // train_config
  int64_t step = 0;                       // the next iteration to run
  std::vector<uint8_t> rng_state;         // the generator's state before that step's evaluation
  std::vector<TrainEval> history;         // the evaluations up to `step`
};
// Writes DIR/model.safetensors (the weights, format "attn-gpt") and then DIR/ckpt.safetensors (the
// weights and the optimizer state as "optim.*", format "attn-train"), each atomically. Refuses
// (attn::Error "[train] step N: not saving a checkpoint whose tensor 'x' (...) is not finite")
// before writing anything when a tensor is not finite.
void write_checkpoint(const std::string& dir, const nn::NamedTensors& weights,
                      const nn::NamedTensors& optim_state, const CheckpointInfo& info);

// nanoGPT's optimiser for `model`: AdamW over the decaying and the non-decaying parameters.
optim::AdamW make_optimizer(nn::GPT& model, const TrainOptions& o);

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

// ---- the loop -----------------------------------------------------------------------------------

// How the loop reports while it runs (on rank 0 only). The default (nullptr to train) writes each
// message as a line to `out` and "step N/TOTAL loss L | lr R | X tok/s" every log_interval steps;
// `attn train` draws a progress bar instead.
class Progress {
 public:
  virtual ~Progress() = default;
  // Before anything else: this run trains steps [first, last) (first == last: nothing to train).
  virtual void begin(int64_t /*first*/, int64_t /*last*/) {}
  // A whole line: the data and model, a note, an evaluation ("step 250: train loss 1.2345, val
  // loss 1.3456"), a skipped step.
  virtual void message(const std::string& line) = 0;
  // Training step `step` (0-based) is done, or skipped (tokens_per_s 0).
  virtual void step(int64_t /*step*/, double /*loss*/, double /*lr*/, double /*tokens_per_s*/) {}
  // The loop ended; the summary lines follow on `out`.
  virtual void end() {}
};

// Callbacks into the loop for fault-injection tests (tools/attn/debug_faults.cpp, built into the
// test-only attn_debug): none is set in a normal run. Each runs on every rank with that rank.
struct TrainHooks {
  // Once, before the first evaluation (after the start-up lines): may check the model and throw.
  std::function<void(int rank, nn::GPT& model)> at_start;
  // Before training step `step` (after its evaluation and checkpoint): may throw, kill or hang
  // the process, or change the weights.
  std::function<void(int rank, int64_t step, nn::GPT& model)> before_step;
  // After the forward of step `step`: may replace the loss before it is read and back-propagated.
  std::function<void(int rank, int64_t step, Tensor& loss)> after_forward;
  // After the backward of step `step` (and the data-parallel gradient all-reduce), before the
  // step's checks and update: may change the gradients of `params` (named as in state_dict).
  std::function<void(int rank, int64_t step, const nn::NamedTensors& params)> after_backward;
  // Halfway through writing the temporary file of every file the run writes (path: the file's
  // final name), so that a kill lands inside a write.
  std::function<void(const std::string& path)> inside_write;
};

struct TrainResult {
  int64_t iters = 0;                    // max_iters
  double ms_per_iter = 0;               // median step time of this run
  double tokens_per_s = 0;              // from ms_per_iter (all ranks together)
  double train_loss = 0, val_loss = 0;  // of the last evaluation
  std::vector<TrainEval> history;       // every evaluation, resumed runs' earlier ones included
  std::vector<int64_t> skipped;         // steps skipped under OnNonFinite::Skip
};

// Runs the loop of `attn train`: reads the data, builds (or resumes) the model and optimizer,
// trains options.max_iters steps with evaluations and checkpoints every eval_interval steps and at
// the end, writes loss.png, and prints the summary ("done: iters=N ms_per_iter=X train_loss=Y
// val_loss=Z tokens_per_s=W" last) to `out`. Under mpirun every rank calls it (data parallel);
// rank 0 alone prints and writes. Throws attn::Error (see the top) and leaves the last checkpoint
// in place when it stops.
TrainResult train(const TrainOptions& options, std::ostream& out, const TrainHooks& hooks = {},
                  Progress* progress = nullptr);

}  // namespace attn::train

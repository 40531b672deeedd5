// What the files of src/train share (not installed): checkpoint metadata, the ranks' shares of the
// work, and the checks of non-finite values.
#pragma once

#include <attn/distributed.h>
#include <attn/train.h>

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace attn::train::detail {

using json = nlohmann::json;

// printf into a std::string.
std::string strf(const char* format, ...) __attribute__((format(printf, 1, 2)));

// ---- checkpoint.cpp -----------------------------------------------------------------------------

// The options as recorded in a checkpoint's train_config (and compared across ranks).
json train_config_json(const TrainOptions& o);
// A GPTConfig as the checkpoints' "config" metadata.
std::string config_json(const nn::GPTConfig& c);
// The checkpoint OUT/ckpt.safetensors of a resumed run, validated against the options and the
// data's vocabulary.
Checkpoint load_resume(const std::string& path, const TrainOptions& o,
                       const data::CharTokenizer& tok);

// ---- shard.cpp ----------------------------------------------------------------------------------

// This rank's share of the work. Data parallel: all ranks draw the same `world` * B rows from the
// same generator (one process with batch world * B draws exactly these) and rank r keeps rows
// [r B, (r + 1) B). Context parallel: all ranks draw the same B sequences and rank r keeps its
// zigzag shard of each, attention running round the ring.
// With packed documents (the dataset has a separator) the rows come with their positions and the
// model runs GPT::forward_packed. Its loss is the mean over the targets that are not ignored, and
// the ranks' rows hold different numbers of those: each rank's loss is scaled by
// world * mine / all (its share of the batch's targets; every rank knows the whole batch), so that
// the average over the ranks, of the losses and of the gradients, is the one process's mean.
struct Shard {
  int rank = 0, world = 1;
  bool context = false;

  struct Batch : data::TextDataset::PackedBatch {  // positions undefined unless packed
    double loss_scale = 1.0;
  };
  Batch batch(const data::TextDataset& ds, bool train, int64_t B, int64_t T, Generator& gen) const;
  nn::GPT::Output forward(const nn::GPT& model, const Batch& batch) const;
};

// Mean loss of eval_iters batches of each split (nanoGPT's estimate_loss: float32 losses, float32
// mean). Draws the batches from gen, train split first. Distributed: each rank evaluates its rows
// of every batch and the per-batch losses are averaged over the ranks (the loss of the whole
// batch, as its rows are split evenly).
std::pair<double, double> estimate_loss(nn::GPT& model, const data::TextDataset& ds,
                                        const TrainOptions& o, Generator& gen, const Shard& shard);

// ---- health.cpp ---------------------------------------------------------------------------------

// A loss for a log line ("%.4f"), and for an error message: "nan" whatever its sign bit, "inf",
// or the number.
std::string loss_str(double v);
std::string bad_loss_str(double v);

// The first tensor of `named` holding a non-finite value, described ("'h.0.attn.in_proj_weight'
// (3 of 12288 values, the first nan at [0, 5])"), or "".
std::string first_nonfinite(const nn::NamedTensors& named);

// What is wrong with a training step whose loss or gradients are not finite ("" if nothing).
// Distributed: the loss is the batch's, the same on every rank, and so are the gradients after
// the data-parallel all-reduce; with ZeRO-1 (gradients still local: `local_grads`) the ranks
// agree on the first offending parameter through one all-reduce, so all of them decide alike.
struct StepFault {
  std::string what;          // "loss is nan", "the gradient of 'x' is not finite (...)"
  std::string detail;        // the first offending parameter, for a non-finite loss
  bool weights_bad = false;  // a parameter itself is not finite: skipping cannot help
  bool bad() const { return !what.empty(); }
};
// `grads_finite`: the caller knows every gradient to be finite (their total norm is), so they are
// not read again.
StepFault check_step(const nn::NamedTensors& params, double loss, bool local_grads,
                     distributed::Communicator& comm, bool grads_finite);

}  // namespace attn::train::detail

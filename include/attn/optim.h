// Optimisation: AdamW (torch.optim.AdamW's update, step for step), gradient-norm clipping
// (torch.nn.utils.clip_grad_norm_) and nanoGPT's learning-rate schedule.
#pragma once

#include <attn/nn.h>
#include <attn/tensor.h>

#include <cstdint>
#include <string>
#include <vector>

namespace attn::optim {

struct ParamGroup {
  std::vector<Tensor> params;
  double weight_decay = 0.0;
};

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;  // used by the constructor that takes a plain parameter list
};

// Decoupled weight decay (Loshchilov & Hutter), as torch.optim.AdamW (foreach=False) computes it:
//   p *= 1 - lr * wd;  m = lerp(m, g, 1 - beta1);  v = beta2 v + (1 - beta2) g g
//   p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// Parameters without a gradient are skipped (their step count does not advance).
class AdamW {
 public:
  AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options);
  AdamW(const std::vector<Tensor>& params, const AdamWOptions& options);

  void step();
  void zero_grad(bool set_to_none = true);
  double lr() const { return options_.lr; }
  void set_lr(double lr);
  const AdamWOptions& options() const { return options_; }
  const std::vector<ParamGroup>& groups() const { return groups_; }

  // Optimizer state for checkpoints: "state.{i}.exp_avg", "state.{i}.exp_avg_sq" (float32, the
  // parameter's shape) and "state.{i}.step" (int64 scalar) for every parameter i (in group order)
  // that has state. load_state_dict checks names and shapes and throws attn::Error on mismatch.
  nn::NamedTensors state_dict() const;
  void load_state_dict(const nn::NamedTensors& state);

 private:
  struct State {
    Tensor exp_avg, exp_avg_sq;
    int64_t step = 0;
  };
  std::vector<ParamGroup> groups_;
  std::vector<State> state_;  // one per parameter, in group order
  AdamWOptions options_;
};

// Scales every gradient by max_norm / (total_norm + 1e-6) when the total 2-norm of all gradients
// exceeds max_norm, as torch.nn.utils.clip_grad_norm_ does. Returns the total norm before
// clipping (inf or NaN if some gradient is not finite; the gradients are then left alone when
// error_if_nonfinite is false, and attn::Error is thrown when it is true).
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm,
                       bool error_if_nonfinite = false);

// nanoGPT's get_lr: linear warm-up lr * (it + 1) / (warmup_iters + 1) while it < warmup_iters,
// then cosine decay from lr to min_lr at lr_decay_iters, and min_lr after that.
double cosine_lr(int64_t it, double lr, double min_lr, int64_t warmup_iters,
                 int64_t lr_decay_iters);

}  // namespace attn::optim

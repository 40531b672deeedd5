// Optimisation as torch.optim computes it, step for step: Adam, AdamW, SGD, RMSprop and Adagrad
// over parameter groups with their own hyper-parameters, gradient clipping
// (torch.nn.utils.clip_grad_norm_ / clip_grad_value_), nanoGPT's learning-rate schedule and torch's
// lr schedulers (attn/lr_scheduler.h).
#pragma once

#include <attn/nn.h>
#include <attn/tensor.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace attn::optim {

// One of torch's param_groups: tensors and the hyper-parameters they get. A field left unset
// takes the optimizer's default when the group is added (the constructor, add_param_group); from
// then on every field the optimizer uses is set (groups() shows them resolved). Fields an
// optimizer does not use (momentum for Adam) must stay unset.
struct ParamGroup {
  std::vector<Tensor> params;
  std::optional<double> weight_decay = {};
  std::optional<double> lr = {};
  std::optional<double> beta1 = {}, beta2 = {}, eps = {};  // Adam, AdamW
  std::optional<bool> amsgrad = {};                        // Adam, AdamW
  std::optional<double> momentum = {}, dampening = {};     // SGD
  std::optional<bool> nesterov = {};                       // SGD
  std::optional<double> alpha = {};                        // RMSprop (momentum, eps too)
  std::optional<bool> centered = {};                       // RMSprop
  std::optional<double> lr_decay = {}, initial_accumulator_value = {};  // Adagrad (eps too)
  std::optional<bool> maximize = {};  // every optimizer: ascend (the gradient negated)
  // torch's 'initial_lr': the lr a scheduler starts from, set by the first scheduler made over
  // the optimizer (attn/lr_scheduler.h).
  std::optional<double> initial_lr = {};
};

// What every optimizer shares: the groups, zero_grad, learning rates. The parameters are
// numbered in group order (0, 1, ... over the first group, then the next): state_dict's indices.
class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = default;
  Optimizer(Optimizer&&) = default;
  Optimizer& operator=(const Optimizer&) = default;
  Optimizer& operator=(Optimizer&&) = default;

  // One update of every parameter that has a gradient (others are skipped, their state left).
  virtual void step() = 0;
  // Sets every gradient to none (set_to_none) or to zeros. (attn.optim's Python default is
  // torch 1.13's, zeros.)
  void zero_grad(bool set_to_none = true);

  const std::vector<ParamGroup>& groups() const { return groups_; }
  std::size_t num_groups() const { return groups_.size(); }
  std::size_t num_params() const;
  double lr(std::size_t group) const;
  void set_lr(std::size_t group, double lr);
  // Group 0's lr / every group's lr (the single-group API of `attn train`).
  double lr() const { return lr(0); }
  void set_lr(double lr);
  void set_initial_lr(std::size_t group, double lr);
  // Replaces group `group`'s hyper-parameters by the fields set in `options` (its params are
  // ignored), validated as the constructor validates them: torch's param_groups[i][key] = value.
  void set_group_options(std::size_t group, const ParamGroup& options);
  // torch's add_param_group: unset fields take the defaults; a parameter already in a group is an
  // error.
  void add_param_group(ParamGroup group);

  // The state of every parameter that has one, as "state.{i}.{name}" tensors (see the
  // optimizers); load_state_dict replaces it (attn::Error on names or shapes that do not fit).
  virtual nn::NamedTensors state_dict() const = 0;
  // Copies the tensors of `state` (torch 1.13's load_state_dict deep-copies too).
  void load_state_dict(const nn::NamedTensors& state) { load_state(state, /*adopt=*/false); }
  // The same, keeping the tensors themselves where they are contiguous float32 of the right shape
  // instead of copying them: for state the caller hands over and no longer uses, such as tensors
  // just read from a checkpoint (attn train --resume), so that the state is not held twice.
  void load_state_dict(nn::NamedTensors&& state) { load_state(state, /*adopt=*/true); }

 protected:
  // load_state_dict's checks and the replacement of the state, copying each tensor unless `adopt`.
  virtual void load_state(const nn::NamedTensors& state, bool adopt) = 0;
  // A checked state tensor as load_state keeps it: t itself when adopting a contiguous one, else a
  // contiguous copy.
  static Tensor state_tensor(const Tensor& t, bool adopt) {
    return adopt && t.is_contiguous() ? t : t.contiguous().clone();
  }
  // `name` prefixes error messages ("Adam", "SGD"); `defaults` gives every field the optimizer
  // uses (other fields of the groups must be unset).
  Optimizer(std::string name, ParamGroup defaults);
  void add_groups(std::vector<ParamGroup> groups);
  // Throws attn::Error when a hyper-parameter of g is out of range (torch's ValueError).
  virtual void check_group(const ParamGroup& g) const = 0;
  // Every parameter, in group order.
  std::vector<Tensor*> all_params();
  std::vector<const Tensor*> const_params() const;

  std::string name_;
  ParamGroup defaults_;
  std::vector<ParamGroup> groups_;
};

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool amsgrad = false;
  bool maximize = false;
};

struct AdamWOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 1e-2;
  bool amsgrad = false;
  bool maximize = false;
};

// torch.optim.Adam (weight_decay: L2, added to the gradient) and, with decoupled = true,
// torch.optim.AdamW (p *= 1 - lr wd), as torch 1.13 computes them (foreach=False):
//   g = -g (maximize);  g += wd p (Adam);  p *= 1 - lr wd (AdamW)
//   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g g;  (amsgrad: vmax = max(vmax, v))
//   p -= lr / (1 - beta1^t) * m / (sqrt(v or vmax) / sqrt(1 - beta2^t) + eps)
// Each parameter counts its own steps t; one without a gradient is skipped.
// state_dict: "state.{i}.exp_avg", "state.{i}.exp_avg_sq" (float32, the parameter's shape),
// "state.{i}.max_exp_avg_sq" (amsgrad) and "state.{i}.step" (int64 scalar); load_state_dict
// checks names and shapes and throws attn::Error on a mismatch.
class Adam : public Optimizer {
 public:
  Adam(std::vector<ParamGroup> groups, const AdamOptions& options);
  Adam(const std::vector<Tensor>& params, const AdamOptions& options);

  void step() override;
  // step() with every gradient multiplied by grad_scale as it is read, the gradients themselves
  // left as they are: clip_grads_with_norm_ then step() in one pass over the gradients, with the
  // same parameters and state to the bit when grad_scale is clip_coefficient(total_norm,
  // max_norm). grad_scale 1: step().
  void step_scaled(float grad_scale);
  nn::NamedTensors state_dict() const override;

 protected:
  void load_state(const nn::NamedTensors& state, bool adopt) override;
  Adam(std::string name, std::vector<ParamGroup> groups, const AdamOptions& options,
       bool decoupled);
  void check_group(const ParamGroup& g) const override;

 private:
  struct State {
    Tensor exp_avg, exp_avg_sq, max_exp_avg_sq;
    int64_t step = 0;
  };
  bool decoupled_;
  std::vector<State> state_;  // one per parameter, in group order
};

class AdamW : public Adam {
 public:
  AdamW(std::vector<ParamGroup> groups, const AdamWOptions& options);
  AdamW(const std::vector<Tensor>& params, const AdamWOptions& options);
  // The defaults, with lr = group 0's lr.
  AdamWOptions options() const;
};

struct SGDOptions {
  double lr = 1e-3;  // torch requires it; attn's default is only a default
  double momentum = 0.0;
  double dampening = 0.0;
  double weight_decay = 0.0;
  bool nesterov = false;
  bool maximize = false;
};

// torch.optim.SGD (1.13, foreach=False):
//   g = -g (maximize);  g += wd p;  with momentum: buf = g at the first step, then buf = momentum
//   buf + (1 - dampening) g; g = nesterov ? g + momentum buf : buf;  p -= lr g
// state_dict: "state.{i}.momentum_buffer" for every parameter that has one.
class SGD : public Optimizer {
 public:
  SGD(std::vector<ParamGroup> groups, const SGDOptions& options);
  SGD(const std::vector<Tensor>& params, const SGDOptions& options);

  void step() override;
  nn::NamedTensors state_dict() const override;

 protected:
  void load_state(const nn::NamedTensors& state, bool adopt) override;
  void check_group(const ParamGroup& g) const override;

 private:
  std::vector<Tensor> momentum_buffer_;  // one per parameter, in group order
};

struct RMSpropOptions {
  double lr = 1e-2;
  double alpha = 0.99;
  double eps = 1e-8;
  double weight_decay = 0.0;
  double momentum = 0.0;
  bool centered = false;
  bool maximize = false;
};

// torch.optim.RMSprop (1.13, foreach=False):
//   g = -g (maximize);  g += wd p;  sq = alpha sq + (1 - alpha) g g
//   centered: ga = alpha ga + (1 - alpha) g, avg = sqrt(sq - ga ga) + eps; else sqrt(sq) + eps
//   momentum > 0: buf = momentum buf + g / avg, p -= lr buf;  else p -= lr g / avg
// The state is made at a parameter's first step with a gradient (momentum_buffer when its
// group's momentum is > 0 then, grad_avg when centered), in the parameter's dtype.
// state_dict: "state.{i}.step" (int64 scalar), "state.{i}.square_avg", "state.{i}.momentum_buffer",
// "state.{i}.grad_avg".
class RMSprop : public Optimizer {
 public:
  RMSprop(std::vector<ParamGroup> groups, const RMSpropOptions& options);
  RMSprop(const std::vector<Tensor>& params, const RMSpropOptions& options);

  void step() override;
  nn::NamedTensors state_dict() const override;

 protected:
  void load_state(const nn::NamedTensors& state, bool adopt) override;
  void check_group(const ParamGroup& g) const override;

 private:
  struct State {
    Tensor square_avg, momentum_buffer, grad_avg;
    int64_t step = 0;
  };
  std::vector<State> state_;  // one per parameter, in group order
};

struct AdagradOptions {
  double lr = 1e-2;
  double lr_decay = 0.0;
  double weight_decay = 0.0;
  double initial_accumulator_value = 0.0;
  double eps = 1e-10;
  bool maximize = false;
};

// torch.optim.Adagrad (1.13, dense gradients, foreach=False), at a parameter's t-th step:
//   g = -g (maximize);  g += wd p;  sum += g g;  p -= lr / (1 + (t - 1) lr_decay) g / (sqrt(sum)
//   + eps)
// As torch, every parameter given to the constructor has a state from the start (step 0, sum =
// the options' initial_accumulator_value: torch uses its constructor's value, not a group's); one
// added later by add_param_group gets it at its first step (torch 1.13 fails there).
// state_dict: "state.{i}.step" (int64 scalar), "state.{i}.sum" (the parameter's shape and dtype).
class Adagrad : public Optimizer {
 public:
  Adagrad(std::vector<ParamGroup> groups, const AdagradOptions& options);
  Adagrad(const std::vector<Tensor>& params, const AdagradOptions& options);

  void step() override;
  nn::NamedTensors state_dict() const override;

 protected:
  void load_state(const nn::NamedTensors& state, bool adopt) override;
  void check_group(const ParamGroup& g) const override;

 private:
  struct State {
    Tensor sum;
    int64_t step = 0;
  };
  void init_state();
  std::vector<State> state_;  // one per parameter, in group order
};

// torch.nn.utils.clip_grad_norm_: the total norm_type-norm of all gradients (the norm of the
// per-tensor norms; norm_type may be inf, the largest |g|), and every gradient multiplied by
// min(1, max_norm / (total + 1e-6)). Returns the total norm before clipping; a non-finite total
// throws attn::Error when error_if_nonfinite, else the gradients are scaled by it (NaN / 0).
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm, double norm_type,
                       bool error_if_nonfinite = false);
// The 2-norm version, as it always was.
double clip_grad_norm_(const std::vector<Tensor>& params, double max_norm,
                       bool error_if_nonfinite = false);
// clip_grad_norm_ in two steps, so that a caller can look at the total norm before the gradients
// change (a finite total means that every gradient is finite): the total norm_type-norm of the
// parameters' gradients (torch.nn.utils.get_total_norm of them; for bfloat16 / float16 gradients
// each tensor's norm and the total are rounded to the dtype, or to float32 where dtypes mix, as
// torch's are), and every gradient multiplied by
// min(1, max_norm / (total_norm + 1e-6)) (torch.nn.utils.clip_grads_with_norm_). The two give
// clip_grad_norm_'s results.
double total_grad_norm(const std::vector<Tensor>& params, double norm_type = 2.0);
void clip_grads_with_norm_(const std::vector<Tensor>& params, double max_norm, double total_norm);
// The factor clip_grads_with_norm_ multiplies the gradients by: min(1, max_norm / (total_norm +
// 1e-6)), computed as torch computes it on a total norm of dtype `dtype`: op by op, each rounded
// to the dtype (R(R(1 / R(total + 1e-6)) * max_norm); in float32 that is float arithmetic).
float clip_coefficient(double total_norm, double max_norm, Dtype dtype = Dtype::Float32);
// torch.nn.utils.clip_grad_value_: every gradient clamped to [-clip_value, clip_value].
void clip_grad_value_(const std::vector<Tensor>& params, double clip_value);

// nanoGPT's get_lr: linear warm-up lr * (it + 1) / (warmup_iters + 1) while it < warmup_iters,
// then cosine decay from lr to min_lr at lr_decay_iters, and min_lr after that.
double cosine_lr(int64_t it, double lr, double min_lr, int64_t warmup_iters,
                 int64_t lr_decay_iters);

}  // namespace attn::optim

#include <attn/lr_scheduler.h>

// Learning-rate schedulers over an optimizer's parameter groups, as torch.optim.lr_scheduler
// (1.13) computes them: the same recursive ("chainable") formulas, so that the lrs agree with
// torch's to the last bit of double arithmetic.
#pragma once

#include <attn/optim.h>

#include <cstdint>
#include <functional>
#include <vector>

namespace attn::optim {

// torch's _LRScheduler. The constructor sets every group's initial_lr to its lr when it is unset
// (last_epoch == -1; resuming with last_epoch >= 0 needs initial_lr set, else attn::Error), takes
// base_lrs from them and makes the first step (last_epoch 0). step() advances last_epoch and
// writes the new lrs into the optimizer's groups. The optimizer must outlive the scheduler.
class LRScheduler {
 public:
  virtual ~LRScheduler() = default;
  void step();
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  int64_t last_epoch() const { return last_epoch_; }
  int64_t step_count() const { return step_count_; }
  // Restores what torch's state_dict holds (base_lrs, last_epoch, _step_count, _last_lr); the
  // optimizer's lrs are not touched (they come with the optimizer's own state).
  void load_state(std::vector<double> base_lrs, int64_t last_epoch, int64_t step_count,
                  std::vector<double> last_lr);

 protected:
  LRScheduler(Optimizer& optimizer, int64_t last_epoch, const char* name);
  // The lrs of epoch last_epoch(), from the groups' current lrs (torch's get_lr).
  virtual std::vector<double> get_lr() const = 0;
  // The first step; derived constructors call it last, once get_lr can run.
  void initial_step() { step(); }
  std::vector<double> group_lrs() const;

  Optimizer* optimizer_;
  const char* name_;
  std::vector<double> base_lrs_, last_lr_;
  int64_t last_epoch_ = -1;
  int64_t step_count_ = 0;
};

// lr = base_lr * lambda(last_epoch): one function for every group, or one per group.
class LambdaLR : public LRScheduler {
 public:
  using Lambda = std::function<double(int64_t)>;
  LambdaLR(Optimizer& optimizer, Lambda lr_lambda, int64_t last_epoch = -1);
  LambdaLR(Optimizer& optimizer, std::vector<Lambda> lr_lambdas, int64_t last_epoch = -1);

 protected:
  std::vector<double> get_lr() const override;

 private:
  std::vector<Lambda> lambdas_;
};

// lr *= gamma every step_size epochs.
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1, int64_t last_epoch = -1);

 protected:
  std::vector<double> get_lr() const override;

 private:
  int64_t step_size_;
  double gamma_;
};

// lr *= gamma every epoch.
class ExponentialLR : public LRScheduler {
 public:
  ExponentialLR(Optimizer& optimizer, double gamma, int64_t last_epoch = -1);

 protected:
  std::vector<double> get_lr() const override;

 private:
  double gamma_;
};

// lr * factor until epoch total_iters, then the lr again.
class ConstantLR : public LRScheduler {
 public:
  ConstantLR(Optimizer& optimizer, double factor = 1.0 / 3, int64_t total_iters = 5,
             int64_t last_epoch = -1);

 protected:
  std::vector<double> get_lr() const override;

 private:
  double factor_;
  int64_t total_iters_;
};

// lr *= gamma^k at an epoch that appears k times in milestones.
class MultiStepLR : public LRScheduler {
 public:
  MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma = 0.1,
              int64_t last_epoch = -1);
  const std::vector<int64_t>& milestones() const { return milestones_; }

 protected:
  std::vector<double> get_lr() const override;

 private:
  std::vector<int64_t> milestones_;  // sorted
  double gamma_;
};

// Cosine annealing from base_lr to eta_min over T_max epochs (and back up, periodically, after
// that), by torch's recursive formula.
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min = 0.0,
                    int64_t last_epoch = -1);

 protected:
  std::vector<double> get_lr() const override;

 private:
  int64_t T_max_;
  double eta_min_;
};

// The lr factor goes linearly from start_factor to end_factor over total_iters epochs.
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3, double end_factor = 1.0,
           int64_t total_iters = 5, int64_t last_epoch = -1);

 protected:
  std::vector<double> get_lr() const override;

 private:
  double start_, end_;
  int64_t total_iters_;
};

struct OneCycleOptions {
  double pct_start = 0.3;      // the fraction of the steps spent raising the lr
  bool linear_anneal = false;  // torch's anneal_strategy: "cos" (false) or "linear" (true)
  bool cycle_momentum = true;  // momentum (SGD) or beta1 (Adam, AdamW) cycles inversely
  std::vector<double> base_momentum = {0.85};  // one value, or one per group
  std::vector<double> max_momentum = {0.95};
  double div_factor = 25.0;       // initial_lr = max_lr / div_factor
  double final_div_factor = 1e4;  // min_lr = initial_lr / final_div_factor
  bool three_phase = false;
};

// The 1cycle policy (Smith & Topin, 2017) as torch.optim.lr_scheduler.OneCycleLR: the lr goes
// from max_lr / div_factor up to max_lr over pct_start of total_steps, then down to
// initial_lr / final_div_factor (three_phase: back to initial_lr first), and the momentum
// (beta1 for Adam) the other way between max_momentum and base_momentum. It sets every group's
// initial_lr (when last_epoch == -1). Stepping past total_steps is an error, as in torch.
class OneCycleLR : public LRScheduler {
 public:
  OneCycleLR(Optimizer& optimizer, std::vector<double> max_lrs, int64_t total_steps,
             const OneCycleOptions& options = {}, int64_t last_epoch = -1);
  int64_t total_steps() const { return total_steps_; }

 protected:
  std::vector<double> get_lr() const override;

 private:
  struct Phase {
    double end_step;
    int start_lr, end_lr;  // 0 initial_lr, 1 max_lr, 2 min_lr
    int start_m, end_m;    // 0 max_momentum, 1 base_momentum
  };
  static Optimizer& prepare(Optimizer& optimizer, const std::vector<double>& max_lrs,
                            const OneCycleOptions& options, int64_t last_epoch);
  double anneal(double start, double end, double pct) const;

  int64_t total_steps_;
  OneCycleOptions options_;
  std::vector<double> max_lrs_, min_lrs_, max_m_, base_m_;
  std::vector<Phase> phases_;
  bool use_beta1_ = false;
};

}  // namespace attn::optim

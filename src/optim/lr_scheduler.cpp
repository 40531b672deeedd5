// torch.optim.lr_scheduler's schedulers over optim::Optimizer's groups. The formulas are torch's
// chainable ones, written with the same operations in the same order (compiled without FMA
// contraction), so that the lrs are torch's doubles.
#include <attn/lr_scheduler.h>

#include <algorithm>
#include <cmath>
#include <numbers>

#include "../common/error.h"

namespace attn::optim {

using detail::fail;

LRScheduler::LRScheduler(Optimizer& optimizer, int64_t last_epoch, const char* name)
    : optimizer_(&optimizer), name_(name), last_epoch_(last_epoch) {
  if (last_epoch < -1) fail(name, "last_epoch must be >= -1, got ", last_epoch);
  const std::vector<ParamGroup>& groups = optimizer.groups();
  for (std::size_t i = 0; i < groups.size(); ++i) {
    if (last_epoch == -1) {
      if (!groups[i].initial_lr) optimizer.set_initial_lr(i, *groups[i].lr);
    } else if (!groups[i].initial_lr) {
      fail(name, "param 'initial_lr' is not specified in param_groups[", i,
           "] when resuming an optimizer (last_epoch ", last_epoch, ")");
    }
    base_lrs_.push_back(*optimizer.groups()[i].initial_lr);
  }
}

std::vector<double> LRScheduler::group_lrs() const {
  std::vector<double> out;
  for (const ParamGroup& g : optimizer_->groups()) out.push_back(*g.lr);
  return out;
}

void LRScheduler::step() {
  if (optimizer_->num_groups() != base_lrs_.size())
    fail(name_, "the optimizer has ", optimizer_->num_groups(), " parameter groups, but ",
         base_lrs_.size(), " when the scheduler was made");
  step_count_ += 1;
  last_epoch_ += 1;
  const std::vector<double> lrs = get_lr();
  for (std::size_t i = 0; i < lrs.size(); ++i) optimizer_->set_lr(i, lrs[i]);
  last_lr_ = group_lrs();
}

void LRScheduler::load_state(std::vector<double> base_lrs, int64_t last_epoch, int64_t step_count,
                             std::vector<double> last_lr) {
  if (base_lrs.size() != optimizer_->num_groups())
    fail(name_, "the state has ", base_lrs.size(), " base_lrs, but the optimizer has ",
         optimizer_->num_groups(), " parameter groups");
  if (last_epoch < -1) fail(name_, "last_epoch must be >= -1, got ", last_epoch);
  base_lrs_ = std::move(base_lrs);
  last_epoch_ = last_epoch;
  step_count_ = step_count;
  last_lr_ = std::move(last_lr);
}

// ---- LambdaLR -----------------------------------------------------------------------------------

LambdaLR::LambdaLR(Optimizer& optimizer, Lambda lr_lambda, int64_t last_epoch)
    : LambdaLR(optimizer, std::vector<Lambda>(optimizer.num_groups(), lr_lambda), last_epoch) {}

LambdaLR::LambdaLR(Optimizer& optimizer, std::vector<Lambda> lr_lambdas, int64_t last_epoch)
    : LRScheduler(optimizer, last_epoch, "LambdaLR"), lambdas_(std::move(lr_lambdas)) {
  if (lambdas_.size() != optimizer.num_groups())
    fail(name_, "Expected ", optimizer.num_groups(), " lr_lambdas, but got ", lambdas_.size());
  for (std::size_t i = 0; i < lambdas_.size(); ++i)
    if (!lambdas_[i]) fail(name_, "lr_lambda ", i, " is empty");
  initial_step();
}

std::vector<double> LambdaLR::get_lr() const {
  std::vector<double> out;
  for (std::size_t i = 0; i < base_lrs_.size(); ++i)
    out.push_back(base_lrs_[i] * lambdas_[i](last_epoch_));
  return out;
}

// ---- StepLR, MultiStepLR ------------------------------------------------------------------------

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma, int64_t last_epoch)
    : LRScheduler(optimizer, last_epoch, "StepLR"), step_size_(step_size), gamma_(gamma) {
  if (step_size < 1) fail(name_, "step_size must be >= 1, got ", step_size);
  initial_step();
}

std::vector<double> StepLR::get_lr() const {
  std::vector<double> lrs = group_lrs();
  if (last_epoch_ == 0 || last_epoch_ % step_size_ != 0) return lrs;
  for (double& lr : lrs) lr = lr * gamma_;
  return lrs;
}

ExponentialLR::ExponentialLR(Optimizer& optimizer, double gamma, int64_t last_epoch)
    : LRScheduler(optimizer, last_epoch, "ExponentialLR"), gamma_(gamma) {
  initial_step();
}

std::vector<double> ExponentialLR::get_lr() const {
  std::vector<double> lrs = group_lrs();
  if (last_epoch_ == 0) return lrs;
  for (double& lr : lrs) lr = lr * gamma_;
  return lrs;
}

ConstantLR::ConstantLR(Optimizer& optimizer, double factor, int64_t total_iters, int64_t last_epoch)
    : LRScheduler(optimizer, last_epoch, "ConstantLR"), factor_(factor), total_iters_(total_iters) {
  if (!(factor >= 0.0 && factor <= 1.0))
    fail(name_, "Constant multiplicative factor expected to be between 0 and 1, got ", factor);
  initial_step();
}

std::vector<double> ConstantLR::get_lr() const {
  std::vector<double> lrs = group_lrs();
  if (last_epoch_ == 0) {
    for (double& lr : lrs) lr = lr * factor_;
  } else if (last_epoch_ == total_iters_) {
    for (double& lr : lrs) lr = lr * (1.0 / factor_);
  }
  return lrs;
}

MultiStepLR::MultiStepLR(Optimizer& optimizer, std::vector<int64_t> milestones, double gamma,
                         int64_t last_epoch)
    : LRScheduler(optimizer, last_epoch, "MultiStepLR"),
      milestones_(std::move(milestones)),
      gamma_(gamma) {
  std::sort(milestones_.begin(), milestones_.end());
  initial_step();
}

std::vector<double> MultiStepLR::get_lr() const {
  std::vector<double> lrs = group_lrs();
  const auto count = std::count(milestones_.begin(), milestones_.end(), last_epoch_);
  if (count == 0) return lrs;
  const double factor = std::pow(gamma_, double(count));
  for (double& lr : lrs) lr = lr * factor;
  return lrs;
}

// ---- CosineAnnealingLR --------------------------------------------------------------------------

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t T_max, double eta_min,
                                     int64_t last_epoch)
    : LRScheduler(optimizer, last_epoch, "CosineAnnealingLR"), T_max_(T_max), eta_min_(eta_min) {
  if (T_max < 1) fail(name_, "T_max must be >= 1, got ", T_max);
  initial_step();
}

std::vector<double> CosineAnnealingLR::get_lr() const {
  constexpr double pi = std::numbers::pi;
  const double T = double(T_max_), e = double(last_epoch_), eta = eta_min_;
  std::vector<double> lrs = group_lrs();
  if (last_epoch_ == 0) return lrs;
  for (std::size_t i = 0; i < lrs.size(); ++i) {
    const double base = base_lrs_[i];
    if (step_count_ == 1 && last_epoch_ > 0)  // resumed: the closed form
      lrs[i] = eta + (base - eta) * (1 + std::cos(e * pi / T)) / 2;
    else if ((last_epoch_ - 1 - T_max_) % (2 * T_max_) == 0)
      lrs[i] = lrs[i] + (base - eta) * (1 - std::cos(pi / T)) / 2;
    else
      lrs[i] = (1 + std::cos(pi * e / T)) / (1 + std::cos(pi * (e - 1) / T)) * (lrs[i] - eta) + eta;
  }
  return lrs;
}

// ---- LinearLR -----------------------------------------------------------------------------------

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor,
                   int64_t total_iters, int64_t last_epoch)
    : LRScheduler(optimizer, last_epoch, "LinearLR"),
      start_(start_factor),
      end_(end_factor),
      total_iters_(total_iters) {
  if (!(start_factor >= 0.0 && start_factor <= 1.0))
    fail(name_, "Starting multiplicative factor expected to be between 0 and 1, got ",
         start_factor);
  if (!(end_factor >= 0.0 && end_factor <= 1.0))
    fail(name_, "Ending multiplicative factor expected to be between 0 and 1, got ", end_factor);
  if (total_iters < 1) fail(name_, "total_iters must be >= 1, got ", total_iters);
  initial_step();
}

std::vector<double> LinearLR::get_lr() const {
  std::vector<double> lrs = group_lrs();
  if (last_epoch_ == 0) {
    for (double& lr : lrs) lr = lr * start_;
    return lrs;
  }
  if (last_epoch_ > total_iters_) return lrs;
  const double f = 1. + (end_ - start_) / (double(total_iters_) * start_ +
                                           double(last_epoch_ - 1) * (end_ - start_));
  for (double& lr : lrs) lr = lr * f;
  return lrs;
}

// ---- OneCycleLR ---------------------------------------------------------------------------------

namespace {

// One value per group from one value for all or one per group (torch's _format_param).
std::vector<double> per_group(const char* what, const std::vector<double>& v, std::size_t n) {
  if (v.size() == 1) return std::vector<double>(n, v[0]);
  if (v.size() != n) fail("OneCycleLR", "expected ", n, " values for ", what, ", got ", v.size());
  return v;
}

}  // namespace

Optimizer& OneCycleLR::prepare(Optimizer& optimizer, const std::vector<double>& max_lrs,
                               const OneCycleOptions& o, int64_t last_epoch) {
  const std::vector<double> max_lr = per_group("max_lr", max_lrs, optimizer.num_groups());
  if (last_epoch == -1)
    for (std::size_t i = 0; i < max_lr.size(); ++i)
      optimizer.set_initial_lr(i, max_lr[i] / o.div_factor);
  return optimizer;
}

OneCycleLR::OneCycleLR(Optimizer& optimizer, std::vector<double> max_lrs, int64_t total_steps,
                       const OneCycleOptions& o, int64_t last_epoch)
    : LRScheduler(prepare(optimizer, max_lrs, o, last_epoch), last_epoch, "OneCycleLR"),
      total_steps_(total_steps),
      options_(o) {
  const std::size_t n = optimizer.num_groups();
  if (total_steps < 1) fail(name_, "Expected positive integer total_steps, but got ", total_steps);
  if (!(o.pct_start >= 0.0 && o.pct_start <= 1.0))
    fail(name_, "Expected float between 0 and 1 pct_start, but got ", o.pct_start);
  max_lrs_ = per_group("max_lr", max_lrs, n);
  for (std::size_t i = 0; i < n; ++i)
    min_lrs_.push_back(*optimizer.groups()[i].initial_lr / o.final_div_factor);
  const double T = double(total_steps);
  if (o.three_phase)
    phases_ = {{o.pct_start * T - 1, 0, 1, 0, 1},
               {2 * o.pct_start * T - 2, 1, 0, 1, 0},
               {T - 1, 0, 2, 0, 0}};
  else
    phases_ = {{o.pct_start * T - 1, 0, 1, 0, 1}, {T - 1, 1, 2, 1, 0}};
  if (o.cycle_momentum) {
    const ParamGroup& g = optimizer.groups()[0];
    if (!g.beta1 && !g.momentum)
      fail(name_, "optimizer must support momentum with `cycle_momentum` option enabled");
    use_beta1_ = g.beta1.has_value();
    max_m_ = per_group("max_momentum", o.max_momentum, n);
    base_m_ = per_group("base_momentum", o.base_momentum, n);
    if (last_epoch == -1)
      for (std::size_t i = 0; i < n; ++i) {
        ParamGroup m;
        (use_beta1_ ? m.beta1 : m.momentum) = max_m_[i];
        optimizer.set_group_options(i, m);
      }
  }
  initial_step();
}

double OneCycleLR::anneal(double start, double end, double pct) const {
  if (options_.linear_anneal) return (end - start) * pct + start;
  const double cos_out = std::cos(std::numbers::pi * pct) + 1;
  return end + (start - end) / 2.0 * cos_out;
}

std::vector<double> OneCycleLR::get_lr() const {
  const int64_t step_num = last_epoch_;
  if (step_num > total_steps_)
    fail(name_, "Tried to step ", step_num + 1, " times. The specified number of total steps is ",
         total_steps_);
  std::vector<double> lrs;
  for (std::size_t i = 0; i < optimizer_->num_groups(); ++i) {
    const double lr_at[3] = {*optimizer_->groups()[i].initial_lr, max_lrs_[i], min_lrs_[i]};
    double start_step = 0, lr = 0, momentum = 0;
    for (std::size_t k = 0; k < phases_.size(); ++k) {
      const Phase& ph = phases_[k];
      if (double(step_num) <= ph.end_step || k + 1 == phases_.size()) {
        const double pct = (double(step_num) - start_step) / (ph.end_step - start_step);
        lr = anneal(lr_at[ph.start_lr], lr_at[ph.end_lr], pct);
        if (options_.cycle_momentum) {
          const double m_at[2] = {max_m_[i], base_m_[i]};
          momentum = anneal(m_at[ph.start_m], m_at[ph.end_m], pct);
        }
        break;
      }
      start_step = ph.end_step;
    }
    lrs.push_back(lr);
    if (options_.cycle_momentum) {
      ParamGroup m;
      (use_beta1_ ? m.beta1 : m.momentum) = momentum;
      optimizer_->set_group_options(i, m);
    }
  }
  return lrs;
}

// ---- nanoGPT ------------------------------------------------------------------------------------

double cosine_lr(int64_t it, double lr, double min_lr, int64_t warmup_iters,
                 int64_t lr_decay_iters) {
  if (it < warmup_iters) return lr * double(it + 1) / double(warmup_iters + 1);
  if (it > lr_decay_iters) return min_lr;
  if (lr_decay_iters <= warmup_iters) return min_lr;
  const double ratio = double(it - warmup_iters) / double(lr_decay_iters - warmup_iters);
  const double coeff = 0.5 * (1.0 + std::cos(std::numbers::pi * ratio));
  return min_lr + coeff * (lr - min_lr);
}

}  // namespace attn::optim

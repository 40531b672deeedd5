// optim: Adam, AdamW and SGD over parameter groups against naive per-element references written
// from torch.optim's documented algorithms, the lr schedulers against their closed forms, state
// round trips, gradient clipping, and the errors.
#include <attn/attn.h>
#include <attn/optim.h>
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <numbers>
#include <vector>

#include "test_util.h"

namespace attn {
namespace {

using testing::error_of;

std::vector<float> values(const Tensor& t) {
  const Tensor c = t.contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

Tensor param(Shape shape, uint64_t seed) {
  Generator g(seed);
  Tensor p = randn(std::move(shape), &g);
  p.requires_grad_(true);
  return p;
}

Tensor grad_for(const Tensor& p, int step, int i) {
  Generator g(uint64_t(1000 * step + i));
  return randn(p.shape(), &g);
}

// torch.optim.Adam / AdamW for one parameter, element by element in double.
struct RefAdam {
  double lr, beta1, beta2, eps, wd;
  bool decoupled, amsgrad;
  std::vector<double> p, m, v, vmax;
  int t = 0;
  void step(const std::vector<float>& g) {
    if (m.empty()) m = v = vmax = std::vector<double>(p.size(), 0.0);
    ++t;
    for (std::size_t i = 0; i < p.size(); ++i) {
      double gi = g[i];
      if (decoupled)
        p[i] *= 1 - lr * wd;
      else
        gi += wd * p[i];
      m[i] = beta1 * m[i] + (1 - beta1) * gi;
      v[i] = beta2 * v[i] + (1 - beta2) * gi * gi;
      vmax[i] = std::max(vmax[i], v[i]);
      const double vv = amsgrad ? vmax[i] : v[i];
      const double denom = std::sqrt(vv) / std::sqrt(1 - std::pow(beta2, t)) + eps;
      p[i] -= lr / (1 - std::pow(beta1, t)) * m[i] / denom;
    }
  }
};

// torch.optim.SGD for one parameter.
struct RefSGD {
  double lr, momentum, dampening, wd;
  bool nesterov;
  std::vector<double> p, buf;
  void step(const std::vector<float>& g) {
    const bool first = buf.empty();
    if (first) buf.assign(p.size(), 0.0);
    for (std::size_t i = 0; i < p.size(); ++i) {
      double d = g[i] + wd * p[i];
      if (momentum != 0) {
        buf[i] = first ? d : momentum * buf[i] + (1 - dampening) * d;
        d = nesterov ? d + momentum * buf[i] : buf[i];
      }
      p[i] -= lr * d;
    }
  }
};

std::vector<double> as_double(const Tensor& t) {
  std::vector<float> f = values(t);
  return std::vector<double>(f.begin(), f.end());
}

void expect_close(const Tensor& t, const std::vector<double>& ref, double tol, const char* what) {
  const std::vector<float> got = values(t);
  ASSERT_EQ(got.size(), ref.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], ref[i], tol * (1 + std::fabs(ref[i]))) << what << " element " << i;
}

TEST(Optim, AdamGroupsWithTheirOwnOptionsMatchTheReference) {
  for (bool decoupled : {false, true}) {
    std::vector<Tensor> p = {param({4, 3}, 1), param({5}, 2), param({2, 2}, 3)};
    optim::ParamGroup g0{{p[0], p[1]}};
    g0.weight_decay = 0.1;
    optim::ParamGroup g1{{p[2]}};
    g1.lr = 3e-2;
    g1.beta1 = 0.8;
    g1.beta2 = 0.9;
    g1.eps = 1e-6;
    g1.amsgrad = true;
    g1.weight_decay = 0.0;
    optim::AdamOptions o;
    o.lr = 1e-2;
    std::unique_ptr<optim::Optimizer> opt;
    if (decoupled)
      opt = std::make_unique<optim::AdamW>(
          std::vector<optim::ParamGroup>{g0, g1},
          optim::AdamWOptions{o.lr, o.beta1, o.beta2, o.eps, 1e-2, false});
    else
      opt = std::make_unique<optim::Adam>(std::vector<optim::ParamGroup>{g0, g1}, o);
    std::vector<RefAdam> ref = {
        {1e-2, 0.9, 0.999, 1e-8, 0.1, decoupled, false, as_double(p[0]), {}, {}, {}},
        {1e-2, 0.9, 0.999, 1e-8, 0.1, decoupled, false, as_double(p[1]), {}, {}, {}},
        {3e-2, 0.8, 0.9, 1e-6, 0.0, decoupled, true, as_double(p[2]), {}, {}, {}}};
    for (int step = 0; step < 6; ++step) {
      if (step == 3) {  // a new lr for group 0 at the next step
        opt->set_lr(0, 5e-3);
        ref[0].lr = ref[1].lr = 5e-3;
      }
      for (int i = 0; i < 3; ++i) {
        if (step == 2 && i == 1) {  // no gradient: skipped, its step count stays
          p[1].set_grad(Tensor());
          continue;
        }
        p[i].set_grad(grad_for(p[i], step, i));
        ref[i].step(values(p[i].grad()));
      }
      opt->step();
      for (int i = 0; i < 3; ++i) expect_close(p[i], ref[i].p, 2e-5, decoupled ? "AdamW" : "Adam");
    }
    EXPECT_EQ(ref[1].t, 5);
  }
}

TEST(Optim, SGDMomentumDampeningNesterovMatchTheReference) {
  std::vector<Tensor> p = {param({3, 3}, 4), param({6}, 5), param({4}, 6)};
  optim::ParamGroup g0{{p[0]}};
  g0.dampening = 0.25;
  optim::ParamGroup g1{{p[1]}};
  g1.nesterov = true;
  g1.lr = 0.02;
  optim::ParamGroup g2{{p[2]}};
  g2.momentum = 0.0;
  g2.weight_decay = 0.0;
  optim::SGDOptions o;
  o.lr = 0.05;
  o.momentum = 0.9;
  o.weight_decay = 0.01;
  optim::SGD opt({g0, g1, g2}, o);
  std::vector<RefSGD> ref = {{0.05, 0.9, 0.25, 0.01, false, as_double(p[0]), {}},
                             {0.02, 0.9, 0.0, 0.01, true, as_double(p[1]), {}},
                             {0.05, 0.0, 0.0, 0.0, false, as_double(p[2]), {}}};
  for (int step = 0; step < 6; ++step) {
    for (int i = 0; i < 3; ++i) {
      p[i].set_grad(grad_for(p[i], step, i));
      ref[i].step(values(p[i].grad()));
    }
    opt.step();
    for (int i = 0; i < 3; ++i) expect_close(p[i], ref[i].p, 1e-5, "SGD");
  }
  // Only parameters with momentum keep a buffer.
  const nn::NamedTensors st = opt.state_dict();
  ASSERT_EQ(st.size(), 2u);
  EXPECT_EQ(st[0].first, "state.0.momentum_buffer");
  EXPECT_EQ(st[1].first, "state.1.momentum_buffer");
}

TEST(Optim, StateRoundTripContinuesBitForBit) {
  std::vector<Tensor> a = {param({3, 4}, 7), param({4}, 8)};
  std::vector<Tensor> b = {a[0].detach().clone(), a[1].detach().clone()};
  for (Tensor& t : b) t.requires_grad_(true);
  optim::AdamOptions o;
  o.amsgrad = true;
  o.weight_decay = 0.05;
  optim::Adam oa(a, o), ob(b, o);
  for (int step = 0; step < 3; ++step) {
    for (int i = 0; i < 2; ++i) a[i].set_grad(grad_for(a[i], step, i));
    oa.step();
  }
  for (int i = 0; i < 2; ++i) b[i].detach().copy_(a[i].detach());
  ob.load_state_dict(oa.state_dict());
  for (int step = 3; step < 6; ++step) {
    for (int i = 0; i < 2; ++i) {
      a[i].set_grad(grad_for(a[i], step, i));
      b[i].set_grad(grad_for(b[i], step, i));
    }
    oa.step();
    ob.step();
  }
  for (int i = 0; i < 2; ++i) EXPECT_EQ(values(a[i]), values(b[i]));
  nn::NamedTensors st = oa.state_dict();
  ASSERT_EQ(st.size(), 8u);  // exp_avg, exp_avg_sq, max_exp_avg_sq, step for each
  EXPECT_EQ(st[3].first, "state.0.step");
  EXPECT_EQ(st[3].second.dtype(), Dtype::Int64);
  EXPECT_NE(error_of([&] {
              ob.load_state_dict({{"state.0.exp_avg", zeros({2})}});
            }).find("does not match parameter 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              ob.load_state_dict({{"state.0.exp_avg", zeros({3, 4})}});
            }).find("incomplete state for parameter 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              ob.load_state_dict({{"state.9.step", zeros({1})}});
            }).find("refers to parameter 9 but the optimizer has 2"),
            std::string::npos);
}

TEST(Optim, LoadStateDictCopiesOrAdoptsAndContinuesTheSame) {
  // A const state is copied: the optimizer's steps leave it alone. A state handed over (an
  // rvalue) is kept: the optimizer updates those very tensors, with the same floats.
  for (bool sgd : {false, true}) {
    std::vector<Tensor> a = {param({3, 4}, 7)}, b = {param({3, 4}, 7)};
    auto make = [&](std::vector<Tensor>& p) -> std::unique_ptr<optim::Optimizer> {
      if (sgd) {
        optim::SGDOptions o;
        o.momentum = 0.9;
        return std::make_unique<optim::SGD>(p, o);
      }
      return std::make_unique<optim::AdamW>(p, optim::AdamWOptions{});
    };
    auto src = make(a);
    a[0].set_grad(grad_for(a[0], 0, 0));
    src->step();
    const nn::NamedTensors kept = src->state_dict();
    nn::NamedTensors handed = src->state_dict();
    const std::vector<float> before = values(kept[0].second);
    const Tensor handed0 = handed[0].second;  // a second reference, to watch the tensor
    auto copying = make(a), adopting = make(b);
    b[0].detach().copy_(a[0].detach());
    copying->load_state_dict(kept);
    adopting->load_state_dict(std::move(handed));
    for (auto& [p, o] : {std::pair{a[0], copying.get()}, std::pair{b[0], adopting.get()}}) {
      Tensor q = p;
      q.set_grad(grad_for(q, 1, 0));
      o->step();
    }
    EXPECT_EQ(values(a[0]), values(b[0])) << (sgd ? "SGD" : "AdamW");
    EXPECT_EQ(values(kept[0].second), before) << "a const state is copied";
    EXPECT_NE(values(handed0), before) << "a handed-over state is the optimizer's own";
    EXPECT_EQ(values(handed0), values(adopting->state_dict()[0].second));
  }
}

TEST(Optim, GroupsAreValidated) {
  Tensor p = param({2}, 9), q = param({3}, 10);
  auto msg = [](auto f) { return error_of(f); };
  EXPECT_NE(msg([&] {
              optim::Adam({p}, optim::AdamOptions{-1.0});
            }).find("[Adam] Invalid learning rate: -1"),
            std::string::npos);
  optim::ParamGroup bad{{p}};
  bad.beta2 = 1.0;
  EXPECT_NE(msg([&] {
              optim::AdamW({bad}, optim::AdamWOptions{});
            }).find("[AdamW] Invalid beta parameter at index 1: 1"),
            std::string::npos);
  optim::ParamGroup mom{{p}};
  mom.momentum = 0.9;
  EXPECT_NE(msg([&] { optim::Adam({mom}, optim::AdamOptions{}); }).find("sets 'momentum'"),
            std::string::npos);
  optim::SGDOptions so;
  so.nesterov = true;
  EXPECT_NE(msg([&] { optim::SGD({p}, so); }).find("Nesterov momentum requires a momentum"),
            std::string::npos);
  optim::SGD sgd({p}, optim::SGDOptions{0.1});
  EXPECT_NE(msg([&] {
              sgd.add_param_group(optim::ParamGroup{{q, p}});
            }).find("some parameters appear in more than one parameter group"),
            std::string::npos);
  EXPECT_NE(msg([&] { sgd.set_lr(0, -0.5); }).find("Invalid learning rate: -0.5"),
            std::string::npos);
  EXPECT_EQ(sgd.lr(0), 0.1);  // unchanged by the refused write
  optim::ParamGroup more{{q}};
  more.lr = 0.3;
  sgd.add_param_group(more);
  EXPECT_EQ(sgd.num_groups(), 2u);
  EXPECT_EQ(*sgd.groups()[1].momentum, 0.0);  // the default
  EXPECT_EQ(sgd.lr(1), 0.3);
  EXPECT_NE(msg([&] {
              optim::Adam(std::vector<optim::ParamGroup>{}, optim::AdamOptions{});
            }).find("empty parameter list"),
            std::string::npos);
}

TEST(Optim, MaximizeAscends) {
  // maximize negates the gradient: one step of each optimizer moves p by the opposite of the
  // minimizing step from the same state (no weight decay).
  for (int kind = 0; kind < 3; ++kind) {
    std::vector<float> moved[2];
    for (bool maximize : {false, true}) {
      Tensor p = param({5}, 23);
      const std::vector<float> before = values(p);
      optim::ParamGroup g{{p}};
      g.maximize = maximize;
      g.weight_decay = 0.0;
      std::unique_ptr<optim::Optimizer> opt;
      if (kind == 0) opt = std::make_unique<optim::Adam>(std::vector{g}, optim::AdamOptions{});
      if (kind == 1) opt = std::make_unique<optim::AdamW>(std::vector{g}, optim::AdamWOptions{});
      if (kind == 2) opt = std::make_unique<optim::SGD>(std::vector{g}, optim::SGDOptions{0.1});
      p.set_grad(grad_for(p, 0, 0));
      opt->step();
      const std::vector<float> after = values(p);
      for (std::size_t i = 0; i < after.size(); ++i)
        moved[maximize].push_back(after[i] - before[i]);
    }
    for (std::size_t i = 0; i < moved[0].size(); ++i)
      EXPECT_NEAR(moved[1][i], -moved[0][i], 1e-6) << "optimizer " << kind << " element " << i;
  }
}

// ---- schedulers ---------------------------------------------------------------------------------

TEST(LRScheduler, CosineAnnealingFollowsItsClosedFormAndResumes) {
  Tensor p = param({2}, 11), q = param({2}, 12);
  optim::ParamGroup g1{{q}};
  g1.lr = 0.05;
  optim::SGD opt({optim::ParamGroup{{p}}, g1}, optim::SGDOptions{0.1});
  const double eta = 1e-3;
  const int64_t T = 10;
  optim::CosineAnnealingLR s(opt, T, eta);
  for (int64_t e = 0; e <= 2 * T; ++e) {
    ASSERT_EQ(s.last_epoch(), e);
    for (std::size_t i = 0; i < 2; ++i) {
      const double base = i == 0 ? 0.1 : 0.05;
      const double closed = eta + (base - eta) * (1 + std::cos(std::numbers::pi * e / T)) / 2;
      ASSERT_NEAR(opt.lr(i), closed, 1e-12) << "epoch " << e;
      ASSERT_EQ(s.get_last_lr()[i], opt.lr(i));
    }
    s.step();
  }
  EXPECT_EQ(*opt.groups()[0].initial_lr, 0.1);
  // A second scheduler resuming at epoch 5 takes the closed form there.
  optim::StepLR resumed(opt, 3, 0.5, 5);
  EXPECT_EQ(resumed.last_epoch(), 6);
  EXPECT_EQ(resumed.base_lrs(), (std::vector<double>{0.1, 0.05}));
  Tensor r = param({2}, 13);
  optim::SGD fresh({r}, optim::SGDOptions{0.1});
  EXPECT_NE(error_of([&] { optim::StepLR(fresh, 3, 0.5, 4); }).find("initial_lr"),
            std::string::npos);
}

TEST(LRScheduler, LambdaStepMultiStepLinear) {
  Tensor p = param({2}, 14);
  optim::AdamW opt({p}, optim::AdamWOptions{});
  std::vector<double> seen;
  optim::LambdaLR lambda(opt, [&](int64_t e) {
    seen.push_back(double(e));
    return 1.0 / double(e + 1);
  });
  for (int e = 0; e < 4; ++e) {
    EXPECT_EQ(opt.lr(0), 1e-3 * (1.0 / (e + 1)));
    lambda.step();
  }
  EXPECT_EQ(seen, (std::vector<double>{0, 1, 2, 3, 4}));

  Tensor q = param({2}, 15);
  optim::SGD sgd({q}, optim::SGDOptions{1.0});
  optim::StepLR step(sgd, 2, 0.5);
  const std::vector<double> want_step = {1, 1, 0.5, 0.5, 0.25, 0.25, 0.125};
  for (double w : want_step) {
    EXPECT_EQ(sgd.lr(0), w);
    step.step();
  }

  Tensor r = param({2}, 16);
  optim::SGD sgd2({r}, optim::SGDOptions{1.0});
  optim::MultiStepLR multi(sgd2, {4, 1, 4}, 0.5);  // unsorted, 4 twice
  const std::vector<double> want_multi = {1, 0.5, 0.5, 0.5, 0.125, 0.125};
  for (double w : want_multi) {
    EXPECT_EQ(sgd2.lr(0), w);
    multi.step();
  }

  Tensor u = param({2}, 17);
  optim::SGD sgd3({u}, optim::SGDOptions{0.8});
  optim::LinearLR linear(sgd3, 0.25, 1.0, 4);
  for (int64_t e = 0; e < 8; ++e) {
    const double factor = 0.25 + 0.75 * double(std::min<int64_t>(e, 4)) / 4;
    EXPECT_NEAR(sgd3.lr(0), 0.8 * factor, 1e-15) << e;
    linear.step();
  }
  Tensor w = param({2}, 24);
  optim::SGD sgd4({w}, optim::SGDOptions{0.5});
  optim::ExponentialLR expo(sgd4, 0.5);
  for (int e = 0; e < 5; ++e) {
    EXPECT_EQ(sgd4.lr(0), 0.5 * std::pow(0.5, e));
    expo.step();
  }
  Tensor z = param({2}, 25);
  optim::SGD sgd5({z}, optim::SGDOptions{1.0});
  optim::ConstantLR constant(sgd5, 0.5, 3);
  const std::vector<double> want_constant = {0.5, 0.5, 0.5, 1.0, 1.0};
  for (double w5 : want_constant) {
    EXPECT_EQ(sgd5.lr(0), w5);
    constant.step();
  }
  EXPECT_NE(error_of([&] { optim::LinearLR(sgd3, 1.5); }).find("Starting multiplicative factor"),
            std::string::npos);
  EXPECT_NE(error_of([&] { optim::StepLR(sgd3, 0); }).find("step_size must be >= 1"),
            std::string::npos);
}

TEST(LRScheduler, OneCycleRisesThenAnnealsAndCyclesMomentum) {
  Tensor p = param({2}, 21);
  optim::SGDOptions so;
  so.lr = 0.1;
  so.momentum = 0.9;
  optim::SGD opt({p}, so);
  optim::OneCycleLR s(opt, {0.1}, 10);  // pct_start 0.3: up over steps 0..2, down over 2..9
  const double pi = std::numbers::pi;
  auto cos_anneal = [&](double a, double b, double pct) {
    return b + (a - b) / 2.0 * (std::cos(pi * pct) + 1);
  };
  const double initial = 0.1 / 25, min_lr = initial / 1e4;
  for (int64_t e = 0; e < 10; ++e) {
    const bool up = e <= 2;
    const double pct = up ? double(e) / 2.0 : (double(e) - 2.0) / 7.0;
    const double lr = up ? cos_anneal(initial, 0.1, pct) : cos_anneal(0.1, min_lr, pct);
    const double m = up ? cos_anneal(0.95, 0.85, pct) : cos_anneal(0.85, 0.95, pct);
    EXPECT_NEAR(opt.lr(0), lr, 1e-15) << e;
    EXPECT_NEAR(*opt.groups()[0].momentum, m, 1e-15) << e;
    s.step();
  }
  // The loop left last_epoch at 10 == total_steps (allowed, as in torch); one more is not.
  EXPECT_NE(error_of([&] { s.step(); }).find("Tried to step 12 times"), std::string::npos);
  optim::AdamW adam({param({2}, 22)}, optim::AdamWOptions{});
  optim::OneCycleLR a(adam, {0.01}, 5);
  EXPECT_EQ(*adam.groups()[0].beta1, 0.95);  // beta1 cycles for Adam
  EXPECT_EQ(*adam.groups()[0].initial_lr, 0.01 / 25);
}

// ---- clipping -----------------------------------------------------------------------------------

TEST(Optim, ClipGradNormAnyOrderAndClipValue) {
  std::vector<Tensor> p = {param({3}, 18), param({2}, 19), param({2}, 20)};
  const std::vector<std::vector<float>> g = {{3, -4, 1}, {0.5f, -2}, {}};
  p[0].set_grad(from_vector(g[0], {3}));
  p[1].set_grad(from_vector(g[1], {2}));  // p[2] has none
  // inf: the largest |g|; 1: the sum of |g|.
  EXPECT_FLOAT_EQ(float(optim::clip_grad_norm_(p, 100.0, INFINITY)), 4.0f);
  EXPECT_FLOAT_EQ(float(optim::clip_grad_norm_(p, 100.0, 1.0)), 10.5f);
  const double n3 = std::cbrt(27.0 + 64 + 1 + 0.125 + 8);
  EXPECT_NEAR(optim::clip_grad_norm_(p, 100.0, 3.0), n3, 1e-5);
  const double total = optim::clip_grad_norm_(p, 1.0, 2.0);
  EXPECT_NEAR(total, std::sqrt(9.0 + 16 + 1 + 0.25 + 4), 1e-5);
  const std::vector<float> clipped = values(p[0].grad());
  EXPECT_NEAR(clipped[1], -4.0 / (total + 1e-6), 1e-6);
  optim::clip_grad_value_(p, 0.1);
  for (float x : values(p[0].grad())) EXPECT_LE(std::fabs(x), 0.1f);
  p[1].set_grad(from_vector({NAN, 1}, {2}));
  EXPECT_NE(error_of([&] { optim::clip_grad_norm_(p, 1.0, 2.0, true); }).find("non-finite"),
            std::string::npos);
}

// total_grad_norm then clip_grads_with_norm_ give clip_grad_norm_'s total and gradients, bit for
// bit, for a total computed over several threads and tensors of lengths that are not multiples of
// the vector width.
TEST(Optim, ClipInTwoStepsIsClipGradNorm) {
  const int threads = get_num_threads();
  std::vector<Tensor> a, b;
  for (int i = 0; i < 6; ++i) {
    a.push_back(param({37 + 1000 * i}, uint64_t(30 + i)));
    b.push_back(a.back().detach().requires_grad_(true));
    Tensor g = grad_for(a.back(), 1, i) * 3.0;
    a.back().set_grad(g.clone());
    b.back().set_grad(g.clone());
  }
  set_num_threads(3);
  const double total = optim::total_grad_norm(b);
  optim::clip_grads_with_norm_(b, 1.0, total);
  set_num_threads(1);
  EXPECT_EQ(optim::clip_grad_norm_(a, 1.0), total);
  set_num_threads(threads);
  for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(values(a[i].grad()), values(b[i].grad()));
  // A non-finite gradient makes the total non-finite.
  b[2].grad().data_ptr<float>()[5] = INFINITY;
  EXPECT_FALSE(std::isfinite(optim::total_grad_norm(b)));
}

// AdamW's update runs over all parameters in one parallel region, split by elements across the
// threads: the results do not depend on the thread count.
TEST(Optim, AdamWIsTheSameOnAnyNumberOfThreads) {
  const int threads = get_num_threads();
  std::vector<std::vector<float>> results[2];
  for (int run = 0; run < 2; ++run) {
    set_num_threads(run == 0 ? 1 : 3);
    std::vector<Tensor> p;
    for (int i = 0; i < 5; ++i) p.push_back(param({7 + 20000 * i}, uint64_t(40 + i)));
    optim::AdamW opt(p, optim::AdamWOptions{0.01, 0.9, 0.99, 1e-8, 0.1});
    for (int step = 1; step <= 3; ++step) {
      for (std::size_t i = 0; i < p.size(); ++i) p[i].set_grad(grad_for(p[i], step, int(i)));
      opt.step();
    }
    for (const Tensor& t : p) results[run].push_back(values(t));
  }
  set_num_threads(threads);
  EXPECT_EQ(results[0], results[1]);
}

// step_scaled(clip_coefficient(...)) is clip_grads_with_norm_ then step(), to the bit, for AdamW,
// for Adam with amsgrad and maximize (the other kernel), and when nothing is clipped; the gradients
// themselves stay as they were.
TEST(Optim, StepScaledIsClipThenStep) {
  for (const bool amsgrad : {false, true}) {
    std::vector<Tensor> a, b;
    for (int i = 0; i < 4; ++i) {
      a.push_back(param({5 + 3000 * i}, uint64_t(50 + i)));
      b.push_back(a.back().detach().requires_grad_(true));
    }
    const optim::AdamWOptions o{0.01, 0.9, 0.99, 1e-8, 0.1, amsgrad, amsgrad};
    optim::AdamW opt_a(a, o), opt_b(b, o);
    for (int step = 1; step <= 3; ++step) {
      for (std::size_t i = 0; i < a.size(); ++i) {
        // Large gradients at steps 1 and 3 (clipped), small at step 2 (coefficient 1).
        const Tensor g = grad_for(a[i], step, int(i)) * (step == 2 ? 1e-4 : 5.0);
        a[i].set_grad(g.clone());
        b[i].set_grad(g.clone());
      }
      const double total = optim::total_grad_norm(a);
      optim::clip_grads_with_norm_(a, 1.0, total);
      opt_a.step();
      const float coef = optim::clip_coefficient(total, 1.0);
      EXPECT_EQ(coef < 1.0f, step != 2);
      const std::vector<float> g0 = values(b[0].grad());
      opt_b.step_scaled(coef);
      EXPECT_EQ(values(b[0].grad()), g0);
      for (std::size_t i = 0; i < a.size(); ++i) EXPECT_EQ(values(a[i]), values(b[i])) << i;
    }
  }
}

}  // namespace
}  // namespace attn

// optim: RMSprop and Adagrad over parameter groups against naive per-element references written
// from torch.optim's documented algorithms (in double), their state round trips, the bfloat16
// path against the float32 one, and the errors.
#include <attn/attn.h>
#include <attn/optim.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "test_util.h"

namespace attn {
namespace {

using testing::error_of;

std::vector<double> values(const Tensor& t) {
  const Tensor c = t.detach().to(Dtype::Float32).contiguous();
  return std::vector<double>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
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

// torch.optim.RMSprop for one parameter.
struct RefRMSprop {
  double lr, alpha, eps, wd, momentum;
  bool centered, maximize;
  std::vector<double> p, sq, ga, buf;
  void step(const std::vector<double>& g) {
    if (sq.empty()) sq = ga = buf = std::vector<double>(p.size(), 0.0);
    for (std::size_t i = 0; i < p.size(); ++i) {
      double d = (maximize ? -g[i] : g[i]) + wd * p[i];
      sq[i] = alpha * sq[i] + (1 - alpha) * d * d;
      double avg = sq[i];
      if (centered) {
        ga[i] = alpha * ga[i] + (1 - alpha) * d;
        avg -= ga[i] * ga[i];
      }
      avg = std::sqrt(avg) + eps;
      if (momentum > 0) {
        buf[i] = momentum * buf[i] + d / avg;
        p[i] -= lr * buf[i];
      } else {
        p[i] -= lr * d / avg;
      }
    }
  }
};

// torch.optim.Adagrad for one parameter.
struct RefAdagrad {
  double lr, lr_decay, wd, init, eps;
  bool maximize;
  std::vector<double> p, sum;
  int t = 0;
  void step(const std::vector<double>& g) {
    if (sum.empty()) sum.assign(p.size(), init);
    ++t;
    const double clr = lr / (1 + (t - 1) * lr_decay);
    for (std::size_t i = 0; i < p.size(); ++i) {
      const double d = (maximize ? -g[i] : g[i]) + wd * p[i];
      sum[i] += d * d;
      p[i] -= clr * d / (std::sqrt(sum[i]) + eps);
    }
  }
};

void expect_close(const Tensor& t, const std::vector<double>& ref, double tol, const char* what) {
  const std::vector<double> got = values(t);
  ASSERT_EQ(got.size(), ref.size());
  for (std::size_t i = 0; i < got.size(); ++i)
    ASSERT_NEAR(got[i], ref[i], tol * (1 + std::fabs(ref[i]))) << what << " element " << i;
}

TEST(OptimAdaptive, RMSpropGroupsMatchTheReference) {
  // Sizes above the threads' split threshold too (1 << 16 elements), so that a split is covered.
  std::vector<Tensor> p = {param({4, 3}, 1), param({70000}, 2), param({5}, 3), param({2, 2}, 4)};
  optim::ParamGroup g0{{p[0], p[1]}};
  g0.centered = true;
  g0.momentum = 0.9;
  optim::ParamGroup g1{{p[2]}};
  g1.alpha = 0.8;
  g1.eps = 1e-4;
  g1.maximize = true;
  optim::ParamGroup g2{{p[3]}};
  g2.lr = 3e-2;
  g2.weight_decay = 0.0;
  optim::RMSpropOptions o;
  o.lr = 1e-2;
  o.weight_decay = 0.05;
  optim::RMSprop opt({g0, g1, g2}, o);
  std::vector<RefRMSprop> ref = {
      {1e-2, 0.99, 1e-8, 0.05, 0.9, true, false, values(p[0]), {}, {}, {}},
      {1e-2, 0.99, 1e-8, 0.05, 0.9, true, false, values(p[1]), {}, {}, {}},
      {1e-2, 0.8, 1e-4, 0.05, 0.0, false, true, values(p[2]), {}, {}, {}},
      {3e-2, 0.99, 1e-8, 0.0, 0.0, false, false, values(p[3]), {}, {}, {}}};
  for (int step = 0; step < 6; ++step) {
    for (int i = 0; i < 4; ++i) {
      if (step == 2 && i == 2) {  // no gradient: skipped
        p[2].set_grad(Tensor());
        continue;
      }
      p[i].set_grad(grad_for(p[i], step, i));
      ref[i].step(values(p[i].grad()));
    }
    opt.step();
    // 1e-4: centered, sqrt(sq - ga ga) cancels in float32 where a gradient keeps its sign, and
    // momentum carries that on (tests/python/test_optim_vs_torch.py holds torch's own floats).
    for (int i = 0; i < 4; ++i) expect_close(p[i], ref[i].p, i < 2 ? 1e-4 : 2e-5, "RMSprop");
  }
  const nn::NamedTensors st = opt.state_dict();
  // 0 and 1: step, square_avg, momentum_buffer, grad_avg; 2 and 3: step, square_avg.
  ASSERT_EQ(st.size(), 12u);
  EXPECT_EQ(st[0].first, "state.0.step");
  EXPECT_EQ(st[3].first, "state.0.grad_avg");
  EXPECT_EQ(st[8].first, "state.2.step");
  EXPECT_EQ(st[8].second.item<int64_t>(), 5);
}

TEST(OptimAdaptive, AdagradGroupsMatchTheReference) {
  std::vector<Tensor> p = {param({4, 3}, 5), param({70000}, 6), param({7}, 7)};
  optim::ParamGroup g0{{p[0], p[1]}};
  optim::ParamGroup g1{{p[2]}};
  g1.lr_decay = 0.0;
  g1.initial_accumulator_value = 0.5;  // kept, not used: the options' value starts every sum
  g1.maximize = true;
  optim::AdagradOptions o;
  o.initial_accumulator_value = 0.25;
  o.lr = 0.05;
  o.lr_decay = 0.1;
  o.weight_decay = 0.01;
  optim::Adagrad opt({g0, g1}, o);
  // Every parameter has a state before the first step, as torch's.
  ASSERT_EQ(opt.state_dict().size(), 6u);
  std::vector<RefAdagrad> ref = {{0.05, 0.1, 0.01, 0.25, 1e-10, false, values(p[0]), {}},
                                 {0.05, 0.1, 0.01, 0.25, 1e-10, false, values(p[1]), {}},
                                 {0.05, 0.0, 0.01, 0.25, 1e-10, true, values(p[2]), {}}};
  for (int step = 0; step < 6; ++step) {
    if (step == 3) {
      opt.set_lr(0, 0.02);
      ref[0].lr = ref[1].lr = 0.02;
    }
    for (int i = 0; i < 3; ++i) {
      p[i].set_grad(grad_for(p[i], step, i));
      ref[i].step(values(p[i].grad()));
    }
    opt.step();
    for (int i = 0; i < 3; ++i) expect_close(p[i], ref[i].p, 2e-5, "Adagrad");
  }
}

TEST(OptimAdaptive, StateRoundTripsContinueTheSame) {
  for (bool rms : {true, false}) {
    std::vector<Tensor> a = {param({3, 4}, 8)}, b = {param({3, 4}, 8)};
    auto make = [&](std::vector<Tensor>& p) -> std::unique_ptr<optim::Optimizer> {
      if (rms) {
        optim::RMSpropOptions o;
        o.momentum = 0.5;
        o.centered = true;
        return std::make_unique<optim::RMSprop>(p, o);
      }
      optim::AdagradOptions o;
      o.lr_decay = 0.2;
      return std::make_unique<optim::Adagrad>(p, o);
    };
    auto first = make(a);
    for (int s = 0; s < 2; ++s) {
      a[0].set_grad(grad_for(a[0], s, 0));
      first->step();
    }
    auto second = make(b);
    b[0].detach().copy_(a[0].detach());
    second->load_state_dict(first->state_dict());
    for (int s = 2; s < 4; ++s) {
      a[0].set_grad(grad_for(a[0], s, 0));
      b[0].set_grad(grad_for(b[0], s, 0));
      first->step();
      second->step();
    }
    EXPECT_EQ(values(a[0]), values(b[0])) << (rms ? "RMSprop" : "Adagrad");
  }
}

TEST(OptimAdaptive, BFloat16ParametersFollowTheFloat32Path) {
  // The state in bfloat16 and every op rounded to it: within a few bfloat16 ulps of the same
  // steps in float32 (torch's exact bits are checked in tests/python/test_half_dtypes.py).
  for (bool rms : {true, false}) {
    Tensor f = param({257}, 9);
    Tensor h = f.detach().to(Dtype::BFloat16).to(Dtype::Float32).requires_grad_(true);
    Tensor b = h.detach().to(Dtype::BFloat16).requires_grad_(true);
    std::unique_ptr<optim::Optimizer> of, ob;
    if (rms) {
      optim::RMSpropOptions o;
      o.lr = 1e-3;
      o.momentum = 0.9;
      of = std::make_unique<optim::RMSprop>(std::vector<Tensor>{h}, o);
      ob = std::make_unique<optim::RMSprop>(std::vector<Tensor>{b}, o);
    } else {
      optim::AdagradOptions o;
      o.lr = 1e-2;
      of = std::make_unique<optim::Adagrad>(std::vector<Tensor>{h}, o);
      ob = std::make_unique<optim::Adagrad>(std::vector<Tensor>{b}, o);
    }
    for (int s = 0; s < 3; ++s) {
      Tensor g = grad_for(h, s, 0).to(Dtype::BFloat16);
      h.set_grad(g.to(Dtype::Float32));
      b.set_grad(g);
      of->step();
      ob->step();
    }
    EXPECT_EQ(ob->state_dict()[1].second.dtype(), Dtype::BFloat16);
    const std::vector<double> x = values(b), y = values(h);
    for (std::size_t i = 0; i < x.size(); ++i)
      ASSERT_NEAR(x[i], y[i], 4 * std::ldexp(std::fabs(y[i]) + 1e-2, -8))
          << (rms ? "RMSprop" : "Adagrad") << " element " << i;
  }
}

TEST(OptimAdaptive, Errors) {
  Tensor p = param({2}, 10);
  optim::RMSpropOptions ro;
  ro.alpha = -0.1;
  EXPECT_NE(error_of([&] { optim::RMSprop({p}, ro); }).find("Invalid alpha value: -0.1"),
            std::string::npos);
  optim::AdagradOptions ao;
  ao.initial_accumulator_value = -1;
  EXPECT_NE(error_of([&] {
              optim::Adagrad({p}, ao);
            }).find("Invalid initial_accumulator_value value: -1"),
            std::string::npos);
  // A field another optimizer uses is refused by name.
  optim::ParamGroup g{{p}};
  g.beta1 = 0.9;
  EXPECT_NE(error_of([&] {
              optim::Adagrad({g}, optim::AdagradOptions{});
            }).find("sets 'betas', which Adagrad does not use"),
            std::string::npos);
  optim::ParamGroup h{{p}};
  h.alpha = 0.9;
  EXPECT_NE(error_of([&] {
              optim::SGD({h}, optim::SGDOptions{0.1});
            }).find("sets 'alpha', which SGD does not use"),
            std::string::npos);
  optim::Adagrad ad({p}, optim::AdagradOptions{});
  EXPECT_NE(error_of([&] {
              ad.load_state_dict({{"state.0.sum", zeros({3})}});
            }).find("does not match parameter 0"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              ad.load_state_dict({{"state.0.sum", zeros({2})}});
            }).find("incomplete state for parameter 0"),
            std::string::npos);
  optim::RMSprop rp({p}, optim::RMSpropOptions{});
  EXPECT_NE(error_of([&] {
              rp.load_state_dict({{"state.0.exp_avg", zeros({2})}});
            }).find("unexpected key 'state.0.exp_avg'"),
            std::string::npos);
}

}  // namespace
}  // namespace attn

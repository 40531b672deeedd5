// GradReducer: N ranks, each with a slice of a batch, end with the gradients that one process gets
// on the whole batch (every rank can compute that reference itself: the data is made from a
// fixed seed).
#include <attn/attn.h>
#include <attn/distributed.h>
#include <gtest/gtest.h>

#include <vector>

#include "test_util.h"

namespace dist = attn::distributed;
using attn::Tensor;

namespace {

struct Model {
  Tensor w1, b1, w2, unused;
  std::vector<Tensor> params() const { return {w1, b1, w2, unused}; }
};

// Rank 0's initial values differ from the other ranks': the reducer's broadcast must fix that.
Model make_model(int rank) {
  attn::Generator gen(7 + uint64_t(rank == 0 ? 0 : 1));
  Model m{attn::randn({5, 8}, &gen), attn::randn({8}, &gen), attn::randn({8, 3}, &gen),
          attn::randn({4}, &gen)};
  for (Tensor* t : {&m.w1, &m.b1, &m.w2, &m.unused}) t->requires_grad_(true);
  return m;
}

// mean over rows of sum((tanh(x w1 + b1) w2)^2); w2 used twice (tied), `unused` only when asked.
Tensor loss_of(const Model& m, const Tensor& x, bool use_unused) {
  Tensor h = (x.matmul(m.w1) + m.b1).tanh();
  Tensor y = h.matmul(m.w2) + h.matmul(m.w2) * 0.5;
  Tensor l = (y * y).sum({1}).mean();
  if (use_unused) l = l + m.unused.sum() * 3.0;
  return l;
}

std::vector<float> values(const Tensor& t) {
  Tensor c = t.contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

}  // namespace

class GradReducerTest : public ::testing::TestWithParam<int64_t> {};

TEST_P(GradReducerTest, AveragesToTheWholeBatchGradient) {
  const int n = dist::world_size(), r = dist::rank();
  const int64_t rows_per_rank = 3;
  attn::Generator data_gen(123);
  Tensor x = attn::randn({rows_per_rank * n, 5}, &data_gen);

  // Reference: one process, the whole batch, rank 0's initial weights. `unused` gets a gradient
  // only from rank 0's slice in the distributed run, so the reference adds 3 / n per element.
  Model ref = make_model(0);
  loss_of(ref, x, false).backward();

  Model m = make_model(r);
  dist::GradReducer reducer(m.params(), dist::world(), /*bucket_bytes=*/64);
  EXPECT_GE(reducer.num_buckets(), 3);
  for (int pass = 0; pass < 2; ++pass) {  // the reducer is reusable
    for (Tensor& p : m.params()) p.set_grad(Tensor());
    Tensor local = x.narrow(0, r * rows_per_rank, rows_per_rank);
    loss_of(m, local, /*use_unused=*/r == 0).backward();
    reducer.finish();
    EXPECT_EQ(values(m.w1), values(ref.w1));  // broadcast from rank 0
    for (const auto& [got, want] : {std::pair{m.w1, ref.w1}, {m.b1, ref.b1}, {m.w2, ref.w2}}) {
      std::vector<float> g = values(got.grad()), e = values(want.grad());
      ASSERT_EQ(g.size(), e.size());
      for (std::size_t i = 0; i < g.size(); ++i)
        EXPECT_NEAR(g[i], e[i], 1e-5 * (1 + std::abs(e[i]))) << "pass " << pass << " i " << i;
    }
    for (float v : values(m.unused.grad())) EXPECT_FLOAT_EQ(v, 3.0f / float(n));
  }
}

INSTANTIATE_TEST_SUITE_P(Buckets, GradReducerTest,
                         ::testing::Values(int64_t(64), int64_t(1 << 20)));

TEST(GradReducer, DifferentParametersAcrossRanksAreAnError) {
  if (dist::world_size() == 1) GTEST_SKIP() << "needs two ranks";
  Tensor p = attn::zeros({dist::rank() == 1 ? 4 : 5});
  p.requires_grad_(true);
  std::string msg = attn::testing::error_of([&] { dist::GradReducer g({p}); });
  EXPECT_NE(msg.find("differs across ranks"), std::string::npos) << msg;
}

// The communicator's collectives and point-to-point calls on every world size the suite runs with
// (1 alone, 2, 3 and 4 under mpirun): each rank fills its tensors from its rank, so every expected
// value is a closed formula of (rank, size), and the cross-rank checks that turn a mismatch into
// an attn::Error on every rank.
#include <attn/attn.h>
#include <attn/distributed.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "test_util.h"

namespace dist = attn::distributed;
using attn::Dtype;
using attn::Tensor;
using attn::testing::error_of;

namespace {

int R() { return dist::rank(); }
int N() { return dist::world_size(); }

std::vector<float> values(const Tensor& t) {
  Tensor c = t.contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

// rank-dependent values: element i of rank r is 10 r + i.
Tensor ranked(int64_t n, int r) {
  std::vector<float> v(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[std::size_t(i)] = float(10 * r + i);
  return attn::from_vector(v, {n});
}

}  // namespace

TEST(Comm, WorldMatchesTheLauncher) {
  EXPECT_GE(N(), 1);
  EXPECT_GE(R(), 0);
  EXPECT_LT(R(), N());
  const bool launched = std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr;
  EXPECT_EQ(dist::world().backend(), launched && dist::mpi_available() ? "mpi" : "single");
  EXPECT_GE(dist::world().local_size(), 1);
  EXPECT_LT(dist::world().local_rank(), dist::world().local_size());
  if (const char* s = std::getenv("OMPI_COMM_WORLD_SIZE"); s && dist::mpi_available())
    EXPECT_EQ(std::atoi(s), N());
}

TEST(Comm, AllReduceEveryOp) {
  const int n = N(), r = R();
  Tensor t = ranked(5, r);
  dist::world().all_reduce(t, dist::ReduceOp::Sum);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(values(t)[i], float(10 * (n * (n - 1) / 2) + n * i));
  t = ranked(5, r);
  dist::world().all_reduce(t, dist::ReduceOp::Avg);
  for (int i = 0; i < 5; ++i)
    EXPECT_FLOAT_EQ(values(t)[i], float(10 * (n * (n - 1) / 2) + n * i) / float(n));
  t = ranked(5, r);
  dist::world().all_reduce(t, dist::ReduceOp::Max);
  EXPECT_EQ(values(t)[2], float(10 * (n - 1) + 2));
  t = ranked(5, r);
  dist::world().all_reduce(t, dist::ReduceOp::Min);
  EXPECT_EQ(values(t)[2], 2.0f);

  Tensor i64 = attn::full({3}, int64_t(r + 1), Dtype::Int64);
  dist::world().all_reduce(i64, dist::ReduceOp::Sum);
  EXPECT_EQ(i64.data_ptr<int64_t>()[1], int64_t(n * (n + 1) / 2));

  // bool: MAX is "any rank", MIN "every rank".
  Tensor any = attn::full({2}, r == n - 1, Dtype::Bool);
  Tensor all = attn::full({2}, r == n - 1, Dtype::Bool);
  dist::world().all_reduce(any, dist::ReduceOp::Max);
  dist::world().all_reduce(all, dist::ReduceOp::Min);
  EXPECT_TRUE(any.data_ptr<bool>()[0]);
  EXPECT_EQ(all.data_ptr<bool>()[0], n == 1);
}

TEST(Comm, AsyncAllReduceCompletesOnWait) {
  Tensor t = attn::full({1000}, float(R() + 1));
  dist::Work w = dist::world().all_reduce_async(t, dist::ReduceOp::Avg);
  w.wait();
  EXPECT_TRUE(w.is_completed());
  EXPECT_FLOAT_EQ(values(t)[999], float(N() + 1) / 2.0f);
}

TEST(Comm, AllGatherReduceScatterBroadcast) {
  const int n = N(), r = R();
  Tensor g = dist::world().all_gather(ranked(3, r).view({1, 3}));
  ASSERT_EQ(g.shape(), attn::Shape({n, 1, 3}));
  for (int k = 0; k < n; ++k) EXPECT_EQ(values(g)[std::size_t(3 * k + 1)], float(10 * k + 1));

  // reduce_scatter: input (n * 2,) of rank r holds 10 r + i; rank r keeps rows [2r, 2r + 2).
  Tensor rs = dist::world().reduce_scatter(ranked(2 * n, r), dist::ReduceOp::Sum);
  ASSERT_EQ(rs.shape(), attn::Shape({2}));
  for (int i = 0; i < 2; ++i)
    EXPECT_EQ(values(rs)[i], float(10 * (n * (n - 1) / 2) + n * (2 * r + i)));

  Tensor b = ranked(4, r);
  dist::world().broadcast(b, n - 1);
  EXPECT_EQ(values(b), values(ranked(4, n - 1)));
}

TEST(Comm, SendRecvRoundTheRing) {
  const int n = N(), r = R();
  Tensor out = ranked(6, r), in = attn::zeros({6});
  dist::Work rw = dist::world().irecv(in, (r + n - 1) % n, 7);
  dist::Work sw = dist::world().isend(out, (r + 1) % n, 7);
  sw.wait();
  rw.wait();
  EXPECT_EQ(values(in), values(ranked(6, (r + n - 1) % n)));
}

TEST(Comm, BarrierAndStats) {
  dist::world().reset_stats();
  dist::world().barrier();
  Tensor t = attn::zeros({256});
  dist::world().all_reduce(t);
  EXPECT_GE(dist::world().stats().calls, 2);
  EXPECT_GE(dist::world().stats().bytes, uint64_t(1024));
}

TEST(Comm, MismatchedShapesAreNamedOnEveryRank) {
  if (N() == 1) GTEST_SKIP() << "needs two ranks";
  Tensor t = attn::zeros({R() == 1 ? 3 : 2});
  std::string msg = error_of([&] { dist::world().all_reduce(t); });
  EXPECT_NE(msg.find("differs across ranks"), std::string::npos) << msg;
  EXPECT_NE(msg.find("all_reduce((2,) float32, SUM)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("all_reduce((3,) float32, SUM)"), std::string::npos) << msg;
  EXPECT_THROW(dist::world().all_reduce(t), dist::DistributedError);  // Python: RuntimeError
  // The world is still usable afterwards.
  Tensor ok = attn::ones({2});
  dist::world().all_reduce(ok);
  EXPECT_EQ(values(ok)[0], float(N()));
}

TEST(Comm, CheckSameNamesTheRanks) {
  dist::world().check_same("a config", "{\"n_layer\": 4}");
  if (N() == 1) return;
  std::string msg =
      error_of([&] { dist::world().check_same("the config", R() == N() - 1 ? "lr=1" : "lr=2"); });
  EXPECT_NE(msg.find("the config differs across ranks, first at character 3: rank 0 has lr=2 "
                     "but rank " +
                     std::to_string(N() - 1) + " has lr=1"),
            std::string::npos)
      << msg;
}

TEST(Comm, BadArgumentsAreErrorsBeforeAnyCommunication) {
  Tensor t = attn::zeros({4, 4});
  Tensor nc = t.transpose(0, 1);
  EXPECT_NE(error_of([&] { dist::world().all_reduce(nc); }).find("must be contiguous"),
            std::string::npos);
  Tensor b = attn::zeros({2}, Dtype::Bool);
  EXPECT_NE(error_of([&] { dist::world().all_reduce(b); }).find("not supported for bool"),
            std::string::npos);
  Tensor i = attn::zeros({2}, Dtype::Int64);
  EXPECT_NE(error_of([&] { dist::world().all_reduce(i, dist::ReduceOp::Avg); }).find("float32"),
            std::string::npos);
  EXPECT_NE(error_of([&] { dist::world().send(t, N()); }).find("is not a rank"), std::string::npos);
  EXPECT_NE(error_of([&] { dist::world().broadcast(t, -1); }).find("root -1"), std::string::npos);
  Tensor odd = attn::zeros({2 * N() + 1});
  if (N() > 1)
    EXPECT_NE(error_of([&] { dist::world().reduce_scatter(odd); }).find("divisible"),
              std::string::npos);
}

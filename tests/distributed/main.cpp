// main() of attn_dist_tests: every rank runs every test. Rank 0 reports as GoogleTest usually
// does; the other ranks print only their failures, prefixed with their rank. A rank whose test
// fails exits non-zero, and mpirun then fails the whole run; a rank left waiting in a collective
// is aborted by attn's deadline (ATTN_DIST_TIMEOUT), so nothing hangs.
#include <attn/distributed.h>
#include <gtest/gtest.h>

#include <cstdio>

namespace {

class RankFailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (!r.failed()) return;
    std::fprintf(stderr, "[rank %d] %s:%d: Failure\n%s\n", rank_,
                 r.file_name() ? r.file_name() : "?", r.line_number(), r.summary());
  }
  void OnTestEnd(const testing::TestInfo& info) override {
    if (info.result()->Failed())
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  testing::InitGoogleTest(&argc, argv);
  attn::distributed::init();
  const int rank = attn::distributed::rank();
  if (rank != 0) {
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  const int rc = RUN_ALL_TESTS();
  // Every rank finishes together: one rank's early exit must not look like a crash to the others.
  attn::distributed::world().barrier();
  attn::distributed::finalize();
  return rc;
}

// kernels::sgemm's one-row products (a decoding step) against a double-precision reference: the
// row-major B of a Linear layer's weight goes to attn's gemv_rows (gemv.h), on every instruction
// set this CPU has; B stored (K, N) and a strided row of op(A) (trans_a) too; alpha, beta, a NaN
// C with beta 0, row strides wider than K, every K modulo the vector widths; results that do not
// depend on the thread count.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "../../src/kernels/cpu/gemm.h"
#include "../../src/kernels/cpu/gemv.h"
#include "../../src/kernels/cpu/sdpa_fused.h"
#include "../../src/kernels/cpu/threads.h"

namespace {

namespace K = attn::kernels;
using K::FusedIsa;

std::vector<float> values(int64_t n, uint32_t seed) {
  std::vector<float> v(static_cast<size_t>(n));
  uint32_t x = seed * 2654435761u + 1;
  for (float& f : v) {  // xorshift32, uniform in [-1, 1)
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    f = float(x >> 8) / float(1 << 23) - 1.0f;
  }
  return v;
}

struct Problem {
  int64_t N, K, ldb;
  bool trans_b;  // true: B stored (N, K) (a Linear weight); false: (K, N)
  bool trans_a;  // true: the row of A is a column of a (K, lda) matrix
  float alpha, beta;
};

// C (1, N) = alpha * a op(B) + beta * C0 by kernels::sgemm, checked element by element against
// the same sum in double: |error| <= 2 K eps sum_k |alpha a_k b_kn| + ulp-level slack.
void check(const Problem& p, std::vector<float>* out = nullptr) {
  const int64_t lda = p.trans_a ? 3 : p.K;  // A (K, 3) when transposed: its first column
  const std::vector<float> A = values(p.trans_a ? p.K * lda : p.K, 1);
  const int64_t rows_b = p.trans_b ? p.N : p.K;
  const std::vector<float> B = values(rows_b * p.ldb, 2);
  std::vector<float> C = values(p.N, 3);
  const std::vector<float> C0 = C;
  if (p.beta == 0.0f) std::fill(C.begin(), C.end(), std::numeric_limits<float>::quiet_NaN());
  K::sgemm(p.trans_a, p.trans_b, 1, p.N, p.K, p.alpha, A.data(), lda, B.data(), p.ldb, p.beta,
           C.data(), p.N);
  const double eps = std::numeric_limits<float>::epsilon();
  for (int64_t n = 0; n < p.N; ++n) {
    double sum = 0, mag = 0;
    for (int64_t k = 0; k < p.K; ++k) {
      const double a = A[static_cast<size_t>(p.trans_a ? k * lda : k)];
      const double b = B[static_cast<size_t>(p.trans_b ? n * p.ldb + k : k * p.ldb + n)];
      sum += a * b;
      mag += std::abs(a * b);
    }
    const double want = double(p.alpha) * sum + double(p.beta) * C0[static_cast<size_t>(n)];
    const double tol =
        2.0 * double(p.K + 2) * eps * (std::abs(p.alpha) * mag + std::abs(p.beta * C0[size_t(n)])) +
        1e-30;
    ASSERT_NEAR(C[static_cast<size_t>(n)], want, tol)
        << "n " << n << " of N " << p.N << ", K " << p.K << ", ldb " << p.ldb << ", trans_b "
        << p.trans_b << ", trans_a " << p.trans_a << ", alpha " << p.alpha << ", beta " << p.beta;
  }
  if (out) *out = C;
}

class IsaScope {
 public:
  explicit IsaScope(FusedIsa isa) : before_(K::fused_isa()), ok_(K::set_fused_isa(isa)) {}
  ~IsaScope() { K::set_fused_isa(before_); }
  bool ok() const { return ok_; }

 private:
  FusedIsa before_;
  bool ok_;
};

TEST(GemmOneRow, EveryInstructionSetAgainstDouble) {
  int tried = 0;
  for (FusedIsa isa :
       {FusedIsa::Scalar, FusedIsa::Avx2, FusedIsa::Avx512, FusedIsa::Neon, FusedIsa::Sve}) {
    IsaScope scope(isa);
    if (!scope.ok()) continue;
    ++tried;
    SCOPED_TRACE(K::fused_isa_name(isa));
    // K around every multiple of the vector widths (4, 8, 16 lanes; 4 accumulators).
    for (int64_t k : {1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 768})
      for (int64_t n : {1, 2, 5, 17})
        for (bool trans_b : {true, false})
          check({n, k, trans_b ? k + (n % 3) : n + 1, trans_b, false, 1.0f, 0.0f});
    check({37, 200, 203, true, true, 0.5f, 0.0f});  // a strided row of A
    check({37, 200, 200, true, false, -2.0f, 1.5f});
    check({37, 200, 41, false, true, 0.25f, -1.0f});
  }
  EXPECT_GE(tried, 1);
}

TEST(GemmOneRow, GemvRowsDirectly) {
  // beta == 0 never reads y (it may hold NaN); beta != 0 adds beta * y.
  const std::vector<float> B = values(3 * 10, 5), x = values(10, 6);
  std::vector<float> y(3, std::numeric_limits<float>::quiet_NaN());
  K::gemv_rows(3, 10, 1.0f, B.data(), 10, x.data(), 0.0f, y.data());
  for (int n = 0; n < 3; ++n) {
    double want = 0;
    for (int k = 0; k < 10; ++k) want += double(B[size_t(n * 10 + k)]) * x[size_t(k)];
    EXPECT_NEAR(y[size_t(n)], want, 1e-5) << n;
  }
  std::vector<float> y2 = y;
  K::gemv_rows(3, 10, 2.0f, B.data(), 10, x.data(), -1.0f, y2.data());
  for (int n = 0; n < 3; ++n) EXPECT_NEAR(y2[size_t(n)], y[size_t(n)], 1e-5) << n;  // 2y - y
  K::gemv_rows(0, 10, 1.0f, B.data(), 10, x.data(), 0.0f, nullptr);                 // nothing
  std::vector<float> z(2, 7.0f);
  K::gemv_rows(2, 0, 1.0f, B.data(), 0, x.data(), 0.0f, z.data());  // empty sums
  EXPECT_EQ(z, std::vector<float>(2, 0.0f));
}

TEST(GemmOneRow, SameBitsAtEveryThreadCount) {
  // A large one-row product is split by columns across the threads: each element's sum is the
  // same, so the output is bitwise the same at 1 and 2 threads.
  const Problem p{50000, 96, 96, true, false, 1.0f, 0.0f};
  const int before = K::num_threads();
  std::vector<float> one, two;
  K::set_num_threads(1);
  check(p, &one);
  K::set_num_threads(2);
  check(p, &two);
  K::set_num_threads(before);
  EXPECT_EQ(one, two);
}

}  // namespace

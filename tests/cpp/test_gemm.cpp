// kernels::sgemm's few-row products (a decoding step) against a double-precision reference: the
// row-major B of a Linear layer's weight goes to attn's gemm_rows (gemm_rows.h), on every
// instruction set this CPU has; B stored (K, N) and a transposed op(A) too; alpha, beta, a NaN C
// with beta 0, row strides wider than K, every K modulo the vector widths, every M up to
// kGemmRowsMax; results that depend neither on the thread count nor on the other rows.
#include <attn/half.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "../../src/backend/cpu/gemm.h"
#include "../../src/backend/cpu/gemm_half.h"
#include "../../src/backend/cpu/gemm_rows.h"
#include "../../src/backend/cpu/sdpa_fused.h"
#include "../../src/backend/cpu/threads.h"
#include "isa_scope.h"

namespace {

namespace K = attn::kernels;
using attn::testing::IsaScope;
using K::Isa;

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
  int64_t M, N, K, ldb;
  bool trans_b;  // true: B stored (N, K) (a Linear weight); false: (K, N)
  bool trans_a;  // true: A stored (K, lda), op(A) its first M columns transposed
  float alpha, beta;
};

// C (M, N) = alpha * op(A) op(B) + beta * C0 by kernels::sgemm, checked element by element
// against the same sum in double: |error| <= 2 (K + 2) eps (sum_k |alpha a_mk b_kn| + |beta c|).
void check(const Problem& p, std::vector<float>* out = nullptr) {
  const int64_t lda = p.trans_a ? p.M + 2 : p.K + 1;
  const std::vector<float> A = values(p.trans_a ? p.K * lda : p.M * lda, 1);
  const int64_t rows_b = p.trans_b ? p.N : p.K;
  const std::vector<float> B = values(rows_b * p.ldb, 2);
  const int64_t ldc = p.N + 3;
  std::vector<float> C = values(p.M * ldc, 3);
  const std::vector<float> C0 = C;
  if (p.beta == 0.0f) std::fill(C.begin(), C.end(), std::numeric_limits<float>::quiet_NaN());
  K::sgemm(p.trans_a, p.trans_b, p.M, p.N, p.K, p.alpha, A.data(), lda, B.data(), p.ldb, p.beta,
           C.data(), ldc);
  const double eps = std::numeric_limits<float>::epsilon();
  for (int64_t m = 0; m < p.M; ++m)
    for (int64_t n = 0; n < p.N; ++n) {
      double sum = 0, mag = 0;
      for (int64_t k = 0; k < p.K; ++k) {
        const double a = A[static_cast<size_t>(p.trans_a ? k * lda + m : m * lda + k)];
        const double b = B[static_cast<size_t>(p.trans_b ? n * p.ldb + k : k * p.ldb + n)];
        sum += a * b;
        mag += std::abs(a * b);
      }
      const double c0 = C0[static_cast<size_t>(m * ldc + n)];
      const double want = double(p.alpha) * sum + double(p.beta) * c0;
      const double tol =
          2.0 * double(p.K + 2) * eps * (std::abs(p.alpha) * mag + std::abs(p.beta * c0)) + 1e-30;
      ASSERT_NEAR(C[static_cast<size_t>(m * ldc + n)], want, tol)
          << "(" << m << ", " << n << ") of M " << p.M << " N " << p.N << ", K " << p.K << ", ldb "
          << p.ldb << ", trans_b " << p.trans_b << ", trans_a " << p.trans_a << ", alpha "
          << p.alpha << ", beta " << p.beta;
    }
  if (out) *out = C;
}

TEST(GemmFewRows, EveryInstructionSetAgainstDouble) {
  int tried = 0;
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Neon, Isa::Sve}) {
    IsaScope scope(isa);
    if (!scope.ok()) continue;
    ++tried;
    SCOPED_TRACE(K::isa_name(isa));
    // K around every multiple of the vector widths (4, 8, 16 lanes; 4 accumulators).
    for (int64_t k : {1, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65, 127, 128, 129, 768})
      for (int64_t n : {1, 2, 5, 17})
        for (bool trans_b : {true, false})
          check({1, n, k, trans_b ? k + (n % 3) : n + 1, trans_b, false, 1.0f, 0.0f});
    // Every row count up to kGemmRowsMax, and one more (sgemm's own path), against a small B
    // (oneDNN or OpenBLAS) and a large one (gemm_rows, B in several blocks).
    for (int64_t m = 2; m <= K::kGemmRowsMax + 1; ++m) {
      check({m, 29, 70, 70, true, false, 1.0f, 0.0f});
      check({m, 2000, 160, 163, true, false, 0.5f, 0.0f});
    }
    check({1, 37, 200, 203, true, true, 0.5f, 0.0f});  // a strided row of A
    check({5, 37, 200, 200, true, true, -2.0f, 1.5f});
    check({3, 37, 200, 41, false, false, 0.25f, -1.0f});
  }
  EXPECT_GE(tried, 1);
}

TEST(GemmFewRows, GemmRowsDirectly) {
  // beta == 0 never reads Y (it may hold NaN); beta != 0 adds beta * Y.
  const std::vector<float> B = values(3 * 10, 5), x = values(10, 6);
  std::vector<float> y(3, std::numeric_limits<float>::quiet_NaN());
  K::gemm_rows(1, 3, 10, 1.0f, x.data(), 10, B.data(), 10, 0.0f, y.data(), 3);
  for (int n = 0; n < 3; ++n) {
    double want = 0;
    for (int k = 0; k < 10; ++k) want += double(B[size_t(n * 10 + k)]) * x[size_t(k)];
    EXPECT_NEAR(y[size_t(n)], want, 1e-5) << n;
  }
  std::vector<float> y2 = y;
  K::gemm_rows(1, 3, 10, 2.0f, x.data(), 10, B.data(), 10, -1.0f, y2.data(), 3);
  for (int n = 0; n < 3; ++n) EXPECT_NEAR(y2[size_t(n)], y[size_t(n)], 1e-5) << n;  // 2y - y
  K::gemm_rows(1, 0, 10, 1.0f, x.data(), 10, B.data(), 10, 0.0f, nullptr, 0);       // nothing
  std::vector<float> z(2, 7.0f);
  K::gemm_rows(1, 2, 0, 1.0f, x.data(), 0, B.data(), 0, 0.0f, z.data(), 2);  // empty sums
  EXPECT_EQ(z, std::vector<float>(2, 0.0f));
}

TEST(GemmFewRows, ARowDoesNotDependOnTheOtherRows) {
  // Decoding a batch gives each sequence the bits it would get alone: every row count, on every
  // instruction set, sums each element in the same order.
  const int64_t N = 300, K = 203;
  const std::vector<float> X = values(K::kGemmRowsMax * K, 7), B = values(N * K, 8);
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Neon, Isa::Sve}) {
    IsaScope scope(isa);
    if (!scope.ok()) continue;
    SCOPED_TRACE(K::isa_name(isa));
    std::vector<float> alone(size_t(K::kGemmRowsMax * N));
    for (int64_t m = 0; m < K::kGemmRowsMax; ++m)
      K::gemm_rows(1, N, K, 1.0f, X.data() + m * K, K, B.data(), K, 0.0f, alone.data() + m * N, N);
    for (int64_t rows = 2; rows <= K::kGemmRowsMax; ++rows) {
      std::vector<float> together(size_t(rows * N));
      K::gemm_rows(rows, N, K, 1.0f, X.data(), K, B.data(), K, 0.0f, together.data(), N);
      EXPECT_TRUE(std::equal(together.begin(), together.end(), alone.begin())) << rows << " rows";
    }
  }
}

TEST(GemmFewRows, SameBitsAtEveryThreadCount) {
  // A large few-row product is split by columns across the threads: each element's sum is the
  // same, so the output is bitwise the same at 1 and 2 threads.
  const int before = K::num_threads();
  for (int64_t m : {int64_t(1), int64_t(6)}) {
    const Problem p{m, 50000, 96, 96, true, false, 1.0f, 0.0f};
    std::vector<float> one, two;
    K::set_num_threads(1);
    check(p, &one);
    K::set_num_threads(2);
    check(p, &two);
    ASSERT_EQ(one.size(), two.size());  // bit for bit (the padding of C is NaN on both sides)
    EXPECT_EQ(std::memcmp(one.data(), two.data(), one.size() * sizeof(float)), 0) << m << " rows";
  }
  K::set_num_threads(before);
}

// The same product with the hooks sgemm runs in its parallel region: before() adds a bias row to C
// (beta 1), after() squares it; its output at a thread count.
std::vector<float> product(const Problem& p, int threads, bool hooks) {
  K::set_num_threads(threads);
  const int64_t lda = p.trans_a ? p.M : p.K, ldc = p.N;
  const std::vector<float> A = values(p.M * p.K, 11), B = values(p.N * p.K, 12),
                           bias = values(p.N, 13);
  std::vector<float> C(static_cast<size_t>(p.M * ldc), 0.5f);
  const auto add_bias = [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      for (int64_t n = 0; n < p.N; ++n) C[size_t(r * ldc + n)] = bias[size_t(n)];
  };
  const auto square = [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0 * ldc; i < r1 * ldc; ++i) C[size_t(i)] *= C[size_t(i)];
  };
  if (hooks)
    K::sgemm(p.trans_a, p.trans_b, p.M, p.N, p.K, p.alpha, A.data(), lda, B.data(), p.ldb, 1.0f,
             C.data(), ldc, add_bias, square);
  else
    K::sgemm(p.trans_a, p.trans_b, p.M, p.N, p.K, p.alpha, A.data(), lda, B.data(), p.ldb, p.beta,
             C.data(), ldc);
  return C;
}

TEST(Gemm, SameBitsAtEveryThreadCount) {
  // A product is cut into pieces by its shape and the machine (gemm.cpp, gemm_pieces), so its bits
  // do not depend on the thread count, whatever the BLAS does inside a piece: oneDNN's AVX2 sgemm
  // sums the last rows of a block in an order that depends on the block's height, and a split by
  // thread count gave other bits at 1 and 2 threads (run this test with ONEDNN_MAX_CPU_ISA=AVX2
  // too). Shapes of every layout with heights not a multiple of 6 or 16, K below and above oneDNN's
  // K blocks, rows and columns split, and each with the hooks of linear_gelu.
  const int before = K::num_threads();
  const std::vector<std::array<int64_t, 3>> shapes = {
      {128, 64, 256},   {512, 64, 256}, {631, 501, 580}, {1000, 300, 700}, {33, 2000, 213},
      {297, 595, 1193}, {4099, 96, 64}, {70, 1500, 900}, {2, 3000, 600},   {1, 20000, 96}};
  for (const auto& [M, N, Kd] : shapes)
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (bool hooks : {false, true}) {
          const Problem p{M, N, Kd, tb ? Kd : N, tb, ta, 1.0f, 0.0f};
          const std::vector<float> one = product(p, 1, hooks);
          for (int threads : {2, 3, 5}) {
            const std::vector<float> many = product(p, threads, hooks);
            ASSERT_EQ(std::memcmp(one.data(), many.data(), one.size() * sizeof(float)), 0)
                << M << " x " << N << " x " << Kd << ", trans_a " << ta << ", trans_b " << tb
                << ", hooks " << hooks << ", " << threads << " threads against 1";
          }
        }
  K::set_num_threads(before);
}

// narrow_half / widen_half (float16) on every instruction set (F16C on x86) equal the scalar
// conversions of attn/half.h bit for bit: every float16 value and the midpoints between
// neighbours (ties to even), values beyond float16's range and below its subnormals, infinities
// and NaNs with payloads (a quiet NaN of the sign, as the scalar code makes it), at every offset
// of an 8-wide vector.
TEST(HalfConversions, Float16EqualsTheScalarConversionOnEveryInstructionSet) {
  std::vector<float> in;
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float f = attn::fp16_bits_to_float(uint16_t(h));
    in.push_back(f);
    const float next = attn::fp16_bits_to_float(uint16_t(h + 1));
    if (std::isfinite(f) && std::isfinite(next) && (h & 0x7FFFu) != 0x7FFFu)
      in.push_back(f + (next - f) / 2);  // the midpoint (exact in float)
  }
  for (float f : {65504.0f, 65519.0f, 65520.0f, 1e6f, 3e-8f, 2.9802322e-8f, 1e-30f, 1e-45f})
    in.push_back(f), in.push_back(-f);
  for (uint32_t bits : {0x7F800001u, 0x7FC00000u, 0xFFBFFFFFu, 0x7FFFFFFFu})
    in.push_back(std::bit_cast<float>(bits));
  std::vector<uint16_t> want(in.size());
  for (size_t i = 0; i < in.size(); ++i) want[i] = attn::float_to_fp16_bits(in[i]);
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Neon, Isa::Sve}) {
    IsaScope scope(isa);
    if (!scope.ok()) continue;
    for (size_t offset = 0; offset < 8; ++offset) {
      std::vector<uint16_t> got(in.size() - offset);
      K::narrow_half(K::HalfKind::Float16, in.data() + offset, got.data(), int64_t(got.size()));
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(got[i], want[i + offset]) << "isa " << int(isa) << " value " << in[i + offset];
      std::vector<float> back(got.size());
      K::widen_half(K::HalfKind::Float16, got.data(), back.data(), int64_t(got.size()));
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(std::bit_cast<uint32_t>(back[i]),
                  std::bit_cast<uint32_t>(attn::fp16_bits_to_float(got[i])))
            << "isa " << int(isa) << " bits " << got[i];
    }
  }
}

}  // namespace

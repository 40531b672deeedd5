// Few-row bfloat16 x bfloat16 products by AVX512-BF16's dot product (gemm_rows_bf16_dot,
// gemm_bf16_weights_dot): against exact sums in double, the padding of strided operands never
// read, the bits independent of the thread count and of the rows computed together, and
// bfloat16 linear / matmul agreeing with the widening path they replace. On a CPU without
// AVX512-BF16 the path is off (checked), and off x86-64 the portable loop is checked the same way.
#include <attn/attn.h>
#include <attn/half.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "../../src/backend/cpu/gemm_half.h"
#include "../../src/backend/cpu/gemm_rows.h"
#include "../../src/backend/cpu/isa.h"
#include "isa_scope.h"

namespace {

namespace K = attn::kernels;
namespace F = attn::nn::functional;
using attn::Dtype;
using attn::Tensor;

// Whether the kernel may run here: the dot product on this CPU, or the portable loop off x86-64.
bool kernel_runs() {
#if defined(__x86_64__)
  return K::bf16_dot_enabled();
#else
  return true;
#endif
}

// rows x cols bfloat16 bits (row stride ld, NaN in the padding after each row).
std::vector<uint16_t> random_bits(int64_t rows, int64_t cols, int64_t ld, std::mt19937& gen) {
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<uint16_t> v(size_t(rows * ld), attn::float_to_bf16_bits(std::nanf("")));
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) v[size_t(r * ld + c)] = attn::float_to_bf16_bits(nd(gen));
  return v;
}

TEST(Bf16Dot, MatchesExactSumsAndNeverReadsPadding) {
  if (!kernel_runs()) GTEST_SKIP() << "no AVX512-BF16 on this CPU";
  std::mt19937 gen(3);
  for (int64_t M : {1, 2, 3, 4, 5, 8})
    for (int64_t Kd : {1, 2, 7, 31, 32, 33, 96, 127, 128, 129, 300, 2065})
      for (int64_t N : {1, 5, 37}) {
        SCOPED_TRACE("M " + std::to_string(M) + " K " + std::to_string(Kd) + " N " +
                     std::to_string(N));
        const int64_t ldx = Kd + 3, ldb = Kd + 5, ldy = N + 2;
        const auto X = random_bits(M, Kd, ldx, gen), B = random_bits(N, Kd, ldb, gen);
        const float sentinel = -12345.0f;
        std::vector<float> Y(size_t(M * ldy), sentinel);
        K::gemm_rows_bf16_dot(M, N, Kd, X.data(), ldx, B.data(), ldb, Y.data(), ldy);
        for (int64_t m = 0; m < M; ++m) {
          for (int64_t n = 0; n < N; ++n) {
            double exact = 0, magnitude = 0;
            for (int64_t k = 0; k < Kd; ++k) {
              const double p = double(attn::bf16_bits_to_float(X[size_t(m * ldx + k)])) *
                               attn::bf16_bits_to_float(B[size_t(n * ldb + k)]);
              exact += p;
              magnitude += std::fabs(p);
            }
            // Float sums of exact products: at most K roundings of partial sums.
            const double bound = double(Kd) * std::numeric_limits<float>::epsilon() * magnitude;
            const float y = Y[size_t(m * ldy + n)];
            ASSERT_TRUE(std::isfinite(y)) << "a NaN of the padding was read at " << m << "," << n;
            EXPECT_LE(std::fabs(y - exact), bound) << m << "," << n;
          }
          for (int64_t n = N; n < ldy; ++n) EXPECT_EQ(Y[size_t(m * ldy + n)], sentinel);
        }
      }
}

TEST(Bf16Dot, BitsDependOnNeitherThreadsNorTheRowsAlongside) {
  if (!kernel_runs()) GTEST_SKIP() << "no AVX512-BF16 on this CPU";
  std::mt19937 gen(5);
  const int64_t M = 7, N = 1000, Kd = 1111;
  const auto X = random_bits(M, Kd, Kd, gen), B = random_bits(N, Kd, Kd, gen);
  const int before = attn::get_num_threads();
  std::vector<float> one(size_t(M * N)), two(size_t(M * N));
  attn::set_num_threads(1);
  ASSERT_TRUE(K::gemm_bf16_weights_dot(M, N, Kd, X.data(), Kd, B.data(), Kd, one.data(), N) ||
              !K::bf16_dot_enabled());
  attn::set_num_threads(2);
  const bool ran = K::gemm_bf16_weights_dot(M, N, Kd, X.data(), Kd, B.data(), Kd, two.data(), N);
  attn::set_num_threads(before);
  if (!ran) GTEST_SKIP() << "the dot product is off here (the portable loop was checked above)";
  EXPECT_EQ(one, two);
  for (int64_t m = 0; m < M; ++m) {  // each row alone: the same bits
    std::vector<float> row(static_cast<size_t>(N));
    K::gemm_rows_bf16_dot(1, N, Kd, X.data() + m * Kd, Kd, B.data(), Kd, row.data(), N);
    EXPECT_EQ(row, std::vector<float>(one.begin() + m * N, one.begin() + (m + 1) * N)) << m;
  }
}

TEST(Bf16Dot, OffOnOtherInstructionSetsAndRefusedWithoutTheInstruction) {
  {
    attn::testing::IsaScope avx2(K::Isa::Avx2);
    if (avx2.ok()) EXPECT_FALSE(K::bf16_dot_enabled());
  }
  if (!K::bf16_dot_enabled()) {
    // The CPU lacks it (allowing it is refused), ATTN_CPU_BF16_DOT=0 holds it off, or the
    // instruction set is capped below AVX-512: allowing it changes nothing.
    K::set_bf16_dot(true);
    EXPECT_FALSE(K::bf16_dot_enabled());
    return;
  }
  ASSERT_TRUE(K::set_bf16_dot(false));
  EXPECT_FALSE(K::bf16_dot_enabled());
  std::vector<float> y(1);
  const uint16_t one = attn::float_to_bf16_bits(1.0f);
  EXPECT_FALSE(K::gemm_bf16_weights_dot(1, 1, 1, &one, 1, &one, 1, y.data(), 1));
  ASSERT_TRUE(K::set_bf16_dot(true));
  EXPECT_TRUE(K::bf16_dot_enabled());
  EXPECT_TRUE(K::gemm_bf16_weights_dot(1, 1, 1, &one, 1, &one, 1, y.data(), 1));
  EXPECT_EQ(y[0], 1.0f);
}

// bfloat16 linear and x @ W.T of one to eight rows, with the dot product and without: each
// output is one rounding of a float sum of the same exact products, so the two agree to one
// bfloat16 step (where the float sums straddle a rounding boundary) and mostly exactly.
TEST(Bf16Dot, LinearAndMatmulAgreeWithTheWideningPath) {
  if (!K::bf16_dot_enabled()) GTEST_SKIP() << "no AVX512-BF16 on this CPU";
  attn::manual_seed(11);
  const Tensor w = attn::randn({300, 515}).to(Dtype::BFloat16);
  const Tensor b = attn::randn({300}).to(Dtype::BFloat16);
  for (int64_t rows : {1, 3, 8}) {
    SCOPED_TRACE(rows);
    const Tensor x = attn::randn({rows, 515}).to(Dtype::BFloat16);
    const Tensor dot_lin = F::linear(x, w, b).to(Dtype::Float32);
    const Tensor dot_mm = attn::matmul(x, w.mT()).to(Dtype::Float32);
    ASSERT_TRUE(K::set_bf16_dot(false));
    const Tensor wide_lin = F::linear(x, w, b).to(Dtype::Float32);
    const Tensor wide_mm = attn::matmul(x, w.mT()).to(Dtype::Float32);
    ASSERT_TRUE(K::set_bf16_dot(true));
    for (const auto& [got, want] : {std::pair{dot_lin, wide_lin}, std::pair{dot_mm, wide_mm}}) {
      const float* g = got.data_ptr<float>();
      const float* e = want.data_ptr<float>();
      int64_t differ = 0;
      for (int64_t i = 0; i < got.numel(); ++i) {
        EXPECT_LE(std::fabs(g[i] - e[i]), std::ldexp(std::fabs(e[i]), -7) + 1e-30f) << i;
        differ += g[i] != e[i];
      }
      EXPECT_LT(differ, got.numel() / 10);
    }
  }
}

}  // namespace

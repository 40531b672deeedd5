// MXFP4 matrices (include/attn/mxfp4.h, src/backend/cpu/mxfp4.h): decoding against the format's
// definition written here (E2M1 codes, E8M0 scales), the streaming product against a double sum
// over the decoded weights on every instruction set the CPU has, the choice of path by row count
// and gradient, and the refusals. The model-level check (gpt-oss's experts kept in MXFP4 against
// transformers' dequantized model) is tests/python/test_decoder_vs_transformers5.py.
#include <attn/autograd.h>
#include <attn/mxfp4.h>
#include <attn/ops.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "../../src/backend/cpu/isa.h"
#include "../../src/backend/cpu/mxfp4.h"
#include "test_util.h"

namespace {

namespace K = attn::kernels;
using attn::Mxfp4Matrices;
using attn::Tensor;

// The value of an E2M1 code from its bits: sign, two exponent bits (bias 1), one mantissa bit;
// exponent 0 is subnormal (0 or 0.5).
double e2m1(int code) {
  const int sign = code >> 3, exp = (code >> 1) & 3, man = code & 1;
  const double v = exp == 0 ? 0.5 * man : std::ldexp(1.0 + 0.5 * man, exp - 1);
  return sign ? -v : v;
}

// Random codes, and scales around 2^0 (the ends of E8M0's range are tested apart).
Mxfp4Matrices random_matrices(int64_t count, int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 gen(seed);
  std::vector<uint8_t> blocks(std::size_t(count * rows * cols / 2)), scales(blocks.size() / 16);
  for (auto& b : blocks) b = uint8_t(gen() & 0xFF);
  for (auto& s : scales) s = uint8_t(120 + gen() % 12);
  return Mxfp4Matrices(count, rows, cols, std::move(blocks), std::move(scales));
}

// Matrix e decoded from the definition, in double: (rows, cols).
std::vector<double> decoded(const Mxfp4Matrices& m, int64_t e) {
  std::vector<double> w(std::size_t(m.rows * m.cols));
  const int64_t G = m.cols / 32;
  for (int64_t r = 0; r < m.rows; ++r)
    for (int64_t c = 0; c < m.cols; ++c) {
      const int64_t row = e * m.rows + r;
      const uint8_t byte = (*m.blocks)[std::size_t((row * G + c / 32) * 16 + (c % 32) / 2)];
      const int code = c % 2 == 0 ? byte & 0xF : byte >> 4;
      const int s = (*m.scales)[std::size_t(row * G + c / 32)];
      w[std::size_t(r * m.cols + c)] = s == 255 ? NAN : std::ldexp(e2m1(code), s - 127);
    }
  return w;
}

TEST(Mxfp4, DequantizeDecodesEveryCodeAndScaleExactly) {
  // Every code in both nibbles, and the scales 2^-127 .. 2^127 and NaN.
  const int64_t rows = 256, cols = 32;
  std::vector<uint8_t> blocks(static_cast<std::size_t>(rows * cols / 2)),
      scales(static_cast<std::size_t>(rows));
  for (std::size_t i = 0; i < blocks.size(); ++i) blocks[i] = uint8_t((i * 7 + i / 16) & 0xFF);
  for (int64_t r = 0; r < rows; ++r) scales[std::size_t(r)] = uint8_t(r);
  const Mxfp4Matrices m(1, rows, cols, std::move(blocks), std::move(scales));
  const std::vector<double> want = decoded(m, 0);
  for (const attn::Dtype dt : {attn::Dtype::Float32, attn::Dtype::BFloat16}) {
    const Tensor w = attn::mxfp4_dequantize(m, 0, dt).to(attn::Dtype::Float32).contiguous();
    ASSERT_EQ(w.shape(), (attn::Shape{rows, cols}));
    const float* p = w.data_ptr<float>();
    for (std::size_t i = 0; i < want.size(); ++i) {
      if (std::isnan(want[i])) {
        EXPECT_TRUE(std::isnan(p[i])) << i;
      } else {
        // a code times a power of two: exact (beyond float's range, the infinity of its sign)
        EXPECT_EQ(p[i], float(want[i])) << i;
        EXPECT_EQ(std::signbit(p[i]), std::signbit(want[i])) << i;
      }
    }
  }
}

// X as the 16-bit path rounds it, written from its definition: per group of 32, the power of two
// 2^e that makes the largest |x| an integer in [2^14, 2^15), each x the nearest multiple of it
// (at most 32767 of them).
std::vector<float> rounded_to_int16_groups(const std::vector<float>& x) {
  std::vector<float> out(x.size());
  for (std::size_t g = 0; g < x.size(); g += 32) {
    double big = 0;
    for (std::size_t i = g; i < g + 32; ++i) big = std::max(big, std::abs(double(x[i])));
    int p = 0;
    std::frexp(big, &p);  // big = f * 2^p, f in [0.5, 1)
    const int e = big == 0 ? 0 : p - 15;
    for (std::size_t i = g; i < g + 32; ++i)
      out[i] =
          float(std::ldexp(std::min(std::nearbyint(std::ldexp(double(x[i]), -e)), 32767.0), e));
  }
  return out;
}

// X as the 8-bit path rounds it (llama.cpp's q8_0), written from its definition: per group of 32,
// the step d = (largest |x|) / 127, held as a float times 2^e where 2^e <= largest < 2^(e + 1);
// each x the nearest multiple of it (ties to even), from x * 127 / largest in double.
std::vector<float> rounded_to_int8_groups(const std::vector<float>& x) {
  std::vector<float> out(x.size());
  for (std::size_t g = 0; g < x.size(); g += 32) {
    double big = 0;
    for (std::size_t i = g; i < g + 32; ++i) big = std::max(big, std::abs(double(x[i])));
    int p = 0;
    std::frexp(big, &p);  // big = f * 2^p, f in [0.5, 1)
    const double d = std::ldexp(double(float(std::ldexp(big, 1 - p) / 127.0)), p - 1);
    for (std::size_t i = g; i < g + 32; ++i)
      out[i] = big == 0 ? 0.0f : float(std::nearbyint(double(x[i]) * (127.0 / big)) * d);
  }
  return out;
}

// The streaming product (up to 8 rows; with float X and with X rounded to 16-bit or 8-bit
// integers) and the block-decoding one (more) on every instruction set against double sums of
// the decoded weights: the integer paths against the product of X rounded as defined above (AVX2
// and AVX-512 take them; the others ignore the request), and the 16-bit one within 2^-15 of the
// group's largest |x| of the exact product, the 8-bit one within 2^-7.
TEST(Mxfp4, RowsEqualTheProductWithTheDecodedMatrixOnEveryIsa) {
  // 37 rows: one decoding row goes in pairs of rows and one alone; 11 groups a row: the scales
  // of 8 groups at once, then 3 one by one
  const Mxfp4Matrices m = random_matrices(3, 37, 352, 5);
  std::mt19937 gen(9);
  std::normal_distribution<float> normal;
  const std::vector<double> w = decoded(m, 2);
  // want (M, rows) = x (M, cols) @ w^T in double, and the largest sum of the terms' magnitudes
  const auto product = [&](int64_t M, const std::vector<float>& x, std::vector<double>& want) {
    want.assign(std::size_t(M * m.rows), 0.0);
    double scale = 1;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t r = 0; r < m.rows; ++r) {
        double s = 0, a = 0;
        for (int64_t c = 0; c < m.cols; ++c) {
          s += double(x[std::size_t(i * m.cols + c)]) * w[std::size_t(r * m.cols + c)];
          a += std::abs(double(x[std::size_t(i * m.cols + c)]) * w[std::size_t(r * m.cols + c)]);
        }
        want[std::size_t(i * m.rows + r)] = s;
        scale = std::max(scale, a);
      }
    return scale;
  };
  for (const int64_t M : {1, 2, 3, 5, 8, 9, 20}) {
    std::vector<float> x(std::size_t(M * m.cols));
    // magnitudes spread over 2^-12 .. 2^12, so that groups round at different scales
    for (auto& v : x) v = std::ldexp(normal(gen), int(gen() % 25) - 12);
    std::vector<double> exact, of_int16, of_int8;
    const double scale = product(M, x, exact);
    const double scale_int16 = product(M, rounded_to_int16_groups(x), of_int16);
    const double scale_int8 = product(M, rounded_to_int8_groups(x), of_int8);
    const int64_t off = 2 * m.rows * m.cols;
    for (const K::Isa isa : {K::Isa::Scalar, K::Isa::Avx2, K::Isa::Avx512, K::Isa::Neon})
      for (const K::Mxfp4X as : {K::Mxfp4X::Float, K::Mxfp4X::Int16, K::Mxfp4X::Int8}) {
        if (!K::isa_supported(isa) || (as != K::Mxfp4X::Float && M > 8)) continue;
        SCOPED_TRACE(std::string(K::isa_name(isa)) + " M " + std::to_string(M) + " as " +
                     std::to_string(int(as)));
        const bool rounds =
            as != K::Mxfp4X::Float && (isa == K::Isa::Avx2 || isa == K::Isa::Avx512);
        const bool int8 = as == K::Mxfp4X::Int8;
        const K::Isa before = K::active_isa();
        ASSERT_TRUE(K::set_isa(isa));
        std::vector<float> y(std::size_t(M * (m.rows + 3)), -7.0f);  // ldy > rows: padding kept
        if (M > 8)
          K::mxfp4_gemm(M, m.rows, m.cols, x.data(), m.cols, m.blocks->data() + off / 2,
                        m.scales->data() + off / 32, y.data(), m.rows + 3);
        else
          K::mxfp4_rows(M, m.rows, m.cols, x.data(), m.cols, m.blocks->data() + off / 2,
                        m.scales->data() + off / 32, y.data(), m.rows + 3, as);
        K::set_isa(before);
        const std::vector<double>& want = !rounds ? exact : int8 ? of_int8 : of_int16;
        // the 8-bit path adds 12 to every doubled code and takes 12 times the sum of the group's
        // integers off at the end: float sums over terms up to (24 / |code|) times larger
        const double tol = !rounds ? 4e-7 * scale : int8 ? 4e-6 * scale_int8 : 4e-7 * scale_int16;
        for (int64_t i = 0; i < M; ++i) {
          for (int64_t r = 0; r < m.rows; ++r) {
            const double got = y[std::size_t(i * (m.rows + 3) + r)];
            EXPECT_NEAR(got, want[std::size_t(i * m.rows + r)], tol);
            // each x within 2^-15 (16 bits) or 2^-7 (8 bits) of its group's largest: terms at
            // most 6 * that
            if (rounds)
              EXPECT_NEAR(got, exact[std::size_t(i * m.rows + r)], (int8 ? 5e-2 : 2e-4) * scale);
          }
          for (int64_t r = m.rows; r < m.rows + 3; ++r)
            EXPECT_EQ(y[std::size_t(i * (m.rows + 3) + r)], -7.0f);
        }
      }
  }
}

// Each output's bits depend on its row of W, its row of X and the instruction set only: not on
// the threads splitting the rows, nor on the other rows (one row of X goes over two rows of W at a
// time, several rows of X over one), on the float, 16-bit and 8-bit paths.
TEST(Mxfp4, RowsAreTheSameBitsForAnyThreadsAndRowCounts) {
  const int64_t R = 601, C = 2048;  // enough bytes for threads_for to split them
  const Mxfp4Matrices m = random_matrices(1, R, C, 11);
  std::mt19937 gen(3);
  std::normal_distribution<float> normal;
  std::vector<float> x(std::size_t(3 * C));
  for (auto& v : x) v = normal(gen);
  const int before = attn::get_num_threads();
  const auto run = [&](int64_t M, int64_t r0, int64_t rn, int threads, K::Mxfp4X as) {
    attn::set_num_threads(threads);
    std::vector<float> y(std::size_t(M * rn));
    K::mxfp4_rows(M, rn, C, x.data(), C, m.blocks->data() + r0 * C / 2,
                  m.scales->data() + r0 * C / 32, y.data(), rn, as);
    return y;
  };
  for (const K::Mxfp4X as : {K::Mxfp4X::Float, K::Mxfp4X::Int16, K::Mxfp4X::Int8}) {
    SCOPED_TRACE("as " + std::to_string(int(as)));
    const std::vector<float> one = run(1, 0, R, 1, as), three = run(3, 0, R, 1, as);
    for (const int threads : {2, 3}) {
      SCOPED_TRACE(std::to_string(threads) + " threads");
      EXPECT_EQ(run(1, 0, R, threads, as), one);
      EXPECT_EQ(run(3, 0, R, threads, as), three);
    }
    // rows 100 .. 106 alone (pairs 100 + 103, ..., and 106 alone), and row 0 of X among three
    const std::vector<float> some = run(1, 100, 7, 1, as);
    for (int64_t r = 0; r < 7; ++r) EXPECT_EQ(some[std::size_t(r)], one[std::size_t(100 + r)]);
    for (int64_t r = 0; r < R; ++r) EXPECT_EQ(three[std::size_t(r)], one[std::size_t(r)]);
  }
  attn::set_num_threads(before);
}

// The 16-bit and 8-bit paths at the edges: a group of zeros, an x of 2^-140 (subnormal) and 2^120,
// scales whose product leaves the normal floats (2^-127 with tiny x: subnormal; 2^127 with large x:
// inf), E8M0's NaN, and inf or NaN in X (then the float path: the same values as it).
TEST(Mxfp4, RowsOnIntegersAtTheEdges) {
  if (!K::isa_supported(K::Isa::Avx2)) GTEST_SKIP() << "the integer paths need AVX2";
  const int64_t R = 4, C = 128, G = C / 32;
  std::vector<uint8_t> blocks(std::size_t(R * C / 2), 0x22), scales(std::size_t(R * G), 127);
  scales[0] = 0, scales[1] = 254, scales[2] = 255;  // row 0: 2^-127, 2^127, NaN, 1
  scales[5] = 0;     // row 1: 2^-127 times 2^-140 (below the floats: 0)
  scales[10] = 254;  // row 2: 2^127 times 2^120 (above them: inf)
  const Mxfp4Matrices m(1, R, C, std::move(blocks), std::move(scales));
  const std::vector<double> w = decoded(m, 0);
  const K::Isa before = K::active_isa();
  ASSERT_TRUE(K::set_isa(K::Isa::Avx2));
  const auto run = [&](const std::vector<float>& x, K::Mxfp4X as) {
    std::vector<float> y(static_cast<std::size_t>(R));
    K::mxfp4_rows(1, R, C, x.data(), C, m.blocks->data(), m.scales->data(), y.data(), R, as);
    return y;
  };
  std::vector<float> x(std::size_t(C), 0.0f);  // group 0: zeros
  for (int i = 32; i < 64; ++i) x[std::size_t(i)] = std::ldexp(1.0f, -140);
  for (int i = 64; i < 96; ++i) x[std::size_t(i)] = std::ldexp(1.0f, 120);
  for (int i = 96; i < 128; ++i) x[std::size_t(i)] = 0.25f * float(i % 5);
  for (const K::Mxfp4X as : {K::Mxfp4X::Int16, K::Mxfp4X::Int8}) {
    SCOPED_TRACE(as == K::Mxfp4X::Int8 ? "int8" : "int16");
    ASSERT_TRUE(K::set_isa(K::Isa::Avx2));
    const std::vector<float> y = run(x, as);
    K::set_isa(before);
    for (int64_t r = 0; r < R; ++r) {
      double want = 0;  // the exact sum, in double (finite here: no inf times 0)
      for (int64_t c = 0; c < C; ++c) {
        const double v = double(x[std::size_t(c)]) * w[std::size_t(r * C + c)];
        if (x[std::size_t(c)] != 0) want += v;
      }
      SCOPED_TRACE("row " + std::to_string(r));
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(y[std::size_t(r)]));
      } else if (std::abs(want) > double(std::numeric_limits<float>::max())) {
        EXPECT_TRUE(std::isinf(y[std::size_t(r)]));
      } else {
        // x here are multiples of a power of two (0.25 * (0 .. 4) in the last group): exact in 8
        // bits too but for the step's rounding to a float
        EXPECT_NEAR(y[std::size_t(r)], want, 1e-6 * std::abs(want) + 1e-44);
      }
    }
    ASSERT_TRUE(K::set_isa(K::Isa::Avx2));
    for (const float bad : {std::numeric_limits<float>::infinity(), std::nanf("")}) {
      std::vector<float> xb = x;
      xb[100] = bad;
      const std::vector<float> a = run(xb, as), b = run(xb, K::Mxfp4X::Float);
      for (int64_t r = 0; r < R; ++r)
        EXPECT_TRUE(a[std::size_t(r)] == b[std::size_t(r)] ||
                    (std::isnan(a[std::size_t(r)]) && std::isnan(b[std::size_t(r)])))
            << "row " << r << " with " << bad << ": " << a[std::size_t(r)] << " against "
            << b[std::size_t(r)];
    }
    K::set_isa(before);
  }
}

// got (N, R) against x (N, C) @ w (R, C)^T, each element within 1e-5 of the sum of its terms'
// magnitudes: float sums in any order (the BLAS picks its kernel; no bits are asserted).
::testing::AssertionResult near_product(const Tensor& got, const Tensor& x, const Tensor& w) {
  const std::vector<float> g = got.to_float_vector(),
                           want = attn::matmul(x, w.transpose(0, 1)).to_float_vector(),
                           mag = attn::matmul(attn::abs(x), attn::abs(w).transpose(0, 1))
                                     .to_float_vector();
  if (g.size() != want.size()) return ::testing::AssertionFailure() << "sizes differ";
  for (std::size_t i = 0; i < g.size(); ++i)
    if (!(std::abs(g[i] - want[i]) <= 1e-5f * mag[i] + 1e-6f))
      return ::testing::AssertionFailure() << "element " << i << ": " << g[i] << " against "
                                           << want[i] << " (terms " << mag[i] << ")";
  return ::testing::AssertionSuccess();
}

TEST(Mxfp4, LinearStreamsFewRowsAndDecodesBlocksForManyWithGradientsToX) {
  const Mxfp4Matrices m = random_matrices(2, 40, 64, 11);
  attn::Generator gen(3);
  for (const int64_t N : {1, 4, 8, 9, 33}) {
    SCOPED_TRACE(N);
    const Tensor x = attn::randn({N, 64}, &gen);
    const Tensor got = attn::mxfp4_linear(x, m, 1);
    ASSERT_EQ(got.shape(), (attn::Shape{N, 40}));
    EXPECT_TRUE(near_product(got, x, attn::mxfp4_dequantize(m, 1)));
    // bfloat16 in, bfloat16 out: the float32 product rounded once, to its rounding.
    const Tensor got16 = attn::mxfp4_linear(x.to(attn::Dtype::BFloat16), m, 1);
    EXPECT_EQ(got16.dtype(), attn::Dtype::BFloat16);
    const Tensor want16 = attn::matmul(x.to(attn::Dtype::BFloat16).to(attn::Dtype::Float32),
                                       attn::mxfp4_dequantize(m, 1).transpose(0, 1));
    EXPECT_TRUE(attn::allclose(got16.to(attn::Dtype::Float32), want16, 1e-2, 1e-2));
    // int8_activations: the kernel's 8-bit path for up to 8 rows, the same as without it for more
    const Tensor got8 = attn::mxfp4_linear(x, m, 1, /*int8_activations=*/true);
    if (N > 8) {
      EXPECT_TRUE(attn::equal(got8, got));
    } else {
      std::vector<float> y8(std::size_t(N * 40));
      K::mxfp4_rows(N, 40, 64, x.data_ptr<float>(), 64, m.blocks->data() + 40 * 64 / 2,
                    m.scales->data() + 40 * 64 / 32, y8.data(), 40, K::Mxfp4X::Int8);
      EXPECT_EQ(got8.to_float_vector(), y8);
    }
  }
  // A prompt's rows against a matrix of several blocks of 128 rows (the last one partial):
  // decoded block by block for sgemm, as the product with the whole decoded matrix.
  const Mxfp4Matrices big = random_matrices(2, 300, 96, 12);
  for (const int64_t N : {9, 200}) {
    SCOPED_TRACE(N);
    const Tensor x = attn::randn({N, 96}, &gen);
    EXPECT_TRUE(near_product(attn::mxfp4_linear(x, big, 1), x, attn::mxfp4_dequantize(big, 1)));
  }
  // With a gradient to record: the same product as without, and x's gradient the upstream one
  // times the decoded matrix, for few rows and many, float32 and bfloat16, against matrices of one
  // block of 128 columns and of several (300 x 288: the last block partial).
  const Mxfp4Matrices wide = random_matrices(2, 300, 288, 13);
  for (const Mxfp4Matrices* mat : {&m, &big, &wide}) {
    for (const int64_t N : {3, 40}) {
      for (const attn::Dtype dtype : {attn::Dtype::Float32, attn::Dtype::BFloat16}) {
        SCOPED_TRACE(std::to_string(mat->cols) + " columns, " + std::to_string(N) + " rows, " +
                     attn::dtype_name(dtype));
        const Tensor x = attn::randn({N, mat->cols}, &gen).to(dtype).requires_grad_(true);
        const Tensor y = attn::mxfp4_linear(x, *mat, 1);
        ASSERT_TRUE(y.requires_grad());
        EXPECT_TRUE(attn::equal(y.detach(), attn::mxfp4_linear(x.detach(), *mat, 1)));
        const Tensor g = attn::randn({N, mat->rows}, &gen).to(dtype);
        y.backward(g);
        ASSERT_EQ(x.grad().dtype(), dtype);
        // float32: within the rounding of a sum of 300 terms of up to ~1000 in magnitude (the
        // summation order is the BLAS's, and differs between builds); bfloat16: the result's own.
        const Tensor w = attn::mxfp4_dequantize(*mat, 1);
        if (dtype == attn::Dtype::Float32) {
          EXPECT_TRUE(near_product(x.grad(), g, w.transpose(0, 1)));
        } else {
          const Tensor want = attn::matmul(g.to(attn::Dtype::Float32), w);
          EXPECT_TRUE(attn::allclose(x.grad().to(attn::Dtype::Float32), want, 2e-2, 2e-2));
        }
      }
    }
  }
}

// A bfloat16 prompt's product through oneDNN's bfloat16 matmul: W decoded by blocks of 1024 rows
// (1100 rows: the last block partial) into bfloat16, Y (ldy > R: the padding kept) within
// bfloat16's rounding of the double product plus float sums' error. Where oneDNN has no bfloat16
// kernel (before AVX512-BF16), the kernel says so and mxfp4_linear takes the float path.
TEST(Mxfp4, GemmOnBfloat16MatchesTheDoubleProductToItsRounding) {
  const Mxfp4Matrices m = random_matrices(1, 1100, 64, 13);
  const int64_t M = 12, R = m.rows, C = m.cols, ldy = R + 5;
  std::mt19937 gen(4);
  std::normal_distribution<float> normal;
  std::vector<uint16_t> x(std::size_t(M * C));
  std::vector<double> xd(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = attn::BFloat16(normal(gen)).bits;
    xd[i] = double(float(attn::BFloat16::from_bits(x[i])));
  }
  std::vector<uint16_t> y(std::size_t(M * ldy), 0x1234);
  if (!K::mxfp4_gemm_bf16(M, R, C, x.data(), m.blocks->data(), m.scales->data(), y.data(), ldy))
    GTEST_SKIP() << "no oneDNN bfloat16 kernel on this CPU";
  const std::vector<double> w = decoded(m, 0);
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t r = 0; r < R; ++r) {
      double want = 0, mag = 0;
      for (int64_t c = 0; c < C; ++c) {
        want += xd[std::size_t(i * C + c)] * w[std::size_t(r * C + c)];
        mag += std::abs(xd[std::size_t(i * C + c)] * w[std::size_t(r * C + c)]);
      }
      const double got = double(float(attn::BFloat16::from_bits(y[std::size_t(i * ldy + r)])));
      ASSERT_NEAR(got, want, std::ldexp(std::abs(want), -8) + 1e-6 * mag) << i << ", " << r;
    }
    for (int64_t r = R; r < ldy; ++r) EXPECT_EQ(y[std::size_t(i * ldy + r)], 0x1234);
  }
}

TEST(Mxfp4, BadSizesAndInputsAreRefused) {
  EXPECT_ERROR_HAS(Mxfp4Matrices(1, 2, 48, std::vector<uint8_t>(48), std::vector<uint8_t>(3)),
                   "cols a multiple of 32, got 1, 2, 48");
  EXPECT_ERROR_HAS(Mxfp4Matrices(1, 2, 32, std::vector<uint8_t>(31), std::vector<uint8_t>(2)),
                   "(1, 2, 32) needs 32 bytes of blocks and 2 of scales, got 31 and 2");
  const Mxfp4Matrices m = Mxfp4Matrices::zeros(2, 4, 32);
  EXPECT_EQ(m.nbytes(), 2 * 4 * 16 + 2 * 4);
  EXPECT_ERROR_HAS(attn::mxfp4_linear(attn::zeros({3, 16}), m, 0),
                   "[mxfp4_linear] x must be a CPU float tensor (N, 32) for matrices of (4, 32), "
                   "got (3, 16)");
  EXPECT_ERROR_HAS(attn::mxfp4_linear(attn::zeros({3, 32}), m, 2),
                   "matrix 2 out of range for 2 matrices");
  EXPECT_ERROR_HAS(attn::mxfp4_linear(attn::zeros({3, 32}), Mxfp4Matrices(), 0),
                   "the matrices are empty");
  EXPECT_ERROR_HAS(attn::mxfp4_dequantize(m, 0, attn::Dtype::Int64), "dtype must be float32");
  const Tensor z = attn::mxfp4_linear(attn::ones({2, 32}), m, 1);  // zeros: all weights 0
  EXPECT_EQ(attn::sum(attn::abs(z)).item<float>(), 0.0f);
}

}  // namespace

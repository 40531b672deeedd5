// matmul's CPU table (src/backend/linalg_kernels.h): float32 through sgemm (gemm.h) or, for the
// small products, a textbook loop; int64 in exact (wrapping) integer arithmetic.
#include <cblas.h>

#include <algorithm>
#include <vector>

#include "../linalg_kernels.h"
#include "gemm.h"

namespace attn::kernels {
namespace {

// A (rows, cols) matrix as sgemm reads it without a copy: unit stride on one axis.
struct BlasMat {
  const float* data;
  bool trans;
  int64_t ld;
};

// Row-major storage (unit column stride) or column-major storage (unit row stride), with a
// leading dimension BLAS accepts. Size-1 dims may carry any stride.
bool blas_layout(const float* p, int64_t rows, int64_t cols, int64_t rs, int64_t cs, BlasMat* out) {
  if ((cs == 1 || cols == 1) && (rs >= std::max<int64_t>(cols, 1) || rows == 1)) {
    *out = {p, false, std::max<int64_t>({rs, cols, 1})};
    return true;
  }
  if ((rs == 1 || rows == 1) && (cs >= std::max<int64_t>(rows, 1) || cols == 1)) {
    *out = {p, true, std::max<int64_t>({cs, rows, 1})};
    return true;
  }
  return false;
}

// A contiguous copy of a strided matrix, for the rare layouts BLAS cannot read.
std::vector<float> pack(const float* p, int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  std::vector<float> buf(std::size_t(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) buf[i * cols + j] = p[i * rs + j * cs];
  return buf;
}

// Each dot product a plain left-to-right float sum of rounded products (no FMA: this file is
// compiled with -ffp-contract=off); see backend::textbook_product.
void product_textbook(const backend::Matmul& m) {
  const auto* a = static_cast<const float*>(m.a);
  const auto* b = static_cast<const float*>(m.b);
  auto* out = static_cast<float*>(m.out);
  for (int64_t i = 0; i < m.M; ++i)
    for (int64_t j = 0; j < m.N; ++j) {
      float acc = 0;
      for (int64_t k = 0; k < m.K; ++k) {
        const float prod = a[i * m.a_rs + k * m.a_cs] * b[k * m.b_rs + j * m.b_cs];
        acc += prod;
      }
      out[i * m.N + j] = acc;
    }
}

void matmul_f32(const backend::Matmul& m) {
  const int64_t M = m.M, N = m.N, K = m.K;
  auto* out = static_cast<float*>(m.out);
  if (M == 0 || N == 0) return;
  if (K == 0) {
    std::fill(out, out + M * N, 0.f);
    return;
  }
  if (backend::textbook_product(M, N, K)) {
    product_textbook(m);
    return;
  }
  const auto* a = static_cast<const float*>(m.a);
  const auto* b = static_cast<const float*>(m.b);
  std::vector<float> abuf, bbuf;
  BlasMat A, B;
  if (!blas_layout(a, M, K, m.a_rs, m.a_cs, &A)) {
    abuf = pack(a, M, K, m.a_rs, m.a_cs);
    A = {abuf.data(), false, K};
  }
  if (!blas_layout(b, K, N, m.b_rs, m.b_cs, &B)) {
    bbuf = pack(b, K, N, m.b_rs, m.b_cs);
    B = {bbuf.data(), false, N};
  }
  sgemm(A.trans, B.trans, M, N, K, 1.0f, A.data, A.ld, B.data, B.ld, 0.0f, out, N);
}

// A plain i-k-j loop in unsigned arithmetic: wraps on overflow, as torch.
void matmul_i64(const backend::Matmul& m) {
  const auto* a = static_cast<const int64_t*>(m.a);
  const auto* b = static_cast<const int64_t*>(m.b);
  auto* out = static_cast<int64_t*>(m.out);
  std::vector<uint64_t> row(static_cast<std::size_t>(m.N));
  for (int64_t i = 0; i < m.M; ++i) {
    std::fill(row.begin(), row.end(), 0);
    for (int64_t k = 0; k < m.K; ++k) {
      const uint64_t x = uint64_t(a[i * m.a_rs + k * m.a_cs]);
      const int64_t* bk = b + k * m.b_rs;
      for (int64_t j = 0; j < m.N; ++j) row[j] += x * uint64_t(bk[j * m.b_cs]);
    }
    for (int64_t j = 0; j < m.N; ++j) out[i * m.N + j] = int64_t(row[j]);
  }
}

// OpenBLAS's sdot (several accumulators), as torch.dot uses. Its strided path is one chain of
// sums on some CPUs (0.3.21 on a Xeon: 4x the error of the unit-stride kernel at n 1000), so
// strided vectors are copied to unit stride first.
void dot_f32(const backend::Dot& d) {
  const auto* a = static_cast<const float*>(d.a);
  const auto* b = static_cast<const float*>(d.b);
  int64_t a_stride = d.a_stride, b_stride = d.b_stride;
  std::vector<float> abuf, bbuf;
  if (a_stride != 1 && d.n > 1) {
    abuf = pack(a, d.n, 1, a_stride, 1);
    a = abuf.data(), a_stride = 1;
  }
  if (b_stride != 1 && d.n > 1) {
    bbuf = pack(b, d.n, 1, b_stride, 1);
    b = bbuf.data(), b_stride = 1;
  }
  *static_cast<float*>(d.out) = cblas_sdot(int(d.n), a, int(a_stride), b, int(b_stride));
}

}  // namespace
}  // namespace attn::kernels

namespace attn::backend::cpu {
const Kernels<MatmulFn> matmul = {kernels::matmul_f32, kernels::matmul_i64};
const Kernels<DotFn> dot = {kernels::dot_f32};
}  // namespace attn::backend::cpu

// sgemm (oneDNN's where attn was built with it, else OpenBLAS's) split across attn's OpenMP
// threads (see gemm.h).
#include "gemm.h"

#include <cblas.h>
#include <omp.h>
#ifdef ATTN_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

#include <algorithm>
#include <vector>

#include "gemv.h"
#include "threads.h"

namespace attn::kernels {

namespace {

// Below this many multiply-adds one thread is faster than waking another.
constexpr int64_t kParallelMacs = int64_t(1) << 20;

// C (1, N) = alpha * x op(B) + beta * C, x the one row of op(A) with stride incx: a matrix-vector
// product, which reads B once as it streams; OpenBLAS 0.3.21's sgemm would first pack all of B for
// a single row (2-6x slower for one token's projections). A B stored (N, K), a Linear layer's
// weight, goes to attn's gemv_rows (gemv.h), which streams it 1.5x faster than OpenBLAS's and
// oneDNN's sgemv here; a B stored (K, N) to OpenBLAS's sgemv, which streams it at full speed.
void row_times(bool tb, int64_t N, int64_t K, float alpha, const float* x, int64_t incx,
               const float* B, int64_t ldb, float beta, float* C) {
  if (tb) {  // B (N, K): y = B x
    if (incx == 1) return gemv_rows(N, K, alpha, B, ldb, x, beta, C);
    std::vector<float> xs(
        static_cast<size_t>(K));  // a column of A: K floats, small beside the N x K of B
    for (int64_t k = 0; k < K; ++k) xs[size_t(k)] = x[k * incx];
    return gemv_rows(N, K, alpha, B, ldb, xs.data(), beta, C);
  }
  if (beta == 0.0f) std::fill(C, C + N, 0.0f);  // C may hold garbage (NaN * 0)
  // B (K, N): y = B^T x
  cblas_sgemv(CblasRowMajor, CblasTrans, int(K), int(N), alpha, B, int(ldb), x, int(incx), beta, C,
              1);
}

// One single-threaded product (a whole one, or a block of rows or columns of one): one row as a
// matrix-vector product, else sgemm. oneDNN threads a call by itself unless it runs inside an
// active parallel region, so outside one the calling thread's OpenMP count is held at 1 meanwhile.
void call(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (M == 1 && K > 0) {  // a decoding step
    row_times(tb, N, K, alpha, A, ta ? lda : 1, B, ldb, beta, C);
    return;
  }
#ifdef ATTN_HAVE_ONEDNN
  const bool outside = !omp_in_parallel();
  const int before = outside ? omp_get_max_threads() : 1;
  if (outside && before != 1) omp_set_num_threads(1);
  const dnnl_status_t st =
      dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  if (outside && before != 1) omp_set_num_threads(before);
  if (st == dnnl_success) return;  // else (cannot happen for valid arguments) OpenBLAS does it
#endif
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(M),
              int(N), int(K), alpha, A, int(lda), B, int(ldb), beta, C, int(ldc));
}

}  // namespace

void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  BlasSingleThread single;
  const int nt = omp_in_parallel() ? 1 : num_threads();
  if (nt <= 1 || M * N * K < kParallelMacs) {
    call(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    return;
  }
  // Blocks of 16 rows (or columns) keep every piece on whole micro-kernel tiles. One row is split
  // by columns: each piece a matrix-vector product (call).
  const bool by_rows = M >= N;
  const int64_t extent = by_rows ? M : N;
  const int64_t units = (extent + 15) / 16;
  const int pieces = int(std::min<int64_t>(nt, units));
#pragma omp parallel num_threads(pieces)
  {
    const int t = omp_get_thread_num(), n = omp_get_num_threads();
    const int64_t b0 = std::min(extent, units * t / n * 16);
    const int64_t b1 = std::min(extent, units * (t + 1) / n * 16);
    if (b1 > b0) {
      if (by_rows) {
        const float* a = ta ? A + b0 : A + b0 * lda;
        call(ta, tb, b1 - b0, N, K, alpha, a, lda, B, ldb, beta, C + b0 * ldc, ldc);
      } else {
        const float* b = tb ? B + b0 * ldb : B + b0;
        call(ta, tb, M, b1 - b0, K, alpha, A, lda, b, ldb, beta, C + b0, ldc);
      }
    }
  }
}

}  // namespace attn::kernels

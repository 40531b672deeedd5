// sgemm (oneDNN's where attn was built with it, else OpenBLAS's) split across attn's OpenMP
// threads (see gemm.h).
#include "gemm.h"

#include <cblas.h>
#include <omp.h>
#include <unistd.h>
#ifdef ATTN_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif

#include <algorithm>
#include <vector>

#include "gemm_rows.h"
#include "threads.h"

namespace attn::kernels {

namespace {

// Below this many multiply-adds one thread is faster than waking another.
constexpr int64_t kParallelMacs = int64_t(1) << 20;

// 2 to kGemmRowsMax rows go to gemm_rows only against a B of at least kStreamFloats floats (1 MB,
// a Zen 4 core's L2) with rows of at most kStreamMaxK: a model's weights, read from memory at every
// step, where streaming wins (bench_gemm's decode_M8 set, B from memory, 1 thread: GPT-2's
// 8 x 50257 x 768 at 30.7 GFLOP/s against oneDNN's 17.4, 8 x 2304 x 768 at 32.5 against 27.0). A
// smaller B stays in cache between calls, where oneDNN's packed sgemm is faster (8 x 2304 x 768
// from L3: 78 against 45), and longer rows of X no longer fit L1 beside B's (8 x 768 x 3072: 22.2
// against oneDNN's 31.6).
constexpr int64_t kStreamFloats = int64_t(1) << 18, kStreamMaxK = 1024;

// A decoding step's product: a few rows times a weight stored (N, K), Y = alpha op(A) B^T + beta
// Y, by gemm_rows (gemm_rows.h), which streams B once from memory: 1.5x OpenBLAS's sgemv for one
// row, and for 2-8 rows against a large B faster than OpenBLAS's and oneDNN's sgemm, which pack B
// first. A transposed A is copied to rows first (M x K floats, small beside the N x K of B).
void few_rows(bool ta, int64_t M, int64_t N, int64_t K, float alpha, const float* A, int64_t lda,
              const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (!ta) return gemm_rows(M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  std::vector<float> rows(static_cast<size_t>(M * K));
  for (int64_t m = 0; m < M; ++m)
    for (int64_t k = 0; k < K; ++k) rows[size_t(m * K + k)] = A[k * lda + m];
  gemm_rows(M, N, K, alpha, rows.data(), K, B, ldb, beta, C, ldc);
}

// C (1 x N) = alpha x^T B + beta C for B stored (K, N), x with stride incx, by OpenBLAS's sgemv,
// which streams B at full speed. Some of its kernels (0.3.21's SkylakeX sgemv_t: lanes across N)
// sum each output over k in one chain, an error growing with K: 4x torch's sgemm at K 2000 on a
// Xeon. So B goes in blocks of kGemvRows rows, whose partial sums are added pairwise (a binary
// counter of partials, log K of them held): every chain short, on any kernel, in an order that
// depends only on K.
constexpr int64_t kGemvRows = 32;
void row_times_columns(int64_t N, int64_t K, float alpha, const float* x, int64_t incx,
                       const float* B, int64_t ldb, float beta, float* C) {
  if (K <= kGemvRows) {
    if (beta == 0.0f) std::fill(C, C + N, 0.0f);  // C may hold garbage (NaN * 0)
    cblas_sgemv(CblasRowMajor, CblasTrans, int(K), int(N), alpha, B, int(ldb), x, int(incx), beta,
                C, 1);
    return;
  }
  const auto n = static_cast<std::size_t>(N);
  std::vector<std::vector<float>> partials;  // partials[i] sums 2^levels[i] blocks
  std::vector<int> levels;
  for (int64_t k0 = 0; k0 < K; k0 += kGemvRows) {
    const int64_t kb = std::min(kGemvRows, K - k0);
    std::vector<float> part(n, 0.0f);
    cblas_sgemv(CblasRowMajor, CblasTrans, int(kb), int(N), 1.0f, B + k0 * ldb, int(ldb),
                x + k0 * incx, int(incx), 0.0f, part.data(), 1);
    int level = 0;
    while (!levels.empty() && levels.back() == level) {
      const std::vector<float>& left = partials.back();
      for (std::size_t j = 0; j < n; ++j) part[j] = left[j] + part[j];
      partials.pop_back();
      levels.pop_back();
      ++level;
    }
    partials.push_back(std::move(part));
    levels.push_back(level);
  }
  std::vector<float> sum = std::move(partials.back());
  for (std::size_t i = partials.size() - 1; i-- > 0;)
    for (std::size_t j = 0; j < n; ++j) sum[j] = partials[i][j] + sum[j];
  for (int64_t j = 0; j < N; ++j)
    C[j] = beta == 0.0f ? alpha * sum[j] : alpha * sum[j] + beta * C[j];
}

// One single-threaded product (a whole one, or a block of rows or columns of one): one row, or a
// few against a large B, stored (N, K) by gemm_rows, one row against B stored (K, N) as OpenBLAS's
// sgemv (which streams B at full speed: OpenBLAS 0.3.21's sgemm would first pack all of B for a
// single row), else sgemm. oneDNN threads a call by itself unless it runs inside an active parallel
// region, so outside one the calling thread's OpenMP count is held at 1 meanwhile.
void call(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
          int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  if (M <= 0 || N <= 0) return;
  if (tb && K > 0 && (M == 1 || (M <= kGemmRowsMax && N * K >= kStreamFloats && K <= kStreamMaxK)))
    return few_rows(ta, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
  if (!tb && M == 1 && K > 0)
    return row_times_columns(N, K, alpha, A, ta ? lda : 1, B, ldb, beta, C);
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

// How many pieces a product is cut into: from its shape and the machine, never from the thread
// count, because where a piece ends changes the sums of a BLAS's sgemm (oneDNN 2.6's AVX2 kernels
// sum the last rows of a block, and with K blocked every row, in another order depending on the
// block's height; AVX-512's do too for some shapes), so a split by thread count gave other bits at
// another count. Every piece packs the other operand again, which costs the most when threads
// share few pieces each, so there are as many as the machine has cores (rounded up to a power of
// two, so that 2, 4, 8 threads share them evenly; at most 64), in whole units of 16 rows: on the
// 2-core machines here exactly the split 2 threads made before. The pieces are shared among
// however many threads there are; more threads than pieces are not used. The machine's core count
// is read once (the CPUs online, not the affinity mask or OMP_NUM_THREADS), so bits depend on the
// machine, as they do through its instruction set, but not on set_num_threads.
int64_t machine_pieces() {
  static const int64_t n = [] {
    const long cores = sysconf(_SC_NPROCESSORS_ONLN);
    int64_t p = 2;
    while (p < cores && p < 64) p *= 2;
    return p;
  }();
  return n;
}

int64_t gemm_pieces(int64_t M, int64_t N, int64_t K) {
  if (M * N * K < kParallelMacs) return 1;
  const int64_t units = (std::max(M, N) + 15) / 16;
  const int64_t most = std::min(machine_pieces(), units);
  int64_t p = 1;
  while (p * 2 <= most) p *= 2;
  return p;
}

}  // namespace

void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc) {
  sgemm(ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc, GemmRows(), GemmRows());
}

void sgemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
           const GemmRows& before, const GemmRows& after) {
  if (M <= 0 || N <= 0) return;
  BlasSingleThread single;
  const int64_t pieces = gemm_pieces(M, N, K);
  const int nt = omp_in_parallel() ? 1 : int(std::min<int64_t>(num_threads(), pieces));
  // Rows when C has at least as many rows as columns, else columns (one row: matrix-vector
  // products by column blocks).
  const bool by_rows = M >= N;
  const int64_t extent = by_rows ? M : N;
  // Piece p of the product: rows or columns [b0, b1) of C, in whole units of 16.
  const auto bounds = [&](int64_t p) { return thread_share(extent, int(p), int(pieces), 16); };
  const auto piece = [&](int64_t p) {
    const auto [b0, b1] = bounds(p);
    if (b1 <= b0) return;
    if (by_rows) {
      const float* a = ta ? A + b0 : A + b0 * lda;
      call(ta, tb, b1 - b0, N, K, alpha, a, lda, B, ldb, beta, C + b0 * ldc, ldc);
    } else {
      const float* b = tb ? B + b0 * ldb : B + b0;
      call(ta, tb, M, b1 - b0, K, alpha, A, lda, b, ldb, beta, C + b0, ldc);
    }
  };
  if (nt <= 1) {
    if (before) before(0, M);
    for (int64_t p = 0; p < pieces; ++p) piece(p);
    if (after) after(0, M);
    return;
  }
#pragma omp parallel num_threads(nt)
  {
    const int t = omp_get_thread_num(), n = omp_get_num_threads();
    const auto [p0, p1] = thread_share(pieces, t, n);  // this thread's pieces
    if (by_rows) {
      // Each thread runs the hooks on the rows it has just written: its pieces' rows.
      const int64_t r0 = bounds(p0).first, r1 = p1 > p0 ? bounds(p1 - 1).second : r0;
      if (before && r1 > r0) before(r0, r1);
      for (int64_t p = p0; p < p1; ++p) piece(p);
      if (after && r1 > r0) after(r0, r1);
    } else {
      const auto [r0, r1] = thread_share(M, t, n);  // this thread's rows for the hooks
      if (before) {
        if (r1 > r0) before(r0, r1);
#pragma omp barrier
      }
      for (int64_t p = p0; p < p1; ++p) piece(p);
      if (after) {
#pragma omp barrier
        if (r1 > r0) after(r0, r1);
      }
    }
  }
}

void sgemm_by_blocks(bool trans_b, int64_t M, int64_t N, int64_t K, int64_t block, const float* A,
                     int64_t lda, float* C, int64_t ldc,
                     const std::function<void(int64_t n0, int64_t nb, float* w)>& fill) {
  BlasSingleThread single;
  const int64_t blocks = (N + block - 1) / block;
  parallel_ranges(blocks, threads_for(M * N * K / 64), [&](int64_t b0, int64_t b1) {
    std::vector<float> w(static_cast<size_t>(std::min(N, block) * K));
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t n0 = b * block, nb = std::min(block, N - n0);
      fill(n0, nb, w.data());
      // Inside the parallel region sgemm runs on this thread alone.
      sgemm(false, trans_b, M, nb, K, 1.0f, A, lda, w.data(), trans_b ? K : nb, 0.0f, C + n0, ldc);
    }
  });
}

}  // namespace attn::kernels

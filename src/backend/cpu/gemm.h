// Single-precision GEMM for the library: oneDNN's sgemm where attn is built with it (CMake
// ATTN_ONEDNN, on when Debian's libdnnl-dev is found) and OpenBLAS's otherwise, parallelised by
// attn's own OpenMP pool. oneDNN's was the fastest of OpenBLAS, BLIS, oneDNN and libxsmm on the
// shapes of a GPT step here (build/bench/bench_gemm, BENCHMARKS.md): 8-14% over OpenBLAS on
// training shapes, 1.7x on 8-row decoding products.
#pragma once

#include <cstdint>
#include <functional>

namespace attn::kernels {

// C (M, N) = alpha * op(A) * op(B) + beta * C, row-major; op(A) is (M, K) and op(B) (K, N),
// transposed when trans_a / trans_b (lda, ldb, ldc are row strides of the stored matrices).
//
// One row, or a few (M <= kGemmRowsMax: a decoding step) against a B of 1 MB or more with K <=
// 1024, stored (N, K) go to gemm_rows (gemm_rows.h), which streams B once; one row against B stored
// (K, N) to OpenBLAS's sgemv. Both are split by columns across the threads. OpenBLAS 0.3.21 packs
// all of B for sgemm even for one row, which made one token's projections 2-6x slower.
//
// Threads: OpenBLAS's pthread pool and attn's OpenMP pool would each want every core and spin
// against each other (PyTorch 1.13 on this machine runs 2.5x slower with 2 threads than with 1 for
// the same reason). So every call runs OpenBLAS single-threaded, and a product large enough to
// share is cut into row blocks of C (column blocks when C has few rows), one sgemm each, shared
// among the OpenMP threads. How many blocks depends on the product's shape and the machine's core
// count only (gemm.cpp, gemm_pieces), never on the thread count: a BLAS may sum an element in an
// order that depends on the height of the block it is computed in (oneDNN's AVX2 sgemm does), so
// a split by thread count changed the bits with it. Results are the same for every thread count.
void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc);

// Work on rows [r0, r1) of C, run by one thread of the product's parallel region.
using GemmRows = std::function<void(int64_t r0, int64_t r1)>;

// sgemm with a prologue and an epilogue in the same parallel region, so that an op made of a
// product and element-wise work (a bias, an activation) forks its threads once: before(r0, r1)
// runs on rows of C before the product reads them (a bias to add with beta 1), after(r0, r1) once
// they hold the product (an activation). Either may be empty. When the product is split by rows,
// each thread runs both on its own block, which it has just written; when it is split by columns
// (few rows), the region splits C's rows for them, with a barrier on each side of the product.
// The product's floats are sgemm's.
void sgemm(bool trans_a, bool trans_b, int64_t M, int64_t N, int64_t K, float alpha, const float* A,
           int64_t lda, const float* B, int64_t ldb, float beta, float* C, int64_t ldc,
           const GemmRows& before, const GemmRows& after);

// C (M, N) = A (M, K) op(B), where B is never held whole in float: blocks of up to `block` of its
// N columns are written by fill(n0, nb, w) into a per-thread buffer - (nb, K) row-major with
// trans_b (sgemm multiplies by its transpose), (K, nb) otherwise - and multiplied by sgemm on that
// thread alone. Threads share the blocks; the bits depend on each block's shape, not on the
// threads. For weights stored in another form (2-byte floats, MXFP4) decoded as they are used.
void sgemm_by_blocks(bool trans_b, int64_t M, int64_t N, int64_t K, int64_t block, const float* A,
                     int64_t lda, float* C, int64_t ldc,
                     const std::function<void(int64_t n0, int64_t nb, float* w)>& fill);

}  // namespace attn::kernels

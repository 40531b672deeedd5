// The tile primitives of the fused attention backward (sdpa_fused_backward.cpp): their tile sizes
// and argument blocks. sdpa_fused_backward_kernel.inc implements them once over simd.h's vector
// backends; sdpa_fused_backward.cpp instantiates them per instruction set and drives them.
#pragma once

#include <cstdint>

namespace attn::kernels::bwd {

// Tiles of 64 x 64: with D = 64 every product is a 64 x 64 x 64 block, the per-thread working set
// (k, v of the key block, transposed copies, dK and dV accumulators, one score tile and one dS
// tile: about 100 KiB) stays in L2, and the micro-kernels' 6-row blocks waste nothing (64 = 10 * 6
// + 4). 128-wide tiles measured the same or slightly slower.
inline constexpr int64_t kBr = 64;  // query rows per tile
inline constexpr int64_t kBc = 64;  // keys per tile (a multiple of 16: the tile's column vectors)

// What of a tile product matters, per row m of C, in a tile that causal masking or a sliding window
// cuts (a null pair: all of it). A block of rows of C is computed over the union of its rows'
// ranges (inclusive bounds; lo > hi is empty):
//   k_lo, k_hi  A[m][k] is zero for k outside [k_lo[m], k_hi[m]]: those products, which would add
//               exact zeros, are skipped;
//   n_lo, n_hi  only C[m][n] for n in [n_lo[m], n_hi[m]] is wanted: whole vectors of columns
//               outside the block's union keep what they held (when N is a multiple of the vector
//               width; otherwise every column is computed).
struct Cut {
  const int32_t* k_lo = nullptr;
  const int32_t* k_hi = nullptr;
  const int32_t* n_lo = nullptr;
  const int32_t* n_hi = nullptr;
};

// C (M, N) = [C +] A (M, K) B (K, N), with A[m][k] at A[m * a_m + k * a_k] (either a_m or a_k is
// 1), B row-major with leading dimension ldb, C row-major with ldc; N is a multiple of 8. `cut`
// (may be null) limits the work as described above.
using GemmFn = void (*)(int64_t M, int64_t N, int64_t K, const float* A, int64_t a_m, int64_t a_k,
                        const float* B, int64_t ldb, float* C, int64_t ldc, bool accumulate,
                        const Cut* cut);

// The softmax gradient of one tile of nr rows and kBc columns, in place:
//   in:  S  = q . k (raw dot products),   dP = dO . v
//   out: S  = P o Z,                       dP = scale * c' * P o (Z o dP - D_i)
// with P = exp(c(scale * S) + bias - lse), c the softcap (c(x) = softcap * tanh(x / softcap),
// c' its derivative; the identity when softcap is 0), bias (-inf masks; optional, row stride
// ld_bias, 0 for one row shared by all), Z (dropout factors; optional, row stride kBc), and P = 0
// outside the columns [col_lo[r], col_hi[r]] of row r that causal masking and the window leave
// (optional). Vectors of a row that lie wholly outside its columns are not read (the products may
// have left them unwritten, see Cut): both outputs are zero there.
struct TileArgs {
  int64_t nr;
  float* S;
  float* dP;
  const float* lse;  // (nr) log-sum-exp per row, +inf for a fully masked row
  const float* Di;   // (nr) rowsum(dO o O)
  float scale;
  const float* bias;
  int64_t ld_bias;
  const float* z;
  const int32_t* col_lo;
  const int32_t* col_hi;
  float softcap = 0.0f;
  // Optional (row stride kBc): receives P o (Z o dP - D_i), the gradient of the biases.
  float* ds_mod = nullptr;
};
using TileFn = void (*)(const TileArgs&);

// The transposed copy of a key block: dst[d * kBc + j] = src[j * ld + d] for j < n, d < D, and
// zeros for n <= j < kBc.
using PackFn = void (*)(const float* src, int64_t ld, int64_t n, int64_t D, float* dst);

// Dropout factors of a tile: z[r * kBc + jj] = keep_scale or 0 for weight index
// first + r * row_step + jj (the counter of dropout_keep), jj < nc; 0 for jj >= nc.
struct DropoutArgs {
  float* z;
  int64_t nr, nc;
  uint64_t first, row_step, seed, offset;
  uint32_t threshold;
  float keep_scale;
};
using DropoutFn = void (*)(const DropoutArgs&);

// Column indices 0 .. kBc - 1, for the vector backends' mask_rows.
struct ColumnIndex {
  alignas(64) int32_t v[kBc];
  constexpr ColumnIndex() : v() {
    for (int32_t c = 0; c < int32_t(kBc); ++c) v[c] = c;
  }
};
inline constexpr ColumnIndex kColumns;
inline constexpr const int32_t* kColumnIndex = kColumns.v;

}  // namespace attn::kernels::bwd

// Device-side building blocks of the CUDA attention kernels (sdpa_forward.cu, sdpa_backward.cu):
// the kernels' parameter block, tensor-core instructions (mma.sync m16n8k16, ldmatrix), cp.async
// tile loads into padded shared memory, the visibility rules (causal, window, key padding, masks)
// and the counter-based dropout of sdpa_dropout.h.
//
// Conventions used by every kernel:
//   - Element data (fp16 or bf16) is moved as raw 16-bit words (uint16_t) and only interpreted
//     (Elem<T>) where a value is needed: mask values, stores of fp32 results, D_i.
//   - A tile of R rows by C = kD columns lives in shared memory with rows kD + 8 elements apart
//     (kD * 2 + 16 bytes): the 8 row addresses of one ldmatrix 8x8 matrix then fall into 8
//     different 16-byte bank groups, so ldmatrix is free of bank conflicts without swizzling.
//   - Fragment layouts (PTX ISA, "Matrix Fragments for mma.m16n8k16 with floating point type"),
//     with g = lane / 4 and t = lane % 4:
//       A (16 x 16, row-major): reg0 = (row g, cols 2t, 2t+1), reg1 = (g + 8, 2t..),
//                               reg2 = (g, 2t + 8..), reg3 = (g + 8, 2t + 8..)
//       B (16 x 8, "col"):      reg0 = (k 2t, 2t+1; n g), reg1 = (k 2t + 8, 2t + 9; n g)
//       C (16 x 8, fp32):       c0, c1 = (row g, cols 2t, 2t+1), c2, c3 = (row g + 8, same cols)
//     The lower-indexed element of a pair sits in the low 16 bits of the register.
//   - ldmatrix.x4 (PTX "ldmatrix"): lanes 8m .. 8m+7 give the row addresses of matrix m; every
//     lane receives, for matrix m, register m = (row lane / 4, cols 2 (lane % 4), +1), or with
//     .trans the transposed matrix's (stored row 2 (lane % 4) (+1), stored column lane / 4).
#pragma once

#include <attn/common.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>

#include "../sdpa_dropout.h"
#include "../sdpa_params.h"
#include "sdpa_cuda.h"

namespace attn::kernels::cuda_detail {

constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// ---- the parameter block every kernel receives (by value) --------------------------------------
// Built on the host from CudaSdpaParams / CudaSdpaBackwardParams (make_params below, the gradients
// in sdpa_backward.cu). Its fields are those of SdpaGeometry and SdpaGradStrides (sdpa_params.h)
// under the same names, as in the reference and the CPU kernels: the strides are the shared
// structs themselves; sizes and the scale are in the types the kernels compute with (int, float);
// the rest is what the host derives once for every thread (visibility band, scale in log2 units,
// dropout threshold, vectorisation flags).
struct KernelParams : SdpaStrides, SdpaGradStrides {
  const uint16_t* q;  // element data as raw 16-bit words (T = __half or __nv_bfloat16)
  const uint16_t* k;
  const uint16_t* v;
  uint16_t* out;
  float* lse;  // contiguous (B, H, L_q), fp32; may be null in the forward

  int B, H, H_kv, L_q, L_k, D, D_v;  // SdpaGeometry's sizes (sdpa_cuda_supported bounds them)
  int group;                         // H / H_kv: the query heads sharing one key/value head
  float scale;                       // SdpaGeometry::scale (for dK, dQ)
  float scale_log2;                  // scale * log2(e): scores in log2 units for exp2f

  // Visibility by causal masking and the sliding window: key j is visible to query i iff
  // (window_left < 0 || j >= i + diagonal_offset - window_left) and
  // (window_right < 0 || j <= i + diagonal_offset + window_right); causal is folded into
  // window_right (sdpa_band).
  SdpaBand band;

  MaskKind mask_kind;  // Bool: bytes; Float: additive, in T
  const void* mask;
  int64_t mask_batch_stride, mask_head_stride, mask_row_stride, mask_col_stride;
  const uint8_t* key_padding;
  int64_t key_padding_batch_stride;

  // Score modifiers (SdpaGeometry's), applied to s = scale q . k before the masks: softcap
  // (> 0: s = softcap tanh(s / softcap)), ALiBi (s -= slope |i + off - j|, slope =
  // alibi_slopes[b alibi_batch_stride + h]) and sinks (sinks[h] joins every row's softmax with a
  // zero value row). The relative bias table runs on the CPU only.
  float softcap;
  const float* alibi_slopes;
  int64_t alibi_batch_stride;
  const float* sinks;

  // Counter-based dropout (sdpa_dropout.h), on when SdpaGeometry::dropout_p > 0.
  bool dropout_enabled;
  uint32_t dropout_threshold;  // dropout_threshold(dropout_p) = floor(p * 2^32)
  float dropout_keep_scale;    // dropout_keep_scale(dropout_p) = float(1 / (1 - p))
  uint64_t dropout_seed, dropout_offset;

  // 16-byte cp.async allowed for the tiles of q, k, v (and dout); paired 32-bit stores for out.
  bool q_vec, k_vec, v_vec, dout_vec, out_pair;

  // ---- backward only (the strides are SdpaGradStrides') ----
  const uint16_t* dout;
  uint16_t* dq;
  uint16_t* dk;
  uint16_t* dv;
  bool dq_pair, dk_pair, dv_pair;  // paired 32-bit stores for dq, dk, dv
  float* Di;                       // (B, H, L_q) rowsum(dout o out), fp32 (the workspace)
};

// ---- element types ------------------------------------------------------------------------------
// T = __half or __nv_bfloat16: conversions of its 16-bit pattern, rounding to nearest even.
template <typename T>
struct Elem {
  static_assert(std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>);
  static __device__ __forceinline__ float to_float(uint16_t bits) {
    if constexpr (std::is_same_v<T, __half>)
      return __half2float(__ushort_as_half(bits));
    else
      return __bfloat162float(__ushort_as_bfloat16(bits));
  }
  static __device__ __forceinline__ uint16_t from_float(float x) {
    if constexpr (std::is_same_v<T, __half>)
      return __half_as_ushort(__float2half_rn(x));
    else
      return __bfloat16_as_ushort(__float2bfloat16_rn(x));
  }
  // (a, b) rounded to nearest even, a in the low half.
  static __device__ __forceinline__ uint32_t pack(float a, float b) {
    return uint32_t(from_float(a)) | (uint32_t(from_float(b)) << 16);
  }
};

// ---- tensor cores -------------------------------------------------------------------------------
// d += a * b on a 16x8x16 tile, fp32 accumulate.
template <typename T>
__device__ __forceinline__ void mma16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                         uint32_t b1);

template <>
__device__ __forceinline__ void mma16816<__half>(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                                 uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

template <>
__device__ __forceinline__ void mma16816<__nv_bfloat16>(float (&d)[4], const uint32_t (&a)[4],
                                                        uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
      "{%8, %9}, {%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* p) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(p))
               : "memory");
}

// The three ldmatrix patterns of the kernels, for a tile in shared memory with rows `ld`
// elements apart:
//
// A operand, rows [r0, r0 + 16) x cols [c0, c0 + 16) of a row-major tile (row = M, col = K):
// matrices 0..3 = (rows 0-7, cols 0-7), (rows 8-15, cols 0-7), (rows 0-7, cols 8-15),
// (rows 8-15, cols 8-15), i.e. A's reg0..reg3.
__device__ __forceinline__ void load_a(uint32_t (&a)[4], const uint16_t* tile, int ld, int r0,
                                       int c0, int lane) {
  ldmatrix_x4(a, tile + (r0 + (lane & 15)) * ld + c0 + (lane >> 4) * 8);
}
// B operands of two n-tiles from a tile stored (n, k) row-major, i.e. B^T (keys x dims for
// S = Q K^T): rows [n0, n0 + 16) x cols [k0, k0 + 16). Matrices = (n 0-7, k 0-7), (n 0-7, k 8-15),
// (n 8-15, k 0-7), (n 8-15, k 8-15): b[0], b[1] is n-tile n0, b[2], b[3] is n-tile n0 + 8.
__device__ __forceinline__ void load_b_nk(uint32_t (&b)[4], const uint16_t* tile, int ld, int n0,
                                          int k0, int lane) {
  ldmatrix_x4(b, tile + (n0 + (lane & 7) + (lane >> 4) * 8) * ld + k0 + ((lane >> 3) & 1) * 8);
}
// B operands of two n-tiles from a tile stored (k, n) row-major (values: keys x dims for O = P V),
// through the transposing ldmatrix: rows [k0, k0 + 16) x cols [n0, n0 + 16). Matrices =
// (k 0-7, n 0-7), (k 8-15, n 0-7), (k 0-7, n 8-15), (k 8-15, n 8-15): b[0], b[1] is n-tile n0,
// b[2], b[3] is n-tile n0 + 8.
__device__ __forceinline__ void load_b_kn(uint32_t (&b)[4], const uint16_t* tile, int ld, int k0,
                                          int n0, int lane) {
  ldmatrix_x4_trans(b,
                    tile + (k0 + (lane & 7) + ((lane >> 3) & 1) * 8) * ld + n0 + (lane >> 4) * 8);
}

// ---- tile products on fragments -----------------------------------------------------------------
// The products of the kernels' main loops, for one warp's 16 rows. Fragment arrays are
// float[kNT][4]: kNT n-tiles of the 16 x 8 C layout (columns 8 nt .. 8 nt + 7 in tile nt). The
// 16-wide steps over a head dim (K of A B^T, N of P B) are unrolled to kSteps = kD / 16, of which
// only the first n_steps (those holding data of D or D_v) run.

// Zeroes a fragment array.
template <int kNT>
__device__ __forceinline__ void zero_frags(float (&c)[kNT][4]) {
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt) c[nt][0] = c[nt][1] = c[nt][2] = c[nt][3] = 0.0f;
}

// c = A B^T (16 x 8 kNT): A = rows [a_row0, a_row0 + 16) of tile sA, B^T = rows [0, 8 kNT) of tile
// sB, both row-major with the head dim along the rows (e.g. S = Q K^T with sA = Q, sB = K).
template <typename T, int kSteps, int kNT>
__device__ __forceinline__ void mma_abt(float (&c)[kNT][4], const uint16_t* sA, int a_row0,
                                        const uint16_t* sB, int ld, int n_steps, int lane) {
  zero_frags(c);
#pragma unroll
  for (int ks = 0; ks < kSteps; ++ks) {
    if (ks < n_steps) {
      uint32_t a[4];
      load_a(a, sA, ld, a_row0, ks * 16, lane);
#pragma unroll
      for (int np = 0; np < kNT / 2; ++np) {
        uint32_t bb[4];
        load_b_nk(bb, sB, ld, np * 16, ks * 16, lane);
        mma16816<T>(c[2 * np], a, bb[0], bb[1]);
        mma16816<T>(c[2 * np + 1], a, bb[2], bb[3]);
      }
    }
  }
}

// The A operand of a 16 x 16 block held as two C fragments (columns 0-7 in lo, 8-15 in hi),
// rounded to T: the layouts match, so P = exp(S - m) feeds P V without leaving registers.
template <typename T>
__device__ __forceinline__ void pack_a(uint32_t (&a)[4], const float (&lo)[4],
                                       const float (&hi)[4]) {
  a[0] = Elem<T>::pack(lo[0], lo[1]);
  a[1] = Elem<T>::pack(lo[2], lo[3]);
  a[2] = Elem<T>::pack(hi[0], hi[1]);
  a[3] = Elem<T>::pack(hi[2], hi[3]);
}

// c (16 x 8 kOT) += [lo hi] B, the 16 x 16 block [lo hi] (as in pack_a) times rows [k0, k0 + 16)
// of tile sB, row-major with the head dim along the rows (e.g. O += P V with sB = V).
template <typename T, int kOT>
__device__ __forceinline__ void mma_frags_b(float (&c)[kOT][4], const float (&lo)[4],
                                            const float (&hi)[4], const uint16_t* sB, int ld,
                                            int k0, int n_steps, int lane) {
  uint32_t a[4];
  pack_a<T>(a, lo, hi);
#pragma unroll
  for (int np = 0; np < kOT / 2; ++np) {
    if (np < n_steps) {
      uint32_t bb[4];
      load_b_kn(bb, sB, ld, k0, np * 16, lane);
      mma16816<T>(c[2 * np], a, bb[0], bb[1]);
      mma16816<T>(c[2 * np + 1], a, bb[2], bb[3]);
    }
  }
}

// c (16 x 8 kOT) += P B for a 16 x 8 kNT fragment array P and rows [0, 8 kNT) of tile sB.
template <typename T, int kNT, int kOT>
__device__ __forceinline__ void mma_pb(float (&c)[kOT][4], const float (&pf)[kNT][4],
                                       const uint16_t* sB, int ld, int n_steps, int lane) {
#pragma unroll
  for (int kk = 0; kk < kNT / 2; ++kk)
    mma_frags_b<T>(c, pf[2 * kk], pf[2 * kk + 1], sB, ld, kk * 16, n_steps, lane);
}

// ---- cp.async -----------------------------------------------------------------------------------
// Copies src_bytes (0..16) from global memory and zero-fills the rest of the 16 bytes.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
               "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_4(void* smem, const void* gmem, int src_bytes) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem),
               "r"(src_bytes)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}
template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

// Loads rows [0, rows) x cols [0, round_up(cols, 16)) of a (rows_total x kCols) tile into shared
// memory (rows kCols + 8 elements apart) from global memory (rows `row_stride` elements apart):
// rows >= rows_valid and cols >= cols_valid are zeros; columns from round_up(cols_valid, 16) on
// are left untouched (the kernels never read them). `vec`: 16-byte cp.async (needs src 16-byte
// aligned); otherwise scalar loads stored synchronously. Either way the data is visible to the
// block after cp_async_wait + __syncthreads.
template <int kRows, int kCols, int kThreads>
__device__ __forceinline__ void load_tile(uint16_t* dst, const uint16_t* src, int64_t row_stride,
                                          int rows_valid, int cols_valid, bool vec, int tid) {
  constexpr int kChunksPerRow = kCols / 8;
  constexpr int kLd = kCols + 8;
  const int cols_read = (cols_valid + 15) & ~15;
  constexpr int kChunks = kRows * kChunksPerRow;
#pragma unroll 1
  for (int it = 0; it < (kChunks + kThreads - 1) / kThreads; ++it) {
    const int c = tid + it * kThreads;
    if (kChunks % kThreads != 0 && c >= kChunks) break;
    const int r = c / kChunksPerRow, col0 = (c % kChunksPerRow) * 8;
    if (col0 >= cols_read) continue;
    uint16_t* d = dst + r * kLd + col0;
    const int n = r < rows_valid ? min(8, cols_valid - col0) : 0;  // elements to read (<= 0: none)
    if (n <= 0) {
      *reinterpret_cast<uint4*>(d) = make_uint4(0, 0, 0, 0);
    } else if (vec) {
      cp_async_16(d, src + r * row_stride + col0, n * 2);
    } else {
      const uint16_t* s = src + r * row_stride + col0;
      uint32_t w[4];
#pragma unroll
      for (int e = 0; e < 4; ++e)
        w[e] =
            uint32_t(2 * e < n ? s[2 * e] : 0) | (uint32_t(2 * e + 1 < n ? s[2 * e + 1] : 0) << 16);
      *reinterpret_cast<uint4*>(d) = make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
}

// The double-buffered pipeline of the main loops: step it computes on stage it & 1 while the copy
// of step it + 1 fills the other stage. load(step, stage) issues the cp.async copies of a step.
// Before the loop (after any copies of their own for the first group): the copy of step 0.
template <typename Load>
__device__ __forceinline__ void pipeline_start(int n_steps, Load&& load) {
  if (n_steps > 0) load(0, 0);
  cp_async_commit();
}
// At the top of step it: issues step it + 1's copy, then waits until step it's tiles are visible
// to the whole block. The step must end with __syncthreads() before the next copy overwrites them.
template <typename Load>
__device__ __forceinline__ void pipeline_wait(int it, int n_steps, Load&& load) {
  if (it + 1 < n_steps) {
    load(it + 1, (it & 1) ^ 1);
    cp_async_commit();
    cp_async_wait<1>();
  } else {
    cp_async_wait<0>();
  }
  __syncthreads();
}

// ---- outputs ------------------------------------------------------------------------------------
// Stores the fp32 pair (x0, x1) as elements col, col + 1 of a row of n_cols elements (col even);
// `pair`: the row start and col are 4-byte aligned, so one 32-bit store when both are in range.
template <typename T>
__device__ __forceinline__ void store_pair(uint16_t* row, int col, int n_cols, float x0, float x1,
                                           bool pair) {
  if (col + 1 < n_cols && pair) {
    *reinterpret_cast<uint32_t*>(row + col) = Elem<T>::pack(x0, x1);
  } else {
    if (col < n_cols) row[col] = Elem<T>::from_float(x0);
    if (col + 1 < n_cols) row[col + 1] = Elem<T>::from_float(x1);
  }
}

// Stores row r (0: the thread's row g, 1: row g + 8) of a 16 x (8 kOT) fragment array, times
// `scale`, as columns [0, n_cols) of `row`; t = lane % 4.
template <typename T, int kOT>
__device__ __forceinline__ void store_frag_row(uint16_t* row, const float (&c)[kOT][4], int r,
                                               float scale, int n_cols, int t, bool pair) {
#pragma unroll
  for (int ot = 0; ot < kOT; ++ot)
    if (ot * 8 < n_cols)
      store_pair<T>(row, ot * 8 + 2 * t, n_cols, c[ot][2 * r] * scale, c[ot][2 * r + 1] * scale,
                    pair);
}

// ---- visibility ---------------------------------------------------------------------------------
// The blocks of kBlock keys, [*first, *first + *count), that hold every key visible to some query
// row of [i_lo, i_hi) (i_hi > i_lo, rows < L_q) by the causal/window rule.
template <int kBlock>
__device__ __forceinline__ void visible_key_blocks(const KernelParams& p, int64_t i_lo,
                                                   int64_t i_hi, int* first, int* count) {
  const int64_t off = p.band.diagonal_offset, wl = p.band.window_left, wr = p.band.window_right;
  int64_t lo = 0, hi = p.L_k;
  if (wl >= 0) lo = max(lo, i_lo + off - wl);
  if (wr >= 0) hi = min(hi, i_hi - 1 + off + wr + 1);
  *first = int(lo / kBlock);
  *count = hi > lo ? int((hi + kBlock - 1) / kBlock) - *first : 0;
}
// The blocks of kBlock query rows, [*first, *first + *count), that hold every row that sees some
// key of [j_lo, j_hi) (j_hi > j_lo, keys < L_k).
template <int kBlock>
__device__ __forceinline__ void visible_query_blocks(const KernelParams& p, int64_t j_lo,
                                                     int64_t j_hi, int* first, int* count) {
  const int64_t off = p.band.diagonal_offset, wl = p.band.window_left, wr = p.band.window_right;
  int64_t lo = 0, hi = p.L_q;
  if (wr >= 0) lo = max(lo, j_lo - off - wr);
  if (wl >= 0) hi = min(hi, j_hi - 1 - off + wl + 1);
  *first = int(lo / kBlock);
  *count = hi > lo ? int((hi + kBlock - 1) / kBlock) - *first : 0;
}
// The mask advanced to (b, h) (null without a mask) and key_padding advanced to b (or null).
__device__ __forceinline__ const void* mask_bh_of(const KernelParams& p, int b, int h) {
  if (p.mask_kind == MaskKind::Bool)
    return static_cast<const uint8_t*>(p.mask) + b * p.mask_batch_stride + h * p.mask_head_stride;
  if (p.mask_kind == MaskKind::Float)
    return static_cast<const uint16_t*>(p.mask) + b * p.mask_batch_stride + h * p.mask_head_stride;
  return nullptr;
}
__device__ __forceinline__ const uint8_t* key_padding_of(const KernelParams& p, int b) {
  return p.key_padding ? p.key_padding + b * p.key_padding_batch_stride : nullptr;
}

// The key/value tiles that a block of query rows [i0, i_end) of batch b, key/value head h_kv
// streams (forward, dQ): step it < n_blocks of its loop is key tile jb_begin + it (keys
// [(jb_begin + it) kBc, + kBc)), the tiles that some row of the block can see. kv(it, stage) is
// the load of pipeline_start / pipeline_wait: it copies step it's K and V tiles into stage `stage`
// of the double-buffered sK and sV (kBc x kD, rows kD + 8 apart).
template <int kBc, int kD, int kThreads>
struct KvTiles {
  const KernelParams& p;
  uint16_t *sK, *sV;
  const uint16_t *k, *v;  // k and v at (b, h_kv)
  int tid, jb_begin, n_blocks;

  __device__ __forceinline__ KvTiles(const KernelParams& p_, uint16_t* sK_, uint16_t* sV_, int b,
                                     int h_kv, int64_t i0, int64_t i_end, int tid_)
      : p(p_),
        sK(sK_),
        sV(sV_),
        k(p_.k + b * p_.k_batch_stride + h_kv * p_.k_head_stride),
        v(p_.v + b * p_.v_batch_stride + h_kv * p_.v_head_stride),
        tid(tid_) {
    visible_key_blocks<kBc>(p, i0, i_end, &jb_begin, &n_blocks);
  }
  __device__ __forceinline__ void operator()(int it, int stage) const {
    constexpr int kLd = kD + 8;
    const int64_t j0 = int64_t(jb_begin + it) * kBc;
    const int rows = int(min(int64_t(kBc), p.L_k - j0));
    load_tile<kBc, kD, kThreads>(sK + stage * kBc * kLd, k + j0 * p.k_row_stride, p.k_row_stride,
                                 rows, p.D, p.k_vec, tid);
    load_tile<kBc, kD, kThreads>(sV + stage * kBc * kLd, v + j0 * p.v_row_stride, p.v_row_stride,
                                 rows, p.D_v, p.v_vec, tid);
  }
};
// Whether the tile of query rows [i_lo, i_hi) (clamped to L_q) by keys [j_lo, j_hi) needs the
// per-element rules: keys past L_k, a partially visible window, a mask or key padding. When false
// every (row < L_q, key) of the tile is visible and only the scale applies.
__device__ __forceinline__ bool tile_needs_elementwise(const KernelParams& p, int64_t i_lo,
                                                       int64_t i_hi, int64_t j_lo, int64_t j_hi) {
  const int64_t off = p.band.diagonal_offset, wl = p.band.window_left, wr = p.band.window_right;
  if (p.mask_kind != MaskKind::None || p.key_padding != nullptr || j_hi > p.L_k) return true;
  if (p.softcap > 0.0f || p.alibi_slopes != nullptr) return true;  // the modifiers, per element
  i_hi = min(i_hi, int64_t(p.L_q));
  if (i_hi <= i_lo) return true;
  if (wl >= 0 && j_lo < i_hi - 1 + off - wl) return true;
  if (wr >= 0 && j_hi - 1 > i_lo + off + wr) return true;
  return false;
}

// The ALiBi slope of (b, h), or 0 without ALiBi.
__device__ __forceinline__ float alibi_slope(const KernelParams& p, int b, int h) {
  return p.alibi_slopes ? p.alibi_slopes[b * p.alibi_batch_stride + h] : 0.0f;
}

// Scales a 16 x (8 kNT) score fragment to log2 units (x = acc * scale * log2(e)) and, when
// `elementwise`, applies the per-element rules: the score modifiers (softcap, then ALiBi with
// `slope`), -inf where the key is hidden (out of range, causal/window, key padding, bool mask),
// + mask * log2(e) for an additive mask. With softcap, `tanh_out` (when not null) receives
// tanh(scale acc / softcap) of every element, for the backward's chain rule.
//
// The fragment's rows are query rows (kKeyRows false: forward, dQ) or keys (kKeyRows true: the
// dK/dV kernel, which computes S^T); this thread holds rows row0 and row0 + 8 and, in n-tile nt,
// columns col0 + 8 nt and col0 + 8 nt + 1 (col0 = the tile's first column + 2 (lane % 4)).
// `mask_bh`: the mask advanced to (b, h); `pad_b`: key_padding advanced to b (or null).
template <typename T, int kNT, bool kKeyRows>
__device__ __forceinline__ void scale_and_mask(const KernelParams& p, float (&s)[kNT][4],
                                               int64_t row0, int64_t col0, bool elementwise,
                                               const void* mask_bh, const uint8_t* pad_b,
                                               float slope = 0.0f, float (*tanh_out)[4] = nullptr) {
  if (!elementwise) {
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] *= p.scale_log2;
    return;
  }
  const int64_t off = p.band.diagonal_offset, wl = p.band.window_left, wr = p.band.window_right;
  const int64_t n_rows = kKeyRows ? p.L_k : p.L_q, n_cols = kKeyRows ? p.L_q : p.L_k;
  // Mask element (row, col) is at mask_bh + row * row_step + col * col_step.
  const int64_t m_row_step = kKeyRows ? p.mask_col_stride : p.mask_row_stride,
                m_col_step = kKeyRows ? p.mask_row_stride : p.mask_col_stride;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t row = row0 + 8 * r;
    // Visible columns [lo, hi] of this row by the causal/window rule and the lengths.
    int64_t lo = 0, hi = n_cols - 1;
    if (!kKeyRows) {  // row = query i: keys i + off - wl <= j <= i + off + wr
      if (wl >= 0) lo = max(lo, row + off - wl);
      if (wr >= 0) hi = min(hi, row + off + wr);
    } else {  // row = key j: queries j - off - wr <= i <= j - off + wl
      if (wr >= 0) lo = max(lo, row - off - wr);
      if (wl >= 0) hi = min(hi, row - off + wl);
    }
    bool row_ok = row < n_rows;
    if (kKeyRows && row_ok && pad_b != nullptr) row_ok = pad_b[row] == 0;
    // The same bounds relative to col0, clamped to [-1, 8 kNT] (so they fit an int).
    constexpr int64_t kW = 8 * kNT;
    const int c_lo = row_ok ? int(min(max(lo - col0, int64_t(-1)), kW)) : int(kW);
    const int c_hi = int(min(max(hi - col0, int64_t(-1)), kW));
    const int64_t m_base = row * m_row_step + col0 * m_col_step;
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt) {
#pragma unroll
      for (int c01 = 0; c01 < 2; ++c01) {
        const int c = nt * 8 + c01;  // column col0 + c
        float x;
        if (p.softcap > 0.0f) {
          const float th = tanhf(s[nt][2 * r + c01] * p.scale / p.softcap);
          if (tanh_out) tanh_out[nt][2 * r + c01] = th;
          x = p.softcap * th * kLog2e;
        } else {
          x = s[nt][2 * r + c01] * p.scale_log2;
        }
        if (slope != 0.0f) {  // |i + off - j| with i the query, j the key
          const int64_t i = kKeyRows ? col0 + c : row, j = kKeyRows ? row : col0 + c;
          const int64_t d = i + off - j;
          x -= slope * float(d < 0 ? -d : d) * kLog2e;
        }
        bool visible = c >= c_lo && c <= c_hi;
        if (!kKeyRows && visible && pad_b != nullptr) visible = pad_b[col0 + c] == 0;
        if (visible && p.mask_kind == MaskKind::Bool)
          visible = static_cast<const uint8_t*>(mask_bh)[m_base + c * m_col_step] != 0;
        if (visible && p.mask_kind == MaskKind::Float)
          x += Elem<T>::to_float(static_cast<const uint16_t*>(mask_bh)[m_base + c * m_col_step]) *
               kLog2e;
        s[nt][2 * r + c01] = visible ? x : -INFINITY;
      }
    }
  }
}

// ---- counter-based dropout (sdpa_dropout.h: dropout_state, dropout_mix, dropout_threshold) -----
// The SplitMix64 states of one fragment row: weight (b, h, i, j) has flat index
// ((b H + h) L_q + i) L_k + j and state seed + (offset + index + 1) gamma, so along the row the
// state steps by gamma per key (query rows) or by L_k gamma per query (key rows, kKeyRows).
struct DropoutRow {
  uint64_t state0, step;
};
template <bool kKeyRows>
__device__ __forceinline__ DropoutRow dropout_row(const KernelParams& p, int64_t bh, int64_t row,
                                                  int64_t col0) {
  const uint64_t L_q = uint64_t(p.L_q), L_k = uint64_t(p.L_k);
  const uint64_t index = kKeyRows ? (uint64_t(bh) * L_q + uint64_t(col0)) * L_k + uint64_t(row)
                                  : (uint64_t(bh) * L_q + uint64_t(row)) * L_k + uint64_t(col0);
  return {p.dropout_seed + (p.dropout_offset + index + 1) * kDropoutGamma,
          (kKeyRows ? L_k : uint64_t(1)) * kDropoutGamma};
}
// Whether the weight at column col0 + c of the row is kept.
__device__ __forceinline__ bool dropout_keep_dev(const KernelParams& p, const DropoutRow& d,
                                                 int c) {
  const uint64_t state = d.state0 + uint64_t(c) * d.step;
  return uint32_t(dropout_mix(state) >> 32) >= p.dropout_threshold;
}

// The DropoutRows of the thread's two fragment rows, row0 and row0 + 8 (set when
// p.dropout_enabled).
template <bool kKeyRows>
__device__ __forceinline__ void dropout_rows(const KernelParams& p, int64_t bh, int64_t row0,
                                             int64_t col0, DropoutRow (&d)[2]) {
  if (p.dropout_enabled) {
    d[0] = dropout_row<kKeyRows>(p, bh, row0, col0);
    d[1] = dropout_row<kKeyRows>(p, bh, row0 + 8, col0);
  }
}
// The dropout factor Z of element e of n-tile nt of the fragment whose rows are d: 1 without
// dropout, else 0 (dropped) or keep_scale.
__device__ __forceinline__ float dropout_factor(const KernelParams& p, const DropoutRow (&d)[2],
                                                int nt, int e) {
  return p.dropout_enabled
             ? (dropout_keep_dev(p, d[e >> 1], nt * 8 + (e & 1)) ? p.dropout_keep_scale : 0.0f)
             : 1.0f;
}

// ---- warp reductions over the 4 threads of a quad (one row of an mma fragment) ------------------
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffffu, x, 1);
  return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

}  // namespace attn::kernels::cuda_detail

// ---- host side: parameter translation, checks, launches ---------------------------------------
namespace attn::kernels::cuda_detail {

inline std::string prefix(const char* fn) { return std::string("[") + fn + "] "; }

// Throws attn::DeviceError "[fn] CUDA error in <what>: <name> (<message>)" unless status is OK.
inline void check_cuda(cudaError_t status, const char* fn, const char* what) {
  if (status == cudaSuccess) return;
  cudaGetLastError();  // clear a non-sticky error so the next call starts clean
  throw DeviceError(prefix(fn) + "CUDA error in " + what + ": " + cudaGetErrorName(status) + " (" +
                    cudaGetErrorString(status) + ")");
}

// After a kernel launch: the launch's own status (a bad configuration, too much shared memory)
// always; in debug builds (no NDEBUG) also the kernel's execution, by waiting for it, so that a
// fault is reported at the launch that caused it. Release builds report execution errors at the
// next synchronising call; CUDA_LAUNCH_BLOCKING=1 in the environment makes that the launch too.
inline void check_launch(const char* fn, const char* what) {
  check_cuda(cudaGetLastError(), fn, what);
#ifndef NDEBUG
  check_cuda(cudaDeviceSynchronize(), fn, what);
#endif
}

// The padded head dim a problem runs with: the larger of D and D_v rounded up to 64, 128 or 256.
inline int padded_head_dim(int64_t D, int64_t D_v) {
  const int64_t d = std::max(D, D_v);
  return d <= 64 ? 64 : d <= 128 ? 128 : 256;
}

// Calls launch.template operator()<T, kD>() with the problem's element type T (__half or
// __nv_bfloat16) and padded head dim kD: the six instantiations every kernel is compiled for.
template <typename T, typename Launch>
void dispatch_head_dim(int64_t D, int64_t D_v, Launch& launch) {
  switch (padded_head_dim(D, D_v)) {
    case 64: launch.template operator()<T, 64>(); break;
    case 128: launch.template operator()<T, 128>(); break;
    default: launch.template operator()<T, 256>(); break;
  }
}
template <typename Launch>
void dispatch_kernels(const CudaSdpaParams& s, Launch&& launch) {
  if (s.dtype == ElemType::Float16)
    dispatch_head_dim<__half>(s.D, s.D_v, launch);
  else
    dispatch_head_dim<__nv_bfloat16>(s.D, s.D_v, launch);
}

// The grid of a kernel with one thread block per (block of `rows` query rows, head, batch).
inline dim3 query_block_grid(const KernelParams& kp, int rows) {
  return dim3(unsigned((kp.L_q + rows - 1) / rows), unsigned(kp.H), unsigned(kp.B));
}

inline bool aligned(const void* p, std::size_t bytes) {
  return reinterpret_cast<std::uintptr_t>(p) % bytes == 0;
}
// 16-byte loads of 8-element chunks: the base and every row start 16-byte aligned.
inline bool vec_ok(const void* p, int64_t bs, int64_t hs, int64_t rs) {
  return aligned(p, 16) && bs % 8 == 0 && hs % 8 == 0 && rs % 8 == 0;
}
// 32-bit stores of element pairs at even columns.
inline bool pair_ok(const void* p, int64_t bs, int64_t hs, int64_t rs) {
  return aligned(p, 4) && bs % 2 == 0 && hs % 2 == 0 && rs % 2 == 0;
}

inline KernelParams make_params(const CudaSdpaParams& s) {
  KernelParams p{};
  static_cast<SdpaStrides&>(p) = s;
  p.q = static_cast<const uint16_t*>(s.q);
  p.k = static_cast<const uint16_t*>(s.k);
  p.v = static_cast<const uint16_t*>(s.v);
  p.out = static_cast<uint16_t*>(s.out);
  p.lse = s.lse;
  p.B = int(s.B), p.H = int(s.H), p.H_kv = int(s.H_kv), p.group = int(s.H / s.H_kv);
  p.L_q = int(s.L_q), p.L_k = int(s.L_k), p.D = int(s.D), p.D_v = int(s.D_v);
  p.scale = float(s.scale);
  p.scale_log2 = float(s.scale * 1.4426950408889634);
  p.band = sdpa_band(s);
  p.mask_kind = s.mask_kind;
  p.mask = s.mask;
  p.mask_batch_stride = s.mask_batch_stride, p.mask_head_stride = s.mask_head_stride;
  p.mask_row_stride = s.mask_row_stride, p.mask_col_stride = s.mask_col_stride;
  p.key_padding = s.key_padding;
  p.key_padding_batch_stride = s.key_padding_batch_stride;
  p.softcap = float(s.softcap);
  p.alibi_slopes = s.alibi_slopes;
  p.alibi_batch_stride = s.alibi_batch_stride;
  p.sinks = s.sinks;
  p.dropout_enabled = s.dropout_p > 0.0;
  p.dropout_threshold = p.dropout_enabled ? dropout_threshold(s.dropout_p) : 0;
  p.dropout_keep_scale = p.dropout_enabled ? dropout_keep_scale(s.dropout_p) : 1.0f;
  p.dropout_seed = s.dropout_seed, p.dropout_offset = s.dropout_offset;
  p.q_vec = vec_ok(s.q, s.q_batch_stride, s.q_head_stride, s.q_row_stride);
  p.k_vec = vec_ok(s.k, s.k_batch_stride, s.k_head_stride, s.k_row_stride);
  p.v_vec = vec_ok(s.v, s.v_batch_stride, s.v_head_stride, s.v_row_stride);
  p.out_pair = pair_ok(s.out, s.out_batch_stride, s.out_head_stride, s.out_row_stride);
  return p;
}

// Throws attn::DeviceError naming fn unless sdpa_cuda_supported(s).
inline void validate(const CudaSdpaParams& s, const char* fn) {
  std::string why;
  if (!sdpa_cuda_supported(s, &why)) throw DeviceError(prefix(fn) + why);
}

// Allows `kernel` `bytes` of dynamic shared memory on the current device, or throws naming fn
// when the device has less (e.g. 99 KB GPUs of compute capability 8.6 / 8.9 for the largest
// tiles).
template <typename Kernel>
void set_shared_memory(Kernel kernel, int bytes, const char* fn) {
  int device = 0, optin = 0;
  check_cuda(cudaGetDevice(&device), fn, "cudaGetDevice");
  check_cuda(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device), fn,
             "cudaDeviceGetAttribute");
  if (bytes > optin)
    throw DeviceError(prefix(fn) + "the kernel needs " + std::to_string(bytes) +
                      " bytes of shared memory per block; cuda:" + std::to_string(device) +
                      " allows " + std::to_string(optin));
  check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), fn,
             "cudaFuncSetAttribute");
}

}  // namespace attn::kernels::cuda_detail

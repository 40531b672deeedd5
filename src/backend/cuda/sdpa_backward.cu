// FlashAttention-2 backward on tensor cores (Dao 2023, Algorithm 2), deterministic: no atomics.
// See sdpa_cuda.h for what is computed and sdpa_cuda_common.cuh for the fragment conventions.
//
// With P = exp(S - lse) recomputed from the forward's lse, Z the dropout factors (0 or
// 1 / (1 - p), regenerated from the seed) and D_i = rowsum(dO o O):
//
//   dV = (P o Z)^T dO      dP = (dO V^T) o Z      dS = P o (dP - D_i)
//   dK = scale dS^T Q      dQ = scale dS K
//
// With softcap, dS is multiplied by the derivative 1 - tanh^2 of the capped score; ALiBi adds a
// constant and sinks only enlarge lse, so neither changes these formulas (P uses the forward's lse,
// which includes the sink). The gradients of the slopes and sinks are computed on the CPU only.
//
// Three kernels, each output written by exactly one thread block in a fixed order:
//   1. sdpa_bwd_dot_kernel: D_i per row (one warp per row), into the workspace.
//   2. sdpa_bwd_dkdv_kernel: one block per (key block of 64, key/value head, batch); warp w owns
//      keys [16 w, 16 w + 16). It loops over the query heads of the GQA group (in order) and over
//      the query blocks that can see its keys, computing the transposed tile S^T = K Q^T so that
//      P^T and dS^T land in registers already in the A-operand layout of dV += (P o Z)^T dO and
//      dK += dS^T Q. Q and dO tiles (and their lse, D_i) are double-buffered through cp.async.
//      For padded head dims of 256 the dK and dV accumulators do not both fit in registers: the
//      kernel runs twice, once for dV and once for dK (kMode).
//   3. sdpa_bwd_dq_kernel: one block per (query block of 64, head, batch); warp w owns query rows
//      [16 w, 16 w + 16) and loops over the key blocks its rows can see (K and V double-buffered),
//      accumulating dQ += dS K.
// Kernel 3 recomputes S and dP that kernel 2 also computes (7 tile products instead of FA2's 5
// with atomic dQ); that is the price of determinism without a dQ buffer per key block.
#include "sdpa_cuda_common.cuh"

namespace attn::kernels {

namespace cuda_detail {
namespace {

constexpr int kBwdWarps = 4, kBwdThreads = 32 * kBwdWarps;

// Tile sizes per padded head dim. dK/dV kernel: 64 keys per block, kBrKV query rows per step;
// registers per thread are about dK + dV (kD floats) + S^T and dP^T (kBrKV / 2 floats each).
// dQ kernel: 64 query rows per block, kBcQ keys per step.
// kD = 64: kBrKV = 64, kBcQ = 64; kD = 128: 32, 64; kD = 256: 32, 32.
template <int kD>
struct BwdConfig {
  static constexpr int kBrKV = kD <= 64 ? 64 : 32, kBcQ = kD <= 128 ? 64 : 32;
};

template <int kD>
struct DkDvShape {
  static constexpr int kBc = 16 * kBwdWarps;  // keys per block
  static constexpr int kBr = BwdConfig<kD>::kBrKV;
  static constexpr int kLd = kD + 8;
  // K, V (one tile each), Q and dO (two stages each), lse and D_i (two stages each).
  static constexpr int kSmemBytes = (2 * kBc + 4 * kBr) * kLd * 2 + 4 * kBr * 4;
};

template <int kD>
struct DqShape {
  static constexpr int kBr = 16 * kBwdWarps;  // query rows per block
  static constexpr int kBc = BwdConfig<kD>::kBcQ;
  static constexpr int kLd = kD + 8;
  // Q, dO (one tile each), K and V (two stages each).
  static constexpr int kSmemBytes = (2 * kBr + 4 * kBc) * kLd * 2;
};

enum : int { kBoth = 0, kOnlyDv = 1, kOnlyDk = 2 };

// ---- 1. D_i = rowsum(dO o O) ------------------------------------------------------------------
constexpr int kDotRowsPerBlock = 8;

template <typename T>
__global__ void __launch_bounds__(32 * kDotRowsPerBlock) sdpa_bwd_dot_kernel(const KernelParams p) {
  const int64_t row = int64_t(blockIdx.x) * kDotRowsPerBlock + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= int64_t(p.B) * p.H * p.L_q) return;  // whole warps leave together
  const int64_t i = row % p.L_q, bh = row / p.L_q;
  const int64_t h = bh % p.H, b = bh / p.H;
  const uint16_t* o = p.out + b * p.out_batch_stride + h * p.out_head_stride + i * p.out_row_stride;
  const uint16_t* d =
      p.dout + b * p.dout_batch_stride + h * p.dout_head_stride + i * p.dout_row_stride;
  float acc = 0.0f;
  for (int e = lane; e < p.D_v; e += 32) acc += Elem<T>::to_float(o[e]) * Elem<T>::to_float(d[e]);
#pragma unroll
  for (int s = 16; s > 0; s >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, s);
  if (lane == 0) p.Di[row] = acc;
}

// ---- 2. dK, dV --------------------------------------------------------------------------------
template <typename T, int kD, int kMode>
__global__ void __launch_bounds__(kBwdThreads) sdpa_bwd_dkdv_kernel(const KernelParams p) {
  using Shape = DkDvShape<kD>;
  constexpr int kBc = Shape::kBc, kBr = Shape::kBr, kLd = Shape::kLd;
  constexpr bool kDv = kMode != kOnlyDk, kDk = kMode != kOnlyDv;
  constexpr int kNT = kBr / 8;  // n-tiles of S^T (query columns)
  constexpr int kOT = kD / 8;   // n-tiles of dK, dV (head dims)

  extern __shared__ __align__(16) unsigned char smem_raw[];
  uint16_t* sK = reinterpret_cast<uint16_t*>(smem_raw);
  uint16_t* sV = sK + kBc * kLd;
  uint16_t* sQ = sV + kBc * kLd;                                // 2 stages
  uint16_t* sdO = sQ + 2 * kBr * kLd;                           // 2 stages
  float* sLse = reinterpret_cast<float*>(sdO + 2 * kBr * kLd);  // 2 stages
  float* sDi = sLse + 2 * kBr;                                  // 2 stages

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;
  const int b = blockIdx.z, h_kv = blockIdx.y;
  const int64_t j0 = int64_t(blockIdx.x) * kBc;
  const int64_t j_end = min(j0 + kBc, int64_t(p.L_k));
  const uint8_t* pad_b = key_padding_of(p, b);

  // The query blocks that can see some key of this block, for each head of the group.
  int qb_begin, n_qb;
  visible_query_blocks<kBr>(p, j0, j_end, &qb_begin, &n_qb);
  const int n_iters = p.group * n_qb;

  const int rows_kv = int(j_end - j0);
  load_tile<kBc, kD, kBwdThreads>(
      sK, p.k + b * p.k_batch_stride + h_kv * p.k_head_stride + j0 * p.k_row_stride, p.k_row_stride,
      rows_kv, p.D, p.k_vec, tid);
  if constexpr (kDk)
    load_tile<kBc, kD, kBwdThreads>(
        sV, p.v + b * p.v_batch_stride + h_kv * p.v_head_stride + j0 * p.v_row_stride,
        p.v_row_stride, rows_kv, p.D_v, p.v_vec, tid);

  // Iteration it: query head h_kv * group + it / n_qb, query block qb_begin + it % n_qb.
  auto load_q = [&](int it, int stage) {
    const int h = h_kv * p.group + it / n_qb;
    const int64_t i0 = int64_t(qb_begin + it % n_qb) * kBr;
    const int rows = int(min(int64_t(kBr), p.L_q - i0));
    load_tile<kBr, kD, kBwdThreads>(
        sQ + stage * kBr * kLd,
        p.q + b * p.q_batch_stride + h * p.q_head_stride + i0 * p.q_row_stride, p.q_row_stride,
        rows, p.D, p.q_vec, tid);
    load_tile<kBr, kD, kBwdThreads>(
        sdO + stage * kBr * kLd,
        p.dout + b * p.dout_batch_stride + h * p.dout_head_stride + i0 * p.dout_row_stride,
        p.dout_row_stride, rows, p.D_v, p.dout_vec, tid);
    if (tid < kBr) {
      const int64_t row = (int64_t(b) * p.H + h) * p.L_q + i0 + tid;
      const int n = tid < rows ? 4 : 0;  // rows past L_q: zero-filled (and never used)
      cp_async_4(sLse + stage * kBr + tid, p.lse + (n ? row : 0), n);
      cp_async_4(sDi + stage * kBr + tid, p.Di + (n ? row : 0), n);
    }
  };
  pipeline_start(n_iters, load_q);

  float acc_dv[kDv ? kOT : 1][4], acc_dk[kDk ? kOT : 1][4];
  zero_frags(acc_dv);
  zero_frags(acc_dk);
  const int n_ksteps = (p.D + 15) / 16, n_vsteps = (p.D_v + 15) / 16;
  const int64_t key0 = j0 + warp * 16 + g;  // this thread's keys: key0 and key0 + 8

  for (int it = 0; it < n_iters; ++it) {
    const int stage = it & 1;
    pipeline_wait(it, n_iters, load_q);
    const int h = h_kv * p.group + it / n_qb;
    const int64_t i0 = int64_t(qb_begin + it % n_qb) * kBr;
    const int64_t bh = int64_t(b) * p.H + h;
    const uint16_t* tQ = sQ + stage * kBr * kLd;
    const uint16_t* tdO = sdO + stage * kBr * kLd;
    const float* tLse = sLse + stage * kBr;
    const float* tDi = sDi + stage * kBr;

    // ---- S^T = K Q^T (16 keys x kBr queries per warp) ------------------------------------------
    float st[kNT][4];
    mma_abt<T, kD / 16>(st, sK, warp * 16, tQ, kLd, n_ksteps, lane);
    const bool elementwise = tile_needs_elementwise(p, i0, i0 + kBr, j0, j0 + kBc);
    float th[kNT][4];  // softcap: tanh of each scaled score, for dS's chain rule
    scale_and_mask<T, kNT, true>(p, st, key0, i0 + 2 * t, elementwise, mask_bh_of(p, b, h), pad_b,
                                 alibi_slope(p, b, h), p.softcap > 0.0f ? th : nullptr);

    // ---- P^T = 2^(x - lse log2 e); rows of lse = -inf (fully masked) or past L_q give 0 ---------
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int col = nt * 8 + 2 * t + (e & 1);
        const float lse = tLse[col];
        const float lse2 = (i0 + col < p.L_q && lse != -INFINITY) ? lse * kLog2e : INFINITY;
        st[nt][e] = exp2f(st[nt][e] - lse2);
      }

    // ---- dP^T = V dO^T ------------------------------------------------------------------------
    float dpt[kDk ? kNT : 1][4];
    if constexpr (kDk) mma_abt<T, kD / 16>(dpt, sV, warp * 16, tdO, kLd, n_vsteps, lane);

    // ---- dropout factors Z^T, then dV += (P o Z)^T dO and dK += dS^T Q, 16 queries at a time --
    DropoutRow drop[2];
    dropout_rows<true>(p, bh, key0, i0 + 2 * t, drop);
#pragma unroll
    for (int kk = 0; kk < kBr / 16; ++kk) {
      float pz[2][4], ds[2][4];  // n-tiles 2 kk and 2 kk + 1
#pragma unroll
      for (int half = 0; half < 2; ++half) {
        const int nt = 2 * kk + half;
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const float z = dropout_factor(p, drop, nt, e);
          pz[half][e] = st[nt][e] * z;
          if constexpr (kDk) {
            ds[half][e] = st[nt][e] * (dpt[nt][e] * z - tDi[nt * 8 + 2 * t + (e & 1)]);
            if (p.softcap > 0.0f) ds[half][e] *= 1.0f - th[nt][e] * th[nt][e];  // d softcap
          }
        }
      }
      if constexpr (kDv) mma_frags_b<T>(acc_dv, pz[0], pz[1], tdO, kLd, kk * 16, n_vsteps, lane);
      if constexpr (kDk) mma_frags_b<T>(acc_dk, ds[0], ds[1], tQ, kLd, kk * 16, n_ksteps, lane);
    }
    __syncthreads();  // every warp is done with this stage before the next copy overwrites it
  }
  cp_async_wait<0>();  // nothing in flight at exit (when the loop never ran)

  // ---- store dV and scale dK (keys < L_k, dims < D_v / D) ---------------------------------------
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t j = key0 + 8 * r;
    if (j >= p.L_k) continue;
    if constexpr (kDv)
      store_frag_row<T>(
          p.dv + b * p.dv_batch_stride + h_kv * p.dv_head_stride + j * p.dv_row_stride, acc_dv, r,
          1.0f, p.D_v, t, p.dv_pair);
    if constexpr (kDk)
      store_frag_row<T>(
          p.dk + b * p.dk_batch_stride + h_kv * p.dk_head_stride + j * p.dk_row_stride, acc_dk, r,
          p.scale, p.D, t, p.dk_pair);
  }
}

// ---- 3. dQ ------------------------------------------------------------------------------------
template <typename T, int kD>
__global__ void __launch_bounds__(kBwdThreads) sdpa_bwd_dq_kernel(const KernelParams p) {
  using Shape = DqShape<kD>;
  constexpr int kBr = Shape::kBr, kBc = Shape::kBc, kLd = Shape::kLd;
  constexpr int kNT = kBc / 8;  // n-tiles of S (key columns)
  constexpr int kOT = kD / 8;   // n-tiles of dQ

  extern __shared__ __align__(16) unsigned char smem_raw[];
  uint16_t* sQ = reinterpret_cast<uint16_t*>(smem_raw);
  uint16_t* sdO = sQ + kBr * kLd;
  uint16_t* sK = sdO + kBr * kLd;     // 2 stages
  uint16_t* sV = sK + 2 * kBc * kLd;  // 2 stages

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;
  const int b = blockIdx.z, h = blockIdx.y, h_kv = h / p.group;
  const int64_t i0 = int64_t(blockIdx.x) * kBr;
  const int64_t i_end = min(i0 + kBr, int64_t(p.L_q));
  const int64_t bh = int64_t(b) * p.H + h;
  // The key tiles some row of this block can see (KvTiles: step it is tile jb_begin + it).
  const KvTiles<kBc, kD, kBwdThreads> kv(p, sK, sV, b, h_kv, i0, i_end, tid);
  const int jb_begin = kv.jb_begin, n_blocks = kv.n_blocks;
  const void* mask_bh = mask_bh_of(p, b, h);
  const uint8_t* pad_b = key_padding_of(p, b);
  const int rows_q = int(i_end - i0);
  load_tile<kBr, kD, kBwdThreads>(
      sQ, p.q + b * p.q_batch_stride + h * p.q_head_stride + i0 * p.q_row_stride, p.q_row_stride,
      rows_q, p.D, p.q_vec, tid);
  load_tile<kBr, kD, kBwdThreads>(
      sdO, p.dout + b * p.dout_batch_stride + h * p.dout_head_stride + i0 * p.dout_row_stride,
      p.dout_row_stride, rows_q, p.D_v, p.dout_vec, tid);
  pipeline_start(n_blocks, kv);

  // This thread's rows row0 and row0 + 8: lse in log2 units (+inf: the row has no visible key or
  // is past L_q, so P = 0) and D_i.
  const int64_t row0 = i0 + warp * 16 + g;
  float lse2[2], di[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t i = row0 + 8 * r;
    const float lse = i < p.L_q ? p.lse[bh * p.L_q + i] : -INFINITY;
    lse2[r] = lse != -INFINITY ? lse * kLog2e : INFINITY;
    di[r] = i < p.L_q ? p.Di[bh * p.L_q + i] : 0.0f;
  }

  float acc[kOT][4];
  zero_frags(acc);
  const int n_ksteps = (p.D + 15) / 16, n_vsteps = (p.D_v + 15) / 16;
  const float slope = alibi_slope(p, b, h);

  for (int it = 0; it < n_blocks; ++it) {
    const int jb = jb_begin + it, stage = it & 1;
    pipeline_wait(it, n_blocks, kv);
    const uint16_t* tK = sK + stage * kBc * kLd;
    const uint16_t* tV = sV + stage * kBc * kLd;
    const int64_t j0 = int64_t(jb) * kBc;

    // ---- S = Q K^T, P = 2^(x - lse log2 e) ------------------------------------------------------
    float s[kNT][4];
    mma_abt<T, kD / 16>(s, sQ, warp * 16, tK, kLd, n_ksteps, lane);
    const bool elementwise = tile_needs_elementwise(p, i0, i_end, j0, j0 + kBc);
    float th[kNT][4];  // softcap: tanh of each scaled score, for dS's chain rule
    scale_and_mask<T, kNT, false>(p, s, row0, j0 + 2 * t, elementwise, mask_bh, pad_b, slope,
                                  p.softcap > 0.0f ? th : nullptr);
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) s[nt][e] = exp2f(s[nt][e] - lse2[e >> 1]);

    // ---- dP = dO V^T ----------------------------------------------------------------------------
    float dp[kNT][4];
    mma_abt<T, kD / 16>(dp, sdO, warp * 16, tV, kLd, n_vsteps, lane);

    // ---- dS = P o (dP o Z - D_i), in place of S ------------------------------------------------
    DropoutRow drop[2];
    dropout_rows<false>(p, bh, row0, j0 + 2 * t, drop);
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[nt][e] = s[nt][e] * (dp[nt][e] * dropout_factor(p, drop, nt, e) - di[e >> 1]);
        if (p.softcap > 0.0f) s[nt][e] *= 1.0f - th[nt][e] * th[nt][e];  // d softcap
      }

    // ---- dQ += dS K -----------------------------------------------------------------------------
    mma_pb<T>(acc, s, tK, kLd, n_ksteps, lane);
    __syncthreads();
  }
  cp_async_wait<0>();  // nothing in flight at exit (when the loop never ran)

  // ---- store scale dQ (rows < L_q, dims < D) ----------------------------------------------------
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int64_t i = row0 + 8 * r;
    if (i >= p.L_q) continue;
    store_frag_row<T>(p.dq + b * p.dq_batch_stride + h * p.dq_head_stride + i * p.dq_row_stride,
                      acc, r, p.scale, p.D, t, p.dq_pair);
  }
}

// ---- launches -----------------------------------------------------------------------------------
template <typename T, int kD, int kMode>
void launch_dkdv(const KernelParams& kp, cudaStream_t stream, const char* fn) {
  using Shape = DkDvShape<kD>;
  auto kernel = sdpa_bwd_dkdv_kernel<T, kD, kMode>;
  set_shared_memory(kernel, Shape::kSmemBytes, fn);
  const dim3 grid(unsigned((kp.L_k + Shape::kBc - 1) / Shape::kBc), unsigned(kp.H_kv),
                  unsigned(kp.B));
  kernel<<<grid, kBwdThreads, Shape::kSmemBytes, stream>>>(kp);
  check_launch(fn, "the launch of the dK/dV kernel");
}

template <typename T, int kD>
void launch_dq(const KernelParams& kp, cudaStream_t stream, const char* fn) {
  using Shape = DqShape<kD>;
  auto kernel = sdpa_bwd_dq_kernel<T, kD>;
  set_shared_memory(kernel, Shape::kSmemBytes, fn);
  const dim3 grid = query_block_grid(kp, Shape::kBr);
  kernel<<<grid, kBwdThreads, Shape::kSmemBytes, stream>>>(kp);
  check_launch(fn, "the launch of the dQ kernel");
}

template <typename T, int kD>
void backward_kernels(const KernelParams& kp, cudaStream_t stream, const char* fn) {
  const bool rows = int64_t(kp.B) * kp.H * kp.L_q > 0;
  const bool keys = int64_t(kp.B) * kp.H_kv * kp.L_k > 0;
  if (rows) {
    const int64_t n = int64_t(kp.B) * kp.H * kp.L_q;
    const unsigned blocks = unsigned((n + kDotRowsPerBlock - 1) / kDotRowsPerBlock);
    sdpa_bwd_dot_kernel<T><<<blocks, 32 * kDotRowsPerBlock, 0, stream>>>(kp);
    check_launch(fn, "the launch of the D_i kernel");
  }
  if (keys) {
    if constexpr (kD <= 128) {
      launch_dkdv<T, kD, kBoth>(kp, stream, fn);
    } else {
      launch_dkdv<T, kD, kOnlyDv>(kp, stream, fn);
      launch_dkdv<T, kD, kOnlyDk>(kp, stream, fn);
    }
  }
  if (rows) launch_dq<T, kD>(kp, stream, fn);
}

}  // namespace
}  // namespace cuda_detail

std::size_t sdpa_cuda_backward_workspace_bytes(const CudaSdpaParams& fwd) {
  const std::size_t rows = std::size_t(std::max<int64_t>(fwd.B, 0)) *
                           std::size_t(std::max<int64_t>(fwd.H, 0)) *
                           std::size_t(std::max<int64_t>(fwd.L_q, 0));
  return (rows * sizeof(float) + 15) / 16 * 16;
}

void sdpa_cuda_backward(const CudaSdpaBackwardParams& bp) {
  using namespace cuda_detail;
  const char* fn = "sdpa_cuda_backward";
  const CudaSdpaParams& s = bp.fwd;
  validate(s, fn);
  if (!bp.dout || !bp.dq || !bp.dk || !bp.dv || !s.lse)
    throw DeviceError(prefix(fn) + "dout, dq, dk, dv and fwd.lse must be set");
  if (!aligned(bp.dout, 2) || !aligned(bp.dq, 2) || !aligned(bp.dk, 2) || !aligned(bp.dv, 2))
    throw DeviceError(prefix(fn) + "dout, dq, dk and dv must be aligned to their 2-byte elements");
  if (bp.workspace && !aligned(bp.workspace, 16))
    throw DeviceError(prefix(fn) + "the workspace must be 16-byte aligned");

  KernelParams kp = make_params(s);
  static_cast<SdpaGradStrides&>(kp) = bp;
  kp.dout = static_cast<const uint16_t*>(bp.dout);
  kp.dq = static_cast<uint16_t*>(bp.dq);
  kp.dk = static_cast<uint16_t*>(bp.dk);
  kp.dv = static_cast<uint16_t*>(bp.dv);
  kp.dout_vec = vec_ok(bp.dout, bp.dout_batch_stride, bp.dout_head_stride, bp.dout_row_stride);
  kp.dq_pair = pair_ok(bp.dq, bp.dq_batch_stride, bp.dq_head_stride, bp.dq_row_stride);
  kp.dk_pair = pair_ok(bp.dk, bp.dk_batch_stride, bp.dk_head_stride, bp.dk_row_stride);
  kp.dv_pair = pair_ok(bp.dv, bp.dv_batch_stride, bp.dv_head_stride, bp.dv_row_stride);

  if (s.B == 0 || (s.L_q == 0 && s.L_k == 0)) return;
  const auto stream = static_cast<cudaStream_t>(s.stream);
  const std::size_t ws_bytes = sdpa_cuda_backward_workspace_bytes(s);
  float* owned = nullptr;
  kp.Di = bp.workspace;
  if (!kp.Di && ws_bytes > 0) {
    void* ptr = nullptr;
    check_cuda(cudaMallocAsync(&ptr, ws_bytes, stream), fn, "cudaMallocAsync (workspace)");
    owned = kp.Di = static_cast<float*>(ptr);
  }
  try {
    dispatch_kernels(s, [&]<typename T, int kD>() { backward_kernels<T, kD>(kp, stream, fn); });
  } catch (...) {
    if (owned) cudaFreeAsync(owned, stream);
    throw;
  }
  if (owned) check_cuda(cudaFreeAsync(owned, stream), fn, "cudaFreeAsync (workspace)");
}

}  // namespace attn::kernels

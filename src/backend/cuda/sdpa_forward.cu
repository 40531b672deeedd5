// FlashAttention-2 forward on tensor cores (Dao, "FlashAttention-2: Faster Attention with Better
// Parallelism and Work Partitioning", 2023, Algorithm 1 with its work partitioning). See
// sdpa_cuda.h for what is computed and sdpa_cuda_common.cuh for the fragment conventions.
//
// One thread block per (query block of kBr rows, head, batch); warp w owns query rows
// [16 w, 16 w + 16) of the block, so the softmax statistics of a row never leave its warp (FA2's
// "split Q" partitioning: no shared-memory reduction between warps). Per key tile of kBc keys:
//
//   S = Q K^T            mma.sync m16n8k16, A = Q (ldmatrix), B = K (ldmatrix, keys x dims)
//   x = S scale log2(e)  (softcap, ALiBi, + mask log2(e); -inf where hidden), per element only
//                        where needed; sinks start each row's m and l
//   m' = max(m, rowmax x), P = 2^(x - m'), l = l 2^(m - m') + rowsum P, O = O 2^(m - m')
//   P *= dropout keep (0 or 1; 1 / (1 - p) is applied with 1 / l at the end)
//   O += P V             A = P (the S accumulators repacked to 16-bit), B = V (ldmatrix.trans)
//
// and at the end out = O keep_scale / l, lse = (m + log2 l) ln 2 (zeros and -inf where l == 0).
// K and V tiles are double-buffered: the copy of tile n + 1 (cp.async) overlaps the math on
// tile n. Key tiles that the causal rule or the window hide from every row of the block are never
// visited.
#include "sdpa_cuda_common.cuh"

namespace attn::kernels {

namespace cuda_detail {
namespace {

// Tile sizes per padded head dim: warps (16 query rows each) and keys per tile. Registers per
// thread: O is kD / 2 floats, S is kBc / 2 floats.
// kD = 64, 128: 8 warps, 64 keys; kD = 256: 4 warps, 32 keys.
template <int kD>
struct FwdConfig {
  static constexpr int kWarps = kD <= 128 ? 8 : 4, kBc = kD <= 128 ? 64 : 32;
};

template <int kD>
struct FwdShape {
  static constexpr int kWarps = FwdConfig<kD>::kWarps;
  static constexpr int kThreads = 32 * kWarps;
  static constexpr int kBr = 16 * kWarps;
  static constexpr int kBc = FwdConfig<kD>::kBc;
  static constexpr int kLd = kD + 8;  // shared-memory row stride in elements
  // Q (kBr rows), K and V (two stages of kBc rows each).
  static constexpr int kSmemBytes = (kBr + 4 * kBc) * kLd * 2;
};

template <typename T, int kD>
__global__ void __launch_bounds__(FwdShape<kD>::kThreads, 1) sdpa_fwd_kernel(const KernelParams p) {
  using Shape = FwdShape<kD>;
  constexpr int kBr = Shape::kBr, kBc = Shape::kBc, kLd = Shape::kLd, kThreads = Shape::kThreads;
  constexpr int kNT = kBc / 8;  // score n-tiles per warp
  constexpr int kOT = kD / 8;   // output n-tiles per warp

  extern __shared__ __align__(16) unsigned char smem_raw[];
  uint16_t* sQ = reinterpret_cast<uint16_t*>(smem_raw);
  uint16_t* sK = sQ + kBr * kLd;
  uint16_t* sV = sK + 2 * kBc * kLd;

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, t = lane & 3;
  const int b = blockIdx.z, h = blockIdx.y, h_kv = h / p.group;
  const int64_t i0 = int64_t(blockIdx.x) * kBr;
  const int64_t i_end = min(i0 + kBr, int64_t(p.L_q));

  const uint16_t* q = p.q + b * p.q_batch_stride + h * p.q_head_stride + i0 * p.q_row_stride;
  // The key tiles some row of this block can see (KvTiles: step it is tile jb_begin + it).
  const KvTiles<kBc, kD, kThreads> kv(p, sK, sV, b, h_kv, i0, i_end, tid);
  const int jb_begin = kv.jb_begin, n_blocks = kv.n_blocks;
  const void* mask_bh = mask_bh_of(p, b, h);
  const uint8_t* pad_b = key_padding_of(p, b);
  load_tile<kBr, kD, kThreads>(sQ, q, p.q_row_stride, int(i_end - i0), p.D, p.q_vec, tid);
  pipeline_start(n_blocks, kv);

  float o[kOT][4];
  zero_frags(o);
  // Running max of each of this thread's rows (log2 units) and running sum over this thread's
  // columns only. A sink starts every row's softmax: m = sink, and 2^(sink - m) = 1 counted once
  // per row (by the quad's first thread).
  const float sink2 = p.sinks ? p.sinks[h] * kLog2e : -INFINITY;
  float m[2] = {sink2, sink2};
  const float l0 = p.sinks && t == 0 ? 1.0f : 0.0f;
  float l[2] = {l0, l0};
  const float slope = alibi_slope(p, b, h);
  const int n_ksteps = (p.D + 15) / 16;     // 16-wide steps over D holding data
  const int n_vsteps = (p.D_v + 15) / 16;   // 16-wide column pairs of the output holding data
  const int64_t row0 = i0 + warp * 16 + g;  // this thread's rows: row0 and row0 + 8
  const int64_t bh = int64_t(b) * p.H + h;

  for (int it = 0; it < n_blocks; ++it) {
    const int jb = jb_begin + it, stage = it & 1;
    pipeline_wait(it, n_blocks, kv);
    const uint16_t* tK = sK + stage * kBc * kLd;
    const uint16_t* tV = sV + stage * kBc * kLd;

    // ---- S = Q K^T ------------------------------------------------------------------------------
    float s[kNT][4];
    mma_abt<T, kD / 16>(s, sQ, warp * 16, tK, kLd, n_ksteps, lane);

    // ---- scale, masks --------------------------------------------------------------------------
    const int64_t j0 = int64_t(jb) * kBc;
    const bool elementwise = tile_needs_elementwise(p, i0, i_end, j0, j0 + kBc);
    scale_and_mask<T, kNT, false>(p, s, row0, j0 + 2 * t, elementwise, mask_bh, pad_b, slope);

    // ---- online softmax (rows row0 + 8 r) -------------------------------------------------------
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) mx = fmaxf(mx, fmaxf(s[nt][2 * r], s[nt][2 * r + 1]));
      mx = quad_max(mx);
      const float m_new = fmaxf(m[r], mx);
      // A row that has seen only hidden keys so far keeps m = -inf: subtract 0 instead, so that
      // 2^(-inf - m) stays 0 rather than NaN.
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;
      const float alpha = exp2f(m[r] - m_use);
      m[r] = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < kNT; ++nt) {
        const float p0 = exp2f(s[nt][2 * r] - m_use), p1 = exp2f(s[nt][2 * r + 1] - m_use);
        s[nt][2 * r] = p0;
        s[nt][2 * r + 1] = p1;
        sum += p0 + p1;
      }
      l[r] = l[r] * alpha + sum;
#pragma unroll
      for (int ot = 0; ot < kOT; ++ot) {
        o[ot][2 * r] *= alpha;
        o[ot][2 * r + 1] *= alpha;
      }
    }

    // ---- dropout: the softmax sum l is taken before it (as the reference's lse) ----------------
    if (p.dropout_enabled) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const DropoutRow d = dropout_row<false>(p, bh, row0 + 8 * r, j0 + 2 * t);
#pragma unroll
        for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
          for (int c01 = 0; c01 < 2; ++c01)
            if (!dropout_keep_dev(p, d, nt * 8 + c01)) s[nt][2 * r + c01] = 0.0f;
      }
    }

    // ---- O += P V -----------------------------------------------------------------------------
    mma_pb<T>(o, s, tV, kLd, n_vsteps, lane);
    __syncthreads();  // every warp is done with this stage before the next copy overwrites it
  }
  cp_async_wait<0>();  // nothing in flight at exit (when the loop never ran)

  // ---- out = O keep_scale / l, lse = (m + log2 l) ln 2 ------------------------------------------
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float l_row = quad_sum(l[r]);
    const int64_t i = row0 + 8 * r;
    const bool empty = !(l_row > 0.0f);  // every key hidden (or L_k == 0)
    const float inv = empty ? 0.0f : p.dropout_keep_scale / l_row;
    if (i < p.L_q) {
      uint16_t* orow =
          p.out + b * p.out_batch_stride + h * p.out_head_stride + i * p.out_row_stride;
      store_frag_row<T>(orow, o, r, inv, p.D_v, t, p.out_pair);
      if (p.lse != nullptr && t == 0)
        p.lse[bh * p.L_q + i] = empty ? -INFINITY : (m[r] + log2f(l_row)) * kLn2;
    }
  }
}

template <typename T, int kD>
void launch_forward(const KernelParams& kp, cudaStream_t stream, const char* fn) {
  using Shape = FwdShape<kD>;
  auto kernel = sdpa_fwd_kernel<T, kD>;
  set_shared_memory(kernel, Shape::kSmemBytes, fn);
  const dim3 grid = query_block_grid(kp, Shape::kBr);
  kernel<<<grid, Shape::kThreads, Shape::kSmemBytes, stream>>>(kp);
  check_launch(fn, "the launch of the forward kernel");
}

}  // namespace
}  // namespace cuda_detail

const char* elem_type_name(ElemType t) {
  switch (t) {
    case ElemType::Float16: return "float16";
    case ElemType::BFloat16: return "bfloat16";
  }
  return "unknown";
}

bool sdpa_cuda_supported(const CudaSdpaParams& s, std::string* why) {
  auto fail = [why](const std::string& reason) {
    if (why) *why = reason;
    return false;
  };
  if (s.dtype != ElemType::Float16 && s.dtype != ElemType::BFloat16)
    return fail("unsupported element type (float16 and bfloat16 are supported)");
  if (!s.q || !s.k || !s.v || !s.out) return fail("q, k, v and out must be set");
  if (s.B < 0 || s.H < 1 || s.H_kv < 1 || s.H % s.H_kv != 0)
    return fail("bad head counts: H = " + std::to_string(s.H) +
                ", H_kv = " + std::to_string(s.H_kv) + ", B = " + std::to_string(s.B) +
                " (H must be a multiple of H_kv)");
  if (s.B > 65535 || s.H > 65535)
    return fail("B and H must be at most 65535 (got B = " + std::to_string(s.B) +
                ", H = " + std::to_string(s.H) + ")");
  if (s.L_q < 0 || s.L_k < 0 || s.L_q > 0x7fffffff || s.L_k > 0x7fffffff)
    return fail("sequence lengths must be in [0, 2^31)");
  if (s.D < 1 || s.D > 256 || s.D_v < 1 || s.D_v > 256)
    return fail("head dims D = " + std::to_string(s.D) + ", D_v = " + std::to_string(s.D_v) +
                " are not supported: the CUDA kernels take 1 to 256");
  if (!(s.dropout_p >= 0.0 && s.dropout_p < 1.0))
    return fail("dropout_p must be in [0, 1), got " + std::to_string(s.dropout_p));
  if (s.mask_kind != MaskKind::None && !s.mask) return fail("mask_kind is set but mask is null");
  using cuda_detail::aligned;
  if (!aligned(s.q, 2) || !aligned(s.k, 2) || !aligned(s.v, 2) || !aligned(s.out, 2))
    return fail("q, k, v and out must be aligned to their 2-byte elements");
  if (s.mask_kind == MaskKind::Float && !aligned(s.mask, 2))
    return fail("an additive mask must be aligned to its 2-byte elements");
  if (s.lse && !aligned(s.lse, 4)) return fail("lse must be 4-byte aligned");
  return true;
}

void sdpa_cuda_forward(const CudaSdpaParams& s) {
  using namespace cuda_detail;
  const char* fn = "sdpa_cuda_forward";
  validate(s, fn);
  if (s.B == 0 || s.L_q == 0) return;
  const KernelParams kp = make_params(s);
  const auto stream = static_cast<cudaStream_t>(s.stream);
  dispatch_kernels(s, [&]<typename T, int kD>() { launch_forward<T, kD>(kp, stream, fn); });
}

}  // namespace attn::kernels

// FlashAttention-2 backward on the CPU. See sdpa_fused_backward.h for the algorithm and
// sdpa_reference.h for the meaning of every parameter.
#include "sdpa_fused_backward.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <optional>
#include <vector>

#include "dot.h"
#include "flex_eval.h"
#include "sdpa_fused.h"
#include "sdpa_fused_backward_tiles.h"
#include "sdpa_score_mods.h"
#include "simd.h"
#include "threads.h"
#include "workspace.h"

// GCC 12 reports the AVX-512 intrinsics' internal _mm512_undefined_ps() as possibly uninitialised
// once they are inlined into target("avx512f") functions: a false positive (GCC bug 105593).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace attn::kernels {

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
int64_t round_up8(int64_t n) { return (n + 7) / 8 * 8; }

using namespace bwd;

struct IsaKernels {
  GemmFn gemm;
  TileFn tile;
  PackFn pack;
  DropoutFn dropout;
};

// ---- the primitives, once per instruction set (sdpa_fused_backward_kernel.inc) ------------------

namespace bwd_scalar {
using V = simd::Scalar;
constexpr int GEMM_NV = 2;
#define KTARGET
#include "sdpa_fused_backward_kernel.inc"
#undef KTARGET
}  // namespace bwd_scalar

#if ATTN_SIMD_X86
namespace bwd_avx2 {
using V = simd::Avx2;
constexpr int GEMM_NV = 2;  // 6 x 16 tiles: 12 accumulators of 16 registers
#define KTARGET ATTN_TARGET_AVX2
#include "sdpa_fused_backward_kernel.inc"
#undef KTARGET
}  // namespace bwd_avx2

namespace bwd_avx512 {
using V = simd::Avx512;
constexpr int GEMM_NV = 4;  // 6 x 64 tiles: 24 accumulators of 32 registers
#define KTARGET ATTN_TARGET_AVX512
#include "sdpa_fused_backward_kernel.inc"
#undef KTARGET
}  // namespace bwd_avx512
#endif

#if ATTN_SIMD_NEON
namespace bwd_neon {
using V = simd::Neon;
constexpr int GEMM_NV = 4;  // 6 x 16 tiles: 24 accumulators of 32 registers
#define KTARGET
#include "sdpa_fused_backward_kernel.inc"
#undef KTARGET
}  // namespace bwd_neon
#endif

#if ATTN_SIMD_SVE
namespace bwd_sve {
using V = simd::Sve;
constexpr int GEMM_NV = 4;  // 6 x 4W tiles: 24 accumulators of 32 registers
#define KTARGET ATTN_TARGET_SVE
#include "sdpa_fused_backward_kernel.inc"
#undef KTARGET
}  // namespace bwd_sve
#endif

// The primitives of an instruction set this CPU runs (Auto: the forward kernel's current choice).
IsaKernels pick_isa(Isa want) {
  if (want == Isa::Auto || !isa_supported(want)) want = active_isa();
  switch (want) {
#if ATTN_SIMD_X86
    case Isa::Avx512:
      return {bwd_avx512::gemm, bwd_avx512::tile, bwd_avx512::pack, bwd_avx512::dropout};
    case Isa::Avx2: return {bwd_avx2::gemm, bwd_avx2::tile, bwd_avx2::pack, bwd_avx2::dropout};
#endif
#if ATTN_SIMD_NEON
    case Isa::Neon: return {bwd_neon::gemm, bwd_neon::tile, bwd_neon::pack, bwd_neon::dropout};
#endif
#if ATTN_SIMD_SVE
    case Isa::Sve: return {bwd_sve::gemm, bwd_sve::tile, bwd_sve::pack, bwd_sve::dropout};
#endif
    default: return {bwd_scalar::gemm, bwd_scalar::tile, bwd_scalar::pack, bwd_scalar::dropout};
  }
}

// ---- the driver (instruction-set independent) ---------------------------------------------------

// Per-thread tiles.
struct Scratch {
  std::vector<float> Kt;    // (D, kBc)     k of the key block, transposed
  std::vector<float> Vt;    // (D_v, kBc)   v of the key block, transposed
  std::vector<float> Kn;    // (kBc, D_p)   k of the key block, rows padded (when D % 8 != 0)
  std::vector<float> dK;    // (kBc, D_p)   dk of the key block, accumulated over query tiles
  std::vector<float> dV;    // (kBc, D_vp)
  std::vector<float> S;     // (kBr, kBc)   scores, then P o Z
  std::vector<float> dP;    // (kBr, kBc)   dO . v, then dS
  std::vector<float> bias;  // (kBr, kBc)   additive masks of a partial tile
  std::vector<float> z;     // (kBr, kBc)   dropout factors
  std::vector<float> ds;    // (kBr, kBc)   the biases' gradient (ALiBi's, the table's)
  std::vector<float> Qp;    // (kBr, D_p)   q rows padded (when D % 8 != 0)
  std::vector<float> dOp;   // (kBr, D_vp)  dout rows padded (when D_v % 8 != 0)
  std::vector<float> kpad;  // (kBc)        key padding as 0 / -inf
  std::vector<int32_t> col_lo, col_hi;  // (kBr) visible columns of each row of a partial tile
  std::vector<int32_t> row_lo, row_hi;  // (kBc) rows that see each key of a partial tile
  // flex_attention: the scores score_mod was given (kBr, kBc), the evaluators, the tile's
  // coordinates.
  std::vector<float> fx_s;
  std::optional<flex::Evaluator> fx_score, fx_mask;
  std::vector<int32_t> fx_h, fx_q, fx_kv;
};

// Visibility from causal masking and the sliding window (SdpaBand, sdpa_params.h), as offsets
// t = j - i - off of key j from query i (off = SdpaBand::diagonal_offset): visible iff
// lo <= t <= hi.
struct Band {
  int64_t off, lo, hi;
};

Band make_band(const SdpaParams& p) {
  const SdpaBand sb = sdpa_band(p);
  const int64_t big = p.L_q + p.L_k + 1;  // beyond any |j - i - off|
  Band band{sb.diagonal_offset, -big, big};
  if (sb.window_right >= 0) band.hi = std::min(band.hi, sb.window_right);
  if (sb.window_left >= 0) band.lo = std::max(band.lo, -sb.window_left);
  return band;
}

struct Driver {
  const SdpaBackwardParams& bp;
  const SdpaParams& p;
  IsaKernels isa;
  int64_t G, Dp, Dvp, nkb, C;
  bool direct;  // chunk 0 accumulates dQ straight into dq
  Band band;
  std::vector<float> lse;    // (B, H, L_q)  saved lse, +inf for fully masked rows
  std::vector<float> Di;     // (B, H, L_q)  rowsum(dout o out)
  std::vector<float> dqbuf;  // (C or C - 1, B, H, L_q, D_p)
  // Score modifiers: the bias table's rows; whether a bias tile is always formed; and per work
  // unit, the sums of its query heads' ALiBi and table gradients (empty when neither is wanted;
  // the sinks' come from the per-row statistics).
  RelBiasRows rel;
  bool score_bias = false;
  std::vector<ModGradSums> unit_mod_grads;
  // flex_attention: per work unit, the sums of the captured tensors' gradients (empty when no
  // captured tensor wants one).
  std::vector<flex::TensorGradSums> unit_flex_grads;

  Driver(const SdpaBackwardParams& bp_, IsaKernels isa_) : bp(bp_), p(bp_.fwd), isa(isa_) {}

  // dQ accumulator of chunk c for (b, h): pointer to row 0 and row stride.
  std::pair<float*, int64_t> dq_chunk(int64_t c, int64_t b, int64_t h) {
    if (direct && c == 0)
      return {bp.dq + b * bp.dq_batch_stride + h * bp.dq_head_stride, bp.dq_row_stride};
    const int64_t slot = direct ? c - 1 : c;
    return {dqbuf.data() + ((slot * p.B + b) * p.H + h) * p.L_q * Dp, Dp};
  }

  void run(bool parallel);
  void unit(int64_t b, int64_t h_kv, int64_t chunk, Scratch& sc, ModGradSums* mod_grads,
            flex::TensorGradSums* flex_grads);
  void key_block(int64_t b, int64_t h_kv, int64_t chunk, int64_t kb, Scratch& sc,
                 ModGradSums* mod_grads, flex::TensorGradSums* flex_grads);
  void add_mod_grads();

  // Adds a tile's bias gradients ds (nr x nc, row stride kBc; rows i0.., keys j0..) to the unit's
  // sums for query head g of the group: ALiBi's slope gets -sum ds |i + off - j|, the table's
  // column of each offset the sum of its ds.
  void add_bias_grads(int64_t i0, int64_t nr, int64_t j0, int64_t nc, int64_t g, const float* ds,
                      ModGradSums& out) const {
    // Both biases depend on the offset t = j - i - off alone: the tile's ds is first summed along
    // its diagonals, diag[x] for t = t_min + x (row r, key jj at x = kBr - 1 - r + jj: one
    // vectorisable add per row, rows in order), then each diagonal's sum goes to its parameter.
    const int64_t t_min = j0 - (i0 + kBr - 1) - band.off;
    float diag[kBr + kBc - 1] = {};
    for (int64_t r = 0; r < nr; ++r) {
      const float* d = ds + r * kBc;
      float* row = diag + (kBr - 1 - r);
      for (int jj = 0; jj < int(nc); ++jj) row[jj] += d[jj];
    }
    const int64_t n_diag = kBr + kBc - 1;
    if (!out.dalibi.empty()) {  // d slope = -sum ds |t|
      double sum = 0.0;
      for (int64_t x = 0; x < n_diag; ++x) sum += double(diag[x]) * double(std::abs(t_min + x));
      out.dalibi[size_t(g)] -= sum;
    }
    if (!out.drel.empty()) {  // each offset's column, clipped to [-R, R]
      const int64_t R = p.rel_bias_max_distance;
      double* drel = out.rel_row(g);
      for (int64_t x = 0; x < n_diag; ++x) drel[rel_bias_column(t_min + x, R)] += double(diag[x]);
    }
  }

  // The ALiBi biases -slope |t| of a tile's offsets t = t_min + x, x < kBr + kBc - 1 (t_min as in
  // add_bias_grads): row r of the tile adds alibi[kBr - 1 - r + jj] to key jj.
  void alibi_row(int64_t i0, int64_t j0, int64_t b, int64_t h, float* alibi) const {
    const int64_t t_min = j0 - (i0 + kBr - 1) - band.off;
    const float neg_slope = -p.alibi_slopes[b * p.alibi_batch_stride + h];
    for (int64_t x = 0; x < kBr + kBc - 1; ++x)
      alibi[x] = neg_slope * float(std::abs(t_min + x));  // exact below 2^24
  }
};

void Driver::run(bool parallel) {
  const int64_t B = p.B, H = p.H, L_q = p.L_q, rows = B * H * L_q;
  G = H / p.H_kv;
  Dp = round_up8(p.D), Dvp = round_up8(p.D_v);
  nkb = (p.L_k + kBc - 1) / kBc;
  band = make_band(p);

  // ---- how many dQ chunks: enough work units to keep threads busy, at most 32 MiB extra -------
  // C is a power of two (thread counts usually are, so the units divide evenly among them) and
  // depends on the sizes only, never on the number of threads.
  direct = p.D % 8 == 0;
  const int64_t units_bh = std::max<int64_t>(B * p.H_kv, 1);
  const int64_t chunk_bytes = std::max<int64_t>(rows * Dp * int64_t(sizeof(float)), 1);
  const int64_t budget = (int64_t(32) << 20) / chunk_bytes + (direct ? 1 : 0);
  C = 1;
  while (units_bh * C < 16 && 2 * C <= nkb && 2 * C <= budget) C *= 2;
  const int64_t n_buf = direct ? C - 1 : C;

  lse.resize(size_t(rows));
  Di.resize(size_t(rows));
  dqbuf.assign(size_t(n_buf * rows * Dp), 0.0f);
  rel = RelBiasRows(p, kBc);
  score_bias = p.alibi_slopes || p.rel_bias;
  SdpaModGrads by_units = bp;  // ALiBi's and the table's; the sinks' come from the row statistics
  by_units.dsinks = nullptr;
  if (const ModGradSums sums(p, by_units, G); !sums.empty()) {
    unit_mod_grads.assign(size_t(B * p.H_kv * C), sums);
  }
  const flex::FlexCall* fx = p.flex;
  if (fx && fx->score && fx->score->wants_tensor_grads()) {
    unit_flex_grads.assign(size_t(B * p.H_kv * C), flex::TensorGradSums(*fx->score));
  }

  // ---- per-row statistics; zero dq when it is accumulated in place -----------------------------
  // (collapse: each thread's first row is divided out into (b, h, i) once, not every row)
#pragma omp parallel for collapse(3) schedule(static) if (parallel) num_threads(num_threads())
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L_q; ++i) {
        const int64_t r = (b * H + h) * L_q + i;
        const float l = p.lse[r];
        lse[r] = l == -kInf ? kInf : l;  // exp(s - inf) == 0: a fully masked row has no gradient
        const float* o =
            p.out + b * p.out_batch_stride + h * p.out_head_stride + i * p.out_row_stride;
        const float* g =
            bp.dout + b * bp.dout_batch_stride + h * bp.dout_head_stride + i * bp.dout_row_stride;
        Di[r] = float(dot_double(o, g, p.D_v));  // eight independent sums, not one chain
        if (direct) {
          float* dq = bp.dq + b * bp.dq_batch_stride + h * bp.dq_head_stride + i * bp.dq_row_stride;
          std::fill(dq, dq + p.D, 0.0f);
        }
      }

  // ---- the work units (b, h_kv, chunk) ---------------------------------------------------------
  const int64_t units = B * p.H_kv * C;
  const double scratch_floats = double(p.D + p.D_v) * kBc + (p.D % 8 ? double(kBc) * Dp : 0.0) +
                                double(kBc) * (Dp + Dvp) + 4.0 * kBr * kBc +
                                (p.D % 8 ? double(kBr) * Dp : 0.0) +
                                (p.D_v % 8 ? double(kBr) * Dvp : 0.0) + 3.0 * kBc + 2.0 * kBr;
  ThreadScratch scratch(scratch_floats * sizeof(float),
                        "the fused attention backward's per-thread scratch");
#pragma omp parallel if (parallel) num_threads(num_threads())
  {
    Scratch sc;
    scratch.allocate([&] {
      sc.Kt.assign(size_t(p.D * kBc), 0.0f);
      sc.Vt.assign(size_t(p.D_v * kBc), 0.0f);
      if (p.D % 8) sc.Kn.assign(size_t(kBc * Dp), 0.0f);
      sc.dK.resize(size_t(kBc * Dp));
      sc.dV.resize(size_t(kBc * Dvp));
      sc.S.resize(size_t(kBr * kBc));
      sc.dP.resize(size_t(kBr * kBc));
      sc.bias.resize(size_t(kBr * kBc));
      sc.z.resize(size_t(kBr * kBc));
      if (!unit_mod_grads.empty()) sc.ds.resize(size_t(kBr * kBc));
      if (p.D % 8) sc.Qp.assign(size_t(kBr * Dp), 0.0f);
      if (p.D_v % 8) sc.dOp.assign(size_t(kBr * Dvp), 0.0f);
      sc.kpad.resize(size_t(kBc));
      sc.col_lo.resize(size_t(kBr));
      sc.col_hi.resize(size_t(kBr));
      sc.row_lo.resize(size_t(kBc));
      sc.row_hi.resize(size_t(kBc));
      if (fx) {
        sc.fx_s.resize(size_t(kBr * kBc));
        sc.fx_h.resize(size_t(kBr));
        sc.fx_q.resize(size_t(kBr));
        sc.fx_kv.resize(size_t(kBc));
        if (fx->score) sc.fx_score.emplace(*fx->score, int(kBr * kBc));
        if (fx->mask) sc.fx_mask.emplace(*fx->mask, int(kBr * kBc));
      }
    });
#pragma omp for schedule(dynamic, 1)
    for (int64_t u = 0; u < units; ++u) {
      if (scratch.failed()) continue;  // reported after the region
      const int64_t chunk = u % C, bh = u / C;
      unit(bh / p.H_kv, bh % p.H_kv, chunk, sc,
           unit_mod_grads.empty() ? nullptr : &unit_mod_grads[size_t(u)],
           unit_flex_grads.empty() ? nullptr : &unit_flex_grads[size_t(u)]);
    }
    if (fx) flex::report_errors(fx->errors, sc.fx_score, sc.fx_mask);
  }
  scratch.check();
  add_mod_grads();
  // The captured tensors' gradients, unit after unit.
  for (const flex::TensorGradSums& sums : unit_flex_grads)
    for (size_t t = 0; t < sums.sums.size(); ++t) {
      float* out = t < fx->tensor_grads.size() ? fx->tensor_grads[t] : nullptr;
      if (!out) continue;
      const std::vector<double>& sum = sums.sums[t];
      for (size_t x = 0; x < sum.size(); ++x) out[x] += float(sum[x]);
    }

  // ---- dq = sum of the chunks, in chunk order --------------------------------------------------
  if (n_buf == 0) return;
#pragma omp parallel for collapse(3) schedule(static) if (parallel) num_threads(num_threads())
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < L_q; ++i) {
        float* dq = bp.dq + b * bp.dq_batch_stride + h * bp.dq_head_stride + i * bp.dq_row_stride;
        for (int64_t c = 0; c < C; ++c) {
          auto [buf, ld] = dq_chunk(c, b, h);
          const float* src = buf + i * ld;
          if (c == 0 && !direct)
            std::copy(src, src + p.D, dq);
          else if (c > 0)
            for (int64_t d = 0; d < p.D; ++d) dq[d] += src[d];
        }
      }
}

void Driver::unit(int64_t b, int64_t h_kv, int64_t chunk, Scratch& sc, ModGradSums* mod_grads,
                  flex::TensorGradSums* flex_grads) {
  for (int64_t kb = chunk; kb < nkb; kb += C)
    key_block(b, h_kv, chunk, kb, sc, mod_grads, flex_grads);
}

// The parameter gradients of the score modifiers, in a fixed order: the sinks' from the per-row
// statistics (d loss / d sink = -sum_i exp(sink - lse_i) D_i), ALiBi's and the table's from the
// work units' sums, unit after unit.
void Driver::add_mod_grads() {
  if (p.sinks && bp.dsinks)
    for (int64_t h = 0; h < p.H; ++h) {
      double sum = 0.0;
      for (int64_t b = 0; b < p.B; ++b)
        for (int64_t i = 0; i < p.L_q; ++i) {
          const int64_t r = (b * p.H + h) * p.L_q + i;
          if (lse[r] != kInf) sum += std::exp(double(p.sinks[h]) - double(lse[r])) * Di[r];
        }
      bp.dsinks[h] -= float(sum);
    }
  for (int64_t u = 0; u < int64_t(unit_mod_grads.size()); ++u) {
    const int64_t bh = u / C;
    unit_mod_grads[size_t(u)].add_to(p, bp, bh / p.H_kv, bh % p.H_kv);
  }
}

void Driver::key_block(int64_t b, int64_t h_kv, int64_t chunk, int64_t kb, Scratch& sc,
                       ModGradSums* mod_grads, flex::TensorGradSums* flex_grads) {
  const int64_t D = p.D, D_v = p.D_v, L_q = p.L_q;
  const int64_t j0 = kb * kBc, nc = std::min(kBc, p.L_k - j0);
  const float* k = p.k + b * p.k_batch_stride + h_kv * p.k_head_stride + j0 * p.k_row_stride;
  const float* v = p.v + b * p.v_batch_stride + h_kv * p.v_head_stride + j0 * p.v_row_stride;

  // ---- the key block: transposed copies of k and v (zero columns past nc), k rows for dQ -------
  isa.pack(k, p.k_row_stride, nc, D, sc.Kt.data());
  isa.pack(v, p.v_row_stride, nc, D_v, sc.Vt.data());
  const float* Kn = k;
  int64_t ld_Kn = p.k_row_stride;
  if (D % 8) {
    for (int64_t jj = 0; jj < nc; ++jj)
      std::copy(k + jj * p.k_row_stride, k + jj * p.k_row_stride + D, sc.Kn.data() + jj * Dp);
    Kn = sc.Kn.data(), ld_Kn = Dp;
  }
  std::fill(sc.dK.begin(), sc.dK.end(), 0.0f);
  std::fill(sc.dV.begin(), sc.dV.end(), 0.0f);

  // ---- key padding of this block as an additive row ---------------------------------------------
  bool kpad_any = false;
  if (p.key_padding) {
    const uint8_t* pad = p.key_padding + b * p.key_padding_batch_stride + j0;
    for (int64_t jj = 0; jj < kBc; ++jj) {
      const bool masked = jj >= nc || pad[jj];
      sc.kpad[jj] = masked ? -kInf : 0.0f;
      kpad_any |= jj < nc && pad[jj];
    }
  }

  // ---- query rows that see at least one key of the block: [i_begin, i_end) ----------------------
  const int64_t j1 = j0 + nc;
  const int64_t i_begin = std::max<int64_t>(0, j0 - band.off - band.hi);
  const int64_t i_end = std::min<int64_t>(L_q, j1 - 1 - band.off - band.lo + 1);
  const float scale = float(p.scale);

  for (int64_t g = 0; g < G && i_begin < i_end; ++g) {
    const int64_t h = h_kv * G + g;
    const float* q = p.q + b * p.q_batch_stride + h * p.q_head_stride;
    const float* dout = bp.dout + b * bp.dout_batch_stride + h * bp.dout_head_stride;
    const int64_t row0 = (b * p.H + h) * L_q;  // index of row 0 of (b, h) in (B, H, L_q)
    auto [dq, ld_dq] = dq_chunk(chunk, b, h);

    for (int64_t i0 = i_begin / kBr * kBr; i0 < i_end; i0 += kBr) {
      const int64_t nr = std::min(kBr, L_q - i0);
      const float* q_t = q + i0 * p.q_row_stride;            // (nr, D)
      const float* dout_t = dout + i0 * bp.dout_row_stride;  // (nr, D_v)
      // flex_attention's block mask: an empty tile adds nothing, a full one skips mask_mod.
      const flex::FlexCall* fx = p.flex;
      flex::TileKind fx_kind = flex::TileKind::Full;
      if (fx) {
        fx_kind = fx->classify(b, h, h, i0, i0 + nr - 1, j0, j1 - 1);
        if (fx_kind == flex::TileKind::Empty) continue;
      }

      // Causal masking and the window: a tile entirely inside the band needs nothing, a partial
      // one gets each row's visible columns and each key's rows, and its products skip what lies
      // wholly outside them (for the diagonal tiles of causal attention, nearly half the work).
      const bool inside =
          j1 - 1 - i0 - band.off <= band.hi && j0 - (i0 + nr - 1) - band.off >= band.lo;
      Cut by_col, by_row_k, by_key_k;  // C's columns, K's range per row, K's range per key
      if (!inside) {
        for (int64_t r = 0; r < nr; ++r) {
          const int64_t i = i0 + r;
          sc.col_lo[r] = int32_t(std::clamp<int64_t>(i + band.off + band.lo - j0, 0, kBc));
          sc.col_hi[r] = int32_t(std::clamp<int64_t>(i + band.off + band.hi - j0, -1, nc - 1));
        }
        for (int64_t jj = 0; jj < nc; ++jj) {
          const int64_t j = j0 + jj;
          sc.row_lo[jj] = int32_t(std::clamp<int64_t>(j - band.off - band.hi - i0, 0, nr));
          sc.row_hi[jj] = int32_t(std::clamp<int64_t>(j - band.off - band.lo - i0, -1, nr - 1));
        }
        by_col = {nullptr, nullptr, sc.col_lo.data(), sc.col_hi.data()};
        by_row_k = {sc.col_lo.data(), sc.col_hi.data(), nullptr, nullptr};
        by_key_k = {sc.row_lo.data(), sc.row_hi.data(), nullptr, nullptr};
      }

      // S = q k^T and dP = dout v^T for the tile.
      isa.gemm(nr, kBc, D, q_t, p.q_row_stride, 1, sc.Kt.data(), kBc, sc.S.data(), kBc, false,
               &by_col);
      isa.gemm(nr, kBc, D_v, dout_t, bp.dout_row_stride, 1, sc.Vt.data(), kBc, sc.dP.data(), kBc,
               false, &by_col);
      // Explicit masks and key padding as an additive bias (key padding alone: one shared row).
      const float* bias = nullptr;
      int64_t ld_bias = 0;
      const int64_t mbase =
          b * p.mask_batch_stride + h * p.mask_head_stride + j0 * p.mask_col_stride;
      if (p.mask_kind == MaskKind::Float && p.mask_col_stride == 1 && !p.key_padding && nc == kBc &&
          !score_bias) {
        // A whole tile of a row-major float mask is read where it lies.
        bias = static_cast<const float*>(p.mask) + mbase + i0 * p.mask_row_stride;
        ld_bias = p.mask_row_stride;
      } else if (p.mask_kind != MaskKind::None || score_bias) {
        float alibi[kBr + kBc - 1];
        if (p.alibi_slopes) alibi_row(i0, j0, b, h, alibi);
        for (int64_t r = 0; r < nr; ++r) {
          float* brow = sc.bias.data() + r * kBc;
          const int64_t m0 = mbase + (i0 + r) * p.mask_row_stride, cs = p.mask_col_stride;
          if (p.mask_kind == MaskKind::Bool) {
            const auto* m = static_cast<const uint8_t*>(p.mask) + m0;
            for (int64_t jj = 0; jj < nc; ++jj) brow[jj] = m[jj * cs] ? 0.0f : -kInf;
          } else if (p.mask_kind == MaskKind::Float) {
            const auto* m = static_cast<const float*>(p.mask) + m0;
            for (int64_t jj = 0; jj < nc; ++jj) brow[jj] = m[jj * cs];
          } else {
            std::fill(brow, brow + nc, 0.0f);
          }
          // ALiBi and the table: biases of the offset t = j - i - off.
          const int64_t i_off = i0 + r + band.off;  // i + off
          if (p.alibi_slopes) {
            const float* ar = alibi + (kBr - 1 - r);
            for (int jj = 0; jj < int(nc); ++jj) brow[jj] += ar[jj];
          }
          if (p.rel_bias) {
            const float* br = rel.at(h, j0 - i_off);
            for (int64_t jj = 0; jj < nc; ++jj) brow[jj] += br[jj];
          }
          if (p.key_padding)
            for (int64_t jj = 0; jj < nc; ++jj) brow[jj] += sc.kpad[jj];
          std::fill(brow + nc, brow + kBc, -kInf);
        }
        bias = sc.bias.data(), ld_bias = kBc;
      } else if (kpad_any) {
        bias = sc.kpad.data();
      }

      // flex_attention: S = score_mod(scale q . k) (the input kept for the backward of score_mod),
      // mask_mod's -inf (and the keys past L_k) as the bias; the tile then runs with scale 1.
      flex::Grid fx_grid;
      if (fx) {
        for (int64_t r = 0; r < nr; ++r)
          sc.fx_h[size_t(r)] = int32_t(h), sc.fx_q[size_t(r)] = int32_t(i0 + r);
        for (int64_t jj = 0; jj < kBc; ++jj)
          sc.fx_kv[size_t(jj)] = int32_t(j0 + std::min(jj, nc - 1));
        fx_grid.n_outer = int(nr), fx_grid.ld = int(kBc), fx_grid.b = int32_t(b);
        fx_grid.h = sc.fx_h.data(), fx_grid.q = sc.fx_q.data(), fx_grid.kv = sc.fx_kv.data();
        fx_grid.h_outer = fx_grid.q_outer = true;
        const int64_t n = nr * kBc;
        for (int64_t e = 0; e < n; ++e) sc.S[size_t(e)] *= scale;
        if (sc.fx_score) {
          std::copy(sc.S.begin(), sc.S.begin() + n, sc.fx_s.begin());
          sc.fx_score->apply_score(fx_grid, sc.S.data());
        }
        float* brow = sc.bias.data();
        std::fill(brow, brow + n, 0.0f);
        if (sc.fx_mask && fx_kind == flex::TileKind::Partial) sc.fx_mask->apply_mask(fx_grid, brow);
        for (int64_t r = 0; r < nr; ++r)
          std::fill(brow + r * kBc + nc, brow + (r + 1) * kBc, -kInf);
        bias = brow, ld_bias = kBc;
      }

      // Dropout factors, regenerated from the seed (or read from the materialised factors).
      const float* z = nullptr;
      if (p.dropout_scale) {
        for (int64_t r = 0; r < nr; ++r) {
          float* zrow = sc.z.data() + r * kBc;
          const float* src = p.dropout_scale + (row0 + i0 + r) * p.L_k + j0;
          std::copy(src, src + nc, zrow);
          std::fill(zrow + nc, zrow + kBc, 0.0f);
        }
        z = sc.z.data();
      } else if (p.dropout_p > 0.0) {
        isa.dropout({sc.z.data(), nr, nc, uint64_t((row0 + i0) * p.L_k + j0), uint64_t(p.L_k),
                     p.dropout_seed, p.dropout_offset, dropout_threshold(p.dropout_p),
                     dropout_keep_scale(p.dropout_p)});
        z = sc.z.data();
      }

      float* ds_mod = mod_grads ? sc.ds.data() : nullptr;
      isa.tile({nr, sc.S.data(), sc.dP.data(), lse.data() + row0 + i0, Di.data() + row0 + i0,
                fx ? 1.0f : scale, bias, ld_bias, z, inside ? nullptr : sc.col_lo.data(),
                inside ? nullptr : sc.col_hi.data(), float(p.softcap), ds_mod});
      if (fx) {  // dP holds d loss / d score_mod's output: through score_mod, then the scale
        const int64_t n = nr * kBc;
        if (sc.fx_score) sc.fx_score->backward(fx_grid, sc.fx_s.data(), sc.dP.data(), flex_grads);
        for (int64_t e = 0; e < n; ++e) sc.dP[size_t(e)] *= scale;
      }
      if (ds_mod) add_bias_grads(i0, nr, j0, nc, g, ds_mod, *mod_grads);

      // B operands with padded rows when the head dims are not multiples of 8.
      const float* dO_b = dout_t;
      int64_t ld_dO = bp.dout_row_stride;
      if (D_v % 8) {
        for (int64_t r = 0; r < nr; ++r)
          std::copy(dout_t + r * bp.dout_row_stride, dout_t + r * bp.dout_row_stride + D_v,
                    sc.dOp.data() + r * Dvp);
        dO_b = sc.dOp.data(), ld_dO = Dvp;
      }
      const float* Q_b = q_t;
      int64_t ld_Q = p.q_row_stride;
      if (D % 8) {
        for (int64_t r = 0; r < nr; ++r)
          std::copy(q_t + r * p.q_row_stride, q_t + r * p.q_row_stride + D, sc.Qp.data() + r * Dp);
        Q_b = sc.Qp.data(), ld_Q = Dp;
      }

      // dV += (P o Z)^T dO,  dK += dS^T Q,  dQ += dS K  (scale is inside dS).
      isa.gemm(nc, Dvp, nr, sc.S.data(), 1, kBc, dO_b, ld_dO, sc.dV.data(), Dvp, true, &by_key_k);
      isa.gemm(nc, Dp, nr, sc.dP.data(), 1, kBc, Q_b, ld_Q, sc.dK.data(), Dp, true, &by_key_k);
      isa.gemm(nr, Dp, nc, sc.dP.data(), kBc, 1, Kn, ld_Kn, dq + i0 * ld_dq, ld_dq, true,
               &by_row_k);
    }
  }

  // ---- write the block's dk and dv
  // ----------------------------------------------------------------
  float* dk = bp.dk + b * bp.dk_batch_stride + h_kv * bp.dk_head_stride + j0 * bp.dk_row_stride;
  float* dv = bp.dv + b * bp.dv_batch_stride + h_kv * bp.dv_head_stride + j0 * bp.dv_row_stride;
  for (int64_t jj = 0; jj < nc; ++jj) {
    std::copy(sc.dK.data() + jj * Dp, sc.dK.data() + jj * Dp + D, dk + jj * bp.dk_row_stride);
    std::copy(sc.dV.data() + jj * Dvp, sc.dV.data() + jj * Dvp + D_v, dv + jj * bp.dv_row_stride);
  }
}

}  // namespace

void sdpa_fused_backward(const SdpaBackwardParams& params, Isa isa) {
  const SdpaParams& p = params.fwd;
  assert(p.B >= 0 && p.H >= 1 && p.H_kv >= 1 && p.H % p.H_kv == 0);
  assert(p.L_q >= 0 && p.L_k >= 0 && p.D >= 0 && p.D_v >= 0);
  assert(p.mask_kind == MaskKind::None || p.mask != nullptr);
  assert(p.out && p.lse && params.dout && params.dq && params.dk && params.dv);
  if (p.B == 0) return;
  // Threads pay off once there is real work; tiny problems stay serial.
  const bool parallel = p.B * p.H * (p.L_q + 1) * (p.L_k + 1) * (p.D + p.D_v + 1) > (1 << 18);
  Driver driver(params, pick_isa(isa));
  driver.run(parallel);
}

}  // namespace attn::kernels

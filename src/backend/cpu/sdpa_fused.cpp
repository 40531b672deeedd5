// The fused attention forward: run-time choice of instruction set, work partition, threads.
// The kernel itself is sdpa_fused_kernel.inc, compiled here once per instruction set.
#include "sdpa_fused.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <vector>

#include "flex_eval.h"
#include "sdpa_merge.h"
#include "sdpa_score_mods.h"
#include "simd.h"
#include "threads.h"
#include "workspace.h"

// GCC 12 warns about the deliberately undefined pass-through operand inside the AVX-512
// intrinsics (GCC bug 105593); it is not a bug in this file.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace attn::kernels {

namespace {

// Per-thread scratch for one block of query rows; sized for the largest tile shape.
struct Workspace {
  float* qt = nullptr;               // (D, BR)    the block's queries, transposed and scaled
  float* st = nullptr;               // (BC, BR)   S^T then P^T for one key tile
  float* ot = nullptr;               // (D_v, BR)  the running output, transposed
  int64_t* lane_h = nullptr;         // (BR)       query head of each lane
  int32_t* lane_i = nullptr;         // (BR)       query row of each lane
  int64_t* mask_off = nullptr;       // (BR)   offset of each lane's mask row
  uint64_t* drop_base = nullptr;     // (BR)   dropout generator state of each lane at key 0
  const RelBiasRows* rel = nullptr;  // the call's relative-bias rows (shared by the threads)
  // flex_attention: this thread's evaluators of score_mod and mask_mod (null: none), the lanes'
  // heads and a tile's key indices as int32.
  flex::Evaluator* flex_score = nullptr;
  flex::Evaluator* flex_mask = nullptr;
  alignas(64) int32_t flex_h[64];
  alignas(64) int32_t flex_kv[64];

  // Bytes of each buffer, each rounded up to whole cache lines.
  static std::array<size_t, 7> sizes(int64_t D, int64_t D_v, int BR, int BC, int W, int rows_max) {
    auto round_up = [](size_t bytes) { return (bytes + 63) / 64 * 64; };
    auto pad = [&](int64_t n) { return size_t((std::max<int64_t>(n, 1) + W - 1) / W * W); };
    return {round_up(sizeof(float) * std::max(pad(D) * BR, pad(D) * rows_max)),
            round_up(sizeof(float) * std::max(size_t(BC) * BR, pad(BC) * rows_max)),
            round_up(sizeof(float) * std::max(pad(D_v) * BR, pad(D_v) * rows_max)),
            round_up(sizeof(int64_t) * BR),
            round_up(sizeof(int32_t) * BR),
            round_up(sizeof(int64_t) * BR),
            round_up(sizeof(uint64_t) * std::max(BR, W * rows_max))};
  }
  static size_t total_bytes(int64_t D, int64_t D_v, int BR, int BC, int W, int rows_max) {
    size_t total = 0;
    for (size_t s : sizes(D, D_v, BR, BC, W, rows_max)) total += s;
    return total;
  }

  // Sized for the block kernel (BR lanes) and for the row kernel (rows_max rows of W lanes).
  // Throws std::bad_alloc when the memory cannot be had.
  Workspace(int64_t D, int64_t D_v, int BR, int BC, int W, int rows_max) {
    const std::array<size_t, 7> sizes = Workspace::sizes(D, D_v, BR, BC, W, rows_max);
    size_t total = 0;
    for (size_t s : sizes) total += s;
    buffer_.reset(static_cast<char*>(::operator new(total, std::align_val_t(64))));
    char* at = buffer_.get();
    auto take = [&](size_t s) {
      char* r = at;
      at += s;
      return r;
    };
    qt = reinterpret_cast<float*>(take(sizes[0]));
    st = reinterpret_cast<float*>(take(sizes[1]));
    ot = reinterpret_cast<float*>(take(sizes[2]));
    lane_h = reinterpret_cast<int64_t*>(take(sizes[3]));
    lane_i = reinterpret_cast<int32_t*>(take(sizes[4]));
    mask_off = reinterpret_cast<int64_t*>(take(sizes[5]));
    drop_base = reinterpret_cast<uint64_t*>(take(sizes[6]));
  }

 private:
  struct Free {
    void operator()(char* p) const { ::operator delete(p, std::align_val_t(64)); }
  };
  std::unique_ptr<char, Free> buffer_;
};

}  // namespace

// ---- the kernel, once per instruction set ------------------------------------------------------
// Tile shapes: NV vectors of W lanes make a block of BR = NV * W query rows; RQK keys and RPV value
// columns are the register blocks of the two micro-kernels (RQK x NV and RPV x NV accumulators:
// 24 of AVX-512's 32 registers, 8 and 12 of AVX2's 16); BC keys per tile.

namespace fused_scalar {
using V = simd::Scalar;
constexpr int NV = 2, RQK = 4, RPV = 4, BC = 64, ROWS_MAX = 2;
#define KTARGET
#include "sdpa_fused_kernel.inc"
#undef KTARGET
}  // namespace fused_scalar

#if ATTN_SIMD_X86
namespace fused_avx2 {
using V = simd::Avx2;
constexpr int NV = 4, RQK = 3, RPV = 3, BC = 64, ROWS_MAX = 4;
#define KTARGET ATTN_TARGET_AVX2
#include "sdpa_fused_kernel.inc"
#undef KTARGET
}  // namespace fused_avx2

namespace fused_avx512 {
using V = simd::Avx512;
constexpr int NV = 4, RQK = 6, RPV = 6, BC = 64, ROWS_MAX = 4;
#define KTARGET ATTN_TARGET_AVX512
#include "sdpa_fused_kernel.inc"
#undef KTARGET
}  // namespace fused_avx512
#endif  // ATTN_SIMD_X86

#if ATTN_SIMD_NEON
namespace fused_neon {
using V = simd::Neon;
constexpr int NV = 4, RQK = 6, RPV = 6, BC = 64, ROWS_MAX = 4;
#define KTARGET
#include "sdpa_fused_kernel.inc"
#undef KTARGET
}  // namespace fused_neon
#endif  // ATTN_SIMD_NEON

#if ATTN_SIMD_SVE
namespace fused_sve {
using V = simd::Sve;
constexpr int NV = 4, RQK = 6, RPV = 6, BC = 64, ROWS_MAX = 4;
#define KTARGET ATTN_TARGET_SVE
#include "sdpa_fused_kernel.inc"
#undef KTARGET
}  // namespace fused_sve
#endif  // ATTN_SIMD_SVE

namespace {

struct Impl {
  Isa isa;
  int BR, BC, W, rows_max;
  void (*block)(const SdpaParams&, int64_t b, int64_t h_kv, int rows, Workspace& ws);
  void (*exp2)(const float* x, float* y, int64_t n);
};

#define ATTN_IMPL(ns, isa) \
  Impl { isa, ns::BR, ns::BC, ns::W, ns::ROWS_MAX, ns::forward_block, ns::exp2_array }
const Impl kScalar = ATTN_IMPL(fused_scalar, Isa::Scalar);
#if ATTN_SIMD_X86
const Impl kAvx2 = ATTN_IMPL(fused_avx2, Isa::Avx2);
const Impl kAvx512 = ATTN_IMPL(fused_avx512, Isa::Avx512);
#endif
#if ATTN_SIMD_NEON
const Impl kNeon = ATTN_IMPL(fused_neon, Isa::Neon);
#endif
#if ATTN_SIMD_SVE
const Impl kSve = ATTN_IMPL(fused_sve, Isa::Sve);
#endif
#undef ATTN_IMPL

const Impl& impl_of(Isa isa) {
#if ATTN_SIMD_X86
  if (isa == Isa::Avx512) return kAvx512;
  if (isa == Isa::Avx2) return kAvx2;
#endif
#if ATTN_SIMD_NEON
  if (isa == Isa::Neon) return kNeon;
#endif
#if ATTN_SIMD_SVE
  if (isa == Isa::Sve) return kSve;
#endif
  return kScalar;
}

}  // namespace

void fused_exp2(const float* x, float* y, int64_t n) { impl_of(active_isa()).exp2(x, y, n); }

// Split-K's merge of the S partial results (out_s (S, B H, L_q, D_v), lse_s and max_s (S, B H,
// L_q), contiguous): ranges 1 .. S - 1 are folded into range 0's, in order, by ring attention's
// merge of partial rows, then range 0's buffers are written to p.out and p.lse; p.row_max gets the
// largest of the ranges' maxima (NaN if any is).
namespace {
void merge_splits(const SdpaParams& p, int64_t S, std::vector<float>& out_s,
                  std::vector<float>& lse_s, const std::vector<float>& max_s) {
  const int64_t BH = p.B * p.H, rows = BH * p.L_q;
  for (int64_t s = 1; s < S; ++s)
    merge_attention_rows(out_s.data(), lse_s.data(), out_s.data() + s * rows * p.D_v,
                         lse_s.data() + s * rows, BH, p.L_q, p.L_q, p.D_v, 0);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t i = r % p.L_q, bh = r / p.L_q, h = bh % p.H, b = bh / p.H;
    const float* src = out_s.data() + r * p.D_v;
    std::copy(src, src + p.D_v,
              p.out + b * p.out_batch_stride + h * p.out_head_stride + i * p.out_row_stride);
    if (p.lse) p.lse[r] = lse_s[size_t(r)];
    if (p.row_max) {
      float m = max_s[size_t(r)];
      for (int64_t s = 1; s < S; ++s) {
        const float x = max_s[size_t(s * rows + r)];
        m = std::isnan(x) || x > m ? x : m;
      }
      p.row_max[r] = m;
    }
  }
}
}  // namespace

void sdpa_fused_forward(const SdpaParams& p) {
  assert(p.B >= 0 && p.H >= 1 && p.H_kv >= 1 && p.H % p.H_kv == 0);
  assert(p.L_q >= 0 && p.L_k >= 0 && p.D >= 0 && p.D_v >= 0);
  assert(p.L_q < (int64_t(1) << 31));
  assert(p.mask_kind == MaskKind::None || p.mask != nullptr);
  assert(p.weights == nullptr && p.dropout_scale == nullptr);
  if (p.B * p.H * p.L_q == 0) return;
  const Impl& impl = impl_of(active_isa());
  const int BR = impl.BR;

  // Work partition of the G = H / H_kv query heads sharing each key/value head:
  //   L_q > BR / 2: each head's rows are cut into blocks of BR;
  //   otherwise:    each block holds all L_q rows of up to BR / L_q heads (decoding, GQA).
  const int64_t G = p.H / p.H_kv;
  int64_t heads_per_block = 1, blocks_per_head = (p.L_q + BR - 1) / BR;
  if (2 * p.L_q <= BR && G > 1) {
    heads_per_block = std::min<int64_t>(G, BR / p.L_q);
    blocks_per_head = 1;
  }
  const int64_t blocks_per_kv = (G + heads_per_block - 1) / heads_per_block * blocks_per_head;
  const int64_t blocks = p.B * p.H_kv * blocks_per_kv;

  // Split-K (flash-decoding): with few blocks (decoding with few heads), the keys are cut into
  // S ranges computed as separate work items, each giving a partial output and lse that are then
  // merged row by row in range order. S is a power of two that depends on the sizes only (never on
  // the number of threads, so the result does not either): enough items for 16 threads, each
  // range at least kMinSplitKeys keys.
  constexpr int64_t kMinSplitKeys = 512;
  int64_t S = 1;
  while (blocks * S < 16 && p.L_k / (2 * S) >= kMinSplitKeys) S *= 2;  // S <= 16
  // Range s covers keys [s L_k / S, (s + 1) L_k / S) into scratch, and carries the sinks only
  // when s == 0 (a sink joins the softmax once).
  std::vector<SdpaParams> parts(size_t(S), p);
  std::vector<float> out_s, lse_s, max_s;
  if (S > 1) {
    const int64_t rows = p.B * p.H * p.L_q;
    out_s.resize(size_t(S * rows * p.D_v));
    lse_s.resize(size_t(S * rows));
    if (p.row_max) max_s.resize(size_t(S * rows));
    for (int64_t s = 0; s < S; ++s) {
      SdpaParams& q = parts[size_t(s)];
      q.key_lo = s * p.L_k / S;
      q.key_hi = (s + 1) * p.L_k / S;
      if (s > 0) q.sinks = nullptr;
      q.out = out_s.data() + s * rows * p.D_v;
      q.out_batch_stride = p.H * p.L_q * p.D_v, q.out_head_stride = p.L_q * p.D_v;
      q.out_row_stride = p.D_v;
      q.lse = lse_s.data() + s * rows;
      if (p.row_max) q.row_max = max_s.data() + s * rows;
    }
  }
  const int64_t items = blocks * S;

  const double work = double(p.B * p.H * p.L_q) * double(p.L_k + 1) * double(p.D + p.D_v + 1);
  const bool parallel = items > 1 && work > double(1 << 18);
  ThreadScratch scratch(
      double(Workspace::total_bytes(p.D, p.D_v, BR, impl.BC, impl.W, impl.rows_max)),
      "the fused attention kernel's per-thread workspace");
  const RelBiasRows rel(p, impl.BC);
#pragma omp parallel if (parallel) num_threads(num_threads())
  {
    std::optional<Workspace> wso;
    std::optional<flex::Evaluator> flex_score, flex_mask;
    scratch.allocate([&] {
      wso.emplace(p.D, p.D_v, BR, impl.BC, impl.W, impl.rows_max);
      if (p.flex && p.flex->score) flex_score.emplace(*p.flex->score, BR * impl.BC);
      if (p.flex && p.flex->mask) flex_mask.emplace(*p.flex->mask, BR * impl.BC);
    });
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      if (scratch.failed()) continue;  // reported after the region
      Workspace& ws = *wso;
      ws.rel = &rel;
      ws.flex_score = flex_score ? &*flex_score : nullptr;
      ws.flex_mask = flex_mask ? &*flex_mask : nullptr;
      const SdpaParams& ps = parts[size_t(item % S)];  // the key range
      const int64_t b = item / S / (p.H_kv * blocks_per_kv);
      const int64_t h_kv = item / S / blocks_per_kv % p.H_kv;
      const int64_t blk = item / S % blocks_per_kv;
      int rows = 0;
      if (heads_per_block == 1) {
        const int64_t h = h_kv * G + blk / blocks_per_head;
        const int64_t i0 = blk % blocks_per_head * BR;
        rows = int(std::min<int64_t>(BR, p.L_q - i0));
        for (int lane = 0; lane < rows; ++lane)
          ws.lane_h[lane] = h, ws.lane_i[lane] = int32_t(i0 + lane);
      } else {
        const int64_t g0 = blk * heads_per_block;
        const int64_t n_heads = std::min<int64_t>(heads_per_block, G - g0);
        for (int64_t g = 0; g < n_heads; ++g)
          for (int64_t i = 0; i < p.L_q; ++i, ++rows)
            ws.lane_h[rows] = h_kv * G + g0 + g, ws.lane_i[rows] = int32_t(i);
      }
      for (int lane = rows; lane < BR; ++lane)
        ws.lane_h[lane] = ws.lane_h[0], ws.lane_i[lane] = ws.lane_i[0];
      impl.block(ps, b, h_kv, rows, ws);
    }
    if (p.flex) flex::report_errors(p.flex->errors, flex_score, flex_mask);
  }
  scratch.check();
  if (S > 1) merge_splits(p, S, out_s, lse_s, max_s);
}

}  // namespace attn::kernels

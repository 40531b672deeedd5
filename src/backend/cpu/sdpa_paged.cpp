// Attention against a paged key/value cache (backend::SdpaPaged, attention_kernels.h) on the CPU:
// run-time choice of instruction set, work partition, threads, and the merge of split key ranges.
// The kernel itself is sdpa_paged_kernel.inc, compiled here once per instruction set.
//
// Work items are (sequence, key/value head, chunk of up to 8 query rows of that head's group,
// key range). As in the fused kernel's split-K, the keys of each sequence are cut into S ranges
// when the items would be too few to keep 16 threads busy; S is a power of two that depends on the
// sizes only (never on the thread count), each range a partial output and lse, merged in range
// order: the result is bitwise the same for any number of threads.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <type_traits>
#include <vector>

#include "../attention_kernels.h"
#include "isa.h"
#include "sdpa_merge.h"
#include "simd.h"
#include "threads.h"
#include "workspace.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC bug 105593, as in sdpa_fused.cpp
#endif

namespace attn::kernels {

using backend::kKvScaleBlock;
using backend::KvStorage;
using backend::SdpaPaged;

namespace paged_scalar {
using V = simd::Scalar;
#define KTARGET
#include "sdpa_paged_kernel.inc"
#undef KTARGET
}  // namespace paged_scalar

#if ATTN_SIMD_X86
namespace paged_avx2 {
using V = simd::Avx2;
#define KTARGET ATTN_TARGET_AVX2
#include "sdpa_paged_kernel.inc"
#undef KTARGET
}  // namespace paged_avx2

namespace paged_avx512 {
using V = simd::Avx512;
#define KTARGET ATTN_TARGET_AVX512
#include "sdpa_paged_kernel.inc"
#undef KTARGET
}  // namespace paged_avx512
#endif

#if ATTN_SIMD_NEON
namespace paged_neon {
using V = simd::Neon;
#define KTARGET
#include "sdpa_paged_kernel.inc"
#undef KTARGET
}  // namespace paged_neon
#endif

namespace {

using ChunkFn = void(const SdpaPaged&, int64_t, int64_t, const int64_t*, const int64_t*, int,
                     int64_t, int64_t, bool, float* const*, float* const*, float*);
struct PagedImpl {
  ChunkFn* chunk;
  int64_t (*scratch_floats)(int, int64_t, int64_t, int64_t);
};

PagedImpl paged_impl() {
  switch (active_isa()) {
#if ATTN_SIMD_X86
    case Isa::Avx512: return {paged_avx512::paged_chunk, paged_avx512::paged_scratch_floats};
    case Isa::Avx2: return {paged_avx2::paged_chunk, paged_avx2::paged_scratch_floats};
#endif
#if ATTN_SIMD_NEON
    case Isa::Neon:
    case Isa::Sve:  // the NEON build serves SVE CPUs too
      return {paged_neon::paged_chunk, paged_neon::paged_scratch_floats};
#endif
    default: return {paged_scalar::paged_chunk, paged_scalar::paged_scratch_floats};
  }
}

constexpr int kRowsPerItem = 8;         // query rows of one work item (paged_rows<8>)
constexpr int64_t kMinSplitKeys = 512;  // keys of a split range, at least
constexpr int64_t kTargetItems = 16;    // enough for 16 threads

void paged_forward(const SdpaPaged& p) {
  const int64_t G = p.H / p.H_kv, rows_per_kv = G * p.L_q;
  const int64_t chunks = (rows_per_kv + kRowsPerItem - 1) / kRowsPerItem;
  int64_t max_len = 0;
  for (int64_t b = 0; b < p.B; ++b) max_len = std::max(max_len, p.seqlens[b]);
  const int64_t base_items = p.B * p.H_kv * chunks;
  if (base_items == 0) return;
  int64_t S = 1;
  while (base_items * S < kTargetItems && max_len / (2 * S) >= kMinSplitKeys) S *= 2;
  const int64_t items = base_items * S;

  // Split s of sequence b covers keys [s len / S, (s + 1) len / S): partial rows (S, B, H, L_q,
  // D_v) and lse (S, B, H, L_q), merged below. S == 1 writes out and lse directly.
  const int64_t rows = p.B * p.H * p.L_q;
  std::vector<float> out_s, lse_s(size_t(S * rows));
  if (S > 1) out_s.resize(size_t(S * rows * p.D_v));
  const PagedImpl impl = paged_impl();
  const int64_t scratch_floats = impl.scratch_floats(kRowsPerItem, p.D, p.D_v, p.page_size);
  const double work = double(p.B * p.H * p.L_q) * double(max_len + 1) * double(p.D + p.D_v + 1);
  const bool parallel = items > 1 && work > double(1 << 16);
  ThreadScratch scratch(double(scratch_floats) * sizeof(float),
                        "the paged attention kernel's per-thread workspace");
#pragma omp parallel if (parallel) num_threads(num_threads())
  {
    std::vector<float> buf;
    scratch.allocate([&] { buf.resize(size_t(scratch_floats) + 16); });
#pragma omp for schedule(dynamic, 1)
    for (int64_t item = 0; item < items; ++item) {
      if (scratch.failed()) continue;  // reported after the region
      const int64_t s = item % S, rest = item / S;
      const int64_t c = rest % chunks, h_kv = rest / chunks % p.H_kv, b = rest / chunks / p.H_kv;
      const int64_t len = p.seqlens[b];
      int64_t hs[kRowsPerItem], is[kRowsPerItem];
      float* out_rows[kRowsPerItem];
      float* lse_rows[kRowsPerItem];
      int n = 0;
      for (int64_t t = c * kRowsPerItem; t < std::min(rows_per_kv, (c + 1) * kRowsPerItem);
           ++t, ++n) {
        hs[n] = h_kv * G + t / p.L_q, is[n] = t % p.L_q;
        const int64_t row = (b * p.H + hs[n]) * p.L_q + is[n];  // in (B, H, L_q)
        out_rows[n] = S > 1 ? out_s.data() + (s * rows + row) * p.D_v
                            : p.out + ((b * p.L_q + is[n]) * p.H + hs[n]) * p.D_v;
        lse_rows[n] = lse_s.data() + s * rows + row;
      }
      // 64-byte alignment is not needed (unaligned loads); the padding keeps the vectors inside.
      impl.chunk(p, b, h_kv, hs, is, n, s * len / S, (s + 1) * len / S, s == 0, out_rows, lse_rows,
                 buf.data());
    }
  }
  scratch.check();

  // Ranges 1 .. S - 1 folded into range 0's rows, in order, by ring attention's merge (as the
  // fused kernel's split-K does), then range 0's rows copied to out's (B, L_q, H, D_v) layout.
  if (S > 1) {
    for (int64_t s = 1; s < S; ++s)
      merge_attention_rows(out_s.data(), lse_s.data(), out_s.data() + s * rows * p.D_v,
                           lse_s.data() + s * rows, p.B * p.H, p.L_q, p.L_q, p.D_v, 0);
    for (int64_t row = 0; row < rows; ++row) {
      const int64_t i = row % p.L_q, h = row / p.L_q % p.H, b = row / p.L_q / p.H;
      const float* src = out_s.data() + row * p.D_v;
      std::copy(src, src + p.D_v, p.out + ((b * p.L_q + i) * p.H + h) * p.D_v);
    }
  }
  if (p.lse) std::copy(lse_s.begin(), lse_s.begin() + rows, p.lse);
}

}  // namespace
}  // namespace attn::kernels

namespace attn::backend::cpu {
const Kernels<SdpaPagedFn> sdpa_paged = {kernels::paged_forward};
}  // namespace attn::backend::cpu

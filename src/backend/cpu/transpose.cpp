// transpose.h: W x W tiles loaded along s's rows, transposed in registers (simd.h's transpose) and
// stored along d's rows; the ragged edges one element at a time.
#include "transpose.h"

#include "isa.h"
#include "simd.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"  // GCC bug 105593, as in gemm_rows.cpp
#endif

namespace attn::kernels {
namespace {

inline void transpose_scalar(const float* s, int64_t lds, float* d, int64_t ldd, int64_t i0,
                             int64_t i1, int64_t j0, int64_t j1) {
  for (int64_t j = j0; j < j1; ++j)
    for (int64_t i = i0; i < i1; ++i) d[j * ldd + i] = s[i * lds + j];
}

// The tiles of one instruction set (GCC inlines simd.h's intrinsics only into a function compiled
// for their target, so each build is a function of its own, as gemm_rows_kernel.inc's are).
#define ATTN_TRANSPOSE_TILES(name, V, TARGET)                                                    \
  TARGET void name(const float* s, int64_t lds, float* d, int64_t ldd, int64_t ni, int64_t nj) { \
    constexpr int W = V::W;                                                                      \
    const int64_t ni_full = ni / W * W, nj_full = nj / W * W;                                    \
    for (int64_t i0 = 0; i0 < ni_full; i0 += W) {                                                \
      for (int64_t j0 = 0; j0 < nj_full; j0 += W) {                                              \
        V::T r[W];                                                                               \
        for (int k = 0; k < W; ++k) r[k] = V::load(s + (i0 + k) * lds + j0);                     \
        V::transpose(r);                                                                         \
        for (int k = 0; k < W; ++k) V::store(d + (j0 + k) * ldd + i0, r[k]);                     \
      }                                                                                          \
    }                                                                                            \
    transpose_scalar(s, lds, d, ldd, 0, ni, nj_full, nj);                                        \
    transpose_scalar(s, lds, d, ldd, ni_full, ni, 0, nj_full);                                   \
  }
#if ATTN_SIMD_X86
ATTN_TRANSPOSE_TILES(transpose_avx512, simd::Avx512, ATTN_TARGET_AVX512)
ATTN_TRANSPOSE_TILES(transpose_avx2, simd::Avx2, ATTN_TARGET_AVX2)
#endif
#if ATTN_SIMD_NEON
ATTN_TRANSPOSE_TILES(transpose_neon, simd::Neon, )
#endif
#undef ATTN_TRANSPOSE_TILES

}  // namespace

void transpose_f32(const float* s, int64_t lds, float* d, int64_t ldd, int64_t ni, int64_t nj) {
  switch (active_isa()) {
#if ATTN_SIMD_X86
    case Isa::Avx512: return transpose_avx512(s, lds, d, ldd, ni, nj);
    case Isa::Avx2: return transpose_avx2(s, lds, d, ldd, ni, nj);
#endif
#if ATTN_SIMD_NEON
    case Isa::Neon:
    case Isa::Sve: return transpose_neon(s, lds, d, ldd, ni, nj);
#endif
    default: return transpose_scalar(s, lds, d, ldd, 0, ni, 0, nj);
  }
}

}  // namespace attn::kernels

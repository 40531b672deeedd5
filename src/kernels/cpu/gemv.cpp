// gemv.h: the matrix-vector product, compiled once per instruction set from gemv_kernel.inc and
// dispatched by the fused kernels' choice of instruction set (sdpa_fused.h).
#include "gemv.h"

#include "sdpa_fused.h"
#include "simd.h"

// GCC 12 warns about the deliberately undefined pass-through operand inside the AVX-512
// intrinsics (GCC bug 105593), as in sdpa_fused.cpp.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace attn::kernels {

namespace gemv_scalar {
using V = simd::Scalar;
#define KTARGET
#include "gemv_kernel.inc"
#undef KTARGET
}  // namespace gemv_scalar

#if ATTN_SIMD_X86
namespace gemv_avx2 {
using V = simd::Avx2;
#define KTARGET ATTN_TARGET_AVX2
#include "gemv_kernel.inc"
#undef KTARGET
}  // namespace gemv_avx2

namespace gemv_avx512 {
using V = simd::Avx512;
#define KTARGET ATTN_TARGET_AVX512
#include "gemv_kernel.inc"
#undef KTARGET
}  // namespace gemv_avx512
#endif  // ATTN_SIMD_X86

#if ATTN_SIMD_NEON
namespace gemv_neon {
using V = simd::Neon;
#define KTARGET
#include "gemv_kernel.inc"
#undef KTARGET
}  // namespace gemv_neon
#endif  // ATTN_SIMD_NEON

void gemv_rows(int64_t N, int64_t K, float alpha, const float* B, int64_t ldb, const float* x,
               float beta, float* y) {
  switch (fused_isa()) {
#if ATTN_SIMD_X86
    case FusedIsa::Avx512: return gemv_avx512::gemv_rows(N, K, alpha, B, ldb, x, beta, y);
    case FusedIsa::Avx2: return gemv_avx2::gemv_rows(N, K, alpha, B, ldb, x, beta, y);
#endif
#if ATTN_SIMD_NEON
    case FusedIsa::Neon:
    case FusedIsa::Sve: return gemv_neon::gemv_rows(N, K, alpha, B, ldb, x, beta, y);
#endif
    default: return gemv_scalar::gemv_rows(N, K, alpha, B, ldb, x, beta, y);
  }
}

}  // namespace attn::kernels

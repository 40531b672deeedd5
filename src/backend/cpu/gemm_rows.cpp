// gemm_rows.h: few-row products, compiled once per instruction set from gemm_rows_kernel.inc and
// dispatched by the fused kernels' choice of instruction set (sdpa_fused.h).
#include "gemm_rows.h"

#include <algorithm>

#include "sdpa_fused.h"
#include "simd.h"

// GCC 12 warns about the deliberately undefined pass-through operand inside the AVX-512
// intrinsics (GCC bug 105593), as in sdpa_fused.cpp.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace attn::kernels {

namespace rows_scalar {
using V = simd::Scalar;
#define KTARGET
#include "gemm_rows_kernel.inc"
#undef KTARGET
}  // namespace rows_scalar

#if ATTN_SIMD_X86
namespace rows_avx2 {
using V = simd::Avx2;
#define KTARGET ATTN_TARGET_AVX2
#include "gemm_rows_kernel.inc"
#undef KTARGET
}  // namespace rows_avx2

namespace rows_avx512 {
using V = simd::Avx512;
#define KTARGET ATTN_TARGET_AVX512
#include "gemm_rows_kernel.inc"
#undef KTARGET
}  // namespace rows_avx512
#endif  // ATTN_SIMD_X86

#if ATTN_SIMD_NEON
namespace rows_neon {
using V = simd::Neon;
#define KTARGET
#include "gemm_rows_kernel.inc"
#undef KTARGET
}  // namespace rows_neon
#endif  // ATTN_SIMD_NEON

namespace {
template <typename TB>
void rows_dispatch(int64_t M, int64_t N, int64_t K, float alpha, const float* X, int64_t ldx,
                   const TB* B, int64_t ldb, float beta, float* Y, int64_t ldy) {
  switch (active_isa()) {
#if ATTN_SIMD_X86
    case Isa::Avx512: return rows_avx512::rows_times(M, N, K, alpha, X, ldx, B, ldb, beta, Y, ldy);
    case Isa::Avx2: return rows_avx2::rows_times(M, N, K, alpha, X, ldx, B, ldb, beta, Y, ldy);
#endif
#if ATTN_SIMD_NEON
    case Isa::Neon:
    case Isa::Sve: return rows_neon::rows_times(M, N, K, alpha, X, ldx, B, ldb, beta, Y, ldy);
#endif
    default: return rows_scalar::rows_times(M, N, K, alpha, X, ldx, B, ldb, beta, Y, ldy);
  }
}
}  // namespace

void gemm_rows(int64_t M, int64_t N, int64_t K, float alpha, const float* X, int64_t ldx,
               const float* B, int64_t ldb, float beta, float* Y, int64_t ldy) {
  rows_dispatch(M, N, K, alpha, X, ldx, B, ldb, beta, Y, ldy);
}

void gemm_rows_half(bool bf16, int64_t M, int64_t N, int64_t K, float alpha, const float* X,
                    int64_t ldx, const uint16_t* B, int64_t ldb, float beta, float* Y,
                    int64_t ldy) {
  if (bf16)
    rows_dispatch(M, N, K, alpha, X, ldx, reinterpret_cast<const simd::Bf16Bits*>(B), ldb, beta, Y,
                  ldy);
  else
    rows_dispatch(M, N, K, alpha, X, ldx, reinterpret_cast<const simd::Fp16Bits*>(B), ldb, beta, Y,
                  ldy);
}

}  // namespace attn::kernels

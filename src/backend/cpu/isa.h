// The CPU backend's one instruction-set layer: which vector instructions this CPU has, which the
// kernels use (the widest, capped by the environment variable ATTN_CPU_ISA, or a test's
// override), and the way a kernel is built once per instruction set and dispatched on that
// choice. The fused attention kernels (sdpa_fused*.cpp, over simd.h), the row kernels of the
// products (gemm_rows.cpp) and the element loops over vmath.h (ATTN_ISA_VARIANTS) all follow it,
// so ATTN_CPU_ISA=avx2 on an AVX-512 machine runs every one of them as an AVX2 machine would.
#pragma once

#include <cstdint>

namespace attn::kernels {

// Instruction sets the kernels are built for: AVX2 (with FMA) and AVX-512 on x86-64, NEON on
// AArch64 (and SVE where the build fixes a vector length: ATTN_SVE_BITS), the portable build
// (scalar code, or the baseline's SSE2 / NEON where the compiler vectorises) everywhere.
enum class Isa { Auto, Scalar, Avx2, Avx512, Neon, Sve };

// Whether this CPU can run `isa` (Auto and Scalar: always).
bool isa_supported(Isa isa);
// The instruction set the kernels use now: the widest supported one (capped by the environment
// variable ATTN_CPU_ISA=scalar|avx2|avx512|neon|sve, read once) unless overridden.
Isa active_isa();
// For tests and benchmarks: force an instruction set (Auto restores the automatic choice).
// Returns false, changing nothing, when the CPU cannot run it. Not meant to be called while
// another thread runs a kernel.
bool set_isa(Isa isa);
// "auto", "scalar", "avx2", "avx512", "neon", "sve".
const char* isa_name(Isa isa);

// Whether products of bfloat16 by bfloat16 may use AVX512-BF16's dot product (vdpbf16ps,
// gemm_rows.h): the CPU has it, active_isa() is Avx512, the environment variable
// ATTN_CPU_BF16_DOT is not 0, and no test turned it off.
bool bf16_dot_enabled();
// For tests and benchmarks: allow (true) or forbid the dot product. Returns false, changing
// nothing, when asked to allow it on a CPU without it.
bool set_bf16_dot(bool on);

}  // namespace attn::kernels

// ATTN_ISA_VARIANTS(ret, name, (params), (args)) defines `ret name(params)` from an always-inline
// `name##_body` with the same parameters: on x86-64 three builds of the body (x86-64-v4 for
// AVX-512, x86-64-v3 for AVX2 and FMA, and the baseline), the one of active_isa() called each
// time (a plain switch: no ifunc resolver, so ThreadSanitizer builds it too). Elsewhere
// (AArch64, where NEON is the baseline) one build.
//
//   ATTN_ISA_INLINE void scale_body(float* x, int64_t n, float c) { ... }
//   ATTN_ISA_VARIANTS(void, scale, (float* x, int64_t n, float c), (x, n, c))
#define ATTN_ISA_INLINE __attribute__((always_inline)) inline
#if defined(__x86_64__)
#define ATTN_ISA_VARIANTS(ret, name, params, args)                            \
  __attribute__((target("arch=x86-64-v4"))) static ret name##_avx512 params { \
    return name##_body args;                                                  \
  }                                                                           \
  __attribute__((target("arch=x86-64-v3"))) static ret name##_avx2 params {   \
    return name##_body args;                                                  \
  }                                                                           \
  static ret name##_baseline params { return name##_body args; }              \
  ret name params {                                                           \
    switch (::attn::kernels::active_isa()) {                                  \
      case ::attn::kernels::Isa::Avx512: return name##_avx512 args;           \
      case ::attn::kernels::Isa::Avx2: return name##_avx2 args;               \
      default: return name##_baseline args;                                   \
    }                                                                         \
  }
#else
#define ATTN_ISA_VARIANTS(ret, name, params, args) \
  ret name params { return name##_body args; }
#endif

// The instruction set the CPU kernels use (isa.h).
#include "isa.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <iterator>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

#if defined(__aarch64__) && defined(__linux__)
#include <sys/prctl.h>
#endif

namespace attn::kernels {
namespace {

std::atomic<Isa> g_override{Isa::Auto};
std::atomic<bool> g_bf16_dot_off{false};

#if defined(ATTN_SVE_BITS) && defined(__aarch64__) && defined(__linux__)
// The CPU's SVE vector length in bits, from the kernel (prctl); 0 without SVE.
int sve_bits() {
  const int vl = prctl(PR_SVE_GET_VL);
  return vl < 0 ? 0 : (vl & PR_SVE_VL_LEN_MASK) * 8;
}
#endif

// The widest instruction set the CPU has, capped by the environment variable ATTN_CPU_ISA
// (scalar, avx2, avx512, neon, sve: for benchmarks and for testing a narrower path on a wide CPU).
Isa best_isa() {
  static const Isa best = [] {
    const Isa order[] = {Isa::Avx512, Isa::Avx2, Isa::Sve, Isa::Neon, Isa::Scalar};
    constexpr int n = int(std::size(order));
    int first = 0;
    if (const char* cap = std::getenv("ATTN_CPU_ISA")) {
      for (int i = 0; i < n; ++i)
        if (std::strcmp(cap, isa_name(order[i])) == 0) first = i;
    }
    for (int i = first; i < n; ++i)
      if (isa_supported(order[i])) return order[i];
    return Isa::Scalar;
  }();
  return best;
}

}  // namespace

#if defined(__x86_64__) || defined(__i386__)
// CPUID leaf 1, ECX bit 29 (clang 14's __builtin_cpu_supports does not know "f16c").
static bool has_f16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) != 0;
}
#endif

// CPUID leaf 7 sub-leaf 1, EAX bit 5: AVX512_BF16 (Zen 4 and later, Cooper Lake, Sapphire
// Rapids and later), read directly for the same reason.
static bool has_avx512_bf16() {
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid_count(7, 1, &a, &b, &c, &d) && (a & (1u << 5)) != 0;
#else
  return false;
#endif
}

bool isa_supported(Isa isa) {
  switch (isa) {
    case Isa::Auto:
    case Isa::Scalar: return true;
#if defined(__x86_64__) || defined(__i386__)
    // F16C (float16 conversions) came with AVX on every CPU that has AVX2.
    case Isa::Avx2:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
    case Isa::Avx512:
      return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
             __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
             __builtin_cpu_supports("fma") && has_f16c();
#else
    case Isa::Avx2:
    case Isa::Avx512: return false;
#endif
#if defined(__aarch64__) && defined(__ARM_NEON)
    case Isa::Neon: return true;
#else
    case Isa::Neon: return false;
#endif
    case Isa::Sve:
#if defined(ATTN_SVE_BITS) && defined(__aarch64__) && defined(__linux__) && defined(__GNUC__) && \
    !defined(__clang__)
      return sve_bits() == ATTN_SVE_BITS;
#else
      return false;
#endif
  }
  return false;
}

Isa active_isa() {
  const Isa o = g_override.load(std::memory_order_relaxed);
  return o == Isa::Auto ? best_isa() : o;
}

bool set_isa(Isa isa) {
  if (!isa_supported(isa)) return false;
  g_override.store(isa, std::memory_order_relaxed);
  return true;
}

// Whether this CPU runs the dot product (AVX512-BF16 with the rest of the AVX-512 build), read
// once.
static bool bf16_dot_supported() {
  static const bool supported = has_avx512_bf16() && isa_supported(Isa::Avx512);
  return supported;
}

bool bf16_dot_enabled() {
  static const bool allowed = [] {
    const char* env = std::getenv("ATTN_CPU_BF16_DOT");
    return !(env && std::strcmp(env, "0") == 0);
  }();
  return allowed && bf16_dot_supported() && active_isa() == Isa::Avx512 &&
         !g_bf16_dot_off.load(std::memory_order_relaxed);
}

bool set_bf16_dot(bool on) {
  if (on && !bf16_dot_supported()) return false;
  g_bf16_dot_off.store(!on, std::memory_order_relaxed);
  return true;
}

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Auto: return "auto";
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
    case Isa::Neon: return "neon";
    case Isa::Sve: return "sve";
  }
  return "?";
}

}  // namespace attn::kernels

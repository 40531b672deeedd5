// Random number generation that reproduces PyTorch 1.13's CPU generator bit for bit.
//
// attn::Generator is the same Mersenne Twister (mt19937) as torch's CPUGeneratorImpl, seeded the
// same way, with the same cached second Box-Muller sample. The fill_* kernels consume the generator
// exactly as torch's CPU kernels do for a freshly created contiguous float32 (or int64) tensor, so
//
//   torch.manual_seed(s); x = torch.randn(n)
//   attn::manual_seed(s); attn::fill_normal(buf, n, 0, 1, attn::default_generator());
//
// give identical bits, and so do interleaved sequences of calls that share one generator.
//
// The reference is torch 1.13 as shipped by Debian (no MKL, CPU capability AVX2): torch.rand,
// torch.randn, torch.randint, Tensor.uniform_, Tensor.normal_, Tensor.bernoulli_(p) and
// torch.nn.functional.dropout. get_state() produces the same 5056 bytes as
// torch.get_rng_state(), so states can be exchanged with torch in either direction.
// (Running torch with ATEN_CPU_CAPABILITY=default changes its randn and uniform_ bits; that
// configuration is not reproduced.)
//
// Threads. A Generator may be shared between threads, as torch's: every fill kernel below, and
// every draw the library makes (dropout, sampling), holds the generator's mutex() for its whole
// sequence of draws, and manual_seed, initial_seed, get_state, set_state and copying take it too.
// So each call consumes a contiguous run of the stream; which thread's run comes first is up to
// the scheduler (a thread that needs reproducible draws uses its own Generator). random(),
// random64() and the cached-normal accessors are the raw steps: a caller that uses them on a
// generator other threads may use holds mutex() around its sequence.
#pragma once

#include <array>
#include <cstdint>
#include <mutex>
#include <optional>
#include <vector>

#include "attn/common.h"

namespace attn {

// mt19937 with the state layout and seeding of torch's CPUGeneratorImpl.
class Generator {
 public:
  // torch's default seed (c10::default_rng_seed_val), used when nobody called manual_seed.
  static constexpr uint64_t kDefaultSeed = 67280421310721ULL;
  // Size in bytes of get_state()'s result (torch's CPUGeneratorImplState).
  static constexpr std::size_t kStateSize = 5056;
  // Size of torch's older THGeneratorState, also accepted by set_state().
  static constexpr std::size_t kLegacyStateSize = 5048;

  explicit Generator(uint64_t seed = kDefaultSeed);
  // A copy of the state (torch's Generator.clone_state); the mutex is not copied.
  Generator(const Generator& other);
  Generator& operator=(const Generator& other);

  // Held by every sequence of draws from this generator (see the top of this file).
  std::mutex& mutex() const { return mutex_; }

  // Re-seeds the twister from the low 32 bits of `seed` (all 64 bits are remembered for
  // initial_seed()) and clears the cached normal samples, like torch.manual_seed.
  void manual_seed(uint64_t seed);
  // The seed last given to the constructor or manual_seed (torch.initial_seed()).
  uint64_t initial_seed() const;

  // One 32-bit draw of the twister (the caller holds mutex() if the generator is shared).
  uint32_t random();
  // Two draws combined as torch does: the first is the high word, the second the low word.
  uint64_t random64();

  // Opaque state for checkpoints: byte-identical to torch.get_rng_state().numpy().tobytes()
  // for the same generator history. Includes the cached normal samples.
  std::vector<uint8_t> get_state() const;
  // Restores a state from get_state() (or from torch.get_rng_state(), 5056 bytes, or torch's
  // legacy 5048-byte THGeneratorState). Throws attn::Error on a wrong size or an invalid state.
  void set_state(const std::vector<uint8_t>& state);

  // The cached second sample of the double Box-Muller transform (torch's
  // next_double_normal_sample), used by the serial normal path.
  std::optional<double> next_double_normal_sample() const { return next_double_normal_; }
  void set_next_double_normal_sample(std::optional<double> v) { next_double_normal_ = v; }
  // The float counterpart (torch's next_float_normal_sample). Torch's CPU kernels never use it;
  // it is kept only so that states round-trip exactly.
  std::optional<float> next_float_normal_sample() const { return next_float_normal_; }
  void set_next_float_normal_sample(std::optional<float> v) { next_float_normal_ = v; }

 private:
  static constexpr int kN = 624;
  void next_state();

  uint64_t seed_ = 0;
  int32_t left_ = 1;
  bool seeded_ = false;
  uint32_t next_ = 0;
  std::array<uint32_t, kN> state_{};
  std::optional<double> next_double_normal_;
  std::optional<float> next_float_normal_;
  mutable std::mutex mutex_;
};

// The process-wide generator behind rand/randn/randint/dropout (torch.default_generator), shared
// by every thread (see the top of this file).
Generator& default_generator();
// Seeds default_generator() (torch.manual_seed).
void manual_seed(uint64_t seed);

// ---- Fill kernels on raw contiguous memory ----------------------------------------------------
// Each consumes `gen` exactly as torch does for a freshly created contiguous tensor of n elements,
// holding gen.mutex() meanwhile. n == 0 draws nothing. Invalid arguments throw
// attn::Error("[name] ...").

// Tensor.uniform_(from, to) on float32, and torch.rand (from 0, to 1): one 32-bit draw per
// element, x = (draw & (2^24-1)) * 2^-24, result fma(x, to - from, from) in float with from and to
// first rounded to float (torch's AVX2 kernel). Requires from <= to, both finite floats.
void fill_uniform(float* data, int64_t n, double from, double to, Generator& gen);

// Tensor.normal_(mean, std) on float32, and torch.randn (mean 0, std 1). For n >= 16 this is
// torch's vectorised Box-Muller (n uniforms, pairs (j, j+8) of each block of 16 transformed, the
// last 16 elements re-drawn and re-transformed when n % 16 != 0) using the same float Cephes
// log/sincos approximations and FMAs as torch's AVX2 build; it does not touch the normal cache.
// For n < 16 it is fill_normal_serial. Requires std >= 0.
void fill_normal(float* data, int64_t n, double mean, double std, Generator& gen);

// The path torch takes for non-contiguous (or < 16 element) tensors: one double Box-Muller
// sample per element, using and refilling the generator's cached double sample, cast to float.
void fill_normal_serial(float* data, int64_t n, double mean, double std, Generator& gen);

// torch.randint(low, high, size) with dtype int64: value = draw % (high - low) + low, with a
// 64-bit draw when high - low >= 2^32 and a 32-bit one otherwise. Requires low < high.
void fill_randint(int64_t* data, int64_t n, int64_t low, int64_t high, Generator& gen);

// Tensor.bernoulli_(p) on float32 (torch built without MKL): 1.0f where a 53-bit uniform double
// drawn from random64() is < p, else 0.0f. Requires 0 <= p <= 1.
void fill_bernoulli(float* data, int64_t n, double p, Generator& gen);

// The factor torch.nn.functional.dropout(x, p, training=True) multiplies each element of a
// contiguous float32 x by, so that dropout(x) == x * scale_out bitwise: 0.0f or
// 1.0f / float(1 - p), drawn with bernoulli_(1 - p). p == 0 gives all 1.0f and p == 1 all 0.0f,
// neither drawing anything (as torch). Requires 0 <= p <= 1.
void fill_dropout_mask(float* scale_out, int64_t n, double p, Generator& gen);

}  // namespace attn

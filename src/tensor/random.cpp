// PyTorch 1.13-compatible random number generation (see attn/random.h).
//
// Every floating-point step below mirrors the order of operations of torch's CPU kernels as
// built by Debian (CPU capability AVX2, compiled with FMA enabled), which was established by
// comparing bit patterns with torch on millions of samples. Where torch's compiled code fuses a
// multiply and an add, this file calls std::fma explicitly; everywhere else the operations are
// separate (the one a * b + c that torch does NOT fuse, in the serial double normal path, goes
// through a volatile so that it cannot be contracted). Compile this file with -ffp-contract=off so
// that the compiler cannot fuse anything on its own (GCC has no equivalent of the STDC pragma
// below, which clang honours). The code is written so that no remaining a * b + c could be
// contracted anyway, so the flag is a safeguard.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#include "attn/random.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>

namespace attn {

namespace {

constexpr int kMtN = 624;
constexpr int kMtM = 397;

std::string fmt(double v) {
  std::ostringstream os;
  os.precision(17);
  os << v;
  return os.str();
}

// ---- byte helpers for the state format (little endian, like torch on x86) ----

template <typename T>
void put(std::vector<uint8_t>& out, std::size_t offset, T value) {
  std::memcpy(out.data() + offset, &value, sizeof(T));
}

template <typename T>
T get(const std::vector<uint8_t>& in, std::size_t offset) {
  T value;
  std::memcpy(&value, in.data() + offset, sizeof(T));
  return value;
}

// Offsets inside torch's CPUGeneratorImplState (which starts with the legacy THGeneratorState):
//   uint64 the_initial_seed; int32 left; int32 seeded; uint64 next; uint64 state[624];
//   double normal_x, normal_y, normal_rho; int32 normal_is_valid; (4 bytes padding)
//   float next_float_normal_sample; bool is_next_float_normal_sample_valid; (3 bytes padding)
constexpr std::size_t kOffSeed = 0;
constexpr std::size_t kOffLeft = 8;
constexpr std::size_t kOffSeeded = 12;
constexpr std::size_t kOffNext = 16;
constexpr std::size_t kOffState = 24;
constexpr std::size_t kOffNormalX = kOffState + 8 * kMtN;  // 5016
constexpr std::size_t kOffNormalY = kOffNormalX + 8;
constexpr std::size_t kOffNormalRho = kOffNormalY + 8;
constexpr std::size_t kOffNormalValid = kOffNormalRho + 8;  // 5040
constexpr std::size_t kOffFloatNormal = 5048;
constexpr std::size_t kOffFloatNormalValid = 5052;
static_assert(kOffFloatNormal == Generator::kLegacyStateSize);

constexpr double kPi = 3.14159265358979323846;

// ---- uniform draws (at::uniform_real_distribution) ----

// A float in [0, 1) with 24 random bits.
inline float unit_float(Generator& gen) {
  return static_cast<float>(gen.random() & ((1u << 24) - 1)) * (1.0f / 16777216.0f);
}

// A double in [0, 1) with 53 random bits.
inline double unit_double(Generator& gen) {
  return static_cast<double>(gen.random64() & ((uint64_t{1} << 53) - 1)) *
         (1.0 / 9007199254740992.0);
}

// ---- float Cephes approximations as evaluated by torch's AVX2 Box-Muller ----
// log and sin/cos in single precision with the classic Cephes range reductions and minimax
// polynomials. torch evaluates them eight lanes at a time; GCC fused every multiply that feeds an
// add into an FMA, which is reproduced here with explicit fmaf calls.

#if defined(__GNUC__)
#define ATTN_RANDOM_INLINE inline __attribute__((always_inline))
#else
#define ATTN_RANDOM_INLINE inline
#endif

// On x86 with GCC or clang the Box-Muller blocks are also compiled for AVX2+FMA and picked at run
// time: the results are identical (fma is exactly rounded either way), only much faster than the
// libm fmaf calls of a baseline x86-64 build.
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define ATTN_RANDOM_X86_DISPATCH 1
#else
#define ATTN_RANDOM_X86_DISPATCH 0
#endif

ATTN_RANDOM_INLINE float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

ATTN_RANDOM_INLINE uint32_t float_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

ATTN_RANDOM_INLINE float fmaf_(float a, float b, float c) { return std::fma(a, b, c); }

// Natural log for x > 0 (NaN for x <= 0 or NaN); denormals are treated as the smallest normal.
ATTN_RANDOM_INLINE float cephes_logf(float x) {
  if (!(x > 0.0f)) return std::numeric_limits<float>::quiet_NaN();
  if (x < std::numeric_limits<float>::min()) x = std::numeric_limits<float>::min();
  uint32_t bits = float_to_bits(x);
  // Split x = m * 2^e with m in [0.5, 1).
  float e = static_cast<float>(static_cast<int32_t>(bits >> 23) - 0x7f);
  x = bits_to_float((bits & ~0x7f800000u) | 0x3f000000u);
  e = e + 1.0f;
  // Move m into [sqrt(1/2), sqrt(2)) and take x = m - 1.
  const bool small = x < 0.707106781186547524f;
  const float extra = small ? x : 0.0f;
  x = x - 1.0f;
  e = e - (small ? 1.0f : 0.0f);
  x = x + extra;
  const float z = x * x;
  float y = 7.0376836292e-2f;
  y = fmaf_(y, x, -1.1514610310e-1f);
  y = fmaf_(y, x, 1.1676998740e-1f);
  y = fmaf_(y, x, -1.2420140846e-1f);
  y = fmaf_(y, x, 1.4249322787e-1f);
  y = fmaf_(y, x, -1.6668057665e-1f);
  y = fmaf_(y, x, 2.0000714765e-1f);
  y = fmaf_(y, x, -2.4999993993e-1f);
  y = fmaf_(y, x, 3.3333331174e-1f);
  y = y * x;
  // log(1 + x) = x - x^2/2 + x^3 P(x); ln 2 split as 0.693359375 - 2.12194440e-4.
  y = fmaf_(y, z, e * -2.12194440e-4f);
  y = fmaf_(z, -0.5f, y);
  x = x + y;
  x = fmaf_(e, 0.693359375f, x);
  return x;
}

// sin and cos of x at once (|x| moderate; torch only passes [0, 2*pi)).
ATTN_RANDOM_INLINE void cephes_sincosf(float x, float* s, float* c) {
  const bool negative = std::signbit(x);
  x = std::fabs(x);
  // Octant: j = trunc(x * 4/pi) rounded up to even.
  float y = x * 1.27323954473516f;
  int32_t j = static_cast<int32_t>(y);
  j = (j + 1) & ~1;
  y = static_cast<float>(j);
  const bool flip_sin = ((j & 4) != 0) != negative;
  const bool sin_poly_is_sin = (j & 2) == 0;
  const bool flip_cos = ((~(j - 2)) & 4) != 0;
  // Extended-precision reduction x - j * pi/4 with pi/4 = 0.78515625 + 2.418756e-4 + 3.774895e-8.
  x = fmaf_(y, -0.78515625f, x);
  x = fmaf_(y, -2.4187564849853515625e-4f, x);
  x = fmaf_(y, -3.77489497744594108e-8f, x);
  const float z = x * x;
  // cos on [-pi/4, pi/4]: 1 - z/2 + z^2 Q(z).
  float yc = 2.443315711809948e-5f;
  yc = fmaf_(yc, z, -1.388731625493765e-3f);
  yc = fmaf_(yc, z, 4.166664568298827e-2f);
  yc = yc * z;
  yc = fmaf_(yc, z, -(z * 0.5f));
  yc = yc + 1.0f;
  // sin on [-pi/4, pi/4]: x + x z P(z).
  float ys = -1.9515295891e-4f;
  ys = fmaf_(ys, z, 8.3321608736e-3f);
  ys = fmaf_(ys, z, -1.6666654611e-1f);
  ys = ys * z;
  ys = fmaf_(ys, x, x);
  float sv = sin_poly_is_sin ? ys : yc;
  float cv = sin_poly_is_sin ? yc : ys;
  *s = flip_sin ? -sv : sv;
  *c = flip_cos ? -cv : cv;
}

// torch's normal_fill_16_AVX2: elements j and j + 8 (j < 8) hold uniforms u, v in [0, 1) and
// become r cos(t) and r sin(t) with r = sqrt(-2 log(1 - u)), t = 2 pi v.
ATTN_RANDOM_INLINE void normal_fill_16(float* data, float mean, float std) {
  const float two_pi = static_cast<float>(2.0 * kPi);
  for (int j = 0; j < 8; ++j) {
    const float u1 = 1.0f - data[j];
    const float u2 = data[j + 8];
    const float radius = std::sqrt(-2.0f * cephes_logf(u1));
    const float theta = two_pi * u2;
    float s, c;
    cephes_sincosf(theta, &s, &c);
    const float n1 = radius * c;
    const float n2 = radius * s;
    data[j] = fmaf_(n1, std, mean);
    data[j + 8] = fmaf_(n2, std, mean);
  }
}

// normal_fill_16 on `blocks` consecutive blocks of 16 floats.
void normal_fill_blocks_generic(float* data, int64_t blocks, float mean, float std) {
  for (int64_t b = 0; b < blocks; ++b) normal_fill_16(data + 16 * b, mean, std);
}

#if ATTN_RANDOM_X86_DISPATCH
__attribute__((target("avx2,fma"))) void normal_fill_blocks_fma(float* data, int64_t blocks,
                                                                float mean, float std) {
  for (int64_t b = 0; b < blocks; ++b) normal_fill_16(data + 16 * b, mean, std);
}
#endif

void normal_fill_blocks(float* data, int64_t blocks, float mean, float std) {
#if ATTN_RANDOM_X86_DISPATCH
  static const bool has_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  if (has_fma) {
    normal_fill_blocks_fma(data, blocks, mean, std);
    return;
  }
#endif
  normal_fill_blocks_generic(data, blocks, mean, std);
}

// A product the compiler must round before it is used: torch's serial normal path computes
// val * std + mean with a separate multiply and add (checked against torch with operands chosen
// so that a fused multiply-add would round differently), so this must not become an FMA even
// when the file is built with FMA enabled and without -ffp-contract=off.
inline double rounded_product(double a, double b) {
  volatile double p = a * b;
  return p;
}

// at::normal_distribution<double>: one sample, using the generator's cached one when present.
double normal_double(double mean, double std, Generator& gen) {
  if (auto cached = gen.next_double_normal_sample()) {
    gen.set_next_double_normal_sample(std::nullopt);
    return rounded_product(*cached, std) + mean;
  }
  const double u1 = unit_double(gen);
  const double u2 = unit_double(gen);
  const double r = std::sqrt(-2.0 * std::log(1.0 - u2));
  const double theta = 2.0 * kPi * u1;
  gen.set_next_double_normal_sample(r * std::sin(theta));
  const double ret = r * std::cos(theta);
  return rounded_product(ret, std) + mean;
}

void check_n(const char* name, int64_t n) {
  if (n < 0) throw Error(std::string("[") + name + "] n " + std::to_string(n) + " is negative");
}

// fill_normal_serial's draws; the caller holds gen.mutex().
void normal_serial(float* data, int64_t n, double mean, double std, Generator& gen) {
  for (int64_t i = 0; i < n; ++i) data[i] = static_cast<float>(normal_double(mean, std, gen));
}

using Lock = std::lock_guard<std::mutex>;

}  // namespace

// ---- Generator ----------------------------------------------------------------------------------

Generator::Generator(uint64_t seed) { manual_seed(seed); }

Generator::Generator(const Generator& other) { *this = other; }

Generator& Generator::operator=(const Generator& other) {
  if (this == &other) return *this;
  std::scoped_lock lock(mutex_, other.mutex_);
  seed_ = other.seed_;
  left_ = other.left_;
  seeded_ = other.seeded_;
  next_ = other.next_;
  state_ = other.state_;
  next_double_normal_ = other.next_double_normal_;
  next_float_normal_ = other.next_float_normal_;
  return *this;
}

uint64_t Generator::initial_seed() const {
  Lock lock(mutex_);
  return seed_;
}

void Generator::manual_seed(uint64_t seed) {
  Lock lock(mutex_);
  seed_ = seed;
  seeded_ = true;
  state_[0] = static_cast<uint32_t>(seed & 0xffffffffu);
  for (int j = 1; j < kN; ++j) {
    state_[j] = 1812433253u * (state_[j - 1] ^ (state_[j - 1] >> 30)) + static_cast<uint32_t>(j);
  }
  left_ = 1;
  next_ = 0;
  next_double_normal_.reset();
  next_float_normal_.reset();
}

void Generator::next_state() {
  auto twist = [](uint32_t u, uint32_t v) -> uint32_t {
    const uint32_t mixed = (u & 0x80000000u) | (v & 0x7fffffffu);
    return (mixed >> 1) ^ ((v & 1u) ? 0x9908b0dfu : 0u);
  };
  for (int i = 0; i < kN; ++i) {
    state_[i] = state_[(i + kMtM) % kN] ^ twist(state_[i], state_[(i + 1) % kN]);
  }
  left_ = kN;
  next_ = 0;
}

uint32_t Generator::random() {
  if (--left_ == 0) next_state();
  uint32_t y = state_[next_++];
  y ^= (y >> 11);
  y ^= (y << 7) & 0x9d2c5680u;
  y ^= (y << 15) & 0xefc60000u;
  y ^= (y >> 18);
  return y;
}

uint64_t Generator::random64() {
  const uint32_t hi = random();
  const uint32_t lo = random();
  return (static_cast<uint64_t>(hi) << 32) | lo;
}

std::vector<uint8_t> Generator::get_state() const {
  std::vector<uint8_t> out(kStateSize, 0);
  Lock lock(mutex_);
  put<uint64_t>(out, kOffSeed, seed_);
  put<int32_t>(out, kOffLeft, left_);
  put<int32_t>(out, kOffSeeded, seeded_ ? 1 : 0);
  put<uint64_t>(out, kOffNext, next_);
  for (int i = 0; i < kN; ++i) put<uint64_t>(out, kOffState + 8 * i, state_[i]);
  put<double>(out, kOffNormalX, 0.0);
  put<double>(out, kOffNormalY, next_double_normal_.value_or(0.0));
  put<double>(out, kOffNormalRho, 0.0);
  put<int32_t>(out, kOffNormalValid, next_double_normal_ ? 1 : 0);
  put<float>(out, kOffFloatNormal, next_float_normal_.value_or(0.0f));
  out[kOffFloatNormalValid] = next_float_normal_ ? 1 : 0;
  return out;
}

void Generator::set_state(const std::vector<uint8_t>& state) {
  std::optional<double> double_normal;
  std::optional<float> float_normal;
  if (state.size() == kLegacyStateSize) {
    // The legacy format stores the Box-Muller intermediates; the cached sample is r sin(theta).
    if (get<int32_t>(state, kOffNormalValid) != 0) {
      const double r = get<double>(state, kOffNormalRho);
      const double theta = 2.0 * kPi * get<double>(state, kOffNormalX);
      double_normal = r * std::sin(theta);
    }
  } else if (state.size() == kStateSize) {
    if (state[kOffFloatNormalValid] != 0) float_normal = get<float>(state, kOffFloatNormal);
    if (get<int32_t>(state, kOffNormalValid) != 0) double_normal = get<double>(state, kOffNormalY);
  } else {
    throw Error("[Generator::set_state] expected a state of " + std::to_string(kStateSize) +
                " bytes (or " + std::to_string(kLegacyStateSize) + " for the legacy format), got " +
                std::to_string(state.size()));
  }
  const int32_t left = get<int32_t>(state, kOffLeft);
  const int32_t seeded = get<int32_t>(state, kOffSeeded);
  const uint32_t next = static_cast<uint32_t>(get<uint64_t>(state, kOffNext));
  if (seeded == 0 || left <= 0 || left > kN || next > static_cast<uint32_t>(kN)) {
    throw Error("[Generator::set_state] invalid mt19937 state (left " + std::to_string(left) +
                ", next " + std::to_string(next) + ", seeded " + std::to_string(seeded) + ")");
  }
  Lock lock(mutex_);
  seed_ = get<uint64_t>(state, kOffSeed);
  left_ = left;
  seeded_ = true;
  next_ = next;
  for (int i = 0; i < kN; ++i) {
    state_[i] = static_cast<uint32_t>(get<uint64_t>(state, kOffState + 8 * i));
  }
  next_double_normal_ = double_normal;
  next_float_normal_ = float_normal;
}

Generator& default_generator() {
  static Generator gen;
  return gen;
}

void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

// ---- fill kernels -------------------------------------------------------------------------------

void fill_uniform(float* data, int64_t n, double from, double to, Generator& gen) {
  check_n("uniform", n);
  const double lo = std::numeric_limits<float>::lowest();
  const double hi = std::numeric_limits<float>::max();
  if (!(from >= lo && from <= hi) || !(to >= lo && to <= hi)) {
    throw Error("[uniform] from " + fmt(from) + " and to " + fmt(to) +
                " must be finite and within float range");
  }
  if (!(from <= to)) {
    throw Error("[uniform] from " + fmt(from) + " must be less than or equal to to " + fmt(to));
  }
  if (to - from > hi) {
    throw Error("[uniform] to - from = " + fmt(to - from) + " exceeds the largest float");
  }
  const float f = static_cast<float>(from);
  const float range = static_cast<float>(to) - f;
  Lock lock(gen.mutex());
  for (int64_t i = 0; i < n; ++i) data[i] = fmaf_(unit_float(gen), range, f);
}

void fill_normal(float* data, int64_t n, double mean, double std, Generator& gen) {
  check_n("normal", n);
  if (!(std >= 0.0)) throw Error("[normal] std " + fmt(std) + " must be >= 0");
  Lock lock(gen.mutex());
  if (n < 16) {
    normal_serial(data, n, mean, std, gen);
    return;
  }
  const float mean_f = static_cast<float>(mean);
  const float std_f = static_cast<float>(std);
  for (int64_t i = 0; i < n; ++i) data[i] = unit_float(gen);
  normal_fill_blocks(data, n / 16, mean_f, std_f);
  if (n % 16 != 0) {
    // torch recomputes the last 16 values from fresh uniforms.
    float* tail = data + n - 16;
    for (int i = 0; i < 16; ++i) tail[i] = unit_float(gen);
    normal_fill_blocks(tail, 1, mean_f, std_f);
  }
}

void fill_normal_serial(float* data, int64_t n, double mean, double std, Generator& gen) {
  check_n("normal", n);
  if (!(std >= 0.0)) throw Error("[normal] std " + fmt(std) + " must be >= 0");
  Lock lock(gen.mutex());
  normal_serial(data, n, mean, std, gen);
}

void fill_randint(int64_t* data, int64_t n, int64_t low, int64_t high, Generator& gen) {
  check_n("randint", n);
  if (!(low < high)) {
    throw Error("[randint] low " + std::to_string(low) + " must be less than high " +
                std::to_string(high));
  }
  const uint64_t range = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);
  const uint64_t base = static_cast<uint64_t>(low);
  Lock lock(gen.mutex());
  if (range >= (uint64_t{1} << 32)) {
    for (int64_t i = 0; i < n; ++i) data[i] = static_cast<int64_t>(gen.random64() % range + base);
  } else {
    for (int64_t i = 0; i < n; ++i) {
      data[i] = static_cast<int64_t>(static_cast<uint64_t>(gen.random()) % range + base);
    }
  }
}

void fill_bernoulli(float* data, int64_t n, double p, Generator& gen) {
  check_n("bernoulli", n);
  if (!(p >= 0.0 && p <= 1.0)) throw Error("[bernoulli] p " + fmt(p) + " must be in [0, 1]");
  Lock lock(gen.mutex());
  for (int64_t i = 0; i < n; ++i) data[i] = unit_double(gen) < p ? 1.0f : 0.0f;
}

void fill_dropout_mask(float* scale_out, int64_t n, double p, Generator& gen) {
  check_n("dropout", n);
  if (!(p >= 0.0 && p <= 1.0)) throw Error("[dropout] p " + fmt(p) + " must be in [0, 1]");
  if (p == 0.0 || p == 1.0) {
    // torch returns the input itself (p == 0) or input * 0 (p == 1) without drawing.
    const float v = p == 0.0 ? 1.0f : 0.0f;
    for (int64_t i = 0; i < n; ++i) scale_out[i] = v;
    return;
  }
  // noise = empty_like(x).bernoulli_(1 - p); noise.div_(1 - p); return x * noise.
  const double keep = 1.0 - p;
  const float keep_f = static_cast<float>(keep);
  Lock lock(gen.mutex());
  for (int64_t i = 0; i < n; ++i) {
    const float noise = unit_double(gen) < keep ? 1.0f : 0.0f;
    scale_out[i] = noise / keep_f;
  }
}

}  // namespace attn

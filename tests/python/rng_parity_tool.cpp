// Standalone parity probe for attn's PyTorch-compatible RNG (attn/random.h).
//
// Usage: rng_parity_tool KIND SEED N [A [B]]
//   Seeds a fresh attn::Generator with SEED, runs one fill of N elements and prints one value per
//   line, as lowercase hex without 0x:
//     rand               torch.rand(N)                          float bits, 8 digits
//     randn [A B]        torch.randn(N) / normal_(A, B)         float bits (defaults A=0, B=1)
//     normal_serial [A B] normal_(A, B) on a non-contiguous tensor, e.g.
//                        torch.empty(2 * N)[::2].normal_(A, B)  float bits
//     uniform A B        torch.empty(N).uniform_(A, B)          float bits
//     randint A B        torch.randint(A, B, (N,))              int64 as 16 digits two's complement
//     bernoulli [A]      torch.empty(N).bernoulli_(A)           float bits (default A=0.5)
//     dropout [A]        F.dropout(torch.ones(N), A, True)      float bits of the scale factor
//                        (default A=0.5); equals the output for an all-ones input.
// Exit status 2 on bad usage, 1 when attn throws (the message goes to stderr).
#include <attn/random.h>

#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

namespace {

uint32_t bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

int usage() {
  std::fprintf(stderr,
               "usage: rng_parity_tool KIND SEED N [A [B]]\n"
               "  KIND: rand randn normal_serial uniform randint bernoulli dropout\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 4 || argc > 6) return usage();
  const std::string kind = argv[1];
  const uint64_t seed = std::strtoull(argv[2], nullptr, 0);
  const int64_t n = std::strtoll(argv[3], nullptr, 0);
  const bool has_a = argc > 4, has_b = argc > 5;
  attn::Generator gen(seed);
  try {
    if (kind == "randint") {
      if (!has_b) return usage();
      std::vector<int64_t> out(static_cast<std::size_t>(n > 0 ? n : 0));
      attn::fill_randint(out.data(), n, std::strtoll(argv[4], nullptr, 0),
                         std::strtoll(argv[5], nullptr, 0), gen);
      for (int64_t v : out) std::printf("%016" PRIx64 "\n", static_cast<uint64_t>(v));
      return 0;
    }
    const double a = has_a ? std::strtod(argv[4], nullptr) : 0.0;
    const double b = has_b ? std::strtod(argv[5], nullptr) : 1.0;
    std::vector<float> out(static_cast<std::size_t>(n > 0 ? n : 0));
    if (kind == "rand") {
      attn::fill_uniform(out.data(), n, 0.0, 1.0, gen);
    } else if (kind == "uniform") {
      if (!has_b) return usage();
      attn::fill_uniform(out.data(), n, a, b, gen);
    } else if (kind == "randn") {
      attn::fill_normal(out.data(), n, a, b, gen);
    } else if (kind == "normal_serial") {
      attn::fill_normal_serial(out.data(), n, a, b, gen);
    } else if (kind == "bernoulli") {
      attn::fill_bernoulli(out.data(), n, has_a ? a : 0.5, gen);
    } else if (kind == "dropout") {
      attn::fill_dropout_mask(out.data(), n, has_a ? a : 0.5, gen);
    } else {
      return usage();
    }
    for (float v : out) std::printf("%08" PRIx32 "\n", bits(v));
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
  return 0;
}

// Helpers shared by the libFuzzer targets in fuzz/.
//
// Contract of every target: an input either succeeds or throws attn::Error (attn::IndexError, or
// the CLI's FlagError / UsageError, which the targets catch). Anything else fails the run:
// another exception type escapes LLVMFuzzerTestOneInput (libFuzzer reports it as a crash), a
// sanitizer report aborts, and a property check that does not hold calls FUZZ_CHECK's abort.
#pragma once

#include <attn/attn.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

extern "C" size_t LLVMFuzzerMutate(uint8_t* data, size_t size, size_t max_size);

// Aborts with the failed condition (libFuzzer saves the input as crash-*).
#define FUZZ_CHECK(cond)                                                                      \
  do {                                                                                        \
    if (!(cond)) {                                                                            \
      std::fprintf(stderr, "%s:%d: property does not hold: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                           \
    }                                                                                         \
  } while (0)

namespace attn_fuzz {

inline std::string_view as_view(const uint8_t* data, std::size_t size) {
  return {reinterpret_cast<const char*>(data), size};
}

// Reads the input front to back; past the end every read gives zeros (and `empty()` is true).
class ByteReader {
 public:
  ByteReader(const uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  bool empty() const { return pos_ >= size_; }
  std::size_t left() const { return empty() ? 0 : size_ - pos_; }
  uint8_t byte() { return empty() ? 0 : data_[pos_++]; }
  template <typename T>
  T value() {  // little-endian, zero-padded at the end of the input
    uint64_t v = 0;
    for (std::size_t i = 0; i < sizeof(T); ++i) v |= uint64_t(byte()) << (8 * i);
    T out;
    static_assert(sizeof(T) <= sizeof(uint64_t));
    std::memcpy(&out, &v, sizeof(T));
    return out;
  }
  // The rest of the input.
  std::string_view rest() {
    std::string_view r = empty() ? std::string_view() : as_view(data_ + pos_, size_ - pos_);
    pos_ = size_;
    return r;
  }
  // Up to `n` bytes.
  std::string_view take(std::size_t n) {
    if (n > left()) n = left();
    std::string_view r = as_view(data_ + pos_, n);
    pos_ += n;
    return r;
  }

 private:
  const uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

// A mutator for safetensors files: three times in four, when the input has a header that fits, it
// mutates the JSON header alone and rewrites the 8-byte length in front of it, so that insertions
// and deletions reach the JSON parser and the checks behind it instead of breaking the length;
// otherwise (and for inputs without a usable header) libFuzzer's own mutation of the whole input.
inline std::size_t mutate_safetensors(uint8_t* data, std::size_t size, std::size_t max_size,
                                      unsigned seed) {
  std::minstd_rand rng(seed);
  if (size >= 8 && rng() % 4 != 0) {
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];
    if (n > 0 && n <= size - 8) {
      const std::string rest(reinterpret_cast<const char*>(data) + 8 + n, size - 8 - n);
      if (max_size > 8 + rest.size() + n) {
        std::string header(max_size - 8 - rest.size(), '\0');
        std::memcpy(header.data(), data + 8, n);
        const std::size_t m =
            LLVMFuzzerMutate(reinterpret_cast<uint8_t*>(header.data()), n, header.size());
        for (int i = 0; i < 8; ++i) data[i] = uint8_t((uint64_t(m) >> (8 * i)) & 0xff);
        std::memcpy(data + 8, header.data(), m);
        std::memcpy(data + 8 + m, rest.data(), rest.size());
        return 8 + m + rest.size();
      }
    }
  }
  return LLVMFuzzerMutate(data, size, max_size);
}

// Strict UTF-8 (no overlong forms, surrogates or code points above U+10FFFF).
inline std::optional<std::vector<uint32_t>> utf8_code_points(std::string_view s) {
  std::vector<uint32_t> out;
  std::size_t i = 0;
  auto cont = [&](std::size_t k, uint8_t lo = 0x80, uint8_t hi = 0xBF) {
    return i + k < s.size() && uint8_t(s[i + k]) >= lo && uint8_t(s[i + k]) <= hi;
  };
  while (i < s.size()) {
    const uint8_t b = uint8_t(s[i]);
    uint32_t cp;
    std::size_t n;
    if (b <= 0x7F) {
      cp = b, n = 1;
    } else if (b >= 0xC2 && b <= 0xDF && cont(1)) {
      cp = b & 0x1Fu, n = 2;
    } else if (b == 0xE0 && cont(1, 0xA0) && cont(2)) {
      cp = b & 0x0Fu, n = 3;
    } else if (((b >= 0xE1 && b <= 0xEC) || b == 0xEE || b == 0xEF) && cont(1) && cont(2)) {
      cp = b & 0x0Fu, n = 3;
    } else if (b == 0xED && cont(1, 0x80, 0x9F) && cont(2)) {
      cp = b & 0x0Fu, n = 3;
    } else if (b == 0xF0 && cont(1, 0x90) && cont(2) && cont(3)) {
      cp = b & 0x07u, n = 4;
    } else if (b >= 0xF1 && b <= 0xF3 && cont(1) && cont(2) && cont(3)) {
      cp = b & 0x07u, n = 4;
    } else if (b == 0xF4 && cont(1, 0x80, 0x8F) && cont(2) && cont(3)) {
      cp = b & 0x07u, n = 4;
    } else {
      return std::nullopt;
    }
    for (std::size_t k = 1; k < n; ++k) cp = (cp << 6) | (uint8_t(s[i + k]) & 0x3Fu);
    out.push_back(cp);
    i += n;
  }
  return out;
}

// Runs the library single-threaded (the tests run several fuzzers side by side).
inline void init_single_thread() { attn::set_num_threads(1); }

// Whether f() throws an E.
template <typename E, typename F>
bool throws(F&& f) {
  try {
    f();
  } catch (const E&) {
    return true;
  }
  return false;
}

}  // namespace attn_fuzz

// UTF-8 and regular-expression helpers shared by the tokenizers (bpe.cpp, tokenizer*.cpp).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace attn::data::unicode {

// The UTF-8 of code point cp (< 0x110000).
std::string utf8(uint32_t cp);
// Decodes the code point at s[i], advancing i; nullopt (i unchanged) when s[i...] is not a
// well-formed UTF-8 sequence (overlong forms, surrogates and values over U+10FFFF included).
std::optional<uint32_t> next_code_point(std::string_view s, std::size_t& i);
// The byte offset of the first ill-formed sequence, or nullopt when s is valid UTF-8.
std::optional<std::size_t> invalid_utf8_at(std::string_view s);
// s with each maximal ill-formed subsequence replaced by U+FFFD, as Rust's from_utf8_lossy and
// Python's decode(errors="replace") do.
std::string utf8_lossy(std::string_view s);
// Unicode's White_Space property (what Rust's char::is_whitespace tests).
bool is_white_space(uint32_t cp);

// GPT-2's bytes_to_unicode: printable Latin-1 bytes stand for themselves, the other 68 bytes take
// code points from U+0100 in byte order.
std::array<uint32_t, 256> byte_code_points();

// A PCRE2 pattern in UTF mode with Unicode properties. Oniguruma's (tokenizers') \s and \w are
// spelt out where PCRE2's differ: \s as \p{White_Space} (PCRE2's also takes U+180E), \w as
// Alphabetic, marks, Nd, Pc and ²³¹¼½¾ (PCRE2's is letters, numbers and _). Immutable after
// construction; safe to share between threads.
class Regex {
 public:
  // Throws attn::Error "[fn] what: PCRE2 cannot compile ...: message at offset N".
  Regex(std::string_view pattern, const char* fn, const std::string& what);
  ~Regex();
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  // The non-empty matches in text (valid UTF-8), left to right, as [begin, end) byte offsets.
  std::vector<std::pair<std::size_t, std::size_t>> matches(std::string_view text) const;

 private:
  void* code_ = nullptr;  // pcre2_code_8
  const char* fn_;
};

}  // namespace attn::data::unicode

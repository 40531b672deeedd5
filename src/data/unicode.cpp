// UTF-8 and PCRE2 helpers (unicode.h).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "unicode.h"

#include <pcre2.h>

#include <memory>
#include <new>

#include "../common/error.h"

namespace attn::data::unicode {

std::string utf8(uint32_t cp) {
  std::string s;
  if (cp < 0x80) {
    s += char(cp);
  } else if (cp < 0x800) {
    s += char(0xC0 | (cp >> 6));
    s += char(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    s += char(0xE0 | (cp >> 12));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  } else {
    s += char(0xF0 | (cp >> 18));
    s += char(0x80 | ((cp >> 12) & 0x3F));
    s += char(0x80 | ((cp >> 6) & 0x3F));
    s += char(0x80 | (cp & 0x3F));
  }
  return s;
}

namespace {

// The length of the longest prefix of s[i...] that begins a well-formed sequence (Unicode's
// table 3-7), and whether it is complete.
std::pair<std::size_t, bool> well_formed_prefix(std::string_view s, std::size_t i) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (b0 < 0x80) return {1, true};
  std::size_t n;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    n = 2;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    n = 3;
    if (b0 == 0xE0) lo = 0xA0;
    if (b0 == 0xED) hi = 0x9F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    n = 4;
    if (b0 == 0xF0) lo = 0x90;
    if (b0 == 0xF4) hi = 0x8F;
  } else {
    return {0, false};
  }
  for (std::size_t k = 1; k < n; ++k) {
    if (i + k >= s.size()) return {k, false};
    const auto b = static_cast<unsigned char>(s[i + k]);
    if (k == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return {k, false};
  }
  return {n, true};
}

}  // namespace

std::optional<uint32_t> next_code_point(std::string_view s, std::size_t& i) {
  if (i >= s.size()) return std::nullopt;
  auto [n, ok] = well_formed_prefix(s, i);
  if (!ok) return std::nullopt;
  const auto b0 = static_cast<unsigned char>(s[i]);
  uint32_t cp = n == 1 ? b0 : n == 2 ? (b0 & 0x1F) : n == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (std::size_t k = 1; k < n; ++k)
    cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  i += n;
  return cp;
}

std::optional<std::size_t> invalid_utf8_at(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size())
    if (!next_code_point(s, i)) return i;
  return std::nullopt;
}

std::string utf8_lossy(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  std::size_t i = 0;
  while (i < s.size()) {
    auto [n, ok] = well_formed_prefix(s, i);
    if (ok) {
      out.append(s.substr(i, n));
      i += n;
    } else {
      out += "\xEF\xBF\xBD";
      i += n == 0 ? 1 : n;  // a maximal subpart (or one byte that starts none) per U+FFFD
    }
  }
  return out;
}

bool is_white_space(uint32_t c) {
  return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

std::array<uint32_t, 256> byte_code_points() {
  std::array<uint32_t, 256> cp{};
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
    cp[b] = printable ? b : next++;
  }
  return cp;
}

namespace {

// Oniguruma's \s, \S, \w and \W in PCRE2 (where PCRE2's differ: its \s takes U+180E, its \w is
// letters, numbers and _); every other escape as it is.
std::string pcre2_spelling(std::string_view p) {
  // Oniguruma's Unicode word: Alphabetic, marks, decimal digits, connector punctuation, and the
  // Latin-1 numbers its ISO-8859-1 table counts as word characters.
  constexpr const char* kWord =
      "\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\x{B2}\\x{B3}\\x{B9}\\x{BC}-\\x{BE}";
  std::string out;
  bool in_class = false;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const char c = p[i];
    if (c == '\\' && i + 1 < p.size()) {
      const char e = p[++i];
      if (e == 's' || e == 'S') {
        out += e == 's' ? "\\p{White_Space}" : "\\P{White_Space}";
      } else if (e == 'w') {
        out += in_class ? std::string(kWord) : "[" + std::string(kWord) + "]";
      } else if (e == 'W' && !in_class) {
        out += "[^" + std::string(kWord) + "]";
      } else {
        out += c;
        out += e;
      }
      continue;
    }
    if (!in_class && c == '[') {
      in_class = true;
      out += c;
      if (i + 1 < p.size() && p[i + 1] == '^') out += p[++i];
      if (i + 1 < p.size() && p[i + 1] == ']') out += p[++i];  // a literal ] first
      continue;
    }
    if (in_class && c == ']') in_class = false;
    out += c;
  }
  return out;
}

}  // namespace

Regex::Regex(std::string_view pattern, const char* fn, const std::string& what) : fn_(fn) {
  const std::string p = pcre2_spelling(pattern);
  int err = 0;
  PCRE2_SIZE off = 0;
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(p.data()), p.size(),
                                   PCRE2_UTF | PCRE2_UCP, &err, &off, nullptr);
  if (!code) {
    PCRE2_UCHAR buf[256];
    pcre2_get_error_message(err, buf, sizeof buf);
    detail::fail(fn, what, ": PCRE2 cannot compile the pattern '", pattern,
                 "': ", reinterpret_cast<const char*>(buf), " at offset ", off);
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // faster where available; optional
  code_ = code;
}

Regex::~Regex() { pcre2_code_free(static_cast<pcre2_code*>(code_)); }

std::vector<std::pair<std::size_t, std::size_t>> Regex::matches(std::string_view text) const {
  auto* code = static_cast<pcre2_code*>(code_);
  std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> owner(
      pcre2_match_data_create_from_pattern(code, nullptr), pcre2_match_data_free);
  if (!owner) throw std::bad_alloc();
  pcre2_match_data* md = owner.get();
  std::vector<std::pair<std::size_t, std::size_t>> out;
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  PCRE2_SIZE start = 0;
  uint32_t options = 0;  // the UTF check runs on the first match only
  while (start < text.size()) {
    const int rc = pcre2_match(code, subject, text.size(), start, options, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) break;
    if (rc < 0) {
      PCRE2_UCHAR buf[256];
      pcre2_get_error_message(rc, buf, sizeof buf);
      const std::size_t at = pcre2_get_startchar(md);
      if (rc <= PCRE2_ERROR_UTF8_ERR1 && rc >= PCRE2_ERROR_UTF8_ERR21)
        detail::fail(fn_, "the text is not valid UTF-8 at byte ", at, ": ",
                     reinterpret_cast<const char*>(buf));
      detail::fail(fn_, "PCRE2 could not match the pattern at byte ", start, ": ",
                   reinterpret_cast<const char*>(buf));
    }
    options = PCRE2_NO_UTF_CHECK;
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    if (ov[1] > ov[0]) {
      out.emplace_back(ov[0], ov[1]);
      start = ov[1];
    } else {  // an empty match: step over one character
      std::size_t i = ov[0];
      if (!next_code_point(text, i)) ++i;
      start = i;
    }
  }
  return out;
}

}  // namespace attn::data::unicode

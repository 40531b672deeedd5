// Normalizers, pre-tokenizers and decoders of tokenizer.json (tokenizer_internal.h), each doing
// what the step of the same name does in Hugging Face tokenizers.
#include <unicode/normalizer2.h>
#include <unicode/unistr.h>

#include <array>
#include <charconv>
#include <unordered_map>

#include "tokenizer_internal.h"
#include "unicode.h"

namespace attn::data::tok {

std::string get_string(const json& j, const Field& f, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_string())
    f[key].fail("expected a string, got ", it == j.end() ? "nothing" : it->dump());
  return it->get<std::string>();
}

bool get_bool(const json& j, const Field& f, const char* key, bool fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_boolean()) f[key].fail("expected true or false, got ", it->dump());
  return it->get<bool>();
}

int64_t get_int(const json& j, const Field& f, const char* key, int64_t fallback) {
  auto it = j.find(key);
  if (it == j.end() || it->is_null()) return fallback;
  if (!it->is_number_integer()) f[key].fail("expected an integer, got ", it->dump());
  return it->get<int64_t>();
}

void check_cap(std::size_t size, std::size_t cap, const char* step) {
  if (size > cap)
    detail::fail(kFn, "the ", step, " would make the text ", size,
                 " bytes long, over the limit of ", cap, " (64 x the text's length + 4096)");
}

std::string get_type(const json& j, const Field& f) {
  if (!j.is_object()) f.fail("expected an object with a \"type\", got ", j.dump());
  return get_string(j, f, "type");
}

namespace {

using unicode::Regex;

const json& member(const json& j, const Field& f, const char* key) {
  auto it = j.find(key);
  if (it == j.end()) f[key].fail("missing");
  return *it;
}
using Span = std::pair<std::size_t, std::size_t>;

// A single character (one code point) of a JSON string member.
uint32_t get_char(const json& j, const Field& f, const char* key) {
  const std::string s = get_string(j, f, key);
  std::size_t i = 0;
  auto cp = unicode::next_code_point(s, i);
  if (!cp || i != s.size()) f[key].fail("expected one character, got '", s, "'");
  return *cp;
}

// tokenizers' pattern: {"String": "..."} (literal) or {"Regex": "..."}.
class Pattern {
 public:
  Pattern(const json& j, const Field& f) {
    if (!j.is_object() || j.size() != 1)
      f.fail("expected {\"String\": ...} or {\"Regex\": ...}, got ", j.dump());
    if (j.contains("String")) {
      literal_ = get_string(j, f, "String");
      if (literal_.empty()) f["String"].fail("an empty pattern");
    } else if (j.contains("Regex")) {
      regex_ = std::make_unique<Regex>(get_string(j, f, "Regex"), kFn,
                                       "'" + f.file + "': " + f.path + ".Regex");
    } else {
      f.fail("expected {\"String\": ...} or {\"Regex\": ...}, got ", j.dump());
    }
  }
  explicit Pattern(std::string_view regex)
      : regex_(std::make_unique<Regex>(regex, kFn, "a built-in pattern")) {}
  std::vector<Span> matches(std::string_view text) const {
    if (regex_) return regex_->matches(text);
    std::vector<Span> out;
    for (std::size_t at = text.find(literal_); at != std::string_view::npos;
         at = text.find(literal_, at + literal_.size()))
      out.emplace_back(at, at + literal_.size());
    return out;
  }

 private:
  std::string literal_;
  std::unique_ptr<Regex> regex_;
};

std::string replace_all(std::string_view s, const std::vector<Span>& spans, std::string_view with) {
  std::string out;
  std::size_t at = 0;
  for (auto [b, e] : spans) {
    out.append(s.substr(at, b - at));
    out.append(with);
    at = e;
  }
  out.append(s.substr(at));
  return out;
}

// ---------------------------------------------------------------- normalizers

class SequenceNormalizer : public Normalizer {
 public:
  std::vector<std::unique_ptr<Normalizer>> steps;
  void apply(std::string& s, std::size_t cap) const override {
    for (const auto& n : steps) n->apply(s, cap);
  }
};

class UnicodeNormalizer : public Normalizer {
 public:
  UnicodeNormalizer(const std::string& form, const Field& f) {
    UErrorCode err = U_ZERO_ERROR;
    n_ = form == "NFC"    ? icu::Normalizer2::getNFCInstance(err)
         : form == "NFD"  ? icu::Normalizer2::getNFDInstance(err)
         : form == "NFKC" ? icu::Normalizer2::getNFKCInstance(err)
                          : icu::Normalizer2::getNFKDInstance(err);
    if (U_FAILURE(err) || !n_) f.fail("ICU has no ", form, " normalizer: ", u_errorName(err));
  }
  void apply(std::string& s, std::size_t cap) const override {
    UErrorCode err = U_ZERO_ERROR;
    const icu::UnicodeString in = icu::UnicodeString::fromUTF8(s);
    if (n_->isNormalized(in, err) && U_SUCCESS(err)) return;
    err = U_ZERO_ERROR;
    const icu::UnicodeString out = n_->normalize(in, err);
    if (U_FAILURE(err)) detail::fail(kFn, "ICU cannot normalize the text: ", u_errorName(err));
    s.clear();
    out.toUTF8String(s);
    check_cap(s.size(), cap, "Unicode normalizer");
  }

 private:
  const icu::Normalizer2* n_ = nullptr;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(const json& j, const Field& f)
      : pattern_(member(j, f, "pattern"), f["pattern"]), content_(get_string(j, f, "content")) {}
  void apply(std::string& s, std::size_t cap) const override {
    const auto spans = pattern_.matches(s);
    std::size_t size = s.size();
    for (auto [b, e] : spans) size = size - (e - b) + content_.size();
    check_cap(size, cap, "Replace normalizer");
    s = replace_all(s, spans, content_);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string p) : prepend_(std::move(p)) {}
  void apply(std::string& s, std::size_t cap) const override {
    if (s.empty()) return;
    check_cap(s.size() + prepend_.size(), cap, "Prepend normalizer");
    s.insert(0, prepend_);
  }

 private:
  std::string prepend_;
};

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  void apply(std::string& s, std::size_t) const override {
    std::size_t b = 0, e = s.size();
    if (left_) {
      for (std::size_t i = 0; i < s.size();) {
        std::size_t j = i;
        auto cp = unicode::next_code_point(s, j);
        if (!cp || !unicode::is_white_space(*cp)) break;
        b = i = j;
      }
    }
    if (right_) {
      // Scan forward, remembering where the last run of white space began.
      std::size_t i = b, run = s.size();
      while (i < s.size()) {
        std::size_t j = i;
        auto cp = unicode::next_code_point(s, j);
        if (!cp) break;
        if (unicode::is_white_space(*cp)) {
          if (run == s.size()) run = i;
        } else {
          run = s.size();
        }
        i = j;
      }
      e = run;
    }
    s = s.substr(b, e - b);
  }

 private:
  bool left_, right_;
};

// ---------------------------------------------------------------- pre-tokenizers

enum class Behavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

Behavior parse_behavior(const json& j, const Field& f) {
  static const std::unordered_map<std::string, Behavior> kinds = {
      {"Removed", Behavior::Removed},
      {"Isolated", Behavior::Isolated},
      {"MergedWithPrevious", Behavior::MergedWithPrevious},
      {"MergedWithNext", Behavior::MergedWithNext},
      {"Contiguous", Behavior::Contiguous}};
  const std::string s = get_string(j, f, "behavior");
  auto it = kinds.find(s);
  if (it == kinds.end())
    f["behavior"].fail("'", s,
                       "' is not one of Removed, Isolated, MergedWithPrevious, "
                       "MergedWithNext, Contiguous");
  return it->second;
}

// The pieces of `p` after splitting at `matches` the way tokenizers' split(pattern, behavior)
// does (empty pieces dropped).
void split_piece(const Piece& p, const std::vector<Span>& matches, Behavior behavior, bool invert,
                 std::vector<Piece>& out) {
  struct Seg {
    std::size_t b, e;
    bool match;
  };
  std::vector<Seg> segs;
  std::size_t at = 0;
  for (auto [b, e] : matches) {
    if (b > at) segs.push_back({at, b, invert});
    segs.push_back({b, e, !invert});
    at = e;
  }
  if (at < p.text.size()) segs.push_back({at, p.text.size(), invert});

  std::vector<Span> keep;
  bool previous_match = false;
  switch (behavior) {
    case Behavior::Removed:
      for (const Seg& s : segs)
        if (!s.match) keep.emplace_back(s.b, s.e);
      break;
    case Behavior::Isolated:
      for (const Seg& s : segs) keep.emplace_back(s.b, s.e);
      break;
    case Behavior::MergedWithPrevious:
      for (const Seg& s : segs) {
        if (s.match && !previous_match && !keep.empty())
          keep.back().second = s.e;
        else
          keep.emplace_back(s.b, s.e);
        previous_match = s.match;
      }
      break;
    case Behavior::MergedWithNext:
      for (auto it = segs.rbegin(); it != segs.rend(); ++it) {
        if (it->match && !previous_match && !keep.empty())
          keep.back().first = it->b;
        else
          keep.emplace_back(it->b, it->e);
        previous_match = it->match;
      }
      std::reverse(keep.begin(), keep.end());
      break;
    case Behavior::Contiguous:
      for (const Seg& s : segs) {
        if (s.match == previous_match && !keep.empty())
          keep.back().second = s.e;
        else
          keep.emplace_back(s.b, s.e);
        previous_match = s.match;
      }
      break;
  }
  for (auto [b, e] : keep)
    if (e > b) out.push_back({p.text.substr(b, e - b), p.first && b == 0});
}

class SplitPreTokenizer : public PreTokenizer {
 public:
  SplitPreTokenizer(Pattern pattern, Behavior behavior, bool invert)
      : pattern_(std::move(pattern)), behavior_(behavior), invert_(invert) {}
  void apply(std::vector<Piece>& pieces, std::size_t) const override {
    std::vector<Piece> out;
    for (const Piece& p : pieces) split_piece(p, pattern_.matches(p.text), behavior_, invert_, out);
    pieces = std::move(out);
  }

 private:
  Pattern pattern_;
  Behavior behavior_;
  bool invert_;
};

// GPT-2's pattern (\s as White_Space; see unicode.h).
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

class ByteLevelPreTokenizer : public PreTokenizer {
 public:
  ByteLevelPreTokenizer(bool add_prefix_space, bool use_regex)
      : add_prefix_space_(add_prefix_space), use_regex_(use_regex) {
    const auto cps = unicode::byte_code_points();
    for (int b = 0; b < 256; ++b) chars_[std::size_t(b)] = unicode::utf8(cps[std::size_t(b)]);
  }
  void apply(std::vector<Piece>& pieces, std::size_t cap) const override {
    std::vector<Piece> split;
    for (Piece& p : pieces) {
      if (add_prefix_space_ && !p.text.starts_with(' ')) p.text.insert(0, " ");
      if (use_regex_)
        split_piece(p, gpt2().matches(p.text), Behavior::Isolated, false, split);
      else if (!p.text.empty())
        split.push_back(std::move(p));
    }
    std::size_t total = 0;
    for (const Piece& p : split) total += 2 * p.text.size();  // each byte to at most 2 bytes
    check_cap(total, cap, "ByteLevel pre-tokenizer");
    for (Piece& p : split) {
      std::string mapped;
      mapped.reserve(p.text.size() * 2);
      for (char c : p.text) mapped += chars_[static_cast<unsigned char>(c)];
      p.text = std::move(mapped);
    }
    pieces = std::move(split);
  }

 private:
  static const Pattern& gpt2() {
    static const Pattern p(kGpt2Pattern);
    return p;
  }
  bool add_prefix_space_, use_regex_;
  std::array<std::string, 256> chars_;
};

enum class Prepend { Always, First, Never };

Prepend parse_prepend_scheme(const json& j, const Field& f) {
  if (j.contains("prepend_scheme") && !j["prepend_scheme"].is_null()) {
    const std::string s = get_string(j, f, "prepend_scheme");
    if (s == "always") return Prepend::Always;
    if (s == "first") return Prepend::First;
    if (s == "never") return Prepend::Never;
    f["prepend_scheme"].fail("'", s, "' is not one of always, first, never");
  }
  return get_bool(j, f, "add_prefix_space", true) ? Prepend::Always : Prepend::Never;
}

class MetaspacePreTokenizer : public PreTokenizer {
 public:
  MetaspacePreTokenizer(uint32_t replacement, Prepend scheme, bool split)
      : rep_(unicode::utf8(replacement)), scheme_(scheme), split_(split) {}
  void apply(std::vector<Piece>& pieces, std::size_t cap) const override {
    std::size_t total = 0;
    for (const Piece& p : pieces) total += p.text.size() * rep_.size() + rep_.size();
    check_cap(total, cap, "Metaspace pre-tokenizer");
    std::vector<Piece> out;
    for (Piece& p : pieces) {
      p.text = replace_all(p.text, spaces(p.text), rep_);
      if (!p.text.starts_with(rep_) &&
          (scheme_ == Prepend::Always || (scheme_ == Prepend::First && p.first)))
        p.text.insert(0, rep_);
      if (!split_) {
        if (!p.text.empty()) out.push_back(std::move(p));
        continue;
      }
      std::vector<Span> at;
      for (std::size_t i = p.text.find(rep_); i != std::string::npos;
           i = p.text.find(rep_, i + rep_.size()))
        at.emplace_back(i, i + rep_.size());
      split_piece(p, at, Behavior::MergedWithNext, false, out);
    }
    pieces = std::move(out);
  }

 private:
  static std::vector<Span> spaces(const std::string& s) {
    std::vector<Span> out;
    for (std::size_t i = s.find(' '); i != std::string::npos; i = s.find(' ', i + 1))
      out.emplace_back(i, i + 1);
    return out;
  }
  std::string rep_;
  Prepend scheme_;
  bool split_;
};

class SequencePreTokenizer : public PreTokenizer {
 public:
  std::vector<std::unique_ptr<PreTokenizer>> steps;
  void apply(std::vector<Piece>& pieces, std::size_t cap) const override {
    for (const auto& s : steps) s->apply(pieces, cap);
  }
};

// ---------------------------------------------------------------- decoders

class SequenceDecoder : public Decoder {
 public:
  std::vector<std::unique_ptr<Decoder>> steps;
  void apply(std::vector<std::string>& tokens) const override {
    for (const auto& s : steps) s->apply(tokens);
  }
};

class ByteLevelDecoder : public Decoder {
 public:
  ByteLevelDecoder() {
    const auto cps = unicode::byte_code_points();
    for (int b = 0; b < 256; ++b) byte_[cps[std::size_t(b)]] = uint8_t(b);
  }
  void apply(std::vector<std::string>& tokens) const override {
    std::string bytes;
    for (const std::string& t : tokens) {
      std::string mapped;
      bool all = true;
      for (std::size_t i = 0; i < t.size();) {
        auto cp = unicode::next_code_point(t, i);
        auto it = cp ? byte_.find(*cp) : byte_.end();
        if (it == byte_.end()) {
          all = false;
          break;
        }
        mapped += char(it->second);
      }
      bytes += all ? mapped : t;  // a token that is not byte-level text: its own bytes
    }
    tokens.assign(1, unicode::utf8_lossy(bytes));
  }

 private:
  std::unordered_map<uint32_t, uint8_t> byte_;
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(uint32_t replacement, Prepend scheme)
      : rep_(unicode::utf8(replacement)), scheme_(scheme) {}
  void apply(std::vector<std::string>& tokens) const override {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      const bool drop = i == 0 && scheme_ != Prepend::Never;  // every one in the first token
      std::string out;
      std::string_view t = tokens[i];
      for (std::size_t at = 0;;) {
        const std::size_t next = t.find(rep_, at);
        out.append(t.substr(at, next - at));
        if (next == std::string_view::npos) break;
        if (!drop) out += ' ';
        at = next + rep_.size();
      }
      tokens[i] = std::move(out);
    }
  }

 private:
  std::string rep_;
  Prepend scheme_;
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(const json& j, const Field& f)
      : pattern_(member(j, f, "pattern"), f["pattern"]), content_(get_string(j, f, "content")) {}
  void apply(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) t = replace_all(t, pattern_.matches(t), content_);
  }

 private:
  Pattern pattern_;
  std::string content_;
};

// "<0x41>" -> 0x41; -1 when the token is not of that form.
int byte_token(std::string_view t) {
  if (t.size() != 6 || !t.starts_with("<0x") || t[5] != '>') return -1;
  unsigned v = 0;
  auto [ptr, ec] = std::from_chars(t.data() + 3, t.data() + 5, v, 16);
  return ec == std::errc() && ptr == t.data() + 5 ? int(v) : -1;
}

class ByteFallbackDecoder : public Decoder {
 public:
  void apply(std::vector<std::string>& tokens) const override {
    std::vector<std::string> out;
    std::string bytes;
    std::size_t n_bytes = 0;
    auto flush = [&] {
      if (n_bytes == 0) return;
      if (unicode::invalid_utf8_at(bytes)) {
        for (std::size_t k = 0; k < n_bytes; ++k) out.emplace_back("\xEF\xBF\xBD");
      } else {
        out.push_back(bytes);
      }
      bytes.clear();
      n_bytes = 0;
    };
    for (std::string& t : tokens) {
      const int b = byte_token(t);
      if (b >= 0) {
        bytes += char(b);
        ++n_bytes;
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens = std::move(out);
  }
};

class FuseDecoder : public Decoder {
 public:
  void apply(std::vector<std::string>& tokens) const override {
    std::string all;
    for (const std::string& t : tokens) all += t;
    tokens.assign(1, std::move(all));
  }
};

class StripDecoder : public Decoder {
 public:
  StripDecoder(uint32_t content, std::size_t start, std::size_t stop)
      : content_(content), start_(start), stop_(stop) {}
  void apply(std::vector<std::string>& tokens) const override {
    for (std::string& t : tokens) {
      std::vector<std::pair<uint32_t, std::size_t>> chars;  // (code point, byte offset)
      for (std::size_t i = 0; i < t.size();) {
        const std::size_t at = i;
        auto cp = unicode::next_code_point(t, i);
        if (!cp) {  // not UTF-8 (cannot come from a vocabulary): leave it
          chars.clear();
          break;
        }
        chars.emplace_back(*cp, at);
      }
      std::size_t start_cut = 0;
      for (std::size_t i = 0; i < std::min(start_, chars.size()) && chars[i].first == content_; ++i)
        start_cut = i + 1;
      std::size_t stop_cut = chars.size();
      for (std::size_t i = 0; i < std::min(stop_, chars.size() - start_cut); ++i) {
        const std::size_t k = chars.size() - i - 1;
        if (chars[k].first != content_) break;
        stop_cut = k;
      }
      if (chars.empty()) continue;
      const std::size_t b = start_cut < chars.size() ? chars[start_cut].second : t.size();
      const std::size_t e = stop_cut < chars.size() ? chars[stop_cut].second : t.size();
      t = t.substr(b, e > b ? e - b : 0);
    }
  }

 private:
  uint32_t content_;
  std::size_t start_, stop_;
};

const json& get_array(const json& j, const Field& f, const char* key) {
  auto it = j.find(key);
  if (it == j.end() || !it->is_array()) f[key].fail("expected an array");
  return *it;
}

std::size_t get_count(const json& j, const Field& f, const char* key) {
  const int64_t v = get_int(j, f, key, 0);
  if (v < 0) f[key].fail("expected a count, got ", v);
  return std::size_t(v);
}

}  // namespace

std::unique_ptr<Normalizer> parse_normalizer(const json& j, const Field& f) {
  if (j.is_null()) return nullptr;
  const std::string type = get_type(j, f);
  if (type == "Sequence") {
    auto seq = std::make_unique<SequenceNormalizer>();
    const json& list = get_array(j, f, "normalizers");
    for (std::size_t i = 0; i < list.size(); ++i)
      if (auto n = parse_normalizer(list[i], f["normalizers"][i]))
        seq->steps.push_back(std::move(n));
    return seq;
  }
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD")
    return std::make_unique<UnicodeNormalizer>(type, f);
  if (type == "Replace") return std::make_unique<ReplaceNormalizer>(j, f);
  if (type == "Prepend") return std::make_unique<PrependNormalizer>(get_string(j, f, "prepend"));
  if (type == "Strip")
    return std::make_unique<StripNormalizer>(get_bool(j, f, "strip_left", true),
                                             get_bool(j, f, "strip_right", true));
  f["type"].fail("normalizer '", type,
                 "' is not supported (attn has Sequence, NFC, NFD, NFKC, "
                 "NFKD, Replace, Prepend, Strip)");
}

std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const json& j, const Field& f) {
  if (j.is_null()) return nullptr;
  const std::string type = get_type(j, f);
  if (type == "Sequence") {
    auto seq = std::make_unique<SequencePreTokenizer>();
    const json& list = get_array(j, f, "pretokenizers");
    for (std::size_t i = 0; i < list.size(); ++i)
      if (auto p = parse_pre_tokenizer(list[i], f["pretokenizers"][i]))
        seq->steps.push_back(std::move(p));
    return seq;
  }
  if (type == "ByteLevel")
    return std::make_unique<ByteLevelPreTokenizer>(get_bool(j, f, "add_prefix_space", true),
                                                   get_bool(j, f, "use_regex", true));
  if (type == "Split") {
    if (!j.contains("pattern")) f["pattern"].fail("missing");
    return std::make_unique<SplitPreTokenizer>(
        Pattern(j["pattern"], f["pattern"]), parse_behavior(j, f), get_bool(j, f, "invert", false));
  }
  if (type == "Metaspace")
    return std::make_unique<MetaspacePreTokenizer>(
        get_char(j, f, "replacement"), parse_prepend_scheme(j, f), get_bool(j, f, "split", true));
  if (type == "Digits")
    return std::make_unique<SplitPreTokenizer>(
        Pattern(R"(\p{N})"),
        get_bool(j, f, "individual_digits", false) ? Behavior::Isolated : Behavior::Contiguous,
        false);
  if (type == "Whitespace")
    return std::make_unique<SplitPreTokenizer>(Pattern(R"(\w+|[^\w\s]+)"), Behavior::Removed, true);
  if (type == "WhitespaceSplit")
    return std::make_unique<SplitPreTokenizer>(Pattern(R"(\s+)"), Behavior::Removed, false);
  f["type"].fail("pre-tokenizer '", type,
                 "' is not supported (attn has Sequence, ByteLevel, "
                 "Split, Metaspace, Digits, Whitespace, WhitespaceSplit)");
}

std::unique_ptr<Decoder> parse_decoder(const json& j, const Field& f) {
  if (j.is_null()) return nullptr;
  const std::string type = get_type(j, f);
  if (type == "Sequence") {
    auto seq = std::make_unique<SequenceDecoder>();
    const json& list = get_array(j, f, "decoders");
    for (std::size_t i = 0; i < list.size(); ++i)
      if (auto d = parse_decoder(list[i], f["decoders"][i])) seq->steps.push_back(std::move(d));
    return seq;
  }
  if (type == "ByteLevel") return std::make_unique<ByteLevelDecoder>();
  if (type == "Metaspace")
    return std::make_unique<MetaspaceDecoder>(get_char(j, f, "replacement"),
                                              parse_prepend_scheme(j, f));
  if (type == "Replace") return std::make_unique<ReplaceDecoder>(j, f);
  if (type == "ByteFallback") return std::make_unique<ByteFallbackDecoder>();
  if (type == "Fuse") return std::make_unique<FuseDecoder>();
  if (type == "Strip")
    return std::make_unique<StripDecoder>(get_char(j, f, "content"), get_count(j, f, "start"),
                                          get_count(j, f, "stop"));
  f["type"].fail("decoder '", type,
                 "' is not supported (attn has Sequence, ByteLevel, "
                 "Metaspace, Replace, ByteFallback, Fuse, Strip)");
}

}  // namespace attn::data::tok

// Character-level text data: UTF-8 decoding, the tokenizer and nanoGPT-style batches.
#include <attn/data.h>
#include <attn/ops.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <set>

#include "../common/error.h"
#include "../io/file_internal.h"

namespace attn::data {
namespace {

using nlohmann::json;

// Decodes the code point starting at s[pos] (strict UTF-8: no overlong forms, surrogates or
// values above U+10FFFF). Returns its length in bytes, or 0 when the bytes there are invalid.
std::size_t decode_one(std::string_view s, std::size_t pos, uint32_t& cp) {
  const auto b0 = uint8_t(s[pos]);
  if (b0 < 0x80) {
    cp = b0;
    return 1;
  }
  std::size_t len;
  uint32_t min;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    len = 2, min = 0x80, cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    len = 3, min = 0x800, cp = b0 & 0x0F;
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    len = 4, min = 0x10000, cp = b0 & 0x07;
  } else {
    return 0;
  }
  if (s.size() - pos < len) return 0;
  for (std::size_t i = 1; i < len; ++i) {
    const auto b = uint8_t(s[pos + i]);
    if ((b & 0xC0) != 0x80) return 0;
    cp = (cp << 6) | (b & 0x3F);
  }
  if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return 0;
  return len;
}

// Byte offset of the first invalid UTF-8 sequence, or npos.
std::size_t first_invalid_utf8(std::string_view s) {
  uint32_t cp;
  for (std::size_t pos = 0; pos < s.size();) {
    const std::size_t n = decode_one(s, pos, cp);
    if (n == 0) return pos;
    pos += n;
  }
  return std::string_view::npos;
}

std::string encode_one(uint32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out.push_back(char(cp));
  } else if (cp < 0x800) {
    out.push_back(char(0xC0 | (cp >> 6)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(char(0xE0 | (cp >> 12)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(char(0xF0 | (cp >> 18)));
    out.push_back(char(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(char(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(char(0x80 | (cp & 0x3F)));
  }
  return out;
}

// "'a' (U+0061)", or an escape such as "'\n' (U+000A)" for control characters.
std::string describe_char(uint32_t cp) {
  char code[16];
  std::snprintf(code, sizeof code, "U+%04X", unsigned(cp));
  std::string shown;
  switch (cp) {
    case '\n': shown = "\\n"; break;
    case '\t': shown = "\\t"; break;
    case '\r': shown = "\\r"; break;
    case '\'': shown = "\\'"; break;
    case '\\': shown = "\\\\"; break;
    default:
      if (cp < 0x20 || (cp >= 0x7F && cp <= 0x9F) || cp == 0x2028 || cp == 0x2029 || cp == 0xFEFF) {
        char esc[16];
        if (cp <= 0xFF) {
          std::snprintf(esc, sizeof esc, "\\x%02x", unsigned(cp));
        } else {
          std::snprintf(esc, sizeof esc, "\\u%04x", unsigned(cp));
        }
        shown = esc;
      } else {
        shown = encode_one(cp);
      }
  }
  return "'" + shown + "' (" + code + ")";
}

}  // namespace

std::string read_text_file(const std::string& path) {
  constexpr const char* fn = "read_text_file";
  std::string text = io::detail::read_whole_file(fn, path);
  if (text.empty()) detail::fail(fn, "'", path, "' is empty");
  if (const auto nul = text.find('\0'); nul != std::string::npos)
    detail::fail(fn, "'", path, "' is not text: NUL byte at byte offset ", nul);
  if (const auto bad = first_invalid_utf8(text); bad != std::string_view::npos)
    detail::fail(fn, "'", path, "' is not valid UTF-8: invalid byte sequence at byte offset ", bad);
  return text;
}

// ---- CharTokenizer
// ----------------------------------------------------------------------------------

CharTokenizer CharTokenizer::from_text(std::string_view utf8_text) {
  constexpr const char* fn = "CharTokenizer::from_text";
  if (utf8_text.empty()) detail::fail(fn, "the text is empty");
  std::set<uint32_t> seen;
  uint32_t cp;
  for (std::size_t pos = 0; pos < utf8_text.size();) {
    const std::size_t n = decode_one(utf8_text, pos, cp);
    if (n == 0) detail::fail(fn, "invalid UTF-8 at byte offset ", pos);
    seen.insert(cp);
    pos += n;
  }
  std::vector<std::string> chars;
  chars.reserve(seen.size());
  for (uint32_t c : seen) chars.push_back(encode_one(c));
  return CharTokenizer(std::move(chars));
}

CharTokenizer::CharTokenizer(std::vector<std::string> chars) : chars_(std::move(chars)) {
  constexpr const char* fn = "CharTokenizer";
  index_.reserve(chars_.size());
  for (std::size_t i = 0; i < chars_.size(); ++i) {
    const std::string& c = chars_[i];
    uint32_t cp = 0;
    if (c.empty() || decode_one(c, 0, cp) != c.size())
      detail::fail(fn, "entry ", i, " is not exactly one valid UTF-8 character");
    if (!index_.empty() && cp <= index_.back().first) {
      detail::fail(fn, "entry ", i, " ", describe_char(cp),
                   cp == index_.back().first ? " is a duplicate"
                                             : " is out of order (code points must increase)");
    }
    index_.emplace_back(cp, int64_t(i));
  }
}

std::vector<int64_t> CharTokenizer::encode(std::string_view utf8_text) const {
  constexpr const char* fn = "CharTokenizer::encode";
  std::vector<int64_t> ids;
  ids.reserve(utf8_text.size());
  uint32_t cp;
  for (std::size_t pos = 0; pos < utf8_text.size();) {
    const std::size_t n = decode_one(utf8_text, pos, cp);
    if (n == 0) detail::fail(fn, "invalid UTF-8 at byte offset ", pos);
    auto it = std::lower_bound(index_.begin(), index_.end(), std::make_pair(cp, int64_t(0)));
    if (it == index_.end() || it->first != cp) {
      detail::fail(fn, "character ", describe_char(cp), " at position ", ids.size(),
                   " is not in the vocabulary of ", chars_.size(), " characters");
    }
    ids.push_back(it->second);
    pos += n;
  }
  return ids;
}

std::string CharTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  out.reserve(ids.size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const int64_t id = ids[i];
    if (id < 0 || id >= vocab_size()) {
      throw IndexError(detail::msg("CharTokenizer::decode", "id ", id, " at position ", i,
                                   " is out of range for vocabulary size ", vocab_size()));
    }
    out += chars_[std::size_t(id)];
  }
  return out;
}

std::string CharTokenizer::decode(int64_t id) const {
  if (id < 0 || id >= vocab_size()) {
    throw IndexError(detail::msg("CharTokenizer::decode", "id ", id,
                                 " is out of range for vocabulary size ", vocab_size()));
  }
  return chars_[std::size_t(id)];
}

std::string CharTokenizer::to_json() const {
  json j = json::object();
  j["type"] = "char";
  j["chars"] = chars_;
  return j.dump();
}

CharTokenizer CharTokenizer::from_json(std::string_view text) {
  constexpr const char* fn = "CharTokenizer::from_json";
  // Rejects repeated keys, which nlohmann would silently collapse.
  std::vector<std::set<std::string>> open;
  auto cb = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (depth > 4) detail::fail(fn, "JSON is nested too deeply");
    if (ev == json::parse_event_t::object_start) open.emplace_back();
    if (ev == json::parse_event_t::object_end && !open.empty()) open.pop_back();
    if (ev == json::parse_event_t::key && !open.empty() &&
        !open.back().insert(parsed.get<std::string>()).second)
      detail::fail(fn, "JSON has the key '", parsed.get<std::string>(), "' more than once");
    return true;
  };
  json j;
  try {
    j = json::parse(text.begin(), text.end(), cb);
  } catch (const json::exception& e) {
    detail::fail(fn, "invalid JSON: ", e.what());
  }
  if (!j.is_object()) detail::fail(fn, "expected a JSON object, got ", j.type_name());
  for (auto it = j.begin(); it != j.end(); ++it)
    if (it.key() != "type" && it.key() != "chars")
      detail::fail(fn, "unknown field '", it.key(), "'");
  if (!j.contains("type") || !j["type"].is_string() || j["type"].get<std::string>() != "char")
    detail::fail(fn, "\"type\" must be \"char\"");
  if (!j.contains("chars") || !j["chars"].is_array())
    detail::fail(fn, "\"chars\" must be an array of strings");
  const json& arr = j["chars"];
  if (arr.empty()) detail::fail(fn, "\"chars\" is empty");
  std::vector<std::string> chars;
  chars.reserve(arr.size());
  for (std::size_t i = 0; i < arr.size(); ++i) {
    if (!arr[i].is_string()) detail::fail(fn, "\"chars\"[", i, "] is not a string");
    chars.push_back(arr[i].get<std::string>());
  }
  try {
    return CharTokenizer(std::move(chars));
  } catch (const Error& e) {
    detail::fail(fn, "invalid \"chars\": ", e.what());
  }
}

// ---- TextDataset
// ------------------------------------------------------------------------------------

TextDataset::TextDataset(std::vector<int64_t> tokens, double train_fraction) {
  if (!(train_fraction >= 0.0 && train_fraction <= 1.0))
    detail::fail("TextDataset", "train_fraction ", train_fraction, " is not in [0, 1]");
  // nanoGPT: n = int(0.9 * len(data)).
  const auto n_train = std::size_t(double(tokens.size()) * train_fraction);
  val_.assign(tokens.begin() + std::ptrdiff_t(n_train), tokens.end());
  tokens.resize(n_train);
  train_ = std::move(tokens);
}

// nanoGPT's offsets ix = randint(len(split) - block_size, (batch_size,)), and the rows they cut.
std::pair<Tensor, Tensor> TextDataset::rows(const char* fn, bool train, int64_t batch_size,
                                            int64_t block_size, Generator* gen,
                                            Tensor* offsets) const {
  if (batch_size <= 0) detail::fail(fn, "batch_size must be positive, got ", batch_size);
  if (block_size <= 0) detail::fail(fn, "block_size must be positive, got ", block_size);
  const std::vector<int64_t>& split = train ? train_ : val_;
  const int64_t n = int64_t(split.size());
  if (n <= block_size) {
    detail::fail(fn, "the ", train ? "train" : "validation", " split has ", n,
                 " tokens: corpus shorter than the block size ", block_size,
                 " plus one (use a longer text or a smaller block size)");
  }
  const Tensor ix = attn::randint(n - block_size, {batch_size}, gen).contiguous();
  Tensor x = attn::empty({batch_size, block_size}, Dtype::Int64);
  Tensor y = attn::empty({batch_size, block_size}, Dtype::Int64);
  const int64_t* offs = ix.data_ptr<int64_t>();
  int64_t* px = x.data_ptr<int64_t>();
  int64_t* py = y.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch_size; ++b) {
    const int64_t* src = split.data() + offs[b];
    std::copy(src, src + block_size, px + b * block_size);
    std::copy(src + 1, src + 1 + block_size, py + b * block_size);
  }
  if (offsets) *offsets = ix;
  return {x, y};
}

std::pair<Tensor, Tensor> TextDataset::batch(bool train, int64_t batch_size, int64_t block_size,
                                             Generator* gen) const {
  return rows("TextDataset::batch", train, batch_size, block_size, gen, nullptr);
}

namespace {

// starts[i] = 1 where a document begins: at 0 and after each occurrence of sep.
std::vector<uint8_t> document_starts(const std::vector<int64_t>& tokens,
                                     const std::vector<int64_t>& sep) {
  std::vector<uint8_t> starts(tokens.size(), 0);
  if (!starts.empty()) starts[0] = 1;
  auto it = tokens.begin();
  while ((it = std::search(it, tokens.end(), sep.begin(), sep.end())) != tokens.end()) {
    it += std::ptrdiff_t(sep.size());
    if (it != tokens.end()) starts[std::size_t(it - tokens.begin())] = 1;
  }
  return starts;
}

}  // namespace

int64_t TextDataset::set_document_separator(const std::vector<int64_t>& separator) {
  if (separator.empty())
    detail::fail("TextDataset::set_document_separator", "the separator has no tokens");
  separator_ = separator;
  train_starts_ = document_starts(train_, separator_);
  val_starts_ = document_starts(val_, separator_);
  int64_t n = 0;
  for (uint8_t s : train_starts_) n += s;
  for (uint8_t s : val_starts_) n += s;
  return n;
}

TextDataset::PackedBatch TextDataset::packed_batch(bool train, int64_t batch_size,
                                                   int64_t block_size, Generator* gen) const {
  constexpr const char* fn = "TextDataset::packed_batch";
  if (!has_documents())
    detail::fail(fn, "no document separator is set (call set_document_separator first)");
  Tensor ix;
  auto [x, y] = rows(fn, train, batch_size, block_size, gen, &ix);
  const std::vector<uint8_t>& starts = train ? train_starts_ : val_starts_;
  Tensor positions = attn::empty({batch_size, block_size}, Dtype::Int64);
  const int64_t* offs = ix.data_ptr<int64_t>();
  int64_t* pos = positions.data_ptr<int64_t>();
  int64_t* py = y.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch_size; ++b) {
    const uint8_t* s = starts.data() + offs[b];
    int64_t p = 0;
    for (int64_t t = 0; t < block_size; ++t) {
      p = t == 0 || s[t] ? 0 : p + 1;
      pos[b * block_size + t] = p;
      // y[t] is token t + 1 of the window: unseen when it begins a document.
      if (s[t + 1]) py[b * block_size + t] = -100;
    }
  }
  return {x, y, positions};
}

}  // namespace attn::data

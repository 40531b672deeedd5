// Vocabulary (the first reference tutorial, `attn walkthrough 000`; see include/attn/nn.h):
//   {s: i for i, s in enumerate(sorted(sentence.replace(',', '').split()))}
#include <attn/nn.h>
#include <attn/ops.h>

#include <algorithm>
#include <cstdio>

#include "../common/error.h"

namespace attn::nn {

namespace {

// Python's str.isspace() for ASCII: space, \t \n \v \f \r and the separators \x1c-\x1f.
bool is_space(unsigned char c) {
  return c == ' ' || (c >= '\t' && c <= '\r') || (c >= 0x1c && c <= 0x1f);
}

// Python's repr of a str: single quotes unless the text has ' and no ", with escapes.
std::string py_repr(const std::string& s) {
  const bool dq = s.find('\'') != std::string::npos && s.find('"') == std::string::npos;
  const char quote = dq ? '"' : '\'';
  std::string out(1, quote);
  for (unsigned char c : s) {
    if (c == '\\')
      out += "\\\\";
    else if (c == quote)
      out += std::string("\\") + char(quote);
    else if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", c);
      out += buf;
    } else {
      out += char(c);  // printable ASCII and UTF-8 bytes of non-ASCII text, kept as they are
    }
  }
  return out + quote;
}

}  // namespace

std::vector<std::string> Vocabulary::tokenize(const std::string& sentence) {
  // sentence.replace(',', '').split(): commas vanish (they do not separate words), then split on
  // runs of (ASCII) whitespace.
  std::vector<std::string> words;
  std::string cur;
  for (char c : sentence) {
    if (c == ',') continue;
    if (is_space(static_cast<unsigned char>(c))) {
      if (!cur.empty()) words.push_back(std::move(cur));
      cur.clear();
    } else {
      cur += c;
    }
  }
  if (!cur.empty()) words.push_back(std::move(cur));
  return words;
}

Vocabulary::Vocabulary(const std::string& sentence) {
  // sorted() compares code points; byte order of UTF-8 is the same order.
  words_ = tokenize(sentence);
  std::sort(words_.begin(), words_.end());
  // A repeated word gets one id: ids stay 0..size()-1. (The tutorial's dict comprehension would
  // give a repeated word the index of its last copy and leave gaps; its sentence has no repeats.)
  words_.erase(std::unique(words_.begin(), words_.end()), words_.end());
  for (size_t i = 0; i < words_.size(); ++i) ids_[words_[i]] = int64_t(i);
}

int64_t Vocabulary::id(const std::string& word) const {
  auto it = ids_.find(word);
  if (it == ids_.end())
    throw IndexError(detail::msg("Vocabulary.id", "unknown word ", py_repr(word),
                                 " (vocabulary of ", words_.size(), " words)"));
  return it->second;
}

Tensor Vocabulary::encode(const std::string& sentence) const {
  std::vector<std::string> words = tokenize(sentence);
  Tensor out = empty({int64_t(words.size())}, Dtype::Int64);
  int64_t* p = out.data_ptr<int64_t>();
  for (size_t i = 0; i < words.size(); ++i) p[i] = id(words[i]);
  return out;
}

std::string Vocabulary::repr() const {
  std::string s = "{";
  for (size_t i = 0; i < words_.size(); ++i)
    s += (i ? ", " : "") + py_repr(words_[i]) + ": " + std::to_string(i);
  return s + "}";
}

}  // namespace attn::nn

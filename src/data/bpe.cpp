// GPT-2's byte-level BPE (include/attn/bpe.h).
#include <attn/bpe.h>
#include <attn/io.h>
#include <attn/tensor.h>

#include <array>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "../common/error.h"
#include "unicode.h"
#include "word_cache.h"

namespace attn::data {

using unicode::byte_code_points;
using unicode::next_code_point;
using unicode::utf8;

namespace {

using json = nlohmann::json;
constexpr const char* kFn = "BpeTokenizer";
constexpr const char* kEndOfText = "<|endoftext|>";
// GPT-2's pattern with \s spelt \p{White_Space}: PCRE2's \s also takes U+180E (Unicode's
// White_Space until 6.3), which Python's regex module (GPT2Tokenizer) and Oniguruma (the fast
// tokenizer) do not.
constexpr const char* kPattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\p{White_Space}\p{L}\p{N}]+)"
    R"(|\p{White_Space}+(?!\P{White_Space})|\p{White_Space}+)";

const unicode::Regex& pattern() {
  static const unicode::Regex p(kPattern, kFn, "GPT-2's pattern");
  return p;
}

struct PairHash {
  std::size_t operator()(const std::pair<int64_t, int64_t>& p) const {
    return std::hash<uint64_t>()(uint64_t(p.first) * 0x9E3779B97F4A7C15ull ^ uint64_t(p.second));
  }
};

}  // namespace

struct BpeTokenizer::Impl {
  std::vector<std::string> tokens;               // id -> token
  std::unordered_map<std::string, int64_t> ids;  // token -> id
  std::unordered_map<std::pair<int64_t, int64_t>, std::pair<int64_t, int64_t>, PairHash>
      merges;                          // (left id, right id) -> (rank, merged id)
  std::array<int64_t, 256> byte_id{};  // -1: the byte's symbol is not a token
  std::array<uint32_t, 256> byte_cp{};
  std::unordered_map<uint32_t, uint8_t> cp_byte;
  int64_t eot = -1;
  WordCache cache;

  std::vector<int64_t> bpe(std::string_view word) const;
  void append_piece(std::string_view text, std::size_t base, std::vector<int64_t>& out,
                    std::vector<std::string>* words) const;
};

std::vector<int64_t> BpeTokenizer::Impl::bpe(std::string_view word) const {
  std::vector<int64_t> sym;
  sym.reserve(word.size());
  for (char ch : word) {
    const auto b = static_cast<unsigned char>(ch);
    if (byte_id[b] < 0)
      detail::fail(kFn, "the vocabulary has no token for byte 0x", "0123456789abcdef"[b >> 4],
                   "0123456789abcdef"[b & 15], " (symbol '", utf8(byte_cp[b]), "')");
    sym.push_back(byte_id[b]);
  }
  // GPT-2's loop: merge every occurrence (left to right) of the pair of lowest rank.
  while (sym.size() > 1) {
    int64_t best = std::numeric_limits<int64_t>::max(), merged = -1;
    std::pair<int64_t, int64_t> pair;
    for (std::size_t i = 0; i + 1 < sym.size(); ++i) {
      auto it = merges.find({sym[i], sym[i + 1]});
      if (it != merges.end() && it->second.first < best) {
        best = it->second.first;
        merged = it->second.second;
        pair = {sym[i], sym[i + 1]};
      }
    }
    if (merged < 0) break;
    std::size_t w = 0;
    for (std::size_t i = 0; i < sym.size(); ++w) {
      if (i + 1 < sym.size() && sym[i] == pair.first && sym[i + 1] == pair.second) {
        sym[w] = merged;
        i += 2;
      } else {
        sym[w] = sym[i++];
      }
    }
    sym.resize(w);
  }
  return sym;
}

void BpeTokenizer::Impl::append_piece(std::string_view text, std::size_t base,
                                      std::vector<int64_t>& out,
                                      std::vector<std::string>* words) const {
  if (text.empty()) return;
  if (auto bad = unicode::invalid_utf8_at(text))
    detail::fail(kFn, "the text is not valid UTF-8 at byte ", base + *bad);
  for (auto [begin, end] : pattern().matches(text)) {
    const std::string_view word = text.substr(begin, end - begin);
    if (words) {
      words->emplace_back(word);
      continue;
    }
    cache.append(word, out, [this](std::string_view w) { return bpe(w); });
  }
}

BpeTokenizer BpeTokenizer::from_files(const std::string& vocab_json_path,
                                      const std::string& merges_txt_path) {
  const std::string vocab = io::read_file(vocab_json_path);
  const std::string merges = io::read_file(merges_txt_path);
  return from_strings(vocab, merges, vocab_json_path, merges_txt_path);
}

BpeTokenizer BpeTokenizer::from_strings(std::string_view vocab_json, std::string_view merges_txt,
                                        const std::string& vocab_name,
                                        const std::string& merges_name) {
  auto impl = std::make_shared<Impl>();
  // ---- vocab.json
  json j;
  try {
    j = json::parse(vocab_json);
  } catch (const json::exception& e) {
    detail::fail(kFn, "'", vocab_name, "': not valid JSON: ", e.what());
  }
  if (!j.is_object() || j.empty())
    detail::fail(kFn, "'", vocab_name, "': expected a non-empty JSON object {\"token\": id, ...}");
  const std::size_t n = j.size();
  impl->tokens.assign(n, std::string());
  std::vector<bool> seen(n, false);
  for (auto it = j.begin(); it != j.end(); ++it) {
    const json& v = it.value();
    const std::string& tok = it.key();
    if (tok.empty()) detail::fail(kFn, "'", vocab_name, "': a token is the empty string");
    if (!v.is_number_integer() || v.get<int64_t>() < 0 || uint64_t(v.get<int64_t>()) >= n)
      detail::fail(kFn, "'", vocab_name, "': token '", tok, "' has id ", v.dump(),
                   ", expected an integer in [0, ", n, ") (the ids of ", n, " tokens)");
    const auto id = std::size_t(v.get<int64_t>());
    if (seen[id])
      detail::fail(kFn, "'", vocab_name, "': id ", id, " is given to both '", impl->tokens[id],
                   "' and '", tok, "'");
    seen[id] = true;
    impl->tokens[id] = tok;
  }
  for (std::size_t i = 0; i < n; ++i) {
    auto [it, fresh] = impl->ids.emplace(impl->tokens[i], int64_t(i));
    if (!fresh)  // nlohmann keeps the last of repeated keys; a repeated key leaves a gap
      detail::fail(kFn, "'", vocab_name, "': token '", impl->tokens[i], "' appears twice");
  }
  impl->byte_cp = byte_code_points();
  for (int b = 0; b < 256; ++b) {
    impl->cp_byte[impl->byte_cp[std::size_t(b)]] = uint8_t(b);
    auto it = impl->ids.find(utf8(impl->byte_cp[std::size_t(b)]));
    impl->byte_id[std::size_t(b)] = it == impl->ids.end() ? -1 : it->second;
  }
  if (auto it = impl->ids.find(kEndOfText); it != impl->ids.end()) impl->eot = it->second;

  // ---- merges.txt
  std::size_t pos = 0;
  int64_t line_no = 0, rank = 0;
  while (pos < merges_txt.size()) {
    std::size_t end = merges_txt.find('\n', pos);
    if (end == std::string_view::npos) end = merges_txt.size();
    std::string_view line = merges_txt.substr(pos, end - pos);
    pos = end + 1;
    ++line_no;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) continue;
    if (line_no == 1 && line.starts_with("#version")) continue;
    const std::size_t sp = line.find(' ');
    if (sp == std::string_view::npos || sp == 0 || sp + 1 >= line.size() ||
        line.find(' ', sp + 1) != std::string_view::npos)
      detail::fail(kFn, "'", merges_name, "' line ", line_no,
                   ": expected two tokens separated by one space, got '", line, "'");
    const std::string a(line.substr(0, sp)), b(line.substr(sp + 1));
    auto ia = impl->ids.find(a), ib = impl->ids.find(b), iab = impl->ids.find(a + b);
    for (const auto& [it, name] : {std::pair{ia, &a}, std::pair{ib, &b}})
      if (it == impl->ids.end())
        detail::fail(kFn, "'", merges_name, "' line ", line_no, ": token '", *name,
                     "' is not in the vocabulary");
    if (iab == impl->ids.end())
      detail::fail(kFn, "'", merges_name, "' line ", line_no, ": the merged token '", a + b,
                   "' is not in the vocabulary");
    // A repeated merge takes its last rank, as transformers' dict of ranks does.
    impl->merges[{ia->second, ib->second}] = {rank++, iab->second};
  }
  BpeTokenizer t;
  t.impl_ = std::move(impl);
  return t;
}

int64_t BpeTokenizer::vocab_size() const { return impl_ ? int64_t(impl_->tokens.size()) : 0; }
int64_t BpeTokenizer::num_merges() const { return impl_ ? int64_t(impl_->merges.size()) : 0; }
int64_t BpeTokenizer::eot_id() const { return impl_ ? impl_->eot : -1; }

const std::string& BpeTokenizer::id_to_token(int64_t id) const {
  if (id < 0 || id >= vocab_size())
    throw IndexError(
        detail::msg(kFn, "token id ", id, " is outside the vocabulary [0, ", vocab_size(), ")"));
  return impl_->tokens[std::size_t(id)];
}

std::optional<int64_t> BpeTokenizer::token_to_id(std::string_view token) const {
  if (!impl_) return std::nullopt;
  auto it = impl_->ids.find(std::string(token));
  if (it == impl_->ids.end()) return std::nullopt;
  return it->second;
}

std::vector<int64_t> BpeTokenizer::encode(std::string_view text) const {
  if (!impl_) detail::fail(kFn, "the tokenizer is empty (use from_files or from_strings)");
  std::vector<int64_t> out;
  out.reserve(text.size() / 3 + 1);
  std::size_t pos = 0;
  const std::string_view eot = kEndOfText;
  while (pos <= text.size()) {
    std::size_t cut = impl_->eot >= 0 ? text.find(eot, pos) : std::string_view::npos;
    if (cut == std::string_view::npos) cut = text.size();
    impl_->append_piece(text.substr(pos, cut - pos), pos, out, nullptr);
    if (cut == text.size()) break;
    out.push_back(impl_->eot);
    pos = cut + eot.size();
  }
  return out;
}

std::vector<std::string> BpeTokenizer::pretokenize(std::string_view text) const {
  if (!impl_) detail::fail(kFn, "the tokenizer is empty (use from_files or from_strings)");
  std::vector<int64_t> unused;
  std::vector<std::string> words;
  std::size_t pos = 0;
  const std::string_view eot = kEndOfText;
  while (pos <= text.size()) {
    std::size_t cut = impl_->eot >= 0 ? text.find(eot, pos) : std::string_view::npos;
    if (cut == std::string_view::npos) cut = text.size();
    impl_->append_piece(text.substr(pos, cut - pos), pos, unused, &words);
    if (cut == text.size()) break;
    words.emplace_back(eot);
    pos = cut + eot.size();
  }
  return words;
}

std::string BpeTokenizer::decode(int64_t id) const {
  const std::string& tok = id_to_token(id);
  if (id == impl_->eot) return tok;
  std::string out;
  std::size_t i = 0;
  while (i < tok.size()) {
    auto cp = next_code_point(tok, i);
    auto it = cp ? impl_->cp_byte.find(*cp) : impl_->cp_byte.end();
    if (it == impl_->cp_byte.end()) return tok;  // not a byte-level token: its own text
    out += char(it->second);
  }
  return out;
}

std::string BpeTokenizer::decode(const std::vector<int64_t>& ids) const {
  std::string out;
  for (int64_t id : ids) out += decode(id);
  return out;
}

}  // namespace attn::data

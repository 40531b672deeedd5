// Hugging Face tokenizer.json (include/attn/tokenizer.h): the added tokens, the BPE model, the
// post-processor, and the pipeline that runs them with the steps of tokenizer_steps.cpp.
#include <attn/io.h>
#include <attn/tensor.h>
#include <attn/tokenizer.h>
#include <unicode/uchar.h>

#include <algorithm>
#include <array>
#include <queue>
#include <unordered_map>

#include "tokenizer_internal.h"
#include "unicode.h"
#include "word_cache.h"

namespace attn::data {

using tok::Field;
using tok::json;
using tok::kFn;

namespace {

struct PairHash {
  std::size_t operator()(const std::pair<int64_t, int64_t>& p) const {
    return std::hash<uint64_t>()(uint64_t(p.first) * 0x9E3779B97F4A7C15ull ^ uint64_t(p.second));
  }
};

// Rust's char::is_alphanumeric: Unicode's Alphabetic property or a number (Nd, Nl, No).
bool is_alphanumeric(uint32_t c) {
  if (u_hasBinaryProperty(UChar32(c), UCHAR_ALPHABETIC)) return true;
  const int8_t t = u_charType(UChar32(c));
  return t == U_DECIMAL_DIGIT_NUMBER || t == U_LETTER_NUMBER || t == U_OTHER_NUMBER;
}

uint32_t last_code_point(std::string_view s) {
  std::size_t i = s.size();
  while (i > 0 && (static_cast<unsigned char>(s[i - 1]) & 0xC0) == 0x80) --i;
  if (i > 0) --i;
  std::size_t j = i;
  auto cp = unicode::next_code_point(s, j);
  return cp ? *cp : 0;
}

uint32_t first_code_point(std::string_view s) {
  std::size_t i = 0;
  auto cp = unicode::next_code_point(s, i);
  return cp ? *cp : 0;
}

// ---------------------------------------------------------------- the BPE model

struct BpeModel {
  std::unordered_map<std::string, int64_t> vocab;
  std::unordered_map<int64_t, std::string> tokens;
  std::unordered_map<std::pair<int64_t, int64_t>, std::pair<int64_t, int64_t>, PairHash>
      merges;  // (left, right) -> (rank, merged)
  std::optional<int64_t> unk;
  bool fuse_unk = false, byte_fallback = false, ignore_merges = false;
  std::array<int64_t, 256> byte_ids{};  // <0xNN>, -1 when absent
  WordCache cache;

  void parse(const json& j, const Field& f);
  std::vector<int64_t> word(std::string_view w) const;
  void encode(std::string_view w, std::vector<int64_t>& out) const;
};

void BpeModel::parse(const json& j, const Field& f) {
  const std::string type = tok::get_type(j, f);
  if (type != "BPE") f["type"].fail("model '", type, "' is not supported (attn has BPE)");
  if (j.contains("dropout") && !j["dropout"].is_null() &&
      !(j["dropout"].is_number() && j["dropout"].get<double>() == 0.0))
    f["dropout"].fail("BPE dropout is not supported, got ", j["dropout"].dump());
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (j.contains(key) && !j[key].is_null() && j[key] != "")
      f[key].fail("is not supported, got ", j[key].dump());
  fuse_unk = tok::get_bool(j, f, "fuse_unk", false);
  byte_fallback = tok::get_bool(j, f, "byte_fallback", false);
  ignore_merges = tok::get_bool(j, f, "ignore_merges", false);

  auto v = j.find("vocab");
  if (v == j.end() || !v->is_object()) f["vocab"].fail("expected an object {\"token\": id, ...}");
  for (auto it = v->begin(); it != v->end(); ++it) {
    if (!it.value().is_number_integer() || it.value().get<int64_t>() < 0)
      f["vocab"].fail("token '", it.key(), "' has id ", it.value().dump(),
                      ", expected a non-negative integer");
    const int64_t id = it.value().get<int64_t>();
    auto [at, fresh] = tokens.emplace(id, it.key());
    if (!fresh)
      f["vocab"].fail("id ", id, " is given to both '", at->second, "' and '", it.key(), "'");
    vocab.emplace(it.key(), id);
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    auto it = vocab.find(name);
    byte_ids[std::size_t(b)] = it == vocab.end() ? -1 : it->second;
  }
  if (j.contains("unk_token") && !j["unk_token"].is_null()) {
    const std::string u = tok::get_string(j, f, "unk_token");
    auto it = vocab.find(u);
    if (it == vocab.end()) f["unk_token"].fail("'", u, "' is not in the vocabulary");
    unk = it->second;
  }

  auto m = j.find("merges");
  if (m == j.end() || !m->is_array()) f["merges"].fail("expected an array");
  for (std::size_t i = 0; i < m->size(); ++i) {
    const json& e = (*m)[i];
    std::string a, b;
    if (e.is_string()) {
      const std::string s = e.get<std::string>();
      const std::size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        f["merges"][i].fail("expected two tokens separated by one space, got '", s, "'");
      a = s.substr(0, sp), b = s.substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get<std::string>(), b = e[1].get<std::string>();
    } else {
      f["merges"][i].fail("expected \"a b\" or [\"a\", \"b\"], got ", e.dump());
    }
    auto ia = vocab.find(a), ib = vocab.find(b), iab = vocab.find(a + b);
    if (ia == vocab.end()) f["merges"][i].fail("token '", a, "' is not in the vocabulary");
    if (ib == vocab.end()) f["merges"][i].fail("token '", b, "' is not in the vocabulary");
    if (iab == vocab.end())
      f["merges"][i].fail("the merged token '", a + b, "' is not in the vocabulary");
    merges[{ia->second, ib->second}] = {int64_t(i), iab->second};  // the last rank, as tokenizers
  }
}

// tokenizers' BPE on one word: its characters as tokens (byte fallback, unknowns), then the pair
// of lowest rank merged (leftmost first) until none is left.
std::vector<int64_t> BpeModel::word(std::string_view w) const {
  struct Sym {
    int64_t id;
    int64_t prev, next;
    bool live;
  };
  std::vector<Sym> sym;
  auto add = [&](int64_t id) {
    const int64_t n = int64_t(sym.size());
    sym.push_back({id, n - 1, -1, true});
    if (n > 0) sym[std::size_t(n - 1)].next = n;
  };
  int64_t pending_unk = -1;  // fused unknowns wait here, as in tokenizers
  for (std::size_t i = 0; i < w.size();) {
    const std::size_t at = i;
    if (!unicode::next_code_point(w, i)) i = at + 1;
    const std::string ch(w.substr(at, i - at));
    if (auto it = vocab.find(ch); it != vocab.end()) {
      if (pending_unk >= 0) add(pending_unk), pending_unk = -1;
      add(it->second);
      continue;
    }
    if (byte_fallback) {
      bool all = true;
      for (char c : ch) all = all && byte_ids[static_cast<unsigned char>(c)] >= 0;
      if (all) {
        for (char c : ch) add(byte_ids[static_cast<unsigned char>(c)]);
        continue;  // a pending unknown stays pending, as in tokenizers
      }
    }
    if (unk) {
      if (pending_unk >= 0 && !fuse_unk) add(pending_unk);
      pending_unk = *unk;
    }
    // no unk_token: the character is dropped, as in tokenizers
  }
  if (pending_unk >= 0) add(pending_unk);

  struct Merge {
    int64_t rank, pos, id;
    bool operator>(const Merge& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::priority_queue<Merge, std::vector<Merge>, std::greater<Merge>> queue;
  auto push = [&](int64_t pos) {
    const Sym& s = sym[std::size_t(pos)];
    if (s.next < 0) return;
    auto it = merges.find({s.id, sym[std::size_t(s.next)].id});
    if (it != merges.end()) queue.push({it->second.first, pos, it->second.second});
  };
  for (std::size_t p = 0; p + 1 < sym.size(); ++p) push(int64_t(p));
  while (!queue.empty()) {
    const Merge top = queue.top();
    queue.pop();
    Sym& s = sym[std::size_t(top.pos)];
    if (!s.live || s.next < 0) continue;
    Sym& right = sym[std::size_t(s.next)];
    auto it = merges.find({s.id, right.id});
    if (it == merges.end() || it->second.second != top.id) continue;  // stale
    s.id = top.id;
    right.live = false;
    s.next = right.next;
    if (right.next >= 0) sym[std::size_t(right.next)].prev = top.pos;
    if (s.prev >= 0) push(s.prev);
    push(top.pos);
  }
  std::vector<int64_t> out;
  for (const Sym& s : sym)
    if (s.live) out.push_back(s.id);
  return out;
}

void BpeModel::encode(std::string_view w, std::vector<int64_t>& out) const {
  if (ignore_merges)
    if (auto it = vocab.find(std::string(w)); it != vocab.end()) {
      out.push_back(it->second);
      return;
    }
  cache.append(w, out, [this](std::string_view word) { return this->word(word); });
}

// ---------------------------------------------------------------- added tokens

struct AddedToken {
  int64_t id;
  std::string content;
  bool single_word, lstrip, rstrip, normalized, special;
};

// A piece of the text: an added token (id >= 0) or text for the model (id -1).
struct Segment {
  std::string text;
  bool first;
  int64_t id;
};

// The added tokens of one kind (normalized or not), matched leftmost-longest as tokenizers'
// Aho-Corasick automaton does.
class AddedMatcher {
 public:
  void add(const AddedToken* t, std::string content) {
    if (content.empty()) return;
    by_byte_[static_cast<unsigned char>(content[0])].push_back({std::move(content), t});
  }
  void finish() {
    for (auto& list : by_byte_)
      std::stable_sort(list.begin(), list.end(), [](const Entry& a, const Entry& b) {
        return a.content.size() > b.content.size();
      });
  }
  bool empty() const {
    for (const auto& list : by_byte_)
      if (!list.empty()) return false;
    return true;
  }
  // Splits `text` (a segment for the model) into added tokens and the text between them.
  void split(const std::string& text, bool first, std::vector<Segment>& out) const {
    std::size_t offset = 0;  // the end of the last piece taken
    for (std::size_t pos = 0; pos < text.size();) {
      const Entry* hit = nullptr;
      std::size_t at = pos;
      for (; at < text.size() && !hit; ++at)
        for (const Entry& e : by_byte_[static_cast<unsigned char>(text[at])])
          if (text.compare(at, e.content.size(), e.content) == 0) {
            hit = &e;
            break;
          }
      if (!hit) break;
      std::size_t start = at - 1, stop = start + hit->content.size();
      pos = stop;  // the automaton goes on after the match, taken or not
      const AddedToken& t = *hit->token;
      if (t.single_word) {
        const bool before = start == 0 || !is_alphanumeric(last_code_point(text.substr(0, start)));
        const bool after =
            stop == text.size() || !is_alphanumeric(first_code_point(text.substr(stop)));
        if (!before || !after) continue;
      }
      if (t.lstrip) {
        std::size_t s = start;
        while (s > offset) {
          std::size_t b = s - 1;
          while (b > offset && (static_cast<unsigned char>(text[b]) & 0xC0) == 0x80) --b;
          std::size_t j = b;
          auto cp = unicode::next_code_point(text, j);
          if (!cp || !unicode::is_white_space(*cp)) break;
          s = b;
        }
        start = s;
      }
      if (t.rstrip) {
        std::size_t j = stop;
        while (j < text.size()) {
          std::size_t k = j;
          auto cp = unicode::next_code_point(text, k);
          if (!cp || !unicode::is_white_space(*cp)) break;
          j = k;
        }
        stop = j;
        pos = std::max(pos, stop);
      }
      if (start > offset)
        out.push_back({text.substr(offset, start - offset), first && offset == 0, -1});
      out.push_back({text.substr(start, stop - start), false, t.id});
      offset = stop;
    }
    if (offset < text.size()) out.push_back({text.substr(offset), first && offset == 0, -1});
  }

 private:
  struct Entry {
    std::string content;
    const AddedToken* token;
  };
  std::array<std::vector<Entry>, 256> by_byte_;
};

}  // namespace

struct Tokenizer::Impl {
  BpeModel model;
  std::vector<AddedToken> added;
  std::unordered_map<int64_t, std::size_t> added_by_id;
  std::unordered_map<std::string, int64_t> added_by_content;
  AddedMatcher raw_matcher, normalized_matcher;
  std::unique_ptr<tok::Normalizer> normalizer;
  std::unique_ptr<tok::PreTokenizer> pre_tokenizer;
  std::unique_ptr<tok::Decoder> decoder;
  // The single-sequence template: ids, with -1 where the text's ids go.
  std::vector<int64_t> template_ids;
  bool has_template = false;
  int64_t size = 0;

  void parse(const json& j, const Field& root);  // the whole file (an object with a "model")
  void parse_added(const json& j, const Field& f);
  std::string token_of(int64_t id) const;  // IndexError when no token has the id
  void parse_post_processor(const json& j, const Field& f);
  // The ids of `text`; with `tokens`, their tokens too (an added token as the text it matched).
  std::vector<int64_t> run(std::string_view text, bool add_special_tokens,
                           std::vector<std::string>* tokens) const;
};

void Tokenizer::Impl::parse_added(const json& j, const Field& f) {
  if (j.is_null()) return;
  if (!j.is_array()) f.fail("expected an array");
  added.reserve(j.size());
  for (std::size_t i = 0; i < j.size(); ++i) {
    const json& e = j[i];
    const Field fi = f[i];
    if (!e.is_object()) fi.fail("expected an object");
    AddedToken t;
    t.id = tok::get_int(e, fi, "id", -1);
    if (t.id < 0) fi["id"].fail("expected a non-negative integer");
    t.content = tok::get_string(e, fi, "content");
    if (t.content.empty()) fi["content"].fail("an empty token");
    t.single_word = tok::get_bool(e, fi, "single_word", false);
    t.lstrip = tok::get_bool(e, fi, "lstrip", false);
    t.rstrip = tok::get_bool(e, fi, "rstrip", false);
    t.special = tok::get_bool(e, fi, "special", false);
    t.normalized = tok::get_bool(e, fi, "normalized", !t.special);
    if (auto at = added_by_id.find(t.id); at != added_by_id.end())
      fi["id"].fail("id ", t.id, " is given to both '", added[at->second].content, "' and '",
                    t.content, "'");
    if (auto at = model.tokens.find(t.id); at != model.tokens.end() && at->second != t.content)
      fi["id"].fail("id ", t.id, " is the model's token '", at->second, "', not '", t.content, "'");
    added_by_id.emplace(t.id, added.size());
    added_by_content.emplace(t.content, t.id);
    added.push_back(std::move(t));
  }
}

void Tokenizer::Impl::parse_post_processor(const json& j, const Field& f) {
  if (j.is_null()) return;
  const std::string type = tok::get_type(j, f);
  if (type == "Sequence") {
    auto it = j.find("processors");
    if (it == j.end() || !it->is_array()) f["processors"].fail("expected an array");
    for (std::size_t i = 0; i < it->size(); ++i) parse_post_processor((*it)[i], f["processors"][i]);
    return;
  }
  if (type == "ByteLevel") return;  // offsets only
  if (type != "TemplateProcessing")
    f["type"].fail("post-processor '", type,
                   "' is not supported (attn has TemplateProcessing, "
                   "ByteLevel, Sequence)");
  if (has_template) f.fail("a second TemplateProcessing");
  has_template = true;
  auto single = j.find("single");
  if (single == j.end() || !single->is_array()) f["single"].fail("expected an array");
  const json specials = j.value("special_tokens", json::object());
  for (std::size_t i = 0; i < single->size(); ++i) {
    const json& piece = (*single)[i];
    const Field fp = f["single"][i];
    if (piece.contains("Sequence")) {
      template_ids.push_back(-1);
    } else if (piece.contains("SpecialToken")) {
      const std::string name = tok::get_string(piece["SpecialToken"], fp["SpecialToken"], "id");
      auto it = specials.find(name);
      if (it == specials.end() || !it->contains("ids") || !(*it)["ids"].is_array())
        fp.fail("special token '", name, "' is not in special_tokens with its ids");
      for (const json& id : (*it)["ids"]) {
        if (!id.is_number_integer() || id.get<int64_t>() < 0)
          f["special_tokens"].fail("'", name, "' has id ", id.dump());
        template_ids.push_back(id.get<int64_t>());
      }
    } else {
      fp.fail("expected {\"Sequence\": ...} or {\"SpecialToken\": ...}, got ", piece.dump());
    }
  }
}

Tokenizer Tokenizer::from_file(const std::string& path) {
  return from_string(io::read_file(path), path);
}

Tokenizer Tokenizer::from_string(std::string_view text, const std::string& name) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    detail::fail(kFn, "'", name, "': not valid JSON: ", e.what());
  }
  const Field root{name, ""};
  if (!j.is_object()) detail::fail(kFn, "'", name, "': expected a JSON object");
  for (const char* key : {"truncation", "padding"})
    if (j.contains(key) && !j[key].is_null())
      root[key].fail("is not supported (encode gives one sequence as it is), got ", j[key].dump());
  if (!j.contains("model")) root["model"].fail("missing");
  auto impl = std::make_shared<Impl>();
  try {
    impl->parse(j, root);
  } catch (const json::exception& e) {  // a shape the checks missed: still a named defect
    detail::fail(kFn, "'", name, "': unexpected JSON: ", e.what());
  }
  Tokenizer out;
  out.impl_ = std::move(impl);
  return out;
}

void Tokenizer::Impl::parse(const json& j, const Field& root) {
  model.parse(j["model"], root["model"]);
  parse_added(j.value("added_tokens", json()), root["added_tokens"]);
  normalizer = tok::parse_normalizer(j.value("normalizer", json()), root["normalizer"]);
  pre_tokenizer = tok::parse_pre_tokenizer(j.value("pre_tokenizer", json()), root["pre_tokenizer"]);
  decoder = tok::parse_decoder(j.value("decoder", json()), root["decoder"]);
  parse_post_processor(j.value("post_processor", json()), root["post_processor"]);

  for (const AddedToken& t : added) {
    if (!t.normalized) {
      raw_matcher.add(&t, t.content);
    } else {
      std::string content = t.content;
      if (normalizer) normalizer->apply(content, tok::growth_cap(content.size()));
      normalized_matcher.add(&t, content);
    }
  }
  raw_matcher.finish();
  normalized_matcher.finish();
  for (const auto& [id, t] : model.tokens) size = std::max(size, id + 1);
  for (const AddedToken& t : added) size = std::max(size, t.id + 1);
  for (int64_t id : template_ids)
    if (id >= size) root["post_processor"].fail("the template's id ", id, " has no token");
}

std::vector<int64_t> Tokenizer::Impl::run(std::string_view text, bool add_special_tokens,
                                          std::vector<std::string>* tokens) const {
  if (auto bad = unicode::invalid_utf8_at(text))
    detail::fail(kFn, "the text is not valid UTF-8 at byte ", *bad);
  const std::size_t cap = tok::growth_cap(text.size());
  std::vector<Segment> raw;
  raw_matcher.split(std::string(text), true, raw);
  std::vector<Segment> segs;
  for (Segment& s : raw) {
    if (s.id >= 0) {
      segs.push_back(std::move(s));
      continue;
    }
    if (normalizer) normalizer->apply(s.text, cap);
    normalized_matcher.split(s.text, s.first, segs);
  }
  std::vector<int64_t> ids;
  ids.reserve(text.size() / 3 + 1);
  std::vector<tok::Piece> pieces;
  for (const Segment& s : segs) {
    if (s.id >= 0) {
      ids.push_back(s.id);
      if (tokens) tokens->push_back(s.text);
      continue;
    }
    pieces.assign(1, tok::Piece{s.text, s.first});
    if (pre_tokenizer) pre_tokenizer->apply(pieces, cap);
    for (const tok::Piece& p : pieces) {
      if (p.text.empty()) continue;
      const std::size_t from = ids.size();
      model.encode(p.text, ids);
      if (tokens)
        for (std::size_t k = from; k < ids.size(); ++k) tokens->push_back(model.tokens.at(ids[k]));
    }
  }
  if (!add_special_tokens || !has_template) return ids;
  std::vector<int64_t> out;
  std::vector<std::string> out_tokens;
  out.reserve(ids.size() + template_ids.size());
  for (int64_t id : template_ids) {
    if (id >= 0) {
      out.push_back(id);
      if (tokens) out_tokens.push_back(token_of(id));
    } else {
      out.insert(out.end(), ids.begin(), ids.end());
      if (tokens) out_tokens.insert(out_tokens.end(), tokens->begin(), tokens->end());
    }
  }
  if (tokens) *tokens = std::move(out_tokens);
  return out;
}

namespace {
const Tokenizer::Impl& get(const std::shared_ptr<const Tokenizer::Impl>& impl) {
  if (!impl) detail::fail(kFn, "the tokenizer is empty (use from_file or from_string)");
  return *impl;
}
}  // namespace

int64_t Tokenizer::vocab_size() const { return impl_ ? impl_->size : 0; }

std::optional<int64_t> Tokenizer::token_to_id(std::string_view token) const {
  const Impl& t = get(impl_);
  const std::string s(token);
  if (auto it = t.added_by_content.find(s); it != t.added_by_content.end()) return it->second;
  if (auto it = t.model.vocab.find(s); it != t.model.vocab.end()) return it->second;
  return std::nullopt;
}

std::string Tokenizer::Impl::token_of(int64_t id) const {
  if (auto it = added_by_id.find(id); it != added_by_id.end()) return added[it->second].content;
  if (auto it = model.tokens.find(id); it != model.tokens.end()) return it->second;
  throw IndexError(detail::msg(kFn, "no token has id ", id, " (vocabulary size ", size, ")"));
}

std::string Tokenizer::id_to_token(int64_t id) const { return get(impl_).token_of(id); }

bool Tokenizer::is_special(int64_t id) const {
  const Impl& t = get(impl_);
  auto it = t.added_by_id.find(id);
  return it != t.added_by_id.end() && t.added[it->second].special;
}

std::vector<int64_t> Tokenizer::encode(std::string_view text, bool add_special_tokens) const {
  return get(impl_).run(text, add_special_tokens, nullptr);
}

Tokenizer::Encoding Tokenizer::encode_with_tokens(std::string_view text,
                                                  bool add_special_tokens) const {
  Encoding out;
  out.ids = get(impl_).run(text, add_special_tokens, &out.tokens);
  return out;
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  const Impl& t = get(impl_);
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int64_t id : ids) {
    std::string s = id_to_token(id);
    if (skip_special_tokens && is_special(id)) continue;
    tokens.push_back(std::move(s));
  }
  if (!t.decoder) {
    std::string out;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      if (i) out += ' ';
      out += tokens[i];
    }
    return out;
  }
  t.decoder->apply(tokens);
  std::string out;
  for (const std::string& s : tokens) out += s;
  return out;
}

}  // namespace attn::data

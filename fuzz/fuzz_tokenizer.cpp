// The tokenizers on arbitrary text: attn::data::CharTokenizer (from_json, from_text, encode,
// decode) and seed 000's word vocabulary attn::nn::Vocabulary. Byte 0 picks the mode (low 2 bits),
// the rest is the text. Checked against an independent strict UTF-8 decoder (Unicode table 3-7):
//   0  from_json; a tokenizer that loads round-trips through to_json, and decode/encode of all ids
//   1  from_text succeeds exactly for non-empty valid UTF-8; its vocabulary is the sorted distinct
//      code points; encode then decode gives the text back
//   2  text = A 0xFF B: the vocabulary of A encodes B exactly when B is valid UTF-8 made of A's
//      characters; decode of ids read from B's bytes throws IndexError exactly when out of range
//   3  Vocabulary: sorted unique words without commas or ASCII whitespace, ids by position,
//      encode agrees with id(), unknown words throw IndexError
#include <attn/data.h>

#include <algorithm>
#include <optional>
#include <set>
#include <vector>

#include "fuzz_util.h"

namespace {

using attn::data::CharTokenizer;

using attn_fuzz::utf8_code_points;

std::vector<int64_t> all_ids(const CharTokenizer& tok) {
  std::vector<int64_t> ids(std::size_t(tok.vocab_size()));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = int64_t(i);
  return ids;
}

// Invariants of any tokenizer: one code point per entry, strictly increasing; JSON round trip;
// decode then encode of every id.
void check_tokenizer(const CharTokenizer& tok) {
  FUZZ_CHECK(tok.vocab_size() >= 1);
  std::optional<uint32_t> prev;
  for (const std::string& c : tok.chars()) {
    auto cps = utf8_code_points(c);
    FUZZ_CHECK(cps && cps->size() == 1);
    FUZZ_CHECK(!prev || (*cps)[0] > *prev);
    prev = (*cps)[0];
  }
  const CharTokenizer again = CharTokenizer::from_json(tok.to_json());
  FUZZ_CHECK(again.chars() == tok.chars());
  const std::vector<int64_t> ids = all_ids(tok);
  const std::string text = tok.decode(ids);
  FUZZ_CHECK(tok.encode(text) == ids);
  for (int64_t id : {int64_t(-1), tok.vocab_size()}) {
    bool threw = false;
    try {
      tok.decode(id);
    } catch (const attn::IndexError&) {
      threw = true;
    }
    FUZZ_CHECK(threw);
  }
}

void from_json_mode(std::string_view text) {
  CharTokenizer tok;
  try {
    tok = CharTokenizer::from_json(text);
  } catch (const attn::Error&) {
    return;
  }
  check_tokenizer(tok);
}

void from_text_mode(std::string_view text) {
  const auto cps = utf8_code_points(text);
  CharTokenizer tok;
  try {
    tok = CharTokenizer::from_text(text);
  } catch (const attn::Error&) {
    FUZZ_CHECK(!cps || cps->empty());
    return;
  }
  FUZZ_CHECK(cps && !cps->empty());
  const std::set<uint32_t> distinct(cps->begin(), cps->end());
  FUZZ_CHECK(tok.vocab_size() == int64_t(distinct.size()));
  check_tokenizer(tok);
  const std::vector<int64_t> ids = tok.encode(text);
  FUZZ_CHECK(ids.size() == cps->size());
  for (std::size_t i = 0; i < ids.size(); ++i) {
    const auto id = std::size_t(ids[i]);
    FUZZ_CHECK(id < distinct.size());
    FUZZ_CHECK(utf8_code_points(tok.chars()[id])->at(0) == (*cps)[i]);
  }
  FUZZ_CHECK(tok.decode(ids) == text);
}

void encode_mode(std::string_view text) {
  const std::size_t cut = std::min(text.find('\xff'), text.size());
  const std::string_view a = text.substr(0, cut);
  const std::string_view b = cut < text.size() ? text.substr(cut + 1) : std::string_view();
  CharTokenizer tok;
  try {
    tok = CharTokenizer::from_text(a);
  } catch (const attn::Error&) {
    return;
  }
  const auto cps_a = utf8_code_points(a);
  const auto cps_b = utf8_code_points(b);
  const std::set<uint32_t> vocab(cps_a->begin(), cps_a->end());
  const bool encodable = cps_b && std::all_of(cps_b->begin(), cps_b->end(),
                                              [&](uint32_t c) { return vocab.count(c); });
  try {
    const std::vector<int64_t> ids = tok.encode(b);
    FUZZ_CHECK(encodable);
    FUZZ_CHECK(tok.decode(ids) == b);
  } catch (const attn::Error&) {
    FUZZ_CHECK(!encodable);
  }
  // Ids taken from B's bytes (one signed byte each, so that some are in range).
  std::vector<int64_t> ids;
  for (char c : b) ids.push_back(int64_t(int8_t(c)));
  const bool in_range = std::all_of(ids.begin(), ids.end(),
                                    [&](int64_t id) { return id >= 0 && id < tok.vocab_size(); });
  try {
    const std::string s = tok.decode(ids);
    FUZZ_CHECK(in_range);
    FUZZ_CHECK(tok.encode(s) == ids);
  } catch (const attn::IndexError&) {
    FUZZ_CHECK(!in_range);
  }
}

bool is_py_space(unsigned char c) {
  return c == ' ' || (c >= 9 && c <= 13) || (c >= 28 && c <= 31);
}

void vocabulary_mode(std::string_view text) {
  const std::string sentence(text);
  const attn::nn::Vocabulary vocab(sentence);
  const std::vector<std::string>& words = vocab.words();
  FUZZ_CHECK(std::is_sorted(words.begin(), words.end()));
  FUZZ_CHECK(std::adjacent_find(words.begin(), words.end()) == words.end());
  FUZZ_CHECK(vocab.size() == int64_t(words.size()));
  // The words are the text without commas, cut at whitespace.
  std::string kept;
  for (char c : sentence)
    if (c != ',' && !is_py_space(static_cast<unsigned char>(c))) kept += c;
  std::string joined;
  const std::vector<std::string> tokens = attn::nn::Vocabulary::tokenize(sentence);
  for (const std::string& w : tokens) {
    FUZZ_CHECK(!w.empty());
    for (char c : w) FUZZ_CHECK(c != ',' && !is_py_space(static_cast<unsigned char>(c)));
    joined += w;
  }
  FUZZ_CHECK(joined == kept);
  for (std::size_t i = 0; i < words.size(); ++i) FUZZ_CHECK(vocab.id(words[i]) == int64_t(i));
  const attn::Tensor enc = vocab.encode(sentence);
  FUZZ_CHECK(enc.dim() == 1 && enc.size(0) == int64_t(tokens.size()));
  for (std::size_t i = 0; i < tokens.size(); ++i)
    FUZZ_CHECK(enc.data_ptr<int64_t>()[i] == vocab.id(tokens[i]));
  FUZZ_CHECK(!vocab.repr().empty());
  bool threw = false;
  try {
    vocab.id(sentence + " ");  // has whitespace: never a word
  } catch (const attn::IndexError&) {
    threw = true;
  }
  FUZZ_CHECK(threw);
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  attn_fuzz::init_single_thread();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  attn_fuzz::ByteReader in(data, size);
  const int mode = in.byte() & 3;
  const std::string_view text = in.rest();
  switch (mode) {
    case 0: from_json_mode(text); break;
    case 1: from_text_mode(text); break;
    case 2: encode_mode(text); break;
    default: vocabulary_mode(text); break;
  }
  return 0;
}

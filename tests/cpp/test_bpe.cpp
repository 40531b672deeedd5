// attn::data::BpeTokenizer (GPT-2's byte-level BPE) against a naive reference written here from
// GPT-2's published algorithm: bytes_to_unicode, an ASCII re-implementation of the pre-tokenising
// pattern, and the merge loop of transformers' GPT2Tokenizer.bpe on strings. (The comparison with
// transformers itself, on tinyshakespeare and Unicode text, is tests/python/test_hf_gpt2.py.)
// Also: file defects named with file and line, invalid UTF-8, decode's range checks.
#include <attn/bpe.h>
#include <attn/tensor.h>
#include <gtest/gtest.h>

#include <climits>
#include <map>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "bpe_util.h"
#include "test_util.h"

namespace {

using attn::data::BpeTokenizer;
using attn::testing::error_of;
using json = nlohmann::json;
using attn::testing::byte_symbols;
using attn::testing::to_symbols;

// A small vocabulary: every byte (in an order unlike the table's, so that ids and code points
// differ), merges given as plain text pairs, and <|endoftext|>.
struct Vocab {
  std::vector<std::pair<std::string, std::string>> merges;  // symbol strings
  std::map<std::string, int64_t> ids;
  std::string vocab_json, merges_txt;
};

Vocab make_vocab() {
  const std::vector<std::pair<std::string, std::string>> text_merges = {
      {"t", "h"}, {"th", "e"},  {" ", "t"},  {" t", "he"}, {"e", "r"},   {" ", "a"},
      {"a", "n"}, {" a", "n"},  {"'", "s"},  {"1", "2"},   {"12", "1"},  {"\n", "\n"},
      {"e", "e"}, {"ee", "e"},  {" ", "e"},  {"n", "d"},   {" an", "d"}, {"h", "e"},
      {"!", "!"}, {"\t", "\t"}, {" t", "h"}, {"T", "he"},  {"e", "e"}};  // a repeated merge
  Vocab v;
  const std::vector<std::string> sym = byte_symbols();
  for (int b = 255; b >= 0; --b) v.ids.emplace(sym[std::size_t(b)], int64_t(v.ids.size()));
  v.merges_txt = "#version: 0.2\n";
  for (const auto& [a, b] : text_merges) {
    const std::string sa = to_symbols(a), sb = to_symbols(b);
    v.merges.emplace_back(sa, sb);
    v.merges_txt += sa + " " + sb + "\n";
    v.ids.emplace(sa + sb, int64_t(v.ids.size()));
  }
  v.ids.emplace("<|endoftext|>", int64_t(v.ids.size()));
  json j = json::object();
  for (const auto& [t, id] : v.ids) j[t] = id;
  v.vocab_json = j.dump();
  return v;
}

bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

// GPT-2's pattern by hand, for ASCII text.
std::vector<std::string> ascii_pretokenize(const std::string& s) {
  std::vector<std::string> words;
  std::size_t i = 0;
  const std::size_t n = s.size();
  while (i < n) {
    std::size_t j = i;
    if (s[i] == '\'') {
      bool hit = false;
      for (const char* c : {"s", "t", "re", "ve", "m", "ll", "d"}) {
        const std::string suffix(c);
        if (s.compare(i + 1, suffix.size(), suffix) == 0) {
          words.push_back(s.substr(i, 1 + suffix.size()));
          i += 1 + suffix.size();
          hit = true;
          break;
        }
      }
      if (hit) continue;
    }
    const std::size_t k = (s[i] == ' ' && i + 1 < n) ? i + 1 : i;  // the optional space
    auto run = [&](auto pred) {
      std::size_t e = k;
      while (e < n && pred(s[e])) ++e;
      return e;
    };
    if ((j = run(is_letter)) > k || (j = run(is_digit)) > k ||
        (j = run([](char c) { return !is_space(c) && !is_letter(c) && !is_digit(c); })) > k) {
      words.push_back(s.substr(i, j - i));
      i = j;
      continue;
    }
    std::size_t e = i;
    while (e < n && is_space(s[e])) ++e;
    if (e < n && e - i > 1) --e;  // \s+(?!\S) gives the last space to the next word
    words.push_back(s.substr(i, e - i));
    i = e;
  }
  return words;
}

// transformers' GPT2Tokenizer.bpe on symbol strings.
std::vector<std::string> naive_bpe(const std::string& word, const Vocab& v) {
  std::map<std::pair<std::string, std::string>, int> rank;
  for (std::size_t r = 0; r < v.merges.size(); ++r) rank[v.merges[r]] = int(r);  // last wins
  std::vector<std::string> w;
  for (char c : word) w.push_back(to_symbols(std::string(1, c)));
  while (w.size() > 1) {
    int best = INT_MAX;
    std::pair<std::string, std::string> bigram;
    for (std::size_t i = 0; i + 1 < w.size(); ++i) {
      auto it = rank.find({w[i], w[i + 1]});
      if (it != rank.end() && it->second < best) best = it->second, bigram = it->first;
    }
    if (best == INT_MAX) break;
    std::vector<std::string> next;
    for (std::size_t i = 0; i < w.size();) {
      if (i + 1 < w.size() && w[i] == bigram.first && w[i + 1] == bigram.second) {
        next.push_back(bigram.first + bigram.second);
        i += 2;
      } else {
        next.push_back(w[i++]);
      }
    }
    w = next;
  }
  return w;
}

std::vector<int64_t> naive_encode(const std::string& text, const Vocab& v) {
  std::vector<int64_t> ids;
  const std::string eot = "<|endoftext|>";
  std::size_t pos = 0;
  while (true) {
    std::size_t cut = text.find(eot, pos);
    const std::string piece = text.substr(pos, cut == std::string::npos ? cut : cut - pos);
    for (const std::string& word : ascii_pretokenize(piece))
      for (const std::string& s : naive_bpe(word, v)) ids.push_back(v.ids.at(s));
    if (cut == std::string::npos) break;
    ids.push_back(v.ids.at(eot));
    pos = cut + eot.size();
  }
  return ids;
}

TEST(Bpe, MatchesTheNaiveReferenceOnRandomAsciiText) {
  const Vocab v = make_vocab();
  const BpeTokenizer tok = BpeTokenizer::from_strings(v.vocab_json, v.merges_txt);
  EXPECT_EQ(tok.vocab_size(), int64_t(v.ids.size()));
  EXPECT_EQ(tok.eot_id(), v.ids.at("<|endoftext|>"));
  const std::vector<std::string> pieces = {"the",
                                           " the",
                                           "there",
                                           "The",
                                           "t",
                                           "h",
                                           "e",
                                           "ee",
                                           "eee",
                                           "er",
                                           " ",
                                           "  ",
                                           "   ",
                                           "\n",
                                           "\n\n",
                                           "\t",
                                           "'s",
                                           "'t",
                                           "'re",
                                           "'ve",
                                           "'m",
                                           "'ll",
                                           "'d",
                                           "'",
                                           "'x",
                                           "an",
                                           " and",
                                           "a",
                                           "121",
                                           "12",
                                           "1",
                                           "9",
                                           "!",
                                           "!!",
                                           ".",
                                           ",",
                                           "<|endoftext|>",
                                           "<|",
                                           "|>",
                                           "x",
                                           "Z",
                                           "\r\n",
                                           "\x01",
                                           "\x7f"};
  std::mt19937 rng(1234);
  int64_t total = 0;
  for (int trial = 0; trial < 400; ++trial) {
    std::string text;
    const int len = int(rng() % 40);
    for (int i = 0; i < len; ++i) text += pieces[rng() % pieces.size()];
    const std::vector<int64_t> want = naive_encode(text, v);
    ASSERT_EQ(tok.encode(text), want) << "text: '" << text << "'";
    ASSERT_EQ(tok.decode(want), text);
    total += int64_t(want.size());
  }
  EXPECT_GT(total, 4000);
}

TEST(Bpe, PretokenizesAsGpt2) {
  const Vocab v = make_vocab();
  const BpeTokenizer tok = BpeTokenizer::from_strings(v.vocab_json, v.merges_txt);
  using W = std::vector<std::string>;
  EXPECT_EQ(tok.pretokenize("I'm here  now,ok?"),
            (W{"I", "'m", " here", " ", " now", ",", "ok", "?"}));
  EXPECT_EQ(tok.pretokenize("end  \n"), (W{"end", "  \n"}));
  EXPECT_EQ(tok.pretokenize("x<|endoftext|> y"), (W{"x", "<|endoftext|>", " y"}));
  // Unicode letters and numbers (\p{L}, \p{N}) through PCRE2, and Unicode whitespace.
  EXPECT_EQ(tok.pretokenize("café 中文 ٣٤ 😀!"), (W{"café", " 中文", " ٣٤", " 😀!"}));
  EXPECT_EQ(tok.pretokenize("a\u00a0b"), (W{"a", "\u00a0", "b"}));  // U+00A0 is \s, not ' '
  // U+180E (a format character since Unicode 6.3) is not whitespace, though PCRE2's \s says so.
  EXPECT_EQ(tok.pretokenize("x\u180e\u180ey \u180e"), (W{"x", "\u180e\u180e", "y", " \u180e"}));
  for (const std::string t : {"ab12 cd", "  x  y\t\tz \n", "it's 'S 'sx ''d", "a,b;;c. ..d"})
    EXPECT_EQ(tok.pretokenize(t), ascii_pretokenize(t)) << t;
}

TEST(Bpe, EncodesUnicodeAsUtf8BytesAndDecodesBack) {
  const Vocab v = make_vocab();
  const BpeTokenizer tok = BpeTokenizer::from_strings(v.vocab_json, v.merges_txt);
  const std::string text = "Zürich — 中文 😀 the end";
  const std::vector<int64_t> ids = tok.encode(text);
  EXPECT_EQ(tok.decode(ids), text);
  // "ü" is two bytes, each its own symbol here (no merge joins them).
  const std::vector<int64_t> u = tok.encode("ü");
  ASSERT_EQ(u.size(), 2u);
  EXPECT_EQ(tok.id_to_token(u[0]), to_symbols("\xC3"));
  EXPECT_EQ(tok.decode(u[0]), "\xC3");  // a part of a character: raw bytes
  EXPECT_EQ(tok.decode(tok.eot_id()), "<|endoftext|>");
  EXPECT_EQ(tok.token_to_id(to_symbols(" the")), v.ids.at(to_symbols(" the")));
  EXPECT_FALSE(tok.token_to_id("nope").has_value());
}

TEST(Bpe, InvalidTextAndIdsAreErrors) {
  const Vocab v = make_vocab();
  const BpeTokenizer tok = BpeTokenizer::from_strings(v.vocab_json, v.merges_txt);
  EXPECT_NE(error_of([&] { tok.encode("ok \xff bad"); }).find("not valid UTF-8 at byte 3"),
            std::string::npos);
  EXPECT_NE(error_of([&] { tok.encode("x<|endoftext|>ab\xc3"); }).find("at byte 16"),
            std::string::npos);
  EXPECT_THROW(tok.decode(tok.vocab_size()), attn::IndexError);
  EXPECT_THROW(tok.decode(std::vector<int64_t>{0, -1}), attn::IndexError);
  EXPECT_TRUE(tok.encode("").empty());
  // A vocabulary without some byte's symbol cannot encode that byte.
  json j = json::parse(v.vocab_json);
  json k = json::object();
  int64_t next = 0;
  for (auto& [t, id] : j.items())
    if (t != "a") k[t] = next++;
  const BpeTokenizer no_a = BpeTokenizer::from_strings(k.dump(), "");
  EXPECT_NE(error_of([&] { no_a.encode("bab"); }).find("no token for byte 0x61"),
            std::string::npos);
}

TEST(Bpe, FileDefectsNameTheFileAndLine) {
  const Vocab v = make_vocab();
  auto err = [&](const std::string& vocab, const std::string& merges) {
    return error_of([&] { BpeTokenizer::from_strings(vocab, merges, "V.json", "M.txt"); });
  };
  auto has = [](const std::string& msg, const std::string& part) {
    return msg.find(part) != std::string::npos;
  };
  std::string m = err("{\"a\": 0,\n \"b\": }", "");
  EXPECT_TRUE(has(m, "[BpeTokenizer] 'V.json': not valid JSON") && has(m, "line 2")) << m;
  EXPECT_TRUE(has(err("[1, 2]", ""), "'V.json': expected a non-empty JSON object"));
  EXPECT_TRUE(has(err("{\"a\": 1}", ""), "token 'a' has id 1, expected an integer in [0, 1)"));
  EXPECT_TRUE(has(err("{\"a\": 0, \"b\": 0}", ""), "id 0 is given to both"));
  EXPECT_TRUE(has(err("{\"a\": \"0\"}", ""), "token 'a' has id \"0\""));
  const std::string t = to_symbols("t"), h = to_symbols("h");
  m = err(v.vocab_json, "#version: 0.2\n" + t + " " + h + "\nt zzz\n");
  EXPECT_TRUE(has(m, "'M.txt' line 3: token 'zzz' is not in the vocabulary")) << m;
  m = err(v.vocab_json, t + " " + h + "\n" + t + h + "\n");
  EXPECT_TRUE(has(m, "'M.txt' line 2: expected two tokens separated by one space")) << m;
  m = err(v.vocab_json, "a b c\n");
  EXPECT_TRUE(has(m, "'M.txt' line 1: expected two tokens")) << m;
  m = err(v.vocab_json, "x y\n");  // both tokens exist, "xy" does not
  EXPECT_TRUE(has(m, "line 1: the merged token 'xy' is not in the vocabulary")) << m;
  // CRLF line ends and blank lines are accepted.
  const BpeTokenizer crlf = BpeTokenizer::from_strings(v.vocab_json, t + " " + h + "\r\n\r\n");
  EXPECT_EQ(crlf.num_merges(), 1);
  EXPECT_NE(error_of([] {
              BpeTokenizer::from_files("/nonexistent/vocab.json", "/x");
            }).find("/nonexistent/vocab.json"),
            std::string::npos);
}

}  // namespace

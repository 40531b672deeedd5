// attn::data::Tokenizer (a Hugging Face tokenizer.json) on small files written here, whose ids
// follow from tokenizers' definitions by hand (and are what tokenizers 0.19.1 gives on the same
// files): BPE's merge order, byte fallback and fused unknown characters (with tokenizers' order
// when an unknown meets a byte-fallback character), added tokens with lstrip/rstrip/single_word,
// the template, and the decoders. The comparison with tokenizers itself on tinyshakespeare and
// Unicode text, for every kind of today's models, is tests/python/test_tokenizer_json.py.
// Also: defects named with the file and the field, invalid UTF-8, ids out of range.
#include <attn/tensor.h>
#include <attn/tokenizer.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

using attn::data::Tokenizer;
using json = nlohmann::json;
using Ids = std::vector<int64_t>;

json base(json vocab, json merges) {
  return {{"version", "1.0"},
          {"truncation", nullptr},
          {"padding", nullptr},
          {"added_tokens", json::array()},
          {"normalizer", nullptr},
          {"pre_tokenizer", nullptr},
          {"post_processor", nullptr},
          {"decoder", nullptr},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"vocab", std::move(vocab)},
            {"merges", std::move(merges)}}}};
}

Tokenizer load(const json& j) { return Tokenizer::from_string(j.dump(), "test.json"); }

TEST(Tokenizer, MergesTheLowestRankFirstAndTheLeftmostOfEqualRanks) {
  json j = base({{"a", 0}, {"b", 1}, {"c", 2}, {"ab", 3}, {"bc", 4}, {"abc", 5}},
                {"b c", json::array({"a", "b"}), "ab c"});
  const Tokenizer t = load(j);
  EXPECT_EQ(t.encode("abc"), (Ids{0, 4}));   // b c (rank 0) before a b (rank 1); no "a bc"
  EXPECT_EQ(t.encode("abab"), (Ids{3, 3}));  // a b twice
  EXPECT_EQ(t.encode("aabcc"), (Ids{0, 0, 4, 2}));
  EXPECT_EQ(t.encode("cab"), (Ids{2, 3}));
  j["model"]["ignore_merges"] = true;  // a word that is a token is that token
  EXPECT_EQ(load(j).encode("abc"), (Ids{5}));
  EXPECT_EQ(t.vocab_size(), 6);
  EXPECT_EQ(t.token_to_id("bc"), 4);
  EXPECT_FALSE(t.token_to_id("ca").has_value());
}

// The file checked against tokenizers 0.19.1 (see the header comment).
json fallback_file() {
  json j = base({{"<unk>", 0}, {"<0xC3>", 1}, {"<0xA9>", 2}, {"a", 3}, {"b", 4}, {" ", 5}},
                json::array());
  j["model"]["unk_token"] = "<unk>";
  j["model"]["fuse_unk"] = true;
  j["model"]["byte_fallback"] = true;
  j["added_tokens"] = json::array({{{"id", 6},
                                    {"content", "<m>"},
                                    {"single_word", false},
                                    {"lstrip", true},
                                    {"rstrip", true},
                                    {"normalized", false},
                                    {"special", true}},
                                   {{"id", 7},
                                    {"content", "ab"},
                                    {"single_word", true},
                                    {"lstrip", false},
                                    {"rstrip", false},
                                    {"normalized", false},
                                    {"special", false}}});
  const json m = {{"SpecialToken", {{"id", "<m>"}, {"type_id", 0}}}};
  j["post_processor"] = {
      {"type", "TemplateProcessing"},
      {"single", json::array({m, {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}, m})},
      {"pair", json::array()},
      {"special_tokens", {{"<m>", {{"id", "<m>"}, {"ids", {6}}, {"tokens", {"<m>"}}}}}}};
  j["decoder"] = {{"type", "Sequence"},
                  {"decoders", json::array({{{"type", "ByteFallback"}}, {{"type", "Fuse"}}})}};
  return j;
}

TEST(Tokenizer, ByteFallbackFusedUnknownsAddedTokensAndTheTemplate) {
  const Tokenizer t = load(fallback_file());
  EXPECT_EQ(t.encode("aé"), (Ids{6, 3, 1, 2, 6}));  // é as its UTF-8 bytes
  EXPECT_EQ(t.encode("aé", false), (Ids{3, 1, 2}));
  EXPECT_EQ(t.encode("a語語a"), (Ids{6, 3, 0, 3, 6}));  // two unknowns fused into one
  // An unknown waits for the next known character; byte-fallback ones do not release it.
  EXPECT_EQ(t.encode("語é"), (Ids{6, 1, 2, 0, 6}));
  // lstrip and rstrip take the spaces around <m>; "ab" only as a whole word.
  const auto e = t.encode_with_tokens("x  <m>  a");
  EXPECT_EQ(e.ids, (Ids{6, 0, 6, 3, 6}));
  EXPECT_EQ(e.tokens[2], "  <m>  ");
  EXPECT_EQ(t.encode("ab abx ab"), (Ids{6, 7, 5, 3, 4, 0, 5, 7, 6}));
  EXPECT_TRUE(t.is_special(6));
  EXPECT_FALSE(t.is_special(7));
  EXPECT_FALSE(t.is_special(3));
  EXPECT_EQ(t.id_to_token(7), "ab");
  EXPECT_EQ(t.vocab_size(), 8);
  EXPECT_EQ(t.encode(""), (Ids{6, 6}));

  // Bytes that are not UTF-8 decode to one U+FFFD each; special tokens skipped on request.
  const std::string bad3 = "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD";
  EXPECT_EQ(t.decode({3, 1, 2, 1, 3, 6}), "a" + bad3 + "a<m>");
  EXPECT_EQ(t.decode({3, 1, 2, 1, 3, 6}, true), "a" + bad3 + "a");
  EXPECT_EQ(t.decode({3, 1, 2, 3}), "aéa");
}

TEST(Tokenizer, ByteLevelAndMetaspaceAndStripDecoders) {
  json j = base({{"a", 0},
                 {"\xC4\xA0", 1},
                 {"\xC3\xA9", 2},
                 {"\xE2\x96\x81"
                  "b",
                  3}},
                json::array());
  j["decoder"] = {{"type", "ByteLevel"},
                  {"add_prefix_space", true},
                  {"trim_offsets", true},
                  {"use_regex", true}};
  // Ġ is the space's symbol; "é" as byte-level text is the byte 0xE9 alone (not UTF-8).
  EXPECT_EQ(load(j).decode({0, 1, 0}), "a a");
  EXPECT_EQ(load(j).decode({0, 2}), "a\xEF\xBF\xBD");
  j["decoder"] = {{"type", "Metaspace"},
                  {"replacement", "\xE2\x96\x81"},
                  {"prepend_scheme", "always"},
                  {"split", true}};
  EXPECT_EQ(load(j).decode({3, 3}), "b b");  // the first token's ▁ dropped
  j["decoder"] = {
      {"type", "Sequence"},
      {"decoders",
       json::array(
           {{{"type", "Replace"}, {"pattern", {{"String", "\xE2\x96\x81"}}}, {"content", " "}},
            {{"type", "Fuse"}},
            {{"type", "Strip"}, {"content", " "}, {"start", 1}, {"stop", 0}}})}};
  EXPECT_EQ(load(j).decode({3, 3, 0}), "b ba");
}

TEST(Tokenizer, DefectsAreNamedWithTheFileAndTheField) {
  auto refused = [](const std::function<void(json&)>& edit) {
    json j = base({{"a", 0}, {"b", 1}, {"ab", 2}}, {"a b"});
    edit(j);
    return attn::testing::error_of([&] { load(j); });
  };
  auto has = [](const std::string& msg, const std::string& text) {
    EXPECT_NE(msg.find(text), std::string::npos) << msg;
    EXPECT_NE(msg.find("'test.json'"), std::string::npos) << msg;
  };
  has(refused([](json& j) { j["model"]["merges"] = {"a c"}; }), "model.merges[0]: token 'c'");
  has(refused([](json& j) { j["model"]["merges"] = {"b a"}; }), "merged token 'ba'");
  has(refused([](json& j) { j["model"]["vocab"] = {{"a", -1}}; }), "model.vocab");
  has(refused([](json& j) { j["model"]["type"] = "Unigram"; }), "model.type: model 'Unigram'");
  has(refused([](json& j) {
        j["normalizer"] = {{"type", "Sequence"}, {"normalizers", {{{"type", "BertNormalizer"}}}}};
      }),
      "normalizer.normalizers[0].type");
  has(refused([](json& j) {
        j["pre_tokenizer"] = {{"type", "Metaspace"}, {"replacement", "ab"}};
      }),
      "pre_tokenizer.replacement: expected one character");
  has(refused([](json& j) {
        j["post_processor"] = {{"type", "TemplateProcessing"},
                               {"single", {{{"SpecialToken", {{"id", "<s>"}}}}}},
                               {"special_tokens", json::object()}};
      }),
      "special token '<s>'");
  has(refused([](json& j) {
        j["added_tokens"] = {{{"id", 5}, {"content", ""}}};
      }),
      "added_tokens[0].content");
  has(refused([](json& j) { j["truncation"] = {{"max_length", 8}}; }), "truncation");
  EXPECT_ERROR_HAS(Tokenizer::from_string("[1", "x.json"), "'x.json': not valid JSON");
  EXPECT_ERROR_HAS(Tokenizer::from_file("/nonexistent/tokenizer.json"), "/nonexistent");
}

TEST(Tokenizer, BadTextAndIdsAreRefused) {
  const Tokenizer t = load(base({{"a", 0}, {"b", 1}, {"ab", 2}}, {"a b"}));
  EXPECT_ERROR_HAS(t.encode("ab\xC3"), "not valid UTF-8 at byte 2");
  EXPECT_ERROR_HAS(t.encode("\xED\xA0\x80"), "not valid UTF-8 at byte 0");  // a surrogate
  EXPECT_THROW(t.decode({0, 3}), attn::IndexError);
  EXPECT_THROW(t.id_to_token(-1), attn::IndexError);
  EXPECT_EQ(t.decode({2, 1}), "ab b");  // no decoder: tokens joined by spaces
  EXPECT_ERROR_HAS(Tokenizer().encode("a"), "the tokenizer is empty");
}

}  // namespace

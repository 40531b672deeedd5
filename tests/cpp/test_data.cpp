// Tests for attn/data.h: reading text corpora, the character tokenizer and nanoGPT batches.
#include <attn/data.h>
#include <attn/io.h>
#include <attn/ops.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

using attn::Tensor;
using attn::data::CharTokenizer;
using attn::data::TextDataset;

using attn::testing::error_of;

using attn::testing::TempDir;

std::vector<int64_t> values(const Tensor& t) {
  Tensor c = t.contiguous();
  return std::vector<int64_t>(c.data_ptr<int64_t>(), c.data_ptr<int64_t>() + c.numel());
}

// ---- read_text_file
// -------------------------------------------------------------------------------

TEST(ReadTextFile, ReadsUtf8) {
  TempDir dir;
  const std::string text = "h\xc3\xa9llo\n\xe2\x98\x83 \xf0\x9f\x98\x80\n";
  EXPECT_EQ(attn::data::read_text_file(dir.write("ok.txt", text)), text);
}

TEST(ReadTextFile, Errors) {
  TempDir dir;
  const std::string missing = dir.path() + "/missing.txt";
  EXPECT_EQ(error_of([&] { attn::data::read_text_file(missing); }),
            "[read_text_file] cannot open '" + missing + "': No such file or directory");
  EXPECT_EQ(error_of([&] { attn::data::read_text_file(dir.path()); }),
            "[read_text_file] '" + dir.path() + "' is a directory");
  const std::string empty = dir.write("empty.txt", "");
  EXPECT_EQ(error_of([&] { attn::data::read_text_file(empty); }),
            "[read_text_file] '" + empty + "' is empty");
  const std::string nul = dir.write("nul.bin", std::string("abc\0def", 7));
  EXPECT_EQ(error_of([&] { attn::data::read_text_file(nul); }),
            "[read_text_file] '" + nul + "' is not text: NUL byte at byte offset 3");
  // Invalid sequences: a lone continuation byte, a truncated sequence, an overlong '/', a UTF-16
  // surrogate, a code point above U+10FFFF, and a sequence cut by the end of the file.
  const std::vector<std::pair<std::string, std::size_t>> bad = {
      {"ab\x80", 2},           {"ab\xc3(", 2},     {"x\xc0\xaf", 1}, {"xy\xed\xa0\x80", 2},
      {"\xf4\x90\x80\x80", 0}, {"ok \xe2\x98", 3}, {"\xff", 0}};
  for (std::size_t k = 0; k < bad.size(); ++k) {
    const auto& [bytes, offset] = bad[k];
    const std::string p = dir.write("bad" + std::to_string(k) + ".txt", bytes);
    EXPECT_EQ(error_of([&] { attn::data::read_text_file(p); }),
              "[read_text_file] '" + p +
                  "' is not valid UTF-8: invalid byte sequence at byte offset " +
                  std::to_string(offset));
  }
}

// ---- CharTokenizer
// -------------------------------------------------------------------------------

TEST(CharTokenizer, Ascii) {
  // Python: sorted(set("hello world")) == [' ', 'd', 'e', 'h', 'l', 'o', 'r', 'w']
  const auto tok = CharTokenizer::from_text("hello world");
  EXPECT_EQ(tok.vocab_size(), 8);
  EXPECT_EQ(tok.chars(), (std::vector<std::string>{" ", "d", "e", "h", "l", "o", "r", "w"}));
  EXPECT_EQ(tok.encode("hello world"), (std::vector<int64_t>{3, 2, 4, 4, 5, 0, 7, 5, 6, 4, 1}));
  EXPECT_EQ(tok.decode(tok.encode("world hello")), "world hello");
  EXPECT_EQ(tok.decode(std::vector<int64_t>{}), "");
  EXPECT_EQ(tok.decode(int64_t(7)), "w");
  EXPECT_EQ(tok.to_json(), R"({"chars":[" ","d","e","h","l","o","r","w"],"type":"char"})");
}

TEST(CharTokenizer, Multibyte) {
  // Python: t = 'héllo wörld ☃😀'; c = sorted(set(t))
  //   c == [' ', 'd', 'h', 'l', 'o', 'r', 'w', 'é', 'ö', '☃', '😀']
  //   [c.index(ch) for ch in t] == [2, 7, 3, 3, 4, 0, 6, 8, 5, 3, 1, 0, 9, 10]
  const std::string text = "h\xc3\xa9llo w\xc3\xb6rld \xe2\x98\x83\xf0\x9f\x98\x80";
  const auto tok = CharTokenizer::from_text(text);
  EXPECT_EQ(tok.chars(),
            (std::vector<std::string>{" ", "d", "h", "l", "o", "r", "w", "\xc3\xa9", "\xc3\xb6",
                                      "\xe2\x98\x83", "\xf0\x9f\x98\x80"}));
  const auto ids = tok.encode(text);
  EXPECT_EQ(ids, (std::vector<int64_t>{2, 7, 3, 3, 4, 0, 6, 8, 5, 3, 1, 0, 9, 10}));
  EXPECT_EQ(tok.decode(ids), text);
  const auto back = CharTokenizer::from_json(tok.to_json());
  EXPECT_EQ(back.chars(), tok.chars());
  EXPECT_EQ(back.encode(text), ids);
}

TEST(CharTokenizer, EncodeErrors) {
  const auto tok = CharTokenizer::from_text("ab\xc3\xa9");
  EXPECT_EQ(error_of([&] { tok.encode("abz"); }),
            "[CharTokenizer::encode] character 'z' (U+007A) at position 2 is not in the "
            "vocabulary of 3 characters");
  // Positions count characters, not bytes.
  EXPECT_ERROR_HAS(tok.encode("\xc3\xa9\xc3\xa9\xe2\x82\xac"),
                   "'\xe2\x82\xac' (U+20AC) at position 2");
  EXPECT_ERROR_HAS(tok.encode("a\n"), "'\\n' (U+000A) at position 1");
  EXPECT_ERROR_HAS(tok.encode(std::string("a\0", 2)), "'\\x00' (U+0000)");
  EXPECT_ERROR_HAS(tok.encode("\xc2\x85"), "'\\x85' (U+0085)");
  EXPECT_ERROR_HAS(tok.encode("ab\xc3"), "invalid UTF-8 at byte offset 2");
  EXPECT_ERROR_HAS(CharTokenizer::from_text(""), "empty");
  EXPECT_ERROR_HAS(CharTokenizer::from_text("a\xe9z"), "invalid UTF-8 at byte offset 1");
}

TEST(CharTokenizer, DecodeOutOfRange) {
  const auto tok = CharTokenizer::from_text("abc");
  EXPECT_THROW(tok.decode(int64_t(3)), attn::IndexError);
  EXPECT_THROW(tok.decode(int64_t(-1)), attn::IndexError);
  EXPECT_THROW(tok.decode(std::vector<int64_t>{0, 1, 3}), attn::IndexError);
  EXPECT_ERROR_HAS(tok.decode(std::vector<int64_t>{0, 1, 3}),
                   "id 3 at position 2 is out of range for vocabulary size 3");
}

TEST(CharTokenizer, ConstructorValidates) {
  EXPECT_EQ(CharTokenizer(std::vector<std::string>{"a", "b"}).encode("ba"),
            (std::vector<int64_t>{1, 0}));
  EXPECT_ERROR_HAS(CharTokenizer(std::vector<std::string>{"a", "a"}), "duplicate");
  EXPECT_ERROR_HAS(CharTokenizer(std::vector<std::string>{"b", "a"}), "out of order");
  // Ordered by code point: 'é' (U+00E9) comes after 'z' (U+007A).
  EXPECT_ERROR_HAS(CharTokenizer(std::vector<std::string>{"\xc3\xa9", "z"}), "out of order");
  EXPECT_ERROR_HAS(CharTokenizer(std::vector<std::string>{"ab"}), "entry 0 is not exactly one");
  EXPECT_ERROR_HAS(CharTokenizer(std::vector<std::string>{"a", ""}), "entry 1 is not exactly one");
  EXPECT_ERROR_HAS(CharTokenizer(std::vector<std::string>{"\xc3"}), "not exactly one");
  EXPECT_EQ(CharTokenizer().vocab_size(), 0);
}

TEST(CharTokenizer, FromJsonErrors) {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "invalid JSON"},
      {R"({"type": "char", "chars": ["a"])", "invalid JSON"},
      {R"(["a"])", "expected a JSON object"},
      {R"({"chars": ["a"]})", "\"type\" must be \"char\""},
      {R"({"type": "bpe", "chars": ["a"]})", "\"type\" must be \"char\""},
      {R"({"type": "char"})", "\"chars\" must be an array"},
      {R"({"type": "char", "chars": "ab"})", "\"chars\" must be an array"},
      {R"({"type": "char", "chars": []})", "\"chars\" is empty"},
      {R"({"type": "char", "chars": ["a", 1]})", "\"chars\"[1] is not a string"},
      {R"({"type": "char", "chars": ["a", "bc"]})", "entry 1 is not exactly one"},
      {R"({"type": "char", "chars": ["b", "a"]})", "out of order"},
      {R"({"type": "char", "chars": ["a", "a"]})", "duplicate"},
      {R"({"type": "char", "chars": ["a"], "extra": 1})", "unknown field 'extra'"},
      {R"({"type": "char", "type": "char", "chars": ["a"]})", "key 'type' more than once"},
      {"{\"type\": \"char\", \"chars\": [\"\xff\"]}", "invalid JSON"},
  };
  for (const auto& c : cases) {
    const std::string& json = c.first;
    const std::string& expect = c.second;
    SCOPED_TRACE(json);
    const std::string msg = error_of([&] { CharTokenizer::from_json(json); });
    EXPECT_EQ(msg.rfind("[CharTokenizer::from_json] ", 0), 0u) << msg;
    EXPECT_NE(msg.find(expect), std::string::npos) << msg;
  }
  // JSON escapes are decoded: "\u00e9" is 'é'.
  EXPECT_EQ(CharTokenizer::from_json(R"({"type":"char","chars":["\n","\u00e9"]})").chars(),
            (std::vector<std::string>{"\n", "\xc3\xa9"}));
}

// ---- TextDataset --------------------------------------------------------------------------------

std::vector<int64_t> ramp(int64_t n) {
  std::vector<int64_t> v(static_cast<std::size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[std::size_t(i)] = 3 * i + 1;
  return v;
}

TEST(TextDataset, SplitSizesMatchNanoGPT) {
  // Python: int(n * 0.9) for n in (1, 9, 10, 11, 1112, 1115394) == (0, 8, 9, 9, 1000, 1003854)
  const std::vector<std::pair<int64_t, int64_t>> sizes = {
      {1, 0}, {9, 8}, {10, 9}, {11, 9}, {1112, 1000}, {1115394, 1003854}};
  for (const auto& [n, n_train] : sizes) {
    TextDataset ds(ramp(n));
    EXPECT_EQ(int64_t(ds.train().size()), n_train) << n;
    EXPECT_EQ(int64_t(ds.val().size()), n - n_train) << n;
    if (n_train > 0) {
      EXPECT_EQ(ds.train().back(), 3 * (n_train - 1) + 1);
    }
    if (n_train < n) {
      EXPECT_EQ(ds.val().front(), 3 * n_train + 1);
    }
  }
  EXPECT_EQ(TextDataset(ramp(10), 0.5).train().size(), 5u);
  EXPECT_EQ(TextDataset(ramp(10), 1.0).val().size(), 0u);
  EXPECT_THROW(TextDataset(ramp(10), 1.5), attn::Error);
  EXPECT_THROW(TextDataset(ramp(10), -0.1), attn::Error);
}

TEST(TextDataset, BatchMatchesTorchOffsets) {
  // 1112 tokens: train = first 1000, val = last 112.
  TextDataset ds(ramp(1112));
  attn::Generator gen;
  gen.manual_seed(1337);
  // Offsets printed by /usr/bin/python3 (torch 1.13):
  //   g = torch.Generator().manual_seed(1337)
  //   torch.randint(1000 - 8, (4,), generator=g)  -> tensor([119, 925, 796, 360])
  //   torch.randint(112 - 8, (3,), generator=g)   -> tensor([87, 89, 79])
  const std::vector<int64_t> train_ix = {119, 925, 796, 360};
  const auto [x, y] = ds.batch(true, 4, 8, &gen);
  EXPECT_EQ(x.dtype(), attn::Dtype::Int64);
  EXPECT_EQ(y.dtype(), attn::Dtype::Int64);
  EXPECT_EQ(x.shape(), (attn::Shape{4, 8}));
  EXPECT_EQ(y.shape(), (attn::Shape{4, 8}));
  std::vector<int64_t> ex, ey;
  for (int64_t i : train_ix)
    for (int64_t t = 0; t < 8; ++t) {
      ex.push_back(ds.train()[std::size_t(i + t)]);
      ey.push_back(ds.train()[std::size_t(i + t + 1)]);
    }
  EXPECT_EQ(values(x), ex);
  EXPECT_EQ(values(y), ey);

  const std::vector<int64_t> val_ix = {87, 89, 79};
  const auto [vx, vy] = ds.batch(false, 3, 8, &gen);
  ex.clear();
  ey.clear();
  for (int64_t i : val_ix)
    for (int64_t t = 0; t < 8; ++t) {
      ex.push_back(ds.val()[std::size_t(i + t)]);
      ey.push_back(ds.val()[std::size_t(i + t + 1)]);
    }
  EXPECT_EQ(values(vx), ex);
  EXPECT_EQ(values(vy), ey);
}

TEST(TextDataset, BatchUsesWholeSplit) {
  // With len == block_size + 1 the only offset is 0: y reaches the last token.
  TextDataset ds(ramp(20), 0.5);  // train = 10 tokens
  attn::Generator gen(1);
  const auto [x, y] = ds.batch(true, 2, 9, &gen);
  EXPECT_EQ(values(x)[0], 1);
  EXPECT_EQ(values(y)[8], 3 * 9 + 1);
  EXPECT_EQ(values(y)[17], 3 * 9 + 1);
}

TEST(TextDataset, BatchErrors) {
  TextDataset ds(ramp(20), 0.5);  // 10 and 10 tokens
  attn::Generator gen(1);
  EXPECT_ERROR_HAS(ds.batch(true, 2, 10, &gen), "corpus shorter than the block size");
  EXPECT_ERROR_HAS(ds.batch(false, 2, 64, &gen), "validation split has 10 tokens");
  EXPECT_ERROR_HAS(TextDataset(ramp(5), 1.0).batch(false, 1, 1, &gen),
                   "corpus shorter than the block size");
  EXPECT_ERROR_HAS(ds.batch(true, 0, 4, &gen), "batch_size must be positive");
  EXPECT_ERROR_HAS(ds.batch(true, 2, 0, &gen), "block_size must be positive");
}

}  // namespace

// ---- packed documents
// ----------------------------------------------------------------------------

TEST(TextDataset, PackedBatchCutsTheSameWindowsAtTheDocuments) {
  // Documents of varying length, each ending with the separator (7, 8).
  std::vector<int64_t> tokens;
  attn::Generator lengths(3);
  while (tokens.size() < 2000) {
    const int64_t n = 1 + attn::randint(20, {1}, &lengths).item<int64_t>();
    for (int64_t i = 0; i < n; ++i) tokens.push_back(100 + int64_t(tokens.size()));  // unique
    tokens.push_back(7);
    tokens.push_back(8);
  }
  TextDataset ds(tokens);
  EXPECT_FALSE(ds.has_documents());
  attn::Generator g0(5);
  EXPECT_ERROR_HAS(ds.packed_batch(true, 2, 8, &g0), "no document separator is set");
  const int64_t docs = ds.set_document_separator({7, 8});
  // Each split begins a document, and so does every token after a separator.
  auto count = [](const std::vector<int64_t>& split) {
    int64_t n = split.empty() ? 0 : 1;
    for (std::size_t i = 2; i < split.size(); ++i) n += split[i - 2] == 7 && split[i - 1] == 8;
    return n;
  };
  EXPECT_EQ(docs, count(ds.train()) + count(ds.val()));
  EXPECT_GT(docs, 100);
  EXPECT_ERROR_HAS(ds.set_document_separator({}), "the separator has no tokens");

  for (const bool train : {true, false}) {
    attn::Generator g1(11), g2(11);
    const auto [x, y] = ds.batch(train, 6, 32, &g1);
    const TextDataset::PackedBatch p = ds.packed_batch(train, 6, 32, &g2);
    EXPECT_EQ(values(p.x), values(x));  // the same draws, the same windows
    const std::vector<int64_t> vy = values(y), py = values(p.y), pos = values(p.positions);
    const std::vector<int64_t>& split = train ? ds.train() : ds.val();
    int64_t boundaries = 0;
    for (int64_t b = 0; b < 6; ++b) {
      // The window's offset in the split, from its first token that is not a separator's.
      const std::vector<int64_t> vx = values(x);
      int64_t t0 = 0;
      while (vx[std::size_t(b * 32 + t0)] < 100) ++t0;
      auto hit = std::find(split.begin(), split.end(), vx[std::size_t(b * 32 + t0)]);
      ASSERT_NE(hit, split.end());
      const int64_t off = int64_t(hit - split.begin()) - t0;
      auto at = [&](int64_t i) { return i >= 0 ? split[std::size_t(i)] : -1; };
      int64_t expect_pos = 0;
      for (int64_t t = 0; t < 32; ++t) {
        const int64_t i = off + t;  // split index of x[b, t]
        const bool starts = t > 0 && at(i - 1) == 8 && at(i - 2) == 7;
        expect_pos = t == 0 || starts ? 0 : expect_pos + 1;
        EXPECT_EQ(pos[std::size_t(b * 32 + t)], expect_pos) << b << " " << t;
        const bool last = at(i) == 8 && at(i - 1) == 7;
        EXPECT_EQ(py[std::size_t(b * 32 + t)], last ? -100 : vy[std::size_t(b * 32 + t)]);
        boundaries += last;
      }
    }
    EXPECT_GT(boundaries, 6);  // the windows do cross documents
  }
}

// attn::io::save_torch / load_torch (PyTorch's torch.save format): round trips of value trees with
// shared storages, views and Parameters, and malformed archives and pickles, each a clear error of
// the documented kind. Interoperability with PyTorch itself is tested against torch 1.13 in
// tests/python/test_torch_format.py.
#include <attn/attn.h>
#include <attn/gpt.h>
#include <attn/torch_format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "../../src/io/torch_internal.h"
#include "test_util.h"

namespace {

using attn::io::ArchiveError;
using attn::io::UnpicklingError;
using attn::io::UnsupportedError;
using attn::io::Value;
using attn::testing::error_of;
using namespace std::string_literals;

bool has(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

template <typename E, typename F>
std::string error_as(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "wrong exception type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected an exception";
  return "";
}

// An archive holding `pkl` as data.pkl and the given records (names relative to "archive/").
std::string archive(const std::string& pkl,
                    const std::vector<std::pair<std::string, std::string>>& records = {}) {
  std::vector<std::pair<std::string, std::string_view>> r;
  std::vector<std::string> names;
  names.reserve(records.size());
  r.emplace_back("archive/data.pkl", pkl);
  for (const auto& [name, data] : records) {
    names.push_back("archive/" + name);
    r.emplace_back(names.back(), data);
  }
  r.emplace_back("archive/version", "3\n");
  return attn::io::detail::write_zip(r, "test");
}

// The pickle of ('storage', torch.<type>, key, 'cpu', numel) rebuilt as a tensor.
std::string tensor_pickle(const std::string& type, int numel, int offset,
                          const std::vector<int>& size, const std::vector<int>& stride) {
  std::string p =
      "\x80\x02"
      "ctorch._utils\n_rebuild_tensor_v2\n((X\x07\0\0\0storagectorch\n"s;
  p += type +
       "\nX\x01\0\0\0"
       "0X\x03\0\0\0cpuJ"s;
  for (int i = 0; i < 4; ++i) p.push_back(char((uint32_t(numel) >> (8 * i)) & 0xff));
  p += "tQJ";
  for (int i = 0; i < 4; ++i) p.push_back(char((uint32_t(offset) >> (8 * i)) & 0xff));
  for (const auto* v : {&size, &stride}) {
    p += "(";
    for (int x : *v) {
      p += "J";
      for (int i = 0; i < 4; ++i) p.push_back(char((uint32_t(x) >> (8 * i)) & 0xff));
    }
    p += "t";
  }
  p += "\x89"
       "ccollections\nOrderedDict\n)RtR.";
  return p;
}

TEST(TorchFormat, RoundTripKeepsValuesSharingAndViews) {
  attn::Tensor base = attn::arange(0, 12).to(attn::Dtype::Float32).reshape({3, 4});
  attn::Tensor t = base.transpose(0, 1);
  attn::Tensor row = base.select(0, 1);
  attn::Tensor ids = attn::tensor({int64_t(1), int64_t(-2), std::numeric_limits<int64_t>::max()});
  attn::Tensor flags = attn::tensor({true, false});
  attn::Tensor w = attn::ones({2, 2});
  w.requires_grad_(true);
  Value inner = Value::list({Value(int64_t(1)), Value(2.5), Value("x")});
  Value sd = Value::dict({{"base", Value(base)},
                          {"t", Value(t)},
                          {"row", Value(row)},
                          {"ids", Value(ids)},
                          {"flags", Value(flags)},
                          {"w", Value(w, true)}},
                         true);
  sd.attributes().emplace_back("_metadata",
                               Value::dict({{"", Value::dict({{"version", 1}})}}, true));
  Value root = Value::dict({
      {"model", sd},
      {"ints", Value::list({0, 255, 256, 65535, 65536, -1, std::numeric_limits<int32_t>::min(),
                            int64_t(1) << 40, std::numeric_limits<int64_t>::min(),
                            std::numeric_limits<int64_t>::max()})},
      {"f", Value(-0.0)},
      {"nan", Value(std::nan(""))},
      {"s", Value("h\xc3\xa9llo")},
      {"tup", Value::tuple({Value(), Value(true), Value(false)})},
      {Value(int64_t(7)), Value("int key")},
      {Value::tuple({1, "a"}), Value("tuple key")},
      {"a", inner},
      {"b", inner},
  });
  const std::string bytes = attn::io::to_torch_archive(root);
  const Value got = attn::io::from_torch_archive(bytes, "mem");
  EXPECT_EQ(attn::io::to_torch_archive(got), bytes);  // deterministic writer

  const Value& m = got.at("model");
  EXPECT_TRUE(m.ordered());
  ASSERT_EQ(m.attributes().size(), 1u);
  EXPECT_EQ(m.attributes()[0].first.as_str(), "_metadata");
  const attn::Tensor& gb = m.at("base").as_tensor();
  const attn::Tensor& gt = m.at("t").as_tensor();
  const attn::Tensor& gr = m.at("row").as_tensor();
  EXPECT_EQ(gt.strides(), (attn::Shape{1, 4}));
  EXPECT_EQ(gr.storage_offset(), 4);
  EXPECT_EQ(gb.impl()->storage, gt.impl()->storage);  // one storage, as written
  EXPECT_EQ(gb.impl()->storage, gr.impl()->storage);
  EXPECT_TRUE(attn::allclose(gt, t));
  EXPECT_TRUE(attn::equal(m.at("ids").as_tensor(), ids));
  EXPECT_TRUE(attn::equal(m.at("flags").as_tensor(), flags));
  EXPECT_TRUE(m.at("w").is_parameter());
  EXPECT_TRUE(m.at("w").as_tensor().requires_grad());
  EXPECT_FALSE(m.at("base").is_parameter());
  EXPECT_EQ(got.at("ints").items()[8].as_int(), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(got.at("ints").items()[7].as_int(), int64_t(1) << 40);
  EXPECT_TRUE(std::signbit(got.at("f").as_float()));
  EXPECT_TRUE(std::isnan(got.at("nan").as_float()));
  EXPECT_EQ(got.at("s").as_str(), "h\xc3\xa9llo");
  EXPECT_EQ(got.at("a").identity(), got.at("b").identity());  // shared list stays shared
  EXPECT_EQ(got.entries()[6].first.as_int(), 7);
  EXPECT_EQ(got.entries()[7].first.items()[1].as_str(), "a");
}

TEST(TorchFormat, SaveRefusesWhatItCannotWrite) {
  Value l = Value::list();
  l.items().push_back(l);
  EXPECT_TRUE(has(error_of([&] { attn::io::to_torch_archive(l); }), "recursive"));
  l.items().clear();  // break the cycle
  Value dup = Value::dict({{"a", 1}, {"a", 2}});
  EXPECT_TRUE(has(error_of([&] { attn::io::to_torch_archive(dup); }), "twice"));
  Value same = Value::dict({{Value(int64_t(1)), 1}, {Value(true), 2}});
  EXPECT_TRUE(has(error_of([&] { attn::io::to_torch_archive(same); }), "twice"));
  EXPECT_TRUE(has(error_of([&] { attn::io::to_torch_archive(Value("\xff")); }), "UTF-8"));
  Value listkey = Value::dict({{Value::list(), 1}});
  EXPECT_TRUE(has(error_of([&] { attn::io::to_torch_archive(listkey); }), "dict key is a list"));
  Value deep = Value::list();
  for (int i = 0; i < 1100; ++i) deep = Value::list({deep});
  EXPECT_TRUE(has(error_of([&] { attn::io::to_torch_archive(deep); }), "deeper than 1000"));
  EXPECT_TRUE(has(error_of([] { Value v{attn::Tensor()}; }), "defined tensor"));
}

TEST(TorchFormat, HandBuiltTensorPicklesLoad) {
  std::string data(24, '\0');
  for (int i = 0; i < 6; ++i) {
    const float f = float(i);
    std::memcpy(&data[4 * i], &f, 4);
  }
  const Value v = attn::io::from_torch_archive(
      archive(tensor_pickle("FloatStorage", 6, 1, {2, 2}, {1, 2}), {{"data/0", data}}));
  const attn::Tensor& t = v.as_tensor();
  EXPECT_EQ(t.shape(), (attn::Shape{2, 2}));
  EXPECT_EQ(t.strides(), (attn::Shape{1, 2}));
  EXPECT_EQ(t.storage_offset(), 1);
  EXPECT_EQ(t[0][0].item<float>(), 1.0f);  // storage element 1
  EXPECT_EQ(t[0][1].item<float>(), 3.0f);  // 1 + 2
}

TEST(TorchFormat, CorruptArchivesAreArchiveErrors) {
  const std::string good = attn::io::to_torch_archive(
      Value::dict({{"w", Value(attn::ones({3}))}, {"i", Value(attn::arange(0, 4))}}));
  EXPECT_TRUE(has(error_as<ArchiveError>([] { attn::io::from_torch_archive("", "f.pt"); }),
                  "[load_torch] 'f.pt': not a zip archive"));
  // Every truncation is an error (of one of the three kinds), never a crash.
  for (std::size_t n = 0; n < good.size(); ++n) {
    try {
      attn::io::from_torch_archive(std::string_view(good).substr(0, n));
      ADD_FAILURE() << "a truncation to " << n << " bytes loaded";
    } catch (const attn::Error&) {
    }
  }
  // Any byte flipped: an error, or (in padding and unused fields) the same value.
  for (std::size_t at = 0; at < good.size(); ++at) {
    std::string bad = good;
    bad[at] = char(bad[at] ^ 0x5a);
    try {
      attn::io::from_torch_archive(bad);
    } catch (const attn::Error&) {
    }
  }
  std::string flipped = good;
  flipped[flipped.find("archive/data.pkl") + 16 + 20] ^= 1;  // inside data.pkl's payload
  EXPECT_TRUE(
      has(error_as<ArchiveError>([&] { attn::io::from_torch_archive(flipped); }), "CRC-32"));

  const std::string no_pkl = attn::io::detail::write_zip({{"archive/version", "3\n"}}, "t");
  EXPECT_TRUE(has(error_as<ArchiveError>([&] { attn::io::from_torch_archive(no_pkl); }),
                  "no 'archive/data.pkl'"));
  const std::string pkl = tensor_pickle("FloatStorage", 6, 0, {6}, {1});
  EXPECT_TRUE(has(error_as<ArchiveError>([&] { attn::io::from_torch_archive(archive(pkl)); }),
                  "no record 'archive/data/0'"));
  EXPECT_TRUE(has(error_as<ArchiveError>([&] {
                    attn::io::from_torch_archive(archive(pkl, {{"data/0", std::string(8, '\0')}}));
                  }),
                  "needs 24 bytes but its record holds 8"));
  // Views that reach past their storage, or have negative strides or sizes.
  for (const auto& view : std::vector<std::tuple<int, std::vector<int>, std::vector<int>>>{
           {0, {7}, {1}},
           {5, {2}, {1}},
           {0, {2, 3}, {3, 2}},
           {0, {2}, {-1}},
           {0, {-1}, {1}},
           {7, {0}, {1}},
           {-1, {1}, {1}},
           {0, {2, 2}, {1 << 30, 1 << 30}}}) {
    const auto& [off, size, stride] = view;  // (a lambda cannot capture bindings in clang 14)
    const std::string pkl = tensor_pickle("FloatStorage", 6, off, size, stride);
    const std::string e = error_as<ArchiveError>([&] {
      attn::io::from_torch_archive(archive(pkl, {{"data/0", std::string(24, '\0')}}));
    });
    EXPECT_TRUE(has(e, "storage '0' (FloatStorage of 6 elements)")) << e;
  }
  EXPECT_TRUE(has(error_as<ArchiveError>([&] {
                    attn::io::from_torch_archive(
                        archive(tensor_pickle("BoolStorage", 2, 0, {2}, {1}),
                                {{"data/0", std::string("\x01\x02", 2)}}));
                  }),
                  "holds byte 2"));
  // Records compressed by another zip tool (method 8 in the local and central headers).
  std::string deflated = archive("\x80\x02N.");
  deflated[8] = 8;
  deflated[deflated.find("PK\x01\x02") + 10] = 8;
  EXPECT_TRUE(has(error_as<UnsupportedError>([&] { attn::io::from_torch_archive(deflated); }),
                  "record 'archive/data.pkl' is compressed (method 8)"));
}

TEST(TorchFormat, UnsupportedDtypesNameTheEntry) {
  const std::string half = tensor_pickle("DoubleStorage", 6, 0, {2, 3}, {3, 1});
  // Inside {'model': {'w': tensor}}: the pickle of the tensor wrapped by hand.
  std::string p = "\x80\x02}(X\x05\0\0\0model}(X\x01\0\0\0w"s;
  p += half.substr(2, half.size() - 3) + "uu.";
  const std::string e =
      error_as<UnsupportedError>([&] { attn::io::from_torch_archive(archive(p), "ckpt.pt"); });
  EXPECT_TRUE(has(e,
                  "[load_torch] 'ckpt.pt': entry ['model']['w'] is a float64 tensor "
                  "(torch.DoubleStorage) of shape (2, 3)"))
      << e;
  EXPECT_TRUE(has(error_as<UnsupportedError>([] {
                    attn::io::from_torch_archive(
                        archive("\x80\x02\x8a\x09" + std::string(9, '\1') + "."));
                  }),
                  "64-bit"));
}

TEST(TorchFormat, HostileAndMalformedPicklesAreUnpicklingErrors) {
  struct Case {
    std::string pkl, words;
  };
  const std::vector<Case> cases = {
      {"\x80\x02"
       "cposix\nsystem\nX\x02\0\0\0lsR."s,
       "Unsupported global: posix.system"},
      {"\x80\x02"
       "cbuiltins\neval\n.",
       "Unsupported global: builtins.eval"},
      {"\x80\x02\x8c\x08"
       "builtins\x8c\x04"
       "exec\x93.",
       "Unsupported global: builtins.exec"},
      {"\x80\x02"
       "ccollections\nOrderedDict\n.",
       "is the class or function collections.OrderedDict"},
      {"\x80\x02"
       "ctorch\nSize\nK\x01\x85R.",
       "torch.Size(x) with x a int"},
      {"", "truncated pickle"},
      {"\x80\x02N", "truncated pickle"},
      {"\x80\x02"
       "a.",
       "APPEND needs 1 item(s)"},
      {"\x80\x02"
       "(a.",
       "APPEND needs 1 item(s)"},
      {"\x80\x02"
       "e.",
       "APPENDS without a MARK"},
      {"\x80\x02"
       "h\x03.",
       "memo entry 3 is read before it is written"},
      {"\x80\x02"
       "NR.",
       "REDUCE needs 1 item(s)"},
      {"\x80\x02"
       "NNR.",
       "REDUCE calls a None"},
      {"\x80\x02"
       "}K\x01]s.",
       "" /* a list value is fine */},
      {"\x80\x02"
       "}]K\x01s.",
       "dict key is a list"},
      {"\x80\x02"
       "]q\x00h\x00"
       "a."s,
       "contains itself"},
      {"\x80\x02"
       "}q\x00K\x01h\x00s."s,
       "contains itself"},
      {"\x80\x02"
       "K\x01K\x02"
       "b.",
       "BUILD (setting attributes) on a int"},
      {"\x80\x02"
       "Q.",
       "BINPERSID needs 1 item(s)"},
      {"\x80\x02"
       "X\x07\0\0\0storage\x85Q."s,
       "persistent id that is not"},
      {"\x80\x02"
       "C\x01x.",
       ""},
      {"\x80\x02"
       "X\x02\0\0\0\xc3(."s,
       "not valid UTF-8"},
      {"\x80\x02"
       "X\xff\xff\xff\x7f"
       "abc.",
       "longer than the pickle"},
      {"\x80\x02"
       "c" +
           std::string(2000, 'a') + "\nb\n.",
       "GLOBAL name is not a line"},
      {"\x80\x02\x01.", "unsupported pickle opcode 0x01"},
      {"\x80\x07.", "pickle protocol 7"},
  };
  for (const Case& c : cases) {
    try {
      attn::io::from_torch_archive(archive(c.pkl), "x.pt");
      EXPECT_TRUE(c.words.empty()) << "loaded: " << c.words;
    } catch (const UnpicklingError& e) {
      EXPECT_TRUE(has(e.what(), c.words)) << e.what() << " / " << c.words;
      EXPECT_TRUE(has(e.what(), "[load_torch] 'x.pt': ")) << e.what();
    } catch (const UnsupportedError& e) {
      EXPECT_TRUE(c.words.empty()) << e.what();  // bytes objects
    }
  }
  // Nesting beyond 1000 levels, built without recursion in the pickle: refused, and freed
  // without overflowing the stack (chains of a million containers).
  for (const std::string& deep :
       {"\x80\x02N" + std::string(100'000, '\x85') + ".",
        "\x80\x02" + std::string(3000, ']') + std::string(2999, 'a') + "."}) {
    EXPECT_TRUE(has(error_as<UnpicklingError>([&] { attn::io::from_torch_archive(archive(deep)); }),
                    "nested deeper than 1000 levels"));
  }
  // A chain linked through the memo after the fact (each list appended to the one before).
  std::string chain = "\x80\x02]r\0\0\0\0"s;
  for (uint32_t i = 1; i < 100'000; ++i) {
    chain += "]r";
    for (int b = 0; b < 4; ++b) chain.push_back(char((i >> (8 * b)) & 0xff));
    chain += "0j";
    for (int b = 0; b < 4; ++b) chain.push_back(char(((i - 1) >> (8 * b)) & 0xff));
    chain += "j";
    for (int b = 0; b < 4; ++b) chain.push_back(char((i >> (8 * b)) & 0xff));
    chain += "a0";
  }
  chain += "j";
  chain += std::string("\0\0\0\0", 4);
  chain += ".";
  EXPECT_TRUE(has(error_as<UnpicklingError>([&] { attn::io::from_torch_archive(archive(chain)); }),
                  "nested deeper than 1000 levels"));
}

TEST(TorchFormat, FilesOnDisk) {
  const std::string path = ::testing::TempDir() + "attn_torch_format.pt";
  attn::io::save_torch(path, Value::dict({{"x", Value(attn::ones({2}))}}));
  EXPECT_TRUE(attn::equal(attn::io::load_torch(path).at("x").as_tensor(), attn::ones({2})));
  // save_torch writes the tensors from where they lie; the file is to_torch_archive's bytes.
  const attn::Tensor base = attn::arange(0, 12).reshape({3, 4}).float_();
  const Value tree = Value::dict({{"a", Value(base)},
                                  {"view", Value(base.transpose(0, 1))},
                                  {"empty", Value(attn::zeros({0, 3}))},
                                  {"ints", Value(attn::arange(0, 5))}});
  attn::io::save_torch(path, tree);
  EXPECT_EQ(attn::io::read_file(path), attn::io::to_torch_archive(tree));
  // load_torch reads the file into one block that the tensors view (PyTorch's and attn's writers
  // align records to 64 bytes): no second copy. Writing to a loaded tensor leaves the file alone.
  const Value back = attn::io::load_torch(path);
  attn::Tensor a = back.at("a").as_tensor(), ints = back.at("ints").as_tensor();
  EXPECT_TRUE(attn::equal(a, base));
  EXPECT_TRUE(attn::equal(back.at("view").as_tensor(), base.transpose(0, 1)));
  EXPECT_TRUE(attn::equal(ints, attn::arange(0, 5)));
  EXPECT_EQ(a.impl()->storage, back.at("view").as_tensor().impl()->storage);  // still shared
  EXPECT_NE(a.impl()->storage, ints.impl()->storage);
  EXPECT_EQ(a.impl()->storage->owner, ints.impl()->storage->owner);  // one block for both
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(a.raw_data()) % 64, 0u);
  a.fill_(-1.0);
  EXPECT_TRUE(attn::equal(attn::io::load_torch(path).at("a").as_tensor(), base));
  std::remove(path.c_str());
  EXPECT_TRUE(has(error_of([&] { attn::io::load_torch(path); }), "[load_torch] cannot open"));
}

}  // namespace

namespace {

TEST(TorchFormat, ModuleStateDictRoundTrip) {
  attn::manual_seed(7);
  attn::nn::GPTConfig cfg;
  cfg.vocab_size = 11;
  cfg.block_size = 8;
  cfg.n_layer = 1;
  cfg.n_head = 2;
  cfg.n_embd = 8;
  attn::nn::GPT a(cfg), b(cfg);
  const std::string bytes = attn::io::to_torch_archive(attn::io::state_dict_value(a.state_dict()));
  b.load_state_dict(attn::io::tensors_of(attn::io::from_torch_archive(bytes)));
  const auto sa = a.state_dict(), sb = b.state_dict();
  ASSERT_EQ(sa.size(), sb.size());
  for (std::size_t i = 0; i < sa.size(); ++i) {
    EXPECT_EQ(sa[i].first, sb[i].first);
    EXPECT_TRUE(attn::equal(sa[i].second, sb[i].second)) << sa[i].first;
  }
  EXPECT_TRUE(has(error_of([] {
                    attn::io::tensors_of(Value::dict({{"w", 1}}));
                  }),
                  "[tensors_of] state dict entry 'w' is a int, not a tensor"));
  EXPECT_TRUE(has(error_of([] { attn::io::tensors_of(Value::list()); }), "must be a dict"));
}

}  // namespace

namespace {

// Found by fuzz/fuzz_torch_archive (fuzz/regressions/torch_archive/).
TEST(TorchFormat, FuzzRegressions) {
  // unreachable_cycle: a list holding itself that the result does not reach is freed (ASan's
  // leak check in scripts/sanitize.sh), and the result loads.
  const Value v = attn::io::from_torch_archive(archive("\x80\x02]]]2aa]]a."));
  ASSERT_EQ(v.kind(), Value::Kind::List);
  EXPECT_EQ(v.items().size(), 1u);
  // tuple_key_freed: tuple keys belong to the result too (they were emptied with the unreachable
  // containers, making two keys equal).
  const Value d = attn::io::from_torch_archive(archive("\x80\x02}(K\x01\x85K\x01)K\x02u."));
  ASSERT_EQ(d.entries().size(), 2u);
  EXPECT_EQ(d.entries()[0].first.items().size(), 1u);
  EXPECT_EQ(d.entries()[0].first.items()[0].as_int(), 1);
  EXPECT_EQ(d.entries()[1].first.items().size(), 0u);
  const Value again = attn::io::from_torch_archive(attn::io::to_torch_archive(d));
  EXPECT_EQ(again.entries()[0].first.items()[0].as_int(), 1);
}

}  // namespace

// Tests for attn/io.h: atomic file writes and the safetensors reader and writer.
//
// The expected bytes below are written by hand from the format description
// (https://huggingface.co/docs/safetensors): an 8-byte little-endian header length, the JSON
// header padded with spaces to a multiple of 8, then the raw little-endian tensor data.
#include <attn/io.h>
#include <attn/ops.h>
#include <dirent.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "test_util.h"

namespace {

using attn::Dtype;
using attn::Tensor;
namespace io = attn::io;

using attn::testing::TempDir;

std::string le64(uint64_t n) {
  std::string s;
  for (int i = 0; i < 8; ++i) s.push_back(char((n >> (8 * i)) & 0xff));
  return s;
}

// A file from a header text and data bytes (no padding added).
std::string make_file(const std::string& header, const std::string& data) {
  return le64(header.size()) + header + data;
}

template <typename T>
std::vector<T> values(const Tensor& t) {
  Tensor c = t.contiguous();
  const T* p = c.data_ptr<T>();
  return std::vector<T>(p, p + c.numel());
}

using attn::testing::error_of;
using attn::testing::outcome;

std::string load_error(const std::string& bytes) {
  return error_of([&] { io::from_safetensors(bytes, "t.safetensors"); });
}

// The small reference file of KnownBytes, used by several tests.
const std::string kKnownHeader =
    R"({"__metadata__":{"format":"pt"},"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
    R"("b":{"dtype":"I64","shape":[1,1],"data_offsets":[8,16]},)"
    R"("m":{"dtype":"BOOL","shape":[3],"data_offsets":[16,19]}})";
const std::string kKnownData = std::string("\x00\x00\x80\x3f\x00\x00\x20\xc0", 8) +  // 1, -2.5
                               std::string("\x07\x00\x00\x00\x00\x00\x00\x00", 8) +  // 7
                               std::string("\x01\x00\x01", 3);                       // T F T

std::vector<std::pair<std::string, Tensor>> known_tensors() {
  return {{"a", attn::tensor({1.0, -2.5})},
          {"b", attn::tensor({{7}})},
          {"m", attn::tensor({true, false, true})}};
}

// ---- write_file_atomic / read_file
// -----------------------------------------------------------------

TEST(FileIO, WriteAtomicCreatesAndReplaces) {
  TempDir dir;
  const std::string p = dir.file("out.bin");
  io::write_file_atomic(p, std::string("first\0content", 13));
  EXPECT_EQ(io::read_file(p), std::string("first\0content", 13));
  io::write_file_atomic(p, "second");
  EXPECT_EQ(io::read_file(p), "second");
  io::write_file_atomic(p, "");
  EXPECT_EQ(io::read_file(p), "");
  // No temporary file is left behind.
  EXPECT_EQ(dir.files(), std::vector<std::string>{"out.bin"});
}

TEST(FileIO, WriteAtomicLargeContent) {
  TempDir dir;
  std::string big(3 << 20, '\0');
  for (std::size_t i = 0; i < big.size(); ++i) big[i] = char((i * 2654435761u) >> 24);
  io::write_file_atomic(dir.file("big"), big);
  EXPECT_EQ(io::read_file(dir.file("big")), big);
}

TEST(FileIO, WriteAtomicMissingDirectoryThrows) {
  TempDir dir;
  const std::string p = dir.file("missing/out.bin");
  const std::string msg = error_of([&] { io::write_file_atomic(p, "x"); });
  EXPECT_NE(msg.find("[write_file_atomic]"), std::string::npos) << msg;
  EXPECT_NE(msg.find(p), std::string::npos) << msg;
  EXPECT_NE(msg.find("No such file or directory"), std::string::npos) << msg;
  EXPECT_TRUE(dir.files().empty());
}

TEST(FileIO, WriteAtomicParentIsAFileThrows) {
  TempDir dir;
  io::write_file_atomic(dir.file("plain"), "old");
  const std::string msg = error_of([&] { io::write_file_atomic(dir.file("plain/x"), "new"); });
  EXPECT_NE(msg.find("Not a directory"), std::string::npos) << msg;
  EXPECT_EQ(io::read_file(dir.file("plain")), "old");
  EXPECT_EQ(dir.files(), std::vector<std::string>{"plain"});
}

TEST(FileIO, WriteAtomicOntoDirectoryThrows) {
  TempDir dir;
  ASSERT_EQ(::mkdir(dir.file("sub").c_str(), 0755), 0);
  const std::string msg = error_of([&] { io::write_file_atomic(dir.file("sub"), "x"); });
  EXPECT_NE(msg.find("is a directory"), std::string::npos) << msg;
  ::rmdir(dir.file("sub").c_str());
}

// A write that fails half way (the file size limit is hit) keeps the old file and leaves no
// temporary file. Works as root too, unlike permission-based failures.
TEST(FileIO, WriteAtomicFailureMidWriteKeepsOldFile) {
  TempDir dir;
  const std::string p = dir.file("ckpt");
  io::write_file_atomic(p, "old content");
  struct rlimit old_limit {};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &old_limit), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);
  struct rlimit small = old_limit;
  small.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  std::string msg;
  try {
    io::write_file_atomic(p, std::string(100000, 'n'));
  } catch (const attn::Error& e) {
    msg = e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &old_limit);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_NE(msg.find("[write_file_atomic]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("File too large"), std::string::npos) << msg;
  EXPECT_EQ(io::read_file(p), "old content");
  EXPECT_EQ(dir.files(), std::vector<std::string>{"ckpt"});
}

TEST(FileIO, ReadFileErrors) {
  TempDir dir;
  const std::string missing = dir.file("nope");
  EXPECT_EQ(error_of([&] { io::read_file(missing); }),
            "[read_file] cannot open '" + missing + "': No such file or directory");
  EXPECT_EQ(error_of([&] { io::read_file(dir.path()); }),
            "[read_file] '" + dir.path() + "' is a directory");
}

// ---- safetensors: writing
// ---------------------------------------------------------------------------

TEST(SafeTensors, KnownBytes) {
  // 197 bytes of JSON + 3 spaces = 200 = 0xc8.
  ASSERT_EQ(kKnownHeader.size(), 197u);
  const std::string expected =
      std::string("\xc8\x00\x00\x00\x00\x00\x00\x00", 8) + kKnownHeader + "   " + kKnownData;
  const std::string got = io::to_safetensors(known_tensors(), {{"format", "pt"}});
  EXPECT_EQ(got, expected);
  EXPECT_EQ((got.size() - kKnownData.size()) % 8, 0u);
}

TEST(SafeTensors, NoMetadataAndNoTensors) {
  // "{}" padded to 8 bytes.
  EXPECT_EQ(io::to_safetensors({}), le64(8) + "{}      ");
  const auto st = io::from_safetensors(io::to_safetensors({}));
  EXPECT_TRUE(st.tensors.empty());
  EXPECT_TRUE(st.metadata.empty());
}

TEST(SafeTensors, ReadsIndependentlyWrittenFile) {
  // Written as Python's json.dumps would (spaces after separators), entries out of offset
  // order, metadata last, no padding.
  const std::string header = R"({"m": {"dtype": "BOOL", "shape": [3], "data_offsets": [16, 19]}, )"
                             R"("a": {"shape": [2], "dtype": "F32", "data_offsets": [0, 8]}, )"
                             R"("b": {"dtype": "I64", "data_offsets": [8, 16], "shape": [1, 1]}, )"
                             R"("__metadata__": {"format": "pt", "note": "h\u00e9"}})";
  const auto st = io::from_safetensors(make_file(header, kKnownData));
  ASSERT_EQ(st.tensors.size(), 3u);
  EXPECT_EQ(st.tensors[0].first, "a");  // file (offset) order
  EXPECT_EQ(st.tensors[1].first, "b");
  EXPECT_EQ(st.tensors[2].first, "m");
  EXPECT_EQ(st.at("a").dtype(), Dtype::Float32);
  EXPECT_EQ(st.at("a").shape(), (attn::Shape{2}));
  EXPECT_EQ(values<float>(st.at("a")), (std::vector<float>{1.0f, -2.5f}));
  EXPECT_EQ(st.at("b").dtype(), Dtype::Int64);
  EXPECT_EQ(st.at("b").shape(), (attn::Shape{1, 1}));
  EXPECT_EQ(values<int64_t>(st.at("b")), (std::vector<int64_t>{7}));
  EXPECT_EQ(st.at("m").dtype(), Dtype::Bool);
  EXPECT_EQ(values<bool>(st.at("m")), (std::vector<bool>{true, false, true}));
  EXPECT_EQ(st.metadata.at("format"), "pt");
  EXPECT_EQ(st.metadata.at("note"), "h\xc3\xa9");
}

TEST(SafeTensors, RoundTripEveryDtypeAndLayout) {
  attn::Generator gen(7);
  Tensor f = attn::randn({3, 4, 5}, &gen);
  Tensor ft = f.transpose(0, 2);  // non-contiguous
  Tensor fs = f.slice(1, 1, 4, 2).select(2, 3);
  Tensor i = attn::randint(-1000, 1000, {6, 2}, &gen);
  Tensor it = i.T();
  Tensor b = attn::randint(0, 2, {2, 3, 2}, &gen).to(Dtype::Bool);
  Tensor bt = b.permute({2, 0, 1});
  Tensor scalar = attn::tensor(3.25);
  Tensor empty_f = attn::empty({0, 3});
  Tensor empty_i = attn::empty({2, 0}, Dtype::Int64);
  Tensor expanded = attn::tensor({1.0, 2.0}).unsqueeze(0).expand({3, 2});
  std::vector<std::pair<std::string, Tensor>> in = {{"f", f},
                                                    {"ft", ft},
                                                    {"fs", fs},
                                                    {"i", i},
                                                    {"it", it},
                                                    {"b", b},
                                                    {"bt", bt},
                                                    {"scalar", scalar},
                                                    {"empty_f", empty_f},
                                                    {"empty_i", empty_i},
                                                    {"expanded", expanded}};
  const std::map<std::string, std::string> meta = {{"step", "12"}, {"k\xc3\xa9", "v\n\"q\""}};
  TempDir dir;
  const std::string p = dir.file("m.safetensors");
  io::save_safetensors(p, in, meta);
  EXPECT_EQ(dir.files(), std::vector<std::string>{"m.safetensors"});
  const auto st = io::load_safetensors(p);
  EXPECT_EQ(st.what, p);
  EXPECT_EQ(st.metadata, meta);
  ASSERT_EQ(st.tensors.size(), in.size());
  for (std::size_t k = 0; k < in.size(); ++k) {
    const auto& [name, t] = in[k];
    SCOPED_TRACE(name);
    EXPECT_EQ(st.tensors[k].first, name);  // written in the given order
    const Tensor& r = st.at(name);
    EXPECT_TRUE(r.is_contiguous());
    EXPECT_EQ(r.shape(), t.shape());
    EXPECT_EQ(r.dtype(), t.dtype());
    switch (t.dtype()) {
      case Dtype::Float32: EXPECT_EQ(values<float>(r), values<float>(t)); break;
      case Dtype::Int64: EXPECT_EQ(values<int64_t>(r), values<int64_t>(t)); break;
      case Dtype::Bool: EXPECT_EQ(values<bool>(r), values<bool>(t)); break;
      case Dtype::BFloat16:
      case Dtype::Float16: EXPECT_TRUE(attn::equal(r, t)); break;
    }
  }
  EXPECT_TRUE(st.contains("fs"));
  EXPECT_FALSE(st.contains("nope"));
  const std::string msg = error_of([&] { st.at("nope"); });
  EXPECT_NE(msg.find(p), std::string::npos) << msg;
  EXPECT_NE(msg.find("'nope'"), std::string::npos) << msg;
}

TEST(SafeTensors, WriterRejectsBadNames) {
  Tensor t = attn::zeros({1});
  EXPECT_THROW(io::to_safetensors({{"", t}}), attn::Error);
  EXPECT_THROW(io::to_safetensors({{"__metadata__", t}}), attn::Error);
  EXPECT_THROW(io::to_safetensors({{"a", t}, {"a", t}}), attn::Error);
  EXPECT_THROW(io::to_safetensors({{"a", Tensor()}}), attn::Error);
  EXPECT_THROW(io::to_safetensors({{"bad\xff", t}}), attn::Error);
  EXPECT_THROW(io::to_safetensors({{"a", t}}, {{"k", "bad\xc3"}}), attn::Error);
}

TEST(SafeTensors, LoadMissingFile) {
  TempDir dir;
  const std::string msg = error_of([&] { io::load_safetensors(dir.file("none.safetensors")); });
  EXPECT_NE(msg.find("[load_safetensors] cannot open"), std::string::npos) << msg;
}

// ---- safetensors: malformed input
// ------------------------------------------------------------------

TEST(SafeTensors, EveryTruncationIsRejected) {
  const std::string good = io::to_safetensors(known_tensors(), {{"format", "pt"}});
  ASSERT_NO_THROW(io::from_safetensors(good));
  for (std::size_t n = 0; n < good.size(); ++n) {
    SCOPED_TRACE(n);
    EXPECT_THROW(io::from_safetensors(std::string_view(good).substr(0, n)), attn::Error);
  }
  // An extra byte at the end is a hole too.
  EXPECT_NE(load_error(good + "x").find("trailing"), std::string::npos);
}

TEST(SafeTensors, ByteFlipsNeverEscapeAsOtherErrors) {
  const std::string good = io::to_safetensors(known_tensors(), {{"format", "pt"}});
  const std::size_t data_start = good.size() - kKnownData.size();
  int accepted = 0;
  for (std::size_t pos = 0; pos < good.size(); ++pos) {
    for (unsigned mask : {0x01u, 0x20u, 0x80u, 0xffu}) {
      std::string bad = good;
      bad[pos] = char(uint8_t(bad[pos]) ^ mask);
      try {
        const auto st = io::from_safetensors(bad);
        ++accepted;
        // Header flips that still parse must keep every invariant (the same total size).
        std::size_t total = 0;
        for (const auto& [n, t] : st.tensors) total += t.numel() * attn::itemsize(t.dtype());
        EXPECT_EQ(total, kKnownData.size()) << pos;
      } catch (const attn::Error&) {
      } catch (const std::exception& e) {
        ADD_FAILURE() << "byte " << pos << " mask " << mask << ": non-attn exception " << e.what();
      }
    }
  }
  // Flips in the float and int data always load (with other values); flips of the bool bytes
  // to values other than 0/1 do not.
  EXPECT_GE(accepted, int(16 * 4));
  std::string flipped = good;
  flipped[data_start] = char(0x01);
  const char bits[4] = {1, 0, char(0x80), 0x3f};  // 1.0f with the lowest mantissa bit set
  float expected;
  std::memcpy(&expected, bits, 4);
  EXPECT_EQ(values<float>(io::from_safetensors(flipped).at("a"))[0], expected);
}

TEST(SafeTensors, HeaderLengthErrors) {
  EXPECT_NE(load_error("").find("too short"), std::string::npos);
  EXPECT_NE(load_error(std::string(7, '\0')).find("too short"), std::string::npos);
  // Huge lengths: above the cap, and near 2^64 (no overflow in the size check).
  EXPECT_NE(load_error(le64(uint64_t(1) << 63) + "{}").find("exceeds the limit"),
            std::string::npos);
  EXPECT_NE(load_error(le64(~uint64_t(0)) + "{}").find("exceeds the limit"), std::string::npos);
  EXPECT_EQ(load_error(le64(999999) + std::string(112, ' ')),
            "[load_safetensors] 't.safetensors': header length 999999 exceeds file size 120 "
            "minus 8");
  EXPECT_THROW(io::from_safetensors(le64(0)), attn::Error);
  EXPECT_THROW(io::from_safetensors(le64(2) + "  "), attn::Error);    // not '{'
  EXPECT_THROW(io::from_safetensors(le64(4) + " {} "), attn::Error);  // leading space
  EXPECT_NO_THROW(io::from_safetensors(le64(8) + "{}      "));        // trailing padding
}

TEST(SafeTensors, MalformedHeaders) {
  const std::string f8(8, '\0');  // two float32 zeros
  struct Case {
    std::string header, data, expect;
  };
  const std::vector<Case> cases = {
      {R"({"a": )", "", "not valid JSON"},
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}} x)", f8, "not valid JSON"},
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},})", f8, "not valid JSON"},
      {"{\"\xff\": 1}", "", "not valid JSON"},  // invalid UTF-8 in a key
      {R"({"a": [1, 2]})", "", "tensor 'a' is not a JSON object"},
      {R"({"a": {"shape": [2], "data_offsets": [0, 8]}})", f8, "has no \"dtype\""},
      {R"({"a": {"dtype": "F32", "data_offsets": [0, 8]}})", f8, "has no \"shape\""},
      {R"({"a": {"dtype": "F32", "shape": [2]}})", f8, "has no \"data_offsets\""},
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8], "x": 1}})", f8,
       "unknown field 'x'"},
      {R"({"a": {"dtype": "F64", "shape": [1], "data_offsets": [0, 8]}})", f8,
       "unsupported dtype F64"},
      {R"({"a": {"dtype": "I32", "shape": [2], "data_offsets": [0, 8]}})", f8,
       "unsupported dtype I32"},
      {R"({"a": {"dtype": "BF16", "shape": [2], "data_offsets": [0, 8]}})", f8, "needs 4"},
      {R"({"a": {"dtype": "F16", "shape": [5], "data_offsets": [0, 8]}})", f8, "needs 10"},
      {R"({"a": {"dtype": "f32", "shape": [2], "data_offsets": [0, 8]}})", f8,
       "unsupported dtype f32"},
      {R"({"a": {"dtype": 1, "shape": [2], "data_offsets": [0, 8]}})", f8, "not a string"},
      {R"({"a": {"dtype": "F32", "shape": 2, "data_offsets": [0, 8]}})", f8, "not an array"},
      {R"({"a": {"dtype": "F32", "shape": [-2], "data_offsets": [0, 8]}})", f8, "invalid size"},
      {R"({"a": {"dtype": "F32", "shape": [2.0], "data_offsets": [0, 8]}})", f8, "invalid size"},
      {R"({"a": {"dtype": "F32", "shape": ["2"], "data_offsets": [0, 8]}})", f8, "invalid size"},
      {R"({"a": {"dtype": "F32", "shape": [4294967296, 4294967296], "data_offsets": [0, 8]}})", f8,
       "too many elements"},
      {R"({"a": {"dtype": "F32", "shape": [18446744073709551615], "data_offsets": [0, 8]}})", f8,
       "invalid size"},
      {R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", f8, "needs 12"},
      {R"({"a": {"dtype": "I64", "shape": [2], "data_offsets": [0, 8]}})", f8, "needs 16"},
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0]}})", f8, "not a pair"},
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8, 8]}})", f8, "not a pair"},
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [-8, 0]}})", f8, "not a pair"},
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": {"0": 8}}})", f8, "not a pair"},
      {R"({"a": {"dtype": "F32", "shape": [0], "data_offsets": [8, 0]}})", f8, "end before begin"},
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}})", f8 + f8.substr(4),
       "exceed the data section"},
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [18446744073709551608, )"
       R"(18446744073709551615]}})",
       f8, "needs 8"},
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [18446744073709551600, )"
       R"(18446744073709551608]}})",
       f8, "exceed the data section"},
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, )"
       R"("b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
       f8 + f8, "overlap"},
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}, )"
       R"("b": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})",
       f8, "overlap"},
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", f8 + "1234", "a hole"},
      {R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, )"
       R"("b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})",
       f8 + "1234", "a hole"},
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", f8 + "x", "trailing"},
      {R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}, )"
       R"("a": {"dtype": "F32", "shape": [1], "data_offsets": [4, 8]}})",
       f8, "key 'a' more than once"},
      {R"({"a": {"dtype": "F32", "dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})", f8,
       "key 'dtype' more than once"},
      {R"({"__metadata__": {"k": "v", "k": "w"}})", "", "key 'k' more than once"},
      {R"({"__metadata__": ["a"]})", "", "not an object of strings"},
      {R"({"__metadata__": null})", "", "not an object of strings"},
      {R"({"__metadata__": {"k": 1}})", "", "entry 'k' is not a string"},
      {R"({"__metadata__": {"k": {"x": "y"}}})", "", "entry 'k' is not a string"},
      {R"({"m": {"dtype": "BOOL", "shape": [2], "data_offsets": [0, 2]}})",
       std::string("\x01\x02", 2), "holds byte 2 at element 1"},
      {"{\"a\": " + std::string(50, '[') + std::string(50, ']') + "}", "", "nested too deeply"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.header);
    const std::string msg = load_error(make_file(c.header, c.data));
    EXPECT_EQ(msg.rfind("[load_safetensors] 't.safetensors': ", 0), 0u) << msg;
    EXPECT_NE(msg.find(c.expect), std::string::npos) << msg;
  }
}

TEST(SafeTensors, HeaderMustBeAnObject) {
  for (const std::string h : {"[]", "{}x", "{\"a\": 1}"}) {
    SCOPED_TRACE(h);
    EXPECT_THROW(io::from_safetensors(make_file(h, "")), attn::Error);
  }
}

TEST(SafeTensors, EmptyTensorsMayShareAnOffset) {
  const std::string header = R"({"e1": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}, )"
                             R"("x": {"dtype": "I64", "shape": [1], "data_offsets": [0, 8]}, )"
                             R"("e2": {"dtype": "BOOL", "shape": [3, 0], "data_offsets": [8, 8]}})";
  const auto st = io::from_safetensors(make_file(header, le64(42)));
  EXPECT_EQ(st.at("e1").shape(), (attn::Shape{0}));
  EXPECT_EQ(st.at("e2").shape(), (attn::Shape{3, 0}));
  EXPECT_EQ(values<int64_t>(st.at("x")), (std::vector<int64_t>{42}));
  // A zero dim makes a huge shape empty, not an overflow.
  const std::string h2 =
      R"({"z": {"dtype": "F32", "shape": [1000000000000000000, 0, 1000000000000000000], )"
      R"("data_offsets": [0, 0]}})";
  EXPECT_EQ(io::from_safetensors(make_file(h2, "")).at("z").numel(), 0);
}

// ---- SafeTensorsFile: the header when opened, each tensor when asked for ---------------------

// Writes bytes to path as they are (no fsync: many small files).
void put(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

void expect_same(const io::SafeTensors& a, const io::SafeTensors& b) {
  EXPECT_EQ(a.metadata, b.metadata);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (std::size_t i = 0; i < a.tensors.size(); ++i) {
    const auto& [an, at] = a.tensors[i];
    const auto& [bn, bt] = b.tensors[i];
    EXPECT_EQ(an, bn);
    EXPECT_EQ(at.dtype(), bt.dtype()) << an;
    ASSERT_EQ(at.shape(), bt.shape()) << an;
    const std::size_t n = std::size_t(at.numel()) * attn::itemsize(at.dtype());
    EXPECT_EQ(std::memcmp(at.contiguous().raw_data(), bt.contiguous().raw_data(), n), 0) << an;
  }
}

std::vector<std::pair<std::string, Tensor>> mixed_tensors() {
  auto t = known_tensors();
  t.emplace_back("w", attn::arange(0, 6).reshape({2, 3}).float_());
  t.emplace_back("h", attn::tensor({{0.5, -1.25, 3.0}, {2.0, 0.0, -8.0}}).bfloat16());
  t.emplace_back("e", attn::zeros({0, 4}));
  return t;
}

TEST(SafeTensorsFile, MapViewsTheFileCopyOnWrite) {
  TempDir dir;
  const std::string bytes = io::to_safetensors(mixed_tensors(), {});
  const std::string path = dir.write("m.safetensors", bytes);
  const io::SafeTensors whole = io::from_safetensors(bytes, path);
  for (const io::SafeTensorsFile& f :
       {io::SafeTensorsFile(path), io::SafeTensorsFile::from_bytes(bytes, path)}) {
    for (const auto& [name, t] : whole.tensors) expect_same({{{name, f.map(name)}}}, {{{name, t}}});
    EXPECT_EQ(error_of([&] { f.map("zz"); }),
              "[SafeTensorsFile::read] '" + path + "' has no tensor 'zz'");
  }
  // A mapped tensor outlives its reader, and writes to it stay in memory: the file is unchanged.
  Tensor h;
  {
    const io::SafeTensorsFile f(path);
    h = f.map("h");
  }
  h.fill_(7.0);
  EXPECT_EQ(h.to_float_vector(), std::vector<float>(6, 7.0f));
  expect_same(io::load_safetensors(path), whole);
  // A parameter given the mapped data keeps its identity (Tensor::set_data).
  Tensor p = attn::zeros({2, 3}, attn::Dtype::BFloat16);
  const Tensor alias = p;
  p.set_data(io::SafeTensorsFile(path).map("h"));
  expect_same({{{"h", alias}}}, {{{"h", whole.tensors[whole.tensors.size() - 2].second}}});
}

TEST(SafeTensorsFile, ReadsWhatFromSafetensorsReads) {
  TempDir dir;
  const std::string bytes = io::to_safetensors(mixed_tensors(), {{"format", "pt"}, {"k", "v"}});
  const std::string path = dir.write("m.safetensors", bytes);
  const io::SafeTensors whole = io::from_safetensors(bytes, path);
  for (const io::SafeTensorsFile& f :
       {io::SafeTensorsFile(path), io::SafeTensorsFile::from_bytes(bytes, path)}) {
    EXPECT_EQ(f.what(), path);
    EXPECT_EQ(f.metadata(), whole.metadata);
    ASSERT_EQ(f.entries().size(), whole.tensors.size());
    for (std::size_t i = 0; i < whole.tensors.size(); ++i) {
      const auto& [name, t] = whole.tensors[i];
      EXPECT_EQ(f.entries()[i].name, name);
      EXPECT_EQ(f.entries()[i].dtype, t.dtype());
      EXPECT_EQ(f.entries()[i].shape, t.shape());
      ASSERT_NE(f.find(name), nullptr);
      EXPECT_EQ(f.find(name)->shape, t.shape());
      expect_same({{{name, f.read(name)}}}, {{{name, t}}});
    }
    EXPECT_EQ(f.find("zz"), nullptr);
    expect_same(f.read_all(), whole);
    EXPECT_EQ(error_of([&] { f.read("zz"); }),
              "[SafeTensorsFile::read] '" + path + "' has no tensor 'zz'");
  }
  expect_same(io::load_safetensors(path), whole);
  // save_safetensors writes each tensor from where it lies: to_safetensors's bytes, a transposed
  // view included.
  auto with_view = mixed_tensors();
  with_view.emplace_back("wt", with_view[3].second.transpose(0, 1));
  const std::string saved = dir.file("saved.safetensors");
  io::save_safetensors(saved, with_view, {{"format", "pt"}});
  EXPECT_EQ(io::read_file(saved), io::to_safetensors(with_view, {{"format", "pt"}}));
  // A copy shares the open file, which outlives the original and its name.
  std::optional<io::SafeTensorsFile> copy;
  {
    io::SafeTensorsFile f(path);
    copy.emplace(f);
  }
  ASSERT_EQ(::unlink(path.c_str()), 0);
  expect_same(copy->read_all(), whole);
}

TEST(SafeTensorsFile, ReadIntoFillsTheDestinationInPlace) {
  TempDir dir;
  const std::string path = dir.write("m.safetensors", io::to_safetensors(mixed_tensors()));
  io::SafeTensorsFile f(path);
  const Tensor w = f.read("w");
  // Contiguous float32: the bytes land in dst's own storage; a leaf that requires grad is fine.
  Tensor dst = attn::zeros({2, 3}).requires_grad_(true);
  const void* storage = dst.raw_data();
  f.read_into("w", dst);
  EXPECT_TRUE(attn::equal(dst.detach(), w));
  EXPECT_EQ(dst.raw_data(), storage);
  // A transposed view (not contiguous) of a bigger tensor.
  Tensor base = attn::full({3, 2}, 7.0);
  Tensor view = base.transpose(0, 1);
  f.read_into("w", view);
  EXPECT_TRUE(attn::equal(base, w.transpose(0, 1)));
  // Another dtype is converted, as copy_ converts.
  Tensor f32 = attn::zeros({2, 3});
  f.read_into("h", f32);
  EXPECT_TRUE(attn::equal(f32, f.read("h").float_()));
  // Shapes must match; nothing is written then.
  Tensor wrong = attn::zeros({3, 2});
  EXPECT_EQ(error_of([&] { f.read_into("w", wrong); }),
            "[SafeTensorsFile::read_into] tensor 'w' of '" + path +
                "' has shape (2, 3) but the destination has shape (3, 2)");
  EXPECT_TRUE(attn::equal(wrong, attn::zeros({3, 2})));
  Tensor undefined;
  EXPECT_NE(error_of([&] { f.read_into("w", undefined); }).find("undefined"), std::string::npos);
}

// Opening a file and reading all of it fails exactly as from_safetensors fails on its bytes, or
// both succeed with the same tensors: every truncation of a good file and every byte flip.
TEST(SafeTensorsFile, RejectsWhatFromSafetensorsRejects) {
  TempDir dir;
  const std::string good = io::to_safetensors(known_tensors(), {{"format", "pt"}});
  const std::string path = dir.file("t.safetensors");
  auto compare = [&](const std::string& bytes, bool through_file) {
    std::string expected, got;
    io::SafeTensors a, b;
    expected = outcome([&] { a = io::from_safetensors(bytes, path); });
    if (through_file) {
      put(path, bytes);
      got = outcome([&] { b = io::SafeTensorsFile(path).read_all(); });
    } else {
      got = outcome([&] { b = io::SafeTensorsFile::from_bytes(bytes, path).read_all(); });
    }
    EXPECT_EQ(got, expected);
    if (expected.empty()) expect_same(b, a);
    return expected.empty();
  };
  int accepted = 0;
  for (std::size_t n = 0; n <= good.size() + 1; ++n) {
    SCOPED_TRACE(n);
    const std::string bytes = n <= good.size() ? good.substr(0, n) : good + "x";
    accepted += compare(bytes, true);
  }
  EXPECT_EQ(accepted, 1);  // the whole file only
  accepted = 0;
  for (std::size_t pos = 0; pos < good.size(); ++pos) {
    for (unsigned mask : {0x01u, 0x20u, 0x80u, 0xffu}) {
      SCOPED_TRACE(pos * 1000 + mask);
      std::string bad = good;
      bad[pos] = char(uint8_t(bad[pos]) ^ mask);
      accepted += compare(bad, false);
    }
  }
  EXPECT_GE(accepted, 16 * 4);  // flips in the float and int data load, with other values
}

// A BOOL tensor's bytes are checked when it is read: the header alone opens.
TEST(SafeTensorsFile, BoolBytesAreCheckedWhenRead) {
  TempDir dir;
  std::string bytes = io::to_safetensors(known_tensors());
  bytes[bytes.size() - 2] = 2;  // m[1]
  const std::string path = dir.write("b.safetensors", bytes);
  io::SafeTensorsFile f(path);
  EXPECT_TRUE(attn::equal(f.read("a"), attn::tensor({1.0, -2.5})));
  EXPECT_EQ(error_of([&] { f.read("m"); }), "[load_safetensors] '" + path +
                                                "': tensor 'm' (BOOL) holds byte 2 at element 1; "
                                                "expected 0 or 1");
}

// A U8 tensor (MXFP4 blocks and scales) has no attn dtype: its bytes come from read_u8, and the
// calls that make tensors refuse it, naming it.
TEST(SafeTensorsFile, U8TensorsAreReadAsBytes) {
  TempDir dir;
  const std::string header = R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},)"
                             R"( "q": {"dtype": "U8", "shape": [2, 3], "data_offsets": [4, 10]}})";
  const std::string data = std::string("\x00\x00\x80\x3f\x01\x02\xff\x00\x10\x7f", 10);
  std::string bytes = le64(header.size() + 6) + header + std::string(6, ' ') + data;
  const std::string path = dir.write("u8.safetensors", bytes);
  for (const io::SafeTensorsFile& f :
       {io::SafeTensorsFile(path), io::SafeTensorsFile::from_bytes(bytes, path)}) {
    ASSERT_NE(f.find("q"), nullptr);
    EXPECT_TRUE(f.find("q")->u8);
    EXPECT_FALSE(f.find("a")->u8);
    EXPECT_EQ(f.find("q")->shape, (attn::Shape{2, 3}));
    EXPECT_EQ(f.read_u8("q"), (std::vector<uint8_t>{1, 2, 255, 0, 16, 127}));
    EXPECT_TRUE(attn::equal(f.read("a"), attn::tensor({1.0})));
    const std::string refusal = "[load_safetensors] '" + path +
                                "': tensor 'q' is U8 (bytes, such as MXFP4 blocks and scales): "
                                "attn has no uint8 tensors; read its bytes with read_u8";
    EXPECT_EQ(error_of([&] { f.read("q"); }), refusal);
    EXPECT_EQ(error_of([&] { f.map("q"); }), refusal);
    EXPECT_EQ(error_of([&] { f.read_all(); }), refusal);
    Tensor dst = attn::zeros({2, 3});
    EXPECT_EQ(error_of([&] { f.read_into("q", dst); }), refusal);
    EXPECT_EQ(error_of([&] { f.read_u8("a"); }),
              "[load_safetensors] '" + path + "': tensor 'a' is F32, not U8: read it with read()");
  }
  // Its byte count is checked as every tensor's.
  const std::string short_header =
      R"({"q": {"dtype": "U8", "shape": [2, 3], "data_offsets": [0, 4]}})";
  const std::string bad = le64(short_header.size()) + short_header + "abcd";
  EXPECT_NE(error_of([&] { io::SafeTensorsFile::from_bytes(bad, "bad"); }).find("needs 6"),
            std::string::npos);
}

// Byte tensors are written as U8 after the tensors and read back as the same bytes; a shape that
// does not hold them, or a repeated name, is refused before anything is written.
TEST(SafeTensors, ByteTensorsAreWrittenAsU8) {
  TempDir dir;
  auto blocks = std::make_shared<const std::vector<uint8_t>>(
      std::vector<uint8_t>{0, 1, 2, 3, 254, 255, 16, 17, 128, 7, 8, 9});
  auto scales = std::make_shared<const std::vector<uint8_t>>(std::vector<uint8_t>{127, 128, 0});
  const std::vector<io::ByteTensor> u8{{"w_blocks", {3, 2, 2}, blocks}, {"w_scales", {3}, scales}};
  const std::string path = dir.path() + "/u8.safetensors";
  io::save_safetensors(path, {{"a", attn::tensor({1.0, -2.5})}}, {{"format", "pt"}}, u8);
  const io::SafeTensorsFile f(path);
  ASSERT_EQ(f.entries().size(), 3u);
  EXPECT_TRUE(attn::equal(f.read("a"), attn::tensor({1.0, -2.5})));
  EXPECT_TRUE(f.find("w_blocks")->u8);
  EXPECT_EQ(f.find("w_blocks")->shape, (attn::Shape{3, 2, 2}));
  EXPECT_EQ(f.read_u8("w_blocks"), *blocks);
  EXPECT_EQ(f.read_u8("w_scales"), *scales);
  EXPECT_EQ(f.metadata().at("format"), "pt");
  EXPECT_EQ(io::to_safetensors({}, {}, u8).size() % 8, 7u);  // header padded to 8, then 15 bytes

  EXPECT_EQ(error_of([&] {
              io::to_safetensors({}, {}, {{"w", {2, 2}, scales}});
            }),
            "[to_safetensors] byte tensor 'w' of shape (2, 2) needs 4 bytes, got 3");
  EXPECT_EQ(error_of([&] {
              io::to_safetensors({{"w", attn::tensor({1.0})}}, {}, {{"w", {3}, scales}});
            }),
            "[to_safetensors] tensor name 'w' is repeated");
  EXPECT_EQ(error_of([&] {
              io::to_safetensors({}, {}, {{"w", {3}, nullptr}});
            }),
            "[to_safetensors] byte tensor 'w' has no bytes");
  EXPECT_EQ(error_of([&] {
              io::save_safetensors(dir.path() + "/no.safetensors", {}, {}, {{"w", {-1}, scales}});
            }),
            "[to_safetensors] byte tensor 'w' has shape (-1,)");
  EXPECT_FALSE(std::filesystem::exists(dir.path() + "/no.safetensors"));
}

TEST(SafeTensorsFile, AFileThatShrinksAfterOpeningIsAnError) {
  TempDir dir;
  const std::string bytes = io::to_safetensors(known_tensors());
  const std::string path = dir.write("s.safetensors", bytes);
  io::SafeTensorsFile f(path);
  ASSERT_EQ(::truncate(path.c_str(), off_t(bytes.size() - 2)), 0);
  EXPECT_TRUE(attn::equal(f.read("a"), attn::tensor({1.0, -2.5})));  // still all there
  const std::size_t m = bytes.size() - 3;                            // where m's bytes start
  EXPECT_EQ(error_of([&] { f.read("m"); }), "[load_safetensors] '" + path +
                                                "': the file ended before tensor 'm' (bytes " +
                                                std::to_string(m) + " to " + std::to_string(m + 3) +
                                                ") was read: it changed after it was opened");
}

TEST(SafeTensorsFile, OpenErrorsAndPipes) {
  TempDir dir;
  EXPECT_EQ(error_of([&] { io::SafeTensorsFile(dir.file("none")); }),
            "[load_safetensors] cannot open '" + dir.file("none") + "': No such file or directory");
  EXPECT_EQ(error_of([&] { io::SafeTensorsFile(dir.path()); }),
            "[load_safetensors] '" + dir.path() + "' is a directory");
  // A pipe has no size and no offsets: its bytes are read whole, then the same checks.
  const std::string fifo = dir.file("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string bytes = io::to_safetensors(known_tensors(), {{"format", "pt"}});
  std::thread writer([&] { put(fifo, bytes); });
  io::SafeTensors st;
  const std::string err = outcome([&] { st = io::SafeTensorsFile(fifo).read_all(); });
  writer.join();
  EXPECT_EQ(err, "");
  expect_same(st, io::from_safetensors(bytes));
}

}  // namespace

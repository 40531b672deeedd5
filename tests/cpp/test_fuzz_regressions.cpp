// Inputs that crashed (or misbehaved under the sanitizers) in the libFuzzer targets of fuzz/, or
// that reviewing the parsers for those targets showed would, rebuilt in code so that the normal
// build keeps checking them. The raw inputs are in fuzz/regressions/<target>/ (run by
// `ctest -L fuzz` in the sanitizer build, scripts/sanitize.sh).
#include <attn/attn.h>
#include <attn/data.h>
#include <attn/gpt.h>
#include <attn/io.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "../../tools/attn/train.h"
#include "test_util.h"

namespace attn::tools {
int check_command_line(std::span<const std::string> args, std::ostream& out);  // main.cpp
}  // namespace attn::tools

namespace {

using attn::testing::contains;
using attn::testing::error_of;
using json = nlohmann::json;

// A safetensors file written byte by byte (8-byte little-endian header length, JSON, data).
std::string safetensors_bytes(const std::string& header, const std::string& data) {
  std::string out;
  const uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out.push_back(char((n >> (8 * i)) & 0xff));
  return out + header + data;
}

// ---- fuzz_tensor --------------------------------------------------------------------------------

// fuzz/regressions/tensor/int64_from_float_overflow: [1e30, INT64_MIN] as int64. The float was
// converted with a plain cast (undefined behaviour; UBSan: "1e+30 is outside the range of
// representable values of type 'long'"). Now an error, as torch ("value cannot be converted to
// type int64 without overflow").
TEST(FuzzRegressions, TensorInt64FromOutOfRangeFloat) {
  const int64_t min = std::numeric_limits<int64_t>::min();
  std::string msg = error_of([&] {
    attn::tensor(attn::NestedList{1e30, static_cast<long long>(min)}, attn::Dtype::Int64);
  });
  EXPECT_TRUE(
      contains(msg, "[tensor] value 1e+30 cannot be converted to type int64 without overflow"))
      << msg;
  const double inf = std::numeric_limits<double>::infinity();
  for (double bad : {std::nan(""), inf, -inf, 9.3e18, 9223372036854775808.0, -9.3e18}) {
    msg = error_of([&] { attn::tensor(attn::NestedList{{1.0}, {bad}}, attn::Dtype::Int64); });
    EXPECT_TRUE(contains(msg, "cannot be converted to type int64 without overflow")) << bad;
  }
  // What fits is truncated towards zero, as torch.tensor([...], dtype=torch.int64) does.
  attn::Tensor t = attn::tensor(attn::NestedList{1.9, -1.9, -9223372036854775808.0, 9.2e18, 7.0},
                                attn::Dtype::Int64);
  ASSERT_EQ(t.dtype(), attn::Dtype::Int64);
  const int64_t* p = t.data_ptr<int64_t>();
  EXPECT_EQ(p[0], 1);
  EXPECT_EQ(p[1], -1);
  EXPECT_EQ(p[2], min);
  EXPECT_EQ(p[3], int64_t(9200000000000000000LL));
  EXPECT_EQ(p[4], 7);
  // Float and bool tensors take any float (torch: inf and True).
  EXPECT_TRUE(std::isinf(attn::tensor(attn::NestedList{1e300}).data_ptr<float>()[0]));
  EXPECT_TRUE(attn::tensor(attn::NestedList{std::nan("")}, attn::Dtype::Bool).data_ptr<bool>()[0]);
}

// ---- fuzz_safetensors ---------------------------------------------------------------------------

// fuzz/regressions/safetensors/empty_tensor_name: a tensor called "" loaded, but to_safetensors
// refuses to write that name, so a file read could not be written back (the fuzzer's round trip
// threw). The reader now rejects it.
TEST(FuzzRegressions, SafetensorsEmptyTensorName) {
  const std::string bytes = safetensors_bytes(
      R"({"":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})", std::string(4, '\0'));
  const std::string msg = error_of([&] { attn::io::from_safetensors(bytes, "x.safetensors"); });
  EXPECT_EQ(msg, "[load_safetensors] 'x.safetensors': a tensor has an empty name");
  // The writer's side of the same rule.
  EXPECT_TRUE(contains(error_of([] {
                         attn::io::to_safetensors({{"", attn::zeros({1})}});
                       }),
                       "non-empty"));
}

// An empty tensor whose sizes after the first multiply past int64 was rejected by the tensor
// allocator ("[shape] the strides of (0, ...) overflow int64"), without naming the file; the
// reader now checks the strides itself.
TEST(FuzzRegressions, SafetensorsEmptyTensorWithHugeSizes) {
  const std::string header = R"({"a":{"dtype":"F32","shape":[0,1099511627776,1099511627776],)"
                             R"("data_offsets":[0,0]}})";
  const std::string msg =
      error_of([&] { attn::io::from_safetensors(safetensors_bytes(header, ""), "e.safetensors"); });
  EXPECT_TRUE(contains(msg, "[load_safetensors] 'e.safetensors': tensor 'a' shape ")) << msg;
  EXPECT_TRUE(contains(msg, "has sizes whose strides overflow int64")) << msg;
  // Large but representable empty tensors still load (the first size has no stride to overflow).
  const std::string ok = R"({"a":{"dtype":"F32","shape":[1000000000000000000,0,1000000000000000],)"
                         R"("data_offsets":[0,0]}})";
  attn::io::SafeTensors st = attn::io::from_safetensors(safetensors_bytes(ok, ""));
  EXPECT_EQ(st.at("a").shape(), (attn::Shape{1000000000000000000, 0, 1000000000000000}));
}

// ---- fuzz_checkpoint ----------------------------------------------------------------------------

// A checkpoint of a tiny model as `attn train` writes them (tests edit `meta` or `tensors`).
struct TinyCheckpoint {
  attn::nn::GPTConfig config;
  std::map<std::string, std::string> meta;
  std::vector<std::pair<std::string, attn::Tensor>> tensors;

  explicit TinyCheckpoint(bool bias = false, bool training = false) {
    config.vocab_size = 3;
    config.block_size = 4;
    config.n_layer = 1;
    config.n_head = 2;
    config.n_embd = 4;
    config.dropout = 0.0;
    config.bias = bias;
    attn::Generator gen(7);
    attn::nn::GPT model(config, &gen);
    for (const auto& [name, t] : model.state_dict()) tensors.emplace_back(name, t);
    meta["format"] = training ? "attn-train" : "attn-gpt";
    meta["config"] = config_json().dump();
    meta["tokenizer"] = attn::data::CharTokenizer::from_text("abc").to_json();
    meta["step"] = "2";
    if (training) {
      std::ostringstream hex;
      for (uint8_t b : attn::Generator(1).get_state())
        hex << "0123456789abcdef"[b >> 4] << "0123456789abcdef"[b & 15];
      meta["rng_state"] = hex.str();
      meta["history"] = R"([{"step":0,"train_loss":1.5,"val_loss":1.6}])";
    }
  }
  json config_json() const {
    return json{{"vocab_size", config.vocab_size},
                {"block_size", config.block_size},
                {"n_layer", config.n_layer},
                {"n_head", config.n_head},
                {"n_embd", config.n_embd},
                {"dropout", config.dropout},
                {"bias", config.bias}};
  }
  std::string bytes() const { return attn::io::to_safetensors(tensors, meta); }
};

using attn::tools::CheckpointUse;

std::string parse_error(const std::string& bytes, CheckpointUse use) {
  return error_of([&] { attn::tools::parse_checkpoint(bytes, "ck.safetensors", use); });
}

// The checkpoints these tests edit load, with and without biases, and their weights fit.
TEST(FuzzRegressions, CheckpointTinyModelsLoad) {
  for (bool bias : {false, true}) {
    for (bool training : {false, true}) {
      TinyCheckpoint t(bias, training);
      const CheckpointUse use = training ? CheckpointUse::Resume : CheckpointUse::Generate;
      attn::tools::Checkpoint ck = attn::tools::parse_checkpoint(t.bytes(), "ck", use);
      EXPECT_EQ(ck.config, t.config);
      attn::nn::GPT model(ck.config);
      attn::tools::load_checkpoint_weights(model, ck, "ck", use);
      if (training) {
        EXPECT_EQ(ck.step, 2);
        ASSERT_EQ(ck.history.size(), 1u);
        EXPECT_EQ(ck.history[0].val_loss, 1.6);
      }
    }
  }
}

// fuzz/regressions/checkpoint/config_float_size: "n_layer": 1e300 in the config was read with
// nlohmann's get<int64_t>, a plain cast of the double (undefined behaviour; UBSan: "1e+300 is
// outside the range of representable values of type 'long'").
TEST(FuzzRegressions, CheckpointConfigFloatSize) {
  TinyCheckpoint t;
  json c = t.config_json();
  c["n_layer"] = 1e300;
  t.meta["config"] = c.dump();
  std::string msg = parse_error(t.bytes(), CheckpointUse::Generate);
  EXPECT_TRUE(contains(msg,
                       "[generate] 'ck.safetensors': metadata 'config' is not a GPT "
                       "configuration: n_layer 1e+300 is not an integer"))
      << msg;
  c["n_layer"] = 1.0;  // integral but still a float: as strict as the writer
  t.meta["config"] = c.dump();
  EXPECT_TRUE(contains(parse_error(t.bytes(), CheckpointUse::Generate), "is not an integer"));
  TinyCheckpoint training(false, true);
  c["n_layer"] = 18446744073709551615ull;
  training.meta["config"] = c.dump();
  msg = parse_error(training.bytes(), CheckpointUse::Resume);
  EXPECT_TRUE(contains(msg,
                       "[train] 'ck.safetensors': metadata 'config' is not a GPT "
                       "configuration: n_layer 18446744073709551615 is too large"))
      << msg;
}

// fuzz/regressions/checkpoint/config_huge_model: a config of 100000 layers of width 4096 (valid on
// its own) made `attn generate` build that model (trillions of parameters) before comparing it with
// the few weights in the file: out of memory. The reader now checks first that the file holds at
// least as many values as such a model has parameters.
TEST(FuzzRegressions, CheckpointConfigFarLargerThanTheWeights) {
  TinyCheckpoint t;
  json c = t.config_json();
  c["n_layer"] = 100000;
  c["n_embd"] = 4096;
  t.meta["config"] = c.dump();
  const std::string msg = parse_error(t.bytes(), CheckpointUse::Generate);
  EXPECT_TRUE(contains(msg,
                       "[generate] 'ck.safetensors': the weights hold 232 values but the "
                       "model of its config "))
      << msg;
  EXPECT_TRUE(contains(msg, " has at least 20133478432768 parameters")) << msg;
  // Sizes whose products overflow 64 bits saturate instead of wrapping to a small number.
  c["n_layer"] = 1 << 20;
  c["n_embd"] = int64_t(1) << 40;
  c["n_head"] = 1;
  t.meta["config"] = c.dump();
  EXPECT_TRUE(contains(parse_error(t.bytes(), CheckpointUse::Generate),
                       "has at least 18446744073709551615 parameters"));
  // Through the command line, as the fuzzer's input was read.
  attn::testing::TempDir dir;
  const std::string path = dir.write("model.safetensors", t.bytes());
  std::ostringstream out, err;
  const int code = attn::tools::cli_main(
      std::vector<std::string>{"generate", "--ckpt", path, "--max-new-tokens", "1"}, out, err);
  EXPECT_EQ(code, 1);
  EXPECT_TRUE(contains(err.str(), "attn: error: [generate] '" + path + "': the weights hold 232"))
      << err.str();
}

// A file that lacks a tensor is caught by the same count (the no-bias model has exactly the
// counted parameters), before anything is allocated.
TEST(FuzzRegressions, CheckpointMissingWeight) {
  TinyCheckpoint t;
  t.tensors.pop_back();  // ln_f.weight
  const std::string msg = parse_error(t.bytes(), CheckpointUse::Generate);
  EXPECT_TRUE(contains(msg, "the weights hold 228 values but the model of its config")) << msg;
  EXPECT_TRUE(contains(msg, "has at least 232 parameters")) << msg;
}

// fuzz/regressions/checkpoint/history_float_step: a history entry {"step": 1e300, ...} in a
// training checkpoint, read by `attn train --resume` with get<int64_t> (undefined behaviour).
TEST(FuzzRegressions, CheckpointHistoryFloatStep) {
  TinyCheckpoint t(false, true);
  t.meta["history"] = R"([{"step":1e300,"train_loss":1.5,"val_loss":1.6}])";
  std::string msg = parse_error(t.bytes(), CheckpointUse::Resume);
  EXPECT_TRUE(contains(msg,
                       "[train] 'ck.safetensors': metadata 'history' is not a list of "
                       "{step, train_loss, val_loss}: step 1e+300 is not an integer"))
      << msg;
  t.meta["history"] = R"([7])";
  msg = parse_error(t.bytes(), CheckpointUse::Resume);
  EXPECT_TRUE(contains(msg,
                       "metadata 'history' is not a list of {step, train_loss, val_loss}: "
                       "an entry is not an object: 7"))
      << msg;
}

// ---- fuzz_cli -----------------------------------------------------------------------------------

// fuzz_cli's entry point parses every command's flags but runs nothing: no training, no file.
TEST(FuzzRegressions, CheckCommandLineRunsNothing) {
  attn::testing::TempDir dir;
  auto check = [](std::vector<std::string> args) {
    std::ostringstream out;
    try {
      const int code = attn::tools::check_command_line(args, out);
      return std::to_string(code) + out.str();
    } catch (const std::runtime_error& e) {  // UsageError (main.cpp) or attn::Error
      return std::string("error: ") + e.what();
    }
  };
  const std::string out = dir.file("run");
  EXPECT_EQ(check({"train", "--out", out, "--max-iters", "1", "--data", dir.file("none.txt")}),
            "0");
  EXPECT_EQ(check({"generate", "--ckpt", dir.file("missing")}), "0");
  EXPECT_EQ(check({"heatmap", "--mechanism", "causal", "--out", dir.file("h.png")}), "0");
  EXPECT_EQ(check({"walkthrough", "--plots", dir.file("plots")}), "0");
  EXPECT_EQ(check({"plot", dir.file("spec.json"), "--out", dir.file("p.png")}), "0");
  EXPECT_TRUE(dir.files().empty());
  EXPECT_EQ(check({"train", "--n-embd", "10", "--n-head", "3"}),
            "error: train: --n-embd 10 is not divisible by --n-head 3");
  EXPECT_EQ(check({"heatmap", "--mechanism", "causal", "--out", "x.png", "--heads", "2"}),
            "error: heatmap: --heads applies to --mechanism multihead only");
  EXPECT_EQ(check({"walkthrough", "007"}),
            "error: walkthrough: unknown seed '007' (expected one of 000 001 002 003 004)");
  EXPECT_EQ(check({"frobnicate"}), "error: unknown command 'frobnicate'");
  EXPECT_EQ(check({"--version"}), "0attn 0.1.0\n");
  EXPECT_TRUE(check({"train", "--help"}).rfind("0usage: attn train", 0) == 0);
}

}  // namespace

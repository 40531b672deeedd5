// `attn train` and `attn generate` driven in-process through cli_main: output format, learning,
// checkpoints (contents, atomic keeping of the last good one, resume == uninterrupted run bit for
// bit), generation with and without the key/value cache, and every bad-input path (clear
// message, non-zero exit, checkpoint bytes untouched).
//
// cli_main is defined by tools/attn/main.cpp, which test_walkthrough.cpp compiles into this test
// binary (with ATTN_CLI_NO_MAIN); test_util.h declares it.
#include <attn/attn.h>
#include <attn/data.h>
#include <attn/gpt.h>
#include <attn/io.h>
#include <attn/plot.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <regex>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "../../tools/attn/train.h"
#include "test_util.h"

namespace attn::tools {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

using Result = attn::testing::CliResult;
using attn::testing::run_cli;
using attn::testing::slurp;
using attn::testing::spit;

// generate_command directly, to see what it writes to stderr.
Result run_generate(std::vector<std::string> args) {
  std::ostringstream out, err;
  Result r;
  r.code = generate_command(args, out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

std::vector<std::string> lines_of(const std::string& s) {
  std::vector<std::string> lines;
  std::istringstream in(s);
  std::string line;
  while (std::getline(in, line)) lines.push_back(line);
  return lines;
}

// The "step N: train loss X, val loss Y" lines.
std::vector<std::string> step_lines(const std::string& out) {
  std::vector<std::string> steps;
  static const std::regex eval_line(R"(step \d+: .*)");
  for (const std::string& l : lines_of(out))
    if (std::regex_match(l, eval_line)) steps.push_back(l);
  return steps;
}

// A learnable corpus with multi-byte characters: a short rhyme repeated.
std::string corpus() {
  std::string text;
  for (int i = 0; i < 40; ++i) text += "the cat sat on the mat; λ→é\nthe dog ran to the fog.\n";
  return text;
}

class TrainCli : public ::testing::Test {
 protected:
  static fs::path root_;
  static fs::path base_;  // a finished 40-step run with the tiny config

  static std::vector<std::string> tiny(const fs::path& out, int max_iters = 40,
                                       const std::string& data = "") {
    std::vector<std::string> a = attn::testing::tiny_train_args(
        data.empty() ? (root_ / "corpus.txt").string() : data, out.string(), max_iters,
        /*eval_interval=*/20, /*eval_iters=*/4);
    for (const char* f :
         {"--warmup-iters", "2", "--lr-decay-iters", "40", "--lr=1e-2", "--min-lr=1e-3"})
      a.push_back(f);
    return a;
  }

  static void SetUpTestSuite() {
    root_ = fs::temp_directory_path() / ("attn_train_cli_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
    spit(root_ / "corpus.txt", corpus());
    base_ = root_ / "base";
    Result r = run_cli(tiny(base_));
    ASSERT_EQ(r.code, 0) << r.out << r.err;
  }
  static void TearDownTestSuite() { fs::remove_all(root_); }

  // A copy of the finished run's directory.
  static fs::path copy_of_base(const std::string& name) {
    fs::path dir = root_ / name;
    fs::remove_all(dir);
    fs::copy(base_, dir, fs::copy_options::recursive);
    return dir;
  }

  // The checkpoint files' bytes, to show that a failed run left them alone.
  static std::map<std::string, std::string> snapshot(const fs::path& dir) {
    std::map<std::string, std::string> files;
    for (const char* name : {"model.safetensors", "ckpt.safetensors"})
      if (fs::exists(dir / name)) files[name] = slurp(dir / name);
    return files;
  }
};

fs::path TrainCli::root_;
fs::path TrainCli::base_;

std::vector<std::string> with(std::vector<std::string> args, const std::vector<std::string>& more) {
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

TEST_F(TrainCli, DoneLineIsLastAndWellFormed) {
  const int threads_before = get_num_threads();
  set_num_threads(2);
  Result r = run_cli(tiny(root_ / "format"));  // --threads 1 for the run only
  EXPECT_EQ(get_num_threads(), 2);
  set_num_threads(threads_before);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.err, "");
  std::vector<std::string> lines = lines_of(r.out);
  ASSERT_GE(lines.size(), 3u);
  EXPECT_TRUE(
      std::regex_match(lines.back(), std::regex(R"(done: iters=40 ms_per_iter=\d+\.\d\d )"
                                                R"(train_loss=\d+\.\d{4} val_loss=\d+\.\d{4} )"
                                                R"(tokens_per_s=\d+)")))
      << lines.back();
  EXPECT_TRUE(std::regex_match(lines[lines.size() - 2], std::regex(R"(peak_rss_mib=\d+(\.\d+)?)")))
      << lines[lines.size() - 2];
  // Evaluations at 0, 20 and 40, in nanoGPT's format; the done line repeats the last one.
  std::vector<std::string> steps = step_lines(r.out);
  ASSERT_EQ(steps.size(), 3u) << r.out;
  std::regex step_re(R"(step (\d+): train loss (\d+\.\d{4}), val loss (\d+\.\d{4}))");
  std::smatch m;
  ASSERT_TRUE(std::regex_match(steps[2], m, step_re)) << steps[2];
  EXPECT_EQ(m[1], "40");
  EXPECT_NE(lines.back().find("train_loss=" + m[2].str() + " val_loss=" + m[3].str()),
            std::string::npos);
  EXPECT_EQ(steps[0].rfind("step 0: ", 0), 0u);
  EXPECT_EQ(steps[1].rfind("step 20: ", 0), 0u);
  // Plain log lines every --log-interval (default 10) steps without a terminal.
  int log_lines = 0;
  for (const std::string& l : lines)
    log_lines += std::regex_match(l, std::regex(R"(step \d+/40 loss \d+\.\d{4} \| .*)"));
  EXPECT_EQ(log_lines, 4) << r.out;
  // ms_per_iter and tokens_per_s agree: tokens_per_s = batch * block * 1000 / ms_per_iter.
  std::smatch d;
  ASSERT_TRUE(std::regex_search(lines.back(), d,
                                std::regex(R"(ms_per_iter=([\d.]+) .* tokens_per_s=(\d+))")));
  double ms = std::stod(d[1]), tps = std::stod(d[2]);
  ASSERT_GT(ms, 0.0);
  // (ms_per_iter is printed rounded to 2 decimals, tokens_per_s to an integer.)
  EXPECT_GE(tps, 4 * 8 * 1000.0 / (ms + 0.005) - 1);
  EXPECT_LE(tps, 4 * 8 * 1000.0 / std::max(ms - 0.005, 1e-9) + 1);
  // loss.png is a PNG of a chart.
  plot::Image img = plot::decode_png(slurp(root_ / "format" / "loss.png"));
  EXPECT_GT(img.width, 100);
  EXPECT_GT(img.height, 100);
}

TEST_F(TrainCli, LossDecreasesOnALearnableCorpus) {
  io::SafeTensors ck = io::load_safetensors((base_ / "ckpt.safetensors").string());
  json hist = json::parse(ck.metadata.at("history"));
  ASSERT_EQ(hist.size(), 3u);
  double vocab = double(data::CharTokenizer::from_text(corpus()).vocab_size());
  double first = hist[0]["val_loss"], last = hist[2]["val_loss"];
  // An untrained model is close to uniform; 40 steps on a rhyme take most of the way down.
  EXPECT_NEAR(first, std::log(vocab), 0.3);
  EXPECT_LT(last, first - 1.0) << hist.dump();
  EXPECT_LT(double(hist[2]["train_loss"]), double(hist[0]["train_loss"]) - 1.0);
}

TEST_F(TrainCli, CheckpointsHoldWeightsAndMetadataAndLoad) {
  io::SafeTensors m = io::load_safetensors((base_ / "model.safetensors").string());
  EXPECT_EQ(m.metadata.at("format"), "attn-gpt");
  EXPECT_EQ(m.metadata.at("step"), "40");
  json cfg = json::parse(m.metadata.at("config"));
  data::CharTokenizer tok = data::CharTokenizer::from_json(m.metadata.at("tokenizer"));
  EXPECT_EQ(tok.chars(), data::CharTokenizer::from_text(corpus()).chars());
  nn::GPTConfig c;
  c.vocab_size = cfg.at("vocab_size");
  c.block_size = cfg.at("block_size");
  c.n_layer = cfg.at("n_layer");
  c.n_head = cfg.at("n_head");
  c.n_embd = cfg.at("n_embd");
  c.dropout = cfg.at("dropout");
  c.bias = cfg.at("bias");
  EXPECT_EQ(c.vocab_size, tok.vocab_size());
  EXPECT_EQ(c.block_size, 8);
  EXPECT_EQ(c.n_layer, 1);
  EXPECT_EQ(c.n_head, 2);
  EXPECT_EQ(c.n_embd, 16);
  EXPECT_FALSE(c.bias);  // --no-bias is the default (nanoGPT's)
  // The weights are the model's state_dict, by its names, and load strictly.
  nn::GPT model(c);
  std::map<std::string, Tensor> weights(m.tensors.begin(), m.tensors.end());
  EXPECT_EQ(weights.size(), model.state_dict().size());
  EXPECT_TRUE(weights.count("wte.weight"));
  EXPECT_TRUE(weights.count("h.0.attn.in_proj_weight"));
  model.load_state_dict(weights, true);
  EXPECT_TRUE(equal(model.wte->weight, weights.at("wte.weight")));

  // The training checkpoint: the same weights, optimizer state, generator state and history.
  io::SafeTensors ck = io::load_safetensors((base_ / "ckpt.safetensors").string());
  EXPECT_EQ(ck.metadata.at("format"), "attn-train");
  EXPECT_EQ(ck.metadata.at("step"), "40");
  EXPECT_EQ(ck.metadata.at("config"), m.metadata.at("config"));
  EXPECT_EQ(ck.metadata.at("tokenizer"), m.metadata.at("tokenizer"));
  EXPECT_EQ(ck.metadata.at("rng_state").size(), 2 * Generator::kStateSize);
  json tc = json::parse(ck.metadata.at("train_config"));
  EXPECT_EQ(tc.at("max_iters"), 40);
  EXPECT_EQ(tc.at("lr"), 1e-2);
  int optim_tensors = 0;
  for (const auto& [name, t] : ck.tensors) {
    if (name.rfind("optim.", 0) == 0) {
      ++optim_tensors;
    } else {
      ASSERT_TRUE(weights.count(name)) << name;
      EXPECT_TRUE(equal(t, weights.at(name))) << name;
    }
  }
  EXPECT_EQ(optim_tensors, 3 * int(model.parameters().size()));
  EXPECT_TRUE(ck.contains("optim.state.0.exp_avg"));
  EXPECT_EQ(ck.at("optim.state.0.step").item<int64_t>(), 40);
  EXPECT_TRUE(fs::exists(base_ / "loss.png"));
}

// Stopping at step 20 and resuming to 40 gives the very same run as 40 steps at once: the same
// printed losses, history, weights, optimizer and generator state, byte for byte. With dropout,
// so that the generator state carried across the restart matters.
TEST_F(TrainCli, ResumeEqualsUninterruptedRun) {
  for (int stop : {20, 27}) {  // an evaluation point, and a point between evaluations
    SCOPED_TRACE("stop at " + std::to_string(stop));
    fs::path a = root_ / ("whole" + std::to_string(stop)),
             b = root_ / ("split" + std::to_string(stop));
    Result whole = run_cli(with(tiny(a, 40), {"--dropout", "0.1"}));
    ASSERT_EQ(whole.code, 0) << whole.err;
    Result first = run_cli(with(tiny(b, stop), {"--dropout", "0.1"}));
    ASSERT_EQ(first.code, 0) << first.err;
    Result second = run_cli(with(tiny(b, 40), {"--dropout", "0.1", "--resume"}));
    ASSERT_EQ(second.code, 0) << second.err;

    std::vector<std::string> expected = step_lines(whole.out), got = step_lines(first.out);
    std::vector<std::string> resumed = step_lines(second.out);
    // The resumed run repeats the evaluation at its first step only when that is an eval point.
    ASSERT_FALSE(resumed.empty());
    if (stop % 20 == 0) {
      EXPECT_EQ(resumed.front(), got.back());
      resumed.erase(resumed.begin());
    } else {
      got.pop_back();  // the first run's final evaluation at step 27 is not part of the whole run
    }
    got.insert(got.end(), resumed.begin(), resumed.end());
    EXPECT_EQ(got, expected);
    auto losses = [](const std::string& out) {
      std::string done = out.substr(out.rfind("train_loss="));
      return done.substr(0, done.find(" tokens_per_s="));
    };
    EXPECT_EQ(losses(whole.out), losses(second.out));

    io::SafeTensors ca = io::load_safetensors((a / "ckpt.safetensors").string());
    io::SafeTensors cb = io::load_safetensors((b / "ckpt.safetensors").string());
    EXPECT_EQ(ca.metadata.at("history"), cb.metadata.at("history"));
    EXPECT_EQ(ca.metadata.at("rng_state"), cb.metadata.at("rng_state"));
    ASSERT_EQ(ca.tensors.size(), cb.tensors.size());
    for (std::size_t i = 0; i < ca.tensors.size(); ++i) {
      EXPECT_EQ(ca.tensors[i].first, cb.tensors[i].first);
      EXPECT_TRUE(equal(ca.tensors[i].second, cb.tensors[i].second)) << ca.tensors[i].first;
    }
    // (EXPECT_TRUE: a failure should not print two binary files.)
    EXPECT_TRUE(slurp(a / "model.safetensors") == slurp(b / "model.safetensors"));
    EXPECT_TRUE(slurp(a / "ckpt.safetensors") == slurp(b / "ckpt.safetensors"));
  }
}

TEST_F(TrainCli, ResumeAtTheEndOnlyEvaluatesAndLeavesTheCheckpoint) {
  fs::path dir = copy_of_base("resume_end");
  auto before = snapshot(dir);
  Result r = run_cli(with(tiny(dir, 40), {"--resume"}));
  ASSERT_EQ(r.code, 0) << r.err;
  std::vector<std::string> steps = step_lines(r.out);
  ASSERT_EQ(steps.size(), 1u);
  EXPECT_EQ(steps[0].rfind("step 40: ", 0), 0u);
  EXPECT_TRUE(snapshot(dir) == before) << "the checkpoint files changed";
  EXPECT_EQ(run_cli(with(tiny(dir, 30), {"--resume"})).code, 1);  // the checkpoint is past 30
}

TEST_F(TrainCli, GenerateSameTextWithAndWithoutCache) {
  std::vector<std::string> args = {
      "--ckpt", base_.string(), "--prompt", "the c",     "--max-new-tokens",
      "40",     "--seed",       "7",        "--threads", "1"};
  Result cached = run_generate(with({}, args));
  Result uncached = run_generate(with(args, {"--no-cache"}));
  ASSERT_EQ(cached.code, 0);
  ASSERT_EQ(uncached.code, 0);
  EXPECT_EQ(cached.out, uncached.out);
  // The prompt, then 40 characters of the corpus' alphabet (more than block_size: the context
  // is cropped along the way).
  ASSERT_EQ(cached.out.rfind("the c", 0), 0u) << cached.out;
  data::CharTokenizer tok = data::CharTokenizer::from_text(corpus());
  std::string text = cached.out;
  if (!text.empty() && text.back() == '\n') text.pop_back();
  EXPECT_EQ(int(tok.encode(text).size()), 5 + 40) << cached.out;
  EXPECT_TRUE(std::regex_match(cached.err, std::regex(R"(generate: tokens=40 ms=[\d.]+ )"
                                                      R"(tokens_per_s=[\d.]+ cache=on\n)")))
      << cached.err;
  EXPECT_NE(uncached.err.find("cache=off"), std::string::npos);

  // Same seed, same text; a model that learnt the rhyme continues it at a low temperature.
  Result again = run_generate(with({}, args));
  EXPECT_EQ(again.out, cached.out);
  Result greedy = run_generate({"--ckpt", (base_ / "model.safetensors").string(), "--prompt",
                                "the ", "--max-new-tokens", "3", "--top-k", "1"});
  ASSERT_EQ(greedy.code, 0);
  EXPECT_EQ(greedy.out.size(), 4u + 3u + 1u) << greedy.out;

  // The training checkpoint works as well, and through cli_main.
  Result from_ckpt = run_cli(
      with({"generate", "--ckpt", (base_ / "ckpt.safetensors").string()},
           {"--prompt", "the c", "--max-new-tokens", "40", "--seed", "7", "--threads", "1"}));
  ASSERT_EQ(from_ckpt.code, 0) << from_ckpt.err;
  EXPECT_EQ(from_ckpt.out, cached.out);
  // Without a prompt generation starts from "\n" (in this vocabulary).
  Result empty = run_generate({"--ckpt", base_.string(), "--max-new-tokens", "5"});
  ASSERT_EQ(empty.code, 0);
  EXPECT_EQ(empty.out.rfind("\n", 0), 0u);
}

TEST_F(TrainCli, GenerateThroughAPagedCacheOfEachDtype) {
  // Block 8: a 5-character prompt and 3 new ones fit.
  const std::vector<std::string> args = {
      "--ckpt", base_.string(), "--prompt", "the c",     "--max-new-tokens",
      "3",      "--seed",       "7",        "--threads", "1"};
  Result plain = run_generate(args);
  ASSERT_EQ(plain.code, 0) << plain.err;
  // A float32 paged cache draws what the contiguous cache draws: the same text.
  Result paged = run_generate(with(args, {"--kv-dtype", "float32"}));
  ASSERT_EQ(paged.code, 0) << paged.err;
  EXPECT_EQ(paged.out, plain.out);
  EXPECT_NE(paged.err.find("cache=paged-float32"), std::string::npos) << paged.err;
  for (const char* d : {"bfloat16", "float16", "int8"}) {
    Result r = run_generate(with(args, {"--kv-dtype", d}));
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(r.out.rfind("the c", 0), 0u);
    EXPECT_NE(r.err.find(std::string("tokens=3 ")), std::string::npos) << r.err;
    EXPECT_NE(r.err.find(std::string("cache=paged-") + d), std::string::npos) << r.err;
  }
  const std::vector<std::string> cli = with({"generate"}, args);
  Result too_long = run_cli(with(cli, {"--kv-dtype", "int8", "--max-new-tokens", "4"}));
  EXPECT_EQ(too_long.code, 1);
  EXPECT_NE(too_long.err.find("--kv-dtype: the prompt's 5 tokens plus --max-new-tokens 4 exceed "
                              "the model's block of 8"),
            std::string::npos)
      << too_long.err;
  Result bad = run_cli(with(cli, {"--kv-dtype", "fp8"}));
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.err.find("invalid value 'fp8' for --kv-dtype"), std::string::npos) << bad.err;
  Result both = run_cli(with(cli, {"--kv-dtype", "int8", "--no-cache"}));
  EXPECT_EQ(both.code, 2);
  EXPECT_NE(both.err.find("cannot be combined with --no-cache"), std::string::npos) << both.err;
  // A GPT's learned positions end at its block: no StreamingLLM window.
  Result window = run_cli(with(cli, {"--window-length", "6"}));
  EXPECT_EQ(window.code, 1);
  EXPECT_NE(window.err.find("--window-length needs a Llama / Qwen / Gemma directory"),
            std::string::npos)
      << window.err;
  EXPECT_NE(window.err.find("is a GPT checkpoint"), std::string::npos) << window.err;
  // ... and compute in float32: --dtype bfloat16 is refused, not ignored.
  Result half = run_cli(with(cli, {"--dtype", "bfloat16"}));
  EXPECT_EQ(half.code, 1);
  EXPECT_NE(half.err.find("--dtype bfloat16: GPT checkpoints compute in float32"),
            std::string::npos)
      << half.err;
}

// ---- bad input
// ------------------------------------------------------------------------------------

// Every failing run: the exit code, a message containing `needle`, and the checkpoint of `dir`
// byte for byte as before.
void expect_fails(const std::vector<std::string>& args, int code, const std::string& needle,
                  const fs::path& dir, const std::map<std::string, std::string>& before) {
  std::string cmd;
  for (const auto& a : args) cmd += a + " ";
  SCOPED_TRACE(cmd);
  Result r = run_cli(args);
  EXPECT_EQ(r.code, code) << r.out << r.err;
  EXPECT_NE(r.err.find(needle), std::string::npos) << r.err;
  EXPECT_EQ(r.err.rfind(code == 2 ? "attn: " : "attn: error: ", 0), 0u) << r.err;
  EXPECT_EQ(r.out.find("done:"), std::string::npos);
  std::map<std::string, std::string> after;
  for (const auto& [name, bytes] : before) after[name] = slurp(dir / name);
  EXPECT_TRUE(after == before) << "the checkpoint files changed";
  EXPECT_EQ(before.size(), 2u);
}

TEST_F(TrainCli, BadDataIsReportedAndKeepsTheCheckpoint) {
  fs::path dir = copy_of_base("bad_data");
  auto before = snapshot(dir);
  fs::path missing = root_ / "no_such_file.txt";
  expect_fails(tiny(dir, 40, missing.string()), 1, missing.string(), dir, before);
  spit(root_ / "empty.txt", "");
  expect_fails(tiny(dir, 40, (root_ / "empty.txt").string()), 1, "is empty", dir, before);
  spit(root_ / "binary.bin", std::string("abc\0\x01\x02\xff", 7) + corpus());
  expect_fails(tiny(dir, 40, (root_ / "binary.bin").string()), 1, "NUL byte", dir, before);
  spit(root_ / "latin1.txt", "caf\xe9 " + corpus());
  expect_fails(tiny(dir, 40, (root_ / "latin1.txt").string()), 1, "not valid UTF-8", dir, before);
  expect_fails(tiny(dir, 40, root_.string()), 1, root_.string(), dir, before);  // a directory
  // 90 characters: the validation split has 9, one more than --block-size 8 needs; 80 give 8.
  std::string text;
  for (int i = 0; i < 9; ++i) text += "abcdefghi\n";
  spit(root_ / "short_ok.txt", text.substr(0, 90));
  spit(root_ / "short.txt", text.substr(0, 80));
  expect_fails(tiny(dir, 40, (root_ / "short.txt").string()), 1, "too short for --block-size 8",
               dir, before);
  Result ok = run_cli(tiny(root_ / "short_ok", 2, (root_ / "short_ok.txt").string()));
  EXPECT_EQ(ok.code, 0) << ok.err;
}

TEST_F(TrainCli, BadFlagsAreUsageErrors) {
  fs::path dir = copy_of_base("bad_flags");
  auto before = snapshot(dir);
  const std::vector<std::pair<std::string, std::string>> bad = {
      {"n-layer", "0"},        {"n-layer", "1.5"},
      {"n-layer", "abc"},      {"n-layer", ""},
      {"n-head", "0"},         {"n-head", "-2"},
      {"n-embd", "0"},         {"block-size", "0"},
      {"batch-size", "0"},     {"max-iters", "0"},
      {"max-iters", "-5"},     {"lr", "0"},
      {"lr", "-1e-3"},         {"lr", "nan"},
      {"lr", "inf"},           {"lr", "1e-3x"},
      {"min-lr", "-1e-4"},     {"warmup-iters", "-1"},
      {"lr-decay-iters", "0"}, {"weight-decay", "-0.1"},
      {"beta1", "1"},          {"beta1", "-0.1"},
      {"beta2", "1.5"},        {"grad-clip", "-1"},
      {"dropout", "1"},        {"dropout", "-0.1"},
      {"eval-interval", "0"},  {"eval-iters", "0"},
      {"seed", "-1"},          {"threads", "-1"},
      {"log-interval", "0"},   {"n-layer", "99999999999999999999"}};
  for (const auto& [flag, value] : bad) {
    // Both spellings: --flag value and --flag=value.
    expect_fails(with(tiny(dir), {"--" + flag, value}), 2,
                 "invalid value '" + value + "' for --" + flag, dir, before);
    expect_fails(with(tiny(dir), {"--" + flag + "=" + value}), 2,
                 "invalid value '" + value + "' for --" + flag, dir, before);
  }
  expect_fails(with(tiny(dir), {"--n-embd", "15"}), 2, "--n-embd 15 is not divisible by --n-head 2",
               dir, before);
  expect_fails(with(tiny(dir), {"--warmup-iters", "40"}), 2,
               "--lr-decay-iters 40 must be greater than --warmup-iters 40", dir, before);
  expect_fails(with(tiny(dir), {"--frobnicate", "3"}), 2, "unknown option '--frobnicate'", dir,
               before);
  expect_fails(with(tiny(dir), {"-x"}), 2, "unknown option '-x'", dir, before);
  expect_fails(with(tiny(dir), {"extra"}), 2, "unexpected argument 'extra'", dir, before);
  expect_fails(with(tiny(dir), {"--lr"}), 2, "--lr needs a value", dir, before);
  expect_fails(with(tiny(dir), {"--resume=yes"}), 2, "--resume takes no value", dir, before);
  EXPECT_EQ(run_cli({"train", "--data="}).code, 2);
  // Generate's flags.
  expect_fails({"generate", "--ckpt", dir.string(), "--temperature", "0"}, 2,
               "invalid value '0' for --temperature", dir, before);
  expect_fails({"generate", "--ckpt", dir.string(), "--top-k", "-1"}, 2,
               "invalid value '-1' for --top-k", dir, before);
  expect_fails({"generate", "--ckpt", dir.string(), "--max-new-tokens", "x"}, 2,
               "invalid value 'x' for --max-new-tokens", dir, before);
  expect_fails({"generate", "--prompt", "a"}, 2, "--ckpt DIR is required", dir, before);
  expect_fails({"generate", "--ckpt", dir.string(), "--cache"}, 2, "unknown option '--cache'", dir,
               before);
  // Later flags override earlier ones; --no-bias after --bias wins.
  Result nb = run_cli(
      with(tiny(root_ / "nobias", 1), {"--bias", "--no-bias", "--n-layer=9", "--n-layer=1"}));
  ASSERT_EQ(nb.code, 0) << nb.err;
  io::SafeTensors m = io::load_safetensors((root_ / "nobias" / "model.safetensors").string());
  EXPECT_EQ(json::parse(m.metadata.at("config")).at("bias"), false);
  EXPECT_EQ(json::parse(m.metadata.at("config")).at("n_layer"), 1);
  EXPECT_FALSE(m.contains("h.0.attn.in_proj_bias"));
}

TEST_F(TrainCli, PackTrainsOnDocumentsAndRecordsIt) {
  // Documents in the fortune files' format: each ends with a line holding only '%'.
  std::string docs;
  for (int i = 0; i < 60; ++i)
    docs += i % 2 ? "the cat sat on the mat.\n%\n" : "a dog ran\nto the fog; λ→é\n%\n";
  spit(root_ / "docs.txt", docs);
  const fs::path out = root_ / "packed";
  Result r = run_cli(with(tiny(out, 40, (root_ / "docs.txt").string()), {"--pack"}));
  ASSERT_EQ(r.code, 0) << r.out << r.err;
  // 60 documents (the 90% cut, 1458 of 1620 characters, falls between two).
  EXPECT_NE(r.out.find("packed: 60 documents, each ending with \"\\n%\\n\"; attention stays "
                       "inside each"),
            std::string::npos)
      << r.out;
  io::SafeTensors ck = io::load_safetensors((out / "ckpt.safetensors").string());
  json tc = json::parse(ck.metadata.at("train_config"));
  EXPECT_EQ(tc.at("pack"), true);
  EXPECT_EQ(tc.at("doc_separator"), "\n%\n");
  json hist = json::parse(ck.metadata.at("history"));
  ASSERT_EQ(hist.size(), 3u);
  EXPECT_LT(double(hist[2]["val_loss"]), double(hist[0]["val_loss"]) - 1.0) << hist.dump();
  // A run without --pack records neither key (its checkpoints are as before).
  io::SafeTensors plain = io::load_safetensors((base_ / "ckpt.safetensors").string());
  EXPECT_FALSE(json::parse(plain.metadata.at("train_config")).contains("pack"));

  // The separator is typed with escapes; one that never occurs is refused before anything runs.
  fs::path dir = copy_of_base("bad_pack");
  auto before = snapshot(dir);
  expect_fails(with(tiny(dir), {"--pack", "--doc-separator", "\\n\\n"}), 1,
               "--pack: the --doc-separator \"\\n\\n\" never occurs in", dir, before);
  expect_fails(with(tiny(dir), {"--pack", "--doc-separator", "#"}), 1, "never occurs", dir, before);
  expect_fails(with(tiny(dir), {"--doc-separator", "x"}), 2,
               "--doc-separator is given without --pack", dir, before);
  expect_fails(with(tiny(dir), {"--pack", "--doc-separator", "a\\qb"}), 2,
               "invalid value 'a\\qb' for --doc-separator", dir, before);
  expect_fails(with(tiny(dir), {"--pack", "--doc-separator="}), 2,
               "invalid value '' for --doc-separator", dir, before);
  expect_fails(with(tiny(dir), {"--pack", "--context-parallel"}), 2,
               "--pack and --context-parallel cannot be combined", dir, before);
}

TEST_F(TrainCli, BadCheckpointsAreReported) {
  // --resume without a checkpoint.
  fs::path none = root_ / "no_ckpt";
  Result r = run_cli(with(tiny(none), {"--resume"}));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("no checkpoint"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(none / "model.safetensors"));

  // Truncated: the file stays as it was, and so does model.safetensors.
  fs::path dir = copy_of_base("truncated");
  std::string ck = slurp(dir / "ckpt.safetensors");
  spit(dir / "ckpt.safetensors", ck.substr(0, ck.size() / 2));
  auto before = snapshot(dir);
  expect_fails(with(tiny(dir), {"--resume"}), 1, "[load_safetensors]", dir, before);
  spit(dir / "ckpt.safetensors", ck.substr(0, 5));
  before = snapshot(dir);
  expect_fails(with(tiny(dir), {"--resume"}), 1, "[load_safetensors]", dir, before);

  // Corrupted header bytes.
  dir = copy_of_base("corrupted");
  std::string bad = ck;
  for (int i = 9; i < 24; ++i) bad[std::size_t(i)] = char(0xff - bad[std::size_t(i)]);
  spit(dir / "ckpt.safetensors", bad);
  before = snapshot(dir);
  expect_fails(with(tiny(dir), {"--resume"}), 1, "[load_safetensors]", dir, before);
  // The header length itself.
  bad = ck;
  bad[6] = char(0x7f);
  spit(dir / "ckpt.safetensors", bad);
  before = snapshot(dir);
  expect_fails(with(tiny(dir), {"--resume"}), 1, "[load_safetensors]", dir, before);
  // A model checkpoint is not a training checkpoint.
  spit(dir / "ckpt.safetensors", slurp(dir / "model.safetensors"));
  before = snapshot(dir);
  expect_fails(with(tiny(dir), {"--resume"}), 1, "format is 'attn-gpt', expected 'attn-train'", dir,
               before);
  // generate on a damaged model file.
  spit(dir / "model.safetensors", ck.substr(0, 100));
  before = snapshot(dir);
  expect_fails({"generate", "--ckpt", dir.string()}, 1, "[load_safetensors]", dir, before);
  expect_fails({"generate", "--ckpt", (root_ / "nowhere").string()}, 1, "no checkpoint", dir,
               before);
}

TEST_F(TrainCli, ResumeWithOtherModelSettingsOrDataIsRefused) {
  fs::path dir = copy_of_base("mismatch");
  auto before = snapshot(dir);
  std::vector<std::string> args =
      with(tiny(dir), {"--resume", "--n-layer", "2", "--n-embd", "32", "--bias"});
  Result r = run_cli(args);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("--n-layer 2 (checkpoint: 1)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--n-embd 32 (checkpoint: 16)"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("--bias (checkpoint: --no-bias)"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("--n-head"), std::string::npos) << r.err;
  expect_fails(with(tiny(dir), {"--resume", "--block-size", "7", "--n-head", "4"}), 1,
               "--n-head 4 (checkpoint: 2); --block-size 7 (checkpoint: 8)", dir, before);
  spit(root_ / "other.txt", corpus() + "XYZ\n");
  expect_fails(with(tiny(dir, 40, (root_ / "other.txt").string()), {"--resume"}), 1,
               "vocabulary of the data", dir, before);
  EXPECT_TRUE(snapshot(dir) == before) << "the checkpoint files changed";
}

TEST_F(TrainCli, PromptOutsideTheVocabularyIsRefused) {
  Result r = run_cli({"generate", "--ckpt", base_.string(), "--prompt", "the Zebra"});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("'Z'"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("not in the vocabulary"), std::string::npos) << r.err;
  EXPECT_EQ(r.out, "");
}

TEST_F(TrainCli, NonFiniteLossStopsWithoutSaving) {
  // The hidden --debug-nan-at flag (attn_debug's, tools/attn/debug_faults.cpp, linked into this
  // test program) poisons the weights before step 25: the run stops there and the step-20
  // checkpoint stays, byte for byte.
  fs::path dir = root_ / "nan";
  Result first = run_cli(tiny(dir, 20));
  ASSERT_EQ(first.code, 0) << first.err;
  auto before = snapshot(dir);
  expect_fails(with(tiny(dir, 40), {"--resume", "--debug-nan-at", "25"}), 1, "step 25: loss is nan",
               dir, before);
  // Also in a fresh run: the checkpoint of step 20 is the last thing written.
  fs::path fresh = root_ / "nan_fresh";
  Result r = run_cli(with(tiny(fresh, 40), {"--debug-nan-at", "33"}));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("step 33: loss is nan"), std::string::npos) << r.err;
  EXPECT_EQ(io::load_safetensors((fresh / "model.safetensors").string()).metadata.at("step"), "20");
  // The same weights as the first run's step-20 checkpoint, byte for byte.
  EXPECT_TRUE(slurp(fresh / "model.safetensors") == before.at("model.safetensors"));
  // A learning rate that blows the weights up ends the same way.
  Result huge = run_cli(with(tiny(root_ / "nan_lr", 40), {"--lr", "1e30", "--grad-clip", "0"}));
  EXPECT_EQ(huge.code, 1);
  EXPECT_TRUE(std::regex_search(huge.err, std::regex(R"(step \d+: loss is (nan|inf))")))
      << huge.err;
}

TEST_F(TrainCli, HelpListsTheCommands) {
  Result r = run_cli({"--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("train [options]"), std::string::npos);
  EXPECT_NE(r.out.find("generate --ckpt DIR   "), std::string::npos);
  r = run_cli({"train", "--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("--lr-decay-iters"), std::string::npos);
  r = run_cli({"generate", "--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("--no-cache"), std::string::npos);
}

TEST_F(TrainCli, DefaultCorpus) {
  const char* path = "/usr/share/games/fortunes/songs-poems";
  if (!fs::exists(path)) GTEST_SKIP() << path << " missing (scripts/setup.sh installs it)";
  Result r = run_cli({"train",
                      "--out",
                      (root_ / "default").string(),
                      "--n-layer",
                      "1",
                      "--n-embd",
                      "16",
                      "--n-head",
                      "1",
                      "--block-size",
                      "8",
                      "--batch-size",
                      "2",
                      "--max-iters",
                      "1",
                      "--eval-iters",
                      "1",
                      "--warmup-iters",
                      "0",
                      "--lr-decay-iters",
                      "1",
                      "--threads",
                      "1"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find(path), std::string::npos);
}

}  // namespace
}  // namespace attn::tools

// attn::train::train, the loop of `attn train` as a library: the C++ entry point prints the losses
// of `attn train` with the same flags and writes the same checkpoint files byte for byte (fresh and
// resumed), validates its options, calls its hooks, and the `attn` binary users run has no
// fault-injection flags (those are attn_debug's, tools/attn/debug_faults.cpp).
#include <attn/train.h>
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <filesystem>
#include <limits>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "../../tools/attn/train.h"
#include "test_util.h"

namespace {

using attn::testing::contains;
using attn::testing::run_cli;
using attn::testing::slurp;
using attn::testing::TempDir;

std::string corpus() {
  std::string s;
  for (int i = 0; i < 40; ++i) s += "the cat sat on the mat; the dog ran to the fog.\n";
  return s;
}

// The options of attn::testing::tiny_train_args.
attn::train::TrainOptions tiny_options(const std::string& data, const std::string& out,
                                       int max_iters, int eval_interval, int eval_iters) {
  attn::train::TrainOptions o;
  o.data = data;
  o.out = out;
  o.model.n_layer = 1;
  o.model.n_head = 2;
  o.model.n_embd = 16;
  o.model.block_size = 8;
  o.batch_size = 4;
  o.max_iters = max_iters;
  o.eval_interval = eval_interval;
  o.eval_iters = eval_iters;
  o.threads = 1;
  return o;
}

// The lines that depend on nothing but the computation: evaluations, and the losses of "done:".
std::vector<std::string> loss_lines(const std::string& out) {
  static const std::regex eval("^step \\d+: train loss \\S+, val loss \\S+$");
  static const std::regex done(
      "^done: iters=(\\d+) ms_per_iter=\\S+ (train_loss=\\S+ val_loss=\\S+) ");
  std::vector<std::string> lines;
  std::istringstream in(out);
  std::string line;
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_match(line, eval))
      lines.push_back(line);
    else if (std::regex_search(line, m, done))
      lines.push_back("done " + m[1].str() + " " + m[2].str());
  }
  return lines;
}

void expect_same_files(const std::string& a, const std::string& b) {
  for (const char* f : {attn::train::kModelFile, attn::train::kCkptFile}) {
    const std::string x = slurp(a + "/" + f), y = slurp(b + "/" + f);
    EXPECT_FALSE(x.empty()) << f;
    EXPECT_TRUE(x == y) << f << " differs between " << a << " and " << b;
  }
}

TEST(TrainLib, SameLossesAndCheckpointBytesAsTheCli) {
  TempDir dir("attn_train_lib");
  const std::string data = dir.write("corpus.txt", corpus());
  const auto cli = run_cli(attn::testing::tiny_train_args(data, dir.file("cli"), 20, 10, 2));
  ASSERT_EQ(cli.code, 0) << cli.err;

  std::ostringstream out;
  const attn::train::TrainResult r =
      attn::train::train(tiny_options(data, dir.file("lib"), 20, 10, 2), out);
  EXPECT_EQ(loss_lines(out.str()), loss_lines(cli.out)) << out.str() << "\n" << cli.out;
  EXPECT_EQ(loss_lines(out.str()).size(), 4u);
  expect_same_files(dir.file("cli"), dir.file("lib"));
  EXPECT_EQ(r.iters, 20);
  ASSERT_EQ(r.history.size(), 3u);
  EXPECT_EQ(r.history.back().step, 20);
  EXPECT_EQ(r.val_loss, r.history.back().val_loss);
  EXPECT_TRUE(r.skipped.empty());
  // The default progress: the data line first, a line per log_interval steps, "done:" last.
  EXPECT_TRUE(out.str().rfind("data: '" + data + "'", 0) == 0) << out.str();
  EXPECT_TRUE(contains(out.str(), "\nstep 10/20 loss ")) << out.str();

  // Resumed through the library: the uninterrupted run's bytes.
  std::ostringstream half, rest;
  attn::train::train(tiny_options(data, dir.file("resumed"), 10, 10, 2), half);
  attn::train::TrainOptions o = tiny_options(data, dir.file("resumed"), 20, 10, 2);
  o.resume = true;
  attn::train::train(o, rest);
  EXPECT_TRUE(contains(rest.str(), "resuming from step 10 of '")) << rest.str();
  expect_same_files(dir.file("cli"), dir.file("resumed"));
}

TEST(TrainLib, OptionsAreValidated) {
  TempDir dir("attn_train_lib_options");
  const std::string data = dir.write("corpus.txt", corpus());
  auto error_of = [&](auto change) {
    attn::train::TrainOptions o = tiny_options(data, dir.file("run"), 5, 5, 1);
    change(o);
    std::ostringstream out;
    try {
      attn::train::train(o, out);
    } catch (const attn::Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error_of([](auto& o) { o.batch_size = 0; }),
            "[train] invalid value 0 for --batch-size: expected an integer in [1, 1048576]");
  EXPECT_EQ(error_of([](auto& o) { o.beta2 = 1; }),
            "[train] invalid value 1 for --beta2: expected a number in [0, 1)");
  EXPECT_EQ(error_of([](auto& o) { o.model.n_head = 3; }),
            "[train] --n-embd 16 is not divisible by --n-head 3");
  EXPECT_EQ(error_of([](auto& o) { o.warmup_iters = 3000; }),
            "[train] --lr-decay-iters 2000 must be greater than --warmup-iters 3000");
  EXPECT_TRUE(contains(error_of([](auto& o) { o.data = "/nonexistent/corpus.txt"; }),
                       "/nonexistent/corpus.txt"));
  EXPECT_FALSE(std::filesystem::exists(dir.file("run")));
}

TEST(TrainLib, HooksRunWhereDocumented) {
  TempDir dir("attn_train_lib_hooks");
  const std::string data = dir.write("corpus.txt", corpus());
  std::vector<int64_t> before;
  int starts = 0, forwards = 0, backwards = 0;
  std::vector<std::string> writes;
  attn::train::TrainHooks h;
  h.at_start = [&](int rank, attn::nn::GPT&) { starts += rank == 0; };
  h.before_step = [&](int, int64_t step, attn::nn::GPT&) { before.push_back(step); };
  h.after_forward = [&](int, int64_t, attn::Tensor& loss) { forwards += loss.defined(); };
  h.after_backward = [&](int, int64_t, const attn::nn::NamedTensors& params) {
    backwards += params.front().second.grad().defined();
  };
  h.inside_write = [&](const std::string& path) { writes.push_back(path); };
  std::ostringstream out;
  attn::train::train(tiny_options(data, dir.file("run"), 4, 2, 1), out, h);
  EXPECT_EQ(starts, 1);
  EXPECT_EQ(before, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(forwards, 4);
  EXPECT_EQ(backwards, 4);
  // Three checkpoints (steps 0, 2, 4) of two files each, then loss.png.
  ASSERT_EQ(writes.size(), 7u);
  EXPECT_EQ(writes[0], dir.file("run/model.safetensors"));
  EXPECT_EQ(writes[1], dir.file("run/ckpt.safetensors"));
  EXPECT_EQ(writes.back(), dir.file("run/loss.png"));

  // A hook that poisons the loss stops the run as a NaN would.
  attn::train::TrainHooks nan;
  nan.after_forward = [](int, int64_t step, attn::Tensor& loss) {
    if (step == 3) loss = loss * std::numeric_limits<double>::quiet_NaN();
  };
  try {
    attn::train::train(tiny_options(data, dir.file("nan"), 4, 2, 1), out, nan);
    ADD_FAILURE() << "no error";
  } catch (const attn::Error& e) {
    EXPECT_TRUE(contains(e.what(), "[train] step 3: loss is nan; stopping without saving"))
        << e.what();
  }
}

// The `attn` users run: `attn train --debug-*` is an unknown option (exit 2), nothing is written.
TEST(TrainLib, AttnHasNoFaultInjectionFlags) {
  TempDir dir("attn_train_lib_flags");
  const std::string data = dir.write("corpus.txt", corpus());
  for (const char* flag : {"--debug-fault kill:0:1", "--debug-nan-at 1",
                           "--debug-nonfinite loss-nan:1", "--debug-slow-save 10"}) {
    const std::string cmd = std::string(ATTN_CLI_PATH) + " train --data '" + data + "' --out '" +
                            dir.file("run") + "' --max-iters 2 " + flag + " 2>&1";
    FILE* p = ::popen(cmd.c_str(), "r");
    ASSERT_NE(p, nullptr);
    std::string output;
    char buf[512];
    while (std::size_t n = std::fread(buf, 1, sizeof buf, p)) output.append(buf, n);
    const int status = ::pclose(p);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 2) << cmd << "\n" << output;
    const std::string name = std::string(flag).substr(0, std::string(flag).find(' '));
    EXPECT_TRUE(contains(output, "attn: train: unknown option '" + name + "'")) << output;
    EXPECT_FALSE(std::filesystem::exists(dir.file("run")));
  }
}

}  // namespace

// Helpers shared by the C++ tests: a temporary directory, the message of an expected error, the
// `attn` tool run in-process, and whole-file reads and writes.
#pragma once

#include <attn/io.h>
#include <attn/ops.h>
#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/resource.h>

#include <algorithm>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <ostream>
#include <span>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace attn::tools {
// The `attn` tool without a process: tools/attn/main.cpp, compiled into attn_tests (without its
// main()) by test_walkthrough.cpp.
int cli_main(std::span<const std::string> args, std::ostream& out, std::ostream& err);
}  // namespace attn::tools

namespace attn::testing {

// Runs f and returns the attn::Error message, or "" when f succeeds.
template <typename F>
std::string outcome(F&& f) {
  try {
    f();
  } catch (const attn::Error& e) {
    return e.what();
  }
  return "";
}

// Runs f and returns the attn::Error message; fails the test when f does not throw one (or
// throws one without a message).
template <typename F>
std::string error_of(F&& f) {
  std::string message = outcome(std::forward<F>(f));
  if (message.empty()) ADD_FAILURE() << "expected attn::Error";
  return message;
}

// Expects `stmt` to throw attn::Error with `text` in its message.
#define EXPECT_ERROR_HAS(stmt, text)                                      \
  do {                                                                    \
    const std::string msg_ = ::attn::testing::error_of([&] { stmt; });    \
    EXPECT_NE(msg_.find(text), std::string::npos) << "message: " << msg_; \
  } while (0)

// While alive, writes that would make a file larger than `bytes` fail with EFBIG (SIGXFSZ ignored):
// a disk that fills up in the middle of a write.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    ::getrlimit(RLIMIT_FSIZE, &old_);
    old_handler_ = std::signal(SIGXFSZ, SIG_IGN);
    rlimit r = old_;
    r.rlim_cur = bytes;
    ok_ = ::setrlimit(RLIMIT_FSIZE, &r) == 0;
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old_);
    std::signal(SIGXFSZ, old_handler_);
  }
  FileSizeLimit(const FileSizeLimit&) = delete;
  FileSizeLimit& operator=(const FileSizeLimit&) = delete;
  bool ok() const { return ok_; }

 private:
  rlimit old_{};
  void (*old_handler_)(int) = SIG_DFL;
  bool ok_ = false;
};

// A fresh empty directory for one test, removed with everything in it at the end.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "attn") {
    std::string tmpl = ::testing::TempDir() + prefix + "_XXXXXX";
    std::vector<char> buf(tmpl.begin(), tmpl.end());
    buf.push_back('\0');
    if (::mkdtemp(buf.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path_ = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }
  std::string file(const std::string& name) const { return path_ + "/" + name; }
  // Writes `bytes` to file(name) and returns that path.
  std::string write(const std::string& name, const std::string& bytes) const {
    const std::string p = file(name);
    attn::io::write_file_atomic(p, bytes);
    return p;
  }
  // The names in the directory, sorted.
  std::vector<std::string> files() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path_))
      out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }

 private:
  std::string path_;
};

// `attn train` arguments for a tiny model (1 layer, 2 heads, 16 wide, block 8, batch 4) on one
// thread without a progress bar: a few dozen steps take well under a second. Append more flags.
inline std::vector<std::string> tiny_train_args(const std::string& data, const std::string& out,
                                                int max_iters, int eval_interval, int eval_iters) {
  // clang-format off
  return {"train", "--data", data, "--out", out,
          "--n-layer", "1", "--n-head", "2", "--n-embd", "16", "--block-size", "8",
          "--batch-size", "4", "--max-iters", std::to_string(max_iters),
          "--eval-interval", std::to_string(eval_interval),
          "--eval-iters", std::to_string(eval_iters), "--threads", "1", "--no-progress"};
  // clang-format on
}

// What one in-process run of the `attn` tool returned and printed.
struct CliResult {
  int code = -1;
  std::string out, err;
};

// attn::tools::cli_main(args) with standard output and error captured.
inline CliResult run_cli(const std::vector<std::string>& args) {
  std::ostringstream out, err;
  CliResult r;
  r.code = attn::tools::cli_main(args, out, err);
  r.out = out.str();
  r.err = err.str();
  return r;
}

// A tensor whose storage claims to be on a GPU (cuda:0), over host memory filled with a poison
// value: every operation must refuse it before reading a byte (a real GPU address would crash a CPU
// kernel instead). Needs no GPU.
inline Tensor fake_gpu_tensor(const Shape& shape) {
  Tensor host = full(shape, 123.0f);
  auto impl = std::make_shared<TensorImpl>(*host.impl());
  auto storage = std::make_shared<Storage>(*host.impl()->storage);
  storage->device = Device("cuda:0");
  impl->storage = storage;
  impl->autograd = nullptr;
  return Tensor(impl);
}

// The whole file at p ("" when it cannot be read), and a plain (not atomic) write of `bytes` to p:
// tests plant and inspect files with these, beside the library's own readers and writers.
// Whether `part` occurs in `s` (for checks on messages and output).
inline bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

inline std::string slurp(const std::filesystem::path& p) {
  std::ifstream f(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}
inline void spit(const std::filesystem::path& p, const std::string& bytes) {
  std::ofstream f(p, std::ios::binary | std::ios::trunc);
  f << bytes;
}

}  // namespace attn::testing

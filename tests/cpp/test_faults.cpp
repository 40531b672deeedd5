// Faults tried on purpose (docs/reliability.md; scripts/faults.sh produces each for real with the
// `attn` binary): what stays true of them in the normal suite.
//   - allocations that cannot succeed (a size that overflows, more memory than there is) throw
//     attn::AllocationError naming the function, the bytes and the shape, and nothing is lost;
//   - the attention kernels' per-thread scratch that cannot be allocated is such an error too,
//     never std::terminate from inside a parallel region;
//   - `attn train` locks its --out directory: a second run is refused, naming the first;
//   - temporary files of writers that were killed are removed, those of live writers never;
//   - a step whose loss or gradients are not finite stops the run or is skipped, never saved;
//   - a full disk while saving names the file and the error, and keeps the last checkpoint.
// The --debug-* flags that inject faults are attn_debug's (tools/attn/debug_faults.cpp, linked
// into this test program, never into `attn`).
#include <attn/attn.h>
#include <attn/io.h>
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <string>
#include <vector>

#include "test_util.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ATTN_TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define ATTN_TEST_ASAN 1
#endif

#if defined(ATTN_TEST_ASAN)
// Allocations far beyond memory return null (as malloc does) instead of ending the test run with
// an allocation-size-too-big report: these tests are about what attn does with a null.
extern "C" const char* __asan_default_options() { return "allocator_may_return_null=1"; }
#endif

namespace attn {
namespace {

namespace fs = std::filesystem;
using attn::testing::CliResult;
using attn::testing::FileSizeLimit;
using attn::testing::run_cli;
using attn::testing::slurp;
// A plain write (write_file_atomic would clean up the temporary files these tests plant).
using attn::testing::spit;
using attn::testing::TempDir;

template <typename F>
std::string allocation_error_of(F&& f) {
  try {
    f();
  } catch (const AllocationError& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "expected attn::AllocationError, got " << e.what();
    return "";
  }
  ADD_FAILURE() << "expected attn::AllocationError";
  return "";
}

// ---- allocations --------------------------------------------------------------------------------

TEST(Faults, ShapesWhoseSizeOverflowsAreAllocationErrors) {
  const int64_t big = int64_t(1) << 40;
  std::string m = allocation_error_of([&] { (void)zeros({big, big}); });
  EXPECT_EQ(m,
            "[zeros] cannot allocate a (1099511627776, 1099511627776) float32 tensor: its number "
            "of elements overflows int64");
  m = allocation_error_of([&] { (void)ones({big, big, 2}, Dtype::Int64); });
  EXPECT_EQ(m.rfind("[ones] cannot allocate a (1099511627776, 1099511627776, 2) int64 tensor", 0),
            0u)
      << m;
  m = allocation_error_of([&] { (void)arange(0.0, 1e30, 1.0); });
  EXPECT_NE(m.find("[arange] cannot allocate a range of 1e+30 elements"), std::string::npos) << m;
  // 2^60 elements fit in int64 but no machine holds 4.6 EB.
  m = allocation_error_of([&] { (void)empty({int64_t(1) << 30, int64_t(1) << 30}); });
  EXPECT_EQ(m,
            "[empty] cannot allocate 4.6 EB (4611686018427387904 bytes) for a (1073741824, "
            "1073741824) float32 tensor: more memory than any machine has");
  // An AllocationError is an attn::Error like every other.
  EXPECT_THROW((void)full({big, big}, 1.5), Error);
  // Ops name themselves: a broadcast product, a matrix product.
  // (Broadcast views of one element: no memory for the inputs.)
  const int64_t n = int64_t(1) << 29;
  Tensor col = zeros({1, 1}).expand({n, 1}), row = zeros({1, 1}).expand({1, n});
  m = allocation_error_of([&] { (void)(col + row); });
  EXPECT_EQ(m.rfind("[add] cannot allocate 1.2 EB (1152921504606846976 bytes) for a (536870912, "
                    "536870912) float32 tensor",
                    0),
            0u)
      << m;
  m = allocation_error_of([&] { (void)matmul(col, row); });
  EXPECT_EQ(m.rfind("[matmul] cannot allocate 1.2 EB", 0), 0u) << m;
}

TEST(Faults, MemoryThatCannotBeHadIsAnAllocationErrorAndNothingIsLost) {
  // 2^57 float32 elements: 576 PB, beyond any address space, so the allocator returns null.
  const int64_t n = int64_t(1) << 57;
  std::string m = allocation_error_of([&] { (void)zeros({n}); });
  EXPECT_EQ(m,
            "[zeros] cannot allocate 576.5 PB (576460752303423488 bytes) for a "
            "(144115188075855872,) float32 tensor: out of memory");
  m = allocation_error_of([&] { (void)randn({n / 4, 4}); });
  EXPECT_EQ(m.rfind("[randn] cannot allocate 576.5 PB", 0), 0u) << m;
  // The process goes on: the same functions work at a size that fits.
  Tensor t = zeros({1000, 1000});
  EXPECT_EQ(t.sum().item<float>(), 0.0f);
  EXPECT_EQ(ones({3}).sum().item<float>(), 3.0f);
}

#if !defined(ATTN_TEST_ASAN)
// The fused attention kernel allocates a per-thread workspace of at least 2 x BR x D floats (BR >=
// 2 query rows per block) inside a parallel region. With D = 2^24 (q, k, v of 64 MiB each) that is
// at least 256 MiB: under an address-space limit of the inputs plus 192 MiB (room for the 64 MiB
// output) it cannot be had. The error comes out of the region as an
// AllocationError (not std::terminate). Run in a fresh process (a death test), since the limit is
// per process.
TEST(FaultsDeathTest, AttentionWorkspaceThatCannotBeHadIsAnAllocationError) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto body = [] {
    set_num_threads(1);
    const int64_t D = int64_t(1) << 24;
    Tensor q = ones({1, 1, 1, D}), k = ones({1, 1, 1, D}), v = ones({1, 1, 1, D});
    // The current address space, plus 192 MiB.
    std::ifstream statm("/proc/self/statm");
    long pages = 0;
    statm >> pages;
    rlimit r{};
    ::getrlimit(RLIMIT_AS, &r);
    r.rlim_cur = rlim_t(pages) * rlim_t(::sysconf(_SC_PAGESIZE)) + (rlim_t(192) << 20);
    if (::setrlimit(RLIMIT_AS, &r) != 0) std::exit(3);
    try {
      (void)scaled_dot_product_attention(q, k, v);
    } catch (const AllocationError& e) {
      std::fprintf(stderr, "%s\n", e.what());
      // The process keeps working: a small attention still runs.
      Tensor s = ones({1, 1, 4, 8});
      const float x = scaled_dot_product_attention(s, s, s).sum().item<float>();
      std::exit(x == 32.0f ? 0 : 4);
    }
    std::exit(5);
  };
  EXPECT_EXIT(
      body(), ::testing::ExitedWithCode(0),
      R"(\[scaled_dot_product_attention\] cannot allocate [0-9.]+ [MGT]B \([0-9]+ bytes\) for )"
      R"(the fused attention kernel's per-thread workspace: out of memory)");
}
#endif

// ---- the --out lock -----------------------------------------------------------------------------

std::string corpus() {
  std::string text;
  for (int i = 0; i < 40; ++i) text += "the cat sat on the mat; the dog ran to the fog.\n";
  return text;
}

std::vector<std::string> tiny(const TempDir& dir, const std::string& out, int max_iters,
                              std::vector<std::string> more = {}) {
  std::vector<std::string> a =
      attn::testing::tiny_train_args(dir.file("corpus.txt"), out, max_iters, 10, 2);
  for (const char* f : {"--warmup-iters", "2", "--lr-decay-iters", "40", "--lr=1e-2"})
    a.push_back(f);
  a.insert(a.end(), more.begin(), more.end());
  return a;
}

std::string host() {
  char buf[256] = {0};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

TEST(Faults, SecondRunOnTheSameOutIsRefusedNamingTheFirst) {
  TempDir dir("attn_lock");
  dir.write("corpus.txt", corpus());
  const std::string out = dir.file("run");
  fs::create_directories(out);
  {
    // Another holder of the lock (here this process, through a second open file).
    io::DirectoryLock held(out + "/train.lock", "attn train (the first run)", "test", out);
    ASSERT_TRUE(held.held());
    const io::LockOwner who = io::parse_lock_owner(slurp(out + "/train.lock"));
    EXPECT_EQ(who.pid, int64_t(::getpid()));
    EXPECT_EQ(who.host, host());
    CliResult r = run_cli(tiny(dir, out, 10));
    EXPECT_EQ(r.code, 1);
    const std::string want = "attn: error: [train] --out '" + out + "' is in use by PID " +
                             std::to_string(::getpid()) + " on host " + host() + ", started ";
    EXPECT_EQ(r.err.rfind(want, 0), 0u) << r.err;
    EXPECT_TRUE(std::regex_search(
        r.err, std::regex(R"(started \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC \(attn train \(the first )"
                          R"(run\)\); lock file '.*/train.lock'; wait for that run to end or )"
                          R"(choose another --out\n$)")))
        << r.err;
    EXPECT_FALSE(fs::exists(out + "/model.safetensors"));
    // Nothing but the lock file was written.
    EXPECT_EQ(std::distance(fs::directory_iterator(out), fs::directory_iterator()), 1);
  }
  // Released: the next run takes it (and records itself).
  CliResult r = run_cli(tiny(dir, out, 10));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(io::parse_lock_owner(slurp(out + "/train.lock")).command, "attn train");
}

TEST(Faults, LockFileOfADeadRunDoesNotStopTheNext) {
  TempDir dir("attn_lock_dead");
  dir.write("corpus.txt", corpus());
  const std::string out = dir.file("run");
  fs::create_directories(out);
  // What a run killed with SIGKILL leaves: its record, but no lock (the kernel dropped it).
  dir.write("run/train.lock",
            R"({"command":"attn train","host":"elsewhere","pid":999999999,"started":1})");
  CliResult r = run_cli(tiny(dir, out, 10));
  ASSERT_EQ(r.code, 0) << r.err;
  const io::LockOwner now = io::parse_lock_owner(slurp(out + "/train.lock"));
  EXPECT_EQ(now.pid, int64_t(::getpid()));
  EXPECT_GT(now.started, 1);
}

TEST(Faults, LockOwnerRecordsAreParsedStrictly) {
  io::LockOwner o = io::parse_lock_owner(
      R"({"pid": 42, "host": "box", "started": 1700000000, "command": "attn train"})");
  EXPECT_EQ(o.describe(), "PID 42 on host box, started 2023-11-14 22:13:20 UTC (attn train)");
  for (const char* bad :
       {"", "{", "[]", R"({"pid": 0, "host": "h", "started": 1, "command": ""})",
        R"({"pid": 1.5, "host": "h", "started": 1, "command": ""})",
        R"({"pid": 18446744073709551615, "host": "h", "started": 1, "command": ""})",
        R"({"pid": 1, "host": 3, "started": 1, "command": ""})",
        R"({"pid": 1, "host": "h", "command": ""})"})
    EXPECT_THROW(io::parse_lock_owner(bad), Error) << bad;
}

// ---- what killed writers leave ------------------------------------------------------------------

// A process id that is not running: a child that has exited and been reaped.
pid_t dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  int status = 0;
  ::waitpid(child, &status, 0);
  return child;
}

std::string host_tag() {
  std::string h = host();
  for (char& c : h)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-')) c = '_';
  return h.empty() ? "localhost" : h;
}

TEST(Faults, TemporaryFilesOfDeadWritersAreRemovedAndLiveOnesKept) {
  TempDir dir("attn_debris");
  const std::string path = dir.file("ckpt.safetensors");
  const std::string dead = std::to_string(dead_pid()), me = std::to_string(::getpid());
  const std::string tag = host_tag();
  const std::vector<std::string> stale = {
      "ckpt.safetensors.tmp." + tag + "." + dead + ".0",  // this version's name
      "ckpt.safetensors.tmp." + dead + ".3",              // the previous one's
      "ckpt.safetensors.tmp." + dead,                     // plot::write_png's old name
  };
  const std::vector<std::string> kept = {
      "ckpt.safetensors.tmp." + tag + "." + me + ".1",      // a live writer: this process
      "ckpt.safetensors.tmp." + tag + ".1.0",               // PID 1 is alive
      "ckpt.safetensors.tmp.elsewhere." + dead + ".0",      // another host's writer
      "ckpt.safetensors.tmp." + tag + "." + dead + ".0.x",  // not a temporary file name
      "model.safetensors.tmp." + tag + "." + dead + ".0",   // another file's
      "ckpt.safetensors"};
  for (const auto& n : stale) spit(dir.file(n), "half a checkpoint");
  for (const auto& n : kept) spit(dir.file(n), "keep me");
  fs::create_directory(dir.file("ckpt.safetensors.tmp." + dead + ".9"));  // a directory: kept
  std::vector<std::string> removed = io::remove_stale_temporaries(path);
  std::sort(removed.begin(), removed.end());
  std::vector<std::string> want;
  for (const auto& n : stale) want.push_back(dir.file(n));
  std::sort(want.begin(), want.end());
  EXPECT_EQ(removed, want);
  std::vector<std::string> left = kept;
  left.push_back("ckpt.safetensors.tmp." + dead + ".9");
  std::sort(left.begin(), left.end());
  EXPECT_EQ(dir.files(), left);

  // write_file_atomic cleans up before writing.
  spit(dir.file("ckpt.safetensors.tmp." + tag + "." + dead + ".5"), "half");
  io::write_file_atomic(path, "new");
  EXPECT_FALSE(fs::exists(dir.file("ckpt.safetensors.tmp." + tag + "." + dead + ".5")));
  EXPECT_EQ(slurp(path), "new");
}

TEST(Faults, TrainingRemovesWhatKilledWritersLeftAndSaysSo) {
  TempDir dir("attn_debris_train");
  dir.write("corpus.txt", corpus());
  const std::string out = dir.file("run");
  ASSERT_EQ(run_cli(tiny(dir, out, 10)).code, 0);
  const std::string dead = std::to_string(dead_pid());
  const std::string debris = out + "/ckpt.safetensors.tmp." + host_tag() + "." + dead + ".0";
  const std::string png = out + "/loss.png.tmp." + host_tag() + "." + dead + ".2";
  spit(debris, "half");
  spit(png, "half");
  // Resumed at its end, the run writes no checkpoint, but it removes them at start.
  CliResult r = run_cli(tiny(dir, out, 10, {"--resume"}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("removed '" + debris + "', left by a writer that was killed"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("removed '" + png + "'"), std::string::npos) << r.out;
  EXPECT_FALSE(fs::exists(debris));
  EXPECT_FALSE(fs::exists(png));
}

// ---- non-finite loss and gradients --------------------------------------------------------------

// Every tensor of a safetensors file is finite.
bool all_finite(const std::string& path) {
  for (const auto& [name, t] : io::load_safetensors(path).tensors)
    if (t.dtype() == Dtype::Float32 && !t.isfinite().all()) return false;
  return true;
}

TEST(Faults, NonFiniteGradientStopsNamingTheStepAndTheParameter) {
  TempDir dir("attn_nonfinite");
  dir.write("corpus.txt", corpus());
  const std::string out = dir.file("run");
  CliResult r =
      run_cli(tiny(dir, out, 20, {"--debug-nonfinite", "grad-inf:13:h.0.mlp.c_fc.weight"}));
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err.rfind("attn: error: [train] step 13: the gradient of 'h.0.mlp.c_fc.weight' (1 "
                        "of 1024 values, the first inf at [0, 0]) is not finite (the loss is ",
                        0),
            0u)
      << r.err;
  EXPECT_NE(r.err.find("stopping without saving, the last checkpoint in '" + out + "' is kept"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("--on-nonfinite skip skips such steps"), std::string::npos);
  // The checkpoint of step 10 is the last one, and finite.
  EXPECT_EQ(io::load_safetensors(out + "/ckpt.safetensors").metadata.at("step"), "10");
  EXPECT_TRUE(all_finite(out + "/ckpt.safetensors"));
  EXPECT_TRUE(all_finite(out + "/model.safetensors"));
}

TEST(Faults, NonFiniteLossNamesTheFirstOffendingParameter) {
  TempDir dir("attn_nonfinite_loss");
  dir.write("corpus.txt", corpus());
  CliResult r = run_cli(tiny(dir, dir.file("a"), 20, {"--debug-nonfinite", "loss-nan:12"}));
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err.rfind("attn: error: [train] step 12: loss is nan; stopping without saving", 0),
            0u)
      << r.err;
  // The NaN reaches every gradient; the first parameter (in state_dict order) is named.
  EXPECT_NE(r.err.find("first offending parameter: the gradient of 'wte.weight' ("),
            std::string::npos)
      << r.err;
  // Poisoned weights are named as such, and skipping cannot help them.
  r = run_cli(tiny(dir, dir.file("b"), 20, {"--debug-nan-at", "12", "--on-nonfinite", "skip"}));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("step 12: loss is nan; stopping without saving"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("first offending parameter: 'wte.weight' ("), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("is itself not finite"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("skipping the step cannot help"), std::string::npos) << r.err;
  EXPECT_TRUE(all_finite(dir.file("b/ckpt.safetensors")));
}

TEST(Faults, NonFiniteStepsAreSkippedOnRequest) {
  TempDir dir("attn_nonfinite_skip");
  dir.write("corpus.txt", corpus());
  const std::string out = dir.file("run");
  CliResult r = run_cli(
      tiny(dir, out, 20,
           {"--on-nonfinite", "skip", "--debug-nonfinite", "grad-nan:13", "--log-interval", "1"}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("step 13 skipped (--on-nonfinite skip: no update): the gradient of "
                       "'ln_f.weight' (1 of 16 values, the "
                       "first nan at [0]) is not finite (the loss is "),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("skipped 1 step whose loss or gradients were not finite: 13\n"),
            std::string::npos)
      << r.out;
  // 19 AdamW updates of 20 steps, and nothing non-finite saved.
  io::SafeTensors ck = io::load_safetensors(out + "/ckpt.safetensors");
  EXPECT_EQ(ck.at("optim.state.0.step").item<int64_t>(), 19);
  EXPECT_TRUE(all_finite(out + "/ckpt.safetensors"));
  // A non-finite loss is skipped the same way.
  r = run_cli(
      tiny(dir, dir.file("loss"), 20, {"--on-nonfinite=skip", "--debug-nonfinite=loss-inf:3"}));
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("step 3 skipped (--on-nonfinite skip: no update): loss is inf; first "
                       "offending parameter: the gradient of "),
            std::string::npos)
      << r.out;
}

TEST(Faults, NonFiniteFlagsAreChecked) {
  TempDir dir("attn_nonfinite_flags");
  dir.write("corpus.txt", corpus());
  const std::string out = dir.file("run");
  for (const auto& [flag, value] : std::vector<std::pair<std::string, std::string>>{
           {"on-nonfinite", "ignore"},
           {"on-nonfinite", ""},
           {"debug-nonfinite", "loss:3"},
           {"debug-nonfinite", "grad-nan"},
           {"debug-nonfinite", "grad-nan:-1"},
           {"debug-nonfinite", "loss-nan:3:wte.weight"},
           {"debug-nonfinite", "grad-inf:3:"},
           {"debug-nonfinite", "grad-inf:3@x"},
           {"debug-nonfinite", "grad-inf:3@-1"},
           {"debug-slow-save", "-5"}}) {
    CliResult r = run_cli(tiny(dir, out, 10, {"--" + flag, value}));
    EXPECT_EQ(r.code, 2) << flag << " " << value;
    EXPECT_NE(r.err.find("invalid value '" + value + "' for --" + flag), std::string::npos)
        << r.err;
  }
  CliResult r = run_cli(tiny(dir, out, 10, {"--debug-nonfinite", "grad-nan:3:no.such.weight"}));
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("the model has no parameter 'no.such.weight'"), std::string::npos) << r.err;
  r = run_cli({"train", "--help"});
  EXPECT_NE(r.out.find("--on-nonfinite stop|skip"), std::string::npos);
  EXPECT_EQ(r.out.find("--debug-nonfinite"), std::string::npos);  // hidden
}

// ---- a full disk while saving -------------------------------------------------------------------

TEST(Faults, FullDiskWhileSavingNamesTheFileAndKeepsTheCheckpoint) {
  TempDir dir("attn_full_disk");
  dir.write("corpus.txt", corpus());
  const std::string out = dir.file("run");
  ASSERT_EQ(run_cli(tiny(dir, out, 10)).code, 0);
  std::map<std::string, std::string> before;
  for (const auto& e : fs::directory_iterator(out))
    before[e.path().filename().string()] = slurp(e.path());
  CliResult r;
  {
    // Room for the lock record, not for a checkpoint (several KB).
    FileSizeLimit limit(2000);
    ASSERT_TRUE(limit.ok());
    r = run_cli(tiny(dir, out, 20, {"--resume"}));
  }
  EXPECT_EQ(r.code, 1);
  EXPECT_EQ(r.err, "attn: error: [write_file_atomic] cannot write '" + out +
                       "/model.safetensors': write failed: File too large\n");
  std::map<std::string, std::string> after;
  for (const auto& e : fs::directory_iterator(out))
    after[e.path().filename().string()] = slurp(e.path());
  // The same files (no temporary one), the checkpoints byte for byte; the lock file records the
  // last run.
  after.erase("train.lock");
  before.erase("train.lock");
  EXPECT_TRUE(after == before);
}

}  // namespace
}  // namespace attn

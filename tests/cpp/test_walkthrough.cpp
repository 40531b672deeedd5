// Golden test of `attn walkthrough`: every result it prints must occur verbatim in the seed
// document it replays, read at test time from ATTN_SEEDS_DIR (the documents are not part of the
// repository). Results tagged kExtraTag (not printed by the document) or kDiffersTag (printed by
// the document from unreproducible state) are exempt. Also tests the `attn` CLI's exit codes.
#include <attn/attn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "../../tools/attn/walkthrough.h"
// The CLI itself, without its main(), so that cli_main can be called in-process.
#define ATTN_CLI_NO_MAIN
#include "../../tools/attn/main.cpp"

#ifndef ATTN_SEEDS_DIR
#error "ATTN_SEEDS_DIR must name the directory of the seed documents"
#endif

namespace attn::tools {
namespace {

namespace fs = std::filesystem;

enum class Kind { Document, Extra, Differs };

struct Block {
  std::string seed;  // "000" ... "004"
  std::string expr;  // what the ">>>" line names
  std::string text;  // the printed result
  Kind kind = Kind::Document;
};

bool starts_with(const std::string& s, const char* prefix) { return s.rfind(prefix, 0) == 0; }

// Splits walkthrough output into its printed results (format in walkthrough.h).
std::vector<Block> parse_blocks(const std::string& output) {
  std::vector<Block> blocks;
  std::string seed;
  bool open = false;
  auto close = [&] {
    if (!open) return;
    std::string& t = blocks.back().text;
    while (!t.empty() && t.back() == '\n') t.pop_back();
    open = false;
  };
  std::istringstream in(output);
  std::string line;
  while (std::getline(in, line)) {
    if (starts_with(line, kSeedPrefix)) {
      close();
      const std::string marker = std::string(kSeedPrefix) + "Seed ";
      EXPECT_TRUE(starts_with(line, marker.c_str())) << line;
      seed = line.substr(marker.size(), 3);
    } else if (starts_with(line, kStepPrefix)) {
      close();
    } else if (starts_with(line, kResultPrefix)) {
      close();
      Block b;
      b.seed = seed;
      b.expr = line.substr(std::string(kResultPrefix).size());
      if (line.find(kExtraTag) != std::string::npos) b.kind = Kind::Extra;
      if (line.find(kDiffersTag) != std::string::npos) b.kind = Kind::Differs;
      blocks.push_back(b);
      open = true;
    } else if (open) {
      blocks.back().text += line + "\n";
    }
  }
  close();
  return blocks;
}

std::string walkthrough(const std::string& seed) {
  std::ostringstream os;
  run_walkthrough(seed, os);
  return os.str();
}

fs::path seeds_dir() { return fs::path(ATTN_SEEDS_DIR); }

// The text of the document of seed `id` ("000_<hash>.txt"), or a failure.
::testing::AssertionResult read_document(const std::string& id, std::string* text) {
  if (!fs::is_directory(seeds_dir()))
    return ::testing::AssertionFailure()
           << "seed documents not found: " << seeds_dir() << " is not a directory";
  for (const SeedInfo& s : walkthrough_seeds()) {
    if (s.id != id) continue;
    fs::path p = seeds_dir() / s.document;
    std::ifstream f(p, std::ios::binary);
    if (!f) return ::testing::AssertionFailure() << "cannot read " << p;
    std::ostringstream ss;
    ss << f.rdbuf();
    *text = ss.str();
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure() << "no seed " << id;
}

// Restores PyTorch's default print options around each test.
class WalkthroughTest : public ::testing::Test {
 protected:
  void SetUp() override { print_options() = PrintOptions{}; }
  void TearDown() override { print_options() = PrintOptions{}; }
};

TEST_F(WalkthroughTest, SeedsDirectoryExists) {
  ASSERT_TRUE(fs::is_directory(seeds_dir()))
      << "the golden test needs the seed documents in " << seeds_dir();
  for (const SeedInfo& s : walkthrough_seeds())
    EXPECT_TRUE(fs::is_regular_file(seeds_dir() / s.document)) << s.document;
}

// Every result printed for the seed that is not tagged must occur verbatim in its document.
class SeedGoldenTest : public WalkthroughTest, public ::testing::WithParamInterface<const char*> {};

// The least number of checked results per seed, so that a walkthrough that silently stops
// printing cannot pass.
int minimum_document_blocks(const std::string& seed) {
  if (seed == "000") return 14;
  if (seed == "001") return 25;
  if (seed == "002") return 15;
  if (seed == "003") return 9;
  return 17;
}

// Results where attn's float32 arithmetic is known to round differently from the PyTorch build
// that produced the document. The walkthrough prints attn's real values; here they must still
// equal the document's to within one unit of the last printed digit (and are reported when they
// do not match verbatim). Remove an entry once the library reproduces the document exactly.
struct KnownDifference {
  const char* seed;
  const char* expr;
  const char* reason;
};
const KnownDifference kKnownDifferences[] = {
    {"001", "attention_scores",
     "one score's last digit: OpenBLAS sums the 3-term dot product left to right, the document "
     "shows the correctly rounded value"},
    {"002", "attention_weights.sum(dim=-1)",
     "attn's sum accumulates in double and gets exactly 1 (printed '1.'); PyTorch accumulates in "
     "float32, where some rows are 1 +- 1 ulp (printed '1.0000')"},
};

const KnownDifference* known_difference(const Block& b) {
  for (const KnownDifference& k : kKnownDifferences)
    if (b.seed == k.seed && b.expr == k.expr) return &k;
  return nullptr;
}

// The numbers of a printed tensor, in order ("-inf" and "nan" included; "1." is 1).
std::vector<double> numbers_in(const std::string& text) {
  std::vector<double> out;
  static const std::regex number(
      R"((?:^|[\s\[(])(-?inf|nan|-?\d+\.?\d*(?:e[+-]?\d+)?)(?=[,\])\s]|$))");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), number);
       it != std::sregex_iterator(); ++it)
    out.push_back(std::stod(it->str(1)));
  return out;
}

// Decimal places of the most precise number in `text` (4 for "0.1234").
int decimals_in(const std::string& text) {
  int best = 0;
  static const std::regex frac(R"(\.(\d+))");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), frac); it != std::sregex_iterator();
       ++it)
    best = std::max(best, int(it->str(1).size()));
  return best;
}

// True when the document prints a tensor with the same numbers as `text`, each equal to within one
// unit of the last printed digit.
bool numerically_in_document(const std::string& text, const std::string& doc) {
  const std::vector<double> ours = numbers_in(text);
  for (std::size_t at = doc.find("tensor("); at != std::string::npos;
       at = doc.find("tensor(", at + 1)) {
    int depth = 0;
    std::size_t end = at + 6;
    for (; end < doc.size(); ++end) {
      if (doc[end] == '(') ++depth;
      if (doc[end] == ')' && --depth == 0) break;
    }
    const std::string block = doc.substr(at, end - at + 1);
    const std::vector<double> theirs = numbers_in(block);
    if (theirs.size() != ours.size()) continue;
    const double tol = 1.01 * std::pow(10.0, -std::max(decimals_in(text), decimals_in(block)));
    bool same = true;
    for (std::size_t i = 0; i < ours.size() && same; ++i)
      same = ours[i] == theirs[i] || std::abs(ours[i] - theirs[i]) <= tol;
    if (same) return true;
  }
  return false;
}

TEST_P(SeedGoldenTest, EveryPrintedResultIsInTheDocument) {
  const std::string seed = GetParam();
  std::string doc;
  ASSERT_TRUE(read_document(seed, &doc));
  const std::string out = walkthrough(seed);
  const std::vector<Block> blocks = parse_blocks(out);
  int verbatim = 0, known = 0, extra = 0, differs = 0;
  for (const Block& b : blocks) {
    EXPECT_EQ(b.seed, seed) << b.expr;
    EXPECT_FALSE(b.text.empty()) << "empty result for " << b.expr;
    switch (b.kind) {
      case Kind::Extra: ++extra; continue;
      case Kind::Differs: ++differs; continue;
      case Kind::Document: break;
    }
    if (doc.find(b.text) != std::string::npos) {
      ++verbatim;
      continue;
    }
    if (const KnownDifference* k = known_difference(b)) {
      ++known;
      std::cout << "[ KNOWN    ] seed " << seed << ", '" << b.expr
                << "' differs from the document: " << k->reason << "\n";
      EXPECT_TRUE(numerically_in_document(b.text, doc))
          << "seed " << seed << ", result '" << b.expr
          << "' is not even numerically in the document:\n"
          << b.text;
      continue;
    }
    ADD_FAILURE() << "seed " << seed << ", result '" << b.expr << "' is not in the document:\n"
                  << b.text;
  }
  EXPECT_GE(verbatim + known, minimum_document_blocks(seed));
  // Only seed 004's In [68] comes from state the document does not show.
  EXPECT_EQ(differs, seed == "004" ? 1 : 0);
  std::cout << "[          ] seed " << seed << ": " << verbatim
            << " results verbatim in the document, " << known << " known rounding differences, "
            << extra << " extra, " << differs << " unreproducible in the document\n";
}

TEST(WalkthroughToleranceTest, NumericalMatchAllowsOnlyTheLastDigit) {
  const std::string doc = "x = 1\ntensor([[ 12.3456, -inf],\n        [  1.0000, 0.5000]])\n";
  EXPECT_TRUE(numerically_in_document("tensor([[ 12.3457, -inf],\n[ 1.0000, 0.5000]])", doc));
  EXPECT_TRUE(numerically_in_document("tensor([[12.3456, -inf],\n [1., 0.5000]])", doc));
  EXPECT_FALSE(numerically_in_document("tensor([[ 12.3458, -inf],\n[ 1.0000, 0.5000]])", doc));
  EXPECT_FALSE(numerically_in_document("tensor([[ 12.3456, 0.],\n[ 1.0000, 0.5000]])", doc));
  EXPECT_FALSE(numerically_in_document("tensor([[ 12.3456, -inf, 1.0000, 0.5000, 1.]])", doc));
  EXPECT_FALSE(numerically_in_document("tensor([[ 12.3456, -inf],\n[ 1.0010, 0.5000]])", doc));
}

INSTANTIATE_TEST_SUITE_P(Seeds, SeedGoldenTest,
                         ::testing::Values("000", "001", "002", "003", "004"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string("seed_") + info.param;
                         });

TEST_F(WalkthroughTest, AllSeedsInOrderAndDeterministic) {
  std::string joined;
  for (const SeedInfo& s : walkthrough_seeds()) {
    if (!joined.empty()) joined += "\n\n";
    joined += walkthrough(s.id);
  }
  const std::string all = walkthrough("");
  EXPECT_EQ(all, joined) << "each seed must reseed the generator and reset the print options";
  std::size_t at = 0;
  for (const SeedInfo& s : walkthrough_seeds()) {
    const std::string header = std::string(kSeedPrefix) + "Seed " + s.id + " (" + s.document + ")";
    std::size_t pos = all.find(header, at);
    ASSERT_NE(pos, std::string::npos) << header;
    at = pos + header.size();
  }
}

TEST_F(WalkthroughTest, PrintOptionsDoNotLeak) {
  // Seed 001 switches to precision 3 half-way (as the document does); the caller's options come
  // back afterwards and the next seed starts again from PyTorch's defaults.
  const std::string alone = walkthrough("002");
  print_options().precision = 7;
  walkthrough("001");
  EXPECT_EQ(print_options().precision, 7);
  EXPECT_FALSE(print_options().sci_mode.has_value());
  print_options() = PrintOptions{};
  walkthrough("001");
  EXPECT_EQ(walkthrough("002"), alone);
}

TEST_F(WalkthroughTest, UnknownSeedThrowsAttnError) {
  EXPECT_THROW(walkthrough("007"), Error);
  EXPECT_THROW(walkthrough("00"), Error);
  try {
    walkthrough("abc");
    FAIL() << "expected attn::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("'abc'"), std::string::npos) << e.what();
  }
}

// ---- the CLI ------------------------------------------------------------------------------------

struct CliResult {
  int code;
  std::string out, err;
};

CliResult cli(std::vector<std::string> args) {
  std::ostringstream out, err;
  int code = cli_main(args, out, err);
  return {code, out.str(), err.str()};
}

TEST_F(WalkthroughTest, CliHelpAndVersion) {
  for (const char* flag : {"--help", "-h", "help"}) {
    CliResult r = cli({flag});
    EXPECT_EQ(r.code, 0) << flag;
    EXPECT_NE(r.out.find("usage: attn"), std::string::npos) << flag;
    EXPECT_NE(r.out.find("walkthrough [SEED]"), std::string::npos) << flag;
    EXPECT_EQ(r.err, "");
  }
  CliResult v = cli({"--version"});
  EXPECT_EQ(v.code, 0);
  EXPECT_EQ(v.out, std::string("attn ") + kVersion + "\n");
  CliResult h = cli({"walkthrough", "--help"});
  EXPECT_EQ(h.code, 0);
  EXPECT_NE(h.out.find("usage: attn walkthrough [SEED]"), std::string::npos);
}

TEST_F(WalkthroughTest, CliWalkthroughPrintsTheSeed) {
  CliResult r = cli({"walkthrough", "002"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out, walkthrough("002"));
  EXPECT_EQ(r.err, "");
}

TEST_F(WalkthroughTest, CliUsageErrorsExitWith2) {
  const std::vector<std::vector<std::string>> cases = {
      {},                              // no command
      {"bogus"},                       // unknown command
      {"--bogus"},                     // unknown option
      {"walkthrough", "007"},          // unknown seed
      {"walkthrough", "000", "001"},   // too many seeds
      {"walkthrough", "--precision"},  // unknown option of the command
      {"--version", "x"},
      {"help", "bogus"},
  };
  for (const auto& args : cases) {
    std::string joined;
    for (const auto& a : args) joined += " " + a;
    CliResult r = cli(args);
    EXPECT_EQ(r.code, 2) << "attn" << joined;
    EXPECT_EQ(r.out, "") << "attn" << joined;
    EXPECT_TRUE(starts_with(r.err, "attn: ")) << "attn" << joined << ": " << r.err;
    EXPECT_NE(r.err.find("--help"), std::string::npos) << r.err;
  }
  EXPECT_NE(cli({"walkthrough", "007"}).err.find("unknown seed '007'"), std::string::npos);
  EXPECT_NE(cli({"bogus"}).err.find("unknown command 'bogus'"), std::string::npos);
}

TEST_F(WalkthroughTest, CliReportsAttnErrorsWithExit1) {
  std::ostringstream err;
  int code = guarded([]() -> int { throw Error("[matmul] shapes (2, 3) and (4, 5) differ"); }, err);
  EXPECT_EQ(code, 1);
  EXPECT_EQ(err.str(), "attn: error: [matmul] shapes (2, 3) and (4, 5) differ\n");
  std::ostringstream err2;
  EXPECT_EQ(guarded([]() -> int { throw 42; }, err2), 1);
  EXPECT_EQ(err2.str(), "attn: error: unknown exception\n");
  // A real library error raised inside a command reaches the user the same way.
  std::ostringstream err3;
  EXPECT_EQ(guarded([]() -> int { return matmul(ones({2, 3}), ones({4, 5})).dim(); }, err3), 1);
  EXPECT_TRUE(starts_with(err3.str(), "attn: error: [matmul]")) << err3.str();
}

}  // namespace
}  // namespace attn::tools

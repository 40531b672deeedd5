// `attn walkthrough`: the five seed documents replayed step by step, every number computed live by
// the library with the seeds' random seeds and printed exactly as PyTorch prints it.
//
// Output format (stable: tests/cpp/test_walkthrough.cpp parses it):
//
//   ==== Seed 001 (001_b6b9769fa5861ced.txt): Multi-head attention, step by step
//   -- 4. Project every token into queries, keys and values: Q = x @ Wq, K = x @ Wk, V = x @ Wv.
//   >>> Q
//   tensor([[[ -9.0244, -11.7287, ...]]])
//
// A line starting with kSeedPrefix opens a seed, kStepPrefix opens a step (a one-line
// explanation), kResultPrefix names one printed result. The result's text is every line after its
// kResultPrefix line up to the next line starting with one of the three prefixes (trailing blank
// lines dropped). Results that the document does not print carry kExtraTag on their ">>>" line;
// results the document prints differently (unreproducible there) carry kDiffersTag. Every other
// result occurs verbatim in the seed document.
#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace attn::tools {

inline constexpr const char* kSeedPrefix = "==== ";
inline constexpr const char* kStepPrefix = "-- ";
inline constexpr const char* kResultPrefix = ">>> ";
inline constexpr const char* kExtraTag = "[extra: not printed in the document]";
inline constexpr const char* kDiffersTag = "[differs from the document]";

struct SeedInfo {
  std::string id;        // "000" ... "004"
  std::string document;  // file name of the seed document, e.g. "000_a37b91e2cfdacae8.txt"
  std::string title;     // the document's title (or, where it has none, what it is about)
};

// The seeds the walkthrough knows, in order.
const std::vector<SeedInfo>& walkthrough_seeds();

// Prints the walkthrough of one seed ("000" ... "004"), or of all five in order when `seed` is
// empty. Print options are reset to PyTorch's defaults before each seed and restored afterwards;
// the default generator is re-seeded as each document does. Throws attn::Error for an unknown seed.
void run_walkthrough(const std::string& seed, std::ostream& os);

}  // namespace attn::tools

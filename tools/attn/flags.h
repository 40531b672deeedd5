// The flag parser of `attn train` and `attn generate` (and of attn_debug's --debug-* flags,
// tools/attn/debug_faults.cpp).
#pragma once

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <system_error>
#include <vector>

#include "train.h"

namespace attn::tools {

// Parses `--name VALUE`, `--name=VALUE` and switches `--name` against a fixed list of flags. Later
// occurrences of a flag override earlier ones. Typed getters validate and throw FlagError naming
// the flag and the value.
class Flags {
  static std::string format_g(double v) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g", v);
    return buf;
  }

 public:
  Flags(std::string command, std::span<const std::string> args,
        const std::vector<std::string>& valued, const std::vector<std::string>& switches)
      : command_(std::move(command)) {
    auto is_in = [](const std::vector<std::string>& v, const std::string& s) {
      return std::find(v.begin(), v.end(), s) != v.end();
    };
    for (std::size_t i = 0; i < args.size(); ++i) {
      const std::string& arg = args[i];
      if (arg.size() < 3 || arg.compare(0, 2, "--") != 0) {
        if (!arg.empty() && arg[0] == '-') fail_unknown(arg);
        throw FlagError(command_ + ": unexpected argument '" + arg + "'");
      }
      std::string name = arg.substr(2);
      std::optional<std::string> value;
      if (auto eq = name.find('='); eq != std::string::npos) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
      }
      if (is_in(switches, name)) {
        if (value)
          throw FlagError(command_ + ": --" + name + " takes no value (got '" + arg + "')");
        values_[name] = "";
        order_.push_back(name);
      } else if (is_in(valued, name)) {
        if (!value) {
          if (i + 1 >= args.size()) throw FlagError(command_ + ": --" + name + " needs a value");
          value = args[++i];
        }
        values_[name] = *value;
      } else {
        fail_unknown("--" + name);
      }
    }
  }

  bool has(const std::string& name) const { return values_.count(name) != 0; }
  // Which of the switches came last (or `fallback` if none was given).
  std::string last_of(const std::vector<std::string>& names, const std::string& fallback) const {
    for (auto it = order_.rbegin(); it != order_.rend(); ++it)
      if (std::find(names.begin(), names.end(), *it) != names.end()) return *it;
    return fallback;
  }

  std::string str(const std::string& name, const std::string& fallback) const {
    auto it = values_.find(name);
    return it == values_.end() ? fallback : it->second;
  }

  int64_t integer(const std::string& name, int64_t fallback, int64_t min,
                  int64_t max = std::numeric_limits<int64_t>::max()) const {
    auto it = values_.find(name);
    if (it == values_.end()) return fallback;
    const std::string& s = it->second;
    int64_t v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < min || v > max) {
      std::string want = "an integer >= " + std::to_string(min);
      if (max != std::numeric_limits<int64_t>::max())
        want = "an integer in [" + std::to_string(min) + ", " + std::to_string(max) + "]";
      bad(name, s, want);
    }
    return v;
  }

  uint64_t seed(const std::string& name, uint64_t fallback) const {
    auto it = values_.find(name);
    if (it == values_.end()) return fallback;
    const std::string& s = it->second;
    uint64_t v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size())
      bad(name, s, "an integer in [0, 2^64)");
    return v;
  }

  // A finite number in the interval [lo, hi] (or (lo, .. / .., hi) when the bound is open).
  double number(const std::string& name, double fallback, double lo, bool lo_open, double hi,
                bool hi_open) const {
    auto it = values_.find(name);
    if (it == values_.end()) return fallback;
    const std::string& s = it->second;
    double v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    bool ok = !s.empty() && ec == std::errc() && end == s.data() + s.size() && std::isfinite(v) &&
              (lo_open ? v > lo : v >= lo) && (hi_open ? v < hi : v <= hi);
    if (!ok) {
      std::string want;
      if (std::isinf(hi))
        want = std::string("a number ") + (lo_open ? "> " : ">= ") + format_g(lo);
      else
        want = std::string("a number in ") + (lo_open ? "(" : "[") + format_g(lo) + ", " +
               format_g(hi) + (hi_open ? ")" : "]");
      bad(name, s, want);
    }
    return v;
  }

  [[noreturn]] void bad(const std::string& name, const std::string& value,
                        const std::string& want) const {
    throw FlagError(command_ + ": invalid value '" + value + "' for --" + name + ": expected " +
                    want);
  }

 private:
  [[noreturn]] void fail_unknown(const std::string& arg) const {
    throw FlagError(command_ + ": unknown option '" + arg + "'");
  }
  std::string command_;
  std::map<std::string, std::string> values_;
  std::vector<std::string> order_;  // switches in the order given
};

// `--dtype float32|bfloat16|float16` (default float32): the dtype a decoder computes in.
inline Dtype parse_model_dtype(const Flags& f) {
  const std::string d = f.str("dtype", "float32");
  if (d == "float32") return Dtype::Float32;
  if (d == "bfloat16") return Dtype::BFloat16;
  if (d == "float16") return Dtype::Float16;
  f.bad("dtype", d, "float32, bfloat16 or float16");
}

}  // namespace attn::tools

// `attn train` and `attn generate` (see train.h for the checkpoint format and the protocol).
#include "train.h"

#include <attn/attn.h>
#include <attn/data.h>
#include <attn/distributed.h>
#include <attn/gpt.h>
#include <attn/hf_gpt2.h>
#include <attn/io.h>
#include <attn/optim.h>
#include <attn/plot.h>
#include <sys/resource.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <string_view>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "../../src/io/file_internal.h"
#include "hf_cmd.h"
#include "progress.h"

namespace attn::tools {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using Args = std::span<const std::string>;

inline constexpr const char* kDefaultData = "/usr/share/games/fortunes/songs-poems";
inline constexpr const char* kModelFile = "model.safetensors";
inline constexpr const char* kCkptFile = "ckpt.safetensors";
inline constexpr const char* kOptimPrefix = "optim.";
inline constexpr const char* kLossFile = "loss.png";
inline constexpr const char* kLockFile = "train.lock";

std::string strf(const char* format, ...) __attribute__((format(printf, 1, 2)));
std::string strf(const char* format, ...) {
  va_list ap, ap2;
  va_start(ap, format);
  va_copy(ap2, ap);
  int n = std::vsnprintf(nullptr, 0, format, ap);
  va_end(ap);
  std::string s(n > 0 ? std::size_t(n) : 0, '\0');
  if (n > 0) std::vsnprintf(s.data(), s.size() + 1, format, ap2);
  va_end(ap2);
  return s;
}

// ---- command-line flags -------------------------------------------------------------------------

// Parses `--name VALUE`, `--name=VALUE` and switches `--name` against a fixed list of flags. Later
// occurrences of a flag override earlier ones. Typed getters validate and throw FlagError naming
// the flag and the value.
class Flags {
 public:
  Flags(std::string command, Args args, const std::vector<std::string>& valued,
        const std::vector<std::string>& switches)
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
        want = std::string("a number ") + (lo_open ? "> " : ">= ") + strf("%g", lo);
      else
        want = std::string("a number in ") + (lo_open ? "(" : "[") + strf("%g", lo) + ", " +
               strf("%g", hi) + (hi_open ? ")" : "]");
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

constexpr double kInf = std::numeric_limits<double>::infinity();

// --debug-nonfinite KIND:STEP[:PARAM][@RANK] (see train.h).
struct NonFiniteSpec {
  bool in_loss = true;  // else in a gradient
  double value = 0;     // NaN or inf
  int64_t step = -1;
  std::string param;  // "" = the last parameter
  int rank = -1;      // -1 = every rank
};

NonFiniteSpec parse_nonfinite_spec(const std::string& full, const Flags& f) {
  const std::string want =
      "KIND:STEP[:PARAM][@RANK] with KIND loss-nan, loss-inf, grad-nan or grad-inf";
  NonFiniteSpec r;
  std::string spec = full;
  if (const auto at = spec.rfind('@'); at != std::string::npos) {
    const std::string rank = spec.substr(at + 1);
    auto [end, ec] = std::from_chars(rank.data(), rank.data() + rank.size(), r.rank);
    if (rank.empty() || ec != std::errc() || end != rank.data() + rank.size() || r.rank < 0)
      f.bad("debug-nonfinite", full, want);
    spec = spec.substr(0, at);
  }
  const auto c1 = spec.find(':');
  if (c1 == std::string::npos) f.bad("debug-nonfinite", full, want);
  const std::string kind = spec.substr(0, c1);
  const auto c2 = spec.find(':', c1 + 1);
  const std::string step =
      spec.substr(c1 + 1, c2 == std::string::npos ? std::string::npos : c2 - c1 - 1);
  if (c2 != std::string::npos) r.param = spec.substr(c2 + 1);
  if (kind == "loss-nan" || kind == "grad-nan")
    r.value = std::numeric_limits<double>::quiet_NaN();
  else if (kind == "loss-inf" || kind == "grad-inf")
    r.value = std::numeric_limits<double>::infinity();
  else
    f.bad("debug-nonfinite", full, want);
  r.in_loss = kind.rfind("loss", 0) == 0;
  auto [end, ec] = std::from_chars(step.data(), step.data() + step.size(), r.step);
  if (step.empty() || ec != std::errc() || end != step.data() + step.size() || r.step < 0 ||
      (r.in_loss && c2 != std::string::npos) || (c2 != std::string::npos && r.param.empty()))
    f.bad("debug-nonfinite", full, want);
  return r;
}

// Sets io's debugging write pause (--debug-slow-save) for the lifetime of the guard.
class WritePause {
 public:
  explicit WritePause(int64_t ms) : on_(ms > 0) {
    if (on_) io::detail::set_write_pause(ms);
  }
  ~WritePause() {
    if (on_) io::detail::set_write_pause(0);
  }
  WritePause(const WritePause&) = delete;
  WritePause& operator=(const WritePause&) = delete;

 private:
  bool on_;
};

}  // namespace

// ---- train and generate options -----------------------------------------------------------------

TrainOptions parse_train_args(Args args) {
  const std::vector<std::string> valued = {
      "n-layer",     "n-head",     "n-embd",       "block-size",      "batch-size",     "max-iters",
      "lr",          "min-lr",     "warmup-iters", "lr-decay-iters",  "weight-decay",   "beta1",
      "beta2",       "grad-clip",  "dropout",      "eval-interval",   "eval-iters",     "seed",
      "threads",     "data",       "out",          "log-interval",    "debug-nan-at",   "zero",
      "debug-fault", "bucket-kib", "on-nonfinite", "debug-nonfinite", "debug-slow-save"};
  Flags f("train", args, valued, {"bias", "no-bias", "resume", "no-progress", "context-parallel"});
  TrainOptions o;
  const int64_t kMaxSize = int64_t(1) << 20;  // far beyond anything that fits in memory
  o.model.n_layer = f.integer("n-layer", 4, 1, kMaxSize);
  o.model.n_head = f.integer("n-head", 4, 1, kMaxSize);
  o.model.n_embd = f.integer("n-embd", 128, 1, kMaxSize);
  o.model.block_size = f.integer("block-size", 64, 1, kMaxSize);
  o.model.dropout = f.number("dropout", 0.0, 0.0, false, 1.0, true);
  // nanoGPT's train.py defaults to bias = False, which its shakespeare_char CPU run inherits.
  o.model.bias = f.last_of({"bias", "no-bias"}, "no-bias") == "bias";
  o.batch_size = f.integer("batch-size", 12, 1, kMaxSize);
  o.max_iters = f.integer("max-iters", 2000, 1);
  o.lr = f.number("lr", 1e-3, 0.0, true, kInf, false);
  o.min_lr = f.number("min-lr", 1e-4, 0.0, false, kInf, false);
  o.warmup_iters = f.integer("warmup-iters", 100, 0);
  o.lr_decay_iters = f.integer("lr-decay-iters", 2000, 1);
  o.weight_decay = f.number("weight-decay", 0.1, 0.0, false, kInf, false);
  o.beta1 = f.number("beta1", 0.9, 0.0, false, 1.0, true);
  o.beta2 = f.number("beta2", 0.99, 0.0, false, 1.0, true);
  o.grad_clip = f.number("grad-clip", 1.0, 0.0, false, kInf, false);
  o.eval_interval = f.integer("eval-interval", 250, 1);
  o.eval_iters = f.integer("eval-iters", 200, 1, kMaxSize);
  o.log_interval = f.integer("log-interval", 10, 1);
  o.seed = f.seed("seed", 1337);
  o.threads = f.integer("threads", 0, 0, 4096);
  o.debug_nan_at = f.integer("debug-nan-at", -1, 0);
  o.zero = f.integer("zero", 0, 0, 1);
  o.debug_fault = f.str("debug-fault", "");
  o.bucket_kib = f.integer("bucket-kib", 1024, 1, int64_t(1) << 30);
  const std::string on_nonfinite = f.str("on-nonfinite", "stop");
  if (on_nonfinite == "stop")
    o.on_nonfinite = TrainOptions::OnNonFinite::Stop;
  else if (on_nonfinite == "skip")
    o.on_nonfinite = TrainOptions::OnNonFinite::Skip;
  else
    f.bad("on-nonfinite", on_nonfinite, "stop or skip");
  o.debug_nonfinite = f.str("debug-nonfinite", "");
  if (f.has("debug-nonfinite")) (void)parse_nonfinite_spec(o.debug_nonfinite, f);
  o.debug_slow_save_ms = f.integer("debug-slow-save", 0, 0, 3'600'000);
  o.data = f.str("data", "");
  if (f.has("data") && o.data.empty()) f.bad("data", "", "a file name");
  o.out = f.str("out", "out");
  if (o.out.empty()) f.bad("out", "", "a directory name");
  o.resume = f.has("resume");
  o.no_progress = f.has("no-progress");
  o.context_parallel = f.has("context-parallel");
  if (o.context_parallel && o.model.dropout > 0)
    throw FlagError(
        "train: --context-parallel needs --dropout 0 (ring attention applies no "
        "dropout to the attention weights)");
  if (o.model.n_embd % o.model.n_head != 0)
    throw FlagError("train: --n-embd " + std::to_string(o.model.n_embd) +
                    " is not divisible by --n-head " + std::to_string(o.model.n_head));
  if (o.lr_decay_iters <= o.warmup_iters)
    throw FlagError("train: --lr-decay-iters " + std::to_string(o.lr_decay_iters) +
                    " must be greater than --warmup-iters " + std::to_string(o.warmup_iters));
  return o;
}

GenerateArgs parse_generate_args(Args args) {
  Flags f("generate", args,
          {"ckpt", "prompt", "max-new-tokens", "temperature", "top-k", "seed", "threads"},
          {"no-cache"});
  if (!f.has("ckpt")) throw FlagError("generate: --ckpt DIR is required");
  GenerateArgs a;
  a.ckpt = f.str("ckpt", "");
  if (a.ckpt.empty()) f.bad("ckpt", "", "a checkpoint directory or .safetensors file");
  a.has_prompt = f.has("prompt");
  a.prompt = f.str("prompt", "");
  a.options.max_new_tokens = f.integer("max-new-tokens", 500, 0);
  a.options.temperature = f.number("temperature", 0.8, 0.0, true, kInf, false);
  a.options.top_k = f.integer("top-k", 200, 0);
  a.options.use_cache = !f.has("no-cache");
  a.seed = f.seed("seed", 1337);
  a.threads = f.integer("threads", 0, 0, 4096);
  return a;
}

namespace {

json train_config_json(const TrainOptions& o) {
  return json{{"n_layer", o.model.n_layer},
              {"n_head", o.model.n_head},
              {"n_embd", o.model.n_embd},
              {"block_size", o.model.block_size},
              {"dropout", o.model.dropout},
              {"bias", o.model.bias},
              {"batch_size", o.batch_size},
              {"max_iters", o.max_iters},
              {"lr", o.lr},
              {"min_lr", o.min_lr},
              {"warmup_iters", o.warmup_iters},
              {"lr_decay_iters", o.lr_decay_iters},
              {"weight_decay", o.weight_decay},
              {"beta1", o.beta1},
              {"beta2", o.beta2},
              {"grad_clip", o.grad_clip},
              {"eval_interval", o.eval_interval},
              {"eval_iters", o.eval_iters},
              {"seed", o.seed},
              {"data", o.data}};
}

// ---- checkpoint metadata ------------------------------------------------------------------------

std::string config_json(const nn::GPTConfig& c) {
  return json{{"vocab_size", c.vocab_size},
              {"block_size", c.block_size},
              {"n_layer", c.n_layer},
              {"n_head", c.n_head},
              {"n_embd", c.n_embd},
              {"dropout", c.dropout},
              {"bias", c.bias}}
      .dump();
}

// Metadata helpers: every defect is an attn::Error naming the file and the key.
struct Meta {
  const std::map<std::string, std::string>& metadata;
  std::string fn, path;

  [[noreturn]] void fail(const std::string& what) const {
    throw Error("[" + fn + "] '" + path + "': " + what);
  }
  const std::string& get(const std::string& key) const {
    auto it = metadata.find(key);
    if (it == metadata.end()) fail("metadata has no '" + key + "' (not a checkpoint of attn)");
    return it->second;
  }
  json parse(const std::string& key) const {
    try {
      return json::parse(get(key));
    } catch (const json::exception& e) {
      fail("metadata '" + key + "' is not valid JSON: " + e.what());
    }
  }
  int64_t step() const {
    const std::string& s = get("step");
    int64_t v = -1;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < 0)
      fail("metadata 'step' is not a non-negative integer: '" + s + "'");
    return v;
  }
  nn::GPTConfig config() const {
    json j = parse("config");
    nn::GPTConfig c;
    try {
      c.vocab_size = json_int(j.at("vocab_size"), "vocab_size");
      c.block_size = json_int(j.at("block_size"), "block_size");
      c.n_layer = json_int(j.at("n_layer"), "n_layer");
      c.n_head = json_int(j.at("n_head"), "n_head");
      c.n_embd = json_int(j.at("n_embd"), "n_embd");
      c.dropout = j.at("dropout").get<double>();
      c.bias = j.at("bias").get<bool>();
    } catch (const std::exception& e) {  // json::exception, or json_int's
      fail(std::string("metadata 'config' is not a GPT configuration: ") + e.what());
    }
    try {
      c.validate(fn.c_str());
    } catch (const Error& e) {
      fail(std::string("metadata 'config' is invalid: ") + e.what());
    }
    return c;
  }
  data::CharTokenizer tokenizer() const {
    try {
      return data::CharTokenizer::from_json(get("tokenizer"));
    } catch (const Error& e) {
      fail(std::string("metadata 'tokenizer' is invalid: ") + e.what());
    }
  }
  void expect_format(std::initializer_list<const char*> formats) const {
    const std::string& f = get("format");
    std::string list;
    for (const char* want : formats) {
      if (f == want) return;
      list += std::string(list.empty() ? "" : " or ") + "'" + want + "'";
    }
    fail("format is '" + f + "', expected " + list);
  }
  // An integer of a JSON document that fits in int64 (nlohmann's get<int64_t> would convert a
  // float such as 1e300, or wrap an unsigned value above 2^63, without complaint).
  static int64_t json_int(const json& v, const char* what) {
    if (v.is_number_unsigned()) {
      if (v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
        throw std::runtime_error(std::string(what) + " " + v.dump() + " is too large");
      return int64_t(v.get<uint64_t>());
    }
    if (!v.is_number_integer())
      throw std::runtime_error(std::string(what) + " " + v.dump() + " is not an integer");
    return v.get<int64_t>();
  }
};

std::string to_hex(const std::vector<uint8_t>& bytes) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  s.reserve(bytes.size() * 2);
  for (uint8_t b : bytes) {
    s += digits[b >> 4];
    s += digits[b & 15];
  }
  return s;
}

std::optional<std::vector<uint8_t>> from_hex(const std::string& s) {
  if (s.size() % 2) return std::nullopt;
  auto nibble = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  std::vector<uint8_t> out(s.size() / 2);
  for (std::size_t i = 0; i < out.size(); ++i) {
    int hi = nibble(s[2 * i]), lo = nibble(s[2 * i + 1]);
    if (hi < 0 || lo < 0) return std::nullopt;
    out[i] = uint8_t(hi * 16 + lo);
  }
  return out;
}

json history_json(const std::vector<TrainEval>& history) {
  json list = json::array();
  for (const TrainEval& e : history)
    list.push_back({{"step", e.step}, {"train_loss", e.train_loss}, {"val_loss", e.val_loss}});
  return list;
}

bool is_optim_state(const std::string& name) { return name.rfind(kOptimPrefix, 0) == 0; }

// a * b + c for sizes, saturating at UINT64_MAX.
uint64_t sat_mul_add(uint64_t a, uint64_t b, uint64_t c = 0) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r) || __builtin_add_overflow(r, c, &r))
    return std::numeric_limits<uint64_t>::max();
  return r;
}

// Parameters every GPT of this configuration has at least (the weights without biases: token and
// position tables, per block the attention projections 4 C^2, the MLP 8 C^2 and two LayerNorm
// weights, and the final LayerNorm), saturating.
uint64_t min_parameters(const nn::GPTConfig& c) {
  const auto C = uint64_t(c.n_embd);
  const uint64_t tables =
      sat_mul_add(sat_mul_add(uint64_t(c.vocab_size), 1, uint64_t(c.block_size)), C);
  const uint64_t block = sat_mul_add(sat_mul_add(C, C), 12, sat_mul_add(C, 2));
  return sat_mul_add(block, uint64_t(c.n_layer), sat_mul_add(tables, 1, C));
}

const char* use_fn(CheckpointUse use) {
  return use == CheckpointUse::Resume ? "train" : "generate";
}

// ---- training -----------------------------------------------------------------------------------

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string loss_str(double v) { return strf("%.4f", v); }
// A loss for an error message: "nan" whatever its sign bit, "inf", or the number.
std::string bad_loss_str(double v) { return std::isnan(v) ? "nan" : strf("%g", v); }

// This rank's share of the work. Data parallel: all ranks draw the same `world` * B rows from the
// same generator (one process with batch world * B draws exactly these) and rank r keeps rows
// [r B, (r + 1) B). Context parallel: all ranks draw the same B sequences and rank r keeps its
// zigzag shard of each, attention running round the ring.
struct Shard {
  int rank = 0, world = 1;
  bool context = false;

  std::pair<Tensor, Tensor> batch(const data::TextDataset& ds, bool train, int64_t B, int64_t T,
                                  Generator& gen) const {
    if (context) {
      auto [x, y] = ds.batch(train, B, T, &gen);
      const auto z = distributed::Sharding::Zigzag;
      return {distributed::shard_sequence(x, 1, rank, world, z).contiguous(),
              distributed::shard_sequence(y, 1, rank, world, z).contiguous()};
    }
    auto [x, y] = ds.batch(train, world * B, T, &gen);
    if (world == 1) return {x, y};
    return {x.narrow(0, rank * B, B).contiguous(), y.narrow(0, rank * B, B).contiguous()};
  }

  nn::GPT::Output forward(const nn::GPT& model, const Tensor& x, const Tensor& y) const {
    if (!context) return model.forward(x, y);
    const int64_t T = x.size(1) * world;
    Tensor positions = distributed::shard_positions(T, rank, world, distributed::Sharding::Zigzag);
    return model.forward_sharded(
        x, y, positions, [](const Tensor& q, const Tensor& k, const Tensor& v) {
          distributed::RingOptions ro;
          ro.is_causal = true;
          ro.sharding = distributed::Sharding::Zigzag;
          return distributed::ring_attention(q, k, v, ro, distributed::world());
        });
  }
};

// Mean loss of eval_iters batches of each split (nanoGPT's estimate_loss: float32 losses, float32
// mean). Draws the batches from gen, train split first. Distributed: each rank evaluates its rows
// of every batch and the per-batch losses are averaged over the ranks (the loss of the whole
// batch, as its rows are split evenly).
std::pair<double, double> estimate_loss(nn::GPT& model, const data::TextDataset& ds,
                                        const TrainOptions& o, Generator& gen, const Shard& shard) {
  model.eval();
  NoGradGuard no_grad;
  double result[2] = {0, 0};
  for (int split = 0; split < 2; ++split) {
    std::vector<float> losses;
    losses.reserve(std::size_t(o.eval_iters));
    for (int64_t k = 0; k < o.eval_iters; ++k) {
      auto [x, y] = shard.batch(ds, split == 0, o.batch_size, o.model.block_size, gen);
      losses.push_back(shard.forward(model, x, y).loss.item<float>());
    }
    Tensor l = from_vector(losses, {int64_t(losses.size())});
    if (shard.world > 1) distributed::world().all_reduce(l, distributed::ReduceOp::Avg);
    result[split] = double(l.mean().item<float>());
  }
  model.train();
  return {result[0], result[1]};
}

// ---- non-finite values --------------------------------------------------------------------------

// The non-finite values of one float32 tensor: how many, and the first (flat index and value).
struct NonFiniteCount {
  int64_t count = 0, numel = 0, first = -1;
  float value = 0;
};

NonFiniteCount count_nonfinite(const Tensor& t) {
  NonFiniteCount r;
  if (!t.defined() || t.dtype() != Dtype::Float32) return r;
  const Tensor c = t.contiguous();
  const float* p = c.data_ptr<float>();
  r.numel = c.numel();
  // Exponent bits all ones: inf or NaN. Integer operations, so the loop vectorises.
  uint32_t any = 0;
  for (int64_t i = 0; i < r.numel; ++i) {
    uint32_t bits;
    std::memcpy(&bits, p + i, 4);
    any |= uint32_t((bits & 0x7f800000u) == 0x7f800000u);
  }
  if (!any) return r;
  for (int64_t i = 0; i < r.numel; ++i) {
    if (std::isfinite(p[i])) continue;
    if (r.count++ == 0) r.first = i, r.value = p[i];
  }
  return r;
}

// "3 of 4096 values, the first inf at [2, 17]".
std::string describe_nonfinite(const NonFiniteCount& c, const Shape& shape) {
  std::string at = "[";
  int64_t rest = c.first;
  std::vector<int64_t> idx(shape.size(), 0);
  for (std::size_t d = shape.size(); d-- > 0;) {
    if (shape[d] > 0) idx[d] = rest % shape[d], rest /= shape[d];
  }
  for (std::size_t d = 0; d < idx.size(); ++d) at += (d ? ", " : "") + std::to_string(idx[d]);
  at += "]";
  return strf("%lld of %lld value%s, the first %s at %s", (long long)c.count, (long long)c.numel,
              c.numel == 1 ? "" : "s", std::isnan(c.value) ? "nan" : (c.value > 0 ? "inf" : "-inf"),
              at.c_str());
}

// The first tensor of `named` holding a non-finite value, described ("'h.0.attn.in_proj_weight'
// (3 of 12288 values, the first nan at [0, 5])"), or "".
std::string first_nonfinite(const std::vector<std::pair<std::string, Tensor>>& named) {
  for (const auto& [name, t] : named) {
    const NonFiniteCount c = count_nonfinite(t);
    if (c.count > 0) return "'" + name + "' (" + describe_nonfinite(c, t.shape()) + ")";
  }
  return "";
}

// What is wrong with a training step whose loss or gradients are not finite ("" if nothing).
// Distributed: the loss is the batch's, the same on every rank, and so are the gradients after
// the data-parallel all-reduce; with ZeRO-1 (gradients still local: `local_grads`) the ranks
// agree on the first offending parameter through one all-reduce, so all of them decide alike.
struct StepFault {
  std::string what;          // "loss is nan", "the gradient of 'x' is not finite (...)"
  std::string detail;        // the first offending parameter, for a non-finite loss
  bool weights_bad = false;  // a parameter itself is not finite: skipping cannot help
  bool bad() const { return !what.empty(); }
};

// `grads_finite`: the caller knows every gradient to be finite (their total norm is), so they are
// not read again.
StepFault check_step(const nn::NamedTensors& params, double loss, bool local_grads,
                     distributed::Communicator& comm, bool grads_finite) {
  StepFault f;
  // The first parameter whose gradient is not finite (its index; params.size() if none).
  std::size_t first = params.size();
  NonFiniteCount first_count;
  for (std::size_t i = 0; i < params.size() && !grads_finite; ++i) {
    const NonFiniteCount c = count_nonfinite(params[i].second.grad());
    if (c.count > 0) {
      first = i, first_count = c;
      break;
    }
  }
  if (local_grads && comm.size() > 1) {
    float agreed = float(first);
    comm.all_reduce_async_raw(&agreed, 1, distributed::ReduceOp::Min).wait();
    if (std::size_t(agreed) != first) first = std::size_t(agreed), first_count = NonFiniteCount{};
  }
  const bool loss_bad = !std::isfinite(loss);
  if (!loss_bad && first == params.size()) return f;
  // Poisoned weights are named before gradients (they make every gradient non-finite).
  nn::NamedTensors values;
  for (const auto& [name, t] : params) values.emplace_back(name, t.detach());
  const std::string value_bad = first_nonfinite(values);
  f.weights_bad = !value_bad.empty();
  std::string grad_bad;
  if (first < params.size()) {
    const auto& [name, t] = params[first];
    grad_bad = "'" + name + "' (" +
               (first_count.count > 0 ? describe_nonfinite(first_count, t.shape())
                                      : std::string("on another rank")) +
               ")";
  }
  if (loss_bad) {
    f.what = "loss is " + bad_loss_str(loss);
    if (f.weights_bad)
      f.detail = "first offending parameter: " + value_bad + " is itself not finite";
    else if (!grad_bad.empty())
      f.detail = "first offending parameter: the gradient of " + grad_bad;
    else
      f.detail = "every parameter and gradient is finite";
  } else if (f.weights_bad) {
    f.what = "parameter " + value_bad + " is not finite";
  } else {
    f.what = "the gradient of " + grad_bad + " is not finite (the loss is " + loss_str(loss) + ")";
  }
  return f;
}

// --debug-fault KIND:RANK:STEP (tests of the distributed fault handling).
void inject_fault(const std::string& spec, int rank, int64_t step) {
  char kind[16] = {0};
  int r = -1;
  long long at = -1;
  if (std::sscanf(spec.c_str(), "%15[a-z]:%d:%lld", kind, &r, &at) != 3)
    throw Error("[train] --debug-fault expects raise|kill|hang:RANK:STEP, got '" + spec + "'");
  if (r != rank || at != step) return;
  const std::string k = kind;
  if (k == "raise")
    throw Error(strf("[train] rank %d: injected failure at step %lld (--debug-fault)", rank, at));
  if (k == "kill") std::raise(SIGKILL);
  if (k == "hang")
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  throw Error("[train] --debug-fault: unknown kind '" + k + "'");
}

// Progress: a bar on a terminal, else plain log lines every --log-interval steps (both drawn by
// ProgressBar, which counts the steps of this run). Evaluation lines go through message().
class Reporter {
 public:
  Reporter(int64_t first, int64_t last, std::ostream& out, bool tty, int64_t log_interval)
      : out_(out), first_(first) {
    if (last > first) bar_.emplace(last - first, out, tty, log_interval);
  }
  void message(const std::string& line) {
    if (bar_)
      bar_->message(line);
    else
      out_ << line << "\n" << std::flush;
  }
  // After training step `iter` (0-based) is done.
  void step(int64_t iter, double loss, double lr, double tokens_per_s) {
    if (bar_)
      bar_->update(iter + 1 - first_,
                   strf("loss %.4f | lr %.2e | ", loss, lr) + format_rate(tokens_per_s) + " tok/s");
  }
  void finish() {
    if (bar_) bar_->finish();
  }

 private:
  std::ostream& out_;
  int64_t first_;
  std::optional<ProgressBar> bar_;
};

// Training and decoding allocate and free the same few-hundred-KiB activations every step. glibc
// serves blocks that large with mmap and returns them on free, so each step would page-fault its
// memory back in; raising the thresholds keeps freed blocks in the heap for reuse (the process
// keeps its peak footprint, which is what it needs next step anyway).
void keep_freed_memory() {
#if defined(__GLIBC__)
  mallopt(M_MMAP_THRESHOLD, 64 << 20);
  mallopt(M_TRIM_THRESHOLD, 256 << 20);
#endif
}

}  // namespace

// ---- checkpoints --------------------------------------------------------------------------------

namespace {

Checkpoint parse(io::SafeTensorsFile file, const std::string& path, CheckpointUse use) {
  Checkpoint ck{std::move(file)};
  Meta meta{ck.file.metadata(), use_fn(use), path};
  if (use == CheckpointUse::Resume)
    meta.expect_format({"attn-train"});
  else
    meta.expect_format({"attn-gpt", "attn-train"});
  ck.config = meta.config();
  ck.tokenizer = meta.tokenizer();
  if (ck.tokenizer.vocab_size() != ck.config.vocab_size)
    meta.fail("the tokenizer has " + std::to_string(ck.tokenizer.vocab_size()) +
              " characters but the model's vocab_size is " + std::to_string(ck.config.vocab_size));
  // The model is allocated from the config before its weights are compared with it: make sure the
  // file holds at least that many values first.
  uint64_t values = 0;
  for (const io::SafeTensorsFile::Entry& e : ck.file.entries())
    if (!is_optim_state(e.name)) {
      uint64_t n = 1;  // the reader checked that this fits
      for (int64_t d : e.shape) n *= uint64_t(d);
      values += n;
    }
  const uint64_t needed = min_parameters(ck.config);
  if (values < needed)
    meta.fail("the weights hold " + std::to_string(values) +
              " values but the model of its config " + config_json(ck.config) + " has at least " +
              std::to_string(needed) + " parameters");
  if (use == CheckpointUse::Generate) return ck;

  ck.step = meta.step();
  auto rng = from_hex(meta.get("rng_state"));
  if (!rng || rng->size() != Generator::kStateSize)
    meta.fail("metadata 'rng_state' is not the hex of a " + std::to_string(Generator::kStateSize) +
              "-byte generator state");
  ck.rng_state = *rng;
  json hist = meta.parse("history");
  try {
    if (!hist.is_array()) throw std::runtime_error("not a list");
    for (const json& e : hist) {
      if (!e.is_object()) throw std::runtime_error("an entry is not an object: " + e.dump());
      TrainEval ev{Meta::json_int(e.at("step"), "step"), e.at("train_loss").get<double>(),
                   e.at("val_loss").get<double>()};
      if (ev.step < ck.step) ck.history.push_back(ev);  // the eval at ck.step is repeated
    }
  } catch (const std::exception& e) {
    meta.fail(std::string("metadata 'history' is not a list of {step, train_loss, val_loss}: ") +
              e.what());
  }
  return ck;
}

}  // namespace

Checkpoint parse_checkpoint(std::string_view bytes, const std::string& path, CheckpointUse use) {
  return parse(io::SafeTensorsFile::from_bytes(std::string(bytes), path), path, use);
}

Checkpoint read_checkpoint(const std::string& path, CheckpointUse use) {
  return parse(io::SafeTensorsFile(path), path, use);
}

void load_checkpoint_weights(nn::GPT& model, const Checkpoint& ck, const std::string& path,
                             CheckpointUse use) {
  std::map<std::string, Shape> shapes;
  for (const io::SafeTensorsFile::Entry& e : ck.file.entries())
    if (!is_optim_state(e.name)) shapes.emplace(e.name, e.shape);
  bool reading = false;  // past the checks: an error now is the file's, not the model's
  try {
    model.load_state_dict_from(
        shapes,
        [&](const std::string& name, Tensor& dst) {
          reading = true;
          ck.file.read_into(name, dst);
        },
        /*strict=*/true);
  } catch (const Error& e) {
    if (reading) throw;
    Meta{ck.file.metadata(), use_fn(use), path}.fail(std::string("weights do not fit the model: ") +
                                                     e.what());
  }
}

std::shared_ptr<nn::GPT> checkpoint_model(const Checkpoint& ck, const std::string& path) {
  std::shared_ptr<nn::GPT> model;
  {
    nn::init::SkipInitGuard skip;  // every weight is loaded next
    model = std::make_shared<nn::GPT>(ck.config);
  }
  load_checkpoint_weights(*model, ck, path, CheckpointUse::Generate);
  return model;
}

void restore_training_state(const Checkpoint& ck, const std::string& path, optim::AdamW& opt,
                            Generator& gen) {
  nn::NamedTensors optim_state;
  for (const io::SafeTensorsFile::Entry& e : ck.file.entries())
    if (is_optim_state(e.name))
      optim_state.emplace_back(e.name.substr(std::string(kOptimPrefix).size()),
                               ck.file.read(e.name));
  try {
    opt.load_state_dict(std::move(optim_state));  // kept, not copied: the state is held once
    gen.set_state(ck.rng_state);
  } catch (const Error& e) {
    Meta{ck.file.metadata(), "train", path}.fail(
        std::string("optimizer or generator state does not fit: ") + e.what());
  }
}

optim::AdamW make_optimizer(nn::GPT& model, const TrainOptions& o) {
  optim::AdamWOptions aopt;
  aopt.lr = o.lr;
  aopt.beta1 = o.beta1;
  aopt.beta2 = o.beta2;
  return optim::AdamW({optim::ParamGroup{model.decay_parameters(), o.weight_decay},
                       optim::ParamGroup{model.no_decay_parameters(), 0.0}},
                      aopt);
}

namespace {

// The checkpoint of --resume, validated against the flags and the data.
Checkpoint load_resume(const std::string& path, const TrainOptions& o,
                       const data::CharTokenizer& tok) {
  std::error_code ec;
  if (!fs::exists(path, ec))
    throw Error("[train] --resume: no checkpoint '" + path +
                "' (run `attn train` without --resume first, with the same --out)");
  Checkpoint r = read_checkpoint(path, CheckpointUse::Resume);
  const nn::GPTConfig& c = r.config;
  const data::CharTokenizer& ck_tok = r.tokenizer;

  std::vector<std::string> diffs;
  auto cmp = [&](const char* flag, int64_t ck, int64_t given) {
    if (ck != given)
      diffs.push_back(std::string(flag) + " " + std::to_string(given) +
                      " (checkpoint: " + std::to_string(ck) + ")");
  };
  cmp("--n-layer", c.n_layer, o.model.n_layer);
  cmp("--n-head", c.n_head, o.model.n_head);
  cmp("--n-embd", c.n_embd, o.model.n_embd);
  cmp("--block-size", c.block_size, o.model.block_size);
  if (c.bias != o.model.bias)
    diffs.push_back(std::string(o.model.bias ? "--bias" : "--no-bias") +
                    " (checkpoint: " + (c.bias ? "--bias" : "--no-bias") + ")");
  if (ck_tok.chars() != tok.chars()) {
    std::string d = "vocabulary of the data: " + std::to_string(tok.vocab_size()) +
                    " characters (checkpoint: " + std::to_string(ck_tok.vocab_size()) + ")";
    const auto& a = tok.chars();
    const auto& b = ck_tok.chars();
    for (std::size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
      if (a[i] != b[i]) {
        d += ", first difference at id " + std::to_string(i) + ": " + json(a[i]).dump() +
             " (checkpoint: " + json(b[i]).dump() + ")";
        break;
      }
    }
    diffs.push_back(d);
  }
  if (!diffs.empty()) {
    std::string msg =
        "[train] --resume: the model settings differ from the checkpoint '" + path + "': ";
    for (std::size_t i = 0; i < diffs.size(); ++i) msg += (i ? "; " : "") + diffs[i];
    throw Error(msg);
  }
  if (r.step > o.max_iters)
    throw Error("[train] --resume: the checkpoint '" + path + "' is at step " +
                std::to_string(r.step) + ", beyond --max-iters " + std::to_string(o.max_iters));
  return r;
}

}  // namespace

int train_command(Args args, std::ostream& out_all, std::ostream& err) {
  TrainOptions o = parse_train_args(args);
  keep_freed_memory();
  // Under mpirun: data parallel over the world's ranks; rank 0 alone prints and writes files.
  distributed::Communicator& comm = distributed::world();
  const Shard shard{comm.rank(), comm.size(), o.context_parallel};
  std::ostream quiet(nullptr);
  std::ostream& out = shard.rank == 0 ? out_all : quiet;
  if (o.context_parallel && o.model.block_size % (2 * shard.world) != 0)
    throw Error(
        strf("[train] --context-parallel over %d ranks cuts every sequence into %d zigzag "
             "chunks: --block-size %lld must be divisible by %d",
             shard.world, 2 * shard.world, (long long)o.model.block_size, 2 * shard.world));
  if (shard.world == 1 && o.zero != 0)
    throw Error(
        "[train] --zero 1 shards the optimizer state over several ranks: run under "
        "`mpirun -np N` with N > 1");

  // Everything is checked before anything is written.
  std::string data_path = o.data;
  if (data_path.empty()) {
    data_path = kDefaultData;
    std::error_code ec;
    if (!fs::exists(data_path, ec))
      throw Error(std::string("[train] no --data given and the default corpus '") + kDefaultData +
                  "' is missing: run scripts/setup.sh (it installs Debian's fortunes package) or "
                  "pass --data PATH");
  }
  o.data = data_path;  // as recorded in train_config
  std::string text = data::read_text_file(data_path);
  data::CharTokenizer tok = data::CharTokenizer::from_text(text);
  data::TextDataset ds(tok.encode(text), 0.9);
  for (int split = 0; split < 2; ++split) {
    std::size_t n = split == 0 ? ds.train().size() : ds.val().size();
    if (int64_t(n) <= o.model.block_size)
      throw Error("[train] '" + data_path + "' is too short for --block-size " +
                  std::to_string(o.model.block_size) + ": its " +
                  (split == 0 ? "training" : "validation") + " split has " + std::to_string(n) +
                  " characters, at least " + std::to_string(o.model.block_size + 1) +
                  " are needed (the corpus has " +
                  std::to_string(ds.train().size() + ds.val().size()) +
                  " characters; 10% of it is held out for validation)");
  }
  nn::GPTConfig config = o.model;
  config.vocab_size = tok.vocab_size();
  config.validate("train");

  const fs::path out_dir = o.out;
  const std::string model_path = (out_dir / kModelFile).string();
  const std::string ckpt_path = (out_dir / kCkptFile).string();
  std::optional<Checkpoint> resumed;
  if (o.resume) resumed = load_resume(ckpt_path, o, tok);
  if (shard.world > 1) {
    // The ranks must agree on everything that shapes the computation before they compute.
    json agreed = train_config_json(o);
    agreed["out"] = o.out;
    agreed["resume"] = o.resume;
    agreed["zero"] = o.zero;
    agreed["bucket_kib"] = o.bucket_kib;
    agreed["context_parallel"] = o.context_parallel;
    agreed["data_characters"] = ds.train().size() + ds.val().size();
    agreed["vocabulary"] = tok.to_json();
    comm.check_same("attn train's settings and data", agreed.dump());
  }

  int64_t threads = o.threads;
  if (threads == 0 && shard.world > 1)  // share the cores among this machine's ranks
    threads = std::max<int64_t>(
        1, int64_t(std::thread::hardware_concurrency()) / std::max(1, comm.local_size()));
  ThreadsGuard threads_guard(threads);
  manual_seed(o.seed);
  Generator& gen = default_generator();  // also drives dropout, as torch's global generator
  nn::GPT model = [&] {
    std::optional<nn::init::SkipInitGuard> skip;
    if (resumed) skip.emplace();  // every weight and the generator's state are restored below
    return nn::GPT(config, &gen);
  }();
  optim::AdamW opt = make_optimizer(model, o);

  int64_t start = 0;
  const bool is_resumed = resumed.has_value();
  std::vector<TrainEval> history;
  if (resumed) {
    load_checkpoint_weights(model, *resumed, ckpt_path, CheckpointUse::Resume);
    restore_training_state(*resumed, ckpt_path, opt, gen);
    start = resumed->step;
    history = resumed->history;
    resumed.reset();
  }
  model.train();

  std::error_code ec;
  if (shard.rank == 0) fs::create_directories(out_dir, ec);
  if (shard.rank == 0 && (ec || !fs::is_directory(out_dir)))
    throw Error("[train] cannot create the output directory '" + o.out +
                "': " + (ec ? ec.message() : std::string("a file of that name exists")));
  // One run per --out: rank 0, the only writer, locks the directory for the whole run. Then the
  // temporary files that killed writers left there go.
  std::optional<io::DirectoryLock> out_lock;
  std::vector<std::string> start_notes;
  if (shard.rank == 0) {
    const std::string lock_path = (out_dir / kLockFile).string();
    try {
      out_lock.emplace(lock_path, "attn train", "train", "--out '" + o.out + "'");
    } catch (const Error& e) {
      throw Error(std::string(e.what()) + "; wait for that run to end or choose another --out");
    }
    if (!out_lock->held())
      start_notes.push_back("warning: " + out_lock->unlocked_reason() +
                            ": nothing keeps a second run out of '" + o.out + "'");
    for (const char* name : {kModelFile, kCkptFile, kLossFile})
      for (const std::string& f : io::remove_stale_temporaries((out_dir / name).string()))
        start_notes.push_back("removed '" + f + "', left by a writer that was killed");
  }
  WritePause write_pause(o.debug_slow_save_ms);

  const std::string tokenizer_json = tok.to_json();
  const std::string cfg_json = config_json(config);
  const std::string train_cfg = train_config_json(o).dump();
  std::optional<distributed::ZeroAdamW> zero_opt;  // --zero 1: AdamW's state sharded
  if (o.zero == 1) {
    optim::AdamWOptions aopt = opt.options();
    zero_opt.emplace(opt.groups(), aopt, comm);
    zero_opt->load_state_dict(opt.state_dict());  // a resumed state, else empty
  }
  auto save = [&](int64_t step, const std::vector<uint8_t>& rng_state) {
    // The sharded state is gathered by every rank; rank 0 writes.
    nn::NamedTensors optim_state;
    if (zero_opt) optim_state = zero_opt->state_dict();
    if (shard.rank != 0) return;
    if (!zero_opt) optim_state = opt.state_dict();
    nn::NamedTensors weights = model.state_dict();
    std::vector<std::pair<std::string, Tensor>> model_tensors(weights.begin(), weights.end());
    std::vector<std::pair<std::string, Tensor>> tensors = model_tensors;
    for (const auto& [name, t] : optim_state) tensors.emplace_back(kOptimPrefix + name, t);
    // Nothing non-finite is ever written (the step checks should make this unreachable).
    if (const std::string bad = first_nonfinite(tensors); !bad.empty())
      throw Error(
          strf("[train] step %lld: not saving a checkpoint whose tensor %s is not finite; "
               "stopping, the last checkpoint in '%s' is kept",
               (long long)step, bad.c_str(), o.out.c_str()));
    io::save_safetensors(model_path, model_tensors,
                         {{"format", "attn-gpt"},
                          {"config", cfg_json},
                          {"tokenizer", tokenizer_json},
                          {"step", std::to_string(step)}});
    io::save_safetensors(ckpt_path, tensors,
                         {{"format", "attn-train"},
                          {"config", cfg_json},
                          {"train_config", train_cfg},
                          {"tokenizer", tokenizer_json},
                          {"step", std::to_string(step)},
                          {"rng_state", to_hex(rng_state)},
                          {"history", history_json(history).dump()}});
  };

  const bool tty = !o.no_progress && is_tty(out);
  Reporter report(start, o.max_iters, out, tty, o.log_interval);
  report.message(strf("data: '%s', %zu characters, vocabulary %lld; model: %lld parameters",
                      data_path.c_str(), ds.train().size() + ds.val().size(),
                      (long long)tok.vocab_size(), (long long)model.num_parameters()));
  std::optional<distributed::GradReducer> reducer;
  if (shard.world > 1 && !zero_opt) reducer.emplace(model.parameters(), comm, o.bucket_kib * 1024);
  if (shard.world > 1) {
    const std::string layout =
        shard.context
            ? strf(
                  "context parallel, %lld of %lld positions of each of %lld sequences per rank "
                  "(zigzag shards, ring attention)",
                  (long long)(o.model.block_size / shard.world), (long long)o.model.block_size,
                  (long long)o.batch_size)
            : strf("batch %lld per rank (global batch %lld)", (long long)o.batch_size,
                   (long long)(o.batch_size * shard.world));
    const std::string optimizer =
        zero_opt ? strf("ZeRO-1: AdamW state sharded, %lld of %lld values per rank",
                        (long long)zero_opt->shard_size(), (long long)model.num_parameters())
                 : strf("%lld gradient buckets", (long long)reducer->num_buckets());
    report.message(strf("distributed: %d ranks, %s, %s, %lld threads per rank", shard.world,
                        layout.c_str(), optimizer.c_str(), (long long)threads));
  }
  for (const std::string& note : start_notes) report.message(note);
  if (start > 0)
    report.message("resuming from step " + std::to_string(start) + " of '" + ckpt_path + "'");
  std::optional<NonFiniteSpec> inject;
  if (!o.debug_nonfinite.empty()) {
    Flags none("train", {}, {}, {});  // (parse_train_args has validated the spec)
    inject = parse_nonfinite_spec(o.debug_nonfinite, none);
  }
  const nn::NamedTensors named_params = model.named_parameters();
  if (inject && !inject->in_loss) {
    if (inject->param.empty()) inject->param = named_params.back().first;
    bool known = false;
    for (const auto& np : named_params) known = known || np.first == inject->param;
    if (!known)
      throw Error("[train] --debug-nonfinite: the model has no parameter '" + inject->param + "'");
  }
  std::vector<int64_t> skipped;

  const std::vector<Tensor> params = model.parameters();
  const double tokens_per_step =
      double((shard.context ? 1 : shard.world) * o.batch_size * o.model.block_size);
  std::vector<double> step_ms, comm_ms;
  using Clock = std::chrono::steady_clock;
  for (int64_t iter = start;; ++iter) {
    if (iter % o.eval_interval == 0 || iter == o.max_iters) {
      std::vector<uint8_t> rng_before = gen.get_state();
      auto [train_loss, val_loss] = estimate_loss(model, ds, o, gen, shard);
      if (!std::isfinite(train_loss) || !std::isfinite(val_loss))
        throw Error(
            strf("[train] step %lld: evaluation loss is not finite (train %s, val %s); "
                 "stopping without saving, the last checkpoint in '%s' is kept",
                 (long long)iter, bad_loss_str(train_loss).c_str(), bad_loss_str(val_loss).c_str(),
                 o.out.c_str()));
      history.push_back({iter, train_loss, val_loss});
      report.message("step " + std::to_string(iter) + ": train loss " + loss_str(train_loss) +
                     ", val loss " + loss_str(val_loss));
      // A resumed run repeats the evaluation its checkpoint was saved after: same numbers, same
      // checkpoint, so the file is left as it is.
      if (!(is_resumed && iter == start)) save(iter, rng_before);
    }
    if (iter == o.max_iters) break;

    if (!o.debug_fault.empty()) inject_fault(o.debug_fault, shard.rank, iter);
    if (iter == o.debug_nan_at) {
      NoGradGuard no_grad;
      model.wte->weight.fill_(std::numeric_limits<double>::quiet_NaN());
    }
    auto t0 = Clock::now();
    double lr = optim::cosine_lr(iter, o.lr, o.min_lr, o.warmup_iters, o.lr_decay_iters);
    (zero_opt ? zero_opt->set_lr(lr) : opt.set_lr(lr));
    auto [x, y] = shard.batch(ds, true, o.batch_size, o.model.block_size, gen);
    nn::GPT::Output fw = shard.forward(model, x, y);
    const bool inject_now =
        inject && iter == inject->step && (inject->rank < 0 || inject->rank == shard.rank);
    if (inject_now && inject->in_loss) fw.loss = fw.loss * inject->value;
    double loss = double(fw.loss.item<float>());
    if (shard.world > 1) {  // the loss of the whole batch, the same on every rank
      // One float whose layout the ranks agreed on at start-up: the raw call skips the per-call
      // shape check (an extra collective every step).
      float l = float(loss);
      comm.all_reduce_async_raw(&l, 1, distributed::ReduceOp::Avg).wait();
      loss = double(l);
    }
    // The backward runs even for a non-finite loss, so that the first offending parameter can be
    // named (and so that every rank takes part in the gradient all-reduce).
    fw.loss.backward();
    if (reducer) {
      reducer->finish();
      comm_ms.push_back(reducer->last_wait_s() * 1000.0);
    }
    if (inject_now && !inject->in_loss) {
      for (const auto& [name, p] : named_params)
        if (name == inject->param) p.grad().data_ptr<float>()[0] = float(inject->value);
    }
    // Clipping with one optimizer: the total gradient norm first. A finite norm means that every
    // gradient is finite (inf or NaN in any makes it inf or NaN), so the step check reads the
    // gradients only when it is not (or when it overflowed: then the check finds them finite).
    const bool clip = !zero_opt && o.grad_clip > 0;
    const double grad_norm = clip ? optim::total_grad_norm(params) : 0.0;
    if (const StepFault fault = check_step(named_params, loss, zero_opt.has_value(), comm,
                                           clip && std::isfinite(grad_norm));
        fault.bad()) {
      const std::string detail = fault.detail.empty() ? "" : "; " + fault.detail;
      if (o.on_nonfinite == TrainOptions::OnNonFinite::Stop || fault.weights_bad)
        throw Error(strf(
            "[train] step %lld: %s; stopping without saving, the last checkpoint in '%s' is kept "
            "(%s%s)",
            (long long)iter, fault.what.c_str(), o.out.c_str(),
            fault.detail.empty() ? "" : (fault.detail + "; ").c_str(),
            fault.weights_bad
                ? "the weights themselves are not finite, so skipping the step cannot help"
                : "a lower --lr may help; --on-nonfinite skip skips such steps"));
      // --on-nonfinite skip: no update of the weights or of the AdamW state.
      report.message(strf("step %lld skipped (--on-nonfinite skip: no update): %s%s",
                          (long long)iter, fault.what.c_str(), detail.c_str()));
      skipped.push_back(iter);
      (zero_opt ? zero_opt->zero_grad() : opt.zero_grad());
      report.step(iter, loss, lr, 0.0);
      continue;
    }
    if (zero_opt) {
      zero_opt->step(o.grad_clip);
      zero_opt->zero_grad();
    } else {
      // Clipping inside the update (the same weights to the bit, one pass over the gradients
      // fewer).
      opt.step_scaled(clip ? optim::clip_coefficient(grad_norm, o.grad_clip) : 1.0f);
      opt.zero_grad();
    }
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    step_ms.push_back(ms);

    double med = median(step_ms.size() > 64 ? std::vector<double>(step_ms.end() - 64, step_ms.end())
                                            : step_ms);
    double tps = med > 0 ? tokens_per_step * 1000.0 / med : 0.0;
    report.step(iter, loss, lr, tps);
  }
  report.finish();
  if (!skipped.empty()) {
    std::string list;
    for (std::size_t i = 0; i < skipped.size() && i < 20; ++i)
      list += (i ? ", " : "") + std::to_string(skipped[i]);
    if (skipped.size() > 20) list += ", ...";
    out << strf("skipped %zu step%s whose loss or gradients were not finite: %s", skipped.size(),
                skipped.size() == 1 ? "" : "s", list.c_str())
        << "\n";
  }

  // loss.png: train and validation loss of every evaluation.
  {
    std::vector<double> steps, train_l, val_l;
    for (const TrainEval& e : history) {
      steps.push_back(double(e.step));
      train_l.push_back(e.train_loss);
      val_l.push_back(e.val_loss);
    }
    plot::LineChart chart;
    chart.title = "attn train: loss";
    chart.x_label = "step";
    chart.y_label = "loss";
    auto series = [](const char* name, const std::vector<double>& x, const std::vector<double>& y) {
      plot::Series s;
      s.name = name;
      s.x = x;
      s.y = y;
      return s;
    };
    plot::Series val = series("val", steps, val_l);
    val.markers = true;  // one mark per evaluation, dashed: readable without colour
    val.marker_shape = plot::Marker::kSquare;
    val.dash = {8, 4};
    chart.series = {series("train", steps, train_l), val};
    if (shard.rank == 0) plot::save(chart, (out_dir / kLossFile).string());
  }

  const double ms_per_iter = median(step_ms);
  const double tokens_per_s = ms_per_iter > 0 ? tokens_per_step * 1000.0 / ms_per_iter : 0.0;
  struct rusage ru {};
  getrusage(RUSAGE_SELF, &ru);
  out << strf("peak_rss_mib=%.1f", double(ru.ru_maxrss) / 1024.0) << "\n";
  if (shard.world > 1)
    out << strf(
               "distributed: ranks=%d comm_wait_ms_per_iter=%.2f (median time finish() waited "
               "for gradient all-reduces after the backward)",
               shard.world, median(comm_ms))
        << "\n";
  const TrainEval& last = history.back();
  out << strf("done: iters=%lld ms_per_iter=%.2f train_loss=%.4f val_loss=%.4f tokens_per_s=%.0f",
              (long long)o.max_iters, ms_per_iter, last.train_loss, last.val_loss, tokens_per_s)
      << "\n"
      << std::flush;
  (void)err;
  return 0;
}

// ---- attn generate ------------------------------------------------------------------------------

std::string checkpoint_file(const std::string& ckpt, const char* command) {
  std::error_code ec;
  const std::string path =
      fs::is_directory(ckpt, ec) ? (fs::path(ckpt) / kModelFile).string() : ckpt;
  if (!fs::exists(path, ec))
    throw Error(std::string("[") + command + "] no checkpoint '" + path +
                "' (train one with `attn train --out DIR`, then pass --ckpt DIR)");
  return path;
}

int generate_command(Args args, std::ostream& out, std::ostream& err) {
  keep_freed_memory();
  const GenerateArgs a = parse_generate_args(args);
  if (nn::is_hf_checkpoint_dir(a.ckpt)) return generate_hf(a, out, err);
  std::error_code ec;
  if (fs::path file(a.ckpt); file.filename() == kModelFile && fs::is_regular_file(file, ec)) {
    // DIR/model.safetensors of a Hugging Face directory: the directory is the checkpoint.
    const fs::path dir = file.parent_path().empty() ? fs::path(".") : file.parent_path();
    if (nn::is_hf_checkpoint_dir(dir.string())) {
      GenerateArgs in_dir = a;
      in_dir.ckpt = dir.string();
      return generate_hf(in_dir, out, err);
    }
  }
  const std::string path = checkpoint_file(a.ckpt, "generate");
  const Checkpoint ck = read_checkpoint(path, CheckpointUse::Generate);
  generate_from_checkpoint(ck, path, a, out, err);
  return 0;
}

std::vector<int64_t> encode_prompt(const std::function<std::vector<int64_t>()>& encode) {
  try {
    return encode();
  } catch (const Error& e) {
    throw Error(std::string("[generate] the prompt cannot be encoded with the checkpoint's "
                            "vocabulary: ") +
                e.what());
  }
}

void stream_generation(const nn::GPT& model, std::vector<int64_t> ids, const std::string& shown,
                       char last, const std::function<std::string(int64_t)>& decode,
                       const GenerateArgs& a, std::ostream& out, std::ostream& err) {
  const nn::GPTConfig& config = model.config();
  if (int64_t(ids.size()) > config.block_size)
    ids.erase(ids.begin(), ids.end() - config.block_size);  // the model sees the last block only
  nn::GPT::GenerateOptions g = a.options;
  g.top_k = std::min(g.top_k, config.vocab_size);

  ThreadsGuard threads_guard(a.threads);
  Tensor idx = empty({1, int64_t(ids.size())}, Dtype::Int64);
  std::copy(ids.begin(), ids.end(), idx.data_ptr<int64_t>());
  out << shown << std::flush;
  int64_t produced = 0;
  Generator gen(a.seed);
  auto t0 = std::chrono::steady_clock::now();
  model.generate(idx, g, &gen, [&](const Tensor& column) {
    // Bytes as they come: a character split over two tokens is completed by the next one.
    const std::string s = decode(column.contiguous().data_ptr<int64_t>()[0]);
    out << s << std::flush;
    if (!s.empty()) last = s.back();
    ++produced;
  });
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (last != '\n') out << "\n";
  out.flush();
  err << strf("generate: tokens=%lld ms=%.2f tokens_per_s=%.1f cache=%s", (long long)produced, ms,
              ms > 0 ? double(produced) * 1000.0 / ms : 0.0, g.use_cache ? "on" : "off")
      << "\n"
      << std::flush;
}

void generate_from_checkpoint(const Checkpoint& ck, const std::string& path, const GenerateArgs& a,
                              std::ostream& out, std::ostream& err) {
  const data::CharTokenizer& tok = ck.tokenizer;
  std::vector<int64_t> ids;
  const bool has_prompt = a.has_prompt && !a.prompt.empty();
  if (has_prompt) {
    ids = encode_prompt([&] { return tok.encode(a.prompt); });
  } else {
    // nanoGPT starts from "\n"; a vocabulary without it starts from token 0.
    const auto& chars = tok.chars();
    auto nl = std::find(chars.begin(), chars.end(), std::string("\n"));
    ids = {nl == chars.end() ? 0 : int64_t(nl - chars.begin())};
  }
  const std::shared_ptr<nn::GPT> model = checkpoint_model(ck, path);
  model->eval();
  // The shown text, then the newline that ends the output unless a sampled character did.
  stream_generation(
      *model, ids, has_prompt ? a.prompt : tok.decode(ids), /*last=*/'\0',
      [&](int64_t id) { return tok.decode(id); }, a, out, err);
}

}  // namespace attn::tools

// Checkpoints of attn::train: reading and checking them (for generation and for resuming), and
// writing them (see include/attn/train.h for the format).
#include <attn/io.h>
#include <attn/train.h>

#include <charconv>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "train_internal.h"

namespace attn::train {

namespace fs = std::filesystem;
using detail::json;
using detail::strf;

namespace {

inline constexpr const char* kOptimPrefix = "optim.";

}  // namespace

std::string detail::config_json(const nn::GPTConfig& c) {
  return json{{"vocab_size", c.vocab_size},
              {"block_size", c.block_size},
              {"n_layer", c.n_layer},
              {"n_head", c.n_head},
              {"n_embd", c.n_embd},
              {"dropout", c.dropout},
              {"bias", c.bias}}
      .dump();
}

namespace {

using detail::config_json;

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

Checkpoint parse(io::SafeTensorsFile file, const std::string& path, CheckpointUse use) {
  Checkpoint ck{std::move(file), nn::GPTConfig{}, data::CharTokenizer{}, 0, {}, {}};
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

void write_checkpoint(const std::string& dir, const nn::NamedTensors& weights,
                      const nn::NamedTensors& optim_state, const CheckpointInfo& info) {
  nn::NamedTensors tensors = weights;
  for (const auto& [name, t] : optim_state) tensors.emplace_back(kOptimPrefix + name, t);
  // Nothing non-finite is ever written (the step checks should make this unreachable).
  if (const std::string bad = detail::first_nonfinite(tensors); !bad.empty())
    throw Error(
        strf("[train] step %lld: not saving a checkpoint whose tensor %s is not finite; "
             "stopping, the last checkpoint in '%s' is kept",
             (long long)info.step, bad.c_str(), dir.c_str()));
  const std::string cfg_json = config_json(info.config);
  const std::string tokenizer_json = info.tokenizer ? info.tokenizer->to_json() : "";
  const std::string step = std::to_string(info.step);
  io::save_safetensors((fs::path(dir) / kModelFile).string(), weights,
                       {{"format", "attn-gpt"},
                        {"config", cfg_json},
                        {"tokenizer", tokenizer_json},
                        {"step", step}});
  io::save_safetensors(
      (fs::path(dir) / kCkptFile).string(), tensors,
      {{"format", "attn-train"},
       {"config", cfg_json},
       {"train_config", info.options ? detail::train_config_json(*info.options).dump() : "{}"},
       {"tokenizer", tokenizer_json},
       {"step", step},
       {"rng_state", to_hex(info.rng_state)},
       {"history", history_json(info.history).dump()}});
}

json detail::train_config_json(const TrainOptions& o) {
  json j{{"n_layer", o.model.n_layer},
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
  if (o.pack) {  // recorded only when on: the checkpoints of other runs stay as they were
    j["pack"] = true;
    j["doc_separator"] = o.doc_separator;
  }
  return j;
}

// The checkpoint of --resume, validated against the flags and the data.
Checkpoint detail::load_resume(const std::string& path, const TrainOptions& o,
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

}  // namespace attn::train

// `attn generate` on Hugging Face GPT-2 directories and `attn export` (see hf_cmd.h).
#include "hf_cmd.h"

#include <attn/attn.h>
#include <attn/bpe.h>
#include <attn/data.h>
#include <attn/hf_decoder.h>
#include <attn/hf_gpt2.h>
#include <attn/io.h>
#include <attn/tokenizer.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

namespace attn::tools {
namespace {

namespace fs = std::filesystem;

// The tokenizer of a Hugging Face directory: GPT-2's BPE, or attn's characters.
struct DirTokenizer {
  std::optional<data::BpeTokenizer> bpe;
  std::optional<data::CharTokenizer> chars;

  int64_t vocab_size() const { return bpe ? bpe->vocab_size() : chars->vocab_size(); }
  std::vector<int64_t> encode(const std::string& text) const {
    return bpe ? bpe->encode(text) : chars->encode(text);
  }
  std::string decode(int64_t id) const {
    if (id >= vocab_size()) return "";  // a padded model vocabulary: no text
    return bpe ? bpe->decode(id) : chars->decode(id);
  }
  // The start of an unconditional sample: <|endoftext|>, a newline or token 0.
  int64_t start_id() const {
    if (bpe) return std::max<int64_t>(bpe->eot_id(), 0);
    const auto& c = chars->chars();
    auto nl = std::find(c.begin(), c.end(), std::string("\n"));
    return nl == c.end() ? 0 : int64_t(nl - c.begin());
  }
};

DirTokenizer load_dir_tokenizer(const fs::path& dir) {
  std::error_code ec;
  DirTokenizer t;
  const fs::path vocab = dir / "vocab.json", merges = dir / "merges.txt";
  if (fs::exists(vocab, ec) || fs::exists(merges, ec)) {
    for (const fs::path& p : {vocab, merges})
      if (!fs::exists(p, ec))
        throw Error("[generate] '" + dir.string() + "' has " +
                    (p == vocab ? merges : vocab).filename().string() + " but no " +
                    p.filename().string());
    t.bpe = data::BpeTokenizer::from_files(vocab.string(), merges.string());
    return t;
  }
  const fs::path chars = dir / kHfCharTokenizerFile;
  if (fs::exists(chars, ec)) {
    try {
      t.chars = data::CharTokenizer::from_json(io::read_file(chars.string()));
    } catch (const Error& e) {
      throw Error("[generate] '" + chars.string() + "': " + e.what());
    }
    return t;
  }
  throw Error("[generate] '" + dir.string() +
              "' has config.json but no tokenizer: expected vocab.json and merges.txt (GPT-2's "
              "byte-level BPE) or " +
              kHfCharTokenizerFile + " (written by `attn export`)");
}

// The model_type of DIR/config.json ("gpt2" when it has none), and its end-of-text ids.
struct DirConfig {
  std::string model_type = "gpt2";
  std::set<int64_t> eos;
};

DirConfig read_dir_config(const fs::path& dir) {
  DirConfig c;
  c.eos = hf_eos_token_ids(dir, "generate");
  std::error_code ec;
  if (!fs::exists(dir / "config.json", ec)) return c;
  const std::string path = (dir / "config.json").string();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(io::read_file(path));
  } catch (const nlohmann::json::exception& e) {
    throw Error("[generate] '" + path + "': not valid JSON: " + e.what());
  }
  if (j.is_object() && j.contains("model_type") && j["model_type"].is_string())
    c.model_type = j["model_type"].get<std::string>();
  return c;
}

// `attn generate` on a Llama / Qwen / Gemma directory: tokenizer.json, the decoder, the text
// streamed as the whole continuation decodes (a character split over tokens, or a decoder that
// strips a leading space, prints once it is settled).
int generate_hf_decoder(const GenerateArgs& a, const DirConfig& dc, std::ostream& out,
                        std::ostream& err) {
  const fs::path dir(a.ckpt);
  std::error_code ec;
  const fs::path tok_path = dir / "tokenizer.json";
  if (!fs::exists(tok_path, ec))
    throw Error("[generate] '" + dir.string() + "' is a " + dc.model_type +
                " model without tokenizer.json (Hugging Face tokenizers' file)");
  const data::Tokenizer tok = data::Tokenizer::from_file(tok_path.string());
  std::shared_ptr<nn::Decoder> model = nn::load_hf_decoder(a.ckpt, a.dtype);
  std::vector<int64_t> ids =
      encode_prompt([&] { return tok.encode(a.has_prompt ? a.prompt : ""); });
  if (ids.empty())
    throw Error("[generate] an empty prompt and a tokenizer without a start token: give --prompt");
  for (int64_t id : ids)
    if (id >= model->config().vocab_size)
      throw Error("[generate] the tokenizer's id " + std::to_string(id) +
                  " is outside the model's vocab_size " +
                  std::to_string(model->config().vocab_size));
  nn::Decoder::GenerateOptions g;
  g.max_new_tokens = a.options.max_new_tokens;
  g.temperature = a.options.temperature;
  g.top_k = std::min(a.options.top_k, model->config().vocab_size);
  g.stop_tokens.assign(dc.eos.begin(), dc.eos.end());
  g.window_length = a.window_length;
  g.sink_tokens = a.sink_tokens;
  ThreadsGuard threads_guard(a.threads);
  Tensor idx = empty({1, int64_t(ids.size())}, Dtype::Int64);
  std::copy(ids.begin(), ids.end(), idx.data_ptr<int64_t>());
  const std::string base = tok.decode(ids, true);
  std::string printed;
  std::vector<int64_t> all = ids;
  int64_t produced = 0;
  out << (a.has_prompt ? a.prompt : "") << std::flush;
  Generator gen(a.seed);
  const auto t0 = std::chrono::steady_clock::now();
  bool done = false;
  model->generate(idx, g, &gen, [&](const Tensor& column) {
    const int64_t id = column.contiguous().data_ptr<int64_t>()[0];
    if (done) return;
    ++produced;
    if (dc.eos.count(id)) {
      done = true;
      return;
    }
    all.push_back(id);
    const std::string text = tok.decode(all, true);
    if (text.size() < base.size() + printed.size() || text.compare(0, base.size(), base) != 0 ||
        text.compare(base.size(), printed.size(), printed) != 0 || text.ends_with("\xEF\xBF\xBD"))
      return;  // not settled yet
    out << text.substr(base.size() + printed.size()) << std::flush;
    printed = text.substr(base.size());
  });
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  out << "\n" << std::flush;
  char line[160];
  std::snprintf(line, sizeof line, "generate: tokens=%lld ms=%.2f tokens_per_s=%.1f cache=on",
                (long long)produced, ms, ms > 0 ? double(produced) * 1000.0 / ms : 0.0);
  err << line << "\n" << std::flush;
  return 0;
}

}  // namespace

std::set<int64_t> hf_eos_token_ids(const fs::path& dir, const char* command) {
  std::set<int64_t> out;
  std::error_code ec;
  for (const char* name : {"config.json", "generation_config.json"}) {
    const fs::path p = dir / name;
    if (!fs::exists(p, ec)) continue;
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(io::read_file(p.string()));
    } catch (const nlohmann::json::exception& e) {
      throw Error(std::string("[") + command + "] '" + p.string() +
                  "': not valid JSON: " + e.what());
    }
    if (!j.is_object() || !j.contains("eos_token_id")) continue;
    const nlohmann::json& e = j["eos_token_id"];
    for (const nlohmann::json& id : e.is_array() ? e : nlohmann::json::array({e}))
      if (id.is_number_integer()) out.insert(id.get<int64_t>());
  }
  return out;
}

int generate_hf(const GenerateArgs& a, std::ostream& out, std::ostream& err) {
  const DirConfig dc = read_dir_config(a.ckpt);
  if (dc.model_type != "gpt2") return generate_hf_decoder(a, dc, out, err);
  refuse_decoder_options_for_gpt(a, "'" + a.ckpt + "' is a GPT-2 directory");
  const fs::path dir(a.ckpt);
  const DirTokenizer tok = load_dir_tokenizer(dir);
  std::shared_ptr<nn::GPT> model = nn::load_hf_gpt2(a.ckpt);
  const nn::GPTConfig& config = model->config();
  if (tok.vocab_size() > config.vocab_size)
    throw Error("[generate] '" + dir.string() + "': the tokenizer has " +
                std::to_string(tok.vocab_size()) + " tokens but the model's vocab_size is " +
                std::to_string(config.vocab_size));
  std::vector<int64_t> ids;
  const bool has_prompt = a.has_prompt && !a.prompt.empty();
  if (has_prompt) ids = encode_prompt([&] { return tok.encode(a.prompt); });
  if (ids.empty()) ids = {tok.start_id()};
  model->eval();
  // The prompt as given (an unconditional sample starts from <|endoftext|>, which is not shown;
  // a character model's start, a newline, is).
  const std::string shown = has_prompt ? a.prompt : tok.bpe ? "" : tok.decode(ids[0]);
  stream_generation(
      *model, ids, shown, shown.empty() ? '\n' : shown.back(),
      [&](int64_t id) { return tok.decode(id); }, a, out, err);
  return 0;
}

ExportArgs parse_export_args(std::span<const std::string> args) {
  ExportArgs a;
  bool has_ckpt = false, has_out = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    std::string name = arg, value;
    bool inline_value = false;
    if (auto eq = arg.find('='); arg.starts_with("--") && eq != std::string::npos) {
      name = arg.substr(0, eq);
      value = arg.substr(eq + 1);
      inline_value = true;
    }
    if (name != "--ckpt" && name != "--out") {
      if (!arg.empty() && arg[0] == '-') throw FlagError("export: unknown option '" + name + "'");
      throw FlagError("export: unexpected argument '" + arg + "'");
    }
    if (!inline_value) {
      if (i + 1 >= args.size()) throw FlagError("export: " + name + " needs a value");
      value = args[++i];
    }
    if (value.empty())
      throw FlagError("export: invalid value '' for " + name + ": expected " +
                      (name == "--ckpt" ? "a checkpoint directory or .safetensors file"
                                        : "an output directory"));
    (name == "--ckpt" ? a.ckpt : a.out) = value;
    (name == "--ckpt" ? has_ckpt : has_out) = true;
  }
  if (!has_ckpt) throw FlagError("export: --ckpt DIR is required");
  if (!has_out) throw FlagError("export: --out DIR is required");
  return a;
}

int export_command(std::span<const std::string> args, std::ostream& out, std::ostream& err) {
  (void)err;
  const ExportArgs a = parse_export_args(args);
  std::error_code ec;
  const bool ckpt_is_dir = fs::is_directory(a.ckpt, ec);
  const std::string path = ckpt_is_dir ? (fs::path(a.ckpt) / "model.safetensors").string() : a.ckpt;
  if (!fs::exists(path, ec))
    throw Error("[export] no checkpoint '" + path +
                "' (train one with `attn train --out DIR`, then pass --ckpt DIR)");
  const fs::path ckpt_dir =
      fs::path(path).parent_path().empty() ? fs::path(".") : fs::path(path).parent_path();
  if (fs::exists(a.out, ec) && fs::equivalent(a.out, ckpt_dir, ec))
    throw Error("[export] --out '" + a.out +
                "' is the checkpoint's own directory: its model.safetensors would be replaced; "
                "choose another directory");
  // The checkpoint reader names `attn generate`, whose reading this is.
  auto as_export = [](const Error& e) {
    std::string m = e.what();
    if (m.starts_with("[generate]")) m = "[export]" + m.substr(10);
    return Error(m);
  };
  nn::GPTConfig config;
  std::shared_ptr<nn::GPT> model;
  std::string tokenizer_json;
  try {
    const Checkpoint ck = read_checkpoint(path, CheckpointUse::Generate);
    config = ck.config;
    model = checkpoint_model(ck, path);
    tokenizer_json = ck.tokenizer.to_json();
  } catch (const Error& e) {
    throw as_export(e);
  }
  nn::save_hf_gpt2(*model, a.out);
  io::write_file_atomic((fs::path(a.out) / kHfCharTokenizerFile).string(), tokenizer_json + "\n");
  out << "exported '" << path << "' to '" << a.out << "': config.json, model.safetensors, "
      << kHfCharTokenizerFile << " (Hugging Face GPT-2 layout; n_layer=" << config.n_layer
      << " n_head=" << config.n_head << " n_embd=" << config.n_embd
      << " block_size=" << config.block_size << " vocab_size=" << config.vocab_size << ")\n";
  return 0;
}

}  // namespace attn::tools

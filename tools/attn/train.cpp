// `attn train` and `attn generate` (see train.h): their flags, and the glue to attn::train.
#include "train.h"

#include <attn/attn.h>
#include <attn/data.h>
#include <attn/gpt.h>
#include <attn/hf_gpt2.h>
#include <attn/train.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <system_error>
#include <utility>
#include <vector>

#include "flags.h"
#include "hf_cmd.h"
#include "progress.h"

namespace attn::tools {
namespace {

namespace fs = std::filesystem;
using Args = std::span<const std::string>;
using train::kModelFile;

constexpr double kInf = std::numeric_limits<double>::infinity();

TrainFlagExtension& train_flag_extension() {
  static TrainFlagExtension extension;
  return extension;
}

// Progress: a bar on a terminal, else plain log lines every --log-interval steps (both drawn by
// ProgressBar, which counts the steps of this run). Evaluation lines go through message().
class BarProgress : public train::Progress {
 public:
  BarProgress(std::ostream& out, bool tty, int64_t log_interval)
      : out_(out), tty_(tty), log_interval_(log_interval) {}
  void begin(int64_t first, int64_t last) override {
    first_ = first;
    if (last > first) bar_.emplace(last - first, out_, tty_, log_interval_);
  }
  void message(const std::string& line) override {
    if (bar_)
      bar_->message(line);
    else
      out_ << line << "\n" << std::flush;
  }
  // After training step `iter` (0-based) is done.
  void step(int64_t iter, double loss, double lr, double tokens_per_s) override {
    if (!bar_) return;
    char head[64];
    std::snprintf(head, sizeof head, "loss %.4f | lr %.2e | ", loss, lr);
    bar_->update(iter + 1 - first_, head + format_rate(tokens_per_s) + " tok/s");
  }
  void end() override {
    if (bar_) bar_->finish();
  }

 private:
  std::ostream& out_;
  bool tty_;
  int64_t log_interval_, first_ = 0;
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

// --doc-separator as typed: \n, \t and \\ stand for a newline, a tab and a backslash (a shell
// argument rarely holds a newline). Any other backslash is a FlagError.
std::string unescape_separator(const std::string& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\') {
      out += s[i];
      continue;
    }
    const char c = i + 1 < s.size() ? s[++i] : '\0';
    if (c == 'n')
      out += '\n';
    else if (c == 't')
      out += '\t';
    else if (c == '\\')
      out += '\\';
    else
      throw FlagError("train: invalid value '" + s +
                      "' for --doc-separator: a backslash starts \\n, \\t or \\\\ only");
  }
  return out;
}

}  // namespace

TrainFlagExtension set_train_flag_extension(TrainFlagExtension extension) {
  std::swap(train_flag_extension(), extension);
  return extension;
}

// ---- train and generate options -----------------------------------------------------------------

TrainArgs parse_train_args(Args args) {
  std::vector<std::string> valued = {
      "n-layer",       "n-head",       "n-embd", "block-size",   "batch-size",
      "max-iters",     "lr",           "min-lr", "warmup-iters", "lr-decay-iters",
      "weight-decay",  "beta1",        "beta2",  "grad-clip",    "dropout",
      "eval-interval", "eval-iters",   "seed",   "threads",      "data",
      "out",           "log-interval", "zero",   "bucket-kib",   "on-nonfinite",
      "doc-separator"};
  const TrainFlagExtension& ext = train_flag_extension();
  valued.insert(valued.end(), ext.valued.begin(), ext.valued.end());
  Flags f("train", args, valued,
          {"bias", "no-bias", "resume", "no-progress", "context-parallel", "pack"});
  TrainArgs a;
  TrainOptions& o = a.options;
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
  o.zero = f.integer("zero", 0, 0, 1);
  o.bucket_kib = f.integer("bucket-kib", 1024, 1, int64_t(1) << 30);
  const std::string on_nonfinite = f.str("on-nonfinite", "stop");
  if (on_nonfinite == "stop")
    o.on_nonfinite = TrainOptions::OnNonFinite::Stop;
  else if (on_nonfinite == "skip")
    o.on_nonfinite = TrainOptions::OnNonFinite::Skip;
  else
    f.bad("on-nonfinite", on_nonfinite, "stop or skip");
  if (ext.hooks) a.hooks = ext.hooks(f);
  o.data = f.str("data", "");
  if (f.has("data") && o.data.empty()) f.bad("data", "", "a file name");
  o.out = f.str("out", "out");
  if (o.out.empty()) f.bad("out", "", "a directory name");
  o.resume = f.has("resume");
  a.no_progress = f.has("no-progress");
  o.context_parallel = f.has("context-parallel");
  o.pack = f.has("pack");
  if (f.has("doc-separator")) {
    if (!o.pack) throw FlagError("train: --doc-separator is given without --pack");
    o.doc_separator = unescape_separator(f.str("doc-separator", ""));
    if (o.doc_separator.empty()) f.bad("doc-separator", "", "a non-empty string");
  }
  if (o.pack && o.context_parallel)
    throw FlagError(
        "train: --pack and --context-parallel cannot be combined (ring attention has no document "
        "boundaries)");
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
  return a;
}

GenerateArgs parse_generate_args(Args args) {
  Flags f("generate", args,
          {"ckpt", "prompt", "max-new-tokens", "temperature", "top-k", "seed", "threads",
           "kv-dtype", "dtype", "window-length", "sink-tokens"},
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
  a.dtype = parse_model_dtype(f);
  if (f.has("kv-dtype")) {
    a.kv_dtype = f.str("kv-dtype", "");
    if (a.kv_dtype != "float32" && a.kv_dtype != "bfloat16" && a.kv_dtype != "float16" &&
        a.kv_dtype != "int8")
      f.bad("kv-dtype", a.kv_dtype, "float32, bfloat16, float16 or int8");
    if (!a.options.use_cache)
      throw FlagError("generate: --kv-dtype is a cache: it cannot be combined with --no-cache");
  }
  a.window_length = f.integer("window-length", 0, 0);
  a.sink_tokens = f.integer("sink-tokens", 4, 0);
  if (f.has("sink-tokens") && !f.has("window-length"))
    throw FlagError("generate: --sink-tokens needs --window-length (the cache to evict from)");
  if (a.window_length > 0 && a.sink_tokens + 2 > a.window_length)
    throw FlagError("generate: --window-length " + std::to_string(a.window_length) +
                    " must leave room for 2 tokens after --sink-tokens " +
                    std::to_string(a.sink_tokens));
  if (a.window_length > 0 && !a.options.use_cache)
    throw FlagError(
        "generate: --window-length evicts from the cache: it cannot be combined with "
        "--no-cache");
  return a;
}

// ---- attn train ---------------------------------------------------------------------------------

int train_command(Args args, std::ostream& out, std::ostream& err) {
  const TrainArgs a = parse_train_args(args);
  keep_freed_memory();
  // (An error ends the bar's line when `bar` goes: the message starts on a line of its own.)
  BarProgress bar(out, !a.no_progress && is_tty(out), a.options.log_interval);
  train::train(a.options, out, a.hooks, &bar);
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
  refuse_decoder_options_for_gpt(a, "'" + path + "' is a GPT checkpoint");
  const Checkpoint ck = read_checkpoint(path, CheckpointUse::Generate);
  generate_from_checkpoint(ck, path, a, out, err);
  return 0;
}

void refuse_decoder_options_for_gpt(const GenerateArgs& a, const std::string& model) {
  if (a.dtype != Dtype::Float32) {
    throw Error("[generate] --dtype " + dtype_name(a.dtype).substr(6) +  // "torch.bfloat16"
                ": GPT checkpoints compute in float32 (bfloat16 and float16 need a Llama / Qwen / "
                "Gemma directory); " +
                model);
  }
  if (a.window_length > 0)
    throw Error(
        "[generate] --window-length needs a Llama / Qwen / Gemma directory (rotary "
        "positions); " +
        model + ", whose learned positions end at its block");
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
  auto on_token = [&](const Tensor& column) {
    // Bytes as they come: a character split over two tokens is completed by the next one.
    const std::string s = decode(column.contiguous().data_ptr<int64_t>()[0]);
    out << s << std::flush;
    if (!s.empty()) last = s.back();
    ++produced;
  };
  if (a.kv_dtype.empty()) {
    model.generate(idx, g, &gen, on_token);
  } else {
    const KVCacheDtype d = a.kv_dtype == "float32"    ? KVCacheDtype::Float32
                           : a.kv_dtype == "bfloat16" ? KVCacheDtype::BFloat16
                           : a.kv_dtype == "float16"  ? KVCacheDtype::Float16
                                                      : KVCacheDtype::Int8;
    if (int64_t(ids.size()) + g.max_new_tokens > config.block_size)
      throw Error("[generate] --kv-dtype: the prompt's " + std::to_string(ids.size()) +
                  " tokens plus --max-new-tokens " + std::to_string(g.max_new_tokens) +
                  " exceed the model's block of " + std::to_string(config.block_size) +
                  " (the paged cache does not crop the context; generate fewer tokens)");
    model.generate_paged({ids}, g, &gen, d, 16, on_token);
  }
  double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  if (last != '\n') out << "\n";
  out.flush();
  char line[160];
  std::snprintf(line, sizeof line, "generate: tokens=%lld ms=%.2f tokens_per_s=%.1f cache=%s",
                (long long)produced, ms, ms > 0 ? double(produced) * 1000.0 / ms : 0.0,
                !a.kv_dtype.empty() ? ("paged-" + a.kv_dtype).c_str()
                : g.use_cache       ? "on"
                                    : "off");
  err << line << "\n" << std::flush;
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

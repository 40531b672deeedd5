// attn::train::train: the loop of `attn train` (see include/attn/train.h).
#include <attn/data.h>
#include <attn/distributed.h>
#include <attn/gpt.h>
#include <attn/io.h>
#include <attn/ops.h>
#include <attn/optim.h>
#include <attn/plot.h>
#include <attn/train.h>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <optional>
#include <string>
#include <system_error>
#include <thread>
#include <utility>
#include <vector>

#include "../io/file_internal.h"
#include "train_internal.h"

namespace attn::train {

namespace fs = std::filesystem;
using detail::json;
using detail::strf;

// ---- options ------------------------------------------------------------------------------------

void TrainOptions::validate() const {
  auto bad = [](const std::string& flag, const std::string& value, const std::string& want) {
    throw Error("[train] invalid value " + value + " for --" + flag + ": expected " + want);
  };
  const int64_t kMaxSize = int64_t(1) << 20;  // far beyond anything that fits in memory
  auto integer = [&](const char* flag, int64_t v, int64_t lo, int64_t hi) {
    if (v < lo || v > hi)
      bad(flag, std::to_string(v),
          hi == std::numeric_limits<int64_t>::max()
              ? "an integer >= " + std::to_string(lo)
              : "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  };
  const int64_t kNoMax = std::numeric_limits<int64_t>::max();
  integer("n-layer", model.n_layer, 1, kMaxSize);
  integer("n-head", model.n_head, 1, kMaxSize);
  integer("n-embd", model.n_embd, 1, kMaxSize);
  integer("block-size", model.block_size, 1, kMaxSize);
  integer("batch-size", batch_size, 1, kMaxSize);
  integer("max-iters", max_iters, 1, kNoMax);
  integer("warmup-iters", warmup_iters, 0, kNoMax);
  integer("lr-decay-iters", lr_decay_iters, 1, kNoMax);
  integer("eval-interval", eval_interval, 1, kNoMax);
  integer("eval-iters", eval_iters, 1, kMaxSize);
  integer("log-interval", log_interval, 1, kNoMax);
  integer("threads", threads, 0, 4096);
  integer("zero", zero, 0, 1);
  integer("bucket-kib", bucket_kib, 1, int64_t(1) << 30);
  auto number = [&](const char* flag, double v, double lo, bool lo_open, double hi, bool hi_open,
                    const char* want) {
    if (!std::isfinite(v) || (lo_open ? v <= lo : v < lo) || (hi_open ? v >= hi : v > hi))
      bad(flag, strf("%g", v), want);
  };
  const double kInf = std::numeric_limits<double>::infinity();
  number("dropout", model.dropout, 0, false, 1, true, "a number in [0, 1)");
  number("lr", lr, 0, true, kInf, false, "a number > 0");
  number("min-lr", min_lr, 0, false, kInf, false, "a number >= 0");
  number("weight-decay", weight_decay, 0, false, kInf, false, "a number >= 0");
  number("beta1", beta1, 0, false, 1, true, "a number in [0, 1)");
  number("beta2", beta2, 0, false, 1, true, "a number in [0, 1)");
  number("grad-clip", grad_clip, 0, false, kInf, false, "a number >= 0");
  if (out.empty()) bad("out", "''", "a directory name");
  if (context_parallel && model.dropout > 0)
    throw Error(
        "[train] --context-parallel needs --dropout 0 (ring attention applies no dropout to the "
        "attention weights)");
  if (pack && context_parallel)
    throw Error(
        "[train] --pack and --context-parallel cannot be combined (ring attention has no "
        "document boundaries)");
  if (pack && doc_separator.empty()) bad("doc-separator", "''", "a non-empty string");
  if (model.n_embd % model.n_head != 0)
    throw Error("[train] --n-embd " + std::to_string(model.n_embd) +
                " is not divisible by --n-head " + std::to_string(model.n_head));
  if (lr_decay_iters <= warmup_iters)
    throw Error("[train] --lr-decay-iters " + std::to_string(lr_decay_iters) +
                " must be greater than --warmup-iters " + std::to_string(warmup_iters));
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

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// The default Progress: plain lines.
class LogProgress : public Progress {
 public:
  LogProgress(std::ostream& out, int64_t log_interval) : out_(out), every_(log_interval) {}
  void begin(int64_t first, int64_t last) override { first_ = first, last_ = last; }
  void message(const std::string& line) override { out_ << line << "\n" << std::flush; }
  void step(int64_t step, double loss, double lr, double tokens_per_s) override {
    const int64_t done = step + 1 - first_, total = last_ - first_;
    if (done % every_ == 0 || done == total)
      out_ << strf("step %lld/%lld loss %.4f | lr %.2e | %.0f tok/s", (long long)done,
                   (long long)total, loss, lr, tokens_per_s)
           << "\n"
           << std::flush;
  }

 private:
  std::ostream& out_;
  int64_t every_, first_ = 0, last_ = 0;
};

// Installs TrainHooks::inside_write for the lifetime of the guard.
class WriteHook {
 public:
  explicit WriteHook(const std::function<void(const std::string&)>& hook) : on_(bool(hook)) {
    if (on_) previous_ = io::detail::set_write_hook(hook);
  }
  ~WriteHook() {
    if (on_) io::detail::set_write_hook(std::move(previous_));
  }
  WriteHook(const WriteHook&) = delete;
  WriteHook& operator=(const WriteHook&) = delete;

 private:
  bool on_;
  std::function<void(const std::string&)> previous_;
};

// loss.png: train and validation loss of every evaluation.
void save_loss_plot(const std::vector<TrainEval>& history, const std::string& path) {
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
  plot::save(chart, path);
}

}  // namespace

// ---- the loop -----------------------------------------------------------------------------------

TrainResult train(const TrainOptions& options, std::ostream& out_all, const TrainHooks& hooks,
                  Progress* progress) {
  using detail::bad_loss_str;
  using detail::loss_str;
  options.validate();
  TrainOptions o = options;
  // Under mpirun: data parallel over the world's ranks; rank 0 alone prints and writes files.
  distributed::Communicator& comm = distributed::world();
  const detail::Shard shard{comm.rank(), comm.size(), o.context_parallel};
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
  int64_t documents = 0;
  if (o.pack) {
    // A separator with a character the text lacks cannot occur in it.
    std::vector<int64_t> sep;
    try {
      sep = tok.encode(o.doc_separator);
    } catch (const Error&) {
    }
    if (!sep.empty()) documents = ds.set_document_separator(sep);
    if (documents <= 2)
      throw Error("[train] --pack: the --doc-separator " + json(o.doc_separator).dump() +
                  " never occurs in '" + data_path +
                  "', so there is one document: choose the separator of its documents (\\n "
                  "stands for a newline)");
  }
  nn::GPTConfig config = o.model;
  config.vocab_size = tok.vocab_size();
  config.validate("train");

  const fs::path out_dir = o.out;
  const std::string ckpt_path = (out_dir / kCkptFile).string();
  std::optional<Checkpoint> resumed;
  if (o.resume) resumed = detail::load_resume(ckpt_path, o, tok);
  if (shard.world > 1) {
    // The ranks must agree on everything that shapes the computation before they compute.
    json agreed = detail::train_config_json(o);
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
  WriteHook write_hook(hooks.inside_write);

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
    write_checkpoint(o.out, model.state_dict(), optim_state,
                     CheckpointInfo{config, &tok, &o, step, rng_state, history});
  };

  LogProgress log_progress(out, o.log_interval);
  std::ostream null_out(nullptr);
  LogProgress no_progress(null_out, o.log_interval);
  Progress& report = shard.rank != 0 ? no_progress : progress ? *progress : log_progress;
  report.begin(start, o.max_iters);
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
  if (o.pack)
    report.message(strf("packed: %lld documents, each ending with %s; attention stays inside each",
                        (long long)documents, json(o.doc_separator).dump().c_str()));
  for (const std::string& note : start_notes) report.message(note);
  if (start > 0)
    report.message("resuming from step " + std::to_string(start) + " of '" + ckpt_path + "'");
  const nn::NamedTensors named_params = model.named_parameters();
  if (hooks.at_start) hooks.at_start(shard.rank, model);
  std::vector<int64_t> skipped;

  const std::vector<Tensor> params = model.parameters();
  const double tokens_per_step =
      double((shard.context ? 1 : shard.world) * o.batch_size * o.model.block_size);
  std::vector<double> step_ms, comm_ms;
  using Clock = std::chrono::steady_clock;
  for (int64_t iter = start;; ++iter) {
    if (iter % o.eval_interval == 0 || iter == o.max_iters) {
      std::vector<uint8_t> rng_before = gen.get_state();
      auto [train_loss, val_loss] = detail::estimate_loss(model, ds, o, gen, shard);
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

    if (hooks.before_step) hooks.before_step(shard.rank, iter, model);
    auto t0 = Clock::now();
    double lr = optim::cosine_lr(iter, o.lr, o.min_lr, o.warmup_iters, o.lr_decay_iters);
    (zero_opt ? zero_opt->set_lr(lr) : opt.set_lr(lr));
    nn::GPT::Output fw =
        shard.forward(model, shard.batch(ds, true, o.batch_size, o.model.block_size, gen));
    if (hooks.after_forward) hooks.after_forward(shard.rank, iter, fw.loss);
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
    if (hooks.after_backward) hooks.after_backward(shard.rank, iter, named_params);
    // Clipping with one optimizer: the total gradient norm first. A finite norm means that every
    // gradient is finite (inf or NaN in any makes it inf or NaN), so the step check reads the
    // gradients only when it is not (or when it overflowed: then the check finds them finite).
    const bool clip = !zero_opt && o.grad_clip > 0;
    const double grad_norm = clip ? optim::total_grad_norm(params) : 0.0;
    if (const detail::StepFault fault = detail::check_step(named_params, loss, zero_opt.has_value(),
                                                           comm, clip && std::isfinite(grad_norm));
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
  report.end();
  if (!skipped.empty()) {
    std::string list;
    for (std::size_t i = 0; i < skipped.size() && i < 20; ++i)
      list += (i ? ", " : "") + std::to_string(skipped[i]);
    if (skipped.size() > 20) list += ", ...";
    out << strf("skipped %zu step%s whose loss or gradients were not finite: %s", skipped.size(),
                skipped.size() == 1 ? "" : "s", list.c_str())
        << "\n";
  }
  if (shard.rank == 0) save_loss_plot(history, (out_dir / kLossFile).string());

  TrainResult result;
  result.iters = o.max_iters;
  result.ms_per_iter = median(step_ms);
  result.tokens_per_s =
      result.ms_per_iter > 0 ? tokens_per_step * 1000.0 / result.ms_per_iter : 0.0;
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
  result.train_loss = last.train_loss;
  result.val_loss = last.val_loss;
  out << strf("done: iters=%lld ms_per_iter=%.2f train_loss=%.4f val_loss=%.4f tokens_per_s=%.0f",
              (long long)o.max_iters, result.ms_per_iter, last.train_loss, last.val_loss,
              result.tokens_per_s)
      << "\n"
      << std::flush;
  result.history = std::move(history);
  result.skipped = std::move(skipped);
  return result;
}

}  // namespace attn::train

// The command line of `attn`: the input split at NUL bytes into arguments (at most 64) and given to
// check_command_line (tools/attn/main.cpp), which dispatches like the real tool (help, version,
// unknown commands) but only parses and validates the command's flags: nothing is trained, drawn or
// written. When the first argument names a command, its parser also runs on the rest directly and
// must agree; what it accepts satisfies the documented constraints. Commands: walkthrough, train,
// generate, heatmap, plot (tools/attn/plot_cmd.h's parse_plot_args), export (hf_cmd.h), chat
// (chat_cmd.h).
#include <cmath>
#include <sstream>
#include <vector>

#include "fuzz_util.h"

#define ATTN_CLI_NO_MAIN
#include "../tools/attn/main.cpp"

namespace {

using attn::tools::Args;
using attn::tools::FlagError;
using attn::tools::UsageError;

// Runs `f`; true if it returned, false if it threw one of the expected errors.
template <typename F>
bool accepted(F&& f) {
  try {
    f();
    return true;
  } catch (const UsageError&) {
  } catch (const FlagError&) {
  } catch (const attn::Error&) {
  }
  return false;
}

void check_train(const attn::tools::TrainArgs& a) {
  const attn::tools::TrainOptions& o = a.options;
  FUZZ_CHECK(o.model.n_layer >= 1 && o.model.n_head >= 1 && o.model.n_embd >= 1);
  FUZZ_CHECK(o.model.block_size >= 1 && o.batch_size >= 1 && o.max_iters >= 1);
  FUZZ_CHECK(o.model.n_embd % o.model.n_head == 0);
  FUZZ_CHECK(o.model.dropout >= 0.0 && o.model.dropout < 1.0);
  FUZZ_CHECK(o.lr > 0 && o.min_lr >= 0 && o.weight_decay >= 0 && o.grad_clip >= 0);
  FUZZ_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1);
  FUZZ_CHECK(o.lr_decay_iters > o.warmup_iters && o.eval_interval >= 1 && o.eval_iters >= 1);
  FUZZ_CHECK(o.threads >= 0 && o.threads <= 4096 && !o.out.empty());
  using Policy = attn::tools::TrainOptions::OnNonFinite;
  FUZZ_CHECK(o.on_nonfinite == Policy::Stop || o.on_nonfinite == Policy::Skip);
  // What the flags accept, the library accepts (the fault-injection flags of attn_debug are not
  // part of `attn`: unknown options here).
  o.validate();
}

void check_generate(const attn::tools::GenerateArgs& a) {
  FUZZ_CHECK(!a.ckpt.empty());
  FUZZ_CHECK(a.options.max_new_tokens >= 0 && a.options.top_k >= 0);
  FUZZ_CHECK(a.options.temperature > 0 && std::isfinite(a.options.temperature));
  FUZZ_CHECK(a.threads >= 0 && a.threads <= 4096);
  FUZZ_CHECK(attn::is_floating_point(a.dtype));
}

void check_heatmap(const attn::tools::HeatmapOptions& o) {
  FUZZ_CHECK(!o.path.empty());
  FUZZ_CHECK(o.heads >= 1 && o.d_out >= 1 && o.d_out <= 256 && o.d_out % o.heads == 0);
  FUZZ_CHECK(!o.tokens.empty() && o.tokens.size() <= 512);
  FUZZ_CHECK(o.mechanism == "multihead" || o.heads == 1);
}

void check_plot(const attn::tools::PlotOptions& o) {
  FUZZ_CHECK(!o.spec.empty() && !o.out.empty());
  for (const auto& size : {o.width, o.height}) FUZZ_CHECK(!size || (*size >= 64 && *size <= 8192));
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  attn_fuzz::init_single_thread();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  std::vector<std::string> args;
  std::string cur;
  for (std::size_t i = 0; i < size && args.size() < 64; ++i) {
    if (data[i] == 0) {
      args.push_back(std::move(cur));
      cur.clear();
    } else {
      cur += char(data[i]);
    }
  }
  if (args.size() < 64 && (size == 0 || data[size - 1] != 0)) args.push_back(std::move(cur));
  const Args all(args);

  std::ostringstream out;
  const bool ok = accepted([&] { FUZZ_CHECK(attn::tools::check_command_line(all, out) == 0); });
  if (all.empty()) FUZZ_CHECK(!ok);
  if (all.empty() || !attn::tools::find_command(all[0])) return 0;

  // The command's own parser on the rest agrees (unless --help / -h made dispatch print help).
  const Args rest = all.subspan(1);
  for (const std::string& a : rest)
    if (a == "-h" || a == "--help") {
      FUZZ_CHECK(ok && !out.str().empty());
      return 0;
    }
  bool direct = true;
  const std::string& cmd = all[0];
  if (cmd == "train") {
    direct = accepted([&] { check_train(attn::tools::parse_train_args(rest)); });
  } else if (cmd == "generate") {
    direct = accepted([&] { check_generate(attn::tools::parse_generate_args(rest)); });
  } else if (cmd == "heatmap") {
    direct = accepted([&] { check_heatmap(attn::tools::parse_heatmap_args(rest)); });
  } else if (cmd == "walkthrough") {
    direct = accepted([&] { attn::tools::parse_walkthrough_args(rest); });
  } else if (cmd == "plot") {
    direct = accepted([&] { check_plot(attn::tools::parse_plot_args(rest)); });
  } else if (cmd == "export") {
    direct = accepted([&] {
      const attn::tools::ExportArgs e = attn::tools::parse_export_args(rest);
      FUZZ_CHECK(!e.ckpt.empty() && !e.out.empty());
    });
  } else if (cmd == "chat") {
    direct = accepted([&] {
      const attn::tools::ChatArgs c = attn::tools::parse_chat_args(rest);
      const auto& o = c.options;
      FUZZ_CHECK(!c.ckpt.empty() && o.max_new_tokens >= 1 && o.top_k >= 0);
      FUZZ_CHECK(attn::is_floating_point(c.dtype));
      FUZZ_CHECK(o.temperature >= 0 && std::isfinite(o.temperature));
      FUZZ_CHECK(o.top_p > 0 && o.top_p <= 1 && o.min_p >= 0 && o.min_p <= 1);
      FUZZ_CHECK(o.repetition_penalty > 0 && std::isfinite(o.repetition_penalty));
      o.validate("fuzz_cli");  // what the sampler accepts
    });
  } else {
    FUZZ_CHECK(false && "a command without a parser here: add it");
  }
  FUZZ_CHECK(direct == ok);
  return 0;
}

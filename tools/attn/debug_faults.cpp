// The fault-injection flags of `attn train`, for tests only: linked into the test-only attn_debug
// (CMake target attn_debug, built with the tests) and into the test programs, never into `attn`.
// When the program starts, they are added to `attn train` (set_train_flag_extension) and turned
// into attn::train::TrainHooks:
//
//   --debug-nan-at STEP      overwrites the token embedding with NaN just before training step
//                            STEP, so that the non-finite checks can be exercised.
//   --debug-fault KIND:RANK:STEP
//                            makes rank RANK raise an error, die (SIGKILL) or hang just before
//                            step STEP (KIND raise, kill or hang), so that the distributed fault
//                            handling can be exercised.
//   --debug-nonfinite KIND:STEP[:PARAM][@RANK]
//                            (KIND loss-nan, loss-inf, grad-nan, grad-inf) multiplies the loss of
//                            step STEP by NaN or inf before the backward, or sets the first value
//                            of the gradient of PARAM (a state_dict name; default the last
//                            parameter) to NaN or inf after it (and after the data-parallel
//                            all-reduce), on every rank or on rank RANK only, so that
//                            --on-nonfinite can be exercised without poisoning the weights.
//   --debug-slow-save MS     pauses every file write for MS milliseconds halfway through its
//                            temporary file (scripts/faults.sh kills the run there).
#include <attn/autograd.h>
#include <attn/common.h>
#include <attn/train.h>

#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <system_error>
#include <thread>

#include "flags.h"
#include "train.h"

namespace attn::tools {
namespace {

// --debug-nonfinite KIND:STEP[:PARAM][@RANK].
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

// --debug-fault KIND:RANK:STEP.
void inject_fault(const std::string& spec, int rank, int64_t step) {
  char kind[16] = {0};
  int r = -1;
  long long at = -1;
  if (std::sscanf(spec.c_str(), "%15[a-z]:%d:%lld", kind, &r, &at) != 3)
    throw Error("[train] --debug-fault expects raise|kill|hang:RANK:STEP, got '" + spec + "'");
  if (r != rank || at != step) return;
  const std::string k = kind;
  if (k == "raise")
    throw Error("[train] rank " + std::to_string(rank) + ": injected failure at step " +
                std::to_string(at) + " (--debug-fault)");
  if (k == "kill") std::raise(SIGKILL);
  if (k == "hang")
    for (;;) std::this_thread::sleep_for(std::chrono::seconds(1));
  throw Error("[train] --debug-fault: unknown kind '" + k + "'");
}

train::TrainHooks debug_hooks(const Flags& f) {
  train::TrainHooks h;
  const int64_t nan_at = f.integer("debug-nan-at", -1, 0);
  const std::string fault = f.str("debug-fault", "");
  if (nan_at >= 0 || !fault.empty())
    h.before_step = [nan_at, fault](int rank, int64_t step, nn::GPT& model) {
      if (!fault.empty()) inject_fault(fault, rank, step);
      if (step == nan_at) {
        NoGradGuard no_grad;
        model.wte->weight.fill_(std::numeric_limits<double>::quiet_NaN());
      }
    };
  if (f.has("debug-nonfinite")) {
    auto spec =
        std::make_shared<NonFiniteSpec>(parse_nonfinite_spec(f.str("debug-nonfinite", ""), f));
    auto now = [spec](int rank, int64_t step) {
      return step == spec->step && (spec->rank < 0 || spec->rank == rank);
    };
    if (spec->in_loss) {
      h.after_forward = [spec, now](int rank, int64_t step, Tensor& loss) {
        if (now(rank, step)) loss = loss * spec->value;
      };
    } else {
      h.at_start = [spec](int, nn::GPT& model) {
        const nn::NamedTensors params = model.named_parameters();
        if (spec->param.empty()) spec->param = params.back().first;
        bool known = false;
        for (const auto& np : params) known = known || np.first == spec->param;
        if (!known)
          throw Error("[train] --debug-nonfinite: the model has no parameter '" + spec->param +
                      "'");
      };
      h.after_backward = [spec, now](int rank, int64_t step, const nn::NamedTensors& params) {
        if (!now(rank, step)) return;
        for (const auto& [name, p] : params)
          if (name == spec->param) p.grad().data_ptr<float>()[0] = float(spec->value);
      };
    }
  }
  if (const int64_t ms = f.integer("debug-slow-save", 0, 0, 3'600'000); ms > 0)
    h.inside_write = [ms](const std::string&) {
      std::this_thread::sleep_for(std::chrono::milliseconds(ms));
    };
  return h;
}

// Adds the flags when the program starts.
[[maybe_unused]] const bool registered = [] {
  set_train_flag_extension(
      {{"debug-nan-at", "debug-fault", "debug-nonfinite", "debug-slow-save"}, debug_hooks});
  return true;
}();

}  // namespace
}  // namespace attn::tools

// Checks of non-finite values in attn::train: a step's loss, gradients and weights.
#include <attn/distributed.h>
#include <attn/train.h>

#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "../ops/finite_ops.h"
#include "train_internal.h"

namespace attn::train::detail {

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

std::string loss_str(double v) { return strf("%.4f", v); }
std::string bad_loss_str(double v) { return std::isnan(v) ? "nan" : strf("%g", v); }

namespace {

using attn::detail::count_nonfinite;
using attn::detail::NonFiniteCount;

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

}  // namespace

std::string first_nonfinite(const nn::NamedTensors& named) {
  for (const auto& [name, t] : named) {
    const NonFiniteCount c = count_nonfinite(t);
    if (c.count > 0) return "'" + name + "' (" + describe_nonfinite(c, t.shape()) + ")";
  }
  return "";
}

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

}  // namespace attn::train::detail

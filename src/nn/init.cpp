// torch.nn.init: uniform_, normal_, zeros_, ones_, constant_, calculate_gain, kaiming_* (with mode
// and nonlinearity), xavier_*, trunc_normal_; and functional::silu, the one activation of torch.nn
// without its own kernel here.
// The arithmetic is torch 1.13's (doubles, then one draw through uniform_ / normal_).
#include <attn/autograd.h>
#include <attn/nn.h>
#include <attn/ops.h>

#include <cmath>

#include "../ops/layer_ops.h"
#include "../tensor/internal.h"

namespace attn::nn::init {

using detail::fail;

namespace {

void check_defined(const Tensor& t, const char* fn) {
  if (!t.defined()) fail(fn, "undefined tensor");
}

// torch.nn.init._calculate_fan_in_and_fan_out
std::pair<int64_t, int64_t> fan_in_out(const Tensor& t, const char* fn) {
  if (t.dim() < 2)
    fail(fn, "fan in and fan out can not be computed for tensor ", shape_str(t.shape()),
         " with fewer than 2 dimensions");
  int64_t receptive = 1;
  for (int64_t d = 2; d < t.dim(); ++d) receptive *= t.size(d);
  return {t.size(1) * receptive, t.size(0) * receptive};
}

// torch.nn.init._calculate_correct_fan
int64_t correct_fan(const Tensor& t, const std::string& mode, const char* fn) {
  if (mode != "fan_in" && mode != "fan_out")
    fail(fn, "Mode ", mode, " not supported, please use one of fan_in, fan_out");
  auto [fan_in, fan_out] = fan_in_out(t, fn);
  return mode == "fan_in" ? fan_in : fan_out;
}

thread_local int skip_depth = 0;  // live SkipInitGuards on this thread

}  // namespace

SkipInitGuard::SkipInitGuard() { ++skip_depth; }
SkipInitGuard::~SkipInitGuard() { --skip_depth; }
bool SkipInitGuard::active() { return skip_depth > 0; }

Tensor& uniform_(Tensor& t, double a, double b, Generator* gen) {
  NoGradGuard no_grad;  // torch.nn.init runs under torch.no_grad()
  check_defined(t, "init.uniform_");
  if (SkipInitGuard::active()) return t;
  return attn::uniform_(t, a, b, gen);
}

Tensor& normal_(Tensor& t, double mean, double std, Generator* gen) {
  NoGradGuard no_grad;  // torch.nn.init runs under torch.no_grad()
  check_defined(t, "init.normal_");
  if (SkipInitGuard::active()) return t;
  return attn::normal_(t, mean, std, gen);
}

Tensor& zeros_(Tensor& t) {
  NoGradGuard no_grad;  // torch.nn.init runs under torch.no_grad()
  check_defined(t, "init.zeros_");
  if (SkipInitGuard::active()) return t;
  return t.fill_(0.0);
}

Tensor& ones_(Tensor& t) {
  NoGradGuard no_grad;  // torch.nn.init runs under torch.no_grad()
  check_defined(t, "init.ones_");
  if (SkipInitGuard::active()) return t;
  return t.fill_(1.0);
}

Tensor& kaiming_uniform_(Tensor& t, double a, Generator* gen) {
  return kaiming_uniform_(t, a, "fan_in", "leaky_relu", gen);  // torch's defaults
}

Tensor& xavier_uniform_(Tensor& t, double gain, Generator* gen) {
  NoGradGuard no_grad;  // torch.nn.init runs under torch.no_grad()
  const char* fn = "init.xavier_uniform_";
  check_defined(t, fn);
  auto [fan_in, fan_out] = fan_in_out(t, fn);
  if (t.numel() == 0 || SkipInitGuard::active()) return t;
  const double std = gain * std::sqrt(2.0 / double(fan_in + fan_out));
  const double a = std::sqrt(3.0) * std;
  return attn::uniform_(t, -a, a, gen);
}

Tensor& constant_(Tensor& t, double value) {
  NoGradGuard no_grad;
  check_defined(t, "init.constant_");
  if (SkipInitGuard::active()) return t;
  return t.fill_(value);
}

double calculate_gain(const std::string& nonlinearity, std::optional<double> param) {
  static const char* linear[] = {"linear",           "conv1d",           "conv2d",
                                 "conv3d",           "conv_transpose1d", "conv_transpose2d",
                                 "conv_transpose3d", "sigmoid"};
  for (const char* name : linear)
    if (nonlinearity == name) return 1.0;
  if (nonlinearity == "tanh") return 5.0 / 3;
  if (nonlinearity == "relu") return std::sqrt(2.0);
  if (nonlinearity == "leaky_relu") {
    const double slope = param ? *param : 0.01;
    return std::sqrt(2.0 / (1 + std::pow(slope, 2)));
  }
  if (nonlinearity == "selu") return 3.0 / 4;
  fail("init.calculate_gain", "Unsupported nonlinearity ", nonlinearity);
}

Tensor& kaiming_uniform_(Tensor& t, double a, const std::string& mode,
                         const std::string& nonlinearity, Generator* gen) {
  NoGradGuard no_grad;
  const char* fn = "init.kaiming_uniform_";
  check_defined(t, fn);
  if (t.numel() == 0) return t;  // torch warns and does nothing
  const int64_t fan = correct_fan(t, mode, fn);
  const double gain = calculate_gain(nonlinearity, a);
  const double std = gain / std::sqrt(double(fan));
  const double bound = std::sqrt(3.0) * std;
  if (SkipInitGuard::active()) return t;
  return attn::uniform_(t, -bound, bound, gen);
}

Tensor& kaiming_normal_(Tensor& t, double a, const std::string& mode,
                        const std::string& nonlinearity, Generator* gen) {
  NoGradGuard no_grad;
  const char* fn = "init.kaiming_normal_";
  check_defined(t, fn);
  if (t.numel() == 0) return t;
  const int64_t fan = correct_fan(t, mode, fn);
  const double gain = calculate_gain(nonlinearity, a);
  const double std = gain / std::sqrt(double(fan));
  if (SkipInitGuard::active()) return t;
  return attn::normal_(t, 0.0, std, gen);
}

Tensor& xavier_normal_(Tensor& t, double gain, Generator* gen) {
  NoGradGuard no_grad;
  const char* fn = "init.xavier_normal_";
  check_defined(t, fn);
  auto [fan_in, fan_out] = fan_in_out(t, fn);
  const double std = gain * std::sqrt(2.0 / double(fan_in + fan_out));
  if (SkipInitGuard::active()) return t;
  return attn::normal_(t, 0.0, std, gen);
}

Tensor& trunc_normal_(Tensor& t, double mean, double std, double a, double b, Generator* gen) {
  NoGradGuard no_grad;
  const char* fn = "init.trunc_normal_";
  check_defined(t, fn);
  if (!(std > 0)) fail(fn, "std must be positive, got ", std);
  if (!(a < b)) fail(fn, "expects a < b, got a=", a, " and b=", b);
  if (SkipInitGuard::active()) return t;
  // Inverse-CDF sampling: uniform over [2 cdf(a) - 1, 2 cdf(b) - 1], then erfinv.
  auto cdf = [](double x) { return (1.0 + std::erf(x / std::sqrt(2.0))) / 2.0; };
  const double l = cdf((a - mean) / std);
  const double u = cdf((b - mean) / std);
  attn::uniform_(t, 2 * l - 1, 2 * u - 1, gen);
  t.erfinv_();
  t.mul_(Scalar(std * std::sqrt(2.0)));
  t.add_(Scalar(mean));
  return t.copy_(
      attn::minimum(attn::maximum(t, attn::full({}, Scalar(a))), attn::full({}, Scalar(b))));
}

}  // namespace attn::nn::init

namespace attn::nn::functional {

Tensor silu(const Tensor& x) {
  if (!x.defined()) detail::fail("silu", "undefined tensor argument");
  if (Tensor y = detail::silu_fused(x); y.defined()) return y;  // one pass
  if (is_reduced_float(x.dtype()))  // computed in float32, rounded once (detail::widen)
    return silu(detail::widen(x)).to(x.dtype());
  if (x.dtype() != Dtype::Float32)
    detail::fail("silu", "expects float32, got ", detail::tensor_desc(x));
  return x * x.sigmoid();
}

}  // namespace attn::nn::functional

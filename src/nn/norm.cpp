// LayerNorm, GELU and cross-entropy: one fused kernel each way, recorded as one autograd node.
//
// The element loops are plain C++ compiled three times (AVX-512, AVX2+FMA, baseline) with
// target_clones; the library itself is built for baseline x86-64. exp and erfc are evaluated by
// branch-free polynomials (backend/cpu/vmath.h) so that those loops vectorise.
#include <attn/autograd.h>
#include <attn/nn.h>
#include <attn/ops.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "../backend/cpu/threads.h"
#include "../backend/cpu/vmath.h"
#include "../tensor/internal.h"
#include "fused.h"

namespace attn::nn {

using detail::fail;
namespace vm = kernels::vmath;

namespace {

// Rows x cols problems smaller than this run on one thread (a parallel region costs more).
constexpr int64_t kMinParallelElems = 1 << 15;

int threads_for(int64_t elems) { return kernels::threads_for(elems, kMinParallelElems); }

// At most this many chunks of rows in LayerNorm's backward (each keeps 2 C partial sums).
constexpr int64_t kMaxChunks = 16;

// ---- LayerNorm ----------------------------------------------------------------------------------

// A row's sums run in double as kLanes running sums (column c goes to sum c mod kLanes), added up
// pairwise at the end: the adds do not wait on one another, the loops vectorise along the row,
// and the order of the additions depends on C only. So a row's results are the same on every
// instruction set and however the rows are split across threads.
constexpr int kLanes = 16;

__attribute__((always_inline)) inline double lanes_total(const double* s) {
  double t[kLanes / 2];
  for (int j = 0; j < kLanes / 2; ++j) t[j] = s[j] + s[j + kLanes / 2];
  for (int h = kLanes / 4; h >= 1; h /= 2)
    for (int j = 0; j < h; ++j) t[j] += t[j + h];
  return t[0];
}

// Rows [r0, r1) of y = LayerNorm(x), or with `res` of y = LayerNorm(x + res), the sum written to
// `sum` first (each element x + res rounded once, as the add op rounds it) and normalised from
// there while the row is in L1.
ATTN_VMATH_CLONES
void layer_norm_rows(const float* x, const float* res, float* sum, const float* w, const float* b,
                     float* y, float* mean_out, float* rstd_out, int64_t r0, int64_t r1, int64_t C,
                     float eps) {
  const int64_t full = C - C % kLanes;
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * C;
    if (res) {
      float* sr = sum + r * C;
      const float* rr = res + r * C;
      for (int64_t c = 0; c < C; ++c) sr[c] = xr[c] + rr[c];
      xr = sr;
    }
    float* yr = y + r * C;
    // Mean, then the mean square deviation from it (two passes: no cancellation).
    double s[kLanes] = {};
    for (int64_t c = 0; c < full; c += kLanes)
      for (int j = 0; j < kLanes; ++j) s[j] += double(xr[c + j]);
    for (int64_t c = full; c < C; ++c) s[c - full] += double(xr[c]);
    const double mean = lanes_total(s) / double(C);
    double ss[kLanes] = {};
    for (int64_t c = 0; c < full; c += kLanes)
      for (int j = 0; j < kLanes; ++j) {
        const double d = double(xr[c + j]) - mean;
        ss[j] += d * d;
      }
    for (int64_t c = full; c < C; ++c) {
      const double d = double(xr[c]) - mean;
      ss[c - full] += d * d;
    }
    const float rstd = float(1.0 / std::sqrt(lanes_total(ss) / double(C) + double(eps)));
    const float m = float(mean);
    if (w && b) {
      for (int64_t c = 0; c < C; ++c) yr[c] = (xr[c] - m) * rstd * w[c] + b[c];
    } else if (w) {
      for (int64_t c = 0; c < C; ++c) yr[c] = (xr[c] - m) * rstd * w[c];
    } else {
      for (int64_t c = 0; c < C; ++c) yr[c] = (xr[c] - m) * rstd;
    }
    mean_out[r] = m;
    rstd_out[r] = rstd;
  }
}

// One row's backward: the row sums of dy w and dy w xhat (xhat = (x - mean) rstd, both terms
// rounded to float as formed, then added in double by lanes), and on the same pass over the row
// dw += dy xhat, db += dy (when asked); then dx = rstd (dy w - mean(dy w) - xhat mean(dy w xhat)).
template <bool kW, bool kParams>
__attribute__((always_inline)) inline void layer_norm_backward_row(const float* xr, const float* w,
                                                                   float m, float rs,
                                                                   const float* gr, float* dxr,
                                                                   float* dw, float* db,
                                                                   int64_t C) {
  const int64_t full = C - C % kLanes;
  double a[kLanes] = {}, bs[kLanes] = {};
  auto term = [&](int64_t c, int j) {
    const float xh = (xr[c] - m) * rs;
    const float gw = kW ? gr[c] * w[c] : gr[c];
    a[j] += double(gw);
    bs[j] += double(gw * xh);
    if constexpr (kParams) {
      dw[c] += gr[c] * xh;
      db[c] += gr[c];
    }
  };
  for (int64_t c = 0; c < full; c += kLanes)
    for (int j = 0; j < kLanes; ++j) term(c + j, j);
  for (int64_t c = full; c < C; ++c) term(c, int(c - full));
  if (!dxr) return;
  const float am = float(lanes_total(a) / double(C)), bm = float(lanes_total(bs) / double(C));
  for (int64_t c = 0; c < C; ++c) {
    const float gw = kW ? gr[c] * w[c] : gr[c];
    dxr[c] = rs * (gw - am - (xr[c] - m) * rs * bm);
  }
}

// dx for rows [r0, r1) (when dx is not null); dw and db (both or neither) accumulate this
// range's contribution.
ATTN_VMATH_CLONES
void layer_norm_backward_rows(const float* x, const float* w, const float* mean, const float* rstd,
                              const float* dy, float* dx, float* dw, float* db, int64_t r0,
                              int64_t r1, int64_t C) {
  const bool params = dw != nullptr;
  if (!dx && !params) return;
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * C;
    const float* gr = dy + r * C;
    float* dxr = dx ? dx + r * C : nullptr;
    if (w) {
      if (params)
        layer_norm_backward_row<true, true>(xr, w, mean[r], rstd[r], gr, dxr, dw, db, C);
      else
        layer_norm_backward_row<true, false>(xr, w, mean[r], rstd[r], gr, dxr, dw, db, C);
    } else {
      if (params)
        layer_norm_backward_row<false, true>(xr, w, mean[r], rstd[r], gr, dxr, dw, db, C);
      else
        layer_norm_backward_row<false, false>(xr, w, mean[r], rstd[r], gr, dxr, dw, db, C);
    }
  }
}

// ---- GELU ---------------------------------------------------------------------------------------

constexpr float kSqrt1_2 = 0.70710678118654752f;
constexpr float kInvSqrt2Pi = 0.39894228040143268f;
constexpr float kBeta = 0.79788456080286536f;  // sqrt(2 / pi)
constexpr float kKappa = 0.044715f;

// Phi(x), the standard normal CDF, with small relative error on both tails.
inline float normal_cdf(float x) {
  const float e = 0.5f * vm::erfc_pos(std::fabs(x) * kSqrt1_2);
  return x < 0.f ? e : 1.f - e;
}

}  // namespace

namespace pointwise {

bool gelu_tanh(const std::string& approximate, const char* fn) {
  if (approximate != "none" && approximate != "tanh")
    fail(fn, "approximate must be 'none' or 'tanh', got '", approximate, "'");
  return approximate == "tanh";
}

// y = GELU(x). With `aux` (when a backward will follow) it also keeps what the backward would
// otherwise recompute: Phi(x), or for the tanh form tanh(sqrt(2/pi) (x + 0.044715 x^3)). The
// backward then evaluates one exp (or nothing) per element instead of erfc and exp (or tanh), with
// the same values, so the gradients are those of recomputing them, bit for bit.
ATTN_VMATH_CLONES
void gelu_fwd(const float* x, float* y, float* aux, int64_t n, bool tanh_approx) {
  if (tanh_approx) {
    for (int64_t i = 0; i < n; ++i) {
      const float v = x[i];
      const float t = vm::tanh(kBeta * (v + kKappa * v * v * v));
      y[i] = 0.5f * v * (1.f + t);
      if (aux) aux[i] = t;  // loop-invariant: GCC unswitches the loop
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      const float cdf = normal_cdf(x[i]);
      y[i] = x[i] * cdf;
      if (aux) aux[i] = cdf;
    }
  }
}

// dx = g GELU'(x) from x and the forward's `aux` (see gelu_fwd).
ATTN_VMATH_CLONES
void gelu_bwd(const float* x, const float* aux, const float* g, float* dx, int64_t n,
              bool tanh_approx) {
  if (tanh_approx) {
    for (int64_t i = 0; i < n; ++i) {
      const float v = x[i], t = aux[i];
      const float left = 0.5f * v, right = 1.f + t;
      const float inner_d = kBeta * (1.f + 3.f * kKappa * v * v);
      dx[i] = g[i] * (0.5f * right + left * (1.f - t * t) * inner_d);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      const float v = x[i];
      const float pdf = vm::exp(-0.5f * v * v) * kInvSqrt2Pi;
      dx[i] = g[i] * (aux[i] + v * pdf);
    }
  }
}

}  // namespace pointwise

namespace {

// ---- cross-entropy
// --------------------------------------------------------------------------------

// The row max m and log(sum exp(x - m)) (accumulated in double), kept apart so that
// x - m - log_sum stays exact for large logits (m + log_sum would round at m's magnitude).
struct RowLse {
  float max, log_sum;
};
RowLse row_logsumexp(const float* x, int64_t C) {
  float m = -INFINITY;
  for (int64_t c = 0; c < C; ++c) m = std::max(m, x[c]);
  // All -inf: the loss is -inf - -inf = NaN. A +inf logit: NaN too (inf - inf in the shifted sum),
  // for every target and in every gradient of the row, as PyTorch.
  if (std::isinf(m)) return {m, m > 0 ? NAN : 0.f};
  double s = 0.0;
  for (int64_t c = 0; c < C; ++c) s += std::exp(double(x[c] - m));
  return {m, float(std::log(s))};
}

// layer_norm(x), or with `res` layer_norm(x + res) with the sum formed in the same pass and
// returned in *sum_out, recorded as the add it is (AddBackward0), so that the graph is the one of
// the two ops.
Tensor layer_norm_impl(const char* fn, const Tensor& x_in, const Tensor* res, Tensor* sum_out,
                       int64_t normalized_shape, const Tensor& weight, const Tensor& bias,
                       double eps) {
  detail::check_float32(x_in, "input", fn);
  if (res) {
    detail::check_float32(*res, "residual", fn);
    if (res->shape() != x_in.shape())
      fail(fn, "residual ", shape_str(res->shape()), " must have the input's shape ",
           shape_str(x_in.shape()));
  }
  if (x_in.dim() < 1 || x_in.size(-1) != normalized_shape)
    fail(fn, "input ", shape_str(x_in.shape()), " does not end in normalized_shape (",
         normalized_shape, ")");
  for (const auto& [t, what] : {std::pair{&weight, "weight"}, std::pair{&bias, "bias"}}) {
    if (!t->defined()) continue;
    detail::check_float32(*t, what, fn);
    if (t->dim() != 1 || t->size(0) != normalized_shape)
      fail(fn, what, " ", shape_str(t->shape()), " must have shape (", normalized_shape, ")");
  }
  if (!(eps >= 0.0)) fail(fn, "eps must be non-negative, got ", eps);
  const int64_t C = normalized_shape, rows = C ? x_in.numel() / C : 0;
  Tensor x = x_in.contiguous();
  Tensor r = res ? res->contiguous() : Tensor();
  Tensor sum = res ? detail::make_tensor(fn, x.shape(), Dtype::Float32, false) : Tensor();
  Tensor w = weight.defined() ? weight.contiguous() : Tensor();
  Tensor b = bias.defined() ? bias.contiguous() : Tensor();
  Tensor y = detail::make_tensor(fn, x.shape(), Dtype::Float32, false);
  Tensor mean = detail::make_tensor(fn, {rows}, Dtype::Float32, false);
  Tensor rstd = detail::make_tensor(fn, {rows}, Dtype::Float32, false);
  if (rows && C) {
    const float* xp = x.data_ptr<float>();
    const float* wp = w.defined() ? w.data_ptr<float>() : nullptr;
    const float* bp = b.defined() ? b.data_ptr<float>() : nullptr;
    float *yp = y.data_ptr<float>(), *mp = mean.data_ptr<float>(), *rp = rstd.data_ptr<float>();
    const float* resp = res ? r.data_ptr<float>() : nullptr;
    float* sump = res ? sum.data_ptr<float>() : nullptr;
    kernels::parallel_ranges(rows, threads_for(rows * C), [&](int64_t r0, int64_t r1) {
      layer_norm_rows(xp, resp, sump, wp, bp, yp, mp, rp, r0, r1, C, float(eps));
    });
  } else if (C == 0) {
    // Nothing to normalise; y is empty.
  }
  const bool has_w = weight.defined(), has_b = bias.defined();
  auto backward = [C, rows, has_w, has_b, fn](const Node& n, const Tensor& grad) {
    Tensor x = n.saved_tensor(0), w = n.saved_tensor(1), mean = n.saved_tensor(2),
           rstd = n.saved_tensor(3);
    Tensor g = grad.contiguous();
    Tensor dx, dw, db;
    const bool need_x = n.needs_input_grad(0), need_w = has_w && n.needs_input_grad(1),
               need_b = has_b && n.needs_input_grad(2);
    const bool params = need_w || need_b;  // the kernel forms dw and db together
    if (need_x) dx = detail::make_tensor(fn, x.shape(), Dtype::Float32, false);
    // The rows are cut into chunks by the shape alone, never by the thread count: dw and db are
    // the chunks' partial sums added up in chunk order, the same for every thread count (a split
    // by threads gave other bits at another count). Below kMinParallelElems one chunk.
    const int64_t chunks =
        std::max<int64_t>(1, std::min({rows, kMaxChunks, rows * C / kMinParallelElems}));
    const int nt = int(std::min<int64_t>(threads_for(rows * C), chunks));
    std::vector<float> part(params ? std::size_t(chunks) * 2 * std::size_t(C) : 0, 0.f);
    const float* xp = x.data_ptr<float>();
    const float* wp = has_w ? w.data_ptr<float>() : nullptr;
    const float* gp = g.data_ptr<float>();
    float* dxp = need_x ? dx.data_ptr<float>() : nullptr;
    if (rows && C) {
      auto body = [&](int64_t t) {
        const int64_t r0 = rows * t / chunks, r1 = rows * (t + 1) / chunks;
        float* pw = part.data() + t * 2 * C;
        layer_norm_backward_rows(xp, wp, mean.data_ptr<float>(), rstd.data_ptr<float>(), gp, dxp,
                                 params ? pw : nullptr, params ? pw + C : nullptr, r0, r1, C);
      };
#pragma omp parallel for schedule(static) num_threads(nt) if (nt > 1)
      for (int64_t t = 0; t < chunks; ++t) body(t);
      if (params) {
        if (need_w) dw = detail::make_tensor(fn, {C}, Dtype::Float32);
        if (need_b) db = detail::make_tensor(fn, {C}, Dtype::Float32);
        for (int64_t t = 0; t < chunks; ++t) {
          const float* pw = part.data() + t * 2 * C;
          for (int64_t c = 0; c < C; ++c) {
            if (need_w) dw.data_ptr<float>()[c] += pw[c];
            if (need_b) db.data_ptr<float>()[c] += pw[C + c];
          }
        }
      }
    } else {
      if (need_w) dw = zeros({C});
      if (need_b) db = zeros({C});
    }
    return std::vector<Tensor>{dx, dw, db};
  };
  if (!res)
    return detail::record(y, "NativeLayerNormBackward0", {&x_in, &weight, &bias}, backward,
                          {x, w, mean, rstd});
  *sum_out = detail::record(sum, "AddBackward0", {&x_in, res}, [](const Node&, const Tensor& g) {
    return std::vector<Tensor>{g, g};
  });
  return detail::record(y, "NativeLayerNormBackward0", {sum_out, &weight, &bias}, backward,
                        {*sum_out, w, mean, rstd});
}

}  // namespace

namespace functional {

Tensor layer_norm(const Tensor& x, int64_t normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  return layer_norm_impl("layer_norm", x, nullptr, nullptr, normalized_shape, weight, bias, eps);
}

}  // namespace functional

namespace fused {

AddNorm add_layer_norm(const Tensor& x, const Tensor& r, const LayerNorm& ln) {
  AddNorm out;
  out.normed = layer_norm_impl("add_layer_norm", x, &r, &out.sum, ln.normalized_shape, ln.weight,
                               ln.bias, ln.eps);
  return out;
}

}  // namespace fused

namespace functional {

Tensor gelu(const Tensor& x_in, const std::string& approximate) {
  const char* fn = "gelu";
  detail::check_float32(x_in, "input", fn);
  const bool tanh_approx = pointwise::gelu_tanh(approximate, fn);
  Tensor x = x_in.contiguous();
  Tensor y = detail::make_tensor(fn, x.shape(), Dtype::Float32, false);
  // Phi(x) (tanh of the inner term) kept for the backward, only when one will run.
  Tensor aux;
  if (detail::should_record({&x_in}))
    aux = detail::make_tensor(fn, x.shape(), Dtype::Float32, false);
  const int64_t n = x.numel();
  const float* xp = x.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  float* ap = aux.defined() ? aux.data_ptr<float>() : nullptr;
  kernels::parallel_ranges(n, threads_for(n), [&](int64_t i0, int64_t i1) {
    pointwise::gelu_fwd(xp + i0, yp + i0, ap ? ap + i0 : nullptr, i1 - i0, tanh_approx);
  });
  auto backward = [tanh_approx, fn](const Node& nd, const Tensor& grad) {
    Tensor x = nd.saved_tensor(0), aux = nd.saved_tensor(1), g = grad.contiguous();
    Tensor dx = detail::make_tensor(fn, x.shape(), Dtype::Float32, false);
    const int64_t n = x.numel();
    const float *xp = x.data_ptr<float>(), *ap = aux.data_ptr<float>(), *gp = g.data_ptr<float>();
    float* dp = dx.data_ptr<float>();
    kernels::parallel_ranges(n, threads_for(n), [&](int64_t i0, int64_t i1) {
      pointwise::gelu_bwd(xp + i0, ap + i0, gp + i0, dp + i0, i1 - i0, tanh_approx);
    });
    return std::vector<Tensor>{dx};
  };
  return detail::record(y, "GeluBackward0", {&x_in}, backward, {x, aux});
}

Tensor cross_entropy(const Tensor& input, const Tensor& target, const std::string& reduction,
                     int64_t ignore_index) {
  const char* fn = "cross_entropy";
  detail::check_float32(input, "input", fn);
  if (!target.defined()) fail(fn, "target is an undefined tensor");
  if (target.dtype() != Dtype::Int64)
    fail(fn, "target must be int64 class indices, got ", detail::tensor_desc(target));
  if (reduction != "mean" && reduction != "sum" && reduction != "none")
    fail(fn, "reduction must be 'mean', 'sum' or 'none', got '", reduction, "'");
  const bool batched = input.dim() == 2;
  if (!batched && input.dim() != 1)
    fail(fn, "input ", shape_str(input.shape()), " must be (N, C) logits or (C) for one sample");
  if (batched ? (target.dim() != 1 || target.size(0) != input.size(0)) : target.dim() != 0)
    fail(fn, "target ", shape_str(target.shape()), " does not match input ",
         shape_str(input.shape()), ": expected ", batched ? shape_str({input.size(0)}) : "()");
  const int64_t N = batched ? input.size(0) : 1, C = input.size(-1);
  if (C == 0) fail(fn, "input ", shape_str(input.shape()), " has no classes");
  Tensor x = input.contiguous(), t = target.contiguous();
  const float* xp = x.data_ptr<float>();
  const int64_t* tp = t.data_ptr<int64_t>();
  for (int64_t r = 0; r < N; ++r)
    if (tp[r] != ignore_index && (tp[r] < 0 || tp[r] >= C))
      throw IndexError(detail::msg(fn, "target ", tp[r], " at position ", r,
                                   " is out of bounds for ", C, " classes"));
  // Per row: the max and the log of the shifted sum (for the backward), and the loss.
  Tensor lse = detail::make_tensor(fn, {N, 2}, Dtype::Float32, false);
  Tensor losses = detail::make_tensor(fn, {N}, Dtype::Float32);
  float* lp = lse.data_ptr<float>();
  float* lossp = losses.data_ptr<float>();
  kernels::parallel_ranges(N, threads_for(N * C), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const RowLse l = row_logsumexp(xp + r * C, C);
      lp[2 * r] = l.max;
      lp[2 * r + 1] = l.log_sum;
      lossp[r] = tp[r] == ignore_index ? 0.f : (l.max - xp[r * C + tp[r]]) + l.log_sum;
    }
  });
  int64_t count = 0;
  double total = 0.0;
  for (int64_t r = 0; r < N; ++r) {
    if (tp[r] == ignore_index) continue;
    ++count;
    total += lossp[r];
  }
  Tensor out;
  if (reduction == "none") {
    out = batched ? losses : losses.reshape({});
  } else {
    out = detail::make_tensor(fn, {}, Dtype::Float32);
    // mean over the counted targets; no target counted gives NaN, as PyTorch.
    *out.data_ptr<float>() = reduction == "sum" ? float(total)
                             : count            ? float(total / double(count))
                                                : NAN;
  }
  const std::string red = reduction;
  auto backward = [N, C, red, count, ignore_index, fn](const Node& n, const Tensor& grad) {
    Tensor x = n.saved_tensor(0), t = n.saved_tensor(1), lse = n.saved_tensor(2);
    Tensor g = grad.contiguous();
    Tensor dx = detail::make_tensor(fn, x.shape(), Dtype::Float32, false);
    const float *xp = x.data_ptr<float>(), *lp = lse.data_ptr<float>(), *gp = g.data_ptr<float>();
    const int64_t* tp = t.data_ptr<int64_t>();
    float* dp = dx.data_ptr<float>();
    const float scale = red == "mean" ? (count ? 1.f / float(count) : NAN) : 1.f;
    kernels::parallel_ranges(N, threads_for(N * C), [&](int64_t r0, int64_t r1) {
      for (int64_t r = r0; r < r1; ++r) {
        float* d = dp + r * C;
        if (tp[r] == ignore_index) {
          std::fill(d, d + C, 0.f);
          continue;
        }
        const float gr = (red == "none" ? gp[r] : gp[0]) * scale;
        const float* xr = xp + r * C;
        const float m = lp[2 * r], log_sum = lp[2 * r + 1];
        for (int64_t c = 0; c < C; ++c) d[c] = gr * std::exp((xr[c] - m) - log_sum);
        d[tp[r]] -= gr;
      }
    });
    return std::vector<Tensor>{dx, Tensor()};
  };
  return detail::record(out, "NllLossBackward0", {&input, &target}, backward, {x, t, lse});
}

}  // namespace functional

// ---- modules
// ----------------------------------------------------------------------------------------

LayerNorm::LayerNorm(int64_t normalized_shape, double eps, bool elementwise_affine, bool bias)
    : normalized_shape(normalized_shape), eps(eps) {
  if (normalized_shape <= 0)
    fail("LayerNorm", "normalized_shape must be positive, got ", normalized_shape);
  if (!(eps >= 0.0)) fail("LayerNorm", "eps must be non-negative, got ", eps);
  if (elementwise_affine) {
    weight = register_parameter("weight", ones({normalized_shape}));
    if (bias) this->bias = register_parameter("bias", zeros({normalized_shape}));
  }
}

Tensor LayerNorm::forward(const Tensor& x) const {
  return functional::layer_norm(x, normalized_shape, weight, bias, eps);
}

GELU::GELU(std::string approximate) : approximate(std::move(approximate)) {
  pointwise::gelu_tanh(this->approximate, "GELU");
}

Tensor GELU::forward(const Tensor& x) const { return functional::gelu(x, approximate); }

}  // namespace attn::nn

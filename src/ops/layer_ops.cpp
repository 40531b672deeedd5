// The ops behind attn::nn's layers (layer_ops.h): validation, the autograd node, and the kernels
// of the tensors' (device, dtype) from src/backend/layer_kernels.h.
#include "layer_ops.h"

#include <attn/autograd.h>
#include <attn/ops.h>

#include <algorithm>
#include <cmath>

#include "../backend/layer_kernels.h"
#include "../backend/linalg_kernels.h"
#include "../tensor/internal.h"
#include "autocast.h"

namespace attn::detail {

namespace be = backend;

namespace {

// The kernel tables of one op on both backends, picked by (device, dtype).
#define ATTN_PICK(op, name, t) be::pick(name, (t).device(), (t).dtype(), be::cpu::op, be::cuda::op)

// The address a kernel of the tensor's device reads or writes; null for an undefined tensor.
void* ptr(const Tensor& t) { return t.defined() ? t.device_data() : nullptr; }
float* fptr(const Tensor& t) { return static_cast<float*>(t.device_data()); }

// `t` (when defined) has x's dtype and device: "[fn] weight must have the input's dtype
// torch.float32, got torch.int64".
void check_like(const Tensor& x, const Tensor& t, const char* what, const char* fn) {
  if (!t.defined()) return;
  if (t.dtype() != x.dtype())
    fail(fn, what, " must have the input's dtype ", dtype_name(x.dtype()), ", got ",
         dtype_name(t.dtype()), " ", shape_str(t.shape()));
  check_same_device(fn, {&x, &t});
}

// linear's checks, with its messages, for linear and linear_gelu.
void check_linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const char* fn = "linear";
  if (!x.defined() || !weight.defined()) fail(fn, "undefined input or weight");
  // Every path (matmul's for small products and vectors included) takes the dtypes the kernel
  // takes, and none another.
  ATTN_PICK(linear_forward, fn, x);
  if (x.dtype() != weight.dtype())
    fail(fn, "input and weight must have one dtype, got ", dtype_name(x.dtype()), " and ",
         dtype_name(weight.dtype()));
  check_like(x, weight, "weight", fn);
  check_like(x, bias, "bias", fn);
  if (weight.dim() != 2) fail(fn, "weight ", shape_str(weight.shape()), " must be 2-D (out, in)");
  if (x.dim() < 1) fail(fn, "input must have at least 1 dim, got a scalar");
  if (x.size(-1) != weight.size(1))
    fail(fn, "input ", shape_str(x.shape()), " has ", x.size(-1), " features but weight ",
         shape_str(weight.shape()), " expects ", weight.size(1));
  if (bias.defined() && (bias.dim() != 1 || bias.size(0) != weight.size(0)))
    fail(fn, "bias ", shape_str(bias.shape()), " does not match weight ", shape_str(weight.shape()),
         ": expected (", weight.size(0), ")");
}

// The two products of linear's backward from g (M, N), each when its input needs it (x is saved
// for dW only, W for dx only).
void linear_products_backward(const Node& n, const Tensor& g, int64_t M, int64_t N, int64_t K,
                              const Shape& x_shape, Tensor& dx, Tensor& dw) {
  const auto kernel = ATTN_PICK(linear_backward, "linear", g);
  const bool need_x = n.needs_input_grad(0), need_w = n.needs_input_grad(1);
  if (need_x) dx = make_tensor("linear", x_shape, g.dtype(), K == 0 || N == 0);
  if (need_w) dw = make_tensor("linear", {N, K}, g.dtype(), M == 0);
  Tensor x = need_w ? n.saved_tensor(0) : Tensor(), w = need_x ? n.saved_tensor(1) : Tensor();
  kernel({ptr(g), ptr(x), ptr(w), ptr(dx), ptr(dw), M, N, K});
}

const char* linear_node_name(int64_t nd, bool has_bias) {
  // As PyTorch names the node for that input: AddmmBackward0 / MmBackward0 for 2-D,
  // ViewBackward0 / UnsafeViewBackward0 for 3-D, AddBackward0 / UnsafeViewBackward0 beyond.
  return nd == 2    ? (has_bias ? "AddmmBackward0" : "MmBackward0")
         : has_bias ? (nd == 3 ? "ViewBackward0" : "AddBackward0")
                    : "UnsafeViewBackward0";
}

// x (..., K) as (M, K) rows: y = x W^T + b with one product, and one node whose backward is
//   dx = g W,  dW = g^T x,  db = column sums of g
// (two products and a reduction; no batched products, no broadcast sums).
Tensor linear_rows(const Tensor& x_in, const Tensor& weight, const Tensor& bias) {
  const int64_t K = weight.size(1), N = weight.size(0);
  Tensor x = x_in.contiguous(), w = weight.contiguous();
  const int64_t M = K ? x.numel() / K : x.numel() / std::max<int64_t>(1, x.size(-1));
  Shape out_shape = x.shape();
  out_shape.back() = N;
  Tensor y;
  if (x.dtype() == Dtype::Float32 && backend::textbook_product(M, N, K)) {
    // Products this small go through matmul's plain left-to-right loop (textbook_product), whose
    // rounding reproduces the numbers the reference tutorials print (docs/tour-python.md); the
    // bias is added after, as before.
    NoGradGuard no_grad;
    Tensor r = matmul(x.reshape({M, K}), w.T());
    if (bias.defined()) r = r + bias;
    y = r.reshape(out_shape);
  } else {
    const auto kernel = ATTN_PICK(linear_forward, "linear", x);  // checked: check_linear
    y = make_tensor("linear", out_shape, x.dtype(), false);
    Tensor b = bias.defined() ? bias.contiguous() : Tensor();
    kernel({ptr(x), ptr(w), ptr(b), ptr(y), nullptr, nullptr, M, N, K, be::Activation::None});
  }
  const bool has_bias = bias.defined();
  auto backward = [M, N, K, has_bias, x_shape = x.shape()](const Node& n, const Tensor& grad) {
    Tensor g = grad.contiguous();
    Tensor dx, dw, db;
    linear_products_backward(n, g, M, N, K, x_shape, dx, dw);
    if (has_bias && n.needs_input_grad(2)) {
      db = make_tensor("linear", {N}, g.dtype(), false);
      ATTN_PICK(bias_backward, "linear", g)({ptr(g), ptr(db), M, N});
    }
    return std::vector<Tensor>{dx, dw, db};
  };
  // x is needed for dW only, W for dx only.
  const bool save_x = weight.requires_grad(), save_w = x_in.requires_grad();
  return record(y, linear_node_name(x_in.dim(), has_bias), {&x_in, &weight, &bias}, backward,
                {save_x ? x : Tensor(), save_w ? w : Tensor()});
}

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  if (autocast_applies({&x, &weight, &bias}))  // torch.autocast: the product in its dtype
    return linear(autocast_operand(x), autocast_operand(weight), autocast_operand(bias));
  check_linear(x, weight, bias);
  if (x.dim() == 1) {  // a vector: matmul's (K) @ (K, N) path, then the bias
    Tensor y = matmul(x, weight.T());
    if (bias.defined()) y = y + bias;
    return y;
  }
  return linear_rows(x, weight, bias);
}

Tensor linear_gelu(const Tensor& x_in, const Tensor& weight, const Tensor& bias,
                   const std::string& approximate) {
  check_linear(x_in, weight, bias);
  const bool tanh_approx = gelu_tanh(approximate, "gelu");
  const int64_t K = weight.size(1), N = weight.size(0);
  const int64_t M = x_in.dim() >= 2 && K > 0 ? x_in.numel() / K : 0;
  if (M == 0 || N == 0 || backend::textbook_product(M, N, K))
    return gelu(linear(x_in, weight, bias), approximate);
  const char* fn = "linear_gelu";
  const auto kernel = ATTN_PICK(linear_forward, fn, x_in);
  Tensor x = x_in.contiguous(), w = weight.contiguous();
  Tensor b = bias.defined() ? bias.contiguous() : Tensor();
  Shape out_shape = x.shape();
  out_shape.back() = N;
  // The product (kept for the backward when one will run), GELU of it, and Phi of it.
  const bool grad = should_record({&x_in, &weight, &bias});
  const Dtype dt = x.dtype();
  Tensor pre = make_tensor(fn, out_shape, dt, false);
  Tensor y = make_tensor(fn, out_shape, dt, false);
  Tensor aux = grad ? make_tensor(fn, out_shape, dt, false) : Tensor();
  kernel({ptr(x), ptr(w), ptr(b), ptr(y), ptr(pre), ptr(aux), M, N, K,
          tanh_approx ? be::Activation::GeluTanh : be::Activation::Gelu});
  if (!grad) return y;
  const bool has_bias = bias.defined();
  auto backward = [M, N, K, has_bias, tanh_approx, x_shape = x.shape()](const Node& n,
                                                                        const Tensor& grad) {
    const Tensor pre = n.saved_tensor(2), aux = n.saved_tensor(3), g = grad.contiguous();
    const auto gelu_kernel = ATTN_PICK(gelu_backward, "linear_gelu", g);
    Tensor dh = make_tensor("linear_gelu", {M, N}, g.dtype(), false);
    const bool need_b = has_bias && n.needs_input_grad(2);
    Tensor db = need_b ? make_tensor("linear_gelu", {N}, g.dtype(), false) : Tensor();
    // GELU's gradient by rows, then the bias's column sums of it, in one parallel region.
    gelu_kernel({ptr(pre), ptr(aux), ptr(g), ptr(dh), ptr(db), M, N, tanh_approx});
    Tensor dx, dw;
    linear_products_backward(n, dh, M, N, K, x_shape, dx, dw);
    return std::vector<Tensor>{dx, dw, db};
  };
  const bool save_x = weight.requires_grad(), save_w = x_in.requires_grad();
  return record(y, "LinearGeluBackward", {&x_in, &weight, &bias}, backward,
                {save_x ? x : Tensor(), save_w ? w : Tensor(), pre, aux});
}

Tensor embedding(const Tensor& indices, const Tensor& weight) {
  const char* fn = "embedding";
  if (!indices.defined() || !weight.defined()) fail(fn, "undefined indices or weight");
  if (indices.dtype() != Dtype::Int64)
    fail(fn, "indices must be int64, got ", dtype_name(indices.dtype()));
  if (weight.dim() != 2) fail(fn, "weight must be a 2-D table, got ", tensor_desc(weight));
  check_same_device(fn, {&indices, &weight});
  const auto kernel = ATTN_PICK(embedding_forward, fn, weight);
  const int64_t n = weight.size(0), dim = weight.size(1);
  Shape out_shape = indices.shape();
  out_shape.push_back(dim);
  Tensor out = make_tensor(fn, out_shape, weight.dtype(), /*zero=*/false);  // every row written
  Tensor idx = indices.contiguous(), w = weight.contiguous();
  const int64_t* ip = idx.data_ptr<int64_t>();
  const int64_t bad = kernel({ip, ptr(w), ptr(out), idx.numel(), n, dim});
  if (bad >= 0)
    throw IndexError(msg(fn, "index ", ip[bad], " is out of range for a table of ", n,
                         " embeddings (weight ", shape_str(weight.shape()), ")"));
  // The gradient of each looked-up row is added to its row of the table (repeats add up).
  return record(out, "EmbeddingBackward0", {&weight},
                [n, dim](const Node& node, const Tensor& g) {
                  const Tensor idx = node.saved_tensor(0);
                  const Tensor gc = g.contiguous();
                  const auto bwd = ATTN_PICK(embedding_backward, "embedding", gc);
                  Tensor dw = make_tensor("embedding", {n, dim}, gc.dtype());
                  bwd({idx.data_ptr<int64_t>(), ptr(gc), ptr(dw), idx.numel(), dim});
                  return std::vector<Tensor>{dw};
                },
                {idx});
}

bool gelu_tanh(const std::string& approximate, const char* fn) {
  if (approximate != "none" && approximate != "tanh")
    fail(fn, "approximate must be 'none' or 'tanh', got '", approximate, "'");
  return approximate == "tanh";
}

Tensor gelu(const Tensor& x_in, const std::string& approximate) {
  const char* fn = "gelu";
  if (!x_in.defined()) fail(fn, "input is an undefined tensor");
  const bool tanh_approx = gelu_tanh(approximate, fn);
  if (widened_on_cpu(x_in))  // computed in float32, rounded once (widen)
    return gelu(widen(x_in), approximate).to(x_in.dtype());
  const auto kernel = ATTN_PICK(gelu_forward, fn, x_in);
  Tensor x = x_in.contiguous();
  Tensor y = make_tensor(fn, x.shape(), x.dtype(), false);
  // Phi(x) (tanh of the inner term) kept for the backward, only when one will run.
  Tensor aux;
  if (should_record({&x_in})) aux = make_tensor(fn, x.shape(), x.dtype(), false);
  kernel({ptr(x), ptr(y), ptr(aux), x.numel(), tanh_approx});
  auto backward = [tanh_approx, fn](const Node& nd, const Tensor& grad) {
    Tensor x = nd.saved_tensor(0), aux = nd.saved_tensor(1), g = grad.contiguous();
    const auto bwd = ATTN_PICK(gelu_backward, fn, g);
    Tensor dx = make_tensor(fn, x.shape(), x.dtype(), false);
    bwd({ptr(x), ptr(aux), ptr(g), ptr(dx), nullptr, 1, x.numel(), tanh_approx});
    return std::vector<Tensor>{dx};
  };
  return record(y, "GeluBackward0", {&x_in}, backward, {x, aux});
}

Tensor rms_norm_fused(const Tensor& x_in, int64_t C, const Tensor& weight, double eps) {
  if (weight.defined() &&
      (weight.dtype() != x_in.dtype() || weight.device() != x_in.device() || weight.numel() != C))
    return Tensor();
  const auto kernel =
      be::find(x_in.device(), x_in.dtype(), be::cpu::rms_norm_forward, be::cuda::rms_norm_forward);
  if (!kernel || C <= 0) return Tensor();
  const bool grad = should_record({&x_in, &weight});
  const Tensor x = x_in.contiguous();
  const Tensor w = weight.defined() ? weight.contiguous() : Tensor();
  const int64_t rows = x.numel() / C;
  Tensor y = make_tensor("rms_norm", x.shape(), x.dtype(), false);
  Tensor rstd = grad ? make_tensor("rms_norm", {rows, 1}, Dtype::Float32, false) : Tensor();
  kernel({ptr(x), ptr(w), ptr(y), rows, C, float(eps), grad ? fptr(rstd) : nullptr});
  if (!grad) return y;
  // y = R(x r) (* w, rounded again), r = 1 / sqrt(mean(x^2) + eps) per row:
  //   dx = r (g w) - x r^3 mean(g w x),  dw = the column sums of g R(x r).
  auto backward = [rows, C](const Node& n, const Tensor& grad_out) {
    const Tensor x = n.saved_tensor(0), w = n.saved_tensor(1), r = n.saved_tensor(2);
    const Dtype dt = x.dtype();
    const Tensor xf = x.reshape({rows, C}).to(Dtype::Float32);
    const Tensor gf = grad_out.reshape({rows, C}).to(Dtype::Float32);
    const Tensor gw = w.defined() ? gf * w.reshape({C}).to(Dtype::Float32) : gf;
    Tensor dx, dw;
    if (n.needs_input_grad(0)) {
      const Tensor dot = (gw * xf).mean({-1}, true);
      dx = (r * gw - xf * (r * r * r) * dot).to(dt).view(x.shape());
    }
    if (w.defined() && n.needs_input_grad(1)) {
      const Tensor normed = (xf * r).to(dt).to(Dtype::Float32);  // the forward's rounding
      dw = (gf * normed).sum({0}).to(dt).view(w.shape());
    }
    return std::vector<Tensor>{dx, dw};
  };
  return record(y, "RmsNormBackward", {&x_in, &weight}, backward, {x, w, rstd});
}

Tensor silu_fused(const Tensor& x_in) {
  const auto kernel =
      be::find(x_in.device(), x_in.dtype(), be::cpu::silu_forward, be::cuda::silu_forward);
  if (!kernel) return Tensor();
  const Tensor x = x_in.contiguous();
  Tensor y = make_tensor("silu", x.shape(), x.dtype(), false);
  kernel({ptr(x), ptr(y), x.numel()});
  if (!should_record({&x_in})) return y;
  // d silu / dx = s (1 + x (1 - s)), s = sigmoid(x): in float32, rounded once to x's dtype (as
  // torch's silu_backward).
  auto backward = [](const Node& n, const Tensor& grad_out) {
    const Tensor x = n.saved_tensor(0);
    const Tensor xf = x.to(Dtype::Float32), s = xf.sigmoid();
    const Tensor dx = grad_out.to(Dtype::Float32) * (s * (1.0 + xf * (1.0 - s)));
    return std::vector<Tensor>{dx.to(x.dtype())};
  };
  return record(y, "SiluBackward0", {&x_in}, backward, {x});
}

Tensor layer_norm(const char* fn, const Tensor& x_in, const Tensor* res, Tensor* sum_out,
                  int64_t normalized_shape, const Tensor& weight, const Tensor& bias, double eps) {
  if (!x_in.defined()) fail(fn, "input is an undefined tensor");
  if (res) {
    if (!res->defined()) fail(fn, "residual is an undefined tensor");
    check_like(x_in, *res, "residual", fn);
    if (res->shape() != x_in.shape())
      fail(fn, "residual ", shape_str(res->shape()), " must have the input's shape ",
           shape_str(x_in.shape()));
  }
  if (x_in.dim() < 1 || x_in.size(-1) != normalized_shape)
    fail(fn, "input ", shape_str(x_in.shape()), " does not end in normalized_shape (",
         normalized_shape, ")");
  for (const auto& [t, what] : {std::pair{&weight, "weight"}, std::pair{&bias, "bias"}}) {
    if (!t->defined()) continue;
    check_like(x_in, *t, what, fn);
    if (t->dim() != 1 || t->size(0) != normalized_shape)
      fail(fn, what, " ", shape_str(t->shape()), " must have shape (", normalized_shape, ")");
  }
  if (!(eps >= 0.0)) fail(fn, "eps must be non-negative, got ", eps);
  if (widened_on_cpu(x_in)) {  // computed in float32, each output rounded once (widen)
    const Tensor r = res ? widen(*res) : Tensor();
    Tensor s;
    Tensor y = layer_norm(fn, widen(x_in), res ? &r : nullptr, res ? &s : nullptr, normalized_shape,
                          widen(weight), widen(bias), eps);
    if (sum_out) *sum_out = s.to(x_in.dtype());
    return y.to(x_in.dtype());
  }
  const auto kernel = ATTN_PICK(layer_norm_forward, fn, x_in);
  const int64_t C = normalized_shape, rows = C ? x_in.numel() / C : 0;
  const Dtype dt = x_in.dtype();
  Tensor x = x_in.contiguous();
  Tensor r = res ? res->contiguous() : Tensor();
  Tensor sum = res ? make_tensor(fn, x.shape(), dt, false) : Tensor();
  Tensor w = weight.defined() ? weight.contiguous() : Tensor();
  Tensor b = bias.defined() ? bias.contiguous() : Tensor();
  Tensor y = make_tensor(fn, x.shape(), dt, false);
  Tensor mean = make_tensor(fn, {rows}, Dtype::Float32, false);
  Tensor rstd = make_tensor(fn, {rows}, Dtype::Float32, false);
  kernel({ptr(x), ptr(r), ptr(sum), ptr(w), ptr(b), ptr(y), fptr(mean), fptr(rstd), rows, C,
          float(eps)});
  const bool has_w = weight.defined(), has_b = bias.defined();
  auto backward = [C, rows, has_w, has_b, fn](const Node& n, const Tensor& grad) {
    Tensor x = n.saved_tensor(0), w = n.saved_tensor(1), mean = n.saved_tensor(2),
           rstd = n.saved_tensor(3);
    Tensor g = grad.contiguous();
    const auto bwd = ATTN_PICK(layer_norm_backward, fn, g);
    Tensor dx, dw, db;
    const bool need_x = n.needs_input_grad(0), need_w = has_w && n.needs_input_grad(1),
               need_b = has_b && n.needs_input_grad(2);
    if (need_x) dx = make_tensor(fn, x.shape(), x.dtype(), false);
    if (need_w) dw = make_tensor(fn, {C}, x.dtype(), false);
    if (need_b) db = make_tensor(fn, {C}, x.dtype(), false);
    bwd({ptr(x), has_w ? ptr(w) : nullptr, fptr(mean), fptr(rstd), ptr(g), ptr(dx), ptr(dw),
         ptr(db), rows, C});
    return std::vector<Tensor>{dx, dw, db};
  };
  if (!res)
    return record(y, "NativeLayerNormBackward0", {&x_in, &weight, &bias}, backward,
                  {x, w, mean, rstd});
  *sum_out = record(sum, "AddBackward0", {&x_in, res}, [](const Node&, const Tensor& g) {
    return std::vector<Tensor>{g, g};
  });
  return record(y, "NativeLayerNormBackward0", {sum_out, &weight, &bias}, backward,
                {*sum_out, w, mean, rstd});
}

Tensor cross_entropy(const Tensor& input, const Tensor& target, const std::string& reduction,
                     int64_t ignore_index) {
  const char* fn = "cross_entropy";
  if (!input.defined()) fail(fn, "input is an undefined tensor");
  if (!target.defined()) fail(fn, "target is an undefined tensor");
  if (target.dtype() != Dtype::Int64)
    fail(fn, "target must be int64 class indices, got ", tensor_desc(target));
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
  check_same_device(fn, {&input, &target});
  if (autocast_dtype() && is_reduced_float(input.dtype()) && input.device().is_cpu())
    return cross_entropy(input.to(Dtype::Float32), target, reduction, ignore_index);  // autocast
  if (widened_on_cpu(input))  // computed in float32, rounded once (widen)
    return cross_entropy(widen(input), target, reduction, ignore_index).to(input.dtype());
  const auto kernel = ATTN_PICK(cross_entropy_forward, fn, input);
  Tensor x = input.contiguous(), t = target.contiguous();
  const int64_t* tp = t.data_ptr<int64_t>();
  for (int64_t r = 0; r < N; ++r)
    if (tp[r] != ignore_index && (tp[r] < 0 || tp[r] >= C))
      throw IndexError(
          msg(fn, "target ", tp[r], " at position ", r, " is out of bounds for ", C, " classes"));
  // Per row: the max and the log of the shifted sum (for the backward), and the loss.
  Tensor lse = make_tensor(fn, {N, 2}, Dtype::Float32, false);
  Tensor losses = make_tensor(fn, {N}, x.dtype());
  double total = 0.0;
  int64_t count = 0;
  kernel({ptr(x), tp, fptr(lse), ptr(losses), N, C, ignore_index, &total, &count});
  Tensor out;
  if (reduction == "none") {
    out = batched ? losses : losses.reshape({});
  } else {
    // mean over the counted targets; no target counted gives NaN, as PyTorch.
    const double v = reduction == "sum" ? total : count ? total / double(count) : NAN;
    out = full({}, float(v), x.dtype());
  }
  const std::string red = reduction;
  auto backward = [N, C, red, count, ignore_index, fn](const Node& n, const Tensor& grad) {
    Tensor x = n.saved_tensor(0), t = n.saved_tensor(1), lse = n.saved_tensor(2);
    Tensor g = grad.contiguous();
    const auto bwd = ATTN_PICK(cross_entropy_backward, fn, x);
    Tensor dx = make_tensor(fn, x.shape(), x.dtype(), false);
    const float scale = red == "mean" ? (count ? 1.f / float(count) : NAN) : 1.f;
    bwd({ptr(x), t.data_ptr<int64_t>(), fptr(lse), ptr(g), ptr(dx), N, C, ignore_index, scale,
         red == "none"});
    return std::vector<Tensor>{dx, Tensor()};
  };
  return record(out, "NllLossBackward0", {&input, &target}, backward, {x, t, lse});
}

#undef ATTN_PICK

}  // namespace attn::detail

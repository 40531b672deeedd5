// Linear, Embedding, Dropout and the functional forms (torch.nn.init: nn/init.cpp).
#include <attn/autograd.h>
#include <attn/nn.h>
#include <attn/ops.h>
#include <omp.h>

#include <algorithm>
#include <cmath>

#include "../backend/cpu/gemm.h"
#include "../backend/cpu/threads.h"
#include "../tensor/internal.h"
#include "fused.h"

namespace attn::nn {

using detail::fail;

namespace {

// linear's checks, with its messages, for linear and linear_gelu.
void check_linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  const char* fn = "linear";
  if (!x.defined() || !weight.defined()) fail(fn, "undefined input or weight");
  for (const Tensor* t : {&x, &weight, &bias}) detail::check_not_reduced(*t, fn);
  if (x.dtype() != Dtype::Float32 || weight.dtype() != Dtype::Float32)
    fail(fn, "input and weight must be float32, got ", dtype_name(x.dtype()), " and ",
         dtype_name(weight.dtype()));
  if (weight.dim() != 2) fail(fn, "weight ", shape_str(weight.shape()), " must be 2-D (out, in)");
  if (x.dim() < 1) fail(fn, "input must have at least 1 dim, got a scalar");
  if (x.size(-1) != weight.size(1))
    fail(fn, "input ", shape_str(x.shape()), " has ", x.size(-1), " features but weight ",
         shape_str(weight.shape()), " expects ", weight.size(1));
  if (bias.defined()) {
    if (bias.dtype() != Dtype::Float32) fail(fn, "bias must be float32");
    if (bias.dim() != 1 || bias.size(0) != weight.size(0))
      fail(fn, "bias ", shape_str(bias.shape()), " does not match weight ",
           shape_str(weight.shape()), ": expected (", weight.size(0), ")");
  }
}

// out[j] += sum of g[i][j] over rows i in order, for columns [c0, c1): per column the additions
// of one plain loop over the rows, however the columns are split.
void column_sums(const float* g, int64_t M, int64_t N, int64_t c0, int64_t c1, float* out) {
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = c0; j < c1; ++j) out[j] += g[i * N + j];
}

// The products of linear's backward, from g (M, N), the gradient of y = x W^T + b: dx = g W and
// dW = g^T x, each when its input needs it (x is saved for dW only, W for dx only).
void linear_products_backward(const Node& n, const float* gp, int64_t M, int64_t N, int64_t K,
                              const Shape& x_shape, Tensor& dx, Tensor& dw) {
  if (n.needs_input_grad(0)) {
    dx = detail::make_tensor("linear", x_shape, Dtype::Float32, K == 0 || N == 0);
    if (M > 0 && K > 0 && N > 0)
      kernels::sgemm(false, false, M, K, N, 1.0f, gp, N, n.saved_tensor(1).data_ptr<float>(), K,
                     0.0f, dx.data_ptr<float>(), K);
  }
  if (n.needs_input_grad(1)) {
    dw = detail::make_tensor("linear", {N, K}, Dtype::Float32, M == 0);
    if (M > 0 && K > 0 && N > 0)
      kernels::sgemm(true, false, N, K, M, 1.0f, gp, N, n.saved_tensor(0).data_ptr<float>(), K,
                     0.0f, dw.data_ptr<float>(), K);
  }
}

// The bias's rows of the product's output, for sgemm's prologue (the product then adds with
// beta 1).
kernels::GemmRows fill_bias(const Tensor& b, float* out, int64_t N) {
  if (!b.defined()) return {};
  return [bp = b.data_ptr<float>(), out, N](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) std::copy(bp, bp + N, out + i * N);
  };
}

}  // namespace

// ---- functional ---------------------------------------------------------------------------------
namespace functional {

Tensor linear_rows(const Tensor& x, const Tensor& weight, const Tensor& bias);

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  check_linear(x, weight, bias);
  if (x.dim() == 1) {  // a vector: matmul's (K) @ (K, N) path, then the bias
    Tensor y = matmul(x, weight.T());
    if (bias.defined()) y = y + bias;
    return y;
  }
  return linear_rows(x, weight, bias);
}

// x (..., K) as (M, K) rows: y = x W^T + b with one sgemm, and one node whose backward is
//   dx = g W,  dW = g^T x,  db = column sums of g
// (two sgemms and a reduction; no batched products, no broadcast sums). Named as PyTorch names
// the node for that input: AddmmBackward0 / MmBackward0 for 2-D, ViewBackward0 /
// UnsafeViewBackward0 for 3-D, AddBackward0 / UnsafeViewBackward0 beyond.
Tensor linear_rows(const Tensor& x_in, const Tensor& weight, const Tensor& bias) {
  const int64_t K = weight.size(1), N = weight.size(0);
  Tensor x = x_in.contiguous(), w = weight.contiguous();
  const int64_t M = K ? x.numel() / K : x.numel() / std::max<int64_t>(1, x.size(-1));
  Shape out_shape = x.shape();
  out_shape.back() = N;
  Tensor y = detail::make_tensor("linear", out_shape, Dtype::Float32, false);
  float* yp = y.data_ptr<float>();
  if (detail::textbook_gemm(M, N, K)) {
    // Products this small go through matmul's plain left-to-right loop (ops/linalg.cpp), whose
    // rounding reproduces the numbers the reference tutorials print (docs/tour-python.md); the
    // bias is added after, as before.
    NoGradGuard no_grad;
    Tensor r = matmul(x.reshape({M, K}), w.T());
    if (bias.defined()) r = r + bias;
    y = r.reshape(out_shape);
  } else if (M > 0 && N > 0) {
    Tensor b = bias.defined() ? bias.contiguous() : Tensor();
    if (K > 0) {
      kernels::sgemm(false, true, M, N, K, 1.0f, x.data_ptr<float>(), K, w.data_ptr<float>(), K,
                     b.defined() ? 1.0f : 0.0f, yp, N, fill_bias(b, yp, N), {});
    } else if (b.defined()) {
      fill_bias(b, yp, N)(0, M);
    } else {
      std::fill(yp, yp + M * N, 0.f);
    }
  }
  const int64_t nd = x_in.dim();
  const bool has_bias = bias.defined();
  const char* node = nd == 2    ? (has_bias ? "AddmmBackward0" : "MmBackward0")
                     : has_bias ? (nd == 3 ? "ViewBackward0" : "AddBackward0")
                                : "UnsafeViewBackward0";
  auto backward = [M, N, K, has_bias, x_shape = x.shape()](const Node& n, const Tensor& grad) {
    Tensor g = grad.contiguous();
    Tensor dx, dw, db;
    const float* gp = g.data_ptr<float>();
    linear_products_backward(n, gp, M, N, K, x_shape, dx, dw);
    if (has_bias && n.needs_input_grad(2)) {
      db = detail::make_tensor("linear", {N}, Dtype::Float32);
      float* dbp = db.data_ptr<float>();
      kernels::parallel_ranges(N, kernels::threads_for(M * N),
                               [&](int64_t c0, int64_t c1) { column_sums(gp, M, N, c0, c1, dbp); });
    }
    return std::vector<Tensor>{dx, dw, db};
  };
  // x is needed for dW only, W for dx only.
  const bool save_x = weight.requires_grad(), save_w = x_in.requires_grad();
  return detail::record(y, node, {&x_in, &weight, &bias}, backward,
                        {save_x ? x : Tensor(), save_w ? w : Tensor()});
}

}  // namespace functional

namespace fused {

Tensor linear_gelu(const Tensor& x_in, const Tensor& weight, const Tensor& bias,
                   const std::string& approximate) {
  check_linear(x_in, weight, bias);
  const bool tanh_approx = pointwise::gelu_tanh(approximate, "gelu");
  const int64_t K = weight.size(1), N = weight.size(0);
  const int64_t M = x_in.dim() >= 2 && K > 0 ? x_in.numel() / K : 0;
  if (M == 0 || N == 0 || detail::textbook_gemm(M, N, K))
    return functional::gelu(functional::linear(x_in, weight, bias), approximate);
  Tensor x = x_in.contiguous(), w = weight.contiguous();
  Tensor b = bias.defined() ? bias.contiguous() : Tensor();
  Shape out_shape = x.shape();
  out_shape.back() = N;
  const char* fn = "linear_gelu";
  // The product (kept for the backward when one will run), GELU of it, and Phi of it.
  const bool grad = detail::should_record({&x_in, &weight, &bias});
  Tensor pre = detail::make_tensor(fn, out_shape, Dtype::Float32, false);
  Tensor y = detail::make_tensor(fn, out_shape, Dtype::Float32, false);
  Tensor aux = grad ? detail::make_tensor(fn, out_shape, Dtype::Float32, false) : Tensor();
  float *pp = pre.data_ptr<float>(), *yp = y.data_ptr<float>();
  float* ap = grad ? aux.data_ptr<float>() : nullptr;
  kernels::sgemm(false, true, M, N, K, 1.0f, x.data_ptr<float>(), K, w.data_ptr<float>(), K,
                 b.defined() ? 1.0f : 0.0f, pp, N, fill_bias(b, pp, N),
                 [=](int64_t r0, int64_t r1) {
                   pointwise::gelu_fwd(pp + r0 * N, yp + r0 * N, ap ? ap + r0 * N : nullptr,
                                       (r1 - r0) * N, tanh_approx);
                 });
  if (!grad) return y;
  const bool has_bias = bias.defined();
  auto backward = [M, N, K, has_bias, tanh_approx, x_shape = x.shape()](const Node& n,
                                                                        const Tensor& grad) {
    const Tensor pre = n.saved_tensor(2), aux = n.saved_tensor(3), g = grad.contiguous();
    Tensor dh = detail::make_tensor("linear_gelu", {M, N}, Dtype::Float32, false);
    const bool need_b = has_bias && n.needs_input_grad(2);
    Tensor db = need_b ? detail::make_tensor("linear_gelu", {N}, Dtype::Float32) : Tensor();
    const float *prp = pre.data_ptr<float>(), *ap = aux.data_ptr<float>(),
                *gp = g.data_ptr<float>();
    float* dhp = dh.data_ptr<float>();
    float* dbp = need_b ? db.data_ptr<float>() : nullptr;
    // GELU's gradient by rows, then (after a barrier) the bias's column sums of it, in one region.
    auto share = [&](int t, int nt) {
      const auto [r0, r1] = kernels::thread_share(M, t, nt);
      pointwise::gelu_bwd(prp + r0 * N, ap + r0 * N, gp + r0 * N, dhp + r0 * N, (r1 - r0) * N,
                          tanh_approx);
      if (!dbp) return;
      if (nt > 1) {
#pragma omp barrier
      }
      const auto [c0, c1] = kernels::thread_share(N, t, nt, 16);  // whole vectors of columns
      column_sums(dhp, M, N, c0, c1, dbp);
    };
    const int nt = kernels::threads_for(M * N);
    if (nt > 1) {
#pragma omp parallel num_threads(nt)
      share(omp_get_thread_num(), omp_get_num_threads());
    } else {
      share(0, 1);
    }
    Tensor dx, dw;
    linear_products_backward(n, dhp, M, N, K, x_shape, dx, dw);
    return std::vector<Tensor>{dx, dw, db};
  };
  const bool save_x = weight.requires_grad(), save_w = x_in.requires_grad();
  return detail::record(y, "LinearGeluBackward", {&x_in, &weight, &bias}, backward,
                        {save_x ? x : Tensor(), save_w ? w : Tensor(), pre, aux});
}

}  // namespace fused

namespace functional {

Tensor embedding(const Tensor& indices, const Tensor& weight) {
  const char* fn = "embedding";
  if (!indices.defined() || !weight.defined()) fail(fn, "undefined indices or weight");
  detail::check_not_reduced(weight, fn);
  if (indices.dtype() != Dtype::Int64)
    fail(fn, "indices must be int64, got ", dtype_name(indices.dtype()));
  if (weight.dtype() != Dtype::Float32 || weight.dim() != 2)
    fail(fn, "weight must be a 2-D float32 table, got ", detail::tensor_desc(weight));
  const int64_t n = weight.size(0), dim = weight.size(1);
  Shape out_shape = indices.shape();
  out_shape.push_back(dim);
  Tensor out = detail::make_tensor(fn, out_shape, Dtype::Float32);
  Tensor idx = indices.contiguous(), w = weight.contiguous();
  const int64_t* ip = idx.data_ptr<int64_t>();
  const float* wp = w.data_ptr<float>();
  float* op = out.data_ptr<float>();
  for (int64_t i = 0, m = idx.numel(); i < m; ++i) {
    const int64_t r = ip[i];
    if (r < 0 || r >= n)
      throw IndexError(detail::msg(fn, "index ", r, " is out of range for a table of ", n,
                                   " embeddings (weight ", shape_str(weight.shape()), ")"));
    std::copy(wp + r * dim, wp + (r + 1) * dim, op + i * dim);
  }
  // The gradient of each looked-up row is added to its row of the table (repeats add up).
  return detail::record(out, "EmbeddingBackward0", {&weight},
                        [n, dim](const Node& node, const Tensor& g) {
                          const Tensor idx = node.saved_tensor(0);
                          const Tensor gc = g.contiguous();
                          Tensor dw = zeros({n, dim});
                          const int64_t* ip = idx.data_ptr<int64_t>();
                          const float* gp = gc.data_ptr<float>();
                          float* dp = dw.data_ptr<float>();
                          for (int64_t i = 0, m = idx.numel(); i < m; ++i)
                            for (int64_t j = 0; j < dim; ++j)
                              dp[ip[i] * dim + j] += gp[i * dim + j];
                          return std::vector<Tensor>{dw};
                        },
                        {idx});
}

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  const char* fn = "dropout";
  if (!x.defined()) fail(fn, "undefined input");
  if (!(p >= 0.0 && p <= 1.0))
    fail(fn, "dropout probability has to be between 0 and 1, but got ", p);
  detail::check_not_reduced(x, fn);
  if (x.dtype() != Dtype::Float32) fail(fn, "input must be float32, got ", dtype_name(x.dtype()));
  if (!training || p == 0.0) return x;  // torch returns the input itself, drawing nothing
  // torch: noise = empty_like(x).bernoulli_(1 - p).div_(1 - p); x * noise. The draws follow the
  // logical row-major order of x whatever its strides (checked against torch 1.13 for transposed,
  // permuted, sliced and expanded inputs).
  Tensor noise = detail::make_tensor(fn, x.shape(), Dtype::Float32);
  fill_dropout_mask(noise.data_ptr<float>(), noise.numel(), p, gen ? *gen : default_generator());
  return x * noise;
}

Tensor softmax(const Tensor& x, int64_t dim) { return attn::softmax(x, dim); }

}  // namespace functional

// ---- Linear -------------------------------------------------------------------------------------

Linear::Linear(int64_t in_features, int64_t out_features, bool bias)
    : in_features(in_features), out_features(out_features) {
  if (in_features < 0 || out_features < 0)
    fail("Linear", "features must be non-negative, got in_features ", in_features,
         " and out_features ", out_features);
  // torch.nn.Linear.reset_parameters, in its order: weight first, then bias.
  weight = register_parameter("weight", empty({out_features, in_features}));
  if (bias) this->bias = register_parameter("bias", empty({out_features}));
  init::kaiming_uniform_(weight, std::sqrt(5.0));
  if (bias) {
    const double bound = in_features > 0 ? 1.0 / std::sqrt(double(in_features)) : 0.0;
    init::uniform_(this->bias, -bound, bound);
  }
}

Tensor Linear::forward(const Tensor& x) const {
  if (!x.defined()) fail("Linear", "undefined input");
  if (x.dim() < 1 || x.size(-1) != in_features)
    fail("Linear", "input ", shape_str(x.shape()), " must have ", in_features,
         " features in its last dim (in_features=", in_features, ", out_features=", out_features,
         ")");
  return functional::linear(x, weight, bias);
}

// ---- Embedding ----------------------------------------------------------------------------------

Embedding::Embedding(int64_t num_embeddings, int64_t embedding_dim)
    : num_embeddings(num_embeddings), embedding_dim(embedding_dim) {
  if (num_embeddings < 0 || embedding_dim < 0)
    fail("Embedding", "sizes must be non-negative, got num_embeddings ", num_embeddings,
         " and embedding_dim ", embedding_dim);
  weight = register_parameter("weight", empty({num_embeddings, embedding_dim}));
  init::normal_(weight, 0.0, 1.0);  // torch.nn.Embedding.reset_parameters
}

Tensor Embedding::forward(const Tensor& indices) const {
  if (!indices.defined()) fail("Embedding", "undefined indices");
  if (indices.dtype() != Dtype::Int64)
    fail("Embedding", "indices must be int64, got ", dtype_name(indices.dtype()), " ",
         shape_str(indices.shape()));
  return functional::embedding(indices, weight);
}

// ---- Dropout ------------------------------------------------------------------------------------

Dropout::Dropout(double p) : p(p) {
  if (!(p >= 0.0 && p <= 1.0))
    fail("Dropout", "dropout probability has to be between 0 and 1, but got ", p);
}

Tensor Dropout::forward(const Tensor& x) const { return functional::dropout(x, p, training_); }

}  // namespace attn::nn

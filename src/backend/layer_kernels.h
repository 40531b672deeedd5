// The kernels of the layers' ops (src/ops/layer_ops.h): the linear layer's products (with the
// bias, and GELU, in the product's parallel region), LayerNorm, GELU, cross-entropy and the
// embedding lookup, one table per op and backend (src/backend/dispatch.h).
// Pointers are to the dtype of the table's slot (float for float32), contiguous, row-major;
// per-row statistics (mean, rstd, the log-sum-exp) are float whatever the dtype.
#pragma once

#include <cstdint>

#include "dispatch.h"

namespace attn::backend {

// y = act(x W^T + b) for x (M, K) and W (N, K) (b may be null): the product, with the bias added
// and the activation applied by each thread to the rows it has just multiplied. With an
// activation, `pre` receives x W^T + b and `aux` (when not null) what GELU's backward needs
// (GeluForward); without one, pre is unused.
enum class Activation { None, Gelu, GeluTanh };
struct LinearForward {
  const void *x, *w, *b;
  void *y, *pre, *aux;
  int64_t M, N, K;
  Activation act;
};
// The products of the linear layer's backward from g (M, N): dx = g W (M, K) and dW = g^T x
// (N, K), each when not null.
struct LinearBackward {
  const void *g, *x, *w;
  void *dx, *dw;
  int64_t M, N, K;
};
// y = LayerNorm(x) over rows of C, or with `res` y = LayerNorm(x + res) with the sum written to
// `sum` (each element rounded once, as the add op rounds it). w, b may be null. Writes each row's
// mean and 1 / sqrt(var + eps).
struct LayerNormForward {
  const void *x, *res;
  void* sum;
  const void *w, *b;
  void* y;
  float *mean, *rstd;
  int64_t rows, C;
  float eps;
};
// dx (when not null) and dw, db (each when not null: zeros of C, then the column sums) of
// LayerNorm from its input x (or x + res), w (may be null), mean, rstd and dy.
struct LayerNormBackward {
  const void *x, *w;
  const float *mean, *rstd;
  const void* dy;
  void *dx, *dw, *db;
  int64_t rows, C;
};
// y = GELU(x) over n elements, erf form or tanh form; with `aux`, Phi(x) (tanh form: the tanh of
// the inner term) for the backward. y may be x.
struct GeluForward {
  const void* x;
  void *y, *aux;
  int64_t n;
  bool tanh_approx;
};
// dx = dy GELU'(x) from x and the forward's aux; with db (a product's bias, rows x cols = n),
// also db = the column sums of dx, in the same parallel region.
struct GeluBackward {
  const void *x, *aux, *dy;
  void *dx, *db;
  int64_t rows, cols;
  bool tanh_approx;
};
// Cross-entropy of rows x C logits against class indices (int64; ignore_index counts for nothing):
// each row's max and log-sum-exp into lse (2 floats a row), its loss into `loss`, and the sum of
// the counted losses (in double) and their count.
struct CrossEntropyForward {
  const void* x;
  const int64_t* target;
  float* lse;
  void* loss;
  int64_t rows, C, ignore_index;
  double* total;
  int64_t* count;
};
// dx of cross-entropy: per row dy_r * scale * (softmax(x_r) - onehot(target_r)); dy is one value
// for every row (a reduced loss) unless per_row. Rows of ignore_index get zeros.
struct CrossEntropyBackward {
  const void* x;
  const int64_t* target;
  const float* lse;
  const void* dy;
  void* dx;
  int64_t rows, C, ignore_index;
  float scale;
  bool per_row;
};
// y = RMSNorm(x) over rows of C in the dtype of the slot (x, w, y alike): each row's mean square
// in double (the order of its additions depends on C only), r = 1 / sqrt(mean + eps) in float,
// y = x * r rounded to the dtype, then (w not null) y * w rounded again, as torch's CPU composite
// rounds them. rstd (when not null) gets each row's r for the backward.
struct RmsNormForward {
  const void *x, *w;
  void* y;
  int64_t rows, C;
  float eps;
  float* rstd;
};
// y = SiLU(x) = x / (1 + e^-x) over n elements in the dtype of the slot, computed in float and
// rounded once. Forward only: the op runs it where no gradient is wanted.
struct SiluForward {
  const void* x;
  void* y;
  int64_t n;
};
// out[i] = weight[index[i]] (rows of dim) for i < n; returns the first i whose index is outside
// [0, num) (out is then partly written), or -1.
struct EmbeddingForward {
  const int64_t* index;
  const void* weight;
  void* out;
  int64_t n, num, dim;
};
// dweight[index[i]] += dout[i] for i < n in order (dweight holds zeros first).
struct EmbeddingBackward {
  const int64_t* index;
  const void* dout;
  void* dweight;
  int64_t n, dim;
};
// db = the column sums of g (rows x cols), each column's in row order.
struct BiasBackward {
  const void* g;
  void* db;
  int64_t rows, cols;
};

using LinearForwardFn = void(const LinearForward&);
using LinearBackwardFn = void(const LinearBackward&);
using LayerNormForwardFn = void(const LayerNormForward&);
using LayerNormBackwardFn = void(const LayerNormBackward&);
using GeluForwardFn = void(const GeluForward&);
using GeluBackwardFn = void(const GeluBackward&);
using CrossEntropyForwardFn = void(const CrossEntropyForward&);
using CrossEntropyBackwardFn = void(const CrossEntropyBackward&);
using EmbeddingForwardFn = int64_t(const EmbeddingForward&);
using EmbeddingBackwardFn = void(const EmbeddingBackward&);
using BiasBackwardFn = void(const BiasBackward&);
using RmsNormForwardFn = void(const RmsNormForward&);
using SiluForwardFn = void(const SiluForward&);

// Every table of this header, as X(function type, name): for the declarations below and for a
// backend that defines tables in bulk (kernel_tables.h).
#define ATTN_LAYER_KERNELS(X)                       \
  X(LinearForwardFn, linear_forward)                \
  X(LinearBackwardFn, linear_backward)              \
  X(LayerNormForwardFn, layer_norm_forward)         \
  X(LayerNormBackwardFn, layer_norm_backward)       \
  X(RmsNormForwardFn, rms_norm_forward)             \
  X(SiluForwardFn, silu_forward)                    \
  X(GeluForwardFn, gelu_forward)                    \
  X(GeluBackwardFn, gelu_backward)                  \
  X(CrossEntropyForwardFn, cross_entropy_forward)   \
  X(CrossEntropyBackwardFn, cross_entropy_backward) \
  X(EmbeddingForwardFn, embedding_forward)          \
  X(EmbeddingBackwardFn, embedding_backward)        \
  X(BiasBackwardFn, bias_backward)

ATTN_LAYER_KERNELS(ATTN_BACKEND_KERNELS)

}  // namespace attn::backend

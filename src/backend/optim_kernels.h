// The kernels of the optimizers' ops (src/ops/optim_ops.h): the Adam/AdamW, SGD, RMSprop and
// Adagrad updates, the norms and scaling of gradient clipping, and the element loops over one
// vector that ZeRO and the communicator run on their flat buffers; one table per backend indexed by
// the parameters' dtype (src/backend/dispatch.h). Every operand is contiguous.
#pragma once

#include <cstdint>

#include "dispatch.h"

namespace attn::backend {

// One parameter's Adam update, in place on p, m, v (and vmax with amsgrad):
//   fused (AdamW without amsgrad or maximize):
//     p = p * decay; m = beta1 m + (1 - beta1) g'; v = beta2 v + (1 - beta2) g'^2;
//     p += neg_step_size * m / (sqrt(v) / bc2_sqrt + eps)
//   otherwise torch.optim.Adam's general step: g' = gsign * g + l2 * p, then the same with vmax
//   the running maximum of v where vmax is not null.
// g' is g * grad_scale (a loss scale's inverse, or 1).
struct AdamParam {
  void* p;
  const void* g;
  void *m, *v, *vmax;
  int64_t n;
  bool fused;
  float gsign, l2, decay, beta1, one_minus_beta1, beta2, one_minus_beta2, bc2_sqrt, eps,
      neg_step_size;
};
// The parameters of one optimizer step, updated together (a backend may split their elements
// across threads as one range).
struct AdamStep {
  const AdamParam* params;
  int64_t count;
  float grad_scale;
};
using AdamStepFn = void(const AdamStep&);

// torch.optim.SGD's step on one parameter: g' = gsign * g + wd * p; with momentum, buf =
// g' (first step) or momentum * buf + one_minus_dampening * g', and g' = buf (or g' + momentum *
// buf with nesterov); p += neg_lr * g'. buf may be null without momentum.
struct SgdStep {
  void* p;
  const void* g;
  void* buf;
  int64_t n;
  float gsign, wd, momentum, one_minus_dampening, neg_lr;
  bool nesterov, first;
};
using SgdStepFn = void(const SgdStep&);

// torch.optim.RMSprop's step on one parameter (1.13, foreach=False): d = gsign g + wd p; sq =
// alpha sq + one_minus_alpha d d; centered (ga not null): ga = alpha ga + one_minus_alpha d and
// avg = sqrt(sq - ga ga), else avg = sqrt(sq); avg += eps; with momentum (buf not null) buf =
// momentum buf + d / avg and p += neg_lr buf, else p += neg_lr d / avg.
struct RmspropStep {
  void* p;
  const void* g;
  void *square_avg, *grad_avg, *buf;
  int64_t n;
  float gsign, wd, alpha, one_minus_alpha, eps, momentum, neg_lr;
};
using RmspropStepFn = void(const RmspropStep&);

// torch.optim.Adagrad's step on one parameter (1.13, dense gradients): d = gsign g + wd p; sum +=
// d d; p += neg_clr d / (sqrt(sum) + eps), neg_clr = -lr / (1 + (step - 1) lr_decay).
struct AdagradStep {
  void* p;
  const void* g;
  void* sum;
  int64_t n;
  float gsign, wd, eps, neg_clr;
};
using AdagradStepFn = void(const AdagradStep&);

// out[i] = the p-norm of xs[i] (ns[i] elements) for i < count, as torch.linalg.vector_norm.
struct VectorNorms {
  const void* const* xs;
  const int64_t* ns;
  int64_t count;
  double p;
  float* out;
};
using VectorNormsFn = void(const VectorNorms&);

// xs[i] *= coef for i < count.
struct ForeachScale {
  void* const* xs;
  const int64_t* ns;
  int64_t count;
  float coef;
};
using ForeachScaleFn = void(const ForeachScale&);

// One element loop over the n elements of x:
//   Scale: x *= a;  Divide: x /= a;  Clamp: x = min(max(x, a), b);
//   SumOfSquares: *result = sum of x^2 (in double);  PNorm: *result = the p-norm of x, combining
//   norms as clip_grad_norm_ does (accumulated in double, rounded to float).
enum class VectorOp { Scale, Divide, Clamp, SumOfSquares, PNorm };
struct Vector {
  VectorOp op;
  void* x;
  int64_t n;
  float a, b;
  double p;
  double* result;
};
using VectorFn = void(const Vector&);

#define ATTN_OPTIM_KERNELS(X)      \
  X(AdamStepFn, adam_step)         \
  X(SgdStepFn, sgd_step)           \
  X(RmspropStepFn, rmsprop_step)   \
  X(AdagradStepFn, adagrad_step)   \
  X(VectorNormsFn, vector_norms)   \
  X(ForeachScaleFn, foreach_scale) \
  X(VectorFn, vector)

ATTN_OPTIM_KERNELS(ATTN_BACKEND_KERNELS)

}  // namespace attn::backend

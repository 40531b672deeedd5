// The optimizers' element loops on float arrays: Adam and AdamW, SGD, and the norms, scaling and
// clamping of gradient clipping. torch.optim's operations in torch's order for every element, so
// that a split of the elements among threads (the caller's) never changes a result. Called through
// the ops of src/ops/optim_ops.h.
#pragma once

#include <cstdint>

namespace attn::kernels {

// AdamW without amsgrad or maximize: the five element-wise passes of torch's single-tensor AdamW
// in one loop. decay = 1 - lr * weight_decay, bc2_sqrt = sqrt(1 - beta2^step), neg_step_size =
// -lr / (1 - beta1^step); each gradient is first multiplied by gscale (1 leaves it exact).
void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, float decay, float beta1,
                  float one_minus_beta1, float beta2, float one_minus_beta2, float bc2_sqrt,
                  float eps, float neg_step_size, float gscale);

// Every other case of Adam and AdamW: gsign -1 for maximize, Adam's L2 term l2 (0 for AdamW),
// AdamW's decay factor (1 for Adam) and, when vmax is not null, amsgrad's running maximum of v.
void adam_update(float* p, const float* g, float* m, float* v, float* vmax, int64_t n, float gsign,
                 float l2, float decay, float beta1, float one_minus_beta1, float beta2,
                 float one_minus_beta2, float bc2_sqrt, float eps, float neg_step_size,
                 float gscale);

// SGD: d = gsign g + wd p; with momentum (buf not null) buf = momentum buf + (1 - dampening) d
// (buf = d when `first`), d = nesterov ? d + momentum buf : buf; then p = p + neg_lr d.
void sgd_update(float* p, const float* g, float* buf, int64_t n, float gsign, float wd,
                float momentum, float one_minus_dampening, bool nesterov, bool first, float neg_lr);

// The p-norm of n floats, as torch.norm: inf / -inf the largest / smallest |x|, 0 the count of
// non-zeros, otherwise (sum |x|^p)^(1/p), summed in order in double and rounded to float as
// torch's float result is.
float p_norm(const float* x, int64_t n, double p);
// The same, but the 2-norm is the square root of dot_double (dot.h; eight running sums): a
// tensor's norm, where p_norm serves for the norm of the tensors' norms.
float vector_norm(const float* x, int64_t n, double p);

// x *= coef over n floats.
void scale(float* x, int64_t n, float coef);
// x = x / d over n floats (a division per element: the rounding of torch's sum / size).
void divide(float* x, int64_t n, float d);
// The sum of x[i]^2 over n floats, each square and sum in double, in order.
double sum_of_squares(const float* x, int64_t n);

// torch's clamp of n floats to [lo, hi]: min(max(x, lo), hi), NaN stays NaN.
void clamp(float* x, int64_t n, float lo, float hi);

}  // namespace attn::kernels

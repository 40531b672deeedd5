// The ops the optimizers run (torch's _fused_adam_ / _foreach_norm family): each checks that its
// tensors share one device and dtype and runs the kernel of src/backend/optim_kernels.h for them
// (float32 on the CPU, split among the threads in a way that never changes a result; elsewhere
// NotImplementedError naming the op, the device and the dtype). Not installed: optim and
// distributed call these, never the backend.
#pragma once

#include <attn/tensor.h>

#include <cstdint>
#include <vector>

namespace attn::detail {

// One parameter's Adam or AdamW update (see kernels::adamw_update and adam_update).
struct AdamUpdate {
  Tensor p, g, m, v, vmax;  // vmax undefined without amsgrad; g contiguous
  bool fused;               // AdamW without amsgrad or maximize
  float gsign, l2, decay, beta1, one_minus_beta1, beta2, one_minus_beta2, bc2_sqrt, eps,
      neg_step_size;
};

// Every update, their elements split evenly across the threads in one parallel region (a small
// parameter does not get a region of its own); each gradient times grad_scale first.
void fused_adam_(const char* fn, const std::vector<AdamUpdate>& updates, float grad_scale);

// torch.optim.AdamW's arithmetic on n elements of host arrays (a shard of ZeRO-1) at the
// `step`-th update (1-based).
void adamw_update_host(float* p, const float* g, float* m, float* v, int64_t n, int64_t step,
                       double lr, double beta1, double beta2, double eps, double weight_decay);

// Host arrays of the distributed code (ZeRO-1's shards, a received average): x *= coef;
// x = x / d per element (the rounding of torch's sum / size); the sum of squares in double, in
// order.
void scale_host(float* x, int64_t n, float coef);
void divide_host(float* x, int64_t n, float d);
double sum_of_squares_host(const float* x, int64_t n);

// SGD's update of one parameter (kernels::sgd_update); buf undefined without momentum.
void fused_sgd_(const char* fn, const Tensor& p, const Tensor& g, const Tensor& buf, float gsign,
                float wd, float momentum, float one_minus_dampening, bool nesterov, bool first,
                float neg_lr);

// RMSprop's update of one parameter (backend::RmspropStep); grad_avg undefined unless centered,
// buf undefined without momentum.
void fused_rmsprop_(const char* fn, const Tensor& p, const Tensor& g, const Tensor& square_avg,
                    const Tensor& grad_avg, const Tensor& buf, float gsign, float wd, float alpha,
                    float one_minus_alpha, float eps, float momentum, float neg_lr);

// Adagrad's update of one parameter (backend::AdagradStep).
void fused_adagrad_(const char* fn, const Tensor& p, const Tensor& g, const Tensor& sum,
                    float gsign, float wd, float eps, float neg_clr);

// The norm of every tensor (float32, bfloat16 or float16, any strides), each one thread's, so that
// the result does not depend on the thread count, rounded to the tensor's dtype (as
// torch.linalg.vector_norm); and the norm of such norms (kernels::p_norm).
std::vector<float> foreach_norm(const char* fn, const std::vector<Tensor>& xs, double norm_type);
float norm_of(const std::vector<float>& values, double norm_type);

// Every tensor times coef in place; torch's clamp of every tensor to [lo, hi] in place (each
// element computed in float and rounded once to its tensor's dtype).
void foreach_mul_(const char* fn, std::vector<Tensor>& xs, float coef);
void foreach_clamp_(const char* fn, std::vector<Tensor>& xs, float lo, float hi);

}  // namespace attn::detail

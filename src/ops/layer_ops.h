// The ops behind attn::nn's layers: the product with its bias (and with GELU after it), the
// embedding lookup, LayerNorm (and the residual add before it), GELU and cross-entropy. Each
// validates its arguments with the messages of the nn function named in them, records one
// autograd node and runs the kernels of its tensors' (device, dtype) through backend::pick
// (src/backend/layer_kernels.h). Not installed: nn calls these, never the backends.
#pragma once

#include <attn/tensor.h>

#include <cstdint>
#include <string>

namespace attn::detail {

// torch.nn.functional.linear: y = x W^T + b, one node whose backward is dx = g W, dW = g^T x,
// db = the column sums of g.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);
// gelu(linear(x, weight, bias), approximate) with the bias and GELU applied by each thread to the
// rows it has just multiplied; one node, LinearGeluBackward.
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias,
                   const std::string& approximate);

// torch.nn.functional.embedding: rows of weight (num, dim) picked by int64 indices.
Tensor embedding(const Tensor& indices, const Tensor& weight);

// Whether `approximate` asks for GELU's tanh form: true for "tanh", false for "none"; anything
// else throws attn::Error from `fn`.
bool gelu_tanh(const std::string& approximate, const char* fn);
// torch.nn.functional.gelu.
Tensor gelu(const Tensor& x, const std::string& approximate);

// torch.nn.functional.layer_norm over the last dim (normalized_shape); with `residual`,
// layer_norm(x + residual) with the sum formed in the same pass and returned in *sum_out,
// recorded as the add it is (AddBackward0). `fn` names the caller in messages.
Tensor layer_norm(const char* fn, const Tensor& x, const Tensor* residual, Tensor* sum_out,
                  int64_t normalized_shape, const Tensor& weight, const Tensor& bias, double eps);

// torch.nn.functional.rms_norm over the last C elements in one pass on a backend with the kernel
// for x's dtype (CPU: float32, bfloat16, float16); weight undefined or of x's dtype with C
// elements. Recorded as one node (RmsNormBackward) whose backward computes in float32 from the
// rows' saved 1/rms and rounds once. Returns an undefined tensor where it does not apply: the
// caller composes RMSNorm of ops then, as torch's.
Tensor rms_norm_fused(const Tensor& x, int64_t C, const Tensor& weight, double eps);

// torch.nn.functional.silu in one pass on a backend with the kernel for x's dtype (CPU: float32,
// bfloat16, float16), recorded as one node (SiluBackward0) whose backward computes in float32
// and rounds once; an undefined tensor where it does not apply (the caller composes x *
// sigmoid(x)).
Tensor silu_fused(const Tensor& x);

// torch.nn.functional.cross_entropy of (N, C) or (C) logits against int64 class indices.
Tensor cross_entropy(const Tensor& input, const Tensor& target, const std::string& reduction,
                     int64_t ignore_index);

}  // namespace attn::detail

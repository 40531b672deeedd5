// Ops of nn made of two that a GPT block runs back to back, done as one pass over the data: a
// product with its bias and GELU, and a residual add with the LayerNorm that follows it. They give
// the floats of the two ops, so the modules use them wherever the pair occurs (MLP, Block, GPT).
#pragma once

#include <attn/nn.h>

#include <cstdint>
#include <string>

namespace attn::nn {

namespace fused {

// functional::gelu(functional::linear(x, weight, bias), approximate), its arguments checked by the
// same rules with the same messages (the op of src/ops/layer_ops.h). The bias is added and the
// GELU applied by each thread to the rows it has just multiplied, in the product's parallel
// region. Recorded as one node, "LinearGeluBackward" (inputs x, weight, bias), whose backward forms
// GELU's gradient and the bias's column sums in one parallel region, then the two products of
// linear's backward. Products small enough for linear's plain loop, and 1-D inputs, are the two ops
// as they are.
Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias,
                   const std::string& approximate);

// {x + r, ln(x + r)}: the sum and its LayerNorm in one pass over the rows, recorded as the two
// nodes the two ops record (AddBackward0, NativeLayerNormBackward0). r must have x's shape.
struct AddNorm {
  Tensor sum, normed;
};
AddNorm add_layer_norm(const Tensor& x, const Tensor& r, const LayerNorm& ln);

// gpt-oss's clamped SwiGLU of its experts' gate_up (N, 2I), gates and ups interleaved (columns
// 2i and 2i + 1): (clamp(up, -limit, limit) + 1) * (g * sigmoid(g * alpha)) with g =
// clamp(gate, max = limit), (N, I) in gate_up's dtype, in one pass over the rows instead of eight
// ops over strided views. Each op's result is rounded to the dtype as the ops round it (the
// scalars too), so the values are the ops' own bit for bit (a NaN's sign aside). No graph: for use
// where no gradient is recorded (the caller runs the ops otherwise). gate_up must be a CPU float
// tensor (N, 2I).
Tensor gpt_oss_glu(const Tensor& gate_up, double alpha, double limit);

}  // namespace fused

}  // namespace attn::nn

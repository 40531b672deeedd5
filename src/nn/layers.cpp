// Linear, Embedding, Dropout and the functional forms (torch.nn.init: nn/init.cpp).
#include <attn/nn.h>
#include <attn/ops.h>

#include <cmath>

#include "../ops/layer_ops.h"
#include "../tensor/internal.h"
#include "fused.h"

namespace attn::nn {

using detail::fail;

// ---- functional ---------------------------------------------------------------------------------
// The computing ops are in src/ops/layer_ops.cpp.
namespace functional {

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  return detail::linear(x, weight, bias);
}

Tensor embedding(const Tensor& indices, const Tensor& weight) {
  return detail::embedding(indices, weight);
}

Tensor dropout(const Tensor& x, double p, bool training, Generator* gen) {
  const char* fn = "dropout";
  if (!x.defined()) fail(fn, "undefined input");
  if (!(p >= 0.0 && p <= 1.0))
    fail(fn, "dropout probability has to be between 0 and 1, but got ", p);
  if (x.dtype() != Dtype::Float32 && !is_reduced_float(x.dtype()))
    fail(fn, "input must be floating point, got ", dtype_name(x.dtype()));
  if (!training || p == 0.0) return x;  // torch returns the input itself, drawing nothing
  // torch: noise = empty_like(x).bernoulli_(1 - p).div_(1 - p); x * noise. The draws follow the
  // logical row-major order of x whatever its strides (checked against torch 1.13 for transposed,
  // permuted, sliced and expanded inputs).
  Tensor noise = detail::make_tensor(fn, x.shape(), Dtype::Float32);
  fill_dropout_mask(noise.data_ptr<float>(), noise.numel(), p, gen ? *gen : default_generator());
  // bfloat16 / float16: the mask is rounded to the dtype first, as torch draws it in the dtype.
  return x * (is_reduced_float(x.dtype()) ? noise.to(x.dtype()) : noise);
}

Tensor softmax(const Tensor& x, int64_t dim) { return attn::softmax(x, dim); }

}  // namespace functional

namespace fused {

Tensor linear_gelu(const Tensor& x, const Tensor& weight, const Tensor& bias,
                   const std::string& approximate) {
  return detail::linear_gelu(x, weight, bias, approximate);
}

}  // namespace fused

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

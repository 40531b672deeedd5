// A program of the core alone: attention forward and backward on tensors. tests/layers links it
// against each layer of the library, that layer's every object included (WHOLE_ARCHIVE) and only
// the layers below it: a layer that calls into one above it fails that link. Against attn::core it
// must also get neither cairo nor MPI (checked on the linked program).
#include <attn/attention.h>
#include <attn/autograd.h>
#include <attn/ops.h>

#include <cmath>
#include <iostream>

int main() {
  attn::Generator g;
  g.manual_seed(0);
  attn::Tensor q = attn::randn({1, 2, 8, 4}, &g).requires_grad_(true);
  attn::Tensor k = attn::randn({1, 2, 8, 4}, &g), v = attn::randn({1, 2, 8, 4}, &g);
  attn::SdpaOptions o;
  o.is_causal = true;
  attn::Tensor out = attn::scaled_dot_product_attention(q, k, v, o);
  out.sum().backward();
  const float s = q.grad().abs().sum().item<float>();
  std::cout << "attention and its gradient: |dq| sum " << s << "\n";
  return std::isfinite(s) && s > 0.0f ? 0 : 1;
}

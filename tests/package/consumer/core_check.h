// What both consumers compute with attn's core layer: attention and a BLAS-backed product.
#pragma once

#include <attn/attention.h>
#include <attn/ops.h>
#include <attn/tensor.h>

#include <cmath>

struct CoreCheck {
  double got, expected, matmul;
  bool ok() const { return std::fabs(got - expected) < 1e-5 && matmul == 4.0; }
};

inline CoreCheck core_check() {
  // One head, two queries/keys of dim 2: q = k = identity, v = [[1, 2], [3, 4]].
  auto q = attn::tensor({{{{1.0, 0.0}, {0.0, 1.0}}}});
  auto v = attn::tensor({{{{1.0, 2.0}, {3.0, 4.0}}}});
  auto out = attn::scaled_dot_product_attention(q, q, v);
  // Row 0 attends with scores (1/sqrt(2), 0): weights softmax of those.
  const double e = std::exp(1.0 / std::sqrt(2.0));
  CoreCheck c;
  c.expected = (e * 1.0 + 1.0 * 3.0) / (e + 1.0);
  c.got = out.index({0, 0, 0, 0}).item_double();
  // (q @ v)[1][1] = 4 through the BLAS-backed matmul.
  c.matmul = attn::matmul(q, v).index({0, 0, 1, 1}).item_double();
  return c;
}

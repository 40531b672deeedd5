// A program that needs tensors and attention only: it links attn::core, the lowest layer (no
// cairo, PCRE2 or MPI on its link line; run_consumer.cmake checks that), and includes only that
// layer's headers.
#include <attn/attention.h>
#include <attn/ops.h>
#include <attn/tensor.h>

#include <cmath>
#include <cstdio>

int main() {
  // One head, two queries/keys of dim 2: q = k = identity, v = [[1, 2], [3, 4]].
  auto q = attn::tensor({{{{1.0, 0.0}, {0.0, 1.0}}}});
  auto v = attn::tensor({{{{1.0, 2.0}, {3.0, 4.0}}}});
  auto out = attn::scaled_dot_product_attention(q, q, v);
  const double e = std::exp(1.0 / std::sqrt(2.0));
  const double expected = (e * 1.0 + 1.0 * 3.0) / (e + 1.0);
  const double got = out.index({0, 0, 0, 0}).item_double();
  const double mm = attn::matmul(q, v).index({0, 0, 1, 1}).item_double();
  const bool ok = std::fabs(got - expected) < 1e-5 && mm == 4.0;
  std::printf("attn core consumer sdpa=%.6f expected=%.6f matmul=%g %s\n", got, expected, mm,
              ok ? "OK" : "FAIL");
  return ok ? 0 : 1;
}

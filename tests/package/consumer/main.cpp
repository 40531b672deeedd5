// A program outside the attn tree: it sees only the installed headers and library (or the source
// tree through add_subdirectory). It exercises the three parts of the static library that pull in
// its private dependencies: attention (OpenMP), matmul (OpenBLAS) and PNG encoding (libpng).
#include <attn/attn.h>
#include <attn/plot.h>

#include <cmath>
#include <cstdio>

int main() {
  // One head, two queries/keys of dim 2: q = k = identity, v = [[1, 2], [3, 4]].
  auto q = attn::tensor({{{{1.0, 0.0}, {0.0, 1.0}}}});
  auto v = attn::tensor({{{{1.0, 2.0}, {3.0, 4.0}}}});
  auto out = attn::scaled_dot_product_attention(q, q, v);
  // Row 0 attends with scores (1/sqrt(2), 0): weights softmax of those.
  const double e = std::exp(1.0 / std::sqrt(2.0));
  const double expected = (e * 1.0 + 1.0 * 3.0) / (e + 1.0);
  const double got = out.index({0, 0, 0, 0}).item_double();

  // (q @ v)[1][1] = 4 through the BLAS-backed matmul.
  const double mm = attn::matmul(q, v).index({0, 0, 1, 1}).item_double();

  // A PNG round trip through libpng.
  attn::plot::Image img(3, 2, attn::plot::Rgb{10, 20, 30});
  const auto back = attn::plot::decode_png(attn::plot::encode_png(img));

  const bool ok = std::fabs(got - expected) < 1e-5 && mm == 4.0 && back.width == 3 &&
                  back.height == 2 && back.rgb == img.rgb;
  std::printf("attn consumer sdpa=%.6f expected=%.6f matmul=%g png=%dx%d %s\n", got, expected, mm,
              back.width, back.height, ok ? "OK" : "FAIL");
  return ok ? 0 : 1;
}

// A program outside the attn tree: it sees only the installed headers and library (or the source
// tree through add_subdirectory). It exercises the three parts of the static library that pull in
// its private dependencies: attention (OpenMP), matmul (OpenBLAS) and plotting (cairo).
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

  // A chart drawn by cairo as a PNG, and read back.
  attn::plot::LineChart chart;
  chart.series.push_back({"loss", {0, 1, 2}, {3, 2, 1.5}});
  const auto png =
      attn::plot::decode_png(attn::plot::encode(chart, attn::plot::Format::kPng, 96, 64));

  const bool ok = std::fabs(got - expected) < 1e-5 && mm == 4.0 && png.width == 96 &&
                  png.height == 64 && png.get(0, 0) == attn::plot::colors::kWhite;
  std::printf("attn consumer sdpa=%.6f expected=%.6f matmul=%g png=%dx%d %s\n", got, expected, mm,
              png.width, png.height, ok ? "OK" : "FAIL");
  return ok ? 0 : 1;
}

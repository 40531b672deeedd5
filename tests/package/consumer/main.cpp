// A program outside the attn tree: it sees only the installed headers and library (or the source
// tree through add_subdirectory). It exercises the three parts of the static library that pull in
// its private dependencies: attention (OpenMP), matmul (OpenBLAS) and plotting (cairo).
#include <attn/attn.h>
#include <attn/plot.h>

#include <cstdio>

#include "core_check.h"

int main() {
  const CoreCheck c = core_check();

  // A chart drawn by cairo as a PNG, and read back.
  attn::plot::LineChart chart;
  chart.series.push_back({"loss", {0, 1, 2}, {3, 2, 1.5}});
  const auto png =
      attn::plot::decode_png(attn::plot::encode(chart, attn::plot::Format::kPng, 96, 64));

  const bool ok =
      c.ok() && png.width == 96 && png.height == 64 && png.get(0, 0) == attn::plot::colors::kWhite;
  std::printf("attn consumer sdpa=%.6f expected=%.6f matmul=%g png=%dx%d %s\n", c.got, c.expected,
              c.matmul, png.width, png.height, ok ? "OK" : "FAIL");
  return ok ? 0 : 1;
}

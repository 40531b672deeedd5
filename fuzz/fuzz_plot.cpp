// attn::plot::figure_from_json, the parser behind `attn plot SPEC.json` (bench/compare.py's plot):
// any input either throws attn::Error or gives a Figure that layout_figure() and render() accept,
// as plot.h promises. Small figures (up to 640 x 480 pixels and 20000 points) are drawn by cairo
// in full, and the image must have the figure's size; tiny ones (up to 320 x 240 and 2000 points)
// are also written as SVG; larger ones are laid out only, to keep the fuzzer fast.
#include <attn/plot.h>

#include "fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  namespace plot = attn::plot;
  plot::Figure fig;
  try {
    fig = plot::figure_from_json(attn_fuzz::as_view(data, size));
  } catch (const attn::Error&) {
    return 0;
  }
  std::size_t points = 0;
  for (const plot::LineChart& c : fig.charts)
    for (const plot::Series& s : c.series) points += s.x.size();
  try {
    const plot::FigureLayout layout = plot::layout_figure(fig);
    FUZZ_CHECK(layout.width == fig.width && layout.height == fig.height);
    FUZZ_CHECK(layout.panels.size() == fig.charts.size());
    if (int64_t(fig.width) * fig.height <= 640 * 480 && points <= 20000) {
      const plot::Image img = plot::render(fig);
      FUZZ_CHECK(img.width == fig.width && img.height == fig.height);
      FUZZ_CHECK(img.rgb.size() == std::size_t(img.width) * std::size_t(img.height) * 3);
    }
    if (int64_t(fig.width) * fig.height <= 320 * 240 && points <= 2000) {
      const std::string svg = plot::encode(fig, plot::Format::kSvg);
      FUZZ_CHECK(svg.rfind("<?xml", 0) == 0 && svg.find("</svg>") != std::string::npos);
    }
  } catch (const attn::Error& e) {
    std::fprintf(stderr, "accepted figure refused: %s\n", e.what());
    FUZZ_CHECK(false && "figure_from_json accepted a figure that layout/render refuses");
  }
  return 0;
}

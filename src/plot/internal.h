// What layout.cpp (geometry) and render_cairo.cpp (drawing) share (not installed).
#pragma once

#include <attn/plot.h>

#include <string>
#include <string_view>
#include <vector>

namespace attn::plot::internal {

// Text as cairo may be given it: valid UTF-8 with every invalid byte and control character
// replaced by U+FFFD, cut to `max_chars` characters (ending in "..") when longer.
std::string drawable(std::string_view s, std::size_t max_chars = 1000);

// Width in pixels of drawable text at font size `px` (DejaVu Sans, bold or not), as drawn.
// Defined in render_cairo.cpp (it measures with cairo).
double text_width(std::string_view s, double px, bool bold = false);

// Vertical text metrics, as fractions of the font size: positions in the layout name the middle
// of a line of capitals; a line of text takes kLine, half of it on either side of that middle.
inline constexpr double kLine = 1.2;
inline constexpr double kCapHalf = 0.365;  // middle of the capitals to the baseline

// The font size of a chart `width` x `height` pixels when font_scale is 0, and of font_scale s.
double auto_font_px(double width, double height);
inline double scale_font_px(int s) { return 4.0 + 5.0 * s; }

// How a series looks in a legend, with the defaults resolved.
struct LegendEntry {
  std::string name;  // drawable
  Rgb color;
  bool markers = false;
  Marker shape = Marker::kDisc;
  double marker_size = 0, line_width = 1;
  std::vector<int> dash;
  bool operator==(const LegendEntry&) const = default;
};
std::vector<LegendEntry> legend_entries(const LineChart& chart, double s);  // at font size s
// Legend geometry at font size s: the height of a row and the length of a line sample.
inline double legend_row_h(double s) { return 1.45 * s; }
double legend_sample_w(double s, const std::vector<LegendEntry>& entries);

// The layout of `chart` in `box` at font size s, with or without its own legend.
ChartLayout chart_layout_in(const LineChart& chart, PixelRect box, double s, bool legend);

struct FigureGeometry {
  FigureLayout L;
  std::vector<LegendEntry> entries;  // the shared legend's
  double sample_w = 0;
  double title_px = 0, footer_px = 0;
};
FigureGeometry figure_geometry(const Figure& figure);

struct HeatmapGeometry {
  HeatmapLayout L;
  std::vector<std::string> rows, cols;  // drawable labels
  std::vector<std::string> panel_titles;
  std::string title, x_label, y_label;  // drawable
  double title_px = 0, panel_title_px = 0;
  int pad = 3, label_step = 1;
  double title_y = 0;                 // middle of the title line
  double xlabel_x = 0, xlabel_y = 0;  // middle of the x label
  double ylabel_x = 0, ylabel_y = 0;  // middle of the (rotated) y label
};
HeatmapGeometry heatmap_geometry(const Heatmap& heatmap, int cell_px);

}  // namespace attn::plot::internal

// attn::plot: line charts (linear or logarithmic axes; dashed lines, marker shapes, labelled
// reference lines), figures of several charts sharing one legend, a JSON description of figures
// (what `attn plot` draws, e.g. bench/compare.py's benchmark plot), and heatmaps. Everything is
// drawn by cairo, with anti-aliased lines and text in DejaVu Sans (found through fontconfig), as
// PNG, SVG or PDF from the same description; save() picks the format from the file name.
//
//   attn::plot::LineChart chart;
//   chart.title = "training loss";
//   chart.x_label = "step";
//   chart.y_label = "loss";
//   chart.series.push_back({"train", steps, train_loss});
//   chart.series.push_back({"val", val_steps, val_loss});
//   attn::plot::save(chart, "loss.png");  // or loss.svg, loss.pdf
//
// Sizes are pixels (in SVG the unit is px, in PDF one pixel is one point). Coordinates are those
// of cairo: (0, 0) is the top-left corner, x to the right and y down, and pixel (i, j) is the unit
// square [i, i + 1) x [j, j + 1). Nothing is drawn outside the image. Errors throw attn::Error.
#pragma once

#include <attn/common.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace attn::plot {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
  friend bool operator==(const Rgb&, const Rgb&) = default;
};

namespace colors {
inline constexpr Rgb kWhite{255, 255, 255};
inline constexpr Rgb kBlack{0, 0, 0};
inline constexpr Rgb kInk{30, 30, 30};           // text
inline constexpr Rgb kAxis{70, 70, 70};          // axes and tick marks
inline constexpr Rgb kGrid{228, 228, 228};       // grid lines
inline constexpr Rgb kFrame{170, 170, 170};      // legend border
inline constexpr Rgb kReference{110, 110, 110};  // reference lines (ReferenceLine's default)
inline constexpr Rgb kFooter{120, 120, 120};     // a figure's footer
}  // namespace colors

// Pixel rectangle, inclusive bounds: the pixels left..right, top..bottom.
struct PixelRect {
  int left = 0, top = 0, right = -1, bottom = -1;
  int center_x() const { return left + (right - left) / 2; }
  int center_y() const { return top + (bottom - top) / 2; }
  bool contains(int x, int y) const { return x >= left && x <= right && y >= top && y <= bottom; }
  bool empty() const { return right < left || bottom < top; }
};

// The default colour of series number `i` (a colour-blind friendly cycle of 8).
Rgb palette(std::size_t i);
// A perceptually ordered colour scale for heatmaps: t = 0 dark violet, 0.5 teal, 1 yellow
// (t is clamped to [0, 1]; NaN gives grey). Piecewise linear between six stops.
Rgb colormap(double t);
// Linear blend: t = 0 gives a, t = 1 gives b.
Rgb mix(Rgb a, Rgb b, double t);

// ---- output formats ----------------------------------------------------------------------------
enum class Format : uint8_t { kPng, kSvg, kPdf };

// The format a file name asks for by its extension: .png, .svg or .pdf (any case). Anything else
// throws attn::Error "[fn] 'PATH': unknown image format; the file name must end in .png, .svg or
// .pdf".
Format format_from_path(const std::string& path, const char* fn = "plot::format_from_path");

// RGB pixels, e.g. a PNG read back to check what it shows.
struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;  // row-major, 3 bytes per pixel

  bool contains(int x, int y) const { return x >= 0 && y >= 0 && x < width && y < height; }
  // One pixel; outside the image it throws attn::IndexError.
  Rgb get(int x, int y) const;
};

// Decodes a PNG (through cairo) to RGB. Transparent pixels are shown over white. Throws
// attn::Error for anything that is not a PNG cairo can read.
Image decode_png(std::string_view bytes);

// ---- line charts -------------------------------------------------------------------------------
// Marker shapes of "radius" r, centred on the data point: a disc of radius r, a square of side
// 2r, a triangle pointing up and a diamond, each fitting in the 2r x 2r square.
enum class Marker : uint8_t { kDisc, kSquare, kTriangle, kDiamond };

struct Series {
  std::string name;          // legend entry; series with an empty name are not listed
  std::vector<double> x, y;  // same length; points with a non-finite coordinate are gaps
  std::optional<Rgb> color;  // default: palette(index of the series)
  bool markers = false;      // a marker (marker_shape) at every point
  Marker marker_shape = Marker::kDisc;
  int marker_size = 0;    // marker radius in pixels, 0..32 (0: from the text size)
  std::vector<int> dash;  // dash pattern: lengths in pixels of the drawn and skipped parts in
                          // turn (on, off, on, ...) along the line, an even number (2..16) of
                          // values in 1..4096; empty: solid. A gap restarts the pattern.
  int line_width = 0;     // 1..8 pixels (0: 2)
};

// A horizontal line across the data area at data value y (e.g. a roofline or a baseline), drawn
// under the series, with an optional label in the line's colour (on a white halo) just above or
// below it. The label goes to the spot that hides the least of the drawn lines and markers, in
// this order of preference on ties: above the line at its right end, middle, left end, 3/4 and
// 1/4 of the way, then below it at the same places; spots that leave the data area are skipped.
// The value counts in the y range (unless y_min and y_max exclude it), so the line is visible.
struct ReferenceLine {
  double y = 0;
  std::string label;
  Rgb color = colors::kReference;
  std::vector<int> dash = {8, 5};  // as Series::dash; empty: solid
  int line_width = 0;              // 0: as the series
};

struct LineChart {
  std::string title, x_label, y_label;
  bool log_x = false, log_y = false;
  std::vector<Series> series;
  std::optional<double> y_min, y_max;  // fixed ends of the y axis (default: from the data)
  std::vector<ReferenceLine> reference_lines;
  std::optional<double> x_min, x_max;  // fixed ends of the x axis (default: from the data)
  bool legend = true;                  // false: no legend box
  int font_scale = 0;  // 1..8: text of 4 + 5 x font_scale pixels; 0: from the size (render()
                       // alone; see Figure)
};

// Where render() puts things, and the data -> pixel mapping it uses: a data point (x, y) is drawn
// centred on (x_to_px(x), y_to_px(y)), in pixel (floor(x_to_px(x)), floor(y_to_px(y))). In a
// Figure, all coordinates are the figure's (the chart's box is offset).
struct ChartLayout {
  int width = 0, height = 0;
  double font_px = 0;                   // size of the text
  int plot_left = 0, plot_top = 0;      // the data area, inclusive pixel bounds; the axes are
  int plot_right = 0, plot_bottom = 0;  // drawn on the columns plot_left and row plot_bottom
  double x_lo = 0, x_hi = 1, y_lo = 0, y_hi = 1;  // data values at the centres of the pixels
  bool log_x = false, log_y = false;              // plot_left / plot_right, plot_bottom / plot_top
  std::vector<double> x_ticks, y_ticks;           // labelled tick values (inside [lo, hi])
  std::vector<std::string> x_tick_labels, y_tick_labels;
  // The legend box (empty when there is no legend). layout_chart() places it top-right; render()
  // moves it to whichever corner of the data area hides the least of the lines and markers, and
  // reports where through its `layout` argument.
  PixelRect legend;
  PixelRect box;           // the whole chart: (0, 0) .. (width - 1, height - 1) unless in a Figure
  double line_width = 2;   // the default line width of series and reference lines
  double marker_size = 4;  // the default marker radius
  // Per reference line: the box of its label (empty when it has none, or when no spot fits;
  // render() fills these in, layout_chart() leaves them empty).
  std::vector<PixelRect> reference_labels;

  double x_to_px(double x) const;
  double y_to_px(double y) const;
};

// Validates the chart and computes its layout. Throws attn::Error for a size outside 64..8192, an
// x/y length mismatch, a log axis with a value <= 0 (series, reference line or fixed end), a
// non-finite reference line or fixed end, x_min >= x_max or y_min >= y_max, a bad dash pattern,
// or a line width, marker size or font scale out of range.
ChartLayout layout_chart(const LineChart& chart, int width = 800, int height = 500);
// Draws the chart into pixels (what the PNG shows). When `layout` is given, the layout used
// (legend position included) is stored there.
Image render(const LineChart& chart, int width = 800, int height = 500,
             ChartLayout* layout = nullptr);
// The chart as the bytes of a PNG, SVG or PDF file.
std::string encode(const LineChart& chart, Format format, int width = 800, int height = 500);
// Writes encode(chart, format_from_path(path), ...) to `path` atomically (io::write_file_atomic):
// a failure leaves any existing file as it was.
void save(const LineChart& chart, const std::string& path, int width = 800, int height = 500);

// Tick values for a linear axis: multiples of 1, 2 or 5 x 10^k covering [lo, hi] with at most
// `max_intervals` steps. When snap is true the first/last tick lie at or beyond lo/hi (the axis
// should be widened to them); otherwise only ticks inside [lo, hi] are returned.
std::vector<double> nice_ticks(double lo, double hi, int max_intervals, bool snap);
// Tick values for a logarithmic axis over [lo, hi] (0 < lo < hi): powers of 2 for ranges at or
// above 1, powers of 10 (with 2 and 5 in between for short ranges) otherwise; linear nice ticks
// when the range is too short for either.
std::vector<double> log_ticks(double lo, double hi, int max_ticks);
// A short label for a tick value: "0", "2.5", "-0.001", "16384", "1e-06", "2e+09".
std::string format_tick(double v);

// ---- figures: several charts, one legend -------------------------------------------------------
// Panels in a grid (`columns` per row, filled row by row), an optional title above them, a legend
// and an optional footer line (small grey text, bottom right; e.g. what made the figure and when):
//
//   Figure fig;
//   fig.width = 1400; fig.height = 620;
//   fig.charts = {forward_chart, backward_chart};  // side by side
//   fig.footer = "bench/compare.py, 2026-01-01";
//   attn::plot::save(fig, "gflops.png");
//
// Legend placement: kBelow (the default) draws one legend under the panels listing every named
// series of every chart once (series of the same name, colour, dashes, marker and width are one
// entry), in as many columns as fit, centred; the charts draw no legend of their own. kInside
// leaves each chart's own legend (LineChart::legend) as it is; kNone draws none.
enum class LegendPlacement : uint8_t { kBelow, kInside, kNone };

struct Figure {
  std::string title;              // above the panels, in bold; may be empty
  std::string footer;             // may be empty
  std::vector<LineChart> charts;  // 1..64 panels
  int columns = 0;                // panels per row, 0..64 (0: all in one row)
  LegendPlacement legend = LegendPlacement::kBelow;
  int width = 800, height = 500;  // pixels, 64..8192 each
  int font_scale = 0;             // 0..8 for every panel (LineChart::font_scale is ignored); 0:
                                  // from the size of one panel
};

// Where render(Figure) puts things (empty rectangles for what is absent).
struct FigureLayout {
  int width = 0, height = 0;
  double font_px = 0;
  int columns = 1, rows = 1;
  std::vector<PixelRect> panels;          // the box each chart is laid out in
  std::vector<ChartLayout> charts;        // each chart's layout, in figure coordinates
  PixelRect title, footer;                // text boxes
  PixelRect legend;                       // the shared legend (kBelow)
  std::vector<PixelRect> legend_samples;  // per legend entry: its line sample (line, dashes and
                                          // marker are drawn along the row center_y())
  std::vector<std::string> legend_names;  // per legend entry
};

// Validates the figure (as layout_chart() for each chart, and: 1..64 charts, columns 0..64, a
// size in 64..8192, font_scale 0..8, and panels at least 64 x 64 pixels) and computes its layout.
FigureLayout layout_figure(const Figure& figure);
Image render(const Figure& figure, FigureLayout* layout = nullptr);
std::string encode(const Figure& figure, Format format);
// Atomic, as save(LineChart); nothing is written when the figure is invalid.
void save(const Figure& figure, const std::string& path);

// ---- figures as JSON -------------------------------------------------------------------------
// figure_from_json() parses a figure from JSON text (UTF-8). A pure function of the bytes: no
// file access, and any input either gives a Figure that render() accepts or throws attn::Error
// "[plot::figure_from_json] PATH: what is wrong", PATH naming the offending value (e.g.
// `charts[1].series[0].dash[2]`). Unknown keys are errors, as are wrong types, out-of-range
// numbers, lengths that do not match, more than 32 levels of nesting, input that is not JSON,
// and a figure that render() would refuse at its own size (e.g. panels under 64 x 64 pixels).
// Every key but "charts", the series' "x" and "y" and the reference lines' "y" is optional;
// defaults are the C++ ones. The comments below explain; the input is strict JSON (no comments):
//
//   {
//     "width": 1400, "height": 620,     // integers 64..8192
//     "title": "...",  "footer": "...", // strings of at most 1000 bytes (all strings)
//     "columns": 2,                     // 0..64
//     "legend": "below",                // "below", "inside" or "none"
//     "font_scale": 2,                  // 0..8
//     "charts": [                       // 1..64 charts
//       {
//         "title": "forward", "x_label": "L", "y_label": "GFLOP/s",
//         "log_x": true, "log_y": false,
//         "x_min": null, "x_max": null, "y_min": 0, "y_max": null,  // numbers or null
//         "legend": true,
//         "series": [                   // 0..256 series, at most 10^6 points in the figure
//           {"name": "attn", "x": [512, 1024], "y": [190.5, null],  // null: a gap
//            "color": "#1f64b4",        // "#rrggbb" or [r, g, b] with integers 0..255
//            "dash": [12, 7],           // see Series::dash; [] is solid
//            "marker": "disc",          // "none" (the default), "disc", "square", "triangle",
//                                       // "diamond"
//            "marker_size": 5, "line_width": 3}
//         ],
//         "reference_lines": [          // 0..64
//           {"y": 95.0, "label": "OpenBLAS sgemm 1024^3", "color": "#6e6e6e",
//            "dash": [10, 6], "line_width": 2}
//         ]
//       }
//     ]
//   }
//
// Numbers must be finite; integers (width, dash lengths, ...) may be written as 3 or 3.0.
Figure figure_from_json(std::string_view json);

// ---- heatmaps ----------------------------------------------------------------------------------
// A grid of coloured cells per panel (e.g. one attention-weights matrix per head), rows and
// columns labelled with tokens, and one colour bar for all panels:
//
//   attn::plot::Heatmap h;
//   h.title = "causal attention";
//   h.row_labels = h.col_labels = {"Your", "journey", "starts"};
//   h.panels.push_back({"head 0", weights});  // rows * cols values, row-major
//   attn::plot::save(h, "weights.png");
//
// Cell (r, c) of a panel is filled with colormap((v - vmin) / (vmax - vmin)): values outside
// [vmin, vmax] and infinities clamp to the ends of the scale, NaN cells are drawn grey
// (colormap(NaN)), which the colour scale never uses. Column labels are written rotated (reading
// bottom to top) under the grid, row labels to its left; labels longer than kHeatmapLabelChars
// characters are cut (ending in ".."), titles beyond 200. Text is UTF-8; invalid bytes and
// control characters show as U+FFFD. Panels are laid out `columns` to a row (0: up to four).
struct HeatmapPanel {
  std::string title;           // e.g. "head 0"; empty: no title line
  std::vector<double> values;  // rows * cols values, row-major
};

struct Heatmap {
  std::string title;                                // above everything; may be empty
  std::string x_label, y_label;                     // axis names (e.g. "key", "query"); optional
  std::vector<std::string> row_labels, col_labels;  // one per row / column, shared by all panels
  std::vector<HeatmapPanel> panels;                 // at least one
  std::optional<double> vmin = 0.0, vmax = 1.0;     // nullopt: from the finite values
  int columns = 0;  // panels per row, 0..64 (0: min(panels, 4)), e.g. one per head
};

inline constexpr std::size_t kHeatmapLabelChars = 14;

// Where render_heatmap() puts things.
struct HeatmapLayout {
  int width = 0, height = 0;
  double font_px = 0;  // size of the labels (titles are larger)
  int cell_px = 0;     // side of one cell in pixels
  int rows = 0, cols = 0;
  double vmin = 0, vmax = 1;      // the value range of the colour scale actually used
  std::vector<PixelRect> grids;   // per panel: the cells' area, rows * cell_px high
  std::vector<PixelRect> titles;  // per panel: the title's text box (empty rect: no title)
  // The colour bar's gradient (outline excluded): its top row is colormap(1), its bottom row
  // colormap(0), and row y shows colormap((bottom - y) / (bottom - top)) (a linear gradient
  // through the scale's stops, so within a unit or two of it).
  PixelRect colorbar;
  std::vector<double> ticks;  // values labelled next to the colour bar
  std::vector<std::string> tick_labels;
  std::vector<int> tick_y;  // pixel row of each tick

  // The pixels of cell (row, col) of panel `panel`. attn::IndexError when out of range.
  PixelRect cell(std::size_t panel, int row, int col) const;
  // The colour render_heatmap() gives a value.
  Rgb color_of(double v) const;
};

// Validates the heatmap and computes its layout. cell_px 0 picks a size from the number of rows
// and columns (between 12 and 64 pixels); otherwise it must be 1..256. Throws attn::Error for no
// panels, no rows or columns, a panel with other than rows * cols values, vmin >= vmax (or a
// non-finite one), or an image that would exceed 16384 pixels in either direction.
HeatmapLayout layout_heatmap(const Heatmap& heatmap, int cell_px = 0);
// Draws the heatmap into pixels; when `layout` is given, the layout used is stored there.
Image render_heatmap(const Heatmap& heatmap, int cell_px = 0, HeatmapLayout* layout = nullptr);
std::string encode(const Heatmap& heatmap, Format format, int cell_px = 0);
// Atomic, as save(LineChart): nothing is left behind on failure.
void save(const Heatmap& heatmap, const std::string& path, int cell_px = 0);

}  // namespace attn::plot

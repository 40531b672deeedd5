// attn::plot drawing: charts, figures and heatmaps laid out by layout.cpp, drawn with cairo into
// pixels, PNG, SVG or PDF; PNG decoding; atomic saving through io::write_file_atomic.
#include <attn/io.h>
#include <cairo-pdf.h>
#include <cairo-svg.h>
#include <cairo.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <memory>
#include <numbers>
#include <string>
#include <vector>

#include "../common/error.h"
#include "internal.h"

namespace attn::plot {

using detail::fail;
using internal::kCapHalf;
using internal::kLine;

namespace {

struct SurfaceDeleter {
  void operator()(cairo_surface_t* s) const { cairo_surface_destroy(s); }
};
struct ContextDeleter {
  void operator()(cairo_t* c) const { cairo_destroy(c); }
};
using SurfacePtr = std::unique_ptr<cairo_surface_t, SurfaceDeleter>;
using ContextPtr = std::unique_ptr<cairo_t, ContextDeleter>;

void check(cairo_status_t status, const char* fn) {
  if (status != CAIRO_STATUS_SUCCESS) fail(fn, "cairo: ", cairo_status_to_string(status));
}

// A context on `surface` with unhinted font metrics: text is exactly as wide on every surface as
// layout.cpp measured it.
ContextPtr make_context(cairo_surface_t* surface, const char* fn) {
  ContextPtr cr(cairo_create(surface));
  check(cairo_status(cr.get()), fn);
  cairo_font_options_t* options = cairo_font_options_create();
  cairo_font_options_set_hint_metrics(options, CAIRO_HINT_METRICS_OFF);
  cairo_set_font_options(cr.get(), options);
  cairo_font_options_destroy(options);
  return cr;
}

void set_font(cairo_t* cr, double px, bool bold) {
  cairo_select_font_face(cr, "DejaVu Sans", CAIRO_FONT_SLANT_NORMAL,
                         bold ? CAIRO_FONT_WEIGHT_BOLD : CAIRO_FONT_WEIGHT_NORMAL);
  cairo_set_font_size(cr, px);
}

void set_rgb(cairo_t* cr, Rgb c) {
  cairo_set_source_rgb(cr, c.r / 255.0, c.g / 255.0, c.b / 255.0);
}

// Line width, dashes (from the start of each subpath) and joins; caps are round for solid data
// lines (`round`), square-cut otherwise (axes, ticks, dashes end where their length says).
void set_line(cairo_t* cr, double width, const std::vector<int>& dash = {}, bool round = false) {
  cairo_set_line_width(cr, width);
  const std::vector<double> d(dash.begin(), dash.end());
  cairo_set_dash(cr, d.data(), int(d.size()), 0);
  cairo_set_line_cap(cr, round && dash.empty() ? CAIRO_LINE_CAP_ROUND : CAIRO_LINE_CAP_BUTT);
  cairo_set_line_join(cr, CAIRO_LINE_JOIN_ROUND);
}

// Drawable text (internal::drawable) with its capitals centred on row y, starting at x - align *
// its width (align 0: left end at x, 0.5: centred, 1: right end). `halo` draws a white outline
// under it.
void text(cairo_t* cr, const std::string& s, double x, double y, double px, Rgb c, double align = 0,
          bool bold = false, bool halo = false) {
  if (s.empty()) return;
  set_font(cr, px, bold);
  cairo_text_extents_t e;
  cairo_text_extents(cr, s.c_str(), &e);
  cairo_move_to(cr, x - align * e.x_advance, y + kCapHalf * px);
  if (halo) {
    cairo_text_path(cr, s.c_str());
    set_rgb(cr, colors::kWhite);
    set_line(cr, std::max(2.0, 0.25 * px));
    cairo_stroke_preserve(cr);
    set_rgb(cr, c);
    cairo_fill(cr);
    return;
  }
  set_rgb(cr, c);
  cairo_show_text(cr, s.c_str());
}

// text() turned a quarter counter-clockwise around (x, y): it reads bottom to top, `align` along
// it (0: starts at y, 1: ends at y).
void text_up(cairo_t* cr, const std::string& s, double x, double y, double px, Rgb c,
             double align = 0) {
  cairo_save(cr);
  cairo_translate(cr, x, y);
  cairo_rotate(cr, -std::numbers::pi / 2);
  text(cr, s, 0, 0, px, c, align);
  cairo_restore(cr);
}

void marker_path(cairo_t* cr, Marker shape, double x, double y, double r) {
  switch (shape) {
    case Marker::kDisc:
      cairo_new_sub_path(cr);
      cairo_arc(cr, x, y, r, 0, 2 * std::numbers::pi);
      return;
    case Marker::kSquare: cairo_rectangle(cr, x - r, y - r, 2 * r, 2 * r); return;
    case Marker::kTriangle:
      cairo_move_to(cr, x, y - r);
      cairo_line_to(cr, x + r, y + r);
      cairo_line_to(cr, x - r, y + r);
      cairo_close_path(cr);
      return;
    case Marker::kDiamond:
      cairo_move_to(cr, x, y - r);
      cairo_line_to(cr, x + r, y);
      cairo_line_to(cr, x, y + r);
      cairo_line_to(cr, x - r, y);
      cairo_close_path(cr);
      return;
  }
}

// Liang-Barsky: clips the segment to [xmin, xmax] x [ymin, ymax]; false when nothing is left.
// Keeps coordinates far outside the image (which cairo's fixed point cannot hold) away from cairo.
bool clip_segment(double& x0, double& y0, double& x1, double& y1, double xmin, double ymin,
                  double xmax, double ymax) {
  const double dx = x1 - x0, dy = y1 - y0;
  if (!std::isfinite(x0) || !std::isfinite(y0) || !std::isfinite(dx) || !std::isfinite(dy))
    return false;
  double t0 = 0, t1 = 1;
  const double p[4] = {-dx, dx, -dy, dy};
  const double q[4] = {x0 - xmin, xmax - x0, y0 - ymin, ymax - y0};
  for (int k = 0; k < 4; ++k) {
    if (p[k] == 0) {
      if (q[k] < 0) return false;
      continue;
    }
    const double r = q[k] / p[k];
    if (p[k] < 0) {
      if (r > t1) return false;
      t0 = std::max(t0, r);
    } else {
      if (r < t0) return false;
      t1 = std::min(t1, r);
    }
  }
  const double ax = x0 + t0 * dx, ay = y0 + t0 * dy, bx = x0 + t1 * dx, by = y0 + t1 * dy;
  x0 = std::clamp(ax, xmin, xmax);
  y0 = std::clamp(ay, ymin, ymax);
  x1 = std::clamp(bx, xmin, xmax);
  y1 = std::clamp(by, ymin, ymax);
  return true;
}

bool finite_point(const Series& s, std::size_t i) {
  return std::isfinite(s.x[i]) && std::isfinite(s.y[i]);
}

// A legend entry's line sample from x to x + w on row y, its marker in the middle.
void draw_sample(cairo_t* cr, const internal::LegendEntry& e, double x, double y, double w,
                 double s) {
  set_rgb(cr, e.color);
  set_line(cr, e.line_width, e.dash);
  cairo_move_to(cr, x, y);
  cairo_line_to(cr, x + w, y);
  cairo_stroke(cr);
  if (e.markers) {
    marker_path(cr, e.shape, x + w / 2, y, std::min(e.marker_size, internal::legend_row_h(s) / 2));
    cairo_fill(cr);
  }
}

// ---- charts ------------------------------------------------------------------------------------

// Reference lines, series and markers: what the chart shows of its data. Drawn once for the
// picture and once into an Occupancy mask.
void draw_data(cairo_t* cr, const LineChart& chart, const ChartLayout& L) {
  const double x0 = L.plot_left, y0 = L.plot_top, x1 = L.plot_right + 1, y1 = L.plot_bottom + 1;
  cairo_save(cr);
  cairo_rectangle(cr, x0, y0, x1 - x0, y1 - y0);
  cairo_clip(cr);
  for (const ReferenceLine& ref : chart.reference_lines) {
    const double w = ref.line_width ? ref.line_width : L.line_width;
    double y = L.y_to_px(ref.y);
    if (!(y > y0 - w && y < y1 + w)) continue;
    y = int(w) % 2 == 0 ? std::round(y) : std::floor(y) + 0.5;  // crisp rows
    set_rgb(cr, ref.color);
    set_line(cr, w, ref.dash);
    cairo_move_to(cr, x0, y);
    cairo_line_to(cr, x1, y);
    cairo_stroke(cr);
  }
  // Segments are clipped to the data area and a margin; a gap, or a segment that enters the
  // margin from outside, starts a new subpath (and the dash pattern again).
  const double m = 64;
  for (std::size_t si = 0; si < chart.series.size(); ++si) {
    const Series& ser = chart.series[si];
    const double w = ser.line_width ? ser.line_width : L.line_width;
    const double radius = ser.marker_size ? ser.marker_size : L.marker_size;
    const std::size_t n = ser.x.size();
    set_rgb(cr, ser.color.value_or(palette(si)));
    set_line(cr, w, ser.dash, true);
    std::vector<std::array<double, 3>> dots;  // x, y, radius: markers and isolated points
    bool pen = false;                         // the current point ends the previous segment
    for (std::size_t i = 0; i < n; ++i) {
      if (!finite_point(ser, i)) {
        pen = false;
        continue;
      }
      const double px = L.x_to_px(ser.x[i]), py = L.y_to_px(ser.y[i]);
      const bool next = i + 1 < n && finite_point(ser, i + 1);
      const bool prev = i > 0 && finite_point(ser, i - 1);
      const bool inside = px >= x0 && px <= x1 && py >= y0 && py <= y1;
      if (inside && (ser.markers || (!next && !prev)))
        dots.push_back({px, py, ser.markers ? radius : std::max(w, 0.2 * L.font_px)});
      if (!next) continue;
      const double qx = L.x_to_px(ser.x[i + 1]), qy = L.y_to_px(ser.y[i + 1]);
      double ax = px, ay = py, bx = qx, by = qy;
      if (!clip_segment(ax, ay, bx, by, x0 - m, y0 - m, x1 + m, y1 + m)) {
        pen = false;
        continue;
      }
      if (!pen || ax != px || ay != py) cairo_move_to(cr, ax, ay);
      cairo_line_to(cr, bx, by);
      pen = bx == qx && by == qy;
    }
    cairo_stroke(cr);
    cairo_save(cr);
    cairo_reset_clip(cr);  // markers at the edge of the data area are drawn whole
    for (const auto& [x, y, r] : dots)
      marker_path(cr, ser.markers ? ser.marker_shape : Marker::kDisc, x, y, r);
    cairo_fill(cr);
    cairo_restore(cr);
  }
  cairo_restore(cr);
}

// A coarse coverage mask of a chart's box (at most 600 pixels a side): what draw_data() drew, and
// the labels placed so far, so that labels and the legend go where they hide the least.
class Occupancy {
 public:
  explicit Occupancy(const PixelRect& box) : box_(box) {
    const int w = box.right - box.left + 1, h = box.bottom - box.top + 1;
    f_ = std::min(1.0, 600.0 / std::max(w, h));
    surface_.reset(cairo_image_surface_create(CAIRO_FORMAT_A8, int(std::ceil(w * f_)),
                                              int(std::ceil(h * f_))));
    check(cairo_surface_status(surface_.get()), "plot::render");
    cr_ = make_context(surface_.get(), "plot::render");
    cairo_scale(cr_.get(), f_, f_);
    cairo_translate(cr_.get(), -box.left, -box.top);
  }
  cairo_t* cr() const { return cr_.get(); }
  // Covered mask pixels in r.
  long covered(const PixelRect& r) const {
    cairo_surface_flush(surface_.get());
    const unsigned char* data = cairo_image_surface_get_data(surface_.get());
    const int stride = cairo_image_surface_get_stride(surface_.get());
    const int w = cairo_image_surface_get_width(surface_.get());
    const int h = cairo_image_surface_get_height(surface_.get());
    if (!data) return 0;
    const int mx0 = std::max(0, int(std::floor((r.left - box_.left) * f_)));
    const int mx1 = std::min(w, int(std::ceil((r.right + 1 - box_.left) * f_)));
    const int my0 = std::max(0, int(std::floor((r.top - box_.top) * f_)));
    const int my1 = std::min(h, int(std::ceil((r.bottom + 1 - box_.top) * f_)));
    long n = 0;
    for (int y = my0; y < my1; ++y)
      for (int x = mx0; x < mx1; ++x) n += data[std::size_t(y) * std::size_t(stride) + x] > 24;
    return n;
  }
  void fill(const PixelRect& r) {
    cairo_rectangle(cr_.get(), r.left, r.top, r.right - r.left + 1, r.bottom - r.top + 1);
    cairo_fill(cr_.get());
  }

 private:
  PixelRect box_;
  double f_ = 1;
  SurfacePtr surface_;
  ContextPtr cr_;
};

PixelRect rect_of(double left, double top, double right, double bottom) {
  return {int(std::floor(left)), int(std::floor(top)), int(std::ceil(right)) - 1,
          int(std::ceil(bottom)) - 1};
}

// Draws a chart laid out by chart_layout_in(); stores the legend and label positions in L.
void draw_chart(cairo_t* cr, const LineChart& chart, ChartLayout& L, bool legend) {
  const PixelRect& box = L.box;
  const double s = L.font_px, pad = std::max(4.0, 0.6 * s), tick = std::max(3.0, 0.4 * s);
  const double lw = L.line_width;

  // Grid lines at the ticks.
  set_rgb(cr, colors::kGrid);
  set_line(cr, 1);
  for (double t : L.y_ticks) {
    const double y = std::floor(L.y_to_px(t)) + 0.5;
    if (y <= L.plot_top || y >= L.plot_bottom) continue;
    cairo_move_to(cr, L.plot_left + 1, y);
    cairo_line_to(cr, L.plot_right + 1, y);
  }
  for (double t : L.x_ticks) {
    const double x = std::floor(L.x_to_px(t)) + 0.5;
    if (x <= L.plot_left + 1 || x > L.plot_right + 1) continue;
    cairo_move_to(cr, x, L.plot_top);
    cairo_line_to(cr, x, L.plot_bottom);
  }
  cairo_stroke(cr);

  draw_data(cr, chart, L);
  Occupancy occupied(box);
  draw_data(occupied.cr(), chart, L);

  // Reference line labels: the spot along the line that hides the least.
  for (std::size_t r = 0; r < chart.reference_lines.size(); ++r) {
    const ReferenceLine& ref = chart.reference_lines[r];
    const std::string label = internal::drawable(ref.label);
    if (label.empty()) continue;
    const double w = ref.line_width ? ref.line_width : lw, y = L.y_to_px(ref.y);
    if (!(y >= L.plot_top && y <= L.plot_bottom + 1)) continue;  // the line is not drawn either
    const double tw = internal::text_width(label, s), half = kLine * s / 2;
    const double above = y - w / 2 - 0.2 * s - half, below = y + w / 2 + 0.2 * s + half;
    const double right = L.plot_right + 1 - 0.5 * s - tw, left = L.plot_left + 1 + 0.5 * s;
    const double middle = (left + right) / 2;
    const double q1 = left + (right - left) / 4, q3 = right - (right - left) / 4;
    const std::array<std::pair<double, double>, 10> spots = {{{right, above},
                                                              {middle, above},
                                                              {left, above},
                                                              {q3, above},
                                                              {q1, above},  //
                                                              {right, below},
                                                              {middle, below},
                                                              {left, below},
                                                              {q3, below},
                                                              {q1, below}}};
    long best = -1;
    double best_x = 0, best_y = 0;
    for (const auto& [x, cy] : spots) {
      const PixelRect t = rect_of(x, cy - half, x + tw, cy + half);
      if (!(std::isfinite(x) && std::isfinite(cy)) || t.left <= L.plot_left ||
          t.right > L.plot_right || t.top < L.plot_top || t.bottom >= L.plot_bottom)
        continue;
      const long covered = occupied.covered(t);
      if (best < 0 || covered < best) {
        best = covered;
        best_x = x;
        best_y = cy;
        L.reference_labels[r] = t;
      }
    }
    if (best < 0) continue;
    occupied.fill(L.reference_labels[r]);
    text(cr, label, best_x, best_y, s, ref.color, 0, false, /*halo=*/true);
  }

  // Axes, ticks and tick labels.
  set_rgb(cr, colors::kAxis);
  cairo_move_to(cr, L.plot_left + 0.5, L.plot_top);
  cairo_line_to(cr, L.plot_left + 0.5, L.plot_bottom + 1);
  cairo_move_to(cr, L.plot_left, L.plot_bottom + 0.5);
  cairo_line_to(cr, L.plot_right + 1, L.plot_bottom + 0.5);
  for (double t : L.y_ticks) {
    const double y = std::floor(L.y_to_px(t)) + 0.5;
    cairo_move_to(cr, L.plot_left - tick, y);
    cairo_line_to(cr, L.plot_left, y);
  }
  for (double t : L.x_ticks) {
    const double x = std::floor(L.x_to_px(t)) + 0.5;
    cairo_move_to(cr, x, L.plot_bottom + 1);
    cairo_line_to(cr, x, L.plot_bottom + 1 + tick);
  }
  set_line(cr, 1);
  cairo_stroke(cr);
  for (std::size_t i = 0; i < L.y_ticks.size(); ++i)
    text(cr, L.y_tick_labels[i], L.plot_left - tick - 0.35 * s,
         std::floor(L.y_to_px(L.y_ticks[i])) + 0.5, s, colors::kInk, 1);
  for (std::size_t i = 0; i < L.x_ticks.size(); ++i)
    text(cr, L.x_tick_labels[i], std::floor(L.x_to_px(L.x_ticks[i])) + 0.5,
         L.plot_bottom + 1 + tick + 0.2 * s + kLine * s / 2, s, colors::kInk, 0.5);

  // Title and axis labels, centred on the data area (but inside the box).
  const double mid_x = (L.plot_left + L.plot_right + 1) / 2.0;
  auto centred = [&](const std::string& t, double px, bool bold) {
    const double tw = internal::text_width(t, px, bold);
    return std::max(box.left + pad, mid_x - tw / 2);
  };
  if (const std::string t = internal::drawable(chart.title); !t.empty())
    text(cr, t, centred(t, 1.15 * s, true), box.top + pad + kLine * 1.15 * s / 2, 1.15 * s,
         colors::kInk, 0, true);
  if (const std::string t = internal::drawable(chart.x_label); !t.empty())
    text(cr, t, centred(t, s, false), box.bottom + 1 - pad - kLine * s / 2, s, colors::kInk);
  if (const std::string t = internal::drawable(chart.y_label); !t.empty())
    text_up(cr, t, box.left + pad + kLine * s / 2, (L.plot_top + L.plot_bottom + 1) / 2.0, s,
            colors::kInk, 0.5);

  // Legend: in the corner of the data area that hides the least.
  const auto entries =
      legend ? internal::legend_entries(chart, s) : std::vector<internal::LegendEntry>{};
  if (entries.empty()) return;
  const int w = L.legend.right - L.legend.left, h = L.legend.bottom - L.legend.top;
  const int gap = int(std::round(0.6 * s));
  const std::array<std::pair<int, int>, 4> corners = {{
      {L.plot_right - gap - w, L.plot_top + gap},         // top right
      {L.plot_left + 1 + gap, L.plot_top + gap},          // top left
      {L.plot_right - gap - w, L.plot_bottom - gap - h},  // bottom right
      {L.plot_left + 1 + gap, L.plot_bottom - gap - h},   // bottom left
  }};
  long best = -1;
  for (const auto& [x, y] : corners) {
    const long covered = occupied.covered(PixelRect{x, y, x + w, y + h});
    if (best < 0 || covered < best) {
      best = covered;
      L.legend = PixelRect{x, y, x + w, y + h};
    }
  }
  cairo_rectangle(cr, L.legend.left + 0.5, L.legend.top + 0.5, w, h);
  set_rgb(cr, colors::kWhite);
  cairo_fill_preserve(cr);
  set_rgb(cr, colors::kFrame);
  set_line(cr, 1);
  cairo_stroke(cr);
  const double rh = internal::legend_row_h(s), sw = internal::legend_sample_w(s, entries);
  for (std::size_t i = 0; i < entries.size(); ++i) {
    const double cy = L.legend.top + 0.25 * s + rh * (double(i) + 0.5);
    const double x = L.legend.left + 0.6 * s;
    draw_sample(cr, entries[i], x, cy, sw, s);
    text(cr, entries[i].name, x + sw + 0.5 * s, cy, s, colors::kInk);
  }
}

void draw_figure(cairo_t* cr, const Figure& f, internal::FigureGeometry& g) {
  FigureLayout& L = g.L;
  const double s = L.font_px;
  for (std::size_t i = 0; i < f.charts.size(); ++i)
    draw_chart(cr, f.charts[i], L.charts[i],
               f.charts[i].legend && f.legend == LegendPlacement::kInside);
  if (!L.title.empty())
    text(cr, internal::drawable(f.title), L.title.left, L.title.top + kLine * g.title_px / 2,
         g.title_px, colors::kInk, 0, true);
  for (std::size_t i = 0; i < g.entries.size(); ++i) {
    const PixelRect& r = L.legend_samples[i];
    const double cy = r.center_y() + 0.5;
    draw_sample(cr, g.entries[i], r.left, cy, g.sample_w, s);
    text(cr, g.entries[i].name, r.right + 1 + 0.5 * s, cy, s, colors::kInk);
  }
  if (!L.footer.empty())
    text(cr, internal::drawable(f.footer), L.footer.left, L.footer.top + kLine * g.footer_px / 2,
         g.footer_px, colors::kFooter);
}

// ---- heatmaps ----------------------------------------------------------------------------------

void draw_heatmap(cairo_t* cr, const Heatmap& h, const internal::HeatmapGeometry& g) {
  const HeatmapLayout& L = g.L;
  const double s = L.font_px, cp = L.cell_px;
  if (!g.title.empty()) {
    const double tw = internal::text_width(g.title, g.title_px, true);
    text(cr, g.title, std::max(0.9 * s, (L.width - tw) / 2), g.title_y, g.title_px, colors::kInk, 0,
         true);
  }
  for (std::size_t p = 0; p < h.panels.size(); ++p) {
    const PixelRect& grid = L.grids[p];
    const std::vector<double>& values = h.panels[p].values;
    for (int r = 0; r < L.rows; ++r)
      for (int c = 0; c < L.cols; ++c) {
        const PixelRect cell = L.cell(p, r, c);
        set_rgb(cr, L.color_of(values[std::size_t(r) * std::size_t(L.cols) + std::size_t(c)]));
        cairo_rectangle(cr, cell.left, cell.top, cp, cp);
        cairo_fill(cr);
      }
    set_rgb(cr, colors::kAxis);
    set_line(cr, 1);
    cairo_rectangle(cr, grid.left - 0.5, grid.top - 0.5, grid.right - grid.left + 2,
                    grid.bottom - grid.top + 2);
    cairo_stroke(cr);
    const PixelRect& t = L.titles[p];
    if (!t.empty())
      text(cr, g.panel_titles[p], t.left, t.top + kLine * g.panel_title_px / 2, g.panel_title_px,
           colors::kInk, 0, true);
    // Row labels right-aligned left of the grid, column labels rotated under it, ending at it;
    // with cells smaller than the text only every label_step-th is written.
    for (int r = 0; r < L.rows; r += g.label_step)
      text(cr, g.rows[std::size_t(r)], grid.left - g.pad, grid.top + (r + 0.5) * cp, s,
           colors::kInk, 1);
    for (int c = 0; c < L.cols; c += g.label_step)
      text_up(cr, g.cols[std::size_t(c)], grid.left + (c + 0.5) * cp, grid.bottom + 1 + g.pad, s,
              colors::kInk, 1);
  }
  // The colour bar: the colour scale's stops as a gradient from the middle of its bottom row
  // (colormap(0)) to the middle of its top row (colormap(1)), outline, ticks and their labels.
  const PixelRect& bar = L.colorbar;
  cairo_pattern_t* gradient = cairo_pattern_create_linear(
      0, bar.bottom + 0.5, 0, std::min(bar.top + 0.5, bar.bottom + 0.0));
  for (int k = 0; k <= 5; ++k) {
    const Rgb c = colormap(k / 5.0);
    cairo_pattern_add_color_stop_rgb(gradient, k / 5.0, c.r / 255.0, c.g / 255.0, c.b / 255.0);
  }
  cairo_pattern_set_extend(gradient, CAIRO_EXTEND_PAD);
  cairo_set_source(cr, gradient);
  cairo_pattern_destroy(gradient);
  cairo_rectangle(cr, bar.left, bar.top, bar.right - bar.left + 1, bar.bottom - bar.top + 1);
  cairo_fill(cr);
  set_rgb(cr, colors::kAxis);
  set_line(cr, 1);
  cairo_rectangle(cr, bar.left - 0.5, bar.top - 0.5, bar.right - bar.left + 2,
                  bar.bottom - bar.top + 2);
  for (int y : L.tick_y) {
    cairo_move_to(cr, bar.right + 1, y + 0.5);
    cairo_line_to(cr, bar.right + 1 + 0.4 * s, y + 0.5);
  }
  cairo_stroke(cr);
  for (std::size_t i = 0; i < L.ticks.size(); ++i)
    text(cr, L.tick_labels[i], bar.right + 1 + 0.6 * s, L.tick_y[i] + 0.5, s, colors::kInk);
  text(cr, g.x_label, g.xlabel_x, g.xlabel_y, s, colors::kInk, 0.5);
  text_up(cr, g.y_label, g.ylabel_x, g.ylabel_y, s, colors::kInk, 0.5);
}

// ---- surfaces ----------------------------------------------------------------------------------

cairo_status_t append_to_string(void* closure, const unsigned char* data, unsigned int length) {
  try {
    static_cast<std::string*>(closure)->append(reinterpret_cast<const char*>(data), length);
  } catch (...) {
    return CAIRO_STATUS_WRITE_ERROR;
  }
  return CAIRO_STATUS_SUCCESS;
}

// Draws on a white page through `draw`, then checks that cairo is content.
template <typename Draw>
void draw_page(cairo_surface_t* surface, const char* fn, Draw&& draw) {
  check(cairo_surface_status(surface), fn);
  ContextPtr cr = make_context(surface, fn);
  set_rgb(cr.get(), colors::kWhite);
  cairo_paint(cr.get());
  draw(cr.get());
  check(cairo_status(cr.get()), fn);
}

// The pixels of an RGB24 (or ARGB32, shown over white) image surface.
Image to_image(cairo_surface_t* surface) {
  cairo_surface_flush(surface);
  Image img;
  img.width = cairo_image_surface_get_width(surface);
  img.height = cairo_image_surface_get_height(surface);
  const int stride = cairo_image_surface_get_stride(surface);
  const unsigned char* data = cairo_image_surface_get_data(surface);
  const bool alpha = cairo_image_surface_get_format(surface) == CAIRO_FORMAT_ARGB32;
  img.rgb.resize(std::size_t(img.width) * std::size_t(img.height) * 3);
  for (int y = 0; y < img.height; ++y)
    for (int x = 0; x < img.width; ++x) {
      uint32_t px;  // native-endian 0xAARRGGBB, colours premultiplied by alpha
      std::memcpy(&px, data + std::size_t(y) * std::size_t(stride) + std::size_t(x) * 4, 4);
      const uint32_t under = alpha ? 255 - (px >> 24) : 0;
      uint8_t* out = &img.rgb[(std::size_t(y) * std::size_t(img.width) + std::size_t(x)) * 3];
      out[0] = uint8_t(((px >> 16) & 255) + under);
      out[1] = uint8_t(((px >> 8) & 255) + under);
      out[2] = uint8_t((px & 255) + under);
    }
  return img;
}

template <typename Draw>
Image rasterize(int width, int height, const char* fn, Draw&& draw) {
  SurfacePtr surface(cairo_image_surface_create(CAIRO_FORMAT_RGB24, width, height));
  draw_page(surface.get(), fn, draw);
  return to_image(surface.get());
}

// `s` with the XML special characters escaped (s is drawable text: valid UTF-8, no controls).
std::string xml_escaped(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// The picture `draw` paints on a width x height page, as a file of `format`. `title` (may be
// empty) becomes the SVG's <title> and the PDF's Title: cairo writes text as glyph outlines, so
// this is what a search or a screen reader finds.
template <typename Draw>
std::string encode_as(Format format, int width, int height, const std::string& title,
                      const char* fn, Draw&& draw) {
  std::string out;
  if (format == Format::kPng) {
    SurfacePtr surface(cairo_image_surface_create(CAIRO_FORMAT_RGB24, width, height));
    draw_page(surface.get(), fn, draw);
    check(cairo_surface_write_to_png_stream(surface.get(), append_to_string, &out), fn);
    return out;
  }
  SurfacePtr surface;
  if (format == Format::kSvg) {
    surface.reset(cairo_svg_surface_create_for_stream(append_to_string, &out, width, height));
    check(cairo_surface_status(surface.get()), fn);
    cairo_svg_surface_set_document_unit(surface.get(), CAIRO_SVG_UNIT_PX);
  } else {
    surface.reset(cairo_pdf_surface_create_for_stream(append_to_string, &out, width, height));
    check(cairo_surface_status(surface.get()), fn);
    cairo_pdf_surface_set_metadata(surface.get(), CAIRO_PDF_METADATA_CREATOR, "attn::plot");
    if (!title.empty())
      cairo_pdf_surface_set_metadata(surface.get(), CAIRO_PDF_METADATA_TITLE, title.c_str());
  }
  draw_page(surface.get(), fn, draw);
  cairo_surface_finish(surface.get());
  check(cairo_surface_status(surface.get()), fn);
  if (format == Format::kSvg && !title.empty()) {
    const std::size_t svg = out.find("<svg");
    const std::size_t end = svg == std::string::npos ? svg : out.find('>', svg);
    if (end != std::string::npos)
      out.insert(end + 1, "\n<title>" + xml_escaped(title) + "</title>");
  }
  return out;
}

}  // namespace

namespace internal {

double text_width(std::string_view s, double px, bool bold) {
  if (s.empty()) return 0;
  // One measuring context per thread (cairo contexts are not shared between threads).
  struct Measure {
    SurfacePtr surface{cairo_image_surface_create(CAIRO_FORMAT_A8, 1, 1)};
    ContextPtr cr = make_context(surface.get(), "plot::text_width");
  };
  thread_local Measure m;
  set_font(m.cr.get(), px, bold);
  const std::string t(s);
  cairo_text_extents_t e;
  cairo_text_extents(m.cr.get(), t.c_str(), &e);
  return e.x_advance;
}

}  // namespace internal

// ---- public API --------------------------------------------------------------------------------

Rgb Image::get(int x, int y) const {
  const std::size_t i = (std::size_t(y) * std::size_t(width) + std::size_t(x)) * 3;
  if (!contains(x, y) || i + 2 >= rgb.size())
    throw IndexError(detail::msg("plot::Image::get", "pixel (", x, ", ", y, ") is outside the ",
                                 width, "x", height, " image"));
  return {rgb[i], rgb[i + 1], rgb[i + 2]};
}

Format format_from_path(const std::string& path, const char* fn) {
  const std::size_t dot = path.find_last_of('.'), slash = path.find_last_of('/');
  std::string ext;
  if (dot != std::string::npos && (slash == std::string::npos || dot > slash))
    for (char c : path.substr(dot + 1)) ext += char(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  if (ext == "png") return Format::kPng;
  if (ext == "svg") return Format::kSvg;
  if (ext == "pdf") return Format::kPdf;
  fail(fn, "'", path, "': unknown image format; the file name must end in .png, .svg or .pdf");
}

Image decode_png(std::string_view bytes) {
  const char* fn = "plot::decode_png";
  struct Reader {
    std::string_view bytes;
    std::size_t pos = 0;
  } reader{bytes};
  auto read = [](void* closure, unsigned char* data, unsigned int length) {
    auto* r = static_cast<Reader*>(closure);
    if (length > r->bytes.size() - r->pos) return CAIRO_STATUS_READ_ERROR;
    std::memcpy(data, r->bytes.data() + r->pos, length);
    r->pos += length;
    return CAIRO_STATUS_SUCCESS;
  };
  if (bytes.size() < 8 || bytes.substr(0, 8) != std::string_view("\x89PNG\r\n\x1a\n", 8))
    fail(fn, "not a PNG (", bytes.size(), " bytes, bad signature)");
  SurfacePtr png(cairo_image_surface_create_from_png_stream(read, &reader));
  if (cairo_surface_status(png.get()) != CAIRO_STATUS_SUCCESS)
    fail(fn, "cannot decode the PNG: ", cairo_status_to_string(cairo_surface_status(png.get())));
  // Whatever cairo made of it (RGB, ARGB, A8, ...), painted over white.
  const int w = cairo_image_surface_get_width(png.get()),
            h = cairo_image_surface_get_height(png.get());
  return rasterize(w, h, fn, [&](cairo_t* cr) {
    cairo_set_source_surface(cr, png.get(), 0, 0);
    cairo_paint(cr);
  });
}

Image render(const LineChart& chart, int width, int height, ChartLayout* layout) {
  ChartLayout L = layout_chart(chart, width, height);
  Image img = rasterize(width, height, "plot::render",
                        [&](cairo_t* cr) { draw_chart(cr, chart, L, chart.legend); });
  if (layout) *layout = std::move(L);
  return img;
}

std::string encode(const LineChart& chart, Format format, int width, int height) {
  ChartLayout L = layout_chart(chart, width, height);
  return encode_as(format, width, height, internal::drawable(chart.title), "plot::encode",
                   [&](cairo_t* cr) { draw_chart(cr, chart, L, chart.legend); });
}

void save(const LineChart& chart, const std::string& path, int width, int height) {
  io::write_file_atomic(path, encode(chart, format_from_path(path, "plot::save"), width, height));
}

Image render(const Figure& figure, FigureLayout* layout) {
  internal::FigureGeometry g = internal::figure_geometry(figure);
  Image img = rasterize(figure.width, figure.height, "plot::render",
                        [&](cairo_t* cr) { draw_figure(cr, figure, g); });
  if (layout) *layout = std::move(g.L);
  return img;
}

std::string encode(const Figure& figure, Format format) {
  internal::FigureGeometry g = internal::figure_geometry(figure);
  const std::string title = internal::drawable(
      !figure.title.empty() || figure.charts.empty() ? figure.title : figure.charts[0].title);
  return encode_as(format, figure.width, figure.height, title, "plot::encode",
                   [&](cairo_t* cr) { draw_figure(cr, figure, g); });
}

void save(const Figure& figure, const std::string& path) {
  io::write_file_atomic(path, encode(figure, format_from_path(path, "plot::save")));
}

Image render_heatmap(const Heatmap& heatmap, int cell_px, HeatmapLayout* layout) {
  const internal::HeatmapGeometry g = internal::heatmap_geometry(heatmap, cell_px);
  Image img = rasterize(g.L.width, g.L.height, "plot::render_heatmap",
                        [&](cairo_t* cr) { draw_heatmap(cr, heatmap, g); });
  if (layout) *layout = g.L;
  return img;
}

std::string encode(const Heatmap& heatmap, Format format, int cell_px) {
  const internal::HeatmapGeometry g = internal::heatmap_geometry(heatmap, cell_px);
  return encode_as(format, g.L.width, g.L.height, g.title, "plot::encode",
                   [&](cairo_t* cr) { draw_heatmap(cr, heatmap, g); });
}

void save(const Heatmap& heatmap, const std::string& path, int cell_px) {
  io::write_file_atomic(path, encode(heatmap, format_from_path(path, "plot::save"), cell_px));
}

}  // namespace attn::plot

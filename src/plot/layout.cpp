// attn::plot geometry: colours, ticks, validation and where everything of a chart, a figure and a
// heatmap goes. Text is measured through render_cairo.cpp; nothing is drawn here.
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <utility>

#include "../common/error.h"
#include "internal.h"

namespace attn::plot {

using detail::fail;

// ---- colours -----------------------------------------------------------------------------------

Rgb palette(std::size_t i) {
  static constexpr std::array<Rgb, 8> kCycle = {{
      {0, 114, 178},    // blue
      {213, 94, 0},     // vermillion
      {0, 158, 115},    // green
      {204, 121, 167},  // pink
      {230, 159, 0},    // orange
      {86, 180, 233},   // sky
      {110, 110, 110},  // grey
      {150, 60, 20},    // brown
  }};
  return kCycle[i % kCycle.size()];
}

Rgb mix(Rgb a, Rgb b, double t) {
  if (!(t >= 0)) t = 0;  // NaN too
  if (t > 1) t = 1;
  auto lerp = [t](uint8_t u, uint8_t v) {
    return static_cast<uint8_t>(std::lround(double(u) + (double(v) - double(u)) * t));
  };
  return {lerp(a.r, b.r), lerp(a.g, b.g), lerp(a.b, b.b)};
}

Rgb colormap(double t) {
  if (std::isnan(t)) return {128, 128, 128};
  // Anchors chosen by eye: dark violet -> indigo -> teal -> green -> yellow, with a monotone
  // lightness ramp so the scale still reads in greyscale.
  static constexpr std::array<Rgb, 6> kStops = {
      {{66, 4, 82}, {62, 70, 136}, {40, 126, 142}, {34, 170, 128}, {120, 206, 86}, {250, 230, 40}}};
  t = std::clamp(t, 0.0, 1.0);
  const double pos = t * double(kStops.size() - 1);
  const std::size_t i = std::min<std::size_t>(std::size_t(pos), kStops.size() - 2);
  return mix(kStops[i], kStops[i + 1], pos - double(i));
}

// ---- ticks -------------------------------------------------------------------------------------

namespace {

// Removes "-0" and rounding noise: v rounded to a multiple of step / 1000.
double clean(double v, double step) {
  const double q = step / 1000;
  double r = std::round(v / q) * q;
  if (std::fabs(r) < q) r = 0;
  return r;
}

}  // namespace

std::vector<double> nice_ticks(double lo, double hi, int max_intervals, bool snap) {
  if (!std::isfinite(lo) || !std::isfinite(hi) || !(lo < hi) || !std::isfinite(hi - lo))
    fail("plot::nice_ticks", "need finite lo < hi, got ", lo, " and ", hi);
  max_intervals = std::max(max_intervals, 1);
  const double raw = (hi - lo) / max_intervals;
  double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (int decade = 0; decade < 4; ++decade, mag *= 10) {
    for (double m : {1.0, 2.0, 5.0}) {
      const double step = m * mag;
      if (step < raw * (1 - 1e-9)) continue;  // too many intervals
      // The tolerances keep a tick that lies (up to rounding) exactly on lo or hi.
      const double k0 = snap ? std::floor(lo / step + 1e-9) : std::ceil(lo / step - 1e-9);
      const double k1 = snap ? std::ceil(hi / step - 1e-9) : std::floor(hi / step + 1e-9);
      if (snap && k1 - k0 > max_intervals) continue;
      if (!std::isfinite(k0) || !std::isfinite(k1) || k1 - k0 > 1000) return {lo, hi};
      std::vector<double> ticks;
      for (double k = k0; k <= k1 + 0.5; k += 1) {
        const double v = clean(k * step, step);
        if (ticks.empty() || v > ticks.back()) ticks.push_back(v);
      }
      return ticks;
    }
  }
  return {lo, hi};
}

std::vector<double> log_ticks(double lo, double hi, int max_ticks) {
  if (!(lo > 0) || !(hi > lo) || !std::isfinite(hi))
    fail("plot::log_ticks", "need 0 < lo < hi, got ", lo, " and ", hi);
  max_ticks = std::max(max_ticks, 2);
  const double eps = 1e-9;
  // Powers of base^stride with exponent in [e0, e1].
  auto powers = [&](double base, double e0, double e1, int stride) {
    std::vector<double> t;
    double first = std::ceil(e0 / stride) * stride;
    for (double e = first; e <= e1; e += stride) t.push_back(std::pow(base, e));
    return t;
  };
  const double a2 = std::ceil(std::log2(lo) - eps), b2 = std::floor(std::log2(hi) + eps);
  const double a10 = std::ceil(std::log10(lo) - eps), b10 = std::floor(std::log10(hi) + eps);
  const double n2 = b2 - a2 + 1, n10 = b10 - a10 + 1;
  if (lo >= 1 - eps && n2 >= 2) {
    for (int stride = 1; stride <= 3; ++stride) {
      auto t = powers(2.0, a2, b2, stride);
      if (int(t.size()) <= max_ticks && t.size() >= 2) return t;
    }
  }
  if (n10 >= 3) {
    for (int stride = 1;; ++stride) {
      auto t = powers(10.0, a10, b10, stride);
      if (int(t.size()) <= max_ticks) return t;
    }
  }
  // Short ranges: 1, 2 and 5 times powers of ten.
  {
    std::vector<double> t;
    for (double e = a10 - 1; e <= b10; e += 1) {
      for (double m : {1.0, 2.0, 5.0}) {
        const double v = m * std::pow(10.0, e);
        if (v >= lo * (1 - eps) && v <= hi * (1 + eps)) t.push_back(v);
      }
    }
    if (t.size() >= 2 && int(t.size()) <= max_ticks) return t;
    if (t.size() > std::size_t(max_ticks) && n10 >= 2) return powers(10.0, a10, b10, 1);
  }
  return nice_ticks(lo, hi, std::max(max_ticks - 1, 1), false);
}

std::string format_tick(double v) {
  if (!std::isfinite(v)) return std::isnan(v) ? "nan" : (v > 0 ? "inf" : "-inf");
  if (v == 0) return "0";
  char buf[64];
  const double a = std::fabs(v);
  if (a >= 1e-4 && a < 1e9) {
    // The shortest of up to 6 significant digits that prints v back (for 1-2-5 ticks: exact).
    for (int prec = 1; prec <= 6; ++prec) {
      std::snprintf(buf, sizeof buf, "%.*g", prec, v);
      if (std::fabs(std::strtod(buf, nullptr) - v) <= a * 1e-9) break;
    }
    if (std::strchr(buf, 'e') == nullptr) return buf;
    // %g chose exponent form for a large integer: print it plainly.
    std::snprintf(buf, sizeof buf, "%.0f", v);
    return buf;
  }
  for (int prec = 1; prec <= 6; ++prec) {
    std::snprintf(buf, sizeof buf, "%.*g", prec, v);
    if (std::fabs(std::strtod(buf, nullptr) - v) <= a * 1e-9) break;
  }
  return buf;
}

// ---- validation --------------------------------------------------------------------------------

namespace {

constexpr const char* kRenderFn = "plot::render";

// Checks a dash pattern (see Series::dash); `what` names it in the message.
void check_dash(const std::vector<int>& dash, const char* fn, const std::string& what) {
  if (dash.empty()) return;
  if (dash.size() % 2 != 0 || dash.size() > 16)
    fail(fn, what, " must have an even number of lengths (2..16), got ", dash.size());
  for (std::size_t i = 0; i < dash.size(); ++i)
    if (dash[i] < 1 || dash[i] > 4096)
      fail(fn, what, ": length ", i, " is ", dash[i], ", expected 1..4096 pixels");
}

struct Range {
  double lo = std::numeric_limits<double>::infinity();
  double hi = -std::numeric_limits<double>::infinity();
  bool empty() const { return !(lo <= hi); }
  void add(double v) {
    lo = std::min(lo, v);
    hi = std::max(hi, v);
  }
};

void validate_size(int width, int height, const char* fn) {
  if (width < 64 || height < 64 || width > 8192 || height > 8192)
    fail(fn, "image size must be 64..8192 on each side, got ", width, "x", height);
}

// Fixed axis ends: finite, positive on a log axis, lo < hi.
void validate_ends(const char* lo_name, std::optional<double> lo, const char* hi_name,
                   std::optional<double> hi, bool log, const char* axis, const char* fn) {
  for (const auto& [name, v] : {std::pair{lo_name, lo}, std::pair{hi_name, hi}}) {
    if (!v) continue;
    if (!std::isfinite(*v)) fail(fn, name, " must be finite, got ", *v);
    if (log && *v <= 0) fail(fn, "log ", axis, " axis needs ", name, " > 0, got ", *v);
  }
  if (lo && hi && !(*lo < *hi))
    fail(fn, lo_name, " (", *lo, ") must be below ", hi_name, " (", *hi, ")");
}

// Everything but the image size.
void validate_content(const LineChart& chart, const char* fn) {
  if (chart.font_scale < 0 || chart.font_scale > 8)
    fail(fn, "font_scale must be 0..8, got ", chart.font_scale);
  for (std::size_t s = 0; s < chart.series.size(); ++s) {
    const Series& ser = chart.series[s];
    const std::string what = "series " + std::to_string(s) + " '" + ser.name + "'";
    if (ser.x.size() != ser.y.size())
      fail(fn, what, " has ", ser.x.size(), " x values but ", ser.y.size(), " y values");
    for (std::size_t i = 0; i < ser.x.size(); ++i) {
      if (chart.log_x && ser.x[i] <= 0)
        fail(fn, "log x axis needs positive values; series '", ser.name, "' has x[", i,
             "] = ", ser.x[i]);
      if (chart.log_y && ser.y[i] <= 0)
        fail(fn, "log y axis needs positive values; series '", ser.name, "' has y[", i,
             "] = ", ser.y[i]);
    }
    if (ser.line_width < 0 || ser.line_width > 8)
      fail(fn, what, ": line_width must be 0..8, got ", ser.line_width);
    if (ser.marker_size < 0 || ser.marker_size > 32)
      fail(fn, what, ": marker_size must be 0..32, got ", ser.marker_size);
    if (uint8_t(ser.marker_shape) > uint8_t(Marker::kDiamond))
      fail(fn, what, ": unknown marker shape ", int(ser.marker_shape));
    check_dash(ser.dash, fn, what + ": the dash pattern");
  }
  for (std::size_t r = 0; r < chart.reference_lines.size(); ++r) {
    const ReferenceLine& ref = chart.reference_lines[r];
    const std::string what = "reference line " + std::to_string(r) + " '" + ref.label + "'";
    if (!std::isfinite(ref.y)) fail(fn, what, ": y must be finite, got ", ref.y);
    if (chart.log_y && ref.y <= 0)
      fail(fn, what, ": log y axis needs a positive value, got ", ref.y);
    if (ref.line_width < 0 || ref.line_width > 8)
      fail(fn, what, ": line_width must be 0..8, got ", ref.line_width);
    check_dash(ref.dash, fn, what + ": the dash pattern");
  }
  validate_ends("y_min", chart.y_min, "y_max", chart.y_max, chart.log_y, "y", fn);
  validate_ends("x_min", chart.x_min, "x_max", chart.x_max, chart.log_x, "x", fn);
}

bool finite_point(const Series& s, std::size_t i) {
  return std::isfinite(s.x[i]) && std::isfinite(s.y[i]);
}

// Data range of one axis: widened when degenerate, padded by 5% (in log space for a log axis) at
// the ends that y_min / y_max do not fix.
struct AxisSpec {
  double lo, hi;
  std::vector<double> ticks;
};

AxisSpec make_axis(Range r, bool log, std::optional<double> fix_lo, std::optional<double> fix_hi,
                   int max_intervals) {
  if (fix_lo) r.lo = *fix_lo, r.hi = std::max(r.hi, *fix_lo);
  if (fix_hi) r.hi = *fix_hi, r.lo = std::min(r.lo, *fix_hi);
  if (r.empty()) r = log ? Range{1, 10} : Range{0, 1};
  if (fix_lo && fix_hi) {
    r.lo = *fix_lo;
    r.hi = *fix_hi;
  }
  if (log) {
    double a = std::log10(r.lo), b = std::log10(r.hi);
    if (!(a < b)) {
      if (fix_lo)
        b = a + 1;
      else if (fix_hi)
        a = b - 1;
      else
        a -= 0.5, b += 0.5;
    }
    const double pad = (b - a) * 0.05;
    if (!fix_lo) a -= pad;
    if (!fix_hi) b += pad;
    AxisSpec ax{std::pow(10.0, a), std::pow(10.0, b), {}};
    if (fix_lo || !(ax.lo > 0)) ax.lo = fix_lo ? *fix_lo : r.lo;
    if (fix_hi || !std::isfinite(ax.hi)) ax.hi = fix_hi ? *fix_hi : r.hi;
    if (!(ax.lo > 0) || !(ax.lo < ax.hi) || !std::isfinite(ax.hi))
      fail(kRenderFn, "cannot plot the log axis range ", r.lo, " .. ", r.hi);
    ax.ticks = log_ticks(ax.lo, ax.hi, max_intervals + 1);
    return ax;
  }
  if (!(r.lo < r.hi)) {
    const double d = r.lo == 0 ? 1.0 : std::fabs(r.lo) * 0.1;
    if (fix_lo)
      r.hi = r.lo + d;
    else if (fix_hi)
      r.lo = r.hi - d;
    else
      r.lo -= d, r.hi += d;
  }
  if (!std::isfinite(r.hi - r.lo))
    fail(kRenderFn, "cannot plot the axis range ", r.lo, " .. ", r.hi);
  // A margin of 5% on each free end keeps points off the axes.
  const double pad = (r.hi - r.lo) * 0.05;
  AxisSpec ax{fix_lo ? r.lo : r.lo - pad, fix_hi ? r.hi : r.hi + pad, {}};
  if (!std::isfinite(ax.lo) || !std::isfinite(ax.hi)) ax.lo = r.lo, ax.hi = r.hi;
  ax.ticks = nice_ticks(ax.lo, ax.hi, max_intervals, false);
  return ax;
}

std::vector<std::string> labels_for(const std::vector<double>& ticks) {
  std::vector<std::string> out;
  for (double t : ticks) out.push_back(format_tick(t));
  return out;
}

double default_line_width(double) { return 2.0; }
double default_marker_size(double s) { return std::max(3.0, 0.3 * s); }

}  // namespace

// ---- text --------------------------------------------------------------------------------------

namespace internal {

std::string drawable(std::string_view s, std::size_t max_chars) {
  static constexpr const char* kReplacement = "\xEF\xBF\xBD";  // U+FFFD
  std::string out;
  std::vector<std::size_t> starts;  // where each character begins in `out`
  std::size_t i = 0;
  while (i < s.size() && starts.size() <= max_chars) {
    const auto b = static_cast<unsigned char>(s[i]);
    std::size_t len = b < 0x80                 ? 1
                      : b >= 0xC2 && b <= 0xDF ? 2
                      : b >= 0xE0 && b <= 0xEF ? 3
                      : b >= 0xF0 && b <= 0xF4 ? 4
                                               : 0;
    uint32_t cp = len == 1 ? b : len == 2 ? b & 0x1Fu : len == 3 ? b & 0x0Fu : b & 0x07u;
    bool ok = len > 0 && i + len <= s.size();
    for (std::size_t k = 1; ok && k < len; ++k) {
      const auto c = static_cast<unsigned char>(s[i + k]);
      ok = (c & 0xC0) == 0x80;
      cp = (cp << 6) | (c & 0x3Fu);
    }
    // Overlong forms, surrogates and code points beyond U+10FFFF are not UTF-8.
    if (ok && len == 3 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) ok = false;
    if (ok && len == 4 && (cp < 0x10000 || cp > 0x10FFFF)) ok = false;
    starts.push_back(out.size());
    if (!ok) {
      out += kReplacement;
      ++i;
      continue;
    }
    const bool control = cp < 0x20 || (cp >= 0x7F && cp < 0xA0);
    out += control ? std::string_view(kReplacement) : s.substr(i, len);
    i += len;
  }
  if (starts.size() > max_chars)
    out = out.substr(0, starts[std::max<std::size_t>(max_chars, 2) - 2]) + "..";
  return out;
}

double auto_font_px(double width, double height) {
  return std::clamp(std::round(std::min(width / 57, height / 36)), 9.0, 28.0);
}

std::vector<LegendEntry> legend_entries(const LineChart& chart, double s) {
  std::vector<LegendEntry> out;
  for (std::size_t i = 0; i < chart.series.size(); ++i) {
    const Series& ser = chart.series[i];
    if (ser.name.empty()) continue;
    LegendEntry e;
    e.name = drawable(ser.name);
    e.color = ser.color.value_or(palette(i));
    e.markers = ser.markers;
    e.shape = ser.marker_shape;
    e.marker_size = ser.marker_size ? ser.marker_size : default_marker_size(s);
    e.line_width = ser.line_width ? ser.line_width : default_line_width(s);
    e.dash = ser.dash;
    out.push_back(std::move(e));
  }
  return out;
}

double legend_sample_w(double s, const std::vector<LegendEntry>& entries) {
  double w = 2.2 * s;
  for (const LegendEntry& e : entries)
    if (!e.dash.empty()) w = 3.2 * s;  // room for a couple of dashes
  return std::round(w);
}

// ---- charts ------------------------------------------------------------------------------------

ChartLayout chart_layout_in(const LineChart& chart, PixelRect box, double s, bool legend) {
  ChartLayout L;
  L.box = box;
  L.width = box.right - box.left + 1;
  L.height = box.bottom - box.top + 1;
  L.log_x = chart.log_x;
  L.log_y = chart.log_y;
  L.font_px = s;
  L.line_width = default_line_width(s);
  L.marker_size = default_marker_size(s);
  L.reference_labels.assign(chart.reference_lines.size(), PixelRect{});
  const double pad = std::max(4.0, 0.6 * s), tick = std::max(3.0, 0.4 * s), line = kLine * s;

  Range rx, ry;
  for (const Series& ser : chart.series)
    for (std::size_t i = 0; i < ser.x.size(); ++i)
      if (finite_point(ser, i)) rx.add(ser.x[i]), ry.add(ser.y[i]);
  for (const ReferenceLine& ref : chart.reference_lines) ry.add(ref.y);

  // Vertical layout first: it fixes the y ticks, whose labels fix the left margin.
  const double top = box.top + pad + (chart.title.empty() ? 0.5 * s : kLine * 1.15 * s + 0.4 * s);
  const double bottom =
      box.bottom + 1 - pad - (chart.x_label.empty() ? 0 : line + 0.15 * s) - line - 0.2 * s - tick;
  L.plot_top = int(std::ceil(top));
  L.plot_bottom = std::max(int(std::floor(bottom)) - 1, L.plot_top + 8);
  const int plot_h = L.plot_bottom - L.plot_top;
  const int y_intervals = std::clamp(int(plot_h / (3.5 * s)), 1, 10);
  AxisSpec ay = make_axis(ry, chart.log_y, chart.y_min, chart.y_max, y_intervals);
  L.y_lo = ay.lo;
  L.y_hi = ay.hi;
  L.y_ticks = ay.ticks;
  L.y_tick_labels = labels_for(L.y_ticks);
  double label_w = 0;
  for (const auto& lab : L.y_tick_labels) label_w = std::max(label_w, text_width(lab, s));
  L.plot_left = int(std::ceil(box.left + pad + (chart.y_label.empty() ? 0 : line + 0.3 * s) +
                              label_w + 0.35 * s + tick));
  L.plot_right = std::max(box.right - int(std::ceil(std::max(pad, s))), L.plot_left + 8);

  // x ticks: as many as fit without their labels touching; the last label must not stick out of
  // the box (then the data area is narrowed once).
  for (int pass = 0; pass < 2; ++pass) {
    const int plot_w = L.plot_right - L.plot_left;
    int x_intervals = std::clamp(int(plot_w / (5 * s)), 1, 10);
    double widest = 0;
    while (true) {
      AxisSpec ax = make_axis(rx, chart.log_x, chart.x_min, chart.x_max, x_intervals);
      L.x_lo = ax.lo;
      L.x_hi = ax.hi;
      L.x_ticks = ax.ticks;
      L.x_tick_labels = labels_for(L.x_ticks);
      widest = 0;
      for (const auto& lab : L.x_tick_labels) widest = std::max(widest, text_width(lab, s));
      double min_gap = std::numeric_limits<double>::infinity();
      for (std::size_t i = 1; i < L.x_ticks.size(); ++i)
        min_gap = std::min(min_gap, L.x_to_px(L.x_ticks[i]) - L.x_to_px(L.x_ticks[i - 1]));
      if (x_intervals <= 1 || min_gap >= widest + s) break;
      --x_intervals;
    }
    if (L.x_ticks.empty()) break;
    const double overhang = L.x_to_px(L.x_ticks.back()) +
                            text_width(L.x_tick_labels.back(), s) / 2 - (box.right + 1 - pad / 2);
    if (overhang <= 0 || L.plot_right - int(std::ceil(overhang)) < L.plot_left + 8) break;
    L.plot_right -= int(std::ceil(overhang));
  }

  const auto entries = legend ? legend_entries(chart, s) : std::vector<LegendEntry>{};
  if (!entries.empty()) {
    double name_w = 0;
    for (const auto& e : entries) name_w = std::max(name_w, text_width(e.name, s));
    const double w = 0.6 * s + legend_sample_w(s, entries) + 0.5 * s + name_w + 0.7 * s;
    const double h = double(entries.size()) * legend_row_h(s) + 0.5 * s;
    const int gap = int(std::round(0.6 * s));
    L.legend.right = L.plot_right - gap;
    L.legend.left = L.legend.right - int(std::ceil(w));
    L.legend.top = L.plot_top + gap;
    L.legend.bottom = L.legend.top + int(std::ceil(h));
  }
  return L;
}

}  // namespace internal

double ChartLayout::x_to_px(double x) const {
  const double a = log_x ? std::log10(x) : x;
  const double lo = log_x ? std::log10(x_lo) : x_lo, hi = log_x ? std::log10(x_hi) : x_hi;
  return plot_left + 0.5 + (a - lo) / (hi - lo) * double(plot_right - plot_left);
}

double ChartLayout::y_to_px(double y) const {
  const double a = log_y ? std::log10(y) : y;
  const double lo = log_y ? std::log10(y_lo) : y_lo, hi = log_y ? std::log10(y_hi) : y_hi;
  return plot_bottom + 0.5 - (a - lo) / (hi - lo) * double(plot_bottom - plot_top);
}

ChartLayout layout_chart(const LineChart& chart, int width, int height) {
  validate_size(width, height, kRenderFn);
  validate_content(chart, kRenderFn);
  const double s = chart.font_scale ? internal::scale_font_px(chart.font_scale)
                                    : internal::auto_font_px(width, height);
  return internal::chart_layout_in(chart, PixelRect{0, 0, width - 1, height - 1}, s, chart.legend);
}

// ---- figures -----------------------------------------------------------------------------------

namespace internal {

FigureGeometry figure_geometry(const Figure& f) {
  const char* fn = kRenderFn;
  const int64_t n = int64_t(f.charts.size());
  if (n < 1 || n > 64) fail(fn, "a figure needs 1..64 charts, got ", n);
  if (f.columns < 0 || f.columns > 64) fail(fn, "columns must be 0..64, got ", f.columns);
  validate_size(f.width, f.height, fn);
  if (f.font_scale < 0 || f.font_scale > 8) fail(fn, "font_scale must be 0..8, got ", f.font_scale);
  if (uint8_t(f.legend) > uint8_t(LegendPlacement::kNone))
    fail(fn, "unknown legend placement ", int(f.legend));
  for (int64_t i = 0; i < n; ++i) {
    try {
      validate_content(f.charts[std::size_t(i)], fn);
    } catch (const Error& e) {
      const std::string what = e.what();
      const std::string prefix = std::string("[") + fn + "] ";
      fail(fn, "chart ", i, ": ", what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what);
    }
  }

  FigureGeometry g;
  FigureLayout& L = g.L;
  L.width = f.width;
  L.height = f.height;
  const int cols = int(f.columns == 0 ? n : std::min<int64_t>(f.columns, n));
  const int rows = int((n + cols - 1) / cols);
  L.columns = cols;
  L.rows = rows;
  const double s = f.font_scale ? scale_font_px(f.font_scale)
                                : auto_font_px(double(f.width) / cols, double(f.height) / rows);
  L.font_px = s;
  const double m = std::max(4.0, 0.6 * s);
  int top = 0, bottom = f.height - 1;  // the rows left for the panels

  if (!f.title.empty()) {
    g.title_px = std::round(1.25 * s);
    const double tw = text_width(drawable(f.title), g.title_px, true);
    L.title.left = int(std::max(m, (f.width - tw) / 2));
    L.title.top = int(std::round(m));
    L.title.right = L.title.left + int(std::ceil(tw)) - 1;
    L.title.bottom = L.title.top + int(std::ceil(kLine * g.title_px)) - 1;
    top = L.title.bottom + 1;
  }
  if (!f.footer.empty()) {
    g.footer_px = std::max(8.0, std::round(0.8 * s));
    const double tw = text_width(drawable(f.footer), g.footer_px);
    L.footer.right = f.width - 1 - int(std::round(m));
    L.footer.left = L.footer.right - int(std::ceil(tw)) + 1;
    L.footer.bottom = bottom - int(std::round(m / 2));
    L.footer.top = L.footer.bottom - int(std::ceil(kLine * g.footer_px)) + 1;
    bottom = L.footer.top - 1;
  }
  if (f.legend == LegendPlacement::kBelow) {
    for (const LineChart& c : f.charts)
      for (LegendEntry& e : legend_entries(c, s))
        if (std::find(g.entries.begin(), g.entries.end(), e) == g.entries.end())
          g.entries.push_back(std::move(e));
  }
  if (!g.entries.empty()) {
    // As many columns as fit, each as wide as its widest entry.
    g.sample_w = legend_sample_w(s, g.entries);
    const std::size_t n_entries = g.entries.size();
    std::vector<double> entry_w;
    for (const LegendEntry& e : g.entries)
      entry_w.push_back(std::ceil(g.sample_w + 0.5 * s + text_width(e.name, s)));
    const double col_gap = std::round(1.5 * s), avail = f.width - 2 * m;
    std::vector<double> col_w;
    for (std::size_t ncols = n_entries; ncols >= 1; --ncols) {
      col_w.assign(ncols, 0.0);
      for (std::size_t i = 0; i < n_entries; ++i)
        col_w[i % ncols] = std::max(col_w[i % ncols], entry_w[i]);
      double total = col_gap * double(ncols - 1);
      for (double w : col_w) total += w;
      if (total <= avail || ncols == 1) break;
    }
    const std::size_t ncols = col_w.size(), nrows = (n_entries + ncols - 1) / ncols;
    std::vector<double> col_x(ncols, 0.0);  // from the legend's left edge
    for (std::size_t c = 1; c < ncols; ++c) col_x[c] = col_x[c - 1] + col_w[c - 1] + col_gap;
    const double total_w = col_x.back() + col_w.back();
    const double rh = legend_row_h(s);
    L.legend.left = int(std::max(m, (f.width - total_w) / 2));
    L.legend.right = L.legend.left + int(std::ceil(total_w)) - 1;
    L.legend.bottom = bottom - int(std::round(m / 2));
    L.legend.top = L.legend.bottom - int(std::ceil(double(nrows) * rh)) + 1;
    bottom = L.legend.top - 1;
    for (std::size_t i = 0; i < n_entries; ++i) {
      const int x = L.legend.left + int(col_x[i % ncols]);
      const int cy = L.legend.top + int(double(i / ncols) * rh + rh / 2);
      const LegendEntry& e = g.entries[i];
      const int half =
          1 +
          int(std::ceil(std::max({e.line_width / 2, e.markers ? e.marker_size : 0.0, 0.3 * s})));
      L.legend_samples.push_back(PixelRect{x, cy - half, x + int(g.sample_w) - 1, cy + half});
      L.legend_names.push_back(e.name);
    }
  }

  const int area_h = bottom - top + 1;
  const int panel_w = f.width / cols, panel_h = area_h / rows;
  if (panel_w < 64 || panel_h < 64)
    fail(fn, "the ", cols, " x ", rows, " panels would be ", panel_w, " x ", std::max(panel_h, 0),
         " pixels each (at least 64 x 64); make the figure larger (", f.width, " x ", f.height,
         ") or use fewer columns");
  for (int64_t i = 0; i < n; ++i) {
    const int c = int(i % cols), r = int(i / cols);
    PixelRect box;
    box.left = c * panel_w;
    box.right = c == cols - 1 ? f.width - 1 : box.left + panel_w - 1;
    box.top = top + r * panel_h;
    box.bottom = r == rows - 1 ? bottom : box.top + panel_h - 1;
    L.panels.push_back(box);
    const LineChart& chart = f.charts[std::size_t(i)];
    L.charts.push_back(
        chart_layout_in(chart, box, s, chart.legend && f.legend == LegendPlacement::kInside));
  }
  return g;
}

}  // namespace internal

FigureLayout layout_figure(const Figure& figure) { return internal::figure_geometry(figure).L; }

// ---- heatmaps ----------------------------------------------------------------------------------

namespace internal {

HeatmapGeometry heatmap_geometry(const Heatmap& h, int cell_px) {
  const char* fn = "plot::layout_heatmap";
  if (h.panels.empty()) fail(fn, "no panels");
  if (h.row_labels.empty() || h.col_labels.empty())
    fail(fn, "need at least one row and one column, got ", h.row_labels.size(), " row labels and ",
         h.col_labels.size(), " column labels");
  if (h.panels.size() > 256) fail(fn, h.panels.size(), " panels (at most 256)");
  const int64_t rows = int64_t(h.row_labels.size()), cols = int64_t(h.col_labels.size());
  if (rows > 16384 || cols > 16384) fail(fn, rows, " x ", cols, " cells is too large");
  for (std::size_t p = 0; p < h.panels.size(); ++p)
    if (int64_t(h.panels[p].values.size()) != rows * cols)
      fail(fn, "panel ", p, " has ", h.panels[p].values.size(), " values, expected ", rows, " x ",
           cols, " = ", rows * cols, " (one per row label times one per column label)");
  if (cell_px != 0 && (cell_px < 1 || cell_px > 256))
    fail(fn, "cell_px ", cell_px, " is outside 1..256 (or 0 for automatic)");
  if (h.columns < 0 || h.columns > 64) fail(fn, "columns must be 0..64, got ", h.columns);
  if ((h.vmin && !std::isfinite(*h.vmin)) || (h.vmax && !std::isfinite(*h.vmax)))
    fail(fn, "vmin and vmax must be finite");
  if (h.vmin && h.vmax && !(*h.vmin < *h.vmax))
    fail(fn, "vmin (", *h.vmin, ") must be less than vmax (", *h.vmax, ")");

  HeatmapGeometry g;
  HeatmapLayout& L = g.L;
  // The value range: fixed ends as given, the others from the finite values.
  double lo = std::numeric_limits<double>::infinity(), hi = -lo;
  for (const HeatmapPanel& p : h.panels)
    for (double v : p.values)
      if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  if (!(lo <= hi)) lo = 0, hi = 1;  // no finite value
  if (h.vmin) lo = *h.vmin;
  if (h.vmax) hi = *h.vmax;
  if (!(lo < hi)) {
    if (h.vmin && !h.vmax) {
      hi = lo + 1;
    } else if (h.vmax && !h.vmin) {
      lo = hi - 1;
    } else {  // all values equal
      const double half = 0.5 * std::max(1.0, std::fabs(lo));
      lo -= half;
      hi += half;
    }
  }
  L.vmin = lo;
  L.vmax = hi;
  L.rows = int(rows);
  L.cols = int(cols);
  const int64_t cp = cell_px ? cell_px : std::clamp<int64_t>(400 / std::max(rows, cols), 12, 64);
  L.cell_px = int(cp);
  const double s = cp >= 28 ? 14 : 11;
  L.font_px = s;
  g.title_px = std::round(1.3 * s);
  g.panel_title_px = std::round(1.1 * s);
  const double line = kLine * s;
  const int64_t pad = int64_t(std::round(0.45 * s)), margin = int64_t(std::round(0.9 * s));
  g.pad = int(pad);
  g.label_step = int(std::ceil(1.1 * s / double(cp)));

  for (const std::string& r : h.row_labels) g.rows.push_back(drawable(r, kHeatmapLabelChars));
  for (const std::string& c : h.col_labels) g.cols.push_back(drawable(c, kHeatmapLabelChars));
  g.title = drawable(h.title, 200);
  g.x_label = drawable(h.x_label, 200);
  g.y_label = drawable(h.y_label, 200);
  auto width_of = [](const std::string& t, double px, bool bold = false) {
    return int64_t(std::ceil(text_width(t, px, bold)));
  };
  int64_t rl = 0, cl = 0;
  for (const std::string& r : g.rows) rl = std::max(rl, width_of(r, s));
  for (const std::string& c : g.cols) cl = std::max(cl, width_of(c, s));
  bool any_title = false;
  int64_t panel_title_w = 0;
  for (const HeatmapPanel& p : h.panels) {
    g.panel_titles.push_back(drawable(p.title, 200));
    any_title = any_title || !p.title.empty();
    panel_title_w =
        std::max(panel_title_w, width_of(g.panel_titles.back(), g.panel_title_px, true));
  }
  const int64_t pt = any_title ? int64_t(std::ceil(kLine * g.panel_title_px)) + 2 * pad : 0;
  const int64_t gw = cols * cp, gh = rows * cp;
  const int64_t block_w = std::max(rl + 2 * pad + gw, panel_title_w + 2 * pad);
  const int64_t block_h = pt + gh + 2 * pad + cl;
  const int64_t n = int64_t(h.panels.size());
  const int64_t per_row = std::min<int64_t>(n, h.columns ? h.columns : 4),
                nrow = (n + per_row - 1) / per_row;
  const int64_t gap = int64_t(std::round(1.6 * s));
  const int64_t title_band = g.title.empty() ? 0 : int64_t(std::ceil(kLine * g.title_px)) + 2 * pad;
  const int64_t ylabel_band = g.y_label.empty() ? 0 : int64_t(std::ceil(line)) + 2 * pad;
  const int64_t xlabel_band = g.x_label.empty() ? 0 : int64_t(std::ceil(line)) + 2 * pad;

  // Colour bar ticks and their labels.
  L.ticks = nice_ticks(lo, hi, 5, false);
  int64_t tick_w = 0;
  for (double v : L.ticks) {
    L.tick_labels.push_back(format_tick(v));
    tick_w = std::max(tick_w, width_of(L.tick_labels.back(), s));
  }
  const int64_t bar_w = int64_t(std::round(1.1 * s)), bar_h = std::max<int64_t>(gh, 9 * int64_t(s));

  const int64_t panels_w = per_row * block_w + (per_row - 1) * gap;
  const int64_t panels_h = nrow * block_h + (nrow - 1) * gap;
  const int64_t left0 = margin + ylabel_band, top0 = margin + title_band;
  const int64_t bar_left = left0 + panels_w + gap;
  int64_t width = bar_left + bar_w + int64_t(std::ceil(0.8 * s)) + tick_w + margin;
  if (!g.title.empty()) width = std::max(width, 2 * margin + width_of(g.title, g.title_px, true));
  const int64_t body_h = std::max(panels_h, pt + bar_h + int64_t(std::ceil(line / 2)));
  const int64_t height = top0 + std::max(body_h, panels_h + xlabel_band) + margin;
  if (width > 16384 || height > 16384)
    fail(fn, "the image would be ", width, " x ", height,
         " pixels (at most 16384 each way); use fewer tokens or a smaller cell_px");
  L.width = int(width);
  L.height = int(height);

  for (int64_t p = 0; p < n; ++p) {
    const int64_t bx = left0 + (p % per_row) * (block_w + gap);
    const int64_t by = top0 + (p / per_row) * (block_h + gap);
    PixelRect grid;
    grid.left = int(bx + block_w - gw);
    grid.top = int(by + pt);
    grid.right = int(grid.left + gw - 1);
    grid.bottom = int(grid.top + gh - 1);
    L.grids.push_back(grid);
    PixelRect title;
    const std::string& t = g.panel_titles[std::size_t(p)];
    if (!t.empty()) {
      const int tw = int(width_of(t, g.panel_title_px, true));
      title.left = std::max(int(bx), grid.left + int(gw - tw) / 2);
      title.top = int(by + pad);
      title.right = title.left + tw - 1;
      title.bottom = title.top + int(std::ceil(kLine * g.panel_title_px)) - 1;
    }
    L.titles.push_back(title);
  }
  L.colorbar.left = int(bar_left);
  L.colorbar.top = int(top0 + pt);
  L.colorbar.right = int(bar_left + bar_w - 1);
  L.colorbar.bottom = int(top0 + pt + bar_h - 1);
  for (double v : L.ticks) {
    const double t = (v - lo) / (hi - lo);
    L.tick_y.push_back(L.colorbar.bottom -
                       int(std::lround(t * double(L.colorbar.bottom - L.colorbar.top))));
  }
  g.title_y = double(margin) + kLine * g.title_px / 2;
  // The axis names: centred on the span of the grids (labels and titles aside).
  int grids_right = 0;
  for (const PixelRect& grid : L.grids) grids_right = std::max(grids_right, grid.right);
  g.xlabel_x = (L.grids.front().left + grids_right + 1) / 2.0;
  g.xlabel_y = double(top0 + panels_h + pad) + line / 2;
  g.ylabel_x = double(margin) + line / 2;
  g.ylabel_y = (L.grids.front().top + L.grids.back().bottom + 1) / 2.0;
  return g;
}

}  // namespace internal

PixelRect HeatmapLayout::cell(std::size_t panel, int row, int col) const {
  if (panel >= grids.size() || row < 0 || row >= rows || col < 0 || col >= cols)
    throw IndexError(detail::msg("plot::HeatmapLayout::cell", "cell (", panel, ", ", row, ", ", col,
                                 ") is outside ", grids.size(), " panels of ", rows, " x ", cols));
  const PixelRect& g = grids[panel];
  PixelRect r;
  r.left = g.left + col * cell_px;
  r.top = g.top + row * cell_px;
  r.right = r.left + cell_px - 1;
  r.bottom = r.top + cell_px - 1;
  return r;
}

Rgb HeatmapLayout::color_of(double v) const {
  if (std::isnan(v)) return colormap(v);
  return colormap((v - vmin) / (vmax - vmin));
}

HeatmapLayout layout_heatmap(const Heatmap& heatmap, int cell_px) {
  return internal::heatmap_geometry(heatmap, cell_px).L;
}

}  // namespace attn::plot

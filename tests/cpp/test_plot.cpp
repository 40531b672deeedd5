// Tests for attn::plot: the output formats (PNG read back, SVG well-formed and titled, PDF with a
// page, its title and the DejaVu font), ticks, line charts and figures checked by what the
// pictures show (the series' colour near where the data say and nowhere far from them, dashes
// and markers of the right shape, ink where the labels go), and the JSON form of figures.
// Anti-aliasing is allowed for: colours are compared with a tolerance. Heatmaps: test_heatmap.cpp.
#include <attn/io.h>
#include <attn/plot.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "plot_util.h"
#include "test_util.h"

namespace attn::plot {
namespace {

using attn::testing::error_of;
using attn::testing::TempDir;
using namespace attn::plot::pixels;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr Rgb kRed{255, 0, 0};
constexpr Rgb kBlue{0, 0, 255};
constexpr Rgb kGreen{0, 160, 0};

Series series(std::vector<double> x, std::vector<double> y, Rgb c, std::string name = "") {
  Series s;
  s.name = std::move(name);
  s.x = std::move(x);
  s.y = std::move(y);
  s.color = c;
  return s;
}

// Pixels close to colour c (within tol) whose centres lie farther than `d` pixels from the
// polyline through the data points (xs, ys) as the layout maps them.
int far_from_polyline(const Image& img, const ChartLayout& L, const std::vector<double>& xs,
                      const std::vector<double>& ys, Rgb c, double d, int tol = 60) {
  int n = 0;
  for (int y = 0; y < img.height; ++y)
    for (int x = 0; x < img.width; ++x) {
      if (!close(img.get(x, y), c, tol)) continue;
      double best = std::numeric_limits<double>::infinity();
      for (std::size_t i = 0; i + 1 < xs.size(); ++i)
        best = std::min(best, segment_distance(x + 0.5, y + 0.5, L.x_to_px(xs[i]), L.y_to_px(ys[i]),
                                               L.x_to_px(xs[i + 1]), L.y_to_px(ys[i + 1])));
      n += best > d;
    }
  return n;
}

// Whether arc length a falls in an "on" part of a dash pattern, at least `margin` pixels from the
// ends of that part (1), in an "off" part as far from its ends (0), or near a boundary (-1).
int dash_phase(const std::vector<int>& dash, double a, double margin = 1.0) {
  int period = 0;
  for (int d : dash) period += d;
  double m = std::fmod(a, period);
  if (m < 0) m += period;
  for (std::size_t i = 0; i < dash.size(); ++i) {
    if (m < dash[i]) return m >= margin && m <= dash[i] - margin ? int(i % 2 == 0) : -1;
    m -= dash[i];
  }
  return -1;
}

// ---- colours
// ---------------------------------------------------------------------------------------

TEST(PlotColor, PaletteAndColormap) {
  EXPECT_EQ(palette(0), palette(8));
  EXPECT_NE(palette(0), palette(1));
  EXPECT_EQ(mix(kRed, kBlue, 0.0), kRed);
  EXPECT_EQ(mix(kRed, kBlue, 1.0), kBlue);
  EXPECT_EQ(mix(Rgb{0, 0, 0}, Rgb{200, 100, 50}, 0.5), (Rgb{100, 50, 25}));
  EXPECT_EQ(colormap(-3), colormap(0));
  EXPECT_EQ(colormap(7), colormap(1));
  EXPECT_EQ(colormap(kNaN), (Rgb{128, 128, 128}));
  // Luma increases along the scale.
  double prev = -1;
  for (int i = 0; i <= 50; ++i) {
    const Rgb c = colormap(i / 50.0);
    const double luma = 0.299 * c.r + 0.587 * c.g + 0.114 * c.b;
    EXPECT_GT(luma, prev) << i;
    prev = luma;
  }
}

// ---- output formats
// --------------------------------------------------------------------------------

LineChart loss_chart() {
  LineChart c;
  c.title = "loss & <accuracy>";
  c.x_label = "step";
  c.y_label = "loss";
  c.series.push_back(series({0, 100, 200, 300}, {4.0, 2.5, 2.0, 1.8}, kRed, "train"));
  c.series.push_back(series({0, 100, 200, 300}, {4.1, 2.8, 2.4, 2.3}, kBlue, "val"));
  return c;
}

TEST(PlotFormat, FromThePathsExtension) {
  EXPECT_EQ(format_from_path("a.png"), Format::kPng);
  EXPECT_EQ(format_from_path("dir.d/b.SVG"), Format::kSvg);
  EXPECT_EQ(format_from_path("/tmp/x.y.Pdf"), Format::kPdf);
  for (const std::string bad : {"a.jpg", "a", "png", "a.png.txt", "dir.png/file", "a.", ""})
    EXPECT_EQ(error_of([&] { format_from_path(bad, "plot::save"); }),
              "[plot::save] '" + bad +
                  "': unknown image format; the file name must end in .png, .svg or .pdf")
        << bad;
}

TEST(PlotFormat, PngSvgAndPdfOfTheSameChart) {
  const LineChart chart = loss_chart();
  // PNG: the pixels render() gives.
  const std::string png = encode(chart, Format::kPng, 640, 400);
  EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
  const Image img = decode_png(png);
  EXPECT_EQ(img.width, 640);
  EXPECT_EQ(img.height, 400);
  EXPECT_EQ(img.rgb, render(chart, 640, 400).rgb);
  // SVG: well-formed XML of the chart's size in pixels, titled (text itself is drawn as glyph
  // outlines), with the series' colours as stroke colours.
  const std::string svg = encode(chart, Format::kSvg, 640, 400);
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_NE(svg.find("width=\"640px\" height=\"400px\""), std::string::npos) << svg.substr(0, 300);
  EXPECT_NE(svg.find("<title>loss &amp; &lt;accuracy&gt;</title>"), std::string::npos);
  EXPECT_NE(svg.find("rgb(100%,0%,0%)"), std::string::npos);
  EXPECT_NE(svg.find("rgb(0%,0%,100%)"), std::string::npos);
  EXPECT_NE(svg.find("<path"), std::string::npos);
  // PDF: one page of 640 x 400 points, the title in its metadata, DejaVu Sans embedded.
  const std::string pdf = encode(chart, Format::kPdf, 640, 400);
  EXPECT_EQ(pdf.rfind("%PDF-1.", 0), 0u);
  EXPECT_NE(pdf.find("%%EOF", pdf.size() - 8), std::string::npos);
  EXPECT_NE(pdf.find("/Type /Page"), std::string::npos);
  EXPECT_NE(pdf.find("/Count 1"), std::string::npos);
  EXPECT_NE(pdf.find("/MediaBox [ 0 0 640 400 ]"), std::string::npos);
  std::string title_hex = "FEFF";  // UTF-16BE with a byte order mark, as cairo writes it
  for (char ch : chart.title) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "00%02X", unsigned(static_cast<unsigned char>(ch)));
    title_hex += buf;
  }
  EXPECT_TRUE(pdf.find("/Title <" + title_hex + ">") != std::string::npos ||
              pdf.find("/Title (" + chart.title + ")") != std::string::npos);
  EXPECT_NE(pdf.find("DejaVuSans"), std::string::npos);
  // No title: no <title>.
  LineChart untitled = chart;
  untitled.title.clear();
  EXPECT_EQ(encode(untitled, Format::kSvg, 200, 100).find("<title>"), std::string::npos);
}

TEST(PlotFormat, SaveByExtensionIsAtomic) {
  TempDir dir("plot_save");
  const LineChart chart = loss_chart();
  save(chart, dir.file("a.png"), 300, 200);
  save(chart, dir.file("a.svg"), 300, 200);
  save(chart, dir.file("a.PDF"), 300, 200);
  EXPECT_EQ(decode_png(io::read_file(dir.file("a.png"))).rgb, render(chart, 300, 200).rgb);
  EXPECT_EQ(xml_problem(io::read_file(dir.file("a.svg"))), "");
  EXPECT_EQ(io::read_file(dir.file("a.PDF")).rfind("%PDF-", 0), 0u);
  // An unknown extension, an invalid chart, a missing directory: attn::Error, and the files
  // there stay as they were, with no temporary file left.
  const std::string old = dir.write("old.png", "previous");
  EXPECT_EQ(error_of([&] { save(chart, dir.file("a.gif")); }),
            "[plot::save] '" + dir.file("a.gif") +
                "': unknown image format; the file name must end in .png, .svg or .pdf");
  LineChart bad = chart;
  bad.series[0].y.pop_back();
  EXPECT_THROW(save(bad, old), Error);
  EXPECT_THROW(save(chart, old, 10, 10), Error);
  EXPECT_EQ(io::read_file(old), "previous");
  EXPECT_NE(error_of([&] { save(chart, dir.file("missing/x.svg")); }).find("cannot write"),
            std::string::npos);
  EXPECT_EQ(dir.files(), (std::vector<std::string>{"a.PDF", "a.png", "a.svg", "old.png"}));
}

TEST(PlotFormat, DecodePngErrors) {
  EXPECT_NE(error_of([] { decode_png(""); }).find("[plot::decode_png] not a PNG"),
            std::string::npos);
  EXPECT_NE(error_of([] { decode_png("GIF89a........"); }).find("bad signature"),
            std::string::npos);
  const std::string png = encode(loss_chart(), Format::kPng, 100, 80);
  EXPECT_NE(error_of([&] { decode_png(png.substr(0, png.size() / 2)); }).find("cannot decode"),
            std::string::npos);
  EXPECT_THROW(decode_png(png).get(100, 0), IndexError);
}

// ---- ticks
// -------------------------------------------------------------------------------------------

TEST(PlotTicks, Linear) {
  EXPECT_EQ(nice_ticks(0, 2000, 5, false), (std::vector<double>{0, 500, 1000, 1500, 2000}));
  EXPECT_EQ(nice_ticks(0.13, 0.91, 4, false), (std::vector<double>{0.2, 0.4, 0.6, 0.8}));
  EXPECT_EQ(nice_ticks(0.13, 0.91, 4, true), (std::vector<double>{0, 0.5, 1}));
  EXPECT_EQ(nice_ticks(-3, 3, 6, false), (std::vector<double>{-3, -2, -1, 0, 1, 2, 3}));
  EXPECT_EQ(nice_ticks(1.3, 5.7, 10, false),
            (std::vector<double>{1.5, 2, 2.5, 3, 3.5, 4, 4.5, 5, 5.5}));
  for (double t : nice_ticks(-1e-7, 3e-7, 4, false)) EXPECT_FALSE(std::signbit(t) && t == 0);
  EXPECT_THROW(nice_ticks(1, 1, 5, false), Error);
  EXPECT_THROW(nice_ticks(0, kInf, 5, false), Error);
  EXPECT_THROW(nice_ticks(-1e308, 1e308, 5, false), Error);
}

TEST(PlotTicks, Log) {
  EXPECT_EQ(log_ticks(100, 5000, 10), (std::vector<double>{128, 256, 512, 1024, 2048, 4096}));
  EXPECT_EQ(log_ticks(100, 5000, 4), (std::vector<double>{256, 1024, 4096}));
  EXPECT_EQ(log_ticks(0.004, 20, 10), (std::vector<double>{0.01, 0.1, 1, 10}));
  EXPECT_EQ(log_ticks(0.3, 6, 10), (std::vector<double>{0.5, 1, 2, 5}));
  const auto narrow = log_ticks(3, 3.5, 5);
  EXPECT_GE(narrow.size(), 2u);
  for (double t : narrow) EXPECT_TRUE(t >= 3 && t <= 3.5) << t;
  EXPECT_THROW(log_ticks(0, 10, 5), Error);
  EXPECT_THROW(log_ticks(5, 2, 5), Error);
}

TEST(PlotTicks, Format) {
  EXPECT_EQ(format_tick(0), "0");
  EXPECT_EQ(format_tick(-0.0), "0");
  EXPECT_EQ(format_tick(2.5), "2.5");
  EXPECT_EQ(format_tick(-0.001), "-0.001");
  EXPECT_EQ(format_tick(0.1 + 0.2), "0.3");
  EXPECT_EQ(format_tick(16384), "16384");
  EXPECT_EQ(format_tick(1048576), "1048576");
  EXPECT_EQ(format_tick(1e-6), "1e-06");
  EXPECT_EQ(format_tick(2e9), "2e+09");
  EXPECT_EQ(format_tick(0.0625), "0.0625");
}

// ---- charts
// ------------------------------------------------------------------------------------------

TEST(PlotChart, SeriesPixelsLieWhereTheDataSay) {
  LineChart chart;
  chart.title = "loss";
  chart.x_label = "step";
  chart.y_label = "loss";
  const std::vector<double> xs = {0, 100, 200, 300, 400}, ys = {4.0, 2.5, 3.0, 1.5, 1.0};
  chart.series.push_back(series(xs, ys, kRed));
  ChartLayout L;
  const Image img = render(chart, 640, 400, &L);
  EXPECT_EQ(img.width, 640);
  EXPECT_EQ(img.height, 400);
  EXPECT_EQ(img.get(0, 0), colors::kWhite);
  EXPECT_EQ(img.get(639, 399), colors::kWhite);
  EXPECT_TRUE(L.legend.empty());  // unnamed series: no legend
  EXPECT_EQ(L.font_px, 11);       // from the size: min(640 / 57, 400 / 36), rounded
  // The data fit inside the axes, with the mapping monotone.
  EXPECT_LT(L.x_lo, 0);
  EXPECT_GT(L.x_hi, 400);
  EXPECT_LT(L.x_to_px(0), L.x_to_px(100));
  EXPECT_GT(L.y_to_px(1), L.y_to_px(4));
  EXPECT_DOUBLE_EQ(L.x_to_px(L.x_lo), L.plot_left + 0.5);
  EXPECT_DOUBLE_EQ(L.x_to_px(L.x_hi), L.plot_right + 0.5);
  EXPECT_DOUBLE_EQ(L.y_to_px(L.y_lo), L.plot_bottom + 0.5);
  EXPECT_DOUBLE_EQ(L.y_to_px(L.y_hi), L.plot_top + 0.5);
  // Red at every point and along every segment...
  for (std::size_t i = 0; i < xs.size(); ++i) {
    EXPECT_TRUE(near(img, L.x_to_px(xs[i]), L.y_to_px(ys[i]), kRed, 1, 20)) << i;
    if (i + 1 < xs.size())
      for (double t : {0.25, 0.5, 0.75})
        EXPECT_TRUE(near(img, L.x_to_px(xs[i] + t * (xs[i + 1] - xs[i])),
                         L.y_to_px(ys[i] + t * (ys[i + 1] - ys[i])), kRed, 1, 20))
            << "segment " << i << " at " << t;
  }
  // ... and nowhere else: no reddish pixel farther from the polyline than the line's half width
  // and a pixel (nor, then, outside the data area).
  EXPECT_EQ(far_from_polyline(img, L, xs, ys, kRed, L.line_width / 2 + 1.5), 0);
  EXPECT_GT(count_close(img, kRed, 0, 0, 639, 399, 20), 300);
  // Nice tick values, a grid line at each, and each tick labelled.
  ASSERT_GE(L.x_ticks.size(), 3u);
  ASSERT_GE(L.y_ticks.size(), 3u);
  const double step = L.x_ticks[1] - L.x_ticks[0];
  const double mant = step / std::pow(10.0, std::floor(std::log10(step)));
  EXPECT_TRUE(mant == 1 || mant == 2 || mant == 5) << step;
  for (std::size_t i = 0; i < L.x_ticks.size(); ++i) {
    EXPECT_EQ(std::fmod(L.x_ticks[i], step), 0) << L.x_ticks[i];
    if (i > 0) EXPECT_EQ(L.x_ticks[i] - L.x_ticks[i - 1], step);
    EXPECT_GE(L.x_ticks[i], L.x_lo);
    EXPECT_LE(L.x_ticks[i], L.x_hi);
    EXPECT_EQ(L.x_tick_labels[i], format_tick(L.x_ticks[i]));
  }
  const double s = L.font_px;
  for (double t : L.x_ticks) {
    const int x = int(std::floor(L.x_to_px(t)));
    EXPECT_TRUE(close(img.get(x, L.plot_bottom + 2), colors::kAxis, 10)) << "tick mark " << t;
    EXPECT_GT(count_dark(img, x - 4, L.plot_bottom + 2, x + 4, L.plot_bottom + int(2 * s)), 4)
        << "label of x tick " << t;
    if (x > L.plot_left + 2)
      EXPECT_TRUE(close(img.get(x, L.plot_top + 2), colors::kGrid, 3)) << "grid line " << t;
  }
  for (double t : L.y_ticks) {
    const int y = int(std::floor(L.y_to_px(t)));
    EXPECT_GT(count_dark(img, L.plot_left - int(2 * s), y - int(0.4 * s), L.plot_left - 4,
                         y + int(0.4 * s)),
              4)
        << "label of y tick " << t;
  }
  // Title above the data area, the x label under the tick labels, the y label on the left.
  EXPECT_GT(count_dark(img, 0, 0, 639, L.plot_top - 2), 20);
  EXPECT_GT(count_dark(img, L.plot_left, L.plot_bottom + int(2.5 * s), L.plot_right, 399), 10);
  EXPECT_GT(count_dark(img, 0, L.plot_top, int(1.8 * s), L.plot_bottom), 10);
  EXPECT_EQ(count_dark(img, L.plot_right + 2, 0, 639, 399), 0);  // nothing right of the data
}

TEST(PlotChart, LegendListsNamedSeriesInTheEmptiestCorner) {
  LineChart chart;
  // Rising data: the top-right and bottom-left corners are taken.
  chart.series.push_back(series({0, 1, 2, 3}, {0, 1, 2, 3}, kRed, "train"));
  chart.series.push_back(series({0, 1, 2, 3}, {0.5, 1.5, 2.5, 3.5}, kBlue, "validation"));
  chart.series.push_back(series({0, 3}, {1, 1}, kGreen));  // unnamed: not listed
  ChartLayout L;
  const Image img = render(chart, 800, 500, &L);
  const PixelRect& g = L.legend;
  ASSERT_FALSE(g.empty());
  EXPECT_GE(g.left, L.plot_left);
  EXPECT_LE(g.right, L.plot_right);
  EXPECT_GE(g.top, L.plot_top);
  EXPECT_LE(g.bottom, L.plot_bottom);
  const int mid_x = (L.plot_left + L.plot_right) / 2, mid_y = (L.plot_top + L.plot_bottom) / 2;
  EXPECT_TRUE(g.right < mid_x && g.top < mid_y) << "the legend belongs top left";
  // The box: a frame, a sample of each named series and their names; nothing of the others.
  EXPECT_TRUE(close(img.get(g.left, g.center_y()), colors::kFrame, 10));
  EXPECT_TRUE(close(img.get(g.center_x(), g.bottom), colors::kFrame, 10));
  EXPECT_GT(count_close(img, kRed, g, 20), 10);
  EXPECT_GT(count_close(img, kBlue, g, 20), 10);
  EXPECT_EQ(count_close(img, kGreen, g, 60), 0);
  EXPECT_GT(count_dark(img, g), 40);
  // The red sample is the upper row, the blue one under it.
  int red_y = 0, blue_y = 0, nr = 0, nb = 0;
  for (int y = g.top; y <= g.bottom; ++y)
    for (int x = g.left; x <= g.right; ++x) {
      if (close(img.get(x, y), kRed, 20)) red_y += y, ++nr;
      if (close(img.get(x, y), kBlue, 20)) blue_y += y, ++nb;
    }
  ASSERT_GT(nr, 0);
  ASSERT_GT(nb, 0);
  EXPECT_LT(red_y / nr, blue_y / nb);
  // Default colours come from the palette.
  LineChart d;
  for (const auto& [name, y0, y1] : {std::tuple{"a", 0.0, 1.0}, std::tuple{"b", 1.0, 0.0}}) {
    Series s;  // no colour: the palette's
    s.name = name;
    s.x = {0, 1};
    s.y = {y0, y1};
    d.series.push_back(s);
  }
  ChartLayout Ld;
  const Image di = render(d, 400, 300, &Ld);
  EXPECT_TRUE(near(di, Ld.x_to_px(0.25), Ld.y_to_px(0.25), palette(0), 1, 20));
  EXPECT_TRUE(near(di, Ld.x_to_px(0.25), Ld.y_to_px(0.75), palette(1), 1, 20));
}

TEST(PlotChart, LogAxes) {
  LineChart chart;
  chart.log_x = true;
  chart.log_y = true;
  const std::vector<double> xs = {128, 256, 512, 1024, 2048, 4096}, ys = {1, 3, 10, 30, 100, 300};
  chart.series.push_back(series(xs, ys, kRed));
  ChartLayout L;
  const Image img = render(chart, 800, 500, &L);
  EXPECT_EQ(L.x_ticks, xs);
  EXPECT_EQ(L.x_tick_labels.back(), "4096");
  EXPECT_EQ(L.y_ticks, (std::vector<double>{1, 10, 100}));
  // Equal ratios are equal distances.
  for (std::size_t i = 1; i + 1 < xs.size(); ++i)
    EXPECT_NEAR(L.x_to_px(xs[i + 1]) - L.x_to_px(xs[i]), L.x_to_px(xs[i]) - L.x_to_px(xs[i - 1]),
                1e-9);
  EXPECT_NEAR(L.y_to_px(10) - L.y_to_px(100), L.y_to_px(1) - L.y_to_px(10), 1e-9);
  for (std::size_t i = 0; i < xs.size(); ++i)
    EXPECT_TRUE(near(img, L.x_to_px(xs[i]), L.y_to_px(ys[i]), kRed, 1, 20)) << i;
  // On a log axis the segment midpoint is the geometric mean.
  EXPECT_TRUE(near(img, L.x_to_px(std::sqrt(128.0 * 256)), L.y_to_px(std::sqrt(3.0)), kRed, 1, 20));
  // In log space the points lie on the polyline: nothing red strays from it.
  std::vector<double> lx, ly;
  EXPECT_EQ(far_from_polyline(img, L, xs, ys, kRed, L.line_width / 2 + 1.5), 0);
}

TEST(PlotChart, NonFinitePointsLeaveGaps) {
  auto make = [](double mid) {
    LineChart c;
    c.series.push_back(series({0, 1, 2, 3, 4}, {1, 2, mid, 4, 5}, kRed));
    return c;
  };
  ChartLayout Lf, Lg, Li;
  const Image full = render(make(3), 500, 300, &Lf);
  const Image gap = render(make(kNaN), 500, 300, &Lg);
  const Image inf = render(make(kInf), 500, 300, &Li);
  ASSERT_EQ(Lf.x_lo, Lg.x_lo);
  ASSERT_EQ(Lf.y_lo, Lg.y_lo);
  ASSERT_EQ(Lf.y_hi, Lg.y_hi);
  ASSERT_EQ(Lf.y_hi, Li.y_hi);  // inf does not stretch the axis
  for (double t : {1.5, 2.5}) {
    const double y = 1 + t;
    EXPECT_TRUE(near(full, Lf.x_to_px(t), Lf.y_to_px(y), kRed, 1, 20)) << t;
    EXPECT_FALSE(near(gap, Lg.x_to_px(t), Lg.y_to_px(y), kRed, 3, 100)) << t;
    EXPECT_FALSE(near(inf, Li.x_to_px(t), Li.y_to_px(y), kRed, 3, 100)) << t;
  }
  // The segments on either side are still drawn.
  EXPECT_TRUE(near(gap, Lg.x_to_px(0.5), Lg.y_to_px(1.5), kRed, 1, 20));
  EXPECT_TRUE(near(gap, Lg.x_to_px(3.5), Lg.y_to_px(4.5), kRed, 1, 20));
}

TEST(PlotChart, DegenerateData) {
  // A single point: visible, and inside the axes.
  LineChart one;
  one.series.push_back(series({5}, {7}, kRed));
  ChartLayout L;
  Image img = render(one, 300, 200, &L);
  EXPECT_LT(L.x_lo, 5);
  EXPECT_GT(L.x_hi, 5);
  EXPECT_LT(L.y_lo, 7);
  EXPECT_GT(L.y_hi, 7);
  EXPECT_TRUE(close(at(img, L.x_to_px(5), L.y_to_px(7)), kRed, 10));
  // All-equal values: a horizontal line across the middle.
  LineChart flat;
  flat.series.push_back(series({0, 1, 2}, {3, 3, 3}, kRed));
  img = render(flat, 300, 200, &L);
  EXPECT_LT(L.y_lo, 3);
  EXPECT_GT(L.y_hi, 3);
  EXPECT_NEAR(L.y_to_px(3), (L.plot_top + L.plot_bottom + 1) / 2.0, 1.0);
  EXPECT_TRUE(close(at(img, L.x_to_px(1), L.y_to_px(3)), kRed, 10));
  // Zeros everywhere, and a flat log series.
  flat.series[0].y = {0, 0, 0};
  EXPECT_NO_THROW(render(flat, 300, 200));
  LineChart flat_log;
  flat_log.log_y = true;
  flat_log.series.push_back(series({0, 1}, {5, 5}, kRed));
  img = render(flat_log, 300, 200, &L);
  EXPECT_LT(L.y_lo, 5);
  EXPECT_GT(L.y_hi, 5);
  EXPECT_TRUE(close(at(img, L.x_to_px(0.5), L.y_to_px(5)), kRed, 10));
  // Nothing to draw: empty series, only NaN, no series at all; still axes and a legend.
  LineChart empty;
  empty.series.push_back(series({}, {}, kRed, "empty"));
  empty.series.push_back(series({1, 2}, {kNaN, kNaN}, kBlue, "nan"));
  img = render(empty, 300, 200, &L);
  EXPECT_EQ(count_close(img, kRed, L.plot_left, L.plot_top, L.plot_right, L.plot_bottom),
            count_close(img, kRed, L.legend));
  EXPECT_GT(count_close(img, kRed, L.legend), 0);
  EXPECT_GT(count_close(img, colors::kAxis, 0, 0, 299, 199, 5), 100);
  EXPECT_NO_THROW(render(LineChart{}, 64, 64));
  LineChart empty_log;
  empty_log.log_x = empty_log.log_y = true;
  EXPECT_NO_THROW(render(empty_log, 64, 64));
  // Huge and tiny values.
  LineChart wide;
  wide.series.push_back(series({0, 1}, {-1e300, 1e300}, kRed));
  EXPECT_NO_THROW(render(wide, 200, 100));
  wide.series[0].y = {1e-300, 2e-300};
  EXPECT_NO_THROW(render(wide, 200, 100));
  wide.series[0].x = {-1e308, 1e308};  // a range that overflows: refused, not drawn wrong
  EXPECT_NE(error_of([&] { render(wide, 200, 100); }).find("cannot plot the axis range"),
            std::string::npos);
}

TEST(PlotChart, FixedYRangeClipsTheLine) {
  LineChart chart;
  chart.series.push_back(series({0, 1, 2, 3}, {0, 10, -10, 0}, kRed));
  chart.y_min = -2;
  chart.y_max = 2;
  ChartLayout L;
  const Image img = render(chart, 400, 300, &L);
  EXPECT_EQ(L.y_lo, -2);
  EXPECT_EQ(L.y_hi, 2);
  EXPECT_EQ(L.y_ticks.front(), -2);
  EXPECT_EQ(L.y_ticks.back(), 2);
  EXPECT_EQ(count_close(img, kRed, 0, 0, 399, L.plot_top - 1, 100), 0);
  EXPECT_EQ(count_close(img, kRed, 0, L.plot_bottom + 1, 399, 299, 100), 0);
  EXPECT_TRUE(near(img, L.x_to_px(0.1), L.y_to_px(1), kRed, 1, 20));
  // Far outside the range (beyond what cairo's fixed point holds): clipped all the same.
  chart.series[0].y = {0, 1e12, -1e12, 0};
  const Image huge = render(chart, 400, 300, &L);
  EXPECT_EQ(count_close(huge, kRed, 0, 0, 399, L.plot_top - 1, 100), 0);
  EXPECT_TRUE(near(huge, L.x_to_px(1e-12), L.y_to_px(1), kRed, 2, 20));
  // Only one end fixed.
  chart.y_max.reset();
  chart.y_min = 0;
  chart.series[0].y = {0, 10, -10, 0};
  render(chart, 400, 300, &L);
  EXPECT_EQ(L.y_lo, 0);
  EXPECT_GT(L.y_hi, 10);
}

TEST(PlotChart, Errors) {
  LineChart ok;
  ok.series.push_back(series({1, 2}, {1, 2}, kRed, "s"));
  EXPECT_THROW(render(ok, 63, 100), Error);
  EXPECT_THROW(render(ok, 100, 8193), Error);
  EXPECT_THROW(encode(ok, Format::kSvg, 100, 8193), Error);
  LineChart mismatch = ok;
  mismatch.series[0].y.push_back(3);
  EXPECT_EQ(error_of([&] { render(mismatch); }),
            "[plot::render] series 0 's' has 2 x values but 3 y values");
  LineChart logy = ok;
  logy.log_y = true;
  logy.series[0].y = {1, 0};
  EXPECT_THROW(render(logy), Error);
  logy.series[0].y = {1, -kInf};
  EXPECT_THROW(render(logy), Error);
  logy.series[0].y = {1, kNaN};  // NaN is a gap, not an error
  EXPECT_NO_THROW(render(logy));
  LineChart logx = ok;
  logx.log_x = true;
  logx.series[0].x = {-1, 2};
  EXPECT_THROW(render(logx), Error);
  LineChart range = ok;
  range.y_min = 2;
  range.y_max = 2;
  EXPECT_THROW(render(range), Error);
  range.y_max = kNaN;
  EXPECT_THROW(render(range), Error);
  LineChart logmin = ok;
  logmin.log_y = true;
  logmin.y_min = 0;
  EXPECT_THROW(render(logmin), Error);
}

// ---- dashes, markers, reference lines
// -----------------------------------------------------------------

// A chart whose axes are fixed to x 0..100 and y 0..10.
LineChart fixed_chart() {
  LineChart c;
  c.x_min = 0;
  c.x_max = 100;
  c.y_min = 0;
  c.y_max = 10;
  return c;
}

TEST(PlotChart, DashedSeriesLeaveGapsAlongTheLine) {
  const std::vector<int> dash = {6, 4};
  for (const std::vector<double>& xs :
       {std::vector<double>{0, 100}, std::vector<double>{0, 37, 50, 100}}) {
    LineChart chart = fixed_chart();
    Series s = series(xs, std::vector<double>(xs.size(), 5.0), kRed);
    s.dash = dash;
    chart.series.push_back(s);
    ChartLayout L;
    const Image img = render(chart, 500, 300, &L);
    // A 2-pixel line: the row holding its centre is covered whole where the pattern is on. The
    // pattern runs on across the vertices at x = 37 and 50.
    const int row = int(std::floor(L.y_to_px(5)));
    int on = 0, off = 0;
    for (int x = L.plot_left + 2; x < L.plot_right; ++x) {
      const int phase = dash_phase(dash, x + 0.5 - L.x_to_px(0));
      if (phase == 1) on += close(img.get(x, row), kRed, 10);
      if (phase == 0)
        off +=
            close(img.get(x, row), colors::kWhite, 30) || close(img.get(x, row), colors::kGrid, 30);
      if (phase >= 0) EXPECT_EQ(close(img.get(x, row), kRed, 10), phase == 1) << x;
    }
    EXPECT_GT(on, 150);
    EXPECT_GT(off, 50);
    EXPECT_EQ(count_close(img, kRed, 0, 0, 499, row - 2, 100), 0);
    EXPECT_EQ(count_close(img, kRed, 0, row + 2, 499, 299, 100), 0);
  }
  // A gap (NaN) restarts the pattern at the next point.
  LineChart chart = fixed_chart();
  Series s = series({0, 30, kNaN, 61, 100}, {5, 5, 5, 5, 5}, kRed);
  s.dash = dash;
  chart.series.push_back(s);
  ChartLayout L;
  const Image img = render(chart, 500, 300, &L);
  const int row = int(std::floor(L.y_to_px(5)));
  for (int x = int(L.x_to_px(61)); x < L.plot_right; ++x) {
    const int phase = dash_phase(dash, x + 0.5 - L.x_to_px(61));
    if (phase >= 0) EXPECT_EQ(close(img.get(x, row), kRed, 10), phase == 1) << x;
  }
  EXPECT_EQ(count_close(img, kRed, int(L.x_to_px(31)), row - 3, int(L.x_to_px(60)), row + 3, 100),
            0);
  // Solid by default.
  LineChart solid = fixed_chart();
  solid.series.push_back(series({0, 100}, {5, 5}, kRed));
  const Image si = render(solid, 500, 300, &L);
  for (int x = L.plot_left + 2; x <= L.plot_right; ++x)
    EXPECT_TRUE(close(si.get(x, row), kRed, 10)) << x;
}

TEST(PlotChart, MarkerShapesAtDataPoints) {
  LineChart chart = fixed_chart();
  const Marker shapes[] = {Marker::kDisc, Marker::kSquare, Marker::kTriangle, Marker::kDiamond};
  const Rgb colors[] = {kRed, kBlue, kGreen, Rgb{200, 0, 200}};
  for (int i = 0; i < 4; ++i) {
    Series s = series({20.0 + 20 * i}, {5}, colors[i]);  // one point each: no line
    s.markers = true;
    s.marker_shape = shapes[i];
    s.marker_size = 8;
    chart.series.push_back(s);
  }
  ChartLayout L;
  const Image img = render(chart, 500, 300, &L);
  // Offsets from the centre (in pixels) inside (true) or outside (false) each radius-8 shape.
  struct Probe {
    int dx, dy;
    bool disc, square, triangle, diamond;
  };
  const Probe probes[] = {
      {0, 0, true, true, true, true},      {6, 0, true, true, false, true},
      {-6, 0, true, true, false, true},    {0, -6, true, true, true, true},
      {0, 6, true, true, true, true},      {6, 6, false, true, true, false},
      {-6, 6, false, true, true, false},   {6, -6, false, true, false, false},
      {-6, -6, false, true, false, false}, {3, 3, true, true, true, true},
      {11, 0, false, false, false, false}, {0, 11, false, false, false, false},
  };
  for (int i = 0; i < 4; ++i) {
    const double cx = L.x_to_px(20.0 + 20 * i), cy = L.y_to_px(5);
    for (const Probe& p : probes) {
      const bool inside = i == 0 ? p.disc : i == 1 ? p.square : i == 2 ? p.triangle : p.diamond;
      EXPECT_EQ(close(at(img, cx + p.dx, cy + p.dy), colors[i], 20), inside)
          << "shape " << i << " at " << p.dx << "," << p.dy;
    }
  }
}

TEST(PlotChart, ReferenceLineAtTheRightRowWithItsLabel) {
  LineChart chart;
  chart.series.push_back(series({1, 2, 3, 4}, {10, 30, 20, 50}, kRed));
  ReferenceLine ref;
  ref.y = 95;
  ref.label = "sgemm 1024^3";
  chart.reference_lines.push_back(ref);
  ChartLayout L;
  const Image img = render(chart, 600, 400, &L);
  // The reference value is inside the y range although the data stop at 50.
  EXPECT_GT(L.y_hi, 95);
  ASSERT_EQ(L.line_width, 2);
  // Default: grey, dashed 8 on 5 off from the data area's left edge, 2 pixels wide: the rows
  // on either side of the nearest pixel boundary.
  const int row = int(std::lround(L.y_to_px(95)));
  int on = 0;
  for (int x = L.plot_left + 2; x <= L.plot_right; ++x) {
    const int phase = dash_phase(ref.dash, x + 0.5 - L.plot_left);
    for (int y : {row - 1, row})
      if (phase >= 0) EXPECT_EQ(close(img.get(x, y), colors::kReference, 10), phase == 1) << x;
    on += phase == 1;
  }
  EXPECT_GT(on, 200);
  EXPECT_EQ(count_close(img, colors::kReference, L.plot_left + 1, row + 1, L.plot_right,
                        L.plot_bottom - 1, 10),
            0);
  // The label: at the preferred spot (right end, above the line), in the line's colour.
  ASSERT_EQ(L.reference_labels.size(), 1u);
  const PixelRect t = L.reference_labels[0];
  ASSERT_FALSE(t.empty());
  EXPECT_NEAR(t.right, L.plot_right - 0.5 * L.font_px, 2);
  EXPECT_LT(t.bottom, row - 1);
  EXPECT_GT(t.bottom, row - L.font_px);
  EXPECT_GT(t.right - t.left, 4 * L.font_px);  // 12 characters
  EXPECT_GT(count_close(img, colors::kReference, t, 30), 20);
  // Thicker, solid, coloured.
  chart.reference_lines[0].dash.clear();
  chart.reference_lines[0].line_width = 3;
  chart.reference_lines[0].color = kBlue;
  const Image thick = render(chart, 600, 400, &L);
  const int mid = int(std::floor(L.y_to_px(95)));
  for (int x = L.plot_left + 2; x <= L.plot_right; x += 7)
    for (int y = mid - 1; y <= mid + 1; ++y)
      EXPECT_TRUE(close(thick.get(x, y), kBlue, 10)) << x << "," << y;
  const PixelRect t3 = L.reference_labels[0];  // above or, where that leaves the area, below
  EXPECT_TRUE(t3.bottom < mid - 1 || t3.top > mid + 1) << t3.top << ".." << t3.bottom;
}

TEST(PlotChart, ReferenceLabelAvoidsTheData) {
  // A series lies just above the line at the right end: the label moves where nothing is drawn.
  LineChart chart = fixed_chart();
  Series busy = series({60, 100}, {5.4, 5.4}, kRed);
  busy.line_width = 3;
  chart.series.push_back(busy);
  ReferenceLine ref;
  ref.y = 5;
  ref.label = "baseline";
  chart.reference_lines.push_back(ref);
  ChartLayout L;
  const Image img = render(chart, 500, 300, &L);
  const PixelRect t = L.reference_labels[0];
  ASSERT_FALSE(t.empty());
  EXPECT_EQ(count_close(img, kRed, t, 60), 0);
  EXPECT_LT(t.right, int(L.x_to_px(60)));  // not over the series
  EXPECT_GT(count_close(img, colors::kReference, t, 60), 20);
  // A reference line outside a fixed y range is not drawn, nor its label.
  chart.reference_lines[0].y = 50;
  const Image out = render(chart, 500, 300, &L);
  EXPECT_TRUE(L.reference_labels[0].empty());
  EXPECT_EQ(count_close(out, colors::kReference, L.plot_left + 1, L.plot_top, L.plot_right,
                        L.plot_bottom - 1, 10),
            0);
  // Log axes: the value must be positive; NaN is refused.
  LineChart bad;
  bad.log_y = true;
  bad.reference_lines.push_back(ReferenceLine{0, "zero"});
  EXPECT_THROW(render(bad, 300, 200), Error);
  bad.log_y = false;
  bad.reference_lines[0].y = kNaN;
  EXPECT_THROW(render(bad, 300, 200), Error);
  bad.reference_lines[0].y = 1;
  bad.reference_lines[0].dash = {1};
  EXPECT_THROW(render(bad, 300, 200), Error);
  bad.reference_lines[0].dash.clear();
  bad.reference_lines[0].line_width = 9;
  EXPECT_THROW(render(bad, 300, 200), Error);
}

TEST(PlotChart, FieldsAreValidated) {
  LineChart c;
  c.series.push_back(series({1, 2}, {1, 2}, kRed, "s"));
  auto msg = [](const LineChart& chart) { return error_of([&] { render(chart, 300, 200); }); };
  LineChart d = c;
  d.series[0].dash = {4, 0};
  EXPECT_EQ(
      msg(d),
      "[plot::render] series 0 's': the dash pattern: length 1 is 0, expected 1..4096 pixels");
  d = c;
  d.series[0].line_width = 9;
  EXPECT_EQ(msg(d), "[plot::render] series 0 's': line_width must be 0..8, got 9");
  d = c;
  d.series[0].marker_size = 33;
  EXPECT_EQ(msg(d), "[plot::render] series 0 's': marker_size must be 0..32, got 33");
  d = c;
  d.x_min = 3;
  d.x_max = 3;
  EXPECT_EQ(msg(d), "[plot::render] x_min (3) must be below x_max (3)");
  d = c;
  d.font_scale = 9;
  EXPECT_EQ(msg(d), "[plot::render] font_scale must be 0..8, got 9");
  // font_scale picks the text size: 4 + 5 x the scale.
  d = c;
  d.title = "T";
  d.font_scale = 1;
  ChartLayout L1, L2;
  render(d, 400, 300, &L1);
  d.font_scale = 2;
  render(d, 400, 300, &L2);
  EXPECT_EQ(L1.font_px, 9);
  EXPECT_EQ(L2.font_px, 14);
  EXPECT_GT(L2.plot_top, L1.plot_top);
  EXPECT_GT(L2.plot_left, L1.plot_left);
  // legend = false: no legend box.
  d.legend = false;
  render(d, 400, 300, &L1);
  EXPECT_TRUE(L1.legend.empty());
  // Text that is not UTF-8 (or holds control characters) is drawn, not refused.
  d.title = "bad \xff\xfe utf-8 \x01 and \xe2\x82";
  d.x_label = std::string(5000, 'x');
  d.series[0].name = "\xc3\xa9t\xc3\xa9 \xe2\x82\xac";
  EXPECT_NO_THROW(render(d, 400, 300));
  EXPECT_EQ(xml_problem(encode(d, Format::kSvg, 400, 300)), "");
  EXPECT_NO_THROW(encode(d, Format::kPdf, 400, 300));
}

// ---- figures
// -----------------------------------------------------------------------------------------

LineChart panel(const std::string& title, double slope) {
  LineChart c;
  c.title = title;
  c.x_label = "L";
  c.y_label = "GFLOP/s";
  c.log_x = true;
  c.y_min = 0;
  Series a = series({512, 1024, 2048, 4096}, {10 * slope, 20 * slope, 30 * slope, 35 * slope}, kRed,
                    "attn");
  a.markers = true;
  Series t = series({512, 1024, 2048, 4096}, {5, 6, 7, 8}, kBlue, "torch");
  t.dash = {12, 7};
  t.markers = true;
  t.marker_shape = Marker::kSquare;
  c.series = {a, t};
  c.reference_lines.push_back(ReferenceLine{40, "sgemm"});
  return c;
}

TEST(PlotFigure, SideBySidePanelsSharingOneLegend) {
  Figure f;
  f.width = 1000;
  f.height = 500;
  f.title = "figure title";
  f.footer = "made by a test";
  f.charts = {panel("forward", 1), panel("backward", 2)};
  FigureLayout L;
  const Image img = render(f, &L);
  EXPECT_EQ(img.width, 1000);
  EXPECT_EQ(img.height, 500);
  EXPECT_EQ(L.columns, 2);
  EXPECT_EQ(L.rows, 1);
  EXPECT_EQ(L.font_px, 9);  // from one panel's size: min(500 / 57, 500 / 36), rounded
  ASSERT_EQ(L.panels.size(), 2u);
  ASSERT_EQ(L.charts.size(), 2u);
  EXPECT_EQ(L.panels[0].left, 0);
  EXPECT_EQ(L.panels[0].right, 499);
  EXPECT_EQ(L.panels[1].left, 500);
  EXPECT_EQ(L.panels[1].right, 999);
  EXPECT_EQ(L.panels[0].top, L.panels[1].top);
  EXPECT_EQ(L.panels[0].bottom, L.panels[1].bottom);
  // Title above the panels, legend and footer below them, in that order.
  EXPECT_LT(L.title.bottom, L.panels[0].top);
  EXPECT_GT(L.legend.top, L.panels[0].bottom);
  EXPECT_GT(L.footer.top, L.legend.bottom);
  EXPECT_LE(L.footer.bottom, 499);
  EXPECT_GT(L.footer.left, 500);  // bottom right
  EXPECT_GT(count_close(img, colors::kFooter, L.footer, 40), 20);
  EXPECT_GT(count_dark(img, L.title), 40);
  EXPECT_NEAR(L.title.center_x(), 500, 2);
  // One legend entry per distinct series: both charts' "attn" and "torch" look the same.
  EXPECT_EQ(L.legend_names, (std::vector<std::string>{"attn", "torch"}));
  ASSERT_EQ(L.legend_samples.size(), 2u);
  const PixelRect sa = L.legend_samples[0], st = L.legend_samples[1];
  EXPECT_EQ(sa.center_y(), st.center_y());  // one row: they fit side by side
  EXPECT_LT(sa.right, st.left);
  EXPECT_GT(count_close(img, kRed, sa, 20), 10);
  EXPECT_GT(count_dark(img, sa.right + 2, sa.top - 4, st.left - 2, sa.bottom + 4), 10);  // "attn"
  // The dashed entry's sample has gaps: 12 on, 7 off from its left end (the marker aside).
  const int row = int(std::floor(st.center_y() + 0.5));
  for (int k = 1; k < st.right - st.left; ++k) {
    if (std::abs(st.left + k - (st.left + st.right) / 2) <= 8) continue;  // the marker
    const int phase = dash_phase({12, 7}, k + 0.5);
    if (phase >= 0) EXPECT_EQ(close(img.get(st.left + k, row), kBlue, 30), phase == 1) << k;
  }
  // Panels draw no legend of their own; each chart's data sit in its own panel.
  for (std::size_t i = 0; i < 2; ++i) {
    const ChartLayout& C = L.charts[i];
    EXPECT_TRUE(C.legend.empty());
    EXPECT_TRUE(L.panels[i].contains(C.plot_left, C.plot_top));
    EXPECT_TRUE(L.panels[i].contains(C.plot_right, C.plot_bottom));
    const double slope = i == 0 ? 1 : 2;
    const std::vector<double> xs = {512, 1024, 2048, 4096};
    for (std::size_t k = 0; k < xs.size(); ++k) {
      const double y = slope * std::vector<double>{10, 20, 30, 35}[k];
      EXPECT_TRUE(close(at(img, C.x_to_px(xs[k]), C.y_to_px(y)), kRed, 10)) << i << " " << k;
    }
    EXPECT_FALSE(C.reference_labels[0].empty());
    EXPECT_TRUE(L.panels[i].contains(C.reference_labels[0].left, C.reference_labels[0].top));
  }
  // No red in the left panel right of its data area (markers aside), or below the panels but in
  // the legend.
  EXPECT_EQ(count_close(img, kRed, L.charts[0].plot_right + 8, 0, 499, L.panels[0].bottom, 100), 0);
  EXPECT_EQ(count_close(img, kRed, 0, L.panels[0].bottom + 1, 999, 499, 100),
            count_close(img, kRed, sa, 100));
}

TEST(PlotFigure, PanelsAreChartsDrawnInASubRectangle) {
  // With no title, footer or shared legend, panel i is exactly render(chart) of the panel's size,
  // shifted to the panel.
  LineChart a = panel("a", 1), b = panel("b", 3);
  a.legend = b.legend = false;
  a.font_scale = b.font_scale = 1;
  Figure f;
  f.width = 900;
  f.height = 400;
  f.font_scale = 1;
  f.legend = LegendPlacement::kNone;
  f.charts = {a, b};
  FigureLayout L;
  const Image fig = render(f, &L);
  const Image ia = render(a, 450, 400), ib = render(b, 450, 400);
  int differ = 0;
  for (int y = 0; y < 400; ++y)
    for (int x = 0; x < 450; ++x) {
      differ += !close(fig.get(x, y), ia.get(x, y), 2);
      differ += !close(fig.get(450 + x, y), ib.get(x, y), 2);
    }
  EXPECT_EQ(differ, 0);
  EXPECT_TRUE(L.legend.empty());
  EXPECT_TRUE(L.legend_samples.empty());
  // One chart with its own legend inside: the figure is the chart.
  LineChart c = panel("c", 1);
  c.font_scale = 2;
  Figure one;
  one.width = 800;
  one.height = 500;
  one.font_scale = 2;
  one.legend = LegendPlacement::kInside;
  one.charts = {c};
  EXPECT_EQ(render(one).rgb, render(c, 800, 500).rgb);
}

TEST(PlotFigure, GridLegendPlacementsAndErrors) {
  Figure f;
  f.width = 600;
  f.height = 800;
  f.columns = 1;
  f.charts = {panel("top", 1), panel("bottom", 2)};
  FigureLayout L = layout_figure(f);
  EXPECT_EQ(L.columns, 1);
  EXPECT_EQ(L.rows, 2);
  EXPECT_EQ(L.panels[1].top, L.panels[0].bottom + 1);
  EXPECT_EQ(L.panels[0].left, 0);
  EXPECT_EQ(L.panels[1].right, 599);
  EXPECT_TRUE(L.title.empty());
  EXPECT_TRUE(L.footer.empty());
  // Three charts in two columns: two rows, the third under the first.
  f.columns = 2;
  f.charts.push_back(panel("third", 3));
  L = layout_figure(f);
  EXPECT_EQ(L.rows, 2);
  EXPECT_EQ(L.panels[2].left, 0);
  EXPECT_EQ(L.panels[2].top, L.panels[0].bottom + 1);
  // Same name, different colour: two entries.
  f.charts[2].series[0].color = kGreen;
  L = layout_figure(f);
  EXPECT_EQ(L.legend_names, (std::vector<std::string>{"attn", "torch", "attn"}));
  // Legends inside the charts, or none.
  f.legend = LegendPlacement::kInside;
  const Image inside = render(f, &L);
  EXPECT_TRUE(L.legend.empty());
  for (const ChartLayout& C : L.charts) {
    ASSERT_FALSE(C.legend.empty());
    EXPECT_GE(C.legend.left, C.plot_left);
    EXPECT_TRUE(close(inside.get(C.legend.left, C.legend.center_y()), colors::kFrame, 10));
  }
  f.legend = LegendPlacement::kNone;
  L = layout_figure(f);
  for (const ChartLayout& C : L.charts) EXPECT_TRUE(C.legend.empty());
  // Many entries wrap onto several legend rows, all inside the figure.
  Figure wide;
  wide.width = 400;
  wide.height = 400;
  wide.charts.resize(1);
  for (int i = 0; i < 6; ++i)
    wide.charts[0].series.push_back(series({0, 1}, {0, double(i)}, palette(std::size_t(i)),
                                           "series number " + std::to_string(i)));
  L = layout_figure(wide);
  ASSERT_EQ(L.legend_samples.size(), 6u);
  EXPECT_GT(L.legend_samples[5].center_y(), L.legend_samples[0].center_y());
  EXPECT_LE(L.legend.right, 399);
  for (const PixelRect& r : L.legend_samples) EXPECT_LE(r.right, 399);
  // Errors.
  auto msg = [](const Figure& fig) { return error_of([&] { render(fig); }); };
  Figure bad;
  EXPECT_EQ(msg(bad), "[plot::render] a figure needs 1..64 charts, got 0");
  bad.charts.resize(65);
  EXPECT_EQ(msg(bad), "[plot::render] a figure needs 1..64 charts, got 65");
  bad.charts.resize(4);
  bad.width = 200;
  EXPECT_NE(msg(bad).find("panels would be 50 x"), std::string::npos) << msg(bad);
  bad.width = 800;
  bad.columns = -1;
  EXPECT_EQ(msg(bad), "[plot::render] columns must be 0..64, got -1");
  bad.columns = 0;
  bad.font_scale = 9;
  EXPECT_EQ(msg(bad), "[plot::render] font_scale must be 0..8, got 9");
  bad.font_scale = 0;
  bad.height = 20;
  EXPECT_EQ(msg(bad), "[plot::render] image size must be 64..8192 on each side, got 800x20");
  bad.height = 500;
  bad.charts[1].series.push_back(series({1, 2}, {1}, kRed, "short"));
  EXPECT_EQ(msg(bad), "[plot::render] chart 1: series 0 'short' has 2 x values but 1 y values");
  EXPECT_THROW(save(bad, "/nonexistent-dir/x.png"), Error);
  EXPECT_THROW(encode(bad, Format::kPdf), Error);
}

TEST(PlotFigure, FormatsOfAFigure) {
  Figure f;
  f.width = 900;
  f.height = 400;
  f.charts = {panel("forward", 1), panel("backward", 2)};
  const std::string svg = encode(f, Format::kSvg);
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_NE(svg.find("<title>forward</title>"), std::string::npos);  // no figure title
  f.title = "both";
  EXPECT_NE(encode(f, Format::kSvg).find("<title>both</title>"), std::string::npos);
  const std::string pdf = encode(f, Format::kPdf);
  EXPECT_NE(pdf.find("/MediaBox [ 0 0 900 400 ]"), std::string::npos);
  EXPECT_EQ(decode_png(encode(f, Format::kPng)).rgb, render(f).rgb);
}

// ---- figures from JSON
// -------------------------------------------------------------------------------

// The example of include/attn/plot.h, comments removed.
const char* kDocumentedSpec = R"({
  "width": 1400, "height": 620,
  "title": "...",  "footer": "...",
  "columns": 2,
  "legend": "below",
  "font_scale": 2,
  "charts": [
    {
      "title": "forward", "x_label": "L", "y_label": "GFLOP/s",
      "log_x": true, "log_y": false,
      "x_min": null, "x_max": null, "y_min": 0, "y_max": null,
      "legend": true,
      "series": [
        {"name": "attn", "x": [512, 1024], "y": [190.5, null],
         "color": "#1f64b4",
         "dash": [12, 7],
         "marker": "disc",
         "marker_size": 5, "line_width": 3}
      ],
      "reference_lines": [
        {"y": 95.0, "label": "OpenBLAS sgemm 1024^3", "color": "#6e6e6e",
         "dash": [10, 6], "line_width": 2}
      ]
    }
  ]
})";

TEST(PlotJson, AcceptsTheDocumentedFormat) {
  const Figure f = figure_from_json(kDocumentedSpec);
  EXPECT_EQ(f.width, 1400);
  EXPECT_EQ(f.height, 620);
  EXPECT_EQ(f.title, "...");
  EXPECT_EQ(f.footer, "...");
  EXPECT_EQ(f.columns, 2);
  EXPECT_EQ(f.legend, LegendPlacement::kBelow);
  EXPECT_EQ(f.font_scale, 2);
  ASSERT_EQ(f.charts.size(), 1u);
  const LineChart& c = f.charts[0];
  EXPECT_EQ(c.title, "forward");
  EXPECT_EQ(c.x_label, "L");
  EXPECT_EQ(c.y_label, "GFLOP/s");
  EXPECT_TRUE(c.log_x);
  EXPECT_FALSE(c.log_y);
  EXPECT_FALSE(c.x_min.has_value());
  EXPECT_FALSE(c.x_max.has_value());
  EXPECT_EQ(c.y_min, 0.0);
  EXPECT_FALSE(c.y_max.has_value());
  EXPECT_TRUE(c.legend);
  ASSERT_EQ(c.series.size(), 1u);
  const Series& s = c.series[0];
  EXPECT_EQ(s.name, "attn");
  EXPECT_EQ(s.x, (std::vector<double>{512, 1024}));
  ASSERT_EQ(s.y.size(), 2u);
  EXPECT_EQ(s.y[0], 190.5);
  EXPECT_TRUE(std::isnan(s.y[1]));  // null: a gap
  EXPECT_EQ(s.color, (Rgb{0x1f, 0x64, 0xb4}));
  EXPECT_EQ(s.dash, (std::vector<int>{12, 7}));
  EXPECT_TRUE(s.markers);
  EXPECT_EQ(s.marker_shape, Marker::kDisc);
  EXPECT_EQ(s.marker_size, 5);
  EXPECT_EQ(s.line_width, 3);
  ASSERT_EQ(c.reference_lines.size(), 1u);
  const ReferenceLine& r = c.reference_lines[0];
  EXPECT_EQ(r.y, 95.0);
  EXPECT_EQ(r.label, "OpenBLAS sgemm 1024^3");
  EXPECT_EQ(r.color, (Rgb{0x6e, 0x6e, 0x6e}));
  EXPECT_EQ(r.dash, (std::vector<int>{10, 6}));
  EXPECT_EQ(r.line_width, 2);
  EXPECT_NO_THROW(render(f));
}

TEST(PlotJson, DefaultsAndAlternativeSpellings) {
  const Figure f = figure_from_json(R"({"charts": [{"series": [{"x": [1, 2], "y": [3, 4]}]}]})");
  const Figure d;
  const LineChart dc;
  const Series ds;
  EXPECT_EQ(f.width, d.width);
  EXPECT_EQ(f.height, d.height);
  EXPECT_EQ(f.columns, d.columns);
  EXPECT_EQ(f.legend, d.legend);
  EXPECT_EQ(f.font_scale, d.font_scale);
  EXPECT_TRUE(f.title.empty() && f.footer.empty());
  const LineChart& c = f.charts[0];
  EXPECT_EQ(c.log_x, dc.log_x);
  EXPECT_EQ(c.legend, dc.legend);
  EXPECT_TRUE(c.reference_lines.empty());
  const Series& s = c.series[0];
  EXPECT_FALSE(s.color.has_value());
  EXPECT_EQ(s.markers, ds.markers);
  EXPECT_TRUE(s.dash.empty());
  EXPECT_EQ(s.line_width, 0);
  // Colours as [r, g, b]; integers written as floats; other markers and placements.
  const Figure g = figure_from_json(R"({"width": 640.0, "legend": "none", "charts": [
      {"series": [{"x": [1], "y": [2], "color": [1, 2, 255], "marker": "triangle"},
                  {"x": [1], "y": [2], "marker": "square"},
                  {"x": [1], "y": [2], "marker": "diamond"},
                  {"x": [1], "y": [2], "marker": "none", "dash": []}],
       "reference_lines": [{"y": -3}]},
      {}]})");
  EXPECT_EQ(g.width, 640);
  EXPECT_EQ(g.legend, LegendPlacement::kNone);
  EXPECT_EQ(g.charts[0].series[0].color, (Rgb{1, 2, 255}));
  EXPECT_EQ(g.charts[0].series[0].marker_shape, Marker::kTriangle);
  EXPECT_EQ(g.charts[0].series[1].marker_shape, Marker::kSquare);
  EXPECT_EQ(g.charts[0].series[2].marker_shape, Marker::kDiamond);
  EXPECT_FALSE(g.charts[0].series[3].markers);
  const ReferenceLine dr;
  EXPECT_EQ(g.charts[0].reference_lines[0].dash, dr.dash);
  EXPECT_EQ(g.charts[0].reference_lines[0].color, dr.color);
  EXPECT_TRUE(g.charts[1].series.empty());
  EXPECT_EQ(figure_from_json(R"({"legend": "inside", "charts": [{}]})").legend,
            LegendPlacement::kInside);
}

TEST(PlotJson, RejectsEachDefectNamingWhere) {
  // Wrapped in a chart/series where the case needs one.
  auto series_doc = [](const std::string& fields) {
    return R"({"charts": [{"series": [{"x": [1, 2], "y": [3, 4], )" + fields + "}]}]}";
  };
  auto chart_doc = [](const std::string& fields) {
    return R"({"charts": [{"series": [{"x": [1, 2], "y": [3, 4]}], )" + fields + "}]}";
  };
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"", "not valid JSON"},
      {"{\"charts\": [{}]} trailing", "not valid JSON"},
      {"{\"charts\": [{\"title\": \"\xff\"}]}", "not valid JSON"},
      {"{\"charts\": [{\"y_min\": 1e999}]}", "not valid JSON"},
      {"[1, 2]", "top level: expected an object, got an array"},
      {"{}", "top level: a figure needs \"charts\""},
      {R"({"charts": {}})", "charts: expected an array of charts, got an object"},
      {R"({"charts": []})", "charts: expected 1..64 charts, got 0"},
      {R"({"charts": [{}], "colour": "#ffffff"})",
       "colour: unknown key (expected one of: width, height, title, footer, columns, legend, "
       "font_scale, charts)"},
      {R"({"charts": [3]})", "charts[0]: expected an object, got a number"},
      {R"({"charts": [{}, {"grid": true}]})", "charts[1].grid: unknown key"},
      {R"({"width": 10, "charts": [{}]})", "width: expected an integer in 64..8192, got 10"},
      {R"({"width": 100.5, "charts": [{}]})", "width: expected an integer in 64..8192, got 100.5"},
      {R"({"height": "500", "charts": [{}]})",
       "height: expected an integer in 64..8192, got a string"},
      {R"({"columns": 65, "charts": [{}]})", "columns: expected an integer in 0..64, got 65"},
      {R"({"font_scale": -1, "charts": [{}]})", "font_scale: expected an integer in 0..8, got -1"},
      {R"({"legend": "left", "charts": [{}]})",
       "legend: expected \"below\", \"inside\" or \"none\", got \"left\""},
      {R"({"legend": true, "charts": [{}]})",
       "legend: expected \"below\", \"inside\" or \"none\", got a boolean"},
      {R"({"title": 2, "charts": [{}]})", "title: expected a string, got a number"},
      {R"({"footer": ")" + std::string(1001, 'a') + R"(", "charts": [{}]})",
       "footer: string of 1001 bytes is too long (at most 1000)"},
      {R"({"charts": [{"log_x": 1}]})", "charts[0].log_x: expected true or false, got a number"},
      {R"({"charts": [{"series": {}}]})", "charts[0].series: expected an array of series"},
      {R"({"charts": [{"series": [{"x": [1]}]}]})",
       "charts[0].series[0]: a series needs \"x\" and \"y\""},
      {R"({"charts": [{"series": [{"x": [1, 2], "y": [1]}]}]})",
       "charts[0].series[0]: \"x\" has 2 values but \"y\" has 1"},
      {R"({"charts": [{"series": [{"x": [1, "2"], "y": [1, 2]}]}]})",
       "charts[0].series[0].x[1]: expected a number or null, got a string"},
      {R"({"charts": [{"series": [{"x": 1, "y": [1]}]}]})",
       "charts[0].series[0].x: expected an array of numbers, got a number"},
      {R"({"charts": [{"log_y": true, "series": [{"x": [1, 2], "y": [1, 0]}]}]})",
       "charts[0].series[0].y[1]: log_y needs positive values, got 0"},
      {R"({"charts": [{"log_x": true, "series": [{"x": [-1, 2], "y": [1, 2]}]}]})",
       "charts[0].series[0].x[0]: log_x needs positive values, got -1"},
      {series_doc(R"("colour": "#ff0000")"), "charts[0].series[0].colour: unknown key"},
      {series_doc(R"("name": ["a"])"), "charts[0].series[0].name: expected a string, got an array"},
      {series_doc(R"("color": "#12345")"),
       "charts[0].series[0].color: expected a colour \"#rrggbb\", got \"#12345\""},
      {series_doc(R"("color": "#12345g")"), "charts[0].series[0].color: expected a colour"},
      {series_doc(R"("color": "red")"), "charts[0].series[0].color: expected a colour"},
      {series_doc(R"("color": [1, 2])"),
       "charts[0].series[0].color: expected [r, g, b], got an array of 2 values"},
      {series_doc(R"("color": [1, 2, 256])"),
       "charts[0].series[0].color[2]: expected an integer in 0..255, got 256"},
      {series_doc(R"("color": {"r": 1})"),
       "charts[0].series[0].color: expected a colour (\"#rrggbb\" or [r, g, b]), got an object"},
      {series_doc(R"("dash": [3])"),
       "charts[0].series[0].dash: expected an even number (0..16) of dash lengths, got 1"},
      {series_doc(R"("dash": [3, 0])"),
       "charts[0].series[0].dash[1]: expected an integer in 1..4096, got 0"},
      {series_doc(R"("dash": "--")"), "charts[0].series[0].dash: expected an array"},
      {series_doc(R"("marker": "star")"),
       "charts[0].series[0].marker: expected \"none\", \"disc\", \"square\", \"triangle\" or "
       "\"diamond\", got \"star\""},
      {series_doc(R"("marker_size": 33)"),
       "charts[0].series[0].marker_size: expected an integer in 0..32, got 33"},
      {series_doc(R"("line_width": 9)"),
       "charts[0].series[0].line_width: expected an integer in 0..8, got 9"},
      {chart_doc(R"("y_min": "0")"), "charts[0].y_min: expected a number or null, got a string"},
      {chart_doc(R"("y_min": 5, "y_max": 1)"), "charts[0]: y_min (5) must be below y_max (1)"},
      {chart_doc(R"("x_min": 2, "x_max": 2)"), "charts[0]: x_min (2) must be below x_max (2)"},
      {chart_doc(R"("log_y": true, "y_min": 0)"),
       "charts[0].y_min: a log axis needs a positive value, got 0"},
      {chart_doc(R"("reference_lines": [{"label": "x"}])"),
       "charts[0].reference_lines[0]: a reference line needs \"y\""},
      {chart_doc(R"("reference_lines": [{"y": null}])"),
       "charts[0].reference_lines[0].y: expected a number, got null"},
      {chart_doc(R"("reference_lines": [{"y": 1, "style": "dashed"}])"),
       "charts[0].reference_lines[0].style: unknown key"},
      {chart_doc(R"("log_y": true, "reference_lines": [{"y": -1}])"),
       "charts[0].reference_lines[0].y: log_y needs a positive value, got -1"},
      {chart_doc(R"("reference_lines": 5)"),
       "charts[0].reference_lines: expected an array of reference lines, got a number"},
      {R"({"width": 64, "columns": 2, "charts": [{}, {}]})", "the figure cannot be drawn:"},
      {std::string(100, '[') + std::string(100, ']'), "nesting deeper than 32 levels"},
  };
  for (const auto& c : cases) {
    const std::string& doc = c.first;
    const std::string& want = c.second;
    const std::string what = error_of([&] { figure_from_json(doc); });
    EXPECT_EQ(what.rfind("[plot::figure_from_json] ", 0), 0u) << what;
    EXPECT_NE(what.find(want), std::string::npos)
        << "input: " << doc.substr(0, 200) << "\nmessage: " << what << "\nexpected: " << want;
  }
  // Limits on counts.
  std::string many = R"({"charts": [{"series": [)";
  for (int i = 0; i < 257; ++i) many += std::string(i ? "," : "") + R"({"x": [], "y": []})";
  many += "]}]}";
  EXPECT_NE(error_of([&] { figure_from_json(many); }).find("257 series (at most 256)"),
            std::string::npos);
  std::string charts = R"({"charts": [)";
  for (int i = 0; i < 65; ++i) charts += std::string(i ? "," : "") + "{}";
  charts += "]}";
  EXPECT_NE(error_of([&] { figure_from_json(charts); }).find("expected 1..64 charts, got 65"),
            std::string::npos);
  // Unknown keys are shown printable and short.
  const std::string odd = error_of(
      [&] { figure_from_json("{\"charts\": [{}], \"\\u0001" + std::string(80, 'k') + "\": 1}"); });
  EXPECT_NE(odd.find("?kkkk"), std::string::npos) << odd;
  EXPECT_LT(odd.size(), 300u) << odd;
}

TEST(PlotJson, AnyInputGivesAFigureOrAnError) {
  // Every prefix, and random byte changes, of a valid spec: figure_from_json either returns a
  // figure that renders, or throws attn::Error; nothing else.
  const std::string base = R"({"width": 200, "height": 150, "title": "t", "footer": "f",
    "charts": [{"title": "a", "log_x": true, "y_min": 0,
                "series": [{"name": "s", "x": [1, 2, 4], "y": [3, null, 5], "dash": [3, 2],
                            "marker": "square", "color": "#102030"}],
                "reference_lines": [{"y": 4, "label": "r"}]},
               {"series": [{"x": [0, 1], "y": [1, 0], "color": [9, 9, 9]}]}]})";
  int accepted = 0, rejected = 0;
  auto attempt = [&](const std::string& doc) {
    try {
      const Figure f = figure_from_json(doc);
      const Image img = render(f);
      EXPECT_EQ(img.width, f.width);
      ++accepted;
    } catch (const Error&) {
      ++rejected;
    }
  };
  for (std::size_t n = 0; n <= base.size(); ++n) attempt(base.substr(0, n));
  std::mt19937 gen(7);
  const std::string alphabet = "{}[]\",:0123456789.-eE nul truefals#\\\x01\xff";
  for (int i = 0; i < 400; ++i) {
    std::string doc = base;
    const int edits = 1 + int(gen() % 3);
    for (int k = 0; k < edits; ++k) {
      const std::size_t pos = gen() % doc.size();
      switch (gen() % 3) {
        case 0: doc[pos] = alphabet[gen() % alphabet.size()]; break;
        case 1: doc.erase(pos, 1 + gen() % 8); break;
        default: doc.insert(pos, 1, alphabet[gen() % alphabet.size()]); break;
      }
    }
    attempt(doc);
  }
  EXPECT_GT(accepted, 10);
  EXPECT_GT(rejected, 400);
}

}  // namespace
}  // namespace attn::plot

// Tests for attn::plot: images, font, PNG encode/decode (against PNG files built byte by byte
// here), ticks, line charts (dashes, markers, reference lines) and figures checked pixel by pixel
// through the layout's data -> pixel mapping, and the JSON form of figures.
#include <attn/plot.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "test_util.h"

namespace attn::plot {
namespace {

using attn::testing::error_of;

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr Rgb kRed{255, 0, 0};
constexpr Rgb kBlue{0, 0, 255};

// ---- a minimal independent PNG writer: stored (uncompressed) deflate blocks
// ------------------------

uint32_t crc32(const std::string& bytes) {
  uint32_t c = 0xFFFFFFFFu;
  for (unsigned char b : bytes) {
    c ^= b;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
  }
  return c ^ 0xFFFFFFFFu;
}

void put_be32(std::string& s, uint32_t v) {
  for (int k = 3; k >= 0; --k) s.push_back(char((v >> (8 * k)) & 0xFF));
}

std::string chunk(const std::string& type, const std::string& data) {
  std::string out;
  put_be32(out, uint32_t(data.size()));
  out += type + data;
  put_be32(out, crc32(type + data));
  return out;
}

// zlib stream of `raw` using stored blocks.
std::string zlib_stored(const std::string& raw) {
  std::string out = "\x78\x01";
  std::size_t pos = 0;
  do {
    const std::size_t n = std::min<std::size_t>(65535, raw.size() - pos);
    const bool last = pos + n == raw.size();
    out.push_back(last ? 1 : 0);
    out.push_back(char(n & 0xFF));
    out.push_back(char(n >> 8));
    out.push_back(char(~n & 0xFF));
    out.push_back(char((~n >> 8) & 0xFF));
    out += raw.substr(pos, n);
    pos += n;
  } while (pos < raw.size());
  uint32_t a = 1, b = 0;
  for (unsigned char ch : raw) {
    a = (a + ch) % 65521;
    b = (b + a) % 65521;
  }
  put_be32(out, (b << 16) | a);
  return out;
}

// A PNG with the given header fields; `rows` are the packed scanlines (filter byte added here).
std::string make_png(int w, int h, int depth, int color_type, const std::vector<std::string>& rows,
                     const std::string& plte = "", const std::string& trns = "") {
  std::string ihdr;
  put_be32(ihdr, uint32_t(w));
  put_be32(ihdr, uint32_t(h));
  ihdr += char(depth);
  ihdr += char(color_type);
  ihdr += std::string("\0\0\0", 3);
  std::string raw;
  for (const auto& r : rows) raw += '\0' + r;
  std::string png = "\x89PNG\r\n\x1a\n";
  png += chunk("IHDR", ihdr);
  if (!plte.empty()) png += chunk("PLTE", plte);
  if (!trns.empty()) png += chunk("tRNS", trns);
  png += chunk("IDAT", zlib_stored(raw));
  png += chunk("IEND", "");
  return png;
}

std::string bytes(std::initializer_list<int> v) {
  std::string s;
  for (int b : v) s.push_back(char(b));
  return s;
}

// ---- helpers for chart pixels
// ----------------------------------------------------------------------

Image roundtrip(const Image& img) { return decode_png(encode_png(img)); }

// Whether some pixel within `r` of (x, y) has colour c.
bool near(const Image& img, double x, double y, Rgb c, int r = 1) {
  const int cx = int(std::lround(x)), cy = int(std::lround(y));
  for (int dy = -r; dy <= r; ++dy)
    for (int dx = -r; dx <= r; ++dx)
      if (img.contains(cx + dx, cy + dy) && img.get(cx + dx, cy + dy) == c) return true;
  return false;
}

int count_color(const Image& img, Rgb c, int x0, int y0, int x1, int y1) {
  int n = 0;
  for (int y = std::max(y0, 0); y <= std::min(y1, img.height - 1); ++y)
    for (int x = std::max(x0, 0); x <= std::min(x1, img.width - 1); ++x) n += img.get(x, y) == c;
  return n;
}

Series series(std::vector<double> x, std::vector<double> y, Rgb c, std::string name = "") {
  Series s;
  s.name = std::move(name);
  s.x = std::move(x);
  s.y = std::move(y);
  s.color = c;
  return s;
}

// ---- image and font
// --------------------------------------------------------------------------------

TEST(PlotImage, SetGetAndBounds) {
  Image img(7, 5, Rgb{1, 2, 3});
  EXPECT_EQ(img.rgb.size(), 7u * 5u * 3u);
  EXPECT_EQ(img.get(6, 4), (Rgb{1, 2, 3}));
  img.set(6, 4, kRed);
  EXPECT_EQ(img.get(6, 4), kRed);
  EXPECT_EQ(img.rgb[(4 * 7 + 6) * 3], 255);
  const auto before = img.rgb;
  img.set(-1, 0, kBlue);
  img.set(7, 0, kBlue);
  img.set(0, 5, kBlue);
  img.set(std::numeric_limits<int>::min(), std::numeric_limits<int>::max(), kBlue);
  EXPECT_EQ(img.rgb, before);
  EXPECT_THROW(img.get(7, 0), IndexError);
  EXPECT_THROW(img.get(0, -1), IndexError);
  EXPECT_THROW(Image(0, 5), Error);
  EXPECT_THROW(Image(5, 20000), Error);
}

TEST(PlotImage, FillRectClips) {
  Image img(10, 8);
  img.fill_rect(8, 6, 100000, 100000, kRed);  // corners in any order, clipped
  EXPECT_EQ(count_color(img, kRed, 0, 0, 9, 7), 2 * 2);
  img.fill_rect(std::numeric_limits<int>::min(), std::numeric_limits<int>::min(), 0, 0, kBlue);
  EXPECT_EQ(count_color(img, kBlue, 0, 0, 9, 7), 1);  // only (0, 0)
  EXPECT_EQ(img.get(0, 0), kBlue);
  img.fill_rect(std::numeric_limits<int>::max(), std::numeric_limits<int>::min(), -5, 0, kBlue);
  EXPECT_EQ(count_color(img, kBlue, 0, 0, 9, 7), 10);  // row 0
  img.fill_rect(10, 0, 20, 7, kBlue);                  // right of the image
  EXPECT_EQ(count_color(img, kBlue, 0, 0, 9, 7), 10);
}

TEST(PlotImage, LinePixels) {
  Image img(20, 10);
  img.line(2, 5, 10, 5, kRed);
  EXPECT_EQ(count_color(img, kRed, 0, 0, 19, 9), 9);
  for (int x = 2; x <= 10; ++x) EXPECT_EQ(img.get(x, 5), kRed) << x;
  // A diagonal hits exactly one pixel per column.
  Image d(10, 10);
  d.line(0, 0, 9, 9, kBlue);
  for (int k = 0; k < 10; ++k) EXPECT_EQ(d.get(k, k), kBlue);
  EXPECT_EQ(count_color(d, kBlue, 0, 0, 9, 9), 10);
  // Thickness 2 covers (x, y) .. (x + 1, y + 1) at each step.
  Image t(10, 10);
  t.line(3, 3, 3, 3, kRed, 2);
  EXPECT_EQ(count_color(t, kRed, 0, 0, 9, 9), 4);
  EXPECT_EQ(t.get(4, 4), kRed);
  EXPECT_THROW(t.line(0, 0, 1, 1, kRed, 0), Error);
}

TEST(PlotImage, LineClipsHugeAndNonFinite) {
  Image img(16, 16);
  img.line(-1e12, 8, 1e12, 8, kRed, 2);  // clipped to the image, bounded work
  EXPECT_EQ(count_color(img, kRed, 0, 8, 15, 9), 32);
  EXPECT_EQ(count_color(img, kRed, 0, 0, 15, 15), 32);
  Image n(16, 16);
  n.line(kNaN, 0, 5, 5, kRed);
  n.line(0, 0, kInf, 5, kRed);
  n.line(-100, -100, -50, -20, kRed);  // entirely outside
  EXPECT_EQ(count_color(n, kRed, 0, 0, 15, 15), 0);
}

TEST(PlotFont, CoversPrintableAscii) {
  for (int ch = 33; ch < 127; ++ch) {
    int ink = 0;
    for (int r = 0; r < kGlyphH; ++r)
      for (int c = 0; c < kGlyphW; ++c) ink += glyph_pixel(char(ch), c, r);
    EXPECT_GT(ink, 0) << "glyph '" << char(ch) << "' is blank";
  }
  for (int r = 0; r < kGlyphH; ++r)
    for (int c = 0; c < kGlyphW; ++c) {
      EXPECT_FALSE(glyph_pixel(' ', c, r));
      // Anything outside printable ASCII draws as '?'.
      EXPECT_EQ(glyph_pixel('\n', c, r), glyph_pixel('?', c, r));
      EXPECT_EQ(glyph_pixel(char(0xE9), c, r), glyph_pixel('?', c, r));
    }
  EXPECT_FALSE(glyph_pixel('A', -1, 0));
  EXPECT_FALSE(glyph_pixel('A', 0, kGlyphH));
  // Distinct glyphs for the characters chart labels use.
  const std::string chars = "0123456789.,-+:/()%=xeE";
  for (std::size_t i = 0; i < chars.size(); ++i)
    for (std::size_t j = i + 1; j < chars.size(); ++j) {
      bool differ = false;
      for (int r = 0; r < kGlyphH; ++r)
        for (int c = 0; c < kGlyphW; ++c)
          differ |= glyph_pixel(chars[i], c, r) != glyph_pixel(chars[j], c, r);
      EXPECT_TRUE(differ) << chars[i] << " vs " << chars[j];
    }
}

TEST(PlotFont, TextDrawsGlyphCells) {
  EXPECT_EQ(text_width("", 2), 0);
  EXPECT_EQ(text_width("A", 1), 5);
  EXPECT_EQ(text_width("Ab", 2), 2 * 12 - 2);
  Image img(40, 30);
  img.text(3, 4, "A7", kBlue, 2);
  for (int n = 0; n < 2; ++n)
    for (int r = 0; r < kGlyphH; ++r)
      for (int c = 0; c < kGlyphW; ++c)
        for (int sy = 0; sy < 2; ++sy)
          for (int sx = 0; sx < 2; ++sx) {
            const int x = 3 + n * 12 + c * 2 + sx, y = 4 + r * 2 + sy;
            EXPECT_EQ(img.get(x, y) == kBlue, glyph_pixel("A7"[n], c, r))
                << n << " " << c << " " << r;
          }
  // Every blue pixel belongs to the text box.
  EXPECT_EQ(count_color(img, kBlue, 0, 0, 39, 29), count_color(img, kBlue, 3, 4, 3 + 21, 4 + 17));
  // Rotated text: cell (c, r) of glyph 0 lands at (x + r, y - c).
  Image up(30, 30);
  up.text_up(5, 20, "L", kRed, 1);
  for (int r = 0; r < kGlyphH; ++r)
    for (int c = 0; c < kGlyphW; ++c)
      EXPECT_EQ(up.get(5 + r, 20 - c) == kRed, glyph_pixel('L', c, r));
  // Off-image text is clipped without error.
  Image small(8, 8);
  small.text(-7, -3, "Hello, world", kRed, 3);
  small.text(std::numeric_limits<int>::max() - 5, 0, "xyz", kRed, 1);
  small.text_up(2, std::numeric_limits<int>::min() + 3, "xyz", kRed, 1);
  EXPECT_THROW(small.text(0, 0, "a", kRed, 0), Error);
}

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

// ---- PNG
// -------------------------------------------------------------------------------------------

TEST(PlotPng, RandomRoundTripIsBitExact) {
  std::mt19937 gen(1234);
  for (auto [w, h] : {std::pair{1, 1}, std::pair{37, 23}, std::pair{300, 7}}) {
    Image img(w, h);
    for (auto& b : img.rgb) b = uint8_t(gen());
    const std::string png = encode_png(img);
    EXPECT_EQ(png.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));
    // IHDR: width, height, bit depth 8, colour type 2 (RGB).
    EXPECT_EQ(png.substr(12, 4), "IHDR");
    EXPECT_EQ(uint8_t(png[24]), 8);
    EXPECT_EQ(uint8_t(png[25]), 2);
    const Image back = decode_png(png);
    EXPECT_EQ(back.width, w);
    EXPECT_EQ(back.height, h);
    EXPECT_EQ(back.rgb, img.rgb);
  }
}

TEST(PlotPng, DecodesIndependentlyBuiltFiles) {
  // RGB 8-bit, exactly as written by hand.
  Image a = decode_png(make_png(2, 1, 8, 2, {bytes({10, 20, 30, 40, 50, 60})}));
  EXPECT_EQ(a.rgb, (std::vector<uint8_t>{10, 20, 30, 40, 50, 60}));
  // Gray 8-bit.
  Image g = decode_png(make_png(3, 1, 8, 0, {bytes({0, 128, 255})}));
  EXPECT_EQ(g.rgb, (std::vector<uint8_t>{0, 0, 0, 128, 128, 128, 255, 255, 255}));
  // Gray 1-bit: 0b10100000 -> white, black, white.
  Image g1 = decode_png(make_png(3, 1, 1, 0, {bytes({0xA0})}));
  EXPECT_EQ(g1.rgb, (std::vector<uint8_t>{255, 255, 255, 0, 0, 0, 255, 255, 255}));
  // Palette 8-bit (with a tRNS chunk that must not leak in as alpha).
  Image p = decode_png(make_png(3, 2, 8, 3, {bytes({0, 1, 2}), bytes({2, 2, 0})},
                                bytes({255, 0, 0, 0, 255, 0, 0, 0, 255}), bytes({0, 255})));
  EXPECT_EQ(p.rgb, (std::vector<uint8_t>{255, 0, 0, 0, 255, 0, 0, 0, 255,  //
                                         0, 0, 255, 0, 0, 255, 255, 0, 0}));
  // RGBA 8-bit: alpha dropped.
  Image rgba = decode_png(make_png(1, 2, 8, 6, {bytes({1, 2, 3, 0}), bytes({4, 5, 6, 255})}));
  EXPECT_EQ(rgba.rgb, (std::vector<uint8_t>{1, 2, 3, 4, 5, 6}));
  // Gray + alpha 8-bit.
  Image ga = decode_png(make_png(1, 1, 8, 4, {bytes({77, 9})}));
  EXPECT_EQ(ga.rgb, (std::vector<uint8_t>{77, 77, 77}));
  // RGB 16-bit: the high byte of each sample.
  Image w16 = decode_png(make_png(1, 1, 16, 2, {bytes({0x12, 0x00, 0xAB, 0x00, 0xFF, 0xFF})}));
  EXPECT_EQ(w16.rgb, (std::vector<uint8_t>{0x12, 0xAB, 0xFF}));
}

TEST(PlotPng, DecodeErrors) {
  EXPECT_THROW(decode_png(""), Error);
  EXPECT_THROW(decode_png("GIF89a is not a png at all"), Error);
  Image img(16, 16);
  for (std::size_t i = 0; i < img.rgb.size(); ++i) img.rgb[i] = uint8_t(i * 7);
  const std::string png = encode_png(img);
  for (std::size_t cut : {8ul, 20ul, 33ul, png.size() / 2, png.size() - 13})
    EXPECT_THROW(decode_png(std::string_view(png).substr(0, cut)), Error) << cut;
  std::string bad = png;
  bad[16] ^= 0x01;  // width inside IHDR: the CRC no longer matches
  EXPECT_THROW(decode_png(bad), Error);
  // Sizes beyond 16384 are refused before any allocation; a large image whose rows are missing
  // is an error after it (fuzz/fuzz_files.cpp skips headers above 4 Mpixel, for speed).
  EXPECT_THROW(decode_png(make_png(20000, 1, 8, 2, {std::string(60000, 'x')})), Error);
  EXPECT_THROW(decode_png(make_png(4096, 4096, 8, 2, {std::string(3 * 4096, 'x')})), Error);
  try {
    decode_png("nope");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()).rfind("[plot::decode_png]", 0), 0u) << e.what();
  }
  // Bad images are refused by encode_png.
  Image broken(4, 4);
  broken.rgb.pop_back();
  EXPECT_THROW(encode_png(broken), Error);
  EXPECT_THROW(encode_png(Image()), Error);
}

TEST(PlotPng, WritePngIsAtomicAndReadable) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("attn_plot_test_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  Image img(5, 4, Rgb{9, 8, 7});
  img.set(1, 2, kRed);
  const std::string path = (dir / "x.png").string();
  { std::ofstream(path) << "old contents"; }
  write_png(path, img);
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(decode_png(ss.str()).rgb, img.rgb);
  int files = 0;
  for ([[maybe_unused]] const auto& e : fs::directory_iterator(dir)) ++files;
  EXPECT_EQ(files, 1);  // no temporary left behind
  EXPECT_THROW(write_png((dir / "missing" / "y.png").string(), img), Error);
  fs::remove_all(dir);
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

TEST(PlotChart, SizeBackgroundAndSeriesPixels) {
  LineChart chart;
  chart.title = "loss";
  chart.x_label = "step";
  chart.y_label = "loss";
  const std::vector<double> xs = {0, 100, 200, 300, 400}, ys = {4.0, 2.5, 3.0, 1.5, 1.0};
  chart.series.push_back(series(xs, ys, kRed));
  ChartLayout L;
  const Image img = roundtrip(render(chart, 640, 400, &L));
  EXPECT_EQ(img.width, 640);
  EXPECT_EQ(img.height, 400);
  EXPECT_EQ(img.get(0, 0), colors::kWhite);
  EXPECT_EQ(img.get(639, 399), colors::kWhite);
  EXPECT_EQ(L.legend_left, -1);  // unnamed series: no legend
  // The data fit inside the axes, with the mapping monotone.
  EXPECT_LT(L.x_lo, 0);
  EXPECT_GT(L.x_hi, 400);
  EXPECT_LT(L.x_to_px(0), L.x_to_px(100));
  EXPECT_GT(L.y_to_px(1), L.y_to_px(4));
  EXPECT_DOUBLE_EQ(L.x_to_px(L.x_lo), L.plot_left);
  EXPECT_DOUBLE_EQ(L.y_to_px(L.y_lo), L.plot_bottom);
  for (std::size_t i = 0; i < xs.size(); ++i) {
    const int px = int(std::lround(L.x_to_px(xs[i]))), py = int(std::lround(L.y_to_px(ys[i])));
    EXPECT_EQ(img.get(px, py), kRed) << i;
    if (i + 1 < xs.size()) {
      const double mx = L.x_to_px((xs[i] + xs[i + 1]) / 2), my = L.y_to_px((ys[i] + ys[i + 1]) / 2);
      EXPECT_TRUE(near(img, mx, my, kRed)) << "segment " << i;
    }
  }
  // No red outside the data area, and no red far from the polyline (e.g. the top-left corner
  // region of the data area is above the whole curve: y > 4 there).
  EXPECT_EQ(count_color(img, kRed, 0, 0, L.plot_left - 1, 399), 0);
  EXPECT_EQ(count_color(img, kRed, 0, L.plot_bottom + 2, 639, 399), 0);
  EXPECT_EQ(count_color(img, kRed, L.plot_left, L.plot_top, L.plot_right, int(L.y_to_px(4.0)) - 3),
            0);
  // Tick labels are nice values and the grid is drawn.
  EXPECT_FALSE(L.x_ticks.empty());
  ASSERT_GE(L.x_ticks.size(), 3u);
  const double step = L.x_ticks[1] - L.x_ticks[0];
  const double mant = step / std::pow(10.0, std::floor(std::log10(step)));
  EXPECT_TRUE(mant == 1 || mant == 2 || mant == 5) << step;
  for (std::size_t i = 0; i < L.x_ticks.size(); ++i) {
    EXPECT_EQ(std::fmod(L.x_ticks[i], step), 0) << L.x_ticks[i];
    if (i > 0) {
      EXPECT_EQ(L.x_ticks[i] - L.x_ticks[i - 1], step);
    }
    EXPECT_GE(L.x_ticks[i], L.x_lo);
    EXPECT_LE(L.x_ticks[i], L.x_hi);
  }
  EXPECT_EQ(L.x_tick_labels.front(), format_tick(L.x_ticks.front()));
  EXPECT_GT(count_color(img, colors::kGrid, L.plot_left, L.plot_top, L.plot_right, L.plot_bottom),
            0);
  EXPECT_GT(count_color(img, colors::kInk, 0, 0, 639, L.plot_top - 1), 0);  // the title
  // Same picture through save(): the file decodes to the render.
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("attn_chart_" + std::to_string(::getpid()) + ".png"))
                               .string();
  save(chart, path, 640, 400);
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  EXPECT_EQ(decode_png(ss.str()).rgb, img.rgb);
  std::filesystem::remove(path);
}

TEST(PlotChart, LegendTextAndPlacement) {
  LineChart chart;
  // Rising data: the top-right corner is taken, so the legend goes elsewhere.
  chart.series.push_back(series({0, 1, 2, 3}, {0, 1, 2, 3}, kRed, "train"));
  chart.series.push_back(series({0, 1, 2, 3}, {0.5, 1.5, 2.5, 3.5}, kBlue, "validation"));
  Series unnamed = series({0, 3}, {1, 1}, Rgb{0, 200, 0});
  chart.series.push_back(unnamed);
  ChartLayout L;
  const Image img = render(chart, 800, 500, &L);
  ASSERT_GE(L.legend_left, L.plot_left);
  ASSERT_LE(L.legend_right, L.plot_right);
  ASSERT_GE(L.legend_top, L.plot_top);
  ASSERT_LE(L.legend_bottom, L.plot_bottom);
  const int mid_x = (L.plot_left + L.plot_right) / 2, mid_y = (L.plot_top + L.plot_bottom) / 2;
  EXPECT_FALSE(L.legend_left > mid_x && L.legend_bottom < mid_y) << "legend over the data";
  // The legend box holds text and a sample of each named series, nothing of the unnamed one.
  const int ink =
      count_color(img, colors::kInk, L.legend_left, L.legend_top, L.legend_right, L.legend_bottom);
  EXPECT_GT(ink, 100);
  EXPECT_GT(count_color(img, kRed, L.legend_left, L.legend_top, L.legend_right, L.legend_bottom),
            10);
  EXPECT_GT(count_color(img, kBlue, L.legend_left, L.legend_top, L.legend_right, L.legend_bottom),
            10);
  EXPECT_EQ(count_color(img, Rgb{0, 200, 0}, L.legend_left, L.legend_top, L.legend_right,
                        L.legend_bottom),
            0);
  EXPECT_EQ(img.get(L.legend_left, L.legend_top), colors::kFrame);
  // The first entry's text is "train" drawn at the layout's font scale: find its first glyph.
  const int s = L.scale;
  bool found = false;
  for (int y = L.legend_top; y <= L.legend_bottom && !found; ++y)
    for (int x = L.legend_left; x <= L.legend_right && !found; ++x) {
      bool all = true;
      for (int r = 0; r < 7 && all; ++r)
        for (int c = 0; c < kGlyphW && all; ++c)
          all = (img.get(std::min(x + c * s, img.width - 1), std::min(y + r * s, img.height - 1)) ==
                 colors::kInk) == glyph_pixel('t', c, r);
      found = all;
    }
  EXPECT_TRUE(found);
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
  EXPECT_TRUE(near(di, Ld.x_to_px(0.25), Ld.y_to_px(0.25), palette(0)));
  EXPECT_TRUE(near(di, Ld.x_to_px(0.25), Ld.y_to_px(0.75), palette(1)));
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
    EXPECT_EQ(img.get(int(std::lround(L.x_to_px(xs[i]))), int(std::lround(L.y_to_px(ys[i])))),
              kRed);
  // On a log axis the segment midpoint is the geometric mean.
  EXPECT_TRUE(near(img, L.x_to_px(std::sqrt(128.0 * 256)), L.y_to_px(std::sqrt(3.0)), kRed));
  // x = 2^k points sit on the labelled tick marks: the axis colour below the axis at x(1024).
  EXPECT_EQ(img.get(int(std::lround(L.x_to_px(1024))), L.plot_bottom + 2), colors::kAxis);
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
    EXPECT_TRUE(near(full, Lf.x_to_px(t), Lf.y_to_px(y), kRed)) << t;
    EXPECT_FALSE(near(gap, Lg.x_to_px(t), Lg.y_to_px(y), kRed, 2)) << t;
    EXPECT_FALSE(near(inf, Li.x_to_px(t), Li.y_to_px(y), kRed, 2)) << t;
  }
  // The segments on either side are still drawn.
  EXPECT_TRUE(near(gap, Lg.x_to_px(0.5), Lg.y_to_px(1.5), kRed));
  EXPECT_TRUE(near(gap, Lg.x_to_px(3.5), Lg.y_to_px(4.5), kRed));
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
  EXPECT_EQ(img.get(int(std::lround(L.x_to_px(5))), int(std::lround(L.y_to_px(7)))), kRed);
  // All-equal values: a horizontal line across the middle.
  LineChart flat;
  flat.series.push_back(series({0, 1, 2}, {3, 3, 3}, kRed));
  img = render(flat, 300, 200, &L);
  EXPECT_LT(L.y_lo, 3);
  EXPECT_GT(L.y_hi, 3);
  EXPECT_NEAR(L.y_to_px(3), (L.plot_top + L.plot_bottom) / 2.0, 1.0);
  EXPECT_TRUE(near(img, L.x_to_px(1), L.y_to_px(3), kRed, 0));
  // Zeros everywhere, and a flat log series.
  flat.series[0].y = {0, 0, 0};
  EXPECT_NO_THROW(render(flat, 300, 200));
  LineChart flat_log;
  flat_log.log_y = true;
  flat_log.series.push_back(series({0, 1}, {5, 5}, kRed));
  img = render(flat_log, 300, 200, &L);
  EXPECT_LT(L.y_lo, 5);
  EXPECT_GT(L.y_hi, 5);
  EXPECT_TRUE(near(img, L.x_to_px(0.5), L.y_to_px(5), kRed, 0));
  // Nothing to draw: empty series, only NaN, no series at all; still axes and a legend entry.
  LineChart empty;
  empty.series.push_back(series({}, {}, kRed, "empty"));
  empty.series.push_back(series({1, 2}, {kNaN, kNaN}, kBlue, "nan"));
  img = render(empty, 300, 200, &L);
  EXPECT_EQ(count_color(img, kRed, L.plot_left, L.plot_top, L.plot_right, L.plot_bottom),
            count_color(img, kRed, L.legend_left, L.legend_top, L.legend_right, L.legend_bottom));
  EXPECT_GT(count_color(img, colors::kAxis, 0, 0, 299, 199), 0);
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
  EXPECT_EQ(count_color(img, kRed, 0, 0, 399, L.plot_top - 2), 0);
  EXPECT_EQ(count_color(img, kRed, 0, L.plot_bottom + 2, 399, 299), 0);
  EXPECT_TRUE(near(img, L.x_to_px(0.1), L.y_to_px(1), kRed));
  // Only one end fixed.
  chart.y_max.reset();
  chart.y_min = 0;
  render(chart, 400, 300, &L);
  EXPECT_EQ(L.y_lo, 0);
  EXPECT_GT(L.y_hi, 10);
}

TEST(PlotChart, Errors) {
  LineChart ok;
  ok.series.push_back(series({1, 2}, {1, 2}, kRed, "s"));
  EXPECT_THROW(render(ok, 63, 100), Error);
  EXPECT_THROW(render(ok, 100, 8193), Error);
  LineChart mismatch = ok;
  mismatch.series[0].y.push_back(3);
  try {
    render(mismatch);
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), "[plot::render] series 0 's' has 2 x values but 3 y values");
  }
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
  EXPECT_THROW(save(ok, "/nonexistent-dir/x.png", 100, 100), Error);
}

// ---- dashes, markers, reference lines
// -----------------------------------------------------------------

// Whether the (checked) pattern is "on" at arc length a: the rule Image::dashed_line documents.
bool on_at(const std::vector<int>& dash, double a) {
  int period = 0;
  for (int d : dash) period += d;
  double m = std::fmod(a, period);
  for (std::size_t i = 0; i < dash.size(); ++i) {
    if (m < dash[i]) return i % 2 == 0;
    m -= dash[i];
  }
  return false;
}

TEST(PlotImage, DashedLineLeavesGapsAtTheRightPixels) {
  const std::vector<int> dash = {4, 3};
  Image img(60, 12);
  EXPECT_DOUBLE_EQ(img.dashed_line(10, 5, 40, 5, kRed, 1, dash), 30.0);
  for (int x = 0; x < 60; ++x)
    EXPECT_EQ(img.get(x, 5) == kRed, x >= 10 && x <= 40 && (x - 10) % 7 < 4) << x;
  EXPECT_EQ(count_color(img, kRed, 0, 0, 59, 11), count_color(img, kRed, 0, 5, 59, 5));
  // A phase shifts the pattern; the returned phase continues it.
  Image p(60, 12);
  EXPECT_DOUBLE_EQ(p.dashed_line(10, 5, 20, 5, kRed, 1, dash, 2.0), 12.0);
  for (int x = 10; x <= 20; ++x) EXPECT_EQ(p.get(x, 5) == kRed, (x - 10 + 2) % 7 < 4) << x;
  // Vertical, and a second pattern with two different gaps.
  const std::vector<int> dash2 = {2, 1, 3, 2};
  Image v(12, 40);
  v.dashed_line(6, 3, 6, 35, kBlue, 1, dash2);
  for (int y = 3; y <= 35; ++y) EXPECT_EQ(v.get(6, y) == kBlue, on_at(dash2, y - 3)) << y;
  // Diagonal: lengths are Euclidean, step i lies at arc length i * sqrt(2).
  const std::vector<int> dash3 = {5, 5};
  Image d(40, 40);
  d.dashed_line(0, 0, 30, 30, kRed, 1, dash3);
  for (int i = 0; i <= 30; ++i) EXPECT_EQ(d.get(i, i) == kRed, on_at(dash3, i * std::sqrt(2.0)));
  EXPECT_EQ(count_color(d, kRed, 0, 0, 39, 39), count_color(d, kRed, 0, 0, 30, 30));
  // Thick: every drawn step is a 3x3 square; an off step between two off steps is blank.
  Image t(60, 12);
  t.dashed_line(10, 5, 40, 5, kRed, 3, dash);
  for (int y = 4; y <= 6; ++y) {
    EXPECT_EQ(t.get(11, y), kRed) << y;
    EXPECT_NE(t.get(15, y), kRed) << y;  // offset 5: steps 4, 5 and 6 are all off
    EXPECT_NE(t.get(22, y), kRed) << y;  // offset 12
  }
  // Clipped far outside the image: the pattern keeps its arc length from the real start.
  Image c(60, 4);
  EXPECT_DOUBLE_EQ(c.dashed_line(-1e6, 2, 1e6, 2, kRed, 1, dash, 0.0), 2e6);
  for (int x = 0; x < 60; ++x) EXPECT_EQ(c.get(x, 2) == kRed, on_at(dash, x + 1e6)) << x;
  // Empty pattern: solid, as line().
  Image s(30, 4), l(30, 4);
  s.dashed_line(2, 1, 25, 1, kRed, 2, {});
  l.line(2, 1, 25, 1, kRed, 2);
  EXPECT_EQ(s.rgb, l.rgb);
  // Non-finite: nothing drawn, phase unchanged.
  Image n(10, 10);
  EXPECT_EQ(n.dashed_line(kNaN, 0, 5, 5, kRed, 1, dash, 3.0), 3.0);
  EXPECT_EQ(count_color(n, kRed, 0, 0, 9, 9), 0);
  // Bad patterns and thickness.
  EXPECT_THROW(n.dashed_line(0, 0, 5, 5, kRed, 1, {3}), Error);
  EXPECT_THROW(n.dashed_line(0, 0, 5, 5, kRed, 1, {3, 0}), Error);
  EXPECT_THROW(n.dashed_line(0, 0, 5, 5, kRed, 1, {3, -1}), Error);
  EXPECT_THROW(n.dashed_line(0, 0, 5, 5, kRed, 1, {3, 5000}), Error);
  EXPECT_THROW(n.dashed_line(0, 0, 5, 5, kRed, 1, std::vector<int>(18, 2)), Error);
  EXPECT_THROW(n.dashed_line(0, 0, 5, 5, kRed, 9, dash), Error);
}

TEST(PlotImage, MarkerShapes) {
  const int r = 4, cx = 20, cy = 20;
  for (Marker shape : {Marker::kDisc, Marker::kSquare, Marker::kTriangle, Marker::kDiamond}) {
    Image img(41, 41);
    img.marker(cx, cy, shape, r, kRed);
    Image disc(41, 41);
    disc.disc(cx, cy, r, kRed);
    for (int y = 0; y < 41; ++y)
      for (int x = 0; x < 41; ++x) {
        const int dx = x - cx, k = y - cy;
        bool want = false;
        switch (shape) {
          case Marker::kDisc: want = disc.get(x, y) == kRed; break;
          case Marker::kSquare: want = std::abs(dx) <= r && std::abs(k) <= r; break;
          case Marker::kTriangle: want = std::abs(k) <= r && std::abs(dx) <= (k + r) / 2; break;
          case Marker::kDiamond: want = std::abs(dx) + std::abs(k) <= r; break;
        }
        EXPECT_EQ(img.get(x, y) == kRed, want) << int(shape) << " at " << x << "," << y;
      }
  }
  // The shapes are told apart by their corners: the triangle points up.
  Image tri(41, 41);
  tri.marker(cx, cy, Marker::kTriangle, r, kRed);
  EXPECT_EQ(tri.get(cx - r, cy + r), kRed);
  EXPECT_EQ(tri.get(cx + r, cy + r), kRed);
  EXPECT_NE(tri.get(cx - r, cy - r), kRed);
  EXPECT_EQ(tri.get(cx, cy - r), kRed);
  // Radius 0 is one pixel; edges clip; bad radius or shape throws.
  for (Marker shape : {Marker::kSquare, Marker::kTriangle, Marker::kDiamond}) {
    Image one(5, 5);
    one.marker(2, 2, shape, 0, kRed);
    EXPECT_EQ(count_color(one, kRed, 0, 0, 4, 4), 1);
    one.marker(std::numeric_limits<int>::max(), std::numeric_limits<int>::min(), shape, 30, kRed);
    one.marker(-1, -1, shape, 3, kBlue);
    EXPECT_EQ(one.get(0, 0), kBlue);
  }
  Image e(5, 5);
  EXPECT_THROW(e.marker(2, 2, Marker::kDisc, -1, kRed), Error);
  EXPECT_THROW(e.marker(2, 2, Marker::kDisc, 1025, kRed), Error);
  EXPECT_THROW(e.marker(2, 2, static_cast<Marker>(9), 2, kRed), Error);
}

// A chart whose axes are fixed to x 0..100 and y 0..10, so that x = 0 and x = 100 fall exactly on
// the data area's left and right pixel columns.
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
    s.line_width = 1;
    chart.series.push_back(s);
    ChartLayout L;
    const Image img = roundtrip(render(chart, 500, 300, &L));
    ASSERT_EQ(L.x_to_px(0), L.plot_left);
    ASSERT_EQ(L.x_to_px(100), L.plot_right);
    const int row = int(std::lround(L.y_to_px(5)));
    // The pattern runs on across the vertices at x = 37 and 50.
    for (int x = L.plot_left + 1; x <= L.plot_right; ++x)
      EXPECT_EQ(img.get(x, row) == kRed, (x - L.plot_left) % 10 < 6) << x;
    EXPECT_EQ(count_color(img, kRed, 0, 0, 499, 299), count_color(img, kRed, 0, row, 499, row));
  }
  // A gap (NaN) restarts the pattern at the next point.
  LineChart chart = fixed_chart();
  Series s = series({0, 30, kNaN, 60, 100}, {5, 5, 5, 5, 5}, kRed);
  s.dash = dash;
  s.line_width = 1;
  chart.series.push_back(s);
  ChartLayout L;
  const Image img = render(chart, 500, 300, &L);
  const int row = int(std::lround(L.y_to_px(5)));
  const int start = int(std::ceil(L.x_to_px(60)));
  for (int k = 1; k <= 4; ++k) EXPECT_EQ(img.get(start + k, row), kRed) << k;
  for (int k = 7; k <= 8; ++k) EXPECT_NE(img.get(start + k, row), kRed) << k;
  // Solid series are unchanged by the new fields' defaults.
  LineChart solid = fixed_chart();
  solid.series.push_back(series({0, 100}, {5, 5}, kRed));
  const Image si = render(solid, 500, 300, &L);
  for (int x = L.plot_left + 1; x <= L.plot_right; ++x) EXPECT_EQ(si.get(x, row), kRed) << x;
}

TEST(PlotChart, LegendSampleShowsDashesAndMarker) {
  LineChart chart = fixed_chart();
  Series s = series({0, 100}, {1, 1}, kRed, "dashed");
  s.dash = {6, 4};
  s.line_width = 1;
  chart.series.push_back(s);
  Series m = series({0, 100}, {2, 2}, kBlue, "squares");
  m.markers = true;
  m.marker_shape = Marker::kSquare;
  m.marker_size = 2;
  chart.series.push_back(m);
  ChartLayout L;
  const Image img = render(chart, 400, 300, &L);
  ASSERT_EQ(L.scale, 1);
  ASSERT_GE(L.legend_left, 0);
  // Entry 0's sample: 23 pixels (dashed entries widen the sample) on the row of its text.
  const int sx = L.legend_left + 3, sy = L.legend_top + 1 + 2 + 7 / 2;
  for (int k = 0; k <= 22; ++k) EXPECT_EQ(img.get(sx + k, sy) == kRed, k % 10 < 6) << k;
  EXPECT_NE(img.get(sx + 23, sy), kRed);
  // Entry 1: a square marker in the middle of its sample.
  const int my = sy + text_height(1) + 4, mx = sx + 11;
  for (int dy = -2; dy <= 2; ++dy)
    for (int dx = -2; dx <= 2; ++dx) EXPECT_EQ(img.get(mx + dx, my + dy), kBlue) << dx << dy;
  EXPECT_NE(img.get(mx, my - 3), kBlue);
}

TEST(PlotChart, MarkerShapesAtDataPoints) {
  LineChart chart = fixed_chart();
  const Marker shapes[] = {Marker::kDisc, Marker::kSquare, Marker::kTriangle, Marker::kDiamond};
  const Rgb colors[] = {kRed, kBlue, Rgb{0, 160, 0}, Rgb{200, 0, 200}};
  for (int i = 0; i < 4; ++i) {
    Series s = series({20.0 + 20 * i}, {5}, colors[i]);  // one point each: no line
    s.markers = true;
    s.marker_shape = shapes[i];
    s.marker_size = 5;
    chart.series.push_back(s);
  }
  ChartLayout L;
  const Image img = roundtrip(render(chart, 500, 300, &L));
  for (int i = 0; i < 4; ++i) {
    const int cx = int(std::lround(L.x_to_px(20.0 + 20 * i))), cy = int(std::lround(L.y_to_px(5)));
    Image expect(500, 300);
    expect.marker(cx, cy, shapes[i], 5, colors[i]);
    for (int y = cy - 7; y <= cy + 7; ++y)
      for (int x = cx - 7; x <= cx + 7; ++x)
        EXPECT_EQ(img.get(x, y) == colors[i], expect.get(x, y) == colors[i])
            << i << " at " << x - cx << "," << y - cy;
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
  const Image img = roundtrip(render(chart, 600, 400, &L));
  // The reference value is inside the y range although the data stop at 50.
  EXPECT_GT(L.y_hi, 95);
  const int row = int(std::lround(L.y_to_px(95)));
  const int lw = L.line_width;
  ASSERT_EQ(lw, 1);
  // Default: grey, dashed 8 on 5 off, from the column after the y axis to plot_right.
  for (int x = L.plot_left + 1; x <= L.plot_right; ++x)
    EXPECT_EQ(img.get(x, row) == colors::kReference, (x - L.plot_left - 1) % 13 < 8) << x;
  EXPECT_EQ(count_color(img, colors::kReference, L.plot_left, row + 1, L.plot_right, L.plot_bottom),
            0);
  // The label: at the preferred spot (right end, above the line), in the line's colour.
  ASSERT_EQ(L.reference_labels.size(), 1u);
  const PixelRect t = L.reference_labels[0];
  const int s = L.scale, gap = 3 * s;
  EXPECT_EQ(t.right, L.plot_right - 4 * s);
  EXPECT_EQ(t.bottom, row - gap);
  EXPECT_EQ(t.right - t.left + 1, text_width(ref.label, s));
  for (int r = 0; r < 7; ++r)
    for (int c = 0; c < kGlyphW; ++c)
      EXPECT_EQ(img.get(t.left + c * s, t.top + r * s) == colors::kReference,
                glyph_pixel('s', c, r))
          << c << "," << r;
  // Thicker, solid, coloured.
  chart.reference_lines[0].dash.clear();
  chart.reference_lines[0].line_width = 3;
  chart.reference_lines[0].color = kBlue;
  const Image thick = render(chart, 600, 400, &L);
  for (int x = L.plot_left + 1; x <= L.plot_right; x += 7)
    for (int y = row - 1; y <= row + 1; ++y) EXPECT_EQ(thick.get(x, y), kBlue) << x << "," << y;
  EXPECT_EQ(L.reference_labels[0].bottom, row - 1 - gap);
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
  EXPECT_EQ(count_color(img, kRed, t.left, t.top, t.right, t.bottom), 0);
  EXPECT_LT(t.right, int(L.x_to_px(60)));  // not over the series
  EXPECT_GT(count_color(img, colors::kReference, t.left, t.top, t.right, t.bottom), 20);
  // A reference line outside a fixed y range is not drawn, nor its label.
  chart.reference_lines[0].y = 50;
  const Image out = render(chart, 500, 300, &L);
  EXPECT_TRUE(L.reference_labels[0].empty());
  EXPECT_EQ(count_color(out, colors::kReference, 0, 0, 499, 299), 0);
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

TEST(PlotChart, NewFieldsAreValidated) {
  LineChart c;
  c.series.push_back(series({1, 2}, {1, 2}, kRed, "s"));
  auto msg = [](const LineChart& chart) {
    try {
      render(chart, 300, 200);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
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
  // font_scale picks the text size: the title is twice as tall at scale 2 as at scale 1.
  d = c;
  d.title = "T";
  d.font_scale = 1;
  ChartLayout L1, L2;
  render(d, 400, 300, &L1);
  d.font_scale = 2;
  render(d, 400, 300, &L2);
  EXPECT_EQ(L1.scale, 1);
  EXPECT_EQ(L2.scale, 2);
  EXPECT_GT(L2.plot_top, L1.plot_top);
  // legend = false: no legend box.
  d.legend = false;
  render(d, 400, 300, &L1);
  EXPECT_EQ(L1.legend_left, -1);
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
  const Image img = roundtrip(render(f, &L));
  EXPECT_EQ(img.width, 1000);
  EXPECT_EQ(img.height, 500);
  EXPECT_EQ(L.columns, 2);
  EXPECT_EQ(L.rows, 1);
  EXPECT_EQ(L.scale, std::min(1000 / 700, 500 / 250));
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
  EXPECT_EQ(L.footer.right, 1000 - 1 - 6 * L.scale);
  EXPECT_GT(count_color(img, colors::kFooter, L.footer.left, L.footer.top, L.footer.right,
                        L.footer.bottom),
            20);
  EXPECT_GT(
      count_color(img, colors::kInk, L.title.left, L.title.top, L.title.right, L.title.bottom), 20);
  // One legend entry per distinct series: both charts' "attn" and "torch" look the same.
  EXPECT_EQ(L.legend_names, (std::vector<std::string>{"attn", "torch"}));
  ASSERT_EQ(L.legend_samples.size(), 2u);
  const PixelRect sa = L.legend_samples[0], st = L.legend_samples[1];
  EXPECT_EQ(sa.center_y(), st.center_y());  // one row: they fit side by side
  EXPECT_LT(sa.right, st.left);
  EXPECT_GT(count_color(img, kRed, sa.left, sa.top, sa.right, sa.bottom), 10);
  // The dashed entry's sample has gaps: 12 on, 7 off from its left end.
  for (int k = 0; k < st.right - st.left + 1; ++k) {
    if (std::abs(k - (st.right - st.left) / 2) <= 2 * L.scale + 1) continue;  // the marker
    EXPECT_EQ(img.get(st.left + k, st.center_y()) == kBlue, k % 19 < 12) << k;
  }
  // Panels draw no legend of their own; each chart's data sit in its own panel.
  for (std::size_t i = 0; i < 2; ++i) {
    const ChartLayout& C = L.charts[i];
    EXPECT_EQ(C.legend_left, -1);
    EXPECT_TRUE(L.panels[i].contains(C.plot_left, C.plot_top));
    EXPECT_TRUE(L.panels[i].contains(C.plot_right, C.plot_bottom));
    const double slope = i == 0 ? 1 : 2;
    const std::vector<double> xs = {512, 1024, 2048, 4096};
    const std::vector<double> ys = {10 * slope, 20 * slope, 30 * slope, 35 * slope};
    for (std::size_t k = 0; k < xs.size(); ++k)
      EXPECT_EQ(img.get(int(std::lround(C.x_to_px(xs[k]))), int(std::lround(C.y_to_px(ys[k])))),
                kRed)
          << i << " " << k;
    EXPECT_FALSE(C.reference_labels[0].empty());
    EXPECT_TRUE(L.panels[i].contains(C.reference_labels[0].left, C.reference_labels[0].top));
  }
  // No red in the left panel right of its data area, or anywhere below the panels but the legend.
  EXPECT_EQ(count_color(img, kRed, L.charts[0].plot_right + 1, 0, 499, L.panels[0].bottom), 0);
  EXPECT_EQ(count_color(img, kRed, 0, L.panels[0].bottom + 1, 999, 499),
            count_color(img, kRed, sa.left, sa.top, sa.right, sa.bottom));
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
  for (int y = 0; y < 400; ++y)
    for (int x = 0; x < 450; ++x) {
      ASSERT_EQ(fig.get(x, y), ia.get(x, y)) << x << "," << y;
      ASSERT_EQ(fig.get(450 + x, y), ib.get(x, y)) << x << "," << y;
    }
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
  f.charts[2].series[0].color = Rgb{0, 150, 0};
  L = layout_figure(f);
  EXPECT_EQ(L.legend_names, (std::vector<std::string>{"attn", "torch", "attn"}));
  // Legends inside the charts, or none.
  f.legend = LegendPlacement::kInside;
  const Image inside = render(f, &L);
  EXPECT_TRUE(L.legend.empty());
  for (const ChartLayout& C : L.charts) {
    EXPECT_GE(C.legend_left, C.plot_left);
    EXPECT_EQ(inside.get(C.legend_left, C.legend_top), colors::kFrame);
  }
  f.legend = LegendPlacement::kNone;
  L = layout_figure(f);
  for (const ChartLayout& C : L.charts) EXPECT_EQ(C.legend_left, -1);
  // Many entries wrap onto several legend rows.
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
  for (const PixelRect& r : L.legend_samples) EXPECT_LE(r.right, 399);
  // Errors.
  auto msg = [](const Figure& fig) {
    try {
      render(fig);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
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

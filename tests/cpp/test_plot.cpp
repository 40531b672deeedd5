// Tests for attn::plot: images, font, PNG encode/decode (against PNG files built byte by byte
// here), ticks, and line charts checked pixel by pixel through the layout's data -> pixel mapping.
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
#include <vector>

namespace attn::plot {
namespace {

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
    if (i > 0) EXPECT_EQ(L.x_ticks[i] - L.x_ticks[i - 1], step);
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
  d.series.push_back({"a", {0, 1}, {0, 1}});
  d.series.push_back({"b", {0, 1}, {1, 0}});
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

}  // namespace
}  // namespace attn::plot

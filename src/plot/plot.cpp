// attn::plot: images, the bitmap font, PNG through libpng, line charts, figures (and their JSON
// form) and heatmaps.
#include <attn/plot.h>
#include <fcntl.h>
#include <png.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <utility>

#include "../io/file_internal.h"
#include "../tensor/internal.h"

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

// ---- font --------------------------------------------------------------------------------------
namespace {

// One glyph per printable ASCII character: up to kGlyphH rows of kGlyphW cells, '#' = ink,
// rows separated by spaces; missing rows at the bottom are blank.
struct GlyphDef {
  char ch;
  const char* rows;
};
constexpr GlyphDef kGlyphDefs[] = {
    {' ', ""},
    {'!', "..#.. ..#.. ..#.. ..#.. ..#.. ..... ..#.."},
    {'"', ".#.#. .#.#. .#.#."},
    {'#', ".#.#. .#.#. ##### .#.#. ##### .#.#. .#.#."},
    {'$', "..#.. .#### #.#.. .###. ..#.# ####. ..#.."},
    {'%', "##..# ##.#. ...#. ..#.. .#... .#.## #..##"},
    {'&', ".##.. #..#. #.#.. .#... #.#.# #..#. .##.#"},
    {'\'', "..#.. ..#.. .#..."},
    {'(', "...#. ..#.. .#... .#... .#... ..#.. ...#."},
    {')', ".#... ..#.. ...#. ...#. ...#. ..#.. .#..."},
    {'*', "..... ..#.. #.#.# .###. #.#.# ..#.. ....."},
    {'+', "..... ..#.. ..#.. ##### ..#.. ..#.. ....."},
    {',', "..... ..... ..... ..... ..... .##.. ..#.. .#..."},
    {'-', "..... ..... ..... ##### ..... ..... ....."},
    {'.', "..... ..... ..... ..... ..... .##.. .##.."},
    {'/', "....# ....# ...#. ..#.. .#... #.... #...."},
    {'0', ".###. #...# #..## #.#.# ##..# #...# .###."},
    {'1', "..#.. .##.. ..#.. ..#.. ..#.. ..#.. .###."},
    {'2', ".###. #...# ....# ..##. .#... #.... #####"},
    {'3', ".###. #...# ....# ..##. ....# #...# .###."},
    {'4', "...#. ..##. .#.#. #..#. ##### ...#. ...#."},
    {'5', "##### #.... ####. ....# ....# #...# .###."},
    {'6', "..##. .#... #.... ####. #...# #...# .###."},
    {'7', "##### ....# ...#. ..#.. .#... .#... .#..."},
    {'8', ".###. #...# #...# .###. #...# #...# .###."},
    {'9', ".###. #...# #...# .#### ....# ...#. .##.."},
    {':', "..... .##.. .##.. ..... .##.. .##.. ....."},
    {';', "..... .##.. .##.. ..... .##.. .##.. ..#.. .#..."},
    {'<', "...#. ..#.. .#... #.... .#... ..#.. ...#."},
    {'=', "..... ..... ##### ..... ##### ..... ....."},
    {'>', ".#... ..#.. ...#. ....# ...#. ..#.. .#..."},
    {'?', ".###. #...# ....# ...#. ..#.. ..... ..#.."},
    {'@', ".###. #...# #.### #.#.# #.##. #.... .####"},
    {'A', "..#.. .#.#. #...# #...# ##### #...# #...#"},
    {'B', "####. #...# #...# ####. #...# #...# ####."},
    {'C', ".###. #...# #.... #.... #.... #...# .###."},
    {'D', "###.. #..#. #...# #...# #...# #..#. ###.."},
    {'E', "##### #.... #.... ####. #.... #.... #####"},
    {'F', "##### #.... #.... ####. #.... #.... #...."},
    {'G', ".###. #...# #.... #.### #...# #...# .####"},
    {'H', "#...# #...# #...# ##### #...# #...# #...#"},
    {'I', ".###. ..#.. ..#.. ..#.. ..#.. ..#.. .###."},
    {'J', "..### ...#. ...#. ...#. ...#. #..#. .##.."},
    {'K', "#...# #..#. #.#.. ##... #.#.. #..#. #...#"},
    {'L', "#.... #.... #.... #.... #.... #.... #####"},
    {'M', "#...# ##.## #.#.# #.#.# #...# #...# #...#"},
    {'N', "#...# ##..# ##..# #.#.# #..## #..## #...#"},
    {'O', ".###. #...# #...# #...# #...# #...# .###."},
    {'P', "####. #...# #...# ####. #.... #.... #...."},
    {'Q', ".###. #...# #...# #...# #.#.# #..#. .##.#"},
    {'R', "####. #...# #...# ####. #.#.. #..#. #...#"},
    {'S', ".###. #...# #.... .###. ....# #...# .###."},
    {'T', "##### ..#.. ..#.. ..#.. ..#.. ..#.. ..#.."},
    {'U', "#...# #...# #...# #...# #...# #...# .###."},
    {'V', "#...# #...# #...# #...# .#.#. .#.#. ..#.."},
    {'W', "#...# #...# #...# #.#.# #.#.# ##.## #...#"},
    {'X', "#...# #...# .#.#. ..#.. .#.#. #...# #...#"},
    {'Y', "#...# #...# .#.#. ..#.. ..#.. ..#.. ..#.."},
    {'Z', "##### ....# ...#. ..#.. .#... #.... #####"},
    {'[', ".###. .#... .#... .#... .#... .#... .###."},
    {'\\', "#.... #.... .#... ..#.. ...#. ....# ....#"},
    {']', ".###. ...#. ...#. ...#. ...#. ...#. .###."},
    {'^', "..#.. .#.#. #...#"},
    {'_', "..... ..... ..... ..... ..... ..... ..... #####"},
    {'`', ".#... ..#.."},
    {'a', "..... ..... .###. ....# .#### #...# .####"},
    {'b', "#.... #.... ####. #...# #...# #...# ####."},
    {'c', "..... ..... .###. #.... #.... #.... .###."},
    {'d', "....# ....# .#### #...# #...# #...# .####"},
    {'e', "..... ..... .###. #...# ##### #.... .###."},
    {'f', "..##. .#..# .#... ###.. .#... .#... .#..."},
    {'g', "..... ..... .#### #...# #...# .#### ....# ....# .###."},
    {'h', "#.... #.... #.##. ##..# #...# #...# #...#"},
    {'i', "..#.. ..... .##.. ..#.. ..#.. ..#.. .###."},
    {'j', "...#. ..... ..##. ...#. ...#. ...#. ...#. #..#. .##.."},
    {'k', "#.... #.... #..#. #.#.. ##... #.#.. #..#."},
    {'l', ".##.. ..#.. ..#.. ..#.. ..#.. ..#.. .###."},
    {'m', "..... ..... ##.#. #.#.# #.#.# #.#.# #.#.#"},
    {'n', "..... ..... #.##. ##..# #...# #...# #...#"},
    {'o', "..... ..... .###. #...# #...# #...# .###."},
    {'p', "..... ..... ####. #...# #...# #...# ####. #.... #...."},
    {'q', "..... ..... .#### #...# #...# #...# .#### ....# ....#"},
    {'r', "..... ..... #.##. ##..# #.... #.... #...."},
    {'s', "..... ..... .#### #.... .###. ....# ####."},
    {'t', ".#... .#... ###.. .#... .#... .#..# ..##."},
    {'u', "..... ..... #...# #...# #...# #..## .##.#"},
    {'v', "..... ..... #...# #...# #...# .#.#. ..#.."},
    {'w', "..... ..... #...# #...# #.#.# #.#.# .#.#."},
    {'x', "..... ..... #...# .#.#. ..#.. .#.#. #...#"},
    {'y', "..... ..... #...# #...# #...# .#### ....# ....# .###."},
    {'z', "..... ..... ##### ...#. ..#.. .#... #####"},
    {'{', "...## ..#.. ..#.. .#... ..#.. ..#.. ...##"},
    {'|', "..#.. ..#.. ..#.. ..#.. ..#.. ..#.. ..#.. ..#.."},
    {'}', "##... ..#.. ..#.. ...#. ..#.. ..#.. ##..."},
    {'~', "..... ..... .#... #.#.# ...#."},
};

// Bit c of rows[r] is cell (c, r).
using GlyphBits = std::array<uint8_t, kGlyphH>;

const std::array<GlyphBits, 95>& font_table() {
  static const std::array<GlyphBits, 95> table = [] {
    std::array<GlyphBits, 95> t{};
    for (const GlyphDef& def : kGlyphDefs) {
      GlyphBits bits{};
      int row = 0, col = 0;
      for (const char* p = def.rows; *p; ++p) {
        if (*p == ' ') {
          ++row;
          col = 0;
          continue;
        }
        if (*p == '#' && row < kGlyphH && col < kGlyphW) bits[row] |= uint8_t(1u << col);
        ++col;
      }
      t[std::size_t(def.ch - 32)] = bits;
    }
    return t;
  }();
  return table;
}

const GlyphBits& glyph(char ch) {
  const unsigned char u = static_cast<unsigned char>(ch);
  if (u < 32 || u > 126) return font_table()['?' - 32];
  return font_table()[u - 32];
}

void check_scale(int scale, const char* fn) {
  if (scale < 1 || scale > 64) fail(fn, "scale must be in 1..64, got ", scale);
}

}  // namespace

bool glyph_pixel(char ch, int col, int row) {
  if (col < 0 || col >= kGlyphW || row < 0 || row >= kGlyphH) return false;
  return (glyph(ch)[std::size_t(row)] >> col) & 1u;
}

int text_width(std::string_view s, int scale) {
  check_scale(scale, "plot::text_width");
  if (s.empty()) return 0;
  const int64_t w = int64_t(s.size()) * kGlyphAdvance * scale - scale;
  return int(std::min<int64_t>(w, std::numeric_limits<int>::max()));
}

// ---- images ------------------------------------------------------------------------------------

Image::Image(int w, int h, Rgb background) : width(w), height(h) {
  if (w < 1 || h < 1 || w > 16384 || h > 16384)
    fail("plot::Image", "size must be 1..16384 on each side, got ", w, "x", h);
  rgb.resize(std::size_t(w) * std::size_t(h) * 3);
  fill(background);
}

void Image::set(int x, int y, Rgb c) {
  if (!contains(x, y)) return;
  const std::size_t i = (std::size_t(y) * std::size_t(width) + std::size_t(x)) * 3;
  if (i + 2 >= rgb.size()) return;  // an Image whose buffer was resized by hand
  rgb[i] = c.r;
  rgb[i + 1] = c.g;
  rgb[i + 2] = c.b;
}

Rgb Image::get(int x, int y) const {
  const std::size_t i = (std::size_t(y) * std::size_t(width) + std::size_t(x)) * 3;
  if (!contains(x, y) || i + 2 >= rgb.size())
    throw IndexError(detail::msg("plot::Image::get", "pixel (", x, ", ", y, ") is outside the ",
                                 width, "x", height, " image"));
  return {rgb[i], rgb[i + 1], rgb[i + 2]};
}

void Image::fill(Rgb c) {
  for (std::size_t i = 0; i + 2 < rgb.size(); i += 3) {
    rgb[i] = c.r;
    rgb[i + 1] = c.g;
    rgb[i + 2] = c.b;
  }
}

void Image::fill_rect(int x0, int y0, int x1, int y1, Rgb c) {
  if (x0 > x1) std::swap(x0, x1);
  if (y0 > y1) std::swap(y0, y1);
  x0 = std::max(x0, 0);
  y0 = std::max(y0, 0);
  x1 = std::min(x1, width - 1);
  y1 = std::min(y1, height - 1);
  if (x0 > x1 || y0 > y1 || rgb.size() < std::size_t(width) * std::size_t(height) * 3) return;
  for (int y = y0; y <= y1; ++y) {
    uint8_t* p = rgb.data() + (std::size_t(y) * std::size_t(width) + std::size_t(x0)) * 3;
    for (int x = x0; x <= x1; ++x, p += 3) {
      p[0] = c.r;
      p[1] = c.g;
      p[2] = c.b;
    }
  }
}

void Image::stroke_rect(int x0, int y0, int x1, int y1, Rgb c) {
  fill_rect(x0, y0, x1, y0, c);
  fill_rect(x0, y1, x1, y1, c);
  fill_rect(x0, y0, x0, y1, c);
  fill_rect(x1, y0, x1, y1, c);
}

namespace {

// Liang-Barsky: clips the segment to [xmin, xmax] x [ymin, ymax]; false when nothing is left.
bool clip_segment(double& x0, double& y0, double& x1, double& y1, double xmin, double ymin,
                  double xmax, double ymax) {
  if (!std::isfinite(x0) || !std::isfinite(y0) || !std::isfinite(x1) || !std::isfinite(y1))
    return false;
  const double dx = x1 - x0, dy = y1 - y0;
  if (!std::isfinite(dx) || !std::isfinite(dy)) return false;
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
  const double ax = x0 + t0 * dx, ay = y0 + t0 * dy;
  const double bx = x0 + t1 * dx, by = y0 + t1 * dy;
  x0 = std::clamp(ax, xmin, xmax);
  y0 = std::clamp(ay, ymin, ymax);
  x1 = std::clamp(bx, xmin, xmax);
  y1 = std::clamp(by, ymin, ymax);
  return true;
}

}  // namespace

void Image::line(double x0, double y0, double x1, double y1, Rgb c, int thickness) {
  if (thickness < 1 || thickness > 8)
    fail("plot::Image::line", "thickness must be 1..8, got ", thickness);
  const double m = thickness;
  if (!clip_segment(x0, y0, x1, y1, -m, -m, width - 1 + m, height - 1 + m)) return;
  const int off = (thickness - 1) / 2;
  const double span = std::max(std::fabs(x1 - x0), std::fabs(y1 - y0));
  const int64_t n = int64_t(std::ceil(span));
  for (int64_t i = 0; i <= n; ++i) {
    const double t = n == 0 ? 0.0 : double(i) / double(n);
    const int x = int(std::lround(x0 + (x1 - x0) * t)) - off;
    const int y = int(std::lround(y0 + (y1 - y0) * t)) - off;
    if (thickness == 1)
      set(x, y, c);
    else
      fill_rect(x, y, x + thickness - 1, y + thickness - 1, c);
  }
}

void Image::disc(int cx, int cy, int r, Rgb c) {
  if (r < 0) return;
  r = std::min(r, 1 << 15);
  for (int dy = -r; dy <= r; ++dy) {
    const int half = int(std::floor(std::sqrt(double(r) * r - double(dy) * dy) + 0.5));
    const int64_t y = int64_t(cy) + dy;
    if (y < 0 || y >= height) continue;
    fill_rect(int(std::clamp<int64_t>(int64_t(cx) - half, -1, width)), int(y),
              int(std::clamp<int64_t>(int64_t(cx) + half, -1, width)), int(y), c);
  }
}

namespace {

// Calls ink(u, v) for the top-left of every inked scale x scale block of `s`, u along the text and
// v across it (both >= 0, in pixels from the text origin).
template <typename F>
void for_each_ink(std::string_view s, int scale, F&& ink) {
  for (std::size_t n = 0; n < s.size(); ++n) {
    const GlyphBits& g = glyph(s[n]);
    const int64_t base = int64_t(n) * kGlyphAdvance * scale;
    for (int row = 0; row < kGlyphH; ++row)
      for (int col = 0; col < kGlyphW; ++col)
        if ((g[std::size_t(row)] >> col) & 1u)
          ink(base + int64_t(col) * scale, int64_t(row) * scale);
  }
}

int clamp_coord(int64_t v) { return int(std::clamp<int64_t>(v, -(1 << 20), 1 << 30)); }

}  // namespace

void Image::text(int x, int y, std::string_view s, Rgb c, int scale) {
  check_scale(scale, "plot::Image::text");
  for_each_ink(s, scale, [&](int64_t u, int64_t v) {
    const int64_t px = int64_t(x) + u, py = int64_t(y) + v;
    if (px >= width || py >= height || px + scale <= 0 || py + scale <= 0) return;
    fill_rect(clamp_coord(px), clamp_coord(py), clamp_coord(px + scale - 1),
              clamp_coord(py + scale - 1), c);
  });
}

void Image::text_up(int x, int y, std::string_view s, Rgb c, int scale) {
  check_scale(scale, "plot::Image::text_up");
  // Glyph cell (u, v) lands at (x + v, y - u): the glyph tops face left.
  for_each_ink(s, scale, [&](int64_t u, int64_t v) {
    const int64_t px = int64_t(x) + v, py_hi = int64_t(y) - u;
    const int64_t py_lo = py_hi - scale + 1;
    if (px >= width || py_lo >= height || px + scale <= 0 || py_hi < 0) return;
    fill_rect(clamp_coord(px), clamp_coord(py_lo), clamp_coord(px + scale - 1), clamp_coord(py_hi),
              c);
  });
}

namespace {

// Checks a dash pattern (see Image::dashed_line); `what` names it in the message.
void check_dash(const std::vector<int>& dash, const char* fn, const std::string& what) {
  if (dash.empty()) return;
  if (dash.size() % 2 != 0 || dash.size() > 16)
    fail(fn, what, " must have an even number of lengths (2..16), got ", dash.size());
  for (std::size_t i = 0; i < dash.size(); ++i)
    if (dash[i] < 1 || dash[i] > 4096)
      fail(fn, what, ": length ", i, " is ", dash[i], ", expected 1..4096 pixels");
}

// Whether arc length `a` falls in an "on" part of the (checked, non-empty) pattern.
bool dash_on(const std::vector<int>& dash, double a) {
  double period = 0;
  for (int d : dash) period += d;
  double m = std::fmod(a, period);
  if (!(m >= 0)) m = m < 0 ? m + period : 0;  // negative, or NaN
  for (std::size_t i = 0; i < dash.size(); ++i) {
    if (m < dash[i]) return i % 2 == 0;
    m -= dash[i];
  }
  return false;
}

}  // namespace

double Image::dashed_line(double x0, double y0, double x1, double y1, Rgb c, int thickness,
                          const std::vector<int>& dash, double phase) {
  const char* fn = "plot::Image::dashed_line";
  if (thickness < 1 || thickness > 8) fail(fn, "thickness must be 1..8, got ", thickness);
  check_dash(dash, fn, "the dash pattern");
  const double len = std::hypot(x1 - x0, y1 - y0);
  if (!std::isfinite(len)) return phase;
  if (dash.empty()) {
    line(x0, y0, x1, y1, c, thickness);
    return phase + len;
  }
  // Clip as line() does, keeping the arc length of the clipped start.
  const double m = thickness;
  double ax = x0, ay = y0, bx = x1, by = y1;
  if (!clip_segment(ax, ay, bx, by, -m, -m, width - 1 + m, height - 1 + m)) return phase + len;
  const double start = phase + std::hypot(ax - x0, ay - y0), clipped = std::hypot(bx - ax, by - ay);
  // Unit direction: a pixel's arc length is that of its centre projected onto the line.
  const double ux = clipped > 0 ? (bx - ax) / clipped : 0,
               uy = clipped > 0 ? (by - ay) / clipped : 0;
  const int off = (thickness - 1) / 2;
  const double span = std::max(std::fabs(bx - ax), std::fabs(by - ay));
  const int64_t n = int64_t(std::ceil(span));
  for (int64_t i = 0; i <= n; ++i) {
    const double t = n == 0 ? 0.0 : double(i) / double(n);
    const double px = double(std::lround(ax + (bx - ax) * t));
    const double py = double(std::lround(ay + (by - ay) * t));
    const double along = std::clamp((px - ax) * ux + (py - ay) * uy, 0.0, clipped);
    if (!dash_on(dash, start + along)) continue;
    const int x = int(px) - off, y = int(py) - off;
    if (thickness == 1)
      set(x, y, c);
    else
      fill_rect(x, y, x + thickness - 1, y + thickness - 1, c);
  }
  return phase + len;
}

void Image::marker(int cx, int cy, Marker shape, int r, Rgb c) {
  const char* fn = "plot::Image::marker";
  if (r < 0 || r > 1024) fail(fn, "radius must be 0..1024, got ", r);
  const int64_t x = cx, y = cy;
  auto row = [&](int64_t k, int64_t half) {
    fill_rect(clamp_coord(x - half), clamp_coord(y + k), clamp_coord(x + half), clamp_coord(y + k),
              c);
  };
  switch (shape) {
    case Marker::kDisc: disc(cx, cy, r, c); return;
    case Marker::kSquare:
      for (int64_t k = -r; k <= r; ++k) row(k, r);
      return;
    case Marker::kTriangle:
      for (int64_t k = -r; k <= r; ++k) row(k, (k + r) / 2);
      return;
    case Marker::kDiamond:
      for (int64_t k = -r; k <= r; ++k) row(k, r - (k < 0 ? -k : k));
      return;
  }
  fail(fn, "unknown marker shape ", int(shape));
}

// ---- PNG ---------------------------------------------------------------------------------------
//
// libpng reports errors by longjmp. The functions that call setjmp (png_write_plain,
// png_read_plain) hold only trivially destructible locals, and every libpng callback catches C++
// exceptions and leaves its catch block before it calls png_error, so no longjmp ever crosses a
// frame with a live C++ object. C++ containers live in the callers, which libpng never jumps over.
namespace {

struct PngErrorSink {
  char message[256] = {0};
};

void png_on_error(png_structp png, png_const_charp msg) {
  auto* sink = static_cast<PngErrorSink*>(png_get_error_ptr(png));
  if (sink) std::snprintf(sink->message, sizeof sink->message, "%s", msg ? msg : "unknown error");
  png_longjmp(png, 1);
}

void png_on_warning(png_structp, png_const_charp) {}

struct WriteCtx {
  PngErrorSink err;
  std::string* out = nullptr;
  int width = 0, height = 0;
  png_bytep* rows = nullptr;  // height row pointers
};

void png_write_cb(png_structp png, png_bytep data, size_t length) {
  auto* ctx = static_cast<WriteCtx*>(png_get_io_ptr(png));
  bool ok = true;
  try {
    ctx->out->append(reinterpret_cast<const char*>(data), length);
  } catch (...) {
    ok = false;
  }
  if (!ok) png_error(png, "out of memory while writing");
}

void png_flush_cb(png_structp) {}

// Plain: see above. Returns false with ctx->err.message set on failure.
bool png_write_plain(WriteCtx* ctx) {
  png_structp png =
      png_create_write_struct(PNG_LIBPNG_VER_STRING, &ctx->err, png_on_error, png_on_warning);
  if (!png) {
    std::snprintf(ctx->err.message, sizeof ctx->err.message, "png_create_write_struct failed");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_write_struct(&png, nullptr);
    std::snprintf(ctx->err.message, sizeof ctx->err.message, "png_create_info_struct failed");
    return false;
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_write_struct(&png, &info);
    return false;
  }
  png_set_write_fn(png, ctx, png_write_cb, png_flush_cb);
  png_set_IHDR(png, info, png_uint_32(ctx->width), png_uint_32(ctx->height), 8, PNG_COLOR_TYPE_RGB,
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_set_compression_level(png, 6);
  png_write_info(png, info);
  png_write_image(png, ctx->rows);
  png_write_end(png, info);
  png_destroy_write_struct(&png, &info);
  return true;
}

struct ReadCtx {
  PngErrorSink err;
  const uint8_t* data = nullptr;
  size_t size = 0, pos = 0;
  // Called once the output size is known; returns height row pointers into an RGB8 buffer, or
  // null when it could not allocate.
  png_bytep* (*allocate)(ReadCtx*, int width, int height) = nullptr;
  void* owner = nullptr;
  int width = 0, height = 0;
};

void png_read_cb(png_structp png, png_bytep out, size_t length) {
  auto* ctx = static_cast<ReadCtx*>(png_get_io_ptr(png));
  if (length > ctx->size - ctx->pos) png_error(png, "unexpected end of data");
  std::memcpy(out, ctx->data + ctx->pos, length);
  ctx->pos += length;
}

bool png_read_plain(ReadCtx* ctx) {
  png_structp png =
      png_create_read_struct(PNG_LIBPNG_VER_STRING, &ctx->err, png_on_error, png_on_warning);
  if (!png) {
    std::snprintf(ctx->err.message, sizeof ctx->err.message, "png_create_read_struct failed");
    return false;
  }
  png_infop info = png_create_info_struct(png);
  if (!info) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    std::snprintf(ctx->err.message, sizeof ctx->err.message, "png_create_info_struct failed");
    return false;
  }
  if (setjmp(png_jmpbuf(png))) {
    png_destroy_read_struct(&png, &info, nullptr);
    return false;
  }
  png_set_read_fn(png, ctx, png_read_cb);
  png_set_user_limits(png, 16384, 16384);
  png_read_info(png, info);
  const png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  const int color = png_get_color_type(png, info);
  const int depth = png_get_bit_depth(png, info);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (depth == 16) png_set_strip_16(png);
  if (color == PNG_COLOR_TYPE_GRAY || color == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
  png_set_strip_alpha(png);  // also drops tRNS (it is only expanded to alpha on request)
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_rowbytes(png, info) != png_size_t(w) * 3 || png_get_channels(png, info) != 3 ||
      png_get_bit_depth(png, info) != 8)
    png_error(png, "could not convert the image to RGB8");
  png_bytep* rows = ctx->allocate(ctx, int(w), int(h));
  if (!rows) png_error(png, "out of memory");
  png_read_image(png, rows);
  png_read_end(png, nullptr);
  png_destroy_read_struct(&png, &info, nullptr);
  return true;
}

struct DecodeBuffers {
  Image image;
  std::vector<png_bytep> rows;
};

png_bytep* decode_allocate(ReadCtx* ctx, int width, int height) {
  auto* buf = static_cast<DecodeBuffers*>(ctx->owner);
  try {
    buf->image = Image(width, height, colors::kBlack);
    buf->rows.resize(std::size_t(height));
    for (int y = 0; y < height; ++y)
      buf->rows[std::size_t(y)] = buf->image.rgb.data() + std::size_t(y) * std::size_t(width) * 3;
  } catch (...) {
    return nullptr;
  }
  ctx->width = width;
  ctx->height = height;
  return buf->rows.data();
}

}  // namespace

std::string encode_png(const Image& image) {
  if (image.width < 1 || image.height < 1 || image.width > 16384 || image.height > 16384)
    fail("plot::encode_png", "image size must be 1..16384 on each side, got ", image.width, "x",
         image.height);
  const std::size_t need = std::size_t(image.width) * std::size_t(image.height) * 3;
  if (image.rgb.size() != need)
    fail("plot::encode_png", "a ", image.width, "x", image.height, " image needs ", need,
         " bytes of RGB, got ", image.rgb.size());
  std::string out;
  std::vector<png_bytep> rows(std::size_t(image.height));
  // libpng takes non-const row pointers but only reads them when writing.
  auto* base = const_cast<uint8_t*>(image.rgb.data());
  for (int y = 0; y < image.height; ++y)
    rows[std::size_t(y)] = base + std::size_t(y) * std::size_t(image.width) * 3;
  WriteCtx ctx;
  ctx.out = &out;
  ctx.width = image.width;
  ctx.height = image.height;
  ctx.rows = rows.data();
  if (!png_write_plain(&ctx)) fail("plot::encode_png", "libpng: ", ctx.err.message);
  return out;
}

Image decode_png(std::string_view bytes) {
  if (bytes.size() < 8 || png_sig_cmp(reinterpret_cast<png_const_bytep>(bytes.data()), 0, 8) != 0)
    fail("plot::decode_png", "not a PNG (", bytes.size(), " bytes, bad signature)");
  DecodeBuffers buf;
  ReadCtx ctx;
  ctx.data = reinterpret_cast<const uint8_t*>(bytes.data());
  ctx.size = bytes.size();
  ctx.allocate = decode_allocate;
  ctx.owner = &buf;
  if (!png_read_plain(&ctx)) fail("plot::decode_png", "libpng: ", ctx.err.message);
  return std::move(buf.image);
}

void write_png(const std::string& path, const Image& image) {
  io::detail::write_file_atomic("plot::write_png", path, encode_png(image));
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

// ---- charts ------------------------------------------------------------------------------------

double ChartLayout::x_to_px(double x) const {
  const double a = log_x ? std::log10(x) : x;
  const double lo = log_x ? std::log10(x_lo) : x_lo, hi = log_x ? std::log10(x_hi) : x_hi;
  return plot_left + (a - lo) / (hi - lo) * double(plot_right - plot_left);
}

double ChartLayout::y_to_px(double y) const {
  const double a = log_y ? std::log10(y) : y;
  const double lo = log_y ? std::log10(y_lo) : y_lo, hi = log_y ? std::log10(y_hi) : y_hi;
  return plot_bottom - (a - lo) / (hi - lo) * double(plot_bottom - plot_top);
}

namespace {

constexpr const char* kRenderFn = "plot::render";

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

int default_line_width(int s) { return s >= 2 ? 2 : 1; }
int default_marker_size(int s) { return 2 * s; }

// How a series looks in a legend, with the defaults resolved.
struct LegendEntry {
  std::string name;
  Rgb color;
  bool markers = false;
  Marker shape = Marker::kDisc;
  int marker_size = 0, line_width = 1;
  std::vector<int> dash;
  bool operator==(const LegendEntry&) const = default;
};

std::vector<LegendEntry> legend_entries(const LineChart& chart, int s) {
  std::vector<LegendEntry> out;
  for (std::size_t i = 0; i < chart.series.size(); ++i) {
    const Series& ser = chart.series[i];
    if (ser.name.empty()) continue;
    LegendEntry e;
    e.name = ser.name;
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

// Legend geometry at font scale s.
int legend_row_h(int s) { return text_height(s) + 4 * s; }
int legend_sample_w(int s, const std::vector<LegendEntry>& entries) {
  for (const LegendEntry& e : entries)
    if (!e.dash.empty()) return 22 * s;  // room for a couple of dashes
  return 14 * s;
}

// A legend entry's line sample from x to x + w on row y, with its marker in the middle (not
// taller than the legend row).
void draw_sample(Image& img, const LegendEntry& e, int x, int y, int w, int s) {
  img.dashed_line(x, y, x + w, y, e.color, e.line_width, e.dash);
  if (e.markers)
    img.marker(x + w / 2, y, e.shape, std::min(e.marker_size, legend_row_h(s) / 2 - s), e.color);
}

int auto_scale(int width, int height) {
  return std::clamp(std::min(width / 400, height / 250), 1, 4);
}

// The layout of `chart` in `box` (its top-left corner and size) at font scale s.
ChartLayout chart_layout_in(const LineChart& chart, PixelRect box, int s, bool legend) {
  ChartLayout L;
  L.box = box;
  L.width = box.right - box.left + 1;
  L.height = box.bottom - box.top + 1;
  L.log_x = chart.log_x;
  L.log_y = chart.log_y;
  L.scale = s;
  L.line_width = default_line_width(s);
  L.reference_labels.assign(chart.reference_lines.size(), PixelRect{});
  const int th = text_height(s), m = 6 * s, tick = 3 * s;

  Range rx, ry;
  for (const Series& ser : chart.series)
    for (std::size_t i = 0; i < ser.x.size(); ++i)
      if (finite_point(ser, i)) rx.add(ser.x[i]), ry.add(ser.y[i]);
  for (const ReferenceLine& ref : chart.reference_lines) ry.add(ref.y);

  // Vertical layout first: it fixes the y ticks, whose labels fix the left margin.
  L.plot_top = box.top + m + (chart.title.empty() ? th / 2 : th + m);
  L.plot_bottom = box.bottom - m - (tick + s + th) - (chart.x_label.empty() ? 0 : th + m);
  L.plot_bottom = std::max(L.plot_bottom, L.plot_top + 8);
  const int plot_h = L.plot_bottom - L.plot_top;
  const int y_intervals = std::clamp(plot_h / (22 * s + 8), 1, 10);
  AxisSpec ay = make_axis(ry, chart.log_y, chart.y_min, chart.y_max, y_intervals);
  L.y_lo = ay.lo;
  L.y_hi = ay.hi;
  L.y_ticks = ay.ticks;
  L.y_tick_labels = labels_for(L.y_ticks);
  int label_w = 0;
  for (const auto& lab : L.y_tick_labels) label_w = std::max(label_w, text_width(lab, s));
  L.plot_left = box.left + m + (chart.y_label.empty() ? 0 : th + m) + label_w + tick + 2 * s;
  L.plot_right = box.right - m - 3 * kGlyphAdvance * s;
  L.plot_right = std::max(L.plot_right, L.plot_left + 8);
  const int plot_w = L.plot_right - L.plot_left;

  // x ticks: as many as fit without their labels touching.
  int x_intervals = std::clamp(plot_w / (45 * s + 10), 1, 10);
  while (true) {
    AxisSpec ax = make_axis(rx, chart.log_x, chart.x_min, chart.x_max, x_intervals);
    L.x_lo = ax.lo;
    L.x_hi = ax.hi;
    L.x_ticks = ax.ticks;
    L.x_tick_labels = labels_for(L.x_ticks);
    int widest = 0;
    for (const auto& lab : L.x_tick_labels) widest = std::max(widest, text_width(lab, s));
    double min_gap = std::numeric_limits<double>::infinity();
    for (std::size_t i = 1; i < L.x_ticks.size(); ++i)
      min_gap = std::min(min_gap, L.x_to_px(L.x_ticks[i]) - L.x_to_px(L.x_ticks[i - 1]));
    if (x_intervals <= 1 || min_gap >= widest + 2 * kGlyphAdvance * s) break;
    --x_intervals;
  }

  const auto entries = legend ? legend_entries(chart, s) : std::vector<LegendEntry>{};
  if (!entries.empty()) {
    int name_w = 0;
    for (const auto& e : entries) name_w = std::max(name_w, text_width(e.name, s));
    const int w = 3 * s + legend_sample_w(s, entries) + 3 * s + name_w + 4 * s;
    const int h = int(entries.size()) * legend_row_h(s) + 2 * s;
    L.legend_right = L.plot_right - 4 * s;
    L.legend_left = L.legend_right - w;
    L.legend_top = L.plot_top + 4 * s;
    L.legend_bottom = L.legend_top + h;
  }
  return L;
}

// Pixels in r (clipped to the image) that are neither background nor grid.
long covered_pixels(const Image& img, int x0, int y0, int x1, int y1) {
  long covered = 0;
  for (int y = std::max(y0, 0); y <= std::min(y1, img.height - 1); ++y)
    for (int x = std::max(x0, 0); x <= std::min(x1, img.width - 1); ++x) {
      const Rgb p = img.get(x, y);
      if (p != colors::kWhite && p != colors::kGrid) ++covered;
    }
  return covered;
}

// Draws the chart laid out by chart_layout_in(); stores the legend and label positions in L.
void draw_chart(Image& img, const LineChart& chart, ChartLayout& L, bool legend) {
  const PixelRect& box = L.box;
  const int s = L.scale, th = text_height(s), m = 6 * s, tick = 3 * s;
  const int lw = L.line_width;

  // Grid.
  for (double t : L.y_ticks) {
    const int y = int(std::lround(L.y_to_px(t)));
    if (y > L.plot_top && y < L.plot_bottom)
      img.fill_rect(L.plot_left + 1, y, L.plot_right, y, colors::kGrid);
  }
  for (double t : L.x_ticks) {
    const int x = int(std::lround(L.x_to_px(t)));
    if (x > L.plot_left && x <= L.plot_right)
      img.fill_rect(x, L.plot_top, x, L.plot_bottom - 1, colors::kGrid);
  }

  // Lines clipped to the data area; `phase` carries a dash pattern across a polyline's vertices.
  const double cx0 = L.plot_left, cy0 = L.plot_top, cx1 = L.plot_right, cy1 = L.plot_bottom;
  auto segment = [&](double ax, double ay, double bx, double by, Rgb c, int width,
                     const std::vector<int>& dash, double& phase) {
    const double len = std::hypot(bx - ax, by - ay);
    double px = ax, py = ay, qx = bx, qy = by;
    if (clip_segment(px, py, qx, qy, cx0, cy0, cx1, cy1))
      img.dashed_line(px, py, qx, qy, c, width, dash, phase + std::hypot(px - ax, py - ay));
    phase += len;
    if (!std::isfinite(phase) || phase > 1e15) phase = 0;
  };

  // Reference lines, under the series.
  std::vector<int> ref_rows;
  for (const ReferenceLine& ref : chart.reference_lines) {
    const double y = L.y_to_px(ref.y);
    double phase = 0;
    segment(L.plot_left + 1, y, L.plot_right, y, ref.color, ref.line_width ? ref.line_width : lw,
            ref.dash, phase);
    ref_rows.push_back(int(std::lround(y)));
  }

  // Series.
  auto inside = [&](double px, double py) {
    return px >= cx0 - 0.5 && px <= cx1 + 0.5 && py >= cy0 - 0.5 && py <= cy1 + 0.5;
  };
  for (std::size_t si = 0; si < chart.series.size(); ++si) {
    const Series& ser = chart.series[si];
    const Rgb c = ser.color.value_or(palette(si));
    const int width = ser.line_width ? ser.line_width : lw;
    const int radius = ser.marker_size ? ser.marker_size : default_marker_size(s);
    const std::size_t n = ser.x.size();
    double phase = 0;
    for (std::size_t i = 0; i < n; ++i) {
      if (!finite_point(ser, i)) {
        phase = 0;  // a gap restarts the pattern
        continue;
      }
      const double px = L.x_to_px(ser.x[i]), py = L.y_to_px(ser.y[i]);
      const bool next = i + 1 < n && finite_point(ser, i + 1);
      const bool prev = i > 0 && finite_point(ser, i - 1);
      if (next)
        segment(px, py, L.x_to_px(ser.x[i + 1]), L.y_to_px(ser.y[i + 1]), c, width, ser.dash,
                phase);
      if (!inside(px, py)) continue;
      if (ser.markers)
        img.marker(int(std::lround(px)), int(std::lround(py)), ser.marker_shape, radius, c);
      else if (!next && !prev)  // an isolated point would otherwise be invisible
        img.disc(int(std::lround(px)), int(std::lround(py)), std::max(s, (width + 1) / 2), c);
    }
  }

  // Reference line labels: the spot along the line that hides the fewest drawn pixels.
  for (std::size_t r = 0; r < chart.reference_lines.size(); ++r) {
    const ReferenceLine& ref = chart.reference_lines[r];
    if (ref.label.empty()) continue;
    const int w = ref.line_width ? ref.line_width : lw, off = (w - 1) / 2, gap = 3 * s;
    const int tw = text_width(ref.label, s);
    const int above = ref_rows[r] - off - gap - th + 1, below = ref_rows[r] - off + w - 1 + gap;
    const int right = L.plot_right - 4 * s - tw + 1, left = L.plot_left + lw + 4 * s;
    const int middle = left + (right - left) / 2;
    const int q1 = left + (right - left) / 4, q3 = right - (right - left) / 4;
    const std::array<std::pair<int, int>, 10> spots = {{{right, above},
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
    for (const auto& spot : spots) {
      const int x = spot.first, y = spot.second;
      if (x <= L.plot_left + 1 || x + tw - 1 >= L.plot_right || y <= L.plot_top ||
          y + th - 1 >= L.plot_bottom - 1)
        continue;
      const long covered = covered_pixels(img, x, y, x + tw - 1, y + th - 1);
      if (best < 0 || covered < best) {
        best = covered;
        L.reference_labels[r] = PixelRect{x, y, x + tw - 1, y + th - 1};
      }
    }
    const PixelRect& t = L.reference_labels[r];
    if (t.empty()) continue;
    for (int dy = -1; dy <= 1; ++dy)  // a white halo keeps the label legible over lines
      for (int dx = -1; dx <= 1; ++dx)
        if (dx || dy) img.text(t.left + dx, t.top + dy, ref.label, colors::kWhite, s);
    img.text(t.left, t.top, ref.label, ref.color, s);
  }

  // Axes, ticks and tick labels.
  img.fill_rect(L.plot_left - (lw - 1), L.plot_top, L.plot_left, L.plot_bottom, colors::kAxis);
  img.fill_rect(L.plot_left, L.plot_bottom, L.plot_right, L.plot_bottom + (lw - 1), colors::kAxis);
  for (std::size_t i = 0; i < L.y_ticks.size(); ++i) {
    const int y = int(std::lround(L.y_to_px(L.y_ticks[i])));
    img.fill_rect(L.plot_left - tick, y, L.plot_left, y, colors::kAxis);
    const std::string& lab = L.y_tick_labels[i];
    img.text(L.plot_left - tick - 2 * s - text_width(lab, s), y - (7 * s) / 2, lab, colors::kInk,
             s);
  }
  for (std::size_t i = 0; i < L.x_ticks.size(); ++i) {
    const int x = int(std::lround(L.x_to_px(L.x_ticks[i])));
    img.fill_rect(x, L.plot_bottom, x, L.plot_bottom + tick, colors::kAxis);
    const std::string& lab = L.x_tick_labels[i];
    img.text(x - text_width(lab, s) / 2, L.plot_bottom + tick + 2 * s, lab, colors::kInk, s);
  }

  // Title and axis labels.
  const int mid_x = (L.plot_left + L.plot_right) / 2;
  if (!chart.title.empty())
    img.text(std::max(box.left + m, mid_x - text_width(chart.title, s) / 2), box.top + m,
             chart.title, colors::kInk, s);
  if (!chart.x_label.empty())
    img.text(mid_x - text_width(chart.x_label, s) / 2, box.bottom - m - th + 2 * s, chart.x_label,
             colors::kInk, s);
  if (!chart.y_label.empty()) {
    const int mid_y = (L.plot_top + L.plot_bottom) / 2;
    img.text_up(box.left + m, std::min(box.bottom, mid_y + text_width(chart.y_label, s) / 2),
                chart.y_label, colors::kInk, s);
  }

  // Legend: in the corner of the data area that hides the fewest drawn pixels.
  const auto entries = legend ? legend_entries(chart, s) : std::vector<LegendEntry>{};
  if (!entries.empty()) {
    const int w = L.legend_right - L.legend_left, h = L.legend_bottom - L.legend_top;
    const int gap = 4 * s;
    const std::array<std::pair<int, int>, 4> corners = {{
        {L.plot_right - gap - w, L.plot_top + gap},         // top right
        {L.plot_left + gap + lw, L.plot_top + gap},         // top left
        {L.plot_right - gap - w, L.plot_bottom - gap - h},  // bottom right
        {L.plot_left + gap + lw, L.plot_bottom - gap - h},  // bottom left
    }};
    long best = -1;
    std::pair<int, int> pos = corners[0];
    for (const auto& corner : corners) {
      const long covered =
          covered_pixels(img, corner.first, corner.second, corner.first + w, corner.second + h);
      if (best < 0 || covered < best) best = covered, pos = corner;
    }
    L.legend_left = pos.first;
    L.legend_top = pos.second;
    L.legend_right = pos.first + w;
    L.legend_bottom = pos.second + h;
    img.fill_rect(L.legend_left, L.legend_top, L.legend_right, L.legend_bottom, colors::kWhite);
    img.stroke_rect(L.legend_left, L.legend_top, L.legend_right, L.legend_bottom, colors::kFrame);
    const int rh = legend_row_h(s), sw = legend_sample_w(s, entries);
    for (std::size_t i = 0; i < entries.size(); ++i) {
      const int top = L.legend_top + s + int(i) * rh + 2 * s;
      const int sx = L.legend_left + 3 * s, sy = top + (7 * s) / 2;
      draw_sample(img, entries[i], sx, sy, sw, s);
      img.text(sx + sw + 3 * s, top, entries[i].name, colors::kInk, s);
    }
  }
}

}  // namespace

ChartLayout layout_chart(const LineChart& chart, int width, int height) {
  validate_size(width, height, kRenderFn);
  validate_content(chart, kRenderFn);
  const int s = chart.font_scale ? chart.font_scale : auto_scale(width, height);
  return chart_layout_in(chart, PixelRect{0, 0, width - 1, height - 1}, s, chart.legend);
}

Image render(const LineChart& chart, int width, int height, ChartLayout* layout_out) {
  ChartLayout L = layout_chart(chart, width, height);
  Image img(width, height, colors::kWhite);
  draw_chart(img, chart, L, chart.legend);
  if (layout_out) *layout_out = std::move(L);
  return img;
}

void save(const LineChart& chart, const std::string& path, int width, int height) {
  write_png(path, render(chart, width, height));
}

// ---- figures -----------------------------------------------------------------------------------

namespace {

struct FigureGeometry {
  FigureLayout L;
  std::vector<LegendEntry> entries;  // the shared legend's
  int sample_w = 0;
  int footer_scale = 1;
};

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
  const int s = f.font_scale
                    ? f.font_scale
                    : std::clamp(std::min(f.width / (350 * cols), f.height / (250 * rows)), 1, 4);
  L.scale = s;
  const int m = 6 * s;
  int top = 0, bottom = f.height - 1;

  if (!f.title.empty()) {
    const int tw = text_width(f.title, s + 1), tth = text_height(s + 1);
    L.title.left = std::max(m, (f.width - tw) / 2);
    L.title.top = m;
    L.title.right = L.title.left + tw - 1;
    L.title.bottom = L.title.top + tth - 1;
    top = L.title.bottom + 1;
  }
  if (!f.footer.empty()) {
    g.footer_scale = std::max(1, s - 1);
    const int tw = text_width(f.footer, g.footer_scale), fth = text_height(g.footer_scale);
    L.footer.right = f.width - 1 - m;
    L.footer.left = L.footer.right - tw + 1;
    L.footer.bottom = bottom - m / 2;
    L.footer.top = L.footer.bottom - fth + 1;
    bottom = L.footer.top - 1;
  }
  if (f.legend == LegendPlacement::kBelow) {
    for (const LineChart& c : f.charts)
      for (LegendEntry& e : legend_entries(c, s))
        if (std::find(g.entries.begin(), g.entries.end(), e) == g.entries.end())
          g.entries.push_back(std::move(e));
  }
  if (!g.entries.empty()) {
    g.sample_w = legend_sample_w(s, g.entries);
    int name_w = 0;
    for (const LegendEntry& e : g.entries) name_w = std::max(name_w, text_width(e.name, s));
    const int col_gap = 10 * s, entry_w = g.sample_w + 1 + 5 * s + name_w;
    const int avail = f.width - 2 * m;
    const int ncols = int(
        std::clamp<int64_t>((avail + col_gap) / (entry_w + col_gap), 1, int64_t(g.entries.size())));
    const int nrows = int((int64_t(g.entries.size()) + ncols - 1) / ncols);
    const int rh = legend_row_h(s);
    const int total_w = ncols * entry_w + (ncols - 1) * col_gap;
    L.legend.left = std::max(m, (f.width - total_w) / 2);
    L.legend.right = L.legend.left + total_w - 1;
    L.legend.bottom = bottom - m / 2;
    L.legend.top = L.legend.bottom - nrows * rh + 1;
    bottom = L.legend.top - 1;
    for (std::size_t i = 0; i < g.entries.size(); ++i) {
      const int x = L.legend.left + int(i % std::size_t(ncols)) * (entry_w + col_gap);
      const int text_top = L.legend.top + int(i / std::size_t(ncols)) * rh + 2 * s;
      const int sy = text_top + (7 * s) / 2;
      const int half = std::max(g.entries[i].line_width, 2 * s);
      L.legend_samples.push_back(PixelRect{x, sy - half, x + g.sample_w, sy + half});
      L.legend_names.push_back(g.entries[i].name);
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

}  // namespace

FigureLayout layout_figure(const Figure& figure) { return figure_geometry(figure).L; }

Image render(const Figure& f, FigureLayout* layout_out) {
  FigureGeometry g = figure_geometry(f);
  FigureLayout& L = g.L;
  const int s = L.scale;
  Image img(f.width, f.height, colors::kWhite);
  for (std::size_t i = 0; i < f.charts.size(); ++i)
    draw_chart(img, f.charts[i], L.charts[i],
               f.charts[i].legend && f.legend == LegendPlacement::kInside);
  if (!L.title.empty()) img.text(L.title.left, L.title.top, f.title, colors::kInk, s + 1);
  for (std::size_t i = 0; i < g.entries.size(); ++i) {
    const PixelRect& r = L.legend_samples[i];
    draw_sample(img, g.entries[i], r.left, r.center_y(), g.sample_w, s);
    img.text(r.right + 1 + 5 * s, r.center_y() - (7 * s) / 2, g.entries[i].name, colors::kInk, s);
  }
  if (!L.footer.empty())
    img.text(L.footer.left, L.footer.top, f.footer, colors::kFooter, g.footer_scale);
  if (layout_out) *layout_out = std::move(L);
  return img;
}

void save(const Figure& figure, const std::string& path) { write_png(path, render(figure)); }

}  // namespace attn::plot

// ---- heatmaps ----------------------------------------------------------------------------------

namespace attn::plot {

namespace {

// A label as the font can draw it: each UTF-8 character (a lead byte and its continuation bytes)
// and each control byte becomes one '?'; then labels longer than `max_chars` are cut.
std::string heatmap_label(const std::string& s, std::size_t max_chars = kHeatmapLabelChars) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const auto b = static_cast<unsigned char>(s[i]);
    if (b >= 0x80 && b < 0xC0) continue;  // continuation byte of a character already shown
    out.push_back(b >= 32 && b < 127 ? char(b) : '?');
  }
  if (out.size() > max_chars) out = out.substr(0, max_chars - 2) + "..";
  return out;
}

// Titles and axis names: drawable, cut only beyond 200 characters.
std::string heatmap_text(const std::string& s) { return heatmap_label(s, 200); }

struct HeatmapGeometry {
  HeatmapLayout L;
  std::vector<std::string> rows, cols;  // drawable labels
  int pad = 3, label_step = 1;
  int title_x = 0, title_y = 0;  // overall title, scale + 1
  int xlabel_x = 0, xlabel_y = 0, ylabel_x = 0, ylabel_y = 0;
};

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
  const int s = cp >= 28 ? 2 : 1;
  L.scale = s;
  const int th = text_height(s), pad = 3 * s, margin = 10 * s;
  g.pad = pad;
  g.label_step = int((th + cp - 1) / cp);

  for (const std::string& r : h.row_labels) g.rows.push_back(heatmap_label(r));
  for (const std::string& c : h.col_labels) g.cols.push_back(heatmap_label(c));
  int64_t rl = 0, cl = 0;
  for (const std::string& r : g.rows) rl = std::max<int64_t>(rl, text_width(r, s));
  for (const std::string& c : g.cols) cl = std::max<int64_t>(cl, text_width(c, s));
  bool any_title = false;
  int64_t panel_title_w = 0;
  for (const HeatmapPanel& p : h.panels) {
    any_title = any_title || !p.title.empty();
    panel_title_w = std::max<int64_t>(panel_title_w, text_width(heatmap_text(p.title), s));
  }
  const int64_t pt = any_title ? th + 2 * pad : 0;  // panel title band
  const int64_t gw = cols * cp, gh = rows * cp;
  const int64_t block_w = std::max(rl + 2 * pad + gw, panel_title_w + 2 * pad);
  const int64_t block_h = pt + gh + 2 * pad + cl;
  const int64_t n = int64_t(h.panels.size());
  const int64_t per_row = std::min<int64_t>(n, 4), nrow = (n + per_row - 1) / per_row;
  const int64_t gap = 8 + 8 * s;
  const int64_t title_band = h.title.empty() ? 0 : text_height(s + 1) + 3 * pad;
  const int64_t ylabel_band = h.y_label.empty() ? 0 : th + 2 * pad;
  const int64_t xlabel_band = h.x_label.empty() ? 0 : th + 2 * pad;

  // Colour bar ticks and their labels.
  L.ticks = nice_ticks(lo, hi, 5, false);
  int64_t tick_w = 0;
  for (double v : L.ticks) {
    L.tick_labels.push_back(format_tick(v));
    tick_w = std::max<int64_t>(tick_w, text_width(L.tick_labels.back(), s));
  }
  const int64_t bar_w = 12 * s, bar_h = std::max<int64_t>(gh, 120 * s);

  const int64_t panels_w = per_row * block_w + (per_row - 1) * gap;
  const int64_t panels_h = nrow * block_h + (nrow - 1) * gap;
  const int64_t left0 = margin + ylabel_band, top0 = margin + title_band;
  const int64_t bar_left = left0 + panels_w + gap;
  int64_t width = bar_left + bar_w + 2 + 6 * s + tick_w + margin;
  if (!h.title.empty())
    width = std::max<int64_t>(width, 2 * margin + text_width(heatmap_text(h.title), s + 1));
  const int64_t body_h = std::max(panels_h, pt + bar_h + th);
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
    const std::string t = heatmap_text(h.panels[std::size_t(p)].title);
    if (!t.empty()) {
      const int tw = text_width(t, s);
      title.left = std::max(int(bx), grid.left + int(gw - tw) / 2);
      title.top = int(by + pad);
      title.right = title.left + tw - 1;
      title.bottom = title.top + th - 1;
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
  if (!h.title.empty()) {
    g.title_x =
        int(std::max<int64_t>(margin, (width - text_width(heatmap_text(h.title), s + 1)) / 2));
    g.title_y = int(margin);
  }
  g.xlabel_x =
      int(left0 + std::max<int64_t>(0, (panels_w - text_width(heatmap_text(h.x_label), s)) / 2));
  g.xlabel_y = int(top0 + panels_h + pad);
  g.ylabel_x = int(margin);
  g.ylabel_y = int(top0 + std::min<int64_t>(
                              body_h - 1, (panels_h + text_width(heatmap_text(h.y_label), s)) / 2));
  return g;
}

}  // namespace

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
  return heatmap_geometry(heatmap, cell_px).L;
}

Image render_heatmap(const Heatmap& h, int cell_px, HeatmapLayout* layout_out) {
  const HeatmapGeometry g = heatmap_geometry(h, cell_px);
  const HeatmapLayout& L = g.L;
  const int s = L.scale, th = text_height(s), pad = g.pad;
  Image img(L.width, L.height, colors::kWhite);
  if (!h.title.empty()) img.text(g.title_x, g.title_y, heatmap_text(h.title), colors::kInk, s + 1);
  for (std::size_t p = 0; p < h.panels.size(); ++p) {
    const PixelRect& grid = L.grids[p];
    const std::vector<double>& values = h.panels[p].values;
    for (int r = 0; r < L.rows; ++r)
      for (int c = 0; c < L.cols; ++c) {
        const PixelRect cell = L.cell(p, r, c);
        img.fill_rect(cell.left, cell.top, cell.right, cell.bottom,
                      L.color_of(values[std::size_t(r) * std::size_t(L.cols) + std::size_t(c)]));
      }
    img.stroke_rect(grid.left - 1, grid.top - 1, grid.right + 1, grid.bottom + 1, colors::kAxis);
    if (L.titles[p].right >= L.titles[p].left)
      img.text(L.titles[p].left, L.titles[p].top, heatmap_text(h.panels[p].title), colors::kInk, s);
    // Row labels right-aligned left of the grid, column labels rotated under it; with cells
    // smaller than the font only every label_step-th is written.
    for (int r = 0; r < L.rows; r += g.label_step) {
      const std::string& t = g.rows[std::size_t(r)];
      const PixelRect cell = L.cell(p, r, 0);
      img.text(grid.left - pad - text_width(t, s), cell.top + (L.cell_px - th) / 2, t, colors::kInk,
               s);
    }
    for (int c = 0; c < L.cols; c += g.label_step) {
      const std::string& t = g.cols[std::size_t(c)];
      if (t.empty()) continue;
      const PixelRect cell = L.cell(p, 0, c);
      img.text_up(cell.left + (L.cell_px - th) / 2, grid.bottom + 1 + pad + text_width(t, s) - 1, t,
                  colors::kInk, s);
    }
  }
  // The colour bar: gradient, outline, ticks and their labels.
  const PixelRect& bar = L.colorbar;
  const int span = std::max(1, bar.bottom - bar.top);
  for (int y = bar.top; y <= bar.bottom; ++y)
    img.fill_rect(bar.left, y, bar.right, y, colormap(double(bar.bottom - y) / double(span)));
  img.stroke_rect(bar.left - 1, bar.top - 1, bar.right + 1, bar.bottom + 1, colors::kAxis);
  for (std::size_t i = 0; i < L.ticks.size(); ++i) {
    const int y = L.tick_y[i];
    img.fill_rect(bar.right + 2, y, bar.right + 1 + 3 * s, y + s - 1, colors::kAxis);
    img.text(bar.right + 2 + 6 * s, y - th / 2, L.tick_labels[i], colors::kInk, s);
  }
  if (!h.x_label.empty())
    img.text(g.xlabel_x, g.xlabel_y, heatmap_text(h.x_label), colors::kInk, s);
  if (!h.y_label.empty())
    img.text_up(g.ylabel_x, g.ylabel_y, heatmap_text(h.y_label), colors::kInk, s);
  if (layout_out) *layout_out = L;
  return img;
}

void save(const Heatmap& heatmap, const std::string& path, int cell_px) {
  write_png(path, render_heatmap(heatmap, cell_px));
}

}  // namespace attn::plot

// ---- figures as JSON ---------------------------------------------------------------------------

namespace attn::plot {

namespace {

using nlohmann::json;

constexpr const char* kJsonFn = "plot::figure_from_json";
constexpr std::size_t kMaxString = 1000;
constexpr std::size_t kMaxPoints = 1000000;
constexpr int kMaxDepth = 32;

// Input text as it may appear in a message: printable ASCII, at most `max` characters.
std::string printable(std::string_view s, std::size_t max = 40) {
  std::string out;
  for (char ch : s) {
    if (out.size() >= max) {
      out += "...";
      break;
    }
    const auto b = static_cast<unsigned char>(ch);
    out.push_back(b >= 32 && b < 127 ? ch : '?');
  }
  return out;
}

template <typename... Args>
[[noreturn]] void jfail(const std::string& path, const Args&... args) {
  fail(kJsonFn, path.empty() ? std::string("top level") : path, ": ", args...);
}

std::string key_path(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}
std::string index_path(const std::string& path, std::size_t i) {
  return path + "[" + std::to_string(i) + "]";
}

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
    case json::value_t::number_float: return "a number";
    case json::value_t::string: return "a string";
    case json::value_t::array: return "an array";
    case json::value_t::object: return "an object";
    default: return "an unexpected value";
  }
}

// A value for a message: a string quoted (printable, short), anything else by its type.
std::string describe(const json& v) {
  if (!v.is_string()) return type_name(v);
  std::string out(1, '"');
  out += printable(v.get_ref<const std::string&>());
  out += '"';
  return out;
}

// An object whose keys are all among `known`; returns a lookup for them.
class Obj {
 public:
  Obj(const json& v, std::string path, std::initializer_list<const char*> known)
      : v_(v), path_(std::move(path)) {
    if (!v.is_object()) jfail(path_, "expected an object, got ", type_name(v));
    for (auto it = v.begin(); it != v.end(); ++it) {
      bool ok = false;
      for (const char* k : known) ok = ok || it.key() == k;
      if (!ok) {
        std::string list;
        for (const char* k : known) list += std::string(list.empty() ? "" : ", ") + k;
        jfail(key_path(path_, printable(it.key())), "unknown key (expected one of: ", list, ")");
      }
    }
  }
  const json* get(const char* key) const {
    auto it = v_.find(key);
    return it == v_.end() ? nullptr : &*it;
  }
  std::string path(const char* key) const { return key_path(path_, key); }
  const std::string& path() const { return path_; }

 private:
  const json& v_;
  std::string path_;
};

std::string get_string(const json& v, const std::string& path) {
  if (!v.is_string()) jfail(path, "expected a string, got ", type_name(v));
  const std::string& s = v.get_ref<const std::string&>();
  if (s.size() > kMaxString)
    jfail(path, "string of ", s.size(), " bytes is too long (at most ", kMaxString, ")");
  return s;
}

bool get_bool(const json& v, const std::string& path) {
  if (!v.is_boolean()) jfail(path, "expected true or false, got ", type_name(v));
  return v.get<bool>();
}

double get_number(const json& v, const std::string& path) {
  if (!v.is_number()) jfail(path, "expected a number, got ", type_name(v));
  const double d = v.get<double>();
  if (!std::isfinite(d)) jfail(path, "expected a finite number");
  return d;
}

int get_int(const json& v, const std::string& path, int lo, int hi) {
  if (!v.is_number()) jfail(path, "expected an integer in ", lo, "..", hi, ", got ", type_name(v));
  const double d = v.get<double>();
  if (!(d >= lo && d <= hi) || d != std::floor(d))
    jfail(path, "expected an integer in ", lo, "..", hi, ", got ", v.dump());
  return int(d);
}

std::optional<double> get_optional_number(const json& v, const std::string& path) {
  if (v.is_null()) return std::nullopt;
  if (!v.is_number()) jfail(path, "expected a number or null, got ", type_name(v));
  return get_number(v, path);
}

Rgb get_color(const json& v, const std::string& path) {
  if (v.is_string()) {
    const std::string& s = v.get_ref<const std::string&>();
    auto hex = [](char c) {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    bool ok = s.size() == 7 && s[0] == '#';
    for (std::size_t i = 1; ok && i < 7; ++i) ok = hex(s[i]) >= 0;
    if (!ok) jfail(path, "expected a colour \"#rrggbb\", got \"", printable(s), "\"");
    auto byte = [&](std::size_t i) { return uint8_t(hex(s[i]) * 16 + hex(s[i + 1])); };
    return {byte(1), byte(3), byte(5)};
  }
  if (v.is_array()) {
    if (v.size() != 3) jfail(path, "expected [r, g, b], got an array of ", v.size(), " values");
    Rgb c;
    c.r = uint8_t(get_int(v[0], index_path(path, 0), 0, 255));
    c.g = uint8_t(get_int(v[1], index_path(path, 1), 0, 255));
    c.b = uint8_t(get_int(v[2], index_path(path, 2), 0, 255));
    return c;
  }
  jfail(path, "expected a colour (\"#rrggbb\" or [r, g, b]), got ", type_name(v));
}

std::vector<int> get_dash(const json& v, const std::string& path) {
  if (!v.is_array()) jfail(path, "expected an array of dash lengths, got ", type_name(v));
  if (v.size() % 2 != 0 || v.size() > 16)
    jfail(path, "expected an even number (0..16) of dash lengths, got ", v.size());
  std::vector<int> dash;
  for (std::size_t i = 0; i < v.size(); ++i)
    dash.push_back(get_int(v[i], index_path(path, i), 1, 4096));
  return dash;
}

// A series' x or y values: numbers, null for a gap.
std::vector<double> get_values(const json& v, const std::string& path, std::size_t& budget) {
  if (!v.is_array()) jfail(path, "expected an array of numbers, got ", type_name(v));
  if (v.size() > budget)
    jfail(path, v.size(), " values exceed the figure's limit of ", kMaxPoints, " points");
  budget -= v.size();
  std::vector<double> out;
  out.reserve(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) {
    const json& e = v[i];
    if (e.is_null()) {
      out.push_back(std::numeric_limits<double>::quiet_NaN());
      continue;
    }
    if (!e.is_number()) jfail(index_path(path, i), "expected a number or null, got ", type_name(e));
    out.push_back(get_number(e, index_path(path, i)));
  }
  return out;
}

Marker get_marker(const json& v, const std::string& path, bool& markers) {
  const std::string s = v.is_string() ? v.get<std::string>() : std::string();
  markers = true;
  if (v.is_string()) {
    if (s == "none") {
      markers = false;
      return Marker::kDisc;
    }
    if (s == "disc") return Marker::kDisc;
    if (s == "square") return Marker::kSquare;
    if (s == "triangle") return Marker::kTriangle;
    if (s == "diamond") return Marker::kDiamond;
  }
  jfail(path, "expected \"none\", \"disc\", \"square\", \"triangle\" or \"diamond\", got ",
        describe(v));
}

Series parse_series(const json& v, const std::string& path, bool log_x, bool log_y,
                    std::size_t& budget) {
  const Obj o(v, path, {"name", "x", "y", "color", "dash", "marker", "marker_size", "line_width"});
  Series s;
  if (const json* e = o.get("name")) s.name = get_string(*e, o.path("name"));
  const json* x = o.get("x");
  const json* y = o.get("y");
  if (!x || !y) jfail(path, "a series needs \"x\" and \"y\"");
  s.x = get_values(*x, o.path("x"), budget);
  s.y = get_values(*y, o.path("y"), budget);
  if (s.x.size() != s.y.size())
    jfail(path, "\"x\" has ", s.x.size(), " values but \"y\" has ", s.y.size());
  for (std::size_t i = 0; i < s.x.size(); ++i) {
    if (log_x && s.x[i] <= 0)
      jfail(index_path(o.path("x"), i), "log_x needs positive values, got ", s.x[i]);
    if (log_y && s.y[i] <= 0)
      jfail(index_path(o.path("y"), i), "log_y needs positive values, got ", s.y[i]);
  }
  if (const json* e = o.get("color")) s.color = get_color(*e, o.path("color"));
  if (const json* e = o.get("dash")) s.dash = get_dash(*e, o.path("dash"));
  if (const json* e = o.get("marker")) s.marker_shape = get_marker(*e, o.path("marker"), s.markers);
  if (const json* e = o.get("marker_size"))
    s.marker_size = get_int(*e, o.path("marker_size"), 0, 32);
  if (const json* e = o.get("line_width")) s.line_width = get_int(*e, o.path("line_width"), 0, 8);
  return s;
}

ReferenceLine parse_reference(const json& v, const std::string& path, bool log_y) {
  const Obj o(v, path, {"y", "label", "color", "dash", "line_width"});
  ReferenceLine r;
  const json* y = o.get("y");
  if (!y) jfail(path, "a reference line needs \"y\"");
  r.y = get_number(*y, o.path("y"));
  if (log_y && r.y <= 0) jfail(o.path("y"), "log_y needs a positive value, got ", r.y);
  if (const json* e = o.get("label")) r.label = get_string(*e, o.path("label"));
  if (const json* e = o.get("color")) r.color = get_color(*e, o.path("color"));
  if (const json* e = o.get("dash")) r.dash = get_dash(*e, o.path("dash"));
  if (const json* e = o.get("line_width")) r.line_width = get_int(*e, o.path("line_width"), 0, 8);
  return r;
}

LineChart parse_chart(const json& v, const std::string& path, std::size_t& budget) {
  const Obj o(v, path,
              {"title", "x_label", "y_label", "log_x", "log_y", "x_min", "x_max", "y_min", "y_max",
               "legend", "series", "reference_lines"});
  LineChart c;
  if (const json* e = o.get("title")) c.title = get_string(*e, o.path("title"));
  if (const json* e = o.get("x_label")) c.x_label = get_string(*e, o.path("x_label"));
  if (const json* e = o.get("y_label")) c.y_label = get_string(*e, o.path("y_label"));
  if (const json* e = o.get("log_x")) c.log_x = get_bool(*e, o.path("log_x"));
  if (const json* e = o.get("log_y")) c.log_y = get_bool(*e, o.path("log_y"));
  if (const json* e = o.get("legend")) c.legend = get_bool(*e, o.path("legend"));
  struct End {
    const char* key;
    std::optional<double>* dst;
    bool log;
  };
  for (const End& end : {End{"x_min", &c.x_min, c.log_x}, End{"x_max", &c.x_max, c.log_x},
                         End{"y_min", &c.y_min, c.log_y}, End{"y_max", &c.y_max, c.log_y}}) {
    const json* e = o.get(end.key);
    if (!e) continue;
    *end.dst = get_optional_number(*e, o.path(end.key));
    if (end.log && *end.dst && **end.dst <= 0)
      jfail(o.path(end.key), "a log axis needs a positive value, got ", **end.dst);
  }
  if (c.x_min && c.x_max && !(*c.x_min < *c.x_max))
    jfail(path, "x_min (", *c.x_min, ") must be below x_max (", *c.x_max, ")");
  if (c.y_min && c.y_max && !(*c.y_min < *c.y_max))
    jfail(path, "y_min (", *c.y_min, ") must be below y_max (", *c.y_max, ")");
  if (const json* e = o.get("series")) {
    const std::string p = o.path("series");
    if (!e->is_array()) jfail(p, "expected an array of series, got ", type_name(*e));
    if (e->size() > 256) jfail(p, e->size(), " series (at most 256)");
    for (std::size_t i = 0; i < e->size(); ++i)
      c.series.push_back(parse_series((*e)[i], index_path(p, i), c.log_x, c.log_y, budget));
  }
  if (const json* e = o.get("reference_lines")) {
    const std::string p = o.path("reference_lines");
    if (!e->is_array()) jfail(p, "expected an array of reference lines, got ", type_name(*e));
    if (e->size() > 64) jfail(p, e->size(), " reference lines (at most 64)");
    for (std::size_t i = 0; i < e->size(); ++i)
      c.reference_lines.push_back(parse_reference((*e)[i], index_path(p, i), c.log_y));
  }
  return c;
}

// Deepest nesting of arrays and objects, counted without parsing (strings skipped).
int nesting_depth(std::string_view text) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (char ch : text) {
    if (in_string) {
      if (escaped)
        escaped = false;
      else if (ch == '\\')
        escaped = true;
      else if (ch == '"')
        in_string = false;
      continue;
    }
    if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == '{') {
      deepest = std::max(deepest, ++depth);
      if (deepest > kMaxDepth) return deepest;
    } else if (ch == ']' || ch == '}') {
      --depth;
    }
  }
  return deepest;
}

}  // namespace

Figure figure_from_json(std::string_view text) {
  if (nesting_depth(text) > kMaxDepth) fail(kJsonFn, "nesting deeper than ", kMaxDepth, " levels");
  json doc;
  try {
    doc = json::parse(text.begin(), text.end());
  } catch (const json::exception& e) {
    fail(kJsonFn, "not valid JSON: ", printable(e.what(), 300));
  }
  const Obj o(doc, "",
              {"width", "height", "title", "footer", "columns", "legend", "font_scale", "charts"});
  Figure f;
  if (const json* e = o.get("width")) f.width = get_int(*e, o.path("width"), 64, 8192);
  if (const json* e = o.get("height")) f.height = get_int(*e, o.path("height"), 64, 8192);
  if (const json* e = o.get("title")) f.title = get_string(*e, o.path("title"));
  if (const json* e = o.get("footer")) f.footer = get_string(*e, o.path("footer"));
  if (const json* e = o.get("columns")) f.columns = get_int(*e, o.path("columns"), 0, 64);
  if (const json* e = o.get("font_scale")) f.font_scale = get_int(*e, o.path("font_scale"), 0, 8);
  if (const json* e = o.get("legend")) {
    const std::string s = e->is_string() ? e->get<std::string>() : std::string();
    if (s == "below")
      f.legend = LegendPlacement::kBelow;
    else if (s == "inside")
      f.legend = LegendPlacement::kInside;
    else if (s == "none")
      f.legend = LegendPlacement::kNone;
    else
      jfail(o.path("legend"), "expected \"below\", \"inside\" or \"none\", got ", describe(*e));
  }
  const json* charts = o.get("charts");
  if (!charts) jfail("", "a figure needs \"charts\"");
  if (!charts->is_array()) jfail("charts", "expected an array of charts, got ", type_name(*charts));
  if (charts->empty() || charts->size() > 64)
    jfail("charts", "expected 1..64 charts, got ", charts->size());
  std::size_t budget = kMaxPoints * 2;  // x and y values
  for (std::size_t i = 0; i < charts->size(); ++i)
    f.charts.push_back(parse_chart((*charts)[i], index_path("charts", i), budget));
  // What the data cannot show in this size (e.g. panels too small, an axis range that overflows).
  try {
    (void)layout_figure(f);
  } catch (const Error& e) {
    fail(kJsonFn, "the figure cannot be drawn: ", e.what());
  }
  return f;
}

}  // namespace attn::plot

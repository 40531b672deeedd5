// Helpers for the plot tests: pictures are checked by what they show (colours near where the data
// say, text where labels go), with room for anti-aliasing, never against golden files.
#pragma once

#include <attn/plot.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

namespace attn::plot::pixels {

// Whether two colours differ by at most `tol` in every channel.
inline bool close(Rgb a, Rgb b, int tol = 40) {
  return std::abs(a.r - b.r) <= tol && std::abs(a.g - b.g) <= tol && std::abs(a.b - b.b) <= tol;
}

// Text and axis ink: dark grey.
inline bool dark(Rgb c) { return std::max({c.r, c.g, c.b}) < 140; }

// Pixels in the (clipped, inclusive) rectangle for which pred holds.
template <typename Pred>
int count_if(const Image& img, int x0, int y0, int x1, int y1, Pred&& pred) {
  int n = 0;
  for (int y = std::max(y0, 0); y <= std::min(y1, img.height - 1); ++y)
    for (int x = std::max(x0, 0); x <= std::min(x1, img.width - 1); ++x) n += pred(img.get(x, y));
  return n;
}
inline int count_close(const Image& img, Rgb c, int x0, int y0, int x1, int y1, int tol = 40) {
  return count_if(img, x0, y0, x1, y1, [&](Rgb p) { return close(p, c, tol); });
}
inline int count_close(const Image& img, Rgb c, const PixelRect& r, int tol = 40) {
  return count_close(img, c, r.left, r.top, r.right, r.bottom, tol);
}
inline int count_dark(const Image& img, int x0, int y0, int x1, int y1) {
  return count_if(img, x0, y0, x1, y1, dark);
}
inline int count_dark(const Image& img, const PixelRect& r) {
  return count_dark(img, r.left, r.top, r.right, r.bottom);
}

// Whether a pixel close to colour c lies within r pixels of the point (x, y) in cairo
// coordinates (pixel (i, j) covers [i, i + 1) x [j, j + 1)).
inline bool near(const Image& img, double x, double y, Rgb c, int r = 2, int tol = 40) {
  const int cx = int(std::floor(x)), cy = int(std::floor(y));
  return count_close(img, c, cx - r, cy - r, cx + r, cy + r, tol) > 0;
}

// The pixel that contains the point (x, y).
inline Rgb at(const Image& img, double x, double y) {
  return img.get(int(std::floor(x)), int(std::floor(y)));
}

// Distance from (px, py) to the segment (ax, ay) - (bx, by).
inline double segment_distance(double px, double py, double ax, double ay, double bx, double by) {
  const double dx = bx - ax, dy = by - ay, len2 = dx * dx + dy * dy;
  double t = len2 > 0 ? ((px - ax) * dx + (py - ay) * dy) / len2 : 0;
  t = std::clamp(t, 0.0, 1.0);
  return std::hypot(px - (ax + t * dx), py - (ay + t * dy));
}

// A small XML well-formedness check: every element closed in order, one root, attributes
// quoted, only the five predefined entities or character references. Returns "" or what is
// wrong.
inline std::string xml_problem(const std::string& s) {
  std::vector<std::string> open;
  bool root_seen = false;
  std::size_t i = 0;
  auto name_at = [&](std::size_t j) {
    std::size_t k = j;
    while (k < s.size() && (std::isalnum(static_cast<unsigned char>(s[k])) || s[k] == ':' ||
                            s[k] == '-' || s[k] == '_' || s[k] == '.'))
      ++k;
    return s.substr(j, k - j);
  };
  while (i < s.size()) {
    if (s[i] == '&') {
      const std::size_t semi = s.find(';', i);
      if (semi == std::string::npos) return "unterminated entity";
      const std::string e = s.substr(i + 1, semi - i - 1);
      if (e != "amp" && e != "lt" && e != "gt" && e != "quot" && e != "apos" &&
          e.rfind('#', 0) != 0)
        return "unknown entity &" + e + ";";
      i = semi + 1;
      continue;
    }
    if (s[i] != '<') {
      if (open.empty() && !std::isspace(static_cast<unsigned char>(s[i])))
        return "text outside the root element";
      ++i;
      continue;
    }
    if (s.compare(i, 2, "<?") == 0 || s.compare(i, 4, "<!--") == 0) {
      const std::size_t end = s.find(s[i + 1] == '?' ? "?>" : "-->", i);
      if (end == std::string::npos) return "unterminated declaration or comment";
      i = end + 2;
      continue;
    }
    if (s.compare(i, 2, "</") == 0) {
      const std::string name = name_at(i + 2);
      if (open.empty() || open.back() != name) return "unexpected </" + name + ">";
      open.pop_back();
      i = s.find('>', i);
      if (i == std::string::npos) return "unterminated end tag";
      ++i;
      continue;
    }
    const std::string name = name_at(i + 1);
    if (name.empty()) return "bad tag at byte " + std::to_string(i);
    if (open.empty() && root_seen) return "a second root element <" + name + ">";
    root_seen = true;
    std::size_t j = i + 1 + name.size();
    char quote = 0;
    for (; j < s.size(); ++j) {
      if (quote) {
        if (s[j] == quote) quote = 0;
        if (s[j] == '<') return "'<' in an attribute of <" + name + ">";
      } else if (s[j] == '"' || s[j] == '\'') {
        quote = s[j];
      } else if (s[j] == '>') {
        break;
      }
    }
    if (j >= s.size()) return "unterminated tag <" + name + ">";
    if (s[j - 1] != '/') open.push_back(name);
    i = j + 1;
  }
  if (!open.empty()) return "<" + open.back() + "> is not closed";
  return root_seen ? "" : "no root element";
}

}  // namespace attn::plot::pixels

// attn::plot::figure_from_json: the JSON description of figures (`attn plot SPEC.json`), parsed and
// validated without drawing anything. The format is documented in include/attn/plot.h.
#include <attn/plot.h>

#include <cmath>
#include <limits>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "../common/error.h"

namespace attn::plot {

using detail::fail;

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

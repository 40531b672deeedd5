// Rendering a parsed chat template (chat_template_internal.h): values with Python's semantics
// (truthiness, str(), ==, +, in, slicing), Jinja's undefined, the filters, tests and functions
// of the subset, and transformers' tojson (json.dumps with ensure_ascii=False).
#include <algorithm>
#include <charconv>
#include <cmath>
#include <ctime>
#include <map>

#include "../common/error.h"
#include "chat_template_internal.h"

namespace attn::data::jinja {

namespace {

// Limits that keep a template from taking unbounded time or memory.
constexpr std::size_t kMaxRange = 100000;
constexpr std::size_t kMaxOutput = std::size_t(1) << 26;
constexpr uint64_t kMaxSteps = 1000000;

struct Value {
  json j;
  bool undefined = false;
  static Value undef() { return Value{json(), true}; }
};

// Python's repr of a float: the shortest digits that read back, in positional notation for
// exponents -4 .. 15, with ".0" on integral values.
std::string float_repr(double x) {
  if (std::isnan(x)) return "nan";
  if (std::isinf(x)) return x > 0 ? "inf" : "-inf";
  char buf[64];
  auto r = std::to_chars(buf, buf + sizeof buf, x, std::chars_format::scientific);
  std::string sci(buf, r.ptr);  // d.ddddde±XX
  const std::size_t e = sci.find('e');
  std::string mant = sci.substr(0, e);
  const int exp = std::stoi(sci.substr(e + 1));
  const bool neg = mant[0] == '-';
  if (neg) mant.erase(0, 1);
  std::string digits;
  for (char c : mant)
    if (c != '.') digits += c;
  std::string out = neg ? "-" : "";
  if (exp < -4 || exp >= 16) {
    out.append(digits, 0, 1);
    if (digits.size() > 1) out.append(".").append(digits, 1, std::string::npos);
    out.append(exp < 0 ? "e-" : "e+");
    const std::string e_digits = std::to_string(std::abs(exp));
    if (e_digits.size() < 2) out.append("0");
    out.append(e_digits);
  } else if (exp < 0) {
    out.append("0.").append(std::size_t(-exp - 1), '0').append(digits);
  } else if (std::size_t(exp + 1) >= digits.size()) {
    out.append(digits).append(std::size_t(exp + 1) - digits.size(), '0').append(".0");
  } else {
    out.append(digits, 0, std::size_t(exp + 1))
        .append(".")
        .append(digits, std::size_t(exp + 1), std::string::npos);
  }
  return out;
}

void json_string(const std::string& s, std::string& out) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      default:
        if (c < 0x20) {
          char b[8];
          std::snprintf(b, sizeof b, "\\u%04x", c);
          out += b;
        } else {
          out += char(c);
        }
    }
  }
  out += '"';
}

// Python's json.dumps(x, ensure_ascii=False, indent=indent) (indent < 0: None).
void dumps(const json& j, int indent, int depth, std::string& out) {
  auto newline = [&](int d) {
    out += '\n';
    out += std::string(std::size_t(indent * d), ' ');
  };
  switch (j.type()) {
    case json::value_t::null: out += "null"; break;
    case json::value_t::boolean: out += j.get<bool>() ? "true" : "false"; break;
    case json::value_t::number_integer: out += std::to_string(j.get<int64_t>()); break;
    case json::value_t::number_unsigned: out += std::to_string(j.get<uint64_t>()); break;
    case json::value_t::number_float: {
      const double x = j.get<double>();
      out += std::isnan(x)   ? "NaN"
             : std::isinf(x) ? (x > 0 ? "Infinity" : "-Infinity")
                             : float_repr(x);
      break;
    }
    case json::value_t::string: json_string(j.get<std::string>(), out); break;
    case json::value_t::array: {
      if (j.empty()) {
        out += "[]";
        break;
      }
      out += '[';
      bool first = true;
      for (const json& e : j) {
        if (!first) out += indent >= 0 ? "," : ", ";
        first = false;
        if (indent >= 0) newline(depth + 1);
        dumps(e, indent, depth + 1, out);
      }
      if (indent >= 0) newline(depth);
      out += ']';
      break;
    }
    case json::value_t::object: {
      if (j.empty()) {
        out += "{}";
        break;
      }
      out += '{';
      bool first = true;
      for (auto it = j.begin(); it != j.end(); ++it) {
        if (!first) out += indent >= 0 ? "," : ", ";
        first = false;
        if (indent >= 0) newline(depth + 1);
        json_string(it.key(), out);
        out += ": ";
        dumps(it.value(), indent, depth + 1, out);
      }
      if (indent >= 0) newline(depth);
      out += '}';
      break;
    }
    default: out += "null";
  }
}

// Python's repr of a string: single quotes unless it has one and no double quote.
std::string str_repr(const std::string& s) {
  const char q = s.find('\'') != std::string::npos && s.find('"') == std::string::npos ? '"' : '\'';
  std::string out(1, q);
  for (char c : s) {
    if (c == q || c == '\\')
      out += '\\', out += c;
    else if (c == '\n')
      out += "\\n";
    else if (c == '\t')
      out += "\\t";
    else if (c == '\r')
      out += "\\r";
    else
      out += c;
  }
  return out + q;
}

std::string repr(const json& j);

// Python's str(): strings as they are, the rest as repr.
std::string to_str(const Value& v) {
  if (v.undefined) return "";
  if (v.j.is_string()) return v.j.get<std::string>();
  return repr(v.j);
}

std::string repr(const json& j) {
  switch (j.type()) {
    case json::value_t::null: return "None";
    case json::value_t::boolean: return j.get<bool>() ? "True" : "False";
    case json::value_t::number_integer: return std::to_string(j.get<int64_t>());
    case json::value_t::number_unsigned: return std::to_string(j.get<uint64_t>());
    case json::value_t::number_float: return float_repr(j.get<double>());
    case json::value_t::string: return str_repr(j.get<std::string>());
    case json::value_t::array: {
      std::string out = "[";
      for (std::size_t i = 0; i < j.size(); ++i) out += (i ? ", " : "") + repr(j[i]);
      return out + "]";
    }
    case json::value_t::object: {
      std::string out = "{";
      bool first = true;
      for (auto it = j.begin(); it != j.end(); ++it, first = false)
        out += (first ? "" : ", ") + str_repr(it.key()) + ": " + repr(it.value());
      return out + "}";
    }
    default: return "None";
  }
}

bool truthy(const Value& v) {
  if (v.undefined) return false;
  const json& j = v.j;
  switch (j.type()) {
    case json::value_t::null: return false;
    case json::value_t::boolean: return j.get<bool>();
    case json::value_t::number_integer: return j.get<int64_t>() != 0;
    case json::value_t::number_unsigned: return j.get<uint64_t>() != 0;
    case json::value_t::number_float: return j.get<double>() != 0.0;
    case json::value_t::string: return !j.get_ref<const std::string&>().empty();
    case json::value_t::array:
    case json::value_t::object: return !j.empty();
    default: return false;
  }
}

bool is_int(const json& j) { return j.is_number_integer() || j.is_number_unsigned(); }
bool is_number(const json& j) { return j.is_number() && !j.is_boolean(); }
double num(const json& j) { return j.is_boolean() ? double(j.get<bool>()) : j.get<double>(); }

bool equal(const Value& a, const Value& b) {
  if (a.undefined || b.undefined) return a.undefined && b.undefined;
  if ((is_number(a.j) || a.j.is_boolean()) && (is_number(b.j) || b.j.is_boolean()))
    return num(a.j) == num(b.j);
  return a.j == b.j;
}

// Python's index normalisation: i in [-n, n) -> [0, n); false when out of range.
bool norm_index(int64_t& i, int64_t n) {
  if (i < -n || i >= n) return false;
  if (i < 0) i += n;
  return true;
}

// The code points of a UTF-8 string as byte offsets (for slicing and indexing strings).
std::vector<std::size_t> char_starts(const std::string& s) {
  std::vector<std::size_t> out;
  for (std::size_t i = 0; i < s.size(); ++i)
    if ((static_cast<unsigned char>(s[i]) & 0xC0) != 0x80) out.push_back(i);
  return out;
}

// str.upper() / str.lower() on ASCII letters (other bytes as they are).
std::string change_case(std::string s, bool upper) {
  for (char& c : s)
    c = char(upper ? std::toupper(static_cast<unsigned char>(c))
                   : std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string strip(const std::string& s, bool left, bool right, const std::string* chars = nullptr) {
  auto drop = [&](char c) { return chars ? chars->find(c) != std::string::npos : is_space(c); };
  std::size_t b = 0, e = s.size();
  if (left)
    while (b < e && drop(s[b])) ++b;
  if (right)
    while (e > b && drop(s[e - 1])) --e;
  return s.substr(b, e - b);
}

class Renderer {
 public:
  Renderer(const json& context, const std::string& name) : name_(name) {
    scopes_.push_back(context);
  }

  void exec(const std::vector<Node>& nodes) {
    for (const Node& n : nodes) exec(n);
  }
  std::string out;

 private:
  template <typename... Args>
  [[noreturn]] void bad(int line, const Args&... args) const {
    detail::fail(kFn, "'", name_, "' line ", line, ": ", args...);
  }

  void exec(const Node& n) {
    if (++steps_ > kMaxSteps) bad(n.line, "the template runs past ", kMaxSteps, " steps");
    if (out.size() > kMaxOutput) bad(n.line, "the output grows past ", kMaxOutput, " bytes");
    switch (n.kind) {
      case Node::Kind::Text: out += n.text; break;
      case Node::Kind::Output: out += to_str(eval(*n.expr)); break;
      case Node::Kind::If:
        for (const auto& [cond, body] : n.branches)
          if (!cond || truthy(eval(*cond))) {
            exec(body);
            break;
          }
        break;
      case Node::Kind::Set: {
        Value v = eval(*n.expr);
        if (n.targets.size() == 1) {
          scopes_.back()[n.targets[0]] = v.j;
          break;
        }
        for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {  // ns.attr = ...
          auto f = it->find(n.targets[0]);
          if (f == it->end()) continue;
          if (!f->is_object()) bad(n.line, "'", n.targets[0], "' is not a namespace");
          (*f)[n.targets[1]] = v.j;
          return;
        }
        bad(n.line, "'", n.targets[0], "' is undefined");
      }
      case Node::Kind::For: run_for(n); break;
    }
  }

  void run_for(const Node& n) {
    Value it = eval(*n.expr);
    std::vector<json> items;
    if (it.undefined || it.j.is_null()) {
    } else if (it.j.is_array()) {
      items.assign(it.j.begin(), it.j.end());
    } else if (it.j.is_object()) {
      for (auto e = it.j.begin(); e != it.j.end(); ++e) items.push_back(e.key());
    } else if (it.j.is_string()) {
      const std::string s = it.j.get<std::string>();
      const auto starts = char_starts(s);
      for (std::size_t k = 0; k < starts.size(); ++k)
        items.push_back(
            s.substr(starts[k], (k + 1 < starts.size() ? starts[k + 1] : s.size()) - starts[k]));
    } else {
      bad(n.line, "cannot loop over ", repr(it.j));
    }
    auto bind = [&](json& scope, const json& item) {
      if (n.targets.size() == 1) {
        scope[n.targets[0]] = item;
        return;
      }
      if (!item.is_array() || item.size() != n.targets.size())
        bad(n.line, "cannot unpack ", repr(item), " into ", n.targets.size(), " names");
      for (std::size_t k = 0; k < n.targets.size(); ++k) scope[n.targets[k]] = item[k];
    };
    if (n.filter) {  // `for x in xs if cond`: the loop sees the kept items only
      std::vector<json> kept;
      for (const json& item : items) {
        scopes_.push_back(json::object());
        bind(scopes_.back(), item);
        const bool keep = truthy(eval(*n.filter));
        scopes_.pop_back();
        if (keep) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      exec(n.else_body);
      return;
    }
    const int64_t len = int64_t(items.size());
    for (int64_t k = 0; k < len; ++k) {
      if (++steps_ > kMaxSteps) bad(n.line, "the template runs past ", kMaxSteps, " steps");
      json scope = json::object();
      bind(scope, items[std::size_t(k)]);
      json loop = {{"index", k + 1},      {"index0", k},
                   {"revindex", len - k}, {"revindex0", len - k - 1},
                   {"first", k == 0},     {"last", k == len - 1},
                   {"length", len}};
      if (k > 0) loop["previtem"] = items[std::size_t(k - 1)];
      if (k + 1 < len) loop["nextitem"] = items[std::size_t(k + 1)];
      scope["loop"] = std::move(loop);
      scopes_.push_back(std::move(scope));
      exec(n.body);
      scopes_.pop_back();
    }
  }

  Value lookup(const std::string& name) const {
    for (auto it = scopes_.rbegin(); it != scopes_.rend(); ++it) {
      auto f = it->find(name);
      if (f != it->end()) return Value{*f};
    }
    return Value::undef();
  }

  Value get_item(const Value& obj, const Value& key, int line, const std::string& what) {
    if (obj.undefined) bad(line, what, " is undefined");
    const json& o = obj.j;
    if (o.is_object()) {
      if (!key.j.is_string()) return Value::undef();
      auto f = o.find(key.j.get<std::string>());
      return f == o.end() ? Value::undef() : Value{*f};
    }
    if ((o.is_array() || o.is_string()) && is_int(key.j)) {
      int64_t i = key.j.get<int64_t>();
      if (o.is_array()) {
        if (!norm_index(i, int64_t(o.size()))) return Value::undef();
        return Value{o[std::size_t(i)]};
      }
      const std::string s = o.get<std::string>();
      const auto starts = char_starts(s);
      if (!norm_index(i, int64_t(starts.size()))) return Value::undef();
      const std::size_t b = starts[std::size_t(i)];
      const std::size_t e =
          std::size_t(i) + 1 < starts.size() ? starts[std::size_t(i) + 1] : s.size();
      return Value{s.substr(b, e - b)};
    }
    if (o.is_null()) bad(line, what, " is None");
    return Value::undef();
  }

  Value slice(const Value& obj, const Expr& e) {
    if (obj.undefined) bad(e.line, "slicing an undefined value");
    auto part = [&](int k, int64_t fallback) {
      if (!e.args[std::size_t(k)]) return fallback;
      const Value v = eval(*e.args[std::size_t(k)]);
      if (v.j.is_null()) return fallback;
      if (!is_int(v.j)) bad(e.line, "slice indices must be integers");
      return v.j.get<int64_t>();
    };
    const bool is_str = obj.j.is_string();
    if (!is_str && !obj.j.is_array()) bad(e.line, "cannot slice ", repr(obj.j));
    const std::string s = is_str ? obj.j.get<std::string>() : std::string();
    const auto starts = is_str ? char_starts(s) : std::vector<std::size_t>();
    const int64_t n = is_str ? int64_t(starts.size()) : int64_t(obj.j.size());
    const int64_t step = part(3, 1);
    if (step == 0) bad(e.line, "slice step cannot be zero");
    auto clampi = [&](int64_t i) {  // Python's slice bounds
      if (i < 0) i = i < -n ? -1 : i + n;
      return step > 0 ? std::clamp<int64_t>(i, 0, n) : std::clamp<int64_t>(i, -1, n - 1);
    };
    const int64_t b = e.args[1] ? clampi(part(1, 0)) : (step > 0 ? 0 : n - 1);
    const int64_t en = e.args[2] ? clampi(part(2, 0)) : (step > 0 ? n : -1);
    json out = is_str ? json("") : json::array();
    std::string so;
    for (int64_t i = b; step > 0 ? i < en : i > en;
         i = __builtin_add_overflow(i, step, &i) ? en : i) {
      if (is_str) {
        const std::size_t from = starts[std::size_t(i)];
        const std::size_t to =
            std::size_t(i) + 1 < starts.size() ? starts[std::size_t(i) + 1] : s.size();
        so += s.substr(from, to - from);
      } else {
        out.push_back(obj.j[std::size_t(i)]);
      }
    }
    return is_str ? Value{so} : Value{out};
  }

  Value binary(const Expr& e) {
    const std::string& op = e.name;
    if (op == "and") {
      Value a = eval(*e.args[0]);
      return truthy(a) ? eval(*e.args[1]) : a;
    }
    if (op == "or") {
      Value a = eval(*e.args[0]);
      return truthy(a) ? a : eval(*e.args[1]);
    }
    const Value a = eval(*e.args[0]), b = eval(*e.args[1]);
    if (op == "~") return Value{to_str(a) + to_str(b)};
    if (op == "==") return Value{equal(a, b)};
    if (op == "!=") return Value{!equal(a, b)};
    if (op == "in" || op == "not in") {
      bool in = false;
      if (b.j.is_string() && a.j.is_string()) {
        in = b.j.get<std::string>().find(a.j.get<std::string>()) != std::string::npos;
      } else if (b.j.is_array()) {
        for (const json& x : b.j) in = in || equal(a, Value{x});
      } else if (b.j.is_object()) {
        in = a.j.is_string() && b.j.contains(a.j.get<std::string>());
      } else if (!b.undefined) {
        bad(e.line, "'in' needs a string, list or dict on its right, got ", repr(b.j));
      }
      return Value{op == "in" ? in : !in};
    }
    if (a.undefined || b.undefined) bad(e.line, "'", op, "' on an undefined value");
    if (op == "<" || op == "<=" || op == ">" || op == ">=") {
      int c;
      if (is_number(a.j) && is_number(b.j)) {
        c = num(a.j) < num(b.j) ? -1 : num(a.j) > num(b.j) ? 1 : 0;
      } else if (a.j.is_string() && b.j.is_string()) {
        c = a.j.get<std::string>().compare(b.j.get<std::string>());
      } else {
        bad(e.line, "'", op, "' between ", repr(a.j), " and ", repr(b.j));
      }
      return Value{op == "<" ? c < 0 : op == "<=" ? c <= 0 : op == ">" ? c > 0 : c >= 0};
    }
    if (op == "+") {
      if (a.j.is_string() && b.j.is_string())
        return Value{a.j.get<std::string>() + b.j.get<std::string>()};
      if (a.j.is_array() && b.j.is_array()) {
        json out = a.j;
        for (const json& x : b.j) out.push_back(x);
        return Value{out};
      }
    }
    if (op == "*" && a.j.is_string() && is_int(b.j)) {
      const std::string& s = a.j.get_ref<const std::string&>();
      const int64_t n = b.j.get<int64_t>();
      if (n > 0 && s.size() > 0 && uint64_t(n) > kMaxOutput / s.size())
        bad(e.line, "a string repeated past ", kMaxOutput, " bytes");
      std::string out;
      for (int64_t k = 0; k < n; ++k) out += s;
      return Value{out};
    }
    if (!(is_number(a.j) || a.j.is_boolean()) || !(is_number(b.j) || b.j.is_boolean()))
      bad(e.line, "'", op, "' between ", repr(a.j), " and ", repr(b.j));
    const bool ints = !a.j.is_number_float() && !b.j.is_number_float();
    if (ints) return int_op(op, int_of(a.j), int_of(b.j), e.line);
    const double x = num(a.j), y = num(b.j);
    if (op == "+") return Value{x + y};
    if (op == "-") return Value{x - y};
    if (op == "*") return Value{x * y};
    if (op == "**") return Value{std::pow(x, y)};
    if (y == 0) bad(e.line, "division by zero");
    if (op == "/") return Value{x / y};
    if (op == "//") return Value{std::floor(x / y)};
    if (op == "%") return Value{x - y * std::floor(x / y)};  // Python's sign rule
    bad(e.line, "unknown operator '", op, "'");
  }

  static int64_t int_of(const json& j) {
    return j.is_boolean() ? int64_t(j.get<bool>()) : j.get<int64_t>();
  }

  // Integer arithmetic as Python's, refused where it would leave int64 (Python's ints grow).
  Value int_op(const std::string& op, int64_t x, int64_t y, int line) {
    int64_t r = 0;
    auto overflow = [&] { bad(line, "integer overflow in ", x, " ", op, " ", y); };
    if (op == "+") {
      if (__builtin_add_overflow(x, y, &r)) overflow();
      return Value{r};
    }
    if (op == "-") {
      if (__builtin_sub_overflow(x, y, &r)) overflow();
      return Value{r};
    }
    if (op == "*") {
      if (__builtin_mul_overflow(x, y, &r)) overflow();
      return Value{r};
    }
    if (op == "**") {
      if (y < 0) return Value{std::pow(double(x), double(y))};
      r = 1;
      for (int64_t k = 0; k < y; ++k) {
        if (__builtin_mul_overflow(r, x, &r)) overflow();
        if (r == 0 || r == 1) break;  // 0 and 1 stay; -1 alternates but never overflows
        if (r == -1) {
          r = (y - k - 1) % 2 == 0 ? -1 : 1;
          break;
        }
      }
      return Value{r};
    }
    if (y == 0) bad(line, "division by zero");
    if (op == "/") return Value{double(x) / double(y)};
    if (x == INT64_MIN && y == -1) overflow();
    int64_t q = x / y, m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) --q, m += y;  // floor, Python's sign rule
    if (op == "//") return Value{q};
    return Value{m};
  }

  // Keyword argument `key` (or positional k) of a call-like expression.
  const Expr* arg(const Expr& e, std::size_t k, const char* key) const {
    for (const auto& [name, v] : e.kwargs)
      if (name == key) return v.get();
    return k + 1 < e.args.size() ? e.args[k + 1].get() : nullptr;
  }

  Value call(const Expr& e) {
    const Expr& callee = *e.args[0];
    if (callee.kind == Expr::Kind::Name && lookup(callee.name).undefined) {
      const std::string& f = callee.name;
      if (f == "raise_exception") {
        const Expr* m = arg(e, 0, "message");
        detail::fail(kFn, m ? to_str(eval(*m)) : std::string("raise_exception"));
      }
      if (f == "strftime_now") {
        const Expr* fmt = arg(e, 0, "format");
        if (!fmt) bad(e.line, "strftime_now needs a format");
        const std::time_t now = std::time(nullptr);
        std::tm tm{};
        localtime_r(&now, &tm);
        char buf[256];
        const std::size_t n = std::strftime(buf, sizeof buf, to_str(eval(*fmt)).c_str(), &tm);
        return Value{std::string(buf, n)};
      }
      if (f == "namespace" || f == "dict") {
        json o = json::object();
        for (const auto& [k, v] : e.kwargs) o[k] = eval(*v).j;
        return Value{o};
      }
      if (f == "range") {
        std::vector<int64_t> a;
        for (std::size_t k = 1; k < e.args.size(); ++k) {
          const Value v = eval(*e.args[k]);
          if (!is_int(v.j)) bad(e.line, "range() needs integers");
          a.push_back(v.j.get<int64_t>());
        }
        if (a.empty() || a.size() > 3) bad(e.line, "range() takes 1 to 3 arguments");
        const int64_t start = a.size() > 1 ? a[0] : 0, stop = a.size() > 1 ? a[1] : a[0];
        const int64_t step = a.size() > 2 ? a[2] : 1;
        if (step == 0) bad(e.line, "range() step cannot be zero");
        json out = json::array();
        for (int64_t i = start; step > 0 ? i < stop : i > stop;) {
          out.push_back(i);
          if (out.size() > kMaxRange)  // Jinja2's sandbox has the same limit
            bad(e.line, "range() longer than ", kMaxRange, " items");
          if (__builtin_add_overflow(i, step, &i)) break;
        }
        return Value{out};
      }
      bad(e.line, "'", f, "' is undefined (not a function of attn's template subset)");
    }
    if (callee.kind != Expr::Kind::Attr) bad(e.line, "this value cannot be called");
    const Value obj = eval(*callee.args[0]);
    const std::string& m = callee.name;
    auto str_arg = [&](std::size_t k) -> std::optional<std::string> {
      if (k + 1 >= e.args.size()) return std::nullopt;
      const Value v = eval(*e.args[k + 1]);
      if (v.j.is_null()) return std::nullopt;
      return to_str(v);
    };
    if (obj.j.is_string() && !obj.undefined) {
      const std::string s = obj.j.get<std::string>();
      if (m == "strip" || m == "lstrip" || m == "rstrip") {
        const auto chars = str_arg(0);
        return Value{strip(s, m != "rstrip", m != "lstrip", chars ? &*chars : nullptr)};
      }
      if (m == "startswith" || m == "endswith") {
        const auto p = str_arg(0);
        if (!p) bad(e.line, m, "() needs an argument");
        return Value{m == "startswith" ? s.starts_with(*p) : s.ends_with(*p)};
      }
      if (m == "upper" || m == "lower") return Value{change_case(s, m == "upper")};
      if (m == "title") return Value{title(s)};
      if (m == "replace") {
        const auto a = str_arg(0), b = str_arg(1);
        if (!a || !b) bad(e.line, "replace() needs two strings");
        return Value{replace_all(s, *a, *b)};
      }
      if (m == "split") {
        const auto sep = str_arg(0);
        json out = json::array();
        if (!sep) {
          std::size_t i = 0;
          while (i < s.size()) {
            while (i < s.size() && is_space(s[i])) ++i;
            std::size_t j = i;
            while (j < s.size() && !is_space(s[j])) ++j;
            if (j > i) out.push_back(s.substr(i, j - i));
            i = j;
          }
        } else {
          if (sep->empty()) bad(e.line, "split() with an empty separator");
          std::size_t i = 0;
          while (true) {
            const std::size_t j = s.find(*sep, i);
            out.push_back(s.substr(i, j == std::string::npos ? std::string::npos : j - i));
            if (j == std::string::npos) break;
            i = j + sep->size();
          }
        }
        return Value{out};
      }
    }
    if (obj.j.is_object() && !obj.undefined) {
      if (m == "items" || m == "keys" || m == "values") {
        json out = json::array();
        for (auto it = obj.j.begin(); it != obj.j.end(); ++it)
          out.push_back(m == "items"  ? json::array({it.key(), it.value()})
                        : m == "keys" ? json(it.key())
                                      : it.value());
        return Value{out};
      }
      if (m == "get") {
        const auto k = str_arg(0);
        if (!k) bad(e.line, "get() needs a key");
        auto f = obj.j.find(*k);
        if (f != obj.j.end()) return Value{*f};
        return e.args.size() > 2 ? eval(*e.args[2]) : Value{nullptr};
      }
    }
    bad(e.line, "no method '", m, "' on ",
        obj.undefined ? std::string("an undefined value") : repr(obj.j));
  }

  static std::string title(const std::string& s) {
    std::string o = s;
    bool start = true;
    for (char& c : o) {
      const bool alpha = std::isalpha(static_cast<unsigned char>(c));
      if (alpha)
        c = char(start ? std::toupper(static_cast<unsigned char>(c))
                       : std::tolower(static_cast<unsigned char>(c)));
      start = !alpha;
    }
    return o;
  }

  static std::string replace_all(const std::string& s, const std::string& a, const std::string& b) {
    if (a.empty()) return s;
    std::string out;
    std::size_t i = 0;
    for (std::size_t j; (j = s.find(a, i)) != std::string::npos; i = j + a.size())
      out += s.substr(i, j - i) + b;
    return out + s.substr(i);
  }

  bool test(const std::string& name, const Value& v, const Expr& e) {
    if (name == "defined") return !v.undefined;
    if (name == "undefined") return v.undefined;
    if (v.undefined && name != "none") return false;
    const json& j = v.j;
    if (name == "none") return !v.undefined && j.is_null();
    if (name == "string") return j.is_string();
    if (name == "number") return is_number(j);
    if (name == "integer") return is_int(j);
    if (name == "float") return j.is_number_float();
    if (name == "boolean") return j.is_boolean();
    if (name == "true") return j.is_boolean() && j.get<bool>();
    if (name == "false") return j.is_boolean() && !j.get<bool>();
    if (name == "mapping") return j.is_object();
    if (name == "iterable") return j.is_array() || j.is_object() || j.is_string();
    if (name == "sequence") return j.is_array() || j.is_string() || j.is_object();
    if (name == "odd" || name == "even") {
      if (!is_int(j)) bad(e.line, name, " needs an integer");
      return (j.get<int64_t>() % 2 != 0) == (name == "odd");
    }
    if (name == "equalto" || name == "eq" || name == "sameas" || name == "divisibleby") {
      const Expr* a = arg(e, 0, "value");
      if (!a) bad(e.line, "'", name, "' needs an argument");
      const Value w = eval(*a);
      if (name == "divisibleby") {
        if (!is_int(j) || !is_int(w.j) || w.j.get<int64_t>() == 0)
          bad(e.line, "divisibleby needs integers");
        return j.get<int64_t>() % w.j.get<int64_t>() == 0;
      }
      return equal(v, w);
    }
    bad(e.line, "the test '", name, "' is not supported");
  }

  Value filter(const Expr& e) {
    const std::string& f = e.name;
    const Value v = eval(*e.args[0]);
    if (f == "default" || f == "d") {
      const Expr* d = arg(e, 0, "default_value");
      const Expr* b = arg(e, 1, "boolean");
      const bool by_truth = b && truthy(eval(*b));
      if (v.undefined || (by_truth && !truthy(v))) return d ? eval(*d) : Value{""};
      return v;
    }
    if (f == "length" || f == "count") {
      if (v.undefined) return Value{0};
      if (v.j.is_string()) return Value{int64_t(char_starts(v.j.get<std::string>()).size())};
      if (v.j.is_array() || v.j.is_object()) return Value{int64_t(v.j.size())};
      bad(e.line, "length of ", repr(v.j));
    }
    if (f == "safe" || f == "list") {
      if (f == "list" && v.j.is_object()) {
        json out = json::array();
        for (auto it = v.j.begin(); it != v.j.end(); ++it) out.push_back(it.key());
        return Value{out};
      }
      return v;
    }
    if (f == "tojson") {
      const Expr* ind = arg(e, 0, "indent");
      int indent = -1;
      if (ind) {
        const Value iv = eval(*ind);
        if (!iv.j.is_null()) {
          if (!is_int(iv.j) || iv.j.get<int64_t>() < 0 || iv.j.get<int64_t>() > 64)
            bad(e.line, "tojson's indent must be an integer in [0, 64]");
          indent = int(iv.j.get<int64_t>());
        }
      }
      std::string out;
      dumps(v.undefined ? json() : v.j, indent, 0, out);
      return Value{out};
    }
    if (f == "items") {
      if (!v.j.is_object()) bad(e.line, "items of ", repr(v.j));
      json out = json::array();
      for (auto it = v.j.begin(); it != v.j.end(); ++it) out.push_back({it.key(), it.value()});
      return Value{out};
    }
    if (f == "first" || f == "last") {
      if (v.j.is_array()) {
        if (v.j.empty()) return Value::undef();
        return Value{f == "first" ? v.j.front() : v.j.back()};
      }
      if (v.j.is_string()) {
        const std::string s = v.j.get<std::string>();
        if (s.empty()) return Value::undef();
        const auto st = char_starts(s);
        return Value{f == "first" ? s.substr(0, st.size() > 1 ? st[1] : s.size())
                                  : s.substr(st.back())};
      }
      bad(e.line, f, " of ", v.undefined ? std::string("an undefined value") : repr(v.j));
    }
    if (f == "join") {
      const Expr* sep = arg(e, 0, "d");
      const std::string d = sep ? to_str(eval(*sep)) : "";
      if (!v.j.is_array()) bad(e.line, "join of ", repr(v.j));
      std::string out;
      for (std::size_t k = 0; k < v.j.size(); ++k) out += (k ? d : "") + to_str(Value{v.j[k]});
      return Value{out};
    }
    if (f == "selectattr" || f == "rejectattr" || f == "map") {
      if (!v.j.is_array()) bad(e.line, f, " of ", repr(v.j));
      if (f == "map") {
        const Expr* at = nullptr;
        for (const auto& [k, x] : e.kwargs)
          if (k == "attribute") at = x.get();
        if (!at) bad(e.line, "map supports map(attribute=...) only");
        const std::string key = to_str(eval(*at));
        json out = json::array();
        for (const json& x : v.j) {
          const Value item = x.is_object() && x.contains(key) ? Value{x[key]} : Value::undef();
          out.push_back(item.j);
        }
        return Value{out};
      }
      if (e.args.size() < 2) bad(e.line, f, " needs an attribute");
      const std::string key = to_str(eval(*e.args[1]));
      const std::string tname = e.args.size() > 2 ? to_str(eval(*e.args[2])) : "";
      json out = json::array();
      for (const json& x : v.j) {
        const Value item = x.is_object() && x.contains(key) ? Value{x[key]} : Value::undef();
        bool ok;
        if (tname.empty()) {
          ok = truthy(item);
        } else {
          ok = test_with(tname, item, e, 3);  // the test's argument follows its name
        }
        if (ok == (f == "selectattr")) out.push_back(x);
      }
      return Value{out};
    }
    if (v.undefined) {
      if (f == "trim" || f == "upper" || f == "lower" || f == "string" || f == "title" ||
          f == "capitalize")
        return Value{""};
      bad(e.line, "the filter '", f, "' on an undefined value");
    }
    if (f == "string") return Value{to_str(v)};
    if (f == "int") {
      if (is_int(v.j)) return v;
      if (is_number(v.j)) {
        const double x = std::trunc(num(v.j));
        if (!(std::abs(x) < 9.2e18)) bad(e.line, "int of ", repr(v.j), " leaves int64");
        return Value{int64_t(x)};
      }
      if (v.j.is_string()) {
        try {
          return Value{int64_t(std::stoll(v.j.get<std::string>()))};
        } catch (const std::exception&) {
          return Value{0};
        }
      }
      return Value{0};
    }
    if (f == "float") {
      if (is_number(v.j)) return Value{num(v.j)};
      return Value{0.0};
    }
    if (f == "abs") {
      if (is_int(v.j)) {
        const int64_t x = v.j.get<int64_t>();
        if (x == INT64_MIN) bad(e.line, "integer overflow in abs(", x, ")");
        return Value{x < 0 ? -x : x};
      }
      if (is_number(v.j)) return Value{std::abs(num(v.j))};
      bad(e.line, "abs of ", repr(v.j));
    }
    if (!v.j.is_string()) bad(e.line, "the filter '", f, "' needs a string, got ", repr(v.j));
    const std::string s = v.j.get<std::string>();
    if (f == "trim") {
      const Expr* chars = arg(e, 0, "chars");
      if (chars) {
        const std::string c = to_str(eval(*chars));
        return Value{strip(s, true, true, &c)};
      }
      return Value{strip(s, true, true)};
    }
    if (f == "upper" || f == "lower") return Value{change_case(s, f == "upper")};
    if (f == "title") return Value{title(s)};
    if (f == "capitalize") {
      std::string o = change_case(s, false);
      if (!o.empty()) o[0] = char(std::toupper(static_cast<unsigned char>(o[0])));
      return Value{o};
    }
    if (f == "replace") {
      const Expr* a = arg(e, 0, "old");
      const Expr* b = arg(e, 1, "new");
      if (!a || !b) bad(e.line, "replace needs two arguments");
      return Value{replace_all(s, to_str(eval(*a)), to_str(eval(*b)))};
    }
    bad(e.line, "the filter '", f, "' is not supported");
  }

  // A test named `name` on v, its argument (if any) being e.args[first_arg].
  bool test_with(const std::string& name, const Value& v, const Expr& e, std::size_t first_arg) {
    Expr t;
    t.kind = Expr::Kind::Test;
    t.line = e.line;
    t.args.push_back(nullptr);  // the value, given separately
    if (e.args.size() > first_arg) {
      // Borrow the argument without taking it: evaluate it now as a literal.
      auto lit = std::make_unique<Expr>();
      lit->kind = Expr::Kind::Literal;
      lit->line = e.line;
      lit->value = eval(*e.args[first_arg]).j;
      t.args.push_back(std::move(lit));
    }
    return test(name, v, t);
  }

  Value eval(const Expr& e) {
    switch (e.kind) {
      case Expr::Kind::Literal: return Value{e.value};
      case Expr::Kind::Name: return lookup(e.name);
      case Expr::Kind::List: {
        json out = json::array();
        for (const auto& x : e.args) out.push_back(eval(*x).j);
        return Value{out};
      }
      case Expr::Kind::Dict: {
        json out = json::object();
        for (std::size_t k = 0; k + 1 < e.args.size(); k += 2) {
          const Value key = eval(*e.args[k]);
          if (!key.j.is_string()) bad(e.line, "dict keys must be strings");
          out[key.j.get<std::string>()] = eval(*e.args[k + 1]).j;
        }
        return Value{out};
      }
      case Expr::Kind::Attr: {
        const Value obj = eval(*e.args[0]);
        return get_item(obj, Value{e.name}, e.line, "the object of ." + e.name);
      }
      case Expr::Kind::Item: {
        const Value obj = eval(*e.args[0]);
        return get_item(obj, eval(*e.args[1]), e.line, "a subscripted value");
      }
      case Expr::Kind::Slice: return slice(eval(*e.args[0]), e);
      case Expr::Kind::Call: return call(e);
      case Expr::Kind::Filter: return filter(e);
      case Expr::Kind::Test: {
        const Value v = eval(*e.args[0]);
        return Value{test(e.name, v, e) != e.negated};
      }
      case Expr::Kind::Unary: {
        const Value v = eval(*e.args[0]);
        if (e.name == "not") return Value{!truthy(v)};
        if (!is_number(v.j)) bad(e.line, "unary ", e.name, " on ", repr(v.j));
        if (e.name == "+") return v;
        if (is_int(v.j)) {
          const int64_t x = v.j.get<int64_t>();
          if (x == INT64_MIN) bad(e.line, "integer overflow in -", x);
          return Value{-x};
        }
        return Value{-num(v.j)};
      }
      case Expr::Kind::Binary: return binary(e);
      case Expr::Kind::Cond: {
        if (truthy(eval(*e.args[1]))) return eval(*e.args[0]);
        return e.args[2] ? eval(*e.args[2]) : Value::undef();
      }
    }
    return Value::undef();
  }

  const std::string& name_;
  std::vector<json> scopes_;
  uint64_t steps_ = 0;
};

}  // namespace

std::string render(const std::vector<Node>& nodes, const json& context, const std::string& name) {
  Renderer r(context, name);
  r.exec(nodes);
  return std::move(r.out);
}

}  // namespace attn::data::jinja

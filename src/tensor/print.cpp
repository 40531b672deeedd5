// Tensor repr, following PyTorch 1.13's torch/_tensor_str.py rule for rule:
//   * one formatter for the whole tensor (or for its summarized part), which picks integer mode
//     ("1.", "-inf"), fixed mode ("0.1234") or scientific mode ("1.0000e-05") and a common width;
//   * 1-D rows wrapped at linewidth, higher dimensions joined by "," plus dim-1 newlines;
//   * summarization with "..." once numel exceeds threshold, keeping edgeitems at each end;
//   * suffixes ("size=...", "dtype=...", "requires_grad=True") wrapped past linewidth.
// Values are float32, but torch formats them as Python floats, i.e. as doubles; snprintf on the
// double gives the same correctly rounded digits as Python's format().
#include <attn/half.h>
#include <attn/print.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

namespace attn {

namespace {

constexpr const char* kPrefix = "tensor(";
constexpr int64_t kIndent = 7;  // len("tensor(")

// Python's len() of a UTF-8 string: count code points, not bytes.
int64_t py_len(const std::string& s) {
  int64_t n = 0;
  for (unsigned char c : s) {
    if ((c & 0xC0) != 0x80) ++n;
  }
  return n;
}

// Python's math.floor(a / b) for b > 0, without going through floating point.
int64_t floor_div(int64_t a, int64_t b) {
  int64_t q = a / b;
  if (a % b != 0 && a < 0) --q;
  return q;
}

// Python prints nan without a sign and infinities as "inf" / "-inf" in every float format.
std::string nonfinite_str(double v) {
  if (std::isnan(v)) return "nan";
  return v < 0 ? "-inf" : "inf";
}

std::string printf_double(const char* fmt, int precision, double v) {
  int n = std::snprintf(nullptr, 0, fmt, precision, v);
  if (n < 0) throw Error("[format_tensor] cannot format a float");
  std::string out(static_cast<std::size_t>(n) + 1, '\0');
  std::snprintf(out.data(), out.size(), fmt, precision, v);
  out.resize(static_cast<std::size_t>(n));
  return out;
}

// '{:.<precision>f}'.format(v)
std::string fixed_str(double v, int precision) {
  if (!std::isfinite(v)) return nonfinite_str(v);
  return printf_double("%.*f", precision, v);
}

// '{:.<precision>e}'.format(v)
std::string sci_str(double v, int precision) {
  if (!std::isfinite(v)) return nonfinite_str(v);
  return printf_double("%.*e", precision, v);
}

// '{:.0f}'.format(v)
std::string round_str(double v) { return fixed_str(v, 0); }

std::string pad_left(std::string s, int64_t width) {
  int64_t len = py_len(s);
  if (len < width) s.insert(0, static_cast<std::size_t>(width - len), ' ');
  return s;
}

// Read access to the flat, row-major data.
struct Elements {
  Dtype dtype;
  const void* data;

  double as_double(int64_t i) const { return as_float(i); }
  // bfloat16 and float16 are formatted as their float32 values (torch 1.13's _tensor_str calls
  // .float() on them first).
  float as_float(int64_t i) const {
    if (dtype == Dtype::BFloat16) return float(static_cast<const BFloat16*>(data)[i]);
    if (dtype == Dtype::Float16) return float(static_cast<const Half*>(data)[i]);
    return static_cast<const float*>(data)[i];
  }
  // str(value) for the integer and bool dtypes.
  std::string as_text(int64_t i) const {
    if (dtype == Dtype::Int64) return std::to_string(static_cast<const int64_t*>(data)[i]);
    return static_cast<const uint8_t*>(data)[i] != 0 ? "True" : "False";
  }
};

// torch's _Formatter: decides the mode and the common width from the values to be shown.
class Formatter {
 public:
  Formatter(const Elements& elems, const std::vector<int64_t>& indices, const PrintOptions& opts)
      : elems_(elems), precision_(opts.precision) {
    floating_ = is_floating_point(elems.dtype);
    if (!floating_) {
      for (int64_t i : indices) max_width_ = std::max(max_width_, py_len(elems.as_text(i)));
      return;
    }
    std::vector<float> vals;  // the nonzero finite values
    for (int64_t i : indices) {
      float v = elems.as_float(i);
      if (std::isfinite(v) && v != 0.0f) vals.push_back(v);
    }
    // No nonzero finite value: integer mode, width 1, and the sci_mode option is not consulted.
    if (vals.empty()) return;

    double lo = std::numeric_limits<double>::infinity();
    double hi = 0.0;
    for (float v : vals) {
      double a = std::fabs(static_cast<double>(v));
      lo = std::min(lo, a);
      hi = std::max(hi, a);
    }
    for (float v : vals) {
      if (v != std::ceil(v)) {  // the test is done in float32, like torch.ceil on the tensor
        int_mode_ = false;
        break;
      }
    }
    bool wide_range = hi / lo > 1000.0 || hi > 1.0e8;
    if (int_mode_) {
      if (wide_range) {
        sci_mode_ = true;
        for (float v : vals) max_width_ = std::max(max_width_, py_len(sci_str(v, precision_)));
      } else {
        for (float v : vals) max_width_ = std::max(max_width_, py_len(round_str(v)) + 1);
      }
    } else {
      if (wide_range || lo < 1.0e-4) {
        sci_mode_ = true;
        for (float v : vals) max_width_ = std::max(max_width_, py_len(sci_str(v, precision_)));
      } else {
        for (float v : vals) max_width_ = std::max(max_width_, py_len(fixed_str(v, precision_)));
      }
    }
    // The override changes the mode but keeps the width measured in the automatic mode.
    if (opts.sci_mode.has_value()) sci_mode_ = *opts.sci_mode;
  }

  int64_t width() const { return max_width_; }

  std::string format(int64_t i) const {
    std::string ret;
    if (floating_) {
      double v = elems_.as_double(i);
      if (sci_mode_) {
        ret = pad_left(sci_str(v, precision_), max_width_);
      } else if (int_mode_) {
        ret = round_str(v);
        if (std::isfinite(v)) ret += ".";
      } else {
        ret = fixed_str(v, precision_);
      }
    } else {
      ret = elems_.as_text(i);
    }
    return pad_left(std::move(ret), max_width_);
  }

 private:
  const Elements& elems_;
  int precision_;
  bool floating_ = false;
  bool int_mode_ = true;
  bool sci_mode_ = false;
  int64_t max_width_ = 1;
};

// Walks the tensor the way _tensor_str_with_formatter and get_summarized_data do.
class Printer {
 public:
  Printer(const Shape& shape, const PrintOptions& opts, bool summarize)
      : shape_(shape), opts_(opts), summarize_(summarize) {
    strides_.assign(shape.size(), 1);
    for (int64_t d = static_cast<int64_t>(shape.size()) - 2; d >= 0; --d) {
      strides_[d] = strides_[d + 1] * shape[d + 1];
    }
  }

  // Flat indices of the elements get_summarized_data keeps (all of them without summarizing).
  void gather(std::size_t d, int64_t offset, std::vector<int64_t>& out) const {
    if (d == shape_.size()) {
      out.push_back(offset);
      return;
    }
    for (int64_t i : kept(d)) gather(d + 1, offset + i * strides_[d], out);
  }

  std::string str(std::size_t d, int64_t offset, int64_t indent, const Formatter& fmt) const {
    if (shape_.empty()) return fmt.format(offset);  // _scalar_str
    if (d + 1 == shape_.size()) return vector_str(d, offset, indent, fmt);
    std::vector<std::string> slices;
    int64_t n = shape_[d];
    if (cut(n)) {
      int64_t e = opts_.edgeitems;
      for (int64_t i = 0; i < e; ++i) {
        slices.push_back(str(d + 1, offset + i * strides_[d], indent + 1, fmt));
      }
      slices.push_back("...");
      for (int64_t i = n - e; i < n; ++i) {
        slices.push_back(str(d + 1, offset + i * strides_[d], indent + 1, fmt));
      }
    } else {
      for (int64_t i = 0; i < n; ++i) {
        slices.push_back(str(d + 1, offset + i * strides_[d], indent + 1, fmt));
      }
    }
    int64_t dim = static_cast<int64_t>(shape_.size() - d);
    std::string sep = "," + std::string(static_cast<std::size_t>(dim - 1), '\n') +
                      std::string(static_cast<std::size_t>(indent + 1), ' ');
    std::string out = "[";
    for (std::size_t i = 0; i < slices.size(); ++i) {
      if (i > 0) out += sep;
      out += slices[i];
    }
    return out + "]";
  }

 private:
  // Whether dimension d is shortened to its edge items (size > 2 * edgeitems, overflow-safe).
  bool cut(int64_t n) const { return summarize_ && n - opts_.edgeitems > opts_.edgeitems; }

  // Indices along dimension d that survive summarization. For the last dimension torch slices
  // self[-edgeitems:], which for edgeitems == 0 is the whole row; higher dimensions would stack
  // an empty list, which torch rejects.
  std::vector<int64_t> kept(std::size_t d) const {
    int64_t n = shape_[d];
    std::vector<int64_t> idx;
    if (!cut(n)) {
      for (int64_t i = 0; i < n; ++i) idx.push_back(i);
      return idx;
    }
    int64_t e = opts_.edgeitems;
    if (d + 1 < shape_.size() && e == 0) {
      throw Error("[format_tensor] cannot summarize a tensor of " + std::to_string(shape_.size()) +
                  " dims with edgeitems=0 (torch: stack expects a non-empty TensorList)");
    }
    for (int64_t i = 0; i < e; ++i) idx.push_back(i);
    for (int64_t i = tail_start(n); i < n; ++i) idx.push_back(i);
    return idx;
  }

  int64_t tail_start(int64_t n) const {
    return opts_.edgeitems > 0 ? n - opts_.edgeitems : 0;  // self[-0:] is the whole row
  }

  std::string vector_str(std::size_t d, int64_t offset, int64_t indent,
                         const Formatter& fmt) const {
    int64_t element_length = fmt.width() + 2;  // the value plus ", "
    int64_t per_line = std::max<int64_t>(1, floor_div(opts_.linewidth - indent, element_length));
    int64_t n = shape_[d];
    int64_t stride = strides_[d];
    std::vector<std::string> data;
    if (cut(n)) {
      for (int64_t i = 0; i < opts_.edgeitems; ++i) data.push_back(fmt.format(offset + i * stride));
      data.push_back(" ...");
      for (int64_t i = tail_start(n); i < n; ++i) data.push_back(fmt.format(offset + i * stride));
    } else {
      for (int64_t i = 0; i < n; ++i) data.push_back(fmt.format(offset + i * stride));
    }
    std::string line_sep = ",\n" + std::string(static_cast<std::size_t>(indent + 1), ' ');
    std::string out = "[";
    for (std::size_t i = 0; i < data.size(); ++i) {
      if (i > 0) out += (static_cast<int64_t>(i) % per_line == 0) ? line_sep : ", ";
      out += data[i];
    }
    return out + "]";
  }

  const Shape& shape_;
  std::vector<int64_t> strides_;
  const PrintOptions& opts_;
  bool summarize_;
};

// _add_suffixes (force_newline is only used for sparse tensors, so it is always false here).
std::string add_suffixes(std::string tensor_str, const std::vector<std::string>& suffixes,
                         int64_t indent, int64_t linewidth) {
  std::size_t nl = tensor_str.rfind('\n');
  // torch computes len(s) - s.rfind("\n") + 1, which is len(s) + 2 when there is no newline.
  int64_t last_line_len = nl == std::string::npos
                              ? py_len(tensor_str) + 2
                              : py_len(tensor_str) - py_len(tensor_str.substr(0, nl)) + 1;
  for (const std::string& suffix : suffixes) {
    int64_t suffix_len = py_len(suffix);
    if (last_line_len + suffix_len + 2 > linewidth) {
      tensor_str += ",\n" + std::string(static_cast<std::size_t>(indent), ' ') + suffix;
      last_line_len = indent + suffix_len;
    } else {
      tensor_str += ", " + suffix;
      last_line_len += suffix_len + 2;
    }
  }
  return tensor_str + ")";
}

void check_options(const PrintOptions& opts, const char* where) {
  if (opts.precision < 0) {
    throw Error(std::string("[") + where + "] precision must be >= 0, got " +
                std::to_string(opts.precision));
  }
  if (opts.edgeitems < 0) {
    throw Error(std::string("[") + where + "] edgeitems must be >= 0, got " +
                std::to_string(opts.edgeitems));
  }
}

}  // namespace

PrintOptions& print_options() {
  static PrintOptions options;
  return options;
}

void set_printoptions(std::optional<int> precision, std::optional<int64_t> threshold,
                      std::optional<int64_t> edgeitems, std::optional<int64_t> linewidth,
                      std::optional<std::optional<bool>> sci_mode,
                      std::optional<std::string> profile) {
  PrintOptions next = print_options();
  if (profile.has_value()) {
    // Unknown profile names are ignored, as torch does.
    if (*profile == "default") {
      next.precision = 4;
      next.threshold = 1000;
      next.edgeitems = 3;
      next.linewidth = 80;
    } else if (*profile == "short") {
      next.precision = 2;
      next.threshold = 1000;
      next.edgeitems = 2;
      next.linewidth = 80;
    } else if (*profile == "full") {
      next.precision = 4;
      next.threshold = std::numeric_limits<int64_t>::max();  // torch uses inf
      next.edgeitems = 3;
      next.linewidth = 80;
    }
  }
  if (precision) next.precision = *precision;
  if (threshold) next.threshold = *threshold;
  if (edgeitems) next.edgeitems = *edgeitems;
  if (linewidth) next.linewidth = *linewidth;
  // torch assigns sci_mode unconditionally: not passing it means "automatic" again.
  next.sci_mode = sci_mode.has_value() ? *sci_mode : std::nullopt;
  check_options(next, "set_printoptions");
  print_options() = next;
}

std::string format_tensor(const Shape& shape, Dtype dtype, const void* data,
                          const std::vector<std::string>& suffixes) {
  const PrintOptions opts = print_options();
  check_options(opts, "format_tensor");
  int64_t numel = 1;
  for (int64_t s : shape) {
    if (s < 0) throw Error("[format_tensor] negative size in shape " + shape_str(shape));
    numel *= s;
  }

  std::vector<std::string> all_suffixes;
  std::string body;
  if (numel == 0) {
    // Show the size unless it is (0,), and the dtype unless it is the default float32.
    if (shape.size() != 1) all_suffixes.push_back("size=" + shape_str(shape));
    if (dtype != Dtype::Float32) all_suffixes.push_back("dtype=" + dtype_name(dtype));
    body = "[]";
  } else {
    if (data == nullptr) throw Error("[format_tensor] data is null for shape " + shape_str(shape));
    // float32, int64 and bool are all "default" dtypes: no dtype suffix; the others have one,
    // before any other suffix.
    if (is_reduced_float(dtype)) all_suffixes.push_back("dtype=" + dtype_name(dtype));
    bool summarize = numel > opts.threshold;
    Elements elems{dtype, data};
    Printer printer(shape, opts, summarize);
    std::vector<int64_t> shown;
    printer.gather(0, 0, shown);
    Formatter fmt(elems, shown, opts);
    body = printer.str(0, 0, kIndent, fmt);
  }
  all_suffixes.insert(all_suffixes.end(), suffixes.begin(), suffixes.end());
  return add_suffixes(kPrefix + body, all_suffixes, kIndent, opts.linewidth);
}

}  // namespace attn

// `attn plot`: see plot_cmd.h.
#include "plot_cmd.h"

#include <attn/common.h>
#include <attn/io.h>
#include <attn/plot.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <fstream>
#include <iostream>
#include <system_error>

namespace attn::tools {

namespace {

constexpr std::size_t kMaxSpecBytes = 64u << 20;

int parse_size(const std::string& flag, const std::string& s) {
  int v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < 64 || v > 8192)
    throw FlagError("plot: invalid value '" + s + "' for --" + flag +
                    ": expected an integer in [64, 8192]");
  return v;
}

// At most kMaxSpecBytes from `in`; `what` names it in messages.
std::string read_limited(std::istream& in, const std::string& what) {
  std::string data;
  char buf[1 << 16];
  while (in) {
    in.read(buf, sizeof buf);
    data.append(buf, std::size_t(in.gcount()));
    if (data.size() > kMaxSpecBytes)
      throw Error("[plot] " + what + ": larger than " + std::to_string(kMaxSpecBytes >> 20) +
                  " MiB; not a figure description");
  }
  if (in.bad()) throw Error("[plot] " + what + ": read error");
  return data;
}

// "[fn] message" -> "message", so that the CLI's messages carry one prefix.
std::string without_prefix(const std::string& what) {
  if (what.size() > 2 && what[0] == '[') {
    const std::size_t close = what.find("] ");
    if (close != std::string::npos) return what.substr(close + 2);
  }
  return what;
}

}  // namespace

PlotOptions parse_plot_args(std::span<const std::string> args) {
  PlotOptions o;
  bool have_spec = false, have_out = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.size() > 2 && arg.compare(0, 2, "--") == 0) {
      std::string name = arg.substr(2), value;
      const std::size_t eq = name.find('=');
      const bool inline_value = eq != std::string::npos;
      if (inline_value) {
        value = name.substr(eq + 1);
        name = name.substr(0, eq);
      }
      if (name != "out" && name != "width" && name != "height")
        throw FlagError("plot: unknown option '--" + name + "'");
      if (!inline_value) {
        if (i + 1 >= args.size()) throw FlagError("plot: --" + name + " needs a value");
        value = args[++i];
      }
      if (name == "out") {
        if (have_out) throw FlagError("plot: --out given twice");
        if (value.empty()) throw FlagError("plot: --out needs a file name");
        o.out = value;
        have_out = true;
      } else {
        std::optional<int>& dst = name == "width" ? o.width : o.height;
        if (dst) throw FlagError("plot: --" + name + " given twice");
        dst = parse_size(name, value);
      }
      continue;
    }
    if (arg.size() > 1 && arg[0] == '-') throw FlagError("plot: unknown option '" + arg + "'");
    if (arg.empty()) throw FlagError("plot: empty SPEC file name");
    if (have_spec)
      throw FlagError("plot: expected one SPEC, got '" + o.spec + "' and '" + arg + "'");
    o.spec = arg;
    have_spec = true;
  }
  if (!have_spec) throw FlagError("plot: SPEC.json is required (or - for standard input)");
  if (!have_out) throw FlagError("plot: --out FILE.png is required");
  try {
    (void)plot::format_from_path(o.out, "plot");
  } catch (const Error& e) {
    throw FlagError("plot: --out " + without_prefix(e.what()));
  }
  return o;
}

int run_plot(const PlotOptions& o, std::istream& in, std::ostream& out) {
  std::string text;
  const std::string what = o.spec == "-" ? std::string("<stdin>") : "'" + o.spec + "'";
  if (o.spec == "-") {
    text = read_limited(in, what);
  } else {
    std::ifstream f(o.spec, std::ios::binary);
    if (!f) throw Error("[plot] cannot open " + what + ": " + std::strerror(errno));
    text = read_limited(f, what);
  }
  plot::Figure fig;
  std::string bytes;
  try {
    fig = plot::figure_from_json(text);
    if (o.width) fig.width = *o.width;
    if (o.height) fig.height = *o.height;
    bytes = plot::encode(fig, plot::format_from_path(o.out, "plot"));
  } catch (const Error& e) {
    throw Error("[plot] " + what + ": " + without_prefix(e.what()));
  }
  io::write_file_atomic(o.out, bytes);  // its errors name the path
  std::size_t series = 0;
  for (const plot::LineChart& c : fig.charts) series += c.series.size();
  out << "wrote " << o.out << ": " << fig.width << " x " << fig.height << ", " << fig.charts.size()
      << (fig.charts.size() == 1 ? " chart, " : " charts, ") << series << " series\n";
  return 0;
}

int plot_command(std::span<const std::string> args, std::ostream& out, std::ostream& err) {
  const PlotOptions o = parse_plot_args(args);
  (void)err;
  return run_plot(o, std::cin, out);
}

}  // namespace attn::tools

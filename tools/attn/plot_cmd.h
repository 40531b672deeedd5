// `attn plot`: line charts from a JSON description (attn::plot::figure_from_json, whose format
// include/attn/plot.h documents), drawn by attn::plot, the code that draws `attn train`'s loss
// curve, so that the benchmark plot (bench/compare.py) and the loss curve share one renderer.
//
//   attn plot SPEC.json --out FILE.png|.svg|.pdf [--width W] [--height H]
//   attn plot - --out FILE.png < SPEC.json
//
// Argument parsing (parse_plot_args) is separate from running (run_plot) so that each can be
// tested, and fuzzed, on its own.
#pragma once

#include <istream>
#include <optional>
#include <ostream>
#include <span>
#include <string>

#include "train.h"  // FlagError, run_command

namespace attn::tools {

struct PlotOptions {
  std::string spec;                  // the JSON file; "-" reads standard input
  std::string out;                   // the PNG, SVG or PDF to write (atomically)
  std::optional<int> width, height;  // override the spec's size (64..8192)
};

// Parses the arguments after "plot". Throws FlagError for a missing or repeated SPEC or --out,
// an --out whose extension is not .png, .svg or .pdf, an unknown option, a flag without its
// value, or a size that is not an integer in 64..8192. Pure: it touches no file.
PlotOptions parse_plot_args(std::span<const std::string> args);

// Reads the spec (from `in` when it is "-"), draws it and writes the file atomically: a spec that
// cannot be read or parsed, or a figure that cannot be drawn, throws attn::Error "[plot] ..."
// and leaves any existing output file as it was. Prints one line naming the file written.
int run_plot(const PlotOptions& options, std::istream& in, std::ostream& out);

// The handler: parse_plot_args, then run_plot with standard input.
int plot_command(std::span<const std::string> args, std::ostream& out, std::ostream& err);

inline constexpr const char* kPlotUsage = "SPEC.json --out FILE.png [options]";
inline constexpr const char* kPlotSummary =
    "draw line charts described in a JSON file as a PNG, SVG or PDF";
inline constexpr const char* kPlotHelp =
    "  Draws the figure a JSON file describes: one or more line charts side by side (linear or\n"
    "  log axes, dashed lines, marker shapes, labelled reference lines), one shared legend, a\n"
    "  title and a footer. The format is documented in include/attn/plot.h\n"
    "  (attn::plot::figure_from_json); bench/compare.py draws the benchmark plot with it.\n"
    "  Every flag takes `--flag VALUE` or `--flag=VALUE`.\n"
    "\n"
    "    SPEC.json              the figure; `-` reads it from standard input\n"
    "    --out FILE.png         the image to write, atomically (required); its extension picks\n"
    "                           the format: .png, .svg or .pdf\n"
    "    --width W              image width in pixels, 64..8192 (default: the spec's, or 800)\n"
    "    --height H             image height in pixels, 64..8192 (default: the spec's, or 500)\n"
    "\n"
    "  Minimal spec:\n"
    "    {\"charts\": [{\"title\": \"loss\", \"series\": [{\"name\": \"train\",\n"
    "                  \"x\": [0, 100, 200], \"y\": [4.2, 2.9, 2.5]}]}]}\n";

}  // namespace attn::tools

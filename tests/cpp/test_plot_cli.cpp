// `attn plot`: argument parsing (parse_plot_args), running (run_plot, plot_command) and the exit
// codes through cli_main. The PNGs written are decoded and checked by content against the layout
// attn::plot computes for the same spec; SVG and PDF by their structure.
//
// cli_main is defined by tools/attn/main.cpp, which test_walkthrough.cpp compiles into this test
// binary (with ATTN_CLI_NO_MAIN); test_util.h declares it.
#include <attn/io.h>
#include <attn/plot.h>
#include <gtest/gtest.h>

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "../../tools/attn/plot_cmd.h"
#include "plot_util.h"
#include "test_util.h"

namespace attn::tools {
namespace {

using attn::testing::error_of;
using attn::testing::TempDir;
using namespace attn::plot::pixels;

constexpr plot::Rgb kRed{255, 0, 0};
constexpr plot::Rgb kBlue{0, 0, 255};

// Two panels; the first has a red line through (1, 1) .. (4, 4), the second a blue one.
const char* kSpec = R"({
  "width": 900, "height": 400, "footer": "test",
  "charts": [
    {"title": "left", "series": [{"name": "red", "x": [1, 2, 3, 4], "y": [1, 2, 3, 4],
                                  "color": "#ff0000", "marker": "square"}]},
    {"title": "right", "log_x": true,
     "series": [{"name": "blue", "x": [10, 100, 1000], "y": [5, 1, 5], "color": [0, 0, 255],
                 "dash": [6, 3]}],
     "reference_lines": [{"y": 3, "label": "three"}]}
  ]
})";

PlotOptions parse(std::vector<std::string> args) { return parse_plot_args(args); }

std::string flag_error(std::vector<std::string> args) {
  try {
    parse_plot_args(args);
  } catch (const FlagError& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected FlagError";
  return "";
}

TEST(PlotCli, ParsesArguments) {
  PlotOptions o = parse({"spec.json", "--out", "x.png"});
  EXPECT_EQ(o.spec, "spec.json");
  EXPECT_EQ(o.out, "x.png");
  EXPECT_FALSE(o.width.has_value());
  EXPECT_FALSE(o.height.has_value());
  o = parse({"--out=dir/y.png", "--width=640", "--height", "480", "-"});
  EXPECT_EQ(o.spec, "-");
  EXPECT_EQ(o.out, "dir/y.png");
  EXPECT_EQ(o.width, 640);
  EXPECT_EQ(o.height, 480);
  o = parse({"a.json", "--width", "64", "--height=8192", "--out", "-weird.png"});
  EXPECT_EQ(o.width, 64);
  EXPECT_EQ(o.height, 8192);
  EXPECT_EQ(o.out, "-weird.png");  // a flag's value may start with '-'
}

TEST(PlotCli, BadFlagsAreFlagErrors) {
  EXPECT_EQ(flag_error({}), "plot: SPEC.json is required (or - for standard input)");
  EXPECT_EQ(flag_error({"spec.json"}), "plot: --out FILE.png is required");
  EXPECT_EQ(flag_error({"--out", "x.png"}),
            "plot: SPEC.json is required (or - for standard input)");
  EXPECT_EQ(flag_error({"a.json", "b.json", "--out", "x.png"}),
            "plot: expected one SPEC, got 'a.json' and 'b.json'");
  EXPECT_EQ(flag_error({"a.json", "--out", "x.png", "--wdth=3"}), "plot: unknown option '--wdth'");
  EXPECT_EQ(flag_error({"a.json", "--out", "x.png", "-w"}), "plot: unknown option '-w'");
  EXPECT_EQ(flag_error({"a.json", "--out", "x.png", "--"}), "plot: unknown option '--'");
  EXPECT_EQ(flag_error({"a.json", "--out"}), "plot: --out needs a value");
  EXPECT_EQ(flag_error({"a.json", "--out="}), "plot: --out needs a file name");
  EXPECT_EQ(flag_error({"a.json", "--out", "x", "--out", "y"}), "plot: --out given twice");
  EXPECT_EQ(flag_error({"a.json", "--out", "x", "--width", "100", "--width=200"}),
            "plot: --width given twice");
  EXPECT_EQ(flag_error({"", "--out", "x"}), "plot: empty SPEC file name");
  for (const std::string bad : {"63", "8193", "abc", "100x", "", "-100", "1e3", " 100"})
    EXPECT_EQ(flag_error({"a.json", "--out", "x.png", "--height=" + bad}),
              "plot: invalid value '" + bad + "' for --height: expected an integer in [64, 8192]")
        << bad;
  EXPECT_EQ(flag_error({"a.json", "--out", "x.png", "--width"}), "plot: --width needs a value");
  EXPECT_EQ(flag_error({"a.json", "--out", "x.jpg"}),
            "plot: --out 'x.jpg': unknown image format; the file name must end in .png, .svg or "
            ".pdf");
  EXPECT_EQ(parse({"a.json", "--out", "x.SVG"}).out, "x.SVG");
  EXPECT_EQ(parse({"a.json", "--out", "x.pdf"}).out, "x.pdf");
}

TEST(PlotCli, WritesThePngTheSpecDescribes) {
  TempDir dir("attn_plot_cli");
  const std::string spec = dir.write("spec.json", kSpec);
  const std::string png = dir.file("out.png");
  std::ostringstream out, err;
  std::istringstream no_stdin;
  EXPECT_EQ(run_plot(parse({spec, "--out", png}), no_stdin, out), 0);
  EXPECT_EQ(out.str(), "wrote " + png + ": 900 x 400, 2 charts, 2 series\n");
  const plot::Image img = plot::decode_png(io::read_file(png));
  ASSERT_EQ(img.width, 900);
  ASSERT_EQ(img.height, 400);
  // The same layout, computed here from the same spec.
  const plot::FigureLayout L = plot::layout_figure(plot::figure_from_json(kSpec));
  ASSERT_EQ(L.charts.size(), 2u);
  const plot::ChartLayout& a = L.charts[0];
  const plot::ChartLayout& b = L.charts[1];
  EXPECT_LT(a.plot_right, b.plot_left);
  const double r = a.marker_size;  // square markers of this radius at each point
  for (double v : {1.0, 2.0, 3.0, 4.0}) {
    EXPECT_TRUE(close(at(img, a.x_to_px(v), a.y_to_px(v)), kRed, 10)) << v;
    EXPECT_TRUE(close(at(img, a.x_to_px(v) + r - 1, a.y_to_px(v) + r - 1), kRed, 10)) << v;
  }
  EXPECT_TRUE(near(img, b.x_to_px(10), b.y_to_px(5), kBlue, 1, 20));
  EXPECT_TRUE(near(img, b.x_to_px(100), b.y_to_px(1), kBlue, 4, 20));  // a dash's gap may be here
  // No red in the right panel, no blue in the left one (outside the shared legend below them).
  EXPECT_EQ(L.legend_names, (std::vector<std::string>{"red", "blue"}));
  EXPECT_EQ(count_close(img, kRed, L.panels[1].left, 0, 899, L.legend.top - 1, 100), 0);
  EXPECT_EQ(count_close(img, kBlue, 0, 0, L.panels[1].left - 1, L.legend.top - 1, 100), 0);
  // The reference line's rows in the right panel are grey where the pattern is on.
  const int row = int(std::lround(b.y_to_px(3)));
  EXPECT_TRUE(close(img.get(b.plot_left + 3, row), plot::colors::kReference, 10));
  EXPECT_TRUE(close(img.get(b.plot_left + 3, row - 1), plot::colors::kReference, 10));
  EXPECT_EQ(dir.files(), (std::vector<std::string>{"out.png", "spec.json"}));
}

TEST(PlotCli, SizeFlagsOverrideTheSpecAndStdinWorks) {
  TempDir dir("attn_plot_cli");
  const std::string png = dir.file("small.png");
  std::istringstream in(kSpec);
  std::ostringstream out;
  EXPECT_EQ(run_plot(parse({"-", "--out", png, "--width", "640", "--height=300"}), in, out), 0);
  EXPECT_EQ(out.str(), "wrote " + png + ": 640 x 300, 2 charts, 2 series\n");
  const plot::Image img = plot::decode_png(io::read_file(png));
  EXPECT_EQ(img.width, 640);
  EXPECT_EQ(img.height, 300);
  plot::Figure f = plot::figure_from_json(kSpec);
  f.width = 640;
  f.height = 300;
  EXPECT_EQ(img.rgb, plot::render(f).rgb);
}

TEST(PlotCli, SvgAndPdfByExtension) {
  TempDir dir("attn_plot_cli");
  const std::string spec = dir.write("spec.json", kSpec);
  std::ostringstream out;
  std::istringstream no_stdin;
  EXPECT_EQ(run_plot(parse({spec, "--out", dir.file("f.svg")}), no_stdin, out), 0);
  EXPECT_EQ(run_plot(parse({spec, "--out", dir.file("f.pdf"), "--width=640"}), no_stdin, out), 0);
  EXPECT_EQ(out.str(), "wrote " + dir.file("f.svg") + ": 900 x 400, 2 charts, 2 series\nwrote " +
                           dir.file("f.pdf") + ": 640 x 400, 2 charts, 2 series\n");
  const std::string svg = io::read_file(dir.file("f.svg"));
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_NE(svg.find("width=\"900px\" height=\"400px\""), std::string::npos);
  EXPECT_NE(svg.find("<title>left</title>"), std::string::npos);
  const std::string pdf = io::read_file(dir.file("f.pdf"));
  EXPECT_EQ(pdf.rfind("%PDF-", 0), 0u);
  EXPECT_NE(pdf.find("/MediaBox [ 0 0 640 400 ]"), std::string::npos);
  EXPECT_EQ(dir.files(), (std::vector<std::string>{"f.pdf", "f.svg", "spec.json"}));
}

TEST(PlotCli, BadSpecsAreErrorsAndWriteNothing) {
  TempDir dir("attn_plot_cli");
  const std::string png = dir.file("out.png");
  std::ostringstream out;
  std::istringstream no_stdin;
  // Not JSON, a defect in a series, a figure too small to draw: attn::Error naming the file and
  // the place; no output file.
  const std::string bad_json = dir.write("bad.json", "{\"charts\": [");
  std::string what = error_of([&] { run_plot(parse({bad_json, "--out", png}), no_stdin, out); });
  EXPECT_EQ(what.rfind("[plot] '" + bad_json + "': not valid JSON", 0), 0u) << what;
  const std::string bad_series =
      dir.write("series.json", R"({"charts": [{"series": [{"x": [1, 2], "y": [1, "a"]}]}]})");
  what = error_of([&] { run_plot(parse({bad_series, "--out", png}), no_stdin, out); });
  EXPECT_EQ(what, "[plot] '" + bad_series +
                      "': charts[0].series[0].y[1]: expected a number or null, got a string");
  what = error_of([&] {
    run_plot(parse({dir.write("ok.json", kSpec), "--out", png, "--width", "100"}), no_stdin, out);
  });
  EXPECT_NE(what.find("panels would be 50 x"), std::string::npos) << what;
  std::istringstream bad_stdin("[]");
  what = error_of([&] { run_plot(parse({"-", "--out", png}), bad_stdin, out); });
  EXPECT_EQ(what, "[plot] <stdin>: top level: expected an object, got an array");
  what = error_of([&] {
    run_plot(parse({dir.file("missing.json"), "--out", png}), no_stdin, out);
  });
  EXPECT_EQ(what.rfind("[plot] cannot open '" + dir.file("missing.json") + "'", 0), 0u) << what;
  EXPECT_EQ(out.str(), "");
  EXPECT_EQ(dir.files(), (std::vector<std::string>{"bad.json", "ok.json", "series.json"}));
  // An existing output file is left as it was, and no temporary file is left behind.
  const std::string old = dir.write("out.png", "previous contents");
  EXPECT_THROW(run_plot(parse({bad_series, "--out", old}), no_stdin, out), Error);
  EXPECT_EQ(io::read_file(old), "previous contents");
  EXPECT_EQ(dir.files(),
            (std::vector<std::string>{"bad.json", "ok.json", "out.png", "series.json"}));
  // An unwritable output: attn::Error from the atomic write.
  EXPECT_THROW(
      run_plot(parse({dir.file("ok.json"), "--out", dir.file("no/such/dir.png")}), no_stdin, out),
      Error);
}

TEST(PlotCli, ExitCodesThroughTheCli) {
  TempDir dir("attn_plot_cli");
  const std::string spec = dir.write("spec.json", kSpec);
  const std::string png = dir.file("cli.png");
  auto run = [](std::vector<std::string> args, std::string* err_text = nullptr) {
    std::ostringstream out, err;
    const int code = cli_main(args, out, err);
    if (err_text) *err_text = err.str();
    return code;
  };
  std::string err;
  EXPECT_EQ(run({"plot", spec, "--out", png}, &err), 0) << err;
  EXPECT_EQ(plot::decode_png(io::read_file(png)).width, 900);
  EXPECT_EQ(run({"plot", spec, "--out", png, "--bogus"}, &err), 2);
  EXPECT_NE(err.find("plot: unknown option '--bogus'"), std::string::npos) << err;
  EXPECT_EQ(run({"plot", dir.write("bad.json", "{}"), "--out", png}, &err), 1);
  EXPECT_NE(err.find("attn: error: [plot] '"), std::string::npos) << err;
  EXPECT_NE(err.find("top level: a figure needs \"charts\""), std::string::npos) << err;
  std::ostringstream help, e2;
  EXPECT_EQ(cli_main(std::vector<std::string>{"plot", "--help"}, help, e2), 0);
  EXPECT_NE(help.str().find("usage: attn plot SPEC.json --out FILE.png"), std::string::npos);
}

}  // namespace
}  // namespace attn::tools

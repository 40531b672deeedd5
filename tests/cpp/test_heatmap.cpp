// Heatmaps of attention weights: attn::plot::render_heatmap checked by content (cells of their
// value's colour, the colour bar's gradient, ink where labels go), the PNG, SVG and PDF forms,
// `attn heatmap` against weights recomputed here, and `attn walkthrough --plots`.
//
// cli_main is defined by tools/attn/main.cpp, which test_walkthrough.cpp compiles into this test
// binary (with ATTN_CLI_NO_MAIN); test_util.h declares it.
#include <attn/attn.h>
#include <attn/plot.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "../../tools/attn/heatmap.h"
#include "../../tools/attn/train.h"
#include "plot_util.h"
#include "test_util.h"

namespace attn::plot {
namespace {

using attn::testing::error_of;
using attn::testing::TempDir;
using namespace attn::plot::pixels;

// The heatmap as a PNG, read back; the same pixels as render_heatmap().
Image png_of(const Heatmap& h, int cell_px, HeatmapLayout* layout) {
  const Image img = decode_png(encode(h, Format::kPng, cell_px));
  EXPECT_EQ(img.rgb, render_heatmap(h, cell_px, layout).rgb);
  return img;
}

int count_color(const Image& img, int x0, int y0, int x1, int y1, Rgb c) {
  return count_close(img, c, x0, y0, x1, y1, 0);
}

const double kNaN = std::numeric_limits<double>::quiet_NaN();

Heatmap small_heatmap() {
  Heatmap h;
  h.title = "weights";
  h.x_label = "key";
  h.y_label = "query";
  h.row_labels = {"a", "bb", "ccc"};
  h.col_labels = {"w", "x", "y", "z"};
  h.panels.push_back(
      {"head 0", {0.0, 0.25, 0.5, 1.0, 0.1, 0.9, 1.5, -0.2, 0.33, 0.66, kNaN, 0.75}});
  h.panels.push_back({"head 1", {1.0, 0.0, 0.0, 0.0, 0.5, 0.5, 0.0, 0.0, 0.2, 0.3, 0.4, 0.1}});
  return h;
}

TEST(Heatmap, CellCentresHaveTheColourOfTheirValue) {
  const Heatmap h = small_heatmap();
  for (int cell_px : {0, 5, 13, 30}) {
    HeatmapLayout L;
    const Image img = png_of(h, cell_px, &L);
    ASSERT_EQ(img.width, L.width);
    ASSERT_EQ(img.height, L.height);
    ASSERT_EQ(L.grids.size(), 2u);
    EXPECT_EQ(L.vmin, 0.0);
    EXPECT_EQ(L.vmax, 1.0);
    for (std::size_t p = 0; p < 2; ++p)
      for (int r = 0; r < 3; ++r)
        for (int c = 0; c < 4; ++c) {
          const double v = h.panels[p].values[std::size_t(r * 4 + c)];
          // The expected colour from colormap itself: clamped to [0, 1], NaN grey.
          const Rgb want = std::isnan(v) ? Rgb{128, 128, 128} : colormap(std::clamp(v, 0.0, 1.0));
          const PixelRect cell = L.cell(p, r, c);
          EXPECT_EQ(cell.right - cell.left + 1, L.cell_px);
          EXPECT_EQ(img.get(cell.center_x(), cell.center_y()), want)
              << "cell_px " << cell_px << " panel " << p << " (" << r << ", " << c << ")";
          // The whole cell is that colour.
          const int area = L.cell_px * L.cell_px;
          EXPECT_EQ(count_color(img, cell.left, cell.top, cell.right, cell.bottom, want), area);
        }
  }
}

TEST(Heatmap, LabelsTitlesAndColourBarAreDrawn) {
  const Heatmap h = small_heatmap();
  HeatmapLayout L;
  const Image img = png_of(h, 20, &L);
  for (std::size_t p = 0; p < 2; ++p) {
    const PixelRect& g = L.grids[p];
    // Row labels: ink left of the grid within each row's band, the longest label the widest.
    for (int r = 0; r < 3; ++r) {
      const PixelRect cell = L.cell(p, r, 0);
      EXPECT_GT(count_dark(img, g.left - 40, cell.top, g.left - 2, cell.bottom), 5) << "row " << r;
    }
    auto ink_width = [&](int r) {
      const PixelRect cell = L.cell(p, r, 0);
      for (int x = g.left - 35; x < g.left - 1; ++x)
        if (count_dark(img, x, cell.top, x, cell.bottom) > 0) return g.left - x;
      return 0;
    };
    EXPECT_LT(ink_width(0), ink_width(1));
    EXPECT_LT(ink_width(1), ink_width(2));
    // Column labels: ink under the grid within each column's band, and none between them.
    for (int c = 0; c < 4; ++c) {
      const PixelRect cell = L.cell(p, 0, c);
      EXPECT_GT(count_dark(img, cell.left, g.bottom + 2, cell.right, g.bottom + 20), 5)
          << "col " << c;
      EXPECT_EQ(count_dark(img, cell.left, g.bottom + 2, cell.left + 1, g.bottom + 20), 0)
          << "col " << c;
    }
    ASSERT_FALSE(L.titles[p].empty());
    EXPECT_GT(count_dark(img, L.titles[p]), 10);
    // The grid's outline.
    EXPECT_TRUE(close(img.get(g.left - 1, g.center_y()), colors::kAxis, 10));
    EXPECT_TRUE(close(img.get(g.center_x(), g.bottom + 1), colors::kAxis, 10));
  }
  // The title above the panels, the axis names beside and under them.
  EXPECT_GT(count_dark(img, 0, 0, img.width - 1, L.titles[0].top - 2), 20);
  EXPECT_GT(count_dark(img, 0, L.grids[0].top, L.grids[0].left - 45, L.grids[0].bottom), 5);
  EXPECT_GT(
      count_dark(img, L.grids[0].left, L.grids[0].bottom + 16, L.colorbar.left - 1, img.height - 1),
      5);
  // Blank labels draw no ink beside the grid.
  Heatmap blank = h;
  blank.row_labels = {"", "", ""};
  blank.y_label.clear();
  HeatmapLayout B;
  const Image bimg = png_of(blank, 20, &B);
  EXPECT_EQ(count_dark(bimg, 0, B.grids[0].top, B.grids[0].left - 2, B.grids[0].bottom), 0);

  // The colour bar: a gradient from colormap(1) at the top to colormap(0) at the bottom, the
  // same across its width, in order of value (each row's colour is nearest the scale at its own
  // height).
  const PixelRect& bar = L.colorbar;
  ASSERT_GT(bar.bottom - bar.top, 50);
  EXPECT_GT(bar.left, L.grids[1].right);
  EXPECT_TRUE(close(img.get(bar.center_x(), bar.top), colormap(1.0), 2));
  EXPECT_TRUE(close(img.get(bar.center_x(), bar.bottom), colormap(0.0), 2));
  for (int y = bar.top; y <= bar.bottom; ++y) {
    const Rgb want = colormap(double(bar.bottom - y) / double(bar.bottom - bar.top));
    EXPECT_TRUE(close(img.get(bar.left, y), want, 2)) << y;
    EXPECT_EQ(img.get(bar.left, y), img.get(bar.right, y)) << y;
  }
  EXPECT_TRUE(close(img.get(bar.left - 1, bar.center_y()), colors::kAxis, 10));  // outline
  // Ticks 0, 0.2, ..., 1 with labels and ink right of the bar.
  ASSERT_EQ(L.tick_labels.size(), 6u);
  EXPECT_EQ(L.tick_labels.front(), "0");
  EXPECT_EQ(L.tick_labels.back(), "1");
  EXPECT_EQ(L.tick_y.front(), bar.bottom);
  EXPECT_EQ(L.tick_y.back(), bar.top);
  for (int y : L.tick_y) {
    EXPECT_TRUE(close(img.get(bar.right + 2, y), colors::kAxis, 10)) << y;
    EXPECT_GT(count_dark(img, bar.right + 6, y - 4, img.width - 1, y + 4), 5) << y;
  }
}

TEST(Heatmap, AutomaticRangeAndValueColours) {
  Heatmap h;
  h.row_labels = {"r"};
  h.col_labels = {"a", "b", "c"};
  h.panels.push_back({"", {2.0, 3.0, 4.0}});
  h.vmin.reset();
  h.vmax.reset();
  HeatmapLayout L;
  const Image img = png_of(h, 16, &L);
  EXPECT_EQ(L.vmin, 2.0);
  EXPECT_EQ(L.vmax, 4.0);
  EXPECT_TRUE(L.titles[0].right < L.titles[0].left);  // no panel title
  for (int c = 0; c < 3; ++c) {
    const PixelRect cell = L.cell(0, 0, c);
    EXPECT_EQ(img.get(cell.center_x(), cell.center_y()), colormap(c / 2.0));
  }
  // All values equal: a range around them, the cells mid-scale.
  h.panels[0].values = {5.0, 5.0, 5.0};
  L = layout_heatmap(h, 16);
  EXPECT_LT(L.vmin, 5.0);
  EXPECT_GT(L.vmax, 5.0);
  EXPECT_EQ(L.color_of(5.0), colormap(0.5));
  EXPECT_EQ(L.color_of(kNaN), (Rgb{128, 128, 128}));
}

TEST(Heatmap, InvalidInputsThrow) {
  Heatmap ok = small_heatmap();
  auto err = [](const Heatmap& h, int cell_px = 0) {
    return error_of([&] { render_heatmap(h, cell_px); });
  };
  Heatmap h = ok;
  h.panels.clear();
  EXPECT_NE(err(h).find("[plot::layout_heatmap] no panels"), std::string::npos);
  h = ok;
  h.row_labels.clear();
  EXPECT_NE(err(h).find("at least one row"), std::string::npos);
  h = ok;
  h.col_labels.push_back("extra");
  EXPECT_NE(err(h).find("panel 0 has 12 values, expected 3 x 5"), std::string::npos) << err(h);
  h = ok;
  h.panels[1].values.pop_back();
  EXPECT_NE(err(h).find("panel 1 has 11 values"), std::string::npos);
  h = ok;
  h.vmin = 1.0;
  h.vmax = 1.0;
  EXPECT_NE(err(h).find("vmin"), std::string::npos);
  h.vmin = kNaN;
  h.vmax = 1.0;
  EXPECT_NE(err(h).find("finite"), std::string::npos);
  EXPECT_NE(err(ok, 257).find("cell_px 257"), std::string::npos);
  EXPECT_NE(err(ok, -1).find("cell_px -1"), std::string::npos);
  // Too large an image.
  h = ok;
  h.row_labels.assign(600, "t");
  h.col_labels.assign(600, "t");
  for (auto& p : h.panels) p.values.assign(600 * 600, 0.5);
  EXPECT_NE(err(h, 64).find("at most 16384"), std::string::npos);
  // Cells outside the layout.
  const HeatmapLayout L = layout_heatmap(ok);
  EXPECT_THROW(L.cell(2, 0, 0), IndexError);
  EXPECT_THROW(L.cell(0, 3, 0), IndexError);
  EXPECT_THROW(L.cell(0, 0, -1), IndexError);
}

TEST(Heatmap, OddLabelsAndManyPanelsStayInside) {
  Heatmap h;
  h.title = std::string(300, 'T');
  h.row_labels = {"\xc3\xa9t\xc3\xa9", std::string(100, 'x'), "\t"};
  h.col_labels = {"", "a"};
  for (int p = 0; p < 9; ++p)
    h.panels.push_back({"head " + std::to_string(p), {0, 1, 0.5, 0.5, 1, 0}});
  for (int cell_px : {0, 1, 3, 256}) {
    HeatmapLayout L;
    const Image img = render_heatmap(h, cell_px, &L);
    EXPECT_EQ(int(img.rgb.size()), img.width * img.height * 3);
    EXPECT_EQ(img.width, L.width);
    for (const PixelRect& g : L.grids) {
      EXPECT_GE(g.left, 0);
      EXPECT_GE(g.top, 0);
      EXPECT_LT(g.right, img.width);
      EXPECT_LT(g.bottom, img.height);
    }
    EXPECT_LT(L.colorbar.right, img.width);
  }
}

TEST(Heatmap, SaveWritesAtomically) {
  TempDir dir("heatmap");
  const std::string path = dir.file("h.png");
  save(small_heatmap(), path);
  const Image img = decode_png(io::read_file(path));
  EXPECT_EQ(img.rgb, render_heatmap(small_heatmap()).rgb);
  // SVG and PDF of the same size, titled.
  HeatmapLayout L;
  render_heatmap(small_heatmap(), 0, &L);
  save(small_heatmap(), dir.file("h.svg"));
  const std::string svg = io::read_file(dir.file("h.svg"));
  EXPECT_EQ(xml_problem(svg), "");
  EXPECT_NE(svg.find("<title>weights</title>"), std::string::npos);
  EXPECT_NE(svg.find("width=\"" + std::to_string(L.width) + "px\" height=\"" +
                     std::to_string(L.height) + "px\""),
            std::string::npos);
  save(small_heatmap(), dir.file("h.pdf"));
  const std::string pdf = io::read_file(dir.file("h.pdf"));
  EXPECT_EQ(pdf.rfind("%PDF-", 0), 0u);
  EXPECT_NE(pdf.find("/MediaBox [ 0 0 " + std::to_string(L.width) + " " + std::to_string(L.height) +
                     " ]"),
            std::string::npos);
  // Failures leave nothing behind.
  EXPECT_THROW(save(small_heatmap(), dir.file("missing/h.png")), Error);
  Heatmap bad = small_heatmap();
  bad.panels.clear();
  EXPECT_THROW(save(bad, dir.file("bad.png")), Error);
  EXPECT_NE(
      error_of([&] { save(small_heatmap(), dir.file("h.bmp")); }).find("unknown image format"),
      std::string::npos);
  EXPECT_EQ(dir.files(), (std::vector<std::string>{"h.pdf", "h.png", "h.svg"}));
}

}  // namespace
}  // namespace attn::plot

namespace attn::tools {
namespace {

using attn::testing::TempDir;
using plot::colormap;
using plot::decode_png;
using plot::Rgb;

using Cli = attn::testing::CliResult;
using attn::testing::run_cli;

// The layout the CLI's picture has: same labels, axis names and panel titles. (Only the image
// width depends on the title's text, where the title is wider than the panels and colour bar.)
plot::HeatmapLayout cli_layout(const std::vector<std::string>& tokens, int panels) {
  plot::Heatmap h;
  h.title = "t";
  h.x_label = "key";
  h.y_label = "query";
  h.row_labels = h.col_labels = tokens;
  for (int p = 0; p < panels; ++p)
    h.panels.push_back(
        {"head " + std::to_string(p), std::vector<double>(tokens.size() * tokens.size(), 0.0)});
  return plot::layout_heatmap(h);
}

void expect_cells(const plot::Image& img, const plot::HeatmapLayout& L, const Tensor& weights) {
  const std::vector<float> w = weights.contiguous().to_float_vector();
  const int n = L.rows * L.cols;
  ASSERT_EQ(int(w.size()), n * int(L.grids.size()));
  for (std::size_t p = 0; p < L.grids.size(); ++p)
    for (int r = 0; r < L.rows; ++r)
      for (int c = 0; c < L.cols; ++c) {
        const plot::PixelRect cell = L.cell(p, r, c);
        const Rgb want = colormap(w[p * std::size_t(n) + std::size_t(r * L.cols + c)]);
        const Rgb got = img.get(cell.center_x(), cell.center_y());
        EXPECT_LE(std::abs(int(got.r) - int(want.r)), 1);
        EXPECT_LE(std::abs(int(got.g) - int(want.g)), 1);
        EXPECT_LE(std::abs(int(got.b) - int(want.b)), 1) << p << " " << r << " " << c;
      }
}

TEST(HeatmapCli, MultiheadOnePanelPerHead) {
  TempDir dir("heatmap_cli");
  const std::string path = dir.file("mh.png");
  Cli r =
      run_cli({"heatmap", "--mechanism", "multihead", "--heads=4", "--d-out", "8", "--out", path});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("4 panels of 6 x 6"), std::string::npos) << r.out;
  const plot::Image img = decode_png(io::read_file(path));
  const std::vector<std::string> tokens = {"Life", "is", "short", "eat", "dessert", "first"};
  const plot::HeatmapLayout L = cli_layout(tokens, 4);
  EXPECT_EQ(img.width, L.width);
  EXPECT_EQ(img.height, L.height);
  // The same weights computed here.
  manual_seed(123);
  nn::Vocabulary vocab("Life is short, eat dessert first");
  nn::Embedding embed(50000, 8);
  Tensor x = embed(vocab.encode("Life is short, eat dessert first")).detach();
  manual_seed(123);
  nn::MultiheadAttention mha(8, 4);
  Tensor w = mha.forward(x, x, x, Tensor(), true, Tensor(), false).weights;
  ASSERT_EQ(w.numel(), 4 * 36);
  expect_cells(img, L, w);
  EXPECT_EQ(dir.files(), std::vector<std::string>{"mh.png"});
}

// --ckpt: a trained GPT's every layer and head, a row of heads per layer, characters on the axes.
TEST(HeatmapCli, CheckpointEveryLayerAndHead) {
  TempDir dir("heatmap_ckpt");
  std::string text;
  for (int i = 0; i < 30; ++i) text += "the cat sat on the mat\n";
  io::write_file_atomic(dir.file("corpus.txt"), text);
  std::vector<std::string> train =
      attn::testing::tiny_train_args(dir.file("corpus.txt"), dir.file("run"), 4, 4, 1);
  *(std::find(train.begin(), train.end(), "--n-layer") + 1) = "2";
  Cli t = run_cli(train);
  ASSERT_EQ(t.code, 0) << t.err;

  const std::string path = dir.file("maps.png");
  Cli r = run_cli({"heatmap", "--ckpt", dir.file("run"), "--text", "a cat\n", "--out", path});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("4 panels (2 layers x 2 heads) of 6 x 6"), std::string::npos) << r.out;
  // The same maps computed here from the checkpoint.
  const std::string file = dir.file("run") + "/model.safetensors";
  const Checkpoint ck = read_checkpoint(file, CheckpointUse::Generate);
  nn::GPT model(ck.config);
  load_checkpoint_weights(model, ck, file, CheckpointUse::Generate);
  model.eval();
  const std::vector<int64_t> ids = ck.tokenizer.encode("a cat\n");
  Tensor idx = empty({1, 6}, Dtype::Int64);
  std::copy(ids.begin(), ids.end(), idx.data_ptr<int64_t>());
  const Tensor maps = model.attention_maps(idx);
  ASSERT_EQ(maps.shape(), (Shape{2, 1, 2, 6, 6}));
  // Causal rows: each sums to one, nothing above the diagonal.
  EXPECT_TRUE(allclose(maps.sum({-1}), ones({2, 1, 2, 6}), 1e-5, 1e-6));
  EXPECT_EQ(maps.masked_fill(tril(ones({6, 6}, Dtype::Bool)), 0.0).abs().max().item<float>(), 0.f);

  plot::Heatmap h;
  h.title = "t";
  h.x_label = "key";
  h.y_label = "query";
  h.row_labels = h.col_labels = {"a", "\u2423", "c", "a", "t", "\\n"};
  h.columns = 2;
  for (const char* p : {"layer 0 head 0", "layer 0 head 1", "layer 1 head 0", "layer 1 head 1"})
    h.panels.push_back({p, std::vector<double>(36, 0.0)});
  const plot::HeatmapLayout L = plot::layout_heatmap(h);
  const plot::Image img = decode_png(io::read_file(path));
  EXPECT_GE(img.width, L.width);  // wider when the title is wider than the panels
  EXPECT_EQ(img.height, L.height);
  expect_cells(img, L, maps);

  // Bad input: outside the vocabulary, longer than block_size, flags of the other mode.
  Cli bad = run_cli({"heatmap", "--ckpt", dir.file("run"), "--text", "Zebra", "--out", path});
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("'Z'"), std::string::npos) << bad.err;
  bad = run_cli({"heatmap", "--ckpt", dir.file("run"), "--text", "the cat sat", "--out", path});
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("11 characters; the model reads at most block_size = 8"),
            std::string::npos)
      << bad.err;
  bad =
      run_cli({"heatmap", "--ckpt", dir.file("run"), "--text", "a", "--heads", "2", "--out", path});
  EXPECT_EQ(bad.code, 2);
  bad = run_cli({"heatmap", "--ckpt", dir.file("nothing"), "--text", "a", "--out", path});
  EXPECT_EQ(bad.code, 1);
  EXPECT_NE(bad.err.find("no checkpoint"), std::string::npos) << bad.err;
}

TEST(HeatmapCli, SingleHeadMechanisms) {
  TempDir dir("heatmap_cli");
  for (const std::string m : {"self-v1", "self-v2", "causal"}) {
    const std::string path = dir.file(m + ".png");
    Cli r = run_cli({"heatmap", "--mechanism", m, "--sentence", "the kid smiles", "--out", path});
    ASSERT_EQ(r.code, 0) << m << ": " << r.err;
    EXPECT_NE(r.out.find("1 panel of 3 x 3"), std::string::npos) << r.out;
    const plot::Image img = decode_png(io::read_file(path));
    const plot::HeatmapLayout L = cli_layout({"the", "kid", "smiles"}, 1);
    EXPECT_GE(img.width, L.width);  // wider when the title is wider than the panel
    EXPECT_EQ(img.height, L.height);
    if (m == "causal") {  // the future is masked: zero above the diagonal, 1 at the top-left
      EXPECT_EQ(img.get(L.cell(0, 0, 1).center_x(), L.cell(0, 0, 1).center_y()), colormap(0.0));
      EXPECT_EQ(img.get(L.cell(0, 0, 0).center_x(), L.cell(0, 0, 0).center_y()), colormap(1.0));
    }
    if (m == "self-v1") {  // seed 000's recipe: embedding, then rand weights, both after seed 123
      manual_seed(123);
      nn::Vocabulary vocab("the kid smiles");
      nn::Embedding embed(50000, 3);
      Tensor x = embed(vocab.encode("the kid smiles")).detach();
      manual_seed(123);
      nn::SelfAttentionV1 sa(3, 2);
      expect_cells(img, L, sa.attention_weights(x).detach());
    }
  }
}

TEST(HeatmapCli, SvgAndPdfByExtension) {
  TempDir dir("heatmap_cli");
  Cli r = run_cli({"heatmap", "--mechanism", "causal", "--out", dir.file("c.svg")});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(r.out,
            "wrote " + dir.file("c.svg") + ": 1 panel of 6 x 6 attention weights (causal)\n");
  const std::string svg = io::read_file(dir.file("c.svg"));
  EXPECT_EQ(plot::pixels::xml_problem(svg), "");
  EXPECT_NE(svg.find("<title>causal attention weights (seed 123, d_out 2)</title>"),
            std::string::npos);
  r = run_cli({"heatmap", "--mechanism", "multihead", "--out", dir.file("m.PDF")});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::string pdf = io::read_file(dir.file("m.PDF"));
  EXPECT_EQ(pdf.rfind("%PDF-", 0), 0u);
  EXPECT_NE(pdf.find("/Count 1"), std::string::npos);
  EXPECT_EQ(dir.files(), (std::vector<std::string>{"c.svg", "m.PDF"}));
}

TEST(HeatmapCli, ErrorsLeaveNoFile) {
  TempDir dir("heatmap_cli");
  const std::string out = dir.file("x.png");
  const std::vector<std::vector<std::string>> usage = {
      {"heatmap", "--mechanism", "bogus", "--out", out},
      {"heatmap", "--out", out},
      {"heatmap", "--mechanism", "causal"},
      {"heatmap", "--mechanism", "causal", "--sentence", " , ", "--out", out},
      {"heatmap", "--mechanism", "multihead", "--heads", "3", "--d-out", "4", "--out", out},
      {"heatmap", "--mechanism", "causal", "--heads", "2", "--out", out},
      {"heatmap", "--mechanism", "causal", "--d-out", "0", "--out", out},
      {"heatmap", "--mechanism", "causal", "--bogus", "1", "--out", out},
      {"heatmap", "--mechanism", "causal", "stray", "--out", out},
      {"heatmap", "--mechanism"},
      {"heatmap", "--mechanism", "causal", "--out", dir.file("x.jpeg")},
  };
  for (const auto& args : usage) {
    Cli r = run_cli(args);
    EXPECT_EQ(r.code, 2) << args.back() << ": " << r.err;
    EXPECT_NE(r.err.find("attn: heatmap: "), std::string::npos) << r.err;
  }
  EXPECT_NE(run_cli(usage[0]).err.find("unknown mechanism 'bogus'"), std::string::npos);
  EXPECT_NE(run_cli(usage[4]).err.find("does not divide"), std::string::npos);
  EXPECT_NE(run_cli(usage[3]).err.find("no words"), std::string::npos);
  EXPECT_NE(run_cli(usage.back())
                .err.find("heatmap: --out '" + dir.file("x.jpeg") +
                          "': unknown image format; the file name must end in .png, .svg or .pdf"),
            std::string::npos)
      << run_cli(usage.back()).err;
  // An unwritable output is an error (exit 1), and nothing is left behind.
  Cli r = run_cli({"heatmap", "--mechanism", "causal", "--out", dir.file("no/such/dir/x.png")});
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.err.find("attn: error: [write_file_atomic]"), std::string::npos) << r.err;
  EXPECT_TRUE(dir.files().empty());
  // Help is listed.
  Cli h = run_cli({"--help"});
  EXPECT_NE(h.out.find("heatmap --mechanism NAME"), std::string::npos);
}

TEST(HeatmapCli, WalkthroughPlotsKeepTheTextAndWriteFiles) {
  TempDir dir("walk_plots");
  const std::string plots = dir.file("plots");
  Cli plain = run_cli({"walkthrough"});
  Cli with = run_cli({"walkthrough", "--plots", plots});
  ASSERT_EQ(plain.code, 0) << plain.err;
  ASSERT_EQ(with.code, 0) << with.err;
  EXPECT_EQ(with.out, plain.out);
  EXPECT_EQ(with.err, "");
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(plots))
    files.push_back(e.path().filename().string());
  std::sort(files.begin(), files.end());
  const std::vector<std::string> want = {"seed000_attention_weights_2.png",
                                         "seed001_attention_weights.png",
                                         "seed001_attention_weights_dropout.png",
                                         "seed002_attention_weights.png",
                                         "seed003_attn_weights.png",
                                         "seed003_causal_weights.png",
                                         "seed003_masked_simple_norm.png",
                                         "seed004_averaging_weights.png",
                                         "seed004_cross_weights.png",
                                         "seed004_encoder_weights.png",
                                         "seed004_head_weights.png",
                                         "seed004_softmax_weights.png"};
  EXPECT_EQ(files, want);
  for (const std::string& f : files) {
    const plot::Image img = decode_png(io::read_file(plots + "/" + f));
    EXPECT_GT(img.width, 50) << f;
  }
  // One seed, --plots=DIR form: only its files, same text as without plots.
  const std::string one = dir.file("one");
  Cli seed3 = run_cli({"walkthrough", "--plots=" + one, "003"});
  ASSERT_EQ(seed3.code, 0) << seed3.err;
  EXPECT_EQ(seed3.out, run_cli({"walkthrough", "003"}).out);
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(one)) {
    EXPECT_EQ(e.path().filename().string().rfind("seed003_", 0), 0u);
    ++n;
  }
  EXPECT_EQ(n, 3);
  // Causal weights: top-right cell masked to 0, top-left 1.
  const plot::Image img = decode_png(io::read_file(one + "/seed003_causal_weights.png"));
  plot::Heatmap h;
  h.title = "t";
  h.x_label = "key";
  h.y_label = "query";
  h.row_labels = h.col_labels = {"Your", "journey", "starts", "with", "one", "step"};
  h.panels.push_back({"head 0", std::vector<double>(36, 0.0)});
  const plot::HeatmapLayout L = plot::layout_heatmap(h);
  EXPECT_EQ(img.get(L.cell(0, 0, 5).center_x(), L.cell(0, 0, 5).center_y()), colormap(0.0));
  EXPECT_EQ(img.get(L.cell(0, 0, 0).center_x(), L.cell(0, 0, 0).center_y()), colormap(1.0));
  // Usage errors.
  EXPECT_EQ(run_cli({"walkthrough", "--plots"}).code, 2);
  EXPECT_EQ(run_cli({"walkthrough", "--plots="}).code, 2);
  // A plots "directory" that is a file: exit 1, nothing printed.
  const std::string file = dir.write("afile", "x");
  Cli bad = run_cli({"walkthrough", "--plots", file, "000"});
  EXPECT_EQ(bad.code, 1);
  EXPECT_EQ(bad.out, "");
  EXPECT_NE(bad.err.find("plots directory"), std::string::npos) << bad.err;
}

}  // namespace
}  // namespace attn::tools

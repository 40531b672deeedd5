// `attn heatmap`: the attention weights of one of the seeds' mechanisms as a heatmap (PNG, SVG or
// PDF), one panel per head, tokens on both axes; and the heatmaps `attn walkthrough --plots DIR`
// writes.
//
//   attn heatmap --mechanism {self-v1,self-v2,causal,multihead} --out FILE.png|.svg|.pdf
//                [--sentence TEXT] [--heads H] [--d-out N] [--seed S]
//   attn heatmap --ckpt DIR|FILE --text TEXT --out FILE.png|.svg|.pdf
//
// The sentence is split into words by seed 000's nn::Vocabulary (commas dropped), each word
// embedded by an nn::Embedding(50000, d_in) drawn after manual_seed(S), and the mechanism's weights
// drawn after manual_seed(S) again, as seed 000 does: with the defaults (seed 123, d_in 3) the
// embedded words are seed 000's. self-v1, self-v2 and causal project d_in = 3 to --d-out (default
// 2) and give one panel; multihead is an nn::MultiheadAttention of embed_dim --d-out (default 4)
// with --heads heads (default 2), whose per-head weights (average_attn_weights = false) give one
// panel each. The causal mechanism runs without dropout. The file is written atomically.
//
// With --ckpt, the model is a GPT trained by `attn train` (its model.safetensors, or the file
// given): the text is encoded with the checkpoint's character vocabulary and the attention
// weights of every layer and head (GPT::attention_maps, in eval mode) form one grid, a row of
// panels per layer, one panel per head, with the characters on both axes.
#pragma once

#include <attn/tensor.h>

#include <cstdint>
#include <ostream>
#include <span>
#include <string>
#include <vector>

#include "train.h"  // FlagError, run_command

namespace attn::tools {

// The flags of `attn heatmap`, validated (the sentence split into words) without drawing anything.
struct HeatmapOptions {
  std::string mechanism;   // one of self-v1, self-v2, causal, multihead; empty with --ckpt
  std::string ckpt, text;  // --ckpt mode: a trained GPT and the text it reads
  std::string path;        // --out
  std::string sentence;
  std::vector<std::string> tokens;  // the sentence's words (1 to 512)
  int64_t heads = 1, d_out = 2;
  uint64_t seed = 123;
};
// Throws FlagError as heatmap_command does.
HeatmapOptions parse_heatmap_args(std::span<const std::string> args);

// The handler: `args` are the arguments after "heatmap". Prints one line naming the file written.
// Throws FlagError for command-line mistakes (unknown option or mechanism, missing --out, an empty
// sentence, --heads not dividing --d-out, an --out not ending in .png, .svg or .pdf) and
// attn::Error for failures (unwritable output).
int heatmap_command(std::span<const std::string> args, std::ostream& out, std::ostream& err);

inline constexpr const char* kHeatmapUsage =
    "--mechanism NAME --out FILE.png [options] | --ckpt DIR --text TEXT --out FILE.png";
inline constexpr const char* kHeatmapSummary =
    "draw attention weights as heatmaps (a seed mechanism, or every head of a trained GPT)";
inline constexpr const char* kHeatmapHelp =
    "  Embeds the words of a sentence (seed 000's vocabulary and nn::Embedding), runs one\n"
    "  attention mechanism and writes its attention weights as a heatmap: one panel per head,\n"
    "  queries down, keys across, with a colour scale from 0 to 1. Every flag takes\n"
    "  `--flag VALUE` or `--flag=VALUE`.\n"
    "\n"
    "    --mechanism NAME       self-v1, self-v2, causal or multihead (this or --ckpt)\n"
    "    --ckpt DIR|FILE        a GPT trained by `attn train` (DIR/model.safetensors or the\n"
    "                           file): draws every layer and head, a row of heads per layer\n"
    "    --text TEXT            with --ckpt: the text the model reads (at most block_size\n"
    "                           characters of its vocabulary)\n"
    "    --out FILE.png         the image to write, atomically (required); its extension picks\n"
    "                           the format: .png, .svg or .pdf\n"
    "    --sentence TEXT        default \"Life is short, eat dessert first\"\n"
    "    --heads H              multihead only: number of heads (default 2)\n"
    "    --d-out N              projection width, 1..256 (default 2; multihead: embed_dim,\n"
    "                           default 4, divisible by --heads)\n"
    "    --seed S               random seed of the embedding and the weights (default 123)\n";

// Writes `weights` as a heatmap to `path` (atomically; PNG, SVG or PDF by its extension): a (cols)
// tensor is one row, a (rows, cols) tensor one panel, and the leading dimensions of a larger one
// are flattened into panels titled "<panel_prefix> 0", "<panel_prefix> 1", ... The colour scale
// is 0..1. Throws attn::Error when the label counts do not match the last two dimensions, the
// extension is not one of those, or the write fails.
void write_weights_heatmap(const std::string& path, const std::string& title, const Tensor& weights,
                           const std::vector<std::string>& row_labels,
                           const std::vector<std::string>& col_labels,
                           const std::string& panel_prefix = "head");

// run_walkthrough (walkthrough.h) that also writes a heatmap PNG per attention-weights matrix it
// prints into `plots_dir` (created if missing), named seed<ID>_<name>.png, e.g.
// seed003_causal_weights.png. The printed text is the same as without plots. An empty
// `plots_dir` writes nothing. Defined in walkthrough.cpp.
void run_walkthrough(const std::string& seed, std::ostream& os, const std::string& plots_dir);

}  // namespace attn::tools

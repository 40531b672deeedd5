// `attn heatmap` and the heatmaps of `attn walkthrough --plots`: see heatmap.h.
#include "heatmap.h"

#include <attn/attn.h>
#include <attn/plot.h>

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <system_error>
#include <vector>

namespace attn::tools {

namespace {

const std::vector<std::string>& mechanisms() {
  static const std::vector<std::string> names = {"self-v1", "self-v2", "causal", "multihead"};
  return names;
}

// `--flag VALUE` / `--flag=VALUE` for the known flags; anything else is a FlagError.
std::map<std::string, std::string> parse_flags(std::span<const std::string> args) {
  static const std::vector<std::string> known = {"mechanism", "sentence", "heads", "d-out",
                                                 "seed",      "out",      "ckpt",  "text"};
  std::map<std::string, std::string> values;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg.size() < 3 || arg.compare(0, 2, "--") != 0)
      throw FlagError("heatmap: unexpected argument '" + arg + "'");
    std::string name = arg.substr(2);
    std::optional<std::string> value;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    bool ok = false;
    for (const std::string& k : known) ok = ok || k == name;
    if (!ok) throw FlagError("heatmap: unknown option '--" + name + "'");
    if (!value) {
      if (i + 1 >= args.size()) throw FlagError("heatmap: --" + name + " needs a value");
      value = args[++i];
    }
    values[name] = *value;
  }
  return values;
}

template <typename T>
T parse_number(const std::map<std::string, std::string>& flags, const std::string& name, T fallback,
               T min, T max) {
  auto it = flags.find(name);
  if (it == flags.end()) return fallback;
  const std::string& s = it->second;
  T v{};
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size() || v < min || v > max)
    throw FlagError("heatmap: invalid value '" + s + "' for --" + name +
                    ": expected an integer in [" + std::to_string(min) + ", " +
                    std::to_string(max) + "]");
  return v;
}

// --out, checked: present, non-empty, with an image extension.
std::string out_path(const std::map<std::string, std::string>& flags) {
  auto it = flags.find("out");
  if (it == flags.end()) throw FlagError("heatmap: --out FILE.png is required");
  const std::string& path = it->second;
  if (path.empty()) throw FlagError("heatmap: --out needs a file name");
  try {
    (void)plot::format_from_path(path, "heatmap");
  } catch (const Error& e) {
    const std::string what = e.what();  // "[heatmap] 'x.jpg': unknown image format; ..."
    throw FlagError("heatmap: --out " + what.substr(what.find("] ") + 2));
  }
  return path;
}

// A character as an axis label: blanks and control characters get a visible name.
std::string char_label(const std::string& c) {
  if (c == " ") return "\u2423";  // OPEN BOX
  if (c == "\n") return "\\n";
  if (c == "\t") return "\\t";
  if (c.size() == 1 && ((unsigned char)c[0] < 0x20 || c[0] == 0x7f)) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "\\x%02X", unsigned((unsigned char)c[0]));
    return buf;
  }
  return c;
}

// `attn heatmap --ckpt`: every layer and head of a trained GPT on the text.
int checkpoint_heatmap(const HeatmapOptions& o, std::ostream& out) {
  const std::string file = checkpoint_file(o.ckpt, "heatmap");
  const Checkpoint ck = read_checkpoint(file, CheckpointUse::Generate);
  const nn::GPTConfig& c = ck.config;
  std::vector<int64_t> ids;
  try {
    ids = ck.tokenizer.encode(o.text);
  } catch (const Error& e) {
    throw Error(std::string("[heatmap] --text cannot be encoded with the checkpoint's "
                            "vocabulary: ") +
                e.what());
  }
  const int64_t T = int64_t(ids.size());
  if (T > c.block_size)
    throw Error(
        "[heatmap] --text has " + std::to_string(T) +
        " characters; the model reads at most block_size = " + std::to_string(c.block_size));
  if (c.n_layer * c.n_head > 256)
    throw Error("[heatmap] the model has " + std::to_string(c.n_layer) + " layers x " +
                std::to_string(c.n_head) + " heads; at most 256 panels fit one image");
  const std::shared_ptr<nn::GPT> model = checkpoint_model(ck, file);
  model->eval();
  Tensor idx = empty({1, T}, Dtype::Int64);
  std::copy(ids.begin(), ids.end(), idx.data_ptr<int64_t>());
  const Tensor maps = model->attention_maps(idx);  // (n_layer, 1, n_head, T, T)
  const std::vector<float> v = maps.contiguous().to_float_vector();

  std::vector<std::string> labels;
  for (int64_t id : ids) labels.push_back(char_label(ck.tokenizer.decode(id)));
  plot::Heatmap h;
  h.title = "attention of " + file + " (" + std::to_string(c.n_layer) + " layers x " +
            std::to_string(c.n_head) + " heads)";
  h.x_label = "key";
  h.y_label = "query";
  h.row_labels = h.col_labels = labels;
  h.columns = int(std::min<int64_t>(c.n_head, 64));
  for (int64_t l = 0; l < c.n_layer; ++l)
    for (int64_t hd = 0; hd < c.n_head; ++hd) {
      plot::HeatmapPanel panel;
      panel.title = "layer " + std::to_string(l) + " head " + std::to_string(hd);
      const std::size_t at = std::size_t((l * c.n_head + hd) * T * T);
      panel.values.assign(v.begin() + at, v.begin() + at + std::size_t(T * T));
      h.panels.push_back(std::move(panel));
    }
  plot::save(h, o.path);
  out << "wrote " << o.path << ": " << c.n_layer * c.n_head << " panels (" << c.n_layer
      << " layers x " << c.n_head << " heads) of " << T << " x " << T << " attention weights of "
      << file << "\n";
  return 0;
}

}  // namespace

void write_weights_heatmap(const std::string& path, const std::string& title, const Tensor& weights,
                           const std::vector<std::string>& row_labels,
                           const std::vector<std::string>& col_labels,
                           const std::string& panel_prefix) {
  if (!weights.defined() || weights.dim() < 1 || weights.numel() == 0)
    throw Error(std::string("[write_weights_heatmap] ") +
                "expected a non-empty tensor of attention weights");
  Tensor w = weights.detach().float_().contiguous();
  if (w.dim() == 1) w = w.unsqueeze(0);
  const int64_t rows = w.size(-2), cols = w.size(-1);
  if (rows != int64_t(row_labels.size()) || cols != int64_t(col_labels.size()))
    throw Error(std::string("[write_weights_heatmap] ") + "weights of " + std::to_string(rows) +
                " x " + std::to_string(cols) + " need as many labels, got " +
                std::to_string(row_labels.size()) + " row and " +
                std::to_string(col_labels.size()) + " column labels");
  const std::vector<float> v = w.to_float_vector();
  const int64_t panels = int64_t(v.size()) / (rows * cols);
  plot::Heatmap h;
  h.title = title;
  h.x_label = "key";
  h.y_label = "query";
  h.row_labels = row_labels;
  h.col_labels = col_labels;
  for (int64_t p = 0; p < panels; ++p) {
    plot::HeatmapPanel panel;
    panel.title = panel_prefix + " " + std::to_string(p);
    panel.values.assign(v.begin() + p * rows * cols, v.begin() + (p + 1) * rows * cols);
    h.panels.push_back(std::move(panel));
  }
  plot::save(h, path);
}

HeatmapOptions parse_heatmap_args(std::span<const std::string> args) {
  const std::map<std::string, std::string> flags = parse_flags(args);
  auto flag = [&](const std::string& name, const std::string& fallback) {
    auto it = flags.find(name);
    return it == flags.end() ? fallback : it->second;
  };
  HeatmapOptions o;
  if (flags.count("ckpt")) {
    for (const char* other : {"mechanism", "sentence", "heads", "d-out", "seed"})
      if (flags.count(other))
        throw FlagError(std::string("heatmap: --") + other + " does not apply with --ckpt");
    o.ckpt = flag("ckpt", "");
    if (o.ckpt.empty()) throw FlagError("heatmap: --ckpt needs a directory or file");
    if (!flags.count("text")) throw FlagError("heatmap: --ckpt needs --text TEXT");
    o.text = flag("text", "");
    if (o.text.empty()) throw FlagError("heatmap: --text is empty");
    o.path = out_path(flags);
    return o;
  }
  if (flags.count("text")) throw FlagError("heatmap: --text applies with --ckpt only");
  if (!flags.count("mechanism"))
    throw FlagError("heatmap: --mechanism NAME (or --ckpt DIR --text TEXT) is required");
  o.mechanism = flag("mechanism", "");
  const std::string& mechanism = o.mechanism;
  bool known = false;
  std::string names;
  for (const std::string& m : mechanisms()) {
    known = known || m == mechanism;
    names += " " + m;
  }
  if (!known)
    throw FlagError("heatmap: unknown mechanism '" + mechanism + "' (expected one of" + names +
                    ")");
  o.path = out_path(flags);
  const bool multihead = mechanism == "multihead";
  o.sentence = flag("sentence", "Life is short, eat dessert first");
  o.heads = parse_number<int64_t>(flags, "heads", multihead ? 2 : 1, 1, 256);
  if (!multihead && o.heads != 1)
    throw FlagError("heatmap: --heads applies to --mechanism multihead only");
  o.d_out = parse_number<int64_t>(flags, "d-out", multihead ? 4 : 2, 1, 256);
  if (o.d_out % o.heads != 0)
    throw FlagError("heatmap: --heads " + std::to_string(o.heads) + " does not divide --d-out " +
                    std::to_string(o.d_out));
  o.seed = parse_number<uint64_t>(flags, "seed", 123, 0, UINT64_MAX);

  o.tokens = nn::Vocabulary::tokenize(o.sentence);
  if (o.tokens.empty()) throw FlagError("heatmap: --sentence has no words");
  if (o.tokens.size() > 512)
    throw FlagError("heatmap: --sentence has " + std::to_string(o.tokens.size()) +
                    " words (at most 512)");
  return o;
}

int heatmap_command(std::span<const std::string> args, std::ostream& out, std::ostream& err) {
  const HeatmapOptions o = parse_heatmap_args(args);
  if (!o.ckpt.empty()) return checkpoint_heatmap(o, out);
  const std::string& mechanism = o.mechanism;
  const std::string& path = o.path;
  const std::string& sentence = o.sentence;
  const std::vector<std::string>& tokens = o.tokens;
  const int64_t heads = o.heads, d_out = o.d_out;
  const uint64_t seed = o.seed;
  const bool multihead = mechanism == "multihead";
  nn::Vocabulary vocab(sentence);
  const int64_t d_in = multihead ? d_out : 3;

  // As seed 000: the embedding after manual_seed(S), the weights after manual_seed(S) again.
  manual_seed(seed);
  nn::Embedding embed(std::max<int64_t>(50000, vocab.size()), d_in);
  const Tensor x = embed(vocab.encode(sentence)).detach();  // (L, d_in)
  const int64_t L = x.size(0);
  manual_seed(seed);
  Tensor weights;
  if (mechanism == "self-v1") {
    nn::SelfAttentionV1 m(d_in, d_out);
    weights = m.attention_weights(x);
  } else if (mechanism == "self-v2") {
    nn::SelfAttentionV2 m(d_in, d_out);
    weights = m.attention_weights(x);
  } else if (mechanism == "causal") {
    nn::CausalAttention m(d_in, d_out, L, /*dropout=*/0.0);
    m.eval();
    weights = m.attention_weights(x);
  } else {
    nn::MultiheadAttention m(d_out, heads);
    m.eval();
    weights = m.forward(x, x, x, Tensor(), /*need_weights=*/true, Tensor(),
                        /*average_attn_weights=*/false)
                  .weights;  // (H, L, L)
  }
  const std::string title = mechanism + " attention weights (seed " + std::to_string(seed) +
                            ", d_out " + std::to_string(d_out) +
                            (multihead ? ", " + std::to_string(heads) + " heads)" : ")");
  write_weights_heatmap(path, title, weights, tokens, tokens, "head");
  const int64_t panels = weights.numel() / (L * L);
  out << "wrote " << path << ": " << panels << (panels == 1 ? " panel" : " panels") << " of " << L
      << " x " << L << " attention weights (" << mechanism << ")\n";
  (void)err;
  return 0;
}

}  // namespace attn::tools

// Hugging Face GPT-2 checkpoints <-> attn's GPT (include/attn/hf_gpt2.h).
#include <attn/autograd.h>
#include <attn/hf_gpt2.h>
#include <attn/ops.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>
#include <sstream>
#include <vector>

#include "../common/error.h"

namespace attn::nn {

namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

constexpr const char* kLoad = "load_hf_gpt2";
constexpr const char* kSave = "save_hf_gpt2";
constexpr const char* kPrefix = "transformer.";

template <typename... Args>
[[noreturn]] void fail_in(const char* fn, const std::string& what, const Args&... args) {
  detail::fail(fn, "'", what, "': ", args...);
}

// A field of config.json, or its GPT2Config default when absent (or null where allowed).
struct ConfigReader {
  const json& j;
  const std::string& what;

  const json* find(const char* key) const {
    auto it = j.find(key);
    return it == j.end() ? nullptr : &*it;
  }
  int64_t integer(const char* key, int64_t def) const {
    const json* v = find(key);
    if (!v) return def;
    if (v->is_number_unsigned() && v->get<uint64_t>() <= uint64_t(INT64_MAX))
      return int64_t(v->get<uint64_t>());
    if (v->is_number_integer()) return v->get<int64_t>();
    fail_in(kLoad, what, "field '", key, "' must be an integer, got ", v->dump());
  }
  double number(const char* key, double def) const {
    const json* v = find(key);
    if (!v) return def;
    if (!v->is_number())
      fail_in(kLoad, what, "field '", key, "' must be a number, got ", v->dump());
    return v->get<double>();
  }
  bool boolean(const char* key, bool def) const {
    const json* v = find(key);
    if (!v) return def;
    if (!v->is_boolean())
      fail_in(kLoad, what, "field '", key, "' must be true or false, got ", v->dump());
    return v->get<bool>();
  }
  std::string string(const char* key, const std::string& def) const {
    const json* v = find(key);
    if (!v) return def;
    if (!v->is_string())
      fail_in(kLoad, what, "field '", key, "' must be a string, got ", v->dump());
    return v->get<std::string>();
  }
  // A boolean field attn supports only at `supported`.
  void require(const char* key, bool def, bool supported) const {
    if (boolean(key, def) != supported)
      fail_in(kLoad, what, "field '", key, "' is ", supported ? "false" : "true",
              ", which attn's GPT does not implement (only ", supported ? "true" : "false", ")");
  }
};

std::string shape_of(const Shape& s) { return shape_str(s); }

struct Expected {
  std::string hf_name, attn_name;
  Shape hf_shape;
  bool transpose;
};

// Every weight a GPT-2 file holds for `c`, under its name without prefix, with attn's name.
std::vector<Expected> expected_weights(const GPTConfig& c) {
  const int64_t C = c.n_embd, I = c.mlp_width();
  std::vector<Expected> out;
  out.push_back({"wte.weight", "wte.weight", {c.vocab_size, C}, false});
  out.push_back({"wpe.weight", "wpe.weight", {c.block_size, C}, false});
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const std::string h = "h." + std::to_string(l) + ".";
    auto add = [&](const std::string& hf, const std::string& an, Shape s, bool t) {
      out.push_back({h + hf, h + an, std::move(s), t});
    };
    add("ln_1.weight", "ln_1.weight", {C}, false);
    add("ln_1.bias", "ln_1.bias", {C}, false);
    add("attn.c_attn.weight", "attn.in_proj_weight", {C, 3 * C}, true);
    add("attn.c_attn.bias", "attn.in_proj_bias", {3 * C}, false);
    add("attn.c_proj.weight", "attn.out_proj.weight", {C, C}, true);
    add("attn.c_proj.bias", "attn.out_proj.bias", {C}, false);
    add("ln_2.weight", "ln_2.weight", {C}, false);
    add("ln_2.bias", "ln_2.bias", {C}, false);
    add("mlp.c_fc.weight", "mlp.c_fc.weight", {C, I}, true);
    add("mlp.c_fc.bias", "mlp.c_fc.bias", {I}, false);
    add("mlp.c_proj.weight", "mlp.c_proj.weight", {I, C}, true);
    add("mlp.c_proj.bias", "mlp.c_proj.bias", {C}, false);
  }
  out.push_back({"ln_f.weight", "ln_f.weight", {C}, false});
  out.push_back({"ln_f.bias", "ln_f.bias", {C}, false});
  return out;
}

// The attention mask buffers older transformers versions saved: h.{i}.attn.bias, .masked_bias.
bool is_ignored_buffer(const std::string& name) {
  if (!name.starts_with("h.")) return false;
  return name.ends_with(".attn.bias") || name.ends_with(".attn.masked_bias");
}

std::string join_keys(const std::vector<std::string>& keys, std::size_t limit = 12) {
  std::string s;
  for (std::size_t i = 0; i < keys.size() && i < limit; ++i) s += (i ? ", " : "") + keys[i];
  if (keys.size() > limit) s += ", ... (" + std::to_string(keys.size()) + " in all)";
  return s;
}

}  // namespace

GPTConfig gpt_config_from_hf_json(std::string_view text, const std::string& what) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    fail_in(kLoad, what, "not valid JSON: ", e.what());
  }
  if (!j.is_object()) fail_in(kLoad, what, "not a JSON object");
  ConfigReader r{j, what};
  const std::string model_type = r.string("model_type", "gpt2");
  if (model_type != "gpt2")
    fail_in(kLoad, what, "model_type is '", model_type, "'; only 'gpt2' checkpoints load");
  GPTConfig c;
  c.vocab_size = r.integer("vocab_size", 50257);
  c.block_size = r.integer("n_positions", 1024);
  c.n_embd = r.integer("n_embd", 768);
  c.n_layer = r.integer("n_layer", 12);
  c.n_head = r.integer("n_head", 12);
  c.bias = true;
  if (const json* v = r.find("n_inner"); v && !v->is_null()) {
    c.n_inner = r.integer("n_inner", 0);
    if (c.n_inner < 1)
      fail_in(kLoad, what, "field 'n_inner' must be null or >= 1, got ", c.n_inner);
  }
  const std::string act = r.string("activation_function", "gelu_new");
  if (act == "gelu_new" || act == "gelu_pytorch_tanh")
    c.gelu_approximate = "tanh";
  else if (act == "gelu")
    c.gelu_approximate = "none";
  else
    fail_in(kLoad, what, "field 'activation_function' is '", act,
            "', which attn's GPT does not implement (supported: gelu_new, gelu_pytorch_tanh, "
            "gelu)");
  c.layer_norm_eps = r.number("layer_norm_epsilon", 1e-5);
  const double resid = r.number("resid_pdrop", 0.1), embd = r.number("embd_pdrop", 0.1),
               attn_p = r.number("attn_pdrop", 0.1);
  if (resid != embd || resid != attn_p)
    fail_in(kLoad, what, "resid_pdrop ", resid, ", embd_pdrop ", embd, " and attn_pdrop ", attn_p,
            " differ; attn's GPT has one dropout probability for all three");
  c.dropout = resid;
  r.require("scale_attn_weights", true, true);
  r.require("scale_attn_by_inverse_layer_idx", false, false);
  r.require("reorder_and_upcast_attn", false, false);
  r.require("add_cross_attention", false, false);
  r.require("tie_word_embeddings", true, true);
  try {
    c.validate(kLoad);
  } catch (const Error& e) {
    fail_in(kLoad, what, "invalid GPT-2 configuration: ", e.what());
  }
  return c;
}

std::string gpt_config_to_hf_json(const GPTConfig& c) {
  c.validate(kSave);
  json j = {{"architectures", {"GPT2LMHeadModel"}},
            {"model_type", "gpt2"},
            {"activation_function", c.gelu_approximate == "tanh" ? "gelu_new" : "gelu"},
            {"attn_pdrop", c.dropout},
            {"embd_pdrop", c.dropout},
            {"resid_pdrop", c.dropout},
            {"initializer_range", 0.02},
            {"layer_norm_epsilon", c.layer_norm_eps},
            {"n_ctx", c.block_size},
            {"n_positions", c.block_size},
            {"n_embd", c.n_embd},
            {"n_head", c.n_head},
            {"n_layer", c.n_layer},
            {"n_inner", c.n_inner > 0 ? json(c.n_inner) : json(nullptr)},
            {"vocab_size", c.vocab_size},
            {"reorder_and_upcast_attn", false},
            {"scale_attn_by_inverse_layer_idx", false},
            {"scale_attn_weights", true},
            {"tie_word_embeddings", true},
            {"use_cache", true},
            {"torch_dtype", "float32"}};
  return j.dump(2) + "\n";
}

namespace {

bool widens_to_float32(Dtype d) { return d == Dtype::Float32 || is_reduced_float(d); }

// Where each weight of a GPT-2 file is, found from its names, dtypes and shapes alone.
struct HfIndex {
  std::vector<Expected> want;                 // expected_weights(c)
  std::map<std::string, std::string> source;  // hf_name -> the file's name for it
  std::optional<std::string> lm_head;         // "lm_head.weight", when the file has it
};

// Every check of a GPT-2 file that needs no tensor data: names (with or without the
// "transformer." prefix, not a mixture), dtypes (F32, or F16 and BF16, which are widened to
// float32 as transformers' from_pretrained loads them into a float32 model) and shapes.
HfIndex index_hf_weights(const GPTConfig& c, const std::vector<io::SafeTensorsFile::Entry>& entries,
                         const std::string& what) {
  bool prefixed = false;
  for (const auto& e : entries) prefixed = prefixed || e.name.starts_with(kPrefix);
  HfIndex ix;
  std::map<std::string, const io::SafeTensorsFile::Entry*> have;
  const io::SafeTensorsFile::Entry* lm_head = nullptr;
  std::vector<std::string> unexpected;
  for (const auto& e : entries) {
    if (e.name == "lm_head.weight") {
      lm_head = &e;
      continue;
    }
    if (prefixed && !e.name.starts_with(kPrefix)) {
      unexpected.push_back(e.name);
      continue;
    }
    std::string key = prefixed ? e.name.substr(std::string(kPrefix).size()) : e.name;
    if (is_ignored_buffer(key)) continue;
    have[key] = &e;
  }
  const std::string pre = prefixed ? kPrefix : "";
  // 12 weights per layer: a config with more layers than the file could hold is refused before
  // the list of expected names is built (n_layer comes from an outside file).
  if (c.n_layer > int64_t(entries.size()) / 12)
    fail_in(kLoad, what, "the config's n_layer ", c.n_layer, " needs ", c.n_layer,
            " x 12 layer weights but the file holds ", entries.size(), " tensors in all");
  ix.want = expected_weights(c);
  std::set<std::string> wanted;
  std::vector<std::string> missing, errors;
  for (const Expected& e : ix.want) {
    wanted.insert(e.hf_name);
    auto it = have.find(e.hf_name);
    if (it == have.end()) {
      missing.push_back(pre + e.hf_name);
      continue;
    }
    const io::SafeTensorsFile::Entry& t = *it->second;
    if (!widens_to_float32(t.dtype))
      errors.push_back("'" + pre + e.hf_name + "' is " + io::SafeTensorsFile::dtype_name(t.dtype) +
                       ", expected F32 (attn's GPT is float32)");
    else if (t.shape != e.hf_shape)
      errors.push_back("'" + pre + e.hf_name + "' has shape " + shape_of(t.shape) +
                       ", the config needs " + shape_of(e.hf_shape));
    ix.source[e.hf_name] = t.name;
  }
  for (const auto& [key, t] : have)
    if (!wanted.count(key)) unexpected.push_back(pre + key);
  if (!missing.empty())
    fail_in(kLoad, what, "missing weights: ", join_keys(missing),
            unexpected.empty() ? "" : "; unexpected weights: ", join_keys(unexpected));
  if (!unexpected.empty()) fail_in(kLoad, what, "unexpected weights: ", join_keys(unexpected));
  if (!errors.empty()) fail_in(kLoad, what, join_keys(errors));
  if (lm_head) {  // tied: it must be the token table (compared once the data is read)
    const Shape& wte = have.at("wte.weight")->shape;
    if (!widens_to_float32(lm_head->dtype) || lm_head->shape != wte)
      fail_in(kLoad, what, "'lm_head.weight' is ", shape_of(lm_head->shape), " ",
              io::SafeTensorsFile::dtype_name(lm_head->dtype),
              ", expected float32 with wte's shape ", shape_of(wte));
    ix.lm_head = lm_head->name;
  }
  return ix;
}

// A tied lm_head must hold the token table's values.
void check_tied(const Tensor& lm_head, const Tensor& wte, const std::string& what) {
  NoGradGuard no_grad;
  const Tensor differs = (lm_head.to(Dtype::Float32) != wte.detach()).reshape({-1});
  if (differs.numel() == 0 || !differs.any()) return;
  const int64_t i = differs.to(Dtype::Int64).argmax(0).item<int64_t>();  // the first one
  fail_in(kLoad, what, "'lm_head.weight' differs from the token embedding (at element ", i,
          "); attn's GPT ties its output layer to wte (untied heads are not supported)");
}

}  // namespace

NamedTensors gpt_state_from_hf(const GPTConfig& c, const io::SafeTensors& st,
                               const std::string& what) {
  std::vector<io::SafeTensorsFile::Entry> entries;
  std::map<std::string, const Tensor*> by_name;
  for (const auto& [name, t] : st.tensors) {
    entries.push_back({name, t.dtype(), t.shape()});
    by_name[name] = &t;
  }
  const HfIndex ix = index_hf_weights(c, entries, what);
  NamedTensors out;
  out.reserve(ix.want.size());
  for (const Expected& e : ix.want) {
    Tensor t = by_name.at(ix.source.at(e.hf_name))->to(Dtype::Float32);
    out.emplace_back(e.attn_name, e.transpose ? t.transpose(0, 1).contiguous() : t);
  }
  if (ix.lm_head) check_tied(*by_name.at(*ix.lm_head), out.front().second, what);
  return out;
}

NamedTensors gpt_state_to_hf(const GPT& model) {
  const GPTConfig& c = model.config();
  std::map<std::string, Tensor> own;
  for (auto& [name, t] : model.state_dict()) own[name] = t;
  NamedTensors out;
  for (const Expected& e : expected_weights(c)) {
    auto it = own.find(e.attn_name);
    Tensor t;
    if (it != own.end() && it->second.defined()) {
      t = e.transpose ? it->second.detach().transpose(0, 1).contiguous() : it->second.detach();
    } else if (!c.bias && e.attn_name.ends_with("bias")) {
      t = zeros(e.hf_shape);  // a model without biases is GPT-2 with zero biases
    } else {
      detail::fail(kSave, "the model has no weight '", e.attn_name, "'");
    }
    if (t.shape() != e.hf_shape)
      detail::fail(kSave, "weight '", e.attn_name, "' has shape ", shape_of(t.shape()),
                   ", expected ", shape_of(e.hf_shape));
    out.emplace_back(kPrefix + e.hf_name, t);
  }
  return out;
}

bool is_hf_checkpoint_dir(const std::string& dir) {
  std::error_code ec;
  return fs::is_directory(dir, ec) && fs::is_regular_file(fs::path(dir) / "config.json", ec);
}

std::shared_ptr<GPT> load_hf_gpt2(const std::string& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    detail::fail(kLoad, "'", dir,
                 "' is not a directory (expected config.json and model.safetensors)");
  const std::string config_path = (fs::path(dir) / "config.json").string();
  const std::string weights_path = (fs::path(dir) / "model.safetensors").string();
  if (!fs::exists(config_path, ec))
    detail::fail(kLoad, "'", dir, "' has no config.json (not a Hugging Face checkpoint)");
  if (!fs::exists(weights_path, ec)) {
    if (fs::exists(fs::path(dir) / "model.safetensors.index.json", ec))
      detail::fail(kLoad, "'", dir,
                   "' holds a sharded checkpoint (model.safetensors.index.json), which is not "
                   "supported: save it with a larger max_shard_size");
    if (fs::exists(fs::path(dir) / "pytorch_model.bin", ec))
      detail::fail(kLoad, "'", dir,
                   "' has only pytorch_model.bin: save it with save_pretrained(dir, "
                   "safe_serialization=True) to get model.safetensors");
    detail::fail(kLoad, "'", dir, "' has no model.safetensors");
  }
  const GPTConfig config = gpt_config_from_hf_json(io::read_file(config_path), config_path);
  // The header now, each tensor straight into its parameter below: no copy of the file.
  std::optional<io::SafeTensorsFile> file;
  std::optional<HfIndex> ix;
  try {
    file.emplace(weights_path);
    ix = index_hf_weights(config, file->entries(), weights_path);
  } catch (const Error& e) {
    std::string m = e.what();
    if (m.find("unsupported dtype") != std::string::npos)
      m += "; attn's GPT is float32: convert with model.float() before save_pretrained";
    if (m.rfind("[" + std::string(kLoad) + "]", 0) == 0) throw;
    detail::fail(kLoad, m);
  }
  std::shared_ptr<GPT> model;
  {
    init::SkipInitGuard skip;  // every weight is read next
    model = std::make_shared<GPT>(config);
  }
  std::map<std::string, Tensor> own;
  for (auto& [name, t] : model->state_dict()) own[name] = t;
  if (own.size() != ix->want.size())
    detail::fail(kLoad, "attn's GPT has ", own.size(), " weights where GPT-2 has ",
                 ix->want.size());
  for (const Expected& e : ix->want) {
    Tensor dst = own.at(e.attn_name);
    if (e.transpose) dst = dst.transpose(0, 1);  // Conv1D's (in, out) into Linear's (out, in)
    file->read_into(ix->source.at(e.hf_name), dst);
  }
  if (ix->lm_head) check_tied(file->read(*ix->lm_head), own.at("wte.weight"), weights_path);
  model->eval();  // as transformers' from_pretrained
  return model;
}

void save_hf_gpt2(const GPT& model, const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (!fs::is_directory(dir, ec))
    detail::fail(kSave, "cannot create the directory '", dir, "'",
                 ec ? ": " + ec.message() : std::string());
  const std::string config = gpt_config_to_hf_json(model.config());
  NamedTensors weights = gpt_state_to_hf(model);
  io::save_safetensors((fs::path(dir) / "model.safetensors").string(), weights, {{"format", "pt"}});
  io::write_file_atomic((fs::path(dir) / "config.json").string(), config);
}

}  // namespace attn::nn

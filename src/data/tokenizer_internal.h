// The steps of a tokenizer.json pipeline (tokenizer_steps.cpp) and the JSON reading they share
// with tokenizer.cpp.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "../common/error.h"

namespace attn::data::tok {

using json = nlohmann::json;
inline constexpr const char* kFn = "Tokenizer";

// Where in which file a value sits, for error messages: "'tokenizer.json': model.merges[3]".
struct Field {
  const std::string& file;
  std::string path;
  Field operator[](const std::string& key) const {
    return {file, path.empty() ? key : path + "." + key};
  }
  Field operator[](std::size_t i) const { return {file, path + "[" + std::to_string(i) + "]"}; }
  template <typename... Args>
  [[noreturn]] void fail(const Args&... args) const {
    detail::fail(kFn, "'", file, "': ", path, ": ", args...);
  }
};

// Typed members of a JSON object; `fallback` where the member may be absent (or null).
std::string get_string(const json& j, const Field& f, const char* key);
bool get_bool(const json& j, const Field& f, const char* key, bool fallback);
int64_t get_int(const json& j, const Field& f, const char* key, int64_t fallback);
// j["type"], which must be one of the kinds known; `what` names the step ("normalizer").
std::string get_type(const json& j, const Field& f);

// A piece of the text on its way to the model; `first`: it begins at the text's first byte
// (Metaspace's prepend_scheme "first").
struct Piece {
  std::string text;
  bool first = false;
};

// Normalizers and pre-tokenizers that lengthen text (Replace, Prepend, ByteLevel, Metaspace)
// refuse to make it longer than `cap` bytes: a file cannot make one encode take unbounded memory
// (a Sequence of Replace steps that each double the text).
inline std::size_t growth_cap(std::size_t n) { return 64 * n + 4096; }
void check_cap(std::size_t size, std::size_t cap, const char* step);

class Normalizer {
 public:
  virtual ~Normalizer() = default;
  virtual void apply(std::string& s, std::size_t cap) const = 0;
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void apply(std::vector<Piece>& pieces, std::size_t cap) const = 0;
};

class Decoder {
 public:
  virtual ~Decoder() = default;
  virtual void apply(std::vector<std::string>& tokens) const = 0;
};

// nullptr for a JSON null; attn::Error naming the field for a kind attn does not have.
std::unique_ptr<Normalizer> parse_normalizer(const json& j, const Field& f);
std::unique_ptr<PreTokenizer> parse_pre_tokenizer(const json& j, const Field& f);
std::unique_ptr<Decoder> parse_decoder(const json& j, const Field& f);

}  // namespace attn::data::tok

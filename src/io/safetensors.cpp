// The safetensors format: writer and a validating reader.
#include <attn/io.h>
#include <attn/ops.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "../tensor/internal.h"
#include "file_internal.h"

namespace attn::io {

static_assert(std::endian::native == std::endian::little,
              "safetensors stores little-endian data; big-endian hosts are not supported");

namespace {

using nlohmann::json;
using nlohmann::ordered_json;

// The reference implementation's limit on the JSON header.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
constexpr const char* kMetadataKey = "__metadata__";

const char* st_dtype(Dtype d) {
  switch (d) {
    case Dtype::Float32: return "F32";
    case Dtype::Int64: return "I64";
    case Dtype::Bool: return "BOOL";
    case Dtype::BFloat16: return "BF16";
    case Dtype::Float16: return "F16";
  }
  return "?";
}

struct Entry {
  std::string name;
  Dtype dtype = Dtype::Float32;
  Shape shape;
  uint64_t begin = 0, end = 0;
};

class Reader {
 public:
  Reader(std::string_view bytes, const std::string& what) : bytes_(bytes), what_(what) {}

  template <typename... Args>
  [[noreturn]] void fail(const Args&... args) const {
    attn::detail::fail("load_safetensors", "'", what_, "': ", args...);
  }

  SafeTensors read() {
    if (bytes_.size() < 8)
      fail("file is ", bytes_.size(), " bytes, too short for the 8-byte header length");
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(bytes_[std::size_t(i)]);
    if (n > kMaxHeaderBytes)
      fail("header length ", n, " exceeds the limit of ", kMaxHeaderBytes, " bytes");
    if (n > bytes_.size() - 8)
      fail("header length ", n, " exceeds file size ", bytes_.size(), " minus 8");
    if (n < 2) fail("header length ", n, " is too short for a JSON object");
    const std::string_view header = bytes_.substr(8, n);
    if (header[0] != '{') fail("header does not start with '{'");
    const std::string_view data = bytes_.substr(8 + n);

    json root = parse(header);
    if (!root.is_object()) fail("header is not a JSON object");

    SafeTensors out;
    out.what = what_;
    std::vector<Entry> entries;
    for (auto it = root.begin(); it != root.end(); ++it) {
      if (it.key() == kMetadataKey) {
        read_metadata(it.value(), out.metadata);
        continue;
      }
      entries.push_back(read_entry(it.key(), it.value()));
    }

    // The data must be covered exactly: sorted by offset, each tensor starting where the
    // previous one ended, the last ending at the end of the file.
    std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    uint64_t pos = 0;
    const Entry* prev = nullptr;
    for (const Entry& e : entries) {
      if (e.end > data.size())
        fail("tensor '", e.name, "' data_offsets [", e.begin, ", ", e.end,
             "] exceed the data section of ", data.size(), " bytes");
      if (e.begin < pos)
        fail("tensor '", e.name, "' data_offsets [", e.begin, ", ", e.end, "] overlap tensor '",
             prev->name, "' [", prev->begin, ", ", prev->end, "]");
      if (e.begin > pos)
        fail(
            "tensor '", e.name, "' starts at byte ", e.begin, " of the data section but ",
            prev ? "the previous tensor '" + prev->name + "' ends" : std::string("the data starts"),
            " at byte ", pos, " (a hole)");
      pos = e.end;
      prev = &e;
    }
    if (pos != data.size())
      fail("tensors cover ", pos, " bytes but the data section holds ", data.size(),
           " bytes (trailing bytes)");

    for (const Entry& e : entries) {
      Tensor t = attn::empty(e.shape, e.dtype);
      const std::size_t nbytes = std::size_t(e.end - e.begin);
      const char* src = data.data() + e.begin;
      if (e.dtype == Dtype::Bool) {
        for (std::size_t i = 0; i < nbytes; ++i) {
          const auto b = uint8_t(src[i]);
          if (b > 1)
            fail("tensor '", e.name, "' (BOOL) holds byte ", int(b), " at element ", i,
                 "; expected 0 or 1");
        }
      }
      if (nbytes > 0) std::memcpy(t.raw_data(), src, nbytes);
      out.tensors.emplace_back(e.name, std::move(t));
    }
    return out;
  }

 private:
  json parse(std::string_view header) {
    // Tracks the keys of every open object to reject duplicates (nlohmann keeps the last),
    // and bounds the nesting (the format needs three levels). Errors are thrown from the
    // callback, which stops the parser at once.
    std::vector<std::set<std::string>> open;
    auto cb = [&](int depth, json::parse_event_t ev, json& parsed) {
      if (depth > 8) fail("header JSON is nested too deeply");
      switch (ev) {
        case json::parse_event_t::object_start: open.emplace_back(); break;
        case json::parse_event_t::object_end:
          if (!open.empty()) open.pop_back();
          break;
        case json::parse_event_t::key:
          if (!open.empty() && !open.back().insert(parsed.get<std::string>()).second)
            fail("header JSON has the key '", parsed.get<std::string>(), "' more than once");
          break;
        default: break;
      }
      return true;
    };
    json root;
    try {
      root = json::parse(header.begin(), header.end(), cb);
    } catch (const json::exception& e) {
      fail("header is not valid JSON: ", e.what());
    }
    return root;
  }

  void read_metadata(const json& v, std::map<std::string, std::string>& out) const {
    if (!v.is_object()) fail("\"__metadata__\" is not an object of strings");
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (!it.value().is_string())
        fail("\"__metadata__\" entry '", it.key(), "' is not a string (", it.value().type_name(),
             ")");
      out[it.key()] = it.value().get<std::string>();
    }
  }

  static bool as_u64(const json& v, uint64_t& out) {
    if (v.is_number_unsigned()) {
      out = v.get<uint64_t>();
      return true;
    }
    if (v.is_number_integer() && v.get<int64_t>() >= 0) {
      out = uint64_t(v.get<int64_t>());
      return true;
    }
    return false;
  }

  Entry read_entry(const std::string& name, const json& v) const {
    Entry e;
    e.name = name;
    // to_safetensors cannot write such a name either: every file read here can be written back.
    if (name.empty()) fail("a tensor has an empty name");
    if (!v.is_object()) fail("tensor '", name, "' is not a JSON object");
    for (auto it = v.begin(); it != v.end(); ++it) {
      if (it.key() != "dtype" && it.key() != "shape" && it.key() != "data_offsets")
        fail("tensor '", name, "' has an unknown field '", it.key(), "'");
    }
    for (const char* field : {"dtype", "shape", "data_offsets"})
      if (!v.contains(field)) fail("tensor '", name, "' has no \"", field, "\"");

    const json& dt = v["dtype"];
    if (!dt.is_string()) fail("tensor '", name, "' dtype is not a string");
    const std::string ds = dt.get<std::string>();
    if (ds == "F32") {
      e.dtype = Dtype::Float32;
    } else if (ds == "I64") {
      e.dtype = Dtype::Int64;
    } else if (ds == "BOOL") {
      e.dtype = Dtype::Bool;
    } else if (ds == "BF16") {
      e.dtype = Dtype::BFloat16;
    } else if (ds == "F16") {
      e.dtype = Dtype::Float16;
    } else {
      fail("tensor '", name, "' has unsupported dtype ", ds,
           " (supported: F32, I64, BOOL, BF16, F16)");
    }

    const json& sh = v["shape"];
    if (!sh.is_array()) fail("tensor '", name, "' shape is not an array");
    uint64_t numel = 1;
    // Any element count above this cannot fit in a file.
    const uint64_t limit = uint64_t(std::numeric_limits<int64_t>::max()) / 8;
    // The stride of the first dim, the product of the others (an empty one counting as 1), must
    // fit in int64 even for an empty tensor such as (0, 2^40, 2^40).
    uint64_t first_stride = 1;
    for (std::size_t i = 0; i < sh.size(); ++i) {
      const json& d = sh[i];
      uint64_t s = 0;
      if (!as_u64(d, s) || s > limit)
        fail("tensor '", name, "' shape ", sh.dump(), " has an invalid size ", d.dump());
      e.shape.push_back(int64_t(s));
      if (s != 0 && numel > limit / s) {
        // Overflows unless another dim is zero; keep checking the rest.
        numel = limit + 1;
      } else {
        numel *= s;
      }
      if (i > 0 && s > 1) {
        if (first_stride > uint64_t(std::numeric_limits<int64_t>::max()) / s)
          fail("tensor '", name, "' shape ", sh.dump(), " has sizes whose strides overflow int64");
        first_stride *= s;
      }
    }
    bool has_zero = std::find(e.shape.begin(), e.shape.end(), 0) != e.shape.end();
    if (has_zero) numel = 0;
    if (numel > limit) fail("tensor '", name, "' shape ", sh.dump(), " has too many elements");

    const json& off = v["data_offsets"];
    if (!off.is_array() || off.size() != 2 || !as_u64(off[0], e.begin) || !as_u64(off[1], e.end))
      fail("tensor '", name, "' data_offsets ", off.dump(),
           " is not a pair of non-negative integers");
    if (e.begin > e.end)
      fail("tensor '", name, "' data_offsets [", e.begin, ", ", e.end, "] end before begin");
    const uint64_t nbytes = numel * itemsize(e.dtype);
    if (e.end - e.begin != nbytes)
      fail("tensor '", name, "' data_offsets [", e.begin, ", ", e.end, "] span ", e.end - e.begin,
           " bytes but shape ", shape_str(e.shape), " of ", ds, " needs ", nbytes);
    return e;
  }

  std::string_view bytes_;
  const std::string& what_;
};

}  // namespace

const Tensor& SafeTensors::at(const std::string& name) const {
  for (const auto& [n, t] : tensors)
    if (n == name) return t;
  attn::detail::fail("SafeTensors::at", "'", what, "' has no tensor '", name, "'");
}

bool SafeTensors::contains(const std::string& name) const {
  for (const auto& kv : tensors)
    if (kv.first == name) return true;
  return false;
}

std::string to_safetensors(const std::vector<std::pair<std::string, Tensor>>& tensors,
                           const std::map<std::string, std::string>& metadata) {
  constexpr const char* fn = "to_safetensors";
  std::set<std::string> seen;
  std::vector<Tensor> contig;
  contig.reserve(tensors.size());
  ordered_json header = ordered_json::object();
  if (!metadata.empty()) {
    ordered_json m = ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header[kMetadataKey] = std::move(m);
  }
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    if (name.empty()) attn::detail::fail(fn, "tensor names must be non-empty");
    if (name == kMetadataKey) attn::detail::fail(fn, "a tensor cannot be called \"", name, "\"");
    if (!seen.insert(name).second) attn::detail::fail(fn, "tensor name '", name, "' is repeated");
    if (!t.defined()) attn::detail::fail(fn, "tensor '", name, "' is undefined");
    Tensor c = t.detach().contiguous();
    const uint64_t nbytes = uint64_t(c.numel()) * itemsize(c.dtype());
    ordered_json e = ordered_json::object();
    e["dtype"] = st_dtype(c.dtype());
    e["shape"] = c.shape();
    e["data_offsets"] = {offset, offset + nbytes};
    header[name] = std::move(e);
    offset += nbytes;
    contig.push_back(std::move(c));
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const ordered_json::exception& e) {
    attn::detail::fail(fn, "names and metadata must be valid UTF-8: ", e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  std::string out;
  out.reserve(8 + text.size() + offset);
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out.push_back(char((n >> (8 * i)) & 0xff));
  out += text;
  for (const Tensor& c : contig) {
    const std::size_t nbytes = std::size_t(c.numel()) * itemsize(c.dtype());
    if (nbytes > 0) out.append(static_cast<const char*>(c.raw_data()), nbytes);
  }
  return out;
}

void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata) {
  write_file_atomic(path, to_safetensors(tensors, metadata));
}

SafeTensors from_safetensors(std::string_view bytes, const std::string& what) {
  return Reader(bytes, what).read();
}

SafeTensors load_safetensors(const std::string& path) {
  return from_safetensors(detail::read_whole_file("load_safetensors", path), path);
}

}  // namespace attn::io

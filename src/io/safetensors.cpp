// The safetensors format: writer and a validating reader.
#include <attn/autograd.h>
#include <attn/io.h>
#include <attn/ops.h>

#include <algorithm>
#include <bit>
#include <cstring>
#include <limits>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <set>

#include "../common/error.h"
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

struct Record {
  std::string name;
  Dtype dtype = Dtype::Float32;
  Shape shape;
  uint64_t begin = 0, end = 0;  // in the data section
  bool u8 = false;              // "U8": bytes only (SafeTensorsFile::Entry::u8)
};

struct Layout {
  std::vector<Record> entries;  // sorted by offset
  std::map<std::string, std::string> metadata;
};

class Reader {
 public:
  explicit Reader(const std::string& what) : what_(what) {}

  template <typename... Args>
  [[noreturn]] void fail(const Args&... args) const {
    attn::detail::fail("load_safetensors", "'", what_, "': ", args...);
  }

  // The header length N from the first 8 bytes of a file of `total` bytes.
  uint64_t header_length(std::string_view first8, uint64_t total) const {
    if (total < 8 || first8.size() < 8)
      fail("file is ", total, " bytes, too short for the 8-byte header length");
    uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = (n << 8) | uint8_t(first8[std::size_t(i)]);
    if (n > kMaxHeaderBytes)
      fail("header length ", n, " exceeds the limit of ", kMaxHeaderBytes, " bytes");
    if (n > total - 8) fail("header length ", n, " exceeds file size ", total, " minus 8");
    if (n < 2) fail("header length ", n, " is too short for a JSON object");
    return n;
  }

  // The tensors (sorted by offset, which is file order) and metadata the N-byte JSON `header`
  // describes, checked against a data section of `data_size` bytes.
  Layout layout(std::string_view header, uint64_t data_size) {
    if (header[0] != '{') fail("header does not start with '{'");
    json root = parse(header);
    if (!root.is_object()) fail("header is not a JSON object");

    Layout out;
    std::vector<Record>& entries = out.entries;
    for (auto it = root.begin(); it != root.end(); ++it) {
      if (it.key() == kMetadataKey) {
        read_metadata(it.value(), out.metadata);
        continue;
      }
      entries.push_back(read_entry(it.key(), it.value()));
    }

    // The data must be covered exactly: sorted by offset, each tensor starting where the
    // previous one ended, the last ending at the end of the file.
    std::stable_sort(entries.begin(), entries.end(), [](const Record& a, const Record& b) {
      return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
    });
    uint64_t pos = 0;
    const Record* prev = nullptr;
    for (const Record& e : entries) {
      if (e.end > data_size)
        fail("tensor '", e.name, "' data_offsets [", e.begin, ", ", e.end,
             "] exceed the data section of ", data_size, " bytes");
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
    if (pos != data_size)
      fail("tensors cover ", pos, " bytes but the data section holds ", data_size,
           " bytes (trailing bytes)");
    return out;
  }

  // After e's bytes were copied into t: a BOOL tensor may hold only 0 and 1.
  void check_bools(const Record& e, const Tensor& t) const {
    if (e.dtype != Dtype::Bool) return;
    const auto* p = static_cast<const uint8_t*>(t.raw_data());
    const std::size_t n = std::size_t(e.end - e.begin);
    for (std::size_t i = 0; i < n; ++i)
      if (p[i] > 1)
        fail("tensor '", e.name, "' (BOOL) holds byte ", int(p[i]), " at element ", i,
             "; expected 0 or 1");
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

  Record read_entry(const std::string& name, const json& v) const {
    Record e;
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
    } else if (ds == "U8") {  // bytes, as MXFP4 blocks and scales (itemsize 1, as BOOL's)
      e.dtype = Dtype::Bool;
      e.u8 = true;
    } else {
      fail("tensor '", name, "' has unsupported dtype ", ds,
           " (supported: F32, I64, BOOL, BF16, F16, and U8 as bytes)");
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

namespace {

// A safetensors file as pieces to write one after another: the length and the header, then
// each tensor's bytes where they lie (a tensor that is not contiguous on the CPU is copied).
struct Serialized {
  std::string head;
  std::vector<Tensor> data;
  std::vector<std::shared_ptr<const std::vector<uint8_t>>> bytes;  // after data

  std::vector<std::string_view> pieces() const {
    std::vector<std::string_view> out{head};
    for (const Tensor& c : data) {
      const std::size_t nbytes = std::size_t(c.numel()) * itemsize(c.dtype());
      if (nbytes > 0) out.emplace_back(static_cast<const char*>(c.raw_data()), nbytes);
    }
    for (const auto& b : bytes)
      if (!b->empty()) out.emplace_back(reinterpret_cast<const char*>(b->data()), b->size());
    return out;
  }
};

Serialized serialize(const std::vector<std::pair<std::string, Tensor>>& tensors,
                     const std::map<std::string, std::string>& metadata,
                     const std::vector<ByteTensor>& u8) {
  constexpr const char* fn = "to_safetensors";
  std::set<std::string> seen;
  Serialized out;
  out.data.reserve(tensors.size());
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
    Tensor c = t.detach();
    if (c.is_cuda()) c = c.cpu();
    c = c.contiguous();
    const uint64_t nbytes = uint64_t(c.numel()) * itemsize(c.dtype());
    ordered_json e = ordered_json::object();
    e["dtype"] = st_dtype(c.dtype());
    e["shape"] = c.shape();
    e["data_offsets"] = {offset, offset + nbytes};
    header[name] = std::move(e);
    offset += nbytes;
    out.data.push_back(std::move(c));
  }
  for (const ByteTensor& b : u8) {
    const std::string& name = b.name;
    if (name.empty()) attn::detail::fail(fn, "tensor names must be non-empty");
    if (name == kMetadataKey) attn::detail::fail(fn, "a tensor cannot be called \"", name, "\"");
    if (!seen.insert(name).second) attn::detail::fail(fn, "tensor name '", name, "' is repeated");
    if (!b.bytes) attn::detail::fail(fn, "byte tensor '", name, "' has no bytes");
    uint64_t numel = 1;
    for (const int64_t d : b.shape) {
      if (d < 0) attn::detail::fail(fn, "byte tensor '", name, "' has shape ", shape_str(b.shape));
      numel *= uint64_t(d);
    }
    if (numel != b.bytes->size())
      attn::detail::fail(fn, "byte tensor '", name, "' of shape ", shape_str(b.shape), " needs ",
                         numel, " bytes, got ", b.bytes->size());
    ordered_json e = ordered_json::object();
    e["dtype"] = "U8";
    e["shape"] = b.shape;
    e["data_offsets"] = {offset, offset + numel};
    header[name] = std::move(e);
    offset += numel;
    out.bytes.push_back(b.bytes);
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const ordered_json::exception& e) {
    attn::detail::fail(fn, "names and metadata must be valid UTF-8: ", e.what());
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out.head.push_back(char((n >> (8 * i)) & 0xff));
  out.head += text;
  return out;
}

}  // namespace

std::string to_safetensors(const std::vector<std::pair<std::string, Tensor>>& tensors,
                           const std::map<std::string, std::string>& metadata,
                           const std::vector<ByteTensor>& u8) {
  return detail::concat(serialize(tensors, metadata, u8).pieces());
}

void save_safetensors(const std::string& path,
                      const std::vector<std::pair<std::string, Tensor>>& tensors,
                      const std::map<std::string, std::string>& metadata,
                      const std::vector<ByteTensor>& u8) {
  const Serialized s = serialize(tensors, metadata, u8);
  const std::vector<std::string_view> pieces = s.pieces();
  detail::write_file_atomic("write_file_atomic", path, pieces);
}

// ---- SafeTensorsFile
// -----------------------------------------------------------------------------

struct SafeTensorsFile::Impl {
  std::string what;
  Layout layout;
  std::vector<SafeTensorsFile::Entry> entries;  // layout.entries, as the API shows them
  std::map<std::string, std::size_t> index;     // name -> position in both
  uint64_t data_start = 0;                      // where the data section starts
  std::optional<detail::ReadOnlyFile> file;     // the source: a file, or
  std::string_view bytes;                       // its bytes in memory,
  std::string owned;                            // held here when from_bytes was given them
  mutable std::once_flag map_once;              // map(): the file mapped once, when first asked
  mutable std::shared_ptr<void> mapping;

  // Over `bytes`: the header read from them.
  void init_in_memory() {
    const uint64_t n = Reader(what).header_length(bytes.substr(0, 8), bytes.size());
    data_start = 8 + n;
    init(bytes.substr(8, n), bytes.size() - 8 - n);
  }
  void init(std::string_view header, uint64_t data_size) {
    layout = Reader(what).layout(header, data_size);
    for (const Record& e : layout.entries) {
      index.emplace(e.name, entries.size());
      entries.push_back({e.name, e.dtype, e.shape, e.u8});
    }
  }
  const Record& entry(const std::string& name) const {
    auto it = index.find(name);
    if (it == index.end())
      attn::detail::fail("SafeTensorsFile::read", "'", what, "' has no tensor '", name, "'");
    return layout.entries[it->second];
  }
  // The entry `name` as a tensor: attn::Error for a U8 one, which has no tensor dtype.
  const Record& tensor_entry(const std::string& name) const {
    const Record& e = entry(name);
    if (e.u8)
      Reader(what).fail("tensor '", name,
                        "' is U8 (bytes, such as MXFP4 blocks and scales): attn has no uint8 "
                        "tensors; read its bytes with read_u8");
    return e;
  }
  // e's bytes (e.end - e.begin of them) into dst.
  void read_raw(const Record& e, void* dst) const {
    const std::size_t n = std::size_t(e.end - e.begin);
    if (n == 0) return;
    if (file) {
      if (!file->read_at(data_start + e.begin, dst, n))
        Reader(what).fail("the file ended before tensor '", e.name, "' (bytes ",
                          data_start + e.begin, " to ", data_start + e.end,
                          ") was read: it changed after it was opened");
    } else {
      std::memcpy(dst, bytes.data() + data_start + e.begin, n);
    }
  }
  // e's bytes into t (e's byte size), then the BOOL check.
  void read_bytes(const Record& e, const Tensor& t) const {
    read_raw(e, t.raw_data());
    Reader(what).check_bools(e, t);
  }
};

SafeTensorsFile::SafeTensorsFile(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}

SafeTensorsFile::SafeTensorsFile(const std::string& path) {
  detail::ReadOnlyFile file("load_safetensors", path);
  if (!file.regular()) {  // a pipe or a device: its bytes, in memory
    *this = from_bytes(file.read_rest(), path);
    return;
  }
  auto impl = std::make_shared<Impl>();
  impl->what = path;
  const uint64_t size = file.size();
  Reader reader(impl->what);
  char first8[8] = {};
  const bool whole = size >= 8 && file.read_at(0, first8, 8);
  const uint64_t n = reader.header_length(std::string_view(first8, whole ? 8 : 0), size);
  std::string header(std::size_t(n), '\0');
  if (!file.read_at(8, header.data(), header.size()))
    reader.fail("the file ended inside its ", n, "-byte header: it changed after it was opened");
  impl->data_start = 8 + n;
  impl->init(header, size - 8 - n);
  impl->file.emplace(std::move(file));
  impl_ = std::move(impl);
}

SafeTensorsFile SafeTensorsFile::from_bytes(std::string bytes, const std::string& what) {
  auto impl = std::make_shared<Impl>();
  impl->what = what;
  impl->owned = std::move(bytes);
  impl->bytes = impl->owned;
  impl->init_in_memory();
  return SafeTensorsFile(std::move(impl));
}

SafeTensors from_safetensors(std::string_view bytes, const std::string& what) {
  // A reader viewing `bytes`, which outlive it: the same checks and reads, no copy of the input.
  auto impl = std::make_shared<SafeTensorsFile::Impl>();
  impl->what = what;
  impl->bytes = bytes;
  impl->init_in_memory();
  return SafeTensorsFile(std::move(impl)).read_all();
}

const std::string& SafeTensorsFile::what() const { return impl_->what; }
const char* SafeTensorsFile::dtype_name(Dtype dtype) { return st_dtype(dtype); }
const std::vector<SafeTensorsFile::Entry>& SafeTensorsFile::entries() const {
  return impl_->entries;
}
const std::map<std::string, std::string>& SafeTensorsFile::metadata() const {
  return impl_->layout.metadata;
}

const SafeTensorsFile::Entry* SafeTensorsFile::find(const std::string& name) const {
  auto it = impl_->index.find(name);
  return it == impl_->index.end() ? nullptr : &impl_->entries[it->second];
}

Tensor SafeTensorsFile::read(const std::string& name) const {
  const Record& e = impl_->tensor_entry(name);
  Tensor t = attn::empty(e.shape, e.dtype);
  impl_->read_bytes(e, t);
  return t;
}

void SafeTensorsFile::read_into(const std::string& name, Tensor& dst) const {
  constexpr const char* fn = "SafeTensorsFile::read_into";
  const Record& e = impl_->tensor_entry(name);
  if (!dst.defined()) attn::detail::fail(fn, "the destination of '", name, "' is undefined");
  if (dst.shape() != e.shape)
    attn::detail::fail(fn, "tensor '", name, "' of '", impl_->what, "' has shape ",
                       shape_str(e.shape), " but the destination has shape ",
                       shape_str(dst.shape()));
  if (!dst.is_cuda() && dst.is_contiguous() && dst.dtype() == e.dtype) {
    impl_->read_bytes(e, dst);
    attn::detail::bump_version(dst);
    return;
  }
  Tensor t = read(name);
  NoGradGuard no_grad;
  dst.copy_(t);
}

Tensor SafeTensorsFile::map(const std::string& name) const {
  const Record& e = impl_->tensor_entry(name);
  const uint64_t at = impl_->data_start + e.begin;
  if (!impl_->file || e.dtype == Dtype::Bool || at % itemsize(e.dtype) != 0) return read(name);
  std::call_once(impl_->map_once, [this] { impl_->mapping = impl_->file->map(); });
  if (!impl_->mapping) return read(name);
  auto storage = std::make_shared<Storage>();
  storage->data = static_cast<char*>(impl_->mapping.get()) + at;
  storage->nbytes = std::size_t(e.end - e.begin);
  storage->owner = impl_->mapping;
  auto t = std::make_shared<TensorImpl>();
  t->storage = std::move(storage);
  t->sizes = e.shape;
  t->strides.assign(e.shape.size(), 1);
  for (std::size_t i = e.shape.size(); i-- > 1;) t->strides[i - 1] = t->strides[i] * e.shape[i];
  t->dtype = e.dtype;
  return Tensor(t);
}

SafeTensors SafeTensorsFile::read_all() const {
  SafeTensors out;
  out.what = impl_->what;
  out.metadata = impl_->layout.metadata;
  for (const Record& e : impl_->layout.entries) {
    Tensor t = attn::empty(e.shape, impl_->tensor_entry(e.name).dtype);
    impl_->read_bytes(e, t);
    out.tensors.emplace_back(e.name, std::move(t));
  }
  return out;
}

std::vector<uint8_t> SafeTensorsFile::read_u8(const std::string& name) const {
  const Record& e = impl_->entry(name);
  if (!e.u8)
    Reader(impl_->what)
        .fail("tensor '", name, "' is ", st_dtype(e.dtype), ", not U8: read it with read()");
  std::vector<uint8_t> out(std::size_t(e.end - e.begin));
  impl_->read_raw(e, out.data());
  return out;
}

SafeTensors load_safetensors(const std::string& path) { return SafeTensorsFile(path).read_all(); }

}  // namespace attn::io

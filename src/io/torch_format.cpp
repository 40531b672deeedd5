// attn::io::Value and the torch.save file: the archive's records around data.pkl.
#include <attn/io.h>

#include "file_internal.h"
#include "torch_internal.h"

namespace attn::io {

struct Value::Container {
  Items items;
  Entries entries, attributes;
  bool ordered = false;
};

namespace {
[[noreturn]] void wrong(const char* fn, const Value& v, const char* want) {
  attn::detail::fail(fn, "value is a ", v.kind_name(), ", not ", want);
}
}  // namespace

Value::Value(bool b) : kind_(Kind::Bool), b_(b) {}
Value::Value(int v) : kind_(Kind::Int), i_(v) {}
Value::Value(int64_t v) : kind_(Kind::Int), i_(v) {}
Value::Value(double v) : kind_(Kind::Float), f_(v) {}
Value::Value(std::string s)
    : kind_(Kind::Str), s_(std::make_shared<const std::string>(std::move(s))) {}
Value::Value(const char* s) : Value(std::string(s)) {}
Value::Value(Tensor t, bool parameter)
    : kind_(Kind::Tensor), parameter_(parameter), t_(std::move(t)) {
  if (!t_.defined()) attn::detail::fail("Value", "a tensor value must be a defined tensor");
}

Value Value::list(Items items) {
  Value v;
  v.kind_ = Kind::List;
  v.c_ = std::make_shared<Container>();
  v.c_->items = std::move(items);
  return v;
}
Value Value::tuple(Items items) {
  Value v = list(std::move(items));
  v.kind_ = Kind::Tuple;
  return v;
}
Value Value::dict(Entries entries, bool ordered) {
  Value v;
  v.kind_ = Kind::Dict;
  v.c_ = std::make_shared<Container>();
  v.c_->entries = std::move(entries);
  v.c_->ordered = ordered;
  return v;
}
Value Value::global(std::string module, std::string name) {
  Value v;
  v.kind_ = Kind::Global;
  v.s_ = std::make_shared<const std::string>(module + "." + name);
  return v;
}
const std::string& Value::as_global() const {
  if (kind_ != Kind::Global) wrong("Value::as_global", *this, "a global");
  return *s_;
}
Value Value::storage(std::shared_ptr<StorageRef> s) {
  Value v;
  v.kind_ = Kind::Storage;
  v.storage_ = std::move(s);
  return v;
}
Value Value::unsupported_tensor(std::string description) {
  Value v;
  v.kind_ = Kind::Tensor;
  v.unsupported_ = std::move(description);
  return v;
}
const std::shared_ptr<Value::StorageRef>& Value::storage_ref() const { return storage_; }

const char* Value::kind_name() const {
  switch (kind_) {
    case Kind::None: return "None";
    case Kind::Bool: return "bool";
    case Kind::Int: return "int";
    case Kind::Float: return "float";
    case Kind::Str: return "str";
    case Kind::List: return "list";
    case Kind::Tuple: return "tuple";
    case Kind::Dict: return c_->ordered ? "OrderedDict" : "dict";
    case Kind::Tensor: return parameter_ ? "Parameter" : "tensor";
    case Kind::Global: return "global";
    case Kind::Storage: return "storage";
  }
  return "?";
}

bool Value::is_container() const {
  return kind_ == Kind::List || kind_ == Kind::Tuple || kind_ == Kind::Dict;
}

bool Value::as_bool() const {
  if (kind_ != Kind::Bool) wrong("Value::as_bool", *this, "a bool");
  return b_;
}
int64_t Value::as_int() const {
  if (kind_ != Kind::Int) wrong("Value::as_int", *this, "an int");
  return i_;
}
double Value::as_float() const {
  if (kind_ == Kind::Int) return double(i_);
  if (kind_ != Kind::Float) wrong("Value::as_float", *this, "a float");
  return f_;
}
const std::string& Value::as_str() const {
  if (kind_ != Kind::Str) wrong("Value::as_str", *this, "a str");
  return *s_;
}
const Tensor& Value::as_tensor() const {
  if (kind_ != Kind::Tensor || !t_.defined()) wrong("Value::as_tensor", *this, "a tensor");
  return t_;
}
bool Value::is_parameter() const { return kind_ == Kind::Tensor && parameter_; }

Value::Items& Value::items() {
  if (kind_ != Kind::List && kind_ != Kind::Tuple) wrong("Value::items", *this, "a list or tuple");
  return c_->items;
}
const Value::Items& Value::items() const { return const_cast<Value*>(this)->items(); }
Value::Entries& Value::entries() {
  if (kind_ != Kind::Dict) wrong("Value::entries", *this, "a dict");
  return c_->entries;
}
const Value::Entries& Value::entries() const { return const_cast<Value*>(this)->entries(); }
Value::Entries& Value::attributes() {
  if (kind_ != Kind::Dict) wrong("Value::attributes", *this, "a dict");
  return c_->attributes;
}
const Value::Entries& Value::attributes() const { return const_cast<Value*>(this)->attributes(); }
bool Value::ordered() const { return kind_ == Kind::Dict && c_->ordered; }

const Value* Value::find(std::string_view key) const {
  for (const auto& [k, v] : entries())
    if (k.kind_ == Kind::Str && *k.s_ == key) return &v;
  return nullptr;
}
const Value& Value::at(std::string_view key) const {
  const Value* v = find(key);
  if (!v) attn::detail::fail("Value::at", "the dict has no key '", key, "'");
  return *v;
}
std::size_t Value::size() const {
  if (kind_ == Kind::Dict) return c_->entries.size();
  return items().size();
}
const void* Value::identity() const {
  if (c_) return c_.get();
  if (kind_ == Kind::Str) return s_.get();
  if (kind_ == Kind::Tensor && t_.defined()) return t_.impl().get();
  return nullptr;
}

Value state_dict_value(const std::vector<std::pair<std::string, Tensor>>& tensors) {
  Value::Entries entries;
  entries.reserve(tensors.size());
  for (const auto& [name, t] : tensors) {
    if (!t.defined()) attn::detail::fail("state_dict_value", "tensor '", name, "' is undefined");
    entries.emplace_back(Value(name), Value(t));
  }
  return Value::dict(std::move(entries), true);
}

std::map<std::string, Tensor> tensors_of(const Value& value) {
  if (value.kind() != Value::Kind::Dict)
    attn::detail::fail("tensors_of", "a state dict must be a dict, got a ", value.kind_name());
  std::map<std::string, Tensor> out;
  for (const auto& [k, v] : value.entries()) {
    if (k.kind() != Value::Kind::Str)
      attn::detail::fail("tensors_of", "a state dict key is a ", k.kind_name(), ", not a str");
    if (v.kind() != Value::Kind::Tensor)
      attn::detail::fail("tensors_of", "state dict entry '", k.as_str(), "' is a ", v.kind_name(),
                         ", not a tensor");
    out.emplace(k.as_str(), v.as_tensor());
  }
  return out;
}

namespace {

// The records of value's archive; `pkl` and `names` hold what the records view.
std::vector<std::pair<std::string, std::string_view>> archive_records(
    const Value& value, std::string& pkl, std::vector<std::string>& names, const char* fn) {
  std::vector<std::pair<std::string, std::string_view>> storages;
  pkl = detail::pickle_value(value, storages, fn);
  std::vector<std::pair<std::string, std::string_view>> records;
  records.emplace_back("archive/data.pkl", pkl);
  records.emplace_back("archive/byteorder", "little");
  names.reserve(storages.size());
  for (const auto& s : storages) names.push_back("archive/data/" + s.first);
  for (std::size_t i = 0; i < storages.size(); ++i)
    records.emplace_back(names[i], storages[i].second);
  records.emplace_back("archive/version", "3\n");
  return records;
}

}  // namespace

std::string to_torch_archive(const Value& value) {
  constexpr const char* fn = "save_torch";
  std::string pkl;
  std::vector<std::string> names;
  return detail::write_zip(archive_records(value, pkl, names, fn), fn);
}

void save_torch(const std::string& path, const Value& value) {
  // The tensors' bytes go to the file from where they lie: no copy of the archive in memory.
  constexpr const char* fn = "save_torch";
  std::string pkl;
  std::vector<std::string> names;
  const detail::ZipPieces z = detail::zip_pieces(archive_records(value, pkl, names, fn), fn);
  io::detail::write_file_atomic(fn, path, z.pieces);
}

namespace {

Value read_archive(std::string_view bytes, const std::string& what, std::shared_ptr<void> owner) {
  constexpr const char* fn = "load_torch";
  const detail::ZipReader zip(bytes, what, fn);
  const std::string_view* pkl = zip.find("data.pkl");
  if (!pkl)
    detail::raise<ArchiveError>(fn, "'", what, "': the archive has no '", zip.prefix(),
                                "/data.pkl' (not a torch.save file)");
  if (const std::string_view* version = zip.find("version")) {
    // PyTorch writes "3\n"; it reads versions 1 to 3 of this layout the same way.
    const std::string_view v = *version;
    if (v.empty() || v.size() > 8 || v[0] < '1' || v[0] > '3' ||
        (v.size() > 1 && v.substr(1) != "\n" && v.substr(1) != "\r\n"))
      detail::raise<UnsupportedError>(fn, "'", what, "': unsupported format version '",
                                      std::string(v.substr(0, 8)), "' (attn reads 1 to 3)");
  }
  if (const std::string_view* order = zip.find("byteorder"))
    if (*order != "little")
      detail::raise<UnsupportedError>(fn, "'", what, "': byte order '",
                                      std::string(order->substr(0, 16)),
                                      "' (attn reads little-endian files only)");
  return detail::unpickle_value(*pkl, zip, what, fn, std::move(owner));
}

}  // namespace

Value from_torch_archive(std::string_view bytes, const std::string& what) {
  return read_archive(bytes, what, nullptr);
}

Value load_torch(const std::string& path) {
  constexpr const char* fn = "load_torch";
  const io::detail::ReadOnlyFile file(fn, path);
  if (!file.regular()) return read_archive(file.read_rest(), path, nullptr);
  // The file in one 64-byte aligned block that the loaded tensors view: no second copy of it.
  std::shared_ptr<Storage> bytes;
  try {
    bytes = Storage::allocate(std::size_t(file.size()), /*zero=*/false);
  } catch (const AllocationError&) {
    attn::detail::fail_workspace(fn, double(file.size()), "the contents of '" + path + "'");
  }
  if (!file.read_at(0, bytes->data, std::size_t(file.size())))
    detail::raise<ArchiveError>(fn, "'", path,
                                "': the file ended before its size was read (it changed while "
                                "being read)");
  return read_archive(std::string_view(static_cast<const char*>(bytes->data), file.size()), path,
                      bytes->owner);
}

}  // namespace attn::io

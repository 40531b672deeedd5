// PyTorch's own file format (torch.save / torch.load since PyTorch 1.6), read and written without
// PyTorch and without running pickled code.
//
// The file is a zip archive of stored (uncompressed) entries under one directory ("archive/"):
//   archive/data.pkl     a pickle (protocol 2) of the saved object; every tensor in it refers to a
//                        storage by key through the pickle's persistent ids
//   archive/data/<key>   the raw little-endian bytes of storage <key>
//   archive/version      "3\n";  archive/byteorder  "little" (PyTorch 2.x)
// Tensors that share a storage (tied weights, views) are written as one storage and come back
// sharing it; strides and storage offsets are kept.
//
// What a file may contain is what a checkpoint needs, the set PyTorch's weights_only loader allows:
// None, bools, ints (64-bit), floats, strings, lists, tuples, dicts and collections.OrderedDict
// (with their attributes, such as a state dict's _metadata), and tensors rebuilt by
// torch._utils._rebuild_tensor_v2 / _rebuild_parameter[_with_state] from the storage classes
// torch.FloatStorage, torch.LongStorage, torch.BoolStorage, torch.BFloat16Storage and
// torch.HalfStorage. Any other global (a class or function the pickle would call) is an
// UnpicklingError naming it; a storage of another dtype (DoubleStorage, IntStorage, ...) is an
// UnsupportedError naming the entry and the dtype, never a silent conversion; a corrupt or
// truncated archive is an ArchiveError. Nothing reads out of bounds.
#pragma once

#include <attn/tensor.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace attn::io {

// The pickle holds something not allowed (a global other than the allowed ones) or is not a valid
// pickle (unknown opcode, stack underflow, truncated, nested too deeply). Python sees
// pickle.UnpicklingError, as PyTorch's weights_only loader raises.
class UnpicklingError : public Error {
 public:
  explicit UnpicklingError(const std::string& what) : Error(what) {}
};
// The zip container or its records are corrupt or inconsistent with the pickle (bad zip, missing
// data.pkl, a storage record missing or too short for a tensor's size, strides and offset).
// Python sees RuntimeError, as PyTorch's reader raises.
class ArchiveError : public Error {
 public:
  explicit ArchiveError(const std::string& what) : Error(what) {}
};
// Valid PyTorch content that attn cannot hold: a dtype other than float32 / int64 / bool /
// bfloat16 / float16, an
// integer beyond 64 bits, bytes objects, compressed zip records, writing an archive over 4 GiB.
// Python sees NotImplementedError.
class UnsupportedError : public Error {
 public:
  explicit UnsupportedError(const std::string& what) : Error(what) {}
};

// The value tree a checkpoint is made of. Copies of a list, tuple or dict Value share the container
// (as Python references do); copies of a tensor share the tensor.
class Value {
 public:
  enum class Kind {
    None,
    Bool,
    Int,
    Float,
    Str,
    List,
    Tuple,
    Dict,
    Tensor,
    Global,   // a class or function named by the pickle (only while unpickling; never returned)
    Storage,  // a storage loaded through a persistent id (only while unpickling; never returned)
  };
  using Items = std::vector<Value>;
  using Entries = std::vector<std::pair<Value, Value>>;

  Value() = default;     // None
  Value(bool b);         // NOLINT
  Value(int v);          // NOLINT
  Value(int64_t v);      // NOLINT
  Value(double v);       // NOLINT
  Value(std::string s);  // NOLINT
  Value(const char* s);  // NOLINT
  // A tensor; `parameter`: a torch.nn.Parameter (written through _rebuild_parameter).
  Value(Tensor t, bool parameter = false);  // NOLINT
  static Value list(Items items = {});
  static Value tuple(Items items = {});
  // A dict; `ordered`: a collections.OrderedDict. Keys: None, bool, int, float, str or tuples of
  // them; unique.
  static Value dict(Entries entries = {}, bool ordered = false);

  Kind kind() const { return kind_; }
  const char* kind_name() const;  // "int", "OrderedDict", "tensor", ...
  bool is_none() const { return kind_ == Kind::None; }
  bool is_container() const;  // list, tuple or dict

  // Typed access; attn::Error ("[Value::as_int] value is a str, not an int") on the wrong kind.
  bool as_bool() const;
  int64_t as_int() const;
  double as_float() const;  // an int converts
  const std::string& as_str() const;
  const Tensor& as_tensor() const;
  bool is_parameter() const;  // a tensor saved as torch.nn.Parameter

  // Lists and tuples: the items. Dicts: the (key, value) pairs in order, and the attributes set on
  // an OrderedDict (PyTorch's state dicts carry `_metadata`: str keys).
  Items& items();
  const Items& items() const;
  Entries& entries();
  const Entries& entries() const;
  Entries& attributes();
  const Entries& attributes() const;
  bool ordered() const;  // an OrderedDict

  // Dict lookup by str key (nullptr when absent) and its throwing form.
  const Value* find(std::string_view key) const;
  const Value& at(std::string_view key) const;
  // Python's `len`: items or entries.
  std::size_t size() const;

  // The shared object behind a container, tensor or str (nullptr for other scalars): equal for
  // copies of one Value, so that writers keep sharing.
  const void* identity() const;

  // Internals of the unpickler (Global and Storage values) and of the unsupported-dtype tensors it
  // defers; not for users.
  struct Container;
  struct StorageRef;
  static Value global(std::string module, std::string name);
  const std::string& as_global() const;  // "module.name"
  static Value storage(std::shared_ptr<StorageRef> s);
  const std::shared_ptr<StorageRef>& storage_ref() const;
  static Value unsupported_tensor(std::string description);
  const std::string& unsupported() const { return unsupported_; }  // "" unless such a tensor

 private:
  Kind kind_ = Kind::None;
  bool b_ = false, parameter_ = false;
  int64_t i_ = 0;
  double f_ = 0;
  std::shared_ptr<const std::string> s_;  // str, or a Global's name
  std::string unsupported_;
  Tensor t_;
  std::shared_ptr<Container> c_;
  std::shared_ptr<StorageRef> storage_;
};

// A state dict as torch.save writes one: an OrderedDict of str -> tensor, in the given order
// (Module::state_dict()'s). Tensors sharing storage stay shared in the file.
Value state_dict_value(const std::vector<std::pair<std::string, Tensor>>& tensors);
// The tensors of a loaded state dict (a dict or OrderedDict of str -> tensor), for
// Module::load_state_dict. attn::Error ("[tensors_of] ...") naming the first entry that is not a
// str -> tensor pair, or when `value` is not a dict.
std::map<std::string, Tensor> tensors_of(const Value& value);

// The bytes of a torch.save file holding `value` (tensors of any strides; storages shared between
// tensors written once). attn::Error ("[save_torch] ...") for a value that cannot be written:
// an undefined tensor, a Global/Storage value, duplicate or unhashable dict keys, a str that is
// not UTF-8, a recursive structure, nesting deeper than 1000, an archive over 4 GiB.
std::string to_torch_archive(const Value& value);
// Writes to_torch_archive(value) to `path` atomically (io::write_file_atomic).
void save_torch(const std::string& path, const Value& value);
// Reads a torch.save file (from PyTorch 1.6+ or attn); `what` names it in messages. Throws
// UnpicklingError, ArchiveError or UnsupportedError ("[load_torch] 'what': ...").
Value from_torch_archive(std::string_view bytes, const std::string& what = "<memory>");
Value load_torch(const std::string& path);

}  // namespace attn::io

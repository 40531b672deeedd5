// data.pkl of torch.save files, read: a restricted unpickler over attn::io::Value. It runs no
// code: the globals it accepts are a fixed list (those a state dict needs, as PyTorch's
// weights_only loader), each handled here by name; storages are loaded from the archive's records
// through persistent ids.
#include <algorithm>
#include <cstdint>
#include <limits>
#include <memory>
#include <unordered_map>
#include <unordered_set>

#include "pickle_common.h"

namespace attn::io {

// A storage loaded through a persistent id: ("storage", torch.FloatStorage, key, location, numel).
struct Value::StorageRef {
  std::string key, type;        // "0", "FloatStorage"
  const char* dtype_name = "";  // "float16" for the unsupported ones
  bool supported = false;
  Dtype dtype = Dtype::Float32;
  int64_t numel = 0;
  std::shared_ptr<Storage> storage;  // null when unsupported
};

namespace detail {

namespace {

class Unpickler {
 public:
  Unpickler(std::string_view p, const ZipReader& zip, const std::string& what, const char* fn,
            std::shared_ptr<void> owner)
      : p_(p), zip_(zip), what_(what), fn_(fn), owner_(std::move(owner)) {}

  ~Unpickler() {
    // Containers may form cycles (a list holding itself) or chains too deep to free recursively:
    // on failure all of them, on success those the result does not reach (it reaches no cycle and
    // nothing deeper than kMaxDepth), are emptied while all are still held here, so none frees
    // another.
    for (Value& c : created_) {
      if (ok_ && reachable_.count(c.identity())) continue;
      if (c.kind() == Value::Kind::Dict) {
        c.entries().clear();
        c.attributes().clear();
      } else {
        c.items().clear();
      }
    }
  }

  Value run() {
    Value result = loop();
    stack_.clear();
    memo_.clear();
    check_tree(result);
    ok_ = true;
    return result;
  }

 private:
  template <typename... Args>
  [[noreturn]] void bad(const Args&... args) const {
    raise<UnpicklingError>(fn_, "'", what_, "': data.pkl byte ", op_at_, ": ", args...);
  }
  template <typename E, typename... Args>
  [[noreturn]] void fail_as(const Args&... args) const {
    raise<E>(fn_, "'", what_, "': ", args...);
  }

  // ---- reading ----
  std::string_view take(std::size_t n) {
    if (p_.size() - pos_ < n)
      bad("truncated pickle (", n, " bytes needed, ", p_.size() - pos_, " left)");
    std::string_view s = p_.substr(pos_, n);
    pos_ += n;
    return s;
  }
  uint64_t le(std::size_t n) {
    const std::string_view s = take(n);
    uint64_t v = 0;
    for (std::size_t i = n; i-- > 0;) v = (v << 8) | uint8_t(s[i]);
    return v;
  }
  std::string line() {
    const std::size_t nl = p_.find('\n', pos_);
    if (nl == std::string_view::npos || nl - pos_ > 1000) bad("GLOBAL name is not a line");
    std::string s(p_.substr(pos_, nl - pos_));
    pos_ = nl + 1;
    return s;
  }
  Value string(std::size_t n) {
    if (n > p_.size()) bad("string of ", n, " bytes is longer than the pickle");
    std::string_view s = take(n);
    if (!valid_utf8(s)) bad("string is not valid UTF-8");
    return Value(std::string(s));
  }

  // ---- the stack ----
  std::size_t base() const { return marks_.empty() ? 0 : marks_.back(); }
  void need(std::size_t n, const char* op) {
    if (stack_.size() - base() < n) bad(op, " needs ", n, " item(s) on the stack");
  }
  Value pop(const char* op) {
    need(1, op);
    Value v = std::move(stack_.back());
    stack_.pop_back();
    return v;
  }
  Value& top(const char* op) {
    need(1, op);
    return stack_.back();
  }
  std::vector<Value> pop_mark(const char* op) {
    if (marks_.empty()) bad(op, " without a MARK");
    const std::size_t m = marks_.back();
    marks_.pop_back();
    std::vector<Value> items(std::make_move_iterator(stack_.begin() + std::ptrdiff_t(m)),
                             std::make_move_iterator(stack_.end()));
    stack_.resize(m);
    return items;
  }
  Value made(Value v) {
    created_.push_back(v);
    return v;
  }
  void set_item(Value& dict, Value key, Value value) {
    if (dict.kind() != Value::Kind::Dict) bad("SETITEM(S) on a ", dict.kind_name(), ", not a dict");
    auto& index = keys_[dict.identity()];
    const std::string canon = key_canon(key, 0, [&](const auto&... a) { bad(a...); });
    // Keys are compared through their canonical text: bound the work that repeated references to
    // one huge key could make.
    if (canon.size() > key_budget_) bad("the dict keys add up to too many bytes");
    key_budget_ -= canon.size();
    auto& entries = dict.entries();
    auto [it, inserted] = index.emplace(canon, entries.size());
    if (inserted)
      entries.emplace_back(std::move(key), std::move(value));
    else
      entries[it->second].second = std::move(value);
  }
  void append(Value& list, Value item, const char* op) {
    if (list.kind() != Value::Kind::List) bad(op, " on a ", list.kind_name(), ", not a list");
    list.items().push_back(std::move(item));
  }

  Value loop() {
    while (true) {
      op_at_ = pos_;
      const auto op = uint8_t(take(1)[0]);
      switch (op) {
        case 0x80: {  // PROTO
          const auto v = uint8_t(take(1)[0]);
          if (v > 5) bad("pickle protocol ", int(v), " is not supported (0 to 5)");
          break;
        }
        case 0x95: take(8); break;  // FRAME: a hint for readers of streams
        case '.': {                 // STOP
          Value v = pop("STOP");
          return v;
        }
        case '(': marks_.push_back(stack_.size()); break;  // MARK
        case '0': pop("POP"); break;
        case '1': pop_mark("POP_MARK"); break;
        case '2': {
          Value v = top("DUP");
          stack_.push_back(std::move(v));
          break;
        }
        case 'N': stack_.emplace_back(); break;
        case 0x88: stack_.emplace_back(true); break;
        case 0x89: stack_.emplace_back(false); break;
        case 'J': stack_.emplace_back(int64_t(int32_t(uint32_t(le(4))))); break;  // BININT
        case 'K': stack_.emplace_back(int64_t(le(1))); break;                     // BININT1
        case 'M': stack_.emplace_back(int64_t(le(2))); break;                     // BININT2
        case 0x8a: stack_.push_back(long_int(le(1))); break;                      // LONG1
        case 0x8b: stack_.push_back(long_int(le(4))); break;                      // LONG4
        case 'G': {                                                               // BINFLOAT
          const std::string_view s = take(8);
          uint64_t bits = 0;
          for (char c : s) bits = (bits << 8) | uint8_t(c);
          double d;
          std::memcpy(&d, &bits, 8);
          stack_.emplace_back(d);
          break;
        }
        case 'X': stack_.push_back(string(le(4))); break;   // BINUNICODE
        case 0x8c: stack_.push_back(string(le(1))); break;  // SHORT_BINUNICODE
        case 0x8d: stack_.push_back(string(le(8))); break;  // BINUNICODE8
        case 'U': stack_.push_back(string(le(1))); break;   // SHORT_BINSTRING (Python 2 str)
        case 'T': {                                         // BINSTRING
          const int64_t n = int32_t(uint32_t(le(4)));
          if (n < 0) bad("BINSTRING with a negative length");
          stack_.push_back(string(std::size_t(n)));
          break;
        }
        case 'C':
        case 'B':
        case 0x8e:
          fail_as<UnsupportedError>("data.pkl byte ", op_at_,
                                    ": bytes objects are not supported in attn checkpoints");
        case ')': stack_.push_back(made(Value::tuple())); break;
        case 't': stack_.push_back(made(Value::tuple(pop_mark("TUPLE")))); break;
        case 0x85:
        case 0x86:
        case 0x87: {  // TUPLE1..3
          const std::size_t n = op - 0x84;
          need(n, "TUPLEn");
          Value::Items items(std::make_move_iterator(stack_.end() - std::ptrdiff_t(n)),
                             std::make_move_iterator(stack_.end()));
          stack_.resize(stack_.size() - n);
          stack_.push_back(made(Value::tuple(std::move(items))));
          break;
        }
        case ']': stack_.push_back(made(Value::list())); break;
        case 'l': stack_.push_back(made(Value::list(pop_mark("LIST")))); break;
        case 'a': {
          Value item = pop("APPEND");
          append(top("APPEND"), std::move(item), "APPEND");
          break;
        }
        case 'e': {
          auto items = pop_mark("APPENDS");
          Value& list = top("APPENDS");
          for (Value& v : items) append(list, std::move(v), "APPENDS");
          break;
        }
        case '}': stack_.push_back(made(Value::dict())); break;
        case 'd': {
          auto items = pop_mark("DICT");
          Value d = made(Value::dict());
          set_items(d, items, "DICT");
          stack_.push_back(std::move(d));
          break;
        }
        case 's': {
          Value v = pop("SETITEM");
          Value k = pop("SETITEM");
          set_item(top("SETITEM"), std::move(k), std::move(v));
          break;
        }
        case 'u': {
          auto items = pop_mark("SETITEMS");
          set_items(top("SETITEMS"), items, "SETITEMS");
          break;
        }
        case 'c': {  // GLOBAL
          std::string module = line();
          std::string name = line();
          push_global(std::move(module), std::move(name));
          break;
        }
        case 0x93: {  // STACK_GLOBAL
          Value name = pop("STACK_GLOBAL"), module = pop("STACK_GLOBAL");
          if (name.kind() != Value::Kind::Str || module.kind() != Value::Kind::Str)
            bad("STACK_GLOBAL needs two strings");
          push_global(module.as_str(), name.as_str());
          break;
        }
        case 'R': {  // REDUCE
          Value args = pop("REDUCE");
          Value func = pop("REDUCE");
          stack_.push_back(reduce(func, args));
          break;
        }
        case 'b': {  // BUILD
          Value state = pop("BUILD");
          Value& inst = top("BUILD");
          if (!inst.ordered())
            bad("BUILD (setting attributes) on a ", inst.kind_name(),
                "; attn allows it on OrderedDict only");
          if (state.kind() != Value::Kind::Dict) bad("BUILD with a ", state.kind_name(), " state");
          for (auto& kv_state : state.entries()) {
            const Value& k = kv_state.first;
            const Value& v = kv_state.second;
            if (k.kind() != Value::Kind::Str) bad("BUILD with an attribute name that is not a str");
            // obj.__dict__.update(state): a name set again replaces its value.
            auto& attrs = inst.attributes();
            auto same = [&](const auto& kv) { return kv.first.as_str() == k.as_str(); };
            if (auto it = std::find_if(attrs.begin(), attrs.end(), same); it != attrs.end())
              it->second = v;
            else
              attrs.emplace_back(k, v);
          }
          break;
        }
        case 'Q': {  // BINPERSID
          Value pid = pop("BINPERSID");
          stack_.push_back(persistent_load(pid));
          break;
        }
        case 'h': get(le(1)); break;
        case 'j': get(le(4)); break;
        case 'q': put(le(1)); break;
        case 'r': put(le(4)); break;
        case 0x94: put(memo_.size()); break;  // MEMOIZE
        default: {
          std::string shown = op >= 0x20 && op < 0x7f ? std::string(" '") + char(op) + "'" : "";
          bad("unsupported pickle opcode 0x", "0123456789abcdef"[op >> 4],
              "0123456789abcdef"[op & 15], shown,
              " (attn.load reads the opcodes of state dicts; objects of other kinds are not "
              "allowed)");
        }
      }
    }
  }

  Value long_int(uint64_t n) {
    if (n > 8)
      fail_as<UnsupportedError>("data.pkl byte ", op_at_, ": an integer of ", n,
                                " bytes (attn holds 64-bit integers)");
    const std::string_view s = take(std::size_t(n));
    if (n == 0) return Value(int64_t(0));
    uint64_t v = 0;
    for (std::size_t i = n; i-- > 0;) v = (v << 8) | uint8_t(s[i]);
    if (n < 8 && (uint8_t(s[n - 1]) & 0x80)) v |= ~uint64_t(0) << (8 * n);  // sign-extend
    return Value(int64_t(v));
  }

  void set_items(Value& dict, std::vector<Value>& items, const char* op) {
    if (items.size() % 2) bad(op, " with an odd number of items (", items.size(), ")");
    for (std::size_t i = 0; i < items.size(); i += 2)
      set_item(dict, std::move(items[i]), std::move(items[i + 1]));
  }

  void get(uint64_t i) {
    auto it = memo_.find(i);
    if (it == memo_.end()) bad("memo entry ", i, " is read before it is written");
    stack_.push_back(it->second);
  }
  void put(uint64_t i) { memo_[i] = top("PUT"); }

  void push_global(std::string module, std::string name) {
    std::string full = module + "." + name;
    if (!allowed_global(full))
      bad("Unsupported global: ", full,
          ". attn.load never runs pickled code: it allows only the classes and functions a "
          "state dict needs (collections.OrderedDict, torch._utils._rebuild_tensor_v2, "
          "torch._utils._rebuild_parameter, torch.Size, torch.FloatStorage and the other "
          "storage classes)");
    stack_.push_back(Value::global(std::move(module), std::move(name)));
  }

  // ---- REDUCE targets ----
  const Value::Items& args_of(const Value& args, const std::string& f, std::size_t lo,
                              std::size_t hi) {
    if (args.kind() != Value::Kind::Tuple) bad(f, " called with ", args.kind_name(), " arguments");
    const auto& a = args.items();
    if (a.size() < lo || a.size() > hi)
      bad(f, " called with ", a.size(), " arguments (expected ", lo, lo == hi ? "" : " to ",
          lo == hi ? std::string() : std::to_string(hi), ")");
    return a;
  }

  Value reduce(const Value& func, const Value& args) {
    if (func.kind() != Value::Kind::Global)
      bad("REDUCE calls a ", func.kind_name(), ", not an allowed function");
    std::string f = func.as_global();
    if (f == kOrderedDict) {
      const auto& a = args_of(args, f, 0, 1);
      Value d = made(Value::dict({}, true));
      if (!a.empty()) {
        if (a[0].kind() != Value::Kind::List && a[0].kind() != Value::Kind::Tuple)
          bad("OrderedDict(x) with x a ", a[0].kind_name());
        for (const Value& kv : a[0].items()) {
          if (kv.kind() != Value::Kind::Tuple || kv.items().size() != 2)
            bad("OrderedDict(items) needs (key, value) pairs");
          set_item(d, kv.items()[0], kv.items()[1]);
        }
      }
      return d;
    }
    if (f == kSize) {
      const auto& a = args_of(args, f, 1, 1);
      if (a[0].kind() != Value::Kind::Tuple) bad("torch.Size(x) with x a ", a[0].kind_name());
      for (const Value& v : a[0].items())
        if (v.kind() != Value::Kind::Int) bad("torch.Size holds a ", v.kind_name());
      return a[0];
    }
    if (f == kRebuildTensor) return rebuild_tensor(args_of(args, f, 6, 7));
    if (f == kRebuildParameter || f == kRebuildParameterState) {
      const bool with_state = f == kRebuildParameterState;
      const auto& a = args_of(args, f, with_state ? 4 : 3, with_state ? 4 : 3);
      if (a[0].kind() != Value::Kind::Tensor) bad(f, "'s data is a ", a[0].kind_name());
      if (a[1].kind() != Value::Kind::Bool) bad(f, "'s requires_grad is a ", a[1].kind_name());
      if (with_state && !a[3].is_none() &&
          !(a[3].kind() == Value::Kind::Dict && a[3].entries().empty()))
        fail_as<UnsupportedError>("a Parameter with Python attributes (", f, " with a state)");
      if (!a[0].unsupported().empty()) return a[0];
      // A new tensor on the data's storage, as torch.nn.Parameter(data, requires_grad) is: the
      // data tensor, which the pickle may hold elsewhere too, stays as it is.
      const TensorImpl& data = *a[0].as_tensor().impl();
      auto impl = std::make_shared<TensorImpl>();
      impl->storage = data.storage;
      impl->sizes = data.sizes;
      impl->strides = data.strides;
      impl->offset = data.offset;
      impl->dtype = data.dtype;
      Tensor t(impl);
      if (a[1].as_bool()) {
        if (t.dtype() != Dtype::Float32)
          fail_as<ArchiveError>("a Parameter of dtype ", dtype_name(t.dtype()),
                                " requires grad (only float32 tensors can in attn)");
        t.requires_grad_(true);
      }
      return Value(t, true);
    }
    bad("REDUCE calls ", f, ", which attn.load does not allow");
  }

  Value rebuild_tensor(const Value::Items& a) {
    if (a[0].kind() != Value::Kind::Storage)
      bad("_rebuild_tensor_v2's storage is a ", a[0].kind_name());
    const Value::StorageRef& s = *a[0].storage_ref();
    if (a[1].kind() != Value::Kind::Int)
      bad("_rebuild_tensor_v2's storage offset is a ", a[1].kind_name());
    if (a[2].kind() != Value::Kind::Tuple || a[3].kind() != Value::Kind::Tuple)
      bad("_rebuild_tensor_v2's size and stride must be tuples");
    if (a[4].kind() != Value::Kind::Bool)
      bad("_rebuild_tensor_v2's requires_grad is a ", a[4].kind_name());
    if (a[5].kind() != Value::Kind::Dict)
      bad("_rebuild_tensor_v2's backward hooks are a ", a[5].kind_name());
    if (a.size() == 7 && !a[6].is_none() &&
        !(a[6].kind() == Value::Kind::Dict && a[6].entries().empty()))
      fail_as<UnsupportedError>("a tensor with Python metadata (_rebuild_tensor_v2 with metadata)");
    const auto& size = a[2].items();
    const auto& stride = a[3].items();
    if (size.size() != stride.size())
      fail_as<ArchiveError>("storage '", s.key, "': a tensor with ", size.size(), " sizes and ",
                            stride.size(), " strides");
    if (size.size() > 64)
      fail_as<ArchiveError>("storage '", s.key, "': a tensor of ", size.size(), " dims");
    Shape sizes, strides;
    for (std::size_t i = 0; i < size.size(); ++i) {
      if (size[i].kind() != Value::Kind::Int || stride[i].kind() != Value::Kind::Int)
        bad("_rebuild_tensor_v2's sizes and strides must be ints");
      sizes.push_back(size[i].as_int());
      strides.push_back(stride[i].as_int());
    }
    const int64_t offset = a[1].as_int();
    const std::string shape = shape_str(sizes);
    auto corrupt = [&](const auto&... args) {
      fail_as<ArchiveError>("storage '", s.key, "' (", s.type, " of ", s.numel,
                            " elements): a tensor of size ", shape, ", stride ", shape_str(strides),
                            " and offset ", offset, " ", args...);
    };
    // Sizes whose product, zeros counted as ones, fits int64 (so that contiguous strides do).
    const int64_t max = std::numeric_limits<int64_t>::max() / 16;
    int64_t prod = 1;
    bool empty = false;
    for (int64_t d : sizes) {
      if (d < 0) corrupt("has a negative size");
      if (d == 0) empty = true;
      if (d > 1 && prod > max / d) corrupt("has too many elements");
      if (d > 1) prod *= d;
    }
    for (int64_t st : strides)
      if (st < 0) corrupt("has a negative stride");
    if (offset < 0) corrupt("has a negative offset");
    if (empty) {
      if (offset > s.numel) corrupt("starts past the end of the storage");
    } else {
      // The last element's index, offset + sum (size - 1) * stride, inside the storage.
      int64_t last = offset;
      for (std::size_t i = 0; i < sizes.size(); ++i) {
        const int64_t n = sizes[i] - 1;
        if (n > 0 && strides[i] > (s.numel - last) / n)
          corrupt("reaches past the end of the storage");
        last += n * strides[i];
      }
      if (last >= s.numel) corrupt("reaches past the end of the storage");
    }
    if (!s.supported)
      return Value::unsupported_tensor(std::string("a ") + s.dtype_name + " tensor (torch." +
                                       s.type + ") of shape " + shape);
    auto impl = std::make_shared<TensorImpl>();
    impl->storage = s.storage;
    impl->sizes = sizes;
    impl->strides = strides;
    impl->offset = offset;
    impl->dtype = s.dtype;
    Tensor t(impl);
    if (a[4].as_bool()) {
      if (s.dtype != Dtype::Float32)
        fail_as<ArchiveError>("storage '", s.key, "': a ", dtype_name(s.dtype),
                              " tensor requires grad (only float32 tensors can in attn)");
      t.requires_grad_(true);
    }
    return Value(t);
  }

  Value persistent_load(const Value& pid) {
    if (pid.kind() != Value::Kind::Tuple || pid.items().size() != 5 ||
        pid.items()[0].kind() != Value::Kind::Str || pid.items()[0].as_str() != "storage")
      bad("a persistent id that is not ('storage', type, key, location, numel)");
    const auto& p = pid.items();
    if (p[1].kind() != Value::Kind::Global || !storage_type(p[1].as_global()))
      bad("a persistent id whose storage type is a ", p[1].kind_name(), ", not a storage class");
    if (p[2].kind() != Value::Kind::Str || p[3].kind() != Value::Kind::Str ||
        p[4].kind() != Value::Kind::Int)
      bad("a persistent id whose key, location or numel has the wrong type");
    const StorageType& type = *storage_type(p[1].as_global());
    const std::string& key = p[2].as_str();
    const int64_t numel = p[4].as_int();
    auto it = storages_.find(key);
    if (it != storages_.end()) {
      const Value::StorageRef& s = *it->second;
      if (s.type != type.name || s.numel != numel)
        fail_as<ArchiveError>("storage '", key, "' is referenced as ", s.type, " of ", s.numel,
                              " elements and as ", type.name, " of ", numel);
      return Value::storage(it->second);
    }
    auto s = std::make_shared<Value::StorageRef>();
    s->key = key;
    s->type = type.name;
    s->dtype_name = type.dtype_name;
    s->supported = type.supported;
    s->dtype = type.dtype;
    s->numel = numel;
    if (numel < 0) fail_as<ArchiveError>("storage '", key, "' has ", numel, " elements");
    if (type.supported) {
      const std::string_view* rec = zip_.find("data/" + key);
      if (!rec)
        fail_as<ArchiveError>("storage '", key, "' (", type.name, ") has no record '",
                              zip_.prefix(), "/data/", key, "' in the archive");
      const std::size_t item = itemsize(type.dtype);
      if (uint64_t(numel) > rec->size() / item || rec->size() != std::size_t(numel) * item)
        fail_as<ArchiveError>("storage '", key, "' (", type.name, ") of ", numel,
                              " elements needs ", uint64_t(numel) * item,
                              " bytes but its record holds ", rec->size());
      if (type.dtype == Dtype::Bool)
        for (std::size_t i = 0; i < rec->size(); ++i)
          if (uint8_t((*rec)[i]) > 1)
            fail_as<ArchiveError>("storage '", key, "' (BoolStorage) holds byte ",
                                  int(uint8_t((*rec)[i])), " at element ", i, "; expected 0 or 1");
      if (owner_ && reinterpret_cast<std::uintptr_t>(rec->data()) % 64 == 0) {
        // The archive's own bytes, kept alive by the tensors (PyTorch aligns records to 64).
        s->storage = std::make_shared<Storage>();
        s->storage->data = const_cast<char*>(rec->data());
        s->storage->nbytes = rec->size();
        s->storage->owner = owner_;
      } else {
        s->storage = Storage::allocate(rec->size(), false);
        if (!rec->empty()) std::memcpy(s->storage->data, rec->data(), rec->size());
      }
    }
    storages_.emplace(key, s);
    return Value::storage(s);
  }

  // ---- the result ----
  struct Seen {
    bool done = false;
    int height = 0;
  };

  void check_tree(const Value& root) {
    std::unordered_map<const void*, Seen> seen;
    std::string path;
    check(root, path, 0, seen);
    for (const auto& kv : seen) reachable_.insert(kv.first);
  }

  static std::string key_str(const Value& k) {
    switch (k.kind()) {
      case Value::Kind::Str: return "['" + k.as_str() + "']";
      case Value::Kind::Int: return "[" + std::to_string(k.as_int()) + "]";
      default: return std::string("[<") + k.kind_name() + ">]";
    }
  }

  // Returns the height of v's subtree; fails on cycles, depth, Globals, Storages and tensors of
  // unsupported dtypes, naming the path of the entry.
  int check(const Value& v, std::string& path, int depth,
            std::unordered_map<const void*, Seen>& seen) {
    auto where = [&] {
      return path.empty() ? std::string("the top-level object") : "entry " + path;
    };
    if (depth > kMaxDepth)
      fail_as<UnpicklingError>(where(), " is nested deeper than ", kMaxDepth, " levels");
    switch (v.kind()) {
      case Value::Kind::Global:
        fail_as<UnpicklingError>(where(), " is the class or function ", v.as_global(),
                                 ", not a value attn loads");
      case Value::Kind::Storage:
        fail_as<UnsupportedError>(where(), " is a bare storage (torch.", v.storage_ref()->type,
                                  "); attn loads tensors");
      case Value::Kind::Tensor:
        if (!v.unsupported().empty())
          fail_as<UnsupportedError>(
              where(), " is ", v.unsupported(),
              "; attn has float32, int64 and bool tensors only (convert it in "
              "PyTorch first, e.g. t.float())");
        return 0;
      default: break;
    }
    if (!v.is_container()) return 0;
    auto [it, inserted] = seen.emplace(v.identity(), Seen{});
    if (!inserted) {
      if (!it->second.done)
        fail_as<UnpicklingError>(where(), " contains itself (a recursive structure)");
      if (depth + it->second.height > kMaxDepth)
        fail_as<UnpicklingError>(where(), " is nested deeper than ", kMaxDepth, " levels");
      return it->second.height;
    }
    int h = 0;
    const std::size_t len = path.size();
    if (v.kind() == Value::Kind::Dict) {
      for (const auto& [k, x] : v.entries()) {
        path += key_str(k);
        // Keys too: a tuple key is a container the result holds (and must not be freed early).
        h = std::max(h, check(k, path, depth + 1, seen) + 1);
        h = std::max(h, check(x, path, depth + 1, seen) + 1);
        path.resize(len);
      }
      for (const auto& [k, x] : v.attributes()) {
        path += "." + k.as_str();
        h = std::max(h, check(x, path, depth + 1, seen) + 1);
        path.resize(len);
      }
    } else {
      for (std::size_t i = 0; i < v.items().size(); ++i) {
        path += "[" + std::to_string(i) + "]";
        h = std::max(h, check(v.items()[i], path, depth + 1, seen) + 1);
        path.resize(len);
      }
    }
    Seen& s = seen[v.identity()];
    s.done = true;
    s.height = h;
    return h;
  }

  std::string_view p_;
  std::size_t pos_ = 0, op_at_ = 0;
  std::size_t key_budget_ = 16 * p_.size() + (1u << 20);
  const ZipReader& zip_;
  const std::string& what_;
  const char* fn_;
  std::shared_ptr<void> owner_;  // of the archive's bytes, when storages may view them
  bool ok_ = false;
  std::vector<Value> stack_, created_;
  std::unordered_set<const void*> reachable_;
  std::vector<std::size_t> marks_;
  std::unordered_map<uint64_t, Value> memo_;
  std::unordered_map<const void*, std::unordered_map<std::string, std::size_t>> keys_;
  std::unordered_map<std::string, std::shared_ptr<Value::StorageRef>> storages_;
};

}  // namespace

Value unpickle_value(std::string_view pickle, const ZipReader& zip, const std::string& what,
                     const char* fn, std::shared_ptr<void> owner) {
  return Unpickler(pickle, zip, what, fn, std::move(owner)).run();
}

}  // namespace detail
}  // namespace attn::io

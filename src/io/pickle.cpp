// data.pkl of torch.save files, written: a pickler (protocol 2, the opcodes Python's pickler and
// PyTorch write) over attn::io::Value. Tensors become persistent ids of their storages, each
// storage written once however many tensors view it.
#include <algorithm>
#include <limits>
#include <unordered_map>
#include <unordered_set>

#include "pickle_common.h"

namespace attn::io::detail {

namespace {

class Pickler {
 public:
  Pickler(std::vector<std::pair<std::string, std::string_view>>& storages, const char* fn)
      : storages_(storages), fn_(fn) {}

  std::string run(const Value& v) {
    out_ += "\x80\x02";
    save(v, 0);
    out_ += '.';
    return std::move(out_);
  }

 private:
  template <typename... Args>
  [[noreturn]] void fail(const Args&... args) const {
    attn::detail::fail(fn_, args...);
  }

  void u8(uint32_t v) { out_.push_back(char(v & 0xff)); }
  void u32(uint32_t v) {
    for (int i = 0; i < 4; ++i) u8(v >> (8 * i));
  }
  void put_int(int64_t v) {
    if (v >= 0 && v < 256) {
      u8('K');
      u8(uint32_t(v));
    } else if (v >= 0 && v < 65536) {
      u8('M');
      u8(uint32_t(v));
      u8(uint32_t(v >> 8));
    } else if (v >= std::numeric_limits<int32_t>::min() &&
               v <= std::numeric_limits<int32_t>::max()) {
      u8('J');
      u32(uint32_t(int32_t(v)));
    } else {  // LONG1: the shortest two's complement
      std::string b;
      for (int i = 0; i < 8; ++i) b.push_back(char((uint64_t(v) >> (8 * i)) & 0xff));
      while (b.size() > 1 && ((b.back() == 0 && !(uint8_t(b[b.size() - 2]) & 0x80)) ||
                              (uint8_t(b.back()) == 0xff && (uint8_t(b[b.size() - 2]) & 0x80))))
        b.pop_back();
      u8(0x8a);
      u8(uint32_t(b.size()));
      out_ += b;
    }
  }
  void put_str(const std::string& s) {
    if (!valid_utf8(s)) fail("a str is not valid UTF-8");
    if (s.size() > 0xffffffffu) fail("a str of ", s.size(), " bytes is too long");
    u8('X');
    u32(uint32_t(s.size()));
    out_ += s;
  }
  void global(const char* module, const char* name) {
    out_ += 'c';
    out_ += module;
    out_ += '\n';
    out_ += name;
    out_ += '\n';
  }
  void memoize(const void* id) {
    const uint32_t i = uint32_t(memo_.size());
    memo_[id] = i;
    if (i < 256) {
      u8('q');
      u8(i);
    } else {
      u8('r');
      u32(i);
    }
  }
  bool reuse(const void* id) {
    auto it = memo_.find(id);
    if (it == memo_.end()) return false;
    if (it->second < 256) {
      u8('h');
      u8(it->second);
    } else {
      u8('j');
      u32(it->second);
    }
    return true;
  }

  void save(const Value& v, int depth) {
    if (depth > kMaxDepth) fail("the object is nested deeper than ", kMaxDepth, " levels");
    switch (v.kind()) {
      case Value::Kind::None: u8('N'); return;
      case Value::Kind::Bool: u8(v.as_bool() ? 0x88 : 0x89); return;
      case Value::Kind::Int: put_int(v.as_int()); return;
      case Value::Kind::Float: {
        const double d = v.as_float();
        uint64_t bits;
        std::memcpy(&bits, &d, 8);
        u8('G');
        for (int i = 7; i >= 0; --i) u8(uint32_t(bits >> (8 * i)));
        return;
      }
      case Value::Kind::Str: put_str(v.as_str()); return;
      case Value::Kind::Tensor: save_tensor(v); return;
      case Value::Kind::Global:
      case Value::Kind::Storage: fail("a ", v.kind_name(), " value cannot be saved");
      default: break;
    }
    const void* id = v.identity();
    if (open_.count(id)) fail("the object contains itself (a recursive structure)");
    if (reuse(id)) return;
    open_.insert(id);
    if (v.kind() == Value::Kind::Tuple) {
      const auto& items = v.items();
      if (items.empty()) {
        u8(')');
      } else {
        if (items.size() > 3) u8('(');
        for (const Value& x : items) save(x, depth + 1);
        u8(items.size() > 3 ? 't' : 0x84 + uint32_t(items.size()));
      }
      memoize(id);
    } else if (v.kind() == Value::Kind::List) {
      u8(']');
      memoize(id);
      save_batches(v.items(), depth);
    } else {
      if (v.ordered()) {
        global("collections", "OrderedDict");
        u8(')');
        u8('R');
      } else {
        u8('}');
      }
      memoize(id);
      save_entries(v.entries(), depth);
      if (!v.attributes().empty()) {
        u8('}');
        save_entries(v.attributes(), depth);
        u8('b');
      }
    }
    open_.erase(id);
  }

  void save_batches(const Value::Items& items, int depth) {
    for (std::size_t i = 0; i < items.size(); i += 1000) {
      u8('(');
      for (std::size_t j = i; j < std::min(items.size(), i + 1000); ++j) save(items[j], depth + 1);
      u8('e');
    }
  }
  void save_entries(const Value::Entries& entries, int depth) {
    std::unordered_set<std::string> keys;
    for (const auto& [k, x] : entries) {
      const std::string canon = key_canon(k, 0, [&](const auto&... a) { fail(a...); });
      if (!keys.insert(canon).second) fail("a dict has the key ", canon.substr(1), " twice");
    }
    for (std::size_t i = 0; i < entries.size(); i += 1000) {
      u8('(');
      for (std::size_t j = i; j < std::min(entries.size(), i + 1000); ++j) {
        save(entries[j].first, depth + 1);
        save(entries[j].second, depth + 1);
      }
      u8('u');
    }
  }

  void save_tensor(const Value& v) {
    const Tensor& t = v.as_tensor();
    if (reuse(v.identity())) return;
    const TensorImpl& impl = *t.impl();
    const Storage* st = impl.storage.get();
    if (v.is_parameter()) {
      global("torch._utils", "_rebuild_parameter");
      u8('(');
    }
    global("torch._utils", "_rebuild_tensor_v2");
    u8('(');
    // The persistent id ('storage', torch.FloatStorage, key, 'cpu', numel).
    u8('(');
    put_str("storage");
    global("torch", storage_name(impl.dtype));
    auto it = keys_.find(st);
    const std::size_t item = itemsize(impl.dtype);
    const int64_t numel = int64_t(st->nbytes / item);
    if (it == keys_.end()) {
      it = keys_.emplace(st, std::make_pair(std::to_string(keys_.size()), impl.dtype)).first;
      storages_.emplace_back(it->second.first, std::string_view(static_cast<const char*>(st->data),
                                                                std::size_t(numel) * item));
    } else if (it->second.second != impl.dtype) {
      fail("tensors of dtypes ", dtype_name(it->second.second), " and ", dtype_name(impl.dtype),
           " share one storage");
    }
    put_str(it->second.first);
    put_str("cpu");
    put_int(numel);
    u8('t');
    u8('Q');
    put_int(impl.offset);
    auto tuple = [&](const Shape& s) {
      u8('(');
      for (int64_t d : s) put_int(d);
      u8('t');
    };
    tuple(impl.sizes);
    tuple(impl.strides);
    // A Parameter's data is written without requires_grad, which the Parameter carries.
    u8(!v.is_parameter() && t.requires_grad() ? 0x88 : 0x89);
    global("collections", "OrderedDict");
    u8(')');
    u8('R');
    u8('t');
    u8('R');
    if (v.is_parameter()) {
      u8(t.requires_grad() ? 0x88 : 0x89);
      global("collections", "OrderedDict");
      u8(')');
      u8('R');
      u8('t');
      u8('R');
    }
    memoize(v.identity());
  }

  std::vector<std::pair<std::string, std::string_view>>& storages_;
  const char* fn_;
  std::string out_;
  std::unordered_map<const void*, uint32_t> memo_;
  std::unordered_set<const void*> open_;
  std::unordered_map<const Storage*, std::pair<std::string, Dtype>> keys_;
};

}  // namespace

std::string pickle_value(const Value& value,
                         std::vector<std::pair<std::string, std::string_view>>& storages,
                         const char* fn) {
  return Pickler(storages, fn).run(value);
}

}  // namespace attn::io::detail

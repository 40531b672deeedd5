// Shared by the pickler (pickle.cpp) and the unpickler (unpickle.cpp) of torch.save's data.pkl:
// the storage classes, the allowed globals, UTF-8 validation and dict-key equality. Not installed.
#pragma once

#include <cmath>
#include <cstring>
#include <string>
#include <string_view>

#include "torch_internal.h"

namespace attn::io::detail {

struct StorageType {
  const char* name;
  const char* dtype_name;
  bool supported;
  Dtype dtype;
};
inline constexpr StorageType kStorageTypes[] = {
    {"FloatStorage", "float32", true, Dtype::Float32},
    {"LongStorage", "int64", true, Dtype::Int64},
    {"BoolStorage", "bool", true, Dtype::Bool},
    {"DoubleStorage", "float64", false, Dtype::Float32},
    {"HalfStorage", "float16", true, Dtype::Float16},
    {"BFloat16Storage", "bfloat16", true, Dtype::BFloat16},
    {"IntStorage", "int32", false, Dtype::Float32},
    {"ShortStorage", "int16", false, Dtype::Float32},
    {"CharStorage", "int8", false, Dtype::Float32},
    {"ByteStorage", "uint8", false, Dtype::Float32},
    {"ComplexFloatStorage", "complex64", false, Dtype::Float32},
    {"ComplexDoubleStorage", "complex128", false, Dtype::Float32},
    {"QInt8Storage", "qint8", false, Dtype::Float32},
    {"QUInt8Storage", "quint8", false, Dtype::Float32},
    {"QInt32Storage", "qint32", false, Dtype::Float32},
    {"QUInt4x2Storage", "quint4x2", false, Dtype::Float32},
    {"QUInt2x4Storage", "quint2x4", false, Dtype::Float32},
};

inline const StorageType* storage_type(const std::string& global) {
  if (global.rfind("torch.", 0) != 0) return nullptr;
  const std::string name = global.substr(6);
  for (const StorageType& t : kStorageTypes)
    if (name == t.name) return &t;
  return nullptr;
}

inline const char* storage_name(Dtype d) {
  switch (d) {
    case Dtype::Float32: return "FloatStorage";
    case Dtype::Int64: return "LongStorage";
    case Dtype::Bool: return "BoolStorage";
    case Dtype::BFloat16: return "BFloat16Storage";
    case Dtype::Float16: return "HalfStorage";
  }
  return "?";
}

inline constexpr const char* kOrderedDict = "collections.OrderedDict";
inline constexpr const char* kRebuildTensor = "torch._utils._rebuild_tensor_v2";
inline constexpr const char* kRebuildParameter = "torch._utils._rebuild_parameter";
inline constexpr const char* kRebuildParameterState = "torch._utils._rebuild_parameter_with_state";
inline constexpr const char* kSize = "torch.Size";

inline bool allowed_global(const std::string& g) {
  return g == kOrderedDict || g == kRebuildTensor || g == kRebuildParameter ||
         g == kRebuildParameterState || g == kSize || storage_type(g) != nullptr;
}

inline bool valid_utf8(std::string_view s) {
  for (std::size_t i = 0; i < s.size();) {
    const auto c = uint8_t(s[i]);
    std::size_t n;
    uint32_t cp, min;
    if (c < 0x80) {
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      n = 2, cp = c & 0x1F, min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      n = 3, cp = c & 0x0F, min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      n = 4, cp = c & 0x07, min = 0x10000;
    } else {
      return false;
    }
    if (s.size() - i < n) return false;
    for (std::size_t k = 1; k < n; ++k) {
      const auto b = uint8_t(s[i + k]);
      if ((b & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) return false;
    i += n;
  }
  return true;
}

inline constexpr std::size_t kMaxKeyBytes = 1 << 16;

// tag + body, appended (GCC 12 warns falsely, -Wrestrict, on "literal" + std::string).
inline std::string tagged(char tag, const std::string& body) {
  std::string s(1, tag);
  s += body;
  return s;
}

// A dict key as a string that is equal for keys Python considers equal (1 == 1.0 == True), or
// an error for the kinds that cannot be keys here (lists, dicts, tensors).
template <typename Fail>
std::string key_canon(const Value& k, int depth, const Fail& fail) {
  if (depth > kMaxDepth) fail("a dict key is a tuple nested deeper than ", kMaxDepth, " levels");
  switch (k.kind()) {
    case Value::Kind::None: return "N";
    case Value::Kind::Bool: return k.as_bool() ? "i1" : "i0";
    case Value::Kind::Int: return tagged('i', std::to_string(k.as_int()));
    case Value::Kind::Float: {
      const double f = k.as_float();
      if (f == std::floor(f) && std::abs(f) < 9.2e18)
        return tagged('i', std::to_string(int64_t(f)));
      uint64_t bits;
      std::memcpy(&bits, &f, 8);
      return tagged('f', std::to_string(bits));
    }
    case Value::Kind::Str: {
      std::string s = tagged('s', std::to_string(k.as_str().size()));
      s += ':';
      s += k.as_str();
      return s;
    }
    case Value::Kind::Tuple: {
      std::string s = tagged('t', std::to_string(k.items().size()));
      s += '(';
      for (const Value& v : k.items()) {
        s += key_canon(v, depth + 1, fail);
        s += ',';
        if (s.size() > kMaxKeyBytes)
          fail("a dict key tuple is larger than ", kMaxKeyBytes, " bytes");
      }
      s += ')';
      return s;
    }
    default:
      fail("a dict key is a ", k.kind_name(),
           " (keys must be None, bool, int, float, str "
           "or tuples of them)");
  }
  return "";
}

}  // namespace attn::io::detail

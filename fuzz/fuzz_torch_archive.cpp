// attn::io::from_torch_archive (attn.load: PyTorch's torch.save files) on arbitrary bytes.
//
// Two kinds of input, so that mutations reach the pickle as well as the zip container:
//   - bytes starting with "PK": the file itself (zip parsing, CRCs, records);
//   - anything else: "<data.pkl>" then, for each storage record data/0, data/1, ..., the separator
//     "\n#rec#\n" and its bytes; the target packs them into a valid archive (correct CRCs) first,
//     so every mutation of the pickle is parsed by the unpickler.
// What loads must round-trip: to_torch_archive of the value loads again to the same tree (kinds,
// keys, numbers, strings, tensors' dtype, sizes, strides, offsets, bytes and sharing), and writing
// that again gives the same bytes (the writer is deterministic).
#include <attn/torch_format.h>

#include <cstring>
#include <unordered_map>

#include "../src/io/torch_internal.h"
#include "fuzz_util.h"

namespace {

using attn::io::Value;
using K = Value::Kind;

bool same_tensor(const attn::Tensor& a, const attn::Tensor& b) {
  if (a.dtype() != b.dtype() || a.shape() != b.shape() || a.strides() != b.strides() ||
      a.storage_offset() != b.storage_offset() || a.requires_grad() != b.requires_grad())
    return false;
  const auto& sa = *a.impl()->storage;
  const auto& sb = *b.impl()->storage;
  return sa.nbytes == sb.nbytes &&
         (sa.nbytes == 0 || std::memcmp(sa.data, sb.data, sa.nbytes) == 0);
}

// Structural equality, and the sharing of containers and storages maps one to one. A pair of
// containers is compared once (values are DAGs: comparing shared parts again would take
// exponential time).
struct Same {
  std::unordered_map<const void*, const void*> ids, back, storages;

  bool shared(std::unordered_map<const void*, const void*>& m, const void* a, const void* b) {
    auto [it, inserted] = m.emplace(a, b);
    return inserted || it->second == b;
  }
  // 1: a new pair (compare it), 0: seen and consistent, -1: the sharing differs.
  int visit(const Value& a, const Value& b) {
    auto [it, inserted] = ids.emplace(a.identity(), b.identity());
    auto [jt, back_inserted] = back.emplace(b.identity(), a.identity());
    if (it->second != b.identity() || jt->second != a.identity()) return -1;
    return inserted && back_inserted ? 1 : 0;
  }

  bool operator()(const Value& a, const Value& b) {
    if (a.kind() != b.kind()) return false;
    switch (a.kind()) {
      case K::None: return true;
      case K::Bool: return a.as_bool() == b.as_bool();
      case K::Int: return a.as_int() == b.as_int();
      case K::Float: {
        const double x = a.as_float(), y = b.as_float();
        return std::memcmp(&x, &y, sizeof x) == 0;
      }
      case K::Str: return a.as_str() == b.as_str();
      case K::Tensor:
        return a.is_parameter() == b.is_parameter() && same_tensor(a.as_tensor(), b.as_tensor()) &&
               shared(storages, a.as_tensor().impl()->storage.get(),
                      b.as_tensor().impl()->storage.get());
      case K::List:
      case K::Tuple: {
        if (const int v = visit(a, b); v <= 0) return v == 0;
        if (a.items().size() != b.items().size()) return false;
        for (std::size_t i = 0; i < a.items().size(); ++i)
          if (!(*this)(a.items()[i], b.items()[i])) return false;
        return true;
      }
      case K::Dict: {
        if (const int v = visit(a, b); v <= 0) return v == 0;
        if (a.ordered() != b.ordered() || a.entries().size() != b.entries().size() ||
            a.attributes().size() != b.attributes().size())
          return false;
        for (std::size_t i = 0; i < a.entries().size(); ++i)
          if (!(*this)(a.entries()[i].first, b.entries()[i].first) ||
              !(*this)(a.entries()[i].second, b.entries()[i].second))
            return false;
        for (std::size_t i = 0; i < a.attributes().size(); ++i)
          if (!(*this)(a.attributes()[i].first, b.attributes()[i].first) ||
              !(*this)(a.attributes()[i].second, b.attributes()[i].second))
            return false;
        return true;
      }
      default: return false;  // Global / Storage never come out of the loader
    }
  }
};

std::string pack(std::string_view in) {
  static constexpr std::string_view sep = "\n#rec#\n";
  std::vector<std::string_view> parts;
  std::size_t at = 0;
  while (parts.size() < 64) {
    const std::size_t next = in.find(sep, at);
    if (next == std::string_view::npos) break;
    parts.push_back(in.substr(at, next - at));
    at = next + sep.size();
  }
  parts.push_back(in.substr(at));
  std::vector<std::string> names;
  for (std::size_t i = 1; i < parts.size(); ++i)
    names.push_back("archive/data/" + std::to_string(i - 1));
  std::vector<std::pair<std::string, std::string_view>> records;
  records.emplace_back("archive/data.pkl", parts[0]);
  for (std::size_t i = 1; i < parts.size(); ++i) records.emplace_back(names[i - 1], parts[i]);
  records.emplace_back("archive/version", "3\n");
  return attn::io::detail::write_zip(records, "fuzz");
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  attn_fuzz::init_single_thread();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  std::string_view bytes = attn_fuzz::as_view(data, size);
  std::string packed;
  if (bytes.substr(0, 2) != "PK") {
    packed = pack(bytes);
    bytes = packed;
  }
  Value v;
  try {
    v = attn::io::from_torch_archive(bytes, "fuzz input");
  } catch (const attn::Error&) {
    return 0;  // rejected with a clear error: fine
  }
  const std::string again = attn::io::to_torch_archive(v);
  const Value v2 = attn::io::from_torch_archive(again, "round trip");
  FUZZ_CHECK(Same()(v, v2));
  FUZZ_CHECK(attn::io::to_torch_archive(v2) == again);
  return 0;
}

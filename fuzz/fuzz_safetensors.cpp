// attn::io::from_safetensors on arbitrary bytes. A file that loads must survive a round trip:
// to_safetensors of what was read parses again to the same names (in the same order), dtypes,
// shapes, bytes and metadata, and writing that again gives the same bytes (the writer's output is
// canonical).
#include <attn/io.h>

#include <cstring>

#include "fuzz_util.h"

namespace {

bool same_tensors(const attn::io::SafeTensors& a, const attn::io::SafeTensors& b) {
  if (a.tensors.size() != b.tensors.size() || a.metadata != b.metadata) return false;
  for (std::size_t i = 0; i < a.tensors.size(); ++i) {
    const auto& [na, ta] = a.tensors[i];
    const auto& [nb, tb] = b.tensors[i];
    if (na != nb || ta.dtype() != tb.dtype() || ta.shape() != tb.shape()) return false;
    const std::size_t nbytes = std::size_t(ta.numel()) * attn::itemsize(ta.dtype());
    if (nbytes > 0 && std::memcmp(ta.raw_data(), tb.raw_data(), nbytes) != 0) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  attn_fuzz::init_single_thread();
  return 0;
}

extern "C" std::size_t LLVMFuzzerCustomMutator(uint8_t* data, std::size_t size,
                                               std::size_t max_size, unsigned seed) {
  return attn_fuzz::mutate_safetensors(data, size, max_size, seed);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string_view bytes = attn_fuzz::as_view(data, size);
  attn::io::SafeTensors st;
  try {
    st = attn::io::from_safetensors(bytes, "fuzz input");
  } catch (const attn::Error&) {
    return 0;  // rejected with a clear error: fine
  }

  // What was read is consistent with the input.
  std::size_t data_bytes = 0;
  for (const auto& [name, t] : st.tensors) {
    FUZZ_CHECK(!name.empty() && name != "__metadata__");
    FUZZ_CHECK(t.defined() && t.is_contiguous());
    FUZZ_CHECK(st.contains(name) && st.at(name).is_same(t));
    data_bytes += std::size_t(t.numel()) * attn::itemsize(t.dtype());
    if (t.dtype() == attn::Dtype::Bool) {
      const auto* p = static_cast<const uint8_t*>(t.raw_data());
      for (int64_t i = 0; i < t.numel(); ++i) FUZZ_CHECK(p[i] <= 1);
    }
  }
  uint64_t header = 0;
  for (int i = 7; i >= 0; --i) header = (header << 8) | data[i];
  FUZZ_CHECK(8 + header + data_bytes == size);

  // Round trip.
  const std::string again = attn::io::to_safetensors(st.tensors, st.metadata);
  const attn::io::SafeTensors st2 = attn::io::from_safetensors(again, "round trip");
  FUZZ_CHECK(same_tensors(st, st2));
  FUZZ_CHECK(attn::io::to_safetensors(st2.tensors, st2.metadata) == again);
  return 0;
}

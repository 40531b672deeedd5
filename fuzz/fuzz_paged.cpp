// The paged key/value cache (include/attn/kv_cache.h) and paged_attention
// (include/attn/attention.h) on sequences of operations and block tables decoded from the input:
// every call either succeeds or throws attn::Error, never reads or writes outside the pools (ASan),
// and the cache's page accounting holds after every operation (free pages = pages no sequence
// holds).
//
// Input grammar: bytes 0-4 shape the cache (dtype, pages 1..8, page size 1..6, key/value heads
// 1..2, head dim 1..40); then operations until the input ends, one byte each (low 3 bits) and its
// arguments:
//   0 add_sequence          1 fork(seq)             2 remove(seq)
//   3 extend(seq, n) and write the new tokens to every layer (n: next byte % 9)
//   4 evict(seq, keep_first, keep_last)              5 truncate(seq, length)
//   6 attention of q (sequences, L_q, heads from the next bytes) through the cache, with options
//   7 paged_attention on the cache's pools with a block table, lengths and an eviction record
//     taken from the input (any int64: out-of-range pages and lengths must be refused)
// Sequence arguments are a byte: an existing id (byte % count) or, with bit 7, any id.
#include <algorithm>
#include <cmath>
#include <vector>

#include "fuzz_util.h"

namespace {

using attn::Tensor;

int64_t seq_arg(attn_fuzz::ByteReader& in, const attn::PagedKVCache& cache) {
  const uint8_t b = in.byte();
  const std::vector<int64_t> ids = cache.sequences();
  if ((b & 0x80) || ids.empty()) return int64_t(b & 0x7f) - 8;
  return ids[b % ids.size()];
}

// Filled with small values from the input (finite: the kernels' outputs are checked below).
Tensor small_tensor(attn_fuzz::ByteReader& in, attn::Shape shape) {
  Tensor t = attn::empty(shape);
  float* p = t.data_ptr<float>();
  for (int64_t i = 0; i < t.numel(); ++i) p[i] = float(int8_t(in.byte())) / 32.0f;
  return t;
}

attn::SdpaOptions options(attn_fuzz::ByteReader& in, int64_t H) {
  attn::SdpaOptions o;
  const uint8_t f = in.byte();
  o.is_causal = f & 1;
  if (f & 2) o.window_left = in.byte() % 12;
  if (f & 4) o.softcap = 0.5 + in.byte() % 8;
  if (f & 8) o.alibi_slopes = attn::full({H}, 0.25f);
  if (f & 16) o.sinks = attn::full({H}, float(int8_t(in.byte())) / 16.0f);
  if (f & 32) o.window_right = 0;
  return o;
}

void check_output(const Tensor& out) {
  const float* p = out.data_ptr<float>();
  for (int64_t i = 0; i < out.numel(); ++i) FUZZ_CHECK(std::isfinite(p[i]));
}

void run(attn_fuzz::ByteReader& in) {
  attn::PagedKVCacheOptions co;
  const uint8_t d = in.byte();
  co.dtype = d % 4 == 0   ? attn::KVCacheDtype::Float32
             : d % 4 == 1 ? attn::KVCacheDtype::BFloat16
             : d % 4 == 2 ? attn::KVCacheDtype::Int8
                          : attn::KVCacheDtype::Float16;
  co.num_layers = 1 + in.byte() % 2;
  co.num_pages = 1 + in.byte() % 8;
  co.page_size = 1 + in.byte() % 6;
  co.num_kv_heads = 1 + in.byte() % 2;
  co.head_dim = 1 + in.byte() % 40;
  attn::PagedKVCache cache(co);
  const int64_t Hk = co.num_kv_heads, D = co.head_dim;
  for (int step = 0; step < 64 && !in.empty(); ++step) {
    try {
      switch (in.byte() & 7) {
        case 0: cache.add_sequence(); break;
        case 1: cache.fork(seq_arg(in, cache)); break;
        case 2: cache.remove(seq_arg(in, cache)); break;
        case 3: {
          const int64_t s = seq_arg(in, cache), n = in.byte() % 9;
          const int64_t pos = cache.extend(s, n);
          for (int64_t l = 0; l < co.num_layers; ++l)
            cache.write(l, s, pos, small_tensor(in, {n, Hk, D}), small_tensor(in, {n, Hk, D}));
          break;
        }
        case 4: {
          const int64_t s = seq_arg(in, cache);
          const int64_t first = int8_t(in.byte()), last = int8_t(in.byte());
          cache.evict(s, first, last);
          break;
        }
        case 5: {
          const int64_t s = seq_arg(in, cache);
          cache.truncate(s, int8_t(in.byte()));
          break;
        }
        case 6: {
          const int64_t n = 1 + in.byte() % 3, L_q = in.byte() % 4, H = Hk * (1 + in.byte() % 2);
          std::vector<int64_t> seqs;
          for (int64_t i = 0; i < n; ++i) seqs.push_back(seq_arg(in, cache));
          const Tensor q = small_tensor(in, {n, L_q, H, D + (in.byte() % 8 == 0 ? 1 : 0)});
          const int64_t layer = in.byte() % 3;
          check_output(cache.attention(layer, seqs, q, options(in, H)));
          break;
        }
        default: {
          const int64_t B = 1 + in.byte() % 3, width = in.byte() % 4, L_q = in.byte() % 3;
          Tensor table = attn::empty({B, width}, attn::Dtype::Int64);
          for (int64_t i = 0; i < B * width; ++i)
            table.data_ptr<int64_t>()[i] = (in.byte() & 1) ? in.value<int64_t>() : in.byte() % 9;
          Tensor lens = attn::empty({B}, attn::Dtype::Int64);
          for (int64_t i = 0; i < B; ++i)
            lens.data_ptr<int64_t>()[i] = (in.byte() & 1) ? in.value<int64_t>() : in.byte() % 30;
          Tensor evicted;
          if (in.byte() & 1) {
            evicted = attn::empty({B, 2}, attn::Dtype::Int64);
            for (int64_t i = 0; i < 2 * B; ++i) evicted.data_ptr<int64_t>()[i] = int8_t(in.byte());
          }
          const int64_t H = Hk * (1 + in.byte() % 2);
          const Tensor q = small_tensor(in, {B, L_q, H, D});
          check_output(attn::paged_attention(q, cache.view(in.byte() % 2), table, lens,
                                             options(in, H), nullptr, evicted));
          break;
        }
      }
    } catch (const attn::Error&) {
    }
    // The page accounting: the free pages are those no sequence holds.
    std::vector<bool> held(size_t(co.num_pages), false);
    for (int64_t s : cache.sequences()) {
      const Tensor t = cache.block_table({s});
      const int64_t pages = (cache.length(s) + co.page_size - 1) / co.page_size;
      for (int64_t i = 0; i < pages; ++i) {
        const int64_t p = t.data_ptr<int64_t>()[i];
        FUZZ_CHECK(p >= 0 && p < co.num_pages);
        held[size_t(p)] = true;
      }
    }
    FUZZ_CHECK(cache.free_pages() == int64_t(std::count(held.begin(), held.end(), false)));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  attn_fuzz::ByteReader in(data, size);
  run(in);
  return 0;
}

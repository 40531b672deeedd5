// PagedKVCache (include/attn/kv_cache.h): the page pool, the sequences' page lists with
// reference counts (forks share pages, copy on write), the conversion of keys and values to the
// pool's dtype, and attention through the backend's paged kernel.
#include <attn/half.h>
#include <attn/kv_cache.h>
#include <attn/ops.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <map>
#include <new>
#include <utility>
#include <vector>

#include "../tensor/internal.h"

namespace attn {

using detail::fail;

namespace {

constexpr int64_t kBlock = 32;  // int8 scale blocks (PagedKVView)

int64_t element_bytes(KVCacheDtype d) {
  return d == KVCacheDtype::Float32 ? 4 : d == KVCacheDtype::Int8 ? 1 : 2;
}

// One float32 row of `cols` elements into the pool's format at element `at` (scales: the row's
// ceil(cols / 32) int8 block scales).
void store_row(KVCacheDtype d, std::byte* pool, float* scales, int64_t at, const float* x,
               int64_t cols) {
  if (d == KVCacheDtype::Float32) {
    std::memcpy(pool + at * 4, x, size_t(cols) * 4);
  } else if (d == KVCacheDtype::BFloat16) {
    auto* dst = reinterpret_cast<uint16_t*>(pool) + at;
    for (int64_t c = 0; c < cols; ++c) dst[c] = float_to_bf16_bits(x[c]);
  } else if (d == KVCacheDtype::Float16) {
    auto* dst = reinterpret_cast<uint16_t*>(pool) + at;
    for (int64_t c = 0; c < cols; ++c) dst[c] = float_to_fp16_bits(x[c]);
  } else {
    // ggml's q8_0: scale = max |x| / 127 per block, q = round(x / scale). A block of zeros has
    // scale 0; a non-finite value makes the scale (and the block, read back) non-finite.
    auto* dst = reinterpret_cast<int8_t*>(pool) + at;
    for (int64_t c0 = 0; c0 < cols; c0 += kBlock) {
      const int64_t c1 = std::min(cols, c0 + kBlock);
      float amax = 0.0f;
      for (int64_t c = c0; c < c1; ++c) amax = std::max(amax, std::fabs(x[c]));
      for (int64_t c = c0; c < c1; ++c)
        if (std::isnan(x[c])) amax = x[c];
      const float scale = amax / 127.0f;
      scales[c0 / kBlock] = std::isfinite(scale) ? scale : std::nanf("");
      const float inv = scale > 0.0f && std::isfinite(scale) ? 1.0f / scale : 0.0f;
      for (int64_t c = c0; c < c1; ++c)
        dst[c] = int8_t(std::clamp(std::nearbyint(x[c] * inv), -127.0f, 127.0f));
    }
  }
}

float load_element(KVCacheDtype d, const std::byte* pool, const float* scales, int64_t at,
                   int64_t c) {
  if (d == KVCacheDtype::Float32) {
    float f;
    std::memcpy(&f, pool + (at + c) * 4, 4);
    return f;
  }
  if (d == KVCacheDtype::BFloat16)
    return bf16_bits_to_float(reinterpret_cast<const uint16_t*>(pool)[at + c]);
  if (d == KVCacheDtype::Float16)
    return fp16_bits_to_float(reinterpret_cast<const uint16_t*>(pool)[at + c]);
  return float(reinterpret_cast<const int8_t*>(pool)[at + c]) * scales[c / kBlock];
}

}  // namespace

struct PagedKVCache::State {
  PagedKVCacheOptions o;
  int64_t row_elems = 0;     // H_kv * D: one token's keys (or values) of one layer
  int64_t scale_blocks = 0;  // int8 scales per (token, head) row
  int64_t page_elems = 0;    // page_size * row_elems
  // Per layer: keys, values (page-major bytes) and, for int8, their scales.
  std::vector<std::unique_ptr<std::byte[]>> k, v;
  std::vector<std::vector<float>> ks, vs;
  std::vector<int64_t> refs;  // sequences holding each page
  std::vector<int64_t> free;  // free pages; the lowest is taken first
  struct Seq {
    std::vector<int64_t> pages;
    int64_t length = 0;
    // Evicted tokens (StreamingLLM): logical tokens from gap_at on sit gap positions further.
    int64_t gap_at = 0, gap = 0;
  };
  std::map<int64_t, Seq> seqs;
  int64_t next_id = 0;

  Seq& get(int64_t seq, const char* fn) {
    auto it = seqs.find(seq);
    if (it == seqs.end()) fail(fn, "no sequence ", seq, " in the cache");
    return it->second;
  }
  void check_layer(int64_t layer, const char* fn) const {
    if (layer < 0 || layer >= o.num_layers)
      throw IndexError(detail::msg(fn, "layer ", layer, " is outside [0, ", o.num_layers, ")"));
  }
  int64_t take() {
    const int64_t page = free.back();
    free.pop_back();
    refs[size_t(page)] = 1;
    return page;
  }
  void release(int64_t page) {
    if (--refs[size_t(page)] == 0) free.push_back(page);
  }
  // Copies page `from` to page `to` in every layer.
  void copy_page(int64_t from, int64_t to) {
    const int64_t bytes = page_elems * element_bytes(o.dtype);
    const int64_t scales = o.page_size * o.num_kv_heads * scale_blocks;
    for (int64_t l = 0; l < o.num_layers; ++l) {
      std::memcpy(k[size_t(l)].get() + to * bytes, k[size_t(l)].get() + from * bytes,
                  size_t(bytes));
      std::memcpy(v[size_t(l)].get() + to * bytes, v[size_t(l)].get() + from * bytes,
                  size_t(bytes));
      if (o.dtype == KVCacheDtype::Int8) {
        std::copy_n(ks[size_t(l)].begin() + from * scales, scales,
                    ks[size_t(l)].begin() + to * scales);
        std::copy_n(vs[size_t(l)].begin() + from * scales, scales,
                    vs[size_t(l)].begin() + to * scales);
      }
    }
  }
};

PagedKVCache::PagedKVCache(const PagedKVCacheOptions& options) : s_(std::make_unique<State>()) {
  const char* fn = "PagedKVCache";
  const PagedKVCacheOptions& o = options;
  for (const auto& [v, name] :
       {std::pair{o.num_layers, "num_layers"}, std::pair{o.num_pages, "num_pages"},
        std::pair{o.page_size, "page_size"}, std::pair{o.num_kv_heads, "num_kv_heads"},
        std::pair{o.head_dim, "head_dim"}})
    if (v < 1) fail(fn, name, " must be >= 1, got ", v);
  const double bytes = double(o.num_layers) * 2 * double(o.num_pages) * double(o.page_size) *
                       double(o.num_kv_heads) * double(o.head_dim) * double(element_bytes(o.dtype));
  if (bytes > double(int64_t(1) << 46))
    fail(fn, "the pools would take ", bytes, " bytes: too many pages for one cache");
  State& s = *s_;
  s.o = o;
  s.row_elems = o.num_kv_heads * o.head_dim;
  s.scale_blocks = (o.head_dim + kBlock - 1) / kBlock;
  s.page_elems = o.page_size * s.row_elems;
  const int64_t pool = o.num_pages * s.page_elems * element_bytes(o.dtype);
  try {
    for (int64_t l = 0; l < o.num_layers; ++l) {
      // Zeroed: a page holds numbers before it is written (a fork's unwritten tail, say).
      s.k.emplace_back(new std::byte[size_t(pool)]());
      s.v.emplace_back(new std::byte[size_t(pool)]());
      if (o.dtype == KVCacheDtype::Int8) {
        s.ks.emplace_back(size_t(o.num_pages * o.page_size * o.num_kv_heads * s.scale_blocks));
        s.vs.emplace_back(size_t(o.num_pages * o.page_size * o.num_kv_heads * s.scale_blocks));
      }
    }
  } catch (const std::bad_alloc&) {
    throw AllocationError(detail::msg(fn, "cannot allocate the pools of ", bytes, " bytes"));
  }
  s.refs.assign(size_t(o.num_pages), 0);
  for (int64_t p = o.num_pages - 1; p >= 0; --p) s.free.push_back(p);
}

PagedKVCache::~PagedKVCache() = default;
PagedKVCache::PagedKVCache(PagedKVCache&&) noexcept = default;
PagedKVCache& PagedKVCache::operator=(PagedKVCache&&) noexcept = default;

const PagedKVCacheOptions& PagedKVCache::options() const { return s_->o; }

int64_t PagedKVCache::add_sequence() {
  const int64_t id = s_->next_id++;
  s_->seqs[id] = {};
  return id;
}

int64_t PagedKVCache::fork(int64_t seq) {
  State::Seq copy = s_->get(seq, "PagedKVCache.fork");
  for (int64_t page : copy.pages) ++s_->refs[size_t(page)];
  const int64_t id = s_->next_id++;
  s_->seqs[id] = std::move(copy);
  return id;
}

void PagedKVCache::remove(int64_t seq) {
  State::Seq& q = s_->get(seq, "PagedKVCache.remove");
  for (int64_t page : q.pages) s_->release(page);
  s_->seqs.erase(seq);
}

bool PagedKVCache::contains(int64_t seq) const { return s_->seqs.count(seq) > 0; }

int64_t PagedKVCache::length(int64_t seq) const {
  return s_->get(seq, "PagedKVCache.length").length;
}

std::vector<int64_t> PagedKVCache::sequences() const {
  std::vector<int64_t> ids;
  for (const auto& [id, q] : s_->seqs) ids.push_back(id);
  return ids;
}

int64_t PagedKVCache::extend(int64_t seq, int64_t n) {
  const char* fn = "PagedKVCache.extend";
  State& s = *s_;
  State::Seq& q = s.get(seq, fn);
  if (n < 0) fail(fn, "n must be >= 0, got ", n);
  const int64_t ps = s.o.page_size;
  const bool copy_last = n > 0 && q.length % ps != 0 && s.refs[size_t(q.pages.back())] > 1;
  const int64_t fresh = (q.length + n + ps - 1) / ps - int64_t(q.pages.size());
  const int64_t need = fresh + (copy_last ? 1 : 0);
  if (need > int64_t(s.free.size()))
    fail(fn, "sequence ", seq, " needs ", need, " more page", need == 1 ? "" : "s", " for ", n,
         " tokens, the pool has ", s.free.size(), " free of ", s.o.num_pages,
         " (remove finished sequences or make the cache larger)");
  if (copy_last) {  // copy on write: the other sequences keep the shared page
    const int64_t page = s.take();
    s.copy_page(q.pages.back(), page);
    s.release(q.pages.back());
    q.pages.back() = page;
  }
  for (int64_t i = 0; i < fresh; ++i) q.pages.push_back(s.take());
  const int64_t start = q.length;
  q.length += n;
  return start;
}

int64_t PagedKVCache::evict(int64_t seq, int64_t keep_first, int64_t keep_last) {
  const char* fn = "PagedKVCache.evict";
  State& s = *s_;
  State::Seq& q = s.get(seq, fn);
  if (keep_first < 0 || keep_last < 0)
    fail(fn, "keep_first and keep_last must be >= 0, got ", keep_first, " and ", keep_last);
  const int64_t ps = s.o.page_size;
  if (q.gap > 0 && keep_first > q.gap_at)
    fail(fn, "sequence ", seq, " keeps ", q.gap_at,
         " sink tokens from an earlier eviction; "
         "keep_first ",
         keep_first, " would need tokens already evicted");
  const int64_t sink_pages = (keep_first + ps - 1) / ps;
  const int64_t first_kept = std::max<int64_t>(0, q.length - keep_last) / ps;  // window's page
  if (first_kept <= sink_pages) return 0;
  const int64_t dropped = first_kept - sink_pages;
  for (int64_t i = sink_pages; i < first_kept; ++i) s.release(q.pages[size_t(i)]);
  q.pages.erase(q.pages.begin() + sink_pages, q.pages.begin() + first_kept);
  q.gap_at = sink_pages * ps;
  q.gap += dropped * ps;
  q.length -= dropped * ps;
  return dropped * ps;
}

int64_t PagedKVCache::position(int64_t seq) const {
  const State::Seq& q = s_->get(seq, "PagedKVCache.position");
  return q.length + q.gap;
}

void PagedKVCache::truncate(int64_t seq, int64_t length) {
  const char* fn = "PagedKVCache.truncate";
  State& s = *s_;
  State::Seq& q = s.get(seq, fn);
  if (length < 0 || length > q.length)
    fail(fn, "length ", length, " is outside [0, ", q.length, "] for sequence ", seq);
  if (q.gap > 0 && length < q.gap_at)
    fail(fn, "length ", length, " would cut into sequence ", seq, "'s sink tokens (", q.gap_at,
         ") kept by an eviction");
  const int64_t keep = (length + s.o.page_size - 1) / s.o.page_size;
  while (int64_t(q.pages.size()) > keep) {
    s.release(q.pages.back());
    q.pages.pop_back();
  }
  q.length = length;
}

void PagedKVCache::write(int64_t layer, int64_t seq, int64_t pos, const Tensor& k,
                         const Tensor& v) {
  const char* fn = "PagedKVCache.write";
  State& s = *s_;
  s.check_layer(layer, fn);
  State::Seq& q = s.get(seq, fn);
  const PagedKVCacheOptions& o = s.o;
  for (const auto& [t, name] : {std::pair{&k, "k"}, std::pair{&v, "v"}})
    if (!t->defined() || t->dtype() != Dtype::Float32 || t->dim() != 3 ||
        t->size(1) != o.num_kv_heads || t->size(2) != o.head_dim || !t->device().is_cpu())
      fail(fn, name, " must be float32 (n, ", o.num_kv_heads, ", ", o.head_dim,
           ") on the CPU, got ", t->defined() ? detail::tensor_desc(*t) : "undefined");
  if (k.size(0) != v.size(0))
    fail(fn, "k ", shape_str(k.shape()), " and v ", shape_str(v.shape()), " differ in tokens");
  const int64_t n = k.size(0), ps = o.page_size;
  if (pos < 0 || pos + n > q.length)
    fail(fn, "positions [", pos, ", ", pos + n, ") are outside sequence ", seq, "'s ", q.length,
         " tokens (extend() makes room)");
  for (int64_t t = pos; t < pos + n; t += ps - t % ps)
    if (s.refs[size_t(q.pages[size_t(t / ps)])] > 1)
      fail(fn, "position ", t, " of sequence ", seq,
           " is in a page that other sequences share (a fork's prefix is read-only; write the "
           "tokens extend() made room for)");
  const Tensor kc = k.contiguous(), vc = v.contiguous();
  const float* kp = kc.data_ptr<float>();
  const float* vp = vc.data_ptr<float>();
  std::byte* kpool = s.k[size_t(layer)].get();
  std::byte* vpool = s.v[size_t(layer)].get();
  float* kscale = o.dtype == KVCacheDtype::Int8 ? s.ks[size_t(layer)].data() : nullptr;
  float* vscale = o.dtype == KVCacheDtype::Int8 ? s.vs[size_t(layer)].data() : nullptr;
  for (int64_t t = 0; t < n; ++t) {
    const int64_t p = pos + t, page = q.pages[size_t(p / ps)];
    for (int64_t h = 0; h < o.num_kv_heads; ++h) {
      const int64_t row = (page * o.num_kv_heads + h) * ps + p % ps;  // pool row
      const int64_t src = (t * o.num_kv_heads + h) * o.head_dim;
      store_row(o.dtype, kpool, kscale ? kscale + row * s.scale_blocks : nullptr, row * o.head_dim,
                kp + src, o.head_dim);
      store_row(o.dtype, vpool, vscale ? vscale + row * s.scale_blocks : nullptr, row * o.head_dim,
                vp + src, o.head_dim);
    }
  }
}

Tensor PagedKVCache::block_table(const std::vector<int64_t>& seqs) const {
  int64_t width = 1;
  for (int64_t id : seqs)
    width = std::max<int64_t>(width, int64_t(s_->get(id, "PagedKVCache.block_table").pages.size()));
  Tensor t = zeros({int64_t(seqs.size()), width}, Dtype::Int64);
  int64_t* p = t.data_ptr<int64_t>();
  for (size_t b = 0; b < seqs.size(); ++b) {
    const auto& pages = s_->get(seqs[b], "PagedKVCache.block_table").pages;
    std::copy(pages.begin(), pages.end(), p + int64_t(b) * width);
  }
  return t;
}

Tensor PagedKVCache::seqlens(const std::vector<int64_t>& seqs) const {
  Tensor t = empty({int64_t(seqs.size())}, Dtype::Int64);
  for (size_t b = 0; b < seqs.size(); ++b)
    t.data_ptr<int64_t>()[b] = s_->get(seqs[b], "PagedKVCache.seqlens").length;
  return t;
}

Tensor PagedKVCache::attention(int64_t layer, const std::vector<int64_t>& seqs, const Tensor& q,
                               const SdpaOptions& options, Tensor* lse) const {
  const char* fn = "PagedKVCache.attention";
  const State& s = *s_;
  s.check_layer(layer, fn);
  if (seqs.empty()) fail(fn, "no sequences given");
  const Tensor table = block_table(seqs), lens = seqlens(seqs);
  if (q.defined() && q.dim() == 4)
    for (size_t b = 0; b < seqs.size(); ++b)
      if (lens.data_ptr<int64_t>()[b] < q.size(1))
        fail(fn, "q ", shape_str(q.shape()), " has ", q.size(1),
             " queries per sequence but sequence ", seqs[b], " holds ", lens.data_ptr<int64_t>()[b],
             " tokens (the queries are its last)");
  Tensor evicted;  // only when some sequence has evicted tokens
  for (size_t b = 0; b < seqs.size(); ++b)
    if (s.seqs.at(seqs[b]).gap > 0) {
      evicted = zeros({int64_t(seqs.size()), 2}, Dtype::Int64);
      for (size_t i = 0; i < seqs.size(); ++i) {
        const State::Seq& si = s.seqs.at(seqs[i]);
        evicted.data_ptr<int64_t>()[2 * i] = si.gap > 0 ? si.gap_at : si.length;
        evicted.data_ptr<int64_t>()[2 * i + 1] = si.gap;
      }
      break;
    }
  return paged_attention(q, view(layer), table, lens, options, lse, evicted);
}

PagedKVView PagedKVCache::view(int64_t layer) const {
  const State& s = *s_;
  s.check_layer(layer, "PagedKVCache.view");
  PagedKVView v;
  v.dtype = s.o.dtype;
  v.keys = s.k[size_t(layer)].get();
  v.values = s.v[size_t(layer)].get();
  if (s.o.dtype == KVCacheDtype::Int8)
    v.key_scales = s.ks[size_t(layer)].data(), v.value_scales = s.vs[size_t(layer)].data();
  v.num_pages = s.o.num_pages, v.page_size = s.o.page_size, v.num_kv_heads = s.o.num_kv_heads;
  v.head_dim = v.head_dim_v = s.o.head_dim;
  // Head-major pages, (num_pages, H_kv, page_size, D): each head's page is one block.
  v.key_page_stride = v.value_page_stride = s.page_elems;
  v.key_head_stride = v.value_head_stride = s.o.page_size * s.o.head_dim;
  v.key_row_stride = v.value_row_stride = s.o.head_dim;
  return v;
}

std::pair<Tensor, Tensor> PagedKVCache::gather(int64_t layer, int64_t seq) const {
  const char* fn = "PagedKVCache.gather";
  const State& s = *s_;
  s.check_layer(layer, fn);
  const auto& q = s_->get(seq, fn);
  const PagedKVCacheOptions& o = s.o;
  Tensor k = empty({q.length, o.num_kv_heads, o.head_dim}, Dtype::Float32);
  Tensor v = empty({q.length, o.num_kv_heads, o.head_dim}, Dtype::Float32);
  const bool i8 = o.dtype == KVCacheDtype::Int8;
  for (int64_t t = 0; t < q.length; ++t)
    for (int64_t h = 0; h < o.num_kv_heads; ++h) {
      const int64_t row =
          (q.pages[size_t(t / o.page_size)] * o.num_kv_heads + h) * o.page_size + t % o.page_size;
      for (int64_t c = 0; c < o.head_dim; ++c) {
        const int64_t dst = (t * o.num_kv_heads + h) * o.head_dim + c;
        k.data_ptr<float>()[dst] = load_element(
            o.dtype, s.k[size_t(layer)].get(),
            i8 ? s.ks[size_t(layer)].data() + row * s.scale_blocks : nullptr, row * o.head_dim, c);
        v.data_ptr<float>()[dst] = load_element(
            o.dtype, s.v[size_t(layer)].get(),
            i8 ? s.vs[size_t(layer)].data() + row * s.scale_blocks : nullptr, row * o.head_dim, c);
      }
    }
  return {k, v};
}

int64_t PagedKVCache::free_pages() const { return int64_t(s_->free.size()); }

int64_t PagedKVCache::pool_bytes() const {
  const PagedKVCacheOptions& o = s_->o;
  int64_t scales = o.dtype == KVCacheDtype::Int8
                       ? 2 * o.num_pages * o.page_size * o.num_kv_heads * s_->scale_blocks * 4
                       : 0;
  return o.num_layers * (2 * o.num_pages * s_->page_elems * element_bytes(o.dtype) + scales);
}

}  // namespace attn

// Paged key/value caches for decoding (vLLM's PagedAttention, Kwon et al. 2023; FlashAttention's
// flash_attn_with_kvcache with a block_table): the keys and values of many sequences live in one
// pool of fixed-size pages, each sequence owning a list of pages (its block table), so sequences
// of different lengths share memory without padding, grow a page at a time, and share the pages of
// a common prefix (fork), copied only when one of them writes into a shared page.
//
//   attn::PagedKVCacheOptions o;
//   o.num_layers = 4, o.num_pages = 256, o.page_size = 16, o.num_kv_heads = 4, o.head_dim = 32;
//   attn::PagedKVCache cache(o);
//   int64_t a = cache.add_sequence();
//   int64_t pos = cache.extend(a, T);                // room for T tokens, counted
//   cache.write(layer, a, pos, k, v);                // k, v (T, H_kv, D) of each layer
//   Tensor out = cache.attention(layer, {a}, q, o);  // q (1, T, H, D): causal over its tokens
//   int64_t b = cache.fork(a);                       // shares a's pages
//
// Attention reads the pools through attn::paged_attention (include/attn/attention.h); the cache
// keeps each head's page as one block, (num_pages, H_kv, page_size, D), which a CPU streams best.
//
// The pool holds float32, bfloat16 or float16 (rounded to nearest even; beyond float16's range,
// +-65504, a value becomes +-inf, as torch's .half() makes it) or int8 with one float scale per 32
// consecutive elements of a key or value row (max |x| / 127, ggml's q8_0 layout; keys and values
// separately). Attention converts what it reads to float32 and computes in float32.
#pragma once

#include <attn/attention.h>
#include <attn/tensor.h>

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace attn {

struct PagedKVCacheOptions {
  int64_t num_layers = 1;
  int64_t num_pages = 0;   // pages in the pool, shared by every sequence and layer
  int64_t page_size = 16;  // tokens per page
  int64_t num_kv_heads = 1;
  int64_t head_dim = 0;  // of keys and of values
  KVCacheDtype dtype = KVCacheDtype::Float32;
};

class PagedKVCache {
 public:
  // Allocates num_layers pools of num_pages pages. Throws attn::Error for sizes < 1.
  explicit PagedKVCache(const PagedKVCacheOptions& options);
  ~PagedKVCache();
  PagedKVCache(PagedKVCache&&) noexcept;
  PagedKVCache& operator=(PagedKVCache&&) noexcept;

  const PagedKVCacheOptions& options() const;

  // ---- sequences (ids are never reused) ----
  int64_t add_sequence();  // a new, empty sequence
  // A new sequence holding seq's tokens, sharing its pages: a shared page is copied (every layer)
  // when one of the sequences first writes into it.
  int64_t fork(int64_t seq);
  void remove(int64_t seq);  // frees the pages no other sequence shares
  bool contains(int64_t seq) const;
  int64_t length(int64_t seq) const;
  std::vector<int64_t> sequences() const;

  // Room for n more tokens of seq, counted in its length at once: pages are taken from the pool
  // and a partly filled last page that is shared is copied first. Returns the position of the
  // first new token. Throws attn::Error when the pool lacks the pages (nothing is changed then).
  int64_t extend(int64_t seq, int64_t n);
  // StreamingLLM (Xiao et al., 2023): keeps the attention sinks, the first keep_first tokens, and
  // the newest keep_last, and frees whole pages between them: the sink pages (keep_first rounded
  // up to pages) and every page from the one holding token length - keep_last on stay, so a little
  // more may be kept. Tokens keep their real positions: attention() measures ALiBi and the window
  // by them, and position(seq) goes on counting. Returns the number of tokens evicted (0 when no
  // whole page lies between). A page shared with a fork is only released by this sequence.
  int64_t evict(int64_t seq, int64_t keep_first, int64_t keep_last);
  // The real position the next token of seq will have: length(seq) plus the tokens evicted.
  int64_t position(int64_t seq) const;

  // Drops the tokens of seq from position `length` on (0 <= length <= length(seq)), returning the
  // pages no longer needed (undoing an extend, or a rejected draft in speculative decoding).
  void truncate(int64_t seq, int64_t length);
  // Stores the keys and values k, v (n, H_kv, D) float32 of `layer` at positions
  // [pos, pos + n) < length(seq), converted to the cache's dtype. Throws attn::Error for shapes,
  // positions outside the sequence or positions in a page that other sequences share (write the
  // tokens that extend() made room for).
  void write(int64_t layer, int64_t seq, int64_t pos, const Tensor& k, const Tensor& v);

  // Attention of q (N, L_q, H, D) float32, the last L_q positions of each of seqs (already
  // written), against their keys and values of `layer`: paged_attention's rules (causal
  // alignment bottom-right, the same options). Returns (N, L_q, H, D).
  Tensor attention(int64_t layer, const std::vector<int64_t>& seqs, const Tensor& q,
                   const SdpaOptions& options = {}, Tensor* lse = nullptr) const;

  // The keys and values of positions [0, length) of seq in `layer`, as float32 (length, H_kv, D)
  // (converted back from the cache's dtype): for tests and inspection.
  std::pair<Tensor, Tensor> gather(int64_t layer, int64_t seq) const;
  // The block table (N, max pages) int64 (unused entries 0) and lengths (N) int64 of seqs, and
  // the pools of a layer: what cache.attention passes to paged_attention.
  Tensor block_table(const std::vector<int64_t>& seqs) const;
  Tensor seqlens(const std::vector<int64_t>& seqs) const;
  PagedKVView view(int64_t layer) const;

  int64_t free_pages() const;
  // Bytes of the pools (keys, values and int8 scales of every layer).
  int64_t pool_bytes() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace attn

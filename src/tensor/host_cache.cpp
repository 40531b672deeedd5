// The host block cache (host_cache.h).
#include "host_cache.h"

#include <attn/device.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>
#include <new>
#include <utility>
#include <vector>

#if defined(__unix__) || defined(__APPLE__)
#include <sys/mman.h>
#define ATTN_HOST_MMAP 1
#else
#define ATTN_HOST_MMAP 0
#endif

namespace attn::detail {

namespace {

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif
#else
constexpr bool kAsan = false;
#endif

constexpr std::size_t kPage = 4096;
constexpr std::size_t kDefaultLimit = std::size_t(1) << 30;

// ATTN_CPU_CACHE_BYTES: a number of bytes, with an optional K, M or G (powers of 1024). Anything
// else is reported once on stderr and the default kept.
std::size_t read_limit() {
  if (kAsan) return 0;
  const char* s = std::getenv("ATTN_CPU_CACHE_BYTES");
  if (s == nullptr || *s == '\0') return kDefaultLimit;
  char* end = nullptr;
  errno = 0;
  const unsigned long long n = std::strtoull(s, &end, 10);
  const bool overflow = errno == ERANGE;
  unsigned shift = 0;
  if (end != s && *end != '\0' && end[1] == '\0') {
    switch (*end) {
      case 'K':
      case 'k':
        shift = 10;
        ++end;
        break;
      case 'M':
      case 'm':
        shift = 20;
        ++end;
        break;
      case 'G':
      case 'g':
        shift = 30;
        ++end;
        break;
      default: break;
    }
  }
  if (end == s || *end != '\0' || *s == '-' || overflow || (shift && n > (~0ull >> shift))) {
    std::fprintf(stderr,
                 "attn: warning: ATTN_CPU_CACHE_BYTES=%s is not a number of bytes (such as "
                 "536870912, 512M or 0); keeping the default, 1G\n",
                 s);
    return kDefaultLimit;
  }
  return std::size_t(n << shift);
}

// A block: its address, whether it was mapped (host_map_zeroed) or allocated, and when it was
// given back (for evicting the oldest first).
struct Block {
  void* p;
  bool mapped;
  uint64_t given;
};

void free_block(void* p, std::size_t block, bool mapped) noexcept {
#if ATTN_HOST_MMAP
  if (mapped) {
    munmap(p, block);
    return;
  }
#else
  (void)block;
  (void)mapped;
#endif
  std::free(p);
}

// Unmaps the pages of a mapped block past its first `keep` bytes (both whole pages).
void unmap_tail(void* p, std::size_t keep, std::size_t bytes) noexcept {
#if ATTN_HOST_MMAP
  if (bytes > keep) munmap(static_cast<char*>(p) + keep, bytes - keep);
#else
  (void)p;
  (void)keep;
  (void)bytes;
#endif
}

#if defined(__linux__)
constexpr bool kCanGrow = true;
#else
constexpr bool kCanGrow = false;
#endif

// A mapped block from 4 MB on asks for transparent huge pages where the system gives them on
// request (madvise mode): 2 MB pages, one fault where there would be 512. A hint: where it is
// refused, the block keeps small pages.
constexpr std::size_t kHugePageBlockBytes = std::size_t(4) << 20;
void advise_huge_pages(void* p, std::size_t bytes) noexcept {
#if defined(MADV_HUGEPAGE)
  if (bytes >= kHugePageBlockBytes) madvise(p, bytes, MADV_HUGEPAGE);
#else
  (void)p;
  (void)bytes;
#endif
}

// A mapped block of `bytes` grown to `size` (mremap: the pages move, resident, and only the new
// tail faults when touched); nullptr when the system cannot, the block then as it was.
void* grow_block(void* p, std::size_t bytes, std::size_t size) noexcept {
#if defined(__linux__)
  void* q = mremap(p, bytes, size, MREMAP_MAYMOVE);
  if (q == MAP_FAILED) return nullptr;
  advise_huge_pages(q, size);  // a small block grown large had no advice yet
  return q;
#else
  (void)p;
  (void)bytes;
  (void)size;
  return nullptr;
#endif
}

struct Cache {
  std::mutex mutex;
  std::multimap<std::size_t, Block> blocks;  // by size
  std::size_t bytes = 0;                     // cached
  std::size_t live = 0;  // in blocks of kHostCacheMinBytes and more handed out, not given back
  std::size_t peak = 0;  // the most live since the start or the last host_cache_release
  uint64_t clock = 0;    // counts blocks given back
  const std::size_t limit = read_limit();
};

// Counts `bytes` more as live, and the peak with them (c.mutex held).
void add_live(Cache& c, std::size_t bytes) {
  c.live += bytes;
  c.peak = std::max(c.peak, c.live);
}

Cache& cache() {
  // Never destroyed: storages freed during static destruction still find it.
  static Cache* c = new Cache();
  return *c;
}

}  // namespace

std::size_t host_block_size(std::size_t bytes) {
  if (bytes < kHostCacheMinBytes) return bytes;
  const std::size_t rounded = (bytes + kPage - 1) / kPage * kPage;
  return rounded < bytes ? bytes : rounded;  // no wrap near SIZE_MAX
}

void* host_cache_take(std::size_t size, std::size_t* block, bool* mapped) {
  if (size < kHostCacheMinBytes) return nullptr;
  Cache& c = cache();
  if (c.limit == 0) return nullptr;
  std::vector<std::pair<std::size_t, Block>> evicted;
  void* p = nullptr;
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    auto it = c.blocks.lower_bound(size);
    if (it != c.blocks.end() &&
        (it->first - size <= size / 8 || (ATTN_HOST_MMAP && it->second.mapped))) {
      // The smallest block that holds `size`: as it is when within an eighth of it, else cut
      // in two (pages of a mapping unmap separately): the head serves, its pages resident, and
      // the tail stays cached as a block of its own (unmapped when under kHostCacheMinBytes).
      Block b = it->second;
      std::size_t bytes = it->first;
      c.bytes -= bytes;
      c.blocks.erase(it);
      if (bytes - size > size / 8) {
        const std::size_t tail = bytes - size;
        bool kept = false;
        if (tail >= kHostCacheMinBytes) {
          try {
            c.blocks.emplace(tail, Block{static_cast<char*>(b.p) + size, true, b.given});
            c.bytes += tail;
            kept = true;
          } catch (...) {
          }
        }
        if (!kept) unmap_tail(b.p, size, bytes);
        bytes = size;
      }
      *mapped = b.mapped;
      *block = bytes;
      add_live(c, bytes);
      return b.p;
    }
    // Every cached block is smaller (or none is mapped). The largest mapped one grows to `size`
    // where the system can (its pages move, only the new tail faults); else the caller maps
    // `size` fresh bytes. Either way the oldest blocks go first where what is cached plus what
    // is live would outgrow the most that was live at once by more than an eighth: the cache
    // saves page faults, not memory (a backward pass that frees 256 MiB of saved activations and
    // then asks for 128 MiB would otherwise hold both). Without the eighth, a training step's
    // blocks of changing sizes fault half as much again as with it (Gemma- and Llama-style
    // programs: 285k and 326k faults for 5-6 steps against 210k and 213k).
    Block grow{nullptr, false, 0};
    std::size_t grow_bytes = 0;
    if (kCanGrow && !c.blocks.empty() && std::prev(c.blocks.end())->second.mapped &&
        std::prev(c.blocks.end())->first < size) {
      auto last = std::prev(c.blocks.end());
      grow = last->second;
      grow_bytes = last->first;
      c.bytes -= grow_bytes;
      c.blocks.erase(last);
    }
    const std::size_t bound = std::max(c.peak + c.peak / 8, c.live + size);
    try {
      while (!c.blocks.empty() && c.live + c.bytes + size > bound) {
        auto oldest = c.blocks.begin();
        for (auto b = c.blocks.begin(); b != c.blocks.end(); ++b)
          if (b->second.given < oldest->second.given) oldest = b;
        evicted.emplace_back(*oldest);
        c.bytes -= oldest->first;
        c.blocks.erase(oldest);
      }
    } catch (...) {  // no memory for the list: the blocks listed so far are freed below
    }
    if (grow.p != nullptr) {
      p = grow_block(grow.p, grow_bytes, size);
      if (p == nullptr) evicted.emplace_back(grow_bytes, grow);
    }
    if (p != nullptr) {
      *mapped = true;
      *block = size;
      add_live(c, size);
    }
  }
  for (auto& [bytes, b] : evicted) free_block(b.p, bytes, b.mapped);
  return p;
}

void host_cache_note_fresh(std::size_t block) noexcept {
  if (block < kHostCacheMinBytes) return;
  Cache& c = cache();
  if (c.limit == 0) return;
  std::lock_guard<std::mutex> lock(c.mutex);
  add_live(c, block);
}

void* host_map_zeroed(std::size_t block) noexcept {
#if ATTN_HOST_MMAP
  void* p = mmap(nullptr, block, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return nullptr;
  advise_huge_pages(p, block);
  return p;
#else
  void* p = std::aligned_alloc(64, block);
  if (p) std::memset(p, 0, block);
  return p;
#endif
}

bool host_blocks_are_mapped() noexcept { return !kAsan && ATTN_HOST_MMAP; }

void* host_map_block(std::size_t block, bool* mapped) noexcept {
  *mapped = host_blocks_are_mapped();
  return *mapped ? host_map_zeroed(block) : std::aligned_alloc(64, block);
}

void host_cache_give(void* p, std::size_t block, bool mapped) noexcept {
  if (p == nullptr) return;
  Cache& c = cache();
  if (block >= kHostCacheMinBytes && c.limit > 0) {
    try {
      std::lock_guard<std::mutex> lock(c.mutex);
      c.live -= std::min(c.live, block);
      if (c.bytes + block <= c.limit) {
        c.blocks.emplace(block, Block{p, mapped, c.clock++});
        c.bytes += block;
        return;
      }
    } catch (...) {  // no memory for the bookkeeping: free the block instead
    }
  }
  free_block(p, block, mapped);
}

std::size_t host_cache_release() noexcept {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  const std::size_t freed = c.bytes;
  for (auto& [size, b] : c.blocks) free_block(b.p, size, b.mapped);
  c.blocks.clear();
  c.bytes = 0;
  c.peak = c.live;
  return freed;
}

std::size_t host_cache_bytes() noexcept {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mutex);
  return c.bytes;
}

std::size_t host_cache_limit() noexcept { return cache().limit; }

}  // namespace attn::detail

namespace attn::cpu {

std::size_t empty_cache() { return detail::host_cache_release(); }
std::size_t cached_bytes() { return detail::host_cache_bytes(); }

}  // namespace attn::cpu

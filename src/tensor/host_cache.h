// Freed host blocks kept for reuse, as PyTorch's CUDA allocator keeps device blocks. A training
// step or a prompt allocates the same large results again and again; fresh from malloc each one
// is fresh pages (glibc maps blocks above its threshold and unmaps them on free), which the kernel
// faults in and zeroes page by page at first touch and unmaps with a TLB shootdown across cores:
// a quarter of a Llama-style training step's time went there. Kept here, a block is reused as it
// is.
//
// Only blocks of at least kHostCacheMinBytes, sized in whole pages; at most host_cache_limit()
// bytes held (the environment variable ATTN_CPU_CACHE_BYTES, default 1 GiB; 0 turns the cache
// off, and builds under AddressSanitizer leave it off so that a use after free is still caught).
// A block that would go over the limit is freed. A request that no cached block serves frees
// its size in the oldest blocks first, so that what is cached plus what is live never exceeds the
// most that was live at once by more than the slack of reused blocks (an eighth): the cache
// saves page faults, not memory. Thread-safe.
#pragma once

#include <cstddef>

namespace attn::detail {

constexpr std::size_t kHostCacheMinBytes = std::size_t(128) << 10;

// The size a block of `bytes` is allocated (and cached) at: whole pages from
// kHostCacheMinBytes on, else bytes itself.
std::size_t host_block_size(std::size_t bytes);
// A cached block of at least `size` bytes (host_block_size(size)) and at most an eighth more,
// taken out of the cache; *block gets its size and *mapped how it was allocated (for
// host_cache_give). nullptr when there is none, after freeing the oldest cached blocks, `size`
// bytes of them or all, for the fresh block the caller then allocates.
void* host_cache_take(std::size_t size, std::size_t* block, bool* mapped);
// Fresh zeroed pages of `block` bytes (a whole number of pages), mapped from the kernel, which
// zeroes each when it is first touched (calloc's trick); nullptr when none can be had.
void* host_map_zeroed(std::size_t block) noexcept;
// Keeps p for reuse, or frees it when the cache is off, full, or cannot record it: a block of
// `block` bytes from std::aligned_alloc, or from host_map_zeroed when `mapped`.
void host_cache_give(void* p, std::size_t block, bool mapped = false) noexcept;
// Frees every cached block (attn::empty_host_cache; an allocation that fails tries again after
// this). Returns the bytes freed.
std::size_t host_cache_release() noexcept;
// The bytes held now, and the most that may be held.
std::size_t host_cache_bytes() noexcept;
std::size_t host_cache_limit() noexcept;

}  // namespace attn::detail

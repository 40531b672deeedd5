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
// A block that would go over the limit is freed. A request is served by a cached block of its
// size, or by the head of a larger one cut in two (the tail stays cached), or by a smaller one
// grown (mremap); where a fresh block or a grown one would take what is cached plus what is live
// past an eighth more than the most that was live at once (since the start or the last release),
// the oldest blocks are freed first: the cache saves page faults, not memory. Thread-safe.
#pragma once

#include <cstddef>

namespace attn::detail {

constexpr std::size_t kHostCacheMinBytes = std::size_t(128) << 10;

// The size a block of `bytes` is allocated (and cached) at: whole pages from
// kHostCacheMinBytes on, else bytes itself.
std::size_t host_block_size(std::size_t bytes);
// A block of at least `size` bytes (host_block_size(size)) made of a cached one: one at most an
// eighth larger as it is, the head of a larger mapped one cut in two (its tail stays cached), else
// (on Linux) the largest mapped one grown by mremap. *block gets its size and *mapped how it was
// allocated (for host_cache_give); its contents are whatever they were. nullptr when none serves,
// after freeing the oldest cached blocks as far as the fresh block the caller then allocates (and
// reports with host_cache_note_fresh) would take what is cached plus what is live past the most
// that was live at once, plus an eighth.
void* host_cache_take(std::size_t size, std::size_t* block, bool* mapped);
// Counts a fresh block of `block` bytes as live (for host_cache_take's bound).
void host_cache_note_fresh(std::size_t block) noexcept;
// Fresh zeroed pages of `block` bytes (a whole number of pages), mapped from the kernel, which
// zeroes each when it is first touched (calloc's trick); nullptr when none can be had.
void* host_map_zeroed(std::size_t block) noexcept;
// A fresh block of `block` bytes (at least kHostCacheMinBytes) for a storage whose contents will
// be written: mapped from the kernel (*mapped = true) and unmapped when freed, never through
// malloc. glibc raises its mmap threshold (up to 32 MiB) each time a mapped chunk is freed and
// then serves such sizes from its heap, which it cannot give back while one small block near the
// top stays live: a training step whose cache frees and allocates large blocks grew its resident
// size by a quarter so. Under AddressSanitizer, std::aligned_alloc (*mapped = false), so that
// overflows are still caught. nullptr when none can be had.
void* host_map_block(std::size_t block, bool* mapped) noexcept;
// Whether host_map_block maps (a mapped block can be cut down, and on Linux grown, in place).
bool host_blocks_are_mapped() noexcept;
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

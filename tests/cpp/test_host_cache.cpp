// The cache of freed host blocks (src/tensor/host_cache.h, attn::cpu::empty_cache): a large
// storage freed leaves its block for the next one of about its size, zeros() from a reused block
// are zeros, the cache never holds more than its limit, and empty_cache gives everything back.
// Builds under AddressSanitizer keep no blocks (so that a use after free is still caught): there
// the reuse tests skip, and the rest check that nothing is held.
#include <attn/attn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <initializer_list>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "../../src/tensor/host_cache.h"

namespace attn {
namespace {

bool cache_on() { return detail::host_cache_limit() > 0; }

constexpr const char* kOff = "the cache is off (ATTN_CPU_CACHE_BYTES=0 or AddressSanitizer)";
constexpr const char* kOffOrUnmapped =
    "the cache is off (ATTN_CPU_CACHE_BYTES=0 or AddressSanitizer), or blocks are not mapped here";

// A float32 tensor of n elements in one storage, not zeroed (so the cache may serve it), filled.
Tensor result_of(int64_t n, float value) {
  Tensor t = empty({n});
  t.fill_(value);
  return t;
}

// Whether every 4099th element of t (a float32 tensor) is `value`.
bool filled_with(const Tensor& t, float value) {
  for (int64_t i = 0; i < t.numel(); i += 4099)
    if (t.data_ptr<float>()[i] != value) return false;
  return true;
}

// Storages of the given MiB, all live at once, then freed in that order (the first oldest in
// the cache): their addresses.
std::vector<const float*> cache_blocks(std::initializer_list<int64_t> mib) {
  std::vector<Tensor> live;
  std::vector<const float*> at;
  for (int64_t m : mib) {
    live.push_back(empty({m << 18}));
    at.push_back(live.back().data_ptr<float>());
  }
  for (Tensor& t : live) t = Tensor();
  return at;
}

TEST(HostCache, AFreedBlockServesTheNextStorageOfItsSize) {
  cpu::empty_cache();
  if (!cache_on()) {
    Tensor t = result_of(int64_t(1) << 20, 1.0f);
    t = Tensor();
    EXPECT_EQ(cpu::cached_bytes(), 0u);
    GTEST_SKIP() << kOff;
  }
  Tensor a = result_of(int64_t(1) << 20, 2.0f);  // 4 MiB
  const float* p = a.data_ptr<float>();
  a = Tensor();
  EXPECT_GE(cpu::cached_bytes(), std::size_t(4) << 20);
  Tensor b = result_of(int64_t(1) << 20, 3.0f);
  EXPECT_EQ(b.data_ptr<float>(), p);
  EXPECT_TRUE(filled_with(b, 3.0f));
  // An eighth larger is taken as it is; twice as large is cut in two: the head serves, the tail
  // stays cached as a block of its own.
  b = Tensor();
  Tensor c = result_of((int64_t(1) << 20) - 50000, 4.0f);
  EXPECT_EQ(c.data_ptr<float>(), p);
  c = Tensor();
  EXPECT_EQ(cpu::cached_bytes(), std::size_t(4) << 20);
  Tensor d = result_of(int64_t(1) << 19, 5.0f);
  if (detail::host_blocks_are_mapped()) {
    EXPECT_EQ(d.data_ptr<float>(), p);
  }
  EXPECT_EQ(cpu::cached_bytes(), std::size_t(2) << 20);
  EXPECT_TRUE(filled_with(d, 5.0f));
  d = Tensor();
  EXPECT_EQ(cpu::cached_bytes(), std::size_t(4) << 20);
  cpu::empty_cache();
}

TEST(HostCache, ASmallerStorageCutsTheSmallestBlockThatHoldsIt) {
  // The other blocks stay for the storages of their size: a 1 MiB storage takes the head of the
  // 2 MiB block (its tail stays cached), and the 4 MiB block serves the next 4 MiB one.
  cpu::empty_cache();
  if (!cache_on() || !detail::host_blocks_are_mapped()) GTEST_SKIP() << kOffOrUnmapped;
  const std::vector<const float*> at = cache_blocks({4, 2});
  const float* pa = at[0];
  const float* pb = at[1];
  ASSERT_EQ(cpu::cached_bytes(), std::size_t(6) << 20);
  Tensor c = result_of(int64_t(1) << 18, 1.0f);  // 1 MiB
  EXPECT_EQ(c.data_ptr<float>(), pb);
  EXPECT_EQ(cpu::cached_bytes(), std::size_t(5) << 20);
  Tensor d = result_of(int64_t(1) << 20, 2.0f);
  EXPECT_EQ(d.data_ptr<float>(), pa);
  EXPECT_EQ(cpu::cached_bytes(), std::size_t(1) << 20);
  EXPECT_TRUE(filled_with(c, 1.0f));
  EXPECT_TRUE(filled_with(d, 2.0f));
  cpu::empty_cache();
}

TEST(HostCache, ALargerStorageKeepsCachedPlusLiveWithinThePeak) {
  // 4 + 2 MiB were live at most; an 8 MiB storage grows a cached block (or maps a fresh one),
  // and the other cached blocks are freed, oldest first, as far as cached plus live would pass
  // max(the peak and an eighth, live + 8 MiB): here all of them.
  cpu::empty_cache();
  if (!cache_on()) GTEST_SKIP() << kOff;
  cache_blocks({4, 2});
  ASSERT_EQ(cpu::cached_bytes(), std::size_t(6) << 20);
  Tensor c = result_of(int64_t(1) << 21, 3.0f);  // 8 MiB
  EXPECT_EQ(cpu::cached_bytes(), 0u);
  EXPECT_TRUE(filled_with(c, 3.0f));
  cpu::empty_cache();
}

TEST(HostCache, ACutKeepsItsTailAndAGrowthFreesTheOldestPastThePeak) {
  // 4 + 2 + 8 MiB live at once, all freed. A 6 MiB storage takes the head of the 8 MiB block
  // (its 2 MiB tail stays cached). A 5 MiB one grows the 4 MiB block (on Linux; elsewhere maps
  // fresh and frees the oldest, the 4 MiB one): 11 MiB live and 4 cached, within the 14 MiB
  // peak plus an eighth. A 3 MiB one grows a 2 MiB block (or maps fresh), which would make 18
  // MiB: the other 2 MiB block goes.
  cpu::empty_cache();
  if (!cache_on() || !detail::host_blocks_are_mapped()) GTEST_SKIP() << kOffOrUnmapped;
  cache_blocks({4, 2, 8});
  ASSERT_EQ(cpu::cached_bytes(), std::size_t(14) << 20);
  Tensor d = result_of(int64_t(3) << 19, 1.0f);  // 6 MiB
  EXPECT_EQ(cpu::cached_bytes(), std::size_t(8) << 20);
  Tensor e = result_of(int64_t(5) << 18, 2.0f);  // 5 MiB
  EXPECT_EQ(cpu::cached_bytes(), std::size_t(4) << 20);
  Tensor f = result_of(int64_t(3) << 18, 3.0f);  // 3 MiB
  EXPECT_EQ(cpu::cached_bytes(), 0u);
  EXPECT_TRUE(filled_with(d, 1.0f));
  EXPECT_TRUE(filled_with(e, 2.0f));
  EXPECT_TRUE(filled_with(f, 3.0f));
  cpu::empty_cache();
}

// Whether the mapping that holds p carries MADV_HUGEPAGE ("hg" among its VmFlags in
// /proc/self/smaps); nullopt where that cannot be read.
std::optional<bool> advised_huge(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  if (!smaps) return std::nullopt;
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  bool inside = false;
  std::string line;
  while (std::getline(smaps, line)) {
    std::uintptr_t lo = 0, hi = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> lo >> dash >> hi && dash == '-') {
      inside = at >= lo && at < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line.find(" hg") != std::string::npos;
  }
  return std::nullopt;
}

// Whether this system records MADV_HUGEPAGE where we can see it: a mapping of our own, advised.
// Not under qemu-user, nor on a kernel without transparent huge pages.
bool huge_page_advice_visible() {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
  const std::size_t bytes = std::size_t(8) << 20;
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return false;
  const bool ok = madvise(p, bytes, MADV_HUGEPAGE) == 0 && advised_huge(p).value_or(false);
  munmap(p, bytes);
  return ok;
#else
  return false;
#endif
}

TEST(HostCache, BlocksFrom4MiBAskForHugePagesAlsoWhenGrownFromASmallOne) {
  // A fresh 8 MiB block is advised; a 2 MiB block (not advised: below 4 MiB) grown in place to
  // 8 MiB is advised after its growth. Without the advice a 256 MiB expert gather faulted 65536
  // times (bench/program_compare.py's gptoss program: 1.8 million faults in 6 steps, 47 thousand
  // with it).
  cpu::empty_cache();
  if (!detail::host_blocks_are_mapped()) GTEST_SKIP() << "blocks are not mapped here";
  if (!huge_page_advice_visible())
    GTEST_SKIP() << "this system does not show MADV_HUGEPAGE in /proc/self/smaps";
  {
    Tensor fresh = result_of(int64_t(1) << 21, 1.0f);  // 8 MiB
    EXPECT_EQ(advised_huge(fresh.data_ptr<float>()), std::optional<bool>(true));
    Tensor small = result_of(int64_t(1) << 19, 1.0f);  // 2 MiB
    EXPECT_EQ(advised_huge(small.data_ptr<float>()), std::optional<bool>(false));
  }
  cpu::empty_cache();
  if (!cache_on()) GTEST_SKIP() << kOff;
  cache_blocks({2});
  ASSERT_EQ(cpu::cached_bytes(), std::size_t(2) << 20);
  Tensor grown = result_of(int64_t(1) << 21, 2.0f);  // 8 MiB: the 2 MiB block grown
  EXPECT_EQ(cpu::cached_bytes(), 0u);
  EXPECT_EQ(advised_huge(grown.data_ptr<float>()), std::optional<bool>(true));
  EXPECT_TRUE(filled_with(grown, 2.0f));
  cpu::empty_cache();
}

TEST(HostCache, ZerosFromAReusedBlockAreZeros) {
  cpu::empty_cache();
  const int64_t n = 200000;  // 800 KB: cached, and zeroed by memset (not freshly mapped)
  Tensor a = full({n}, 7.0f);
  const float* p = a.data_ptr<float>();
  a = Tensor();
  Tensor z = zeros({n});
  if (cache_on()) EXPECT_EQ(z.data_ptr<float>(), p);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(z.data_ptr<float>()[i], 0.0f) << i;
  cpu::empty_cache();
}

// zeros() of 1 MiB and more: freshly mapped pages when nothing is cached, and a kept block
// (mapped or allocated) cleared when one is; the mapped block, written and freed, is kept too.
TEST(HostCache, LargeZerosReuseBlocksAndAreZeros) {
  cpu::empty_cache();
  const int64_t n = int64_t(1) << 19;  // 2 MiB
  Tensor a = zeros({n});
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(a.data_ptr<float>()[i], 0.0f) << i;
  a.add_(9.0);  // dirty every page
  const float* p = a.data_ptr<float>();
  a = Tensor();
  if (cache_on()) EXPECT_GE(cpu::cached_bytes(), std::size_t(2) << 20);
  Tensor z = zeros({n});
  if (cache_on()) EXPECT_EQ(z.data_ptr<float>(), p);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(z.data_ptr<float>()[i], 0.0f) << i;
  z = Tensor();
  Tensor r = full({n}, 6.0f);  // a storage not zeroed takes the mapped block as well
  if (cache_on()) EXPECT_EQ(r.data_ptr<float>(), p);
  for (int64_t i = 0; i < n; i += 1021) ASSERT_EQ(r.data_ptr<float>()[i], 6.0f);
  r = Tensor();
  EXPECT_EQ(cpu::empty_cache() > 0, cache_on());
  EXPECT_EQ(cpu::cached_bytes(), 0u);
}

TEST(HostCache, SmallStoragesAreNotCachedAndTheLimitHolds) {
  cpu::empty_cache();
  { Tensor small = result_of(1000, 1.0f); }
  EXPECT_EQ(cpu::cached_bytes(), 0u);
  // Many live blocks freed at once: the cache keeps what fits and frees the rest.
  std::vector<Tensor> live;
  for (int i = 0; i < 40; ++i) live.push_back(result_of(int64_t(1) << 18, float(i)));
  live.clear();
  EXPECT_LE(cpu::cached_bytes(), detail::host_cache_limit());
  const std::size_t held = cpu::cached_bytes();
  EXPECT_EQ(cpu::empty_cache(), held);
  EXPECT_EQ(cpu::cached_bytes(), 0u);
}

TEST(HostCache, BlockSizesAreWholePagesFromTheThreshold) {
  EXPECT_EQ(detail::host_block_size(1000), 1000u);
  EXPECT_EQ(detail::host_block_size(detail::kHostCacheMinBytes), detail::kHostCacheMinBytes);
  EXPECT_EQ(detail::host_block_size(detail::kHostCacheMinBytes + 64),
            detail::kHostCacheMinBytes + 4096);
  const std::size_t huge = ~std::size_t(0) - 63;
  EXPECT_EQ(detail::host_block_size(huge), huge);  // no wrap
  std::size_t block = 0;
  bool mapped = false;
  EXPECT_EQ(detail::host_cache_take(1000, &block, &mapped), nullptr);
}

}  // namespace
}  // namespace attn

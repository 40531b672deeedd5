// The cache of freed host blocks (src/tensor/host_cache.h, attn::cpu::empty_cache): a large
// storage freed leaves its block for the next one of about its size, zeros() from a reused block
// are zeros, the cache never holds more than its limit, and empty_cache gives everything back.
// Builds under AddressSanitizer keep no blocks (so that a use after free is still caught): there
// the reuse tests skip, and the rest check that nothing is held.
#include <attn/attn.h>
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "../../src/tensor/host_cache.h"

namespace attn {
namespace {

bool cache_on() { return detail::host_cache_limit() > 0; }

// A float32 result of n elements (an op's output: storage not zeroed, so the cache may serve it).
Tensor result_of(int64_t n, float value) { return full({n}, value) * 1.0; }

TEST(HostCache, AFreedBlockServesTheNextStorageOfItsSize) {
  cpu::empty_cache();
  if (!cache_on()) {
    Tensor t = result_of(int64_t(1) << 20, 1.0f);
    t = Tensor();
    EXPECT_EQ(cpu::cached_bytes(), 0u);
    GTEST_SKIP() << "the cache is off (ATTN_CPU_CACHE_BYTES=0 or AddressSanitizer)";
  }
  Tensor a = result_of(int64_t(1) << 20, 2.0f);  // 4 MiB
  const float* p = a.data_ptr<float>();
  a = Tensor();
  EXPECT_GE(cpu::cached_bytes(), std::size_t(4) << 20);
  Tensor b = result_of(int64_t(1) << 20, 3.0f);
  EXPECT_EQ(b.data_ptr<float>(), p);
  for (int64_t i = 0; i < b.numel(); i += 4099) ASSERT_EQ(b.data_ptr<float>()[i], 3.0f);
  // An eighth larger is still taken; twice as large is not.
  b = Tensor();
  Tensor c = result_of((int64_t(1) << 20) - 50000, 4.0f);
  EXPECT_EQ(c.data_ptr<float>(), p);
  c = Tensor();
  Tensor d = result_of(int64_t(1) << 19, 5.0f);
  EXPECT_NE(d.data_ptr<float>(), p);
  cpu::empty_cache();
}

TEST(HostCache, AMissFreesTheOldestBlocksFirst) {
  // What is cached plus what is live stays within the most that was live at once: a storage the
  // cache cannot serve first frees its size in the oldest blocks (here the 4 MiB one, given back
  // before the 2 MiB one), and the block a later storage of its size can take stays.
  cpu::empty_cache();
  if (!cache_on()) GTEST_SKIP() << "the cache is off (ATTN_CPU_CACHE_BYTES=0 or AddressSanitizer)";
  Tensor a = empty({int64_t(1) << 20});  // 4 MiB
  Tensor b = empty({int64_t(1) << 19});  // 2 MiB
  const float* pb = b.data_ptr<float>();
  a = Tensor();
  b = Tensor();
  ASSERT_EQ(cpu::cached_bytes(), std::size_t(6) << 20);
  Tensor c = empty({int64_t(1) << 18});  // 1 MiB: no block within an eighth of it
  EXPECT_EQ(cpu::cached_bytes(), std::size_t(2) << 20);
  Tensor d = empty({int64_t(1) << 19});
  EXPECT_EQ(d.data_ptr<float>(), pb);
  EXPECT_EQ(cpu::cached_bytes(), 0u);
  d.fill_(4.0f);
  for (int64_t i = 0; i < d.numel(); i += 4099) ASSERT_EQ(d.data_ptr<float>()[i], 4.0f);
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

// The paged key/value cache (include/attn/kv_cache.h): attention through a block table against
// scaled_dot_product_attention's reference kernel on the same keys laid out densely (every
// option the paged kernel takes, split key ranges, bfloat16 and int8 pools), the cache's page
// bookkeeping (fork, copy on write, remove, running out of pages), and the errors.
#include <attn/attention.h>
#include <attn/gpt.h>
#include <attn/half.h>
#include <attn/kv_cache.h>
#include <attn/ops.h>
#include <attn/random.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "test_util.h"

namespace {

using attn::Tensor;

std::vector<float> floats(const Tensor& t) {
  const Tensor c = t.contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
}

void expect_close(const Tensor& a, const Tensor& b, float tol, const std::string& what) {
  const std::vector<float> x = floats(a), y = floats(b);
  ASSERT_EQ(x.size(), y.size()) << what;
  for (size_t i = 0; i < x.size(); ++i) {
    if (std::isinf(y[i]) && x[i] == y[i]) continue;
    ASSERT_NEAR(x[i], y[i], tol * (1.0f + std::fabs(y[i]))) << what << " at " << i;
  }
}

struct Case {
  std::string name;
  int64_t page_size, H, H_kv, D, D_v, L_q;
  std::vector<int64_t> lens;
  bool causal = false;
  int64_t window_left = -1;
  double softcap = 0.0;
  bool alibi = false, sinks = false;
};

// A case's pools with its sequences' pages shuffled over them, and the same keys densely.
struct Pools {
  Tensor q, k_cache, v_cache, table, lens;
  std::vector<Tensor> k_dense, v_dense;  // per sequence (1, H_kv, len, D)
};

// rounded: the pools are rounded to that dtype (bfloat16 or float16) and back, so the dense keys
// hold what is stored.
Pools make_pools(const Case& c, uint64_t seed, std::optional<attn::Dtype> rounded = std::nullopt) {
  attn::Generator gen(seed);
  const int64_t B = int64_t(c.lens.size());
  int64_t max_pages = 1, total = 0;
  for (int64_t len : c.lens) {
    max_pages = std::max(max_pages, (len + c.page_size - 1) / c.page_size);
    total += (len + c.page_size - 1) / c.page_size;
  }
  const int64_t num_pages = total + 3;  // a few pages nobody uses
  Pools p;
  p.q = attn::randn({B, c.L_q, c.H, c.D}, &gen);
  p.k_cache = attn::randn({num_pages, c.page_size, c.H_kv, c.D}, &gen);
  p.v_cache = attn::randn({num_pages, c.page_size, c.H_kv, c.D_v}, &gen);
  if (rounded) {
    p.k_cache = p.k_cache.to(*rounded).to(attn::Dtype::Float32);
    p.v_cache = p.v_cache.to(*rounded).to(attn::Dtype::Float32);
  }
  // Pages handed out in a shuffled order.
  std::vector<int64_t> order(static_cast<size_t>(num_pages), 0);
  const Tensor perm = attn::randperm(num_pages, &gen);
  for (int64_t i = 0; i < num_pages; ++i) order[size_t(i)] = perm.data_ptr<int64_t>()[i];
  p.table = attn::zeros({B, max_pages}, attn::Dtype::Int64);
  p.lens = attn::empty({B}, attn::Dtype::Int64);
  size_t next = 0;
  for (int64_t b = 0; b < B; ++b) {
    const int64_t len = c.lens[size_t(b)], pages = (len + c.page_size - 1) / c.page_size;
    p.lens.data_ptr<int64_t>()[b] = len;
    std::vector<Tensor> kp, vp;
    for (int64_t n = 0; n < pages; ++n) {
      const int64_t page = order[next++];
      p.table.data_ptr<int64_t>()[b * max_pages + n] = page;
      const int64_t rows = std::min(c.page_size, len - n * c.page_size);
      kp.push_back(p.k_cache.select(0, page).narrow(0, 0, rows));
      vp.push_back(p.v_cache.select(0, page).narrow(0, 0, rows));
    }
    if (pages == 0) {
      kp.push_back(attn::zeros({0, c.H_kv, c.D}));
      vp.push_back(attn::zeros({0, c.H_kv, c.D_v}));
    }
    p.k_dense.push_back(attn::cat(kp, 0).transpose(0, 1).unsqueeze(0));
    p.v_dense.push_back(attn::cat(vp, 0).transpose(0, 1).unsqueeze(0));
  }
  return p;
}

attn::SdpaOptions options_of(const Case& c, attn::Generator& gen) {
  attn::SdpaOptions o;
  o.is_causal = c.causal;
  o.window_left = c.window_left;
  o.softcap = c.softcap;
  if (c.alibi) o.alibi_slopes = attn::rand({c.H}, &gen) * 0.3f;
  if (c.sinks) o.sinks = attn::randn({c.H}, &gen);
  return o;
}

// Sequence b by the reference kernel: q (1, H, L_q, D) against its dense keys, bottom-right.
std::pair<Tensor, Tensor> reference(const Case& c, const Pools& p, int64_t b, attn::SdpaOptions o) {
  o.causal_align = attn::CausalAlign::BottomRight;
  o.enable_gqa = true;
  o.backend = attn::SdpaBackend::Reference;
  const Tensor q = p.q.select(0, b).transpose(0, 1).unsqueeze(0);  // (1, H, L_q, D)
  attn::SdpaForwardResult r =
      attn::scaled_dot_product_attention_forward(q, p.k_dense[size_t(b)], p.v_dense[size_t(b)], o);
  return {r.out.squeeze(0).transpose(0, 1), r.lse.squeeze(0)};  // (L_q, H, D_v), (H, L_q)
}

const std::vector<Case>& cases() {
  static const std::vector<Case> k = {
      {"decode_one_page", 16, 4, 4, 32, 32, 1, {7}},
      {"decode_ragged_lengths", 16, 4, 4, 32, 32, 1, {1, 16, 17, 40, 100}},
      {"gqa_decode", 8, 8, 2, 64, 64, 1, {33, 9, 64}, true},
      {"page_of_one_token", 1, 2, 1, 16, 24, 2, {5, 3}, true},
      {"odd_page_size_and_dims", 5, 3, 1, 13, 7, 3, {12, 4, 23}, true},
      {"chunk_of_queries_gqa", 16, 6, 2, 32, 32, 9, {40, 9, 70}, true},  // 27 rows per head
      {"window", 16, 4, 2, 32, 32, 4, {60, 30}, true, 10},
      {"window_without_causal", 16, 4, 2, 32, 32, 2, {60, 30}, false, 10},
      {"softcap_alibi_sinks", 16, 4, 2, 32, 32, 3, {50, 21}, true, -1, 5.0, true, true},
      {"non_causal_mods", 7, 2, 2, 16, 16, 2, {29, 2}, false, -1, 2.0, true, true},
      {"long_keys_split", 16, 2, 1, 64, 64, 1, {3000}, true},  // few items: the keys are split
      {"long_keys_split_ragged",
       32,
       4,
       4,
       32,
       32,
       1,
       {2500, 700, 4100},
       true,
       -1,
       0.0,
       false,
       true},
      {"empty_sequence", 16, 2, 2, 16, 16, 1, {0, 5}, false},
      {"empty_sequence_sinks", 16, 2, 2, 16, 16, 1, {0, 5}, false, -1, 0.0, false, true},
      {"more_queries_than_keys", 4, 2, 1, 16, 16, 6, {3, 8}, true},
  };
  return k;
}

class PagedTable : public ::testing::TestWithParam<Case> {};

TEST_P(PagedTable, MatchesTheDenseReference) {
  const Case& c = GetParam();
  const Pools p = make_pools(c, 17);
  attn::Generator gen(5);
  const attn::SdpaOptions o = options_of(c, gen);
  Tensor lse;
  const Tensor out =
      attn::attention_with_kvcache(p.q, p.k_cache, p.v_cache, p.lens, p.table, o, &lse);
  ASSERT_EQ(out.shape(), (attn::Shape{int64_t(c.lens.size()), c.L_q, c.H, c.D_v}));
  ASSERT_EQ(lse.shape(), (attn::Shape{int64_t(c.lens.size()), c.H, c.L_q}));
  for (int64_t b = 0; b < int64_t(c.lens.size()); ++b) {
    const auto [ro, rl] = reference(c, p, b, o);
    expect_close(out.select(0, b), ro, 2e-5f, c.name + " out, sequence " + std::to_string(b));
    expect_close(lse.select(0, b), rl, 2e-5f, c.name + " lse, sequence " + std::to_string(b));
  }
}

// 2-byte pools (read in place, widened in the registers) against the reference on the keys they
// hold.
TEST_P(PagedTable, Bfloat16AndFloat16PoolsMatchTheReferenceOnRoundedKeys) {
  const Case& c = GetParam();
  for (const attn::Dtype dt : {attn::Dtype::BFloat16, attn::Dtype::Float16}) {
    const Pools p = make_pools(c, 23, dt);
    const Tensor kb = p.k_cache.to(dt), vb = p.v_cache.to(dt);
    attn::Generator gen(5);
    const attn::SdpaOptions o = options_of(c, gen);
    const Tensor out = attn::attention_with_kvcache(p.q, kb, vb, p.lens, p.table, o);
    for (int64_t b = 0; b < int64_t(c.lens.size()); ++b)
      expect_close(out.select(0, b), reference(c, p, b, o).first, 2e-5f,
                   c.name + " " + attn::dtype_name(dt));
  }
}

INSTANTIATE_TEST_SUITE_P(Cases, PagedTable, ::testing::ValuesIn(cases()),
                         [](const auto& info) { return info.param.name; });

TEST(Paged, SameBitsForAnyThreadCount) {
  const Case c{"split", 16, 4, 2, 64, 64, 1, {3000, 1000}, true, -1, 0.0, true, true};
  const Pools p = make_pools(c, 3);
  attn::Generator gen(1);
  const attn::SdpaOptions o = options_of(c, gen);
  const int before = attn::get_num_threads();
  std::vector<std::vector<float>> outs;
  for (int t : {1, 2, 3}) {
    attn::set_num_threads(t);
    outs.push_back(
        floats(attn::attention_with_kvcache(p.q, p.k_cache, p.v_cache, p.lens, p.table, o)));
  }
  attn::set_num_threads(before);
  EXPECT_EQ(outs[0], outs[1]);
  EXPECT_EQ(outs[0], outs[2]);
}

TEST(Paged, Errors) {
  const Case c{"e", 4, 2, 1, 8, 8, 1, {6, 3}};
  const Pools p = make_pools(c, 1);
  auto call = [&](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& lens,
                  const Tensor& table, attn::SdpaOptions o = {}) {
    return attn::attention_with_kvcache(q, k, v, lens, table, o);
  };
  Tensor bad_table = p.table.clone();
  bad_table.data_ptr<int64_t>()[1] = 99;  // sequence 0's second page
  EXPECT_ERROR_HAS(
      call(p.q, p.k_cache, p.v_cache, p.lens, bad_table),
      "[attention_with_kvcache] block_table[0, 1] = 99 points outside the 6 pages of k_cache");
  bad_table.data_ptr<int64_t>()[1] = -1;
  EXPECT_ERROR_HAS(call(p.q, p.k_cache, p.v_cache, p.lens, bad_table), "block_table[0, 1] = -1");
  // Entries past a sequence's pages are never read, so they may hold anything.
  Tensor spare = p.table.clone();
  spare.data_ptr<int64_t>()[spare.size(1) + 1] = 12345;  // sequence 1 uses one page
  EXPECT_NO_THROW(call(p.q, p.k_cache, p.v_cache, p.lens, spare));
  Tensor long_lens = p.lens.clone();
  long_lens.data_ptr<int64_t>()[1] = 9;  // two pages of 4 in the table
  EXPECT_ERROR_HAS(call(p.q, p.k_cache, p.v_cache, long_lens, p.table),
                   "cache_seqlens[1] = 9 is outside [0, 8]");
  long_lens.data_ptr<int64_t>()[1] = -1;
  EXPECT_ERROR_HAS(call(p.q, p.k_cache, p.v_cache, long_lens, p.table), "cache_seqlens[1] = -1");
  EXPECT_ERROR_HAS(call(p.q, p.k_cache, p.v_cache, p.lens.narrow(0, 0, 1), p.table),
                   "cache_seqlens must be int64 (2)");
  EXPECT_ERROR_HAS(call(p.q, p.k_cache, p.v_cache, p.lens, p.table.to(attn::Dtype::Float32)),
                   "block_table must be int64");
  EXPECT_ERROR_HAS(call(p.q, p.k_cache.to(attn::Dtype::BFloat16), p.v_cache, p.lens, p.table),
                   "k_cache and v_cache must have one dtype");
  EXPECT_ERROR_HAS(call(p.q, p.k_cache.narrow(0, 0, 2), p.v_cache, p.lens, p.table),
                   "must agree in pages");
  EXPECT_ERROR_HAS(call(p.q, p.k_cache.select(0, 0), p.v_cache, p.lens, p.table),
                   "k_cache must be float32, bfloat16 or float16 (num_pages, page_size, H_kv, D)");
  EXPECT_ERROR_HAS(call(p.q, p.k_cache.to(attn::Dtype::Float16),
                        p.v_cache.to(attn::Dtype::BFloat16), p.lens, p.table),
                   "k_cache and v_cache must have one dtype");
  EXPECT_ERROR_HAS(call(p.q.narrow(3, 0, 4), p.k_cache, p.v_cache, p.lens, p.table),
                   "has head dim 4, the keys 8");
  EXPECT_ERROR_HAS(call(p.q.narrow(0, 0, 1), p.k_cache, p.v_cache, p.lens, p.table),
                   "has 1 sequences, the cache 2");
  const Tensor two_heads = attn::randn({p.k_cache.size(0), 4, 2, 8});
  EXPECT_ERROR_HAS(call(attn::randn({2, 1, 3, 8}), two_heads, two_heads, p.lens, p.table),
                   "q's 3 heads are not a multiple of the cache's 2");
  attn::SdpaOptions o;
  o.dropout_p = 0.1;
  EXPECT_ERROR_HAS(call(p.q, p.k_cache, p.v_cache, p.lens, p.table, o), "dropout is not supported");
  o = {};
  o.attn_mask = attn::ones({1, 6}, attn::Dtype::Bool);
  EXPECT_ERROR_HAS(call(p.q, p.k_cache, p.v_cache, p.lens, p.table, o), "attn_mask");
  o = {};
  o.relative_bias = attn::zeros({2, 3});
  EXPECT_ERROR_HAS(call(p.q, p.k_cache, p.v_cache, p.lens, p.table, o), "relative_bias");
  o = {};
  o.window_right = 2;
  EXPECT_ERROR_HAS(call(p.q, p.k_cache, p.v_cache, p.lens, p.table, o),
                   "window_right without is_causal");
  o = {};
  o.sinks = attn::zeros({3});
  EXPECT_ERROR_HAS(call(p.q, p.k_cache, p.v_cache, p.lens, p.table, o),
                   "sinks must be float32 (2) for 2 heads");
  o = {};
  o.alibi_slopes = attn::zeros({2, 2});
  EXPECT_ERROR_HAS(call(p.q, p.k_cache, p.v_cache, p.lens, p.table, o), "alibi_slopes must be");
  o = {};
  o.softcap = -1;
  EXPECT_ERROR_HAS(call(p.q, p.k_cache, p.v_cache, p.lens, p.table, o), "softcap must be");
  o = {};
  o.scale = 0.0;
  EXPECT_ERROR_HAS(call(p.q, p.k_cache, p.v_cache, p.lens, p.table, o), "scale must be");
}

TEST(Paged, ViewErrors) {
  attn::PagedKVCacheOptions co;
  co.num_pages = 2, co.page_size = 4, co.num_kv_heads = 1, co.head_dim = 8;
  attn::PagedKVCache cache(co);
  const Tensor table = attn::zeros({1, 1}, attn::Dtype::Int64);
  Tensor lens = attn::full({1}, 3.0f).to(attn::Dtype::Int64);
  const Tensor q = attn::randn({1, 1, 1, 8});
  attn::PagedKVView v = cache.view(0);
  EXPECT_NO_THROW(attn::paged_attention(q, v, table, lens));
  EXPECT_ERROR_HAS(attn::paged_attention(q, v, table, lens.narrow(0, 0, 0)),
                   "[paged_attention] seqlens must be int64 (1)");
  Tensor bad = table.clone();
  bad.data_ptr<int64_t>()[0] = 2;
  EXPECT_ERROR_HAS(attn::paged_attention(q, v, bad, lens),
                   "block_table[0, 0] = 2 points outside the 2 pages of the pools");
  v.key_row_stride = 5;
  EXPECT_ERROR_HAS(attn::paged_attention(q, v, table, lens), "key stride 5 is not a multiple of 8");
  v = cache.view(0);
  v.values = nullptr;
  EXPECT_ERROR_HAS(attn::paged_attention(q, v, table, lens), "the pools are empty or incomplete");
  EXPECT_ERROR_HAS(cache.view(1), "layer 1 is outside [0, 1)");
}

// ---- the cache ----------------------------------------------------------------------------------

attn::PagedKVCacheOptions small(attn::KVCacheDtype d, int64_t pages = 12) {
  attn::PagedKVCacheOptions o;
  o.num_layers = 2, o.num_pages = pages, o.page_size = 4, o.num_kv_heads = 2, o.head_dim = 40;
  o.dtype = d;
  return o;
}

// Writes n random tokens to every layer of seq; returns them per layer.
std::vector<std::pair<Tensor, Tensor>> append(attn::PagedKVCache& cache, int64_t seq, int64_t n,
                                              attn::Generator& gen) {
  const attn::PagedKVCacheOptions& o = cache.options();
  const int64_t pos = cache.extend(seq, n);
  std::vector<std::pair<Tensor, Tensor>> kv;
  for (int64_t l = 0; l < o.num_layers; ++l) {
    Tensor k = attn::randn({n, o.num_kv_heads, o.head_dim}, &gen) * 3.0f;
    Tensor v = attn::randn({n, o.num_kv_heads, o.head_dim}, &gen);
    cache.write(l, seq, pos, k, v);
    kv.emplace_back(k, v);
  }
  return kv;
}

class CacheDtypes : public ::testing::TestWithParam<attn::KVCacheDtype> {};

TEST_P(CacheDtypes, StoresWhatIsWrittenAndAttendsToIt) {
  const attn::KVCacheDtype d = GetParam();
  attn::PagedKVCache cache(small(d));
  attn::Generator gen(9);
  const int64_t a = cache.add_sequence(), b = cache.add_sequence();
  auto a1 = append(cache, a, 6, gen);
  auto b1 = append(cache, b, 3, gen);
  auto a2 = append(cache, a, 1, gen);
  EXPECT_EQ(cache.length(a), 7);
  EXPECT_EQ(cache.length(b), 3);
  EXPECT_EQ(cache.free_pages(), 12 - 2 - 1);
  // Read back: exact for float32, within half a step of the format otherwise.
  for (int64_t l = 0; l < 2; ++l) {
    const auto [k, v] = cache.gather(l, a);
    const Tensor want_k = attn::cat({a1[size_t(l)].first, a2[size_t(l)].first}, 0);
    const std::vector<float> got = floats(k), want = floats(want_k);
    for (size_t i = 0; i < got.size(); ++i) {
      const float w = want[i];
      // float16: half a step of its 10-bit mantissa, or of its subnormals (2^-24) below 2^-14.
      const float tol = d == attn::KVCacheDtype::Float32    ? 0.0f
                        : d == attn::KVCacheDtype::BFloat16 ? std::fabs(w) * (1.0f / 256)
                        : d == attn::KVCacheDtype::Float16
                            ? std::max(std::fabs(w) * (1.0f / 2048), std::ldexp(1.0f, -25))
                            : 12.0f / 127 / 2 * 1.01f;
      // int8: at most half a step of its 32-element block (|x| < 12 here: 4 standard deviations
      // of 3 would be rare; the check uses the block's own scale below).
      if (d != attn::KVCacheDtype::Int8) ASSERT_LE(std::fabs(got[i] - w), tol) << i;
    }
    if (d == attn::KVCacheDtype::Int8)
      for (size_t r = 0; r < got.size() / 40; ++r)
        for (size_t blk = 0; blk < 2; ++blk) {
          float amax = 0;
          const size_t c0 = r * 40 + blk * 32, c1 = std::min(r * 40 + 40, c0 + 32);
          for (size_t i = c0; i < c1; ++i) amax = std::max(amax, std::fabs(want[i]));
          for (size_t i = c0; i < c1; ++i)
            ASSERT_LE(std::fabs(got[i] - want[i]), amax / 127 / 2 * 1.001f + 1e-7f) << i;
        }
  }
  // Attention over the cache equals the dense reference on the stored (read back) keys.
  Tensor q = attn::randn({2, 1, 4, 40}, &gen);
  attn::SdpaOptions o;
  o.is_causal = true;
  for (int64_t l = 0; l < 2; ++l) {
    Tensor lse;
    const Tensor out = cache.attention(l, {a, b}, q, o, &lse);
    const int64_t ids[2] = {a, b};
    for (int64_t i = 0; i < 2; ++i) {
      const auto [k, v] = cache.gather(l, ids[i]);
      attn::SdpaOptions r = o;
      r.enable_gqa = true;
      r.causal_align = attn::CausalAlign::BottomRight;
      r.backend = attn::SdpaBackend::Reference;
      const Tensor want = attn::scaled_dot_product_attention(
          q.select(0, i).transpose(0, 1).unsqueeze(0), k.transpose(0, 1).unsqueeze(0),
          v.transpose(0, 1).unsqueeze(0), r);
      expect_close(out.select(0, i), want.squeeze(0).transpose(0, 1), 2e-5f, "cache attention");
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Dtypes, CacheDtypes,
                         ::testing::Values(attn::KVCacheDtype::Float32,
                                           attn::KVCacheDtype::BFloat16,
                                           attn::KVCacheDtype::Float16, attn::KVCacheDtype::Int8),
                         [](const auto& info) {
                           return std::string(info.param == attn::KVCacheDtype::Float32    ? "f32"
                                              : info.param == attn::KVCacheDtype::BFloat16 ? "bf16"
                                              : info.param == attn::KVCacheDtype::Float16  ? "f16"
                                                                                          : "int8");
                         });

TEST(PagedKVCache, ForkSharesPagesAndCopiesOnWrite) {
  attn::PagedKVCache cache(small(attn::KVCacheDtype::Float32));
  attn::Generator gen(2);
  const int64_t a = cache.add_sequence();
  append(cache, a, 6, gen);  // pages: one full, one with 2 of 4 tokens
  EXPECT_EQ(cache.free_pages(), 10);
  const auto [k_before, v_before] = cache.gather(1, a);
  const int64_t f = cache.fork(a);
  EXPECT_EQ(cache.free_pages(), 10);  // shared, nothing copied yet
  EXPECT_EQ(cache.length(f), 6);
  // The fork's tokens are its parent's; writing into the shared prefix is refused.
  EXPECT_EQ(floats(cache.gather(1, f).first), floats(k_before));
  EXPECT_ERROR_HAS(cache.write(0, f, 5, attn::zeros({1, 2, 40}), attn::zeros({1, 2, 40})),
                   "position 5 of sequence 1 is in a page that other sequences share");
  // Appending to the fork copies the shared half-full page first: the parent is untouched.
  auto fk = append(cache, f, 1, gen);
  EXPECT_EQ(cache.free_pages(), 9);
  EXPECT_EQ(floats(cache.gather(1, a).first), floats(k_before));
  const Tensor fork_keys = cache.gather(1, f).first;
  EXPECT_EQ(floats(fork_keys.narrow(0, 0, 6)), floats(k_before));
  EXPECT_EQ(floats(fork_keys.narrow(0, 6, 1)), floats(fk[1].first));
  // The parent now owns its half-full page alone and writes in place.
  append(cache, a, 2, gen);  // fills its page (8 tokens), no copy
  EXPECT_EQ(cache.free_pages(), 9);
  append(cache, a, 1, gen);  // a third page
  EXPECT_EQ(cache.free_pages(), 8);
  // The first page stays shared until one of them goes.
  const int64_t first_page = cache.block_table({a}).data_ptr<int64_t>()[0];
  EXPECT_EQ(cache.block_table({f}).data_ptr<int64_t>()[0], first_page);
  cache.remove(a);
  EXPECT_FALSE(cache.contains(a));
  EXPECT_EQ(cache.free_pages(), 10);  // a's own two pages; the shared one is f's now
  EXPECT_EQ(floats(cache.gather(1, f).first), floats(fork_keys));
  cache.remove(f);
  EXPECT_EQ(cache.free_pages(), 12);
  EXPECT_EQ(cache.sequences().size(), 0u);
}

TEST(PagedKVCache, RunningOutOfPagesChangesNothing) {
  attn::PagedKVCache cache(small(attn::KVCacheDtype::Int8, 3));
  attn::Generator gen(4);
  const int64_t a = cache.add_sequence();
  append(cache, a, 10, gen);  // 3 pages
  const Tensor k = cache.gather(0, a).first;
  EXPECT_ERROR_HAS(cache.extend(a, 3),
                   "sequence 0 needs 1 more page for 3 tokens, the pool has 0 "
                   "free of 3");
  EXPECT_EQ(cache.length(a), 10);
  EXPECT_EQ(cache.extend(a, 2), 10);  // fits in the last page
  const int64_t f = cache.fork(a);
  EXPECT_ERROR_HAS(cache.extend(f, 1), "needs 1 more page");  // the copy on write needs a page
  EXPECT_EQ(cache.length(f), 12);
  EXPECT_EQ(floats(cache.gather(0, f).first.narrow(0, 0, 10)), floats(k));
}

// Attention of q (1, L_q, H, D) to keys k, v (L, 1, D) at real positions `pos`, the queries at
// the last L_q positions given: the reference kernel with ALiBi and the window as a float mask.
Tensor streaming_reference(const Tensor& q, const Tensor& k, const Tensor& v,
                           const std::vector<int64_t>& pos, const std::vector<int64_t>& qpos,
                           const Tensor& slopes, int64_t window_left) {
  const int64_t H = q.size(2), L_q = q.size(1), L = k.size(0);
  Tensor bias = attn::zeros({1, H, L_q, L});
  for (int64_t h = 0; h < H; ++h)
    for (int64_t i = 0; i < L_q; ++i)
      for (int64_t j = 0; j < L; ++j) {
        const int64_t d = qpos[size_t(i)] - pos[size_t(j)];
        float b = slopes.defined() ? -slopes.data_ptr<float>()[h] * float(std::abs(d)) : 0.0f;
        if (d < 0 || (window_left >= 0 && d > window_left)) b = -INFINITY;
        bias.data_ptr<float>()[(h * L_q + i) * L + j] = b;
      }
  attn::SdpaOptions r;
  r.attn_mask = bias;
  r.enable_gqa = true;
  r.backend = attn::SdpaBackend::Reference;
  return attn::scaled_dot_product_attention(q.transpose(1, 2), k.transpose(0, 1).unsqueeze(0),
                                            v.transpose(0, 1).unsqueeze(0), r)
      .transpose(1, 2);
}

TEST(PagedKVCache, StreamingEvictionKeepsSinksAndRealPositions) {
  attn::PagedKVCacheOptions co;
  co.num_pages = 16, co.page_size = 4, co.num_kv_heads = 1, co.head_dim = 16;
  attn::PagedKVCache cache(co);
  attn::Generator gen(8);
  const int64_t a = cache.add_sequence();
  const Tensor k_all = attn::randn({40, 1, 16}, &gen), v_all = attn::randn({40, 1, 16}, &gen);
  cache.extend(a, 30);
  cache.write(0, a, 0, k_all.narrow(0, 0, 30), v_all.narrow(0, 0, 30));
  EXPECT_EQ(cache.free_pages(), 16 - 8);
  // Sinks 0..3 (page 0) and the window of the last 8, from page 5 (token 20) on.
  EXPECT_EQ(cache.evict(a, 4, 8), 16);
  EXPECT_EQ(cache.length(a), 14);
  EXPECT_EQ(cache.position(a), 30);
  EXPECT_EQ(cache.free_pages(), 16 - 4);
  std::vector<int64_t> pos = {0, 1, 2, 3};
  for (int64_t p = 20; p < 30; ++p) pos.push_back(p);
  EXPECT_EQ(floats(cache.gather(0, a).first),
            floats(attn::cat({k_all.narrow(0, 0, 4), k_all.narrow(0, 20, 10)}, 0)));
  EXPECT_EQ(cache.evict(a, 4, 8), 0);  // no whole page between the sinks and the window now
  const Tensor slopes = attn::from_vector({0.5f, 0.125f}, {2});
  auto check = [&](int64_t L_q, const std::string& what) {
    const Tensor q = attn::randn({1, L_q, 2, 16}, &gen);
    std::vector<int64_t> qpos;
    for (int64_t i = 0; i < L_q; ++i) qpos.push_back(cache.position(a) - L_q + i);
    const auto [k, v] = cache.gather(0, a);
    for (const bool alibi : {false, true})
      for (const int64_t window : {int64_t(-1), int64_t(5), int64_t(12)}) {
        attn::SdpaOptions o;
        o.is_causal = true;
        o.window_left = window;
        if (alibi) o.alibi_slopes = slopes;
        const Tensor want =
            streaming_reference(q, k, v, pos, qpos, alibi ? slopes : Tensor(), window);
        expect_close(cache.attention(0, {a}, q, o), want, 2e-5f,
                     what + (alibi ? " alibi" : "") + " window " + std::to_string(window));
      }
  };
  check(2, "after eviction");
  // New tokens go on at real positions 30, 31, ...
  EXPECT_EQ(cache.extend(a, 3), 14);
  cache.write(0, a, 14, k_all.narrow(0, 30, 3), v_all.narrow(0, 30, 3));
  for (int64_t p = 30; p < 33; ++p) pos.push_back(p);
  check(3, "after appending");
  // A second eviction widens the same gap.
  EXPECT_EQ(cache.evict(a, 4, 5), 8);  // pages of tokens 20..27 go; 28.. stay
  EXPECT_EQ(cache.position(a), 33);
  pos.erase(pos.begin() + 4, pos.begin() + 12);
  check(1, "after a second eviction");
  // A fork keeps the gap; sinks cannot grow back.
  const int64_t f = cache.fork(a);
  EXPECT_EQ(cache.position(f), 33);
  EXPECT_ERROR_HAS(cache.evict(a, 8, 2), "keeps 4 sink tokens from an earlier eviction");
  EXPECT_ERROR_HAS(cache.truncate(a, 2), "would cut into sequence 0's sink tokens (4)");
  EXPECT_ERROR_HAS(cache.evict(a, -1, 2), "keep_first and keep_last must be >= 0");
}

TEST(PagedKVCache, Errors) {
  EXPECT_ERROR_HAS(attn::PagedKVCache(small(attn::KVCacheDtype::Float32, 0)),
                   "[PagedKVCache] num_pages must be >= 1, got 0");
  attn::PagedKVCacheOptions huge = small(attn::KVCacheDtype::Float32);
  huge.num_pages = int64_t(1) << 40;
  EXPECT_ERROR_HAS(attn::PagedKVCache{huge}, "too many pages");
  attn::PagedKVCache cache(small(attn::KVCacheDtype::BFloat16));
  const int64_t a = cache.add_sequence();
  cache.extend(a, 2);
  EXPECT_ERROR_HAS(cache.extend(7, 1), "[PagedKVCache.extend] no sequence 7 in the cache");
  EXPECT_ERROR_HAS(cache.extend(a, -1), "n must be >= 0");
  const Tensor kv = attn::zeros({2, 2, 40});
  EXPECT_ERROR_HAS(cache.write(2, a, 0, kv, kv), "layer 2 is outside [0, 2)");
  EXPECT_ERROR_HAS(cache.write(0, a, 1, kv, kv), "positions [1, 3) are outside sequence 0's 2");
  EXPECT_ERROR_HAS(cache.write(0, a, 0, attn::zeros({2, 2, 39}), kv),
                   "k must be float32 (n, 2, 40)");
  EXPECT_ERROR_HAS(cache.write(0, a, 0, kv, attn::zeros({1, 2, 40})), "differ in tokens");
  EXPECT_ERROR_HAS(cache.attention(0, {a}, attn::zeros({1, 3, 2, 40})),
                   "has 3 queries per sequence but sequence 0 holds 2 tokens");
  EXPECT_ERROR_HAS(cache.attention(0, {}, attn::zeros({1, 1, 2, 40})), "no sequences given");
  EXPECT_ERROR_HAS(cache.attention(0, {a, 5}, attn::zeros({2, 1, 2, 40})), "no sequence 5");
  EXPECT_ERROR_HAS(cache.gather(-1, a), "layer -1 is outside");
  cache.remove(a);
  EXPECT_ERROR_HAS(cache.remove(a), "no sequence 0");
  EXPECT_ERROR_HAS(cache.fork(a), "[PagedKVCache.fork] no sequence 0");
}

// ---- GPT through the paged cache ----------------------------------------------------------------

namespace gpt_paged {

attn::nn::GPT model() {
  attn::nn::GPTConfig c;
  c.vocab_size = 31, c.block_size = 40, c.n_layer = 2, c.n_head = 4, c.n_embd = 32;
  attn::Generator gen(3);
  attn::nn::GPT m(c, &gen);
  m.eval();
  return m;
}

Tensor ids(const std::vector<int64_t>& v) {
  Tensor t = attn::empty({1, int64_t(v.size())}, attn::Dtype::Int64);
  std::copy(v.begin(), v.end(), t.data_ptr<int64_t>());
  return t;
}

TEST(GptPaged, LogitsOfSequencesOfDifferentLengthsAreForwards) {
  const attn::nn::GPT m = model();
  attn::PagedKVCache cache = m.make_paged_cache(20, 4);
  const std::vector<std::vector<int64_t>> prompts = {{1, 2, 3, 4, 5, 6, 7}, {9}, {4, 4, 8, 30, 2}};
  std::vector<int64_t> seqs;
  std::vector<std::vector<int64_t>> tokens = prompts;
  for (const auto& p : prompts) {
    seqs.push_back(cache.add_sequence());
    const Tensor logits = m.forward_paged(ids(p), cache, {seqs.back()});
    expect_close(logits, m.forward(ids(p)), 1e-5f, "prefill");
  }
  // Three decoding steps of all three at once: each row's logits are those of its whole sequence.
  for (int step = 0; step < 3; ++step) {
    Tensor next = attn::empty({3, 1}, attn::Dtype::Int64);
    for (int64_t i = 0; i < 3; ++i) {
      next.data_ptr<int64_t>()[i] = (7 * step + 5 * i + 1) % 31;
      tokens[size_t(i)].push_back(next.data_ptr<int64_t>()[i]);
    }
    const Tensor logits = m.forward_paged(next, cache, seqs);
    for (int64_t i = 0; i < 3; ++i) {
      const Tensor full = m.forward(ids(tokens[size_t(i)]));
      expect_close(logits.select(0, i).select(0, 0), full.select(0, 0).select(0, full.size(1) - 1),
                   1e-5f, "decode step " + std::to_string(step));
    }
  }
}

TEST(GptPaged, GenerationEqualsGenerate) {
  const attn::nn::GPT m = model();
  attn::nn::GPT::GenerateOptions o;
  o.max_new_tokens = 12;
  o.temperature = 0.9;
  // Prompts of one length: generate()'s draws, row by row, so its tokens.
  const std::vector<std::vector<int64_t>> same = {{1, 2, 3}, {7, 7, 9}, {1, 2, 3}};
  Tensor idx = attn::empty({3, 3}, attn::Dtype::Int64);
  for (int64_t i = 0; i < 9; ++i) idx.data_ptr<int64_t>()[i] = same[size_t(i / 3)][size_t(i % 3)];
  attn::Generator g1(42), g2(42);
  const Tensor want = m.generate(idx, o, &g1);
  const auto got = m.generate_paged(same, o, &g2, attn::KVCacheDtype::Float32, 4);
  for (int64_t i = 0; i < 3; ++i)
    EXPECT_EQ(got[size_t(i)], std::vector<int64_t>(want.data_ptr<int64_t>() + i * 15,
                                                   want.data_ptr<int64_t>() + (i + 1) * 15));
  // Prompts of different lengths, greedy: each is its own generate().
  o.top_k = 1;
  const std::vector<std::vector<int64_t>> ragged = {{5}, {3, 1, 4, 1, 5, 9, 2, 6}, {5}, {8, 8}};
  for (const attn::KVCacheDtype d :
       {attn::KVCacheDtype::Float32, attn::KVCacheDtype::BFloat16, attn::KVCacheDtype::Float16}) {
    attn::Generator g(1);
    std::vector<int64_t> streamed;
    const auto many = m.generate_paged(ragged, o, &g, d, 3, [&](const Tensor& t) {
      EXPECT_EQ(t.shape(), attn::Shape{4});
      streamed.push_back(t.data_ptr<int64_t>()[1]);
    });
    EXPECT_EQ(streamed.size(), 12u);
    for (size_t i = 0; i < ragged.size(); ++i) {
      attn::Generator gi(1);
      const Tensor one = m.generate(ids(ragged[i]), o, &gi);
      const std::vector<int64_t> want_i(one.data_ptr<int64_t>(),
                                        one.data_ptr<int64_t>() + one.numel());
      if (d == attn::KVCacheDtype::Float32)
        EXPECT_EQ(many[i], want_i) << i;
      else  // rounding the cache may flip a near tie; the prompt and the length stay
        EXPECT_EQ(many[i].size(), want_i.size());
    }
    EXPECT_EQ(many[0], many[2]);  // a repeated prompt (its pages shared) decodes alike greedily
  }
}

TEST(GptPaged, Errors) {
  const attn::nn::GPT m = model();
  attn::nn::GPT::GenerateOptions o;
  o.max_new_tokens = 10;
  EXPECT_ERROR_HAS(m.generate_paged({std::vector<int64_t>(31, 1)}, o),
                   "[GPT.generate_paged] prompt 0 has 31 tokens: with max_new_tokens 10 it "
                   "exceeds block_size 40");
  EXPECT_ERROR_HAS(m.generate_paged({{1}, {}}, o), "prompt 1 is empty");
  EXPECT_ERROR_HAS(m.generate_paged({}, o), "no prompts given");
  EXPECT_ERROR_HAS(m.generate_paged({{1}}, o, nullptr, attn::KVCacheDtype::Float32, 0),
                   "page_size must be >= 1");
  attn::PagedKVCacheOptions other;
  other.num_layers = 2, other.num_pages = 4, other.num_kv_heads = 2, other.head_dim = 16;
  attn::PagedKVCache wrong(other);
  const int64_t s = wrong.add_sequence();
  EXPECT_ERROR_HAS(m.forward_paged(ids({1}), wrong, {s}), "make it with make_paged_cache");
  attn::PagedKVCache cache = m.make_paged_cache(2, 4);
  const int64_t a = cache.add_sequence(), b = cache.add_sequence();
  EXPECT_ERROR_HAS(m.forward_paged(ids({40}), cache, {a}), "token id 40");
  EXPECT_ERROR_HAS(m.forward_paged(ids({1}), cache, {a, b}), "one row per sequence (2)");
  m.forward_paged(ids({1, 2, 3, 4, 5}), cache, {a});  // both pages
  Tensor two = attn::ones({2, 1}, attn::Dtype::Int64);
  // b needs a page the pool lacks: a's extension is undone too.
  EXPECT_ERROR_HAS(m.forward_paged(two, cache, {a, b}), "needs 1 more page");
  EXPECT_EQ(cache.length(a), 5);
  EXPECT_EQ(cache.length(b), 0);
  EXPECT_ERROR_HAS(m.forward_paged(two, cache, {a, a}), "sequence 0 is given twice");
}

}  // namespace gpt_paged

}  // namespace

// Attention against paged key/value pools: paged_attention (a view of pools another object owns,
// such as PagedKVCache) and attention_with_kvcache (pools held as tensors), both ending in one
// call of the backend's sdpa_paged kernel (src/backend/attention_kernels.h).
#include <attn/attention.h>
#include <attn/ops.h>

#include <cmath>
#include <cstdint>
#include <string>
#include <utility>

#include "../backend/attention_kernels.h"
#include "../tensor/internal.h"
#include "attention_internal.h"

namespace attn {

using detail::fail;

namespace {

std::string desc(const Tensor& t) {
  return t.defined() ? detail::tensor_desc(t) : std::string("undefined");
}

// Checks q and the options against the pools' sizes in p, completes p and runs the kernel of q's
// device. p holds the pools, the checked block table and lengths, and B, H_kv, D, D_v.
Tensor run(const char* fn, const Tensor& q, backend::SdpaPaged p, const SdpaOptions& o,
           Tensor* lse) {
  if (!q.defined() || q.dtype() != Dtype::Float32 || q.dim() != 4)
    fail(fn, "q must be float32 (B, L_q, H, D), got ",
         q.defined() ? detail::tensor_desc(q) : std::string("undefined"));
  const int64_t B = q.size(0), L_q = q.size(1), H = q.size(2);
  if (B != p.B) fail(fn, "q ", shape_str(q.shape()), " has ", B, " sequences, the cache ", p.B);
  if (q.size(3) != p.D)
    fail(fn, "q ", shape_str(q.shape()), " has head dim ", q.size(3), ", the keys ", p.D);
  if (H % p.H_kv != 0)
    fail(fn, "q's ", H, " heads are not a multiple of the cache's ", p.H_kv, " key/value heads");
  if (o.attn_mask.defined() || o.key_padding_mask.defined())
    fail(fn,
         "attn_mask and key_padding_mask are not supported with a paged cache (the lengths "
         "mask the keys)");
  if (o.dropout_p != 0.0) fail(fn, "dropout is not supported with a paged cache (inference)");
  if (o.relative_bias.defined()) fail(fn, "relative_bias is not supported with a paged cache");
  if (o.window_right >= 0 && !o.is_causal)
    fail(fn, "window_right without is_causal is not supported with a paged cache");
  if (o.window_left < -1) fail(fn, "window_left must be >= 0 or -1, got ", o.window_left);
  if (!(o.softcap >= 0.0) || std::isinf(o.softcap))
    fail(fn, "softcap must be finite and >= 0, got ", o.softcap);
  const double scale = o.scale.value_or(1.0 / std::sqrt(double(p.D > 0 ? p.D : 1)));
  if (!(scale > 0.0) || std::isinf(scale)) fail(fn, "scale must be finite and > 0, got ", scale);
  auto per_head = [&](const Tensor& t, const char* name) -> Tensor {
    if (!t.defined()) return t;
    if (t.dtype() != Dtype::Float32 || t.shape() != Shape{H})
      fail(fn, name, " must be float32 (", H, ") for ", H, " heads, got ", detail::tensor_desc(t));
    if (!t.device().is_cpu() || t.device() != q.device())
      fail(fn, name, " must be on q's device ", q.device().str(), ", got ", t.device().str());
    return t.contiguous();
  };
  const Tensor alibi = per_head(o.alibi_slopes, "alibi_slopes");
  const Tensor sinks = per_head(o.sinks, "sinks");
  const auto f =
      backend::pick(fn, q.device(), q.dtype(), backend::cpu::sdpa_paged, backend::cuda::sdpa_paged);
  const Tensor qc = q.contiguous();
  Tensor out = empty({B, L_q, H, p.D_v}, Dtype::Float32);
  Tensor lse_t;
  if (lse) lse_t = empty({B, H, L_q}, Dtype::Float32);
  p.op = fn;
  p.q = qc.data_ptr<float>();
  p.out = out.data_ptr<float>();
  p.lse = lse ? lse_t.data_ptr<float>() : nullptr;
  p.H = H, p.L_q = L_q;
  p.scale = scale;
  p.causal = o.is_causal;
  p.window_left = o.window_left;
  p.softcap = o.softcap;
  p.alibi_slopes = alibi.defined() ? alibi.data_ptr<float>() : nullptr;
  p.sinks = sinks.defined() ? sinks.data_ptr<float>() : nullptr;
  if (B * L_q * H > 0) f(p);
  if (lse) *lse = lse_t;
  return out;
}

}  // namespace

namespace {

// paged_attention, reporting errors as `fn` with its name for the lengths (`lens_name`) and for
// the pools (`pools`).
Tensor paged(const char* fn, const char* lens_name, const char* pools, const Tensor& q,
             const PagedKVView& kv, const Tensor& block_table, const Tensor& seqlens,
             const SdpaOptions& options, Tensor* lse, const Tensor& evicted) {
  if (!kv.keys || !kv.values || kv.num_pages < 1 || kv.page_size < 1 || kv.num_kv_heads < 1 ||
      kv.head_dim < 1 || kv.head_dim_v < 1 ||
      (kv.dtype == KVCacheDtype::Int8 && (!kv.key_scales || !kv.value_scales)))
    fail(fn, "the pools are empty or incomplete (", kv.num_pages, " pages of ", kv.page_size,
         " rows, ", kv.num_kv_heads, " heads, head dims ", kv.head_dim, " and ", kv.head_dim_v,
         ")");
  for (int64_t s : {kv.key_page_stride, kv.key_head_stride, kv.key_row_stride})
    if (s < 0 || s % kv.head_dim != 0)
      fail(fn, "key stride ", s, " is not a multiple of ", kv.head_dim);
  for (int64_t s : {kv.value_page_stride, kv.value_head_stride, kv.value_row_stride})
    if (s < 0 || s % kv.head_dim_v != 0)
      fail(fn, "value stride ", s, " is not a multiple of ", kv.head_dim_v);
  if (!q.device().is_cpu())  // the pools are host memory: NotImplementedError for a GPU q
    backend::pick(fn, q.device(), q.dtype(), backend::cpu::sdpa_paged, backend::cuda::sdpa_paged);
  if (!block_table.defined() || block_table.dtype() != Dtype::Int64 || block_table.dim() != 2)
    fail(fn, "block_table must be int64 (B, max_pages), got ", desc(block_table));
  if (!seqlens.defined() || seqlens.dtype() != Dtype::Int64 ||
      seqlens.shape() != Shape{block_table.size(0)})
    fail(fn, lens_name, " must be int64 (", block_table.size(0), ") for block_table ",
         shape_str(block_table.shape()), ", got ", desc(seqlens));
  if (!block_table.device().is_cpu() || !seqlens.device().is_cpu())
    fail(fn, "block_table and ", lens_name, " must be on the CPU");
  const Tensor table = block_table.contiguous(), lens = seqlens.contiguous();
  const int64_t B = table.size(0), max_pages = table.size(1), ps = kv.page_size;
  const int64_t* t = table.data_ptr<int64_t>();
  const int64_t* len = lens.data_ptr<int64_t>();
  for (int64_t b = 0; b < B; ++b) {
    if (len[b] < 0 || len[b] > max_pages * ps)
      fail(fn, lens_name, "[", b, "] = ", len[b], " is outside [0, ", max_pages * ps,
           "] (block_table's ", max_pages, " pages of ", ps, ")");
    for (int64_t n = 0; n < (len[b] + ps - 1) / ps; ++n)
      if (t[b * max_pages + n] < 0 || t[b * max_pages + n] >= kv.num_pages)
        fail(fn, "block_table[", b, ", ", n, "] = ", t[b * max_pages + n], " points outside the ",
             kv.num_pages, " pages of ", pools);
  }
  backend::SdpaPaged p;
  p.B = B, p.H_kv = kv.num_kv_heads, p.D = kv.head_dim, p.D_v = kv.head_dim_v;
  p.kv_storage = kv.dtype == KVCacheDtype::Float32    ? backend::KvStorage::Float32
                 : kv.dtype == KVCacheDtype::BFloat16 ? backend::KvStorage::BFloat16
                 : kv.dtype == KVCacheDtype::Float16  ? backend::KvStorage::Float16
                                                      : backend::KvStorage::Int8;
  p.k_pages = kv.keys, p.v_pages = kv.values;
  p.k_scales = kv.key_scales, p.v_scales = kv.value_scales;
  p.num_pages = kv.num_pages, p.page_size = ps;
  p.k_page_stride = kv.key_page_stride, p.k_head_stride = kv.key_head_stride;
  p.k_row_stride = kv.key_row_stride;
  p.v_page_stride = kv.value_page_stride, p.v_head_stride = kv.value_head_stride;
  p.v_row_stride = kv.value_row_stride;
  p.block_table = t, p.block_table_stride = max_pages;
  p.seqlens = len;
  Tensor ev;
  if (evicted.defined()) {
    if (evicted.dtype() != Dtype::Int64 || evicted.shape() != Shape{B, 2} ||
        !evicted.device().is_cpu())
      fail(fn, "evicted must be int64 (", B, ", 2) on the CPU, got ", desc(evicted));
    ev = evicted.contiguous();
    const int64_t* e = ev.data_ptr<int64_t>();
    for (int64_t b = 0; b < B; ++b)
      if (e[2 * b] < 0 || e[2 * b] > len[b] || e[2 * b + 1] < 0)
        fail(fn, "evicted[", b, "] = (", e[2 * b], ", ", e[2 * b + 1],
             ") must start within the sequence's ", len[b], " keys and count >= 0");
    p.evicted = e;
  }
  return run(fn, q, p, options, lse);
}

}  // namespace

Tensor paged_attention(const Tensor& q, const PagedKVView& kv, const Tensor& block_table,
                       const Tensor& seqlens, const SdpaOptions& options, Tensor* lse,
                       const Tensor& evicted) {
  return paged("paged_attention", "seqlens", "the pools", q, kv, block_table, seqlens, options, lse,
               evicted);
}

Tensor attention_with_kvcache(const Tensor& q, const Tensor& k_cache, const Tensor& v_cache,
                              const Tensor& cache_seqlens, const Tensor& block_table,
                              const SdpaOptions& options, Tensor* lse) {
  const char* fn = "attention_with_kvcache";
  for (const auto& [t, name] : {std::pair{&k_cache, "k_cache"}, std::pair{&v_cache, "v_cache"}})
    if (!t->defined() || t->dim() != 4 ||
        (t->dtype() != Dtype::Float32 && t->dtype() != Dtype::BFloat16 &&
         t->dtype() != Dtype::Float16))
      fail(fn, name, " must be float32, bfloat16 or float16 (num_pages, page_size, H_kv, D), got ",
           desc(*t));
  if (k_cache.dtype() != v_cache.dtype())
    fail(fn, "k_cache and v_cache must have one dtype, got ", desc(k_cache), " and ",
         desc(v_cache));
  if (k_cache.size(0) != v_cache.size(0) || k_cache.size(1) != v_cache.size(1) ||
      k_cache.size(2) != v_cache.size(2))
    fail(fn, "k_cache ", shape_str(k_cache.shape()), " and v_cache ", shape_str(v_cache.shape()),
         " must agree in pages, page size and heads");
  if (!k_cache.device().is_cpu() || !v_cache.device().is_cpu() || !q.device().is_cpu())
    backend::pick(fn, q.device().is_cpu() ? k_cache.device() : q.device(), Dtype::Float32,
                  backend::cpu::sdpa_paged, backend::cuda::sdpa_paged);  // NotImplementedError
  if (k_cache.numel() == 0 || v_cache.numel() == 0)
    fail(fn, "k_cache ", shape_str(k_cache.shape()), " or v_cache ", shape_str(v_cache.shape()),
         " is empty");
  const Tensor kc = k_cache.contiguous(), vc = v_cache.contiguous();
  PagedKVView kv;
  kv.dtype = sdpa_detail::kv_cache_dtype(kc.dtype());
  kv.keys = kc.raw_data(), kv.values = vc.raw_data();
  kv.num_pages = kc.size(0), kv.page_size = kc.size(1), kv.num_kv_heads = kc.size(2);
  kv.head_dim = kc.size(3), kv.head_dim_v = vc.size(3);
  // FlashAttention's layout: (num_pages, page_size, H_kv, D).
  kv.key_page_stride = kv.page_size * kv.num_kv_heads * kv.head_dim;
  kv.key_head_stride = kv.head_dim, kv.key_row_stride = kv.num_kv_heads * kv.head_dim;
  kv.value_page_stride = kv.page_size * kv.num_kv_heads * kv.head_dim_v;
  kv.value_head_stride = kv.head_dim_v, kv.value_row_stride = kv.num_kv_heads * kv.head_dim_v;
  return paged(fn, "cache_seqlens", "k_cache", q, kv, block_table, cache_seqlens, options, lse,
               Tensor());
}

}  // namespace attn

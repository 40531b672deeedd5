// onednn_matmul.h: a cache of oneDNN matmul primitives by shape, and their execution.
#include "onednn_matmul.h"

#ifdef ATTN_HAVE_ONEDNN
#include <dnnl.h>

#include <array>
#include <cstdlib>
#include <cstring>
#include <list>
#include <memory>
#include <mutex>
#include <type_traits>
#endif

namespace attn::kernels {

#ifndef ATTN_HAVE_ONEDNN

bool onednn_matmul_bf16(bool, bool, int64_t, int64_t, int64_t, const uint16_t*, int64_t,
                        const uint16_t*, int64_t, const uint16_t*, uint16_t*, int64_t) {
  return false;
}
bool onednn_matmul_bf16_fast(bool, bool, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t,
                             bool) {
  return false;
}

#else

namespace {

using Key = std::array<int64_t, 9>;

// A primitive is shared by the cache and the calls running it, so that dropping it from the cache
// never destroys it under a running call.
using Primitive = std::shared_ptr<std::remove_pointer_t<dnnl_primitive_t> >;

struct Entry {
  Key key;
  Primitive prim;  // null: no fast kernel for this shape on this CPU
  dnnl_memory_desc_t a, b, bias, c, scratch;
  std::size_t scratch_bytes = 0;
};

constexpr std::size_t kMaxEntries = 64;

dnnl_engine_t engine() {
  static dnnl_engine_t e = [] {
    dnnl_engine_t x = nullptr;
    if (dnnl_engine_create(&x, dnnl_cpu, 0) != dnnl_success) x = nullptr;
    return x;
  }();
  return e;
}

void md2(dnnl_memory_desc_t* md, int64_t rows, int64_t cols, int64_t rs, int64_t cs) {
  const dnnl_dims_t dims = {rows, cols}, strides = {rs, cs};
  dnnl_memory_desc_init_by_strides(md, 2, dims, dnnl_bf16, strides);
}

// The primitive for one shape, or null where oneDNN offers only its reference loops.
void build(Entry& e, bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb,
           bool has_bias, int64_t ldc) {
  md2(&e.a, M, K, ta ? 1 : lda, ta ? lda : 1);
  md2(&e.b, K, N, tb ? 1 : ldb, tb ? ldb : 1);
  md2(&e.c, M, N, ldc, 1);
  std::memset(&e.bias, 0, sizeof(e.bias));
  if (has_bias) md2(&e.bias, 1, N, N, 1);
  dnnl_matmul_desc_t desc;
  if (dnnl_matmul_desc_init(&desc, &e.a, &e.b, has_bias ? &e.bias : nullptr, &e.c) != dnnl_success)
    return;
  // The scratchpad (where oneDNN packs the operands: the whole weight, for a vocabulary-sized
  // product) is ours, allocated for each call and freed after it, rather than the library's,
  // which keeps the largest one ever asked for (0.5 GB after one prefill of Llama 3.2's head).
  dnnl_primitive_attr_t attr = nullptr;
  if (dnnl_primitive_attr_create(&attr) != dnnl_success) return;
  dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user);
  dnnl_primitive_desc_t pd = nullptr;
  const dnnl_status_t st = dnnl_primitive_desc_create(&pd, &desc, attr, engine(), nullptr);
  dnnl_primitive_attr_destroy(attr);
  if (st != dnnl_success) return;
  if (const dnnl_memory_desc_t* s = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0)) {
    e.scratch = *s;
    e.scratch_bytes = dnnl_memory_desc_get_size(s);
  }
  const char* impl = nullptr;
  dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl);
  // "ref:any" and "gemm:ref" are scalar loops, far slower than widening to float32.
  dnnl_primitive_t prim = nullptr;
  if (impl && !std::strstr(impl, "ref") && dnnl_primitive_create(&prim, pd) == dnnl_success)
    e.prim = Primitive(prim, dnnl_primitive_destroy);
  dnnl_primitive_desc_destroy(pd);
}

std::mutex cache_mutex;
std::list<Entry> cache;  // most recently used first

// The cache's entry for a shape, built on first use (its prim null where no fast kernel).
Entry entry_for(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t lda, int64_t ldb,
                int64_t ldc, bool bias) {
  const Key key = {ta, tb, M, N, K, lda, ldb, ldc, bias};
  std::lock_guard<std::mutex> lock(cache_mutex);
  auto it = cache.begin();
  while (it != cache.end() && it->key != key) ++it;
  if (it != cache.end()) {
    cache.splice(cache.begin(), cache, it);
  } else {
    Entry fresh;
    fresh.key = key;
    build(fresh, ta, tb, M, N, K, lda, ldb, bias, ldc);
    cache.push_front(fresh);
    if (cache.size() > kMaxEntries) cache.pop_back();
  }
  return cache.front();
}

}  // namespace

bool onednn_matmul_bf16_fast(bool ta, bool tb, int64_t M, int64_t N, int64_t K, int64_t lda,
                             int64_t ldb, int64_t ldc, bool bias) {
  if (!engine() || M <= 0 || N <= 0 || K <= 0) return false;
  return entry_for(ta, tb, M, N, K, lda, ldb, ldc, bias).prim != nullptr;
}

bool onednn_matmul_bf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, const uint16_t* A,
                        int64_t lda, const uint16_t* B, int64_t ldb, const uint16_t* bias,
                        uint16_t* C, int64_t ldc) {
  if (!engine() || M <= 0 || N <= 0 || K <= 0) return false;
  const Entry e = entry_for(ta, tb, M, N, K, lda, ldb, ldc, bias != nullptr);
  if (!e.prim) return false;
  thread_local dnnl_stream_t stream = [] {
    dnnl_stream_t s = nullptr;
    if (dnnl_stream_create(&s, engine(), dnnl_stream_default_flags) != dnnl_success) s = nullptr;
    return s;
  }();
  if (!stream) return false;
  // Page-aligned, as oneDNN's own scratchpad is.
  const std::size_t sbytes = (e.scratch_bytes + 4095) / 4096 * 4096;
  std::unique_ptr<void, decltype(&std::free)> scratch(
      sbytes ? std::aligned_alloc(4096, sbytes) : nullptr, &std::free);
  if (sbytes && !scratch) return false;  // the widening path needs less memory at once
  dnnl_memory_t ma, mb, mc, mbias = nullptr, ms = nullptr;
  dnnl_memory_create(&ma, &e.a, engine(), const_cast<uint16_t*>(A));
  dnnl_memory_create(&mb, &e.b, engine(), const_cast<uint16_t*>(B));
  dnnl_memory_create(&mc, &e.c, engine(), C);
  if (bias) dnnl_memory_create(&mbias, &e.bias, engine(), const_cast<uint16_t*>(bias));
  if (scratch) dnnl_memory_create(&ms, &e.scratch, engine(), scratch.get());
  dnnl_exec_arg_t args[5];
  int n = 0;
  args[n++] = {DNNL_ARG_SRC, ma};
  args[n++] = {DNNL_ARG_WEIGHTS, mb};
  args[n++] = {DNNL_ARG_DST, mc};
  if (mbias) args[n++] = {DNNL_ARG_BIAS, mbias};
  if (ms) args[n++] = {DNNL_ARG_SCRATCHPAD, ms};
  const dnnl_status_t st = dnnl_primitive_execute(e.prim.get(), stream, n, args);
  dnnl_stream_wait(stream);
  for (dnnl_memory_t m : {ma, mb, mc, mbias, ms})
    if (m) dnnl_memory_destroy(m);
  return st == dnnl_success;
}

#endif  // ATTN_HAVE_ONEDNN

}  // namespace attn::kernels

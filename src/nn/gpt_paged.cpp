// GPT with a paged key/value cache (include/attn/gpt.h, include/attn/kv_cache.h): the forward of
// new tokens of several sequences of different lengths at once, and generation for several
// prompts, identical prompts sharing their prefix pages.
#include <attn/autograd.h>
#include <attn/gpt.h>
#include <attn/ops.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <vector>

#include "../ops/sampling_ops.h"
#include "../tensor/internal.h"

namespace attn::nn {

using detail::fail;

PagedKVCache GPT::make_paged_cache(int64_t num_pages, int64_t page_size, KVCacheDtype dtype) const {
  PagedKVCacheOptions o;
  o.num_layers = config_.n_layer;
  o.num_pages = num_pages;
  o.page_size = page_size;
  o.num_kv_heads = config_.n_head;
  o.head_dim = config_.n_embd / config_.n_head;
  o.dtype = dtype;
  return PagedKVCache(o);
}

Tensor GPT::forward_paged(const Tensor& idx, PagedKVCache& cache,
                          const std::vector<int64_t>& seqs) const {
  const char* fn = "GPT.forward_paged";
  NoGradGuard no_grad;
  const GPTConfig& c = config_;
  const PagedKVCacheOptions& co = cache.options();
  if (co.num_layers != c.n_layer || co.num_kv_heads != c.n_head ||
      co.head_dim != c.n_embd / c.n_head)
    fail(fn, "the cache holds ", co.num_layers, " layers of ", co.num_kv_heads, " heads of ",
         co.head_dim, ", the model has ", c.n_layer, " of ", c.n_head, " of ", c.n_embd / c.n_head,
         " (make it with make_paged_cache)");
  if (!idx.defined() || idx.dtype() != Dtype::Int64 || idx.dim() != 2 ||
      idx.size(0) != int64_t(seqs.size()))
    fail(fn, "idx must be int64 (N, T) with one row per sequence (", seqs.size(), "), got ",
         idx.defined() ? detail::tensor_desc(idx) : std::string("undefined"));
  if (seqs.empty()) fail(fn, "no sequences given");
  const int64_t N = idx.size(0), T = idx.size(1);
  std::vector<int64_t> start(seqs.size());
  for (size_t n = 0; n < seqs.size(); ++n) {
    start[n] = cache.length(seqs[n]);
    for (size_t m = 0; m < n; ++m)
      if (seqs[m] == seqs[n]) fail(fn, "sequence ", seqs[n], " is given twice");
    if (start[n] + T > c.block_size)
      fail(fn, "sequence ", seqs[n], " holds ", start[n], " tokens: ", T,
           " more exceed block_size ", c.block_size);
  }
  {  // the ids, as forward() checks them
    const Tensor ic = idx.contiguous();
    for (int64_t i = 0; i < ic.numel(); ++i)
      if (ic.data_ptr<int64_t>()[i] < 0 || ic.data_ptr<int64_t>()[i] >= c.vocab_size)
        throw IndexError(detail::msg(fn, "token id ", ic.data_ptr<int64_t>()[i], " at position ", i,
                                     " is outside the vocabulary [0, ", c.vocab_size, ")"));
  }
  // Room for the new tokens; a pool that runs out leaves every sequence as it was.
  for (size_t n = 0; n < seqs.size(); ++n) {
    try {
      cache.extend(seqs[n], T);
    } catch (...) {
      for (size_t m = 0; m < n; ++m) cache.truncate(seqs[m], start[m]);
      throw;
    }
  }
  Tensor positions = empty({N, T}, Dtype::Int64);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t t = 0; t < T; ++t) positions.data_ptr<int64_t>()[n * T + t] = start[size_t(n)] + t;
  SdpaOptions so;
  so.is_causal = true;
  Tensor x = run_blocks((*wte)(idx) + (*wpe)(positions), [&](int64_t l, const Tensor& in) {
    return h[size_t(l)]->attn->forward_with(in, [&](const Tensor& q, const Tensor& k,
                                                    const Tensor& v) {  // (N, H, T, D)
      for (int64_t n = 0; n < N; ++n)
        cache.write(l, seqs[size_t(n)], start[size_t(n)], k.select(0, n).transpose(0, 1),
                    v.select(0, n).transpose(0, 1));
      return cache.attention(l, seqs, q.transpose(1, 2), so).transpose(1, 2);
    });
  });
  return functional::linear(x, wte->weight);
}

std::vector<std::vector<int64_t>> GPT::generate_paged(
    const std::vector<std::vector<int64_t>>& prompts, const GenerateOptions& opt, Generator* gen,
    KVCacheDtype kv_dtype, int64_t page_size,
    const std::function<void(const Tensor&)>& on_token) const {
  const char* fn = "GPT.generate_paged";
  opt.validate(fn);
  if (page_size < 1) fail(fn, "page_size must be >= 1, got ", page_size);
  if (prompts.empty()) fail(fn, "no prompts given");
  const GPTConfig& c = config_;
  int64_t pages = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const int64_t len = int64_t(prompts[i].size());
    if (len < 1) fail(fn, "prompt ", i, " is empty");
    if (len + opt.max_new_tokens > c.block_size)
      fail(fn, "prompt ", i, " has ", len, " tokens: with max_new_tokens ", opt.max_new_tokens,
           " it exceeds block_size ", c.block_size, " (generate() crops the context instead)");
    pages += (len + opt.max_new_tokens + page_size - 1) / page_size + 1;  // + a copy on write
  }
  std::vector<std::vector<int64_t>> out = prompts;
  if (opt.max_new_tokens == 0) return out;
  NoGradGuard no_grad;
  Generator& g = gen ? *gen : default_generator();
  PagedKVCache cache = make_paged_cache(pages, page_size, kv_dtype);
  const int64_t N = int64_t(prompts.size()), V = c.vocab_size;
  // Prefill: each distinct prompt once; a repeated one forks the first's sequence.
  std::vector<int64_t> seqs(prompts.size());
  Tensor logits = empty({N, V}, Dtype::Float32);  // the last position's, per sequence
  std::map<std::vector<int64_t>, size_t> first;
  for (size_t i = 0; i < prompts.size(); ++i) {
    auto [it, fresh] = first.emplace(prompts[i], i);
    if (!fresh) {
      seqs[i] = cache.fork(seqs[it->second]);
      logits.select(0, int64_t(i)).copy_(logits.select(0, int64_t(it->second)));
      continue;
    }
    seqs[i] = cache.add_sequence();
    Tensor ids = empty({1, int64_t(prompts[i].size())}, Dtype::Int64);
    std::copy(prompts[i].begin(), prompts[i].end(), ids.data_ptr<int64_t>());
    const Tensor l = forward_paged(ids, cache, {seqs[i]});
    logits.select(0, int64_t(i)).copy_(l.select(0, 0).select(0, l.size(1) - 1));
  }
  Tensor next = empty({N, 1}, Dtype::Int64);
  for (int64_t step = 0; step < opt.max_new_tokens; ++step) {
    if (step > 0) logits = forward_paged(next, cache, seqs).select(1, 0).contiguous();
    next = detail::sample_tokens(logits, opt.temperature, opt.top_k, g, fn, step);
    for (int64_t i = 0; i < N; ++i) out[size_t(i)].push_back(next.data_ptr<int64_t>()[i]);
    if (on_token) on_token(next.reshape({N}));
  }
  return out;
}

}  // namespace attn::nn

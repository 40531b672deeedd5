// What attention_with_kvcache (attention_paged.cpp) shares with PagedKVCache::attention
// (nn/kv_cache.cpp): the checks of q and of the options, and the kernel call.
#pragma once

#include <attn/attention.h>

#include "../backend/attention_kernels.h"

namespace attn::paged_detail {

// Checks q (float32 (B, L_q, H, D) against p's B, D and H_kv) and the options a paged cache
// supports (attn::Error naming fn otherwise), completes p (queries, output, modifiers) and runs
// the kernel of q's device: out (B, L_q, H, D_v), and lse (B, H, L_q) when asked. p holds the
// pools, the block table (every page index already checked), the lengths and the sizes B, H_kv,
// D, D_v, num_pages, page_size.
Tensor run(const char* fn, const Tensor& q, backend::SdpaPaged p, const SdpaOptions& o,
           Tensor* lse);

}  // namespace attn::paged_detail

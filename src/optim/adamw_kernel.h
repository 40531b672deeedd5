// AdamW's element-wise update, shared by optim::AdamW and the sharded (ZeRO-1) optimizer of
// attn::distributed, so that both compute the same floats.
#pragma once

#include <attn/optim.h>

#include <cstdint>

namespace attn::optim::kernels {

// n elements of one parameter (or of a shard of it) at its `step`-th update (1-based), with the
// options' lr, betas and eps and the group's weight decay: torch.optim.AdamW's arithmetic.
void adamw_update(float* p, const float* g, float* m, float* v, int64_t n, int64_t step,
                  const AdamWOptions& o, double weight_decay);

}  // namespace attn::optim::kernels

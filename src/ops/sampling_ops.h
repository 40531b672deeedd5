// Sampling the next token of a language model (GPT.generate): not installed; nn calls it.
#pragma once

#include <attn/random.h>
#include <attn/tensor.h>

#include <cstdint>

namespace attn::detail {

// One token per row of float32 logits (B, V): softmax(logits / temperature) over the logits >=
// the row's top_k-th largest (top_k 0: all), drawn by inverse CDF with one 53-bit uniform of `gen`
// per row, in row order. Returns (B, 1) int64. A NaN logit, or no probability left, throws
// attn::Error from `fn` ("the model produced non-finite logits at step <step>").
Tensor sample_tokens(const Tensor& logits, double temperature, int64_t top_k, Generator& gen,
                     const char* fn, int64_t step);

}  // namespace attn::detail

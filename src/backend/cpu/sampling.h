// Drawing a token from one row of logits (GPT.generate's sampling, ops/sampling_ops.h): the
// probabilities at a temperature over the top-k logits, then an inverse-CDF pick. In double, in
// order over the vocabulary, so that a draw is the same on every machine.
#pragma once

#include <cstdint>
#include <vector>

namespace attn::kernels {

// probs[v] = exp(logits[v] / temperature - m) for the logits >= the top_k-th largest (ties kept;
// every logit when top_k is 0 or >= V), 0 for the others, m the largest kept logit / temperature;
// returns their sum in double. NaN when a logit is NaN. `scratch` is reused between calls.
double temperature_probs(const float* logits, int64_t V, double temperature, int64_t top_k,
                         float* probs, std::vector<float>& scratch);

// The first v (of those with probs[v] > 0) at which the running sum of probs exceeds u, or the
// last such v when u reaches the total; -1 when every probability is 0.
int64_t inverse_cdf(const float* probs, int64_t V, double u);

}  // namespace attn::kernels

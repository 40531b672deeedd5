// Row-wise softmax on raw memory.
#pragma once

#include <cstdint>

namespace attn::kernels {

// out[r, :] = softmax(x[r, :]) (or log_softmax) for `rows` contiguous rows of `cols` floats.
// Stable: the row max is subtracted first. A row that is entirely -inf gives NaN, as in PyTorch.
void softmax_rows(const float* x, float* out, int64_t rows, int64_t cols, bool log);

}  // namespace attn::kernels

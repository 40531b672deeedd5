// Row-wise softmax on raw memory.
#pragma once

#include <cstdint>

namespace attn::kernels {

// out[r, :] = softmax(x[r, :]) (or log_softmax) for `rows` contiguous rows of `cols` floats.
// Stable: the row max is subtracted first. A row that is entirely -inf gives NaN, as in PyTorch.
// e^x is vmath's polynomial (within an ulp of the C library's, as torch's Sleef exp is of the
// exact value), the C library's at -inf, NaN and denormal results; the row sum is accumulated in
// double in 8 lanes. Rows are shared among the threads above a size, each row on one: the bits
// do not depend on the thread count.
void softmax_rows(const float* x, float* out, int64_t rows, int64_t cols, bool log);

// The gradient of softmax_rows. In the forward pass this was y = softmax(x) (or log_softmax(x))
// row by row; given y and dy (both `rows` contiguous rows of `cols`) it writes dx:
//   softmax:      dx[c] = y[c] * (dy[c] - sum_c' dy[c'] y[c'])
//   log_softmax:  dx[c] = dy[c] - exp(y[c]) * sum_c' dy[c']
// The row sums are accumulated in double.
void softmax_backward_rows(const float* y, const float* dy, float* dx, int64_t rows, int64_t cols,
                           bool log);

}  // namespace attn::kernels

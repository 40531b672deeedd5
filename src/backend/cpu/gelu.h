// GELU's element kernels and the column sums of a bias's gradient, on float arrays: for the ops
// that run them inside a product's parallel region (linear_gelu's epilogue); every other caller
// goes through the tables of src/backend/layer_kernels.h.
#pragma once

#include <cstdint>

namespace attn::kernels {

// y = GELU(x) over n floats (tanh form when tanh_approx); with `aux`, Phi(x) (or the tanh form's
// tanh) for gelu_bwd. y may be x.
void gelu_fwd(const float* x, float* y, float* aux, int64_t n, bool tanh_approx);
// dx = g GELU'(x) from x and gelu_fwd's aux.
void gelu_bwd(const float* x, const float* aux, const float* g, float* dx, int64_t n,
              bool tanh_approx);

// out[j] += sum of g[i][j] over the M rows in order, for columns [c0, c1) of N: per column the
// additions of one plain loop over the rows, however the columns are split.
void column_sums(const float* g, int64_t M, int64_t N, int64_t c0, int64_t c1, float* out);

}  // namespace attn::kernels

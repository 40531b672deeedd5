// Dot products of float vectors accumulated in double.
#pragma once

#include <cstdint>

namespace attn::kernels {

// sum_i a[i] b[i] over n floats, in double: eight running sums (i mod 8, so that the adds do not
// wait on one another and the loop vectorises), added up pairwise at the end. Each product is
// exact in double; the order of the additions depends on n only.
double dot_double(const float* a, const float* b, int64_t n);

}  // namespace attn::kernels

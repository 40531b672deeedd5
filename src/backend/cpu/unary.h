// The unary kernels' element loops on float arrays, for other kernels that run them on their own
// rows (softmax's exponentials); every op goes through the tables of
// src/backend/elementwise_kernels.h.
#pragma once

#include <cstdint>

namespace attn::kernels {

// y = e^x over n floats, as torch.exp's kernel computes it (vmath's polynomial, the C library's
// exp at NaN, infinities, overflow and denormal results). y may be x.
void exp_floats(const float* x, float* y, int64_t n);

}  // namespace attn::kernels

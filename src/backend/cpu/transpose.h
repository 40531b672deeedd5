// A block of float32 transposed between two row-major layouts, a register tile at a time: the
// inner loop of copy_strided (strided.h) where a transposed view is made contiguous.
#pragma once

#include <cstdint>

namespace attn::kernels {

// d[j * ldd + i] = s[i * lds + j] for i < ni and j < nj, in W x W register tiles of the active
// instruction set (isa.h; the portable build elsewhere). s and d do not overlap.
void transpose_f32(const float* s, int64_t lds, float* d, int64_t ldd, int64_t ni, int64_t nj);

}  // namespace attn::kernels

// Finding infinities and NaNs in float arrays: attention's check of its output and inputs, and
// the trainer's health checks (through ops/finite_ops.h).
#pragma once

#include <cstdint>

namespace attn::kernels {

// Whether n contiguous floats are all finite: the exponent bits of each, OR-ed over the run
// (vectorises; an AVX-512 and an AVX2 version besides the baseline's).
bool all_finite(const float* x, int64_t n);

// How many of n floats are inf or NaN, and the first of them (its index, or -1, and value).
struct NonFinite {
  int64_t count = 0, first = -1;
  float value = 0;
};
NonFinite count_nonfinite(const float* x, int64_t n);

// Whether the floats of a strided array of `nd` <= 8 dims (sizes and strides in elements; a stride
// of 0 is a broadcast dim, read once) are all finite. Dims that continue the last one contiguously
// are read as one run; the runs are split across the threads.
bool all_finite_strided(const float* base, int nd, const int64_t* size, const int64_t* stride);

}  // namespace attn::kernels

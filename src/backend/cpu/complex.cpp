// The complex64 product on the CPU (backend::ComplexMul, src/backend/elementwise_kernels.h): the
// rotary embeddings of Meta's reference Llama code (view_as_complex(x) * freqs_cis) in one pass
// over pairs of floats, with torch's rounding: each part is two products and one sum, rounded
// separately. The file is built with -ffp-contract=off so that no product is fused into the sum.
#include <array>
#include <cstdint>

#include "../elementwise_kernels.h"
#include "isa.h"
#include "strided.h"
#include "threads.h"

namespace attn::kernels {
namespace {

// n pairs, out = a * b (or a * conj(b)); every operand contiguous (a stride of 2 floats between
// pairs), or b one pair repeated (b_step 0). The products go through a block on the stack before
// they are summed: GCC 12's vectoriser otherwise recognises the complex product and fuses it into
// FMA-addsub instructions even under -ffp-contract=off, which rounds differently from torch.
ATTN_ISA_INLINE void complex_row_body(float* out, const float* a, const float* b, int64_t b_step,
                                      int64_t n, bool conj_b) {
  constexpr int64_t kBlock = 64;
  float same[2 * kBlock], cross[2 * kBlock];  // (ar br, ai bi) and (ar bi, ai br) of each pair
  for (int64_t i0 = 0; i0 < n; i0 += kBlock) {
    const int64_t m = n - i0 < kBlock ? n - i0 : kBlock;
    const float* x = a + 2 * i0;
    const float* y = b + b_step * i0;
    for (int64_t i = 0; i < m; ++i) {
      same[2 * i] = x[2 * i] * y[b_step * i];
      same[2 * i + 1] = x[2 * i + 1] * y[b_step * i + 1];
      cross[2 * i] = x[2 * i] * y[b_step * i + 1];
      cross[2 * i + 1] = x[2 * i + 1] * y[b_step * i];
    }
    float* o = out + 2 * i0;
    if (!conj_b) {
      for (int64_t i = 0; i < m; ++i) {
        o[2 * i] = same[2 * i] - same[2 * i + 1];
        o[2 * i + 1] = cross[2 * i] + cross[2 * i + 1];
      }
    } else {
      for (int64_t i = 0; i < m; ++i) {
        o[2 * i] = same[2 * i] + same[2 * i + 1];
        o[2 * i + 1] = cross[2 * i + 1] - cross[2 * i];
      }
    }
  }
}
ATTN_ISA_VARIANTS(void, complex_row,
                  (float* out, const float* a, const float* b, int64_t b_step, int64_t n,
                   bool conj_b),
                  (out, a, b, b_step, n, conj_b))

// One row of the walk: n pairs with the strides `in` (floats between pairs) of out, a and b.
void complex_strided_row(float* out, const float* a, const float* b, int64_t n,
                         const std::array<int64_t, 3>& in, bool conj_b) {
  if (in[0] == 2 && in[1] == 2 && (in[2] == 2 || in[2] == 0))
    return complex_row(out, a, b, in[2], n, conj_b);
  if (in[0] == 2 && in[1] == 0 && in[2] == 2 && !conj_b)
    return complex_row(out, b, a, 0, n, false);  // the product commutes, bit for bit
  for (int64_t i = 0; i < n; ++i) {
    const float ar = a[i * in[1]], ai = a[i * in[1] + 1], br = b[i * in[2]], bi = b[i * in[2] + 1];
    float* o = out + i * in[0];
    if (!conj_b) {
      o[0] = ar * br - ai * bi;
      o[1] = ar * bi + ai * br;
    } else {
      o[0] = ar * br + ai * bi;
      o[1] = ai * br - ar * bi;
    }
  }
}

void complex_mul_f32(const backend::ComplexMul& m) {
  int64_t n = 1;
  for (int64_t d : *m.shape) n *= d;
  // out's strides: contiguous pairs.
  Shape out_strides(m.shape->size());
  int64_t step = 2;
  for (int64_t d = int64_t(m.shape->size()) - 1; d >= 0; --d) {
    out_strides[d] = step;
    step *= (*m.shape)[d];
  }
  const float* a = static_cast<const float*>(m.a.storage);
  const float* b = static_cast<const float*>(m.b.storage);
  // Each pair costs six flops over 24 bytes: threads pay off from about as many pairs as an
  // element-wise op has elements.
  parallel_strided_rows<3>(
      *m.shape, {&out_strides, m.a.strides, m.b.strides}, {0, m.a.offset, m.b.offset},
      threads_for(n),
      [&](const std::array<int64_t, 3>& o, int64_t len, const std::array<int64_t, 3>& in) {
        complex_strided_row(m.out + o[0], a + o[1], b + o[2], len, in, m.conj_b);
      });
}

}  // namespace
}  // namespace attn::kernels

namespace attn::backend::cpu {
// complex64 only: pairs of float32.
const Kernels<ComplexMulFn> complex_mul = {kernels::complex_mul_f32};
}  // namespace attn::backend::cpu

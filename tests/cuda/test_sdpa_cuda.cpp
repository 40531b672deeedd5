// The CUDA attention kernels (src/backend/cuda: FlashAttention-2 forward and backward on tensor
// cores, fp16 and bf16) against the CPU reference (sdpa_reference_forward/backward, double
// accumulation) run on the same rounded inputs converted back to float.
//
// Every test starts by skipping without a GPU (attn::cuda::is_available()), so that this binary
// runs everywhere and reports SKIPPED where there is none.
//
// The table (one forward and one backward test per case and element type): awkward lengths
// (1, 17, 64, 127, 300) with L_q != L_k, head dims 16, 17, 40, 64, 80, 128, 256 with D_v != D,
// causal masking with both alignments, sliding windows, bool and additive masks broadcast over
// batch and/or head (one stored transposed), key padding, GQA 8/2 and MQA 8/1, dropout, (B, L, H,
// D) and padded-row layouts (the scalar-load path), fully masked rows. Outputs and gradients are
// filled with NaN before each run, so an element the kernels forget to write fails the test.
//
// Tolerance. FlashAttention's rule is "at most ~2x the error of PyTorch's implementation on the
// same GPU"; without a GPU baseline here the bound is absolute + relative, sized for 16-bit
// outputs (an output rounding alone is 2^-9 relative in bf16, 2^-12 in fp16):
//   |gpu - ref| <= rtol * max|ref| + atol   over each tensor,
//   out: bf16 (2e-2, 1e-2), fp16 (4e-3, 2e-3);  dq, dk, dv: bf16 (4e-2, 1e-3), fp16 (8e-3, 2e-4);
//   lse (fp32): 2e-3 + 1e-3 |ref|, and -inf exactly where the reference has -inf.
// A GPU session should calibrate these against PyTorch's error on the same inputs.
#include <attn/common.h>
#include <attn/device.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "../../src/backend/cpu/sdpa_reference.h"
#include "../../src/backend/cuda/sdpa_cuda.h"

namespace {

namespace K = attn::kernels;
using K::ElemType;

constexpr float kInfF = std::numeric_limits<float>::infinity();

// ---- 16-bit floats on the host (round to nearest even) ------------------------------------------
uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  if ((x & 0x7fffffffu) > 0x7f800000u) return uint16_t((x >> 16) | 0x0040u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return uint16_t(x >> 16);
}
float bf16_to_float(uint16_t h) {
  const uint32_t x = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}
uint16_t float_to_fp16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu;
  if (a >= 0x7f800000u) return uint16_t(sign | (a > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (a < 0x38800000u) {                                  // below 2^-14: subnormal or zero
    if (a <= 0x33000000u) return uint16_t(sign);          // <= 2^-25: rounds to 0
    const uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // value / 2^-24 = m >> shift
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return uint16_t(sign | r);
  }
  const uint32_t rebased = a - 0x38000000u;  // exponent bias 127 -> 15
  uint32_t h = rebased >> 13;
  const uint32_t rem = rebased & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return uint16_t(sign | h);
}
float fp16_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  float f;
  if (e == 0) {
    f = std::ldexp(float(m), -24);
    return sign ? -f : f;
  }
  const uint32_t x =
      e == 31 ? (sign | 0x7f800000u | (m << 13)) : (sign | ((e + 112) << 23) | (m << 13));
  std::memcpy(&f, &x, 4);
  return f;
}
uint16_t to_bits(float f, ElemType t) {
  return t == ElemType::BFloat16 ? float_to_bf16(f) : float_to_fp16(f);
}
float from_bits(uint16_t b, ElemType t) {
  return t == ElemType::BFloat16 ? bf16_to_float(b) : fp16_to_float(b);
}
const char* type_tag(ElemType t) { return t == ElemType::BFloat16 ? "bf16" : "fp16"; }

// ---- device memory
// --------------------------------------------------------------------------------
#define CUDA_OK(expr)                                                              \
  do {                                                                             \
    const cudaError_t err_ = (expr);                                               \
    ASSERT_EQ(err_, cudaSuccess) << #expr << ": " << cudaGetErrorName(err_) << " " \
                                 << cudaGetErrorString(err_);                      \
  } while (0)

struct DeviceBuffer {
  void* ptr = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t n) : bytes(n) {
    if (cudaMalloc(&ptr, std::max<size_t>(n, 16)) != cudaSuccess)
      throw std::runtime_error("cudaMalloc of " + std::to_string(n) + " bytes failed");
  }
  ~DeviceBuffer() { cudaFree(ptr); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void upload(const void* src, size_t n) {
    if (cudaMemcpy(ptr, src, n, cudaMemcpyHostToDevice) != cudaSuccess)
      throw std::runtime_error("cudaMemcpy to the device failed");
  }
  void download(void* dst, size_t n) const {
    if (cudaMemcpy(dst, ptr, n, cudaMemcpyDeviceToHost) != cudaSuccess)
      throw std::runtime_error("cudaMemcpy from the device failed");
  }
  void fill_nan() {  // 0xffff is a NaN in fp16 and bf16; 0xffffffff a NaN in fp32
    if (cudaMemset(ptr, 0xff, bytes) != cudaSuccess) throw std::runtime_error("cudaMemset failed");
  }
};

// ---- cases
// ----------------------------------------------------------------------------------------
enum class Causal { None, TopLeft, BottomRight };
enum class Mask {
  None,
  BoolLqLk,     // (L_q, L_k) bool broadcast over batch and head; one row all false
  FloatHead,    // (1, H, L_q, L_k) additive broadcast over batch; -inf entries, one row all -inf
  BoolFullT,    // (B, H, L_q, L_k) bool stored transposed (column stride L_q)
  FloatKeyRow,  // (B, 1, 1, L_k) additive: the same row for every head and query
};
enum class Layout {
  BHLD,    // contiguous (B, H, L, D)
  BLHD,    // (B, L, H, D) memory seen as (B, H, L, D), outputs and gradients likewise
  Padded,  // (B, H, L, D) with rows D + 3 elements apart: unaligned rows, scalar loads/stores
};

struct Case {
  std::string name;
  int64_t B = 1, H = 1, H_kv = 1, L_q = 1, L_k = 1, D = 16, D_v = 16;
  Causal causal = Causal::None;
  int64_t wl = -1, wr = -1;
  Mask mask = Mask::None;
  bool key_padding = false;  // batch 0 random, batch 1 all padded, batch 2+ the last 3/4
  double dropout = 0.0;
  Layout layout = Layout::BHLD;
  // Score modifiers: softcap (> 0), ALiBi slopes per (batch, head), sinks per head.
  double softcap = 0.0;
  bool alibi = false, sinks = false;
};

// Deterministic normal-ish numbers (sum of uniforms), the same on every platform.
struct Rng {
  uint64_t s;
  uint64_t next() { return K::dropout_mix(s += K::kDropoutGamma); }
  float uniform() { return float(double(next() >> 11) * 0x1.0p-53); }  // [0, 1)
  float normal() {
    float x = 0;
    for (int i = 0; i < 4; ++i) x += uniform();
    return (x - 2.0f) * 1.7320508f;  // variance 1
  }
};

// A (B, N, L, E) tensor in a layout: strides in elements and the buffer size.
struct Tensor4 {
  int64_t B = 0, N = 0, L = 0, E = 0;
  int64_t bs = 0, hs = 0, rs = 0;
  size_t size = 0;
  Tensor4() = default;
  Tensor4(int64_t B_, int64_t N_, int64_t L_, int64_t E_, Layout layout)
      : B(B_), N(N_), L(L_), E(E_) {
    switch (layout) {
      case Layout::BHLD: rs = E, hs = L * E, bs = N * L * E; break;
      case Layout::BLHD: rs = N * E, hs = E, bs = L * N * E; break;
      case Layout::Padded: rs = E + 3, hs = L * (E + 3), bs = N * L * (E + 3); break;
    }
    size = size_t(std::max<int64_t>(B * bs, 1));
  }
  int64_t at(int64_t b, int64_t n, int64_t l, int64_t e) const {
    return b * bs + n * hs + l * rs + e;
  }
  // The logical elements in (B, N, L, E) order.
  std::vector<float> dense(const std::vector<float>& x) const {
    std::vector<float> d;
    d.reserve(size_t(B * N * L * E));
    for (int64_t b = 0; b < B; ++b)
      for (int64_t n = 0; n < N; ++n)
        for (int64_t l = 0; l < L; ++l)
          for (int64_t e = 0; e < E; ++e) d.push_back(x[size_t(at(b, n, l, e))]);
    return d;
  }
};

// Host data of one case in one element type: every value already rounded to the type.
struct Problem {
  Case c;
  ElemType dt;
  Tensor4 tq, tk, tv, to;  // q, k, v, out (dout, dq, dk, dv share these shapes)
  std::vector<float> q, k, v, dout, fmask, alibi, sinks;
  std::vector<uint8_t> bmask, pad;
  K::SdpaParams ref;  // the reference's parameters (pointers into this object; out/lse unset)
  // Mask geometry for the GPU (same strides as the reference's).
  size_t mask_elems = 0;

  Problem(const Case& cs, ElemType t, uint64_t seed) : c(cs), dt(t) {
    Rng rng{seed};
    tq = Tensor4(c.B, c.H, c.L_q, c.D, c.layout);
    tk = Tensor4(c.B, c.H_kv, c.L_k, c.D, c.layout);
    tv = Tensor4(c.B, c.H_kv, c.L_k, c.D_v, c.layout);
    to = Tensor4(c.B, c.H, c.L_q, c.D_v, c.layout);
    auto fill = [&](std::vector<float>& x, size_t n) {
      x.resize(n);
      for (auto& e : x) e = round(rng.normal());
    };
    fill(q, tq.size);
    fill(k, tk.size);
    fill(v, tv.size);
    fill(dout, to.size);

    K::SdpaParams& p = ref;
    p.q = q.data(), p.k = k.data(), p.v = v.data();
    p.q_batch_stride = tq.bs, p.q_head_stride = tq.hs, p.q_row_stride = tq.rs;
    p.k_batch_stride = tk.bs, p.k_head_stride = tk.hs, p.k_row_stride = tk.rs;
    p.v_batch_stride = tv.bs, p.v_head_stride = tv.hs, p.v_row_stride = tv.rs;
    p.out_batch_stride = to.bs, p.out_head_stride = to.hs, p.out_row_stride = to.rs;
    p.B = c.B, p.H = c.H, p.H_kv = c.H_kv, p.L_q = c.L_q, p.L_k = c.L_k, p.D = c.D, p.D_v = c.D_v;
    p.scale = 1.0 / std::sqrt(double(c.D));
    p.causal = c.causal != Causal::None;
    p.causal_bottom_right = c.causal == Causal::BottomRight;
    p.window_left = c.wl, p.window_right = c.wr;

    const int64_t B = c.B, H = c.H, L_q = c.L_q, L_k = c.L_k;
    switch (c.mask) {
      case Mask::None: break;
      case Mask::BoolLqLk:
        bmask.resize(size_t(L_q * L_k));
        for (auto& e : bmask) e = rng.uniform() < 0.7f;
        std::fill_n(bmask.begin() + (L_q / 2) * L_k, L_k, uint8_t(0));  // a fully masked row
        p.mask_kind = K::MaskKind::Bool, p.mask = bmask.data();
        p.mask_row_stride = L_k, p.mask_col_stride = 1;
        break;
      case Mask::FloatHead:
        fmask.resize(size_t(H * L_q * L_k));
        for (auto& e : fmask) e = rng.uniform() < 0.1f ? -kInfF : round(2.0f * rng.normal());
        std::fill_n(fmask.begin() + (L_q - 1) * L_k, L_k, -kInfF);  // head 0, last row
        p.mask_kind = K::MaskKind::Float, p.mask = fmask.data();
        p.mask_head_stride = L_q * L_k, p.mask_row_stride = L_k, p.mask_col_stride = 1;
        break;
      case Mask::BoolFullT:
        bmask.resize(size_t(B * H * L_q * L_k));
        for (auto& e : bmask) e = rng.uniform() < 0.6f;
        p.mask_kind = K::MaskKind::Bool, p.mask = bmask.data();
        p.mask_batch_stride = H * L_q * L_k, p.mask_head_stride = L_q * L_k;
        p.mask_row_stride = 1, p.mask_col_stride = L_q;
        break;
      case Mask::FloatKeyRow:
        fmask.resize(size_t(B * L_k));
        for (auto& e : fmask) e = rng.uniform() < 0.2f ? -kInfF : round(rng.normal());
        p.mask_kind = K::MaskKind::Float, p.mask = fmask.data();
        p.mask_batch_stride = L_k, p.mask_col_stride = 1;
        break;
    }
    mask_elems = std::max(bmask.size(), fmask.size());
    if (c.key_padding) {
      pad.assign(size_t(B * L_k), 0);
      for (int64_t j = 0; j < L_k; ++j) pad[size_t(j)] = rng.uniform() < 0.3f;
      if (B > 1) std::fill_n(pad.begin() + L_k, L_k, uint8_t(1));
      for (int64_t b = 2; b < B; ++b)
        for (int64_t j = L_k / 4; j < L_k; ++j) pad[size_t(b * L_k + j)] = 1;
      p.key_padding = pad.data(), p.key_padding_batch_stride = L_k;
    }
    if (c.softcap > 0) p.softcap = c.softcap;
    if (c.alibi) {  // (B, H): a slope per batch and head
      alibi.resize(size_t(B * H));
      for (auto& e : alibi) e = 0.05f + 0.3f * rng.uniform();
      p.alibi_slopes = alibi.data(), p.alibi_batch_stride = H;
    }
    if (c.sinks) {
      sinks.resize(size_t(H));
      for (auto& e : sinks) e = 2.0f * rng.normal();
      p.sinks = sinks.data();
    }
    if (c.dropout > 0) {
      p.dropout_p = c.dropout;
      p.dropout_seed = 0x5eed0000ull + seed;
      p.dropout_offset = 12345;
    }
  }

  float round(float x) const { return from_bits(to_bits(x, dt), dt); }
  std::vector<uint16_t> bits(const std::vector<float>& x) const {
    std::vector<uint16_t> b(x.size());
    for (size_t i = 0; i < x.size(); ++i) b[i] = to_bits(x[i], dt);
    return b;
  }
};

// The reference's forward (out in the case's layout, lse contiguous (B, H, L_q)).
void reference_forward(const Problem& pr, std::vector<float>& out, std::vector<float>& lse) {
  out.assign(pr.to.size, 0.0f);
  lse.assign(size_t(std::max<int64_t>(pr.c.B * pr.c.H * pr.c.L_q, 1)), 0.0f);
  K::SdpaParams p = pr.ref;
  p.out = out.data(), p.lse = lse.data();
  K::sdpa_reference_forward(p);
}

// Device copies of a problem's inputs and its GPU parameters.
struct DeviceProblem {
  DeviceBuffer q, k, v, dout, mask, pad, out, lse, alibi, sinks;
  K::CudaSdpaParams p;

  explicit DeviceProblem(const Problem& pr)
      : q(pr.tq.size * 2),
        k(pr.tk.size * 2),
        v(pr.tv.size * 2),
        dout(pr.to.size * 2),
        mask(std::max<size_t>(pr.mask_elems * 2, 16)),
        pad(std::max<size_t>(pr.pad.size(), 16)),
        out(pr.to.size * 2),
        lse(size_t(std::max<int64_t>(pr.c.B * pr.c.H * pr.c.L_q, 1)) * 4),
        alibi(std::max<size_t>(pr.alibi.size() * 4, 16)),
        sinks(std::max<size_t>(pr.sinks.size() * 4, 16)) {
    q.upload(pr.bits(pr.q).data(), q.bytes);
    k.upload(pr.bits(pr.k).data(), k.bytes);
    v.upload(pr.bits(pr.v).data(), v.bytes);
    dout.upload(pr.bits(pr.dout).data(), dout.bytes);
    const K::SdpaParams& r = pr.ref;
    p.dtype = pr.dt;
    p.q = q.ptr, p.k = k.ptr, p.v = v.ptr, p.out = out.ptr;
    p.q_batch_stride = r.q_batch_stride, p.q_head_stride = r.q_head_stride;
    p.q_row_stride = r.q_row_stride;
    p.k_batch_stride = r.k_batch_stride, p.k_head_stride = r.k_head_stride;
    p.k_row_stride = r.k_row_stride;
    p.v_batch_stride = r.v_batch_stride, p.v_head_stride = r.v_head_stride;
    p.v_row_stride = r.v_row_stride;
    p.out_batch_stride = r.out_batch_stride, p.out_head_stride = r.out_head_stride;
    p.out_row_stride = r.out_row_stride;
    p.B = r.B, p.H = r.H, p.H_kv = r.H_kv, p.L_q = r.L_q, p.L_k = r.L_k, p.D = r.D, p.D_v = r.D_v;
    p.scale = r.scale;
    p.causal = r.causal, p.causal_bottom_right = r.causal_bottom_right;
    p.window_left = r.window_left, p.window_right = r.window_right;
    p.mask_kind = r.mask_kind;
    if (!pr.bmask.empty()) {
      mask.upload(pr.bmask.data(), pr.bmask.size());
      p.mask = mask.ptr;
    } else if (!pr.fmask.empty()) {
      mask.upload(pr.bits(pr.fmask).data(), pr.fmask.size() * 2);
      p.mask = mask.ptr;
    }
    p.mask_batch_stride = r.mask_batch_stride, p.mask_head_stride = r.mask_head_stride;
    p.mask_row_stride = r.mask_row_stride, p.mask_col_stride = r.mask_col_stride;
    if (!pr.pad.empty()) {
      pad.upload(pr.pad.data(), pr.pad.size());
      p.key_padding = static_cast<const uint8_t*>(pad.ptr);
      p.key_padding_batch_stride = r.key_padding_batch_stride;
    }
    p.dropout_p = r.dropout_p, p.dropout_seed = r.dropout_seed, p.dropout_offset = r.dropout_offset;
    p.lse = static_cast<float*>(lse.ptr);
    p.softcap = r.softcap;
    if (!pr.alibi.empty()) {
      alibi.upload(pr.alibi.data(), pr.alibi.size() * 4);
      p.alibi_slopes = static_cast<const float*>(alibi.ptr);
      p.alibi_batch_stride = r.alibi_batch_stride;
    }
    if (!pr.sinks.empty()) {
      sinks.upload(pr.sinks.data(), pr.sinks.size() * 4);
      p.sinks = static_cast<const float*>(sinks.ptr);
    }
  }
};

std::vector<float> download_elems(const DeviceBuffer& buf, size_t n, ElemType t) {
  std::vector<uint16_t> b(n);
  buf.download(b.data(), n * 2);
  std::vector<float> f(n);
  for (size_t i = 0; i < n; ++i) f[i] = from_bits(b[i], t);
  return f;
}
std::vector<float> download_floats(const DeviceBuffer& buf, size_t n) {
  std::vector<float> f(n);
  buf.download(f.data(), n * 4);
  return f;
}

// |got - ref| <= rtol * max|ref| + atol elementwise (infinities must match exactly).
::testing::AssertionResult close(const char* what, const std::vector<float>& got,
                                 const std::vector<float>& ref, double rtol, double atol) {
  if (got.size() != ref.size()) return ::testing::AssertionFailure() << what << ": sizes differ";
  double max_ref = 0;
  for (float r : ref)
    if (std::isfinite(r)) max_ref = std::max(max_ref, double(std::fabs(r)));
  const double bound = rtol * max_ref + atol;
  size_t bad = 0, worst = 0;
  double worst_err = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], r = ref[i];
    double err;
    if (std::isinf(r) || std::isinf(g))
      err = g == r ? 0.0 : std::numeric_limits<double>::infinity();
    else
      err = std::isnan(g) || std::isnan(r) ? std::numeric_limits<double>::infinity()
                                           : std::fabs(g - r);
    if (!(err <= bound)) ++bad;
    if (!(err <= worst_err)) worst_err = err, worst = i;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << what << ": " << bad << " of " << got.size() << " elements off by more than " << bound
         << " (max|ref| " << max_ref << "); worst at " << worst << ": got " << got[worst]
         << ", expected " << ref[worst];
}

struct Tolerance {
  double out_rtol, out_atol, grad_rtol, grad_atol;
};
Tolerance tolerance(ElemType t) {
  return t == ElemType::BFloat16 ? Tolerance{2e-2, 1e-2, 4e-2, 1e-3}
                                 : Tolerance{4e-3, 2e-3, 8e-3, 2e-4};
}

::testing::AssertionResult lse_close(const std::vector<float>& got, const std::vector<float>& ref) {
  for (size_t i = 0; i < ref.size(); ++i) {
    const bool ok = std::isinf(ref[i])
                        ? got[i] == ref[i]
                        : std::fabs(got[i] - ref[i]) <= 2e-3 + 1e-3 * std::fabs(ref[i]);
    if (!ok)
      return ::testing::AssertionFailure()
             << "lse[" << i << "]: got " << got[i] << ", expected " << ref[i];
  }
  return ::testing::AssertionSuccess();
}

// ---- the table ----------------------------------------------------------------------------------
std::vector<Case> table() {
  std::vector<Case> t;
  auto add = [&](Case c) { t.push_back(std::move(c)); };
  // Lengths and head dims.
  add({.name = "Lq1_Lk1_D16", .L_q = 1, .L_k = 1, .D = 16, .D_v = 16});
  add({.name = "Lq1_Lk300_D64_decode", .H = 2, .L_q = 1, .L_k = 300, .D = 64, .D_v = 64});
  add({.name = "Lq17_Lk300_D40", .L_q = 17, .L_k = 300, .D = 40, .D_v = 40});
  add({.name = "Lq300_Lk17_D80", .H = 2, .L_q = 300, .L_k = 17, .D = 80, .D_v = 80});
  add({.name = "Lq127_Lk127_D64_B2H3",
       .B = 2,
       .H = 3,
       .H_kv = 3,
       .L_q = 127,
       .L_k = 127,
       .D = 64,
       .D_v = 64});
  add({.name = "Lq64_Lk127_D128", .H = 2, .H_kv = 2, .L_q = 64, .L_k = 127, .D = 128, .D_v = 128});
  add({.name = "Lq300_Lk300_D256",
       .H = 2,
       .H_kv = 2,
       .L_q = 300,
       .L_k = 300,
       .D = 256,
       .D_v = 256});
  add({.name = "Lq127_Lk64_D256", .L_q = 127, .L_k = 64, .D = 256, .D_v = 256});
  // D_v != D (and the padded head dim decided by the larger one).
  add({.name = "D64_Dv16", .L_q = 127, .L_k = 300, .D = 64, .D_v = 16});
  add({.name = "D40_Dv128", .L_q = 64, .L_k = 127, .D = 40, .D_v = 128});
  add({.name = "D256_Dv80", .L_q = 17, .L_k = 127, .D = 256, .D_v = 80});
  add({.name = "D16_Dv256", .L_q = 127, .L_k = 17, .D = 16, .D_v = 256});
  // Unaligned rows: scalar loads and stores.
  add({.name = "D17_Dv33_unaligned", .L_q = 127, .L_k = 300, .D = 17, .D_v = 33});
  add({.name = "D64_padded_rows",
       .B = 2,
       .H = 2,
       .H_kv = 2,
       .L_q = 127,
       .L_k = 127,
       .D = 64,
       .D_v = 64,
       .layout = Layout::Padded});
  // Causal masking, both alignments, L_q above and below L_k.
  add({.name = "causalTL_Lq127_Lk300",
       .H = 2,
       .H_kv = 2,
       .L_q = 127,
       .L_k = 300,
       .D = 64,
       .D_v = 64,
       .causal = Causal::TopLeft});
  add({.name = "causalTL_Lq300_Lk64",
       .L_q = 300,
       .L_k = 64,
       .D = 128,
       .D_v = 128,
       .causal = Causal::TopLeft});
  add({.name = "causalBR_Lq127_Lk300",
       .L_q = 127,
       .L_k = 300,
       .D = 80,
       .D_v = 80,
       .causal = Causal::BottomRight});
  add({.name = "causalBR_Lq300_Lk127_empty_rows",
       .H = 2,
       .H_kv = 2,
       .L_q = 300,
       .L_k = 127,
       .D = 64,
       .D_v = 64,
       .causal = Causal::BottomRight});
  add({.name = "causalTL_Lq300_Lk300_D256",
       .L_q = 300,
       .L_k = 300,
       .D = 256,
       .D_v = 256,
       .causal = Causal::TopLeft});
  // Sliding windows.
  add({.name = "window16x8_Lq300_Lk300",
       .H = 2,
       .H_kv = 2,
       .L_q = 300,
       .L_k = 300,
       .D = 64,
       .D_v = 64,
       .wl = 16,
       .wr = 8});
  add({.name = "window40_causalBR_Lq127_Lk300",
       .L_q = 127,
       .L_k = 300,
       .D = 128,
       .D_v = 128,
       .causal = Causal::BottomRight,
       .wl = 40});
  add({.name = "window_left_only_Lq300_Lk17", .L_q = 300, .L_k = 17, .D = 40, .D_v = 40, .wl = 3});
  // Masks broadcast through strides.
  add({.name = "maskBool_LqLk_B2H2",
       .B = 2,
       .H = 2,
       .H_kv = 2,
       .L_q = 127,
       .L_k = 300,
       .D = 64,
       .D_v = 64,
       .mask = Mask::BoolLqLk});
  add({.name = "maskFloat_head_B2H3",
       .B = 2,
       .H = 3,
       .H_kv = 3,
       .L_q = 300,
       .L_k = 127,
       .D = 80,
       .D_v = 80,
       .mask = Mask::FloatHead});
  add({.name = "maskBoolT_full",
       .B = 2,
       .H = 2,
       .H_kv = 2,
       .L_q = 64,
       .L_k = 127,
       .D = 128,
       .D_v = 128,
       .mask = Mask::BoolFullT});
  add({.name = "maskFloat_keyrow_causal",
       .B = 2,
       .H = 2,
       .H_kv = 1,
       .L_q = 127,
       .L_k = 127,
       .D = 64,
       .D_v = 64,
       .causal = Causal::TopLeft,
       .mask = Mask::FloatKeyRow});
  // Key padding (batch 1 entirely padded: every row of it fully masked).
  add({.name = "key_padding_B3",
       .B = 3,
       .H = 2,
       .H_kv = 2,
       .L_q = 127,
       .L_k = 300,
       .D = 64,
       .D_v = 64,
       .key_padding = true});
  // Grouped-query heads.
  add({.name = "gqa_8_2", .B = 2, .H = 8, .H_kv = 2, .L_q = 127, .L_k = 300, .D = 64, .D_v = 64});
  add({.name = "mqa_8_1_causal",
       .H = 8,
       .H_kv = 1,
       .L_q = 300,
       .L_k = 300,
       .D = 128,
       .D_v = 128,
       .causal = Causal::TopLeft});
  // Dropout (the same counter-based mask as the CPU: a mismatch moves outputs by O(1)).
  add({.name = "dropout10",
       .H = 2,
       .H_kv = 2,
       .L_q = 127,
       .L_k = 300,
       .D = 64,
       .D_v = 64,
       .dropout = 0.1});
  add({.name = "dropout30_gqa_causal",
       .B = 2,
       .H = 4,
       .H_kv = 2,
       .L_q = 300,
       .L_k = 127,
       .D = 40,
       .D_v = 40,
       .causal = Causal::BottomRight,
       .dropout = 0.3});
  // (B, L, H, D) strides.
  add({.name = "BLHD_gqa",
       .B = 2,
       .H = 4,
       .H_kv = 2,
       .L_q = 127,
       .L_k = 300,
       .D = 64,
       .D_v = 64,
       .layout = Layout::BLHD});
  add({.name = "BLHD_D256_causal",
       .H = 2,
       .H_kv = 2,
       .L_q = 64,
       .L_k = 127,
       .D = 256,
       .D_v = 256,
       .causal = Causal::TopLeft,
       .layout = Layout::BLHD});
  // Score modifiers: softcap, ALiBi per (batch, head), sinks (with fully masked rows: lse = sink).
  add({.name = "softcap_Lq127_Lk300",
       .H = 2,
       .H_kv = 2,
       .L_q = 127,
       .L_k = 300,
       .D = 64,
       .D_v = 64,
       .softcap = 2.0});
  add({.name = "alibi_causalBR_gqa",
       .B = 2,
       .H = 4,
       .H_kv = 2,
       .L_q = 127,
       .L_k = 300,
       .D = 64,
       .D_v = 64,
       .causal = Causal::BottomRight,
       .alibi = true});
  add({.name = "sinks_maskBool_empty_rows",
       .B = 2,
       .H = 2,
       .H_kv = 2,
       .L_q = 127,
       .L_k = 300,
       .D = 64,
       .D_v = 64,
       .mask = Mask::BoolLqLk,
       .sinks = true});
  add({.name = "mods_all_window_dropout_D128",
       .B = 2,
       .H = 4,
       .H_kv = 1,
       .L_q = 300,
       .L_k = 127,
       .D = 128,
       .D_v = 128,
       .causal = Causal::TopLeft,
       .wl = 50,
       .dropout = 0.1,
       .softcap = 5.0,
       .alibi = true,
       .sinks = true});
  add({.name = "mods_decode_D256",
       .H = 2,
       .H_kv = 1,
       .L_q = 1,
       .L_k = 300,
       .D = 256,
       .D_v = 256,
       .softcap = 3.0,
       .alibi = true,
       .sinks = true});
  // Everything at once.
  add({.name = "all_features",
       .B = 3,
       .H = 4,
       .H_kv = 2,
       .L_q = 127,
       .L_k = 300,
       .D = 80,
       .D_v = 64,
       .causal = Causal::BottomRight,
       .wl = 100,
       .mask = Mask::BoolLqLk,
       .key_padding = true,
       .dropout = 0.2,
       .layout = Layout::BLHD});
  return t;
}

struct Param {
  Case c;
  ElemType dt;
};
void PrintTo(const Param& p, std::ostream* os) { *os << p.c.name << "_" << type_tag(p.dt); }
std::vector<Param> params() {
  std::vector<Param> ps;
  for (const Case& c : table())
    for (ElemType t : {ElemType::BFloat16, ElemType::Float16}) ps.push_back({c, t});
  return ps;
}

class SdpaCudaTable : public ::testing::TestWithParam<Param> {};

TEST_P(SdpaCudaTable, Forward) {
  if (!attn::cuda::is_available()) GTEST_SKIP() << "no CUDA GPU";
  const Param& prm = GetParam();
  const Problem pr(prm.c, prm.dt, 1);
  std::vector<float> out_ref, lse_ref;
  reference_forward(pr, out_ref, lse_ref);

  DeviceProblem dp(pr);
  dp.out.fill_nan();
  dp.lse.fill_nan();
  ASSERT_NO_THROW(K::sdpa_cuda_forward(dp.p));
  CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> out = download_elems(dp.out, pr.to.size, prm.dt);
  const std::vector<float> lse = download_floats(dp.lse, lse_ref.size());
  const Tolerance tol = tolerance(prm.dt);
  EXPECT_TRUE(close("out", pr.to.dense(out), pr.to.dense(out_ref), tol.out_rtol, tol.out_atol));
  EXPECT_TRUE(lse_close(lse, lse_ref));
}

TEST_P(SdpaCudaTable, Backward) {
  if (!attn::cuda::is_available()) GTEST_SKIP() << "no CUDA GPU";
  const Param& prm = GetParam();
  const Problem pr(prm.c, prm.dt, 2);
  std::vector<float> out_ref, lse_ref;
  reference_forward(pr, out_ref, lse_ref);
  std::vector<float> dq_ref(pr.tq.size, 0.0f), dk_ref(pr.tk.size, 0.0f), dv_ref(pr.tv.size, 0.0f);
  K::SdpaBackwardParams rb;
  rb.fwd = pr.ref;
  rb.fwd.out = out_ref.data(), rb.fwd.lse = lse_ref.data();
  rb.dout = pr.dout.data();
  rb.dout_batch_stride = pr.to.bs, rb.dout_head_stride = pr.to.hs, rb.dout_row_stride = pr.to.rs;
  rb.dq = dq_ref.data(), rb.dk = dk_ref.data(), rb.dv = dv_ref.data();
  rb.dq_batch_stride = pr.tq.bs, rb.dq_head_stride = pr.tq.hs, rb.dq_row_stride = pr.tq.rs;
  rb.dk_batch_stride = pr.tk.bs, rb.dk_head_stride = pr.tk.hs, rb.dk_row_stride = pr.tk.rs;
  rb.dv_batch_stride = pr.tv.bs, rb.dv_head_stride = pr.tv.hs, rb.dv_row_stride = pr.tv.rs;
  K::sdpa_reference_backward(rb);

  // The GPU backward runs on the GPU forward's out and lse, as in training.
  DeviceProblem dp(pr);
  ASSERT_NO_THROW(K::sdpa_cuda_forward(dp.p));
  DeviceBuffer dq(pr.tq.size * 2), dk(pr.tk.size * 2), dv(pr.tv.size * 2);
  dq.fill_nan();
  dk.fill_nan();
  dv.fill_nan();
  K::CudaSdpaBackwardParams gb;
  gb.fwd = dp.p;
  gb.dout = dp.dout.ptr;
  gb.dout_batch_stride = pr.to.bs, gb.dout_head_stride = pr.to.hs, gb.dout_row_stride = pr.to.rs;
  gb.dq = dq.ptr, gb.dk = dk.ptr, gb.dv = dv.ptr;
  gb.dq_batch_stride = pr.tq.bs, gb.dq_head_stride = pr.tq.hs, gb.dq_row_stride = pr.tq.rs;
  gb.dk_batch_stride = pr.tk.bs, gb.dk_head_stride = pr.tk.hs, gb.dk_row_stride = pr.tk.rs;
  gb.dv_batch_stride = pr.tv.bs, gb.dv_head_stride = pr.tv.hs, gb.dv_row_stride = pr.tv.rs;
  ASSERT_NO_THROW(K::sdpa_cuda_backward(gb));
  CUDA_OK(cudaDeviceSynchronize());
  const Tolerance tol = tolerance(prm.dt);
  EXPECT_TRUE(close("dq", pr.tq.dense(download_elems(dq, pr.tq.size, prm.dt)), pr.tq.dense(dq_ref),
                    tol.grad_rtol, tol.grad_atol));
  EXPECT_TRUE(close("dk", pr.tk.dense(download_elems(dk, pr.tk.size, prm.dt)), pr.tk.dense(dk_ref),
                    tol.grad_rtol, tol.grad_atol));
  EXPECT_TRUE(close("dv", pr.tv.dense(download_elems(dv, pr.tv.size, prm.dt)), pr.tv.dense(dv_ref),
                    tol.grad_rtol, tol.grad_atol));
}

INSTANTIATE_TEST_SUITE_P(Cases, SdpaCudaTable, ::testing::ValuesIn(params()),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return info.param.c.name + "_" + type_tag(info.param.dt);
                         });

// ---- single-purpose tests -----------------------------------------------------------------------

// The GPU's dropout mask is the CPU's, element for element: with q = 0 every weight is 1 / L_k,
// and with v one-hot per key (v[j, e] = (j == e)) out[i, j] = z[i, j] / L_k exactly (0 or
// keep_scale / L_k), so the kept/dropped pattern can be read off the output.
TEST(SdpaCuda, DropoutMaskEqualsTheCpuMask) {
  if (!attn::cuda::is_available()) GTEST_SKIP() << "no CUDA GPU";
  for (ElemType dt : {ElemType::BFloat16, ElemType::Float16}) {
    const int64_t B = 2, H = 3, L_q = 100, L_k = 64;
    const double p_drop = 0.25;
    const uint64_t seed = 0xabcdef12345ull, offset = 777;
    std::vector<uint16_t> q(size_t(B * H * L_q * 16), to_bits(0.0f, dt));
    std::vector<uint16_t> k(size_t(B * H * L_k * 16), to_bits(0.5f, dt));
    std::vector<uint16_t> v(size_t(B * H * L_k * L_k), to_bits(0.0f, dt));
    for (int64_t bh = 0; bh < B * H; ++bh)
      for (int64_t j = 0; j < L_k; ++j) v[size_t((bh * L_k + j) * L_k + j)] = to_bits(1.0f, dt);
    DeviceBuffer dq_(q.size() * 2), dk_(k.size() * 2), dv_(v.size() * 2),
        dout(size_t(B * H * L_q * L_k) * 2);
    dq_.upload(q.data(), dq_.bytes);
    dk_.upload(k.data(), dk_.bytes);
    dv_.upload(v.data(), dv_.bytes);
    K::CudaSdpaParams p;
    p.dtype = dt;
    p.q = dq_.ptr, p.k = dk_.ptr, p.v = dv_.ptr, p.out = dout.ptr;
    p.B = B, p.H = H, p.H_kv = H, p.L_q = L_q, p.L_k = L_k, p.D = 16, p.D_v = L_k;
    p.q_row_stride = 16, p.q_head_stride = L_q * 16, p.q_batch_stride = H * L_q * 16;
    p.k_row_stride = 16, p.k_head_stride = L_k * 16, p.k_batch_stride = H * L_k * 16;
    p.v_row_stride = L_k, p.v_head_stride = L_k * L_k, p.v_batch_stride = H * L_k * L_k;
    p.out_row_stride = L_k, p.out_head_stride = L_q * L_k, p.out_batch_stride = H * L_q * L_k;
    p.scale = 0.25;
    p.dropout_p = p_drop, p.dropout_seed = seed, p.dropout_offset = offset;
    ASSERT_NO_THROW(K::sdpa_cuda_forward(p));
    CUDA_OK(cudaDeviceSynchronize());
    const std::vector<float> out = download_elems(dout, size_t(B * H * L_q * L_k), dt);
    int64_t mismatches = 0, dropped = 0;
    for (int64_t idx = 0; idx < B * H * L_q * L_k; ++idx) {
      const bool keep = K::dropout_keep(seed, offset, uint64_t(idx), p_drop);
      dropped += !keep;
      mismatches += keep != (out[size_t(idx)] != 0.0f);
    }
    EXPECT_EQ(mismatches, 0) << type_tag(dt);
    // And the mask is a plausible Bernoulli(0.25) draw.
    EXPECT_NEAR(double(dropped) / double(B * H * L_q * L_k), p_drop, 0.02) << type_tag(dt);
  }
}

// Gradients are bitwise the same from run to run (no atomics, fixed summation order), GQA
// included.
TEST(SdpaCuda, BackwardIsDeterministic) {
  if (!attn::cuda::is_available()) GTEST_SKIP() << "no CUDA GPU";
  Case c{.name = "det",
         .B = 2,
         .H = 8,
         .H_kv = 2,
         .L_q = 300,
         .L_k = 127,
         .D = 64,
         .D_v = 64,
         .causal = Causal::BottomRight,
         .dropout = 0.1};
  const Problem pr(c, ElemType::BFloat16, 3);
  DeviceProblem dp(pr);
  ASSERT_NO_THROW(K::sdpa_cuda_forward(dp.p));
  std::vector<std::vector<uint16_t>> runs;
  for (int run = 0; run < 2; ++run) {
    DeviceBuffer dq(pr.tq.size * 2), dk(pr.tk.size * 2), dv(pr.tv.size * 2);
    K::CudaSdpaBackwardParams gb;
    gb.fwd = dp.p;
    gb.dout = dp.dout.ptr;
    gb.dout_batch_stride = pr.to.bs, gb.dout_head_stride = pr.to.hs, gb.dout_row_stride = pr.to.rs;
    gb.dq = dq.ptr, gb.dk = dk.ptr, gb.dv = dv.ptr;
    gb.dq_batch_stride = pr.tq.bs, gb.dq_head_stride = pr.tq.hs, gb.dq_row_stride = pr.tq.rs;
    gb.dk_batch_stride = pr.tk.bs, gb.dk_head_stride = pr.tk.hs, gb.dk_row_stride = pr.tk.rs;
    gb.dv_batch_stride = pr.tv.bs, gb.dv_head_stride = pr.tv.hs, gb.dv_row_stride = pr.tv.rs;
    ASSERT_NO_THROW(K::sdpa_cuda_backward(gb));
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<uint16_t> all(pr.tq.size + pr.tk.size + pr.tv.size);
    dq.download(all.data(), pr.tq.size * 2);
    dk.download(all.data() + pr.tq.size, pr.tk.size * 2);
    dv.download(all.data() + pr.tq.size + pr.tk.size, pr.tv.size * 2);
    runs.push_back(std::move(all));
  }
  EXPECT_TRUE(runs[0] == runs[1]);
}

// Parameters the kernels do not take throw attn::DeviceError (an attn::Error), never crash.
TEST(SdpaCuda, UnsupportedParametersThrow) {
  if (!attn::cuda::is_available()) GTEST_SKIP() << "no CUDA GPU";
  DeviceBuffer buf(1 << 20);
  K::CudaSdpaParams p;
  p.q = p.k = p.v = buf.ptr;
  p.out = buf.ptr;
  p.B = 1, p.H = 1, p.H_kv = 1, p.L_q = 4, p.L_k = 4, p.D = 512, p.D_v = 512;
  p.q_row_stride = p.k_row_stride = p.v_row_stride = p.out_row_stride = 512;
  std::string why;
  EXPECT_FALSE(K::sdpa_cuda_supported(p, &why));
  EXPECT_NE(why.find("head dim"), std::string::npos) << why;
  EXPECT_THROW(K::sdpa_cuda_forward(p), attn::DeviceError);
  EXPECT_THROW(K::sdpa_cuda_forward(p), attn::Error);
  K::CudaSdpaBackwardParams b;
  b.fwd = p;
  b.fwd.lse = static_cast<float*>(buf.ptr);
  b.dout = b.dq = b.dk = b.dv = buf.ptr;
  EXPECT_THROW(K::sdpa_cuda_backward(b), attn::DeviceError);

  p.D = p.D_v = 64;
  EXPECT_TRUE(K::sdpa_cuda_supported(p, &why)) << why;
  K::CudaSdpaParams bad = p;
  bad.dropout_p = 1.0;
  EXPECT_THROW(K::sdpa_cuda_forward(bad), attn::DeviceError);
  bad = p;
  bad.H = 3, bad.H_kv = 2;
  EXPECT_THROW(K::sdpa_cuda_forward(bad), attn::DeviceError);
  bad = p;
  bad.mask_kind = K::MaskKind::Bool;
  EXPECT_THROW(K::sdpa_cuda_forward(bad), attn::DeviceError);
  bad = p;
  bad.q = static_cast<const char*>(buf.ptr) + 1;  // misaligned elements
  EXPECT_THROW(K::sdpa_cuda_forward(bad), attn::DeviceError);
  // Backward without the forward's lse.
  b.fwd = p;
  b.fwd.lse = nullptr;
  EXPECT_THROW(K::sdpa_cuda_backward(b), attn::DeviceError);
  CUDA_OK(cudaDeviceSynchronize());
}

// No keys: zero outputs and lse = -inf (as the reference); no queries: zero dk and dv.
TEST(SdpaCuda, EmptySequences) {
  if (!attn::cuda::is_available()) GTEST_SKIP() << "no CUDA GPU";
  const ElemType dt = ElemType::BFloat16;
  const int64_t H = 2, L = 37, D = 40;
  DeviceBuffer q(size_t(H * L * D) * 2), kv(16), out(size_t(H * L * D) * 2), lse(size_t(H * L) * 4);
  out.fill_nan();
  lse.fill_nan();
  q.fill_nan();  // never read into a result: no key to attend to
  K::CudaSdpaParams p;
  p.dtype = dt;
  p.q = q.ptr, p.k = kv.ptr, p.v = kv.ptr, p.out = out.ptr, p.lse = static_cast<float*>(lse.ptr);
  p.B = 1, p.H = H, p.H_kv = H, p.L_q = L, p.L_k = 0, p.D = D, p.D_v = D;
  p.q_row_stride = p.out_row_stride = D, p.q_head_stride = p.out_head_stride = L * D;
  p.q_batch_stride = p.out_batch_stride = H * L * D;
  p.k_row_stride = p.v_row_stride = D;
  p.scale = 0.1;
  ASSERT_NO_THROW(K::sdpa_cuda_forward(p));
  CUDA_OK(cudaDeviceSynchronize());
  for (float x : download_elems(out, size_t(H * L * D), dt)) ASSERT_EQ(x, 0.0f);
  for (float x : download_floats(lse, size_t(H * L))) ASSERT_EQ(x, -kInfF);

  // L_q = 0, L_k = L: dk and dv are zeros.
  DeviceBuffer k(size_t(H * L * D) * 2), v(size_t(H * L * D) * 2), dk(size_t(H * L * D) * 2),
      dv(size_t(H * L * D) * 2), empty(16);
  std::vector<uint16_t> ones(size_t(H * L * D), to_bits(1.0f, dt));
  k.upload(ones.data(), k.bytes);
  v.upload(ones.data(), v.bytes);
  dk.fill_nan();
  dv.fill_nan();
  K::CudaSdpaBackwardParams b;
  b.fwd = p;
  b.fwd.L_q = 0, b.fwd.L_k = L;
  b.fwd.q = empty.ptr, b.fwd.out = empty.ptr, b.fwd.k = k.ptr, b.fwd.v = v.ptr;
  b.fwd.k_head_stride = b.fwd.v_head_stride = L * D,
  b.fwd.k_batch_stride = b.fwd.v_batch_stride = H * L * D;
  b.fwd.lse = static_cast<float*>(empty.ptr);
  b.dout = empty.ptr, b.dq = empty.ptr, b.dk = dk.ptr, b.dv = dv.ptr;
  b.dk_row_stride = b.dv_row_stride = D, b.dk_head_stride = b.dv_head_stride = L * D;
  b.dk_batch_stride = b.dv_batch_stride = H * L * D;
  ASSERT_NO_THROW(K::sdpa_cuda_backward(b));
  CUDA_OK(cudaDeviceSynchronize());
  for (float x : download_elems(dk, size_t(H * L * D), dt)) ASSERT_EQ(x, 0.0f);
  for (float x : download_elems(dv, size_t(H * L * D), dt)) ASSERT_EQ(x, 0.0f);
}

// A caller's stream and workspace, and a forward without lse, give the same results as the
// defaults.
TEST(SdpaCuda, StreamWorkspaceAndNoLse) {
  if (!attn::cuda::is_available()) GTEST_SKIP() << "no CUDA GPU";
  Case c{.name = "stream",
         .B = 2,
         .H = 4,
         .H_kv = 2,
         .L_q = 127,
         .L_k = 127,
         .D = 64,
         .D_v = 64,
         .causal = Causal::TopLeft};
  const Problem pr(c, ElemType::Float16, 4);
  DeviceProblem dp(pr);
  ASSERT_NO_THROW(K::sdpa_cuda_forward(dp.p));
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<uint16_t> out_default(pr.to.size), out_stream(pr.to.size);
  dp.out.download(out_default.data(), pr.to.size * 2);

  cudaStream_t stream = nullptr;
  CUDA_OK(cudaStreamCreate(&stream));
  K::CudaSdpaParams p = dp.p;
  p.stream = stream;
  p.lse = nullptr;
  dp.out.fill_nan();
  ASSERT_NO_THROW(K::sdpa_cuda_forward(p));
  CUDA_OK(cudaStreamSynchronize(stream));
  dp.out.download(out_stream.data(), pr.to.size * 2);
  EXPECT_TRUE(out_default == out_stream);

  // Backward with the caller's workspace on the stream, against the self-allocating default.
  ASSERT_NO_THROW(K::sdpa_cuda_forward(dp.p));  // lse again
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<std::vector<uint16_t>> grads;
  for (int with_workspace = 0; with_workspace < 2; ++with_workspace) {
    DeviceBuffer dq(pr.tq.size * 2), dk(pr.tk.size * 2), dv(pr.tv.size * 2),
        ws(K::sdpa_cuda_backward_workspace_bytes(dp.p));
    K::CudaSdpaBackwardParams gb;
    gb.fwd = dp.p;
    gb.fwd.stream = with_workspace ? stream : nullptr;
    gb.workspace = with_workspace ? static_cast<float*>(ws.ptr) : nullptr;
    gb.dout = dp.dout.ptr;
    gb.dout_batch_stride = pr.to.bs, gb.dout_head_stride = pr.to.hs, gb.dout_row_stride = pr.to.rs;
    gb.dq = dq.ptr, gb.dk = dk.ptr, gb.dv = dv.ptr;
    gb.dq_batch_stride = pr.tq.bs, gb.dq_head_stride = pr.tq.hs, gb.dq_row_stride = pr.tq.rs;
    gb.dk_batch_stride = pr.tk.bs, gb.dk_head_stride = pr.tk.hs, gb.dk_row_stride = pr.tk.rs;
    gb.dv_batch_stride = pr.tv.bs, gb.dv_head_stride = pr.tv.hs, gb.dv_row_stride = pr.tv.rs;
    ASSERT_NO_THROW(K::sdpa_cuda_backward(gb));
    CUDA_OK(cudaDeviceSynchronize());
    std::vector<uint16_t> all(pr.tq.size + pr.tk.size + pr.tv.size);
    dq.download(all.data(), pr.tq.size * 2);
    dk.download(all.data() + pr.tq.size, pr.tk.size * 2);
    dv.download(all.data() + pr.tq.size + pr.tk.size, pr.tv.size * 2);
    grads.push_back(std::move(all));
  }
  EXPECT_TRUE(grads[0] == grads[1]);
  CUDA_OK(cudaStreamDestroy(stream));
}

// The host-side rounding the tests rely on: round to nearest even, subnormals, overflow.
TEST(SdpaCuda, HostRoundingToSixteenBits) {
  if (!attn::cuda::is_available()) GTEST_SKIP() << "no CUDA GPU";
  EXPECT_EQ(float_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(float_to_bf16(1.0f + 0x1.0p-8f), 0x3f80);  // tie -> even
  EXPECT_EQ(float_to_bf16(1.0f + 0x1.8p-8f), 0x3f81);  // above the tie
  EXPECT_EQ(float_to_bf16(-kInfF), 0xff80);
  EXPECT_EQ(float_to_fp16(1.0f), 0x3c00);
  EXPECT_EQ(float_to_fp16(1.0f + 0x1.0p-11f), 0x3c00);  // tie -> even
  EXPECT_EQ(float_to_fp16(1.0f + 0x1.8p-11f), 0x3c01);
  EXPECT_EQ(float_to_fp16(65504.0f), 0x7bff);
  EXPECT_EQ(float_to_fp16(65520.0f), 0x7c00);    // rounds to inf
  EXPECT_EQ(float_to_fp16(0x1.0p-24f), 0x0001);  // smallest subnormal
  EXPECT_EQ(float_to_fp16(0x1.0p-25f), 0x0000);  // tie -> even (0)
  EXPECT_EQ(float_to_fp16(-kInfF), 0xfc00);
  for (float x : {0.0f, 1.5f, -2.75f, 0x1.0p-20f, 1000.0f, 0.1f}) {
    EXPECT_EQ(fp16_to_float(float_to_fp16(x)), float(x == 0.1f ? 0.0999755859375f : x));
    EXPECT_EQ(bf16_to_float(float_to_bf16(x)), x == 0.1f ? 0.10009765625f : x);
  }
}

}  // namespace

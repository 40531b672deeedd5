// The fused attention kernel (FlashAttention-2 on the CPU) against the naive reference kernel, on a
// named table of cases: awkward sizes, L_q != L_k, every mask kind and causal alignment, sliding
// windows, key padding, grouped-query heads, D_v != D, strided (B, L, H, D) layouts, dropout, huge
// scores and fully masked rows; every instruction set the CPU has (the portable build included);
// 1 vs 2 threads bitwise; the vectorised 2^x to within 2 ulp; counter-based dropout exactly
// (the same mask as the reference) and statistically. The Tensor-level entry points with the new
// options (backend, window, key padding, forward + lse) are tested at the end. The score modifiers
// (softcap, ALiBi, the relative-position bias table, attention sinks) have their own table, a
// check of fully masked rows with sinks, and a tiny case worked out here in double.
//
// Tolerance (FlashAttention's rule): against the fp64 reference, the fused kernel's error may be at
// most twice that of a naive fp32 implementation (fp32 dot products, softmax with std::exp, fp32
// weighted sum) on the same case, plus a floor of a few float ulps of the output's scale for cases
// where the naive error happens to be ~0.
#include <attn/attn.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "../../src/backend/cpu/sdpa_fused.h"
#include "../../src/backend/cpu/sdpa_reference.h"
#include "isa_scope.h"

namespace {

namespace K = attn::kernels;
using K::Isa;

constexpr float kInfF = std::numeric_limits<float>::infinity();

// ---- cases
// ---------------------------------------------------------------------------------------

enum class Causal { None, TopLeft, BottomRight };
enum class Mask {
  None,
  BoolFull,     // (B, H, L_q, L_k) random, some rows entirely false
  FloatFull,    // (B, H, L_q, L_k) random values and some -inf
  BoolLqLk,     // (L_q, L_k) broadcast over B and H (strides 0)
  FloatKeyRow,  // (B, 1, 1, L_k): the same row for every query (the uniform-row path)
  FloatT,       // (L_q, L_k) stored transposed: column stride L_q, row stride 1
};
// ALiBi slopes (B, H) with batch stride 0 (Shared) or H (PerBatch); the relative-position bias
// table (H, 2 R + 1) with head stride 0 (Shared) or 2 R + 1 (PerHead).
enum class Alibi { None, Shared, PerBatch };
enum class Rel { None, Shared, PerHead };
enum class Layout {
  BHLD,    // contiguous (B, H, L, D)
  BLHD,    // (B, L, H, D) memory seen as (B, H, L, D); out written as (B, L_q, H, D_v) too
  Padded,  // (B, H, L, D) with every row D + 5 floats apart
};

struct Case {
  int64_t B = 1, H = 1, H_kv = 1, L_q = 1, L_k = 1, D = 1, D_v = 1;
  Causal causal = Causal::None;
  Mask mask = Mask::None;
  int64_t wl = -1, wr = -1;  // sliding window
  bool key_padding = false;  // batch 0 random, batch 1 fully padded, batch 2 a long run
  double dropout = 0.0;
  Layout layout = Layout::BHLD;
  float amplitude = 1.0f;  // q and k uniform in [-amplitude, amplitude]
  double scale = 0.0;      // 0: 1 / sqrt(D)
  // Score modifiers (sdpa_params.h).
  double softcap = 0.0;  // > 0: s = softcap * tanh(s / softcap)
  Alibi alibi = Alibi::None;
  Rel rel = Rel::None;
  int64_t rel_R = 0;   // rel_bias_max_distance
  bool sinks = false;  // one per head; head 1 (when H > 1) has a sink of -inf

  std::string name() const {
    std::ostringstream s;
    s << "B" << B << "_H" << H << "_Hkv" << H_kv << "_Lq" << L_q << "_Lk" << L_k << "_D" << D
      << "_Dv" << D_v;
    if (causal == Causal::TopLeft) s << "_causalTL";
    if (causal == Causal::BottomRight) s << "_causalBR";
    const char* masks[] = {
        "", "_maskBoolFull", "_maskFloatFull", "_maskBoolLqLk", "_maskFloatKeyRow", "_maskFloatT"};
    s << masks[int(mask)];
    if (wl >= 0 || wr >= 0)
      s << "_win" << (wl < 0 ? std::string("inf") : std::to_string(wl)) << "x"
        << (wr < 0 ? std::string("inf") : std::to_string(wr));
    if (key_padding) s << "_keypad";
    if (dropout > 0) s << "_drop" << int(dropout * 100);
    if (layout == Layout::BLHD) s << "_BLHD";
    if (layout == Layout::Padded) s << "_padded";
    if (amplitude != 1.0f) s << "_amp" << amplitude;
    if (scale != 0.0) s << "_scale" << int(scale * 1000);
    if (softcap > 0.0) s << "_cap" << int(softcap * 10);
    if (alibi != Alibi::None) s << (alibi == Alibi::Shared ? "_alibiS" : "_alibiB");
    if (rel != Rel::None) s << (rel == Rel::Shared ? "_relS" : "_relH") << rel_R;
    if (sinks) s << "_sinks";
    return s.str();
  }
};

// Deterministic uniform numbers in [-1, 1) (SplitMix64), the same on every platform.
struct Rng {
  uint64_t s;
  uint64_t next() { return K::dropout_mix(s += K::kDropoutGamma); }
  float uniform() { return float(double(next() >> 11) * 0x1.0p-53 * 2.0 - 1.0); }
};

// Buffers and kernel parameters for one case (out and lse pointers are set per run).
struct Problem {
  Case c;
  std::vector<float> q, k, v, fmask;
  std::vector<float> alibi, rel, sinks;  // score modifiers' parameters
  std::vector<uint8_t> bmask, pad;
  K::SdpaParams p;
  int64_t out_size = 0;

  Problem(const Case& cs, uint64_t seed) : c(cs) {
    Rng rng{seed};
    const int64_t B = c.B, H = c.H, Hk = c.H_kv;
    // Strides of an (n_b, n_h, L, d) tensor in the case's layout; returns the buffer size.
    auto strides = [&](int64_t nh, int64_t L, int64_t d, int64_t& bs, int64_t& hs, int64_t& rs) {
      switch (c.layout) {
        case Layout::BHLD: rs = d, hs = L * d, bs = nh * L * d; break;
        case Layout::BLHD: rs = nh * d, hs = d, bs = L * nh * d; break;
        case Layout::Padded: rs = d + 5, hs = L * (d + 5), bs = nh * L * (d + 5); break;
      }
      return B * bs;
    };
    auto fill = [&](std::vector<float>& x, int64_t n, float amp) {
      x.resize(size_t(std::max<int64_t>(n, 1)));
      for (auto& e : x) e = amp * rng.uniform();
    };
    fill(q, strides(H, c.L_q, c.D, p.q_batch_stride, p.q_head_stride, p.q_row_stride), c.amplitude);
    fill(k, strides(Hk, c.L_k, c.D, p.k_batch_stride, p.k_head_stride, p.k_row_stride),
         c.amplitude);
    fill(v, strides(Hk, c.L_k, c.D_v, p.v_batch_stride, p.v_head_stride, p.v_row_stride), 1.0f);
    if (c.layout == Layout::BLHD) {
      p.out_row_stride = H * c.D_v, p.out_head_stride = c.D_v,
      p.out_batch_stride = c.L_q * H * c.D_v;
    } else {
      p.out_row_stride = c.D_v, p.out_head_stride = c.L_q * c.D_v,
      p.out_batch_stride = H * c.L_q * c.D_v;
    }
    out_size = std::max<int64_t>(B * H * c.L_q * c.D_v, 1);
    p.B = B, p.H = H, p.H_kv = Hk, p.L_q = c.L_q, p.L_k = c.L_k, p.D = c.D, p.D_v = c.D_v;
    p.scale = c.scale != 0.0 ? c.scale : 1.0 / std::sqrt(double(std::max<int64_t>(c.D, 1)));
    p.causal = c.causal != Causal::None;
    p.causal_bottom_right = c.causal == Causal::BottomRight;
    p.window_left = c.wl, p.window_right = c.wr;

    const int64_t L_q = c.L_q, L_k = c.L_k;
    switch (c.mask) {
      case Mask::None: break;
      case Mask::BoolFull:
        bmask.resize(size_t(std::max<int64_t>(B * H * L_q * L_k, 1)));
        for (auto& e : bmask) e = rng.uniform() > -0.4f;  // 70% visible
        for (int64_t r = 0; r < B * H * L_q; r += 5)      // every 5th row fully masked
          std::fill_n(bmask.begin() + r * L_k, L_k, uint8_t(0));
        p.mask_kind = K::MaskKind::Bool, p.mask = bmask.data();
        p.mask_batch_stride = H * L_q * L_k, p.mask_head_stride = L_q * L_k;
        p.mask_row_stride = L_k, p.mask_col_stride = 1;
        break;
      case Mask::FloatFull:
        fmask.resize(size_t(std::max<int64_t>(B * H * L_q * L_k, 1)));
        for (auto& e : fmask) {
          const float u = rng.uniform();
          e = u < -0.8f ? -kInfF : 3.0f * u;
        }
        for (int64_t r = 3; r < B * H * L_q; r += 7)
          std::fill_n(fmask.begin() + r * L_k, L_k, -kInfF);
        p.mask_kind = K::MaskKind::Float, p.mask = fmask.data();
        p.mask_batch_stride = H * L_q * L_k, p.mask_head_stride = L_q * L_k;
        p.mask_row_stride = L_k, p.mask_col_stride = 1;
        break;
      case Mask::BoolLqLk:
        bmask.resize(size_t(std::max<int64_t>(L_q * L_k, 1)));
        for (auto& e : bmask) e = rng.uniform() > -0.5f;
        p.mask_kind = K::MaskKind::Bool, p.mask = bmask.data();
        p.mask_row_stride = L_k, p.mask_col_stride = 1;
        break;
      case Mask::FloatKeyRow:
        fmask.resize(size_t(std::max<int64_t>(B * L_k, 1)));
        for (auto& e : fmask) {
          const float u = rng.uniform();
          e = u < -0.7f ? -kInfF : u;
        }
        p.mask_kind = K::MaskKind::Float, p.mask = fmask.data();
        p.mask_batch_stride = L_k, p.mask_col_stride = 1;
        break;
      case Mask::FloatT:
        fmask.resize(size_t(std::max<int64_t>(L_q * L_k, 1)));
        for (auto& e : fmask) e = 2.0f * rng.uniform();
        p.mask_kind = K::MaskKind::Float, p.mask = fmask.data();
        p.mask_row_stride = 1, p.mask_col_stride = L_q;
        break;
    }
    if (c.key_padding) {
      pad.assign(size_t(std::max<int64_t>(B * L_k, 1)), 0);
      for (int64_t j = 0; j < L_k; ++j) pad[j] = rng.uniform() > 0.4f;  // batch 0: 30% padded
      if (B > 1) std::fill_n(pad.begin() + L_k, L_k, uint8_t(1));       // batch 1: all padded
      if (B > 2)                                                        // batch 2: a long run
        for (int64_t j = L_k / 4; j < L_k; ++j) pad[2 * L_k + j] = 1;
      p.key_padding = pad.data(), p.key_padding_batch_stride = L_k;
    }
    if (c.dropout > 0) {
      p.dropout_p = c.dropout;
      p.dropout_seed = 0x1234567890abcdefull ^ seed;
      p.dropout_offset = 977;
    }
    // Score modifiers (drawn last, so that the cases without them keep their data).
    p.softcap = c.softcap;
    if (c.alibi != Alibi::None) {
      alibi.resize(size_t(c.alibi == Alibi::Shared ? H : B * H));
      for (auto& e : alibi) e = 0.02f + 0.2f * std::abs(rng.uniform());
      p.alibi_slopes = alibi.data(), p.alibi_batch_stride = c.alibi == Alibi::Shared ? 0 : H;
    }
    if (c.rel != Rel::None) {
      const int64_t n = 2 * c.rel_R + 1;
      rel.resize(size_t((c.rel == Rel::Shared ? 1 : H) * n));
      for (auto& e : rel) e = 1.5f * rng.uniform();
      p.rel_bias = rel.data(), p.rel_bias_head_stride = c.rel == Rel::Shared ? 0 : n;
      p.rel_bias_max_distance = c.rel_R;
    }
    if (c.sinks) {
      sinks.resize(size_t(H));
      for (auto& e : sinks) e = 0.5f + 2.0f * rng.uniform();
      if (H > 1) sinks[1] = -kInfF;  // a sink of -inf is no sink
      p.sinks = sinks.data();
    }
    p.q = q.data(), p.k = k.data(), p.v = v.data();
  }

  // out in canonical (B, H, L_q, D_v) order.
  std::vector<float> canonical(const std::vector<float>& out) const {
    std::vector<float> r(size_t(c.B * c.H * c.L_q * c.D_v));
    size_t n = 0;
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t h = 0; h < c.H; ++h)
        for (int64_t i = 0; i < c.L_q; ++i)
          for (int64_t e = 0; e < c.D_v; ++e)
            r[n++] = out[size_t(b * p.out_batch_stride + h * p.out_head_stride +
                                i * p.out_row_stride + e)];
    return r;
  }
};

struct Result {
  std::vector<float> out, lse;  // (B, H, L_q, D_v) canonical, (B, H, L_q)
};

Result run_reference(const Problem& pr) {
  std::vector<float> out(size_t(pr.out_size), -7.0f),
      lse(size_t(std::max<int64_t>(pr.c.B * pr.c.H * pr.c.L_q, 1)));
  K::SdpaParams p = pr.p;
  p.out = out.data(), p.lse = lse.data();
  K::sdpa_reference_forward(p);
  return {pr.canonical(out), lse};
}

Result run_fused(const Problem& pr, Isa isa = Isa::Auto) {
  std::vector<float> out(size_t(pr.out_size), -7.0f),
      lse(size_t(std::max<int64_t>(pr.c.B * pr.c.H * pr.c.L_q, 1)));
  K::SdpaParams p = pr.p;
  p.out = out.data(), p.lse = lse.data();
  const Isa before = K::active_isa();
  EXPECT_TRUE(K::set_isa(isa));
  K::sdpa_fused_forward(p);
  K::set_isa(before);
  return {pr.canonical(out), lse};
}

// A naive fp32 implementation computed the way PyTorch 2's math backend does (q and k each scaled
// by sqrt(scale), an fp32 matmul, softmax, an fp32 matmul), to measure the error fp32 arithmetic
// is entitled to on a case.
Result run_naive_fp32(const Problem& pr) {
  const K::SdpaParams& p = pr.p;
  const Case& c = pr.c;
  Result r;
  r.out.assign(size_t(c.B * c.H * c.L_q * c.D_v), 0.0f);
  r.lse.assign(size_t(c.B * c.H * c.L_q), -kInfF);
  std::vector<float> s(size_t(c.L_k));
  const int64_t off = p.causal_bottom_right ? c.L_k - c.L_q : 0;
  int64_t wr = p.window_right;
  if (p.causal) wr = wr >= 0 ? std::min<int64_t>(wr, 0) : 0;
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.H; ++h)
      for (int64_t i = 0; i < c.L_q; ++i) {
        const int64_t hk = h / (c.H / c.H_kv), row = (b * c.H + h) * c.L_q + i;
        const float* q = p.q + b * p.q_batch_stride + h * p.q_head_stride + i * p.q_row_stride;
        const float sink = p.sinks ? p.sinks[h] : -kInfF;
        float mx = sink;  // a sink is one more score, whose value row is zero
        for (int64_t j = 0; j < c.L_k; ++j) {
          const float* kj = p.k + b * p.k_batch_stride + hk * p.k_head_stride + j * p.k_row_stride;
          const float rs = float(std::sqrt(p.scale));
          float dot = 0;
          for (int64_t d = 0; d < c.D; ++d) dot += (q[d] * rs) * (kj[d] * rs);
          s[j] = dot;
          // The score modifiers, in float: softcap, ALiBi, the bias table's clipped offset.
          if (p.softcap > 0) s[j] = float(p.softcap) * std::tanh(s[j] / float(p.softcap));
          if (p.alibi_slopes)
            s[j] -= p.alibi_slopes[b * p.alibi_batch_stride + h] * float(std::abs(i + off - j));
          if (p.rel_bias) {
            const int64_t R = p.rel_bias_max_distance;
            s[j] += p.rel_bias[h * p.rel_bias_head_stride + std::clamp(j - i - off, -R, R) + R];
          }
          const bool hidden = (p.window_left >= 0 && j < i + off - p.window_left) ||
                              (wr >= 0 && j > i + off + wr) ||
                              (p.key_padding && p.key_padding[b * p.key_padding_batch_stride + j]);
          const int64_t mo = b * p.mask_batch_stride + h * p.mask_head_stride +
                             i * p.mask_row_stride + j * p.mask_col_stride;
          if (p.mask_kind == K::MaskKind::Bool && !static_cast<const uint8_t*>(p.mask)[mo])
            s[j] = -kInfF;
          if (p.mask_kind == K::MaskKind::Float) s[j] += static_cast<const float*>(p.mask)[mo];
          if (hidden) s[j] = -kInfF;
          mx = std::max(mx, s[j]);
        }
        if (mx == -kInfF) continue;
        float sum = p.sinks ? std::exp(sink - mx) : 0.0f;
        for (int64_t j = 0; j < c.L_k; ++j) sum += (s[j] = std::exp(s[j] - mx));
        r.lse[size_t(row)] = mx + std::log(sum);
        for (int64_t j = 0; j < c.L_k; ++j) {
          float w = s[j] / sum;
          if (p.dropout_p > 0)
            w = K::dropout_keep(p.dropout_seed, p.dropout_offset, uint64_t(row * c.L_k + j),
                                p.dropout_p)
                    ? w * K::dropout_keep_scale(p.dropout_p)
                    : 0.0f;
          if (w == 0.0f) continue;
          const float* vj = p.v + b * p.v_batch_stride + hk * p.v_head_stride + j * p.v_row_stride;
          for (int64_t e = 0; e < c.D_v; ++e) r.out[size_t(row * c.D_v + e)] += w * vj[e];
        }
      }
  return r;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isinf(a[i]) && a[i] == b[i]) continue;
    const double d = std::abs(double(a[i]) - double(b[i]));
    if (std::isnan(d)) return std::numeric_limits<double>::infinity();
    m = std::max(m, d);
  }
  return m;
}

std::vector<Isa> supported_isas() {
  std::vector<Isa> r;
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Neon, Isa::Sve})
    if (K::isa_supported(isa)) r.push_back(isa);
  return r;
}

// ---- the table
// -----------------------------------------------------------------------------------

Case mk(int64_t B, int64_t H, int64_t H_kv, int64_t L_q, int64_t L_k, int64_t D, int64_t D_v) {
  Case c;
  c.B = B, c.H = H, c.H_kv = H_kv, c.L_q = L_q, c.L_k = L_k, c.D = D, c.D_v = D_v;
  return c;
}
template <typename F>
Case with(Case c, F f) {
  f(c);
  return c;
}

std::vector<Case> table() {
  std::vector<Case> t;
  // Awkward sizes, L_q != L_k, D_v != D.
  for (auto [L_q, L_k] : std::vector<std::pair<int64_t, int64_t>>{{1, 1},
                                                                  {1, 7},
                                                                  {7, 7},
                                                                  {7, 65},
                                                                  {63, 63},
                                                                  {63, 65},
                                                                  {65, 63},
                                                                  {127, 129},
                                                                  {129, 127},
                                                                  {129, 1},
                                                                  {1, 129},
                                                                  {65, 200}})
    t.push_back(mk(1, 2, 2, L_q, L_k, 16, 8));
  t.push_back(mk(2, 3, 3, 129, 129, 64, 64));
  t.push_back(mk(1, 1, 1, 65, 127, 65, 7));
  t.push_back(mk(1, 1, 1, 33, 70, 7, 129));
  t.push_back(mk(1, 2, 2, 20, 0, 8, 8));  // no keys at all: zeros
  t.push_back(with(mk(1, 2, 2, 9, 11, 0, 5), [](Case& c) { c.scale = 1.0; }));  // D == 0
  // Causal, both alignments, L_q <, ==, > L_k.
  for (Causal cz : {Causal::TopLeft, Causal::BottomRight})
    for (auto [L_q, L_k] : std::vector<std::pair<int64_t, int64_t>>{
             {129, 129}, {65, 127}, {127, 65}, {1, 129}, {129, 1}, {7, 200}, {100, 100}, {36, 90}})
      t.push_back(with(mk(1, 2, 2, L_q, L_k, 32, 16), [&](Case& c) { c.causal = cz; }));
  // Every mask kind.
  for (Mask m :
       {Mask::BoolFull, Mask::FloatFull, Mask::BoolLqLk, Mask::FloatKeyRow, Mask::FloatT}) {
    t.push_back(with(mk(2, 2, 2, 63, 65, 16, 16), [&](Case& c) { c.mask = m; }));
    t.push_back(with(mk(2, 3, 3, 7, 129, 8, 24), [&](Case& c) { c.mask = m; }));
    t.push_back(with(mk(2, 4, 2, 5, 70, 8, 8), [&](Case& c) { c.mask = m; }));  // GQA packed rows
  }
  t.push_back(with(mk(1, 2, 2, 130, 190, 64, 64),
                   [](Case& c) { c.mask = Mask::FloatFull, c.causal = Causal::BottomRight; }));
  // Sliding windows, with and without causal.
  for (auto w : std::vector<std::pair<int64_t, int64_t>>{
           {5, 3}, {0, 0}, {16, -1}, {-1, 7}, {70, 70}, {0, -1}, {-1, 0}, {200, 1}}) {
    t.push_back(
        with(mk(1, 2, 2, 129, 150, 16, 16), [&](Case& c) { c.wl = w.first, c.wr = w.second; }));
    // Blocks of 2 and 3 vectors of rows, whose diagonal tiles skip what the band leaves out.
    t.push_back(
        with(mk(1, 2, 2, 100, 100, 16, 16), [&](Case& c) { c.wl = w.first, c.wr = w.second; }));
  }
  t.push_back(with(mk(1, 2, 2, 100, 160, 16, 16),
                   [](Case& c) { c.wl = 20, c.wr = 5, c.causal = Causal::BottomRight; }));
  t.push_back(with(mk(1, 2, 2, 100, 60, 16, 16),
                   [](Case& c) { c.wl = 3, c.causal = Causal::TopLeft, c.mask = Mask::BoolLqLk; }));
  // Key padding: random, fully padded batch, a long padded run (skipped tiles).
  t.push_back(with(mk(3, 2, 2, 65, 300, 16, 16), [](Case& c) { c.key_padding = true; }));
  t.push_back(with(mk(3, 2, 1, 3, 200, 16, 16),
                   [](Case& c) { c.key_padding = true, c.mask = Mask::FloatKeyRow; }));
  t.push_back(with(mk(3, 2, 2, 70, 90, 16, 16),
                   [](Case& c) { c.key_padding = true, c.causal = Causal::TopLeft; }));
  // Grouped-query and multi-query attention, decode shapes.
  t.push_back(mk(2, 6, 2, 7, 65, 16, 16));
  t.push_back(mk(1, 8, 1, 1, 300, 64, 64));
  t.push_back(mk(1, 12, 3, 2, 129, 32, 32));
  t.push_back(with(mk(1, 4, 2, 65, 63, 16, 8), [](Case& c) { c.causal = Causal::TopLeft; }));
  t.push_back(with(mk(1, 6, 2, 3, 40, 8, 8), [](Case& c) { c.causal = Causal::BottomRight; }));
  t.push_back(mk(1, 48, 1, 1, 100, 16, 16));  // more heads than fit one block
  // A few query rows (decoding): the row kernel, keys along the lanes, with every feature.
  for (int64_t L_q : {1, 2, 3}) {
    t.push_back(mk(2, 2, 2, L_q, 77, 7, 65));  // D and D_v not multiples of a vector
    t.push_back(
        with(mk(1, 2, 2, L_q, 150, 16, 16), [](Case& c) { c.causal = Causal::BottomRight; }));
    t.push_back(with(mk(2, 2, 2, L_q, 90, 16, 16), [](Case& c) { c.mask = Mask::BoolFull; }));
    t.push_back(with(mk(2, 2, 2, L_q, 90, 16, 16), [](Case& c) { c.mask = Mask::FloatFull; }));
    t.push_back(with(mk(2, 2, 2, L_q, 90, 16, 16), [](Case& c) { c.mask = Mask::FloatT; }));
    t.push_back(with(mk(3, 2, 2, L_q, 130, 16, 16), [](Case& c) { c.key_padding = true; }));
    t.push_back(with(mk(1, 2, 2, L_q, 130, 16, 16), [](Case& c) {
      c.wl = 40, c.wr = 3, c.causal = Causal::BottomRight, c.dropout = 0.3, c.layout = Layout::BLHD;
    }));
  }
  t.push_back(with(mk(1, 4, 2, 2, 100, 32, 32), [](Case& c) {  // 2 heads x 2 rows in one block
    c.mask = Mask::BoolFull, c.dropout = 0.2;
  }));
  // Strided layouts.
  for (Layout lay : {Layout::BLHD, Layout::Padded}) {
    t.push_back(with(mk(2, 3, 3, 65, 70, 16, 12), [&](Case& c) { c.layout = lay; }));
    t.push_back(with(mk(2, 4, 2, 7, 65, 16, 16), [&](Case& c) {
      c.layout = lay, c.causal = Causal::BottomRight, c.mask = Mask::BoolFull;
    }));
  }
  // Dropout.
  t.push_back(with(mk(2, 2, 2, 65, 70, 16, 16), [](Case& c) { c.dropout = 0.2; }));
  t.push_back(with(mk(1, 4, 1, 3, 129, 16, 16), [](Case& c) { c.dropout = 0.5; }));
  t.push_back(with(mk(1, 2, 2, 129, 129, 32, 32), [](Case& c) {
    c.dropout = 0.1, c.causal = Causal::TopLeft, c.layout = Layout::BLHD;
  }));
  // Huge scores (q . k in the thousands before scaling), any scale.
  t.push_back(with(mk(1, 2, 2, 65, 63, 8, 8), [](Case& c) { c.amplitude = 40.0f; }));
  t.push_back(with(mk(1, 2, 2, 65, 63, 8, 8),
                   [](Case& c) { c.amplitude = 40.0f, c.mask = Mask::FloatFull; }));
  t.push_back(with(mk(1, 2, 2, 65, 63, 16, 8), [](Case& c) { c.scale = 3.0; }));
  t.push_back(with(mk(1, 2, 2, 65, 63, 16, 8), [](Case& c) { c.scale = 0.01; }));
  return t;
}

class FusedVsReference : public ::testing::TestWithParam<Case> {};

// The fused kernel against the reference on one case, on every instruction set, to the tolerance
// described at the top.
void expect_fused_matches_reference(const Case& c, uint64_t seed) {
  const Problem pr(c, seed);
  const Result ref = run_reference(pr), n32 = run_naive_fp32(pr);
  float vmax = 0;
  for (float x : pr.v) vmax = std::max(vmax, std::abs(x));
  const double floor_out = 8 * 0x1.0p-24 * std::max(1.0f, vmax);
  const double err32_out = max_abs_diff(n32.out, ref.out);
  const double err32_lse = max_abs_diff(n32.lse, ref.lse);
  double lse_scale = 1;
  for (float x : ref.lse)
    if (std::isfinite(x)) lse_scale = std::max(lse_scale, double(std::abs(x)));
  for (Isa isa : supported_isas()) {
    SCOPED_TRACE(K::isa_name(isa));
    const Result f = run_fused(pr, isa);
    for (size_t r = 0; r < ref.lse.size() && c.B * c.H * c.L_q > 0; ++r) {
      ASSERT_FALSE(std::isnan(f.lse[r])) << "lse row " << r;
      ASSERT_EQ(f.lse[r] == -kInfF, ref.lse[r] == -kInfF) << "fully masked row " << r;
      if (ref.lse[r] == -kInfF)
        for (int64_t e = 0; e < c.D_v; ++e)
          ASSERT_EQ(f.out[r * c.D_v + e], 0.0f) << "fully masked row " << r << " must be zero";
    }
    for (float x : f.out) ASSERT_FALSE(std::isnan(x));
    const double err_out = max_abs_diff(f.out, ref.out);
    const double err_lse = max_abs_diff(f.lse, ref.lse);
    EXPECT_LE(err_out, 2 * err32_out + floor_out) << "naive fp32 error " << err32_out;
    EXPECT_LE(err_lse, 2 * err32_lse + 8 * 0x1.0p-24 * lse_scale)
        << "naive fp32 error " << err32_lse;
  }
}

TEST_P(FusedVsReference, EveryInstructionSet) { expect_fused_matches_reference(GetParam(), 42); }

INSTANTIATE_TEST_SUITE_P(Table, FusedVsReference, ::testing::ValuesIn(table()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name();
                         });

// ---- score modifiers: softcap, ALiBi, the relative-position bias table, attention sinks ---------

// Each modifier alone, then all four together.
using ModFn = void (*)(Case&);
const ModFn kMods[] = {
    [](Case& c) { c.softcap = 2.0, c.amplitude = 2.0f; },  // scores well beyond the cap
    [](Case& c) { c.alibi = Alibi::Shared; },
    [](Case& c) { c.alibi = Alibi::PerBatch; },
    [](Case& c) { c.rel = Rel::Shared, c.rel_R = 2; },     // most offsets clipped
    [](Case& c) { c.rel = Rel::PerHead, c.rel_R = 300; },  // R > L_k: none clipped
    [](Case& c) { c.sinks = true; },
    [](Case& c) {
      c.softcap = 5.0, c.amplitude = 2.0f, c.alibi = Alibi::PerBatch, c.rel = Rel::PerHead;
      c.rel_R = 8, c.sinks = true;
    },
};
void all_mods(Case& c) { kMods[std::size(kMods) - 1](c); }

std::vector<Case> mod_table() {
  std::vector<Case> t;
  // Query lengths for the row kernel (1 and 3 rows; under GQA the group's heads share a block),
  // a short block of packed heads (5), one block (40), full and partial blocks (130); key lengths
  // that are not multiples of the 64-key tile; D and D_v not multiples of 8. GQA (H = 4, H_kv = 2)
  // and B = 2, so that per-batch slopes and per-head tables differ between the lanes of a block.
  const std::pair<int64_t, int64_t> lens[] = {{1, 77}, {3, 150}, {5, 70}, {40, 100}, {130, 150}};
  for (auto [L_q, L_k] : lens)
    for (ModFn mod : kMods) {
      const Case base = with(mk(2, 4, 2, L_q, L_k, 13, 7), mod);
      t.push_back(base);
      t.push_back(with(base, [](Case& c) { c.causal = Causal::TopLeft; }));
      t.push_back(with(base, [](Case& c) { c.causal = Causal::BottomRight; }));
      t.push_back(with(base, [](Case& c) { c.wl = 20, c.wr = 5; }));
      // B = 3: batch 1 entirely padded (sinks: zeros and lse = sink), batch 2 a long run.
      t.push_back(with(base, [](Case& c) { c.key_padding = true, c.B = 3; }));
    }
  // Every modifier with the shared variants (slopes and table the same for every batch and head).
  for (int64_t L_q : {1, 5, 130})
    t.push_back(with(mk(2, 4, 2, L_q, 90, 13, 7), [](Case& c) {
      c.softcap = 3.0, c.alibi = Alibi::Shared, c.rel = Rel::Shared, c.rel_R = 2, c.sinks = true;
    }));
  // Multi-head (H == H_kv) and multi-query attention (many heads packed into one block).
  t.push_back(with(mk(1, 3, 3, 40, 100, 20, 12), all_mods));
  t.push_back(with(mk(1, 8, 1, 1, 200, 13, 7), all_mods));
  t.push_back(with(mk(1, 8, 1, 3, 90, 13, 7), all_mods));
  t.push_back(with(mk(1, 6, 2, 5, 90, 13, 7), [](Case& c) {
    all_mods(c);
    c.causal = Causal::BottomRight;
  }));
  // Bottom-right alignment with L_q > L_k: the first rows see no key (a sink's lse, zeros).
  t.push_back(with(mk(2, 4, 2, 40, 30, 13, 7), [](Case& c) {
    all_mods(c);
    c.causal = Causal::BottomRight;
  }));
  // A window with bottom-right alignment, vector-friendly head dims, skipped tiles.
  t.push_back(with(mk(1, 4, 2, 130, 300, 64, 64), [](Case& c) {
    all_mods(c);
    c.causal = Causal::BottomRight, c.wl = 70;
  }));
  t.push_back(with(mk(1, 4, 2, 3, 300, 64, 64), [](Case& c) {
    all_mods(c);
    c.wl = 50, c.wr = 10, c.causal = Causal::BottomRight;
  }));
  // With masks (the biases come before them), dropout and strided layouts.
  for (int64_t L_q : {3, 40}) {
    for (Mask m : {Mask::BoolFull, Mask::FloatFull, Mask::FloatT})
      t.push_back(with(mk(2, 4, 2, L_q, 77, 13, 7), [&](Case& c) {
        all_mods(c);
        c.mask = m;
      }));
    t.push_back(with(mk(2, 4, 2, L_q, 77, 13, 7), [](Case& c) {
      all_mods(c);
      c.dropout = 0.2, c.layout = Layout::BLHD;
    }));
  }
  // Huge scores that the softcap saturates.
  t.push_back(with(mk(1, 2, 2, 40, 63, 8, 8),
                   [](Case& c) { c.amplitude = 40.0f, c.softcap = 3.0, c.sinks = true; }));
  return t;
}

class FusedScoreMods : public ::testing::TestWithParam<Case> {};

TEST_P(FusedScoreMods, MatchesTheReference) { expect_fused_matches_reference(GetParam(), 21); }

INSTANTIATE_TEST_SUITE_P(Table, FusedScoreMods, ::testing::ValuesIn(mod_table()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return info.param.name();
                         });

// Split-K decoding (sdpa_fused.cpp): few blocks and at least 1024 keys cut the keys into 2 to 16
// ranges whose partial results are merged. Ranges that see no key (a window, key padding, a
// bottom-right diagonal) and the sinks (carried by range 0 alone) included.
std::vector<Case> split_table() {
  std::vector<Case> cs;
  cs.push_back(mk(1, 1, 1, 1, 4096, 64, 64));  // 4 ranges
  cs.push_back(mk(1, 8, 2, 1, 2048, 32, 32));  // GQA heads packed in one block
  cs.push_back(mk(1, 2, 2, 3, 1500, 13, 7));   // uneven ranges, odd head dims
  cs.push_back(with(mk(1, 1, 1, 1, 4096, 16, 16), [](Case& c) {
    c.causal = Causal::BottomRight, c.wl = 100, c.wr = 0;  // only the last range sees keys
  }));
  cs.push_back(with(mk(3, 2, 1, 2, 1100, 16, 16), [](Case& c) { c.key_padding = true; }));
  cs.push_back(with(mk(1, 2, 2, 1, 2048, 16, 16), [](Case& c) { c.mask = Mask::BoolFull; }));
  cs.push_back(with(mk(1, 2, 2, 1, 2048, 16, 16), [](Case& c) { c.mask = Mask::FloatFull; }));
  cs.push_back(with(mk(1, 2, 2, 2, 2048, 16, 16), [](Case& c) { c.dropout = 0.25; }));
  cs.push_back(with(mk(1, 4, 2, 1, 3000, 13, 7), all_mods));
  cs.push_back(with(mk(1, 2, 2, 1, 2048, 16, 16), [](Case& c) {
    all_mods(c);
    c.causal = Causal::BottomRight, c.wl = 300, c.wr = 0;  // sinks in range 0, which sees none
  }));
  return cs;
}

INSTANTIATE_TEST_SUITE_P(SplitK, FusedVsReference, ::testing::ValuesIn(split_table()),
                         [](const ::testing::TestParamInfo<Case>& i) { return i.param.name(); });

TEST(FusedScoreModsEdge, FullyMaskedRowsWithSinksGiveZerosAndTheSinkAsLse) {
  // Rows that see no key at all (batch 1 entirely key-padded; with bottom-right alignment and
  // L_q > L_k, the first L_q - L_k rows): the sink alone is in the softmax, so the output is zero
  // and lse is the sink itself; head 1's sink is -inf, which gives the plain fully masked row
  // (zeros, lse = -inf).
  std::vector<Case> cs;
  for (int64_t L_q : {1, 3, 5, 40, 130})
    cs.push_back(with(mk(2, 4, 2, L_q, 77, 13, 7), [](Case& c) {
      all_mods(c);
      c.key_padding = true;
    }));
  cs.push_back(with(mk(2, 4, 2, 40, 30, 13, 7), [](Case& c) {
    all_mods(c);
    c.causal = Causal::BottomRight;
  }));
  for (const Case& c : cs) {
    SCOPED_TRACE(c.name());
    const Problem pr(c, 23);
    std::vector<std::pair<std::string, Result>> runs = {{"reference", run_reference(pr)}};
    for (Isa isa : supported_isas()) runs.push_back({K::isa_name(isa), run_fused(pr, isa)});
    int64_t checked = 0;
    for (const auto& [name, r] : runs)
      for (int64_t b = 0; b < c.B; ++b)
        for (int64_t h = 0; h < c.H; ++h)
          for (int64_t i = 0; i < c.L_q; ++i) {
            const bool padded = c.key_padding && b == 1;
            const bool before_diagonal =
                c.causal == Causal::BottomRight && i < c.L_q - c.L_k;  // sees no key
            if (!padded && !before_diagonal) continue;
            const int64_t row = (b * c.H + h) * c.L_q + i;
            EXPECT_EQ(r.lse[size_t(row)], pr.sinks[size_t(h)])
                << name << " b " << b << " h " << h << " i " << i;
            for (int64_t e = 0; e < c.D_v; ++e)
              ASSERT_EQ(r.out[size_t(row * c.D_v + e)], 0.0f)
                  << name << " b " << b << " h " << h << " i " << i;
            ++checked;
          }
    EXPECT_GT(checked, 0);
  }
}

TEST(FusedScoreModsEdge, TinyCaseWorkedOutInDouble) {
  // One head, D = D_v = 2, every modifier at once; the scores written out here from sdpa_params.h,
  //   s[i][j] = softcap tanh(scale q_i . k_j / softcap) - slope |i + off - j|
  //             + table[clip(j - i - off, -R, R) + R],
  // and the softmax with the sink, all in double (not through the reference's modified_score).
  // L_q = L_k = 3 (off = 0), then L_q = 2 with bottom-right causal masking (off = 1). With R = 1
  // both ends of the table are clipped, and the table is asymmetric, so a swapped sign of the
  // offset, a missing offset or a mixed-up clip changes the result.
  const float q[3][2] = {{1.0f, -2.0f}, {0.5f, 1.5f}, {-1.0f, 0.25f}};
  const float k[3][2] = {{2.0f, 1.0f}, {-1.5f, 0.5f}, {0.75f, -2.0f}};
  const float v[3][2] = {{1.0f, 0.0f}, {0.0f, 1.0f}, {-2.0f, 3.0f}};
  const float slope = 0.375f, table[3] = {-0.5f, 0.25f, 1.0f}, sink = 0.625f;
  const double softcap = 1.5, scale = 0.8;
  for (int64_t L_q : {3, 2}) {
    const int64_t off = L_q == 2 ? 1 : 0;
    SCOPED_TRACE("L_q " + std::to_string(L_q));
    // Expected, straight from the definition.
    double want_out[3][2] = {}, want_lse[3] = {};
    for (int64_t i = 0; i < L_q; ++i) {
      double s[3], m = sink;
      for (int64_t j = 0; j < 3; ++j) {
        const double dot = double(q[i][0]) * k[j][0] + double(q[i][1]) * k[j][1];
        const int64_t t = std::clamp<int64_t>(j - i - off, -1, 1);
        s[j] = softcap * std::tanh(scale * dot / softcap) - slope * double(std::abs(i + off - j)) +
               table[t + 1];
        if (off == 1 && j > i + off) s[j] = -std::numeric_limits<double>::infinity();  // causal
        m = std::max(m, s[j]);
      }
      double sum = std::exp(sink - m);
      for (int64_t j = 0; j < 3; ++j) sum += std::exp(s[j] - m);
      for (int64_t j = 0; j < 3; ++j)
        for (int64_t e = 0; e < 2; ++e) want_out[i][e] += std::exp(s[j] - m) / sum * v[j][e];
      want_lse[i] = m + std::log(sum);
    }
    K::SdpaParams p;
    p.B = 1, p.H = 1, p.H_kv = 1, p.L_q = L_q, p.L_k = 3, p.D = 2, p.D_v = 2, p.scale = scale;
    p.q = &q[0][0], p.k = &k[0][0], p.v = &v[0][0];
    p.q_row_stride = p.k_row_stride = p.v_row_stride = p.out_row_stride = 2;
    p.q_head_stride = p.q_batch_stride = p.out_head_stride = p.out_batch_stride = L_q * 2;
    p.k_head_stride = p.k_batch_stride = p.v_head_stride = p.v_batch_stride = 6;
    p.causal = p.causal_bottom_right = off == 1;
    p.softcap = softcap;
    p.alibi_slopes = &slope;
    p.rel_bias = table, p.rel_bias_max_distance = 1;
    p.sinks = &sink;
    auto check = [&](const char* name, double tol, auto kernel) {
      float out[3][2], lse[3];
      K::SdpaParams r = p;
      r.out = &out[0][0], r.lse = lse;
      kernel(r);
      for (int64_t i = 0; i < L_q; ++i) {
        EXPECT_NEAR(lse[i], want_lse[i], tol) << name << " row " << i;
        for (int64_t e = 0; e < 2; ++e)
          EXPECT_NEAR(out[i][e], want_out[i][e], tol) << name << " row " << i << " col " << e;
      }
    };
    check("reference", 1e-6, [](const K::SdpaParams& r) { K::sdpa_reference_forward(r); });
    for (Isa isa : supported_isas())
      check(K::isa_name(isa), 1e-5, [isa](const K::SdpaParams& r) {
        attn::testing::IsaScope scope(isa);
        ASSERT_TRUE(scope.ok());
        K::sdpa_fused_forward(r);
      });
  }
}

// ---- determinism and instruction sets -----------------------------------------------------------

// attn's thread count for the lifetime of the object (threads.h: every parallel region asks for
// num_threads(), which omp_set_num_threads does not change).
class ThreadCount {
 public:
  explicit ThreadCount(int n) : before_(attn::get_num_threads()) { attn::set_num_threads(n); }
  ~ThreadCount() { attn::set_num_threads(before_); }
  ThreadCount(const ThreadCount&) = delete;
  ThreadCount& operator=(const ThreadCount&) = delete;

 private:
  int before_;
};

TEST(FusedDeterminism, OneAndTwoThreadsBitwiseIdentical) {
  for (const Case& c :
       {mk(2, 3, 3, 200, 300, 64, 64),
        with(mk(2, 4, 2, 150, 170, 32, 48),
             [](Case& x) {
               x.causal = Causal::BottomRight, x.dropout = 0.3, x.mask = Mask::FloatFull;
             }),
        with(mk(3, 8, 1, 3, 500, 64, 64), [](Case& x) { x.key_padding = true; }),
        with(mk(2, 6, 6, 1, 3000, 64, 64), [](Case& x) { x.dropout = 0.1; }),
        with(mk(2, 4, 2, 150, 170, 13, 7), all_mods), with(mk(3, 8, 2, 3, 500, 13, 7), [](Case& x) {
          all_mods(x);
          x.key_padding = true;
        })}) {
    SCOPED_TRACE(c.name());
    const Problem pr(c, 7);
    for (Isa isa : supported_isas()) {
      auto run = [&](int threads) {
        ThreadCount count(threads);
        return run_fused(pr, isa);
      };
      const Result one = run(1), two = run(2);
      EXPECT_EQ(0, std::memcmp(one.out.data(), two.out.data(), one.out.size() * sizeof(float)))
          << K::isa_name(isa);
      EXPECT_EQ(0, std::memcmp(one.lse.data(), two.lse.data(), one.lse.size() * sizeof(float)))
          << K::isa_name(isa);
    }
  }
}

TEST(FusedIsaChoice, AutoPicksTheWidestInstructionSet) {
  const Isa before = K::active_isa();
  ASSERT_TRUE(K::set_isa(Isa::Auto));
  const char* cap = std::getenv("ATTN_CPU_ISA");
  if (cap && *cap) {  // the cap, when this CPU has it
    EXPECT_STREQ(K::isa_name(K::active_isa()), cap);
    K::set_isa(before);
    return;
  }
  const Isa want =
#if defined(__aarch64__)
      K::isa_supported(Isa::Sve) ? Isa::Sve : Isa::Neon;
#else
      K::isa_supported(Isa::Avx512) ? Isa::Avx512
      : K::isa_supported(Isa::Avx2) ? Isa::Avx2
                                    : Isa::Scalar;
#endif
  EXPECT_EQ(K::active_isa(), want) << K::isa_name(K::active_isa());
  EXPECT_FALSE(K::set_isa(
#if defined(__aarch64__)
      Isa::Avx2
#else
      Isa::Neon
#endif
      ))
      << "an instruction set of another architecture is refused";
  K::set_isa(before);
}

TEST(FusedIsaChoice, ScalarFallbackAgreesWithVectorPaths) {
  // The portable build and the vector builds run the same algorithm; they differ only by FMA
  // contraction and the order of a few roundings.
  EXPECT_TRUE(K::set_isa(Isa::Scalar));
  EXPECT_EQ(K::active_isa(), Isa::Scalar);
  EXPECT_TRUE(K::set_isa(Isa::Auto));
  EXPECT_NE(K::active_isa(), Isa::Auto);
  for (const Case& c :
       {mk(1, 2, 2, 129, 150, 64, 64), with(mk(2, 4, 2, 65, 100, 32, 16), [](Case& x) {
          x.causal = Causal::TopLeft, x.dropout = 0.2, x.mask = Mask::FloatFull;
        })}) {
    SCOPED_TRACE(c.name());
    const Problem pr(c, 9);
    const Result s = run_fused(pr, Isa::Scalar);
    for (Isa isa : supported_isas()) {
      const Result f = run_fused(pr, isa);
      EXPECT_LE(max_abs_diff(s.out, f.out), 2e-6) << K::isa_name(isa);
      EXPECT_LE(max_abs_diff(s.lse, f.lse), 2e-6) << K::isa_name(isa);
    }
  }
}

TEST(FusedExp2, WithinTwoUlpEverywhere) {
  std::vector<float> x;
  for (int64_t t = 0; t <= 2000000; ++t) x.push_back(float(-126.0 + 253.0 * double(t) / 2000000.0));
  for (float s : {0.0f, -0.0f, 1.0f, -1.0f, 0.5f, -0.5f, 1e-8f, -1e-8f, 127.0f, -126.0f})
    x.push_back(s);
  const Isa before = K::active_isa();
  for (Isa isa : supported_isas()) {
    SCOPED_TRACE(K::isa_name(isa));
    ASSERT_TRUE(K::set_isa(isa));
    std::vector<float> y(x.size());
    K::fused_exp2(x.data(), y.data(), int64_t(x.size()));
    double worst = 0;
    float worst_x = 0;
    for (size_t t = 0; t < x.size(); ++t) {
      const double want = std::exp2(double(x[t]));
      const double ulp = std::ldexp(1.0, std::ilogb(want) - 23);
      const double err = std::abs(double(y[t]) - want) / ulp;
      if (err > worst) worst = err, worst_x = x[t];
    }
    EXPECT_LE(worst, 2.0) << "at x = " << worst_x;
    RecordProperty(std::string("max_ulp_") + K::isa_name(isa), std::to_string(worst));
    // Exact and special values.
    const float sp[] = {0.0f, -kInfF, -127.0f, -200.0f, -1e30f, std::nanf("")};
    float r[6];
    K::fused_exp2(sp, r, 6);
    EXPECT_EQ(r[0], 1.0f);
    EXPECT_EQ(r[1], 0.0f);
    EXPECT_EQ(r[2], 0.0f);
    EXPECT_EQ(r[3], 0.0f);
    EXPECT_EQ(r[4], 0.0f);
    EXPECT_TRUE(std::isnan(r[5]));
  }
  K::set_isa(before);
}

// ---- dropout: the same mask as the reference, and its statistics
// ---------------------------------

// With v the identity (L_k == D_v), out[i, e] is the weight of key e after dropout, so the fused
// kernel's mask can be read off its output and compared with the reference's weights exactly.
struct OneHot {
  Problem pr;
  std::vector<float> ref_weights;
  OneHot(Case c, uint64_t seed) : pr(c, seed) {
    std::fill(pr.v.begin(), pr.v.end(), 0.0f);
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t h = 0; h < c.H_kv; ++h)
        for (int64_t j = 0; j < c.L_k; ++j)
          pr.v[size_t(b * pr.p.v_batch_stride + h * pr.p.v_head_stride + j * pr.p.v_row_stride +
                      j)] = 1.0f;
    ref_weights.resize(size_t(c.B * c.H * c.L_q * c.L_k));
    std::vector<float> out(size_t(pr.out_size));
    K::SdpaParams p = pr.p;
    p.out = out.data(), p.weights = ref_weights.data();
    K::sdpa_reference_forward(p);
  }
};

TEST(FusedDropout, SameMaskAsTheReferenceExactly) {
  for (const Case& c : {with(mk(2, 2, 2, 70, 48, 16, 48), [](Case& x) { x.dropout = 0.3; }),
                        with(mk(2, 4, 1, 3, 40, 8, 40),
                             [](Case& x) { x.dropout = 0.6, x.causal = Causal::BottomRight; }),
                        with(mk(1, 2, 2, 40, 64, 8, 64), [](Case& x) {
                          x.dropout = 0.25, x.layout = Layout::BLHD, x.wl = 9, x.wr = 4;
                        })}) {
    SCOPED_TRACE(c.name());
    OneHot oh(c, 5);
    for (Isa isa : supported_isas()) {
      const Result f = run_fused(oh.pr, isa);
      ASSERT_EQ(f.out.size(), oh.ref_weights.size());
      int64_t mismatches = 0;
      for (size_t t = 0; t < f.out.size(); ++t) {
        mismatches += (f.out[t] == 0.0f) != (oh.ref_weights[t] == 0.0f);
        EXPECT_NEAR(f.out[t], oh.ref_weights[t], 1e-5 * (1 + oh.ref_weights[t]));
      }
      EXPECT_EQ(mismatches, 0) << K::isa_name(isa);
    }
  }
}

TEST(FusedDropout, FractionDroppedAndIndependence) {
  for (double p : {0.1, 0.5, 0.9}) {
    Case c = mk(2, 2, 2, 128, 64, 8, 64);
    c.dropout = p;
    OneHot oh(c, 11);
    const Result f = run_fused(oh.pr);
    const double n = double(f.out.size());
    int64_t dropped = 0, both = 0, pairs = 0;
    for (size_t t = 0; t < f.out.size(); ++t) {
      const bool d = f.out[t] == 0.0f;
      dropped += d;
      if (t % 64 != 63) pairs += 1, both += d && f.out[t + 1] == 0.0f;  // neighbours in a row
      if (!d) {
        // Kept weights are scaled by 1 / (1 - p): the surviving mass of a row averages 1.
        ASSERT_GT(f.out[t], 0.0f);
      }
    }
    const double frac = double(dropped) / n;
    EXPECT_NEAR(frac, p, 5 * std::sqrt(p * (1 - p) / n)) << "p = " << p;
    const double frac2 = double(both) / double(pairs);
    EXPECT_NEAR(frac2, p * p, 5 * std::sqrt(p * p * (1 - p * p) / double(pairs))) << "p = " << p;
    // The expected output is unchanged by dropout: the row sums of the weights average 1.
    double total = 0;
    for (float x : f.out) total += x;
    const double rows = n / 64;
    EXPECT_NEAR(total / rows, 1.0, 5 * std::sqrt(p / (1 - p) / 64 / rows) + 1e-6) << "p = " << p;
  }
}

TEST(FusedDropout, KeepIsAPureFunctionOfSeedOffsetAndIndex) {
  int64_t differ = 0;
  for (uint64_t i = 0; i < 1000; ++i) {
    EXPECT_EQ(K::dropout_keep(5, 100, i, 0.5), K::dropout_keep(5, 0, 100 + i, 0.5));
    differ += K::dropout_keep(5, 0, i, 0.5) != K::dropout_keep(6, 0, i, 0.5);
  }
  EXPECT_GT(differ, 400);  // another seed gives another mask
  for (uint64_t i = 0; i < 1000; ++i) EXPECT_TRUE(K::dropout_keep(1, 2, i, 0.0));
}

// ---- edge cases
// ------------------------------------------------------------------------------------

TEST(FusedEdge, NaNPropagatesLikeTheReference) {
  for (int64_t L_q : {1, 3, 70}) {  // the row kernel and the block kernel
    Case c = mk(1, 1, 1, L_q, 20, 8, 4);
    Problem pr(c, 3);
    pr.q[0] = std::nanf("");  // row 0 of q: its scores, its output and its lse are NaN
    for (Isa isa : supported_isas()) {
      const Result f = run_fused(pr, isa);
      EXPECT_TRUE(std::isnan(f.out[0])) << "L_q " << L_q << " " << K::isa_name(isa);
      EXPECT_TRUE(std::isnan(f.lse[0]));
      for (size_t t = 4; t < f.out.size(); ++t) ASSERT_FALSE(std::isnan(f.out[t]));
    }
  }
}

TEST(FusedEdge, LongRowsAndManyTiles) {
  // Many key tiles, a window that skips most of them, and a key-padding run across tile borders.
  Case c = mk(2, 2, 1, 130, 2000, 32, 32);
  c.wl = 300, c.wr = 100, c.causal = Causal::BottomRight, c.key_padding = true;
  const Problem pr(c, 13);
  const Result ref = run_reference(pr), n32 = run_naive_fp32(pr);
  const double err32 = max_abs_diff(n32.out, ref.out);
  for (Isa isa : supported_isas())
    EXPECT_LE(max_abs_diff(run_fused(pr, isa).out, ref.out), 2 * err32 + 1e-6) << K::isa_name(isa);
}

// ---- the Tensor-level entry points
// ---------------------------------------------------------------

using attn::CausalAlign;
using attn::SdpaBackend;
using attn::SdpaOptions;
using attn::Shape;
using attn::Tensor;

// The bool attn_mask (1, 1, L_q, L_k) equivalent to a sliding window.
Tensor window_mask(int64_t L_q, int64_t L_k, int64_t wl, int64_t wr, bool bottom_right) {
  std::vector<float> m(size_t(L_q * L_k));
  const int64_t off = bottom_right ? L_k - L_q : 0;
  for (int64_t i = 0; i < L_q; ++i)
    for (int64_t j = 0; j < L_k; ++j)
      m[size_t(i * L_k + j)] = (wl < 0 || j >= i + off - wl) && (wr < 0 || j <= i + off + wr);
  return attn::from_vector(m, {1, 1, L_q, L_k}) > 0.5;
}

TEST(FusedTensor, BackendsAgreeAndOptionsMeanWhatTheySay) {
  attn::Generator g(3);
  // (B, L, H, D) memory viewed as (B, H, L, D): the fused kernel reads it in place.
  const Tensor q = attn::randn({2, 37, 6, 16}, &g).transpose(1, 2);
  const Tensor k = attn::randn({2, 70, 2, 16}, &g).transpose(1, 2);
  const Tensor v = attn::randn({2, 70, 2, 8}, &g).transpose(1, 2);
  const Tensor kpm = attn::rand({2, 70}, &g) > 0.7;  // true = padding
  struct Opt {
    std::string name;
    bool causal, bottom_right, padding;
    int64_t wl, wr;
  };
  for (const Opt& t : std::vector<Opt>{{"plain", false, false, false, -1, -1},
                                       {"causalTL", true, false, false, -1, -1},
                                       {"causalBR_pad", true, true, true, -1, -1},
                                       {"window_pad", false, false, true, 5, 9},
                                       {"windowBR_causal", true, true, false, 12, -1}}) {
    SCOPED_TRACE(t.name);
    SdpaOptions o;
    o.enable_gqa = true;
    o.is_causal = t.causal;
    o.causal_align = t.bottom_right ? CausalAlign::BottomRight : CausalAlign::TopLeft;
    if (t.padding) o.key_padding_mask = kpm;
    o.window_left = t.wl, o.window_right = t.wr;
    SdpaOptions r = o;
    r.backend = SdpaBackend::Reference;
    SdpaOptions f = o;
    f.backend = SdpaBackend::Fused;
    const Tensor out = attn::scaled_dot_product_attention(q, k, v, o);
    const Tensor out_r = attn::scaled_dot_product_attention(q, k, v, r);
    ASSERT_EQ(out.shape(), (Shape{2, 6, 37, 8}));
    EXPECT_TRUE(attn::allclose(out, out_r, 1e-5, 1e-6));
    EXPECT_TRUE(attn::equal(out, attn::scaled_dot_product_attention(q, k, v, f)));  // Auto = Fused
    // The weights variant (reference) gives the reference's output exactly.
    auto [out_w, w] = attn::scaled_dot_product_attention_with_weights(q, k, v, o);
    EXPECT_TRUE(attn::equal(out_w, out_r));
    // The forward gives the same output and the log-sum-exp of each row.
    const attn::SdpaForwardResult fw = attn::scaled_dot_product_attention_forward(q, k, v, o);
    const attn::SdpaForwardResult fw_r = attn::scaled_dot_product_attention_forward(q, k, v, r);
    EXPECT_TRUE(attn::equal(fw.out, out));
    ASSERT_EQ(fw.lse.shape(), (Shape{2, 6, 37}));
    EXPECT_TRUE(attn::allclose(fw.lse, fw_r.lse, 1e-5, 1e-5));
    EXPECT_EQ(fw.dropout_seed, 0u);
    // Key padding and the window mean the same as the equivalent explicit bool masks.
    SdpaOptions m;
    m.enable_gqa = true, m.backend = SdpaBackend::Reference;
    Tensor visible = window_mask(
        37, 70, t.wl, t.causal ? std::min<int64_t>(t.wr < 0 ? 0 : t.wr, 0) : t.wr, t.bottom_right);
    if (t.padding) visible = visible & (~kpm).reshape({2, 1, 1, 70});
    m.attn_mask = visible;
    EXPECT_TRUE(attn::allclose(out, attn::scaled_dot_product_attention(q, k, v, m), 1e-5, 1e-6));
  }
}

TEST(FusedTensor, DropoutIsReproducibleAndReportsItsSeed) {
  attn::Generator g(4);
  const Tensor q = attn::randn({2, 3, 40, 16}, &g), k = attn::randn({2, 3, 50, 16}, &g),
               v = attn::randn({2, 3, 50, 16}, &g);
  SdpaOptions o;
  o.dropout_p = 0.3;
  attn::manual_seed(5);
  const Tensor a = attn::scaled_dot_product_attention(q, k, v, o);
  attn::manual_seed(5);
  const Tensor b = attn::scaled_dot_product_attention(q, k, v, o);
  EXPECT_TRUE(attn::equal(a, b));
  attn::manual_seed(5);
  const attn::SdpaForwardResult fw = attn::scaled_dot_product_attention_forward(q, k, v, o);
  EXPECT_TRUE(attn::equal(fw.out, a));
  attn::Generator probe(5);
  EXPECT_EQ(fw.dropout_seed, probe.random64()) << "one random64() of the generator";
  EXPECT_EQ(fw.dropout_offset, 0u);
  EXPECT_FALSE(attn::equal(attn::scaled_dot_product_attention(q, k, v, o), a)) << "a new seed";
  // The reference backend applies the same counter-based mask.
  attn::Generator g1(8), g2(8);
  SdpaOptions f = o, r = o;
  f.generator = &g1, r.generator = &g2, r.backend = SdpaBackend::Reference;
  EXPECT_TRUE(attn::allclose(attn::scaled_dot_product_attention(q, k, v, f),
                             attn::scaled_dot_product_attention(q, k, v, r), 1e-5, 1e-6));
  // Outer batch dims beyond (B, H) continue the flat index: a 5-D call equals its halves only
  // through the offsets, so compare against the reference on the same 5-D problem.
  const Tensor q5 = q.reshape({1, 2, 3, 40, 16}).expand({2, 2, 3, 40, 16});
  attn::Generator g3(9), g4(9);
  f.generator = &g3, r.generator = &g4;
  const Tensor o5 = attn::scaled_dot_product_attention(q5, k, v, f);
  EXPECT_TRUE(attn::allclose(o5, attn::scaled_dot_product_attention(q5, k, v, r), 1e-5, 1e-6));
  EXPECT_FALSE(attn::equal(o5[0], o5[1])) << "the two outer slices draw different masks";
}

// Throws attn::Error whose message names `fn` and contains `part`.
template <typename F>
void expect_error(F&& f, const std::string& fn, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "expected attn::Error from " << fn << " mentioning " << part;
  } catch (const attn::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("[" + fn + "]"), std::string::npos) << what;
    EXPECT_NE(what.find(part), std::string::npos) << "'" << part << "' not in: " << what;
  }
}

TEST(FusedTensor, NewOptionsAreValidated) {
  const Tensor q = attn::zeros({2, 4, 8, 16}), k = attn::zeros({2, 2, 9, 16}),
               v = attn::zeros({2, 2, 9, 5});
  for (const std::string fn :
       {"scaled_dot_product_attention", "scaled_dot_product_attention_forward",
        "scaled_dot_product_attention_with_weights"}) {
    auto call = [&](const Tensor& qq, const Tensor& kk, const Tensor& vv, const SdpaOptions& o) {
      if (fn == "scaled_dot_product_attention") attn::scaled_dot_product_attention(qq, kk, vv, o);
      if (fn == "scaled_dot_product_attention_forward")
        attn::scaled_dot_product_attention_forward(qq, kk, vv, o);
      if (fn == "scaled_dot_product_attention_with_weights")
        attn::scaled_dot_product_attention_with_weights(qq, kk, vv, o);
    };
    SdpaOptions gqa;
    gqa.enable_gqa = true;
    call(q, k, v, gqa);  // valid
    expect_error([&] { call(q, k, v, SdpaOptions{}); }, fn,
                 "has 4 heads and k (2, 2, 9, 16) has 2: set enable_gqa");
    SdpaOptions o = gqa;
    o.window_left = -2;
    expect_error([&] { call(q, k, v, o); }, fn,
                 "window_left must be -1 (unbounded) or >= 0, got -2");
    o = gqa;
    o.window_right = -7;
    expect_error([&] { call(q, k, v, o); }, fn, "window_right");
    o = gqa;
    o.key_padding_mask = attn::zeros({2, 9});
    expect_error([&] { call(q, k, v, o); }, fn, "key_padding_mask must be bool");
    o.key_padding_mask = attn::zeros({3, 9}, attn::Dtype::Bool);
    expect_error([&] { call(q, k, v, o); }, fn, "key_padding_mask (3, 9) should be (2, 9)");
    o.key_padding_mask = attn::zeros({2, 8}, attn::Dtype::Bool);
    expect_error([&] { call(q, k, v, o); }, fn, "should be (2, 9)");
    o.key_padding_mask = attn::zeros({2, 1, 9}, attn::Dtype::Bool);
    expect_error([&] { call(q, k, v, o); }, fn, "key_padding_mask");
    o.key_padding_mask = attn::zeros({9}, attn::Dtype::Bool);  // valid: every batch
    call(q, k, v, o);
    expect_error(
        [&] {
          call(q, attn::zeros({2, 3, 9, 16}), attn::zeros({2, 3, 9, 5}), gqa);
        },
        fn, "multiple");
    expect_error([&] { call(q, attn::zeros({2, 2, 9, 8}), v, gqa); }, fn, "differ in head dim");
    o = gqa;
    o.attn_mask = attn::zeros({8, 10});
    expect_error([&] { call(q, k, v, o); }, fn, "does not broadcast");
  }
}

// The causal/window rule every kernel takes from sdpa_params.h: causal masking is window_right = 0
// whatever the window, the diagonal moves by L_k - L_q with bottom-right alignment, and -1 (or any
// negative window) is unbounded.
TEST(SdpaBand, FoldsCausalIntoTheWindowAndAlignsTheDiagonal) {
  K::SdpaGeometry g;
  g.L_q = 3, g.L_k = 7;
  K::SdpaBand band = K::sdpa_band(g);
  EXPECT_EQ(band.diagonal_offset, 0);
  EXPECT_EQ(band.window_left, -1);
  EXPECT_EQ(band.window_right, -1);
  EXPECT_TRUE(band.visible(0, 6));

  g.causal = true;
  band = K::sdpa_band(g);
  EXPECT_EQ(band.window_right, 0);
  EXPECT_TRUE(band.visible(1, 1));
  EXPECT_FALSE(band.visible(1, 2));
  g.window_right = 5;
  EXPECT_EQ(K::sdpa_band(g).window_right, 0);

  g.causal_bottom_right = true, g.window_left = 2, g.window_right = -3;
  band = K::sdpa_band(g);
  EXPECT_EQ(band.diagonal_offset, 4);
  EXPECT_EQ(band.window_left, 2);
  // Query 1 of 3 sees keys [1 + 4 - 2, 1 + 4] = [3, 5] of 7.
  for (int64_t j = 0; j < 7; ++j) EXPECT_EQ(band.visible(1, j), j >= 3 && j <= 5) << j;

  g.causal = false;
  EXPECT_EQ(K::sdpa_band(g).window_right, -1);  // a negative window is unbounded
  static_assert(K::sdpa_band(K::SdpaGeometry{}).visible(5, 0));
}

}  // namespace

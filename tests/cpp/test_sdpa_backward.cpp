// The attention backward: the reference kernel against central finite differences of an fp64
// forward, the fused kernel against the reference over a named table of cases, thread-count
// determinism, scalar against SIMD, and the Tensor-level scaled_dot_product_attention_backward.
//
// Every kernel-level case builds its own inputs in a chosen layout, computes the forward (out,
// lse) in double here (an independent statement of sdpa_reference.h's definition), and runs the
// backward kernels on it.
//
// The score modifiers (softcap, ALiBi, the relative-position bias table, attention sinks) and the
// gradients of their parameters have their own sections: finite differences of the reference
// (dq, dk, dv and the parameters' gradients), the fused kernel against the reference on every
// instruction set, 1, 2 and 3 threads bitwise, and gradients that add to what the buffers hold.
#include <attn/attn.h>
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "../../src/backend/cpu/sdpa_fused_backward.h"
#include "../../src/backend/cpu/sdpa_reference.h"

namespace {

namespace k = attn::kernels;
using attn::CausalAlign;
using attn::Dtype;
using attn::SdpaOptions;
using attn::Shape;
using attn::Tensor;
constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// ---- a case: sizes and features, named from its parameters --------------------------------------

enum class Layout { BHLD, BLHD, Padded };  // Padded: (B, H, L, D) with row stride D + 5
enum class Mask { None, Bool, Float };
enum class Bcast { Full, LqLk, BLk };  // mask shapes (B, H, L_q, L_k), (L_q, L_k), (B, 1, 1, L_k)
// ALiBi slopes (B, H) with batch stride 0 (Shared) or H (PerBatch); the relative-position bias
// table (H, 2 R + 1) with head stride 0 (Shared) or 2 R + 1 (PerHead).
enum class Alibi { None, Shared, PerBatch };
enum class Rel { None, Shared, PerHead };

struct Case {
  int64_t B = 1, H = 1, H_kv = 1, L_q = 1, L_k = 1, D = 8, D_v = 8;
  bool causal = false, bottom_right = false;
  Mask mask = Mask::None;
  Bcast bcast = Bcast::Full;
  int64_t wl = -1, wr = -1;  // sliding window
  bool kpad = false;         // key padding (batch 0 pads its last keys, batch 1 all its keys)
  double dropout = 0.0;
  Layout layout = Layout::BHLD;
  double scale = 0.0;       // 0: 1 / sqrt(D)
  double magnitude = 1;     // q is multiplied by this (huge scores)
  bool masked_row = false;  // the bool/float mask hides every key of query row 0
  // Score modifiers (sdpa_params.h).
  double softcap = 0.0;  // > 0: s = softcap * tanh(s / softcap)
  Alibi alibi = Alibi::None;
  Rel rel = Rel::None;
  int64_t rel_R = 0;   // rel_bias_max_distance
  bool sinks = false;  // one per head; head 1 (when H > 1) has a sink of -inf

  std::string name() const {
    std::string s = "B" + std::to_string(B) + "_H" + std::to_string(H) + "_Hkv" +
                    std::to_string(H_kv) + "_Lq" + std::to_string(L_q) + "_Lk" +
                    std::to_string(L_k) + "_D" + std::to_string(D) + "_Dv" + std::to_string(D_v);
    if (causal) s += bottom_right ? "_causalBR" : "_causalTL";
    if (mask != Mask::None) {
      s += mask == Mask::Bool ? "_bool" : "_float";
      s += bcast == Bcast::Full ? "Full" : bcast == Bcast::LqLk ? "LqLk" : "BLk";
    }
    if (masked_row) s += "_maskedrow";
    if (wl >= 0 || wr >= 0) s += "_win" + std::to_string(wl) + "x" + std::to_string(wr);
    if (kpad) s += "_kpad";
    if (dropout > 0) s += "_drop" + std::to_string(int(dropout * 100));
    if (layout != Layout::BHLD) s += layout == Layout::BLHD ? "_BLHD" : "_padded";
    if (scale != 0) s += "_scale" + std::to_string(int(scale * 100));
    if (magnitude != 1) s += "_mag" + std::to_string(int(magnitude));
    if (softcap > 0) s += "_cap" + std::to_string(int(softcap * 10));
    if (alibi != Alibi::None) s += alibi == Alibi::Shared ? "_alibiS" : "_alibiB";
    if (rel != Rel::None) s += (rel == Rel::Shared ? "_relS" : "_relH") + std::to_string(rel_R);
    if (sinks) s += "_sinks";
    for (auto& ch : s)
      if (ch == '-') ch = 'm';
    return s;
  }
};

// gtest prints a failing case by its name.
void PrintTo(const Case& c, std::ostream* os) { *os << c.name(); }

// A (B, X, L, W) tensor stored in one of the layouts; X heads.
struct Buf {
  std::vector<float> data;
  int64_t bs = 0, hs = 0, rs = 0;  // strides in elements
  int64_t B = 0, X = 0, L = 0, W = 0;
  Buf() = default;
  Buf(int64_t B_, int64_t X_, int64_t L_, int64_t W_, Layout layout) : B(B_), X(X_), L(L_), W(W_) {
    if (layout == Layout::BLHD) {
      rs = X * W, hs = W, bs = L * X * W;
    } else {
      rs = layout == Layout::Padded ? W + 5 : W;
      hs = L * rs, bs = X * hs;
    }
    data.assign(size_t(std::max<int64_t>(B * bs, 1)), std::nanf(""));  // gaps hold NaN
    for (int64_t b = 0; b < B; ++b)
      for (int64_t x = 0; x < X; ++x)
        for (int64_t l = 0; l < L; ++l)
          for (int64_t w = 0; w < W; ++w) at(b, x, l, w) = 0.0f;
  }
  float& at(int64_t b, int64_t x, int64_t l, int64_t w) {
    return data[size_t(b * bs + x * hs + l * rs + w)];
  }
  float at(int64_t b, int64_t x, int64_t l, int64_t w) const {
    return data[size_t(b * bs + x * hs + l * rs + w)];
  }
  float* ptr() { return data.data(); }
};

// Inputs of a case, the forward computed in double, and kernel parameters pointing at them.
struct Problem {
  Case c;
  double scale;
  Buf q, k, v, dout, out;
  std::vector<float> lse;
  std::vector<float> mask_f;
  std::vector<uint8_t> mask_b, kpad;
  int64_t m_bs = 0, m_hs = 0, m_rs = 0, m_cs = 0;
  // The score modifiers' parameters as the kernels read them, and the same values in double as
  // the definition below reads them (the finite differences perturb those).
  std::vector<float> alibi, rel, sinks;
  std::vector<double> alibi_d, rel_d, sinks_d;
  int64_t alibi_bs = 0, rel_hs = 0;
  uint64_t seed = 0x1234abcd, offset = 77;

  explicit Problem(const Case& c_) : c(c_) {
    scale = c.scale != 0 ? c.scale : 1.0 / std::sqrt(double(std::max<int64_t>(c.D, 1)));
    uint32_t h = 2166136261u;  // FNV-1a of the name: each case has its own, stable data
    for (char ch : c.name()) h = (h ^ uint8_t(ch)) * 16777619u;
    std::mt19937 gen(h);
    std::uniform_real_distribution<float> U(-1.0f, 1.0f);
    q = Buf(c.B, c.H, c.L_q, c.D, c.layout);
    k = Buf(c.B, c.H_kv, c.L_k, c.D, c.layout);
    v = Buf(c.B, c.H_kv, c.L_k, c.D_v, c.layout);
    dout = Buf(c.B, c.H, c.L_q, c.D_v, c.layout);
    out = Buf(c.B, c.H, c.L_q, c.D_v, Layout::BHLD);
    auto fill = [&](Buf& t, float mul) {
      for (int64_t b = 0; b < t.B; ++b)
        for (int64_t x = 0; x < t.X; ++x)
          for (int64_t l = 0; l < t.L; ++l)
            for (int64_t w = 0; w < t.W; ++w) t.at(b, x, l, w) = U(gen) * mul;
    };
    fill(q, float(c.magnitude));
    fill(k, 1.5f);
    fill(v, 1.0f);
    fill(dout, 1.0f);

    // Mask, stored at its broadcast shape with stride 0 on broadcast dims.
    if (c.mask != Mask::None) {
      int64_t mB = c.B, mH = c.H, mQ = c.L_q;
      if (c.bcast == Bcast::LqLk) mB = 1, mH = 1;
      if (c.bcast == Bcast::BLk) mH = 1, mQ = 1;
      m_cs = 1, m_rs = mQ == 1 ? 0 : c.L_k, m_hs = mH == 1 ? 0 : mQ * c.L_k;
      m_bs = mB == 1 ? 0 : mH * mQ * c.L_k;
      const int64_t n = mB * mH * mQ * c.L_k;
      if (c.mask == Mask::Bool) {
        mask_b.resize(size_t(n));
        for (auto& x : mask_b) x = U(gen) > -0.5f;  // 3/4 visible
        if (c.masked_row && mQ > 0)
          for (int64_t j = 0; j < c.L_k; ++j) mask_b[size_t(j)] = 0;
      } else {
        mask_f.resize(size_t(n));
        for (auto& x : mask_f) {
          const float u = U(gen);
          x = u < -0.8f ? -std::numeric_limits<float>::infinity() : 2.0f * u;
        }
        if (c.masked_row && mQ > 0)
          for (int64_t j = 0; j < c.L_k; ++j)
            mask_f[size_t(j)] = -std::numeric_limits<float>::infinity();
      }
    }
    if (c.kpad) {
      kpad.assign(size_t(c.B * c.L_k), 0);
      for (int64_t j = 0; j < c.L_k; ++j) {
        kpad[size_t(j)] = j >= (c.L_k + 1) / 2;    // batch 0: second half is padding
        if (c.B > 1) kpad[size_t(c.L_k + j)] = 1;  // batch 1: everything
        for (int64_t b = 2; b < c.B; ++b) kpad[size_t(b * c.L_k + j)] = j % 3 == 1;
      }
    }
    // Score modifiers (drawn last, so that the cases without them keep their data).
    if (c.alibi != Alibi::None) {
      alibi.resize(size_t(c.alibi == Alibi::Shared ? c.H : c.B * c.H));
      for (auto& x : alibi) x = 0.02f + 0.2f * std::abs(U(gen));
      alibi_bs = c.alibi == Alibi::Shared ? 0 : c.H;
    }
    if (c.rel != Rel::None) {
      const int64_t n = 2 * c.rel_R + 1;
      rel.resize(size_t((c.rel == Rel::Shared ? 1 : c.H) * n));
      for (auto& x : rel) x = 1.5f * U(gen);
      rel_hs = c.rel == Rel::Shared ? 0 : n;
    }
    if (c.sinks) {
      sinks.resize(size_t(c.H));
      for (auto& x : sinks) x = 0.5f + 2.0f * U(gen);
      if (c.H > 1) sinks[1] = -std::numeric_limits<float>::infinity();  // no sink at all
    }
    alibi_d.assign(alibi.begin(), alibi.end());
    rel_d.assign(rel.begin(), rel.end());
    sinks_d.assign(sinks.begin(), sinks.end());
    lse.assign(size_t(std::max<int64_t>(c.B * c.H * c.L_q, 1)), 0.0f);
    forward();
  }

  k::SdpaParams params() {
    k::SdpaParams p;
    p.q = q.ptr(), p.k = k.ptr(), p.v = v.ptr(), p.out = out.ptr();
    p.q_batch_stride = q.bs, p.q_head_stride = q.hs, p.q_row_stride = q.rs;
    p.k_batch_stride = k.bs, p.k_head_stride = k.hs, p.k_row_stride = k.rs;
    p.v_batch_stride = v.bs, p.v_head_stride = v.hs, p.v_row_stride = v.rs;
    p.out_batch_stride = out.bs, p.out_head_stride = out.hs, p.out_row_stride = out.rs;
    p.B = c.B, p.H = c.H, p.H_kv = c.H_kv, p.L_q = c.L_q, p.L_k = c.L_k, p.D = c.D, p.D_v = c.D_v;
    p.scale = scale;
    p.causal = c.causal, p.causal_bottom_right = c.bottom_right;
    if (c.mask != Mask::None) {
      p.mask_kind = c.mask == Mask::Bool ? k::MaskKind::Bool : k::MaskKind::Float;
      p.mask = c.mask == Mask::Bool ? static_cast<const void*>(mask_b.data()) : mask_f.data();
      p.mask_batch_stride = m_bs, p.mask_head_stride = m_hs, p.mask_row_stride = m_rs;
      p.mask_col_stride = m_cs;
    }
    p.lse = lse.data();
    p.window_left = c.wl, p.window_right = c.wr;
    if (c.kpad) p.key_padding = kpad.data(), p.key_padding_batch_stride = c.L_k;
    p.dropout_p = c.dropout, p.dropout_seed = seed, p.dropout_offset = offset;
    p.softcap = c.softcap;
    if (!alibi.empty()) p.alibi_slopes = alibi.data(), p.alibi_batch_stride = alibi_bs;
    if (!rel.empty()) {
      p.rel_bias = rel.data(), p.rel_bias_head_stride = rel_hs;
      p.rel_bias_max_distance = c.rel_R;
    }
    if (!sinks.empty()) p.sinks = sinks.data();
    return p;
  }

  // ---- the definition, in double: score s(b, h, i, j) or -inf -----------------------------------
  double score(int64_t b, int64_t h, int64_t i, int64_t j, const std::vector<double>* qd = nullptr,
               const std::vector<double>* kd = nullptr) const {
    const int64_t off = c.bottom_right ? c.L_k - c.L_q : 0;
    if (c.causal && j > i + off) return kNegInf;
    if (c.wr >= 0 && j > i + off + c.wr) return kNegInf;
    if (c.wl >= 0 && j < i + off - c.wl) return kNegInf;
    if (c.kpad && kpad[size_t(b * c.L_k + j)]) return kNegInf;
    const int64_t mi = b * m_bs + h * m_hs + i * m_rs + j * m_cs;
    if (c.mask == Mask::Bool && !mask_b[size_t(mi)]) return kNegInf;
    const int64_t hk = h / (c.H / c.H_kv);
    double dot = 0;
    for (int64_t d = 0; d < c.D; ++d)
      dot += (qd ? (*qd)[size_t(((b * c.H + h) * c.L_q + i) * c.D + d)] : q.at(b, h, i, d)) *
             (kd ? (*kd)[size_t(((b * c.H_kv + hk) * c.L_k + j) * c.D + d)] : k.at(b, hk, j, d));
    double s = dot * scale;
    // The score modifiers, before the float mask: softcap, ALiBi's distance |i + off - j|, the
    // table's entry for the offset j - i - off clipped to [-R, R].
    if (c.softcap > 0) s = c.softcap * std::tanh(s / c.softcap);
    if (!alibi_d.empty()) s -= alibi_d[size_t(b * alibi_bs + h)] * double(std::abs(i + off - j));
    if (!rel_d.empty())
      s += rel_d[size_t(h * rel_hs + std::clamp(j - i - off, -c.rel_R, c.rel_R) + c.rel_R)];
    if (c.mask == Mask::Float) s += mask_f[size_t(mi)];
    return s;
  }
  // The sink of head h (-inf: none), one more score in the softmax whose value row is zero.
  double sink(int64_t h) const { return sinks_d.empty() ? kNegInf : sinks_d[size_t(h)]; }
  double drop(int64_t b, int64_t h, int64_t i, int64_t j) const {
    if (c.dropout <= 0) return 1.0;
    const uint64_t idx = uint64_t(((b * c.H + h) * c.L_q + i) * c.L_k + j);
    return k::dropout_keep(seed, offset, idx, c.dropout) ? double(k::dropout_keep_scale(c.dropout))
                                                         : 0.0;
  }

  // loss = sum(dout o out) in double, with q, k, v given as canonical (B, X, L, W) doubles; also
  // fills out and lse (as floats) when `store`.
  double loss(const std::vector<double>& qd, const std::vector<double>& kd,
              const std::vector<double>& vd, bool store) {
    double total = 0;
    std::vector<double> s(size_t(c.L_k));
    for (int64_t b = 0; b < c.B; ++b)
      for (int64_t h = 0; h < c.H; ++h)
        for (int64_t i = 0; i < c.L_q; ++i) {
          const int64_t hk = h / (c.H / c.H_kv), row = (b * c.H + h) * c.L_q + i;
          double m = sink(h);
          for (int64_t j = 0; j < c.L_k; ++j)
            m = std::max(m, s[size_t(j)] = score(b, h, i, j, &qd, &kd));
          if (m == kNegInf) {
            if (store) {
              lse[size_t(row)] = -std::numeric_limits<float>::infinity();
              for (int64_t e = 0; e < c.D_v; ++e) out.at(b, h, i, e) = 0.0f;
            }
            continue;
          }
          double sum = std::exp(sink(h) - m);  // 0 without a sink
          for (auto& x : s) sum += (x = std::exp(x - m));
          for (int64_t e = 0; e < c.D_v; ++e) {
            double o = 0;
            for (int64_t j = 0; j < c.L_k; ++j)
              o += s[size_t(j)] / sum * drop(b, h, i, j) *
                   vd[size_t(((b * c.H_kv + hk) * c.L_k + j) * c.D_v + e)];
            total += o * dout.at(b, h, i, e);
            if (store) out.at(b, h, i, e) = float(o);
          }
          if (store) lse[size_t(row)] = float(m + std::log(sum));
        }
    return total;
  }
  static std::vector<double> canon(const Buf& t) {
    std::vector<double> r;
    for (int64_t b = 0; b < t.B; ++b)
      for (int64_t x = 0; x < t.X; ++x)
        for (int64_t l = 0; l < t.L; ++l)
          for (int64_t w = 0; w < t.W; ++w) r.push_back(t.at(b, x, l, w));
    return r;
  }
  void forward() { loss(canon(q), canon(k), canon(v), true); }
};

// Gradients in the case's layout, and those of the score modifiers' parameters in theirs (zeros:
// the kernels add to them; empty without the modifier).
struct Grads {
  Buf dq, dk, dv;
  std::vector<float> dalibi, drel, dsinks;
  Grads(const Case& c)
      : dq(c.B, c.H, c.L_q, c.D, c.layout),
        dk(c.B, c.H_kv, c.L_k, c.D, c.layout),
        dv(c.B, c.H_kv, c.L_k, c.D_v, c.layout) {
    if (c.alibi != Alibi::None)
      dalibi.assign(size_t((c.alibi == Alibi::Shared ? 1 : c.B) * c.H), 0.0f);
    if (c.rel != Rel::None)
      drel.assign(size_t((c.rel == Rel::Shared ? 1 : c.H) * (2 * c.rel_R + 1)), 0.0f);
    if (c.sinks) dsinks.assign(size_t(c.H), 0.0f);
    // Poison the outputs: the kernels must overwrite every element.
    for (Buf* t : {&dq, &dk, &dv})
      for (int64_t b = 0; b < t->B; ++b)
        for (int64_t x = 0; x < t->X; ++x)
          for (int64_t l = 0; l < t->L; ++l)
            for (int64_t w = 0; w < t->W; ++w) t->at(b, x, l, w) = 12345.0f;
  }
};

k::SdpaBackwardParams backward_params(Problem& pb, Grads& g) {
  k::SdpaBackwardParams bp;
  bp.fwd = pb.params();
  bp.dout = pb.dout.ptr();
  bp.dout_batch_stride = pb.dout.bs, bp.dout_head_stride = pb.dout.hs;
  bp.dout_row_stride = pb.dout.rs;
  bp.dq = g.dq.ptr(), bp.dq_batch_stride = g.dq.bs, bp.dq_head_stride = g.dq.hs;
  bp.dq_row_stride = g.dq.rs;
  bp.dk = g.dk.ptr(), bp.dk_batch_stride = g.dk.bs, bp.dk_head_stride = g.dk.hs;
  bp.dk_row_stride = g.dk.rs;
  bp.dv = g.dv.ptr(), bp.dv_batch_stride = g.dv.bs, bp.dv_head_stride = g.dv.hs;
  bp.dv_row_stride = g.dv.rs;
  if (!g.dalibi.empty()) bp.dalibi_slopes = g.dalibi.data();
  if (!g.drel.empty()) bp.drel_bias = g.drel.data();
  if (!g.dsinks.empty()) bp.dsinks = g.dsinks.data();
  return bp;
}

Grads run_reference(Problem& pb) {
  Grads g(pb.c);
  k::sdpa_reference_backward(backward_params(pb, g));
  return g;
}
Grads run_fused(Problem& pb, k::Isa isa = k::Isa::Auto) {
  Grads g(pb.c);
  k::sdpa_fused_backward(backward_params(pb, g), isa);
  return g;
}

// ---- a naive fp32 backward, the way PyTorch's math path computes it in float -------------------
// Its error against the fp64 reference sets the tolerance (FlashAttention's rule: the fused
// kernel's error may be at most about twice that of the naive fp32 computation).
Grads run_naive_fp32(Problem& pb) {
  const Case& c = pb.c;
  Grads g(c);
  for (Buf* t : {&g.dq, &g.dk, &g.dv})
    for (int64_t b = 0; b < t->B; ++b)
      for (int64_t x = 0; x < t->X; ++x)
        for (int64_t l = 0; l < t->L; ++l)
          for (int64_t w = 0; w < t->W; ++w) t->at(b, x, l, w) = 0.0f;
  std::vector<float> s(size_t(c.L_k)), dp(size_t(c.L_k)), th(size_t(c.L_k));
  const float scale = float(pb.scale), cap = float(c.softcap);
  const int64_t off = c.bottom_right ? c.L_k - c.L_q : 0, R = c.rel_R;
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.H; ++h)
      for (int64_t i = 0; i < c.L_q; ++i) {
        const int64_t hk = h / (c.H / c.H_kv);
        const float sink = c.sinks ? pb.sinks[size_t(h)] : -std::numeric_limits<float>::infinity();
        float m = sink;
        for (int64_t j = 0; j < c.L_k; ++j) {
          float dot = 0;
          for (int64_t d = 0; d < c.D; ++d) dot += pb.q.at(b, h, i, d) * pb.k.at(b, hk, j, d);
          float x = dot * scale;
          if (cap > 0) x = cap * (th[size_t(j)] = std::tanh(x / cap));
          if (c.alibi != Alibi::None)
            x -= pb.alibi[size_t(b * pb.alibi_bs + h)] * float(std::abs(i + off - j));
          if (c.rel != Rel::None)
            x += pb.rel[size_t(h * pb.rel_hs + std::clamp(j - i - off, -R, R) + R)];
          if (pb.score(b, h, i, j) == kNegInf)
            x = -std::numeric_limits<float>::infinity();
          else if (c.mask == Mask::Float)
            x += pb.mask_f[size_t(b * pb.m_bs + h * pb.m_hs + i * pb.m_rs + j * pb.m_cs)];
          s[size_t(j)] = x;
          m = std::max(m, x);
        }
        if (m == -std::numeric_limits<float>::infinity()) continue;
        float sum = c.sinks ? std::exp(sink - m) : 0.0f;
        for (auto& x : s) sum += (x = std::exp(x - m));
        for (auto& x : s) x /= sum;
        float Di = 0;
        for (int64_t j = 0; j < c.L_k; ++j) {
          float dot = 0;
          for (int64_t e = 0; e < c.D_v; ++e) dot += pb.dout.at(b, h, i, e) * pb.v.at(b, hk, j, e);
          dp[size_t(j)] = dot * float(pb.drop(b, h, i, j));
          Di += s[size_t(j)] * dp[size_t(j)];
        }
        if (c.sinks) g.dsinks[size_t(h)] -= std::exp(sink - m) / sum * Di;
        for (int64_t j = 0; j < c.L_k; ++j) {
          // d loss / d (modified score): the gradient of ALiBi's and the table's biases; through
          // the softcap and the scale, that of q . k.
          const float ds_mod = s[size_t(j)] * (dp[size_t(j)] - Di);
          if (c.alibi != Alibi::None)
            g.dalibi[size_t(b * pb.alibi_bs + h)] -= ds_mod * float(std::abs(i + off - j));
          if (c.rel != Rel::None)
            g.drel[size_t(h * pb.rel_hs + std::clamp(j - i - off, -R, R) + R)] += ds_mod;
          const float ds = ds_mod * (cap > 0 ? 1.0f - th[size_t(j)] * th[size_t(j)] : 1.0f) * scale;
          const float w = s[size_t(j)] * float(pb.drop(b, h, i, j));
          for (int64_t d = 0; d < c.D; ++d) {
            g.dq.at(b, h, i, d) += ds * pb.k.at(b, hk, j, d);
            g.dk.at(b, hk, j, d) += ds * pb.q.at(b, h, i, d);
          }
          for (int64_t e = 0; e < c.D_v; ++e) g.dv.at(b, hk, j, e) += w * pb.dout.at(b, h, i, e);
        }
      }
  return g;
}

struct Err {
  double max_abs = 0, max_ref = 0;
  bool finite = true;
};
Err compare(const Buf& got, const Buf& want) {
  Err e;
  for (int64_t b = 0; b < got.B; ++b)
    for (int64_t x = 0; x < got.X; ++x)
      for (int64_t l = 0; l < got.L; ++l)
        for (int64_t w = 0; w < got.W; ++w) {
          const double a = got.at(b, x, l, w), r = want.at(b, x, l, w);
          if (!std::isfinite(a)) e.finite = false;
          e.max_abs = std::max(e.max_abs, std::abs(a - r));
          e.max_ref = std::max(e.max_ref, std::abs(r));
        }
  return e;
}

Err compare(const std::vector<float>& got, const std::vector<float>& want) {
  Err e;
  for (size_t n = 0; n < got.size() && n < want.size(); ++n) {
    if (!std::isfinite(got[n])) e.finite = false;
    e.max_abs = std::max(e.max_abs, std::abs(double(got[n]) - double(want[n])));
    e.max_ref = std::max(e.max_ref, std::abs(double(want[n])));
  }
  if (got.size() != want.size()) e.finite = false;
  return e;
}

// ---- 1. the reference backward against finite differences
// ----------------------------------------

// Central differences of the fp64 loss sum(dout o out) at the same (float) point, against the
// reference's dq, dk, dv and, with score modifiers, the gradients of their parameters. With step
// h = 1e-4 the truncation error is about h^2 |f'''| ~ 1e-8 and the cancellation error
// 1e-16 |f| / h ~ 1e-12, so the difference is exact to ~1e-8; the reference rounds its result
// to float (relative 6e-8). A tolerance of 1e-6 (absolute, plus 1e-6 relative) is therefore
// safe, and far below any real mistake (which shows up at the size of the gradient itself).
void expect_matches_finite_differences(const Case& c) {
  Problem pb(c);
  Grads g = run_reference(pb);
  std::vector<double> qd = Problem::canon(pb.q), kd = Problem::canon(pb.k),
                      vd = Problem::canon(pb.v);
  const double h = 1e-4;
  auto derivative = [&](double& x) {
    const double x0 = x;
    x = x0 + h;
    const double fp = pb.loss(qd, kd, vd, false);
    x = x0 - h;
    const double fm = pb.loss(qd, kd, vd, false);
    x = x0;
    return (fp - fm) / (2 * h);
  };
  auto expect_close = [](double got, double fd) {
    return std::abs(got - fd) / (1e-6 + 1e-6 * std::abs(fd)) <= 1.0;
  };
  auto check = [&](std::vector<double>& x, const Buf& grad, const char* name) {
    size_t n = 0;
    for (int64_t b = 0; b < grad.B; ++b)
      for (int64_t hh = 0; hh < grad.X; ++hh)
        for (int64_t l = 0; l < grad.L; ++l)
          for (int64_t w = 0; w < grad.W; ++w, ++n) {
            const double fd = derivative(x[n]);
            const double got = grad.at(b, hh, l, w);
            ASSERT_TRUE(std::isfinite(got)) << name;
            EXPECT_TRUE(expect_close(got, fd))
                << name << "[" << b << "," << hh << "," << l << "," << w << "]: reference " << got
                << ", finite differences " << fd;
          }
  };
  check(qd, g.dq, "dq");
  check(kd, g.dk, "dk");
  check(vd, g.dv, "dv");
  // The parameters of the score modifiers, in their own layouts (a sink of -inf has gradient 0).
  auto check_params = [&](std::vector<double>& x, const std::vector<float>& grad,
                          const char* name) {
    ASSERT_EQ(x.size(), grad.size()) << name;
    for (size_t n = 0; n < x.size(); ++n) {
      ASSERT_TRUE(std::isfinite(grad[n])) << name << "[" << n << "]";
      const double fd = std::isinf(x[n]) ? 0.0 : derivative(x[n]);
      EXPECT_TRUE(expect_close(grad[n], fd))
          << name << "[" << n << "]: reference " << grad[n] << ", finite differences " << fd;
    }
  };
  check_params(pb.alibi_d, g.dalibi, "dalibi_slopes");
  check_params(pb.rel_d, g.drel, "drel_bias");
  check_params(pb.sinks_d, g.dsinks, "dsinks");
}

class SdpaBackwardFiniteDifferences : public ::testing::TestWithParam<Case> {};

TEST_P(SdpaBackwardFiniteDifferences, Gradients) { expect_matches_finite_differences(GetParam()); }

std::vector<Case> fd_cases() {
  std::vector<Case> cs;
  auto base = [] {
    Case c;
    c.B = 2, c.H = 2, c.H_kv = 2, c.L_q = 5, c.L_k = 6, c.D = 3, c.D_v = 4;
    return c;
  };
  cs.push_back(base());
  {
    Case c = base();
    c.causal = true;
    c.L_q = 5, c.L_k = 7;
    cs.push_back(c);
    c.bottom_right = true;
    cs.push_back(c);
    c.L_q = 7, c.L_k = 4;  // bottom-right with L_q > L_k: fully masked first rows
    cs.push_back(c);
  }
  for (Mask m : {Mask::Bool, Mask::Float})
    for (Bcast bc : {Bcast::Full, Bcast::LqLk, Bcast::BLk}) {
      Case c = base();
      c.mask = m, c.bcast = bc, c.masked_row = bc != Bcast::BLk;
      cs.push_back(c);
    }
  {
    Case c = base();
    c.wl = 2, c.wr = 1;
    cs.push_back(c);
    c.bottom_right = true, c.L_q = 4, c.L_k = 7, c.wr = 0;
    cs.push_back(c);
  }
  {
    Case c = base();
    c.kpad = true;
    cs.push_back(c);
  }
  {
    Case c = base();
    c.H = 4, c.H_kv = 2;  // GQA
    cs.push_back(c);
    c.H = 3, c.H_kv = 1;  // MQA
    cs.push_back(c);
  }
  {
    Case c = base();
    c.dropout = 0.3;
    cs.push_back(c);
  }
  {
    Case c = base();
    c.scale = 0.7, c.magnitude = 30;  // huge scores: saturated softmax
    cs.push_back(c);
  }
  {
    Case c = base();
    c.layout = Layout::BLHD;
    cs.push_back(c);
    c.layout = Layout::Padded;
    cs.push_back(c);
  }
  {
    Case c = base();  // everything at once
    c.H = 4, c.H_kv = 2, c.L_q = 6, c.L_k = 8, c.causal = true, c.bottom_right = true;
    c.mask = Mask::Float, c.bcast = Bcast::LqLk, c.wl = 3, c.kpad = true, c.dropout = 0.25;
    c.layout = Layout::BLHD, c.D = 5, c.D_v = 2;
    cs.push_back(c);
  }
  return cs;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) { return info.param.name(); }

INSTANTIATE_TEST_SUITE_P(Table, SdpaBackwardFiniteDifferences, ::testing::ValuesIn(fd_cases()),
                         case_name);

// ---- 2. the fused backward against the reference ----------------------------------------------

// Fused error <= 2 * (naive fp32 error) + floor + lse term, per gradient tensor, in max-abs norm.
//  - floor: 2e-6 of the gradient's largest magnitude or of 1 (about 16 float ulps), for cases where
//    the naive fp32 computation happens to be nearly exact (L_k = 1: its softmax is exactly 1);
//  - lse term: the fused kernel rebuilds P = exp(s - lse) from the saved fp32 lse (as
//    FlashAttention does), whose rounding, half an ulp of |lse|, scales a whole row of P by
//    1 + ulp/2. It only matters for huge scores (|lse| ~ 500 has ulp 3e-5); it is allowed twice.
void expect_close_to_reference(Problem& pb, const Grads& got, const Grads& ref, const Grads& naive,
                               const char* what) {
  const std::pair<const Buf*, const Buf*> pairs[3][2] = {
      {{&got.dq, &ref.dq}, {&naive.dq, &ref.dq}},
      {{&got.dk, &ref.dk}, {&naive.dk, &ref.dk}},
      {{&got.dv, &ref.dv}, {&naive.dv, &ref.dv}}};
  const char* names[3] = {"dq", "dk", "dv"};
  double lse_ulp = 0;
  for (float l : pb.lse)
    if (std::isfinite(l))
      lse_ulp = std::max(lse_ulp, double(std::nextafter(std::abs(l), 1e30f) - std::abs(l)));
  for (int t = 0; t < 3; ++t) {
    const Err e = compare(*pairs[t][0].first, *pairs[t][0].second);
    const Err e32 = compare(*pairs[t][1].first, *pairs[t][1].second);
    EXPECT_TRUE(e.finite) << what << " " << names[t] << " has inf or NaN";
    const double tol = 2 * e32.max_abs + 2e-6 * std::max(e.max_ref, 1.0) + lse_ulp * e.max_ref;
    EXPECT_LE(e.max_abs, tol) << what << " " << names[t] << ": max error " << e.max_abs
                              << " (naive fp32: " << e32.max_abs << ", largest |grad| " << e.max_ref
                              << ")";
  }
  // The score modifiers' parameter gradients (sums over rows and keys), by the same rule.
  const std::vector<float>* params[3][3] = {{&got.dalibi, &ref.dalibi, &naive.dalibi},
                                            {&got.drel, &ref.drel, &naive.drel},
                                            {&got.dsinks, &ref.dsinks, &naive.dsinks}};
  const char* param_names[3] = {"dalibi_slopes", "drel_bias", "dsinks"};
  for (int t = 0; t < 3; ++t) {
    if (params[t][1]->empty()) continue;
    const Err e = compare(*params[t][0], *params[t][1]);
    const Err e32 = compare(*params[t][2], *params[t][1]);
    EXPECT_TRUE(e.finite) << what << " " << param_names[t] << " has inf or NaN";
    const double tol = 2 * e32.max_abs + 2e-6 * std::max(e.max_ref, 1.0) + lse_ulp * e.max_ref;
    EXPECT_LE(e.max_abs, tol) << what << " " << param_names[t] << ": max error " << e.max_abs
                              << " (naive fp32: " << e32.max_abs << ", largest |grad| " << e.max_ref
                              << ")";
  }
}

// Every instruction set this CPU has runs every case.
const std::pair<k::Isa, const char*> kIsas[] = {{k::Isa::Scalar, "scalar"},
                                                {k::Isa::Avx2, "avx2"},
                                                {k::Isa::Avx512, "avx512"},
                                                {k::Isa::Neon, "neon"},
                                                {k::Isa::Sve, "sve"}};

class SdpaFusedBackwardTable : public ::testing::TestWithParam<Case> {};

TEST_P(SdpaFusedBackwardTable, Gradients) {
  Problem pb(GetParam());
  const Grads ref = run_reference(pb), naive = run_naive_fp32(pb);
  for (auto [isa, name] : kIsas) {
    if (!k::isa_supported(isa)) continue;
    Grads got = run_fused(pb, isa);
    expect_close_to_reference(pb, got, ref, naive, name);
  }
}

std::vector<Case> fused_cases() {
  std::vector<Case> cs;
  auto mk = [](int64_t L_q, int64_t L_k, int64_t D, int64_t D_v) {
    Case c;
    c.B = 1, c.H = 2, c.H_kv = 2, c.L_q = L_q, c.L_k = L_k, c.D = D, c.D_v = D_v;
    return c;
  };
  // Awkward sizes, square and not, head dims that are and are not multiples of 8.
  for (int64_t L : {1, 7, 63, 65, 127, 129}) cs.push_back(mk(L, L, 64, 64));
  cs.push_back(mk(1, 129, 16, 16));
  cs.push_back(mk(129, 1, 16, 16));
  cs.push_back(mk(63, 130, 7, 7));
  cs.push_back(mk(130, 65, 33, 20));
  // Causal, both alignments, L_q < L_k and L_q > L_k.
  for (bool br : {false, true})
    for (auto [lq, lk] : {std::pair<int64_t, int64_t>{129, 129},
                          {65, 130},
                          {130, 63},
                          {1, 127},
                          {100, 100},
                          {36, 90}}) {
      Case c = mk(lq, lk, 32, 32);
      c.causal = true, c.bottom_right = br;
      cs.push_back(c);
    }
  // Masks, broadcast three ways, with a fully masked row.
  for (Mask m : {Mask::Bool, Mask::Float})
    for (Bcast bc : {Bcast::Full, Bcast::LqLk, Bcast::BLk}) {
      Case c = mk(70, 129, 24, 24);
      c.B = 2, c.mask = m, c.bcast = bc, c.masked_row = bc != Bcast::BLk;
      cs.push_back(c);
    }
  // Sliding windows.
  {
    Case c = mk(127, 129, 32, 32);
    c.wl = 20, c.wr = 5;
    cs.push_back(c);
    c.wl = 70, c.wr = -1, c.causal = true, c.bottom_right = true;
    cs.push_back(c);
    c.wl = 0, c.wr = 0, c.causal = false;  // the diagonal only
    cs.push_back(c);
    c = mk(100, 100, 16, 16);  // partial tiles of 36 rows, cut on both sides
    c.wl = 10, c.wr = 3;
    cs.push_back(c);
  }
  // Key padding (batch 1 fully padded: every row masked).
  {
    Case c = mk(65, 129, 32, 32);
    c.B = 3, c.kpad = true;
    cs.push_back(c);
  }
  // Grouped- and multi-query attention.
  {
    Case c = mk(65, 127, 32, 32);
    c.H = 6, c.H_kv = 2;
    cs.push_back(c);
    c.H = 4, c.H_kv = 1, c.causal = true;
    cs.push_back(c);
  }
  // D_v != D, large head dims, and empty sequences (L_q = 0: dk = dv = 0; L_k = 0: dq = 0).
  cs.push_back(mk(65, 65, 64, 16));
  cs.push_back(mk(65, 65, 8, 72));
  cs.push_back(mk(65, 70, 128, 128));
  cs.push_back(mk(33, 20, 256, 8));
  cs.push_back(mk(0, 9, 16, 16));
  cs.push_back(mk(9, 0, 16, 16));
  // Layouts.
  {
    Case c = mk(65, 127, 40, 24);
    c.B = 2, c.layout = Layout::BLHD;
    cs.push_back(c);
    c.layout = Layout::Padded, c.causal = true;
    cs.push_back(c);
  }
  // Dropout, with the mask regenerated from the same seed.
  {
    Case c = mk(129, 127, 32, 32);
    c.dropout = 0.2;
    cs.push_back(c);
    c.causal = true, c.H = 4, c.H_kv = 2, c.dropout = 0.5;
    cs.push_back(c);
  }
  // Huge scores (the seeds have -318 before scaling), custom scale.
  {
    Case c = mk(65, 129, 32, 32);
    c.magnitude = 100;
    cs.push_back(c);
    c.magnitude = 1, c.scale = 2.5;
    cs.push_back(c);
  }
  // Everything at once.
  {
    Case c = mk(129, 127, 20, 12);
    c.B = 2, c.H = 4, c.H_kv = 2, c.causal = true, c.bottom_right = true, c.mask = Mask::Float;
    c.bcast = Bcast::Full, c.wl = 40, c.kpad = true, c.dropout = 0.1, c.layout = Layout::BLHD;
    cs.push_back(c);
  }
  return cs;
}

INSTANTIATE_TEST_SUITE_P(Table, SdpaFusedBackwardTable, ::testing::ValuesIn(fused_cases()),
                         case_name);

// ---- 2b. score modifiers: softcap, ALiBi, the relative-position bias table, attention sinks -----

// Each modifier alone, then all four together.
using ModFn = void (*)(Case&);
const ModFn kMods[] = {
    [](Case& c) { c.softcap = 2.0, c.magnitude = 2; },  // scores well beyond the cap
    [](Case& c) { c.alibi = Alibi::Shared; },
    [](Case& c) { c.alibi = Alibi::PerBatch; },
    [](Case& c) { c.rel = Rel::Shared, c.rel_R = 2; },     // most offsets clipped
    [](Case& c) { c.rel = Rel::PerHead, c.rel_R = 300; },  // R > L_k: none clipped
    [](Case& c) { c.sinks = true; },
    [](Case& c) {
      c.softcap = 5.0, c.magnitude = 2, c.alibi = Alibi::PerBatch, c.rel = Rel::PerHead;
      c.rel_R = 8, c.sinks = true;
    },
};
void all_mods(Case& c) { kMods[std::size(kMods) - 1](c); }

Case mod_case(int64_t B, int64_t H, int64_t H_kv, int64_t L_q, int64_t L_k, int64_t D,
              int64_t D_v) {
  Case c;
  c.B = B, c.H = H, c.H_kv = H_kv, c.L_q = L_q, c.L_k = L_k, c.D = D, c.D_v = D_v;
  return c;
}

// The reference against finite differences: small cases, every parameter's gradient.
std::vector<Case> mod_fd_cases() {
  std::vector<Case> cs;
  for (ModFn mod : kMods) {
    Case c = mod_case(2, 2, 2, 5, 6, 3, 4);
    mod(c);
    if (c.rel_R > 10) c.rel_R = 10;  // still more than L_k
    cs.push_back(c);
  }
  Case c = mod_case(2, 4, 2, 6, 8, 5, 2);  // GQA, bottom-right causal, a window, key padding
  all_mods(c);
  c.causal = true, c.bottom_right = true, c.wl = 3, c.kpad = true, c.rel_R = 2;
  cs.push_back(c);
  c = mod_case(2, 4, 2, 7, 4, 3, 4);  // L_q > L_k bottom-right: rows that see only the sink
  all_mods(c);
  c.causal = true, c.bottom_right = true, c.rel_R = 1;
  cs.push_back(c);
  c = mod_case(2, 2, 1, 5, 6, 3, 4);  // with a float mask (after the biases), dropout, BLHD
  c.softcap = 3.0, c.alibi = Alibi::Shared, c.rel = Rel::Shared, c.rel_R = 2, c.sinks = true;
  c.mask = Mask::Float, c.bcast = Bcast::Full, c.masked_row = true, c.dropout = 0.3;
  c.layout = Layout::BLHD;
  cs.push_back(c);
  return cs;
}

class SdpaModsFiniteDifferences : public ::testing::TestWithParam<Case> {};

TEST_P(SdpaModsFiniteDifferences, Gradients) { expect_matches_finite_differences(GetParam()); }

INSTANTIATE_TEST_SUITE_P(Table, SdpaModsFiniteDifferences, ::testing::ValuesIn(mod_fd_cases()),
                         case_name);

// The fused kernel against the reference, on every instruction set.
std::vector<Case> mod_fused_cases() {
  std::vector<Case> cs;
  // One row tile (1, 3, 5, 40 rows) and two full ones and a partial one (130); key lengths that
  // are not multiples of the 64-key tile; D and D_v not multiples of 8; GQA and B = 2.
  const std::pair<int64_t, int64_t> lens[] = {{1, 77}, {3, 150}, {5, 70}, {40, 100}, {130, 150}};
  for (auto [L_q, L_k] : lens)
    for (ModFn mod : kMods) {
      Case base = mod_case(2, 4, 2, L_q, L_k, 13, 7);
      mod(base);
      cs.push_back(base);
      Case c = base;
      c.causal = true;
      cs.push_back(c);
      c.bottom_right = true;
      cs.push_back(c);
      c = base;
      c.wl = 20, c.wr = 5;
      cs.push_back(c);
      c = base;
      c.B = 3, c.kpad = true;  // batch 1: every key padded
      cs.push_back(c);
    }
  // The shared variants of every modifier together.
  for (int64_t L_q : {1, 5, 130}) {
    Case c = mod_case(2, 4, 2, L_q, 90, 13, 7);
    c.softcap = 3.0, c.alibi = Alibi::Shared, c.rel = Rel::Shared, c.rel_R = 2, c.sinks = true;
    cs.push_back(c);
  }
  // Multi-head and multi-query attention, head dims that are multiples of 8 (no padded copies).
  {
    Case c = mod_case(1, 3, 3, 40, 100, 16, 24);
    all_mods(c);
    cs.push_back(c);
    c = mod_case(1, 6, 1, 70, 130, 13, 7);
    all_mods(c);
    c.causal = true;
    cs.push_back(c);
  }
  // Bottom-right alignment with L_q > L_k: the first rows see only the sink.
  {
    Case c = mod_case(2, 4, 2, 40, 30, 13, 7);
    all_mods(c);
    c.causal = true, c.bottom_right = true;
    cs.push_back(c);
  }
  // A window with bottom-right alignment over several key blocks (skipped tiles).
  {
    Case c = mod_case(1, 4, 2, 130, 300, 32, 32);
    all_mods(c);
    c.causal = true, c.bottom_right = true, c.wl = 70;
    cs.push_back(c);
  }
  // With masks (after the biases), dropout and strided layouts.
  for (int64_t L_q : {3, 40}) {
    for (Mask m : {Mask::Bool, Mask::Float}) {
      Case c = mod_case(2, 4, 2, L_q, 77, 13, 7);
      all_mods(c);
      c.mask = m, c.bcast = Bcast::Full, c.masked_row = true;
      cs.push_back(c);
    }
    Case c = mod_case(2, 4, 2, L_q, 77, 13, 7);
    all_mods(c);
    c.dropout = 0.2, c.layout = Layout::BLHD;
    cs.push_back(c);
    c.layout = Layout::Padded, c.mask = Mask::Float, c.bcast = Bcast::BLk;
    cs.push_back(c);
  }
  // Huge scores that the softcap saturates.
  {
    Case c = mod_case(1, 2, 2, 40, 63, 8, 8);
    c.magnitude = 40, c.softcap = 3.0, c.sinks = true;
    cs.push_back(c);
  }
  return cs;
}

// The same comparison as the table above (its cases' gradients include the modifiers').
INSTANTIATE_TEST_SUITE_P(Mods, SdpaFusedBackwardTable, ::testing::ValuesIn(mod_fused_cases()),
                         case_name);

// ---- 3. fully masked rows: zero gradients, never NaN -------------------------------------------

TEST(SdpaFusedBackward, FullyMaskedRowsGiveZeroGradients) {
  Case c;
  c.B = 2, c.H = 2, c.H_kv = 2, c.L_q = 9, c.L_k = 5, c.D = 16, c.D_v = 16;
  c.causal = true, c.bottom_right = true;  // rows 0..3 see nothing
  c.kpad = true;                           // batch 1 sees nothing at all
  Problem pb(c);
  for (auto isa : {k::Isa::Scalar, k::Isa::Auto}) {
    Grads g = run_fused(pb, isa);
    Grads r = run_reference(pb);
    for (int64_t h = 0; h < c.H; ++h)
      for (int64_t d = 0; d < c.D; ++d) {
        for (int64_t i = 0; i < 4; ++i) {
          EXPECT_EQ(g.dq.at(0, h, i, d), 0.0f);
          EXPECT_EQ(r.dq.at(0, h, i, d), 0.0f);
        }
        for (int64_t i = 0; i < c.L_q; ++i) {
          EXPECT_EQ(g.dq.at(1, h, i, d), 0.0f);
          EXPECT_EQ(r.dq.at(1, h, i, d), 0.0f);
        }
        for (int64_t j = 0; j < c.L_k; ++j) {
          EXPECT_EQ(g.dk.at(1, h, j, d), 0.0f);
          EXPECT_EQ(g.dv.at(1, h, j, d), 0.0f);
        }
      }
    EXPECT_TRUE(compare(g.dq, r.dq).finite && compare(g.dk, r.dk).finite &&
                compare(g.dv, r.dv).finite);
  }
}

// ---- 4. determinism and instruction sets --------------------------------------------------------

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

bool bitwise_equal(const Buf& a, const Buf& b) {
  return a.data.size() == b.data.size() &&
         std::memcmp(a.data.data(), b.data.data(), a.data.size() * sizeof(float)) == 0;
}

TEST(SdpaFusedBackward, OneAndTwoThreadsAreBitwiseIdentical) {
  // Large enough to run in parallel, several dQ chunks per (b, h_kv), partial tiles, dropout.
  std::vector<Case> cs;
  {
    Case c;
    c.B = 1, c.H = 2, c.H_kv = 1, c.L_q = 300, c.L_k = 333, c.D = 64, c.D_v = 64;
    c.causal = true, c.dropout = 0.1;
    cs.push_back(c);
    c.B = 3, c.H = 4, c.H_kv = 4, c.D = 40, c.causal = false, c.dropout = 0, c.kpad = true;
    cs.push_back(c);
  }
  for (const Case& c : cs) {
    Problem pb(c);
    auto run = [&](int threads) {
      ThreadCount count(threads);
      return run_fused(pb);
    };
    Grads one = run(1), two = run(2), three = run(3);
    EXPECT_TRUE(bitwise_equal(one.dq, two.dq) && bitwise_equal(one.dk, two.dk) &&
                bitwise_equal(one.dv, two.dv))
        << c.name();
    EXPECT_TRUE(bitwise_equal(one.dq, three.dq) && bitwise_equal(one.dk, three.dk) &&
                bitwise_equal(one.dv, three.dv))
        << c.name();
  }
}

TEST(SdpaFusedBackward, ScalarAndSimdAgree) {
  // Same algorithm, different rounding (FMA contraction, polynomial exp): within 1e-5 of the
  // gradients' scale of each other (each is also checked against the reference in the table).
  for (Case c : {fused_cases()[5], fused_cases()[12], fused_cases().back()}) {
    Problem pb(c);
    Grads scalar = run_fused(pb, k::Isa::Scalar);
    for (auto [isa, name] : kIsas) {
      if (isa == k::Isa::Scalar || !k::isa_supported(isa)) continue;
      Grads simd = run_fused(pb, isa);
      for (auto [a, b] :
           {std::pair{&scalar.dq, &simd.dq}, {&scalar.dk, &simd.dk}, {&scalar.dv, &simd.dv}}) {
        const Err e = compare(*a, *b);
        EXPECT_TRUE(e.finite) << c.name() << " " << name;
        EXPECT_LE(e.max_abs, 1e-5 * std::max(e.max_ref, 1.0)) << c.name() << " " << name;
      }
    }
  }
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}
bool bitwise_equal(const Grads& a, const Grads& b) {
  return bitwise_equal(a.dq, b.dq) && bitwise_equal(a.dk, b.dk) && bitwise_equal(a.dv, b.dv) &&
         bitwise_equal(a.dalibi, b.dalibi) && bitwise_equal(a.drel, b.drel) &&
         bitwise_equal(a.dsinks, b.dsinks);
}

TEST(SdpaFusedBackwardMods, OneTwoAndThreeThreadsAreBitwiseIdentical) {
  // Large enough to run in parallel with several dQ chunks per (b, h_kv), each chunk adding its
  // share of the parameter gradients; slopes and table shared (every unit adds to the same
  // entries) and per batch / per head. The reference too.
  std::vector<Case> cs;
  {
    Case c = mod_case(2, 4, 2, 150, 200, 13, 7);
    all_mods(c);
    c.causal = true, c.bottom_right = true;
    cs.push_back(c);
    c = mod_case(3, 4, 2, 3, 500, 16, 16);
    c.softcap = 3.0, c.alibi = Alibi::Shared, c.rel = Rel::Shared, c.rel_R = 2, c.sinks = true;
    c.kpad = true;
    cs.push_back(c);
    c = mod_case(2, 2, 1, 200, 260, 24, 8);
    all_mods(c);
    c.wl = 40, c.wr = 10, c.dropout = 0.1;
    cs.push_back(c);
  }
  for (const Case& c : cs) {
    SCOPED_TRACE(c.name());
    Problem pb(c);
    for (auto [isa, name] : kIsas) {
      if (!k::isa_supported(isa)) continue;
      std::vector<Grads> runs;
      for (int n : {1, 2, 3}) {
        ThreadCount threads(n);
        runs.push_back(run_fused(pb, isa));
      }
      EXPECT_TRUE(bitwise_equal(runs[0], runs[1])) << name << ": 1 and 2 threads";
      EXPECT_TRUE(bitwise_equal(runs[0], runs[2])) << name << ": 1 and 3 threads";
    }
    std::vector<Grads> runs;
    for (int n : {1, 2, 3}) {
      ThreadCount threads(n);
      runs.push_back(run_reference(pb));
    }
    EXPECT_TRUE(bitwise_equal(runs[0], runs[1])) << "reference: 1 and 2 threads";
    EXPECT_TRUE(bitwise_equal(runs[0], runs[2])) << "reference: 1 and 3 threads";
  }
}

TEST(SdpaFusedBackwardMods, ParameterGradientsAddToTheBuffers) {
  // The kernels add the parameters' gradients to what the buffers hold (the caller zeroes them):
  // with buffers pre-filled with c, the result is c + the gradient from zeroed buffers (to the
  // rounding of the additions). dq, dk and dv are overwritten as always, bitwise the same, and
  // the same again when no parameter gradient is wanted (null pointers).
  std::vector<Case> cs;
  for (int64_t L_q : {3, 130}) {
    Case c = mod_case(2, 4, 2, L_q, 150, 13, 7);
    all_mods(c);
    c.causal = true;
    cs.push_back(c);
    c.softcap = 3.0, c.alibi = Alibi::Shared, c.rel = Rel::Shared, c.rel_R = 2;
    cs.push_back(c);
  }
  auto prefill = [](std::vector<float>& x) {
    for (size_t n = 0; n < x.size(); ++n) x[n] = 0.5f + 0.25f * float(n % 7);
  };
  for (const Case& c : cs) {
    SCOPED_TRACE(c.name());
    Problem pb(c);
    // The reference, then the fused kernel on every instruction set.
    std::vector<std::pair<std::string, std::function<void(Grads&)>>> kernels = {
        {"reference", [&](Grads& g) { k::sdpa_reference_backward(backward_params(pb, g)); }}};
    for (auto [isa, name] : kIsas)
      if (k::isa_supported(isa))
        kernels.push_back({name, [&pb, isa = isa](Grads& g) {
                             k::sdpa_fused_backward(backward_params(pb, g), isa);
                           }});
    for (const auto& [who, run] : kernels) {
      Grads zero(c), filled(c), none(c);
      run(zero);
      prefill(filled.dalibi), prefill(filled.drel), prefill(filled.dsinks);
      run(filled);
      none.dalibi.clear(), none.drel.clear(), none.dsinks.clear();
      run(none);
      EXPECT_TRUE(bitwise_equal(zero.dq, filled.dq) && bitwise_equal(zero.dk, filled.dk) &&
                  bitwise_equal(zero.dv, filled.dv))
          << who;
      EXPECT_TRUE(bitwise_equal(zero.dq, none.dq) && bitwise_equal(zero.dk, none.dk) &&
                  bitwise_equal(zero.dv, none.dv))
          << who << ": dq, dk, dv depend on whether the parameter gradients are wanted";
      const std::vector<float>* pairs[3][2] = {{&zero.dalibi, &filled.dalibi},
                                               {&zero.drel, &filled.drel},
                                               {&zero.dsinks, &filled.dsinks}};
      const char* names[3] = {"dalibi_slopes", "drel_bias", "dsinks"};
      for (int t = 0; t < 3; ++t) {
        std::vector<float> base(pairs[t][0]->size());
        prefill(base);
        ASSERT_FALSE(base.empty());
        for (size_t n = 0; n < base.size(); ++n) {
          const double g = (*pairs[t][0])[n], want = double(base[n]) + g;
          EXPECT_NEAR((*pairs[t][1])[n], want, 1e-5 * (1 + std::abs(base[n]) + std::abs(g)))
              << who << " " << names[t] << "[" << n << "]";
        }
      }
      // Head 1's sink is -inf: it takes no part, and its gradient is exactly zero.
      EXPECT_EQ(zero.dsinks[1], 0.0f) << who;
      EXPECT_EQ(filled.dsinks[1], 0.75f) << who;
    }
  }
}

// ---- 5. the Tensor-level scaled_dot_product_attention_backward ----------------------------------

// A (B, X, L, W) buffer as a contiguous Tensor.
Tensor to_tensor(const Buf& t) {
  std::vector<float> v;
  for (int64_t b = 0; b < t.B; ++b)
    for (int64_t x = 0; x < t.X; ++x)
      for (int64_t l = 0; l < t.L; ++l)
        for (int64_t w = 0; w < t.W; ++w) v.push_back(t.at(b, x, l, w));
  return attn::from_vector(v, {t.B, t.X, t.L, t.W});
}

// Largest |a - b| over two tensors of the same shape.
double max_diff(const Tensor& a, const Tensor& b) {
  EXPECT_EQ(a.shape(), b.shape());
  const std::vector<float> x = a.contiguous().to_float_vector(),
                           y = b.contiguous().to_float_vector();
  double m = 0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i)
    m = std::max(m, double(std::abs(x[i] - y[i])));
  return m;
}

// Inputs, options and the saved forward of a (BHLD, no key padding, no window) case as Tensors.
struct TensorCase {
  Tensor q, k, v, dout;
  SdpaOptions o;
  attn::SdpaForwardResult fwd;
};
TensorCase tensor_case(Problem& pb) {
  const Case& c = pb.c;
  TensorCase t;
  t.q = to_tensor(pb.q), t.k = to_tensor(pb.k), t.v = to_tensor(pb.v), t.dout = to_tensor(pb.dout);
  t.o.is_causal = c.causal;
  t.o.causal_align = c.bottom_right ? CausalAlign::BottomRight : CausalAlign::TopLeft;
  t.o.enable_gqa = c.H != c.H_kv;
  t.o.dropout_p = c.dropout;
  if (c.scale != 0) t.o.scale = c.scale;
  if (c.mask != Mask::None) {
    Shape ms = c.bcast == Bcast::Full   ? Shape{c.B, c.H, c.L_q, c.L_k}
               : c.bcast == Bcast::LqLk ? Shape{c.L_q, c.L_k}
                                        : Shape{c.B, 1, 1, c.L_k};
    if (c.mask == Mask::Bool) {
      std::vector<float> f(pb.mask_b.begin(), pb.mask_b.end());
      t.o.attn_mask = attn::from_vector(f, ms).to(Dtype::Bool);
    } else {
      t.o.attn_mask = attn::from_vector(pb.mask_f, ms);
    }
  }
  t.fwd.out = to_tensor(pb.out);
  t.fwd.lse = attn::from_vector(pb.lse, {c.B, c.H, c.L_q});
  t.fwd.dropout_seed = pb.seed, t.fwd.dropout_offset = pb.offset;
  return t;
}

std::vector<Case> tensor_cases() {
  std::vector<Case> cs;
  Case c;
  c.B = 2, c.H = 4, c.H_kv = 4, c.L_q = 70, c.L_k = 67, c.D = 24, c.D_v = 16;
  cs.push_back(c);
  Case m = c;
  m.mask = Mask::Bool, m.bcast = Bcast::LqLk, m.masked_row = true;
  cs.push_back(m);
  m.mask = Mask::Float, m.bcast = Bcast::BLk, m.masked_row = false;
  cs.push_back(m);
  Case g = c;
  g.H_kv = 2, g.causal = true, g.bottom_right = true, g.dropout = 0.3;  // GQA
  cs.push_back(g);
  Case s = c;
  s.scale = 0.3, s.causal = true;
  cs.push_back(s);
  return cs;
}

class SdpaBackwardTensorTable : public ::testing::TestWithParam<Case> {};

TEST_P(SdpaBackwardTensorTable, MatchesTheKernels) {
  Problem pb(GetParam());
  TensorCase t = tensor_case(pb);
  const Grads ref = run_reference(pb), naive = run_naive_fp32(pb);
  // The reference backend is the reference kernel: identical results.
  t.o.backend = attn::SdpaBackend::Reference;
  auto [dq, dk, dv] =
      attn::scaled_dot_product_attention_backward(t.dout, t.q, t.k, t.v, t.fwd, t.o);
  EXPECT_EQ(max_diff(dq, to_tensor(ref.dq)), 0.0);
  EXPECT_EQ(max_diff(dk, to_tensor(ref.dk)), 0.0);
  EXPECT_EQ(max_diff(dv, to_tensor(ref.dv)), 0.0);
  // The default backend is the fused kernel.
  t.o.backend = attn::SdpaBackend::Auto;
  auto [fq, fk, fv] =
      attn::scaled_dot_product_attention_backward(t.dout, t.q, t.k, t.v, t.fwd, t.o);
  const Grads fused = run_fused(pb);
  EXPECT_EQ(max_diff(fq, to_tensor(fused.dq)), 0.0);
  EXPECT_EQ(max_diff(fk, to_tensor(fused.dk)), 0.0);
  EXPECT_EQ(max_diff(fv, to_tensor(fused.dv)), 0.0);
  expect_close_to_reference(pb, fused, ref, naive, "fused via Tensor API");
}

INSTANTIATE_TEST_SUITE_P(Table, SdpaBackwardTensorTable, ::testing::ValuesIn(tensor_cases()),
                         case_name);

TEST(SdpaBackwardTensor, BroadcastInputsGetSummedGradients) {
  // q (L_q, D) shared by every (b, h): its gradient is the sum over (b, h) of the expanded one.
  Case c;
  c.B = 2, c.H = 3, c.H_kv = 3, c.L_q = 9, c.L_k = 11, c.D = 8, c.D_v = 8;
  Problem pb(c);
  TensorCase t = tensor_case(pb);
  const Tensor q1 = t.q.select(0, 0).select(0, 0);  // (L_q, D)
  const Tensor qx = q1.expand({c.B, c.H, c.L_q, c.D}).contiguous();
  // The forward of the expanded q, recomputed through the Problem.
  for (int64_t b = 0; b < c.B; ++b)
    for (int64_t h = 0; h < c.H; ++h)
      for (int64_t i = 0; i < c.L_q; ++i)
        for (int64_t d = 0; d < c.D; ++d) pb.q.at(b, h, i, d) = pb.q.at(0, 0, i, d);
  pb.forward();
  t = tensor_case(pb);
  for (auto backend : {attn::SdpaBackend::Reference, attn::SdpaBackend::Auto}) {
    t.o.backend = backend;
    auto [dq1, dk1, dv1] =
        attn::scaled_dot_product_attention_backward(t.dout, q1, t.k, t.v, t.fwd, t.o);
    auto [dqx, dkx, dvx] =
        attn::scaled_dot_product_attention_backward(t.dout, qx, t.k, t.v, t.fwd, t.o);
    EXPECT_EQ(dq1.shape(), (Shape{c.L_q, c.D}));
    EXPECT_LT(max_diff(dq1, dqx.sum({0, 1})), 1e-5);
    EXPECT_EQ(max_diff(dk1, dkx), 0.0);
    EXPECT_EQ(max_diff(dv1, dvx), 0.0);
  }
}

TEST(SdpaBackwardTensor, ExtraBatchDimsAndStridedInputs) {
  // (2, B, H, L, D) inputs loop over the leading dim; with dropout the mask index runs over the
  // whole (2, B, H, L_q, L_k), so the result equals that of the (2 B, H, L, D) reshape. dout as a
  // transposed (B, L, H, D) view needs no copy and changes nothing.
  Case c;
  c.B = 4, c.H = 2, c.H_kv = 2, c.L_q = 13, c.L_k = 17, c.D = 8, c.D_v = 8, c.dropout = 0.25;
  c.causal = true;
  Problem pb(c);
  TensorCase t = tensor_case(pb);
  auto five = [&](const Tensor& x) {
    Shape s = x.shape();
    s[0] /= 2;
    s.insert(s.begin(), 2);
    return x.reshape(s);
  };
  attn::SdpaForwardResult f5 = t.fwd;
  f5.out = five(t.fwd.out), f5.lse = five(t.fwd.lse);
  const Tensor dout_strided = t.dout.transpose(1, 2).contiguous().transpose(1, 2);
  ASSERT_FALSE(dout_strided.is_contiguous());
  for (auto backend : {attn::SdpaBackend::Reference, attn::SdpaBackend::Auto}) {
    t.o.backend = backend;
    auto [dq, dk, dv] =
        attn::scaled_dot_product_attention_backward(t.dout, t.q, t.k, t.v, t.fwd, t.o);
    auto [q5, k5, v5] = attn::scaled_dot_product_attention_backward(five(t.dout), five(t.q),
                                                                    five(t.k), five(t.v), f5, t.o);
    EXPECT_EQ(max_diff(q5.reshape(dq.shape()), dq), 0.0);
    EXPECT_EQ(max_diff(k5.reshape(dk.shape()), dk), 0.0);
    EXPECT_EQ(max_diff(v5.reshape(dv.shape()), dv), 0.0);
    auto [sq, sk, sv] =
        attn::scaled_dot_product_attention_backward(dout_strided, t.q, t.k, t.v, t.fwd, t.o);
    EXPECT_EQ(max_diff(sq, dq), 0.0);
    EXPECT_EQ(max_diff(sk, dk), 0.0);
    EXPECT_EQ(max_diff(sv, dv), 0.0);
  }
}

// The error names the function and the offending shapes.
void expect_error(const std::function<void()>& f, const std::string& part) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one mentioning '" << part << "'";
  } catch (const attn::Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("scaled_dot_product_attention_backward"), std::string::npos) << what;
    EXPECT_NE(what.find(part), std::string::npos) << what;
  }
}

TEST(SdpaBackwardTensor, BadInputs) {
  Case c;
  c.B = 1, c.H = 2, c.H_kv = 2, c.L_q = 5, c.L_k = 6, c.D = 8, c.D_v = 4;
  Problem pb(c);
  TensorCase t = tensor_case(pb);
  auto bwd = [&](const Tensor& dout, const attn::SdpaForwardResult& f, const Tensor& q) {
    return [=, &t] { attn::scaled_dot_product_attention_backward(dout, q, t.k, t.v, f, t.o); };
  };
  expect_error(bwd(Tensor(), t.fwd, t.q), "dout is an undefined tensor");
  expect_error(bwd(attn::zeros({1, 2, 5, 5}), t.fwd, t.q), "dout has shape (1, 2, 5, 5)");
  expect_error(bwd(attn::zeros({1, 2, 5, 4}, Dtype::Int64), t.fwd, t.q), "dout must be float32");
  attn::SdpaForwardResult f = t.fwd;
  f.lse = attn::zeros({1, 2, 6});
  expect_error(bwd(t.dout, f, t.q), "forward.lse has shape (1, 2, 6)");
  f = t.fwd;
  f.out = Tensor();
  expect_error(bwd(t.dout, f, t.q), "forward.out is an undefined tensor");
  expect_error(bwd(t.dout, t.fwd, attn::zeros({1, 2, 5, 7})), "differ in head dim");
}

TEST(SdpaBackwardTensor, AfterTheLibraryForwardWithEveryOption) {
  // scaled_dot_product_attention_forward (fused) then the backward, fused and reference, with a
  // window, a key padding mask, GQA, bottom-right causal masking and dropout (regenerated from
  // the seed the forward reports); the reference kernel recomputes everything in double.
  const int64_t B = 2, H = 4, H_kv = 2, L_q = 70, L_k = 90, D = 24, D_v = 16;
  attn::Generator gen(123);
  auto randn = [&](Shape s) { return attn::randn(s, &gen); };
  const Tensor q = randn({B, H, L_q, D}), k = randn({B, H_kv, L_k, D}),
               v = randn({B, H_kv, L_k, D_v});
  const Tensor dout = randn({B, H, L_q, D_v});
  SdpaOptions o;
  o.enable_gqa = true, o.is_causal = true, o.causal_align = CausalAlign::BottomRight;
  o.window_left = 30, o.dropout_p = 0.2, o.generator = &gen;
  std::vector<float> pad(size_t(B * L_k), 0.0f);
  for (int64_t j = 80; j < L_k; ++j) pad[size_t(L_k + j)] = 1.0f;  // batch 1: last 10 keys
  o.key_padding_mask = attn::from_vector(pad, {B, L_k}).to(Dtype::Bool);
  const attn::SdpaForwardResult f = attn::scaled_dot_product_attention_forward(q, k, v, o);
  o.backend = attn::SdpaBackend::Reference;
  auto [rq, rk, rv] = attn::scaled_dot_product_attention_backward(dout, q, k, v, f, o);
  o.backend = attn::SdpaBackend::Auto;
  auto [fq, fk, fv] = attn::scaled_dot_product_attention_backward(dout, q, k, v, f, o);
  for (auto [got, want] : {std::pair{fq, rq}, {fk, rk}, {fv, rv}}) {
    const std::vector<float> w = want.to_float_vector();
    double scale = 0;
    for (float x : w) scale = std::max(scale, double(std::abs(x)));
    EXPECT_GT(scale, 0.1);
    EXPECT_LT(max_diff(got, want), 1e-5 * scale);
  }
}

TEST(SdpaFusedBackward, MaterialisedDropoutFactorsMatchTheCounter) {
  // dropout_scale (factors given as a (B, H, L_q, L_k) array) and the counter-based mask with the
  // same factors give bitwise the same gradients, in both kernels.
  Case c;
  c.B = 2, c.H = 2, c.H_kv = 1, c.L_q = 40, c.L_k = 75, c.D = 16, c.D_v = 16, c.dropout = 0.3;
  Problem pb(c);
  std::vector<float> factors(size_t(c.B * c.H * c.L_q * c.L_k));
  for (size_t i = 0; i < factors.size(); ++i)
    factors[i] =
        k::dropout_keep(pb.seed, pb.offset, i, c.dropout) ? k::dropout_keep_scale(c.dropout) : 0.0f;
  for (bool fused : {false, true}) {
    Grads a(c), b(c);
    k::SdpaBackwardParams pa = backward_params(pb, a), pm = backward_params(pb, b);
    pm.fwd.dropout_p = 0.0, pm.fwd.dropout_scale = factors.data();
    if (fused) {
      k::sdpa_fused_backward(pa), k::sdpa_fused_backward(pm);
    } else {
      k::sdpa_reference_backward(pa), k::sdpa_reference_backward(pm);
    }
    EXPECT_TRUE(bitwise_equal(a.dq, b.dq) && bitwise_equal(a.dk, b.dk) && bitwise_equal(a.dv, b.dv))
        << (fused ? "fused" : "reference");
  }
}

}  // namespace

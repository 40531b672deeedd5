// The naive reference backward of attention. See sdpa_reference.h for the forward it
// differentiates; like the forward it is deliberately simple and computes in double precision.
//
// In the forward pass this was, for batch b, query head h, query row i (key/value head h_kv):
//
//   s[j]   = scale * q_i . k_j  (+ float mask; -inf where masked)       j in [0, L_k)
//   p[j]   = exp(s[j] - m) / sum_j' exp(s[j'] - m)                       (softmax)
//   z[j]   = dropout factor: 0 or 1 / (1 - p_drop), or 1 without dropout
//   out_i  = sum_j p[j] z[j] v_j
//
// Given dout_i = dL/dout_i, the chain rule gives (the softmax Jacobian is diag(p) - p p^T):
//
//   dv_j  += p[j] z[j] dout_i                          (summed over every row i, and over the
//   dp[j]  = z[j] (dout_i . v_j)                        query heads that share k, v under GQA)
//   D_i    = sum_j p[j] dp[j]  (= dout_i . out_i)
//   ds[j]  = p[j] (dp[j] - D_i)                        (dL/ds[j])
//   dq_i   = scale * sum_j ds[j] k_j
//   dk_j  += scale * ds[j] q_i
//
// A float mask is a constant added to s, so it does not change these formulas; a masked key
// (p[j] == 0) contributes nothing, not even through an inf or NaN in its value row. A row whose
// keys are all masked produced a zero output that does not depend on q, k or v: its gradients
// are zero. The reference recomputes the softmax itself from q and k (it ignores fwd.lse and
// fwd.out), so it checks the fused kernel's use of those saved values too.
#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "sdpa_reference.h"
#include "sdpa_score_mods.h"
#include "threads.h"
#include "workspace.h"

namespace attn::kernels {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// Scratch of one (b, h_kv) work unit, all in double.
struct Scratch {
  std::vector<double> s;   // (L_k) scores, then weights p
  std::vector<double> dp;  // (L_k) z[j] * (dout . v_j)
  std::vector<double> z;   // (L_k) dropout factors
  std::vector<double> dq;  // (D) one dq row
  std::vector<double> dk;  // (L_k, D) dk of the unit's key/value head
  std::vector<double> dv;  // (L_k, D_v)
  std::vector<double> t;   // (L_k) tanh(s / softcap) of each score (softcap only)
};

// The dropout factor of weight (b, h, i, j) whose flat index in (B, H, L_q, L_k) is `index`.
double dropout_factor(const SdpaParams& p, uint64_t index) {
  if (p.dropout_scale) return double(p.dropout_scale[index]);
  if (p.dropout_p > 0.0)
    return dropout_keep(p.dropout_seed, p.dropout_offset, index, p.dropout_p)
               ? double(dropout_keep_scale(p.dropout_p))  // the forward's float factor
               : 0.0;
  return 1.0;
}

// The gradient contributions of one query row (b, h, i): writes dq_i, adds to sc.dk and sc.dv.
void row_backward(const SdpaBackwardParams& bp, int64_t b, int64_t h, int64_t i, Scratch& sc,
                  ModGradSums& mg) {
  const SdpaParams& p = bp.fwd;
  const int64_t L_k = p.L_k, D = p.D, D_v = p.D_v;
  const int64_t h_kv = h / (p.H / p.H_kv);
  const int64_t row = (b * p.H + h) * p.L_q + i;  // index of this row in (B, H, L_q)

  const float* q = p.q + b * p.q_batch_stride + h * p.q_head_stride + i * p.q_row_stride;  // (D)
  const float* k = p.k + b * p.k_batch_stride + h_kv * p.k_head_stride;  // (L_k, D)
  const float* v = p.v + b * p.v_batch_stride + h_kv * p.v_head_stride;  // (L_k, D_v)
  const float* dout =
      bp.dout + b * bp.dout_batch_stride + h * bp.dout_head_stride + i * bp.dout_row_stride;
  float* dq = bp.dq + b * bp.dq_batch_stride + h * bp.dq_head_stride + i * bp.dq_row_stride;

  // ---- visible keys: [j_lo, j_hi) from causal masking and the sliding window (SdpaBand) -------
  const SdpaBand band = sdpa_band(p);
  const int64_t off = band.diagonal_offset;
  int64_t j_lo = 0, j_hi = L_k;
  if (band.window_right >= 0) j_hi = std::min(j_hi, i + off + band.window_right + 1);
  if (band.window_left >= 0) j_lo = std::max(j_lo, i + off - band.window_left);
  j_hi = std::max(j_hi, j_lo);

  // ---- s[j] = scale * q . k_j (+ mask), -inf where masked -------------------------------------
  double* s = sc.s.data();
  std::fill(s, s + L_k, kNegInf);
  const uint8_t* pad = p.key_padding ? p.key_padding + b * p.key_padding_batch_stride : nullptr;
  const int64_t mbase = b * p.mask_batch_stride + h * p.mask_head_stride + i * p.mask_row_stride;
  for (int64_t j = j_lo; j < j_hi; ++j) {
    if (pad && pad[j]) continue;
    if (p.mask_kind == MaskKind::Bool &&
        !static_cast<const uint8_t*>(p.mask)[mbase + j * p.mask_col_stride])
      continue;
    const float* kj = k + j * p.k_row_stride;
    double dot = 0;
    for (int64_t d = 0; d < D; ++d) dot += double(q[d]) * double(kj[d]);
    s[j] = modified_score(p, b, h, i, j, dot * p.scale, &sc.t[j]);
    if (p.mask_kind == MaskKind::Float)
      s[j] += double(static_cast<const float*>(p.mask)[mbase + j * p.mask_col_stride]);
  }

  // ---- softmax, exactly as the forward ---------------------------------------------------------
  const double sink = p.sinks ? double(p.sinks[h]) : kNegInf;
  double m = sink;
  for (int64_t j = j_lo; j < j_hi; ++j)
    if (s[j] > m || std::isnan(s[j])) m = s[j];
  if (m == kNegInf) {  // every key masked: the output was a constant zero row
    std::fill(dq, dq + D, 0.0f);
    return;
  }
  double sum = p.sinks ? std::exp(sink - m) : 0.0;
  for (int64_t j = j_lo; j < j_hi; ++j) sum += (s[j] = std::exp(s[j] - m));
  for (int64_t j = j_lo; j < j_hi; ++j) s[j] /= sum;  // s is now p

  // ---- dp[j] = z[j] (dout . v_j), D_i = sum_j p[j] dp[j] ----------------------------------------
  double* dp = sc.dp.data();
  double* z = sc.z.data();
  double D_i = 0;
  for (int64_t j = j_lo; j < j_hi; ++j) {
    if (s[j] == 0.0) continue;  // masked (or underflowed) keys contribute nothing
    z[j] = dropout_factor(p, uint64_t(row * L_k + j));
    const float* vj = v + j * p.v_row_stride;
    double dot = 0;
    for (int64_t e = 0; e < D_v; ++e) dot += double(dout[e]) * double(vj[e]);
    dp[j] = z[j] == 0.0 ? 0.0 : z[j] * dot;  // a dropped key takes no part, even with inf in v_j
    D_i += s[j] * dp[j];
  }

  // ---- ds, then dq_i, dk_j and dv_j
  // ----------------------------------------------------------------
  // The sink's weight p_sink = exp(sink - m) / sum; d loss / d sink = -p_sink * D_i.
  const int64_t g = h % (p.H / p.H_kv);
  if (!mg.dsinks.empty()) mg.dsinks[g] -= std::exp(sink - m) / sum * D_i;
  std::fill(sc.dq.begin(), sc.dq.end(), 0.0);
  for (int64_t j = j_lo; j < j_hi; ++j) {
    if (s[j] == 0.0) continue;
    // ds_mod is d loss / d (the modified score), the gradient of every additive bias; the chain
    // through the softcap and the scale gives that of q . k.
    const double ds_mod = s[j] * (dp[j] - D_i);
    if (!mg.dalibi.empty()) mg.dalibi[g] -= ds_mod * double(std::abs(i + off - j));
    if (!mg.drel.empty())
      mg.rel_row(g)[rel_bias_column(j - i - off, p.rel_bias_max_distance)] += ds_mod;
    const double ds = ds_mod * (p.softcap > 0.0 ? 1.0 - sc.t[j] * sc.t[j] : 1.0) * p.scale;
    const float* kj = k + j * p.k_row_stride;
    double* dkj = sc.dk.data() + j * D;
    for (int64_t d = 0; d < D; ++d) {
      sc.dq[d] += ds * double(kj[d]);
      dkj[d] += ds * double(q[d]);
    }
    const double w = s[j] * z[j];
    if (w == 0.0) continue;  // dropped
    double* dvj = sc.dv.data() + j * D_v;
    for (int64_t e = 0; e < D_v; ++e) dvj[e] += w * double(dout[e]);
  }
  for (int64_t d = 0; d < D; ++d) dq[d] = float(sc.dq[d]);
}

}  // namespace

void sdpa_reference_backward(const SdpaBackwardParams& bp) {
  const SdpaParams& p = bp.fwd;
  assert(p.B >= 0 && p.H >= 1 && p.H_kv >= 1 && p.H % p.H_kv == 0);
  assert(p.L_q >= 0 && p.L_k >= 0 && p.D >= 0 && p.D_v >= 0);
  assert(p.mask_kind == MaskKind::None || p.mask != nullptr);
  assert(bp.dout && bp.dq && bp.dk && bp.dv);
  const int64_t G = p.H / p.H_kv;  // query heads per key/value head
  const int64_t units = p.B * p.H_kv;
  // One unit is (b, h_kv): it owns dk and dv of that head and the dq rows of its G query heads,
  // so no two threads write the same element and the sums run in a fixed order.
  const bool parallel = units > 1 && units * G * p.L_q * (p.L_k + 1) * (p.D + p.D_v + 1) > 32768;
  // Parameter gradients of the score modifiers, per unit (summed in unit order below).
  std::vector<ModGradSums> mod_grads(static_cast<size_t>(units), ModGradSums(p, bp, G));
  ThreadScratch scratch(
      (4.0 * double(p.L_k) + double(p.D) + double(p.L_k) * double(p.D + p.D_v)) * sizeof(double),
      "the reference attention backward's per-thread scratch");
#pragma omp parallel if (parallel) num_threads(num_threads())
  {
    Scratch sc;
    scratch.allocate([&] {
      sc.s.resize(size_t(p.L_k));
      sc.dp.resize(size_t(p.L_k));
      sc.z.resize(size_t(p.L_k));
      sc.dq.resize(size_t(p.D));
      sc.dk.resize(size_t(p.L_k * p.D));
      sc.dv.resize(size_t(p.L_k * p.D_v));
      sc.t.resize(size_t(p.L_k));
    });
#pragma omp for schedule(dynamic, 1)
    for (int64_t u = 0; u < units; ++u) {
      if (scratch.failed()) continue;  // reported after the region
      const int64_t b = u / p.H_kv, h_kv = u % p.H_kv;
      std::fill(sc.dk.begin(), sc.dk.end(), 0.0);
      std::fill(sc.dv.begin(), sc.dv.end(), 0.0);
      ModGradSums& mg = mod_grads[size_t(u)];
      for (int64_t g = 0; g < G; ++g)
        for (int64_t i = 0; i < p.L_q; ++i) row_backward(bp, b, h_kv * G + g, i, sc, mg);
      float* dk = bp.dk + b * bp.dk_batch_stride + h_kv * bp.dk_head_stride;
      float* dv = bp.dv + b * bp.dv_batch_stride + h_kv * bp.dv_head_stride;
      for (int64_t j = 0; j < p.L_k; ++j) {
        for (int64_t d = 0; d < p.D; ++d) dk[j * bp.dk_row_stride + d] = float(sc.dk[j * p.D + d]);
        for (int64_t e = 0; e < p.D_v; ++e)
          dv[j * bp.dv_row_stride + e] = float(sc.dv[j * p.D_v + e]);
      }
    }
  }
  scratch.check();
  for (int64_t u = 0; u < units; ++u) mod_grads[size_t(u)].add_to(p, bp, u / p.H_kv, u % p.H_kv);
}

}  // namespace attn::kernels

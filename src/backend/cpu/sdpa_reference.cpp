// The naive reference attention kernel. See sdpa_reference.h for the definition it implements.
#include "sdpa_reference.h"

#include <algorithm>
#include <cassert>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "threads.h"
#include "workspace.h"

namespace attn::kernels {

namespace {

constexpr double kNegInf = -std::numeric_limits<double>::infinity();

// One query row (b, h, i): scores, softmax, optional dropout, weighted sum of values.
//   s    scratch of L_k doubles (the score row, then the weights)
//   acc  scratch of D_v doubles (the output row)
void attend_row(const SdpaParams& p, int64_t b, int64_t h, int64_t i, double* s, double* acc) {
  const int64_t L_k = p.L_k, D = p.D, D_v = p.D_v;
  const int64_t h_kv = h / (p.H / p.H_kv);  // grouped-query attention: H / H_kv heads share k, v
  const int64_t row = (b * p.H + h) * p.L_q + i;  // index of this row in (B, H, L_q)

  const float* q = p.q + b * p.q_batch_stride + h * p.q_head_stride + i * p.q_row_stride;  // (D)
  const float* k = p.k + b * p.k_batch_stride + h_kv * p.k_head_stride;  // (L_k, D)
  const float* v = p.v + b * p.v_batch_stride + h_kv * p.v_head_stride;  // (L_k, D_v)
  float* out = p.out + b * p.out_batch_stride + h * p.out_head_stride + i * p.out_row_stride;
  float* w_out = p.weights ? p.weights + row * L_k : nullptr;                   // (L_k)
  const float* drop = p.dropout_scale ? p.dropout_scale + row * L_k : nullptr;  // (L_k)

  // Keys outside [j_begin, j_end) are hidden by causal masking or the sliding window: row i sees
  // keys [i + off - window_left, i + off + window_right] (SdpaBand, sdpa_params.h).
  const SdpaBand band = sdpa_band(p);
  const int64_t off = band.diagonal_offset, wl = band.window_left, wr = band.window_right;
  const int64_t j_begin = wl >= 0 ? std::clamp<int64_t>(i + off - wl, 0, L_k) : 0;
  const int64_t j_end = wr >= 0 ? std::clamp<int64_t>(i + off + wr + 1, j_begin, L_k) : L_k;

  // ---- s[j] = scale * q . k_j (+ mask) ----------------------------------------------------------
  const double scale = p.scale;
  for (int64_t j = 0; j < j_begin; ++j) s[j] = kNegInf;
  for (int64_t j = j_begin; j < j_end; ++j) {
    const float* kj = k + j * p.k_row_stride;
    double dot = 0;
    for (int64_t d = 0; d < D; ++d) dot += double(q[d]) * double(kj[d]);
    s[j] = dot * scale;
  }
  for (int64_t j = j_end; j < L_k; ++j) s[j] = kNegInf;
  for (int64_t j = j_begin; j < j_end; ++j) s[j] = modified_score(p, b, h, i, j, s[j]);
  if (p.key_padding) {
    const uint8_t* pad = p.key_padding + b * p.key_padding_batch_stride;  // (L_k)
    for (int64_t j = j_begin; j < j_end; ++j)
      if (pad[j]) s[j] = kNegInf;
  }
  if (p.mask_kind != MaskKind::None) {
    const int64_t base = b * p.mask_batch_stride + h * p.mask_head_stride + i * p.mask_row_stride;
    if (p.mask_kind == MaskKind::Bool) {
      const auto* m = static_cast<const uint8_t*>(p.mask) + base;  // (L_k), stride mask_col_stride
      for (int64_t j = j_begin; j < j_end; ++j)
        if (!m[j * p.mask_col_stride]) s[j] = kNegInf;
    } else {
      const auto* m = static_cast<const float*>(p.mask) + base;
      for (int64_t j = j_begin; j < j_end; ++j) s[j] += double(m[j * p.mask_col_stride]);
    }
  }

  // ---- softmax: subtract the row max so every exponent is <= 0 ----------------------------------
  // A NaN score propagates (m becomes NaN and so does every weight), as in PyTorch. A sink is one
  // more score, whose value row is zero.
  const double sink = p.sinks ? double(p.sinks[h]) : kNegInf;
  double m = sink;
  for (int64_t j = 0; j < L_k; ++j)
    if (s[j] > m || std::isnan(s[j])) m = s[j];
  if (m == kNegInf) {
    // Every key masked (or L_k == 0): zero weights, zero output, never NaN.
    for (int64_t e = 0; e < D_v; ++e) out[e] = 0.0f;
    if (w_out) std::fill(w_out, w_out + L_k, 0.0f);
    if (p.lse) p.lse[row] = -std::numeric_limits<float>::infinity();
    return;
  }
  double sum = p.sinks ? std::exp(sink - m) : 0.0;
  for (int64_t j = 0; j < L_k; ++j) {
    s[j] = std::exp(s[j] - m);  // exp(-inf) == 0 for masked keys
    sum += s[j];
  }
  if (p.lse) p.lse[row] = float(m + std::log(sum));

  // ---- weights (rounded to float like a materialised fp32 softmax), dropout, and p @ v ----------
  const double inv_sum = 1.0 / sum;
  const bool counter_dropout = !drop && p.dropout_p > 0.0;
  const float keep_scale = counter_dropout ? dropout_keep_scale(p.dropout_p) : 1.0f;
  for (int64_t j = 0; j < L_k; ++j) {
    float w = float(s[j] * inv_sum);
    if (drop) w *= drop[j];  // torch: dropout(weights) == weights * factor, in float
    if (counter_dropout)
      w = dropout_keep(p.dropout_seed, p.dropout_offset, uint64_t(row * L_k + j), p.dropout_p)
              ? w * keep_scale
              : 0.0f;
    if (w_out) w_out[j] = w;
    s[j] = w;
  }
  // out[e] = sum_j p[j] * v[j, e], accumulated in double over value rows (row-wise, so v is read
  // contiguously); keys with zero weight (masked or dropped) are skipped.
  std::fill(acc, acc + D_v, 0.0);
  for (int64_t j = 0; j < L_k; ++j) {
    if (s[j] == 0.0) continue;
    const float* vj = v + j * p.v_row_stride;
    for (int64_t e = 0; e < D_v; ++e) acc[e] += s[j] * double(vj[e]);
  }
  for (int64_t e = 0; e < D_v; ++e) out[e] = float(acc[e]);
}

}  // namespace

void sdpa_reference_forward(const SdpaParams& p) {
  assert(p.B >= 0 && p.H >= 1 && p.H_kv >= 1 && p.H % p.H_kv == 0);
  assert(p.L_q >= 0 && p.L_k >= 0 && p.D >= 0 && p.D_v >= 0);
  assert(p.mask_kind == MaskKind::None || p.mask != nullptr);
  const int64_t rows = p.B * p.H * p.L_q;
  if (rows == 0) return;
  // Threads only pay off once there is real work; tiny problems (the reference tutorials'
  // sentences of 3 to 8 tokens, docs/tour-cpp.md) stay serial.
  const bool parallel = rows * (p.L_k + 1) * (p.D + p.D_v + 1) > (int64_t(1) << 15);
  const size_t n_scores = size_t(std::max<int64_t>(p.L_k, 1)),
               n_acc = size_t(std::max<int64_t>(p.D_v, 1));
  ThreadScratch scratch(double(n_scores + n_acc) * sizeof(double),
                        "the reference attention kernel's per-thread score and output rows");
#pragma omp parallel if (parallel) num_threads(num_threads())
  {
    std::vector<double> scores;  // one score row
    std::vector<double> acc;     // one output row
    scratch.allocate([&] {
      scores.resize(n_scores);
      acc.resize(n_acc);
    });
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      if (scratch.failed()) continue;  // reported after the region
      const int64_t i = r % p.L_q;
      const int64_t bh = r / p.L_q;
      attend_row(p, bh / p.H, bh % p.H, i, scores.data(), acc.data());
    }
  }
  scratch.check();
}

}  // namespace attn::kernels

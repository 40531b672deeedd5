// What the fused attention kernels (sdpa_fused.cpp, sdpa_fused_backward.cpp) share about the
// score modifiers of sdpa_params.h: the relative-position bias table laid out for tile reads.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "../sdpa_params.h"

namespace attn::kernels {

// Each head's row of the relative-position bias table, extended on both sides with its end
// values, so that the biases of `pad` consecutive keys for one query row are `pad` consecutive
// floats: rel_bias[h, rel_bias_column(t + jj, R)] == at(h, t)[jj] for 0 <= jj < pad and any t.
class RelBiasRows {
 public:
  RelBiasRows() = default;
  RelBiasRows(const SdpaGeometry& p, int64_t pad) {
    if (!p.rel_bias) return;
    R_ = p.rel_bias_max_distance;
    t_min_ = -R_ - pad - 1;
    width_ = 2 * R_ + 2 * pad + 2;  // t in [t_min, R + pad]
    shared_ = p.rel_bias_head_stride == 0;
    const int64_t heads = shared_ ? 1 : p.H;
    rows_.resize(size_t(heads * width_));
    for (int64_t h = 0; h < heads; ++h)
      for (int64_t x = 0; x < width_; ++x)
        rows_[size_t(h * width_ + x)] =
            p.rel_bias[h * p.rel_bias_head_stride + rel_bias_column(t_min_ + x, R_)];
  }
  bool empty() const { return rows_.empty(); }
  // Head h's biases of offsets t, t + 1, ... (t = j - i - off for the first key).
  const float* at(int64_t h, int64_t t) const {
    t = std::clamp<int64_t>(t, t_min_, R_ + 1);  // beyond: the same end values
    return rows_.data() + (shared_ ? 0 : h * width_) + (t - t_min_);
  }

 private:
  std::vector<float> rows_;
  int64_t R_ = 0, t_min_ = 0, width_ = 0;
  bool shared_ = false;
};

// The score modifiers' parameter gradients summed over one work unit of a backward pass (the G
// query heads of one (b, h_kv)), in double: ALiBi's slopes (G), the sinks (G), the table's rows
// (G, 2 R + 1), each empty when its gradient is not wanted. A backward pass keeps one per unit
// and adds them to the outputs unit after unit (add_to): the same bits for any thread count.
struct ModGradSums {
  std::vector<double> dalibi, dsinks, drel;
  int64_t n_rel = 0;

  ModGradSums() = default;
  ModGradSums(const SdpaGeometry& p, const SdpaModGrads& want, int64_t G) {
    if (want.dalibi_slopes && p.alibi_slopes) dalibi.assign(size_t(G), 0.0);
    if (want.dsinks && p.sinks) dsinks.assign(size_t(G), 0.0);
    if (want.drel_bias && p.rel_bias) {
      n_rel = 2 * p.rel_bias_max_distance + 1;
      drel.assign(size_t(G * n_rel), 0.0);
    }
  }
  bool empty() const { return dalibi.empty() && dsinks.empty() && drel.empty(); }
  double* rel_row(int64_t g) { return drel.data() + g * n_rel; }

  // Adds the sums of unit (b, h_kv) to the outputs (in the layouts of p's parameters).
  void add_to(const SdpaGeometry& p, const SdpaModGrads& out, int64_t b, int64_t h_kv) const {
    const int64_t G = p.H / p.H_kv;
    for (int64_t g = 0; g < G; ++g) {
      const int64_t h = h_kv * G + g;
      if (!dalibi.empty()) out.dalibi_slopes[b * p.alibi_batch_stride + h] += float(dalibi[g]);
      if (!dsinks.empty()) out.dsinks[h] += float(dsinks[g]);
      if (!drel.empty())
        for (int64_t c = 0; c < n_rel; ++c)
          out.drel_bias[h * p.rel_bias_head_stride + c] += float(drel[size_t(g * n_rel + c)]);
    }
  }
};

}  // namespace attn::kernels

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

}  // namespace attn::kernels

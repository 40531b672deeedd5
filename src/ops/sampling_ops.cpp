// Sampling the next token of a language model (sampling_ops.h).
#include "sampling_ops.h"

#include <cmath>
#include <mutex>
#include <vector>

#include "../backend/cpu/sampling.h"
#include "../tensor/internal.h"

namespace attn::detail {

Tensor sample_tokens(const Tensor& logits_in, double temperature, int64_t top_k, Generator& gen,
                     const char* fn, int64_t step) {
  if (!logits_in.defined() || logits_in.dtype() != Dtype::Float32 || logits_in.dim() != 2)
    fail(fn, "logits must be float32 (batch, vocab), got ", tensor_desc(logits_in));
  check_cpu(logits_in, fn);
  const Tensor logits = logits_in.contiguous();
  const int64_t B = logits.size(0), V = logits.size(1);
  Tensor next = make_tensor({B, 1}, Dtype::Int64, false);
  int64_t* np = next.data_ptr<int64_t>();
  std::vector<float> probs(static_cast<std::size_t>(V)), scratch;
  for (int64_t b = 0; b < B; ++b) {
    const double total = kernels::temperature_probs(logits.data_ptr<float>() + b * V, V,
                                                    temperature, top_k, probs.data(), scratch);
    if (!(total > 0.0) || !std::isfinite(total))
      fail(fn, "the model produced non-finite logits at step ", step);
    // Inverse-CDF sampling with one 53-bit uniform draw.
    uint64_t draw;
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      draw = gen.random64();
    }
    const double u = double(draw >> 11) * (1.0 / 9007199254740992.0) * total;
    np[b] = kernels::inverse_cdf(probs.data(), V, u);
  }
  return next;
}

}  // namespace attn::detail

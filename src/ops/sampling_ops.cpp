// Sampling the next token of a language model (sampling_ops.h).
#include "sampling_ops.h"

#include <cmath>
#include <mutex>
#include <vector>

#include "../backend/sampling_kernels.h"
#include "../tensor/internal.h"

namespace attn::detail {

Tensor sample_tokens(const Tensor& logits_in, double temperature, int64_t top_k, Generator& gen,
                     const char* fn, int64_t step) {
  if (!logits_in.defined() || logits_in.dim() != 2)
    fail(fn, "logits must be (batch, vocab), got ", tensor_desc(logits_in));
  const auto kernel = backend::pick(fn, logits_in.device(), logits_in.dtype(),
                                    backend::cpu::sample_rows, backend::cuda::sample_rows);
  const Tensor logits = logits_in.contiguous();
  const int64_t B = logits.size(0), V = logits.size(1);
  // One 53-bit uniform draw a row, for inverse-CDF sampling.
  std::vector<double> u(static_cast<std::size_t>(B));
  {
    std::lock_guard<std::mutex> lock(gen.mutex());
    for (double& x : u) x = double(gen.random64() >> 11) * (1.0 / 9007199254740992.0);
  }
  Tensor next = make_tensor(fn, {B, 1}, Dtype::Int64, false, logits.device());
  if (kernel({logits.device_data(), B, V, temperature, top_k, u.data(),
              static_cast<int64_t*>(next.device_data())}) >= 0)
    fail(fn, "the model produced non-finite logits at step ", step);
  return next;
}

}  // namespace attn::detail

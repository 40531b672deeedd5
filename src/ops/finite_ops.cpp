// Counting the infinities and NaNs of a tensor (finite_ops.h).
#include "finite_ops.h"

#include "../backend/reduce_kernels.h"
#include "../tensor/internal.h"

namespace attn::detail {

NonFiniteCount count_nonfinite(const Tensor& t) {
  NonFiniteCount r;
  if (!t.defined() || !is_floating_point(t.dtype())) return r;  // integers and bools are all finite
  const auto kernel = backend::pick("count_nonfinite", t.device(), t.dtype(),
                                    backend::cpu::count_nonfinite, backend::cuda::count_nonfinite);
  const Tensor c = t.contiguous();
  r.numel = c.numel();
  kernel({c.device_data(), r.numel, &r.count, &r.first, &r.value});
  return r;
}

}  // namespace attn::detail

// Counting the infinities and NaNs of a tensor (finite_ops.h).
#include "finite_ops.h"

#include "../backend/cpu/finite.h"
#include "../tensor/internal.h"

namespace attn::detail {

NonFiniteCount count_nonfinite(const Tensor& t) {
  NonFiniteCount r;
  if (!t.defined() || t.dtype() != Dtype::Float32) return r;
  check_cpu(t, "count_nonfinite");
  const Tensor c = t.contiguous();
  r.numel = c.numel();
  const kernels::NonFinite k = kernels::count_nonfinite(c.data_ptr<float>(), r.numel);
  r.count = k.count;
  r.first = k.first;
  r.value = k.value;
  return r;
}

}  // namespace attn::detail

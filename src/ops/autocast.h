// torch.autocast("cpu", dtype) in the ops (attn/autograd.h's autocast_dtype): the operands the
// products convert, and the float32 the losses go back to.
#pragma once

#include <attn/autograd.h>
#include <attn/tensor.h>

namespace attn::detail {

// Under autocast: a float32 CPU tensor converted to the autocast dtype (recorded in the graph, so
// its gradient comes back in float32); any other tensor as it is.
inline Tensor autocast_operand(const Tensor& t) {
  const std::optional<Dtype> d = autocast_dtype();
  return d && t.defined() && t.dtype() == Dtype::Float32 && t.device().is_cpu() ? t.to(*d) : t;
}

// Whether autocast converts any of these operands.
inline bool autocast_applies(std::initializer_list<const Tensor*> ts) {
  if (!autocast_dtype()) return false;
  for (const Tensor* t : ts)
    if (t->defined() && t->dtype() == Dtype::Float32 && t->device().is_cpu()) return true;
  return false;
}

}  // namespace attn::detail

// torch.autocast("cpu", dtype) in the ops (attn/autograd.h's autocast_dtype): the operands the
// products convert, and the float32 the losses go back to.
#pragma once

#include <attn/autograd.h>
#include <attn/tensor.h>

namespace attn::detail {

// Whether autocast converts t: it is on, and t is a float32 CPU tensor.
inline bool autocast_converts(const Tensor& t) {
  return autocast_dtype() && t.defined() && t.dtype() == Dtype::Float32 && t.device().is_cpu();
}

// Under autocast: t converted to the autocast dtype when autocast_converts(t) (recorded in the
// graph, so its gradient comes back in float32); t as it is otherwise.
inline Tensor autocast_operand(const Tensor& t) {
  return autocast_converts(t) ? t.to(*autocast_dtype()) : t;
}

// Whether autocast converts any of these operands.
inline bool autocast_applies(std::initializer_list<const Tensor*> ts) {
  for (const Tensor* t : ts)
    if (autocast_converts(*t)) return true;
  return false;
}

}  // namespace attn::detail

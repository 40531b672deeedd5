// What flex_attention's tracing (flex_trace.cpp) and the op (flex.cpp) share: the trace behind a
// flex::Modifier.
#pragma once

#include <attn/flex.h>

#include <cstdint>
#include <vector>

#include "../backend/flex_program.h"

namespace attn::flex {

// The program being recorded and the tensors it captured (program.tensors[i] describes
// tensors[i]; its pointers are refreshed at every call).
struct Trace {
  kernels::flex::Program program;
  std::vector<Tensor> tensors;
  bool mask = false;
  std::vector<int32_t> leaves;  // score (score traces), b, h, q_idx, kv_idx
};

}  // namespace attn::flex

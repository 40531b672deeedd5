// Every kernel table of src/backend/*_kernels.h, as X(function type, name): for a backend that
// defines them in bulk (ATTN_EVERY_KERNEL_TABLE(ATTN_NO_KERNELS): all empty).
#pragma once

#include "elementwise_kernels.h"
#include "index_kernels.h"
#include "layer_kernels.h"
#include "reduce_kernels.h"

#define ATTN_EVERY_KERNEL_TABLE(X) \
  ATTN_LAYER_KERNELS(X)            \
  ATTN_INDEX_KERNELS(X)            \
  X(BinaryFn, binary)              \
  X(UnaryFn, unary)                \
  X(MaskedAssignFn, masked_assign) \
  X(ClampFn, clamp)                \
  X(ReduceFn, reduce)              \
  X(ExtremeFn, extreme)            \
  X(ScanFn, scan)                  \
  X(SoftmaxFn, softmax)

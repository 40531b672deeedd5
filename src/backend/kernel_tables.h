// Every kernel table of src/backend/*_kernels.h, as X(function type, name): for a backend that
// defines them in bulk (ATTN_NO_KERNELS: empty).
#pragma once

#include "attention_kernels.h"
#include "elementwise_kernels.h"
#include "index_kernels.h"
#include "layer_kernels.h"
#include "linalg_kernels.h"
#include "optim_kernels.h"
#include "reduce_kernels.h"
#include "sampling_kernels.h"

// The tables of which the GPU has no kernel yet (src/backend/cuda/kernel_tables.cpp).
#define ATTN_TABLES_WITHOUT_GPU_KERNELS(X) \
  ATTN_LAYER_KERNELS(X)                    \
  ATTN_INDEX_KERNELS(X)                    \
  ATTN_LINALG_KERNELS(X)                   \
  ATTN_OPTIM_KERNELS(X)                    \
  X(BinaryFn, binary)                      \
  X(UnaryFn, unary)                        \
  X(SelectFn, select)                      \
  X(ComplexMulFn, complex_mul)             \
  X(ClampFn, clamp)                        \
  X(ReduceFn, reduce)                      \
  X(ExtremeFn, extreme)                    \
  X(ScanFn, scan)                          \
  X(SoftmaxFn, softmax)                    \
  X(CopyFn, copy)                          \
  X(CountNonFiniteFn, count_nonfinite)     \
  X(SampleRowsFn, sample_rows)

// All of them (src/backend/no_gpu/kernel_tables.cpp).
#define ATTN_EVERY_KERNEL_TABLE(X) \
  ATTN_ATTENTION_KERNELS(X)        \
  ATTN_TABLES_WITHOUT_GPU_KERNELS(X)

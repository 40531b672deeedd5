// The GPU's tables of the ops that dispatch through them (src/backend/dispatch.h). None of those
// ops has a CUDA kernel yet: every table is empty, so such an op on a GPU tensor raises
// NotImplementedError naming the op, the device and the dtype (backend::pick). A kernel is added
// by defining its table here, with the slot of its dtype filled, in place of the bulk definition
// of empty ones.
#include "../elementwise_kernels.h"
#include "../layer_kernels.h"
#include "../reduce_kernels.h"

namespace attn::backend::cuda {
ATTN_LAYER_KERNELS(ATTN_NO_KERNELS)
ATTN_NO_KERNELS(BinaryFn, binary)
ATTN_NO_KERNELS(UnaryFn, unary)
ATTN_NO_KERNELS(MaskedAssignFn, masked_assign)
ATTN_NO_KERNELS(ReduceFn, reduce)
ATTN_NO_KERNELS(ExtremeFn, extreme)
ATTN_NO_KERNELS(ScanFn, scan)
ATTN_NO_KERNELS(ClampFn, clamp)
ATTN_NO_KERNELS(SoftmaxFn, softmax)
}  // namespace attn::backend::cuda

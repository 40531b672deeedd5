// attn built without the CUDA backend: no tensor is ever on a GPU, and the GPU has none of the
// kernels of the ops that dispatch through tables (src/backend/dispatch.h); backend::pick names
// the op if one is asked for.
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

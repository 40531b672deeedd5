// The GPU's tables of the ops that dispatch through them (src/backend/dispatch.h). None of those
// ops has a CUDA kernel yet: every table is empty, so such an op on a GPU tensor raises
// NotImplementedError naming the op, the device and the dtype (backend::pick). A kernel is added
// by defining its table here, with the slot of its dtype filled, in place of the bulk definition
// of empty ones.
#include "../kernel_tables.h"

namespace attn::backend::cuda {
ATTN_EVERY_KERNEL_TABLE(ATTN_NO_KERNELS)
}  // namespace attn::backend::cuda

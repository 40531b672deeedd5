// attn built without the CUDA backend: no tensor is ever on a GPU, and the GPU has none of the
// kernels of the ops that dispatch through tables (src/backend/dispatch.h); backend::pick names
// the op if one is asked for.
#include "../kernel_tables.h"

namespace attn::backend::cuda {
ATTN_EVERY_KERNEL_TABLE(ATTN_NO_KERNELS)
}  // namespace attn::backend::cuda

// The GPU's tables of the ops that dispatch through them (src/backend/dispatch.h) and have no CUDA
// kernel yet: every one is empty, so such an op on a GPU tensor raises NotImplementedError naming
// the op, the device and the dtype (backend::pick). A kernel is added by defining its table in
// its own file of this folder, with the slot of its dtype filled (as attention.cpp does), and
// moving the table out of ATTN_TABLES_WITHOUT_GPU_KERNELS.
#include "../kernel_tables.h"

namespace attn::backend::cuda {
ATTN_TABLES_WITHOUT_GPU_KERNELS(ATTN_NO_KERNELS)
}  // namespace attn::backend::cuda

// The layers' kernels on the GPU (src/backend/layer_kernels.h). None is written for CUDA yet:
// every table is empty, so an op on a GPU tensor raises NotImplementedError naming the op, the
// device and the dtype (backend::pick). A kernel is added by defining its table here, with the
// slot of its dtype filled, in place of this bulk definition of empty ones.
#include "../layer_kernels.h"

namespace attn::backend::cuda {
ATTN_LAYER_KERNELS(ATTN_NO_KERNELS)
}  // namespace attn::backend::cuda

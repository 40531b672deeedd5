// attn built without the CUDA backend: no tensor is ever on a GPU, and the GPU has none of the
// layers' kernels (src/backend/layer_kernels.h); backend::pick names the op if one is asked for.
#include "../layer_kernels.h"

namespace attn::backend::cuda {
ATTN_LAYER_KERNELS(ATTN_NO_KERNELS)
}  // namespace attn::backend::cuda

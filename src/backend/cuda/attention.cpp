// Attention's GPU table (src/backend/attention_kernels.h), bfloat16 and float16: the fused CUDA
// kernels (sdpa_cuda.h), forward and backward, on the device of the call.
//
// Dropout uses the same counter-based mask as the CPU (src/backend/sdpa_dropout.h) with the seed
// the op draws, so a seed gives the same dropped weights on both devices.
#include <cstddef>
#include <cstdint>

#include "../../common/error.h"
#include "../attention_kernels.h"
#include "../gpu_runtime.h"
#include "sdpa_cuda.h"

namespace attn::kernels {
namespace {

template <ElemType E>
CudaSdpaParams cuda_params(const backend::SdpaForward& a) {
  if (a.weights || a.dropout_scale || a.dropout_factors)
    detail::fail(a.op, "the GPU kernel never forms the attention weights or dropout factors");
  if (a.rel_bias)
    throw NotImplementedError(
        detail::msg(a.op,
                    "the relative bias table runs on the CPU only for now (softcap, ALiBi "
                    "and sinks run on the GPU too)"));
  CudaSdpaParams c;
  static_cast<SdpaGeometry&>(c) = a;
  c.dtype = E;
  c.q = a.q, c.k = a.k, c.v = a.v;
  c.out = a.out;
  c.lse = a.lse;
  return c;
}

// Zeroes the (n0, n1, n2, n3) two-byte elements from p with the strides s0, s1, s2 and 1: one
// memset when they are contiguous, as the op allocates them.
void zero(void* p, int device, int64_t n0, int64_t s0, int64_t n1, int64_t s1, int64_t n2,
          int64_t s2, int64_t n3, const char* op) {
  constexpr int64_t kBytes = 2;
  if (s2 == n3 && s1 == n2 * s2 && (n0 == 1 || s0 == n1 * s1)) {
    cuda_rt::memset_zero(p, device, std::size_t(n0 * n1 * n2 * n3 * kBytes), op);
    return;
  }
  for (int64_t i = 0; i < n0; ++i)
    for (int64_t j = 0; j < n1; ++j)
      for (int64_t r = 0; r < n2; ++r)
        cuda_rt::memset_zero(static_cast<char*>(p) + (i * s0 + j * s1 + r * s2) * kBytes, device,
                             std::size_t(n3 * kBytes), op);
}

template <ElemType E>
void forward(const backend::SdpaForward& a) {
  const CudaSdpaParams c = cuda_params<E>(a);
  cuda_rt::DeviceGuard guard(a.device, a.op);
  sdpa_cuda_forward(c);
}

template <ElemType E>
void backward(const backend::SdpaBackward& a) {
  const backend::SdpaForward& f = a.fwd;
  if (a.dalibi_slopes || a.dsinks)
    throw NotImplementedError(
        detail::msg(f.op,
                    "the gradients of alibi_slopes and sinks are computed on the CPU only for now "
                    "(on the GPU they may be used but not trained)"));
  CudaSdpaBackwardParams bp;
  static_cast<SdpaGradStrides&>(bp) = a;
  bp.fwd = cuda_params<E>(f);
  bp.dout = a.dout;
  bp.dq = a.dq, bp.dk = a.dk, bp.dv = a.dv;
  bp.workspace = static_cast<float*>(a.workspace);
  cuda_rt::DeviceGuard guard(f.device, f.op);
  // Zeroed first, as the kernels have always been given them: whether they write the rows that no
  // query (or key) reaches is not relied on.
  zero(a.dq, f.device, f.B, a.dq_batch_stride, f.H, a.dq_head_stride, f.L_q, a.dq_row_stride, f.D,
       f.op);
  zero(a.dk, f.device, f.B, a.dk_batch_stride, f.H_kv, a.dk_head_stride, f.L_k, a.dk_row_stride,
       f.D, f.op);
  zero(a.dv, f.device, f.B, a.dv_batch_stride, f.H_kv, a.dv_head_stride, f.L_k, a.dv_row_stride,
       f.D_v, f.op);
  sdpa_cuda_backward(bp);
}

template <ElemType E>
std::size_t workspace(const backend::SdpaForward& a) {
  return sdpa_cuda_backward_workspace_bytes(cuda_params<E>(a));
}

}  // namespace
}  // namespace attn::kernels

namespace attn::backend::cuda {
namespace k = kernels;
using E = kernels::ElemType;
// Slots in Dtype order: Float32, Int64, Bool, BFloat16, Float16.
const Kernels<SdpaForwardFn> sdpa_forward = {nullptr, nullptr, nullptr, k::forward<E::BFloat16>,
                                             k::forward<E::Float16>};
const Kernels<SdpaForwardFn> sdpa_weights = {};
const Kernels<SdpaBackwardFn> sdpa_backward = {nullptr, nullptr, nullptr, k::backward<E::BFloat16>,
                                               k::backward<E::Float16>};
const Kernels<SdpaWorkspaceFn> sdpa_backward_workspace = {
    nullptr, nullptr, nullptr, k::workspace<E::BFloat16>, k::workspace<E::Float16>};
const Kernels<SdpaMergeFn> sdpa_merge = {};  // ring attention merges on the CPU only
const Kernels<SdpaPagedFn> sdpa_paged = {};  // the paged cache is on the CPU only, for now
}  // namespace attn::backend::cuda

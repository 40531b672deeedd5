// Attention on NVIDIA GPUs: FlashAttention-2 (Dao, 2023) forward and backward with tensor cores.
//
// A plain C++ header (no CUDA include), so that the rest of attn and the tests can call the
// kernels without nvcc. The kernels compute exactly what cpu/sdpa_reference.h defines (scores,
// causal alignment, sliding window, key padding, bool/additive masks broadcast through strides,
// grouped query heads, D_v != D, counter-based dropout with sdpa_dropout.h's SplitMix64 mask,
// fully masked rows -> zero output and lse = -inf, and the score modifiers softcap, ALiBi and sinks
// but not the relative bias table), on fp16 or bf16 inputs with fp32 accumulation:
//
//   - Forward (sdpa_forward.cu): one thread block per (query block, head, batch); its warps split
//     the query rows (16 each). Key/value tiles stream through shared memory with cp.async double
//     buffering; S = Q K^T and O += P V run on mma.sync.m16n8k16 (fp32 accumulate) with operands
//     from ldmatrix; the online softmax runs in fp32 registers with exp2f (scale folded into
//     log2 e); masks, padding and dropout are applied per element of the score fragment, and tiles
//     that causal masking or the window hide entirely are never loaded. lse = m + log(l) per row
//     (fp32, contiguous (B, H, L_q)).
//   - Backward (sdpa_backward.cu): deterministic, no atomics. (1) D_i = rowsum(dO o O) per row
//     (fp32, in the workspace); (2) one block per (key block, key/value head, batch) loops over
//     the query heads of its GQA group in order and over their query blocks, recomputing
//     P = exp(S - lse) and accumulating dV += (P o Z)^T dO and dK += dS^T Q in registers; (3) one
//     block per (query block, head, batch) loops over key blocks accumulating dQ += dS K. With
//     head dims above 128, step (2) runs twice (dV, then dK) so that one accumulator fits in
//     registers.
//
// Head dims: D and D_v may be anything from 1 to 256 and differ; the kernels are compiled for
// padded head dims 64, 128 and 256 (the larger of D and D_v rounded up), load the padding as
// zeros and never store it.
//
// Memory layout: every tensor is given by its base pointer and its batch, head and row strides in
// elements (the innermost dimension is contiguous by definition, as in SdpaGeometry), so
// (B, H, L, D) and (B, L, H, D) need no copies. Tiles are copied with 16-byte cp.async when the
// base pointers are 16-byte aligned and every batch, head and row stride of q, k, v (and dout,
// out in the backward) is a multiple of 8 elements; otherwise with predicated scalar loads (same
// results, slower). Outputs are stored two elements at a time where aligned, else one by one.
//
// Errors: unsupported parameters and CUDA errors (every launch is checked with cudaGetLastError)
// throw attn::DeviceError with the function name and CUDA's message; nothing aborts. The kernels
// are asynchronous on `stream`: an error that happens while a kernel runs surfaces at the next
// synchronising call.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "../sdpa_params.h"

namespace attn::kernels {

// The element type of q, k, v, out, the additive mask and the gradients.
enum class ElemType { Float16, BFloat16 };

const char* elem_type_name(ElemType t);

// The forward's parameters: the geometry shared with the CPU kernels (SdpaGeometry, sdpa_params.h)
// with untyped element pointers on the GPU. Not available here: materialised weights and
// precomputed dropout factors (use the counter-based dropout). An additive mask is in `dtype`.
struct CudaSdpaParams : SdpaGeometry {
  ElemType dtype = ElemType::BFloat16;
  const void* q = nullptr;  // (B, H,    L_q, D), device pointers
  const void* k = nullptr;  // (B, H_kv, L_k, D)
  const void* v = nullptr;  // (B, H_kv, L_k, D_v)
  void* out = nullptr;      // (B, H, L_q, D_v)
  float* lse = nullptr;     // contiguous (B, H, L_q), fp32; may be null in the forward
  void* stream = nullptr;   // a cudaStream_t; null = the default stream
};

// The backward's parameters: the CPU's SdpaBackwardParams with untyped pointers (dq, dk, dv in
// fwd.dtype), the gradients' strides being SdpaGradStrides (sdpa_params.h).
// fwd.out and fwd.lse (the forward's outputs) must be set. Overwrites dq, dk and dv (with H_kv < H,
// dk and dv sum over the query heads of each group).
struct CudaSdpaBackwardParams : SdpaGradStrides {
  CudaSdpaParams fwd;
  const void* dout = nullptr;
  void* dq = nullptr;
  void* dk = nullptr;
  void* dv = nullptr;

  // Device scratch of at least sdpa_cuda_backward_workspace_bytes(fwd) bytes, 16-byte aligned
  // (D_i = rowsum(dout o out) per row). Null: the call allocates it on `fwd.stream`
  // (cudaMallocAsync) and frees it after the kernels (cudaFreeAsync).
  float* workspace = nullptr;
};

// Whether the kernels can run these parameters; when not, *why (if given) says what is wrong.
// Limits: ElemType Float16 or BFloat16; 1 <= D, D_v <= 256; H % H_kv == 0; B, H <= 65535;
// 0 <= dropout_p < 1; q, k, v, out non-null (mask non-null when mask_kind is set); element
// pointers aligned to their element size (2 bytes), additive-mask pointer likewise. Vector
// (16-byte) loads are used where alignment allows and are never required.
bool sdpa_cuda_supported(const CudaSdpaParams& params, std::string* why = nullptr);

// The forward pass (writes out and, when set, lse). Throws attn::DeviceError when
// sdpa_cuda_supported is false or a CUDA call fails. Asynchronous on params.stream.
void sdpa_cuda_forward(const CudaSdpaParams& params);

// Bytes of device scratch sdpa_cuda_backward needs: B * H * L_q floats (rounded up to 16 bytes).
std::size_t sdpa_cuda_backward_workspace_bytes(const CudaSdpaParams& fwd);

// The backward pass: dq, dk, dv from q, k, v, out, lse and dout (see above). Throws
// attn::DeviceError like the forward (also when dout, dq, dk, dv or fwd.lse is null).
void sdpa_cuda_backward(const CudaSdpaBackwardParams& params);

}  // namespace attn::kernels

// scaled_dot_product_attention on a GPU: the same validation and broadcasting as on the CPU
// (attention_internal.h), then the fused CUDA kernels (src/backend/cuda/sdpa_cuda.h), forward and
// backward. Only compiled with the CUDA backend (ATTN_CUDA); backend/no_gpu/attention_none.cpp
// stands in otherwise.
//
// Dropout draws its seed from the same generator as the CPU and uses the same counter-based mask
// (src/backend/sdpa_dropout.h), so a seed gives the same dropped weights on both devices.
#include <attn/autograd.h>
#include <attn/random.h>

#include <limits>
#include <mutex>

#include "../../ops/attention_internal.h"
#include "../../tensor/internal.h"
#include "../gpu_runtime.h"
#include "sdpa_cuda.h"

namespace attn::sdpa_detail {

using detail::fail;

namespace {

kernels::ElemType elem_type(Dtype d) {
  return d == Dtype::BFloat16 ? kernels::ElemType::BFloat16 : kernels::ElemType::Float16;
}

// The CPU kernel's geometry (strides, sizes, masking, dropout) for the CUDA kernels; the element
// pointers are left for the caller (they are per call).
kernels::CudaSdpaParams cuda_params(const kernels::SdpaGeometry& geometry, Dtype dt) {
  kernels::CudaSdpaParams c;
  static_cast<kernels::SdpaGeometry&>(c) = geometry;
  c.dtype = elem_type(dt);
  return c;
}

// Address of t's element [idx..., 0, 0, 0] on its device.
const void* at(const Tensor& t, const Shape& idx) {
  return static_cast<const char*>(t.device_data()) +
         outer_offset(t, idx) * int64_t(itemsize(t.dtype()));
}
void* at_mut(const Tensor& t, const Shape& idx) { return const_cast<void*>(at(t, idx)); }

// Calls f(c, idx) for every index over the outer batch dims (all of S but its last two).
template <typename F>
void for_each_call(const Shape& S, F&& f) {
  const int64_t r = int64_t(S.size());
  const Shape outer(S.begin(), S.begin() + std::max<int64_t>(r - 2, 0));
  const int64_t n = detail::shape_numel(outer);
  Shape idx(outer.size(), 0);
  for (int64_t c = 0; c < n; ++c) {
    f(c, idx);
    for (int64_t d = int64_t(idx.size()) - 1; d >= 0; --d) {  // next outer index, row-major
      if (++idx[d] < outer[d]) break;
      idx[d] = 0;
    }
  }
}

void check_like(const Tensor& t, const char* name, const Shape& want, Dtype dt, const Device& dev,
                const char* fn) {
  if (!t.defined()) fail(fn, name, " is undefined");
  if (t.device() != dev)
    throw DeviceError(detail::msg(fn, "expected all tensors on the same device, got q on ",
                                  dev.str(), " and ", name, " on ", t.device().str()));
  if (t.dtype() != dt) fail(fn, name, " must be ", dtype_name(dt), ", got ", dtype_name(t.dtype()));
  if (t.shape() != want)
    fail(fn, name, " has shape ", shape_str(t.shape()), " but the forward produced ",
         shape_str(want));
}

}  // namespace

SdpaForwardResult cuda_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                               const SdpaOptions& o, const char* fn) {
  const Prepared p = prepare(q, k, v, o, fn);
  const Device dev = p.q.device();
  const Dtype dt = p.q.dtype();
  SdpaForwardResult r;
  r.out = detail::make_tensor(fn, concat(p.S, {p.L_q, p.D_v}), dt, /*zero=*/false, dev);
  r.lse = detail::make_tensor(fn, concat(p.S, {p.L_q}), Dtype::Float32, /*zero=*/false, dev);
  if (r.out.numel() == 0 && r.lse.numel() == 0) return r;
  if (p.L_k == 0) {  // no keys: every row is fully masked (zeros, lse = -inf), as on the CPU
    r.out.zero_();
    r.lse.fill_(-std::numeric_limits<double>::infinity());
    return r;
  }
  kernels::SdpaParams kp = kernel_params(p, o);
  if (o.dropout_p > 0.0) {
    Generator& gen = o.generator ? *o.generator : default_generator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    r.dropout_seed = gen.random64();
    kp.dropout_p = o.dropout_p, kp.dropout_seed = r.dropout_seed;
  }
  kernels::CudaSdpaParams cp = cuda_params(kp, dt);
  const int64_t per_call_out = kp.B * kp.H * p.L_q * p.D_v, per_call_rows = kp.B * kp.H * p.L_q;
  cuda_rt::DeviceGuard guard(dev.index(), fn);
  for_each_call(p.S, [&](int64_t c, const Shape& idx) {
    cp.q = at(p.q, idx), cp.k = at(p.k, idx), cp.v = at(p.v, idx);
    if (p.mask.defined()) cp.mask = at(p.mask, idx);
    cp.out = static_cast<char*>(r.out.device_data()) + c * per_call_out * int64_t(itemsize(dt));
    cp.lse = static_cast<float*>(r.lse.device_data()) + c * per_call_rows;
    // The counter-based dropout index runs over all of S + (L_q, L_k).
    cp.dropout_offset = r.dropout_offset + uint64_t(c * kp.B * kp.H * p.L_q * p.L_k);
    kernels::sdpa_cuda_forward(cp);
  });
  return r;
}

std::tuple<Tensor, Tensor, Tensor> cuda_backward(const Tensor& dout, const Tensor& q,
                                                 const Tensor& k, const Tensor& v,
                                                 const SdpaForwardResult& forward,
                                                 const SdpaOptions& o, const char* fn) {
  const Prepared p = prepare(q, k, v, o, fn);
  const Device dev = p.q.device();
  const Dtype dt = p.q.dtype();
  const Shape& S = p.S;
  check_like(dout, "dout", concat(S, {p.L_q, p.D_v}), dt, dev, fn);
  check_like(forward.out, "forward.out", concat(S, {p.L_q, p.D_v}), dt, dev, fn);
  check_like(forward.lse, "forward.lse", concat(S, {p.L_q}), Dtype::Float32, dev, fn);
  NoGradGuard no_grad;  // a gradient pass records nothing

  const Shape Sk = leading(p.k);  // S, with H_kv heads under GQA
  // Broadcast inputs would need their gradients summed over the broadcast dims, a reduction the
  // GPU side does not have yet.
  for (auto [in, want, name] : {std::tuple{&q, concat(S, {p.L_q, p.D}), "q"},
                                {&k, concat(Sk, {p.L_k, p.D}), "k"},
                                {&v, concat(Sk, {p.L_k, p.D_v}), "v"}})
    if (in->shape() != want)
      fail(fn, "on a GPU the gradient of a broadcast input is not supported yet: ", name, " ",
           shape_str(in->shape()), " was broadcast to ", shape_str(want));
  Tensor dq = detail::make_tensor(fn, concat(S, {p.L_q, p.D}), dt, /*zero=*/true, dev);
  Tensor dk = detail::make_tensor(fn, concat(Sk, {p.L_k, p.D}), dt, /*zero=*/true, dev);
  Tensor dv = detail::make_tensor(fn, concat(Sk, {p.L_k, p.D_v}), dt, /*zero=*/true, dev);
  if (dq.numel() == 0 && dk.numel() == 0 && dv.numel() == 0) return {dq, dk, dv};
  if (p.L_k == 0 || p.L_q == 0) return {dq, dk, dv};  // nothing attended: zero gradients

  const Tensor g = unit_inner(dout), out = unit_inner(forward.out), lse = forward.lse.contiguous();
  kernels::SdpaParams kp = kernel_params(p, o);
  if (o.dropout_p > 0.0) kp.dropout_p = o.dropout_p, kp.dropout_seed = forward.dropout_seed;
  kernels::CudaSdpaBackwardParams bp;
  backward_strides(p, out, g, dq, dk, dv, kp, bp);
  bp.fwd = cuda_params(kp, dt);
  // One scratch buffer for every call (they run in order on one stream).
  const int64_t ws_floats = int64_t((kernels::sdpa_cuda_backward_workspace_bytes(bp.fwd) + 3) / 4);
  Tensor workspace = detail::make_tensor(fn, {ws_floats}, Dtype::Float32, /*zero=*/false, dev);
  bp.workspace = static_cast<float*>(workspace.device_data());

  const int64_t per_call_rows = kp.B * kp.H * p.L_q;
  cuda_rt::DeviceGuard guard(dev.index(), fn);
  for_each_call(S, [&](int64_t c, const Shape& idx) {
    kernels::CudaSdpaParams& cp = bp.fwd;
    cp.q = at(p.q, idx), cp.k = at(p.k, idx), cp.v = at(p.v, idx);
    if (p.mask.defined()) cp.mask = at(p.mask, idx);
    cp.out = at_mut(out, idx);
    cp.lse = static_cast<float*>(lse.device_data()) + c * per_call_rows;
    cp.dropout_offset = forward.dropout_offset + uint64_t(c * kp.B * kp.H * p.L_q * p.L_k);
    bp.dout = at(g, idx);
    bp.dq = at_mut(dq, idx), bp.dk = at_mut(dk, idx), bp.dv = at_mut(dv, idx);
    kernels::sdpa_cuda_backward(bp);
  });
  return {dq, dk, dv};
}

}  // namespace attn::sdpa_detail

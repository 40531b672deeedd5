// What the attention entry points (attention.cpp, attention_paged.cpp) share with the multi-head
// module's packed projection (nn/multihead.cpp), ring attention (distributed/ring_attention.cpp)
// and the decoder's cached attention (nn/decoder.cpp).
#pragma once

#include <attn/attention.h>

namespace attn::sdpa_detail {

// The paged-pool format of a cache tensor's dtype: float32, bfloat16 or float16 (the caller has
// checked that it is one of these).
inline KVCacheDtype kv_cache_dtype(Dtype dt) {
  return dt == Dtype::BFloat16  ? KVCacheDtype::BFloat16
         : dt == Dtype::Float16 ? KVCacheDtype::Float16
                                : KVCacheDtype::Float32;
}

struct Prepared {
  Tensor q, k, v;      // expanded to the output batch shape (k, v with H_kv heads under GQA)
  Tensor mask;         // expanded to S + (L_q, L_k), or undefined
  Tensor key_padding;  // bool (B, L_k) or (1, L_k), contiguous; B = S[-2]; or undefined
  // The score modifiers' tensors, contiguous float32 (or undefined): ALiBi slopes (H) or (B, H),
  // the relative bias table (H, N) or (1, N), the sinks (H); H = S[-1], B = S[-2].
  Tensor alibi_slopes, relative_bias, sinks;
  Shape S;           // output batch shape: out is S + (L_q, D_v)
  Shape drop_batch;  // batch shape of q @ k^T, over which dropout draws (torch's order)
  int64_t L_q, L_k, D, D_v, H_kv_ratio = 1;
  double scale;
};

// The batch dims of t (all but the last two); a shape with dims appended.
Shape leading(const Tensor& t);
Shape concat(Shape a, std::initializer_list<int64_t> tail);
// t itself when its head dim has unit stride (what the kernels need), else a contiguous copy.
Tensor unit_inner(const Tensor& t);

// t's batch, head and row strides for the kernels: its dims r - 2 and r - 1 (the last two of the
// batch shape, stride 0 where it has fewer) and r, r being the batch shape's rank.
void kernel_strides(const Tensor& t, int64_t r, int64_t& batch, int64_t& head, int64_t& row);

// Validates q, k, v and the options for `fn` (attn::Error naming it and the shapes) and
// broadcasts them: q, k and v of one dtype, masks bool or that dtype, every tensor on q's device
// (attn::DeviceError otherwise). Whether the device has a kernel for the dtype is the caller's
// question (backend::pick).
Prepared prepare(const Tensor& q, const Tensor& k, const Tensor& v, const SdpaOptions& o,
                 const char* fn);

// Causal or masked self-attention whose q, k and v are the (B, L, 3 E) output of one packed
// projection (MultiheadAttention's in_proj): scaled_dot_product_attention of its three (B, H, L,
// E / H) views, recorded as one graph node of the projection, whose backward writes dq, dk and dv
// straight into one (B, L, 3 E) gradient (no per-view scatter into zeros and sum). CPU only; the
// attn_mask, if any, must not require grad.
Tensor packed_self_attention(const Tensor& qkv, int64_t H, const SdpaOptions& options);

// scaled_dot_product_attention_gradients, with the score modifiers' gradients only when `mods`
// (scaled_dot_product_attention_backward and the autograd node of tensors that need none of them
// pass false: a backend without those gradients can still run the backward).
SdpaGradients gradients(const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
                        const SdpaForwardResult& forward, const SdpaOptions& o, bool mods);

// Ring attention's merge (kernels::merge_attention_rows): a partial result out_p (B, H, n, D_v)
// and lse_p (B, H, n), contiguous, for the query rows [start, start + n) into the accumulators
// out (B, H, L, D_v) and lse (B, H, L), contiguous float32 on the CPU (else an error naming fn).
void merge_partial(Tensor& out, Tensor& lse, const Tensor& out_p, const Tensor& lse_p,
                   int64_t start, const char* fn);

}  // namespace attn::sdpa_detail

// scaled_dot_product_attention: validation at the boundary, then the kernel of the inputs' device
// and dtype (src/backend/attention_kernels.h): the fused one, or the reference one when weights
// are requested or SdpaBackend::Reference is chosen.
#include <attn/attention.h>
#include <attn/autograd.h>
#include <attn/ops.h>

#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <sstream>
#include <utility>

#include "../backend/attention_kernels.h"
#include "../backend/reduce_kernels.h"
#include "../backend/sdpa_dropout.h"
#include "../tensor/internal.h"
#include "attention_internal.h"
#include "autocast.h"

namespace attn {

using detail::fail;

namespace {

// "float32" of "torch.float32".
std::string short_dtype_name(Dtype dt) { return dtype_name(dt).substr(6); }

// Broadcast of batch shapes, or an error naming the three inputs.
Shape broadcast3(const Shape& a, const Shape& b, const Shape& c, const Tensor& q, const Tensor& k,
                 const Tensor& v, const char* fn) {
  try {
    return broadcast_shapes(broadcast_shapes(a, b, fn), c, fn);
  } catch (const Error&) {
    fail(fn, "batch dims of q ", shape_str(q.shape()), ", k ", shape_str(k.shape()), " and v ",
         shape_str(v.shape()), " do not broadcast");
  }
}

// Whether every element of t is finite (no inf, no NaN).
bool all_finite(const Tensor& t) { return t.isfinite().all(); }

}  // namespace

namespace sdpa_detail {

void kernel_strides(const Tensor& t, int64_t r, int64_t& batch, int64_t& head, int64_t& row) {
  batch = r >= 2 ? t.stride(r - 2) : 0;
  head = r >= 1 ? t.stride(r - 1) : 0;
  row = t.stride(r);
}

Shape leading(const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 2); }

Shape concat(Shape a, std::initializer_list<int64_t> tail) {
  a.insert(a.end(), tail);
  return a;
}

// The kernel wants unit stride along the head dim; anything else is copied once.
Tensor unit_inner(const Tensor& t) {
  return t.size(-1) <= 1 || t.stride(-1) == 1 ? t : t.contiguous();
}

// q, k, v of one dtype on one device, the masks there too; attn_mask bool or q's dtype.
void check_inputs(const Tensor& q, const Tensor& k, const Tensor& v, const SdpaOptions& o,
                  const char* fn) {
  for (auto [t, name] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}})
    if (!t->defined()) fail(fn, name, " is undefined");
  const Device dev = q.device();
  for (auto [t, name] : {std::pair{&k, "k"},
                         {&v, "v"},
                         {&o.attn_mask, "attn_mask"},
                         {&o.key_padding_mask, "key_padding_mask"},
                         {&o.alibi_slopes, "alibi_slopes"},
                         {&o.relative_bias, "relative_bias"},
                         {&o.sinks, "sinks"}})
    if (t->defined() && t->device() != dev)
      throw DeviceError(detail::msg(fn, "expected all tensors on the same device, got q on ",
                                    dev.str(), " and ", name, " on ", t->device().str()));
  const Dtype dt = q.dtype();
  for (auto [t, name] : {std::pair{&k, "k"}, {&v, "v"}})
    if (t->dtype() != dt)
      fail(fn, "q, k and v must have one dtype, got q ", dtype_name(dt), " and ", name, " ",
           dtype_name(t->dtype()));
  if (o.attn_mask.defined() && o.attn_mask.dtype() != Dtype::Bool && o.attn_mask.dtype() != dt)
    fail(fn, "attn_mask must be bool or ", short_dtype_name(dt), " (q's dtype), got ",
         dtype_name(o.attn_mask.dtype()));
}

// The score modifiers' options, checked against the batch shape S (H = S[-1], B = S[-2]) and
// kept contiguous in p.
void prepare_score_mods(const SdpaOptions& o, const Tensor& q, Prepared& p, const char* fn) {
  if (!(std::isfinite(o.softcap) && o.softcap >= 0.0))
    fail(fn, "softcap must be finite and >= 0 (0: none), got ", o.softcap);
  const int64_t r = int64_t(p.S.size());
  const int64_t H = r >= 1 ? p.S[r - 1] : 1, B = r >= 2 ? p.S[r - 2] : 1;
  auto check = [&](const Tensor& t, const char* name, bool ok, const std::string& want) {
    if (t.dtype() != Dtype::Float32)
      fail(fn, name, " must be float32, got ", dtype_name(t.dtype()), " ", shape_str(t.shape()));
    if (!ok)
      fail(fn, name, " ", shape_str(t.shape()), " should be ", want, " for q ",
           shape_str(q.shape()), " (", H, " heads, batch ", B, ")");
    return t.contiguous();
  };
  // (GCC 12 warns falsely about std::string operator+ here: the texts are streamed.)
  auto text = [](const auto&... parts) {
    std::ostringstream s;
    (s << ... << parts);
    return s.str();
  };
  if (const Tensor& a = o.alibi_slopes; a.defined())
    p.alibi_slopes =
        check(a, "alibi_slopes",
              (a.dim() == 1 && a.size(0) == H) ||
                  (a.dim() == 2 && (a.size(0) == B || a.size(0) == 1) && a.size(1) == H),
              text("(", H, ") or (", B, ", ", H, ")"));
  if (const Tensor& t = o.relative_bias; t.defined()) {
    const bool ok = t.dim() == 2 && (t.size(0) == H || t.size(0) == 1) && t.size(1) % 2 == 1;
    p.relative_bias =
        check(t, "relative_bias", ok,
              text("(", H, ", 2 R + 1) or (1, 2 R + 1): one entry per clipped offset -R .. R"));
  }
  if (const Tensor& t = o.sinks; t.defined())
    p.sinks = check(t, "sinks", t.dim() == 1 && t.size(0) == H, text("(", H, ")"));
}

Prepared prepare(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const SdpaOptions& o,
                 const char* fn) {
  check_inputs(q_in, k_in, v_in, o, fn);
  for (auto [t, name] : {std::pair{&q_in, "q"}, {&k_in, "k"}, {&v_in, "v"}}) {
    if (t->dim() < 2)
      fail(fn, name, " ", shape_str(t->shape()), " must have at least 2 dims (..., L, D), got ",
           t->dim());
  }
  const Tensor &q = q_in, &k = k_in, &v = v_in;
  Prepared p;
  p.L_q = q.size(-2);
  p.L_k = k.size(-2);
  p.D = q.size(-1);
  p.D_v = v.size(-1);
  if (k.size(-1) != p.D)
    fail(fn, "q ", shape_str(q.shape()), " and k ", shape_str(k.shape()), " differ in head dim");
  if (v.size(-2) != p.L_k)
    fail(fn, "k ", shape_str(k.shape()), " and v ", shape_str(v.shape()),
         " differ in sequence length");
  if (!(o.dropout_p >= 0.0 && o.dropout_p < 1.0))
    fail(fn, "dropout_p must be in [0, 1), got ", o.dropout_p);
  if (o.is_causal && o.attn_mask.defined())
    fail(fn, "is_causal may not be combined with an explicit attn_mask ",
         shape_str(o.attn_mask.shape()));
  if (o.scale) {
    if (!(std::isfinite(*o.scale) && *o.scale > 0))
      fail(fn, "scale must be finite and positive, got ", *o.scale);
    p.scale = *o.scale;
  } else {
    if (p.D == 0)
      fail(fn, "q ", shape_str(q.shape()),
           " has head dim 0: the default scale 1/sqrt(D) is undefined");
    p.scale = 1.0 / std::sqrt(double(p.D));
  }

  Shape qb = leading(q), kb = leading(k), vb = leading(v);
  Shape S, Sk;  // batch shapes of q/out and of k/v
  if (o.enable_gqa) {
    if (q.dim() < 3 || k.dim() < 3 || v.dim() < 3)
      fail(fn, "enable_gqa needs a head dim: q ", shape_str(q.shape()), ", k ",
           shape_str(k.shape()), " and v ", shape_str(v.shape()), " must have at least 3 dims");
    const int64_t H = qb.back(), H_kv = kb.back();
    if (vb.back() != H_kv)
      fail(fn, "k ", shape_str(k.shape()), " and v ", shape_str(v.shape()),
           " differ in the number of key/value heads");
    if (H_kv == 0 || H % H_kv != 0)
      fail(fn, "with enable_gqa the query heads of q ", shape_str(q.shape()),
           " must be a multiple of the key/value heads of k ", shape_str(k.shape()));
    qb.pop_back(), kb.pop_back(), vb.pop_back();
    Shape outer = broadcast3(qb, kb, vb, q, k, v, fn);
    S = outer, Sk = outer;
    S.push_back(H);
    Sk.push_back(H_kv);
    p.H_kv_ratio = H_kv == 0 ? 1 : H / H_kv;
    p.drop_batch = S;
  } else {
    if (!qb.empty() && !kb.empty() && kb.back() > 1 && qb.back() != kb.back() &&
        qb.back() % kb.back() == 0)
      fail(fn, "q ", shape_str(q.shape()), " has ", qb.back(), " heads and k ",
           shape_str(k.shape()), " has ", kb.back(),
           ": set enable_gqa for grouped-query attention");
    S = broadcast3(qb, kb, vb, q, k, v, fn);
    Sk = S;
    p.drop_batch = broadcast_shapes(qb, kb, fn);
  }
  p.S = S;
  p.q = unit_inner(q).expand(concat(S, {p.L_q, p.D}));
  p.k = unit_inner(k).expand(concat(Sk, {p.L_k, p.D}));
  p.v = unit_inner(v).expand(concat(Sk, {p.L_k, p.D_v}));

  if (o.attn_mask.defined()) {
    const Tensor& m = o.attn_mask;
    Shape target = concat(S, {p.L_q, p.L_k});
    bool ok = m.dim() <= int64_t(target.size());
    for (int64_t i = 1; ok && i <= m.dim(); ++i) {
      int64_t md = m.size(-i), td = target[target.size() - i];
      ok = md == td || md == 1;
    }
    if (!ok)
      fail(fn, "attn_mask ", shape_str(m.shape()), " does not broadcast to the attention weights ",
           shape_str(target), " of q ", shape_str(q.shape()), " and k ", shape_str(k.shape()));
    p.mask = m.expand(target);
  }

  for (auto [w, name] : {std::pair{o.window_left, "window_left"}, {o.window_right, "window_right"}})
    if (w < -1)
      fail(fn, name, " must be -1 (unbounded) or >= 0, got ", w, " (q ", shape_str(q.shape()),
           ", k ", shape_str(k.shape()), ")");
  if (o.key_padding_mask.defined()) {
    // (B, L_k) with B the batch dim just before the heads (S[-2]), or (1, L_k) / (L_k) for all.
    const Tensor& kp = o.key_padding_mask;
    const int64_t r = int64_t(S.size());
    const int64_t B = r >= 2 ? S[r - 2] : 1;
    if (kp.dtype() != Dtype::Bool)
      fail(fn, "key_padding_mask must be bool (true = ignore that key), got ",
           dtype_name(kp.dtype()), " ", shape_str(kp.shape()));
    const bool ok = (kp.dim() == 1 && kp.size(0) == p.L_k) ||
                    (kp.dim() == 2 && (kp.size(0) == B || kp.size(0) == 1) && kp.size(1) == p.L_k);
    if (!ok)
      fail(fn, "key_padding_mask ", shape_str(kp.shape()), " should be (", B, ", ", p.L_k,
           ") (batch, L_k) for q ", shape_str(q.shape()), " and k ", shape_str(k.shape()));
    p.key_padding = kp.reshape({kp.dim() == 2 ? kp.size(0) : 1, p.L_k}).contiguous();
  }
  prepare_score_mods(o, q, p, fn);
  return p;
}

}  // namespace sdpa_detail

namespace {

using sdpa_detail::concat;
using sdpa_detail::kernel_strides;
using sdpa_detail::leading;
using sdpa_detail::prepare;
using sdpa_detail::Prepared;
using sdpa_detail::unit_inner;

// Address of t's element [idx..., 0, 0, 0] on its device, for an index over its outer dims.
void* at(const Tensor& t, const Shape& idx) {
  int64_t off = 0;
  for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.stride(int64_t(d));
  return static_cast<char*>(t.device_data()) + off * int64_t(itemsize(t.dtype()));
}

// The kernel call of prepared inputs over the batch shape S: its last two dims become the
// kernel's (B, H); any dims before them are looped over (for_each_call), each call with its own
// pointers (set_pointers). out (and lse) are contiguous S + (L_q, D_v) (S + (L_q)).
backend::SdpaForward forward_call(const Prepared& p, const SdpaOptions& o, const char* fn) {
  const Shape& S = p.S;
  const int64_t r = int64_t(S.size());
  const int64_t B = r >= 2 ? S[r - 2] : 1, H = r >= 1 ? S[r - 1] : 1;
  backend::SdpaForward kp;
  kp.op = fn;
  kp.device = p.q.device().is_cpu() ? 0 : p.q.device().index();
  kernel_strides(p.q, r, kp.q_batch_stride, kp.q_head_stride, kp.q_row_stride);
  kernel_strides(p.k, r, kp.k_batch_stride, kp.k_head_stride, kp.k_row_stride);
  kernel_strides(p.v, r, kp.v_batch_stride, kp.v_head_stride, kp.v_row_stride);
  kp.out_batch_stride = H * p.L_q * p.D_v, kp.out_head_stride = p.L_q * p.D_v;
  kp.out_row_stride = p.D_v;
  kp.B = B, kp.H = H, kp.H_kv = H / p.H_kv_ratio;
  kp.L_q = p.L_q, kp.L_k = p.L_k, kp.D = p.D, kp.D_v = p.D_v;
  kp.scale = p.scale;
  kp.causal = o.is_causal;
  kp.causal_bottom_right = o.causal_align == CausalAlign::BottomRight;
  kp.window_left = o.window_left, kp.window_right = o.window_right;
  kp.reference = o.backend == SdpaBackend::Reference;
  if (p.mask.defined()) {
    kp.mask_kind =
        p.mask.dtype() == Dtype::Bool ? kernels::MaskKind::Bool : kernels::MaskKind::Float;
    kernel_strides(p.mask, r, kp.mask_batch_stride, kp.mask_head_stride, kp.mask_row_stride);
    kp.mask_col_stride = p.mask.stride(r + 1);
  }
  if (p.key_padding.defined()) {
    kp.key_padding = reinterpret_cast<const uint8_t*>(p.key_padding.device_data());
    kp.key_padding_batch_stride = p.key_padding.size(0) == 1 ? 0 : p.L_k;
  }
  kp.softcap = o.softcap;
  if (p.alibi_slopes.defined()) {
    kp.alibi_slopes = static_cast<const float*>(p.alibi_slopes.device_data());
    kp.alibi_batch_stride = p.alibi_slopes.dim() == 2 && p.alibi_slopes.size(0) > 1 ? H : 0;
  }
  if (p.relative_bias.defined()) {
    kp.rel_bias = static_cast<const float*>(p.relative_bias.device_data());
    kp.rel_bias_head_stride = p.relative_bias.size(0) == 1 ? 0 : p.relative_bias.size(1);
    kp.rel_bias_max_distance = (p.relative_bias.size(1) - 1) / 2;
  }
  if (p.sinks.defined()) kp.sinks = static_cast<const float*>(p.sinks.device_data());
  return kp;
}

// Calls f(c, idx) for every index over the outer batch dims of S (all but its last two), c
// counting the calls in row-major order.
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

// The q, k, v, mask and out pointers of call number c (outer index idx), its dropout offset and
// its lse rows (lse is contiguous S + (L_q): call c's start at c times a call's rows). The forward
// and the backward calls both take them from here.
void set_pointers(const Prepared& p, const Shape& idx, int64_t c, uint64_t dropout_offset,
                  const Tensor& out, float* lse, backend::SdpaForward& kp) {
  kp.q = at(p.q, idx), kp.k = at(p.k, idx), kp.v = at(p.v, idx);
  if (p.mask.defined()) kp.mask = at(p.mask, idx);
  // The counter-based dropout index runs over all of S + (L_q, L_k).
  kp.dropout_offset = dropout_offset + uint64_t(c * kp.B * kp.H * p.L_q * p.L_k);
  kp.out = at(out, idx);
  kp.lse = lse ? lse + c * kp.B * kp.H * p.L_q : nullptr;
}

struct RunResult {
  uint64_t dropout_seed = 0, dropout_offset = 0;  // counter-based dropout (0, 0 without)
};

// The kernel for prepared inputs: sdpa_forward, or with `weights` the one that materialises them.
backend::SdpaForwardFn* forward_kernel(const char* fn, const Prepared& p, bool weights) {
  namespace be = backend;
  const Device dev = p.q.device();
  const Dtype dt = p.q.dtype();
  return weights ? be::pick(fn, dev, dt, be::cpu::sdpa_weights, be::cuda::sdpa_weights)
                 : be::pick(fn, dev, dt, be::cpu::sdpa_forward, be::cuda::sdpa_forward);
}

// out (S + (L_q, D_v)) or lse (S + (L_q)) of prepared inputs, on their device. The CPU's float32
// kernels (fused and reference) write every element of out, fully masked rows included, so it is
// not cleared (detail::make_tensor); elsewhere out starts as zeros.
Tensor new_out(const Prepared& p, const char* fn) {
  const bool written_whole = p.q.device().is_cpu() && p.q.dtype() == Dtype::Float32;
  return detail::make_tensor(fn, concat(p.S, {p.L_q, p.D_v}), p.q.dtype(), !written_whole,
                             p.q.device());
}
Tensor new_lse(const Prepared& p, const char* fn) {
  return detail::make_tensor(fn, concat(p.S, {p.L_q}), Dtype::Float32, true, p.q.device());
}

// Runs attention over the batch shape S into out (and lse, when given: S + (L_q)).
//   weights != null: the kernel that also writes the weights (CPU: the reference); dropout
//                    factors drawn with fill_dropout_mask (torch-identical), returned through
//                    drop_out.
//   weights == null: the device's attention kernel; dropout is counter-based, its seed drawn once
//                    from the generator; drop_out (when given and dropout is on) receives the
//                    same mask materialised, for autograd.
RunResult run(backend::SdpaForwardFn* kernel, const Prepared& p, const SdpaOptions& o,
              const char* fn, Tensor& out, Tensor* weights, Tensor* drop_out = nullptr,
              Tensor* lse = nullptr) {
  namespace be = backend;
  const Shape& S = p.S;
  be::SdpaForward kp = forward_call(p, o, fn);
  Generator& gen = o.generator ? *o.generator : default_generator();

  RunResult rr;
  Tensor drop;
  if (o.dropout_p > 0.0 && weights) {
    // Factors over q @ k^T's weights in row-major order, then broadcast to S if v enlarged it.
    Shape ds = concat(p.drop_batch, {p.L_q, p.L_k});
    drop = detail::make_tensor(fn, ds, Dtype::Float32);
    fill_dropout_mask(drop.data_ptr<float>(), drop.numel(), o.dropout_p, gen);
    Shape full = concat(S, {p.L_q, p.L_k});
    if (ds != full) drop = drop.expand(full).contiguous();
  } else if (o.dropout_p > 0.0) {
    {
      std::lock_guard<std::mutex> lock(gen.mutex());
      rr.dropout_seed = gen.random64();
    }
    kp.dropout_p = o.dropout_p, kp.dropout_seed = rr.dropout_seed;
    if (drop_out) drop = detail::make_tensor(fn, concat(S, {p.L_q, p.L_k}), Dtype::Float32, false);
  }
  if (drop_out) *drop_out = drop;
  if (out.numel() == 0 && (!lse || lse->numel() == 0)) return rr;  // nothing to compute
  if (p.L_k == 0) {  // no keys: every row is fully masked (zeros, lse = -inf)
    out.zero_();
    if (lse && p.sinks.defined())  // only the sink: lse = sinks[h]
      lse->copy_(p.sinks.unsqueeze(-1).expand(lse->shape()));
    else if (lse)
      lse->fill_(-std::numeric_limits<double>::infinity());
    return rr;
  }

  const int64_t per_call_w = kp.B * kp.H * p.L_q * p.L_k;
  for_each_call(S, [&](int64_t c, const Shape& idx) {
    set_pointers(p, idx, c, rr.dropout_offset, out,
                 lse ? static_cast<float*>(lse->device_data()) : nullptr, kp);
    if (weights) {
      kp.dropout_scale = drop.defined() ? drop.data_ptr<float>() + c * per_call_w : nullptr;
      kp.weights = weights->data_ptr<float>() + c * per_call_w;
    } else if (drop.defined()) {
      kp.dropout_factors = drop.data_ptr<float>() + c * per_call_w;
    }
    kernel(kp);
  });
  return rr;
}

// The gradient of attention through its materialised weights (the reference path). In the
// forward pass this was, over the broadcast batch shape S (k, v repeated over each group of
// H / H_kv query heads under GQA):
//   s = scale * q k^T + mask,  P = softmax(s) (zero rows where every key is masked),
//   W = P * drop (the dropout factors, saved),  out = W v.
// Given dout and/or dW (the gradient of the returned weights):
//   dW += dout v^T,  dv = W^T dout,  dP = dW * drop,  ds = P * (dP - rowsum(dP * P)),
//   dq = scale * ds k,  dk = scale * ds^T q,  dmask = ds,
// each summed back over the dims its input was broadcast along (and the GQA groups). P is
// recomputed by the reference kernel from the saved q, k, v and mask.
std::vector<Tensor> sdpa_composed_backward(const Node& n, const Tensor& dout, const Tensor& dw,
                                           SdpaOptions o, double scale, int64_t ratio) {
  const Tensor q = n.saved_tensor(0), k = n.saved_tensor(1), v = n.saved_tensor(2);
  const Tensor drop = n.saved_tensor(4);
  o.attn_mask = n.saved_tensor(3);
  o.dropout_p = 0.0;
  o.backend = SdpaBackend::Reference;
  const Tensor P = std::get<1>(scaled_dot_product_attention_with_weights(q, k, v, o));
  const Tensor W = drop.defined() ? P * drop : P;
  // (..., H_kv, L, D) -> (..., H, L, D) with each key/value head repeated for its query heads,
  // and back by summing each group.
  auto repeat = [ratio](const Tensor& t) {
    if (ratio == 1) return t;
    Shape s = t.shape();
    s.insert(s.end() - 2, ratio);
    Shape merged = t.shape();
    merged[merged.size() - 3] *= ratio;
    return t.unsqueeze(-3).expand(s).reshape(merged);
  };
  auto group_sum = [ratio](const Tensor& t) {
    if (ratio == 1) return t;
    Shape s = t.shape();
    s[s.size() - 3] /= ratio;
    s.insert(s.end() - 2, ratio);
    return t.reshape(s).sum({-3});
  };
  const Tensor kk = repeat(k), vv = repeat(v);
  Tensor dW = dw;
  Tensor dq, dk, dv, dmask;
  if (dout.defined()) {
    Tensor from_out = matmul(dout, vv.mT());
    dW = dW.defined() ? dW + from_out : from_out;
    if (n.needs_input_grad(2)) dv = detail::sum_to(group_sum(matmul(W.mT(), dout)), v.shape());
  }
  Tensor dP = drop.defined() ? dW * drop : dW;
  // As in the kernels, a weight of zero (a masked or dropped key) takes no part: where W == 0, dP
  // would be 0 but for 0 * inf = NaN from an inf or NaN in that key's value row (or in dW).
  if (!all_finite(dP)) dP = dP.masked_fill(W == 0.0, 0.0);
  const Tensor ds = P * (dP - (dP * P).sum({-1}, true));
  // ds is exactly 0 or NaN wherever a k (or q) row that is not finite meets a q (or k) row, so
  // zeroing such entries before the products drops the 0 * inf terms and nothing else.
  auto finite_or_zero = [](const Tensor& t) {
    return all_finite(t) ? t : t.masked_fill(~t.isfinite(), 0.0);
  };
  if (n.needs_input_grad(0)) dq = detail::sum_to(matmul(ds, finite_or_zero(kk)) * scale, q.shape());
  if (n.needs_input_grad(1))
    dk = detail::sum_to(group_sum(matmul(ds.mT(), finite_or_zero(q)) * scale), k.shape());
  if (n.needs_input_grad(3)) dmask = detail::sum_to(ds, o.attn_mask.shape());
  return {dq, dk, dv, dmask};
}

// Records the results in the autograd graph under the names PyTorch 2.0's math backend gives them:
// out = matmul(weights, v) and weights = softmax(...), or dropout(softmax(...)) = weights * noise.
// Each result's node differentiates the whole attention (sdpa_composed_backward).
void record(Tensor& out, Tensor* weights, const Tensor& q, const Tensor& k, const Tensor& v,
            const SdpaOptions& o, const Prepared& p, const Tensor& drop) {
  const std::vector<const Tensor*> inputs{&q, &k, &v, &o.attn_mask};
  if (!detail::should_record(inputs)) return;
  SdpaOptions opts = o;
  opts.attn_mask = Tensor();  // saved (with its version) instead
  opts.generator = nullptr;
  const double scale = p.scale;
  const int64_t ratio = p.H_kv_ratio;
  const std::vector<Tensor> saved{q, k, v, o.attn_mask, drop};
  out = detail::record(
      out, out.dim() == 2 ? "MmBackward0" : "UnsafeViewBackward0", inputs,
      [opts, scale, ratio](const Node& n, const Tensor& g) {
        return sdpa_composed_backward(n, g, Tensor(), opts, scale, ratio);
      },
      saved);
  if (weights)
    *weights = detail::record(
        *weights, o.dropout_p > 0.0 ? "MulBackward0" : "SoftmaxBackward0", inputs,
        [opts, scale, ratio](const Node& n, const Tensor& g) {
          return sdpa_composed_backward(n, Tensor(), g, opts, scale, ratio);
        },
        saved);
}

// The composed backward (through materialised weights) knows nothing of the score modifiers:
// refused where it would be recorded with them.
void refuse_composed_mods(const SdpaOptions& o, const char* fn) {
  if (o.softcap > 0.0 || o.alibi_slopes.defined() || o.relative_bias.defined() || o.sinks.defined())
    fail(fn,
         "gradients through softcap, alibi_slopes, relative_bias or sinks are computed by the "
         "fused backward only, which an attn_mask that requires grad or returned weights "
         "cannot use: pass a mask that does not require grad, or call "
         "scaled_dot_product_attention without weights");
}

// What a fused attention node keeps beside its saved tensors: the options without the mask (saved
// with its version instead) and the generator, and the forward's dropout seed and offset.
struct FusedNodeState {
  SdpaOptions opts;
  uint64_t seed, offset;
  FusedNodeState(const SdpaOptions& options, const SdpaForwardResult& fwd)
      : opts(options), seed(fwd.dropout_seed), offset(fwd.dropout_offset) {
    opts.attn_mask = Tensor();
    opts.generator = nullptr;
    // Saved as tensors of the node by the callers that use them.
    opts.alibi_slopes = opts.relative_bias = opts.sinks = Tensor();
  }
  // The options and the forward's result again, from the node's saved tensors: the mask at
  // `mask_at`, out and lse after it.
  std::pair<SdpaOptions, SdpaForwardResult> restore(const Node& n, std::size_t mask_at) const {
    SdpaOptions o = opts;
    o.attn_mask = n.saved_tensor(mask_at);
    SdpaForwardResult f;
    f.out = n.saved_tensor(mask_at + 1);
    f.lse = n.saved_tensor(mask_at + 2);
    f.dropout_seed = seed, f.dropout_offset = offset;
    return {std::move(o), std::move(f)};
  }
};

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const SdpaOptions& options) {
  const char* fn = "scaled_dot_product_attention";
  if (detail::autocast_applies({&q, &k, &v})) {  // torch.autocast: attention in its dtype
    SdpaOptions o = options;
    o.attn_mask = detail::autocast_operand(o.attn_mask);
    return scaled_dot_product_attention(detail::autocast_operand(q), detail::autocast_operand(k),
                                        detail::autocast_operand(v), o);
  }
  if (detail::widened_on_cpu(q) && q.dtype() == k.dtype() && q.dtype() == v.dtype()) {
    // bfloat16 / float16 on the CPU: the fused kernel on the widened operands (float
    // accumulation), the output rounded once, as torch's CPU flash kernel does.
    SdpaOptions o = options;
    for (Tensor* t : {&o.attn_mask, &o.alibi_slopes, &o.relative_bias, &o.sinks})
      *t = detail::widen(*t);
    AutocastGuard off(std::nullopt);
    return scaled_dot_product_attention(detail::widen(q), detail::widen(k), detail::widen(v), o)
        .to(q.dtype());
  }
  const std::vector<const Tensor*> inputs{&q,
                                          &k,
                                          &v,
                                          &options.attn_mask,
                                          &options.alibi_slopes,
                                          &options.relative_bias,
                                          &options.sinks};
  const bool recording = detail::should_record(inputs);
  const bool mask_grad = options.attn_mask.defined() && options.attn_mask.requires_grad();
  if (recording && mask_grad) refuse_composed_mods(options, fn);
  // The GPU backward computes dq, dk and dv through the modifiers, not the modifiers' own
  // gradients: refused before anything runs rather than at backward().
  if (recording && !q.device().is_cpu() &&
      ((options.alibi_slopes.defined() && options.alibi_slopes.requires_grad()) ||
       (options.sinks.defined() && options.sinks.requires_grad())))
    throw NotImplementedError(detail::msg(
        fn, "the gradients of alibi_slopes and sinks are computed on the CPU only for now (on ",
        q.device().str(), " they may be used without requires_grad)"));
  if (recording && !mask_grad) {
    // One graph node whose backward is scaled_dot_product_attention_gradients: the forward saves
    // out and the per-row log-sum-exp, the backward recomputes the scores and regenerates the
    // dropout mask from the forward's seed (nothing (L_q, L_k)-sized is kept). A trainable float
    // mask takes the composed path below, whose backward also yields the mask's gradient.
    SdpaForwardResult fwd = scaled_dot_product_attention_forward(q, k, v, options);
    const FusedNodeState state(options, fwd);
    Tensor out = fwd.out;
    return detail::record(
        out, out.dim() == 2 ? "MmBackward0" : "UnsafeViewBackward0", inputs,
        [state](const Node& n, const Tensor& g) {
          auto [o, f] = state.restore(n, 3);
          o.alibi_slopes = n.saved_tensor(6);
          o.relative_bias = n.saved_tensor(7);
          o.sinks = n.saved_tensor(8);
          const bool mods = n.needs_input_grad(4) || n.needs_input_grad(5) || n.needs_input_grad(6);
          SdpaGradients d = sdpa_detail::gradients(g, n.saved_tensor(0), n.saved_tensor(1),
                                                   n.saved_tensor(2), f, o, mods);
          auto want = [&n](std::size_t i, Tensor& t) {
            return n.needs_input_grad(i) ? t : Tensor();
          };
          return std::vector<Tensor>{want(0, d.q),
                                     want(1, d.k),
                                     want(2, d.v),
                                     Tensor(),
                                     want(4, d.alibi_slopes),
                                     want(5, d.relative_bias),
                                     want(6, d.sinks)};
        },
        {q, k, v, options.attn_mask, out, fwd.lse, options.alibi_slopes, options.relative_bias,
         options.sinks});
  }
  Prepared p = prepare(q, k, v, options, fn);
  const auto kernel = forward_kernel(fn, p, false);
  // The composed backward of a mask that requires grad materialises the weights: refused up front
  // on a device without that kernel.
  if (recording) forward_kernel("scaled_dot_product_attention (attn_mask requiring grad)", p, true);
  Tensor out = new_out(p, fn);
  // The materialised dropout mask is only needed by the autograd graph's composed backward.
  Tensor drop;
  run(kernel, p, options, fn, out, nullptr, recording ? &drop : nullptr);
  record(out, nullptr, q, k, v, options, p, drop);
  return out;
}

SdpaForwardResult scaled_dot_product_attention_forward(const Tensor& q, const Tensor& k,
                                                       const Tensor& v,
                                                       const SdpaOptions& options) {
  const char* fn = "scaled_dot_product_attention_forward";
  Prepared p = prepare(q, k, v, options, fn);
  const auto kernel = forward_kernel(fn, p, false);
  SdpaForwardResult r;
  r.out = new_out(p, fn);
  r.lse = new_lse(p, fn);
  const RunResult rr = run(kernel, p, options, fn, r.out, nullptr, nullptr, &r.lse);
  r.dropout_seed = rr.dropout_seed, r.dropout_offset = rr.dropout_offset;
  return r;
}

std::tuple<Tensor, Tensor> scaled_dot_product_attention_with_weights(const Tensor& q,
                                                                     const Tensor& k,
                                                                     const Tensor& v,
                                                                     const SdpaOptions& options) {
  const char* fn = "scaled_dot_product_attention_with_weights";
  Prepared p = prepare(q, k, v, options, fn);
  const auto kernel = forward_kernel(fn, p, true);
  Tensor out = new_out(p, fn);
  Tensor weights = detail::make_tensor(fn, concat(p.S, {p.L_q, p.L_k}), Dtype::Float32);
  if (detail::should_record({&q, &k, &v, &options.attn_mask, &options.alibi_slopes,
                             &options.relative_bias, &options.sinks}))
    refuse_composed_mods(options, fn);
  Tensor drop;
  run(kernel, p, options, fn, out, &weights, &drop);
  record(out, &weights, q, k, v, options, p, drop);
  return {out, weights};
}

Tensor causal_mask(int64_t L_q, int64_t L_k, CausalAlign align) {
  if (L_q < 0 || L_k < 0)
    fail("causal_mask", "lengths must be non-negative, got L_q ", L_q, " and L_k ", L_k);
  // Key j is visible to query i iff j <= i + shift (SdpaBand).
  const int64_t shift = align == CausalAlign::BottomRight ? L_k - L_q : 0;
  return arange(L_k).unsqueeze(0) <= arange(L_q).unsqueeze(1) + Scalar(shift);
}
// =================================================================================================
// scaled_dot_product_attention_backward: the gradient at the Tensor level. It reuses prepare()
// from above so that the backward validates and broadcasts exactly as the forward did.
// =================================================================================================

namespace {

// dout, forward.out and forward.lse must be on q's device, of the forward's dtypes (lse float32)
// and of exactly the shapes the forward produced.
void check_backward_input(const Tensor& t, const char* name, const Shape& want, Dtype dt,
                          const Device& dev, const char* fn) {
  if (!t.defined()) fail(fn, name, " is an undefined tensor");
  if (t.device() != dev)
    throw DeviceError(detail::msg(fn, "expected all tensors on the same device, got q on ",
                                  dev.str(), " and ", name, " on ", t.device().str()));
  if (t.dtype() != dt)
    fail(fn, name, " must be ", short_dtype_name(dt), ", got ", dtype_name(t.dtype()), " ",
         shape_str(t.shape()));
  if (t.shape() != want)
    fail(fn, name, " has shape ", shape_str(t.shape()), " but the forward produced ",
         shape_str(want));
}

// The backward kernel of prepared inputs, and the scratch it needs on their device.
struct BackwardKernel {
  backend::SdpaBackwardFn* run;
  backend::SdpaWorkspaceFn* workspace;
};
BackwardKernel backward_kernel(const Prepared& p, const char* fn) {
  namespace be = backend;
  const Device dev = p.q.device();
  const Dtype dt = p.q.dtype();
  return {
      be::pick(fn, dev, dt, be::cpu::sdpa_backward, be::cuda::sdpa_backward),
      be::pick(fn, dev, dt, be::cpu::sdpa_backward_workspace, be::cuda::sdpa_backward_workspace)};
}

// The backward of prepared inputs into dq (S + (L_q, D)), dk (Sk + (L_k, D)) and dv
// (Sk + (L_k, D_v)): tensors of the broadcast shapes on the inputs' device whose rows have unit
// stride (any strides outside the rows), all of whose elements are written. dout and forward are
// checked against the shapes.
// The score modifiers' gradients (SdpaGradients' last three) are added to when defined:
// contiguous float32 of their options' shapes.
void backward_into(const BackwardKernel& kernel, const Tensor& dout, const Prepared& p,
                   const SdpaForwardResult& forward, const SdpaOptions& o, const Tensor& dq,
                   const Tensor& dk, const Tensor& dv, const char* fn,
                   const SdpaGradients* mods = nullptr) {
  const Shape& S = p.S;  // out is S + (L_q, D_v)
  const Device dev = p.q.device();
  const Dtype dt = p.q.dtype();
  check_backward_input(dout, "dout", concat(S, {p.L_q, p.D_v}), dt, dev, fn);
  check_backward_input(forward.out, "forward.out", concat(S, {p.L_q, p.D_v}), dt, dev, fn);
  check_backward_input(forward.lse, "forward.lse", concat(S, {p.L_q}), Dtype::Float32, dev, fn);
  NoGradGuard no_grad;             // a gradient pass records nothing
  if (p.L_q == 0 || p.L_k == 0) {  // nothing attended: zero gradients
    for (Tensor t : {dq, dk, dv}) t.zero_();
    return;
  }

  const Tensor g = unit_inner(dout), out = unit_inner(forward.out), lse = forward.lse.contiguous();
  // The forward's call (forward_call, set_pointers: same strides, masks, window, key padding and
  // dropout counters), plus the saved out and lse, dout and the gradients.
  const int64_t r = int64_t(S.size());
  backend::SdpaBackward bp;
  backend::SdpaForward& kp = bp.fwd;
  kp = forward_call(p, o, fn);
  kernel_strides(out, r, kp.out_batch_stride, kp.out_head_stride, kp.out_row_stride);
  kernel_strides(g, r, bp.dout_batch_stride, bp.dout_head_stride, bp.dout_row_stride);
  kernel_strides(dq, r, bp.dq_batch_stride, bp.dq_head_stride, bp.dq_row_stride);
  kernel_strides(dk, r, bp.dk_batch_stride, bp.dk_head_stride, bp.dk_row_stride);
  kernel_strides(dv, r, bp.dv_batch_stride, bp.dv_head_stride, bp.dv_row_stride);
  // Dropout: the forward's counter-based mask, regenerated from its seed and offset.
  if (o.dropout_p > 0.0) kp.dropout_p = o.dropout_p, kp.dropout_seed = forward.dropout_seed;
  if (mods) {
    auto ptr = [](const Tensor& t) {
      return t.defined() ? static_cast<float*>(t.device_data()) : nullptr;
    };
    bp.dalibi_slopes = ptr(mods->alibi_slopes);
    bp.drel_bias = ptr(mods->relative_bias);
    bp.dsinks = ptr(mods->sinks);
  }
  // One scratch buffer for every call (they run in order).
  Tensor workspace;
  if (const std::size_t bytes = kernel.workspace(kp)) {
    workspace = detail::make_tensor(fn, {int64_t((bytes + 3) / 4)}, Dtype::Float32, false, dev);
    bp.workspace = workspace.device_data();
  }

  for_each_call(S, [&](int64_t c, const Shape& idx) {
    set_pointers(p, idx, c, forward.dropout_offset, out, static_cast<float*>(lse.device_data()),
                 kp);
    bp.dout = at(g, idx);
    bp.dq = at(dq, idx), bp.dk = at(dk, idx), bp.dv = at(dv, idx);
    kernel.run(bp);
  });
}

}  // namespace

std::tuple<Tensor, Tensor, Tensor> scaled_dot_product_attention_backward(
    const Tensor& dout, const Tensor& q, const Tensor& k, const Tensor& v,
    const SdpaForwardResult& forward, const SdpaOptions& o) {
  SdpaGradients g = sdpa_detail::gradients(dout, q, k, v, forward, o, /*mods=*/false);
  return {g.q, g.k, g.v};
}

SdpaGradients scaled_dot_product_attention_gradients(const Tensor& dout, const Tensor& q,
                                                     const Tensor& k, const Tensor& v,
                                                     const SdpaForwardResult& forward,
                                                     const SdpaOptions& o) {
  return sdpa_detail::gradients(dout, q, k, v, forward, o, /*mods=*/true);
}

SdpaGradients sdpa_detail::gradients(const Tensor& dout, const Tensor& q, const Tensor& k,
                                     const Tensor& v, const SdpaForwardResult& forward,
                                     const SdpaOptions& o, bool mods) {
  const char* fn = "scaled_dot_product_attention_backward";
  const Prepared p = prepare(q, k, v, o, fn);
  const BackwardKernel kernel = backward_kernel(p, fn);
  const Shape Sk = leading(p.k);  // S, with H_kv heads under GQA
  const Shape q_full = concat(p.S, {p.L_q, p.D}), k_full = concat(Sk, {p.L_k, p.D}),
              v_full = concat(Sk, {p.L_k, p.D_v});
  // A broadcast input gets its gradient summed over the broadcast dims: refused up front where
  // the device cannot sum that dtype.
  if (q.shape() != q_full || k.shape() != k_full || v.shape() != v_full)
    backend::pick("sum (the gradient of a broadcast input of scaled_dot_product_attention)",
                  p.q.device(), p.q.dtype(), backend::cpu::reduce, backend::cuda::reduce);
  // Gradients at the broadcast shapes; summed down to the inputs' shapes at the end.
  // Not zeroed: the backward kernels write every element of dq, dk and dv.
  const Device dev = p.q.device();
  const Dtype dt = p.q.dtype();
  Tensor dq = detail::make_tensor(fn, q_full, dt, false, dev);
  Tensor dk = detail::make_tensor(fn, k_full, dt, false, dev);
  Tensor dv = detail::make_tensor(fn, v_full, dt, false, dev);
  // The score modifiers' gradients, at their contiguous copies' shapes, accumulated from zero.
  SdpaGradients g;
  auto zeros_like = [&](const Tensor& t) {
    return t.defined() && mods ? detail::make_tensor(fn, t.shape(), Dtype::Float32, true, dev)
                               : Tensor();
  };
  g.alibi_slopes = zeros_like(p.alibi_slopes);
  g.relative_bias = zeros_like(p.relative_bias);
  g.sinks = zeros_like(p.sinks);
  backward_into(kernel, dout, p, forward, o, dq, dk, dv, fn, &g);
  NoGradGuard no_grad;
  // Inputs that were broadcast get their gradient summed over the broadcast dims.
  g.q = detail::sum_to(dq, q.shape());
  g.k = detail::sum_to(dk, k.shape());
  g.v = detail::sum_to(dv, v.shape());
  return g;
}

namespace sdpa_detail {

// q, k, v as views of a packed (B, L, 3 E) projection: (B, H, L, E / H) each.
std::array<Tensor, 3> unpack_qkv(const Tensor& qkv, int64_t H) {
  const int64_t B = qkv.size(0), L = qkv.size(1), D = qkv.size(2) / (3 * H);
  const Tensor t = qkv.view({B, L, 3, H, D}).permute({2, 0, 3, 1, 4});
  return {t.select(0, 0), t.select(0, 1), t.select(0, 2)};
}

Tensor packed_self_attention(const Tensor& qkv, int64_t H, const SdpaOptions& options) {
  const char* fn = "scaled_dot_product_attention";
  if (qkv.dim() != 3 || H < 1 || qkv.size(2) % (3 * H) != 0 || !qkv.is_contiguous() ||
      qkv.is_cuda())
    fail(fn,
         "packed self-attention needs a contiguous CPU (B, L, 3 E) projection with E "
         "divisible by ",
         H, " heads, got ", detail::tensor_desc(qkv));
  SdpaForwardResult fwd;
  {
    NoGradGuard no_grad;
    const auto [q, k, v] = unpack_qkv(qkv.detach(), H);
    fwd = scaled_dot_product_attention_forward(q, k, v, options);
  }
  const FusedNodeState state(options, fwd);
  return detail::record(fwd.out, "UnsafeViewBackward0", {&qkv, &options.attn_mask},
                        [state, H, fn](const Node& n, const Tensor& g) {
                          const auto [o, f] = state.restore(n, 1);
                          const Tensor qkv = n.saved_tensor(0);
                          const auto [q, k, v] = unpack_qkv(qkv, H);
                          // dq, dk and dv written straight into the packed layout: the gradient of
                          // the projection.
                          // Not zeroed: the backward writes all of dq, dk and dv.
                          Tensor dqkv = detail::make_tensor(fn, qkv.shape(), qkv.dtype(), false,
                                                            qkv.device());
                          const auto [dq, dk, dv] = unpack_qkv(dqkv, H);
                          const Prepared p = prepare(q, k, v, o, fn);
                          backward_into(backward_kernel(p, fn), g, p, f, o, dq, dk, dv, fn);
                          return std::vector<Tensor>{dqkv, Tensor()};
                        },
                        {qkv, options.attn_mask, fwd.out, fwd.lse});
}

}  // namespace sdpa_detail

}  // namespace attn

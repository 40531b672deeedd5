// scaled_dot_product_attention: validation at the boundary, then the reference kernel.
#include <attn/attention.h>
#include <attn/autograd.h>
#include <attn/ops.h>

#include <cmath>

#include "../kernels/cpu/sdpa_reference.h"
#include "../tensor/internal.h"

namespace attn {

using detail::fail;

namespace {

Shape leading(const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 2); }

Shape concat(Shape a, std::initializer_list<int64_t> tail) {
  a.insert(a.end(), tail);
  return a;
}

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

// The kernel wants unit stride along the head dim; anything else is copied once.
Tensor unit_inner(const Tensor& t) {
  return t.size(-1) <= 1 || t.stride(-1) == 1 ? t : t.contiguous();
}

struct Prepared {
  Tensor q, k, v;    // expanded to the output batch shape (k, v with H_kv heads under GQA)
  Tensor mask;       // expanded to S + (L_q, L_k), or undefined
  Shape S;           // output batch shape: out is S + (L_q, D_v)
  Shape drop_batch;  // batch shape of q @ k^T, over which dropout draws (torch's order)
  int64_t L_q, L_k, D, D_v, H_kv_ratio = 1;
  double scale;
};

Prepared prepare(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in, const SdpaOptions& o,
                 const char* fn) {
  for (auto [t, name] : {std::pair{&q_in, "q"}, {&k_in, "k"}, {&v_in, "v"}}) {
    if (!t->defined()) fail(fn, name, " is an undefined tensor");
    if (t->dtype() != Dtype::Float32)
      fail(fn, name, " must be float32, got ", dtype_name(t->dtype()), " ", shape_str(t->shape()));
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
    if (m.dtype() != Dtype::Bool && m.dtype() != Dtype::Float32)
      fail(fn, "attn_mask must be bool or float32, got ", dtype_name(m.dtype()));
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
  return p;
}

// Offsets of a tensor's element [idx..., 0, 0, 0] for an index over its outer dims.
int64_t outer_offset(const Tensor& t, const Shape& idx) {
  int64_t off = 0;
  for (size_t d = 0; d < idx.size(); ++d) off += idx[d] * t.stride(int64_t(d));
  return off;
}

// Runs the kernel over the batch shape S: its last two dims become the kernel's (B, H) and any
// dims before them are looped over here.
void run(const Prepared& p, const SdpaOptions& o, Tensor& out, Tensor* weights) {
  const Shape& S = p.S;
  const int64_t r = int64_t(S.size());
  const int64_t B = r >= 2 ? S[r - 2] : 1, H = r >= 1 ? S[r - 1] : 1;
  const Shape outer(S.begin(), S.begin() + std::max<int64_t>(r - 2, 0));
  const int64_t n_outer = detail::shape_numel(outer);
  auto bstride = [&](const Tensor& t) { return r >= 2 ? t.stride(r - 2) : 0; };
  auto hstride = [&](const Tensor& t) { return r >= 1 ? t.stride(r - 1) : 0; };

  // Dropout factors over q @ k^T's weights in row-major order, then broadcast to S if v enlarged
  // it.
  Tensor drop;
  if (o.dropout_p > 0.0) {
    Shape ds = concat(p.drop_batch, {p.L_q, p.L_k});
    drop = detail::make_tensor(ds, Dtype::Float32);
    fill_dropout_mask(drop.data_ptr<float>(), drop.numel(), o.dropout_p,
                      o.generator ? *o.generator : default_generator());
    Shape full = concat(S, {p.L_q, p.L_k});
    if (ds != full) drop = drop.expand(full).contiguous();
  }

  kernels::SdpaParams kp;
  kp.q_batch_stride = bstride(p.q), kp.q_head_stride = hstride(p.q),
  kp.q_row_stride = p.q.stride(r);
  kp.k_batch_stride = bstride(p.k), kp.k_head_stride = hstride(p.k),
  kp.k_row_stride = p.k.stride(r);
  kp.v_batch_stride = bstride(p.v), kp.v_head_stride = hstride(p.v),
  kp.v_row_stride = p.v.stride(r);
  kp.out_batch_stride = H * p.L_q * p.D_v, kp.out_head_stride = p.L_q * p.D_v;
  kp.out_row_stride = p.D_v;
  kp.B = B, kp.H = H, kp.H_kv = H / p.H_kv_ratio;
  kp.L_q = p.L_q, kp.L_k = p.L_k, kp.D = p.D, kp.D_v = p.D_v;
  kp.scale = p.scale;
  kp.causal = o.is_causal;
  kp.causal_bottom_right = o.causal_align == CausalAlign::BottomRight;
  if (p.mask.defined()) {
    kp.mask_kind =
        p.mask.dtype() == Dtype::Bool ? kernels::MaskKind::Bool : kernels::MaskKind::Float;
    kp.mask_batch_stride = bstride(p.mask), kp.mask_head_stride = hstride(p.mask);
    kp.mask_row_stride = p.mask.stride(r), kp.mask_col_stride = p.mask.stride(r + 1);
  }

  const int64_t per_call_out = B * H * p.L_q * p.D_v, per_call_w = B * H * p.L_q * p.L_k;
  Shape idx(outer.size(), 0);
  for (int64_t c = 0; c < n_outer; ++c) {
    kp.q = p.q.data_ptr<float>() + outer_offset(p.q, idx);
    kp.k = p.k.data_ptr<float>() + outer_offset(p.k, idx);
    kp.v = p.v.data_ptr<float>() + outer_offset(p.v, idx);
    kp.out = out.data_ptr<float>() + c * per_call_out;
    if (p.mask.defined())
      kp.mask = static_cast<const char*>(p.mask.raw_data()) +
                outer_offset(p.mask, idx) * int64_t(itemsize(p.mask.dtype()));
    kp.dropout_scale = drop.defined() ? drop.data_ptr<float>() + c * per_call_w : nullptr;
    kp.weights = weights ? weights->data_ptr<float>() + c * per_call_w : nullptr;
    kernels::sdpa_reference_forward(kp);
    for (int64_t d = int64_t(idx.size()) - 1; d >= 0; --d) {  // next outer index, row-major
      if (++idx[d] < outer[d]) break;
      idx[d] = 0;
    }
  }
}

// Records the results in the autograd graph under the names PyTorch 2.0's math backend gives them:
// out = matmul(weights, v) and weights = softmax(...), or dropout(softmax(...)) = weights * noise.
void record(Tensor& out, Tensor* weights, const Tensor& q, const Tensor& k, const Tensor& v,
            const SdpaOptions& o) {
  const std::vector<const Tensor*> inputs{&q, &k, &v, &o.attn_mask};
  out = detail::record(out, out.dim() == 2 ? "MmBackward0" : "UnsafeViewBackward0", inputs);
  if (weights)
    *weights =
        detail::record(*weights, o.dropout_p > 0.0 ? "MulBackward0" : "SoftmaxBackward0", inputs);
}

}  // namespace

Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const SdpaOptions& options) {
  const char* fn = "scaled_dot_product_attention";
  Prepared p = prepare(q, k, v, options, fn);
  Tensor out = detail::make_tensor(concat(p.S, {p.L_q, p.D_v}), Dtype::Float32);
  run(p, options, out, nullptr);  // Auto and Reference are the same kernel for now
  record(out, nullptr, q, k, v, options);
  return out;
}

std::tuple<Tensor, Tensor> scaled_dot_product_attention_with_weights(const Tensor& q,
                                                                     const Tensor& k,
                                                                     const Tensor& v,
                                                                     const SdpaOptions& options) {
  const char* fn = "scaled_dot_product_attention_with_weights";
  Prepared p = prepare(q, k, v, options, fn);
  Tensor out = detail::make_tensor(concat(p.S, {p.L_q, p.D_v}), Dtype::Float32);
  Tensor weights = detail::make_tensor(concat(p.S, {p.L_q, p.L_k}), Dtype::Float32);
  run(p, options, out, &weights);
  record(out, &weights, q, k, v, options);
  return {out, weights};
}

Tensor causal_mask(int64_t L_q, int64_t L_k, CausalAlign align) {
  if (L_q < 0 || L_k < 0)
    fail("causal_mask", "lengths must be non-negative, got L_q ", L_q, " and L_k ", L_k);
  Tensor m = detail::make_tensor({L_q, L_k}, Dtype::Bool);
  bool* d = m.data_ptr<bool>();
  const int64_t shift = align == CausalAlign::BottomRight ? L_k - L_q : 0;
  for (int64_t i = 0; i < L_q; ++i)
    for (int64_t j = 0; j < L_k; ++j) d[i * L_k + j] = j <= i + shift;
  return m;
}

}  // namespace attn

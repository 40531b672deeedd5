// varlen_attention: packed batches of sequences of different lengths (FlashAttention's
// flash_attn_varlen_func), forward and backward, with no padding computed. Each sequence is one
// call of the fused kernels on strided views of the packed (total, H, D) tensors; the autograd
// node runs the fused backward per sequence into slices of the packed gradients.
#include <attn/attention.h>
#include <attn/autograd.h>
#include <attn/ops.h>

#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "../tensor/internal.h"

namespace attn {

using detail::fail;

namespace {

// The offsets of cu_seqlens (int64 (N + 1), from 0, non-decreasing, ending at `total`, no length
// above max_seqlen), or an error naming the argument.
std::vector<int64_t> offsets(const Tensor& cu, const char* name, int64_t total, int64_t max_len,
                             const char* fn) {
  if (!cu.defined()) fail(fn, name, " is undefined");
  if (cu.dtype() != Dtype::Int64 || cu.dim() != 1 || cu.size(0) < 1)
    fail(fn, name, " must be a 1-D int64 tensor of N + 1 offsets, got ", detail::tensor_desc(cu));
  if (!cu.device().is_cpu()) fail(fn, name, " must be on the CPU, got ", cu.device().str());
  const Tensor c = cu.contiguous();
  const int64_t* p = c.data_ptr<int64_t>();
  std::vector<int64_t> o(p, p + c.numel());
  if (o.front() != 0) fail(fn, name, " must start at 0, got ", o.front());
  for (size_t i = 1; i < o.size(); ++i) {
    if (o[i] < o[i - 1])
      fail(fn, name, " must be non-decreasing, got ", o[i - 1], " then ", o[i], " at index ", i);
    if (o[i] - o[i - 1] > max_len)
      fail(fn, "sequence ", i - 1, " has length ", o[i] - o[i - 1], " (", name,
           "), above its max_seqlen ", max_len);
  }
  if (o.back() != total)
    fail(fn, name, " must end at the packed length ", total, ", got ", o.back());
  return o;
}

// Sequence b of a packed (total, H, D) tensor as an (H, L, D) view.
Tensor seq(const Tensor& t, const std::vector<int64_t>& o, size_t b) {
  return t.narrow(0, o[b], o[b + 1] - o[b]).transpose(0, 1);
}

struct Varlen {
  std::vector<int64_t> cq, ck;  // offsets
  SdpaOptions opts;             // per-sequence options without the tensors (set per call)
};

// The options of sequence b: the modifiers' tensors, ALiBi's row b when it is (N, H).
SdpaOptions seq_options(const Varlen& v, size_t b, const Tensor& alibi, const Tensor& rel,
                        const Tensor& sinks) {
  SdpaOptions o = v.opts;
  o.alibi_slopes = alibi.defined() && alibi.dim() == 2 ? alibi.select(0, int64_t(b)) : alibi;
  o.relative_bias = rel;
  o.sinks = sinks;
  return o;
}

}  // namespace

VarlenResult varlen_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                      const Tensor& cu_seqlens_q, const Tensor& cu_seqlens_k,
                                      int64_t max_seqlen_q, int64_t max_seqlen_k,
                                      const SdpaOptions& options) {
  const char* fn = "varlen_attention";
  for (auto [t, name] : {std::pair{&q, "q"}, {&k, "k"}, {&v, "v"}}) {
    if (!t->defined()) fail(fn, name, " is undefined");
    if (t->dim() != 3)
      fail(fn, name, " must be packed (total, heads, head_dim), got ", shape_str(t->shape()));
  }
  if (k.size(0) != v.size(0) || k.size(1) != v.size(1))
    fail(fn, "k ", shape_str(k.shape()), " and v ", shape_str(v.shape()),
         " differ in packed length or heads");
  const int64_t H = q.size(1), H_kv = k.size(1);
  if (H_kv == 0 || H % H_kv != 0)
    fail(fn, "the query heads of q ", shape_str(q.shape()),
         " must be a multiple of the key/value heads of k ", shape_str(k.shape()));
  if (options.attn_mask.defined() || options.key_padding_mask.defined())
    fail(fn, "takes no attn_mask or key_padding_mask: the offsets say where sequences end");
  Varlen st;
  st.cq = offsets(cu_seqlens_q, "cu_seqlens_q", q.size(0), max_seqlen_q, fn);
  st.ck = offsets(cu_seqlens_k, "cu_seqlens_k", k.size(0), max_seqlen_k, fn);
  if (st.cq.size() != st.ck.size())
    fail(fn, "cu_seqlens_q has ", st.cq.size() - 1, " sequences and cu_seqlens_k ",
         st.ck.size() - 1);
  const size_t N = st.cq.size() - 1;
  const Tensor& alibi = options.alibi_slopes;
  if (alibi.defined() && alibi.dim() == 2 && alibi.size(0) != int64_t(N))
    fail(fn, "alibi_slopes ", shape_str(alibi.shape()), " should be (", H, ") or (", N, ", ", H,
         ") for ", N, " sequences");

  st.opts = options;
  st.opts.enable_gqa = H != H_kv;
  st.opts.alibi_slopes = st.opts.relative_bias = st.opts.sinks = Tensor();
  VarlenResult r;
  r.out = detail::make_tensor(fn, {q.size(0), H, v.size(2)}, q.dtype(), true, q.device());
  r.lse = detail::make_tensor(fn, {H, q.size(0)}, Dtype::Float32, true, q.device());
  r.dropout_seeds.assign(N, 0);
  {
    NoGradGuard no_grad;
    for (size_t b = 0; b < N; ++b) {
      if (st.cq[b + 1] == st.cq[b]) continue;  // no query: nothing to compute
      const SdpaOptions o = seq_options(st, b, alibi, options.relative_bias, options.sinks);
      const SdpaForwardResult f = scaled_dot_product_attention_forward(
          seq(q, st.cq, b), seq(k, st.ck, b), seq(v, st.ck, b), o);
      seq(r.out, st.cq, b).copy_(f.out);
      r.lse.narrow(1, st.cq[b], st.cq[b + 1] - st.cq[b]).copy_(f.lse);
      r.dropout_seeds[b] = f.dropout_seed;
    }
  }

  // One node for the whole packed batch: the fused backward per sequence, into slices.
  const std::vector<const Tensor*> inputs{
      &q, &k, &v, &options.alibi_slopes, &options.relative_bias, &options.sinks};
  if (!detail::should_record(inputs)) return r;
  st.opts.generator = nullptr;
  st.opts.attn_mask = st.opts.key_padding_mask = Tensor();
  const std::vector<uint64_t> seeds = r.dropout_seeds;
  r.out = detail::record(
      r.out, "VarlenAttentionBackward0", inputs,
      [st, seeds](const Node& n, const Tensor& g) {
        const Tensor q = n.saved_tensor(0), k = n.saved_tensor(1), v = n.saved_tensor(2);
        const Tensor out = n.saved_tensor(3), lse = n.saved_tensor(4);
        const Tensor alibi = n.saved_tensor(5), rel = n.saved_tensor(6), sinks = n.saved_tensor(7);
        Tensor dq = zeros_like(q), dk = zeros_like(k), dv = zeros_like(v);
        Tensor dalibi = alibi.defined() ? zeros_like(alibi) : Tensor();
        Tensor drel = rel.defined() ? zeros_like(rel) : Tensor();
        Tensor dsinks = sinks.defined() ? zeros_like(sinks) : Tensor();
        for (size_t b = 0; b + 1 < st.cq.size(); ++b) {
          const int64_t L_q = st.cq[b + 1] - st.cq[b];
          if (L_q == 0) continue;
          const SdpaOptions o = seq_options(st, b, alibi, rel, sinks);
          SdpaForwardResult f;
          f.out = seq(out, st.cq, b);
          f.lse = lse.narrow(1, st.cq[b], L_q);
          f.dropout_seed = seeds[b];
          const SdpaGradients d = scaled_dot_product_attention_gradients(
              seq(g, st.cq, b), seq(q, st.cq, b), seq(k, st.ck, b), seq(v, st.ck, b), f, o);
          seq(dq, st.cq, b).copy_(d.q);
          seq(dk, st.ck, b).add_(d.k);  // sequences may share no keys, but empty ones add 0
          seq(dv, st.ck, b).add_(d.v);
          if (dalibi.defined()) {
            Tensor row = dalibi.dim() == 2 ? dalibi.select(0, int64_t(b)) : dalibi;
            row.add_(d.alibi_slopes.reshape(row.shape()));
          }
          if (drel.defined()) drel.add_(d.relative_bias.reshape(drel.shape()));
          if (dsinks.defined()) dsinks.add_(d.sinks);
        }
        auto want = [&n](std::size_t i, const Tensor& t) {
          return n.needs_input_grad(i) ? t : Tensor();
        };
        return std::vector<Tensor>{want(0, dq),     want(1, dk),   want(2, dv),
                                   want(3, dalibi), want(4, drel), want(5, dsinks)};
      },
      {q, k, v, r.out, r.lse, options.alibi_slopes, options.relative_bias, options.sinks});
  return r;
}

Tensor varlen_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& cu_seqlens_q, const Tensor& cu_seqlens_k,
                        int64_t max_seqlen_q, int64_t max_seqlen_k, const SdpaOptions& options) {
  return varlen_attention_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k,
                                  options)
      .out;
}

}  // namespace attn

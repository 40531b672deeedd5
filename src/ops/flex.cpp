// flex_attention: the block mask and the op with its autograd node over the fused CPU kernels
// (the tracing of score_mod and mask_mod is flex_trace.cpp).
#include <attn/autograd.h>
#include <attn/flex.h>
#include <attn/ops.h>

#include <algorithm>
#include <cmath>
#include <sstream>
#include <tuple>
#include <utility>

#include "../backend/cpu/flex_eval.h"
#include "../backend/cpu/sdpa_fused.h"
#include "../backend/cpu/sdpa_fused_backward.h"
#include "../backend/cpu/workspace.h"
#include "../tensor/internal.h"
#include "attention_internal.h"
#include "flex_internal.h"

namespace attn {

namespace kf = kernels::flex;
using detail::fail;

// ---- the programs as a call sees them -----------------------------------------------------------

namespace {

constexpr const char* kFn = "flex_attention";

// The program of a modifier with its captured tensors' current pointers and grad flags.
kf::Program bind(const flex::Modifier& m) {
  kf::Program p = m.impl()->program;
  const std::vector<Tensor>& ts = m.impl()->tensors;
  for (size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    p.tensors[i].data = t.numel() ? t.raw_data() : nullptr;
    p.tensors[i].requires_grad = t.requires_grad() && is_grad_enabled();
  }
  return p;
}

[[noreturn]] void index_error(const kf::IndexError& e, const kf::Program& p, const char* what) {
  const kf::Captured& t = p.tensors[size_t(e.tensor)];
  throw IndexError(detail::msg(kFn, what, " reads ", t.name, " at index ", e.index, " of dim ",
                               e.dim, " (size ", e.size, "): out of range"));
}

}  // namespace

BlockMask::BlockMask(flex::Modifier mask_mod, int64_t B_, int64_t H_, int64_t Q_LEN_,
                     int64_t KV_LEN_, int64_t q_block, int64_t kv_block,
                     std::vector<uint8_t> fine_kinds, int64_t fine_q, int64_t fine_kv)
    : B(B_),
      H(H_),
      Q_LEN(Q_LEN_),
      KV_LEN(KV_LEN_),
      Q_BLOCK_SIZE(q_block),
      KV_BLOCK_SIZE(kv_block),
      mask_mod_(std::move(mask_mod)),
      fine_kinds_(std::move(fine_kinds)),
      fine_q_(fine_q),
      fine_kv_(fine_kv) {
  // The blocks from the fine ones: empty (full) when all of theirs are.
  const int64_t nq = num_q_blocks(), nkv = num_kv_blocks();
  const int64_t nfq = (Q_LEN + fine_q - 1) / fine_q, nfkv = (KV_LEN + fine_kv - 1) / fine_kv;
  const int64_t rq = q_block / fine_q, rkv = kv_block / fine_kv;
  kinds_.assign(size_t(B * H * nq * nkv), 0);
  for (int64_t bh = 0; bh < B * H; ++bh)
    for (int64_t qb = 0; qb < nq; ++qb)
      for (int64_t kb = 0; kb < nkv; ++kb) {
        bool all_empty = true, all_full = true;
        for (int64_t fq = qb * rq; fq < std::min(nfq, (qb + 1) * rq); ++fq)
          for (int64_t fk = kb * rkv; fk < std::min(nfkv, (kb + 1) * rkv); ++fk) {
            const auto k = kf::TileKind(fine_kinds_[size_t((bh * nfq + fq) * nfkv + fk)]);
            all_empty &= k == kf::TileKind::Empty;
            all_full &= k == kf::TileKind::Full;
          }
        kinds_[size_t((bh * nq + qb) * nkv + kb)] = uint8_t(all_empty  ? kf::TileKind::Empty
                                                            : all_full ? kf::TileKind::Full
                                                                       : kf::TileKind::Partial);
      }
}

BlockMask create_block_mask(const flex::MaskMod& mask_mod, int64_t B, int64_t H, int64_t Q_LEN,
                            int64_t KV_LEN, int64_t BLOCK_SIZE) {
  return create_block_mask(flex::trace_mask_mod(mask_mod), B, H, Q_LEN, KV_LEN, BLOCK_SIZE,
                           BLOCK_SIZE);
}

BlockMask create_block_mask(const flex::Modifier& mask_mod, int64_t B, int64_t H, int64_t Q_LEN,
                            int64_t KV_LEN, int64_t Q_BLOCK_SIZE, int64_t KV_BLOCK_SIZE) {
  const char* fn = "create_block_mask";
  if (!mask_mod.defined() || !mask_mod.is_mask())
    fail(fn, "mask_mod must be a traced mask_mod (b, h, q_idx, kv_idx) -> bool");
  if (B < 1 || H < 1 || Q_LEN < 1 || KV_LEN < 1)
    fail(fn, "B, H, Q_LEN and KV_LEN must be positive, got ", B, ", ", H, ", ", Q_LEN, ", ",
         KV_LEN);
  if (Q_BLOCK_SIZE < 1 || KV_BLOCK_SIZE < 1)
    fail(fn, "BLOCK_SIZE must be positive, got (", Q_BLOCK_SIZE, ", ", KV_BLOCK_SIZE, ")");
  const int64_t big = int64_t(1) << 30;
  if (B >= big || H >= big || Q_LEN >= big || KV_LEN >= big)
    fail(fn, "sizes must be below 2^30 (indices are int32), got ", B, ", ", H, ", ", Q_LEN, ", ",
         KV_LEN);
  const int64_t fq = Q_BLOCK_SIZE % 64 == 0 ? 64 : Q_BLOCK_SIZE;
  const int64_t fkv = KV_BLOCK_SIZE % 64 == 0 ? 64 : KV_BLOCK_SIZE;
  const int64_t nfq = (Q_LEN + fq - 1) / fq, nfkv = (KV_LEN + fkv - 1) / fkv;
  std::vector<uint8_t> kinds(size_t(B * H * nfq * nfkv));
  const kf::Program prog = bind(mask_mod);
  kf::ErrorSlot errors;
  kf::classify_blocks(prog, B, H, Q_LEN, KV_LEN, fq, fkv, kinds.data(), errors);
  if (errors.error().set) index_error(errors.error(), prog, "mask_mod");
  return BlockMask(mask_mod, B, H, Q_LEN, KV_LEN, Q_BLOCK_SIZE, KV_BLOCK_SIZE, std::move(kinds), fq,
                   fkv);
}

namespace {
// torch's (num_blocks, indices) of the blocks of one kind, int64 here (attn has no int32).
std::pair<Tensor, Tensor> block_lists(const BlockMask& m, kf::TileKind kind) {
  const int64_t nq = m.num_q_blocks(), nkv = m.num_kv_blocks(), rows = m.B * m.H * nq;
  Tensor num = zeros({m.B, m.H, nq}, Dtype::Int64);
  Tensor idx = zeros({m.B, m.H, nq, nkv}, Dtype::Int64);
  int64_t* pn = num.data_ptr<int64_t>();
  int64_t* pi = idx.data_ptr<int64_t>();
  for (int64_t r = 0; r < rows; ++r) {
    int64_t c = 0;
    for (int64_t kb = 0; kb < nkv; ++kb)
      if (kf::TileKind(m.kinds()[size_t(r * nkv + kb)]) == kind) pi[r * nkv + c++] = kb;
    pn[r] = c;
  }
  return {num, idx};
}
}  // namespace

Tensor BlockMask::kv_num_blocks() const { return block_lists(*this, kf::TileKind::Partial).first; }
Tensor BlockMask::kv_indices() const { return block_lists(*this, kf::TileKind::Partial).second; }
Tensor BlockMask::full_kv_num_blocks() const {
  return block_lists(*this, kf::TileKind::Full).first;
}
Tensor BlockMask::full_kv_indices() const { return block_lists(*this, kf::TileKind::Full).second; }

Tensor BlockMask::to_dense() const {
  Tensor d = zeros({B, H, num_q_blocks(), num_kv_blocks()}, Dtype::Bool);
  uint8_t* p = static_cast<uint8_t*>(d.raw_data());
  for (size_t i = 0; i < kinds_.size(); ++i) p[i] = kinds_[i] != uint8_t(kf::TileKind::Empty);
  return d;
}

double BlockMask::sparsity() const {
  if (kinds_.empty()) return 0.0;
  size_t empty = 0;
  for (uint8_t k : kinds_) empty += k == uint8_t(kf::TileKind::Empty);
  return 100.0 * double(empty) / double(kinds_.size());
}

std::string BlockMask::str() const {
  std::ostringstream os;
  os << "BlockMask(shape=(" << B << ", " << H << ", " << Q_LEN << ", " << KV_LEN
     << "), BLOCK_SIZE=(" << Q_BLOCK_SIZE << ", " << KV_BLOCK_SIZE << "), sparsity=" << sparsity()
     << "%)";
  return os.str();
}

// ---- flex_attention -----------------------------------------------------------------------------

namespace {

struct Call {
  Tensor q, k, v;  // (B, H, L, D) with unit inner stride; k, v expanded over B
  int64_t B, H, H_kv, L_q, L_k, D, D_v;
  double scale;
};

Call validate(const Tensor& q, const Tensor& k, const Tensor& v, const flex::Modifier& score_mod,
              const BlockMask* bm, const FlexOptions& o) {
  for (auto [t, name] : {std::pair{&q, "query"}, {&k, "key"}, {&v, "value"}}) {
    if (!t->defined()) fail(kFn, name, " is undefined");
    if (t->dim() != 4) fail(kFn, name, " must be (B, H, L, D), got ", shape_str(t->shape()));
    if (t->dtype() != Dtype::Float32)
      fail(kFn, name, " must be float32, got ", detail::tensor_desc(*t));
    if (!t->device().is_cpu())
      throw NotImplementedError(detail::msg(kFn, name, " is on ", t->device().str(),
                                            ": flex_attention runs on the CPU only"));
  }
  Call c;
  c.B = q.size(0), c.H = q.size(1), c.L_q = q.size(2), c.D = q.size(3);
  c.H_kv = k.size(1), c.L_k = k.size(2), c.D_v = v.size(3);
  if (k.size(3) != c.D)
    fail(kFn, "query ", shape_str(q.shape()), " and key ", shape_str(k.shape()),
         " differ in head dim");
  if (k.size(0) != v.size(0) || k.size(1) != v.size(1) || k.size(2) != v.size(2))
    fail(kFn, "key ", shape_str(k.shape()), " and value ", shape_str(v.shape()),
         " differ in batch, heads or length");
  if (k.size(0) != c.B && k.size(0) != 1)
    fail(kFn, "key ", shape_str(k.shape()), " has batch ", k.size(0), ", query ",
         shape_str(q.shape()), " has ", c.B);
  if (c.H_kv != c.H) {
    if (!o.enable_gqa)
      fail(kFn, "query has ", c.H, " heads and key ", c.H_kv, ": pass enable_gqa=True");
    if (c.H_kv == 0 || c.H % c.H_kv != 0)
      fail(kFn, "query heads ", c.H, " must be a multiple of key/value heads ", c.H_kv);
  }
  const int64_t big = int64_t(1) << 30;
  if (c.B >= big || c.H >= big || c.L_q >= big || c.L_k >= big)
    fail(kFn, "sizes must be below 2^30 (indices are int32)");
  if (o.scale && !(std::isfinite(*o.scale) && *o.scale > 0.0))
    fail(kFn, "scale must be finite and positive, got ", *o.scale);
  c.scale = o.scale ? *o.scale : 1.0 / std::sqrt(double(std::max<int64_t>(c.D, 1)));
  if (score_mod.defined() && score_mod.is_mask())
    fail(kFn, "score_mod is a traced mask_mod: pass it through create_block_mask");
  if (bm) {
    if (bm->Q_LEN != c.L_q || bm->KV_LEN != c.L_k)
      fail(kFn, "block_mask was made for Q_LEN ", bm->Q_LEN, " and KV_LEN ", bm->KV_LEN,
           ", the inputs have ", c.L_q, " and ", c.L_k);
    if (bm->B != 1 && bm->B != c.B)
      fail(kFn, "block_mask has B ", bm->B, ", the inputs ", c.B, " (1 shares it)");
    if (bm->H != 1 && bm->H != c.H)
      fail(kFn, "block_mask has H ", bm->H, ", the inputs ", c.H, " (1 shares it)");
  }
  auto prep = [&](const Tensor& t) {
    Tensor u = t.stride(3) == 1 ? t : t.contiguous();
    return u.size(0) == c.B ? u : u.expand({c.B, u.size(1), u.size(2), u.size(3)});
  };
  c.q = prep(q), c.k = prep(k), c.v = prep(v);
  return c;
}

kernels::SdpaParams params(const Call& c, const Tensor& out, const Tensor& lse,
                           const kf::FlexCall* fx) {
  kernels::SdpaParams p;
  p.B = c.B, p.H = c.H, p.H_kv = c.H_kv, p.L_q = c.L_q, p.L_k = c.L_k, p.D = c.D, p.D_v = c.D_v;
  p.scale = c.scale;
  p.q = c.q.data_ptr<float>();
  p.k = c.k.data_ptr<float>();
  p.v = c.v.data_ptr<float>();
  using sdpa_detail::kernel_strides;  // (B, H, L, D): batch shape of rank 2
  kernel_strides(c.q, 2, p.q_batch_stride, p.q_head_stride, p.q_row_stride);
  kernel_strides(c.k, 2, p.k_batch_stride, p.k_head_stride, p.k_row_stride);
  kernel_strides(c.v, 2, p.v_batch_stride, p.v_head_stride, p.v_row_stride);
  p.out = const_cast<float*>(out.data_ptr<float>());
  kernel_strides(out, 2, p.out_batch_stride, p.out_head_stride, p.out_row_stride);
  p.lse = const_cast<float*>(lse.data_ptr<float>());
  p.flex = fx;
  return p;
}

// The kernels' view of a call's modifiers and block mask.
struct Flex {
  kf::Program score, mask;
  kf::FlexCall call;
  kf::ErrorSlot errors;
  Flex(const flex::Modifier& sm, const BlockMask* bm) {
    if (sm.defined()) score = bind(sm), call.score = &score;
    if (bm) {
      mask = bind(bm->mask_mod());
      call.mask = &mask;
      call.blocks = bm->fine_kinds().data();
      call.blocks_B = bm->B, call.blocks_H = bm->H;
      call.q_block = bm->fine_q(), call.kv_block = bm->fine_kv();
      call.nq = (bm->Q_LEN + call.q_block - 1) / call.q_block;
      call.nkv = (bm->KV_LEN + call.kv_block - 1) / call.kv_block;
    }
    call.errors = &errors;
  }
  void check() const {
    if (!errors.error().set) return;
    const kf::IndexError& e = errors.error();
    const bool in_score = e.program == &score;
    index_error(e, in_score ? score : mask, in_score ? "score_mod" : "mask_mod");
  }
};

template <typename F>
void run_kernel(F&& f) {
  try {
    f();
  } catch (const kernels::WorkspaceError& e) {
    detail::fail_workspace(kFn, e.bytes, e.purpose);
  } catch (const std::bad_alloc&) {
    throw AllocationError(detail::msg(kFn, "cannot allocate the kernel's scratch: out of memory"));
  }
}

}  // namespace

std::tuple<Tensor, Tensor> flex_attention_with_lse(const Tensor& q, const Tensor& k,
                                                   const Tensor& v, const flex::Modifier& score_mod,
                                                   const BlockMask* block_mask,
                                                   const FlexOptions& options, Tensor* max_scores) {
  const Call c = validate(q, k, v, score_mod, block_mask, options);
  // The fused kernel writes every element of out (zeros where every key is masked): not cleared
  // first (see attention.cpp's new_out).
  Tensor out = detail::make_tensor(kFn, {c.B, c.H, c.L_q, c.D_v}, Dtype::Float32, false);
  Tensor lse = detail::make_tensor(kFn, {c.B, c.H, c.L_q}, Dtype::Float32, true);
  if (max_scores)  // not differentiable (torch marks it so too)
    *max_scores = detail::make_tensor(kFn, {c.B, c.H, c.L_q}, Dtype::Float32, true);
  {
    Flex fx(score_mod, block_mask);
    kernels::SdpaParams p = params(c, out, lse, &fx.call);
    if (max_scores) p.row_max = max_scores->data_ptr<float>();
    run_kernel([&] { kernels::sdpa_fused_forward(p); });
    fx.check();
  }

  // The graph: q, k, v and the captured tensors of score_mod (the mask's take no gradient).
  const std::vector<Tensor> captured =
      score_mod.defined() ? score_mod.captured() : std::vector<Tensor>();
  std::vector<const Tensor*> inputs{&q, &k, &v};
  for (const Tensor& t : captured) inputs.push_back(&t);
  if (!detail::should_record(inputs)) return {out, lse};
  std::shared_ptr<const BlockMask> bm =
      block_mask ? std::make_shared<const BlockMask>(*block_mask) : nullptr;
  const Shape k_shape = k.shape(), v_shape = v.shape();
  const bool expanded_kv = k.size(0) != c.B;
  out = detail::record(
      out, "FlexAttentionBackward0", inputs,
      [score_mod, bm, options, k_shape, v_shape, expanded_kv](const Node& n, const Tensor& g) {
        const Tensor q = n.saved_tensor(0), k = n.saved_tensor(1), v = n.saved_tensor(2);
        const Tensor out = n.saved_tensor(3), lse = n.saved_tensor(4);
        const Call c = validate(q, k, v, score_mod, bm.get(), options);
        Tensor dq = zeros({c.B, c.H, c.L_q, c.D}, Dtype::Float32);
        Tensor dk = zeros({c.B, c.H_kv, c.L_k, c.D}, Dtype::Float32);
        Tensor dv = zeros({c.B, c.H_kv, c.L_k, c.D_v}, Dtype::Float32);
        const Tensor dout = g.stride(3) == 1 ? g : g.contiguous();
        Flex fx(score_mod, bm.get());
        const std::vector<Tensor> caps =
            score_mod.defined() ? score_mod.captured() : std::vector<Tensor>();
        std::vector<Tensor> dcaps(caps.size());
        for (size_t i = 0; i < caps.size(); ++i)
          if (n.needs_input_grad(3 + i) && caps[i].dtype() == Dtype::Float32) {
            dcaps[i] = zeros(caps[i].shape(), Dtype::Float32);
            fx.score.tensors[i].requires_grad = true;
            fx.call.tensor_grads.push_back(dcaps[i].data_ptr<float>());
          } else {
            fx.score.tensors[i].requires_grad = false;
            fx.call.tensor_grads.push_back(nullptr);
          }
        kernels::SdpaBackwardParams bp;
        bp.fwd = params(c, out, lse, &fx.call);
        using sdpa_detail::kernel_strides;
        bp.dout = dout.data_ptr<float>();
        kernel_strides(dout, 2, bp.dout_batch_stride, bp.dout_head_stride, bp.dout_row_stride);
        bp.dq = dq.data_ptr<float>();
        kernel_strides(dq, 2, bp.dq_batch_stride, bp.dq_head_stride, bp.dq_row_stride);
        bp.dk = dk.data_ptr<float>();
        kernel_strides(dk, 2, bp.dk_batch_stride, bp.dk_head_stride, bp.dk_row_stride);
        bp.dv = dv.data_ptr<float>();
        kernel_strides(dv, 2, bp.dv_batch_stride, bp.dv_head_stride, bp.dv_row_stride);
        run_kernel([&] { kernels::sdpa_fused_backward(bp); });
        fx.check();
        if (expanded_kv) {  // k, v of batch 1 broadcast over B: their gradients summed back
          dk = dk.sum(Shape{0}, true);
          dv = dv.sum(Shape{0}, true);
        }
        std::vector<Tensor> grads{n.needs_input_grad(0) ? dq : Tensor(),
                                  n.needs_input_grad(1) ? dk.reshape(k_shape) : Tensor(),
                                  n.needs_input_grad(2) ? dv.reshape(v_shape) : Tensor()};
        for (Tensor& d : dcaps) grads.push_back(d);
        return grads;
      },
      {q, k, v, out, lse});
  return {out, lse};
}

Tensor flex_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                      const flex::Modifier& score_mod, const BlockMask* block_mask,
                      const FlexOptions& options) {
  return std::get<0>(flex_attention_with_lse(q, k, v, score_mod, block_mask, options));
}

Tensor flex_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                      const flex::ScoreMod& score_mod, const BlockMask* block_mask,
                      const FlexOptions& options) {
  return flex_attention(q, k, v, flex::trace_score_mod(score_mod), block_mask, options);
}

}  // namespace attn

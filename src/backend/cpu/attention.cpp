// Attention's CPU table (src/backend/attention_kernels.h), float32: the fused kernels
// (sdpa_fused.h, sdpa_fused_backward.h), the reference kernels (sdpa_reference.h) where they are
// asked for or where the fused ones would not follow the rules for non-finite values, and the
// reference forward that materialises the weights.
#include <algorithm>
#include <cmath>
#include <new>
#include <vector>

#include "../../common/error.h"
#include "../attention_kernels.h"
#include "finite.h"
#include "sdpa_fused.h"
#include "sdpa_fused_backward.h"
#include "sdpa_reference.h"
#include "workspace.h"

namespace attn::kernels {
namespace {

SdpaParams float_params(const backend::SdpaForward& a) {
  SdpaParams p;
  static_cast<SdpaGeometry&>(p) = a;
  p.q = static_cast<const float*>(a.q);
  p.k = static_cast<const float*>(a.k);
  p.v = static_cast<const float*>(a.v);
  p.out = static_cast<float*>(a.out);
  p.lse = a.lse;
  p.weights = a.weights;
  p.dropout_scale = a.dropout_scale;
  return p;
}

// Runs a kernel; scratch memory it cannot allocate becomes AllocationError naming `op`.
template <typename F>
void run(const char* op, F&& call) {
  try {
    call();
  } catch (const WorkspaceError& e) {
    detail::fail_workspace(op, e.bytes, e.purpose);
  } catch (const std::bad_alloc&) {
    throw AllocationError(
        detail::msg(op, "cannot allocate the attention kernel's scratch memory: out of memory"));
  }
}

// Whether the (n0, n1, n2, n3) elements from p with the strides s0, s1, s2 and 1 are finite.
bool finite(const void* p, int64_t n0, int64_t s0, int64_t n1, int64_t s1, int64_t n2, int64_t s2,
            int64_t n3) {
  const int64_t size[4] = {n0, n1, n2, n3}, stride[4] = {s0, s1, s2, 1};
  return all_finite_strided(static_cast<const float*>(p), 4, size, stride);
}

// The counter-based dropout factors of one call, contiguous (B, H, L_q, L_k).
void fill_dropout_factors(const SdpaGeometry& g, float* f) {
  const float keep = dropout_keep_scale(g.dropout_p);
  const int64_t n = g.B * g.H * g.L_q * g.L_k;
  for (int64_t i = 0; i < n; ++i)
    f[i] = dropout_keep(g.dropout_seed, g.dropout_offset, uint64_t(i), g.dropout_p) ? keep : 0.0f;
}

void forward_f32(const backend::SdpaForward& a) {
  const SdpaParams p = float_params(a);
  if (a.dropout_factors) fill_dropout_factors(a, a.dropout_factors);
  run(a.op, [&] { a.reference ? sdpa_reference_forward(p) : sdpa_fused_forward(p); });
  if (a.reference) return;
  // A key of weight zero (masked, dropped) takes no part in the output. The fused kernel
  // multiplies such a key's value row by 0 when it shares a tile with visible keys, so an inf or
  // NaN there turns the row into NaN, where the reference kernel skips the key. Such a result is
  // recomputed by the reference kernel (same dropout counters). The check reads out once; v is
  // read only when out is not finite.
  const bool out_ok = finite(a.out, a.B, a.out_batch_stride, a.H, a.out_head_stride, a.L_q,
                             a.out_row_stride, a.D_v);
  if (!out_ok &&
      !finite(a.v, a.B, a.v_batch_stride, a.H_kv, a.v_head_stride, a.L_k, a.v_row_stride, a.D_v))
    run(a.op, [&] { sdpa_reference_forward(p); });
}

void weights_f32(const backend::SdpaForward& a) {
  const SdpaParams p = float_params(a);
  run(a.op, [&] { sdpa_reference_forward(p); });
}

// The gradients of the score modifiers' parameters (SdpaModGrads) of one call: accumulated from
// zero in scratch, then added to the caller's once, so that a fused pass that is redone by the
// reference kernel (below) adds nothing twice.
struct ModGradScratch {
  std::vector<float> dalibi, drel, dsinks;
  ModGradScratch(const backend::SdpaBackward& a, SdpaModGrads& into) {
    const SdpaGeometry& g = a.fwd;
    auto take = [](float* want, std::vector<float>& buf, int64_t n) {
      if (!want) return static_cast<float*>(nullptr);
      buf.assign(size_t(n), 0.0f);
      return buf.data();
    };
    into.dalibi_slopes = take(a.dalibi_slopes, dalibi, (g.B - 1) * g.alibi_batch_stride + g.H);
    into.drel_bias = take(a.drel_bias, drel,
                          (g.H - 1) * g.rel_bias_head_stride + 2 * g.rel_bias_max_distance + 1);
    into.dsinks = take(a.dsinks, dsinks, g.H);
  }
  void zero() {
    for (auto* v : {&dalibi, &drel, &dsinks}) std::fill(v->begin(), v->end(), 0.0f);
  }
  void add_to(const backend::SdpaBackward& a) const {
    auto add = [](float* dst, const std::vector<float>& src) {
      for (size_t i = 0; i < src.size(); ++i) dst[i] += src[i];
    };
    if (a.dalibi_slopes) add(a.dalibi_slopes, dalibi);
    if (a.drel_bias) add(a.drel_bias, drel);
    if (a.dsinks) add(a.dsinks, dsinks);
  }
};

bool backward_finite(const backend::SdpaBackward& a);

void backward_f32(const backend::SdpaBackward& a) {
  const backend::SdpaForward& f = a.fwd;
  SdpaBackwardParams bp;
  static_cast<SdpaGradStrides&>(bp) = a;
  ModGradScratch mods(a, bp);
  bp.fwd = float_params(f);
  bp.dout = static_cast<const float*>(a.dout);
  bp.dq = static_cast<float*>(a.dq);
  bp.dk = static_cast<float*>(a.dk);
  bp.dv = static_cast<float*>(a.dv);
  // The reference backward (it overwrites dq, dk and dv) where the fused one would not follow the
  // forward's rules for non-finite values:
  //  - a NaN row (NaN in lse) must make dk and dv NaN as the chain rule does; the fused backward
  //    can leave them finite;
  //  - a key of weight zero takes no part in any gradient, where the fused backward forms
  //    0 * inf = NaN for it (inf or NaN in its k or v row, or in dout). Its gradients are checked
  //    (one read each) and, if not finite while some input is not finite either, recomputed.
  bool reference = f.reference;
  for (int64_t i = 0, rows = f.B * f.H * f.L_q; i < rows && !reference; ++i)
    reference = std::isnan(f.lse[i]);
  run(f.op, [&] { reference ? sdpa_reference_backward(bp) : sdpa_fused_backward(bp); });
  if (!reference && !backward_finite(a)) {
    mods.zero();
    run(f.op, [&] { sdpa_reference_backward(bp); });
  }
  mods.add_to(a);
}

// Whether the fused backward's gradients follow the forward's rules for non-finite values: they
// are finite, or every input is (see backward_f32).
bool backward_finite(const backend::SdpaBackward& a) {
  const backend::SdpaForward& f = a.fwd;
  const bool grads_ok =
      finite(a.dq, f.B, a.dq_batch_stride, f.H, a.dq_head_stride, f.L_q, a.dq_row_stride, f.D) &&
      finite(a.dk, f.B, a.dk_batch_stride, f.H_kv, a.dk_head_stride, f.L_k, a.dk_row_stride, f.D) &&
      finite(a.dv, f.B, a.dv_batch_stride, f.H_kv, a.dv_head_stride, f.L_k, a.dv_row_stride, f.D_v);
  if (grads_ok) return true;
  const bool inputs_ok =
      finite(a.dout, f.B, a.dout_batch_stride, f.H, a.dout_head_stride, f.L_q, a.dout_row_stride,
             f.D_v) &&
      finite(f.q, f.B, f.q_batch_stride, f.H, f.q_head_stride, f.L_q, f.q_row_stride, f.D) &&
      finite(f.k, f.B, f.k_batch_stride, f.H_kv, f.k_head_stride, f.L_k, f.k_row_stride, f.D) &&
      finite(f.v, f.B, f.v_batch_stride, f.H_kv, f.v_head_stride, f.L_k, f.v_row_stride, f.D_v);
  return inputs_ok;
}

std::size_t no_workspace(const backend::SdpaForward&) { return 0; }

}  // namespace
}  // namespace attn::kernels

namespace attn::backend::cpu {
const Kernels<SdpaForwardFn> sdpa_forward = {kernels::forward_f32};
const Kernels<SdpaForwardFn> sdpa_weights = {kernels::weights_f32};
const Kernels<SdpaBackwardFn> sdpa_backward = {kernels::backward_f32};
const Kernels<SdpaWorkspaceFn> sdpa_backward_workspace = {kernels::no_workspace};
}  // namespace attn::backend::cpu

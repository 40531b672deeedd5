// matmul and dot (through the backend's product kernels), cat/stack and the thread setting.
#include <attn/autograd.h>
#include <attn/ops.h>

#include <algorithm>
#include <optional>
#include <vector>

#include "../backend/cpu/gemm_half.h"
#include "../backend/cpu/gemm_rows.h"
#include "../backend/cpu/onednn_matmul.h"
#include "../backend/cpu/threads.h"
#include "../backend/linalg_kernels.h"
#include "../tensor/internal.h"
#include "autocast.h"

namespace attn {

using detail::fail;

namespace {

// Stride of the dims [0, n) of (sizes, strides) merged into one, or nullopt when they do not
// merge without a copy. Size-1 dims are ignored.
std::optional<int64_t> merged_stride(const Shape& sizes, const Shape& strides, int64_t n) {
  std::optional<int64_t> inner;
  int64_t span = 1;  // elements covered by the dims after the current one
  for (int64_t i = n - 1; i >= 0; --i) {
    if (sizes[i] == 1) continue;
    if (!inner) {
      inner = strides[i];
    } else if (strides[i] != *inner * span) {
      return std::nullopt;
    }
    span *= sizes[i];
  }
  return inner.value_or(1);
}

// The product of t's matrix at element offset `offset` of its storage (its last two dims) as
// operand a or b of a kernel call.
void set_operand(const Tensor& t, int64_t offset, bool is_a, backend::Matmul& m) {
  const int64_t n = t.dim();
  const void* p =
      static_cast<const char*>(t.impl()->storage->data) + offset * int64_t(itemsize(t.dtype()));
  if (is_a)
    m.a = p, m.a_rs = t.strides()[n - 2], m.a_cs = t.strides()[n - 1];
  else
    m.b = p, m.b_rs = t.strides()[n - 2], m.b_cs = t.strides()[n - 1];
}

// out (batch..., M, N), contiguous, = a (..., M, K) @ b (..., K, N), one kernel call per matrix.
// No operand is copied: broadcast batch dims get stride 0 and each product reads its matrices in
// place.
void batched_matmul(backend::MatmulFn* kernel, const Tensor& a, const Tensor& b, const Shape& batch,
                    Tensor& out) {
  const int64_t nbd = int64_t(batch.size());
  const int64_t M = a.size(-2), N = b.size(-1);
  const int64_t nb = detail::shape_numel(batch);
  char* po = static_cast<char*>(out.raw_data());
  const int64_t out_bytes = M * N * int64_t(itemsize(out.dtype()));
  backend::Matmul m{};
  m.M = M, m.N = N, m.K = a.size(-1);
  // b shared by every batch and a's (batch..., M) rows mergeable: one big (nb * M, K) product.
  bool b_shared = true;
  for (int64_t i = 0; i < b.dim() - 2; ++i) b_shared &= b.shape()[i] == 1;
  if (nb > 1 && b_shared && a.dim() - 2 == nbd) {
    if (auto rs = merged_stride(a.shape(), a.strides(), a.dim() - 1)) {
      set_operand(a, a.storage_offset(), true, m);
      set_operand(b, b.storage_offset(), false, m);
      m.M = nb * M;
      m.a_rs = *rs;
      m.out = po;
      kernel(m);
      return;
    }
  }
  Shape bsa(nbd, 0), bsb(nbd, 0);  // batch strides broadcast to `batch`
  for (int64_t i = 0; i < a.dim() - 2; ++i) {
    int64_t j = nbd - (a.dim() - 2) + i;
    bsa[j] = a.shape()[i] == 1 ? 0 : a.strides()[i];
  }
  for (int64_t i = 0; i < b.dim() - 2; ++i) {
    int64_t j = nbd - (b.dim() - 2) + i;
    bsb[j] = b.shape()[i] == 1 ? 0 : b.strides()[i];
  }
  Shape idx(nbd, 0);
  int64_t oa = a.storage_offset(), ob = b.storage_offset();
  for (int64_t bi = 0; bi < nb; ++bi) {
    set_operand(a, oa, true, m);
    set_operand(b, ob, false, m);
    m.out = po + bi * out_bytes;
    kernel(m);
    for (int64_t d = nbd - 1; d >= 0; --d) {  // next batch index, row-major
      oa += bsa[d];
      ob += bsb[d];
      if (++idx[d] < batch[d]) break;
      oa -= bsa[d] * batch[d];
      ob -= bsb[d] * batch[d];
      idx[d] = 0;
    }
  }
}

// MmBackward0 and friends, for every matmul variant: with a 1-D operand promoted to a matrix
// (a (K) -> (1, K), b (K) -> (K, 1)) and the output gradient shaped accordingly,
//   da = g @ b^T   and   db = a^T @ g,
// each summed over the batch dims its operand was broadcast along.
// Each operand is saved only when the other one's gradient needs it (as PyTorch's MmBackward0).
Tensor record_matmul(Tensor out, const char* node, const Tensor& a_in, const Tensor& b_in) {
  const Shape sa = a_in.shape(), sb = b_in.shape();
  auto backward = [sa, sb](const Node& n, const Tensor& grad) {
    Tensor a = n.saved_tensor(0), b = n.saved_tensor(1), g = grad;
    Shape ma = sa, mb = sb;  // the operands' shapes as matrices
    if (sb.size() == 1) {
      mb.push_back(1);
      g = g.unsqueeze(-1);
    }
    if (sa.size() == 1) {
      ma.insert(ma.begin(), 1);
      g = g.unsqueeze(-2);
    }
    Tensor da, db;
    if (n.needs_input_grad(0)) da = detail::sum_to(matmul(g, b.reshape(mb).mT()), ma).reshape(sa);
    if (n.needs_input_grad(1)) db = detail::sum_to(matmul(a.reshape(ma).mT(), g), mb).reshape(sb);
    return std::vector<Tensor>{da, db};
  };
  return detail::record(
      out, node, {&a_in, &b_in}, backward,
      {b_in.requires_grad() ? a_in : Tensor(), a_in.requires_grad() ? b_in : Tensor()});
}

// a (..., K) @ b (K, N) for a CPU bfloat16 / float16 matrix b (x @ W, or x @ W.T: b a transposed
// view), with no gradient to record: b read in its own dtype, never widened whole first (which
// writes 2x its bytes as floats and reads them back: about 19x the product's time for one row
// at gpt-oss's expert sizes). Float sums, one rounding, as the widening path; summed in another
// order.
//   * at most kGemmRowsMax rows (a decoding step): b streamed once, by AVX512-BF16's dot product
//     (bfloat16 x @ W.T where the CPU has it) or widened as it is read;
//   * more, in bfloat16: oneDNN's bfloat16 matmul where the CPU has a fast kernel (as linear);
//   * otherwise blocks of b widened in turn for sgemm (gemm_half.h, as linear).
// nullopt: not such a product.
std::optional<Tensor> times_half_matrix(const Tensor& a, const Tensor& b) {
  if (!a.is_cpu() || !b.is_cpu() || b.dim() != 2 || a.dim() < 1) return std::nullopt;
  const int64_t K = b.size(0), N = b.size(1);
  if (a.size(-1) != K || K == 0 || N == 0) return std::nullopt;
  const int64_t M = a.numel() / K;
  if (M < 1) return std::nullopt;
  if (is_grad_enabled() && (a.requires_grad() || b.requires_grad())) return std::nullopt;
  const auto kind =
      a.dtype() == Dtype::BFloat16 ? kernels::HalfKind::BFloat16 : kernels::HalfKind::Float16;
  const auto* bits = static_cast<const uint16_t*>(b.raw_data());
  const bool rows = b.stride(1) == 1 && b.stride(0) >= N,
             columns = b.stride(0) == 1 && b.stride(1) >= K;
  if (!rows && !columns) return std::nullopt;
  Shape out = a.shape();
  out.back() = N;
  if (M > kernels::kGemmRowsMax) {
    if (kind == kernels::HalfKind::BFloat16) {
      const Tensor ac = a.contiguous();
      Tensor y = empty({M, N}, Dtype::BFloat16);
      if (kernels::onednn_matmul_bf16(false, columns, M, N, K,
                                      static_cast<const uint16_t*>(ac.raw_data()), K, bits,
                                      columns ? b.stride(1) : b.stride(0), nullptr,
                                      static_cast<uint16_t*>(y.raw_data()), N))
        return y.reshape(out);
    }
  }
  Tensor y = empty({M, N});
  if (columns && kind == kernels::HalfKind::BFloat16 &&  // AVX512-BF16's dot product, few rows
      kernels::gemm_bf16_weights_dot(M, N, K,
                                     static_cast<const uint16_t*>(a.contiguous().raw_data()), K,
                                     bits, b.stride(1), y.data_ptr<float>(), N))
    return y.reshape(out).to(a.dtype());
  const Tensor af = a.to(Dtype::Float32).contiguous();
  if (rows)
    kernels::gemm_half_rows_kn(kind, M, N, K, af.data_ptr<float>(), K, bits, b.stride(0),
                               y.data_ptr<float>(), N);
  else
    kernels::gemm_half_weights(kind, M, N, K, af.data_ptr<float>(), K, bits, b.stride(1),
                               y.data_ptr<float>(), N);
  return y.reshape(out).to(a.dtype());
}

}  // namespace

Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  if (!a_in.defined() || !b_in.defined()) fail("matmul", "undefined tensor argument");
  detail::check_same_device("matmul", {&a_in, &b_in});
  if (detail::autocast_applies({&a_in, &b_in}))  // torch.autocast: the product in its dtype
    return matmul(detail::autocast_operand(a_in), detail::autocast_operand(b_in));
  if (a_in.dim() == 0 || b_in.dim() == 0)
    fail("matmul", "both arguments need at least 1 dimension, got ", shape_str(a_in.shape()),
         " and ", shape_str(b_in.shape()));
  if (a_in.dtype() != b_in.dtype())
    fail("matmul", "expected both arguments to have the same dtype, got ", dtype_name(a_in.dtype()),
         " and ", dtype_name(b_in.dtype()));
  if (is_reduced_float(a_in.dtype())) {  // float accumulation, one rounding (detail::widen)
    if (auto y = times_half_matrix(a_in, b_in)) return *y;
    AutocastGuard off(std::nullopt);
    return matmul(detail::widen(a_in), detail::widen(b_in)).to(a_in.dtype());
  }
  if (a_in.dtype() == Dtype::Bool)
    fail("matmul", "not implemented for bool tensors ", shape_str(a_in.shape()), " and ",
         shape_str(b_in.shape()));
  namespace be = backend;
  const auto kernel =
      be::pick("matmul", a_in.device(), a_in.dtype(), be::cpu::matmul, be::cuda::matmul);
  Tensor a = a_in, b = b_in;
  const bool a1 = a.dim() == 1, b1 = b.dim() == 1;
  if (a1) a = a.unsqueeze(0);
  if (b1) b = b.unsqueeze(-1);
  const int64_t M = a.size(-2), K = a.size(-1), K2 = b.size(-2), N = b.size(-1);
  if (K != K2)
    fail("matmul", "shapes ", shape_str(a_in.shape()), " and ", shape_str(b_in.shape()),
         " cannot be multiplied (", M, "x", K, " and ", K2, "x", N, ")");
  Shape ba(a.shape().begin(), a.shape().end() - 2), bb(b.shape().begin(), b.shape().end() - 2);
  Shape batch;
  try {
    batch = broadcast_shapes(ba, bb, "matmul");
  } catch (const Error&) {
    fail("matmul", "batch dims of ", shape_str(a_in.shape()), " and ", shape_str(b_in.shape()),
         " cannot be broadcast together");
  }
  Shape out_shape = batch;
  out_shape.push_back(M);
  out_shape.push_back(N);
  // A long dot product: the backend's dot (several accumulators), as torch.dot, where it has one.
  const auto dot_kernel = a1 && b1 && K > 64
                              ? be::find(a_in.device(), a_in.dtype(), be::cpu::dot, be::cuda::dot)
                              : nullptr;
  // The CPU's kernels write every element (K = 0 included): out is not cleared (make_tensor).
  Tensor out =
      detail::make_tensor("matmul", out_shape, a.dtype(), !a.device().is_cpu(), a.device());
  if (dot_kernel) {
    const int64_t bytes = int64_t(itemsize(a.dtype()));
    dot_kernel(
        {static_cast<const char*>(a_in.impl()->storage->data) + a_in.storage_offset() * bytes,
         static_cast<const char*>(b_in.impl()->storage->data) + b_in.storage_offset() * bytes,
         a_in.stride(0), b_in.stride(0), K, out.raw_data()});
    return record_matmul(out.view({}), "DotBackward0", a_in, b_in);
  }
  batched_matmul(kernel, a, b, batch, out);
  Shape final_shape = batch;
  if (!a1) final_shape.push_back(M);
  if (!b1) final_shape.push_back(N);
  // PyTorch's node names for the matmul variants (2.x: 1-D @ 2-D is a squeezed mm).
  // A 2-D a that requires grad times a batched b is folded into one mm of b.mT() and a.t(),
  // transposed back and made contiguous: a clone, unless the transposed result is contiguous.
  const bool folded_2d = a_in.dim() == 2 && b_in.dim() >= 3 && a_in.requires_grad();
  const char* node = a1 && b1                             ? "DotBackward0"
                     : a1 && b_in.dim() == 2              ? "SqueezeBackward4"
                     : a_in.dim() == 2 && b1              ? "MvBackward0"
                     : a_in.dim() == 2 && b_in.dim() == 2 ? "MmBackward0"
                     : folded_2d && (M == 1 || N == 1)    ? "TransposeBackward0"
                     : folded_2d                          ? "CloneBackward0"
                                                          : "UnsafeViewBackward0";
  return record_matmul(out.view(final_shape), node, a_in, b_in);
}

Tensor Tensor::matmul(const Tensor& other) const { return attn::matmul(*this, other); }

Tensor dot(const Tensor& a, const Tensor& b) {
  if (a.dim() != 1 || b.dim() != 1)
    fail("dot", "1D tensors expected, but got ", a.dim(), "D and ", b.dim(), "D tensors ",
         shape_str(a.shape()), " and ", shape_str(b.shape()));
  if (a.numel() != b.numel())
    fail("dot", "inconsistent tensor size, expected tensor ", shape_str(a.shape()), " and src ",
         shape_str(b.shape()), " to have the same number of elements");
  if (a.dtype() != b.dtype())
    fail("dot", "expected both vectors to have same dtype, but found ", dtype_name(a.dtype()),
         " and ", dtype_name(b.dtype()));
  return matmul(a, b);
}
Tensor Tensor::dot(const Tensor& other) const { return attn::dot(*this, other); }

Tensor outer(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined()) fail("outer", "undefined tensor argument");
  if (a.dim() != 1 || b.dim() != 1)
    fail("outer", "expected 1-D vectors, got ", shape_str(a.shape()), " and ",
         shape_str(b.shape()));
  // As torch: a broadcast product, each element a[i] * b[j] rounded once (autograd through mul).
  return a.unsqueeze(1) * b.unsqueeze(0);
}
Tensor Tensor::outer(const Tensor& other) const { return attn::outer(*this, other); }

Tensor cat(const std::vector<Tensor>& all, int64_t dim) {
  if (all.empty()) fail("cat", "expected a non-empty list of tensors");
  for (std::size_t i = 0; i < all.size(); ++i)
    if (!all[i].defined()) fail("cat", "undefined tensor at position ", i);
  // As torch: 1-D empty tensors (shape (0,)) are skipped, whatever the others' shapes, but
  // still take part in the result dtype.
  Dtype dt = all[0].dtype();
  std::vector<Tensor> ts;
  for (const auto& t : all) {
    dt = detail::promote(dt, t.dtype());
    if (!(t.dim() == 1 && t.numel() == 0)) ts.push_back(t);
  }
  if (ts.empty()) return detail::make_tensor({0}, dt);
  const Tensor& first = ts[0];
  if (first.dim() == 0) fail("cat", "zero-dimensional tensor cannot be concatenated");
  int64_t d = detail::wrap_dim(dim, first.dim(), "cat");
  Shape shape = first.shape();
  int64_t total = 0;
  for (std::size_t i = 0; i < ts.size(); ++i) {
    const Tensor& t = ts[i];
    if (t.dim() != first.dim())
      fail("cat", "tensors must have the same number of dimensions: got ", shape_str(first.shape()),
           " and ", shape_str(t.shape()));
    for (int64_t k = 0; k < t.dim(); ++k)
      if (k != d && t.shape()[k] != shape[k])
        fail("cat", "sizes of tensors must match except in dimension ", d, ": got ",
             shape_str(first.shape()), " and ", shape_str(t.shape()));
    total += t.shape()[d];
  }
  shape[d] = total;
  Tensor out = detail::make_tensor("cat", shape, dt, /*zero=*/false);  // the copies cover it
  {
    NoGradGuard no_grad;  // the copies into the result are internal
    int64_t at = 0;
    for (const auto& t : ts) {
      out.slice(d, at, at + t.shape()[d]).copy_(t);
      at += t.shape()[d];
    }
  }
  // Each input's gradient is its slice of the result's (skipped 1-D empty inputs get empty ones).
  std::vector<const Tensor*> inputs;
  std::vector<int64_t> starts, lengths;
  int64_t at = 0;
  for (const auto& t : all) {
    inputs.push_back(&t);
    const bool skipped = t.dim() == 1 && t.numel() == 0;
    starts.push_back(skipped ? -1 : at);
    lengths.push_back(skipped ? 0 : t.shape()[d]);
    if (!skipped) at += t.shape()[d];
  }
  return detail::record(
      out, "CatBackward0", inputs, [d, starts, lengths](const Node& n, const Tensor& g) {
        std::vector<Tensor> grads(starts.size());
        for (std::size_t i = 0; i < starts.size(); ++i) {
          if (!n.needs_input_grad(i)) continue;
          grads[i] = starts[i] < 0 ? zeros({0}) : g.narrow(d, starts[i], lengths[i]);
        }
        return grads;
      });
}

Tensor stack(const std::vector<Tensor>& ts, int64_t dim) {
  if (ts.empty()) fail("stack", "expected a non-empty list of tensors");
  for (std::size_t i = 0; i < ts.size(); ++i)
    if (!ts[i].defined()) fail("stack", "undefined tensor at position ", i);
  int64_t d = detail::wrap_dim(dim, ts[0].dim() + 1, "stack");
  std::vector<Tensor> us;
  for (std::size_t i = 0; i < ts.size(); ++i) {
    if (ts[i].shape() != ts[0].shape())
      fail("stack", "stack expects each tensor to be equal size, but got ",
           shape_str(ts[0].shape()), " at entry 0 and ", shape_str(ts[i].shape()), " at entry ", i);
    us.push_back(ts[i].unsqueeze(d));
  }
  std::vector<const Tensor*> inputs;
  for (const auto& t : ts) inputs.push_back(&t);
  Tensor out;
  {
    NoGradGuard no_grad;
    out = cat(us, d);
  }
  // Input i's gradient is the result's gradient at index i along the new dim.
  return detail::record(out, "StackBackward0", inputs, [d](const Node& n, const Tensor& g) {
    std::vector<Tensor> grads(n.inputs.size());
    for (std::size_t i = 0; i < grads.size(); ++i)
      if (n.needs_input_grad(i)) grads[i] = g.select(d, int64_t(i));
    return grads;
  });
}

void set_num_threads(int n) {
  if (n < 1) fail("set_num_threads", "expected a positive number of threads, got ", n);
  kernels::set_num_threads(n);
}

int get_num_threads() { return kernels::num_threads(); }

}  // namespace attn

// Ring attention's merge of partial results (attention_internal.h, merge_partial).
#include "../backend/attention_kernels.h"
#include "../tensor/internal.h"
#include "attention_internal.h"

namespace attn::sdpa_detail {

void merge_partial(Tensor& out, Tensor& lse, const Tensor& out_p, const Tensor& lse_p,
                   int64_t start, const char* fn) {
  detail::check_same_device(fn, {&out, &lse, &out_p, &lse_p});
  for (const Tensor* t : std::initializer_list<const Tensor*>{&out, &lse, &out_p, &lse_p})
    if (t->dtype() != out.dtype() || !t->is_contiguous())
      detail::fail(fn, "expected contiguous tensors of one dtype, got ", detail::tensor_desc(*t));
  const auto kernel = backend::pick(fn, out.device(), out.dtype(), backend::cpu::sdpa_merge,
                                    backend::cuda::sdpa_merge);
  const bool ranks = out.dim() == 4 && lse.dim() == 3 && out_p.dim() == 4 && lse_p.dim() == 3;
  const int64_t BH = ranks ? lse_p.size(0) * lse_p.size(1) : 0, n = ranks ? lse_p.size(2) : 0;
  const int64_t L = ranks ? lse.size(2) : 0;
  if (!ranks || lse.size(0) * lse.size(1) != BH || out_p.size(2) != n ||
      out_p.size(3) != out.size(3) || start < 0 || start + n > L)
    detail::fail(fn, "partial result ", detail::tensor_desc(out_p), " and ",
                 detail::tensor_desc(lse_p), " at row ", start, " do not fit ",
                 detail::tensor_desc(out), " and ", detail::tensor_desc(lse));
  kernel({out.device_data(), lse.device_data(), out_p.device_data(), lse_p.device_data(), BH, n, L,
          out.size(3), start});
}

}  // namespace attn::sdpa_detail

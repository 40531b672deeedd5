// Tensor::repr and operator<<: a tensor as torch prints it, its CPU copy formatted by print.cpp
// with the suffixes for its device, grad_fn or requires_grad.
#include <attn/autograd.h>
#include <attn/print.h>
#include <attn/tensor.h>

#include <ostream>

namespace attn {

std::string Tensor::repr() const {
  if (!defined()) return "tensor(undefined)";
  Tensor c;
  {
    NoGradGuard no_grad;
    c = cpu().contiguous();
  }
  std::vector<std::string> suffixes;
  if (is_cuda()) suffixes.push_back("device='" + device().str() + "'");
  if (auto fn = grad_fn(*this))
    suffixes.push_back("grad_fn=<" + fn->name + ">");
  else if (requires_grad())
    suffixes.push_back("requires_grad=True");
  return format_tensor(c.shape(), c.dtype(), c.raw_data(), suffixes);
}

std::ostream& operator<<(std::ostream& os, const Tensor& t) { return os << t.repr(); }

}  // namespace attn

// complex_mul: the complex64 product on float32 (real, imaginary) pairs, and its gradients.
#include <attn/autograd.h>
#include <attn/ops.h>

#include "../backend/elementwise_kernels.h"
#include "../tensor/internal.h"

namespace attn {

using detail::fail;

namespace {

// The complex shape of a tensor of pairs, after checking it is one.
Shape complex_shape(const Tensor& t, const char* what) {
  if (!t.defined()) fail("complex_mul", what, " is an undefined tensor");
  if (t.dtype() != Dtype::Float32 || t.dim() == 0 || t.size(-1) != 2)
    fail("complex_mul", what, " must be float32 (real, imaginary) pairs in a last dim of 2, got ",
         detail::tensor_desc(t));
  Shape s = t.shape();
  s.pop_back();
  return s;
}

// Its operand: the strides between pairs, broadcast to `shape` (the pair's floats adjacent).
backend::StridedOperand pairs_of(const Tensor& t, const Shape& shape, Shape& strides) {
  Shape full = shape;
  full.push_back(2);
  strides = detail::broadcast_strides(t, full);
  strides.pop_back();
  return {t.impl()->storage->data, t.storage_offset(), &strides};
}

}  // namespace

Tensor complex_mul(const Tensor& a, const Tensor& b, bool conj_b) {
  const char* fn = "complex_mul";
  const Shape s = broadcast_shapes(complex_shape(a, "a"), complex_shape(b, "b"), fn);
  detail::check_same_device(fn, {&a, &b});
  const auto kernel = backend::pick(fn, a.device(), Dtype::Float32, backend::cpu::complex_mul,
                                    backend::cuda::complex_mul);
  Shape full = s;
  full.push_back(2);
  Tensor out = detail::make_tensor(fn, full, Dtype::Float32, /*zero=*/false, a.device());
  {
    NoGradGuard no_grad;
    // The two floats of a pair must be adjacent; a view with them apart is copied.
    const Tensor ac = a.stride(-1) == 1 ? a : a.contiguous();
    const Tensor bc = b.stride(-1) == 1 ? b : b.contiguous();
    Shape sa, sb;
    kernel({&s, pairs_of(ac, s, sa), pairs_of(bc, s, sb), conj_b, out.data_ptr<float>()});
  }
  // For a real loss, the gradient of a in a * b is g * conj(b), of b: g * conj(a); in a * conj(b),
  // of a: g * b, of b: a * conj(g). Each summed back to its operand's shape.
  return detail::record(out, "MulBackward0", {&a, &b},
                        [conj_b, sa = a.shape(), sb = b.shape()](const Node& n, const Tensor& g) {
                          const Tensor x = n.saved_tensor(0), y = n.saved_tensor(1);
                          Tensor ga, gb;
                          if (n.needs_input_grad(0))
                            ga = detail::sum_to(complex_mul(g, y, !conj_b), sa);
                          if (n.needs_input_grad(1))
                            gb = detail::sum_to(
                                conj_b ? complex_mul(x, g, true) : complex_mul(g, x, true), sb);
                          return std::vector<Tensor>{ga, gb};
                        },
                        {a, b});
}

}  // namespace attn

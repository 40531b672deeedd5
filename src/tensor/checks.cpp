// The checks ops run on their tensor operands, with their messages: on one device
// (check_same_device), on the CPU (check_cpu, check_cpu_operands), float32 (check_float32), not
// bfloat16 or float16 (check_not_reduced), read as their own element type (fail_base_ptr); and
// tensor_desc, a tensor as messages name it.
#include "internal.h"

namespace attn::detail {

void check_cpu(const Tensor& t, const char* fn) {
  const Device d = t.impl()->storage->device;
  if (d.is_cpu()) return;
  const std::string dtype = dtype_name(t.dtype()).substr(6);  // "float32" of "torch.float32"
  throw DeviceError(msg(fn, "expected a tensor on the CPU, got a ", dtype, " tensor on ", d.str(),
                        ": this operation has no CUDA implementation for ", dtype,
                        " (move the tensor with .cpu() first)"));
}

const Tensor* check_same_device(const char* fn, std::initializer_list<const Tensor*> ts) {
  const Tensor* first = nullptr;
  for (const Tensor* t : ts) {
    if (!t->defined()) continue;
    if (first && t->device() != first->device())
      throw DeviceError(msg(fn, "expected all tensors on the same device, got ",
                            first->device().str(), " and ", t->device().str()));
    if (!first) first = t;
  }
  return first;
}

void check_cpu_operands(const char* fn, std::initializer_list<const Tensor*> ts) {
  if (const Tensor* first = check_same_device(fn, ts)) check_cpu(*first, fn);
}

void check_float32(const Tensor& t, const char* what, const char* fn) {
  if (!t.defined()) fail(fn, what, " is an undefined tensor");
  if (t.dtype() != Dtype::Float32)
    fail(fn, what, " must be float32, got ", dtype_name(t.dtype()), " ", shape_str(t.shape()),
         is_reduced_float(t.dtype())
             ? " (bfloat16 and float16 are supported for storage and conversion; call .float())"
             : "");
}

void check_not_reduced(const Tensor& t, const char* fn) {
  if (t.defined() && is_reduced_float(t.dtype())) fail_reduced(t.dtype(), fn);
}

void fail_base_ptr(Dtype have, Dtype want) {
  fail("data_ptr", "internal: a ", dtype_name(have), " tensor read as ", dtype_name(want));
}

std::string tensor_desc(const Tensor& t) {
  return shape_str(t.shape()) + " " + dtype_name(t.dtype()).substr(6);
}

}  // namespace attn::detail

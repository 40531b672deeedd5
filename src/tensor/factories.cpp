// The creation functions: tensor() from nested values, from_vector, empty, zeros, ones, full, the
// *_like forms, arange and from_blob; and Scalar's conversion to int64, which shares tensor()'s
// range check.
#include <attn/ops.h>
#include <attn/tensor.h>

#include <algorithm>
#include <cmath>
#include <memory>

#include "internal.h"
#include "local.h"

namespace attn {

namespace {
// Whether truncating d towards zero gives an int64 (false for NaN and infinities).
bool fits_int64(double d) { return d >= -9223372036854775808.0 && d < 9223372036854775808.0; }
}  // namespace

int64_t Scalar::float_to_int(double v) {
  if (!fits_int64(v))
    detail::fail("Scalar", "value ", v, " cannot be converted to type int64 without overflow");
  return int64_t(v);
}

using detail::check_shape;
using detail::fail;

namespace {

void nested_shape(const NestedList& l, int64_t depth, Shape& shape, bool& any_float,
                  bool& all_bool) {
  if (l.is_leaf()) {
    if (depth != int64_t(shape.size()))
      fail("tensor", "expected a sequence at depth ", depth, " but found a number");
    any_float |= l.scalar().kind() == Scalar::Kind::Float;
    all_bool &= l.scalar().kind() == Scalar::Kind::Bool;
    return;
  }
  int64_t n = int64_t(l.items().size());
  if (depth == int64_t(shape.size())) {
    shape.push_back(n);
  } else if (depth > int64_t(shape.size()) || shape[depth] != n) {
    fail("tensor", "expected sequence of length ", depth < int64_t(shape.size()) ? shape[depth] : 0,
         " at dim ", depth, " (got ", n, ")");
  }
  for (const auto& it : l.items()) nested_shape(it, depth + 1, shape, any_float, all_bool);
}

// An element of an int64 tensor: floats are truncated (as torch) but must fit, NaN and inf do not
// (torch: "value cannot be converted to type int64 without overflow").
int64_t nested_int(const Scalar& s) {
  if (s.kind() == Scalar::Kind::Float && !fits_int64(s.to_double()))
    fail("tensor", "value ", s.to_double(), " cannot be converted to type int64 without overflow");
  return s.to_int();
}

template <typename T>
void nested_fill(const NestedList& l, T*& out) {
  if (l.is_leaf()) {
    if constexpr (std::is_same_v<T, bool>)
      *out++ = l.scalar().to_double() != 0;
    else if constexpr (std::is_same_v<T, int64_t>)
      *out++ = nested_int(l.scalar());
    else if constexpr (detail::is_half_type<T>)
      *out++ = T(float(l.scalar().to_double()));  // double -> float -> 2 bytes, as torch.tensor
    else
      *out++ = T(l.scalar().to_double());
    return;
  }
  for (const auto& it : l.items()) nested_fill(it, out);
}

}  // namespace

Tensor tensor(const NestedList& data, std::optional<Dtype> dtype, const Device& device) {
  if (!device.is_cpu()) {
    const Device dev = resolve_device(device, "tensor");
    return tensor(data, dtype).to(dev);
  }
  Shape shape;
  bool any_float = false, all_bool = true;
  // First pass fixes the shape from the first path; a leaf at the top is a 0-dim tensor.
  {
    const NestedList* p = &data;
    while (!p->is_leaf()) {
      shape.push_back(int64_t(p->items().size()));
      if (p->items().empty()) break;
      p = &p->items()[0];
    }
  }
  Shape checked;
  nested_shape(data, 0, checked, any_float, all_bool);
  if (checked != shape) fail("tensor", "ragged nested sequence: expected shape ", shape_str(shape));
  bool empty = detail::shape_numel(shape) == 0;
  Dtype dt = dtype.value_or(empty || any_float ? Dtype::Float32
                            : all_bool         ? Dtype::Bool
                                               : Dtype::Int64);
  Tensor out = detail::make_tensor("tensor", shape, dt);
  detail::dispatch_dtype(dt, [&]<typename T>() {
    T* p = out.data_ptr<T>();
    nested_fill(data, p);
  });
  return out;
}

Tensor from_vector(const std::vector<float>& values, Shape shape) {
  if (int64_t(values.size()) != detail::shape_numel(shape))
    fail("from_vector", values.size(), " values do not fill shape ", shape_str(shape));
  Tensor out = detail::make_tensor("from_vector", shape, Dtype::Float32);
  std::copy(values.begin(), values.end(), out.data_ptr<float>());
  return out;
}

Tensor empty(Shape shape, Dtype dtype, const Device& device) {
  check_shape(shape, "empty");
  return detail::make_tensor("empty", shape, dtype, /*zero=*/true, device);
}
Tensor zeros(Shape shape, Dtype dtype, const Device& device) {
  check_shape(shape, "zeros");
  return detail::make_tensor("zeros", shape, dtype, /*zero=*/true, device);
}
namespace {
Tensor full_named(const char* fn, const Shape& shape, Scalar value, std::optional<Dtype> dtype,
                  const Device& device) {
  check_shape(shape, fn);
  Dtype dt = dtype.value_or(value.kind() == Scalar::Kind::Float  ? Dtype::Float32
                            : value.kind() == Scalar::Kind::Bool ? Dtype::Bool
                                                                 : Dtype::Int64);
  Tensor out = detail::make_tensor(fn, shape, dt, /*zero=*/!device.is_cpu(), device);
  out.fill_(value);
  return out;
}
}  // namespace

Tensor ones(Shape shape, Dtype dtype, const Device& device) {
  return full_named("ones", shape, 1, dtype, device);
}
Tensor full(Shape shape, Scalar value, std::optional<Dtype> dtype, const Device& device) {
  return full_named("full", shape, value, dtype, device);
}
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.dtype(), t.device()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.dtype(), t.device()); }
Tensor empty_like(const Tensor& t) { return empty(t.shape(), t.dtype(), t.device()); }
Tensor full_like(const Tensor& t, Scalar value) {
  return full(t.shape(), value, t.dtype(), t.device());
}

Tensor arange(Scalar end) { return arange(0, end, 1); }
Tensor arange(Scalar start, Scalar end, Scalar step) {
  bool integral = !start.is_floating() && !end.is_floating() && !step.is_floating();
  double s = start.to_double(), e = end.to_double(), st = step.to_double();
  if (st == 0) fail("arange", "step must be nonzero");
  if (!std::isfinite(s) || !std::isfinite(e)) fail("arange", "unsupported range: ", s, " -> ", e);
  if ((st > 0 && e < s) || (st < 0 && e > s))
    fail("arange", "upper bound and larger bound inconsistent with step sign");
  const double count = std::ceil((e - s) / st);
  if (!(count < 9223372036854775808.0))
    throw AllocationError(detail::msg("arange", "cannot allocate a range of ", count,
                                      " elements: its number of elements overflows int64"));
  int64_t n = int64_t(count);
  if (integral) {
    Tensor out = detail::make_tensor("arange", {n}, Dtype::Int64);
    int64_t* p = out.data_ptr<int64_t>();
    for (int64_t i = 0; i < n; ++i) p[i] = start.to_int() + i * step.to_int();
    return out;
  }
  Tensor out = detail::make_tensor("arange", {n}, Dtype::Float32);
  float* p = out.data_ptr<float>();
  for (int64_t i = 0; i < n; ++i) p[i] = float(s + double(i) * st);
  return out;
}

Tensor from_blob(void* data, Shape shape, Shape strides, Dtype dtype, std::shared_ptr<void> owner) {
  if (shape.size() != strides.size())
    fail("from_blob", "shape ", shape_str(shape), " and strides ", shape_str(strides),
         " differ in length");
  auto st = std::make_shared<Storage>();
  st->data = data;
  int64_t span = 1;
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (strides[i] < 0) fail("from_blob", "negative strides are not supported");
    if (shape[i] == 0) span = 0;
    if (span) span += (shape[i] - 1) * strides[i];
  }
  st->nbytes = std::size_t(span) * itemsize(dtype);
  st->owner = std::move(owner);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = st;
  impl->sizes = std::move(shape);
  impl->strides = std::move(strides);
  impl->dtype = dtype;
  return Tensor(impl);
}

}  // namespace attn

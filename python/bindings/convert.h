// Conversions between Python values (numbers, nested lists, NumPy arrays, torch-style keyword
// arguments) and attn's types, shared by the binding files. Errors are attn::Error (ValueError) or
// attn::IndexError (IndexError), translated in module.cpp, or pybind11's TypeError.
#pragma once

#include <attn/attn.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <initializer_list>
#include <optional>

namespace attn::python {

namespace py = pybind11;

// ---- Python values -> C++ -----------------------------------------------------------------------

// A Python bool / int / float, a one-element tensor or a NumPy scalar as a Scalar.
Scalar to_scalar(const py::handle& h);
// Whether h is a number to_scalar takes as such (not a tensor, not an array with dimensions).
bool is_number(const py::handle& h);
// Nested lists / tuples of numbers (or tensors) as attn::tensor's NestedList.
NestedList to_nested(const py::handle& h);
// attn.float32 / int64 / bool, or nullopt for None.
std::optional<Dtype> to_dtype(const py::object& o);
// An integer index or size (Python int, NumPy integer, anything with __index__); floats and bools
// are refused (attn::Error for sizes, attn::IndexError for indices).
int64_t to_index_int(const py::handle& h, bool is_size = false);
// Python-style size arguments: f(2, 3), f((2, 3)), f([2, 3]), f(size=(2, 3)).
// Python-style size arguments: f(2, 3), f((2, 3)), f([2, 3]), f(size=(2, 3)). `creating` names a
// creation function (zeros, ...): a size that cannot be allocated is then left to it, which raises
// AllocationError (RuntimeError, as torch.zeros does), except one whose element count overflows
// int64, refused here in the same words.
Shape to_shape(const py::args& args, const py::kwargs& kwargs, const char* creating = nullptr);
// None -> an undefined tensor (the C++ API's "not given"), otherwise the tensor.
Tensor optional_tensor(const py::object& o);
// None -> nullptr (the default generator), otherwise the attn.Generator's C++ object.
Generator* gen_arg(const py::object& g);

// ---- NumPy and Python lists ---------------------------------------------------------------------

// Zero-copy view of a NumPy array when its dtype is one of ours (and it is writable); float64 and
// other dtypes are converted, a copy.
Tensor from_numpy(py::array arr);
// A NumPy array viewing the tensor's memory (it keeps the tensor alive).
py::array to_numpy(const Tensor& t);
// Tensor.tolist(): nested lists of Python numbers (a number for a 0-dim tensor).
py::object to_list(const Tensor& t);
// attn.tensor(data, dtype, requires_grad): a copy of a tensor, an array or nested lists.
Tensor make_tensor(const py::object& data, const py::object& dtype, bool requires_grad);

// ---- torch's factory keyword arguments ----------------------------------------------------------

// The keyword arguments torch's factory functions take: size, dtype, device, requires_grad and
// (random ones) generator. Anything else is an error rather than silently ignored.
struct FactoryKwargs {
  py::kwargs size;  // {"size": ...} when given by keyword
  std::optional<Dtype> dtype;
  std::optional<Device> device;  // device=: the tensor is made on the CPU and moved there
  bool requires_grad = false;
  Generator* generator = nullptr;

  // The size given positionally (a) or by keyword; TypeError naming fn when there is none.
  // float32_only: a dtype other than float32 is an error (rand, randn).
  Shape shape(const py::args& a, const char* fn, bool float32_only = false) const;
  // t, moved to device= and made to require grad when requires_grad=True was given.
  Tensor finish(Tensor t) const;
};

// Reads k for factory function fn; `random` allows generator=, `extra` names keywords the caller
// reads itself.
FactoryKwargs factory_kwargs(const py::kwargs& k, const char* fn, bool random,
                             std::initializer_list<const char*> extra = {});

}  // namespace attn::python

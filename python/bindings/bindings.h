// attn._C, laid out like the Python package attn (python/attn) that builds torch's surface on top
// of it. Each file binds one area and exposes one register_<area>(module); module.cpp holds
// PYBIND11_MODULE and calls them in order. Conversions between Python values and attn's types,
// shared by several areas, are in convert.h.
//
// The GIL. Calls that take real time (attention, matmul, softmax, the nn layers, backward(), the
// modules' forward passes, generation, optimizer steps) release the GIL while the C++ library
// works, so several Python threads can run them at once: `release` where the function touches no
// Python object (pybind11 converts the arguments before and the result after the guard), and an
// explicit py::gil_scoped_release around the library call where the arguments are Python objects.
// What the library guarantees across threads is in README.md ("Thread safety").
#pragma once

#include <pybind11/pybind11.h>

namespace attn::python {

namespace py = pybind11;

// Releases the GIL around the bound C++ function (arguments and result converted with it held).
using release = py::call_guard<py::gil_scoped_release>;

// f() with the GIL released, for a binding that reads its Python arguments first (f must not
// touch a Python object).
template <typename F>
auto without_gil(F&& f) {
  py::gil_scoped_release released;
  return f();
}

void register_tensor(py::module_& m);      // attn.dtype, attn.Tensor (tensor.cpp)
void register_random(py::module_& m);      // attn.Generator, seeds, rand / randn / randint
void register_ops(py::module_& m);         // attn.tensor, zeros, ..., softmax, matmul, where, cat
void register_ops_select(py::module_& m);  // multinomial, topk, sort, clamp, gather, split, ...
void register_functional(py::module_& m);  // attn.nn.functional (_C.functional)
void register_nn(py::module_& m);          // attn.nn.init and the C++ modules (_C.init, _C.modules)
void register_optim(py::module_& m);       // attn.optim (_C.optim)
void register_distributed(py::module_& m);  // attn.distributed (_C.distributed)
void register_io(py::module_& m);           // attn.save / attn.load: PyTorch's format (_C.io)
void register_hf(py::module_& m);  // attn.data.BpeTokenizer, GPT.from_pretrained (_C.data, _C.hf)

}  // namespace attn::python

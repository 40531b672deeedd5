// attn._C, laid out like the Python package attn (python/attn) that builds torch's surface on top
// of it. Each file binds one area and exposes one register_<area>(module); module.cpp holds
// PYBIND11_MODULE and calls them in order. Conversions between Python values and attn's types,
// shared by several areas, are in convert.h.
//
// The GIL. As in torch, every call whose C++ work grows with the tensors' sizes releases the GIL
// while the library works, so several Python threads can run them at once: elementwise math and
// comparisons (in place too), reductions, copies and conversions, creation and random fills,
// indexing, attention, matmul, the nn layers, backward(), the modules' forward passes, generation
// and optimizer steps. `release` where the function touches no Python object (pybind11 converts
// the arguments before and the result after the guard); where the arguments are Python objects,
// they are converted first and only the library call runs in without_gil. Calls whose work is
// O(1) or O(ndim) (metadata, views, grad mode) keep it, and so do those that build or read Python
// objects element by element (tolist, attn.tensor(list), from_numpy, NumPy conversions) and
// __repr__ (the print options are set under the GIL). Code without the GIL may still drop the
// last reference to a tensor viewing a NumPy array: that array is released under
// py::gil_scoped_acquire (convert.cpp), so no C++ lock may be held meanwhile (see set_grad).
// What the library guarantees across threads is in docs/threads.md.
#pragma once

#include <pybind11/pybind11.h>

namespace attn::python {

namespace py = pybind11;

// Releases the GIL around the bound C++ function (arguments and result converted with it held).
using release = py::call_guard<py::gil_scoped_release>;

// f() with the GIL released, for a binding that reads its Python arguments first (f must not
// touch a Python object). A reference f returns (an in-place method's Tensor&) stays a reference.
template <typename F>
decltype(auto) without_gil(F&& f) {
  py::gil_scoped_release released;
  return f();
}

void register_tensor(py::module_& m);      // attn.dtype, attn.Tensor (tensor.cpp)
void register_random(py::module_& m);      // attn.Generator, seeds, rand / randn / randint
void register_autograd(py::module_& m);    // attn.autograd's engine calls (_C.autograd)
void register_ops(py::module_& m);         // attn.tensor, zeros, ..., softmax, matmul, where, cat
void register_ops_select(py::module_& m);  // multinomial, topk, sort, clamp, gather, split, ...
void register_functional(py::module_& m);  // attn.nn.functional (_C.functional)
void register_flex(py::module_& m);        // attn._C.flex: flex_attention's tracer and kernels
void register_nn(py::module_& m);          // attn.nn.init and the C++ modules (_C.init, _C.modules)
void register_optim(py::module_& m);       // attn.optim (_C.optim)
void register_distributed(py::module_& m);  // attn.distributed (_C.distributed)
void register_io(py::module_& m);           // attn.save / attn.load: PyTorch's format (_C.io)
void register_hf(py::module_& m);  // attn.data.BpeTokenizer, GPT.from_pretrained (_C.data, _C.hf)
void register_decoder(py::module_& m);  // attn.nn.Decoder, its from_pretrained (_C.decoder)
void register_train(py::module_& m);    // attn.train.train: the loop of `attn train` (_C.train)

}  // namespace attn::python

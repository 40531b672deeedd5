// attn._C: thin pybind11 bindings over the C++ API. The Python package attn (python/attn) builds
// torch's surface (Size, nn.Module, Parameter, ...) on top of these; each area of it has its file
// here (bindings.h lists them).
#include <attn/attn.h>
#include <pybind11/pybind11.h>

#include "bindings.h"

namespace py = pybind11;

PYBIND11_MODULE(_C, m) {
  m.doc() = "attn: attention in C++ with a PyTorch-like surface";

  // Error translation for every area. pybind11 tries exception translators in reverse order of
  // registration, so the base class (Error -> ValueError) goes first and its subclasses
  // (IndexError -> IndexError, AllocationError -> RuntimeError, as PyTorch's "DefaultCPUAllocator:
  // can't allocate memory") after it; attn.distributed adds DistributedError (RuntimeError).
  py::register_exception<attn::Error>(m, "AttnError", PyExc_ValueError);
  py::register_exception<attn::IndexError>(m, "AttnIndexError", PyExc_IndexError);
  py::register_exception<attn::AllocationError>(m, "AllocationError", PyExc_RuntimeError);
  py::register_exception<attn::DeviceError>(m, "DeviceError", PyExc_RuntimeError);
  py::register_exception<attn::NotImplementedError>(m, "AttnNotImplementedError",
                                                    PyExc_NotImplementedError);

  // In dependency order: a signature names the Python class of a type registered before it.
  attn::python::register_tensor(m);
  attn::python::register_random(m);
  attn::python::register_autograd(m);
  attn::python::register_ops(m);
  attn::python::register_ops_select(m);
  attn::python::register_functional(m);
  attn::python::register_flex(m);  // after ops: adds traced overloads to abs, exp, ...
  attn::python::register_nn(m);
  attn::python::register_distributed(m);
  attn::python::register_optim(m);
  attn::python::register_io(m);
  attn::python::register_hf(m);
  attn::python::register_decoder(m);
  attn::python::register_train(m);
}

// attn.dtype and attn.Tensor: metadata, autograd, NumPy interop, views, indexing, math methods and
// operators. The Python package adds the rest of torch's Tensor surface (size(), to(), grad_fn).
#include <attn/attn.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "convert.h"

namespace attn::python {

namespace {

Shape to_dims(const py::object& o) {
  Shape dims;
  if (py::isinstance<py::int_>(o)) {
    dims.push_back(o.cast<int64_t>());
  } else {
    for (auto h : o) dims.push_back(h.cast<int64_t>());
  }
  return dims;
}

// Index expressions: x[1], x[b, :t+1], x[..., None], x[idx_tensor].
TensorIndex to_index(const py::handle& h) {
  if (h.is_none()) return TensorIndex(std::nullopt);
  if (h.ptr() == Py_Ellipsis) return TensorIndex(indexing::Ellipsis);
  if (py::isinstance<py::slice>(h)) {
    auto sl = h.cast<py::slice>();
    auto get = [&](const char* name) -> std::optional<int64_t> {
      py::object v = sl.attr(name);
      if (v.is_none()) return std::nullopt;
      return to_index_int(v);
    };
    return TensorIndex(indexing::Slice(get("start"), get("stop"), get("step")));
  }
  if (py::isinstance<Tensor>(h)) return TensorIndex(h.cast<Tensor>());
  if (py::isinstance<py::list>(h)) return TensorIndex(tensor(to_nested(h)));
  if (py::isinstance<py::bool_>(h))
    throw Error("[index] indexing with a Python bool is not supported");
  return TensorIndex((long long)to_index_int(h));
}

std::vector<TensorIndex> to_indices(const py::object& key) {
  std::vector<TensorIndex> out;
  if (py::isinstance<py::tuple>(key)) {
    for (auto h : key) out.push_back(to_index(h));
  } else {
    out.push_back(to_index(key));
  }
  // torch broadcasts several index tensors together (x[rows, cols]); attn takes them on adjacent
  // dims (Tensor::index merges those dims), not separated by other indices.
  int tensors = 0, first = -1, last = -1;
  for (int i = 0; i < int(out.size()); ++i) {
    const auto& ix = out[std::size_t(i)];
    if (ix.kind() == TensorIndex::Kind::Tensor && ix.tensor().defined() && ix.tensor().dim() > 0) {
      ++tensors;
      if (first < 0) first = i;
      last = i;
    }
  }
  if (tensors > 1 && last - first + 1 != tensors) {
    std::string version = py::str(py::module_::import("attn").attr("__version__"));
    PyErr_SetString(PyExc_NotImplementedError,
                    ("index tensors or lists separated by other indices (x[rows, :, cols]) are "
                     "not supported by attn " +
                     version + "; index one dim at a time or use gather")
                        .c_str());
    throw py::error_already_set();
  }
  return out;
}

Tensor as_tensor_like(const py::object& o, const Tensor& like) {
  if (py::isinstance<Tensor>(o)) return o.cast<Tensor>();
  if (py::isinstance<py::array>(o)) return from_numpy(o.cast<py::array>());
  if (py::isinstance<py::list>(o) || py::isinstance<py::tuple>(o)) return tensor(to_nested(o));
  Scalar s = to_scalar(o);
  return full({}, s, like.dtype());
}

// Binary operator with a tensor or a Python number on the right: the operand converted with the
// GIL, the op without it.
template <typename TT, typename TS>
py::object binop(const Tensor& a, const py::object& b, TT tt, TS ts) {
  if (py::isinstance<Tensor>(b)) {
    const Tensor& y = b.cast<const Tensor&>();
    return py::cast(without_gil([&] { return tt(a, y); }));
  }
  if (is_number(b)) {
    const Scalar y = to_scalar(b);
    return py::cast(without_gil([&] { return ts(a, y); }));
  }
  if (py::isinstance<py::array>(b)) {
    const Tensor y = from_numpy(b.cast<py::array>());
    return py::cast(without_gil([&] { return tt(a, y); }));
  }
  return py::reinterpret_borrow<py::object>(Py_NotImplemented);
}

Tensor sum_like(const Tensor& t, const py::object& dim, bool keepdim, const py::object& axis,
                int which) {
  py::object d = dim.is_none() ? axis : dim;
  const std::optional<Shape> dims = d.is_none() ? std::nullopt : std::optional<Shape>(to_dims(d));
  return without_gil([&] {
    if (!dims) {
      if (which == 0) return keepdim ? t.sum({}, true) : t.sum();
      return keepdim ? t.mean({}, true) : t.mean();
    }
    return which == 0 ? t.sum(*dims, keepdim) : t.mean(*dims, keepdim);
  });
}

Tensor var_like(const Tensor& t, const py::object& dim, const py::object& unbiased, bool keepdim,
                const py::object& correction, const py::object& axis) {
  bool unb = true;
  if (!unbiased.is_none()) unb = unbiased.cast<bool>();
  if (!correction.is_none()) {
    auto c = correction.cast<int64_t>();
    if (c != 0 && c != 1) throw Error("[var] only correction 0 or 1 is supported");
    unb = c == 1;
  }
  py::object d = dim.is_none() ? axis : dim;
  const Shape dims = d.is_none() ? Shape{} : to_dims(d);
  return without_gil([&] { return t.var(dims, unb, keepdim); });
}

py::object max_like(const Tensor& t, const py::object& dim, bool keepdim, bool is_max) {
  if (dim.is_none()) return py::cast(without_gil([&] { return is_max ? t.max() : t.min(); }));
  const auto d = dim.cast<int64_t>();
  auto [v, i] = without_gil([&] { return is_max ? t.max(d, keepdim) : t.min(d, keepdim); });
  py::module_ attn_mod = py::module_::import("attn");
  return attn_mod.attr("return_types").attr(is_max ? "max" : "min")(v, i);
}

py::object dtype_obj(const Tensor& t) {
  // The enum's own members, so that `x.dtype is attn.float32` holds as in torch.
  py::object cls = py::type::of<Dtype>();
  switch (t.dtype()) {
    case Dtype::Float32: return cls.attr("float32");
    case Dtype::Int64: return cls.attr("int64");
    case Dtype::Bool: return cls.attr("bool");
    case Dtype::BFloat16: return cls.attr("bfloat16");
    case Dtype::Float16: return cls.attr("float16");
  }
  return py::none();
}

Tensor& set_requires_grad(Tensor& t, bool v, const char* fn) {
  if (!v && grad_fn(t))
    throw Error(std::string("[") + fn +
                "] you can only change requires_grad flags of leaf variables; use detach() to "
                "get a tensor that does not require grad");
  return t.requires_grad_(v);
}

// A Python bool is a bool tensor to torch, and bool tensors cannot be subtracted.
const Scalar& sub_operand(const Scalar& s) {
  if (s.kind() == Scalar::Kind::Bool)
    throw Error(
        "[sub] subtraction, the `-` operator, with a bool is not supported; use ~ or "
        "logical_not() to invert a mask");
  return s;
}

}  // namespace

void register_tensor(py::module_& m) {
  py::enum_<Dtype>(m, "dtype")
      .value("float32", Dtype::Float32)
      .value("int64", Dtype::Int64)
      .value("bool", Dtype::Bool)
      .value("bfloat16", Dtype::BFloat16)
      .value("float16", Dtype::Float16)
      .def("__repr__", [](Dtype d) { return dtype_name(d); })
      .def("__str__", [](Dtype d) { return dtype_name(d); })
      .def_property_readonly("is_floating_point", [](Dtype d) { return is_floating_point(d); })
      .def_property_readonly("itemsize", [](Dtype d) { return itemsize(d); });

  // attn.cuda's queries (python/attn/cuda/__init__.py); include/attn/device.h.
  m.def("_cuda_is_built", &cuda::is_built);
  m.def("_cuda_is_available", &cuda::is_available);
  m.def("_cuda_device_count", &cuda::device_count);
  m.def("_cuda_current_device", &cuda::current_device);
  m.def("_cuda_set_device", &cuda::set_device, py::arg("device"));
  m.def("_cuda_synchronize", &cuda::synchronize, py::arg("device") = -1, release());
  m.def("_cuda_empty_cache", &cuda::empty_cache);
  m.def("_cpu_empty_cache", &cpu::empty_cache);
  m.def("_cpu_cached_bytes", &cpu::cached_bytes);
  m.def("_cuda_get_device_name", &cuda::get_device_name, py::arg("device") = -1);

  py::class_<Tensor> T(m, "Tensor", py::dynamic_attr());
  // torch.Tensor(data): a float32 copy of a list or array (a tensor argument is shared, detached;
  // nn.Parameter relies on that).
  T.def(py::init([](const py::object& data) {
          if (py::isinstance<Tensor>(data)) return data.cast<const Tensor&>().detach();
          return make_tensor(data, py::cast(Dtype::Float32), false);
        }),
        py::arg("data"))
      // Tensor(t, True): the same tensor (one autograd leaf), for parameters that C++ modules
      // use directly (attn.nn.GPT).
      .def(py::init([](const Tensor& t, bool alias) { return alias ? t : t.detach(); }),
           py::arg("data"), py::arg("alias"))
      .def("__repr__", &Tensor::repr)
      .def("__str__", &Tensor::repr)
      .def_property_readonly("_shape",
                             [](const Tensor& t) {
                               py::list l;
                               for (auto s : t.shape()) l.append(s);
                               return l;
                             })
      .def_property_readonly("dtype", &dtype_obj)
      .def_property_readonly("ndim", &Tensor::dim)
      .def("dim", &Tensor::dim)
      .def("ndimension", &Tensor::dim)
      .def("numel", &Tensor::numel)
      .def("nelement", &Tensor::numel)
      .def("element_size", [](const Tensor& t) { return itemsize(t.dtype()); })
      .def(
          "stride",
          [](const Tensor& t, const py::object& d) -> py::object {
            if (d.is_none()) return py::tuple(py::cast(t.strides()));
            return py::int_(t.stride(d.cast<int64_t>()));
          },
          py::arg("dim") = py::none())
      .def("storage_offset", &Tensor::storage_offset)
      .def("is_contiguous", &Tensor::is_contiguous)
      .def("is_floating_point", &Tensor::is_floating_point)
      .def("data_ptr", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.raw_data()); })
      .def_property(
          "requires_grad", [](const Tensor& t) { return t.requires_grad(); },
          [](Tensor& t, bool v) { set_requires_grad(t, v, "requires_grad"); })
      .def(
          "requires_grad_",
          [](Tensor& t, bool v) -> Tensor& { return set_requires_grad(t, v, "requires_grad_"); },
          py::arg("requires_grad") = true, py::return_value_policy::reference_internal)
      // A leaf is a tensor no recorded op produced (torch's is_leaf); grad_fn's name is wrapped
      // into a grad_fn object by the Python package.
      .def_property_readonly("is_leaf", [](const Tensor& t) { return grad_fn(t) == nullptr; })
      .def_property_readonly("_grad_fn_name",
                             [](const Tensor& t) -> py::object {
                               if (auto fn = grad_fn(t)) return py::str(fn->name);
                               return py::none();
                             })
      // Autograd: .grad (None until a backward pass reaches this leaf; assignable, None clears),
      // .backward() and the storage's version counter.
      .def_property(
          "grad",
          [](const Tensor& t) -> py::object {
            Tensor g = t.grad();
            if (!g.defined()) return py::none();
            return py::cast(g);
          },
          [](Tensor& t, const py::object& g) { t.set_grad(optional_tensor(g)); })
      .def(
          "backward",
          [](const Tensor& t, const py::object& gradient, const py::object& retain_graph,
             bool create_graph) {
            if (create_graph)
              throw Error("[backward] create_graph=True (higher-order gradients) is not supported");
            Tensor g = optional_tensor(gradient);
            std::optional<bool> retain;
            if (!retain_graph.is_none()) retain = retain_graph.cast<bool>();
            without_gil([&] { t.backward(g, retain); });
          },
          py::arg("gradient") = py::none(), py::arg("retain_graph") = py::none(),
          py::arg("create_graph") = false)
      .def_property_readonly("_version", &Tensor::version)
      .def("detach", &Tensor::detach)
      .def(
          "detach_",
          [](Tensor& t) -> Tensor& {
            t.impl()->autograd.reset();
            t.impl()->requires_grad = false;
            return t;
          },
          py::return_value_policy::reference_internal)
      .def_property(
          "data", [](const Tensor& t) { return t.detach(); },
          [](Tensor& t, const Tensor& v) {
            // torch swaps in v's storage; attn copies, so the shape and dtype must match.
            if (t.shape() != v.shape() || t.dtype() != v.dtype())
              throw Error("[data] cannot assign a " + dtype_name(v.dtype()) + " tensor of shape " +
                          shape_str(v.shape()) + " to the data of a " + dtype_name(t.dtype()) +
                          " tensor of shape " + shape_str(t.shape()));
            without_gil([&] { t.detach().copy_(v.detach()); });
          })
      .def("contiguous", &Tensor::contiguous, release())
      .def("clone", &Tensor::clone, release())
      .def("float", &Tensor::float_, release())
      .def("long", &Tensor::long_, release())
      .def("bool", &Tensor::bool_, release())
      .def("bfloat16", &Tensor::bfloat16, release())
      .def("half", &Tensor::half, release())
      .def(
          "_to_dtype", [](const Tensor& t, Dtype d) { return t.to(d); }, release())
      // The device as a string ("cpu", "cuda:0"); attn.Tensor.device wraps it in attn.device.
      .def_property_readonly("_device", [](const Tensor& t) { return t.device().str(); })
      .def(
          "_to_device",
          [](const Tensor& t, const std::string& device, std::optional<Dtype> dtype) {
            return t.to(Device(device), dtype.value_or(t.dtype()));
          },
          py::arg("device"), py::arg("dtype") = py::none(), release())
      .def(
          "type", [](const Tensor& t, Dtype d) { return t.to(d); }, release())
      .def("copy_", &Tensor::copy_, py::return_value_policy::reference_internal, release())
      .def(
          "fill_",
          [](Tensor& t, const py::object& v) -> Tensor& {
            const Scalar s = to_scalar(v);
            return without_gil([&]() -> Tensor& { return t.fill_(s); });
          },
          py::return_value_policy::reference_internal)
      .def("zero_", &Tensor::zero_, py::return_value_policy::reference_internal, release())
      .def("item",
           [](const Tensor& t) -> py::object {
             if (t.numel() != 1)
               throw Error("[item] a Tensor with " + std::to_string(t.numel()) +
                           " elements cannot be converted to a scalar");
             return to_list(t.reshape({}));
           })
      .def("tolist", &to_list)
      .def("numpy", &to_numpy)
      // np.asarray(t) views the tensor's memory; a dtype or copy=True asks for a copy.
      .def(
          "__array__",
          [](const Tensor& t, const py::object& dtype, const py::object& copy) -> py::object {
            py::array a = to_numpy(t);
            if (!dtype.is_none()) return a.attr("astype")(dtype);
            if (!copy.is_none() && copy.cast<bool>()) return a.attr("copy")();
            return std::move(a);
          },
          py::arg("dtype") = py::none(), py::arg("copy") = py::none())
      .def("__len__",
           [](const Tensor& t) {
             if (t.dim() == 0) throw py::type_error("len() of a 0-d tensor");
             return t.size(0);
           })
      .def("__iter__",
           [](const Tensor& t) {
             if (t.dim() == 0) throw py::type_error("iteration over a 0-d tensor");
             py::list l;
             for (int64_t i = 0; i < t.size(0); ++i) l.append(t[i]);
             return py::iter(l);
           })
      .def("__bool__",
           [](const Tensor& t) {
             if (t.numel() != 1)
               throw Error("[bool] the truth value of a tensor with " + std::to_string(t.numel()) +
                           " elements is ambiguous");
             return t.item<bool>() || t.item<double>() != 0;
           })
      .def("__float__", [](const Tensor& t) { return t.item<double>(); })
      .def("__int__", [](const Tensor& t) { return t.item<int64_t>(); })
      .def("__index__",
           [](const Tensor& t) {
             if (t.is_floating_point() || t.numel() != 1)
               throw py::type_error("only integer tensors of a single element can be an index");
             return t.item<int64_t>();
           })
      .def("__hash__", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.impl().get()); })
      // views
      .def("view", [](const Tensor& t, py::args a, py::kwargs k) { return t.view(to_shape(a, k)); })
      // reshape copies a tensor whose strides do not allow the view.
      .def("reshape",
           [](const Tensor& t, py::args a, py::kwargs k) {
             const Shape shape = to_shape(a, k);
             return without_gil([&] { return t.reshape(shape); });
           })
      .def("expand",
           [](const Tensor& t, py::args a, py::kwargs k) { return t.expand(to_shape(a, k)); })
      .def("permute",
           [](const Tensor& t, py::args a, py::kwargs k) { return t.permute(to_shape(a, k)); })
      .def("flatten", &Tensor::flatten, py::arg("start_dim") = 0, py::arg("end_dim") = -1,
           release())
      .def("transpose", &Tensor::transpose)
      .def("t",
           [](const Tensor& t) {
             if (t.dim() > 2)
               throw Error("[t] expects a tensor with <= 2 dimensions, but self is " +
                           std::to_string(t.dim()) + "D");
             return t.T();
           })
      .def_property_readonly("T", &Tensor::T)
      .def_property_readonly("mT", &Tensor::mT)
      .def("unsqueeze", &Tensor::unsqueeze)
      .def(
          "squeeze",
          [](const Tensor& t, const py::object& d) {
            return d.is_none() ? t.squeeze() : t.squeeze(d.cast<int64_t>());
          },
          py::arg("dim") = py::none())
      .def("select", &Tensor::select)
      .def("narrow", &Tensor::narrow)
      // Indexing with a tensor gathers, and __setitem__ writes: both without the GIL.
      .def("__getitem__",
           [](const Tensor& t, const py::object& key) {
             const std::vector<TensorIndex> ix = to_indices(key);
             return without_gil([&] { return t.index(ix); });
           })
      .def("__setitem__",
           [](Tensor& t, const py::object& key, const py::object& value) {
             const std::vector<TensorIndex> ix = to_indices(key);
             const Tensor v = as_tensor_like(value, t);
             without_gil([&] { t.index_put_(ix, v); });
           })
      // math
      .def("exp", &Tensor::exp, release())
      .def("log", &Tensor::log, release())
      .def("sqrt", &Tensor::sqrt, release())
      .def("rsqrt", &Tensor::rsqrt, release())
      .def("abs", &Tensor::abs, release())
      .def("neg", &Tensor::neg, release())
      .def("tanh", &Tensor::tanh, release())
      .def("cos", &Tensor::cos, release())
      .def("sin", &Tensor::sin, release())
      .def("sigmoid", &Tensor::sigmoid, release())
      .def("erfinv", &Tensor::erfinv, release())
      .def("log1p", &Tensor::log1p, release())
      .def("expm1", &Tensor::expm1, release())
      .def("log2", &Tensor::log2, release())
      .def("log10", &Tensor::log10, release())
      .def("exp2", &Tensor::exp2, release())
      .def("erf", &Tensor::erf, release())
      .def("erfc", &Tensor::erfc, release())
      .def("tan", &Tensor::tan, release())
      .def("sinh", &Tensor::sinh, release())
      .def("cosh", &Tensor::cosh, release())
      .def("asin", &Tensor::asin, release())
      .def("acos", &Tensor::acos, release())
      .def("atan", &Tensor::atan, release())
      .def("asinh", &Tensor::asinh, release())
      .def("acosh", &Tensor::acosh, release())
      .def("atanh", &Tensor::atanh, release())
      .def("erfinv_", &Tensor::erfinv_, py::return_value_policy::reference_internal, release())
      .def("relu", &Tensor::relu, release())
      .def("ceil", &Tensor::ceil, release())
      .def("floor", &Tensor::floor, release())
      .def("isnan", &Tensor::isnan, release())
      .def("isinf", &Tensor::isinf, release())
      .def("isfinite", &Tensor::isfinite, release())
      .def("logical_not", &Tensor::logical_not, release())
      .def("pow",
           [](const Tensor& a, const py::object& e) {
             if (py::isinstance<Tensor>(e)) {
               const Tensor& x = e.cast<const Tensor&>();
               return without_gil([&] { return a.pow(x); });
             }
             const Scalar x = to_scalar(e);
             return without_gil([&] { return a.pow(x); });
           })
      .def("masked_fill",
           [](const Tensor& t, const Tensor& mask, const py::object& v) {
             const Scalar s = to_scalar(v);
             return without_gil([&] { return t.masked_fill(mask, s); });
           })
      .def(
          "masked_fill_",
          [](Tensor& t, const Tensor& mask, const py::object& v) -> Tensor& {
            const Scalar s = to_scalar(v);
            return without_gil([&]() -> Tensor& { return t.masked_fill_(mask, s); });
          },
          py::return_value_policy::reference_internal)
      .def(
          "sum",
          [](const Tensor& t, const py::object& dim, bool keepdim, const py::object& axis) {
            return sum_like(t, dim, keepdim, axis, 0);
          },
          py::arg("dim") = py::none(), py::arg("keepdim") = false, py::arg("axis") = py::none())
      .def(
          "mean",
          [](const Tensor& t, const py::object& dim, bool keepdim, const py::object& axis) {
            return sum_like(t, dim, keepdim, axis, 1);
          },
          py::arg("dim") = py::none(), py::arg("keepdim") = false, py::arg("axis") = py::none())
      .def("var", &var_like, py::arg("dim") = py::none(), py::arg("unbiased") = py::none(),
           py::arg("keepdim") = false, py::arg("correction") = py::none(),
           py::arg("axis") = py::none())
      .def(
          "max",
          [](const Tensor& t, const py::object& dim, bool keepdim) {
            return max_like(t, dim, keepdim, true);
          },
          py::arg("dim") = py::none(), py::arg("keepdim") = false)
      .def(
          "min",
          [](const Tensor& t, const py::object& dim, bool keepdim) {
            return max_like(t, dim, keepdim, false);
          },
          py::arg("dim") = py::none(), py::arg("keepdim") = false)
      .def(
          "amax",
          [](const Tensor& t, const py::object& dim, bool keepdim) {
            const Shape dims = to_dims(dim);
            return without_gil([&] { return t.amax(dims, keepdim); });
          },
          py::arg("dim") = py::tuple(), py::arg("keepdim") = false)
      .def(
          "argmax",
          [](const Tensor& t, const py::object& dim, bool keepdim) {
            if (dim.is_none())
              return without_gil(
                  [&] { return keepdim ? t.argmax().reshape(Shape(t.dim(), 1)) : t.argmax(); });
            const auto d = dim.cast<int64_t>();
            return without_gil([&] { return t.argmax(d, keepdim); });
          },
          py::arg("dim") = py::none(), py::arg("keepdim") = false)
      .def(
          "all", [](const Tensor& t) { return full({}, t.all(), Dtype::Bool); }, release())
      .def(
          "any", [](const Tensor& t) { return full({}, t.any(), Dtype::Bool); }, release())
      .def(
          "softmax", [](const Tensor& t, int64_t dim) { return t.softmax(dim); }, py::arg("dim"),
          release())
      .def(
          "log_softmax", [](const Tensor& t, int64_t dim) { return t.log_softmax(dim); },
          py::arg("dim"), release())
      .def("matmul", &Tensor::matmul, release())
      .def("dot", &Tensor::dot, release())
      .def("outer", &Tensor::outer, release())
      .def("tril", &Tensor::tril, py::arg("diagonal") = 0, release())
      .def("triu", &Tensor::triu, py::arg("diagonal") = 0, release())
      // Random fills: a Generator locks itself for each call's draws (attn/random.h).
      .def(
          "uniform_",
          [](Tensor& t, double a, double b, const py::object& g) -> Tensor& {
            Generator* gen = gen_arg(g);
            return without_gil([&]() -> Tensor& { return uniform_(t, a, b, gen); });
          },
          py::arg("from") = 0.0, py::arg("to") = 1.0, py::arg("generator") = py::none(),
          py::return_value_policy::reference_internal)
      .def(
          "normal_",
          [](Tensor& t, double mean, double std, const py::object& g) -> Tensor& {
            Generator* gen = gen_arg(g);
            return without_gil([&]() -> Tensor& { return normal_(t, mean, std, gen); });
          },
          py::arg("mean") = 0.0, py::arg("std") = 1.0, py::arg("generator") = py::none(),
          py::return_value_policy::reference_internal)
      .def(
          "bernoulli_",
          [](Tensor& t, double p, const py::object& g) -> Tensor& {
            Generator* gen = gen_arg(g);
            return without_gil([&]() -> Tensor& { return bernoulli_(t, p, gen); });
          },
          py::arg("p") = 0.5, py::arg("generator") = py::none(),
          py::return_value_policy::reference_internal)
      .def(
          "equal", [](const Tensor& a, const Tensor& b) { return equal(a, b); }, release())
      .def(
          "allclose",
          [](const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
            return allclose(a, b, rtol, atol, equal_nan);
          },
          py::arg("other"), py::arg("rtol") = 1e-5, py::arg("atol") = 1e-8,
          py::arg("equal_nan") = false, release())
      // operators
      .def(
          "__neg__", [](const Tensor& a) { return -a; }, release())
      .def("__pos__", [](const Tensor& a) { return a; })
      .def("__abs__", &Tensor::abs, release())
      .def(
          "__invert__", [](const Tensor& a) { return ~a; }, release())
      .def(
          "__matmul__", [](const Tensor& a, const Tensor& b) { return matmul(a, b); }, release())
      .def(
          "__rmatmul__", [](const Tensor& a, const Tensor& b) { return matmul(b, a); }, release());

#define ATTN_BINOP(PYNAME, EXPR_TT, EXPR_TS)                            \
  T.def(PYNAME, [](const Tensor& a, const py::object& b) {              \
    return binop(                                                       \
        a, b, [](const Tensor& x, const Tensor& y) { return EXPR_TT; }, \
        [](const Tensor& x, const Scalar& y) { return EXPR_TS; });      \
  });
  ATTN_BINOP("__add__", x + y, x + y)
  ATTN_BINOP("__radd__", y + x, y + x)
  ATTN_BINOP("__sub__", x - y, x - sub_operand(y))
  ATTN_BINOP("__rsub__", y - x, sub_operand(y) - x)
  ATTN_BINOP("__mul__", x * y, x * y)
  ATTN_BINOP("__rmul__", y * x, y * x)
  ATTN_BINOP("__truediv__", x / y, x / y)
  // torch's Tensor.__rtruediv__ is `self.reciprocal() * other`: two roundings, reproduced.
  ATTN_BINOP("__rtruediv__", y / x, (Scalar(1.0) / x) * y)
  ATTN_BINOP("__pow__", x.pow(y), x.pow(y))
  ATTN_BINOP("__rpow__", y.pow(x), attn::pow(y, x))
  ATTN_BINOP("__eq__", x == y, x == y)
  ATTN_BINOP("__ne__", x != y, x != y)
  ATTN_BINOP("__lt__", x < y, x < y)
  ATTN_BINOP("__le__", x <= y, x <= y)
  ATTN_BINOP("__gt__", x > y, x > y)
  ATTN_BINOP("__ge__", x >= y, x >= y)
  ATTN_BINOP("__and__", x & y, x & full({}, y, Dtype::Bool))
  ATTN_BINOP("__or__", x | y, x | full({}, y, Dtype::Bool))
  ATTN_BINOP("add", x + y, x + y)
  ATTN_BINOP("sub", x - y, x - sub_operand(y))
  ATTN_BINOP("mul", x * y, x * y)
  ATTN_BINOP("__floordiv__", x.floor_divide(y), x.floor_divide(y))
  ATTN_BINOP("__rfloordiv__", attn::floor_divide(y, x), attn::floor_divide(y, x))
  ATTN_BINOP("__mod__", x.remainder(y), x.remainder(y))
  ATTN_BINOP("__rmod__", attn::remainder(y, x), attn::remainder(y, x))
  ATTN_BINOP("floor_divide", x.floor_divide(y), x.floor_divide(y))
  ATTN_BINOP("remainder", x.remainder(y), x.remainder(y))
  ATTN_BINOP("fmod", x.fmod(y), x.fmod(y))
  ATTN_BINOP("true_divide", x / y, x / y)
  ATTN_BINOP("maximum", attn::maximum(x, y), attn::maximum(x, full({}, y, x.dtype())))
  ATTN_BINOP("minimum", attn::minimum(x, y), attn::minimum(x, full({}, y, x.dtype())))
  ATTN_BINOP("eq", x == y, x == y)
  ATTN_BINOP("ne", x != y, x != y)
  ATTN_BINOP("lt", x < y, x < y)
  ATTN_BINOP("le", x <= y, x <= y)
  ATTN_BINOP("gt", x > y, x > y)
  ATTN_BINOP("ge", x >= y, x >= y)
#undef ATTN_BINOP

#define ATTN_INPLACE(PYNAME, METHOD)                                    \
  T.def(                                                                \
      PYNAME,                                                           \
      [](Tensor& a, const py::object& b) -> Tensor& {                   \
        if (py::isinstance<Tensor>(b)) {                                \
          const Tensor& y = b.cast<const Tensor&>();                    \
          return without_gil([&]() -> Tensor& { return a.METHOD(y); }); \
        }                                                               \
        const Scalar y = to_scalar(b);                                  \
        return without_gil([&]() -> Tensor& { return a.METHOD(y); });   \
      },                                                                \
      py::return_value_policy::reference_internal);
  ATTN_INPLACE("__iadd__", add_)
  ATTN_INPLACE("__isub__", sub_)
  ATTN_INPLACE("__imul__", mul_)
  ATTN_INPLACE("__itruediv__", div_)
  ATTN_INPLACE("add_", add_)
  ATTN_INPLACE("sub_", sub_)
  ATTN_INPLACE("mul_", mul_)
  ATTN_INPLACE("__ifloordiv__", floor_divide_)
  ATTN_INPLACE("__imod__", remainder_)
  ATTN_INPLACE("floor_divide_", floor_divide_)
  ATTN_INPLACE("remainder_", remainder_)
  ATTN_INPLACE("fmod_", fmod_)
  ATTN_INPLACE("true_divide_", div_)
#undef ATTN_INPLACE
  // div / divide with torch's keyword rounding_mode (None, "trunc", "floor").
  auto rounding = [](const py::object& m) -> std::optional<std::string> {
    if (m.is_none()) return std::nullopt;
    return m.cast<std::string>();
  };
  for (const char* name : {"div", "divide"}) {
    T.def(
        name,
        [rounding](const Tensor& a, const py::object& b, const py::object& mode) {
          const std::optional<std::string> m = rounding(mode);
          const std::optional<std::string_view> mv =
              m ? std::optional<std::string_view>(*m) : std::nullopt;
          return binop(
              a, b, [&](const Tensor& x, const Tensor& y) { return x.div(y, mv); },
              [&](const Tensor& x, const Scalar& y) { return x.div(y, mv); });
        },
        py::arg("other"), py::kw_only(), py::arg("rounding_mode") = py::none());
  }
  for (const char* name : {"div_", "divide_"}) {
    T.def(
        name,
        [rounding](Tensor& a, const py::object& b, const py::object& mode) -> Tensor& {
          const std::optional<std::string> m = rounding(mode);
          const std::optional<std::string_view> mv =
              m ? std::optional<std::string_view>(*m) : std::nullopt;
          if (py::isinstance<Tensor>(b)) {
            const Tensor& y = b.cast<const Tensor&>();
            return without_gil([&]() -> Tensor& { return a.div_(y, mv); });
          }
          const Scalar y = to_scalar(b);
          return without_gil([&]() -> Tensor& { return a.div_(y, mv); });
        },
        py::arg("other"), py::kw_only(), py::arg("rounding_mode") = py::none(),
        py::return_value_policy::reference_internal);
  }
}

}  // namespace attn::python

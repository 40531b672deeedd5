// The functions at the top of the attn package (torch.*): creation (tensor, zeros, full, arange,
// ...), math (softmax, matmul, where, cat, ...), grad mode, threads and print options.
#include <attn/attn.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "convert.h"

namespace attn::python {

namespace {

// where()'s value arguments: a tensor, or a Python number made a 0-dim tensor of the dtype torch
// gives the result (a float number turns an integer or bool tensor float32).
Tensor where_operand(const py::object& o, const py::object& other) {
  if (py::isinstance<Tensor>(o)) return o.cast<Tensor>();
  if (py::isinstance<py::array>(o)) return from_numpy(o.cast<py::array>());
  Scalar s = to_scalar(o);
  Dtype d = s.kind() == Scalar::Kind::Float ? Dtype::Float32
            : s.kind() == Scalar::Kind::Int ? Dtype::Int64
                                            : Dtype::Bool;
  if (py::isinstance<Tensor>(other)) {
    Dtype od = other.cast<const Tensor&>().dtype();
    if (is_floating_point(od) || d == Dtype::Bool || (d == Dtype::Int64 && od == Dtype::Int64))
      d = od;
  } else if (!py::isinstance<Tensor>(o) && is_number(other)) {
    Scalar so = to_scalar(other);
    if (so.kind() == Scalar::Kind::Float)
      d = Dtype::Float32;
    else if (so.kind() == Scalar::Kind::Int && d == Dtype::Bool)
      d = Dtype::Int64;
  }
  return full({}, s, d);
}

}  // namespace

void register_ops(py::module_& m) {
  // ---- creation --------------------------------------------------------------------------------
  // tensor(data, dtype=None, device=None, requires_grad=False, pin_memory=False)
  m.def(
      "tensor",
      [](const py::object& data, py::kwargs k) {
        FactoryKwargs f = factory_kwargs(k, "tensor", false);
        return f.finish(make_tensor(data, f.dtype ? py::cast(*f.dtype) : py::none(), false));
      },
      py::arg("data"));
  m.def("from_numpy", [](py::array a) { return from_numpy(a); });
  // Creation: the arguments read with the GIL, the tensor filled (and moved to device=) without.
  auto shaped = [&m](const char* name, auto fn) {
    m.def(name, [fn, name](py::args a, py::kwargs k) {
      FactoryKwargs f = factory_kwargs(k, name, false);
      const Shape shape = f.shape(a, name);
      return without_gil([&] {
        return f.finish(fn(shape, f.dtype.value_or(Dtype::Float32), f.device.value_or(Device())));
      });
    });
  };
  shaped("zeros", [](Shape s, Dtype d, const Device& dev) { return zeros(s, d, dev); });
  shaped("ones", [](Shape s, Dtype d, const Device& dev) { return ones(s, d, dev); });
  shaped("empty", [](Shape s, Dtype d, const Device& dev) { return empty(s, d, dev); });
  m.def(
      "full",
      [](const py::object& size, const py::object& v, py::kwargs k) {
        FactoryKwargs f = factory_kwargs(k, "full", false);
        py::kwargs sk;
        sk["size"] = size;
        const Shape shape = to_shape(py::args(), sk, "full");
        const Scalar s = to_scalar(v);
        return without_gil([&] { return f.finish(full(shape, s, f.dtype)); });
      },
      py::arg("size"), py::arg("fill_value"));
  // *_like(t, dtype=None, device=None, requires_grad=False, memory_format=...): t's shape, and its
  // dtype unless dtype is given.
  auto like = [&m](const char* name, auto fn) {
    m.def(
        name,
        [fn, name](const Tensor& t, py::kwargs k) {
          FactoryKwargs f = factory_kwargs(k, name, false, {"memory_format"});
          return without_gil([&] {
            Tensor out = fn(t);
            if (f.dtype && *f.dtype != out.dtype()) out = out.to(*f.dtype);
            return f.finish(out);
          });
        },
        py::arg("input"));
  };
  like("zeros_like", [](const Tensor& t) { return zeros_like(t); });
  like("ones_like", [](const Tensor& t) { return ones_like(t); });
  like("empty_like", [](const Tensor& t) { return empty_like(t); });
  m.def(
      "full_like",
      [](const Tensor& t, const py::object& v, py::kwargs k) {
        FactoryKwargs f = factory_kwargs(k, "full_like", false, {"memory_format"});
        const Scalar s = to_scalar(v);
        return without_gil([&] {
          Tensor out = f.dtype ? full(t.shape(), s, *f.dtype) : full_like(t, s);
          return f.finish(out);
        });
      },
      py::arg("input"), py::arg("fill_value"));
  m.def(
      "arange",
      [](const py::object& a, const py::object& b, const py::object& step, py::kwargs k) {
        FactoryKwargs f = factory_kwargs(k, "arange", false);
        const Scalar start = to_scalar(a);
        const std::optional<Scalar> end =
            b.is_none() ? std::nullopt : std::optional<Scalar>(to_scalar(b));
        const Scalar by = end ? to_scalar(step) : Scalar(1);
        return without_gil([&] {
          Tensor t = end ? arange(start, *end, by) : arange(start);
          if (f.dtype) t = t.to(*f.dtype);
          return f.finish(t);
        });
      },
      py::arg("start"), py::arg("end") = py::none(), py::arg("step") = 1);
  m.def("tril", &tril, py::arg("input"), py::arg("diagonal") = 0, release());
  m.def("triu", &triu, py::arg("input"), py::arg("diagonal") = 0, release());

  // ---- math ------------------------------------------------------------------------------------
  m.def(
      "softmax", [](const Tensor& t, int64_t dim) { return softmax(t, dim); }, py::arg("input"),
      py::arg("dim"), release());
  m.def(
      "log_softmax", [](const Tensor& t, int64_t dim) { return log_softmax(t, dim); },
      py::arg("input"), py::arg("dim"), release());
  m.def("matmul", &matmul, release());
  m.def("dot", &dot, release());
  m.def("outer", &outer, release());
  m.def("exp", &attn::exp, release());
  m.def("log", &attn::log, release());
  m.def("sqrt", &attn::sqrt, release());
  m.def("abs", &attn::abs, release());
  m.def("tanh", &attn::tanh, release());
  m.def("cos", &attn::cos, release());
  m.def("sin", &attn::sin, release());
  m.def("erfinv", &attn::erfinv, release());
  m.def(
      "where",
      [](const Tensor& cond, const py::object& a, const py::object& b) {
        const Tensor x = where_operand(a, b), y = where_operand(b, a);
        return without_gil([&] { return where(cond, x, y); });
      },
      py::arg("condition"), py::arg("input"), py::arg("other"));
  m.def("maximum", &maximum, release());
  m.def("minimum", &minimum, release());
  m.def("masked_fill", [](const Tensor& t, const Tensor& mask, const py::object& v) {
    const Scalar s = to_scalar(v);
    return without_gil([&] { return t.masked_fill(mask, s); });
  });
  // The list of tensors is converted to a std::vector before the guard.
  m.def("cat", &cat, py::arg("tensors"), py::arg("dim") = 0, release());
  m.def("concat", &cat, py::arg("tensors"), py::arg("dim") = 0, release());
  m.def("stack", &stack, py::arg("tensors"), py::arg("dim") = 0, release());
  m.def("allclose", &allclose, py::arg("input"), py::arg("other"), py::arg("rtol") = 1e-5,
        py::arg("atol") = 1e-8, py::arg("equal_nan") = false, release());
  m.def("equal", &equal, release());
  m.def("broadcast_shapes_",
        [](const Shape& a, const Shape& b) { return broadcast_shapes(a, b, "broadcast_shapes"); });
  m.def("is_grad_enabled", &is_grad_enabled);
  m.def("_set_grad_enabled", &set_grad_enabled, py::arg("mode"));
  // torch.autocast("cpu", dtype)'s state on this thread (attn/autograd.h): a dtype or None.
  m.def("_autocast_dtype", &autocast_dtype);
  m.def("_set_autocast_dtype", &set_autocast_dtype, py::arg("dtype"));
  m.def("set_num_threads", &set_num_threads);
  m.def("get_num_threads", &get_num_threads);
  m.def(
      "set_printoptions",
      [](const py::object& precision, const py::object& threshold, const py::object& edgeitems,
         const py::object& linewidth, const py::object& profile, const py::object& sci_mode) {
        auto opt_int = [](const py::object& o) -> std::optional<int64_t> {
          if (o.is_none()) return std::nullopt;
          return o.cast<int64_t>();
        };
        std::optional<int> prec;
        if (!precision.is_none()) prec = precision.cast<int>();
        std::optional<std::optional<bool>> sci;
        // torch: sci_mode=None means "automatic"; it is always (re)set by set_printoptions.
        sci =
            sci_mode.is_none() ? std::optional<bool>() : std::optional<bool>(sci_mode.cast<bool>());
        std::optional<std::string> prof;
        if (!profile.is_none()) prof = profile.cast<std::string>();
        set_printoptions(prec, opt_int(threshold), opt_int(edgeitems), opt_int(linewidth), sci,
                         prof);
      },
      py::arg("precision") = py::none(), py::arg("threshold") = py::none(),
      py::arg("edgeitems") = py::none(), py::arg("linewidth") = py::none(),
      py::arg("profile") = py::none(), py::arg("sci_mode") = py::none());
}

}  // namespace attn::python

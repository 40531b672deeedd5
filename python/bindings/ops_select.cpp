// The ops of attn/ops.h as attn._C functions and attn.Tensor methods: sampling (multinomial,
// exponential_), sorting and selection (the (values, indices) pairs come back as tuples that the
// Python package wraps into torch.return_types), cumsum / cumprod, clamp, gather / scatter,
// split / chunk / unbind and the in-place elementwise methods.
#include <attn/attn.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "convert.h"

namespace attn::python {

namespace {

py::tuple pair(const std::tuple<Tensor, Tensor>& r) {
  return py::make_tuple(std::get<0>(r), std::get<1>(r));
}

py::tuple as_tuple(const std::vector<Tensor>& v) {
  py::tuple t(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) t[i] = py::cast(v[i]);
  return t;
}

// A clamp bound: None, a Python number or a tensor.
bool is_tensor_bound(const py::object& o) { return py::isinstance<Tensor>(o); }
std::optional<Scalar> scalar_bound(const py::object& o) {
  if (o.is_none()) return std::nullopt;
  return to_scalar(o);
}

// The bounds are read with the GIL, the clamp runs without it.
Tensor clamp_any(const Tensor& t, const py::object& lo, const py::object& hi) {
  if (lo.is_none() && hi.is_none())
    throw Error("[clamp] at least one of 'min' or 'max' must not be None");
  if (is_tensor_bound(lo) || is_tensor_bound(hi)) {
    auto as_t = [&](const py::object& o) -> Tensor {
      if (o.is_none()) return Tensor();
      if (py::isinstance<Tensor>(o)) return o.cast<Tensor>();
      Scalar s = to_scalar(o);
      return full({}, s, s.is_floating() && !t.is_floating_point() ? Dtype::Float32 : t.dtype());
    };
    const Tensor min = as_t(lo), max = as_t(hi);
    return without_gil([&] { return t.clamp(min, max); });
  }
  const std::optional<Scalar> min = scalar_bound(lo), max = scalar_bound(hi);
  return without_gil([&] { return t.clamp(min, max); });
}

Tensor& clamp_any_(Tensor& t, const py::object& lo, const py::object& hi) {
  if (lo.is_none() && hi.is_none())
    throw Error("[clamp_] at least one of 'min' or 'max' must not be None");
  if (is_tensor_bound(lo) || is_tensor_bound(hi)) {
    auto as_t = [&](const py::object& o) -> Tensor {
      if (o.is_none()) return Tensor();
      if (py::isinstance<Tensor>(o)) return o.cast<Tensor>();
      return full({}, to_scalar(o), t.dtype());
    };
    const Tensor min = as_t(lo), max = as_t(hi);
    return without_gil([&]() -> Tensor& { return t.clamp_(min, max); });
  }
  const std::optional<Scalar> min = scalar_bound(lo), max = scalar_bound(hi);
  return without_gil([&]() -> Tensor& { return t.clamp_(min, max); });
}

// torch's cumsum(dim, dtype=None): the result converted to dtype when given.
Tensor scan_any(const Tensor& t, int64_t dim, const py::object& dtype, bool prod) {
  const std::optional<Dtype> d = to_dtype(dtype);
  return without_gil([&] {
    const Tensor in = d ? t.to(*d) : t;
    return prod ? in.cumprod(dim) : in.cumsum(dim);
  });
}

// NotImplementedError naming the feature and attn's version (torch features attn lacks).
[[noreturn]] void not_implemented(const std::string& what) {
  std::string version = py::str(py::module_::import("attn").attr("__version__"));
  PyErr_SetString(PyExc_NotImplementedError,
                  (what + " is not supported by attn " + version).c_str());
  throw py::error_already_set();
}

// scatter's source: src (a tensor or a number) or value=; reduce= is not supported.
const py::object& scatter_source(const py::object& src, const py::object& value,
                                 const py::object& reduce) {
  if (!reduce.is_none()) not_implemented("scatter(reduce=...) (use scatter_add)");
  const py::object& s = src.is_none() ? value : src;
  if (s.is_none()) throw py::type_error("scatter() expects src or value");
  return s;
}

// scatter(dim, index, src) / scatter(dim, index, value): src may be a tensor or a number.
Tensor scatter_any(const Tensor& t, int64_t dim, const Tensor& index, const py::object& src,
                   const py::object& value, const py::object& reduce) {
  const py::object& s = scatter_source(src, value, reduce);
  if (py::isinstance<Tensor>(s)) {
    const Tensor& x = s.cast<const Tensor&>();
    return without_gil([&] { return t.scatter(dim, index, x); });
  }
  const Scalar x = to_scalar(s);
  return without_gil([&] { return t.scatter(dim, index, x); });
}

std::vector<Tensor> split_any(const Tensor& t, const py::object& s, int64_t dim) {
  if (py::isinstance<py::int_>(s) || py::hasattr(s, "__index__"))
    return t.split(to_index_int(s, true), dim);
  Shape sizes;
  for (auto h : s) sizes.push_back(to_index_int(h, true));
  return t.split(sizes, dim);
}

}  // namespace

void register_ops_select(py::module_& m) {
  auto T = py::reinterpret_borrow<py::class_<Tensor>>(m.attr("Tensor"));
  const auto ref = py::return_value_policy::reference_internal;

  // ---- sampling ------------------------------------------------------------------------------
  T.def(
      "exponential_",
      [](Tensor& t, double lambd, const py::object& g) -> Tensor& {
        Generator* gen = gen_arg(g);  // locked by the draw itself (attn/random.h)
        return without_gil([&]() -> Tensor& { return t.exponential_(lambd, gen); });
      },
      py::arg("lambd") = 1.0, py::kw_only(), py::arg("generator") = py::none(), ref);
  auto multinomial_fn = [](const Tensor& t, int64_t n, bool replacement, const py::object& g) {
    Generator* gen = gen_arg(g);
    return without_gil([&] { return t.multinomial(n, replacement, gen); });
  };
  T.def("multinomial", multinomial_fn, py::arg("num_samples"), py::arg("replacement") = false,
        py::kw_only(), py::arg("generator") = py::none());
  m.def("multinomial", multinomial_fn, py::arg("input"), py::arg("num_samples"),
        py::arg("replacement") = false, py::kw_only(), py::arg("generator") = py::none());

  // ---- sorting and selection (pairs wrapped by the package) ------------------------------------
  auto topk_fn = [](const Tensor& t, int64_t k, int64_t dim, bool largest, bool sorted) {
    return pair(without_gil([&] { return t.topk(k, dim, largest, sorted); }));
  };
  T.def("_topk", topk_fn, py::arg("k"), py::arg("dim") = -1, py::arg("largest") = true,
        py::arg("sorted") = true);
  auto sort_fn = [](const Tensor& t, int64_t dim, bool descending, bool stable) {
    return pair(without_gil([&] { return t.sort(dim, descending, stable); }));
  };
  T.def("_sort", sort_fn, py::arg("dim") = -1, py::arg("descending") = false,
        py::arg("stable") = false);
  auto argsort_fn = [](const Tensor& t, int64_t dim, bool descending, bool stable) {
    return t.argsort(dim, descending, stable);
  };
  T.def("argsort", argsort_fn, py::arg("dim") = -1, py::arg("descending") = false,
        py::arg("stable") = false, release());
  m.def("argsort", argsort_fn, py::arg("input"), py::arg("dim") = -1, py::arg("descending") = false,
        py::arg("stable") = false, release());
  auto argmin_fn = [](const Tensor& t, const py::object& dim, bool keepdim) {
    if (dim.is_none())
      return without_gil(
          [&] { return keepdim ? t.argmin().reshape(Shape(t.dim(), 1)) : t.argmin(); });
    const auto d = dim.cast<int64_t>();
    return without_gil([&] { return t.argmin(d, keepdim); });
  };
  T.def("argmin", argmin_fn, py::arg("dim") = py::none(), py::arg("keepdim") = false);
  m.def("argmin", argmin_fn, py::arg("input"), py::arg("dim") = py::none(),
        py::arg("keepdim") = false);

  // ---- scans and clamping ----------------------------------------------------------------------
  auto cumsum_fn = [](const Tensor& t, int64_t dim, const py::object& dtype) {
    return scan_any(t, dim, dtype, false);
  };
  auto cumprod_fn = [](const Tensor& t, int64_t dim, const py::object& dtype) {
    return scan_any(t, dim, dtype, true);
  };
  T.def("cumsum", cumsum_fn, py::arg("dim"), py::kw_only(), py::arg("dtype") = py::none());
  T.def("cumprod", cumprod_fn, py::arg("dim"), py::kw_only(), py::arg("dtype") = py::none());
  m.def("cumsum", cumsum_fn, py::arg("input"), py::arg("dim"), py::kw_only(),
        py::arg("dtype") = py::none());
  m.def("cumprod", cumprod_fn, py::arg("input"), py::arg("dim"), py::kw_only(),
        py::arg("dtype") = py::none());
  for (const char* name : {"clamp", "clip"}) {
    T.def(name, &clamp_any, py::arg("min") = py::none(), py::arg("max") = py::none());
    m.def(name, &clamp_any, py::arg("input"), py::arg("min") = py::none(),
          py::arg("max") = py::none());
  }
  for (const char* name : {"clamp_", "clip_"})
    T.def(name, &clamp_any_, py::arg("min") = py::none(), py::arg("max") = py::none(), ref);

  // ---- gather / scatter -------------------------------------------------------------------------
  auto gather_fn = [](const Tensor& t, int64_t dim, const Tensor& index, bool sparse_grad) {
    if (sparse_grad) not_implemented("gather(sparse_grad=True)");
    return without_gil([&] { return t.gather(dim, index); });
  };
  T.def("gather", gather_fn, py::arg("dim"), py::arg("index"), py::kw_only(),
        py::arg("sparse_grad") = false);
  m.def("gather", gather_fn, py::arg("input"), py::arg("dim"), py::arg("index"), py::kw_only(),
        py::arg("sparse_grad") = false);
  T.def("scatter", &scatter_any, py::arg("dim"), py::arg("index"), py::arg("src") = py::none(),
        py::kw_only(), py::arg("value") = py::none(), py::arg("reduce") = py::none());
  m.def("scatter", &scatter_any, py::arg("input"), py::arg("dim"), py::arg("index"),
        py::arg("src") = py::none(), py::kw_only(), py::arg("value") = py::none(),
        py::arg("reduce") = py::none());
  T.def(
      "scatter_",
      [](Tensor& t, int64_t dim, const Tensor& index, const py::object& src,
         const py::object& value, const py::object& reduce) -> Tensor& {
        const py::object& s = scatter_source(src, value, reduce);
        if (py::isinstance<Tensor>(s)) {
          const Tensor& x = s.cast<const Tensor&>();
          return without_gil([&]() -> Tensor& { return t.scatter_(dim, index, x); });
        }
        const Scalar x = to_scalar(s);
        return without_gil([&]() -> Tensor& { return t.scatter_(dim, index, x); });
      },
      py::arg("dim"), py::arg("index"), py::arg("src") = py::none(), py::kw_only(),
      py::arg("value") = py::none(), py::arg("reduce") = py::none(), ref);
  T.def("scatter_add", &Tensor::scatter_add, py::arg("dim"), py::arg("index"), py::arg("src"),
        release());
  m.def("scatter_add", &attn::scatter_add, py::arg("input"), py::arg("dim"), py::arg("index"),
        py::arg("src"), release());
  T.def("scatter_add_", &Tensor::scatter_add_, py::arg("dim"), py::arg("index"), py::arg("src"),
        ref, release());

  // ---- splitting ------------------------------------------------------------------------------
  auto split_fn = [](const Tensor& t, const py::object& s, int64_t dim) {
    return as_tuple(split_any(t, s, dim));
  };
  T.def("split", split_fn, py::arg("split_size"), py::arg("dim") = 0);
  m.def("split", split_fn, py::arg("tensor"), py::arg("split_size_or_sections"),
        py::arg("dim") = 0);
  auto chunk_fn = [](const Tensor& t, int64_t chunks, int64_t dim) {
    return as_tuple(t.chunk(chunks, dim));
  };
  T.def("chunk", chunk_fn, py::arg("chunks"), py::arg("dim") = 0);
  m.def("chunk", chunk_fn, py::arg("input"), py::arg("chunks"), py::arg("dim") = 0);
  auto unbind_fn = [](const Tensor& t, int64_t dim) { return as_tuple(t.unbind(dim)); };
  T.def("unbind", unbind_fn, py::arg("dim") = 0);
  m.def("unbind", unbind_fn, py::arg("input"), py::arg("dim") = 0);

  // ---- small math functions -------------------------------------------------------------------
  m.def("rsqrt", &attn::rsqrt, py::arg("input"), release());
  m.def("sigmoid", &attn::sigmoid, py::arg("input"), release());
  m.def("relu", &attn::relu, py::arg("input"), release());
  m.def("neg", &attn::neg, py::arg("input"), release());
  m.def("negative", &attn::neg, py::arg("input"), release());
  m.def("square", &attn::square, py::arg("input"), release());
  T.def("square", &Tensor::square, release());
  m.def("bmm", &attn::bmm, py::arg("input"), py::arg("mat2"), release());
  T.def("bmm", &attn::bmm, py::arg("mat2"), release());
  m.def("index_select", &attn::index_select, py::arg("input"), py::arg("dim"), py::arg("index"),
        release());
  T.def("index_select", &Tensor::index_select, py::arg("dim"), py::arg("index"), release());
  m.def("_nonzero", &attn::nonzero, py::arg("input"), release());
  m.def("_complex_mul", &attn::complex_mul, py::arg("a"), py::arg("b"), py::arg("conj_b") = false,
        release());
  m.def(
      "_index_add",
      [](const Tensor& input, int64_t dim, const Tensor& index, const Tensor& source,
         const py::object& alpha) {
        const Scalar a = to_scalar(alpha);
        return without_gil([&] { return attn::index_add(input, dim, index, source, a); });
      },
      py::arg("input"), py::arg("dim"), py::arg("index"), py::arg("source"), py::arg("alpha"));
  m.def(
      "_index_add_",
      [](Tensor& input, int64_t dim, const Tensor& index, const Tensor& source,
         const py::object& alpha) {
        const Scalar a = to_scalar(alpha);
        without_gil([&] { attn::index_add_(input, dim, index, source, a); });
        return input;
      },
      py::arg("input"), py::arg("dim"), py::arg("index"), py::arg("source"), py::arg("alpha"));

  // ---- in-place elementwise -------------------------------------------------------------------
  T.def("exp_", &Tensor::exp_, ref, release());
  T.def("log_", &Tensor::log_, ref, release());
  T.def("sqrt_", &Tensor::sqrt_, ref, release());
  T.def("rsqrt_", &Tensor::rsqrt_, ref, release());
  T.def("tanh_", &Tensor::tanh_, ref, release());
  T.def("cos_", &Tensor::cos_, ref, release());
  T.def("sin_", &Tensor::sin_, ref, release());
  T.def("sigmoid_", &Tensor::sigmoid_, ref, release());
  T.def("relu_", &Tensor::relu_, ref, release());
  T.def("abs_", &Tensor::abs_, ref, release());
  T.def("neg_", &Tensor::neg_, ref, release());
  T.def(
      "pow_",
      [](Tensor& t, const py::object& e) -> Tensor& {
        if (py::isinstance<Tensor>(e)) {
          const Tensor& x = e.cast<const Tensor&>();
          return without_gil([&]() -> Tensor& { return t.pow_(x); });
        }
        const Scalar x = to_scalar(e);
        return without_gil([&]() -> Tensor& { return t.pow_(x); });
      },
      py::arg("exponent"), ref);
}

}  // namespace attn::python

// attn._C: thin pybind11 bindings over the C++ API. The Python package attn (python/attn) builds
// torch's surface (Size, nn.Module, Parameter, ...) on top of these.
#include <attn/attn.h>
#include <attn/gpt.h>
#include <attn/optim.h>
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/operators.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <limits>
#include <random>
#include <sstream>

namespace py = pybind11;
using namespace attn;

void bind_distributed(py::module_& m);  // bindings_distributed.cpp

namespace {

// ---- Python values -> C++
// ---------------------------------------------------------------------------

Scalar to_scalar(const py::handle& h) {
  if (py::isinstance<py::bool_>(h)) return Scalar(h.cast<bool>());
  if (py::isinstance<py::int_>(h)) return Scalar(h.cast<long long>());
  if (py::isinstance<py::float_>(h)) return Scalar(h.cast<double>());
  if (py::isinstance<Tensor>(h)) {
    const Tensor& t = h.cast<const Tensor&>();
    if (t.numel() != 1)
      throw Error("[scalar] a tensor with " + std::to_string(t.numel()) +
                  " elements cannot be used as a number");
    switch (t.dtype()) {
      case Dtype::Float32: return Scalar(t.item<double>());
      case Dtype::Int64: return Scalar((long long)t.item<int64_t>());
      case Dtype::Bool: return Scalar(t.item<bool>());
    }
  }
  // numpy scalars and anything else with __float__ / __index__
  if (py::hasattr(h, "dtype") && py::hasattr(h, "item")) return to_scalar(h.attr("item")());
  throw Error(std::string("[scalar] expected a number, got ") +
              std::string(py::str(py::type::handle_of(h).attr("__name__"))));
}

bool is_number(const py::handle& h) {
  return py::isinstance<py::bool_>(h) || py::isinstance<py::int_>(h) ||
         py::isinstance<py::float_>(h) ||
         (py::hasattr(h, "dtype") && py::hasattr(h, "item") && !py::hasattr(h, "shape")) ||
         (py::hasattr(h, "dtype") && py::hasattr(h, "shape") && py::len(h.attr("shape")) == 0 &&
          !py::isinstance<Tensor>(h));
}

NestedList to_nested(const py::handle& h) {
  if (py::isinstance<py::list>(h) || py::isinstance<py::tuple>(h)) {
    std::vector<NestedList> items;
    for (auto item : h) items.push_back(to_nested(item));
    return NestedList(std::move(items));
  }
  if (py::isinstance<Tensor>(h)) {
    const Tensor& t = h.cast<const Tensor&>();
    if (t.dim() == 0) {
      Scalar s = to_scalar(h);
      if (s.kind() == Scalar::Kind::Bool) return NestedList(s.to_double() != 0);
      if (s.kind() == Scalar::Kind::Int) return NestedList((long long)s.to_int());
      return NestedList(s.to_double());
    }
    std::vector<NestedList> items;
    for (int64_t i = 0; i < t.size(0); ++i) items.push_back(to_nested(py::cast(t[i])));
    return NestedList(std::move(items));
  }
  Scalar s = to_scalar(h);
  if (s.kind() == Scalar::Kind::Bool) return NestedList(s.to_double() != 0);
  if (s.kind() == Scalar::Kind::Int) return NestedList((long long)s.to_int());
  return NestedList(s.to_double());
}

std::optional<Dtype> to_dtype(const py::object& o) {
  if (o.is_none()) return std::nullopt;
  if (!py::isinstance<Dtype>(o))
    throw Error("[dtype] expected attn.float32, attn.int64 or attn.bool, got " +
                std::string(py::repr(o)));
  return o.cast<Dtype>();
}

// Zero-copy view of a NumPy array when its dtype is one of ours (and it is writable); float64 and
// other dtypes are converted, a copy.
Tensor from_numpy(py::array arr) {
  py::dtype dt = arr.dtype();
  Dtype d;
  if (dt.is(py::dtype::of<float>())) {
    d = Dtype::Float32;
  } else if (dt.is(py::dtype::of<int64_t>())) {
    d = Dtype::Int64;
  } else if (dt.is(py::dtype::of<bool>())) {
    d = Dtype::Bool;
  } else if (dt.kind() == 'f') {
    return from_numpy(py::array_t<float, py::array::c_style | py::array::forcecast>(arr));
  } else if (dt.kind() == 'i' || dt.kind() == 'u') {
    return from_numpy(py::array_t<int64_t, py::array::c_style | py::array::forcecast>(arr));
  } else {
    throw Error("[tensor] unsupported NumPy dtype " + std::string(py::str(dt)));
  }
  // A read-only array (np.frombuffer of bytes, a broadcast view) is copied: attn tensors are
  // always writable, and writing through one must not change memory NumPy declared immutable.
  if (!arr.writeable()) return from_numpy(py::array(arr.attr("copy")()));
  Shape shape, strides;
  auto isz = int64_t(itemsize(d));
  for (py::ssize_t i = 0; i < arr.ndim(); ++i) {
    shape.push_back(arr.shape(i));
    if (arr.strides(i) % isz != 0 || arr.strides(i) < 0)
      return from_numpy(py::array::ensure(arr, py::array::c_style));
    strides.push_back(arr.strides(i) / isz);
  }
  auto* keep = new py::object(arr);
  std::shared_ptr<void> owner(keep, [](void* p) {
    py::gil_scoped_acquire gil;
    delete static_cast<py::object*>(p);
  });
  return from_blob(const_cast<void*>(arr.data()), shape, strides, d, owner);
}

Tensor make_tensor(const py::object& data, const py::object& dtype, bool requires_grad) {
  Tensor t;
  if (py::isinstance<Tensor>(data)) {
    t = data.cast<const Tensor&>().detach().clone();
    if (auto d = to_dtype(dtype)) t = t.to(*d);
  } else if (py::isinstance<py::array>(data)) {
    t = from_numpy(data.cast<py::array>());
    if (auto d = to_dtype(dtype)) t = t.to(*d);
  } else {
    t = tensor(to_nested(data), to_dtype(dtype));
  }
  if (requires_grad) t.requires_grad_(true);
  return t;
}

// An integer index or size (Python int, NumPy integer, anything with __index__); floats are
// refused.
int64_t to_index_int(const py::handle& h, bool is_size = false) {
  if (py::isinstance<py::bool_>(h) || !PyIndex_Check(h.ptr())) {
    std::string type = py::str(py::type::handle_of(h).attr("__name__"));
    if (is_size) throw Error("[shape] sizes must be integers, got " + type);
    throw IndexError(std::string("[index] only integers, slices (`:`), ellipsis (`...`), None "
                                 "and long or bool tensors are valid indices (got ") +
                     type + ")");
  }
  py::object i = py::reinterpret_steal<py::object>(PyNumber_Index(h.ptr()));
  if (!i) throw py::error_already_set();
  int overflow = 0;
  long long v = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
  if (overflow) {
    std::string msg = std::string(is_size ? "[shape] " : "[index] ") + std::string(py::str(i)) +
                      " does not fit in 64 bits";
    if (is_size) throw Error(msg);
    throw IndexError(msg);
  }
  return v;
}

// Python-style size arguments: f(2, 3), f((2, 3)), f([2, 3]), f(size=(2, 3)). `creating` names a
// creation function (zeros, ...): a size that cannot be allocated is then left to it, which raises
// AllocationError (RuntimeError, as torch.zeros does), except one whose element count overflows
// int64, refused here in the same words.
Shape to_shape(const py::args& args, const py::kwargs& kwargs, const char* creating = nullptr) {
  py::object src;
  if (kwargs.contains("size")) {
    src = kwargs["size"];
  } else if (args.size() == 1 &&
             (py::isinstance<py::tuple>(args[0]) || py::isinstance<py::list>(args[0]))) {
    src = args[0];
  } else {
    src = args;
  }
  Shape s;
  for (auto h : src) s.push_back(to_index_int(h, true));
  // The C++ library does not guard against element counts that overflow int64 (a crash, not an
  // error, when such a tensor is filled or printed); refuse them here. -1 (inferred) is skipped.
  int64_t numel = 1;
  for (auto d : s) {
    if (d < 0) continue;
    const bool overflow = __builtin_mul_overflow(numel, d, &numel);
    if (creating && overflow)
      throw AllocationError(std::string("[") + creating + "] cannot allocate a " + shape_str(s) +
                            " tensor: its number of elements overflows int64");
    if (!creating && (overflow || numel > std::numeric_limits<int64_t>::max() / 8))
      throw Error("[shape] " + shape_str(s) + " has more elements than memory can address");
  }
  return s;
}

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
  return out;
}

Tensor as_tensor_like(const py::object& o, const Tensor& like) {
  if (py::isinstance<Tensor>(o)) return o.cast<Tensor>();
  if (py::isinstance<py::array>(o)) return from_numpy(o.cast<py::array>());
  if (py::isinstance<py::list>(o) || py::isinstance<py::tuple>(o)) return tensor(to_nested(o));
  Scalar s = to_scalar(o);
  return full({}, s, like.dtype());
}

py::object to_list(const Tensor& t) {
  if (t.dim() == 0) {
    switch (t.dtype()) {
      case Dtype::Float32: return py::float_(t.item<double>());
      case Dtype::Int64: return py::int_(t.item<int64_t>());
      case Dtype::Bool: return py::bool_(t.item<bool>());
    }
  }
  py::list l;
  for (int64_t i = 0; i < t.size(0); ++i) l.append(to_list(t[i]));
  return l;
}

py::array to_numpy(const Tensor& t) {
  std::vector<py::ssize_t> shape(t.shape().begin(), t.shape().end());
  std::vector<py::ssize_t> strides;
  auto isz = py::ssize_t(itemsize(t.dtype()));
  for (auto s : t.strides()) strides.push_back(s * isz);
  auto* keep = new Tensor(t);
  py::capsule base(keep, [](void* p) { delete static_cast<Tensor*>(p); });
  switch (t.dtype()) {
    case Dtype::Float32:
      return py::array(py::dtype::of<float>(), shape, strides, t.raw_data(), base);
    case Dtype::Int64:
      return py::array(py::dtype::of<int64_t>(), shape, strides, t.raw_data(), base);
    case Dtype::Bool: return py::array(py::dtype::of<bool>(), shape, strides, t.raw_data(), base);
  }
  return py::array();
}

// Binary operator with a tensor or a Python number on the right.
template <typename TT, typename TS>
py::object binop(const Tensor& a, const py::object& b, TT tt, TS ts) {
  if (py::isinstance<Tensor>(b)) return py::cast(tt(a, b.cast<const Tensor&>()));
  if (is_number(b)) return py::cast(ts(a, to_scalar(b)));
  if (py::isinstance<py::array>(b)) return py::cast(tt(a, from_numpy(b.cast<py::array>())));
  return py::reinterpret_borrow<py::object>(Py_NotImplemented);
}

Tensor sum_like(const Tensor& t, const py::object& dim, bool keepdim, const py::object& axis,
                int which) {
  py::object d = dim.is_none() ? axis : dim;
  if (d.is_none()) {
    if (which == 0) return keepdim ? t.sum({}, true) : t.sum();
    return keepdim ? t.mean({}, true) : t.mean();
  }
  return which == 0 ? t.sum(to_dims(d), keepdim) : t.mean(to_dims(d), keepdim);
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
  if (d.is_none()) return t.var(Shape{}, unb, keepdim);
  return t.var(to_dims(d), unb, keepdim);
}

py::object max_like(const Tensor& t, const py::object& dim, bool keepdim, bool is_max) {
  if (dim.is_none()) return py::cast(is_max ? t.max() : t.min());
  auto [v, i] = is_max ? t.max(dim.cast<int64_t>(), keepdim) : t.min(dim.cast<int64_t>(), keepdim);
  py::module_ attn_mod = py::module_::import("attn");
  return attn_mod.attr("return_types")(v, i);
}

py::object dtype_obj(const Tensor& t) {
  // The enum's own members, so that `x.dtype is attn.float32` holds as in torch.
  py::object cls = py::type::of<Dtype>();
  switch (t.dtype()) {
    case Dtype::Float32: return cls.attr("float32");
    case Dtype::Int64: return cls.attr("int64");
    case Dtype::Bool: return cls.attr("bool");
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
    if (od == Dtype::Float32 || d == Dtype::Bool || (d == Dtype::Int64 && od == Dtype::Int64))
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

// The keyword arguments torch's factory functions take: size, dtype, device, requires_grad and
// (random ones) generator. Anything else is an error rather than silently ignored.
struct FactoryKwargs {
  py::kwargs size;  // {"size": ...} when given by keyword
  std::optional<Dtype> dtype;
  bool requires_grad = false;
  Generator* generator = nullptr;
};

Generator* gen_arg(const py::object& g);

// A Python bool is a bool tensor to torch, and bool tensors cannot be subtracted.
const Scalar& sub_operand(const Scalar& s) {
  if (s.kind() == Scalar::Kind::Bool)
    throw Error(
        "[sub] subtraction, the `-` operator, with a bool is not supported; use ~ or "
        "logical_not() to invert a mask");
  return s;
}

FactoryKwargs factory_kwargs(const py::kwargs& k, const char* fn, bool random,
                             std::initializer_list<const char*> extra = {}) {
  FactoryKwargs f;
  for (auto item : k) {
    std::string key = py::str(item.first);
    py::object v = py::reinterpret_borrow<py::object>(item.second);
    bool is_extra = false;
    for (const char* e : extra) is_extra = is_extra || key == e;
    if (is_extra) continue;
    if (key == "size") {
      f.size["size"] = v;
    } else if (key == "dtype") {
      f.dtype = to_dtype(v);
    } else if (key == "device") {
      if (!v.is_none() && std::string(py::str(v)) != "cpu")
        throw Error(std::string("[") + fn + "] only the cpu device is supported, got " +
                    std::string(py::str(v)));
    } else if (key == "requires_grad") {
      f.requires_grad = v.cast<bool>();
    } else if (key == "generator" && random) {
      f.generator = gen_arg(v);
    } else {
      throw py::type_error(std::string(fn) + "() got an unexpected keyword argument '" + key + "'");
    }
  }
  return f;
}

Generator* gen_arg(const py::object& g) {
  if (g.is_none()) return nullptr;
  if (!py::isinstance<Generator>(g))
    throw Error(std::string("[generator] expected an attn.Generator, got ") +
                std::string(py::str(py::type::handle_of(g).attr("__name__"))));
  return g.cast<Generator*>();
}

// torch.manual_seed accepts any Python int and keeps it modulo 2**64 (negative seeds wrap).
uint64_t to_seed(const py::int_& s) {
  // torch accepts [-2**63, 2**64): negative seeds are taken modulo 2**64.
  if (s < py::int_(std::numeric_limits<int64_t>::min()) ||
      s > py::int_(std::numeric_limits<uint64_t>::max()))
    throw Error(
        "[manual_seed] seed must be in [-0x8000_0000_0000_0000, "
        "0xffff_ffff_ffff_ffff], got " +
        std::string(py::repr(s)));
  py::int_ wrapped = py::reinterpret_steal<py::int_>(
      PyNumber_And(s.ptr(), py::int_(std::numeric_limits<uint64_t>::max()).ptr()));
  if (!wrapped) throw py::error_already_set();
  return wrapped.cast<uint64_t>();
}

// The generator state as torch returns it: 5056 bytes, here a NumPy uint8 array (attn has no
// uint8 dtype); torch.from_numpy / torch.tensor turn it into torch's ByteTensor.
py::array state_array(const Generator& g) {
  auto s = g.get_state();
  py::array_t<uint8_t> out(py::ssize_t(s.size()));
  std::memcpy(out.mutable_data(), s.data(), s.size());
  return std::move(out);
}

// A state from bytes / bytearray, a NumPy uint8 array, torch's ByteTensor (anything NumPy can
// read as uint8) or an attn int64 tensor of values 0..255.
std::vector<uint8_t> state_bytes(const py::object& state, const std::string& fn) {
  if (py::isinstance<py::bytes>(state) || py::isinstance<py::bytearray>(state)) {
    std::string s = py::isinstance<py::bytes>(state) ? std::string(state.cast<py::bytes>())
                                                     : std::string(state.cast<py::bytearray>());
    return std::vector<uint8_t>(s.begin(), s.end());
  }
  py::object obj = state;
  if (py::isinstance<Tensor>(state)) {
    const Tensor& t = state.cast<const Tensor&>();
    if (t.dtype() != Dtype::Int64)
      throw Error("[" + fn + "] expects a state of bytes, got a " + dtype_name(t.dtype()) +
                  " tensor");
    obj = py::cast(t.contiguous()).attr("numpy")();
  }
  py::array arr = py::module_::import("numpy").attr("asarray")(obj);
  if (arr.ndim() != 1 || arr.dtype().kind() == 'f' || arr.dtype().kind() == 'b' ||
      arr.dtype().kind() == 'O')
    throw Error("[" + fn + "] expects a 1-D array of bytes (torch.get_rng_state()), got " +
                std::string(py::str(arr.attr("dtype"))) + " of shape " +
                std::string(py::str(arr.attr("shape"))));
  auto ints = py::array_t<int64_t, py::array::c_style | py::array::forcecast>(arr);
  std::vector<uint8_t> out(std::size_t(ints.size()));
  for (py::ssize_t i = 0; i < ints.size(); ++i) {
    int64_t v = ints.data()[i];
    if (v < 0 || v > 255)
      throw Error("[" + fn + "] state element " + std::to_string(i) + " is " + std::to_string(v) +
                  ", not a byte");
    out[std::size_t(i)] = uint8_t(v);
  }
  return out;
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "attn: attention in C++ with a PyTorch-like surface";

  // pybind11 tries exception translators in reverse order of registration, so the base class
  // (Error -> ValueError) goes first and its subclasses (IndexError -> IndexError, AllocationError
  // -> RuntimeError, as PyTorch's "DefaultCPUAllocator: can't allocate memory") after it.
  py::register_exception<Error>(m, "AttnError", PyExc_ValueError);
  py::register_exception<IndexError>(m, "AttnIndexError", PyExc_IndexError);
  py::register_exception<AllocationError>(m, "AllocationError", PyExc_RuntimeError);

  py::enum_<Dtype>(m, "dtype")
      .value("float32", Dtype::Float32)
      .value("int64", Dtype::Int64)
      .value("bool", Dtype::Bool)
      .def("__repr__", [](Dtype d) { return dtype_name(d); })
      .def("__str__", [](Dtype d) { return dtype_name(d); })
      .def_property_readonly("is_floating_point", [](Dtype d) { return d == Dtype::Float32; })
      .def_property_readonly("itemsize", [](Dtype d) { return itemsize(d); });

  py::class_<Generator>(m, "Generator")
      .def(py::init([](const py::object& device) {
             if (!device.is_none() && std::string(py::str(device)) != "cpu")
               throw Error("[Generator] only the cpu device is supported, got " +
                           std::string(py::str(device)));
             return Generator();
           }),
           py::arg("device") = py::none())
      .def(
          "manual_seed",
          [](Generator& g, const py::int_& s) -> Generator& {
            g.manual_seed(to_seed(s));
            return g;
          },
          py::arg("seed"), py::return_value_policy::reference)
      .def("initial_seed", &Generator::initial_seed)
      .def_property_readonly("device", [](const Generator&) { return std::string("cpu"); })
      .def("get_state", &state_array)
      .def(
          "set_state",
          [](Generator& g, const py::object& state) -> Generator& {
            g.set_state(state_bytes(state, "Generator.set_state"));
            return g;
          },
          py::arg("new_state"), py::return_value_policy::reference);
  m.attr("default_generator") = py::cast(&default_generator(), py::return_value_policy::reference);
  m.def("get_rng_state", []() { return state_array(default_generator()); });
  m.def(
      "set_rng_state",
      [](const py::object& state) {
        default_generator().set_state(state_bytes(state, "set_rng_state"));
      },
      py::arg("new_state"));

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
          [](Tensor& t, const py::object& g) {
            t.set_grad(g.is_none() ? Tensor() : g.cast<Tensor>());
          })
      .def(
          "backward",
          [](const Tensor& t, const py::object& gradient, const py::object& retain_graph,
             bool create_graph) {
            if (create_graph)
              throw Error("[backward] create_graph=True (higher-order gradients) is not supported");
            Tensor g;
            if (!gradient.is_none()) g = gradient.cast<Tensor>();
            std::optional<bool> retain;
            if (!retain_graph.is_none()) retain = retain_graph.cast<bool>();
            t.backward(g, retain);
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
            t.detach().copy_(v.detach());
          })
      .def("contiguous", &Tensor::contiguous)
      .def("clone", &Tensor::clone)
      .def("float", &Tensor::float_)
      .def("long", &Tensor::long_)
      .def("bool", &Tensor::bool_)
      .def("_to_dtype", [](const Tensor& t, Dtype d) { return t.to(d); })
      .def("type", [](const Tensor& t, Dtype d) { return t.to(d); })
      .def("copy_", &Tensor::copy_, py::return_value_policy::reference_internal)
      .def(
          "fill_", [](Tensor& t, const py::object& v) -> Tensor& { return t.fill_(to_scalar(v)); },
          py::return_value_policy::reference_internal)
      .def("zero_", &Tensor::zero_, py::return_value_policy::reference_internal)
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
             if (t.dtype() == Dtype::Float32 || t.numel() != 1)
               throw py::type_error("only integer tensors of a single element can be an index");
             return t.item<int64_t>();
           })
      .def("__hash__", [](const Tensor& t) { return reinterpret_cast<uintptr_t>(t.impl().get()); })
      // views
      .def("view", [](const Tensor& t, py::args a, py::kwargs k) { return t.view(to_shape(a, k)); })
      .def("reshape",
           [](const Tensor& t, py::args a, py::kwargs k) { return t.reshape(to_shape(a, k)); })
      .def("expand",
           [](const Tensor& t, py::args a, py::kwargs k) { return t.expand(to_shape(a, k)); })
      .def("permute",
           [](const Tensor& t, py::args a, py::kwargs k) { return t.permute(to_shape(a, k)); })
      .def("flatten", &Tensor::flatten, py::arg("start_dim") = 0, py::arg("end_dim") = -1)
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
      .def("__getitem__",
           [](const Tensor& t, const py::object& key) { return t.index(to_indices(key)); })
      .def("__setitem__",
           [](Tensor& t, const py::object& key, const py::object& value) {
             t.index_put_(to_indices(key), as_tensor_like(value, t));
           })
      // math
      .def("exp", &Tensor::exp)
      .def("log", &Tensor::log)
      .def("sqrt", &Tensor::sqrt)
      .def("rsqrt", &Tensor::rsqrt)
      .def("abs", &Tensor::abs)
      .def("neg", &Tensor::neg)
      .def("tanh", &Tensor::tanh)
      .def("sigmoid", &Tensor::sigmoid)
      .def("relu", &Tensor::relu)
      .def("ceil", &Tensor::ceil)
      .def("floor", &Tensor::floor)
      .def("isnan", &Tensor::isnan)
      .def("isinf", &Tensor::isinf)
      .def("isfinite", &Tensor::isfinite)
      .def("logical_not", &Tensor::logical_not)
      .def("pow",
           [](const Tensor& a, const py::object& e) {
             if (py::isinstance<Tensor>(e)) return a.pow(e.cast<const Tensor&>());
             return a.pow(to_scalar(e));
           })
      .def("masked_fill", [](const Tensor& t, const Tensor& mask,
                             const py::object& v) { return t.masked_fill(mask, to_scalar(v)); })
      .def(
          "masked_fill_",
          [](Tensor& t, const Tensor& mask, const py::object& v) -> Tensor& {
            return t.masked_fill_(mask, to_scalar(v));
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
            return t.amax(to_dims(dim), keepdim);
          },
          py::arg("dim") = py::tuple(), py::arg("keepdim") = false)
      .def(
          "argmax",
          [](const Tensor& t, const py::object& dim, bool keepdim) {
            if (dim.is_none()) return t.reshape({-1}).argmax(0, false);
            return t.argmax(dim.cast<int64_t>(), keepdim);
          },
          py::arg("dim") = py::none(), py::arg("keepdim") = false)
      .def("all", [](const Tensor& t) { return full({}, t.all(), Dtype::Bool); })
      .def("any", [](const Tensor& t) { return full({}, t.any(), Dtype::Bool); })
      .def(
          "softmax", [](const Tensor& t, int64_t dim) { return t.softmax(dim); }, py::arg("dim"))
      .def(
          "log_softmax", [](const Tensor& t, int64_t dim) { return t.log_softmax(dim); },
          py::arg("dim"))
      .def("matmul", &Tensor::matmul)
      .def("dot", &Tensor::dot)
      .def("tril", &Tensor::tril, py::arg("diagonal") = 0)
      .def("triu", &Tensor::triu, py::arg("diagonal") = 0)
      .def(
          "uniform_",
          [](Tensor& t, double a, double b, const py::object& g) -> Tensor& {
            return uniform_(t, a, b, gen_arg(g));
          },
          py::arg("from") = 0.0, py::arg("to") = 1.0, py::arg("generator") = py::none(),
          py::return_value_policy::reference_internal)
      .def(
          "normal_",
          [](Tensor& t, double mean, double std, const py::object& g) -> Tensor& {
            return normal_(t, mean, std, gen_arg(g));
          },
          py::arg("mean") = 0.0, py::arg("std") = 1.0, py::arg("generator") = py::none(),
          py::return_value_policy::reference_internal)
      .def(
          "bernoulli_",
          [](Tensor& t, double p, const py::object& g) -> Tensor& {
            return bernoulli_(t, p, gen_arg(g));
          },
          py::arg("p") = 0.5, py::arg("generator") = py::none(),
          py::return_value_policy::reference_internal)
      .def("equal", [](const Tensor& a, const Tensor& b) { return equal(a, b); })
      .def(
          "allclose",
          [](const Tensor& a, const Tensor& b, double rtol, double atol, bool equal_nan) {
            return allclose(a, b, rtol, atol, equal_nan);
          },
          py::arg("other"), py::arg("rtol") = 1e-5, py::arg("atol") = 1e-8,
          py::arg("equal_nan") = false)
      // operators
      .def("__neg__", [](const Tensor& a) { return -a; })
      .def("__pos__", [](const Tensor& a) { return a; })
      .def("__abs__", &Tensor::abs)
      .def("__invert__", [](const Tensor& a) { return ~a; })
      .def("__matmul__", [](const Tensor& a, const Tensor& b) { return matmul(a, b); })
      .def("__rmatmul__", [](const Tensor& a, const Tensor& b) { return matmul(b, a); });

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
  ATTN_BINOP("div", x / y, x / y)
  ATTN_BINOP("maximum", attn::maximum(x, y), attn::maximum(x, full({}, y, x.dtype())))
  ATTN_BINOP("minimum", attn::minimum(x, y), attn::minimum(x, full({}, y, x.dtype())))
  ATTN_BINOP("eq", x == y, x == y)
  ATTN_BINOP("ne", x != y, x != y)
  ATTN_BINOP("lt", x < y, x < y)
  ATTN_BINOP("le", x <= y, x <= y)
  ATTN_BINOP("gt", x > y, x > y)
  ATTN_BINOP("ge", x >= y, x >= y)
#undef ATTN_BINOP

#define ATTN_INPLACE(PYNAME, METHOD)                                             \
  T.def(                                                                         \
      PYNAME,                                                                    \
      [](Tensor& a, const py::object& b) -> Tensor& {                            \
        if (py::isinstance<Tensor>(b)) return a.METHOD(b.cast<const Tensor&>()); \
        return a.METHOD(to_scalar(b));                                           \
      },                                                                         \
      py::return_value_policy::reference_internal);
  ATTN_INPLACE("__iadd__", add_)
  ATTN_INPLACE("__isub__", sub_)
  ATTN_INPLACE("__imul__", mul_)
  ATTN_INPLACE("__itruediv__", div_)
  ATTN_INPLACE("add_", add_)
  ATTN_INPLACE("sub_", sub_)
  ATTN_INPLACE("mul_", mul_)
  ATTN_INPLACE("div_", div_)
#undef ATTN_INPLACE

  // ---- creation and random ----------------------------------------------------------------------
  m.def("tensor", &make_tensor, py::arg("data"), py::arg("dtype") = py::none(),
        py::arg("requires_grad") = false);
  m.def("from_numpy", [](py::array a) { return from_numpy(a); });
  auto shaped = [&m](const char* name, auto fn) {
    m.def(name, [fn, name](py::args a, py::kwargs k) {
      FactoryKwargs f = factory_kwargs(k, name, false);
      if (a.empty() && !f.size.contains("size"))
        throw py::type_error(std::string(name) + "() missing its size, e.g. " + name + "(2, 3)");
      Tensor t = fn(to_shape(a, f.size, name), f.dtype.value_or(Dtype::Float32));
      if (f.requires_grad) t.requires_grad_(true);
      return t;
    });
  };
  shaped("zeros", [](Shape s, Dtype d) { return zeros(s, d); });
  shaped("ones", [](Shape s, Dtype d) { return ones(s, d); });
  shaped("empty", [](Shape s, Dtype d) { return empty(s, d); });
  m.def(
      "full",
      [](const py::object& size, const py::object& v, py::kwargs k) {
        FactoryKwargs f = factory_kwargs(k, "full", false);
        py::kwargs sk;
        sk["size"] = size;
        Tensor t = full(to_shape(py::args(), sk, "full"), to_scalar(v), f.dtype);
        if (f.requires_grad) t.requires_grad_(true);
        return t;
      },
      py::arg("size"), py::arg("fill_value"));
  m.def("zeros_like", &zeros_like);
  m.def("ones_like", &ones_like);
  m.def("empty_like", &empty_like);
  m.def("full_like",
        [](const Tensor& t, const py::object& v) { return full_like(t, to_scalar(v)); });
  m.def(
      "arange",
      [](const py::object& a, const py::object& b, const py::object& step,
         const py::object& dtype) {
        Tensor t = b.is_none() ? arange(to_scalar(a))
                               : arange(to_scalar(a), to_scalar(b), to_scalar(step));
        if (auto d = to_dtype(dtype)) t = t.to(*d);
        return t;
      },
      py::arg("start"), py::arg("end") = py::none(), py::arg("step") = 1,
      py::arg("dtype") = py::none());
  m.def("tril", &tril, py::arg("input"), py::arg("diagonal") = 0);
  m.def("triu", &triu, py::arg("input"), py::arg("diagonal") = 0);
  m.def(
      "manual_seed",
      [](const py::int_& s) -> Generator& {
        manual_seed(to_seed(s));
        return default_generator();
      },
      py::arg("seed"), py::return_value_policy::reference);
  m.def("seed", []() -> uint64_t {
    // torch.seed(): a non-deterministic 64-bit seed, set and returned.
    std::random_device rd;
    uint64_t s = (uint64_t(rd()) << 32) | rd();
    manual_seed(s);
    return s;
  });
  m.def("initial_seed", []() { return default_generator().initial_seed(); });
  // rand / randn: float32 only (the dtype torch draws these bits for).
  auto random_shaped = [&m](const char* name, auto fn) {
    m.def(name, [fn, name](py::args a, py::kwargs k) {
      FactoryKwargs f = factory_kwargs(k, name, true);
      if (a.empty() && !f.size.contains("size"))
        throw py::type_error(std::string(name) + "() missing its size, e.g. " + name + "(2, 3)");
      if (f.dtype && *f.dtype != Dtype::Float32)
        throw Error(std::string("[") + name + "] only dtype torch.float32 is supported, got " +
                    dtype_name(*f.dtype));
      Tensor t = fn(to_shape(a, f.size, name), f.generator);
      if (f.requires_grad) t.requires_grad_(true);
      return t;
    });
  };
  random_shaped("rand", [](Shape s, Generator* g) { return rand(s, g); });
  random_shaped("randn", [](Shape s, Generator* g) { return randn(s, g); });
  // torch.randint(high, size) or torch.randint(low, high, size), int64 unless dtype says otherwise.
  m.def("randint", [](py::args a, py::kwargs k) {
    py::object low = py::int_(0), high, size;
    FactoryKwargs f = factory_kwargs(k, "randint", true, {"low", "high"});
    std::vector<py::object> pos;
    for (auto h : a) pos.push_back(py::reinterpret_borrow<py::object>(h));
    if (k.contains("low")) pos.insert(pos.begin(), k["low"]);
    if (k.contains("high")) pos.insert(pos.begin() + (k.contains("low") ? 1 : 0), k["high"]);
    if (!f.size.contains("size") && !pos.empty()) {
      f.size["size"] = pos.back();
      pos.pop_back();
    }
    if (pos.size() == 1) {
      high = pos[0];
    } else if (pos.size() == 2) {
      low = pos[0];
      high = pos[1];
    } else {
      throw Error("[randint] expects (high, size) or (low, high, size), got " +
                  std::to_string(pos.size()) + " numbers");
    }
    if (!f.size.contains("size") || py::isinstance<py::int_>(f.size["size"]))
      throw Error("[randint] size must be a tuple of ints, e.g. randint(10, (3,))");
    Tensor t = randint(to_scalar(low).to_int(), to_scalar(high).to_int(),
                       to_shape(py::args(), f.size, "randint"), f.generator);
    if (f.dtype) t = t.to(*f.dtype);
    if (f.requires_grad) t.requires_grad_(true);
    return t;
  });

  // ---- math
  // -----------------------------------------------------------------------------------------
  m.def(
      "softmax", [](const Tensor& t, int64_t dim) { return softmax(t, dim); }, py::arg("input"),
      py::arg("dim"));
  m.def(
      "log_softmax", [](const Tensor& t, int64_t dim) { return log_softmax(t, dim); },
      py::arg("input"), py::arg("dim"));
  m.def("matmul", &matmul);
  m.def("dot", &dot);
  m.def("exp", &attn::exp);
  m.def("log", &attn::log);
  m.def("sqrt", &attn::sqrt);
  m.def("abs", &attn::abs);
  m.def("tanh", &attn::tanh);
  m.def(
      "where",
      [](const Tensor& cond, const py::object& a, const py::object& b) {
        return where(cond, where_operand(a, b), where_operand(b, a));
      },
      py::arg("condition"), py::arg("input"), py::arg("other"));
  m.def("maximum", &maximum);
  m.def("minimum", &minimum);
  m.def("masked_fill", [](const Tensor& t, const Tensor& mask, const py::object& v) {
    return t.masked_fill(mask, to_scalar(v));
  });
  m.def("cat", &cat, py::arg("tensors"), py::arg("dim") = 0);
  m.def("concat", &cat, py::arg("tensors"), py::arg("dim") = 0);
  m.def("stack", &stack, py::arg("tensors"), py::arg("dim") = 0);
  m.def("allclose", &allclose, py::arg("input"), py::arg("other"), py::arg("rtol") = 1e-5,
        py::arg("atol") = 1e-8, py::arg("equal_nan") = false);
  m.def("equal", &equal);
  m.def("broadcast_shapes_",
        [](const Shape& a, const Shape& b) { return broadcast_shapes(a, b, "broadcast_shapes"); });
  m.def("is_grad_enabled", &is_grad_enabled);
  m.def("_set_grad_enabled", &set_grad_enabled, py::arg("mode"));
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

  // ---- nn: functional and init
  // -------------------------------------------------------------------
  py::module_ fn = m.def_submodule("functional");
  fn.def(
      "linear",
      [](const Tensor& x, const Tensor& w, const py::object& b) {
        return nn::functional::linear(x, w, b.is_none() ? Tensor() : b.cast<Tensor>());
      },
      py::arg("input"), py::arg("weight"), py::arg("bias") = py::none());
  fn.def("embedding", &nn::functional::embedding, py::arg("input"), py::arg("weight"));
  fn.def(
      "layer_norm",
      [](const Tensor& x, int64_t n, const py::object& w, const py::object& b, double eps) {
        return nn::functional::layer_norm(x, n, w.is_none() ? Tensor() : w.cast<Tensor>(),
                                          b.is_none() ? Tensor() : b.cast<Tensor>(), eps);
      },
      py::arg("input"), py::arg("normalized_shape"), py::arg("weight") = py::none(),
      py::arg("bias") = py::none(), py::arg("eps") = 1e-5);
  fn.def("gelu", &nn::functional::gelu, py::arg("input"), py::arg("approximate") = "none");
  fn.def("cross_entropy", &nn::functional::cross_entropy, py::arg("input"), py::arg("target"),
         py::arg("reduction") = "mean", py::arg("ignore_index") = -100);

  fn.def(
      "dropout",
      [](const Tensor& x, double p, bool training, const py::object& g) {
        return nn::functional::dropout(x, p, training, gen_arg(g));
      },
      py::arg("input"), py::arg("p") = 0.5, py::arg("training") = true,
      py::arg("generator") = py::none());
  fn.def(
      "scaled_dot_product_attention",
      [](const Tensor& q, const Tensor& k, const Tensor& v, const py::object& attn_mask,
         double dropout_p, bool is_causal, const py::object& scale, bool bottom_right,
         bool reference, bool need_weights, bool enable_gqa, int64_t window_left,
         int64_t window_right, const py::object& key_padding_mask) -> py::object {
        SdpaOptions o;
        o.enable_gqa = enable_gqa;
        o.window_left = window_left;
        o.window_right = window_right;
        if (!key_padding_mask.is_none()) o.key_padding_mask = key_padding_mask.cast<Tensor>();
        if (!attn_mask.is_none()) o.attn_mask = attn_mask.cast<Tensor>();
        o.dropout_p = dropout_p;
        o.is_causal = is_causal;
        if (!scale.is_none()) o.scale = scale.cast<double>();
        o.causal_align = bottom_right ? CausalAlign::BottomRight : CausalAlign::TopLeft;
        o.backend = reference ? SdpaBackend::Reference : SdpaBackend::Auto;
        if (need_weights) {
          auto [out, w] = scaled_dot_product_attention_with_weights(q, k, v, o);
          return py::make_tuple(out, w);
        }
        return py::cast(scaled_dot_product_attention(q, k, v, o));
      },
      py::arg("query"), py::arg("key"), py::arg("value"), py::arg("attn_mask") = py::none(),
      py::arg("dropout_p") = 0.0, py::arg("is_causal") = false, py::arg("scale") = py::none(),
      py::arg("causal_bottom_right") = false, py::arg("reference") = false,
      py::arg("need_weights") = false, py::arg("enable_gqa") = false, py::arg("window_left") = -1,
      py::arg("window_right") = -1, py::arg("key_padding_mask") = py::none());
  fn.def(
      "causal_mask",
      [](int64_t lq, int64_t lk, bool bottom_right) {
        return causal_mask(lq, lk, bottom_right ? CausalAlign::BottomRight : CausalAlign::TopLeft);
      },
      py::arg("L_q"), py::arg("L_k"), py::arg("bottom_right") = false);

  py::module_ init = m.def_submodule("init");
  init.def(
      "uniform_",
      [](Tensor& t, double a, double b) -> Tensor& { return nn::init::uniform_(t, a, b); },
      py::arg("tensor"), py::arg("a") = 0.0, py::arg("b") = 1.0,
      py::return_value_policy::reference);
  init.def(
      "normal_",
      [](Tensor& t, double mean, double std) -> Tensor& { return nn::init::normal_(t, mean, std); },
      py::arg("tensor"), py::arg("mean") = 0.0, py::arg("std") = 1.0,
      py::return_value_policy::reference);
  init.def(
      "zeros_", [](Tensor& t) -> Tensor& { return nn::init::zeros_(t); },
      py::return_value_policy::reference);
  init.def(
      "ones_", [](Tensor& t) -> Tensor& { return nn::init::ones_(t); },
      py::return_value_policy::reference);
  init.def(
      "kaiming_uniform_",
      [](Tensor& t, double a) -> Tensor& { return nn::init::kaiming_uniform_(t, a); },
      py::arg("tensor"), py::arg("a") = 0.0, py::return_value_policy::reference);
  init.def(
      "xavier_uniform_",
      [](Tensor& t, double gain) -> Tensor& { return nn::init::xavier_uniform_(t, gain); },
      py::arg("tensor"), py::arg("gain") = 1.0, py::return_value_policy::reference);

  // ---- C++ modules the Python modules wrap (their parameters are shared, not copied)
  // -------------
  py::module_ mods = m.def_submodule("modules");
  py::class_<nn::Linear, std::shared_ptr<nn::Linear>>(mods, "Linear")
      .def(py::init<int64_t, int64_t, bool>())
      .def_readonly("weight", &nn::Linear::weight)
      .def_readonly("bias", &nn::Linear::bias);
  py::class_<nn::Embedding, std::shared_ptr<nn::Embedding>>(mods, "Embedding")
      .def(py::init<int64_t, int64_t>())
      .def_readonly("weight", &nn::Embedding::weight);
  py::class_<nn::Dropout, std::shared_ptr<nn::Dropout>>(mods, "Dropout").def(py::init<double>());
  py::class_<nn::MultiheadAttention, std::shared_ptr<nn::MultiheadAttention>>(mods,
                                                                              "MultiheadAttention")
      .def(py::init<int64_t, int64_t, double, bool, std::optional<int64_t>, std::optional<int64_t>,
                    bool>())
      .def_readonly("in_proj_weight", &nn::MultiheadAttention::in_proj_weight)
      .def_readonly("in_proj_bias", &nn::MultiheadAttention::in_proj_bias)
      .def_readonly("q_proj_weight", &nn::MultiheadAttention::q_proj_weight)
      .def_readonly("k_proj_weight", &nn::MultiheadAttention::k_proj_weight)
      .def_readonly("v_proj_weight", &nn::MultiheadAttention::v_proj_weight)
      .def_property_readonly("out_proj_weight",
                             [](const nn::MultiheadAttention& m) { return m.out_proj->weight; })
      .def_property_readonly("out_proj_bias",
                             [](const nn::MultiheadAttention& m) { return m.out_proj->bias; })
      .def_readonly("head_dim", &nn::MultiheadAttention::head_dim)
      // The Python module hands its current parameters (and dropout) over before each forward,
      // so that reassigned Parameters are the ones used. Shapes are checked here because the C++
      // forward trusts them.
      .def("_set_parameters",
           [](nn::MultiheadAttention& m, const py::object& in_w, const py::object& q_w,
              const py::object& k_w, const py::object& v_w, const py::object& in_b,
              const py::object& out_w, const py::object& out_b, double dropout) {
             auto take = [](const py::object& o, const Tensor& current, const char* name) {
               if (current.defined() == o.is_none())
                 throw Error(std::string("[MultiheadAttention] parameter ") + name +
                             (o.is_none() ? " is missing" : " is not expected"));
               if (o.is_none()) return Tensor();
               Tensor t = o.cast<Tensor>();
               if (t.shape() != current.shape() || t.dtype() != current.dtype())
                 throw Error(std::string("[MultiheadAttention] parameter ") + name +
                             " must be float32 of shape " + shape_str(current.shape()) + ", got " +
                             dtype_name(t.dtype()) + " " + shape_str(t.shape()));
               return t;
             };
             if (!(dropout >= 0 && dropout <= 1))
               throw Error(
                   "[MultiheadAttention] dropout probability has to be between 0 and 1, "
                   "but got " +
                   std::to_string(dropout));
             m.in_proj_weight = take(in_w, m.in_proj_weight, "in_proj_weight");
             m.q_proj_weight = take(q_w, m.q_proj_weight, "q_proj_weight");
             m.k_proj_weight = take(k_w, m.k_proj_weight, "k_proj_weight");
             m.v_proj_weight = take(v_w, m.v_proj_weight, "v_proj_weight");
             m.in_proj_bias = take(in_b, m.in_proj_bias, "in_proj_bias");
             m.out_proj->weight = take(out_w, m.out_proj->weight, "out_proj.weight");
             m.out_proj->bias = take(out_b, m.out_proj->bias, "out_proj.bias");
             m.dropout = dropout;
           })
      .def("train", [](nn::MultiheadAttention& m, bool on) { m.train(on); })
      .def("forward", [](const nn::MultiheadAttention& m, const Tensor& q, const Tensor& k,
                         const Tensor& v, const py::object& kpm, bool need_weights,
                         const py::object& am, bool average, bool is_causal) {
        Tensor key_padding = kpm.is_none() ? Tensor() : kpm.cast<Tensor>();
        Tensor attn_mask = am.is_none() ? Tensor() : am.cast<Tensor>();
        auto out = m.forward(q, k, v, key_padding, need_weights, attn_mask, average, is_causal);
        py::object w = out.weights.defined() ? py::cast(out.weights) : py::none();
        return py::make_tuple(out.output, w);
      });
  py::class_<nn::GPTConfig>(mods, "GPTConfig")
      .def(py::init<>())
      .def_readwrite("vocab_size", &nn::GPTConfig::vocab_size)
      .def_readwrite("block_size", &nn::GPTConfig::block_size)
      .def_readwrite("n_layer", &nn::GPTConfig::n_layer)
      .def_readwrite("n_head", &nn::GPTConfig::n_head)
      .def_readwrite("n_embd", &nn::GPTConfig::n_embd)
      .def_readwrite("dropout", &nn::GPTConfig::dropout)
      .def_readwrite("bias", &nn::GPTConfig::bias);
  py::class_<nn::GPT, std::shared_ptr<nn::GPT>>(mods, "GPT")
      .def(py::init([](const nn::GPTConfig& c, const py::object& g) {
             return std::make_shared<nn::GPT>(c, gen_arg(g));
           }),
           py::arg("config"), py::arg("generator") = py::none())
      .def("named_parameters",
           [](const nn::GPT& m) {
             std::vector<std::pair<std::string, Tensor>> out;
             for (auto& [n, t] : m.named_parameters()) out.emplace_back(n, t);
             return out;
           })
      .def("train", [](nn::GPT& m, bool on) { m.train(on); })
      .def("forward", [](const nn::GPT& m, const Tensor& idx) { return m.forward(idx); })
      .def("forward_loss",
           [](const nn::GPT& m, const Tensor& idx, const Tensor& targets) {
             auto out = m.forward(idx, targets);
             return py::make_tuple(out.logits, out.loss);
           })
      .def("forward_cached", [](const nn::GPT& m, const Tensor& idx,
                                nn::KVCache& cache) { return m.forward_cached(idx, cache); })
      .def(
          "generate",
          [](const nn::GPT& m, const Tensor& idx, int64_t max_new_tokens, double temperature,
             const py::object& top_k, bool use_cache, const py::object& g,
             const py::object& callback) {
            nn::GPT::GenerateOptions o;
            o.max_new_tokens = max_new_tokens;
            o.temperature = temperature;
            o.top_k = top_k.is_none() ? 0 : top_k.cast<int64_t>();
            o.use_cache = use_cache;
            std::function<void(const Tensor&)> cb;
            if (!callback.is_none()) cb = [&callback](const Tensor& t) { callback(t); };
            return m.generate(idx, o, gen_arg(g), cb);
          },
          py::arg("idx"), py::arg("max_new_tokens"), py::arg("temperature") = 1.0,
          py::arg("top_k") = py::none(), py::arg("use_cache") = true,
          py::arg("generator") = py::none(), py::arg("callback") = py::none());
  py::class_<nn::KVCache>(mods, "KVCache")
      .def(py::init<>())
      .def_readonly("length", &nn::KVCache::length);

  // ---- optim
  // -----------------------------------------------------------------------------------------
  bind_distributed(m);

  py::module_ opt = m.def_submodule("optim");
  py::class_<optim::AdamW>(opt, "AdamW")
      .def(py::init([](const std::vector<std::pair<std::vector<Tensor>, double>>& groups, double lr,
                       double beta1, double beta2, double eps) {
             std::vector<optim::ParamGroup> gs;
             for (auto& [params, wd] : groups) gs.push_back(optim::ParamGroup{params, wd});
             optim::AdamWOptions o;
             o.lr = lr;
             o.beta1 = beta1;
             o.beta2 = beta2;
             o.eps = eps;
             return optim::AdamW(std::move(gs), o);
           }),
           py::arg("groups"), py::arg("lr"), py::arg("beta1"), py::arg("beta2"), py::arg("eps"))
      .def("step", &optim::AdamW::step)
      .def("zero_grad", &optim::AdamW::zero_grad, py::arg("set_to_none") = true)
      .def("set_lr", &optim::AdamW::set_lr)
      .def("lr", &optim::AdamW::lr)
      .def("state_dict", &optim::AdamW::state_dict)
      .def("load_state_dict", &optim::AdamW::load_state_dict);
  opt.def("clip_grad_norm_", &optim::clip_grad_norm_, py::arg("parameters"), py::arg("max_norm"),
          py::arg("error_if_nonfinite") = false);
  opt.def("cosine_lr", &optim::cosine_lr, py::arg("it"), py::arg("lr"), py::arg("min_lr"),
          py::arg("warmup_iters"), py::arg("lr_decay_iters"));

  py::class_<nn::Vocabulary>(mods, "Vocabulary")
      .def(py::init<const std::string&>())
      .def("words", &nn::Vocabulary::words)
      .def("id", &nn::Vocabulary::id)
      .def("encode", &nn::Vocabulary::encode)
      .def("__repr__", &nn::Vocabulary::repr)
      .def("__len__", &nn::Vocabulary::size);
}

// Conversions between Python values and attn's types (see convert.h).
#include "convert.h"

#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "bindings.h"

namespace attn::python {

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
      case Dtype::Float32:
      case Dtype::BFloat16:
      case Dtype::Float16: return Scalar(t.item<double>());
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

namespace {

NestedList scalar_leaf(const py::handle& h) {
  Scalar s = to_scalar(h);
  if (s.kind() == Scalar::Kind::Bool) return NestedList(s.to_double() != 0);
  if (s.kind() == Scalar::Kind::Int) return NestedList((long long)s.to_int());
  return NestedList(s.to_double());
}

}  // namespace

NestedList to_nested(const py::handle& h) {
  if (py::isinstance<py::list>(h) || py::isinstance<py::tuple>(h)) {
    std::vector<NestedList> items;
    for (auto item : h) items.push_back(to_nested(item));
    return NestedList(std::move(items));
  }
  if (py::isinstance<Tensor>(h)) {
    const Tensor& t = h.cast<const Tensor&>();
    if (t.dim() == 0) return scalar_leaf(h);
    std::vector<NestedList> items;
    for (int64_t i = 0; i < t.size(0); ++i) items.push_back(to_nested(py::cast(t[i])));
    return NestedList(std::move(items));
  }
  return scalar_leaf(h);
}

std::optional<Dtype> to_dtype(const py::object& o) {
  if (o.is_none()) return std::nullopt;
  if (!py::isinstance<Dtype>(o))
    throw Error(
        "[dtype] expected attn.float32, attn.int64, attn.bool, attn.bfloat16 or attn.float16, "
        "got " +
        std::string(py::repr(o)));
  return o.cast<Dtype>();
}

int64_t to_index_int(const py::handle& h, bool is_size) {
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

Shape to_shape(const py::args& args, const py::kwargs& kwargs, const char* creating) {
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

Tensor optional_tensor(const py::object& o) { return o.is_none() ? Tensor() : o.cast<Tensor>(); }

Generator* gen_arg(const py::object& g) {
  if (g.is_none()) return nullptr;
  if (!py::isinstance<Generator>(g))
    throw Error(std::string("[generator] expected an attn.Generator, got ") +
                std::string(py::str(py::type::handle_of(g).attr("__name__"))));
  return g.cast<Generator*>();
}

// ---- NumPy and Python lists ---------------------------------------------------------------------

Tensor from_numpy(py::array arr) {
  py::dtype dt = arr.dtype();
  Dtype d;
  if (dt.is(py::dtype::of<float>())) {
    d = Dtype::Float32;
  } else if (dt.is(py::dtype::of<int64_t>())) {
    d = Dtype::Int64;
  } else if (dt.is(py::dtype::of<bool>())) {
    d = Dtype::Bool;
  } else if (dt.equal(py::dtype("float16"))) {  // numpy.float16 (native order): binary16, shared
    d = Dtype::Float16;
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
  // The array is released with the GIL taken: the last reference to the tensor may go in a call
  // that released it (or on a thread that never held it).
  auto* keep = new py::object(arr);
  std::shared_ptr<void> owner(keep, [](void* p) {
    py::gil_scoped_acquire gil;
    delete static_cast<py::object*>(p);
  });
  return from_blob(const_cast<void*>(arr.data()), shape, strides, d, owner);
}

py::array to_numpy(const Tensor& t) {
  // NumPy has no bfloat16; torch raises this TypeError too.
  if (t.dtype() == Dtype::BFloat16) throw py::type_error("Got unsupported ScalarType BFloat16");
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
    case Dtype::Float16: return py::array(py::dtype("float16"), shape, strides, t.raw_data(), base);
    case Dtype::BFloat16: break;  // refused above
  }
  return py::array();
}

py::object to_list(const Tensor& t) {
  if (t.dim() == 0) {
    switch (t.dtype()) {
      case Dtype::Float32:
      case Dtype::BFloat16:
      case Dtype::Float16: return py::float_(t.item<double>());
      case Dtype::Int64: return py::int_(t.item<int64_t>());
      case Dtype::Bool: return py::bool_(t.item<bool>());
    }
  }
  py::list l;
  for (int64_t i = 0; i < t.size(0); ++i) l.append(to_list(t[i]));
  return l;
}

Tensor make_tensor(const py::object& data, const py::object& dtype, bool requires_grad) {
  Tensor t;
  const std::optional<Dtype> d = to_dtype(dtype);
  // Copies and conversions of tensor data run without the GIL (bindings.h); the NumPy array and
  // the nested lists are read with it.
  if (py::isinstance<Tensor>(data)) {
    const Tensor& src = data.cast<const Tensor&>();
    t = without_gil([&] {
      Tensor c = src.detach().clone();
      return d ? c.to(*d) : c;
    });
  } else if (py::isinstance<py::array>(data)) {
    // torch.tensor copies: the result never shares the array's memory (from_numpy does).
    const Tensor shared = from_numpy(data.cast<py::array>());
    t = without_gil([&] {
      if (d && *d != shared.dtype()) return shared.to(*d);
      return shared.is_contiguous() ? shared.clone() : shared.contiguous();
    });
  } else {
    NestedList values = to_nested(data);
    t = without_gil([&] { return tensor(values, d); });
  }
  if (requires_grad) t.requires_grad_(true);
  return t;
}

// ---- torch's factory keyword arguments ----------------------------------------------------------

Shape FactoryKwargs::shape(const py::args& a, const char* fn, bool float32_only) const {
  if (a.empty() && !size.contains("size"))
    throw py::type_error(std::string(fn) + "() missing its size, e.g. " + fn + "(2, 3)");
  if (float32_only && dtype && *dtype != Dtype::Float32)
    throw Error(std::string("[") + fn + "] only dtype torch.float32 is supported, got " +
                dtype_name(*dtype));
  return to_shape(a, size, fn);
}

Tensor FactoryKwargs::finish(Tensor t) const {
  if (device) t = t.to(*device);
  if (requires_grad) t.requires_grad_(true);
  return t;
}

FactoryKwargs factory_kwargs(const py::kwargs& k, const char* fn, bool random,
                             std::initializer_list<const char*> extra) {
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
      const std::string dev = v.is_none() ? "cpu" : std::string(py::str(v));
      if (dev.rfind("cuda", 0) == 0 && !cuda::is_built()) {
        // What torch built without CUDA raises (torch.cuda._lazy_init's AssertionError).
        const std::string what = std::string("[") + fn +
                                 "] attn was built without CUDA (Torch not compiled with CUDA "
                                 "enabled): only the cpu device is supported, got " +
                                 dev;
        // attn._unsupported.NoCudaError: an AssertionError and a ValueError.
        py::object cls = py::module_::import("attn._unsupported").attr("NoCudaError");
        PyErr_SetString(cls.ptr(), what.c_str());
        throw py::error_already_set();
      }
      if (dev != "cpu" && dev != "cpu:0" && dev.rfind("cuda", 0) != 0)
        throw Error(std::string("[") + fn + "] only the cpu and cuda devices are supported, got " +
                    dev);
      // A bad index ("cuda:9") or no GPU: DeviceError (RuntimeError) from resolve_device.
      f.device = resolve_device(Device(dev), fn);
    } else if (key == "pin_memory") {
      // Page-locked memory only matters for copies to a GPU: accepted and ignored.
    } else if (key == "layout") {
      if (!v.is_none() && std::string(py::str(v)) != "torch.strided")
        throw Error(std::string("[") + fn + "] only the strided layout is supported, got " +
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

}  // namespace attn::python

// attn._C.io: PyTorch's file format (attn.save / attn.load in python/attn/serialization.py).
// Python objects <-> attn::io::Value, keeping shared objects shared both ways. Also the
// safetensors reader and writer (attn/io.h), as safetensors.torch's save_file / load_file.
#include <attn/io.h>
#include <attn/torch_format.h>
#include <pybind11/stl.h>

#include <string>
#include <unordered_map>
#include <unordered_set>

#include "bindings.h"

namespace attn::python {

namespace {

[[noreturn]] void raise_py(PyObject* type, const std::string& msg) {
  PyErr_SetString(type, msg.c_str());
  throw py::error_already_set();
}

std::string type_name(const py::handle& h) {
  const py::handle t = py::type::handle_of(h);
  const std::string mod = py::str(t.attr("__module__"));
  const std::string name = py::str(t.attr("__qualname__"));
  return mod == "builtins" ? name : mod + "." + name;
}

std::string key_text(const py::handle& k) {
  if (PyUnicode_Check(k.ptr())) return "['" + py::cast<std::string>(k) + "']";
  return "[" + py::cast<std::string>(py::repr(k)) + "]";
}

// Python -> Value (attn.save).
class ToValue {
 public:
  ToValue()
      : ordered_dict_(py::module_::import("collections").attr("OrderedDict")),
        parameter_(py::module_::import("attn.nn").attr("Parameter")) {}

  io::Value convert(const py::handle& h, std::string& path, int depth) {
    auto where = [&] { return path.empty() ? std::string("the object") : "entry " + path; };
    if (depth > 1000)
      raise_py(PyExc_ValueError, "attn.save: " + where() + " is nested deeper than 1000 levels");
    PyObject* o = h.ptr();
    if (h.is_none()) return io::Value();
    if (PyBool_Check(o)) return io::Value(o == Py_True);
    if (PyFloat_Check(o)) return io::Value(PyFloat_AsDouble(o));
    // NumPy's integer scalars count as ints (as pickle writes them, through __index__ here).
    if (PyLong_Check(o) || (type_name(h).rfind("numpy.", 0) == 0 && py::hasattr(h, "__index__") &&
                            !PySequence_Check(o))) {
      const py::int_ i =
          PyLong_Check(o) ? py::reinterpret_borrow<py::int_>(h) : py::int_(h.attr("__index__")());
      int overflow = 0;
      const long long v = PyLong_AsLongLongAndOverflow(i.ptr(), &overflow);
      if (overflow)
        raise_py(PyExc_NotImplementedError, "attn.save: " + where() + " is the integer " +
                                                py::cast<std::string>(py::str(i.ptr())) +
                                                ", beyond 64 bits (attn saves 64-bit integers)");
      return io::Value(int64_t(v));
    }
    if (auto it = memo_.find(o); it != memo_.end()) return it->second;
    if (PyUnicode_Check(o)) return remember(o, io::Value(py::cast<std::string>(h)));
    if (py::isinstance<Tensor>(h)) {
      const bool param = py::isinstance(h, parameter_);
      return remember(o, io::Value(py::cast<Tensor>(h), param));
    }
    const bool is_tuple = PyTuple_Check(o), is_list = PyList_Check(o), is_dict = PyDict_Check(o);
    if (!is_tuple && !is_list && !is_dict) {
      std::string msg = "attn.save: " + where() + " is a '" + type_name(h) +
                        "', which attn cannot save (it saves None, bool, int, float, str, list, "
                        "tuple, dict, OrderedDict, attn.Tensor and attn.nn.Parameter)";
      if (type_name(h).rfind("torch.", 0) == 0)
        msg += "; save torch tensors with torch.save, or convert them with attn.tensor(t.numpy())";
      raise_py(PyExc_NotImplementedError, msg);
    }
    if (!open_.insert(o).second)
      raise_py(PyExc_ValueError,
               "attn.save: " + where() + " contains itself (a recursive structure)");
    const std::size_t len = path.size();
    io::Value v;
    if (is_tuple || is_list) {
      io::Value::Items items;
      const py::sequence seq = py::reinterpret_borrow<py::sequence>(h);
      for (std::size_t i = 0; i < py::len(seq); ++i) {
        path += "[" + std::to_string(i) + "]";
        items.push_back(convert(seq[i], path, depth + 1));
        path.resize(len);
      }
      v = is_tuple ? io::Value::tuple(std::move(items)) : io::Value::list(std::move(items));
    } else {
      const bool ordered = py::isinstance(h, ordered_dict_);
      v = io::Value::dict({}, ordered);
      for (auto [k, x] : py::reinterpret_borrow<py::dict>(h)) {
        path += key_text(k);
        io::Value key = convert(k, path, depth + 1);
        io::Value val = convert(x, path, depth + 1);
        v.entries().emplace_back(std::move(key), std::move(val));
        path.resize(len);
      }
      // A state dict's attributes (torch's `_metadata`) travel with it, as pickle keeps them.
      if (ordered && py::hasattr(h, "__dict__")) {
        for (auto [k, x] : py::reinterpret_borrow<py::dict>(h.attr("__dict__"))) {
          path += "." + py::cast<std::string>(py::str(k));
          io::Value val = convert(x, path, depth + 1);
          v.attributes().emplace_back(io::Value(py::cast<std::string>(k)), std::move(val));
          path.resize(len);
        }
      }
    }
    open_.erase(o);
    return remember(o, std::move(v));
  }

 private:
  io::Value remember(PyObject* o, io::Value v) {
    memo_.emplace(o, v);
    return v;
  }
  py::object ordered_dict_, parameter_;
  std::unordered_map<PyObject*, io::Value> memo_;
  std::unordered_set<PyObject*> open_;
};

// Value -> Python (attn.load). The value was validated by the loader: no cycles, depth bounded.
class ToPython {
 public:
  ToPython()
      : ordered_dict_(py::module_::import("collections").attr("OrderedDict")),
        parameter_(py::module_::import("attn.nn").attr("Parameter")) {}

  py::object convert(const io::Value& v) {
    using K = io::Value::Kind;
    switch (v.kind()) {
      case K::None: return py::none();
      case K::Bool: return py::bool_(v.as_bool());
      case K::Int: return py::int_(v.as_int());
      case K::Float: return py::float_(v.as_float());
      default: break;
    }
    const void* id = v.identity();
    if (auto it = memo_.find(id); it != memo_.end()) return it->second;
    py::object out;
    switch (v.kind()) {
      case K::Str: out = py::str(v.as_str()); break;
      case K::Tensor: {
        const Tensor& t = v.as_tensor();
        out = v.is_parameter() ? parameter_(t, py::arg("requires_grad") = t.requires_grad())
                               : py::cast(t);
        break;
      }
      case K::Tuple: {
        py::tuple tup(v.items().size());
        for (std::size_t i = 0; i < v.items().size(); ++i) tup[i] = convert(v.items()[i]);
        out = tup;
        break;
      }
      case K::List: {
        py::list l;
        memo_.emplace(id, l);
        for (const io::Value& x : v.items()) l.append(convert(x));
        return l;
      }
      case K::Dict: {
        py::object d = v.ordered() ? ordered_dict_() : py::dict();
        memo_.emplace(id, d);
        for (const auto& [k, x] : v.entries()) d[convert(k)] = convert(x);
        for (const auto& [k, x] : v.attributes()) py::setattr(d, k.as_str().c_str(), convert(x));
        return d;
      }
      default:
        throw io::UnpicklingError(std::string("[load_torch] unexpected ") + v.kind_name() +
                                  " value");
    }
    memo_.emplace(id, out);
    return out;
  }

 private:
  py::object ordered_dict_, parameter_;
  std::unordered_map<const void*, py::object> memo_;
};

io::Value to_value(const py::handle& obj) {
  std::string path;
  return ToValue().convert(obj, path, 0);
}

}  // namespace

void register_io(py::module_& m) {
  py::module_ io = m.def_submodule("io", "PyTorch's file format (attn.save / attn.load)");
  // Tried before attn::Error's ValueError (pybind11 tries translators newest first).
  py::register_exception<io::UnpicklingError>(
      m, "UnpicklingError", py::module_::import("pickle").attr("UnpicklingError"));
  py::register_exception<io::ArchiveError>(m, "ArchiveError", PyExc_RuntimeError);
  py::register_exception<io::UnsupportedError>(m, "UnsupportedError", PyExc_NotImplementedError);

  io.def(
      "to_torch_bytes",
      [](const py::object& obj) {
        const io::Value v = to_value(obj);
        std::string bytes = without_gil([&] { return io::to_torch_archive(v); });
        return py::bytes(bytes);
      },
      py::arg("obj"), "The bytes torch.save(obj, f) writes.");
  io.def(
      "save_torch",
      [](const py::object& obj, const std::string& path) {
        const io::Value v = to_value(obj);
        without_gil([&] {
          io::save_torch(path, v);
          return 0;
        });
      },
      py::arg("obj"), py::arg("path"), "torch.save(obj, path), written atomically.");
  io.def(
      "from_torch_bytes",
      [](const py::bytes& data, const std::string& what) {
        char* p = nullptr;
        Py_ssize_t n = 0;
        if (PyBytes_AsStringAndSize(data.ptr(), &p, &n) != 0) throw py::error_already_set();
        const std::string_view bytes(p, std::size_t(n));
        const io::Value v = without_gil([&] { return io::from_torch_archive(bytes, what); });
        return ToPython().convert(v);
      },
      py::arg("data"), py::arg("what") = "<memory>", "torch.load of the bytes of a file.");
  io.def(
      "load_torch",
      [](const std::string& path) {
        const io::Value v = without_gil([&] { return io::load_torch(path); });
        return ToPython().convert(v);
      },
      py::arg("path"), "torch.load(path).");
  io.def(
      "save_safetensors",
      [](const std::vector<std::pair<std::string, Tensor>>& tensors, const std::string& path,
         const std::map<std::string, std::string>& metadata) {
        without_gil([&] {
          io::save_safetensors(path, tensors, metadata);
          return 0;
        });
      },
      py::arg("tensors"), py::arg("path"),
      py::arg("metadata") = std::map<std::string, std::string>(),
      "safetensors.torch.save_file: [(name, tensor), ...] written to path, atomically.");
  io.def(
      "load_safetensors",
      [](const std::string& path) {
        io::SafeTensors st = without_gil([&] { return io::load_safetensors(path); });
        return py::make_tuple(st.tensors, st.metadata);
      },
      py::arg("path"), "safetensors.torch.load_file: ([(name, tensor), ...], metadata).");
}

}  // namespace attn::python

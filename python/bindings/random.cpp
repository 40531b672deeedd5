// attn.Generator, the default generator and its state, manual_seed / seed / initial_seed, and the
// random factories rand, randn and randint (bit for bit torch's CPU generator, attn/random.h).
#include <attn/attn.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <limits>
#include <random>

#include "bindings.h"
#include "convert.h"

namespace attn::python {

namespace {

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

void register_random(py::module_& m) {
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
  // rand / randn: float32 only (the dtype torch draws these bits for). The random factories draw
  // without the GIL: a Generator, the default one too, locks itself for each call's draws.
  auto random_shaped = [&m](const char* name, auto fn) {
    m.def(name, [fn, name](py::args a, py::kwargs k) {
      FactoryKwargs f = factory_kwargs(k, name, true);
      const Shape shape = f.shape(a, name, true);
      return without_gil([&] { return f.finish(fn(shape, f.generator)); });
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
    const int64_t lo = to_scalar(low).to_int(), hi = to_scalar(high).to_int();
    const Shape shape = to_shape(py::args(), f.size, "randint");
    return without_gil([&] {
      Tensor t = randint(lo, hi, shape, f.generator);
      if (f.dtype) t = t.to(*f.dtype);
      return f.finish(t);
    });
  });

  // ---- randperm and Tensor.random_ (torch 1.13's CPU stream; src/tensor/random_int.cpp) ------
  m.def(
      "randperm",
      [](int64_t n, py::kwargs k) {
        FactoryKwargs f = factory_kwargs(k, "randperm", true);
        return without_gil(
            [&] { return f.finish(randperm(n, f.generator, f.dtype.value_or(Dtype::Int64))); });
      },
      py::arg("n"));
  py::object tensor_cls = m.attr("Tensor");
  // random_(), random_(to), random_(from, to), each with generator=.
  tensor_cls.attr("random_") = py::cpp_function(
      [](Tensor& t, const py::object& a, const py::object& b, const py::object& g) -> Tensor& {
        Generator* gen = gen_arg(g);
        if (a.is_none() && b.is_none())
          return without_gil([&]() -> Tensor& { return random_(t, gen); });
        if (b.is_none() && !a.is_none()) {
          // random_(to) is random_(0, to), unless `to` was given by keyword as None.
          const auto to = a.cast<int64_t>();
          return without_gil([&]() -> Tensor& { return random_(t, 0, to, gen); });
        }
        const int64_t from = a.is_none() ? 0 : a.cast<int64_t>();
        const auto to = b.cast<std::optional<int64_t>>();
        return without_gil([&]() -> Tensor& { return random_(t, from, to, gen); });
      },
      py::name("random_"), py::is_method(tensor_cls), py::arg("from") = py::none(),
      py::arg("to") = py::none(), py::kw_only(), py::arg("generator") = py::none(),
      py::return_value_policy::reference_internal);
}

}  // namespace attn::python

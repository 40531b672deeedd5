// attn._C.autograd: what python/attn/autograd.py builds torch.autograd on (backward and grad over
// several tensors, tensor hooks, retain_grad, post-accumulate hooks, and the node of a custom
// autograd.Function). Python callables run from the engine with the GIL taken; they are held so
// that the last reference goes with the GIL held too (a graph may be freed on any thread).
#include <attn/attn.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>

#include "bindings.h"
#include "convert.h"

namespace attn::python {

namespace {

// A Python object whose last reference may be dropped without the GIL.
std::shared_ptr<py::object> hold(py::object o) {
  return std::shared_ptr<py::object>(new py::object(std::move(o)), [](py::object* p) {
    py::gil_scoped_acquire gil;
    delete p;
  });
}

std::vector<Tensor> tensors(const py::sequence& seq, const char* what) {
  std::vector<Tensor> out;
  for (py::handle h : seq) {
    if (h.is_none()) {
      out.emplace_back();
      continue;
    }
    if (!py::isinstance<Tensor>(h))
      throw py::type_error(std::string(what) + ": expected a sequence of Tensors, got " +
                           std::string(py::str(py::type::of(h).attr("__name__"))));
    out.push_back(h.cast<Tensor>());
  }
  return out;
}

std::optional<bool> optional_bool(const py::object& o) {
  if (o.is_none()) return std::nullopt;
  return o.cast<bool>();
}

py::object tensor_or_none(const Tensor& t) {
  if (!t.defined()) return py::none();
  return py::cast(t);
}

// A custom Function's backward, called with the GIL held: backward(grads, saved_tensors) (the
// node's n_saved saved tensors, version-checked: a freed graph throws), its result one Tensor or
// None per input of the node, each of that input's shape.
std::vector<Tensor> call_backward(const py::object& backward, const std::string& name,
                                  const Node& node, std::size_t n_saved, const py::object& grads) {
  py::tuple saved(n_saved);
  for (std::size_t i = 0; i < n_saved; ++i) saved[i] = tensor_or_none(node.saved_tensor(i));
  py::object r = backward(grads, saved);
  std::vector<Tensor> out;
  for (py::handle h : r) {
    if (h.is_none())
      out.emplace_back();
    else if (py::isinstance<Tensor>(h))
      out.push_back(h.cast<Tensor>());
    else
      throw py::type_error("function " + name + " returned a gradient of type " +
                           std::string(py::str(py::type::of(h).attr("__name__"))) +
                           ", expected a Tensor or None");
  }
  const std::size_t n = node.inputs.size();
  if (out.size() != n)
    throw Error("[backward] function " + name +
                " returned an incorrect number of gradients (expected " + std::to_string(n) +
                ", got " + std::to_string(out.size()) + ")");
  for (std::size_t i = 0; i < n; ++i)
    if (out[i].defined() && node.inputs[i].defined() && out[i].shape() != node.inputs[i].shape)
      throw Error("[backward] function " + name + " returned an invalid gradient at index " +
                  std::to_string(i) + " - got " + shape_str(out[i].shape()) +
                  " but expected shape compatible with " + shape_str(node.inputs[i].shape));
  return out;
}

}  // namespace

void register_autograd(py::module_& root) {
  py::module_ m = root.def_submodule("autograd", "torch.autograd's engine calls");

  m.def(
      "backward",
      [](const py::sequence& roots, const py::sequence& grads, const py::object& retain_graph) {
        std::vector<Tensor> r = tensors(roots, "backward"), g = tensors(grads, "backward");
        std::optional<bool> retain = optional_bool(retain_graph);
        without_gil([&] { attn::backward(r, g, retain); });
      },
      py::arg("tensors"), py::arg("grad_tensors"), py::arg("retain_graph") = py::none());

  m.def(
      "grad",
      [](const py::sequence& outputs, const py::sequence& inputs, const py::sequence& grads,
         const py::object& retain_graph, bool allow_unused) {
        std::vector<Tensor> o = tensors(outputs, "grad"), i = tensors(inputs, "grad"),
                            g = tensors(grads, "grad");
        std::optional<bool> retain = optional_bool(retain_graph);
        std::vector<Tensor> result =
            without_gil([&] { return attn::grad(o, i, g, retain, allow_unused); });
        py::tuple out(result.size());
        for (std::size_t k = 0; k < result.size(); ++k) out[k] = tensor_or_none(result[k]);
        return out;
      },
      py::arg("outputs"), py::arg("inputs"), py::arg("grad_outputs"),
      py::arg("retain_graph") = py::none(), py::arg("allow_unused") = false);

  // hook(grad) -> Tensor or None.
  m.def("register_hook", [](const Tensor& t, const py::function& hook) {
    auto fn = hold(hook);
    return attn::register_hook(t, [fn](const Tensor& grad) -> Tensor {
      py::gil_scoped_acquire gil;
      py::object r = (*fn)(grad);
      if (r.is_none()) return Tensor();
      if (!py::isinstance<Tensor>(r))
        throw py::type_error("register_hook: the hook returned " +
                             std::string(py::str(py::type::of(r).attr("__name__"))) +
                             ", expected a Tensor or None");
      return r.cast<Tensor>();
    });
  });
  m.def("remove_hook", &attn::remove_hook);
  m.def("retain_grad", &attn::retain_grad);
  m.def("retains_grad", &attn::retains_grad);

  // hook(tensor) -> None.
  m.def("register_post_accumulate_grad_hook", [](const Tensor& t, const py::function& hook) {
    auto fn = hold(hook);
    return attn::register_post_accumulate_grad_hook(t, [fn](const Tensor& leaf) {
      py::gil_scoped_acquire gil;
      (*fn)(leaf);
    });
  });
  m.def("remove_post_accumulate_grad_hook", &attn::remove_post_accumulate_grad_hook);

  // A custom Function's node: `out` (the forward's result, computed without recording) becomes
  // the result of node `name` over `inputs` (None where an argument is not a tensor), with
  // `saved` saved (version-checked, freed by a pass without retain_graph). The pass calls
  // backward(grad, saved_tensors) and takes one gradient (or None) per input.
  m.def(
      "record_function",
      [](Tensor out, const std::string& name, const py::sequence& inputs, const py::sequence& saved,
         const py::function& backward) {
        std::vector<Tensor> in = tensors(inputs, name.c_str()), keep = tensors(saved, "saved");
        std::vector<const Tensor*> ptrs;
        for (const Tensor& t : in) ptrs.push_back(&t);
        auto fn = hold(backward);
        const std::size_t n_saved = keep.size();
        BackwardFn formula = [fn, name, n_saved](const Node& node, const Tensor& grad) {
          py::gil_scoped_acquire gil;
          return call_backward(*fn, name, node, n_saved, py::cast(grad));
        };
        return detail::record(out, name, ptrs, std::move(formula), keep);
      },
      py::arg("out"), py::arg("name"), py::arg("inputs"), py::arg("saved"), py::arg("backward"));

  // The same for a Function with several results (`outs`, floating point, one dtype; None where
  // an output is not differentiable). attn's nodes have one result, so the Function's node is
  // recorded on a joint result: all outputs' elements flattened into one vector (an expanded
  // zero, no memory). Each output gets a node of the same name whose formula puts its gradient
  // at its place in a zero vector of the joint's size; the engine sums those before the joint
  // node runs, which hands backward(grads, saved_tensors) one gradient per output (zeros for one
  // that got none, None for one not recorded).
  m.def(
      "record_function_multi",
      [](const py::sequence& outs_py, const std::string& name, const py::sequence& inputs,
         const py::sequence& saved, const py::function& backward) {
        std::vector<Tensor> outs = tensors(outs_py, name.c_str()),
                            in = tensors(inputs, name.c_str()), keep = tensors(saved, "saved");
        std::vector<int64_t> offsets;
        std::vector<Shape> shapes;
        int64_t total = 0;
        std::optional<Dtype> dtype;
        for (const Tensor& o : outs) {
          offsets.push_back(total);
          shapes.push_back(o.defined() ? o.shape() : Shape{});
          if (!o.defined()) continue;
          if (dtype && *dtype != o.dtype())
            throw Error("[" + name + "] outputs of several dtypes (" + dtype_name(*dtype) + ", " +
                        dtype_name(o.dtype()) + ") are not supported");
          dtype = o.dtype();
          total += o.numel();
        }
        if (!dtype) throw Error("[" + name + "] no differentiable output");
        std::vector<const Tensor*> ptrs;
        for (const Tensor& t : in) ptrs.push_back(&t);
        auto fn = hold(backward);
        const std::size_t n_saved = keep.size(), n_out = outs.size();
        std::vector<bool> recorded;
        for (const Tensor& o : outs) recorded.push_back(o.defined());
        BackwardFn joint_formula = [fn, name, n_saved, n_out, offsets, shapes, recorded](
                                       const Node& node, const Tensor& flat) {
          py::gil_scoped_acquire gil;
          py::tuple grads_out(n_out);
          for (std::size_t k = 0; k < n_out; ++k) {
            const int64_t n = (k + 1 < n_out ? offsets[k + 1] : flat.numel()) - offsets[k];
            grads_out[k] = recorded[k] ? py::cast(flat.narrow(0, offsets[k], n).reshape(shapes[k]))
                                       : py::none();
          }
          return call_backward(*fn, name, node, n_saved, grads_out);
        };
        Tensor joint = zeros({1}, *dtype).expand({total});
        joint = detail::record(joint, name, ptrs, std::move(joint_formula), keep);
        for (std::size_t k = 0; k < n_out; ++k) {
          if (!outs[k].defined()) continue;
          const int64_t offset = offsets[k], n = outs[k].numel(), size = total;
          const Dtype dt = *dtype;
          BackwardFn place = [offset, n, size, dt](const Node&, const Tensor& g) {
            Tensor flat = zeros({size}, dt);
            flat.narrow(0, offset, n).copy_(g.reshape({n}));
            return std::vector<Tensor>{flat};
          };
          detail::record(outs[k], name, {&joint}, std::move(place));
        }
        py::tuple result(n_out);
        for (std::size_t k = 0; k < n_out; ++k) result[k] = tensor_or_none(outs[k]);
        return result;
      },
      py::arg("outs"), py::arg("name"), py::arg("inputs"), py::arg("saved"), py::arg("backward"));
}

}  // namespace attn::python

// attn.optim (_C.optim): AdamW, clip_grad_norm_ and nanoGPT's cosine learning-rate schedule.
#include <attn/attn.h>
#include <attn/optim.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "convert.h"

namespace attn::python {

void register_optim(py::module_& m) {
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
      .def("step", &optim::AdamW::step, release())
      .def("zero_grad", &optim::AdamW::zero_grad, py::arg("set_to_none") = true)
      .def("set_lr", &optim::AdamW::set_lr)
      .def("lr", &optim::AdamW::lr)
      .def("state_dict", &optim::AdamW::state_dict)
      .def("load_state_dict", &optim::AdamW::load_state_dict);
  opt.def("clip_grad_norm_", &optim::clip_grad_norm_, py::arg("parameters"), py::arg("max_norm"),
          py::arg("error_if_nonfinite") = false, release());
  opt.def("cosine_lr", &optim::cosine_lr, py::arg("it"), py::arg("lr"), py::arg("min_lr"),
          py::arg("warmup_iters"), py::arg("lr_decay_iters"));
}

}  // namespace attn::python

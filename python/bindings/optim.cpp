// attn.optim (_C.optim): the optimizers (Adam, AdamW, SGD, RMSprop, Adagrad) over parameter groups,
// the lr schedulers, gradient clipping and nanoGPT's cosine learning-rate schedule.
// python/attn/optim wraps them in torch's classes (param_groups as dicts, state_dict in torch's
// structure).
#include <attn/attn.h>
#include <attn/optim.h>
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "convert.h"

namespace attn::python {

namespace {

// A group's hyper-parameters from a dict of C++ field names ("lr", "beta1", "momentum", ...);
// an unknown key is an error.
optim::ParamGroup group_options(const py::dict& d) {
  optim::ParamGroup g;
  for (const auto& [k, v] : d) {
    const std::string key = py::cast<std::string>(k);
    if (key == "lr")
      g.lr = py::cast<double>(v);
    else if (key == "beta1")
      g.beta1 = py::cast<double>(v);
    else if (key == "beta2")
      g.beta2 = py::cast<double>(v);
    else if (key == "eps")
      g.eps = py::cast<double>(v);
    else if (key == "weight_decay")
      g.weight_decay = py::cast<double>(v);
    else if (key == "amsgrad")
      g.amsgrad = py::cast<bool>(v);
    else if (key == "momentum")
      g.momentum = py::cast<double>(v);
    else if (key == "dampening")
      g.dampening = py::cast<double>(v);
    else if (key == "nesterov")
      g.nesterov = py::cast<bool>(v);
    else if (key == "maximize")
      g.maximize = py::cast<bool>(v);
    else if (key == "initial_lr")
      g.initial_lr = py::cast<double>(v);
    else if (key == "alpha")
      g.alpha = py::cast<double>(v);
    else if (key == "centered")
      g.centered = py::cast<bool>(v);
    else if (key == "lr_decay")
      g.lr_decay = py::cast<double>(v);
    else if (key == "initial_accumulator_value")
      g.initial_accumulator_value = py::cast<double>(v);
    else
      throw Error("[optim] unknown parameter group option '" + key + "'");
  }
  return g;
}

using Groups = std::vector<std::pair<std::vector<Tensor>, py::dict>>;

std::vector<optim::ParamGroup> to_groups(const Groups& groups) {
  std::vector<optim::ParamGroup> out;
  for (const auto& [params, options] : groups) {
    optim::ParamGroup g = group_options(options);
    g.params = params;
    out.push_back(std::move(g));
  }
  return out;
}

// A resolved group's options back as a dict of C++ field names (the fields that are set).
py::dict group_dict(const optim::ParamGroup& g) {
  py::dict d;
  auto put = [&d](const char* k, const auto& v) {
    if (v) d[k] = *v;
  };
  put("lr", g.lr);
  put("beta1", g.beta1);
  put("beta2", g.beta2);
  put("eps", g.eps);
  put("weight_decay", g.weight_decay);
  put("amsgrad", g.amsgrad);
  put("momentum", g.momentum);
  put("dampening", g.dampening);
  put("nesterov", g.nesterov);
  put("maximize", g.maximize);
  put("initial_lr", g.initial_lr);
  put("alpha", g.alpha);
  put("centered", g.centered);
  put("lr_decay", g.lr_decay);
  put("initial_accumulator_value", g.initial_accumulator_value);
  return d;
}

}  // namespace

void register_optim(py::module_& m) {
  py::module_ opt = m.def_submodule("optim");
  py::class_<optim::Optimizer>(opt, "Optimizer")
      .def("step", &optim::Optimizer::step, release())
      .def("zero_grad", &optim::Optimizer::zero_grad, py::arg("set_to_none") = true, release())
      .def("num_groups", &optim::Optimizer::num_groups)
      .def("lr", py::overload_cast<std::size_t>(&optim::Optimizer::lr, py::const_))
      .def("set_lr", py::overload_cast<double>(&optim::Optimizer::set_lr))
      .def("group",
           [](const optim::Optimizer& o, std::size_t i) {
             if (i >= o.num_groups()) throw IndexError("[optim] group index out of range");
             return group_dict(o.groups()[i]);
           })
      .def("set_group_options", [](optim::Optimizer& o, std::size_t i,
                                   const py::dict& d) { o.set_group_options(i, group_options(d)); })
      .def("add_param_group",
           [](optim::Optimizer& o, const std::vector<Tensor>& params, const py::dict& d) {
             optim::ParamGroup g = group_options(d);
             g.params = params;
             o.add_param_group(std::move(g));
           })
      .def("state_dict", &optim::Optimizer::state_dict, release())
      .def("load_state_dict",
           static_cast<void (optim::Optimizer::*)(const nn::NamedTensors&)>(
               &optim::Optimizer::load_state_dict),
           release());

  py::class_<optim::Adam, optim::Optimizer>(opt, "Adam")
      .def(py::init([](const Groups& groups, double lr, double beta1, double beta2, double eps,
                       double weight_decay, bool amsgrad) {
             return optim::Adam(to_groups(groups),
                                optim::AdamOptions{lr, beta1, beta2, eps, weight_decay, amsgrad});
           }),
           py::arg("groups"), py::arg("lr"), py::arg("beta1"), py::arg("beta2"), py::arg("eps"),
           py::arg("weight_decay"), py::arg("amsgrad"));
  py::class_<optim::AdamW, optim::Adam>(opt, "AdamW")
      .def(py::init([](const Groups& groups, double lr, double beta1, double beta2, double eps,
                       double weight_decay, bool amsgrad) {
             return optim::AdamW(to_groups(groups),
                                 optim::AdamWOptions{lr, beta1, beta2, eps, weight_decay, amsgrad});
           }),
           py::arg("groups"), py::arg("lr"), py::arg("beta1"), py::arg("beta2"), py::arg("eps"),
           py::arg("weight_decay"), py::arg("amsgrad"));
  py::class_<optim::SGD, optim::Optimizer>(opt, "SGD")
      .def(py::init([](const Groups& groups, double lr, double momentum, double dampening,
                       double weight_decay, bool nesterov) {
             return optim::SGD(to_groups(groups),
                               optim::SGDOptions{lr, momentum, dampening, weight_decay, nesterov});
           }),
           py::arg("groups"), py::arg("lr"), py::arg("momentum"), py::arg("dampening"),
           py::arg("weight_decay"), py::arg("nesterov"));
  py::class_<optim::RMSprop, optim::Optimizer>(opt, "RMSprop")
      .def(py::init([](const Groups& groups, double lr, double alpha, double eps,
                       double weight_decay, double momentum, bool centered) {
             return optim::RMSprop(
                 to_groups(groups),
                 optim::RMSpropOptions{lr, alpha, eps, weight_decay, momentum, centered});
           }),
           py::arg("groups"), py::arg("lr"), py::arg("alpha"), py::arg("eps"),
           py::arg("weight_decay"), py::arg("momentum"), py::arg("centered"));
  py::class_<optim::Adagrad, optim::Optimizer>(opt, "Adagrad")
      .def(py::init([](const Groups& groups, double lr, double lr_decay, double weight_decay,
                       double initial_accumulator_value, double eps) {
             return optim::Adagrad(
                 to_groups(groups),
                 optim::AdagradOptions{lr, lr_decay, weight_decay, initial_accumulator_value, eps});
           }),
           py::arg("groups"), py::arg("lr"), py::arg("lr_decay"), py::arg("weight_decay"),
           py::arg("initial_accumulator_value"), py::arg("eps"));

  // Schedulers: each keeps its optimizer alive (keep_alive<1, 2>).
  py::class_<optim::LRScheduler>(opt, "LRScheduler")
      .def("step", &optim::LRScheduler::step)
      .def("get_last_lr", &optim::LRScheduler::get_last_lr)
      .def_property_readonly("base_lrs", &optim::LRScheduler::base_lrs)
      .def_property_readonly("last_epoch", &optim::LRScheduler::last_epoch)
      .def_property_readonly("step_count", &optim::LRScheduler::step_count)
      .def("load_state", &optim::LRScheduler::load_state, py::arg("base_lrs"),
           py::arg("last_epoch"), py::arg("step_count"), py::arg("last_lr"));
  py::class_<optim::LambdaLR, optim::LRScheduler>(opt, "LambdaLR")
      .def(py::init<optim::Optimizer&, std::vector<optim::LambdaLR::Lambda>, int64_t>(),
           py::arg("optimizer"), py::arg("lr_lambdas"), py::arg("last_epoch"),
           py::keep_alive<1, 2>());
  py::class_<optim::StepLR, optim::LRScheduler>(opt, "StepLR")
      .def(py::init<optim::Optimizer&, int64_t, double, int64_t>(), py::arg("optimizer"),
           py::arg("step_size"), py::arg("gamma"), py::arg("last_epoch"), py::keep_alive<1, 2>());
  py::class_<optim::ExponentialLR, optim::LRScheduler>(opt, "ExponentialLR")
      .def(py::init<optim::Optimizer&, double, int64_t>(), py::arg("optimizer"), py::arg("gamma"),
           py::arg("last_epoch"), py::keep_alive<1, 2>());
  py::class_<optim::ConstantLR, optim::LRScheduler>(opt, "ConstantLR")
      .def(py::init<optim::Optimizer&, double, int64_t, int64_t>(), py::arg("optimizer"),
           py::arg("factor"), py::arg("total_iters"), py::arg("last_epoch"),
           py::keep_alive<1, 2>());
  py::class_<optim::MultiStepLR, optim::LRScheduler>(opt, "MultiStepLR")
      .def(py::init<optim::Optimizer&, std::vector<int64_t>, double, int64_t>(),
           py::arg("optimizer"), py::arg("milestones"), py::arg("gamma"), py::arg("last_epoch"),
           py::keep_alive<1, 2>());
  py::class_<optim::CosineAnnealingLR, optim::LRScheduler>(opt, "CosineAnnealingLR")
      .def(py::init<optim::Optimizer&, int64_t, double, int64_t>(), py::arg("optimizer"),
           py::arg("T_max"), py::arg("eta_min"), py::arg("last_epoch"), py::keep_alive<1, 2>());
  py::class_<optim::LinearLR, optim::LRScheduler>(opt, "LinearLR")
      .def(py::init<optim::Optimizer&, double, double, int64_t, int64_t>(), py::arg("optimizer"),
           py::arg("start_factor"), py::arg("end_factor"), py::arg("total_iters"),
           py::arg("last_epoch"), py::keep_alive<1, 2>());

  py::class_<optim::OneCycleLR, optim::LRScheduler>(opt, "OneCycleLR")
      .def(py::init([](optim::Optimizer& o, std::vector<double> max_lrs, int64_t total_steps,
                       double pct_start, bool linear_anneal, bool cycle_momentum,
                       std::vector<double> base_momentum, std::vector<double> max_momentum,
                       double div_factor, double final_div_factor, bool three_phase,
                       int64_t last_epoch) {
             optim::OneCycleOptions oc;
             oc.pct_start = pct_start;
             oc.linear_anneal = linear_anneal;
             oc.cycle_momentum = cycle_momentum;
             oc.base_momentum = std::move(base_momentum);
             oc.max_momentum = std::move(max_momentum);
             oc.div_factor = div_factor;
             oc.final_div_factor = final_div_factor;
             oc.three_phase = three_phase;
             return std::make_unique<optim::OneCycleLR>(o, std::move(max_lrs), total_steps, oc,
                                                        last_epoch);
           }),
           py::arg("optimizer"), py::arg("max_lrs"), py::arg("total_steps"), py::arg("pct_start"),
           py::arg("linear_anneal"), py::arg("cycle_momentum"), py::arg("base_momentum"),
           py::arg("max_momentum"), py::arg("div_factor"), py::arg("final_div_factor"),
           py::arg("three_phase"), py::arg("last_epoch"), py::keep_alive<1, 2>());

  opt.def(
      "clip_grad_norm_",
      py::overload_cast<const std::vector<Tensor>&, double, double, bool>(&optim::clip_grad_norm_),
      py::arg("parameters"), py::arg("max_norm"), py::arg("norm_type"),
      py::arg("error_if_nonfinite") = false, release());
  opt.def("clip_grad_value_", &optim::clip_grad_value_, py::arg("parameters"),
          py::arg("clip_value"), release());
  opt.def("cosine_lr", &optim::cosine_lr, py::arg("it"), py::arg("lr"), py::arg("min_lr"),
          py::arg("warmup_iters"), py::arg("lr_decay_iters"));
}

}  // namespace attn::python

// attn.train (_C.train): the training loop of `attn train` (attn::train::train, include/attn/
// train.h), with keyword arguments named as the CLI's flags ('_' for '-'). What the loop prints
// goes to Python's sys.stdout; the loop runs without the GIL.
#include <attn/train.h>
#include <pybind11/stl.h>

#include <ostream>
#include <streambuf>
#include <string>

#include "bindings.h"

namespace attn::python {

namespace {

// A streambuf that hands whole flushes to sys.stdout.write (taking the GIL for it), so that the
// loop's lines reach Python's stdout (a terminal, a file, pytest's capture) in order.
class PythonStdout : public std::streambuf {
 public:
  ~PythonStdout() override { flush_to_python(); }

 protected:
  int overflow(int c) override {
    if (c != traits_type::eof()) buffer_.push_back(char(c));
    return traits_type::not_eof(c);
  }
  std::streamsize xsputn(const char* s, std::streamsize n) override {
    buffer_.append(s, std::size_t(n));
    return n;
  }
  int sync() override { return flush_to_python() ? 0 : -1; }

 private:
  bool flush_to_python() {
    if (buffer_.empty()) return true;
    py::gil_scoped_acquire gil;
    try {
      PyObject* text = PyUnicode_DecodeUTF8(buffer_.data(), Py_ssize_t(buffer_.size()), "replace");
      if (!text) throw py::error_already_set();
      py::object out = py::module_::import("sys").attr("stdout");
      out.attr("write")(py::reinterpret_steal<py::str>(text));
      out.attr("flush")();
      buffer_.clear();
      return true;
    } catch (py::error_already_set& e) {
      e.restore();
      PyErr_Clear();  // a closed or missing stdout: the lines are dropped
      buffer_.clear();
      return false;
    }
  }
  std::string buffer_;
};

}  // namespace

void register_train(py::module_& m) {
  py::module_ t = m.def_submodule(
      "train", "attn::train: the training loop of `attn train` (include/attn/train.h)");
  py::class_<train::TrainEval>(t, "TrainEval")
      .def_readonly("step", &train::TrainEval::step)
      .def_readonly("train_loss", &train::TrainEval::train_loss)
      .def_readonly("val_loss", &train::TrainEval::val_loss)
      .def("__repr__", [](const train::TrainEval& e) {
        return "TrainEval(step=" + std::to_string(e.step) +
               ", train_loss=" + py::repr(py::float_(e.train_loss)).cast<std::string>() +
               ", val_loss=" + py::repr(py::float_(e.val_loss)).cast<std::string>() + ")";
      });
  py::class_<train::TrainResult>(t, "TrainResult")
      .def_readonly("iters", &train::TrainResult::iters)
      .def_readonly("ms_per_iter", &train::TrainResult::ms_per_iter)
      .def_readonly("tokens_per_s", &train::TrainResult::tokens_per_s)
      .def_readonly("train_loss", &train::TrainResult::train_loss)
      .def_readonly("val_loss", &train::TrainResult::val_loss)
      .def_readonly("history", &train::TrainResult::history)
      .def_readonly("skipped", &train::TrainResult::skipped);

  const train::TrainOptions d;
  t.def(
      "train",
      [](const std::optional<std::string>& data, const std::string& out, bool resume,
         int64_t n_layer, int64_t n_head, int64_t n_embd, int64_t block_size, double dropout,
         bool bias, int64_t batch_size, int64_t max_iters, double lr, double min_lr,
         int64_t warmup_iters, int64_t lr_decay_iters, double weight_decay, double beta1,
         double beta2, double grad_clip, uint64_t seed, int64_t zero, int64_t bucket_kib,
         bool context_parallel, bool pack, const std::string& doc_separator,
         const std::string& on_nonfinite, int64_t eval_interval, int64_t eval_iters,
         int64_t log_interval, int64_t threads) {
        train::TrainOptions o;
        o.data = data.value_or("");
        o.out = out;
        o.resume = resume;
        o.model.n_layer = n_layer;
        o.model.n_head = n_head;
        o.model.n_embd = n_embd;
        o.model.block_size = block_size;
        o.model.dropout = dropout;
        o.model.bias = bias;
        o.batch_size = batch_size;
        o.max_iters = max_iters;
        o.lr = lr;
        o.min_lr = min_lr;
        o.warmup_iters = warmup_iters;
        o.lr_decay_iters = lr_decay_iters;
        o.weight_decay = weight_decay;
        o.beta1 = beta1;
        o.beta2 = beta2;
        o.grad_clip = grad_clip;
        o.seed = seed;
        o.zero = zero;
        o.bucket_kib = bucket_kib;
        o.context_parallel = context_parallel;
        o.pack = pack;
        o.doc_separator = doc_separator;
        if (on_nonfinite == "stop")
          o.on_nonfinite = train::TrainOptions::OnNonFinite::Stop;
        else if (on_nonfinite == "skip")
          o.on_nonfinite = train::TrainOptions::OnNonFinite::Skip;
        else
          throw py::value_error("attn.train.train: on_nonfinite must be 'stop' or 'skip', got '" +
                                on_nonfinite + "'");
        o.eval_interval = eval_interval;
        o.eval_iters = eval_iters;
        o.log_interval = log_interval;
        o.threads = threads;
        PythonStdout buffer;
        std::ostream stream(&buffer);
        // Ctrl-C (or any signal whose Python handler raises) stops the run before the next step,
        // as it stops a Python loop: the handler's exception (KeyboardInterrupt) propagates, the
        // last checkpoint stays in place.
        train::TrainHooks hooks;
        hooks.before_step = [](int, int64_t, nn::GPT&) {
          py::gil_scoped_acquire gil;
          if (PyErr_CheckSignals() != 0) throw py::error_already_set();
        };
        train::TrainResult r;
        {
          py::gil_scoped_release released;
          r = train::train(o, stream, hooks);
          stream.flush();
        }
        return r;
      },
      py::kw_only(), py::arg("data") = py::none(), py::arg("out") = d.out,
      py::arg("resume") = d.resume, py::arg("n_layer") = d.model.n_layer,
      py::arg("n_head") = d.model.n_head, py::arg("n_embd") = d.model.n_embd,
      py::arg("block_size") = d.model.block_size, py::arg("dropout") = d.model.dropout,
      py::arg("bias") = d.model.bias, py::arg("batch_size") = d.batch_size,
      py::arg("max_iters") = d.max_iters, py::arg("lr") = d.lr, py::arg("min_lr") = d.min_lr,
      py::arg("warmup_iters") = d.warmup_iters, py::arg("lr_decay_iters") = d.lr_decay_iters,
      py::arg("weight_decay") = d.weight_decay, py::arg("beta1") = d.beta1,
      py::arg("beta2") = d.beta2, py::arg("grad_clip") = d.grad_clip, py::arg("seed") = d.seed,
      py::arg("zero") = d.zero, py::arg("bucket_kib") = d.bucket_kib,
      py::arg("context_parallel") = d.context_parallel, py::arg("pack") = d.pack,
      py::arg("doc_separator") = d.doc_separator, py::arg("on_nonfinite") = "stop",
      py::arg("eval_interval") = d.eval_interval, py::arg("eval_iters") = d.eval_iters,
      py::arg("log_interval") = d.log_interval, py::arg("threads") = d.threads);
}

}  // namespace attn::python

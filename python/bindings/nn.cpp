// attn.nn: the initialisers of attn.nn.init (_C.init) and the C++ modules the Python modules wrap
// (_C.modules: Linear, Embedding, Dropout, MultiheadAttention, GPT, KVCache, PagedKVCache,
// Vocabulary).
#include <attn/attn.h>
#include <attn/gpt.h>
#include <pybind11/functional.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>

#include "bindings.h"
#include "convert.h"

namespace attn::python {

namespace {
// A paged cache's dtype by torch's names ("float32", "bfloat16", "float16") or "int8"; ValueError
// otherwise.
KVCacheDtype kv_dtype_arg(const std::string& name) {
  if (name == "float32" || name == "float") return KVCacheDtype::Float32;
  if (name == "bfloat16") return KVCacheDtype::BFloat16;
  if (name == "float16" || name == "half") return KVCacheDtype::Float16;
  if (name == "int8") return KVCacheDtype::Int8;
  throw py::value_error("kv_dtype must be 'float32', 'bfloat16', 'float16' or 'int8', got '" +
                        name + "'");
}
}  // namespace

void register_nn(py::module_& m) {
  // The initialisers fill without the GIL (the default generator locks itself for its draws).
  py::module_ init = m.def_submodule("init");
  // `with _C.init.SkipInit():` holds an nn::init::SkipInitGuard on this thread (attn.nn.utils.
  // skip_init).
  struct SkipInit {
    std::optional<nn::init::SkipInitGuard> guard;
  };
  py::class_<SkipInit>(init, "SkipInit")
      .def(py::init<>())
      .def("__enter__", [](SkipInit& s) { s.guard.emplace(); })
      .def("__exit__", [](SkipInit& s, const py::args&) { s.guard.reset(); });
  init.def(
      "uniform_",
      [](Tensor& t, double a, double b) -> Tensor& { return nn::init::uniform_(t, a, b); },
      py::arg("tensor"), py::arg("a") = 0.0, py::arg("b") = 1.0, py::return_value_policy::reference,
      release());
  init.def(
      "normal_",
      [](Tensor& t, double mean, double std) -> Tensor& { return nn::init::normal_(t, mean, std); },
      py::arg("tensor"), py::arg("mean") = 0.0, py::arg("std") = 1.0,
      py::return_value_policy::reference, release());
  init.def(
      "zeros_", [](Tensor& t) -> Tensor& { return nn::init::zeros_(t); },
      py::return_value_policy::reference, release());
  init.def(
      "ones_", [](Tensor& t) -> Tensor& { return nn::init::ones_(t); },
      py::return_value_policy::reference, release());
  init.def(
      "kaiming_uniform_",
      [](Tensor& t, double a) -> Tensor& { return nn::init::kaiming_uniform_(t, a); },
      py::arg("tensor"), py::arg("a") = 0.0, py::return_value_policy::reference, release());
  init.def(
      "xavier_uniform_",
      [](Tensor& t, double gain) -> Tensor& { return nn::init::xavier_uniform_(t, gain); },
      py::arg("tensor"), py::arg("gain") = 1.0, py::return_value_policy::reference, release());
  // The rest of torch.nn.init (src/nn/init.cpp); the Python wrappers check the argument types.
  init.def(
      "constant_", [](Tensor& t, double v) -> Tensor& { return nn::init::constant_(t, v); },
      py::arg("tensor"), py::arg("val"), py::return_value_policy::reference, release());
  init.def("calculate_gain", &nn::init::calculate_gain, py::arg("nonlinearity"),
           py::arg("param") = py::none());
  init.def(
      "kaiming_uniform_full",
      [](Tensor& t, double a, const std::string& mode, const std::string& nl) -> Tensor& {
        return nn::init::kaiming_uniform_(t, a, mode, nl);
      },
      py::arg("tensor"), py::arg("a"), py::arg("mode"), py::arg("nonlinearity"),
      py::return_value_policy::reference, release());
  init.def(
      "kaiming_normal_",
      [](Tensor& t, double a, const std::string& mode, const std::string& nl) -> Tensor& {
        return nn::init::kaiming_normal_(t, a, mode, nl);
      },
      py::arg("tensor"), py::arg("a") = 0.0, py::arg("mode") = "fan_in",
      py::arg("nonlinearity") = "leaky_relu", py::return_value_policy::reference, release());
  init.def(
      "xavier_normal_",
      [](Tensor& t, double gain) -> Tensor& { return nn::init::xavier_normal_(t, gain); },
      py::arg("tensor"), py::arg("gain") = 1.0, py::return_value_policy::reference, release());
  init.def(
      "trunc_normal_",
      [](Tensor& t, double mean, double std, double a, double b) -> Tensor& {
        return nn::init::trunc_normal_(t, mean, std, a, b);
      },
      py::arg("tensor"), py::arg("mean") = 0.0, py::arg("std") = 1.0, py::arg("a") = -2.0,
      py::arg("b") = 2.0, py::return_value_policy::reference, release());

  // ---- C++ modules the Python modules wrap (their parameters are shared, not copied) ---------
  py::module_ mods = m.def_submodule("modules");
  py::class_<nn::Linear, std::shared_ptr<nn::Linear>>(mods, "Linear")
      // The constructors draw their initial weights without the GIL.
      .def(py::init([](int64_t in, int64_t out, bool bias) {
        return without_gil([&] { return std::make_shared<nn::Linear>(in, out, bias); });
      }))
      .def_readonly("weight", &nn::Linear::weight)
      .def_readonly("bias", &nn::Linear::bias);
  py::class_<nn::Embedding, std::shared_ptr<nn::Embedding>>(mods, "Embedding")
      .def(py::init([](int64_t n, int64_t dim) {
        return without_gil([&] { return std::make_shared<nn::Embedding>(n, dim); });
      }))
      .def_readonly("weight", &nn::Embedding::weight);
  py::class_<nn::Dropout, std::shared_ptr<nn::Dropout>>(mods, "Dropout").def(py::init<double>());
  py::class_<nn::MultiheadAttention, std::shared_ptr<nn::MultiheadAttention>>(mods,
                                                                              "MultiheadAttention")
      .def(py::init([](int64_t embed_dim, int64_t num_heads, double dropout, bool bias,
                       std::optional<int64_t> kdim, std::optional<int64_t> vdim, bool batch_first) {
        return without_gil([&] {
          return std::make_shared<nn::MultiheadAttention>(embed_dim, num_heads, dropout, bias, kdim,
                                                          vdim, batch_first);
        });
      }))
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
        Tensor key_padding = optional_tensor(kpm);
        Tensor attn_mask = optional_tensor(am);
        // The module as this call finds it (parameter handles, dropout, training flag): another
        // thread may hand it new parameters (_set_parameters, under the GIL) meanwhile.
        nn::MultiheadAttention snapshot = m;
        snapshot.out_proj = std::make_shared<nn::Linear>(*m.out_proj);
        auto out = without_gil([&] {
          return snapshot.forward(q, k, v, key_padding, need_weights, attn_mask, average,
                                  is_causal);
        });
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
      .def_readwrite("bias", &nn::GPTConfig::bias)
      .def_readwrite("gelu_approximate", &nn::GPTConfig::gelu_approximate)
      .def_readwrite("layer_norm_eps", &nn::GPTConfig::layer_norm_eps)
      .def_readwrite("n_inner", &nn::GPTConfig::n_inner);
  py::class_<nn::GPT, std::shared_ptr<nn::GPT>>(mods, "GPT")
      .def(py::init([](const nn::GPTConfig& c, const py::object& g) {
             Generator* gen = gen_arg(g);
             return without_gil([&] { return std::make_shared<nn::GPT>(c, gen); });
           }),
           py::arg("config"), py::arg("generator") = py::none())
      .def("named_parameters",
           [](const nn::GPT& m) {
             std::vector<std::pair<std::string, Tensor>> out;
             for (auto& [n, t] : m.named_parameters()) out.emplace_back(n, t);
             return out;
           })
      .def_property_readonly("config", &nn::GPT::config)
      .def("train", [](nn::GPT& m, bool on) { m.train(on); })
      .def(
          "forward", [](const nn::GPT& m, const Tensor& idx) { return m.forward(idx); }, release())
      .def("forward_loss",
           [](const nn::GPT& m, const Tensor& idx, const Tensor& targets) {
             auto out = without_gil([&] { return m.forward(idx, targets); });
             return py::make_tuple(out.logits, out.loss);
           })
      .def(
          "forward_packed",
          [](const nn::GPT& m, const Tensor& idx, const Tensor& targets, const Tensor& positions) {
            auto out = without_gil([&] { return m.forward_packed(idx, targets, positions); });
            return py::make_tuple(out.logits, out.loss);
          },
          py::arg("idx"), py::arg("targets"), py::arg("position_ids"))
      .def(
          "make_paged_cache",
          [](const nn::GPT& m, int64_t num_pages, int64_t page_size, const std::string& dtype) {
            return m.make_paged_cache(num_pages, page_size, kv_dtype_arg(dtype));
          },
          py::arg("num_pages"), py::arg("page_size") = 16, py::arg("kv_dtype") = "float32")
      .def(
          "forward_paged",
          [](const nn::GPT& m, const Tensor& idx, PagedKVCache& cache,
             const std::vector<int64_t>& seqs) { return m.forward_paged(idx, cache, seqs); },
          release(), py::arg("idx"), py::arg("cache"), py::arg("seqs"))
      .def(
          "generate_paged",
          [](const nn::GPT& m, const std::vector<std::vector<int64_t>>& prompts,
             int64_t max_new_tokens, double temperature, const py::object& top_k,
             const std::string& kv_dtype, int64_t page_size, const py::object& g) {
            nn::GPT::GenerateOptions o;
            o.max_new_tokens = max_new_tokens;
            o.temperature = temperature;
            o.top_k = top_k.is_none() ? 0 : top_k.cast<int64_t>();
            const KVCacheDtype d = kv_dtype_arg(kv_dtype);
            Generator* gen = gen_arg(g);
            return without_gil([&] { return m.generate_paged(prompts, o, gen, d, page_size); });
          },
          py::arg("prompts"), py::arg("max_new_tokens"), py::arg("temperature") = 1.0,
          py::arg("top_k") = py::none(), py::arg("kv_dtype") = "float32", py::arg("page_size") = 16,
          py::arg("generator") = py::none())
      .def(
          "attention_maps",
          [](const nn::GPT& m, const Tensor& idx) { return m.attention_maps(idx); }, release())
      .def(
          "forward_cached",
          [](const nn::GPT& m, const Tensor& idx, nn::KVCache& cache) {
            return m.forward_cached(idx, cache);
          },
          release())
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
            Generator* gen = gen_arg(g);
            std::function<void(const Tensor&)> cb;
            if (!callback.is_none())
              cb = [&callback](const Tensor& t) {
                py::gil_scoped_acquire gil;
                callback(t);
              };
            return without_gil([&] { return m.generate(idx, o, gen, cb); });
          },
          py::arg("idx"), py::arg("max_new_tokens"), py::arg("temperature") = 1.0,
          py::arg("top_k") = py::none(), py::arg("use_cache") = true,
          py::arg("generator") = py::none(), py::arg("callback") = py::none());
  py::class_<nn::KVCache>(mods, "KVCache")
      .def(py::init<>())
      .def_readonly("length", &nn::KVCache::length);

  // The paged cache (include/attn/kv_cache.h), as GPT.make_paged_cache returns it.
  py::class_<PagedKVCache>(mods, "PagedKVCache")
      .def("add_sequence", &PagedKVCache::add_sequence)
      .def("fork", &PagedKVCache::fork, py::arg("seq"))
      .def("remove", &PagedKVCache::remove, py::arg("seq"))
      .def("truncate", &PagedKVCache::truncate, py::arg("seq"), py::arg("length"))
      .def("evict", &PagedKVCache::evict, py::arg("seq"), py::arg("keep_first"),
           py::arg("keep_last"))
      .def("position", &PagedKVCache::position, py::arg("seq"))
      .def("length", &PagedKVCache::length, py::arg("seq"))
      .def("sequences", &PagedKVCache::sequences)
      .def("free_pages", &PagedKVCache::free_pages)
      .def("pool_bytes", &PagedKVCache::pool_bytes)
      .def("gather", &PagedKVCache::gather, py::arg("layer"), py::arg("seq"))
      .def("block_table", &PagedKVCache::block_table, py::arg("seqs"));

  py::class_<nn::Vocabulary>(mods, "Vocabulary")
      .def(py::init<const std::string&>())
      .def("words", &nn::Vocabulary::words)
      .def("id", &nn::Vocabulary::id)
      .def("encode", &nn::Vocabulary::encode)
      .def("__repr__", &nn::Vocabulary::repr)
      .def("__len__", &nn::Vocabulary::size);
}

}  // namespace attn::python

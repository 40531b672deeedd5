// attn.nn.functional's kernels (_C.functional): linear, embedding, layer_norm, gelu, cross_entropy,
// dropout and scaled_dot_product_attention.
#include <attn/attn.h>
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "convert.h"

namespace attn::python {

void register_functional(py::module_& m) {
  py::module_ fn = m.def_submodule("functional");
  fn.def(
      "linear",
      [](const Tensor& x, const Tensor& w, const py::object& b) {
        Tensor bias = optional_tensor(b);
        return without_gil([&] { return nn::functional::linear(x, w, bias); });
      },
      py::arg("input"), py::arg("weight"), py::arg("bias") = py::none());
  fn.def("embedding", &nn::functional::embedding, py::arg("input"), py::arg("weight"), release());
  fn.def(
      "layer_norm",
      [](const Tensor& x, int64_t n, const py::object& w, const py::object& b, double eps) {
        Tensor weight = optional_tensor(w), bias = optional_tensor(b);
        return without_gil([&] { return nn::functional::layer_norm(x, n, weight, bias, eps); });
      },
      py::arg("input"), py::arg("normalized_shape"), py::arg("weight") = py::none(),
      py::arg("bias") = py::none(), py::arg("eps") = 1e-5);
  fn.def(
      "rms_norm",
      [](const Tensor& x, const Shape& normalized_shape, const py::object& w,
         std::optional<double> eps) {
        Tensor weight = optional_tensor(w);
        return without_gil(
            [&] { return nn::functional::rms_norm(x, normalized_shape, weight, eps); });
      },
      py::arg("input"), py::arg("normalized_shape"), py::arg("weight") = py::none(),
      py::arg("eps") = py::none());
  fn.def("silu", &nn::functional::silu, py::arg("input"), release());
  fn.def("gelu", &nn::functional::gelu, py::arg("input"), py::arg("approximate") = "none",
         release());
  fn.def("cross_entropy", &nn::functional::cross_entropy, py::arg("input"), py::arg("target"),
         py::arg("reduction") = "mean", py::arg("ignore_index") = -100, release());

  fn.def(
      "dropout",
      [](const Tensor& x, double p, bool training, const py::object& g) {
        Generator* gen = gen_arg(g);
        return without_gil([&] { return nn::functional::dropout(x, p, training, gen); });
      },
      py::arg("input"), py::arg("p") = 0.5, py::arg("training") = true,
      py::arg("generator") = py::none());
  fn.def(
      "scaled_dot_product_attention",
      [](const Tensor& q, const Tensor& k, const Tensor& v, const py::object& attn_mask,
         double dropout_p, bool is_causal, const py::object& scale, bool bottom_right,
         bool reference, bool need_weights, bool enable_gqa, int64_t window_left,
         int64_t window_right, const py::object& key_padding_mask, double softcap,
         const py::object& alibi_slopes, const py::object& relative_bias,
         const py::object& sinks) -> py::object {
        SdpaOptions o;
        o.softcap = softcap;
        o.alibi_slopes = optional_tensor(alibi_slopes);
        o.relative_bias = optional_tensor(relative_bias);
        o.sinks = optional_tensor(sinks);
        o.enable_gqa = enable_gqa;
        o.window_left = window_left;
        o.window_right = window_right;
        o.key_padding_mask = optional_tensor(key_padding_mask);
        o.attn_mask = optional_tensor(attn_mask);
        o.dropout_p = dropout_p;
        o.is_causal = is_causal;
        if (!scale.is_none()) o.scale = scale.cast<double>();
        o.causal_align = bottom_right ? CausalAlign::BottomRight : CausalAlign::TopLeft;
        o.backend = reference ? SdpaBackend::Reference : SdpaBackend::Auto;
        if (need_weights) {
          auto [out, w] =
              without_gil([&] { return scaled_dot_product_attention_with_weights(q, k, v, o); });
          return py::make_tuple(out, w);
        }
        return py::cast(without_gil([&] { return scaled_dot_product_attention(q, k, v, o); }));
      },
      py::arg("query"), py::arg("key"), py::arg("value"), py::arg("attn_mask") = py::none(),
      py::arg("dropout_p") = 0.0, py::arg("is_causal") = false, py::arg("scale") = py::none(),
      py::arg("causal_bottom_right") = false, py::arg("reference") = false,
      py::arg("need_weights") = false, py::arg("enable_gqa") = false, py::arg("window_left") = -1,
      py::arg("window_right") = -1, py::arg("key_padding_mask") = py::none(),
      py::arg("softcap") = 0.0, py::arg("alibi_slopes") = py::none(),
      py::arg("relative_bias") = py::none(), py::arg("sinks") = py::none());
  fn.def(
      "varlen_attention",
      [](const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& cu_q, const Tensor& cu_k,
         int64_t max_q, int64_t max_k, double dropout_p, const py::object& scale, bool causal,
         int64_t window_left, int64_t window_right, double softcap, const py::object& alibi_slopes,
         const py::object& sinks, const py::object& generator) {
        SdpaOptions o;
        o.dropout_p = dropout_p;
        if (!scale.is_none()) o.scale = scale.cast<double>();
        o.is_causal = causal;
        o.causal_align = CausalAlign::BottomRight;  // FlashAttention's alignment
        o.window_left = window_left, o.window_right = window_right;
        o.softcap = softcap;
        o.alibi_slopes = optional_tensor(alibi_slopes);
        o.sinks = optional_tensor(sinks);
        o.generator = gen_arg(generator);
        VarlenResult r = without_gil(
            [&] { return varlen_attention_forward(q, k, v, cu_q, cu_k, max_q, max_k, o); });
        return py::make_tuple(r.out, r.lse);
      },
      py::arg("q"), py::arg("k"), py::arg("v"), py::arg("cu_seqlens_q"), py::arg("cu_seqlens_k"),
      py::arg("max_seqlen_q"), py::arg("max_seqlen_k"), py::arg("dropout_p") = 0.0,
      py::arg("softmax_scale") = py::none(), py::arg("causal") = false, py::arg("window_left") = -1,
      py::arg("window_right") = -1, py::arg("softcap") = 0.0, py::arg("alibi_slopes") = py::none(),
      py::arg("sinks") = py::none(), py::arg("generator") = py::none());
  fn.def(
      "attention_with_kvcache",
      [](const Tensor& q, const Tensor& k_cache, const Tensor& v_cache, const Tensor& cache_seqlens,
         const Tensor& block_table, const py::object& scale, bool causal, int64_t window_left,
         double softcap, const py::object& alibi_slopes, const py::object& sinks) {
        SdpaOptions o;
        if (!scale.is_none()) o.scale = scale.cast<double>();
        o.is_causal = causal;
        o.window_left = window_left;
        o.softcap = softcap;
        o.alibi_slopes = optional_tensor(alibi_slopes);
        o.sinks = optional_tensor(sinks);
        Tensor lse;
        Tensor out = without_gil([&] {
          return attention_with_kvcache(q, k_cache, v_cache, cache_seqlens, block_table, o, &lse);
        });
        return py::make_tuple(out, lse);
      },
      py::arg("q"), py::arg("k_cache"), py::arg("v_cache"), py::arg("cache_seqlens"),
      py::arg("block_table"), py::arg("softmax_scale") = py::none(), py::arg("causal") = false,
      py::arg("window_left") = -1, py::arg("softcap") = 0.0, py::arg("alibi_slopes") = py::none(),
      py::arg("sinks") = py::none());
  fn.def(
      "causal_mask",
      [](int64_t lq, int64_t lk, bool bottom_right) {
        return causal_mask(lq, lk, bottom_right ? CausalAlign::BottomRight : CausalAlign::TopLeft);
      },
      py::arg("L_q"), py::arg("L_k"), py::arg("bottom_right") = false, release());
}

}  // namespace attn::python

// attn.data.BpeTokenizer and attn.data.Tokenizer (_C.data) and the Hugging Face GPT-2 checkpoint
// functions behind attn.nn.GPT.from_pretrained / save_pretrained (_C.hf).
#include <attn/bpe.h>
#include <attn/chat_template.h>
#include <attn/hf_gpt2.h>
#include <attn/tokenizer.h>
#include <pybind11/stl.h>

#include "bindings.h"

namespace attn::python {

namespace {

// Bytes as str with U+FFFD for invalid UTF-8, as transformers' decode (errors="replace").
py::str replace_errors(const std::string& bytes) {
  PyObject* s = PyUnicode_DecodeUTF8(bytes.data(), Py_ssize_t(bytes.size()), "replace");
  if (!s) throw py::error_already_set();
  return py::reinterpret_steal<py::str>(s);
}

}  // namespace

void register_hf(py::module_& m) {
  py::module_ data = m.def_submodule("data", "attn::data: tokenizers");
  py::class_<data::BpeTokenizer>(data, "BpeTokenizer")
      .def_static("from_files", &data::BpeTokenizer::from_files, py::arg("vocab_file"),
                  py::arg("merges_file"))
      .def_static("from_strings", &data::BpeTokenizer::from_strings, py::arg("vocab_json"),
                  py::arg("merges_txt"), py::arg("vocab_name") = "vocab.json",
                  py::arg("merges_name") = "merges.txt")
      .def_property_readonly("vocab_size", &data::BpeTokenizer::vocab_size)
      .def_property_readonly("num_merges", &data::BpeTokenizer::num_merges)
      .def_property_readonly("eot_id", &data::BpeTokenizer::eot_id)
      .def("__len__", &data::BpeTokenizer::vocab_size)
      .def("id_to_token", &data::BpeTokenizer::id_to_token)
      .def("token_to_id", &data::BpeTokenizer::token_to_id)
      .def(
          "encode",
          [](const data::BpeTokenizer& t, const std::string& text) { return t.encode(text); },
          release())
      .def("pretokenize", &data::BpeTokenizer::pretokenize)
      .def("decode", [](const data::BpeTokenizer& t,
                        const std::vector<int64_t>& ids) { return replace_errors(t.decode(ids)); })
      .def("decode_bytes", [](const data::BpeTokenizer& t, const std::vector<int64_t>& ids) {
        return py::bytes(t.decode(ids));
      });

  py::class_<data::Tokenizer>(data, "Tokenizer")
      .def_static("from_file", &data::Tokenizer::from_file, py::arg("path"), release())
      .def_static("from_str", &data::Tokenizer::from_string, py::arg("json"),
                  py::arg("name") = "tokenizer.json", release())
      .def_property_readonly("vocab_size", &data::Tokenizer::vocab_size)
      .def("token_to_id", &data::Tokenizer::token_to_id, py::arg("token"))
      .def("id_to_token", &data::Tokenizer::id_to_token, py::arg("id"))
      .def("is_special", &data::Tokenizer::is_special, py::arg("id"))
      .def("encode_ids", &data::Tokenizer::encode, py::arg("text"),
           py::arg("add_special_tokens") = true, release())
      .def(
          "encode_with_tokens",
          [](const data::Tokenizer& t, const std::string& text, bool add_special_tokens) {
            auto e = t.encode_with_tokens(text, add_special_tokens);
            return std::make_pair(std::move(e.ids), std::move(e.tokens));
          },
          py::arg("text"), py::arg("add_special_tokens") = true, release())
      .def("decode", &data::Tokenizer::decode, py::arg("ids"),
           py::arg("skip_special_tokens") = true, release());

  py::class_<data::ChatTemplate>(data, "ChatTemplate")
      .def(py::init<std::string_view, const std::string&>(), py::arg("source"),
           py::arg("name") = "chat_template")
      .def("render_json", &data::ChatTemplate::render_json, py::arg("context_json"), release());

  py::module_ hf = m.def_submodule("hf", "Hugging Face GPT-2 checkpoints (attn/hf_gpt2.h)");
  hf.def(
      "load_gpt2", [](const std::string& dir) { return nn::load_hf_gpt2(dir); }, release(),
      py::arg("dir"));
  hf.def(
      "save_gpt2",
      [](const nn::GPT& model, const std::string& dir) { nn::save_hf_gpt2(model, dir); }, release(),
      py::arg("model"), py::arg("dir"));
  hf.def("config_from_json", &nn::gpt_config_from_hf_json, py::arg("json"),
         py::arg("what") = "config.json");
  hf.def("config_to_json", &nn::gpt_config_to_hf_json, py::arg("config"));
}

}  // namespace attn::python

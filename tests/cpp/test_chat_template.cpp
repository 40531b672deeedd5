// attn::data::ChatTemplate on templates whose output follows from Jinja's definitions by hand
// (and is what Jinja2 3.1 gives with transformers' settings: trim_blocks, lstrip_blocks): ChatML
// through apply(), the whitespace rules, loops and namespaces, the tokenizer_config.json reader.
// The comparison with Jinja2 itself over real-style templates and 400 random ones is
// tests/python/test_chat_template_vs_jinja2.py. Also: refusals and limits, named with the line.
#include <attn/chat_template.h>
#include <attn/tensor.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "test_util.h"

namespace {

using attn::data::ChatMessage;
using attn::data::ChatTemplate;

TEST(ChatTemplate, ChatMLThroughApply) {
  const ChatTemplate t(
      "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
      "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}"
      "{{ '<|im_start|>assistant\\n' }}{% endif %}");
  const std::vector<ChatMessage> msgs = {{"system", "Be brief."}, {"user", "Hi é"}};
  EXPECT_EQ(t.apply(msgs, true),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi é<|im_end|>\n"
            "<|im_start|>assistant\n");
  EXPECT_EQ(t.apply(msgs, false),
            "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi é<|im_end|>\n");
  EXPECT_EQ(t.apply({}, false), "");
}

TEST(ChatTemplate, WhitespaceLoopsAndNamespaces) {
  // trim_blocks drops the newline after a block tag, lstrip_blocks the indent before one; one
  // trailing newline of the source goes.
  EXPECT_EQ(ChatTemplate("{% if true %}\n  x\n  {% endif %}\nend\n").render_json("{}"), "  x\nend");
  EXPECT_EQ(ChatTemplate("a  {{- ' b ' -}}  c").render_json("{}"), "a b c");
  EXPECT_EQ(ChatTemplate("{% for m in messages %}{{ loop.index }}:{{ m.role }}"
                         "{{ ',' if not loop.last }}{% endfor %}")
                .render_json(R"({"messages": [{"role": "a"}, {"role": "b"}]})"),
            "1:a,2:b");
  EXPECT_EQ(ChatTemplate("{%- set ns = namespace(n=0) -%}\n{%- for i in range(4) if i is odd %}"
                         "{% set ns.n = ns.n + i %}{% endfor -%}\n{{ ns.n }}")
                .render_json("{}"),
            "4");
  EXPECT_EQ(ChatTemplate("{{ {'a': [1, 2.5, 'x'], 'b': none} | tojson }}").render_json("{}"),
            R"({"a": [1, 2.5, "x"], "b": null})");
}

TEST(ChatTemplate, RefusalsAndLimitsNameTheLine) {
  EXPECT_ERROR_HAS(ChatTemplate("x\n{% macro f() %}{% endmacro %}"), "line 2: 'macro'");
  EXPECT_ERROR_HAS(ChatTemplate("{{ a | wordwrap }}").render_json("{}"), "'wordwrap'");
  EXPECT_ERROR_HAS(ChatTemplate("{% if x %}"), "ends before");
  EXPECT_ERROR_HAS(ChatTemplate("{{ raise_exception('bad roles') }}").render_json("{}"),
                   "bad roles");
  EXPECT_ERROR_HAS(ChatTemplate("{{ range(200000) | length }}").render_json("{}"),
                   "range() longer than 100000");
  EXPECT_ERROR_HAS(ChatTemplate("{{ 'ab' * 100000000 }}").render_json("{}"), "repeated past");
  EXPECT_ERROR_HAS(ChatTemplate("{{" + std::string(500, '(') + "1" + std::string(500, ')') + "}}"),
                   "nested deeper");
  std::string deep;
  for (int i = 0; i < 200; ++i) deep += "{% if true %}";
  EXPECT_ERROR_HAS(ChatTemplate{deep}, "nested deeper");
  EXPECT_ERROR_HAS(ChatTemplate("{% for i in range(100000) %}{% for j in range(100000) %}"
                                "{% endfor %}{% endfor %}")
                       .render_json("{}"),
                   "steps");
  EXPECT_ERROR_HAS(ChatTemplate("x").render_json("[1]"), "must be a JSON object");
}

TEST(ChatTemplate, FromTokenizerConfig) {
  const auto dir = std::filesystem::temp_directory_path() / "attn_chat_template_test";
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "tokenizer_config.json").string();
  std::ofstream(path) << R"({"chat_template": [{"name": "rag", "template": "R"},
                            {"name": "default", "template": "{{ bos_token }}{{ messages[0].content }}"}],
                           "bos_token": {"content": "<s>", "special": true}, "eos_token": "</s>"})";
  const auto c = ChatTemplate::from_tokenizer_config(path);
  EXPECT_EQ(c.bos_token, "<s>");
  EXPECT_EQ(c.eos_token, "</s>");
  EXPECT_EQ(c.chat_template.apply({{"user", "hey"}}, false, c.bos_token), "<s>hey");
  std::ofstream(path) << R"({"bos_token": "<s>"})";
  EXPECT_ERROR_HAS(ChatTemplate::from_tokenizer_config(path), "has no chat_template");
  std::filesystem::remove_all(dir);
}

}  // namespace

// Chat templates: the Jinja templates of Hugging Face's tokenizer_config.json ("chat_template"),
// rendered in C++ as transformers' apply_chat_template renders them (Jinja2 with trim_blocks and
// lstrip_blocks, and its raise_exception, strftime_now and tojson).
//
// The subset of Jinja that real templates use:
//   text, {{ expr }}, {% if / elif / else / endif %}, {% for x in xs [if cond] %} ... {% else %}
//   ... {% endfor %} (with loop.index, index0, revindex, revindex0, first, last, length,
//   previtem, nextitem; `for k, v in d.items()`), {% set x = expr %}, {% set ns.attr = expr %},
//   {# comments #}, {% generation %} / {% endgeneration %} (no effect), and whitespace control
//   with - on either side of a tag.
//   Expressions: string, number, true/false/none literals, lists and dicts; variables, .attr and
//   [index] and [a:b:c] slices; + - * / // % ~ and or not in, not in, == != < <= > >=,
//   `a if c else b`; is [not] defined / undefined / none / string / number / integer / float /
//   mapping / iterable / sequence / boolean / true / false / odd / even / equalto(x) /
//   divisibleby(n); filters trim, tojson(indent), length/count, upper, lower, title, capitalize,
//   string, int, float, abs, join(sep), first, last, default(x)/d, list, replace(a, b), safe,
//   items, selectattr / rejectattr (attr[, test[, value]]), map(attribute=...); string methods
//   strip / lstrip / rstrip / startswith / endswith / split / upper / lower / replace / title,
//   dict methods items / keys / values / get; functions raise_exception(msg), strftime_now(fmt),
//   namespace(k=v, ...), range(...), dict(k=v, ...).
// Anything else (macros, call blocks, imports, block sets, other filters) is refused when the
// template is parsed, naming the construct and its line. raise_exception in a template throws
// attn::Error "[ChatTemplate] <its message>".
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace attn::data {

struct ChatMessage {
  std::string role;
  std::string content;
};

class ChatTemplate {
 public:
  // Parses `source`; attn::Error "[ChatTemplate] 'name' line L: ..." for what the subset lacks or
  // a syntax error.
  explicit ChatTemplate(std::string_view source, const std::string& name = "chat_template");

  // The template, the bos/eos tokens and the chat template of a tokenizer_config.json (its
  // "chat_template" string, or the entry named "default" of a list of {name, template}).
  struct Config;
  static Config from_tokenizer_config(const std::string& path);

  // Renders with `context_json` (a JSON object: messages, add_generation_prompt, bos_token,
  // tools, ...) as the template's variables.
  std::string render_json(std::string_view context_json) const;
  // Renders messages with add_generation_prompt and bos_token / eos_token.
  std::string apply(const std::vector<ChatMessage>& messages, bool add_generation_prompt,
                    const std::string& bos_token = "", const std::string& eos_token = "") const;

  struct Impl;

 private:
  std::shared_ptr<const Impl> impl_;
};

struct ChatTemplate::Config {
  ChatTemplate chat_template;
  std::string bos_token, eos_token;
};

}  // namespace attn::data

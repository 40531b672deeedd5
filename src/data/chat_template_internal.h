// The parsed form of a chat template (chat_template.cpp parses, chat_template_eval.cpp renders).
#pragma once

#include <attn/chat_template.h>

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

namespace attn::data::jinja {

using json = nlohmann::ordered_json;  // dicts keep their insertion order, as Python's
inline constexpr const char* kFn = "ChatTemplate";

// Python's str.isspace for ASCII (what Jinja's whitespace control and str.split() strip).
inline bool is_space(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v';
}

struct Expr;
using ExprP = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    Literal,
    Name,
    Attr,
    Item,
    Slice,
    Call,
    Filter,
    Test,
    Unary,
    Binary,
    Cond,
    List,
    Dict
  };
  Kind kind = Kind::Literal;
  int line = 0;
  json value;               // Literal
  std::string name;         // Name; Attr's attribute; Filter / Test name; Unary / Binary operator
  std::vector<ExprP> args;  // operands; list items; dict keys and values interleaved; call args
                            // (args[0] is the callee / the filtered or tested value)
  std::vector<std::pair<std::string, ExprP>> kwargs;
  bool negated = false;  // Test: `is not`
};

struct Node {
  enum class Kind { Text, Output, If, For, Set };
  Kind kind = Kind::Text;
  int line = 0;
  std::string text;                                           // Text
  ExprP expr;                                                 // Output; Set's value; For's iterable
  std::vector<std::pair<ExprP, std::vector<Node>>> branches;  // If: (condition, body); else: null
  std::vector<std::string> targets;   // For: the loop variables; Set: {name} or {name, attribute}
  ExprP filter;                       // For: `if` condition
  std::vector<Node> body, else_body;  // For
};

// Parses a template into nodes (chat_template.cpp).
std::vector<Node> parse(std::string_view source, const std::string& name);
// Renders nodes with `context` (an object) as the variables (chat_template_eval.cpp).
std::string render(const std::vector<Node>& nodes, const json& context, const std::string& name);

}  // namespace attn::data::jinja

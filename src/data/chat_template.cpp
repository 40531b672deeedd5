// Chat templates (include/attn/chat_template.h): the lexer and parser of the Jinja subset, and the
// public class. Whitespace follows Jinja2 with trim_blocks and lstrip_blocks (what transformers'
// apply_chat_template sets): the first newline after a block or comment tag is dropped, spaces
// and tabs before a block or comment tag that starts its line are dropped, and `-` on a tag's
// side strips all whitespace on that side.
#include <attn/io.h>

#include <cctype>
#include <set>

#include "../common/error.h"
#include "chat_template_internal.h"

namespace attn::data {

namespace jinja {

namespace {

// ---------------------------------------------------------------- the template's pieces

struct Piece {
  enum class Kind { Text, Expr, Stmt } kind;
  std::string content;
  int line;
};

std::vector<Piece> split_pieces(std::string_view src, const std::string& name) {
  std::vector<Piece> out;
  std::size_t pos = 0;
  int line = 1;
  bool strip_next = false;    // the previous tag ended with '-'
  bool line_starting = true;  // the previous tag ended a line (Jinja2's lstrip_blocks rule)
  auto count_lines = [](std::string_view s) {
    int n = 0;
    for (char c : s) n += c == '\n';
    return n;
  };
  while (pos <= src.size()) {
    std::size_t open = pos;
    while (true) {
      open = src.find('{', open);
      if (open == std::string_view::npos || open + 1 >= src.size()) {
        open = std::string_view::npos;
        break;
      }
      const char c = src[open + 1];
      if (c == '{' || c == '%' || c == '#') break;
      ++open;
    }
    std::string text(
        src.substr(pos, open == std::string_view::npos ? std::string_view::npos : open - pos));
    const int text_line = line;
    line += count_lines(text);
    if (strip_next) {
      std::size_t k = 0;
      while (k < text.size() && is_space(text[k])) ++k;
      text.erase(0, k);
    }
    if (open == std::string_view::npos) {
      if (!text.empty()) out.push_back({Piece::Kind::Text, text, text_line});
      break;
    }
    const char kind = src[open + 1];
    const char* close = kind == '{' ? "}}" : kind == '%' ? "%}" : "#}";
    std::size_t inner = open + 2;
    bool strip_before = false, keep_before = false;
    if (inner < src.size() && src[inner] == '-')
      strip_before = true, ++inner;
    else if (inner < src.size() && src[inner] == '+')
      keep_before = true, ++inner;
    // The tag ends at `close` outside strings and brackets (a dict literal may hold "}}").
    std::size_t end = std::string_view::npos;
    if (kind == '#') {
      end = src.find(close, inner);
    } else {
      int depth = 0;
      for (std::size_t k = inner; k + 1 < src.size(); ++k) {
        const char c = src[k];
        if (c == '\'' || c == '"') {
          for (++k; k < src.size() && src[k] != c; ++k)
            if (src[k] == '\\') ++k;
          continue;
        }
        if (c == '(' || c == '[' || c == '{') ++depth;
        if ((c == ')' || c == ']' || c == '}') && depth > 0) {
          --depth;
          continue;
        }
        if (depth == 0 && src.compare(k, 2, close) == 0) {
          end = k;
          break;
        }
      }
    }
    if (end == std::string_view::npos)
      detail::fail(kFn, "'", name, "' line ", line, ": '", src.substr(open, 2),
                   "' is never closed by '", close, "'");
    std::size_t content_end = end;
    bool strip_after = false;
    if (content_end > inner && src[content_end - 1] == '-')
      strip_after = true, --content_end;
    else if (content_end > inner && src[content_end - 1] == '+')
      --content_end;
    if (strip_before) {
      while (!text.empty() && is_space(text.back())) text.pop_back();
    } else if (kind != '{' && !keep_before) {  // lstrip_blocks
      const std::size_t nl = text.rfind('\n');
      const std::size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if (l_pos > 0 || line_starting) {
        bool blank = true;
        for (std::size_t k = l_pos; k < text.size(); ++k) blank = blank && is_space(text[k]);
        if (blank) text.erase(l_pos);
      }
    }
    if (!text.empty()) out.push_back({Piece::Kind::Text, text, text_line});
    const std::string content(src.substr(inner, content_end - inner));
    const int tag_line = line;
    line += count_lines(content);
    if (kind == '{') out.push_back({Piece::Kind::Expr, content, tag_line});
    if (kind == '%') out.push_back({Piece::Kind::Stmt, content, tag_line});
    pos = end + 2;
    strip_next = strip_after;
    line_starting = false;
    if (kind != '{' && !strip_after && pos < src.size() && src[pos] == '\n') {  // trim_blocks
      ++pos;
      ++line;
      line_starting = true;
    }
  }
  return out;
}

// ---------------------------------------------------------------- expressions

struct Token {
  enum class Kind { Name, String, Int, Float, Op, End } kind;
  std::string text;
  json value;
};

std::vector<Token> tokenize(std::string_view s, const std::string& name, int line) {
  auto bad = [&](const auto&... args) {
    detail::fail(kFn, "'", name, "' line ", line, ": ", args...);
  };
  std::vector<Token> out;
  std::size_t i = 0;
  while (i < s.size()) {
    const char c = s[i];
    if (is_space(c)) {
      ++i;
      continue;
    }
    if (std::isalpha(static_cast<unsigned char>(c)) || c == '_') {
      std::size_t j = i;
      while (j < s.size() && (std::isalnum(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      out.push_back({Token::Kind::Name, std::string(s.substr(i, j - i)), {}});
      i = j;
      continue;
    }
    if (std::isdigit(static_cast<unsigned char>(c))) {
      std::size_t j = i;
      bool is_float = false;
      while (j < s.size() && (std::isdigit(static_cast<unsigned char>(s[j])) || s[j] == '_')) ++j;
      if (j + 1 < s.size() && s[j] == '.' && std::isdigit(static_cast<unsigned char>(s[j + 1]))) {
        is_float = true;
        ++j;
        while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
      }
      if (j < s.size() && (s[j] == 'e' || s[j] == 'E')) {  // an exponent: 1e20, 2.5e-7
        std::size_t k = j + 1;
        if (k < s.size() && (s[k] == '+' || s[k] == '-')) ++k;
        if (k < s.size() && std::isdigit(static_cast<unsigned char>(s[k]))) {
          is_float = true;
          j = k;
          while (j < s.size() && std::isdigit(static_cast<unsigned char>(s[j]))) ++j;
        }
      }
      std::string num(s.substr(i, j - i));
      num.erase(std::remove(num.begin(), num.end(), '_'), num.end());
      Token t{is_float ? Token::Kind::Float : Token::Kind::Int, num, {}};
      try {
        t.value = is_float ? json(std::stod(num)) : json(std::stoll(num));
      } catch (const std::exception&) {
        bad("the number ", num, " is out of range");
      }
      out.push_back(std::move(t));
      i = j;
      continue;
    }
    if (c == '\'' || c == '"') {
      std::string v;
      std::size_t j = i + 1;
      for (; j < s.size() && s[j] != c; ++j) {
        if (s[j] != '\\' || j + 1 >= s.size()) {
          v += s[j];
          continue;
        }
        const char e = s[++j];
        switch (e) {
          case 'n': v += '\n'; break;
          case 't': v += '\t'; break;
          case 'r': v += '\r'; break;
          case '\\': v += '\\'; break;
          case '\'': v += '\''; break;
          case '"': v += '"'; break;
          default: v += '\\', v += e;
        }
      }
      if (j >= s.size()) bad("a string is never closed");
      out.push_back({Token::Kind::String, "", json(v)});
      i = j + 1;
      continue;
    }
    static const char* two[] = {"//", "**", "==", "!=", "<=", ">="};
    std::string op(1, c);
    for (const char* t : two)
      if (s.substr(i, 2) == t) op = t;
    if (op.size() == 1 && std::string("+-*/%~<>()[]{}.,:|=").find(c) == std::string::npos)
      bad("unexpected character '", op, "'");
    out.push_back({Token::Kind::Op, op, {}});
    i += op.size();
  }
  out.push_back({Token::Kind::End, "", {}});
  return out;
}

class Parser {
 public:
  Parser(std::vector<Token> tokens, const std::string& name, int line)
      : t_(std::move(tokens)), name_(name), line_(line) {}

  template <typename... Args>
  [[noreturn]] void bad(const Args&... args) const {
    detail::fail(kFn, "'", name_, "' line ", line_, ": ", args...);
  }
  const Token& peek(std::size_t k = 0) const { return t_[std::min(p_ + k, t_.size() - 1)]; }
  bool at_op(const char* op) const { return peek().kind == Token::Kind::Op && peek().text == op; }
  bool at_name(const char* n) const { return peek().kind == Token::Kind::Name && peek().text == n; }
  bool at_end() const { return peek().kind == Token::Kind::End; }
  void expect_op(const char* op) {
    if (!at_op(op)) bad("expected '", op, "', got ", describe(peek()));
    ++p_;
  }
  std::string expect_name() {
    if (peek().kind != Token::Kind::Name) bad("expected a name, got ", describe(peek()));
    return t_[p_++].text;
  }
  void expect_end() {
    if (!at_end()) bad("unexpected ", describe(peek()));
  }
  static std::string describe(const Token& t) {
    switch (t.kind) {
      case Token::Kind::End: return "the end of the tag";
      case Token::Kind::String: return "a string";
      case Token::Kind::Int:
      case Token::Kind::Float: return "the number " + t.text;
      default: return "'" + t.text + "'";
    }
  }

  ExprP make(Expr::Kind k) {
    auto e = std::make_unique<Expr>();
    e->kind = k;
    e->line = line_;
    return e;
  }

  // An expression without a trailing `if` (a for loop's iterable, whose `if` filters).
  ExprP expression_no_cond() { return or_expr(); }

  ExprP expression() {
    const Nesting nest(*this);
    ExprP e = or_expr();
    if (at_name("if")) {
      ++p_;
      auto c = make(Expr::Kind::Cond);
      ExprP cond = or_expr();
      ExprP other;
      if (at_name("else")) {
        ++p_;
        other = expression();
      }
      c->args.push_back(std::move(e));
      c->args.push_back(std::move(cond));
      c->args.push_back(std::move(other));  // null: undefined
      return c;
    }
    return e;
  }

 private:
  ExprP binary(const std::string& op, ExprP a, ExprP b) {
    auto e = make(Expr::Kind::Binary);
    e->name = op;
    e->args.push_back(std::move(a));
    e->args.push_back(std::move(b));
    return e;
  }
  ExprP or_expr() {
    ExprP e = and_expr();
    while (at_name("or")) ++p_, e = binary("or", std::move(e), and_expr());
    return e;
  }
  ExprP and_expr() {
    ExprP e = not_expr();
    while (at_name("and")) ++p_, e = binary("and", std::move(e), not_expr());
    return e;
  }
  ExprP not_expr() {
    const Nesting nest(*this);
    if (at_name("not")) {
      ++p_;
      auto e = make(Expr::Kind::Unary);
      e->name = "not";
      e->args.push_back(not_expr());
      return e;
    }
    return compare();
  }
  ExprP compare() {
    ExprP e = concat();
    while (true) {
      std::string op;
      if (peek().kind == Token::Kind::Op &&
          (peek().text == "==" || peek().text == "!=" || peek().text == "<" ||
           peek().text == "<=" || peek().text == ">" || peek().text == ">=")) {
        op = t_[p_++].text;
      } else if (at_name("in")) {
        ++p_, op = "in";
      } else if (at_name("not") && peek(1).kind == Token::Kind::Name && peek(1).text == "in") {
        p_ += 2, op = "not in";
      } else {
        return e;
      }
      e = binary(op, std::move(e), concat());
    }
  }
  ExprP concat() {
    ExprP e = additive();
    while (at_op("~")) ++p_, e = binary("~", std::move(e), additive());
    return e;
  }
  ExprP additive() {
    ExprP e = multiplicative();
    while (at_op("+") || at_op("-")) {
      const std::string op = t_[p_++].text;
      e = binary(op, std::move(e), multiplicative());
    }
    return e;
  }
  ExprP multiplicative() {
    ExprP e = power();
    while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
      const std::string op = t_[p_++].text;
      e = binary(op, std::move(e), power());
    }
    return e;
  }
  ExprP power() {
    ExprP e = unary();
    while (at_op("**")) ++p_, e = binary("**", std::move(e), unary());
    return e;
  }
  // Jinja's rule: a sign applies before the filters, `-3 | abs` is (-3) | abs.
  ExprP unary(bool with_filters = true) {
    const Nesting nest(*this);
    ExprP e;
    if (at_op("-") || at_op("+")) {
      e = make(Expr::Kind::Unary);
      e->name = t_[p_++].text;
      e->args.push_back(unary(false));
    } else {
      e = postfix(primary());
    }
    return with_filters ? filters(std::move(e)) : std::move(e);
  }
  ExprP primary() {
    const Token& t = peek();
    if (t.kind == Token::Kind::String || t.kind == Token::Kind::Int ||
        t.kind == Token::Kind::Float) {
      auto e = make(Expr::Kind::Literal);
      e->value = t.value;
      ++p_;
      while (t.kind == Token::Kind::String && peek().kind == Token::Kind::String)  // 'a' 'b'
        e->value = e->value.get<std::string>() + t_[p_++].value.get<std::string>();
      return e;
    }
    if (t.kind == Token::Kind::Name) {
      ++p_;
      auto e = make(Expr::Kind::Literal);
      if (t.text == "true" || t.text == "True") {
        e->value = true;
        return e;
      }
      if (t.text == "false" || t.text == "False") {
        e->value = false;
        return e;
      }
      if (t.text == "none" || t.text == "None") {
        e->value = nullptr;
        return e;
      }
      e->kind = Expr::Kind::Name;
      e->name = t.text;
      return e;
    }
    if (at_op("(")) {
      ++p_;
      ExprP e = expression();
      if (at_op(",")) bad("tuples are not supported");
      expect_op(")");
      return e;
    }
    if (at_op("[")) {
      ++p_;
      auto e = make(Expr::Kind::List);
      while (!at_op("]")) {
        e->args.push_back(expression());
        if (!at_op("]")) expect_op(",");
      }
      ++p_;
      return e;
    }
    if (at_op("{")) {
      ++p_;
      auto e = make(Expr::Kind::Dict);
      while (!at_op("}")) {
        e->args.push_back(expression());
        expect_op(":");
        e->args.push_back(expression());
        if (!at_op("}")) expect_op(",");
      }
      ++p_;
      return e;
    }
    bad("expected a value, got ", describe(t));
  }
  void call_args(Expr& e) {
    expect_op("(");
    while (!at_op(")")) {
      if (peek().kind == Token::Kind::Name && peek(1).kind == Token::Kind::Op &&
          peek(1).text == "=") {
        std::string k = t_[p_].text;
        p_ += 2;
        e.kwargs.emplace_back(std::move(k), expression());
      } else {
        if (!e.kwargs.empty()) bad("a positional argument after keyword arguments");
        e.args.push_back(expression());
      }
      if (!at_op(")")) expect_op(",");
    }
    ++p_;
  }
  ExprP postfix(ExprP e) {
    while (true) {
      if (at_op(".")) {
        ++p_;
        auto a = make(Expr::Kind::Attr);
        a->name = expect_name();
        a->args.push_back(std::move(e));
        e = std::move(a);
      } else if (at_op("[")) {
        ++p_;
        ExprP parts[3];
        int colons = 0;
        while (!at_op("]")) {
          if (at_op(":")) {
            if (++colons > 2) bad("a slice has at most two ':'");
            ++p_;
            continue;
          }
          if (parts[colons]) bad("expected ':' or ']' in a subscript");
          parts[colons] = expression();
        }
        ++p_;
        if (colons == 0 && !parts[0]) bad("an empty subscript");
        auto s = make(colons == 0 ? Expr::Kind::Item : Expr::Kind::Slice);
        s->args.push_back(std::move(e));
        for (int k = 0; k <= (colons == 0 ? 0 : 2); ++k) s->args.push_back(std::move(parts[k]));
        e = std::move(s);
      } else if (at_op("(")) {
        auto c = make(Expr::Kind::Call);
        c->args.push_back(std::move(e));
        call_args(*c);
        e = std::move(c);
      } else {
        return e;
      }
    }
  }
  ExprP filters(ExprP e) {
    while (true) {
      if (at_op("|")) {
        ++p_;
        auto f = make(Expr::Kind::Filter);
        f->name = expect_name();
        f->args.push_back(std::move(e));
        if (at_op("(")) call_args(*f);
        e = std::move(f);
      } else if (at_name("is")) {
        ++p_;
        auto t = make(Expr::Kind::Test);
        if (at_name("not")) ++p_, t->negated = true;
        t->name = expect_name();
        t->args.push_back(std::move(e));
        if (at_op("(")) {
          call_args(*t);
        } else if (!at_end() && !at_op(")") && !at_op("]") && !at_op(",") && !at_op("}") &&
                   !at_name("and") && !at_name("or") && !at_name("else") && !at_name("if") &&
                   !at_op(":") &&
                   (t->name == "equalto" || t->name == "eq" || t->name == "sameas" ||
                    t->name == "divisibleby")) {
          t->args.push_back(postfix(primary()));
        }
        e = std::move(t);
      } else {
        return e;
      }
    }
  }

  static constexpr int kMaxDepth = 100;
  // Counts the parser's recursion, so that no input can exhaust the stack.
  struct Nesting {
    Parser& p;
    explicit Nesting(Parser& parser) : p(parser) {
      if (++p.depth_ > kMaxDepth) p.bad("expressions nested deeper than ", kMaxDepth);
    }
    ~Nesting() { --p.depth_; }
  };
  std::vector<Token> t_;
  std::size_t p_ = 0;
  const std::string& name_;
  int line_;
  int depth_ = 0;
};

// ---------------------------------------------------------------- statements

Node node(Node::Kind kind, int line) {
  Node n;
  n.kind = kind;
  n.line = line;
  return n;
}

class TemplateParser {
 public:
  TemplateParser(std::vector<Piece> pieces, const std::string& name)
      : pieces_(std::move(pieces)), name_(name) {}

  std::vector<Node> parse_all() {
    std::string stop;
    std::vector<Node> nodes = block({}, stop);
    return nodes;
  }

 private:
  // Nodes until a statement whose keyword is in `ends` (returned in `stop`; "" at the end).
  std::vector<Node> block(const std::set<std::string>& ends, std::string& stop) {
    if (++depth_ > 100) detail::fail(kFn, "'", name_, "': blocks nested deeper than 100");
    struct Leave {
      int& d;
      ~Leave() { --d; }
    } leave{depth_};
    std::vector<Node> out;
    while (i_ < pieces_.size()) {
      const Piece& pc = pieces_[i_++];
      if (pc.kind == Piece::Kind::Text) {
        Node n = node(Node::Kind::Text, pc.line);
        n.text = pc.content;
        out.push_back(std::move(n));
        continue;
      }
      Parser p(tokenize(pc.content, name_, pc.line), name_, pc.line);
      if (pc.kind == Piece::Kind::Expr) {
        Node n = node(Node::Kind::Output, pc.line);
        n.expr = p.expression();
        p.expect_end();
        out.push_back(std::move(n));
        continue;
      }
      if (p.at_end()) p.bad("an empty statement");
      const std::string kw = p.expect_name();
      if (ends.count(kw)) {
        stop = kw;
        stmt_ = std::make_unique<Parser>(std::move(p));
        return out;
      }
      if (kw == "if") {
        out.push_back(parse_if(p, pc.line));
      } else if (kw == "for") {
        out.push_back(parse_for(p, pc.line));
      } else if (kw == "set") {
        out.push_back(parse_set(p, pc.line));
      } else if (kw == "generation" || kw == "endgeneration") {
        p.expect_end();  // transformers' assistant-mask markers: no output of their own
      } else {
        static const std::set<std::string> known = {"macro",  "call", "filter",     "include",
                                                    "import", "from", "extends",    "block",
                                                    "raw",    "with", "autoescape", "do"};
        if (known.count(kw)) p.bad("'", kw, "' is not supported by attn's template subset");
        p.bad("unexpected '", kw, "'",
              ends.empty() ? std::string() : " (an open block waits for its end tag)");
      }
    }
    if (!ends.empty()) {
      std::string list;
      for (const auto& e : ends) list += (list.empty() ? "" : " or ") + e;
      detail::fail(kFn, "'", name_, "': the template ends before ", list);
    }
    stop.clear();
    return out;
  }

  Node parse_if(Parser& p, int line) {
    Node n = node(Node::Kind::If, line);
    ExprP cond = p.expression();
    p.expect_end();
    while (true) {
      std::string stop;
      std::vector<Node> body = block({"elif", "else", "endif"}, stop);
      n.branches.emplace_back(std::move(cond), std::move(body));
      Parser& s = *stmt_;
      if (stop == "elif") {
        cond = s.expression();
        s.expect_end();
        continue;
      }
      s.expect_end();
      if (stop == "else") {
        std::string end;
        std::vector<Node> other = block({"endif"}, end);
        stmt_->expect_end();
        n.branches.emplace_back(nullptr, std::move(other));
      }
      return n;
    }
  }

  Node parse_for(Parser& p, int line) {
    Node n = node(Node::Kind::For, line);
    n.targets.push_back(p.expect_name());
    while (p.at_op(",")) {
      p.expect_op(",");
      n.targets.push_back(p.expect_name());
    }
    if (!p.at_name("in")) p.bad("expected 'in' in a for loop");
    p.expect_name();
    n.expr = p.expression_no_cond();
    if (p.at_name("if")) {
      p.expect_name();
      n.filter = p.expression_no_cond();
    }
    if (p.at_name("recursive")) p.bad("recursive loops are not supported");
    p.expect_end();
    std::string stop;
    n.body = block({"else", "endfor"}, stop);
    stmt_->expect_end();
    if (stop == "else") {
      n.else_body = block({"endfor"}, stop);
      stmt_->expect_end();
    }
    return n;
  }

  Node parse_set(Parser& p, int line) {
    Node n = node(Node::Kind::Set, line);
    n.targets.push_back(p.expect_name());
    if (p.at_op(".")) {
      p.expect_op(".");
      n.targets.push_back(p.expect_name());
    }
    if (p.at_op(",")) p.bad("set with several targets is not supported");
    if (p.at_end()) p.bad("block set ({% set x %}...{% endset %}) is not supported");
    p.expect_op("=");
    n.expr = p.expression();
    p.expect_end();
    return n;
  }

  std::vector<Piece> pieces_;
  const std::string& name_;
  std::size_t i_ = 0;
  int depth_ = 0;
  std::unique_ptr<Parser> stmt_;  // the statement that ended the last block, its keyword read
};

}  // namespace

std::vector<Node> parse(std::string_view source, const std::string& name) {
  // Jinja2 writes every newline (\r\n, \r) as \n, and drops one at the very end
  // (keep_trailing_newline is off).
  std::string src;
  src.reserve(source.size());
  for (std::size_t i = 0; i < source.size(); ++i) {
    if (source[i] != '\r') {
      src += source[i];
    } else {
      src += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    }
  }
  if (!src.empty() && src.back() == '\n') src.pop_back();
  return TemplateParser(split_pieces(src, name), name).parse_all();
}

}  // namespace jinja

struct ChatTemplate::Impl {
  std::string name;
  std::vector<jinja::Node> nodes;
};

ChatTemplate::ChatTemplate(std::string_view source, const std::string& name) {
  auto impl = std::make_shared<Impl>();
  impl->name = name;
  impl->nodes = jinja::parse(source, name);
  impl_ = std::move(impl);
}

std::string ChatTemplate::render_json(std::string_view context_json) const {
  jinja::json context;
  try {
    context = jinja::json::parse(context_json);
  } catch (const jinja::json::exception& e) {
    detail::fail(jinja::kFn, "the context is not valid JSON: ", e.what());
  }
  if (!context.is_object()) detail::fail(jinja::kFn, "the context must be a JSON object");
  return jinja::render(impl_->nodes, context, impl_->name);
}

std::string ChatTemplate::apply(const std::vector<ChatMessage>& messages,
                                bool add_generation_prompt, const std::string& bos_token,
                                const std::string& eos_token) const {
  jinja::json context = jinja::json::object();
  context["messages"] = jinja::json::array();
  for (const ChatMessage& m : messages)
    context["messages"].push_back({{"role", m.role}, {"content", m.content}});
  context["add_generation_prompt"] = add_generation_prompt;
  context["bos_token"] = bos_token;
  context["eos_token"] = eos_token;
  return jinja::render(impl_->nodes, context, impl_->name);
}

ChatTemplate::Config ChatTemplate::from_tokenizer_config(const std::string& path) {
  jinja::json j;
  try {
    j = jinja::json::parse(io::read_file(path));
  } catch (const jinja::json::exception& e) {
    detail::fail(jinja::kFn, "'", path, "': not valid JSON: ", e.what());
  }
  if (!j.is_object()) detail::fail(jinja::kFn, "'", path, "': expected a JSON object");
  auto ct = j.find("chat_template");
  if (ct == j.end() || ct->is_null()) detail::fail(jinja::kFn, "'", path, "' has no chat_template");
  std::string source;
  if (ct->is_string()) {
    source = ct->get<std::string>();
  } else if (ct->is_array()) {
    for (const auto& e : *ct)
      if (e.is_object() && e.value("name", "") == "default" && e.contains("template") &&
          e["template"].is_string())
        source = e["template"].get<std::string>();
    if (source.empty())
      detail::fail(jinja::kFn, "'", path, "': chat_template lists no template named \"default\"");
  } else {
    detail::fail(jinja::kFn, "'", path, "': chat_template must be a string or a list, got ",
                 ct->dump());
  }
  auto token = [&](const char* key) -> std::string {
    auto it = j.find(key);
    if (it == j.end() || it->is_null()) return "";
    if (it->is_string()) return it->get<std::string>();
    if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
      return (*it)["content"].get<std::string>();
    detail::fail(jinja::kFn, "'", path, "': ", key, " must be a string or {\"content\": ...}");
  };
  return Config{ChatTemplate(source, path + ": chat_template"), token("bos_token"),
                token("eos_token")};
}

}  // namespace attn::data

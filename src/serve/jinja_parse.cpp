// Template source -> Program: preprocessing, tokens, recursive-descent parser. Whitespace control
// and operator precedence are those of @huggingface/jinja's Template (lexer.ts, parser.ts), so that
// chat templates render to the same bytes:
//   - a final "\n" of the source is dropped (Jinja2's keep_trailing_newline=False);
//   - lstrip_blocks: spaces/tabs from a line start up to "{%", "{#" or "{-" are dropped;
//   - trim_blocks: the "\n" right after "%}", "#}" or "-}" is dropped;
//   - {% generation %} / {% endgeneration %} (transformers' tag) are removed;
//   - "{%-" "{{-" "{#-" drop the whitespace before, "-%}" "-}}" "-#}" the whitespace after.
// Precedence, loosest first: `x if c else y`; or; and; not; comparisons and in / not in;
// + - ~; * / // %; **; is-tests; | filters; unary - +; . [] () on a primary.
#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"
#include "serve/jinja_syntax.h"

namespace hyla::serve::jinja {
namespace {

// ---------------------------------------------------------------------------------------------
// Preprocessing: deletions only, each kept byte remembering its offset in the original source.

struct Source {
  std::string text;
  std::vector<uint32_t> origin;  // origin[i]: offset of text[i] in the source; one more at end
};

Source erase(const Source& in, const std::vector<bool>& drop) {
  Source out;
  for (size_t i = 0; i < in.text.size(); ++i) {
    if (drop[i]) continue;
    out.text += in.text[i];
    out.origin.push_back(in.origin[i]);
  }
  out.origin.push_back(in.origin.back());
  return out;
}

bool is_line_start(const std::string& s, size_t i) {
  if (i == 0) return true;
  if (s[i - 1] == '\n' || s[i - 1] == '\r') return true;
  // U+2028 / U+2029 end a line for JavaScript's multiline ^ too.
  return i >= 3 && static_cast<unsigned char>(s[i - 3]) == 0xE2 &&
         static_cast<unsigned char>(s[i - 2]) == 0x80 &&
         (static_cast<unsigned char>(s[i - 1]) == 0xA8 ||
          static_cast<unsigned char>(s[i - 1]) == 0xA9);
}

Source lstrip_blocks(const Source& in) {
  const std::string& s = in.text;
  std::vector<bool> drop(s.size(), false);
  for (size_t i = 0; i < s.size(); ++i) {
    if (!is_line_start(s, i)) continue;
    size_t j = i;
    while (j < s.size() && (s[j] == ' ' || s[j] == '\t')) ++j;
    if (j > i && j + 1 < s.size() && s[j] == '{' && std::strchr("#%-", s[j + 1]) != nullptr)
      for (size_t k = i; k < j; ++k) drop[k] = true;
  }
  return erase(in, drop);
}

Source trim_blocks(const Source& in) {
  const std::string& s = in.text;
  std::vector<bool> drop(s.size(), false);
  for (size_t i = 0; i + 2 < s.size();) {
    if ((s[i] == '#' || s[i] == '%' || s[i] == '-') && s[i + 1] == '}' && s[i + 2] == '\n') {
      drop[i + 2] = true;
      i += 3;
    } else {
      ++i;
    }
  }
  return erase(in, drop);
}

// {% generation %} and {% endgeneration %} mark the assistant's tokens for transformers' masks;
// they render nothing. With "-" they also take the whitespace on that side.
Source drop_generation_tags(const Source& in) {
  const std::string& s = in.text;
  std::vector<bool> drop(s.size(), false);
  size_t done = 0;  // end of the previous match: its trailing whitespace is not "before" again
  for (size_t p = s.find("{%"); p != std::string::npos; p = s.find("{%", p + 1)) {
    if (p < done) continue;
    size_t q = p + 2;
    const bool strip_before = q < s.size() && s[q] == '-';
    if (strip_before) ++q;
    q += js_space_after(s, q);
    if (s.compare(q, 3, "end") == 0 && s.compare(q + 3, 10, "generation") == 0) q += 3;
    if (s.compare(q, 10, "generation") != 0) continue;
    q += 10;
    q += js_space_after(s, q);
    const bool strip_after = q < s.size() && s[q] == '-';
    if (strip_after) ++q;
    if (s.compare(q, 2, "%}") != 0) continue;
    q += 2;
    size_t begin = p, end = q;
    if (strip_before) begin = std::max(done, p - js_space_before(s, p));
    if (strip_after) end = q + js_space_after(s, q);
    for (size_t k = begin; k < end; ++k) drop[k] = true;
    done = end;
  }
  return erase(in, drop);
}

// ---------------------------------------------------------------------------------------------
// Tokens

enum class Tok {
  kText,
  kNumber,
  kString,
  kName,
  kEquals,
  kLParen,
  kRParen,
  kOpenStatement,
  kCloseStatement,
  kOpenExpression,
  kCloseExpression,
  kLBracket,
  kRBracket,
  kLBrace,
  kRBrace,
  kComma,
  kDot,
  kColon,
  kPipe,
  kAdditive,
  kMultiplicative,
  kPower,
  kComparison,
  kUnary,
  kComment,
  kEnd
};

struct Token {
  Tok type;
  std::string value;
  uint32_t offset;  // in the original source
};

std::string describe(const Token& t) {
  switch (t.type) {
    case Tok::kText: return "template text";
    case Tok::kEnd: return "the end of the template";
    case Tok::kString: return str_cat("the string '", t.value, "'");
    case Tok::kNumber: return str_cat("the number ", t.value);
    case Tok::kName: return str_cat("'", t.value, "'");
    case Tok::kComment: return "a comment";
    default: return str_cat("'", t.value, "'");
  }
}

bool is_word(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}
bool is_digit(char c) { return c >= '0' && c <= '9'; }
int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

class Lexer {
 public:
  explicit Lexer(const Source& src) : src_(src), s_(src.text) {}

  std::vector<Token> run() {
    while (pos_ < s_.size()) step();
    tokens_.push_back({Tok::kEnd, "", src_.origin.back()});
    return std::move(tokens_);
  }

 private:
  uint32_t at(size_t i) const { return src_.origin[std::min(i, s_.size())]; }
  [[noreturn]] void fail(size_t i, const std::string& message) const {
    throw Error(at(i), message);
  }
  bool starts(std::string_view seq) const { return s_.compare(pos_, seq.size(), seq) == 0; }
  void push(Tok type, std::string value, size_t begin) {
    tokens_.push_back({type, std::move(value), at(begin)});
  }
  Tok last() const { return tokens_.empty() ? Tok::kEnd : tokens_.back().type; }

  // "{%-" / "{{-" / "{#-": the text before loses its trailing whitespace (dropped when empty).
  void strip_text_before() {
    if (tokens_.empty() || tokens_.back().type != Tok::kText) return;
    std::string& text = tokens_.back().value;
    text.resize(text.size() - js_space_before(text, text.size()));
    if (text.empty()) tokens_.pop_back();
  }
  void skip_space() { pos_ += js_space_after(s_, pos_); }

  void step() {
    // Text runs from the end of a tag to the next "{%", "{{" or "{#".
    const Tok previous = last();
    if (previous == Tok::kEnd || previous == Tok::kCloseStatement ||
        previous == Tok::kCloseExpression || previous == Tok::kComment) {
      size_t end = pos_;
      while (end < s_.size() && !(s_[end] == '{' && end + 1 < s_.size() &&
                                  (s_[end + 1] == '%' || s_[end + 1] == '{' || s_[end + 1] == '#')))
        ++end;
      if (end > pos_) {
        push(Tok::kText, s_.substr(pos_, end - pos_), pos_);
        pos_ = end;
        return;
      }
    }
    if (starts("{#")) return comment();
    if (starts("{%-") || starts("{{-")) {
      strip_text_before();
      const bool statement = s_[pos_ + 1] == '%';
      push(statement ? Tok::kOpenStatement : Tok::kOpenExpression, statement ? "{%" : "{{", pos_);
      if (!statement) brace_depth_ = 0;
      pos_ += 3;
      return;
    }
    skip_space();
    if (pos_ >= s_.size()) return;
    if (starts("-%}") || starts("-}}")) {
      const bool statement = s_[pos_ + 1] == '%';
      push(statement ? Tok::kCloseStatement : Tok::kCloseExpression, statement ? "%}" : "}}", pos_);
      pos_ += 3;
      skip_space();
      return;
    }
    const char c = s_[pos_];
    if (c == '-' || c == '+') {
      const Tok p = last();
      if (p == Tok::kText || p == Tok::kEnd) fail(pos_, str_cat("unexpected '", c, "'"));
      const bool binary = p == Tok::kName || p == Tok::kNumber || p == Tok::kString ||
                          p == Tok::kRParen || p == Tok::kRBracket;
      if (!binary) {  // a sign: glued to a number that follows ("-1"), else a unary operator
        const size_t begin = pos_++;
        std::string number = digits();
        if (!number.empty() && pos_ + 1 < s_.size() && s_[pos_] == '.' && is_digit(s_[pos_ + 1])) {
          ++pos_;
          number += "." + digits();
        }
        if (number.empty())
          push(Tok::kUnary, std::string(1, c), begin);
        else
          push(Tok::kNumber, c + number, begin);
        return;
      }
    }
    if (operator_token()) return;
    if (c == '\'' || c == '"') return string_literal(c);
    if (is_digit(c)) {
      const size_t begin = pos_;
      std::string number = digits();
      if (last() != Tok::kDot && pos_ + 1 < s_.size() && s_[pos_] == '.' &&
          is_digit(s_[pos_ + 1])) {
        ++pos_;
        number += "." + digits();
      }
      push(Tok::kNumber, number, begin);
      return;
    }
    if (is_word(c)) {
      const size_t begin = pos_;
      while (pos_ < s_.size() && is_word(s_[pos_])) ++pos_;
      push(Tok::kName, s_.substr(begin, pos_ - begin), begin);
      return;
    }
    size_t i = pos_;
    const char32_t cp = decode_utf8(s_, i);
    fail(pos_, str_cat("unexpected character '", encode_utf8(cp), "' inside a tag"));
  }

  std::string digits() {
    const size_t begin = pos_;
    while (pos_ < s_.size() && is_digit(s_[pos_])) ++pos_;
    return s_.substr(begin, pos_ - begin);
  }

  void comment() {
    const size_t begin = pos_;
    pos_ += 2;
    const bool strip_before = pos_ < s_.size() && s_[pos_] == '-';
    if (strip_before) ++pos_;
    const size_t end = s_.find("#}", pos_);
    if (end == std::string::npos) fail(begin, "the comment '{#' is never closed with '#}'");
    const bool strip_after = end > pos_ && s_[end - 1] == '-';
    if (strip_before) strip_text_before();
    push(Tok::kComment, "", begin);
    pos_ = end + 2;
    if (strip_after) skip_space();
  }

  bool operator_token() {
    struct Op {
      const char* seq;
      Tok type;
    };
    static constexpr Op kOps[] = {{"{%", Tok::kOpenStatement},  {"%}", Tok::kCloseStatement},
                                  {"{{", Tok::kOpenExpression}, {"}}", Tok::kCloseExpression},
                                  {"(", Tok::kLParen},          {")", Tok::kRParen},
                                  {"{", Tok::kLBrace},          {"}", Tok::kRBrace},
                                  {"[", Tok::kLBracket},        {"]", Tok::kRBracket},
                                  {",", Tok::kComma},           {".", Tok::kDot},
                                  {":", Tok::kColon},           {"|", Tok::kPipe},
                                  {"<=", Tok::kComparison},     {">=", Tok::kComparison},
                                  {"==", Tok::kComparison},     {"!=", Tok::kComparison},
                                  {"<", Tok::kComparison},      {">", Tok::kComparison},
                                  {"+", Tok::kAdditive},        {"-", Tok::kAdditive},
                                  {"~", Tok::kAdditive},        {"**", Tok::kPower},
                                  {"*", Tok::kMultiplicative},  {"//", Tok::kMultiplicative},
                                  {"/", Tok::kMultiplicative},  {"%", Tok::kMultiplicative},
                                  {"=", Tok::kEquals}};
    for (const Op& op : kOps) {
      // Inside a dict literal "}}" closes two dicts, not the expression.
      if (op.type == Tok::kCloseExpression && brace_depth_ > 0) continue;
      if (!starts(op.seq)) continue;
      push(op.type, op.seq, pos_);
      if (op.type == Tok::kOpenExpression) brace_depth_ = 0;
      if (op.type == Tok::kLBrace) ++brace_depth_;
      if (op.type == Tok::kRBrace) --brace_depth_;
      pos_ += std::strlen(op.seq);
      return true;
    }
    return false;
  }

  void string_literal(char quote) {
    const size_t begin = pos_++;
    std::string value;
    char32_t pending_high = 0;  // a \uD800-\uDBFF waiting for its low surrogate
    auto flush_high = [&] {
      if (pending_high != 0) value += encode_utf8(0xFFFD);
      pending_high = 0;
    };
    while (true) {
      if (pos_ >= s_.size()) fail(begin, str_cat("the string starting here is never closed"));
      const char c = s_[pos_];
      if (c == quote) break;
      if (c != '\\') {
        flush_high();
        value += c;
        ++pos_;
        continue;
      }
      if (pos_ + 1 >= s_.size()) fail(pos_, "the string ends in a lone backslash");
      const char e = s_[pos_ + 1];
      pos_ += 2;
      if (e == 'x' || e == 'u') {
        const size_t n = e == 'x' ? 2 : 4;
        char32_t code = 0;
        for (size_t k = 0; k < n; ++k) {
          const int d = pos_ + k < s_.size() ? hex_digit(s_[pos_ + k]) : -1;
          if (d < 0)
            fail(pos_ - 2, str_cat("invalid escape \\", e, ": expected ", n, " hex digits"));
          code = code * 16 + static_cast<char32_t>(d);
        }
        pos_ += n;
        if (code >= 0xDC00 && code <= 0xDFFF && pending_high != 0) {
          value += encode_utf8(0x10000 + ((pending_high - 0xD800) << 10) + (code - 0xDC00));
          pending_high = 0;
          continue;
        }
        flush_high();
        if (code >= 0xD800 && code <= 0xDBFF) {
          pending_high = code;
          continue;
        }
        value += encode_utf8(code >= 0xDC00 && code <= 0xDFFF ? 0xFFFD : code);
        continue;
      }
      flush_high();
      switch (e) {
        case 'n': value += '\n'; break;
        case 't': value += '\t'; break;
        case 'r': value += '\r'; break;
        case 'b': value += '\b'; break;
        case 'f': value += '\f'; break;
        case 'v': value += '\v'; break;
        case '\'': value += '\''; break;
        case '"': value += '"'; break;
        case '\\': value += '\\'; break;
        default: fail(pos_ - 2, str_cat("unknown escape '\\", e, "' in a string"));
      }
    }
    flush_high();
    ++pos_;  // the closing quote
    push(Tok::kString, std::move(value), begin);
  }

  const Source& src_;
  const std::string& s_;
  size_t pos_ = 0;
  int brace_depth_ = 0;
  std::vector<Token> tokens_;
};

// ---------------------------------------------------------------------------------------------
// Parser

constexpr int kMaxDepth = 200;  // nesting of blocks and expressions: no stack overflow on input

class Parser {
 public:
  explicit Parser(std::vector<Token> tokens) : t_(std::move(tokens)) {}

  Program run() {
    Program program;
    while (peek().type != Tok::kEnd) program.body.push_back(any());
    return program;
  }

 private:
  const Token& peek(size_t k = 0) const { return t_[std::min(i_ + k, t_.size() - 1)]; }
  const Token& next() {
    const Token& t = peek();
    if (i_ < t_.size() - 1) ++i_;
    return t;
  }
  bool is(Tok type) const { return peek().type == type; }
  bool is_name(std::string_view name, size_t k = 0) const {
    return peek(k).type == Tok::kName && peek(k).value == name;
  }
  const Token& expect(Tok type, std::string_view what) {
    if (!is(type))
      throw Error(peek().offset, str_cat("expected ", what, ", found ", describe(peek())));
    return next();
  }
  void expect_name(std::string_view name, std::string_view context) {
    if (!is_name(name))
      throw Error(peek().offset,
                  str_cat("expected '", name, "' ", context, ", found ", describe(peek())));
    next();
  }
  static NodePtr node(Node::Kind kind, uint32_t offset) {
    auto n = std::make_unique<Node>();
    n->kind = kind;
    n->offset = offset;
    return n;
  }

  struct DepthGuard {
    DepthGuard(int& counter, uint32_t offset) : depth(counter) {
      if (++depth > kMaxDepth)
        throw Error(offset, str_cat("the template nests deeper than ", kMaxDepth, " levels"));
    }
    ~DepthGuard() { --depth; }
    int& depth;
  };

  static bool is_end_keyword(const std::string& name) {
    return name == "endif" || name == "elif" || name == "else" || name == "endfor" ||
           name == "endmacro" || name == "endset" || name == "endcall" || name == "endfilter";
  }
  bool is_statement_name() const { return is(Tok::kOpenStatement) && peek(1).type == Tok::kName; }
  bool at_statement(std::initializer_list<std::string_view> names) const {
    if (!is_statement_name()) return false;
    for (std::string_view n : names)
      if (peek(1).value == n) return true;
    return false;
  }

  // Statements until one of `names` ({% endfor %}, {% else %}, ...) opens next.
  std::vector<NodePtr> block_until(std::initializer_list<std::string_view> names,
                                   const Token& opener) {
    std::vector<NodePtr> body;
    std::string expected;
    for (std::string_view n : names) expected += str_cat(expected.empty() ? "" : " or ", n);
    while (!at_statement(names)) {
      if (is(Tok::kEnd))
        throw Error(opener.offset, str_cat("{% ", opener.value, " %} is never closed: the ",
                                           "template ends before {% ", expected, " %}"));
      if (is_statement_name() && is_end_keyword(peek(1).value))
        throw Error(peek(1).offset, str_cat("unexpected {% ", peek(1).value, " %} inside {% ",
                                            opener.value, " %}: expected {% ", expected, " %}"));
      body.push_back(any());
    }
    return body;
  }

  NodePtr any() {
    DepthGuard guard(depth_, peek().offset);
    const Token& t = peek();
    switch (t.type) {
      case Tok::kText: {
        auto n = node(Node::Kind::kText, t.offset);
        n->text = next().value;
        return n;
      }
      case Tok::kComment: {
        next();
        return node(Node::Kind::kText, t.offset);  // renders nothing
      }
      case Tok::kOpenExpression: {
        next();
        auto n = node(Node::Kind::kOutput, t.offset);
        n->a = expression();
        expect(Tok::kCloseExpression, "'}}' to close the expression");
        return n;
      }
      case Tok::kOpenStatement: return statement();
      default: throw Error(t.offset, str_cat("unexpected ", describe(t), " outside a tag"));
    }
  }

  void close_statement(std::string_view what) {
    expect(Tok::kCloseStatement, str_cat("'%}' to close {% ", what, " %}"));
  }
  void end_statement(std::string_view name) {
    expect(Tok::kOpenStatement, str_cat("{% ", name, " %}"));
    expect_name(name, "");
    close_statement(name);
  }

  NodePtr statement() {
    const Token& open = next();  // {%
    if (!is(Tok::kName))
      throw Error(peek().offset,
                  str_cat("expected a statement name after '{%', found ", describe(peek())));
    const Token& name = next();
    const std::string& s = name.value;
    if (s == "if") return if_statement(name);
    if (s == "for") return for_statement(name);
    if (s == "set") return set_statement(name);
    if (s == "macro") return macro_statement(name);
    if (s == "call") return call_statement(name);
    if (s == "filter") return filter_statement(name);
    if (s == "break" || s == "continue") {
      close_statement(s);
      return node(s == "break" ? Node::Kind::kBreak : Node::Kind::kContinue, open.offset);
    }
    if (is_end_keyword(s))
      throw Error(name.offset, str_cat("unexpected {% ", s, " %}: no open block it could close"));
    throw Error(name.offset, str_cat("unknown statement '", s, "' (supported: if, for, set, ",
                                     "macro, call, filter, break, continue)"));
  }

  NodePtr if_statement(const Token& opener) {
    NodePtr n = if_chain(opener, opener.offset, "if");
    end_statement("endif");
    return n;
  }
  // if / elif: the condition, its body, then an elif (an if nested in the else branch, sharing
  // the outer {% endif %}) or an else.
  NodePtr if_chain(const Token& opener, uint32_t offset, std::string_view keyword) {
    DepthGuard guard(depth_, offset);
    auto n = node(Node::Kind::kIf, offset);
    n->a = expression();
    close_statement(keyword);
    n->body = block_until({"elif", "else", "endif"}, opener);
    if (at_statement({"elif"})) {
      next();
      const uint32_t elif = next().offset;
      n->orelse.push_back(if_chain(opener, elif, "elif"));
    } else if (at_statement({"else"})) {
      next();
      next();
      close_statement("else");
      n->orelse = block_until({"endif"}, opener);
    }
    return n;
  }

  NodePtr target(std::string_view where) {
    const Token& first = peek();
    auto one = [&] {
      if (!is(Tok::kName))
        throw Error(peek().offset,
                    str_cat("expected a variable name ", where, ", found ", describe(peek())));
      auto n = node(Node::Kind::kName, peek().offset);
      n->text = next().value;
      return n;
    };
    auto n = one();
    if (!is(Tok::kComma)) return n;
    auto tuple = node(Node::Kind::kTuple, first.offset);
    tuple->args.push_back(std::move(n));
    while (is(Tok::kComma)) {
      next();
      tuple->args.push_back(one());
    }
    return tuple;
  }

  NodePtr for_statement(const Token& opener) {
    auto n = node(Node::Kind::kFor, opener.offset);
    n->a = target("after 'for'");
    expect_name("in", "after the loop variable");
    NodePtr iterable = expression();
    if (iterable->kind == Node::Kind::kTernary && iterable->c == nullptr) {
      // `for x in xs if cond`: the condition filters the items.
      n->b = std::move(iterable->a);
      n->c = std::move(iterable->b);
    } else {
      n->b = std::move(iterable);
    }
    close_statement("for");
    n->body = block_until({"endfor", "else"}, opener);
    if (at_statement({"else"})) {
      next();
      next();
      close_statement("else");
      n->orelse = block_until({"endfor"}, opener);
    }
    end_statement("endfor");
    return n;
  }

  NodePtr set_statement(const Token& opener) {
    auto n = node(Node::Kind::kSet, opener.offset);
    n->a = sequence();
    const Node::Kind k = n->a->kind;
    bool valid = k == Node::Kind::kName || k == Node::Kind::kAttribute;
    if (k == Node::Kind::kTuple) {
      valid = true;
      for (const NodePtr& item : n->a->args) valid = valid && item->kind == Node::Kind::kName;
    }
    if (!valid)
      throw Error(n->a->offset,
                  "{% set %} assigns to a name, names separated by commas, or "
                  "namespace.attribute");
    if (is(Tok::kEquals)) {
      next();
      n->b = sequence();
      close_statement("set");
      return n;
    }
    if (k != Node::Kind::kName) throw Error(peek().offset, "a block {% set %} assigns to one name");
    close_statement("set");
    n->body = block_until({"endset"}, opener);
    end_statement("endset");
    return n;
  }

  void parameters(Node& n, std::string_view where) {
    expect(Tok::kLParen, str_cat("'(' to open the parameters of ", where));
    bool saw_default = false;
    while (!is(Tok::kRParen)) {
      if (!is(Tok::kName))
        throw Error(peek().offset,
                    str_cat("expected a parameter name in ", where, ", found ", describe(peek())));
      const Token& name = next();
      for (const NodePtr& p : n.args)
        if (p->text == name.value)
          throw Error(name.offset, str_cat("parameter '", name.value, "' appears twice"));
      if (is(Tok::kEquals)) {
        next();
        auto kw = node(Node::Kind::kKeyword, name.offset);
        kw->text = name.value;
        kw->a = expression();
        n.args.push_back(std::move(kw));
        saw_default = true;
      } else {
        if (saw_default)
          throw Error(name.offset, str_cat("parameter '", name.value, "' without a default ",
                                           "follows one with a default"));
        auto p = node(Node::Kind::kName, name.offset);
        p->text = name.value;
        n.args.push_back(std::move(p));
      }
      if (!is(Tok::kComma)) break;
      next();
    }
    expect(Tok::kRParen, str_cat("')' to close the parameters of ", where));
  }

  NodePtr macro_statement(const Token& opener) {
    auto n = node(Node::Kind::kMacro, opener.offset);
    if (!is(Tok::kName))
      throw Error(peek().offset, str_cat("expected the macro's name, found ", describe(peek())));
    n->text = next().value;
    parameters(*n, str_cat("macro '", n->text, "'"));
    close_statement("macro");
    n->body = block_until({"endmacro"}, opener);
    end_statement("endmacro");
    return n;
  }

  NodePtr call_statement(const Token& opener) {
    auto n = node(Node::Kind::kCallBlock, opener.offset);
    if (is(Tok::kLParen)) parameters(*n, "the call block's caller");
    NodePtr call = postfix();
    if (call->kind != Node::Kind::kCall)
      throw Error(call->offset, "{% call %} needs a macro call, e.g. {% call m(1) %}");
    n->a = std::move(call);
    close_statement("call");
    n->body = block_until({"endcall"}, opener);
    end_statement("endcall");
    return n;
  }

  NodePtr filter_statement(const Token& opener) {
    auto n = node(Node::Kind::kFilterBlock, opener.offset);
    n->a = filter_tail(nullptr, opener.offset);
    close_statement("filter");
    n->body = block_until({"endfilter"}, opener);
    end_statement("endfilter");
    return n;
  }

  // ---- expressions ----

  // A comma-separated sequence becomes a tuple: `set a, b = 1, 2`, `(1, 2)`.
  NodePtr sequence() {
    const uint32_t offset = peek().offset;
    NodePtr first = expression();
    if (!is(Tok::kComma)) return first;
    auto tuple = node(Node::Kind::kTuple, offset);
    tuple->args.push_back(std::move(first));
    while (is(Tok::kComma)) {
      next();
      if (is(Tok::kRParen) || is(Tok::kCloseStatement)) break;
      tuple->args.push_back(expression());
    }
    return tuple;
  }

  NodePtr expression() {
    DepthGuard guard(depth_, peek().offset);
    NodePtr value = logical_or();
    if (!is_name("if")) return value;
    auto n = node(Node::Kind::kTernary, value->offset);
    next();
    n->a = std::move(value);
    n->b = logical_or();
    if (is_name("else")) {
      next();
      n->c = expression();
    }
    return n;
  }

  NodePtr binary(std::string op, NodePtr a, NodePtr b) {
    auto n = node(Node::Kind::kBinary, a->offset);
    n->text = std::move(op);
    n->a = std::move(a);
    n->b = std::move(b);
    return n;
  }

  NodePtr logical_or() {
    NodePtr left = logical_and();
    while (is_name("or")) {
      next();
      left = binary("or", std::move(left), logical_and());
    }
    return left;
  }
  NodePtr logical_and() {
    NodePtr left = logical_not();
    while (is_name("and")) {
      next();
      left = binary("and", std::move(left), logical_not());
    }
    return left;
  }
  NodePtr logical_not() {
    if (!is_name("not")) return comparison();
    DepthGuard guard(depth_, peek().offset);
    auto n = node(Node::Kind::kUnary, next().offset);
    n->text = "not";
    n->a = logical_not();
    return n;
  }
  NodePtr comparison() {
    NodePtr left = additive();
    while (true) {
      std::string op;
      if (is_name("not") && is_name("in", 1)) {
        next();
        next();
        op = "not in";
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is(Tok::kComparison)) {
        op = next().value;
      } else {
        return left;
      }
      left = binary(op, std::move(left), additive());
    }
  }
  NodePtr additive() {
    NodePtr left = multiplicative();
    while (is(Tok::kAdditive)) {
      std::string op = next().value;
      left = binary(op, std::move(left), multiplicative());
    }
    return left;
  }
  NodePtr multiplicative() {
    NodePtr left = power();
    while (is(Tok::kMultiplicative)) {
      std::string op = next().value;
      left = binary(op, std::move(left), power());
    }
    return left;
  }
  NodePtr power() {
    NodePtr left = test();
    while (is(Tok::kPower)) {
      next();
      left = binary("**", std::move(left), test());
    }
    return left;
  }
  NodePtr test() {
    NodePtr operand = filter();
    while (is_name("is")) {
      auto n = node(Node::Kind::kTest, next().offset);
      if (is_name("not")) {
        next();
        n->negate = true;
      }
      if (!is(Tok::kName))
        throw Error(peek().offset,
                    str_cat("expected a test name after 'is', found ", describe(peek())));
      n->text = next().value;
      // An argument: `is divisibleby(3)`, or one literal, `is equalto 3`.
      if (is(Tok::kLParen)) {
        call_arguments(*n);
      } else if (is(Tok::kNumber) || is(Tok::kString)) {
        n->args.push_back(primary());
      }
      n->a = std::move(operand);
      operand = std::move(n);
    }
    return operand;
  }
  NodePtr filter_tail(NodePtr operand, uint32_t offset) {
    if (!is(Tok::kName))
      throw Error(peek().offset, str_cat("expected a filter name, found ", describe(peek())));
    auto n = node(Node::Kind::kFilter, offset);
    n->text = next().value;
    if (is(Tok::kLParen)) call_arguments(*n);
    n->a = std::move(operand);
    return n;
  }
  NodePtr filter() {
    NodePtr operand = unary();
    while (is(Tok::kPipe)) {
      const uint32_t offset = next().offset;
      operand = filter_tail(std::move(operand), offset);
    }
    return operand;
  }
  NodePtr unary() {
    if (is(Tok::kUnary) || (is(Tok::kAdditive) && (peek().value == "-" || peek().value == "+"))) {
      DepthGuard guard(depth_, peek().offset);
      auto n = node(Node::Kind::kUnary, peek().offset);
      n->text = next().value;
      n->a = unary();
      return n;
    }
    return postfix();
  }

  // (args): positional first, then name=value.
  void call_arguments(Node& n) {
    expect(Tok::kLParen, "'('");
    bool saw_keyword = false;
    while (!is(Tok::kRParen)) {
      if (is(Tok::kName) && peek(1).type == Tok::kEquals) {
        auto kw = node(Node::Kind::kKeyword, peek().offset);
        kw->text = next().value;
        next();
        kw->a = expression();
        for (const NodePtr& a : n.args)
          if (a->kind == Node::Kind::kKeyword && a->text == kw->text)
            throw Error(kw->offset, str_cat("keyword argument '", kw->text, "' given twice"));
        n.args.push_back(std::move(kw));
        saw_keyword = true;
      } else {
        NodePtr arg = expression();
        if (saw_keyword)
          throw Error(arg->offset, "a positional argument follows a keyword argument");
        n.args.push_back(std::move(arg));
      }
      if (!is(Tok::kComma)) break;
      next();
    }
    expect(Tok::kRParen, "')' to close the arguments");
  }

  NodePtr postfix() {
    NodePtr object = primary();
    while (true) {
      if (is(Tok::kDot)) {
        next();
        if (!is(Tok::kName) && !is(Tok::kNumber))
          throw Error(peek().offset,
                      str_cat("expected an attribute name after '.', found ", describe(peek())));
        auto n = node(Node::Kind::kAttribute, object->offset);
        n->text = next().value;
        n->a = std::move(object);
        object = std::move(n);
      } else if (is(Tok::kLBracket)) {
        const uint32_t offset = next().offset;
        object = subscript(std::move(object), offset);
      } else if (is(Tok::kLParen)) {
        auto n = node(Node::Kind::kCall, object->offset);
        call_arguments(*n);
        n->a = std::move(object);
        object = std::move(n);
      } else {
        return object;
      }
    }
  }

  // a[i] or a[start:stop:step] (each part optional).
  NodePtr subscript(NodePtr object, uint32_t offset) {
    std::vector<NodePtr> parts(1);
    bool slice = false;
    while (!is(Tok::kRBracket)) {
      if (is(Tok::kColon)) {
        next();
        slice = true;
        parts.emplace_back();
        if (parts.size() > 3) throw Error(offset, "a slice has at most 3 parts: [start:stop:step]");
        continue;
      }
      if (parts.back() != nullptr)
        throw Error(peek().offset,
                    str_cat("expected ':' or ']' in the subscript, found ", describe(peek())));
      parts.back() = expression();
    }
    next();
    if (!slice) {
      if (parts[0] == nullptr) throw Error(offset, "an empty subscript []");
      auto n = node(Node::Kind::kIndex, object->offset);
      n->a = std::move(object);
      n->b = std::move(parts[0]);
      return n;
    }
    auto n = node(Node::Kind::kSlice, object->offset);
    n->a = std::move(object);
    parts.resize(3);
    n->args = std::move(parts);
    return n;
  }

  NodePtr primary() {
    DepthGuard guard(depth_, peek().offset);
    const Token& t = peek();
    switch (t.type) {
      case Tok::kNumber: {
        next();
        auto n = node(Node::Kind::kLiteral, t.offset);
        if (t.value.find('.') != std::string::npos) {
          n->value = Value::floating(std::strtod(t.value.c_str(), nullptr));
        } else {
          errno = 0;
          const long long v = std::strtoll(t.value.c_str(), nullptr, 10);
          if (errno == ERANGE)
            throw Error(t.offset, str_cat("the integer ", t.value, " does not fit in 64 bits"));
          n->value = Value::integer(v);
        }
        return n;
      }
      case Tok::kString: {
        std::string value = next().value;
        while (is(Tok::kString)) value += next().value;  // 'a' 'b' == 'ab'
        auto n = node(Node::Kind::kLiteral, t.offset);
        n->value = Value::string(std::move(value));
        return n;
      }
      case Tok::kName: {
        auto n = node(Node::Kind::kName, t.offset);
        n->text = next().value;
        return n;
      }
      case Tok::kLParen: {
        next();
        if (is(Tok::kRParen)) {  // () is the empty tuple
          next();
          return node(Node::Kind::kTuple, t.offset);
        }
        NodePtr inner = sequence();
        expect(Tok::kRParen, "')'");
        return inner;
      }
      case Tok::kLBracket: {
        next();
        auto n = node(Node::Kind::kList, t.offset);
        while (!is(Tok::kRBracket)) {
          n->args.push_back(expression());
          if (!is(Tok::kComma)) break;
          next();
        }
        expect(Tok::kRBracket, "',' or ']' in the list");
        return n;
      }
      case Tok::kLBrace: {
        next();
        auto n = node(Node::Kind::kDict, t.offset);
        while (!is(Tok::kRBrace)) {
          n->args.push_back(expression());
          expect(Tok::kColon, "':' between a key and its value");
          n->args.push_back(expression());
          if (!is(Tok::kComma)) break;
          next();
        }
        expect(Tok::kRBrace, "',' or '}' in the dict");
        return n;
      }
      default: throw Error(t.offset, str_cat("expected a value, found ", describe(t)));
    }
  }

  std::vector<Token> t_;
  size_t i_ = 0;
  int depth_ = 0;
};

}  // namespace

Program parse_program(const std::string& source) {
  Source src;
  src.text = source;
  src.origin.resize(source.size() + 1);
  for (size_t i = 0; i <= source.size(); ++i) src.origin[i] = static_cast<uint32_t>(i);
  if (!src.text.empty() && src.text.back() == '\n') {
    src.text.pop_back();
    src.origin.erase(src.origin.end() - 2);
  }
  src = drop_generation_tags(trim_blocks(lstrip_blocks(src)));
  return Parser(Lexer(src).run()).run();
}

}  // namespace hyla::serve::jinja

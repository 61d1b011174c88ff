// Recursive-descent parser of the Jinja subset, with Jinja2's operator precedence:
// conditional < or < and < not < comparisons/in < + - < ~ < * / // % < ** < unary, and
// filters, tests, calls, attributes and subscripts binding tightest.
#include <algorithm>
#include <initializer_list>

#include "model/jinja/jinja_internal.h"
#include "onepass/core/error.h"

namespace onepass::model::jinja {
namespace {

using Kind = Token::Kind;

class Parser {
 public:
  Parser(const std::vector<Token>& tokens, std::string_view source, const TemplateOptions& options)
      : tokens_(tokens), source_(source), options_(options) {}

  Body parse_template() {
    std::string end_tag;
    Body body = parse_body({}, end_tag);
    return body;
  }

 private:
  [[noreturn]] void fail_at(size_t offset, const std::string& what) const {
    fail(options_.name, position(source_, offset), ": ", what);
  }

  const Token& peek(size_t ahead = 0) const {
    return tokens_[std::min(pos_ + ahead, tokens_.size() - 1)];
  }
  const Token& next() { return tokens_[std::min(pos_++, tokens_.size() - 1)]; }
  bool is_op(std::string_view op, size_t ahead = 0) const {
    return peek(ahead).kind == Kind::kOperator && peek(ahead).text == op;
  }
  bool is_name(std::string_view name, size_t ahead = 0) const {
    return peek(ahead).kind == Kind::kName && peek(ahead).text == name;
  }
  bool skip_op(std::string_view op) {
    if (!is_op(op)) return false;
    ++pos_;
    return true;
  }
  bool skip_name(std::string_view name) {
    if (!is_name(name)) return false;
    ++pos_;
    return true;
  }
  static std::string describe(const Token& token) {
    switch (token.kind) {
      case Kind::kEnd:
        return "the end of the template";
      case Kind::kStmtEnd:
        return "'%}'";
      case Kind::kOutputEnd:
        return "'}}'";
      case Kind::kText:
        return "template text";
      case Kind::kString:
        return "a string";
      default:
        return "'" + token.text + "'";
    }
  }
  void expect_op(std::string_view op) {
    if (!skip_op(op)) fail_at(peek().offset, cat("expected '", op, "', found ", describe(peek())));
  }
  void expect(Kind kind, std::string_view what) {
    if (peek().kind != kind) fail_at(peek().offset, cat("expected ", what, ", found ", describe(peek())));
    ++pos_;
  }
  std::string expect_name() {
    if (peek().kind != Kind::kName) fail_at(peek().offset, "expected a name, found " + describe(peek()));
    return next().text;
  }

  // Statements up to one of the `ends` tags ("endif", "else", ...), whose name is returned
  // in `end_tag` with the parser left after that name.
  Body parse_body(std::initializer_list<std::string_view> ends, std::string& end_tag) {
    Body body;
    while (true) {
      const Token& token = peek();
      if (token.kind == Kind::kEnd) {
        if (ends.size() > 0) {
          fail_at(token.offset, cat("the template ended inside a block; expected '{% ",
                                    *(ends.end() - 1), " %}'"));
        }
        return body;
      }
      if (token.kind == Kind::kText) {
        auto stmt = make_stmt(Stmt::Kind::kText, token.offset);
        stmt->text = next().text;
        body.push_back(std::move(stmt));
      } else if (token.kind == Kind::kOutputBegin) {
        next();
        auto stmt = make_stmt(Stmt::Kind::kOutput, token.offset);
        stmt->expr = parse_tuple();
        expect(Kind::kOutputEnd, "'}}'");
        body.push_back(std::move(stmt));
      } else {
        next();  // {%
        const Token& name = peek();
        if (name.kind != Kind::kName) fail_at(name.offset, "expected a statement name, found " + describe(name));
        if (std::find(ends.begin(), ends.end(), name.text) != ends.end()) {
          end_tag = next().text;
          return body;
        }
        body.push_back(parse_statement());
      }
    }
  }

  static StmtPtr make_stmt(Stmt::Kind kind, size_t offset) {
    auto stmt = std::make_unique<Stmt>();
    stmt->kind = kind;
    stmt->offset = offset;
    return stmt;
  }

  StmtPtr parse_statement() {
    const Token& name = next();
    const std::string& keyword = name.text;
    std::string end_tag;
    if (keyword == "if") {
      auto stmt = make_stmt(Stmt::Kind::kIf, name.offset);
      stmt->conditions.push_back(parse_expression());
      expect(Kind::kStmtEnd, "'%}'");
      while (true) {
        stmt->bodies.push_back(parse_body({"elif", "else", "endif"}, end_tag));
        if (end_tag == "elif") {
          stmt->conditions.push_back(parse_expression());
          expect(Kind::kStmtEnd, "'%}'");
        } else if (end_tag == "else") {
          expect(Kind::kStmtEnd, "'%}'");
          stmt->bodies.push_back(parse_body({"endif"}, end_tag));
          break;
        } else {
          break;
        }
      }
      expect(Kind::kStmtEnd, "'%}'");
      return stmt;
    }
    if (keyword == "for") {
      auto stmt = make_stmt(Stmt::Kind::kFor, name.offset);
      do {
        stmt->targets.push_back(expect_name());
      } while (skip_op(","));
      if (!skip_name("in")) fail_at(peek().offset, "expected 'in' after the loop variables");
      stmt->expr = parse_or();
      if (skip_name("if")) stmt->filter = parse_or();
      if (is_name("recursive")) fail_at(peek().offset, "recursive loops are not supported");
      expect(Kind::kStmtEnd, "'%}'");
      stmt->bodies.push_back(parse_body({"else", "endfor"}, end_tag));
      if (end_tag == "else") {
        expect(Kind::kStmtEnd, "'%}'");
        stmt->bodies.push_back(parse_body({"endfor"}, end_tag));
      }
      expect(Kind::kStmtEnd, "'%}'");
      return stmt;
    }
    if (keyword == "set") {
      auto stmt = make_stmt(Stmt::Kind::kSet, name.offset);
      stmt->targets.push_back(expect_name());
      if (skip_op(".")) {
        stmt->attribute = expect_name();
      } else {
        while (skip_op(",")) stmt->targets.push_back(expect_name());
      }
      if (skip_op("=")) {
        stmt->expr = parse_tuple();
        expect(Kind::kStmtEnd, "'%}'");
      } else {
        if (stmt->targets.size() != 1 || !stmt->attribute.empty()) {
          fail_at(peek().offset, "expected '=' in the set statement");
        }
        if (is_op("|")) stmt->filter = parse_filters(make(Expr::Kind::kBlockValue, peek().offset));
        expect(Kind::kStmtEnd, "'%}'");
        stmt->bodies.push_back(parse_body({"endset"}, end_tag));
        expect(Kind::kStmtEnd, "'%}'");
      }
      return stmt;
    }
    if (keyword == "macro") {
      auto stmt = make_stmt(Stmt::Kind::kMacro, name.offset);
      stmt->text = expect_name();
      expect_op("(");
      while (!skip_op(")")) {
        std::string param = expect_name();
        ExprPtr fallback;
        if (skip_op("=")) fallback = parse_expression();
        stmt->params.emplace_back(std::move(param), std::move(fallback));
        if (!is_op(")")) expect_op(",");
      }
      expect(Kind::kStmtEnd, "'%}'");
      stmt->bodies.push_back(parse_body({"endmacro"}, end_tag));
      if (peek().kind == Kind::kName) next();  // {% endmacro name %}
      expect(Kind::kStmtEnd, "'%}'");
      return stmt;
    }
    if (keyword == "filter") {
      // {% filter name(args) | more %}: the first filter is written without '|'.
      auto stmt = make_stmt(Stmt::Kind::kFilterBlock, name.offset);
      const Token& first = peek();
      auto filter = make(Expr::Kind::kFilter, first.offset);
      filter->name = expect_name();
      if (!is_known_filter(filter->name)) fail_at(first.offset, cat("filter '", filter->name, "' is not supported"));
      filter->a = make(Expr::Kind::kBlockValue, first.offset);
      if (is_op("(")) parse_arguments(*filter);
      stmt->filter = parse_filters(std::move(filter));
      expect(Kind::kStmtEnd, "'%}'");
      stmt->bodies.push_back(parse_body({"endfilter"}, end_tag));
      expect(Kind::kStmtEnd, "'%}'");
      return stmt;
    }
    if (keyword == "call") {
      // {% call(params) macro(args) %}body{% endcall %}: the macro sees caller(params) = body.
      auto stmt = make_stmt(Stmt::Kind::kCallBlock, name.offset);
      stmt->text = "caller";
      if (skip_op("(")) {
        while (!skip_op(")")) {
          std::string param = expect_name();
          ExprPtr fallback;
          if (skip_op("=")) fallback = parse_expression();
          stmt->params.emplace_back(std::move(param), std::move(fallback));
          if (!is_op(")")) expect_op(",");
        }
      }
      const size_t call_offset = peek().offset;
      stmt->expr = parse_expression();
      if (stmt->expr->kind != Expr::Kind::kCall) fail_at(call_offset, "a call block needs a macro call");
      expect(Kind::kStmtEnd, "'%}'");
      stmt->bodies.push_back(parse_body({"endcall"}, end_tag));
      expect(Kind::kStmtEnd, "'%}'");
      return stmt;
    }
    if (keyword == "break" || keyword == "continue") {
      expect(Kind::kStmtEnd, "'%}'");
      return make_stmt(keyword == "break" ? Stmt::Kind::kBreak : Stmt::Kind::kContinue, name.offset);
    }
    if (keyword == "generation") {
      // transformers' marker of the assistant's text (for training masks): renders its body.
      auto stmt = make_stmt(Stmt::Kind::kBlock, name.offset);
      expect(Kind::kStmtEnd, "'%}'");
      stmt->bodies.push_back(parse_body({"endgeneration"}, end_tag));
      expect(Kind::kStmtEnd, "'%}'");
      return stmt;
    }
    static constexpr std::string_view kClosers[] = {"endif",         "endfor",    "endset",
                                                    "endmacro",      "else",      "elif",
                                                    "endgeneration", "endfilter", "endcall"};
    if (std::find(std::begin(kClosers), std::end(kClosers), keyword) != std::end(kClosers)) {
      fail_at(name.offset, cat("'", keyword, "' without an open block it could close"));
    }
    fail_at(name.offset, cat("statement '", keyword, "' is not supported"));
  }

  // -------------------------------------------------------------------------------------
  // Expressions

  ExprPtr make(Expr::Kind kind, size_t offset) {
    auto expr = std::make_unique<Expr>();
    expr->kind = kind;
    expr->offset = offset;
    return expr;
  }

  ExprPtr binary(std::string op, ExprPtr left, ExprPtr right, size_t offset) {
    auto expr = make(Expr::Kind::kBinary, offset);
    expr->name = std::move(op);
    expr->a = std::move(left);
    expr->b = std::move(right);
    return expr;
  }

  // `a, b` without brackets is a tuple (a list here).
  ExprPtr parse_tuple() {
    const size_t offset = peek().offset;
    ExprPtr first = parse_expression();
    if (!is_op(",")) return first;
    auto list = make(Expr::Kind::kList, offset);
    list->negated = true;
    list->args.push_back(std::move(first));
    while (skip_op(",")) {
      if (peek().kind == Kind::kOutputEnd || peek().kind == Kind::kStmtEnd) break;
      list->args.push_back(parse_expression());
    }
    return list;
  }

  ExprPtr parse_expression() {
    ExprPtr expr = parse_or();
    while (is_name("if")) {
      const size_t offset = next().offset;
      auto condition = make(Expr::Kind::kCondition, offset);
      condition->a = parse_or();
      condition->b = std::move(expr);
      if (skip_name("else")) condition->c = parse_expression();
      expr = std::move(condition);
    }
    return expr;
  }

  ExprPtr parse_or() {
    ExprPtr left = parse_and();
    while (is_name("or")) {
      const size_t offset = next().offset;
      left = binary("or", std::move(left), parse_and(), offset);
    }
    return left;
  }

  ExprPtr parse_and() {
    ExprPtr left = parse_not();
    while (is_name("and")) {
      const size_t offset = next().offset;
      left = binary("and", std::move(left), parse_not(), offset);
    }
    return left;
  }

  ExprPtr parse_not() {
    if (is_name("not")) {
      auto expr = make(Expr::Kind::kUnary, next().offset);
      expr->name = "not";
      expr->a = parse_not();
      return expr;
    }
    return parse_compare();
  }

  ExprPtr parse_compare() {
    ExprPtr left = parse_add();
    while (true) {
      const size_t offset = peek().offset;
      std::string op;
      for (const std::string_view candidate : {"==", "!=", "<", ">", "<=", ">="}) {
        if (is_op(candidate)) op = candidate;
      }
      if (!op.empty()) {
        next();
      } else if (is_name("in")) {
        next();
        op = "in";
      } else if (is_name("not") && is_name("in", 1)) {
        pos_ += 2;
        op = "not in";
      } else {
        return left;
      }
      left = binary(op, std::move(left), parse_add(), offset);
    }
  }

  ExprPtr parse_add() {
    ExprPtr left = parse_concat();
    while (is_op("+") || is_op("-")) {
      const Token& op = next();
      left = binary(op.text, std::move(left), parse_concat(), op.offset);
    }
    return left;
  }

  ExprPtr parse_concat() {
    ExprPtr left = parse_multiply();
    while (is_op("~")) {
      const size_t offset = next().offset;
      left = binary("~", std::move(left), parse_multiply(), offset);
    }
    return left;
  }

  ExprPtr parse_multiply() {
    ExprPtr left = parse_power();
    while (is_op("*") || is_op("/") || is_op("//") || is_op("%")) {
      const Token& op = next();
      left = binary(op.text, std::move(left), parse_power(), op.offset);
    }
    return left;
  }

  ExprPtr parse_power() {
    ExprPtr left = parse_unary(true);
    while (is_op("**")) {
      const size_t offset = next().offset;
      left = binary("**", std::move(left), parse_unary(true), offset);
    }
    return left;
  }

  ExprPtr parse_unary(bool with_filters) {
    ExprPtr expr;
    if (is_op("-") || is_op("+")) {
      const Token& op = next();
      expr = make(Expr::Kind::kUnary, op.offset);
      expr->name = op.text;
      expr->a = parse_unary(false);
    } else {
      expr = parse_primary();
    }
    expr = parse_postfix(std::move(expr));
    return with_filters ? parse_filters(std::move(expr)) : std::move(expr);
  }

  ExprPtr parse_primary() {
    const Token& token = next();
    switch (token.kind) {
      case Kind::kName: {
        auto expr = make(Expr::Kind::kLiteral, token.offset);
        if (token.text == "true" || token.text == "True") {
          expr->value = Value::from(true);
        } else if (token.text == "false" || token.text == "False") {
          expr->value = Value::from(false);
        } else if (token.text == "none" || token.text == "None") {
          expr->value = Value::none();
        } else {
          expr->kind = Expr::Kind::kName;
          expr->name = token.text;
        }
        return expr;
      }
      case Kind::kString: {
        std::string text = token.text;
        while (peek().kind == Kind::kString) text += next().text;  // "a" "b" is "ab"
        auto expr = make(Expr::Kind::kLiteral, token.offset);
        expr->value = Value::from(std::move(text));
        return expr;
      }
      case Kind::kInt:
      case Kind::kFloat: {
        auto expr = make(Expr::Kind::kLiteral, token.offset);
        expr->value = token.kind == Kind::kInt ? Value::from(token.integer) : Value::from(token.number);
        return expr;
      }
      case Kind::kOperator:
        if (token.text == "(") {
          if (skip_op(")")) {
            auto empty = make(Expr::Kind::kList, token.offset);
            empty->negated = true;
            return empty;
          }
          ExprPtr inner = parse_tuple();
          expect_op(")");
          return inner;
        }
        if (token.text == "[") {
          auto list = make(Expr::Kind::kList, token.offset);
          while (!skip_op("]")) {
            list->args.push_back(parse_expression());
            if (!is_op("]")) expect_op(",");
          }
          return list;
        }
        if (token.text == "{") {
          auto dict = make(Expr::Kind::kDict, token.offset);
          while (!skip_op("}")) {
            dict->args.push_back(parse_expression());
            expect_op(":");
            dict->args2.push_back(parse_expression());
            if (!is_op("}")) expect_op(",");
          }
          return dict;
        }
        break;
      default:
        break;
    }
    fail_at(token.offset, "expected an expression, found " + describe(token));
  }

  ExprPtr parse_postfix(ExprPtr expr) {
    while (true) {
      if (is_op(".")) {
        const size_t offset = next().offset;
        auto attribute = make(Expr::Kind::kAttribute, offset);
        if (peek().kind == Kind::kInt) {
          attribute->kind = Expr::Kind::kItem;
          auto index = make(Expr::Kind::kLiteral, peek().offset);
          index->value = Value::from(next().integer);
          attribute->b = std::move(index);
        } else {
          attribute->name = expect_name();
        }
        attribute->a = std::move(expr);
        expr = std::move(attribute);
      } else if (is_op("[")) {
        expr = parse_subscript(std::move(expr));
      } else if (is_op("(")) {
        expr = parse_call(std::move(expr));
      } else {
        return expr;
      }
    }
  }

  ExprPtr parse_subscript(ExprPtr object) {
    const size_t offset = next().offset;  // [
    ExprPtr parts[3];
    int part = 0;
    bool is_slice = false;
    while (!is_op("]")) {
      if (skip_op(":")) {
        is_slice = true;
        if (++part > 2) fail_at(peek().offset, "a slice has at most three parts");
        continue;
      }
      if (parts[part]) expect_op("]");
      parts[part] = parse_expression();
    }
    next();  // ]
    auto expr = make(is_slice ? Expr::Kind::kSlice : Expr::Kind::kItem, offset);
    expr->a = std::move(object);
    expr->b = std::move(parts[0]);
    expr->c = std::move(parts[1]);
    expr->d = std::move(parts[2]);
    if (!is_slice && !expr->b) fail_at(offset, "empty subscript");
    return expr;
  }

  // Arguments in parentheses into `expr`'s args and kwargs.
  void parse_arguments(Expr& expr) {
    expect_op("(");
    while (!skip_op(")")) {
      if (is_op("*") || is_op("**")) fail_at(peek().offset, "'*args' and '**kwargs' in calls are not supported");
      if (peek().kind == Kind::kName && is_op("=", 1)) {
        std::string key = next().text;
        next();
        expr.kwargs.emplace_back(std::move(key), parse_expression());
      } else {
        if (!expr.kwargs.empty()) fail_at(peek().offset, "a positional argument follows a keyword argument");
        expr.args.push_back(parse_expression());
      }
      if (!is_op(")")) expect_op(",");
    }
  }

  ExprPtr parse_call(ExprPtr callee) {
    auto call = make(Expr::Kind::kCall, peek().offset);
    call->a = std::move(callee);
    parse_arguments(*call);
    return call;
  }

  ExprPtr parse_filters(ExprPtr expr) {
    while (true) {
      if (is_op("|")) {
        next();
        const Token& name = peek();
        auto filter = make(Expr::Kind::kFilter, name.offset);
        filter->name = expect_name();
        if (!is_known_filter(filter->name)) {
          fail_at(name.offset, cat("filter '", filter->name, "' is not supported"));
        }
        filter->a = std::move(expr);
        if (is_op("(")) parse_arguments(*filter);
        expr = std::move(filter);
      } else if (is_name("is")) {
        next();
        const bool negated = skip_name("not");
        const Token& name = peek();
        auto test = make(Expr::Kind::kTest, name.offset);
        test->negated = negated;
        test->name = expect_name();
        if (!is_known_test(test->name)) {
          fail_at(name.offset, cat("test '", test->name, "' is not supported"));
        }
        test->a = std::move(expr);
        if (is_op("(")) {
          parse_arguments(*test);
        } else if ((peek().kind == Kind::kString || peek().kind == Kind::kInt ||
                    peek().kind == Kind::kFloat || is_op("[") || is_op("{") ||
                    (peek().kind == Kind::kName && !is_name("else") && !is_name("or") &&
                     !is_name("and") && !is_name("if") && !is_name("in") && !is_name("not")))) {
          test->args.push_back(parse_postfix(parse_primary()));  // `x is divisibleby 3`
        }
        expr = std::move(test);
      } else if (is_op("(")) {
        expr = parse_call(std::move(expr));
      } else {
        return expr;
      }
    }
  }

  const std::vector<Token>& tokens_;
  std::string_view source_;
  const TemplateOptions& options_;
  size_t pos_ = 0;
};

}  // namespace

Body parse(const std::vector<Token>& tokens, std::string_view source,
           const TemplateOptions& options) {
  return Parser(tokens, source, options).parse_template();
}

}  // namespace onepass::model::jinja

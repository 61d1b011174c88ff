// The Jinja interpreter's parts: values with Python semantics, tokens, the syntax tree, and
// the entry points of lexer, parser and evaluator.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/jinja/jinja.h"

namespace onepass::model::jinja {

// ---------------------------------------------------------------------------------------
// Values

struct Value;
using List = std::vector<Value>;
struct Dict;
struct Stmt;

/// A macro or a global function; `macro` is null for the built-in functions.
struct Callable {
  std::string name;
  const Stmt* macro = nullptr;
};

struct Value {
  enum class Kind { kUndefined, kNone, kBool, kInt, kFloat, kString, kList, kDict, kCallable };
  Kind kind = Kind::kUndefined;
  bool boolean = false;
  int64_t integer = 0;
  double number = 0.0;
  std::string text;  ///< a string's contents; for Undefined, the name that was missing
  std::shared_ptr<List> list;
  std::shared_ptr<Dict> dict;
  std::shared_ptr<Callable> callable;
  bool is_tuple = false;  ///< a list written (a, b) or made by items(): prints as a tuple

  static Value undefined(std::string name = {});
  static Value none();
  static Value from(bool b);
  static Value from(int64_t i);
  static Value from(double d);
  static Value from(std::string s);
  static Value from(List items);
  static Value from(Dict items);

  bool is(Kind k) const { return kind == k; }
  bool is_number() const { return kind == Kind::kInt || kind == Kind::kFloat || kind == Kind::kBool; }
  double as_double() const;
};

/// An insertion-ordered mapping with string keys; a namespace() object is one that allows
/// attribute assignment.
struct Dict {
  std::vector<std::pair<std::string, Value>> items;
  bool is_namespace = false;

  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value value);
};

bool truthy(const Value& v);
/// Python's str(): what {{ v }} prints.
std::string to_str(const Value& v);
/// Python's repr(), used for strings inside printed lists and dicts.
std::string repr(const Value& v);
bool equals(const Value& a, const Value& b);
std::string type_name(const Value& v);
/// json.dumps(v, ensure_ascii=False, indent=indent) as transformers' tojson filter does;
/// indent < 0 means none. Throws BuiltinError for values JSON cannot hold.
std::string to_json(const Value& v, int indent);
Value from_json(const Json& json);

/// Strings are UTF-8; Jinja counts, indexes and slices them by code point.
std::vector<std::string> code_points(std::string_view text);

// ---------------------------------------------------------------------------------------
// Tokens

struct Token {
  enum class Kind {
    kText,         ///< template text between tags (already whitespace-trimmed)
    kOutputBegin,  ///< {{
    kOutputEnd,    ///< }}
    kStmtBegin,    ///< {%
    kStmtEnd,      ///< %}
    kName,
    kString,
    kInt,
    kFloat,
    kOperator,
    kEnd,
  };
  Kind kind = Kind::kEnd;
  std::string text;  ///< text, name, string contents or operator
  int64_t integer = 0;
  double number = 0.0;
  size_t offset = 0;  ///< byte offset in the source, for error positions
};

std::vector<Token> lex(std::string_view source, const TemplateOptions& options);

/// "line L, column C" of a byte offset.
std::string position(std::string_view source, size_t offset);

// ---------------------------------------------------------------------------------------
// Syntax tree

struct Expr;
using ExprPtr = std::unique_ptr<Expr>;

struct Expr {
  enum class Kind {
    kLiteral,    ///< value
    kName,       ///< name
    kList,       ///< args; a tuple when `negated` is set (it prints as one)
    kDict,       ///< kwargs: key expressions in args, values in args2 (same order)
    kAttribute,  ///< a.name
    kItem,       ///< a[b]
    kSlice,      ///< a[b:c:d]; absent parts are null
    kCall,       ///< a(args, kwargs)
    kFilter,     ///< a | name(args, kwargs)
    kTest,       ///< a is [not] name(args)
    kUnary,      ///< name is "not" or "-" or "+": a
    kBinary,     ///< a name b
    kCondition,  ///< b if a else c
    kBlockValue, ///< the rendered body of a filter block or a set block with filters
  };
  Kind kind = Kind::kLiteral;
  size_t offset = 0;
  Value value;
  std::string name;
  bool negated = false;
  ExprPtr a, b, c, d;
  std::vector<ExprPtr> args;
  std::vector<ExprPtr> args2;
  std::vector<std::pair<std::string, ExprPtr>> kwargs;
};

using StmtPtr = std::unique_ptr<Stmt>;
using Body = std::vector<StmtPtr>;

struct Stmt {
  enum class Kind {
    kText,      ///< text
    kOutput,    ///< {{ expr }}
    kIf,        ///< conditions[i] -> bodies[i]; a final else body has no condition
    kFor,       ///< for targets in expr [if filter]: bodies[0], else bodies[1]
    kSet,       ///< set targets (or target.attribute) = expr, or set target %}bodies[0]
    kMacro,     ///< macro name(params): bodies[0]
    kBreak,
    kContinue,
    kBlock,     ///< a body rendered as is ({% generation %})
    kFilterBlock,  ///< filter chain: `filter` applied to bodies[0] rendered (kBlockValue)
    kCallBlock,    ///< call(params) expr: the macro call `expr` with `caller` = bodies[0]
  };
  Kind kind = Kind::kText;
  size_t offset = 0;
  std::string text;
  ExprPtr expr;
  ExprPtr filter;  ///< for: the loop filter; set block and filter block: the filter chain
  std::vector<std::string> targets;
  std::string attribute;
  std::vector<ExprPtr> conditions;
  std::vector<Body> bodies;
  std::vector<std::pair<std::string, ExprPtr>> params;
};

Body parse(const std::vector<Token>& tokens, std::string_view source,
           const TemplateOptions& options);

// ---------------------------------------------------------------------------------------
// Evaluation

struct Template::Program {
  std::string source;
  TemplateOptions options;
  Body body;
};

std::string evaluate(const Template::Program& program, const Json& variables);

/// The built-in filters, tests and global functions, checked by the parser.
bool is_known_filter(std::string_view name);
bool is_known_test(std::string_view name);
bool is_global_function(std::string_view name);

/// Positional and keyword arguments of a filter, method or built-in call.
struct Arguments {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;

  /// The argument at `index` or named `name`, or `fallback`.
  Value get(size_t index, std::string_view name, Value fallback = Value::undefined()) const;
};

/// The evaluator's hooks for the built-ins: a test applied by name (select/selectattr use
/// them) and the error of a built-in, raised at the position of the call.
class Builtins {
 public:
  virtual ~Builtins() = default;
  virtual bool test(const Value& value, std::string_view name, const Arguments& args) = 0;
  virtual Value filter(const Value& value, std::string_view name, const Arguments& args) = 0;
};

Value apply_filter(Builtins& env, const Value& value, std::string_view name,
                   const Arguments& args);
bool apply_test(Builtins& env, const Value& value, std::string_view name, const Arguments& args);
/// `object.name(args)`; sets `found` to false when the type has no such method.
Value call_method(const Value& object, std::string_view name, const Arguments& args,
                  bool& found);
Value call_global(std::string_view name, const Arguments& args);

/// A failure inside a built-in; the evaluator adds the template position.
struct BuiltinError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

}  // namespace onepass::model::jinja

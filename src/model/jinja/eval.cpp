// Renders a parsed template: scopes as Jinja has them (a for loop's body and a macro's body
// are their own scope; if does not open one), Python arithmetic and comparisons, and every
// failure reported with the template position of the expression that caused it.
#include <cmath>
#include <unordered_map>

#include "model/jinja/jinja_internal.h"
#include "onepass/core/error.h"

namespace onepass::model::jinja {
namespace {

using VK = Value::Kind;

struct Scope {
  std::unordered_map<std::string, Value> variables;
  Scope* parent = nullptr;
};

enum class Flow { kNormal, kBreak, kContinue };

// Python's floor division and modulo, whose results take the divisor's sign.
int64_t floor_div(int64_t a, int64_t b) {
  const int64_t q = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}

// Python's index normalisation for a slice bound (None means the end for the step's sign).
int64_t slice_bound(const Value& bound, int64_t length, int64_t step, bool is_start) {
  if (!bound.is(VK::kInt) && !bound.is(VK::kBool)) {
    if (step > 0) return is_start ? 0 : length;
    return is_start ? length - 1 : -1;
  }
  int64_t index = bound.is(VK::kBool) ? bound.boolean : bound.integer;
  if (index < 0) index += length;
  if (step > 0) return std::clamp<int64_t>(index, 0, length);
  return std::clamp<int64_t>(index, -1, length - 1);
}

class Evaluator final : public Builtins {
 public:
  Evaluator(const Template::Program& program, std::string& out) : program_(program), out_(out) {}

  void run(const Json& variables) {
    Scope root;
    if (!variables.is_null()) {
      if (!variables.is_object()) fail(program_.options.name, "the template variables must be a JSON object");
      for (const auto& [key, value] : variables.items()) root.variables[key] = from_json(value);
    }
    root_ = &root;
    exec_body(program_.body, root);
  }

  bool test(const Value& value, std::string_view name, const Arguments& args) override {
    return apply_test(*this, value, name, args);
  }
  Value filter(const Value& value, std::string_view name, const Arguments& args) override {
    return apply_filter(*this, value, name, args);
  }

 private:
  [[noreturn]] void fail_at(size_t offset, const std::string& what) const {
    fail(program_.options.name, position(program_.source, offset), ": ", what);
  }

  static Value lookup(const Scope& scope, const std::string& name) {
    for (const Scope* s = &scope; s != nullptr; s = s->parent) {
      const auto it = s->variables.find(name);
      if (it != s->variables.end()) return it->second;
    }
    if (is_global_function(name)) {
      Value v;
      v.kind = VK::kCallable;
      v.callable = std::make_shared<Callable>(Callable{name, nullptr});
      return v;
    }
    return Value::undefined(name);
  }

  Flow exec_body(const Body& body, Scope& scope) {
    for (const StmtPtr& stmt : body) {
      const Flow flow = exec(*stmt, scope);
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  Flow exec(const Stmt& stmt, Scope& scope) {
    switch (stmt.kind) {
      case Stmt::Kind::kText:
        out_ += stmt.text;
        return Flow::kNormal;
      case Stmt::Kind::kOutput:
        out_ += to_str(eval(*stmt.expr, scope));
        return Flow::kNormal;
      case Stmt::Kind::kIf:
        for (size_t i = 0; i < stmt.bodies.size(); ++i) {
          if (i >= stmt.conditions.size() || truthy(eval(*stmt.conditions[i], scope))) {
            return exec_body(stmt.bodies[i], scope);
          }
        }
        return Flow::kNormal;
      case Stmt::Kind::kFor:
        exec_for(stmt, scope);
        return Flow::kNormal;
      case Stmt::Kind::kSet:
        exec_set(stmt, scope);
        return Flow::kNormal;
      case Stmt::Kind::kMacro: {
        Value v;
        v.kind = VK::kCallable;
        v.callable = std::make_shared<Callable>(Callable{stmt.text, &stmt});
        scope.variables[stmt.text] = std::move(v);
        return Flow::kNormal;
      }
      case Stmt::Kind::kBreak:
        return Flow::kBreak;
      case Stmt::Kind::kContinue:
        return Flow::kContinue;
      case Stmt::Kind::kBlock:
        return exec_body(stmt.bodies[0], scope);
      case Stmt::Kind::kFilterBlock: {
        Value body = Value::from(render(stmt.bodies[0], scope));
        out_ += to_str(filtered(*stmt.filter, std::move(body), scope));
        return Flow::kNormal;
      }
      case Stmt::Kind::kCallBlock: {
        // The called macro finds `caller` in its scope; the caller's body runs in this scope.
        Value caller;
        caller.kind = VK::kCallable;
        caller.callable = std::make_shared<Callable>(Callable{"caller", &stmt});
        call_blocks_.push_back({&stmt, &scope, stmt.expr.get(), caller});
        const Value result = eval(*stmt.expr, scope);
        call_blocks_.pop_back();
        out_ += to_str(result);
        return Flow::kNormal;
      }
    }
    return Flow::kNormal;
  }

  List iterate(const Value& value, size_t offset) const {
    switch (value.kind) {
      case VK::kUndefined:
        return {};  // Jinja's default Undefined iterates as empty
      case VK::kList:
        return *value.list;
      case VK::kDict: {
        List keys;
        for (const auto& item : value.dict->items) keys.push_back(Value::from(item.first));
        return keys;
      }
      case VK::kString: {
        List chars;
        for (std::string& c : code_points(value.text)) chars.push_back(Value::from(std::move(c)));
        return chars;
      }
      default:
        fail_at(offset, cat("'", type_name(value), "' object is not iterable"));
    }
  }

  void bind(Scope& scope, const std::vector<std::string>& targets, const Value& value,
            size_t offset) const {
    if (targets.size() == 1) {
      scope.variables[targets[0]] = value;
      return;
    }
    const List items = iterate(value, offset);
    if (items.size() != targets.size()) {
      fail_at(offset, cat("cannot unpack ", items.size(), " values into ", targets.size(),
                          " variables"));
    }
    for (size_t i = 0; i < targets.size(); ++i) scope.variables[targets[i]] = items[i];
  }

  void exec_for(const Stmt& stmt, Scope& scope) {
    List items = iterate(eval(*stmt.expr, scope), stmt.expr->offset);
    if (stmt.filter) {
      List kept;
      for (const Value& item : items) {
        Scope probe{{}, &scope};
        bind(probe, stmt.targets, item, stmt.offset);
        if (truthy(eval(*stmt.filter, probe))) kept.push_back(item);
      }
      items = std::move(kept);
    }
    if (items.empty()) {
      if (stmt.bodies.size() > 1) {
        Scope body_scope{{}, &scope};
        exec_body(stmt.bodies[1], body_scope);
      }
      return;
    }
    const auto length = static_cast<int64_t>(items.size());
    for (int64_t i = 0; i < length; ++i) {
      // A fresh scope each iteration: `set` inside a loop does not outlive the iteration.
      Scope body_scope{{}, &scope};
      Dict loop;
      loop.items = {{"index0", Value::from(i)},
                    {"index", Value::from(i + 1)},
                    {"revindex0", Value::from(length - i - 1)},
                    {"revindex", Value::from(length - i)},
                    {"first", Value::from(i == 0)},
                    {"last", Value::from(i == length - 1)},
                    {"length", Value::from(length)},
                    {"depth", Value::from(int64_t{1})},
                    {"depth0", Value::from(int64_t{0})},
                    {"previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value::undefined("previtem")},
                    {"nextitem", i + 1 < length ? items[static_cast<size_t>(i + 1)] : Value::undefined("nextitem")}};
      body_scope.variables["loop"] = Value::from(std::move(loop));
      bind(body_scope, stmt.targets, items[static_cast<size_t>(i)], stmt.offset);
      if (exec_body(stmt.bodies[0], body_scope) == Flow::kBreak) break;
    }
  }

  void exec_set(const Stmt& stmt, Scope& scope) {
    Value value;
    if (stmt.expr) {
      value = eval(*stmt.expr, scope);
    } else {
      std::string captured;
      std::swap(captured, out_);
      exec_body(stmt.bodies[0], scope);
      std::swap(captured, out_);
      value = Value::from(std::move(captured));
      if (stmt.filter) value = filtered(*stmt.filter, std::move(value), scope);
    }
    if (stmt.attribute.empty()) {
      bind(scope, stmt.targets, value, stmt.offset);
      return;
    }
    const Value object = lookup(scope, stmt.targets[0]);
    if (!object.is(VK::kDict) || !object.dict->is_namespace) {
      fail_at(stmt.offset, cat("cannot assign attribute '", stmt.attribute, "' of '",
                               stmt.targets[0], "', which is not a namespace()"));
    }
    object.dict->set(stmt.attribute, std::move(value));
  }

  // The filter chain of a filter block or set block applied to its rendered body.
  Value filtered(const Expr& chain, Value body, Scope& scope) {
    std::swap(block_value_, body);
    Value result = eval(chain, scope);
    std::swap(block_value_, body);
    return result;
  }

  std::string render(const Body& body, Scope& scope) {
    std::string captured;
    std::swap(captured, out_);
    exec_body(body, scope);
    std::swap(captured, out_);
    return captured;
  }

  // ---------------------------------------------------------------------------------------
  // Expressions

  Value eval(const Expr& expr, Scope& scope) {
    switch (expr.kind) {
      case Expr::Kind::kLiteral:
        return expr.value;
      case Expr::Kind::kName:
        return lookup(scope, expr.name);
      case Expr::Kind::kList: {
        List items;
        for (const ExprPtr& item : expr.args) items.push_back(eval(*item, scope));
        Value list = Value::from(std::move(items));
        list.is_tuple = expr.negated;
        return list;
      }
      case Expr::Kind::kDict: {
        Dict dict;
        for (size_t i = 0; i < expr.args.size(); ++i) {
          const Value key = eval(*expr.args[i], scope);
          if (!key.is(VK::kString)) fail_at(expr.args[i]->offset, "dictionary keys other than strings are not supported");
          dict.set(key.text, eval(*expr.args2[i], scope));
        }
        return Value::from(std::move(dict));
      }
      case Expr::Kind::kAttribute: {
        const Value object = eval(*expr.a, scope);
        check_defined(object, expr.a->offset);
        if (object.is(VK::kDict)) {
          if (const Value* found = object.dict->find(expr.name)) return *found;
        }
        return Value::undefined(expr.name);
      }
      case Expr::Kind::kItem:
        return item(eval(*expr.a, scope), eval(*expr.b, scope), expr);
      case Expr::Kind::kSlice:
        return slice(expr, scope);
      case Expr::Kind::kCall:
        return call(expr, scope);
      case Expr::Kind::kFilter: {
        const Value value = eval(*expr.a, scope);
        const Arguments args = arguments(expr, scope);
        try {
          return apply_filter(*this, value, expr.name, args);
        } catch (const BuiltinError& e) {
          fail_at(expr.offset, cat("filter '", expr.name, "': ", e.what()));
        }
      }
      case Expr::Kind::kTest: {
        const Value value = eval(*expr.a, scope);
        const Arguments args = arguments(expr, scope);
        try {
          return Value::from(apply_test(*this, value, expr.name, args) != expr.negated);
        } catch (const BuiltinError& e) {
          fail_at(expr.offset, cat("test '", expr.name, "': ", e.what()));
        }
      }
      case Expr::Kind::kUnary: {
        const Value value = eval(*expr.a, scope);
        if (expr.name == "not") return Value::from(!truthy(value));
        if (value.is(VK::kFloat)) return Value::from(expr.name == "-" ? -value.number : value.number);
        if (value.is(VK::kInt) || value.is(VK::kBool)) {
          const int64_t i = value.is(VK::kBool) ? value.boolean : value.integer;
          return Value::from(expr.name == "-" ? -i : i);
        }
        fail_at(expr.offset, cat("bad operand type for unary ", expr.name, ": '", type_name(value), "'"));
      }
      case Expr::Kind::kBinary:
        return binary(expr, scope);
      case Expr::Kind::kCondition:
        if (truthy(eval(*expr.a, scope))) return eval(*expr.b, scope);
        return expr.c ? eval(*expr.c, scope) : Value::undefined();
      case Expr::Kind::kBlockValue:
        return block_value_;
    }
    return Value::undefined();
  }

  void check_defined(const Value& value, size_t offset) const {
    if (value.is(VK::kUndefined)) {
      fail_at(offset, value.text.empty() ? std::string("the value is undefined")
                                         : cat("'", value.text, "' is undefined"));
    }
  }

  Value item(const Value& object, const Value& key, const Expr& expr) const {
    check_defined(object, expr.a->offset);
    if (object.is(VK::kDict)) {
      if (key.is(VK::kString)) {
        if (const Value* found = object.dict->find(key.text)) return *found;
      }
      return Value::undefined(to_str(key));
    }
    if (object.is(VK::kList) || object.is(VK::kString)) {
      if (!key.is(VK::kInt)) return Value::undefined(to_str(key));
      std::vector<std::string> chars;
      if (object.is(VK::kString)) chars = code_points(object.text);
      const auto length = static_cast<int64_t>(object.is(VK::kList) ? object.list->size() : chars.size());
      const int64_t index = key.integer < 0 ? key.integer + length : key.integer;
      if (index < 0 || index >= length) return Value::undefined(to_str(key));
      if (object.is(VK::kList)) return (*object.list)[static_cast<size_t>(index)];
      return Value::from(chars[static_cast<size_t>(index)]);
    }
    return Value::undefined(to_str(key));
  }

  Value slice(const Expr& expr, Scope& scope) {
    const Value object = eval(*expr.a, scope);
    check_defined(object, expr.a->offset);
    const Value start = expr.b ? eval(*expr.b, scope) : Value::none();
    const Value stop = expr.c ? eval(*expr.c, scope) : Value::none();
    const Value step_value = expr.d ? eval(*expr.d, scope) : Value::none();
    const int64_t step = step_value.is(VK::kInt) ? step_value.integer : 1;
    if (step == 0) fail_at(expr.offset, "slice step cannot be zero");
    std::vector<std::string> chars;
    if (object.is(VK::kString)) {
      chars = code_points(object.text);
    } else if (!object.is(VK::kList)) {
      fail_at(expr.offset, cat("'", type_name(object), "' object cannot be sliced"));
    }
    const auto length = static_cast<int64_t>(object.is(VK::kList) ? object.list->size() : chars.size());
    const int64_t begin = slice_bound(start, length, step, true);
    const int64_t end = slice_bound(stop, length, step, false);
    List items;
    std::string text;
    for (int64_t i = begin; step > 0 ? i < end : i > end; i += step) {
      if (object.is(VK::kList)) {
        items.push_back((*object.list)[static_cast<size_t>(i)]);
      } else {
        text += chars[static_cast<size_t>(i)];
      }
    }
    return object.is(VK::kList) ? Value::from(std::move(items)) : Value::from(std::move(text));
  }

  Arguments arguments(const Expr& expr, Scope& scope) {
    Arguments args;
    for (const ExprPtr& arg : expr.args) args.positional.push_back(eval(*arg, scope));
    for (const auto& [key, arg] : expr.kwargs) args.keyword.emplace_back(key, eval(*arg, scope));
    return args;
  }

  Value call(const Expr& expr, Scope& scope) {
    const Expr& callee = *expr.a;
    if (callee.kind == Expr::Kind::kAttribute) {
      const Value object = eval(*callee.a, scope);
      check_defined(object, callee.a->offset);
      const Arguments args = arguments(expr, scope);
      bool found = true;
      try {
        Value result = call_method(object, callee.name, args, found);
        if (found) return result;
      } catch (const BuiltinError& e) {
        fail_at(callee.offset, cat("method '", callee.name, "': ", e.what()));
      }
      // Not a method: a callable stored in a dict (rare), else an error naming the method.
      if (object.is(VK::kDict)) {
        if (const Value* stored = object.dict->find(callee.name); stored && stored->is(VK::kCallable)) {
          return invoke(*stored, args, expr);
        }
      }
      fail_at(callee.offset, cat("method '", callee.name, "' of '", type_name(object),
                                 "' is not supported"));
    }
    const Value function = eval(callee, scope);
    if (function.is(VK::kUndefined)) {
      fail_at(callee.offset, cat("'", function.text.empty() ? "the value" : function.text,
                                 "' is undefined and cannot be called"));
    }
    if (!function.is(VK::kCallable)) {
      fail_at(callee.offset, cat("'", type_name(function), "' object is not callable"));
    }
    return invoke(function, arguments(expr, scope), expr);
  }

  Value invoke(const Value& function, const Arguments& args, const Expr& expr) {
    const Callable& callable = *function.callable;
    if (callable.macro == nullptr) {
      if (callable.name == "raise_exception") {
        fail_at(expr.a->offset, cat("raise_exception: ", to_str(args.get(0, "message"))));
      }
      try {
        return call_global(callable.name, args);
      } catch (const BuiltinError& e) {
        fail_at(expr.a->offset, cat(callable.name, "(): ", e.what()));
      }
    }
    const Stmt& macro = *callable.macro;
    if (args.positional.size() > macro.params.size()) {
      fail_at(expr.a->offset, cat("macro '", macro.text, "' takes ", macro.params.size(),
                               " arguments, not ", args.positional.size()));
    }
    // A call block's body (caller()) sees the scope of the call block; a macro, the globals.
    Scope* parent = root_;
    if (macro.kind == Stmt::Kind::kCallBlock) {
      for (auto it = call_blocks_.rbegin(); it != call_blocks_.rend(); ++it) {
        if (it->stmt == &macro) {
          parent = it->scope;
          break;
        }
      }
    }
    Scope macro_scope{{}, parent};
    if (!call_blocks_.empty() && call_blocks_.back().call == &expr) {
      macro_scope.variables["caller"] = call_blocks_.back().caller;
    }
    for (size_t i = 0; i < macro.params.size(); ++i) {
      const auto& [name, fallback] = macro.params[i];
      Value value = args.get(i, name);
      if (value.is(VK::kUndefined) && fallback) value = eval(*fallback, macro_scope);
      macro_scope.variables[name] = value.is(VK::kUndefined) ? Value::undefined(name) : value;
    }
    for (const auto& [key, value] : args.keyword) {
      bool known = false;
      for (const auto& param : macro.params) known = known || param.first == key;
      if (!known) fail_at(expr.a->offset, cat("macro '", macro.text, "' has no parameter '", key, "'"));
    }
    std::string rendered;
    std::swap(rendered, out_);
    exec_body(macro.bodies[0], macro_scope);
    std::swap(rendered, out_);
    return Value::from(std::move(rendered));
  }

  Value binary(const Expr& expr, Scope& scope) {
    const std::string& op = expr.name;
    const Value left = eval(*expr.a, scope);
    if (op == "and") return truthy(left) ? eval(*expr.b, scope) : left;
    if (op == "or") return truthy(left) ? left : eval(*expr.b, scope);
    const Value right = eval(*expr.b, scope);
    if (op == "~") return Value::from(to_str(left) + to_str(right));
    if (op == "==") return Value::from(equals(left, right));
    if (op == "!=") return Value::from(!equals(left, right));
    if (op == "in" || op == "not in") return Value::from(contains(right, left, expr) == (op == "in"));
    for (const Value* operand : {&left, &right}) {
      if (operand->is(VK::kUndefined)) check_defined(*operand, (operand == &left ? expr.a : expr.b)->offset);
    }
    if (op == "<" || op == ">" || op == "<=" || op == ">=") {
      int order = 0;
      if (left.is_number() && right.is_number()) {
        order = left.as_double() < right.as_double() ? -1 : left.as_double() > right.as_double() ? 1 : 0;
      } else if (left.is(VK::kString) && right.is(VK::kString)) {
        order = left.text.compare(right.text);
      } else {
        fail_at(expr.offset, cat("'", op, "' not supported between '", type_name(left), "' and '",
                                 type_name(right), "'"));
      }
      if (op == "<") return Value::from(order < 0);
      if (op == ">") return Value::from(order > 0);
      if (op == "<=") return Value::from(order <= 0);
      return Value::from(order >= 0);
    }
    if (op == "+" && left.is(VK::kString) && right.is(VK::kString)) return Value::from(left.text + right.text);
    if (op == "+" && left.is(VK::kList) && right.is(VK::kList)) {
      List items = *left.list;
      items.insert(items.end(), right.list->begin(), right.list->end());
      return Value::from(std::move(items));
    }
    if (op == "*" && left.is(VK::kString) && right.is(VK::kInt)) {
      std::string text;
      for (int64_t i = 0; i < right.integer; ++i) text += left.text;
      return Value::from(std::move(text));
    }
    if (!left.is_number() || !right.is_number()) {
      fail_at(expr.offset, cat("unsupported operand types for ", op, ": '", type_name(left),
                               "' and '", type_name(right), "'"));
    }
    const bool floating = left.is(VK::kFloat) || right.is(VK::kFloat) || op == "/";
    if (floating) {
      const double x = left.as_double();
      const double y = right.as_double();
      if ((op == "/" || op == "//" || op == "%") && y == 0.0) fail_at(expr.offset, "division by zero");
      if (op == "+") return Value::from(x + y);
      if (op == "-") return Value::from(x - y);
      if (op == "*") return Value::from(x * y);
      if (op == "/") return Value::from(x / y);
      if (op == "//") return Value::from(std::floor(x / y));
      if (op == "%") {
        const double r = std::fmod(x, y);
        return Value::from(r != 0.0 && ((r < 0) != (y < 0)) ? r + y : r);
      }
      return Value::from(std::pow(x, y));
    }
    const int64_t x = left.is(VK::kBool) ? left.boolean : left.integer;
    const int64_t y = right.is(VK::kBool) ? right.boolean : right.integer;
    if ((op == "//" || op == "%") && y == 0) fail_at(expr.offset, "integer division or modulo by zero");
    if (op == "+") return Value::from(x + y);
    if (op == "-") return Value::from(x - y);
    if (op == "*") return Value::from(x * y);
    if (op == "//") return Value::from(floor_div(x, y));
    if (op == "%") return Value::from(x - floor_div(x, y) * y);
    if (y < 0) return Value::from(std::pow(static_cast<double>(x), static_cast<double>(y)));
    int64_t power = 1;
    for (int64_t i = 0; i < y; ++i) power *= x;
    return Value::from(power);
  }

  bool contains(const Value& container, const Value& needle, const Expr& expr) const {
    switch (container.kind) {
      case VK::kString:
        if (!needle.is(VK::kString)) {
          fail_at(expr.offset, cat("'in <string>' requires a string as left operand, not '",
                                   type_name(needle), "'"));
        }
        return container.text.find(needle.text) != std::string::npos;
      case VK::kList:
        for (const Value& item : *container.list) {
          if (equals(item, needle)) return true;
        }
        return false;
      case VK::kDict:
        return needle.is(VK::kString) && container.dict->find(needle.text) != nullptr;
      case VK::kUndefined:
        return false;
      default:
        fail_at(expr.offset, cat("argument of type '", type_name(container), "' is not iterable"));
    }
  }

  const Template::Program& program_;
  std::string& out_;
  Scope* root_ = nullptr;
  Value block_value_;  // the body of the filter block or set block being filtered
  // Call blocks being evaluated, innermost last: the block, its scope, its macro call and
  // the `caller` it passes.
  struct CallBlock {
    const Stmt* stmt;
    Scope* scope;
    const Expr* call;
    Value caller;
  };
  std::vector<CallBlock> call_blocks_;
};

}  // namespace

Value Arguments::get(size_t index, std::string_view name, Value fallback) const {
  if (index < positional.size()) return positional[index];
  for (const auto& [key, value] : keyword) {
    if (key == name) return value;
  }
  return fallback;
}

std::string evaluate(const Template::Program& program, const Json& variables) {
  std::string out;
  Evaluator(program, out).run(variables);
  return out;
}

// ---------------------------------------------------------------------------------------
// Template

Template::Template(std::string_view source, TemplateOptions options)
    : program_(std::make_unique<Program>()) {
  // Jinja reads \r\n and \r as \n and drops one trailing newline of the template.
  std::string text;
  text.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      text += '\n';
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      text += source[i];
    }
  }
  if (!text.empty() && text.back() == '\n') text.pop_back();
  program_->source = std::move(text);
  program_->options = std::move(options);
  program_->body = parse(lex(program_->source, program_->options), program_->source,
                         program_->options);
}

Template::~Template() = default;
Template::Template(Template&&) noexcept = default;
Template& Template::operator=(Template&&) noexcept = default;

std::string Template::render(const Json& variables) const { return evaluate(*program_, variables); }

}  // namespace onepass::model::jinja

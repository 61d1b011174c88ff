// Jinja values with the Python semantics the templates rely on: truthiness, str(), repr(),
// equality, json.dumps, and UTF-8 strings counted by code point.
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "model/jinja/jinja_internal.h"

namespace onepass::model::jinja {

Value Value::undefined(std::string name) {
  Value v;
  v.text = std::move(name);
  return v;
}

Value Value::none() {
  Value v;
  v.kind = Kind::kNone;
  return v;
}

Value Value::from(bool b) {
  Value v;
  v.kind = Kind::kBool;
  v.boolean = b;
  return v;
}

Value Value::from(int64_t i) {
  Value v;
  v.kind = Kind::kInt;
  v.integer = i;
  return v;
}

Value Value::from(double d) {
  Value v;
  v.kind = Kind::kFloat;
  v.number = d;
  return v;
}

Value Value::from(std::string s) {
  Value v;
  v.kind = Kind::kString;
  v.text = std::move(s);
  return v;
}

Value Value::from(List items) {
  Value v;
  v.kind = Kind::kList;
  v.list = std::make_shared<List>(std::move(items));
  return v;
}

Value Value::from(Dict items) {
  Value v;
  v.kind = Kind::kDict;
  v.dict = std::make_shared<Dict>(std::move(items));
  return v;
}

double Value::as_double() const {
  switch (kind) {
    case Kind::kBool:
      return boolean ? 1.0 : 0.0;
    case Kind::kInt:
      return static_cast<double>(integer);
    case Kind::kFloat:
      return number;
    default:
      return 0.0;
  }
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& [name, value] : items) {
    if (name == key) return &value;
  }
  return nullptr;
}

void Dict::set(const std::string& key, Value value) {
  for (auto& [name, existing] : items) {
    if (name == key) {
      existing = std::move(value);
      return;
    }
  }
  items.emplace_back(key, std::move(value));
}

bool truthy(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return false;
    case Value::Kind::kBool:
      return v.boolean;
    case Value::Kind::kInt:
      return v.integer != 0;
    case Value::Kind::kFloat:
      return v.number != 0.0;
    case Value::Kind::kString:
      return !v.text.empty();
    case Value::Kind::kList:
      return !v.list->empty();
    case Value::Kind::kDict:
      return v.dict->is_namespace || !v.dict->items.empty();
    case Value::Kind::kCallable:
      return true;
  }
  return false;
}

namespace {

// Python's float repr: the shortest round-trip digits, fixed notation for exponents in
// [-4, 16), scientific with a two-digit exponent otherwise.
std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d > 0 ? "inf" : "-inf";
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), d, std::chars_format::scientific);
  const std::string sci(buffer, result.ptr);
  const size_t e_pos = sci.find('e');
  std::string mantissa = sci.substr(0, e_pos);
  const int exponent = std::atoi(sci.c_str() + e_pos + 1);
  std::string sign;
  if (!mantissa.empty() && mantissa[0] == '-') {
    sign = "-";
    mantissa.erase(0, 1);
  }
  std::string digits;
  for (char c : mantissa) {
    if (c != '.') digits += c;
  }
  if (exponent >= -4 && exponent < 16) {
    std::string out;
    if (exponent < 0) {
      out = "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    } else if (static_cast<size_t>(exponent) + 1 >= digits.size()) {
      out = digits + std::string(static_cast<size_t>(exponent) + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(exponent) + 1) + "." +
            digits.substr(static_cast<size_t>(exponent) + 1);
    }
    return sign + out;
  }
  char exp_text[16];
  std::snprintf(exp_text, sizeof(exp_text), "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  return sign + mantissa + exp_text;
}

std::string string_repr(const std::string& s) {
  const bool has_single = s.find('\'') != std::string::npos;
  const bool has_double = s.find('"') != std::string::npos;
  const char quote = has_single && !has_double ? '"' : '\'';
  std::string out(1, quote);
  for (const char c : s) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c == quote) {
          out += '\\';
          out += c;
        } else if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          char hex[8];
          std::snprintf(hex, sizeof(hex), "\\x%02x", static_cast<unsigned char>(c));
          out += hex;
        } else {
          out += c;
        }
    }
  }
  return out + quote;
}

void json_string(const std::string& s, std::string& out) {
  out += '"';
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      case '\b':
        out += "\\b";
        break;
      case '\f':
        out += "\\f";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char hex[8];
          std::snprintf(hex, sizeof(hex), "\\u%04x", static_cast<unsigned char>(c));
          out += hex;
        } else {
          out += c;
        }
    }
  }
  out += '"';
}

void json_dump(const Value& v, int indent, int depth, std::string& out) {
  const auto newline = [&](int level) {
    out += '\n';
    out.append(static_cast<size_t>(indent * level), ' ');
  };
  switch (v.kind) {
    case Value::Kind::kNone:
      out += "null";
      return;
    case Value::Kind::kBool:
      out += v.boolean ? "true" : "false";
      return;
    case Value::Kind::kInt:
      out += std::to_string(v.integer);
      return;
    case Value::Kind::kFloat:
      if (std::isnan(v.number)) {
        out += "NaN";
      } else if (std::isinf(v.number)) {
        out += v.number > 0 ? "Infinity" : "-Infinity";
      } else {
        out += float_repr(v.number);
      }
      return;
    case Value::Kind::kString:
      json_string(v.text, out);
      return;
    case Value::Kind::kList: {
      if (v.list->empty()) {
        out += "[]";
        return;
      }
      out += '[';
      bool first = true;
      for (const Value& item : *v.list) {
        if (!first) out += indent >= 0 ? "," : ", ";
        first = false;
        if (indent >= 0) newline(depth + 1);
        json_dump(item, indent, depth + 1, out);
      }
      if (indent >= 0) newline(depth);
      out += ']';
      return;
    }
    case Value::Kind::kDict: {
      if (v.dict->items.empty()) {
        out += "{}";
        return;
      }
      out += '{';
      bool first = true;
      for (const auto& [key, item] : v.dict->items) {
        if (!first) out += indent >= 0 ? "," : ", ";
        first = false;
        if (indent >= 0) newline(depth + 1);
        json_string(key, out);
        out += ": ";
        json_dump(item, indent, depth + 1, out);
      }
      if (indent >= 0) newline(depth);
      out += '}';
      return;
    }
    case Value::Kind::kUndefined:
    case Value::Kind::kCallable:
      throw BuiltinError("Object of type " + type_name(v) + " is not JSON serializable");
  }
}

}  // namespace

std::string to_str(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kString:
      return v.text;
    default:
      return repr(v);
  }
}

std::string repr(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return "";
    case Value::Kind::kNone:
      return "None";
    case Value::Kind::kBool:
      return v.boolean ? "True" : "False";
    case Value::Kind::kInt:
      return std::to_string(v.integer);
    case Value::Kind::kFloat:
      return float_repr(v.number);
    case Value::Kind::kString:
      return string_repr(v.text);
    case Value::Kind::kList: {
      std::string out = v.is_tuple ? "(" : "[";
      for (size_t i = 0; i < v.list->size(); ++i) {
        if (i > 0) out += ", ";
        out += repr((*v.list)[i]);
      }
      if (v.is_tuple) return out + (v.list->size() == 1 ? ",)" : ")");
      return out + "]";
    }
    case Value::Kind::kDict: {
      if (v.dict->is_namespace) return "<Namespace>";
      std::string out = "{";
      bool first = true;
      for (const auto& [key, item] : v.dict->items) {
        if (!first) out += ", ";
        first = false;
        out += string_repr(key) + ": " + repr(item);
      }
      return out + "}";
    }
    case Value::Kind::kCallable:
      return "<function " + v.callable->name + ">";
  }
  return "";
}

bool equals(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.is(Value::Kind::kFloat) || b.is(Value::Kind::kFloat)) return a.as_double() == b.as_double();
    const int64_t x = a.is(Value::Kind::kBool) ? a.boolean : a.integer;
    const int64_t y = b.is(Value::Kind::kBool) ? b.boolean : b.integer;
    return x == y;
  }
  if (a.kind != b.kind) return false;
  switch (a.kind) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone:
      return true;
    case Value::Kind::kString:
      return a.text == b.text;
    case Value::Kind::kList:
      if (a.list->size() != b.list->size()) return false;
      for (size_t i = 0; i < a.list->size(); ++i) {
        if (!equals((*a.list)[i], (*b.list)[i])) return false;
      }
      return true;
    case Value::Kind::kDict:
      if (a.dict == b.dict) return true;
      if (a.dict->items.size() != b.dict->items.size()) return false;
      for (const auto& [key, item] : a.dict->items) {
        const Value* other = b.dict->find(key);
        if (other == nullptr || !equals(item, *other)) return false;
      }
      return true;
    case Value::Kind::kCallable:
      return a.callable == b.callable;
    default:
      return false;
  }
}

std::string type_name(const Value& v) {
  switch (v.kind) {
    case Value::Kind::kUndefined:
      return "Undefined";
    case Value::Kind::kNone:
      return "NoneType";
    case Value::Kind::kBool:
      return "bool";
    case Value::Kind::kInt:
      return "int";
    case Value::Kind::kFloat:
      return "float";
    case Value::Kind::kString:
      return "str";
    case Value::Kind::kList:
      return "list";
    case Value::Kind::kDict:
      return v.dict->is_namespace ? "Namespace" : "dict";
    case Value::Kind::kCallable:
      return "function";
  }
  return "?";
}

std::string to_json(const Value& v, int indent) {
  std::string out;
  json_dump(v, indent, 0, out);
  return out;
}

Value from_json(const Json& json) {
  switch (json.type()) {
    case Json::value_t::null:
      return Value::none();
    case Json::value_t::boolean:
      return Value::from(json.get<bool>());
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
      return Value::from(json.get<int64_t>());
    case Json::value_t::number_float:
      return Value::from(json.get<double>());
    case Json::value_t::string:
      return Value::from(json.get<std::string>());
    case Json::value_t::array: {
      List items;
      for (const Json& item : json) items.push_back(from_json(item));
      return Value::from(std::move(items));
    }
    case Json::value_t::object: {
      Dict dict;
      for (const auto& [key, item] : json.items()) dict.items.emplace_back(key, from_json(item));
      return Value::from(std::move(dict));
    }
    default:
      return Value::none();
  }
}

std::vector<std::string> code_points(std::string_view text) {
  std::vector<std::string> out;
  for (size_t i = 0; i < text.size();) {
    const auto lead = static_cast<unsigned char>(text[i]);
    size_t length = lead < 0x80 ? 1 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 1;
    length = std::min(length, text.size() - i);
    out.emplace_back(text.substr(i, length));
    i += length;
  }
  return out;
}

}  // namespace onepass::model::jinja

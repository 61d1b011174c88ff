// Jinja's built-in filters, tests and global functions, and the Python string, dict and list
// methods that chat templates call. Case mappings (upper, lower, title, capitalize) change
// ASCII letters only.
#include <algorithm>
#include <cctype>
#include <ctime>

#include "model/jinja/jinja_internal.h"

namespace onepass::model::jinja {
namespace {

using VK = Value::Kind;

constexpr std::string_view kFilters[] = {
    "abs",     "capitalize", "count",  "d",         "default", "dictsort", "first",  "float",
    "indent",  "int",        "items",  "join",      "last",    "length", "list",    "lower",
    "map",     "reject",     "rejectattr", "replace", "reverse", "safe", "select",  "selectattr",
    "sort",    "string",     "title",  "tojson",    "trim",    "unique", "upper"};
constexpr std::string_view kTests[] = {
    "boolean", "callable", "defined",  "divisibleby", "eq",      "equalto", "even",
    "false",   "float",    "ge",       "gt",          "in",      "integer", "iterable",
    "le",      "lower",    "lt",       "mapping",     "ne",      "none",    "number",
    "odd",     "sameas",   "sequence", "string",      "true",    "undefined", "upper"};
constexpr std::string_view kGlobals[] = {"range", "namespace", "dict", "raise_exception",
                                         "strftime_now"};

constexpr std::string_view kWhitespace = " \t\n\r\f\v";

std::string ascii_map(std::string text, int (*map)(int)) {
  for (char& c : text) {
    if (static_cast<unsigned char>(c) < 0x80) c = static_cast<char>(map(static_cast<unsigned char>(c)));
  }
  return text;
}

std::string capitalize(const std::string& text) {
  std::string out = ascii_map(text, [](int c) { return std::tolower(c); });
  if (!out.empty() && static_cast<unsigned char>(out[0]) < 0x80) {
    out[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(out[0])));
  }
  return out;
}

std::string title(const std::string& text) {
  std::string out = text;
  bool word_start = true;
  for (char& c : out) {
    const auto u = static_cast<unsigned char>(c);
    if (std::isalpha(u)) {
      c = static_cast<char>(word_start ? std::toupper(u) : std::tolower(u));
      word_start = false;
    } else {
      word_start = u < 0x80;  // a UTF-8 byte of a letter keeps the word going
    }
  }
  return out;
}

std::string strip(const std::string& text, const Value& chars, bool left, bool right) {
  const std::string set = chars.is(VK::kString) ? chars.text : std::string(kWhitespace);
  size_t begin = 0;
  size_t end = text.size();
  if (left) {
    while (begin < end && set.find(text[begin]) != std::string::npos) ++begin;
  }
  if (right) {
    while (end > begin && set.find(text[end - 1]) != std::string::npos) --end;
  }
  return text.substr(begin, end - begin);
}

std::string replace(const std::string& text, const std::string& from, const std::string& to,
                    int64_t count) {
  if (from.empty()) {
    if (count == 0) return text;
    std::string out = to;  // Python inserts `to` between every character
    int64_t done = 1;
    for (const std::string& c : code_points(text)) {
      out += c;
      if (count < 0 || done < count) {
        out += to;
        ++done;
      }
    }
    return out;
  }
  std::string out;
  size_t pos = 0;
  for (int64_t done = 0; count < 0 || done < count; ++done) {
    const size_t found = text.find(from, pos);
    if (found == std::string::npos) break;
    out.append(text, pos, found - pos).append(to);
    pos = found + from.size();
  }
  return out.append(text, pos);
}

Value split(const std::string& text, const Value& separator, int64_t max_split) {
  List parts;
  if (!separator.is(VK::kString)) {
    size_t pos = text.find_first_not_of(kWhitespace);
    while (pos != std::string::npos) {
      if (max_split >= 0 && static_cast<int64_t>(parts.size()) == max_split) {
        parts.push_back(Value::from(strip(text.substr(pos), Value::none(), false, true)));
        break;
      }
      const size_t end = std::min(text.find_first_of(kWhitespace, pos), text.size());
      parts.push_back(Value::from(text.substr(pos, end - pos)));
      pos = text.find_first_not_of(kWhitespace, end);
    }
    return Value::from(std::move(parts));
  }
  if (separator.text.empty()) throw BuiltinError("empty separator");
  size_t pos = 0;
  while (max_split < 0 || static_cast<int64_t>(parts.size()) < max_split) {
    const size_t found = text.find(separator.text, pos);
    if (found == std::string::npos) break;
    parts.push_back(Value::from(text.substr(pos, found - pos)));
    pos = found + separator.text.size();
  }
  parts.push_back(Value::from(text.substr(pos)));
  return Value::from(std::move(parts));
}

bool affix(const std::string& text, const Value& candidates, bool prefix) {
  const auto one = [&](const Value& v) {
    if (!v.is(VK::kString)) throw BuiltinError("expects a string or a list of strings");
    if (v.text.size() > text.size()) return false;
    return prefix ? text.compare(0, v.text.size(), v.text) == 0
                  : text.compare(text.size() - v.text.size(), v.text.size(), v.text) == 0;
  };
  if (candidates.is(VK::kList)) return std::any_of(candidates.list->begin(), candidates.list->end(), one);
  return one(candidates);
}

int64_t length(const Value& v) {
  switch (v.kind) {
    case VK::kUndefined:
      return 0;
    case VK::kString:
      return static_cast<int64_t>(code_points(v.text).size());
    case VK::kList:
      return static_cast<int64_t>(v.list->size());
    case VK::kDict:
      return static_cast<int64_t>(v.dict->items.size());
    default:
      throw BuiltinError("object of type '" + type_name(v) + "' has no len()");
  }
}

List items_of(const Value& v) {
  if (v.is(VK::kUndefined)) return {};
  if (!v.is(VK::kDict)) throw BuiltinError("expects a mapping, not '" + type_name(v) + "'");
  List items;
  for (const auto& [key, value] : v.dict->items) {
    items.push_back(Value::from(List{Value::from(key), value}));
    items.back().is_tuple = true;
  }
  return items;
}

List to_list(const Value& v) {
  switch (v.kind) {
    case VK::kUndefined:
      return {};
    case VK::kList:
      return *v.list;
    case VK::kDict: {
      List keys;
      for (const auto& item : v.dict->items) keys.push_back(Value::from(item.first));
      return keys;
    }
    case VK::kString: {
      List chars;
      for (std::string& c : code_points(v.text)) chars.push_back(Value::from(std::move(c)));
      return chars;
    }
    default:
      throw BuiltinError("'" + type_name(v) + "' object is not iterable");
  }
}

// Attribute or key `name` of `v` (dotted paths as in Jinja's attribute= arguments).
Value attribute(const Value& v, const std::string& path) {
  Value current = v;
  size_t pos = 0;
  while (pos <= path.size()) {
    const size_t dot = std::min(path.find('.', pos), path.size());
    const std::string part = path.substr(pos, dot - pos);
    if (current.is(VK::kDict)) {
      const Value* found = current.dict->find(part);
      current = found ? *found : Value::undefined(part);
    } else if (current.is(VK::kList) && !part.empty() &&
               std::all_of(part.begin(), part.end(), [](char c) { return std::isdigit(static_cast<unsigned char>(c)); })) {
      const size_t index = std::stoul(part);
      current = index < current.list->size() ? (*current.list)[index] : Value::undefined(part);
    } else {
      return Value::undefined(part);
    }
    pos = dot + 1;
  }
  return current;
}

int compare_values(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return a.as_double() < b.as_double() ? -1 : a.as_double() > b.as_double();
  if (a.is(VK::kString) && b.is(VK::kString)) return a.text.compare(b.text) < 0 ? -1 : a.text != b.text;
  throw BuiltinError("cannot order '" + type_name(a) + "' and '" + type_name(b) + "'");
}

// Ordering of sort and dictsort: strings compared case-folded (ASCII) unless case_sensitive.
int sort_order(const Value& a, const Value& b, bool case_sensitive) {
  if (!case_sensitive && a.is(VK::kString) && b.is(VK::kString)) {
    return compare_values(Value::from(ascii_map(a.text, [](int c) { return std::tolower(c); })),
                          Value::from(ascii_map(b.text, [](int c) { return std::tolower(c); })));
  }
  return compare_values(a, b);
}

// indent(width=4, first=False, blank=False): every line but the first (unless `first`) gets
// the indentation; empty lines only with `blank`. `width` may be a string to indent with.
std::string indent(const std::string& text, const Value& width, bool first, bool blank) {
  const int64_t spaces = width.is_number() ? static_cast<int64_t>(width.as_double()) : 4;
  const std::string pad =
      width.is(VK::kString) ? width.text : std::string(static_cast<size_t>(std::max<int64_t>(0, spaces)), ' ');
  // Python's splitlines of text + "\n" (as jinja2 does): lines end at \n, \r\n or \r.
  std::vector<std::string> lines;
  const std::string s = text + "\n";
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\n' || s[i] == '\r') {
      lines.push_back(s.substr(start, i - start));
      if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
      start = i + 1;
    }
  }
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i > 0) out += '\n';
    if (i == 0 ? first : (blank || !lines[i].empty())) out += pad;
    out += lines[i];
  }
  return out;
}

// select/reject(test, args...) and selectattr/rejectattr(attribute, test, args...).
Value select(Builtins& env, const Value& value, const Arguments& args, bool by_attribute, bool keep) {
  size_t next = 0;
  std::string path;
  if (by_attribute) {
    const Value name = args.get(next++, "attribute");
    if (!name.is(VK::kString)) throw BuiltinError("expects an attribute name");
    path = name.text;
  }
  const Value test = args.get(next++, "test");
  Arguments test_args;
  for (size_t i = next; i < args.positional.size(); ++i) test_args.positional.push_back(args.positional[i]);
  List out;
  for (const Value& item : to_list(value)) {
    const Value subject = by_attribute ? attribute(item, path) : item;
    const bool passed = test.is(VK::kString) ? env.test(subject, test.text, test_args) : truthy(subject);
    if (passed == keep) out.push_back(item);
  }
  return Value::from(std::move(out));
}

int64_t to_int(const Value& v, int64_t fallback) {
  if (v.is(VK::kInt)) return v.integer;
  if (v.is(VK::kBool)) return v.boolean;
  if (v.is(VK::kFloat)) return static_cast<int64_t>(v.number);
  if (v.is(VK::kString)) {
    try {
      size_t used = 0;
      const std::string text = strip(v.text, Value::none(), true, true);
      const int64_t i = std::stoll(text, &used);
      if (used == text.size()) return i;
      return static_cast<int64_t>(std::stod(text));
    } catch (const std::exception&) {
      return fallback;
    }
  }
  return fallback;
}

}  // namespace

bool is_known_filter(std::string_view name) {
  return std::find(std::begin(kFilters), std::end(kFilters), name) != std::end(kFilters);
}

bool is_known_test(std::string_view name) {
  return std::find(std::begin(kTests), std::end(kTests), name) != std::end(kTests);
}

bool is_global_function(std::string_view name) {
  return std::find(std::begin(kGlobals), std::end(kGlobals), name) != std::end(kGlobals);
}

Value apply_filter(Builtins& env, const Value& value, std::string_view name, const Arguments& args) {
  const auto text = [&] { return to_str(value); };
  if (name == "trim") return Value::from(strip(text(), args.get(0, "chars", Value::none()), true, true));
  if (name == "length" || name == "count") return Value::from(length(value));
  if (name == "upper") return Value::from(ascii_map(text(), [](int c) { return std::toupper(c); }));
  if (name == "lower") return Value::from(ascii_map(text(), [](int c) { return std::tolower(c); }));
  if (name == "capitalize") return Value::from(capitalize(text()));
  if (name == "title") return Value::from(title(text()));
  if (name == "string") return Value::from(text());
  if (name == "safe") return value;
  if (name == "tojson") {
    const Value indent = args.get(0, "indent", Value::none());
    return Value::from(to_json(value, indent.is(VK::kInt) ? static_cast<int>(indent.integer) : -1));
  }
  if (name == "default" || name == "d") {
    const bool boolean = truthy(args.get(1, "boolean", Value::from(false)));
    const bool use_default = boolean ? !truthy(value) : value.is(VK::kUndefined);
    return use_default ? args.get(0, "default_value", Value::from(std::string())) : value;
  }
  if (name == "join") {
    const std::string separator = to_str(args.get(0, "d", Value::from(std::string())));
    const Value path = args.get(1, "attribute", Value::none());
    std::string out;
    bool first = true;
    for (const Value& item : to_list(value)) {
      if (!first) out += separator;
      first = false;
      out += to_str(path.is(VK::kString) ? attribute(item, path.text) : item);
    }
    return Value::from(std::move(out));
  }
  if (name == "first" || name == "last") {
    const List items = to_list(value);
    if (items.empty()) return Value::undefined(std::string(name));
    return name == "first" ? items.front() : items.back();
  }
  if (name == "replace") {
    const Value count = args.get(2, "count", Value::none());
    return Value::from(replace(text(), to_str(args.get(0, "old")), to_str(args.get(1, "new")),
                               count.is(VK::kInt) ? count.integer : -1));
  }
  if (name == "int") return Value::from(to_int(value, to_int(args.get(0, "default", Value::from(int64_t{0})), 0)));
  if (name == "float") {
    if (value.is_number()) return Value::from(value.as_double());
    try {
      return Value::from(std::stod(to_str(value)));
    } catch (const std::exception&) {
      return args.get(0, "default", Value::from(0.0));
    }
  }
  if (name == "abs") {
    if (value.is(VK::kFloat)) return Value::from(std::abs(value.number));
    if (value.is(VK::kInt)) return Value::from(value.integer < 0 ? -value.integer : value.integer);
    throw BuiltinError("bad operand type '" + type_name(value) + "'");
  }
  if (name == "items") return Value::from(items_of(value));
  if (name == "list") return Value::from(to_list(value));
  if (name == "reverse") {
    if (value.is(VK::kString)) {
      std::vector<std::string> chars = code_points(value.text);
      std::string out;
      for (auto it = chars.rbegin(); it != chars.rend(); ++it) out += *it;
      return Value::from(std::move(out));
    }
    List items = to_list(value);
    std::reverse(items.begin(), items.end());
    return Value::from(std::move(items));
  }
  if (name == "sort") {
    const bool reverse = truthy(args.get(0, "reverse", Value::from(false)));
    const bool case_sensitive = truthy(args.get(1, "case_sensitive", Value::from(false)));
    const Value path = args.get(2, "attribute", Value::none());
    List items = to_list(value);
    auto key = [&](const Value& v) { return path.is(VK::kString) ? attribute(v, path.text) : v; };
    std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
      const int order = sort_order(key(a), key(b), case_sensitive);
      return reverse ? order > 0 : order < 0;
    });
    return Value::from(std::move(items));
  }
  if (name == "dictsort") {
    if (!value.is(VK::kDict)) throw BuiltinError("expects a mapping, got '" + type_name(value) + "'");
    const bool case_sensitive = truthy(args.get(0, "case_sensitive", Value::from(false)));
    const Value by = args.get(1, "by", Value::from(std::string("key")));
    const bool reverse = truthy(args.get(2, "reverse", Value::from(false)));
    if (!by.is(VK::kString) || (by.text != "key" && by.text != "value")) {
      throw BuiltinError("'by' must be 'key' or 'value'");
    }
    List items = items_of(value);
    const size_t part = by.text == "key" ? 0 : 1;
    std::stable_sort(items.begin(), items.end(), [&](const Value& a, const Value& b) {
      const int order = sort_order((*a.list)[part], (*b.list)[part], case_sensitive);
      return reverse ? order > 0 : order < 0;
    });
    return Value::from(std::move(items));
  }
  if (name == "indent") {
    return Value::from(indent(text(), args.get(0, "width", Value::from(int64_t{4})),
                              truthy(args.get(1, "first", Value::from(false))),
                              truthy(args.get(2, "blank", Value::from(false)))));
  }
  if (name == "unique") {
    List out;
    for (const Value& item : to_list(value)) {
      if (std::none_of(out.begin(), out.end(), [&](const Value& seen) { return equals(seen, item); })) {
        out.push_back(item);
      }
    }
    return Value::from(std::move(out));
  }
  if (name == "map") {
    const Value path = args.get(99, "attribute", Value::none());
    List out;
    if (path.is(VK::kString)) {
      const Value fallback = args.get(99, "default");
      for (const Value& item : to_list(value)) {
        Value v = attribute(item, path.text);
        out.push_back(v.is(VK::kUndefined) && !fallback.is(VK::kUndefined) ? fallback : v);
      }
      return Value::from(std::move(out));
    }
    const Value filter = args.get(0, "");
    if (!filter.is(VK::kString)) throw BuiltinError("expects attribute=NAME or a filter name");
    if (!is_known_filter(filter.text)) throw BuiltinError("filter '" + filter.text + "' is not supported");
    Arguments rest;
    rest.positional.assign(args.positional.begin() + 1, args.positional.end());
    for (const Value& item : to_list(value)) out.push_back(env.filter(item, filter.text, rest));
    return Value::from(std::move(out));
  }
  if (name == "select" || name == "reject") return select(env, value, args, false, name == "select");
  if (name == "selectattr" || name == "rejectattr") return select(env, value, args, true, name == "selectattr");
  throw BuiltinError("is not supported");
}

bool apply_test(Builtins& /*env*/, const Value& value, std::string_view name, const Arguments& args) {
  const Value arg = args.get(0, "");
  if (name == "defined") return !value.is(VK::kUndefined);
  if (name == "undefined") return value.is(VK::kUndefined);
  if (name == "none") return value.is(VK::kNone);
  if (name == "boolean") return value.is(VK::kBool);
  if (name == "true") return value.is(VK::kBool) && value.boolean;
  if (name == "false") return value.is(VK::kBool) && !value.boolean;
  if (name == "integer") return value.is(VK::kInt);
  if (name == "float") return value.is(VK::kFloat);
  if (name == "number") return value.is_number();
  if (name == "string") return value.is(VK::kString);
  if (name == "mapping") return value.is(VK::kDict);
  if (name == "callable") return value.is(VK::kCallable);
  if (name == "iterable" || name == "sequence") {
    return value.is(VK::kString) || value.is(VK::kList) || value.is(VK::kDict) ||
           (name == "iterable" && value.is(VK::kUndefined));
  }
  if (name == "lower") return value.is(VK::kString) && ascii_map(value.text, [](int c) { return std::tolower(c); }) == value.text;
  if (name == "upper") return value.is(VK::kString) && ascii_map(value.text, [](int c) { return std::toupper(c); }) == value.text;
  if (name == "odd" || name == "even") {
    if (!value.is(VK::kInt)) throw BuiltinError("expects an integer");
    return (value.integer % 2 != 0) == (name == "odd");
  }
  if (name == "divisibleby") {
    if (!value.is(VK::kInt) || !arg.is(VK::kInt) || arg.integer == 0) throw BuiltinError("expects non-zero integers");
    return value.integer % arg.integer == 0;
  }
  if (name == "eq" || name == "equalto") return equals(value, arg);
  if (name == "ne") return !equals(value, arg);
  if (name == "sameas") {
    if (value.kind != arg.kind) return false;
    if (value.is(VK::kList)) return value.list == arg.list;
    if (value.is(VK::kDict)) return value.dict == arg.dict;
    return equals(value, arg);
  }
  if (name == "lt") return compare_values(value, arg) < 0;
  if (name == "le") return compare_values(value, arg) <= 0;
  if (name == "gt") return compare_values(value, arg) > 0;
  if (name == "ge") return compare_values(value, arg) >= 0;
  if (name == "in") {
    if (arg.is(VK::kString)) return value.is(VK::kString) && arg.text.find(value.text) != std::string::npos;
    if (arg.is(VK::kDict)) return value.is(VK::kString) && arg.dict->find(value.text) != nullptr;
    const List items = to_list(arg);
    return std::any_of(items.begin(), items.end(), [&](const Value& item) { return equals(item, value); });
  }
  throw BuiltinError("is not supported");
}

Value call_method(const Value& object, std::string_view name, const Arguments& args, bool& found) {
  found = true;
  if (object.is(VK::kString)) {
    const std::string& s = object.text;
    const Value arg = args.get(0, "");
    if (name == "strip") return Value::from(strip(s, arg, true, true));
    if (name == "lstrip") return Value::from(strip(s, arg, true, false));
    if (name == "rstrip") return Value::from(strip(s, arg, false, true));
    if (name == "startswith") return Value::from(affix(s, arg, true));
    if (name == "endswith") return Value::from(affix(s, arg, false));
    if (name == "upper") return Value::from(ascii_map(s, [](int c) { return std::toupper(c); }));
    if (name == "lower") return Value::from(ascii_map(s, [](int c) { return std::tolower(c); }));
    if (name == "title") return Value::from(title(s));
    if (name == "capitalize") return Value::from(capitalize(s));
    if (name == "split") {
      const Value max_split = args.get(1, "maxsplit", Value::from(int64_t{-1}));
      return split(s, args.get(0, "sep", Value::none()), max_split.is(VK::kInt) ? max_split.integer : -1);
    }
    if (name == "replace") {
      const Value count = args.get(2, "count", Value::from(int64_t{-1}));
      return Value::from(replace(s, to_str(arg), to_str(args.get(1, "new")), count.is(VK::kInt) ? count.integer : -1));
    }
    if (name == "find") {
      const size_t pos = s.find(to_str(arg));
      return Value::from(pos == std::string::npos ? int64_t{-1} : static_cast<int64_t>(code_points(s.substr(0, pos)).size()));
    }
    if (name == "count") {
      const std::string needle = to_str(arg);
      int64_t n = 0;
      for (size_t pos = s.find(needle); !needle.empty() && pos != std::string::npos; pos = s.find(needle, pos + needle.size())) ++n;
      return Value::from(n);
    }
    if (name == "join") {
      std::string out;
      bool first = true;
      for (const Value& item : to_list(arg)) {
        if (!first) out += s;
        first = false;
        out += to_str(item);
      }
      return Value::from(std::move(out));
    }
  } else if (object.is(VK::kDict) && !object.dict->is_namespace) {
    if (name == "items") return Value::from(items_of(object));
    if (name == "keys") return Value::from(to_list(object));
    if (name == "values") {
      List values;
      for (const auto& item : object.dict->items) values.push_back(item.second);
      return Value::from(std::move(values));
    }
    if (name == "get") {
      const Value key = args.get(0, "key");
      const Value* hit = key.is(VK::kString) ? object.dict->find(key.text) : nullptr;
      return hit ? *hit : args.get(1, "default", Value::none());
    }
  }
  found = false;
  return Value::undefined();
}

Value call_global(std::string_view name, const Arguments& args) {
  if (name == "range") {
    std::vector<int64_t> bounds;
    for (const Value& v : args.positional) {
      if (!v.is(VK::kInt)) throw BuiltinError("expects integers");
      bounds.push_back(v.integer);
    }
    if (bounds.empty() || bounds.size() > 3) throw BuiltinError("expects 1 to 3 integers");
    const int64_t start = bounds.size() == 1 ? 0 : bounds[0];
    const int64_t stop = bounds.size() == 1 ? bounds[0] : bounds[1];
    const int64_t step = bounds.size() == 3 ? bounds[2] : 1;
    if (step == 0) throw BuiltinError("step must not be zero");
    List out;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) out.push_back(Value::from(i));
    return Value::from(std::move(out));
  }
  if (name == "namespace" || name == "dict") {
    Dict dict;
    dict.is_namespace = name == "namespace";
    for (const Value& v : args.positional) {
      if (!v.is(VK::kDict)) throw BuiltinError("positional arguments must be mappings");
      for (const auto& [key, item] : v.dict->items) dict.set(key, item);
    }
    for (const auto& [key, item] : args.keyword) dict.set(key, item);
    return Value::from(std::move(dict));
  }
  if (name == "strftime_now") {
    const Value format = args.get(0, "format");
    if (!format.is(VK::kString)) throw BuiltinError("expects a format string");
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buffer[256];
    const size_t n = std::strftime(buffer, sizeof(buffer), format.text.c_str(), &local);
    return Value::from(std::string(buffer, n));
  }
  throw BuiltinError("is not supported");
}

}  // namespace onepass::model::jinja

// Program + variables -> text: the interpreter, its filters, tests, methods and globals, and
// JinjaTemplate (jinja.h). Semantics follow @huggingface/jinja's runtime.ts unless jinja.h says
// otherwise; scoping follows Jinja2 (a for loop has its own scope, if does not, a macro sees the
// scope it was defined in).
#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstring>
#include <ctime>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "core/error.h"
#include "serve/jinja.h"
#include "serve/jinja_syntax.h"

namespace hyla::serve {
namespace jinja {
namespace {

constexpr size_t kMaxOutputBytes = size_t{256} << 20;
constexpr int64_t kMaxSteps = 100'000'000;  // nodes evaluated: an endless template stops
constexpr int kMaxCallDepth = 100;          // macro recursion
constexpr int64_t kMaxRange = 10'000'000;

[[noreturn]] void fail(const std::string& message) { throw Error(kNoOffset, message); }
[[noreturn]] void fail_at(const Node& n, const std::string& message) {
  throw Error(n.offset, message);
}

struct Scope {
  std::unordered_map<std::string, Value> vars;
  std::shared_ptr<Scope> parent;

  const Value* find(const std::string& name) const {
    for (const Scope* s = this; s != nullptr; s = s->parent.get()) {
      const auto it = s->vars.find(name);
      if (it != s->vars.end()) return &it->second;
    }
    return nullptr;
  }
};
using ScopePtr = std::shared_ptr<Scope>;

ScopePtr child_of(const ScopePtr& parent) {
  auto s = std::make_shared<Scope>();
  s->parent = parent;
  return s;
}

enum class Flow { kNormal, kBreak, kContinue };

// ---------------------------------------------------------------------------------------------
// String helpers

std::string ascii_upper(std::string s) {
  for (char& c : s)
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
  return s;
}
std::string ascii_lower(std::string s) {
  for (char& c : s)
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  return s;
}
bool is_word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}
// @huggingface/jinja's title: a word character after a non-word one is uppercased, the rest kept.
std::string title_case(std::string s) {
  for (size_t i = 0; i < s.size(); ++i)
    if (is_word_char(s[i]) && (i == 0 || !is_word_char(s[i - 1])) && s[i] >= 'a' && s[i] <= 'z')
      s[i] = static_cast<char>(s[i] - 'a' + 'A');
  return s;
}
std::string capitalize(std::string s) {
  if (!s.empty() && s[0] >= 'a' && s[0] <= 'z') s[0] = static_cast<char>(s[0] - 'a' + 'A');
  return s;
}
std::string js_trim(const std::string& s, bool left, bool right) {
  const size_t begin = left ? js_space_after(s, 0) : 0;
  if (begin == s.size()) return "";
  const size_t end = right ? s.size() - js_space_before(s, s.size()) : s.size();
  return s.substr(begin, end - begin);
}
// Python's str.strip(chars): drops code points found in `chars` from the chosen ends.
std::string strip_chars(const std::string& s, const std::string& chars, bool left, bool right) {
  const std::vector<std::string> set = code_points(chars);
  const std::vector<std::string> cps = code_points(s);
  auto in_set = [&](const std::string& cp) {
    return std::find(set.begin(), set.end(), cp) != set.end();
  };
  size_t begin = 0, end = cps.size();
  if (left)
    while (begin < end && in_set(cps[begin])) ++begin;
  if (right)
    while (end > begin && in_set(cps[end - 1])) --end;
  std::string out;
  for (size_t i = begin; i < end; ++i) out += cps[i];
  return out;
}
std::string replace_all(const std::string& s, const std::string& from, const std::string& to,
                        int64_t count) {
  if (count == 0) return s;
  int64_t left = count < 0 ? std::numeric_limits<int64_t>::max() : count;
  std::string out;
  if (from.empty()) {  // Python: `to` before every code point and at the end
    for (const std::string& cp : code_points(s)) {
      if (left > 0) {
        out += to;
        --left;
      }
      out += cp;
    }
    if (left > 0) out += to;
    return out;
  }
  size_t pos = 0;
  while (left > 0) {
    const size_t hit = s.find(from, pos);
    if (hit == std::string::npos) break;
    out.append(s, pos, hit - pos);
    out += to;
    pos = hit + from.size();
    --left;
  }
  out.append(s, pos, std::string::npos);
  return out;
}

// JavaScript's parseInt(s, 10) / parseFloat(s): the longest numeric prefix after whitespace.
bool js_parse_int(const std::string& s, int64_t& out) {
  size_t i = js_space_after(s, 0);
  bool negative = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
  const size_t digits = i;
  double value = 0;
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') value = value * 10 + (s[i++] - '0');
  if (i == digits) return false;
  if (value > 9.2e18) fail(str_cat("the integer in '", s, "' does not fit in 64 bits"));
  out = static_cast<int64_t>(negative ? -value : value);
  return true;
}
bool js_parse_float(const std::string& s, double& out) {
  size_t i = js_space_after(s, 0);
  size_t j = i;
  if (j < s.size() && (s[j] == '+' || s[j] == '-')) ++j;
  if (s.compare(j, 8, "Infinity") == 0) {
    out = s[i] == '-' ? -std::numeric_limits<double>::infinity()
                      : std::numeric_limits<double>::infinity();
    return true;
  }
  size_t k = j, mantissa_digits = 0;
  while (k < s.size() && std::isdigit(static_cast<unsigned char>(s[k]))) ++k, ++mantissa_digits;
  if (k < s.size() && s[k] == '.') {
    ++k;
    while (k < s.size() && std::isdigit(static_cast<unsigned char>(s[k]))) ++k, ++mantissa_digits;
  }
  if (mantissa_digits == 0) return false;
  if (k < s.size() && (s[k] == 'e' || s[k] == 'E')) {
    size_t e = k + 1;
    if (e < s.size() && (s[e] == '+' || s[e] == '-')) ++e;
    if (e < s.size() && std::isdigit(static_cast<unsigned char>(s[e]))) {
      while (e < s.size() && std::isdigit(static_cast<unsigned char>(s[e]))) ++e;
      k = e;
    }
  }
  out = std::strtod(s.substr(i, k - i).c_str(), nullptr);
  return true;
}

// Python's slice on n items: the indices it selects.
std::vector<int64_t> slice_indices(int64_t n, const Value& start_v, const Value& stop_v,
                                   const Value& step_v) {
  auto as_index = [](const Value& v, const char* what) -> std::optional<int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (v.kind() != Value::Kind::kInt)
      fail(str_cat("a slice's ", what, " must be an integer, not ", v.type_name()));
    return v.as_int();
  };
  const int64_t step = as_index(step_v, "step").value_or(1);
  if (step == 0) fail("a slice's step cannot be zero");
  std::optional<int64_t> start = as_index(start_v, "start"), stop = as_index(stop_v, "stop");
  std::vector<int64_t> out;
  if (step > 0) {
    int64_t a = start.value_or(0), b = stop.value_or(n);
    a = a < 0 ? std::max<int64_t>(n + a, 0) : std::min(a, n);
    b = b < 0 ? std::max<int64_t>(n + b, 0) : std::min(b, n);
    for (int64_t i = a; i < b; i += step) out.push_back(i);
  } else {
    int64_t a = start.value_or(n - 1), b = stop.value_or(-1);
    const bool stop_given = stop.has_value();
    a = a < 0 ? std::max<int64_t>(n + a, -1) : std::min(a, n - 1);
    if (stop_given) b = b < 0 ? std::max<int64_t>(n + b, -1) : std::min(b, n - 1);
    for (int64_t i = a; i > b; i += step) out.push_back(i);
  }
  return out;
}

// The order of `sort` and `dictsort` (@huggingface/jinja's compareRuntimeValues): numbers and
// booleans together, strings with each other (case-insensitive unless asked), none with none.
int compare_values(const Value& a, const Value& b, bool case_sensitive) {
  auto numeric = [](const Value& v) { return v.is_number() || v.kind() == Value::Kind::kBool; };
  if (a.is_none() && b.is_none()) return 0;
  if (a.is_undefined() && b.is_undefined()) return 0;
  if (numeric(a) && numeric(b)) {
    const double x = a.as_double(), y = b.as_double();
    return x < y ? -1 : x > y ? 1 : 0;
  }
  if (a.is_string() && b.is_string()) {
    const std::string x = case_sensitive ? a.as_string() : ascii_lower(a.as_string());
    const std::string y = case_sensitive ? b.as_string() : ascii_lower(b.as_string());
    return x < y ? -1 : x > y ? 1 : 0;
  }
  fail(str_cat("cannot compare a ", a.type_name(), " with a ", b.type_name(), " to sort"));
}

// item.a.b (dict keys, list indices) as `map(attribute=)` and `sort(attribute=)` read it.
Value attribute_path(const Value& item, const std::string& path) {
  Value v = item;
  size_t begin = 0;
  while (true) {
    const size_t dot = path.find('.', begin);
    const std::string part = path.substr(begin, dot == std::string::npos ? dot : dot - begin);
    if (v.is_mapping_like()) {
      const Value* found = v.entries().find(part);
      v = found != nullptr ? *found : Value();
    } else if (v.is_array()) {
      int64_t index = 0;
      if (!js_parse_int(part, index) || index < 0 ||
          index >= static_cast<int64_t>(v.items().size()))
        return Value();
      v = v.items()[static_cast<size_t>(index)];
    } else {
      return Value();
    }
    if (dot == std::string::npos) return v;
    begin = dot + 1;
  }
}

bool js_bool_arg(const Value& v, const char* what, bool fallback) {
  if (v.is_undefined()) return fallback;
  if (v.kind() != Value::Kind::kBool)
    fail(str_cat(what, " must be a boolean, not ", v.type_name()));
  return v.as_bool();
}
const std::string& string_arg(const Value& v, const char* what) {
  if (!v.is_string()) fail(str_cat(what, " must be a string, not ", v.type_name()));
  return v.as_string();
}
int64_t int_arg(const Value& v, const char* what, int64_t fallback) {
  if (v.is_undefined()) return fallback;
  if (v.kind() != Value::Kind::kInt)
    fail(str_cat(what, " must be an integer, not ", v.type_name()));
  return v.as_int();
}

// How `join` and `~` see an item: none and undefined are empty.
std::string join_text(const Value& v) {
  return v.is_none() || v.is_undefined() ? std::string() : to_concat_text(v);
}

// ---------------------------------------------------------------------------------------------
// Tests: `x is name(args)`.

bool apply_test(const std::string& name, const Value& v, const std::vector<Value>& args) {
  using Kind = Value::Kind;
  auto arg = [&](size_t i) -> const Value& {
    if (i >= args.size()) fail(str_cat("the test '", name, "' needs an argument"));
    return args[i];
  };
  auto integer = [&]() {
    if (v.kind() != Kind::kInt)
      fail(str_cat("the test '", name, "' needs an integer, not a ", v.type_name()));
    return v.as_int();
  };
  if (name == "defined") return !v.is_undefined();
  if (name == "undefined") return v.is_undefined();
  if (name == "none") return v.is_none();
  if (name == "boolean") return v.kind() == Kind::kBool;
  if (name == "true") return v.kind() == Kind::kBool && v.as_bool();
  if (name == "false") return v.kind() == Kind::kBool && !v.as_bool();
  if (name == "string") return v.is_string();
  if (name == "number") return v.is_number();
  if (name == "integer") return v.kind() == Kind::kInt;
  if (name == "float") return v.kind() == Kind::kFloat;
  if (name == "mapping") return v.is_object();
  if (name == "iterable") return v.is_array() || v.is_string();
  if (name == "sequence") return v.is_array() || v.is_object() || v.is_string();
  if (name == "callable") return v.kind() == Kind::kFunction;
  if (name == "odd") return integer() % 2 != 0;
  if (name == "even") return integer() % 2 == 0;
  if (name == "lower") return v.is_string() && v.as_string() == ascii_lower(v.as_string());
  if (name == "upper") return v.is_string() && v.as_string() == ascii_upper(v.as_string());
  if (name == "equalto" || name == "eq" || name == "==" || name == "sameas")
    return strict_equal(v, arg(0));
  if (name == "ne" || name == "!=") return !strict_equal(v, arg(0));
  if (name == "divisibleby") {
    const int64_t d = int_arg(arg(0), "divisibleby's argument", 1);
    if (d == 0) fail("divisibleby(0): division by zero");
    return integer() % d == 0;
  }
  if (name == "in") {
    const Value& seq = arg(0);
    if (seq.is_array())
      return std::any_of(seq.items().begin(), seq.items().end(),
                         [&](const Value& x) { return strict_equal(v, x); });
    if (seq.is_string() && v.is_string())
      return seq.as_string().find(v.as_string()) != std::string::npos;
    if (seq.is_mapping_like() && v.is_string()) return seq.entries().find(v.as_string()) != nullptr;
    fail(str_cat("the test 'in' cannot look in a ", seq.type_name()));
  }
  if (name == "gt" || name == "lt" || name == "ge" || name == "le" || name == ">" || name == "<" ||
      name == ">=" || name == "<=") {
    if (!v.is_number() || !arg(0).is_number())
      fail(str_cat("the test '", name, "' compares numbers"));
    const double x = v.as_double(), y = arg(0).as_double();
    if (name == "gt" || name == ">") return x > y;
    if (name == "lt" || name == "<") return x < y;
    if (name == "ge" || name == ">=") return x >= y;
    return x <= y;
  }
  fail(str_cat("unknown test '", name, "'"));
}

// ---------------------------------------------------------------------------------------------
// Methods: `s.strip()`, `d.items()`, ... as bound functions.

Value string_method(const std::string& s, const std::string& name) {
  auto bound = [&](auto fn) {
    return Value::function(name, [s, fn](CallArgs& a) { return fn(s, a); });
  };
  if (name == "upper")
    return bound([](const std::string& x, CallArgs&) { return Value::string(ascii_upper(x)); });
  if (name == "lower")
    return bound([](const std::string& x, CallArgs&) { return Value::string(ascii_lower(x)); });
  if (name == "title")
    return bound([](const std::string& x, CallArgs&) { return Value::string(title_case(x)); });
  if (name == "capitalize")
    return bound([](const std::string& x, CallArgs&) { return Value::string(capitalize(x)); });
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const bool left = name != "rstrip", right = name != "lstrip";
    return bound([left, right](const std::string& x, CallArgs& a) {
      const Value& chars = a.get(0, "chars");
      if (chars.is_undefined() || chars.is_none()) return Value::string(js_trim(x, left, right));
      return Value::string(strip_chars(x, string_arg(chars, "strip's chars"), left, right));
    });
  }
  if (name == "startswith" || name == "endswith") {
    const bool starts = name == "startswith";
    return bound([starts, name](const std::string& x, CallArgs& a) {
      auto test = [&](const std::string& p) {
        if (p.size() > x.size()) return false;
        return starts ? x.compare(0, p.size(), p) == 0
                      : x.compare(x.size() - p.size(), p.size(), p) == 0;
      };
      const Value& p = a.get(0, "prefix");
      if (p.is_string()) return Value::boolean(test(p.as_string()));
      if (p.is_array()) {
        for (const Value& item : p.items())
          if (test(string_arg(item, "each item of the tuple"))) return Value::boolean(true);
        return Value::boolean(false);
      }
      fail(str_cat(name, "() takes a string or a tuple of strings, not ", p.type_name()));
    });
  }
  if (name == "split") {
    return bound([](const std::string& x, CallArgs& a) {
      const Value& sep = a.get(0, "sep");
      const int64_t maxsplit = int_arg(a.get(1, "maxsplit"), "split's maxsplit", -1);
      std::vector<Value> parts;
      if (sep.is_undefined() || sep.is_none()) {  // runs of whitespace; no empty parts
        size_t i = js_space_after(x, 0);
        while (i < x.size()) {
          if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit) {
            parts.push_back(Value::string(x.substr(i)));
            break;
          }
          size_t end = i;
          while (end < x.size() && js_space_after(x, end) == 0) {
            size_t next = end;
            decode_utf8(x, next);
            end = next;
          }
          parts.push_back(Value::string(x.substr(i, end - i)));
          i = end + js_space_after(x, end);
        }
        return Value::array(std::move(parts));
      }
      const std::string& d = string_arg(sep, "split's separator");
      if (d.empty()) fail("split(): empty separator");
      size_t pos = 0;
      while (true) {
        const size_t hit = x.find(d, pos);
        if (hit == std::string::npos ||
            (maxsplit >= 0 && static_cast<int64_t>(parts.size()) >= maxsplit)) {
          parts.push_back(Value::string(x.substr(pos)));
          break;
        }
        parts.push_back(Value::string(x.substr(pos, hit - pos)));
        pos = hit + d.size();
      }
      return Value::array(std::move(parts));
    });
  }
  if (name == "replace") {
    return bound([](const std::string& x, CallArgs& a) {
      const Value& count = a.get(2, "count");
      return Value::string(
          replace_all(x, string_arg(a.get(0, "old"), "replace's old"),
                      string_arg(a.get(1, "new"), "replace's new"),
                      count.is_none() ? -1 : int_arg(count, "replace's count", -1)));
    });
  }
  if (name == "join") {
    return bound([](const std::string& x, CallArgs& a) {
      const Value& items = a.get(0, "iterable");
      if (!items.is_array()) fail(str_cat("join() takes a list, not ", items.type_name()));
      std::string out;
      for (size_t i = 0; i < items.items().size(); ++i) {
        if (i > 0) out += x;
        out += string_arg(items.items()[i], "each item joined");
      }
      return Value::string(std::move(out));
    });
  }
  if (name == "format") {
    // Python's str.format with {} / {0} / {name} fields and {{ }} escapes; no format specs.
    return bound([](const std::string& x, CallArgs& a) {
      std::string out;
      size_t next_auto = 0;
      for (size_t i = 0; i < x.size(); ++i) {
        if (x[i] == '{' && i + 1 < x.size() && x[i + 1] == '{') {
          out += '{';
          ++i;
        } else if (x[i] == '}' && i + 1 < x.size() && x[i + 1] == '}') {
          out += '}';
          ++i;
        } else if (x[i] == '{') {
          const size_t close = x.find('}', i);
          if (close == std::string::npos) fail("format(): a '{' is never closed");
          const std::string field = x.substr(i + 1, close - i - 1);
          const Value* v = nullptr;
          if (field.empty() || std::all_of(field.begin(), field.end(), ::isdigit)) {
            const size_t index = field.empty() ? next_auto++ : std::stoul(field);
            if (index >= a.positional.size())
              fail(str_cat("format(): no positional argument ", index));
            v = &a.positional[index];
          } else {
            for (const auto& [key, value] : a.keyword)
              if (key == field) v = &value;
            if (v == nullptr) fail(str_cat("format(): no argument named '", field, "'"));
          }
          out += to_text(*v);
          i = close;
        } else {
          out += x[i];
        }
      }
      return Value::string(std::move(out));
    });
  }
  return Value();
}

Value dictsort(const Value& dict, const CallArgs& a);

Value object_method(const Value& object, const std::string& name) {
  auto bound = [&](auto fn) {
    return Value::function(name, [object, fn](CallArgs& a) { return fn(object, a); }, {object});
  };
  if (name == "get")
    return bound([](const Value& o, CallArgs& a) {
      const std::string& key = string_arg(a.get(0, "key"), "get's key");
      const Value* found = o.entries().find(key);
      if (found != nullptr) return *found;
      const Value& fallback = a.get(1, "default");
      return fallback.is_undefined() ? Value::none() : fallback;
    });
  if (name == "items")
    return bound([](const Value& o, CallArgs&) {
      std::vector<Value> pairs;
      for (const auto& [key, value] : o.entries().entries())
        pairs.push_back(Value::array({Value::string(key), value}));
      return Value::array(std::move(pairs));
    });
  if (name == "keys")
    return bound([](const Value& o, CallArgs&) {
      std::vector<Value> keys;
      for (const auto& entry : o.entries().entries()) keys.push_back(Value::string(entry.first));
      return Value::array(std::move(keys));
    });
  if (name == "values")
    return bound([](const Value& o, CallArgs&) {
      std::vector<Value> values;
      for (const auto& entry : o.entries().entries()) values.push_back(entry.second);
      return Value::array(std::move(values));
    });
  if (name == "dictsort") return bound([](const Value& o, CallArgs& a) { return dictsort(o, a); });
  return Value();
}

Value dictsort(const Value& dict, const CallArgs& a) {
  const bool case_sensitive = js_bool_arg(a.get(0, "case_sensitive"), "case_sensitive", false);
  const Value& by_v = a.get(1, "by");
  const std::string by = by_v.is_undefined() ? "key" : string_arg(by_v, "dictsort's by");
  if (by != "key" && by != "value") fail("dictsort's by must be 'key' or 'value'");
  const bool reverse = js_bool_arg(a.get(2, "reverse"), "reverse", false);
  std::vector<Value> pairs;
  for (const auto& [key, value] : dict.entries().entries())
    pairs.push_back(Value::array({Value::string(key), value}));
  const size_t k = by == "key" ? 0 : 1;
  std::stable_sort(pairs.begin(), pairs.end(), [&](const Value& x, const Value& y) {
    const int c = compare_values(x.items()[k], y.items()[k], case_sensitive);
    return reverse ? c > 0 : c < 0;
  });
  return Value::array(std::move(pairs));
}

// ---------------------------------------------------------------------------------------------
// Globals

std::string strftime_now(const std::string& format) {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::string out;
  for (size_t i = 0; i < format.size(); ++i) {
    if (format[i] != '%' || i + 1 >= format.size() ||
        std::strchr("YmdbBHM%", format[i + 1]) == nullptr) {
      out += format[i];
      continue;
    }
    char buffer[64];
    const char spec[3] = {'%', format[i + 1], '\0'};
    std::strftime(buffer, sizeof(buffer), spec, &local);
    out += buffer;
    ++i;
  }
  return out;
}

void add_globals(Scope& root) {
  root.vars["true"] = root.vars["True"] = Value::boolean(true);
  root.vars["false"] = root.vars["False"] = Value::boolean(false);
  root.vars["none"] = root.vars["None"] = Value::none();
  root.vars["raise_exception"] = Value::function("raise_exception", [](CallArgs& a) -> Value {
    const Value& message = a.get(0, "message");
    fail(str_cat("the template raised an error: ",
                 message.is_undefined() ? std::string("(no message)") : to_text(message)));
  });
  root.vars["range"] = Value::function("range", [](CallArgs& a) {
    if (a.positional.empty() || a.positional.size() > 3)
      fail("range() takes 1 to 3 integer arguments");
    int64_t start = 0, stop = 0, step = 1;
    const size_t n = a.positional.size();
    if (n == 1) {
      stop = int_arg(a.positional[0], "range's stop", 0);
    } else {
      start = int_arg(a.positional[0], "range's start", 0);
      stop = int_arg(a.positional[1], "range's stop", 0);
      if (n == 3) step = int_arg(a.positional[2], "range's step", 1);
    }
    if (step == 0) fail("range() step must not be zero");
    const double count = std::ceil((static_cast<double>(stop) - static_cast<double>(start)) /
                                   static_cast<double>(step));
    if (count > static_cast<double>(kMaxRange))
      fail(str_cat("range() of ", count, " items: more than the ", kMaxRange, " allowed"));
    std::vector<Value> items;
    for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
      items.push_back(Value::integer(i));
    return Value::array(std::move(items));
  });
  root.vars["namespace"] = Value::function("namespace", [](CallArgs& a) {
    if (a.positional.size() > 1)
      fail(str_cat("namespace() takes at most 1 positional argument, got ", a.positional.size()));
    Object entries;
    if (a.positional.size() == 1) {
      const Value& source = a.positional[0];
      if (source.is_mapping_like()) {
        for (const auto& [key, value] : source.entries().entries()) entries.set(key, value);
      } else if (source.is_array()) {
        for (const Value& pair : source.items()) {
          if (!pair.is_array() || pair.items().size() != 2 || !pair.items()[0].is_string())
            fail("namespace() takes a dict or a list of [key, value] pairs with string keys");
          entries.set(pair.items()[0].as_string(), pair.items()[1]);
        }
      } else {
        fail(str_cat("namespace() takes a dict or a list of pairs, not a ", source.type_name()));
      }
    }
    for (const auto& [key, value] : a.keyword) entries.set(key, value);
    return Value::ns(std::move(entries));
  });
  root.vars["strftime_now"] = Value::function("strftime_now", [](CallArgs& a) {
    return Value::string(strftime_now(string_arg(a.get(0, "format"), "strftime_now's format")));
  });
}

// ---------------------------------------------------------------------------------------------
// The interpreter

class Interpreter {
 public:
  std::string run(const Program& program, const nlohmann::ordered_json& variables) {
    auto root = std::make_shared<Scope>();
    add_globals(*root);
    for (const auto& [key, value] : variables.items()) root->vars[key] = Value::from_json(value);
    std::string out;
    const Flow flow = exec(program.body, root, out);
    if (flow != Flow::kNormal) throw Error(0, "{% break %} or {% continue %} outside a loop");
    return out;
  }

 private:
  void step(const Node& n) {
    if (++steps_ > kMaxSteps)
      fail_at(n, str_cat("the template ran more than ", kMaxSteps, " steps: stopped"));
  }

  Flow exec(const std::vector<NodePtr>& body, const ScopePtr& scope, std::string& out) {
    for (const NodePtr& n : body) {
      const Flow flow = exec_one(*n, scope, out);
      if (out.size() > kMaxOutputBytes)
        fail_at(*n, str_cat("the output passed ", kMaxOutputBytes >> 20, " MiB: stopped"));
      if (flow != Flow::kNormal) return flow;
    }
    return Flow::kNormal;
  }

  Flow exec_one(const Node& n, const ScopePtr& scope, std::string& out) {
    step(n);
    using Kind = Node::Kind;
    switch (n.kind) {
      case Kind::kText: out += n.text; return Flow::kNormal;
      case Kind::kOutput: {
        const Value v = eval(*n.a, scope);
        if (!v.is_none() && !v.is_undefined()) {
          try {
            out += to_text(v);
          } catch (Error& e) {
            if (e.offset == kNoOffset) e.offset = n.a->offset;
            throw;
          }
        }
        return Flow::kNormal;
      }
      case Kind::kIf: return exec(eval(*n.a, scope).truthy() ? n.body : n.orelse, scope, out);
      case Kind::kFor: return exec_for(n, scope, out);
      case Kind::kSet: {
        Value v;
        if (n.b != nullptr) {
          v = eval(*n.b, scope);
        } else {
          std::string text;
          if (exec(n.body, scope, text) != Flow::kNormal)
            fail_at(n, "{% break %} or {% continue %} inside a block {% set %}");
          v = Value::string(std::move(text));
        }
        assign(*n.a, std::move(v), scope);
        return Flow::kNormal;
      }
      case Kind::kMacro: {
        scope->vars[n.text] = make_macro(n, n.text, n.args, scope);
        return Flow::kNormal;
      }
      case Kind::kCallBlock: {
        const Node& call = *n.a;
        Value callee = eval(*call.a, scope);
        if (callee.kind() != Value::Kind::kFunction)
          fail_at(call, str_cat("{% call %} needs a macro, and this is ", callee.type_name()));
        CallArgs args = eval_args(call.args, scope);
        args.caller = make_macro(n, "caller", n.args, scope);
        const Value v = invoke(call, callee, args);
        if (!v.is_none() && !v.is_undefined()) out += to_text(v);
        return Flow::kNormal;
      }
      case Kind::kFilterBlock: {
        std::string text;
        if (exec(n.body, scope, text) != Flow::kNormal)
          fail_at(n, "{% break %} or {% continue %} inside a {% filter %} block");
        const Value v = apply_filter(*n.a, Value::string(std::move(text)), scope);
        if (!v.is_none() && !v.is_undefined()) out += to_text(v);
        return Flow::kNormal;
      }
      case Kind::kBreak: return Flow::kBreak;
      case Kind::kContinue: return Flow::kContinue;
      default: fail_at(n, "internal: an expression where a statement belongs");
    }
  }

  void assign(const Node& target, Value v, const ScopePtr& scope) {
    using Kind = Node::Kind;
    if (target.kind == Kind::kName) {
      scope->vars[target.text] = std::move(v);
    } else if (target.kind == Kind::kTuple) {
      if (!v.is_array()) fail_at(target, str_cat("cannot unpack a ", v.type_name(), " into names"));
      if (v.items().size() != target.args.size())
        fail_at(target, str_cat("cannot unpack ", v.items().size(), " items into ",
                                target.args.size(), " names"));
      for (size_t i = 0; i < target.args.size(); ++i) assign(*target.args[i], v.items()[i], scope);
    } else {  // kAttribute
      Value object = eval(*target.a, scope);
      if (object.kind() != Value::Kind::kNamespace)
        fail_at(target, str_cat("cannot set an attribute of a ", object.type_name(),
                                ": only of a namespace()"));
      // A namespace holding itself, directly or through a list, dict or bound method, would be a
      // reference cycle of shared_ptrs (never freed). Lists and dicts never change once built, so
      // this assignment is the only way a cycle can form.
      if (v.reaches(object))
        fail_at(target, "a namespace cannot hold itself (not even inside a list, dict or method)");
      object.mutable_entries().set(target.text, std::move(v));
    }
  }

  Flow exec_for(const Node& n, const ScopePtr& scope, std::string& out) {
    const Value iterable = eval(*n.b, scope);
    std::vector<Value> items;
    switch (iterable.kind()) {
      case Value::Kind::kArray: items = iterable.items(); break;
      case Value::Kind::kObject:
        for (const auto& entry : iterable.entries().entries())
          items.push_back(Value::string(entry.first));
        break;
      case Value::Kind::kString:
        for (std::string& cp : code_points(iterable.as_string()))
          items.push_back(Value::string(std::move(cp)));
        break;
      case Value::Kind::kUndefined: break;
      default: fail_at(*n.b, str_cat("cannot loop over a ", iterable.type_name()));
    }
    ScopePtr loop_scope = child_of(scope);
    if (n.c != nullptr) {  // `for x in xs if cond`: the condition sees the item, not `loop`
      std::vector<Value> kept;
      for (Value& item : items) {
        ScopePtr test_scope = child_of(loop_scope);
        assign(*n.a, item, test_scope);
        if (eval(*n.c, test_scope).truthy()) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    const int64_t length = static_cast<int64_t>(items.size());
    bool completed = false;  // an iteration ran to its end: else is skipped
    for (int64_t i = 0; i < length; ++i) {
      Object loop;
      loop.set("index", Value::integer(i + 1));
      loop.set("index0", Value::integer(i));
      loop.set("revindex", Value::integer(length - i));
      loop.set("revindex0", Value::integer(length - i - 1));
      loop.set("first", Value::boolean(i == 0));
      loop.set("last", Value::boolean(i == length - 1));
      loop.set("length", Value::integer(length));
      loop.set("previtem", i > 0 ? items[static_cast<size_t>(i - 1)] : Value());
      loop.set("nextitem", i + 1 < length ? items[static_cast<size_t>(i + 1)] : Value());
      loop_scope->vars["loop"] = Value::object(std::move(loop));
      assign(*n.a, items[static_cast<size_t>(i)], loop_scope);
      const Flow flow = exec(n.body, loop_scope, out);
      if (flow == Flow::kBreak) break;
      if (flow == Flow::kNormal) completed = true;
    }
    // As in Jinja2 and @huggingface/jinja: else runs when no iteration reached its end (no items,
    // or each one left by break / continue).
    if (!completed && exec(n.orelse, loop_scope, out) != Flow::kNormal)
      fail_at(n, "{% break %} or {% continue %} in a for loop's else block");
    return Flow::kNormal;
  }

  static bool uses_name(const Node& n, const std::string& name) {
    if (n.kind == Node::Kind::kName && n.text == name) return true;
    for (const Node* child : {n.a.get(), n.b.get(), n.c.get()})
      if (child != nullptr && uses_name(*child, name)) return true;
    for (const auto* list : {&n.args, &n.body, &n.orelse})
      for (const NodePtr& child : *list)
        if (child != nullptr && uses_name(*child, name)) return true;
    return false;
  }

  // A macro (or a call block's caller): parameters bound from the call, then the missing ones'
  // defaults evaluated in the macro's scope; `varargs` / `kwargs` collect the extra arguments
  // when the body reads them.
  Value make_macro(const Node& n, const std::string& name, const std::vector<NodePtr>& params,
                   const ScopePtr& scope) {
    std::weak_ptr<Scope> defined_in = scope;
    bool has_varargs = false, has_kwargs = false;
    for (const NodePtr& child : n.body) {
      has_varargs = has_varargs || uses_name(*child, "varargs");
      has_kwargs = has_kwargs || uses_name(*child, "kwargs");
    }
    return Value::function(
        name, [this, &n, &params, name, defined_in, has_varargs, has_kwargs](CallArgs& a) -> Value {
          ScopePtr parent = defined_in.lock();
          if (parent == nullptr)
            fail(str_cat("macro '", name, "' outlived the scope it was defined in"));
          // An error ends the whole render, so the depth need not be restored on that path.
          if (++call_depth_ > kMaxCallDepth)
            fail(str_cat("macro '", name, "': calls nest deeper than ", kMaxCallDepth));
          ScopePtr local = child_of(parent);
          std::vector<std::pair<std::string, Value>> keyword = a.keyword;
          std::vector<const Node*> pending_defaults;
          for (size_t i = 0; i < params.size(); ++i) {
            const Node& p = *params[i];
            Value v;
            bool given = false;
            if (i < a.positional.size()) {
              v = a.positional[i];
              given = true;
            } else {
              for (auto it = keyword.begin(); it != keyword.end(); ++it)
                if (it->first == p.text) {
                  v = it->second;
                  keyword.erase(it);
                  given = true;
                  break;
                }
            }
            if (!given && p.kind == Node::Kind::kKeyword) pending_defaults.push_back(&p);
            local->vars[p.text] = std::move(v);
          }
          if (has_kwargs) {
            Object extra;
            for (auto& [key, value] : keyword) extra.set(key, value);
            local->vars["kwargs"] = Value::object(std::move(extra));
          } else if (!keyword.empty()) {
            fail(str_cat("macro '", name, "' has no parameter '", keyword.front().first, "'"));
          }
          if (has_varargs) {
            std::vector<Value> extra;
            for (size_t i = params.size(); i < a.positional.size(); ++i)
              extra.push_back(a.positional[i]);
            local->vars["varargs"] = Value::array(std::move(extra));
          } else if (a.positional.size() > params.size()) {
            fail(str_cat("macro '", name, "' takes at most ", params.size(), " argument(s), got ",
                         a.positional.size()));
          }
          if (!a.caller.is_undefined()) local->vars["caller"] = a.caller;
          for (const Node* p : pending_defaults) local->vars[p->text] = eval(*p->a, local);
          std::string text;
          if (exec(n.body, local, text) != Flow::kNormal)
            fail(str_cat("{% break %} or {% continue %} outside a loop in macro '", name, "'"));
          --call_depth_;
          return Value::string(std::move(text));
        });
  }

  CallArgs eval_args(const std::vector<NodePtr>& args, const ScopePtr& scope) {
    CallArgs out;
    for (const NodePtr& a : args) {
      if (a->kind == Node::Kind::kKeyword)
        out.keyword.emplace_back(a->text, eval(*a->a, scope));
      else
        out.positional.push_back(eval(*a, scope));
    }
    return out;
  }

  Value invoke(const Node& call, const Value& callee, CallArgs& args) {
    try {
      return callee.as_function().call(args);
    } catch (Error& e) {
      if (e.offset == kNoOffset) e.offset = call.offset;
      throw;
    }
  }

  Value eval(const Node& n, const ScopePtr& scope) {
    step(n);
    try {
      return eval_inner(n, scope);
    } catch (Error& e) {
      if (e.offset == kNoOffset) e.offset = n.offset;
      throw;
    }
  }

  Value eval_inner(const Node& n, const ScopePtr& scope) {
    using Kind = Node::Kind;
    switch (n.kind) {
      case Kind::kLiteral: return n.value;
      case Kind::kName: {
        const Value* v = scope->find(n.text);
        return v != nullptr ? *v : Value();
      }
      case Kind::kList:
      case Kind::kTuple: {
        std::vector<Value> items;
        for (const NodePtr& item : n.args) items.push_back(eval(*item, scope));
        return Value::array(std::move(items));
      }
      case Kind::kDict: {
        Object entries;
        for (size_t i = 0; i + 1 < n.args.size(); i += 2) {
          const Value key = eval(*n.args[i], scope);
          if (!key.is_string())
            fail_at(*n.args[i], str_cat("dict keys must be strings, not ", key.type_name()));
          entries.set(key.as_string(), eval(*n.args[i + 1], scope));
        }
        return Value::object(std::move(entries));
      }
      case Kind::kAttribute: return member(eval(*n.a, scope), n.text, true);
      case Kind::kIndex: {
        const Value object = eval(*n.a, scope);
        const Value key = eval(*n.b, scope);
        if (key.is_string()) return member(object, key.as_string(), false);
        if (key.kind() == Value::Kind::kInt) return index(object, key.as_int());
        fail(str_cat("cannot index a ", object.type_name(), " with a ", key.type_name()));
      }
      case Kind::kSlice: {
        const Value object = eval(*n.a, scope);
        Value parts[3];
        for (int k = 0; k < 3; ++k)
          if (n.args[static_cast<size_t>(k)] != nullptr)
            parts[k] = eval(*n.args[static_cast<size_t>(k)], scope);
        if (object.is_array()) {
          std::vector<Value> out;
          for (int64_t i : slice_indices(static_cast<int64_t>(object.items().size()), parts[0],
                                         parts[1], parts[2]))
            out.push_back(object.items()[static_cast<size_t>(i)]);
          return Value::array(std::move(out));
        }
        if (object.is_string()) {
          const std::vector<std::string> cps = code_points(object.as_string());
          std::string out;
          for (int64_t i :
               slice_indices(static_cast<int64_t>(cps.size()), parts[0], parts[1], parts[2]))
            out += cps[static_cast<size_t>(i)];
          return Value::string(std::move(out));
        }
        fail(str_cat("cannot slice a ", object.type_name(), ": only a list or a string"));
      }
      case Kind::kCall: {
        const Value callee = eval(*n.a, scope);
        if (callee.kind() != Value::Kind::kFunction) {
          if (n.a->kind == Kind::kName)
            fail(str_cat("'", n.a->text, "' is ", callee.is_undefined() ? "undefined" : "a ",
                         callee.is_undefined() ? "" : callee.type_name(), ": it cannot be called"));
          if (n.a->kind == Kind::kAttribute)
            fail(str_cat("'", n.a->text, "' is ",
                         callee.is_undefined() ? "not a method of a " : "not callable on a ",
                         eval(*n.a->a, scope).type_name()));
          fail(str_cat("cannot call a ", callee.type_name()));
        }
        CallArgs args = eval_args(n.args, scope);
        return invoke(n, callee, args);
      }
      case Kind::kFilter: return apply_filter(n, eval(*n.a, scope), scope);
      case Kind::kTest: {
        const Value v = eval(*n.a, scope);
        std::vector<Value> args;
        for (const NodePtr& a : n.args) args.push_back(eval(*a, scope));
        return Value::boolean(apply_test(n.text, v, args) != n.negate);
      }
      case Kind::kUnary: {
        const Value v = eval(*n.a, scope);
        if (n.text == "not") return Value::boolean(!v.truthy());
        const bool negative = n.text == "-";
        if (v.kind() == Value::Kind::kFloat)
          return Value::floating(negative ? -v.as_double() : v.as_double());
        if (v.kind() == Value::Kind::kInt || v.kind() == Value::Kind::kBool) {
          const int64_t i = v.kind() == Value::Kind::kInt ? v.as_int() : (v.as_bool() ? 1 : 0);
          if (negative && i == std::numeric_limits<int64_t>::min()) fail("integer overflow");
          return Value::integer(negative ? -i : i);
        }
        fail(str_cat("unary '", n.text, "' needs a number, not a ", v.type_name()));
      }
      case Kind::kBinary: return binary(n, scope);
      case Kind::kTernary: {
        if (eval(*n.b, scope).truthy()) return eval(*n.a, scope);
        return n.c != nullptr ? eval(*n.c, scope) : Value();
      }
      default: fail("internal: a statement where an expression belongs");
    }
  }

  // x.name / x['name']
  static Value member(const Value& object, const std::string& name, bool dotted) {
    if (object.is_mapping_like()) {
      const Value* found = object.entries().find(name);
      if (found != nullptr) return *found;
      if (object.is_object()) return object_method(object, name);
      return Value();
    }
    if (object.is_array()) {
      if (name == "length") return Value::integer(static_cast<int64_t>(object.items().size()));
      int64_t i = 0;
      if (dotted && !name.empty() && std::all_of(name.begin(), name.end(), ::isdigit) &&
          js_parse_int(name, i))
        return index(object, i);
      return Value();
    }
    if (object.is_string()) {
      if (name == "length") return Value::integer(utf16_length(object.as_string()));
      int64_t i = 0;
      if (dotted && !name.empty() && std::all_of(name.begin(), name.end(), ::isdigit) &&
          js_parse_int(name, i))
        return index(object, i);
      return string_method(object.as_string(), name);
    }
    return Value();  // undefined.x, none.x, 1.x: undefined, as in @huggingface/jinja
  }

  // x[i]: negative i counts from the end; out of range is undefined.
  static Value index(const Value& object, int64_t i) {
    if (object.is_array()) {
      const int64_t n = static_cast<int64_t>(object.items().size());
      if (i < 0) i += n;
      return i >= 0 && i < n ? object.items()[static_cast<size_t>(i)] : Value();
    }
    if (object.is_string()) {
      const std::vector<std::string> cps = code_points(object.as_string());
      const int64_t n = static_cast<int64_t>(cps.size());
      if (i < 0) i += n;
      return i >= 0 && i < n ? Value::string(cps[static_cast<size_t>(i)]) : Value();
    }
    fail(str_cat("cannot index a ", object.type_name(), " with an integer"));
  }

  Value binary(const Node& n, const ScopePtr& scope) {
    using Kind = Value::Kind;
    const std::string& op = n.text;
    const Value left = eval(*n.a, scope);
    if (op == "and") return left.truthy() ? eval(*n.b, scope) : left;
    if (op == "or") return left.truthy() ? left : eval(*n.b, scope);
    const Value right = eval(*n.b, scope);
    if (op == "==") return Value::boolean(loose_equal(left, right));
    if (op == "!=") return Value::boolean(!loose_equal(left, right));
    const bool membership = op == "in" || op == "not in";
    if (left.is_undefined() || right.is_undefined()) {
      if (right.is_undefined() && membership) return Value::boolean(op == "not in");
      fail(str_cat("cannot apply '", op, "' to undefined (", describe_operand(*n.a, left), " ", op,
                   " ", describe_operand(*n.b, right), ")"));
    }
    if (left.is_none() || right.is_none())
      fail(str_cat("cannot apply '", op, "' to none (", describe_operand(*n.a, left), " ", op, " ",
                   describe_operand(*n.b, right), ")"));
    if (op == "~") return Value::string(to_concat_text(left) + to_concat_text(right));
    const bool left_num = left.is_number(), right_num = right.is_number();
    if (op == "**" && (left_num || left.kind() == Kind::kBool) &&
        (right_num || right.kind() == Kind::kBool)) {
      const double a = left.as_double(), b = right.as_double();
      if (a == 0 && b < 0) fail("0 cannot be raised to a negative power");
      const double r = std::pow(a, b);
      if (!std::isfinite(r)) fail("the power is not a finite real number");
      if (left.kind() == Kind::kFloat || right.kind() == Kind::kFloat || b < 0)
        return Value::floating(r);
      if (std::fabs(r) >= 9.2e18) fail("integer overflow in '**'");
      return Value::integer(static_cast<int64_t>(r));
    }
    if (left_num && right_num) return arithmetic(op, left, right);
    if (left.is_array() && right.is_array() && op == "+") {
      std::vector<Value> items = left.items();
      items.insert(items.end(), right.items().begin(), right.items().end());
      return Value::array(std::move(items));
    }
    if (right.is_array() && membership) {
      const bool found = std::any_of(right.items().begin(), right.items().end(),
                                     [&](const Value& x) { return strict_equal(left, x); });
      return Value::boolean(found == (op == "in"));
    }
    if ((left.is_string() || right.is_string()) && op == "+")
      return Value::string(to_concat_text(left) + to_concat_text(right));
    if (left.is_string() && right.is_string()) {
      if (membership)
        return Value::boolean((right.as_string().find(left.as_string()) != std::string::npos) ==
                              (op == "in"));
      const int c = left.as_string().compare(right.as_string());
      if (op == "<") return Value::boolean(c < 0);
      if (op == ">") return Value::boolean(c > 0);
      if (op == "<=") return Value::boolean(c <= 0);
      if (op == ">=") return Value::boolean(c >= 0);
    }
    if (left.is_string() && right.is_mapping_like() && membership)
      return Value::boolean((right.entries().find(left.as_string()) != nullptr) == (op == "in"));
    fail(str_cat("cannot apply '", op, "' to a ", left.type_name(), " and a ", right.type_name()));
  }

  static std::string describe_operand(const Node& n, const Value& v) {
    if (n.kind == Node::Kind::kName) return str_cat(n.text, " = ", v.type_name());
    if (n.kind == Node::Kind::kAttribute) return str_cat(".", n.text, " = ", v.type_name());
    return v.type_name();
  }

  static Value arithmetic(const std::string& op, const Value& left, const Value& right) {
    const bool ints = left.kind() == Value::Kind::kInt && right.kind() == Value::Kind::kInt;
    const double a = left.as_double(), b = right.as_double();
    if (op == "<") return Value::boolean(a < b);
    if (op == ">") return Value::boolean(a > b);
    if (op == "<=") return Value::boolean(a <= b);
    if (op == ">=") return Value::boolean(a >= b);
    if (op == "/") {
      if (b == 0) fail("division by zero");
      return Value::floating(a / b);
    }
    if (ints) {
      const int64_t x = left.as_int(), y = right.as_int();
      int64_t r = 0;
      if (op == "+" && !__builtin_add_overflow(x, y, &r)) return Value::integer(r);
      if (op == "-" && !__builtin_sub_overflow(x, y, &r)) return Value::integer(r);
      if (op == "*" && !__builtin_mul_overflow(x, y, &r)) return Value::integer(r);
      if (op == "+" || op == "-" || op == "*") fail(str_cat("integer overflow in '", op, "'"));
      if (y == 0) fail(op == "%" ? "modulo by zero" : "division by zero");
      if (op == "//") return Value::integer(static_cast<int64_t>(std::floor(a / b)));
      if (op == "%") return Value::integer(x % y);  // JavaScript's %: the dividend's sign
    }
    if (op == "+") return Value::floating(a + b);
    if (op == "-") return Value::floating(a - b);
    if (op == "*") return Value::floating(a * b);
    if (b == 0) fail(op == "%" ? "modulo by zero" : "division by zero");
    if (op == "//") return Value::floating(std::floor(a / b));
    if (op == "%") return Value::floating(std::fmod(a, b));
    fail(str_cat("cannot apply '", op, "' to numbers"));
  }

  // ---- filters ----

  Value apply_filter(const Node& n, const Value& v, const ScopePtr& scope) {
    CallArgs a = eval_args(n.args, scope);
    try {
      return filter(n.text, v, a, scope);
    } catch (Error& e) {
      if (e.offset == kNoOffset) e.offset = n.offset;
      throw;
    }
  }

  [[noreturn]] static void not_for(const std::string& name, const Value& v) {
    fail(str_cat("the filter '", name, "' does not apply to a ", v.type_name()));
  }

  Value filter(const std::string& name, const Value& v, CallArgs& a, const ScopePtr& scope) {
    using Kind = Value::Kind;
    if (name == "safe") return v;
    if (name == "tojson") {
      JsonOptions o;
      const Value& indent = a.get(0, "indent");
      if (!indent.is_undefined() && !indent.is_none())
        o.indent =
            static_cast<int>(std::clamp<int64_t>(int_arg(indent, "tojson's indent", 0), 0, 64));
      o.ensure_ascii = js_bool_arg(a.kw("ensure_ascii"), "ensure_ascii", false);
      o.sort_keys = js_bool_arg(a.kw("sort_keys"), "sort_keys", false);
      const Value& separators = a.kw("separators");
      if (!separators.is_undefined() && !separators.is_none()) {
        if (!separators.is_array() || separators.items().size() != 2 ||
            !separators.items()[0].is_string() || !separators.items()[1].is_string())
          fail("tojson's separators must be two strings: (item separator, key separator)");
        o.item_separator = separators.items()[0].as_string();
        o.key_separator = separators.items()[1].as_string();
        if (o.item_separator.empty() || o.key_separator.empty())
          fail("tojson's separators must not be empty");
      }
      return Value::string(to_json(v, o));
    }
    if (name == "default" || name == "d") {
      const Value& fallback = a.get(0, "default_value");
      const bool boolean = js_bool_arg(a.get(1, "boolean"), "default's boolean", false);
      if (v.is_undefined() || (boolean && !v.truthy()))
        return fallback.is_undefined() ? Value::string("") : fallback;
      return v;
    }
    if (name == "length" || name == "count") {
      if (v.is_array()) return Value::integer(static_cast<int64_t>(v.items().size()));
      if (v.is_string()) return Value::integer(utf16_length(v.as_string()));
      if (v.is_object()) return Value::integer(static_cast<int64_t>(v.entries().size()));
      not_for(name, v);
    }
    if (name == "list") {
      if (v.is_array()) return v;
      if (v.is_string()) return split_code_points(v.as_string());
      if (v.is_object()) return object_method(v, "keys").as_function().call(a);
      not_for(name, v);
    }
    if (name == "first" || name == "last") {
      const bool first = name == "first";
      if (v.is_array()) {
        if (v.items().empty()) return Value();
        return first ? v.items().front() : v.items().back();
      }
      if (v.is_string()) {
        const Value chars = split_code_points(v.as_string());
        if (chars.items().empty()) return Value();
        return first ? chars.items().front() : chars.items().back();
      }
      not_for(name, v);
    }
    if (name == "reverse") {
      std::vector<Value> items;
      if (v.is_array()) {
        items = v.items();
      } else if (v.is_string()) {
        items = split_code_points(v.as_string()).items();
        std::string out;
        for (auto it = items.rbegin(); it != items.rend(); ++it) out += it->as_string();
        return Value::string(std::move(out));
      } else {
        not_for(name, v);
      }
      std::reverse(items.begin(), items.end());
      return Value::array(std::move(items));
    }
    if (name == "sort") {
      if (!v.is_array()) not_for(name, v);
      const bool reverse = js_bool_arg(a.get(0, "reverse"), "reverse", false);
      const bool case_sensitive = js_bool_arg(a.get(1, "case_sensitive"), "case_sensitive", false);
      const Value& attribute = a.get(2, "attribute");
      std::string path;
      if (attribute.is_string()) path = attribute.as_string();
      if (attribute.kind() == Kind::kInt) path = std::to_string(attribute.as_int());
      std::vector<Value> items = v.items();
      std::stable_sort(items.begin(), items.end(), [&](const Value& x, const Value& y) {
        const int c = path.empty() ? compare_values(x, y, case_sensitive)
                                   : compare_values(attribute_path(x, path),
                                                    attribute_path(y, path), case_sensitive);
        return reverse ? c > 0 : c < 0;
      });
      return Value::array(std::move(items));
    }
    if (name == "join") {
      const Value& sep_v = a.get(0, "separator");
      const Value& d = a.kw("d");
      const std::string sep = !sep_v.is_undefined() ? string_arg(sep_v, "join's separator")
                              : !d.is_undefined()   ? string_arg(d, "join's separator")
                                                    : std::string();
      const Value& attribute = a.get(1, "attribute");
      std::vector<Value> items;
      if (v.is_array())
        items = v.items();
      else if (v.is_string())
        items = split_code_points(v.as_string()).items();
      else
        not_for(name, v);
      std::string out;
      for (size_t i = 0; i < items.size(); ++i) {
        if (i > 0) out += sep;
        out += join_text(attribute.is_string() ? attribute_path(items[i], attribute.as_string())
                                               : items[i]);
      }
      return Value::string(std::move(out));
    }
    if (name == "string") {
      if (v.is_undefined()) return Value::string("");
      return Value::string(to_text(v));
    }
    if (name == "unique") {
      if (!v.is_array()) not_for(name, v);
      std::vector<Value> out;
      for (const Value& item : v.items()) {
        const bool seen = std::any_of(out.begin(), out.end(), [&](const Value& x) {
          return strict_equal(x, item) ||
                 (x.kind() == Kind::kFloat && item.kind() == Kind::kFloat &&
                  std::isnan(x.as_double()) && std::isnan(item.as_double()));
        });
        if (!seen) out.push_back(item);
      }
      return Value::array(std::move(out));
    }
    if (name == "upper" || name == "lower" || name == "title" || name == "capitalize") {
      if (!v.is_string()) not_for(name, v);
      return string_method(v.as_string(), name).as_function().call(a);
    }
    if (name == "trim") {
      if (!v.is_string()) not_for(name, v);
      const Value& chars = a.get(0, "chars");
      if (chars.is_undefined() || chars.is_none())
        return Value::string(js_trim(v.as_string(), true, true));
      return Value::string(
          strip_chars(v.as_string(), string_arg(chars, "trim's chars"), true, true));
    }
    if (name == "indent") {
      if (!v.is_string()) not_for(name, v);
      const Value& width_v = a.get(0, "width");
      std::string unit;
      if (width_v.is_string())
        unit = width_v.as_string();
      else
        unit.assign(static_cast<size_t>(
                        std::clamp<int64_t>(int_arg(width_v, "indent's width", 4), 0, 1024)),
                    ' ');
      const bool first = a.get(1, "first").truthy();
      const bool blank = a.get(2, "blank").truthy();
      std::string out;
      size_t begin = 0;
      for (size_t line = 0;; ++line) {
        const size_t end = v.as_string().find('\n', begin);
        const std::string text =
            v.as_string().substr(begin, end == std::string::npos ? end : end - begin);
        if (line > 0) out += '\n';
        if ((first || line > 0) && (blank || !text.empty())) out += unit;
        out += text;
        if (end == std::string::npos) break;
        begin = end + 1;
      }
      return Value::string(std::move(out));
    }
    if (name == "replace") {
      if (!v.is_string()) not_for(name, v);
      return string_method(v.as_string(), "replace").as_function().call(a);
    }
    if (name == "int" || name == "float") {
      const bool integer = name == "int";
      const Value& fallback_v = a.get(0, "default");
      const Value fallback = !fallback_v.is_undefined() ? fallback_v
                             : integer                  ? Value::integer(0)
                                                        : Value::floating(0);
      if (v.is_string()) {
        if (integer) {
          int64_t i = 0;
          return js_parse_int(v.as_string(), i) ? Value::integer(i) : fallback;
        }
        double f = 0;
        return js_parse_float(v.as_string(), f) ? Value::floating(f) : fallback;
      }
      if (v.kind() == Kind::kBool)
        return integer ? Value::integer(v.as_bool() ? 1 : 0) : Value::floating(v.as_bool() ? 1 : 0);
      if (v.kind() == Kind::kInt) return integer ? v : Value::floating(v.as_double());
      if (v.kind() == Kind::kFloat) {
        if (!integer) return v;
        const double f = std::floor(v.as_double());
        if (!std::isfinite(f) || std::fabs(f) >= 9.2e18) fail("int: the number does not fit");
        return Value::integer(static_cast<int64_t>(f));
      }
      not_for(name, v);
    }
    if (name == "abs") {
      if (v.kind() == Kind::kInt) {
        if (v.as_int() == std::numeric_limits<int64_t>::min()) fail("integer overflow in abs");
        return Value::integer(v.as_int() < 0 ? -v.as_int() : v.as_int());
      }
      if (v.kind() == Kind::kFloat) return Value::floating(std::fabs(v.as_double()));
      not_for(name, v);
    }
    if (name == "round") {
      if (!v.is_number()) not_for(name, v);
      const int64_t precision = int_arg(a.get(0, "precision"), "round's precision", 0);
      const Value& method_v = a.get(1, "method");
      const std::string method =
          method_v.is_undefined() ? "common" : string_arg(method_v, "round's method");
      const double scale = std::pow(10.0, static_cast<double>(precision));
      const double x = v.as_double() * scale;
      double r = 0;
      if (method == "common")
        r = std::nearbyint(x);  // Python's round(): halves to even
      else if (method == "ceil")
        r = std::ceil(x);
      else if (method == "floor")
        r = std::floor(x);
      else
        fail("round's method must be 'common', 'ceil' or 'floor'");
      return Value::floating(r / scale);
    }
    if (name == "bool") {
      if (v.kind() != Kind::kBool) not_for(name, v);
      return v;
    }
    if (name == "items" || name == "keys" || name == "values" || name == "dictsort") {
      if (v.is_undefined() && name == "items") return Value::array();
      if (!v.is_object()) not_for(name, v);
      return object_method(v, name).as_function().call(a);
    }
    if (name == "map") {
      if (!v.is_array()) not_for(name, v);
      std::vector<Value> out;
      const Value& attribute = a.kw("attribute");
      if (!attribute.is_undefined()) {
        const std::string& path = string_arg(attribute, "map's attribute");
        const Value& fallback = a.kw("default");
        for (const Value& item : v.items()) {
          if (!item.is_mapping_like())
            fail(str_cat("map(attribute=...) needs dicts, and an item is a ", item.type_name()));
          Value x = attribute_path(item, path);
          out.push_back(x.is_undefined() ? fallback : x);
        }
        return Value::array(std::move(out));
      }
      if (a.positional.empty()) fail("map needs a filter name or attribute=...");
      const std::string filter_name = string_arg(a.positional[0], "map's filter name");
      CallArgs rest;
      rest.positional.assign(a.positional.begin() + 1, a.positional.end());
      rest.keyword = a.keyword;
      for (const Value& item : v.items()) out.push_back(filter(filter_name, item, rest, scope));
      return Value::array(std::move(out));
    }
    if (name == "selectattr" || name == "rejectattr" || name == "select" || name == "reject") {
      if (!v.is_array()) not_for(name, v);
      const bool select = name == "selectattr" || name == "select";
      const bool by_attribute = name == "selectattr" || name == "rejectattr";
      size_t next = 0;
      std::string attribute;
      if (by_attribute) attribute = string_arg(a.get(next++, "attribute"), "the attribute name");
      const Value& test_v = a.get(next++, "test");
      std::vector<Value> test_args(a.positional.begin() + std::min(next, a.positional.size()),
                                   a.positional.end());
      std::vector<Value> out;
      for (const Value& item : v.items()) {
        bool keep = false;
        if (by_attribute) {
          if (!item.is_mapping_like())
            fail(str_cat(name, " needs dicts, and an item is a ", item.type_name()));
          const Value* x = item.entries().find(attribute);
          // A missing attribute fails the test (as in @huggingface/jinja).
          keep = x != nullptr &&
                 (test_v.is_undefined()
                      ? x->truthy()
                      : apply_test(string_arg(test_v, "the test name"), *x, test_args));
        } else {
          keep = test_v.is_undefined()
                     ? item.truthy()
                     : apply_test(string_arg(test_v, "the test name"), item, test_args);
        }
        if (keep == select) out.push_back(item);
      }
      return Value::array(std::move(out));
    }
    fail(str_cat("unknown filter '", name, "'"));
  }

  static Value split_code_points(const std::string& s) {
    std::vector<Value> out;
    for (std::string& cp : code_points(s)) out.push_back(Value::string(std::move(cp)));
    return Value::array(std::move(out));
  }

  int64_t steps_ = 0;
  int call_depth_ = 0;
};

}  // namespace
}  // namespace jinja

namespace {

// "line L, column C" of a byte offset (columns count code points from 1).
std::string position(const std::string& source, uint32_t offset) {
  if (offset == jinja::kNoOffset) return "template";
  const size_t end = std::min<size_t>(offset, source.size());
  size_t line = 1, line_start = 0;
  for (size_t i = 0; i < end; ++i)
    if (source[i] == '\n') {
      ++line;
      line_start = i + 1;
    }
  const size_t column =
      jinja::code_points(std::string_view(source).substr(line_start, end - line_start)).size() + 1;
  return str_cat("line ", line, ", column ", column);
}

}  // namespace

Result<JinjaTemplate> JinjaTemplate::parse(std::string source) {
  JinjaTemplate t;
  t.source_ = std::make_shared<const std::string>(std::move(source));
  try {
    t.program_ = std::make_shared<const jinja::Program>(jinja::parse_program(*t.source_));
  } catch (const jinja::Error& e) {
    return invalid_argument(position(*t.source_, e.offset), ": ", e.what());
  } catch (const std::exception& e) {
    return internal_error("parsing the template: ", e.what());
  }
  return t;
}

Result<std::string> JinjaTemplate::render(const nlohmann::ordered_json& variables) const {
  if (!variables.is_object())
    return invalid_argument("the template's variables must be a JSON object, not ",
                            variables.type_name());
  try {
    jinja::Interpreter interpreter;
    return interpreter.run(*program_, variables);
  } catch (const jinja::Error& e) {
    return invalid_argument(position(*source_, e.offset), ": ", e.what());
  } catch (const std::bad_alloc&) {
    return Status(ErrorCode::kOutOfMemory, "rendering the template: out of memory");
  } catch (const std::exception& e) {
    return internal_error("rendering the template: ", e.what());
  }
}

}  // namespace hyla::serve

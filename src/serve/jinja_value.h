// The values a Jinja template computes with: JSON's (none, bool, int, float, string, list, dict)
// plus undefined, namespace and function (macros, bound methods, globals). Printing, equality and
// truthiness follow @huggingface/jinja (npm), the reference of the chat-template tests; see
// jinja.h for where that differs from Python's Jinja2.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace hyla::serve::jinja {

class Value;
struct CallArgs;

/// Insertion-ordered string -> Value map (dict and namespace).
class Object {
 public:
  const Value* find(std::string_view key) const;
  void set(const std::string& key, Value value);
  const std::vector<std::pair<std::string, Value>>& entries() const { return entries_; }
  size_t size() const { return entries_.size(); }

 private:
  std::vector<std::pair<std::string, Value>> entries_;
  std::unordered_map<std::string, size_t> index_;  // key -> position in entries_
};

/// A callable: a global (range, namespace, raise_exception, ...), a macro or a bound method.
/// Errors are thrown as jinja::Error (jinja_syntax.h) by the interpreter around it.
struct Function {
  std::string name;
  std::function<Value(CallArgs&)> call;
  /// The values `call` keeps alive (a bound method's dict), so Value::reaches can see into it.
  std::vector<Value> bound{};
};

class Value {
 public:
  enum class Kind {
    kUndefined,
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kArray,
    kObject,
    kNamespace,
    kFunction
  };

  Value() = default;  // undefined
  static Value none() { return Value(Kind::kNone); }
  static Value boolean(bool b);
  static Value integer(int64_t i);
  static Value floating(double f);
  static Value string(std::string s);
  static Value array(std::vector<Value> items = {});
  static Value object(Object entries = {});
  static Value ns(Object entries = {});
  static Value function(std::string name, std::function<Value(CallArgs&)> call,
                        std::vector<Value> bound = {});
  /// JSON -> Value as JSON.parse + @huggingface/jinja would see it: integral numbers are ints,
  /// and keys that are array indices ("0", "17") come first in ascending order (JS objects).
  static Value from_json(const nlohmann::ordered_json& json);

  Kind kind() const { return kind_; }
  bool is_undefined() const { return kind_ == Kind::kUndefined; }
  bool is_none() const { return kind_ == Kind::kNone; }
  bool is_string() const { return kind_ == Kind::kString; }
  bool is_number() const { return kind_ == Kind::kInt || kind_ == Kind::kFloat; }
  bool is_array() const { return kind_ == Kind::kArray; }
  bool is_object() const { return kind_ == Kind::kObject; }
  /// dict or namespace: both answer `x.key` and `x['key']`.
  bool is_mapping_like() const { return kind_ == Kind::kObject || kind_ == Kind::kNamespace; }

  bool as_bool() const { return b_; }
  int64_t as_int() const { return i_; }
  /// int, float or bool as a double.
  double as_double() const;
  const std::string& as_string() const { return *s_; }
  const std::vector<Value>& items() const { return *a_; }
  const Object& entries() const { return *o_; }
  Object& mutable_entries() { return *o_; }
  const Function& as_function() const { return *f_; }

  /// Python truthiness as @huggingface/jinja computes it (empty list/dict false, namespace true).
  bool truthy() const;
  /// The type's name in error messages ("string", "list", "undefined", ...).
  const char* type_name() const;
  /// True when both share the same list / dict / namespace / function object.
  bool same_object(const Value& other) const;
  /// True when `target` (a list, dict, namespace or function) is this value or held by it, at any
  /// depth, through list items, dict and namespace entries and functions' bound values. Each
  /// object is visited once, so shared sub-values cost nothing extra.
  bool reaches(const Value& target) const;

 private:
  explicit Value(Kind kind) : kind_(kind) {}
  Kind kind_ = Kind::kUndefined;
  bool b_ = false;
  int64_t i_ = 0;
  double d_ = 0;
  std::shared_ptr<const std::string> s_;
  std::shared_ptr<std::vector<Value>> a_;
  std::shared_ptr<Object> o_;
  std::shared_ptr<const Function> f_;
};

/// Arguments of a call: positional values, then keyword arguments in call order.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
  /// `caller` for a macro run by a {% call %} block; undefined otherwise.
  Value caller;
  /// The i-th positional argument, else the keyword `name`, else undefined.
  const Value& get(size_t i, std::string_view name) const;
  /// The keyword argument `name` (keyword-only parameters), else undefined.
  const Value& kw(std::string_view name) const { return get(positional.size(), name); }
};

/// JavaScript's Number#toString: shortest round-trip digits, exponent form outside [1e-7, 1e21).
std::string js_number(double x);
/// How `{{ v }}` prints v: floats keep ".0" when integral (1.0), booleans are true/false, lists
/// and dicts print as JSON (", " / ": " separators), none "null", undefined "undefined".
std::string to_text(const Value& v);
/// How `~`, `+` and `join` turn v into text (JavaScript's String(value)): numbers without ".0",
/// lists as their items' to_text joined by ",", dicts as "[object Map]".
std::string to_concat_text(const Value& v);

struct JsonOptions {
  int indent = 0;  ///< 0: one line; n > 0: n spaces per level, "," between items
  bool ensure_ascii = false;
  bool sort_keys = false;
  std::string item_separator, key_separator;  ///< empty: ", " (or "," with indent) and ": "
  bool undefined_as_null = true;              ///< false: undefined prints as `undefined`
};
/// `tojson`: JSON.stringify's strings and numbers, Python's json.dumps separators. Throws
/// jinja::Error for a function.
std::string to_json(const Value& v, const JsonOptions& options = {});

/// `==` as @huggingface/jinja computes it (JavaScript's loose equality on the underlying values:
/// 1 == 1.0 == true, none == undefined, lists and dicts equal only to themselves).
bool loose_equal(const Value& a, const Value& b);
/// `in` on a list, `equalto`: JavaScript's === (1 === 1.0, true !== 1, identity for containers).
bool strict_equal(const Value& a, const Value& b);

/// Length in UTF-16 code units, as JavaScript's String#length counts it.
int64_t utf16_length(std::string_view s);
/// The UTF-8 string split into code points (each its own UTF-8 string).
std::vector<std::string> code_points(std::string_view s);
/// JavaScript's whitespace (\s, String#trim): ASCII space, \t\n\v\f\r, U+00A0, U+1680,
/// U+2000-U+200A, U+2028, U+2029, U+202F, U+205F, U+3000, U+FEFF.
bool is_js_space(char32_t c);
/// Decodes the code point at s[i] (advancing i); invalid bytes decode as themselves.
char32_t decode_utf8(std::string_view s, size_t& i);
std::string encode_utf8(char32_t c);
/// Length in bytes of the JavaScript whitespace run ending at s[end) / starting at s[begin].
size_t js_space_before(std::string_view s, size_t end);
size_t js_space_after(std::string_view s, size_t begin);

}  // namespace hyla::serve::jinja

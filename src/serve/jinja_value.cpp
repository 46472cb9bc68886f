// Jinja values: construction, JSON in and out, printing, equality (see jinja_value.h). The
// printing rules reproduce @huggingface/jinja's runtime.ts (its RuntimeValue#toString and toJSON)
// and JavaScript's Number#toString, which it inherits.
#include "serve/jinja_value.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <unordered_set>

#include "core/error.h"
#include "serve/jinja_syntax.h"

namespace hyla::serve::jinja {

// ---------------------------------------------------------------------------------------------
// Object

const Value* Object::find(std::string_view key) const {
  const auto it = index_.find(std::string(key));
  return it == index_.end() ? nullptr : &entries_[it->second].second;
}

void Object::set(const std::string& key, Value value) {
  const auto it = index_.find(key);
  if (it != index_.end()) {
    entries_[it->second].second = std::move(value);
    return;
  }
  index_.emplace(key, entries_.size());
  entries_.emplace_back(key, std::move(value));
}

// ---------------------------------------------------------------------------------------------
// Value

Value Value::boolean(bool b) {
  Value v(Kind::kBool);
  v.b_ = b;
  return v;
}
Value Value::integer(int64_t i) {
  Value v(Kind::kInt);
  v.i_ = i;
  return v;
}
Value Value::floating(double f) {
  Value v(Kind::kFloat);
  v.d_ = f;
  return v;
}
Value Value::string(std::string s) {
  Value v(Kind::kString);
  v.s_ = std::make_shared<const std::string>(std::move(s));
  return v;
}
Value Value::array(std::vector<Value> items) {
  Value v(Kind::kArray);
  v.a_ = std::make_shared<std::vector<Value>>(std::move(items));
  return v;
}
Value Value::object(Object entries) {
  Value v(Kind::kObject);
  v.o_ = std::make_shared<Object>(std::move(entries));
  return v;
}
Value Value::ns(Object entries) {
  Value v(Kind::kNamespace);
  v.o_ = std::make_shared<Object>(std::move(entries));
  return v;
}
Value Value::function(std::string name, std::function<Value(CallArgs&)> call,
                      std::vector<Value> bound) {
  Value v(Kind::kFunction);
  v.f_ = std::make_shared<const Function>(
      Function{std::move(name), std::move(call), std::move(bound)});
  return v;
}

namespace {

// A JavaScript array index ("0", "42"; no sign or leading zero, below 2^32 - 1): JS objects list
// such keys first, in ascending order, whatever order the JSON text had.
bool is_array_index(const std::string& key, uint64_t& index) {
  if (key.empty() || key.size() > 10 || (key.size() > 1 && key[0] == '0')) return false;
  index = 0;
  for (char c : key) {
    if (c < '0' || c > '9') return false;
    index = index * 10 + static_cast<uint64_t>(c - '0');
  }
  return index < 4294967295ull;
}

}  // namespace

Value Value::from_json(const nlohmann::ordered_json& json) {
  using Type = nlohmann::ordered_json::value_t;
  switch (json.type()) {
    case Type::null: return none();
    case Type::boolean: return boolean(json.get<bool>());
    case Type::number_integer: return integer(json.get<int64_t>());
    case Type::number_unsigned: {
      const uint64_t u = json.get<uint64_t>();
      if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        return integer(static_cast<int64_t>(u));
      return floating(static_cast<double>(u));
    }
    case Type::number_float: {
      const double f = json.get<double>();
      // JSON.parse has one number type; @huggingface/jinja makes the integral ones ints.
      if (std::isfinite(f) && f == std::floor(f) && std::fabs(f) < 9.2e18)
        return integer(static_cast<int64_t>(f));
      return floating(f);
    }
    case Type::string: return string(json.get<std::string>());
    case Type::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(from_json(item));
      return array(std::move(items));
    }
    case Type::object: {
      std::vector<std::pair<uint64_t, const std::string*>> indices;
      for (const auto& [key, _] : json.items()) {
        uint64_t index = 0;
        if (is_array_index(key, index)) indices.emplace_back(index, &key);
      }
      std::sort(indices.begin(), indices.end());
      Object entries;
      for (const auto& [_, key] : indices) entries.set(*key, from_json(json.at(*key)));
      for (const auto& [key, value] : json.items()) {
        uint64_t index = 0;
        if (!is_array_index(key, index)) entries.set(key, from_json(value));
      }
      return object(std::move(entries));
    }
    default: return Value();  // binary / discarded: not produced by JSON text
  }
}

double Value::as_double() const {
  switch (kind_) {
    case Kind::kInt: return static_cast<double>(i_);
    case Kind::kFloat: return d_;
    case Kind::kBool: return b_ ? 1.0 : 0.0;
    default: return std::numeric_limits<double>::quiet_NaN();
  }
}

bool Value::truthy() const {
  switch (kind_) {
    case Kind::kUndefined:
    case Kind::kNone: return false;
    case Kind::kBool: return b_;
    case Kind::kInt: return i_ != 0;
    case Kind::kFloat: return d_ != 0 && !std::isnan(d_);
    case Kind::kString: return !s_->empty();
    case Kind::kArray: return !a_->empty();
    case Kind::kObject: return o_->size() > 0;
    case Kind::kNamespace:
    case Kind::kFunction: return true;
  }
  return false;
}

const char* Value::type_name() const {
  switch (kind_) {
    case Kind::kUndefined: return "undefined";
    case Kind::kNone: return "none";
    case Kind::kBool: return "boolean";
    case Kind::kInt: return "integer";
    case Kind::kFloat: return "float";
    case Kind::kString: return "string";
    case Kind::kArray: return "list";
    case Kind::kObject: return "dict";
    case Kind::kNamespace: return "namespace";
    case Kind::kFunction: return "function";
  }
  return "?";
}

bool Value::same_object(const Value& other) const {
  if (kind_ != other.kind_) return false;
  switch (kind_) {
    case Kind::kArray: return a_ == other.a_;
    case Kind::kObject:
    case Kind::kNamespace: return o_ == other.o_;
    case Kind::kFunction: return f_ == other.f_;
    default: return false;
  }
}

bool Value::reaches(const Value& target) const {
  std::unordered_set<const void*> seen;
  std::vector<const Value*> todo = {this};
  while (!todo.empty()) {
    const Value* v = todo.back();
    todo.pop_back();
    if (v->same_object(target)) return true;
    const void* address = nullptr;
    if (v->kind_ == Kind::kArray) address = v->a_.get();
    if (v->kind_ == Kind::kObject || v->kind_ == Kind::kNamespace) address = v->o_.get();
    if (v->kind_ == Kind::kFunction) address = v->f_.get();
    if (address == nullptr || !seen.insert(address).second) continue;
    switch (v->kind_) {
      case Kind::kArray:
        for (const Value& item : *v->a_) todo.push_back(&item);
        break;
      case Kind::kObject:
      case Kind::kNamespace:
        for (const auto& entry : v->o_->entries()) todo.push_back(&entry.second);
        break;
      case Kind::kFunction:
        for (const Value& held : v->f_->bound) todo.push_back(&held);
        break;
      default: break;
    }
  }
  return false;
}

const Value& CallArgs::get(size_t i, std::string_view name) const {
  static const Value kUndefined;
  if (i < positional.size()) return positional[i];
  for (const auto& [key, value] : keyword)
    if (key == name) return value;
  return kUndefined;
}

// ---------------------------------------------------------------------------------------------
// Numbers and text

std::string js_number(double x) {
  if (std::isnan(x)) return "NaN";
  if (std::isinf(x)) return x > 0 ? "Infinity" : "-Infinity";
  if (x == 0) return "0";
  if (x < 0) return std::string(1, '-').append(js_number(-x));
  // The shortest decimal digits that read back as x, and the exponent of the first one.
  char buffer[40];
  for (int precision = 1; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*e", precision - 1, x);
    if (std::strtod(buffer, nullptr) == x) break;
  }
  const std::string text = buffer;
  const size_t e = text.find('e');
  std::string digits;
  for (size_t i = 0; i < e; ++i)
    if (text[i] != '.') digits += text[i];
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  const int n = std::atoi(text.c_str() + e + 1) + 1;  // x = 0.digits * 10^n
  const int k = static_cast<int>(digits.size());
  if (k <= n && n <= 21) return digits + std::string(static_cast<size_t>(n - k), '0');
  if (0 < n && n <= 21) return digits.substr(0, n) + "." + digits.substr(n);
  if (-6 < n && n <= 0) {
    std::string out = "0.";
    out.append(static_cast<size_t>(-n), '0');
    return out.append(digits);
  }
  const int exponent = n - 1;
  std::string mantissa = k == 1 ? digits : digits.substr(0, 1) + "." + digits.substr(1);
  return mantissa + "e" + (exponent < 0 ? "-" : "+") + std::to_string(std::abs(exponent));
}

namespace {

// @huggingface/jinja's FloatValue#toString: integral values keep ".0" (toFixed(1)).
std::string float_text(double x) {
  if (x == 0 && std::signbit(x)) return "-0.0";
  if (std::isfinite(x) && x == std::floor(x)) {
    if (std::fabs(x) >= 1e21) return js_number(x);
    char buffer[48];
    std::snprintf(buffer, sizeof(buffer), "%.1f", x);
    return buffer;
  }
  return js_number(x);
}

// @huggingface/jinja's integers are JavaScript numbers: beyond 2^53 they print rounded.
std::string int_text(int64_t i) {
  constexpr int64_t kExact = int64_t{1} << 53;
  if (i > kExact || i < -kExact) return js_number(static_cast<double>(i));
  return std::to_string(i);
}

[[noreturn]] void value_error(const std::string& message) { throw Error(kNoOffset, message); }

void append_hex4(std::string& out, unsigned code) {
  static const char kHex[] = "0123456789abcdef";
  out += "\\u";
  for (int shift = 12; shift >= 0; shift -= 4) out += kHex[(code >> shift) & 0xF];
}

// JSON.stringify of a string (control characters escaped, the rest as is), and with
// ensure_ascii every code point from U+007F escaped as UTF-16 \uXXXX units.
void append_json_string(std::string& out, std::string_view s, bool ensure_ascii) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0x80 && !(ensure_ascii && c == 0x7F)) {
      ++i;
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\b': out += "\\b"; break;
        case '\f': out += "\\f"; break;
        case '\n': out += "\\n"; break;
        case '\r': out += "\\r"; break;
        case '\t': out += "\\t"; break;
        default:
          if (c < 0x20)
            append_hex4(out, c);
          else
            out += static_cast<char>(c);
      }
      continue;
    }
    const size_t begin = i;
    const char32_t cp = decode_utf8(s, i);
    if (!ensure_ascii) {
      out.append(s.substr(begin, i - begin));
    } else if (cp >= 0x10000) {
      append_hex4(out, 0xD800 + ((cp - 0x10000) >> 10));
      append_hex4(out, 0xDC00 + ((cp - 0x10000) & 0x3FF));
    } else {
      append_hex4(out, cp);
    }
  }
  out += '"';
}

// String#localeCompare's order for keys, approximated: punctuation, then digits, then letters
// (case-insensitive, lowercase first on a tie).
bool locale_less(const std::string& a, const std::string& b) {
  auto primary = [](unsigned char c) {
    if (c >= 'a' && c <= 'z') return 3000 + (c - 'a');
    if (c >= 'A' && c <= 'Z') return 3000 + (c - 'A');
    if (c >= '0' && c <= '9') return 2000 + (c - '0');
    return c < 0x80 ? 1000 + c : 4000 + c;
  };
  const size_t n = std::min(a.size(), b.size());
  for (size_t i = 0; i < n; ++i) {
    const int pa = primary(static_cast<unsigned char>(a[i]));
    const int pb = primary(static_cast<unsigned char>(b[i]));
    if (pa != pb) return pa < pb;
  }
  if (a.size() != b.size()) return a.size() < b.size();
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return std::islower(static_cast<unsigned char>(a[i])) != 0;
  return false;
}

// Deeper values can only come from a namespace that holds itself (ns.x = ns).
constexpr int kMaxPrintDepth = 256;

void append_json(std::string& out, const Value& v, const JsonOptions& o, int depth) {
  using Kind = Value::Kind;
  if (depth > kMaxPrintDepth)
    value_error(str_cat("cannot print a value nested deeper than ", kMaxPrintDepth,
                        " levels (does it contain itself?)"));
  switch (v.kind()) {
    case Kind::kNone: out += "null"; return;
    case Kind::kUndefined: out += o.undefined_as_null ? "null" : "undefined"; return;
    case Kind::kBool: out += v.as_bool() ? "true" : "false"; return;
    case Kind::kInt: out += int_text(v.as_int()); return;
    case Kind::kFloat: {
      const double f = v.as_double();
      out += std::isfinite(f) ? js_number(f) : "null";
      return;
    }
    case Kind::kString: append_json_string(out, v.as_string(), o.ensure_ascii); return;
    case Kind::kFunction: value_error("cannot convert a function (a macro or method) to JSON");
    default: break;
  }
  const std::string item_separator =
      !o.item_separator.empty() ? o.item_separator : (o.indent > 0 ? "," : ", ");
  const std::string key_separator = !o.key_separator.empty() ? o.key_separator : ": ";
  const std::string unit(static_cast<size_t>(std::max(o.indent, 0)), ' ');
  std::string base = "\n";
  for (int d = 0; d < depth; ++d) base += unit;
  const std::string child = base + unit;
  if (v.kind() == Kind::kArray) {
    const auto& items = v.items();
    out += '[';
    for (size_t i = 0; i < items.size(); ++i) {
      if (i > 0) out += item_separator;
      if (o.indent > 0) out += child;
      append_json(out, items[i], o, depth + 1);
    }
    if (o.indent > 0 && !items.empty()) out += base;
    out += ']';
    return;
  }
  std::vector<const std::pair<std::string, Value>*> entries;
  for (const auto& entry : v.entries().entries()) entries.push_back(&entry);
  if (o.sort_keys)
    std::stable_sort(entries.begin(), entries.end(),
                     [](const auto* x, const auto* y) { return locale_less(x->first, y->first); });
  out += '{';
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i > 0) out += item_separator;
    if (o.indent > 0) out += child;
    append_json_string(out, entries[i]->first, o.ensure_ascii);
    out += key_separator;
    append_json(out, entries[i]->second, o, depth + 1);
  }
  if (o.indent > 0 && !entries.empty()) out += base;
  out += '}';
}

}  // namespace

std::string to_json(const Value& v, const JsonOptions& options) {
  std::string out;
  append_json(out, v, options, 0);
  return out;
}

std::string to_text(const Value& v) {
  using Kind = Value::Kind;
  switch (v.kind()) {
    case Kind::kUndefined: return "undefined";
    case Kind::kNone: return "null";
    case Kind::kBool: return v.as_bool() ? "true" : "false";
    case Kind::kInt: return int_text(v.as_int());
    case Kind::kFloat: return float_text(v.as_double());
    case Kind::kString: return v.as_string();
    case Kind::kFunction: value_error("cannot print a function (a macro or method) as text");
    default: {
      JsonOptions options;
      options.undefined_as_null = false;
      return to_json(v, options);
    }
  }
}

std::string to_concat_text(const Value& v) {
  using Kind = Value::Kind;
  switch (v.kind()) {
    case Kind::kFloat: return js_number(v.as_double());
    case Kind::kArray: {
      std::string out;
      for (size_t i = 0; i < v.items().size(); ++i) {
        if (i > 0) out += ',';
        out += to_text(v.items()[i]);
      }
      return out;
    }
    case Kind::kObject:
    case Kind::kNamespace: return "[object Map]";
    default: return to_text(v);
  }
}

// ---------------------------------------------------------------------------------------------
// Equality

namespace {

bool is_container(const Value& v) {
  return v.kind() == Value::Kind::kArray || v.is_mapping_like() ||
         v.kind() == Value::Kind::kFunction;
}

// JavaScript's Number(string): surrounding whitespace ignored, "" is 0, else a decimal literal.
double js_to_number(const std::string& s) {
  size_t begin = js_space_after(s, 0);
  size_t end = s.size() - js_space_before(s, s.size());
  if (begin >= end) return 0;
  const std::string t = s.substr(begin, end - begin);
  if (t == "Infinity" || t == "+Infinity") return std::numeric_limits<double>::infinity();
  if (t == "-Infinity") return -std::numeric_limits<double>::infinity();
  for (char c : t)
    if (!(std::isdigit(static_cast<unsigned char>(c)) || c == '.' || c == 'e' || c == 'E' ||
          c == '+' || c == '-'))
      return std::numeric_limits<double>::quiet_NaN();
  char* stop = nullptr;
  const double x = std::strtod(t.c_str(), &stop);
  return stop == t.c_str() + t.size() ? x : std::numeric_limits<double>::quiet_NaN();
}

}  // namespace

bool loose_equal(const Value& a, const Value& b) {
  const bool a_nullish = a.is_none() || a.is_undefined();
  const bool b_nullish = b.is_none() || b.is_undefined();
  if (a_nullish || b_nullish) return a_nullish && b_nullish;
  if (is_container(a) && is_container(b)) return a.same_object(b);
  if (is_container(a)) return loose_equal(Value::string(to_concat_text(a)), b);
  if (is_container(b)) return loose_equal(a, Value::string(to_concat_text(b)));
  if (a.is_string() && b.is_string()) return a.as_string() == b.as_string();
  const double x = a.is_string() ? js_to_number(a.as_string()) : a.as_double();
  const double y = b.is_string() ? js_to_number(b.as_string()) : b.as_double();
  return x == y;
}

bool strict_equal(const Value& a, const Value& b) {
  if (a.is_number() && b.is_number()) return a.as_double() == b.as_double();
  if (a.kind() != b.kind()) return false;
  switch (a.kind()) {
    case Value::Kind::kUndefined:
    case Value::Kind::kNone: return true;
    case Value::Kind::kBool: return a.as_bool() == b.as_bool();
    case Value::Kind::kString: return a.as_string() == b.as_string();
    default: return a.same_object(b);
  }
}

// ---------------------------------------------------------------------------------------------
// UTF-8

char32_t decode_utf8(std::string_view s, size_t& i) {
  const unsigned char c = static_cast<unsigned char>(s[i]);
  const int extra = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
  if (extra == 0 || c >= 0xF8 || i + static_cast<size_t>(extra) >= s.size()) {
    ++i;
    return c;  // ASCII, or a byte that starts no complete sequence: it stands for itself
  }
  char32_t cp = c & (0x3F >> extra);
  for (int k = 1; k <= extra; ++k) {
    const unsigned char d = static_cast<unsigned char>(s[i + static_cast<size_t>(k)]);
    if ((d & 0xC0) != 0x80) {
      ++i;
      return c;  // a broken sequence: its first byte stands for itself
    }
    cp = (cp << 6) | (d & 0x3F);
  }
  i += static_cast<size_t>(extra) + 1;
  return cp;
}

std::string encode_utf8(char32_t c) {
  std::string out;
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
  return out;
}

bool is_js_space(char32_t c) {
  return c == ' ' || (c >= 0x09 && c <= 0x0D) || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000 || c == 0xFEFF;
}

size_t js_space_after(std::string_view s, size_t begin) {
  size_t i = begin;
  while (i < s.size()) {
    size_t j = i;
    if (!is_js_space(decode_utf8(s, j))) break;
    i = j;
  }
  return i - begin;
}

size_t js_space_before(std::string_view s, size_t end) {
  size_t i = end;
  while (i > 0) {
    size_t start = i - 1;  // back up to the first byte of the code point ending at i
    while (start > 0 && i - start < 4 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80)
      --start;
    size_t j = start;
    const char32_t c = decode_utf8(s, j);
    if (j != i || !is_js_space(c)) break;
    i = start;
  }
  return end - i;
}

int64_t utf16_length(std::string_view s) {
  int64_t n = 0;
  for (size_t i = 0; i < s.size();) n += decode_utf8(s, i) >= 0x10000 ? 2 : 1;
  return n;
}

std::vector<std::string> code_points(std::string_view s) {
  std::vector<std::string> out;
  for (size_t i = 0; i < s.size();) {
    const size_t begin = i;
    decode_utf8(s, i);
    out.emplace_back(s.substr(begin, i - begin));
  }
  return out;
}

}  // namespace hyla::serve::jinja

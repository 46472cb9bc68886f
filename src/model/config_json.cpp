// Typed reads of config.json fields (see config_json.h).
#include "model/config_json.h"

#include <cmath>

#include "model/json_file.h"

namespace hyla::model {

namespace {

const nlohmann::json* field(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

[[noreturn]] void type_error(const char* key, const char* expected, const nlohmann::json& got) {
  throw ConfigFieldError(
      str_cat("field '", key, "' must be ", expected, ", got ", json_excerpt(got)));
}

int64_t as_int(const char* key, const nlohmann::json& v, IntRange range) {
  int64_t value = 0;
  if (v.is_number_unsigned()) {
    if (v.get<uint64_t>() > uint64_t(INT64_MAX)) type_error(key, "an integer", v);
    value = int64_t(v.get<uint64_t>());
  } else if (v.is_number_integer()) {
    value = v.get<int64_t>();
  } else if (v.is_number_float()) {
    // Integral floats (4.0, 1e9) read as integers; the range test comes first so that the cast
    // below is defined.
    const double x = v.get<double>();
    if (!(x >= -9.2e18 && x <= 9.2e18) || x != std::floor(x)) type_error(key, "an integer", v);
    value = int64_t(x);
  } else {
    type_error(key, "an integer", v);
  }
  if (value < range.min || value > range.max)
    throw ConfigFieldError(str_cat("field '", key, "' is ", json_excerpt(v),
                                   ", expected an integer in [", range.min, ", ", range.max, "]"));
  return value;
}

}  // namespace

int64_t config_int(const nlohmann::json& j, const char* key, IntRange range) {
  const nlohmann::json* v = field(j, key);
  if (!v) throw ConfigFieldError(str_cat("missing required field '", key, "'"));
  return as_int(key, *v, range);
}

int64_t config_int(const nlohmann::json& j, const char* key, int64_t fallback, IntRange range) {
  const nlohmann::json* v = field(j, key);
  return v ? as_int(key, *v, range) : fallback;
}

double config_number(const nlohmann::json& j, const char* key, double fallback) {
  const nlohmann::json* v = field(j, key);
  if (!v) return fallback;
  if (!v->is_number() || !std::isfinite(v->get<double>())) type_error(key, "a finite number", *v);
  return v->get<double>();
}

bool config_bool(const nlohmann::json& j, const char* key, bool fallback) {
  const nlohmann::json* v = field(j, key);
  if (!v) return fallback;
  if (!v->is_boolean()) type_error(key, "true or false", *v);
  return v->get<bool>();
}

std::vector<int64_t> config_int_list(const nlohmann::json& j, const char* key,
                                     std::vector<int64_t> fallback, IntRange range) {
  const nlohmann::json* v = field(j, key);
  if (!v) return fallback;
  if (!v->is_array()) type_error(key, "a list of integers", *v);
  std::vector<int64_t> out;
  for (const nlohmann::json& e : *v) out.push_back(as_int(key, e, range));
  return out;
}

std::optional<std::vector<std::string>> config_string_list(const nlohmann::json& j,
                                                           const char* key) {
  const nlohmann::json* v = field(j, key);
  if (!v) return std::nullopt;
  if (!v->is_array()) type_error(key, "a list of strings", *v);
  std::vector<std::string> out;
  for (const nlohmann::json& e : *v) {
    if (!e.is_string()) type_error(key, "a list of strings", *v);
    out.push_back(e.get<std::string>());
  }
  return out;
}

const nlohmann::json& config_object(const nlohmann::json& j, const char* key) {
  static const nlohmann::json kNull;
  const nlohmann::json* v = field(j, key);
  if (!v) return kNull;
  if (!v->is_object()) type_error(key, "an object", *v);
  return *v;
}

}  // namespace hyla::model

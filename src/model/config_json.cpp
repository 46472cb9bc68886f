// Typed reads of config.json fields (see config_json.h).
#include "model/config_json.h"

namespace hyla::model {

namespace {

const nlohmann::json* field(const nlohmann::json& j, const char* key) {
  if (!j.is_object()) return nullptr;
  auto it = j.find(key);
  return it == j.end() || it->is_null() ? nullptr : &*it;
}

[[noreturn]] void type_error(const char* key, const char* expected, const nlohmann::json& got) {
  throw ConfigFieldError(str_cat("field '", key, "' must be ", expected, ", got ", got.dump()));
}

int64_t as_int(const char* key, const nlohmann::json& v) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_number_float() && v.get<double>() == double(int64_t(v.get<double>())))
    return int64_t(v.get<double>());
  type_error(key, "an integer", v);
}

}  // namespace

int64_t config_int(const nlohmann::json& j, const char* key) {
  const nlohmann::json* v = field(j, key);
  if (!v) throw ConfigFieldError(str_cat("missing required field '", key, "'"));
  return as_int(key, *v);
}

int64_t config_int(const nlohmann::json& j, const char* key, int64_t fallback) {
  const nlohmann::json* v = field(j, key);
  return v ? as_int(key, *v) : fallback;
}

double config_number(const nlohmann::json& j, const char* key, double fallback) {
  const nlohmann::json* v = field(j, key);
  if (!v) return fallback;
  if (!v->is_number()) type_error(key, "a number", *v);
  return v->get<double>();
}

bool config_bool(const nlohmann::json& j, const char* key, bool fallback) {
  const nlohmann::json* v = field(j, key);
  if (!v) return fallback;
  if (!v->is_boolean()) type_error(key, "true or false", *v);
  return v->get<bool>();
}

std::vector<int64_t> config_int_list(const nlohmann::json& j, const char* key,
                                     std::vector<int64_t> fallback) {
  const nlohmann::json* v = field(j, key);
  if (!v) return fallback;
  if (!v->is_array()) type_error(key, "a list of integers", *v);
  std::vector<int64_t> out;
  for (const nlohmann::json& e : *v) out.push_back(as_int(key, e));
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

// Typed reads of config.json fields for the architecture parsers. A missing or mistyped field
// throws ConfigFieldError naming the field; parse_config functions catch it at their boundary
// (config_field_guard) and return it as a Status.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "core/error.h"

namespace hyla::model {

struct ConfigFieldError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

/// Required integer field.
int64_t config_int(const nlohmann::json& j, const char* key);
/// Optional integer field (fallback when absent or null).
int64_t config_int(const nlohmann::json& j, const char* key, int64_t fallback);
double config_number(const nlohmann::json& j, const char* key, double fallback);
bool config_bool(const nlohmann::json& j, const char* key, bool fallback);
std::vector<int64_t> config_int_list(const nlohmann::json& j, const char* key,
                                     std::vector<int64_t> fallback);
std::optional<std::vector<std::string>> config_string_list(const nlohmann::json& j,
                                                           const char* key);
/// An object field, or null json when absent.
const nlohmann::json& config_object(const nlohmann::json& j, const char* key);

/// Runs parse(), turning ConfigFieldError into "<source>: <message>".
template <typename Parse>
auto config_field_guard(const std::string& source, Parse&& parse) -> decltype(parse()) {
  try {
    return parse();
  } catch (const ConfigFieldError& e) {
    return invalid_argument(source, ": ", e.what());
  }
}

}  // namespace hyla::model

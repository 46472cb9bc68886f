// Typed reads of config.json fields for the architecture parsers. Every integer is read with the
// range it may take (IntRange), because config integers become divisors, counts, sizes and indices;
// a missing, mistyped or out-of-range field throws ConfigFieldError naming the field, the value
// found and what is allowed; parse_config functions catch it at their boundary
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

/// Inclusive bounds of an integer field.
struct IntRange {
  int64_t min;
  int64_t max;
};

/// Required integer field within `range`. An integral float (4.0) reads as an integer; 4.5, a
/// string, a bool or a number outside int64 is a type error.
int64_t config_int(const nlohmann::json& j, const char* key, IntRange range);
/// Optional integer field: `fallback` when absent or null, else within `range`.
int64_t config_int(const nlohmann::json& j, const char* key, int64_t fallback, IntRange range);
/// Optional finite number (fallback when absent or null).
double config_number(const nlohmann::json& j, const char* key, double fallback);
bool config_bool(const nlohmann::json& j, const char* key, bool fallback);
/// Optional list of integers, each within `range`.
std::vector<int64_t> config_int_list(const nlohmann::json& j, const char* key,
                                     std::vector<int64_t> fallback, IntRange range);
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

// Reading JSON (config.json, model.safetensors.index.json, safetensors headers) into
// nlohmann::json with errors that name the path, and rendering JSON values into messages.
// Input is checked for nesting depth before it is parsed: nlohmann parses and destroys iteratively,
// but dump(), copies and comparisons recurse once per level, so a value nested 100,000 deep would
// overflow the stack the moment anything printed or copied it.
#pragma once

#include <nlohmann/json.hpp>

#include <cstddef>
#include <string>
#include <string_view>

#include "core/error.h"

namespace hyla::model {

/// The deepest nesting of arrays and objects accepted. Real configs and headers nest at most about
/// 6 levels; at 64 the recursive operations use a few kilobytes of stack.
constexpr int kMaxJsonDepth = 64;

/// Ok when no array or object in `text` is nested deeper than kMaxJsonDepth (brackets inside
/// strings do not count; malformed text is left to the parser). The error names `what`, the
/// object keys leading to the deep value and the byte offset: "<what>: field 'a.b' nests arrays
/// or objects deeper than 64 levels (at byte 80)".
Status check_json_depth(std::string_view text, const std::string& what);

/// The parser's message, at most ~200 characters (nlohmann quotes the whole last token, which for
/// an unterminated string is the rest of the file).
std::string json_parse_error_message(const nlohmann::json::parse_error& e);

/// check_json_depth + parse. Errors: "<what>: invalid JSON: <parser message>" and the depth error.
Result<nlohmann::json> parse_json(std::string_view text, const std::string& what);

/// The parsed file. Errors: the file is missing (kNotFound) or unreadable (kIo), is nested too
/// deep or is not valid JSON (kInvalidArgument, with the parser's line and column).
Result<nlohmann::json> read_json_file(const std::string& path);

/// A one-line rendering of `value` for messages, compact like dump() ([1,2], {"a":1}), at most
/// `max_chars` characters (longer ones end in "..."); containers below a few levels print as [...]
/// / {...}. Never throws, never recurses deeper than a few levels, so any value can be quoted
/// safely.
std::string json_excerpt(const nlohmann::json& value, size_t max_chars = 80);

/// `text` cut to at most `max_bytes` bytes (on a UTF-8 boundary) plus "..." when longer: for
/// quoting names and strings from a file in messages.
std::string text_excerpt(std::string_view text, size_t max_bytes = 160);

}  // namespace hyla::model

// JSON reading, depth checks and bounded rendering (see json_file.h).
#include "model/json_file.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

namespace hyla::model {

namespace {

/// Cuts `s` to at most `max_bytes` bytes without splitting a UTF-8 sequence.
std::string utf8_prefix(std::string_view s, size_t max_bytes) {
  if (s.size() <= max_bytes) return std::string(s);
  size_t end = max_bytes;
  while (end > 0 && (static_cast<unsigned char>(s[end]) & 0xC0) == 0x80) --end;
  return std::string(s.substr(0, end));
}

/// A JSON string literal of (at most the first `max_bytes` of) `s`; invalid UTF-8 is replaced.
std::string quoted(std::string_view s, size_t max_bytes) {
  const nlohmann::json text = utf8_prefix(s, max_bytes);
  return text.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) +
         (s.size() > max_bytes ? "..." : "");
}

// Containers nested deeper than this inside a quoted value print as [...] / {...}.
constexpr int kExcerptDepth = 4;

void render(const nlohmann::json& v, int depth, size_t budget, std::string& out) {
  if (out.size() > budget) return;
  switch (v.type()) {
    case nlohmann::json::value_t::array: {
      if (depth >= kExcerptDepth) {
        out += v.empty() ? "[]" : "[...]";
        return;
      }
      out += '[';
      bool first = true;
      for (const nlohmann::json& e : v) {
        if (out.size() > budget) break;
        if (!first) out += ',';
        first = false;
        render(e, depth + 1, budget, out);
      }
      out += ']';
      return;
    }
    case nlohmann::json::value_t::object: {
      if (depth >= kExcerptDepth) {
        out += v.empty() ? "{}" : "{...}";
        return;
      }
      out += '{';
      bool first = true;
      for (const auto& [key, e] : v.items()) {
        if (out.size() > budget) break;
        if (!first) out += ',';
        first = false;
        out += quoted(key, budget);
        out += ':';
        render(e, depth + 1, budget, out);
      }
      out += '}';
      return;
    }
    case nlohmann::json::value_t::string:
      out += quoted(v.get_ref<const std::string&>(), budget);
      return;
    case nlohmann::json::value_t::number_float: {
      const double x = v.get<double>();
      if (!std::isfinite(x)) {  // dump() would print null
        out += std::isnan(x) ? "nan" : x > 0 ? "inf" : "-inf";
        return;
      }
      out += v.dump();
      return;
    }
    case nlohmann::json::value_t::binary: out += "<binary>"; return;
    case nlohmann::json::value_t::discarded: out += "<discarded>"; return;
    default: out += v.dump(); return;  // null, boolean, integers
  }
}

}  // namespace

Status check_json_depth(std::string_view text, const std::string& what) {
  // One entry per open container: whether it is an object, and the last key read in it.
  struct Level {
    bool object;
    std::string_view key;
  };
  std::vector<Level> open;
  for (size_t at = 0; at < text.size(); ++at) {
    const char ch = text[at];
    if (ch == '"') {
      const size_t begin = at + 1;
      for (++at; at < text.size() && text[at] != '"'; ++at)
        if (text[at] == '\\') ++at;               // skip the escaped character
      if (at >= text.size()) return ok_status();  // unterminated string: the parser says so
      // A string followed by ':' inside an object is a key.
      size_t next = at + 1;
      while (next < text.size() &&
             (text[next] == ' ' || text[next] == '\t' || text[next] == '\n' || text[next] == '\r'))
        ++next;
      if (!open.empty() && open.back().object && next < text.size() && text[next] == ':')
        open.back().key = text.substr(begin, at - begin);
    } else if (ch == '[' || ch == '{') {
      if (int(open.size()) == kMaxJsonDepth) {
        std::string path;
        for (const Level& level : open) {
          if (!level.object || level.key.empty()) continue;
          if (path.size() > 120) {
            path += ".(...)";
            break;
          }
          path += str_cat(path.empty() ? "" : ".", utf8_prefix(level.key, 60));
        }
        return invalid_argument(what, ": ", path.empty() ? "the value" : "field '" + path + "'",
                                " nests arrays or objects deeper than ", kMaxJsonDepth,
                                " levels (at byte ", at, "); expected at most ", kMaxJsonDepth);
      }
      open.push_back({ch == '{', {}});
    } else if (ch == ']' || ch == '}') {
      if (open.empty()) return ok_status();  // unbalanced: the parser says so
      open.pop_back();
    }
  }
  return ok_status();
}

std::string json_parse_error_message(const nlohmann::json::parse_error& e) {
  constexpr size_t kMaxChars = 200;
  const std::string_view what = e.what();
  return what.size() <= kMaxChars
             ? std::string(what)
             : str_cat(utf8_prefix(what, kMaxChars), "... (byte ", e.byte, ")");
}

Result<nlohmann::json> parse_json(std::string_view text, const std::string& what) {
  HYLA_RETURN_IF_ERROR(check_json_depth(text, what));
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::parse_error& e) {
    return invalid_argument(what, ": invalid JSON: ", json_parse_error_message(e));
  }
}

Result<nlohmann::json> read_json_file(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    return Status(ErrorCode::kNotFound, str_cat("JSON file '", path, "' does not exist"));
  if (std::filesystem::is_directory(path, ec))
    return Status(ErrorCode::kIo, str_cat("JSON file '", path, "' is a directory"));
  std::ifstream in(path, std::ios::binary);
  if (!in)
    return Status(ErrorCode::kIo,
                  str_cat("cannot open JSON file '", path, "': ", std::strerror(errno)));
  const std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  if (in.bad())
    return Status(ErrorCode::kIo,
                  str_cat("cannot read JSON file '", path, "': ", std::strerror(errno)));
  return parse_json(text, path);
}

std::string text_excerpt(std::string_view text, size_t max_bytes) {
  return text.size() <= max_bytes ? std::string(text) : utf8_prefix(text, max_bytes) + "...";
}

std::string json_excerpt(const nlohmann::json& value, size_t max_chars) {
  std::string out;
  render(value, 0, max_chars, out);
  if (out.size() <= max_chars) return out;
  return utf8_prefix(out, max_chars) + "...";
}

}  // namespace hyla::model

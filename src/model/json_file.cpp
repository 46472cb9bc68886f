// read_json_file (see json_file.h).
#include "model/json_file.h"

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace hyla::model {

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
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::parse_error& e) {
    return invalid_argument(path, ": invalid JSON: ", e.what());
  }
}

}  // namespace hyla::model

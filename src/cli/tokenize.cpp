// `hyla tokenize` / `hyla detokenize` (see tokenize.h).
#include "cli/tokenize.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/io.h"
#include "serve/tokenizer.h"

namespace hyla::cli {
namespace {

/// The tokenizer named by the arguments, or the exit code after the message.
Result<serve::Tokenizer> load(const char* command, const std::string& tokenizer_path,
                              const std::string& model_dir, std::FILE* err, int& exit_code) {
  Result<std::string> path = tokenizer_json_path(tokenizer_path, model_dir);
  if (!path.ok()) {
    exit_code = path.status().code() == ErrorCode::kInvalidArgument ? 2 : 1;
    std::fprintf(err, "hyla %s: %s\n", command, path.status().message().c_str());
    return path.status();
  }
  Result<serve::Tokenizer> tokenizer = serve::Tokenizer::load(path.value());
  if (!tokenizer.ok()) {
    exit_code = 1;
    std::fprintf(err, "hyla %s: %s\n", command, tokenizer.status().message().c_str());
  }
  return tokenizer;
}

}  // namespace

Result<std::string> tokenizer_json_path(const std::string& tokenizer_path,
                                        const std::string& model_dir) {
  if (tokenizer_path.empty() == model_dir.empty())
    return invalid_argument(tokenizer_path.empty() ? "no tokenizer: give" : "give only one of",
                            " --tokenizer FILE (a tokenizer.json) or --model DIR (a model folder "
                            "with a tokenizer.json)");
  if (!tokenizer_path.empty()) return tokenizer_path;
  std::error_code ec;
  if (!std::filesystem::is_directory(model_dir, ec))
    return Status(ErrorCode::kNotFound,
                  str_cat("--model ", model_dir, ": the model folder does not exist"));
  const std::string path = (std::filesystem::path(model_dir) / "tokenizer.json").string();
  if (!std::filesystem::exists(path, ec))
    return Status(ErrorCode::kNotFound,
                  str_cat("--model ", model_dir, ": the folder has no tokenizer.json"));
  return path;
}

namespace {

int tokenize(const std::string& tokenizer_path, const std::string& model_dir, std::FILE* in,
             std::FILE* out, std::FILE* err) {
  int exit_code = 0;
  Result<serve::Tokenizer> tokenizer = load("tokenize", tokenizer_path, model_dir, err, exit_code);
  if (!tokenizer.ok()) return exit_code;
  Result<std::vector<int32_t>> ids = tokenizer->try_encode(read_all(in));
  if (!ids.ok()) {
    std::fprintf(err, "hyla tokenize: %s\n", ids.status().message().c_str());
    return 1;
  }
  std::string text = "[";
  for (size_t t = 0; t < ids->size(); ++t) {
    if (t > 0) text += ',';
    text += std::to_string(ids.value()[t]);
  }
  text += "]\n";
  std::fwrite(text.data(), 1, text.size(), out);
  return 0;
}

int detokenize(const std::string& tokenizer_path, const std::string& model_dir, std::FILE* in,
               std::FILE* out, std::FILE* err) {
  int exit_code = 0;
  Result<serve::Tokenizer> tokenizer =
      load("detokenize", tokenizer_path, model_dir, err, exit_code);
  if (!tokenizer.ok()) return exit_code;
  const nlohmann::json input = nlohmann::json::parse(read_all(in), nullptr, false);
  std::vector<int32_t> ids;
  bool ok = input.is_array();
  for (size_t t = 0; ok && t < input.size(); ++t) {
    ok = input[t].is_number_integer() && input[t].get<int64_t>() >= 0 &&
         input[t].get<int64_t>() < tokenizer->vocab_size();
    if (ok) ids.push_back(input[t].get<int32_t>());
  }
  if (!ok) {
    std::fprintf(err, "hyla detokenize: expected a JSON array of ids in [0, %lld) on stdin\n",
                 static_cast<long long>(tokenizer->vocab_size()));
    return 1;
  }
  const std::string text = tokenizer->decode(ids);
  std::fwrite(text.data(), 1, text.size(), out);
  return 0;
}

}  // namespace

// Errors travel as Status; these nets turn anything still thrown below (the standard library, an
// allocation) into a message instead of a terminate.
int run_tokenize(const std::string& tokenizer_path, const std::string& model_dir, std::FILE* in,
                 std::FILE* out, std::FILE* err) {
  try {
    return tokenize(tokenizer_path, model_dir, in, out, err);
  } catch (const std::exception& e) {
    std::fprintf(err, "hyla tokenize: %s\n", e.what());
    return 1;
  }
}

int run_detokenize(const std::string& tokenizer_path, const std::string& model_dir, std::FILE* in,
                   std::FILE* out, std::FILE* err) {
  try {
    return detokenize(tokenizer_path, model_dir, in, out, err);
  } catch (const std::exception& e) {
    std::fprintf(err, "hyla detokenize: %s\n", e.what());
    return 1;
  }
}

}  // namespace hyla::cli

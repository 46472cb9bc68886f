// `hyla tokenize` / `hyla detokenize` (see tokenize.h).
#include "cli/tokenize.h"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstdio>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "serve/tokenizer.h"

namespace hyla::cli {
namespace {

std::string read_stdin() {
  std::ios::sync_with_stdio(false);
  return std::string(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
}

}  // namespace

int run_tokenize(const std::string& tokenizer_path) {
  Result<serve::Tokenizer> tokenizer = serve::Tokenizer::load(tokenizer_path);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "hyla tokenize: %s\n", tokenizer.status().message().c_str());
    return 1;
  }
  const std::vector<int32_t> ids = tokenizer->encode(read_stdin());
  std::string out = "[";
  for (size_t t = 0; t < ids.size(); ++t) {
    if (t > 0) out += ',';
    out += std::to_string(ids[t]);
  }
  out += "]\n";
  std::fwrite(out.data(), 1, out.size(), stdout);
  return 0;
}

int run_detokenize(const std::string& tokenizer_path) {
  Result<serve::Tokenizer> tokenizer = serve::Tokenizer::load(tokenizer_path);
  if (!tokenizer.ok()) {
    std::fprintf(stderr, "hyla detokenize: %s\n", tokenizer.status().message().c_str());
    return 1;
  }
  const nlohmann::json input = nlohmann::json::parse(read_stdin(), nullptr, false);
  std::vector<int32_t> ids;
  bool ok = input.is_array();
  for (size_t t = 0; ok && t < input.size(); ++t) {
    ok = input[t].is_number_integer() && input[t].get<int64_t>() >= 0 &&
         input[t].get<int64_t>() < tokenizer->vocab_size();
    if (ok) ids.push_back(input[t].get<int32_t>());
  }
  if (!ok) {
    std::fprintf(stderr, "hyla detokenize: expected a JSON array of ids in [0, %lld) on stdin\n",
                 static_cast<long long>(tokenizer->vocab_size()));
    return 1;
  }
  const std::string text = tokenizer->decode(ids);
  std::fwrite(text.data(), 1, text.size(), stdout);
  return 0;
}

}  // namespace hyla::cli

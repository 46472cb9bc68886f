// Stop tokens and chat template of a model folder (see chat_model.h).
#include "cli/chat_model.h"

#ifdef HYLA_WITH_PCRE2
#include <filesystem>
#include <optional>
#include <set>

#include "cli/generate.h"
#include "model/json_file.h"

namespace hyla::cli {

namespace fs = std::filesystem;

std::vector<int32_t> chat_stop_tokens(const serve::Tokenizer& tokenizer, const std::string& dir,
                                      int64_t vocab_size) {
  std::set<int64_t> ids;
  for (const char* name : {"<|endoftext|>", "<|im_end|>"})
    if (const std::optional<int32_t> id = tokenizer.token_id(name)) ids.insert(*id);
  add_config_eos_ids(dir, ids);
  Result<nlohmann::json> tokenizer_config = model::read_json_file(dir + "/tokenizer_config.json");
  if (tokenizer_config.ok() && tokenizer_config->is_object()) {
    auto it = tokenizer_config->find("eos_token");
    if (it != tokenizer_config->end()) {
      std::string name;
      if (it->is_string()) name = it->get<std::string>();
      if (it->is_object() && it->contains("content") && (*it)["content"].is_string())
        name = (*it)["content"].get<std::string>();
      if (const std::optional<int32_t> id = tokenizer.token_id(name)) ids.insert(*id);
    }
  }
  std::vector<int32_t> out;
  for (int64_t id : ids)
    if (id >= 0 && id < vocab_size) out.push_back(int32_t(id));
  return out;
}

namespace {

bool same_dir(const std::string& a, const std::string& b) {
  std::error_code ec;
  const fs::path pa = fs::weakly_canonical(a, ec);
  if (ec) return false;
  const fs::path pb = fs::weakly_canonical(b, ec);
  return !ec && pa == pb;
}

}  // namespace

Result<serve::ChatTemplate> load_model_chat_template(const std::string& dir,
                                                     const std::string& model_flag) {
  return serve::load_chat_template(dir, model_flag.empty() || same_dir(dir, default_model_dir()));
}

}  // namespace hyla::cli
#endif

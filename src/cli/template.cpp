// `hyla template` (see template.h).
#include "cli/template.h"

#include <nlohmann/json.hpp>

#include <filesystem>
#include <string>

#include "cli/generate.h"
#include "cli/io.h"
#include "model/json_file.h"
#include "serve/chat_template.h"

namespace hyla::cli {
namespace {

int fail(std::FILE* err, const std::string& message) {
  std::fprintf(err, "hyla template: %s\n", message.c_str());
  return 1;
}

// The demo model gets the default template: when --model is omitted or names its folder.
bool is_demo_model(const std::string& dir) {
  std::error_code ec;
  const auto a = std::filesystem::weakly_canonical(dir, ec);
  if (ec) return false;
  const auto b = std::filesystem::weakly_canonical(default_model_dir(), ec);
  return !ec && a == b;
}

int render(const std::string& model_dir, std::FILE* in, std::FILE* out, std::FILE* err) {
  const std::string dir = model_dir.empty() ? default_model_dir() : model_dir;
  Result<serve::ChatTemplate> chat =
      serve::load_chat_template(dir, model_dir.empty() || is_demo_model(dir));
  if (!chat.ok()) return fail(err, chat.status().message());
  const std::string text = read_all(in);
  if (Status depth = model::check_json_depth(text, "the request on stdin"); !depth.ok())
    return fail(err, depth.message());
  const nlohmann::ordered_json request = nlohmann::ordered_json::parse(text, nullptr, false);
  if (request.is_discarded())
    return fail(err,
                "the request on stdin is not valid JSON (expected one object: "
                "{\"messages\": [...], \"tools\": [...], \"add_generation_prompt\": true})");
  Result<std::string> prompt = serve::render_chat(chat.value(), request);
  if (!prompt.ok()) return fail(err, prompt.status().message());
  std::fwrite(prompt->data(), 1, prompt->size(), out);
  return 0;
}

}  // namespace

// Errors travel as Status; this net turns anything still thrown below (an allocation) into a
// message instead of a terminate.
int run_template(const std::string& model_dir, std::FILE* in, std::FILE* out, std::FILE* err) {
  try {
    return render(model_dir, in, out, err);
  } catch (const std::exception& e) {
    return fail(err, e.what());
  }
}

}  // namespace hyla::cli

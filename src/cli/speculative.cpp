// --speculative (see speculative.h).
#include "cli/speculative.h"

#include <vector>

#include "cli/device.h"
#include "model/architecture.h"

namespace hyla::cli {

Result<SpeculativeFlag> parse_speculative_flag(std::string_view value) {
  using Drafter = runtime::SpeculativeOptions::Drafter;
  if (value == "off") return SpeculativeFlag{};
  if (value == "ngram") return SpeculativeFlag{.drafter = Drafter::kNgram, .draft_dir = {}};
  if (value == "mtp") return SpeculativeFlag{.drafter = Drafter::kMtp, .draft_dir = {}};
  if (value.starts_with("draft:") && value.size() > 6)
    return SpeculativeFlag{.drafter = Drafter::kDraftModel,
                           .draft_dir = std::string(value.substr(6))};
  return invalid_argument("--speculative is '", value,
                          "', expected off, ngram, mtp or draft:DIR (a draft model's directory)");
}

std::string check_speculative_flag(const std::string& value) {
  const Result<SpeculativeFlag> flag = parse_speculative_flag(value);
  return flag.ok() ? std::string() : flag.status().message();
}

Status apply_speculative_flag(const SpeculativeFlag& flag, std::span<const int64_t> request_tokens,
                              runtime::EngineOptions* options,
                              std::unique_ptr<model::Model>* draft) {
  options->speculative.drafter = flag.drafter;
  if (flag.drafter != runtime::SpeculativeOptions::Drafter::kDraftModel) return ok_status();
  const auto failed = [&](const Status& s) {
    return Status(s.code(), str_cat("--speculative draft:", flag.draft_dir, ": ", s.message()));
  };
  Result<std::unique_ptr<model::Model>> loaded = model::load_model(flag.draft_dir);
  if (!loaded.ok()) return failed(loaded.status());
  loaded = model_on(std::move(loaded).value(), options->device);
  if (!loaded.ok()) return failed(loaded.status());
  *draft = std::move(loaded).value();
  std::vector<int64_t> tokens;
  for (const int64_t n : request_tokens) tokens.push_back(n + options->speculative.draft_tokens);
  runtime::DraftModelOptions& d = options->speculative.draft;
  d.max_requests = options->max_running;
  Result<runtime::MemorySizing> sizing = runtime::size_draft_memory((*draft)->config(), d, tokens);
  if (!sizing.ok()) return failed(sizing.status());
  d.memory_budget_bytes = sizing->budget_bytes;
  d.state_ratio = sizing->state_ratio;
  options->speculative.draft_model = draft->get();
  return ok_status();
}

}  // namespace hyla::cli

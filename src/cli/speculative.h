// --speculative for `hyla generate` and `hyla serve`: off | ngram | mtp | draft:DIR, and the draft
// model that draft:DIR names, loaded next to the model (runtime/spec/draft_model.h).
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "core/error.h"
#include "model/model.h"
#include "runtime/engine.h"

namespace hyla::cli {

struct SpeculativeFlag {
  runtime::SpeculativeOptions::Drafter drafter = runtime::SpeculativeOptions::Drafter::kNone;
  std::string draft_dir;  ///< draft:DIR
};

/// The flag's value; the error names --speculative, the value and the accepted forms.
Result<SpeculativeFlag> parse_speculative_flag(std::string_view value);
/// For CLI11's check(): "" when `value` parses, else the error.
std::string check_speculative_flag(const std::string& value);

/// Sets options->speculative.drafter from `flag`; with draft:DIR loads the draft model onto
/// options->device into `draft` (it must outlive the engine) and sizes its pools to hold every
/// request of `request_tokens` (each prompt + new tokens) with K drafts. Errors name DIR.
Status apply_speculative_flag(const SpeculativeFlag& flag, std::span<const int64_t> request_tokens,
                              runtime::EngineOptions* options,
                              std::unique_ptr<model::Model>* draft);

}  // namespace hyla::cli

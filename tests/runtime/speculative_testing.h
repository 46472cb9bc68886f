// Speculative decoding checks shared by the CPU (runtime/speculative_test.cpp) and CUDA
// (runtime/cuda/engine_cuda_test.cpp) engine tests, each taking the device the engine runs on.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine_testing.h"

namespace hyla::runtime::engine_testing {

/// Prompts whose continuations the n-gram drafter can guess: a stretch of the golden prompt
/// repeated (and the golden prompts themselves, whose greedy continuations loop on these tiny
/// models).
inline std::vector<Tokens> speculative_prompts(const Golden& g) {
  Tokens repeated;
  for (int i = 0; i < 3; ++i)
    repeated.insert(repeated.end(), g.a_prompt.begin(), g.a_prompt.begin() + 24);
  return {repeated, g.b_prompt, prefix(g.a_prompt, 70), prefix(g.a_prompt, 150)};
}

// Greedy with n-gram speculation equals plain greedy decoding, token for token, in the given
// rollback mode, with the prefix cache on or off: requests join while others decode (some in
// verify steps), end at different lengths, one is cancelled midway, and each prompt runs twice
// (the second time from the cache, when it is on). Drafts must have been verified, some accepted
// and some rejected (each rollback path taken).
// Variations of the check below.
struct SpeculativeCase {
  /// The model's linear-attention backends (on a copy of the model), else its own.
  std::optional<model::LinearAttnBackends> backends{};
  /// Drafts from this draft model (on the engine's device) instead of n-grams; whether its drafts
  /// must have been accepted (and rejected) somewhere depends on how alike the two models are.
  const model::Model* draft = nullptr;
  bool expect_accepted = true;
  bool expect_rejected = true;
  /// Run this model (the golden decoder with an MTP head, on the device) and draft with its head.
  const model::Model* mtp_model = nullptr;
};

inline void expect_speculative_greedy_equals_plain(const std::string& arch, Device device,
                                                   model::VerifyMode mode, bool cache,
                                                   const SpeculativeCase& variant = {}) {
  const Golden& g = golden(arch);
  EngineOptions options = test_options(device);
  options.prefix_cache.enabled = cache;
  options.speculative.drafter = SpeculativeOptions::Drafter::kNgram;
  options.speculative.draft_tokens = 4;
  options.speculative.mode = mode;
  if (variant.draft) {
    options.speculative.drafter = SpeculativeOptions::Drafter::kDraftModel;
    options.speculative.draft_model = variant.draft;
  }
  if (variant.mtp_model) options.speculative.drafter = SpeculativeOptions::Drafter::kMtp;
  std::unique_ptr<model::Model> copy;
  if (variant.backends) {
    Result<std::unique_ptr<model::Model>> moved = model_on(g, device).to(device);
    ASSERT_TRUE(moved.ok()) << moved.status().message();
    copy = std::move(moved).value();
    copy->set_linear_backends(*variant.backends);
  }
  std::unique_ptr<Engine> engine = make_engine(variant.mtp_model ? *variant.mtp_model
                                               : copy            ? *copy
                                                                 : model_on(g, device),
                                               options);
  const std::vector<Tokens> prompts = speculative_prompts(g);
  struct Live {
    Tokens prompt;
    int64_t n;
    Tokens got;
    bool finished = false;
    bool cancelled = false;
  };
  std::map<RequestId, Live> live;
  // Each request predicts its plain greedy output with every fifth token wrong: drafts from the
  // prediction stand until a wrong one, which is rejected (and n-gram drafts from the prompt and
  // output, which these random models rarely follow, are mostly rejected).
  const auto add = [&](const Tokens& prompt, int64_t n) {
    SamplingParams params = greedy(n);
    Result<Tokens> plain = model::greedy_generate(*g.model, prompt, n);
    ASSERT_TRUE(plain.ok()) << plain.status().message();
    params.predicted_tokens = plain.value();
    const int32_t V = int32_t(g.model->config().vocab_size);
    for (size_t i = 4; i < params.predicted_tokens.size(); i += 5)
      params.predicted_tokens[i] = (params.predicted_tokens[i] + 1) % V;
    Result<RequestId> id = engine->add_request(prompt, params);
    ASSERT_TRUE(id.ok()) << id.status().message();
    live[id.value()] = Live{prompt, n, {}};
  };
  const auto drain = [&](int64_t steps) {
    for (int64_t s = 0; (steps < 0 || s < steps) && !engine->idle(); ++s) {
      for (const TokenEvent& e : engine->step()) {
        ASSERT_NE(e.reason, FinishReason::kError) << e.error;
        if (e.token >= 0) live.at(e.request).got.push_back(e.token);
        if (e.finished) live.at(e.request).finished = true;
      }
      const Status ok = engine->check_invariants();
      ASSERT_TRUE(ok.ok()) << ok.message();
    }
  };
  add(prompts[0], 30);
  add(prompts[1], 20);
  drain(6);  // both decoding, verify steps among them
  add(prompts[2], 25);
  Result<RequestId> cancelled = engine->add_request(prompts[3], greedy(40));
  ASSERT_TRUE(cancelled.ok());
  live[cancelled.value()] = Live{prompts[3], 40, {}, false, true};
  drain(4);
  ASSERT_OK(engine->cancel(cancelled.value()));
  add(prompts[3], 12);
  drain(-1);
  for (const Tokens& p : prompts) add(p, 16);  // again: resumed from the cache when it is on
  drain(-1);
  for (const auto& [id, l] : live) {
    if (l.cancelled) continue;
    SCOPED_TRACE(
        str_cat("request ", id, " (", l.prompt.size(), "-token prompt, ", l.n, " new tokens)"));
    EXPECT_TRUE(l.finished);
    expect_cpu_greedy_tokens(g, l.prompt, l.got, l.n, device);
  }
  const EngineStats s = engine->stats();
  EXPECT_GT(s.spec.steps, 0);
  EXPECT_EQ(s.spec.draft_failures, 0);
  if (variant.expect_accepted) {
    EXPECT_GT(s.spec.accepted_tokens, 0) << "no draft stood: the accept path went untested";
  }
  if (variant.expect_rejected) {
    EXPECT_LT(s.spec.accepted_tokens, s.spec.draft_tokens)
        << "no draft was rejected: the rollback went untested";
  }
  if (cache) {
    EXPECT_GT(s.cache.hits, 0);
  }
  // CUDA: greedy verify steps replay graphs where the model allows them (not with the MTP head,
  // which reads every step's hiddens).
  if (device.is_cuda() && DecodeGraphs::supports(g.model->config()) && !variant.mtp_model) {
    EXPECT_GT(engine->graph_stats().verify_replays, 0);
  }
  EXPECT_EQ(s.running + s.waiting, 0);
  EXPECT_EQ(s.free_slots + s.cache.snapshots, engine->plan().state_slots);
  EXPECT_EQ(s.free_pages + s.cache.pages, engine->plan().kv_pages);
  std::printf("%s %s cache %s: %lld verify steps, %lld of %lld drafts accepted, %lld tokens\n",
              arch.c_str(), mode == model::VerifyMode::kReplay ? "replay" : "step states",
              cache ? "on" : "off", static_cast<long long>(s.spec.steps),
              static_cast<long long>(s.spec.accepted_tokens),
              static_cast<long long>(s.spec.draft_tokens),
              static_cast<long long>(s.tokens_generated));
}

}  // namespace hyla::runtime::engine_testing

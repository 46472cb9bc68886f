// Engine, speculative half (see engine.h, EngineOptions::speculative): verify steps that check
// each decoding request's drafts (n-gram, draft model or the MTP head) in one forward over 1 + K
// tokens, emit the accepted tokens and one more, and roll the linear layers' state and the page
// table back to them (model/verify.h: Model::commit_verify); and the MTP head's drafting after
// each step.
#include <algorithm>

#include "core/device_memory.h"
#include "core/op_times.h"
#include "kernels/gather_rows.h"
#include "runtime/engine.h"
#include "runtime/spec/acceptance.h"
#include "runtime/step_picks.h"

namespace hyla::runtime {

void Engine::add_mtp_run(const Scheduled& s, const model::Batch& batch, size_t b,
                         std::vector<MtpRun>& runs) {
  // The MTP head runs over this chunk once the token after it is known.
  const Request& r = *s.request;
  const int64_t known = int64_t(r.prompt.size() + r.generated.size());
  if (known < s.begin + s.count + 1) return;
  MtpRun run{.id = r.id, .begin = s.begin, .first_row = batch.cu_seqlens[b], .next = {}};
  for (int64_t p = s.begin + 1; p <= s.begin + s.count; ++p) run.next.push_back(r.token_at(p));
  runs.push_back(std::move(run));
}

int64_t Engine::draft_limit(const Request& r) const {
  // No draft past the request's last token (its max_new_tokens-th).
  const int64_t left = r.sampler.params().max_new_tokens - int64_t(r.generated.size()) - 1;
  const SpeculativeOptions& spec = options_.speculative;
  const int64_t k = spec.adaptive && r.spec_k > 0 ? r.spec_k : spec.draft_tokens;
  return std::min(k, left);
}

std::vector<std::vector<int32_t>> Engine::drafts_for(const std::vector<Scheduled>& scheduled) {
  const size_t B = scheduled.size();
  std::vector<std::vector<int32_t>> drafts(B);
  if (draft_model_) {
    // One batched call of the draft model for every request that may draft.
    std::vector<std::vector<int32_t>> sequences(B);
    std::vector<DraftQuery> queries;
    std::vector<size_t> asked;
    for (size_t b = 0; b < B; ++b) {
      const Request& r = *scheduled[b].request;
      const int64_t k = draft_limit(r);
      if (k < 1) continue;
      sequences[b] = r.sequence();
      queries.push_back(DraftQuery{.id = r.id, .tokens = sequences[b], .k = k});
      asked.push_back(b);
    }
    Result<std::vector<std::vector<int32_t>>> proposed = std::vector<std::vector<int32_t>>{};
    if (!queries.empty()) {
      const CurrentStream on(step_stream());
      proposed = draft_model_->propose(queries);
    }
    // Drafts are optional: a failed draft call leaves the step a plain decode step.
    if (!proposed.ok()) {
      ++totals_.spec.draft_failures;
      return drafts;
    }
    for (size_t i = 0; i < asked.size(); ++i) drafts[asked[i]] = std::move((*proposed)[i]);
  } else if (mtp_drafting()) {
    for (size_t b = 0; b < B; ++b) {
      Request& r = *scheduled[b].request;
      const int64_t k = std::max<int64_t>(draft_limit(r), 0);
      drafts[b].assign(r.mtp_drafts.begin(),
                       r.mtp_drafts.begin() + std::min<int64_t>(k, int64_t(r.mtp_drafts.size())));
      r.mtp_drafts.clear();
      r.mtp_draft_logits.clear();
    }
  } else {
    for (size_t b = 0; b < B; ++b) {
      const Request& r = *scheduled[b].request;
      if (!r.drafter) continue;
      const NgramDraft draft = r.drafter->propose(draft_limit(r));
      drafts[b].assign(draft.tokens.begin(), draft.tokens.end());
    }
  }
  for (size_t b = 0; b < B; ++b) fit_drafts(*scheduled[b].request, drafts[b]);
  return drafts;
}

bool Engine::extend_pages_from_free(Request& r, int64_t tokens) {
  if (!pages_) return true;
  const int64_t more = pages_for(tokens) - int64_t(r.pages.size());
  if (more <= 0) return true;
  if (more > pages_->free_pages()) return false;
  std::optional<std::vector<int32_t>> pages = cache_->take_pages(more);
  if (!pages) return false;
  r.pages.insert(r.pages.end(), pages->begin(), pages->end());
  return true;
}

void Engine::fit_drafts(Request& r, std::vector<int32_t>& drafts) {
  // The KV rows of 1 + K tokens (drafts never preempt anyone), then as many drafts as the pages
  // hold.
  if (!pages_ || drafts.empty()) return;
  (void)extend_pages_from_free(r, r.processed + 1 + int64_t(drafts.size()));
  const int64_t room = int64_t(r.pages.size()) * pages_->page_size() - r.processed - 1;
  if (room < int64_t(drafts.size())) drafts.resize(size_t(std::max<int64_t>(room, 0)));
}

bool Engine::speculate(const std::vector<Scheduled>& scheduled, std::vector<TokenEvent>& events) {
  // Only a step of decodes alone: the linear layers verify every sequence of a step or none.
  for (const Scheduled& s : scheduled)
    if (s.count != 1 || !s.request->prefill_done()) return false;
  const int64_t B = int64_t(scheduled.size()), V = model_.config().vocab_size;
  const std::vector<std::vector<int32_t>> drafts = drafts_for(scheduled);
  bool any = false;
  for (const std::vector<int32_t>& d : drafts) any |= !d.empty();
  if (!any) return false;

  // The batch: each request's last token and its drafts, every row's logits.
  model::Batch batch;
  batch.cu_seqlens.push_back(0);
  bool host_rows = false;
  for (int64_t b = 0; b < B; ++b) {
    const Request& r = *scheduled[size_t(b)].request;
    std::vector<int32_t> tokens = {r.generated.back()};
    tokens.insert(tokens.end(), drafts[size_t(b)].begin(), drafts[size_t(b)].end());
    add_sequence(batch, r, tokens, r.processed);
    host_rows |= r.sampler.params().temperature != 0.0f || r.sampler.params().logprobs;
  }
  batch.logits_all = true;
  batch.verify = true;
  const bool mtp = mtp_drafting();
  memory_.final_hidden = mtp ? &step_hidden_ : nullptr;
  verify_record_.mode = options_.speculative.mode;
  memory_.verify = &verify_record_;
  ++totals_.steps;
  totals_.last_step_tokens = int64_t(batch.tokens.size());
  // Greedy verify steps replay a CUDA graph (every sequence padded to the step's most tokens; its
  // rows at the padded batch's cu_seqlens); the graph's shape keeps the record.
  Result<StepPicks> picks = StepPicks{};
  if (graphs_ && !host_rows && !memory_.layer_times && !op_times_active()) {
    batch = graphs_->padded(batch);
    Result<DecodeGraphs::Step> step = graphs_->run(batch, memory_, *staging_);
    if (step.ok()) {
      picks->rows = step->summary;
      picks->stride = batch.cu_seqlens.back();
      memory_.verify = step->record;
    } else {
      picks = step.status();
    }
  } else {
    // The fused verify kernel, when chosen, takes sequences of one length (the MTP head reads
    // rows at the padded offsets).
    if (model_.linear_backends().verify_backend() == model::LinearDecodeBackend::kFused)
      batch = pad_verify_tokens(batch);
    picks = run_step(batch, host_rows);
  }
  memory_.final_hidden = nullptr;
  const auto fail_all = [&](const Status& failure) {
    step_failure_ = failure;
    for (const Scheduled& s : scheduled)
      release(s.request->id, FinishReason::kError, events, failure.message());
  };
  if (!picks.ok()) {
    memory_.verify = nullptr;
    fail_all(picks.status());
    return true;
  }

  // Per request: the drafts that stand and one token more, cut at a stop token or the limit.
  struct Outcome {
    std::vector<TokenEvent> events;
    FinishReason reason = FinishReason::kNone;
    std::string error;
  };
  std::vector<Outcome> outcomes(static_cast<size_t>(B));
  std::vector<int32_t> commit(size_t(batch.num_sequences()), 0);  // padding rows commit none
  for (int64_t b = 0; b < B; ++b) {
    Request& r = *scheduled[size_t(b)].request;
    const std::vector<int32_t>& d = drafts[size_t(b)];
    const int64_t first = batch.cu_seqlens[size_t(b)], rows = int64_t(d.size()) + 1;
    Outcome& out = outcomes[size_t(b)];
    for (int64_t j = 0; j < rows && out.error.empty(); ++j)
      if (picks->bad(first + j) > 0)
        out.error =
            str_cat("request ", r.id, ": the logits of step ", totals_.steps,
                    " (verifying its token ", r.generated.size() + 1 + j, ") hold ",
                    picks->non_finite(first + j, V), "; the request is ended, the others go on");
    if (!out.error.empty()) continue;
    const SamplingParams& params = r.sampler.params();
    std::vector<int32_t> tokens;
    if (params.temperature == 0.0f) {  // greedy: the device's picks (the Sampler's own rule)
      int64_t a = 0;
      while (a < int64_t(d.size()) && d[size_t(a)] == picks->id(first + a)) ++a;
      tokens.assign(d.begin(), d.begin() + a);
      tokens.push_back(picks->id(first + a));
    } else {
      const std::span<const float> logits(picks->host_logits.host<float>() + first * V,
                                          size_t(rows * V));
      Result<Acceptance> verdict =
          accept_drafts(logits, V, Drafts{.tokens = d}, r.sampler, r.spec_rng);
      if (!verdict.ok()) {
        out.error = str_cat("request ", r.id, ": ", verdict.status().message());
        continue;
      }
      tokens = std::move(verdict->tokens);
    }
    totals_.spec.draft_tokens += int64_t(d.size());
    totals_.spec.accepted_tokens += int64_t(tokens.size()) - 1;
    if (!d.empty())
      r.spec_k = std::clamp<int64_t>(int64_t(tokens.size()), 1, options_.speculative.draft_tokens);
    for (size_t i = 0; i < tokens.size() && out.reason == FinishReason::kNone; ++i) {
      out.events.push_back(accept_token(r, tokens[i], picks->logits(first + int64_t(i))));
      out.reason = out.events.back().reason;
    }
    // The state goes on through the last token and every emitted one but the newest.
    commit[size_t(b)] = int32_t(out.events.size());
  }
  ++totals_.spec.steps;
  totals_.spec.sequences += B;
  totals_.spec.record_bytes = memory_.verify->bytes();
  totals_.spec.record_sequences = B;
  Status committed;
  {
    const CurrentStream on(step_stream());
    committed = model_.commit_verify(batch, commit, memory_);
    // Its uploads went through the pinned staging that the next step packs into: wait for them.
    device_synchronize(options_.device);
  }
  memory_.verify = nullptr;
  if (!committed.ok()) {
    fail_all(committed);
    return true;
  }
  std::vector<MtpRun> mtp_runs;
  for (int64_t b = 0; b < B; ++b) {
    Request& r = *scheduled[size_t(b)].request;
    Outcome& out = outcomes[size_t(b)];
    if (!out.error.empty()) {
      release(r.id, FinishReason::kError, events, std::move(out.error));
      continue;
    }
    // The MTP head runs over the kept positions; the emitted tokens follow them.
    if (mtp && out.reason == FinishReason::kNone) {
      MtpRun run{
          .id = r.id, .begin = r.processed, .first_row = batch.cu_seqlens[size_t(b)], .next = {}};
      for (const TokenEvent& e : out.events) run.next.push_back(e.token);
      mtp_runs.push_back(std::move(run));
    }
    r.processed += commit[size_t(b)];
    totals_.tokens_generated += commit[size_t(b)];
    totals_.spec.emitted_tokens += commit[size_t(b)];
    // Roll the page table back to the pages of the tokens kept and the next one.
    if (pages_) {
      const size_t keep = size_t(pages_for(r.processed + 1));
      if (r.pages.size() > keep) {
        cache_->drop_pages(std::span<const int32_t>(r.pages).subspan(keep));
        r.pages.resize(keep);
      }
    }
    if (wants_snapshot(r)) snapshot(r);
    for (TokenEvent& e : out.events) events.push_back(std::move(e));
    if (out.reason != FinishReason::kNone) release(r.id, out.reason, events);
  }
  verify_record_.layers.clear();  // its tensors are not needed past the commit
  if (!mtp_runs.empty()) mtp_draft(mtp_runs);
  return true;
}

void Engine::mtp_draft(const std::vector<MtpRun>& runs) {
  const CurrentStream on(step_stream());
  // Depth 0: every run's positions, next tokens and the step's hiddens of those rows.
  model::Batch batch;
  batch.cu_seqlens.push_back(0);
  std::vector<int32_t> rows;
  std::vector<Request*> live;
  for (const MtpRun& run : runs) {
    const auto it = requests_.find(run.id);
    if (it == requests_.end() || run.next.empty()) continue;
    Request& r = it->second;
    r.mtp_drafts.clear();
    r.mtp_draft_logits.clear();
    add_sequence(batch, r, run.next, run.begin);
    for (size_t j = 0; j < run.next.size(); ++j) rows.push_back(run.first_row + int32_t(j));
    live.push_back(&r);
  }
  if (live.empty()) return;
  const auto gather = [&](const Tensor& from, const std::vector<int32_t>& index) -> Result<Tensor> {
    Tensor out = Tensor::empty({int64_t(index.size()), from.size(1)}, DType::kF32, from.device());
    const Tensor index_d = model::upload_i32(index, from.device(), nullptr);
    HYLA_RETURN_IF_ERROR(kernels::gather_rows({.x = from, .index = index_d, .y = out}));
    return out;
  };
  // Greedy picks (kernels/argmax: the Sampler's rule) of each sequence's last row, and the logit
  // each won with (Engine::mtp_drafts).
  std::vector<float> values;
  const auto argmax_rows = [&](const Tensor& logits) -> Result<std::vector<int32_t>> {
    HYLA_ASSIGN_OR_RETURN(const StepPicks p, pick(logits, /*host_rows=*/true));
    const int64_t n = logits.size(0);
    std::vector<int32_t> ids(static_cast<size_t>(n));
    values.assign(size_t(n), 0.0f);
    for (int64_t i = 0; i < n; ++i) {
      ids[size_t(i)] = p.id(i);
      values[size_t(i)] = p.logits(i)[size_t(ids[size_t(i)])];
    }
    return ids;
  };
  const auto failed = [&] {
    ++totals_.spec.draft_failures;
    for (Request* r : live) {
      r->mtp_drafts.clear();
      r->mtp_draft_logits.clear();
    }
  };
  Result<Tensor> hidden = gather(step_hidden_, rows);
  if (!hidden.ok()) return failed();
  Result<model::MtpOutput> out = model_.forward_mtp(batch, *hidden, memory_, 0);
  if (!out.ok()) return failed();
  Result<std::vector<int32_t>> picks = argmax_rows(out->logits);
  if (!picks.ok()) return failed();
  // The rows that go on: decoding requests with drafts left to make; depth d drafts token d + 1
  // at position processed + d - 1 (its KV row needs that page, taken only from free ones).
  std::vector<int32_t> last_rows;
  for (size_t i = 0; i < live.size(); ++i) last_rows.push_back(batch.cu_seqlens[i + 1] - 1);
  std::vector<size_t> going;
  for (size_t i = 0; i < live.size(); ++i)
    if (live[i]->prefill_done()) {
      live[i]->mtp_drafts.push_back((*picks)[i]);
      live[i]->mtp_draft_logits.push_back(values[i]);
      going.push_back(i);
    }
  Tensor prev_hidden = out->hidden;
  std::vector<int32_t> prev_rows;  // per entry of `going`: its row of prev_hidden
  for (const size_t i : going) prev_rows.push_back(last_rows[i]);
  for (int64_t depth = 1; depth < options_.speculative.draft_tokens && !going.empty(); ++depth) {
    model::Batch next;
    next.cu_seqlens.push_back(0);
    std::vector<size_t> kept;
    std::vector<int32_t> hidden_rows;
    for (size_t g = 0; g < going.size(); ++g) {
      Request& r = *live[going[g]];
      if (int64_t(r.mtp_drafts.size()) >= std::max<int64_t>(draft_limit(r), 1)) continue;
      const int64_t position = r.processed + depth - 1;
      if (!extend_pages_from_free(r, position + 1)) continue;
      add_sequence(next, r, std::span<const int32_t>(&r.mtp_drafts.back(), 1), position);
      hidden_rows.push_back(prev_rows[g]);
      kept.push_back(going[g]);
    }
    if (kept.empty()) break;
    Result<Tensor> h = gather(prev_hidden, hidden_rows);
    if (!h.ok()) return failed();
    out = model_.forward_mtp(next, *h, memory_, depth);
    if (!out.ok()) return failed();
    picks = argmax_rows(out->logits);
    if (!picks.ok()) return failed();
    for (size_t i = 0; i < kept.size(); ++i) {
      live[kept[i]]->mtp_drafts.push_back((*picks)[i]);
      live[kept[i]]->mtp_draft_logits.push_back(values[i]);
    }
    prev_hidden = out->hidden;
    prev_rows.clear();
    for (size_t i = 0; i < kept.size(); ++i) prev_rows.push_back(int32_t(i));
    going = kept;
  }
}

std::pair<std::vector<int32_t>, std::vector<float>> Engine::mtp_drafts(RequestId id) const {
  const auto it = requests_.find(id);
  if (it == requests_.end()) return {};
  return {it->second.mtp_drafts, it->second.mtp_draft_logits};
}

}  // namespace hyla::runtime

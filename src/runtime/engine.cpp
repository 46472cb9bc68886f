// Engine (see engine.h): FCFS continuous batching with C-aligned chunked prefill over the state
// slot and KV page pools on the host or a CUDA device; one model::Batch per step; greedy tokens
// picked on the logits' device, sampled ones on the host with each request's Sampler. Here:
// creation, admission and preemption, the step; speculation is in engine_speculative.cpp, tensor
// parallelism in engine_ranks.cpp, the prefix cache's policy in cache/prefix_cache.cpp.
#include "runtime/engine.h"

#include <algorithm>

#include "core/cuda_graph.h"
#include "core/device_memory.h"
#include "core/op_times.h"
#include "kernels/gated_delta_rule.h"
#include "kernels/gated_delta_rule_decode.h"
#include "runtime/memory/host_memory.h"
#include "runtime/memory/pool_views.h"
#include "runtime/step_picks.h"

namespace hyla::runtime {

Engine::Engine(const model::Model& model, EngineOptions options)
    : model_(model), options_(options) {}

Result<std::unique_ptr<Engine>> Engine::create(const model::Model& model, EngineOptions options) {
  HYLA_RETURN_IF_ERROR(check_engine_options(options, model));
  if (options.tensor_parallel.ranks != 1) return create_ranks(model, std::move(options));
  if (options.max_context == 0) options.max_context = model.config().max_context;
  std::unique_ptr<Engine> engine(new Engine(model, options));
  HYLA_RETURN_IF_ERROR(engine->init_device());
  HYLA_RETURN_IF_ERROR(engine->init_memory_plan());
  HYLA_RETURN_IF_ERROR(engine->init_state_pool());
  HYLA_RETURN_IF_ERROR(engine->init_kv_pool());
  HYLA_RETURN_IF_ERROR(engine->init_prefix_cache());
  engine->init_decode_scratch();
  engine->init_batch_memory();
  HYLA_RETURN_IF_ERROR(engine->init_stream());
  if (options.speculative.drafter == SpeculativeOptions::Drafter::kDraftModel) {
    const CurrentStream on(engine->step_stream());
    HYLA_ASSIGN_OR_RETURN(
        engine->draft_model_,
        DraftModelDrafter::create(*options.speculative.draft_model, options.speculative.draft));
  }
  return engine;
}

Engine::~Engine() {
  graphs_.reset();
  if (stream_.handle) {
    (void)synchronize_stream(stream_);
    destroy_stream(stream_);
  }
}

Status Engine::init_stream() {
  if (!options_.device.is_cuda()) return ok_status();
  HYLA_ASSIGN_OR_RETURN(stream_, create_stream());
  // The packed indices of a step: tokens and slots, cu_seqlens, page tables (generous: a step
  // that does not fit uploads the synchronous way).
  staging_ = std::make_unique<model::HostStaging>(int64_t{1} << 20);
  memory_.staging = staging_.get();
  // The MTP head reads every step's final hiddens, which graphs do not leave.
  if (options_.cuda_graphs && DecodeGraphs::supports(model_.config()) && !mtp_drafting())
    graphs_ = std::make_unique<DecodeGraphs>(model_, stream_, max_step_sequences());
  return ok_status();
}

DecodeGraphStats Engine::graph_stats() const {
  return graphs_ ? graphs_->stats() : DecodeGraphStats{};
}

// The device exists in this build and on this machine, and the weights are on it.
Status Engine::init_device() {
  const Device device = options_.device;
  if (device.is_cuda()) {
    Result<DeviceFreeMemory> memory = device_free_memory(device);
    if (!memory.ok())
      return Status(memory.status().code(), str_cat("Engine: device ", device_name(device), ": ",
                                                    memory.status().message()));
  }
  if (model_.device() != device)
    return invalid_argument("Engine: the model's weights are on ", device_name(model_.device()),
                            " but the engine's device is ", device_name(device),
                            " (Model::to moves them)");
  return ok_status();
}

int64_t Engine::max_step_sequences() const {
  return std::min(options_.max_running, std::max<int64_t>(plan_.state_slots, 1));
}

int64_t Engine::decode_scratch_bytes() const {
  if (!options_.device.is_cuda() || plan_.state_slots == 0) return 0;
  const model::ModelConfig& c = model_.config();
  const model::LinearAttentionConfig& l = c.linear;
  const int64_t B = max_step_sequences();
  const kernels::DecodeShape shape{.T = 1,
                                   .B = B,
                                   .H = l.num_k_heads,
                                   .HV = l.num_v_heads,
                                   .d_k = l.head_k_dim,
                                   .d_v = l.head_v_dim,
                                   .conv_dim = l.conv_dim(),
                                   .kda = c.num_layers_of(model::MixerKind::kKimiDelta) > 0};
  return B * l.num_k_heads * int64_t(sizeof(int32_t)) +
         kernels::gated_delta_rule_decode_workspace_bytes(shape);
}

Status Engine::init_memory_plan() {
  HYLA_ASSIGN_OR_RETURN(plan_, plan_memory(model_.config(), options_.memory_budget_bytes,
                                           options_.state_ratio, memory_plan_options(options_)));
  // What the pools and the step scratch will take, against what the device can give, before any
  // of it is allocated (an allocation beyond it fails or swaps, late and without a reason).
  const int64_t needed = plan_.scratch_bytes + plan_.state_bytes() + plan_.kv_bytes() +
                         decode_scratch_bytes() + options_.prefix_cache.device_tier_bytes;
  int64_t limit = options_.memory_limit_bytes;
  std::string against;  // what the limit is, for the message
  if (limit > 0) {
    against = str_cat("more than the limit of ", format_bytes(limit), " (memory_limit_bytes)");
  } else if (options_.device.is_cuda()) {
    Result<DeviceFreeMemory> device = device_free_memory(options_.device);
    if (!device.ok()) return device.status();  // init_device found it; it went away since
    limit = device->free_bytes;
    against =
        str_cat("but ", device_name(options_.device), " has ", format_bytes(device->free_bytes),
                " free of ", format_bytes(device->total_bytes),
                " (cudaMemGetInfo); lower the memory budget");
  } else {
    Result<HostMemory> host = host_memory();
    if (!host.ok()) return ok_status();  // no figure to check against
    limit = host->available_bytes;
    against = str_cat("but this machine has ", format_bytes(host->available_bytes),
                      " available of ", format_bytes(host->total_bytes), " (", host->source,
                      " MemAvailable / MemTotal); lower the memory budget");
  }
  if (needed <= limit) return ok_status();
  return Status(ErrorCode::kOutOfMemory,
                str_cat("Engine: the memory plan needs ", format_bytes(needed), " (budget ",
                        format_bytes(options_.memory_budget_bytes), "), ", against));
}

Status Engine::init_state_pool() {
  if (plan_.state_slots == 0) return ok_status();
  HYLA_ASSIGN_OR_RETURN(StatePool pool, StatePool::create(model_.config(), plan_.state_slots,
                                                          memory_plan_options(options_).state));
  states_.emplace(std::move(pool));
  return ok_status();
}

Status Engine::init_kv_pool() {
  if (plan_.kv_pages == 0) return ok_status();
  HYLA_ASSIGN_OR_RETURN(KvPagePool pool, KvPagePool::create(model_.config(), plan_.kv_pages,
                                                            memory_plan_options(options_).kv));
  pages_.emplace(std::move(pool));
  return ok_status();
}

Status Engine::init_prefix_cache() {
  HYLA_ASSIGN_OR_RETURN(
      cache_, PrefixCache::create(states_ ? &*states_ : nullptr, pages_ ? &*pages_ : nullptr,
                                  options_.prefix_cache));
  return ok_status();
}

// CUDA with linear layers: the fused decode kernel's arrival counters (zeros, left zero by every
// call) and its workspace, sized for the most sequences a step can hold.
void Engine::init_decode_scratch() {
  if (decode_scratch_bytes() == 0) return;
  const int64_t B = max_step_sequences(), H = model_.config().linear.num_k_heads;
  decode_arrivals_ = Tensor::zeros({B, H}, DType::kI32, options_.device);
  const int64_t workspace_bytes = decode_scratch_bytes() - B * H * int64_t(sizeof(int32_t));
  decode_workspace_ = Tensor::empty({(workspace_bytes + 3) / 4}, DType::kF32, options_.device);
}

// Per global layer: the pool views the model reads and writes (undefined for the other kind).
void Engine::init_batch_memory() {
  memory_ = pool_views(model_.config(), states_ ? &*states_ : nullptr, pages_ ? &*pages_ : nullptr,
                       options_.page_size);
  memory_.decode_arrivals = decode_arrivals_;
  memory_.decode_workspace = decode_workspace_;
  memory_.layer_times = options_.layer_times;
}

int64_t Engine::pages_for(int64_t tokens) const {
  return pages_ ? pages_->pages_for_tokens(tokens) : 0;
}

Result<RequestId> Engine::add_request(std::vector<int32_t> prompt, SamplingParams params) {
  if (ranks_) return add_request_on_ranks(std::move(prompt), params);
  return rank_add_request(std::move(prompt), std::move(params));
}

Result<RequestId> Engine::rank_add_request(std::vector<int32_t> prompt, SamplingParams params) {
  const int64_t V = model_.config().vocab_size;
  if (prompt.empty()) return invalid_argument("add_request: the prompt is empty");
  for (size_t t = 0; t < prompt.size(); ++t)
    if (prompt[t] < 0 || prompt[t] >= V)
      return out_of_range("add_request: prompt token ", t, " is ", prompt[t], ", outside [0, ", V,
                          ") (the vocabulary)");
  HYLA_RETURN_IF_ERROR(validate(params, V));
  if (options_.max_context > 0 && int64_t(prompt.size()) > options_.max_context &&
      !options_.allow_long_context)
    return out_of_range("add_request: the prompt is ", prompt.size(),
                        " tokens, longer than the model's context limit of ", options_.max_context,
                        " tokens (max_position_embeddings); allow_long_context runs it anyway");
  const bool has_linear = std::any_of(model_.config().mixers.begin(), model_.config().mixers.end(),
                                      [](model::MixerKind k) { return model::is_linear_mixer(k); });
  if (has_linear && !states_)
    return Status(
        ErrorCode::kOutOfMemory,
        str_cat("add_request: the memory plan has no state slot (", plan_.summary(), ")"));
  const int64_t tokens = int64_t(prompt.size());
  if (pages_ && pages_for(tokens) > pages_->capacity())
    return Status(
        ErrorCode::kOutOfMemory,
        str_cat("add_request: the prompt's ", tokens, " tokens need ", pages_for(tokens),
                " KV pages of ", pages_->page_size(), " tokens, but the whole pool has ",
                pages_->capacity(), " (at most ", pages_->capacity() * pages_->page_size(),
                " tokens per request; raise --budget-mib or lower the state ratio)"));
  std::unique_ptr<NgramDrafter> drafter;
  if (options_.speculative.drafter == SpeculativeOptions::Drafter::kNgram) {
    // The prediction first: the prompt's and the output's n-grams are then matched in it too.
    drafter = std::make_unique<NgramDrafter>(options_.speculative.ngram);
    HYLA_RETURN_IF_ERROR(drafter->append(params.predicted_tokens));
    HYLA_RETURN_IF_ERROR(drafter->append(prompt));
  }
  const RequestId id = next_id_++;
  Request& r = requests_.emplace(id, Request(id, std::move(prompt), params)).first->second;
  r.drafter = std::move(drafter);
  // The acceptance draws have a stream of their own: seeded like the Sampler's, their first
  // uniform would be the one that picked the request's last token, so a token drawn from the low
  // end of [0, 1) would then accept drafts more often and the output would leave p's law
  // (Speculative.SamplingKeepsTheDistribution).
  r.spec_rng.seed(params.seed ^ 0x9E3779B97F4A7C15ull);
  return id;
}

bool Engine::try_admit(Request& r) {
  // The longest cached prefix with a snapshot, leaving at least the last token to compute (its
  // logits give the next token); locked until resumed or released.
  const PrefixHit hit =
      cache_->enabled() ? cache_->match(r.sequence(), r.prefill_len - 1) : PrefixHit{};
  if (states_) {
    r.slot = cache_->take_slot();
    if (r.slot < 0) {
      cache_->release(hit);
      return false;
    }
  }
  if (pages_) {
    std::optional<std::vector<int32_t>> pages = cache_->take_pages(pages_for(r.prefill_len), hit);
    if (!pages) {
      if (r.slot >= 0) cache_->free_slot(r.slot);
      r.slot = -1;
      cache_->release(hit);
      return false;
    }
    r.pages = std::move(*pages);
  }
  cache_->resume(hit, r.slot, r.pages);
  r.processed = hit.tokens;
  if (r.cached < 0) r.cached = hit.tokens;
  // Where this prefill leaves the tree (it matched further than the snapshot): a snapshot there
  // lets the next request down this branch resume at the branch point.
  r.branch = hit.common > hit.tokens && hit.common < r.prefill_len - 1 ? hit.common : 0;
  r.admitted = true;
  r.admission = admissions_++;
  return true;
}

std::vector<std::vector<Boundary>> Engine::reserve_boundaries(
    const std::vector<Scheduled>& scheduled, model::Batch& batch) {
  std::vector<std::vector<Boundary>> out;
  if (!cache_->enabled() || batch.is_decode() || !model_.writes_boundary_states()) return out;
  out.resize(scheduled.size());
  constexpr int64_t C = kernels::kDeltaRuleChunk;
  bool any = false;
  for (size_t b = 0; b < scheduled.size(); ++b) {
    const Scheduled& s = scheduled[b];
    if (s.count / C == 0) continue;
    const std::vector<int32_t> slots =
        cache_->reserve_boundaries(s.request->sequence(), s.begin, s.count, C);
    for (size_t j = 0; j < slots.size(); ++j) {
      batch.boundary_slots.push_back(slots[j]);
      if (slots[j] >= 0) {
        out[b].push_back(Boundary{s.begin + C * int64_t(j + 1), slots[j]});
        any = true;
      }
    }
  }
  if (!any) {
    batch.boundary_slots.clear();
    out.clear();
  }
  return out;
}

bool Engine::wants_snapshot(const Request& r) const {
  return cache_->enabled() && cache_->wants_snapshot(r.processed, r.prefill_len, r.branch);
}

void Engine::snapshot(Request& r) {
  const std::vector<int32_t> tokens = r.sequence();
  cache_->snapshot(std::span<const int32_t>(tokens).first(size_t(r.processed)), r.pages, r.slot,
                   /*adopt=*/false);
}

void Engine::preempt(Request& r) {
  HYLA_CHECK(r.admitted, "Engine::preempt: request ", r.id, " is not running");
  // Freeing what this engine allocated cannot fail; a failure is an engine bug.
  if (states_) cache_->free_slot(r.slot);
  if (pages_) cache_->drop_pages(r.pages);
  r.slot = -1;
  r.pages.clear();
  r.admitted = false;
  r.admission = -1;
  // Everything it has seen is recomputed; the prefill's last chunk samples its next token.
  r.processed = 0;
  r.prefill_len = int64_t(r.prompt.size() + r.generated.size());
  ++totals_.preemptions;
}

void Engine::grow_decodes(std::vector<TokenEvent>& events) {
  if (!pages_) return;
  // A decode whose next token alone needs more than the whole pool can never run: end it.
  std::vector<std::pair<RequestId, std::string>> outgrown;
  for (const auto& [id, r] : requests_)
    if (r.admitted && r.prefill_done() && pages_for(r.processed + 1) > pages_->capacity())
      outgrown.emplace_back(
          id, str_cat("request ", id, ": its token ", r.generated.size() + 1, " (after ",
                      r.processed, " tokens) needs ", pages_for(r.processed + 1), " KV pages of ",
                      pages_->page_size(), " tokens, but the whole pool has ", pages_->capacity(),
                      "; the request is ended after ", r.generated.size(),
                      " tokens (raise --budget-mib or lower max_new_tokens)"));
  for (auto& [id, error] : outgrown) release(id, FinishReason::kError, events, std::move(error));
  // Preempt the most recently admitted running request while the decodes' new pages do not fit.
  // One running request alone always fits (checked above), so this ends.
  for (;;) {
    int64_t missing = 0;
    Request* newest = nullptr;
    for (auto& [id, r] : requests_) {
      if (!r.admitted) continue;
      if (!newest || r.admission > newest->admission) newest = &r;
      if (r.prefill_done())
        missing += std::max<int64_t>(0, pages_for(r.processed + 1) - int64_t(r.pages.size()));
    }
    cache_->make_room(missing);  // the prefix cache's least recently used entries go first
    if (missing <= pages_->free_pages()) break;
    preempt(*newest);
  }
  for (auto& [id, r] : requests_) {
    if (!r.admitted || !r.prefill_done()) continue;
    const int64_t more = pages_for(r.processed + 1) - int64_t(r.pages.size());
    if (more <= 0) continue;
    std::optional<std::vector<int32_t>> pages = cache_->take_pages(more);
    HYLA_CHECK(pages.has_value(), "Engine: ", more, " pages counted free but not allocated");
    r.pages.insert(r.pages.end(), pages->begin(), pages->end());
  }
}

Status Engine::check_invariants() const {
  if (ranks_) HYLA_RETURN_IF_ERROR(check_other_ranks());
  const int64_t num_slots = states_ ? states_->capacity() : 0;
  const int64_t num_pages = pages_ ? pages_->capacity() : 0;
  std::vector<RequestId> slot_owner(size_t(num_slots), -1);
  std::vector<int32_t> request_refs(size_t(num_pages), 0);
  std::vector<int32_t> request_slots, request_pages;
  int64_t running = 0;
  for (const auto& [id, r] : requests_) {
    if (!r.admitted) {
      if (r.slot != -1 || !r.pages.empty() || r.processed != 0)
        return internal_error("request ", id, " waits but holds slot ", r.slot, ", ",
                              r.pages.size(), " pages, ", r.processed, " processed tokens");
      continue;
    }
    ++running;
    if (states_) {
      if (r.slot < 0 || r.slot >= num_slots || !states_->is_allocated(r.slot))
        return internal_error("request ", id, " runs on slot ", r.slot,
                              ", not an allocated slot of ", num_slots);
      if (slot_owner[size_t(r.slot)] >= 0)
        return internal_error("slot ", r.slot, " is held by requests ", slot_owner[size_t(r.slot)],
                              " and ", id);
      slot_owner[size_t(r.slot)] = id;
      request_slots.push_back(r.slot);
    }
    if (int64_t(r.pages.size()) < pages_for(r.processed))
      return internal_error("request ", id, " has processed ", r.processed, " tokens on only ",
                            r.pages.size(), " pages");
    for (const int32_t page : r.pages) {
      if (page < 0 || page >= num_pages || !pages_->is_allocated(page))
        return internal_error("request ", id, " holds page ", page, ", not an allocated page of ",
                              num_pages);
      ++request_refs[size_t(page)];
      request_pages.push_back(page);
    }
  }
  // A page a request still writes (from its processed position on) is no other request's: others
  // share only pages wholly before the position they resumed from. (The cache may list it: it
  // claims only rows before a snapshot, which the writer is past.)
  for (const auto& [id, r] : requests_)
    for (size_t j = size_t(r.processed / options_.page_size); j < r.pages.size(); ++j)
      if (request_refs[size_t(r.pages[j])] != 1)
        return internal_error("request ", id, " writes page ", r.pages[j], " (its page ", j,
                              ", from token ", r.processed, ") that other requests hold too");
  if (running > options_.max_running)
    return internal_error(running, " requests run, more than max_running ", options_.max_running);
  return cache_->check_invariants(request_slots, request_pages);
}

void Engine::release(RequestId id, FinishReason reason, std::vector<TokenEvent>& events,
                     std::string error) {
  const auto it = requests_.find(id);
  HYLA_CHECK(it != requests_.end(), "Engine::release: unknown request ", id);
  Request& r = it->second;
  // A request that ran to its end leaves its state there for the next turn of the conversation.
  // Its working slot becomes the snapshot (no copy, no other slot needed).
  if (cache_->enabled() && r.admitted &&
      (reason == FinishReason::kStopToken || reason == FinishReason::kMaxTokens)) {
    const std::vector<int32_t> tokens = r.sequence();
    if (cache_->snapshot(std::span<const int32_t>(tokens).first(size_t(r.processed)), r.pages,
                         r.slot, /*adopt=*/true))
      r.slot = -1;
  }
  if (r.admitted && states_ && r.slot >= 0) cache_->free_slot(r.slot);
  if (r.admitted && pages_) cache_->drop_pages(r.pages);
  if (draft_model_) draft_model_->release(id);
  if (reason == FinishReason::kCancelled || reason == FinishReason::kError)
    events.push_back(TokenEvent{.request = id,
                                .token = -1,
                                .finished = true,
                                .reason = reason,
                                .error = std::move(error),
                                .cached_tokens = r.cached_tokens()});
  requests_.erase(it);
  ++totals_.finished;
}

Status Engine::cancel(RequestId id) { return ranks_ ? cancel_on_ranks(id) : rank_cancel(id); }

Status Engine::rank_cancel(RequestId id) {
  if (requests_.find(id) == requests_.end())
    return Status(
        ErrorCode::kNotFound,
        str_cat("cancel: request ", id, " is not waiting or running (unknown or finished)"));
  release(id, FinishReason::kCancelled, pending_events_);
  return ok_status();
}

// Decodes first (one token each, their pages grown first), then the running prefills' chunks,
// then admissions in arrival order; see engine.h.
std::vector<Scheduled> Engine::schedule(std::vector<TokenEvent>& events) {
  grow_decodes(events);
  std::vector<Scheduled> scheduled;
  int64_t step_tokens = 0, running = 0;
  for (auto& [id, r] : requests_) {
    if (!r.admitted) continue;
    ++running;
    if (!r.prefill_done()) continue;
    scheduled.push_back(Scheduled{&r, r.processed, 1});
    ++step_tokens;
  }
  // The next chunk of `r`: up to its prefill's end, or the last aligned position within the
  // step's token budget; false when none fits (it and those after it wait).
  // The prefix cache's stops: the tree's branch point, and the token before the prefill's last
  // (a repeat of this prompt then recomputes one token).
  const auto cut = [&](const Request& r, int64_t end) {
    if (!cache_->enabled()) return end;
    for (const int64_t stop : {r.branch, r.prefill_len - 1})
      if (stop > r.processed && stop < end) end = stop;
    return end;
  };
  const auto add_chunk = [&](Request& r, bool admitting) {
    const int64_t budget = options_.max_batch_tokens - step_tokens;
    if (admitting) {
      // Whether even an aligned piece of the prompt fits before taking a slot and pages.
      if (std::min(r.prefill_len, budget) < std::min<int64_t>(r.prefill_len, kPrefillAlign))
        return false;
      if (!try_admit(r)) return false;
      ++running;
    }
    int64_t end = std::min(r.prefill_len, r.processed + budget);
    if (end < r.prefill_len) end = end / kPrefillAlign * kPrefillAlign;
    end = cut(r, end);
    // Nothing fits this step (one just admitted from the cache resumes mid-page): it and the
    // requests after it go on next step; an admitted one keeps its slot and pages.
    if (end <= r.processed) return false;
    scheduled.push_back(Scheduled{&r, r.processed, end - r.processed});
    step_tokens += end - r.processed;
    return true;
  };
  // Running prefills hold the pages of their whole prefill (taken at admission).
  for (auto& [id, r] : requests_)
    if (r.admitted && !r.prefill_done() && !add_chunk(r, false)) break;
  for (auto& [id, r] : requests_) {
    if (r.admitted) continue;
    if (running >= options_.max_running || !add_chunk(r, true)) break;
  }
  return scheduled;
}

model::Batch Engine::build_batch(const std::vector<Scheduled>& scheduled) const {
  model::Batch batch;
  batch.cu_seqlens.push_back(0);
  std::vector<int32_t> tokens;
  for (const Scheduled& s : scheduled) {
    tokens.clear();
    for (int64_t t = s.begin; t < s.begin + s.count; ++t) tokens.push_back(s.request->token_at(t));
    add_sequence(batch, *s.request, tokens, s.begin);
  }
  return batch;
}

Result<StepPicks> Engine::run_step(const model::Batch& batch, bool host_rows) {
  const CurrentStream on(step_stream());
  if (staging_) staging_->reset();
  HYLA_ASSIGN_OR_RETURN(const Tensor logits, model_.forward_batch(batch, memory_));
  const int64_t V = model_.config().vocab_size,
                rows = batch.logits_all ? int64_t(batch.tokens.size()) : batch.num_sequences();
  if (logits.dtype() != DType::kF32 || logits.ndim() != 2 || logits.size(0) != rows ||
      logits.size(1) != V)
    return internal_error("Engine::step: forward_batch returned logits ",
                          logits.view().shape_string(), " ", dtype_name(logits.dtype()),
                          ", expected [", rows, ", ", V, "] f32");
  return pick(logits, host_rows);
}

Result<StepPicks> Engine::replay_step(const model::Batch& batch) {
  const model::Batch padded = graphs_->padded(batch);
  HYLA_ASSIGN_OR_RETURN(const DecodeGraphs::Step step, graphs_->run(padded, memory_, *staging_));
  StepPicks picks;
  picks.rows = step.summary;
  picks.stride = padded.num_sequences();
  return picks;
}

std::vector<TokenEvent> Engine::step() { return ranks_ ? step_ranks() : rank_step(); }

std::vector<TokenEvent> Engine::rank_step() {
  step_failure_ = ok_status();
  std::vector<TokenEvent> events = std::move(pending_events_);
  pending_events_.clear();
  const std::vector<Scheduled> scheduled = schedule(events);
  if (scheduled.empty()) return events;
  if (speculating() && speculate(scheduled, events)) return events;

  model::Batch batch = build_batch(scheduled);
  // Prefix cache: slots for the states inside the prefill chunks, filled by the step.
  const std::vector<std::vector<Boundary>> boundaries = reserve_boundaries(scheduled, batch);
  ++totals_.steps;
  totals_.last_step_tokens = int64_t(batch.tokens.size());
  // A request that samples or reports log-probabilities needs its row of logits on the host.
  bool host_rows = false;
  for (const Scheduled& s : scheduled)
    host_rows |=
        s.request->sampler.params().temperature != 0.0f || s.request->sampler.params().logprobs;
  // Steps that need only the device's greedy picks replay a CUDA graph when they are decodes;
  // the others run their kernels on the engine's stream.
  const bool replay =
      graphs_ && !host_rows && batch.is_decode() && !memory_.layer_times && !op_times_active();
  memory_.final_hidden = mtp_drafting() ? &step_hidden_ : nullptr;
  Result<StepPicks> picks = replay ? replay_step(batch) : run_step(batch, host_rows);
  memory_.final_hidden = nullptr;
  if (!picks.ok()) {
    fail_step(scheduled, boundaries, picks.status(), events);
    return events;
  }
  process_results(scheduled, batch, *picks, boundaries, events);
  return events;
}

void Engine::fail_step(const std::vector<Scheduled>& scheduled,
                       const std::vector<std::vector<Boundary>>& boundaries, const Status& failure,
                       std::vector<TokenEvent>& events) {
  step_failure_ = failure;
  for (const std::vector<Boundary>& list : boundaries)
    for (const Boundary& boundary : list) cache_->free_slot(boundary.slot);
  // The slots and pages of every sequence in the batch may be half written: fail them all.
  for (const Scheduled& s : scheduled)
    release(s.request->id, FinishReason::kError, events, failure.message());
}

void Engine::process_results(const std::vector<Scheduled>& scheduled, const model::Batch& batch,
                             const StepPicks& picks,
                             const std::vector<std::vector<Boundary>>& boundaries,
                             std::vector<TokenEvent>& events) {
  const int64_t V = model_.config().vocab_size;
  std::vector<MtpRun> mtp_runs;
  for (size_t b = 0; b < scheduled.size(); ++b) {
    const Scheduled& s = scheduled[b];
    Request& r = *s.request;
    const bool finite = picks.bad(int64_t(b)) == 0;
    if (r.processed < r.prefill_len) totals_.prompt_tokens += s.count;
    r.processed += s.count;
    // Only a state whose logits came out finite is worth resuming from.
    if (!boundaries.empty()) {
      const std::vector<int32_t> tokens = r.sequence();
      cache_->keep_boundaries(tokens, r.pages, boundaries[b], finite);
    }
    if (finite && wants_snapshot(r)) snapshot(r);
    if (!r.prefill_done()) {  // mid-prefill chunk: nothing to sample
      if (finite && mtp_drafting()) add_mtp_run(s, batch, b, mtp_runs);
      continue;
    }
    if (!finite) {
      release(r.id, FinishReason::kError, events,
              str_cat("request ", r.id, ": the logits of step ", totals_.steps, " (its token ",
                      r.generated.size() + 1, ", after ", r.processed, " tokens) hold ",
                      picks.non_finite(int64_t(b), V), "; the request is ended, the others go on"));
      continue;
    }
    // Greedy rows take the device's pick (the Sampler's own rule, kernels/argmax.h).
    const std::span<const float> row = picks.logits(int64_t(b));
    const int32_t token =
        r.sampler.params().temperature == 0.0f ? picks.id(int64_t(b)) : r.sampler.sample(row);
    TokenEvent event = accept_token(r, token, row);
    ++totals_.tokens_generated;
    if (mtp_drafting()) add_mtp_run(s, batch, b, mtp_runs);
    const FinishReason reason = event.reason;
    events.push_back(std::move(event));
    if (reason != FinishReason::kNone) release(r.id, reason, events);
  }
  if (!mtp_runs.empty()) mtp_draft(mtp_runs);
}

bool Engine::idle() const { return requests_.empty() && pending_events_.empty(); }

EngineStats Engine::stats() const {
  EngineStats s = totals_;
  for (const auto& [id, r] : requests_) ++(r.admitted ? s.running : s.waiting);
  s.free_slots = states_ ? states_->free_slots() : 0;
  s.free_pages = pages_ ? pages_->free_pages() : 0;
  s.cache = cache_->stats();
  return s;
}

Result<std::vector<std::vector<int32_t>>> generate(const model::Model& model,
                                                   const std::vector<std::vector<int32_t>>& prompts,
                                                   const SamplingParams& params,
                                                   const EngineOptions& options) {
  HYLA_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine, Engine::create(model, options));
  std::map<RequestId, size_t> index;
  for (size_t i = 0; i < prompts.size(); ++i) {
    Result<RequestId> id = engine->add_request(prompts[i], params);
    if (!id.ok())
      return Status(id.status().code(), str_cat("prompt ", i, ": ", id.status().message()));
    index[id.value()] = i;
  }
  std::vector<std::vector<int32_t>> out(prompts.size());
  while (!engine->idle()) {
    const int64_t steps_before = engine->stats().steps;
    const std::vector<TokenEvent> events = engine->step();
    for (const TokenEvent& e : events) {
      if (e.reason == FinishReason::kError)
        return internal_error("generate: prompt ", index.at(e.request), " failed: ", e.error);
      if (e.token >= 0) out[index.at(e.request)].push_back(e.token);
    }
    if (events.empty() && engine->stats().steps == steps_before)
      return internal_error("generate: the engine made no progress (", engine->stats().waiting,
                            " waiting, ", engine->stats().running, " running)");
  }
  return out;
}

}  // namespace hyla::runtime

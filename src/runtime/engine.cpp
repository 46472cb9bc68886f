// Engine (see engine.h): FCFS continuous batching with C-aligned chunked prefill over the state
// slot and KV page pools on the host or a CUDA device; one model::Batch per step; greedy tokens
// picked on the logits' device, sampled ones on the host with each request's Sampler.
#include "runtime/engine.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/cuda_graph.h"
#include "core/device_memory.h"
#include "core/op_times.h"
#include "kernels/argmax.h"
#include "kernels/gated_delta_rule.h"
#include "kernels/gated_delta_rule_decode.h"
#include "kernels/gather_rows.h"
#include "model/tensor_parallel.h"
#include "runtime/memory/host_memory.h"
#include "runtime/memory/pool_views.h"
#include "runtime/spec/acceptance.h"

namespace hyla::runtime {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStopToken: return "stop_token";
    case FinishReason::kMaxTokens: return "max_tokens";
    case FinishReason::kCancelled: return "cancelled";
    case FinishReason::kError: return "error";
  }
  return "unknown";
}

Engine::Engine(const model::Model& model, EngineOptions options)
    : model_(model), options_(options) {}

Result<std::unique_ptr<Engine>> Engine::create(const model::Model& model, EngineOptions options) {
  if (options.max_batch_tokens < kPrefillAlign)
    return invalid_argument("Engine: max_batch_tokens is ", options.max_batch_tokens,
                            ", expected >= ", kPrefillAlign,
                            " (prefill chunks end on multiples of ", kPrefillAlign, " tokens)");
  if (options.max_running < 1)
    return invalid_argument("Engine: max_running is ", options.max_running, ", expected >= 1");
  const PrefixCacheOptions& cache = options.prefix_cache;
  if (cache.snapshot_interval < kPrefillAlign || cache.snapshot_interval % kPrefillAlign != 0)
    return invalid_argument("Engine: prefix_cache.snapshot_interval is ", cache.snapshot_interval,
                            ", expected a positive multiple of ", kPrefillAlign);
  if (cache.decode_interval < 0 || cache.max_path_snapshots < 0 || cache.host_bytes < 0 ||
      cache.max_path_weak_snapshots < 0 || cache.device_tier_bytes < 0)
    return invalid_argument("Engine: prefix_cache.decode_interval (", cache.decode_interval,
                            "), max_path_snapshots (", cache.max_path_snapshots,
                            "), max_path_weak_snapshots (", cache.max_path_weak_snapshots,
                            "), device_tier_bytes (", cache.device_tier_bytes, ") and host_bytes (",
                            cache.host_bytes, ") must be >= 0");
  const SpeculativeOptions& spec = options.speculative;
  if (spec.draft_tokens < 1 || spec.draft_tokens > kMaxDraftTokens)
    return invalid_argument("Engine: speculative.draft_tokens is ", spec.draft_tokens,
                            ", expected an integer in [1, ", kMaxDraftTokens, "]");
  HYLA_RETURN_IF_ERROR(validate(spec.ngram));
  if (spec.drafter == SpeculativeOptions::Drafter::kMtp && !model.has_mtp())
    return invalid_argument(
        "Engine: speculative.drafter is the MTP head, but the model has none (its config declares "
        "no mtp_num_hidden_layers, or its checkpoint holds no mtp.* tensors)");
  if (spec.drafter == SpeculativeOptions::Drafter::kDraftModel) {
    if (spec.draft_model == nullptr)
      return invalid_argument("Engine: speculative.drafter is the draft model, but none is given");
    if (spec.draft_model->device() != options.device)
      return invalid_argument("Engine: the draft model's weights are on ",
                              device_name(spec.draft_model->device()),
                              " but the engine's device is ", device_name(options.device));
    if (spec.draft_model->config().vocab_size != model.config().vocab_size)
      return invalid_argument("Engine: the draft model's vocabulary has ",
                              spec.draft_model->config().vocab_size, " tokens, the model's ",
                              model.config().vocab_size,
                              ": a draft model must share the model's tokenizer");
  }
  if (options.tensor_parallel.ranks != 1) return create_ranks(model, std::move(options));
  if (options.max_context == 0) options.max_context = model.config().max_context;
  std::unique_ptr<Engine> engine(new Engine(model, options));
  HYLA_RETURN_IF_ERROR(engine->init_device());
  HYLA_RETURN_IF_ERROR(engine->init_memory_plan());
  HYLA_RETURN_IF_ERROR(engine->init_state_pool());
  HYLA_RETURN_IF_ERROR(engine->init_kv_pool());
  engine->init_decode_scratch();
  engine->init_batch_memory();
  HYLA_RETURN_IF_ERROR(engine->init_stream());
  if (spec.drafter == SpeculativeOptions::Drafter::kDraftModel) {
    const CurrentStream on(engine->stream_.handle ? engine->stream_ : current_stream());
    HYLA_ASSIGN_OR_RETURN(engine->draft_model_,
                          DraftModelDrafter::create(*spec.draft_model, spec.draft));
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

MemoryPlanOptions memory_plan_options(const EngineOptions& options) {
  MemoryPlanOptions m;
  m.state.conv_dtype = options.conv_dtype;
  m.state.ssm_dtype = options.state_dtype;
  m.state.device = options.device;
  m.kv.page_size = options.page_size;
  m.kv.dtype = options.kv_dtype;
  m.kv.device = options.device;
  m.max_batch_tokens = options.max_batch_tokens;
  return m;
}

Result<MemorySizing> size_engine_memory(const model::ModelConfig& config,
                                        const EngineOptions& options,
                                        std::vector<int64_t> request_tokens) {
  std::sort(request_tokens.begin(), request_tokens.end(), std::greater<>());
  if (options.max_running >= 1 && int64_t(request_tokens.size()) > options.max_running)
    request_tokens.resize(size_t(options.max_running));
  if (options.tensor_parallel.ranks == 1)
    return size_memory(config, request_tokens, memory_plan_options(options));
  HYLA_ASSIGN_OR_RETURN(const model::ModelConfig rank,
                        model::shard_config(config, 0, options.tensor_parallel.ranks));
  return size_memory(rank, request_tokens, memory_plan_options(options));
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
  page_refs_.assign(size_t(plan_.kv_pages), 0);
  // The cache resumes from a state snapshot and the KV of the tokens before it: both kinds of
  // layer must be there (a model with only one kind is not a hybrid).
  if (options_.prefix_cache.enabled && states_) {
    cache_.emplace(options_.page_size);
    const PrefixCacheOptions& c = options_.prefix_cache;
    if (c.device_tier_bytes > 0 || c.host_bytes > 0) {
      HYLA_ASSIGN_OR_RETURN(
          SnapshotTiers tiers,
          SnapshotTiers::create(*states_,
                                c.int8_snapshots ? SnapshotFormat::kInt8 : SnapshotFormat::kNative,
                                c.device_tier_bytes, c.host_bytes));
      tiers_.emplace(std::move(tiers));
    }
  }
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

std::vector<int32_t> Engine::sequence(const Request& r) const {
  std::vector<int32_t> tokens = r.prompt;
  tokens.insert(tokens.end(), r.generated.begin(), r.generated.end());
  return tokens;
}

void Engine::reclaim(const std::vector<int32_t>& slots, const std::vector<int32_t>& pages) {
  for (const int32_t slot : slots) {
    const Status freed = SnapshotTiers::is_tiered(slot) ? tiers_->erase(slot) : states_->free(slot);
    HYLA_CHECK(freed.ok(), "Engine: a cached snapshot: ", freed.message());
  }
  drop_pages(pages);
  totals_.cache_evictions += int64_t(slots.size());
}

int32_t Engine::take_slot() {
  if (states_->free_slots() == 0 && cache_) {
    // The least recently used snapshot in a slot moves to the first tier (making room there as
    // make_tier_room does), or goes when there is none or no room can be made.
    const CacheNode node =
        cache_->least_recent(false, [](int32_t id) { return !SnapshotTiers::is_tiered(id); });
    if (node >= 0 && tiers_ && make_tier_room(0)) {
      const int32_t slot = cache_->snapshot(node);
      cache_->move_snapshot(node, tiers_->put(0, *states_, slot));
      const Status freed = states_->free(slot);
      HYLA_CHECK(freed.ok(), freed.message());
      ++(tiers_->is_host_tier(0) ? totals_.cache_host_moves : totals_.cache_device_tier_moves);
    } else if (node >= 0) {
      std::vector<int32_t> slots, pages;
      cache_->drop(node, slots, pages);
      reclaim(slots, pages);
    }
  }
  Result<int32_t> slot = states_->allocate();
  return slot.ok() ? slot.value() : -1;
}

bool Engine::make_tier_room(int tier) {
  while (!tiers_->has_room(tier)) {
    const CacheNode old =
        cache_->least_recent(false, [&](int32_t id) { return tiers_->tier_of(id) == tier; });
    if (old < 0) return false;  // every entry is locked
    if (tier + 1 < tiers_->count() && make_tier_room(tier + 1)) {
      cache_->move_snapshot(old, tiers_->move(cache_->snapshot(old), tier + 1));
      ++totals_.cache_host_moves;  // only the host tier comes after another
    } else {
      std::vector<int32_t> slots, pages;
      cache_->drop(old, slots, pages);
      reclaim(slots, pages);
    }
  }
  return true;
}

int32_t Engine::take_weak_slot() {
  if (states_->free_slots() == 0) {
    const CacheNode node = cache_->least_recent(
        false, [](int32_t id) { return !SnapshotTiers::is_tiered(id); }, /*weak_only=*/true);
    if (node < 0) return -1;
    std::vector<int32_t> slots, pages;
    cache_->drop(node, slots, pages);
    reclaim(slots, pages);
  }
  Result<int32_t> slot = states_->allocate();
  return slot.ok() ? slot.value() : -1;
}

void Engine::make_room(int64_t pages) {
  while (cache_ && pages_->free_pages() < pages) {
    std::vector<int32_t> slots, released;
    if (!cache_->evict(true, slots, released)) return;
    reclaim(slots, released);
  }
}

std::optional<std::vector<int32_t>> Engine::take_pages(int64_t n) {
  if (n == 0) return std::vector<int32_t>{};
  make_room(n);
  Result<std::vector<int32_t>> pages = pages_->allocate(n);
  if (!pages.ok()) return std::nullopt;
  for (const int32_t page : *pages) page_refs_[size_t(page)] = 1;
  return std::move(pages).value();
}

void Engine::drop_pages(std::span<const int32_t> pages) {
  std::vector<int32_t> unused;
  for (const int32_t page : pages) {
    int32_t& refs = page_refs_[size_t(page)];
    HYLA_CHECK(refs > 0, "Engine: page ", page, " dropped more often than it was taken");
    if (--refs == 0) unused.push_back(page);
  }
  if (unused.empty()) return;
  // Freeing what this engine allocated cannot fail; a failure is an engine bug.
  const Status freed = pages_->free(unused);
  HYLA_CHECK(freed.ok(), freed.message());
}

bool Engine::try_admit(Request& r) {
  // The longest cached prefix with a snapshot, leaving at least the last token to compute (its
  // logits give the next token).
  PrefixMatch hit;
  std::vector<int32_t> tokens;
  if (cache_) {
    tokens = sequence(r);
    hit = cache_->match(tokens, r.prefill_len - 1);
    ++totals_.cache_lookups;
    if (hit.node >= 0) cache_->lock(hit.node);
  }
  const int64_t shared = hit.tokens / options_.page_size;  // whole pages taken as they are
  const auto unlock = [&] {
    if (hit.node >= 0) cache_->unlock(hit.node);
  };
  if (states_) {
    r.slot = take_slot();
    if (r.slot < 0) {
      unlock();
      return false;
    }
  }
  if (pages_) {
    std::optional<std::vector<int32_t>> fresh = take_pages(pages_for(r.prefill_len) - shared);
    if (!fresh) {
      if (states_) (void)states_->free(r.slot);
      r.slot = -1;
      unlock();
      return false;
    }
    r.pages.assign(hit.pages.begin(), hit.pages.begin() + shared);
    for (const int32_t page : r.pages) ++page_refs_[size_t(page)];
    r.pages.insert(r.pages.end(), fresh->begin(), fresh->end());
    // Resuming inside a page: the request writes the rest of it, so it takes a copy.
    if (hit.tokens % options_.page_size != 0) {
      const Status copied = pages_->copy_page(hit.pages[size_t(shared)], r.pages[size_t(shared)]);
      HYLA_CHECK(copied.ok(), copied.message());
    }
  }
  if (states_) {
    const int tier = SnapshotTiers::is_tiered(hit.snapshot) ? tiers_->tier_of(hit.snapshot) : -1;
    const Status state = hit.snapshot < 0 ? states_->zero(r.slot)
                         : tier >= 0      ? tiers_->load(hit.snapshot, *states_, r.slot)
                                          : states_->copy(hit.snapshot, r.slot);
    if (tier >= 0)
      ++(tiers_->is_host_tier(tier) ? totals_.cache_host_hits : totals_.cache_device_tier_hits);
    HYLA_CHECK(state.ok(), state.message());
  }
  unlock();
  r.processed = hit.tokens;
  if (hit.tokens > 0) {
    ++totals_.cache_hits;
    totals_.cached_tokens += hit.tokens;
  }
  if (r.cached < 0) r.cached = hit.tokens;
  // Where this prefill leaves the tree (it matched further than the snapshot): a snapshot there
  // lets the next request down this branch resume at the branch point.
  r.branch = cache_ && hit.common > hit.tokens && hit.common < r.prefill_len - 1 ? hit.common : 0;
  r.admitted = true;
  r.admission = admissions_++;
  return true;
}

std::vector<std::vector<Engine::Boundary>> Engine::reserve_boundaries(
    const std::vector<Scheduled>& scheduled, model::Batch& batch) {
  std::vector<std::vector<Boundary>> out;
  if (!cache_ || batch.is_decode() || !model_.writes_boundary_states()) return out;
  out.resize(scheduled.size());
  constexpr int64_t C = kernels::kDeltaRuleChunk;
  bool any = false;
  for (size_t b = 0; b < scheduled.size(); ++b) {
    const Scheduled& s = scheduled[b];
    const int64_t entries = s.count / C;
    if (entries == 0) continue;
    const std::vector<int32_t> tokens = sequence(*s.request);
    // Entry j is the state after s.begin + C (j + 1) tokens; the chunk's end is not one of them
    // (wants_snapshot takes that one after the step).
    // Candidates: on the interval, inside the chunk, not cached yet. Only the deepest few are
    // kept (thin_weak would drop the others at once), in slots that never cost a snapshot that
    // proved useful (take_weak_slot).
    std::vector<int32_t> slots(size_t(entries), -1);
    int64_t kept = 0;
    const int64_t cap = options_.prefix_cache.max_path_weak_snapshots;
    for (int64_t j = entries - 1; j >= 0 && (cap == 0 || kept < cap); --j) {
      const int64_t p = s.begin + C * (j + 1);
      if (p >= s.begin + s.count || p % options_.prefix_cache.snapshot_interval != 0) continue;
      const CacheNode node = cache_->find(std::span<const int32_t>(tokens.data(), size_t(p)));
      if (node >= 0 && cache_->snapshot(node) >= 0) continue;
      const int32_t slot = take_weak_slot();
      if (slot < 0) break;
      slots[size_t(j)] = slot;
      ++kept;
    }
    for (int64_t j = 0; j < entries; ++j) {
      batch.boundary_slots.push_back(slots[size_t(j)]);
      if (slots[size_t(j)] >= 0) {
        out[b].push_back(Boundary{s.begin + C * (j + 1), slots[size_t(j)]});
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

void Engine::keep_boundaries(const Request& r, const std::vector<Boundary>& list, bool finite) {
  const std::vector<int32_t> tokens = sequence(r);
  for (const Boundary& boundary : list) {
    std::vector<int32_t> referenced;
    Result<bool> inserted =
        finite ? cache_->insert(std::span<const int32_t>(tokens.data(), size_t(boundary.position)),
                                r.pages, boundary.slot, referenced, /*weak=*/true)
               : Result<bool>(false);
    HYLA_CHECK(inserted.ok(), inserted.status().message());
    if (!inserted.value()) {
      (void)states_->free(boundary.slot);
      continue;
    }
    for (const int32_t page : referenced) ++page_refs_[size_t(page)];
    ++totals_.snapshots_taken;
  }
  // The deepest of them stands for the others on the path (thin_weak).
  if (list.empty()) return;
  const CacheNode node =
      cache_->find(std::span<const int32_t>(tokens.data(), size_t(list.back().position)));
  if (node < 0) return;
  std::vector<int32_t> slots, released;
  cache_->thin_weak(node, options_.prefix_cache.max_path_weak_snapshots, slots, released);
  reclaim(slots, released);
}

bool Engine::wants_snapshot(const Request& r) const {
  const PrefixCacheOptions& c = options_.prefix_cache;
  const int64_t p = r.processed;
  if (p <= 0) return false;
  if (!r.prefill_done())
    return p == r.prefill_len - 1 || p == r.branch || p % c.snapshot_interval == 0;
  return c.decode_interval > 0 && p % c.decode_interval == 0;
}

void Engine::snapshot(Request& r, bool adopt) {
  const std::vector<int32_t> all = sequence(r);
  const std::span<const int32_t> tokens(all.data(), size_t(r.processed));
  // Already cached (a hit resumed right here, or an identical request came first): keep that one.
  if (const CacheNode node = cache_->find(tokens); node >= 0 && cache_->snapshot(node) >= 0) return;
  const int32_t slot = adopt ? r.slot : take_slot();
  if (slot < 0) return;
  if (!adopt) {
    const Status copied = states_->copy(r.slot, slot);
    HYLA_CHECK(copied.ok(), copied.message());
  }
  std::vector<int32_t> referenced;
  Result<bool> inserted = cache_->insert(tokens, r.pages, slot, referenced);
  HYLA_CHECK(inserted.ok(), inserted.status().message());
  if (!inserted.value()) {
    if (!adopt) (void)states_->free(slot);
    return;
  }
  if (adopt) r.slot = -1;  // the cache's now
  for (const int32_t page : referenced) ++page_refs_[size_t(page)];
  ++totals_.snapshots_taken;
  std::vector<int32_t> slots, released;
  const CacheNode node = cache_->find(tokens);
  cache_->cap_path(node, options_.prefix_cache.max_path_snapshots, slots, released);
  reclaim(slots, released);
}

void Engine::preempt(Request& r) {
  HYLA_CHECK(r.admitted, "Engine::preempt: request ", r.id, " is not running");
  // Freeing what this engine allocated cannot fail; a failure is an engine bug.
  if (states_) {
    const Status freed = states_->free(r.slot);
    HYLA_CHECK(freed.ok(), freed.message());
  }
  if (pages_) drop_pages(r.pages);
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
    make_room(missing);  // the prefix cache's least recently used entries go first
    if (missing <= pages_->free_pages()) break;
    preempt(*newest);
  }
  for (auto& [id, r] : requests_) {
    if (!r.admitted || !r.prefill_done()) continue;
    const int64_t more = pages_for(r.processed + 1) - int64_t(r.pages.size());
    if (more <= 0) continue;
    std::optional<std::vector<int32_t>> pages = take_pages(more);
    HYLA_CHECK(pages.has_value(), "Engine: ", more, " pages counted free but not allocated");
    r.pages.insert(r.pages.end(), pages->begin(), pages->end());
  }
}

Status Engine::check_invariants() const {
  if (ranks_) HYLA_RETURN_IF_ERROR(check_other_ranks());
  const int64_t num_slots = states_ ? states_->capacity() : 0;
  const int64_t num_pages = pages_ ? pages_->capacity() : 0;
  std::vector<RequestId> slot_owner(size_t(num_slots), -1);
  std::vector<int32_t> page_refs(size_t(num_pages), 0), request_refs(size_t(num_pages), 0);
  int64_t owned_slots = 0, running = 0;
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
      ++owned_slots;
    }
    if (int64_t(r.pages.size()) < pages_for(r.processed))
      return internal_error("request ", id, " has processed ", r.processed, " tokens on only ",
                            r.pages.size(), " pages");
    for (const int32_t page : r.pages) {
      if (page < 0 || page >= num_pages || !pages_->is_allocated(page))
        return internal_error("request ", id, " holds page ", page, ", not an allocated page of ",
                              num_pages);
      ++page_refs[size_t(page)];
      ++request_refs[size_t(page)];
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
  std::vector<int32_t> cache_slots, cache_pages;
  if (cache_) {
    HYLA_RETURN_IF_ERROR(cache_->check_invariants(true));
    cache_->references(cache_slots, cache_pages);
    for (const int32_t page : cache_pages) {
      if (page < 0 || page >= num_pages || !pages_->is_allocated(page))
        return internal_error("the prefix cache lists page ", page, ", not an allocated page of ",
                              num_pages);
      ++page_refs[size_t(page)];
    }
    for (const int32_t slot : cache_slots) {
      if (SnapshotTiers::is_tiered(slot)) {
        if (!tiers_ || tiers_->tier_of(slot) < 0)
          return internal_error("the prefix cache names tier snapshot ", slot,
                                ", which no tier holds");
        continue;
      }
      if (slot < 0 || slot >= num_slots || !states_->is_allocated(slot))
        return internal_error("the prefix cache holds slot ", slot, ", not an allocated slot of ",
                              num_slots);
      if (slot_owner[size_t(slot)] >= 0)
        return internal_error("slot ", slot, " is a cached snapshot and request ",
                              slot_owner[size_t(slot)], "'s working slot");
      slot_owner[size_t(slot)] = -2;
      ++owned_slots;
    }
  }
  int64_t owned_pages = 0;
  for (int64_t page = 0; page < num_pages; ++page) {
    if (page_refs[size_t(page)] != page_refs_[size_t(page)])
      return internal_error("page ", page, " has ", page_refs[size_t(page)],
                            " holders but a count of ", page_refs_[size_t(page)]);
    owned_pages += page_refs[size_t(page)] > 0;
  }
  if (running > options_.max_running)
    return internal_error(running, " requests run, more than max_running ", options_.max_running);
  if (states_ && owned_slots + states_->free_slots() != num_slots)
    return internal_error(owned_slots, " slots held (", cache_slots.size(), " by the cache) + ",
                          states_->free_slots(), " free != ", num_slots);
  if (pages_ && owned_pages + pages_->free_pages() != num_pages)
    return internal_error(owned_pages, " pages held + ", pages_->free_pages(),
                          " free != ", num_pages);
  return ok_status();
}

void Engine::release(RequestId id, FinishReason reason, std::vector<TokenEvent>& events,
                     std::string error) {
  const auto it = requests_.find(id);
  HYLA_CHECK(it != requests_.end(), "Engine::release: unknown request ", id);
  Request& r = it->second;
  // A request that ran to its end leaves its state there for the next turn of the conversation.
  // Its working slot becomes the snapshot (no copy, no other slot needed).
  if (cache_ && r.admitted &&
      (reason == FinishReason::kStopToken || reason == FinishReason::kMaxTokens))
    snapshot(r, /*adopt=*/true);
  // Freeing what this engine allocated cannot fail; a failure is an engine bug.
  if (r.admitted && states_ && r.slot >= 0) {
    const Status freed = states_->free(r.slot);
    HYLA_CHECK(freed.ok(), freed.message());
  }
  if (r.admitted && pages_) drop_pages(r.pages);
  if (draft_model_) draft_model_->release(id);
  if (reason == FinishReason::kCancelled || reason == FinishReason::kError)
    events.push_back(TokenEvent{.request = id,
                                .token = -1,
                                .finished = true,
                                .reason = reason,
                                .error = std::move(error),
                                .cached_tokens = std::max<int64_t>(r.cached, 0)});
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
std::vector<Engine::Scheduled> Engine::schedule(std::vector<TokenEvent>& events) {
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
    if (!cache_) return end;
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

/// Per row of a step's logits, picked on their device (kernels/argmax.h): the greedy token, the
/// finiteness census and the first bad value, brought to the host as one [4, B] i32 copy (or
/// read from a decode graph's pinned copy); the full rows come to the host only when some
/// request samples (temperature > 0) or asks for log-probabilities.
struct StepPicks {
  Tensor summary;  // [4, B] on the host, unless `rows` points into a graph's pinned copy
  const int32_t* rows = nullptr;
  int64_t stride = 0;  // elements between the summary's rows
  Tensor host_logits;  // [B, V] on the host, or undefined when no request needs its row there
  int32_t id(int64_t b) const { return rows[b]; }
  int32_t bad(int64_t b) const { return rows[stride + b]; }
  int32_t first_bad(int64_t b) const { return rows[2 * stride + b]; }
  float first_bad_value(int64_t b) const {
    float v;
    std::memcpy(&v, &rows[3 * stride + b], sizeof(v));
    return v;
  }
};

namespace {

/// How the logits of a non-finite row are named in the request's error: the lowest bad column's
/// value and the row's count ("NaN at token 17 (3 of 512 logits not finite)").
std::string non_finite(float value, int64_t first, int64_t count, int64_t V) {
  return str_cat(std::isnan(value) ? "NaN"
                 : value > 0       ? "+inf"
                                   : "-inf",
                 " at token ", first, " (", count, " of ", V, " logits not finite)");
}

Result<StepPicks> pick(const Tensor& logits, bool host_rows) {
  const int64_t B = logits.size(0);
  const Device device = logits.device();
  Tensor summary = Tensor::empty({4, B}, DType::kI32, device);
  const TensorView rows = summary.view(), value_bits = rows.select(3);
  const int64_t shape[] = {B}, stride[] = {1};
  HYLA_RETURN_IF_ERROR(kernels::argmax(
      {.logits = logits,
       .ids = rows.select(0),
       .non_finite = rows.select(1),
       .first_bad = rows.select(2),
       .first_bad_value = TensorView(value_bits.raw(), DType::kF32, 1, shape, stride, device)}));
  StepPicks picks;
  picks.summary = device.is_cpu() ? summary : summary.to(Device::cpu());
  picks.rows = picks.summary.host<int32_t>();
  picks.stride = B;
  if (host_rows) picks.host_logits = device.is_cpu() ? logits : logits.to(Device::cpu());
  return picks;
}

}  // namespace

model::Batch Engine::build_batch(const std::vector<Scheduled>& scheduled) const {
  model::Batch batch;
  batch.cu_seqlens.push_back(0);
  for (const Scheduled& s : scheduled) {
    const Request& r = *s.request;
    const int64_t prompt_len = int64_t(r.prompt.size());
    for (int64_t t = s.begin; t < s.begin + s.count; ++t)
      batch.tokens.push_back(t < prompt_len ? r.prompt[size_t(t)]
                                            : r.generated[size_t(t - prompt_len)]);
    batch.cu_seqlens.push_back(int32_t(batch.tokens.size()));
    batch.past.push_back(s.begin);
    batch.state_slots.push_back(r.slot);
    batch.page_tables.push_back(r.pages);
  }
  return batch;
}

Result<StepPicks> Engine::run_step(const model::Batch& batch, bool host_rows) {
  const CurrentStream on(stream_.handle ? stream_ : current_stream());
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
  if (options_.speculative.drafter != SpeculativeOptions::Drafter::kNone &&
      speculate(scheduled, events))
    return events;

  model::Batch batch = build_batch(scheduled);
  // Prefix cache: slots for the states inside the prefill chunks, filled by the step.
  const std::vector<std::vector<Boundary>> boundaries = reserve_boundaries(scheduled, batch);
  ++totals_.steps;
  totals_.last_step_tokens = int64_t(batch.tokens.size());
  const int64_t V = model_.config().vocab_size, B = int64_t(scheduled.size());
  // A request that samples or reports log-probabilities needs its row of logits on the host.
  bool host_rows = false;
  for (const Scheduled& s : scheduled)
    host_rows |=
        s.request->sampler.params().temperature != 0.0f || s.request->sampler.params().logprobs;
  // Steps that need only the device's greedy picks replay a CUDA graph when they are decodes;
  // the others run their kernels on the engine's stream.
  const bool replay =
      graphs_ && !host_rows && batch.is_decode() && !memory_.layer_times && !op_times_active();
  const bool mtp = mtp_drafting();
  memory_.final_hidden = mtp ? &step_hidden_ : nullptr;
  Result<StepPicks> picks = replay ? replay_step(batch) : run_step(batch, host_rows);
  memory_.final_hidden = nullptr;
  std::vector<MtpRun> mtp_runs;
  if (!picks.ok()) {
    step_failure_ = picks.status();
    for (const std::vector<Boundary>& list : boundaries)
      for (const Boundary& boundary : list) (void)states_->free(boundary.slot);
    // The slots and pages of every sequence in the batch may be half written: fail them all.
    for (const Scheduled& s : scheduled)
      release(s.request->id, FinishReason::kError, events, picks.status().message());
    return events;
  }

  for (int64_t b = 0; b < B; ++b) {
    Request& r = *scheduled[size_t(b)].request;
    if (r.processed < r.prefill_len) totals_.prompt_tokens += scheduled[size_t(b)].count;
    r.processed += scheduled[size_t(b)].count;
    // Only a state whose logits came out finite is worth resuming from.
    if (!boundaries.empty()) keep_boundaries(r, boundaries[size_t(b)], picks->bad(b) == 0);
    if (cache_ && picks->bad(b) == 0 && wants_snapshot(r)) snapshot(r, /*adopt=*/false);
    // The MTP head runs over this chunk once the token after it is known.
    const auto mtp_run = [&] {
      if (!mtp) return;
      const Scheduled& sc = scheduled[size_t(b)];
      const int64_t known = int64_t(r.prompt.size() + r.generated.size());
      if (known < sc.begin + sc.count + 1) return;
      MtpRun run{
          .id = r.id, .begin = sc.begin, .first_row = batch.cu_seqlens[size_t(b)], .next = {}};
      for (int64_t p = sc.begin + 1; p <= sc.begin + sc.count; ++p)
        run.next.push_back(token_at(r, p));
      mtp_runs.push_back(std::move(run));
    };
    if (!r.prefill_done()) {  // mid-prefill chunk: nothing to sample
      if (picks->bad(b) == 0) mtp_run();
      continue;
    }

    if (const int32_t bad = picks->bad(b); bad > 0) {
      const int32_t first = picks->first_bad(b);
      release(r.id, FinishReason::kError, events,
              str_cat("request ", r.id, ": the logits of step ", totals_.steps, " (its token ",
                      r.generated.size() + 1, ", after ", r.processed, " tokens) hold ",
                      non_finite(picks->first_bad_value(b), first, bad, V),
                      "; the request is ended, the others go on"));
      continue;
    }
    // Greedy rows take the device's pick (the Sampler's own rule, kernels/argmax.h).
    const SamplingParams& params = r.sampler.params();
    const auto row = [&] {
      return std::span<const float>(picks->host_logits.host<float>() + b * V, size_t(V));
    };
    const int32_t token = params.temperature == 0.0f ? picks->id(b) : r.sampler.sample(row());
    std::optional<double> logprob;
    std::vector<TokenLogprob> top_logprobs;
    if (params.logprobs) {
      TokenLogprobs lp = token_logprobs(row(), token, params.temperature, params.top_logprobs);
      logprob = lp.logprob;
      top_logprobs = std::move(lp.top);
    }
    r.generated.push_back(token);
    ++totals_.tokens_generated;
    mtp_run();
    // The drafter goes with the request's tokens (one that cannot hold more stops drafting).
    if (r.drafter && !r.drafter->append(std::span<const int32_t>(&token, 1)).ok())
      r.drafter.reset();
    FinishReason reason = FinishReason::kNone;
    if (r.sampler.is_stop(token))
      reason = FinishReason::kStopToken;
    else if (int64_t(r.generated.size()) >= r.sampler.params().max_new_tokens)
      reason = FinishReason::kMaxTokens;
    events.push_back(TokenEvent{.request = r.id,
                                .token = token,
                                .finished = reason != FinishReason::kNone,
                                .reason = reason,
                                .error = {},
                                .logprob = logprob,
                                .top_logprobs = std::move(top_logprobs),
                                .cached_tokens = std::max<int64_t>(r.cached, 0)});
    if (reason != FinishReason::kNone) release(r.id, reason, events);
  }
  if (!mtp_runs.empty()) mtp_draft(mtp_runs);
  return events;
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
      sequences[b] = sequence(r);
      queries.push_back(DraftQuery{.id = r.id, .tokens = sequences[b], .k = k});
      asked.push_back(b);
    }
    Result<std::vector<std::vector<int32_t>>> proposed = std::vector<std::vector<int32_t>>{};
    if (!queries.empty()) {
      const CurrentStream on(stream_.handle ? stream_ : current_stream());
      proposed = draft_model_->propose(queries);
    }
    // Drafts are optional: a failed draft call leaves the step a plain decode step.
    if (!proposed.ok()) {
      ++totals_.spec_draft_failures;
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
  std::optional<std::vector<int32_t>> pages = take_pages(more);
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
    batch.tokens.push_back(r.generated.back());
    batch.tokens.insert(batch.tokens.end(), drafts[size_t(b)].begin(), drafts[size_t(b)].end());
    batch.cu_seqlens.push_back(int32_t(batch.tokens.size()));
    batch.past.push_back(r.processed);
    batch.state_slots.push_back(r.slot);
    batch.page_tables.push_back(r.pages);
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
      if (const int32_t bad = picks->bad(first + j); bad > 0)
        out.error = str_cat(
            "request ", r.id, ": the logits of step ", totals_.steps, " (verifying its token ",
            r.generated.size() + 1 + j, ") hold ",
            non_finite(picks->first_bad_value(first + j), picks->first_bad(first + j), bad, V),
            "; the request is ended, the others go on");
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
    totals_.spec_draft_tokens += int64_t(d.size());
    totals_.spec_accepted_tokens += int64_t(tokens.size()) - 1;
    if (!d.empty())
      r.spec_k = std::clamp<int64_t>(int64_t(tokens.size()), 1, options_.speculative.draft_tokens);
    for (size_t i = 0; i < tokens.size() && out.reason == FinishReason::kNone; ++i) {
      const int32_t token = tokens[i];
      std::optional<double> logprob;
      std::vector<TokenLogprob> top;
      if (params.logprobs) {
        TokenLogprobs lp = token_logprobs(
            std::span<const float>(picks->host_logits.host<float>() + (first + int64_t(i)) * V,
                                   size_t(V)),
            token, params.temperature, params.top_logprobs);
        logprob = lp.logprob;
        top = std::move(lp.top);
      }
      r.generated.push_back(token);
      if (r.drafter && !r.drafter->append(std::span<const int32_t>(&token, 1)).ok())
        r.drafter.reset();
      if (r.sampler.is_stop(token))
        out.reason = FinishReason::kStopToken;
      else if (int64_t(r.generated.size()) >= params.max_new_tokens)
        out.reason = FinishReason::kMaxTokens;
      out.events.push_back(TokenEvent{.request = r.id,
                                      .token = token,
                                      .finished = out.reason != FinishReason::kNone,
                                      .reason = out.reason,
                                      .error = {},
                                      .logprob = logprob,
                                      .top_logprobs = std::move(top),
                                      .cached_tokens = std::max<int64_t>(r.cached, 0)});
    }
    // The state goes on through the last token and every emitted one but the newest.
    commit[size_t(b)] = int32_t(out.events.size());
  }
  ++totals_.spec_steps;
  totals_.spec_sequences += B;
  totals_.spec_record_bytes = memory_.verify->bytes();
  totals_.spec_record_sequences = B;
  Status committed;
  {
    const CurrentStream on(stream_.handle ? stream_ : current_stream());
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
    totals_.spec_emitted_tokens += commit[size_t(b)];
    // Roll the page table back to the pages of the tokens kept and the next one.
    if (pages_) {
      const size_t keep = size_t(pages_for(r.processed + 1));
      if (r.pages.size() > keep) {
        drop_pages(std::span<const int32_t>(r.pages).subspan(keep));
        r.pages.resize(keep);
      }
    }
    if (cache_ && wants_snapshot(r)) snapshot(r, /*adopt=*/false);
    for (TokenEvent& e : out.events) events.push_back(std::move(e));
    if (out.reason != FinishReason::kNone) release(r.id, out.reason, events);
  }
  verify_record_.layers.clear();  // its tensors are not needed past the commit
  if (!mtp_runs.empty()) mtp_draft(mtp_runs);
  return true;
}

void Engine::mtp_draft(const std::vector<MtpRun>& runs) {
  const CurrentStream on(stream_.handle ? stream_ : current_stream());
  const int64_t V = model_.config().vocab_size;
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
    batch.tokens.insert(batch.tokens.end(), run.next.begin(), run.next.end());
    batch.cu_seqlens.push_back(int32_t(batch.tokens.size()));
    batch.past.push_back(run.begin);
    batch.state_slots.push_back(r.slot);
    batch.page_tables.push_back(r.pages);
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
      values[size_t(i)] = p.host_logits.host<float>()[i * V + ids[size_t(i)]];
    }
    return ids;
  };
  const auto failed = [&] {
    ++totals_.spec_draft_failures;
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
      next.tokens.push_back(r.mtp_drafts.back());
      next.cu_seqlens.push_back(int32_t(next.tokens.size()));
      next.past.push_back(position);
      next.state_slots.push_back(r.slot);
      next.page_tables.push_back(r.pages);
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

bool Engine::idle() const { return requests_.empty() && pending_events_.empty(); }

EngineStats Engine::stats() const {
  EngineStats s = totals_;
  for (const auto& [id, r] : requests_) ++(r.admitted ? s.running : s.waiting);
  s.free_slots = states_ ? states_->free_slots() : 0;
  s.free_pages = pages_ ? pages_->free_pages() : 0;
  if (cache_) {
    const RadixTreeStats tree = cache_->stats();
    for (int t = 0; tiers_ && t < tiers_->count(); ++t) {
      const bool host = tiers_->is_host_tier(t);
      (host ? s.cache_host_snapshots : s.cache_device_tier_snapshots) = tiers_->entries(t);
      (host ? s.cache_host_bytes : s.cache_device_tier_bytes) = tiers_->bytes(t);
    }
    s.cache_snapshots = tree.snapshots - s.cache_host_snapshots - s.cache_device_tier_snapshots;
    s.cache_snapshot_bytes = s.cache_snapshots * states_->slot_bytes();
    s.cache_tokens = tree.tokens;
    // Pages no request holds: the cache's alone (a request's pages count once each).
    std::vector<uint8_t> held(page_refs_.size(), 0);
    for (const auto& [id, r] : requests_)
      for (const int32_t page : r.pages) held[size_t(page)] = 1;
    for (size_t page = 0; page < page_refs_.size(); ++page)
      s.cache_pages += page_refs_[page] > 0 && !held[page];
  }
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

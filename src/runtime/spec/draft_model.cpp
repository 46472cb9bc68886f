// DraftModelDrafter (see draft_model.h): per request a held prefix (slot + KV pages), caught up
// by chunked, packed prefill; drafts 2..k by batched decode steps on scratch copies of the slots;
// greedy picks on the logits' device (kernels/argmax.h), 3 ints per row to the host.
#include "runtime/spec/draft_model.h"

#include <algorithm>
#include <limits>

#include "kernels/argmax.h"
#include "runtime/memory/pool_views.h"

namespace hyla::runtime {

DraftModelDrafter::DraftModelDrafter(const model::Model& draft, DraftModelOptions options)
    : model_(draft), options_(options) {}

Result<std::unique_ptr<DraftModelDrafter>> DraftModelDrafter::create(const model::Model& draft,
                                                                     DraftModelOptions options) {
  if (options.memory_budget_bytes <= 0)
    return invalid_argument("DraftModelDrafter: memory_budget_bytes is ",
                            options.memory_budget_bytes, ", expected > 0");
  if (options.max_requests < 1)
    return invalid_argument("DraftModelDrafter: max_requests is ", options.max_requests,
                            ", expected >= 1");
  if (options.max_batch_tokens < kDraftPrefillAlign)
    return invalid_argument("DraftModelDrafter: max_batch_tokens is ", options.max_batch_tokens,
                            ", expected >= ", kDraftPrefillAlign,
                            " (catch-up chunks end on multiples of ", kDraftPrefillAlign,
                            " tokens)");
  if (options.page_size < 1)
    return invalid_argument("DraftModelDrafter: page_size is ", options.page_size,
                            ", expected >= 1");
  std::unique_ptr<DraftModelDrafter> drafter(new DraftModelDrafter(draft, options));
  HYLA_RETURN_IF_ERROR(drafter->init_pools());
  drafter->init_batch_memory();
  return drafter;
}

MemoryPlanOptions draft_memory_plan_options(const DraftModelOptions& options, Device device) {
  MemoryPlanOptions m;
  m.state.conv_dtype = options.conv_dtype;
  m.state.ssm_dtype = options.state_dtype;
  m.state.device = device;
  m.kv.page_size = options.page_size;
  m.kv.dtype = options.kv_dtype;
  m.kv.device = device;
  m.max_batch_tokens = options.max_batch_tokens;
  return m;
}

Result<MemorySizing> size_draft_memory(const model::ModelConfig& config,
                                       const DraftModelOptions& options,
                                       std::span<const int64_t> request_tokens) {
  // A scratch slot is sized as a one-token request: a slot (and a page of slack).
  std::vector<int64_t> tokens(request_tokens.begin(), request_tokens.end());
  tokens.insert(tokens.end(), request_tokens.size(), 1);
  return size_memory(config, tokens, draft_memory_plan_options(options, Device::cpu()));
}

Status DraftModelDrafter::init_pools() {
  const MemoryPlanOptions m = draft_memory_plan_options(options_, model_.device());
  Result<MemoryPlan> plan =
      plan_memory(model_.config(), options_.memory_budget_bytes, options_.state_ratio, m);
  if (!plan.ok())
    return Status(plan.status().code(), str_cat("DraftModelDrafter: ", plan.status().message()));
  plan_ = std::move(plan).value();
  if (plan_.state_slots > 0) {
    HYLA_ASSIGN_OR_RETURN(StatePool pool,
                          StatePool::create(model_.config(), plan_.state_slots, m.state));
    states_.emplace(std::move(pool));
  }
  if (plan_.kv_pages > 0) {
    HYLA_ASSIGN_OR_RETURN(KvPagePool pool,
                          KvPagePool::create(model_.config(), plan_.kv_pages, m.kv));
    pages_.emplace(std::move(pool));
  }
  return ok_status();
}

// No fused-decode scratch: the decode kernels run without it.
void DraftModelDrafter::init_batch_memory() {
  memory_ = pool_views(model_.config(), states_ ? &*states_ : nullptr, pages_ ? &*pages_ : nullptr,
                       options_.page_size);
}

int64_t DraftModelDrafter::pages_for(int64_t tokens) const {
  return pages_ ? pages_->pages_for_tokens(tokens) : 0;
}

Status DraftModelDrafter::validate(std::span<const DraftQuery> queries) const {
  const int64_t V = model_.config().vocab_size;
  std::set<int64_t> ids;
  for (size_t i = 0; i < queries.size(); ++i) {
    const DraftQuery& q = queries[i];
    if (!ids.insert(q.id).second)
      return invalid_argument("DraftModelDrafter::propose: query ", i, " (id ", q.id,
                              ") repeats the id of an earlier query of the call");
    if (q.k < 0 || q.k > kMaxDraftModelTokens)
      return invalid_argument("DraftModelDrafter::propose: query ", i, " (id ", q.id, "): k is ",
                              q.k, ", expected an integer in [0, ", kMaxDraftModelTokens, "]");
    if (q.tokens.empty())
      return invalid_argument("DraftModelDrafter::propose: query ", i, " (id ", q.id,
                              ") has no tokens (drafts follow the sequence's last token)");
    for (size_t t = 0; t < q.tokens.size(); ++t)
      if (q.tokens[t] < 0 || q.tokens[t] >= V)
        return out_of_range("DraftModelDrafter::propose: query ", i, " (id ", q.id, "): token ", t,
                            " is ", q.tokens[t], ", outside [0, ", V,
                            ") (the draft model's vocabulary)");
  }
  return ok_status();
}

Result<std::vector<std::vector<int32_t>>> DraftModelDrafter::propose(
    std::span<const DraftQuery> queries) {
  HYLA_RETURN_IF_ERROR(validate(queries));
  std::vector<std::vector<int32_t>> out(queries.size());
  std::vector<size_t> pending;  // queries with k > 0, in order
  for (size_t i = 0; i < queries.size(); ++i) {
    if (queries[i].k == 0) continue;
    pending.push_back(i);
    pinned_.insert(queries[i].id);
  }
  // Rounds: as many queries as fit at once (in order) run together; one that does not fit waits
  // for the next round, where the finished ones can be evicted for it.
  Status status = ok_status();
  size_t next = 0;
  while (next < pending.size() && status.ok()) {
    std::vector<Work> round;
    while (next < pending.size()) {
      const DraftQuery& q = queries[pending[next]];
      Work w{.query = pending[next], .id = q.id, .tokens = q.tokens};
      if (admit(w, q.k)) {
        round.push_back(std::move(w));
        ++next;
        continue;
      }
      if (!round.empty()) break;
      // Alone in its round and still no room: no drafts for it.
      ++totals_.proposals;
      ++totals_.short_queries;
      pinned_.erase(q.id);
      ++next;
    }
    if (round.empty()) continue;
    status = run_round(round);
    for (Work& w : round) {
      if (w.scratch >= 0) HYLA_CHECK(states_->free(w.scratch).ok(), "scratch slot ", w.scratch);
      pinned_.erase(w.id);
      ++totals_.proposals;
      totals_.drafts += int64_t(w.drafts.size());
      out[w.query] = std::move(w.drafts);
    }
  }
  pinned_.clear();
  if (!status.ok()) return status;
  return out;
}

bool DraftModelDrafter::admit(Work& w, int64_t wanted) {
  auto [it, created] = held_.try_emplace(w.id);
  Held& h = it->second;
  h.last_use = ++clock_;
  const auto fail = [&] {
    // A request whose held tokens are gone keeps nothing worth its slot and pages.
    if (h.tokens.empty()) drop(w.id);
    return false;
  };
  if (created)
    while (int64_t(held_.size()) > options_.max_requests)
      if (!evict_one(Room::kEntry)) return fail();
  const int64_t n = int64_t(w.tokens.size());
  if (int64_t(h.tokens.size()) > n ||
      !std::equal(h.tokens.begin(), h.tokens.end(), w.tokens.begin())) {
    reset(h);
    ++totals_.resets;
  }
  if (states_ && h.slot < 0) {
    h.slot = take_slot();
    if (h.slot < 0) return fail();
  }
  if (states_ && h.tokens.empty()) HYLA_CHECK(states_->zero(h.slot).ok(), "slot ", h.slot);
  if (const int64_t more = pages_for(n) - int64_t(h.pages.size()); more > 0 && !take_pages(h, more))
    return fail();
  w.processed = int64_t(h.tokens.size());

  // Drafts 2..k: the pages of their KV rows (positions n .. n + k - 2) and a scratch slot, as far
  // as they can be had.
  int64_t k = wanted;
  if (k > 1 && pages_) {
    const int64_t want_pages = pages_for(n + k - 1);
    while (int64_t(h.pages.size()) < want_pages && take_pages(h, 1)) {
    }
    k = std::min(k, int64_t(h.pages.size()) * pages_->page_size() - n + 1);
  }
  if (k > 1 && states_) {
    w.scratch = take_slot();
    if (w.scratch < 0) k = 1;
  }
  w.k = k;
  if (k < wanted) ++totals_.short_queries;
  return true;
}

Status DraftModelDrafter::run_round(std::vector<Work>& round) {
  HYLA_RETURN_IF_ERROR(catch_up(round));
  return draft(round);
}

Status DraftModelDrafter::catch_up(std::vector<Work>& round) {
  for (;;) {
    model::Batch batch;
    batch.cu_seqlens.push_back(0);
    std::vector<std::pair<Work*, int64_t>> chunks;  // each sequence's work and chunk end
    int64_t step_tokens = 0;
    for (Work& w : round) {
      const int64_t n = int64_t(w.tokens.size());
      if (w.processed >= n) continue;
      int64_t end = std::min(n, w.processed + options_.max_batch_tokens - step_tokens);
      if (end < n) end -= end % kDraftPrefillAlign;
      if (end <= w.processed) continue;  // no room left in this call for an aligned chunk
      const Held& h = held_.at(w.id);
      batch.tokens.insert(batch.tokens.end(), w.tokens.begin() + w.processed,
                          w.tokens.begin() + end);
      batch.cu_seqlens.push_back(int32_t(batch.tokens.size()));
      batch.past.push_back(w.processed);
      batch.state_slots.push_back(h.slot);
      batch.page_tables.push_back(h.pages);
      chunks.emplace_back(&w, end);
      step_tokens += end - w.processed;
    }
    if (chunks.empty()) return ok_status();
    ++totals_.prefill_steps;
    Result<std::vector<std::pair<int32_t, int32_t>>> rows = picks(batch);
    if (!rows.ok()) {
      // The chunks' slots and pages may be half written.
      for (auto& [w, end] : chunks) reset(held_.at(w->id));
      return rows.status();
    }
    for (size_t b = 0; b < chunks.size(); ++b) {
      auto& [w, end] = chunks[b];
      Held& h = held_.at(w->id);
      h.tokens.insert(h.tokens.end(), w->tokens.begin() + w->processed, w->tokens.begin() + end);
      h.next = -1;
      totals_.prefill_tokens += end - w->processed;
      w->processed = end;
      if (end < int64_t(w->tokens.size())) continue;
      const auto [id, bad] = (*rows)[b];
      if (bad > 0) {
        // A state that gives non-finite logits is not worth resuming from.
        reset(h);
        ++totals_.non_finite;
        w->k = 0;
      } else {
        h.next = id;
      }
    }
  }
}

Status DraftModelDrafter::draft(std::vector<Work>& round) {
  for (Work& w : round) {
    if (w.k < 1) continue;
    const Held& h = held_.at(w.id);
    w.drafts.push_back(h.next);
    if (w.k > 1 && states_) HYLA_RETURN_IF_ERROR(states_->copy(h.slot, w.scratch));
  }
  // Step j feeds draft j at position n + j - 1 and picks draft j + 1. The KV rows go to the
  // request's pages past its held tokens; the linear state to the scratch slot.
  for (int64_t j = 1;; ++j) {
    model::Batch batch;
    batch.cu_seqlens.push_back(0);
    std::vector<Work*> rows_of;
    for (Work& w : round) {
      if (int64_t(w.drafts.size()) != j || w.k <= j) continue;
      batch.tokens.push_back(w.drafts.back());
      batch.cu_seqlens.push_back(int32_t(batch.tokens.size()));
      batch.past.push_back(int64_t(w.tokens.size()) + j - 1);
      batch.state_slots.push_back(w.scratch);
      batch.page_tables.push_back(held_.at(w.id).pages);
      rows_of.push_back(&w);
    }
    if (rows_of.empty()) return ok_status();
    ++totals_.decode_steps;
    // A failure here leaves the held states as they were: only scratch slots and KV rows past
    // the held tokens were written.
    HYLA_ASSIGN_OR_RETURN(const auto rows, picks(batch));
    for (size_t b = 0; b < rows_of.size(); ++b) {
      Work& w = *rows_of[b];
      if (rows[b].second > 0) {
        ++totals_.non_finite;
        w.k = int64_t(w.drafts.size());
      } else {
        w.drafts.push_back(rows[b].first);
      }
    }
  }
}

Result<std::vector<std::pair<int32_t, int32_t>>> DraftModelDrafter::picks(
    const model::Batch& batch) {
  HYLA_ASSIGN_OR_RETURN(const Tensor logits, model_.forward_batch(batch, memory_));
  const int64_t B = batch.num_sequences(), V = model_.config().vocab_size;
  if (logits.dtype() != DType::kF32 || logits.ndim() != 2 || logits.size(0) != B ||
      logits.size(1) != V)
    return internal_error("DraftModelDrafter: forward_batch returned logits ",
                          logits.view().shape_string(), " ", dtype_name(logits.dtype()),
                          ", expected [", B, ", ", V, "] f32");
  const Device device = logits.device();
  Tensor summary = Tensor::empty({3, B}, DType::kI32, device);
  const TensorView rows = summary.view();
  HYLA_RETURN_IF_ERROR(kernels::argmax({.logits = logits,
                                        .ids = rows.select(0),
                                        .non_finite = rows.select(1),
                                        .first_bad = rows.select(2)}));
  const Tensor host = device.is_cpu() ? summary : summary.to(Device::cpu());
  const int32_t* data = host.host<int32_t>();
  std::vector<std::pair<int32_t, int32_t>> out(static_cast<size_t>(B));
  for (int64_t b = 0; b < B; ++b) out[size_t(b)] = {data[b], data[B + b]};
  return out;
}

int32_t DraftModelDrafter::take_slot() {
  while (states_->free_slots() == 0)
    if (!evict_one(Room::kSlot)) return -1;
  Result<int32_t> slot = states_->allocate();
  return slot.ok() ? slot.value() : -1;
}

int64_t DraftModelDrafter::obtainable_pages() const {
  int64_t pages = pages_->free_pages();
  for (const auto& [id, h] : held_)
    if (!pinned_.contains(id)) pages += int64_t(h.pages.size());
  return pages;
}

bool DraftModelDrafter::take_pages(Held& h, int64_t n) {
  if (obtainable_pages() < n) return false;
  while (pages_->free_pages() < n)
    if (!trim_surplus() && !evict_one(Room::kPages)) return false;
  Result<std::vector<int32_t>> got = pages_->allocate(n);
  if (!got.ok()) return false;
  h.pages.insert(h.pages.end(), got->begin(), got->end());
  return true;
}

bool DraftModelDrafter::trim_surplus() {
  bool freed = false;
  for (auto& [id, h] : held_) {
    const int64_t keep = pages_for(int64_t(h.tokens.size()));
    if (pinned_.contains(id) || int64_t(h.pages.size()) <= keep) continue;
    const std::span<const int32_t> tail(h.pages.begin() + keep, h.pages.end());
    HYLA_CHECK(pages_->free(tail).ok(), "request ", id, "'s surplus pages");
    h.pages.resize(size_t(keep));
    freed = true;
  }
  return freed;
}

bool DraftModelDrafter::evict_one(Room room) {
  int64_t victim = 0, oldest = std::numeric_limits<int64_t>::max();
  bool found = false;
  for (const auto& [id, h] : held_) {
    if (pinned_.contains(id) || h.last_use >= oldest) continue;
    if (room == Room::kSlot && h.slot < 0) continue;
    if (room == Room::kPages && h.pages.empty()) continue;
    victim = id;
    oldest = h.last_use;
    found = true;
  }
  if (!found) return false;
  drop(victim);
  ++totals_.evictions;
  return true;
}

void DraftModelDrafter::drop(int64_t id) {
  auto it = held_.find(id);
  if (it == held_.end()) return;
  Held& h = it->second;
  if (h.slot >= 0) HYLA_CHECK(states_->free(h.slot).ok(), "request ", id, "'s slot ", h.slot);
  if (!h.pages.empty()) HYLA_CHECK(pages_->free(h.pages).ok(), "request ", id, "'s pages");
  held_.erase(it);
}

void DraftModelDrafter::reset(Held& h) {
  h.tokens.clear();
  h.next = -1;
}

void DraftModelDrafter::release(int64_t id) { drop(id); }

DraftModelStats DraftModelDrafter::stats() const {
  DraftModelStats s = totals_;
  s.requests = int64_t(held_.size());
  if (states_) {
    s.used_slots = states_->used_slots();
    s.state_slots = states_->capacity();
  }
  if (pages_) {
    s.used_pages = pages_->used_pages();
    s.kv_pages = pages_->capacity();
  }
  return s;
}

Status DraftModelDrafter::check_invariants() const {
  const int64_t V = model_.config().vocab_size;
  if (int64_t(held_.size()) > options_.max_requests)
    return internal_error("DraftModelDrafter: ", held_.size(), " requests held, max_requests ",
                          options_.max_requests);
  std::set<int32_t> slots, pages;
  for (const auto& [id, h] : held_) {
    if (states_) {
      if (h.slot < 0 || !states_->is_allocated(h.slot) || !slots.insert(h.slot).second)
        return internal_error("DraftModelDrafter: request ", id, "'s slot ", h.slot,
                              " is not allocated or is held twice");
    } else if (h.slot >= 0) {
      return internal_error("DraftModelDrafter: request ", id, " holds slot ", h.slot,
                            " but the model has no linear layers");
    }
    for (int32_t p : h.pages)
      if (!pages_ || !pages_->is_allocated(p) || !pages.insert(p).second)
        return internal_error("DraftModelDrafter: request ", id, "'s page ", p,
                              " is not allocated or is held twice");
    if (int64_t(h.pages.size()) < pages_for(int64_t(h.tokens.size())))
      return internal_error("DraftModelDrafter: request ", id, " holds ", h.pages.size(),
                            " pages for ", h.tokens.size(), " tokens");
    if (!h.tokens.empty() && (h.next < 0 || h.next >= V))
      return internal_error("DraftModelDrafter: request ", id, "'s next token is ", h.next);
  }
  if (states_ && int64_t(slots.size()) != states_->used_slots())
    return internal_error("DraftModelDrafter: requests hold ", slots.size(),
                          " slots, the pool has ", states_->used_slots(), " in use");
  if (pages_ && int64_t(pages.size()) != pages_->used_pages())
    return internal_error("DraftModelDrafter: requests hold ", pages.size(),
                          " pages, the pool has ", pages_->used_pages(), " in use");
  return ok_status();
}

}  // namespace hyla::runtime

// Engine, tensor-parallel half (see engine.h, EngineOptions::tensor_parallel): N engines, one per
// rank, each on its slice of the model (model::shard_model) with pools of the slice's shapes, the
// ranks' partial sums added by a RankGroup. Every rank runs the whole scheduler on the same
// requests: admission, chunking, pages, preemption and the prefix cache depend only on the request
// stream, the plan (the same on every rank) and the tokens, and the tokens come from logits the
// all-reduce makes the same bits on every rank. So the ranks need no messages beyond the sums;
// rank 0's engine is the one the caller holds, and it forwards add_request / cancel / step to the
// others. A step runs on every rank's thread at once (RankThreads); a rank whose step fails
// releases the others from their sums (RankGroup::fail), and rank 0 compares the ranks' events,
// so ranks that part end the group instead of computing on.
#include <mutex>
#include <set>
#include <utility>

#include "core/device_memory.h"
#include "model/tensor_parallel.h"
#include "runtime/engine.h"
#include "runtime/memory/host_memory.h"
#include "runtime/tp/local_group.h"

namespace hyla::runtime {

namespace {

/// Where some rank's events of a step differ from rank 0's ("" when they agree): every rank runs
/// the same schedule on the same logits, so requests, tokens, finishes and log-probabilities must
/// be equal (error texts may differ: each names its rank).
std::string parted_events(const std::vector<std::vector<TokenEvent>>& events) {
  const std::vector<TokenEvent>& want = events[0];
  for (size_t r = 1; r < events.size(); ++r) {
    const std::vector<TokenEvent>& got = events[r];
    if (got.size() != want.size())
      return str_cat("rank ", r, " reported ", got.size(), " events, rank 0 ", want.size());
    for (size_t i = 0; i < want.size(); ++i) {
      const TokenEvent &a = want[i], &b = got[i];
      if (a.request == b.request && a.token == b.token && a.finished == b.finished &&
          a.reason == b.reason && a.logprob == b.logprob)
        continue;
      return str_cat("event ", i, ": rank 0 request ", a.request, " token ", a.token, " (",
                     finish_reason_name(a.reason), "), rank ", r, " request ", b.request, " token ",
                     b.token, " (", finish_reason_name(b.reason), b.error.empty() ? "" : ": ",
                     b.error, ")");
    }
  }
  return {};
}

}  // namespace

Result<std::unique_ptr<Engine>> Engine::create_ranks(const model::Model& whole,
                                                     EngineOptions options) {
  const TensorParallelOptions tp = options.tensor_parallel;
  options.tensor_parallel = {};  // each rank's engine is a plain one
  const int N = tp.ranks;
  if (N < 1)
    return invalid_argument("Engine: tensor_parallel.ranks is ", N,
                            ", expected >= 1 (the ranks the model is split over by head)");
  // Up front, naming the count N must divide (every slice below would fail the same way).
  HYLA_RETURN_IF_ERROR(model::shard_config(whole.config(), 0, N).status());
  if (!whole.device().is_cpu())
    return invalid_argument(
        "Engine: tensor parallelism slices the whole model on the host, but its "
        "weights are on ",
        device_name(whole.device()), " (each rank's slice moves to the rank's device)");
  using Drafter = SpeculativeOptions::Drafter;
  if (options.speculative.drafter == Drafter::kMtp)
    return invalid_argument(
        "Engine: the MTP draft head does not run under tensor parallelism (shard_model does not "
        "carry it); use n-gram drafts or none");
  if (options.speculative.drafter == Drafter::kDraftModel)
    return invalid_argument(
        "Engine: a draft model does not run under tensor parallelism (every rank would run it "
        "whole); use n-gram drafts or none");
  const std::vector<Device> devices =
      tp.devices.empty() ? std::vector<Device>(size_t(N), options.device) : tp.devices;
  if (int64_t(devices.size()) != N)
    return invalid_argument("Engine: tensor_parallel.devices names ", devices.size(),
                            " devices for ", N, " ranks");

  const RankGroupFactory make_group = tp.group ? tp.group : local_group_factory();
  HYLA_ASSIGN_OR_RETURN(std::unique_ptr<RankGroup> group, make_group(devices));
  if (group->ranks() != N)
    return invalid_argument("Engine: the tensor-parallel group has ", group->ranks(),
                            " ranks, expected ", N);

  // Ranks on the host share its memory (or memory_limit_bytes): each plans within its part.
  int host_ranks = 0;
  for (const Device& d : devices) host_ranks += d.is_cpu() ? 1 : 0;
  int64_t host_limit = options.memory_limit_bytes;
  std::string host_share;  // for an error: where each rank's limit came from
  if (host_ranks > 1) {
    if (host_limit == 0)
      if (Result<HostMemory> host = host_memory(); host.ok()) host_limit = host->available_bytes;
    if (host_limit > 0)
      host_share = str_cat(
          " (limit: 1/", host_ranks, " of ", format_bytes(host_limit),
          options.memory_limit_bytes > 0 ? ", memory_limit_bytes" : " available on the host", ")");
  }

  std::vector<std::unique_ptr<Engine>> engines;
  for (int r = 0; r < N; ++r) {
    const Device device = devices[size_t(r)];
    const CurrentDevice on(device);  // the slice's weights, pools and stream go to its GPU
    HYLA_ASSIGN_OR_RETURN(std::unique_ptr<model::Model> slice, model::shard_model(whole, r, N));
    if (!device.is_cpu()) {
      HYLA_ASSIGN_OR_RETURN(slice, slice->to(device));
    }
    EngineOptions rank = options;
    rank.device = device;
    if (device.is_cpu() && host_ranks > 1 && host_limit > 0)
      rank.memory_limit_bytes = host_limit / host_ranks;
    if (r > 0) rank.layer_times = nullptr;  // the profile is rank 0's
    Result<std::unique_ptr<Engine>> engine = create(*slice, rank);
    if (!engine.ok())
      return Status(engine.status().code(), str_cat("tensor-parallel rank ", r, " of ", N,
                                                    host_share, ": ", engine.status().message()));
    (*engine)->own_model_ = std::move(slice);
    (*engine)->memory_.all_reduce = &group->rank(r);
    engines.push_back(std::move(engine).value());
  }
  std::unique_ptr<Engine> leader = std::move(engines[0]);
  leader->options_.tensor_parallel = tp;
  leader->ranks_ = std::make_unique<Ranks>();
  leader->ranks_->group = std::move(group);
  for (int r = 1; r < N; ++r) leader->ranks_->others.push_back(std::move(engines[size_t(r)]));
  leader->ranks_->threads = std::make_unique<RankThreads>(N);
  return leader;
}

Engine::Ranks::~Ranks() {
  threads.reset();  // no rank is running
  for (std::unique_ptr<Engine>& engine : others) {
    const CurrentDevice on(engine->options_.device);  // its memory is freed on its GPU
    engine.reset();
  }
  group.reset();
}

Engine& Engine::rank_engine(int r) { return r == 0 ? *this : *ranks_->others[size_t(r - 1)]; }

Result<RequestId> Engine::add_request_on_ranks(std::vector<int32_t> prompt,
                                               const SamplingParams& params) {
  HYLA_RETURN_IF_ERROR(ranks_->failure);
  HYLA_ASSIGN_OR_RETURN(const RequestId id, rank_add_request(prompt, params));
  // The same checks against the same plan: every rank takes it, under the same id.
  for (size_t r = 0; r < ranks_->others.size(); ++r) {
    const CurrentDevice on(ranks_->others[r]->options_.device);
    const Result<RequestId> same = ranks_->others[r]->rank_add_request(prompt, params);
    HYLA_CHECK(same.ok() && same.value() == id, "Engine: tensor-parallel rank ", r + 1,
               " did not queue request ", id, " as rank 0 did: ",
               same.ok() ? str_cat("id ", same.value()) : same.status().message());
  }
  return id;
}

Status Engine::cancel_on_ranks(RequestId id) {
  HYLA_RETURN_IF_ERROR(rank_cancel(id));
  for (size_t r = 0; r < ranks_->others.size(); ++r) {
    const CurrentDevice on(ranks_->others[r]->options_.device);
    const Status same = ranks_->others[r]->rank_cancel(id);
    HYLA_CHECK(same.ok(), "Engine: tensor-parallel rank ", r + 1, " could not cancel request ", id,
               " as rank 0 did: ", same.message());
  }
  return ok_status();
}

std::vector<TokenEvent> Engine::step_ranks() {
  Ranks& ranks = *ranks_;
  if (!ranks.failure.ok()) return std::exchange(pending_events_, {});  // every request has ended
  const int N = ranks.threads->ranks();
  std::vector<std::vector<TokenEvent>> events(static_cast<size_t>(N));
  std::vector<uint8_t> threw(static_cast<size_t>(N), 0);
  std::mutex mutex;
  int first_failed = -1;  // the rank whose failure aborted the group (the others fail from it)
  ranks.threads->run([&](int r) {
    Engine& engine = rank_engine(r);
    const CurrentDevice on(engine.options_.device);  // kept by the rank's thread from step to step
    try {
      events[size_t(r)] = engine.rank_step();
    } catch (const std::exception& e) {
      threw[size_t(r)] = 1;
      engine.step_failure_ = internal_error("its step threw: ", e.what());
    } catch (...) {
      threw[size_t(r)] = 1;
      engine.step_failure_ = internal_error("its step threw");
    }
    if (engine.step_failure_.ok()) return;
    {
      const std::lock_guard<std::mutex> lock(mutex);
      if (first_failed < 0) first_failed = r;
    }
    ranks.group->fail(r);  // the ranks waiting for r in a sum return errors
  });

  std::vector<TokenEvent> out;
  if (first_failed >= 0) {
    const Status& cause = rank_engine(first_failed).step_failure_;
    ranks.failure = Status(
        cause.code(), str_cat("tensor-parallel rank ", first_failed, " of ", N, " failed in step ",
                              totals_.steps, ": ", cause.message(), " (the group is aborted)"));
    // Its events name the cause; the others' name the abort.
    out = std::move(events[size_t(threw[size_t(first_failed)] ? 0 : first_failed)]);
    if (threw[size_t(first_failed)])
      for (TokenEvent& e : out)
        if (e.reason == FinishReason::kError) e.error = ranks.failure.message();
  } else if (const std::string parted = parted_events(events); !parted.empty()) {
    ranks.failure = internal_error("tensor-parallel ranks parted in step ", totals_.steps, ": ",
                                   parted, " (the group is aborted)");
    for (int r = 0; r < N; ++r) ranks.group->fail(r);  // no rank is in a sum now
    out = std::move(events[0]);
  } else {
    return std::move(events[0]);
  }
  // The group is gone: every request still waiting or running ends with why, on every rank
  // (rank 0 may still hold one whose end `out` reports already: a rank failed after its sums).
  for (const std::unique_ptr<Engine>& other : ranks.others) {
    const CurrentDevice on(other->options_.device);
    std::vector<TokenEvent> ignored;
    other->end_all(ranks.failure.message(), ignored);
  }
  std::set<RequestId> ended;
  for (const TokenEvent& e : out)
    if (e.finished) ended.insert(e.request);
  std::vector<TokenEvent> rest;
  end_all(ranks.failure.message(), rest);
  for (TokenEvent& e : rest)
    if (!ended.contains(e.request)) out.push_back(std::move(e));
  return out;
}

void Engine::end_all(const std::string& error, std::vector<TokenEvent>& events) {
  std::vector<RequestId> ids;
  for (const auto& [id, r] : requests_) ids.push_back(id);
  for (const RequestId id : ids)
    release(id, FinishReason::kError, events, str_cat("request ", id, ": ", error));
}

Status Engine::check_other_ranks() const {
  const EngineStats want = stats();
  for (size_t i = 0; i < ranks_->others.size(); ++i) {
    const Engine& other = *ranks_->others[i];
    const Status status = other.check_invariants();
    if (!status.ok())
      return Status(status.code(), str_cat("tensor-parallel rank ", i + 1, ": ", status.message()));
    const EngineStats got = other.stats();
    if (got.waiting != want.waiting || got.running != want.running ||
        got.free_slots != want.free_slots || got.free_pages != want.free_pages ||
        got.steps != want.steps || got.tokens_generated != want.tokens_generated ||
        got.cache.snapshots != want.cache.snapshots)
      return internal_error("tensor-parallel rank ", i + 1, " holds ", got.waiting, " waiting / ",
                            got.running, " running requests, ", got.free_slots, " free slots, ",
                            got.free_pages, " free pages, ", got.cache.snapshots,
                            " snapshots after ", got.steps, " steps and ", got.tokens_generated,
                            " tokens; rank 0 ", want.waiting, " / ", want.running, ", ",
                            want.free_slots, ", ", want.free_pages, ", ", want.cache.snapshots,
                            " after ", want.steps, " and ", want.tokens_generated);
  }
  return ok_status();
}

}  // namespace hyla::runtime

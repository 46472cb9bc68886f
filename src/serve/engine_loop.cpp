// EngineLoop (see engine_loop.h).
#include "serve/engine_loop.h"

#include <utility>

namespace hyla::serve {

EngineLoop::EngineLoop(runtime::Engine& engine, int64_t max_waiting)
    : engine_(engine), max_waiting_(max_waiting) {
  stats_ = engine_.stats();
  thread_ = std::thread([this] { run(); });
}

EngineLoop::~EngineLoop() { stop(); }

void EngineLoop::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  if (thread_.joinable()) thread_.join();
}

Result<EngineLoop::Ticket> EngineLoop::submit(std::vector<int32_t> prompt,
                                              runtime::SamplingParams params, EventSink sink) {
  Ticket ticket = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (stopping_) return Status(ErrorCode::kInternal, "the engine loop is stopping");
    const int64_t waiting = int64_t(inbox_.size()) + stats_.waiting;
    if (waiting >= max_waiting_)
      return Status(ErrorCode::kOutOfRange,
                    str_cat(waiting, " requests are waiting, the most the server queues (",
                            "--max-waiting ", max_waiting_, ")"));
    ticket = next_ticket_++;
    inbox_.push_back({ticket, std::move(prompt), std::move(params), std::move(sink)});
  }
  wake_.notify_one();
  return ticket;
}

void EngineLoop::cancel(Ticket ticket) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    cancels_.push_back(ticket);
  }
  wake_.notify_one();
}

runtime::EngineStats EngineLoop::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

int64_t EngineLoop::waiting() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return int64_t(inbox_.size()) + stats_.waiting;
}

void EngineLoop::apply(std::deque<Submission>& submissions, std::vector<Ticket>& cancels) {
  for (Submission& s : submissions) {
    Result<runtime::RequestId> id = engine_.add_request(std::move(s.prompt), s.params);
    if (!id.ok()) {
      LoopEvent refused;
      refused.refused = true;
      refused.event.finished = true;
      refused.event.reason = runtime::FinishReason::kError;
      refused.event.error = id.status().message();
      s.sink(refused);
      continue;
    }
    ids_[s.ticket] = *id;
    sinks_[*id] = {s.ticket, std::move(s.sink)};
  }
  for (Ticket ticket : cancels) {
    auto it = ids_.find(ticket);
    if (it == ids_.end()) continue;  // finished already (or never admitted)
    const runtime::RequestId id = it->second;
    // The cancelled event comes from the next step; the sink is dropped now: it asked.
    (void)engine_.cancel(id);
    ids_.erase(it);
    sinks_.erase(id);
  }
}

void EngineLoop::run() {
  for (;;) {
    std::deque<Submission> submissions;
    std::vector<Ticket> cancels;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      stats_ = engine_.stats();
      wake_.wait(lock, [&] {
        return stopping_ || !inbox_.empty() || !cancels_.empty() || !engine_.idle();
      });
      if (stopping_) break;
      submissions.swap(inbox_);
      cancels.swap(cancels_);
    }
    apply(submissions, cancels);
    {
      // The engine's waiting queue now holds what the inbox held: count it before the step.
      std::lock_guard<std::mutex> lock(mutex_);
      stats_ = engine_.stats();
    }
    const std::vector<runtime::TokenEvent> events = engine_.step();
    {
      // Before the events go out: a handler that answers its client and then reads stats() sees
      // its request's slot and pages free.
      std::lock_guard<std::mutex> lock(mutex_);
      stats_ = engine_.stats();
    }
    for (const runtime::TokenEvent& e : events) {
      auto it = sinks_.find(e.request);
      if (it == sinks_.end()) continue;  // cancelled by its handler
      LoopEvent event;
      event.event = e;
      it->second.second(event);
      if (e.finished) {
        ids_.erase(it->second.first);
        sinks_.erase(it);
      }
    }
  }
  // Stopping: every request still known ends as cancelled (its slot and pages freed).
  std::deque<Submission> submissions;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    submissions.swap(inbox_);
  }
  for (Submission& s : submissions) {
    LoopEvent cancelled;
    cancelled.event.finished = true;
    cancelled.event.reason = runtime::FinishReason::kCancelled;
    s.sink(cancelled);
  }
  for (auto& [id, entry] : sinks_) {
    (void)engine_.cancel(id);
    LoopEvent cancelled;
    cancelled.event.request = id;
    cancelled.event.finished = true;
    cancelled.event.reason = runtime::FinishReason::kCancelled;
    entry.second(cancelled);
  }
  sinks_.clear();
  ids_.clear();
  (void)engine_.step();  // reports the cancels; nothing is running after it
  std::lock_guard<std::mutex> lock(mutex_);
  stats_ = engine_.stats();
}

}  // namespace hyla::serve

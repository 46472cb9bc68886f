// EngineLoop: runs a runtime::Engine (not thread-safe) on its own thread for many HTTP handlers.
//   handler --submit(prompt, params, sink)--> inbox (mutex) --between steps--> Engine::add_request
//   handler --cancel(ticket)----------------> inbox (mutex) --between steps--> Engine::cancel
//   Engine::step() -> TokenEvents -> each request's sink, called on the loop thread
// A sink must return quickly (it hands the event to its connection, e.g. posts to its strand).
// After a request's finished event its sink is dropped and never called again.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/error.h"
#include "runtime/engine.h"

namespace hyla::serve {

/// One event for a request: a TokenEvent from a step, or `refused`: Engine::add_request did not
/// take it (then event.finished, event.reason == kError and event.error says why).
struct LoopEvent {
  runtime::TokenEvent event;
  bool refused = false;
};
using EventSink = std::function<void(const LoopEvent&)>;

class EngineLoop {
 public:
  /// A request's handle, unique over the loop's life (the engine's id is only known on its thread).
  using Ticket = uint64_t;

  /// `max_waiting`: submitted requests not yet admitted (in the inbox or the engine's waiting
  /// queue) beyond which submit refuses. The engine must outlive the loop.
  EngineLoop(runtime::Engine& engine, int64_t max_waiting);
  ~EngineLoop();  ///< stop()s
  EngineLoop(const EngineLoop&) = delete;
  EngineLoop& operator=(const EngineLoop&) = delete;

  /// Queues a request. Error kOutOfRange when max_waiting requests are already waiting (the
  /// server answers 429), kInternal after stop().
  Result<Ticket> submit(std::vector<int32_t> prompt, runtime::SamplingParams params,
                        EventSink sink);
  /// Ends a request (waiting or running; unknown or finished tickets are ignored): its slot and
  /// pages are freed before the next step, and its sink gets no more events.
  void cancel(Ticket ticket);
  /// The engine's stats after the last step (or when the loop last went idle).
  runtime::EngineStats stats() const;
  /// Requests submitted and not yet admitted by the engine.
  int64_t waiting() const;
  /// Ends the thread; requests still in flight get a cancelled event. Idempotent.
  void stop();

 private:
  struct Submission {
    Ticket ticket;
    std::vector<int32_t> prompt;
    runtime::SamplingParams params;
    EventSink sink;
  };
  void run();
  /// Applies the inbox to the engine (loop thread).
  void apply(std::deque<Submission>& submissions, std::vector<Ticket>& cancels);

  runtime::Engine& engine_;
  const int64_t max_waiting_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::deque<Submission> inbox_;
  std::vector<Ticket> cancels_;
  runtime::EngineStats stats_;
  Ticket next_ticket_ = 1;
  bool stopping_ = false;
  // Loop thread only:
  std::map<Ticket, runtime::RequestId> ids_;
  std::map<runtime::RequestId, std::pair<Ticket, EventSink>> sinks_;
  std::thread thread_;
};

}  // namespace hyla::serve

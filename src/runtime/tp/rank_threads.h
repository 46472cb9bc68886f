// One thread per tensor-parallel rank, kept for the engine's life (runtime/engine_ranks.cpp):
// run(body) calls body(r) for every rank r at once, rank 0 on the calling thread and rank r > 0 on
// its own thread, and returns when every call has returned. A rank keeps its thread from step to
// step, so whatever a communicator binds to a thread (a CUDA device) stays bound.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace hyla::runtime {

class RankThreads {
 public:
  /// Starts ranks - 1 threads (none for one rank).
  explicit RankThreads(int ranks);
  /// Joins the threads (after the run in progress, if any).
  ~RankThreads();
  RankThreads(const RankThreads&) = delete;
  RankThreads& operator=(const RankThreads&) = delete;

  int ranks() const { return int(threads_.size()) + 1; }
  /// body(r) for r in [0, ranks) at once; returns when all have returned. body must not throw
  /// (a rank's failure is its own to report: it may have to release the others first). Not
  /// reentrant: one run at a time.
  void run(const std::function<void(int rank)>& body);

 private:
  void serve(int rank);

  std::mutex mutex_;
  std::condition_variable start_;  // a run began, or the threads stop
  std::condition_variable done_;   // the last thread of a run finished
  const std::function<void(int)>* body_ = nullptr;
  uint64_t round_ = 0;  // runs so far: a thread runs body once per round
  int busy_ = 0;        // threads of this round still running body
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace hyla::runtime

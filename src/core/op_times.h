// Time per kernel op (`hyla bench --profile`). Every op entry point (src/kernels/<op>.cpp) opens
// an OpScope after its argument checks; while an OpTimes is active on the calling thread
// (OpTimes::Activate), the scope records the op's time on its device: a pair of CUDA events
// around the call on the op's stream (read back in collect(), so no wait per op), or the host
// clock for a CPU call. Nested ops count once, in the outermost. With no OpTimes active a scope
// costs one thread-local read.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace hyla {

class OpTimes {
 public:
  struct Entry {
    double seconds = 0.0;
    int64_t calls = 0;
  };

  OpTimes() = default;
  OpTimes(const OpTimes&) = delete;
  OpTimes& operator=(const OpTimes&) = delete;
  ~OpTimes();

  /// Makes `times` the calling thread's active OpTimes for the scope's lifetime (nullptr: none).
  class Activate {
   public:
    explicit Activate(OpTimes* times);
    ~Activate();
    Activate(const Activate&) = delete;
    Activate& operator=(const Activate&) = delete;

   private:
    OpTimes* previous_;
  };

  /// Waits for the recorded device events and adds every pending call to its op.
  void collect();
  /// Per op name, the collected time and calls.
  const std::map<std::string, Entry>& entries() const { return entries_; }
  void add(const OpTimes& other);
  void clear() { entries_.clear(); }

 private:
  friend class OpScope;
  struct Pending {
    const char* op;
    int event;  // index of the start event in events_; stop = event + 1
  };
  std::map<std::string, Entry> entries_;
  std::vector<void*> events_;  // cudaEvent_t pairs, reused across collects
  std::vector<Pending> pending_;
  int used_events_ = 0;
};

/// Whether an OpTimes is active on the calling thread (the engine replays no CUDA graph then, so
/// every op is timed).
bool op_times_active();

class OpScope {
 public:
  OpScope(const char* op, Device device, Stream stream);
  ~OpScope();
  OpScope(const OpScope&) = delete;
  OpScope& operator=(const OpScope&) = delete;

 private:
  OpTimes* times_ = nullptr;  // null: not recording (none active, or nested)
  const char* op_ = nullptr;
  Stream stream_{};
  int event_ = -1;  // CUDA: the start event's index; -1: host clock
  std::chrono::steady_clock::time_point start_{};
};

}  // namespace hyla

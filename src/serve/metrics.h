// The server's Prometheus metrics (text exposition format 0.0.4), safe to update from any thread:
// requests by status code, prompt and generated tokens, time-to-first-token and time-per-output-
// token histograms, the engine's gauges (waiting, running, free state slots and KV pages) and its
// preemptions.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/engine.h"

namespace hyla::serve {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  /// The _bucket, _sum and _count lines of metric `name`.
  std::string render(const std::string& name) const;

 private:
  std::vector<double> bounds_;
  std::vector<int64_t> counts_;  // per bucket, not cumulative; the last is +Inf
  double sum_ = 0;
  int64_t count_ = 0;
};

class Metrics {
 public:
  Metrics();
  void count_response(int status);
  void add_tokens(int64_t prompt_tokens, int64_t generated_tokens);
  void observe_ttft(double seconds);
  void observe_tpot(double seconds);
  /// Everything, the engine's gauges from `stats` and `waiting` (the loop's inbox included).
  std::string render(const runtime::EngineStats& stats, int64_t waiting,
                     const runtime::MemoryPlan& plan) const;

 private:
  mutable std::mutex mutex_;
  std::map<int, int64_t> responses_;
  int64_t prompt_tokens_ = 0, generated_tokens_ = 0;
  Histogram ttft_, tpot_;
};

}  // namespace hyla::serve

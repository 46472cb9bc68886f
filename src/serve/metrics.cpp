// Metrics (see metrics.h).
#include "serve/metrics.h"

#include <cstdio>

#include "core/error.h"

namespace hyla::serve {

namespace {

std::string number(double x) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.9g", x);
  return text;
}

void gauge(std::string& out, const char* name, const char* help, int64_t value) {
  out += str_cat("# HELP ", name, " ", help, "\n# TYPE ", name, " gauge\n", name, " ", value, "\n");
}

void counter(std::string& out, const char* name, const char* help, int64_t value) {
  out +=
      str_cat("# HELP ", name, " ", help, "\n# TYPE ", name, " counter\n", name, " ", value, "\n");
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  size_t b = 0;
  while (b < bounds_.size() && value > bounds_[b]) ++b;
  ++counts_[b];
  sum_ += value;
  ++count_;
}

std::string Histogram::render(const std::string& name) const {
  std::string out;
  int64_t cumulative = 0;
  for (size_t b = 0; b < bounds_.size(); ++b) {
    cumulative += counts_[b];
    out += str_cat(name, "_bucket{le=\"", number(bounds_[b]), "\"} ", cumulative, "\n");
  }
  out += str_cat(name, "_bucket{le=\"+Inf\"} ", count_, "\n");
  out += str_cat(name, "_sum ", number(sum_), "\n", name, "_count ", count_, "\n");
  return out;
}

Metrics::Metrics()
    : ttft_({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}),
      tpot_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}) {}

void Metrics::count_response(int status) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++responses_[status];
}

void Metrics::add_tokens(int64_t prompt_tokens, int64_t generated_tokens) {
  std::lock_guard<std::mutex> lock(mutex_);
  prompt_tokens_ += prompt_tokens;
  generated_tokens_ += generated_tokens;
}

void Metrics::observe_ttft(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  ttft_.observe(seconds);
}

void Metrics::observe_tpot(double seconds) {
  std::lock_guard<std::mutex> lock(mutex_);
  tpot_.observe(seconds);
}

std::string Metrics::render(const runtime::EngineStats& stats, int64_t waiting,
                            const runtime::MemoryPlan& plan) const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::string out;
  out +=
      "# HELP hyla_requests_total HTTP responses by status code.\n"
      "# TYPE hyla_requests_total counter\n";
  for (const auto& [code, count] : responses_)
    out += str_cat("hyla_requests_total{code=\"", code, "\"} ", count, "\n");
  out += str_cat(
      "# HELP hyla_prompt_tokens_total Prompt tokens of the generation requests served.\n"
      "# TYPE hyla_prompt_tokens_total counter\nhyla_prompt_tokens_total ",
      prompt_tokens_, "\n");
  out += str_cat(
      "# HELP hyla_generation_tokens_total Tokens generated for the requests served.\n"
      "# TYPE hyla_generation_tokens_total counter\nhyla_generation_tokens_total ",
      generated_tokens_, "\n");
  out +=
      "# HELP hyla_time_to_first_token_seconds From a request's arrival to its first token.\n"
      "# TYPE hyla_time_to_first_token_seconds histogram\n";
  out += ttft_.render("hyla_time_to_first_token_seconds");
  out +=
      "# HELP hyla_time_per_output_token_seconds Between consecutive tokens of a request.\n"
      "# TYPE hyla_time_per_output_token_seconds histogram\n";
  out += tpot_.render("hyla_time_per_output_token_seconds");
  gauge(out, "hyla_requests_waiting", "Requests queued, not yet admitted.", waiting);
  gauge(out, "hyla_requests_running", "Requests holding a state slot and KV pages.", stats.running);
  gauge(out, "hyla_state_slots_free", "Free state slots.", stats.free_slots);
  gauge(out, "hyla_state_slots_total", "State slots of the memory plan.", plan.state_slots);
  gauge(out, "hyla_kv_pages_free", "Free KV pages.", stats.free_pages);
  counter(out, "hyla_prefix_cache_lookups_total", "Admissions that looked a prefix up.",
          stats.cache.lookups);
  counter(out, "hyla_prefix_cache_hits_total", "Admissions that resumed from a cached snapshot.",
          stats.cache.hits);
  counter(out, "hyla_prefix_cache_cached_tokens_total",
          "Prompt tokens taken from the prefix cache instead of computed.",
          stats.cache.cached_tokens);
  counter(out, "hyla_prefix_cache_evictions_total", "Cached snapshots evicted.",
          stats.cache.evictions);
  gauge(out, "hyla_prefix_cache_snapshots", "State snapshots the prefix cache holds.",
        stats.cache.snapshots);
  gauge(out, "hyla_prefix_cache_snapshot_bytes", "Bytes of those snapshots.",
        stats.cache.snapshot_bytes);
  gauge(out, "hyla_prefix_cache_kv_pages", "KV pages only the prefix cache holds.",
        stats.cache.pages);
  gauge(out, "hyla_prefix_cache_host_snapshots", "Snapshots in the prefix cache's host tier.",
        stats.cache.host_snapshots);
  gauge(out, "hyla_prefix_cache_host_bytes", "Bytes of those.", stats.cache.host_bytes);
  counter(out, "hyla_prefix_cache_host_hits_total", "Hits resumed from the host tier.",
          stats.cache.host_hits);
  gauge(out, "hyla_prefix_cache_device_tier_snapshots",
        "int8 snapshots in the prefix cache's device tier.", stats.cache.device_tier_snapshots);
  gauge(out, "hyla_prefix_cache_device_tier_bytes", "Bytes of those.",
        stats.cache.device_tier_bytes);
  counter(out, "hyla_prefix_cache_device_tier_hits_total", "Hits resumed from the device tier.",
          stats.cache.device_tier_hits);
  counter(out, "hyla_spec_verify_steps_total", "Speculative verify steps.", stats.spec.steps);
  counter(out, "hyla_spec_draft_tokens_total", "Draft tokens verified.", stats.spec.draft_tokens);
  counter(out, "hyla_spec_accepted_tokens_total", "Draft tokens accepted.",
          stats.spec.accepted_tokens);
  gauge(out, "hyla_kv_pages_total", "KV pages of the memory plan.", plan.kv_pages);
  out += str_cat(
      "# HELP hyla_preemptions_total Running requests sent back to waiting to free KV pages "
      "(resumed later by recomputing them).\n"
      "# TYPE hyla_preemptions_total counter\nhyla_preemptions_total ",
      stats.preemptions, "\n");
  return out;
}

}  // namespace hyla::serve

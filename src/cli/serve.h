// `hyla serve`: the OpenAI-compatible HTTP server (serve/http_server.h) on one model.
//   hyla serve [--model DIR] [--host 127.0.0.1] [--port 8080] [--device auto|cpu|cuda]
//              [--served-model-name NAME] [--prefix-cache on|off] [--max-waiting N]
//              [--budget-mib N [--state-ratio R]] [--read-timeout S] [--threads N]
//              [--tensor-parallel N]
// DIR defaults to the embedded demo model. Runs until SIGINT / SIGTERM.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace hyla::cli {

struct ServeOptions {
  std::string model_dir;           ///< empty: default_model_dir()
  std::string host = "127.0.0.1";  ///< an IP address or a host name
  int64_t port = 8080;
  std::string served_model_name;  ///< empty: the model folder's name
  std::string device = "auto";
  int64_t max_waiting = 256;
  int64_t max_running = 64;
  int64_t default_max_tokens = 256;
  std::optional<int64_t> budget_mib;    ///< unset: sized for max_running requests of the context
  bool prefix_cache = true;             ///< --prefix-cache on|off
  int64_t prefix_cache_host_mib = 0;    ///< --prefix-cache-host-mib: the cache's host tier
  int64_t prefix_cache_device_mib = 0;  ///< --prefix-cache-device-mib: its int8 device tier
  bool prefix_cache_int8 = false;       ///< --prefix-cache-int8 on|off
  std::string speculative = "off";      ///< --speculative off|ngram|mtp|draft:DIR
  int64_t draft_tokens = 4;             ///< --draft-tokens K
  bool spec_replay = true;              ///< --spec-mode replay|states
  int http_threads = 2;
  double read_timeout_s = 10;  ///< a request's header + body must arrive within this
  /// State-pool : KV-pool bytes of --budget-mib (plan_memory's state_ratio); unset: the engine's.
  std::optional<double> state_ratio;
  /// --tensor-parallel N: the model split by head over N ranks (runtime::TensorParallelOptions),
  /// the budget each rank's; 1: off.
  int tensor_parallel = 1;
};

/// Loads the model, tokenizer and chat template, starts the engine loop and the server, and
/// serves until SIGINT / SIGTERM. Returns the exit code (1 with the reason when something does
/// not load, the port cannot be bound, or the build has no server).
int run_serve(const ServeOptions& options);

}  // namespace hyla::cli

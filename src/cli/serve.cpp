// `hyla serve` (see serve.h): tokenizer + chat template + model (on --device) + engine ->
// EngineLoop -> HttpServer; the main thread waits for SIGINT / SIGTERM, then stops both.
#include "cli/serve.h"

#include <cstdio>

#include "cli/device.h"
#include "cli/generate.h"
#include "cli/speculative.h"
#include "core/error.h"
#ifdef HYLA_WITH_SERVER
#include <sys/resource.h>

#include <csignal>
#include <filesystem>

#include "cli/chat_model.h"
#include "model/architecture.h"
#include "runtime/engine.h"
#include "runtime/engine_sizing.h"
#include "serve/chat_template.h"
#include "serve/engine_loop.h"
#include "serve/http_server.h"
#include "serve/tokenizer.h"
#endif

namespace hyla::cli {

namespace {

int fail(const std::string& message) {
  std::fprintf(stderr, "hyla serve: %s\n", message.c_str());
  return 1;
}

#ifdef HYLA_WITH_SERVER
namespace fs = std::filesystem;

/// Raises the open-file limit to its hard limit: every open connection is a descriptor, and the
/// usual soft limit (1024) is below what a server holding a thousand streams needs. Returns the
/// limit now in force.
int64_t raise_open_files() {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return -1;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  return limit.rlim_cur == RLIM_INFINITY ? INT64_MAX : int64_t(limit.rlim_cur);
}

int serve(const ServeOptions& options) {
  // SIGINT / SIGTERM are taken by sigwait at the end: blocked before any thread starts (the
  // thread pool's, OpenBLAS's), since a thread that does not block them would take them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  // Descriptors: a connection each for the running and waiting requests, plus the model's files,
  // the listener and some for /health and /metrics.
  const int64_t open_files = raise_open_files();
  const int64_t wanted_files = options.max_running + options.max_waiting + 64;
  if (open_files >= 0 && open_files < wanted_files)
    std::fprintf(stderr,
                 "hyla serve: warning: the open-file limit is %lld (the hard limit), below the "
                 "%lld that --max-running + --max-waiting connections need; more clients get "
                 "their connection refused (raise it with ulimit -Hn as root)\n",
                 static_cast<long long>(open_files), static_cast<long long>(wanted_files));
  if (options.port < 0 || options.port > 65535)
    return fail(str_cat("--port is ", options.port, ", expected an integer in [0, 65535]"));
  if (const Status s = check_tensor_parallel(options.tensor_parallel); !s.ok())
    return fail(s.message());
  const std::string dir = options.model_dir.empty() ? default_model_dir() : options.model_dir;
  if (!fs::exists(fs::path(dir) / "config.json"))
    return fail(str_cat("model folder ", dir, " has no config.json"));
  const Result<Device> device = resolve_device(options.device);
  if (!device.ok()) return fail(device.status().message());

  Result<serve::Tokenizer> tokenizer = serve::Tokenizer::load(dir + "/tokenizer.json");
  if (!tokenizer.ok()) return fail(tokenizer.status().message());
  Result<serve::ChatTemplate> chat = load_model_chat_template(dir, options.model_dir);
  if (!chat.ok()) return fail(chat.status().message());
  Result<std::unique_ptr<model::Model>> model = model::load_model(dir);
  if (!model.ok()) return fail(model.status().message());
  model =
      model_on(std::move(model).value(), weights_device(device.value(), options.tensor_parallel));
  if (!model.ok()) return fail(model.status().message());
  const model::ModelConfig& config = model.value()->config();
  if (tokenizer->vocab_size() > config.vocab_size)
    return fail(str_cat("the tokenizer has ", tokenizer->vocab_size(),
                        " tokens, more than the model's vocabulary of ", config.vocab_size));

  runtime::EngineOptions engine_options;
  engine_options.device = device.value();
  {
    Result<runtime::TensorParallelOptions> tp =
        tensor_parallel_options(options.tensor_parallel, device.value());
    if (!tp.ok()) return fail(tp.status().message());
    engine_options.tensor_parallel = std::move(tp).value();
  }
  engine_options.max_running = options.max_running;
  engine_options.prefix_cache.enabled = options.prefix_cache;
  engine_options.prefix_cache.host_bytes = options.prefix_cache_host_mib << 20;
  engine_options.prefix_cache.device_tier_bytes = options.prefix_cache_device_mib << 20;
  engine_options.prefix_cache.int8_snapshots = options.prefix_cache_int8;
  engine_options.speculative.draft_tokens = options.draft_tokens;
  engine_options.speculative.mode =
      options.spec_replay ? model::VerifyMode::kReplay : model::VerifyMode::kStepStates;
  const int64_t context = config.max_context > 0 ? config.max_context : 4096;
  if (options.state_ratio && !options.budget_mib)
    return fail("--state-ratio splits --budget-mib: give both");
  if (options.prefix_cache_device_mib > 0 && !options.prefix_cache_int8)
    return fail("--prefix-cache-device-mib holds int8 snapshots only: add --prefix-cache-int8 on");
  if (options.budget_mib) {
    engine_options.memory_budget_bytes = *options.budget_mib << 20;
    if (options.state_ratio) engine_options.state_ratio = *options.state_ratio;
  } else {
    // Pages are taken by need (admission the prompt's, each decode step its token's; a full pool
    // preempts the newest request). Size the pools so that max_running requests of
    // default_max_tokens plus a prompt as long run together without preemption, and so that one
    // request can reach the whole context; with the prefix cache, each with room for the
    // snapshots the cache keeps of it (runtime::size_engine).
    std::vector<int64_t> tokens(size_t(options.max_running), 2 * options.default_max_tokens);
    tokens[0] = context;
    Result<runtime::EngineSizing> sizing = runtime::size_engine(config, engine_options, tokens);
    if (!sizing.ok()) return fail(sizing.status().message());
    engine_options.memory_budget_bytes = sizing->budget_bytes;
    engine_options.state_ratio = sizing->state_ratio;
    engine_options.max_running = sizing->max_running;
    // At most 3/4 of what the device has (each rank on the host its part), as hyla generate:
    // fewer snapshots stay cached, or fewer requests run at once, rather than no server.
    Result<AvailableMemory> available = available_memory(device.value());
    const int sharing = device.value().is_cpu() ? options.tensor_parallel : 1;
    if (available.ok() && sizing->budget_bytes > available->bytes / 4 * 3 / sharing) {
      engine_options.memory_budget_bytes = available->bytes / 4 * 3 / sharing;
      std::fprintf(stderr,
                   "hyla serve: note: %lld requests at once with the prefix cache's snapshots need "
                   "%s, more than 3/4 of the %s: the budget is %s (--budget-mib sets it)\n",
                   static_cast<long long>(sizing->max_running),
                   runtime::format_bytes(sizing->budget_bytes).c_str(),
                   available->description.c_str(),
                   runtime::format_bytes(engine_options.memory_budget_bytes).c_str());
    }
  }
  // --speculative draft:DIR: its pools hold max_running requests of default_max_tokens and a
  // prompt as long, one of them the whole context.
  std::unique_ptr<model::Model> draft;
  {
    Result<SpeculativeFlag> flag = parse_speculative_flag(options.speculative);
    if (!flag.ok()) return fail(flag.status().message());
    std::vector<int64_t> tokens(size_t(options.max_running), 2 * options.default_max_tokens);
    tokens[0] = context;
    const Status applied = apply_speculative_flag(*flag, tokens, &engine_options, &draft);
    if (!applied.ok()) return fail(applied.message());
  }
  Result<std::unique_ptr<runtime::Engine>> engine =
      runtime::Engine::create(*model.value(), engine_options);
  if (!engine.ok()) return fail(engine.status().message());
  std::fprintf(stderr, "memory plan (%s): %s\n",
               plan_where(device.value(), options.tensor_parallel).c_str(),
               engine.value()->plan().summary().c_str());

  serve::EngineLoop loop(*engine.value(), options.max_waiting);
  serve::ServerModel server_model;
  server_model.loop = &loop;
  server_model.plan = &engine.value()->plan();
  server_model.tokenizer = &tokenizer.value();
  server_model.chat = &chat.value();
  server_model.stop_token_ids = chat_stop_tokens(*tokenizer, dir, config.vocab_size);
  server_model.vocab_size = config.vocab_size;
  serve::ServerOptions server_options;
  server_options.host = options.host;
  server_options.port = uint16_t(options.port);
  server_options.threads = options.http_threads;
  server_options.model_name = options.served_model_name;
  if (server_options.model_name.empty())
    server_options.model_name = fs::path(dir).lexically_normal().filename().string();
  if (server_options.model_name.empty()) server_options.model_name = "hyla";
  server_options.default_max_tokens = options.default_max_tokens;
  server_options.max_context = context;
  server_options.read_timeout =
      std::chrono::milliseconds(int64_t(options.read_timeout_s * 1000.0 + 0.5));
  Result<std::unique_ptr<serve::HttpServer>> server =
      serve::HttpServer::start(server_model, server_options);
  if (!server.ok()) return fail(server.status().message());
  const std::string address = server.value()->address();
  const std::string shown = address.find(':') == std::string::npos ? address : "[" + address + "]";
  std::fprintf(stderr, "hyla serve: %s on http://%s:%u (model '%s')\n", dir.c_str(), shown.c_str(),
               unsigned(server.value()->port()), server_options.model_name.c_str());
  int signal = 0;
  sigwait(&signals, &signal);
  std::fprintf(stderr, "hyla serve: signal %d, stopping\n", signal);
  server.value()->stop();
  loop.stop();
  return 0;
}
#endif

}  // namespace

int run_serve(const ServeOptions& options) {
#ifdef HYLA_WITH_SERVER
  try {
    return serve(options);
  } catch (const std::exception& e) {
    return fail(e.what());
  }
#else
  (void)options;
  return fail(
      "this hyla was built without the HTTP server (it needs the Boost headers, libboost-dev, and "
      "the tokenizer, libpcre2-dev + libicu-dev: install them, e.g. with tools/install_deps.sh, "
      "and rebuild)");
#endif
}

}  // namespace hyla::cli

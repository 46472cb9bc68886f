// HttpServer: the OpenAI-compatible HTTP API over an EngineLoop, on Boost.Beast + Asio.
//   acceptor --socket on its own strand--> Session: read one request (header + body limits, a
//   deadline for the whole read) -> route:
//     POST /v1/chat/completions, /v1/completions -> parse (openai_api) -> EngineLoop::submit
//       -> events posted back to the session's strand -> StreamingDecoder -> StopStrings
//       -> SSE chunks (stream) or one JSON body
//     GET /v1/models, /health, /metrics
// One io_context run by a few threads: an open stream costs a socket and a Session, no thread.
// A client that goes away (read end closed, or a write fails) cancels its request at once.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/error.h"
#include "serve/chat_template.h"
#include "serve/engine_loop.h"
#include "serve/metrics.h"
#include "serve/tokenizer.h"

namespace hyla::serve {

struct ServerOptions {
  std::string host = "127.0.0.1";            ///< an IP address or a host name
  uint16_t port = 8080;                      ///< 0: an ephemeral port (HttpServer::port says which)
  int threads = 2;                           ///< io_context threads
  int64_t body_limit = int64_t{4} << 20;     ///< bytes; more -> 413
  int64_t header_limit = int64_t{16} << 10;  ///< bytes; more -> 431
  /// A request's header and body must arrive within this (slowloris); else the connection closes.
  std::chrono::milliseconds read_timeout{10000};
  /// An idle keep-alive connection closes after this.
  std::chrono::milliseconds idle_timeout{30000};
  std::string model_name = "hyla";
  int64_t default_max_tokens = 256;  ///< a request without max_tokens
  int64_t max_context = 0;           ///< prompt + max_tokens at most; 0: no limit
};

/// What the server serves with; everything must outlive the server.
struct ServerModel {
  EngineLoop* loop = nullptr;
  const runtime::MemoryPlan* plan = nullptr;
  const Tokenizer* tokenizer = nullptr;
  const ChatTemplate* chat = nullptr;
  std::vector<int32_t> stop_token_ids;
  int64_t vocab_size = 0;
};

class HttpServer {
 public:
  /// Binds host:port and starts the threads. The host is an IP address (IPv6 also as "[::1]")
  /// or a name resolved by the system (the first of its addresses that binds). Errors: a host
  /// that is neither, or that cannot be bound (the message names it and says why).
  static Result<std::unique_ptr<HttpServer>> start(const ServerModel& model,
                                                   const ServerOptions& options);
  ~HttpServer();  ///< stop()s
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  uint16_t port() const;
  /// The IP address it listens on ("127.0.0.1", "::1").
  std::string address() const;
  /// Closes the listener and every connection, and joins the threads. Idempotent.
  void stop();
  Metrics& metrics();

  struct Impl;

 private:
  explicit HttpServer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace hyla::serve

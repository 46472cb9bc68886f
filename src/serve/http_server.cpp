// HttpServer on Boost.Beast (see http_server.h). Each connection is a Session on its own strand;
// the engine loop's thread hands events to it through net::post, guarded by a Gate that the server
// closes before it stops, so no event is posted to a stopped io_context.
#include "serve/http_server.h"

#include <sys/socket.h>

#include <atomic>
#include <cerrno>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "serve/beast.h"
#include "serve/openai_api.h"
#include "serve/stop_strings.h"

namespace hyla::serve {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using Clock = std::chrono::steady_clock;

namespace {

constexpr auto kWriteTimeout = std::chrono::seconds(60);

/// Whether the engine loop's thread may still post events to sessions.
struct Gate {
  std::mutex mutex;
  bool open = true;
};

int64_t unix_time() {
  return std::chrono::duration_cast<std::chrono::seconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

namespace http_detail {
class Session;
}
using http_detail::Session;

struct HttpServer::Impl {
  Impl(const ServerModel& model_, const ServerOptions& options_)
      : model(model_), options(options_), acceptor(ioc) {
    api.tokenizer = model.tokenizer;
    api.chat = model.chat;
    api.stop_token_ids = model.stop_token_ids;
    api.vocab_size = model.vocab_size;
    api.max_context = options.max_context;
    api.default_max_tokens = options.default_max_tokens;
    api.model_name = options.model_name;
  }
  void accept();
  void register_session(const std::shared_ptr<Session>& session);
  void stop();
  std::string next_id(const char* prefix) {
    return str_cat(prefix, std::hex, created_at, "-", std::dec, next_request.fetch_add(1));
  }

  ServerModel model;
  ServerOptions options;
  ApiContext api;
  Metrics metrics;
  std::shared_ptr<Gate> gate = std::make_shared<Gate>();
  net::io_context ioc;
  tcp::acceptor acceptor;
  std::vector<std::thread> threads;
  std::mutex sessions_mutex;
  std::vector<std::weak_ptr<Session>> sessions;
  std::mutex stop_mutex;
  bool stopped = false;
  const int64_t created_at = unix_time();
  uint16_t port = 0;

  ~Impl() {
    for (std::thread& t : threads)
      if (t.joinable()) t.join();
  }
  std::atomic<uint64_t> next_request{1};
};

namespace http_detail {

class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket socket, HttpServer::Impl& server)
      : stream_(std::move(socket)), server_(server) {}

  ~Session() {
    if (generating_) server_.model.loop->cancel(ticket_);
  }

  void start() { do_read(); }

  /// Server stop, after the io threads have joined: drop the self-reference and the request.
  void abandon() {
    if (generating_) {
      server_.model.loop->cancel(ticket_);
      generating_ = false;
    }
    beast::error_code ec;
    stream_.socket().close(ec);
    self_.reset();
  }

 private:
  void do_read() {
    parser_.emplace();
    parser_->body_limit(uint64_t(server_.options.body_limit));
    parser_->header_limit(uint32_t(server_.options.header_limit));
    // The whole request (header and body) must arrive within read_timeout (slowloris); on a
    // kept-alive connection the wait for the next request counts too, so it gets the larger of
    // read_timeout and idle_timeout.
    stream_.expires_after(
        request_count_ == 0 ? server_.options.read_timeout
                            : std::max(server_.options.read_timeout, server_.options.idle_timeout));
    http::async_read(
        stream_, buffer_, *parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    ++request_count_;
    if (ec == http::error::end_of_stream || ec == beast::error::timeout ||
        ec == net::error::operation_aborted || ec == net::error::connection_reset ||
        ec == net::error::eof)
      return close();
    if (ec == http::error::body_limit)
      return respond_error(
          413, str_cat("the request body is larger than ", server_.options.body_limit, " bytes"),
          "", false);
    if (ec == http::error::header_limit)
      return respond_error(431, "the request header is too large", "", false);
    if (ec) return respond_error(400, str_cat("malformed HTTP request: ", ec.message()), "", false);
    http::request<http::string_body>& request = parser_->get();
    keep_alive_ = request.keep_alive();
    route(request);
  }

  void route(http::request<http::string_body>& request) {
    std::string_view target(request.target().data(), request.target().size());
    if (size_t q = target.find('?'); q != std::string_view::npos) target = target.substr(0, q);
    const http::verb method = request.method();
    auto allow = [&](http::verb wanted, const char* allowed) {
      if (method == wanted) return true;
      respond(405,
              error_body({405,
                          str_cat("method ", std::string(request.method_string()),
                                  " is not allowed on ", target, " (allowed: ", allowed, ")"),
                          "", "invalid_request_error", "method_not_allowed"}),
              "application/json", {{"Allow", allowed}});
      return false;
    };
    if (target == "/v1/chat/completions") {
      if (allow(http::verb::post, "POST")) generate(Endpoint::kChat, request.body());
    } else if (target == "/v1/completions") {
      if (allow(http::verb::post, "POST")) generate(Endpoint::kCompletions, request.body());
    } else if (target == "/v1/models") {
      if (allow(http::verb::get, "GET")) respond(200, models_body(), "application/json");
    } else if (target == "/health") {
      if (allow(http::verb::get, "GET")) respond(200, "{\"status\":\"ok\"}", "application/json");
    } else if (target == "/metrics") {
      if (allow(http::verb::get, "GET"))
        respond(200,
                server_.metrics.render(server_.model.loop->stats(), server_.model.loop->waiting(),
                                       *server_.model.plan),
                "text/plain; version=0.0.4; charset=utf-8");
    } else {
      respond(
          404,
          error_body({404, str_cat("no route ", target), "", "invalid_request_error", "not_found"}),
          "application/json");
    }
  }

  std::string models_body() const {
    nlohmann::json model = {{"id", server_.options.model_name},
                            {"object", "model"},
                            {"created", server_.created_at},
                            {"owned_by", "hyla"}};
    return dump_json({{"object", "list"}, {"data", nlohmann::json::array({model})}});
  }

  // ---- generation ----

  void generate(Endpoint endpoint, const std::string& body) {
    arrival_ = Clock::now();
    ApiError error;
    if (!parse_generation_request(endpoint, body, server_.api, request_, error))
      return respond(error.status, error_body(error), "application/json");
    std::weak_ptr<Session> weak = weak_from_this();
    std::shared_ptr<Gate> gate = server_.gate;
    auto executor = stream_.get_executor();
    EventSink sink = [weak, gate, executor](const LoopEvent& event) {
      std::lock_guard<std::mutex> lock(gate->mutex);
      if (!gate->open) return;
      if (std::shared_ptr<Session> self = weak.lock())
        net::post(executor, [self, event] { self->on_event(event); });
    };
    Result<EngineLoop::Ticket> ticket =
        server_.model.loop->submit(request_.prompt, request_.params, std::move(sink));
    if (!ticket.ok()) {
      if (ticket.status().code() == ErrorCode::kOutOfRange)
        return respond(429,
                       error_body({429, ticket.status().message() + "; retry later", "",
                                   "rate_limit_error", "queue_full"}),
                       "application/json", {{"Retry-After", "1"}});
      return respond(503, error_body({503, ticket.status().message(), "", "server_error", ""}),
                     "application/json");
    }
    ticket_ = *ticket;
    generating_ = true;
    self_ = shared_from_this();
    decoder_.emplace(*server_.model.tokenizer);
    stops_.emplace(request_.stop);
    text_.clear();
    completion_tokens_ = 0;
    first_chunk_ = true;
    id_ = server_.next_id(endpoint == Endpoint::kChat ? "chatcmpl-" : "cmpl-");
    created_ = unix_time();
    stream_.expires_never();
    watch_disconnect();
    if (request_.stream) send_stream_header();
  }

  /// Waits for the read end: readable with nothing to read means the client closed it.
  void watch_disconnect() {
    watching_ = true;
    stream_.socket().async_wait(tcp::socket::wait_read,
                                [self = shared_from_this()](beast::error_code ec) {
                                  self->watching_ = false;
                                  if (self->read_after_watch_) {
                                    self->read_after_watch_ = false;
                                    return self->do_read();
                                  }
                                  if (!self->generating_) return;
                                  const int read_end = ec ? 0 : self->peek_read_end();
                                  if (read_end == 0) self->client_gone();
                                  if (read_end < 0)
                                    self->watch_disconnect();  // a stale report: watch on
                                  // Else the client sent more (a pipelined request): read after
                                  // this response.
                                });
  }

  /// What the read end holds, without taking it: 1 bytes, 0 its end (the client closed it, or
  /// the socket failed), -1 nothing yet. A readiness report can be stale: the reactor may report
  /// the request's own arrival after the request was read, and nothing is there then.
  int peek_read_end() {
    char byte = 0;
    const ssize_t n = ::recv(stream_.socket().native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n > 0) return 1;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return -1;
    return 0;
  }

  void client_gone() {
    if (generating_) {
      server_.model.loop->cancel(ticket_);
      generating_ = false;
      server_.metrics.add_tokens(int64_t(request_.prompt.size()), completion_tokens_);
      // nginx's "client closed request", for a request that got no response (a stream's 200
      // was counted with its header).
      if (!request_.stream) server_.metrics.count_response(499);
    }
    close();
    self_.reset();
  }

  void on_event(const LoopEvent& loop_event) {
    if (!generating_) return;
    const runtime::TokenEvent& e = loop_event.event;
    if (loop_event.refused) return fail_generation(400, e.error);
    if (e.token >= 0) {
      ++completion_tokens_;
      const Clock::time_point now = Clock::now();
      if (completion_tokens_ == 1)
        server_.metrics.observe_ttft(std::chrono::duration<double>(now - arrival_).count());
      else
        server_.metrics.observe_tpot(std::chrono::duration<double>(now - last_token_).count());
      last_token_ = now;
      if (e.reason != runtime::FinishReason::kStopToken) {
        StopStrings::Piece piece = stops_->push(decoder_->push(e.token));
        emit(piece.text);
        if (piece.stopped) {
          server_.model.loop->cancel(ticket_);
          return finish("stop");
        }
      }
    }
    if (!e.finished) return;
    switch (e.reason) {
      case runtime::FinishReason::kStopToken:
      case runtime::FinishReason::kMaxTokens: {
        StopStrings::Piece piece = stops_->push(decoder_->finish());
        emit(piece.text);
        if (!piece.stopped) emit(stops_->finish());
        return finish(piece.stopped || e.reason == runtime::FinishReason::kStopToken ? "stop"
                                                                                     : "length");
      }
      case runtime::FinishReason::kError: return fail_generation(500, e.error);
      default:  // cancelled: the server is stopping
        generating_ = false;
        close();
        self_.reset();
        return;
    }
  }

  void emit(const std::string& text) {
    if (text.empty()) return;
    if (!request_.stream) {
      text_ += text;
      return;
    }
    queue(sse_event(stream_chunk(request_, id_, created_, text, first_chunk_, "")));
    first_chunk_ = false;
  }

  void finish(const std::string& reason) {
    generating_ = false;
    server_.metrics.add_tokens(int64_t(request_.prompt.size()), completion_tokens_);
    if (request_.stream) {
      queue(sse_event(stream_chunk(request_, id_, created_, "", first_chunk_, reason)));
      if (request_.include_usage)
        queue(sse_event(usage_chunk(request_, id_, created_, completion_tokens_)));
      queue("data: [DONE]\n\n");
      end_stream_ = true;
      write_next();
    } else {
      respond(200, completion_body(request_, id_, created_, text_, reason, completion_tokens_),
              "application/json");
    }
    self_.reset();  // the pending writes hold the session now
  }

  void fail_generation(int status, const std::string& message) {
    generating_ = false;
    server_.metrics.add_tokens(int64_t(request_.prompt.size()), completion_tokens_);
    ApiError error{status, message, "", status == 400 ? "invalid_request_error" : "server_error",
                   ""};
    if (request_.stream) {  // the 200 header is sent or on its way: the error is an event
      queue("data: " + error_body(error) + "\n\n");
      queue("data: [DONE]\n\n");
      end_stream_ = true;
      write_next();
    } else {
      respond(status, error_body(error), "application/json");
    }
    self_.reset();
  }

  // ---- streamed writes: the header, then one chunk per write of everything queued ----

  void send_stream_header() {
    sse_header_.result(http::status::ok);
    sse_header_.version(11);
    sse_header_.set(http::field::server, "hyla");
    sse_header_.set(http::field::content_type, "text/event-stream");
    sse_header_.set(http::field::cache_control, "no-cache");
    sse_header_.chunked(true);
    sse_header_.keep_alive(false);
    sse_serializer_.emplace(sse_header_);
    server_.metrics.count_response(200);
    writing_ = true;
    stream_header_pending_ = true;
    stream_.expires_after(kWriteTimeout);
    http::async_write_header(stream_, *sse_serializer_,
                             [self = shared_from_this()](beast::error_code ec, size_t) {
                               self->writing_ = false;
                               self->stream_header_pending_ = false;
                               if (ec) return self->write_failed();
                               self->header_sent_ = true;
                               self->write_next();
                             });
  }

  void queue(std::string data) {
    pending_ += data;
    write_next();
  }

  void write_next() {
    if (writing_ || !header_sent_ || closed_) return;
    if (!pending_.empty()) {
      writing_ = true;
      in_flight_.swap(pending_);
      pending_.clear();
      stream_.expires_after(kWriteTimeout);
      net::async_write(stream_, http::make_chunk(net::buffer(in_flight_)),
                       [self = shared_from_this()](beast::error_code ec, size_t) {
                         self->writing_ = false;
                         if (ec) return self->write_failed();
                         self->write_next();
                       });
      return;
    }
    if (end_stream_ && !generating_) {
      writing_ = true;
      end_stream_ = false;
      net::async_write(stream_, http::make_chunk_last(),
                       [self = shared_from_this()](beast::error_code, size_t) {
                         self->writing_ = false;
                         self->close();
                       });
    }
  }

  void write_failed() {
    if (generating_) return client_gone();
    close();
  }

  // ---- whole responses ----

  void respond_error(int status, const std::string& message, const std::string& param,
                     bool keep_alive) {
    keep_alive_ = keep_alive;
    respond(status, error_body({status, message, param, "invalid_request_error", ""}),
            "application/json");
  }

  void respond(int status, std::string body, const char* content_type,
               std::vector<std::pair<std::string, std::string>> headers = {}) {
    if (stream_header_pending_ || header_sent_) {  // a stream is under way: end it instead
      close();
      return;
    }
    server_.metrics.count_response(status);
    auto response =
        std::make_shared<http::response<http::string_body>>(static_cast<http::status>(status), 11);
    response->set(http::field::server, "hyla");
    response->set(http::field::content_type, content_type);
    for (const auto& [name, value] : headers) response->set(name, value);
    response->body() = std::move(body);
    response->keep_alive(keep_alive_);
    response->prepare_payload();
    stream_.expires_after(kWriteTimeout);
    http::async_write(stream_, *response,
                      [self = shared_from_this(), response](beast::error_code ec, size_t) {
                        if (ec || !response->keep_alive()) return self->close();
                        if (self->watching_) {  // the disconnect watch ends first
                          self->read_after_watch_ = true;
                          beast::error_code cancel_ec;
                          self->stream_.socket().cancel(cancel_ec);
                          return;
                        }
                        self->do_read();
                      });
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
  }

  beast::tcp_stream stream_;
  HttpServer::Impl& server_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  int64_t request_count_ = 0;
  bool keep_alive_ = true;
  bool closed_ = false;
  // The request being generated.
  bool generating_ = false;
  EngineLoop::Ticket ticket_ = 0;
  GenerationRequest request_;
  std::optional<StreamingDecoder> decoder_;
  std::optional<StopStrings> stops_;
  std::string text_;
  int64_t completion_tokens_ = 0;
  bool first_chunk_ = true;
  std::string id_;
  int64_t created_ = 0;
  Clock::time_point arrival_, last_token_;
  bool watching_ = false, read_after_watch_ = false;
  std::shared_ptr<Session> self_;  // kept while the engine holds the request
  // Streaming.
  http::response<http::empty_body> sse_header_;
  std::optional<http::response_serializer<http::empty_body>> sse_serializer_;
  bool stream_header_pending_ = false, header_sent_ = false, writing_ = false, end_stream_ = false;
  std::string pending_, in_flight_;
};

}  // namespace http_detail

void HttpServer::Impl::register_session(const std::shared_ptr<Session>& session) {
  std::lock_guard<std::mutex> lock(sessions_mutex);
  if (sessions.size() > 1024) {
    std::erase_if(sessions, [](const std::weak_ptr<Session>& s) { return s.expired(); });
  }
  sessions.push_back(session);
}

void HttpServer::Impl::accept() {
  acceptor.async_accept(net::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
    if (ec == net::error::operation_aborted || !acceptor.is_open()) return;
    if (!ec) {
      auto session = std::make_shared<Session>(std::move(socket), *this);
      register_session(session);
      session->start();
    }
    accept();  // a failed accept (e.g. out of file descriptors) does not stop the server
  });
}

void HttpServer::Impl::stop() {
  {
    std::lock_guard<std::mutex> lock(stop_mutex);
    if (stopped) return;
    stopped = true;
  }
  {
    std::lock_guard<std::mutex> lock(gate->mutex);
    gate->open = false;
  }
  ioc.stop();
  for (std::thread& t : threads)
    if (t.joinable() && t.get_id() != std::this_thread::get_id()) t.join();
  beast::error_code ec;
  acceptor.close(ec);
  std::vector<std::shared_ptr<Session>> live;
  {
    std::lock_guard<std::mutex> lock(sessions_mutex);
    for (const std::weak_ptr<Session>& weak : sessions)
      if (std::shared_ptr<Session> s = weak.lock()) live.push_back(s);
    sessions.clear();
  }
  for (const std::shared_ptr<Session>& s : live) s->abandon();
}

HttpServer::HttpServer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

HttpServer::~HttpServer() { stop(); }

Result<std::unique_ptr<HttpServer>> HttpServer::start(const ServerModel& model,
                                                      const ServerOptions& options) {
  auto impl = std::make_unique<Impl>(model, options);
  beast::error_code ec;
  const net::ip::address address = net::ip::make_address(options.host, ec);
  if (ec)
    return invalid_argument("--host '", options.host, "' is not an IP address (", ec.message(),
                            ")");
  const tcp::endpoint endpoint(address, options.port);
  impl->acceptor.open(endpoint.protocol(), ec);
  if (!ec) impl->acceptor.set_option(net::socket_base::reuse_address(true), ec);
  if (!ec) impl->acceptor.bind(endpoint, ec);
  if (!ec) impl->acceptor.listen(net::socket_base::max_listen_connections, ec);
  if (ec)
    return Status(ErrorCode::kIo, str_cat("cannot listen on ", options.host, ":", options.port,
                                          ": ", ec.message()));
  impl->port = impl->acceptor.local_endpoint(ec).port();
  impl->accept();
  Impl* raw = impl.get();
  for (int t = 0; t < std::max(1, options.threads); ++t)
    impl->threads.emplace_back([raw] {
      for (;;) {
        try {
          raw->ioc.run();
          return;
        } catch (const std::exception& e) {
          // A handler threw (allocation): the connection it served is lost, the server goes on.
          std::fprintf(stderr, "hyla serve: %s\n", e.what());
        }
      }
    });
  return std::unique_ptr<HttpServer>(new HttpServer(std::move(impl)));
}

uint16_t HttpServer::port() const { return impl_->port; }

void HttpServer::stop() { impl_->stop(); }

Metrics& HttpServer::metrics() { return impl_->metrics; }

}  // namespace hyla::serve

// hyla_serve_load: a load generator for `hyla serve` (any OpenAI-compatible server that streams
// with SSE): many streaming requests at once, one connection each, on one Asio thread.
//   bench (default): per concurrency level, N requests with C in flight -> a markdown row and one
//     JSON line: requests/s, output tokens/s, TTFT and TPOT percentiles, errors by kind.
//   --check: the server under load, checked (tests/serve/load_test.sh): every distinct request
//     alone first (its reference), then --streams of them at once, some cancelled midway, bad
//     input beside them, /health polled throughout; every finished stream must equal its
//     reference and /metrics must end with nothing in use and preemptions > 0.
// TTFT: from the start of a request (connect included) to its first chunk with text. TPOT: (last
// text chunk - first) / (completion tokens - 1), the tokens from the usage chunk
// (stream_options.include_usage). Every request has a deadline; one that passes it is a timeout.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "serve/beast.h"

namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using json = nlohmann::json;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// ---- prompts: word windows over a built-in text, so lengths and contents vary ----

// Plain sentences written for this tool; prompts are windows of their words.
constexpr const char* kText[] = {
    "The lighthouse keeper counted the ships that passed each night and wrote their names in a "
    "book with a green cover.",
    "On the first warm day of spring the children ran down to the river to see whether the ice "
    "had gone.",
    "She opened the letter slowly, because she already knew what it would say about the farm.",
    "A small grey cat slept on the windowsill while the rain fell on the roofs of the town.",
    "The old road over the mountains was closed every winter, and the village waited for the "
    "thaw.",
    "He had never seen the sea before, and for a long time he stood on the sand without a word.",
    "In the market the traders called out the prices of apples, bread, cheese and woollen cloth.",
    "The train was late again, so the passengers stood on the platform and talked about the "
    "weather.",
    "Every evening the baker left two loaves by the door for the family who lived at the end of "
    "the lane.",
    "The captain looked at the clouds in the west and ordered the crew to take in the sails.",
    "When the music stopped, the dancers stood still in the middle of the hall and laughed.",
    "The garden behind the house was full of roses, beans, potatoes and a crooked pear tree.",
    "Nobody in the school could explain how the clock in the tower had started to run "
    "backwards.",
    "The doctor rode through the snow to the farm on the hill, where a child was sick with "
    "fever.",
    "After the storm the fishermen mended their nets on the beach and counted the boats.",
    "It was a bright cold morning, and the frost lay white on the fields beyond the church.",
    "The young clerk copied the accounts into a new ledger and found a mistake of ten pounds.",
    "Once upon a time a king had three daughters, and the youngest was the cleverest of them "
    "all.",
    "The soldiers marched along the dusty road, singing an old song about home and harvest.",
    "In the library the candles burned low while the student read the last pages of the book.",
};

class PromptSource {
 public:
  PromptSource() {
    for (const char* sentence : kText) {
      std::istringstream words(sentence);
      std::string word;
      while (words >> word) words_.push_back(word);
    }
  }
  /// `count` words starting at word `start` (wrapping around the text).
  std::string window(size_t start, int64_t count) const {
    std::string out;
    for (int64_t w = 0; w < count; ++w) {
      if (w > 0) out += ' ';
      out += words_[(start + size_t(w)) % words_.size()];
    }
    return out;
  }
  size_t size() const { return words_.size(); }

 private:
  std::vector<std::string> words_;
};

/// "A" or "A:B" (inclusive, uniform).
struct Range {
  int64_t lo = 1, hi = 1;
  int64_t draw(std::mt19937_64& rng) const { return lo + int64_t(rng() % uint64_t(hi - lo + 1)); }
};

bool parse_range(const std::string& text, Range& out, std::string& error) {
  const size_t colon = text.find(':');
  try {
    size_t used = 0;
    out.lo = std::stoll(text.substr(0, colon), &used);
    if (used != (colon == std::string::npos ? text.size() : colon)) throw std::invalid_argument("");
    out.hi = out.lo;
    if (colon != std::string::npos) {
      const std::string hi = text.substr(colon + 1);
      out.hi = std::stoll(hi, &used);
      if (used != hi.size()) throw std::invalid_argument("");
    }
  } catch (const std::exception&) {
    error = "'" + text + "' is not N or MIN:MAX";
    return false;
  }
  if (out.lo < 1 || out.hi < out.lo) {
    error = "'" + text + "' needs 1 <= MIN <= MAX";
    return false;
  }
  return true;
}

// ---- one streamed request ----

enum class Endpoint { kCompletions, kChat };

struct StreamSpec {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string body;          ///< the JSON request
  int64_t cancel_after = 0;  ///< close the connection after this many text chunks; 0: never
  size_t source = 0;         ///< --check: the distinct request it repeats
};

struct StreamResult {
  enum class Outcome { kCompleted, kCancelled, kError };
  Outcome outcome = Outcome::kError;
  std::string
      error_kind;  ///< connect, write, read, timeout, http_NNN, no_done, bad_event, error_event
  std::string error_detail;
  std::string text;
  std::string finish_reason;
  int64_t completion_tokens = -1;  ///< from the usage chunk; -1: none came
  int64_t chunks = 0;              ///< chunks that carried text
  double ttft = -1;                ///< seconds from the start to the first text chunk
  double last_chunk = -1;          ///< seconds from the start to the last text chunk
};

/// connect -> write the request -> read the SSE body as it comes, event by event. Finishes once:
/// at `data: [DONE]`, at its cancel point, on an error, or at its deadline.
class Stream : public std::enable_shared_from_this<Stream> {
 public:
  using Done = std::function<void(StreamResult)>;
  Stream(net::io_context& ioc, const tcp::endpoint& endpoint, const std::string& host,
         StreamSpec spec, double timeout_s, Done done)
      : socket_(ioc),
        timer_(ioc),
        endpoint_(endpoint),
        host_(host),
        spec_(std::move(spec)),
        timeout_s_(timeout_s),
        done_(std::move(done)) {}

  void start() {
    start_ = Clock::now();
    timer_.expires_after(
        std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(timeout_s_)));
    timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (!ec) self->fail("timeout", "no [DONE] within the request's deadline");
    });
    socket_.async_connect(endpoint_, [self = shared_from_this()](beast::error_code ec) {
      if (ec) return self->fail("connect", ec.message());
      self->send();
    });
  }

 private:
  void send() {
    request_ = {http::verb::post,
                spec_.endpoint == Endpoint::kChat ? "/v1/chat/completions" : "/v1/completions", 11};
    request_.set(http::field::host, host_);
    request_.set(http::field::content_type, "application/json");
    request_.set(http::field::accept, "text/event-stream");
    request_.body() = spec_.body;
    request_.prepare_payload();
    http::async_write(socket_, request_, [self = shared_from_this()](beast::error_code ec, size_t) {
      if (ec) return self->fail("write", ec.message());
      self->parser_.body_limit(uint64_t{256} << 20);
      self->read();
    });
  }

  void read() {
    http::async_read_some(
        socket_, buffer_, parser_,
        [self = shared_from_this()](beast::error_code ec, size_t) { self->on_read(ec); });
  }

  void on_read(beast::error_code ec) {
    if (finished_) return;
    if (parser_.is_header_done() && parser_.get().result_int() != 200) {
      // An error answer: read it whole for its message.
      if (!ec && !parser_.is_done()) return read();
      return fail("http_" + std::to_string(parser_.get().result_int()),
                  parser_.get().body().substr(0, 300));
    }
    if (parser_.is_header_done()) {
      std::string& body = parser_.get().body();
      for (size_t end; (end = body.find("\n\n", consumed_)) != std::string::npos;) {
        const std::string event = body.substr(consumed_, end - consumed_);
        consumed_ = end + 2;
        on_event(event);
        if (finished_) return;
      }
    }
    if (ec)
      return fail("read", ec.message() + " before [DONE], after " + std::to_string(result_.chunks) +
                              " text chunks in " + std::to_string(seconds_since(start_)) + " s");
    if (parser_.is_done()) return fail("no_done", "the stream ended without data: [DONE]");
    read();
  }

  void on_event(const std::string& event) {
    if (event.rfind("data: ", 0) != 0) return fail("bad_event", "not a data line: " + event);
    const std::string payload = event.substr(6);
    if (payload == "[DONE]") {
      result_.outcome = StreamResult::Outcome::kCompleted;
      return finish();
    }
    json chunk = json::parse(payload, nullptr, false);
    if (chunk.is_discarded() || !chunk.is_object())
      return fail("bad_event", "not a JSON object: " + payload.substr(0, 200));
    if (chunk.contains("error")) return fail("error_event", payload.substr(0, 300));
    if (chunk.contains("usage") && chunk["usage"].is_object() &&
        chunk["usage"].contains("completion_tokens"))
      result_.completion_tokens = chunk["usage"]["completion_tokens"].get<int64_t>();
    if (!chunk.contains("choices") || !chunk["choices"].is_array() || chunk["choices"].empty())
      return;
    const json& choice = chunk["choices"][0];
    std::string piece;
    if (spec_.endpoint == Endpoint::kChat) {
      if (choice.contains("delta") && choice["delta"].contains("content") &&
          choice["delta"]["content"].is_string())
        piece = choice["delta"]["content"].get<std::string>();
    } else if (choice.contains("text") && choice["text"].is_string()) {
      piece = choice["text"].get<std::string>();
    }
    if (choice.contains("finish_reason") && choice["finish_reason"].is_string())
      result_.finish_reason = choice["finish_reason"].get<std::string>();
    if (piece.empty()) return;
    const double now = seconds_since(start_);
    if (result_.chunks == 0) result_.ttft = now;
    result_.last_chunk = now;
    ++result_.chunks;
    result_.text += piece;
    if (spec_.cancel_after > 0 && result_.chunks >= spec_.cancel_after) {
      result_.outcome = StreamResult::Outcome::kCancelled;  // the client goes away mid-stream
      return finish();
    }
  }

  void fail(const std::string& kind, const std::string& detail) {
    if (finished_) return;
    result_.outcome = StreamResult::Outcome::kError;
    result_.error_kind = kind;
    result_.error_detail = detail;
    finish();
  }

  void finish() {
    if (finished_) return;
    finished_ = true;
    timer_.cancel();
    beast::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
    done_(std::move(result_));
  }

  tcp::socket socket_;
  net::steady_timer timer_;
  tcp::endpoint endpoint_;
  std::string host_;
  StreamSpec spec_;
  double timeout_s_;
  Done done_;
  Clock::time_point start_;
  http::request<http::string_body> request_;
  beast::flat_buffer buffer_;
  http::response_parser<http::string_body> parser_;
  size_t consumed_ = 0;
  bool finished_ = false;
  StreamResult result_;
};

/// Runs `specs` with at most `concurrency` in flight (a new one starts as one finishes) on `ioc`;
/// `on_all_done` runs after the last one finished. With `ramp_s` > 0 the limit grows from 0 to
/// `concurrency` evenly over that time (clients arriving over a second rather than in one burst).
class Level : public std::enable_shared_from_this<Level> {
 public:
  Level(net::io_context& ioc, tcp::endpoint endpoint, std::string host,
        std::vector<StreamSpec> specs, int64_t concurrency, double timeout_s, double ramp_s,
        std::function<void()> on_all_done)
      : ioc_(ioc),
        ramp_timer_(ioc),
        endpoint_(endpoint),
        host_(std::move(host)),
        specs_(std::move(specs)),
        results_(specs_.size()),
        concurrency_(concurrency),
        timeout_s_(timeout_s),
        ramp_s_(ramp_s),
        on_all_done_(std::move(on_all_done)) {}

  void start() {
    start_ = Clock::now();
    if (specs_.empty()) return on_all_done_();
    fill();
    if (ramp_s_ > 0) ramp();
  }
  const std::vector<StreamResult>& results() const { return results_; }
  double seconds() const { return seconds_; }
  int64_t peak_in_flight() const { return peak_in_flight_; }

 private:
  int64_t allowed() const {
    const double elapsed = seconds_since(start_);
    if (ramp_s_ <= 0 || elapsed >= ramp_s_) return concurrency_;
    return std::max<int64_t>(1, int64_t(std::ceil(double(concurrency_) * elapsed / ramp_s_)));
  }

  void fill() {
    while (in_flight_ < allowed() && next_ < specs_.size()) launch();
  }

  void ramp() {
    ramp_timer_.expires_after(std::chrono::milliseconds(10));
    ramp_timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (ec) return;
      self->fill();
      if (seconds_since(self->start_) < self->ramp_s_ && self->next_ < self->specs_.size())
        self->ramp();
    });
  }

  void launch() {
    const size_t i = next_++;
    ++in_flight_;
    peak_in_flight_ = std::max(peak_in_flight_, in_flight_);
    auto stream = std::make_shared<Stream>(ioc_, endpoint_, host_, specs_[i], timeout_s_,
                                           [self = shared_from_this(), i](StreamResult result) {
                                             self->results_[i] = std::move(result);
                                             --self->in_flight_;
                                             ++self->done_;
                                             if (self->next_ < self->specs_.size()) {
                                               // Post, so a stream that fails at once does not
                                               // recurse through the next launches.
                                               net::post(self->ioc_, [self] { self->fill(); });
                                             } else if (self->done_ == self->specs_.size()) {
                                               self->seconds_ = seconds_since(self->start_);
                                               self->on_all_done_();
                                             }
                                           });
    stream->start();
  }

  net::io_context& ioc_;
  net::steady_timer ramp_timer_;
  tcp::endpoint endpoint_;
  std::string host_;
  std::vector<StreamSpec> specs_;
  std::vector<StreamResult> results_;
  int64_t concurrency_;
  double timeout_s_;
  double ramp_s_;
  std::function<void()> on_all_done_;
  size_t next_ = 0, done_ = 0;
  int64_t in_flight_ = 0, peak_in_flight_ = 0;
  Clock::time_point start_;
  double seconds_ = 0;
};

// ---- one-shot exchanges: /health, /metrics, bad input ----

struct Exchange {
  int status = 0;      ///< 0: no response
  std::string body;    ///< the response's
  std::string error;   ///< the transport's, when there was no response
  double seconds = 0;  ///< until the response or the error
  int64_t bytes_sent = 0;
};

/// Sends `head` and then `body_bytes` bytes of filler ('x'), `pace` apart per `piece` bytes
/// (zero: as fast as the socket takes them), while reading the response. Finishes at the
/// response, at a transport error (e.g. the server closing while the body is still being sent)
/// or at the deadline (error "timeout").
class RawRequest : public std::enable_shared_from_this<RawRequest> {
 public:
  using Done = std::function<void(Exchange)>;
  struct Plan {
    std::string head;        ///< sent first (whole, or byte by byte with `trickle`)
    int64_t body_bytes = 0;  ///< filler after the head
    bool trickle = false;    ///< the head one byte per `pace`
    std::chrono::milliseconds pace{1000};
    bool close_after_write = false;  ///< close once the head is sent (a client gone)
    double timeout_s = 10;
  };
  RawRequest(net::io_context& ioc, tcp::endpoint endpoint, Plan plan, Done done)
      : socket_(ioc),
        timer_(ioc),
        pace_timer_(ioc),
        endpoint_(endpoint),
        plan_(std::move(plan)),
        done_(std::move(done)) {}

  void start() {
    start_ = Clock::now();
    timer_.expires_after(std::chrono::duration_cast<Clock::duration>(
        std::chrono::duration<double>(plan_.timeout_s)));
    timer_.async_wait([self = shared_from_this()](beast::error_code ec) {
      if (!ec) self->finish_error("timeout");
    });
    socket_.async_connect(endpoint_, [self = shared_from_this()](beast::error_code ec) {
      if (ec) return self->finish_error("connect: " + ec.message());
      self->read();
      self->write_next();
    });
  }

 private:
  void read() {
    parser_.body_limit(uint64_t{16} << 20);
    http::async_read(socket_, buffer_, parser_,
                     [self = shared_from_this()](beast::error_code ec, size_t) {
                       if (ec) return self->finish_error(ec.message());
                       self->result_.status = self->parser_.get().result_int();
                       self->result_.body = self->parser_.get().body();
                       self->finish();
                     });
  }

  void write_next() {
    if (finished_) return;
    const int64_t head = int64_t(plan_.head.size());
    if (sent_ < head) {
      const size_t n = plan_.trickle ? 1 : size_t(head - sent_);
      piece_ = plan_.head.substr(size_t(sent_), n);
    } else if (sent_ < head + plan_.body_bytes) {
      constexpr int64_t kPiece = int64_t{1} << 20;
      piece_.assign(size_t(std::min(kPiece, head + plan_.body_bytes - sent_)), 'x');
    } else {
      if (plan_.close_after_write) {
        result_.error = "closed by the client after sending";
        return finish();
      }
      return;  // all sent: the read finishes it
    }
    net::async_write(socket_, net::buffer(piece_),
                     [self = shared_from_this()](beast::error_code ec, size_t n) {
                       self->sent_ += int64_t(n);
                       self->result_.bytes_sent = self->sent_;
                       if (self->finished_) return;
                       if (ec) return;  // the read reports how the connection ended
                       if (self->plan_.trickle && self->sent_ < int64_t(self->plan_.head.size())) {
                         self->pace_timer_.expires_after(self->plan_.pace);
                         self->pace_timer_.async_wait([self](beast::error_code wait_ec) {
                           if (!wait_ec) self->write_next();
                         });
                         return;
                       }
                       self->write_next();
                     });
  }

  void finish_error(const std::string& error) {
    if (finished_) return;
    result_.error = error;
    finish();
  }

  void finish() {
    if (finished_) return;
    finished_ = true;
    result_.seconds = seconds_since(start_);
    timer_.cancel();
    pace_timer_.cancel();
    beast::error_code ec;
    socket_.shutdown(tcp::socket::shutdown_both, ec);
    socket_.close(ec);
    done_(std::move(result_));
  }

  tcp::socket socket_;
  net::steady_timer timer_, pace_timer_;
  tcp::endpoint endpoint_;
  Plan plan_;
  Done done_;
  Clock::time_point start_;
  std::string piece_;
  int64_t sent_ = 0;
  beast::flat_buffer buffer_;
  http::response_parser<http::string_body> parser_;
  bool finished_ = false;
  Exchange result_;
};

std::string http_head(const std::string& method, const std::string& target, const std::string& host,
                      int64_t content_length, bool json_body = true) {
  std::string head = method + " " + target + " HTTP/1.1\r\nHost: " + host + "\r\n";
  if (json_body) head += "Content-Type: application/json\r\n";
  if (content_length >= 0) head += "Content-Length: " + std::to_string(content_length) + "\r\n";
  return head + "Connection: close\r\n\r\n";
}

RawRequest::Plan get_plan(const std::string& target, const std::string& host, double timeout_s) {
  RawRequest::Plan plan;
  plan.head = http_head("GET", target, host, -1, false);
  plan.timeout_s = timeout_s;
  return plan;
}

RawRequest::Plan post_plan(const std::string& target, const std::string& host,
                           const std::string& body, double timeout_s) {
  RawRequest::Plan plan;
  plan.head = http_head("POST", target, host, int64_t(body.size())) + body;
  plan.timeout_s = timeout_s;
  return plan;
}

/// Runs one exchange to its end on a fresh io_context (for the moments nothing else runs).
Exchange exchange_now(const tcp::endpoint& endpoint, RawRequest::Plan plan) {
  net::io_context ioc;
  Exchange out;
  std::make_shared<RawRequest>(ioc, endpoint, std::move(plan), [&](Exchange e) {
    out = std::move(e);
  })->start();
  ioc.run();
  return out;
}

/// Polls GET /health every `interval` until stop(); records each answer's latency. A poll that
/// has no answer within `limit_s` counts as late, and the next poll does not wait for it.
class HealthPoller : public std::enable_shared_from_this<HealthPoller> {
 public:
  HealthPoller(net::io_context& ioc, tcp::endpoint endpoint, std::string host,
               std::chrono::milliseconds interval, double limit_s)
      : ioc_(ioc),
        timer_(ioc),
        endpoint_(endpoint),
        host_(std::move(host)),
        interval_(interval),
        limit_s_(limit_s) {}
  void start() {
    start_ = Clock::now();
    poll();
  }
  void stop() {
    stopped_ = true;
    timer_.cancel();
  }
  int64_t polls = 0, answered = 0;
  double worst_s = 0;
  double worst_at_s = 0;  ///< when the slowest poll was sent, from start()
  std::vector<std::string> failures;

 private:
  void poll() {
    if (stopped_) return;
    ++polls;
    auto self = shared_from_this();
    const double sent_at = seconds_since(start_);
    // The deadline is well past the limit, so a late answer still shows how late it was.
    std::make_shared<RawRequest>(
        ioc_, endpoint_, get_plan("/health", host_, limit_s_ + 30),
        [self, sent_at](Exchange e) {
          if (e.seconds > self->worst_s) {
            self->worst_s = e.seconds;
            self->worst_at_s = sent_at;
          }
          if (e.status == 200) ++self->answered;
          if (e.status != 200)
            self->failures.push_back("GET /health: " +
                                     (e.status ? "status " + std::to_string(e.status) : e.error));
          else if (e.seconds > self->limit_s_)
            self->failures.push_back("GET /health answered after " + std::to_string(e.seconds) +
                                     " s");
        })
        ->start();
    timer_.expires_after(interval_);
    timer_.async_wait([self](beast::error_code ec) {
      if (!ec) self->poll();
    });
  }

  net::io_context& ioc_;
  net::steady_timer timer_;
  tcp::endpoint endpoint_;
  std::string host_;
  std::chrono::milliseconds interval_;
  double limit_s_;
  bool stopped_ = false;
  Clock::time_point start_;
};

// ---- statistics ----

double percentile(std::vector<double> values, double p) {
  if (values.empty()) return -1;
  std::sort(values.begin(), values.end());
  // Nearest rank: the smallest value with at least p% of the values at or below it.
  size_t rank = size_t(std::ceil(p / 100.0 * double(values.size())));
  rank = std::clamp<size_t>(rank, 1, values.size());
  return values[rank - 1];
}

struct LevelSummary {
  int64_t concurrency = 0, requests = 0, completed = 0, cancelled = 0, output_tokens = 0;
  double seconds = 0;
  std::vector<double> ttft, tpot;
  std::map<std::string, int64_t> errors;
  std::vector<std::string> error_examples;

  json to_json() const {
    json errs = json::object();
    for (const auto& [kind, count] : errors) errs[kind] = count;
    auto pct = [](const std::vector<double>& v) {
      return json{
          {"p50", percentile(v, 50)}, {"p90", percentile(v, 90)}, {"p99", percentile(v, 99)}};
    };
    return json{{"concurrency", concurrency},
                {"requests", requests},
                {"completed", completed},
                {"cancelled", cancelled},
                {"errors", errs},
                {"seconds", seconds},
                {"requests_per_s", seconds > 0 ? double(completed) / seconds : 0},
                {"output_tokens", output_tokens},
                {"output_tokens_per_s", seconds > 0 ? double(output_tokens) / seconds : 0},
                {"ttft_s", pct(ttft)},
                {"tpot_s", pct(tpot)}};
  }
};

LevelSummary summarize(int64_t concurrency, const std::vector<StreamResult>& results,
                       double seconds) {
  LevelSummary s;
  s.concurrency = concurrency;
  s.requests = int64_t(results.size());
  s.seconds = seconds;
  for (const StreamResult& r : results) {
    if (r.outcome == StreamResult::Outcome::kError) {
      ++s.errors[r.error_kind];
      if (s.error_examples.size() < 5)
        s.error_examples.push_back(r.error_kind + ": " + r.error_detail);
      continue;
    }
    if (r.outcome == StreamResult::Outcome::kCancelled) {
      ++s.cancelled;
      continue;
    }
    ++s.completed;
    if (r.completion_tokens > 0) s.output_tokens += r.completion_tokens;
    if (r.ttft >= 0) s.ttft.push_back(r.ttft);
    if (r.completion_tokens >= 2 && r.ttft >= 0)
      s.tpot.push_back((r.last_chunk - r.ttft) / double(r.completion_tokens - 1));
  }
  return s;
}

std::string ms(double seconds) {
  if (seconds < 0) return "-";
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f", seconds * 1000.0);
  return text;
}

std::string table_row(const LevelSummary& s) {
  char text[512];
  std::snprintf(text, sizeof(text),
                "| %lld | %lld | %lld | %lld | %.2f | %.2f | %.1f | %s | %s | %s | %s | %s | %s |",
                static_cast<long long>(s.concurrency), static_cast<long long>(s.requests),
                static_cast<long long>(s.completed), static_cast<long long>(s.cancelled), s.seconds,
                s.seconds > 0 ? double(s.completed) / s.seconds : 0.0,
                s.seconds > 0 ? double(s.output_tokens) / s.seconds : 0.0,
                ms(percentile(s.ttft, 50)).c_str(), ms(percentile(s.ttft, 90)).c_str(),
                ms(percentile(s.ttft, 99)).c_str(), ms(percentile(s.tpot, 50)).c_str(),
                ms(percentile(s.tpot, 90)).c_str(), ms(percentile(s.tpot, 99)).c_str());
  std::string row = text;
  std::string errs;
  for (const auto& [kind, count] : s.errors)
    errs += (errs.empty() ? "" : ", ") + kind + " " + std::to_string(count);
  return row + " " + (errs.empty() ? "0" : errs) + " |";
}

constexpr const char* kTableHead =
    "| concurrency | requests | completed | cancelled | seconds | requests/s | output tok/s | "
    "TTFT p50 ms | TTFT p90 ms | TTFT p99 ms | TPOT p50 ms | TPOT p90 ms | TPOT p99 ms | errors "
    "|\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|";

// ---- options and requests ----

struct Options {
  std::string host = "127.0.0.1";
  int port = 8080;
  std::vector<int64_t> concurrency = {1, 16, 64, 256};
  int64_t requests = 64;
  std::string prompt_words = "8:64";
  std::string max_tokens;  ///< empty: 16:64, with --check 1:64
  std::string endpoint = "completions";
  std::optional<double> cancel_fraction;  ///< unset: 0, with --check 0.1
  double temperature = 0;
  uint64_t seed = 1;
  double timeout_s = 300;
  double ramp_s = 0;
  std::string json_path;
  // --check
  bool check = false;
  int64_t distinct = 40;
  int64_t streams = 1000;
  double health_limit_s = 2;
  bool bad_input = true;
  double server_read_timeout_s = 2;
};

std::string request_body(Endpoint endpoint, const std::string& prompt, int64_t max_tokens,
                         double temperature, uint64_t seed) {
  json body = {{"max_tokens", max_tokens},
               {"temperature", temperature},
               {"seed", seed},
               {"stream", true},
               {"stream_options", {{"include_usage", true}}}};
  if (endpoint == Endpoint::kChat)
    body["messages"] = json::array({{{"role", "user"}, {"content", prompt}}});
  else
    body["prompt"] = prompt;
  return body.dump();
}

Endpoint pick_endpoint(const std::string& mode, std::mt19937_64& rng) {
  if (mode == "chat") return Endpoint::kChat;
  if (mode == "completions") return Endpoint::kCompletions;
  return rng() % 2 ? Endpoint::kChat : Endpoint::kCompletions;  // mixed
}

/// Raises the open-file limit to the hard limit; false (and why) when even that is below `need`.
bool raise_open_files(int64_t need, std::string& why) {
  rlimit limit{};
  if (getrlimit(RLIMIT_NOFILE, &limit) != 0) return true;
  if (limit.rlim_cur < limit.rlim_max) {
    rlimit raised = limit;
    raised.rlim_cur = limit.rlim_max;
    if (setrlimit(RLIMIT_NOFILE, &raised) == 0) limit = raised;
  }
  if (limit.rlim_cur != RLIM_INFINITY && int64_t(limit.rlim_cur) < need) {
    why = "needs " + std::to_string(need) + " open files (a socket per stream), but the limit is " +
          std::to_string(limit.rlim_cur) + " (hard limit " + std::to_string(limit.rlim_max) +
          "): raise it (ulimit -n; the hard limit as root) or lower the concurrency";
    return false;
  }
  return true;
}

// ---- bench mode ----

int run_bench(const Options& o, const tcp::endpoint& endpoint, const Range& words,
              const Range& out_tokens) {
  PromptSource prompts;
  std::FILE* json_file = nullptr;
  if (!o.json_path.empty()) {
    json_file = std::fopen(o.json_path.c_str(), "a");
    if (json_file == nullptr) {
      std::fprintf(stderr, "hyla_serve_load: cannot open --json %s\n", o.json_path.c_str());
      return 1;
    }
  }
  std::vector<LevelSummary> summaries;
  bool any_error = false;
  for (int64_t concurrency : o.concurrency) {
    std::mt19937_64 rng(o.seed * 1000003u + uint64_t(concurrency));
    const int64_t count = std::max(o.requests, concurrency);
    std::vector<StreamSpec> specs;
    for (int64_t i = 0; i < count; ++i) {
      StreamSpec spec;
      spec.endpoint = pick_endpoint(o.endpoint, rng);
      const int64_t max_tokens = out_tokens.draw(rng);
      spec.body =
          request_body(spec.endpoint, prompts.window(rng() % prompts.size(), words.draw(rng)),
                       max_tokens, o.temperature, rng() >> 1);
      if (double(rng() % 1000000) / 1e6 < o.cancel_fraction.value_or(0))
        spec.cancel_after = 1 + int64_t(rng() % uint64_t(std::max<int64_t>(1, max_tokens / 2)));
      specs.push_back(std::move(spec));
    }
    net::io_context ioc;
    auto level = std::make_shared<Level>(ioc, endpoint, o.host, std::move(specs), concurrency,
                                         o.timeout_s, o.ramp_s, [] {});
    level->start();
    ioc.run();
    const LevelSummary s = summarize(concurrency, level->results(), level->seconds());
    const std::string line = s.to_json().dump();
    std::printf("%s\n", line.c_str());
    std::fflush(stdout);
    if (json_file) std::fprintf(json_file, "%s\n", line.c_str());
    for (const std::string& e : s.error_examples) std::fprintf(stderr, "  error: %s\n", e.c_str());
    any_error = any_error || !s.errors.empty();
    summaries.push_back(s);
  }
  if (json_file) std::fclose(json_file);
  std::printf("\n%s\n", kTableHead);
  for (const LevelSummary& s : summaries) std::printf("%s\n", table_row(s).c_str());
  return any_error ? 1 : 0;
}

// ---- check mode ----

struct Reference {
  StreamSpec spec;
  StreamResult result;
};

/// The bad requests sent while the load runs, and what each must get.
struct BadCase {
  std::string name;
  RawRequest::Plan plan;
  std::function<std::string(const Exchange&)> verdict;  ///< "" when it went as it must
};

std::vector<BadCase> bad_cases(const Options& o) {
  std::vector<BadCase> cases;
  auto want_status = [](int status) {
    return [status](const Exchange& e) -> std::string {
      if (e.status == status) return "";
      return "expected " + std::to_string(status) + ", got " +
             (e.status ? std::to_string(e.status) + " " + e.body.substr(0, 200)
                       : "no response (" + e.error + ")");
    };
  };
  auto post = [&](const std::string& name, const std::string& target, const std::string& body,
                  int status) {
    cases.push_back({name, post_plan(target, o.host, body, 30), want_status(status)});
  };
  post("malformed JSON", "/v1/completions", R"({"prompt": "Hello", "max_tokens": )", 400);
  post("not an object", "/v1/completions", R"(["prompt", "Hello"])", 400);
  post("prompt of the wrong type", "/v1/completions", R"({"prompt": {"text": 1}})", 400);
  post("max_tokens of the wrong type", "/v1/completions",
       R"({"prompt": "Hello", "max_tokens": "many"})", 400);
  post("messages of the wrong type", "/v1/chat/completions", R"({"messages": "Hello"})", 400);
  post("negative max_tokens", "/v1/completions", R"({"prompt": "Hello", "max_tokens": -5})", 400);
  post("huge max_tokens", "/v1/completions",
       R"({"prompt": "Hello", "max_tokens": 1000000000000, "stream": true})", 400);
  post("max_tokens beyond int64", "/v1/completions",
       R"({"prompt": "Hello", "max_tokens": 123456789012345678901234567890})", 400);
  // 100 MB announced: the server must answer 413 (or close) from the header, without taking it.
  {
    BadCase c;
    c.name = "100 MB body";
    constexpr int64_t kBody = int64_t{100} << 20;
    c.plan.head = http_head("POST", "/v1/completions", o.host, kBody);
    c.plan.body_bytes = kBody;
    c.plan.timeout_s = 30;
    c.verdict = [](const Exchange& e) -> std::string {
      const int64_t total = e.bytes_sent;
      if (e.status != 0 && e.status != 413)
        return "expected 413 or a closed connection, got " + std::to_string(e.status);
      // Loopback socket buffers hold a few MB; the server took all 100 MB only if it read them.
      if (total >= (int64_t{100} << 20))
        return "the server took the whole 100 MB body (" + std::to_string(total) + " bytes)";
      return "";
    };
    cases.push_back(std::move(c));
  }
  // A request one byte a second: closed once the server's read timeout passes, never answered.
  {
    BadCase c;
    c.name = "request trickled one byte a second";
    const std::string body = R"({"prompt": "Hello", "max_tokens": 4})";
    c.plan.head = http_head("POST", "/v1/completions", o.host, int64_t(body.size())) + body;
    c.plan.trickle = true;
    c.plan.pace = std::chrono::milliseconds(1000);
    c.plan.timeout_s = o.server_read_timeout_s + 20;
    const double limit = o.server_read_timeout_s + 3;
    c.verdict = [limit](const Exchange& e) -> std::string {
      if (e.status >= 200 && e.status < 400)
        return "answered " + std::to_string(e.status) + " after " + std::to_string(e.bytes_sent) +
               " bytes";
      if (e.error == "timeout") return "still open after the deadline";
      if (e.seconds > limit)
        return "closed after " + std::to_string(e.seconds) + " s, over the read timeout + 3 s";
      return "";
    };
    cases.push_back(std::move(c));
  }
  // Clients gone before their answer: a streamed and a whole request, closed right after sending.
  for (bool stream : {true, false}) {
    BadCase c;
    c.name = stream ? "client gone before its stream" : "client gone before its answer";
    const std::string body = json{
        {"prompt", "The captain looked at the clouds"},
        {"max_tokens", 64},
        {"stream", stream}}.dump();
    c.plan = post_plan("/v1/completions", o.host, body, 30);
    c.plan.close_after_write = true;
    c.verdict = [](const Exchange&) { return std::string(); };  // the end check finds leaks
    cases.push_back(std::move(c));
  }
  // Not HTTP at all.
  {
    BadCase c;
    c.name = "not HTTP";
    c.plan.head = std::string("\x16\x03\x01\x02\x00garbage\r\n\r\n", 16);
    c.plan.timeout_s = 30;
    c.verdict = [](const Exchange& e) -> std::string {
      if (e.status == 0 || (e.status >= 400 && e.status < 500)) return "";
      return "expected a 4xx or a closed connection, got " + std::to_string(e.status);
    };
    cases.push_back(std::move(c));
  }
  return cases;
}

/// /metrics as name -> value (lines "name value"; labelled series keep their labels in the name).
std::map<std::string, double> parse_metrics(const std::string& text) {
  std::map<std::string, double> values;
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    const size_t space = line.rfind(' ');
    if (space == std::string::npos) continue;
    try {
      values[line.substr(0, space)] = std::stod(line.substr(space + 1));
    } catch (const std::exception&) {
    }
  }
  return values;
}

int run_check(const Options& o, const tcp::endpoint& endpoint, const Range& words,
              const Range& out_tokens) {
  std::vector<std::string> failures;
  auto fail = [&](const std::string& what) {
    if (failures.size() < 30) std::printf("FAIL: %s\n", what.c_str());
    failures.push_back(what);
  };
  const Clock::time_point t0 = Clock::now();
  PromptSource prompts;
  std::mt19937_64 rng(o.seed);

  // (a) the distinct requests, each alone, greedy: their reference text.
  std::vector<Reference> refs(size_t(o.distinct));
  for (int64_t i = 0; i < o.distinct; ++i) {
    Reference& r = refs[size_t(i)];
    r.spec.endpoint = o.endpoint == "mixed" ? (i % 2 ? Endpoint::kChat : Endpoint::kCompletions)
                                            : pick_endpoint(o.endpoint, rng);
    // The extremes of the output range always, the rest drawn.
    const int64_t max_tokens = i == 0   ? out_tokens.lo
                               : i == 1 ? out_tokens.hi
                                        : out_tokens.draw(rng);
    // Windows start at distinct words, so the prompts differ.
    const size_t start = size_t(i) * prompts.size() / size_t(o.distinct);
    r.spec.body = request_body(r.spec.endpoint, prompts.window(start, words.draw(rng)), max_tokens,
                               0.0, uint64_t(i));
  }
  {
    std::vector<StreamSpec> specs;
    for (const Reference& r : refs) specs.push_back(r.spec);
    net::io_context ioc;
    auto level = std::make_shared<Level>(ioc, endpoint, o.host, specs, 1, o.timeout_s, 0.0, [] {});
    level->start();
    ioc.run();
    for (size_t i = 0; i < refs.size(); ++i) {
      refs[i].result = level->results()[i];
      const StreamResult& r = refs[i].result;
      if (r.outcome != StreamResult::Outcome::kCompleted)
        fail("reference " + std::to_string(i) + " did not complete: " + r.error_kind + ": " +
             r.error_detail);
      else if (r.completion_tokens < 1)
        fail("reference " + std::to_string(i) + " has no usage chunk");
    }
    std::printf("(a) %zu distinct requests alone: %.1f s\n", refs.size(), level->seconds());
  }
  if (!failures.empty()) return 1;

  // (b) --streams requests drawn from them at once, ~cancel_fraction cancelled midway; (c)
  // /health polled throughout; bad input sent beside them.
  std::vector<StreamSpec> specs;
  int64_t planned_cancels = 0;
  for (int64_t i = 0; i < o.streams; ++i) {
    const size_t source = size_t(rng() % refs.size());
    StreamSpec spec = refs[source].spec;
    spec.source = source;
    const int64_t chunks = refs[source].result.chunks;
    // A cancel point strictly before the reference's last text chunk, so it is midway.
    if (chunks >= 2 && double(rng() % 1000000) / 1e6 < o.cancel_fraction.value_or(0.1)) {
      spec.cancel_after = 1 + int64_t(rng() % uint64_t(chunks - 1));
      ++planned_cancels;
    }
    specs.push_back(std::move(spec));
  }
  net::io_context ioc;
  auto health = std::make_shared<HealthPoller>(ioc, endpoint, o.host,
                                               std::chrono::milliseconds(250), o.health_limit_s);
  std::vector<BadCase> bad = o.bad_input ? bad_cases(o) : std::vector<BadCase>{};
  std::vector<std::optional<Exchange>> bad_results(bad.size());
  size_t bad_done = 0;
  bool streams_done = false;
  auto level =
      std::make_shared<Level>(ioc, endpoint, o.host, specs, o.streams, o.timeout_s, o.ramp_s, [&] {
        streams_done = true;
        if (bad_done == bad.size()) health->stop();
      });
  level->start();
  health->start();
  net::steady_timer bad_start(ioc);
  bad_start.expires_after(std::chrono::milliseconds(500));  // the streams are under way by then
  bad_start.async_wait([&](beast::error_code) {
    for (size_t i = 0; i < bad.size(); ++i)
      std::make_shared<RawRequest>(ioc, endpoint, bad[i].plan, [&, i](Exchange e) {
        bad_results[i] = std::move(e);
        if (++bad_done == bad.size() && streams_done) health->stop();
      })->start();
  });
  if (bad.empty()) bad_start.cancel();
  ioc.run();
  std::printf(
      "(b) %lld streams at once (opened over %.1f s; at most %lld open together; %lld to be "
      "cancelled midway): %.1f s\n",
      static_cast<long long>(o.streams), o.ramp_s, static_cast<long long>(level->peak_in_flight()),
      static_cast<long long>(planned_cancels), level->seconds());

  // Concurrency: the short requests end early, but nearly all must have been open together.
  if (level->peak_in_flight() * 10 < o.streams * 9)
    fail("at most " + std::to_string(level->peak_in_flight()) + " of " + std::to_string(o.streams) +
         " streams were open together (less than 90%)");
  int64_t equal = 0, cancelled = 0;
  std::map<std::string, int64_t> errors;
  for (size_t i = 0; i < specs.size(); ++i) {
    const StreamResult& got = level->results()[i];
    const StreamResult& want = refs[specs[i].source].result;
    const std::string who =
        "stream " + std::to_string(i) + " (request " + std::to_string(specs[i].source) + ")";
    if (got.outcome == StreamResult::Outcome::kError) {
      ++errors[got.error_kind];
      fail(who + ": " + got.error_kind + ": " + got.error_detail);
      continue;
    }
    if (got.outcome == StreamResult::Outcome::kCancelled) {
      ++cancelled;
      // What came before the cancel is a prefix of the reference.
      if (want.text.compare(0, got.text.size(), got.text) != 0)
        fail(who + ": cancelled after " + std::to_string(got.chunks) +
             " chunks with text that is not a prefix of its reference: '" + got.text + "'");
      continue;
    }
    if (specs[i].cancel_after > 0)
      fail(who + ": completed with " + std::to_string(got.chunks) +
           " chunks before its cancel point " + std::to_string(specs[i].cancel_after) +
           " (the reference has " + std::to_string(want.chunks) + ")");
    if (got.text != want.text)
      fail(who + ": text differs from the request alone:\n  alone: '" + want.text +
           "'\n  load:  '" + got.text + "'");
    else if (got.finish_reason != want.finish_reason)
      fail(who + ": finish_reason " + got.finish_reason + ", alone " + want.finish_reason);
    else if (got.completion_tokens != want.completion_tokens)
      fail(who + ": " + std::to_string(got.completion_tokens) + " completion tokens, alone " +
           std::to_string(want.completion_tokens));
    else
      ++equal;
  }
  if (cancelled != planned_cancels)
    fail(std::to_string(cancelled) + " streams cancelled, " + std::to_string(planned_cancels) +
         " planned");
  std::printf("    %lld equal to their reference, %lld cancelled midway, %zu errors\n",
              static_cast<long long>(equal), static_cast<long long>(cancelled),
              size_t(o.streams) - size_t(equal) - size_t(cancelled));

  std::printf(
      "(c) /health: %lld polls, %lld answered 200, the slowest in %.3f s (sent %.1f s into the "
      "run; limit %.1f s)\n",
      static_cast<long long>(health->polls), static_cast<long long>(health->answered),
      health->worst_s, health->worst_at_s, o.health_limit_s);
  for (const std::string& f : health->failures) fail(f);
  if (health->polls < 2) fail("fewer than 2 /health polls during the run");
  for (size_t i = 0; i < bad.size(); ++i) {
    if (!bad_results[i]) {
      fail("bad input '" + bad[i].name + "' never finished");
      continue;
    }
    const Exchange& e = *bad_results[i];
    const std::string verdict = bad[i].verdict(e);
    std::printf(
        "    bad input '%s': %s after %.2f s (%lld bytes sent)%s\n", bad[i].name.c_str(),
        e.status ? ("status " + std::to_string(e.status)).c_str() : ("closed: " + e.error).c_str(),
        e.seconds, static_cast<long long>(e.bytes_sent), verdict.empty() ? "" : " <- wrong");
    if (!verdict.empty()) fail("bad input '" + bad[i].name + "': " + verdict);
  }

  // (d) afterwards: nothing in use but what the prefix cache keeps (its snapshots' slots and the
  // pages only it holds; zero with --prefix-cache off), and the pool ran dry at least once
  // (preemptions > 0).
  // Cancellations reach the engine between steps: wait for them a little.
  std::map<std::string, double> m;
  std::string last_error;
  const Clock::time_point settle = Clock::now();
  for (;;) {
    Exchange e = exchange_now(endpoint, get_plan("/metrics", o.host, 10));
    if (e.status == 200) {
      m = parse_metrics(e.body);
      if (m["hyla_requests_running"] == 0 && m["hyla_requests_waiting"] == 0 &&
          m["hyla_state_slots_free"] + m["hyla_prefix_cache_snapshots"] ==
              m["hyla_state_slots_total"] &&
          m["hyla_kv_pages_free"] + m["hyla_prefix_cache_kv_pages"] == m["hyla_kv_pages_total"])
        break;
    } else {
      last_error = e.status ? "status " + std::to_string(e.status) : e.error;
    }
    if (seconds_since(settle) > 10) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  if (m.empty()) {
    fail("GET /metrics failed: " + last_error);
  } else {
    for (const char* name :
         {"hyla_requests_running", "hyla_requests_waiting", "hyla_state_slots_total",
          "hyla_kv_pages_total", "hyla_preemptions_total", "hyla_prefix_cache_snapshots",
          "hyla_prefix_cache_kv_pages"})
      if (!m.count(name)) fail(std::string("/metrics has no ") + name);
    const double slots_used =
        m["hyla_state_slots_total"] - m["hyla_state_slots_free"] - m["hyla_prefix_cache_snapshots"];
    const double pages_used =
        m["hyla_kv_pages_total"] - m["hyla_kv_pages_free"] - m["hyla_prefix_cache_kv_pages"];
    std::printf(
        "(d) /metrics afterwards: %g running, %g waiting, %g state slots and %g KV pages in use "
        "besides the prefix cache's %g snapshots and %g pages; %g preemptions, %g of %g lookups "
        "hit the cache\n",
        m["hyla_requests_running"], m["hyla_requests_waiting"], slots_used, pages_used,
        m["hyla_prefix_cache_snapshots"], m["hyla_prefix_cache_kv_pages"],
        m["hyla_preemptions_total"], m["hyla_prefix_cache_hits_total"],
        m["hyla_prefix_cache_lookups_total"]);
    if (m["hyla_requests_running"] != 0 || m["hyla_requests_waiting"] != 0 || slots_used != 0 ||
        pages_used != 0)
      fail("requests, state slots or KV pages still in use 10 s after the last stream ended");
    if (!(m["hyla_preemptions_total"] > 0))
      fail("no preemption happened: the memory budget held every stream at once");
  }
  std::printf("%s in %.1f s\n", failures.empty() ? "PASS" : "FAILED", seconds_since(t0));
  if (!failures.empty()) std::printf("%zu failures\n", failures.size());
  return failures.empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{
      "hyla_serve_load: streamed requests against an OpenAI-compatible server (hyla serve), one "
      "connection each; per concurrency level a table row and a JSON line (requests/s, output "
      "tokens/s, TTFT and TPOT percentiles, errors by kind). --check: the load test."};
  app.add_option("--host", o.host, "server address (an IP address; default 127.0.0.1)");
  app.add_option("--port", o.port, "server port (default 8080)")->check(CLI::Range(1, 65535));
  app.add_option("--concurrency", o.concurrency,
                 "streams in flight, one level per value (default 1,16,64,256)")
      ->delimiter(',')
      ->check(CLI::Range(int64_t{1}, int64_t{100000}));
  app.add_option("--requests", o.requests,
                 "requests per level (at least the level's concurrency; default 64)")
      ->check(CLI::Range(int64_t{1}, int64_t{10000000}));
  app.add_option(
      "--prompt-words", o.prompt_words,
      "prompt length in words of the built-in text, N or MIN:MAX uniform (default 8:64)");
  app.add_option("--max-tokens", o.max_tokens,
                 "max_tokens per request, N or MIN:MAX uniform (default 16:64; --check 1:64)");
  app.add_option("--endpoint", o.endpoint, "completions, chat or mixed (default completions)")
      ->check(CLI::IsMember({"completions", "chat", "mixed"}));
  app.add_option("--cancel-fraction", o.cancel_fraction,
                 "share of requests whose connection is closed after a random number of chunks "
                 "(default 0; --check 0.1)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--temperature", o.temperature, "sampling temperature (default 0: greedy)")
      ->check(CLI::Range(0.0, 2.0));
  app.add_option("--seed", o.seed, "seed of the prompts, lengths, cancel points (default 1)");
  app.add_option("--timeout", o.timeout_s, "seconds a request may take (default 300)")
      ->check(CLI::Range(0.1, 86400.0));
  app.add_option("--ramp", o.ramp_s,
                 "seconds over which a level's first streams open, evenly (default 0: at once)")
      ->check(CLI::Range(0.0, 3600.0));
  app.add_option("--json", o.json_path, "also append each level's JSON line to this file");
  app.add_flag("--check", o.check,
               "the load test: --distinct requests alone, then --streams at once (some cancelled, "
               "bad input beside them, /health polled), each finished one equal to its request "
               "alone; /metrics must end with nothing in use and preemptions > 0");
  app.add_option("--distinct", o.distinct, "--check: distinct requests (default 40)")
      ->check(CLI::Range(int64_t{1}, int64_t{100000}));
  app.add_option("--streams", o.streams, "--check: concurrent streams (default 1000)")
      ->check(CLI::Range(int64_t{1}, int64_t{100000}));
  app.add_option("--health-limit", o.health_limit_s,
                 "--check: seconds within which every /health poll must be answered (default 2)")
      ->check(CLI::Range(0.01, 600.0));
  app.add_option("--server-read-timeout", o.server_read_timeout_s,
                 "--check: the server's --read-timeout, so a trickled request must be closed "
                 "within it + 3 s (default 2)")
      ->check(CLI::Range(0.05, 600.0));
  bool no_bad_input = false;
  app.add_flag("--no-bad-input", no_bad_input, "--check: send no bad input beside the streams");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  o.bad_input = !no_bad_input;
  if (o.max_tokens.empty()) o.max_tokens = o.check ? "1:64" : "16:64";

  Range words, out_tokens;
  std::string error;
  if (!parse_range(o.prompt_words, words, error) || !parse_range(o.max_tokens, out_tokens, error)) {
    std::fprintf(stderr, "hyla_serve_load: %s\n", error.c_str());
    return 2;
  }
  beast::error_code ec;
  const net::ip::address address = net::ip::make_address(o.host, ec);
  if (ec) {
    std::fprintf(stderr, "hyla_serve_load: --host '%s' is not an IP address (%s)\n", o.host.c_str(),
                 ec.message().c_str());
    return 2;
  }
  const tcp::endpoint endpoint(address, uint16_t(o.port));
  const int64_t most =
      o.check ? o.streams : *std::max_element(o.concurrency.begin(), o.concurrency.end());
  if (!raise_open_files(most + 64, error)) {
    std::fprintf(stderr, "hyla_serve_load: %s\n", error.c_str());
    return 1;
  }
  try {
    return o.check ? run_check(o, endpoint, words, out_tokens)
                   : run_bench(o, endpoint, words, out_tokens);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "hyla_serve_load: %s\n", e.what());
    return 1;
  }
}

// `hyla serve`'s HTTP server in process, on the demo model (CPU) and an ephemeral port, driven by a
// small Beast client: generated text equal to the engine run directly (greedy), SSE framing,
// usage, stop strings, finish reasons, errors (400 naming the field, 404, 405, 413, 429), the chat
// page at /, a client gone mid-stream freeing its request, /metrics, many concurrent streams, a
// slow client.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "model/architecture.h"
#include "runtime/engine.h"
#include "serve/beast.h"
#include "serve/chat_page.h"
#include "serve/chat_template.h"
#include "serve/engine_loop.h"
#include "serve/http_server.h"
#include "serve/tokenizer.h"

namespace hyla::serve {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;
using json = nlohmann::json;

const std::string kDemoDir = std::string(HYLA_MODELS_DIR) + "/hyla-demo";
constexpr int64_t kDemoEos = 0;  // config.json's eos_token_id

// ---- the client ----

struct HttpResult {
  int status = 0;
  std::map<std::string, std::string> headers;
  std::string body;
  std::string error;  // the transport's error, if any
};

HttpResult send(uint16_t port, http::verb method, const std::string& target,
                const std::string& body = "", const std::string& address = "127.0.0.1") {
  HttpResult result;
  net::io_context ioc;
  tcp::socket socket(ioc);
  beast::error_code ec;
  socket.connect({net::ip::make_address(address), port}, ec);
  if (ec) {
    result.error = ec.message();
    return result;
  }
  http::request<http::string_body> request{method, target, 11};
  request.set(http::field::host, "127.0.0.1");
  request.set(http::field::content_type, "application/json");
  request.body() = body;
  request.prepare_payload();
  http::write(socket, request, ec);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(64 << 20);
  http::read(socket, buffer, parser, ec);
  if (ec) {
    result.error = ec.message();
    return result;
  }
  result.status = parser.get().result_int();
  for (const auto& field : parser.get())
    result.headers[std::string(field.name_string())] = std::string(field.value());
  result.body = parser.get().body();
  return result;
}

HttpResult post(uint16_t port, const std::string& target, const json& body) {
  return send(port, http::verb::post, target, body.dump());
}

/// The SSE events of a streamed body; checks the framing ("data: <payload>\n\n" each, [DONE] last).
std::vector<std::string> sse_payloads(const std::string& body) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < body.size()) {
    const size_t end = body.find("\n\n", at);
    EXPECT_NE(end, std::string::npos) << "an event without its blank line: " << body.substr(at);
    if (end == std::string::npos) break;
    const std::string event = body.substr(at, end - at);
    EXPECT_EQ(event.rfind("data: ", 0), 0u) << "not a data line: " << event;
    out.push_back(event.substr(6));
    at = end + 2;
  }
  EXPECT_FALSE(out.empty());
  if (!out.empty()) {
    EXPECT_EQ(out.back(), "[DONE]");
  }
  return out;
}

struct Streamed {
  std::string text;
  std::string finish_reason;
  json usage;  // the include_usage chunk's
};

Streamed read_stream(const std::string& body, bool chat) {
  Streamed s;
  std::vector<std::string> payloads = sse_payloads(body);
  for (size_t i = 0; i + 1 < payloads.size(); ++i) {
    const json chunk = json::parse(payloads[i]);
    EXPECT_EQ(chunk["object"], chat ? "chat.completion.chunk" : "text_completion");
    if (chunk["choices"].empty()) {
      s.usage = chunk["usage"];
      continue;
    }
    const json& choice = chunk["choices"][0];
    std::string delta;
    if (chat) {
      if (choice["delta"].contains("content")) delta = choice["delta"]["content"];
    } else {
      delta = choice["text"];
    }
    s.text += delta;
    if (!choice["finish_reason"].is_null()) {
      EXPECT_TRUE(s.finish_reason.empty()) << "two finish reasons";
      s.finish_reason = choice["finish_reason"];
    }
  }
  return s;
}

// ---- the server ----

struct Shared {
  std::unique_ptr<model::Model> model;
  std::optional<Tokenizer> tokenizer;
  std::optional<ChatTemplate> chat;
};

Shared* shared_model() {
  static Shared* shared = [] {
    auto* s = new Shared;
    if (!std::filesystem::exists(kDemoDir + "/model.safetensors")) return s;
    Result<std::unique_ptr<model::Model>> model = model::load_model(kDemoDir);
    EXPECT_TRUE(model.ok()) << model.status().message();
    if (model.ok()) s->model = std::move(model).value();
    Result<Tokenizer> tokenizer = Tokenizer::load(kDemoDir + "/tokenizer.json");
    EXPECT_TRUE(tokenizer.ok()) << tokenizer.status().message();
    if (tokenizer.ok()) s->tokenizer.emplace(std::move(tokenizer).value());
    Result<ChatTemplate> chat = load_chat_template(kDemoDir, true);
    EXPECT_TRUE(chat.ok()) << chat.status().message();
    if (chat.ok()) s->chat.emplace(std::move(chat).value());
    return s;
  }();
  return shared;
}

struct TestServer {
  std::unique_ptr<runtime::Engine> engine;
  std::unique_ptr<EngineLoop> loop;
  std::unique_ptr<HttpServer> server;
  uint16_t port = 0;

  ~TestServer() {
    if (server) server->stop();
    if (loop) loop->stop();
  }
};

runtime::EngineOptions engine_options(int64_t max_running = 64) {
  runtime::EngineOptions options;
  options.memory_budget_bytes = int64_t{96} << 20;
  options.max_running = max_running;
  return options;
}

/// The tests' server options: an ephemeral port on 127.0.0.1, the model named "hyla-demo".
ServerOptions test_options() {
  ServerOptions options;
  options.host = "127.0.0.1";
  options.port = 0;
  options.model_name = "hyla-demo";
  options.max_context = 4096;
  return options;
}

std::unique_ptr<TestServer> start_server(int64_t max_waiting = 256, int64_t max_running = 64,
                                         ServerOptions server_options = test_options(),
                                         std::optional<runtime::EngineOptions> options = {}) {
  Shared* shared = shared_model();
  auto t = std::make_unique<TestServer>();
  Result<std::unique_ptr<runtime::Engine>> engine =
      runtime::Engine::create(*shared->model, options.value_or(engine_options(max_running)));
  EXPECT_TRUE(engine.ok()) << engine.status().message();
  if (!engine.ok()) return nullptr;
  t->engine = std::move(engine).value();
  t->loop = std::make_unique<EngineLoop>(*t->engine, max_waiting);
  ServerModel model;
  model.loop = t->loop.get();
  model.plan = &t->engine->plan();
  model.tokenizer = &*shared->tokenizer;
  model.chat = &*shared->chat;
  model.stop_token_ids = {int32_t(kDemoEos)};
  model.vocab_size = shared->model->config().vocab_size;
  Result<std::unique_ptr<HttpServer>> server = HttpServer::start(model, server_options);
  EXPECT_TRUE(server.ok()) << server.status().message();
  if (!server.ok()) return nullptr;
  t->server = std::move(server).value();
  t->port = t->server->port();
  EXPECT_NE(t->port, 0);
  return t;
}

/// The engine run directly (greedy): the text of each token, as the server decodes it (the stop
/// token not shown).
std::vector<std::string> reference_pieces(const std::vector<int32_t>& prompt, int64_t max_tokens) {
  Shared* shared = shared_model();
  runtime::SamplingParams params;
  params.temperature = 0;
  params.max_new_tokens = max_tokens;
  params.stop_token_ids = {int32_t(kDemoEos)};
  Result<std::vector<std::vector<int32_t>>> ids =
      runtime::generate(*shared->model, {prompt}, params, engine_options());
  EXPECT_TRUE(ids.ok()) << ids.status().message();
  if (!ids.ok()) return {};
  StreamingDecoder decoder(*shared->tokenizer);
  std::vector<std::string> pieces;
  for (int32_t id : ids.value()[0])
    if (id != kDemoEos) pieces.push_back(decoder.push(id));
  if (!pieces.empty()) pieces.back() += decoder.finish();
  return pieces;
}

std::string join(const std::vector<std::string>& pieces) {
  std::string out;
  for (const std::string& p : pieces) out += p;
  return out;
}

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (shared_model()->model == nullptr) GTEST_SKIP() << "no demo model in " << kDemoDir;
  }
};

const std::string kPrompt = "It was a bright cold morning, and";

TEST_F(ServerTest, CompletionsMatchTheEngineStreamedAndNot) {
  auto t = start_server();
  ASSERT_NE(t, nullptr);
  const std::vector<int32_t> prompt = shared_model()->tokenizer->encode(kPrompt);
  const std::string want = join(reference_pieces(prompt, 24));
  ASSERT_FALSE(want.empty());

  const json request = {{"prompt", kPrompt}, {"max_tokens", 24}, {"temperature", 0}};
  HttpResult plain = post(t->port, "/v1/completions", request);
  ASSERT_EQ(plain.status, 200) << plain.body << plain.error;
  const json body = json::parse(plain.body);
  EXPECT_EQ(body["object"], "text_completion");
  EXPECT_EQ(body["model"], "hyla-demo");
  EXPECT_TRUE(body["id"].is_string());
  EXPECT_TRUE(body["created"].is_number_integer());
  EXPECT_EQ(body["choices"][0]["text"], want);
  const int64_t completion_tokens = body["usage"]["completion_tokens"];
  EXPECT_EQ(body["usage"]["prompt_tokens"], int64_t(prompt.size()));
  EXPECT_EQ(body["usage"]["total_tokens"], int64_t(prompt.size()) + completion_tokens);
  EXPECT_EQ(body["choices"][0]["finish_reason"], completion_tokens == 24 ? "length" : "stop");

  json stream_request = request;
  stream_request["stream"] = true;
  stream_request["stream_options"] = {{"include_usage", true}};
  HttpResult streamed = post(t->port, "/v1/completions", stream_request);
  ASSERT_EQ(streamed.status, 200) << streamed.body;
  EXPECT_EQ(streamed.headers["Content-Type"], "text/event-stream");
  const Streamed s = read_stream(streamed.body, false);
  EXPECT_EQ(s.text, want);
  EXPECT_EQ(s.finish_reason, body["choices"][0]["finish_reason"]);
  EXPECT_EQ(s.usage, body["usage"]);

  // The same prompt as token ids.
  json ids_request = request;
  ids_request["prompt"] = prompt;
  HttpResult ids = post(t->port, "/v1/completions", ids_request);
  ASSERT_EQ(ids.status, 200) << ids.body;
  EXPECT_EQ(json::parse(ids.body)["choices"][0]["text"], want);
}

TEST_F(ServerTest, ChatMatchesTheEngineOnTheRenderedTemplate) {
  auto t = start_server();
  ASSERT_NE(t, nullptr);
  const json messages = json::array({{{"role", "user"}, {"content", "Tell me a story."}}});
  Result<std::string> rendered =
      render_chat(*shared_model()->chat,
                  nlohmann::ordered_json{{"messages", messages}, {"add_generation_prompt", true}});
  ASSERT_TRUE(rendered.ok()) << rendered.status().message();
  const std::vector<int32_t> prompt = shared_model()->tokenizer->encode(*rendered);
  const std::string want = join(reference_pieces(prompt, 16));

  const json request = {{"messages", messages}, {"max_completion_tokens", 16}, {"temperature", 0}};
  HttpResult plain = post(t->port, "/v1/chat/completions", request);
  ASSERT_EQ(plain.status, 200) << plain.body;
  const json body = json::parse(plain.body);
  EXPECT_EQ(body["object"], "chat.completion");
  EXPECT_EQ(body["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(body["choices"][0]["message"]["content"], want);
  EXPECT_EQ(body["usage"]["prompt_tokens"], int64_t(prompt.size()));

  json stream_request = request;
  stream_request["stream"] = true;
  HttpResult streamed = post(t->port, "/v1/chat/completions", stream_request);
  ASSERT_EQ(streamed.status, 200);
  const Streamed s = read_stream(streamed.body, true);
  EXPECT_EQ(s.text, want);
  EXPECT_EQ(s.finish_reason, body["choices"][0]["finish_reason"]);
  EXPECT_TRUE(s.usage.is_null()) << "usage without include_usage";
  // The first chunk names the role.
  const json first = json::parse(sse_payloads(streamed.body)[0]);
  EXPECT_EQ(first["choices"][0]["delta"]["role"], "assistant");
}

TEST_F(ServerTest, MaxTokensEndsWithLength) {
  auto t = start_server();
  ASSERT_NE(t, nullptr);
  // The demo model continues this prompt for more than 3 tokens (checked on the engine).
  const std::vector<int32_t> prompt = shared_model()->tokenizer->encode(kPrompt);
  ASSERT_EQ(reference_pieces(prompt, 3).size(), 3u);
  HttpResult r = post(t->port, "/v1/completions",
                      {{"prompt", kPrompt}, {"max_tokens", 3}, {"temperature", 0}});
  ASSERT_EQ(r.status, 200);
  const json body = json::parse(r.body);
  EXPECT_EQ(body["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(body["usage"]["completion_tokens"], 3);
}

TEST_F(ServerTest, StopStringCutsTheTextAlsoAcrossStreamedTokens) {
  auto t = start_server();
  ASSERT_NE(t, nullptr);
  const std::vector<int32_t> prompt = shared_model()->tokenizer->encode(kPrompt);
  const std::vector<std::string> pieces = reference_pieces(prompt, 24);
  // A stop string that spans two tokens: the end of one piece and the start of the next.
  size_t k = 1;
  while (k + 1 < pieces.size() && (pieces[k].size() < 2 || pieces[k + 1].size() < 2)) ++k;
  ASSERT_LT(k + 1, pieces.size()) << "no two consecutive pieces of 2+ bytes";
  const std::string stop = pieces[k].substr(pieces[k].size() - 2) + pieces[k + 1].substr(0, 2);
  const std::string full = join(pieces);
  ASSERT_NE(full.find(stop), std::string::npos);
  const std::string want = full.substr(0, full.find(stop));
  SCOPED_TRACE("stop string '" + stop + "'");

  const json request = {{"prompt", kPrompt},
                        {"max_tokens", 24},
                        {"temperature", 0},
                        {"stop", json::array({"zzzz-never", stop})}};
  HttpResult plain = post(t->port, "/v1/completions", request);
  ASSERT_EQ(plain.status, 200);
  const json body = json::parse(plain.body);
  EXPECT_EQ(body["choices"][0]["text"], want);
  EXPECT_EQ(body["choices"][0]["finish_reason"], "stop");

  json stream_request = request;
  stream_request["stream"] = true;
  HttpResult streamed = post(t->port, "/v1/completions", stream_request);
  ASSERT_EQ(streamed.status, 200);
  const Streamed s = read_stream(streamed.body, false);
  EXPECT_EQ(s.text, want);
  EXPECT_EQ(s.finish_reason, "stop");
  // Streamed text is never taken back, so equal text means nothing past the cut was sent: the
  // stop string's first half (the end of token k) was held until token k + 1 completed it.
  // A string stop as well as a list.
  json single = request;
  single["stop"] = stop;
  HttpResult one = post(t->port, "/v1/completions", single);
  EXPECT_EQ(json::parse(one.body)["choices"][0]["text"], want);
}

TEST_F(ServerTest, MalformedRequestsAnswer400NamingTheField) {
  auto t = start_server();
  ASSERT_NE(t, nullptr);
  struct Case {
    const char* target;
    std::string body;
    const char* param;  // nullptr: null
  };
  const std::string c = "/v1/completions", chat = "/v1/chat/completions";
  const std::vector<Case> cases = {
      {c.c_str(), "{not json", nullptr},
      {c.c_str(), "[1, 2]", nullptr},
      {c.c_str(), std::string(100, '[') + std::string(100, ']'), nullptr},
      {c.c_str(), R"({"max_tokens": 4})", "prompt"},
      {c.c_str(), R"({"prompt": 5})", "prompt"},
      {c.c_str(), R"({"prompt": [1, -2]})", "prompt"},
      {c.c_str(), R"({"prompt": [1, 99999999]})", "prompt"},
      {c.c_str(), R"({"prompt": ""})", "prompt"},
      {c.c_str(), R"({"prompt": "x", "max_tokens": -1})", "max_tokens"},
      {c.c_str(), R"({"prompt": "x", "max_tokens": 0})", "max_tokens"},
      {c.c_str(), R"({"prompt": "x", "max_tokens": 1e30})", "max_tokens"},
      {c.c_str(), R"({"prompt": "x", "max_tokens": 5000})", "max_tokens"},
      {c.c_str(), R"({"prompt": "x", "max_tokens": "7"})", "max_tokens"},
      {c.c_str(), R"({"prompt": "x", "max_tokens": 2.5})", "max_tokens"},
      {c.c_str(), R"({"prompt": "x", "temperature": -1})", "temperature"},
      {c.c_str(), R"({"prompt": "x", "temperature": "hot"})", "temperature"},
      {c.c_str(), R"({"prompt": "x", "top_p": 0})", "top_p"},
      {c.c_str(), R"({"prompt": "x", "top_p": 1.5})", "top_p"},
      {c.c_str(), R"({"prompt": "x", "top_k": -5})", "top_k"},
      {c.c_str(), R"({"prompt": "x", "seed": "s"})", "seed"},
      {c.c_str(), R"({"prompt": "x", "stop": 3})", "stop"},
      {c.c_str(), R"({"prompt": "x", "stop": ["a", 1]})", "stop"},
      {c.c_str(), R"({"prompt": "x", "stop": ["a", "b", "c", "d", "e"]})", "stop"},
      {c.c_str(), R"({"prompt": "x", "stream": "yes"})", "stream"},
      {c.c_str(), R"({"prompt": "x", "stream_options": {"include_usage": true}})",
       "stream_options"},
      {c.c_str(), R"({"prompt": "x", "stream": true, "stream_options": 1})", "stream_options"},
      {c.c_str(), R"({"prompt": "x", "stream": true, "stream_options": {"include_usage": 1}})",
       "stream_options.include_usage"},
      {c.c_str(), R"({"prompt": "x", "logprobs": 6})", "logprobs"},
      {c.c_str(), R"({"prompt": "x", "logprobs": -1})", "logprobs"},
      {c.c_str(), R"({"prompt": "x", "logprobs": true})", "logprobs"},
      {c.c_str(), R"({"prompt": "x", "logprobs": "x"})", "logprobs"},
      {c.c_str(), R"({"prompt": "x", "logprobs": 2, "top_logprobs": 2})", "top_logprobs"},
      {c.c_str(), R"({"prompt": "x", "n": 2})", "n"},
      {c.c_str(), R"({"prompt": "x", "echo": true})", "echo"},
      {c.c_str(), R"({"prompt": "x", "model": 7})", "model"},
      {chat.c_str(), R"({"prompt": "x"})", "messages"},
      {chat.c_str(), R"({"messages": []})", "messages"},
      {chat.c_str(), R"({"messages": "hi"})", "messages"},
      {chat.c_str(), R"({"messages": [3]})", "messages[0]"},
      {chat.c_str(), R"({"messages": [{"content": "hi"}]})", "messages[0].role"},
      {chat.c_str(), R"({"messages": [{"role": "user", "content": 5}]})", "messages[0].content"},
      {chat.c_str(), R"({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]})",
       "messages[0].content[0]"},
      {chat.c_str(), R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": 1})",
       "logprobs"},
      {chat.c_str(), R"({"messages": [{"role": "user", "content": "hi"}], "top_logprobs": 2})",
       "top_logprobs"},
      {chat.c_str(),
       R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": false, "top_logprobs": 2})",
       "top_logprobs"},
      {chat.c_str(),
       R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": true, "top_logprobs": 21})",
       "top_logprobs"},
      {chat.c_str(),
       R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": true, "top_logprobs": -1})",
       "top_logprobs"},
      {chat.c_str(),
       R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": true, "top_logprobs": "x"})",
       "top_logprobs"},
      {chat.c_str(),
       R"({"messages": [{"role": "user", "content": "hi"}], "logprobs": true, "top_logprobs": 2.5})",
       "top_logprobs"},
      {chat.c_str(),
       R"({"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": -3})",
       "max_completion_tokens"},
      {chat.c_str(), R"({"messages": [{"role": "user", "content": "hi"}], "tools": {}})", "tools"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(std::string(k.target) + " " + k.body.substr(0, 120));
    HttpResult r = send(t->port, http::verb::post, k.target, k.body);
    ASSERT_EQ(r.status, 400) << r.body << r.error;
    const json body = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(body.is_object()) << r.body;
    const json& error = body["error"];
    EXPECT_EQ(error["type"], "invalid_request_error");
    EXPECT_TRUE(error["message"].is_string() && !error["message"].get<std::string>().empty());
    if (k.param == nullptr)
      EXPECT_TRUE(error["param"].is_null()) << error;
    else
      EXPECT_EQ(error["param"], k.param) << error;
    EXPECT_TRUE(error.contains("code"));
  }
  // Still serving.
  EXPECT_EQ(send(t->port, http::verb::get, "/health").status, 200);
}

TEST_F(ServerTest, RoutesMethodsAndBodySize) {
  auto t = start_server();
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(send(t->port, http::verb::get, "/nope").status, 404);
  EXPECT_EQ(send(t->port, http::verb::post, "/v1").status, 404);
  HttpResult wrong = send(t->port, http::verb::get, "/v1/chat/completions");
  EXPECT_EQ(wrong.status, 405);
  EXPECT_EQ(wrong.headers["Allow"], "POST");
  EXPECT_EQ(send(t->port, http::verb::post, "/health").status, 405);
  EXPECT_EQ(send(t->port, http::verb::delete_, "/v1/models").status, 405);

  HttpResult models = send(t->port, http::verb::get, "/v1/models");
  ASSERT_EQ(models.status, 200);
  EXPECT_EQ(json::parse(models.body)["data"][0]["id"], "hyla-demo");
  EXPECT_EQ(send(t->port, http::verb::get, "/health?verbose=1").status, 200);

  // A 5 MiB body announced: refused from its header (the rest is never sent).
  net::io_context ioc;
  tcp::socket socket(ioc);
  socket.connect({net::ip::make_address("127.0.0.1"), t->port});
  const std::string head =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 5242880\r\n\r\n{\"prompt\": ";
  net::write(socket, net::buffer(head));
  beast::flat_buffer buffer;
  http::response<http::string_body> response;
  beast::error_code ec;
  http::read(socket, buffer, response, ec);
  ASSERT_FALSE(ec) << ec.message();
  EXPECT_EQ(response.result_int(), 413);
}

TEST_F(ServerTest, RootServesTheChatPage) {
  auto t = start_server();
  ASSERT_NE(t, nullptr);
  for (const char* target : {"/", "/index.html", "/?prompt=Hello"}) {
    SCOPED_TRACE(target);
    HttpResult page = send(t->port, http::verb::get, target);
    ASSERT_EQ(page.status, 200) << page.error;
    EXPECT_EQ(page.headers["Content-Type"], "text/html; charset=utf-8");
    EXPECT_EQ(page.body, std::string(chat_page_html()));
    EXPECT_EQ(page.body.rfind("<!DOCTYPE html>", 0), 0u);
    EXPECT_NE(page.body.find("/v1/chat/completions"), std::string::npos);
  }
  EXPECT_EQ(send(t->port, http::verb::post, "/").status, 405);
}

/// Opens a streaming request and reads until its first event has arrived; the socket stays open.
std::unique_ptr<tcp::socket> open_stream(net::io_context& ioc, uint16_t port, int64_t max_tokens) {
  auto socket = std::make_unique<tcp::socket>(ioc);
  socket->connect({net::ip::make_address("127.0.0.1"), port});
  const std::string body = json{
      {"prompt", kPrompt},
      {"max_tokens", max_tokens},
      {"temperature", 0.7},
      {"stream", true}}.dump();
  const std::string request =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: " + std::to_string(body.size()) +
      "\r\n\r\n" + body;
  net::write(*socket, net::buffer(request));
  return socket;
}

/// Waits (up to 20 s) for `done`.
template <typename F>
bool eventually(F done) {
  for (int i = 0; i < 2000; ++i) {
    if (done()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return false;
}

TEST_F(ServerTest, ClientGoneMidStreamFreesItsRequest) {
  auto t = start_server();
  ASSERT_NE(t, nullptr);
  const runtime::MemoryPlan& plan = t->engine->plan();
  net::io_context ioc;
  std::unique_ptr<tcp::socket> socket = open_stream(ioc, t->port, 3000);
  // Read the header and a first chunk: the request is running.
  std::string seen;
  char data[4096];
  while (seen.find("data: ") == std::string::npos) {
    beast::error_code ec;
    const size_t n = socket->read_some(net::buffer(data), ec);
    ASSERT_FALSE(ec) << ec.message();
    seen.append(data, n);
  }
  ASSERT_TRUE(eventually([&] { return t->loop->stats().running == 1; }));
  socket->close();
  EXPECT_TRUE(eventually([&] {
    const runtime::EngineStats s = t->loop->stats();
    return s.running == 0 && s.waiting == 0 && s.free_slots == plan.state_slots &&
           s.free_pages == plan.kv_pages;
  })) << "the request was not freed: running "
      << t->loop->stats().running << ", free slots " << t->loop->stats().free_slots << " of "
      << plan.state_slots;
  EXPECT_LT(t->loop->stats().tokens_generated, 3000);
}

TEST_F(ServerTest, FullQueueAnswers429WithRetryAfter) {
  // One request runs at a time, one may wait.
  auto t = start_server(/*max_waiting=*/1, /*max_running=*/1);
  ASSERT_NE(t, nullptr);
  net::io_context ioc;
  std::unique_ptr<tcp::socket> running = open_stream(ioc, t->port, 3000);
  ASSERT_TRUE(eventually([&] { return t->loop->stats().running == 1; }));
  std::unique_ptr<tcp::socket> waiting = open_stream(ioc, t->port, 3000);
  ASSERT_TRUE(eventually([&] { return t->loop->waiting() == 1; }));
  HttpResult refused = post(t->port, "/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 4}});
  EXPECT_EQ(refused.status, 429) << refused.body;
  EXPECT_EQ(refused.headers["Retry-After"], "1");
  EXPECT_TRUE(json::parse(refused.body)["error"]["message"].is_string());
  running->close();
  waiting->close();
  EXPECT_TRUE(eventually([&] {
    const runtime::EngineStats s = t->loop->stats();
    return s.running == 0 && s.waiting == 0 && t->loop->waiting() == 0;
  }));
  // Then it serves again.
  EXPECT_EQ(post(t->port, "/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 2}}).status, 200);
}

TEST_F(ServerTest, MetricsParseAsPrometheusAndCountTheRequests) {
  auto t = start_server();
  ASSERT_NE(t, nullptr);
  ASSERT_EQ(post(t->port, "/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 5}}).status, 200);
  ASSERT_EQ(
      post(t->port, "/v1/completions", {{"prompt", kPrompt}, {"max_tokens", 4}, {"stream", true}})
          .status,
      200);
  ASSERT_EQ(post(t->port, "/v1/completions", {{"prompt", 1}}).status, 400);
  ASSERT_EQ(send(t->port, http::verb::get, "/nope").status, 404);
  HttpResult metrics = send(t->port, http::verb::get, "/metrics");
  ASSERT_EQ(metrics.status, 200);
  EXPECT_EQ(metrics.headers["Content-Type"].rfind("text/plain; version=0.0.4", 0), 0u);

  // Every line: a comment (# HELP / # TYPE) or "name{labels} value".
  const std::regex sample(R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})? (-?[0-9.eE+-]+|\+Inf|NaN)$)");
  const std::regex comment(R"(^# (HELP|TYPE) [a-zA-Z_:][a-zA-Z0-9_:]* .+$)");
  std::map<std::string, double> values;
  std::istringstream lines(metrics.body);
  std::string line;
  while (std::getline(lines, line)) {
    std::smatch m;
    if (std::regex_match(line, comment)) continue;
    ASSERT_TRUE(std::regex_match(line, m, sample)) << "not Prometheus text: '" << line << "'";
    values[m[1].str() + m[2].str()] = std::stod(m[3].str());
  }
  EXPECT_EQ(values["hyla_requests_total{code=\"200\"}"], 2);
  EXPECT_EQ(values["hyla_requests_total{code=\"400\"}"], 1);
  EXPECT_EQ(values["hyla_requests_total{code=\"404\"}"], 1);
  const double prompt_tokens = double(shared_model()->tokenizer->encode(kPrompt).size());
  EXPECT_EQ(values["hyla_prompt_tokens_total"], 2 * prompt_tokens);
  EXPECT_GE(values["hyla_generation_tokens_total"], 2);
  EXPECT_LE(values["hyla_generation_tokens_total"], 9);
  EXPECT_EQ(values["hyla_time_to_first_token_seconds_count"], 2);
  EXPECT_EQ(values["hyla_time_to_first_token_seconds_bucket{le=\"+Inf\"}"], 2);
  EXPECT_EQ(values["hyla_time_per_output_token_seconds_count"],
            values["hyla_generation_tokens_total"] - 2);
  EXPECT_EQ(values["hyla_requests_running"], 0);
  EXPECT_EQ(values["hyla_requests_waiting"], 0);
  EXPECT_EQ(values["hyla_state_slots_free"], double(t->engine->plan().state_slots));
  EXPECT_EQ(values["hyla_kv_pages_free"], double(t->engine->plan().kv_pages));
}

TEST_F(ServerTest, ManyConcurrentStreamsAllComplete) {
  auto t = start_server();
  ASSERT_NE(t, nullptr);
  constexpr int kClients = 32;
  std::vector<std::thread> clients;
  std::atomic<int> complete{0};
  std::vector<std::string> failures(kClients);
  for (int i = 0; i < kClients; ++i) {
    clients.emplace_back([&, i] {
      const json request = {{"prompt", kPrompt + " " + std::to_string(i)},
                            {"max_tokens", 8 + i % 5},
                            {"temperature", 0.8},
                            {"seed", i},
                            {"stream", true},
                            {"stream_options", {{"include_usage", true}}}};
      HttpResult r = post(t->port, "/v1/completions", request);
      if (r.status != 200) {
        failures[i] = "status " + std::to_string(r.status) + " " + r.error;
        return;
      }
      if (r.body.size() < 14 || r.body.substr(r.body.size() - 14) != "data: [DONE]\n\n") {
        failures[i] = "no [DONE]";
        return;
      }
      ++complete;
    });
  }
  for (std::thread& c : clients) c.join();
  for (int i = 0; i < kClients; ++i) EXPECT_EQ(failures[i], "") << "client " << i;
  EXPECT_EQ(complete.load(), kClients);
  EXPECT_TRUE(
      eventually([&] { return t->loop->stats().free_slots == t->engine->plan().state_slots; }));
}

TEST_F(ServerTest, ASlowClientIsDroppedAndOthersAreServed) {
  ServerOptions options = test_options();
  options.read_timeout = std::chrono::milliseconds(500);
  auto t = start_server(256, 64, options);
  ASSERT_NE(t, nullptr);
  net::io_context ioc;
  tcp::socket slow(ioc);
  slow.connect({net::ip::make_address("127.0.0.1"), t->port});
  net::write(slow, net::buffer(std::string("POST /v1/completions HTTP/1.1\r\nHo")));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(send(t->port, http::verb::get, "/health").status, 200);  // not blocked by it
  char byte;
  beast::error_code ec;
  slow.read_some(net::buffer(&byte, 1), ec);  // returns when the server closes it
  EXPECT_TRUE(ec) << "the server answered a request that never finished";
  const double waited =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(waited, 5.0);
}

// ---- log-probabilities ----

/// The engine run directly (greedy) with logprobs: its events for the tokens it shows (the stop
/// token, which the server never shows, left out).
std::vector<runtime::TokenEvent> reference_logprobs(const std::vector<int32_t>& prompt,
                                                    int64_t max_tokens, int64_t top) {
  Shared* shared = shared_model();
  Result<std::unique_ptr<runtime::Engine>> engine =
      runtime::Engine::create(*shared->model, engine_options());
  EXPECT_TRUE(engine.ok()) << engine.status().message();
  if (!engine.ok()) return {};
  runtime::SamplingParams params;
  params.temperature = 0;
  params.max_new_tokens = max_tokens;
  params.stop_token_ids = {int32_t(kDemoEos)};
  params.logprobs = true;
  params.top_logprobs = top;
  Result<runtime::RequestId> id = engine.value()->add_request(prompt, params);
  EXPECT_TRUE(id.ok()) << id.status().message();
  if (!id.ok()) return {};
  std::vector<runtime::TokenEvent> out;
  for (bool done = false; !done;) {
    for (runtime::TokenEvent& e : engine.value()->step()) {
      EXPECT_NE(e.reason, runtime::FinishReason::kError) << e.error;
      if (e.token >= 0 && e.reason != runtime::FinishReason::kStopToken) out.push_back(e);
      done = done || e.finished;
    }
  }
  return out;
}

std::string bytes_of(const json& list) {
  std::string out;
  for (const json& b : list) out += char(b.get<int>());
  return out;
}

/// The chat entries of every chunk of a stream, in order.
json streamed_chat_logprobs(const std::string& body) {
  json entries = json::array();
  std::vector<std::string> payloads = sse_payloads(body);
  for (size_t i = 0; i + 1 < payloads.size(); ++i) {
    const json chunk = json::parse(payloads[i]);
    if (chunk["choices"].empty()) continue;
    const json& logprobs = chunk["choices"][0]["logprobs"];
    if (logprobs.is_null()) continue;
    EXPECT_TRUE(logprobs["refusal"].is_null());
    for (const json& e : logprobs["content"]) entries.push_back(e);
  }
  return entries;
}

TEST_F(ServerTest, ChatLogprobsAreTheEnginesStreamedAndNot) {
  auto t = start_server();
  ASSERT_NE(t, nullptr);
  const Tokenizer& tokenizer = *shared_model()->tokenizer;
  const json messages = json::array({{{"role", "user"}, {"content", "Tell me a story."}}});
  Result<std::string> rendered =
      render_chat(*shared_model()->chat,
                  nlohmann::ordered_json{{"messages", messages}, {"add_generation_prompt", true}});
  ASSERT_TRUE(rendered.ok()) << rendered.status().message();
  const std::vector<runtime::TokenEvent> want =
      reference_logprobs(tokenizer.encode(*rendered), 16, 5);
  ASSERT_FALSE(want.empty());

  const json request = {{"messages", messages},
                        {"max_completion_tokens", 16},
                        {"temperature", 0},
                        {"logprobs", true},
                        {"top_logprobs", 5}};
  HttpResult plain = post(t->port, "/v1/chat/completions", request);
  ASSERT_EQ(plain.status, 200) << plain.body;
  const json body = json::parse(plain.body);
  const json& logprobs = body["choices"][0]["logprobs"];
  ASSERT_TRUE(logprobs.is_object()) << plain.body;
  EXPECT_TRUE(logprobs["refusal"].is_null());
  const json& content = logprobs["content"];
  ASSERT_EQ(content.size(), want.size());
  std::string joined_bytes, joined_tokens;
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("token " + std::to_string(i));
    const json& e = content[i];
    const std::string bytes(tokenizer.token_bytes(want[i].token));
    EXPECT_EQ(bytes_of(e["bytes"]), bytes);
    EXPECT_EQ(e["token"], sanitize_utf8(bytes));
    ASSERT_TRUE(want[i].logprob.has_value());
    EXPECT_EQ(e["logprob"].get<double>(), *want[i].logprob);  // the same code path: exact
    // Greedy: the chosen token is the most likely one.
    ASSERT_EQ(e["top_logprobs"].size(), 5u);
    EXPECT_EQ(e["top_logprobs"][0]["logprob"], e["logprob"]);
    EXPECT_EQ(e["top_logprobs"][0]["token"], e["token"]);
    EXPECT_EQ(e["top_logprobs"][0]["bytes"], e["bytes"]);
    for (size_t k = 0; k < 5; ++k) {
      EXPECT_EQ(e["top_logprobs"][k]["logprob"].get<double>(), want[i].top_logprobs[k].logprob);
      EXPECT_EQ(bytes_of(e["top_logprobs"][k]["bytes"]),
                std::string(tokenizer.token_bytes(want[i].top_logprobs[k].token)));
      if (k > 0) {
        EXPECT_LE(e["top_logprobs"][k]["logprob"], e["top_logprobs"][k - 1]["logprob"]);
      }
    }
    joined_bytes += bytes;
    joined_tokens += e["token"].get<std::string>();
  }
  const std::string text = body["choices"][0]["message"]["content"];
  EXPECT_EQ(joined_bytes, text);
  if (is_valid_utf8(joined_bytes)) {
    EXPECT_EQ(joined_tokens, text);
  }

  json stream_request = request;
  stream_request["stream"] = true;
  HttpResult streamed = post(t->port, "/v1/chat/completions", stream_request);
  ASSERT_EQ(streamed.status, 200);
  EXPECT_EQ(read_stream(streamed.body, true).text, text);
  EXPECT_EQ(streamed_chat_logprobs(streamed.body), content);

  // logprobs without top_logprobs: no alternatives; without logprobs: null.
  json no_top = request;
  no_top.erase("top_logprobs");
  const json bare = json::parse(post(t->port, "/v1/chat/completions", no_top).body);
  ASSERT_EQ(bare["choices"][0]["logprobs"]["content"].size(), want.size());
  EXPECT_EQ(bare["choices"][0]["logprobs"]["content"][0]["top_logprobs"], json::array());
  EXPECT_EQ(bare["choices"][0]["logprobs"]["content"][0]["logprob"], content[0]["logprob"]);
  json off = request;
  off.erase("top_logprobs");
  off["logprobs"] = false;
  EXPECT_TRUE(json::parse(post(t->port, "/v1/chat/completions", off).body)["choices"][0]["logprobs"]
                  .is_null());
}

TEST_F(ServerTest, CompletionLogprobsAreTheEnginesStreamedAndNot) {
  auto t = start_server();
  ASSERT_NE(t, nullptr);
  const Tokenizer& tokenizer = *shared_model()->tokenizer;
  const std::vector<runtime::TokenEvent> want =
      reference_logprobs(tokenizer.encode(kPrompt), 24, 3);
  ASSERT_FALSE(want.empty());
  const json request = {
      {"prompt", kPrompt}, {"max_tokens", 24}, {"temperature", 0}, {"logprobs", 3}};
  HttpResult plain = post(t->port, "/v1/completions", request);
  ASSERT_EQ(plain.status, 200) << plain.body;
  const json body = json::parse(plain.body);
  const std::string text = body["choices"][0]["text"];
  const json& logprobs = body["choices"][0]["logprobs"];
  ASSERT_EQ(logprobs["tokens"].size(), want.size()) << plain.body;
  ASSERT_EQ(logprobs["token_logprobs"].size(), want.size());
  ASSERT_EQ(logprobs["top_logprobs"].size(), want.size());
  ASSERT_EQ(logprobs["text_offset"].size(), want.size());
  std::string joined;
  int64_t offset = 0;  // code points
  for (size_t i = 0; i < want.size(); ++i) {
    SCOPED_TRACE("token " + std::to_string(i));
    const std::string token = sanitize_utf8(tokenizer.token_bytes(want[i].token));
    EXPECT_EQ(logprobs["tokens"][i], token);
    EXPECT_EQ(logprobs["token_logprobs"][i].get<double>(), *want[i].logprob);
    // The 3 best and the chosen one (here the best: greedy), token text -> logprob.
    const json& top = logprobs["top_logprobs"][i];
    EXPECT_GE(top.size(), 1u);
    EXPECT_LE(top.size(), 3u);
    double best = -1e300;
    for (const auto& [key, value] : top.items()) best = std::max(best, value.get<double>());
    EXPECT_EQ(best, logprobs["token_logprobs"][i].get<double>());
    EXPECT_EQ(top[token], logprobs["token_logprobs"][i]);
    EXPECT_EQ(logprobs["text_offset"][i], offset);
    joined += token;
    for (unsigned char c : token) offset += (c & 0xC0) != 0x80;
  }
  if (is_valid_utf8(joined)) {
    EXPECT_EQ(joined, text);
  }

  json stream_request = request;
  stream_request["stream"] = true;
  HttpResult streamed = post(t->port, "/v1/completions", stream_request);
  ASSERT_EQ(streamed.status, 200);
  json merged = {{"tokens", json::array()},
                 {"token_logprobs", json::array()},
                 {"top_logprobs", json::array()},
                 {"text_offset", json::array()}};
  std::vector<std::string> payloads = sse_payloads(streamed.body);
  std::string streamed_text;
  for (size_t i = 0; i + 1 < payloads.size(); ++i) {
    const json chunk = json::parse(payloads[i]);
    streamed_text += chunk["choices"][0]["text"].get<std::string>();
    const json& l = chunk["choices"][0]["logprobs"];
    if (l.is_null()) continue;
    for (const char* key : {"tokens", "token_logprobs", "top_logprobs", "text_offset"})
      for (const json& v : l[key]) merged[key].push_back(v);
  }
  EXPECT_EQ(streamed_text, text);
  EXPECT_EQ(merged, logprobs);
}

TEST_F(ServerTest, StopStringLogprobsEndWithTheTokenTheCutPassesThrough) {
  auto t = start_server();
  ASSERT_NE(t, nullptr);
  const std::vector<int32_t> prompt = shared_model()->tokenizer->encode(kPrompt);
  const std::vector<std::string> pieces = reference_pieces(prompt, 24);
  // As in StopStringCutsTheTextAlsoAcrossStreamedTokens: the cut is 2 bytes before token k's end.
  size_t k = 1;
  while (k + 1 < pieces.size() && (pieces[k].size() < 2 || pieces[k + 1].size() < 2)) ++k;
  ASSERT_LT(k + 1, pieces.size());
  const std::string stop = pieces[k].substr(pieces[k].size() - 2) + pieces[k + 1].substr(0, 2);
  const std::string full = join(pieces);
  ASSERT_EQ(full.find(stop), join({pieces.begin(), pieces.begin() + k + 1}).size() - 2)
      << "the stop string occurs earlier";
  const json request = {
      {"prompt", kPrompt}, {"max_tokens", 24}, {"temperature", 0}, {"logprobs", 0}, {"stop", stop}};
  for (bool stream : {false, true}) {
    SCOPED_TRACE(stream ? "streamed" : "not streamed");
    json r = request;
    r["stream"] = stream;
    HttpResult response = post(t->port, "/v1/completions", r);
    ASSERT_EQ(response.status, 200);
    json tokens = json::array();
    std::string text;
    if (stream) {
      std::vector<std::string> payloads = sse_payloads(response.body);
      for (size_t i = 0; i + 1 < payloads.size(); ++i) {
        const json chunk = json::parse(payloads[i]);
        text += chunk["choices"][0]["text"].get<std::string>();
        if (!chunk["choices"][0]["logprobs"].is_null())
          for (const json& v : chunk["choices"][0]["logprobs"]["tokens"]) tokens.push_back(v);
      }
    } else {
      const json body = json::parse(response.body);
      text = body["choices"][0]["text"];
      tokens = body["choices"][0]["logprobs"]["tokens"];
    }
    EXPECT_EQ(text, full.substr(0, full.find(stop)));
    // Tokens 0..k: token k's text starts before the cut; token k + 1 starts after it.
    ASSERT_EQ(tokens.size(), k + 1);
    std::string joined;
    for (const json& token : tokens) joined += token.get<std::string>();
    EXPECT_EQ(joined, text + pieces[k].substr(pieces[k].size() - 2));
  }
}

// ---- model names and hosts ----

TEST_F(ServerTest, AModelNotServedAnswers404) {
  ServerOptions options = test_options();
  options.model_name = "my-model";
  auto t = start_server(256, 64, options);
  ASSERT_NE(t, nullptr);
  const json models = json::parse(send(t->port, http::verb::get, "/v1/models").body);
  EXPECT_EQ(models["data"][0]["id"], "my-model");
  for (const char* target : {"/v1/completions", "/v1/chat/completions"}) {
    SCOPED_TRACE(target);
    json request = {{"max_tokens", 2}};
    if (std::string(target) == "/v1/completions")
      request["prompt"] = kPrompt;
    else
      request["messages"] = json::array({{{"role", "user"}, {"content", "Hi"}}});
    request["model"] = "hyla-demo";
    HttpResult wrong = post(t->port, target, request);
    ASSERT_EQ(wrong.status, 404) << wrong.body;
    const json error = json::parse(wrong.body)["error"];
    EXPECT_EQ(error["type"], "invalid_request_error");
    EXPECT_EQ(error["code"], "model_not_found");
    EXPECT_EQ(error["param"], "model");
    const std::string message = error["message"];
    EXPECT_NE(message.find("'hyla-demo'"), std::string::npos) << message;
    EXPECT_NE(message.find("'my-model'"), std::string::npos) << message;

    request["model"] = "my-model";
    HttpResult named = post(t->port, target, request);
    ASSERT_EQ(named.status, 200) << named.body;
    EXPECT_EQ(json::parse(named.body)["model"], "my-model");
    request.erase("model");
    HttpResult absent = post(t->port, target, request);
    ASSERT_EQ(absent.status, 200) << absent.body;
    EXPECT_EQ(json::parse(absent.body)["model"], "my-model");
  }
}

/// Whether this machine can listen on ::1 at all (containers may run without IPv6).
bool ipv6_loopback_available() {
  net::io_context ioc;
  tcp::acceptor acceptor(ioc);
  beast::error_code ec;
  acceptor.open(tcp::v6(), ec);
  if (!ec) acceptor.bind({net::ip::make_address("::1"), 0}, ec);
  return !ec;
}

TEST_F(ServerTest, HostNamesAndIPv6LiteralsAreListenedOn) {
  ServerOptions options = test_options();
  options.host = "localhost";
  auto t = start_server(256, 64, options);
  ASSERT_NE(t, nullptr);
  const std::string address = t->server->address();
  EXPECT_TRUE(address == "127.0.0.1" || address == "::1") << address;
  EXPECT_EQ(send(t->port, http::verb::get, "/health", "", address).status, 200);
  t.reset();

  if (ipv6_loopback_available()) {
    for (const char* host : {"::1", "[::1]"}) {
      SCOPED_TRACE(host);
      options.host = host;
      auto v6 = start_server(256, 64, options);
      ASSERT_NE(v6, nullptr);
      EXPECT_EQ(v6->server->address(), "::1");
      EXPECT_EQ(send(v6->port, http::verb::get, "/health", "", "::1").status, 200);
    }
  } else {
    std::fprintf(stderr, "note: no IPv6 loopback here; ::1 not checked\n");
  }

  // A name that does not resolve, and an address that is not this machine's: errors naming them.
  Shared* shared = shared_model();
  Result<std::unique_ptr<runtime::Engine>> engine =
      runtime::Engine::create(*shared->model, engine_options());
  ASSERT_TRUE(engine.ok());
  EngineLoop loop(*engine.value(), 4);
  ServerModel model;
  model.loop = &loop;
  model.plan = &engine.value()->plan();
  model.tokenizer = &*shared->tokenizer;
  model.chat = &*shared->chat;
  model.vocab_size = shared->model->config().vocab_size;
  for (const char* host : {"no-such-host.invalid", "192.0.2.1", ""}) {
    SCOPED_TRACE(host);
    options.host = host;
    Result<std::unique_ptr<HttpServer>> server = HttpServer::start(model, options);
    ASSERT_FALSE(server.ok());
    EXPECT_NE(server.status().message().find(std::string("'") + host + "'"), std::string::npos)
        << server.status().message();
  }
  loop.stop();
}

// With n-gram speculation on, a greedy request gives the engine's plain text, and a request's
// 'prediction' (OpenAI's predicted outputs) feeds the drafter: predicting the text itself makes
// drafts stand (counted in /metrics). A malformed prediction answers 400 naming the field.
TEST_F(ServerTest, SpeculationWithAPredictionGivesThePlainText) {
  runtime::EngineOptions options = engine_options();
  options.speculative.drafter = runtime::SpeculativeOptions::Drafter::kNgram;
  auto t = start_server(256, 64, test_options(), options);
  ASSERT_NE(t, nullptr);
  const std::vector<int32_t> prompt = shared_model()->tokenizer->encode(kPrompt);
  const std::string want = join(reference_pieces(prompt, 40));
  ASSERT_FALSE(want.empty());
  for (const bool predicted : {false, true}) {
    SCOPED_TRACE(predicted ? "with the text as prediction" : "without a prediction");
    json request = {{"prompt", kPrompt}, {"max_tokens", 40}, {"temperature", 0}};
    if (predicted) request["prediction"] = {{"type", "content"}, {"content", want}};
    HttpResult r = post(t->port, "/v1/completions", request);
    ASSERT_EQ(r.status, 200) << r.body << r.error;
    EXPECT_EQ(json::parse(r.body)["choices"][0]["text"], want);
  }
  EXPECT_GT(t->engine->stats().spec.accepted_tokens, 0);
  const HttpResult metrics = send(t->port, http::verb::get, "/metrics");
  EXPECT_NE(metrics.body.find("hyla_spec_accepted_tokens_total"), std::string::npos);
  for (const json& bad :
       {json("text"), json({{"type", "content"}}), json({{"type", "other"}, {"content", "x"}}),
        json({{"type", "content"}, {"content", 5}}),
        json({{"type", "content"}, {"content", json::array({json(3)})}})}) {
    SCOPED_TRACE(bad.dump());
    HttpResult r = post(t->port, "/v1/completions",
                        {{"prompt", kPrompt}, {"max_tokens", 4}, {"prediction", bad}});
    EXPECT_EQ(r.status, 400) << r.body;
    EXPECT_NE(r.body.find("prediction"), std::string::npos) << r.body;
  }
}

}  // namespace
}  // namespace hyla::serve

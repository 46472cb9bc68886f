// Fuzz suite for the CLI and the tokenizer (fixed seeds). The hyla binary (HYLA_CLI) runs as a
// subprocess, with a timeout, on mutated arguments of generate / tokenize / detokenize / inspect
// (unknown flags, missing values, huge / negative / non-numeric numbers, bad paths, empty
// strings, odd UTF-8): each run must exit 0, or 1 / 2 with a message on stderr; never a signal,
// never a timeout. Then tokenizer.json files mutated from models/hyla-demo and tests/data/tokenizer
// (byte flips, truncation, deleted / retyped fields, bad regexes, huge ids and merges) load
// in-process to an error Status or a tokenizer that encodes and decodes without crashing. The
// regressions of issue 20 are cases here, with their messages.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "model/test_files.h"

#ifdef HYLA_WITH_PCRE2
#include <nlohmann/json.hpp>

#include "serve/tokenizer.h"
#endif

namespace hyla {
namespace {

namespace fs = std::filesystem;

const std::string kData = HYLA_TEST_DATA_DIR;
const std::string kModels = HYLA_MODELS_DIR;
const std::string kQwen3Next = kData + "/golden/qwen3_next";
const std::string kQwen35 = kData + "/golden/qwen3_5";
const std::string kByteLevel = kData + "/tokenizer/byte_level.json";
const std::string kDemo = kModels + "/hyla-demo";

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

struct RunResult {
  int exit_code = -1;  ///< -1 when killed by a signal or the timeout
  int signal = 0;
  bool timed_out = false;
  std::string out, err;
  double seconds = 0;
};

/// Runs HYLA_CLI with `args`, `input` on stdin, for at most `timeout_s` (then SIGKILL).
RunResult run_cli(const std::vector<std::string>& args, const std::string& input = {},
                  double timeout_s = 60) {
  static testing::TempDir dir;
  static int counter = 0;
  const std::string stem = dir.file(std::to_string(counter++));
  const std::string in_path = stem + ".in", out_path = stem + ".out", err_path = stem + ".err";
  std::ofstream(in_path, std::ios::binary) << input;
  const auto start = std::chrono::steady_clock::now();
  const pid_t pid = fork();
  if (pid == 0) {
    const int in = open(in_path.c_str(), O_RDONLY);
    const int out = open(out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const int err = open(err_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (in < 0 || out < 0 || err < 0) _exit(125);
    dup2(in, 0);
    dup2(out, 1);
    dup2(err, 2);
    std::vector<char*> argv;
    argv.push_back(const_cast<char*>(HYLA_CLI));
    for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    execv(HYLA_CLI, argv.data());
    _exit(126);
  }
  RunResult r;
  int status = 0;
  while (true) {
    const pid_t done = waitpid(pid, &status, WNOHANG);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (done == pid) break;
    if (r.seconds > timeout_s) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      r.timed_out = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  if (!r.timed_out && WIFEXITED(status)) r.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) r.signal = WTERMSIG(status);
  r.out = read_file(out_path);
  r.err = read_file(err_path);
  fs::remove(in_path);
  fs::remove(out_path);
  fs::remove(err_path);
  return r;
}

std::string show(const std::vector<std::string>& args) {
  std::string s = "hyla";
  for (const std::string& a : args)
    s += str_cat(" '", a.size() > 60 ? str_cat(a.substr(0, 60), "...") : a, "'");
  return s;
}

/// A clean end: exit 0, or 1 / 2 with a message on stderr.
::testing::AssertionResult clean(const RunResult& r) {
  if (r.timed_out) return ::testing::AssertionFailure() << "timed out after " << r.seconds << " s";
  if (r.signal != 0) return ::testing::AssertionFailure() << "killed by signal " << r.signal;
  if (r.exit_code == 0) return ::testing::AssertionSuccess();
  if ((r.exit_code == 1 || r.exit_code == 2) && !r.err.empty())
    return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "exit " << r.exit_code << ", stderr: " << r.err;
}

// ---- Regressions (issue 20), with their messages ----

TEST(CliRegression, HugeBudgetIsAClearError) {
  const std::vector<std::string> args = {"generate", "--model",      kQwen3Next,  "--prompt-ids",
                                         "1 2",      "--budget-mib", "1073741824"};
  const RunResult r = run_cli(args);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  for (const char* part : {"hyla generate: --budget-mib 1073741824: Engine: the memory plan needs ",
                           "(budget 1.0 PiB), but this machine has ", " available of "})
    EXPECT_NE(r.err.find(part), std::string::npos) << part << " not in: " << r.err;
}

TEST(CliRegression, OptionsOutOfRangeAreUsageErrors) {
  // CLI11's own range and parse messages change wording between its versions (Debian 12 ships
  // 2.3, Ubuntu 24.04 2.4): for those the message must name the option and the value; Hyla's own
  // checks are matched whole.
  struct Case {
    std::vector<std::string> args;
    std::vector<const char*> message_parts;
  };
  const Case cases[] = {
      {{"--top-k", "-1"}, {"--top-k", "-1"}},
      {{"--seed", "-1"}, {"--seed", "-1"}},
      {{"--max-new-tokens", "0"}, {"--max-new-tokens", "0"}},
      {{"--max-new-tokens", "99999999999999999999"}, {"--max-new-tokens", "99999999999999999999"}},
      {{"--budget-mib", "abc"}, {"--budget-mib", "abc"}},
      {{"--temperature", "nan"},
       {"hyla generate: --temperature is nan, expected a number in [0, 100]"}},
      {{"--top-p", "0"}, {"hyla generate: --top-p is 0, expected a number in (0, 1] (1 = off)"}},
      {{"--bogus"}, {"--bogus"}},
      {{"--threads", "0"}, {"--threads", "0"}},
      {{"--threads", "many"}, {"--threads", "many"}},
  };
  for (const Case& c : cases) {
    std::vector<std::string> args = {"generate", "--model", kQwen3Next, "--prompt-ids", "1"};
    args.insert(args.end(), c.args.begin(), c.args.end());
    SCOPED_TRACE(show(args));
    const RunResult r = run_cli(args);
    EXPECT_EQ(r.exit_code, 2) << r.err;
    for (const char* part : c.message_parts)
      EXPECT_NE(r.err.find(part), std::string::npos) << r.err;
  }
}

#ifdef HYLA_WITH_PCRE2
// 10 MB runs through `hyla tokenize --model DIR` (10M spaces aborted in PCRE2).
TEST(CliRegression, TokenizeTenMillionCharacters) {
  for (const char* unit : {" ", "\n", "\xc3\xa9"}) {  // letters, digits: tests/serve
    std::string text;
    for (int i = 0; i < 10'000'000; ++i) text += unit;
    const RunResult r = run_cli({"tokenize", "--model", kDemo}, text);
    SCOPED_TRACE(std::string("unit '") + unit + "'");
    ASSERT_TRUE(clean(r));
    EXPECT_EQ(r.exit_code, 0) << r.err;
    EXPECT_EQ(r.out.front(), '[');
    EXPECT_EQ(r.out.substr(r.out.size() - 2), "]\n");
    std::printf("[ timing   ] tokenize 10M x '%s': %.2f s (process)\n",
                unit[0] == '\n' ? "\\n" : unit, r.seconds);
  }
}

TEST(CliRegression, TokenizeTakesAModelFolder) {
  const RunResult by_model = run_cli({"tokenize", "--model", kDemo}, "Hello, world");
  const RunResult by_file =
      run_cli({"tokenize", "--tokenizer", kDemo + "/tokenizer.json"}, "Hello, world");
  EXPECT_EQ(by_model.exit_code, 0) << by_model.err;
  EXPECT_EQ(by_model.out, by_file.out);
  const RunResult none = run_cli({"tokenize"}, "x");
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find("hyla tokenize: no tokenizer: give --tokenizer FILE"), std::string::npos)
      << none.err;
  const RunResult no_file = run_cli({"tokenize", "--model", kData}, "x");
  EXPECT_EQ(no_file.exit_code, 1);
  EXPECT_NE(no_file.err.find("the folder has no tokenizer.json"), std::string::npos) << no_file.err;
}

TEST(CliRegression, GenerateReadsThePromptFromStdin) {
  const RunResult r = run_cli({"generate", "--model", kQwen35, "--tokenizer", kByteLevel,
                               "--max-new-tokens", "3", "--temperature", "0", "-"},
                              "Once upon");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.rfind("Once upon", 0), 0u) << r.out;
  EXPECT_NE(r.err.find("(prompt: 9 tokens in "), std::string::npos) << r.err;
}
#endif

TEST(CliRegression, PromptIdsFromStdinAndOneSpeedLine) {
  const RunResult r = run_cli({"generate", "--model", kQwen3Next, "--max-new-tokens", "4",
                               "--prompt-ids", "-", "--prompt-ids", "5 6"},
                              "1 2\n3\n");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2) << r.out;
  // 8 tokens: 2 from the prefill step, 6 from 3 decode steps.
  EXPECT_NE(r.err.find("8 tokens in "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("(prompt: 5 tokens in "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("; decode: 6 tokens in "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("stopped by max_tokens x2"), std::string::npos) << r.err;
}

// A prompt beyond max_position_embeddings (4096) is refused alone; the other one runs.
TEST(CliRegression, LongPromptIsRefusedAloneUnlessAllowed) {
  std::string long_ids;
  for (int i = 0; i < 4100; ++i) long_ids += std::to_string(1 + i % 400) + " ";
  const std::vector<std::string> args = {"generate", "--model",      kQwen3Next, "--max-new-tokens",
                                         "2",        "--prompt-ids", long_ids,   "--prompt-ids",
                                         "7 8 9"};
  const RunResult r = run_cli(args);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("hyla generate: prompt 1 refused: add_request: the prompt is 4100 tokens, "
                       "longer than the model's context limit of 4096 tokens"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("hyla generate: 1 of 2 prompts failed"), std::string::npos) << r.err;
  ASSERT_EQ(std::count(r.out.begin(), r.out.end(), '\n'), 2) << r.out;
  EXPECT_EQ(r.out.front(), '\n');  // the refused prompt's line is empty
  std::vector<std::string> allowed = args;
  allowed.push_back("--allow-long-context");
  const RunResult ok = run_cli(allowed);
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

// ---- Mutated arguments ----

// Values that are wrong for any numeric option, and values that are wrong as paths or prompts.
const std::vector<std::string> kBadNumbers = {
    "",           "-1",       "0",        "-0",   "abc", "1e999",
    "nan",        "inf",      "-inf",     "0x10", "1.5", "99999999999999999999",
    "1073741825", "\xff\xfe", "\xe2\x82", "1 2"};
const std::vector<std::string> kBadPaths = {"",     "/nonexistent/x",      "/dev/null", "/",
                                            "\xff", "/proc/self/mem",      kData,       kByteLevel,
                                            "-",    std::string(5000, 'a')};
const std::vector<std::string> kOddText = {"",
                                           "\xff\xfe\xfd",
                                           "\xc0\x80",
                                           "\xed\xa0\x80",
                                           "-",
                                           "--",
                                           "1 2 x",
                                           "\xe4\xb8\xad\xe6\x96\x87",
                                           "1,,2",
                                           "99999999",
                                           std::string(3000, '9')};

TEST(CliFuzz, MutatedArgumentsEndCleanly) {
  std::mt19937 rng(20);
  auto pick = [&](const std::vector<std::string>& v) { return v[rng() % v.size()]; };
  const std::vector<std::vector<std::string>> bases = {
      {"generate", "--model", kQwen3Next, "--max-new-tokens", "2", "--prompt-ids", "1 2 3"},
      {"generate", "--model", kQwen35, "--tokenizer", kByteLevel, "--max-new-tokens", "2", "Hi"},
      {"generate", "--model", kQwen3Next, "--max-new-tokens", "2", "--json", "--prompt-ids", "4",
       "--prompt-ids", "5 6"},
      {"tokenize", "--tokenizer", kByteLevel},
      {"detokenize", "--tokenizer", kByteLevel},
      {"inspect", kQwen3Next},
  };
  const std::vector<std::string> numeric = {"--max-new-tokens", "--temperature", "--top-k",
                                            "--top-p",          "--seed",        "--budget-mib"};
  const std::vector<std::string> inputs = {"",        "Hello",  "[1, 2, 3]",
                                           "[-1]",    "[1e99]", "\xff\xfe",
                                           "[\"a\"]", "{",      std::string(20000, ' ')};
  int cases = 0;
  for (int trial = 0; trial < 240; ++trial) {
    std::vector<std::string> args = bases[size_t(trial) % bases.size()];
    const int kind = int(rng() % 7);
    if (kind == 0 && args[0] == "generate") {  // a numeric option with a bad value
      args.insert(args.begin() + 1, {pick(numeric), pick(kBadNumbers)});
    } else if (kind == 1) {  // a path replaced
      for (size_t i = 1; i < args.size(); ++i)
        if (args[i].find('/') != std::string::npos) {
          args[i] = pick(kBadPaths);
          break;
        }
    } else if (kind == 2) {  // a value dropped (the option takes the next word, or nothing)
      args.erase(args.begin() + long(1 + rng() % (args.size() - 1)));
    } else if (kind == 3) {  // an unknown flag or a stray word
      args.insert(args.begin() + long(1 + rng() % args.size()),
                  pick({"--nope", "-x", "--", "---", "--model=", "--prompt-ids", "\xff"}));
    } else if (kind == 4) {  // a prompt replaced
      args.back() = pick(kOddText);
    } else if (kind == 5 && args[0] == "generate") {  // a valid value that stays small
      args.insert(args.begin() + 1,
                  {pick({"--seed", "--top-k", "--temperature"}), pick({"0", "1", "7", "0.5"})});
    } else {  // the arguments shuffled
      std::shuffle(args.begin() + 1, args.end(), rng);
    }
    SCOPED_TRACE(show(args));
    const RunResult r = run_cli(args, pick(inputs), 60);
    EXPECT_TRUE(clean(r));
    ++cases;
  }
  std::printf("[ cases    ] %d argument mutations\n", cases);
}

#ifdef HYLA_WITH_PCRE2
// ---- Mutated tokenizer.json, in process ----

using Json = nlohmann::json;

/// A random node of `j` (the root included), reached by a random walk.
Json* random_node(Json& j, std::mt19937& rng, Json** parent, std::string* key, size_t* index) {
  Json* node = &j;
  *parent = nullptr;
  for (int depth = 0; depth < 6 && (node->is_object() || node->is_array()) && !node->empty();
       ++depth) {
    if (rng() % 4 == 0 && depth > 0) break;
    *parent = node;
    const size_t k = rng() % node->size();
    if (node->is_object()) {
      auto it = node->begin();
      std::advance(it, long(k));
      *key = it.key();
      node = &it.value();
    } else {
      *index = k;
      node = &(*node)[k];
    }
  }
  return node;
}

std::string mutate(const std::string& text, const Json& parsed, std::mt19937& rng) {
  switch (rng() % 8) {
    case 0: {  // byte flips
      std::string s = text;
      for (int k = 0, n = 1 + int(rng() % 8); k < n; ++k) s[rng() % s.size()] = char(rng());
      return s;
    }
    case 1:  // truncation
      return text.substr(0, rng() % text.size());
    default: break;
  }
  Json j = parsed;
  Json* parent = nullptr;
  std::string key;
  size_t index = 0;
  Json* node = random_node(j, rng, &parent, &key, &index);
  const std::vector<Json> retypes = {
      nullptr, true, -1,     2147483647,    4294967296LL,   1e300,
      0.5,     "",   "\xff", Json::array(), Json::object(), Json::array({1, "a", nullptr})};
  const std::vector<std::string> regexes = {"(",        "[",         "\\",       "(?<", "a{99999}",
                                            "(a|aa)+$", "\\p{Xx}",   "(?R)",     "",    "(?=)",
                                            "\\K",      "(*ACCEPT)", "(?<=\\s)", "x*",  "(?:)*"};
  switch (rng() % 6) {
    case 0:  // delete a field
      if (parent != nullptr && parent->is_object()) parent->erase(key);
      if (parent != nullptr && parent->is_array()) parent->erase(index);
      break;
    case 1:  // retype a field
      *node = retypes[rng() % retypes.size()];
      break;
    case 2: {  // a bad regex in every Split
      const std::string regex = regexes[rng() % regexes.size()];
      Json& pre = j["pre_tokenizer"];
      if (pre.is_object() && pre.contains("pretokenizers") && pre["pretokenizers"].is_array())
        for (Json& p : pre["pretokenizers"])
          if (p.is_object() && p.contains("pattern")) p["pattern"] = {{"Regex", regex}};
      break;
    }
    case 3: {  // huge or odd vocab ids
      Json& vocab = j["model"]["vocab"];
      if (vocab.is_object() && !vocab.empty()) {
        auto it = vocab.begin();
        std::advance(it, long(rng() % vocab.size()));
        it.value() = retypes[rng() % retypes.size()];
      }
      break;
    }
    case 4: {  // many merges, some of unknown tokens
      Json& merges = j["model"]["merges"];
      if (!merges.is_array()) break;
      for (int k = 0; k < 20000; ++k) merges.push_back(rng() % 3 == 0 ? "zz qq" : "a b");
      break;
    }
    default:  // an added token that overlaps others, or with an odd id
      j["added_tokens"].push_back(
          {{"id", retypes[rng() % 5]}, {"content", rng() % 2 ? "<" : "\xe4\xb8"}});
      break;
  }
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

TEST(TokenizerFuzz, MutatedFilesLoadOrFailCleanly) {
  std::mt19937 rng(2020);
  const std::vector<std::string> sources = {kDemo + "/tokenizer.json", kByteLevel};
  const std::vector<std::string> texts = {"Hello, world! 123", std::string(100000, ' '),
                                          "\xff\xfe<|endoftext|>\xe4\xb8\xad",
                                          std::string(5000, '7') + "\n\n\n\t x"};
  int loaded = 0, refused = 0;
  for (const std::string& source : sources) {
    const std::string text = read_file(source);
    ASSERT_FALSE(text.empty()) << source;
    const Json parsed = Json::parse(text);
    for (int trial = 0; trial < 150; ++trial) {
      const std::string mutated = mutate(text, parsed, rng);
      SCOPED_TRACE(source + " trial " + std::to_string(trial));
      Result<serve::Tokenizer> t = serve::Tokenizer::from_json(mutated, "mutated");
      if (!t.ok()) {
        EXPECT_EQ(t.status().message().rfind("tokenizer mutated: ", 0), 0u) << t.status().message();
        ++refused;
        continue;
      }
      ++loaded;
      for (const std::string& input : texts) {
        Result<std::vector<int32_t>> ids = t->try_encode(input);
        if (!ids.ok()) {
          EXPECT_FALSE(ids.status().message().empty());
          continue;
        }
        serve::StreamingDecoder stream(*t);
        std::string streamed;
        for (int32_t id : ids.value()) streamed += stream.push(id);
        streamed += stream.finish();
        EXPECT_EQ(streamed, t->decode(ids.value()));
      }
    }
  }
  std::printf("[ cases    ] %d mutated tokenizer.json: %d loaded, %d refused\n", loaded + refused,
              loaded, refused);
  EXPECT_GT(loaded, 0);
  EXPECT_GT(refused, 0);
}
#endif

}  // namespace
}  // namespace hyla

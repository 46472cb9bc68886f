// Tokenizer tests. Unit tests on a tiny hand-written tokenizer.json (merges, added tokens, the
// byte-level alphabet's unusual bytes, invalid UTF-8, NFC, errors, streaming), then the reference
// test: Qwen3's tokenizer.json against @huggingface/tokenizers (JS) on the Brown corpus and a
// Unicode stress text, read from $HYLA_TOKENIZER_REF (tools/tokenizer_reference.sh writes it).
#include "serve/tokenizer.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace hyla::serve {
namespace {

using Json = nlohmann::json;

// The GPT-2 byte-level spelling of one byte (the test's own twin of the mapping).
std::string byte_char(int b) {
  int next = 256, cp = -1;
  for (int c = 0; c < 256 && cp < 0; ++c) {
    const bool printable = (c >= 33 && c <= 126) || (c >= 161 && c <= 172) || c >= 174;
    if (c == b) cp = printable ? c : next;
    if (!printable) ++next;
  }
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}
std::string spell(std::string_view bytes) {
  std::string out;
  for (char c : bytes) out += byte_char(static_cast<unsigned char>(c));
  return out;
}

constexpr const char* kQwenPattern =
    R"((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)";

// ids 0..255: the bytes; 256.. the merged tokens below; 300.. added tokens.
Json tiny_tokenizer_json() {
  Json vocab = Json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
  const std::vector<std::pair<std::string, std::string>> merges = {
      {"h", "e"}, {"l", "l"}, {"he", "ll"}, {"a", "a"}, {"o", spell(" ")}, {spell(" "), "w"}};
  Json merge_list = Json::array();
  int32_t id = 256;
  for (const auto& [left, right] : merges) {
    vocab[left + right] = id++;
    merge_list.push_back(left + " " + right);
  }
  Json j;
  j["model"] = {{"type", "BPE"}, {"vocab", vocab}, {"merges", merge_list}};
  j["added_tokens"] = Json::array({{{"id", 300}, {"content", "<a>"}, {"special", true}},
                                   {{"id", 301}, {"content", "<a><b>"}, {"special", true}}});
  j["normalizer"] = {{"type", "NFC"}};
  j["pre_tokenizer"] = {
      {"type", "Sequence"},
      {"pretokenizers",
       Json::array({{{"type", "Split"},
                     {"pattern", {{"Regex", kQwenPattern}}},
                     {"behavior", "Isolated"},
                     {"invert", false}},
                    {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"use_regex", false}}})}};
  j["decoder"] = {{"type", "ByteLevel"}};
  j["post_processor"] = nullptr;
  return j;
}

Tokenizer tiny() {
  Result<Tokenizer> t = Tokenizer::from_json(tiny_tokenizer_json().dump(), "tiny");
  HYLA_CHECK(t.ok(), t.status().message());
  return std::move(t).value();
}

std::vector<int32_t> bytes_of(std::string_view s) {
  std::vector<int32_t> ids;
  for (char c : s) ids.push_back(static_cast<unsigned char>(c));
  return ids;
}

TEST(Tokenizer, MergesByRankThenLeftmost) {
  const Tokenizer t = tiny();
  // h e l l o: "h e" (rank 0) and "l l" (rank 1), then "he ll" (rank 2) -> [hell, o]
  EXPECT_EQ(t.encode("hello"), (std::vector<int32_t>{258, 'o'}));
  // a a a: the leftmost pair merges first -> [aa, a]; four a -> [aa, aa]
  EXPECT_EQ(t.encode("aaa"), (std::vector<int32_t>{259, 'a'}));
  EXPECT_EQ(t.encode("aaaa"), (std::vector<int32_t>{259, 259}));
}

TEST(Tokenizer, PreTokenizerSplitsBeforeMerging) {
  const Tokenizer t = tiny();
  // "o w" splits into "o", " w": the "oĠ" merge (260) never applies across pieces, "Ġw" (261) does.
  EXPECT_EQ(t.encode("o w"), (std::vector<int32_t>{'o', 261}));
  EXPECT_EQ(t.decode(t.encode("o w")), "o w");
}

TEST(Tokenizer, AddedTokensLongestFirst) {
  const Tokenizer t = tiny();
  EXPECT_EQ(t.encode("x<a><b>y<a>"), (std::vector<int32_t>{'x', 301, 'y', 300}));
  EXPECT_EQ(t.encode("<a<a>>"), (std::vector<int32_t>{'<', 'a', 300, '>'}));
  EXPECT_EQ(t.decode(std::vector<int32_t>{301, 'z', 300}), "<a><b>z<a>");
  EXPECT_EQ(t.token_id("<a><b>"), 301);
  EXPECT_EQ(t.token_id(spell(" ") + "w"), 261);
  EXPECT_EQ(t.token_id("nope"), std::nullopt);
  EXPECT_EQ(t.vocab_size(), 302);
}

TEST(Tokenizer, UnusualBytesRoundTrip) {
  const Tokenizer t = tiny();
  // control bytes, DEL, U+00A0 (C2 A0) and U+00AD (C2 AD): bytes the alphabet maps to U+0100..
  const std::string text =
      std::string("\x01\x1f\x7f", 3) + "\xc2\xa0\xc2\xad" + std::string(1, '\0');
  EXPECT_EQ(t.encode(text), bytes_of(text));
  EXPECT_EQ(t.decode(t.encode(text)), text);
}

TEST(Tokenizer, InvalidUtf8BecomesReplacementCharacter) {
  const Tokenizer t = tiny();
  // FF: invalid byte; E2 82: a truncated sequence (one U+FFFD); ED A0 80: a surrogate (three).
  const std::string bad =
      "a\xff"
      "b\xe2\x82"
      "c\xed\xa0\x80";
  const std::string fffd = "\xef\xbf\xbd";
  const std::string want = "a" + fffd + "b" + fffd + "c" + fffd + fffd + fffd;
  EXPECT_EQ(sanitize_utf8(bad), want);
  EXPECT_FALSE(is_valid_utf8(bad));
  EXPECT_TRUE(is_valid_utf8(want));
  EXPECT_EQ(t.encode(bad), t.encode(want));
  EXPECT_EQ(t.decode(t.encode(bad)), want);
}

TEST(Tokenizer, NfcNormalizes) {
  const Tokenizer t = tiny();
  EXPECT_EQ(t.encode("e\xcc\x81"), t.encode("\xc3\xa9"));  // e + U+0301 -> U+00E9
  EXPECT_EQ(t.decode(t.encode("e\xcc\x81")), "\xc3\xa9");
}

TEST(Tokenizer, UnsupportedConstructsNameTheirPath) {
  struct Case {
    const char* name;
    Json (*edit)(Json);
    const char* path;
  };
  const Case cases[] = {
      {"nfkd",
       [](Json j) {
         j["normalizer"] = {{"type", "NFKD"}};
         return j;
       },
       "normalizer.type"},
      {"unigram",
       [](Json j) {
         j["model"]["type"] = "Unigram";
         return j;
       },
       "model.type"},
      {"merge",
       [](Json j) {
         j["model"]["merges"].push_back("q zz");
         return j;
       },
       "model.merges[6]"},
      {"behavior",
       [](Json j) {
         j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Removed";
         return j;
       },
       "pre_tokenizer.pretokenizers[0].behavior"},
      {"decoder",
       [](Json j) {
         j["decoder"] = {{"type", "WordPiece"}};
         return j;
       },
       "decoder.type"},
      {"lstrip",
       [](Json j) {
         j["added_tokens"][0]["lstrip"] = true;
         return j;
       },
       "added_tokens[0].lstrip"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Result<Tokenizer> t = Tokenizer::from_json(c.edit(tiny_tokenizer_json()).dump(), "tiny");
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.status().message().find(c.path), std::string::npos) << t.status().message();
  }
  EXPECT_FALSE(Tokenizer::load("/nonexistent/tokenizer.json").ok());
  EXPECT_FALSE(Tokenizer::from_json("{not json", "bad").ok());
}

// ---- Robustness: long runs, PCRE2 limits, malformed JSON ----

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// 10 MB runs of one character: one pre-tokenizer piece each (digits: one per digit), which
// PCRE2's default match limit would refuse (10M spaces: Qwen's `\s*[\r\n]+` walks the run
// before `\s+(?!\S)` matches it) and BPE must merge in time linear in the run.
TEST(TokenizerRobustness, TenMillionCharacterRuns) {
  const Tokenizer t = tiny();
  constexpr size_t kRun = 10'000'000;
  struct Case {
    const char* name;
    std::string unit;
    std::vector<int32_t> unit_ids;  // the ids of two units (aa merges to 259)
  };
  const std::string e_acute = "\xc3\xa9", han = "\xe4\xb8\xad";  // U+00E9, U+4E2D
  const Case cases[] = {
      {"spaces", " ", {' ', ' '}},
      {"letters", "a", {259}},
      {"newlines", "\n", {'\n', '\n'}},
      {"digits", "7", {'7', '7'}},
      {"tabs", "\t", {'\t', '\t'}},
      {"e-acute (2 bytes)", e_acute, {0xc3, 0xa9, 0xc3, 0xa9}},
      {"han (3 bytes)", han, {0xe4, 0xb8, 0xad, 0xe4, 0xb8, 0xad}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::string text;
    text.reserve(kRun * c.unit.size());
    for (size_t i = 0; i < kRun; ++i) text += c.unit;
    const auto start = std::chrono::steady_clock::now();
    Result<std::vector<int32_t>> ids = t.try_encode(text);
    const double seconds = seconds_since(start);
    ASSERT_TRUE(ids.ok()) << ids.status().message();
    std::vector<int32_t> want;
    want.reserve(ids->size());
    for (size_t i = 0; i < kRun / 2; ++i)
      want.insert(want.end(), c.unit_ids.begin(), c.unit_ids.end());
    EXPECT_TRUE(ids.value() == want) << "got " << ids->size() << " ids, want " << want.size();
    std::printf("[ timing   ] %s x %zu: %.2f s\n", c.name, kRun, seconds);
    EXPECT_LT(seconds, 20.0) << "a run must encode in time linear in its length";
  }
}

// A space run before a word: the run splits as HF's pattern does (all but the last space, then
// " word"), and a run of spaces ending in newlines is one piece.
TEST(TokenizerRobustness, LongRunsSplitLikeTheShortOnes) {
  const Tokenizer t = tiny();
  for (size_t n : {size_t{1}, size_t{300}, size_t{100'000}}) {
    SCOPED_TRACE(n);
    const std::string spaces(n, ' ');
    std::vector<int32_t> want(n - 1, ' ');
    want.push_back(261);  // "Ġw"
    EXPECT_EQ(t.encode(spaces + "w"), want);
    EXPECT_EQ(t.encode(spaces + "\n\n"), bytes_of(spaces + "\n\n"));
  }
}

// The scalar twin of BPE: merge the lowest-rank, leftmost pair until none has a merge, O(n^2).
std::vector<int32_t> naive_bpe(
    std::vector<int32_t> ids,
    const std::map<std::pair<int32_t, int32_t>, std::pair<int, int32_t>>& merges) {
  while (true) {
    int best_rank = INT32_MAX;
    size_t best = 0;
    for (size_t i = 0; i + 1 < ids.size(); ++i) {
      const auto it = merges.find({ids[i], ids[i + 1]});
      if (it != merges.end() && it->second.first < best_rank) {
        best_rank = it->second.first;
        best = i;
      }
    }
    if (best_rank == INT32_MAX) return ids;
    ids[best] = merges.at({ids[best], ids[best + 1]}).second;
    ids.erase(ids.begin() + long(best) + 1);
  }
}

// Random merge lists over "abc" (some out of training order: a merge that uses a token made by a
// later one), on words short (heap) and long (rank buckets): the same ids as the scalar twin.
TEST(TokenizerRobustness, BpeMatchesTheScalarTwinOnRandomMerges) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 12; ++trial) {
    SCOPED_TRACE("trial " + std::to_string(trial));
    Json j = tiny_tokenizer_json();
    Json vocab = Json::object();
    for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
    std::vector<std::string> tokens = {"a", "b", "c"};
    std::vector<std::pair<std::string, std::string>> merges;
    for (int k = 0; k < 14; ++k) {
      const std::string l = tokens[rng() % tokens.size()], r = tokens[rng() % tokens.size()];
      if (l.size() + r.size() > 6 || vocab.contains(l + r)) continue;
      vocab[l + r] = int32_t(vocab.size());
      tokens.push_back(l + r);
      merges.emplace_back(l, r);
    }
    std::shuffle(merges.begin(), merges.end(), rng);  // ranks out of training order too
    Json merge_list = Json::array();
    std::map<std::pair<int32_t, int32_t>, std::pair<int, int32_t>> by_pair;
    for (size_t r = 0; r < merges.size(); ++r) {
      merge_list.push_back(merges[r].first + " " + merges[r].second);
      by_pair.emplace(
          std::make_pair(vocab[merges[r].first].get<int32_t>(),
                         vocab[merges[r].second].get<int32_t>()),
          std::make_pair(int(r), vocab[merges[r].first + merges[r].second].get<int32_t>()));
    }
    j["model"]["vocab"] = vocab;
    j["model"]["merges"] = merge_list;
    j["added_tokens"] = Json::array();
    Result<Tokenizer> t = Tokenizer::from_json(j.dump(), "random merges");
    ASSERT_TRUE(t.ok()) << t.status().message();
    for (size_t length : {size_t{7}, size_t{40}, size_t{255}, size_t{256}, size_t{3000}}) {
      std::string word;
      for (size_t i = 0; i < length; ++i) word += char('a' + rng() % 3);
      EXPECT_EQ(t->encode(word), naive_bpe(bytes_of(word), by_pair)) << word.substr(0, 60);
    }
  }
}

// A custom pattern that backtracks exponentially stops at PCRE2's match limit with an error that
// names the pattern; it never aborts.
TEST(TokenizerRobustness, RegexLimitsAreErrors) {
  Json j = tiny_tokenizer_json();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(a|aa)+$";
  Result<Tokenizer> t = Tokenizer::from_json(j.dump(), "backtracking");
  ASSERT_TRUE(t.ok()) << t.status().message();
  const Result<std::vector<int32_t>> ids = t->try_encode(std::string(200, 'a') + "b");
  EXPECT_FALSE(ids.ok());
  for (const char* part : {"pre_tokenizer.pretokenizers[0].pattern", "PCRE2 error", "match limit",
                           "failed at byte 0 of a 201-byte piece"})
    EXPECT_NE(ids.status().message().find(part), std::string::npos)
        << part << " not in: " << ids.status().message();
  // The same tokenizer on text the pattern handles quickly.
  EXPECT_TRUE(t->try_encode("hello").ok());
}

// Patterns that match the empty string (anywhere, at the end, as a lookahead) split nothing off:
// the text is one piece, and the scan steps over characters without reading past the end.
TEST(TokenizerRobustness, EmptyMatchesSplitNothing) {
  for (const char* regex : {"x*", "$", "(?=b)", "\\b"}) {
    SCOPED_TRACE(regex);
    Json j = tiny_tokenizer_json();
    j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = regex;
    Result<Tokenizer> t = Tokenizer::from_json(j.dump(), "empty");
    ASSERT_TRUE(t.ok()) << t.status().message();
    // "hello" merges across the whole piece; "\xe4\xb8\xad" is stepped over as one character.
    EXPECT_EQ(t->encode("hello\xe4\xb8\xad"), (std::vector<int32_t>{258, 'o', 0xe4, 0xb8, 0xad}));
  }
}

// Malformed tokenizer.json: wrong types and ids beyond the table give errors naming the field.
TEST(TokenizerRobustness, MalformedFieldsNameTheirPath) {
  struct Case {
    const char* name;
    std::function<void(Json&)> edit;
    const char* message;
  };
  const Case cases[] = {
      {"dropout string", [](Json& j) { j["model"]["dropout"] = "x"; },
       "model.dropout: BPE dropout is not supported (got \"x\")"},
      {"byte_fallback string", [](Json& j) { j["model"]["byte_fallback"] = "yes"; },
       "model.byte_fallback: expected true or false, got \"yes\""},
      {"model type number", [](Json& j) { j["model"]["type"] = 3; },
       "model.type: expected a string, got 3"},
      {"huge vocab id", [](Json& j) { j["model"]["vocab"]["zz"] = 2147483647; },
       "model.vocab[\"zz\"]: expected an id in [0, "},
      {"negative added id", [](Json& j) { j["added_tokens"][0]["id"] = -1; },
       "added_tokens[0].id: expected an id in [0, "},
      {"huge added id", [](Json& j) { j["added_tokens"][1]["id"] = 4000000000LL; },
       "added_tokens[1].id: expected an id in [0, "},
      {"lstrip string", [](Json& j) { j["added_tokens"][0]["lstrip"] = "no"; },
       "added_tokens[0].lstrip: expected true or false"},
      {"invert number", [](Json& j) { j["pre_tokenizer"]["pretokenizers"][0]["invert"] = 1; },
       "pre_tokenizer.pretokenizers[0].invert: expected true or false, got 1"},
      {"behavior number", [](Json& j) { j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = 2; },
       "pre_tokenizer.pretokenizers[0].behavior: expected a string, got 2"},
      {"regex number",
       [](Json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = 5; },
       "pre_tokenizer.pretokenizers[0].pattern: expected {\"Regex\": \"...\"}"},
      {"bad regex",
       [](Json& j) { j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(a"; },
       "pre_tokenizer.pretokenizers[0].pattern: regex does not compile at offset 2"},
      {"use_regex string",
       [](Json& j) { j["pre_tokenizer"]["pretokenizers"][1]["use_regex"] = "false"; },
       "pre_tokenizer.pretokenizers[1].use_regex: expected true or false"},
      {"merge of numbers",
       [](Json& j) {
         j["model"]["merges"][0] = Json::array({1, 2});
       },
       "model.merges[0]: expected \"a b\" or [\"a\", \"b\"]"},
      {"deep sequence",
       [](Json& j) {
         Json n = {{"type", "NFC"}};
         for (int d = 0; d < 20; ++d) n = {{"type", "Sequence"}, {"normalizers", Json::array({n})}};
         j["normalizer"] = n;
       },
       "Sequences nested more than 8 deep"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Json j = tiny_tokenizer_json();
    c.edit(j);
    Result<Tokenizer> t = Tokenizer::from_json(j.dump(), "tiny");
    ASSERT_FALSE(t.ok());
    EXPECT_NE(t.status().message().find(c.message), std::string::npos) << t.status().message();
    EXPECT_EQ(t.status().message().rfind("tokenizer tiny: ", 0), 0u) << t.status().message();
  }
}

// Feeds ids one at a time: every chunk is valid UTF-8 and the chunks add up to decode(ids).
::testing::AssertionResult streams_like_decode(const Tokenizer& t,
                                               const std::vector<int32_t>& ids) {
  StreamingDecoder stream(t);
  std::string joined;
  for (size_t i = 0; i < ids.size(); ++i) {
    const std::string chunk = stream.push(ids[i]);
    if (!is_valid_utf8(chunk))
      return ::testing::AssertionFailure() << "chunk after id #" << i << " is not valid UTF-8";
    joined += chunk;
  }
  joined += stream.finish();
  if (joined != t.decode(ids))
    return ::testing::AssertionFailure() << "streamed text differs from decode()";
  return ::testing::AssertionSuccess();
}

TEST(StreamingDecoder, HoldsBackIncompleteSequences) {
  const Tokenizer t = tiny();
  // 你 (E4 BD A0), 😀 (F0 9F 98 80), ZWJ sequence: every byte is its own token here.
  const std::string text =
      "a\xe4\xbd\xa0\xf0\x9f\x98\x80\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x92\xbb";
  const std::vector<int32_t> ids = t.encode(text);
  ASSERT_EQ(ids.size(), text.size());
  StreamingDecoder stream(t);
  EXPECT_EQ(stream.push(ids[0]), "a");
  EXPECT_EQ(stream.push(ids[1]), "");
  EXPECT_EQ(stream.push(ids[2]), "");
  EXPECT_EQ(stream.push(ids[3]), "\xe4\xbd\xa0");
  EXPECT_TRUE(streams_like_decode(t, ids));
  // A stream cut inside a sequence: finish() gives U+FFFD, as decode() does.
  StreamingDecoder cut(t);
  EXPECT_EQ(cut.push(0xf0) + cut.push(0x9f) + cut.finish(), "\xef\xbf\xbd");
}

TEST(StreamingDecoder, RandomBytesMatchDecode) {
  const Tokenizer t = tiny();
  std::mt19937 rng(7);
  // Biased to lead/continuation bytes so that sequences are valid, truncated and invalid alike.
  std::uniform_int_distribution<int> pick(0, 5), any(0, 301), cont(0x80, 0xBF), lead(0xC0, 0xF7);
  for (int trial = 0; trial < 200; ++trial) {
    std::vector<int32_t> ids(1 + trial % 40);
    for (int32_t& id : ids) {
      const int kind = pick(rng);
      id = kind <= 2 ? cont(rng) : kind == 3 ? lead(rng) : any(rng);
    }
    ASSERT_TRUE(streams_like_decode(t, ids)) << "trial " << trial;
  }
}

// ---- Against the JS reference ----

std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::ostringstream s;
  s << f.rdbuf();
  return s.str();
}

// The first mismatch with a few ids of context, or success.
::testing::AssertionResult same_ids(const std::vector<int32_t>& got,
                                    const std::vector<int32_t>& want, const Tokenizer& t) {
  size_t i = 0;
  while (i < got.size() && i < want.size() && got[i] == want[i]) ++i;
  if (i == got.size() && i == want.size()) return ::testing::AssertionSuccess();
  auto show = [&](const std::vector<int32_t>& ids) {
    std::ostringstream os;
    for (size_t k = i >= 3 ? i - 3 : 0; k < std::min(ids.size(), i + 5); ++k)
      os << ids[k] << "(" << Json(t.decode(std::vector<int32_t>{ids[k]})).dump() << ") ";
    return os.str();
  };
  return ::testing::AssertionFailure()
         << "first mismatch at id #" << i << " of " << got.size() << " (reference " << want.size()
         << ")\n  got:  " << show(got) << "\n  want: " << show(want);
}

class TokenizerReference : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* dir = std::getenv("HYLA_TOKENIZER_REF");
    if (dir == nullptr || *dir == '\0')
      GTEST_SKIP() << "HYLA_TOKENIZER_REF is not set: run tools/tokenizer_reference.sh DIR and "
                      "export HYLA_TOKENIZER_REF=DIR to compare with @huggingface/tokenizers";
    dir_ = dir;
    Result<Tokenizer> t = Tokenizer::load(dir_ + "/tokenizer.json");
    ASSERT_TRUE(t.ok()) << t.status().message();
    tokenizer_.emplace(std::move(t).value());
  }

  // Compares ids with <name>.ids.json and the round trip with <name>.roundtrip.txt.
  void check_text(const std::string& name) {
    const std::string text = read_file(dir_ + "/" + name + ".txt");
    ASSERT_FALSE(text.empty()) << dir_ << "/" << name << ".txt";
    const Json reference = Json::parse(read_file(dir_ + "/" + name + ".ids.json"));
    const auto want = reference.get<std::vector<int32_t>>();
    const auto start = std::chrono::steady_clock::now();
    const std::vector<int32_t> got = tokenizer_->encode(text);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    EXPECT_TRUE(same_ids(got, want, *tokenizer_)) << name;
    const std::string round_trip = tokenizer_->decode(got);
    EXPECT_TRUE(round_trip == read_file(dir_ + "/" + name + ".roundtrip.txt"))
        << name << ": decode(encode(x)) differs from NFC(sanitized x)";
    if (is_valid_utf8(text) && round_trip != text)
      std::printf("[ note     ] %s: valid UTF-8 but not NFC: decode(encode(x)) == NFC(x)\n",
                  name.c_str());
    EXPECT_TRUE(streams_like_decode(*tokenizer_, got)) << name;
    std::printf("[ compared ] %s: %zu bytes, %zu ids (reference %zu); C++ encode %.2f MB/s\n",
                name.c_str(), text.size(), got.size(), want.size(),
                static_cast<double>(text.size()) / seconds / 1e6);
  }

  std::string dir_;
  std::optional<Tokenizer> tokenizer_;
};

TEST_F(TokenizerReference, BrownCorpusMatchesJs) {
  check_text("brown");
  const std::string speed = read_file(dir_ + "/js_speed.json");
  if (!speed.empty()) std::printf("[ js       ] %s\n", speed.c_str());
}

TEST_F(TokenizerReference, UnicodeStressMatchesJs) { check_text("stress"); }

TEST_F(TokenizerReference, SpecialTokensAndVocab) {
  EXPECT_EQ(tokenizer_->vocab_size(), 151669);
  EXPECT_EQ(tokenizer_->token_id("<|im_end|>"), 151645);
  EXPECT_EQ(tokenizer_->encode("<|im_start|>user"), (std::vector<int32_t>{151644, 872}));
}

}  // namespace
}  // namespace hyla::serve

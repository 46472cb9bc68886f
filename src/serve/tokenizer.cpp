// Tokenizer: tokenizer.json loading and byte-level BPE encode/decode (see tokenizer.h).
// Reference: HF tokenizers' tokenizer.json format (model BPE, normalizers, pre_tokenizers Split /
// ByteLevel, decoders ByteLevel, added_tokens). The vocab is stored as raw bytes: the GPT-2
// byte-to-unicode mapping is undone once at load, so encode works on bytes and needs no mapping.
#include "serve/tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <nlohmann/json.hpp>
#include <pcre2.h>                // the pre-tokenizer regexes (UTF + UCP, JIT)
#include <unicode/bytestream.h>   // icu::StringByteSink
#include <unicode/normalizer2.h>  // NFC

#include <algorithm>
#include <array>
#include <fstream>
#include <queue>
#include <sstream>
#include <unordered_map>

namespace hyla::serve {
namespace {

using Json = nlohmann::json;

// ---- UTF-8 ----

struct Utf8Step {
  int len = 1;  // bytes of the valid sequence, or of the maximal invalid subpart
  bool valid = false;
  bool truncated = false;  // an invalid subpart that is a proper prefix cut off by the end
};

// The sequence starting at s[i], by the Unicode table of well-formed byte sequences.
Utf8Step utf8_step(std::string_view s, size_t i) {
  const auto b = static_cast<unsigned char>(s[i]);
  if (b < 0x80) return {1, true, false};
  int need = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // the range of the second byte
  if (b >= 0xC2 && b <= 0xDF) {
    need = 1;
  } else if (b >= 0xE0 && b <= 0xEF) {
    need = 2;
    if (b == 0xE0) lo = 0xA0;
    if (b == 0xED) hi = 0x9F;  // no surrogates
  } else if (b >= 0xF0 && b <= 0xF4) {
    need = 3;
    if (b == 0xF0) lo = 0x90;
    if (b == 0xF4) hi = 0x8F;  // <= U+10FFFF
  } else {
    return {1, false, false};
  }
  size_t j = i + 1;
  for (int k = 0; k < need; ++k, ++j) {
    if (j >= s.size()) return {static_cast<int>(j - i), false, true};
    const auto c = static_cast<unsigned char>(s[j]);
    if (c < (k == 0 ? lo : 0x80) || c > (k == 0 ? hi : 0xBF))
      return {static_cast<int>(j - i), false, false};
  }
  return {need + 1, true, false};
}

// Code point of the valid sequence at s[i] (length `len`).
char32_t decode_code_point(std::string_view s, size_t i, int len) {
  const auto b0 = static_cast<unsigned char>(s[i]);
  if (len == 1) return b0;
  char32_t cp = b0 & (0xFF >> (len + 1));
  for (int k = 1; k < len; ++k) cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  return cp;
}

// ---- GPT-2 byte-level alphabet: each byte is shown as one printable code point ----

// bytes 33..126, 161..172, 174..255 stand for themselves; the other 68 bytes become U+0100.. in
// order.
std::array<char32_t, 256> byte_to_char_table() {
  std::array<char32_t, 256> table{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
    table[b] = printable ? static_cast<char32_t>(b) : next++;
  }
  return table;
}

// A token as tokenizer.json spells it -> its raw bytes. Code points outside the alphabet (added
// tokens' text) are kept as their UTF-8.
std::string byte_level_to_bytes(std::string_view token) {
  static const std::unordered_map<char32_t, char> kCharToByte = [] {
    std::unordered_map<char32_t, char> m;
    const std::array<char32_t, 256> table = byte_to_char_table();
    for (int b = 0; b < 256; ++b) m[table[b]] = static_cast<char>(b);
    return m;
  }();
  std::string out;
  out.reserve(token.size());
  for (size_t i = 0; i < token.size();) {
    const Utf8Step step = utf8_step(token, i);
    if (!step.valid) {
      out += token[i++];
      continue;
    }
    const char32_t cp = decode_code_point(token, i, step.len);
    const auto it = kCharToByte.find(cp);
    if (it != kCharToByte.end())
      out += it->second;
    else
      out.append(token.substr(i, step.len));
    i += step.len;
  }
  return out;
}

// ---- PCRE2 ----

struct Pcre2CodeDeleter {
  void operator()(pcre2_code* code) const { pcre2_code_free(code); }
};
using Pcre2Code = std::unique_ptr<pcre2_code, Pcre2CodeDeleter>;

Result<Pcre2Code> compile_regex(const std::string& pattern, bool literal,
                                const std::string& where) {
  int error = 0;
  PCRE2_SIZE offset = 0;
  const uint32_t options =
      PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK | (literal ? PCRE2_LITERAL : 0);
  pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern.data()), pattern.size(),
                                   options, &error, &offset, nullptr);
  if (code == nullptr) {
    std::array<PCRE2_UCHAR, 256> message{};
    pcre2_get_error_message(error, message.data(), message.size());
    return invalid_argument(where, ": regex does not compile at offset ", offset, ": ",
                            reinterpret_cast<const char*>(message.data()), " (pattern ", pattern,
                            ")");
  }
  pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // falls back to the interpreter if JIT is absent
  return Pcre2Code(code);
}

// GPT-2's pattern: what a ByteLevel pre-tokenizer with use_regex = true splits by.
constexpr const char* kGpt2Pattern =
    R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";

}  // namespace

// ---- The loaded tokenizer ----

struct AddedToken {
  std::string content;
  int32_t id = 0;
};

struct TokenizerModel {
  std::unordered_map<std::string, int32_t> vocab;  // raw bytes -> id (model.vocab)
  // (left id, right id) -> (rank, merged id)
  std::unordered_map<uint64_t, std::pair<int32_t, int32_t>> merges;
  std::vector<std::string> id_bytes;   // id -> raw bytes (vocab and added tokens)
  std::array<int32_t, 256> byte_id{};  // the single-byte token of each byte, -1 if none
  std::optional<int32_t> unk_id;
  bool ignore_merges = false;
  bool nfc = false;
  std::vector<AddedToken> added;                              // longest content first
  std::array<std::vector<int32_t>, 256> added_by_first_byte;  // indices into `added`
  std::unordered_map<std::string, int32_t> added_ids;         // content -> id
  std::vector<Pcre2Code> splits;  // Split steps (behavior Isolated), applied in order
};

namespace {

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

std::string type_of(const Json& j) {
  return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>()
                                                                      : std::string("?");
}

Status parse_normalizer(const Json& j, const std::string& path, TokenizerModel& m) {
  if (j.is_null()) return ok_status();
  const std::string type = type_of(j);
  if (type == "NFC") {
    m.nfc = true;
    return ok_status();
  }
  if (type == "Sequence") {
    if (!j.contains("normalizers") || !j["normalizers"].is_array())
      return invalid_argument(path, ".normalizers: expected an array");
    for (size_t i = 0; i < j["normalizers"].size(); ++i)
      HYLA_RETURN_IF_ERROR(
          parse_normalizer(j["normalizers"][i], str_cat(path, ".normalizers[", i, "]"), m));
    return ok_status();
  }
  return unsupported(path, ".type: normalizer '", type,
                     "' is not supported (supported: NFC, Sequence)");
}

Status parse_pre_tokenizer(const Json& j, const std::string& path, TokenizerModel& m,
                           bool& byte_level) {
  if (j.is_null()) return ok_status();
  const std::string type = type_of(j);
  if (type == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array())
      return invalid_argument(path, ".pretokenizers: expected an array");
    for (size_t i = 0; i < j["pretokenizers"].size(); ++i)
      HYLA_RETURN_IF_ERROR(parse_pre_tokenizer(
          j["pretokenizers"][i], str_cat(path, ".pretokenizers[", i, "]"), m, byte_level));
    return ok_status();
  }
  if (type == "Split") {
    const std::string behavior = j.value("behavior", std::string("?"));
    if (behavior != "Isolated")
      return unsupported(path, ".behavior: Split behavior '", behavior,
                         "' is not supported (supported: Isolated)");
    if (j.value("invert", false)) return unsupported(path, ".invert: true is not supported");
    const Json& pattern = j.value("pattern", Json());
    const bool literal = pattern.contains("String");
    if (!pattern.is_object() || (!literal && !pattern.contains("Regex")))
      return invalid_argument(path, ".pattern: expected {\"Regex\": ...} or {\"String\": ...}");
    const std::string text = pattern[literal ? "String" : "Regex"].get<std::string>();
    HYLA_ASSIGN_OR_RETURN(Pcre2Code code, compile_regex(text, literal, path + ".pattern"));
    m.splits.push_back(std::move(code));
    return ok_status();
  }
  if (type == "ByteLevel") {
    if (j.value("add_prefix_space", false))
      return unsupported(path, ".add_prefix_space: true is not supported");
    if (j.value("use_regex", true)) {
      HYLA_ASSIGN_OR_RETURN(Pcre2Code code, compile_regex(kGpt2Pattern, false, path));
      m.splits.push_back(std::move(code));
    }
    byte_level = true;
    return ok_status();
  }
  return unsupported(path, ".type: pre-tokenizer '", type,
                     "' is not supported (supported: Sequence, Split, ByteLevel)");
}

Status parse_model(const Json& j, TokenizerModel& m) {
  if (!j.is_object()) return invalid_argument("model: expected an object");
  const std::string type = j.value("type", std::string("BPE"));
  if (type != "BPE")
    return unsupported("model.type: '", type, "' is not supported (supported: BPE)");
  if (j.contains("dropout") && !j["dropout"].is_null() && j["dropout"].get<double>() != 0.0)
    return unsupported("model.dropout: BPE dropout is not supported");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (j.contains(key) && j[key].is_string() && !j[key].get<std::string>().empty())
      return unsupported("model.", key, ": a non-empty value is not supported");
  if (j.value("byte_fallback", false))
    return unsupported("model.byte_fallback: true is not supported (byte-level BPE needs none)");
  m.ignore_merges = j.value("ignore_merges", false);
  if (!j.contains("vocab") || !j["vocab"].is_object())
    return invalid_argument("model.vocab: expected an object token -> id");
  for (const auto& [token, id_json] : j["vocab"].items()) {
    if (!id_json.is_number_integer() || id_json.get<int64_t>() < 0 ||
        id_json.get<int64_t>() > INT32_MAX)
      return invalid_argument("model.vocab[\"", token, "\"]: expected an id in [0, 2^31)");
    const auto id = id_json.get<int32_t>();
    std::string bytes = byte_level_to_bytes(token);
    if (static_cast<size_t>(id) >= m.id_bytes.size()) m.id_bytes.resize(id + size_t{1});
    m.id_bytes[id] = bytes;
    m.vocab.emplace(std::move(bytes), id);
  }
  if (j.contains("unk_token") && j["unk_token"].is_string()) {
    const auto it = m.vocab.find(byte_level_to_bytes(j["unk_token"].get<std::string>()));
    if (it == m.vocab.end()) return invalid_argument("model.unk_token: not in model.vocab");
    m.unk_id = it->second;
  }
  m.byte_id.fill(-1);
  for (int b = 0; b < 256; ++b) {
    const auto it = m.vocab.find(std::string(1, static_cast<char>(b)));
    if (it != m.vocab.end()) m.byte_id[b] = it->second;
  }
  if (!j.contains("merges") || !j["merges"].is_array())
    return invalid_argument("model.merges: expected an array");
  const Json& merges = j["merges"];
  m.merges.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const Json& merge = merges[r];
    std::string left, right;
    if (merge.is_string()) {  // "a b"
      const std::string s = merge.get<std::string>();
      const size_t space = s.find(' ');
      if (space == std::string::npos || s.find(' ', space + 1) != std::string::npos)
        return invalid_argument("model.merges[", r, "]: expected \"a b\", got \"", s, "\"");
      left = s.substr(0, space);
      right = s.substr(space + 1);
    } else if (merge.is_array() && merge.size() == 2 && merge[0].is_string() &&
               merge[1].is_string()) {  // ["a", "b"]
      left = merge[0].get<std::string>();
      right = merge[1].get<std::string>();
    } else {
      return invalid_argument("model.merges[", r, "]: expected \"a b\" or [\"a\", \"b\"]");
    }
    const std::string left_bytes = byte_level_to_bytes(left);
    const std::string right_bytes = byte_level_to_bytes(right);
    const auto l = m.vocab.find(left_bytes);
    const auto rt = m.vocab.find(right_bytes);
    const auto merged = m.vocab.find(left_bytes + right_bytes);
    if (l == m.vocab.end() || rt == m.vocab.end() || merged == m.vocab.end())
      return invalid_argument("model.merges[", r, "]: \"", left, "\", \"", right,
                              "\" or their concatenation is not in model.vocab");
    m.merges.emplace(pair_key(l->second, rt->second),
                     std::pair<int32_t, int32_t>(static_cast<int32_t>(r), merged->second));
  }
  return ok_status();
}

Status parse_added_tokens(const Json& j, TokenizerModel& m) {
  if (j.is_null()) return ok_status();
  if (!j.is_array()) return invalid_argument("added_tokens: expected an array");
  for (size_t i = 0; i < j.size(); ++i) {
    const Json& t = j[i];
    const std::string path = str_cat("added_tokens[", i, "]");
    if (!t.contains("id") || !t["id"].is_number_integer() || t["id"].get<int64_t>() < 0 ||
        !t.contains("content") || !t["content"].is_string() ||
        t["content"].get<std::string>().empty())
      return invalid_argument(path, ": expected {\"id\": >= 0, \"content\": non-empty string}");
    for (const char* key : {"lstrip", "rstrip", "single_word"})
      if (t.value(key, false)) return unsupported(path, ".", key, ": true is not supported");
    AddedToken token{t["content"].get<std::string>(), t["id"].get<int32_t>()};
    if (static_cast<size_t>(token.id) >= m.id_bytes.size()) m.id_bytes.resize(token.id + size_t{1});
    m.id_bytes[token.id] = token.content;
    m.added_ids[token.content] = token.id;
    m.added.push_back(std::move(token));
  }
  std::stable_sort(m.added.begin(), m.added.end(), [](const AddedToken& a, const AddedToken& b) {
    return a.content.size() > b.content.size();
  });
  for (size_t i = 0; i < m.added.size(); ++i)
    m.added_by_first_byte[static_cast<unsigned char>(m.added[i].content[0])].push_back(
        static_cast<int32_t>(i));
  return ok_status();
}

// ---- Encoding ----

// Runs the Split steps and BPE over one stretch of normalized text.
class SegmentEncoder {
 public:
  explicit SegmentEncoder(const TokenizerModel& m) : m_(m) {
    jit_stack_ = pcre2_jit_stack_create(32 * 1024, 8 * 1024 * 1024, nullptr);
    match_context_ = pcre2_match_context_create(nullptr);
    pcre2_jit_stack_assign(match_context_, nullptr, jit_stack_);
    for (const Pcre2Code& code : m_.splits)
      match_data_.push_back(pcre2_match_data_create_from_pattern(code.get(), nullptr));
  }
  ~SegmentEncoder() {
    for (pcre2_match_data* data : match_data_) pcre2_match_data_free(data);
    pcre2_match_context_free(match_context_);
    pcre2_jit_stack_free(jit_stack_);
  }
  SegmentEncoder(const SegmentEncoder&) = delete;
  SegmentEncoder& operator=(const SegmentEncoder&) = delete;

  void encode(std::string_view text, std::vector<int32_t>& out) { split(text, 0, out); }

 private:
  // Isolated behaviour: every match and every stretch between matches is a piece.
  void split(std::string_view text, size_t step, std::vector<int32_t>& out) {
    if (text.empty()) return;
    if (step == m_.splits.size()) {
      bpe(text, out);
      return;
    }
    pcre2_code* code = m_.splits[step].get();
    pcre2_match_data* data = match_data_[step];
    const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
    size_t start = 0, gap = 0;
    while (start < text.size()) {
      const int rc =
          pcre2_match(code, subject, text.size(), start, PCRE2_NO_UTF_CHECK, data, match_context_);
      if (rc == PCRE2_ERROR_NOMATCH) break;
      HYLA_CHECK(rc > 0, "pre-tokenizer regex failed with PCRE2 error ", rc);
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(data);
      const size_t match_begin = ov[0], match_end = ov[1];
      if (match_end == match_begin) {  // empty match: step over one character
        start = match_begin + std::max(1, utf8_step(text, match_begin).len);
        continue;
      }
      split(text.substr(gap, match_begin - gap), step + 1, out);
      split(text.substr(match_begin, match_end - match_begin), step + 1, out);
      start = gap = match_end;
    }
    split(text.substr(gap), step + 1, out);
  }

  // Byte-level BPE: start from single bytes, repeatedly merge the adjacent pair of lowest rank
  // (leftmost first on ties) until no pair has a merge.
  void bpe(std::string_view word, std::vector<int32_t>& out) {
    if (m_.ignore_merges) {
      const auto it = m_.vocab.find(std::string(word));
      if (it != m_.vocab.end()) {
        out.push_back(it->second);
        return;
      }
    }
    symbols_.clear();
    for (char c : word) {
      const int32_t id = m_.byte_id[static_cast<unsigned char>(c)];
      if (id >= 0)
        symbols_.push_back({id, 0, 0});
      else if (m_.unk_id)
        symbols_.push_back({*m_.unk_id, 0, 0});
    }
    const auto n = static_cast<int32_t>(symbols_.size());
    for (int32_t i = 0; i < n; ++i) {
      symbols_[i].prev = i - 1;
      symbols_[i].next = i + 1 < n ? i + 1 : -1;
    }
    if (n >= 2) {
      Queue queue;
      for (int32_t i = 0; i + 1 < n; ++i) push_pair(queue, i, i + 1);
      while (!queue.empty()) {
        const Candidate c = queue.top();
        queue.pop();
        Symbol& left = symbols_[c.left];
        if (left.id != c.left_id || left.next != c.right || symbols_[c.right].id != c.right_id)
          continue;  // stale: one side was merged since
        Symbol& right = symbols_[c.right];
        left.id = c.merged;
        left.next = right.next;
        if (right.next >= 0) symbols_[right.next].prev = c.left;
        right.id = -1;
        if (left.prev >= 0) push_pair(queue, left.prev, c.left);
        if (left.next >= 0) push_pair(queue, c.left, left.next);
      }
    }
    for (int32_t i = n > 0 ? 0 : -1; i >= 0; i = symbols_[i].next) out.push_back(symbols_[i].id);
  }

  struct Symbol {
    int32_t id, prev, next;  // a merged-away symbol has id -1
  };
  struct Candidate {
    int32_t rank, left, right, left_id, right_id, merged;
    bool operator>(const Candidate& o) const {
      return rank != o.rank ? rank > o.rank : left > o.left;
    }
  };
  using Queue = std::priority_queue<Candidate, std::vector<Candidate>, std::greater<>>;

  void push_pair(Queue& queue, int32_t left, int32_t right) {
    const int32_t left_id = symbols_[left].id, right_id = symbols_[right].id;
    const auto it = m_.merges.find(pair_key(left_id, right_id));
    if (it != m_.merges.end())
      queue.push({it->second.first, left, right, left_id, right_id, it->second.second});
  }

  const TokenizerModel& m_;
  pcre2_jit_stack* jit_stack_ = nullptr;
  pcre2_match_context* match_context_ = nullptr;
  std::vector<pcre2_match_data*> match_data_;
  std::vector<Symbol> symbols_;
};

bool is_ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

std::string nfc(std::string_view text) {
  UErrorCode error = U_ZERO_ERROR;
  const icu::Normalizer2* normalizer = icu::Normalizer2::getNFCInstance(error);
  HYLA_CHECK(U_SUCCESS(error), "ICU NFC normalizer unavailable: ", u_errorName(error));
  std::string out;
  icu::StringByteSink<std::string> sink(&out, static_cast<int32_t>(text.size()));
  normalizer->normalizeUTF8(0, icu::StringPiece(text.data(), static_cast<int32_t>(text.size())),
                            sink, nullptr, error);
  HYLA_CHECK(U_SUCCESS(error), "ICU NFC normalization failed: ", u_errorName(error));
  return out;
}

}  // namespace

// ---- Public API ----

std::string sanitize_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  for (size_t i = 0; i < bytes.size();) {
    const Utf8Step step = utf8_step(bytes, i);
    if (step.valid)
      out.append(bytes.substr(i, step.len));
    else
      out += "\xEF\xBF\xBD";  // U+FFFD
    i += step.len;
  }
  return out;
}

bool is_valid_utf8(std::string_view bytes) {
  for (size_t i = 0; i < bytes.size();) {
    if (static_cast<unsigned char>(bytes[i]) < 0x80) {
      ++i;
      continue;
    }
    const Utf8Step step = utf8_step(bytes, i);
    if (!step.valid) return false;
    i += step.len;
  }
  return true;
}

Result<Tokenizer> Tokenizer::load(const std::string& tokenizer_json_path) {
  std::ifstream file(tokenizer_json_path, std::ios::binary);
  if (!file)
    return Status(ErrorCode::kNotFound, str_cat("tokenizer: cannot open ", tokenizer_json_path));
  std::ostringstream text;
  text << file.rdbuf();
  return from_json(text.str(), tokenizer_json_path);
}

Result<Tokenizer> Tokenizer::from_json(std::string_view json_text, std::string_view origin) {
  Json j = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return invalid_argument("tokenizer ", origin, ": not a JSON object");
  auto m = std::make_shared<TokenizerModel>();
  const auto with_origin = [&](const Status& s) {
    return Status(s.code(), str_cat("tokenizer ", origin, ": ", s.message()));
  };
  Status status = parse_model(j.value("model", Json()), *m);
  if (!status.ok()) return with_origin(status);
  status = parse_added_tokens(j.value("added_tokens", Json()), *m);
  if (!status.ok()) return with_origin(status);
  status = parse_normalizer(j.value("normalizer", Json()), "normalizer", *m);
  if (!status.ok()) return with_origin(status);
  bool byte_level = false;
  status = parse_pre_tokenizer(j.value("pre_tokenizer", Json()), "pre_tokenizer", *m, byte_level);
  if (!status.ok()) return with_origin(status);
  if (!byte_level)
    return with_origin(unsupported(
        "pre_tokenizer: no ByteLevel step; only byte-level BPE tokenizers are supported"));
  const Json decoder = j.value("decoder", Json());
  if (type_of(decoder) != "ByteLevel")
    return with_origin(unsupported("decoder.type: '", type_of(decoder),
                                   "' is not supported (supported: ByteLevel)"));
  const Json post = j.value("post_processor", Json());
  if (!post.is_null() && type_of(post) != "ByteLevel")
    return with_origin(unsupported("post_processor.type: '", type_of(post),
                                   "' is not supported (supported: ByteLevel, null)"));
  return Tokenizer(std::move(m));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  const TokenizerModel& m = *model_;
  std::string clean;
  if (!is_valid_utf8(text)) {
    clean = sanitize_utf8(text);
    text = clean;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() / 3 + 1);
  SegmentEncoder segment(m);
  const auto encode_segment = [&](std::string_view s) {
    if (s.empty()) return;
    if (m.nfc && !is_ascii(s))
      segment.encode(nfc(s), ids);
    else
      segment.encode(s, ids);
  };
  // Added tokens first: at each position the longest one that starts there.
  size_t segment_begin = 0;
  for (size_t i = 0; i < text.size();) {
    const AddedToken* found = nullptr;
    for (int32_t a : m.added_by_first_byte[static_cast<unsigned char>(text[i])]) {
      const AddedToken& t = m.added[a];
      if (text.compare(i, t.content.size(), t.content) == 0) {
        found = &t;
        break;
      }
    }
    if (found == nullptr) {
      ++i;
      continue;
    }
    encode_segment(text.substr(segment_begin, i - segment_begin));
    ids.push_back(found->id);
    i += found->content.size();
    segment_begin = i;
  }
  encode_segment(text.substr(segment_begin));
  return ids;
}

std::string_view Tokenizer::token_bytes(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= model_->id_bytes.size()) return {};
  return model_->id_bytes[id];
}

std::string Tokenizer::decode(std::span<const int32_t> ids) const {
  std::string bytes;
  for (int32_t id : ids) bytes.append(token_bytes(id));
  return is_valid_utf8(bytes) ? bytes : sanitize_utf8(bytes);
}

int64_t Tokenizer::vocab_size() const { return static_cast<int64_t>(model_->id_bytes.size()); }

std::optional<int32_t> Tokenizer::token_id(std::string_view token) const {
  const auto added = model_->added_ids.find(std::string(token));
  if (added != model_->added_ids.end()) return added->second;
  const auto it = model_->vocab.find(byte_level_to_bytes(token));
  if (it != model_->vocab.end()) return it->second;
  return std::nullopt;
}

std::string StreamingDecoder::push(int32_t id) {
  pending_.append(tokenizer_->token_bytes(id));
  // Hold back a trailing proper prefix of a valid multi-byte sequence: the next ids may finish it.
  size_t hold = 0;
  for (size_t k = 1; k <= 3 && k <= pending_.size(); ++k) {
    const size_t p = pending_.size() - k;
    const auto b = static_cast<unsigned char>(pending_[p]);
    if (b >= 0x80 && b <= 0xBF) continue;  // a continuation byte: look further back
    const Utf8Step step = utf8_step(pending_, p);
    if (step.truncated) hold = k;
    break;
  }
  const std::string_view ready = std::string_view(pending_).substr(0, pending_.size() - hold);
  std::string out = is_valid_utf8(ready) ? std::string(ready) : sanitize_utf8(ready);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StreamingDecoder::finish() {
  std::string out = sanitize_utf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace hyla::serve

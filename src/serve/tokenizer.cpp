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
#include <functional>
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

struct Merge {
  int32_t left, right, merged;
};

// (left id, right id) -> merge rank: open addressing with linear probing over a power-of-two
// table at most half full. BPE looks up every adjacent pair, so this lookup is the encoder's
// inner loop; a flat table keeps it to one or two cache lines (std::unordered_map chases a node).
class MergeTable {
 public:
  void reserve(size_t merges) {
    size_t capacity = 16;
    shift_ = 60;
    while (capacity < 2 * merges) {
      capacity *= 2;
      --shift_;
    }
    slots_.assign(capacity, Slot{kEmpty, 0});
  }
  /// Keeps the first rank given for a pair (the lowest, as merges are added in rank order).
  void insert(uint64_t key, int32_t rank) {
    if (2 * (size_ + 1) > slots_.size()) grow();
    Slot& slot = slots_[slot_index(key)];
    if (slot.key == kEmpty) {
      slot = Slot{key, rank};
      ++size_;
    }
  }
  /// The rank of the pair, or -1.
  int32_t find(uint64_t key) const {
    if (slots_.empty()) return -1;
    const Slot& slot = slots_[slot_index(key)];
    return slot.key == kEmpty ? -1 : slot.rank;
  }

 private:
  // Ids are < 2^31, so no real key has every bit set.
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  struct Slot {
    uint64_t key;
    int32_t rank;
  };
  // The key's slot, or the empty slot where it would go.
  size_t slot_index(uint64_t key) const {
    const size_t mask = slots_.size() - 1;
    size_t i = static_cast<size_t>((key * 0x9E3779B97F4A7C15ull) >> shift_);  // Fibonacci hashing
    while (slots_[i].key != kEmpty && slots_[i].key != key) i = (i + 1) & mask;
    return i;
  }
  void grow() {
    std::vector<Slot> old = std::move(slots_);
    reserve(std::max<size_t>(size_ + 1, old.size()));
    size_ = 0;
    for (const Slot& slot : old)
      if (slot.key != kEmpty) insert(slot.key, slot.rank);
  }
  std::vector<Slot> slots_;
  size_t size_ = 0;
  int shift_ = 60;  // 64 - log2(capacity): the product's top bits index the table
};

struct TokenizerModel {
  std::unordered_map<std::string, int32_t> vocab;  // raw bytes -> id (model.vocab)
  MergeTable merges;                               // (left id, right id) -> rank (the first one)
  std::vector<Merge> merge_by_rank;                // model.merges[rank] as ids
  std::vector<std::string> id_bytes;               // id -> raw bytes (vocab and added tokens)
  std::array<int32_t, 256> byte_id{};              // the single-byte token of each byte, -1 if none
  std::optional<int32_t> unk_id;
  bool ignore_merges = false;
  bool nfc = false;
  std::vector<AddedToken> added;                              // longest content first
  std::array<std::vector<int32_t>, 256> added_by_first_byte;  // indices into `added`
  std::unordered_map<std::string, int32_t> added_ids;         // content -> id
  std::vector<Pcre2Code> splits;         // Split steps (behavior Isolated), applied in order
  std::vector<std::string> split_paths;  // each Split step's JSON path, for error messages
};

namespace {

uint64_t pair_key(int32_t left, int32_t right) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(left)) << 32) | static_cast<uint32_t>(right);
}

// Vocabulary and added-token ids index a table, so they must be dense: at most this many ids
// may be unused below the largest (real tokenizers leave a few hundred at most).
constexpr int64_t kMaxUnusedIds = int64_t{1} << 20;

// obj[key] as a bool, `fallback` when absent or null. Error: any other type.
Result<bool> bool_field(const Json& obj, const char* key, bool fallback, const std::string& path) {
  if (!obj.is_object() || !obj.contains(key) || obj[key].is_null()) return fallback;
  if (!obj[key].is_boolean())
    return invalid_argument(path, ".", key, ": expected true or false, got ", obj[key].dump());
  return obj[key].get<bool>();
}

// obj[key] as a string, `fallback` when absent or null. Error: any other type.
Result<std::string> string_field(const Json& obj, const char* key, const std::string& fallback,
                                 const std::string& path) {
  if (!obj.is_object() || !obj.contains(key) || obj[key].is_null()) return fallback;
  if (!obj[key].is_string())
    return invalid_argument(path, ".", key, ": expected a string, got ", obj[key].dump());
  return obj[key].get<std::string>();
}

// An id of model.vocab or added_tokens: an integer in [0, max_id].
Result<int32_t> token_id_field(const Json& id, int64_t max_id, const std::string& path) {
  if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() > max_id)
    return invalid_argument(path, ": expected an id in [0, ", max_id, "], got ", id.dump(),
                            " (ids index a table, so at most ", kMaxUnusedIds,
                            " may be unused below the largest)");
  return static_cast<int32_t>(id.get<int64_t>());
}

// Sequence normalizers and pre-tokenizers nest at most this deep.
constexpr int kMaxSequenceDepth = 8;

std::string type_of(const Json& j) {
  return j.is_object() && j.contains("type") && j["type"].is_string() ? j["type"].get<std::string>()
                                                                      : std::string("?");
}

Status parse_normalizer(const Json& j, const std::string& path, TokenizerModel& m, int depth = 0) {
  if (j.is_null()) return ok_status();
  if (depth > kMaxSequenceDepth)
    return unsupported(path, ": Sequences nested more than ", kMaxSequenceDepth, " deep");
  const std::string type = type_of(j);
  if (type == "NFC") {
    m.nfc = true;
    return ok_status();
  }
  if (type == "Sequence") {
    if (!j.contains("normalizers") || !j["normalizers"].is_array())
      return invalid_argument(path, ".normalizers: expected an array");
    for (size_t i = 0; i < j["normalizers"].size(); ++i)
      HYLA_RETURN_IF_ERROR(parse_normalizer(j["normalizers"][i],
                                            str_cat(path, ".normalizers[", i, "]"), m, depth + 1));
    return ok_status();
  }
  return unsupported(path, ".type: normalizer '", type,
                     "' is not supported (supported: NFC, Sequence)");
}

Status parse_pre_tokenizer(const Json& j, const std::string& path, TokenizerModel& m,
                           bool& byte_level, int depth = 0) {
  if (j.is_null()) return ok_status();
  if (depth > kMaxSequenceDepth)
    return unsupported(path, ": Sequences nested more than ", kMaxSequenceDepth, " deep");
  const std::string type = type_of(j);
  if (type == "Sequence") {
    if (!j.contains("pretokenizers") || !j["pretokenizers"].is_array())
      return invalid_argument(path, ".pretokenizers: expected an array");
    for (size_t i = 0; i < j["pretokenizers"].size(); ++i)
      HYLA_RETURN_IF_ERROR(parse_pre_tokenizer(j["pretokenizers"][i],
                                               str_cat(path, ".pretokenizers[", i, "]"), m,
                                               byte_level, depth + 1));
    return ok_status();
  }
  if (type == "Split") {
    HYLA_ASSIGN_OR_RETURN(const std::string behavior, string_field(j, "behavior", "?", path));
    if (behavior != "Isolated")
      return unsupported(path, ".behavior: Split behavior '", behavior,
                         "' is not supported (supported: Isolated)");
    HYLA_ASSIGN_OR_RETURN(const bool invert, bool_field(j, "invert", false, path));
    if (invert) return unsupported(path, ".invert: true is not supported");
    const Json pattern = j.contains("pattern") ? j["pattern"] : Json();
    const bool literal = pattern.is_object() && pattern.contains("String");
    if (!pattern.is_object() || (!literal && !pattern.contains("Regex")) ||
        !pattern[literal ? "String" : "Regex"].is_string())
      return invalid_argument(path,
                              ".pattern: expected {\"Regex\": \"...\"} or {\"String\": \"...\"}");
    const std::string text = pattern[literal ? "String" : "Regex"].get<std::string>();
    HYLA_ASSIGN_OR_RETURN(Pcre2Code code, compile_regex(text, literal, path + ".pattern"));
    m.splits.push_back(std::move(code));
    m.split_paths.push_back(path + ".pattern");
    return ok_status();
  }
  if (type == "ByteLevel") {
    HYLA_ASSIGN_OR_RETURN(const bool add_prefix_space,
                          bool_field(j, "add_prefix_space", false, path));
    if (add_prefix_space) return unsupported(path, ".add_prefix_space: true is not supported");
    HYLA_ASSIGN_OR_RETURN(const bool use_regex, bool_field(j, "use_regex", true, path));
    if (use_regex) {
      HYLA_ASSIGN_OR_RETURN(Pcre2Code code, compile_regex(kGpt2Pattern, false, path));
      m.splits.push_back(std::move(code));
      m.split_paths.push_back(path + " (ByteLevel's GPT-2 pattern)");
    }
    byte_level = true;
    return ok_status();
  }
  return unsupported(path, ".type: pre-tokenizer '", type,
                     "' is not supported (supported: Sequence, Split, ByteLevel)");
}

// `max_id`: the largest id allowed (the token count plus kMaxUnusedIds).
Status parse_model(const Json& j, int64_t max_id, TokenizerModel& m) {
  if (!j.is_object()) return invalid_argument("model: expected an object");
  HYLA_ASSIGN_OR_RETURN(const std::string type, string_field(j, "type", "BPE", "model"));
  if (type != "BPE")
    return unsupported("model.type: '", type, "' is not supported (supported: BPE)");
  if (j.contains("dropout") && !j["dropout"].is_null() &&
      (!j["dropout"].is_number() || j["dropout"].get<double>() != 0.0))
    return unsupported("model.dropout: BPE dropout is not supported (got ", j["dropout"].dump(),
                       ")");
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"})
    if (j.contains(key) && !j[key].is_null() &&
        (!j[key].is_string() || !j[key].get<std::string>().empty()))
      return unsupported("model.", key, ": a non-empty value is not supported");
  HYLA_ASSIGN_OR_RETURN(const bool byte_fallback, bool_field(j, "byte_fallback", false, "model"));
  if (byte_fallback)
    return unsupported("model.byte_fallback: true is not supported (byte-level BPE needs none)");
  HYLA_ASSIGN_OR_RETURN(m.ignore_merges, bool_field(j, "ignore_merges", false, "model"));
  if (!j.contains("vocab") || !j["vocab"].is_object())
    return invalid_argument("model.vocab: expected an object token -> id");
  for (const auto& [token, id_json] : j["vocab"].items()) {
    HYLA_ASSIGN_OR_RETURN(const int32_t id,
                          token_id_field(id_json, max_id, str_cat("model.vocab[\"", token, "\"]")));
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
  if (merges.size() > static_cast<size_t>(INT32_MAX))
    return invalid_argument("model.merges: ", merges.size(), " merges, expected at most ",
                            INT32_MAX);
  m.merges.reserve(merges.size());
  m.merge_by_rank.reserve(merges.size());
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
    m.merges.insert(pair_key(l->second, rt->second), static_cast<int32_t>(r));
    m.merge_by_rank.push_back({l->second, rt->second, merged->second});
  }
  return ok_status();
}

Status parse_added_tokens(const Json& j, int64_t max_id, TokenizerModel& m) {
  if (j.is_null()) return ok_status();
  if (!j.is_array()) return invalid_argument("added_tokens: expected an array");
  for (size_t i = 0; i < j.size(); ++i) {
    const Json& t = j[i];
    const std::string path = str_cat("added_tokens[", i, "]");
    if (!t.is_object() || !t.contains("id") || !t.contains("content") ||
        !t["content"].is_string() || t["content"].get<std::string>().empty())
      return invalid_argument(path, ": expected {\"id\": >= 0, \"content\": non-empty string}");
    HYLA_ASSIGN_OR_RETURN(const int32_t id, token_id_field(t["id"], max_id, path + ".id"));
    for (const char* key : {"lstrip", "rstrip", "single_word"}) {
      HYLA_ASSIGN_OR_RETURN(const bool on, bool_field(t, key, false, path));
      if (on) return unsupported(path, ".", key, ": true is not supported");
    }
    AddedToken token{t["content"].get<std::string>(), id};
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

// PCRE2's default match limit (10 million backtracking steps) is a budget per pcre2_match call,
// not per byte: the pre-tokenizer patterns are linear, but one call may walk a whole run before it
// matches (Qwen's `\s*[\r\n]+` alternative scans every space of a 10 MB run of spaces, then
// gives way to `\s+(?!\S)`, about 1.5 steps per byte). So each call gets the default plus
// kMatchStepsPerByte steps per byte still to scan: enough for any linear pattern, while a
// pattern that backtracks exponentially (a broken custom regex) still stops with an error.
constexpr uint64_t kDefaultMatchLimit = 10'000'000;
constexpr uint64_t kMatchStepsPerByte = 16;
// The JIT stack starts small and grows (x8) on PCRE2_ERROR_JIT_STACKLIMIT up to this size.
constexpr size_t kJitStackStart = 32 * 1024;
constexpr size_t kJitStackMax = size_t{512} << 20;
// The interpreter's backtracking memory (used where the JIT is unavailable), in KiB: 1 GiB.
constexpr uint32_t kHeapLimitKib = uint32_t{1} << 20;

std::string pcre2_error_message(int rc) {
  std::array<PCRE2_UCHAR, 256> message{};
  if (pcre2_get_error_message(rc, message.data(), message.size()) < 0) return str_cat("code ", rc);
  return reinterpret_cast<const char*>(message.data());
}

// BPE pieces of at least this many symbols keep their candidates in rank buckets (see bpe).
constexpr int32_t kBucketMinSymbols = 256;

// Runs the Split steps and BPE over one stretch of normalized text.
class SegmentEncoder {
 public:
  explicit SegmentEncoder(const TokenizerModel& m) : m_(m) {
    match_context_ = pcre2_match_context_create(nullptr);
    for (const Pcre2Code& code : m_.splits)
      match_data_.push_back(pcre2_match_data_create_from_pattern(code.get(), nullptr));
  }
  ~SegmentEncoder() {
    for (pcre2_match_data* data : match_data_) pcre2_match_data_free(data);
    pcre2_match_context_free(match_context_);
    if (jit_stack_ != nullptr) pcre2_jit_stack_free(jit_stack_);
  }
  SegmentEncoder(const SegmentEncoder&) = delete;
  SegmentEncoder& operator=(const SegmentEncoder&) = delete;

  /// Errors: a Split regex that PCRE2 cannot run to the end (limits, out of memory).
  Status encode(std::string_view text, std::vector<int32_t>& out) {
    if (match_context_ == nullptr ||
        std::any_of(match_data_.begin(), match_data_.end(), [](auto* d) { return !d; }))
      return Status(ErrorCode::kOutOfMemory, "tokenizer: PCRE2 could not allocate match data");
    return split(text, 0, out);
  }

 private:
  // One match of Split step `step` at or after `start`; false when there is none. Grows the JIT
  // stack and retries when the JIT runs out of it.
  Result<bool> match(size_t step, std::string_view text, size_t start) {
    const uint64_t limit = std::min<uint64_t>(
        kDefaultMatchLimit + kMatchStepsPerByte * (text.size() - start), UINT32_MAX);
    pcre2_set_match_limit(match_context_, static_cast<uint32_t>(limit));
    pcre2_set_depth_limit(match_context_, static_cast<uint32_t>(limit));
    pcre2_set_heap_limit(match_context_, kHeapLimitKib);  // the interpreter, where JIT is absent
    while (true) {
      if (jit_stack_ == nullptr) {
        jit_stack_ = pcre2_jit_stack_create(kJitStackStart, jit_stack_size_, nullptr);
        if (jit_stack_ == nullptr)
          return Status(ErrorCode::kOutOfMemory,
                        str_cat("tokenizer: cannot allocate a PCRE2 JIT stack of ", jit_stack_size_,
                                " bytes"));
        pcre2_jit_stack_assign(match_context_, nullptr, jit_stack_);
      }
      const int rc =
          pcre2_match(m_.splits[step].get(), reinterpret_cast<PCRE2_SPTR>(text.data()), text.size(),
                      start, PCRE2_NO_UTF_CHECK, match_data_[step], match_context_);
      if (rc > 0) return true;
      if (rc == PCRE2_ERROR_NOMATCH) return false;
      if (rc == PCRE2_ERROR_JIT_STACKLIMIT && jit_stack_size_ < kJitStackMax) {
        pcre2_jit_stack_free(jit_stack_);
        jit_stack_ = nullptr;
        jit_stack_size_ = std::min(jit_stack_size_ * 8, kJitStackMax);
        continue;
      }
      return Status(
          rc == PCRE2_ERROR_NOMEMORY ? ErrorCode::kOutOfMemory : ErrorCode::kInvalidArgument,
          str_cat("tokenizer: the pre-tokenizer regex ", m_.split_paths[step], " failed at byte ",
                  start, " of a ", text.size(), "-byte piece of text: PCRE2 error ", rc, " (",
                  pcre2_error_message(rc), "; match limit ", limit, " steps, JIT stack ",
                  jit_stack_size_, " bytes)"));
    }
  }

  // Isolated behaviour: every match and every stretch between matches is a piece.
  Status split(std::string_view text, size_t step, std::vector<int32_t>& out) {
    if (text.empty()) return ok_status();
    if (step == m_.splits.size()) {
      bpe(text, out);
      return ok_status();
    }
    size_t start = 0, gap = 0;
    while (start < text.size()) {
      HYLA_ASSIGN_OR_RETURN(const bool found, match(step, text, start));
      if (!found) break;
      const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(match_data_[step]);
      const size_t match_begin = ov[0], match_end = ov[1];
      if (match_end <= match_begin) {  // empty match: step over one character
        const size_t at = std::max(start, size_t(match_begin));
        if (at >= text.size()) break;
        start = at + size_t(std::max(1, utf8_step(text, at).len));
        continue;
      }
      HYLA_RETURN_IF_ERROR(split(text.substr(gap, match_begin - gap), step + 1, out));
      HYLA_RETURN_IF_ERROR(split(text.substr(match_begin, match_end - match_begin), step + 1, out));
      start = gap = match_end;
    }
    return split(text.substr(gap), step + 1, out);
  }

  // Byte-level BPE: start from single bytes, repeatedly merge the adjacent pair of lowest rank
  // (leftmost first on ties) until no pair has a merge.
  //
  // Candidates: a pair of adjacent symbols whose ids have a merge, named by the left symbol's
  // index (merging keeps the left index, so index order is position order). A piece of fewer than
  // kBucketMinSymbols symbols (a word) keeps them in one min-heap of (rank << 32 | left). A longer
  // one keeps them in one bucket per rank, with a min-heap of the ranks whose bucket is not empty.
  // Popping rank r and running its bucket in index order is the order "lowest rank, then leftmost"
  // as long as no merge in between adds a candidate of rank <= r: a merge of rank r cannot add one
  // of rank r (its result is longer than either side, so it is neither side of merge r again), and
  // one of a lower rank exists only in merge lists out of training order; when one appears, the
  // rest of the bucket goes back and the heap decides again. So each candidate costs O(1) plus its
  // bucket's sort (the buckets are filled left to right, mostly sorted already), not a heap
  // operation over every candidate: a 10 MB run of spaces is millions of merges. A candidate is
  // stale when its pair's ids are no longer the merge's (a side was merged since); the ids at a
  // position only grow longer, so a pair whose ids match is the pair that was queued.
  void bpe(std::string_view word, std::vector<int32_t>& out) {
    if (m_.ignore_merges) {
      const auto it = m_.vocab.find(std::string(word));
      if (it != m_.vocab.end()) {
        out.push_back(it->second);
        return;
      }
    }
    symbols_.clear();
    symbols_.reserve(word.size());
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
    bucketed_ = n >= kBucketMinSymbols;
    for (int32_t i = 0; i + 1 < n; ++i) queue_pair(i);
    while (!bucketed_ && !heap_.empty()) {
      std::pop_heap(heap_.begin(), heap_.end(), std::greater<>());
      const uint64_t candidate = heap_.back();
      heap_.pop_back();
      merge(static_cast<int32_t>(candidate & 0xFFFFFFFFu), static_cast<int32_t>(candidate >> 32));
    }
    while (bucketed_ && !rank_heap_.empty()) {
      std::pop_heap(rank_heap_.begin(), rank_heap_.end(), std::greater<>());
      const int32_t rank = rank_heap_.back();
      rank_heap_.pop_back();
      Bucket& bucket = buckets_[bucket_of_rank_[rank]];
      bucket.queued = false;
      work_.swap(bucket.lefts);
      bucket.lefts.clear();
      if (!std::is_sorted(work_.begin(), work_.end())) std::sort(work_.begin(), work_.end());
      lowest_queued_ = INT32_MAX;
      for (size_t k = 0; k < work_.size(); ++k) {
        merge(work_[k], rank);
        if (lowest_queued_ > rank) continue;
        // A candidate of a rank <= this one appeared: the rest waits for the heap's next turn.
        Bucket& again = buckets_[bucket_of_rank_[rank]];
        again.lefts.insert(again.lefts.end(), work_.begin() + long(k) + 1, work_.end());
        if (!again.lefts.empty() && !again.queued) queue_rank(rank, again);
        break;
      }
    }
    for (int32_t i = n > 0 ? 0 : -1; i >= 0; i = symbols_[i].next) out.push_back(symbols_[i].id);
    for (int32_t rank : used_ranks_) bucket_of_rank_[rank] = -1;
    used_ranks_.clear();
    buckets_used_ = 0;
  }

  struct Symbol {
    int32_t id, prev, next;  // a merged-away symbol has id -1
  };
  struct Bucket {
    std::vector<int32_t> lefts;  // left symbol index of each candidate of one rank
    bool queued = false;         // its rank is in rank_heap_
  };

  // Merges symbol `left` with the one after it by merge `rank`, unless the candidate is stale.
  void merge(int32_t left_index, int32_t rank) {
    Symbol& left = symbols_[left_index];
    const Merge& m = m_.merge_by_rank[rank];
    if (left.id != m.left || left.next < 0 || symbols_[left.next].id != m.right) return;
    Symbol& right = symbols_[left.next];
    left.id = m.merged;
    left.next = right.next;
    if (right.next >= 0) symbols_[right.next].prev = left_index;
    right.id = -1;
    if (left.prev >= 0) queue_pair(left.prev);
    if (left.next >= 0) queue_pair(left_index);
  }

  // Queues the candidate of symbol `left` and the one after it, if their pair has a merge.
  void queue_pair(int32_t left) {
    const int32_t rank =
        m_.merges.find(pair_key(symbols_[left].id, symbols_[symbols_[left].next].id));
    if (rank < 0) return;
    if (!bucketed_) {
      heap_.push_back((static_cast<uint64_t>(rank) << 32) | static_cast<uint32_t>(left));
      std::push_heap(heap_.begin(), heap_.end(), std::greater<>());
      return;
    }
    lowest_queued_ = std::min(lowest_queued_, rank);
    if (bucket_of_rank_.empty()) bucket_of_rank_.assign(m_.merge_by_rank.size(), -1);
    if (bucket_of_rank_[rank] < 0) {
      if (buckets_used_ == buckets_.size()) buckets_.emplace_back();
      bucket_of_rank_[rank] = static_cast<int32_t>(buckets_used_++);
      used_ranks_.push_back(rank);
    }
    Bucket& bucket = buckets_[bucket_of_rank_[rank]];
    bucket.lefts.push_back(left);
    if (!bucket.queued) queue_rank(rank, bucket);
  }

  void queue_rank(int32_t rank, Bucket& bucket) {
    bucket.queued = true;
    rank_heap_.push_back(rank);
    std::push_heap(rank_heap_.begin(), rank_heap_.end(), std::greater<>());
  }

  const TokenizerModel& m_;
  size_t jit_stack_size_ = size_t{8} << 20;
  pcre2_jit_stack* jit_stack_ = nullptr;
  pcre2_match_context* match_context_ = nullptr;
  std::vector<pcre2_match_data*> match_data_;
  std::vector<Symbol> symbols_;
  bool bucketed_ = false;
  std::vector<uint64_t> heap_;  // candidates of a short piece (see bpe)
  // Candidates of a long piece (see bpe): rank -> index into buckets_ (-1: none; sized on first
  // use), the buckets in use (kept with their capacity between pieces), the ranks to reset, the
  // heap.
  std::vector<int32_t> bucket_of_rank_;
  std::vector<Bucket> buckets_;
  size_t buckets_used_ = 0;
  std::vector<int32_t> used_ranks_;
  std::vector<int32_t> rank_heap_;
  std::vector<int32_t> work_;
  int32_t lowest_queued_ = INT32_MAX;
};

bool is_ascii(std::string_view s) {
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

// NFC of `text`, or nullopt when it is already in NFC (most text: no copy then).
Result<std::optional<std::string>> nfc(std::string_view text) {
  if (text.size() > static_cast<size_t>(INT32_MAX))
    return invalid_argument("tokenizer: NFC normalization takes at most ", INT32_MAX,
                            " bytes of text between added tokens, got ", text.size());
  UErrorCode error = U_ZERO_ERROR;
  const icu::Normalizer2* normalizer = icu::Normalizer2::getNFCInstance(error);
  if (U_FAILURE(error))
    return internal_error("tokenizer: ICU's NFC normalizer is unavailable: ", u_errorName(error));
  const icu::StringPiece piece(text.data(), static_cast<int32_t>(text.size()));
  if (normalizer->isNormalizedUTF8(piece, error) && U_SUCCESS(error))
    return std::optional<std::string>();
  error = U_ZERO_ERROR;
  std::string out;
  icu::StringByteSink<std::string> sink(&out, static_cast<int32_t>(text.size()));
  normalizer->normalizeUTF8(0, piece, sink, nullptr, error);
  if (U_FAILURE(error))
    return internal_error("tokenizer: ICU NFC normalization of ", text.size(),
                          " bytes failed: ", u_errorName(error));
  return std::optional<std::string>(std::move(out));
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

namespace {

Result<Tokenizer> parse_tokenizer(const Json& j, std::shared_ptr<TokenizerModel> m,
                                  Tokenizer (*make)(std::shared_ptr<const TokenizerModel>)) {
  const Json model = j.contains("model") ? j["model"] : Json();
  const Json added = j.contains("added_tokens") ? j["added_tokens"] : Json();
  const int64_t tokens =
      int64_t(model.is_object() && model.contains("vocab") ? model["vocab"].size() : 0) +
      int64_t(added.is_array() ? added.size() : 0);
  const int64_t max_id = std::min<int64_t>(tokens + kMaxUnusedIds, INT32_MAX);
  HYLA_RETURN_IF_ERROR(parse_model(model, max_id, *m));
  HYLA_RETURN_IF_ERROR(parse_added_tokens(added, max_id, *m));
  HYLA_RETURN_IF_ERROR(
      parse_normalizer(j.contains("normalizer") ? j["normalizer"] : Json(), "normalizer", *m));
  bool byte_level = false;
  HYLA_RETURN_IF_ERROR(parse_pre_tokenizer(
      j.contains("pre_tokenizer") ? j["pre_tokenizer"] : Json(), "pre_tokenizer", *m, byte_level));
  if (!byte_level)
    return unsupported(
        "pre_tokenizer: no ByteLevel step; only byte-level BPE tokenizers are supported");
  const Json decoder = j.contains("decoder") ? j["decoder"] : Json();
  if (type_of(decoder) != "ByteLevel")
    return unsupported("decoder.type: '", type_of(decoder),
                       "' is not supported (supported: ByteLevel)");
  const Json post = j.contains("post_processor") ? j["post_processor"] : Json();
  if (!post.is_null() && type_of(post) != "ByteLevel")
    return unsupported("post_processor.type: '", type_of(post),
                       "' is not supported (supported: ByteLevel, null)");
  return make(std::move(m));
}

}  // namespace

Result<Tokenizer> Tokenizer::from_json(std::string_view json_text, std::string_view origin) {
  Json j = Json::parse(json_text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object())
    return invalid_argument("tokenizer ", origin, ": not a JSON object");
  Result<Tokenizer> tokenizer = invalid_argument("not parsed");
  // The parse checks every type it reads; the handlers are a net for what nlohmann::json or the
  // allocator may still throw (a malformed file must give an error, never terminate).
  try {
    tokenizer = parse_tokenizer(
        j, std::make_shared<TokenizerModel>(),
        [](std::shared_ptr<const TokenizerModel> m) { return Tokenizer(std::move(m)); });
  } catch (const std::bad_alloc&) {
    tokenizer = Status(ErrorCode::kOutOfMemory, "out of memory while loading");
  } catch (const std::exception& e) {
    tokenizer = invalid_argument("malformed: ", e.what());
  }
  if (tokenizer.ok()) return tokenizer;
  return Status(tokenizer.status().code(),
                str_cat("tokenizer ", origin, ": ", tokenizer.status().message()));
}

Result<std::vector<int32_t>> Tokenizer::try_encode(std::string_view text) const {
  const TokenizerModel& m = *model_;
  // BPE indexes a piece's bytes with int32.
  if (text.size() > static_cast<size_t>(INT32_MAX))
    return invalid_argument("tokenizer: the text is ", text.size(), " bytes, expected at most ",
                            INT32_MAX);
  std::string clean;
  if (!is_valid_utf8(text)) {
    clean = sanitize_utf8(text);
    text = clean;
  }
  std::vector<int32_t> ids;
  ids.reserve(text.size() + 1);  // at most one id per byte (virtual until written)
  SegmentEncoder segment(m);
  const auto encode_segment = [&](std::string_view s) -> Status {
    if (s.empty()) return ok_status();
    if (!m.nfc || is_ascii(s)) return segment.encode(s, ids);
    HYLA_ASSIGN_OR_RETURN(const std::optional<std::string> normalized, nfc(s));
    return segment.encode(normalized ? *normalized : s, ids);
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
    HYLA_RETURN_IF_ERROR(encode_segment(text.substr(segment_begin, i - segment_begin)));
    ids.push_back(found->id);
    i += found->content.size();
    segment_begin = i;
  }
  HYLA_RETURN_IF_ERROR(encode_segment(text.substr(segment_begin)));
  return ids;
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  Result<std::vector<int32_t>> ids = try_encode(text);
  HYLA_CHECK(ids.ok(), ids.status().message());
  return std::move(ids).value();
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

// Tokenizer: Hugging Face tokenizer.json (byte-level BPE, as in the Qwen family) -> token ids and
// back. Matches HF `tokenizers` (Rust) and its JS port @huggingface/tokenizers: added tokens are
// split off first (longest first), the rest is NFC-normalized, split by the pre-tokenizer regexes
// (PCRE2, UTF + UCP), then BPE-merged on raw bytes. Invalid UTF-8 input bytes become U+FFFD (WHATWG
// maximal subparts, as TextDecoder and Rust's from_utf8_lossy do) before anything else.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/error.h"

namespace hyla::serve {

struct TokenizerModel;  // vocab, merges, added tokens, compiled regexes (tokenizer.cpp)

class Tokenizer {
 public:
  /// Reads a tokenizer.json. Constructs it cannot run (another model type, a normalizer other than
  /// NFC, a Split behaviour other than Isolated, ...) give kUnsupported naming the JSON path.
  static Result<Tokenizer> load(const std::string& tokenizer_json_path);
  /// The same from the JSON text itself; `origin` names it in error messages.
  static Result<Tokenizer> from_json(std::string_view json_text, std::string_view origin);

  /// Text (any bytes; invalid UTF-8 is replaced by U+FFFD) -> ids. Adds no BOS/EOS. Long runs
  /// (10 MB of one character) take time linear in their length. Errors: a pre-tokenizer regex
  /// that PCRE2 cannot run to the end within its limits (only a pattern that backtracks
  /// exponentially, e.g. a broken custom one; the message names the pattern's JSON path and the
  /// PCRE2 error), memory, or more than 2 GiB of text between added tokens with NFC on.
  Result<std::vector<int32_t>> try_encode(std::string_view text) const;
  /// try_encode for text known to encode (tests, fixed strings): aborts with try_encode's message
  /// where it fails. Input from users goes through try_encode.
  std::vector<int32_t> encode(std::string_view text) const;
  /// Ids -> text: the tokens' bytes concatenated, invalid UTF-8 replaced by U+FFFD. Ids out of
  /// range are skipped. decode(encode(x)) == NFC(x) for valid UTF-8 x.
  std::string decode(std::span<const int32_t> ids) const;
  /// The raw bytes of one token ("" for an id out of range).
  std::string_view token_bytes(int32_t id) const;
  /// Largest id + 1, added tokens included (HF get_vocab_size(with_added_tokens=True)).
  int64_t vocab_size() const;
  /// The id of a token as tokenizer.json spells it ("Ġthe", "<|im_end|>"), if there is one.
  std::optional<int32_t> token_id(std::string_view token) const;

 private:
  explicit Tokenizer(std::shared_ptr<const TokenizerModel> model) : model_(std::move(model)) {}
  std::shared_ptr<const TokenizerModel> model_;
};

/// Incremental decode for streaming generation: push() ids one at a time; each call returns only
/// complete, valid UTF-8 (an incomplete multi-byte sequence at the end is held back until the next
/// id completes it). Bytes that can never become valid come out as U+FFFD, exactly as decode()
/// gives them, so the concatenation of every push() and finish() equals decode(all ids).
class StreamingDecoder {
 public:
  explicit StreamingDecoder(const Tokenizer& tokenizer) : tokenizer_(&tokenizer) {}
  std::string push(int32_t id);
  /// Flushes what is held back (an unfinished sequence becomes U+FFFD) and resets.
  std::string finish();
  /// Whether the last push held back the start of a character (its text is not out yet).
  bool holding() const { return !pending_.empty(); }

 private:
  const Tokenizer* tokenizer_;
  std::string pending_;  // at most 3 bytes: the start of a multi-byte sequence
};

/// Replaces each maximal invalid subpart of `bytes` by U+FFFD (the WHATWG / Unicode "best practice"
/// rule that TextDecoder and Rust's String::from_utf8_lossy follow).
std::string sanitize_utf8(std::string_view bytes);
/// Whether `bytes` is entirely valid UTF-8.
bool is_valid_utf8(std::string_view bytes);

}  // namespace hyla::serve

// N-gram (prompt lookup) drafting for speculative decoding: the next tokens are guessed by finding
// the most recent earlier occurrence of the sequence's last n tokens (n from max_ngram down to
// min_ngram) and proposing the tokens that followed it. No model: it pays off on repetitive text
// (code edits, quoting the prompt, structured output). One NgramDrafter per request, fed the
// prompt and then every accepted token; an incremental index keeps each step O(max_ngram^2).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/error.h"

namespace hyla::runtime {

/// How an NgramDrafter matches. validate() before constructing one.
struct NgramOptions {
  int64_t min_ngram = 1;  ///< in [1, max_ngram]: the shortest suffix worth matching
  int64_t max_ngram = 4;  ///< in [min_ngram, kMaxNgram]: the longest, tried first
};

/// The longest n-gram an NgramDrafter indexes (each appended token costs O(max_ngram^2)).
inline constexpr int64_t kMaxNgram = 32;

/// Checks `options`; the message names the field, the value and the allowed range.
Status validate(const NgramOptions& options);

/// One proposal: up to k tokens, and where they came from.
struct NgramDraft {
  /// The proposed tokens, a slice of the drafter's own sequence: valid until the next append()
  /// and while the drafter lives.
  /// Empty when nothing matched.
  std::span<const int32_t> tokens{};
  int64_t ngram = 0;   ///< length of the matched suffix, in [min_ngram, max_ngram]; 0: no match
  int64_t source = 0;  ///< position in the sequence of tokens[0] (the match ended just before it)
};

/// A request's sequence (prompt + accepted tokens) and, per n in [min_ngram, max_ngram], a hash
/// index from each n-gram that has a follower to the end of its most recent occurrence.
///
/// propose(k): for n = max_ngram down to min_ngram, the last n tokens' most recent occurrence
/// ending at e <= size() - 2 gives tokens[e + 1 .. min(e + k, size() - 1)]; the first n that
/// matches wins (a longer context predicts better), even when it yields fewer tokens. Overlapping
/// matches count ("a b a b a": the suffix "a b a" occurred at 0..2, proposing "b a").
/// Deterministic: the result depends only on the options and the tokens appended.
///
/// Cost: append() is O(max_ngram^2) per token, amortised (each level hashes one n-gram and
/// inserts it into an open-addressing table that doubles when half full); propose() is
/// O(max_ngram^2) and copies nothing. Memory: 4 bytes per token for the sequence plus at most
/// 16 bytes per token and level for the tables.
class NgramDrafter {
 public:
  /// The most tokens one drafter holds (positions are int32).
  static constexpr int64_t kMaxTokens = int64_t{1} << 30;

  /// `options` must satisfy validate() (checked here; it aborts otherwise).
  explicit NgramDrafter(const NgramOptions& options);

  /// Adds `tokens` (any int32 values) to the end of the sequence. Error, with nothing added: the
  /// sequence would exceed kMaxTokens.
  Status append(std::span<const int32_t> tokens);
  /// Up to `k` tokens guessed to follow the sequence (see the class comment); k < 1 proposes
  /// nothing.
  NgramDraft propose(int64_t k) const;

  /// Every token appended so far.
  std::span<const int32_t> tokens() const { return tokens_; }
  int64_t size() const { return int64_t(tokens_.size()); }
  const NgramOptions& options() const { return options_; }

 private:
  /// An open-addressing (linear probing) set of n-gram end positions, keyed by the n tokens that
  /// end there, holding one position (the most recent) per distinct n-gram.
  struct Level {
    int64_t n = 0;
    std::vector<int32_t> slots;  ///< end position, or -1 for an empty slot; size a power of 2
    int64_t count = 0;           ///< occupied slots
  };

  /// The hash of the n tokens ending at `end`.
  uint64_t hash(int64_t n, int64_t end) const;
  /// Whether the n tokens ending at `a` equal those ending at `b`.
  bool same(int64_t n, int64_t a, int64_t b) const;
  /// The slot holding the n-gram that ends at `end`, or the empty slot where it would go.
  size_t find_slot(const Level& level, int64_t end) const;
  /// Records `end` as the most recent end of its n-gram.
  void insert(Level& level, int64_t end);

  NgramOptions options_;
  std::vector<int32_t> tokens_;
  std::vector<Level> levels_;  ///< levels_[n - min_ngram]
};

}  // namespace hyla::runtime

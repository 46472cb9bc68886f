// Stop strings for streamed text (OpenAI's `stop`): text is cut before the first stop string, and
// streamed text that might still be the start of one is held back until it cannot be.
//   pending = held-back text + the new piece
//   a stop string inside pending -> emit what is before it, stop
//   else -> keep the longest suffix of pending that is a proper prefix of some stop string, emit
//           the rest
// A match can never begin in text already emitted: the suffix it would have begun with was a
// prefix of that stop string, so it was held. Pieces are whole UTF-8 (StreamingDecoder's), and a
// stop string starts on a character boundary, so the cut never splits a character.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace hyla::serve {

class StopStrings {
 public:
  /// Empty strings in `stops` are ignored (OpenAI ignores them too).
  explicit StopStrings(std::vector<std::string> stops);

  struct Piece {
    std::string text;      ///< safe to show now
    bool stopped = false;  ///< a stop string matched: `text` ends right before it; push no more
  };
  /// The next piece of generated text.
  Piece push(std::string_view piece);
  /// The generation ended without a stop string: everything still held back.
  std::string finish();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;  // held back: a suffix that is a proper prefix of some stop string
  bool stopped_ = false;
};

}  // namespace hyla::serve

// StopStrings (see stop_strings.h).
#include "serve/stop_strings.h"

#include <algorithm>

namespace hyla::serve {

StopStrings::StopStrings(std::vector<std::string> stops) {
  for (std::string& s : stops)
    if (!s.empty()) stops_.push_back(std::move(s));
}

StopStrings::Piece StopStrings::push(std::string_view piece) {
  Piece out;
  if (stopped_) return out;
  pending_.append(piece);
  if (stops_.empty()) {
    out.text.swap(pending_);
    return out;
  }
  // The earliest match of any stop string wins.
  size_t first = std::string::npos;
  for (const std::string& stop : stops_) first = std::min(first, pending_.find(stop));
  if (first != std::string::npos) {
    out.text = pending_.substr(0, first);
    out.stopped = stopped_ = true;
    pending_.clear();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of a stop string.
  size_t hold = 0;
  for (const std::string& stop : stops_) {
    const size_t most = std::min(stop.size() - 1, pending_.size());
    for (size_t n = most; n > hold; --n) {
      if (std::string_view(pending_).substr(pending_.size() - n) ==
          std::string_view(stop).substr(0, n)) {
        hold = n;
        break;
      }
    }
  }
  out.text = pending_.substr(0, pending_.size() - hold);
  pending_.erase(0, pending_.size() - hold);
  return out;
}

std::string StopStrings::finish() {
  std::string rest;
  rest.swap(pending_);
  return rest;
}

}  // namespace hyla::serve

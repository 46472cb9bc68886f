// StopStrings: the cut before a stop string and the hold-back of text that may still start one,
// fed piece by piece in every split of the text.
#include "serve/stop_strings.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace hyla::serve {
namespace {

/// Feeds `pieces` and returns what was shown, each push's output recorded in `shown`.
std::string run(StopStrings& stops, const std::vector<std::string>& pieces,
                std::vector<std::string>* shown = nullptr) {
  std::string out;
  for (const std::string& p : pieces) {
    StopStrings::Piece piece = stops.push(p);
    out += piece.text;
    if (shown) shown->push_back(piece.text);
    if (piece.stopped) return out;
  }
  return out + stops.finish();
}

TEST(StopStrings, NoStopsPassesEverythingAtOnce) {
  StopStrings stops({});
  EXPECT_EQ(stops.push("hello").text, "hello");
  EXPECT_EQ(stops.push(" world").text, " world");
  EXPECT_EQ(stops.finish(), "");
}

TEST(StopStrings, CutBeforeTheStopInOnePiece) {
  StopStrings stops({"END"});
  StopStrings::Piece p = stops.push("abcENDdef");
  EXPECT_EQ(p.text, "abc");
  EXPECT_TRUE(p.stopped);
  EXPECT_TRUE(stops.stopped());
  EXPECT_EQ(stops.push("more").text, "");  // nothing after the stop
}

TEST(StopStrings, HoldsBackAPossibleStartUntilItCannotMatch) {
  StopStrings stops({"END"});
  std::vector<std::string> shown;
  EXPECT_EQ(run(stops, {"abE", "Nx", "yz"}, &shown), "abENxyz");
  // "E" and then "EN" could start "END": held until "x" rules it out.
  ASSERT_EQ(shown.size(), 3u);
  EXPECT_EQ(shown[0], "ab");
  EXPECT_EQ(shown[1], "ENx");
  EXPECT_EQ(shown[2], "yz");
}

TEST(StopStrings, MatchAcrossPieceBoundaries) {
  StopStrings stops({"END"});
  std::vector<std::string> shown;
  EXPECT_EQ(run(stops, {"abE", "N", "Dzz"}, &shown), "ab");
  EXPECT_EQ(shown, (std::vector<std::string>{"ab", "", ""}));
}

TEST(StopStrings, HeldTextIsFlushedAtTheEnd) {
  StopStrings stops({"END"});
  StopStrings::Piece p = stops.push("xyzEN");
  EXPECT_EQ(p.text, "xyz");
  EXPECT_FALSE(p.stopped);
  EXPECT_EQ(stops.finish(), "EN");
}

TEST(StopStrings, EarliestOfSeveralStopsWins) {
  StopStrings stops({"world", "lo w", ""});  // the empty one is ignored
  EXPECT_EQ(run(stops, {"hel", "lo wor", "ld"}), "hel");
}

TEST(StopStrings, EverySplitOfTheTextGivesTheSameResult) {
  // The cut must not depend on where the pieces break.
  const std::string text = "one two <|stop|> three";
  const std::vector<std::string> stop_list = {"<|stop|>", "two <|x"};
  for (size_t a = 0; a <= text.size(); ++a) {
    for (size_t b = a; b <= text.size(); ++b) {
      StopStrings stops(stop_list);
      const std::string out =
          run(stops, {text.substr(0, a), text.substr(a, b - a), text.substr(b)});
      EXPECT_EQ(out, "one two ") << "split at " << a << ", " << b;
    }
  }
}

TEST(StopStrings, OverlappingPrefixKeepsTheLongestPossibleStart) {
  // "aab": after "aa" both "a" and "aa" could start it; the longest is held.
  StopStrings stops({"aab"});
  std::vector<std::string> shown;
  EXPECT_EQ(run(stops, {"xa", "a", "a", "b"}, &shown), "xa");
  EXPECT_EQ(shown, (std::vector<std::string>{"x", "", "a", ""}));
}

}  // namespace
}  // namespace hyla::serve

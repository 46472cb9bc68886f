// N-gram drafting (see ngram_drafter.h): a hash index per n-gram length, updated as tokens come.
#include "runtime/spec/ngram_drafter.h"

#include <algorithm>

namespace hyla::runtime {
namespace {

/// splitmix64's finaliser: every input bit moves every output bit, so linear probing on the low
/// bits sees well-spread keys even for small token ids.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

constexpr size_t kFirstSlots = 64;

}  // namespace

Status validate(const NgramOptions& options) {
  if (options.max_ngram < 1 || options.max_ngram > kMaxNgram)
    return invalid_argument("ngram drafter: max_ngram is ", options.max_ngram, ", expected in [1, ",
                            kMaxNgram, "]");
  if (options.min_ngram < 1 || options.min_ngram > options.max_ngram)
    return invalid_argument("ngram drafter: min_ngram is ", options.min_ngram,
                            ", expected in [1, max_ngram = ", options.max_ngram, "]");
  return ok_status();
}

NgramDrafter::NgramDrafter(const NgramOptions& options) : options_(options) {
  const Status status = validate(options);
  HYLA_CHECK(status.ok(), status.message(), " (validate() the options first)");
  for (int64_t n = options.min_ngram; n <= options.max_ngram; ++n)
    levels_.push_back(Level{.n = n, .slots = std::vector<int32_t>(kFirstSlots, -1), .count = 0});
}

uint64_t NgramDrafter::hash(int64_t n, int64_t end) const {
  uint64_t h = mix(uint64_t(n));
  for (int64_t t = end - n + 1; t <= end; ++t) h = mix(h ^ uint32_t(tokens_[size_t(t)]));
  return h;
}

bool NgramDrafter::same(int64_t n, int64_t a, int64_t b) const {
  const auto begin = tokens_.begin();
  return std::equal(begin + (a - n + 1), begin + (a + 1), begin + (b - n + 1));
}

size_t NgramDrafter::find_slot(const Level& level, int64_t end) const {
  const size_t mask = level.slots.size() - 1;
  size_t slot = size_t(hash(level.n, end)) & mask;
  // The table is at most half full, so an empty slot ends every probe.
  while (level.slots[slot] >= 0 && !same(level.n, level.slots[slot], end)) slot = (slot + 1) & mask;
  return slot;
}

void NgramDrafter::insert(Level& level, int64_t end) {
  const size_t slot = find_slot(level, end);
  if (level.slots[slot] < 0) {
    if (2 * (level.count + 1) > int64_t(level.slots.size())) {
      // Double and re-insert every position (distinct n-grams, so no slot is shared).
      std::vector<int32_t> old(level.slots.size() * 2, -1);
      old.swap(level.slots);
      for (int32_t position : old)
        if (position >= 0) level.slots[find_slot(level, position)] = position;
      level.slots[find_slot(level, end)] = int32_t(end);
    } else {
      level.slots[slot] = int32_t(end);
    }
    ++level.count;
  } else {
    level.slots[slot] = int32_t(end);  // a later occurrence of the same n-gram
  }
}

Status NgramDrafter::append(std::span<const int32_t> tokens) {
  if (int64_t(tokens.size()) > kMaxTokens - size())
    return out_of_range("ngram drafter: appending ", tokens.size(), " tokens to ", size(),
                        " would exceed the limit of ", kMaxTokens);
  for (int32_t token : tokens) {
    // The n-grams ending at the current last token now have a follower: index them.
    const int64_t end = size() - 1;
    tokens_.push_back(token);
    for (Level& level : levels_)
      if (end + 1 >= level.n) insert(level, end);
  }
  return ok_status();
}

NgramDraft NgramDrafter::propose(int64_t k) const {
  const int64_t last = size() - 1;
  if (k < 1) return {};
  // Longest first; the suffix itself (ending at `last`) is never in the index, so a hit ends at
  // or before last - 1 and has at least one follower.
  for (auto level = levels_.rbegin(); level != levels_.rend(); ++level) {
    if (last + 1 < level->n + 1) continue;  // no room for an earlier occurrence
    const int32_t end = level->slots[find_slot(*level, last)];
    if (end < 0) continue;
    const int64_t count = std::min(k, last - end);
    return {.tokens = std::span<const int32_t>(tokens_).subspan(size_t(end + 1), size_t(count)),
            .ngram = level->n,
            .source = end + 1};
  }
  return {};
}

}  // namespace hyla::runtime

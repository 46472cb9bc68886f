// HostSnapshots: the prefix cache's host-memory tier. A snapshot that must leave the state pool
// (its slot is wanted) moves here instead of being dropped, within a byte budget; a hit on it
// copies it straight into the request's working slot. Entries are whole slots (every linear
// layer's conv window and SSM state, in the pool's dtypes), copied synchronously.
#pragma once

#include <cstdint>
#include <vector>

#include "core/error.h"
#include "runtime/memory/state_pool.h"

namespace hyla::runtime {

class HostSnapshots {
 public:
  /// Ids this tier hands out start here, above every state-pool slot, so one int32 names a
  /// snapshot in either tier.
  static constexpr int32_t kFirstId = int32_t{1} << 30;
  static bool is_host(int32_t id) { return id >= kFirstId; }

  /// `budget_bytes` of host memory for snapshots of `slot_bytes` each.
  HostSnapshots(int64_t budget_bytes, int64_t slot_bytes);

  /// Room for one more entry.
  bool has_room() const { return (count() + 1) * slot_bytes_ <= budget_bytes_; }
  /// Copies `slot` of `pool` into a new entry; its id.
  int32_t put(const StatePool& pool, int32_t slot);
  /// Copies entry `id` into `slot` of `pool`. Error: an id this tier does not hold.
  Status load(int32_t id, StatePool& pool, int32_t slot) const;
  /// Frees entry `id`. Error: an id this tier does not hold.
  Status erase(int32_t id);
  bool holds(int32_t id) const;

  int64_t count() const { return int64_t(entries_.size() - free_.size()); }
  int64_t bytes() const { return count() * slot_bytes_; }

 private:
  int64_t budget_bytes_, slot_bytes_;
  std::vector<std::vector<uint8_t>> entries_;  ///< empty: a free entry
  std::vector<int32_t> free_;                  ///< free entry indices
};

}  // namespace hyla::runtime

// SnapshotTiers: where the prefix cache keeps snapshots that must leave the state pool (their slot
// is wanted), instead of dropping them. Up to two tiers, in this order:
//   device  memory on the pool's device, int8 entries only (PrefixCacheOptions::device_tier_bytes)
//   host    host memory (PrefixCacheOptions::host_bytes)
// A full tier passes its least recently used entry down to the next one (or drops it): the prefix
// cache runs that cascade, since it owns the tree (PrefixCache::make_tier_room).
// An entry is a whole slot: every linear layer's conv window in the pool's dtype and its SSM state,
// in the pool's dtype (native) or int8 with one fp32 scale per row of d_k (kernels/int8_rows.h:
// error at most max |row| / 254 per element; DESIGN.md §6 keeps conv native). A hit copies
// (dequantises) an entry into the request's working slot; the entry stays.
// Ids: the device tier's from 2^29, the host tier's from 2^30, above every state-pool slot, so one
// int32 names a snapshot wherever it is. Copies run on the current stream and wait for it.
#pragma once

#include <cstdint>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "runtime/memory/state_pool.h"

namespace hyla::runtime {

enum class SnapshotFormat : uint8_t { kNative, kInt8 };

class SnapshotTiers {
 public:
  static constexpr int32_t kFirstDeviceId = int32_t{1} << 29;
  static constexpr int32_t kFirstHostId = int32_t{1} << 30;
  /// The id names a tier entry, not a state-pool slot.
  static bool is_tiered(int32_t id) { return id >= kFirstDeviceId; }

  /// Tiers for snapshots of `pool`'s slots: a device tier of `device_bytes` (int8 only) and a host
  /// tier of `host_bytes`, each left out at 0. Errors: a device tier without int8, a budget that
  /// holds no entry (naming the entry's size).
  static Result<SnapshotTiers> create(const StatePool& pool, SnapshotFormat format,
                                      int64_t device_bytes, int64_t host_bytes);

  /// How many tiers (0 to 2); tier 0 takes what leaves the pool.
  int count() const { return int(tiers_.size()); }
  SnapshotFormat format() const { return format_; }
  /// The tier holding entry `id`, -1 for an id no tier holds (a pool slot, or a freed entry).
  int tier_of(int32_t id) const;
  bool is_host_tier(int tier) const { return tiers_[size_t(tier)].host; }
  bool has_room(int tier) const;
  /// Entries, their bytes, and one entry's bytes, of `tier`.
  int64_t entries(int tier) const { return tiers_[size_t(tier)].used; }
  int64_t bytes(int tier) const { return entries(tier) * entry_bytes_; }
  int64_t entry_bytes() const { return entry_bytes_; }

  /// Copies slot `slot` of `pool` into a new entry of `tier` (quantised for int8); its id. The
  /// tier must have room.
  int32_t put(int tier, const StatePool& pool, int32_t slot);
  /// Moves entry `id` into a new entry of `tier` (bytes as they are) and frees it; the new id.
  /// The tier must have room.
  int32_t move(int32_t id, int tier);
  /// Copies (dequantises) entry `id` into slot `slot` of `pool`. Error: an id no tier holds.
  Status load(int32_t id, StatePool& pool, int32_t slot);
  /// Frees entry `id`. Error: an id no tier holds.
  Status erase(int32_t id);

 private:
  struct Tier {
    bool host = false;
    int32_t first_id = 0;
    int64_t capacity = 0;  ///< entries
    int64_t used = 0;
    Tensor storage;                         ///< device tier: [capacity * entry_bytes] u8
    std::vector<std::vector<uint8_t>> own;  ///< host tier: one buffer per entry, made on first use
    std::vector<uint8_t> live;              ///< per entry
    std::vector<int32_t> free;              ///< free entry indices (a stack)
  };
  /// Where one linear layer's parts sit inside an entry.
  struct Part {
    int64_t conv = 0, ssm = 0, scale = 0;  ///< byte offsets (scale: int8 only)
  };

  SnapshotTiers() = default;
  uint8_t* entry(const Tier& tier, int64_t index);
  Device device_of(const Tier& tier) const { return tier.host ? Device::cpu() : device_; }
  int64_t take(Tier& tier);
  /// Slot `slot` of `pool` -> entry bytes at `dst` on `dst_device` (int8: the pool's device),
  /// and back.
  void pack(const StatePool& pool, int32_t slot, uint8_t* dst, Device dst_device);
  void unpack(const uint8_t* src, Device src_device, StatePool& pool, int32_t slot);

  SnapshotFormat format_ = SnapshotFormat::kNative;
  Device device_;  ///< the pool's
  int64_t entry_bytes_ = 0;
  std::vector<Part> parts_;  ///< per linear layer
  std::vector<Tier> tiers_;
  Tensor staging_;  ///< one int8 entry on the pool's device, for the host tier's (de)quantising
};

}  // namespace hyla::runtime

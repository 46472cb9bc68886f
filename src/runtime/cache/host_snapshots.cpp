// HostSnapshots (see host_snapshots.h).
#include "runtime/cache/host_snapshots.h"

#include "core/device_memory.h"

namespace hyla::runtime {

namespace {

/// Calls f(view of `slot`) for every per-slot tensor of the pool: each linear layer's conv window,
/// then its SSM state.
template <typename F>
void for_each_part(const StatePool& pool, int32_t slot, F&& f) {
  for (int i = 0; i < pool.num_layers(); ++i) {
    f(pool.conv_state(i).select(slot));
    f(pool.ssm_state(i).select(slot));
  }
}

}  // namespace

HostSnapshots::HostSnapshots(int64_t budget_bytes, int64_t slot_bytes)
    : budget_bytes_(budget_bytes), slot_bytes_(slot_bytes) {}

bool HostSnapshots::holds(int32_t id) const {
  const int64_t i = int64_t(id) - kFirstId;
  return i >= 0 && i < int64_t(entries_.size()) && !entries_[size_t(i)].empty();
}

int32_t HostSnapshots::put(const StatePool& pool, int32_t slot) {
  int32_t i;
  if (!free_.empty()) {
    i = free_.back();
    free_.pop_back();
  } else {
    i = int32_t(entries_.size());
    entries_.emplace_back();
  }
  std::vector<uint8_t>& bytes = entries_[size_t(i)];
  bytes.resize(size_t(slot_bytes_));
  size_t offset = 0;
  for_each_part(pool, slot, [&](const TensorView& part) {
    const size_t n = size_t(part.span_bytes());
    HYLA_CHECK(offset + n <= bytes.size(), "HostSnapshots: a slot outgrew ", slot_bytes_, " bytes");
    device_copy(bytes.data() + offset, Device::cpu(), part.raw(), part.device(), n);
    offset += n;
  });
  return kFirstId + i;
}

Status HostSnapshots::load(int32_t id, StatePool& pool, int32_t slot) const {
  if (!holds(id)) return internal_error("HostSnapshots: no entry ", id);
  const std::vector<uint8_t>& bytes = entries_[size_t(id - kFirstId)];
  size_t offset = 0;
  for_each_part(pool, slot, [&](const TensorView& part) {
    const size_t n = size_t(part.span_bytes());
    device_copy(part.raw(), part.device(), bytes.data() + offset, Device::cpu(), n);
    offset += n;
  });
  return ok_status();
}

Status HostSnapshots::erase(int32_t id) {
  if (!holds(id)) return internal_error("HostSnapshots: no entry ", id);
  std::vector<uint8_t>& bytes = entries_[size_t(id - kFirstId)];
  bytes.clear();
  bytes.shrink_to_fit();
  free_.push_back(id - kFirstId);
  return ok_status();
}

}  // namespace hyla::runtime

// SnapshotTiers (see snapshot_tiers.h).
#include "runtime/cache/snapshot_tiers.h"

#include "core/device_memory.h"
#include "kernels/int8_rows.h"

namespace hyla::runtime {

namespace {

constexpr int64_t align_up(int64_t n, int64_t to) { return (n + to - 1) / to * to; }

/// A slot's SSM state of one layer as rows of d_k: [HV * d_v, d_k].
TensorView ssm_rows(const StatePool& pool, int layer, int32_t slot) {
  const TensorView s = pool.ssm_state(layer).select(slot);
  return s.reshape({s.numel() / s.size(-1), s.size(-1)});
}

}  // namespace

Result<SnapshotTiers> SnapshotTiers::create(const StatePool& pool, SnapshotFormat format,
                                            int64_t device_bytes, int64_t host_bytes) {
  SnapshotTiers t;
  t.format_ = format;
  t.device_ = pool.options().device;
  int64_t offset = 0;
  for (int i = 0; i < pool.num_layers(); ++i) {
    Part part;
    part.conv = offset;
    offset = align_up(offset + pool.conv_state(i).select(0).span_bytes(), 16);
    part.ssm = offset;
    const TensorView rows = ssm_rows(pool, i, 0);
    if (format == SnapshotFormat::kNative) {
      offset = align_up(offset + rows.span_bytes(), 16);
    } else {
      offset = align_up(offset + rows.numel(), 16);
      part.scale = offset;
      offset = align_up(offset + rows.size(0) * int64_t(sizeof(float)), 16);
    }
    t.parts_.push_back(part);
  }
  t.entry_bytes_ = align_up(offset, 256);
  const auto add = [&](bool host, int64_t budget, const char* option) -> Status {
    if (budget <= 0) return ok_status();
    Tier tier;
    tier.host = host;
    tier.first_id = host ? kFirstHostId : kFirstDeviceId;
    tier.capacity = std::min<int64_t>(budget / t.entry_bytes_, kFirstDeviceId);
    if (tier.capacity == 0)
      return invalid_argument("prefix cache: ", option, " is ", budget,
                              " bytes, less than one snapshot (", t.entry_bytes_, " bytes in ",
                              format == SnapshotFormat::kInt8 ? "int8" : "the pool's dtypes", ")");
    if (!host)
      tier.storage = Tensor::empty({tier.capacity * t.entry_bytes_}, DType::kU8, t.device_);
    if (host) tier.own.resize(size_t(tier.capacity));
    tier.live.assign(size_t(tier.capacity), 0);
    for (int64_t i = tier.capacity - 1; i >= 0; --i) tier.free.push_back(int32_t(i));
    t.tiers_.push_back(std::move(tier));
    return ok_status();
  };
  if (device_bytes > 0 && format != SnapshotFormat::kInt8)
    return invalid_argument(
        "prefix cache: a device tier (device_tier_bytes ", device_bytes,
        ") holds int8 snapshots only (int8_snapshots); native ones belong in the state pool");
  HYLA_RETURN_IF_ERROR(add(false, device_bytes, "device_tier_bytes"));
  HYLA_RETURN_IF_ERROR(add(true, host_bytes, "host_bytes"));
  if (format == SnapshotFormat::kInt8 && !t.device_.is_cpu() && host_bytes > 0)
    t.staging_ = Tensor::empty({t.entry_bytes_}, DType::kU8, t.device_);
  return t;
}

int SnapshotTiers::tier_of(int32_t id) const {
  for (size_t t = 0; t < tiers_.size(); ++t) {
    const int64_t i = int64_t(id) - tiers_[t].first_id;
    if (i >= 0 && i < tiers_[t].capacity && tiers_[t].live[size_t(i)]) return int(t);
  }
  return -1;
}

bool SnapshotTiers::has_room(int tier) const { return !tiers_[size_t(tier)].free.empty(); }

uint8_t* SnapshotTiers::entry(const Tier& tier, int64_t index) {
  return tier.host ? const_cast<uint8_t*>(tier.own[size_t(index)].data())
                   : tier.storage.data<uint8_t>() + index * entry_bytes_;
}

int64_t SnapshotTiers::take(Tier& tier) {
  HYLA_CHECK(!tier.free.empty(), "SnapshotTiers: no room in the ", tier.host ? "host" : "device",
             " tier");
  const int32_t i = tier.free.back();
  tier.free.pop_back();
  tier.live[size_t(i)] = 1;
  ++tier.used;
  if (tier.host) tier.own[size_t(i)].resize(size_t(entry_bytes_));
  return i;
}

void SnapshotTiers::pack(const StatePool& pool, int32_t slot, uint8_t* dst, Device dst_device) {
  for (int i = 0; i < pool.num_layers(); ++i) {
    const Part& part = parts_[size_t(i)];
    const TensorView conv = pool.conv_state(i).select(slot);
    device_copy(dst + part.conv, dst_device, conv.raw(), device_, size_t(conv.span_bytes()));
    const TensorView rows = ssm_rows(pool, i, slot);
    if (format_ == SnapshotFormat::kNative) {
      device_copy(dst + part.ssm, dst_device, rows.raw(), device_, size_t(rows.span_bytes()));
      continue;
    }
    const Status quantized = kernels::quantize_int8_rows(
        {rows, TensorView(dst + part.ssm, DType::kI8, {rows.size(0), rows.size(1)}, device_),
         TensorView(dst + part.scale, DType::kF32, {rows.size(0)}, device_)});
    HYLA_CHECK(quantized.ok(), "SnapshotTiers: ", quantized.message());
  }
}

void SnapshotTiers::unpack(const uint8_t* src, Device src_device, StatePool& pool, int32_t slot) {
  for (int i = 0; i < pool.num_layers(); ++i) {
    const Part& part = parts_[size_t(i)];
    const TensorView conv = pool.conv_state(i).select(slot);
    device_copy(conv.raw(), device_, src + part.conv, src_device, size_t(conv.span_bytes()));
    const TensorView rows = ssm_rows(pool, i, slot);
    if (format_ == SnapshotFormat::kNative) {
      device_copy(rows.raw(), device_, src + part.ssm, src_device, size_t(rows.span_bytes()));
      continue;
    }
    uint8_t* in = const_cast<uint8_t*>(src);
    const Status dequantized = kernels::dequantize_int8_rows(
        {TensorView(in + part.ssm, DType::kI8, {rows.size(0), rows.size(1)}, device_),
         TensorView(in + part.scale, DType::kF32, {rows.size(0)}, device_), rows});
    HYLA_CHECK(dequantized.ok(), "SnapshotTiers: ", dequantized.message());
  }
}

int32_t SnapshotTiers::put(int tier, const StatePool& pool, int32_t slot) {
  Tier& t = tiers_[size_t(tier)];
  const int64_t i = take(t);
  uint8_t* dst = entry(t, i);
  if (format_ == SnapshotFormat::kInt8 && device_of(t) != device_) {
    // int8 is quantised where the pool is, then copied over.
    pack(pool, slot, staging_.data<uint8_t>(), device_);
    device_copy(dst, device_of(t), staging_.data<uint8_t>(), device_, size_t(entry_bytes_));
  } else {
    pack(pool, slot, dst, device_of(t));
  }
  return t.first_id + int32_t(i);
}

int32_t SnapshotTiers::move(int32_t id, int tier) {
  const int from = tier_of(id);
  HYLA_CHECK(from >= 0, "SnapshotTiers: move of entry ", id, ", which no tier holds");
  Tier& src = tiers_[size_t(from)];
  Tier& dst = tiers_[size_t(tier)];
  const int64_t i = take(dst);
  device_copy(entry(dst, i), device_of(dst), entry(src, id - src.first_id), device_of(src),
              size_t(entry_bytes_));
  const Status erased = erase(id);
  HYLA_CHECK(erased.ok(), erased.message());
  return dst.first_id + int32_t(i);
}

Status SnapshotTiers::load(int32_t id, StatePool& pool, int32_t slot) {
  const int tier = tier_of(id);
  if (tier < 0) return internal_error("SnapshotTiers: no entry ", id);
  const Tier& t = tiers_[size_t(tier)];
  const uint8_t* src = entry(t, id - t.first_id);
  if (format_ == SnapshotFormat::kInt8 && device_of(t) != device_) {
    device_copy(staging_.data<uint8_t>(), device_, src, device_of(t), size_t(entry_bytes_));
    unpack(staging_.data<uint8_t>(), device_, pool, slot);
  } else {
    unpack(src, device_of(t), pool, slot);
  }
  return ok_status();
}

Status SnapshotTiers::erase(int32_t id) {
  const int tier = tier_of(id);
  if (tier < 0) return internal_error("SnapshotTiers: no entry ", id);
  Tier& t = tiers_[size_t(tier)];
  const int32_t i = id - t.first_id;
  t.live[size_t(i)] = 0;
  --t.used;
  t.free.push_back(i);
  if (t.host) {
    t.own[size_t(i)].clear();
    t.own[size_t(i)].shrink_to_fit();
  }
  return ok_status();
}

}  // namespace hyla::runtime

// CUDA bodies of the MoE slot sort and row gather (see kernels/moe_align.h). moe_align runs
// three kernels, no atomics, so the order is the CPU's exactly:
//   count: one warp per expert scans every slot in index order, 4 consecutive slots per lane
//          (128 per warp step), a per-lane count summed once at the end (-> expert_offsets[e + 1]);
//          expert 0's warp also marks out-of-range ids' positions -1
//   scan:  one warp turns the counts into offsets (inclusive scan in place, 32 at a time)
//   place: one warp per expert scans the slots again; a slot's position is the expert's running
//          cursor + the hits of the lanes below (their 0..4 hit counts summed bit by bit through
//          three ballots) + the hits before it in its own lane
// Each warp reads all N = T * top_k ids (from L1 / L2: 160 KB at T = 4096, top-10), about 12
// instructions per 4 ids when the ids are contiguous (no index division): at E = 512, N = 40,960
// ~320 steps per warp, a few microseconds per kernel. moe_permute: one block per output row,
// threads over the width.
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/moe_align.h"

namespace hyla::kernels::cuda {

namespace {

constexpr unsigned kFullMask = 0xffffffffu;
constexpr int kWarpsPerBlock = 4;  // 128 blocks at E = 512: every SM gets a block
constexpr int kSlotsPerLane = 4;
constexpr int kSlotsPerStep = 32 * kSlotsPerLane;

struct AlignArgs {
  const int32_t* topk_ids;  // [T, top_k], row stride ids_row
  int32_t* expert_offsets;  // [E + 1]
  int32_t* sorted_slots;    // [N]
  int32_t* slot_positions;  // [N]
  int64_t ids_row;
  int32_t N;  // T * top_k (the entry checks it fits i32)
  int top_k, E;
};

/// The expert id of slot `slot` (< N); kContiguous: rows of top_k ids back to back.
template <bool kContiguous>
__device__ __forceinline__ int32_t id_of_slot(const AlignArgs& a, int32_t slot) {
  if constexpr (kContiguous) {
    return a.topk_ids[slot];
  } else {
    const int32_t t = slot / a.top_k;
    return a.topk_ids[int64_t(t) * a.ids_row + (slot - t * a.top_k)];
  }
}

template <bool kContiguous>
__global__ void moe_align_count_kernel(const __grid_constant__ AlignArgs a) {
  const int lane = threadIdx.x % 32;
  const int e = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  if (e >= a.E) return;  // uniform per warp
  int32_t count = 0;
  for (int64_t base = 0; base < a.N; base += kSlotsPerStep) {  // int64: N may be near INT32_MAX
#pragma unroll
    for (int j = 0; j < kSlotsPerLane; ++j) {
      const int64_t slot = base + lane * kSlotsPerLane + j;
      if (slot >= a.N) break;
      const int32_t id = id_of_slot<kContiguous>(a, int32_t(slot));
      count += id == e;
      if (e == 0 && (id < 0 || id >= a.E)) a.slot_positions[slot] = -1;
    }
  }
  count = __reduce_add_sync(kFullMask, count);
  if (lane == 0) {
    a.expert_offsets[e + 1] = count;
    if (e == 0) a.expert_offsets[0] = 0;
  }
}

/// One warp: expert_offsets[1..E] = inclusive prefix sums of the counts written there.
__global__ void moe_align_scan_kernel(const __grid_constant__ AlignArgs a) {
  const int lane = threadIdx.x;
  int32_t carry = 0;
  for (int base = 1; base <= a.E; base += 32) {  // same trip count on every lane
    const int i = base + lane;
    int32_t v = i <= a.E ? a.expert_offsets[i] : 0;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
      const int32_t below = __shfl_up_sync(kFullMask, v, o);
      if (lane >= o) v += below;
    }
    if (i <= a.E) a.expert_offsets[i] = carry + v;
    carry += __shfl_sync(kFullMask, v, 31);
  }
}

template <bool kContiguous>
__global__ void moe_align_place_kernel(const __grid_constant__ AlignArgs a) {
  const int lane = threadIdx.x % 32;
  const int e = blockIdx.x * kWarpsPerBlock + threadIdx.x / 32;
  if (e >= a.E) return;  // uniform per warp
  const unsigned lanes_below = (1u << lane) - 1u;
  int32_t cursor = a.expert_offsets[e];
  for (int64_t base = 0; base < a.N; base += kSlotsPerStep) {  // same trip count on every lane
    // this lane's slots base + 4 lane + j, j < 4, in index order: hit bit j
    unsigned hits = 0;
#pragma unroll
    for (int j = 0; j < kSlotsPerLane; ++j) {
      const int64_t slot = base + lane * kSlotsPerLane + j;
      if (slot < a.N && id_of_slot<kContiguous>(a, int32_t(slot)) == e) hits |= 1u << j;
    }
    // hits of the lanes below (each 0..4) from the bits of the per-lane counts
    const unsigned n = __popc(hits);
    const unsigned bit0 = __ballot_sync(kFullMask, n & 1u);
    const unsigned bit1 = __ballot_sync(kFullMask, n & 2u);
    const unsigned bit2 = __ballot_sync(kFullMask, n & 4u);
    int32_t position = cursor + __popc(bit0 & lanes_below) + 2 * __popc(bit1 & lanes_below) +
                       4 * __popc(bit2 & lanes_below);
#pragma unroll
    for (int j = 0; j < kSlotsPerLane; ++j) {
      if (hits & (1u << j)) {
        const int32_t slot = int32_t(base + lane * kSlotsPerLane + j);
        a.sorted_slots[position] = slot;
        a.slot_positions[slot] = position;
        ++position;
      }
    }
    cursor += __popc(bit0) + 2 * __popc(bit1) + 4 * __popc(bit2);
  }
}

template <typename T>
struct PermuteArgs {
  const T* x;  // [T, width], row stride x_row
  T* y;        // [N, width], row stride y_row
  const int32_t* sorted_slots;
  int64_t x_row, y_row, width, num_slots;
  int top_k;
};

/// y[p] = x[sorted_slots[p] / top_k]; zeros for a slot outside [0, num_slots).
template <typename T>
__global__ void moe_permute_kernel(const __grid_constant__ PermuteArgs<T> a) {
  const int64_t position = blockIdx.x;
  const int64_t slot = a.sorted_slots[position];
  T* dst = a.y + position * a.y_row;
  const bool valid = slot >= 0 && slot < a.num_slots;
  const T* src = a.x + (valid ? slot / a.top_k : 0) * a.x_row;
  for (int64_t i = threadIdx.x; i < a.width; i += blockDim.x)
    dst[i] = valid ? src[i] : from_float<T>(0.0f);
}

}  // namespace

Status moe_align(const MoeAlignParams& p, Stream stream) {
  AlignArgs a{};
  a.topk_ids = ptr<const int32_t>(p.topk_ids);
  a.expert_offsets = ptr<int32_t>(p.expert_offsets);
  a.sorted_slots = ptr<int32_t>(p.sorted_slots);
  a.slot_positions = ptr<int32_t>(p.slot_positions);
  a.ids_row = p.topk_ids.stride(0);
  a.N = int32_t(p.topk_ids.size(0) * p.topk_ids.size(1));
  a.top_k = int(p.topk_ids.size(1));
  a.E = int(p.num_experts);
  const cudaStream_t s = to_cuda(stream);
  const unsigned blocks = unsigned(ceil_div(a.E, kWarpsPerBlock));
  const bool contiguous = a.ids_row == a.top_k || p.topk_ids.size(0) <= 1;
  if (contiguous)
    moe_align_count_kernel<true><<<blocks, kWarpsPerBlock * 32, 0, s>>>(a);
  else
    moe_align_count_kernel<false><<<blocks, kWarpsPerBlock * 32, 0, s>>>(a);
  HYLA_CUDA_CHECK_LAUNCH();
  moe_align_scan_kernel<<<1, 32, 0, s>>>(a);
  HYLA_CUDA_CHECK_LAUNCH();
  if (contiguous)
    moe_align_place_kernel<true><<<blocks, kWarpsPerBlock * 32, 0, s>>>(a);
  else
    moe_align_place_kernel<false><<<blocks, kWarpsPerBlock * 32, 0, s>>>(a);
  HYLA_CUDA_CHECK_LAUNCH();
  return ok_status();
}

Status moe_permute(const MoePermuteParams& p, Stream stream) {
  const int64_t N = p.y.size(0);
  if (N == 0 || p.x.size(1) == 0) return ok_status();
  const bool known = dispatch_float(p.x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    PermuteArgs<T> a{};
    a.x = ptr<const T>(p.x);
    a.y = ptr<T>(p.y);
    a.sorted_slots = ptr<const int32_t>(p.sorted_slots);
    a.x_row = p.x.stride(0);
    a.y_row = p.y.stride(0);
    a.width = p.x.size(1);
    a.num_slots = p.x.size(0) * p.top_k;
    a.top_k = int(p.top_k);
    moe_permute_kernel<T><<<unsigned(N), 128, 0, to_cuda(stream)>>>(a);
    HYLA_CUDA_CHECK_LAUNCH();
  });
  if (!known)
    return internal_error("moe_permute: dtype ", dtype_name(p.x.dtype()),
                          " slipped past the checks");
  return ok_status();
}

}  // namespace hyla::kernels::cuda

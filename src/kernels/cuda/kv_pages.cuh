// Device helpers of the paged-cache kernels (kv_pages.cu, paged_attention.cu): which sequence a
// packed token belongs to, and where a sequence's position lives in the pages.
#pragma once

#include <cstdint>

namespace hyla::kernels::cuda::paged_detail {

/// The sequence b of packed token t: the largest b with cu[b] <= t (cu [B+1] non-decreasing,
/// cu[B] > t), so empty sequences are passed over.
__device__ __forceinline__ int sequence_of(const int32_t* cu, int B, int t) {
  int lo = 0, hi = B - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (cu[mid] <= t)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

/// Page id of position `pos` of sequence b, or -1 when pos < 0, the table has no such column, or
/// the id is outside [0, num_pages) (the caller skips it: CUDA calls get no host value checks).
__device__ __forceinline__ int64_t page_of(const int32_t* page_table, int64_t max_pages,
                                           int64_t num_pages, int64_t page_size, int b,
                                           int64_t pos) {
  if (pos < 0) return -1;
  const int64_t column = pos / page_size;
  if (column >= max_pages) return -1;
  const int32_t page = page_table[int64_t(b) * max_pages + column];
  return page >= 0 && page < num_pages ? page : -1;
}

}  // namespace hyla::kernels::cuda::paged_detail

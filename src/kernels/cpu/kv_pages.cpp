// CPU bodies of the paged-cache copies (see kernels/kv_pages.h): kv_page_write one parallel task
// per new token, kv_page_gather one per (sequence, row).
#include "kernels/kv_pages.h"

#include <algorithm>
#include <vector>

#include "kernels/cpu/tensor_access.h"

namespace hyla::kernels::cpu {

namespace {

/// Element offset of row `row` of page `page`, head `h` in pages [num_pages, page_size, H, d].
int64_t page_offset(const TensorView& pages, int64_t page, int64_t row, int64_t h) {
  return page * pages.stride(0) + row * pages.stride(1) + h * pages.stride(2);
}

/// Page and row of position `pos` of sequence b (values checked by the entry).
struct PageRow {
  int64_t page, row;
};
PageRow locate(const PageIndex& index, int64_t page_size, int64_t b, int64_t pos) {
  const int32_t* table = index.page_table.host<int32_t>();
  return {table[b * index.page_table.size(1) + pos / page_size], pos % page_size};
}

/// pages[position of token t] = rows[t] for every new token, rounded to the pages' dtype.
void write_rows(const TensorView& rows, const TensorView& pages, const PageIndex& index,
                const std::vector<int64_t>& position, const std::vector<int32_t>& sequence) {
  const int64_t T = rows.size(0), H = rows.size(1), d = rows.size(2);
  dispatch_float(pages.dtype(), [&]<typename P>(P) {
    P* dst = static_cast<P*>(pages.raw());
    const float* src = static_cast<const float*>(rows.raw());
    parallel_for(T, [&](int64_t t) {
      const PageRow at = locate(index, pages.size(1), sequence[size_t(t)], position[size_t(t)]);
      for (int64_t h = 0; h < H; ++h) {
        const float* from = src + t * rows.stride(0) + h * rows.stride(1);
        P* to = dst + page_offset(pages, at.page, at.row, h);
        for (int64_t i = 0; i < d; ++i) store_f32(to + i, from[i]);
      }
    });
  });
}

}  // namespace

void kv_page_write(const KvPageWriteParams& p) {
  const int64_t T = p.k.size(0), B = p.index.past.size(0);
  const int32_t* cu = p.index.cu_seqlens.host<int32_t>();
  const int32_t* past = p.index.past.host<int32_t>();
  // token t -> its sequence and position
  std::vector<int32_t> sequence(static_cast<size_t>(T));
  std::vector<int64_t> position(static_cast<size_t>(T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = cu[b]; t < cu[b + 1]; ++t) {
      sequence[size_t(t)] = int32_t(b);
      position[size_t(t)] = past[b] + (t - cu[b]);
    }
  write_rows(p.k, p.k_pages, p.index, position, sequence);
  if (p.v.defined()) write_rows(p.v, p.v_pages, p.index, position, sequence);
}

void kv_page_gather(const KvPageGatherParams& p) {
  const int64_t B = p.out.size(0), R = p.out.size(1), H = p.out.size(2), d = p.out.size(3);
  const int32_t* cu = p.index.cu_seqlens.host<int32_t>();
  const int32_t* past = p.index.past.host<int32_t>();
  float* out = static_cast<float*>(p.out.raw());
  dispatch_float(p.pages.dtype(), [&]<typename P>(P) {
    const P* src = static_cast<const P*>(p.pages.raw());
    parallel_for(B * R, [&](int64_t task) {
      const int64_t b = task / R, r = task % R, len = int64_t(past[b]) + cu[b + 1] - cu[b];
      for (int64_t h = 0; h < H; ++h) {
        float* to = out + b * p.out.stride(0) + r * p.out.stride(1) + h * p.out.stride(2);
        if (r >= len) {
          std::fill_n(to, d, 0.0f);
          continue;
        }
        const PageRow at = locate(p.index, p.pages.size(1), b, r);
        const P* from = src + page_offset(p.pages, at.page, at.row, h);
        for (int64_t i = 0; i < d; ++i) to[i] = load_f32(from + i);
      }
    });
  });
}

}  // namespace hyla::kernels::cpu

// CUDA bodies of the paged-cache copies (see kernels/kv_pages.h).
//   kv_page_write:  one block per new token t; its threads stride over the H * d elements of the
//                   token's k row (then v row), f32 in, the pages' dtype out (bf16 round to
//                   nearest even).
//   kv_page_gather: one block per (sequence b, row r) of out; threads stride over H * d; rows at
//                   or past past[b] + n_b, and rows of a skipped page, are zeros.
// Layouts: pages [num_pages, page_size, H, d] (last dim contiguous, strides in elements); rows
// [T, H, d] and out [B, R, H, d] likewise. Any H, d.
#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kv_pages.cuh"
#include "kernels/kv_pages.h"

namespace hyla::kernels::cuda {

namespace {

using paged_detail::page_of;
using paged_detail::sequence_of;

constexpr int kThreads = 128;

/// Where rows land in (or come from) the pages, shared by both kernels.
struct PageGeometry {
  const int32_t* cu_seqlens;  // [B+1]
  const int32_t* past;        // [B]
  const int32_t* page_table;  // [B, max_pages]
  int B;
  int64_t max_pages, num_pages, page_size;
};

PageGeometry page_geometry(const PageIndex& index, const TensorView& pages) {
  return {ptr<const int32_t>(index.cu_seqlens),
          ptr<const int32_t>(index.past),
          ptr<const int32_t>(index.page_table),
          int(index.past.size(0)),
          index.page_table.size(1),
          pages.size(0),
          pages.size(1)};
}

/// One tensor of rows [T, H, d] f32 and its pages [num_pages, page_size, H, d].
template <typename P>
struct RowsToPages {
  const float* rows;
  int64_t rows_stride_t, rows_stride_h;
  P* pages;
  int64_t pages_stride_page, pages_stride_row, pages_stride_h;
  int H, d;
};

template <typename P>
RowsToPages<P> rows_to_pages(const TensorView& rows, const TensorView& pages) {
  return {ptr<const float>(rows), rows.stride(0),    rows.stride(1),
          ptr<P>(pages),          pages.stride(0),   pages.stride(1),
          pages.stride(2),        int(rows.size(1)), int(rows.size(2))};
}

template <typename P>
__device__ void write_token(const RowsToPages<P>& x, int64_t t, int64_t page, int64_t row) {
  const float* src = x.rows + t * x.rows_stride_t;
  P* dst = x.pages + page * x.pages_stride_page + row * x.pages_stride_row;
  for (int e = threadIdx.x; e < x.H * x.d; e += blockDim.x) {
    const int h = e / x.d, i = e % x.d;
    dst[h * x.pages_stride_h + i] = from_float<P>(src[h * x.rows_stride_h + i]);
  }
}

struct WriteArgs {
  PageGeometry geo;
  bool has_v;
};

/// pages[position of token blockIdx.x] = k (and v) rows of that token.
template <typename P>
__global__ void kv_page_write_kernel(const __grid_constant__ WriteArgs a,
                                     const __grid_constant__ RowsToPages<P> k,
                                     const __grid_constant__ RowsToPages<P> v) {
  const int t = int(blockIdx.x);
  const int b = sequence_of(a.geo.cu_seqlens, a.geo.B, t);
  const int64_t pos = int64_t(a.geo.past[b]) + (t - a.geo.cu_seqlens[b]);
  const int64_t page =
      page_of(a.geo.page_table, a.geo.max_pages, a.geo.num_pages, a.geo.page_size, b, pos);
  if (page < 0) return;  // the whole block skips: no barrier below
  const int64_t row = pos % a.geo.page_size;
  write_token(k, t, page, row);
  if (a.has_v) write_token(v, t, page, row);
}

template <typename P>
struct GatherArgs {
  PageGeometry geo;
  const P* pages;  // [num_pages, page_size, H, d]
  int64_t pages_stride_page, pages_stride_row, pages_stride_h;
  float* out;  // [B, R, H, d]
  int64_t out_stride_b, out_stride_r, out_stride_h;
  int64_t R;
  int H, d;
};

/// out[b, r] = pages[position r of sequence b], or zeros past its rows (b, r from blockIdx.x).
template <typename P>
__global__ void kv_page_gather_kernel(const __grid_constant__ GatherArgs<P> a) {
  const int b = int(blockIdx.x / a.R);
  const int64_t r = blockIdx.x % a.R;
  const int64_t len = int64_t(a.geo.past[b]) + a.geo.cu_seqlens[b + 1] - a.geo.cu_seqlens[b];
  const int64_t page =
      r < len ? page_of(a.geo.page_table, a.geo.max_pages, a.geo.num_pages, a.geo.page_size, b, r)
              : -1;
  float* dst = a.out + b * a.out_stride_b + r * a.out_stride_r;
  const P* src =
      page < 0 ? nullptr
               : a.pages + page * a.pages_stride_page + (r % a.geo.page_size) * a.pages_stride_row;
  for (int e = threadIdx.x; e < a.H * a.d; e += blockDim.x) {
    const int h = e / a.d, i = e % a.d;
    dst[h * a.out_stride_h + i] = src ? to_float(src[h * a.pages_stride_h + i]) : 0.0f;
  }
}

}  // namespace

Status kv_page_write(const KvPageWriteParams& p, Stream stream) {
  const int64_t T = p.k.size(0);
  if (T == 0) return ok_status();
  const WriteArgs args{page_geometry(p.index, p.k_pages), p.v.defined()};
  const bool known = dispatch_float(p.k_pages.dtype(), [&](auto tag) {
    using P = decltype(tag);
    const RowsToPages<P> k = rows_to_pages<P>(p.k, p.k_pages);
    // without v the kernel never reads its argument: k stands in
    const RowsToPages<P> v = p.v.defined() ? rows_to_pages<P>(p.v, p.v_pages) : k;
    kv_page_write_kernel<P><<<unsigned(T), kThreads, 0, to_cuda(stream)>>>(args, k, v);
    HYLA_CUDA_CHECK_LAUNCH();
  });
  HYLA_CHECK(known, "kv_page_write: pages dtype passed the entry but has no kernel");
  return ok_status();
}

Status kv_page_gather(const KvPageGatherParams& p, Stream stream) {
  const int64_t B = p.out.size(0), R = p.out.size(1);
  if (B * R == 0) return ok_status();
  const bool known = dispatch_float(p.pages.dtype(), [&](auto tag) {
    using P = decltype(tag);
    const GatherArgs<P> args{page_geometry(p.index, p.pages),
                             ptr<const P>(p.pages),
                             p.pages.stride(0),
                             p.pages.stride(1),
                             p.pages.stride(2),
                             ptr<float>(p.out),
                             p.out.stride(0),
                             p.out.stride(1),
                             p.out.stride(2),
                             R,
                             int(p.out.size(2)),
                             int(p.out.size(3))};
    kv_page_gather_kernel<P><<<unsigned(B * R), kThreads, 0, to_cuda(stream)>>>(args);
    HYLA_CUDA_CHECK_LAUNCH();
  });
  HYLA_CHECK(known, "kv_page_gather: pages dtype passed the entry but has no kernel");
  return ok_status();
}

}  // namespace hyla::kernels::cuda

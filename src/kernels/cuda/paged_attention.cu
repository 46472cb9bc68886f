// CUDA body of paged attention (see kernels/paged_attention.h): one warp per (token t, query head
// h), 4 warps a block; decode (one token per sequence) and prefill (many) alike.
//   the warp walks positions j = 0 .. past[b] + i of its sequence through the page table, with an
//   online softmax (running max m, running sum l, fp32):
//     s = scale * <q, key_j>                    lanes hold dims lane, lane + 32, ...; warp_sum
//     m' = max(m, s);  c = exp(m - m');  w = exp(s - m')
//     l = l c + w;     acc = acc c + w v_j      acc: each lane its d_v / 32 dims
//   o = acc / l  (times sigmoid(gate) when given)
// q and acc stay in registers: kPerLane = ceil(max(d_qk, d_v) / 32) in {1, 2, 4, 8, 16}, so
// d_qk, d_v <= kPagedAttentionMaxHeadDim (512). Pages f32 or bf16, read as fp32.
// Against the CPU body (two-pass softmax, normalised weights): the same terms in another order.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/kv_pages.cuh"
#include "kernels/paged_attention.h"
#include "kernels/scalar_math.h"

namespace hyla::kernels::cuda {

namespace {

using paged_detail::page_of;
using paged_detail::sequence_of;

constexpr int kWarps = 4;  // warps (= (token, head) pairs) per block

template <typename P>
struct Args {
  const float* q;  // [T, HQ, d_qk]
  int64_t q_stride_t, q_stride_h;
  const P* k;  // [num_pages, page_size, HKV, d_k]
  int64_t k_stride_page, k_stride_row, k_stride_h;
  const P* k_rope;  // [num_pages, page_size, 1, d_qk - d_k] or null
  int64_t k_rope_stride_page, k_rope_stride_row;
  const P* v;  // [num_pages, page_size, HKV, d_v]
  int64_t v_stride_page, v_stride_row, v_stride_h;
  const float* gate;  // [T, HQ, d_v] or null
  int64_t gate_stride_t, gate_stride_h;
  float* o;  // [T, HQ, d_v]
  int64_t o_stride_t, o_stride_h;
  const int32_t* cu_seqlens;  // [B+1]
  const int32_t* past;        // [B]
  const int32_t* page_table;  // [B, max_pages]
  int B;
  int64_t max_pages, num_pages, page_size;
  int64_t pairs;  // T * HQ
  int HQ, group, d_qk, d_k, d_v;
  float scale;
};

template <typename P, int kPerLane>
__global__ void __launch_bounds__(kWarps * 32)
    paged_attention_kernel(const __grid_constant__ Args<P> a) {
  const int lane = threadIdx.x % 32;
  const int64_t pair = int64_t(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (pair >= a.pairs) return;  // whole warps leave together; no block barrier below
  const int t = int(pair / a.HQ), h = int(pair % a.HQ), h_kv = h / a.group;
  const int b = sequence_of(a.cu_seqlens, a.B, t);
  const int64_t len = int64_t(a.past[b]) + (t - a.cu_seqlens[b]) + 1;

  // q[t, h] in registers: lane holds dims lane + 32 c
  float q[kPerLane];
  const float* q_row = a.q + t * a.q_stride_t + h * a.q_stride_h;
#pragma unroll
  for (int c = 0; c < kPerLane; ++c) {
    const int i = lane + 32 * c;
    q[c] = i < a.d_qk ? q_row[i] : 0.0f;
  }

  float acc[kPerLane];
#pragma unroll
  for (int c = 0; c < kPerLane; ++c) acc[c] = 0.0f;
  float m = -INFINITY, l = 0.0f;
  for (int64_t j = 0; j < len; ++j) {
    const int64_t page = page_of(a.page_table, a.max_pages, a.num_pages, a.page_size, b, j);
    if (page < 0) continue;  // the same for every lane of the warp
    const int64_t row = j % a.page_size;
    const P* k_row = a.k + page * a.k_stride_page + row * a.k_stride_row + h_kv * a.k_stride_h;
    const P* r_row =
        a.k_rope ? a.k_rope + page * a.k_rope_stride_page + row * a.k_rope_stride_row : nullptr;
    // s = scale * <q, [k | k_rope]>
    float partial = 0.0f;
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) {
      const int i = lane + 32 * c;
      if (i < a.d_k)
        partial += q[c] * to_float(k_row[i]);
      else if (i < a.d_qk)
        partial += q[c] * to_float(r_row[i - a.d_k]);
    }
    const float s = warp_sum(partial) * a.scale;
    // online softmax: rescale what was summed under the old max
    const float m_new = fmaxf(m, s);
    const float correction = expf(m - m_new);  // exp(-inf) = 0 on the first key
    const float w = expf(s - m_new);
    l = l * correction + w;
    const P* v_row = a.v + page * a.v_stride_page + row * a.v_stride_row + h_kv * a.v_stride_h;
#pragma unroll
    for (int c = 0; c < kPerLane; ++c) {
      const int i = lane + 32 * c;
      acc[c] = acc[c] * correction + (i < a.d_v ? w * to_float(v_row[i]) : 0.0f);
    }
    m = m_new;
  }

  // o = acc / l, times sigmoid(gate)
  const float inv_l = l > 0.0f ? 1.0f / l : 0.0f;
  float* o_row = a.o + t * a.o_stride_t + h * a.o_stride_h;
  const float* g_row = a.gate ? a.gate + t * a.gate_stride_t + h * a.gate_stride_h : nullptr;
#pragma unroll
  for (int c = 0; c < kPerLane; ++c) {
    const int i = lane + 32 * c;
    if (i >= a.d_v) continue;
    float out = acc[c] * inv_l;
    if (g_row) out *= sigmoid(g_row[i]);
    o_row[i] = out;
  }
}

template <typename P>
Args<P> make_args(const PagedAttentionParams& p) {
  const bool rope = p.k_rope_pages.defined(), gated = p.gate.defined();
  return {ptr<const float>(p.q),
          p.q.stride(0),
          p.q.stride(1),
          ptr<const P>(p.k_pages),
          p.k_pages.stride(0),
          p.k_pages.stride(1),
          p.k_pages.stride(2),
          rope ? ptr<const P>(p.k_rope_pages) : nullptr,
          rope ? p.k_rope_pages.stride(0) : 0,
          rope ? p.k_rope_pages.stride(1) : 0,
          ptr<const P>(p.v_pages),
          p.v_pages.stride(0),
          p.v_pages.stride(1),
          p.v_pages.stride(2),
          gated ? ptr<const float>(p.gate) : nullptr,
          gated ? p.gate.stride(0) : 0,
          gated ? p.gate.stride(1) : 0,
          ptr<float>(p.o),
          p.o.stride(0),
          p.o.stride(1),
          ptr<const int32_t>(p.index.cu_seqlens),
          ptr<const int32_t>(p.index.past),
          ptr<const int32_t>(p.index.page_table),
          int(p.index.past.size(0)),
          p.index.page_table.size(1),
          p.k_pages.size(0),
          p.k_pages.size(1),
          p.q.size(0) * p.q.size(1),
          int(p.q.size(1)),
          int(p.q.size(1) / p.k_pages.size(2)),
          int(p.q.size(2)),
          int(p.k_pages.size(3)),
          int(p.v_pages.size(3)),
          0.0f};
}

template <typename P, int kPerLane>
void launch(const Args<P>& args, cudaStream_t stream) {
  const int64_t blocks = ceil_div(args.pairs, kWarps);
  paged_attention_kernel<P, kPerLane><<<unsigned(blocks), kWarps * 32, 0, stream>>>(args);
  HYLA_CUDA_CHECK_LAUNCH();
}

}  // namespace

Status paged_attention(const PagedAttentionParams& p, Stream stream) {
  const int64_t d_qk = p.q.size(2), d_v = p.v_pages.size(3);
  if (p.q.size(0) * p.q.size(1) == 0) return ok_status();
  // HF: scaling = head_dim ** -0.5 in double, applied as a float (as the CPU body)
  const float scale = p.scale > 0.0f ? p.scale : float(1.0 / std::sqrt(double(d_qk)));
  const int64_t per_lane = ceil_div(std::max(d_qk, d_v), 32);
  const bool known = dispatch_float(p.k_pages.dtype(), [&](auto tag) {
    using P = decltype(tag);
    Args<P> args = make_args<P>(p);
    args.scale = scale;
    const cudaStream_t s = to_cuda(stream);
    if (per_lane <= 1)
      launch<P, 1>(args, s);
    else if (per_lane <= 2)
      launch<P, 2>(args, s);
    else if (per_lane <= 4)
      launch<P, 4>(args, s);
    else if (per_lane <= 8)
      launch<P, 8>(args, s);
    else
      launch<P, 16>(args, s);  // the entry bounds d_qk, d_v by 512 = 16 * 32
  });
  HYLA_CHECK(known, "paged_attention: pages dtype passed the entry but has no kernel");
  return ok_status();
}

}  // namespace hyla::kernels::cuda

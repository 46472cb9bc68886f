// CUDA body of paged attention (see kernels/paged_attention.h). One kernel serves both paths; a
// block owns `rows` query rows that read the same kv head, and walks a range of that head's keys
// in tiles of kTileKeys positions staged in shared memory as fp32, so every K/V row is read from
// memory once per block, not once per query row:
//   decode (T = B): a block per (token, kv head, head chunk, key split); its rows are the query
//     heads of the chunk (up to 16 of the group). With more than one split each block writes its
//     partial (m, l, unnormalised acc) per row to the workspace and merge_kernel combines them.
//   prefill (T > B): a block per (query tile of bq tokens of one sequence, kv head, head chunk),
//     rows = bq tokens x the chunk's heads; the causal mask is applied per row.
// Per tile of keys j (positions k0 .. k0 + 31), each warp for its `RW` rows:
//   s_r,j = scale * <q_r, key_j>             lane j: its key row (float4 reads, padded rows)
//           -inf for a skipped page, a position past the block's range or past row r's causal end
//   m' = max(m, max_j s);  c = exp(m - m');  p_j = exp(s_j - m')   (online softmax, fp32)
//   l = l c + p_j (per lane, summed over the warp at the end);  acc = acc c + sum_j p_j v_j
//                                            acc: lane holds dims 4 lane + 128 c .. + 3
// o = acc / l (times sigmoid(gate)); with splits: o = sum_s e^(m_s - M) acc_s / sum_s e^(m_s - M)
// l_s. Against the CPU body (two-pass softmax, normalised weights): the same terms in another
// order.
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

constexpr int kWarps = 4, kThreads = kWarps * 32;
constexpr int kTileKeys = 32;  // key positions per shared-memory tile: one per lane
constexpr int kLoadBatch = 8;  // global loads a thread issues before storing them

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
  int HQ, group, d_qk, d_k, d_v;
  int dq4, dv4;  // d_qk, d_v rounded up to 4: shared-memory row widths (zero padded)
  float scale;
  bool vec;  // every page row starts 4-element aligned and d_k, d_rope, d_v are multiples of 4
  // tiling
  int bq;              // query tokens per block; 1: block x is token x
  int heads;           // query heads per block (a chunk of the group); bq * heads <= rows
  int head_chunks;     // ceil(group / heads)
  int splits;          // key splits (blockIdx.z); > 1: partials to ws_*, else o directly
  int64_t split_keys;  // keys per split, a multiple of kTileKeys
  float* ws_ml;        // [T, HQ, splits, 2] (m, l)
  float* ws_acc;       // [T, HQ, splits, d_v]
};

/// Floats between key rows in shared memory: a multiple of 4 that is 4 mod 8, so the float4 reads
/// of 8 lanes (8 consecutive rows, one quarter-warp phase) start in 8 different bank quads.
__host__ __device__ constexpr int key_stride(int dq4) { return dq4 % 8 == 0 ? dq4 + 4 : dq4; }

/// Shared-memory floats of a block of `rows` query rows.
int64_t smem_floats(int dq4, int dv4, int rows) {
  return int64_t(kTileKeys) * key_stride(dq4) + int64_t(kTileKeys) * dv4 + int64_t(rows) * dq4 +
         int64_t(rows) * kTileKeys;
}

/// The prefill tiles of sequence b occupy block indices [cu[b] / bq + b, .. + ceil(n_b / bq)):
/// disjoint and increasing in b, all below ceil(T / bq) + B. The sequence of block x: the largest
/// b whose first index is <= x.
__device__ __forceinline__ int tile_sequence(const int32_t* cu, int B, int bq, int x) {
  int lo = 0, hi = B - 1;
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (cu[mid] / bq + mid <= x)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

__device__ __forceinline__ float4 load4(const float* p) {
  return *reinterpret_cast<const float4*>(p);
}
__device__ __forceinline__ float4 load4(const __nv_bfloat16* p) {
  // bf16 -> f32 is exact: the 16 bits are the high half of the float
  const uint2 raw = *reinterpret_cast<const uint2*>(p);
  return make_float4(__uint_as_float(raw.x << 16), __uint_as_float(raw.x & 0xffff0000u),
                     __uint_as_float(raw.y << 16), __uint_as_float(raw.y & 0xffff0000u));
}
__device__ __forceinline__ float get(const float4& x, int i) {
  return i == 0 ? x.x : i == 1 ? x.y : i == 2 ? x.z : x.w;
}

/// Elements e .. e + 3 of the key row [k | k_rope] (zeros past d_qk) of (page, row).
template <typename P>
__device__ __forceinline__ float4 key_chunk(const Args<P>& a, int64_t page, int64_t row, int h_kv,
                                            int e) {
  const P* k_row = a.k + page * a.k_stride_page + row * a.k_stride_row + h_kv * a.k_stride_h;
  const P* r_row =
      a.k_rope ? a.k_rope + page * a.k_rope_stride_page + row * a.k_rope_stride_row : nullptr;
  if (a.vec) return e < a.d_k ? load4(k_row + e) : load4(r_row + (e - a.d_k));
  float x[4];
#pragma unroll
  for (int u = 0; u < 4; ++u) {
    const int i = e + u;
    x[u] = i < a.d_k ? to_float(k_row[i]) : i < a.d_qk ? to_float(r_row[i - a.d_k]) : 0.0f;
  }
  return make_float4(x[0], x[1], x[2], x[3]);
}

/// Elements e .. e + 3 of the value row of (page, row) (zeros past d_v).
template <typename P>
__device__ __forceinline__ float4 value_chunk(const Args<P>& a, int64_t page, int64_t row, int h_kv,
                                              int e) {
  const P* v_row = a.v + page * a.v_stride_page + row * a.v_stride_row + h_kv * a.v_stride_h;
  if (a.vec) return load4(v_row + e);
  float x[4];
#pragma unroll
  for (int u = 0; u < 4; ++u) x[u] = e + u < a.d_v ? to_float(v_row[e + u]) : 0.0f;
  return make_float4(x[0], x[1], x[2], x[3]);
}

/// RW query rows per warp (rows = kWarps * RW per block); VC chunks of 128 value dims per lane
/// (d_v <= 128 VC).
template <typename P, int RW, int VC>
__global__ void __launch_bounds__(kThreads, 1) attention_kernel(const __grid_constant__ Args<P> a) {
  constexpr int kRows = kWarps * RW;
  extern __shared__ float4 smem4[];
  __shared__ int key_page[kTileKeys];  // page of each tile position, -1: skipped
  __shared__ int key_row[kTileKeys];
  const int ks_stride = key_stride(a.dq4);
  float* const ks = reinterpret_cast<float*>(smem4);  // [kTileKeys, ks_stride]
  float* const vs = ks + kTileKeys * ks_stride;       // [kTileKeys, dv4]
  float* const qs = vs + kTileKeys * a.dv4;           // [kRows, dq4]
  float* const ps = qs + kRows * a.dq4;               // [kRows, kTileKeys]
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;

  // block -> sequence b, its first token i0 (index among b's new tokens)
  int b, i0;
  if (a.bq == 1) {
    const int t = int(blockIdx.x);
    b = sequence_of(a.cu_seqlens, a.B, t);
    i0 = t - a.cu_seqlens[b];
  } else {
    const int x = int(blockIdx.x);
    b = tile_sequence(a.cu_seqlens, a.B, a.bq, x);
    const int tile = x - (a.cu_seqlens[b] / a.bq + b), n = a.cu_seqlens[b + 1] - a.cu_seqlens[b];
    const int tiles = (n + a.bq - 1) / a.bq;
    if (tile >= tiles) return;       // surplus block (the whole block leaves)
    i0 = (tiles - 1 - tile) * a.bq;  // the last (longest) tiles first: a shorter tail of blocks
  }
  const int first = a.cu_seqlens[b], n_b = a.cu_seqlens[b + 1] - first;
  const int64_t past_b = a.past[b];
  const int h_kv = int(blockIdx.y) / a.head_chunks, chunk = int(blockIdx.y) % a.head_chunks;
  const int split = int(blockIdx.z);

  // key range of the block: its split of [0, visible keys of its last token)
  const int64_t block_len = past_b + min(i0 + a.bq, n_b);
  const int64_t k_begin = int64_t(split) * a.split_keys;
  const int64_t k_end = a.splits > 1 ? min(block_len, k_begin + a.split_keys) : block_len;

  // query row r of the block -> (token slot, head); slot == -1: unused row
  auto row_slot = [&](int r) {
    const int slot = r / a.heads, hic = chunk * a.heads + r % a.heads;
    return slot < a.bq && i0 + slot < n_b && hic < a.group ? slot : -1;
  };
  auto row_head = [&](int r) { return h_kv * a.group + chunk * a.heads + r % a.heads; };

  // q rows to shared memory (zeros for unused rows and past d_qk)
  const int q_chunks = a.dq4 / 4;
  for (int idx = tid; idx < kRows * q_chunks; idx += kThreads) {
    const int r = idx / q_chunks, e = 4 * (idx % q_chunks), slot = row_slot(r);
    float x[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    if (slot >= 0) {
      const float* q_row =
          a.q + int64_t(first + i0 + slot) * a.q_stride_t + int64_t(row_head(r)) * a.q_stride_h;
#pragma unroll
      for (int u = 0; u < 4; ++u)
        if (e + u < a.d_qk) x[u] = q_row[e + u];
    }
    *reinterpret_cast<float4*>(qs + r * a.dq4 + e) = make_float4(x[0], x[1], x[2], x[3]);
  }

  // this warp's rows: visible keys (0 for unused rows) and running softmax state
  int64_t len[RW];
  float m[RW], l[RW];
  float4 acc[RW][VC];
#pragma unroll
  for (int r = 0; r < RW; ++r) {
    const int slot = row_slot(warp * RW + r);
    len[r] = slot >= 0 ? past_b + i0 + slot + 1 : 0;
    m[r] = -INFINITY;
    l[r] = 0.0f;
#pragma unroll
    for (int c = 0; c < VC; ++c) acc[r][c] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  }

  const int k_chunks = a.dq4 / 4, chunks = k_chunks + a.dv4 / 4;  // float4s per key position
  for (int64_t k0 = k_begin; k0 < k_end; k0 += kTileKeys) {
    __syncthreads();  // the previous tile's readers are done (first tile: q rows are written)
    if (tid < kTileKeys) {
      const int64_t pos = k0 + tid;
      key_page[tid] =
          pos < k_end ? int(page_of(a.page_table, a.max_pages, a.num_pages, a.page_size, b, pos))
                      : -1;
      key_row[tid] = int(pos % a.page_size);
    }
    __syncthreads();
    // K and V rows of the tile to shared memory as fp32; skipped positions are zeros
    for (int base = 0; base < kTileKeys * chunks; base += kThreads * kLoadBatch) {
      float4 val[kLoadBatch];
#pragma unroll
      for (int u = 0; u < kLoadBatch; ++u) {
        const int idx = base + u * kThreads + tid;
        val[u] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (idx < kTileKeys * chunks) {
          const int j = idx / chunks, ch = idx % chunks, page = key_page[j];
          if (page >= 0)
            val[u] = ch < k_chunks ? key_chunk(a, page, key_row[j], h_kv, 4 * ch)
                                   : value_chunk(a, page, key_row[j], h_kv, 4 * (ch - k_chunks));
        }
      }
#pragma unroll
      for (int u = 0; u < kLoadBatch; ++u) {
        const int idx = base + u * kThreads + tid;
        if (idx < kTileKeys * chunks) {
          const int j = idx / chunks, ch = idx % chunks;
          float* dst =
              ch < k_chunks ? ks + j * ks_stride + 4 * ch : vs + j * a.dv4 + 4 * (ch - k_chunks);
          *reinterpret_cast<float4*>(dst) = val[u];
        }
      }
    }
    __syncthreads();

    // scores: lane = key position of the tile, one dot product per row of the warp
    float s[RW];
#pragma unroll
    for (int r = 0; r < RW; ++r) s[r] = 0.0f;
    const float* k_row = ks + lane * ks_stride;
    const float* q_rows = qs + warp * RW * a.dq4;
    for (int e = 0; e < a.dq4; e += 4) {
      const float4 k4 = *reinterpret_cast<const float4*>(k_row + e);
#pragma unroll
      for (int r = 0; r < RW; ++r) {
        const float4 q4 = *reinterpret_cast<const float4*>(q_rows + r * a.dq4 + e);
        s[r] = fmaf(q4.x, k4.x, s[r]);
        s[r] = fmaf(q4.y, k4.y, s[r]);
        s[r] = fmaf(q4.z, k4.z, s[r]);
        s[r] = fmaf(q4.w, k4.w, s[r]);
      }
    }
    // online softmax per row; p to shared memory for the value pass
    const int64_t pos = k0 + lane;
    const bool key_ok = key_page[lane] >= 0;
    float* p_rows = ps + warp * RW * kTileKeys;
#pragma unroll
    for (int r = 0; r < RW; ++r) {
      const float x = key_ok && pos < len[r] ? s[r] * a.scale : -INFINITY;
      const float m_new = fmaxf(m[r], warp_max(x));
      // m_new = -inf: nothing visible yet, acc and l stay 0
      const float correction = m_new == -INFINITY ? 1.0f : expf(m[r] - m_new);
      const float p = m_new == -INFINITY ? 0.0f : expf(x - m_new);
      l[r] = l[r] * correction + p;
#pragma unroll
      for (int c = 0; c < VC; ++c) {
        acc[r][c].x *= correction;
        acc[r][c].y *= correction;
        acc[r][c].z *= correction;
        acc[r][c].w *= correction;
      }
      m[r] = m_new;
      p_rows[r * kTileKeys + lane] = p;
    }
    __syncwarp();
    // acc += sum_j p_j v_j: lane holds dims 4 lane + 128 c; positions past the range have p = 0
    const int tile_n = int(min(int64_t(kTileKeys), k_end - k0));
    for (int j = 0; j < tile_n; j += 4) {
      float4 p4[RW];
#pragma unroll
      for (int r = 0; r < RW; ++r)
        p4[r] = *reinterpret_cast<const float4*>(p_rows + r * kTileKeys + j);
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) {
#pragma unroll
        for (int c = 0; c < VC; ++c) {
          const int col = 4 * lane + 128 * c;
          if (col >= a.dv4) continue;
          const float4 v4 = *reinterpret_cast<const float4*>(vs + (j + jj) * a.dv4 + col);
#pragma unroll
          for (int r = 0; r < RW; ++r) {
            const float pj = get(p4[r], jj);
            acc[r][c].x = fmaf(pj, v4.x, acc[r][c].x);
            acc[r][c].y = fmaf(pj, v4.y, acc[r][c].y);
            acc[r][c].z = fmaf(pj, v4.z, acc[r][c].z);
            acc[r][c].w = fmaf(pj, v4.w, acc[r][c].w);
          }
        }
      }
    }
  }

  // results: o = acc / l (times sigmoid(gate)), or the partial (m, l, acc) of this split
#pragma unroll
  for (int r = 0; r < RW; ++r) {
    const float l_sum = warp_sum(l[r]);
    const int slot = row_slot(warp * RW + r);
    if (slot < 0) continue;
    const int64_t t = first + i0 + slot;
    const int h = row_head(warp * RW + r);
    float* out;
    float inv_l = 1.0f;
    const float* g_row = nullptr;
    if (a.splits > 1) {
      const int64_t part = (t * a.HQ + h) * a.splits + split;
      if (lane == 0) {
        a.ws_ml[2 * part] = m[r];
        a.ws_ml[2 * part + 1] = l_sum;
      }
      out = a.ws_acc + part * a.d_v;
    } else {
      out = a.o + t * a.o_stride_t + int64_t(h) * a.o_stride_h;
      inv_l = l_sum > 0.0f ? 1.0f / l_sum : 0.0f;  // every key skipped: 0
      if (a.gate) g_row = a.gate + t * a.gate_stride_t + int64_t(h) * a.gate_stride_h;
    }
#pragma unroll
    for (int c = 0; c < VC; ++c) {
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int i = 4 * lane + 128 * c + u;
        if (i >= a.d_v) continue;
        float x = get(acc[r][c], u) * inv_l;
        if (g_row) x *= sigmoid(g_row[i]);
        out[i] = x;
      }
    }
  }
}

struct MergeArgs {
  const float* ws_ml;   // [T, HQ, splits, 2]
  const float* ws_acc;  // [T, HQ, splits, d_v]
  const float* gate;    // [T, HQ, d_v] or null
  int64_t gate_stride_t, gate_stride_h;
  float* o;
  int64_t o_stride_t, o_stride_h;
  int HQ, d_v, splits;
};

constexpr int kMergeThreads = 128;

/// o[t, h] = sum_s w_s acc_s / sum_s w_s l_s,  w_s = exp(m_s - max_s m_s) (0 for an empty split);
/// 0 when every split is empty. A block per (t, h).
__global__ void __launch_bounds__(kMergeThreads) merge_kernel(const __grid_constant__ MergeArgs a) {
  extern __shared__ float weight[];  // [splits]
  __shared__ float scratch[32];
  const int64_t row = blockIdx.x, t = row / a.HQ, h = row % a.HQ;
  const float* ml = a.ws_ml + row * a.splits * 2;
  float m_max = -INFINITY;
  for (int s = threadIdx.x; s < a.splits; s += kMergeThreads) m_max = fmaxf(m_max, ml[2 * s]);
  m_max = block_max(m_max, scratch);
  float l_sum = 0.0f;
  for (int s = threadIdx.x; s < a.splits; s += kMergeThreads) {
    const float m = ml[2 * s];
    const float w = m == -INFINITY ? 0.0f : expf(m - m_max);
    weight[s] = w;
    l_sum += w * ml[2 * s + 1];
  }
  l_sum = block_sum(l_sum, scratch);  // its barriers also publish weight[]
  const float inv_l = l_sum > 0.0f ? 1.0f / l_sum : 0.0f;
  const float* acc = a.ws_acc + row * a.splits * a.d_v;
  float* o_row = a.o + t * a.o_stride_t + h * a.o_stride_h;
  const float* g_row = a.gate ? a.gate + t * a.gate_stride_t + h * a.gate_stride_h : nullptr;
  for (int i = threadIdx.x; i < a.d_v; i += kMergeThreads) {
    float x = 0.0f;
    for (int s = 0; s < a.splits; ++s) x = fmaf(weight[s], acc[int64_t(s) * a.d_v + i], x);
    x *= inv_l;
    if (g_row) x *= sigmoid(g_row[i]);
    o_row[i] = x;
  }
}

template <typename P>
Args<P> make_args(const PagedAttentionParams& p) {
  const bool rope = p.k_rope_pages.defined(), gated = p.gate.defined();
  Args<P> a{};
  a.q = ptr<const float>(p.q);
  a.q_stride_t = p.q.stride(0);
  a.q_stride_h = p.q.stride(1);
  a.k = ptr<const P>(p.k_pages);
  a.k_stride_page = p.k_pages.stride(0);
  a.k_stride_row = p.k_pages.stride(1);
  a.k_stride_h = p.k_pages.stride(2);
  a.k_rope = rope ? ptr<const P>(p.k_rope_pages) : nullptr;
  a.k_rope_stride_page = rope ? p.k_rope_pages.stride(0) : 0;
  a.k_rope_stride_row = rope ? p.k_rope_pages.stride(1) : 0;
  a.v = ptr<const P>(p.v_pages);
  a.v_stride_page = p.v_pages.stride(0);
  a.v_stride_row = p.v_pages.stride(1);
  a.v_stride_h = p.v_pages.stride(2);
  a.gate = gated ? ptr<const float>(p.gate) : nullptr;
  a.gate_stride_t = gated ? p.gate.stride(0) : 0;
  a.gate_stride_h = gated ? p.gate.stride(1) : 0;
  a.o = ptr<float>(p.o);
  a.o_stride_t = p.o.stride(0);
  a.o_stride_h = p.o.stride(1);
  a.cu_seqlens = ptr<const int32_t>(p.index.cu_seqlens);
  a.past = ptr<const int32_t>(p.index.past);
  a.page_table = ptr<const int32_t>(p.index.page_table);
  a.B = int(p.index.past.size(0));
  a.max_pages = p.index.page_table.size(1);
  a.num_pages = p.k_pages.size(0);
  a.page_size = p.k_pages.size(1);
  a.HQ = int(p.q.size(1));
  a.group = int(p.q.size(1) / p.k_pages.size(2));
  a.d_qk = int(p.q.size(2));
  a.d_k = int(p.k_pages.size(3));
  a.d_v = int(p.v_pages.size(3));
  a.dq4 = (a.d_qk + 3) / 4 * 4;
  a.dv4 = (a.d_v + 3) / 4 * 4;
  // vector loads: 4-element chunks of a row never straddle k / k_rope and start aligned
  const auto aligned = [](const TensorView& t) {
    const int64_t bytes = 4 * int64_t(sizeof(P));
    return reinterpret_cast<uintptr_t>(t.raw()) % bytes == 0 && t.stride(0) % 4 == 0 &&
           t.stride(1) % 4 == 0 && t.stride(2) % 4 == 0 && t.size(3) % 4 == 0;
  };
  a.vec = aligned(p.k_pages) && aligned(p.v_pages) && (!rope || aligned(p.k_rope_pages));
  return a;
}

template <typename P, int RW, int VC>
void launch(const Args<P>& a, int64_t blocks_x, cudaStream_t stream) {
  const auto kernel = attention_kernel<P, RW, VC>;
  const size_t smem = size_t(smem_floats(a.dq4, a.dv4, kWarps * RW)) * sizeof(float);
  allow_dynamic_smem(kernel, smem);  // d 256 needs ~75 KB, d 512 up to ~170 KB of the 227
  const dim3 grid(unsigned(blocks_x), unsigned(a.head_chunks * (a.HQ / a.group)),
                  unsigned(a.splits));  // (token or query tile, kv head x head chunk, split)
  kernel<<<grid, kThreads, smem, stream>>>(a);
  HYLA_CUDA_CHECK_LAUNCH();
}

template <typename P, int RW>
void launch_rows(const Args<P>& a, int VC, int64_t blocks_x, cudaStream_t stream) {
  if (VC <= 1)
    launch<P, RW, 1>(a, blocks_x, stream);
  else if (VC <= 2)
    launch<P, RW, 2>(a, blocks_x, stream);
  else if constexpr (RW <= 4)
    launch<P, RW, 4>(a, blocks_x, stream);
  else
    HYLA_CHECK(false, "paged_attention: 8 rows a warp with d_v > 256 has no kernel");
}

}  // namespace

Status paged_attention(const PagedAttentionParams& p, Stream stream) {
  const int64_t T = p.q.size(0), HQ = p.q.size(1), d_qk = p.q.size(2), d_v = p.v_pages.size(3);
  const int64_t HKV = p.k_pages.size(2), group = HQ / HKV, B = p.index.cu_seqlens.size(0) - 1;
  if (T * HQ == 0) return ok_status();
  // HF: scaling = head_dim ** -0.5 in double, applied as a float (as the CPU body)
  const float scale = p.scale > 0.0f ? p.scale : float(1.0 / std::sqrt(double(d_qk)));
  const bool decode = T == B;
  const int VC = int(ceil_div(d_v, 128));  // 1, 2, 3 or 4 (3 runs as 4)
  // rows a warp: decode as few as the group needs (up to 4: 16 heads a block); prefill 8 (4 with
  // d_v > 256, for registers), the block's rows then filled with bq tokens x the group's heads
  const int RW = decode ? (group <= 4 ? 1 : group <= 8 ? 2 : 4) : (VC <= 2 ? 8 : 4);
  const int rows = kWarps * RW;
  const int heads = int(std::min<int64_t>(group, rows));
  const int bq = decode ? 1 : rows / heads;
  const int64_t splits = paged_attention_splits(p);
  const int64_t blocks_x = bq == 1 ? T : ceil_div(T, bq) + B;
  const int64_t max_context = p.index.page_table.size(1) * p.k_pages.size(1);
  const bool known = dispatch_float(p.k_pages.dtype(), [&](auto tag) {
    using P = decltype(tag);
    Args<P> a = make_args<P>(p);
    a.scale = scale;
    a.bq = bq;
    a.heads = heads;
    a.head_chunks = int(ceil_div(group, heads));
    a.splits = int(splits);
    a.split_keys = ceil_div(ceil_div(max_context, splits), kTileKeys) * kTileKeys;
    if (splits > 1) {
      float* ws = ptr<float>(p.workspace);
      const int64_t partials = T * HQ * splits;
      a.ws_ml = ws;
      a.ws_acc = ws + (2 * partials + 3) / 4 * 4;  // the layout of paged_attention_workspace_bytes
    }
    const cudaStream_t s = to_cuda(stream);
    if (RW == 1)
      launch_rows<P, 1>(a, VC, blocks_x, s);
    else if (RW == 2)
      launch_rows<P, 2>(a, VC, blocks_x, s);
    else if (RW == 4)
      launch_rows<P, 4>(a, VC, blocks_x, s);
    else
      launch_rows<P, 8>(a, VC, blocks_x, s);
    if (splits > 1) {
      const MergeArgs m{a.ws_ml,      a.ws_acc,     a.gate, a.gate_stride_t, a.gate_stride_h, a.o,
                        a.o_stride_t, a.o_stride_h, a.HQ,   a.d_v,           a.splits};
      merge_kernel<<<unsigned(T * HQ), kMergeThreads, size_t(splits) * sizeof(float), s>>>(m);
      HYLA_CUDA_CHECK_LAUNCH();
    }
  });
  HYLA_CHECK(known, "paged_attention: pages dtype passed the entry but has no kernel");
  return ok_status();
}

}  // namespace hyla::kernels::cuda

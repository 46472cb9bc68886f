// CUDA body of gated_delta_rule_chunk (kernels/gated_delta_rule.h); cpu/gated_delta_rule.cpp
// (chunk_step) is the specification. Correct first: plain loops, one thread per output element or
// one warp per dot product; speed is a later issue. Per chunk of n <= 64 tokens of one sequence and
// value head, with G_t = sum_{s<=t} g_s (inclusive, within the chunk):
//   A_kk[t, j] = beta_t <k_t, k_j exp(G_t - G_j)>     (t > j)
//   A_qk[t, j] =        <q_t, k_j exp(G_t - G_j)>     (t >= j)
//   (I + A_kk) [U | W] = [beta V | beta K exp(G)]      forward substitution, one column a thread
//   Delta = U - W S0,  O = (Q exp(G)) S0 + A_qk Delta,  S = exp(G_n) S0 + (K exp(G_n - G))^T Delta
// exp(G_t - G_j) is formed pair by pair from one non-positive exponent, also for KDA's per-channel
// gate, so nothing overflows however strong the decay (the CPU's 16-token sub-chunks reach the same
// values with fewer exps).
// Three launches on the caller's stream, all scratch in the caller's workspace
// (ChunkWorkspaceLayout, per-token regions indexed by the packed token):
//   plan    <<<1, 1>>>                    chunk_first, chunk_seq, boundary_first from cu_seqlens
//                                          (gated_delta_rule_chunk_plan.cuh)
//   prepare <<<(max_chunks, HV), 256>>>    G, A_kk (shared), A_qk, W, U, Q exp(G), K exp(G_n - G),
//                                          exp(G_n) of one chunk
//   state   <<<(B, HV, ceil(d_v/32)), 256>>> chunks of one sequence in order; the state tile
//                                          S^T [32 value rows, d_k] in shared memory; o,
//                                          chunk_states, final slot
// Layouts: q, k [T, H, d_k]; v, o [T, HV, d_v] (last dim contiguous, f32|bf16); g [T, HV] or
// [T, HV, d_k] f32; state pool [slot, HV, d_v, d_k] f32|bf16 (S^T, d_k contiguous). d_k <= 128.
#include <algorithm>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/gated_delta_rule_chunk_plan.cuh"
#include "kernels/gated_delta_rule.h"
#include "kernels/scalar_math.h"

namespace hyla::kernels::cuda {

namespace {

constexpr int kChunk = kDeltaRuleChunk;  // tokens per chunk (64)
constexpr int kThreads = 256;            // both main kernels: 8 warps
constexpr int kWarps = kThreads / 32;
constexpr int kTileV = 32;  // value rows of the state per block of the state kernel

/// The call's operands (ChunkCall) and this body's workspace regions.
struct ChunkArgs : ChunkCall {
  float* w;      // [T, HV, d_k]
  float* u;      // [T, HV, d_v]
  float* qg;     // [T, HV, d_k]
  float* kd;     // [T, HV, d_k]
  float* aqk;    // [T, HV, 64]
  float* decay;  // [max_chunks, HV, d_k or 1]
};

__device__ __forceinline__ float load_elem(const void* base, bool bf16, int64_t i) {
  return bf16 ? to_float(static_cast<const __nv_bfloat16*>(base)[i])
              : static_cast<const float*>(base)[i];
}
__device__ __forceinline__ void store_elem(void* base, bool bf16, int64_t i, float x) {
  if (bf16) {
    static_cast<__nv_bfloat16*>(base)[i] = from_float<__nv_bfloat16>(x);
  } else {
    static_cast<float*>(base)[i] = x;
  }
}

__device__ __forceinline__ void sequence_range(const ChunkArgs& a, int b, int& begin, int& end) {
  chunk_sequence_range(a.cu, a.cu_stride, a.T, b, begin, end);
}
__device__ __forceinline__ int64_t pool_slot(const int32_t* slots, int64_t stride, int b,
                                             int64_t num_slots) {
  return chunk_pool_slot(slots, stride, b, num_slots);
}

// ---- prepare: everything of one (chunk, value head) that does not need the state ----
// Shared memory (floats): q [64, d_k], k [64, d_k], G [64, d_k or 1], beta [64], A_kk [64, 64].
int prepare_smem_floats(int d_k, bool per_channel) {
  return 2 * kChunk * d_k + kChunk * (per_channel ? d_k : 1) + kChunk + kChunk * kChunk;
}

__global__ void __launch_bounds__(kThreads)
    chunk_prepare_kernel(const __grid_constant__ ChunkArgs a) {
  const int chunk = blockIdx.x, hv = blockIdx.y;
  const int b = a.chunk_seq[chunk];
  if (b < 0) return;  // past the last chunk of the batch
  int begin, end;
  sequence_range(a, b, begin, end);
  const int t0 = begin + (chunk - a.chunk_first[b]) * kChunk;
  const int n = min(kChunk, end - t0);
  const int kh = hv / a.group, d_k = a.d_k, d_v = a.d_v, HV = a.HV;
  const int gdim = a.per_channel ? d_k : 1;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;

  extern __shared__ float smem[];
  float* q_s = smem;                    // [64, d_k] normalised, scaled q
  float* k_s = q_s + kChunk * d_k;      // [64, d_k] normalised k
  float* G_s = k_s + kChunk * d_k;      // [64, gdim] inclusive cumulative log decay
  float* beta_s = G_s + kChunk * gdim;  // [64]
  float* akk_s = beta_s + kChunk;       // [64, 64] strictly lower part used

  // q, k rows (one warp per token): l2norm over d_k (eps inside the sqrt), then q * scale.
  for (int t = warp; t < n; t += kWarps) {
    const int64_t qo = int64_t(t0 + t) * a.q_st + int64_t(kh) * a.q_sh;
    const int64_t ko = int64_t(t0 + t) * a.k_st + int64_t(kh) * a.k_sh;
    float qss = 0.0f, kss = 0.0f;
    for (int c = lane; c < d_k; c += 32) {
      const float qc = load_elem(a.q, a.q_bf16, qo + c), kc = load_elem(a.k, a.k_bf16, ko + c);
      q_s[t * d_k + c] = qc;
      k_s[t * d_k + c] = kc;
      qss += qc * qc;
      kss += kc * kc;
    }
    qss = warp_sum(qss);
    kss = warp_sum(kss);
    const float q_mul = a.l2norm ? a.scale / sqrtf(qss + kL2NormEps) : a.scale;
    const float k_mul = a.l2norm ? 1.0f / sqrtf(kss + kL2NormEps) : 1.0f;
    for (int c = lane; c < d_k; c += 32) {
      q_s[t * d_k + c] *= q_mul;
      k_s[t * d_k + c] *= k_mul;
    }
  }
  // G: one thread per channel sums the gates in token order; beta.
  for (int c = threadIdx.x; c < gdim; c += kThreads) {
    float G = 0.0f;
    for (int t = 0; t < n; ++t) {
      const float g = a.g[int64_t(t0 + t) * a.g_st + int64_t(hv) * a.g_sh + c];
      G = t ? g + G : g;
      G_s[t * gdim + c] = G;
    }
  }
  for (int t = threadIdx.x; t < n; t += kThreads)
    beta_s[t] = a.beta[int64_t(t0 + t) * a.beta_st + int64_t(hv) * a.beta_sh];
  __syncthreads();

  // A_kk (shared) and A_qk (workspace row of token t0 + t): one warp per row t, lanes over d_k.
  for (int t = warp; t < n; t += kWarps) {
    const float* qt = q_s + t * d_k;
    const float* kt = k_s + t * d_k;
    const float* Gt = G_s + t * gdim;
    float* aqk_row = a.aqk + (int64_t(t0 + t) * HV + hv) * kChunk;
    for (int j = 0; j <= t; ++j) {
      const float* kj = k_s + j * d_k;
      const float* Gj = G_s + j * gdim;
      float sk = 0.0f, sq = 0.0f;
      for (int c = lane; c < d_k; c += 32) {
        const float kjd = a.per_channel ? kj[c] * expf(Gt[c] - Gj[c]) : kj[c];
        sk += kt[c] * kjd;
        sq += qt[c] * kjd;
      }
      sk = warp_sum(sk);
      sq = warp_sum(sq);
      if (lane == 0) {
        if (a.per_channel) {
          if (j < t) akk_s[t * kChunk + j] = sk * beta_s[t];
          aqk_row[j] = sq;
        } else if (j < t) {
          const float decay = expf(Gt[0] - Gj[0]);
          akk_s[t * kChunk + j] = sk * (beta_s[t] * decay);
          aqk_row[j] = sq * decay;
        } else {
          aqk_row[j] = sq;  // diagonal: exp(G_t - G_t) = 1
        }
      }
    }
  }
  __syncthreads();

  // (I + A_kk) [U | W] = [beta V | beta K exp(G)]: one thread per column, rows in order; each
  // thread reads back only the rows of its own column it stored before.
  for (int col = threadIdx.x; col < d_v + d_k; col += kThreads) {
    const bool is_u = col < d_v;
    const int c = is_u ? col : col - d_v;
    float* x = is_u ? a.u + int64_t(hv) * d_v + c : a.w + int64_t(hv) * d_k + c;
    const int64_t x_stride = int64_t(HV) * (is_u ? d_v : d_k);  // one packed token
    x += int64_t(t0) * x_stride;
    for (int t = 0; t < n; ++t) {
      float rhs;
      if (is_u) {
        rhs = load_elem(a.v, a.v_bf16, int64_t(t0 + t) * a.v_st + int64_t(hv) * a.v_sh + c) *
              beta_s[t];
      } else {
        rhs = beta_s[t] * k_s[t * d_k + c] * expf(G_s[t * gdim + (a.per_channel ? c : 0)]);
      }
      const float* akk = akk_s + t * kChunk;
      for (int j = 0; j < t; ++j) rhs -= akk[j] * x[j * x_stride];
      x[t * x_stride] = rhs;
    }
  }
  // Q exp(G), K exp(G_n - G) per (token, channel), and exp(G_n) of the chunk.
  const float* Gn = G_s + (n - 1) * gdim;
  for (int i = threadIdx.x; i < n * d_k; i += kThreads) {
    const int t = i / d_k, c = i % d_k;
    const int gc = a.per_channel ? c : 0;
    const float G = G_s[t * gdim + gc];
    const int64_t row = (int64_t(t0 + t) * HV + hv) * d_k;
    a.qg[row + c] = q_s[t * d_k + c] * expf(G);
    a.kd[row + c] = k_s[t * d_k + c] * expf(Gn[gc] - G);
  }
  for (int c = threadIdx.x; c < gdim; c += kThreads)
    a.decay[(int64_t(chunk) * HV + hv) * gdim + c] = expf(Gn[c]);
}

// ---- state: the chunks of one sequence in order, for 32 value rows of one value head ----
// Shared memory (floats): S^T tile [32, d_k + 1] (padded: lanes over value rows hit different
// banks), one [64, d_k] staging tile (W, then Q exp(G), then K exp(G_n - G)), A_qk [64, 64],
// Delta [64, 32], exp(G_n) [d_k or 1].
int state_smem_floats(int d_k) {
  return kTileV * (d_k + 1) + kChunk * d_k + kChunk * kChunk + kChunk * kTileV + std::max(d_k, 1);
}

__global__ void __launch_bounds__(kThreads)
    chunk_state_kernel(const __grid_constant__ ChunkArgs a) {
  const int b = blockIdx.x, hv = blockIdx.y, v0 = blockIdx.z * kTileV;
  const int d_k = a.d_k, d_v = a.d_v, HV = a.HV, ld = d_k + 1;
  const int rows = min(kTileV, d_v - v0);  // value rows of this tile
  extern __shared__ float smem[];
  float* st = smem;                            // [32, d_k + 1]  S^T rows v0 .. v0 + rows
  float* buf = st + kTileV * ld;               // [64, d_k]
  float* aqk_s = buf + kChunk * d_k;           // [64, 64]
  float* delta_s = aqk_s + kChunk * kChunk;    // [64, 32]
  float* decay_s = delta_s + kChunk * kTileV;  // [d_k or 1]

  const int64_t state_floats = int64_t(d_v) * d_k;  // one pool entry [d_v, d_k]
  const int64_t initial = pool_slot(a.initial_slots, a.initial_stride, b, a.num_slots);
  for (int i = threadIdx.x; i < rows * d_k; i += kThreads) {
    const int r = i / d_k, c = i % d_k;
    st[r * ld + c] =
        initial < 0 ? 0.0f
                    : load_elem(a.pool, a.pool_bf16,
                                (initial * HV + hv) * state_floats + int64_t(v0 + r) * d_k + c);
  }

  int begin, end;
  sequence_range(a, b, begin, end);
  const int first = a.chunk_first[b], last = a.chunk_first[b + 1];
  int64_t boundary = a.boundary_first[b];
  for (int chunk = first; chunk < last; ++chunk) {
    const int t0 = begin + (chunk - first) * kChunk;
    const int n = min(kChunk, end - t0);
    const int gdim = a.per_channel ? d_k : 1;
    // Stage W, A_qk (lower triangle) and exp(G_n).
    for (int i = threadIdx.x; i < n * d_k; i += kThreads) {
      const int t = i / d_k, c = i % d_k;
      buf[i] = a.w[(int64_t(t0 + t) * HV + hv) * d_k + c];
    }
    for (int i = threadIdx.x; i < n * kChunk; i += kThreads) {
      const int t = i / kChunk, j = i % kChunk;
      if (j <= t) aqk_s[i] = a.aqk[(int64_t(t0 + t) * HV + hv) * kChunk + j];
    }
    for (int c = threadIdx.x; c < gdim; c += kThreads)
      decay_s[c] = a.decay[(int64_t(chunk) * HV + hv) * gdim + c];
    __syncthreads();  // also orders the initial state load before its first use

    // Delta[t, r] = U[t, v0 + r] - <W_t, S^T_r>: lanes over value rows r, warps over tokens t.
    const int r = threadIdx.x % kTileV;
    for (int t = threadIdx.x / kTileV; t < n; t += kThreads / kTileV) {
      float d = 0.0f;
      if (r < rows) {
        float ws = 0.0f;
        for (int c = 0; c < d_k; ++c) ws += buf[t * d_k + c] * st[r * ld + c];
        d = a.u[(int64_t(t0 + t) * HV + hv) * d_v + v0 + r] - ws;
      }
      delta_s[t * kTileV + r] = d;
    }
    __syncthreads();
    for (int i = threadIdx.x; i < n * d_k; i += kThreads) {
      const int t = i / d_k, c = i % d_k;
      buf[i] = a.qg[(int64_t(t0 + t) * HV + hv) * d_k + c];
    }
    __syncthreads();

    // O[t, r] = <Q exp(G)_t, S^T_r> + sum_{j <= t} A_qk[t, j] Delta[j, r]
    for (int t = threadIdx.x / kTileV; t < n; t += kThreads / kTileV) {
      if (r >= rows) continue;
      float qs = 0.0f, ad = 0.0f;
      for (int c = 0; c < d_k; ++c) qs += buf[t * d_k + c] * st[r * ld + c];
      for (int j = 0; j <= t; ++j) ad += aqk_s[t * kChunk + j] * delta_s[j * kTileV + r];
      store_elem(a.o, a.o_bf16, int64_t(t0 + t) * a.o_st + int64_t(hv) * a.o_sh + v0 + r, qs + ad);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < n * d_k; i += kThreads) {
      const int t = i / d_k, c = i % d_k;
      buf[i] = a.kd[(int64_t(t0 + t) * HV + hv) * d_k + c];
    }
    __syncthreads();

    // S^T[r, c] = S^T[r, c] exp(G_n)[c] + sum_t Delta[t, r] K exp(G_n - G)[t, c]; one thread per
    // element, so the chunk-boundary copy needs no barrier of its own.
    const bool keep = n == kChunk && a.chunk_states != nullptr && boundary < a.num_chunk_states;
    for (int i = threadIdx.x; i < rows * d_k; i += kThreads) {
      const int rr = i / d_k, c = i % d_k;
      float kdd = 0.0f;
      for (int t = 0; t < n; ++t) kdd += delta_s[t * kTileV + rr] * buf[t * d_k + c];
      const float s = st[rr * ld + c] * decay_s[a.per_channel ? c : 0] + kdd;
      st[rr * ld + c] = s;
      if (keep)
        a.chunk_states[(boundary * HV + hv) * state_floats + int64_t(v0 + rr) * d_k + c] = s;
    }
    if (n == kChunk) ++boundary;
    __syncthreads();  // the next chunk restages buf, aqk_s, decay_s
  }

  const int64_t final_slot = pool_slot(a.final_slots, a.final_stride, b, a.num_slots);
  if (final_slot < 0) return;
  for (int i = threadIdx.x; i < rows * d_k; i += kThreads) {
    const int rr = i / d_k, c = i % d_k;
    store_elem(a.pool, a.pool_bf16,
               (final_slot * HV + hv) * state_floats + int64_t(v0 + rr) * d_k + c, st[rr * ld + c]);
  }
}

}  // namespace

Status gated_delta_rule_chunk(const GatedDeltaRuleParams& p, Stream stream) {
  const ChunkWorkspaceShape shape = chunk_workspace_shape(p);
  if (shape.tensor_cores) return gated_delta_rule_chunk_mma(p, stream);
  const ChunkWorkspaceLayout layout = chunk_workspace_layout(shape);
  if (shape.HV == 0 || shape.d_v == 0) return ok_status();  // o and the states are empty

  ChunkArgs a{};
  static_cast<ChunkCall&>(a) = chunk_call(p, shape, layout);
  float* ws = ptr<float>(p.workspace);
  a.w = ws + layout.w;
  a.u = ws + layout.u;
  a.qg = ws + layout.qg;
  a.kd = ws + layout.kd;
  a.aqk = ws + layout.aqk;
  a.decay = ws + layout.decay;

  const cudaStream_t s = to_cuda(stream);
  const int max_dk = int(kCudaChunkMaxKeyDim);  // the limits d_k = 128 needs
  allow_dynamic_smem(chunk_prepare_kernel,
                     size_t(prepare_smem_floats(max_dk, /*per_channel=*/true)) * sizeof(float));
  allow_dynamic_smem(chunk_state_kernel, size_t(state_smem_floats(max_dk)) * sizeof(float));

  launch_chunk_plan(a, s);
  if (layout.max_chunks > 0) {
    const size_t smem = size_t(prepare_smem_floats(a.d_k, a.per_channel)) * sizeof(float);
    chunk_prepare_kernel<<<dim3(unsigned(layout.max_chunks), unsigned(a.HV)), kThreads, smem, s>>>(
        a);
    HYLA_CUDA_CHECK_LAUNCH();
  }
  const size_t smem = size_t(state_smem_floats(a.d_k)) * sizeof(float);
  const unsigned tiles = unsigned(ceil_div(a.d_v, kTileV));
  chunk_state_kernel<<<dim3(unsigned(a.B), unsigned(a.HV), tiles), kThreads, smem, s>>>(a);
  HYLA_CUDA_CHECK_LAUNCH();
  return ok_status();
}

}  // namespace hyla::kernels::cuda

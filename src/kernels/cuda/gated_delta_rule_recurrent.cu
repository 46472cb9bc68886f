// CUDA body of gated_delta_rule_recurrent (kernels/gated_delta_rule.h; the CPU body in
// cpu/gated_delta_rule.cpp is the specification): token by token, any d_k <= 256 and any d_v,
// GDN (one decay per value head) and KDA (one per key channel), GVA, states from and back to
// pool slots (f32 or bf16), optional step_states.
// Per value head hv (key head hv / (HV / H)) and token t, for each state row i_v of S^T (d_k
// contiguous; the rows are independent of one another):
//   q = scale q / |q|,  k = k / |k|               (l2norm when use_qk_l2norm; eps inside the sqrt)
//   row *= exp(g);  delta = beta (v[i_v] - <row, k>);  row += delta k;  o[i_v] = <row, q>
// Work: one block per (sequence, value head, tile of kRowsPerBlock rows); each warp keeps kRows
// rows in registers, lane l holding columns l, l + 32, ... (kN = ceil(d_k / 32) of them), and runs
// the sequence's tokens in order. Every warp loads and normalises q, k and the decay itself (warp
// sums only: no shared memory, no block barrier). Index tensors live on the device and are not
// read by the entry: offsets are clamped to [0, T] and slots outside [0, num_slots) count as -1.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>

#include "kernels/cuda/common.cuh"
#include "kernels/gated_delta_rule.h"
#include "kernels/scalar_math.h"

namespace hyla::kernels::cuda {

namespace {

constexpr int kRows = 4;   // state rows per warp
constexpr int kWarps = 4;  // warps per block
constexpr int kRowsPerBlock = kRows * kWarps;
constexpr int kMaxDk = 256;  // kN = 8 columns per lane

/// Pointers and strides (in elements) of one call; last dims are contiguous (checked).
struct RecurrentArgs {
  const void* q;  ///< [T, H, d_k]
  const void* k;  ///< [T, H, d_k]
  const void* v;  ///< [T, HV, d_v]
  bool q_bf16, k_bf16, v_bf16;
  int64_t stride_q_token, stride_q_head, stride_k_token, stride_k_head;
  int64_t stride_v_token, stride_v_head;
  const float* g;  ///< GDN [T, HV]; KDA [T, HV, d_k]
  int64_t stride_g_token, stride_g_head;
  const float* beta;  ///< [T, HV]
  int64_t stride_beta_token, stride_beta_head;
  const int32_t* cu;  ///< [B+1]
  int64_t stride_cu;
  void* state;  ///< pool [slots, HV, d_v, d_k], contiguous; null without slots
  int64_t num_slots;
  const int32_t* initial;  ///< [B] or null
  int64_t stride_initial;
  const int32_t* final_;  ///< [B] or null
  int64_t stride_final;
  void* o;  ///< [T, HV, d_v]
  bool o_bf16;
  int64_t stride_o_token, stride_o_head;
  float* step_states;  ///< [T, HV, d_v, d_k] f32, contiguous, or null
  int64_t T, HV, d_k, d_v;
  int group;  ///< HV / H
  bool l2norm;
  float scale;
};

__device__ __forceinline__ float load_any(const void* p, bool is_bf16, int64_t i) {
  return is_bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i])
                 : static_cast<const float*>(p)[i];
}
__device__ __forceinline__ void store_any(void* p, bool is_bf16, int64_t i, float x) {
  if (is_bf16) {
    static_cast<__nv_bfloat16*>(p)[i] = __float2bfloat16_rn(x);
  } else {
    static_cast<float*>(p)[i] = x;
  }
}

__device__ __forceinline__ int64_t slot_of(const int32_t* slots, int64_t stride, int64_t b,
                                           int64_t num_slots) {
  if (slots == nullptr) return -1;
  const int64_t s = slots[b * stride];
  return s >= 0 && s < num_slots ? s : -1;
}

__device__ __forceinline__ int64_t offset_of(const RecurrentArgs& a, int64_t b) {
  const int64_t v = a.cu[b * a.stride_cu];
  return v < 0 ? 0 : (v > a.T ? a.T : v);
}

/// Each of the kCount values summed over the warp, returned to every lane.
template <int kCount>
__device__ __forceinline__ void warp_sum_all(float (&x)[kCount]) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
#pragma unroll
    for (int u = 0; u < kCount; ++u) x[u] += __shfl_xor_sync(0xffffffffu, x[u], o);
  }
}

/// Lane's kN columns of row x[t, head, :] as fp32 (zero past d_k), l2-normalised over d_k when
/// asked, times `mul` (the CPU body's load_qk).
template <int kN>
__device__ __forceinline__ void load_qk(const void* x, bool is_bf16, int64_t at, int64_t d_k,
                                        bool l2norm, float mul, float (&dst)[kN]) {
  const int lane = threadIdx.x & 31;
  float ss = 0.0f;
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    const int64_t col = j * 32 + lane;
    dst[j] = col < d_k ? load_any(x, is_bf16, at + col) : 0.0f;
    ss = fmaf(dst[j], dst[j], ss);
  }
  if (l2norm) {
    float sum[1] = {ss};
    warp_sum_all(sum);
    mul /= sqrtf(sum[0] + kL2NormEps);
  }
#pragma unroll
  for (int j = 0; j < kN; ++j) dst[j] *= mul;
}

/// Grid (B, HV, ceil(d_v / kRowsPerBlock)), kWarps warps per block.
template <typename Ts, int kN, bool kKda>
__global__ void __launch_bounds__(32 * kWarps) recurrent_kernel(const RecurrentArgs a) {
  const int64_t b = blockIdx.x, hv = blockIdx.y;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t row0 = int64_t(blockIdx.z) * kRowsPerBlock + warp * kRows;  // first row i_v
  const int64_t kh = hv / a.group;
  const int64_t d_k = a.d_k, d_v = a.d_v;

  // state rows from the initial slot (zeros without one); pool entry [slot, hv] is d_v x d_k
  const int64_t initial_slot = slot_of(a.initial, a.stride_initial, b, a.num_slots);
  float row[kRows][kN];
#pragma unroll
  for (int u = 0; u < kRows; ++u) {
    const int64_t i_v = row0 + u;
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      const int64_t col = j * 32 + lane;
      row[u][j] = 0.0f;
      if (initial_slot >= 0 && i_v < d_v && col < d_k)
        row[u][j] = to_float(
            static_cast<const Ts*>(a.state)[((initial_slot * a.HV + hv) * d_v + i_v) * d_k + col]);
    }
  }

  const int64_t begin = offset_of(a, b), next = offset_of(a, b + 1);
  const int64_t end = next > begin ? next : begin;
  for (int64_t t = begin; t < end; ++t) {
    float q[kN], k[kN], decay[kN];
    load_qk<kN>(a.q, a.q_bf16, t * a.stride_q_token + kh * a.stride_q_head, d_k, a.l2norm, a.scale,
                q);
    load_qk<kN>(a.k, a.k_bf16, t * a.stride_k_token + kh * a.stride_k_head, d_k, a.l2norm, 1.0f, k);
    const float* g = a.g + t * a.stride_g_token + hv * a.stride_g_head;
    if constexpr (kKda) {
#pragma unroll
      for (int j = 0; j < kN; ++j) {
        const int64_t col = j * 32 + lane;
        decay[j] = col < d_k ? expf(g[col]) : 0.0f;
      }
    } else {
      const float d = expf(g[0]);
#pragma unroll
      for (int j = 0; j < kN; ++j) decay[j] = d;
    }
    const float beta = a.beta[t * a.stride_beta_token + hv * a.stride_beta_head];

    // per row: row *= decay;  v_hat = <row, k>
    float s[kRows];
#pragma unroll
    for (int u = 0; u < kRows; ++u) {
      s[u] = 0.0f;
#pragma unroll
      for (int j = 0; j < kN; ++j) {
        row[u][j] *= decay[j];
        s[u] = fmaf(row[u][j], k[j], s[u]);
      }
    }
    warp_sum_all(s);
    // delta = beta (v - v_hat);  row += delta k;  o = <row, q>
    const int64_t v_at = t * a.stride_v_token + hv * a.stride_v_head;
    float out[kRows];
#pragma unroll
    for (int u = 0; u < kRows; ++u) {
      const int64_t i_v = row0 + u;
      const float v = i_v < d_v ? load_any(a.v, a.v_bf16, v_at + i_v) : 0.0f;
      const float delta = beta * (v - s[u]);
      out[u] = 0.0f;
#pragma unroll
      for (int j = 0; j < kN; ++j) {
        row[u][j] = fmaf(delta, k[j], row[u][j]);
        out[u] = fmaf(row[u][j], q[j], out[u]);
      }
    }
    warp_sum_all(out);
    const int64_t o_at = t * a.stride_o_token + hv * a.stride_o_head;
#pragma unroll
    for (int u = 0; u < kRows; ++u) {
      const int64_t i_v = row0 + u;
      if (lane == u && i_v < d_v) store_any(a.o, a.o_bf16, o_at + i_v, out[u]);
    }
    if (a.step_states != nullptr) {
#pragma unroll
      for (int u = 0; u < kRows; ++u) {
        const int64_t i_v = row0 + u;
#pragma unroll
        for (int j = 0; j < kN; ++j) {
          const int64_t col = j * 32 + lane;
          if (i_v < d_v && col < d_k)
            a.step_states[((t * a.HV + hv) * d_v + i_v) * d_k + col] = row[u][j];
        }
      }
    }
  }

  // final state into its slot (may be the initial slot: this thread read its elements above)
  const int64_t final_slot = slot_of(a.final_, a.stride_final, b, a.num_slots);
  if (final_slot < 0) return;
#pragma unroll
  for (int u = 0; u < kRows; ++u) {
    const int64_t i_v = row0 + u;
#pragma unroll
    for (int j = 0; j < kN; ++j) {
      const int64_t col = j * 32 + lane;
      if (i_v < d_v && col < d_k)
        static_cast<Ts*>(a.state)[((final_slot * a.HV + hv) * d_v + i_v) * d_k + col] =
            from_float<Ts>(row[u][j]);
    }
  }
}

template <typename Ts, int kN, bool kKda>
void launch(const RecurrentArgs& a, int64_t B, cudaStream_t stream) {
  const dim3 grid(unsigned(B), unsigned(a.HV), unsigned(ceil_div(a.d_v, kRowsPerBlock)));
  recurrent_kernel<Ts, kN, kKda><<<grid, 32 * kWarps, 0, stream>>>(a);
  HYLA_CUDA_CHECK_LAUNCH();
}

template <typename Ts, int kN>
void launch_for_gate(const RecurrentArgs& a, bool kda, int64_t B, cudaStream_t stream) {
  if (kda) {
    launch<Ts, kN, true>(a, B, stream);
  } else {
    launch<Ts, kN, false>(a, B, stream);
  }
}

/// d_k -> kN = columns per lane (1, 2, 4 or 8), then the gate variant.
template <typename Ts>
void launch_for_head_dim(const RecurrentArgs& a, bool kda, int64_t B, cudaStream_t stream) {
  if (a.d_k <= 32) {
    launch_for_gate<Ts, 1>(a, kda, B, stream);
  } else if (a.d_k <= 64) {
    launch_for_gate<Ts, 2>(a, kda, B, stream);
  } else if (a.d_k <= 128) {
    launch_for_gate<Ts, 4>(a, kda, B, stream);
  } else {
    launch_for_gate<Ts, 8>(a, kda, B, stream);
  }
}

}  // namespace

Status gated_delta_rule_recurrent(const GatedDeltaRuleParams& p, Stream stream) {
  constexpr const char* op = "gated_delta_rule_recurrent";
  RecurrentArgs a{};
  a.T = p.q.size(0);
  a.d_k = p.q.size(2);
  a.HV = p.v.size(1);
  a.d_v = p.v.size(2);
  if (a.d_k > kMaxDk)
    return unsupported(op, ": d_k = ", a.d_k, " on CUDA, supported: 1 to ", kMaxDk);
  const int64_t B = p.cu_seqlens.size(0) - 1;
  if (a.T == 0 && !p.final_slots.defined()) return ok_status();
  if (B > int64_t(INT32_MAX) || a.HV > 65535)
    return unsupported(op, ": B = ", B, ", HV = ", a.HV, " exceed the CUDA grid");
  a.q = p.q.raw();
  a.k = p.k.raw();
  a.v = p.v.raw();
  a.q_bf16 = p.q.dtype() == DType::kBF16;
  a.k_bf16 = p.k.dtype() == DType::kBF16;
  a.v_bf16 = p.v.dtype() == DType::kBF16;
  a.stride_q_token = p.q.stride(0);
  a.stride_q_head = p.q.stride(1);
  a.stride_k_token = p.k.stride(0);
  a.stride_k_head = p.k.stride(1);
  a.stride_v_token = p.v.stride(0);
  a.stride_v_head = p.v.stride(1);
  a.g = static_cast<const float*>(p.g.raw());
  a.stride_g_token = p.g.stride(0);
  a.stride_g_head = p.g.stride(1);
  a.beta = static_cast<const float*>(p.beta.raw());
  a.stride_beta_token = p.beta.stride(0);
  a.stride_beta_head = p.beta.stride(1);
  a.cu = static_cast<const int32_t*>(p.cu_seqlens.raw());
  a.stride_cu = p.cu_seqlens.stride(0);
  const bool uses_pool = p.initial_slots.defined() || p.final_slots.defined();
  if (uses_pool) {
    a.state = p.state_pool.raw();
    a.num_slots = p.state_pool.size(0);
  }
  if (p.initial_slots.defined()) {
    a.initial = static_cast<const int32_t*>(p.initial_slots.raw());
    a.stride_initial = p.initial_slots.stride(0);
  }
  if (p.final_slots.defined()) {
    a.final_ = static_cast<const int32_t*>(p.final_slots.raw());
    a.stride_final = p.final_slots.stride(0);
  }
  a.o = p.o.raw();
  a.o_bf16 = p.o.dtype() == DType::kBF16;
  a.stride_o_token = p.o.stride(0);
  a.stride_o_head = p.o.stride(1);
  a.step_states = p.step_states.defined() ? static_cast<float*>(p.step_states.raw()) : nullptr;
  a.group = int(a.HV / p.q.size(1));
  a.l2norm = p.use_qk_l2norm;
  a.scale = p.scale > 0.0f ? p.scale : 1.0f / std::sqrt(float(a.d_k));
  if (B == 0 || a.HV == 0 || a.d_v == 0) return ok_status();

  const bool kda = p.g.ndim() == 3;
  const cudaStream_t s = to_cuda(stream);
  if (uses_pool && p.state_pool.dtype() == DType::kBF16) {
    launch_for_head_dim<__nv_bfloat16>(a, kda, B, s);
  } else {
    launch_for_head_dim<float>(a, kda, B, s);
  }
  return ok_status();
}

}  // namespace hyla::kernels::cuda

// CUDA bodies of the depthwise causal conv (kernels/causal_conv1d.h; cpu/causal_conv1d.cpp is the
// specification). Per channel c and token t of a sequence starting at `begin`:
//   y[t, c] = act( bias[c] + sum_{j=0}^{K-1} w[c, j] * u(t - (K-1) + j) )
//   u(p) = x[p, c] for p >= begin, else the initial history hist[c, K-1 - (begin - p)] (zero
//   without an initial slot), hist = conv_state[slot] [D, K-1], oldest first.
// The same fused multiply-adds in the same order as the CPU body, so outputs agree up to the
// rounding of expf in SiLU.
// Prefill runs two kernels: conv_prefill_kernel (one thread per (token, channel), reads the
// initial histories) and then conv_final_state_kernel (one thread per (sequence, channel): the last
// K-1 entries of [history | tokens] into the final slot). Stream order puts every read of a history
// before the write that may replace it in place (final slot == initial slot).
// Index tensors (cu_seqlens, slots) are in device memory and not checked by the entry: offsets
// are clamped to [0, T] and slots outside [0, num_slots) count as -1, so bad values never make a
// thread read or write outside its tensors.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "kernels/causal_conv1d.h"
#include "kernels/cuda/common.cuh"
#include "kernels/scalar_math.h"

namespace hyla::kernels::cuda {

namespace {

constexpr int kThreads = 128;     // channels per block
constexpr int kMaxGridY = 65535;  // CUDA's limit on gridDim.y; larger counts loop

/// Pointers and strides (in elements) of one call. Rows of x / y / weight and the pool's first
/// two dims may be strided; every last dim is contiguous (checked by the entry).
struct ConvArgs {
  const void* x;  ///< [rows, D]
  int64_t stride_x;
  void* y;  ///< [rows, D]
  int64_t stride_y;
  const void* weight;  ///< [D, K]
  int64_t stride_weight;
  bool weight_bf16;
  const void* bias;  ///< [D] or null
  bool bias_bf16;
  void* state;  ///< conv_state [slots, D, K-1] or null
  int64_t stride_state_slot, stride_state_channel;
  int64_t num_slots;
  const int32_t* cu;  ///< prefill: [B+1]
  int64_t stride_cu;
  const int32_t* initial;  ///< prefill: [B] or null; update: the slots
  int64_t stride_initial;
  const int32_t* final_;  ///< prefill: [B] or null
  int64_t stride_final;
  int64_t rows;  ///< T (prefill) or B (update)
  int64_t B;     ///< sequences
  int64_t D;
  int K;
  bool silu;
};

__device__ __forceinline__ float load_any(const void* p, bool is_bf16, int64_t i) {
  return is_bf16 ? __bfloat162float(static_cast<const __nv_bfloat16*>(p)[i])
                 : static_cast<const float*>(p)[i];
}

/// Slot b of an optional slot array, -1 when absent or outside the pool.
__device__ __forceinline__ int64_t slot_of(const int32_t* slots, int64_t stride, int64_t b,
                                           int64_t num_slots) {
  if (slots == nullptr) return -1;
  const int64_t s = slots[b * stride];
  return s >= 0 && s < num_slots ? s : -1;
}

/// cu_seqlens[b] clamped to [0, T].
__device__ __forceinline__ int64_t offset_of(const ConvArgs& a, int64_t b) {
  const int64_t v = a.cu[b * a.stride_cu];
  return v < 0 ? 0 : (v > a.rows ? a.rows : v);
}

/// The sequence holding token t: the last b with cu[b] <= t (binary search over B+1 offsets).
__device__ __forceinline__ int64_t sequence_of(const ConvArgs& a, int64_t t) {
  int64_t lo = 0, hi = a.B - 1;
  while (lo < hi) {
    const int64_t mid = (lo + hi + 1) / 2;
    if (offset_of(a, mid) <= t) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return lo;
}

/// Entry i (oldest first, i in [0, K-1)) of channel c's history in `slot`, or 0 for no slot.
template <typename TS>
__device__ __forceinline__ float history(const ConvArgs& a, int64_t slot, int64_t c, int i) {
  if (slot < 0) return 0.0f;
  const TS* h =
      static_cast<const TS*>(a.state) + slot * a.stride_state_slot + c * a.stride_state_channel;
  return to_float(h[i]);
}

/// Prefill output y[t, c] for every token t (grid-stride over gridDim.y) and channel c.
template <typename TX, typename TY, typename TS>
__global__ void conv_prefill_kernel(const ConvArgs a) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= a.D) return;
  const TX* x = static_cast<const TX*>(a.x);
  float w[kMaxCausalConvKernel];
  for (int j = 0; j < a.K; ++j) w[j] = load_any(a.weight, a.weight_bf16, c * a.stride_weight + j);
  const float bias = a.bias != nullptr ? load_any(a.bias, a.bias_bf16, c) : 0.0f;
  for (int64_t t = blockIdx.y; t < a.rows; t += gridDim.y) {
    const int64_t b = sequence_of(a, t);
    const int64_t begin = offset_of(a, b);
    const int64_t slot = slot_of(a.initial, a.stride_initial, b, a.num_slots);
    // acc = bias + sum_j w[j] u(t - (K-1) + j), in the CPU body's order
    float acc = bias;
    for (int j = 0; j < a.K; ++j) {
      const int64_t pos = t - (a.K - 1) + j;
      const float u = pos >= begin ? to_float(x[pos * a.stride_x + c])
                                   : history<TS>(a, slot, c, int(a.K - 1 - (begin - pos)));
      acc = fmaf(w[j], u, acc);
    }
    static_cast<TY*>(a.y)[t * a.stride_y + c] = from_float<TY>(a.silu ? silu(acc) : acc);
  }
}

/// Prefill final state: conv_state[final slot, c] = the last K-1 entries of [history | tokens] of
/// sequence blockIdx.y. All K-1 values are read before any is written (in place when the final
/// slot is the initial one; no other sequence reads a slot this one writes).
template <typename TX, typename TS>
__global__ void conv_final_state_kernel(const ConvArgs a) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= a.D) return;
  for (int64_t b = blockIdx.y; b < a.B; b += gridDim.y) {
    const int64_t final_slot = slot_of(a.final_, a.stride_final, b, a.num_slots);
    if (final_slot < 0) continue;
    const int64_t begin = offset_of(a, b), stop = offset_of(a, b + 1);
    const int64_t end = stop > begin ? stop : begin;
    const int64_t initial_slot = slot_of(a.initial, a.stride_initial, b, a.num_slots);
    const TX* x = static_cast<const TX*>(a.x);
    float next[kMaxCausalConvKernel - 1];
    for (int j = 0; j + 1 < a.K; ++j) {
      const int64_t pos = end - (a.K - 1) + j;
      next[j] = pos >= begin ? to_float(x[pos * a.stride_x + c])
                             : history<TS>(a, initial_slot, c, int(a.K - 1 - (begin - pos)));
    }
    TS* h =
        static_cast<TS*>(a.state) + final_slot * a.stride_state_slot + c * a.stride_state_channel;
    for (int j = 0; j + 1 < a.K; ++j) h[j] = from_float<TS>(next[j]);
  }
}

/// Decode: row b of x is one new token of the sequence in slot slots[b]; y[b, c] from the slot's
/// history and x[b, c], then the history slides by one in place. Padding rows (slot -1) are left
/// untouched.
template <typename TX, typename TY, typename TS>
__global__ void conv_update_kernel(const ConvArgs a) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= a.D) return;
  float w[kMaxCausalConvKernel];
  for (int j = 0; j < a.K; ++j) w[j] = load_any(a.weight, a.weight_bf16, c * a.stride_weight + j);
  const float bias = a.bias != nullptr ? load_any(a.bias, a.bias_bf16, c) : 0.0f;
  for (int64_t b = blockIdx.y; b < a.rows; b += gridDim.y) {
    const int64_t slot = slot_of(a.initial, a.stride_initial, b, a.num_slots);
    if (slot < 0) continue;
    // window = [history (K-1, oldest first) | x[b, c]]
    float window[kMaxCausalConvKernel];
    for (int j = 0; j + 1 < a.K; ++j) window[j] = history<TS>(a, slot, c, j);
    window[a.K - 1] = to_float(static_cast<const TX*>(a.x)[b * a.stride_x + c]);
    float acc = bias;
    for (int j = 0; j < a.K; ++j) acc = fmaf(w[j], window[j], acc);
    static_cast<TY*>(a.y)[b * a.stride_y + c] = from_float<TY>(a.silu ? silu(acc) : acc);
    TS* h = static_cast<TS*>(a.state) + slot * a.stride_state_slot + c * a.stride_state_channel;
    for (int j = 0; j + 1 < a.K; ++j) h[j] = from_float<TS>(window[j + 1]);
  }
}

ConvArgs common_args(const TensorView& x, const TensorView& weight, const TensorView& bias,
                     const TensorView& conv_state, const TensorView& y, bool use_silu) {
  ConvArgs a{};
  a.x = x.raw();
  a.stride_x = x.stride(0);
  a.y = y.raw();
  a.stride_y = y.stride(0);
  a.weight = weight.raw();
  a.stride_weight = weight.stride(0);
  a.weight_bf16 = weight.dtype() == DType::kBF16;
  a.bias = bias.defined() ? bias.raw() : nullptr;
  a.bias_bf16 = bias.defined() && bias.dtype() == DType::kBF16;
  if (conv_state.defined()) {
    a.state = conv_state.raw();
    a.stride_state_slot = conv_state.stride(0);
    a.stride_state_channel = conv_state.stride(1);
    a.num_slots = conv_state.size(0);
  }
  a.rows = x.size(0);
  a.D = x.size(1);
  a.K = int(weight.size(1));
  a.silu = use_silu;
  return a;
}

/// Calls f(TX{}, TY{}, TS{}) with the device element types of x, y and the pool (f32 when there
/// is no pool: the kernels then never touch it). The entry checked all three dtypes.
template <typename F>
void dispatch_types(DType x, DType y, DType state, F&& f) {
  bool y_ok = false, state_ok = false;
  const bool x_ok = dispatch_float(x, [&](auto tx) {
    y_ok = dispatch_float(
        y, [&](auto ty) { state_ok = dispatch_float(state, [&](auto ts) { f(tx, ty, ts); }); });
  });
  HYLA_CHECK(x_ok && y_ok && state_ok, "causal_conv1d: unchecked dtype reached the CUDA body");
}

unsigned grid_y(int64_t n) { return unsigned(std::min<int64_t>(n, kMaxGridY)); }

}  // namespace

Status causal_conv1d(const CausalConv1dParams& p, Stream stream) {
  ConvArgs a = common_args(p.x, p.weight, p.bias, p.conv_state, p.y, p.silu);
  a.cu = p.cu_seqlens.data<int32_t>();
  a.stride_cu = p.cu_seqlens.stride(0);
  a.B = p.cu_seqlens.size(0) - 1;
  const bool uses_pool = p.initial_slots.defined() || p.final_slots.defined();
  if (p.initial_slots.defined()) {
    a.initial = p.initial_slots.data<int32_t>();
    a.stride_initial = p.initial_slots.stride(0);
  }
  if (p.final_slots.defined()) {
    a.final_ = p.final_slots.data<int32_t>();
    a.stride_final = p.final_slots.stride(0);
  }
  if (a.D == 0) return ok_status();
  const DType state_dtype = uses_pool ? p.conv_state.dtype() : DType::kF32;
  const cudaStream_t s = to_cuda(stream);
  const unsigned channel_blocks = unsigned(ceil_div(a.D, kThreads));
  dispatch_types(p.x.dtype(), p.y.dtype(), state_dtype,
                 [&]<typename TX, typename TY, typename TS>(TX, TY, TS) {
                   if (a.rows > 0) {
                     conv_prefill_kernel<TX, TY, TS>
                         <<<dim3(channel_blocks, grid_y(a.rows)), kThreads, 0, s>>>(a);
                     HYLA_CUDA_CHECK_LAUNCH();
                   }
                   if (a.final_ != nullptr) {
                     conv_final_state_kernel<TX, TS>
                         <<<dim3(channel_blocks, grid_y(a.B)), kThreads, 0, s>>>(a);
                     HYLA_CUDA_CHECK_LAUNCH();
                   }
                 });
  return ok_status();
}

Status causal_conv1d_update(const CausalConv1dUpdateParams& p, Stream stream) {
  ConvArgs a = common_args(p.x, p.weight, p.bias, p.conv_state, p.y, p.silu);
  a.initial = p.slots.data<int32_t>();
  a.stride_initial = p.slots.stride(0);
  a.B = a.rows;
  if (a.D == 0 || a.rows == 0) return ok_status();
  const unsigned channel_blocks = unsigned(ceil_div(a.D, kThreads));
  dispatch_types(p.x.dtype(), p.y.dtype(), p.conv_state.dtype(),
                 [&]<typename TX, typename TY, typename TS>(TX, TY, TS) {
                   conv_update_kernel<TX, TY, TS>
                       <<<dim3(channel_blocks, grid_y(a.rows)), kThreads, 0, to_cuda(stream)>>>(a);
                   HYLA_CUDA_CHECK_LAUNCH();
                 });
  return ok_status();
}

}  // namespace hyla::kernels::cuda

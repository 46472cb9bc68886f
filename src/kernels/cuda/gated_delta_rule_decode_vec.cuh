// Vector loads and stores of f32 / bf16 runs and the conv of runs of kN consecutive channels
// (K = 4), shared by the warp kernel (gated_delta_rule_decode_warp.cu) and the split kernels'
// prep (gated_delta_rule_decode_split.cu). Device code only; include from .cu files.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "kernels/cuda/gated_delta_rule_decode_common.cuh"

namespace hyla::kernels::cuda::decode_detail {

/// kN (2 or 4) consecutive floats from element i, as one vector load; i kN-aligned (as below).
template <int kN>
__device__ __forceinline__ void load_f32_vec(const float* p, int64_t i, float* x) {
  static_assert(kN == 2 || kN == 4);
  if constexpr (kN == 4) {
    const float4 v = *reinterpret_cast<const float4*>(p + i);
    x[0] = v.x, x[1] = v.y, x[2] = v.z, x[3] = v.w;
  } else {
    const float2 v = *reinterpret_cast<const float2*>(p + i);
    x[0] = v.x, x[1] = v.y;
  }
}
/// kN (1, 2 or 4) consecutive f32 or bf16 elements from element i, as one vector load, kept as
/// loaded: kN words, f32 bits, or bf16 pairs packed (the one bf16 of kN = 1 in the low half);
/// vec_to_float converts them where they are used (see load_bits: the loads stay in flight
/// together). i kN-aligned (checked by the host: base pointers 16-byte aligned, every run starts
/// at a multiple of kN).
template <int kN>
__device__ __forceinline__ void load_vec_bits(const void* p, bool is_bf16, int64_t i,
                                              uint32_t (&w)[kN]) {
  static_assert(kN == 1 || kN == 2 || kN == 4);
  const char* at = static_cast<const char*>(p) + (is_bf16 ? 2 * i : 4 * i);
  if constexpr (kN == 1) {
    w[0] = load_bits(p, is_bf16, i);
  } else if constexpr (kN == 2) {
    asm("{\n\t.reg .pred bf;\n\tsetp.ne.b32 bf, %2, 0;\n\t@bf ld.global.b32 %0, [%3];\n\t"
        "@!bf ld.global.v2.b32 {%0, %1}, [%3];\n\t}"
        : "=r"(w[0]), "=r"(w[1])
        : "r"(int(is_bf16)), "l"(at)
        : "memory");
  } else {
    asm("{\n\t.reg .pred bf;\n\tsetp.ne.b32 bf, %4, 0;\n\t@bf ld.global.v2.b32 {%0, %1}, [%5];\n\t"
        "@!bf ld.global.v4.b32 {%0, %1, %2, %3}, [%5];\n\t}"
        : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
        : "r"(int(is_bf16)), "l"(at)
        : "memory");
  }
}
template <int kN>
__device__ __forceinline__ void vec_to_float(const uint32_t (&w)[kN], bool is_bf16, float* x) {
#pragma unroll
  for (int e = 0; e < kN; ++e) {
    if constexpr (kN == 1) {
      x[e] = bits_to_float(w[e], is_bf16);
    } else {
      const uint32_t pair = w[e / 2];
      x[e] = __uint_as_float(is_bf16 ? (e % 2 ? pair & 0xffff0000u : pair << 16) : w[e]);
    }
  }
}
template <int kN>
__device__ __forceinline__ void store_vec(void* p, bool is_bf16, int64_t i, const float* x) {
  static_assert(kN == 1 || kN == 2 || kN == 4);
  if constexpr (kN == 1) {
    store_any(p, is_bf16, i, x[0]);
  } else if (is_bf16) {
    uint16_t* q = static_cast<uint16_t*>(p) + i;
    const uint32_t lo = uint32_t(float_to_bf16_bits(x[0])) | uint32_t(float_to_bf16_bits(x[1]))
                                                                 << 16;
    if constexpr (kN == 4) {
      const uint32_t hi = uint32_t(float_to_bf16_bits(x[2])) | uint32_t(float_to_bf16_bits(x[3]))
                                                                   << 16;
      *reinterpret_cast<uint2*>(q) = make_uint2(lo, hi);
    } else {
      *reinterpret_cast<uint32_t*>(q) = lo;
    }
  } else {
    float* q = static_cast<float*>(p) + i;
    if constexpr (kN == 4) {
      *reinterpret_cast<float4*>(q) = make_float4(x[0], x[1], x[2], x[3]);
    } else {
      *reinterpret_cast<float2*>(q) = make_float2(x[0], x[1]);
    }
  }
}

constexpr int kTaps = 4;  // the conv kernel this kernel takes (every supported model's)

/// kN consecutive conv channels from channel ch: weights, the new inputs and the 3-entry windows as
/// loaded (load_vec_bits; the windows as 3 vectors of kN entries: channel j's window is entries
/// 3 j .. 3 j + 2 of them in a row, oldest first).
template <int kN>
struct ConvRun {
  float w[kN][kTaps];
  uint32_t x[kN];
  uint32_t win[3][kN];
};
/// The inputs and windows of r as floats.
template <int kN>
__device__ __forceinline__ void run_floats(const StepArgs& p, const ConvRun<kN>& r, float (&x)[kN],
                                           float (&win)[3 * kN]) {
  vec_to_float(r.x, p.qkv_bf16, x);
#pragma unroll
  for (int c = 0; c < 3; ++c) vec_to_float(r.win[c], p.conv_bf16, win + c * kN);
}
template <int kN>
__device__ __forceinline__ void load_run_weights(const StepArgs& p, int64_t ch, ConvRun<kN>& r) {
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    const float4 w = reinterpret_cast<const float4*>(p.conv_w)[ch + j];
    r.w[j][0] = w.x, r.w[j][1] = w.y, r.w[j][2] = w.z, r.w[j][3] = w.w;
  }
}
template <int kN>
__device__ __forceinline__ void load_run_window(const StepArgs& p, int slot, int64_t ch,
                                                ConvRun<kN>& r) {
  const int64_t at = (int64_t(slot) * p.conv_dim + ch) * 3;  // 3 kN entries, kN-aligned
#pragma unroll
  for (int c = 0; c < 3; ++c) load_vec_bits<kN>(p.conv_state, p.conv_bf16, at + c * kN, r.win[c]);
}
/// y[j] = silu(conv of channel j).
template <int kN>
__device__ __forceinline__ void conv_run(const StepArgs& p, const ConvRun<kN>& r, float (&y)[kN]) {
  float x[kN], win[3 * kN];
  run_floats(p, r, x, win);
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    float acc = r.w[j][0] * win[3 * j];  // the window's taps first: the new input comes last
#pragma unroll
    for (int t = 1; t < 3; ++t) acc = fmaf(r.w[j][t], win[3 * j + t], acc);
    y[j] = silu(fmaf(r.w[j][3], x[j], acc));
  }
}
/// The advanced windows (the last 3 of [window | new]) back to the pool.
template <int kN>
__device__ __forceinline__ void store_run_window(const StepArgs& p, int slot, int64_t ch,
                                                 const ConvRun<kN>& r) {
  float x[kN], win[3 * kN], next[3 * kN];
  run_floats(p, r, x, win);
#pragma unroll
  for (int j = 0; j < kN; ++j) {
    next[3 * j] = win[3 * j + 1];
    next[3 * j + 1] = win[3 * j + 2];
    next[3 * j + 2] = x[j];
  }
  const int64_t at = (int64_t(slot) * p.conv_dim + ch) * 3;
#pragma unroll
  for (int c = 0; c < 3; ++c) store_vec<kN>(p.conv_state, p.conv_bf16, at + c * kN, next + c * kN);
}

}  // namespace hyla::kernels::cuda::decode_detail

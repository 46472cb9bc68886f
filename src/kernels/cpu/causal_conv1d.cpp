// CPU bodies of the depthwise causal conv (see kernels/causal_conv1d.h). The prefill and the decode
// update run the same per-channel sliding window with the same fused multiply-adds, so a prefill
// equals token-by-token updates bit for bit. Work is split into (sequence, channel block) tasks.
#include "kernels/causal_conv1d.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/tensor_access.h"
#include "kernels/scalar_math.h"

namespace hyla::kernels::cpu {

namespace {

/// Channels per task: 64 consecutive channels of a token row are one or two cache lines of x.
constexpr int64_t kChannelBlock = 64;

/// The conv of one block of channels [c0, c0 + num_channels): its weights and bias, and per
/// channel the window of the K most recent inputs, oldest first. Before a token is pushed,
/// window[c][1..K-1] is the history (what the conv state stores).
struct ChannelBlock {
  int K = 0;
  int64_t c0 = 0;
  int64_t num_channels = 0;
  float weight[kChannelBlock][kMaxCausalConvKernel];
  float bias[kChannelBlock];
  float window[kChannelBlock][kMaxCausalConvKernel];
};

int32_t slot_or_none(const TensorView& slots, int64_t b) {
  return slots.defined() ? slots.data<int32_t>()[b * slots.stride(0)] : -1;
}

void load_params(const TensorView& weight, const TensorView& bias, ChannelBlock& blk) {
  for (int64_t c = 0; c < blk.num_channels; ++c) {
    const int64_t channel = blk.c0 + c;
    for (int j = 0; j < blk.K; ++j)
      blk.weight[c][j] = load_f32_at(weight, channel * weight.stride(0) + j);
    blk.bias[c] = bias.defined() ? load_f32_at(bias, channel) : 0.0f;
  }
}

/// window[c][1..K-1] = conv_state[slot, c0 + c, 0..K-2], or zeros when slot is -1.
void load_history(const TensorView& conv_state, int32_t slot, ChannelBlock& blk) {
  for (int64_t c = 0; c < blk.num_channels; ++c) {
    for (int j = 0; j + 1 < blk.K; ++j) {
      blk.window[c][j + 1] =
          slot < 0 ? 0.0f
                   : load_f32_at(conv_state, slot * conv_state.stride(0) +
                                                 (blk.c0 + c) * conv_state.stride(1) + j);
    }
  }
}

/// conv_state[slot, c0 + c, 0..K-2] = window[c][1..K-1]: the K-1 most recent inputs.
void store_history(const TensorView& conv_state, int32_t slot, const ChannelBlock& blk) {
  for (int64_t c = 0; c < blk.num_channels; ++c) {
    for (int j = 0; j + 1 < blk.K; ++j) {
      store_f32_at(conv_state,
                   slot * conv_state.stride(0) + (blk.c0 + c) * conv_state.stride(1) + j,
                   blk.window[c][j + 1]);
    }
  }
}

/// Runs tokens [begin, end) of one sequence through the block's windows and writes y.
template <typename TX, typename TY>
void convolve_tokens(const TensorView& x, const TensorView& y, int64_t begin, int64_t end,
                     bool use_silu, ChannelBlock& blk) {
  const int K = blk.K;
  for (int64_t t = begin; t < end; ++t) {
    const TX* x_row = static_cast<const TX*>(x.raw()) + t * x.stride(0) + blk.c0;
    TY* y_row = static_cast<TY*>(y.raw()) + t * y.stride(0) + blk.c0;
    for (int64_t c = 0; c < blk.num_channels; ++c) {
      // slide the window and push the current token: window = x[t-K+1 .. t], oldest first
      float* window = blk.window[c];
      for (int j = 0; j + 1 < K; ++j) window[j] = window[j + 1];
      window[K - 1] = load_f32(x_row + c);
      // y = act(bias + sum_j w[j] * window[j]); w[K-1] multiplies the current token
      float acc = blk.bias[c];
      for (int j = 0; j < K; ++j) acc = std::fma(blk.weight[c][j], window[j], acc);
      store_f32(y_row + c, use_silu ? silu(acc) : acc);
    }
  }
}

/// Runs `body(row, block)` for every (row, channel block) pair in parallel, with the block's
/// weights and bias loaded.
template <typename Body>
void for_each_row_block(int64_t num_rows, const TensorView& weight, const TensorView& bias,
                        Body&& body) {
  const int64_t D = weight.size(0);
  const int64_t blocks_per_row = (D + kChannelBlock - 1) / kChannelBlock;
  parallel_for(num_rows * blocks_per_row, [&](int64_t task) {
    ChannelBlock blk;
    blk.K = int(weight.size(1));
    blk.c0 = (task % blocks_per_row) * kChannelBlock;
    blk.num_channels = std::min(kChannelBlock, D - blk.c0);
    load_params(weight, bias, blk);
    body(task / blocks_per_row, blk);
  });
}

}  // namespace

void causal_conv1d(const CausalConv1dParams& p) {
  const int32_t* cu = p.cu_seqlens.data<int32_t>();
  const int64_t cu_stride = p.cu_seqlens.stride(0);
  const int64_t B = p.cu_seqlens.size(0) - 1;
  dispatch_float(p.x.dtype(), [&]<typename TX>(TX) {
    dispatch_float(p.y.dtype(), [&]<typename TY>(TY) {
      for_each_row_block(B, p.weight, p.bias, [&](int64_t b, ChannelBlock& blk) {
        // history from the initial slot (zeros without one), then the sequence's tokens; the
        // window after the last token is the final state, which mixes history and new tokens
        // when the sequence is shorter than K-1
        load_history(p.conv_state, slot_or_none(p.initial_slots, b), blk);
        convolve_tokens<TX, TY>(p.x, p.y, cu[b * cu_stride], cu[(b + 1) * cu_stride], p.silu, blk);
        const int32_t final_slot = slot_or_none(p.final_slots, b);
        if (final_slot >= 0) store_history(p.conv_state, final_slot, blk);
      });
    });
  });
}

void causal_conv1d_update(const CausalConv1dUpdateParams& p) {
  dispatch_float(p.x.dtype(), [&]<typename TX>(TX) {
    dispatch_float(p.y.dtype(), [&]<typename TY>(TY) {
      for_each_row_block(p.x.size(0), p.weight, p.bias, [&](int64_t b, ChannelBlock& blk) {
        // a one-token sequence whose history is read from and written back to its slot
        const int32_t slot = slot_or_none(p.slots, b);
        if (slot < 0) return;  // padding row: y and the pool stay untouched
        load_history(p.conv_state, slot, blk);
        convolve_tokens<TX, TY>(p.x, p.y, b, b + 1, p.silu, blk);
        store_history(p.conv_state, slot, blk);
      });
    });
  });
}

}  // namespace hyla::kernels::cpu

// StatePool: per-request state slots for the linear-attention layers (GDN / KDA). One slot holds,
// for every linear layer of the model, its conv state [D, K-1] and its SSM state [HV, d_v, d_k].
// Storage is one pool tensor per linear layer and kind, exactly the layouts the kernels take:
//   conv  [slots, D, K-1]       bf16 (default) | f32   kernels/causal_conv1d.h  conv_state
//   SSM   [slots, HV, d_v, d_k] f32 (default) | bf16  kernels/gated_delta_rule.h state_pool
// D (conv_dim) = 2 H d_k + HV d_v (GDN: q, k, v channels; KDA: 3 H d, as H = HV, d_k = d_v = d).
#pragma once

#include <cstdint>
#include <vector>

#include "core/error.h"
#include "core/tensor.h"
#include "model/config.h"

namespace hyla::runtime {

struct StatePoolOptions {
  DType conv_dtype = DType::kBF16;  ///< f32 | bf16
  DType ssm_dtype = DType::kF32;    ///< f32 | bf16
  Device device = Device::cpu();
};

/// Slots are the scarce resource of a hybrid model: a running request owns exactly one working
/// slot (DESIGN.md §6). Slot ids index dimension 0 of every pool tensor; -1 is never a slot (it
/// means "skip" in the kernels' slot arrays).
class StatePool {
 public:
  /// A pool of `num_slots` slots for `config`'s linear layers, zero-filled. Errors: no linear
  /// layer, num_slots outside [1, 2^31), a dtype other than f32 / bf16, bad linear dims.
  static Result<StatePool> create(const model::ModelConfig& config, int64_t num_slots,
                                  StatePoolOptions options = {});
  /// Bytes one slot occupies over all linear layers (conv + SSM), i.e. the per-request state.
  static int64_t bytes_per_slot(const model::ModelConfig& config, StatePoolOptions options = {});

  /// A free slot (lowest id first); its contents are whatever the last owner left: call zero()
  /// for a new request or copy() for a prefix-cache hit. Error when every slot is in use.
  Result<int32_t> allocate();
  /// Returns `slot` to the pool. Errors: out of range, or not allocated (double free).
  Status free(int32_t slot);
  /// Fills `slot`'s conv and SSM state with zeros in every linear layer (a new request).
  Status zero(int32_t slot);
  /// Copies slot `from` into slot `to` in every linear layer (copy-on-write for prefix-cache hits
  /// and speculative decoding); other slots are untouched. Both must be allocated.
  Status copy(int32_t from, int32_t to);

  int64_t capacity() const { return capacity_; }
  int64_t free_slots() const { return int64_t(free_list_.size()); }
  int64_t used_slots() const { return capacity_ - free_slots(); }
  bool is_allocated(int32_t slot) const;

  /// Number of linear layers (the compact index range of conv_state / ssm_state).
  int num_layers() const { return int(conv_.size()); }
  /// Global layer id -> compact linear index; -1 for attention layers.
  int linear_index(int layer) const;
  /// [slots, D, K-1] conv state pool of linear layer `linear_layer_index`, d contiguous.
  TensorView conv_state(int linear_layer_index) const;
  /// [slots, HV, d_v, d_k] SSM state pool of linear layer `linear_layer_index`, d_k contiguous.
  TensorView ssm_state(int linear_layer_index) const;

  const StatePoolOptions& options() const { return options_; }
  int64_t slot_bytes() const { return slot_bytes_; }

 private:
  StatePool() = default;
  Status check_allocated(const char* op, int32_t slot) const;

  StatePoolOptions options_;
  int64_t capacity_ = 0;
  int64_t slot_bytes_ = 0;
  std::vector<int> linear_index_;   // per global layer
  std::vector<Tensor> conv_;        // per linear layer
  std::vector<Tensor> ssm_;         // per linear layer
  std::vector<int32_t> free_list_;  // a stack: back() is the next slot handed out
  std::vector<uint8_t> allocated_;  // per slot
};

}  // namespace hyla::runtime

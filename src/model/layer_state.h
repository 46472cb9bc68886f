// Per-sequence memory of one decoder layer: conv + SSM state for linear layers, a KV cache for
// attention layers. Owned outside the layers so it can move into the runtime pools.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "model/linear_backends.h"
#include "model/verify.h"

namespace hyla::model {

struct LayerState {
  Tensor conv_state;  ///< linear layers: [1, D, K-1] f32 pool of one slot
  Tensor ssm_state;   ///< linear layers: [1, HV, d_v, d_k] f32 pool of one slot
  Tensor k_cache;     ///< attention: [capacity, HKV, d_qk] f32; MLA: latent cache (see
                      ///< layers/latent_attention.h)
  Tensor v_cache;     ///< attention: [capacity, HKV, d_v] f32
};

/// Where the linear layers' recurrent memory is for one forward call: pools of slots and, per
/// sequence, its slot and its new tokens.
struct LinearMemory {
  TensorView conv_pool;   ///< [slots, conv_dim, K-1] conv windows (f32 | bf16)
  TensorView ssm_pool;    ///< [slots, HV, d_v, d_k] SSM states (f32 | bf16)
  TensorView slots;       ///< [B] i32 on the pools' device: each sequence's slot
  TensorView cu_seqlens;  ///< [B+1] i32 on the pools' device: sequence b is [cu[b], cu[b+1])
  bool decode = false;    ///< every sequence has exactly one new token (decode kernels)
  /// which implementation runs each phase (decode, prefill) of the GDN / KDA layers
  LinearAttnBackends backends;
  /// Optional, host: Batch::boundary_slots and the batch's cu_seqlens (prefill only); the short
  /// conv and the delta rule write each listed slot's conv window and SSM state.
  const std::vector<int32_t>* boundary_slots = nullptr;
  const std::vector<int32_t>* host_cu_seqlens = nullptr;
  /// A verify step (model/verify.h): read the slots, write nothing to the pools, keep the commit's
  /// inputs here (its mode says which).
  LinearVerifyRecord* verify = nullptr;
  VerifyMode verify_mode = VerifyMode::kReplay;
};

/// Everything one sequence carries between forward calls (on the model's device).
struct SequenceState {
  int64_t length = 0;    ///< tokens consumed so far
  int64_t capacity = 0;  ///< KV cache rows
  std::vector<LayerState> layers;
};

}  // namespace hyla::model

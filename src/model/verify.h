// Speculative verify in the model (DESIGN.md §6, issue 25): a verify step runs, per sequence, its
// last sampled token and its drafts (Batch::verify). Attention layers write every position's KV as
// for any chunk (the engine rolls back by shortening the page table). Linear layers read each
// sequence's slot but write nothing to the pools; they keep what Model::commit_verify needs to
// install the state after the accepted tokens, in one of two ways:
//   kStepStates  the SSM state after every token ([T, HV, d_v, d_k] f32 per layer): the commit
//                copies the accepted one. Memory: a state per verified token and layer.
//   kReplay      the per-token inputs of the recurrence (gates g, beta): the commit replays the
//                accepted tokens into the slot's state (the recurrent rule from the slot).
//                Memory: g and beta per token and layer; one slot per request.
// Both keep the conv inputs (the [q | k | v] rows before the conv): the commit runs the conv over
// the accepted ones from the slot's window, which advances it.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"

namespace hyla::model {

enum class VerifyMode : uint8_t { kStepStates, kReplay };

/// What one linear layer kept from a verify step (rows are the batch's packed tokens).
struct LinearVerifyRecord {
  Tensor qkv;          ///< [T, conv_dim] f32: the conv inputs
  Tensor step_states;  ///< kStepStates: [T, HV, d_v, d_k] f32, the state after each token
  Tensor g;            ///< kReplay: [T, HV] (GDN) or [T, HV, d_k] (KDA) f32 log decay
  Tensor beta;         ///< kReplay: [T, HV] f32
  /// kStepStates through the fused kernel (layers/linear_attention.h fused_verify_outputs): its
  /// tokens per sequence, and step_states is [B, T, HV, d_v, d_k] in the pool's dtype; 0: the
  /// ops path's layout above.
  int64_t fused_tokens = 0;
  int64_t bytes() const;
};

/// Filled by Model::forward_batch on a verify step, read by Model::commit_verify. Tensors it
/// holds already are written in place where their shapes match (a CUDA graph's replays write
/// where its capture did).
struct VerifyRecord {
  VerifyMode mode = VerifyMode::kReplay;
  std::vector<LinearVerifyRecord> layers;  ///< per global layer (empty for attention layers)
  /// Bytes the record holds (its tensors), for the engine's statistics.
  int64_t bytes() const;
};

}  // namespace hyla::model

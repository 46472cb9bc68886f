// A loaded hybrid model and its runner: embedding -> decoder layers (mixer + MLP, each with its
// RMSNorm and residual) -> final norm -> lm_head. The residual is the plain sum, or (K3) Attention
// Residuals: every sublayer input and the final output mix block snapshots and the current
// block's partial sum (layers/attn_residual.h). Prefill runs the chunk delta rule, single tokens
// the recurrent one with the conv update. The weights live on one device (Model::to moves them);
// every activation, state and index tensor of a forward call lives there too.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "core/tensor.h"
#include "model/batch.h"
#include "model/config.h"
#include "model/decoder_layer.h"
#include "model/layer_state.h"
#include "model/layers/attention.h"
#include "model/layers/attn_residual.h"
#include "model/layers/gdn.h"
#include "model/layers/kda.h"
#include "model/layers/latent_attention.h"
#include "model/layers/mlp.h"
#include "model/linear_backends.h"
#include "model/mtp.h"
#include "model/trace.h"

namespace hyla::model {

/// What the MTP draft head gives for a batch (Model::forward_mtp), both f32 on the model's device.
struct MtpOutput {
  Tensor logits;  ///< [B, vocab] of each sequence's last row, [T, vocab] with logits_all
  Tensor hidden;  ///< [T, hidden]: the head's normed output, the next depth's input hidden
};

class Model {
 public:
  /// output_res_cw: the final output's folded Attention-Residual score vector [hidden] f32
  /// (output_attn_res_*), required when config.attn_res_block_size > 0.
  Model(ModelConfig config, Tensor embedding, std::vector<DecoderLayer> layers, Tensor final_norm,
        Tensor lm_head, Tensor output_res_cw = {});

  const ModelConfig& config() const { return config_; }
  /// The weights, read-only (model/tensor_parallel.h slices them per rank).
  const Tensor& embedding() const { return embedding_; }
  const std::vector<DecoderLayer>& layers() const { return layers_; }
  const Tensor& final_norm() const { return final_norm_; }
  const Tensor& lm_head() const { return lm_head_; }
  const Tensor& output_res_cw() const { return output_res_cw_; }
  /// Where the weights live; forward calls run there.
  Device device() const { return embedding_.device(); }
  /// A copy of the model with every weight on `device` (projections keep the dtype the
  /// constructor chose on the host: bf16 where exact, else f32). Errors: no such device in this
  /// build or machine.
  Result<std::unique_ptr<Model>> to(Device device) const;

  /// Which implementation runs each phase of the linear-attention layers (linear_backends.h;
  /// default: auto everywhere). Model::to copies it. A choice that cannot serve a layer's shapes
  /// fails the forward call that needs it.
  void set_linear_backends(const LinearAttnBackends& backends) { linear_backends_ = backends; }
  const LinearAttnBackends& linear_backends() const { return linear_backends_; }
  /// Whether a prefill step writes Batch::boundary_slots (the chunk algorithm computes the states
  /// at each 64; the recurrent backend does not).
  bool writes_boundary_states() const {
    return linear_backends_.prefill != LinearPrefillBackend::kRecurrent;
  }

  /// Fresh per-sequence memory for up to `capacity` tokens, on the model's device.
  SequenceState new_sequence(int64_t capacity) const;

  /// Runs `tokens` after what `state` holds (prefill when it is empty, extend or decode after);
  /// returns logits [T, vocab] f32 on the model's device. Errors: token ids out of range, capacity
  /// exceeded.
  Result<Tensor> forward(std::span<const int32_t> tokens, SequenceState& state,
                         ForwardTrace* trace = nullptr) const;

  /// One step of several sequences over pooled memory (the runtime's pools, on the model's device):
  /// returns logits [B, vocab] f32 on the model's device of each sequence's last new token
  /// ([T, vocab] with batch.logits_all); the batch's index data is uploaded once. Linear layers
  /// run their decode kernels when every sequence has one token, the prefill ones otherwise;
  /// attention layers read and extend each sequence's KV pages.
  Result<Tensor> forward_batch(const Batch& batch, const BatchMemory& memory,
                               ForwardTrace* trace = nullptr) const;

  /// After forward_batch ran the verify step `batch` (Batch::verify; its record in
  /// memory.verify): installs in each sequence's slot the linear layers' conv window and SSM state
  /// after its first accepted[b] new tokens (0 leaves the slot as it was; at most its count).
  /// Attention layers need nothing: the KV rows past the accepted tokens are rewritten when those
  /// positions are computed again. Errors: no record for this batch, counts out of range.
  Status commit_verify(const Batch& batch, std::span<const int32_t> accepted,
                       const BatchMemory& memory) const;

  /// Installs the MTP draft head (mtp.h), moved to the model's device; its projections are kept
  /// bf16 where exact, as the model's. Model::to copies it. Errors: not config().num_mtp_layers
  /// full-attention layers, an fc that is not [hidden, 2 hidden].
  Status set_mtp(MtpWeights mtp);
  /// Whether the model has an MTP draft head (forward_mtp runs).
  bool has_mtp() const { return !mtp_.layers.empty(); }

  /// The MTP draft head (mtp.h) over a batch: batch.tokens are the NEXT tokens (token_{i+1} in
  /// the row of position i), batch.cu_seqlens / past / page_tables as forward_batch reads them
  /// (sequence b's rows at positions past[b] + j; state_slots and boundary_slots are not read),
  /// `hidden` [T, hidden] f32 on the model's device the input hiddens: the target's final-normed
  /// hidden (BatchMemory::final_hidden) at depth 0, the previous depth's MtpOutput::hidden after.
  /// `depth` picks the MTP layer (depth % num_mtp_layers, vLLM's spec_step_idx). The layer writes
  /// the rows' K and V to the pages of global KV layer num_layers + that layer
  /// (memory.k_pages / v_pages, the same page tables as the model's) and attends causally over
  /// each sequence's positions <= its own there. Errors: no MTP head, a malformed batch, `hidden`
  /// of another shape, dtype or device, no KV pages for the MTP layer.
  Result<MtpOutput> forward_mtp(const Batch& batch, const Tensor& hidden, const BatchMemory& memory,
                                int64_t depth = 0) const;

  /// Packs `batch`'s index data into `staging` exactly as forward_batch does (same regions, same
  /// order), without running anything: a CUDA graph captured over forward_batch then replays on
  /// this batch. Errors: those forward_batch gives while packing (a position beyond int32).
  Status stage_step(const Batch& batch, HostStaging& staging) const;

 private:
  ModelConfig config_;
  Tensor embedding_;  ///< [vocab, hidden]
  std::vector<DecoderLayer> layers_;
  Tensor final_norm_;     ///< [hidden]
  Tensor lm_head_;        ///< [vocab, hidden] (the embedding when tied)
  Tensor output_res_cw_;  ///< [hidden] (Attention Residuals only)
  MtpWeights mtp_;        ///< the MTP draft head; no layers without one
  LinearAttnBackends linear_backends_;
};

/// Greedy decoding: prefill `prompt`, then `n` tokens each fed back one at a time.
/// Returns the generated ids; `logits` (if given) receives each step's logits [n, vocab] on the
/// host (a CUDA model's logits are copied back each step).
Result<std::vector<int32_t>> greedy_generate(const Model& model, std::span<const int32_t> prompt,
                                             int64_t n, Tensor* logits = nullptr);

}  // namespace hyla::model

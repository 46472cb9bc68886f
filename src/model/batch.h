// The Batch: the one interface between the runtime (scheduler, pools) and the model. Several
// sequences, each with some new tokens (a prefill chunk, or one decode token) after `past` tokens
// it already has in its state slot and KV pages. The model reads and writes only the pool rows
// the batch names.
#pragma once

#include <cstdint>
#include <vector>

#include "core/tensor.h"
#include "kernels/kv_pages.h"
#include "model/layer_times.h"
#include "model/verify.h"

namespace hyla::model {

class AllReduce;  // model/all_reduce.h

struct Batch {
  std::vector<int32_t> tokens;       ///< [T] new tokens, packed sequence by sequence
  std::vector<int32_t> cu_seqlens;   ///< [B+1] sequence b is tokens [cu[b], cu[b+1]), each >= 1
  std::vector<int64_t> past;         ///< [B] tokens the sequence already has (its position offset)
  std::vector<int32_t> state_slots;  ///< [B] slot in every linear layer's state pools
  /// [B] KV pages of the sequence in order; they cover past + new tokens (page_size each).
  std::vector<std::vector<int32_t>> page_tables;
  /// false: logits of each sequence's last new token only ([B, vocab]); true: of every token.
  bool logits_all = false;
  /// Optional (the prefix cache's snapshots inside a prefill chunk): per sequence in order, one
  /// entry per full 64 (kernels::kDeltaRuleChunk) of its new tokens, the order of the chunk
  /// kernel's chunk_states: the state-pool slot that receives every linear layer's state after
  /// those tokens (SSM state and conv window), -1 for none. Empty: none. Only for prefill steps
  /// of a model whose linear prefill runs the chunk algorithm (Model::writes_boundary_states).
  std::vector<int32_t> boundary_slots;
  /// Speculative verify (model/verify.h): every sequence's new tokens are its last sampled token
  /// and its drafts. Linear layers leave the pools as they are and fill BatchMemory::verify;
  /// Model::commit_verify then installs the state after the accepted tokens. Needs logits_all
  /// and BatchMemory::verify; no boundary_slots.
  bool verify = false;

  int64_t num_sequences() const { return int64_t(cu_seqlens.size()) - 1; }
  /// Every sequence has exactly one new token: linear layers take the decode path.
  bool is_decode() const;
};

/// Page-locked host memory that a step's index data is packed into before its upload (optional;
/// the engine's, on CUDA). With it the uploads are asynchronous, and a CUDA graph captured over
/// forward_batch re-reads it at every replay, after Model::stage_step has packed the next
/// batch into the same places: the owner resets it before every step, and every step takes its
/// regions in the same order (the StepIndices, then the PagedBatch).
class HostStaging {
 public:
  explicit HostStaging(int64_t capacity);  ///< capacity in i32 elements
  ~HostStaging();
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;
  void reset() { used_ = 0; }
  /// The next `n` elements, or nullptr when they do not fit (the upload then goes the
  /// synchronous way).
  int32_t* take(int64_t n);

 private:
  int32_t* data_ = nullptr;
  int64_t capacity_ = 0, used_ = 0;
};

/// `packed` on `device` (a host tensor on the CPU): through `staging` when given and it fits
/// (asynchronous, on the current stream), else one synchronous copy. `upload` false: only packs
/// into staging (Model::stage_step) and returns an undefined tensor.
Tensor upload_i32(const std::vector<int32_t>& packed, Device device, HostStaging* staging,
                  bool upload = true);

/// The batch's index data for one step, packed on the host into one i32 buffer [tokens (T) |
/// cu_seqlens (B+1) | state_slots (B) | last_rows (B)] and copied to the model's device in one
/// transfer.
struct StepIndices {
  Tensor device;          ///< the packed buffer on the model's device
  TensorView tokens;      ///< [T] token ids (views of `device`)
  TensorView cu_seqlens;  ///< [B+1] sequence b is tokens [cu[b], cu[b+1])
  TensorView slots;       ///< [B] each sequence's state slot
  TensorView last_rows;   ///< [B] cu[b+1] - 1: each sequence's last new token
  static std::vector<int32_t> packed(const Batch& batch);
  static StepIndices pack(const Batch& batch, Device device, HostStaging* staging = nullptr);
};

/// The attention layers' view of the paged KV cache for one step, built from the Batch once per
/// step (by the forward, before its layers): index tensors on the activations' device (see
/// kernels/kv_pages.h), packed in one buffer so they take one upload, and the host numbers
/// layers size scratch with.
struct PagedBatch {
  Tensor storage;          ///< owns the views below: [cu | past | page_table | positions | own]
  TensorView cu_seqlens;   ///< [B+1] i32
  TensorView past;         ///< [B] i32
  TensorView page_table;   ///< [B, max_pages] i32, -1 after each sequence's pages
  TensorView positions;    ///< [T] i32: past[b] + i for the i-th new token of sequence b
  TensorView own_page;     ///< [B, 1] i32: b (MLA: sequence b's gathered block as page b)
  int64_t max_length = 0;  ///< max_b past[b] + n_b: the longest sequence after this call

  kernels::PageIndex index() const { return {cu_seqlens, past, page_table}; }
};

/// The batch's index tensors on `device`, uploaded through `staging` when given (upload_i32;
/// `upload` false: packed into it only, the tensors left undefined). Errors: a position beyond
/// int32.
Result<PagedBatch> paged_batch(const Batch& batch, Device device, HostStaging* staging = nullptr,
                               bool upload = true);

/// Views of the pools the batch indexes, per global layer id (undefined where a layer has none).
/// k_pages / v_pages may list more than num_layers layers: the MTP head's full-attention layers
/// follow the model's (global ids num_layers + k, read by Model::forward_mtp).
struct BatchMemory {
  std::vector<TensorView> conv_state;  ///< linear layers: [slots, conv_dim, K-1]
  std::vector<TensorView> ssm_state;   ///< linear layers: [slots, HV, d_v, d_k]
  /// Full attention: k and v pages [pages, page_size, HKV, head_dim].
  /// MLA: k_pages holds the latent [pages, page_size, 1, kv_lora_rank + rope]; v_pages undefined.
  std::vector<TensorView> k_pages;
  std::vector<TensorView> v_pages;
  int64_t page_size = 0;
  /// Fused CUDA decode of the linear layers (kernels/gated_delta_rule_decode.h), optional
  /// (undefined: the kernel runs without them; the CPU ignores them). Shared by every linear layer,
  /// which run one after another on one stream.
  /// decode_arrivals: [max_sequences, H] i32 zeros on the pools' device; a decode step of B
  /// sequences passes its first B rows (every call leaves them zero again).
  /// decode_workspace: f32 scratch of at least gated_delta_rule_decode_workspace_bytes for
  /// max_sequences sequences (T = 1), 16-byte aligned.
  TensorView decode_arrivals;
  TensorView decode_workspace;
  /// Optional: forward_batch adds each part's time here, by layer kind (layer_times.h; it waits
  /// for the device at every boundary, so only for profiling).
  LayerTimes* layer_times = nullptr;
  /// Optional page-locked staging of the step's index uploads (see HostStaging).
  HostStaging* staging = nullptr;
  /// Verify steps (Batch::verify): where the linear layers keep what the commit needs; its mode
  /// is set by the caller, its layers are (re)filled by forward_batch.
  VerifyRecord* verify = nullptr;
  /// Optional (the MTP draft head's input): forward_batch leaves here the final-normed hidden of
  /// every new token, [T, hidden] f32 on the model's device, whatever logits_all says. A tensor
  /// already of that shape, dtype and device is written in place (a captured step keeps its
  /// address); anything else is replaced by a new one.
  Tensor* final_hidden = nullptr;
  /// Tensor parallelism (model/tensor_parallel.h): this model is one rank's slice, and every
  /// layer's mixer and MLP output is summed across the ranks here before the residual add.
  /// Null: the model is whole.
  AllReduce* all_reduce = nullptr;
};

}  // namespace hyla::model

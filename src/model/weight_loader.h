// Building a model's canonical (fused) weights from checkpoint tensors. The architecture's mapping
// table (checkpoint_weights) has already been checked against the checkpoint, so missing or
// mis-shaped tensors were reported by name before any of this runs.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/checkpoint.h"
#include "model/model.h"

namespace hyla::model {

/// Loads `name` (with `shape`) as an f32 host tensor.
Result<Tensor> load_f32(const Checkpoint& ckpt, const std::string& name,
                        const std::vector<int64_t>& shape);

/// Row block [begin, begin + count) of a 2-D tensor, as a new tensor.
Tensor take_rows(const Tensor& t, int64_t begin, int64_t count);

/// Stacks 2-D tensors (or row blocks) with the same number of columns along rows.
Tensor concat_rows(const std::vector<Tensor>& parts);

/// [count, rows, cols]: block b is block(b), a 2-D [rows, cols] tensor (every block the same shape
/// and dtype). Blocks are made one at a time and copied in, so only one of them exists beside the
/// stacked tensor (routed experts: the stacked weights of a layer, not a second copy of them).
Result<Tensor> stack_blocks(int64_t count, const std::function<Result<Tensor>(int64_t)>& block);

/// Drops size-1 dimensions of a weight stored as e.g. [C, 1, K] -> [C, K].
Tensor squeeze(const Tensor& t);

/// The part of loading every architecture shares: per layer the input and post-attention norms
/// (model.layers.{i}.input_layernorm / post_attention_layernorm) plus what `fill_layer` loads (its
/// mixer and MLP), then the embedding, the final norm and the lm_head (the embedding when tied).
/// With Attention Residuals (config.attn_res_block_size > 0) also each layer's
/// self_attention_res_{norm,proj} and mlp_res_{norm,proj} and the model's
/// output_attn_res_{norm,proj}, each pair folded into one score vector.
/// `get` loads one tensor by its checkpoint name (already checked against the mapping table).
using TensorGetter = std::function<Result<Tensor>(const std::string& name)>;
Result<std::unique_ptr<Model>> assemble_model(
    const ModelConfig& config, const TensorGetter& get,
    const std::function<Status(int64_t layer, DecoderLayer& out)>& fill_layer);

/// Checks every spec's tensor exists with its shape and a float dtype (one error naming the
/// problems, up to 10), then that the specs read every tensor of the checkpoint except the
/// known-ignored ones (Qwen's mtp.* draft head unless `specs` read it, rotary_emb.inv_freq buffers,
/// and in a multimodal checkpoint the towers outside the text decoder): an unread tensor means the
/// config describes less than the checkpoint, and the error lists the first five and the count.
struct WeightSpec;
Status check_checkpoint(const Checkpoint& ckpt, const std::vector<WeightSpec>& specs);

}  // namespace hyla::model

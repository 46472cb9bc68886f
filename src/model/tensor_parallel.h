// Tensor parallelism by head: rank r of N holds a slice of every layer's heads
// and a 1/N slice of every MLP's intermediate width; each rank runs the ordinary layer functions
// (gdn_forward, kda_forward, attention_forward, latent_attention_forward, dense_mlp_forward,
// moe_forward) on its slice with its own config (shard_config), and the layer's output is the SUM
// over ranks of the ranks' outputs (the all-reduce: BatchMemory::all_reduce, model/all_reduce.h).
// Norms, embedding, lm_head, the MoE router and the shared-expert gate stay whole (replicated), as
// do Attention Residuals' score vectors (they read the replicated residual stream).
//
//   GDN:       key heads [r H/N, (r+1) H/N) with their HV/H value heads each (GVA groups stay
//              whole): in_proj rows of q, k (its key heads) and v, z, b, a (its value heads); conv
//              rows of its q | k | v channels; A_log, dt_bias of its value heads; the gated norm
//              weight (per d_v) whole; out_proj columns of its value heads. Its conv / SSM state
//              is its channels / value heads: a rank's pools are 1/N of the unsharded ones.
//   KDA:       heads [r H/N, (r+1) H/N): rows of q, k, v (and K3's full-rank gate g) in the fused
//              projection, their conv channels, b rows, f_b / g_b rows, A_log, dt_bias; f_a and
//              g_a (the low-rank gates' input side) and o_norm whole; o_proj columns.
//   Attention: query heads [r nh/N, (r+1) nh/N) with their gates; the KV heads they use (nkv/N
//              when N divides nkv; when nkv divides N, the one KV head its queries share,
//              replicated across N/nkv ranks); q_norm, k_norm whole; o_proj columns of its heads.
//   MLA:       query heads [r nh/N, (r+1) nh/N): q_proj (or q_b_proj) and kv_b_proj rows, the
//              output gate's rows, o_proj columns; the latent (kv_a_proj, its norm, q_a_proj)
//              replicated: every rank keeps the same latent KV pages.
//   Dense MLP: intermediate [r I/N, (r+1) I/N): gate_up rows of gate and up, down columns.
//   MoE:       every expert's intermediate split as the dense MLP (each rank holds all experts),
//              the shared expert likewise; router and shared_gate replicated. The shared output
//              is sigmoid(x . g) * shared(x), linear in shared's partial sums, so the ranks' sum
//              is the whole output; routing (Kimi: with its correction bias) is computed
//              identically on every rank. K3's latent MoE: experts split the same way over the
//              latent width, latent_down and its norm replicated; the routed latent is summed
//              across the ranks inside the MoE (its RMS norm needs the whole sum), and each rank
//              brings back its 1/N of the latent columns through its columns of latent_up.
#pragma once

#include <cstdint>
#include <memory>

#include "core/error.h"
#include "core/tensor.h"
#include "model/config.h"
#include "model/decoder_layer.h"
#include "model/model.h"

namespace hyla::model {

/// The config rank `rank` of `ranks` runs its layer slices with: per-rank head counts (GDN key and
/// value heads, KDA heads, attention query and KV heads, MLA heads) and intermediate widths
/// (dense, routed experts, shared expert). Errors: ranks < 1, rank outside [0, ranks), a count
/// that `ranks` does not divide (naming the layer, the count and N).
Result<ModelConfig> shard_config(const ModelConfig& config, int rank, int ranks);

/// Rank `rank`'s slice of decoder layer `layer` (weights on the host, contiguous, any dtype): the
/// mixer and MLP of its kinds as the file comment says, the two norms whole. Errors: as
/// shard_config, and weights whose shapes do not match the config.
Result<DecoderLayer> shard_layer(const ModelConfig& config, int64_t layer,
                                 const DecoderLayer& whole, int rank, int ranks);

/// Rank `rank`'s model: shard_config's config, every layer's shard_layer slice, the embedding,
/// final norm and lm_head shared with `whole` (replicated), the linear backends copied. Its
/// forward_batch runs with BatchMemory::all_reduce set to the rank's communicator and pools of its
/// config's shapes. The MTP draft head is not carried. Errors: as shard_config / shard_layer, and
/// a whole model that is not on the host (slice first, then move each rank's model, Model::to).
Result<std::unique_ptr<Model>> shard_model(const Model& whole, int rank, int ranks);

/// Rank `rank`'s slice of an unsharded GDN state pool (host, contiguous): conv [slots, conv_dim,
/// K-1] -> its q | k | v channels; ssm [slots, HV, d_v, d_k] -> its value heads. (To start ranks
/// from an existing state; the ranks' SSM slices concatenated along dim 1 give the whole back.)
Result<Tensor> shard_gdn_conv_state(const ModelConfig& config, const TensorView& conv_pool,
                                    int rank, int ranks);
Result<Tensor> shard_gdn_ssm_state(const ModelConfig& config, const TensorView& ssm_pool, int rank,
                                   int ranks);

}  // namespace hyla::model

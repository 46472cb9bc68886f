// The hybrid model runner (see model.h).
#include "model/model.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "core/device_memory.h"
#include "kernels/add.h"
#include "kernels/embedding.h"
#include "kernels/gather_rows.h"
#include "kernels/linear.h"
#include "kernels/rmsnorm.h"
#include "model/all_reduce.h"
#include "model/layers/linear_attention.h"
#include "model/residual_stream.h"

namespace hyla::model {

namespace {

/// a += b, both [T, hidden] f32 (one rounding per element: exactly the fp32 sum).
Status add_in_place(const Tensor& a, const Tensor& b) {
  return kernels::add({.x = b, .gate = {}, .scale = 1.0f, .y = a});
}

Status norm(const TensorView& x, const Tensor& weight, const ModelConfig& c, const TensorView& y) {
  return kernels::rmsnorm(
      {.x = x, .weight = weight, .eps = c.rms_norm_eps, .form = c.norm_form, .y = y});
}

/// The rows of x [T, hidden] that get logits: all of them, or each sequence's last one.
Result<Tensor> logit_rows(const Tensor& x, const StepIndices& indices, bool logits_all) {
  if (logits_all) return x;
  Tensor rows = Tensor::empty({indices.last_rows.size(0), x.size(1)}, DType::kF32, x.device());
  HYLA_RETURN_IF_ERROR(kernels::gather_rows({.x = x, .index = indices.last_rows, .y = rows}));
  return rows;
}

/// branch = the layer's MoE (routing to ids / weights when given) or dense MLP of `normed`.
Status mlp_forward(const DecoderLayer& layer, MlpKind kind, const ModelConfig& c,
                   const Tensor& normed, const Tensor& branch, Tensor* ids = nullptr,
                   Tensor* weights = nullptr, AllReduce* all_reduce = nullptr) {
  if (kind == MlpKind::kMoe)
    return moe_forward(layer.moe, c, normed, branch, ids, weights, all_reduce);
  return dense_mlp_forward(layer.dense, c.mlp_activation, normed, branch);
}

/// A projection whose every value is a bf16 number (a bf16 checkpoint, widened to f32 at load) is
/// stored as bf16 again: the linear kernel reads bf16 weights directly, so a decode step, which is
/// bound by reading the weights, reads half the bytes for the same values and results.
/// Stacked expert weights ([E, rows, cols]) are one tensor: bf16 when every expert's values are.
void keep_bf16_when_exact(Tensor& w) {
  if (!w.defined() || w.dtype() != DType::kF32 || (w.ndim() != 2 && w.ndim() != 3) ||
      !w.view().is_contiguous() || !w.device().is_cpu())
    return;
  const uint32_t* bits = static_cast<const uint32_t*>(w.view().raw());
  for (int64_t i = 0; i < w.numel(); ++i)
    if ((bits[i] & 0xffffu) != 0) return;  // f32 is a bf16 number iff its low 16 bits are zero
  Tensor narrow = Tensor::empty(w.ndim(), w.view().shape(), DType::kBF16);
  bf16* dst = narrow.data<bf16>();
  for (int64_t i = 0; i < w.numel(); ++i) dst[i] = bf16{static_cast<uint16_t>(bits[i] >> 16)};
  w = std::move(narrow);
}

/// Every layer weight that only kernels::linear and kernels::moe_grouped_linear read.
void keep_projections_bf16_when_exact(std::vector<DecoderLayer>& layers) {
  auto mlp = [](DenseMlpWeights& m) {
    keep_bf16_when_exact(m.gate_up);
    keep_bf16_when_exact(m.down);
  };
  for (DecoderLayer& l : layers) {
    for (Tensor* w : {&l.gdn.in_proj,
                      &l.gdn.out_proj,
                      &l.kda.qkv_proj,
                      &l.kda.fa_b,
                      &l.kda.f_b,
                      &l.kda.g_a,
                      &l.kda.g_b,
                      &l.kda.o_proj,
                      &l.attention.qkv_proj,
                      &l.attention.o_proj,
                      &l.latent.q_proj,
                      &l.latent.q_a_proj,
                      &l.latent.q_b_proj,
                      &l.latent.kv_a_proj,
                      &l.latent.kv_b_proj,
                      &l.latent.o_proj,
                      &l.latent.g_proj,
                      &l.moe.router,
                      &l.moe.shared_gate,
                      &l.moe.latent_down,
                      &l.moe.latent_up,
                      &l.moe.experts_gate_up,
                      &l.moe.experts_down})
      keep_bf16_when_exact(*w);
    mlp(l.dense);
    mlp(l.moe.shared);
  }
}

/// Calls f(t) on every weight tensor of a layer (undefined ones included).
template <typename F>
void for_each_weight(DecoderLayer& l, F&& f) {
  auto mlp = [&](DenseMlpWeights& m) {
    f(m.gate_up);
    f(m.down);
  };
  for (Tensor* t : {&l.input_norm,
                    &l.post_norm,
                    &l.gdn.in_proj,
                    &l.gdn.conv,
                    &l.gdn.A_log,
                    &l.gdn.dt_bias,
                    &l.gdn.norm,
                    &l.gdn.out_proj,
                    &l.kda.qkv_proj,
                    &l.kda.conv,
                    &l.kda.fa_b,
                    &l.kda.f_b,
                    &l.kda.g_a,
                    &l.kda.g_b,
                    &l.kda.A_log,
                    &l.kda.dt_bias,
                    &l.kda.o_norm,
                    &l.kda.o_proj,
                    &l.attention.qkv_proj,
                    &l.attention.q_norm,
                    &l.attention.k_norm,
                    &l.attention.o_proj,
                    &l.latent.q_proj,
                    &l.latent.q_a_proj,
                    &l.latent.q_a_norm,
                    &l.latent.q_b_proj,
                    &l.latent.kv_a_proj,
                    &l.latent.kv_a_norm,
                    &l.latent.kv_b_proj,
                    &l.latent.o_proj,
                    &l.latent.g_proj,
                    &l.moe.router,
                    &l.moe.correction_bias,
                    &l.moe.shared_gate,
                    &l.moe.latent_down,
                    &l.moe.latent_norm,
                    &l.moe.latent_up,
                    &l.moe.experts_gate_up,
                    &l.moe.experts_down,
                    &l.attn_res_cw,
                    &l.mlp_res_cw})
    f(*t);
  mlp(l.dense);
  mlp(l.moe.shared);
}

void move_mtp(MtpWeights& mtp, Device device) {
  auto move = [&](Tensor& t) {
    if (t.defined() && t.device() != device) t = t.to(device);
  };
  for (DecoderLayer& l : mtp.layers) for_each_weight(l, move);
  for (Tensor* t : {&mtp.fc, &mtp.pre_fc_norm_embedding, &mtp.pre_fc_norm_hidden, &mtp.norm})
    move(*t);
}

}  // namespace

Model::Model(ModelConfig config, Tensor embedding, std::vector<DecoderLayer> layers,
             Tensor final_norm, Tensor lm_head, Tensor output_res_cw)
    : config_(std::move(config)),
      embedding_(std::move(embedding)),
      layers_(std::move(layers)),
      final_norm_(std::move(final_norm)),
      lm_head_(std::move(lm_head)),
      output_res_cw_(std::move(output_res_cw)) {
  keep_projections_bf16_when_exact(layers_);
  keep_bf16_when_exact(lm_head_);
  HYLA_CHECK(config_.attn_res_block_size == 0 || output_res_cw_.defined(),
             "Model: Attention Residuals need the output score vector");
}

Result<std::unique_ptr<Model>> Model::to(Device device) const {
  if (device.is_cuda() && !cuda_available())
    return unsupported("Model::to(", device_name(device),
                       "): no CUDA device visible, or this build has no CUDA support");
  auto m = std::make_unique<Model>(*this);
  auto move = [&](Tensor& t) {
    if (t.defined() && t.device() != device) t = t.to(device);
  };
  for (DecoderLayer& l : m->layers_) for_each_weight(l, move);
  for (Tensor* t : {&m->embedding_, &m->final_norm_, &m->lm_head_, &m->output_res_cw_}) move(*t);
  move_mtp(m->mtp_, device);
  return m;
}

Status Model::set_mtp(MtpWeights mtp) {
  const int64_t H = config_.hidden_size;
  if (int64_t(mtp.layers.size()) != config_.num_mtp_layers || mtp.layers.empty())
    return invalid_argument("set_mtp: the MTP head has ", mtp.layers.size(),
                            " layers, the config declares ", config_.num_mtp_layers,
                            " (mtp_num_hidden_layers, at least 1)");
  if (!mtp.fc.defined() || mtp.fc.ndim() != 2 || mtp.fc.size(0) != H || mtp.fc.size(1) != 2 * H)
    return invalid_argument("set_mtp: mtp.fc is ",
                            mtp.fc.defined() ? mtp.fc.view().shape_string() : "undefined",
                            ", expected [", H, ", ", 2 * H, "]");
  for (const DecoderLayer& l : mtp.layers)
    if (!l.attention.qkv_proj.defined())
      return invalid_argument("set_mtp: every MTP layer needs full-attention weights");
  keep_projections_bf16_when_exact(mtp.layers);
  keep_bf16_when_exact(mtp.fc);
  move_mtp(mtp, device());
  mtp_ = std::move(mtp);
  return ok_status();
}

SequenceState Model::new_sequence(int64_t capacity) const {
  SequenceState s;
  s.capacity = capacity;
  for (MixerKind kind : config_.mixers) {
    switch (kind) {
      case MixerKind::kGatedDeltaNet:
      case MixerKind::kKimiDelta: s.layers.push_back(linear_new_state(config_)); break;
      case MixerKind::kFullAttention:
        s.layers.push_back(attention_new_state(config_, capacity));
        break;
      case MixerKind::kLatentAttention:
        s.layers.push_back(latent_attention_new_state(config_, capacity));
        break;
    }
  }
  // built on the host (zeros), then moved to the weights' device
  if (!device().is_cpu()) {
    for (LayerState& l : s.layers)
      for (Tensor* t : {&l.conv_state, &l.ssm_state, &l.k_cache, &l.v_cache})
        if (t->defined()) *t = t->to(device());
  }
  return s;
}

Result<Tensor> Model::forward(std::span<const int32_t> tokens, SequenceState& state,
                              ForwardTrace* trace) const {
  const int64_t T = int64_t(tokens.size());
  if (int64_t(state.layers.size()) != config_.num_layers)
    return invalid_argument("forward: the sequence state has ", state.layers.size(),
                            " layers, the model ", config_.num_layers,
                            " (use Model::new_sequence)");
  if (state.length + T > state.capacity)
    return out_of_range("forward: ", state.length, " + ", T,
                        " tokens exceed the sequence capacity ", state.capacity);
  // The sequence's own memory as pools: one state slot (0) and one KV page of `capacity` rows.
  Batch batch;
  batch.tokens.assign(tokens.begin(), tokens.end());
  batch.cu_seqlens = {0, int32_t(T)};
  batch.past = {state.length};
  batch.state_slots = {0};
  batch.page_tables = {{0}};
  batch.logits_all = true;
  BatchMemory memory;
  memory.page_size = state.capacity;
  const size_t L = size_t(config_.num_layers);
  memory.conv_state.resize(L);
  memory.ssm_state.resize(L);
  memory.k_pages.resize(L);
  memory.v_pages.resize(L);
  for (size_t i = 0; i < L; ++i) {
    const LayerState& ls = state.layers[i];
    memory.conv_state[i] = ls.conv_state;
    memory.ssm_state[i] = ls.ssm_state;
    auto as_page = [&](const Tensor& cache) {
      return cache.defined()
                 ? cache.view().reshape({1, cache.size(0), cache.size(1), cache.size(2)})
                 : TensorView();
    };
    memory.k_pages[i] = as_page(ls.k_cache);
    memory.v_pages[i] = as_page(ls.v_cache);
  }
  Result<Tensor> logits = forward_batch(batch, memory, trace);
  if (logits.ok()) state.length += T;
  return logits;
}

namespace {

/// Whether any layer reads KV pages (full attention or MLA): then a step builds a PagedBatch.
bool has_attention(const ModelConfig& c) {
  return std::any_of(c.mixers.begin(), c.mixers.end(),
                     [](MixerKind k) { return !is_linear_mixer(k); });
}

/// What forward_batch and forward_mtp (`op`) both read: the sequences, cu_seqlens, past, page
/// tables that cover every position (when `pages`), token ids.
Status check_sequences(const Batch& batch, int64_t page_size, bool pages, int64_t vocab,
                       const char* op) {
  const int64_t B = batch.num_sequences();
  if (B < 1) return invalid_argument(op, ": no sequences");
  if (batch.cu_seqlens.front() != 0 || batch.cu_seqlens.back() != int32_t(batch.tokens.size()))
    return invalid_argument(op, ": cu_seqlens must run from 0 to the ", batch.tokens.size(),
                            " tokens");
  if (int64_t(batch.past.size()) != B || int64_t(batch.page_tables.size()) != B)
    return invalid_argument(op, ": past and page_tables need ", B, " entries (one per sequence)");
  for (int64_t b = 0; b < B; ++b) {
    const int64_t n = batch.cu_seqlens[size_t(b + 1)] - batch.cu_seqlens[size_t(b)];
    if (n < 1) return invalid_argument(op, ": sequence ", b, " has no new tokens");
    if (batch.past[size_t(b)] < 0)
      return invalid_argument(op, ": past[", b, "] is ", batch.past[size_t(b)]);
    if (pages && (page_size < 1 || int64_t(batch.page_tables[size_t(b)].size()) * page_size <
                                       batch.past[size_t(b)] + n))
      return out_of_range(op, ": sequence ", b, " has ", batch.page_tables[size_t(b)].size(),
                          " pages of ", page_size, " tokens for ", batch.past[size_t(b)] + n,
                          " tokens");
  }
  for (int64_t t = 0; t < int64_t(batch.tokens.size()); ++t)
    if (batch.tokens[size_t(t)] < 0 || batch.tokens[size_t(t)] >= vocab)
      return out_of_range(op, ": token ", t, " is ", batch.tokens[size_t(t)], ", outside [0, ",
                          vocab, ")");
  return ok_status();
}

Status check_batch(const Batch& batch, const BatchMemory& memory, const ModelConfig& c) {
  const int64_t B = batch.num_sequences();
  HYLA_RETURN_IF_ERROR(
      check_sequences(batch, memory.page_size, has_attention(c), c.vocab_size, "forward_batch"));
  if (int64_t(batch.state_slots.size()) != B)
    return invalid_argument("forward_batch: state_slots needs ", B, " entries (one per sequence)");
  // k_pages / v_pages may go on with the MTP head's layers
  const size_t L = size_t(c.num_layers);
  if (memory.conv_state.size() != L || memory.ssm_state.size() != L || memory.k_pages.size() < L ||
      memory.v_pages.size() < L)
    return invalid_argument("forward_batch: the batch memory must list ", L,
                            " layers (k_pages and v_pages at least)");
  if (!batch.boundary_slots.empty()) {
    int64_t entries = 0;
    for (int64_t b = 0; b < B; ++b)
      entries += (batch.cu_seqlens[size_t(b + 1)] - batch.cu_seqlens[size_t(b)]) / 64;
    if (batch.is_decode() || int64_t(batch.boundary_slots.size()) != entries)
      return invalid_argument("forward_batch: boundary_slots has ", batch.boundary_slots.size(),
                              " entries, expected one per full 64 new tokens of each sequence (",
                              entries, ") in a prefill step");
    int64_t slots = -1;
    for (size_t i = 0; i < L && slots < 0; ++i)
      if (memory.ssm_state[i].defined()) slots = memory.ssm_state[i].size(0);
    for (const int32_t slot : batch.boundary_slots)
      if (slot < -1 || slot >= slots)
        return out_of_range("forward_batch: a boundary slot is ", slot, ", outside [-1, ", slots,
                            ")");
  }
  if (batch.verify &&
      (!batch.logits_all || memory.verify == nullptr || !batch.boundary_slots.empty()))
    return invalid_argument(
        "forward_batch: a verify step needs logits_all and BatchMemory::verify, and takes no "
        "boundary_slots");
  return ok_status();
}

/// What every layer of a forward_batch step reads besides its weights.
struct Step {
  const Batch& batch;
  const BatchMemory& memory;
  const StepIndices& indices;
  const PagedBatch* paged;  ///< null when the model has no attention layers
  const LinearAttnBackends& backends;
};

/// branch = layer i's mixer of `normed`: GDN / KDA over the layer's state pools, attention / MLA
/// over its KV pages (they write the new tokens' rows there and attend over them in place).
Status mixer_forward(const Step& step, const DecoderLayer& layer, int64_t i, const ModelConfig& c,
                     const Tensor& normed, const Tensor& branch) {
  const Batch& batch = step.batch;
  const BatchMemory& memory = step.memory;
  switch (const MixerKind kind = c.mixers[size_t(i)]) {
    case MixerKind::kGatedDeltaNet:
    case MixerKind::kKimiDelta: {
      const LinearMemory linear{
          .conv_pool = memory.conv_state[size_t(i)],
          .ssm_pool = memory.ssm_state[size_t(i)],
          .slots = step.indices.slots,
          .cu_seqlens = step.indices.cu_seqlens,
          .decode = batch.is_decode() && !batch.verify,
          .backends = step.backends,
          .boundary_slots = &batch.boundary_slots,
          .host_cu_seqlens = &batch.cu_seqlens,
          .verify = batch.verify ? &memory.verify->layers[size_t(i)] : nullptr,
          .verify_mode = batch.verify ? memory.verify->mode : VerifyMode::kReplay};
      return kind == MixerKind::kGatedDeltaNet ? gdn_forward(layer.gdn, c, normed, linear, branch)
                                               : kda_forward(layer.kda, c, normed, linear, branch);
    }
    case MixerKind::kFullAttention:
    case MixerKind::kLatentAttention: {
      const LayerPages pages{.k = memory.k_pages[size_t(i)], .v = memory.v_pages[size_t(i)]};
      return kind == MixerKind::kFullAttention
                 ? attention_forward(layer.attention, c, normed, *step.paged, pages, branch)
                 : latent_attention_forward(layer.latent, c, normed, *step.paged, pages, branch);
    }
  }
  return internal_error("forward_batch: layer ", i, " has no mixer kind");
}

/// Tensor parallelism: branch <- the sum of every rank's branch (nothing for a whole model).
Status sum_over_ranks(const BatchMemory& memory, const Tensor& branch) {
  return memory.all_reduce ? memory.all_reduce->sum(branch) : ok_status();
}

/// The rows of `out` [T, hidden] that get logits (every row, or each sequence's last one),
/// final-normed. With `final_hidden` every row is normed there first and the rows gathered from it
/// (a row's norm reads that row only: the same numbers as gathering first); a tensor there of
/// another shape, dtype or device is replaced.
Result<Tensor> final_normed_rows(const Tensor& out, const Tensor& weight, const ModelConfig& c,
                                 const StepIndices& indices, bool logits_all,
                                 Tensor* final_hidden) {
  const int64_t T = out.size(0), H = out.size(1);
  const Device dev = out.device();
  if (final_hidden != nullptr) {
    Tensor& all = *final_hidden;
    if (!all.defined() || all.ndim() != 2 || all.size(0) != T || all.size(1) != H ||
        all.dtype() != DType::kF32 || all.device() != dev || !all.view().is_contiguous())
      all = Tensor::empty({T, H}, DType::kF32, dev);
    HYLA_RETURN_IF_ERROR(norm(out, weight, c, all));
    return logit_rows(all, indices, logits_all);
  }
  HYLA_ASSIGN_OR_RETURN(const Tensor rows, logit_rows(out, indices, logits_all));
  Tensor normed = Tensor::empty({rows.size(0), H}, DType::kF32, dev);
  HYLA_RETURN_IF_ERROR(norm(rows, weight, c, normed));
  return normed;
}

}  // namespace

Result<Tensor> Model::forward_batch(const Batch& batch, const BatchMemory& memory,
                                    ForwardTrace* trace) const {
  using Sublayer = ResidualStream::Sublayer;
  const ModelConfig& c = config_;
  HYLA_RETURN_IF_ERROR(check_batch(batch, memory, c));
  const int64_t T = int64_t(batch.tokens.size()), H = c.hidden_size, L = c.num_layers;
  const Device dev = device();
  // The step's index data: tokens, cu_seqlens, slots and last rows in one upload; the attention
  // layers' page indices in one more, when the model has attention layers.
  const StepIndices indices = StepIndices::pack(batch, dev, memory.staging);
  std::optional<PagedBatch> paged;
  if (has_attention(c)) {
    HYLA_ASSIGN_OR_RETURN(paged, paged_batch(batch, dev, memory.staging));
  }
  // A verify step's record: the caller's tensors are reused where their shapes match.
  if (batch.verify && memory.verify->layers.size() != size_t(L))
    memory.verify->layers.assign(size_t(L), LinearVerifyRecord{});
  const Step step{batch, memory, indices, paged ? &*paged : nullptr, linear_backends_};
  // Every named intermediate goes to `tap` (trace.h): the trace's copies, the profile's marks.
  const Tracer tap(c, trace, memory.layer_times, dev);

  // h = embed(tokens)
  Tensor h = Tensor::empty({T, H}, DType::kF32, dev);
  HYLA_RETURN_IF_ERROR(kernels::embedding({.table = embedding_, .ids = indices.tokens, .y = h}));
  tap(h, TracePoint::kEmbedding);
  ResidualStream residual(c, std::move(h), tap);

  Tensor normed = Tensor::empty({T, H}, DType::kF32, dev);
  Tensor branch = Tensor::empty({T, H}, DType::kF32, dev);
  for (int64_t i = 0; i < L; ++i) {
    const DecoderLayer& layer = layers_[size_t(i)];
    // h += mixer(input_norm(input))
    HYLA_ASSIGN_OR_RETURN(const Tensor mixer_in,
                          residual.input(Sublayer::kMixer, i, layer.attn_res_cw));
    HYLA_RETURN_IF_ERROR(norm(mixer_in, layer.input_norm, c, normed));
    HYLA_RETURN_IF_ERROR(mixer_forward(step, layer, i, c, normed, branch));
    HYLA_RETURN_IF_ERROR(sum_over_ranks(memory, branch));
    HYLA_RETURN_IF_ERROR(residual.add(branch));
    tap(branch, TracePoint::kMixerOut, i);

    // h += mlp(post_norm(input))
    HYLA_ASSIGN_OR_RETURN(const Tensor mlp_in, residual.input(Sublayer::kMlp, i, layer.mlp_res_cw));
    HYLA_RETURN_IF_ERROR(norm(mlp_in, layer.post_norm, c, normed));
    Tensor ids, weights;
    HYLA_RETURN_IF_ERROR(mlp_forward(layer, c.mlps[size_t(i)], c, normed, branch, &ids, &weights,
                                     memory.all_reduce));
    HYLA_RETURN_IF_ERROR(sum_over_ranks(memory, branch));
    HYLA_RETURN_IF_ERROR(residual.add(branch));
    tap(ids, TracePoint::kRouterIds, i);
    tap(weights, TracePoint::kRouterWeights, i);
    tap(branch, TracePoint::kMlpOut, i);
    tap(residual.stream(), TracePoint::kLayerOut, i);
  }

  // logits = lm_head(final_norm(output)) of every token, or each sequence's last one
  HYLA_ASSIGN_OR_RETURN(const Tensor out, residual.output(output_res_cw_));
  HYLA_ASSIGN_OR_RETURN(
      const Tensor rows,
      final_normed_rows(out, final_norm_, c, indices, batch.logits_all, memory.final_hidden));
  tap(rows, TracePoint::kFinalNormed);
  Tensor logits = Tensor::empty({rows.size(0), c.vocab_size}, DType::kF32, dev);
  HYLA_RETURN_IF_ERROR(kernels::linear({.x = rows, .weight = lm_head_, .bias = {}, .y = logits}));
  tap(logits, TracePoint::kLogits);
  return logits;
}

Result<MtpOutput> Model::forward_mtp(const Batch& batch, const Tensor& hidden,
                                     const BatchMemory& memory, int64_t depth) const {
  const ModelConfig& c = config_;
  if (!has_mtp())
    return unsupported("forward_mtp: ", c.model_type,
                       " model without an MTP draft head (config.json mtp_num_hidden_layers is 0, "
                       "or the checkpoint holds no mtp.* tensor)");
  if (depth < 0) return invalid_argument("forward_mtp: depth is ", depth, ", expected >= 0");
  HYLA_RETURN_IF_ERROR(check_sequences(batch, memory.page_size, true, c.vocab_size, "forward_mtp"));
  const int64_t T = int64_t(batch.tokens.size()), H = c.hidden_size;
  const Device dev = device();
  if (!hidden.defined() || hidden.ndim() != 2 || hidden.size(0) != T || hidden.size(1) != H ||
      hidden.dtype() != DType::kF32 || hidden.device() != dev)
    return invalid_argument("forward_mtp: hidden is ",
                            hidden.defined() ? hidden.view().to_string() : "undefined",
                            ", expected [", T, ", ", H, "] f32 on ", device_name(dev));
  const int64_t k = depth % c.num_mtp_layers;
  const size_t kv = size_t(c.num_layers + k);  // the MTP layer's global KV layer id
  if (memory.k_pages.size() <= kv || memory.v_pages.size() <= kv || !memory.k_pages[kv].defined() ||
      !memory.v_pages[kv].defined())
    return invalid_argument("forward_mtp: the batch memory has no KV pages for MTP layer ", k,
                            " (global layer ", kv, "); k_pages and v_pages must list ",
                            c.num_layers + c.num_mtp_layers,
                            " layers, as a KvPagePool for this config holds them");
  const StepIndices indices = StepIndices::pack(batch, dev, memory.staging);
  HYLA_ASSIGN_OR_RETURN(const PagedBatch paged, paged_batch(batch, dev, memory.staging));
  const DecoderLayer& layer = mtp_.layers[size_t(k)];

  // x = fc([pre_fc_norm_embedding(embed(next tokens)) | pre_fc_norm_hidden(hidden)])
  Tensor embedded = Tensor::empty({T, H}, DType::kF32, dev);
  HYLA_RETURN_IF_ERROR(
      kernels::embedding({.table = embedding_, .ids = indices.tokens, .y = embedded}));
  Tensor both = Tensor::empty({T, 2 * H}, DType::kF32, dev);
  HYLA_RETURN_IF_ERROR(norm(embedded, mtp_.pre_fc_norm_embedding, c, both.view().narrow(1, 0, H)));
  HYLA_RETURN_IF_ERROR(norm(hidden, mtp_.pre_fc_norm_hidden, c, both.view().narrow(1, H, H)));
  Tensor x = Tensor::empty({T, H}, DType::kF32, dev);
  HYLA_RETURN_IF_ERROR(kernels::linear({.x = both, .weight = mtp_.fc, .bias = {}, .y = x}));

  // the decoder layer: x += attention(input_norm(x)); x += mlp(post_norm(x))
  Tensor normed = Tensor::empty({T, H}, DType::kF32, dev);
  Tensor branch = Tensor::empty({T, H}, DType::kF32, dev);
  HYLA_RETURN_IF_ERROR(norm(x, layer.input_norm, c, normed));
  const LayerPages pages{.k = memory.k_pages[kv], .v = memory.v_pages[kv]};
  HYLA_RETURN_IF_ERROR(attention_forward(layer.attention, c, normed, paged, pages, branch));
  HYLA_RETURN_IF_ERROR(add_in_place(x, branch));
  HYLA_RETURN_IF_ERROR(norm(x, layer.post_norm, c, normed));
  HYLA_RETURN_IF_ERROR(mlp_forward(layer, c.mtp_mlps[size_t(k)], c, normed, branch));
  HYLA_RETURN_IF_ERROR(add_in_place(x, branch));

  // out = norm(x); logits = lm_head(out) of every row, or each sequence's last one
  MtpOutput out;
  out.hidden = Tensor::empty({T, H}, DType::kF32, dev);
  HYLA_RETURN_IF_ERROR(norm(x, mtp_.norm, c, out.hidden));
  HYLA_ASSIGN_OR_RETURN(const Tensor rows, logit_rows(out.hidden, indices, batch.logits_all));
  out.logits = Tensor::empty({rows.size(0), c.vocab_size}, DType::kF32, dev);
  HYLA_RETURN_IF_ERROR(
      kernels::linear({.x = rows, .weight = lm_head_, .bias = {}, .y = out.logits}));
  return out;
}

Status Model::commit_verify(const Batch& batch, std::span<const int32_t> accepted,
                            const BatchMemory& memory) const {
  const int64_t B = batch.num_sequences();
  if (!batch.verify || memory.verify == nullptr ||
      memory.verify->layers.size() != size_t(config_.num_layers))
    return invalid_argument("commit_verify: no verify step recorded for this batch");
  if (int64_t(accepted.size()) != B)
    return invalid_argument("commit_verify: ", accepted.size(), " accepted counts for ", B,
                            " sequences");
  for (int64_t b = 0; b < B; ++b) {
    const int32_t n = accepted[size_t(b)],
                  count = batch.cu_seqlens[size_t(b + 1)] - batch.cu_seqlens[size_t(b)];
    if (n < 0 || n > count)
      return out_of_range("commit_verify: sequence ", b, " accepted ", n, " of its ", count,
                          " tokens");
  }
  const Device dev = device();
  // Layers the fused kernel verified: one commit kernel each, the counts on the device.
  bool fused = false, ops = false;
  for (int64_t i = 0; i < config_.num_layers; ++i)
    if (is_linear_mixer(config_.mixers[size_t(i)]))
      (memory.verify->layers[size_t(i)].fused_tokens > 0 ? fused : ops) = true;
  if (fused) {
    const std::vector<int32_t> counts(accepted.begin(), accepted.end());
    const Tensor accepted_d = upload_i32(counts, dev, memory.staging),
                 slots_d = upload_i32(batch.state_slots, dev, memory.staging);
    for (int64_t i = 0; i < config_.num_layers; ++i) {
      const LinearVerifyRecord& record = memory.verify->layers[size_t(i)];
      if (!is_linear_mixer(config_.mixers[size_t(i)]) || record.fused_tokens == 0) continue;
      LinearMemory linear;
      linear.conv_pool = memory.conv_state[size_t(i)];
      linear.ssm_pool = memory.ssm_state[size_t(i)];
      linear.slots = slots_d;
      HYLA_RETURN_IF_ERROR(fused_commit_verify(record, linear, accepted_d));
    }
  }
  if (!ops) return ok_status();
  // The accepted tokens as a packed batch of their own: rows in the verify step, cu_seqlens,
  // slots; sequences that accepted none are left out.
  std::vector<int32_t> rows, cu = {0}, slots, last_rows;
  for (int64_t b = 0; b < B; ++b) {
    const int32_t begin = batch.cu_seqlens[size_t(b)], n = accepted[size_t(b)];
    if (n == 0) continue;
    for (int32_t t = 0; t < n; ++t) rows.push_back(begin + t);
    cu.push_back(cu.back() + n);
    slots.push_back(batch.state_slots[size_t(b)]);
    last_rows.push_back(begin + n - 1);
  }
  if (slots.empty()) return ok_status();
  // Through the step's staging when there is one (the verify step's own uploads have been read:
  // its logits came back to the host before the commit).
  const Tensor rows_d = upload_i32(rows, dev, memory.staging),
               cu_d = upload_i32(cu, dev, memory.staging),
               slots_d = upload_i32(slots, dev, memory.staging);
  for (int64_t i = 0; i < config_.num_layers; ++i) {
    const MixerKind kind = config_.mixers[size_t(i)];
    if (!is_linear_mixer(kind) || memory.verify->layers[size_t(i)].fused_tokens > 0) continue;
    const LinearMemory linear{.conv_pool = memory.conv_state[size_t(i)],
                              .ssm_pool = memory.ssm_state[size_t(i)],
                              .slots = slots_d,
                              .cu_seqlens = cu_d,
                              .decode = false,
                              .backends = linear_backends_};
    const DecoderLayer& layer = layers_[size_t(i)];
    HYLA_RETURN_IF_ERROR(linear_commit_verify(
        config_, kind == MixerKind::kGatedDeltaNet ? layer.gdn.conv : layer.kda.conv,
        memory.verify->layers[size_t(i)], memory.verify->mode, linear, rows_d, last_rows, slots));
  }
  return ok_status();
}

int64_t LinearVerifyRecord::bytes() const {
  return qkv.nbytes() + step_states.nbytes() + g.nbytes() + beta.nbytes();
}

int64_t VerifyRecord::bytes() const {
  int64_t n = 0;
  for (const LinearVerifyRecord& l : layers) n += l.bytes();
  return n;
}

Status Model::stage_step(const Batch& batch, HostStaging& staging) const {
  (void)upload_i32(StepIndices::packed(batch), device(), &staging, /*upload=*/false);
  if (!has_attention(config_)) return ok_status();
  return paged_batch(batch, device(), &staging, /*upload=*/false).status();
}

Result<std::vector<int32_t>> greedy_generate(const Model& model, std::span<const int32_t> prompt,
                                             int64_t n, Tensor* logits_out) {
  const int64_t V = model.config().vocab_size;
  SequenceState state = model.new_sequence(int64_t(prompt.size()) + n);
  if (logits_out) *logits_out = Tensor::empty({n, V}, DType::kF32);
  std::vector<int32_t> out;
  Result<Tensor> logits = model.forward(prompt, state);
  for (int64_t i = 0; i < n; ++i) {
    if (!logits.ok()) return logits.status();
    // the last row, copied to the host (from a CUDA model's device)
    std::vector<float> row(static_cast<size_t>(V));
    device_copy(row.data(), Device::cpu(), logits->data<float>() + (logits->size(0) - 1) * V,
                logits->device(), size_t(V) * sizeof(float));
    const float* last = row.data();
    if (logits_out) std::memcpy(logits_out->host<float>() + i * V, last, size_t(V) * sizeof(float));
    const int32_t next = int32_t(std::max_element(last, last + V) - last);
    out.push_back(next);
    if (i + 1 < n) logits = model.forward(std::span<const int32_t>(&out.back(), 1), state);
  }
  return out;
}

}  // namespace hyla::model

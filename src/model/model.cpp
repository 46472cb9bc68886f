// The hybrid model runner (see model.h).
#include "model/model.h"

#include <algorithm>
#include <cstring>

#include "kernels/linear.h"
#include "kernels/rmsnorm.h"

namespace hyla::model {

namespace {

/// a += b, both [T, hidden] f32 contiguous.
void add_in_place(const Tensor& a, const Tensor& b) {
  float* dst = a.data<float>();
  const float* src = b.data<float>();
  for (int64_t i = 0; i < a.numel(); ++i) dst[i] += src[i];
}

Status norm(const Tensor& x, const Tensor& weight, const ModelConfig& c, const Tensor& y) {
  return kernels::rmsnorm(
      {.x = x, .weight = weight, .eps = c.rms_norm_eps, .form = c.norm_form, .y = y});
}

}  // namespace

Model::Model(ModelConfig config, Tensor embedding, std::vector<DecoderLayer> layers,
             Tensor final_norm, Tensor lm_head)
    : config_(std::move(config)),
      embedding_(std::move(embedding)),
      layers_(std::move(layers)),
      final_norm_(std::move(final_norm)),
      lm_head_(std::move(lm_head)) {}

SequenceState Model::new_sequence(int64_t capacity) const {
  SequenceState s;
  s.capacity = capacity;
  for (MixerKind kind : config_.mixers) {
    switch (kind) {
      case MixerKind::kGatedDeltaNet: s.layers.push_back(gdn_new_state(config_)); break;
      case MixerKind::kKimiDelta: s.layers.push_back(kda_new_state(config_)); break;
      case MixerKind::kFullAttention:
        s.layers.push_back(attention_new_state(config_, capacity));
        break;
      case MixerKind::kLatentAttention:
        s.layers.push_back(latent_attention_new_state(config_, capacity));
        break;
    }
  }
  return s;
}

Result<Tensor> Model::forward(std::span<const int32_t> tokens, SequenceState& state,
                              ForwardTrace* trace) const {
  const ModelConfig& c = config_;
  const int64_t T = int64_t(tokens.size()), H = c.hidden_size, L = c.num_layers;
  if (T == 0) return invalid_argument("forward: no tokens");
  if (int64_t(state.layers.size()) != L)
    return invalid_argument("forward: the sequence state has ", state.layers.size(),
                            " layers, the model ", L, " (use Model::new_sequence)");
  if (state.length + T > state.capacity)
    return out_of_range("forward: ", state.length, " + ", T,
                        " tokens exceed the sequence capacity ", state.capacity);
  for (int64_t t = 0; t < T; ++t)
    if (tokens[size_t(t)] < 0 || tokens[size_t(t)] >= c.vocab_size)
      return out_of_range("forward: token ", t, " is ", tokens[size_t(t)], ", outside [0, ",
                          c.vocab_size, ")");

  // h = embed(tokens)
  Tensor h = Tensor::empty({T, H}, DType::kF32);
  for (int64_t t = 0; t < T; ++t)
    std::memcpy(h.data<float>() + t * H, embedding_.data<float>() + tokens[size_t(t)] * H,
                size_t(H) * sizeof(float));
  if (trace) {
    *trace = ForwardTrace{};
    trace->hidden_states.push_back(h.clone());
  }

  Tensor normed = Tensor::empty({T, H}, DType::kF32);
  Tensor branch = Tensor::empty({T, H}, DType::kF32);
  for (int64_t i = 0; i < L; ++i) {
    const DecoderLayer& layer = layers_[size_t(i)];
    LayerState& ls = state.layers[size_t(i)];
    // h += mixer(norm(h))
    HYLA_RETURN_IF_ERROR(norm(h, layer.input_norm, c, normed));
    switch (c.mixers[size_t(i)]) {
      case MixerKind::kGatedDeltaNet:
        HYLA_RETURN_IF_ERROR(gdn_forward(layer.gdn, c, normed, ls, branch));
        break;
      case MixerKind::kKimiDelta:
        HYLA_RETURN_IF_ERROR(kda_forward(layer.kda, c, normed, ls, branch));
        break;
      case MixerKind::kFullAttention:
        HYLA_RETURN_IF_ERROR(
            attention_forward(layer.attention, c, normed, state.length, ls, branch));
        break;
      case MixerKind::kLatentAttention:
        HYLA_RETURN_IF_ERROR(
            latent_attention_forward(layer.latent, c, normed, state.length, ls, branch));
        break;
    }
    if (trace) trace->mixer_out.push_back(branch.clone());
    add_in_place(h, branch);

    // h += mlp(norm(h))
    HYLA_RETURN_IF_ERROR(norm(h, layer.post_norm, c, normed));
    Tensor ids, weights;
    if (c.mlps[size_t(i)] == MlpKind::kMoe) {
      HYLA_RETURN_IF_ERROR(moe_forward(layer.moe, c.moe, normed, branch, &ids, &weights));
    } else {
      HYLA_RETURN_IF_ERROR(dense_mlp_forward(layer.dense, normed, branch));
    }
    if (trace) {
      trace->mlp_out.push_back(branch.clone());
      trace->router_ids.push_back(ids);
      trace->router_weights.push_back(weights);
    }
    add_in_place(h, branch);
    if (trace && i + 1 < L) trace->hidden_states.push_back(h.clone());
  }
  if (trace) trace->last_layer_out = h.clone();

  // logits = lm_head(norm(h))
  HYLA_RETURN_IF_ERROR(norm(h, final_norm_, c, normed));
  if (trace) trace->hidden_states.push_back(normed.clone());
  Tensor logits = Tensor::empty({T, c.vocab_size}, DType::kF32);
  HYLA_RETURN_IF_ERROR(kernels::linear({.x = normed, .weight = lm_head_, .bias = {}, .y = logits}));
  state.length += T;
  return logits;
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
    const float* last = logits->data<float>() + (logits->size(0) - 1) * V;
    if (logits_out) std::memcpy(logits_out->data<float>() + i * V, last, size_t(V) * sizeof(float));
    const int32_t next = int32_t(std::max_element(last, last + V) - last);
    out.push_back(next);
    if (i + 1 < n) logits = model.forward(std::span<const int32_t>(&out.back(), 1), state);
  }
  return out;
}

}  // namespace hyla::model

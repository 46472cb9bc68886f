// Qwen3-Next (qwen3_next), Qwen3.5 (qwen3_5, dense MLP) and Qwen3.5-MoE (qwen3_5_moe): config,
// mapping table and loader. HF: Qwen3NextForCausalLM, Qwen3_5ForCausalLM, Qwen3_5MoeForCausalLM.
// The three differ in two places only:
//   - GDN projections: Qwen3-Next groups them per key head (in_proj_qkvz rows per group
//     [q_g | k_g | v_g | z_g], in_proj_ba rows [b_g | a_g]); Qwen3.5 has in_proj_qkv / _z / _b /
//     _a.
//   - MLP: Qwen3-Next and Qwen3.5-MoE use MoE (softmax top-k + sigmoid-gated shared expert);
//     Qwen3.5 a dense SwiGLU MLP.
// Everything else: (1 + w) RMSNorms, gated full attention every 4th layer with partial RoPE.
#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "model/architecture.h"
#include "model/config_json.h"
#include "model/json_file.h"
#include "model/mtp.h"
#include "model/weight_loader.h"

namespace hyla::model {

namespace {

enum class QwenVariant { kNext, k35, k35Moe };

QwenVariant variant_of(const std::string& model_type) {
  if (model_type.rfind("qwen3_next", 0) == 0) return QwenVariant::kNext;
  if (model_type.rfind("qwen3_5_moe", 0) == 0) return QwenVariant::k35Moe;
  return QwenVariant::k35;
}
QwenVariant variant_of(const ModelConfig& c) { return variant_of(c.model_type); }

// ---- config ----

Result<ModelConfig> parse_qwen(const nlohmann::json& j, const std::string& source,
                               QwenVariant variant) {
  return config_field_guard(source, [&]() -> Result<ModelConfig> {
    ModelConfig c;
    // The decoder's own model_type (qwen3_5_text, ...) when it names this variant; else (absent,
    // not a string, or another variant under a registered wrapper) the variant's name, because
    // the mapping table is chosen by it.
    const auto type_it = j.find("model_type");
    const std::string declared =
        type_it != j.end() && type_it->is_string() ? type_it->get<std::string>() : std::string();
    c.model_type = !declared.empty() && variant_of(declared) == variant ? declared
                   : variant == QwenVariant::kNext                      ? "qwen3_next"
                   : variant == QwenVariant::k35Moe                     ? "qwen3_5_moe"
                                                                        : "qwen3_5";
    c.vocab_size = config_int(j, "vocab_size", {1, kMaxVocab});
    c.hidden_size = config_int(j, "hidden_size", {1, kMaxHidden});
    c.num_layers = config_int(j, "num_hidden_layers", {1, kMaxLayers});
    c.intermediate_size = config_int(j, "intermediate_size", 0, {1, kMaxWidth});
    c.rms_norm_eps = float(config_number(j, "rms_norm_eps", 1e-6));
    c.norm_form = kernels::RmsNormForm::kOffset;
    c.tie_word_embeddings = config_bool(j, "tie_word_embeddings", false);
    c.max_context = config_int(j, "max_position_embeddings", 0, {1, kMaxContext});

    // Layer kinds: layer_types when given, else full attention every full_attention_interval
    // layers (a divisor, so >= 1).
    const auto types = config_string_list(j, "layer_types");
    const int64_t interval = config_int(j, "full_attention_interval", 4, {1, kMaxLayers});
    if (types && int64_t(types->size()) != c.num_layers)
      throw ConfigFieldError(str_cat("layer_types has ", types->size(), " entries, expected ",
                                     c.num_layers, " (num_hidden_layers)"));
    for (int64_t i = 0; i < c.num_layers; ++i) {
      bool full = false;
      if (types) {
        const std::string& t = (*types)[size_t(i)];
        if (t != "linear_attention" && t != "full_attention")
          throw ConfigFieldError(str_cat("layer_types[", i, "] is '", text_excerpt(t),
                                         "', expected linear_attention or full_attention"));
        full = t == "full_attention";
      } else {
        full = (i + 1) % interval == 0;
      }
      c.mixers.push_back(full ? MixerKind::kFullAttention : MixerKind::kGatedDeltaNet);
    }

    LinearAttentionConfig& l = c.linear;
    l.num_k_heads = config_int(j, "linear_num_key_heads", {1, kMaxHeads});
    l.num_v_heads = config_int(j, "linear_num_value_heads", {1, kMaxHeads});
    l.head_k_dim = config_int(j, "linear_key_head_dim", {1, kMaxHeadDim});
    l.head_v_dim = config_int(j, "linear_value_head_dim", {1, kMaxHeadDim});
    l.conv_kernel = config_int(j, "linear_conv_kernel_dim", 4, {1, kMaxConvKernel});

    FullAttentionConfig& a = c.attention;
    a.num_heads = config_int(j, "num_attention_heads", {1, kMaxHeads});
    a.num_kv_heads = config_int(j, "num_key_value_heads", a.num_heads, {1, kMaxHeads});
    // head_dim defaults to hidden_size / num_attention_heads (HF), which must not round to 0.
    a.head_dim = config_int(j, "head_dim", c.hidden_size / a.num_heads, {1, kMaxHeadDim});
    if (a.head_dim < 1)
      throw ConfigFieldError(str_cat("no 'head_dim', and hidden_size / num_attention_heads = ",
                                     c.hidden_size, " / ", a.num_heads, " rounds to 0"));
    const nlohmann::json& rope = config_object(j, "rope_parameters");
    const double partial = config_number(rope, "partial_rotary_factor",
                                         config_number(j, "partial_rotary_factor", 0.25));
    if (!(partial >= 0.0 && partial <= 1.0))
      throw ConfigFieldError(
          str_cat("field 'partial_rotary_factor' is ", partial, ", expected a number in [0, 1]"));
    a.rotary_dim = int64_t(double(a.head_dim) * partial);
    a.rope_theta =
        float(config_number(rope, "rope_theta", config_number(j, "rope_theta", 10000.0)));
    if (!(a.rope_theta > 0.0f) || !std::isfinite(a.rope_theta))
      throw ConfigFieldError(str_cat("field 'rope_theta' is ", a.rope_theta,
                                     ", expected a positive number below 3.4e38"));
    a.output_gate = true;

    // MLP kinds.
    const bool moe_model = variant != QwenVariant::k35;
    MoeConfig& m = c.moe;
    if (moe_model) {
      m.num_experts = config_int(j, "num_experts", {0, kMaxExperts});  // 0: every layer dense
      m.top_k = config_int(j, "num_experts_per_tok", {1, kMaxExperts});
      m.expert_intermediate = config_int(j, "moe_intermediate_size", {1, kMaxWidth});
      m.scoring = MoeScoringKind::kSoftmax;
      // Qwen3.5-MoE always renormalises; Qwen3-Next does iff norm_topk_prob.
      m.renormalize = variant == QwenVariant::k35Moe || config_bool(j, "norm_topk_prob", true);
      m.shared_intermediate =
          config_int(j, "shared_expert_intermediate_size", 0, {0, kMaxWidth});  // 0: none
      m.shared_expert_gate = m.shared_intermediate > 0;
    }
    // MoE every decoder_sparse_step layers (a divisor, so >= 1), except mlp_only_layers
    // (0-indexed).
    const int64_t sparse_step = config_int(j, "decoder_sparse_step", 1, {1, kMaxLayers});
    std::vector<bool> only_mlp(size_t(c.num_layers), false);
    for (int64_t layer : config_int_list(j, "mlp_only_layers", {}, {0, c.num_layers - 1}))
      only_mlp[size_t(layer)] = true;
    for (int64_t i = 0; i < c.num_layers; ++i) {
      const bool moe =
          moe_model && m.num_experts > 0 && !only_mlp[size_t(i)] && (i + 1) % sparse_step == 0;
      c.mlps.push_back(moe ? MlpKind::kMoe : MlpKind::kDense);
    }
    // The MTP draft head (Qwen3.5: inside text_config, which `j` already is): full-attention
    // layers whose MLP follows the same rule by their index inside mtp.layers (as vLLM builds
    // them: Qwen3NextDecoderLayer / Qwen3_5DecoderLayer with layer_idx k).
    c.num_mtp_layers = config_int(j, "mtp_num_hidden_layers", 0, {0, kMaxLayers});
    for (int64_t k = 0; k < c.num_mtp_layers; ++k) {
      const bool moe = moe_model && m.num_experts > 0 &&
                       !(k < c.num_layers && only_mlp[size_t(k)]) && (k + 1) % sparse_step == 0;
      c.mtp_mlps.push_back(moe ? MlpKind::kMoe : MlpKind::kDense);
    }
    HYLA_RETURN_IF_ERROR(validate(c, source));
    return c;
  });
}

Result<ModelConfig> parse_qwen3_next(const nlohmann::json& j, const std::string& source) {
  return parse_qwen(j, source, QwenVariant::kNext);
}
Result<ModelConfig> parse_qwen3_5(const nlohmann::json& j, const std::string& source) {
  return parse_qwen(j, source, QwenVariant::k35);
}
Result<ModelConfig> parse_qwen3_5_moe(const nlohmann::json& j, const std::string& source) {
  return parse_qwen(j, source, QwenVariant::k35Moe);
}

// ---- mapping table ----

std::string layer_prefix(int64_t i) { return str_cat("model.layers.", i, "."); }

/// Every checkpoint tensor of one layer's GDN mixer.
void gdn_specs(const ModelConfig& c, int64_t i, QwenVariant v, std::vector<WeightSpec>& out) {
  const LinearAttentionConfig& l = c.linear;
  const int64_t Hk = l.num_k_heads * l.head_k_dim, Hv = l.num_v_heads * l.head_v_dim;
  const int64_t hidden = c.hidden_size, HV = l.num_v_heads;
  const std::string p = layer_prefix(i) + "linear_attn.";
  if (v == QwenVariant::kNext) {
    out.push_back({p + "in_proj_qkvz.weight", {2 * Hk + 2 * Hv, hidden}, WeightRole::kContent, i});
    out.push_back({p + "in_proj_ba.weight", {2 * HV, hidden}, WeightRole::kForgetGate, i});
  } else {
    out.push_back({p + "in_proj_qkv.weight", {2 * Hk + Hv, hidden}, WeightRole::kContent, i});
    out.push_back({p + "in_proj_z.weight", {Hv, hidden}, WeightRole::kOutput, i});
    out.push_back({p + "in_proj_b.weight", {HV, hidden}, WeightRole::kWriteStrength, i});
    out.push_back({p + "in_proj_a.weight", {HV, hidden}, WeightRole::kForgetGate, i});
  }
  out.push_back({p + "conv1d.weight", {2 * Hk + Hv, 1, l.conv_kernel}, WeightRole::kContent, i});
  out.push_back({p + "A_log", {HV}, WeightRole::kForgetGate, i});
  out.push_back({p + "dt_bias", {HV}, WeightRole::kForgetGate, i});
  out.push_back({p + "norm.weight", {l.head_v_dim}, WeightRole::kOutput, i});
  out.push_back({p + "out_proj.weight", {hidden, Hv}, WeightRole::kOutput, i});
}

/// `prefix`: "model.layers.{i}." (layer i) or an MTP layer's "mtp.layers.{k}." (layer -1).
void attention_specs(const ModelConfig& c, const std::string& prefix, int64_t i,
                     std::vector<WeightSpec>& out) {
  const FullAttentionConfig& a = c.attention;
  const std::string p = prefix + "self_attn.";
  const int64_t hidden = c.hidden_size, q = a.num_heads * a.head_dim * (a.output_gate ? 2 : 1);
  out.push_back({p + "q_proj.weight", {q, hidden}, WeightRole::kAttention, i});
  out.push_back(
      {p + "k_proj.weight", {a.num_kv_heads * a.head_dim, hidden}, WeightRole::kAttention, i});
  out.push_back(
      {p + "v_proj.weight", {a.num_kv_heads * a.head_dim, hidden}, WeightRole::kAttention, i});
  out.push_back(
      {p + "o_proj.weight", {hidden, a.num_heads * a.head_dim}, WeightRole::kAttention, i});
  out.push_back({p + "q_norm.weight", {a.head_dim}, WeightRole::kAttention, i});
  out.push_back({p + "k_norm.weight", {a.head_dim}, WeightRole::kAttention, i});
}

void swiglu_specs(const std::string& p, int64_t hidden, int64_t inter, WeightRole role, int64_t i,
                  std::vector<WeightSpec>& out) {
  out.push_back({p + "gate_proj.weight", {inter, hidden}, role, i});
  out.push_back({p + "up_proj.weight", {inter, hidden}, role, i});
  out.push_back({p + "down_proj.weight", {hidden, inter}, role, i});
}

/// How a checkpoint stores routed experts: one gate/up/down triple per expert (HF's per-expert
/// modules), or fused per layer as transformers 5 saves them: experts.gate_up_proj [E, 2I, hidden]
/// (each expert's gate rows, then its up rows) and experts.down_proj [E, hidden, I].
enum class ExpertLayout { kPerExpert, kFused };

void mlp_specs(const ModelConfig& c, const std::string& prefix, int64_t i, MlpKind kind,
               ExpertLayout experts, std::vector<WeightSpec>& out) {
  const std::string p = prefix + "mlp.";
  const int64_t hidden = c.hidden_size;
  if (kind == MlpKind::kDense) {
    swiglu_specs(p, hidden, c.intermediate_size, WeightRole::kDenseMlp, i, out);
    return;
  }
  const MoeConfig& m = c.moe;
  out.push_back({p + "gate.weight", {m.num_experts, hidden}, WeightRole::kRouter, i});
  if (experts == ExpertLayout::kFused) {
    out.push_back({p + "experts.gate_up_proj",
                   {m.num_experts, 2 * m.expert_intermediate, hidden},
                   WeightRole::kExperts,
                   i});
    out.push_back({p + "experts.down_proj",
                   {m.num_experts, hidden, m.expert_intermediate},
                   WeightRole::kExperts,
                   i});
  } else {
    for (int64_t e = 0; e < m.num_experts; ++e)
      swiglu_specs(str_cat(p, "experts.", e, "."), hidden, m.expert_intermediate,
                   WeightRole::kExperts, i, out);
  }
  if (m.shared_intermediate > 0) {
    swiglu_specs(p + "shared_expert.", hidden, m.shared_intermediate, WeightRole::kSharedExperts, i,
                 out);
    out.push_back({p + "shared_expert_gate.weight", {1, hidden}, WeightRole::kSharedExperts, i});
  }
}

std::vector<WeightSpec> qwen_weights_with(const ModelConfig& c, ExpertLayout experts) {
  const QwenVariant v = variant_of(c);
  std::vector<WeightSpec> out;
  out.push_back(
      {"model.embed_tokens.weight", {c.vocab_size, c.hidden_size}, WeightRole::kEmbedding});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    out.push_back(
        {layer_prefix(i) + "input_layernorm.weight", {c.hidden_size}, WeightRole::kNorm, i});
    if (c.mixers[size_t(i)] == MixerKind::kGatedDeltaNet) {
      gdn_specs(c, i, v, out);
    } else {
      attention_specs(c, layer_prefix(i), i, out);
    }
    out.push_back({layer_prefix(i) + "post_attention_layernorm.weight",
                   {c.hidden_size},
                   WeightRole::kNorm,
                   i});
    mlp_specs(c, layer_prefix(i), i, c.mlps[size_t(i)], experts, out);
  }
  out.push_back({"model.norm.weight", {c.hidden_size}, WeightRole::kNorm});
  if (!c.tie_word_embeddings)
    out.push_back({"lm_head.weight", {c.vocab_size, c.hidden_size}, WeightRole::kLmHead});
  return out;
}

/// The MTP draft head's tensors (mtp.h; none without MTP layers): its own, then each layer's
/// attention and MLP named as the model's layers' under mtp.layers.{k}. (model level, layer -1).
/// Read by the loader; `hyla inspect` lists the decoder's table only.
std::vector<WeightSpec> qwen_mtp_weights(const ModelConfig& c, ExpertLayout experts) {
  std::vector<WeightSpec> out = mtp_module_specs(c);
  for (int64_t k = 0; k < c.num_mtp_layers; ++k) {
    attention_specs(c, mtp_layer_prefix(k), -1, out);
    mlp_specs(c, mtp_layer_prefix(k), -1, c.mtp_mlps[size_t(k)], experts, out);
  }
  return out;
}

/// The mapping table as Hugging Face's per-expert modules name it (what `hyla inspect` lists).
std::vector<WeightSpec> qwen_weights(const ModelConfig& c) {
  return qwen_weights_with(c, ExpertLayout::kPerExpert);
}

/// Fused when the first MoE layer of `mlps` (layer k named prefix(k)) stores
/// experts.gate_up_proj. The decoder's layers and the MTP head's are asked apart: a checkpoint may
/// store them differently.
template <typename Prefix>
ExpertLayout expert_layout_of(const Checkpoint& ckpt, const std::vector<MlpKind>& mlps,
                              Prefix prefix) {
  for (size_t k = 0; k < mlps.size(); ++k)
    if (mlps[k] == MlpKind::kMoe)
      return ckpt.find(prefix(int64_t(k)) + "mlp.experts.gate_up_proj") != nullptr
                 ? ExpertLayout::kFused
                 : ExpertLayout::kPerExpert;
  return ExpertLayout::kPerExpert;
}

bool holds_mtp_tensors(const Checkpoint& ckpt) {
  for (const std::string& name : ckpt.names())
    if (name.starts_with("mtp.")) return true;
  return false;
}

// ---- loader ----

/// Loads tensors by the names of the mapping table (which check_checkpoint has validated).
class QwenLoader {
 public:
  QwenLoader(const ModelConfig& c, const Checkpoint& ckpt, const std::vector<WeightSpec>& specs)
      : c_(c), ckpt_(ckpt) {
    for (const WeightSpec& s : specs) shapes_.emplace(s.name, s.shape);
  }
  Result<Tensor> get(const std::string& name) const {
    auto it = shapes_.find(name);
    HYLA_CHECK(it != shapes_.end(), "QwenLoader: '", name, "' is not in the mapping table");
    return load_f32(ckpt_, name, it->second);
  }

  Result<GdnWeights> gdn(int64_t i) const {
    const LinearAttentionConfig& l = c_.linear;
    const int64_t H = l.num_k_heads, HV = l.num_v_heads, r = HV / H, dk = l.head_k_dim,
                  dv = l.head_v_dim;
    const std::string p = layer_prefix(i) + "linear_attn.";
    GdnWeights w;
    if (variant_of(c_) == QwenVariant::kNext) {
      // Regroup [q_g | k_g | v_g | z_g] per key group g and [b_g | a_g] into [q | k | v | z | b |
      // a].
      HYLA_ASSIGN_OR_RETURN(Tensor qkvz, get(p + "in_proj_qkvz.weight"));
      HYLA_ASSIGN_OR_RETURN(Tensor ba, get(p + "in_proj_ba.weight"));
      const int64_t group = 2 * dk + 2 * r * dv;
      std::vector<Tensor> q, k, v, z, b, a;
      for (int64_t g = 0; g < H; ++g) {
        const int64_t base = g * group;
        q.push_back(take_rows(qkvz, base, dk));
        k.push_back(take_rows(qkvz, base + dk, dk));
        v.push_back(take_rows(qkvz, base + 2 * dk, r * dv));
        z.push_back(take_rows(qkvz, base + 2 * dk + r * dv, r * dv));
        b.push_back(take_rows(ba, g * 2 * r, r));
        a.push_back(take_rows(ba, g * 2 * r + r, r));
      }
      std::vector<Tensor> rows;
      for (auto* part : {&q, &k, &v, &z, &b, &a})
        rows.insert(rows.end(), part->begin(), part->end());
      w.in_proj = concat_rows(rows);
    } else {
      HYLA_ASSIGN_OR_RETURN(Tensor qkv, get(p + "in_proj_qkv.weight"));
      HYLA_ASSIGN_OR_RETURN(Tensor z, get(p + "in_proj_z.weight"));
      HYLA_ASSIGN_OR_RETURN(Tensor b, get(p + "in_proj_b.weight"));
      HYLA_ASSIGN_OR_RETURN(Tensor a, get(p + "in_proj_a.weight"));
      w.in_proj = concat_rows({qkv, z, b, a});
    }
    HYLA_ASSIGN_OR_RETURN(Tensor conv, get(p + "conv1d.weight"));
    w.conv = squeeze(conv);
    HYLA_ASSIGN_OR_RETURN(w.A_log, get(p + "A_log"));
    HYLA_ASSIGN_OR_RETURN(w.dt_bias, get(p + "dt_bias"));
    HYLA_ASSIGN_OR_RETURN(w.norm, get(p + "norm.weight"));
    HYLA_ASSIGN_OR_RETURN(w.out_proj, get(p + "out_proj.weight"));
    return w;
  }

  /// `prefix`: "model.layers.{i}." or "mtp.layers.{k}.".
  Result<AttentionWeights> attention(const std::string& prefix) const {
    const std::string p = prefix + "self_attn.";
    AttentionWeights w;
    HYLA_ASSIGN_OR_RETURN(Tensor q, get(p + "q_proj.weight"));  // per head [q_h | gate_h]
    HYLA_ASSIGN_OR_RETURN(Tensor k, get(p + "k_proj.weight"));
    HYLA_ASSIGN_OR_RETURN(Tensor v, get(p + "v_proj.weight"));
    w.qkv_proj = concat_rows({q, k, v});
    HYLA_ASSIGN_OR_RETURN(w.q_norm, get(p + "q_norm.weight"));
    HYLA_ASSIGN_OR_RETURN(w.k_norm, get(p + "k_norm.weight"));
    HYLA_ASSIGN_OR_RETURN(w.o_proj, get(p + "o_proj.weight"));
    return w;
  }

  Result<DenseMlpWeights> swiglu(const std::string& p) const {
    DenseMlpWeights w;
    HYLA_ASSIGN_OR_RETURN(Tensor gate, get(p + "gate_proj.weight"));
    HYLA_ASSIGN_OR_RETURN(Tensor up, get(p + "up_proj.weight"));
    w.gate_up = concat_rows({gate, up});
    HYLA_ASSIGN_OR_RETURN(w.down, get(p + "down_proj.weight"));
    return w;
  }

  Result<MoeWeights> moe(const std::string& prefix, ExpertLayout experts) const {
    const std::string p = prefix + "mlp.";
    MoeWeights w;
    HYLA_ASSIGN_OR_RETURN(w.router, get(p + "gate.weight"));
    if (experts == ExpertLayout::kFused) {
      // already stacked as the model keeps them: [E, 2I, hidden] (rows [gate | up]), [E, hidden, I]
      HYLA_ASSIGN_OR_RETURN(w.experts_gate_up, get(p + "experts.gate_up_proj"));
      HYLA_ASSIGN_OR_RETURN(w.experts_down, get(p + "experts.down_proj"));
    } else {
      const int64_t E = c_.moe.num_experts;
      HYLA_ASSIGN_OR_RETURN(w.experts_gate_up, stack_blocks(E, [&](int64_t e) -> Result<Tensor> {
                              const std::string q = str_cat(p, "experts.", e, ".");
                              HYLA_ASSIGN_OR_RETURN(Tensor gate, get(q + "gate_proj.weight"));
                              HYLA_ASSIGN_OR_RETURN(Tensor up, get(q + "up_proj.weight"));
                              return concat_rows({gate, up});
                            }));
      HYLA_ASSIGN_OR_RETURN(w.experts_down, stack_blocks(E, [&](int64_t e) {
                              return get(str_cat(p, "experts.", e, ".down_proj.weight"));
                            }));
    }
    if (c_.moe.shared_intermediate > 0) {
      HYLA_ASSIGN_OR_RETURN(w.shared, swiglu(p + "shared_expert."));
      HYLA_ASSIGN_OR_RETURN(w.shared_gate, get(p + "shared_expert_gate.weight"));
    }
    return w;
  }

 private:
  const ModelConfig& c_;
  const Checkpoint& ckpt_;
  std::map<std::string, std::vector<int64_t>> shapes_;
};

Result<std::unique_ptr<Model>> load_qwen(const ModelConfig& config, const Checkpoint& ckpt) {
  ModelConfig c = config;
  // A config that declares MTP layers over a checkpoint without any mtp.* tensor (an export that
  // dropped the draft head) loads the decoder alone and says so; a partial head is an error.
  if (c.num_mtp_layers > 0 && !holds_mtp_tensors(ckpt)) {
    c.warnings.push_back(str_cat(ckpt.source(), ": config.json declares mtp_num_hidden_layers ",
                                 c.num_mtp_layers,
                                 " but the checkpoint holds no mtp.* tensor: loaded without the "
                                 "MTP draft head"));
    c.num_mtp_layers = 0;
    c.mtp_mlps.clear();
  }
  const ExpertLayout experts = expert_layout_of(ckpt, c.mlps, layer_prefix),
                     mtp_experts = expert_layout_of(ckpt, c.mtp_mlps, mtp_layer_prefix);
  std::vector<WeightSpec> specs = qwen_weights_with(c, experts);
  for (WeightSpec& s : qwen_mtp_weights(c, mtp_experts)) specs.push_back(std::move(s));
  HYLA_RETURN_IF_ERROR(check_checkpoint(ckpt, specs));
  const QwenLoader load(c, ckpt, specs);
  const auto get = [&](const std::string& name) { return load.get(name); };
  // the MLP of a layer (model.layers.{i}. or mtp.layers.{k}.)
  const auto fill_mlp = [&](const std::string& prefix, MlpKind mlp, ExpertLayout layout,
                            DecoderLayer& layer) -> Status {
    if (mlp == MlpKind::kMoe) {
      HYLA_ASSIGN_OR_RETURN(layer.moe, load.moe(prefix, layout));
    } else {
      HYLA_ASSIGN_OR_RETURN(layer.dense, load.swiglu(prefix + "mlp."));
    }
    return ok_status();
  };
  HYLA_ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
                        assemble_model(c, get, [&](int64_t i, DecoderLayer& layer) -> Status {
                          if (c.mixers[size_t(i)] == MixerKind::kGatedDeltaNet) {
                            HYLA_ASSIGN_OR_RETURN(layer.gdn, load.gdn(i));
                          } else {
                            HYLA_ASSIGN_OR_RETURN(layer.attention, load.attention(layer_prefix(i)));
                          }
                          return fill_mlp(layer_prefix(i), c.mlps[size_t(i)], experts, layer);
                        }));
  if (c.num_mtp_layers > 0) {
    HYLA_ASSIGN_OR_RETURN(
        MtpWeights mtp,
        load_mtp(c, get, [&](int64_t k, const std::string& prefix, DecoderLayer& layer) -> Status {
          HYLA_ASSIGN_OR_RETURN(layer.attention, load.attention(prefix));
          return fill_mlp(prefix, c.mtp_mlps[size_t(k)], mtp_experts, layer);
        }));
    HYLA_RETURN_IF_ERROR(model->set_mtp(std::move(mtp)));
  }
  return model;
}

}  // namespace

extern const Architecture kQwen3NextArchitecture{
    "qwen3_next",     "Qwen3-Next: GDN (grouped projections) + gated attention, MoE",
    parse_qwen3_next, qwen_weights,
    load_qwen,        nullptr};
extern const Architecture kQwen35Architecture{
    "qwen3_5",     "Qwen3.5: GDN + gated attention, dense SwiGLU MLP",
    parse_qwen3_5, qwen_weights,
    load_qwen,     nullptr};
extern const Architecture kQwen35MoeArchitecture{
    "qwen3_5_moe",     "Qwen3.5-MoE: GDN + gated attention, MoE",
    parse_qwen3_5_moe, qwen_weights,
    load_qwen,         nullptr};

}  // namespace hyla::model

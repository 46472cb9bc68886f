// Kimi-Linear (kimi_linear) and the Kimi K3 text decoder (kimi_k3): config, mapping table and
// loader. HF: KimiLinearForCausalLM; K3: Moonshot's modeling_kimi_linear.py for Kimi-K3, SGLang
// KimiK3LinearForCausalLM (../notes/kimi_k3.md).
//   - KDA layers (linear_attn_config.kda_layers, 1-indexed): separate q/k/v projections and convs,
//     low-rank forget gate f_a -> f_b, beta from b_proj, output gate g_a -> g_b (K3: one full-rank
//     g_proj) with o_norm, safe gate when linear_attn_config.gate_lower_bound is set (K3: -5).
//   - MLA layers: NoPE latent attention (optional q LoRA, optional sigmoid output gate g_proj).
//   - MLP: dense below first_k_dense_replace, else sigmoid-routed MoE with correction bias,
//     renormalisation, routed scaling and ungated shared experts; SwiGLU (hidden_act silu) or
//     SiTU-GLU (K3, "situ"). K3's latent MoE runs the routed experts at routed_expert_hidden_size
//     between routed_expert_down_proj, routed_expert_norm and routed_expert_up_proj.
//   - K3's Attention Residuals (attn_res_block_size): per layer self_attention_res_* and mlp_res_*
//     score pairs, one output_attn_res_* pair (residual_stream.h, layers/attn_residual.h).
//   Norms are w * xhat.
// Load-time fusion (seed, "在 SGLang 里的落地"): [q | k | v (| g)] rows in one GEMM, the three
// convs in one [3 H d, K], [f_a | b] in one GEMM, A_log truncated to [H] (a non-zero tail is
// reported in ModelConfig::warnings), dt_bias as [H, d], each AttnRes score pair folded to one
// vector. The released K3 checkpoint's "language_model." prefix is resolved by Checkpoint; its
// routed experts are MXFP4-packed, which is refused by name (no dequantiser yet).
#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "model/architecture.h"
#include "model/config_json.h"
#include "model/json_file.h"
#include "model/weight_loader.h"

namespace hyla::model {

namespace {

// ---- config ----

bool has_field(const nlohmann::json& j, const char* key) {
  return j.is_object() && j.contains(key) && !j[key].is_null();
}

std::string config_string(const nlohmann::json& j, const char* key, const std::string& fallback) {
  if (!has_field(j, key)) return fallback;
  if (!j[key].is_string())
    throw ConfigFieldError(
        str_cat("field '", key, "' must be a string, got ", json_excerpt(j[key])));
  return j[key].get<std::string>();
}

/// "'a' (or 'b', 'c')" for messages about aliased fields.
std::string alias_names(std::initializer_list<const char*> keys) {
  std::string s = str_cat("'", *keys.begin(), "'");
  if (keys.size() > 1) {
    s += " (or ";
    for (auto it = keys.begin() + 1; it != keys.end(); ++it)
      s += str_cat(it == keys.begin() + 1 ? "" : ", ", "'", *it, "'");
    s += ")";
  }
  return s;
}

/// An integer field spelled under several names (the golden config carries them all): the first
/// present wins; present ones must agree.
int64_t config_int_alias(const nlohmann::json& j, std::initializer_list<const char*> keys,
                         int64_t fallback, IntRange range) {
  const char* found = nullptr;
  int64_t value = fallback;
  for (const char* key : keys) {
    if (!has_field(j, key)) continue;
    const int64_t v = config_int(j, key, range);
    if (found && v != value)
      throw ConfigFieldError(
          str_cat("field '", found, "' is ", value, " but its alias '", key, "' is ", v));
    if (!found) value = v;
    found = key;
  }
  return value;
}

bool config_bool_alias(const nlohmann::json& j, std::initializer_list<const char*> keys,
                       bool fallback) {
  for (const char* key : keys)
    if (has_field(j, key)) return config_bool(j, key, fallback);
  return fallback;
}

/// linear_attn_config: KDA geometry, gates and the 1-indexed layer lists.
struct LinearAttnConfig {
  LinearAttentionConfig kda;
  std::vector<int64_t> kda_layers, full_attn_layers;
  bool has_kda_layers = false;
};

LinearAttnConfig parse_linear_attn_config(const nlohmann::json& j) {
  if (!has_field(j, "linear_attn_config"))
    throw ConfigFieldError(
        "missing required field 'linear_attn_config' ({num_heads, head_dim, kda_layers, ...})");
  const nlohmann::json& lac = config_object(j, "linear_attn_config");
  try {
    LinearAttnConfig out;
    LinearAttentionConfig& l = out.kda;
    l.num_k_heads = l.num_v_heads = config_int(lac, "num_heads", {1, kMaxHeads});
    l.head_k_dim = l.head_v_dim = config_int(lac, "head_dim", {1, kMaxHeadDim});
    l.conv_kernel = config_int(lac, "short_conv_kernel_size", 4, {1, kMaxConvKernel});
    l.full_rank_output_gate = config_bool(lac, "use_full_rank_gate", false);
    if (has_field(lac, "gate_lower_bound")) {
      const double bound = config_number(lac, "gate_lower_bound", 0.0);
      if (!(bound >= -1e6 && bound <= 1e6))  // K3: -5; the gate is bound * sigmoid(...)
        throw ConfigFieldError(
            str_cat("field 'gate_lower_bound' is ", bound, ", expected a number in [-1e6, 1e6]"));
      l.gate_lower_bound = float(bound);
    }
    l.gate_rank = l.head_k_dim;  // f_a_proj (and g_a_proj): hidden -> head_dim
    // Kimi-Linear stores one A_log per head; K3 stores head_dim entries and uses the first H.
    l.a_log_stored = l.full_rank_output_gate ? l.head_k_dim : l.num_k_heads;
    out.has_kda_layers = has_field(lac, "kda_layers");
    // 1-indexed layers; parse_mixers checks them against num_hidden_layers.
    out.kda_layers = config_int_list(lac, "kda_layers", {}, {INT64_MIN, INT64_MAX});
    out.full_attn_layers = config_int_list(lac, "full_attn_layers", {}, {INT64_MIN, INT64_MAX});
    return out;
  } catch (const ConfigFieldError& e) {
    throw ConfigFieldError(str_cat("linear_attn_config: ", e.what()));
  }
}

/// Mixer per layer: layer_types when given (checked against kda_layers), else kda_layers.
std::vector<MixerKind> parse_mixers(const nlohmann::json& j, const LinearAttnConfig& lac,
                                    int64_t L) {
  for (const auto& [list, name] : {std::pair{&lac.kda_layers, "kda_layers"},
                                   std::pair{&lac.full_attn_layers, "full_attn_layers"}})
    for (int64_t layer : *list)
      if (layer < 1 || layer > L)
        throw ConfigFieldError(str_cat("linear_attn_config.", name, " has layer ", layer,
                                       ", expected 1-indexed layers in [1, ", L, "]"));
  std::vector<bool> is_kda(size_t(L) + 1, false), is_full(size_t(L) + 1, false);  // 1-indexed
  for (int64_t layer : lac.kda_layers) is_kda[size_t(layer)] = true;
  for (int64_t layer : lac.full_attn_layers) is_full[size_t(layer)] = true;
  for (int64_t layer = 1; layer <= L; ++layer)
    if (is_kda[size_t(layer)] && is_full[size_t(layer)])
      throw ConfigFieldError(str_cat("linear_attn_config: layer ", layer,
                                     " is in both kda_layers and full_attn_layers"));
  const auto types = config_string_list(j, "layer_types");
  if (!types && !lac.has_kda_layers)
    throw ConfigFieldError(
        "missing required field 'linear_attn_config.kda_layers' (or 'layer_types')");
  if (types && int64_t(types->size()) != L)
    throw ConfigFieldError(str_cat("layer_types has ", types->size(), " entries, expected ", L,
                                   " (num_hidden_layers)"));
  std::vector<MixerKind> mixers;
  for (int64_t i = 0; i < L; ++i) {
    bool kda = is_kda[size_t(i + 1)];
    if (types) {
      const std::string& t = (*types)[size_t(i)];
      if (t != "linear_attention" && t != "full_attention")
        throw ConfigFieldError(str_cat("layer_types[", i, "] is '", text_excerpt(t),
                                       "', expected linear_attention or full_attention"));
      if (lac.has_kda_layers && kda != (t == "linear_attention"))
        throw ConfigFieldError(str_cat("layer_types[", i, "] is '", text_excerpt(t),
                                       "' but linear_attn_config.kda_layers ",
                                       kda ? "contains " : "does not contain ", i + 1));
      kda = t == "linear_attention";
    }
    mixers.push_back(kda ? MixerKind::kKimiDelta : MixerKind::kLatentAttention);
  }
  return mixers;
}

LatentAttentionConfig parse_latent(const nlohmann::json& j) {
  LatentAttentionConfig m;
  m.num_heads = config_int(j, "num_attention_heads", {1, kMaxHeads});
  m.q_lora_rank = config_int(j, "q_lora_rank", 0, {0, kMaxWidth});  // null or 0 = plain q_proj
  m.kv_lora_rank = config_int(j, "kv_lora_rank", {1, kMaxWidth});
  m.qk_nope_head_dim = config_int(j, "qk_nope_head_dim", {0, kMaxHeadDim});
  m.qk_rope_head_dim = config_int(j, "qk_rope_head_dim", {0, kMaxHeadDim});
  m.v_head_dim = config_int(j, "v_head_dim", {1, kMaxHeadDim});
  // q_a_layernorm / kv_a_layernorm are built without rms_norm_eps in HF and Moonshot's code, so
  // they keep KimiRMSNorm's default 1e-6 (SGLang uses rms_norm_eps; the difference is tiny).
  m.kv_a_norm_eps = 1e-6f;
  m.output_gate = config_bool(j, "mla_use_output_gate", false);
  if (!config_bool(j, "mla_use_nope", true))
    throw ConfigFieldError("field 'mla_use_nope' is false: MLA with RoPE is not supported");
  return m;
}

MoeConfig parse_moe(const nlohmann::json& j) {
  MoeConfig m;
  m.num_experts = config_int_alias(j, {"num_experts", "n_routed_experts", "num_local_experts"}, 0,
                                   {0, kMaxExperts});  // 0: no MoE
  if (m.num_experts == 0) return m;
  m.top_k =
      config_int_alias(j, {"num_experts_per_token", "num_experts_per_tok"}, 0, {1, m.num_experts});
  if (m.top_k == 0)
    throw ConfigFieldError(str_cat("missing required field ",
                                   alias_names({"num_experts_per_token", "num_experts_per_tok"})));
  m.expert_intermediate = config_int(j, "moe_intermediate_size", {1, kMaxWidth});
  const std::string act = config_string(j, "moe_router_activation_func", "sigmoid");
  if (act != "sigmoid" && act != "softmax")
    throw ConfigFieldError(str_cat("field 'moe_router_activation_func' is '", text_excerpt(act),
                                   "', expected sigmoid or softmax"));
  m.scoring = act == "sigmoid" ? MoeScoringKind::kSigmoid : MoeScoringKind::kSoftmax;
  m.renormalize = config_bool_alias(j, {"moe_renormalize", "norm_topk_prob"}, true);
  const double scaling = config_number(j, "routed_scaling_factor", 1.0);
  if (!(scaling > 0.0 && scaling <= 1e6))
    throw ConfigFieldError(
        str_cat("field 'routed_scaling_factor' is ", scaling, ", expected a number in (0, 1e6]"));
  m.routed_scaling = float(scaling);
  m.correction_bias = true;  // gate.e_score_correction_bias (noaux_tc), selection only
  // Groups divide the experts (validate checks that they do).
  m.num_groups = config_int_alias(j, {"num_expert_group", "n_group"}, 1, {1, m.num_experts});
  m.topk_groups = config_int(j, "topk_group", 1, {1, m.num_groups});
  // Shared experts run as one SwiGLU of num_shared_experts x moe_intermediate_size.
  m.shared_intermediate =
      m.expert_intermediate *
      config_int_alias(j, {"num_shared_experts", "n_shared_experts"}, 0, {0, kMaxSharedExperts});
  m.shared_expert_gate = false;
  // K3 latent MoE; latent_moe_use_norm defaults to false (SGLang), so it is read, never assumed
  m.latent_dim = config_int(j, "routed_expert_hidden_size", 0, {0, kMaxWidth});
  m.latent_norm = m.latent_dim > 0 && config_bool(j, "latent_moe_use_norm", false);
  return m;
}

/// MLP per layer: mlp_layer_types when given, else MoE from first_k_dense_replace every
/// moe_layer_freq layers (Moonshot's KimiDecoderLayer rule).
std::vector<MlpKind> parse_mlps(const nlohmann::json& j, const MoeConfig& moe, int64_t L) {
  const auto types = config_string_list(j, "mlp_layer_types");
  if (types && int64_t(types->size()) != L)
    throw ConfigFieldError(str_cat("mlp_layer_types has ", types->size(), " entries, expected ", L,
                                   " (num_hidden_layers)"));
  // Layers below first_k_dense_replace are dense (any count; more than L means all of them); MoE
  // every moe_layer_freq layers (a divisor, so >= 1).
  const int64_t first_dense = config_int(j, "first_k_dense_replace", 0, {0, kMaxLayers});
  const int64_t freq = config_int(j, "moe_layer_freq", 1, {1, kMaxLayers});
  std::vector<MlpKind> mlps;
  for (int64_t i = 0; i < L; ++i) {
    bool sparse = moe.num_experts > 0 && i >= first_dense && i % freq == 0;
    if (types) {
      const std::string& t = (*types)[size_t(i)];
      if (t != "dense" && t != "sparse")
        throw ConfigFieldError(str_cat("mlp_layer_types[", i, "] is '", text_excerpt(t),
                                       "', expected dense or sparse"));
      sparse = t == "sparse";
    }
    if (sparse && moe.num_experts == 0)
      throw ConfigFieldError(
          str_cat("layer ", i, " is sparse but the config has no ",
                  alias_names({"num_experts", "n_routed_experts", "num_local_experts"})));
    mlps.push_back(sparse ? MlpKind::kMoe : MlpKind::kDense);
  }
  return mlps;
}

/// Shared by kimi_linear and kimi_k3: a config with K3-only features (Attention Residuals, SiTU,
/// latent MoE), or parsed as kimi_k3, gets model_type kimi_k3.
Result<ModelConfig> parse_kimi_config(const nlohmann::json& j, const std::string& source, bool k3) {
  return config_field_guard(source, [&]() -> Result<ModelConfig> {
    ModelConfig c;
    c.vocab_size = config_int(j, "vocab_size", {1, kMaxVocab});
    c.hidden_size = config_int(j, "hidden_size", {1, kMaxHidden});
    c.num_layers = config_int(j, "num_hidden_layers", {1, kMaxLayers});
    c.intermediate_size = config_int(j, "intermediate_size", 0, {1, kMaxWidth});
    c.rms_norm_eps = float(config_number(j, "rms_norm_eps", 1e-6));
    c.norm_form = kernels::RmsNormForm::kWeight;
    c.tie_word_embeddings = config_bool(j, "tie_word_embeddings", false);
    // Kimi-Linear's released config has only model_max_length; K3 has max_position_embeddings.
    c.max_context =
        config_int(j, "max_position_embeddings",
                   config_int(j, "model_max_length", 0, {1, kMaxContext}), {1, kMaxContext});

    const std::string act = config_string(j, "hidden_act", "silu");
    if (act != "silu" && act != "situ")
      throw ConfigFieldError(str_cat("field 'hidden_act' is '", text_excerpt(act),
                                     "', expected silu (Kimi-Linear) or situ (K3)"));
    c.attn_res_block_size = config_int(j, "attn_res_block_size", 0, {0, kMaxLayers});
    k3 = k3 || act == "situ" || c.attn_res_block_size > 0 ||
         has_field(j, "routed_expert_hidden_size");
    c.model_type = k3 ? "kimi_k3" : "kimi_linear";
    if (act == "situ") {
      // Moonshot's configuration_kimi_k3.py defaults: 4.0 and 25.0
      c.mlp_activation = {
          .kind = GluKind::kSitu,
          .beta = float(config_number(j, "activation_situ_beta", 4.0)),
          .linear_beta = float(config_number(j, "activation_situ_linear_beta", 25.0))};
    }

    const LinearAttnConfig lac = parse_linear_attn_config(j);
    c.linear = lac.kda;
    c.mixers = parse_mixers(j, lac, c.num_layers);
    if (c.num_layers_of(MixerKind::kLatentAttention) > 0) c.latent = parse_latent(j);
    c.moe = parse_moe(j);
    c.mlps = parse_mlps(j, c.moe, c.num_layers);
    HYLA_RETURN_IF_ERROR(validate(c, source));
    return c;
  });
}

Result<ModelConfig> parse_kimi_linear(const nlohmann::json& j, const std::string& source) {
  return parse_kimi_config(j, source, /*k3=*/false);
}
Result<ModelConfig> parse_kimi_k3(const nlohmann::json& j, const std::string& source) {
  return parse_kimi_config(j, source, /*k3=*/true);
}

// ---- mapping table ----

std::string layer_prefix(int64_t i) { return str_cat("model.layers.", i, "."); }

void kda_specs(const ModelConfig& c, int64_t i, std::vector<WeightSpec>& out) {
  const LinearAttentionConfig& l = c.linear;
  const int64_t hidden = c.hidden_size, H = l.num_k_heads, P = H * l.head_k_dim, r = l.gate_rank;
  const std::string p = layer_prefix(i) + "self_attn.";
  for (const char* x : {"q", "k", "v"}) {
    out.push_back({str_cat(p, x, "_proj.weight"), {P, hidden}, WeightRole::kContent, i});
    out.push_back(
        {str_cat(p, x, "_conv1d.weight"), {P, 1, l.conv_kernel}, WeightRole::kContent, i});
  }
  out.push_back({p + "b_proj.weight", {H, hidden}, WeightRole::kWriteStrength, i});
  out.push_back({p + "f_a_proj.weight", {r, hidden}, WeightRole::kForgetGate, i});
  out.push_back({p + "f_b_proj.weight", {P, r}, WeightRole::kForgetGate, i});
  // Canonical A_log layouts: HF's [1, 1, H, 1]; K3's [head_dim] (resolve_spec accepts any vector).
  out.push_back({p + "A_log",
                 l.full_rank_output_gate ? std::vector<int64_t>{l.a_log_stored}
                                         : std::vector<int64_t>{1, 1, l.a_log_stored, 1},
                 WeightRole::kForgetGate, i});
  out.push_back({p + "dt_bias", {P}, WeightRole::kForgetGate, i});
  if (l.full_rank_output_gate) {
    out.push_back({p + "g_proj.weight", {P, hidden}, WeightRole::kOutput, i});
  } else {
    out.push_back({p + "g_a_proj.weight", {r, hidden}, WeightRole::kOutput, i});
    out.push_back({p + "g_b_proj.weight", {P, r}, WeightRole::kOutput, i});
  }
  out.push_back({p + "o_norm.weight", {l.head_v_dim}, WeightRole::kOutput, i});
  out.push_back({p + "o_proj.weight", {hidden, P}, WeightRole::kOutput, i});
}

void mla_specs(const ModelConfig& c, int64_t i, std::vector<WeightSpec>& out) {
  const LatentAttentionConfig& m = c.latent;
  const int64_t hidden = c.hidden_size, nh = m.num_heads;
  const int64_t q_rows = nh * (m.qk_nope_head_dim + m.qk_rope_head_dim);
  const std::string p = layer_prefix(i) + "self_attn.";
  const WeightRole role = WeightRole::kAttention;
  if (m.q_lora_rank == 0) {
    out.push_back({p + "q_proj.weight", {q_rows, hidden}, role, i});
  } else {
    out.push_back({p + "q_a_proj.weight", {m.q_lora_rank, hidden}, role, i});
    out.push_back({p + "q_a_layernorm.weight", {m.q_lora_rank}, role, i});
    out.push_back({p + "q_b_proj.weight", {q_rows, m.q_lora_rank}, role, i});
  }
  out.push_back(
      {p + "kv_a_proj_with_mqa.weight", {m.kv_lora_rank + m.qk_rope_head_dim, hidden}, role, i});
  out.push_back({p + "kv_a_layernorm.weight", {m.kv_lora_rank}, role, i});
  out.push_back({p + "kv_b_proj.weight",
                 {nh * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank},
                 role,
                 i});
  if (m.output_gate) out.push_back({p + "g_proj.weight", {nh * m.v_head_dim, hidden}, role, i});
  out.push_back({p + "o_proj.weight", {hidden, nh * m.v_head_dim}, role, i});
}

void swiglu_specs(const std::string& p, const char* gate, const char* up, const char* down,
                  int64_t hidden, int64_t inter, WeightRole role, int64_t i,
                  std::vector<WeightSpec>& out) {
  out.push_back({str_cat(p, gate, ".weight"), {inter, hidden}, role, i});
  out.push_back({str_cat(p, up, ".weight"), {inter, hidden}, role, i});
  out.push_back({str_cat(p, down, ".weight"), {hidden, inter}, role, i});
}

/// Dense layers are named block_sparse_moe.{gate,up,down}_proj by HF's save_pretrained (the
/// golden) and mlp.* by Moonshot's checkpoints: resolve_spec accepts both.
void mlp_specs(const ModelConfig& c, int64_t i, std::vector<WeightSpec>& out) {
  const std::string p = layer_prefix(i) + "block_sparse_moe.";
  const int64_t hidden = c.hidden_size;
  if (c.mlps[size_t(i)] == MlpKind::kDense) {
    swiglu_specs(p, "gate_proj", "up_proj", "down_proj", hidden, c.intermediate_size,
                 WeightRole::kDenseMlp, i, out);
    return;
  }
  const MoeConfig& m = c.moe;
  out.push_back({p + "gate.weight", {m.num_experts, hidden}, WeightRole::kRouter, i});
  out.push_back({p + "gate.e_score_correction_bias", {m.num_experts}, WeightRole::kRouter, i});
  // Routed experts at the hidden width, or (latent MoE) at latent_dim between its projections.
  const int64_t width = m.latent_dim > 0 ? m.latent_dim : hidden;
  for (int64_t e = 0; e < m.num_experts; ++e)  // w1 = gate, w3 = up, w2 = down
    swiglu_specs(str_cat(p, "experts.", e, "."), "w1", "w3", "w2", width, m.expert_intermediate,
                 WeightRole::kExperts, i, out);
  if (m.latent_dim > 0) {
    out.push_back(
        {p + "routed_expert_down_proj.weight", {m.latent_dim, hidden}, WeightRole::kMoeLatent, i});
    if (m.latent_norm)
      out.push_back({p + "routed_expert_norm.weight", {m.latent_dim}, WeightRole::kMoeLatent, i});
    out.push_back(
        {p + "routed_expert_up_proj.weight", {hidden, m.latent_dim}, WeightRole::kMoeLatent, i});
  }
  if (m.shared_intermediate > 0)
    swiglu_specs(p + "shared_experts.", "gate_proj", "up_proj", "down_proj", hidden,
                 m.shared_intermediate, WeightRole::kSharedExperts, i, out);
}

/// K3's Attention Residual score pairs (per sublayer and one for the output).
void attn_res_specs(const std::string& p, const char* which, int64_t hidden, int64_t i,
                    std::vector<WeightSpec>& out) {
  out.push_back({str_cat(p, which, "_res_norm.weight"), {hidden}, WeightRole::kAttnResidual, i});
  out.push_back({str_cat(p, which, "_res_proj.weight"), {1, hidden}, WeightRole::kAttnResidual, i});
}

std::vector<WeightSpec> kimi_weights(const ModelConfig& c) {
  std::vector<WeightSpec> out;
  const int64_t hidden = c.hidden_size;
  out.push_back({"model.embed_tokens.weight", {c.vocab_size, hidden}, WeightRole::kEmbedding});
  for (int64_t i = 0; i < c.num_layers; ++i) {
    const std::string p = layer_prefix(i);
    out.push_back({p + "input_layernorm.weight", {hidden}, WeightRole::kNorm, i});
    if (c.mixers[size_t(i)] == MixerKind::kKimiDelta) {
      kda_specs(c, i, out);
    } else {
      mla_specs(c, i, out);
    }
    out.push_back({p + "post_attention_layernorm.weight", {hidden}, WeightRole::kNorm, i});
    mlp_specs(c, i, out);
    if (c.attn_res_block_size > 0) {
      attn_res_specs(p, "self_attention", hidden, i, out);
      attn_res_specs(p, "mlp", hidden, i, out);
    }
  }
  out.push_back({"model.norm.weight", {hidden}, WeightRole::kNorm});
  if (c.attn_res_block_size > 0) attn_res_specs("model.", "output_attn", hidden, -1, out);
  if (!c.tie_word_embeddings)
    out.push_back({"lm_head.weight", {c.vocab_size, hidden}, WeightRole::kLmHead});
  return out;
}

// ---- loader ----

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// Adapts one mapping-table entry to the checkpoint's spelling, when it differs in a known way:
///   - FFN tensors under mlp.* instead of block_sparse_moe.* (Moonshot's dense layers);
///   - A_log as any vector of >= H entries ([1, 1, H, 1] HF, [H] / [H, 1] Moonshot, [head_dim] K3);
///   - dt_bias as [H, d] instead of [H d].
/// Anything else stays as the table says, so check_checkpoint names the mismatch.
void resolve_spec(const Checkpoint& ckpt, const ModelConfig& c, WeightSpec& spec) {
  const std::string moe_part = ".block_sparse_moe.";
  const size_t at = spec.name.find(moe_part);
  if (at != std::string::npos && ckpt.find(spec.name) == nullptr) {
    const std::string alt =
        spec.name.substr(0, at) + ".mlp." + spec.name.substr(at + moe_part.size());
    if (ckpt.find(alt) != nullptr) spec.name = alt;
  }
  const TensorEntry* e = ckpt.find(spec.name);
  if (e == nullptr || e->shape == spec.shape) return;
  const int64_t H = c.linear.num_k_heads, d = c.linear.head_k_dim;
  if (ends_with(spec.name, ".A_log")) {
    const auto non_unit =
        std::count_if(e->shape.begin(), e->shape.end(), [](int64_t n) { return n != 1; });
    if (non_unit <= 1 && e->numel() >= H) spec.shape = e->shape;
  } else if (ends_with(spec.name, ".dt_bias") && e->shape == std::vector<int64_t>{H, d}) {
    spec.shape = e->shape;
  }
}

void resolve_kimi_weights(const Checkpoint& ckpt, const ModelConfig& c,
                          std::vector<WeightSpec>& specs) {
  for (WeightSpec& spec : specs) resolve_spec(ckpt, c, spec);
}

/// A copy of `t` (contiguous) with a new shape of the same numel.
Tensor reshaped(const Tensor& t, std::initializer_list<int64_t> shape) {
  Tensor out = Tensor::empty(shape, t.dtype());
  HYLA_CHECK(out.numel() == t.numel(), "reshaped: ", t.view().shape_string(), " -> ",
             out.view().shape_string());
  std::memcpy(out.view().raw(), t.view().raw(), size_t(t.nbytes()));
  return out;
}

/// Loads tensors by their mapping-table names (resolved against the checkpoint and checked) and
/// fuses them into the canonical weights.
class KimiLoader {
 public:
  KimiLoader(const ModelConfig& c, const Checkpoint& ckpt, const std::vector<WeightSpec>& table,
             const std::vector<WeightSpec>& resolved, std::vector<std::string>& warnings)
      : c_(c), ckpt_(ckpt), warnings_(warnings) {
    for (size_t s = 0; s < table.size(); ++s) specs_.emplace(table[s].name, resolved[s]);
  }
  Result<Tensor> get(const std::string& name) const {
    auto it = specs_.find(name);
    HYLA_CHECK(it != specs_.end(), "KimiLoader: '", name, "' is not in the mapping table");
    return load_f32(ckpt_, it->second.name, it->second.shape);
  }

  Result<KdaWeights> kda(int64_t i) const {
    const LinearAttentionConfig& l = c_.linear;
    const int64_t H = l.num_k_heads, d = l.head_k_dim, P = H * d, K = l.conv_kernel;
    const std::string p = layer_prefix(i) + "self_attn.";
    KdaWeights w;
    // [q | k | v (| g)]: one GEMM for everything that reads x at full width
    std::vector<Tensor> rows, convs;
    for (const char* x : {"q", "k", "v"}) {
      HYLA_ASSIGN_OR_RETURN(Tensor proj, get(str_cat(p, x, "_proj.weight")));
      HYLA_ASSIGN_OR_RETURN(Tensor conv, get(str_cat(p, x, "_conv1d.weight")));
      rows.push_back(proj);
      convs.push_back(reshaped(conv, {P, K}));
    }
    if (l.full_rank_output_gate) {
      HYLA_ASSIGN_OR_RETURN(Tensor g, get(p + "g_proj.weight"));
      rows.push_back(g);
    } else {
      HYLA_ASSIGN_OR_RETURN(w.g_a, get(p + "g_a_proj.weight"));
      HYLA_ASSIGN_OR_RETURN(w.g_b, get(p + "g_b_proj.weight"));
    }
    w.qkv_proj = concat_rows(rows);
    w.conv = concat_rows(convs);
    // [f_a | b]: the two narrow GEMVs on x merged
    HYLA_ASSIGN_OR_RETURN(Tensor f_a, get(p + "f_a_proj.weight"));
    HYLA_ASSIGN_OR_RETURN(Tensor b, get(p + "b_proj.weight"));
    w.fa_b = concat_rows({f_a, b});
    HYLA_ASSIGN_OR_RETURN(w.f_b, get(p + "f_b_proj.weight"));
    // A_log: the first H stored entries, one per head (K3 pads to head_dim with zeros; a non-zero
    // tail would mean another layout, so it is reported)
    HYLA_ASSIGN_OR_RETURN(Tensor a_log, get(p + "A_log"));
    w.A_log = Tensor::empty({H}, DType::kF32);
    std::memcpy(w.A_log.data<float>(), a_log.data<float>(), size_t(H) * sizeof(float));
    int64_t nonzero_tail = 0;
    for (int64_t e = H; e < a_log.numel(); ++e) nonzero_tail += a_log.data<float>()[e] != 0.0f;
    if (nonzero_tail > 0)
      warnings_.push_back(str_cat(p, "A_log has ", a_log.numel(), " entries of which the first ", H,
                                  " (one per head) are used; ", nonzero_tail, " of the other ",
                                  a_log.numel() - H,
                                  " are non-zero (expected zero padding): check the layout"));
    HYLA_ASSIGN_OR_RETURN(Tensor dt_bias, get(p + "dt_bias"));
    w.dt_bias = reshaped(dt_bias, {H, d});
    HYLA_ASSIGN_OR_RETURN(w.o_norm, get(p + "o_norm.weight"));
    HYLA_ASSIGN_OR_RETURN(w.o_proj, get(p + "o_proj.weight"));
    return w;
  }

  Result<LatentAttentionWeights> latent(int64_t i) const {
    const LatentAttentionConfig& m = c_.latent;
    const std::string p = layer_prefix(i) + "self_attn.";
    LatentAttentionWeights w;
    if (m.q_lora_rank == 0) {
      HYLA_ASSIGN_OR_RETURN(w.q_proj, get(p + "q_proj.weight"));
    } else {
      HYLA_ASSIGN_OR_RETURN(w.q_a_proj, get(p + "q_a_proj.weight"));
      HYLA_ASSIGN_OR_RETURN(w.q_a_norm, get(p + "q_a_layernorm.weight"));
      HYLA_ASSIGN_OR_RETURN(w.q_b_proj, get(p + "q_b_proj.weight"));
    }
    HYLA_ASSIGN_OR_RETURN(w.kv_a_proj, get(p + "kv_a_proj_with_mqa.weight"));
    HYLA_ASSIGN_OR_RETURN(w.kv_a_norm, get(p + "kv_a_layernorm.weight"));
    HYLA_ASSIGN_OR_RETURN(w.kv_b_proj, get(p + "kv_b_proj.weight"));
    if (m.output_gate) {
      HYLA_ASSIGN_OR_RETURN(w.g_proj, get(p + "g_proj.weight"));
    }
    HYLA_ASSIGN_OR_RETURN(w.o_proj, get(p + "o_proj.weight"));
    return w;
  }

  /// gate_up = [gate | up] rows, down.
  Result<DenseMlpWeights> swiglu(const std::string& p, const char* gate, const char* up,
                                 const char* down) const {
    DenseMlpWeights w;
    HYLA_ASSIGN_OR_RETURN(Tensor g, get(str_cat(p, gate, ".weight")));
    HYLA_ASSIGN_OR_RETURN(Tensor u, get(str_cat(p, up, ".weight")));
    w.gate_up = concat_rows({g, u});
    HYLA_ASSIGN_OR_RETURN(w.down, get(str_cat(p, down, ".weight")));
    return w;
  }

  Result<MoeWeights> moe(int64_t i) const {
    const std::string p = layer_prefix(i) + "block_sparse_moe.";
    MoeWeights w;
    HYLA_ASSIGN_OR_RETURN(w.router, get(p + "gate.weight"));
    HYLA_ASSIGN_OR_RETURN(w.correction_bias, get(p + "gate.e_score_correction_bias"));
    // Routed experts stacked one expert at a time: w1 = gate, w3 = up, w2 = down.
    const int64_t E = c_.moe.num_experts;
    HYLA_ASSIGN_OR_RETURN(w.experts_gate_up, stack_blocks(E, [&](int64_t e) -> Result<Tensor> {
                            const std::string q = str_cat(p, "experts.", e, ".");
                            HYLA_ASSIGN_OR_RETURN(Tensor gate, get(q + "w1.weight"));
                            HYLA_ASSIGN_OR_RETURN(Tensor up, get(q + "w3.weight"));
                            return concat_rows({gate, up});
                          }));
    HYLA_ASSIGN_OR_RETURN(w.experts_down, stack_blocks(E, [&](int64_t e) {
                            return get(str_cat(p, "experts.", e, ".w2.weight"));
                          }));
    if (c_.moe.latent_dim > 0) {
      HYLA_ASSIGN_OR_RETURN(w.latent_down, get(p + "routed_expert_down_proj.weight"));
      if (c_.moe.latent_norm) {
        HYLA_ASSIGN_OR_RETURN(w.latent_norm, get(p + "routed_expert_norm.weight"));
      }
      HYLA_ASSIGN_OR_RETURN(w.latent_up, get(p + "routed_expert_up_proj.weight"));
    }
    if (c_.moe.shared_intermediate > 0) {
      HYLA_ASSIGN_OR_RETURN(w.shared,
                            swiglu(p + "shared_experts.", "gate_proj", "up_proj", "down_proj"));
    }
    return w;
  }

 private:
  const ModelConfig& c_;
  const Checkpoint& ckpt_;
  std::map<std::string, WeightSpec> specs_;  // table name -> name and shape in the checkpoint
  std::vector<std::string>& warnings_;
};

/// The released K3 checkpoint stores routed experts as compressed-tensors MXFP4
/// (<name>.weight_packed + .weight_scale): refused by name rather than reported as missing.
Status check_not_packed(const Checkpoint& ckpt, const std::vector<WeightSpec>& resolved) {
  const std::string suffix = ".weight";
  for (const WeightSpec& spec : resolved) {
    if (ckpt.find(spec.name) != nullptr || !ends_with(spec.name, suffix)) continue;
    const std::string packed = spec.name + "_packed";
    if (ckpt.find(packed) != nullptr)
      return unsupported("checkpoint ", ckpt.dir(), ": '", packed,
                         "' is MXFP4-packed (compressed-tensors weight_packed + weight_scale); "
                         "Hyla loads f32, bf16 and f16 weights only (no MXFP4 dequantiser yet)");
  }
  return ok_status();
}

Result<std::unique_ptr<Model>> load_kimi(const ModelConfig& config, const Checkpoint& ckpt) {
  ModelConfig c = config;  // the loader's warnings join the config's
  const std::vector<WeightSpec> table = kimi_weights(c);
  std::vector<WeightSpec> resolved = table;
  resolve_kimi_weights(ckpt, c, resolved);
  HYLA_RETURN_IF_ERROR(check_not_packed(ckpt, resolved));
  HYLA_RETURN_IF_ERROR(check_checkpoint(ckpt, resolved));
  const KimiLoader load(c, ckpt, table, resolved, c.warnings);
  return assemble_model(
      c, [&](const std::string& name) { return load.get(name); },
      [&](int64_t i, DecoderLayer& layer) -> Status {
        if (c.mixers[size_t(i)] == MixerKind::kKimiDelta) {
          HYLA_ASSIGN_OR_RETURN(layer.kda, load.kda(i));
        } else {
          HYLA_ASSIGN_OR_RETURN(layer.latent, load.latent(i));
        }
        if (c.mlps[size_t(i)] == MlpKind::kMoe) {
          HYLA_ASSIGN_OR_RETURN(layer.moe, load.moe(i));
        } else {
          HYLA_ASSIGN_OR_RETURN(layer.dense, load.swiglu(layer_prefix(i) + "block_sparse_moe.",
                                                         "gate_proj", "up_proj", "down_proj"));
        }
        return ok_status();
      });
}

}  // namespace

extern const Architecture kKimiLinearArchitecture{
    "kimi_linear",     "Kimi-Linear: KDA + NoPE MLA, sigmoid-routed MoE",
    parse_kimi_linear, kimi_weights,
    load_kimi,         resolve_kimi_weights};
extern const Architecture kKimiK3Architecture{
    "kimi_k3",
    "Kimi K3 text decoder: KDA (full-rank output gate, safe gate) + gated NoPE MLA, latent MoE "
    "with SiTU, Attention Residuals",
    parse_kimi_k3,
    kimi_weights,
    load_kimi,
    resolve_kimi_weights};

}  // namespace hyla::model

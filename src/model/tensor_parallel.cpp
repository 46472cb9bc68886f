// Tensor parallelism by head: the per-rank config and weight slices (see tensor_parallel.h).
#include "model/tensor_parallel.h"

#include <cstring>
#include <string>
#include <vector>

namespace hyla::model {

namespace {

/// [begin, begin + length) along one dimension.
struct Range {
  int64_t begin;
  int64_t length;
};

/// The ranges of `t` along `dim`, concatenated in order, as a new host tensor of t's dtype.
/// `what` names the tensor for errors.
Result<Tensor> gather(const TensorView& t, int dim, const std::vector<Range>& ranges,
                      const std::string& what) {
  if (!t.defined()) return invalid_argument(what, ": undefined, expected a tensor to slice");
  if (!t.device().is_cpu() || !t.is_contiguous())
    return invalid_argument(what, ": ", device_name(t.device()), " tensor ", t.shape_string(),
                            ", expected a contiguous host tensor to slice");
  if (dim < 0 || dim >= t.ndim())
    return invalid_argument(what, ": ", t.shape_string(), " has no dimension ", dim);
  int64_t outer = 1, inner = int64_t(dtype_size(t.dtype())), total = 0;
  for (int d = 0; d < dim; ++d) outer *= t.size(d);
  for (int d = dim + 1; d < t.ndim(); ++d) inner *= t.size(d);
  for (const Range& r : ranges) {
    if (r.begin < 0 || r.length < 0 || r.begin + r.length > t.size(dim))
      return invalid_argument(what, ": ", t.shape_string(), " has no rows [", r.begin, ", ",
                              r.begin + r.length, ") along dimension ", dim);
    total += r.length;
  }
  std::vector<int64_t> shape(t.shape(), t.shape() + t.ndim());
  shape[size_t(dim)] = total;
  Tensor out = Tensor::empty(t.ndim(), shape.data(), t.dtype());
  const auto* src = static_cast<const uint8_t*>(t.raw());
  auto* dst = static_cast<uint8_t*>(out.view().raw());
  const int64_t src_row = t.size(dim) * inner;
  for (int64_t o = 0; o < outer; ++o) {
    for (const Range& r : ranges) {
      std::memcpy(dst, src + o * src_row + r.begin * inner, size_t(r.length * inner));
      dst += r.length * inner;
    }
  }
  return out;
}

/// Checks that `t` is [rows, cols] (cols < 0: any); `what` names it.
Status expect_shape(const TensorView& t, std::initializer_list<int64_t> shape,
                    const std::string& what) {
  bool ok = t.defined() && t.ndim() == int(shape.size());
  int d = 0;
  for (int64_t s : shape) {
    if (ok && s >= 0 && t.size(d) != s) ok = false;
    ++d;
  }
  if (ok) return ok_status();
  std::vector<int64_t> want(shape);
  return invalid_argument(what, ": ", t.defined() ? t.shape_string() : std::string("undefined"),
                          ", expected ", shape_string(want));
}

Status check_ranks(int rank, int ranks) {
  if (ranks < 1) return invalid_argument("tensor parallel: ", ranks, " ranks, expected >= 1");
  if (rank < 0 || rank >= ranks)
    return invalid_argument("tensor parallel: rank ", rank, " outside [0, ", ranks, ")");
  return ok_status();
}

/// `count` % ranks == 0, else an error naming layer, what was counted and N.
Status divides(int64_t layer, const char* kind, const char* what, int64_t count, int ranks) {
  if (count % ranks == 0) return ok_status();
  return invalid_argument("tensor parallel: layer ", layer, " (", kind, ") has ", what, " = ",
                          count, ", which N = ", ranks, " ranks do not divide");
}

/// The GDN state pools split by key head group: H % N == 0.
Status divides_state(const LinearAttentionConfig& l, int ranks) {
  if (l.num_k_heads % ranks == 0) return ok_status();
  return invalid_argument("tensor parallel: a GDN state pool of linear_num_key_heads H = ",
                          l.num_k_heads, " cannot be split over N = ", ranks, " ranks");
}

/// The KV heads rank r's query heads read: [first, first + count).
struct KvSlice {
  int64_t first;
  int64_t count;
};

Result<KvSlice> attention_kv_slice(const FullAttentionConfig& a, int64_t layer, int rank,
                                   int ranks) {
  HYLA_RETURN_IF_ERROR(divides(layer, "full attention", "num_heads", a.num_heads, ranks));
  const int64_t nkv = a.num_kv_heads;
  if (nkv % ranks == 0) return KvSlice{rank * (nkv / ranks), nkv / ranks};
  if (ranks % nkv == 0) {
    // N > nkv: the rank's nh/N queries lie inside one GQA group (nh/nkv = (N/nkv) (nh/N)), whose
    // KV head it holds; N/nkv ranks hold each KV head.
    const int64_t group = a.num_heads / nkv;
    return KvSlice{rank * (a.num_heads / ranks) / group, 1};
  }
  return invalid_argument("tensor parallel: layer ", layer,
                          " (full attention) has num_key_value_heads = ", nkv, " for N = ", ranks,
                          " ranks: expected N to divide it or it to divide N");
}

Status check_mixer(const ModelConfig& c, int64_t layer, int ranks) {
  switch (c.mixers[size_t(layer)]) {
    case MixerKind::kGatedDeltaNet:
      return divides(layer, "gated delta net", "linear_num_key_heads H", c.linear.num_k_heads,
                     ranks);
    case MixerKind::kKimiDelta:
      return divides(layer, "Kimi delta attention", "num_heads H", c.linear.num_k_heads, ranks);
    case MixerKind::kFullAttention:
      return attention_kv_slice(c.attention, layer, 0, ranks).status();
    case MixerKind::kLatentAttention:
      return divides(layer, "latent attention", "num_attention_heads", c.latent.num_heads, ranks);
  }
  return internal_error("tensor parallel: layer ", layer, " has an unknown mixer kind");
}

Status check_mlp(const ModelConfig& c, int64_t layer, int ranks) {
  if (c.mlps[size_t(layer)] == MlpKind::kDense)
    return divides(layer, "dense MLP", "intermediate_size", c.intermediate_size, ranks);
  const MoeConfig& m = c.moe;
  if (m.latent_dim > 0)  // each rank brings back its slice of the latent columns
    HYLA_RETURN_IF_ERROR(
        divides(layer, "latent MoE", "routed_expert_hidden_size", m.latent_dim, ranks));
  HYLA_RETURN_IF_ERROR(
      divides(layer, "MoE", "moe_intermediate_size", m.expert_intermediate, ranks));
  return divides(layer, "MoE", "shared_expert_intermediate_size", m.shared_intermediate, ranks);
}

/// The intermediate slice [r I/N, (r+1) I/N) of a gated MLP: gate_up [2I, width] rows of gate and
/// up (dimension `dim` of a stacked [E, 2I, width] when dim is 1), down [width, I] columns.
Result<DenseMlpWeights> shard_glu(const TensorView& gate_up, const TensorView& down, int dim,
                                  int64_t I, int rank, int ranks, const std::string& what) {
  const int64_t n = I / ranks, at = rank * n;
  DenseMlpWeights out;
  HYLA_ASSIGN_OR_RETURN(out.gate_up,
                        gather(gate_up, dim, {{at, n}, {I + at, n}}, what + " gate_up"));
  HYLA_ASSIGN_OR_RETURN(out.down, gather(down, dim + 1, {{at, n}}, what + " down"));
  return out;
}

/// The q | k | v channel ranges of rank r in the GDN conv order [q (H d_k) | k | v (HV d_v)].
std::vector<Range> gdn_qkv_ranges(const LinearAttentionConfig& l, int rank, int ranks) {
  const int64_t qk = l.num_k_heads * l.head_k_dim / ranks;
  const int64_t value = l.num_v_heads * l.head_v_dim / ranks;
  const int64_t all_qk = l.num_k_heads * l.head_k_dim;
  return {{rank * qk, qk}, {all_qk + rank * qk, qk}, {2 * all_qk + rank * value, value}};
}

Result<GdnWeights> shard_gdn(const ModelConfig& c, int64_t layer, const GdnWeights& w, int rank,
                             int ranks) {
  const LinearAttentionConfig& l = c.linear;
  const int64_t H = l.num_k_heads, HV = l.num_v_heads, dk = l.head_k_dim, dv = l.head_v_dim;
  const int64_t conv_dim = l.conv_dim(), vh = HV / ranks, value = vh * dv;
  const std::string p = str_cat("layer ", layer, " gdn.");
  HYLA_RETURN_IF_ERROR(
      expect_shape(w.in_proj, {2 * H * dk + 2 * HV * dv + 2 * HV, c.hidden_size}, p + "in_proj"));
  HYLA_RETURN_IF_ERROR(expect_shape(w.conv, {conv_dim, l.conv_kernel}, p + "conv"));
  HYLA_RETURN_IF_ERROR(expect_shape(w.A_log, {HV}, p + "A_log"));
  HYLA_RETURN_IF_ERROR(expect_shape(w.dt_bias, {HV}, p + "dt_bias"));
  HYLA_RETURN_IF_ERROR(expect_shape(w.out_proj, {c.hidden_size, HV * dv}, p + "out_proj"));
  std::vector<Range> rows = gdn_qkv_ranges(l, rank, ranks);
  const std::vector<Range> conv_rows = rows;
  rows.push_back({conv_dim + rank * value, value});           // z
  rows.push_back({conv_dim + HV * dv + rank * vh, vh});       // b
  rows.push_back({conv_dim + HV * dv + HV + rank * vh, vh});  // a
  GdnWeights out;
  HYLA_ASSIGN_OR_RETURN(out.in_proj, gather(w.in_proj, 0, rows, p + "in_proj"));
  HYLA_ASSIGN_OR_RETURN(out.conv, gather(w.conv, 0, conv_rows, p + "conv"));
  HYLA_ASSIGN_OR_RETURN(out.A_log, gather(w.A_log, 0, {{rank * vh, vh}}, p + "A_log"));
  HYLA_ASSIGN_OR_RETURN(out.dt_bias, gather(w.dt_bias, 0, {{rank * vh, vh}}, p + "dt_bias"));
  out.norm = w.norm;
  HYLA_ASSIGN_OR_RETURN(out.out_proj,
                        gather(w.out_proj, 1, {{rank * value, value}}, p + "out_proj"));
  return out;
}

Result<AttentionWeights> shard_attention(const ModelConfig& c, int64_t layer,
                                         const AttentionWeights& w, int rank, int ranks) {
  const FullAttentionConfig& a = c.attention;
  const int64_t nh = a.num_heads, nkv = a.num_kv_heads, hd = a.head_dim;
  const int64_t per_head = a.output_gate ? 2 * hd : hd, qh = nh / ranks;
  const std::string p = str_cat("layer ", layer, " attention.");
  HYLA_RETURN_IF_ERROR(
      expect_shape(w.qkv_proj, {nh * per_head + 2 * nkv * hd, c.hidden_size}, p + "qkv_proj"));
  HYLA_RETURN_IF_ERROR(expect_shape(w.o_proj, {c.hidden_size, nh * hd}, p + "o_proj"));
  HYLA_ASSIGN_OR_RETURN(const KvSlice kv, attention_kv_slice(a, layer, rank, ranks));
  const int64_t k_at = nh * per_head, v_at = k_at + nkv * hd;
  AttentionWeights out;
  HYLA_ASSIGN_OR_RETURN(out.qkv_proj, gather(w.qkv_proj, 0,
                                             {{rank * qh * per_head, qh * per_head},
                                              {k_at + kv.first * hd, kv.count * hd},
                                              {v_at + kv.first * hd, kv.count * hd}},
                                             p + "qkv_proj"));
  out.q_norm = w.q_norm;
  out.k_norm = w.k_norm;
  HYLA_ASSIGN_OR_RETURN(out.o_proj, gather(w.o_proj, 1, {{rank * qh * hd, qh * hd}}, p + "o_proj"));
  return out;
}

Result<KdaWeights> shard_kda(const ModelConfig& c, int64_t layer, const KdaWeights& w, int rank,
                             int ranks) {
  const LinearAttentionConfig& l = c.linear;
  const int64_t H = l.num_k_heads, d = l.head_k_dim, P = H * d, R = l.gate_rank;
  const int64_t h = H / ranks, at = rank * h, width = h * d;
  const std::string p = str_cat("layer ", layer, " kda.");
  const int64_t blocks = l.full_rank_output_gate ? 4 : 3;  // [q | k | v (| g)]
  HYLA_RETURN_IF_ERROR(expect_shape(w.qkv_proj, {blocks * P, c.hidden_size}, p + "qkv_proj"));
  HYLA_RETURN_IF_ERROR(expect_shape(w.conv, {3 * P, l.conv_kernel}, p + "conv"));
  HYLA_RETURN_IF_ERROR(expect_shape(w.fa_b, {R + H, c.hidden_size}, p + "fa_b"));
  HYLA_RETURN_IF_ERROR(expect_shape(w.f_b, {P, R}, p + "f_b"));
  HYLA_RETURN_IF_ERROR(expect_shape(w.A_log, {H}, p + "A_log"));
  HYLA_RETURN_IF_ERROR(expect_shape(w.dt_bias, {H, d}, p + "dt_bias"));
  HYLA_RETURN_IF_ERROR(expect_shape(w.o_proj, {c.hidden_size, P}, p + "o_proj"));
  std::vector<Range> rows;
  for (int64_t b = 0; b < blocks; ++b) rows.push_back({b * P + at * d, width});
  const std::vector<Range> conv_rows(rows.begin(), rows.begin() + 3);
  KdaWeights out;
  HYLA_ASSIGN_OR_RETURN(out.qkv_proj, gather(w.qkv_proj, 0, rows, p + "qkv_proj"));
  HYLA_ASSIGN_OR_RETURN(out.conv, gather(w.conv, 0, conv_rows, p + "conv"));
  // f_a (the low-rank gate's input side) whole; b of this rank's heads
  HYLA_ASSIGN_OR_RETURN(out.fa_b, gather(w.fa_b, 0, {{0, R}, {R + at, h}}, p + "fa_b"));
  HYLA_ASSIGN_OR_RETURN(out.f_b, gather(w.f_b, 0, {{at * d, width}}, p + "f_b"));
  if (w.g_b.defined()) {  // low-rank output gate: g_a whole, g_b rows of this rank's heads
    HYLA_RETURN_IF_ERROR(expect_shape(w.g_b, {P, R}, p + "g_b"));
    out.g_a = w.g_a;
    HYLA_ASSIGN_OR_RETURN(out.g_b, gather(w.g_b, 0, {{at * d, width}}, p + "g_b"));
  }
  HYLA_ASSIGN_OR_RETURN(out.A_log, gather(w.A_log, 0, {{at, h}}, p + "A_log"));
  HYLA_ASSIGN_OR_RETURN(out.dt_bias, gather(w.dt_bias, 0, {{at, h}}, p + "dt_bias"));
  out.o_norm = w.o_norm;
  HYLA_ASSIGN_OR_RETURN(out.o_proj, gather(w.o_proj, 1, {{at * d, width}}, p + "o_proj"));
  return out;
}

/// MLA by query head: every rank keeps the whole latent (kv_a_proj and its norm replicated, the
/// same latent KV pages on each rank) and expands it for its own heads.
Result<LatentAttentionWeights> shard_latent(const ModelConfig& c, int64_t layer,
                                            const LatentAttentionWeights& w, int rank, int ranks) {
  const LatentAttentionConfig& a = c.latent;
  const int64_t nh = a.num_heads, qk = a.qk_nope_head_dim + a.qk_rope_head_dim;
  const int64_t kvb = a.qk_nope_head_dim + a.v_head_dim, vd = a.v_head_dim;
  const int64_t h = nh / ranks, at = rank * h;
  const std::string p = str_cat("layer ", layer, " latent_attention.");
  LatentAttentionWeights out;
  if (a.q_lora_rank > 0) {
    HYLA_RETURN_IF_ERROR(expect_shape(w.q_b_proj, {nh * qk, a.q_lora_rank}, p + "q_b_proj"));
    out.q_a_proj = w.q_a_proj;
    out.q_a_norm = w.q_a_norm;
    HYLA_ASSIGN_OR_RETURN(out.q_b_proj, gather(w.q_b_proj, 0, {{at * qk, h * qk}}, p + "q_b_proj"));
  } else {
    HYLA_RETURN_IF_ERROR(expect_shape(w.q_proj, {nh * qk, c.hidden_size}, p + "q_proj"));
    HYLA_ASSIGN_OR_RETURN(out.q_proj, gather(w.q_proj, 0, {{at * qk, h * qk}}, p + "q_proj"));
  }
  out.kv_a_proj = w.kv_a_proj;
  out.kv_a_norm = w.kv_a_norm;
  HYLA_RETURN_IF_ERROR(expect_shape(w.kv_b_proj, {nh * kvb, a.kv_lora_rank}, p + "kv_b_proj"));
  HYLA_ASSIGN_OR_RETURN(out.kv_b_proj,
                        gather(w.kv_b_proj, 0, {{at * kvb, h * kvb}}, p + "kv_b_proj"));
  HYLA_RETURN_IF_ERROR(expect_shape(w.o_proj, {c.hidden_size, nh * vd}, p + "o_proj"));
  HYLA_ASSIGN_OR_RETURN(out.o_proj, gather(w.o_proj, 1, {{at * vd, h * vd}}, p + "o_proj"));
  if (w.g_proj.defined()) {
    HYLA_RETURN_IF_ERROR(expect_shape(w.g_proj, {nh * vd, c.hidden_size}, p + "g_proj"));
    HYLA_ASSIGN_OR_RETURN(out.g_proj, gather(w.g_proj, 0, {{at * vd, h * vd}}, p + "g_proj"));
  }
  return out;
}

Result<MoeWeights> shard_moe(const ModelConfig& c, int64_t layer, const MoeWeights& w, int rank,
                             int ranks) {
  const MoeConfig& m = c.moe;
  const int64_t E = m.num_experts, I = m.expert_intermediate, hidden = c.hidden_size;
  const int64_t width = m.latent_dim > 0 ? m.latent_dim : hidden;  // what the experts read
  const std::string p = str_cat("layer ", layer, " moe.");
  HYLA_RETURN_IF_ERROR(expect_shape(w.experts_gate_up, {E, 2 * I, width}, p + "experts_gate_up"));
  HYLA_RETURN_IF_ERROR(expect_shape(w.experts_down, {E, width, I}, p + "experts_down"));
  MoeWeights out;
  if (m.latent_dim > 0) {  // the latent down projection and norm whole, up by latent columns
    const int64_t columns = m.latent_dim / ranks;
    HYLA_RETURN_IF_ERROR(expect_shape(w.latent_up, {hidden, m.latent_dim}, p + "latent_up"));
    out.latent_down = w.latent_down;
    out.latent_norm = w.latent_norm;
    out.latent_columns_begin = rank * columns;
    HYLA_ASSIGN_OR_RETURN(out.latent_up,
                          gather(w.latent_up, 1, {{rank * columns, columns}}, p + "latent_up"));
  }
  out.router = w.router;
  out.correction_bias = w.correction_bias;
  out.shared_gate = w.shared_gate;
  HYLA_ASSIGN_OR_RETURN(const DenseMlpWeights experts, shard_glu(w.experts_gate_up, w.experts_down,
                                                                 1, I, rank, ranks, p + "experts"));
  out.experts_gate_up = experts.gate_up;
  out.experts_down = experts.down;
  if (w.shared.gate_up.defined()) {
    const int64_t S = m.shared_intermediate;
    HYLA_RETURN_IF_ERROR(expect_shape(w.shared.gate_up, {2 * S, hidden}, p + "shared.gate_up"));
    HYLA_RETURN_IF_ERROR(expect_shape(w.shared.down, {hidden, S}, p + "shared.down"));
    HYLA_ASSIGN_OR_RETURN(
        out.shared, shard_glu(w.shared.gate_up, w.shared.down, 0, S, rank, ranks, p + "shared"));
  }
  return out;
}

}  // namespace

Result<ModelConfig> shard_config(const ModelConfig& config, int rank, int ranks) {
  HYLA_RETURN_IF_ERROR(check_ranks(rank, ranks));
  for (int64_t i = 0; i < config.num_layers; ++i) {
    HYLA_RETURN_IF_ERROR(check_mixer(config, i, ranks));
    HYLA_RETURN_IF_ERROR(check_mlp(config, i, ranks));
  }
  ModelConfig out = config;
  bool gdn = false, attention = false, latent = false, dense = false, moe = false;
  for (int64_t i = 0; i < config.num_layers; ++i) {
    gdn |= is_linear_mixer(config.mixers[size_t(i)]);  // GDN or KDA: both count heads in linear
    attention |= config.mixers[size_t(i)] == MixerKind::kFullAttention;
    latent |= config.mixers[size_t(i)] == MixerKind::kLatentAttention;
    dense |= config.mlps[size_t(i)] == MlpKind::kDense;
    moe |= config.mlps[size_t(i)] == MlpKind::kMoe;
  }
  if (gdn) {
    out.linear.num_k_heads /= ranks;
    out.linear.num_v_heads /= ranks;
  }
  if (attention) {
    HYLA_ASSIGN_OR_RETURN(const KvSlice kv, attention_kv_slice(config.attention, 0, rank, ranks));
    out.attention.num_heads /= ranks;
    out.attention.num_kv_heads = kv.count;
  }
  if (latent) out.latent.num_heads /= ranks;
  if (dense) out.intermediate_size /= ranks;
  if (moe) {
    out.moe.expert_intermediate /= ranks;
    out.moe.shared_intermediate /= ranks;
  }
  return out;
}

Result<DecoderLayer> shard_layer(const ModelConfig& config, int64_t layer,
                                 const DecoderLayer& whole, int rank, int ranks) {
  HYLA_RETURN_IF_ERROR(check_ranks(rank, ranks));
  if (layer < 0 || layer >= config.num_layers)
    return out_of_range("tensor parallel: layer ", layer, " outside [0, ", config.num_layers, ")");
  HYLA_RETURN_IF_ERROR(check_mixer(config, layer, ranks));
  HYLA_RETURN_IF_ERROR(check_mlp(config, layer, ranks));
  DecoderLayer out;
  out.input_norm = whole.input_norm;
  out.post_norm = whole.post_norm;
  out.attn_res_cw = whole.attn_res_cw;
  out.mlp_res_cw = whole.mlp_res_cw;
  switch (config.mixers[size_t(layer)]) {
    case MixerKind::kGatedDeltaNet: {
      HYLA_ASSIGN_OR_RETURN(out.gdn, shard_gdn(config, layer, whole.gdn, rank, ranks));
      break;
    }
    case MixerKind::kKimiDelta: {
      HYLA_ASSIGN_OR_RETURN(out.kda, shard_kda(config, layer, whole.kda, rank, ranks));
      break;
    }
    case MixerKind::kFullAttention: {
      HYLA_ASSIGN_OR_RETURN(out.attention,
                            shard_attention(config, layer, whole.attention, rank, ranks));
      break;
    }
    case MixerKind::kLatentAttention: {
      HYLA_ASSIGN_OR_RETURN(out.latent, shard_latent(config, layer, whole.latent, rank, ranks));
      break;
    }
  }
  if (config.mlps[size_t(layer)] == MlpKind::kDense) {
    const int64_t I = config.intermediate_size;
    const std::string p = str_cat("layer ", layer, " mlp.");
    HYLA_RETURN_IF_ERROR(
        expect_shape(whole.dense.gate_up, {2 * I, config.hidden_size}, p + "gate_up"));
    HYLA_RETURN_IF_ERROR(expect_shape(whole.dense.down, {config.hidden_size, I}, p + "down"));
    HYLA_ASSIGN_OR_RETURN(out.dense, shard_glu(whole.dense.gate_up, whole.dense.down, 0, I, rank,
                                               ranks, p.substr(0, p.size() - 1)));
  } else {
    HYLA_ASSIGN_OR_RETURN(out.moe, shard_moe(config, layer, whole.moe, rank, ranks));
  }
  return out;
}

Result<std::unique_ptr<Model>> shard_model(const Model& whole, int rank, int ranks) {
  const ModelConfig& c = whole.config();
  if (!whole.device().is_cpu())
    return invalid_argument("tensor parallel: the whole model is on ", device_name(whole.device()),
                            "; slice it on the host, then move each rank's model (Model::to)");
  HYLA_ASSIGN_OR_RETURN(ModelConfig config, shard_config(c, rank, ranks));
  std::vector<DecoderLayer> layers;
  layers.reserve(whole.layers().size());
  for (int64_t i = 0; i < c.num_layers; ++i) {
    HYLA_ASSIGN_OR_RETURN(DecoderLayer layer,
                          shard_layer(c, i, whole.layers()[size_t(i)], rank, ranks));
    layers.push_back(std::move(layer));
  }
  auto model = std::make_unique<Model>(std::move(config), whole.embedding(), std::move(layers),
                                       whole.final_norm(), whole.lm_head(), whole.output_res_cw());
  model->set_linear_backends(whole.linear_backends());
  return model;
}

Result<Tensor> shard_gdn_conv_state(const ModelConfig& config, const TensorView& conv_pool,
                                    int rank, int ranks) {
  HYLA_RETURN_IF_ERROR(check_ranks(rank, ranks));
  HYLA_RETURN_IF_ERROR(divides_state(config.linear, ranks));
  HYLA_RETURN_IF_ERROR(expect_shape(
      conv_pool, {-1, config.linear.conv_dim(), config.linear.conv_kernel - 1}, "GDN conv pool"));
  return gather(conv_pool, 1, gdn_qkv_ranges(config.linear, rank, ranks), "GDN conv pool");
}

Result<Tensor> shard_gdn_ssm_state(const ModelConfig& config, const TensorView& ssm_pool, int rank,
                                   int ranks) {
  HYLA_RETURN_IF_ERROR(check_ranks(rank, ranks));
  const LinearAttentionConfig& l = config.linear;
  HYLA_RETURN_IF_ERROR(divides_state(l, ranks));
  HYLA_RETURN_IF_ERROR(
      expect_shape(ssm_pool, {-1, l.num_v_heads, l.head_v_dim, l.head_k_dim}, "GDN SSM pool"));
  const int64_t vh = l.num_v_heads / ranks;
  return gather(ssm_pool, 1, {{rank * vh, vh}}, "GDN SSM pool");
}

}  // namespace hyla::model

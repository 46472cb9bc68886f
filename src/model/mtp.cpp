// The MTP draft head's mapping table and loading (see mtp.h); its forward is Model::forward_mtp.
#include "model/mtp.h"

namespace hyla::model {

std::string mtp_layer_prefix(int64_t k) { return str_cat("mtp.layers.", k, "."); }

std::vector<WeightSpec> mtp_module_specs(const ModelConfig& c) {
  const int64_t H = c.hidden_size;
  std::vector<WeightSpec> out;
  if (c.num_mtp_layers == 0) return out;
  out.push_back({"mtp.fc.weight", {H, 2 * H}, WeightRole::kMtp});
  out.push_back({"mtp.pre_fc_norm_embedding.weight", {H}, WeightRole::kMtp});
  out.push_back({"mtp.pre_fc_norm_hidden.weight", {H}, WeightRole::kMtp});
  for (int64_t k = 0; k < c.num_mtp_layers; ++k) {
    out.push_back({mtp_layer_prefix(k) + "input_layernorm.weight", {H}, WeightRole::kMtp});
    out.push_back({mtp_layer_prefix(k) + "post_attention_layernorm.weight", {H}, WeightRole::kMtp});
  }
  out.push_back({"mtp.norm.weight", {H}, WeightRole::kMtp});
  return out;
}

Result<MtpWeights> load_mtp(const ModelConfig& c,
                            const std::function<Result<Tensor>(const std::string&)>& get,
                            const std::function<Status(int64_t k, const std::string& prefix,
                                                       DecoderLayer& out)>& fill_layer) {
  MtpWeights w;
  HYLA_ASSIGN_OR_RETURN(w.fc, get("mtp.fc.weight"));
  HYLA_ASSIGN_OR_RETURN(w.pre_fc_norm_embedding, get("mtp.pre_fc_norm_embedding.weight"));
  HYLA_ASSIGN_OR_RETURN(w.pre_fc_norm_hidden, get("mtp.pre_fc_norm_hidden.weight"));
  for (int64_t k = 0; k < c.num_mtp_layers; ++k) {
    const std::string p = mtp_layer_prefix(k);
    DecoderLayer layer;
    HYLA_ASSIGN_OR_RETURN(layer.input_norm, get(p + "input_layernorm.weight"));
    HYLA_ASSIGN_OR_RETURN(layer.post_norm, get(p + "post_attention_layernorm.weight"));
    HYLA_RETURN_IF_ERROR(fill_layer(k, p, layer));
    w.layers.push_back(std::move(layer));
  }
  HYLA_ASSIGN_OR_RETURN(w.norm, get("mtp.norm.weight"));
  return w;
}

}  // namespace hyla::model

// Canonical weights from checkpoint tensors (see weight_loader.h).
#include "model/weight_loader.h"

#include <cstring>

#include "model/weights.h"

namespace hyla::model {

Result<Tensor> load_f32(const Checkpoint& ckpt, const std::string& name,
                        const std::vector<int64_t>& shape) {
  return ckpt.load(name, std::span<const int64_t>(shape), DType::kF32);
}

Tensor take_rows(const Tensor& t, int64_t begin, int64_t count) {
  HYLA_CHECK(t.ndim() == 2 && begin >= 0 && begin + count <= t.size(0), "take_rows(", begin, ", ",
             count, ") of ", t.view().shape_string());
  const int64_t cols = t.size(1);
  Tensor out = Tensor::empty({count, cols}, t.dtype());
  std::memcpy(out.view().raw(),
              static_cast<const char*>(t.view().raw()) + begin * cols * dtype_size(t.dtype()),
              size_t(count * cols * dtype_size(t.dtype())));
  return out;
}

Tensor concat_rows(const std::vector<Tensor>& parts) {
  HYLA_CHECK(!parts.empty(), "concat_rows of nothing");
  int64_t rows = 0;
  const int64_t cols = parts[0].size(1);
  for (const Tensor& p : parts) {
    HYLA_CHECK(p.ndim() == 2 && p.size(1) == cols && p.dtype() == parts[0].dtype(),
               "concat_rows: ", p.view().to_string(), " vs ", parts[0].view().to_string());
    rows += p.size(0);
  }
  Tensor out = Tensor::empty({rows, cols}, parts[0].dtype());
  char* dst = static_cast<char*>(out.view().raw());
  for (const Tensor& p : parts) {
    std::memcpy(dst, p.view().raw(), size_t(p.nbytes()));
    dst += p.nbytes();
  }
  return out;
}

Tensor squeeze(const Tensor& t) {
  std::vector<int64_t> shape;
  for (int d = 0; d < t.ndim(); ++d)
    if (t.size(d) != 1) shape.push_back(t.size(d));
  Tensor copy = Tensor::empty(int(shape.size()), shape.data(), t.dtype());
  std::memcpy(copy.view().raw(), t.view().raw(), size_t(t.nbytes()));
  return copy;
}

namespace {

/// `<prefix>_res_norm.weight` [hidden] and `<prefix>_res_proj.weight` [1, hidden] folded into one
/// score vector, once at load.
Result<Tensor> attn_res_score(const TensorGetter& get, const std::string& prefix) {
  HYLA_ASSIGN_OR_RETURN(Tensor norm, get(prefix + "_res_norm.weight"));
  HYLA_ASSIGN_OR_RETURN(Tensor proj, get(prefix + "_res_proj.weight"));
  return fold_attn_res_score(norm, proj);
}

}  // namespace

Result<std::unique_ptr<Model>> assemble_model(
    const ModelConfig& c, const TensorGetter& get,
    const std::function<Status(int64_t layer, DecoderLayer& out)>& fill_layer) {
  std::vector<DecoderLayer> layers;
  for (int64_t i = 0; i < c.num_layers; ++i) {
    DecoderLayer layer;
    const std::string p = str_cat("model.layers.", i, ".");
    HYLA_ASSIGN_OR_RETURN(layer.input_norm, get(p + "input_layernorm.weight"));
    HYLA_ASSIGN_OR_RETURN(layer.post_norm, get(p + "post_attention_layernorm.weight"));
    if (c.attn_res_block_size > 0) {
      HYLA_ASSIGN_OR_RETURN(layer.attn_res_cw, attn_res_score(get, p + "self_attention"));
      HYLA_ASSIGN_OR_RETURN(layer.mlp_res_cw, attn_res_score(get, p + "mlp"));
    }
    HYLA_RETURN_IF_ERROR(fill_layer(i, layer));
    layers.push_back(std::move(layer));
  }
  HYLA_ASSIGN_OR_RETURN(Tensor embedding, get("model.embed_tokens.weight"));
  HYLA_ASSIGN_OR_RETURN(Tensor final_norm, get("model.norm.weight"));
  Tensor lm_head = embedding;
  if (!c.tie_word_embeddings) {
    HYLA_ASSIGN_OR_RETURN(lm_head, get("lm_head.weight"));
  }
  Tensor output_res_cw;
  if (c.attn_res_block_size > 0) {
    HYLA_ASSIGN_OR_RETURN(output_res_cw, attn_res_score(get, "model.output_attn"));
  }
  return std::make_unique<Model>(c, embedding, std::move(layers), final_norm, lm_head,
                                 output_res_cw);
}

Status check_checkpoint(const Checkpoint& ckpt, const std::vector<WeightSpec>& specs) {
  std::string problems;
  int count = 0;
  for (const WeightSpec& s : specs) {
    const TensorEntry* e = ckpt.find(s.name);
    std::string problem;
    if (e == nullptr) {
      problem = str_cat("missing tensor '", s.name, "'");
    } else if (e->shape != s.shape) {
      problem = str_cat("tensor '", s.name, "' has shape ", shape_string(e->shape), ", expected ",
                        shape_string(s.shape));
    } else if (e->dtype != DType::kF32 && e->dtype != DType::kBF16 && e->dtype != DType::kF16) {
      problem = str_cat("tensor '", s.name, "' has dtype ", dtype_name(e->dtype),
                        ", expected f32, bf16 or f16");
    }
    if (problem.empty()) continue;
    if (++count <= 10) problems += "\n  " + problem;
  }
  if (count == 0) return ok_status();
  return invalid_argument("checkpoint ", ckpt.dir(), " does not match the architecture: ", count,
                          " problem(s):", problems, count > 10 ? "\n  ..." : "");
}

}  // namespace hyla::model

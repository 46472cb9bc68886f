// Canonical weights from checkpoint tensors (see weight_loader.h).
#include "model/weight_loader.h"

#include <cstring>
#include <string_view>
#include <unordered_set>

#include "model/json_file.h"
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

Result<Tensor> stack_blocks(int64_t count, const std::function<Result<Tensor>(int64_t)>& block) {
  HYLA_CHECK(count >= 1, "stack_blocks of ", count, " blocks");
  Tensor out;
  for (int64_t b = 0; b < count; ++b) {
    HYLA_ASSIGN_OR_RETURN(Tensor part, block(b));
    HYLA_CHECK(part.ndim() == 2 && part.view().is_contiguous(), "stack_blocks: block ", b, " is ",
               part.view().to_string(), ", expected a contiguous 2-D tensor");
    if (b == 0) out = Tensor::empty({count, part.size(0), part.size(1)}, part.dtype());
    HYLA_CHECK(
        part.size(0) == out.size(1) && part.size(1) == out.size(2) && part.dtype() == out.dtype(),
        "stack_blocks: block ", b, " is ", part.view().to_string(), ", block 0 ",
        out.view().select(0).to_string());
    std::memcpy(out.view().select(b).raw(), part.view().raw(), size_t(part.nbytes()));
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

namespace {

/// Checkpoint tensors that are known and deliberately not read. Anything else a checkpoint holds
/// must be read: a config that describes less than the checkpoint (fewer layers, no shared
/// experts, tied embeddings beside an lm_head) would otherwise run a different model silently.
struct IgnoredTensors {
  std::string_view pattern;
  bool suffix;      ///< pattern is a name suffix, else a prefix
  const char* why;  ///< documentation only
};
constexpr std::string_view kMtpPrefix = "mtp.";
constexpr IgnoredTensors kIgnoredTensors[] = {
    {kMtpPrefix, false,
     "Qwen3-Next / Qwen3.5 multi-token-prediction module: a draft head for speculative decoding, "
     "not part of the decoder; ignored unless the config declares it (mtp_num_hidden_layers), "
     "then the mapping table reads it and every mtp.* tensor must be read"},
    {".rotary_emb.inv_freq", true,
     "RoPE inverse frequencies that older exporters save as buffers; Hyla derives them from "
     "rope_theta"},
};

/// Known-ignored, or (in a multimodal checkpoint) outside the text decoder: another tower (vision),
/// which load_config reports as out of scope. `reads_mtp`: the mapping table reads the MTP head,
/// so no mtp.* tensor is ignored.
bool is_ignored(const Checkpoint& ckpt, std::string_view stored_name, bool reads_mtp) {
  if (reads_mtp && stored_name.starts_with(kMtpPrefix)) return false;
  for (const IgnoredTensors& ignored : kIgnoredTensors)
    if (ignored.suffix ? stored_name.ends_with(ignored.pattern)
                       : stored_name.starts_with(ignored.pattern))
      return true;
  return ckpt.wraps_text_decoder() && !Checkpoint::is_text_decoder_name(stored_name) &&
         stored_name != "lm_head.weight";
}

/// Every tensor of the checkpoint is read by `specs` or ignored on purpose; else an error with the
/// count and the first names.
Status check_all_read(const Checkpoint& ckpt, const std::vector<WeightSpec>& specs) {
  std::unordered_set<const TensorEntry*> read;
  read.reserve(specs.size());
  bool reads_mtp = false;
  for (const WeightSpec& s : specs) {
    if (const TensorEntry* e = ckpt.find(s.name)) read.insert(e);
    reads_mtp |= s.name.starts_with(kMtpPrefix);
  }
  constexpr size_t kListed = 5;
  std::string listed;
  int64_t unread = 0;
  for (const SafetensorsFile& file : ckpt.files()) {
    for (const TensorEntry& entry : file.tensors()) {
      if (read.count(&entry) != 0 || is_ignored(ckpt, entry.name, reads_mtp)) continue;
      if (++unread <= int64_t(kListed)) listed += str_cat("\n  '", text_excerpt(entry.name), "'");
    }
  }
  if (unread == 0) return ok_status();
  return invalid_argument(
      "checkpoint ", ckpt.dir(), " holds ", unread, " tensor(s) that the config never reads",
      unread > int64_t(kListed) ? str_cat(" (the first ", kListed, ")") : std::string(), ":",
      listed,
      unread > int64_t(kListed) ? str_cat("\n  ... and ", unread - int64_t(kListed), " more")
                                : std::string(),
      "\nconfig.json describes less than the checkpoint holds: check num_hidden_layers, the "
      "expert counts and sizes (num_experts, shared experts) and tie_word_embeddings");
}

}  // namespace

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
  if (count == 0) return check_all_read(ckpt, specs);
  return invalid_argument("checkpoint ", ckpt.dir(), " does not match the architecture: ", count,
                          " problem(s):", problems, count > 10 ? "\n  ..." : "");
}

}  // namespace hyla::model

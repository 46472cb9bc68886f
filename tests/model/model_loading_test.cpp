// Loading checkpoints as users have them: the architecture registry, the K3 accounting computed
// from a config alone, and clear errors for bad checkpoints (truncated file, wrong dtype, missing
// or mis-shaped tensor, inconsistent config, unknown model_type). Each bad case starts from a copy
// of the golden qwen3_next checkpoint and breaks one thing.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "model/architecture.h"
#include "model/json_file.h"
#include "model/safetensors.h"
#include "model/test_files.h"
#include "testing.h"

namespace hyla::model {
namespace {

namespace fs = std::filesystem;

/// A copy of the golden qwen3_next folder (config + weights) in a temp dir.
struct CheckpointCopy {
  testing::TempDir dir;
  CheckpointCopy() {
    const fs::path src = fs::path(testing::golden_dir()) / "qwen3_next";
    fs::copy_file(src / "config.json", fs::path(dir.path()) / "config.json");
    fs::copy_file(src / "model.safetensors", fs::path(dir.path()) / "model.safetensors");
    fs::permissions(fs::path(dir.path()) / "config.json", fs::perms::owner_write,
                    fs::perm_options::add);
    fs::permissions(fs::path(dir.path()) / "model.safetensors", fs::perms::owner_write,
                    fs::perm_options::add);
  }
  std::string weights() const { return dir.path() + "/model.safetensors"; }
  std::string config() const { return dir.path() + "/config.json"; }

  /// Rewrites the weights with `edit` applied to the tensor list (name -> tensor).
  template <typename Edit>
  void rewrite_weights(Edit&& edit) {
    std::vector<std::pair<std::string, Tensor>> tensors;
    {
      Result<SafetensorsFile> f = SafetensorsFile::open(weights());
      HYLA_CHECK(f.ok(), f.status().message());
      for (const TensorEntry& e : f->tensors()) {
        Tensor t = Tensor::empty(int(e.shape.size()), e.shape.data(), e.dtype);
        std::memcpy(t.view().raw(), e.data, size_t(e.nbytes));
        tensors.emplace_back(e.name, t);
      }
    }
    edit(tensors);
    std::vector<std::pair<std::string, TensorView>> views;
    for (auto& [name, t] : tensors) views.emplace_back(name, t.view());
    HYLA_CHECK(write_safetensors(weights(), views).ok(), "rewrite failed");
  }
  void rewrite_config(const std::function<void(nlohmann::json&)>& edit) {
    Result<nlohmann::json> j = read_json_file(config());
    HYLA_CHECK(j.ok(), j.status().message());
    edit(j.value());
    std::ofstream(config()) << j.value().dump(2);
  }
};

TEST(ModelLoadingTest, GoldenCopyLoads) {
  CheckpointCopy copy;
  Result<std::unique_ptr<Model>> model = load_model(copy.dir.path());
  ASSERT_TRUE(model.ok()) << model.status().message();
  EXPECT_EQ(model.value()->config().num_layers, 4);
}

TEST(ModelLoadingTest, TruncatedFileIsNamed) {
  CheckpointCopy copy;
  fs::resize_file(copy.weights(), fs::file_size(copy.weights()) - 100);
  EXPECT_ERROR_CONTAINS(load_model(copy.dir.path()).status(), "truncated");
}

TEST(ModelLoadingTest, MissingTensorIsNamed) {
  CheckpointCopy copy;
  copy.rewrite_weights([](auto& tensors) {
    std::erase_if(tensors,
                  [](const auto& t) { return t.first == "model.layers.2.linear_attn.dt_bias"; });
  });
  EXPECT_ERROR_CONTAINS(load_model(copy.dir.path()).status(),
                        "missing tensor 'model.layers.2.linear_attn.dt_bias'");
}

TEST(ModelLoadingTest, MisShapedTensorIsNamedWithBothShapes) {
  CheckpointCopy copy;
  copy.rewrite_weights([](auto& tensors) {
    for (auto& [name, t] : tensors)
      if (name == "model.layers.3.self_attn.k_proj.weight")
        t = Tensor::zeros({32, 128}, DType::kF32);
  });
  EXPECT_ERROR_CONTAINS(load_model(copy.dir.path()).status(),
                        "tensor 'model.layers.3.self_attn.k_proj.weight' has shape [32, 128], "
                        "expected [64, 128]");
}

TEST(ModelLoadingTest, WrongDtypeIsNamed) {
  CheckpointCopy copy;
  copy.rewrite_weights([](auto& tensors) {
    for (auto& [name, t] : tensors)
      if (name == "model.norm.weight") t = Tensor::zeros({128}, DType::kI32);
  });
  EXPECT_ERROR_CONTAINS(load_model(copy.dir.path()).status(),
                        "tensor 'model.norm.weight' has dtype i32, expected f32, bf16 or f16");
}

TEST(ModelLoadingTest, InconsistentConfigIsExplained) {
  CheckpointCopy copy;
  copy.rewrite_config([](nlohmann::json& j) { j["linear_num_value_heads"] = 3; });
  EXPECT_ERROR_CONTAINS(load_model(copy.dir.path()).status(),
                        "linear value heads (3) must be a multiple of key heads (2)");
  copy.rewrite_config([](nlohmann::json& j) {
    j["linear_num_value_heads"] = 4;
    j["layer_types"] = {"linear_attention", "full_attention"};
  });
  EXPECT_ERROR_CONTAINS(load_model(copy.dir.path()).status(),
                        "layer_types has 2 entries, expected 4");
  copy.rewrite_config([](nlohmann::json& j) {
    j["layer_types"] = {"linear_attention", "linear_attention", "linear_attention",
                        "full_attention"};
    j["hidden_size"] = "128";
  });
  EXPECT_ERROR_CONTAINS(load_model(copy.dir.path()).status(),
                        "field 'hidden_size' must be an integer, got \"128\"");
  copy.rewrite_config([](nlohmann::json& j) {
    j["hidden_size"] = 128;
    j.erase("num_attention_heads");
  });
  EXPECT_ERROR_CONTAINS(load_model(copy.dir.path()).status(),
                        "missing required field 'num_attention_heads'");
}

TEST(ModelLoadingTest, UnknownModelTypeListsTheSupportedOnes) {
  CheckpointCopy copy;
  copy.rewrite_config([](nlohmann::json& j) { j["model_type"] = "llama"; });
  const Status s = load_model(copy.dir.path()).status();
  EXPECT_ERROR_CONTAINS(s, "model_type 'llama' is not supported");
  for (const char* t : {"qwen3_next", "qwen3_5", "qwen3_5_moe", "kimi_linear", "kimi_k3"})
    EXPECT_NE(s.message().find(t), std::string::npos) << t << " missing from: " << s.message();
}

// The seed's accounting of Kimi K3 from its config alone: 443,740,416 parameters per KDA layer,
// 69 layers = 30,618,088,704; gates 0.72%, q/k/v/g/o 99.25%.
TEST(ModelLoadingTest, KimiK3AccountingFromConfigAlone) {
  Result<LoadedConfig> loaded = load_config(testing::test_data_dir() + "/kimi_k3_config");
  ASSERT_TRUE(loaded.ok()) << loaded.status().message();
  const std::vector<WeightSpec> specs = loaded->arch->checkpoint_weights(loaded->config);
  bool found = false;
  for (const MixerAccounting& a : mixer_accounting(loaded->config, specs)) {
    if (a.kind != MixerKind::kKimiDelta) continue;
    found = true;
    EXPECT_EQ(a.layers, 69);
    EXPECT_EQ(a.per_layer, 443'740'416);
    EXPECT_EQ(a.total, 30'618'088'704);
    EXPECT_EQ(a.gates,
              688'128 + 917'504 + 1'572'864 + 128 + 12'288);  // b, f_a, f_b, A_log, dt_bias
    EXPECT_EQ(a.projections, 5 * int64_t{12288} * 7168);      // q, k, v, g, o
    EXPECT_NEAR(100.0 * double(a.gates) / double(a.per_layer), 0.72, 0.005);
    EXPECT_NEAR(100.0 * double(a.projections) / double(a.per_layer), 99.25, 0.005);
  }
  EXPECT_TRUE(found);
  // A K3 checkpoint is recognised but cannot run before Attention Residuals exist.
  EXPECT_EQ(std::string(loaded->arch->model_type), "kimi_k3");
}

}  // namespace
}  // namespace hyla::model

namespace hyla::model {
namespace {

// tie_word_embeddings: no lm_head tensor, the embedding projects to the vocabulary. Equal to an
// untied checkpoint whose lm_head is a copy of the embedding.
TEST(ModelLoadingTest, TiedEmbeddingsUseTheEmbeddingAsLmHead) {
  CheckpointCopy tied, untied;
  tied.rewrite_config([](nlohmann::json& j) { j["tie_word_embeddings"] = true; });
  tied.rewrite_weights([](auto& tensors) {
    std::erase_if(tensors, [](const auto& t) { return t.first == "lm_head.weight"; });
  });
  untied.rewrite_weights([](auto& tensors) {
    Tensor embedding;
    for (auto& [name, t] : tensors)
      if (name == "model.embed_tokens.weight") embedding = t;
    for (auto& [name, t] : tensors)
      if (name == "lm_head.weight") t = embedding.clone();
  });
  Result<std::unique_ptr<Model>> a = load_model(tied.dir.path());
  Result<std::unique_ptr<Model>> b = load_model(untied.dir.path());
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok()) << b.status().message();
  const std::vector<int32_t> ids = {5, 17, 300, 2, 511, 42};
  SequenceState sa = a.value()->new_sequence(8), sb = b.value()->new_sequence(8);
  Result<Tensor> la = a.value()->forward(ids, sa), lb = b.value()->forward(ids, sb);
  ASSERT_TRUE(la.ok() && lb.ok());
  EXPECT_EQ(testing::to_f64(la.value()), testing::to_f64(lb.value()));  // same math, bit for bit
  // And the untied golden lm_head really differs, so the test can tell the two apart.
  CheckpointCopy original;
  Result<std::unique_ptr<Model>> c = load_model(original.dir.path());
  ASSERT_TRUE(c.ok());
  SequenceState sc = c.value()->new_sequence(8);
  Result<Tensor> lc = c.value()->forward(ids, sc);
  ASSERT_TRUE(lc.ok());
  EXPECT_NE(testing::to_f64(la.value()), testing::to_f64(lc.value()));
}

}  // namespace
}  // namespace hyla::model

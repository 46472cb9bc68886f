// Loading checkpoints as users have them: the architecture registry, the K3 accounting computed
// from a config alone, and clear errors for bad checkpoints (truncated file, wrong dtype, missing
// or mis-shaped tensor, inconsistent config, unknown model_type). Each bad case starts from a copy
// of the golden qwen3_next checkpoint and breaks one thing.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "model/architecture.h"
#include "model/checkpoint_copy.h"
#include "model/json_file.h"
#include "model/safetensors.h"
#include "model/test_files.h"
#include "testing.h"

namespace hyla::model {
namespace {

namespace fs = std::filesystem;

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

using testing::CheckpointCopy;

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

// transformers 5 saves routed experts fused per layer: experts.gate_up_proj [E, 2I, hidden] (gate
// rows then up rows of each expert) and experts.down_proj [E, hidden, I]. Both layouts load to the
// same model.
TEST(ModelLoadingTest, FusedExpertsLoadAsPerExpert) {
  CheckpointCopy per_expert("qwen3_5_moe"), fused("qwen3_5_moe");
  int fused_layers = 0;
  fused.rewrite_weights([&](auto& tensors) {
    std::map<std::string, std::map<int, std::map<std::string, Tensor>>> experts;  // layer prefix
    std::erase_if(tensors, [&](const auto& entry) {
      const std::string& name = entry.first;
      const size_t at = name.find("mlp.experts.");
      if (at == std::string::npos) return false;
      const std::string rest = name.substr(at + 12);  // "<e>.<proj>.weight"
      const size_t dot = rest.find('.');
      experts[name.substr(0, at + 12)][std::stoi(rest.substr(0, dot))]
             [rest.substr(dot + 1, rest.find('.', dot + 1) - dot - 1)] = entry.second;
      return true;
    });
    for (auto& [prefix, by_expert] : experts) {
      const int64_t E = int64_t(by_expert.size());
      const Tensor& g0 = by_expert.at(0).at("gate_proj");
      const Tensor& d0 = by_expert.at(0).at("down_proj");
      const int64_t I = g0.size(0), H = g0.size(1);
      const int64_t es = dtype_size(g0.dtype());
      Tensor gate_up = Tensor::empty({E, 2 * I, H}, g0.dtype());
      Tensor down = Tensor::empty({E, H, I}, d0.dtype());
      char* gu = static_cast<char*>(gate_up.view().raw());
      char* dn = static_cast<char*>(down.view().raw());
      for (int64_t e = 0; e < E; ++e) {
        const auto& m = by_expert.at(int(e));
        std::memcpy(gu + (2 * e) * I * H * es, m.at("gate_proj").view().raw(), size_t(I * H * es));
        std::memcpy(gu + (2 * e + 1) * I * H * es, m.at("up_proj").view().raw(),
                    size_t(I * H * es));
        std::memcpy(dn + e * H * I * es, m.at("down_proj").view().raw(), size_t(H * I * es));
      }
      tensors.emplace_back(prefix + "gate_up_proj", gate_up);
      tensors.emplace_back(prefix + "down_proj", down);
      ++fused_layers;
    }
  });
  ASSERT_GT(fused_layers, 0) << "qwen3_5_moe has no routed experts to fuse";
  Result<std::unique_ptr<Model>> a = load_model(per_expert.dir.path());
  Result<std::unique_ptr<Model>> b = load_model(fused.dir.path());
  ASSERT_TRUE(a.ok()) << a.status().message();
  ASSERT_TRUE(b.ok()) << b.status().message();
  const std::vector<int32_t> ids = {5, 17, 300, 2, 511, 42};
  SequenceState sa = a.value()->new_sequence(8), sb = b.value()->new_sequence(8);
  Result<Tensor> la = a.value()->forward(ids, sa), lb = b.value()->forward(ids, sb);
  ASSERT_TRUE(la.ok() && lb.ok());
  EXPECT_EQ(testing::to_f64(la.value()), testing::to_f64(lb.value()));  // same weights, same math
}

// A fused checkpoint whose down_proj has the wrong shape is named with both shapes.
TEST(ModelLoadingTest, MisShapedFusedExpertsAreNamed) {
  CheckpointCopy fused("qwen3_5_moe");
  fused.rewrite_weights([&](auto& tensors) {
    std::erase_if(tensors,
                  [](const auto& e) { return e.first.find("mlp.experts.") != std::string::npos; });
    tensors.emplace_back("model.layers.0.mlp.experts.gate_up_proj",
                         Tensor::zeros({2, 2, 2}, DType::kF32));
  });
  Result<std::unique_ptr<Model>> m = load_model(fused.dir.path());
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("model.layers.0.mlp.experts.gate_up_proj"), std::string::npos)
      << m.status().message();
}

}  // namespace
}  // namespace hyla::model

// ---- robustness: config values the loader must refuse by name, fast, before allocating ----

namespace hyla::model {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Integers used as divisors: 0 is an error that names the field, not a SIGFPE.
TEST(ModelLoadingRobustnessTest, DivisorsOfZeroAreNamed) {
  CheckpointCopy copy;
  copy.rewrite_config([](nlohmann::json& j) { j["decoder_sparse_step"] = 0; });
  EXPECT_ERROR_CONTAINS(
      load_model(copy.dir.path()).status(),
      copy.config() + ": field 'decoder_sparse_step' is 0, expected an integer in [1, 4096]");
  copy.rewrite_config([](nlohmann::json& j) {
    j["decoder_sparse_step"] = 1;
    j.erase("layer_types");
    j["full_attention_interval"] = 0;
  });
  EXPECT_ERROR_CONTAINS(
      load_model(copy.dir.path()).status(),
      copy.config() + ": field 'full_attention_interval' is 0, expected an integer in [1, 4096]");
  copy.rewrite_config([](nlohmann::json& j) { j["full_attention_interval"] = 4; });
  EXPECT_OK(load_model(copy.dir.path()).status());  // the interval rule gives the golden layers
}

TEST(ModelLoadingRobustnessTest, OutOfRangeFieldsAreNamed) {
  struct Case {
    const char* field;
    nlohmann::json value;
    const char* message;
  };
  const Case cases[] = {
      {"num_attention_heads", 0,
       "field 'num_attention_heads' is 0, expected an integer in [1, "
       "4096]"},
      {"num_key_value_heads", -2,
       "field 'num_key_value_heads' is -2, expected an integer in [1, "
       "4096]"},
      {"linear_conv_kernel_dim", 9,
       "field 'linear_conv_kernel_dim' is 9, expected an integer in "
       "[1, 8]"},
      {"vocab_size", 2.5, "field 'vocab_size' must be an integer, got 2.5"},
      {"num_experts", -1, "field 'num_experts' is -1, expected an integer in [0, 65536]"},
      {"num_experts_per_tok", 5, "0 < top_k <= experts"},
      {"mlp_only_layers", {7}, "field 'mlp_only_layers' is 7, expected an integer in [0, 3]"},
      {"partial_rotary_factor", 2.0,
       "field 'partial_rotary_factor' is 2, expected a number in "
       "[0, 1]"},
      {"rms_norm_eps", 1e300, "rms_norm_eps must be a finite number > 0, got inf"},
      {"max_position_embeddings", 0,
       "field 'max_position_embeddings' is 0, expected an integer "
       "in [1, 1099511627776]"},
      {"head_dim", nullptr, ""},  // null = absent: hidden_size / num_attention_heads = 32, ok
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.field);
    CheckpointCopy copy;
    copy.rewrite_config([&](nlohmann::json& j) {
      j[c.field] = c.value;
      if (std::string(c.field) == "partial_rotary_factor") j.erase("rope_parameters");
    });
    const Status s = load_config(copy.dir.path()).status();
    if (*c.message == '\0') {
      EXPECT_OK(s);
    } else {
      EXPECT_ERROR_CONTAINS(s, copy.config() + ": ");
      EXPECT_ERROR_CONTAINS(s, c.message);
    }
  }
}

// 1e9 layers or experts: the config is compared with the checkpoint before anything proportional
// to it is built, so the load fails at once instead of allocating for a minute into std::bad_alloc.
TEST(ModelLoadingRobustnessTest, HugeCountsFailFastAgainstTheCheckpoint) {
  CheckpointCopy copy;
  copy.rewrite_config([](nlohmann::json& j) {
    j.erase("layer_types");
    j["num_hidden_layers"] = 1'000'000'000;
  });
  Clock::time_point start = Clock::now();
  EXPECT_ERROR_CONTAINS(load_model(copy.dir.path()).status(),
                        copy.config() + ": num_hidden_layers is 1000000000 but the checkpoint " +
                            copy.dir.path() + " holds 4 (model.layers.0 to model.layers.3)");
  EXPECT_LT(seconds_since(start), 5.0);
  // The config alone (no checkpoint to compare with): its own bound.
  start = Clock::now();
  EXPECT_ERROR_CONTAINS(
      load_config(copy.dir.path()).status(),
      "field 'num_hidden_layers' is 1000000000, expected an integer in [1, 4096]");
  EXPECT_LT(seconds_since(start), 5.0);

  copy.rewrite_config([](nlohmann::json& j) {
    j["num_hidden_layers"] = 4;
    j["num_experts"] = 1e9;
  });
  start = Clock::now();
  EXPECT_ERROR_CONTAINS(load_model(copy.dir.path()).status(),
                        copy.config() + ": num_experts is 1000000000.0 but the checkpoint " +
                            copy.dir.path() +
                            " holds at most 4 experts per layer (experts.0 to experts.3)");
  EXPECT_LT(seconds_since(start), 5.0);

  // Within every per-field bound, but a mapping table no real model has.
  copy.rewrite_config([](nlohmann::json& j) {
    j["num_hidden_layers"] = 4096;
    j["num_experts"] = 65536;
  });
  start = Clock::now();
  EXPECT_ERROR_CONTAINS(load_config(copy.dir.path()).status(),
                        "num_hidden_layers 4096 with 65536 experts per MoE layer describes more "
                        "than 1048576 checkpoint tensors");
  EXPECT_LT(seconds_since(start), 5.0);
}

// A checkpoint holding more than the config describes: the unread tensors are listed.
TEST(ModelLoadingRobustnessTest, UnreadTensorsAreAnError) {
  CheckpointCopy copy;
  copy.rewrite_config([](nlohmann::json& j) {
    j["num_hidden_layers"] = 3;
    j["layer_types"] = {"linear_attention", "linear_attention", "linear_attention"};
  });
  const Status fewer_layers = load_model(copy.dir.path()).status();
  EXPECT_ERROR_CONTAINS(fewer_layers, "checkpoint " + copy.dir.path() +
                                          " holds 25 tensor(s) that the config never reads (the "
                                          "first 5):\n  'model.layers.3.");
  EXPECT_ERROR_CONTAINS(fewer_layers, "\n  ... and 20 more");
  EXPECT_ERROR_CONTAINS(fewer_layers, "check num_hidden_layers");

  CheckpointCopy no_shared;
  no_shared.rewrite_config([](nlohmann::json& j) { j["shared_expert_intermediate_size"] = 0; });
  const Status shared = load_model(no_shared.dir.path()).status();
  EXPECT_ERROR_CONTAINS(shared, "holds 16 tensor(s) that the config never reads");
  EXPECT_ERROR_CONTAINS(shared, "'model.layers.0.mlp.shared_expert.down_proj.weight'");

  // An lm_head beside tied embeddings would be silently replaced by the embedding.
  CheckpointCopy tied;
  tied.rewrite_config([](nlohmann::json& j) { j["tie_word_embeddings"] = true; });
  EXPECT_ERROR_CONTAINS(load_model(tied.dir.path()).status(),
                        "holds 1 tensor(s) that the config never reads:\n  'lm_head.weight'");
}

// What checkpoints legitimately carry beside the decoder loads; anything else is named.
TEST(ModelLoadingRobustnessTest, KnownExtrasAreIgnoredAndOthersNamed) {
  CheckpointCopy copy;
  copy.rewrite_weights([](auto& tensors) {
    tensors.emplace_back("mtp.fc.weight", Tensor::zeros({4, 4}, DType::kF32));
    tensors.emplace_back("mtp.layers.0.input_layernorm.weight", Tensor::zeros({4}, DType::kF32));
    tensors.emplace_back("model.layers.3.self_attn.rotary_emb.inv_freq",
                         Tensor::zeros({4}, DType::kF32));
  });
  EXPECT_OK(load_model(copy.dir.path()).status());
  copy.rewrite_weights([](auto& tensors) {
    tensors.emplace_back("model.extra.weight", Tensor::zeros({4}, DType::kF32));
  });
  EXPECT_ERROR_CONTAINS(load_model(copy.dir.path()).status(),
                        "holds 1 tensor(s) that the config never reads:\n  'model.extra.weight'");

  // A multimodal checkpoint: the decoder under model.language_model., a vision tower beside it.
  CheckpointCopy wrapped;
  wrapped.rewrite_weights([](auto& tensors) {
    for (auto& [name, t] : tensors)
      if (name.starts_with("model.")) name = "model.language_model." + name.substr(6);
    tensors.emplace_back("model.visual.patch_embed.proj.weight", Tensor::zeros({4}, DType::kF32));
  });
  EXPECT_OK(load_model(wrapped.dir.path()).status());
  wrapped.rewrite_weights([](auto& tensors) {
    tensors.emplace_back("model.language_model.layers.9.mlp.gate.weight",
                         Tensor::zeros({4}, DType::kF32));
  });
  EXPECT_ERROR_CONTAINS(load_model(wrapped.dir.path()).status(),
                        "'model.language_model.layers.9.mlp.gate.weight'");
}

// Nesting 100,000 deep in config.json or a safetensors header: an error naming file and field.
TEST(ModelLoadingRobustnessTest, DeepNestingIsNamed) {
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  CheckpointCopy copy;
  {
    std::string text = read_text(copy.config());
    const size_t at = text.find("\"num_hidden_layers\": 4");
    ASSERT_NE(at, std::string::npos);
    text.replace(at, 22, "\"num_hidden_layers\": " + deep);
    std::ofstream(copy.config()) << text;
  }
  EXPECT_ERROR_CONTAINS(load_model(copy.dir.path()).status(),
                        copy.config() +
                            ": field 'num_hidden_layers' nests arrays or objects deeper than 64 "
                            "levels");

  CheckpointCopy header;
  {
    const std::string text = "{\"w\": {\"dtype\": \"F32\", \"shape\": " + deep + "}}";
    std::ofstream out(header.weights(), std::ios::binary | std::ios::trunc);
    for (int b = 0; b < 8; ++b) out.put(static_cast<char>((text.size() >> (8 * b)) & 0xff));
    out << text;
  }
  EXPECT_ERROR_CONTAINS(load_model(header.dir.path()).status(),
                        header.weights() +
                            ": header: field 'w.shape' nests arrays or objects deeper than 64 "
                            "levels");
}

// A wrapper's registered model_type picks the architecture; a decoder model_type that is not a
// string (or names another variant) must neither throw nor choose another mapping table.
TEST(ModelLoadingRobustnessTest, DecoderModelTypeOfAnotherTypeFallsBackToTheVariant) {
  CheckpointCopy copy;
  copy.rewrite_config([](nlohmann::json& j) {
    nlohmann::json text = j;
    text["model_type"] = 42;
    j = {{"model_type", "qwen3_next"}, {"text_config", text}};
  });
  Result<std::unique_ptr<Model>> model = load_model(copy.dir.path());
  ASSERT_OK(model.status());
  EXPECT_EQ(model.value()->config().model_type, "qwen3_next");
}

TEST(ModelLoadingRobustnessTest, MaxContextComesFromTheConfig) {
  struct Case {
    const char* dir;
    int64_t max_context;
  };
  const std::string golden = testing::golden_dir();
  for (const Case& c : {Case{"qwen3_next", 4096}, Case{"qwen3_5", 4096}, Case{"qwen3_5_moe", 4096},
                        Case{"kimi_linear", 4096},  // model_max_length
                        Case{"kimi_k3", 4096}}) {
    SCOPED_TRACE(c.dir);
    Result<LoadedConfig> loaded = load_config(golden + "/" + c.dir);
    ASSERT_OK(loaded.status());
    EXPECT_EQ(loaded->config.max_context, c.max_context);
  }
  Result<LoadedConfig> k3 = load_config(testing::test_data_dir() + "/kimi_k3_config");
  ASSERT_OK(k3.status());
  EXPECT_EQ(k3->config.max_context, 1'048'576);
  CheckpointCopy copy;
  copy.rewrite_config([](nlohmann::json& j) { j.erase("max_position_embeddings"); });
  Result<LoadedConfig> unknown = load_config(copy.dir.path());
  ASSERT_OK(unknown.status());
  EXPECT_EQ(unknown->config.max_context, 0);
}

}  // namespace
}  // namespace hyla::model

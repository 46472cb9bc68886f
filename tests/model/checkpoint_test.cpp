// checkpoint.h and json_file.h: single-file and sharded checkpoints, the golden HF checkpoint,
// index errors, missing and mis-shaped tensors, dtype conversion on load.
#include "model/checkpoint.h"

#include <nlohmann/json.hpp>  // writes index files

#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "model/json_file.h"
#include "test_files.h"
#include "testing.h"

namespace hyla::model {
namespace {

using hyla::testing::golden_dir;
using hyla::testing::TempDir;
using nlohmann::json;

constexpr testing::Tolerance kExact = {.atol = 0, .rtol = 0, .why = "a copy, no rounding"};

void write_text(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

// A sharded checkpoint in a temp dir: embed + norm in shard 1, two projections in shard 2.
struct ShardedCheckpoint {
  TempDir dir;
  std::mt19937 rng{3};
  Tensor embed = testing::random_uniform({16, 8}, DType::kF32, rng);
  Tensor norm = testing::random_uniform({8}, DType::kBF16, rng);
  Tensor q_proj = testing::random_uniform({8, 8}, DType::kF16, rng);
  Tensor k_proj = testing::random_uniform({4, 8}, DType::kF32, rng);
  json weight_map = {{"model.embed_tokens.weight", "model-00001-of-00002.safetensors"},
                     {"model.norm.weight", "model-00001-of-00002.safetensors"},
                     {"model.layers.0.q_proj.weight", "model-00002-of-00002.safetensors"},
                     {"model.layers.0.k_proj.weight", "model-00002-of-00002.safetensors"}};

  ShardedCheckpoint() {
    EXPECT_OK(
        write_safetensors(dir.file("model-00001-of-00002.safetensors"),
                          {{"model.embed_tokens.weight", embed}, {"model.norm.weight", norm}}));
    EXPECT_OK(write_safetensors(
        dir.file("model-00002-of-00002.safetensors"),
        {{"model.layers.0.q_proj.weight", q_proj}, {"model.layers.0.k_proj.weight", k_proj}}));
    write_index();
  }
  void write_index() const {
    const json index = {{"metadata", {{"total_size", 1234}}}, {"weight_map", weight_map}};
    write_text(dir.file("model.safetensors.index.json"), index.dump(2));
  }
};

TEST(CheckpointTest, ShardedCheckpointLoadsEveryTensor) {
  ShardedCheckpoint s;
  Result<Checkpoint> ckpt = Checkpoint::open(s.dir.path());
  ASSERT_OK(ckpt.status());
  EXPECT_EQ(ckpt->dir(), s.dir.path());
  EXPECT_EQ(ckpt->files().size(), 2u);
  EXPECT_EQ(ckpt->size(), 4);
  EXPECT_EQ(ckpt->names(),
            (std::vector<std::string>{"model.embed_tokens.weight", "model.layers.0.k_proj.weight",
                                      "model.layers.0.q_proj.weight", "model.norm.weight"}));
  EXPECT_EQ(ckpt->find("model.layers.0.q_proj.weight")->file,
            s.dir.file("model-00002-of-00002.safetensors"));

  const std::pair<const char*, const Tensor*> expected[] = {
      {"model.embed_tokens.weight", &s.embed},
      {"model.norm.weight", &s.norm},
      {"model.layers.0.q_proj.weight", &s.q_proj},
      {"model.layers.0.k_proj.weight", &s.k_proj}};
  for (const auto& [name, want] : expected) {
    SCOPED_TRACE(name);
    Result<Tensor> got = ckpt->load_any_shape(name, want->dtype());  // as stored
    ASSERT_OK(got.status());
    EXPECT_EQ(got->dtype(), want->dtype());
    EXPECT_CLOSE(*got, *want, kExact);
    Result<Tensor> f32 = ckpt->load_any_shape(name);  // f32 by default; exact from bf16/f16
    ASSERT_OK(f32.status());
    EXPECT_EQ(f32->dtype(), DType::kF32);
    EXPECT_CLOSE(*f32, *want, kExact);
  }
  Result<Tensor> embed = ckpt->load("model.embed_tokens.weight", {16, 8});
  ASSERT_OK(embed.status());
  EXPECT_EQ(embed->view().shape_string(), "[16, 8]");
  const std::vector<int64_t> shape = {4, kAnyDim};
  EXPECT_OK(ckpt->load("model.layers.0.k_proj.weight", shape).status());
  EXPECT_OK(ckpt->check("model.layers.0.k_proj.weight", shape));
}

TEST(CheckpointTest, SingleFileByFolderOrByPath) {
  TempDir dir;
  const Tensor w = testing::tensor_from({1, 2, 3, 4, 5, 6}, {2, 3}, DType::kF32);
  ASSERT_OK(write_safetensors(dir.file("model.safetensors"), {{"w", w}}));

  Result<Checkpoint> by_dir = Checkpoint::open(dir.path());
  ASSERT_OK(by_dir.status());
  EXPECT_EQ(by_dir->size(), 1);
  EXPECT_EQ(by_dir->source(), dir.path());

  Result<Checkpoint> by_file = Checkpoint::open(dir.file("model.safetensors"));
  ASSERT_OK(by_file.status());
  EXPECT_EQ(by_file->dir(), dir.path());
  EXPECT_EQ(by_file->source(), dir.file("model.safetensors"));
  Result<Tensor> got = by_file->load("w", {2, 3});
  ASSERT_OK(got.status());
  EXPECT_CLOSE(*got, w, kExact);

  // A moved checkpoint keeps its entries (they point into the mappings, which do not move).
  Checkpoint moved = std::move(by_file).value();
  ASSERT_NE(moved.find("w"), nullptr);
  EXPECT_CLOSE(moved.find("w")->view(), w, kExact);
}

// The golden HF checkpoint: every tensor reference_meta.json lists loads with its shape.
TEST(CheckpointTest, OpensTheGoldenQwen3NextFolder) {
  const std::string arch_dir = golden_dir() + "/qwen3_next";
  Result<Checkpoint> ckpt = Checkpoint::open(arch_dir);
  ASSERT_OK(ckpt.status());
  Result<json> meta = read_json_file(arch_dir + "/reference_meta.json");
  ASSERT_OK(meta.status());
  const json& keys = meta.value()["weights_file_keys"];
  EXPECT_EQ(ckpt->size(), int64_t(keys.size()));
  for (const auto& [name, spec] : keys.items()) {
    SCOPED_TRACE(name);
    const std::vector<int64_t> shape = spec["shape"].get<std::vector<int64_t>>();
    Result<Tensor> t = ckpt->load(name, shape);
    ASSERT_OK(t.status());
    EXPECT_EQ(t->view().shape_string(), ckpt->find(name)->shape_string());
    Result<Tensor> bf = ckpt->load(name, shape, DType::kBF16);
    ASSERT_OK(bf.status());
    EXPECT_CLOSE(*bf, *t, {.atol = 0, .rtol = 1.0 / 256, .why = "bf16 keeps 8 mantissa bits"});
  }
}

TEST(CheckpointTest, Bf16ToF32IsExact) {
  TempDir dir;
  std::mt19937 rng(5);
  const Tensor w = testing::random_normal({32, 17}, DType::kBF16, rng, 0.0f, 100.0f);
  ASSERT_OK(write_safetensors(dir.file("model.safetensors"), {{"w", w}}));
  Result<Checkpoint> ckpt = Checkpoint::open(dir.path());
  ASSERT_OK(ckpt.status());
  Result<Tensor> got = ckpt->load("w", {32, 17}, DType::kF32);
  ASSERT_OK(got.status());
  ASSERT_EQ(got->dtype(), DType::kF32);
  for (int64_t i = 0; i < w.numel(); ++i) {
    const float want = bf16_to_f32(w.data<bf16>()[i]);
    ASSERT_EQ(got->data<float>()[i], want) << "at " << testing::coords(w, i);
  }
}

TEST(CheckpointTest, ConversionsRoundToNearestEven) {
  TempDir dir;
  std::mt19937 rng(9);
  const Tensor f32 = testing::random_normal({100}, DType::kF32, rng);
  const Tensor f64 = testing::random_normal({100}, DType::kF64, rng);
  ASSERT_OK(write_safetensors(dir.file("model.safetensors"), {{"f32", f32}, {"f64", f64}}));
  Result<Checkpoint> ckpt = Checkpoint::open(dir.path());
  ASSERT_OK(ckpt.status());
  Result<Tensor> bf = ckpt->load("f32", {100}, DType::kBF16);
  Result<Tensor> half = ckpt->load("f32", {100}, DType::kF16);
  Result<Tensor> narrowed = ckpt->load("f64", {100}, DType::kF32);
  ASSERT_OK(bf.status());
  ASSERT_OK(half.status());
  ASSERT_OK(narrowed.status());
  for (int64_t i = 0; i < 100; ++i) {
    const float x = f32.data<float>()[i];
    EXPECT_EQ(bf->data<bf16>()[i].bits, f32_to_bf16(x).bits);
    EXPECT_EQ(half->data<f16>()[i].bits, f32_to_f16(x).bits);
    EXPECT_EQ(narrowed->data<float>()[i], float(f64.data<double>()[i]));
  }
}

TEST(CheckpointTest, IntegersLoadOnlyAsThemselves) {
  TempDir dir;
  Tensor ids = Tensor::empty({3}, DType::kI64);
  for (int64_t i = 0; i < 3; ++i) ids.data<int64_t>()[i] = (int64_t{1} << 40) + i;
  ASSERT_OK(write_safetensors(dir.file("model.safetensors"), {{"ids", ids}}));
  Result<Checkpoint> ckpt = Checkpoint::open(dir.path());
  ASSERT_OK(ckpt.status());
  Result<Tensor> got = ckpt->load("ids", {3}, DType::kI64);
  ASSERT_OK(got.status());
  EXPECT_EQ(got->data<int64_t>()[2], (int64_t{1} << 40) + 2);
  const Status s = ckpt->load("ids", {3}).status();
  EXPECT_ERROR_CONTAINS(s, "tensor 'ids' is i64 and cannot be loaded as f32");
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported);
}

// ---- errors ----

TEST(CheckpointErrorTest, MissingTensorListsSimilarNames) {
  ShardedCheckpoint s;
  Result<Checkpoint> ckpt = Checkpoint::open(s.dir.path());
  ASSERT_OK(ckpt.status());
  const Status status = ckpt->load("model.norm.weigth", {8}).status();
  EXPECT_ERROR_CONTAINS(status, "missing tensor 'model.norm.weigth' in " + s.dir.path() +
                                    " (4 tensors; similar: 'model.norm.weight', ");
  EXPECT_EQ(status.code(), ErrorCode::kNotFound);
  EXPECT_ERROR_CONTAINS(ckpt->load_any_shape("lm_head.weight").status(),
                        "missing tensor 'lm_head.weight'");
  EXPECT_EQ(ckpt->find("lm_head.weight"), nullptr);

  const std::vector<std::string> similar = ckpt->similar_names("model.layers.0.v_proj.weight");
  ASSERT_EQ(similar.size(), 3u);
  EXPECT_EQ(similar[0], "model.layers.0.k_proj.weight");
  EXPECT_EQ(similar[1], "model.layers.0.q_proj.weight");
  EXPECT_EQ(ckpt->similar_names("x", 1).size(), 1u);
}

TEST(CheckpointErrorTest, WrongShape) {
  ShardedCheckpoint s;
  Result<Checkpoint> ckpt = Checkpoint::open(s.dir.path());
  ASSERT_OK(ckpt.status());
  EXPECT_ERROR_CONTAINS(ckpt->load("model.embed_tokens.weight", {8, 16}).status(),
                        "tensor 'model.embed_tokens.weight' has shape [16, 8], expected [8, 16] "
                        "(in " +
                            s.dir.file("model-00001-of-00002.safetensors") + ")");
  EXPECT_ERROR_CONTAINS(ckpt->load("model.norm.weight", {1, 8}).status(),
                        "has shape [8], expected [1, 8]");
  EXPECT_ERROR_CONTAINS(ckpt->load("model.layers.0.k_proj.weight", {kAnyDim, 4}).status(),
                        "has shape [4, 8], expected [*, 4]");
}

TEST(CheckpointErrorTest, IndexNamesAMissingShard) {
  ShardedCheckpoint s;
  s.weight_map["model.layers.1.q_proj.weight"] = "model-00003-of-00003.safetensors";
  s.write_index();
  const Status status = Checkpoint::open(s.dir.path()).status();
  EXPECT_ERROR_CONTAINS(status,
                        "model.safetensors.index.json: weight_map puts "
                        "'model.layers.1.q_proj.weight' (and 0 more) in shard "
                        "'model-00003-of-00003.safetensors', but " +
                            s.dir.file("model-00003-of-00003.safetensors") + " does not exist");
  EXPECT_EQ(status.code(), ErrorCode::kNotFound);
}

TEST(CheckpointErrorTest, IndexListsATensorItsShardLacks) {
  ShardedCheckpoint s;
  s.weight_map["lm_head.weight"] = "model-00002-of-00002.safetensors";
  s.write_index();
  EXPECT_ERROR_CONTAINS(Checkpoint::open(s.dir.path()).status(),
                        "weight_map puts 'lm_head.weight' in shard "
                        "'model-00002-of-00002.safetensors', but that shard does not have it "
                        "(it has 2 tensors)");
}

TEST(CheckpointErrorTest, TensorInTwoShards) {
  ShardedCheckpoint s;
  ASSERT_OK(write_safetensors(s.dir.file("model-00002-of-00002.safetensors"),
                              {{"model.layers.0.q_proj.weight", s.q_proj},
                               {"model.layers.0.k_proj.weight", s.k_proj},
                               {"model.norm.weight", s.norm}}));
  EXPECT_ERROR_CONTAINS(Checkpoint::open(s.dir.path()).status(),
                        "tensor 'model.norm.weight' is in two shards: " +
                            s.dir.file("model-00001-of-00002.safetensors") + " and " +
                            s.dir.file("model-00002-of-00002.safetensors"));
}

TEST(CheckpointErrorTest, BrokenShardNamesItsFile) {
  ShardedCheckpoint s;
  const std::string shard = s.dir.file("model-00002-of-00002.safetensors");
  std::filesystem::resize_file(shard, std::filesystem::file_size(shard) - 1);
  EXPECT_ERROR_CONTAINS(Checkpoint::open(s.dir.path()).status(),
                        shard + ": tensor 'model.layers.0.k_proj.weight' needs bytes [128, 256)");
}

TEST(CheckpointErrorTest, BadIndexFile) {
  ShardedCheckpoint s;
  write_text(s.dir.file("model.safetensors.index.json"), R"({"metadata": {}})");
  EXPECT_ERROR_CONTAINS(Checkpoint::open(s.dir.path()).status(),
                        "model.safetensors.index.json: no \"weight_map\" object");
  write_text(s.dir.file("model.safetensors.index.json"), R"({"weight_map": {"a": 3}})");
  EXPECT_ERROR_CONTAINS(Checkpoint::open(s.dir.path()).status(),
                        "weight_map entry of 'a' is not a file name: 3");
  write_text(s.dir.file("model.safetensors.index.json"), R"({"weight_map": {"a": )");
  EXPECT_ERROR_CONTAINS(Checkpoint::open(s.dir.path()).status(),
                        "model.safetensors.index.json: invalid JSON: ");
}

TEST(CheckpointErrorTest, NothingToOpen) {
  TempDir dir;
  write_text(dir.file("consolidated.safetensors"), "");
  const Status empty = Checkpoint::open(dir.path()).status();
  EXPECT_ERROR_CONTAINS(empty, "checkpoint '" + dir.path() +
                                   "' has neither model.safetensors nor "
                                   "model.safetensors.index.json (it has 1 other .safetensors "
                                   "files)");
  EXPECT_EQ(empty.code(), ErrorCode::kNotFound);
  EXPECT_ERROR_CONTAINS(Checkpoint::open(dir.file("missing")).status(),
                        "checkpoint '" + dir.file("missing") + "' does not exist");
}

TEST(JsonFileTest, ReadsAndReportsErrors) {
  TempDir dir;
  write_text(dir.file("config.json"), R"({"model_type": "qwen3_next", "hidden_size": 128})");
  Result<json> config = read_json_file(dir.file("config.json"));
  ASSERT_OK(config.status());
  EXPECT_EQ((*config)["hidden_size"], 128);

  const Status missing = read_json_file(dir.file("nope.json")).status();
  EXPECT_ERROR_CONTAINS(missing, "JSON file '" + dir.file("nope.json") + "' does not exist");
  EXPECT_EQ(missing.code(), ErrorCode::kNotFound);

  write_text(dir.file("bad.json"), "{\n  \"a\": 1,\n  oops\n}");
  const Status bad = read_json_file(dir.file("bad.json")).status();
  EXPECT_ERROR_CONTAINS(bad, dir.file("bad.json") + ": invalid JSON: ");
  EXPECT_ERROR_CONTAINS(bad, "line 3");

  EXPECT_ERROR_CONTAINS(read_json_file(dir.path()).status(), "is a directory");
}

}  // namespace
}  // namespace hyla::model

namespace hyla::model {
namespace {

// A multimodal checkpoint (Qwen3.5 / Kimi K3 style) nests the decoder; the text-only names the
// mapping tables use reach the same tensors.
TEST(CheckpointTest, WrappedDecoderAnswersToTextOnlyNames) {
  testing::TempDir dir;
  Tensor a = Tensor::zeros({2, 3}, DType::kF32), b = Tensor::zeros({4}, DType::kF32),
         c = Tensor::zeros({5}, DType::kF32);
  a.data<float>()[1] = 7.0f;
  ASSERT_OK(write_safetensors(dir.path() + "/model.safetensors",
                              {{"model.language_model.layers.0.w", a.view()},
                               {"language_model.lm_head.weight", b.view()},
                               {"model.visual.patch_embed", c.view()}}));
  Result<Checkpoint> ckpt = Checkpoint::open(dir.path());
  ASSERT_TRUE(ckpt.ok()) << ckpt.status().message();
  ASSERT_NE(ckpt->find("model.layers.0.w"), nullptr);
  EXPECT_EQ(ckpt->find("model.layers.0.w"), ckpt->find("model.language_model.layers.0.w"));
  ASSERT_NE(ckpt->find("lm_head.weight"), nullptr);
  EXPECT_EQ(ckpt->find("model.visual.patch_embed")->shape, std::vector<int64_t>{5});
  Result<Tensor> w = ckpt->load("model.layers.0.w", {2, 3});
  ASSERT_TRUE(w.ok()) << w.status().message();
  EXPECT_EQ(w->data<float>()[1], 7.0f);
}

}  // namespace
}  // namespace hyla::model

// The `golden` CTest test: every architecture folder under the golden root (tests/data/golden, or
// $HYLA_GOLDEN_DIR) is loaded like a user's checkpoint and checked against Hugging Face's outputs
// in its reference.safetensors (made by ../shared/tools/make_golden.py). Lengths, the continuation
// split and the generation count come from reference_meta.json, never from this file.
//
// Per architecture, prompts A and B:
//   - logits and every hidden state (HF convention) of one prefill;
//   - B's per-layer mixer and MLP outputs and routed experts (ids and weights);
//   - with Attention Residuals (Kimi K3, when the reference has them): each sublayer's input
//     mixture and its weights, the final mixture and its weights, the block snapshots;
//   - the greedy generation (tokens identical, step logits close);
//   - prefill of A[:prefix] then A[prefix:prefix+rest] in one extend == A.logits[prefix:...];
//   - token-by-token decode of A == the full prefill's logits.
// And the checkpoint converted to bf16 gives what fp32 gives on the same (bf16-rounded) values.
// Each comparison prints its max |diff| (the figures docs and reviews quote).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "model/architecture.h"
#include "model/json_file.h"
#include "model/safetensors.h"
#include "model/test_files.h"
#include "testing.h"

namespace hyla::model {
namespace {

namespace fs = std::filesystem;
using testing::Tolerance;

// fp32 engine vs fp32 reference. Both compute the same math in fp32 but with other algorithms
// (GEMM blockings, chunked vs token-by-token delta rule, other exp/softmax code), so each op rounds
// differently. How far rounding changes move the outputs is the model's own property, recorded by
// the reference's generator: reference_meta.json "checks" holds the logits' change between two
// evaluations of the same math in another grouping (testing::reference_logits_spread: 6.7e-6 ..
// 1.3e-5 on the Qwen / Kimi-Linear sets, 1.6e-4 on the 7-layer K3). Hyla differs from the
// reference in every op at once, not in one grouping, so the bound is a multiple of that spread:
// 20x, the generator's own rule (K3's suggested_tolerance: "20x the reference's own path-to-path
// spread"). The same atol holds hidden states, mixtures and layer outputs: their rms (<= 2.3,
// "hidden_rms_per_layer") is below the logits' std (~3), so they carry no more absolute rounding.
// Semantic errors (a wrong eps, gate, scale or layout) show at >= 1e-2. Measured (AMD EPYC,
// OPENBLAS_CORETYPE Prescott / Haswell / SkylakeX x 1, 2 threads): at most 0.20 of this bound
// (K3 logits 6.3e-4 of 3.2e-3; the Qwen / Kimi-Linear sets <= 1.6e-5 of 1.3e-4..2.6e-4).
constexpr double kHfSpreads = 20;
// Router and AttnRes weights are sigmoid / softmax outputs (slope <= 1) of hidden-state-level
// scores, so they move no more than those: the same atol.
// The bf16 checkpoint: see Bf16CheckpointMatchesF32OnTheSameValues.
constexpr double kBf16PathSpreads = 4;

Tolerance fp32_tolerance(const std::string& dir) {
  return {.atol = kHfSpreads * testing::reference_logits_spread(dir),
          .rtol = 0,
          .why = "fp32 vs fp32: kHfSpreads x the reference's own path-to-path spread"};
}

std::string golden_root() { return testing::golden_dir(); }

using testing::max_abs_diff;

/// EXPECT_CLOSE that also prints the max |diff| under `name`.
void expect_close_report(const std::string& name, const TensorView& got, const TensorView& want,
                         const Tolerance& tol) {
  std::printf("  %-34s max |diff| %.3g\n", name.c_str(), max_abs_diff(got, want));
  EXPECT_CLOSE(got, want, tol);
}

std::vector<std::string> golden_dirs() { return testing::golden_arch_dirs(golden_root()); }

/// One golden folder: the model, HF's references and the meta data.
struct Golden {
  std::string dir;
  std::unique_ptr<Model> model;
  SafetensorsFile reference;
  nlohmann::json meta;
  Tolerance fp32;  ///< fp32_tolerance(dir), also for router and AttnRes weights

  bool has(const std::string& key) const { return reference.find(key) != nullptr; }
  TensorView ref(const std::string& key) const {
    const TensorEntry* e = reference.find(key);
    HYLA_CHECK(e != nullptr, "reference key '", key, "' missing in ", dir);
    return e->view();
  }
  std::vector<int32_t> tokens(const std::string& key) const {
    std::vector<int32_t> out;
    for (double v : testing::to_f64(ref(key))) out.push_back(int32_t(v));
    return out;
  }
};

Golden open_golden(const std::string& dir) {
  Result<std::unique_ptr<Model>> model = load_model(dir);
  HYLA_CHECK(model.ok(), "loading ", dir, ": ", model.status().message());
  Result<SafetensorsFile> ref = SafetensorsFile::open(dir + "/reference.safetensors");
  HYLA_CHECK(ref.ok(), ref.status().message());
  Result<nlohmann::json> meta = read_json_file(dir + "/reference_meta.json");
  HYLA_CHECK(meta.ok(), meta.status().message());
  return Golden{dir, std::move(model).value(), std::move(ref).value(), std::move(meta).value(),
                fp32_tolerance(dir)};
}

/// Each token's (expert, weight) pairs reordered by expert id: ids and weights as row-major values.
std::pair<std::vector<double>, std::vector<double>> sort_by_expert(const Tensor& ids,
                                                                   const Tensor& weights) {
  const std::vector<double> id = testing::to_f64(ids), w = testing::to_f64(weights);
  const int64_t K = ids.size(1);
  std::vector<double> sorted_ids, sorted_w;
  for (int64_t t = 0; t < ids.size(0); ++t) {
    std::vector<std::pair<double, double>> row;
    for (int64_t j = 0; j < K; ++j) row.emplace_back(id[size_t(t * K + j)], w[size_t(t * K + j)]);
    std::sort(row.begin(), row.end());
    for (const auto& [e, x] : row) {
      sorted_ids.push_back(e);
      sorted_w.push_back(x);
    }
  }
  return {sorted_ids, sorted_w};
}

/// Row block [begin, end) of a [T, V] view as a new view.
TensorView rows(const TensorView& t, int64_t begin, int64_t end) { return t.slice(begin, end); }

class GoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(GoldenTest, PrefillMatchesHuggingFace) {
  const Golden g = open_golden(GetParam());
  const Model& m = *g.model;
  const int64_t L = m.config().num_layers;
  for (const std::string prompt : {"A", "B"}) {
    SCOPED_TRACE("prompt " + prompt);
    const std::vector<int32_t> ids = g.tokens(prompt + ".input_ids");
    SequenceState state = m.new_sequence(int64_t(ids.size()));
    ForwardTrace trace;
    Result<Tensor> logits = m.forward(ids, state, &trace);
    ASSERT_TRUE(logits.ok()) << logits.status().message();
    std::printf("%s prompt %s (atol %.3g)\n", fs::path(g.dir).filename().c_str(), prompt.c_str(),
                g.fp32.atol);
    expect_close_report(prompt + ".logits", logits.value(), g.ref(prompt + ".logits"), g.fp32);
    expect_close_report(prompt + ".last_layer_out", trace.last_layer_out,
                        g.ref(prompt + ".last_layer_out"), g.fp32);
    if (g.has(prompt + ".hidden_states")) {
      const TensorView hidden = g.ref(prompt + ".hidden_states");
      ASSERT_EQ(int64_t(trace.hidden_states.size()), hidden.size(0));
      for (int64_t i = 0; i < hidden.size(0); ++i) {
        SCOPED_TRACE("hidden_states[" + std::to_string(i) + "]");
        expect_close_report(prompt + ".hidden_states[" + std::to_string(i) + "]",
                            trace.hidden_states[size_t(i)], hidden.select(i), g.fp32);
      }
    }
    if (g.has(prompt + ".final_mix")) {
      ASSERT_TRUE(trace.final_mix.defined()) << "the reference mixes the output, we don't";
      expect_close_report(prompt + ".final_mix", trace.final_mix, g.ref(prompt + ".final_mix"),
                          g.fp32);
    }
    if (prompt != "B") continue;
    if (g.has("B.block_residual")) {
      ASSERT_TRUE(trace.block_snapshots.defined()) << "the reference has block snapshots";
      expect_close_report("B.block_residual", trace.block_snapshots, g.ref("B.block_residual"),
                          g.fp32);
    }
    if (g.has("B.attnres_probs.out"))
      expect_close_report("B.attnres_probs.out", trace.attn_res_probs_out,
                          g.ref("B.attnres_probs.out"), g.fp32);
    for (int64_t i = 0; i < L; ++i) {
      SCOPED_TRACE("layer " + std::to_string(i));
      const std::string l = str_cat("L", i);
      expect_close_report("B.mixer_out." + l, trace.mixer_out[size_t(i)],
                          g.ref("B.mixer_out").select(i), g.fp32);
      expect_close_report("B.mlp_out." + l, trace.mlp_out[size_t(i)], g.ref("B.mlp_out").select(i),
                          g.fp32);
      for (const auto& [key, mixes] : {std::pair{"B.attn_in_mix", &trace.attn_in_mix},
                                       std::pair{"B.mlp_in_mix", &trace.mlp_in_mix}}) {
        if (!g.has(key)) continue;
        ASSERT_EQ(int64_t(mixes->size()), L) << key << ": the reference mixes, we don't";
        expect_close_report(std::string(key) + "." + l, (*mixes)[size_t(i)], g.ref(key).select(i),
                            g.fp32);
      }
      for (const auto& [side, probs] : {std::pair{"attn", &trace.attn_res_probs_attn},
                                        std::pair{"mlp", &trace.attn_res_probs_mlp}}) {
        const std::string key = "B.attnres_probs." + l + "." + side;
        if (!g.has(key)) continue;
        ASSERT_EQ(int64_t(probs->size()), L) << key << ": the reference mixes, we don't";
        expect_close_report(key, (*probs)[size_t(i)], g.ref(key), g.fp32);
      }
      const std::string ids_key = "B.router_topk_idx.L" + std::to_string(i);
      if (!g.has(ids_key)) continue;
      ASSERT_TRUE(trace.router_ids[size_t(i)].defined()) << "HF routes layer " << i << ", we don't";
      // The reference lists each token's experts sorted by expert id; ours come by score.
      const auto [ids_by_expert, weights_by_expert] =
          sort_by_expert(trace.router_ids[size_t(i)], trace.router_weights[size_t(i)]);
      EXPECT_EQ(ids_by_expert, testing::to_f64(g.ref(ids_key)));
      const TensorView want_w = g.ref("B.router_topk_w." + l);
      double worst_w = 0;
      for (size_t k = 0; k < weights_by_expert.size(); ++k)
        worst_w = std::max(worst_w, std::abs(weights_by_expert[k] - testing::to_f64(want_w)[k]));
      std::printf("  %-34s max |diff| %.3g, ids %s\n", ("B.router_topk_w." + l).c_str(), worst_w,
                  ids_by_expert == testing::to_f64(g.ref(ids_key)) ? "equal" : "DIFFER");
      EXPECT_TRUE(testing::all_close(g.ref("B.router_topk_w.L" + std::to_string(i)),
                                     weights_by_expert, g.fp32));
    }
  }
}

TEST_P(GoldenTest, GreedyGenerationMatchesHuggingFace) {
  const Golden g = open_golden(GetParam());
  const int64_t n = g.meta.at("n_gen").get<int64_t>();
  for (const std::string prompt : {"A", "B"}) {
    SCOPED_TRACE("prompt " + prompt);
    Tensor step_logits;
    Result<std::vector<int32_t>> tokens =
        greedy_generate(*g.model, g.tokens(prompt + ".input_ids"), n, &step_logits);
    ASSERT_TRUE(tokens.ok()) << tokens.status().message();
    EXPECT_EQ(tokens.value(), g.tokens(prompt + ".gen_tokens"));
    expect_close_report(fs::path(g.dir).filename().string() + " " + prompt + ".gen_logits",
                        step_logits, g.ref(prompt + ".gen_logits"), g.fp32);
  }
}

TEST_P(GoldenTest, ExtendAfterPrefillEqualsOnePrefill) {
  const Golden g = open_golden(GetParam());
  const int64_t prefix = g.meta.at("continuation").at("prefix").get<int64_t>();
  const int64_t rest = g.meta.at("continuation").at("rest").get<int64_t>();
  const std::vector<int32_t> ids = g.tokens("A.input_ids");
  ASSERT_LE(prefix + rest, int64_t(ids.size()));
  SequenceState state = g.model->new_sequence(prefix + rest);
  const std::span<const int32_t> all(ids);
  ASSERT_TRUE(g.model->forward(all.subspan(0, size_t(prefix)), state).ok());
  Result<Tensor> logits = g.model->forward(all.subspan(size_t(prefix), size_t(rest)), state);
  ASSERT_TRUE(logits.ok()) << logits.status().message();
  expect_close_report(fs::path(g.dir).filename().string() + " A extend after prefill",
                      logits.value(), rows(g.ref("A.logits"), prefix, prefix + rest), g.fp32);
}

TEST_P(GoldenTest, TokenByTokenDecodeEqualsPrefill) {
  const Golden g = open_golden(GetParam());
  const std::vector<int32_t> ids = g.tokens("A.input_ids");
  const int64_t T = int64_t(ids.size()), V = g.model->config().vocab_size;
  SequenceState state = g.model->new_sequence(T);
  Tensor logits = Tensor::empty({T, V}, DType::kF32);
  for (int64_t t = 0; t < T; ++t) {
    Result<Tensor> step =
        g.model->forward(std::span<const int32_t>(ids).subspan(size_t(t), 1), state);
    ASSERT_TRUE(step.ok()) << step.status().message();
    std::copy_n(step->data<float>(), V, logits.data<float>() + t * V);
  }
  expect_close_report(fs::path(g.dir).filename().string() + " A token-by-token decode", logits,
                      g.ref("A.logits"), g.fp32);
}

/// `dir`'s checkpoint with every f32 tensor rounded to bf16, written into `to` (with config.json)
/// as bf16 tensors, or as f32 tensors holding the bf16-rounded values when `as_f32`.
void write_bf16_rounded(const std::string& dir, const fs::path& to, bool as_f32) {
  fs::copy_file(fs::path(dir) / "config.json", to / "config.json",
                fs::copy_options::overwrite_existing);
  Result<SafetensorsFile> src = SafetensorsFile::open(dir + "/model.safetensors");
  ASSERT_TRUE(src.ok()) << src.status().message();
  std::vector<Tensor> keep;
  std::vector<std::pair<std::string, TensorView>> out;
  for (const TensorEntry& e : src->tensors()) {
    if (e.dtype != DType::kF32) {
      out.emplace_back(e.name, e.view());
      continue;
    }
    Tensor t =
        Tensor::empty(int(e.shape.size()), e.shape.data(), as_f32 ? DType::kF32 : DType::kBF16);
    const float* from = static_cast<const float*>(e.data);
    for (int64_t i = 0; i < t.numel(); ++i) {
      const bf16 rounded = f32_to_bf16(from[i]);
      if (as_f32)
        t.data<float>()[i] = bf16_to_f32(rounded);
      else
        t.data<bf16>()[i] = rounded;
    }
    keep.push_back(t);
    out.emplace_back(e.name, t.view());
  }
  ASSERT_OK(write_safetensors((to / "model.safetensors").string(), out));
}

// The bf16 path (bf16 weights kept as bf16, widened to fp32 tile by tile inside the GEMMs) against
// an fp32 run on the very same values: an f32 checkpoint holding the bf16-rounded weights. Rounding
// the weights is then no part of the comparison (it changes the model, and a router whose margin
// is below 2^-9 relative picks other experts, which no bound on the path could absorb); what is
// left is fp32 math in another grouping, bounded like any regrouping by a multiple of the
// reference's own path-to-path spread (kBf16PathSpreads: the widened tiles change the GEMM
// blocking, as the batched step of runtime/batch_logits_test.cpp does, with the same factor).
// Routing must be identical: the router scores see the same values and move only by that
// regrouping (~1e-6), below the smallest selection margin the references record (5.4e-5).
// Measured: bit-identical logits on every golden set, every core type and thread count above
// (the tiles split the output rows, so each dot product keeps its order).
TEST_P(GoldenTest, Bf16CheckpointMatchesF32OnTheSameValues) {
  const std::string dir = GetParam();
  const testing::TempDir bf16_dir, f32_dir;
  ASSERT_NO_FATAL_FAILURE(write_bf16_rounded(dir, bf16_dir.path(), /*as_f32=*/false));
  ASSERT_NO_FATAL_FAILURE(write_bf16_rounded(dir, f32_dir.path(), /*as_f32=*/true));
  Result<SafetensorsFile> ref = SafetensorsFile::open(dir + "/reference.safetensors");
  ASSERT_TRUE(ref.ok()) << ref.status().message();
  std::vector<int32_t> ids;
  for (double v : testing::to_f64(ref->find("B.input_ids")->view())) ids.push_back(int32_t(v));
  struct Run {
    Tensor logits;
    ForwardTrace trace;
  };
  auto run = [&](const std::string& model_dir) -> Result<Run> {
    HYLA_ASSIGN_OR_RETURN(std::unique_ptr<Model> model, load_model(model_dir));
    SequenceState state = model->new_sequence(int64_t(ids.size()));
    Run r;
    HYLA_ASSIGN_OR_RETURN(r.logits, model->forward(ids, state, &r.trace));
    return r;
  };
  Result<Run> got = run(bf16_dir.path());
  ASSERT_TRUE(got.ok()) << got.status().message();
  Result<Run> want = run(f32_dir.path());
  ASSERT_TRUE(want.ok()) << want.status().message();
  const double spread = testing::reference_logits_spread(dir);
  const Tolerance tol{.atol = kBf16PathSpreads * spread,
                      .rtol = 0,
                      .why = "bf16 path vs fp32 on the same values: kBf16PathSpreads x spread"};
  std::printf(
      "%s bf16 path vs f32 on the same values: logits max |diff| %.3g (%.2f x spread %.3g)\n",
      fs::path(dir).filename().c_str(), max_abs_diff(got->logits, want->logits),
      max_abs_diff(got->logits, want->logits) / spread, spread);
  EXPECT_CLOSE(got->logits, want->logits, tol);
  ASSERT_EQ(got->trace.router_ids.size(), want->trace.router_ids.size());
  for (size_t i = 0; i < got->trace.router_ids.size(); ++i) {
    SCOPED_TRACE("layer " + std::to_string(i));
    ASSERT_EQ(got->trace.router_ids[i].defined(), want->trace.router_ids[i].defined());
    if (!got->trace.router_ids[i].defined()) continue;
    EXPECT_EQ(testing::to_f64(got->trace.router_ids[i]), testing::to_f64(want->trace.router_ids[i]))
        << "routing differs between the bf16 path and fp32 on the same weights";
    EXPECT_CLOSE(got->trace.router_weights[i], want->trace.router_weights[i], tol);
  }
}

INSTANTIATE_TEST_SUITE_P(Golden, GoldenTest, ::testing::ValuesIn(golden_dirs()),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           return fs::path(param.param).filename().string();
                         });

TEST(GoldenRoot, HasArchitectures) {
  // A golden root without any architecture folder is a broken setup, not a pass.
  EXPECT_TRUE(testing::expect_golden_archs(golden_root()));
}

}  // namespace
}  // namespace hyla::model

// The MTP draft head (model/mtp.h, Model::forward_mtp) on the MTP golden sets
// (tests/data/golden/<arch>_mtp: Qwen3-Next with an MoE MTP layer, Qwen3.5 with a dense one):
// loading and its errors, the target's final-hidden export, and forward_mtp against a float64
// reference written here from the checkpoint's tensors (embedding, the two pre-fc norms, fc, the
// gated full-attention layer over its own KV, the MoE or dense MLP, the final norm, lm_head).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <numeric>

#include "model/architecture.h"
#include "model/checkpoint.h"
#include "model/checkpoint_copy.h"
#include "model/json_file.h"
#include "model/mtp_testing.h"
#include "model/safetensors.h"

namespace hyla::model {
namespace {

namespace fs = std::filesystem;
using testing::MtpScene;
using testing::PooledMemory;
using Vec = std::vector<double>;

// ---- loading ----

using testing::CheckpointCopy;

TEST(MtpTest, LoadsAndIgnores) {
  for (const std::string& arch : testing::mtp_arch_names()) {
    SCOPED_TRACE(arch);
    Result<std::unique_ptr<Model>> with = load_model(testing::mtp_model_dir(arch));
    ASSERT_OK(with.status());
    EXPECT_TRUE((*with)->has_mtp());
    const ModelConfig& c = (*with)->config();
    EXPECT_EQ(c.num_mtp_layers, 1);
    ASSERT_EQ(c.mtp_mlps.size(), 1u);
    EXPECT_EQ(c.mtp_mlps[0], arch == "qwen3_5" ? MlpKind::kDense : MlpKind::kMoe);
    EXPECT_TRUE(c.warnings.empty());

    // The plain golden set (no mtp_num_hidden_layers) loads without one.
    Result<std::unique_ptr<Model>> plain = load_model(testing::test_data_dir() + "/golden/" + arch);
    ASSERT_OK(plain.status());
    EXPECT_FALSE((*plain)->has_mtp());
    EXPECT_EQ((*plain)->config().num_mtp_layers, 0);

    // mtp.* tensors beside a config that declares no MTP layers stay ignored.
    CheckpointCopy undeclared = CheckpointCopy::of_dir(testing::mtp_model_dir(arch));
    undeclared.rewrite_config([](nlohmann::json& j) { j.erase("mtp_num_hidden_layers"); });
    Result<std::unique_ptr<Model>> ignored = load_model(undeclared.dir.path());
    ASSERT_OK(ignored.status());
    EXPECT_FALSE((*ignored)->has_mtp());

    // A head count out of range is named with the field.
    CheckpointCopy negative = CheckpointCopy::of_dir(testing::mtp_model_dir(arch));
    negative.rewrite_config([](nlohmann::json& j) {
      (j.contains("text_config") ? j["text_config"] : j)["mtp_num_hidden_layers"] = -1;
    });
    EXPECT_ERROR_CONTAINS(load_model(negative.dir.path()).status(),
                          "field 'mtp_num_hidden_layers' is -1, expected an integer in [0, ");

    // A config that declares the head over a checkpoint without any mtp.* tensor: the decoder
    // alone, with a warning.
    CheckpointCopy dropped = CheckpointCopy::of_dir(testing::mtp_model_dir(arch));
    dropped.rewrite_weights([](auto& tensors) {
      std::erase_if(tensors, [](const auto& t) { return t.first.starts_with("mtp."); });
    });
    Result<std::unique_ptr<Model>> decoder_only = load_model(dropped.dir.path());
    ASSERT_OK(decoder_only.status());
    EXPECT_FALSE((*decoder_only)->has_mtp());
    EXPECT_EQ((*decoder_only)->config().num_mtp_layers, 0);
    ASSERT_EQ((*decoder_only)->config().warnings.size(), 1u);
    EXPECT_NE((*decoder_only)->config().warnings[0].find("holds no mtp.* tensor"),
              std::string::npos);

    // One mtp tensor missing, one mis-shaped, one more than the config reads: each named.
    CheckpointCopy missing = CheckpointCopy::of_dir(testing::mtp_model_dir(arch));
    missing.rewrite_weights([](auto& tensors) {
      std::erase_if(
          tensors, [](const auto& t) { return t.first == "mtp.layers.0.self_attn.k_norm.weight"; });
    });
    EXPECT_ERROR_CONTAINS(load_model(missing.dir.path()).status(),
                          "missing tensor 'mtp.layers.0.self_attn.k_norm.weight'");
    CheckpointCopy misshapen = CheckpointCopy::of_dir(testing::mtp_model_dir(arch));
    misshapen.rewrite_weights([&](auto& tensors) {
      for (auto& [name, t] : tensors)
        if (name == "mtp.fc.weight") t = Tensor::zeros({c.hidden_size, c.hidden_size}, DType::kF32);
    });
    EXPECT_ERROR_CONTAINS(
        load_model(misshapen.dir.path()).status(),
        str_cat("tensor 'mtp.fc.weight' has shape [", c.hidden_size, ", ", c.hidden_size,
                "], expected [", c.hidden_size, ", ", 2 * c.hidden_size, "]"));
    CheckpointCopy extra = CheckpointCopy::of_dir(testing::mtp_model_dir(arch));
    extra.rewrite_weights([&](auto& tensors) {
      tensors.emplace_back("mtp.layers.1.input_layernorm.weight",
                           Tensor::zeros({c.hidden_size}, DType::kF32));
    });
    EXPECT_ERROR_CONTAINS(load_model(extra.dir.path()).status(),
                          "never reads:\n  'mtp.layers.1.input_layernorm.weight'");
  }
}

TEST(MtpTest, ForwardErrors) {
  Result<std::unique_ptr<Model>> plain = load_model(testing::test_data_dir() + "/golden/qwen3_5");
  ASSERT_OK(plain.status());
  const MtpScene scene;
  PooledMemory pools((*plain)->config(), 2, MtpScene::kPages, MtpScene::kPageSize, Device::cpu());
  const Batch prefill = scene.mtp_prefill();
  const Tensor hidden = Tensor::zeros({int64_t(prefill.tokens.size()), 128}, DType::kF32);
  EXPECT_ERROR_CONTAINS((*plain)->forward_mtp(prefill, hidden, pools.memory).status(),
                        "without an MTP draft head");

  Result<std::unique_ptr<Model>> mtp = load_model(testing::mtp_model_dir("qwen3_5"));
  ASSERT_OK(mtp.status());
  const ModelConfig& c = (*mtp)->config();
  // pages for the model's layers only
  EXPECT_ERROR_CONTAINS((*mtp)->forward_mtp(prefill, hidden, pools.memory).status(),
                        str_cat("no KV pages for MTP layer 0 (global layer ", c.num_layers, ")"));
  PooledMemory with_mtp(c, 2, MtpScene::kPages, MtpScene::kPageSize, Device::cpu());
  EXPECT_ERROR_CONTAINS(
      (*mtp)
          ->forward_mtp(prefill, Tensor::zeros({3, c.hidden_size}, DType::kF32), with_mtp.memory)
          .status(),
      str_cat("expected [", prefill.tokens.size(), ", ", c.hidden_size, "] f32"));
  Batch short_pages = prefill;
  short_pages.page_tables[0].pop_back();
  EXPECT_ERROR_CONTAINS((*mtp)->forward_mtp(short_pages, hidden, with_mtp.memory).status(),
                        "forward_mtp: sequence 0 has 1 pages of 4 tokens for 6 tokens");
}

// ---- the float64 reference ----

/// The MTP head in float64 from the checkpoint's tensors; rows come in position order per
/// sequence, and each keeps its K and V, as the paged cache does.
class MtpReference {
 public:
  MtpReference(const std::string& dir, const ModelConfig& c) : c_(c) {
    Result<Checkpoint> ckpt = Checkpoint::open(dir);
    HYLA_CHECK(ckpt.ok(), ckpt.status().message());
    for (const std::string& name : ckpt->names()) {
      if (!name.starts_with("mtp.") && name != "model.embed_tokens.weight" &&
          name != "lm_head.weight")
        continue;
      Result<Tensor> t = ckpt->load_any_shape(name, DType::kF32);
      HYLA_CHECK(t.ok(), t.status().message());
      w_[name] = testing::to_f64(t->view());
    }
  }

  /// The row of sequence `seq` at position `pos` with next token `token` and input hidden `h`:
  /// fills `out` (the normed output) and `logits`.
  void row(int seq, int64_t pos, int32_t token, const Vec& h, Vec& out, Vec& logits) {
    const int64_t H = c_.hidden_size;
    const Vec& table = w("model.embed_tokens.weight");
    const Vec e(table.begin() + token * H, table.begin() + (token + 1) * H);
    // x = fc([norm_e(e) | norm_h(h)])
    Vec both = norm(e, w("mtp.pre_fc_norm_embedding.weight"));
    const Vec g = norm(h, w("mtp.pre_fc_norm_hidden.weight"));
    both.insert(both.end(), g.begin(), g.end());
    Vec x = matvec(w("mtp.fc.weight"), H, both);
    add(x, attention(seq, pos, norm(x, w("mtp.layers.0.input_layernorm.weight"))));
    add(x, mlp(norm(x, w("mtp.layers.0.post_attention_layernorm.weight"))));
    out = norm(x, w("mtp.norm.weight"));
    logits = matvec(w("lm_head.weight"), c_.vocab_size, out);
  }

  /// The smallest gap between the k-th and (k+1)-th router probability over every MoE row so far:
  /// routing decided by less than f32's error would not be a fair comparison.
  double min_router_gap() const { return min_gap_; }

 private:
  const Vec& w(const std::string& name) const {
    const auto it = w_.find(name);
    HYLA_CHECK(it != w_.end(), "reference: no tensor ", name);
    return it->second;
  }
  static Vec matvec(const Vec& W, int64_t rows, const Vec& x, int64_t row0 = 0) {
    const int64_t cols = int64_t(x.size());
    Vec y(size_t(rows), 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t j = 0; j < cols; ++j)
        y[size_t(r)] += W[size_t((row0 + r) * cols + j)] * x[size_t(j)];
    return y;
  }
  static void add(Vec& x, const Vec& y) {
    for (size_t i = 0; i < x.size(); ++i) x[i] += y[i];
  }
  /// Qwen's RMSNorm: x / sqrt(mean(x^2) + eps) * (1 + w)
  Vec norm(const Vec& x, const Vec& weight, size_t begin = 0, size_t n = 0) const {
    if (n == 0) n = x.size();
    double ms = 0;
    for (size_t i = 0; i < n; ++i) ms += x[begin + i] * x[begin + i];
    const double r = 1.0 / std::sqrt(ms / double(n) + double(c_.rms_norm_eps));
    Vec y(n);
    for (size_t i = 0; i < n; ++i) y[i] = x[begin + i] * r * (1.0 + weight[i]);
    return y;
  }
  static double sigmoid(double v) { return 1.0 / (1.0 + std::exp(-v)); }
  static double silu(double v) { return v * sigmoid(v); }
  /// NeoX RoPE on the first rotary_dim dims of one head: pairs (i, i + rotary_dim / 2).
  void rope(double* x, int64_t pos) const {
    const int64_t half = c_.attention.rotary_dim / 2;
    for (int64_t i = 0; i < half; ++i) {
      const double inv_freq =
          std::pow(double(c_.attention.rope_theta), -2.0 * double(i) / double(2 * half));
      const double cs = std::cos(double(pos) * inv_freq), sn = std::sin(double(pos) * inv_freq);
      const double a = x[i], b = x[i + half];
      x[i] = a * cs - b * sn;
      x[i + half] = b * cs + a * sn;
    }
  }
  /// Gated attention: q_proj rows per head [q_h | gate_h]; q, k per-head (1 + w) norms, then
  /// RoPE; causal softmax over this sequence's positions <= pos; o * sigmoid(gate); o_proj.
  Vec attention(int seq, int64_t pos, const Vec& x) {
    const FullAttentionConfig& a = c_.attention;
    const int64_t nh = a.num_heads, nkv = a.num_kv_heads, hd = a.head_dim;
    const Vec qg = matvec(w("mtp.layers.0.self_attn.q_proj.weight"), 2 * nh * hd, x);
    const Vec kx = matvec(w("mtp.layers.0.self_attn.k_proj.weight"), nkv * hd, x);
    const Vec vx = matvec(w("mtp.layers.0.self_attn.v_proj.weight"), nkv * hd, x);
    Vec k(static_cast<size_t>(nkv * hd));
    for (int64_t g = 0; g < nkv; ++g) {
      const Vec kn =
          norm(kx, w("mtp.layers.0.self_attn.k_norm.weight"), size_t(g * hd), size_t(hd));
      std::copy(kn.begin(), kn.end(), k.begin() + g * hd);
      rope(k.data() + g * hd, pos);
    }
    std::vector<Vec>& keys = k_[seq];
    std::vector<Vec>& values = v_[seq];
    HYLA_CHECK(int64_t(keys.size()) == pos, "reference: rows out of order");
    keys.push_back(k);
    values.push_back(vx);
    Vec o(size_t(nh * hd), 0.0);
    for (int64_t h = 0; h < nh; ++h) {
      Vec q = norm(qg, w("mtp.layers.0.self_attn.q_norm.weight"), size_t(h * 2 * hd), size_t(hd));
      rope(q.data(), pos);
      const int64_t g = h / (nh / nkv);
      Vec s(static_cast<size_t>(pos + 1));
      for (int64_t j = 0; j <= pos; ++j) {
        double dot = 0;
        for (int64_t d = 0; d < hd; ++d) dot += q[size_t(d)] * keys[size_t(j)][size_t(g * hd + d)];
        s[size_t(j)] = dot / std::sqrt(double(hd));
      }
      const double m = *std::max_element(s.begin(), s.end());
      double sum = 0;
      for (double& v : s) sum += (v = std::exp(v - m));
      for (int64_t d = 0; d < hd; ++d) {
        double acc = 0;
        for (int64_t j = 0; j <= pos; ++j)
          acc += s[size_t(j)] / sum * values[size_t(j)][size_t(g * hd + d)];
        o[size_t(h * hd + d)] = acc * sigmoid(qg[size_t(h * 2 * hd + hd + d)]);
      }
    }
    return matvec(w("mtp.layers.0.self_attn.o_proj.weight"), c_.hidden_size, o);
  }
  /// down(silu(gate x) * up x) of the SwiGLU under `p`.
  Vec swiglu(const std::string& p, int64_t inter, const Vec& x) const {
    const Vec gate = matvec(w(p + "gate_proj.weight"), inter, x);
    const Vec up = matvec(w(p + "up_proj.weight"), inter, x);
    Vec act(static_cast<size_t>(inter));
    for (int64_t i = 0; i < inter; ++i) act[size_t(i)] = silu(gate[size_t(i)]) * up[size_t(i)];
    return matvec(w(p + "down_proj.weight"), c_.hidden_size, act);
  }
  /// Dense: the SwiGLU MLP. MoE (Qwen): softmax over the router, top-k (renormalised), each
  /// chosen expert's SwiGLU weighted, plus sigmoid(shared_gate x) * shared SwiGLU.
  Vec mlp(const Vec& x) {
    const std::string p = "mtp.layers.0.mlp.";
    if (c_.mtp_mlps[0] == MlpKind::kDense) return swiglu(p, c_.intermediate_size, x);
    const MoeConfig& m = c_.moe;
    Vec prob = matvec(w(p + "gate.weight"), m.num_experts, x);
    const double top = *std::max_element(prob.begin(), prob.end());
    double sum = 0;
    for (double& v : prob) sum += (v = std::exp(v - top));
    for (double& v : prob) v /= sum;
    std::vector<int64_t> order(size_t(m.num_experts));
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t l, int64_t r) { return prob[size_t(l)] > prob[size_t(r)]; });
    if (m.top_k < m.num_experts)
      min_gap_ = std::min(min_gap_, prob[size_t(order[size_t(m.top_k - 1)])] -
                                        prob[size_t(order[size_t(m.top_k)])]);
    double chosen = 0;
    for (int64_t k = 0; k < m.top_k; ++k) chosen += prob[size_t(order[size_t(k)])];
    Vec y(size_t(c_.hidden_size), 0.0);
    for (int64_t k = 0; k < m.top_k; ++k) {
      const int64_t e = order[size_t(k)];
      const double weight = m.renormalize ? prob[size_t(e)] / chosen : prob[size_t(e)];
      const Vec ye = swiglu(str_cat(p, "experts.", e, "."), m.expert_intermediate, x);
      for (size_t i = 0; i < y.size(); ++i) y[i] += weight * ye[i];
    }
    if (m.shared_intermediate > 0) {
      const double gate = sigmoid(matvec(w(p + "shared_expert_gate.weight"), 1, x)[0]);
      const Vec ys = swiglu(p + "shared_expert.", m.shared_intermediate, x);
      for (size_t i = 0; i < y.size(); ++i) y[i] += gate * ys[i];
    }
    return y;
  }

  const ModelConfig& c_;
  std::map<std::string, Vec> w_;
  std::map<int, std::vector<Vec>> k_, v_;  // per sequence, per position
  double min_gap_ = 1.0;
};

/// Row r of a host [rows, cols] f64 list.
Vec row_of(const std::vector<double>& all, int64_t cols, int64_t r) {
  return Vec(all.begin() + r * cols, all.begin() + (r + 1) * cols);
}

double max_abs(const std::vector<double>& v) {
  double m = 0;
  for (double x : v) m = std::max(m, std::abs(x));
  return m;
}

/// forward_mtp in f32 against the f64 reference: every op rounds to f32 (2^-24 relative), and the
/// longest sums are 2H = 256 products (fc; the others are H, head_dim, the expert widths or the
/// sequence); a sum of n products is off by at most n 2^-24 of the sum of their magnitudes, which
/// the normed activations keep at the output's scale. About 12 such stages in a row (2 pre-fc
/// norms, fc, input norm, q/k/v, softmax-weighted sum, o_proj, post norm, MLP up and down, final
/// norm, lm_head) add their bounds.
testing::Tolerance f32_chain_tolerance(double scale) {
  const double bound = 12.0 * 256.0 * std::ldexp(1.0, -24) * scale;
  return {.atol = bound, .rtol = 0, .why = "12 f32 stages of sums of at most 256 products"};
}

TEST(MtpTest, MatchesReference) {
  for (const std::string& arch : testing::mtp_arch_names()) {
    SCOPED_TRACE(arch);
    const std::string dir = testing::mtp_model_dir(arch);
    Result<std::unique_ptr<Model>> loaded = load_model(dir);
    ASSERT_OK(loaded.status());
    const Model& model = **loaded;
    const ModelConfig& c = model.config();
    const int64_t H = c.hidden_size, V = c.vocab_size;
    const MtpScene scene;

    // The target step with the export, its buffer poisoned in place: every row is written there,
    // the same numbers as the trace's final-normed hidden (logits of every row).
    PooledMemory pools(c, 2, MtpScene::kPages, MtpScene::kPageSize, Device::cpu());
    const Batch target = scene.target(true);
    const int64_t T = int64_t(target.tokens.size());
    Tensor final_hidden = testing::poisoned({T, H}, DType::kF32);
    const void* buffer = final_hidden.view().raw();
    pools.memory.final_hidden = &final_hidden;
    ForwardTrace trace;
    ASSERT_OK(model.forward_batch(target, pools.memory, &trace).status());
    EXPECT_EQ(final_hidden.view().raw(), buffer);
    EXPECT_CLOSE(final_hidden.view(), trace.hidden_states.back().view(),
                 {.atol = 0, .rtol = 0, .why = "the same norm of the same rows"});
    // With the last rows' logits only, the export still holds every row, and the trace's rows are
    // the last ones of it.
    {
      PooledMemory again(c, 2, MtpScene::kPages, MtpScene::kPageSize, Device::cpu());
      Tensor all;
      again.memory.final_hidden = &all;
      ForwardTrace last_trace;
      ASSERT_OK(model.forward_batch(scene.target(false), again.memory, &last_trace).status());
      EXPECT_CLOSE(all.view(), final_hidden.view(),
                   {.atol = 0, .rtol = 0, .why = "the same step, only the logits rows differ"});
      EXPECT_CLOSE(
          last_trace.hidden_states.back().view(),
          testing::gather_host_rows(final_hidden, {{scene.length(0) - 1, 1}, {T - 1, 1}}).view(),
          {.atol = 0, .rtol = 0, .why = "rows of the same norm"});
    }

    // MTP prefill (positions 0..n-3), a single row (n-2) reading those KV rows back, then the
    // deeper draft (n-1) from the single row's output; the reference runs the same rows.
    MtpReference ref(dir, c);
    auto check = [&](const Batch& batch, const Tensor& hidden, const MtpOutput& got) {
      const std::vector<double> h = testing::to_f64(hidden.view());
      std::vector<double> want_hidden, want_logits;
      for (int64_t b = 0; b < batch.num_sequences(); ++b) {
        for (int32_t t = batch.cu_seqlens[size_t(b)]; t < batch.cu_seqlens[size_t(b + 1)]; ++t) {
          Vec out, logits;
          ref.row(int(b), batch.past[size_t(b)] + (t - batch.cu_seqlens[size_t(b)]),
                  batch.tokens[size_t(t)], row_of(h, H, t), out, logits);
          want_hidden.insert(want_hidden.end(), out.begin(), out.end());
          if (batch.logits_all || t + 1 == batch.cu_seqlens[size_t(b + 1)])
            want_logits.insert(want_logits.end(), logits.begin(), logits.end());
        }
      }
      ASSERT_EQ(got.hidden.size(0), int64_t(batch.tokens.size()));
      ASSERT_EQ(got.logits.size(0),
                batch.logits_all ? int64_t(batch.tokens.size()) : batch.num_sequences());
      ASSERT_EQ(got.logits.size(1), V);
      EXPECT_CLOSE(got.hidden.view(), want_hidden, f32_chain_tolerance(max_abs(want_hidden)));
      EXPECT_CLOSE(got.logits.view(), want_logits, f32_chain_tolerance(max_abs(want_logits)));
    };
    const Batch prefill = scene.mtp_prefill();
    const Tensor prefill_hidden = scene.prefill_hidden(final_hidden);
    Result<MtpOutput> first = model.forward_mtp(prefill, prefill_hidden, pools.memory);
    ASSERT_OK(first.status());
    check(prefill, prefill_hidden, *first);

    const Batch row = scene.mtp_row();
    const Tensor row_hidden = scene.row_hidden(final_hidden);
    Result<MtpOutput> second = model.forward_mtp(row, row_hidden, pools.memory);
    ASSERT_OK(second.status());
    check(row, row_hidden, *second);

    const Batch deeper = scene.mtp_deeper();
    Result<MtpOutput> third = model.forward_mtp(deeper, second->hidden, pools.memory, 1);
    ASSERT_OK(third.status());
    check(deeper, second->hidden, *third);

    if (c.mtp_mlps[0] == MlpKind::kMoe) {
      EXPECT_GT(ref.min_router_gap(), 1e-4)
          << "the reference's routing is within f32 error of a tie: pick other tokens";
    }
  }
}

}  // namespace
}  // namespace hyla::model

// GDN and KDA gates against float64 references: f32 / bf16 inputs, odd sizes, strided views (a and
// b as halves of one fused projection); the decay stays <= 0 and the safe gate stays above its
// lower bound for huge inputs; softplus's pass-through above 20; argument errors.
#include "kernels/gates.h"

#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "strided_views.h"
#include "testing.h"

namespace hyla::kernels {
namespace {

using testing::Tolerance;

// ---- float64 references ----

double softplus_reference(double x) { return x > 20.0 ? x : std::log1p(std::exp(x)); }
double sigmoid_reference(double x) { return 1.0 / (1.0 + std::exp(-x)); }

constexpr Tolerance kDecayTolerance = {
    .atol = 1e-6,
    .rtol = 1e-5,
    .why =
        "fp32 a + dt_bias rounds by |x| 2^-24, which exp inside softplus / sigmoid turns into "
        "<= 30 * 6e-8 = 2e-6 relative; expf / log1pf add a few ulp; atol covers values that "
        "underflow in fp32"};
constexpr Tolerance kBetaTolerance = {
    .atol = 1e-7, .rtol = 1e-6, .why = "fp32 sigmoid: expf and one division, a few ulp"};

/// The row-major values of a host view, as a [rows, cols] table read with (row, col).
struct Table {
  std::vector<double> values;
  int64_t cols;
  double operator()(int64_t row, int64_t col) const { return values[size_t(row * cols + col)]; }
};
Table table(const TensorView& t) { return {testing::to_f64(t), t.size(-1)}; }

// ---- GDN ----

struct GdnCase {
  int64_t T, HV;
  DType a_dtype, b_dtype;
  bool fused_ba;  // a and b are the two halves of one [T, 2 HV] projection (strided views); then
                  // a_dtype == b_dtype

  std::string name() const {
    return str_cat("T", T, "_HV", HV, "_a", dtype_name(a_dtype), "_b", dtype_name(b_dtype),
                   fused_ba ? "_fused_ba" : "");
  }
};

const GdnCase kGdnCases[] = {
    {1, 1, DType::kF32, DType::kF32, false},    {7, 4, DType::kBF16, DType::kF32, false},
    {33, 6, DType::kF32, DType::kF32, true},    {64, 32, DType::kBF16, DType::kBF16, true},
    {129, 3, DType::kF32, DType::kBF16, false},
};

TEST(GdnGateTest, MatchesFloat64Reference) {
  int seed = 0;
  for (const GdnCase& c : kGdnCases) {
    SCOPED_TRACE(c.name());
    std::mt19937 rng(++seed);
    // a + dt_bias spans both sides of softplus's threshold at 20
    Tensor a_storage, b_storage;  // one fused storage when fused_ba
    TensorView a, b;
    if (c.fused_ba) {
      // [T, 2 HV] rows [b | a], as HF's in_proj_ba splits them; both halves in one dtype
      a_storage = testing::random_uniform({c.T, 2 * c.HV}, c.a_dtype, rng, -25.0f, 25.0f);
      const int64_t shape[] = {c.T, c.HV}, stride[] = {2 * c.HV, 1};
      const int64_t elem = dtype_size(c.a_dtype);
      b = TensorView(a_storage.view().raw(), c.a_dtype, 2, shape, stride);
      a = TensorView(static_cast<char*>(a_storage.view().raw()) + c.HV * elem, c.a_dtype, 2, shape,
                     stride);
    } else {
      a_storage = testing::random_uniform({c.T, c.HV}, c.a_dtype, rng, -25.0f, 25.0f);
      b_storage = testing::random_normal({c.T, c.HV}, c.b_dtype, rng, 0.0f, 4.0f);
      a = a_storage;
      b = b_storage;
    }
    Tensor A_log =
        testing::random_uniform({c.HV}, DType::kF32, rng, -4.6f, 2.8f);  // A in [0.01, 16]
    Tensor dt_bias = testing::random_uniform({c.HV}, DType::kF32, rng, -5.0f, 1.0f);
    Tensor g = testing::poisoned({c.T, c.HV}, DType::kF32);
    Tensor beta = testing::poisoned({c.T, c.HV}, DType::kF32);
    ASSERT_OK(gdn_gate({.a = a, .b = b, .A_log = A_log, .dt_bias = dt_bias, .g = g, .beta = beta}));

    const Table a_in = table(a), b_in = table(b);
    const std::vector<double> A_log_in = testing::to_f64(A_log), dt_in = testing::to_f64(dt_bias);
    std::vector<double> want_g, want_beta;
    for (int64_t t = 0; t < c.T; ++t) {
      for (int64_t h = 0; h < c.HV; ++h) {
        // g = -exp(A_log) * softplus(a + dt_bias),  beta = sigmoid(b)
        want_g.push_back(-std::exp(A_log_in[size_t(h)]) *
                         softplus_reference(a_in(t, h) + dt_in[size_t(h)]));
        want_beta.push_back(sigmoid_reference(b_in(t, h)));
      }
    }
    EXPECT_CLOSE(g, want_g, kDecayTolerance);
    EXPECT_CLOSE(beta, want_beta, kBetaTolerance);
  }
}

TEST(GdnGateTest, DecayIsNonPositiveForHugeInputs) {
  const std::vector<double> inputs = {-3e38, -1e30, -1e4, -100, -20.5, -1,   0,
                                      1,     19.5,  20.5, 100,  1e4,   1e30, 3e38};
  const int64_t T = int64_t(inputs.size()), HV = 3;
  std::vector<double> grid;
  for (double v : inputs) grid.insert(grid.end(), {v, v, v});
  Tensor a = testing::tensor_from(grid, {T, HV}, DType::kF32);
  Tensor b = testing::tensor_from(grid, {T, HV}, DType::kBF16);
  Tensor A_log = testing::tensor_from({-4.6, 0.0, 2.77}, {HV}, DType::kF32);
  Tensor dt_bias = testing::tensor_from({-5.0, 0.0, 1.0}, {HV}, DType::kF32);
  Tensor g = testing::poisoned({T, HV}, DType::kF32);
  Tensor beta = testing::poisoned({T, HV}, DType::kF32);
  ASSERT_OK(gdn_gate({.a = a, .b = b, .A_log = A_log, .dt_bias = dt_bias, .g = g, .beta = beta}));
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t h = 0; h < HV; ++h) {
      SCOPED_TRACE(str_cat("a = b = ", inputs[size_t(t)], ", h = ", h));
      const float g_value = g.data<float>()[t * HV + h];
      const float beta_value = beta.data<float>()[t * HV + h];
      EXPECT_LE(g_value, 0.0f);  // NaN fails this too
      if (std::fabs(inputs[size_t(t)]) <= 1e30) {
        EXPECT_TRUE(std::isfinite(g_value));
      }
      EXPECT_GE(beta_value, 0.0f);
      EXPECT_LE(beta_value, 1.0f);
      // above the threshold softplus passes its input through: g = -exp(A_log) * (a + dt_bias)
      const float x = a.data<float>()[t * HV + h] + dt_bias.data<float>()[h];
      if (x > 20.0f && std::isfinite(x)) {
        EXPECT_FLOAT_EQ(g_value, -std::exp(A_log.data<float>()[h]) * x);
      }
    }
  }
}

// ---- KDA ----

struct KdaCase {
  int64_t T, H, d_k;
  DType f_dtype;
  std::optional<float> lower_bound;
  bool with_beta;
  DType b_dtype;
  int64_t f_pad;  // extra elements per f row: the kernel must honour f's strides

  std::string name() const {
    return str_cat("T", T, "_H", H, "_dk", d_k, "_f", dtype_name(f_dtype),
                   lower_bound ? str_cat("_safe", *lower_bound) : std::string("_softplus"),
                   with_beta ? str_cat("_b", dtype_name(b_dtype)) : std::string(),
                   f_pad ? str_cat("_pad", f_pad) : std::string());
  }
};

const KdaCase kKdaCases[] = {
    {1, 1, 16, DType::kF32, std::nullopt, false, DType::kF32, 0},
    {5, 3, 37, DType::kBF16, std::nullopt, true, DType::kBF16, 3},
    {64, 4, 32, DType::kF32, -5.0f, true, DType::kF32, 0},
    {17, 2, 128, DType::kBF16, -5.0f, true, DType::kF32, 1},
    {9, 6, 24, DType::kF32, -0.5f, false, DType::kF32, 2},
};

TEST(KdaGateTest, MatchesFloat64Reference) {
  int seed = 50;
  for (const KdaCase& c : kKdaCases) {
    SCOPED_TRACE(c.name());
    std::mt19937 rng(++seed);
    const std::vector<int64_t> f_shape = {c.T, c.H, c.d_k};
    Tensor f_storage = testing::random_normal({testing::padded_numel(f_shape, c.f_pad, 0)},
                                              c.f_dtype, rng, 0.0f, 8.0f);
    const TensorView f = testing::padded_view(f_storage, f_shape, c.f_pad, 0);
    Tensor A_log = testing::random_uniform({c.H}, DType::kF32, rng, -4.6f, 2.8f);
    Tensor dt_bias = testing::random_uniform({c.H, c.d_k}, DType::kF32, rng, -5.0f, 1.0f);
    Tensor g = testing::poisoned({c.T, c.H, c.d_k}, DType::kF32);
    Tensor b, beta;
    if (c.with_beta) {
      b = testing::random_normal({c.T, c.H}, c.b_dtype, rng, 0.0f, 4.0f);
      beta = testing::poisoned({c.T, c.H}, DType::kF32);
    }
    ASSERT_OK(kda_gate({.f = f,
                        .A_log = A_log,
                        .dt_bias = dt_bias,
                        .lower_bound = c.lower_bound,
                        .g = g,
                        .b = b,
                        .beta = beta}));

    const std::vector<double> f_in = testing::to_f64(f), A_log_in = testing::to_f64(A_log);
    const Table dt_in = table(dt_bias);
    std::vector<double> want_g;
    for (int64_t t = 0; t < c.T; ++t) {
      for (int64_t h = 0; h < c.H; ++h) {
        const double decay_rate = std::exp(A_log_in[size_t(h)]);
        for (int64_t i_k = 0; i_k < c.d_k; ++i_k) {
          const double x = f_in[size_t((t * c.H + h) * c.d_k + i_k)] + dt_in(h, i_k);
          // safe: lower_bound * sigmoid(exp(A_log) * x);  plain: -exp(A_log) * softplus(x)
          want_g.push_back(c.lower_bound ? *c.lower_bound * sigmoid_reference(decay_rate * x)
                                         : -decay_rate * softplus_reference(x));
        }
      }
    }
    EXPECT_CLOSE(g, want_g, kDecayTolerance);
    if (c.with_beta) {
      std::vector<double> want_beta = testing::to_f64(b);
      for (double& v : want_beta) v = sigmoid_reference(v);
      EXPECT_CLOSE(beta, want_beta, kBetaTolerance);
    }
  }
}

TEST(KdaGateTest, SafeGateNeverGoesBelowLowerBound) {
  // exp(A_log) * (f + dt_bias) from -1.6e31 to +1.6e31: sigmoid saturates at both ends, and
  // g = lower_bound * sigmoid(.) must stay in [lower_bound, 0], so exp(g) >= exp(lower_bound)
  const std::vector<double> inputs = {-3e38, -1e30, -1e4, -100, -1, 0, 1, 100, 1e4, 1e30, 3e38};
  const int64_t T = int64_t(inputs.size()), H = 2, d_k = 3;
  std::vector<double> grid;
  for (double v : inputs) grid.insert(grid.end(), size_t(H * d_k), v);
  Tensor f = testing::tensor_from(grid, {T, H, d_k}, DType::kBF16);
  Tensor A_log = testing::tensor_from({-4.6, 2.77}, {H}, DType::kF32);
  Tensor dt_bias = testing::tensor_from({-5, 0, 1, -1, 0.5, 0}, {H, d_k}, DType::kF32);
  for (float lower_bound : {-5.0f, -1.0f, 0.0f}) {
    SCOPED_TRACE(str_cat("lower_bound ", lower_bound));
    Tensor g = testing::poisoned({T, H, d_k}, DType::kF32);
    ASSERT_OK(kda_gate({.f = f,
                        .A_log = A_log,
                        .dt_bias = dt_bias,
                        .lower_bound = lower_bound,
                        .g = g,
                        .b = {},
                        .beta = {}}));
    for (int64_t i = 0; i < g.numel(); ++i) {
      SCOPED_TRACE(str_cat("f = ", inputs[size_t(i / (H * d_k))], " at ", testing::coords(g, i)));
      const float g_value = g.data<float>()[i];
      EXPECT_GE(g_value, lower_bound);  // NaN fails this too
      EXPECT_LE(g_value, 0.0f);
      EXPECT_GE(std::exp(g_value), std::exp(lower_bound));
    }
  }
}

TEST(KdaGateTest, PlainGateIsNonPositiveForHugeInputs) {
  const std::vector<double> inputs = {-3e38, -1e30, -1e4, -20.5, 0, 19.5, 20.5, 1e4, 1e30};
  const int64_t T = int64_t(inputs.size()), H = 2, d_k = 2;
  std::vector<double> grid;
  for (double v : inputs) grid.insert(grid.end(), size_t(H * d_k), v);
  Tensor f = testing::tensor_from(grid, {T, H, d_k}, DType::kF32);
  Tensor A_log = testing::tensor_from({-4.6, 2.77}, {H}, DType::kF32);
  Tensor dt_bias = testing::tensor_from({-5, 1, 0, 0.5}, {H, d_k}, DType::kF32);
  Tensor g = testing::poisoned({T, H, d_k}, DType::kF32);
  ASSERT_OK(kda_gate({.f = f,
                      .A_log = A_log,
                      .dt_bias = dt_bias,
                      .lower_bound = std::nullopt,
                      .g = g,
                      .b = {},
                      .beta = {}}));
  for (int64_t i = 0; i < g.numel(); ++i) {
    SCOPED_TRACE(str_cat("f = ", inputs[size_t(i / (H * d_k))], " at ", testing::coords(g, i)));
    EXPECT_LE(g.data<float>()[i], 0.0f);  // NaN fails this too
    EXPECT_TRUE(std::isfinite(g.data<float>()[i]));
  }
}

// ---- argument errors ----

template <typename Params>
struct ErrorCase {
  const char* name;
  std::function<void(Params&)> change;  // breaks one argument of a valid call
  const char* error;
};

TEST(GdnGateTest, RejectsBadArguments) {
  std::mt19937 rng(3);
  const int64_t T = 5, HV = 4;
  Tensor a = testing::random_normal({T, HV}, DType::kBF16, rng);
  Tensor b = testing::random_normal({T, HV}, DType::kBF16, rng);
  Tensor b_short = testing::random_normal({T - 1, HV}, DType::kBF16, rng);
  Tensor A_log = testing::random_uniform({HV}, DType::kF32, rng);
  Tensor A_log_bf16 = testing::random_uniform({HV}, DType::kBF16, rng);
  Tensor dt_bias = testing::random_uniform({HV}, DType::kF32, rng);
  Tensor g = testing::poisoned({T, HV}, DType::kF32);
  Tensor g_bf16 = testing::poisoned({T, HV}, DType::kBF16);
  Tensor beta = testing::poisoned({T, HV}, DType::kF32);
  const TensorView beta_on_cuda(beta.view().raw(), DType::kF32, {T, HV}, Device::cuda(0));
  const GdnGateParams good = {
      .a = a, .b = b, .A_log = A_log, .dt_bias = dt_bias, .g = g, .beta = beta};

  const ErrorCase<GdnGateParams> cases[] = {
      {"b_shape", [&](GdnGateParams& p) { p.b = b_short; },
       "gdn_gate: b has shape [4, 4], expected [5, 4] (T, HV)"},
      {"A_log_dtype", [&](GdnGateParams& p) { p.A_log = A_log_bf16; },
       "gdn_gate: A_log has dtype bf16, expected f32"},
      {"g_dtype", [&](GdnGateParams& p) { p.g = g_bf16; },
       "gdn_gate: g has dtype bf16, expected f32"},
      {"beta_device", [&](GdnGateParams& p) { p.beta = beta_on_cuda; },
       "gdn_gate: beta is on cuda:0, expected cpu"},
      {"missing_beta", [&](GdnGateParams& p) { p.beta = {}; }, "gdn_gate: beta is missing"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    GdnGateParams p = good;
    c.change(p);
    EXPECT_ERROR_CONTAINS(gdn_gate(p), c.error);
  }
  EXPECT_OK(gdn_gate(good));
}

TEST(KdaGateTest, RejectsBadArguments) {
  std::mt19937 rng(4);
  const int64_t T = 5, H = 2, d_k = 8;
  Tensor f = testing::random_normal({T, H, d_k}, DType::kF32, rng);
  Tensor f_2d = testing::random_normal({T, H * d_k}, DType::kF32, rng);
  Tensor A_log = testing::random_uniform({H}, DType::kF32, rng);
  Tensor dt_bias = testing::random_uniform({H, d_k}, DType::kF32, rng);
  Tensor flat_dt_bias = testing::random_uniform({H * d_k}, DType::kF32, rng);
  Tensor g = testing::poisoned({T, H, d_k}, DType::kF32);
  Tensor b = testing::random_normal({T, H}, DType::kF32, rng);
  Tensor beta = testing::poisoned({T, H}, DType::kF32);
  Tensor beta_wide = testing::poisoned({T, H + 2}, DType::kF32);
  const KdaGateParams good = {.f = f,
                              .A_log = A_log,
                              .dt_bias = dt_bias,
                              .lower_bound = -5.0f,
                              .g = g,
                              .b = b,
                              .beta = beta};

  const ErrorCase<KdaGateParams> cases[] = {
      {"flat_dt_bias", [&](KdaGateParams& p) { p.dt_bias = flat_dt_bias; },
       "kda_gate: dt_bias has shape [16], expected [2, 8] (H, d_k)"},
      {"f_rank", [&](KdaGateParams& p) { p.f = f_2d; },
       "kda_gate: f has shape [5, 16], expected [*, *, *] (T, H, d_k)"},
      {"lower_bound_positive", [&](KdaGateParams& p) { p.lower_bound = 5.0f; },
       "kda_gate: lower_bound is 5, expected a finite value <= 0"},
      {"lower_bound_nan",
       [&](KdaGateParams& p) { p.lower_bound = std::numeric_limits<float>::quiet_NaN(); },
       "kda_gate: lower_bound is nan"},
      {"b_without_beta", [&](KdaGateParams& p) { p.beta = {}; },
       "kda_gate: b is given but beta is missing"},
      {"beta_without_b", [&](KdaGateParams& p) { p.b = {}; },
       "kda_gate: b is missing but beta is given"},
      {"beta_shape", [&](KdaGateParams& p) { p.beta = beta_wide; },
       "kda_gate: beta has shape [5, 4], expected [5, 2] (T, H)"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    KdaGateParams p = good;
    c.change(p);
    EXPECT_ERROR_CONTAINS(kda_gate(p), c.error);
  }
  EXPECT_OK(kda_gate(good));
}

}  // namespace
}  // namespace hyla::kernels

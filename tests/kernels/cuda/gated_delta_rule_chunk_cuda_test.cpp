// CUDA body of gated_delta_rule_chunk (kernels/gated_delta_rule.h) against the CPU body, which is
// the specification. Fresh random inputs every run (the seed is in each failure's trace;
// HYLA_TEST_SEED=<n> replays one). Cases: packed varlen batches with lengths {1, 63, 64, 65, 200}
// (and an empty sequence), GDN, KDA and KDA with safe-gate-range decay (down to -5 a token), GVA,
// d_k / d_v in {32, 64, 128} (also d_k != d_v), f32 / bf16 activations and state pools, slot -1,
// sequences without initial state, without any pool, chunk_states, row-strided misaligned views.
// Every element of o, chunk_states and the pool is compared; o, chunk_states and the workspace are
// poisoned beforehand, and pool slots no sequence commits to must keep their bytes. Also: the
// extend threshold on CUDA and the workspace checks. Skipped when no CUDA device is visible.
#include <cmath>
#include <cstdint>
#include <iterator>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "cuda_testing.h"
#include "kernels/gated_delta_rule.h"

namespace hyla::kernels {
namespace {

using testing::all_close;
using testing::bitwise_equal;
using testing::on_gpu;
using testing::on_host;
using testing::poisoned;
using testing::poisoned_gpu;
using testing::still_poisoned;
using testing::Tolerance;
using testing::TwinView;

constexpr DType kF32 = DType::kF32, kBF16 = DType::kBF16;

// ---- Tolerances ----
// Keys are unit (l2norm), |v| <= 1, beta in [0, 1], decay <= 1 and the initial states are O(1):
// the state map is non-expansive, so rounding does not grow along the sequence. The CPU chunk body
// stays within 1e-5 of the float64 reference on such inputs (tests/kernels/gated_delta_rule_test
// kF32Output / kF32State: worst case d_k * 2^-24 = 8e-6 per d_k = 128 dot product, measured
// <= 2e-6 with gates down to -5). The CUDA body is the same fp32 algorithm in another summation
// order (dot products split over lanes, the solve and the gemms in other orders, KDA's decay
// factors formed pair by pair instead of through the CPU's 16-token reference points, expf vs the
// CPU's exp_approx, both within 2 ulp), so it is as close to the reference: the two differ by at
// most twice that bound.
constexpr Tolerance kF32Values{
    .atol = 2e-5,
    .rtol = 2e-5,
    .why =
        "two fp32 chunk algorithms in different summation orders, each within 1e-5 of the fp64 "
        "reference (non-expansive state map: errors do not compound over the chunks)"};
/// A bf16 output or pool entry is rounded once on each side; fp32 values within kF32Values of
/// each other can round to neighbouring bf16 values, one bf16 ulp (<= 2^-7 relative) apart.
constexpr Tolerance kBf16Values{
    .atol = 2e-5,
    .rtol = 1.0 / 128,
    .why =
        "one bf16 rounding per stored element on each side: <= one bf16 ulp (2^-7 relative) "
        "apart, plus kF32Values near zero"};

Tolerance values_tolerance(DType dtype) { return dtype == kBF16 ? kBf16Values : kF32Values; }

/// The tensor-core body (chunk_uses_tensor_cores) feeds bf16 operands (unit roundoff u = 2^-9) to
/// fp32-accumulating products: q, k, v, the state's bf16 copy, T, the correction P and Delta, as
/// fla's chunk kernels do. Its error is noise of a few u on the products' terms, which are larger
/// than the results they cancel to. Two checks, from fla's recorded spread (bench_fla.py's CHECK
/// against float64 on the H200, 2026-12-02: o 3.4e-3 to 3.9e-3, final states 3.0e-3, relative
/// Frobenius):
/// - the whole tensor within 2^-7 = 7.8e-3 relative (twice fla's spread): a systematic error (a
///   missed decay, a wrong scale) moves it by O(1);
/// - every element within 2^-3 of the tensor's RMS, plus one bf16 ulp (2^-7 relative) where the
///   stored value is bf16: the noise's tail over millions of elements stays under 5% of the RMS,
///   while a wrong row or column is off by O(RMS).
constexpr double kTensorCoreRelative = 1.0 / 128;
Tolerance tensor_core_tolerance(const TensorView& want, DType dtype) {
  const std::vector<double> values = testing::to_f64(want);  // a host view
  double sum = 0;
  for (double x : values) sum += x * x;
  const double rms = values.empty() ? 0.0 : std::sqrt(sum / double(values.size()));
  return {.atol = rms / 8,
          .rtol = dtype == kBF16 ? 1.0 / 128 : 0.0,
          .why =
              "bf16 tensor-core operands: noise of a few 2^-9 on the terms (< RMS / 8), plus "
              "one bf16 ulp of a stored bf16 value"};
}
/// ||got - want|| / ||want|| over every element.
double relative_error(const TensorView& got, const TensorView& want) {
  const std::vector<double> g = testing::to_f64(got), w = testing::to_f64(want);
  double diff = 0, norm = 0;
  for (size_t i = 0; i < g.size() && i < w.size(); ++i) {
    diff += (g[i] - w[i]) * (g[i] - w[i]);
    norm += w[i] * w[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

// ---- Cases ----

/// kKdaStrong: decay strong enough (up to e^-6 a token) that some 16-token blocks pass the
/// tensor-core body's reference-point bound (kMaxFactorExponent) and take its pair-by-pair path.
enum class Gate { kGdn, kKda, kKdaSafe, kKdaStrong };

const char* gate_name(Gate g) {
  switch (g) {
    case Gate::kGdn: return "gdn";
    case Gate::kKda: return "kda";
    case Gate::kKdaSafe: return "kda_safe";
    case Gate::kKdaStrong: return "kda_strong";
  }
  return "?";
}

/// Slots for B sequences (2B + 2 of them, the last two owned by no sequence): sequence b starts
/// from slot 2b, or from zeros when b % 3 == 1 (slot -1) or without initial_slots; it commits to
/// slot 2b + 1, in place to 2b when b % 4 == 3, nowhere when b % 4 == 2 (slot -1).
struct ChunkCase {
  std::vector<int32_t> seqlens = {1, 63, 64, 65, 200};
  int64_t H = 2, HV = 4, d_k = 32, d_v = 32;
  Gate gate = Gate::kGdn;
  DType act = kF32;   // q, k, v, o
  DType pool = kF32;  // state pool
  bool chunk_states = true;
  bool strided = false;  // q, k, v, o: rows 5 elements longer, starting 3 elements in
  bool initial = true;   // initial_slots given
  bool commit = true;    // final_slots given
  bool l2norm = true;
  float scale = 0.0f;
  ChunkStateKernel state = ChunkStateKernel::kAuto;  // the tensor-core body's state kernel
  int cp = 0;  // context-parallel segments (0: the body's choice)

  std::string name() const {
    std::string lens;
    for (int32_t n : seqlens) lens += str_cat(lens.empty() ? "" : "+", n);
    return str_cat("T", lens, "_H", H, "_HV", HV, "_dk", d_k, "_dv", d_v, "_", gate_name(gate), "_",
                   dtype_name(act), "_pool", dtype_name(pool), chunk_states ? "_chunkstates" : "",
                   strided ? "_strided" : "", initial ? "" : "_noinitial",
                   commit ? "" : "_nocommit", l2norm ? "" : "_nol2norm",
                   state == ChunkStateKernel::kRoles  ? "_roles"
                   : state == ChunkStateKernel::kWide ? "_wide"
                                                      : "",
                   cp > 0 ? str_cat("_cp", cp) : "");
  }
  int64_t T() const {
    int64_t t = 0;
    for (int32_t n : seqlens) t += n;
    return t;
  }
  int64_t B() const { return int64_t(seqlens.size()); }
  int64_t num_slots() const { return 2 * B() + 2; }
  bool uses_pool() const { return initial || commit; }
};

constexpr int64_t kPad = 5, kOffset = 3;

/// An activation as twins: contiguous, or (strided) inside a poisoned storage whose rows are kPad
/// elements longer, starting kOffset elements in.
TwinView activation_twin(const Tensor& values, bool strided) {
  return strided ? testing::twin_of(values, kPad, kOffset) : testing::twin_of(values);
}

/// Random host inputs of one case and the parameters over them (CPU side).
struct HostProblem {
  Tensor cu, initial_slots, final_slots, g, beta, pool_before, pool, chunk_states;
  TwinView q, k, v, o;  ///< the device views serve DeviceProblem
  GatedDeltaRuleParams params;
};

HostProblem make_host_problem(const ChunkCase& c, std::mt19937& rng) {
  const int64_t T = c.T(), B = c.B(), H = c.H, HV = c.HV, d_k = c.d_k, d_v = c.d_v;
  HostProblem h;
  std::vector<int32_t> cu = {0}, initial, final;
  for (int32_t n : c.seqlens) cu.push_back(cu.back() + n);
  for (int64_t b = 0; b < B; ++b) {
    initial.push_back(b % 3 == 1 ? -1 : int32_t(2 * b));
    final.push_back(b % 4 == 2 ? -1 : b % 4 == 3 ? int32_t(2 * b) : int32_t(2 * b + 1));
  }
  h.cu = testing::int32_tensor(cu);
  h.initial_slots = testing::int32_tensor(initial);
  h.final_slots = testing::int32_tensor(final);

  // Without the in-kernel l2norm the caller keeps |k| ~ 1, so beta |k|^2 < 2 stays stable.
  const float qk_std = c.l2norm ? 1.0f : 1.0f / std::sqrt(float(d_k));
  h.q = activation_twin(testing::random_normal({T, H, d_k}, c.act, rng, 0.0f, qk_std), c.strided);
  h.k = activation_twin(testing::random_normal({T, H, d_k}, c.act, rng, 0.0f, qk_std), c.strided);
  h.v = activation_twin(testing::random_uniform({T, HV, d_v}, c.act, rng), c.strided);
  h.o = activation_twin(poisoned({T, HV, d_v}, c.act), c.strided);
  // K3's safe gate: [-5, 0]; strong: a 16-token block's span ~ 45 +- 7 per channel, its largest
  // of 128 channels around the bound of 60.
  const float g_lo = c.gate == Gate::kKdaSafe ? -5.0f : c.gate == Gate::kKdaStrong ? -6.0f : -1.0f;
  h.g = c.gate == Gate::kGdn ? testing::random_uniform({T, HV}, kF32, rng, g_lo, 0.0f)
                             : testing::random_uniform({T, HV, d_k}, kF32, rng, g_lo, 0.0f);
  h.beta = testing::random_uniform({T, HV}, kF32, rng, 0.0f, 1.0f);
  h.pool_before = testing::random_uniform({c.num_slots(), HV, d_v, d_k}, c.pool, rng);
  h.pool = h.pool_before.clone();

  GatedDeltaRuleParams& p = h.params;
  p.q = h.q.host;
  p.k = h.k.host;
  p.v = h.v.host;
  p.g = h.g;
  p.beta = h.beta;
  p.cu_seqlens = h.cu;
  p.o = h.o.host;
  p.use_qk_l2norm = c.l2norm;
  p.scale = c.scale;
  p.state_kernel = c.state;
  p.cp_segments = c.cp;
  if (c.uses_pool()) p.state_pool = h.pool;
  if (c.initial) p.initial_slots = h.initial_slots;
  if (c.commit) p.final_slots = h.final_slots;
  if (c.chunk_states) {
    h.chunk_states = poisoned({gated_delta_rule_num_chunk_states(h.cu), HV, d_v, d_k}, DType::kF32);
    p.chunk_states = h.chunk_states;
  }
  return h;
}

/// Device copies of a host problem's inputs (before the CPU run; q, k, v and o are the device
/// halves of its twins), outputs and workspace poisoned.
struct DeviceProblem {
  Tensor cu, initial_slots, final_slots, g, beta, pool, chunk_states, workspace;
  GatedDeltaRuleParams params;
};

DeviceProblem make_device_problem(const ChunkCase& c, const HostProblem& h) {
  DeviceProblem d;
  d.cu = on_gpu(h.cu);
  d.initial_slots = on_gpu(h.initial_slots);
  d.final_slots = on_gpu(h.final_slots);
  d.g = on_gpu(h.g);
  d.beta = on_gpu(h.beta);
  d.pool = on_gpu(h.pool_before);
  GatedDeltaRuleParams& p = d.params;
  p = h.params;
  p.q = h.q.device;
  p.k = h.k.device;
  p.v = h.v.device;
  p.o = h.o.device;  // poisoned storage, as on the host
  p.g = d.g;
  p.beta = d.beta;
  p.cu_seqlens = d.cu;
  p.state_pool = c.uses_pool() ? d.pool.view() : TensorView();
  p.initial_slots = c.initial ? d.initial_slots.view() : TensorView();
  p.final_slots = c.commit ? d.final_slots.view() : TensorView();
  if (c.chunk_states) {
    const TensorView& cs = h.chunk_states;
    d.chunk_states = poisoned_gpu({cs.size(0), cs.size(1), cs.size(2), cs.size(3)}, kF32);
    p.chunk_states = d.chunk_states;
  }
  const int64_t bytes = gated_delta_rule_chunk_workspace_bytes(p);
  d.workspace = poisoned_gpu({(bytes + 3) / 4}, kF32);  // the body may not rely on its contents
  p.workspace = d.workspace;
  return d;
}

/// Runs the CPU and the CUDA body on one random case and compares every output element.
/// tensor_cores: whether the case must take the tensor-core body (unchecked when absent).
void expect_cuda_matches_cpu(const ChunkCase& c, uint32_t seed,
                             std::optional<bool> tensor_cores_expected = std::nullopt) {
  SCOPED_TRACE(str_cat(c.name(), " seed ", seed));
  std::mt19937 rng(seed);
  HostProblem h = make_host_problem(c, rng);
  DeviceProblem d = make_device_problem(c, h);
  ASSERT_EQ(gated_delta_rule_chunk_workspace_bytes(h.params), 0) << "the CPU body needs none";
  ASSERT_OK(gated_delta_rule_chunk(h.params));
  ASSERT_OK(gated_delta_rule_chunk(d.params));
  const bool tensor_cores = chunk_uses_tensor_cores(d.params);
  if (tensor_cores_expected) {
    EXPECT_EQ(tensor_cores, *tensor_cores_expected);
  }
  const auto tolerance = [&](const TensorView& want, DType dtype) {
    return tensor_cores ? tensor_core_tolerance(want, dtype) : values_tolerance(dtype);
  };
  const auto expect_relative = [&](const TensorView& got, const TensorView& want,
                                   const char* what) {
    if (!tensor_cores) return;
    const double e = relative_error(got, want);
    std::printf("[ tc spread ] %s %s: relative error %.3g, max |diff| %.3g\n", c.name().c_str(),
                what, e, testing::max_abs_diff(got, want));
    EXPECT_LE(e, kTensorCoreRelative) << what;
  };

  // o: every element close; a strided o's storage outside the view keeps its poison.
  const testing::HostResult o_back = testing::device_result(h.o);
  const TensorView got_o = o_back.view;
  EXPECT_TRUE(all_close(got_o, h.o.host, tolerance(h.o.host, c.act))) << "o";
  expect_relative(got_o, h.o.host, "o");
  if (c.strided) {
    EXPECT_TRUE(testing::untouched_outside(o_back.storage, got_o)) << "wrote outside o";
  }
  if (c.chunk_states) {
    const Tensor got = on_host(d.chunk_states);
    EXPECT_TRUE(all_close(got, h.chunk_states, tolerance(h.chunk_states, kF32))) << "chunk_states";
    expect_relative(got, h.chunk_states, "chunk_states");
  }

  // Pool: committed slots close to the CPU's, every other slot bitwise as before.
  if (c.uses_pool()) {
    const Tensor pool = on_host(d.pool);
    std::vector<bool> committed(size_t(c.num_slots()), false);
    if (c.commit)
      for (int64_t b = 0; b < c.B(); ++b) {
        const int32_t s = h.final_slots.host<int32_t>()[b];
        if (s >= 0) committed[size_t(s)] = true;
      }
    for (int64_t s = 0; s < c.num_slots(); ++s) {
      SCOPED_TRACE(str_cat("pool slot ", s));
      if (committed[size_t(s)]) {
        EXPECT_TRUE(all_close(pool.view().select(s), h.pool.view().select(s),
                              tolerance(h.pool.view().select(s), c.pool)));
        expect_relative(pool.view().select(s), h.pool.view().select(s), "pool slot");
      } else {
        EXPECT_TRUE(bitwise_equal(pool.view().select(s), h.pool_before.view().select(s)))
            << "no sequence commits to this slot: it must be untouched";
      }
    }
  }
}

TEST(GatedDeltaRuleChunkCudaTest, MatchesCpuBody) {
  HYLA_SKIP_WITHOUT_CUDA();
  const ChunkCase cases[] = {
      {},  // GDN, GVA 2:1, d 32, f32, lengths {1, 63, 64, 65, 200}
      {.gate = Gate::kKda},
      {.gate = Gate::kKdaSafe, .act = kBF16, .pool = kBF16},
      {.H = 1, .HV = 2, .d_k = 64, .d_v = 64, .gate = Gate::kKdaSafe},
      {.H = 1, .HV = 2, .d_k = 64, .d_v = 64, .gate = Gate::kGdn, .act = kBF16},
      {.H = 1, .HV = 2, .d_k = 128, .d_v = 128, .gate = Gate::kGdn, .pool = kBF16},
      {.H = 2, .HV = 2, .d_k = 128, .d_v = 128, .gate = Gate::kKdaSafe},
      {.H = 1, .HV = 3, .d_k = 128, .d_v = 128, .gate = Gate::kKda, .act = kBF16},
      // d_k != d_v: several value tiles of 32 rows, or a d_k wider than d_v
      {.H = 1, .HV = 2, .d_k = 64, .d_v = 128, .gate = Gate::kKdaSafe, .strided = true},
      {.H = 2,
       .HV = 4,
       .d_k = 128,
       .d_v = 32,
       .gate = Gate::kGdn,
       .strided = true,
       .initial = false},
      // an empty sequence commits its initial state; a 2-chunk sequence between short ones
      {.seqlens = {3, 0, 128, 1, 70}, .gate = Gate::kKda, .act = kBF16, .strided = true},
      // no pool at all: zero initial states, nothing committed, boundary states only
      {.seqlens = {200, 64},
       .d_k = 64,
       .d_v = 64,
       .gate = Gate::kGdn,
       .initial = false,
       .commit = false},
      // no l2norm inside (the caller's keys are unit already: |k|^2 ~ 1 keeps beta |k|^2 < 2)
      {.seqlens = {65, 130},
       .gate = Gate::kKda,
       .chunk_states = false,
       .l2norm = false,
       .scale = 0.25f},
  };
  const uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  for (size_t i = 0; i < std::size(cases); ++i)
    expect_cuda_matches_cpu(cases[i], seed + uint32_t(i));
}

// The tensor-core body (GDN and KDA, d_k 128): single sequences of every length class up to 5000
// tokens, varlen batches with initial states, GVA 1:1 and 2:1, bf16 rows read in place and f32 or
// misaligned inputs read through bf16 copies, bf16 and f32 pools, boundary states, both value
// tiles (32 rows; 64 rows once the grid gives every SM two blocks: 40 x 4 x 2 = 320 blocks); KDA
// with the plain, the safe and a strong gate (both of its A paths). The 64-row cases of a few
// sequences run the two kernels side by side (state blocks <= half the SMs: GVA 2:1 with GDN's
// q / k copies among them), the 40-sequence ones one after the other; d_v 128 of 40 sequences
// takes the wide state kernel, and three cases ask for the kernel the entry would not pick.
TEST(GatedDeltaRuleChunkCudaTest, TensorCoreBodyMatchesCpuBody) {
  HYLA_SKIP_WITHOUT_CUDA();
  std::vector<ChunkCase> cases;
  for (int32_t T : {1, 63, 64, 65, 1000, 5000})
    cases.push_back({.seqlens = {T}, .H = 1, .HV = 2, .d_k = 128, .d_v = 128, .act = kBF16});
  cases.push_back({.seqlens = {1, 63, 64, 65, 200, 1000, 0, 130},
                   .H = 2,
                   .HV = 2,
                   .d_k = 128,
                   .d_v = 128,
                   .pool = kBF16});
  cases.push_back({.seqlens = {300, 5, 129},
                   .H = 2,
                   .HV = 4,
                   .d_k = 128,
                   .d_v = 64,
                   .act = kBF16,
                   .strided = true});
  cases.push_back({.seqlens = {200, 70}, .H = 1, .HV = 2, .d_k = 128, .d_v = 64});
  std::vector<int32_t> many;
  for (int i = 0; i < 40; ++i) many.push_back(1 + (i * 37) % 200);
  cases.push_back(
      {.seqlens = many, .H = 2, .HV = 4, .d_k = 128, .d_v = 128, .act = kBF16, .pool = kBF16});
  cases.push_back({.seqlens = many, .H = 4, .HV = 4, .d_k = 128, .d_v = 64, .commit = false});
  // Each state kernel where the entry would pick the other: the roles kernel one after the other
  // at d_v 128, the wide one side by side (with GDN's q / k copies, partial chunks and an empty
  // sequence).
  cases.push_back({.seqlens = many,
                   .H = 2,
                   .HV = 4,
                   .d_k = 128,
                   .d_v = 128,
                   .act = kBF16,
                   .state = ChunkStateKernel::kRoles});
  cases.push_back({.seqlens = {1, 63, 64, 65, 200, 1000, 0, 130},
                   .H = 1,
                   .HV = 2,
                   .d_k = 128,
                   .d_v = 256,
                   .state = ChunkStateKernel::kWide});
  cases.push_back({.seqlens = {65, 130},
                   .H = 1,
                   .HV = 2,
                   .d_k = 128,
                   .d_v = 32,
                   .act = kBF16,
                   .chunk_states = false,
                   .l2norm = false,
                   .scale = 0.25f});
  for (int32_t T : {1, 64, 1000})
    cases.push_back({.seqlens = {T},
                     .H = 1,
                     .HV = 2,
                     .d_k = 128,
                     .d_v = 128,
                     .gate = Gate::kKda,
                     .act = kBF16});
  cases.push_back({.seqlens = {1, 63, 64, 65, 200, 0, 130},
                   .H = 2,
                   .HV = 4,
                   .d_k = 128,
                   .d_v = 64,
                   .gate = Gate::kKdaSafe,
                   .pool = kBF16,
                   .strided = true});
  cases.push_back({.seqlens = {300, 5, 129},
                   .H = 1,
                   .HV = 2,
                   .d_k = 128,
                   .d_v = 128,
                   .gate = Gate::kKdaStrong,
                   .act = kBF16});
  cases.push_back({.seqlens = {300, 5, 129, 64},
                   .H = 2,
                   .HV = 2,
                   .d_k = 128,
                   .d_v = 128,
                   .gate = Gate::kKdaSafe,
                   .state = ChunkStateKernel::kWide});
  cases.push_back({.seqlens = many,
                   .H = 2,
                   .HV = 4,
                   .d_k = 128,
                   .d_v = 128,
                   .gate = Gate::kKdaSafe,
                   .act = kBF16,
                   .pool = kBF16});
  cases.push_back({.seqlens = {65, 130},
                   .H = 1,
                   .HV = 2,
                   .d_k = 128,
                   .d_v = 32,
                   .gate = Gate::kKda,
                   .chunk_states = false,
                   .l2norm = false,
                   .scale = 0.25f});
  const uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  for (size_t i = 0; i < cases.size(); ++i) {
    expect_cuda_matches_cpu(cases[i], seed + 100 + uint32_t(i), /*tensor_cores=*/true);
  }
}

// Context parallelism (each sequence in segments run at once, joined by their transfers): the same
// results as the CPU body, as without it. Segments of one chunk or none (short sequences), a
// partial chunk inside a segment that is not the last, initial states from bf16 and f32 pools,
// boundary states, GDN's q / k copies, KDA's safe gate, two and three value-row blocks of 128, the
// most segments, and each state kernel over the segments. (GDN's single sequence of 5000 tokens
// in the test above takes it, P = 8, by the body's choice.)
TEST(GatedDeltaRuleChunkCudaTest, ContextParallelMatchesCpuBody) {
  HYLA_SKIP_WITHOUT_CUDA();
  std::vector<ChunkCase> cases;
  cases.push_back({.seqlens = {1, 63, 64, 65, 200, 1000, 0, 130, 700},
                   .H = 2,
                   .HV = 2,
                   .d_k = 128,
                   .d_v = 128,
                   .pool = kBF16,
                   .cp = 4});
  cases.push_back(
      {.seqlens = {2000}, .H = 1, .HV = 2, .d_k = 128, .d_v = 128, .act = kBF16, .cp = 16});
  cases.push_back({.seqlens = {1500, 70},
                   .H = 1,
                   .HV = 1,
                   .d_k = 128,
                   .d_v = 256,
                   .act = kBF16,
                   .state = ChunkStateKernel::kWide,
                   .cp = 3});
  cases.push_back({.seqlens = {300, 5, 129, 1000},
                   .H = 1,
                   .HV = 2,
                   .d_k = 128,
                   .d_v = 128,
                   .gate = Gate::kKdaSafe,
                   .act = kBF16,
                   .cp = 5});
  cases.push_back({.seqlens = {900},
                   .H = 2,
                   .HV = 4,
                   .d_k = 128,
                   .d_v = 128,
                   .gate = Gate::kKda,
                   .state = ChunkStateKernel::kRoles,
                   .cp = 2});
  const uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  for (size_t i = 0; i < cases.size(); ++i)
    expect_cuda_matches_cpu(cases[i], seed + 300 + uint32_t(i), /*tensor_cores=*/true);
}

// Extend picks chunk on CUDA from kCudaChunkMinTokens tokens per sequence (always with
// chunk_states) and then gives exactly the chunk result.
TEST(GatedDeltaRuleChunkCudaTest, ExtendRunsChunkForLongSequences) {
  HYLA_SKIP_WITHOUT_CUDA();
  const uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  std::mt19937 rng(seed);
  {
    const ChunkCase c{.seqlens = {130, 70}, .chunk_states = false};
    HostProblem h = make_host_problem(c, rng);
    DeviceProblem d = make_device_problem(c, h);
    ASSERT_TRUE(gated_delta_rule_extend_uses_chunk(d.params));
    ASSERT_OK(gated_delta_rule_extend(d.params));
    const Tensor extend_o = on_host(h.o.device_storage);
    // Again with the same inputs: the slots read (0 and -1) are not among those written (1, 3).
    ASSERT_OK(gated_delta_rule_chunk(d.params));
    EXPECT_TRUE(bitwise_equal(on_host(h.o.device_storage), extend_o));
  }
  const auto uses_chunk = [&](std::vector<int32_t> seqlens, int64_t d_k, bool chunk_states) {
    const ChunkCase c{.seqlens = seqlens, .d_k = d_k, .chunk_states = chunk_states};
    HostProblem h = make_host_problem(c, rng);
    DeviceProblem d = make_device_problem(c, h);
    return gated_delta_rule_extend_uses_chunk(d.params);
  };
  const int32_t min_tokens = int32_t(kCudaChunkMinTokens);
  EXPECT_FALSE(uses_chunk({1, 1, 1, 1}, 32, false)) << "decode-like: recurrent";
  EXPECT_FALSE(uses_chunk({min_tokens - 1, min_tokens - 1}, 32, false));
  EXPECT_TRUE(uses_chunk({min_tokens, min_tokens}, 32, false));
  EXPECT_TRUE(uses_chunk({64}, 32, true)) << "boundary states need the chunk algorithm";
  EXPECT_FALSE(uses_chunk({200}, 256, false)) << "d_k beyond the CUDA chunk body: recurrent";
}

TEST(GatedDeltaRuleChunkCudaTest, WorkspaceKeyWidthAndStateKernelAreChecked) {
  HYLA_SKIP_WITHOUT_CUDA();
  const uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  std::mt19937 rng(seed);
  const ChunkCase c{.seqlens = {70, 5}};
  HostProblem h = make_host_problem(c, rng);
  DeviceProblem d = make_device_problem(c, h);
  GatedDeltaRuleParams p = d.params;
  p.workspace = {};
  EXPECT_ERROR_CONTAINS(gated_delta_rule_chunk(p), "workspace is missing");
  const int64_t bytes = gated_delta_rule_chunk_workspace_bytes(p);
  p.workspace = d.workspace.view().reshape({d.workspace.numel()}).slice(0, bytes / 4 - 1);
  EXPECT_ERROR_CONTAINS(gated_delta_rule_chunk(p), "workspace holds");
  const Tensor host_workspace = Tensor::empty({(bytes + 3) / 4}, kF32);
  p.workspace = host_workspace;
  EXPECT_ERROR_CONTAINS(gated_delta_rule_chunk(p), "workspace");

  const ChunkCase wide{.seqlens = {70}, .H = 1, .HV = 1, .d_k = 160, .chunk_states = false};
  HostProblem hw = make_host_problem(wide, rng);
  DeviceProblem dw = make_device_problem(wide, hw);
  EXPECT_ERROR_CONTAINS(gated_delta_rule_chunk(dw.params), "at most 128");
  EXPECT_TRUE(still_poisoned(on_host(hw.o.device_storage))) << "a refused call wrote o";

  // The wide state kernel asked where it cannot run (d_v 64): refused, nothing written.
  const ChunkCase narrow{
      .seqlens = {70}, .H = 1, .HV = 2, .d_k = 128, .d_v = 64, .state = ChunkStateKernel::kWide};
  HostProblem hn = make_host_problem(narrow, rng);
  DeviceProblem dn = make_device_problem(narrow, hn);
  EXPECT_ERROR_CONTAINS(gated_delta_rule_chunk(dn.params), "d_v a multiple of 128");
  EXPECT_TRUE(still_poisoned(on_host(hn.o.device_storage))) << "a refused call wrote o";

  // Context parallelism out of range, or where it cannot run (d_v 64): refused, nothing written.
  GatedDeltaRuleParams cp = dn.params;
  cp.state_kernel = ChunkStateKernel::kAuto;
  cp.cp_segments = 17;
  EXPECT_ERROR_CONTAINS(gated_delta_rule_chunk(cp), "cp_segments 17");
  cp.cp_segments = -1;
  EXPECT_ERROR_CONTAINS(gated_delta_rule_chunk(cp), "cp_segments -1");
  cp.cp_segments = 4;
  EXPECT_ERROR_CONTAINS(gated_delta_rule_chunk(cp), "d_v a multiple of 128");
  EXPECT_TRUE(still_poisoned(on_host(hn.o.device_storage))) << "a refused call wrote o";
}

}  // namespace
}  // namespace hyla::kernels

// Long run of the fused decode step (kernels/gated_delta_rule_decode.h): 10,000 decode steps of
// fresh random inputs through the CUDA entry, GDN and KDA, f32 and bf16 state pools, against a
// float64 replay of the same math on the host (conv window + silu and the gates in double here,
// the delta rule by testing::delta_rule_reference). At sampled steps the state pool, the conv
// pool and o are read back and compared with the replay; the measured max errors are printed
// ("[long run] ...") so the docs can quote them.
// The shape is the benchmark model's decode shape per head group, kept small so that the host
// replay stays fast: B = 4 sequences, H = 2 key heads, HV = 4 value heads, d_k = d_v = 128,
// conv K = 4. Inputs are in the regime of real models: l2-normalised keys (the op normalises),
// beta = sigmoid(b), decays from the gate formula with A_log, dt_bias drawn as the models
// initialise them (A in [1, 16], dt log-uniform in [1e-3, 1e-1]): decays from ~0 to ~0.9999.
// The same driver runs the CPU body for 300 steps (LongRunCpuTest, not skipped without a GPU):
// it checks the replay and the bounds on a machine without one.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "cuda_testing.h"
#include "kernels/delta_rule_reference.h"
#include "kernels/gated_delta_rule_decode.h"
#include "kernels/gated_delta_rule_decode_cases.h"  // DecodeGate, gate_name

namespace hyla::kernels {
namespace {

using testing::DecodeGate;
using testing::Tolerance;

constexpr DType kF32 = DType::kF32, kBF16 = DType::kBF16;

// ---- Shape ----
constexpr int64_t kB = 4, kH = 2, kHV = 4, kDim = 128, kConvK = 4;
constexpr int64_t kConvDim = 2 * kH * kDim + kHV * kDim;
constexpr int64_t kStateSize = kHV * kDim * kDim;  ///< one slot: [HV, d_v, d_k]
constexpr int64_t kNumSlots = 6;
/// Each sequence's slot; slots 2 and 4 belong to no sequence and must stay untouched.
const std::vector<int32_t> kSlots = {3, 0, 5, 1};
constexpr int32_t kUntouchedSlots[] = {2, 4};
/// Most steps whose inputs are generated, uploaded and replayed at once.
constexpr int64_t kChunkSteps = 500;

// ---- Tolerances ----
// Both sides start from the same rounded inputs, initial states and conv windows; the op
// computes in fp32, the replay in float64, so the difference is the op's own rounding. Per step
// each state element takes a few roundings of u |s| (u = 2^-24 for fp32): the decay multiply, the
// rank-1 write, and the error delta = beta (v - k S) whose dot product over d_k = 128 terms of
// size |k_i s_i| ~ |s| / 11 adds about u |s|; the conv, silu, l2norm, softplus and expf of the
// fresh inputs add a few u relative to q, k, v and the decay. The step map
// S -> Diag(alpha) S (I - beta k k^T) (+ beta k v^T) is non-expansive in each state row's 2-norm
// (alpha <= 1, unit k, beta in [0, 1]), so earlier errors are carried, never amplified, and
// roundings of either sign add like a random walk (sqrt(steps), not steps). They are also
// forgotten: along any key channel the projections onto ever new random unit keys contract by
// (1 - beta k_i^2) ~ 1 - 1/256 per step (E[beta] = 1/2, E[k_i^2] = 1/d_k), and the decays on top,
// so the variance sums over ~128 steps and the error plateaus within a few hundred steps instead
// of growing to step 10,000. In this regime |s| <~ 2 (rows follow |v| <~ 2, typical |s| ~ 0.3).
// Measured with the CPU body over 10,000 steps (this driver, GDN and KDA): f32 state <= 8e-7,
// f32 o <= 3e-8, bf16 state <= 2.4e-2, bf16 o <= 4.3e-4, flat from step ~100 on; over 300
// steps and 7 seeds the bf16 state reached 4.1e-2 and bf16 o 5.9e-4.

/// f32 pool: sqrt(128) x ~3 u x |s| ~ 7e-7 per element at typical |s| (measured 2-8e-7); 10x
/// left for the GPU's other summation order and expf.
constexpr Tolerance kF32State{
    .atol = 1e-5,
    .rtol = 0,
    .why =
        "fp32 roundings of ~3 u |s| per step, a random walk carried by a non-expansive map "
        "whose contraction forgets it after ~128 steps: ~7e-7, 10x margin"};
/// o = q S with ||q|| = d_k^-1/2 ~ 0.088 reads a state error of random direction: ~0.088 x the
/// element bound (9e-7), plus the read's own fp32 dot product (~u |o|); stored as computed.
constexpr Tolerance kF32Output{
    .atol = 1e-6,
    .rtol = 0,
    .why = "the state's error seen through q of norm d_k^-1/2 (0.088 x 1e-5), one fp32 dot"};
/// bf16 pool: every step rounds every element to bf16, an error uniform in +-half an ulp
/// (standard deviation ulp / sqrt(12)); the same map carries and forgets it over ~128 steps:
/// sigma ~ sqrt(128) x ulp / sqrt(12), 1.3e-2 for |s| in [0.5, 1) (ulp 2^-8) and 2.6e-2 for the
/// few elements in [1, 2) (ulp 2^-7); the max over the ~1M compared elements stays below ~4
/// sigma of the largest ones.
constexpr Tolerance kBf16State{
    .atol = 1e-1,
    .rtol = 0,
    .why =
        "a bf16 rounding of every element per step (sigma ulp / sqrt(12)), a random walk over "
        "the ~128-step memory: sigma 2.6e-2 at |s| < 2, max of ~1M elements < 4 sigma"};
/// bf16 o: the bf16 state's error (typical sigma <~ 1e-2) through q of norm 0.088, ~1e-3, plus
/// the bf16 rounding of o itself (2^-9 relative, 2^-8 for a value that is itself off).
constexpr Tolerance kBf16Output{
    .atol = 2e-3,
    .rtol = 1.0 / 256,
    .why = "the bf16 state's error seen through q of norm d_k^-1/2, one bf16 rounding of o"};
/// The conv windows are copies of inputs, rounded to the pool's dtype on both sides.
constexpr Tolerance kExact{.atol = 0, .rtol = 0, .why = "copies of inputs, rounded alike"};

struct LongRunCase {
  DecodeGate gate = DecodeGate::kGdn;
  DType act = kF32;   ///< qkv, a, b, o and the conv pool
  DType pool = kF32;  ///< SSM state pool

  bool kda() const { return gate != DecodeGate::kGdn; }
  std::string name() const {
    return str_cat(testing::gate_name(gate), "_act-", dtype_name(act), "_pool-", dtype_name(pool));
  }
  Tolerance state_tolerance() const { return pool == kBF16 ? kBf16State : kF32State; }
  Tolerance output_tolerance() const { return act == kBF16 ? kBf16Output : kF32Output; }
};

// ---- The layer and its inputs ----

/// softplus^-1(dt) = dt + log(1 - exp(-dt)): the dt_bias that makes softplus(0 + dt_bias) = dt.
float inverse_softplus(double dt) { return float(dt + std::log(-std::expm1(-dt))); }

/// The layer's fixed parameters and both pools, on the host, as the models initialise them:
/// A = exp(A_log) uniform in [1, 16], dt = softplus(dt_bias) log-uniform in [1e-3, 1e-1] (per
/// value head for GDN, per value head and key channel for KDA).
struct Layer {
  Tensor conv_weight;  ///< [conv_dim, K] f32
  Tensor A_log;        ///< [HV] f32
  Tensor dt_bias;      ///< GDN [HV] / KDA [HV, d_k] f32
  Tensor conv_state;   ///< [slots, conv_dim, K-1] act dtype
  Tensor state_pool;   ///< [slots, HV, d_v, d_k] pool dtype
};

Layer make_layer(const LongRunCase& c, std::mt19937& rng) {
  Layer l;
  l.conv_weight = testing::random_normal({kConvDim, kConvK}, kF32, rng, 0.0f, 0.5f);
  std::uniform_real_distribution<double> A(1.0, 16.0), log_dt(std::log(1e-3), std::log(1e-1));
  std::vector<double> A_log(kHV), dt_bias(size_t(kHV * (c.kda() ? kDim : 1)));
  for (double& x : A_log) x = std::log(A(rng));
  for (double& x : dt_bias) x = inverse_softplus(std::exp(log_dt(rng)));
  l.A_log = testing::tensor_from(A_log, {kHV}, kF32);
  l.dt_bias = c.kda() ? testing::tensor_from(dt_bias, {kHV, kDim}, kF32)
                      : testing::tensor_from(dt_bias, {kHV}, kF32);
  l.conv_state = testing::random_uniform({kNumSlots, kConvDim, kConvK - 1}, c.act, rng);
  l.state_pool = testing::random_normal({kNumSlots, kHV, kDim, kDim}, c.pool, rng, 0.0f, 0.2f);
  return l;
}

/// Inputs of `n` steps on the host, rows s B + b: step s of sequence b.
struct StepInputs {
  int64_t n = 0;
  Tensor qkv;  ///< [n B, conv_dim] act, uniform [-1, 1)
  Tensor a;    ///< GDN [n B, HV] / KDA [n B, HV, d_k] act, N(0, 1) (a projection's output)
  Tensor b;    ///< [n B, HV] act, uniform [-3, 3): beta from 0.05 to 0.95
};

StepInputs make_inputs(const LongRunCase& c, int64_t n, std::mt19937& rng) {
  StepInputs in;
  in.n = n;
  in.qkv = testing::random_uniform({n * kB, kConvDim}, c.act, rng);
  in.a = c.kda() ? testing::random_normal({n * kB, kHV, kDim}, c.act, rng)
                 : testing::random_normal({n * kB, kHV}, c.act, rng);
  in.b = testing::random_uniform({n * kB, kHV}, c.act, rng, -3.0f, 3.0f);
  return in;
}

// ---- The float64 replay ----

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double softplus(double x) { return std::max(x, 0.0) + std::log1p(std::exp(-std::abs(x))); }

/// The op's math in float64 on the same rounded numbers: per sequence its conv window and SSM
/// state, advanced step by step.
class Replay {
 public:
  Replay(const LongRunCase& c, const Layer& layer)
      : kda_(c.kda()),
        conv_weight_(testing::to_f64(layer.conv_weight)),
        A_log_(testing::to_f64(layer.A_log)),
        dt_bias_(testing::to_f64(layer.dt_bias)) {
    const std::vector<double> conv_pool = testing::to_f64(layer.conv_state);
    const std::vector<double> state_pool = testing::to_f64(layer.state_pool);
    const int64_t window = kConvDim * (kConvK - 1);
    for (int32_t slot : kSlots) {
      windows_.emplace_back(conv_pool.begin() + slot * window,
                            conv_pool.begin() + (slot + 1) * window);
      states_.emplace_back(state_pool.begin() + slot * kStateSize,
                           state_pool.begin() + (slot + 1) * kStateSize);
    }
    last_o_.assign(size_t(kB * kHV * kDim), 0.0);
  }

  /// Advances every sequence by the n steps of `in` (sequences in parallel).
  void advance(const StepInputs& in) {
    const std::vector<double> qkv = testing::to_f64(in.qkv), a = testing::to_f64(in.a),
                              b = testing::to_f64(in.b);
    std::vector<std::thread> threads;
    for (int64_t seq = 0; seq < kB; ++seq)
      threads.emplace_back([&, seq] { advance_sequence(seq, in.n, qkv, a, b); });
    for (std::thread& t : threads) t.join();
  }

  const std::vector<double>& state(int64_t seq) const { return states_[size_t(seq)]; }
  const std::vector<double>& window(int64_t seq) const { return windows_[size_t(seq)]; }
  /// o [B, HV, d_v] of the last step.
  const std::vector<double>& last_o() const { return last_o_; }

 private:
  void advance_sequence(int64_t seq, int64_t n, const std::vector<double>& qkv,
                        const std::vector<double>& a, const std::vector<double>& b) {
    const int64_t gate_width = kda_ ? kDim : 1;
    testing::DeltaRuleInputs in;
    in.T = n;
    in.H = kH;
    in.HV = kHV;
    in.d_k = kDim;
    in.d_v = kDim;
    in.per_channel_gate = kda_;
    in.q.resize(size_t(n * kH * kDim));
    in.k.resize(size_t(n * kH * kDim));
    in.v.resize(size_t(n * kHV * kDim));
    in.g.resize(size_t(n * kHV * gate_width));
    in.beta.resize(size_t(n * kHV));
    in.cu_seqlens = {0, int32_t(n)};
    in.use_qk_l2norm = true;
    in.initial_states = {std::move(states_[size_t(seq)])};

    std::vector<double>& window = windows_[size_t(seq)];  // [conv_dim, K-1], oldest first
    for (int64_t t = 0; t < n; ++t) {
      const int64_t row = t * kB + seq;
      // [q | k | v] = silu(conv(window, x)); the window then drops its oldest entry
      for (int64_t ch = 0; ch < kConvDim; ++ch) {
        const double* w = &conv_weight_[size_t(ch * kConvK)];
        double* hist = &window[size_t(ch * (kConvK - 1))];
        const double x = qkv[size_t(row * kConvDim + ch)];
        double acc = w[kConvK - 1] * x;
        for (int64_t j = 0; j < kConvK - 1; ++j) acc += w[j] * hist[j];
        for (int64_t j = 0; j + 1 < kConvK - 1; ++j) hist[j] = hist[j + 1];
        hist[kConvK - 2] = x;
        const double y = acc * sigmoid(acc);
        if (ch < kH * kDim)
          in.q[size_t(t * kH * kDim + ch)] = y;
        else if (ch < 2 * kH * kDim)
          in.k[size_t(t * kH * kDim + ch - kH * kDim)] = y;
        else
          in.v[size_t(t * kHV * kDim + ch - 2 * kH * kDim)] = y;
      }
      // g = -exp(A_log) softplus(a + dt_bias) (KDA: per key channel), beta = sigmoid(b)
      for (int64_t h = 0; h < kHV; ++h) {
        for (int64_t i = 0; i < gate_width; ++i)
          in.g[size_t((t * kHV + h) * gate_width + i)] =
              -std::exp(A_log_[size_t(h)]) * softplus(a[size_t((row * kHV + h) * gate_width + i)] +
                                                      dt_bias_[size_t(h * gate_width + i)]);
        in.beta[size_t(t * kHV + h)] = sigmoid(b[size_t(row * kHV + h)]);
      }
    }
    testing::DeltaRuleOutputs out = testing::delta_rule_reference(in, /*keep_step_states=*/false);
    states_[size_t(seq)] = std::move(out.final_states[0]);
    std::copy(out.o.end() - kHV * kDim, out.o.end(), last_o_.begin() + seq * kHV * kDim);
  }

  bool kda_;
  std::vector<double> conv_weight_, A_log_, dt_bias_;
  std::vector<std::vector<double>> windows_, states_;  ///< per sequence
  std::vector<double> last_o_;
};

// ---- The run ----

double max_abs(const std::vector<double>& x) {
  double m = 0;
  for (double v : x) m = std::max(m, std::abs(v));
  return m;
}

double max_abs_diff(const std::vector<double>& got, const std::vector<double>& want) {
  double m = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::abs(got[i] - want[i]);
    if (!(d <= m)) m = d;  // NaN propagates
  }
  return m;
}

/// Runs `steps` decode steps of case c on `device` (the CUDA entry on Device::cuda(), the CPU
/// body on Device::cpu()) from the same host inputs as the float64 replay, and compares the state
/// pool, the conv pool and o with the replay after each step in `samples` (ascending, the last
/// one `steps`). Inputs are generated and uploaded kChunkSteps at a time; each chunk ends at a
/// sample step at the latest.
void expect_long_run_matches_replay(const LongRunCase& c, Device device, int64_t steps,
                                    const std::vector<int64_t>& samples, uint32_t seed) {
  SCOPED_TRACE(str_cat(c.name(), " on ", device.is_cuda() ? "cuda" : "cpu", ", ", steps,
                       " steps, seed ", seed));
  std::mt19937 rng(seed);
  const Layer host = make_layer(c, rng);
  Replay replay(c, host);

  const Tensor conv_weight = host.conv_weight.to(device), A_log = host.A_log.to(device);
  const Tensor dt_bias = host.dt_bias.to(device), slots = testing::int32_tensor(kSlots).to(device);
  Tensor conv_state = host.conv_state.to(device), state_pool = host.state_pool.to(device);
  Tensor o = testing::poisoned({kB, kHV, kDim}, c.act).to(device);

  int64_t done = 0;
  for (int64_t sample : samples) {
    while (done < sample) {
      const int64_t n = std::min(kChunkSteps, sample - done);
      const StepInputs in = make_inputs(c, n, rng);
      const Tensor qkv = in.qkv.to(device), a = in.a.to(device), b = in.b.to(device);
      for (int64_t s = 0; s < n; ++s) {
        if (done + s + 1 == sample) o.fill_bytes(0xff);  // the sampled step must write o
        GatedDeltaRuleDecodeParams p;  // T = 1, commit, no fused norm, scale d_k^-1/2
        p.qkv = qkv.view().slice(s * kB, (s + 1) * kB);
        p.conv_weight = conv_weight;
        p.conv_state = conv_state;
        p.a = a.view().slice(s * kB, (s + 1) * kB);
        p.b = b.view().slice(s * kB, (s + 1) * kB);
        p.A_log = A_log;
        p.dt_bias = dt_bias;
        p.state_pool = state_pool;
        p.slots = slots;
        p.o = o;
        ASSERT_OK(gated_delta_rule_decode(p));
      }
      replay.advance(in);
      done += n;
    }

    SCOPED_TRACE(str_cat("after step ", sample));
    const Tensor pool_back = state_pool.to(Device::cpu()), conv_back = conv_state.to(Device::cpu());
    const Tensor o_back = o.to(Device::cpu());
    double state_err = 0, state_max = 0;
    for (int64_t seq = 0; seq < kB; ++seq) {
      SCOPED_TRACE(str_cat("sequence ", seq, ", slot ", kSlots[size_t(seq)]));
      const TensorView got = pool_back.view().select(kSlots[size_t(seq)]);
      state_err = std::max(state_err, max_abs_diff(testing::to_f64(got), replay.state(seq)));
      state_max = std::max(state_max, max_abs(replay.state(seq)));
      EXPECT_CLOSE(got, replay.state(seq), c.state_tolerance()) << "state";
      EXPECT_CLOSE(conv_back.view().select(kSlots[size_t(seq)]), replay.window(seq), kExact)
          << "conv window";
    }
    const double o_err = max_abs_diff(testing::to_f64(o_back), replay.last_o());
    EXPECT_CLOSE(o_back, replay.last_o(), c.output_tolerance()) << "o";
    std::printf(
        "[long run] %s %s step %6lld: state max |err| %.3e (max |state| %.3f), o max |err| "
        "%.3e (max |o| %.3f)\n",
        c.name().c_str(), device.is_cuda() ? "cuda" : "cpu", static_cast<long long>(sample),
        state_err, state_max, o_err, max_abs(replay.last_o()));
  }

  // Slots of no sequence: never read into a sequence, never written.
  const Tensor pool_back = state_pool.to(Device::cpu()), conv_back = conv_state.to(Device::cpu());
  for (int32_t slot : kUntouchedSlots) {
    EXPECT_CLOSE(pool_back.view().select(slot), host.state_pool.view().select(slot), kExact)
        << "untouched state slot " << slot;
    EXPECT_CLOSE(conv_back.view().select(slot), host.conv_state.view().select(slot), kExact)
        << "untouched conv slot " << slot;
  }
}

const LongRunCase kCases[] = {
    {.gate = DecodeGate::kGdn, .act = kF32, .pool = kF32},
    {.gate = DecodeGate::kKda, .act = kF32, .pool = kF32},
    {.gate = DecodeGate::kGdn, .act = kBF16, .pool = kBF16},
    {.gate = DecodeGate::kKda, .act = kBF16, .pool = kBF16},
};

// ---- Tests ----

TEST(DecodeLongRunCudaTest, TenThousandStepsStayNearFloat64Replay) {
  HYLA_SKIP_WITHOUT_CUDA();
  const uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  uint32_t n = 0;
  for (const LongRunCase& c : kCases)
    expect_long_run_matches_replay(c, Device::cuda(), 10000, {1, 10, 100, 1000, 5000, 10000},
                                   seed + n++);
}

TEST(DecodeLongRunCpuTest, CpuBodyStaysNearFloat64Replay) {
  // The replay and the bounds, checked against the CPU body (not skipped without a GPU).
  const uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  uint32_t n = 0;
  for (const LongRunCase& c : kCases)
    expect_long_run_matches_replay(c, Device::cpu(), 300, {1, 10, 100, 300}, seed + n++);
}

}  // namespace
}  // namespace hyla::kernels

// Tests of gated_delta_rule_recurrent / gated_delta_rule_chunk (kernels/gated_delta_rule.h):
// both against the float64 per-token reference (seed: 统一递归形式, gated_delta_rule_ref, KDA),
// chunk-boundary and per-step states, the seed's delta-rule properties (overwrite, beta
// interpolation, orthogonal recall, decay-then-predict), the parallel form with its
// lower-triangular inverse (矩阵形式), and the argument checks.
#include "kernels/gated_delta_rule.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "delta_rule_reference.h"
#include "testing.h"

namespace hyla {
namespace {

using kernels::GatedDeltaRuleParams;
using testing::DeltaRuleInputs;
using testing::DeltaRuleOutputs;
using testing::to_f64;
using testing::Tolerance;

// ---- Tolerances ----
// Magnitudes: keys are unit (l2norm), |v| <= 1, beta in [0, 1], decay <= 1, so the state map is
// non-expansive (the eigenvalue along k is 1 - beta) and states / outputs stay O(1). fp32 rounding
// (2^-24 ~ 6e-8 relative per operation) therefore does not grow along the sequence: the error of
// a state or output entry is that of a few d_k-term fp32 dot products, worst case
// d_k * 2^-24 ~ 8e-6 for d_k = 128 and about 1e-7 .. 2e-6 measured (the largest in the KDA chunk
// algorithm with gates down to -5).

constexpr Tolerance kF32Output{
    .atol = 1e-5,
    .rtol = 1e-5,
    .why =
        "fp32 state and accumulation on O(1) values: errors do not compound along T (the state "
        "map is non-expansive); worst case ~d_k * 2^-24 = 8e-6 per dot product"};
constexpr Tolerance kBf16Output{
    .atol = 1e-5,
    .rtol = 1.0 / 256,
    .why =
        "o rounded to bf16 (8 significant bits: half an ulp is <= 2^-8 relative) on top of the "
        "fp32 error of kF32Output"};
constexpr Tolerance kF32State{
    .atol = 1e-5,
    .rtol = 1e-5,
    .why = "fp32 state on O(1) values, same bound as kF32Output (measured <= 1.6e-6 at gates -5)"};
constexpr Tolerance kBf16State{
    .atol = 1e-5,
    .rtol = 1.0 / 256,
    .why = "final state stored in a bf16 pool: rounding <= 2^-8 relative, plus the fp32 error"};
constexpr Tolerance kChunkVsRecurrentState{
    .atol = 2e-5,
    .rtol = 2e-5,
    .why = "two fp32 algorithms, each within kF32State of the fp64 reference"};
constexpr Tolerance kProperty{
    .atol = 1e-5,
    .rtol = 1e-5,
    .why =
        "an exact identity evaluated by the fp32 kernel on O(1) values: d_k <= 32 term dot "
        "products (~32 * 2^-24 = 2e-6) plus the l2norm eps 1e-6 shrinking unit keys by 5e-7"};
constexpr Tolerance kFp64{
    .atol = 1e-12,
    .rtol = 1e-10,
    .why =
        "two float64 evaluations of the same math (<= 12 tokens, d_k = 8): only fp64 rounding, "
        "amplified at most mildly by the unit-lower-triangular inverse"};

// ---- Tensors from float64 values ----

void store_element(const TensorView& t, int64_t offset, double x) {
  switch (t.dtype()) {
    case DType::kF32: t.data<float>()[offset] = float(x); return;
    case DType::kBF16: t.data<bf16>()[offset] = f32_to_bf16(float(x)); return;
    case DType::kF16: t.data<f16>()[offset] = f32_to_f16(float(x)); return;
    default: HYLA_CHECK(false, "store_element: unsupported dtype ", dtype_name(t.dtype()));
  }
}

/// Writes `values` (row-major over t's shape) into a host view, honouring strides and rounding to
/// its dtype.
void write_view(const TensorView& t, const std::vector<double>& values) {
  HYLA_CHECK(int64_t(values.size()) == t.numel(), "write_view: ", values.size(), " values for ",
             t.shape_string());
  std::vector<int64_t> idx(size_t(t.ndim()), 0);
  for (int64_t i = 0; i < t.numel(); ++i) {
    int64_t offset = 0;
    for (int d = 0; d < t.ndim(); ++d) offset += idx[size_t(d)] * t.stride(d);
    store_element(t, offset, values[size_t(i)]);
    for (int d = t.ndim() - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < t.size(d)) break;
      idx[size_t(d)] = 0;
    }
  }
}

/// Writes `values` into `t` and returns what `t` now holds (the values rounded to its dtype).
std::vector<double> write_and_read_back(const TensorView& t, const std::vector<double>& values) {
  write_view(t, values);
  return to_f64(t);
}

/// A view of `shape` / `stride` (elements) starting `offset` elements into `parent`.
TensorView view_into(const Tensor& parent, int64_t offset, std::vector<int64_t> shape,
                     std::vector<int64_t> stride) {
  char* base = static_cast<char*>(parent.view().raw()) + offset * dtype_size(parent.dtype());
  return TensorView(base, parent.dtype(), int(shape.size()), shape.data(), stride.data());
}

bool same_bytes(const TensorView& a, const TensorView& b) {
  return a.span_bytes() == b.span_bytes() &&
         std::memcmp(a.raw(), b.raw(), size_t(a.span_bytes())) == 0;
}

bool all_nan(const TensorView& t) {
  const std::vector<double> x = to_f64(t);
  return std::all_of(x.begin(), x.end(), [](double e) { return std::isnan(e); });
}

Tensor f64_tensor(const std::vector<double>& values) {
  return testing::tensor_from(values, {int64_t(values.size())}, DType::kF64);
}

std::vector<double> draw_uniform(size_t n, std::mt19937& rng, double lo, double hi) {
  std::uniform_real_distribution<double> dist(lo, hi);
  std::vector<double> x(n);
  for (double& e : x) e = dist(rng);
  return x;
}

std::vector<double> draw_normal(size_t n, std::mt19937& rng, double stddev = 1.0) {
  std::normal_distribution<double> dist(0.0, stddev);
  std::vector<double> x(n);
  for (double& e : x) e = dist(rng);
  return x;
}

// ---- The kernel's tensors for one problem ----

/// Dtypes and memory layout of the kernel-side tensors.
struct GdrLayout {
  DType act = DType::kF32;   ///< q, k, v
  DType out = DType::kF32;   ///< o
  DType pool = DType::kF32;  ///< state pool
  /// q/k/v, g, beta and o as views into wider NaN-filled buffers, the way a fused projection
  /// hands them over (beta even with a non-unit last stride, which the API allows). Rows of
  /// q/k/v/o and of a KDA g start at multiples of 8 elements: strided, but 16-byte aligned.
  bool strided = false;
};

/// Which pool slots each sequence reads and writes; nullopt = that slot array is omitted.
struct SlotPlan {
  int64_t num_slots = 0;  ///< 0 = no pool at all
  std::optional<std::vector<int32_t>> initial;
  std::optional<std::vector<int32_t>> final;

  bool is_final(int32_t slot) const {
    return final && std::find(final->begin(), final->end(), slot) != final->end();
  }
  bool is_initial(int32_t slot) const {
    return initial && std::find(initial->begin(), initial->end(), slot) != initial->end();
  }
};

/// Owned buffers plus the params that view them. The pool is random except slots that are only
/// final slots: those are NaN, so a kernel that reads them (or forgets to write them) fails.
struct GdrTensors {
  std::vector<Tensor> buffers;  ///< parents of the input views
  Tensor pool_before;           ///< the pool as built; never handed to a kernel
  Tensor pool;                  ///< what the kernel reads and writes
  Tensor o_buffer;              ///< o's parent (wider than o when strided)
  int64_t o_row = 0;            ///< elements per token in o_buffer
  GatedDeltaRuleParams params;

  /// Restores the pool and re-poisons o before the next kernel call.
  void reset() {
    if (pool_before.defined()) {
      pool = pool_before.clone();
      params.state_pool = pool;
    }
    o_buffer.fill_bytes(0xff);
  }
  TensorView slot(int64_t s) const { return pool.view().select(s); }
  TensorView slot_before(int64_t s) const { return pool_before.view().select(s); }
};

/// Builds the kernel's tensors for `in` and rounds `in` to what the kernel reads: q/k/v to
/// layout.act, g/beta to f32, initial states to the pool dtype (an empty initial state of a
/// sequence with an initial slot is drawn at random).
GdrTensors make_tensors(DeltaRuleInputs& in, const GdrLayout& layout, const SlotPlan& slots,
                        std::mt19937& rng) {
  const int64_t T = in.T, H = in.H, HV = in.HV, d_k = in.d_k, d_v = in.d_v, B = in.num_seqs();
  GdrTensors out;
  GatedDeltaRuleParams& p = out.params;
  auto add = [&](Tensor t) -> const Tensor& {
    out.buffers.push_back(std::move(t));
    return out.buffers.back();
  };
  const int64_t g_width = in.per_channel_gate ? HV * d_k : HV;
  if (layout.strided) {
    const int64_t row = 2 * H * d_k + HV * d_v + 8;  // [q | k | v | pad] like a fused qkv
    const Tensor& qkv = add(testing::poisoned({T, row}, layout.act));
    p.q = view_into(qkv, 0, {T, H, d_k}, {row, d_k, 1});
    p.k = view_into(qkv, H * d_k, {T, H, d_k}, {row, d_k, 1});
    p.v = view_into(qkv, 2 * H * d_k, {T, HV, d_v}, {row, d_v, 1});
    const Tensor& g = add(testing::poisoned({T, 2 * g_width}, DType::kF32));  // [pad | g]
    p.g = in.per_channel_gate ? view_into(g, g_width, {T, HV, d_k}, {2 * g_width, d_k, 1})
                              : view_into(g, g_width, {T, HV}, {2 * g_width, 1});
    const Tensor& ab = add(testing::poisoned({T, HV, 2}, DType::kF32));  // interleaved [a, beta]
    p.beta = view_into(ab, 1, {T, HV}, {2 * HV, 2});
    out.o_row = HV * d_v + 8;
  } else {
    p.q = add(Tensor::empty({T, H, d_k}, layout.act));
    p.k = add(Tensor::empty({T, H, d_k}, layout.act));
    p.v = add(Tensor::empty({T, HV, d_v}, layout.act));
    p.g = in.per_channel_gate ? add(Tensor::empty({T, HV, d_k}, DType::kF32)).view()
                              : add(Tensor::empty({T, HV}, DType::kF32)).view();
    p.beta = add(Tensor::empty({T, HV}, DType::kF32));
    out.o_row = HV * d_v;
  }
  in.q = write_and_read_back(p.q, in.q);
  in.k = write_and_read_back(p.k, in.k);
  in.v = write_and_read_back(p.v, in.v);
  in.g = write_and_read_back(p.g, in.g);
  in.beta = write_and_read_back(p.beta, in.beta);
  out.o_buffer = testing::poisoned({T, out.o_row}, layout.out);
  p.o = view_into(out.o_buffer, 0, {T, HV, d_v}, {out.o_row, d_v, 1});
  p.cu_seqlens = add(testing::int32_tensor(in.cu_seqlens));
  p.use_qk_l2norm = in.use_qk_l2norm;
  p.scale = float(in.scale);

  in.initial_states.resize(size_t(B));
  if (slots.num_slots > 0) {
    Tensor pool = Tensor::empty({slots.num_slots, HV, d_v, d_k}, layout.pool);
    const size_t state_size = size_t(in.state_size());
    for (int64_t s = 0; s < slots.num_slots; ++s)
      write_view(pool.view().select(s), draw_normal(state_size, rng, 0.5));
    for (int64_t b = 0; b < B; ++b) {
      const int32_t s = slots.initial ? (*slots.initial)[size_t(b)] : -1;
      if (s >= 0 && !in.initial_states[size_t(b)].empty())
        write_view(pool.view().select(s), in.initial_states[size_t(b)]);
    }
    for (int32_t s = 0; s < slots.num_slots; ++s) {
      if (slots.is_final(s) && !slots.is_initial(s)) {
        std::memset(pool.view().select(s).raw(), 0xff,
                    state_size * size_t(dtype_size(layout.pool)));
      }
    }
    for (int64_t b = 0; b < B; ++b) {
      const int32_t s = slots.initial ? (*slots.initial)[size_t(b)] : -1;
      in.initial_states[size_t(b)] = s >= 0 ? to_f64(pool.view().select(s)) : std::vector<double>{};
    }
    out.pool_before = pool;
    if (slots.initial) p.initial_slots = add(testing::int32_tensor(*slots.initial));
    if (slots.final) p.final_slots = add(testing::int32_tensor(*slots.final));
  } else {
    for (auto& s : in.initial_states) s.clear();
  }
  out.reset();
  return out;
}

/// Elements of o_buffer outside o (the padding of a strided o) must still be NaN.
bool o_padding_untouched(const GdrTensors& t) {
  const int64_t used = t.params.o.size(1) * t.params.o.size(2);
  if (t.o_row == used) return true;
  return all_nan(view_into(t.o_buffer, used, {t.o_buffer.size(0), t.o_row - used}, {t.o_row, 1}));
}

// ---- The two algorithms ----

enum class Algo { kRecurrent, kChunk };
constexpr Algo kAlgos[] = {Algo::kRecurrent, Algo::kChunk};

const char* algo_name(Algo a) { return a == Algo::kRecurrent ? "recurrent" : "chunk"; }

Status run(Algo a, const GatedDeltaRuleParams& p) {
  return a == Algo::kRecurrent ? kernels::gated_delta_rule_recurrent(p)
                               : kernels::gated_delta_rule_chunk(p);
}

// ---- Random problems ----

/// One row of a case table. Slots (for B sequences, 2B + 2 slots): sequence b starts from slot 2b
/// (or from zeros when b % 3 == 1, or for every sequence when from_zero) and commits to slot
/// 2b + 1, in place to slot 2b when b % 4 == 3, or nowhere when b % 4 == 2. The last two slots
/// belong to no sequence.
struct GdrCase {
  const char* label = "";
  std::vector<int32_t> seqlens;
  int64_t H = 1, HV = 1, d_k = 32, d_v = 32;
  bool kda = false;
  GdrLayout layout = {};
  double g_lo = -0.5, g_hi = -0.01;  ///< per-step log decay range
  bool l2norm = true;
  double qk_std = 1.0;  ///< q, k ~ N(0, qk_std^2) when l2norm is on
  double scale = 0;
  bool from_zero = false;  ///< omit initial_slots
  uint32_t seed = 1;

  std::string name() const {
    std::string lens;
    for (int32_t n : seqlens) {
      if (!lens.empty()) lens += '+';
      lens += std::to_string(n);
    }
    return str_cat(label, "_T", lens, "_H", H, "_HV", HV, "_dk", d_k, "_dv", d_v,
                   kda ? "_kda" : "_gdn", "_", dtype_name(layout.act), "_o", dtype_name(layout.out),
                   "_pool", dtype_name(layout.pool), layout.strided ? "_strided" : "", "_seed",
                   seed);
  }
};

DeltaRuleInputs random_inputs(const GdrCase& c, std::mt19937& rng) {
  DeltaRuleInputs in;
  in.cu_seqlens = {0};
  for (int32_t n : c.seqlens) in.cu_seqlens.push_back(in.cu_seqlens.back() + n);
  in.T = in.cu_seqlens.back();
  in.H = c.H, in.HV = c.HV, in.d_k = c.d_k, in.d_v = c.d_v;
  in.per_channel_gate = c.kda;
  in.use_qk_l2norm = c.l2norm;
  in.scale = c.scale;
  const size_t qk = size_t(in.T * c.H * c.d_k);
  if (c.l2norm) {
    in.q = draw_normal(qk, rng, c.qk_std);
    in.k = draw_normal(qk, rng, c.qk_std);
  } else {
    // Without the in-kernel l2norm the caller keeps |k| ~ 1, so beta |k|^2 < 2 stays stable.
    in.q = draw_normal(qk, rng, 1.0 / std::sqrt(double(c.d_k)));
    in.k = draw_normal(qk, rng, 1.0 / std::sqrt(double(c.d_k)));
  }
  in.v = draw_uniform(size_t(in.T * c.HV * c.d_v), rng, -1.0, 1.0);
  in.g = draw_uniform(size_t(in.T * c.HV * (c.kda ? c.d_k : 1)), rng, c.g_lo, c.g_hi);
  in.beta = draw_uniform(size_t(in.T * c.HV), rng, 0.0, 1.0);
  return in;
}

SlotPlan slot_plan(const GdrCase& c) {
  const int32_t B = int32_t(c.seqlens.size());
  SlotPlan plan;
  plan.num_slots = 2 * B + 2;
  std::vector<int32_t> initial(static_cast<size_t>(B)), final(static_cast<size_t>(B));
  for (int32_t b = 0; b < B; ++b) {
    initial[size_t(b)] = b % 3 == 1 ? -1 : 2 * b;
    final[size_t(b)] = b % 4 == 2 ? -1 : b % 4 == 3 ? 2 * b : 2 * b + 1;
  }
  if (!c.from_zero) plan.initial = initial;
  plan.final = final;
  return plan;
}

Tolerance output_tolerance(const GdrLayout& l) {
  return l.out == DType::kBF16 ? kBf16Output : kF32Output;
}
Tolerance state_tolerance(const GdrLayout& l) {
  return l.pool == DType::kBF16 ? kBf16State : kF32State;
}

/// Checks the pool after a call: each final slot holds its sequence's reference final state, every
/// other slot is bitwise what it was.
void expect_pool(const GdrTensors& t, const SlotPlan& plan, const DeltaRuleOutputs& want,
                 Tolerance tol) {
  for (int32_t s = 0; s < plan.num_slots; ++s) {
    SCOPED_TRACE(str_cat("pool slot ", s));
    if (!plan.is_final(s)) {
      EXPECT_TRUE(same_bytes(t.slot(s), t.slot_before(s)))
          << "slot " << s << " is no sequence's final slot and must be untouched";
      continue;
    }
    const auto& f = *plan.final;
    const size_t b = size_t(std::find(f.begin(), f.end(), s) - f.begin());
    EXPECT_CLOSE(t.slot(s), want.final_states[b], tol);
  }
}

/// Runs both algorithms on a random problem and compares o and the pool with the reference.
void expect_matches_reference(const GdrCase& c) {
  SCOPED_TRACE(c.name());
  std::mt19937 rng(c.seed);
  DeltaRuleInputs in = random_inputs(c, rng);
  const SlotPlan plan = slot_plan(c);
  GdrTensors t = make_tensors(in, c.layout, plan, rng);
  const DeltaRuleOutputs want = testing::delta_rule_reference(in, /*keep_step_states=*/false);
  for (Algo algo : kAlgos) {
    SCOPED_TRACE(algo_name(algo));
    t.reset();
    ASSERT_OK(run(algo, t.params));
    EXPECT_CLOSE(t.params.o, want.o, output_tolerance(c.layout));
    EXPECT_TRUE(o_padding_untouched(t)) << "wrote outside o";
    expect_pool(t, plan, want, state_tolerance(c.layout));
  }
}

// ---- Tests: kernels against the float64 reference ----

constexpr GdrLayout kF32{};
constexpr GdrLayout kBf16{.act = DType::kBF16, .out = DType::kBF16};

TEST(GatedDeltaRuleTest, ChunkAndRecurrentMatchReference) {
  const GdrCase cases[] = {
      {.label = "single_token", .seqlens = {1}, .seed = 1},
      {.label = "two_tokens", .seqlens = {2}, .H = 1, .HV = 2, .kda = true, .seed = 2},
      {.label = "chunk_minus_1", .seqlens = {63}, .H = 1, .HV = 4, .layout = kBf16, .seed = 3},
      {.label = "one_chunk", .seqlens = {64}, .d_k = 64, .d_v = 32, .kda = true, .seed = 4},
      {.label = "chunk_plus_1_scale",
       .seqlens = {65},
       .H = 2,
       .HV = 4,
       .d_k = 32,
       .d_v = 64,
       .scale = 0.3,
       .from_zero = true,
       .seed = 5},
      {.label = "two_chunks_minus_1",
       .seqlens = {127},
       .H = 1,
       .HV = 4,
       .kda = true,
       .layout = kBf16,
       .seed = 6},
      {.label = "two_chunks_d128",
       .seqlens = {128},
       .H = 1,
       .HV = 2,
       .d_k = 128,
       .d_v = 128,
       .seed = 7},
      {.label = "two_chunks_plus_1",
       .seqlens = {129},
       .H = 2,
       .HV = 4,
       .d_k = 64,
       .d_v = 64,
       .kda = true,
       .seed = 8},
      {.label = "long", .seqlens = {1000}, .H = 1, .HV = 2, .seed = 9},
      {.label = "long", .seqlens = {1000}, .kda = true, .layout = kBf16, .seed = 10},
      {.label = "bf16_in_f32_out",
       .seqlens = {70},
       .H = 1,
       .HV = 2,
       .kda = true,
       .layout = {.act = DType::kBF16},
       .seed = 11},
      // |q|^2, |k|^2 ~ 32 * (2e-4)^2 = 1.3e-6, comparable to the l2norm eps 1e-6 inside the rsqrt.
      {.label = "tiny_qk_l2norm_eps", .seqlens = {70}, .H = 1, .HV = 2, .qk_std = 2e-4, .seed = 16},
      {.label = "no_l2norm", .seqlens = {100}, .H = 1, .HV = 2, .l2norm = false, .seed = 12},
      // Strong decay: the safe-gate range (K3 lower_bound -5). Over one chunk the cumulative log
      // decay reaches about -160 (-300 at the floor): exp of it underflows fp32 and exp of its
      // negation overflows, so a chunk algorithm must never form either factor alone.
      {.label = "safe_gate_range",
       .seqlens = {200},
       .H = 1,
       .HV = 2,
       .kda = true,
       .g_lo = -5,
       .g_hi = 0,
       .seed = 13},
      {.label = "gates_at_floor",
       .seqlens = {130},
       .kda = true,
       .g_lo = -5,
       .g_hi = -4.5,
       .seed = 14},
      {.label = "strong_scalar_decay",
       .seqlens = {130},
       .H = 1,
       .HV = 2,
       .g_lo = -5,
       .g_hi = 0,
       .seed = 15},
  };
  for (const GdrCase& c : cases) expect_matches_reference(c);
}

TEST(GatedDeltaRuleTest, VarlenMatchesReference) {
  // Each sequence has its own initial state (or zeros) and final slot (see GdrCase).
  const GdrCase cases[] = {
      {.label = "varlen", .seqlens = {1, 64, 65, 130}, .H = 1, .HV = 2, .seed = 21},
      {.label = "varlen",
       .seqlens = {130, 65, 64, 1},
       .H = 1,
       .HV = 4,
       .kda = true,
       .layout = kBf16,
       .seed = 22},
      {.label = "varlen_bf16_pool",
       .seqlens = {63, 1, 129, 2},
       .kda = true,
       .layout = {.pool = DType::kBF16},
       .seed = 23},
      {.label = "varlen_strong_decay",
       .seqlens = {200, 3, 64},
       .H = 2,
       .HV = 4,
       .layout = {.act = DType::kBF16},
       .g_lo = -5,
       .g_hi = 0,
       .seed = 24},
      {.label = "varlen_from_zero",
       .seqlens = {66, 5},
       .H = 1,
       .HV = 2,
       .kda = true,
       .from_zero = true,
       .seed = 25},
  };
  for (const GdrCase& c : cases) expect_matches_reference(c);
}

TEST(GatedDeltaRuleTest, StridedViewsMatchReference) {
  // q/k/v inside one fused [T, q | k | v | pad] buffer, g inside a wider buffer, beta interleaved
  // with another gate input (last stride 2), o inside a padded buffer; padding is NaN.
  const GdrCase cases[] = {
      {.label = "strided",
       .seqlens = {65, 64},
       .H = 1,
       .HV = 2,
       .layout = {.strided = true},
       .seed = 31},
      {.label = "strided",
       .seqlens = {3, 130},
       .H = 2,
       .HV = 4,
       .kda = true,
       .layout = {.act = DType::kBF16, .out = DType::kBF16, .strided = true},
       .seed = 32},
  };
  for (const GdrCase& c : cases) expect_matches_reference(c);
}

TEST(GatedDeltaRuleTest, NoPoolStartsFromZeroState) {
  // No slot arrays and no pool: every sequence starts from zeros and nothing is committed.
  for (Algo algo : kAlgos) {
    SCOPED_TRACE(algo_name(algo));
    const GdrCase c{.seqlens = {70, 1}, .H = 1, .HV = 2, .kda = true, .seed = 41};
    std::mt19937 rng(c.seed);
    DeltaRuleInputs in = random_inputs(c, rng);
    GdrTensors t = make_tensors(in, c.layout, SlotPlan{}, rng);
    ASSERT_OK(run(algo, t.params));
    EXPECT_CLOSE(t.params.o, testing::delta_rule_reference(in, false).o, kF32Output);
  }
}

TEST(GatedDeltaRuleTest, EmptySequenceCommitsItsInitialState) {
  // A zero-length sequence (cu_seqlens may repeat) does no arithmetic: its final slot receives
  // its initial state unchanged (or zeros without one), and its neighbours are unaffected.
  const GdrCase c{.seqlens = {3, 0, 5, 0}, .H = 1, .HV = 2, .seed = 42};
  std::mt19937 rng(c.seed);
  DeltaRuleInputs in = random_inputs(c, rng);
  SlotPlan plan{.num_slots = 8,
                .initial = std::vector<int32_t>{0, 2, 4, -1},
                .final = std::vector<int32_t>{1, 3, 5, 6}};
  GdrTensors t = make_tensors(in, kF32, plan, rng);
  const DeltaRuleOutputs want = testing::delta_rule_reference(in, false);
  for (Algo algo : kAlgos) {
    SCOPED_TRACE(algo_name(algo));
    t.reset();
    ASSERT_OK(run(algo, t.params));
    EXPECT_CLOSE(t.params.o, want.o, kF32Output);
    EXPECT_TRUE(same_bytes(t.slot(3), t.slot_before(2))) << "empty sequence 1: slot 2 -> slot 3";
    EXPECT_CLOSE(t.slot(6), std::vector<double>(size_t(in.state_size()), 0.0),
                 Tolerance{.atol = 0, .why = "the zero state, copied"});
    expect_pool(t, plan, want, kF32State);
  }
}

// ---- Tests: chunk-boundary states and per-step states ----

TEST(GatedDeltaRuleTest, ChunkStateCountAndOffsets) {
  const Tensor cu = testing::int32_tensor({0, 130, 194, 195, 260, 460});  // 130, 64, 1, 65, 200
  EXPECT_EQ(kernels::gated_delta_rule_num_chunk_states(cu), 2 + 1 + 0 + 1 + 3);
  const int64_t offsets[] = {0, 2, 3, 3, 4};
  for (int64_t b = 0; b < 5; ++b)
    EXPECT_EQ(kernels::gated_delta_rule_chunk_state_offset(cu, b), offsets[b]) << "b = " << b;
}

TEST(GatedDeltaRuleTest, ChunkBoundaryStatesMatchRecurrentStepStates) {
  // chunk_states entry offset(b) + j is sequence b's state after 64 (j + 1) tokens: the
  // recurrent's step state at token cu[b] + 64 (j + 1) - 1, and the reference's.
  const GdrCase cases[] = {
      {.label = "boundaries", .seqlens = {130, 64, 1, 65, 200}, .H = 2, .HV = 4, .seed = 51},
      {.label = "boundaries",
       .seqlens = {128, 5, 192},
       .H = 1,
       .HV = 2,
       .kda = true,
       .layout = {.act = DType::kBF16},
       .g_lo = -5,
       .g_hi = 0,
       .seed = 52},
  };
  for (const GdrCase& c : cases) {
    SCOPED_TRACE(c.name());
    std::mt19937 rng(c.seed);
    DeltaRuleInputs in = random_inputs(c, rng);
    const SlotPlan plan = slot_plan(c);
    GdrTensors t = make_tensors(in, c.layout, plan, rng);
    const DeltaRuleOutputs want = testing::delta_rule_reference(in, /*keep_step_states=*/true);
    const int64_t T = in.T, HV = in.HV, d_v = in.d_v, d_k = in.d_k;
    const size_t state_size = size_t(in.state_size());

    Tensor step_states = testing::poisoned({T, HV, d_v, d_k}, DType::kF32);
    t.params.step_states = step_states;
    ASSERT_OK(kernels::gated_delta_rule_recurrent(t.params));
    t.params.step_states = {};
    EXPECT_CLOSE(step_states, want.step_states, kF32State);

    const int64_t n = kernels::gated_delta_rule_num_chunk_states(t.params.cu_seqlens);
    Tensor chunk_states = testing::poisoned({n, HV, d_v, d_k}, DType::kF32);
    t.reset();
    t.params.chunk_states = chunk_states;
    ASSERT_OK(kernels::gated_delta_rule_chunk(t.params));
    EXPECT_CLOSE(t.params.o, want.o, kF32Output);
    expect_pool(t, plan, want, kF32State);

    int64_t checked = 0;
    for (int64_t b = 0; b < in.num_seqs(); ++b) {
      const int64_t len = in.cu_seqlens[size_t(b) + 1] - in.cu_seqlens[size_t(b)];
      const int64_t offset = kernels::gated_delta_rule_chunk_state_offset(t.params.cu_seqlens, b);
      for (int64_t j = 0; j < len / kernels::kDeltaRuleChunk; ++j, ++checked) {
        const int64_t token = in.cu_seqlens[size_t(b)] + kernels::kDeltaRuleChunk * (j + 1) - 1;
        SCOPED_TRACE(str_cat("sequence ", b, ", boundary ", j, " (token ", token, ")"));
        const TensorView entry = chunk_states.view().select(offset + j);
        EXPECT_CLOSE(entry, step_states.view().select(token), kChunkVsRecurrentState);
        const std::vector<double> ref(want.step_states.begin() + token * int64_t(state_size),
                                      want.step_states.begin() + (token + 1) * int64_t(state_size));
        EXPECT_CLOSE(entry, ref, kF32State);
      }
    }
    EXPECT_EQ(checked, n) << "every chunk_states entry must belong to a boundary";
  }
}

TEST(GatedDeltaRuleTest, RecurrentStepStatesMatchReferenceWithoutCommit) {
  // Speculative verify: a few tokens per sequence, every intermediate state kept, final_slots
  // absent, so the pool must stay bitwise unchanged. Chunk without final_slots commits nothing too.
  const GdrCase cases[] = {
      {.label = "verify", .seqlens = {4, 1, 6, 4}, .H = 2, .HV = 4, .seed = 61},
      {.label = "verify",
       .seqlens = {5, 70},
       .H = 1,
       .HV = 2,
       .kda = true,
       .layout = kBf16,
       .seed = 62},
  };
  for (const GdrCase& c : cases) {
    SCOPED_TRACE(c.name());
    std::mt19937 rng(c.seed);
    DeltaRuleInputs in = random_inputs(c, rng);
    SlotPlan plan = slot_plan(c);
    plan.final.reset();
    GdrTensors t = make_tensors(in, c.layout, plan, rng);
    const DeltaRuleOutputs want = testing::delta_rule_reference(in, /*keep_step_states=*/true);

    Tensor step_states = testing::poisoned({in.T, in.HV, in.d_v, in.d_k}, DType::kF32);
    t.params.step_states = step_states;
    ASSERT_OK(kernels::gated_delta_rule_recurrent(t.params));
    EXPECT_CLOSE(t.params.o, want.o, output_tolerance(c.layout));
    EXPECT_CLOSE(step_states, want.step_states, kF32State);
    EXPECT_TRUE(same_bytes(t.pool, t.pool_before))
        << "recurrent without final_slots wrote the pool";

    t.params.step_states = {};
    t.reset();
    ASSERT_OK(kernels::gated_delta_rule_chunk(t.params));
    EXPECT_CLOSE(t.params.o, want.o, output_tolerance(c.layout));
    EXPECT_TRUE(same_bytes(t.pool, t.pool_before)) << "chunk without final_slots wrote the pool";
  }
}

// ---- Tests: the seed's delta-rule properties, on the kernels with f32 inputs ----

/// One sequence of T tokens, H = HV = 1, zero-filled; the test fills q, k, v, g, beta.
DeltaRuleInputs one_head(int64_t T, int64_t d_k, int64_t d_v, bool kda) {
  DeltaRuleInputs in;
  in.T = T, in.H = 1, in.HV = 1, in.d_k = d_k, in.d_v = d_v;
  in.per_channel_gate = kda;
  in.q.assign(size_t(T * d_k), 0.0);
  in.k.assign(size_t(T * d_k), 0.0);
  in.v.assign(size_t(T * d_v), 0.0);
  in.g.assign(size_t(T * (kda ? d_k : 1)), 0.0);
  in.beta.assign(size_t(T), 0.0);
  in.cu_seqlens = {0, int32_t(T)};
  return in;
}

std::vector<double> unit_vector(int64_t n, std::mt19937& rng) {
  std::vector<double> x = draw_normal(size_t(n), rng);
  double norm = 0;
  for (double e : x) norm += e * e;
  for (double& e : x) e /= std::sqrt(norm);
  return x;
}

/// `count` orthonormal vectors of length n (Gram-Schmidt on random normals).
std::vector<std::vector<double>> orthonormal(int64_t count, int64_t n, std::mt19937& rng) {
  std::vector<std::vector<double>> basis;
  while (int64_t(basis.size()) < count) {
    std::vector<double> x = unit_vector(n, rng);
    for (const auto& e : basis) {
      double dot = 0;
      for (int64_t i = 0; i < n; ++i) dot += x[size_t(i)] * e[size_t(i)];
      for (int64_t i = 0; i < n; ++i) x[size_t(i)] -= dot * e[size_t(i)];
    }
    double norm = 0;
    for (double e : x) norm += e * e;
    for (double& e : x) e /= std::sqrt(norm);
    basis.push_back(std::move(x));
  }
  return basis;
}

void set_row(std::vector<double>& x, int64_t row, const std::vector<double>& values) {
  std::copy(values.begin(), values.end(), x.begin() + row * int64_t(values.size()));
}

/// k S for a state in pool layout [d_v, d_k] (one head): the value stored under key k.
std::vector<double> read_key(const std::vector<double>& state_vk, const std::vector<double>& k,
                             int64_t d_v) {
  const int64_t d_k = int64_t(k.size());
  std::vector<double> out(size_t(d_v), 0.0);
  for (int64_t i_v = 0; i_v < d_v; ++i_v)
    for (int64_t i_k = 0; i_k < d_k; ++i_k)
      out[size_t(i_v)] += k[size_t(i_k)] * state_vk[size_t(i_v * d_k + i_k)];
  return out;
}

/// Diag(exp(g)) S in pool layout: GDN g has one entry, KDA one per key channel.
std::vector<double> decayed(std::vector<double> state_vk, const double* g, bool kda, int64_t d_k) {
  for (size_t i = 0; i < state_vk.size(); ++i)
    state_vk[i] *= std::exp(g[kda ? int64_t(i) % d_k : 0]);
  return state_vk;
}

/// Pool plan for the property tests: slot 0 holds the initial state, slot 1 receives the final.
SlotPlan initial_then_final() {
  return {.num_slots = 2, .initial = std::vector<int32_t>{0}, .final = std::vector<int32_t>{1}};
}

TEST(GatedDeltaRuleTest, OverwriteReadsBackTheLatestValue) {
  // Seed (为什么 delta rule 更好): under one unit key with beta = 1, writing v1 then v2 reads back
  // v2 (plain accumulation would read v1 + v2), whatever the initial state held under that key.
  const int64_t d_k = 32, d_v = 16;
  for (bool kda : {false, true}) {
    SCOPED_TRACE(kda ? "kda" : "gdn");
    std::mt19937 rng(71);
    DeltaRuleInputs in = one_head(3, d_k, d_v, kda);
    in.scale = 1;
    const std::vector<double> key = unit_vector(d_k, rng), other = unit_vector(d_k, rng);
    const std::vector<double> v1 = draw_uniform(size_t(d_v), rng, -1, 1);
    const std::vector<double> v2 = draw_uniform(size_t(d_v), rng, -1, 1);
    // t = 0 writes v1, t = 1 writes v2 (both beta = 1, g = 0, query = key); t = 2 only reads.
    for (int64_t t = 0; t < 3; ++t) set_row(in.q, t, key);
    set_row(in.k, 0, key);
    set_row(in.k, 1, key);
    set_row(in.k, 2, other);
    set_row(in.v, 0, v1);
    set_row(in.v, 1, v2);
    set_row(in.v, 2, v1);
    in.beta = {1.0, 1.0, 0.0};
    GdrTensors t = make_tensors(in, kF32, initial_then_final(), rng);
    std::vector<double> want;
    for (const auto* v : {&v1, &v2, &v2}) want.insert(want.end(), v->begin(), v->end());
    for (Algo algo : kAlgos) {
      SCOPED_TRACE(algo_name(algo));
      t.reset();
      ASSERT_OK(run(algo, t.params));
      EXPECT_CLOSE(t.params.o, want, kProperty);
      EXPECT_CLOSE(f64_tensor(read_key(to_f64(t.slot(1)), key, d_v)), v2, kProperty);
    }
  }
}

TEST(GatedDeltaRuleTest, BetaInterpolatesOldAndNewValue) {
  // Seed (K3, b_proj): for a unit key, k S_t = (1 - beta) v_hat + beta v with v_hat = k S' the
  // value the decayed state S' held under k.
  const int64_t d_k = 32, d_v = 16;
  for (bool kda : {false, true}) {
    SCOPED_TRACE(kda ? "kda" : "gdn");
    std::mt19937 rng(kda ? 81 : 82);
    DeltaRuleInputs in = one_head(4, d_k, d_v, kda);
    for (int64_t t = 0; t < in.T; ++t) {
      set_row(in.k, t, unit_vector(d_k, rng));
      set_row(in.q, t, unit_vector(d_k, rng));
    }
    in.v = draw_uniform(in.v.size(), rng, -1, 1);
    in.g = draw_uniform(in.g.size(), rng, -1, 0);
    in.beta = draw_uniform(in.beta.size(), rng, 0.05, 0.95);
    GdrTensors t = make_tensors(in, kF32, initial_then_final(), rng);

    // Every step of the recurrent (step_states), from S_{t-1} to S_t.
    Tensor step_states = testing::poisoned({in.T, 1, d_v, d_k}, DType::kF32);
    t.params.step_states = step_states;
    ASSERT_OK(kernels::gated_delta_rule_recurrent(t.params));
    for (int64_t step = 0; step < in.T; ++step) {
      SCOPED_TRACE(str_cat("recurrent step ", step));
      const std::vector<double> prev =
          step == 0 ? in.initial_states[0] : to_f64(step_states.view().select(step - 1));
      const std::vector<double> k(in.k.begin() + step * d_k, in.k.begin() + (step + 1) * d_k);
      const double* g = &in.g[size_t(step * (kda ? d_k : 1))];
      const double beta = in.beta[size_t(step)];
      const std::vector<double> v_hat = read_key(decayed(prev, g, kda, d_k), k, d_v);
      std::vector<double> want(static_cast<size_t>(d_v));
      for (int64_t i = 0; i < d_v; ++i)
        want[size_t(i)] = (1 - beta) * v_hat[size_t(i)] + beta * in.v[size_t(step * d_v + i)];
      EXPECT_CLOSE(f64_tensor(read_key(to_f64(step_states.view().select(step)), k, d_v)), want,
                   kProperty);
    }
    t.params.step_states = {};

    // One token through each algorithm, read back from the pool.
    DeltaRuleInputs one = one_head(1, d_k, d_v, kda);
    one.q = std::vector<double>(in.q.begin(), in.q.begin() + d_k);
    one.k = std::vector<double>(in.k.begin(), in.k.begin() + d_k);
    one.v = std::vector<double>(in.v.begin(), in.v.begin() + d_v);
    one.g = std::vector<double>(in.g.begin(), in.g.begin() + (kda ? d_k : 1));
    one.beta = {in.beta[0]};
    GdrTensors t1 = make_tensors(one, kF32, initial_then_final(), rng);
    const std::vector<double> v_hat =
        read_key(decayed(one.initial_states[0], one.g.data(), kda, d_k), one.k, d_v);
    std::vector<double> want(static_cast<size_t>(d_v));
    for (int64_t i = 0; i < d_v; ++i)
      want[size_t(i)] = (1 - one.beta[0]) * v_hat[size_t(i)] + one.beta[0] * one.v[size_t(i)];
    for (Algo algo : kAlgos) {
      SCOPED_TRACE(algo_name(algo));
      t1.reset();
      ASSERT_OK(run(algo, t1.params));
      EXPECT_CLOSE(f64_tensor(read_key(to_f64(t1.slot(1)), one.k, d_v)), want, kProperty);
    }
  }
}

TEST(GatedDeltaRuleTest, OrthogonalKeysAreRecalledExactly) {
  // Seed (联想记忆): keys that are pairwise orthogonal and unit length are read back exactly,
  // k_i S = v_i. Writes use beta = 1, g = 0 from the zero state; then each key is queried by a
  // token that writes nothing (beta = 0). Keys are given at random lengths (l2norm makes them
  // unit).
  struct Keys {
    const char* name;
    int64_t count, d_k;
    bool basis;  ///< standard basis vectors (full capacity) instead of a random orthonormal set
  };
  const Keys key_sets[] = {{"random_orthonormal_8_of_32", 8, 32, false},
                           {"all_16_basis_vectors", 16, 16, true}};
  const int64_t d_v = 8;
  for (const Keys& ks : key_sets) {
    SCOPED_TRACE(ks.name);
    std::mt19937 rng(91);
    std::vector<std::vector<double>> keys = orthonormal(ks.count, ks.d_k, rng);
    if (ks.basis) {
      for (int64_t i = 0; i < ks.count; ++i) {
        keys[size_t(i)].assign(size_t(ks.d_k), 0.0);
        keys[size_t(i)][size_t((5 * i + 3) % ks.d_k)] = 1.0;  // a permutation of the basis
      }
    }
    const int64_t n = ks.count;
    DeltaRuleInputs in = one_head(2 * n, ks.d_k, d_v, /*kda=*/false);
    in.scale = 1;
    std::uniform_real_distribution<double> length(0.5, 3.0);
    std::vector<double> want_o;
    std::vector<double> want_state(size_t(d_v * ks.d_k), 0.0);
    for (int64_t i = 0; i < n; ++i) {
      const std::vector<double> v = draw_uniform(size_t(d_v), rng, -1, 1);
      std::vector<double> k = keys[size_t(i)], q = keys[size_t(i)];
      const double k_len = length(rng), q_len = length(rng);
      for (double& e : k) e *= k_len;
      for (double& e : q) e *= q_len;
      set_row(in.k, i, k);  // write token
      set_row(in.q, i, q);
      set_row(in.v, i, v);
      in.beta[size_t(i)] = 1.0;
      set_row(in.k, n + i, keys[0]);  // read token, beta = 0
      set_row(in.q, n + i, q);
      set_row(in.v, n + i, draw_uniform(size_t(d_v), rng, -1, 1));
      want_o.insert(want_o.end(), v.begin(), v.end());
      for (int64_t i_v = 0; i_v < d_v; ++i_v)
        for (int64_t c = 0; c < ks.d_k; ++c)
          want_state[size_t(i_v * ks.d_k + c)] += keys[size_t(i)][size_t(c)] * v[size_t(i_v)];
    }
    const std::vector<double> write_phase = want_o;
    want_o.insert(want_o.end(), write_phase.begin(), write_phase.end());  // reads repeat them
    GdrTensors t = make_tensors(
        in, kF32,
        SlotPlan{.num_slots = 1, .initial = std::nullopt, .final = std::vector<int32_t>{0}}, rng);
    for (Algo algo : kAlgos) {
      SCOPED_TRACE(algo_name(algo));
      t.reset();
      ASSERT_OK(run(algo, t.params));
      EXPECT_CLOSE(t.params.o, want_o, kProperty);
      EXPECT_CLOSE(t.slot(0), want_state, kProperty);
    }
  }
}

TEST(GatedDeltaRuleTest, PredictionUsesTheDecayedState) {
  // Seed (统一递归形式): v_hat = k (gamma S_{t-1}), decay first. With S_0 random, one token,
  // beta = 0.7: decay-first gives S_1 = S' + beta k^T (v - k S'); predicting from the undecayed
  // S_0 would give S' + beta k^T (v - k S_0), which differs by beta k^T k (S_0 - S').
  const int64_t d_k = 16, d_v = 8;
  for (bool kda : {false, true}) {
    SCOPED_TRACE(kda ? "kda" : "gdn");
    std::mt19937 rng(kda ? 101 : 102);
    DeltaRuleInputs in = one_head(1, d_k, d_v, kda);
    in.scale = 1;
    const std::vector<double> key = unit_vector(d_k, rng);
    in.k = key;
    in.q = key;
    in.v = draw_uniform(size_t(d_v), rng, -1, 1);
    in.g = kda ? draw_uniform(size_t(d_k), rng, -2.0, -0.1) : std::vector<double>{std::log(0.5)};
    in.beta = {0.7};
    GdrTensors t = make_tensors(in, kF32, initial_then_final(), rng);

    const std::vector<double>& s0 = in.initial_states[0];
    const std::vector<double> s_decayed = decayed(s0, in.g.data(), kda, d_k);
    auto update = [&](const std::vector<double>& predicted_from) {
      const std::vector<double> v_hat = read_key(predicted_from, key, d_v);
      std::vector<double> s = s_decayed;
      for (int64_t i_v = 0; i_v < d_v; ++i_v)
        for (int64_t c = 0; c < d_k; ++c)
          s[size_t(i_v * d_k + c)] +=
              key[size_t(c)] * 0.7 * (in.v[size_t(i_v)] - v_hat[size_t(i_v)]);
      return s;
    };
    const std::vector<double> want = update(s_decayed), undecayed_prediction = update(s0);
    double gap = 0;
    for (size_t i = 0; i < want.size(); ++i)
      gap = std::max(gap, std::fabs(want[i] - undecayed_prediction[i]));
    ASSERT_GT(gap, 1e-2) << "the case must tell the two orders apart";
    const std::vector<double> want_o = read_key(want, key, d_v);
    for (Algo algo : kAlgos) {
      SCOPED_TRACE(algo_name(algo));
      t.reset();
      ASSERT_OK(run(algo, t.params));
      EXPECT_CLOSE(t.slot(1), want, kProperty);
      EXPECT_CLOSE(t.params.o, want_o, kProperty);
    }
  }
}

// ---- Tests: the parallel (matrix) form ----

TEST(GatedDeltaRuleTest, MatrixFormMatchesRecurrence) {
  // The closed form with (I + strictly_lower(diag(beta) K K^T (.) Gamma))^-1 (seed: 矩阵形式;
  // delta_rule_matrix_form) equals the per-token recurrence in fp64, and the kernels; without the
  // inverse it does not, so the triangular solve is what the delta rule needs.
  for (bool kda : {false, true}) {
    for (int32_t T : {5, 9, 12}) {
      const GdrCase c{.label = "matrix_form",
                      .seqlens = {T},
                      .H = 1,
                      .HV = 2,
                      .d_k = 8,
                      .d_v = 6,
                      .kda = kda,
                      .g_lo = -1.0,
                      .g_hi = -0.01,
                      .seed = uint32_t(110 + T)};
      SCOPED_TRACE(c.name());
      std::mt19937 rng(c.seed);
      DeltaRuleInputs in = random_inputs(c, rng);
      const SlotPlan plan = initial_then_final();
      GdrTensors t = make_tensors(in, kF32, plan, rng);
      const DeltaRuleOutputs recurrence = testing::delta_rule_reference(in, false);
      const DeltaRuleOutputs closed = testing::delta_rule_matrix_form(in);
      EXPECT_CLOSE(f64_tensor(closed.o), recurrence.o, kFp64);
      EXPECT_CLOSE(f64_tensor(closed.final_states[0]), recurrence.final_states[0], kFp64);

      const DeltaRuleOutputs no_inverse = testing::delta_rule_matrix_form(in, false);
      double gap = 0;
      for (size_t i = 0; i < closed.o.size(); ++i)
        gap = std::max(gap, std::fabs(closed.o[i] - no_inverse.o[i]));
      EXPECT_GT(gap, 1e-3) << "dropping the inverse must change the outputs";

      for (Algo algo : kAlgos) {
        SCOPED_TRACE(algo_name(algo));
        t.reset();
        ASSERT_OK(run(algo, t.params));
        EXPECT_CLOSE(t.params.o, closed.o, kProperty);
        EXPECT_CLOSE(t.slot(1), closed.final_states[0], kProperty);
      }
    }
  }
}

// ---- Tests: argument checks ----

TEST(GatedDeltaRuleTest, BadArgumentsGiveClearErrors) {
  // Baseline: T = 70 in two sequences (66 + 4: one chunk-boundary state), H = 1, HV = 2,
  // d_k = d_v = 8, four slots. Each case breaks one thing; the pool and o must stay untouched.
  const GdrCase c{.seqlens = {66, 4}, .H = 1, .HV = 2, .d_k = 8, .d_v = 8, .seed = 121};
  std::mt19937 rng(c.seed);
  DeltaRuleInputs in = random_inputs(c, rng);
  GdrTensors t = make_tensors(
      in, kF32,
      {.num_slots = 4, .initial = std::vector<int32_t>{0, 1}, .final = std::vector<int32_t>{2, 3}},
      rng);
  for (Algo algo : kAlgos) {
    SCOPED_TRACE(algo_name(algo));
    t.reset();
    ASSERT_OK(run(algo, t.params));  // the baseline is valid
  }

  std::vector<Tensor> keep;  // buffers of the replacement tensors
  auto tensor = [&](std::initializer_list<int64_t> shape, DType dtype) -> TensorView {
    keep.push_back(Tensor::zeros(shape, dtype));
    return keep.back();
  };
  auto slots = [&](std::vector<int32_t> ids) -> TensorView {
    keep.push_back(testing::int32_tensor(ids));
    return keep.back();
  };
  auto strided_q = [&]() {  // last-dim stride 2
    keep.push_back(Tensor::zeros({70, 1, 16}, DType::kF32));
    return view_into(keep.back(), 0, {70, 1, 8}, {16, 16, 2});
  };
  constexpr bool kBoth[] = {true, true}, kRecurrentOnly[] = {true, false},
                 kChunkOnly[] = {false, true};
  struct BadCase {
    const char* name;
    std::function<void(GatedDeltaRuleParams&)> breaks;
    const char* message;  ///< a substring of the expected error
    const bool* algos;    ///< {recurrent, chunk}: which entry points to call
  };
  const BadCase cases[] = {
      {"k d_k differs from q",
       [&](auto& p) {
         p.k = tensor({70, 1, 9}, DType::kF32);
       },
       "k has shape [70, 1, 9], expected [70, 1, 8] (T, H, d_k)", kBoth},
      {"k H differs from q",
       [&](auto& p) {
         p.k = tensor({70, 2, 8}, DType::kF32);
       },
       "k has shape [70, 2, 8]", kBoth},
      {"v T differs",
       [&](auto& p) {
         p.v = tensor({69, 2, 8}, DType::kF32);
       },
       "v has shape [69, 2, 8], expected [70, *, *]", kBoth},
      {"HV not a multiple of H",
       [&](auto& p) {
         p.q = tensor({70, 2, 8}, DType::kF32), p.k = tensor({70, 2, 8}, DType::kF32);
         p.v = tensor({70, 3, 8}, DType::kF32);
       },
       "HV = 3 value heads must be a multiple of H = 2", kBoth},
      {"g rank 1", [&](auto& p) { p.g = tensor({70}, DType::kF32); },
       "g has shape [70], expected [70, 2] (T, HV (GDN gate))", kBoth},
      {"GDN g wrong HV",
       [&](auto& p) {
         p.g = tensor({70, 3}, DType::kF32);
       },
       "g has shape [70, 3], expected [70, 2]", kBoth},
      {"KDA g wrong d_k",
       [&](auto& p) {
         p.g = tensor({70, 2, 7}, DType::kF32);
       },
       "expected [70, 2, 8] (T, HV, d_k (KDA gate))", kBoth},
      {"g missing", [&](auto& p) { p.g = {}; }, "g is missing", kBoth},
      {"beta wrong shape",
       [&](auto& p) {
         p.beta = tensor({70, 1}, DType::kF32);
       },
       "beta has shape [70, 1], expected [70, 2]", kBoth},
      {"o wrong shape",
       [&](auto& p) {
         p.o = tensor({70, 2, 7}, DType::kF32);
       },
       "o has shape [70, 2, 7], expected [70, 2, 8]", kBoth},
      {"g bf16",
       [&](auto& p) {
         p.g = tensor({70, 2}, DType::kBF16);
       },
       "g has dtype bf16, expected f32", kBoth},
      {"beta bf16",
       [&](auto& p) {
         p.beta = tensor({70, 2}, DType::kBF16);
       },
       "beta has dtype bf16, expected f32", kBoth},
      {"q f16",
       [&](auto& p) {
         p.q = tensor({70, 1, 8}, DType::kF16);
       },
       "q has dtype f16, expected f32 or bf16", kBoth},
      {"o f64",
       [&](auto& p) {
         p.o = tensor({70, 2, 8}, DType::kF64);
       },
       "o has dtype f64, expected f32 or bf16", kBoth},
      {"q last dim strided", [&](auto& p) { p.q = strided_q(); },
       "q must have a contiguous last dimension", kBoth},
      {"cu_seqlens out of order",
       [&](auto& p) {
         p.cu_seqlens = slots({0, 50, 40, 70});
       },
       "cu_seqlens is not non-decreasing", kBoth},
      {"cu_seqlens not starting at 0",
       [&](auto& p) {
         p.cu_seqlens = slots({4, 66, 70});
       },
       "cu_seqlens[0] is 4, expected 0", kBoth},
      {"cu_seqlens not ending at T",
       [&](auto& p) {
         p.cu_seqlens = slots({0, 66, 69});
       },
       "cu_seqlens[B] is 69, expected 70", kBoth},
      {"cu_seqlens single entry", [&](auto& p) { p.cu_seqlens = slots({0}); },
       "cu_seqlens has 1 entries, expected at least 2", kBoth},
      {"cu_seqlens i64", [&](auto& p) { p.cu_seqlens = tensor({3}, DType::kI64); },
       "cu_seqlens has dtype i64, expected i32", kBoth},
      {"cu_seqlens missing", [&](auto& p) { p.cu_seqlens = {}; }, "cu_seqlens is missing", kBoth},
      {"initial slot 7 of 4",
       [&](auto& p) {
         p.initial_slots = slots({7, 0});
       },
       "initial_slots[0] = 7 is outside [0, 4)", kBoth},
      {"final slot -2",
       [&](auto& p) {
         p.final_slots = slots({2, -2});
       },
       "final_slots[1] = -2 is outside [0, 4)", kBoth},
      {"final slot 4 of 4",
       [&](auto& p) {
         p.final_slots = slots({4, 3});
       },
       "final_slots[0] = 4 is outside [0, 4)", kBoth},
      {"slot count differs from B", [&](auto& p) { p.initial_slots = slots({0}); },
       "initial_slots has shape [1], expected [2] (B)", kBoth},
      {"slots i64", [&](auto& p) { p.final_slots = tensor({2}, DType::kI64); },
       "final_slots has dtype i64, expected i32", kBoth},
      {"two sequences write one slot",
       [&](auto& p) {
         p.final_slots = slots({3, 3});
       },
       "final_slots[1] = 3 repeats final_slots[0]", kBoth},
      {"a sequence reads a slot another one writes",
       [&](auto& p) {
         p.initial_slots = slots({0, 2});
       },
       "initial_slots[1] = 2 is written by final_slots[0]", kBoth},
      {"pool missing", [&](auto& p) { p.state_pool = {}; }, "state_pool is missing", kBoth},
      {"pool wrong d_k",
       [&](auto& p) {
         p.state_pool = tensor({4, 2, 8, 7}, DType::kF32);
       },
       "state_pool has shape [4, 2, 8, 7], expected [*, 2, 8, 8]", kBoth},
      {"pool f16",
       [&](auto& p) {
         p.state_pool = tensor({4, 2, 8, 8}, DType::kF16);
       },
       "state_pool has dtype f16, expected f32 or bf16", kBoth},
      {"step_states to chunk",
       [&](auto& p) {
         p.step_states = tensor({70, 2, 8, 8}, DType::kF32);
       },
       "step_states is a recurrent-only output", kChunkOnly},
      {"step_states wrong T",
       [&](auto& p) {
         p.step_states = tensor({69, 2, 8, 8}, DType::kF32);
       },
       "step_states has shape [69, 2, 8, 8], expected [70, 2, 8, 8]", kRecurrentOnly},
      {"step_states bf16",
       [&](auto& p) {
         p.step_states = tensor({70, 2, 8, 8}, DType::kBF16);
       },
       "step_states has dtype bf16, expected f32", kRecurrentOnly},
      {"chunk_states to recurrent",
       [&](auto& p) {
         p.chunk_states = tensor({1, 2, 8, 8}, DType::kF32);
       },
       "chunk_states is a chunk-only output", kRecurrentOnly},
      {"chunk_states wrong count",
       [&](auto& p) {
         p.chunk_states = tensor({2, 2, 8, 8}, DType::kF32);
       },
       "chunk_states has shape [2, 2, 8, 8], expected [1, 2, 8, 8]", kChunkOnly},
      {"chunk_states bf16",
       [&](auto& p) {
         p.chunk_states = tensor({1, 2, 8, 8}, DType::kBF16);
       },
       "chunk_states has dtype bf16, expected f32", kChunkOnly},
      {"negative scale", [&](auto& p) { p.scale = -1.0f; }, "scale is -1", kBoth},
      {"cp_segments above 16", [&](auto& p) { p.cp_segments = 17; },
       "cp_segments 17, expected 0 .. 16", kChunkOnly},
      {"negative cp_segments", [&](auto& p) { p.cp_segments = -1; },
       "cp_segments -1, expected 0 .. 16", kChunkOnly},
  };
  for (const BadCase& bad : cases) {
    SCOPED_TRACE(bad.name);
    for (Algo algo : kAlgos) {
      if (!bad.algos[algo == Algo::kRecurrent ? 0 : 1]) continue;
      SCOPED_TRACE(algo_name(algo));
      t.reset();
      GatedDeltaRuleParams p = t.params;
      bad.breaks(p);
      EXPECT_ERROR_CONTAINS(run(algo, p), bad.message);
      EXPECT_TRUE(same_bytes(t.pool, t.pool_before)) << "a rejected call wrote the pool";
      EXPECT_TRUE(all_nan(t.params.o)) << "a rejected call wrote o";
    }
  }
}

}  // namespace
}  // namespace hyla

namespace hyla {
namespace {

// gated_delta_rule_extend runs chunk for long sequences (and whenever boundary states are asked
// for) and recurrent for short ones; either way the results are those of the algorithm it picks.
TEST(GatedDeltaRuleTest, ExtendPicksChunkForLongSequences) {
  struct ExtendCase {
    std::vector<int32_t> seqlens;
    bool want_boundary_states;
    bool expect_chunk;
  };
  const ExtendCase cases[] = {
      {{1, 1, 1, 1}, false, false},  // decode-like: recurrent
      {{10, 4}, false, false},       // 7 tokens per sequence < kCpuChunkMinTokens
      {{130, 70}, false, true},      // 100 tokens per sequence
      {{64}, true, true},            // boundary states need the chunk algorithm
  };
  for (const ExtendCase& ec : cases) {
    const GdrCase c{.seqlens = ec.seqlens, .H = 1, .HV = 2, .d_k = 16, .d_v = 16, .seed = 5};
    SCOPED_TRACE(c.name());
    std::mt19937 rng(c.seed);
    DeltaRuleInputs in = random_inputs(c, rng);
    const int64_t B = int64_t(ec.seqlens.size());
    std::vector<int32_t> ids(static_cast<size_t>(B));
    for (int64_t b = 0; b < B; ++b) ids[size_t(b)] = int32_t(b);
    GdrTensors t = make_tensors(in, kF32, {.num_slots = B, .initial = ids, .final = ids}, rng);
    Tensor boundary;
    if (ec.want_boundary_states) {
      boundary = Tensor::empty(
          {kernels::gated_delta_rule_num_chunk_states(t.params.cu_seqlens), 2, 16, 16},
          DType::kF32);
      t.params.chunk_states = boundary;
    }
    EXPECT_EQ(kernels::gated_delta_rule_extend_uses_chunk(t.params), ec.expect_chunk);
    // The extend result equals, bit for bit, the algorithm it claims to run.
    t.reset();
    ASSERT_OK(kernels::gated_delta_rule_extend(t.params));
    const std::vector<double> extend_o = to_f64(t.params.o);
    t.reset();
    ASSERT_OK(ec.expect_chunk ? kernels::gated_delta_rule_chunk(t.params)
                              : kernels::gated_delta_rule_recurrent(t.params));
    EXPECT_EQ(extend_o, to_f64(t.params.o));
  }
  // step_states belongs to verify, not to extend.
  const GdrCase c{.seqlens = {3}, .H = 1, .HV = 1, .d_k = 8, .d_v = 8, .seed = 6};
  std::mt19937 rng(c.seed);
  DeltaRuleInputs in = random_inputs(c, rng);
  GdrTensors t = make_tensors(in, kF32, {}, rng);
  Tensor steps = Tensor::empty({3, 1, 8, 8}, DType::kF32);
  t.params.step_states = steps;
  EXPECT_ERROR_CONTAINS(kernels::gated_delta_rule_extend(t.params),
                        "step_states is a verify output");
}

}  // namespace
}  // namespace hyla

namespace hyla {
namespace {

// The tensor-core body reads bf16 q / k / v rows as they are (by TMA boxes and 16-byte copies) only
// when TMA can address them: 16-byte aligned, strides multiples of 16 bytes, heads inside tokens;
// anything else is copied to packed bf16 rows first (ChunkWorkspaceShape::bf16_copies). Shapes
// only: the views are never read.
TEST(GatedDeltaRuleTest, ChunkTakesBf16RowsAsTheyAreOnlyWhenTmaCanAddressThem) {
  const Device gpu = Device::cuda();
  constexpr int64_t T = 8, H = 2, HV = 4, d = 128, dv = 64;
  constexpr int64_t width = 2 * H * d + HV * dv;  // a fused [q | k | v] row
  std::vector<uint16_t> qkv(T * width + 64), other(T * width + 64);
  std::vector<float> f32(T * width), g(T * HV * d), beta(T * HV);
  std::vector<int32_t> cu = {0, int32_t(T)};
  // [T, heads, dim] views of `base` at element offset `at` with the given strides.
  const auto view = [&](void* base, DType dtype, int64_t at, int64_t heads, int64_t dim, int64_t st,
                        int64_t sh) {
    const int64_t shape[3] = {T, heads, dim}, stride[3] = {st, sh, 1};
    char* p = static_cast<char*>(base) + at * int64_t(dtype_size(dtype));
    return TensorView(p, dtype, 3, shape, stride, gpu);
  };
  const auto fused = [&](DType dtype, void* base, int64_t shift) {
    kernels::GatedDeltaRuleParams p;
    p.q = view(base, dtype, shift, H, d, width, d);
    p.k = view(base, dtype, shift + H * d, H, d, width, d);
    p.v = view(base, dtype, shift + 2 * H * d, HV, dv, width, dv);
    p.g = TensorView(g.data(), DType::kF32, {T, HV}, gpu);
    p.beta = TensorView(beta.data(), DType::kF32, {T, HV}, gpu);
    p.cu_seqlens = TensorView(cu.data(), DType::kI32, {2}, gpu);
    return p;
  };
  const auto copies = [](const kernels::GatedDeltaRuleParams& p) {
    const kernels::ChunkWorkspaceShape s = kernels::chunk_workspace_shape(p);
    EXPECT_TRUE(s.tensor_cores);
    return s.bf16_copies;
  };
  kernels::GatedDeltaRuleParams p = fused(DType::kBF16, qkv.data(), 0);
  EXPECT_FALSE(copies(p)) << "bf16 rows of a fused projection, as they are";
  EXPECT_TRUE(kernels::chunk_workspace_shape(p).qk_bf16_rows);
  EXPECT_TRUE(copies(fused(DType::kBF16, qkv.data(), 1))) << "rows 2 bytes off 16";
  EXPECT_TRUE(copies(fused(DType::kF32, f32.data(), 0))) << "f32 rows";
  kernels::GatedDeltaRuleParams q_heads_outside = p;  // [H][T][d] memory seen as [T, H, d]
  q_heads_outside.q = view(other.data(), DType::kBF16, 0, H, d, d, T * d);
  EXPECT_TRUE(copies(q_heads_outside)) << "heads outside tokens";
  kernels::GatedDeltaRuleParams v_odd = p;  // a token stride of 8 bytes past 16
  v_odd.v = view(other.data(), DType::kBF16, 0, HV, dv, HV * dv + 4, dv);
  EXPECT_TRUE(copies(v_odd)) << "token stride not a multiple of 16 bytes";
  // KDA enters q and k through its scaled tiles: f32 q / k need no copies when v is bf16 rows.
  kernels::GatedDeltaRuleParams kda = p;
  kda.q = view(f32.data(), DType::kF32, 0, H, d, width, d);
  kda.k = view(f32.data(), DType::kF32, H * d, H, d, width, d);
  kda.g = TensorView(g.data(), DType::kF32, {T, HV, d}, gpu);
  EXPECT_FALSE(copies(kda));
  EXPECT_FALSE(kernels::chunk_workspace_shape(kda).qk_bf16_rows) << "f32 q / k are converted";
  kda.v = v_odd.v;
  EXPECT_TRUE(copies(kda));
  // o follows the same rule: bf16 rows TMA can address leave by tensor-map stores.
  std::vector<uint16_t> o(T * HV * dv + 8);
  EXPECT_TRUE(kernels::chunk_bf16_rows(view(o.data(), DType::kBF16, 0, HV, dv, HV * dv, dv)));
  EXPECT_FALSE(kernels::chunk_bf16_rows(view(o.data(), DType::kBF16, 4, HV, dv, HV * dv, dv)))
      << "rows 8 bytes off 16";
  EXPECT_FALSE(kernels::chunk_bf16_rows(view(f32.data(), DType::kF32, 0, HV, dv, HV * dv, dv)))
      << "f32 rows";
  EXPECT_FALSE(kernels::chunk_bf16_rows(view(o.data(), DType::kBF16, 0, HV, dv, dv, T * dv)))
      << "heads outside tokens";
}

// The CUDA chunk workspace (kernels/cuda/gated_delta_rule_chunk.cu and, for the tensor-core body,
// gated_delta_rule_chunk_mma.cu): sized from shapes alone, its regions aligned and disjoint, room
// for every chunk of any lengths summing to T.
TEST(GatedDeltaRuleTest, ChunkWorkspaceRegionsAreDisjointAndHoldEveryChunk) {
  const std::vector<std::vector<int32_t>> batches = {
      {1}, {64}, {65, 0, 63}, {200, 1, 1, 1}, {0, 0}, {128, 128}, {63, 63, 63}};
  struct Body {
    bool per_channel, tensor_cores, bf16_copies;
  };
  const Body bodies[] = {{false, false, false}, {true, false, false}, {false, true, false},
                         {false, true, true},   {true, true, false},  {true, true, true}};
  for (const std::vector<int32_t>& lens : batches) {
    for (const Body& body : bodies) {
      for (const int64_t cp : {1, 4}) {  // context-parallel segments (tensor cores only)
        if (cp > 1 && !body.tensor_cores) continue;
        int64_t T = 0, chunks = 0;
        for (int32_t n : lens) {
          T += n;
          chunks += (n + kernels::kDeltaRuleChunk - 1) / kernels::kDeltaRuleChunk;
        }
        const int64_t d_k = body.tensor_cores ? 128 : 32;
        const kernels::ChunkWorkspaceShape shape{.T = T,
                                                 .B = int64_t(lens.size()),
                                                 .H = 1,
                                                 .HV = 3,
                                                 .d_k = d_k,
                                                 .d_v = body.tensor_cores ? 96 : 48,
                                                 .per_channel = body.per_channel,
                                                 .tensor_cores = body.tensor_cores,
                                                 .bf16_copies = body.bf16_copies,
                                                 .qk_bf16_rows = false,  // no layout effect
                                                 .cp_segments = cp};
        SCOPED_TRACE(str_cat("T ", T, " B ", shape.B, body.per_channel ? " kda" : " gdn",
                             body.tensor_cores ? " tensor cores" : "",
                             body.bf16_copies ? " with copies" : "", " cp ", cp));
        const kernels::ChunkWorkspaceLayout l = kernels::chunk_workspace_layout(shape);
        EXPECT_GE(l.max_chunks, chunks);
        const int64_t kc = kernels::kDeltaRuleChunk, gd = body.per_channel ? shape.d_k : 1;
        std::vector<std::pair<int64_t, int64_t>> regions = {// {start, words}, in layout order
                                                            {l.chunk_first, shape.B + 1},
                                                            {l.chunk_seq, l.max_chunks},
                                                            {l.boundary_first, shape.B}};
        if (body.tensor_cores) {
          // KDA: the scaled q / k tiles per chunk and value head; copies of v only.
          const int64_t copies = body.bf16_copies ? 1 : 0, kda = body.per_channel ? 1 : 0;
          const int64_t tile = kda * l.max_chunks * shape.HV * kc * d_k / 2;
          regions.insert(regions.end(),
                         {{l.tc_t, l.max_chunks * shape.HV * kc * kc / 2},
                          {l.tc_aqk, l.max_chunks * shape.HV * kc * kc / 2},
                          {l.tc_vec, l.max_chunks * shape.HV * std::max(4 * kc, d_k)},
                          {l.tc_kg, tile},
                          {l.tc_qg, tile},
                          {l.tc_kd, tile},
                          {l.tc_ready, l.max_chunks * shape.HV + 2},
                          {l.tc_q, copies * (1 - kda) * T * shape.H * d_k / 2},
                          {l.tc_k, copies * (1 - kda) * T * shape.H * d_k / 2},
                          {l.tc_v, copies * (T * shape.HV * shape.d_v + 1) / 2}});
          // Context parallelism: B' = B cp segments' plan, transfers and initial states.
          const int64_t segs = cp > 1 ? shape.B * cp : 0, with = segs > 0 ? 1 : 0;
          regions.insert(regions.end(), {{l.cp_cu, with * (segs + 1)},
                                         {l.cp_chunk_first, with * (segs + 1)},
                                         {l.cp_boundary_first, segs},
                                         {l.cp_initial, segs},
                                         {l.cp_final, segs},
                                         {l.cp_transfer, segs * shape.HV * (d_k + shape.d_v) * d_k},
                                         {l.cp_states, segs * shape.HV * shape.d_v * d_k}});
        } else {
          regions.insert(regions.end(), {{l.w, T * shape.HV * shape.d_k},
                                         {l.u, T * shape.HV * shape.d_v},
                                         {l.qg, T * shape.HV * shape.d_k},
                                         {l.kd, T * shape.HV * shape.d_k},
                                         {l.aqk, T * shape.HV * kc},
                                         {l.decay, l.max_chunks * shape.HV * gd}});
        }
        int64_t end = 0;
        for (const auto& [start, words] : regions) {
          EXPECT_EQ(start % 64, 0) << "regions start on 256-byte boundaries";
          EXPECT_GE(start, end) << "regions overlap";
          end = start + words;
        }
        EXPECT_LE(end * 4, l.bytes);
      }
    }
  }
}

// CUDA calls keep their index tensors (cu_seqlens, slots) on the device: the entry checks their
// shape, dtype and device but never reads their values (that would synchronise, or fault). Here
// the "device" index memory holds invalid offsets and slots that a host check would reject; the
// call must get past them to the workspace check. CPU-only builds answer the same way.
TEST(GatedDeltaRuleTest, CudaChunkCallReadsNoIndexValuesOnTheHost) {
  const Device gpu = Device::cuda();
  constexpr int64_t T = 8, H = 1, HV = 2, d = 4;
  std::vector<float> act(T * HV * d), g(T * HV), beta(T * HV), pool(3 * HV * d * d);
  std::vector<int32_t> cu = {5, 99, -3}, slots = {7, 7};  // invalid if read
  kernels::GatedDeltaRuleParams p;
  p.q = TensorView(act.data(), DType::kF32, {T, H, d}, gpu);
  p.k = TensorView(act.data(), DType::kF32, {T, H, d}, gpu);
  p.v = TensorView(act.data(), DType::kF32, {T, HV, d}, gpu);
  p.o = TensorView(act.data(), DType::kF32, {T, HV, d}, gpu);
  p.g = TensorView(g.data(), DType::kF32, {T, HV}, gpu);
  p.beta = TensorView(beta.data(), DType::kF32, {T, HV}, gpu);
  p.cu_seqlens = TensorView(cu.data(), DType::kI32, {3}, gpu);
  p.state_pool = TensorView(pool.data(), DType::kF32, {3, HV, d, d}, gpu);
  p.initial_slots = TensorView(slots.data(), DType::kI32, {2}, gpu);
  p.final_slots = TensorView(slots.data(), DType::kI32, {2}, gpu);
  EXPECT_OK(kernels::check_gated_delta_rule(p, /*chunked=*/true));
  EXPECT_GT(kernels::gated_delta_rule_chunk_workspace_bytes(p), 0);
  EXPECT_ERROR_CONTAINS(kernels::gated_delta_rule_chunk(p), "workspace is missing");
  // Shapes, dtypes and devices of the index tensors are still checked.
  kernels::GatedDeltaRuleParams bad = p;
  bad.final_slots = TensorView(slots.data(), DType::kI32, {2});
  EXPECT_ERROR_CONTAINS(kernels::gated_delta_rule_chunk(bad), "final_slots");
  bad = p;
  bad.cu_seqlens = TensorView(cu.data(), DType::kI32, {1}, gpu);
  EXPECT_ERROR_CONTAINS(kernels::gated_delta_rule_chunk(bad), "cu_seqlens");
  // The CPU body needs no workspace.
  p.q = TensorView(act.data(), DType::kF32, {T, H, d});
  EXPECT_EQ(kernels::gated_delta_rule_chunk_workspace_bytes(p), 0);
}

}  // namespace
}  // namespace hyla

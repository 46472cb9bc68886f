// Depthwise causal conv (prefill and decode update) against a float64 reference: T = 1, 2, 3, 5,
// 64 with K = 4, other K, odd D, f32 / bf16 everywhere, strided views and a strided state pool,
// varlen batches with different initial states, sequences shorter than K-1 and empty ones; prefill
// == token-by-token updates bit for bit; sequences never leak; final slot -1 leaves the pool alone;
// padding rows; argument errors.
#include "kernels/causal_conv1d.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "strided_views.h"
#include "testing.h"

namespace hyla::kernels {
namespace {

using testing::Tolerance;

constexpr DType kF32 = DType::kF32, kBF16 = DType::kBF16;

// ---- float64 reference ----

double silu_reference(double x) { return x / (1.0 + std::exp(-x)); }

/// What a conv over one sequence computes, per channel c: with `input(p)` the sequence's history
/// (K-1 values, oldest first) followed by its tokens,
///   y[i] = act(bias + sum_j w[c, j] * input(i + j)),   final state = input(L .. L+K-2).
struct SequenceResult {
  std::vector<double> y;            // [L, D]
  std::vector<double> final_state;  // [D, K-1]
};

SequenceResult conv_sequence_reference(const std::vector<double>& x /*[L, D]*/,
                                       const std::vector<double>& history /*[D, K-1]*/,
                                       const std::vector<double>& weight /*[D, K]*/,
                                       const std::vector<double>& bias /*[D]*/, int64_t D, int K,
                                       bool silu) {
  const int64_t L = int64_t(x.size()) / D;
  SequenceResult r{std::vector<double>(x.size()), std::vector<double>(size_t(D * (K - 1)))};
  for (int64_t c = 0; c < D; ++c) {
    auto input = [&](int64_t p) {
      return p < K - 1 ? history[size_t(c * (K - 1) + p)] : x[size_t((p - (K - 1)) * D + c)];
    };
    for (int64_t i = 0; i < L; ++i) {
      double acc = bias[size_t(c)];
      for (int j = 0; j < K; ++j) acc += weight[size_t(c * K + j)] * input(i + j);
      r.y[size_t(i * D + c)] = silu ? silu_reference(acc) : acc;
    }
    for (int j = 0; j + 1 < K; ++j) r.final_state[size_t(c * (K - 1) + j)] = input(L + j);
  }
  return r;
}

Tolerance output_tolerance(DType y_dtype) {
  if (y_dtype == kBF16)
    return {.atol = 1e-5,
            .rtol = 5e-3,
            .why = "bf16 output: rounding is half an ulp, 2^-8 relative; fp32 compute adds ~1e-6"};
  return {.atol = 4e-6,
          .rtol = 1e-5,
          .why =
              "K + 1 <= 9 fp32 terms of magnitude <= ~2 (w ~ N(0, 0.5), inputs in [-1, 1]), each "
              "rounded by 2^-24, and silu's expf"};
}

/// The final state copies inputs: exact unless f32 inputs are rounded into a bf16 pool.
Tolerance state_tolerance(DType x_dtype, DType state_dtype) {
  if (state_dtype == kBF16 && x_dtype == kF32)
    return {.atol = 0, .rtol = 4e-3, .why = "f32 inputs rounded into the bf16 pool, 2^-8 relative"};
  return {.atol = 0, .rtol = 0, .why = "the state copies inputs the pool's dtype holds exactly"};
}

// ---- cases and inputs ----

enum class Slots { kNone, kFinalOnly, kBoth };

struct ConvCase {
  std::vector<int32_t> seqlens;
  int64_t D;
  int K;
  DType x_dtype, weight_dtype, state_dtype, y_dtype;
  bool bias;
  bool silu;
  Slots slots;
  bool strided;  // x, weight, y with padded rows at odd offsets; the pool strided over slots

  int64_t T() const {
    int64_t t = 0;
    for (int32_t len : seqlens) t += len;
    return t;
  }
  int64_t B() const { return int64_t(seqlens.size()); }
  std::string name() const {
    return str_cat("T", T(), "_B", B(), "_D", D, "_K", K, "_x", dtype_name(x_dtype), "_w",
                   dtype_name(weight_dtype), "_state", dtype_name(state_dtype), "_y",
                   dtype_name(y_dtype), bias ? "_bias" : "", silu ? "_silu" : "_linear",
                   slots == Slots::kNone        ? "_noslots"
                   : slots == Slots::kFinalOnly ? "_finalonly"
                                                : "",
                   strided ? "_strided" : "");
  }
};

const ConvCase kPrefillCases[] = {
    // one sequence, K = 4: T = 1, 2, 3 are shorter than or equal to K-1, T = 5 and 64 longer
    {{1}, 37, 4, kF32, kF32, kF32, kF32, true, true, Slots::kBoth, false},
    {{2}, 37, 4, kF32, kF32, kF32, kF32, true, true, Slots::kBoth, false},
    {{3}, 64, 4, kBF16, kBF16, kBF16, kBF16, true, true, Slots::kBoth, false},
    {{5}, 37, 4, kF32, kF32, kF32, kF32, false, true, Slots::kBoth, true},
    {{64}, 130, 4, kBF16, kF32, kBF16, kF32, true, true, Slots::kBoth, false},
    // varlen: different initial states, zero history (-1), empty and short sequences, final -1
    {{5, 1, 0, 64, 2, 3, 7}, 37, 4, kF32, kF32, kF32, kF32, true, true, Slots::kBoth, true},
    {{3, 2, 1, 9}, 70, 4, kBF16, kF32, kBF16, kF32, false, true, Slots::kBoth, false},
    {{1, 2, 6}, 21, 4, kF32, kBF16, kBF16, kBF16, true, false, Slots::kFinalOnly, true},
    {{8, 1}, 40, 4, kF32, kF32, kF32, kBF16, true, true, Slots::kNone, false},
    // other kernel sizes
    {{4, 4}, 16, 2, kF32, kF32, kF32, kF32, true, true, Slots::kBoth, false},
    {{6, 1}, 9, 3, kBF16, kBF16, kF32, kBF16, true, true, Slots::kBoth, true},
    {{5, 3}, 33, 1, kF32, kF32, kF32, kF32, true, true, Slots::kNone, false},
    {{9, 2}, 12, 8, kF32, kF32, kF32, kF32, false, true, Slots::kBoth, false},
};

/// One prefill call's tensors. Pool slots: 2B + 1; sequence b reads slot b (-1 when b % 3 == 1)
/// and writes slot b in place (b even), slot B + b (b odd) or nothing (b % 4 == 3); the last slot
/// is never used.
struct ConvInputs {
  ConvCase c;
  std::vector<int32_t> cu;
  std::vector<int32_t> initial, final;  // per sequence, -1 = none / skip
  Tensor x_storage, weight_storage, bias, pool_storage, y_storage, cu_seqlens;
  Tensor initial_slots, final_slots;  // made from `initial` / `final` by params()
  TensorView x, weight, pool, y;

  int64_t num_slots() const { return 2 * c.B() + 1; }
  /// The call's parameters; the views stay valid while this ConvInputs lives.
  CausalConv1dParams params() {
    initial_slots = testing::int32_tensor(initial);
    final_slots = testing::int32_tensor(final);
    CausalConv1dParams p;
    p.x = x;
    p.weight = weight;
    p.bias = bias;
    p.cu_seqlens = cu_seqlens;
    if (c.slots != Slots::kNone) p.conv_state = pool;
    if (c.slots == Slots::kBoth) p.initial_slots = initial_slots;
    if (c.slots != Slots::kNone) p.final_slots = final_slots;
    p.silu = c.silu;
    p.y = y;
    return p;
  }
};

/// [slots, D, K-1] over `storage`; strided: each slot's rows sit 5 elements apart from the next
/// slot's, as one layer's part of a larger per-slot buffer would.
TensorView pool_view(const Tensor& storage, int64_t num_slots, int64_t D, int K, bool strided) {
  const int64_t shape[] = {num_slots, D, K - 1};
  const int64_t stride[] = {D * (K - 1) + (strided ? 5 : 0), K - 1, 1};
  return TensorView(storage.view().raw(), storage.dtype(), 3, shape, stride);
}
int64_t pool_numel(int64_t num_slots, int64_t D, int K, bool strided) {
  return num_slots * (D * (K - 1) + (strided ? 5 : 0));
}

ConvInputs make_inputs(const ConvCase& c, uint32_t seed) {
  std::mt19937 rng(seed);
  ConvInputs in;
  in.c = c;
  in.cu = {0};
  for (int32_t len : c.seqlens) in.cu.push_back(in.cu.back() + len);
  for (int64_t b = 0; b < c.B(); ++b) {
    in.initial.push_back(c.slots == Slots::kBoth && b % 3 != 1 ? int32_t(b) : -1);
    in.final.push_back(c.slots == Slots::kNone || b % 4 == 3 ? -1
                       : b % 2 == 0                          ? int32_t(b)
                                                             : int32_t(c.B() + b));
  }
  const int64_t pad = c.strided ? 3 : 0, offset = c.strided ? 1 : 0;
  const std::vector<int64_t> x_shape = {c.T(), c.D}, w_shape = {c.D, c.K};
  in.x_storage =
      testing::random_uniform({testing::padded_numel(x_shape, pad, offset)}, c.x_dtype, rng);
  in.x = testing::padded_view(in.x_storage, x_shape, pad, offset);
  in.weight_storage = testing::random_normal({testing::padded_numel(w_shape, pad, offset)},
                                             c.weight_dtype, rng, 0.0f, 0.5f);
  in.weight = testing::padded_view(in.weight_storage, w_shape, pad, offset);
  if (c.bias) in.bias = testing::random_normal({c.D}, c.weight_dtype, rng, 0.0f, 0.5f);
  in.pool_storage = testing::random_uniform({pool_numel(in.num_slots(), c.D, c.K, c.strided)},
                                            c.state_dtype, rng);
  in.pool = pool_view(in.pool_storage, in.num_slots(), c.D, c.K, c.strided);
  in.y_storage = testing::poisoned({testing::padded_numel(x_shape, 2 * pad, offset)}, c.y_dtype);
  in.y = testing::padded_view(in.y_storage, x_shape, 2 * pad, offset);
  in.cu_seqlens = testing::int32_tensor(in.cu);
  return in;
}

/// The reference for every sequence, from the pool as it is now (call before the kernel).
std::vector<SequenceResult> prefill_reference(const ConvInputs& in) {
  const int64_t D = in.c.D;
  const int K = in.c.K;
  const std::vector<double> x = testing::to_f64(in.x), weight = testing::to_f64(in.weight);
  const std::vector<double> bias =
      in.c.bias ? testing::to_f64(in.bias) : std::vector<double>(size_t(D), 0.0);
  std::vector<SequenceResult> results;
  for (int64_t b = 0; b < in.c.B(); ++b) {
    const std::vector<double> history = in.initial[size_t(b)] >= 0
                                            ? testing::to_f64(in.pool.select(in.initial[size_t(b)]))
                                            : std::vector<double>(size_t(D * (K - 1)), 0.0);
    const std::vector<double> x_seq(x.begin() + in.cu[size_t(b)] * D,
                                    x.begin() + in.cu[size_t(b + 1)] * D);
    results.push_back(conv_sequence_reference(x_seq, history, weight, bias, D, K, in.c.silu));
  }
  return results;
}

/// Calls fn(bytes) with the first byte of every element of a host view, strides honoured.
template <typename Fn>
void for_each_element(const TensorView& t, Fn fn) {
  const int64_t size = dtype_size(t.dtype());
  std::vector<int64_t> idx(size_t(t.ndim()), 0);
  for (int64_t i = 0; i < t.numel(); ++i) {
    int64_t offset = 0;
    for (int d = 0; d < t.ndim(); ++d) offset += idx[size_t(d)] * t.stride(d);
    fn(static_cast<uint8_t*>(t.raw()) + offset * size);
    for (int d = t.ndim() - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < t.size(d)) break;
      idx[size_t(d)] = 0;
    }
  }
}

/// Flips the sign bit of every element of a float view (f32 or bf16, little-endian): a change
/// that cannot leave a nonzero input equal to itself.
void negate(const TensorView& t) {
  const int64_t size = dtype_size(t.dtype());
  for_each_element(t, [&](uint8_t* bytes) { bytes[size - 1] ^= 0x80; });
}

/// Sets every element of a float view to +0.
void set_zero(const TensorView& t) {
  const int64_t size = dtype_size(t.dtype());
  for_each_element(t, [&](uint8_t* bytes) { std::memset(bytes, 0, size_t(size)); });
}

// ---- prefill ----

TEST(CausalConv1dTest, PrefillMatchesFloat64Reference) {
  uint32_t seed = 0;
  for (const ConvCase& c : kPrefillCases) {
    SCOPED_TRACE(c.name());
    ConvInputs in = make_inputs(c, ++seed);
    const std::vector<SequenceResult> want = prefill_reference(in);
    const Tensor pool_before = in.pool_storage.clone();
    const TensorView pool_before_view = pool_view(pool_before, in.num_slots(), c.D, c.K, c.strided);
    ASSERT_OK(causal_conv1d(in.params()));

    std::vector<bool> written(size_t(in.num_slots()), false);
    for (int64_t b = 0; b < c.B(); ++b) {
      SCOPED_TRACE(str_cat("sequence ", b, " of length ", c.seqlens[size_t(b)]));
      EXPECT_CLOSE(in.y.slice(in.cu[size_t(b)], in.cu[size_t(b + 1)]), want[size_t(b)].y,
                   output_tolerance(c.y_dtype));
      const int32_t final_slot = in.final[size_t(b)];
      if (final_slot < 0) continue;
      written[size_t(final_slot)] = true;
      EXPECT_CLOSE(in.pool.select(final_slot), want[size_t(b)].final_state,
                   state_tolerance(c.x_dtype, c.state_dtype));
    }
    for (int64_t s = 0; s < in.num_slots(); ++s) {
      if (written[size_t(s)]) continue;
      SCOPED_TRACE(str_cat("unwritten slot ", s));
      EXPECT_TRUE(testing::bitwise_equal(in.pool.select(s), pool_before_view.select(s)));
    }
    EXPECT_TRUE(testing::untouched_outside(in.y_storage, in.y));
  }
}

TEST(CausalConv1dTest, PrefillWithInitialStateEqualsTokenByTokenUpdate) {
  // Both paths share the same windows and fused multiply-adds, so outputs and final states must
  // agree bit for bit. x and the pool share a dtype, so the update's state round trip is exact.
  const ConvCase cases[] = {
      {{5, 1, 0, 2, 3, 64, 7}, 37, 4, kF32, kF32, kF32, kF32, true, true, Slots::kBoth, true},
      {{1, 2, 3, 9}, 70, 4, kBF16, kF32, kBF16, kBF16, false, true, Slots::kBoth, false},
      {{4, 1}, 19, 3, kBF16, kBF16, kBF16, kF32, true, false, Slots::kBoth, false},
  };
  uint32_t seed = 20;
  for (const ConvCase& c : cases) {
    SCOPED_TRACE(c.name());
    ConvInputs prefill = make_inputs(c, ++seed);
    ConvInputs update = make_inputs(c, seed);  // same seed: the same inputs and pool
    // every sequence writes its state back to its own slot; sequences without an initial state
    // start from zeros, which the update path reads from a zeroed slot
    for (int64_t b = 0; b < c.B(); ++b) {
      prefill.final[size_t(b)] = update.final[size_t(b)] = int32_t(b);
      if (prefill.initial[size_t(b)] < 0) set_zero(update.pool.select(b));
    }
    ASSERT_OK(causal_conv1d(prefill.params()));

    const int64_t B = c.B(), D = c.D;
    const int64_t x_row_bytes = D * dtype_size(c.x_dtype), y_row_bytes = D * dtype_size(c.y_dtype);
    Tensor x_step = Tensor::zeros({B, D}, c.x_dtype);
    Tensor y_steps = testing::poisoned({c.T(), D}, c.y_dtype);  // row t = token t's output
    int32_t longest = 0;
    for (int32_t len : c.seqlens) longest = std::max(longest, len);
    for (int32_t i = 0; i < longest; ++i) {
      std::vector<int32_t> slots(size_t(B), -1);
      for (int64_t b = 0; b < B; ++b) {
        if (i >= c.seqlens[size_t(b)]) continue;  // finished: a padding row
        slots[size_t(b)] = int32_t(b);
        std::memcpy(x_step.view().select(b).raw(), update.x.select(update.cu[size_t(b)] + i).raw(),
                    size_t(x_row_bytes));
      }
      Tensor y_step = testing::poisoned({B, D}, c.y_dtype);
      CausalConv1dUpdateParams p;
      p.x = x_step;
      p.weight = update.weight;
      p.bias = update.bias;
      p.conv_state = update.pool;
      const Tensor slots_tensor = testing::int32_tensor(slots);
      p.slots = slots_tensor;
      p.silu = c.silu;
      p.y = y_step;
      ASSERT_OK(causal_conv1d_update(p));
      for (int64_t b = 0; b < B; ++b) {
        if (slots[size_t(b)] < 0) continue;
        std::memcpy(y_steps.view().select(update.cu[size_t(b)] + i).raw(),
                    y_step.view().select(b).raw(), size_t(y_row_bytes));
      }
    }
    EXPECT_TRUE(testing::bitwise_equal(y_steps, prefill.y));
    for (int64_t b = 0; b < B; ++b) {
      SCOPED_TRACE(str_cat("slot ", b));
      EXPECT_TRUE(testing::bitwise_equal(update.pool.select(b), prefill.pool.select(b)));
    }
  }
}

TEST(CausalConv1dTest, SequencesNeverLeak) {
  // Negate one sequence's tokens and initial state: every other sequence's outputs and final state
  // must stay bit for bit the same.
  const ConvCase c = {{5, 1, 2, 64, 3, 0, 7}, 37,  4, kF32, kF32, kF32, kBF16, true, true,
                      Slots::kBoth,           true};
  SCOPED_TRACE(c.name());
  for (int64_t changed = 0; changed < c.B(); ++changed) {
    SCOPED_TRACE(str_cat("changed sequence ", changed));
    ConvInputs base = make_inputs(c, 40);
    ConvInputs other = make_inputs(c, 40);
    const int32_t begin = other.cu[size_t(changed)], end = other.cu[size_t(changed + 1)];
    negate(other.x.slice(begin, end));
    if (other.initial[size_t(changed)] >= 0)
      negate(other.pool.select(other.initial[size_t(changed)]));
    ASSERT_OK(causal_conv1d(base.params()));
    ASSERT_OK(causal_conv1d(other.params()));
    EXPECT_TRUE(testing::bitwise_equal(other.y.slice(0, begin), base.y.slice(0, begin)));
    EXPECT_TRUE(testing::bitwise_equal(other.y.slice(end, c.T()), base.y.slice(end, c.T())));
    if (end > begin) {
      EXPECT_FALSE(testing::bitwise_equal(other.y.slice(begin, end), base.y.slice(begin, end)));
    }
    for (int64_t s = 0; s < base.num_slots(); ++s) {
      if (s == base.final[size_t(changed)] || s == base.initial[size_t(changed)]) continue;
      SCOPED_TRACE(str_cat("slot ", s));
      EXPECT_TRUE(testing::bitwise_equal(other.pool.select(s), base.pool.select(s)));
    }
  }
}

TEST(CausalConv1dTest, FinalSlotMinusOneLeavesPoolUntouched) {
  // Every sequence reads an initial state and commits nothing (speculative verify style): the pool
  // must come back byte for byte, and the outputs still follow the initial states.
  const ConvCase c = {{3, 1, 6, 2}, 37,   4,    kBF16,        kF32, kBF16,
                      kF32,         true, true, Slots::kBoth, true};
  SCOPED_TRACE(c.name());
  ConvInputs in = make_inputs(c, 60);
  for (int64_t b = 0; b < c.B(); ++b) in.final[size_t(b)] = -1;
  const std::vector<SequenceResult> want = prefill_reference(in);
  const Tensor pool_before = in.pool_storage.clone();
  ASSERT_OK(causal_conv1d(in.params()));
  EXPECT_TRUE(testing::bitwise_equal(in.pool_storage, pool_before));
  for (int64_t b = 0; b < c.B(); ++b) {
    SCOPED_TRACE(str_cat("sequence ", b));
    EXPECT_CLOSE(in.y.slice(in.cu[size_t(b)], in.cu[size_t(b + 1)]), want[size_t(b)].y,
                 output_tolerance(c.y_dtype));
  }
}

// ---- decode update ----

struct UpdateCase {
  std::vector<int32_t> slots;  // per row; -1 = padding
  int64_t num_slots, D;
  int K;
  DType x_dtype, weight_dtype, state_dtype, y_dtype;
  bool bias, silu, strided;

  std::string name() const {
    return str_cat("B", slots.size(), "_slots", num_slots, "_D", D, "_K", K, "_x",
                   dtype_name(x_dtype), "_w", dtype_name(weight_dtype), "_state",
                   dtype_name(state_dtype), "_y", dtype_name(y_dtype), bias ? "_bias" : "",
                   silu ? "_silu" : "_linear", strided ? "_strided" : "");
  }
};

const UpdateCase kUpdateCases[] = {
    {{0}, 1, 37, 4, kF32, kF32, kF32, kF32, true, true, false},
    {{3, -1, 0, 5, 2}, 7, 37, 4, kF32, kF32, kF32, kF32, true, true, true},
    {{1, 0, -1}, 4, 64, 4, kBF16, kBF16, kBF16, kBF16, false, true, false},
    {{2, 4, -1, -1, 0}, 6, 21, 3, kF32, kBF16, kBF16, kF32, true, false, true},
    {{0, 1}, 2, 130, 2, kBF16, kF32, kF32, kBF16, true, true, false},
    {{-1, -1}, 3, 16, 4, kF32, kF32, kF32, kF32, true, true, false},
};

TEST(CausalConv1dTest, UpdateMatchesFloat64Reference) {
  uint32_t seed = 80;
  for (const UpdateCase& c : kUpdateCases) {
    SCOPED_TRACE(c.name());
    std::mt19937 rng(++seed);
    const int64_t B = int64_t(c.slots.size()), D = c.D;
    const int K = c.K;
    const int64_t pad = c.strided ? 3 : 0, offset = c.strided ? 1 : 0;
    const std::vector<int64_t> x_shape = {B, D}, w_shape = {D, K};
    Tensor x_storage =
        testing::random_uniform({testing::padded_numel(x_shape, pad, offset)}, c.x_dtype, rng);
    const TensorView x = testing::padded_view(x_storage, x_shape, pad, offset);
    Tensor w_storage = testing::random_normal({testing::padded_numel(w_shape, pad, 0)},
                                              c.weight_dtype, rng, 0.0f, 0.5f);
    const TensorView weight = testing::padded_view(w_storage, w_shape, pad, 0);
    Tensor bias = c.bias ? testing::random_normal({D}, c.weight_dtype, rng, 0.0f, 0.5f) : Tensor();
    Tensor pool_storage =
        testing::random_uniform({pool_numel(c.num_slots, D, K, c.strided)}, c.state_dtype, rng);
    const TensorView pool = pool_view(pool_storage, c.num_slots, D, K, c.strided);
    const Tensor pool_before = pool_storage.clone();
    const TensorView pool_before_view = pool_view(pool_before, c.num_slots, D, K, c.strided);
    Tensor y_storage =
        testing::poisoned({testing::padded_numel(x_shape, 2 * pad, offset)}, c.y_dtype);
    const TensorView y = testing::padded_view(y_storage, x_shape, 2 * pad, offset);

    const std::vector<double> x_in = testing::to_f64(x), w_in = testing::to_f64(weight);
    const std::vector<double> bias_in =
        c.bias ? testing::to_f64(bias) : std::vector<double>(size_t(D), 0.0);
    std::vector<SequenceResult> want;
    for (int64_t b = 0; b < B; ++b) {
      if (c.slots[size_t(b)] < 0) {
        want.emplace_back();
        continue;
      }
      const std::vector<double> x_row(x_in.begin() + b * D, x_in.begin() + (b + 1) * D);
      want.push_back(conv_sequence_reference(
          x_row, testing::to_f64(pool.select(c.slots[size_t(b)])), w_in, bias_in, D, K, c.silu));
    }

    CausalConv1dUpdateParams p;
    p.x = x;
    p.weight = weight;
    p.bias = bias;
    p.conv_state = pool;
    const Tensor slots = testing::int32_tensor(c.slots);
    p.slots = slots;
    p.silu = c.silu;
    p.y = y;
    ASSERT_OK(causal_conv1d_update(p));

    const Tensor poison_row = testing::poisoned({D}, c.y_dtype);
    std::vector<bool> written(size_t(c.num_slots), false);
    for (int64_t b = 0; b < B; ++b) {
      SCOPED_TRACE(str_cat("row ", b, ", slot ", c.slots[size_t(b)]));
      const int32_t slot = c.slots[size_t(b)];
      if (slot < 0) {
        EXPECT_TRUE(testing::bitwise_equal(y.select(b), poison_row));  // padding: y untouched
        continue;
      }
      written[size_t(slot)] = true;
      EXPECT_CLOSE(y.select(b), want[size_t(b)].y, output_tolerance(c.y_dtype));
      EXPECT_CLOSE(pool.select(slot), want[size_t(b)].final_state,
                   state_tolerance(c.x_dtype, c.state_dtype));
    }
    for (int64_t s = 0; s < c.num_slots; ++s) {
      if (written[size_t(s)]) continue;
      SCOPED_TRACE(str_cat("unused slot ", s));
      EXPECT_TRUE(testing::bitwise_equal(pool.select(s), pool_before_view.select(s)));
    }
    EXPECT_TRUE(testing::untouched_outside(y_storage, y));
  }
}

// ---- argument errors ----

struct ErrorCase {
  const char* name;
  std::function<Status()> call;
  const char* error;
};

TEST(CausalConv1dTest, RejectsBadArguments) {
  const ConvCase c = {{3, 5}, 16, 4, kF32, kF32, kF32, kF32, true, true, Slots::kBoth, false};
  ConvInputs in = make_inputs(c, 100);  // 5 pool slots; initial {0, -1}, final {0, 3}
  std::mt19937 rng(101);
  // the views below point into these: they must outlive the calls
  const Tensor cu_out_of_order = testing::int32_tensor({0, 5, 3, 8});
  const Tensor cu_short_total = testing::int32_tensor({0, 3, 7});
  const Tensor slots_9 = testing::int32_tensor({0, 9});
  const Tensor slots_minus_2 = testing::int32_tensor({-2, 3});
  const Tensor slots_three = testing::int32_tensor({0, 3, 4});
  const Tensor slots_2_2 = testing::int32_tensor({2, 2});
  const Tensor slots_1_0 = testing::int32_tensor({1, 0});
  Tensor weight_wide = testing::random_normal({17, 4}, kF32, rng);
  Tensor weight_long = testing::random_normal({16, 9}, kF32, rng);
  Tensor x_f16 = testing::random_normal({8, 16}, DType::kF16, rng);
  Tensor y_short = testing::poisoned({7, 16}, kF32);
  Tensor bias_long = testing::random_normal({17}, kF32, rng);
  Tensor pool_k5 = testing::random_uniform({5, 16, 4}, kF32, rng);
  const int64_t shape[] = {8, 16}, every_other[] = {32, 2};  // never read: rejected first
  const TensorView x_strided_last(in.x.raw(), kF32, 2, shape, every_other);
  const TensorView weight_on_cuda(in.weight.raw(), kF32, {16, 4}, Device::cuda(0));
  auto with = [&](const std::function<void(CausalConv1dParams&)>& change) {
    CausalConv1dParams p = in.params();
    change(p);
    return causal_conv1d(p);
  };
  const ErrorCase cases[] = {
      {"weight_shape", [&] { return with([&](auto& p) { p.weight = weight_wide; }); },
       "causal_conv1d: weight has shape [17, 4], expected [16, *] (D, K)"},
      {"kernel_too_long", [&] { return with([&](auto& p) { p.weight = weight_long; }); },
       "causal_conv1d: weight has K = 9 taps, expected 1 to 8"},
      {"x_dtype", [&] { return with([&](auto& p) { p.x = x_f16; }); },
       "causal_conv1d: x has dtype f16, expected f32 or bf16"},
      {"x_last_dim_strided", [&] { return with([&](auto& p) { p.x = x_strided_last; }); },
       "causal_conv1d: x must have a contiguous last dimension"},
      {"y_shape", [&] { return with([&](auto& p) { p.y = y_short; }); },
       "causal_conv1d: y has shape [7, 16], expected [8, 16] (T, D)"},
      {"bias_shape", [&] { return with([&](auto& p) { p.bias = bias_long; }); },
       "causal_conv1d: bias has shape [17], expected [16] (D)"},
      {"weight_device", [&] { return with([&](auto& p) { p.weight = weight_on_cuda; }); },
       "causal_conv1d: weight is on cuda:0, expected cpu"},
      {"pool_shape", [&] { return with([&](auto& p) { p.conv_state = pool_k5; }); },
       "causal_conv1d: conv_state has shape [5, 16, 4], expected [*, 16, 3] (slots, D, K-1)"},
      {"pool_missing", [&] { return with([&](auto& p) { p.conv_state = {}; }); },
       "causal_conv1d: conv_state is missing"},
      {"cu_seqlens_out_of_order",
       [&] { return with([&](auto& p) { p.cu_seqlens = cu_out_of_order; }); },
       "causal_conv1d: cu_seqlens is not non-decreasing: cu_seqlens[2] = 3 < cu_seqlens[1] = 5"},
      {"cu_seqlens_total", [&] { return with([&](auto& p) { p.cu_seqlens = cu_short_total; }); },
       "causal_conv1d: cu_seqlens[B] is 7, expected 8"},
      {"initial_slot_out_of_range",
       [&] { return with([&](auto& p) { p.initial_slots = slots_9; }); },
       "causal_conv1d: initial_slots[1] = 9 is outside [0, 5)"},
      {"final_slot_below_minus_one",
       [&] { return with([&](auto& p) { p.final_slots = slots_minus_2; }); },
       "causal_conv1d: final_slots[0] = -2 is outside [0, 5)"},
      {"slots_length", [&] { return with([&](auto& p) { p.final_slots = slots_three; }); },
       "causal_conv1d: final_slots has shape [3], expected [2] (B)"},
      {"final_slot_twice", [&] { return with([&](auto& p) { p.final_slots = slots_2_2; }); },
       "causal_conv1d: final_slots[1] = 2 repeats final_slots[0]"},
      {"reads_a_slot_another_sequence_writes",
       [&] { return with([&](auto& p) { p.final_slots = slots_1_0; }); },
       "causal_conv1d: initial_slots[0] = 0 is written by final_slots[1] in the same call"},
  };
  for (const ErrorCase& e : cases) {
    SCOPED_TRACE(e.name);
    EXPECT_ERROR_CONTAINS(e.call(), e.error);
  }
}

TEST(CausalConv1dTest, UpdateRejectsBadArguments) {
  std::mt19937 rng(102);
  const int64_t B = 2, D = 16;
  Tensor x = testing::random_uniform({B, D}, kF32, rng);
  Tensor weight = testing::random_normal({D, 4}, kF32, rng);
  Tensor pool = testing::random_uniform({3, D, 3}, kBF16, rng);
  Tensor y = testing::poisoned({B, D}, kF32);
  Tensor y_wide = testing::poisoned({B, D + 1}, kF32);
  const Tensor slots_ok = testing::int32_tensor({2, -1}), slots_3_0 = testing::int32_tensor({3, 0});
  const Tensor slots_1_1 = testing::int32_tensor({1, 1}), slots_one = testing::int32_tensor({0});
  auto with = [&](const std::function<void(CausalConv1dUpdateParams&)>& change) {
    CausalConv1dUpdateParams p;
    p.x = x;
    p.weight = weight;
    p.conv_state = pool;
    p.slots = slots_ok;
    p.y = y;
    change(p);
    return causal_conv1d_update(p);
  };
  const ErrorCase cases[] = {
      {"slot_out_of_range", [&] { return with([&](auto& p) { p.slots = slots_3_0; }); },
       "causal_conv1d_update: slots[0] = 3 is outside [0, 3)"},
      {"slot_twice", [&] { return with([&](auto& p) { p.slots = slots_1_1; }); },
       "causal_conv1d_update: slots[1] = 1 repeats slots[0]"},
      {"slots_length", [&] { return with([&](auto& p) { p.slots = slots_one; }); },
       "causal_conv1d_update: slots has shape [1], expected [2] (B)"},
      {"slots_missing", [&] { return with([&](auto& p) { p.slots = {}; }); },
       "causal_conv1d_update: slots is missing"},
      {"pool_missing", [&] { return with([&](auto& p) { p.conv_state = {}; }); },
       "causal_conv1d_update: conv_state is missing"},
      {"y_shape", [&] { return with([&](auto& p) { p.y = y_wide; }); },
       "causal_conv1d_update: y has shape [2, 17], expected [2, 16] (B, D)"},
  };
  for (const ErrorCase& e : cases) {
    SCOPED_TRACE(e.name);
    EXPECT_ERROR_CONTAINS(e.call(), e.error);
  }
  EXPECT_OK(with([](auto&) {}));
}

}  // namespace
}  // namespace hyla::kernels

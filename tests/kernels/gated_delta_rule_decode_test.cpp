// Tests of the fused decode / verify step and the commit (kernels/gated_delta_rule_decode.h), CPU
// body: decode equals the separate CPU kernels (conv update, gates, recurrent, gated norm); a
// T-token commit equals T one-token calls; verify + commit equals running only the accepted
// tokens, and verify leaves both pools alone; slot -1 rows are skipped; argument errors. Cases
// cover GDN and KDA (plain and safe gate), GVA 1:1 and 2:1, f32 / bf16 activations and pools,
// with and without the fused norm.
#include "kernels/gated_delta_rule_decode.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "gated_delta_rule_decode_cases.h"
#include "kernels/causal_conv1d.h"
#include "kernels/gated_delta_rule.h"
#include "kernels/gated_rmsnorm.h"
#include "kernels/gates.h"
#include "strided_views.h"  // bitwise_equal
#include "testing.h"

namespace hyla::kernels {
namespace {

using testing::bitwise_equal;
using testing::DecodeCase;
using testing::DecodeTensors;
using testing::make_decode_tensors;
using testing::still_poisoned;
using testing::Tolerance;

constexpr DType kF32 = DType::kF32, kBF16 = DType::kBF16;

// ---- Tolerances ----
// Most comparisons here are bitwise: the fused body composes the same CPU bodies with the same
// fp32 intermediates, and a sequence's tokens go through the same per-token arithmetic however
// they are split into calls, as long as the pools hold what passes between calls exactly. Two
// things do not: a bf16 state pool (the state is rounded after every call) and f32 inputs kept in
// a bf16 conv pool (the window is rounded after every call, inside one call it is not).

/// A bf16 pool rounds the state after every one-token call, a T-token call only once at the end.
/// Each rounding moves an entry by <= 2^-9 of |S| (<~ 3 here: N(0, 0.5) plus unit-key writes);
/// the delta-rule map is non-expansive per state row, so up to 3 roundings add rather than grow;
/// the final roundings of the two sides may then land one bf16 ulp apart (2^-7 of the value).
/// Measured: <= 2^-7 absolute.
constexpr Tolerance kSplitState{
    .atol = 3 * 3.0 / 512,
    .rtol = 1.0 / 128,
    .why =
        "bf16 pool rounded between one-token calls, <= 3 x 2^-9 x |S| (|S| <~ 3), then one "
        "bf16 ulp (2^-7 relative)"};
/// o reads those states through a unit query times d_k^-1/2 (or fp32 conv outputs from a window
/// rounded to bf16, 2^-9 relative); a bf16 o is rounded, and with the fused norm normalised (whose
/// 1/rms amplifies absolute differences on small rows) and rounded again: up to two bf16 ulps.
/// Measured: <= 3.1e-2 absolute, one bf16 ulp of an |o| in [4, 8).
constexpr Tolerance kSplitOutput{
    .atol = 3e-2,
    .rtol = 1.0 / 64,
    .why =
        "o from states within kSplitState (or windows rounded to bf16), two bf16 roundings "
        "(2 ulps, 2^-6 relative) and the fused norm's 1/rms on small rows; measured <= 3.1e-2"};

/// True when splitting a sequence's tokens over several calls changes nothing: the pools hold
/// exactly what passes between calls.
bool split_is_exact(const DecodeCase& c) {
  return c.pool == kF32 && !(c.act == kF32 && c.conv == kBF16);
}

// ---- Helpers ----

/// The params of tokens [first, first + n) of sequence b alone (B = 1, T = n, commit), reading and
/// writing the given pools and writing o into the same rows of `o`.
GatedDeltaRuleDecodeParams sequence_tokens(const DecodeTensors& t, int64_t b, int64_t first,
                                           int64_t n, const Tensor& state_pool,
                                           const Tensor& conv_state, const Tensor& o) {
  const int64_t row = b * t.T + first;
  GatedDeltaRuleDecodeParams p = t.decode_params(/*commit=*/true);
  p.tokens_per_seq = n;
  p.qkv = p.qkv.slice(row, row + n);
  p.a = p.a.slice(row, row + n);
  p.b = p.b.slice(row, row + n);
  if (p.norm_gate.defined()) p.norm_gate = p.norm_gate.slice(row, row + n);
  p.slots = p.slots.slice(b, b + 1);
  p.state_pool = state_pool;
  p.conv_state = conv_state;
  p.o = o.view().slice(row, row + n);
  return p;
}

/// Pools and o after some reference computation.
struct DecodeResult {
  Tensor state_pool, conv_state, o;
};

/// One-token decode of every sequence with the separate public kernels: causal_conv1d_update (fp32
/// output), gdn_gate / kda_gate, gated_delta_rule_recurrent into an o of the activations' dtype,
/// whose rows of sequences with a slot are copied out and, with the norm, normalised in place by
/// gated_rmsnorm.
DecodeResult separate_kernels_decode(const DecodeCase& c, const DecodeTensors& t) {
  const int64_t B = t.B(), H = c.H, HV = c.HV, d_k = c.d_k, d_v = c.d_v;
  const int64_t conv_dim = t.qkv.size(1);
  DecodeResult r{t.state_pool.clone(), t.conv_state.clone(),
                 testing::poisoned({B, HV, d_v}, c.act)};
  Tensor mixed = testing::poisoned({B, conv_dim}, kF32);
  EXPECT_OK(causal_conv1d_update({.x = t.qkv,
                                  .weight = t.conv_weight,
                                  .bias = {},
                                  .conv_state = r.conv_state,
                                  .slots = t.slots,
                                  .silu = true,
                                  .y = mixed}));
  Tensor g = c.kda() ? Tensor::empty({B, HV, d_k}, kF32) : Tensor::empty({B, HV}, kF32);
  Tensor beta = Tensor::empty({B, HV}, kF32);
  if (c.kda()) {
    EXPECT_OK(kda_gate({.f = t.a,
                        .A_log = t.A_log,
                        .dt_bias = t.dt_bias,
                        .lower_bound = t.lower_bound,
                        .g = g,
                        .b = t.b,
                        .beta = beta}));
  } else {
    EXPECT_OK(gdn_gate(
        {.a = t.a, .b = t.b, .A_log = t.A_log, .dt_bias = t.dt_bias, .g = g, .beta = beta}));
  }
  std::vector<int32_t> cu(size_t(B + 1));
  for (int64_t b = 0; b <= B; ++b) cu[size_t(b)] = int32_t(b);
  const Tensor cu_seqlens = testing::int32_tensor(cu);
  // padding sequences run too (zero state, NaN q/k/v, nothing written to the pool); their o rows
  // are not copied out
  Tensor o_all = testing::poisoned({B, HV, d_v}, c.act);
  const TensorView y = mixed;
  EXPECT_OK(
      gated_delta_rule_recurrent({.q = y.narrow(1, 0, H * d_k).unflatten_last(H, d_k),
                                  .k = y.narrow(1, H * d_k, H * d_k).unflatten_last(H, d_k),
                                  .v = y.narrow(1, 2 * H * d_k, HV * d_v).unflatten_last(HV, d_v),
                                  .g = g,
                                  .beta = beta,
                                  .cu_seqlens = cu_seqlens,
                                  .state_pool = r.state_pool,
                                  .initial_slots = t.slots,
                                  .final_slots = t.slots,
                                  .use_qk_l2norm = true,
                                  .scale = t.scale,
                                  .o = o_all,
                                  .step_states = {},
                                  .chunk_states = {},
                                  .workspace = {}}));
  const int64_t row_bytes = HV * d_v * dtype_size(c.act);
  for (int64_t b = 0; b < B; ++b) {
    if (t.slots.data<int32_t>()[b] < 0) continue;
    const TensorView o_row = r.o.view().slice(b, b + 1);
    std::memcpy(o_row.raw(), o_all.view().slice(b, b + 1).raw(), size_t(row_bytes));
    if (c.norm) {
      EXPECT_OK(gated_rmsnorm({.x = o_row,
                               .gate = t.norm_gate.view().slice(b, b + 1),
                               .weight = t.norm_weight,
                               .eps = t.norm_eps,
                               .act = t.norm_act,
                               .y = o_row}));
    }
  }
  return r;
}

/// The 48-case grid at d_k = d_v = 32, plus d_k != d_v, d = 64 and an explicit scale.
std::vector<DecodeCase> cpu_cases() {
  std::vector<DecodeCase> cases = testing::decode_case_grid(32);
  cases.push_back({.gate = testing::DecodeGate::kKda,
                   .H = 1,
                   .HV = 2,
                   .d_k = 32,
                   .d_v = 64,
                   .act = kBF16,
                   .pool = kF32,
                   .conv = kBF16,
                   .norm = true});
  cases.push_back({.gate = testing::DecodeGate::kGdn,
                   .H = 2,
                   .HV = 4,
                   .d_k = 64,
                   .d_v = 32,
                   .act = kF32,
                   .pool = kBF16,
                   .conv = kF32,
                   .norm = false,
                   .scale = 0.25f});
  cases.push_back({.gate = testing::DecodeGate::kKdaSafe,
                   .H = 1,
                   .HV = 1,
                   .d_k = 64,
                   .d_v = 64,
                   .act = kF32,
                   .pool = kF32,
                   .conv = kBF16,  // f32 inputs rounded into a bf16 conv pool
                   .norm = true});
  return cases;
}

// ---- Tests ----

TEST(GatedDeltaRuleDecodeTest, DecodeEqualsSeparateKernels) {
  // T = 1, four sequences (one padding), slots permuted over six; every case with the conv pool in
  // either dtype. Same fp32 arithmetic on both sides: o and both pools bitwise equal.
  uint32_t seed = 100;
  for (DecodeCase c : cpu_cases()) {
    for (DType conv : {kF32, kBF16}) {
      c.conv = conv;
      SCOPED_TRACE(str_cat(c.name(), "_seed", seed));
      std::mt19937 rng(seed++);
      DecodeTensors t = make_decode_tensors(c, /*B=*/4, /*T=*/1, {3, -1, 0, 5}, 6, rng);
      const DecodeResult want = separate_kernels_decode(c, t);
      ASSERT_OK(gated_delta_rule_decode(t.decode_params(/*commit=*/true)));
      EXPECT_TRUE(bitwise_equal(t.o, want.o)) << "o";
      EXPECT_TRUE(bitwise_equal(t.state_pool, want.state_pool)) << "state pool";
      EXPECT_TRUE(bitwise_equal(t.conv_state, want.conv_state)) << "conv pool";
      EXPECT_TRUE(still_poisoned(t.o.view().slice(1, 2))) << "the padding row was written";
    }
  }
}

TEST(GatedDeltaRuleDecodeTest, MultiTokenCommitEqualsSingleTokenCalls) {
  // T = 3, three sequences; the same tokens one call per token (B = 1, T = 1): bitwise equal when
  // the pools hold the state exactly between calls (split_is_exact), else within kSplit*. The conv
  // pool stores each input rounded once either way: always bitwise.
  constexpr int64_t B = 3, T = 3;
  uint32_t seed = 200;
  for (const DecodeCase& c : cpu_cases()) {
    SCOPED_TRACE(str_cat(c.name(), "_seed", seed));
    std::mt19937 rng(seed++);
    DecodeTensors t = make_decode_tensors(c, B, T, {2, 0, 4}, 5, rng);
    DecodeResult one{t.state_pool.clone(), t.conv_state.clone(), t.o.clone()};
    for (int64_t b = 0; b < B; ++b)
      for (int64_t j = 0; j < T; ++j)
        ASSERT_OK(gated_delta_rule_decode(
            sequence_tokens(t, b, j, 1, one.state_pool, one.conv_state, one.o)));
    ASSERT_OK(gated_delta_rule_decode(t.decode_params(/*commit=*/true)));
    EXPECT_TRUE(bitwise_equal(t.conv_state, one.conv_state)) << "conv pool";
    if (split_is_exact(c)) {
      EXPECT_TRUE(bitwise_equal(t.state_pool, one.state_pool)) << "state pool";
      EXPECT_TRUE(bitwise_equal(t.o, one.o)) << "o";
    } else {
      EXPECT_CLOSE(t.state_pool, one.state_pool, kSplitState);
      EXPECT_CLOSE(t.o, one.o, kSplitOutput);
      // the first token sees the same state and window either way
      for (int64_t b = 0; b < B; ++b)
        EXPECT_TRUE(
            bitwise_equal(t.o.view().slice(b * T, b * T + 1), one.o.view().slice(b * T, b * T + 1)))
            << "first token of sequence " << b;
    }
  }
}

TEST(GatedDeltaRuleDecodeTest, VerifyThenCommitEqualsAcceptedTokens) {
  // T = 4 (1 + 3 drafts), sequences accepting 0, 1, 3 and 4 tokens, plus a padding sequence whose
  // accepted count (3) must be ignored. Verify leaves both pools bitwise untouched, and its step
  // state and output j equal a decode of the first j + 1 tokens; the commit then equals decoding
  // exactly the accepted tokens:
  //   - in one call of T = n per sequence: the same fp32 trajectory and one rounding, bitwise;
  //   - one token per call: bitwise when split_is_exact, else within kSplit*.
  // The verify call's first n outputs of a sequence are those of the decode calls.
  constexpr int64_t B = 5, T = 4;
  const std::vector<int32_t> slots = {4, 1, 0, 2, -1}, accepted = {0, 1, 3, 4, 3};
  uint32_t seed = 300;
  for (const DecodeCase& c : cpu_cases()) {
    SCOPED_TRACE(str_cat(c.name(), "_seed", seed));
    std::mt19937 rng(seed++);
    DecodeTensors t = make_decode_tensors(c, B, T, slots, 6, rng);
    t.accepted = testing::int32_tensor(accepted);
    const Tensor state_before = t.state_pool.clone(), conv_before = t.conv_state.clone();

    ASSERT_OK(gated_delta_rule_decode(t.decode_params(/*commit=*/false)));
    EXPECT_TRUE(bitwise_equal(t.state_pool, state_before)) << "verify wrote the state pool";
    EXPECT_TRUE(bitwise_equal(t.conv_state, conv_before)) << "verify wrote the conv pool";
    EXPECT_TRUE(still_poisoned(t.o.view().slice(4 * T, 5 * T))) << "padding o rows written";
    EXPECT_TRUE(still_poisoned(t.step_states.view().select(4))) << "padding step states written";
    // step state j and output j of a sequence: the pool slot and o after decoding its first j + 1
    // tokens in one call (bitwise, as above)
    for (int64_t b = 0; b < 4; ++b) {
      for (int64_t j = 0; j < T; ++j) {
        SCOPED_TRACE(str_cat("sequence ", b, ", token ", j));
        DecodeResult prefix{state_before.clone(), conv_before.clone(), t.o.clone()};
        prefix.o.fill_bytes(0xff);
        ASSERT_OK(gated_delta_rule_decode(
            sequence_tokens(t, b, 0, j + 1, prefix.state_pool, prefix.conv_state, prefix.o)));
        EXPECT_TRUE(bitwise_equal(t.step_states.view().select(b).select(j),
                                  prefix.state_pool.view().select(slots[size_t(b)])))
            << "step state";
        EXPECT_TRUE(bitwise_equal(t.o.view().slice(b * T + j, b * T + j + 1),
                                  prefix.o.view().slice(b * T + j, b * T + j + 1)))
            << "o";
      }
    }
    ASSERT_OK(gated_delta_rule_commit(t.commit_params()));

    // one call of T = n per sequence
    DecodeResult joint{state_before.clone(), conv_before.clone(), t.o.clone()};
    joint.o.fill_bytes(0xff);
    // one call per token
    DecodeResult split{state_before.clone(), conv_before.clone(), t.o.clone()};
    split.o.fill_bytes(0xff);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t n = accepted[size_t(b)];
      if (slots[size_t(b)] < 0 || n == 0) continue;
      ASSERT_OK(gated_delta_rule_decode(
          sequence_tokens(t, b, 0, n, joint.state_pool, joint.conv_state, joint.o)));
      for (int64_t j = 0; j < n; ++j)
        ASSERT_OK(gated_delta_rule_decode(
            sequence_tokens(t, b, j, 1, split.state_pool, split.conv_state, split.o)));
      const TensorView verify_o = t.o.view().slice(b * T, b * T + n);
      EXPECT_TRUE(bitwise_equal(verify_o, joint.o.view().slice(b * T, b * T + n)))
          << "verify o of sequence " << b << " vs one T = n decode";
      if (split_is_exact(c)) {
        EXPECT_TRUE(bitwise_equal(verify_o, split.o.view().slice(b * T, b * T + n)))
            << "verify o of sequence " << b << " vs one-token decodes";
      } else {
        EXPECT_CLOSE(verify_o, split.o.view().slice(b * T, b * T + n), kSplitOutput);
      }
    }
    EXPECT_TRUE(bitwise_equal(t.state_pool, joint.state_pool)) << "state pool vs T = n decodes";
    EXPECT_TRUE(bitwise_equal(t.conv_state, joint.conv_state)) << "conv pool vs T = n decodes";
    EXPECT_TRUE(bitwise_equal(t.conv_state, split.conv_state)) << "conv pool vs one-token decodes";
    if (split_is_exact(c)) {
      EXPECT_TRUE(bitwise_equal(t.state_pool, split.state_pool))
          << "state pool vs one-token decodes";
    } else {
      EXPECT_CLOSE(t.state_pool, split.state_pool, kSplitState);
    }
  }
}

TEST(GatedDeltaRuleDecodeTest, PaddingSlotsAreSkipped) {
  // Sequences 0 and 2 are padding (-1): decode, verify and commit leave their o rows and step
  // states poisoned and touch no slot but sequence 1's (slot 2).
  constexpr int64_t B = 3, T = 2;
  uint32_t seed = 400;
  for (const DecodeCase& c : testing::decode_case_grid(32)) {
    if (!c.norm || c.H != 1) continue;  // the skip does not depend on GVA; keep the norm on
    SCOPED_TRACE(str_cat(c.name(), "_seed", seed));
    std::mt19937 rng(seed++);
    DecodeTensors t = make_decode_tensors(c, B, T, {-1, 2, -1}, 4, rng);
    const Tensor state_before = t.state_pool.clone(), conv_before = t.conv_state.clone();
    auto other_slots_untouched = [&] {
      for (int64_t s : {0, 1, 3}) {
        EXPECT_TRUE(bitwise_equal(t.state_pool.view().select(s), state_before.view().select(s)))
            << "state slot " << s;
        EXPECT_TRUE(bitwise_equal(t.conv_state.view().select(s), conv_before.view().select(s)))
            << "conv slot " << s;
      }
    };
    auto padding_untouched = [&] {
      for (int64_t b : {0, 2}) {
        EXPECT_TRUE(still_poisoned(t.o.view().slice(b * T, (b + 1) * T))) << "o of " << b;
        EXPECT_TRUE(still_poisoned(t.step_states.view().select(b))) << "steps of " << b;
      }
    };
    ASSERT_OK(gated_delta_rule_decode(t.decode_params(/*commit=*/false)));
    padding_untouched();
    other_slots_untouched();
    t.accepted = testing::int32_tensor({2, 1, 2});  // the padding counts are ignored
    ASSERT_OK(gated_delta_rule_commit(t.commit_params()));
    padding_untouched();
    other_slots_untouched();
    t.poison_outputs();
    ASSERT_OK(gated_delta_rule_decode(t.decode_params(/*commit=*/true)));
    padding_untouched();
    other_slots_untouched();
  }
}

TEST(GatedDeltaRuleDecodeTest, RowStridedInputsEqualContiguous) {
  // qkv, a, b and norm_gate as row-strided views of one fused projection (fuse_projection: the
  // model's layout, 16-byte aligned segments with gaps of poison) against the same values in
  // contiguous tensors: decode, verify and commit give bitwise the same o, step states and pools.
  constexpr int64_t B = 3, T = 2;
  uint32_t seed = 700;
  for (const DecodeCase& c : cpu_cases()) {
    SCOPED_TRACE(str_cat(c.name(), "_seed", seed));
    std::mt19937 rng(seed++);
    const DecodeTensors host = make_decode_tensors(c, B, T, {2, -1, 0}, 4, rng);
    DecodeTensors flat = host.to(Device::cpu()), fused = host.to(Device::cpu());
    testing::fuse_projection(fused, /*gap=*/c.H);
    ASSERT_FALSE(fused.decode_params(true).qkv.is_contiguous()) << "the views are not strided";
    for (bool commit : {true, false}) {
      SCOPED_TRACE(commit ? "decode" : "verify + commit");
      flat.poison_outputs();
      fused.poison_outputs();
      ASSERT_OK(gated_delta_rule_decode(flat.decode_params(commit)));
      ASSERT_OK(gated_delta_rule_decode(fused.decode_params(commit)));
      EXPECT_TRUE(bitwise_equal(fused.o, flat.o)) << "o";
      if (!commit) {
        EXPECT_TRUE(bitwise_equal(fused.step_states, flat.step_states)) << "step states";
        ASSERT_OK(gated_delta_rule_commit(flat.commit_params()));
        ASSERT_OK(gated_delta_rule_commit(fused.commit_params()));
      }
      EXPECT_TRUE(bitwise_equal(fused.state_pool, flat.state_pool)) << "state pool";
      EXPECT_TRUE(bitwise_equal(fused.conv_state, flat.conv_state)) << "conv pool";
    }
  }
}

TEST(GatedDeltaRuleDecodeTest, RowStridedInputsNeedAlignedContiguousRows) {
  const DecodeCase c{.gate = testing::DecodeGate::kKda, .H = 1, .HV = 2, .d_k = 8, .d_v = 8};
  std::mt19937 rng(800);
  DecodeTensors t = make_decode_tensors(c, /*B=*/2, /*T=*/1, {0, 1}, 2, rng);
  const int64_t conv_dim = t.qkv.size(1);  // 32 f32 channels
  Tensor wide = testing::random_uniform({2, conv_dim + 5}, kF32, rng);
  {  // rows 37 floats apart: the second row starts 148 bytes in, not a multiple of 16
    const int64_t shape[] = {2, conv_dim}, stride[] = {conv_dim + 5, 1};
    GatedDeltaRuleDecodeParams p = t.decode_params(true);
    p.qkv = TensorView(wide.view().raw(), kF32, 2, shape, stride);
    EXPECT_ERROR_CONTAINS(gated_delta_rule_decode(p),
                          "gated_delta_rule_decode: qkv is a row-strided view whose rows do not "
                          "start 16-byte aligned (first row at address % 16 = 0, rows 148 bytes "
                          "apart)");
  }
  {  // KDA a [2, 2, 8] with its heads 12 apart: not contiguous within a row
    Tensor a_wide = testing::random_uniform({2, 2, 12}, kF32, rng);
    const int64_t shape[] = {2, 2, 8}, stride[] = {24, 12, 1};
    GatedDeltaRuleDecodeParams p = t.decode_params(true);
    p.a = TensorView(a_wide.view().raw(), kF32, 3, shape, stride);
    EXPECT_ERROR_CONTAINS(gated_delta_rule_decode(p),
                          "gated_delta_rule_decode: a [2, 2, 8] must be contiguous within a row "
                          "(only its rows may be strided): dim 1 has stride 12, expected 8");
  }
  {  // b rows overlapping (stride 1 < 2 heads)
    const int64_t shape[] = {2, 2}, stride[] = {1, 1};
    GatedDeltaRuleDecodeParams p = t.decode_params(true);
    p.b = TensorView(wide.view().raw(), kF32, 2, shape, stride);
    EXPECT_ERROR_CONTAINS(gated_delta_rule_decode(p),
                          "gated_delta_rule_decode: b [2, 2] has row stride 1, expected at least "
                          "the row's 2 elements");
  }
  {  // o stays contiguous-only
    Tensor o_wide = testing::poisoned({2, 2, 12}, kF32);
    const int64_t shape[] = {2, 2, 8}, stride[] = {24, 8, 1};
    GatedDeltaRuleDecodeParams p = t.decode_params(true);
    p.o = TensorView(o_wide.view().raw(), kF32, 3, shape, stride);
    EXPECT_ERROR_CONTAINS(gated_delta_rule_decode(p),
                          "gated_delta_rule_decode: o [2, 2, 8] must "
                          "be contiguous");
  }
}

TEST(GatedDeltaRuleDecodeTest, BadArgumentsGiveClearErrors) {
  // Baseline: KDA (so that the gate shapes are the 3-D ones), B = 2, T = 2, H = 1, HV = 2,
  // d_k = d_v = 8, three slots. Each case breaks one thing; pools and o stay untouched.
  const DecodeCase c{.gate = testing::DecodeGate::kKda, .H = 1, .HV = 2, .d_k = 8, .d_v = 8};
  std::mt19937 rng(500);
  DecodeTensors t = make_decode_tensors(c, /*B=*/2, /*T=*/2, {0, 2}, 3, rng);
  const int64_t conv_dim = t.qkv.size(1);  // 2 * 8 + 2 * 8 = 32
  std::vector<Tensor> keep;                // buffers of the replacement tensors
  auto tensor = [&](std::initializer_list<int64_t> shape, DType dtype) -> TensorView {
    keep.push_back(Tensor::zeros(shape, dtype));
    return keep.back();
  };
  auto ids = [&](std::vector<int32_t> values) -> TensorView {
    keep.push_back(testing::int32_tensor(values));
    return keep.back();
  };
  ASSERT_OK(gated_delta_rule_decode(t.decode_params(true)));  // the baseline is valid
  ASSERT_OK(gated_delta_rule_decode(t.decode_params(false)));
  ASSERT_OK(gated_delta_rule_commit(t.commit_params()));
  // duplicate slots are fine for a verify (nothing is written)
  {
    GatedDeltaRuleDecodeParams p = t.decode_params(false);
    p.slots = ids({1, 1});
    EXPECT_OK(gated_delta_rule_decode(p));
  }
  const Tensor state_before = t.state_pool.clone(), conv_before = t.conv_state.clone();

  struct BadDecode {
    const char* name;
    bool commit;
    std::function<void(GatedDeltaRuleDecodeParams&)> breaks;
    const char* message;  ///< a substring of the expected error
  };
  const BadDecode decode_cases[] = {
      {"T = 0", true, [](auto& p) { p.tokens_per_seq = 0; },
       "tokens_per_seq is 0, expected 1 to 8"},
      {"T = 9", true,
       [&](auto& p) {
         p.tokens_per_seq = 9;
         p.qkv = tensor({9, conv_dim}, kF32);
       },
       "tokens_per_seq is 9, expected 1 to 8"},
      {"rows not a multiple of T", true,
       [&](auto& p) {
         p.qkv = tensor({5, conv_dim}, kF32);
       },
       "qkv has 5 rows, not a multiple of T = 2"},
      {"qkv width inconsistent with the pool", true,
       [&](auto& p) {
         p.qkv = tensor({4, conv_dim + 8}, kF32);
       },
       "qkv has 40 channels; with HV = 2, d_v = 8, d_k = 8 it must be 2 H d_k + HV d_v"},
      {"qkv width: H does not divide HV", true,
       [&](auto& p) {
         p.qkv = tensor({4, 3 * 2 * 8 + 2 * 8}, kF32);
       },
       "for some H dividing HV"},
      {"conv K = 5", true,
       [&](auto& p) {
         p.conv_weight = tensor({conv_dim, 5}, kF32);
         p.conv_state = tensor({3, conv_dim, 4}, kF32);
       },
       "conv kernel K = 5, supported: 2 to 4"},
      {"conv pool K-1 differs from the weight", true,
       [&](auto& p) {
         p.conv_state = tensor({3, conv_dim, 2}, kF32);
       },
       "conv_state has shape [3, 32, 2], expected [3, 32, 3]"},
      {"lower_bound with a GDN gate", true,
       [&](auto& p) {
         p.a = tensor({4, 2}, kF32);
         p.dt_bias = tensor({2}, kF32);
         p.lower_bound = -5.0f;
       },
       "lower_bound (safe gate) is KDA only"},
      {"positive lower_bound", true, [](auto& p) { p.lower_bound = 1.0f; }, "lower_bound is 1"},
      {"infinite lower_bound", true,
       [](auto& p) { p.lower_bound = -std::numeric_limits<float>::infinity(); },
       "lower_bound is -inf, expected a finite value <= 0"},
      {"KDA f with the wrong d_k", true,
       [&](auto& p) {
         p.a = tensor({4, 2, 7}, kF32);
       },
       "a has shape [4, 2, 7], expected [4, 2, 8] (B T, HV, d_k (KDA f))"},
      {"KDA dt_bias per head only", true, [&](auto& p) { p.dt_bias = tensor({2}, kF32); },
       "dt_bias has shape [2], expected [2, 8] (HV, d_k)"},
      {"o wrong shape", true,
       [&](auto& p) {
         p.o = tensor({4, 2, 7}, kF32);
       },
       "o has shape [4, 2, 7], expected [4, 2, 8]"},
      {"step_states given with commit", true,
       [&](auto& p) {
         p.step_states = tensor({2, 2, 2, 8, 8}, kF32);
       },
       "step_states is the verify output (commit = false)"},
      {"step_states missing on verify", false, [](auto& p) { p.step_states = {}; },
       "step_states is missing"},
      {"arrivals of the wrong shape", true,
       [&](auto& p) {
         p.arrivals = tensor({2, 2}, DType::kI32);
       },
       "arrivals has shape [2, 2], expected [2, 1] (B, H)"},
      {"arrivals not i32", true,
       [&](auto& p) {
         p.arrivals = tensor({2, 1}, kF32);
       },
       "arrivals has dtype f32, expected i32"},
      {"workspace too small", true, [&](auto& p) { p.workspace = tensor({1}, kF32); },
       "workspace holds 4 bytes, expected at least"},
      {"workspace not f32", true, [&](auto& p) { p.workspace = tensor({1024}, kBF16); },
       "workspace has dtype bf16, expected f32"},
      {"workspace misaligned", true,
       [&](auto& p) { p.workspace = tensor({1025}, kF32).slice(1, 1025); },
       "workspace is not 16-byte aligned"},
      {"step_states of another dtype than the pool", false,
       [&](auto& p) {
         p.step_states = tensor({2, 2, 2, 8, 8}, kBF16);
       },
       "step_states has dtype bf16, expected f32"},
      {"slot out of range", true,
       [&](auto& p) {
         p.slots = ids({0, 3});
       },
       "slots[1] = 3 is outside [0, 3)"},
      {"slot below -1", false,
       [&](auto& p) {
         p.slots = ids({-2, 0});
       },
       "slots[0] = -2 is outside [0, 3)"},
      {"slots count differs from B", true, [&](auto& p) { p.slots = ids({0}); },
       "slots has shape [1], expected [2] (B)"},
      {"duplicate slots with commit", true,
       [&](auto& p) {
         p.slots = ids({1, 1});
       },
       "slots[1] = 1 repeats slots[0]"},
      {"norm gate wrong shape", true,
       [&](auto& p) {
         p.norm_weight = tensor({8}, kF32);
         p.norm_gate = tensor({4, 2, 4}, kF32);
       },
       "norm_gate has shape [4, 2, 4], expected [4, 2, 8]"},
      {"norm weight strided", true,
       [&](auto& p) {
         const int64_t shape[] = {8}, stride[] = {2};
         p.norm_weight = TensorView(tensor({16}, kF32).raw(), kF32, 1, shape, stride);
         p.norm_gate = tensor({4, 2, 8}, kF32);
       },
       "norm_weight [8] must be contiguous"},
      {"negative scale", true, [](auto& p) { p.scale = -1.0f; }, "scale is -1"},
  };
  for (const BadDecode& bad : decode_cases) {
    SCOPED_TRACE(bad.name);
    t.poison_outputs();
    GatedDeltaRuleDecodeParams p = t.decode_params(bad.commit);
    bad.breaks(p);
    EXPECT_ERROR_CONTAINS(gated_delta_rule_decode(p), bad.message);
    EXPECT_TRUE(still_poisoned(t.o)) << "a rejected call wrote o";
    EXPECT_TRUE(bitwise_equal(t.state_pool, state_before)) << "a rejected call wrote the pool";
    EXPECT_TRUE(bitwise_equal(t.conv_state, conv_before)) << "a rejected call wrote the conv pool";
  }

  struct BadCommit {
    const char* name;
    std::function<void(GatedDeltaRuleCommitParams&)> breaks;
    const char* message;
  };
  const BadCommit commit_cases[] = {
      {"accepted above T",
       [&](auto& p) {
         p.accepted = ids({0, 3});
       },
       "accepted[1] = 3 is outside [0, 2]"},
      {"accepted negative",
       [&](auto& p) {
         p.accepted = ids({-1, 0});
       },
       "accepted[0] = -1 is outside [0, 2]"},
      {"accepted missing", [](auto& p) { p.accepted = {}; }, "accepted is missing"},
      {"slot out of range",
       [&](auto& p) {
         p.slots = ids({3, 0});
       },
       "slots[0] = 3 is outside [0, 3)"},
      {"two accepting sequences share a slot",
       [&](auto& p) {
         p.slots = ids({2, 2});
       },
       "slots[1] = 2 repeats slots[0]"},
      {"step_states of another T",
       [&](auto& p) {
         p.step_states = tensor({2, 3, 2, 8, 8}, kF32);
       },
       "step_states has shape [2, 3, 2, 8, 8], expected [2, 2, 2, 8, 8]"},
      {"step_states of another dtype",
       [&](auto& p) {
         p.step_states = tensor({2, 2, 2, 8, 8}, kBF16);
       },
       "step_states has dtype bf16, expected f32"},
      {"T = 0", [](auto& p) { p.tokens_per_seq = 0; }, "tokens_per_seq is 0, expected 1 to 8"},
  };
  for (const BadCommit& bad : commit_cases) {
    SCOPED_TRACE(bad.name);
    GatedDeltaRuleCommitParams p = t.commit_params();
    bad.breaks(p);
    EXPECT_ERROR_CONTAINS(gated_delta_rule_commit(p), bad.message);
    EXPECT_TRUE(bitwise_equal(t.state_pool, state_before)) << "a rejected commit wrote the pool";
    EXPECT_TRUE(bitwise_equal(t.conv_state, conv_before))
        << "a rejected commit wrote the conv pool";
  }
  // sharing a slot is fine when at most one of the sharers accepts anything
  GatedDeltaRuleCommitParams p = t.commit_params();
  p.slots = ids({2, 2});
  p.accepted = ids({0, 2});
  EXPECT_OK(gated_delta_rule_commit(p));
}

}  // namespace
}  // namespace hyla::kernels

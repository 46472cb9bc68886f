// CUDA body of the fused decode / verify step and the commit (kernels/gated_delta_rule_decode.h)
// against the CPU body, which is the specification. Fresh random inputs every run (the seed is in
// each failure's trace; HYLA_TEST_SEED=<n> replays one). Cases: GDN and KDA (plain and safe gate),
// GVA 1:1 and 2:1, d_k = d_v = 128 (and 64), f32 / bf16 state pools and activations, with and
// without the fused gated norm, B in {1, 3, 33} (a padding slot -1 among B > 1), T in {1, 2, 4, 8},
// and B HV = 520 for the large-batch launch shape, every tiling of the CUDA body (rows per block,
// cluster size) on its own; slot ids outside the pool are skipped.
// Every element of o, the state pool, the conv pool and (verify) the step states is compared;
// padding rows must keep their poison on the GPU. qkv, a, b and norm_gate also as row-strided views
// of one fused projection (every tiling). Skipped when no CUDA device is visible.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "cuda_testing.h"
#include "kernels/cuda/gated_delta_rule_decode_tiling.h"
#include "kernels/gated_delta_rule_decode.h"
#include "kernels/gated_delta_rule_decode_cases.h"

namespace hyla::kernels {
namespace {

using testing::DecodeCase;
using testing::DecodeGate;
using testing::DecodeTensors;
using testing::still_poisoned;
using testing::Tolerance;

constexpr DType kF32 = DType::kF32, kBF16 = DType::kBF16;

// ---- Tolerances ----
// Both bodies compute in fp32 from the same rounded inputs; they differ in summation order (dot
// products over d_k = 128 split across threads) and in the libm behind expf / log1pf (a few ulp).
// Keys are unit (l2norm), |v| <~ 2, beta in [0, 1], decay <= 1: the state map is non-expansive, so
// those differences add over the <= 8 tokens instead of growing.

/// One fp32 dot product over 128 terms differs by <= ~128 x 2^-24 = 8e-6 relative to its terms in
/// the worst case (about 1e-6 typically); <= 8 tokens add such differences.
constexpr Tolerance kF32Values{
    .atol = 2e-5,
    .rtol = 2e-5,
    .why =
        "both fp32, different summation order over d_k = 128 and different expf: ~1e-5 "
        "relative, added (not grown) over <= 8 tokens"};
/// Each side rounds its fp32 value once to bf16; values a few fp32 ulp apart can round to
/// neighbouring bf16 values, one bf16 ulp apart: <= 2^-7 of the rounded value (2^-8 per rounding,
/// both sides); near zero, where bf16 ulps are tiny, the fp32 difference of kF32Values remains.
constexpr Tolerance kBf16Values{
    .atol = 2e-5,
    .rtol = 1.0 / 128,
    .why =
        "one bf16 rounding per stored element on each side: at most one bf16 ulp apart "
        "(<= 2^-7 relative), plus kF32Values near zero"};
/// With the fused norm a bf16 o is rounded twice on each side: the delta rule's o, then the norm's
/// output computed from it. The first roundings may be one ulp apart (kBf16Values), which the
/// norm carries as a 2^-7 relative difference into its output, and the second rounding may add
/// one more ulp: <= 2 bf16 ulps, 2^-6 relative.
constexpr Tolerance kBf16NormedOutput{
    .atol = 2e-5,
    .rtol = 1.0 / 64,
    .why =
        "bf16 o rounded, normalised, rounded again on each side: <= 2 bf16 ulps (2^-6 "
        "relative), plus kF32Values near zero"};
/// The conv pool receives copies of qkv values and of its own entries, each rounded once to the
/// pool's dtype by both sides.
constexpr Tolerance kExact{.atol = 0, .rtol = 0, .why = "copies of inputs, rounded alike"};

Tolerance values_tolerance(DType dtype) { return dtype == kBF16 ? kBf16Values : kF32Values; }
Tolerance output_tolerance(const DecodeCase& c) {
  return c.norm && c.act == kBF16 ? kBf16NormedOutput : values_tolerance(c.act);
}

// ---- Running both bodies ----

/// "{2, -1, 0}"
std::string list_string(const std::vector<int32_t>& values) {
  std::string s = "{";
  for (size_t i = 0; i < values.size(); ++i) s += str_cat(i ? ", " : "", values[i]);
  return s + "}";
}

/// B distinct slots out of B + 3 in random order; for B > 1 one of them is -1 (padding).
std::vector<int32_t> random_slots(int64_t B, std::mt19937& rng) {
  std::vector<int32_t> ids(size_t(B + 3));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), rng);
  ids.resize(size_t(B));
  if (B > 1) ids[size_t(rng() % uint32_t(B))] = -1;
  return ids;
}

/// o rows (and, for verify, step states) of every sequence: close to the CPU's for sequences with
/// a slot, still poisoned on the GPU for padding ones.
void expect_outputs_match(const DecodeCase& c, const DecodeTensors& gpu_back,
                          const DecodeTensors& cpu, const std::vector<int32_t>& slots,
                          bool verify) {
  const int64_t T = cpu.T;
  for (int64_t b = 0; b < int64_t(slots.size()); ++b) {
    SCOPED_TRACE(str_cat("sequence b = ", b, ", slot ", slots[size_t(b)]));
    const TensorView o_got = gpu_back.o.view().slice(b * T, (b + 1) * T);
    const TensorView o_want = cpu.o.view().slice(b * T, (b + 1) * T);
    if (slots[size_t(b)] < 0) {
      EXPECT_TRUE(still_poisoned(o_got)) << "the GPU wrote o rows of a padding sequence";
      if (verify) {
        EXPECT_TRUE(still_poisoned(gpu_back.step_states.view().select(b)))
            << "the GPU wrote step states of a padding sequence";
      }
      continue;
    }
    EXPECT_CLOSE(o_got, o_want, output_tolerance(c));
    if (verify) {
      EXPECT_CLOSE(gpu_back.step_states.view().select(b), cpu.step_states.view().select(b),
                   values_tolerance(c.pool));
    }
  }
}

void expect_pools_match(const DecodeCase& c, const DecodeTensors& gpu_back,
                        const DecodeTensors& cpu) {
  EXPECT_CLOSE(gpu_back.state_pool, cpu.state_pool, values_tolerance(c.pool)) << "state pool";
  EXPECT_CLOSE(gpu_back.conv_state, cpu.conv_state, kExact) << "conv pool";
}

/// The decode entry on the GPU, or its CUDA body with an explicit tiling.
Status gpu_decode(const GatedDeltaRuleDecodeParams& p, std::optional<cuda::DecodeTiling> tiling) {
  if (!tiling) return gated_delta_rule_decode(p);
  HYLA_RETURN_IF_ERROR(check_gated_delta_rule_decode(p));
  return cuda::gated_delta_rule_decode_tiled(p, *tiling, Stream{});
}

/// The GPU's copy of `host`; fused: its qkv, a, b and norm_gate as row-strided views of one fused
/// projection (testing::fuse_projection, the model's layout).
DecodeTensors gpu_copy(const DecodeTensors& host, bool fused) {
  DecodeTensors t = host.to(Device::cpu());
  if (fused) testing::fuse_projection(t);
  return t.to(Device::cuda());
}

/// Decode (commit), then verify + commit with random accepted counts, on both devices from the
/// same host inputs; outputs are poisoned (0xff) on both sides before each call. fused: the GPU
/// reads row-strided views of one projection, the CPU contiguous tensors.
void expect_cuda_matches_cpu(const DecodeCase& c, int64_t B, int64_t T, uint32_t seed,
                             std::optional<cuda::DecodeTiling> tiling = std::nullopt,
                             bool fused = false) {
  SCOPED_TRACE(str_cat(
      c.name(), "_B", B, "_T", T, " seed ", seed, fused ? " row-strided" : "",
      tiling ? str_cat(" tiling ", cuda::decode_tiling_name(*tiling, c.HV / c.H, c.d_v)) : ""));
  std::mt19937 rng(seed);
  const std::vector<int32_t> slots = random_slots(B, rng);
  SCOPED_TRACE(str_cat("slots ", list_string(slots)));
  const DecodeTensors host = testing::make_decode_tensors(c, B, T, slots, /*num_slots=*/B + 3, rng);

  {  // decode: T tokens, final states written back to the pools
    SCOPED_TRACE("decode (commit)");
    DecodeTensors cpu = host.to(Device::cpu()), gpu = gpu_copy(host, fused);
    cpu.poison_outputs();
    gpu.poison_outputs();
    ASSERT_OK(gated_delta_rule_decode(cpu.decode_params(/*commit=*/true)));
    ASSERT_OK(gpu_decode(gpu.decode_params(/*commit=*/true), tiling));
    const DecodeTensors back = gpu.to(Device::cpu());
    expect_outputs_match(c, back, cpu, slots, /*verify=*/false);
    expect_pools_match(c, back, cpu);
  }

  {  // verify: per-step states out, pools untouched; then commit the accepted prefixes
    SCOPED_TRACE("verify + commit");
    std::vector<int32_t> accepted(static_cast<size_t>(B));
    for (int32_t& n : accepted) n = int32_t(rng() % uint32_t(T + 1));
    DecodeTensors cpu = host.to(Device::cpu());
    cpu.accepted = testing::int32_tensor(accepted);
    DecodeTensors gpu = gpu_copy(cpu, fused);
    cpu.poison_outputs();
    gpu.poison_outputs();
    ASSERT_OK(gated_delta_rule_decode(cpu.decode_params(/*commit=*/false)));
    ASSERT_OK(gpu_decode(gpu.decode_params(/*commit=*/false), tiling));
    const DecodeTensors back = gpu.to(Device::cpu());
    expect_outputs_match(c, back, cpu, slots, /*verify=*/true);
    EXPECT_TRUE(testing::bitwise_equal(back.state_pool, host.state_pool))
        << "verify wrote the state pool on the GPU";
    EXPECT_TRUE(testing::bitwise_equal(back.conv_state, host.conv_state))
        << "verify wrote the conv pool on the GPU";

    ASSERT_OK(gated_delta_rule_commit(cpu.commit_params()));
    ASSERT_OK(gated_delta_rule_commit(gpu.commit_params()));
    SCOPED_TRACE(str_cat("accepted ", list_string(accepted)));
    expect_pools_match(c, gpu.to(Device::cpu()), cpu);
  }
}

/// Two decode steps of T tokens each (committed) in a row on the GPU with the key heads' arrival
/// counters (all zero at the start), with `tiling` (nullopt: the entry's choice), against two
/// steps on the CPU: outputs and both pools after each step (the second step reads the q/k windows
/// that the first step's last block advanced, and advances them only if the counters are back at
/// zero) and every counter back at zero.
void expect_counted_matches_cpu(const DecodeCase& c, int64_t B, int64_t T, uint32_t seed,
                                std::optional<cuda::DecodeTiling> tiling, bool overlap = false) {
  SCOPED_TRACE(str_cat(
      c.name(), "_B", B, "_T", T, overlap ? " overlapped" : "", " seed ", seed,
      tiling ? str_cat(" tiling ", cuda::decode_tiling_name(*tiling, c.HV / c.H, c.d_v)) : ""));
  std::mt19937 rng(seed);
  const std::vector<int32_t> slots = random_slots(B, rng);
  SCOPED_TRACE(str_cat("slots ", list_string(slots)));
  const DecodeTensors host = testing::make_decode_tensors(c, B, T, slots, B + 3, rng);
  DecodeTensors cpu = host.to(Device::cpu()), gpu = host.to(Device::cuda());
  const Tensor zeros = Tensor::zeros({B, c.H}, DType::kI32);
  const Tensor arrivals = zeros.to(Device::cuda());
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE(str_cat("step ", step));
    // The second step starts from the CPU's state pool on both sides (a bf16 pool's roundings may
    // differ by one ulp per step); the conv pool stays the GPU's own (its windows are copies of
    // inputs, equal on both sides when advanced right).
    if (step > 0) gpu.state_pool = cpu.state_pool.to(Device::cuda());
    cpu.poison_outputs();
    gpu.poison_outputs();
    ASSERT_OK(gated_delta_rule_decode(cpu.decode_params(/*commit=*/true)));
    GatedDeltaRuleDecodeParams p = gpu.decode_params(/*commit=*/true);
    p.arrivals = arrivals;
    p.overlap_previous = overlap;
    ASSERT_OK(gpu_decode(p, tiling));
    const DecodeTensors back = gpu.to(Device::cpu());
    expect_outputs_match(c, back, cpu, slots, /*verify=*/false);
    expect_pools_match(c, back, cpu);
    EXPECT_TRUE(testing::bitwise_equal(arrivals.to(Device::cpu()), zeros))
        << "the step left arrival counters that are not zero";
  }
}

/// Every case of `gate` in the d = 128 grid, for every B and T.
void expect_gate_matches_cpu(DecodeGate gate) {
  const uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  uint32_t n = 0;
  for (const DecodeCase& c : testing::decode_case_grid(128)) {
    if (c.gate != gate) continue;
    for (int64_t B : {1, 3, 33})
      for (int64_t T : {1, 2, 4, 8}) expect_cuda_matches_cpu(c, B, T, seed + n++);
  }
}

// ---- Tests ----

TEST(GatedDeltaRuleDecodeCudaTest, GdnMatchesCpu) {
  HYLA_SKIP_WITHOUT_CUDA();
  expect_gate_matches_cpu(DecodeGate::kGdn);
}

TEST(GatedDeltaRuleDecodeCudaTest, KdaMatchesCpu) {
  HYLA_SKIP_WITHOUT_CUDA();
  expect_gate_matches_cpu(DecodeGate::kKda);
}

TEST(GatedDeltaRuleDecodeCudaTest, KdaSafeGateMatchesCpu) {
  HYLA_SKIP_WITHOUT_CUDA();
  expect_gate_matches_cpu(DecodeGate::kKdaSafe);
}

TEST(GatedDeltaRuleDecodeCudaTest, HeadDim64MatchesCpu) {
  HYLA_SKIP_WITHOUT_CUDA();
  const uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  const DecodeCase cases[] = {
      {.gate = DecodeGate::kGdn,
       .H = 1,
       .HV = 2,
       .d_k = 64,
       .d_v = 64,
       .act = kBF16,
       .pool = kF32,
       .conv = kBF16,
       .norm = true},
      {.gate = DecodeGate::kKdaSafe,
       .H = 2,
       .HV = 2,
       .d_k = 64,
       .d_v = 64,
       .act = kF32,
       .pool = kBF16,
       .conv = kF32,
       .norm = false},
  };
  uint32_t n = 0;
  for (const DecodeCase& c : cases)
    for (int64_t T : {1, 4, 8}) expect_cuda_matches_cpu(c, /*B=*/3, T, seed + n++);
}

TEST(GatedDeltaRuleDecodeCudaTest, LargeBatchMatchesCpu) {
  // B HV >= 512: the CUDA body may split heads more coarsely for large batches than for the small
  // ones above; every gate and pool dtype, T = 1 and 2.
  HYLA_SKIP_WITHOUT_CUDA();
  const uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  uint32_t n = 0;
  for (DecodeGate gate : {DecodeGate::kGdn, DecodeGate::kKda, DecodeGate::kKdaSafe}) {
    for (DType pool : {kF32, kBF16}) {
      const DecodeCase c{.gate = gate,
                         .H = 4,
                         .HV = 8,
                         .d_k = 128,
                         .d_v = 128,
                         .act = kBF16,
                         .pool = pool,
                         .conv = kBF16,
                         .norm = gate != DecodeGate::kGdn};
      for (int64_t T : {1, 2}) expect_cuda_matches_cpu(c, /*B=*/65, T, seed + n++);
    }
  }
}

/// The geometries every tiling is tried on: cluster sizes 1 to 16, blocks inside one value head and
/// blocks spanning several (GVA 1:1, 2:1 and 4:1), both head dims, both pool dtypes.
const DecodeCase kTilingCases[] = {
    {.gate = DecodeGate::kGdn, .H = 2, .HV = 4, .d_k = 128, .d_v = 128, .pool = kF32},
    {.gate = DecodeGate::kKdaSafe, .H = 2, .HV = 2, .d_k = 128, .d_v = 128, .pool = kBF16},
    {.gate = DecodeGate::kKda, .H = 1, .HV = 4, .d_k = 64, .d_v = 64, .pool = kF32},
    {.gate = DecodeGate::kGdn, .H = 2, .HV = 4, .d_k = 64, .d_v = 64, .pool = kBF16},
};

/// Each compiled tiling on each geometry of kTilingCases it serves, B = 3 and T = 1 and 3 where it
/// takes them (fused: the GPU reads row-strided views), seeded seed + n, seed + n + 1, ... (n
/// advanced); returns the (case, tiling) pairs run.
uint32_t expect_every_tiling_matches_cpu(uint32_t seed, uint32_t& n, bool fused) {
  uint32_t runs = 0;
  for (const DecodeCase& c : kTilingCases) {
    for (const cuda::DecodeTiling t : cuda::decode_tilings()) {
      if (cuda::decode_cluster_size(t, c.HV / c.H, c.d_v) == 0) continue;
      // The bulk, warp and split tilings and R16w16 are decode-only (T = 1; verify with one token
      // included).
      for (int64_t T : {1, 3})
        if (cuda::decode_tiling_takes(t, T))
          expect_cuda_matches_cpu(c, /*B=*/3, T, seed + n++, t, fused);
      ++runs;
    }
  }
  return runs;
}

TEST(GatedDeltaRuleDecodeCudaTest, EveryTilingMatchesCpu) {
  // The entry picks a tiling by batch size; here each tiling the kernel is compiled for runs on
  // every geometry it can serve: cluster sizes 1 to 16, one to 16 warps per block, blocks inside
  // one value head and blocks spanning several (GVA 2:1 and 4:1), the bulk-copy kernel, the warp
  // kernel, the split kernel (with the workspace the case tensors carry, NaN until written), both
  // head dims, both pool dtypes.
  HYLA_SKIP_WITHOUT_CUDA();
  const uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  uint32_t n = 0;
  // Per case: the 6 block tilings that tile its 128 or 256 rows in clusters of 1 to 16, bulk, 2
  // warp tilings, split.
  EXPECT_EQ(expect_every_tiling_matches_cpu(seed, n, /*fused=*/false), 40u)
      << "not every compiled tiling on the geometries it serves";
}

TEST(GatedDeltaRuleDecodeCudaTest, RowStridedInputsMatchCpu) {
  // qkv, a, b and norm_gate as row-strided views of one fused projection on the GPU (the model's
  // layout for B > 1), contiguous on the CPU: every compiled tiling (block, bulk, warp, split) on
  // the geometries it serves, then the entry's choice with the fused norm at small and large B.
  HYLA_SKIP_WITHOUT_CUDA();
  const uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  uint32_t n = 0;
  EXPECT_EQ(expect_every_tiling_matches_cpu(seed, n, /*fused=*/true), 40u)
      << "not every compiled tiling on the geometries it serves";
  for (DecodeCase c : {DecodeCase{.gate = DecodeGate::kGdn,
                      .H = 1,
                      .HV = 2,
                      .d_k = 128,
                      .d_v = 128,
                      .act = kBF16,
                      .pool = kF32,
                      .conv = kBF16,
                      .norm = true},
                       DecodeCase{.gate = DecodeGate::kKdaSafe,
                       .H = 2,
                       .HV = 2,
                       .d_k = 64,
                       .d_v = 64,
                       .act = kF32,
                       .pool = kBF16,
                       .conv = kF32,
                       .norm = true}}) {
    for (int64_t B : {3, 300})
      for (int64_t T : {1, 2})
        expect_cuda_matches_cpu(c, B, T, seed + n++, std::nullopt, /*fused=*/true);
  }
}

TEST(GatedDeltaRuleDecodeCudaTest, ArrivalCountersMatchCpu) {
  // GatedDeltaRuleDecodeParams::arrivals: every block tiling of several blocks per key head (the
  // ones that use the counters) on kTilingCases, one and three tokens per step, plus the entry's
  // choice at B = 1 (with a padding slot among B = 3 too), plain and overlapped.
  HYLA_SKIP_WITHOUT_CUDA();
  const uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  uint32_t n = 0, runs = 0;
  for (const DecodeCase& c : kTilingCases) {
    for (const cuda::DecodeTiling t : cuda::decode_tilings()) {
      if (t.kernel != cuda::DecodeKernel::kBlock ||
          cuda::decode_cluster_size(t, c.HV / c.H, c.d_v) < 2)
        continue;
      for (int64_t T : {1, 3})
        if (cuda::decode_tiling_takes(t, T))
          expect_counted_matches_cpu(c, /*B=*/3, T, seed + n++, t);
      ++runs;
    }
    for (int64_t B : {1, 3})
      for (bool overlap : {false, true})
        expect_counted_matches_cpu(c, B, /*T=*/1, seed + n++, std::nullopt, overlap);
  }
  EXPECT_EQ(runs, 20u) << "not the block tilings of 2 to 16 blocks per key head of these cases";
}

TEST(GatedDeltaRuleDecodeCudaTest, DefaultTilingFollowsTheMeasurements) {
  // Host logic only (no device needed): the H200's fastest choice (docs/perf-history.md), named
  // as the benchmark prints it (R rows w warps c cluster: block kernel; W: warp kernel).
  auto pick = [](int64_t B, int64_t H, int64_t group, int64_t d_v, int64_t T = 1,
                 bool overlap = false, bool warp_ok = true, bool workspace_ok = false) {
    const cuda::DecodeTiling t =
        cuda::default_decode_tiling(B, H, group, d_v, T, overlap, warp_ok, false, workspace_ok);
    EXPECT_GT(cuda::decode_cluster_size(t, group, d_v), 0)
        << "B " << B << " H " << H << " group " << group << " d_v " << d_v << " T " << T;
    return cuda::decode_tiling_name(t, group, d_v);
  };
  // Below 128 (sequence, key head) units, one token: the warp kernel, 16 rows per block, 4 warps
  // in a cluster of 16, else 2.
  EXPECT_EQ(pick(1, 16, 2, 128), "W16w4c16");  // GDN H16/HV32, B = 1
  EXPECT_EQ(pick(1, 32, 1, 128), "W16w2c8");   // KDA H32, B = 1
  EXPECT_EQ(pick(2, 16, 1, 64), "W16w2c4");    // d_v = 64
  // ... unless the call does not meet its terms, or verifies drafts: 8 warps, a cluster of up to 8.
  EXPECT_EQ(pick(1, 16, 2, 128, 1, false, /*warp_ok=*/false), "R32w8c8");
  EXPECT_EQ(pick(1, 32, 1, 128, 1, false, /*warp_ok=*/false), "R16w8c8");
  EXPECT_EQ(pick(1, 32, 1, 128, /*T=*/4), "R16w8c8");
  EXPECT_EQ(pick(2, 16, 1, 64, 1, false, /*warp_ok=*/false), "R8w8c8");
  // 128 to 1023 units: the bulk-copy kernel ...
  EXPECT_EQ(pick(8, 16, 2, 128), "bulk32w8");
  EXPECT_EQ(pick(8, 32, 1, 128), "bulk32w8");
  // ... which takes one token: verify there runs as from 1024 units.
  EXPECT_EQ(pick(8, 32, 1, 128, /*T=*/3), "R128w4c1");
  // From 1024 units: whole key heads per block, the most warps.
  EXPECT_EQ(pick(64, 16, 2, 128), "R256w8c1");
  EXPECT_EQ(pick(1024, 32, 1, 128), "R128w4c1");
  // With a workspace, from 1024 units, one token: the split kernels, 8 rows per 1-warp block;
  // below, or verifying, as without.
  auto pick_ws = [&](int64_t B, int64_t H, int64_t group, int64_t d_v, int64_t T = 1) {
    return pick(B, H, group, d_v, T, false, true, /*workspace_ok=*/true);
  };
  EXPECT_EQ(pick_ws(64, 16, 2, 128), "S8w1");
  EXPECT_EQ(pick_ws(1024, 32, 1, 128), "S8w1");
  EXPECT_EQ(pick_ws(64, 16, 1, 64), "S8w1");
  EXPECT_EQ(pick_ws(8, 32, 1, 128), "bulk32w8");
  EXPECT_EQ(pick_ws(1, 16, 2, 128), "W16w4c16");
  EXPECT_EQ(pick_ws(1024, 32, 1, 128, /*T=*/2), "R128w4c1");
  // A key head of 512 rows (GVA 4:1): the largest blocks, a cluster of 2.
  EXPECT_EQ(pick(64, 16, 4, 128), "R256w8c2");
  // A key head of 8 value heads: no bulk (at most 4), no 16-row warp tiling (a cluster of 64),
  // no cluster of <= 8 with 8 warps below 128 units: the largest blocks.
  EXPECT_EQ(pick(1, 4, 8, 128), "R256w8c4");
  EXPECT_EQ(pick(32, 4, 8, 128), "R256w8c4");
  // Every choice is a tiling the kernel can run (pick checks the cluster size).
  for (int64_t B : {1, 3, 8, 64, 1024})
    for (int64_t group : {1, 2, 4})
      for (int64_t d : {64, 128})
        for (int64_t T : {1, 3})
          for (bool overlap : {false, true})
            for (bool workspace_ok : {false, true})
              pick(B, 4, group, d, T, overlap, true, workspace_ok);

  // Every choice, over key heads of 1 to 16 value heads and every flag, is a compiled tiling
  // (decode_tilings()) that serves the call's token count.
  const std::vector<cuda::DecodeTiling> compiled = cuda::decode_tilings();
  for (int64_t B : {1, 2, 7, 8, 31, 64, 65, 256, 257, 1024})
    for (int64_t group = 1; group <= 16; ++group)
      for (int64_t d : {64, 128})
        for (int64_t T : {int64_t(1), int64_t(2), kMaxDecodeTokens})
          for (int flags = 0; flags < 16; ++flags) {
            const bool overlap = flags & 1, warp_ok = flags & 2, counted = flags & 4,
                       workspace_ok = flags & 8;
            const cuda::DecodeTiling t = cuda::default_decode_tiling(
                B, 4, group, d, T, overlap, warp_ok, counted, workspace_ok);
            SCOPED_TRACE(str_cat("B ", B, " group ", group, " d ", d, " T ", T, " flags ", flags,
                                 ": ", cuda::decode_tiling_name(t, group, d)));
            EXPECT_GT(cuda::decode_cluster_size(t, group, d), 0);
            EXPECT_TRUE(cuda::decode_tiling_takes(t, T));
            EXPECT_TRUE(std::any_of(compiled.begin(), compiled.end(), [&](cuda::DecodeTiling c) {
              return c.rows_per_block == t.rows_per_block && c.warps == t.warps &&
                     c.kernel == t.kernel;
            }));
          }

  // Overlapped steps: below 128 units the block kernel with 32 rows / 8 warps; 128 to 256 units
  // 64 rows / 4 warps (the bulk kernel does not overlap); above, and for verify, as without.
  auto pick_overlapped = [&](int64_t B, int64_t H, int64_t group, int64_t d_v, int64_t T = 1) {
    return pick(B, H, group, d_v, T, true);
  };
  EXPECT_EQ(pick_overlapped(1, 16, 2, 128), "R32w8c8");
  EXPECT_EQ(pick_overlapped(1, 32, 1, 128), "R32w8c4");
  EXPECT_EQ(pick_overlapped(8, 16, 2, 128), "R64w4c4");
  EXPECT_EQ(pick_overlapped(8, 32, 1, 128), "R64w4c2");
  EXPECT_EQ(pick_overlapped(64, 16, 2, 128), pick(64, 16, 2, 128));
  EXPECT_EQ(pick_overlapped(8, 32, 1, 128, 3), "R128w4c1");  // verify

  // With arrival counters, plain: below 128 units the block kernel with 16 rows / 16 warps, 128
  // to 256 units 32 rows / 8 warps (no cluster needed); overlapped and above, as without.
  auto pick_counted = [](int64_t B, int64_t H, int64_t group, int64_t d_v, bool overlap) {
    const cuda::DecodeTiling t =
        cuda::default_decode_tiling(B, H, group, d_v, 1, overlap, true, /*counted=*/true);
    return cuda::decode_tiling_name(t, group, d_v);
  };
  EXPECT_EQ(pick_counted(1, 16, 2, 128, false), "R16w16c16");
  EXPECT_EQ(pick_counted(1, 32, 1, 128, false), "R16w16c8");
  EXPECT_EQ(pick_counted(1, 16, 2, 128, true), "R32w8c8");
  EXPECT_EQ(pick_counted(8, 16, 2, 128, false), "R32w8c8");
  EXPECT_EQ(pick_counted(8, 32, 1, 128, false), "R32w8c4");
  EXPECT_EQ(pick_counted(8, 16, 2, 128, true), "R64w4c4");
  EXPECT_EQ(pick_counted(32, 16, 2, 128, false), "bulk32w8");
}

TEST(GatedDeltaRuleDecodeCudaTest, TilingThatCannotServeIsRefused) {
  HYLA_SKIP_WITHOUT_CUDA();
  const uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  std::mt19937 rng(seed);
  // One value head of 128 rows per key head: a 256-row block cannot tile it.
  const DecodeCase c{.gate = DecodeGate::kKda, .H = 1, .HV = 1, .d_k = 128, .d_v = 128};
  DecodeTensors gpu =
      testing::make_decode_tensors(c, /*B=*/1, /*T=*/1, {0}, 1, rng).to(Device::cuda());
  const Status s = gpu_decode(gpu.decode_params(true), cuda::DecodeTiling{256, 8});
  EXPECT_EQ(s.code(), ErrorCode::kUnsupported) << s.to_string();
  EXPECT_NE(s.message().find("256 rows per block"), std::string::npos) << s.to_string();
  // A tiling that would tile it but is not compiled (the entry never picks it): refused.
  const Status uncompiled = gpu_decode(gpu.decode_params(true), cuda::DecodeTiling{32, 4});
  EXPECT_EQ(uncompiled.code(), ErrorCode::kUnsupported) << uncompiled.to_string();
  EXPECT_NE(uncompiled.message().find("no tiling of 32 rows per block with 4 warps"),
            std::string::npos)
      << uncompiled.to_string();
  // 16 rows / 16 warps serves one token per sequence only: a verify of 3 is refused.
  DecodeTensors three =
      testing::make_decode_tensors(c, /*B=*/1, /*T=*/3, {0}, 1, rng).to(Device::cuda());
  EXPECT_FALSE(cuda::decode_tiling_takes(cuda::DecodeTiling{16, 16}, 3));
  const Status verify = gpu_decode(three.decode_params(false), cuda::DecodeTiling{16, 16});
  EXPECT_EQ(verify.code(), ErrorCode::kUnsupported) << verify.to_string();
  EXPECT_NE(verify.message().find("one token per sequence only, not 3"), std::string::npos)
      << verify.to_string();
  EXPECT_TRUE(still_poisoned(three.o.to(Device::cpu()).view())) << "a refused call wrote o";
  // The split kernels without a workspace: refused; with one too small: refused by the argument
  // check (check_gated_delta_rule_decode); nothing written either way.
  const cuda::DecodeTiling split{8, 1, cuda::DecodeKernel::kSplit};
  GatedDeltaRuleDecodeParams p = gpu.decode_params(true);
  p.workspace = TensorView();
  const Status none = gpu_decode(p, split);
  EXPECT_EQ(none.code(), ErrorCode::kUnsupported) << none.to_string();
  EXPECT_NE(none.message().find("workspace"), std::string::npos) << none.to_string();
  p.workspace = gpu.workspace.view().slice(0, 1);
  const Status small = gpu_decode(p, split);
  EXPECT_EQ(small.code(), ErrorCode::kInvalidArgument) << small.to_string();
  EXPECT_NE(small.message().find("workspace holds 4 bytes"), std::string::npos)
      << small.to_string();
  EXPECT_TRUE(still_poisoned(gpu.o.to(Device::cpu()).view())) << "a refused call wrote o";
}

TEST(GatedDeltaRuleDecodeCudaTest, MisalignedInputsTakeTheBlockKernel) {
  // The warp kernel reads with vector loads from 16-byte aligned tensors. A qkv view one element
  // into its buffer: the entry (which would pick the warp kernel at B = 1) runs the block kernel
  // and matches the CPU; the warp tiling itself refuses the call.
  HYLA_SKIP_WITHOUT_CUDA();
  const uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  std::mt19937 rng(seed);
  const DecodeCase c{.gate = DecodeGate::kGdn, .H = 2, .HV = 4, .d_k = 128, .d_v = 128};
  const std::vector<int32_t> slots = {1};
  const DecodeTensors host = testing::make_decode_tensors(c, /*B=*/1, /*T=*/1, slots, 3, rng);
  ASSERT_EQ(
      cuda::decode_tiling_name(cuda::default_decode_tiling(1, c.H, c.HV / c.H, c.d_v), 2, c.d_v)[0],
      'W')
      << "the aligned call would take the warp kernel";
  const int64_t n = host.qkv.numel(), conv_dim = host.qkv.size(1);
  const int64_t elem = dtype_size(host.qkv.dtype());
  Tensor shifted = Tensor::empty({n + 1}, host.qkv.dtype());
  std::memcpy(static_cast<char*>(shifted.view().raw()) + elem, host.qkv.view().raw(),
              size_t(n * elem));
  const Tensor shifted_gpu = shifted.to(Device::cuda());
  const TensorView qkv = shifted_gpu.view().slice(1, n + 1).reshape({1, conv_dim});

  DecodeTensors cpu = host.to(Device::cpu()), gpu = host.to(Device::cuda());
  cpu.poison_outputs();
  gpu.poison_outputs();
  GatedDeltaRuleDecodeParams p = gpu.decode_params(/*commit=*/true);
  p.qkv = qkv;
  const cuda::DecodeTiling warp{16, 4, cuda::DecodeKernel::kWarp};
  const Status refused = cuda::gated_delta_rule_decode_tiled(p, warp, Stream{});
  EXPECT_EQ(refused.code(), ErrorCode::kUnsupported) << refused.to_string();
  EXPECT_NE(refused.message().find("16-byte aligned"), std::string::npos) << refused.to_string();
  ASSERT_OK(gated_delta_rule_decode(p));
  ASSERT_OK(gated_delta_rule_decode(cpu.decode_params(/*commit=*/true)));
  const DecodeTensors back = gpu.to(Device::cpu());
  expect_outputs_match(c, back, cpu, slots, /*verify=*/false);
  expect_pools_match(c, back, cpu);
}

TEST(GatedDeltaRuleDecodeCudaTest, OverlapWaitsForTheKernelBeforeItsInputs) {
  // overlap_previous: the step may start while the kernel before it runs and read its pools, but
  // must read qkv only after that kernel has finished. Here the kernel before writes the step's
  // qkv: a producer decode step (GDN, HV = 4, d = 64) whose o [B, 4, 64] (NaN-poisoned until
  // written) is the consumer's qkv [B, 256] (GDN H = 1, HV = 2, d = 64). The reference is the CPU
  // body on the producer's GPU output. Every tiling that can serve the consumer, and the entry.
  HYLA_SKIP_WITHOUT_CUDA();
  const uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  std::mt19937 rng(seed);
  const int64_t B = 5;
  const DecodeCase producer{.gate = DecodeGate::kGdn, .H = 2, .HV = 4, .d_k = 64, .d_v = 64};
  const DecodeCase consumer{.gate = DecodeGate::kGdn, .H = 1, .HV = 2, .d_k = 64, .d_v = 64};
  const std::vector<int32_t> slots = random_slots(B, rng);
  SCOPED_TRACE(str_cat("slots ", list_string(slots)));
  const DecodeTensors host_p = testing::make_decode_tensors(producer, B, 1, slots, B + 3, rng);
  const DecodeTensors host_c = testing::make_decode_tensors(consumer, B, 1, slots, B + 3, rng);
  cudaStream_t stream;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  std::vector<std::optional<cuda::DecodeTiling>> tilings = {std::nullopt};
  for (const cuda::DecodeTiling t : cuda::decode_tilings())
    if (cuda::decode_tiling_overlaps(t, 1) &&
        cuda::decode_cluster_size(t, consumer.HV / consumer.H, consumer.d_v) > 0)
      tilings.push_back(t);
  for (const std::optional<cuda::DecodeTiling>& tiling : tilings) {
    SCOPED_TRACE(tiling ? str_cat("tiling ", cuda::decode_tiling_name(*tiling, 2, 64))
                        : std::string("the entry's tiling"));
    DecodeTensors gpu_p = host_p.to(Device::cuda()), gpu_c = host_c.to(Device::cuda());
    GatedDeltaRuleDecodeParams c = gpu_c.decode_params(/*commit=*/true);
    c.qkv = gpu_p.o.view().reshape({B, 256});
    c.overlap_previous = true;
    ASSERT_OK(gated_delta_rule_decode(gpu_p.decode_params(/*commit=*/true), Stream{stream}));
    ASSERT_OK(tiling ? cuda::gated_delta_rule_decode_tiled(c, *tiling, Stream{stream})
                     : gated_delta_rule_decode(c, Stream{stream}));
    ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);

    DecodeTensors cpu = host_c.to(Device::cpu());
    const Tensor qkv = gpu_p.o.to(Device::cpu());
    GatedDeltaRuleDecodeParams h = cpu.decode_params(/*commit=*/true);
    h.qkv = qkv.view().reshape({B, 256});
    ASSERT_OK(gated_delta_rule_decode(h));
    const DecodeTensors back = gpu_c.to(Device::cpu());
    expect_outputs_match(consumer, back, cpu, slots, /*verify=*/false);
    expect_pools_match(consumer, back, cpu);
  }
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);
}

TEST(GatedDeltaRuleDecodeCudaTest, GatedNormMatchesCpu) {
  HYLA_SKIP_WITHOUT_CUDA();
  // The fused norm with both gate activations (GDN: silu, KDA: sigmoid), on bf16 and f32 o, with
  // the largest batch; the grids above cover it too, this names it.
  const uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  uint32_t n = 0;
  for (const DecodeCase& c : testing::decode_case_grid(128)) {
    if (!c.norm || c.pool != kF32 || c.H != 1) continue;
    expect_cuda_matches_cpu(c, /*B=*/33, /*T=*/2, seed + n++);
  }
}

TEST(GatedDeltaRuleDecodeCudaTest, OutOfRangeSlotIsSkippedOnCuda) {
  HYLA_SKIP_WITHOUT_CUDA();
  // The CUDA entry does not read slot ids on the host; an id outside the pool is skipped like -1.
  // The CPU run with -1 in its place is the reference.
  const uint32_t seed = testing::base_seed();
  SCOPED_TRACE(testing::seed_trace(seed));
  std::mt19937 rng(seed);
  const DecodeCase c{.gate = DecodeGate::kGdn, .H = 1, .HV = 2, .d_k = 128, .d_v = 128};
  constexpr int64_t kSlots = 4, T = 2;
  for (bool commit : {true, false}) {
    SCOPED_TRACE(commit ? "decode (commit)" : "verify");
    DecodeTensors cpu = testing::make_decode_tensors(c, /*B=*/3, T, {2, -1, 0}, kSlots, rng);
    DecodeTensors gpu = cpu.to(Device::cuda());
    gpu.slots = testing::int32_tensor({2, kSlots, 0}).to(Device::cuda());
    ASSERT_OK(gated_delta_rule_decode(cpu.decode_params(commit)));
    ASSERT_OK(gated_delta_rule_decode(gpu.decode_params(commit)));
    const DecodeTensors back = gpu.to(Device::cpu());
    expect_outputs_match(c, back, cpu, {2, -1, 0}, /*verify=*/!commit);
    expect_pools_match(c, back, cpu);
  }
}

}  // namespace
}  // namespace hyla::kernels

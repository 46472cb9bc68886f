// `hyla selfcheck`: (1) chunk == recurrent on random varlen GDN and KDA problems with initial
// states, (2) the delta rule's overwrite property (beta = 1 under one key reads back the last
// value), (3) a short benchmark of both algorithms and the one prefill uses, (4) the machine: its
// vector units, the BLAS kernels, the threads, the FMA peak, the sgemm rate against it and the
// read bandwidth, and (5) the demo model's decode rate against the bound that bandwidth sets.
#include "cli/selfcheck.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "cli/generate.h"
#include "cli/machine.h"
#include "core/cpu_features.h"
#include "core/parallel.h"
#include "kernels/gated_delta_rule.h"

namespace hyla::cli {

namespace {

using kernels::GatedDeltaRuleParams;

/// One random problem: B sequences packed, H key heads, HV value heads, d = d_k = d_v.
struct Problem {
  Tensor q, k, v, g, beta, cu, pool, slots, o;
  GatedDeltaRuleParams params;

  Problem(const std::vector<int32_t>& lengths, int64_t H, int64_t HV, int64_t d, bool per_channel,
          DType act, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> uni(-1.0f, 1.0f), decay(-0.3f, 0.0f),
        strength(0.0f, 1.0f);
    const int64_t B = int64_t(lengths.size());
    cu = Tensor::empty({B + 1}, DType::kI32);
    cu.data<int32_t>()[0] = 0;
    for (int64_t b = 0; b < B; ++b)
      cu.data<int32_t>()[b + 1] = cu.data<int32_t>()[b] + lengths[size_t(b)];
    const int64_t T = cu.data<int32_t>()[B];
    auto random = [&](Tensor t, auto& dist) {
      for (int64_t i = 0; i < t.numel(); ++i) {
        if (t.dtype() == DType::kBF16) {
          t.data<bf16>()[i] = f32_to_bf16(dist(rng));
        } else {
          t.data<float>()[i] = dist(rng);
        }
      }
      return t;
    };
    q = random(Tensor::empty({T, H, d}, act), uni);
    k = random(Tensor::empty({T, H, d}, act), uni);
    v = random(Tensor::empty({T, HV, d}, act), uni);
    g = per_channel ? random(Tensor::empty({T, HV, d}, DType::kF32), decay)
                    : random(Tensor::empty({T, HV}, DType::kF32), decay);
    beta = random(Tensor::empty({T, HV}, DType::kF32), strength);
    std::uniform_real_distribution<float> small(-0.1f, 0.1f);
    pool = random(Tensor::empty({B, HV, d, d}, DType::kF32), small);
    slots = Tensor::empty({B}, DType::kI32);
    for (int64_t b = 0; b < B; ++b) slots.data<int32_t>()[b] = int32_t(B - 1 - b);
    o = Tensor::empty({T, HV, d}, act);
    params.q = q;
    params.k = k;
    params.v = v;
    params.g = g;
    params.beta = beta;
    params.cu_seqlens = cu;
    params.state_pool = pool;
    params.initial_slots = slots;
    params.final_slots = slots;
    params.o = o;
  }
};

double max_abs_diff(const Tensor& a, const Tensor& b) {
  double m = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x =
        a.dtype() == DType::kBF16 ? bf16_to_f32(a.data<bf16>()[i]) : a.data<float>()[i];
    const double y =
        b.dtype() == DType::kBF16 ? bf16_to_f32(b.data<bf16>()[i]) : b.data<float>()[i];
    const double diff = std::fabs(x - y);
    m = std::isfinite(diff) ? std::max(m, diff) : INFINITY;
  }
  return m;
}

/// chunk and recurrent on the same problem (each from its own copy of the pool) must agree.
bool check_chunk_equals_recurrent(const char* name, bool per_channel, DType act, double tol) {
  Problem p({1, 130, 64, 200}, 2, 4, 64, per_channel, act, 7);
  Tensor pool_rec = p.pool.clone(), o_rec = p.o.clone();
  GatedDeltaRuleParams rec = p.params;
  rec.state_pool = pool_rec;
  rec.o = o_rec;
  const Status s1 = kernels::gated_delta_rule_recurrent(rec);
  const Status s2 = kernels::gated_delta_rule_chunk(p.params);
  if (!s1.ok() || !s2.ok()) {
    std::printf("  %-32s FAILED: %s %s\n", name, s1.to_string().c_str(), s2.to_string().c_str());
    return false;
  }
  const double d_o = max_abs_diff(p.o, o_rec), d_s = max_abs_diff(p.pool, pool_rec);
  const bool ok = d_o <= tol && d_s <= tol;
  std::printf("  %-32s max |o diff| %.2e, max |state diff| %.2e  %s\n", name, d_o, d_s,
              ok ? "ok" : "FAILED");
  return ok;
}

/// beta = 1, no decay: writing v1 then v2 under one unit key, then querying that key, reads v2.
bool check_overwrite() {
  const int64_t d = 16;
  Problem p({3}, 1, 1, d, false, DType::kF32, 11);
  for (int64_t t = 0; t < 3; ++t) {
    for (int64_t i = 0; i < d; ++i) {
      p.q.data<float>()[t * d + i] = i == 3 ? 1.0f : 0.0f;
      p.k.data<float>()[t * d + i] = i == 3 ? 1.0f : 0.0f;
    }
    p.g.data<float>()[t] = 0.0f;
    p.beta.data<float>()[t] = 1.0f;
  }
  p.params.scale = 1.0f;
  const Status s = kernels::gated_delta_rule_chunk(p.params);
  double err = s.ok() ? 0.0 : INFINITY;
  for (int64_t i = 0; s.ok() && i < d; ++i)
    err = std::max(err,
                   double(std::fabs(p.o.data<float>()[2 * d + i] - p.v.data<float>()[2 * d + i])));
  const bool ok = err <= 1e-5;
  std::printf("  %-32s read-back error %.2e  %s\n", "overwrite (beta = 1)", err,
              ok ? "ok" : "FAILED");
  return ok;
}

double best_seconds(const GatedDeltaRuleParams& p, bool chunked, int repeats) {
  double best = INFINITY;
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    const Status s =
        chunked ? kernels::gated_delta_rule_chunk(p) : kernels::gated_delta_rule_recurrent(p);
    const auto t1 = std::chrono::steady_clock::now();
    if (!s.ok()) return INFINITY;
    best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
  }
  return best;
}

}  // namespace

int run_selfcheck(const SelfcheckOptions& options) {
  if (options.threads > 0) set_num_threads(options.threads);
  std::printf("hyla %s selfcheck: CPU delta-rule core, %d threads\n\n", HYLA_VERSION,
              num_threads());
  std::printf(
      "correctness (chunk vs recurrent, 4 sequences of 1/130/64/200 tokens, H=2, HV=4, d=64):\n");
  bool ok = true;
  // fp32: both accumulate in fp32 over <= 200 steps; they differ by rounding order only.
  ok &= check_chunk_equals_recurrent("GDN f32", false, DType::kF32, 1e-4);
  ok &= check_chunk_equals_recurrent("KDA f32", true, DType::kF32, 1e-4);
  // bf16 outputs: one bf16 rounding step (2^-8 relative) of values below ~2 in magnitude.
  ok &= check_chunk_equals_recurrent("GDN bf16", false, DType::kBF16, 2e-2);
  ok &= check_overwrite();

  const int64_t T = options.bench_tokens;
  std::printf(
      "\nbenchmark (1 sequence of %lld tokens, H=2, HV=4, d=128, bf16 in, fp32 state; best of "
      "%d):\n",
      (long long)T, options.repeats);
  std::printf("| %-4s | %14s | %14s | %-9s |\n", "gate", "chunk tok/s", "recurrent tok/s",
              "prefill");
  for (bool per_channel : {false, true}) {
    Problem p({int32_t(T)}, 2, 4, 128, per_channel, DType::kBF16, 3);
    const double chunk = best_seconds(p.params, true, options.repeats);
    const double rec = best_seconds(p.params, false, options.repeats);
    std::printf("| %-4s | %14.0f | %14.0f | %-9s |\n", per_channel ? "KDA" : "GDN",
                double(T) / chunk, double(T) / rec,
                kernels::gated_delta_rule_extend_uses_chunk(p.params) ? "chunk" : "recurrent");
  }

  // The read bound: a decode step reads every weight once, so tokens/s <= bandwidth / bytes.
  const std::string model_dir = options.model_dir.empty() ? default_model_dir() : options.model_dir;
  const int64_t weight_bytes = checkpoint_bytes(model_dir);
  const MachineFigures m = measure_machine(weight_bytes > 0 ? weight_bytes : int64_t{32} << 20);
  std::printf("\nmachine:\n");
  std::printf("  cpu             %s\n", cpu_features().summary().c_str());
  std::printf("  threads         %s\n", threading_summary().c_str());
  std::printf("  fp32 FMA peak   %.1f GFLOP/s (measured: independent FMA chains on every thread)\n",
              m.fma_peak_gflops);
  std::printf("  sgemm           %.1f GFLOP/s = %.0f%% of that peak (64 x 256 x 1024 per thread)\n",
              m.sgemm_gflops, 100.0 * m.sgemm_gflops / m.fma_peak_gflops);
  std::printf("  read bandwidth  %.1f GB/s over %.1f MB\n", m.read_gbps,
              double(m.read_bytes) / 1e6);
  if (weight_bytes > 0) {
    Result<DecodeFigures> d = measure_decode(model_dir, options.decode_tokens);
    if (!d.ok()) {
      std::printf("\ndecode: %s: %s\n", model_dir.c_str(), d.status().message().c_str());
      ok = false;
    } else {
      const double bound = m.read_gbps * 1e9 / double(weight_bytes);
      std::printf(
          "\ndecode (%s, %s, 1 sequence, %lld greedy tokens):\n  %.1f tokens/s; read bound %.0f "
          "tokens/s (%.1f MB of weights at %.1f GB/s): %.0f%% of it\n",
          model_dir.c_str(), d->model.c_str(), (long long)d->tokens, d->tokens_per_s, bound,
          double(weight_bytes) / 1e6, m.read_gbps, 100.0 * d->tokens_per_s / bound);
    }
  } else {
    std::printf("\ndecode: no safetensors in %s: skipped\n", model_dir.c_str());
  }
  std::printf("\nselfcheck %s\n", ok ? "passed" : "FAILED");
  return ok ? 0 : 1;
}

}  // namespace hyla::cli

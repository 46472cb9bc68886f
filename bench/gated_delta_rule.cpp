// CPU benchmark of the gated delta rule: tokens/s of chunk and recurrent at T = 4096, HV = 4,
// d_k = d_v = 128 (GDN and KDA), and the machine's OpenBLAS sgemm rate measured in the same binary.
// Prints Google Benchmark's table, then a summary table and one JSON line:
//   chunk FLOP rate as a percentage of sgemm, and which algorithm is faster for prefill.
// FLOPs per token per value head of the chunk form (same count as ANCHORS.md):
//   C (6 d_k + 4 d_v) + 6 d_k d_v + (2/3) C^2 = 182,955 at C = 64, d_k = d_v = 128.
#include "kernels/gated_delta_rule.h"

#include <benchmark/benchmark.h>
#include <cblas.h>

#include <cstdio>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "core/parallel.h"

namespace hyla {
namespace {

using kernels::GatedDeltaRuleParams;

constexpr int64_t kT = 4096, kH = 2, kHV = 4, kD = 128;
/// Short lengths: where the prefill switches from recurrent to chunk (gated_delta_rule_extend).
constexpr int64_t kShortT[] = {1, 4, 16, 32, 64};

double chunk_flops_per_token_head() {
  const double C = kernels::kDeltaRuleChunk, K = kD, V = kD;
  return C * (6 * K + 4 * V) + 6 * K * V + 2.0 / 3.0 * C * C;
}

/// Inputs of one benchmark case (bf16 activations, fp32 gates and state, as served).
struct DeltaRuleInputs {
  Tensor q, k, v, g, beta, cu, pool, slots, o;
  DeltaRuleInputs(bool per_channel, int64_t T) {
    std::mt19937 rng(1234);
    std::uniform_real_distribution<float> uni(-1.0f, 1.0f), gate(-0.2f, 0.0f), b(0.0f, 1.0f);
    auto fill_bf16 = [&](Tensor t) {
      for (int64_t i = 0; i < t.numel(); ++i) t.data<bf16>()[i] = f32_to_bf16(uni(rng));
      return t;
    };
    q = fill_bf16(Tensor::empty({T, kH, kD}, DType::kBF16));
    k = fill_bf16(Tensor::empty({T, kH, kD}, DType::kBF16));
    v = fill_bf16(Tensor::empty({T, kHV, kD}, DType::kBF16));
    g = per_channel ? Tensor::empty({T, kHV, kD}, DType::kF32)
                    : Tensor::empty({T, kHV}, DType::kF32);
    for (int64_t i = 0; i < g.numel(); ++i) g.data<float>()[i] = gate(rng);
    beta = Tensor::empty({T, kHV}, DType::kF32);
    for (int64_t i = 0; i < beta.numel(); ++i) beta.data<float>()[i] = b(rng);
    cu = Tensor::empty({2}, DType::kI32);
    cu.data<int32_t>()[0] = 0;
    cu.data<int32_t>()[1] = int32_t(T);
    pool = Tensor::zeros({1, kHV, kD, kD}, DType::kF32);
    slots = Tensor::zeros({1}, DType::kI32);
    o = Tensor::empty({T, kHV, kD}, DType::kBF16);
  }
  GatedDeltaRuleParams params() const {
    GatedDeltaRuleParams p;
    p.q = q;
    p.k = k;
    p.v = v;
    p.g = g;
    p.beta = beta;
    p.cu_seqlens = cu;
    p.state_pool = pool;
    p.initial_slots = slots;
    p.final_slots = slots;
    p.o = o;
    return p;
  }
};

void set_rates(benchmark::State& state, int64_t T) {
  const double tokens = double(T) * double(state.iterations());
  state.counters["tok/s"] = benchmark::Counter(tokens, benchmark::Counter::kIsRate);
  state.counters["FLOP/s"] =
      benchmark::Counter(tokens * kHV * chunk_flops_per_token_head(), benchmark::Counter::kIsRate);
}

void BM_GatedDeltaRule(benchmark::State& state, bool per_channel, bool chunked) {
  const int64_t T = state.range(0);
  DeltaRuleInputs in(per_channel, T);
  const GatedDeltaRuleParams p = in.params();
  for (auto _ : state) {
    const Status s =
        chunked ? kernels::gated_delta_rule_chunk(p) : kernels::gated_delta_rule_recurrent(p);
    if (!s.ok()) state.SkipWithError(s.message().c_str());
    benchmark::ClobberMemory();
  }
  set_rates(state, T);
}

/// OpenBLAS sgemm N x N x N on all threads: the machine's dense fp32 rate.
void BM_Sgemm(benchmark::State& state) {
  const int n = int(state.range(0));
  std::vector<float> a(size_t(n) * n, 0.5f), b(size_t(n) * n, 0.25f), c(size_t(n) * n);
  for (auto _ : state) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
    benchmark::DoNotOptimize(c.data());
  }
  state.counters["FLOP/s"] =
      benchmark::Counter(2.0 * n * n * n * double(state.iterations()), benchmark::Counter::kIsRate);
}

BENCHMARK(BM_Sgemm)->Arg(1024)->Unit(benchmark::kMillisecond)->UseRealTime();
void lengths(benchmark::internal::Benchmark* b) {
  b->Arg(kT);
  for (int64_t t : kShortT) b->Arg(t);
  b->Unit(benchmark::kMicrosecond)->UseRealTime();
}
BENCHMARK_CAPTURE(BM_GatedDeltaRule, gdn_chunk, false, true)->Apply(lengths);
BENCHMARK_CAPTURE(BM_GatedDeltaRule, gdn_recurrent, false, false)->Apply(lengths);
BENCHMARK_CAPTURE(BM_GatedDeltaRule, kda_chunk, true, true)->Apply(lengths);
BENCHMARK_CAPTURE(BM_GatedDeltaRule, kda_recurrent, true, false)->Apply(lengths);

/// Console table plus a record of each run's counters for the summary.
class SummaryReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) {
      const auto tok = r.counters.find("tok/s");
      rates_[r.benchmark_name()] = {tok == r.counters.end() ? 0.0 : double(tok->second),
                                    double(r.counters.at("FLOP/s"))};
    }
  }
  struct Rate {
    double tokens_per_s, flops;
  };
  std::map<std::string, Rate> rates_;
};

}  // namespace
}  // namespace hyla

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  hyla::SummaryReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  const auto& r = reporter.rates_;
  auto rate = [&](const std::string& prefix) {
    for (const auto& [name, v] : r)
      if (name.rfind(prefix, 0) == 0) return v;
    return hyla::SummaryReporter::Rate{0, 0};
  };
  const double sgemm = rate("BM_Sgemm").flops;
  const std::string at = "/" + std::to_string(hyla::kT) + "/";
  const auto gdn_c = rate("BM_GatedDeltaRule/gdn_chunk" + at),
             gdn_r = rate("BM_GatedDeltaRule/gdn_recurrent" + at);
  const auto kda_c = rate("BM_GatedDeltaRule/kda_chunk" + at),
             kda_r = rate("BM_GatedDeltaRule/kda_recurrent" + at);
  if (sgemm <= 0 || gdn_c.flops <= 0) return 0;  // filtered run: no summary
  std::printf("\nsummary (T=%lld, H=%lld, HV=%lld, d=%lld, threads=%d)\n", (long long)hyla::kT,
              (long long)hyla::kH, (long long)hyla::kHV, (long long)hyla::kD, hyla::num_threads());
  std::printf("| %-14s | %12s | %14s | %9s |\n", "case", "tok/s", "chunk GFLOP/s", "% sgemm");
  auto row = [&](const char* name, hyla::SummaryReporter::Rate v) {
    std::printf("| %-14s | %12.0f | %14.2f | %8.1f%% |\n", name, v.tokens_per_s, v.flops * 1e-9,
                100.0 * v.flops / sgemm);
  };
  row("gdn chunk", gdn_c);
  row("gdn recurrent", gdn_r);
  row("kda chunk", kda_c);
  row("kda recurrent", kda_r);
  std::printf("| %-14s | %12s | %14.2f | %8.1f%% |\n", "sgemm 1024", "-", sgemm * 1e-9, 100.0);
  std::printf("\nprefill crossover (tokens per sequence; tok/s chunk / recurrent)\n");
  for (int64_t t : hyla::kShortT) {
    const std::string a = "/" + std::to_string(t) + "/";
    std::printf("| T=%-5lld | gdn %10.0f / %10.0f | kda %10.0f / %10.0f |\n", (long long)t,
                rate("BM_GatedDeltaRule/gdn_chunk" + a).tokens_per_s,
                rate("BM_GatedDeltaRule/gdn_recurrent" + a).tokens_per_s,
                rate("BM_GatedDeltaRule/kda_chunk" + a).tokens_per_s,
                rate("BM_GatedDeltaRule/kda_recurrent" + a).tokens_per_s);
  }
  std::printf(
      "{\"bench\":\"gated_delta_rule_cpu\",\"T\":%lld,\"HV\":%lld,\"d\":%lld,\"threads\":%d,"
      "\"sgemm_gflops\":%.2f,\"gdn_chunk_tok_s\":%.0f,\"gdn_recurrent_tok_s\":%.0f,"
      "\"kda_chunk_tok_s\":%.0f,\"kda_recurrent_tok_s\":%.0f,\"gdn_chunk_pct_sgemm\":%.1f,"
      "\"kda_chunk_pct_sgemm\":%.1f}\n",
      (long long)hyla::kT, (long long)hyla::kHV, (long long)hyla::kD, hyla::num_threads(),
      sgemm * 1e-9, gdn_c.tokens_per_s, gdn_r.tokens_per_s, kda_c.tokens_per_s, kda_r.tokens_per_s,
      100.0 * gdn_c.flops / sgemm, 100.0 * kda_c.flops / sgemm);
  return 0;
}

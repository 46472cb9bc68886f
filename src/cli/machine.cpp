// Machine figures for `hyla selfcheck` (see machine.h).
#include "cli/machine.h"

#include <cblas.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <memory>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "core/parallel.h"
#include "model/architecture.h"
#include "runtime/engine.h"

namespace hyla::cli {

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t0) {
  return std::chrono::duration<double>(Clock::now() - t0).count();
}

/// The widest fp32 vector this build was compiled for (-march=native: this machine's).
#if defined(__AVX512F__)
constexpr int kLanes = 16;
#elif defined(__AVX__)
constexpr int kLanes = 8;
#else
constexpr int kLanes = 4;
#endif
typedef float Vec __attribute__((vector_size(kLanes * sizeof(float))));

/// a * b + c as one FMA instruction where the build has one (C++ does not contract by itself).
Vec fma(Vec a, Vec b, Vec c) {
#if defined(__AVX512F__)
  return reinterpret_cast<Vec>(_mm512_fmadd_ps(
      reinterpret_cast<__m512>(a), reinterpret_cast<__m512>(b), reinterpret_cast<__m512>(c)));
#elif defined(__FMA__)
  return reinterpret_cast<Vec>(_mm256_fmadd_ps(
      reinterpret_cast<__m256>(a), reinterpret_cast<__m256>(b), reinterpret_cast<__m256>(c)));
#else
  return a * b + c;
#endif
}

/// `iterations` x 12 independent vector FMAs (enough chains to cover the FMA latency of every
/// current x86 core); returns a value that depends on all of them.
float fma_chains(int64_t iterations, float seed) {
  constexpr int kChains = 12;
  Vec acc[kChains];
  Vec mul, add;
  for (int l = 0; l < kLanes; ++l) {
    mul[l] = 0.999f;
    add[l] = seed * 1e-3f;
  }
  for (int c = 0; c < kChains; ++c)
    for (int l = 0; l < kLanes; ++l) acc[c][l] = seed + float(c);
  __asm__ volatile("" : "+v"(mul), "+v"(add));  // values the compiler cannot know
  for (int64_t i = 0; i < iterations; ++i)
    for (int c = 0; c < kChains; ++c) acc[c] = fma(acc[c], mul, add);
  float sum = 0;
  for (int c = 0; c < kChains; ++c)
    for (int l = 0; l < kLanes; ++l) sum += acc[c][l];
  return sum;
}

/// Runs work(thread) once on each of num_threads() threads, started together after a barrier;
/// returns the seconds from the first thread's start to the last one's end (the barrier and the
/// workers' wake-up are not counted).
template <typename Work>
double on_every_thread(Work&& work) {
  const int threads = num_threads();
  std::atomic<int> arrived{0};
  std::vector<Clock::time_point> begin(static_cast<size_t>(threads)),
      end(static_cast<size_t>(threads));
  parallel_for(threads, [&](int64_t t) {
    arrived.fetch_add(1);
    const Clock::time_point wait_start = Clock::now();
    while (arrived.load() < threads && seconds_since(wait_start) < 0.05) {
    }
    begin[size_t(t)] = Clock::now();
    work(t);
    end[size_t(t)] = Clock::now();
  });
  return std::chrono::duration<double>(*std::max_element(end.begin(), end.end()) -
                                       *std::min_element(begin.begin(), begin.end()))
      .count();
}

}  // namespace

MachineFigures measure_machine(int64_t read_bytes) {
  MachineFigures f;
  const int threads = num_threads();

  // FMA peak: 12 chains x kLanes x 2 flops per iteration and thread, best of 3.
  constexpr int64_t kFmaIterations = 2'000'000;
  std::vector<float> sink(size_t(threads), 0.0f);
  double best = 1e30;
  for (int r = 0; r < 3; ++r) {
    best = std::min(best, on_every_thread([&](int64_t t) {
                      sink[size_t(t)] += fma_chains(kFmaIterations, float(t + r));
                    }));
  }
  f.fma_peak_gflops = double(threads) * kFmaIterations * 12 * kLanes * 2 / best / 1e9;

  // sgemm: C[64, 256] = A[64, 1024] B[256, 1024]^T per thread, 20 times, best of 3.
  constexpr int kM = 64, kN = 256, kK = 1024, kCalls = 20;
  std::vector<std::vector<float>> a(size_t(threads), std::vector<float>(size_t(kM * kK), 0.5f)),
      b(size_t(threads), std::vector<float>(size_t(kN * kK), 0.25f)),
      c(size_t(threads), std::vector<float>(size_t(kM * kN)));
  best = 1e30;
  for (int r = 0; r < 3; ++r) {
    best = std::min(best, on_every_thread([&](int64_t t) {
                      for (int i = 0; i < kCalls; ++i)
                        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, kM, kN, kK, 1.0f,
                                    a[size_t(t)].data(), kK, b[size_t(t)].data(), kK, 0.0f,
                                    c[size_t(t)].data(), kN);
                    }));
  }
  f.sgemm_gflops = double(threads) * kCalls * 2.0 * kM * kN * kK / best / 1e9;

  // Read bandwidth: each thread sums its slice of one buffer of read_bytes, best of 20 passes
  // (the first pass also warms the caches the buffer fits in, as a decode step's weights are).
  f.read_bytes = read_bytes;
  const int64_t floats = std::max<int64_t>(read_bytes / 4, threads * 1024);
  std::vector<float> buffer(size_t(floats), 1.0f);
  best = 1e30;
  for (int r = 0; r < 5; ++r) {
    best = std::min(best, on_every_thread([&](int64_t t) {
                      const int64_t begin = floats * t / threads, end = floats * (t + 1) / threads;
                      float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
                      const float* p = buffer.data();
                      int64_t i = begin;
#pragma omp simd reduction(+ : s0, s1, s2, s3)
                      for (i = begin; i < end - 3; i += 4) {
                        s0 += p[i];
                        s1 += p[i + 1];
                        s2 += p[i + 2];
                        s3 += p[i + 3];
                      }
                      sink[size_t(t)] += s0 + s1 + s2 + s3;
                    }));
  }
  f.read_gbps = double(floats) * 4 / best / 1e9;
  float total = 0;
  for (float s : sink) total += s;
  __asm__ volatile("" : : "r"(&total) : "memory");
  return f;
}

int64_t checkpoint_bytes(const std::string& dir) {
  int64_t bytes = 0;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec))
    if (entry.path().extension() == ".safetensors") bytes += int64_t(entry.file_size(ec));
  return bytes;
}

Result<DecodeFigures> measure_decode(const std::string& dir, int64_t new_tokens) {
  DecodeFigures d;
  HYLA_ASSIGN_OR_RETURN(std::unique_ptr<model::Model> model, model::load_model(dir));
  d.model = model->config().model_type;
  runtime::EngineOptions options;
  options.max_running = 1;
  options.memory_budget_bytes = int64_t{64} << 20;
  HYLA_ASSIGN_OR_RETURN(std::unique_ptr<runtime::Engine> engine,
                        runtime::Engine::create(*model, options));
  runtime::SamplingParams params;
  params.max_new_tokens = new_tokens;
  std::vector<int32_t> prompt(16);
  const int32_t vocab = int32_t(model->config().vocab_size);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = int32_t((i * 37 + 11) % size_t(vocab));
  HYLA_RETURN_IF_ERROR(engine->add_request(prompt, params).status());
  // decode rate: tokens of the steps after the first (which runs the prompt) over their time
  bool first = true;
  double decode_seconds = 0;
  while (!engine->idle()) {
    const Clock::time_point t0 = Clock::now();
    const std::vector<runtime::TokenEvent> events = engine->step();
    for (const runtime::TokenEvent& e : events)
      if (e.reason == runtime::FinishReason::kError) return internal_error(e.error);
    if (!first) {
      decode_seconds += seconds_since(t0);
      d.tokens += int64_t(events.size());
    }
    first = false;
  }
  d.tokens_per_s = decode_seconds > 0 ? double(d.tokens) / decode_seconds : 0;
  return d;
}

}  // namespace hyla::cli

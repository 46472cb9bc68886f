// How fast can the GPU read and write back a large fp32 state pool, with no math at all? The
// floor under any decode step that updates its state in place. Standalone (no Hyla code):
//   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a tools/gpu/copy_floor.cu -o /tmp/cf
//   /tmp/cf [GiB per side, default 2]
// Variants: in place (each thread loads N x 16 bytes, then stores them back to the same place)
// with 128 or 256 threads and N = 2, 4, 8, with or without streaming hints (.cs); out of place
// into a second buffer; cudaMemcpyAsync device to device. TB/s counts bytes read + written.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CHECK(x)                                                                     \
  do {                                                                               \
    cudaError_t e = (x);                                                             \
    if (e != cudaSuccess) {                                                          \
      std::fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); \
      std::exit(1);                                                                  \
    }                                                                                \
  } while (0)

/// Block copies kThreads x kN float4; stores x * one (one = 1 at run time) so nothing is elided.
template <int kThreads, int kN, bool kStreaming>
__global__ void __launch_bounds__(kThreads) copy_kernel(const float4* src, float4* dst, float one) {
  const size_t base = size_t(blockIdx.x) * kThreads * kN + threadIdx.x;
  float4 x[kN];
#pragma unroll
  for (int i = 0; i < kN; ++i)
    x[i] = kStreaming ? __ldcs(src + base + i * kThreads) : src[base + i * kThreads];
#pragma unroll
  for (int i = 0; i < kN; ++i) {
    const float4 y = make_float4(x[i].x * one, x[i].y * one, x[i].z * one, x[i].w * one);
    if (kStreaming) {
      __stcs(dst + base + i * kThreads, y);
    } else {
      dst[base + i * kThreads] = y;
    }
  }
}

template <int kThreads, int kN, bool kStreaming>
void run(const char* name, float4* a, float4* b, size_t vectors, bool in_place) {
  const unsigned blocks = unsigned(vectors / (size_t(kThreads) * kN));
  float4* dst = in_place ? a : b;
  cudaEvent_t start, stop;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&stop));
  copy_kernel<kThreads, kN, kStreaming><<<blocks, kThreads>>>(a, dst, 1.0f);  // warm-up
  CHECK(cudaEventRecord(start));
  const int reps = 10;
  for (int r = 0; r < reps; ++r)
    copy_kernel<kThreads, kN, kStreaming><<<blocks, kThreads>>>(a, dst, 1.0f);
  CHECK(cudaEventRecord(stop));
  CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  CHECK(cudaEventElapsedTime(&ms, start, stop));
  const double bytes = 2.0 * double(vectors) * 16.0;
  std::printf("| %-34s | %9.1f | %6.3f |\n", name, ms * 1e3 / reps,
              bytes / (ms * 1e-3 / reps) * 1e-12);
}

int main(int argc, char** argv) {
  const double gib = argc > 1 ? std::atof(argv[1]) : 2.0;
  const size_t bytes = size_t(gib * double(1ull << 30));
  const size_t vectors = bytes / 16 / 4096 * 4096;
  float4 *a, *b;
  CHECK(cudaMalloc(&a, vectors * 16));
  CHECK(cudaMalloc(&b, vectors * 16));
  CHECK(cudaMemset(a, 0, vectors * 16));
  CHECK(cudaMemset(b, 0, vectors * 16));
  std::printf("%.2f GiB per side\n| %-34s | %9s | %6s |\n", gib, "variant", "us", "TB/s");
  run<128, 2, false>("in place, 128 thr x 2 x 16 B", a, b, vectors, true);
  run<128, 4, false>("in place, 128 thr x 4 x 16 B", a, b, vectors, true);
  run<128, 8, false>("in place, 128 thr x 8 x 16 B", a, b, vectors, true);
  run<256, 4, false>("in place, 256 thr x 4 x 16 B", a, b, vectors, true);
  run<256, 8, false>("in place, 256 thr x 8 x 16 B", a, b, vectors, true);
  run<128, 4, true>("in place .cs, 128 thr x 4 x 16 B", a, b, vectors, true);
  run<256, 8, true>("in place .cs, 256 thr x 8 x 16 B", a, b, vectors, true);
  run<128, 4, false>("out of place, 128 thr x 4 x 16 B", a, b, vectors, false);
  run<256, 8, false>("out of place, 256 thr x 8 x 16 B", a, b, vectors, false);
  run<128, 4, true>("out of place .cs, 128 thr x 4 x 16 B", a, b, vectors, false);
  {
    cudaEvent_t start, stop;
    CHECK(cudaEventCreate(&start));
    CHECK(cudaEventCreate(&stop));
    CHECK(cudaMemcpyAsync(b, a, vectors * 16, cudaMemcpyDeviceToDevice));
    CHECK(cudaEventRecord(start));
    for (int r = 0; r < 10; ++r)
      CHECK(cudaMemcpyAsync(b, a, vectors * 16, cudaMemcpyDeviceToDevice));
    CHECK(cudaEventRecord(stop));
    CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, start, stop));
    std::printf("| %-34s | %9.1f | %6.3f |\n", "cudaMemcpyAsync D2D", ms * 1e2,
                2.0 * double(vectors) * 16.0 / (ms * 1e-4) * 1e-12);
  }
  return 0;
}

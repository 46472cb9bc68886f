// CPUID feature bits and the OpenBLAS core type choice (see cpu_features.h).
#include "core/cpu_features.h"

#include <cblas.h>  // openblas_get_corename
#include <unistd.h>

#include <cctype>
#include <cstdlib>

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace hyla {

namespace {

#if defined(__x86_64__) || defined(__i386__)
/// XCR0: which register states the OS saves on context switches.
uint64_t xgetbv0() {
  uint32_t lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return (uint64_t{hi} << 32) | lo;
}
#endif

/// How much each known OpenBLAS x86 core type's sgemm kernels can use: 0 generic SSE, 1 AVX,
/// 2 AVX2 + FMA, 3 AVX-512. Unknown names rank -1 (left alone).
int blas_core_rank(const std::string& core) {
  static const struct {
    const char* name;
    int rank;
  } kCores[] = {
      {"prescott", 0},    {"core2", 0},       {"penryn", 0},         {"dunnington", 0},
      {"nehalem", 0},     {"atom", 0},        {"barcelona", 0},      {"bobcat", 0},
      {"opteron", 0},     {"sandybridge", 1}, {"bulldozer", 1},      {"piledriver", 1},
      {"steamroller", 1}, {"excavator", 1},   {"haswell", 2},        {"zen", 2},
      {"skylakex", 3},    {"cooperlake", 3},  {"sapphirerapids", 3},
  };
  std::string lower = core;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  for (const auto& c : kCores)
    if (lower == c.name) return c.rank;
  return -1;
}

}  // namespace

CpuFeatures cpu_features() {
  CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = (c >> 27) & 1;
  const uint64_t xcr0 = osxsave ? xgetbv0() : 0;
  const bool os_avx = (xcr0 & 0x6) == 0x6;                 // XMM and YMM state
  const bool os_avx512 = os_avx && (xcr0 & 0xe0) == 0xe0;  // opmask, ZMM hi 256, hi 16 ZMM
  f.avx = os_avx && ((c >> 28) & 1);
  f.fma = f.avx && ((c >> 12) & 1);
  f.f16c = f.avx && ((c >> 29) & 1);
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d)) {
    f.avx2 = f.avx && ((b >> 5) & 1);
    f.avx512f = os_avx512 && ((b >> 16) & 1);
    f.avx512dq = f.avx512f && ((b >> 17) & 1);
    f.avx512bw = f.avx512f && ((b >> 30) & 1);
    f.avx512vl = f.avx512f && ((b >> 31) & 1);
    if (__get_cpuid_count(7, 1, &a, &b, &c, &d)) f.avx512_bf16 = f.avx512f && ((a >> 5) & 1);
  }
#endif
  return f;
}

int CpuFeatures::fp32_lanes() const { return avx512f ? 16 : avx ? 8 : 4; }

std::string CpuFeatures::summary() const {
  std::string s;
  auto add = [&](bool has, const char* name) {
    if (!has) return;
    if (!s.empty()) s += ", ";
    s += name;
  };
  if (avx512f) {
    std::string parts = "F";
    if (avx512bw) parts += " BW";
    if (avx512vl) parts += " VL";
    if (avx512dq) parts += " DQ";
    if (avx512_bf16) parts += " BF16";
    s = "AVX-512 (" + parts + ")";
  }
  add(avx2, "AVX2");
  add(!avx2 && avx, "AVX");
  add(fma, "FMA");
  add(f16c, "F16C");
  return s.empty() ? "SSE only" : s;
}

std::string blas_core_for(const CpuFeatures& cpu) {
  if (cpu.avx512f && cpu.avx512bw && cpu.avx512vl && cpu.avx512dq) return "SkylakeX";
  if (cpu.avx2 && cpu.fma) return "Haswell";
  if (cpu.avx) return "Sandybridge";
  return "";
}

std::string blas_core_loaded() {
  const char* name = openblas_get_corename();
  return name != nullptr ? name : "";
}

std::string blas_core_upgrade(const std::string& loaded, const CpuFeatures& cpu) {
  const std::string want = blas_core_for(cpu);
  const int loaded_rank = blas_core_rank(loaded);
  if (want.empty() || loaded_rank < 0 || loaded_rank >= blas_core_rank(want)) return "";
  return want;
}

void choose_blas_kernels(char** argv) {
  // The user's choice stands, and so does this function's own (one re-exec at most).
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  const std::string loaded = blas_core_loaded();
  const std::string want = blas_core_upgrade(loaded, cpu_features());
  if (want.empty()) return;
  if (setenv("OPENBLAS_CORETYPE", want.c_str(), 1) != 0) return;
  setenv("HYLA_BLAS_REPLACED", loaded.c_str(), 1);
  execv("/proc/self/exe", argv);
  unsetenv("OPENBLAS_CORETYPE");  // exec failed: go on with the kernels loaded
  unsetenv("HYLA_BLAS_REPLACED");
}

}  // namespace hyla

// What this CPU's vector units can do (from CPUID, not the model name), and the OpenBLAS kernels
// that match them.
//
// OpenBLAS (DYNAMIC_ARCH builds, as Debian's) picks its kernels once, when the library loads, from
// a table of known CPU models; on a CPU it does not know (a new or virtualised one) it falls back
// to generic SSE3 "Prescott" kernels, 3-4x slower. Its choice can only be changed through
// OPENBLAS_CORETYPE before it loads, so `hyla` re-executes itself once with that variable set
// when the loaded kernels are weaker than the vector units (choose_blas_kernels, first in main).
#pragma once

#include <string>

namespace hyla {

struct CpuFeatures {
  bool avx = false, avx2 = false, fma = false, f16c = false;
  bool avx512f = false, avx512bw = false, avx512vl = false, avx512dq = false;
  bool avx512_bf16 = false;
  /// Widest usable float vector in lanes of fp32 (4 = SSE, 8 = AVX, 16 = AVX-512), counting the
  /// operating system's support for the registers (XGETBV), not only the instruction flags.
  int fp32_lanes() const;
  /// e.g. "AVX-512 (F BW VL DQ BF16), AVX2, FMA, F16C"
  std::string summary() const;
};

/// This CPU's features (x86-64; everything false elsewhere).
CpuFeatures cpu_features();

/// The OpenBLAS core type whose kernels use these vector units best ("SkylakeX" for AVX-512 F, BW,
/// VL and DQ; "Haswell" for AVX2 + FMA; "Sandybridge" for AVX), or "" to leave OpenBLAS's choice.
std::string blas_core_for(const CpuFeatures& cpu);

/// The core type to request when OpenBLAS loaded `loaded` on `cpu`: blas_core_for(cpu) when the
/// loaded kernels are weaker (e.g. "Prescott" on an AVX-512 CPU OpenBLAS does not know), else "".
std::string blas_core_upgrade(const std::string& loaded, const CpuFeatures& cpu);

/// The core type OpenBLAS loaded (openblas_get_corename), e.g. "Haswell".
std::string blas_core_loaded();

/// Called first in main(argv): when OPENBLAS_CORETYPE is unset and blas_core_upgrade says so, sets
/// it (and HYLA_BLAS_REPLACED to the kernels it replaces, for --verbose) and re-executes this
/// program with the same arguments; returns normally otherwise, or when the re-exec fails.
void choose_blas_kernels(char** argv);

}  // namespace hyla

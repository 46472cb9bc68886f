// cpu_features.h: the OpenBLAS core type follows the vector units, and a weaker loaded one is
// replaced (the re-exec itself needs a CPU that OpenBLAS does not know; bench/busy_core.sh
// and `hyla generate --verbose` show it where one is at hand).
#include "core/cpu_features.h"

#include "testing.h"

namespace hyla {
namespace {

CpuFeatures avx512() {
  CpuFeatures f;
  f.avx = f.avx2 = f.fma = f.f16c = true;
  f.avx512f = f.avx512bw = f.avx512vl = f.avx512dq = true;
  return f;
}

TEST(CpuFeaturesTest, CoreTypeFollowsVectorUnits) {
  CpuFeatures f = avx512();
  EXPECT_EQ(blas_core_for(f), "SkylakeX");
  EXPECT_EQ(f.fp32_lanes(), 16);
  f.avx512dq = false;  // AVX-512 without DQ: OpenBLAS's SkylakeX kernels need it
  EXPECT_EQ(blas_core_for(f), "Haswell");
  f.avx512f = f.avx512bw = f.avx512vl = false;
  EXPECT_EQ(f.fp32_lanes(), 8);
  f.avx2 = false;
  EXPECT_EQ(blas_core_for(f), "Sandybridge");
  EXPECT_EQ(blas_core_for(CpuFeatures{}), "");
  EXPECT_EQ(CpuFeatures{}.fp32_lanes(), 4);
  EXPECT_EQ(CpuFeatures{}.summary(), "SSE only");
}

TEST(CpuFeaturesTest, WeakerLoadedKernelsAreReplaced) {
  EXPECT_EQ(blas_core_upgrade("Prescott", avx512()), "SkylakeX");
  EXPECT_EQ(blas_core_upgrade("Haswell", avx512()), "SkylakeX");
  EXPECT_EQ(blas_core_upgrade("Zen", avx512()), "SkylakeX");
  // as good or better, or a name not in the table: left alone
  EXPECT_EQ(blas_core_upgrade("SkylakeX", avx512()), "");
  EXPECT_EQ(blas_core_upgrade("Cooperlake", avx512()), "");
  EXPECT_EQ(blas_core_upgrade("SomeFutureCore", avx512()), "");
  CpuFeatures avx2 = avx512();
  avx2.avx512f = avx2.avx512bw = avx2.avx512vl = avx2.avx512dq = false;
  EXPECT_EQ(blas_core_upgrade("Prescott", avx2), "Haswell");
  EXPECT_EQ(blas_core_upgrade("Haswell", avx2), "");
}

TEST(CpuFeaturesTest, ThisMachineIsDescribed) {
  const CpuFeatures f = cpu_features();
  EXPECT_FALSE(f.summary().empty());
  EXPECT_FALSE(blas_core_loaded().empty());
#if defined(__AVX2__)
  // compiled for AVX2 (-march=native on this machine): CPUID must report it
  EXPECT_TRUE(f.avx2);
#endif
#if defined(__AVX512F__)
  EXPECT_TRUE(f.avx512f);
#endif
}

}  // namespace
}  // namespace hyla

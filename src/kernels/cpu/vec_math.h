// Vectorisable fp32 math for CPU kernel loops (use inside `#pragma omp simd` loops).
#pragma once

#include <bit>
#include <cstdint>

namespace hyla::kernels::cpu {

/// exp(x) for x <= 88, written with plain arithmetic so loops over it vectorise.
/// exp(x) = 2^n 2^f, n = round(x log2 e), |f| <= 1/2; 2^f by a degree-6 polynomial
/// (Taylor of exp(f ln 2)); max relative error ~2e-7 (about 2 ulp) for x in [-87, 88].
/// x < -87 returns 0 (the true value is below fp32's normal range).
inline float exp_approx(float x) {
  const float kLog2e = 1.44269504088896341f;
  // ln 2 split in two (Cody-Waite): n * kLn2Hi is exact for |n| < 2^11, so r keeps full precision.
  const float kLn2Hi = 0.693145751953125f;
  const float kLn2Lo = 1.428606820309417e-06f;
  x = x < 88.0f ? x : 88.0f;
  const bool tiny = x < -87.0f;
  x = tiny ? -87.0f : x;
  // Round to nearest by adding and removing 1.5 * 2^23 (vectorises, unlike roundevenf).
  const float kRound = 12582912.0f;
  const float n = (x * kLog2e + kRound) - kRound;
  const float r = (x - n * kLn2Hi) - n * kLn2Lo;  // |r| <= ln2 / 2
  // exp(r) = 1 + r + r^2/2 + ... + r^7/5040 (error < 2e-8 relative for |r| <= 0.347)
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float scale = std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
  return tiny ? 0.0f : p * scale;
}

}  // namespace hyla::kernels::cpu

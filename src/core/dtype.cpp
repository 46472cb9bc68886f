// IEEE binary16 <-> binary32 conversions (bit manipulation; no F16C dependency).
#include "core/dtype.h"

namespace hyla {

float f16_to_f32(f16 x) {
  const uint32_t sign = uint32_t(x.bits & 0x8000u) << 16;
  uint32_t exp = (x.bits >> 10) & 0x1fu;
  uint32_t mant = x.bits & 0x3ffu;
  uint32_t u;
  if (exp == 0x1f) {  // inf / nan
    u = sign | 0x7f800000u | (mant << 13);
  } else if (exp != 0) {  // normal
    u = sign | ((exp + 112u) << 23) | (mant << 13);
  } else if (mant == 0) {  // signed zero
    u = sign;
  } else {  // subnormal: normalise the mantissa
    int e = -1;
    do {
      ++e;
      mant <<= 1;
    } while ((mant & 0x400u) == 0);
    u = sign | (uint32_t(112 - e) << 23) | ((mant & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

f16 f32_to_f16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7fffffffu;
  if (abs > 0x7f800000u) return f16{uint16_t(sign | 0x7e00u)};   // nan
  if (abs >= 0x477ff000u) return f16{uint16_t(sign | 0x7c00u)};  // overflow (rounds to inf)
  if (abs < 0x38800000u) {
    // The result is subnormal or zero.
    if (abs < 0x33000000u) return f16{sign};  // below half the smallest subnormal
    const uint32_t exp = abs >> 23;
    const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - exp;  // value = mant * 2^(exp-150); units of 2^-24
    uint32_t half = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t halfway = 1u << (shift - 1u);
    if (rem > halfway || (rem == halfway && (half & 1u))) ++half;
    return f16{uint16_t(sign | half)};
  }
  uint32_t h = ((abs >> 13) - (112u << 10));
  const uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return f16{uint16_t(sign | h)};
}

}  // namespace hyla

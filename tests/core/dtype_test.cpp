// dtype.h: bf16 / f16 <-> f32 conversions against independent references. The f16 reference is
// the table of every finite f16 value as a double; rounding picks the nearest entry, ties to the
// even bit pattern, and |x| >= 65520 (halfway from the largest f16 to 2^16) becomes inf.
#include "core/dtype.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "testing.h"

namespace hyla {
namespace {

float bits_to_f32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint32_t f32_to_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

bool f16_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }

/// The value of an f16 bit pattern from the IEEE binary16 definition (finite or inf; not NaN).
double f16_value(uint16_t h) {
  const double sign = (h & 0x8000u) ? -1.0 : 1.0;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  if (exp == 0x1f) return sign * std::numeric_limits<double>::infinity();
  if (exp == 0) return sign * std::ldexp(double(mant), -24);  // subnormal: mant * 2^-24
  return sign * std::ldexp(1.0 + mant / 1024.0, exp - 15);
}

/// Nearest f16 to x by search over the table of positive f16 values, ties to even bits.
/// Entry 0x7c00 stands for 2^16 so that values at or past 65520 round to inf.
uint16_t f16_reference(float x) {
  static const std::vector<double> table = [] {
    std::vector<double> t(0x7c01);
    for (uint16_t h = 0; h < 0x7c00; ++h) t[h] = f16_value(h);
    t[0x7c00] = 65536.0;
    return t;
  }();
  const uint16_t sign = std::signbit(x) ? 0x8000u : 0u;
  const double a = std::fabs(double(x));
  if (a >= 65536.0) return uint16_t(sign | 0x7c00u);
  const auto hi_it = std::lower_bound(table.begin(), table.end(), a);
  const uint16_t hi = uint16_t(hi_it - table.begin());
  if (table[hi] == a || hi == 0) return uint16_t(sign | hi);
  const uint16_t lo = uint16_t(hi - 1);
  const double below = a - table[lo], above = table[hi] - a;
  const uint16_t nearest = below < above ? lo : above < below ? hi : ((lo & 1u) ? hi : lo);
  return uint16_t(sign | nearest);
}

/// Nearest bf16 to a finite or infinite x, computed in double, ties to even bits.
uint16_t bf16_reference(float x) {
  const uint32_t u = f32_to_bits(x);
  if (std::isinf(x)) return uint16_t(u >> 16);
  const uint32_t lo_bits = u & 0xffff0000u;  // truncation towards zero
  const uint32_t hi_bits = lo_bits + 0x10000u;
  const double lo = double(bits_to_f32(lo_bits));
  // The next bf16 up in magnitude; past the largest finite bf16 it is inf, which rounds like 2^128.
  const double hi = (hi_bits & 0x7fffffffu) == 0x7f800000u
                        ? std::copysign(std::ldexp(1.0, 128), double(x))
                        : double(bits_to_f32(hi_bits));
  const double below = std::fabs(double(x) - lo), above = std::fabs(hi - double(x));
  if (below < above) return uint16_t(lo_bits >> 16);
  if (above < below) return uint16_t(hi_bits >> 16);
  return uint16_t(((lo_bits >> 16) & 1u) ? hi_bits >> 16 : lo_bits >> 16);
}

TEST(DTypeTest, SizesAndNames) {
  EXPECT_EQ(dtype_size(DType::kF32), 4);
  EXPECT_EQ(dtype_size(DType::kF64), 8);
  EXPECT_EQ(dtype_size(DType::kBF16), 2);
  EXPECT_EQ(dtype_size(DType::kF16), 2);
  EXPECT_EQ(dtype_size(DType::kI32), 4);
  EXPECT_EQ(dtype_size(DType::kI64), 8);
  EXPECT_EQ(dtype_size(DType::kI8), 1);
  EXPECT_EQ(dtype_size(DType::kU8), 1);
  EXPECT_EQ(dtype_name(DType::kBF16), "bf16");
  EXPECT_EQ(dtype_name(DType::kF16), "f16");
  EXPECT_EQ(dtype_name(DType::kI32), "i32");
  EXPECT_EQ(DTypeOf<bf16>::value, DType::kBF16);
  EXPECT_EQ(DTypeOf<int64_t>::value, DType::kI64);
}

TEST(DTypeTest, Bf16ExactValuesRoundTrip) {
  for (float x : {0.0f, -0.0f, 1.0f, -2.5f, 0.15625f, 3.0e38f, 1.0e-38f, 9.18355e-41f,
                  std::numeric_limits<float>::infinity()}) {
    const float exact = bf16_to_f32(f32_to_bf16(x));
    EXPECT_EQ(f32_to_bits(bf16_to_f32(f32_to_bf16(exact))), f32_to_bits(exact)) << x;
  }
  EXPECT_EQ(f32_to_bf16(1.0f).bits, 0x3f80);
  EXPECT_EQ(f32_to_bf16(-0.0f).bits, 0x8000);
  EXPECT_EQ(f32_to_bf16(-std::numeric_limits<float>::infinity()).bits, 0xff80);
  EXPECT_EQ(bf16_to_f32(bf16{0x4049}), 3.140625f);
}

TEST(DTypeTest, Bf16RoundsToNearestEvenOnTies) {
  // bf16 keeps 7 mantissa bits: near 1.0 its spacing is 2^-7, so 1 + 2^-8 is exactly halfway.
  EXPECT_EQ(f32_to_bf16(1.0f + 0x1p-8f).bits, 0x3f80);             // tie, 1.0 is even: down
  EXPECT_EQ(f32_to_bf16(1.0f + 3 * 0x1p-8f).bits, 0x3f82);         // tie, 1 + 2^-7 is odd: up
  EXPECT_EQ(f32_to_bf16(1.0f + 0x1p-8f + 0x1p-23f).bits, 0x3f81);  // just above a tie: up
  EXPECT_EQ(f32_to_bf16(1.0f + 0x1p-8f - 0x1p-23f).bits, 0x3f80);  // just below a tie: down
  EXPECT_EQ(f32_to_bf16(-(1.0f + 3 * 0x1p-8f)).bits, 0xbf82);      // sign does not matter
  // Carry from the mantissa into the exponent: 2 - 2^-8 is halfway between 0x3fff and 2.0.
  EXPECT_EQ(f32_to_bf16(2.0f - 0x1p-8f).bits, 0x4000);
  // The largest finite f32 rounds up to inf; the largest finite bf16 stays.
  EXPECT_EQ(f32_to_bf16(std::numeric_limits<float>::max()).bits, 0x7f80);
  EXPECT_EQ(f32_to_bf16(bits_to_f32(0x7f7f0000u)).bits, 0x7f7f);
}

TEST(DTypeTest, Bf16NanStaysNan) {
  for (uint32_t u : {0x7fc00000u, 0x7f800001u, 0x7f80ffffu, 0xffc00000u, 0xff800001u, 0x7fffffffu,
                     0x7f810000u}) {
    const bf16 b = f32_to_bf16(bits_to_f32(u));
    EXPECT_TRUE(std::isnan(bf16_to_f32(b))) << std::hex << u << " -> " << b.bits;
    EXPECT_EQ(b.bits & 0x8000u, (u >> 16) & 0x8000u) << "sign kept for " << std::hex << u;
  }
}

TEST(DTypeTest, Bf16MatchesReferenceOnRandomBits) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> any_bits;
  int checked = 0;
  for (int i = 0; i < 1'000'000; ++i) {
    const uint32_t u = any_bits(rng);
    const float x = bits_to_f32(u);
    if (std::isnan(x)) continue;
    const uint16_t want = bf16_reference(x);
    ASSERT_EQ(f32_to_bf16(x).bits, want) << "f32 bits 0x" << std::hex << u;
    ++checked;
  }
  EXPECT_GT(checked, 990'000);
}

TEST(DTypeTest, F16ToF32MatchesDefinitionForAllPatterns) {
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const float got = f16_to_f32(f16{uint16_t(h)});
    if (f16_is_nan(uint16_t(h))) {
      ASSERT_TRUE(std::isnan(got)) << "f16 0x" << std::hex << h;
      continue;
    }
    const double want = f16_value(uint16_t(h));
    ASSERT_EQ(double(got), want) << "f16 0x" << std::hex << h;
    ASSERT_EQ(std::signbit(got), (h & 0x8000u) != 0) << "f16 0x" << std::hex << h;
  }
}

TEST(DTypeTest, F16RoundTripAllPatterns) {
  int nans = 0;
  for (uint32_t h = 0; h < 0x10000u; ++h) {
    const f16 back = f32_to_f16(f16_to_f32(f16{uint16_t(h)}));
    if (f16_is_nan(uint16_t(h))) {
      ++nans;
      ASSERT_TRUE(f16_is_nan(back.bits)) << "f16 0x" << std::hex << h << " -> 0x" << back.bits;
      ASSERT_EQ(back.bits & 0x8000u, h & 0x8000u) << "sign kept for f16 0x" << std::hex << h;
    } else {
      ASSERT_EQ(back.bits, h) << "f16 0x" << std::hex << h;
    }
  }
  EXPECT_EQ(nans, 2 * 1023);  // exponent 0x1f with a nonzero mantissa, both signs
}

TEST(DTypeTest, F32ToF16TiesBetweenEveryPairOfNeighbours) {
  // The midpoint of two neighbouring f16 values needs 12 significant bits: exact in f32.
  for (uint16_t h = 0; h < 0x7c00; ++h) {
    const double lo = f16_value(h);
    const double hi = h + 1 == 0x7c00 ? 65536.0 : f16_value(uint16_t(h + 1));
    const float mid = float((lo + hi) / 2);
    ASSERT_EQ(double(mid), (lo + hi) / 2);
    const uint16_t even = (h & 1u) ? uint16_t(h + 1) : h;
    ASSERT_EQ(f32_to_f16(mid).bits, even) << "midpoint above f16 0x" << std::hex << h;
    ASSERT_EQ(f32_to_f16(-mid).bits, even | 0x8000u) << "midpoint above f16 -0x" << std::hex << h;
    // One f32 step either side of the midpoint decides without a tie.
    ASSERT_EQ(f32_to_f16(std::nextafter(mid, 0.0f)).bits, h) << std::hex << h;
    ASSERT_EQ(f32_to_f16(std::nextafter(mid, 1e9f)).bits, h + 1) << std::hex << h;
  }
}

TEST(DTypeTest, F32ToF16SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(f32_to_f16(0.0f).bits, 0x0000);
  EXPECT_EQ(f32_to_f16(-0.0f).bits, 0x8000);
  EXPECT_EQ(f32_to_f16(inf).bits, 0x7c00);
  EXPECT_EQ(f32_to_f16(-inf).bits, 0xfc00);
  EXPECT_EQ(f32_to_f16(65504.0f).bits, 0x7bff);      // largest finite f16
  EXPECT_EQ(f32_to_f16(65519.996f).bits, 0x7bff);    // just below the overflow threshold
  EXPECT_EQ(f32_to_f16(65520.0f).bits, 0x7c00);      // halfway to 2^16: ties to even = inf
  EXPECT_EQ(f32_to_f16(1.0e10f).bits, 0x7c00);       // overflow
  EXPECT_EQ(f32_to_f16(0x1p-24f).bits, 0x0001);      // smallest subnormal
  EXPECT_EQ(f32_to_f16(0x1p-25f).bits, 0x0000);      // half of it: tie, 0 is even
  EXPECT_EQ(f32_to_f16(0x1.8p-25f).bits, 0x0001);    // above half: up
  EXPECT_EQ(f32_to_f16(0x1p-14f).bits, 0x0400);      // smallest normal
  EXPECT_EQ(f32_to_f16(0x1.ff8p-15f).bits, 0x03ff);  // largest subnormal
  EXPECT_EQ(f32_to_f16(0x1.ffcp-15f).bits, 0x0400);  // tie above it rounds into the normals
  EXPECT_EQ(f32_to_f16(1.0e-30f).bits, 0x0000);      // underflow to zero
  EXPECT_EQ(f32_to_f16(-1.0e-30f).bits, 0x8000);     // keeps the sign
  EXPECT_EQ(f32_to_f16(std::numeric_limits<float>::denorm_min()).bits, 0x0000);
  EXPECT_TRUE(f16_is_nan(f32_to_f16(std::numeric_limits<float>::quiet_NaN()).bits));
  EXPECT_TRUE(f16_is_nan(f32_to_f16(bits_to_f32(0x7f800001u)).bits));  // signalling NaN
  EXPECT_TRUE(f16_is_nan(f32_to_f16(bits_to_f32(0xffc00000u)).bits));
}

TEST(DTypeTest, F32ToF16MatchesReferenceOnRandomFloats) {
  std::mt19937 rng(11);
  // Any bit pattern: mostly far outside the f16 range (overflow and underflow paths).
  std::uniform_int_distribution<uint32_t> any_bits;
  // Exponents from far below the smallest f16 subnormal (2^-24) to past the overflow point
  // (2^16), with random mantissas: the subnormal, normal and overflow paths all get hit often.
  std::uniform_int_distribution<int> exponent(-30, 17);
  std::uniform_int_distribution<uint32_t> mantissa(0, (1u << 23) - 1);
  std::bernoulli_distribution negative(0.5);
  int checked = 0, subnormal = 0, overflow = 0;
  for (int i = 0; i < 2'000'000; ++i) {
    float x;
    if (i % 4 == 0) {
      x = bits_to_f32(any_bits(rng));
      if (std::isnan(x)) continue;
    } else {
      const uint32_t biased = uint32_t(exponent(rng) + 127);
      x = bits_to_f32((negative(rng) ? 0x80000000u : 0u) | (biased << 23) | mantissa(rng));
    }
    const uint16_t want = f16_reference(x);
    ASSERT_EQ(f32_to_f16(x).bits, want) << "f32 " << x << " bits 0x" << std::hex << f32_to_bits(x);
    ++checked;
    subnormal += (want & 0x7c00u) == 0 && (want & 0x3ffu) != 0;
    overflow += (want & 0x7fffu) == 0x7c00u;
  }
  EXPECT_GT(checked, 1'900'000);
  EXPECT_GT(subnormal, 100'000);  // the generator reaches every path, not just normals
  EXPECT_GT(overflow, 100'000);
}

TEST(DTypeTest, LoadAndStoreHelpersRound) {
  float f = 0;
  bf16 b;
  f16 h;
  store_f32(&f, 1.5f);
  store_f32(&b, 1.0f + 3 * 0x1p-8f);
  store_f32(&h, 1.0f + 0x1p-11f);  // f16 spacing at 1 is 2^-10: a tie, rounds to even 1.0
  EXPECT_EQ(load_f32(&f), 1.5f);
  EXPECT_EQ(load_f32(&b), 1.0f + 0x1p-6f);
  EXPECT_EQ(load_f32(&h), 1.0f);
}

}  // namespace
}  // namespace hyla

// Element types and the bf16 / fp16 <-> fp32 conversions every kernel uses.
// bf16: top 16 bits of an IEEE fp32, round-to-nearest-even on the way down.
// fp16: IEEE binary16, round-to-nearest-even, subnormals and inf/nan kept.
#pragma once

#include <cstdint>
#include <cstring>
#include <string_view>

namespace hyla {

enum class DType : uint8_t { kF32, kF64, kBF16, kF16, kI32, kI64, kI8, kU8 };

constexpr int64_t dtype_size(DType t) {
  switch (t) {
    case DType::kF64:
    case DType::kI64: return 8;
    case DType::kF32:
    case DType::kI32: return 4;
    case DType::kBF16:
    case DType::kF16: return 2;
    case DType::kI8:
    case DType::kU8: return 1;
  }
  return 0;
}

constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF64: return "f64";
    case DType::kBF16: return "bf16";
    case DType::kF16: return "f16";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kI8: return "i8";
    case DType::kU8: return "u8";
  }
  return "?";
}

/// bfloat16 storage type: 1 sign, 8 exponent, 7 mantissa bits.
struct bf16 {
  uint16_t bits = 0;
};
/// IEEE half storage type: 1 sign, 5 exponent, 10 mantissa bits.
struct f16 {
  uint16_t bits = 0;
};

inline float bf16_to_f32(bf16 x) {
  uint32_t u = uint32_t{x.bits} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

inline bf16 f32_to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{uint16_t((u >> 16) | 0x40u)};  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest, ties to even
  return bf16{uint16_t(u >> 16)};
}

float f16_to_f32(f16 x);
f16 f32_to_f16(float f);

/// Maps a C++ element type to its DType (used by TensorView::data<T>() checks).
template <typename T>
struct DTypeOf;
// One line per type reads as a table.
// clang-format off
template <> struct DTypeOf<float> { static constexpr DType value = DType::kF32; };
template <> struct DTypeOf<double> { static constexpr DType value = DType::kF64; };
template <> struct DTypeOf<bf16> { static constexpr DType value = DType::kBF16; };
template <> struct DTypeOf<f16> { static constexpr DType value = DType::kF16; };
template <> struct DTypeOf<int32_t> { static constexpr DType value = DType::kI32; };
template <> struct DTypeOf<int64_t> { static constexpr DType value = DType::kI64; };
template <> struct DTypeOf<int8_t> { static constexpr DType value = DType::kI8; };
template <> struct DTypeOf<uint8_t> { static constexpr DType value = DType::kU8; };
// clang-format on

/// Loads one element of a floating type as fp32.
inline float load_f32(const float* p) { return *p; }
inline float load_f32(const bf16* p) { return bf16_to_f32(*p); }
inline float load_f32(const f16* p) { return f16_to_f32(*p); }
/// Stores an fp32 value into a floating element, rounding to nearest even.
inline void store_f32(float* p, float x) { *p = x; }
inline void store_f32(bf16* p, float x) { *p = f32_to_bf16(x); }
inline void store_f32(f16* p, float x) { *p = f32_to_f16(x); }

}  // namespace hyla

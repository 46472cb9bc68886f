// Test helpers shared by every test: seeded random tensors, NaN poisoning, fp64 read-back, and
// expect_close that prints the first mismatches as coordinates ("[t=63, h=7, i=12]").
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace hyla::testing {

/// A tolerance and the reason it is that number: |got - want| <= atol + rtol * |want|.
struct Tolerance {
  double atol = 0;
  double rtol = 0;
  const char* why = "";
};

/// Uniform values in [lo, hi), rounded to `dtype`.
Tensor random_uniform(std::initializer_list<int64_t> shape, DType dtype, std::mt19937& rng,
                      float lo = -1.0f, float hi = 1.0f);
/// Normal(mean, stddev) values, rounded to `dtype`.
Tensor random_normal(std::initializer_list<int64_t> shape, DType dtype, std::mt19937& rng,
                     float mean = 0.0f, float stddev = 1.0f);
/// A host tensor filled with NaN bit patterns (0xff bytes), so unwritten outputs fail comparisons.
Tensor poisoned(std::initializer_list<int64_t> shape, DType dtype);
/// True when every byte of `t` (a host view) is 0xff: an output nothing wrote.
bool still_poisoned(const TensorView& t);
/// A host int32 tensor holding `values`.
Tensor int32_tensor(const std::vector<int32_t>& values);
/// Host tensor of `dtype` with the given values (row-major), rounded.
Tensor tensor_from(const std::vector<double>& values, std::initializer_list<int64_t> shape,
                   DType dtype);

/// Every element of a host view as double, in row-major index order (strides honoured).
std::vector<double> to_f64(const TensorView& t);
/// Row-major coordinates of flat index i in `t`'s shape, e.g. "[3, 1, 7]".
std::string coords(const TensorView& t, int64_t i);

/// The golden root: $HYLA_GOLDEN_DIR when set and non-empty, else `default_root`.
std::string golden_root(const std::string& default_root);
/// The architecture folders under `root` (each holds config.json and reference.safetensors),
/// sorted. Empty when `root` is missing or holds none (never throws: parameter lists are built
/// before main); pair every suite over this list with expect_golden_archs so an empty one fails.
std::vector<std::string> golden_arch_dirs(const std::string& root);
/// Fails (with where it looked) when `root` holds no architecture folder.
::testing::AssertionResult expect_golden_archs(const std::string& root);

/// The reference's own fp32 spread on logits: the largest "<...>_vs_<...>_max_abs" figure in
/// `arch_dir`/reference_meta.json "checks", i.e. how far the generator's logits moved between two
/// evaluations of the same math in another grouping (prefix then rest vs one prefill, chunked vs
/// full, token by token vs prefill, cached vs uncached, its own re-implementation vs HF). It is
/// this model's measured amplification of fp32 summation-order changes; tolerances on fp32 logits
/// are multiples of it. Identity checks on hidden states (0 by construction) are left out.
/// Aborts with the file and key when the meta data has none.
double reference_logits_spread(const std::string& arch_dir);

/// Compares element-wise; NaN/inf in `got` always fails; prints the first 5 mismatches.
::testing::AssertionResult all_close(const TensorView& got, const TensorView& want, Tolerance tol);
/// max |got - want| over finite pairs (inf when the sizes differ).
double max_abs_diff(const TensorView& got, const TensorView& want);
::testing::AssertionResult all_close(const TensorView& got, const std::vector<double>& want,
                                     Tolerance tol);

}  // namespace hyla::testing

#define EXPECT_CLOSE(got, want, ...) EXPECT_TRUE(::hyla::testing::all_close(got, want, __VA_ARGS__))
#define EXPECT_OK(expr)                             \
  do {                                              \
    const ::hyla::Status hyla_s_ = (expr);          \
    EXPECT_TRUE(hyla_s_.ok()) << hyla_s_.message(); \
  } while (0)
#define ASSERT_OK(expr)                             \
  do {                                              \
    const ::hyla::Status hyla_s_ = (expr);          \
    ASSERT_TRUE(hyla_s_.ok()) << hyla_s_.message(); \
  } while (0)
/// The call must fail and its message must contain `substring`.
#define EXPECT_ERROR_CONTAINS(expr, substring)                                              \
  do {                                                                                      \
    const ::hyla::Status hyla_s_ = (expr);                                                  \
    EXPECT_FALSE(hyla_s_.ok()) << "expected an error containing \"" << (substring) << "\""; \
    EXPECT_NE(hyla_s_.message().find(substring), std::string::npos) << hyla_s_.message();   \
  } while (0)

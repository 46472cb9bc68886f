// The harness of every GPU test (header-only; tests/{kernels,model,runtime}/cuda): the skip without
// a device, the run's seed, device copies and NaN-poisoned device outputs, host / device twins of
// one tensor (equal values under the same, possibly row-strided and misaligned, view) and their
// comparison. A kernel test reads: random inputs as twins -> the CPU body (the specification) on
// the host views, the CUDA body on the device views, outputs poisoned on both sides beforehand ->
// every element compared with a Tolerance whose `why` names the difference it covers (testing.h).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "core/device_memory.h"
#include "core/tensor.h"
#include "kernels/strided_views.h"  // padded_view, untouched_outside, bitwise_equal
#include "testing.h"

/// First statement of every GPU test.
#define HYLA_SKIP_WITHOUT_CUDA()                                                               \
  do {                                                                                         \
    if (!::hyla::cuda_available()) GTEST_SKIP() << "no CUDA device visible: GPU test skipped"; \
  } while (0)

namespace hyla::testing {

// ---- Seeds ----

/// The run's base seed: HYLA_TEST_SEED when set (to replay a failure), else a fresh
/// std::random_device draw on every call. A test puts it in its trace (seed_trace) and seeds the
/// k-th case of a table with base + k.
inline uint32_t base_seed() {
  if (const char* env = std::getenv("HYLA_TEST_SEED"))
    return uint32_t(std::strtoul(env, nullptr, 10));
  return std::random_device{}();
}

/// The trace line of a test's base seed: "HYLA_TEST_SEED=1234 replays this test".
inline std::string seed_trace(uint32_t base) {
  return str_cat("HYLA_TEST_SEED=", base, " replays this test");
}

// ---- Device copies ----

/// A device copy of a host tensor.
inline Tensor on_gpu(const Tensor& host) { return host.to(Device::cuda()); }
/// A host copy of a device tensor (synchronises).
inline Tensor on_host(const Tensor& t) { return t.to(Device::cpu()); }
/// A device tensor filled with NaN bytes (0xff): anything the kernel leaves unwritten fails.
inline Tensor poisoned_gpu(std::initializer_list<int64_t> shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype, Device::cuda());
  t.fill_bytes(0xff);
  return t;
}

// ---- Twins ----

/// One tensor as a host view and a device view of equal values and layout: the CPU body runs on
/// `host`, the CUDA body on `device`.
struct TwinView {
  Tensor host_storage, device_storage;
  TensorView host, device;
  std::vector<int64_t> shape;
  int64_t pad = 0, offset = 0;
};

/// `host_storage` (flat, random or poisoned values) and its device copy, each seen as `shape` with
/// rows `pad` elements longer than the last dim, starting `offset` elements in (padded_view).
inline TwinView twin(Tensor host_storage, const std::vector<int64_t>& shape, int64_t pad = 0,
                     int64_t offset = 0) {
  TwinView t;
  t.shape = shape;
  t.pad = pad;
  t.offset = offset;
  t.host_storage = std::move(host_storage);
  t.device_storage = on_gpu(t.host_storage);
  t.host = padded_view(t.host_storage, shape, pad, offset);
  t.device = padded_view(t.device_storage, shape, pad, offset);
  return t;
}

/// Normal(mean, stddev) values of `dtype` in `shape` (padding random too).
inline TwinView twin_random(const std::vector<int64_t>& shape, DType dtype, std::mt19937& rng,
                            float mean = 0.0f, float stddev = 1.0f, int64_t pad = 0,
                            int64_t offset = 0) {
  return twin(random_normal({padded_numel(shape, pad, offset)}, dtype, rng, mean, stddev), shape,
              pad, offset);
}

/// Uniform values in [lo, hi) of `dtype` in `shape` (padding random too).
inline TwinView twin_uniform(const std::vector<int64_t>& shape, DType dtype, std::mt19937& rng,
                             float lo = -1.0f, float hi = 1.0f, int64_t pad = 0,
                             int64_t offset = 0) {
  return twin(random_uniform({padded_numel(shape, pad, offset)}, dtype, rng, lo, hi), shape, pad,
              offset);
}

/// An output: both storages NaN-poisoned (0xff bytes), so anything left unwritten fails.
inline TwinView twin_poisoned(const std::vector<int64_t>& shape, DType dtype, int64_t pad = 0,
                              int64_t offset = 0) {
  return twin(poisoned({padded_numel(shape, pad, offset)}, dtype), shape, pad, offset);
}

/// `values` (a contiguous host tensor) inside the view of a NaN-poisoned storage of its shape with
/// `pad` and `offset`; pad = offset = 0 gives a storage equal to `values`.
inline TwinView twin_of(const Tensor& values, int64_t pad = 0, int64_t offset = 0) {
  const std::vector<int64_t> shape(values.view().shape(), values.view().shape() + values.ndim());
  Tensor storage = poisoned({padded_numel(shape, pad, offset)}, values.dtype());
  const TensorView view = padded_view(storage, shape, pad, offset);
  const std::vector<int64_t> offsets = element_offsets(storage, view);  // row-major
  const int64_t size = dtype_size(values.dtype());
  auto* dst = static_cast<char*>(storage.view().raw());
  const auto* src = static_cast<const char*>(values.view().raw());
  for (size_t i = 0; i < offsets.size(); ++i)
    std::memcpy(dst + offsets[i] * size, src + int64_t(i) * size, size_t(size));
  return twin(std::move(storage), shape, pad, offset);
}

/// The device storage copied back to the host (synchronises), and its view.
struct HostResult {
  Tensor storage;
  TensorView view;
};
inline HostResult device_result(const TwinView& t) {
  HostResult r;
  r.storage = on_host(t.device_storage);
  r.view = padded_view(r.storage, t.shape, t.pad, t.offset);
  return r;
}

// ---- Comparisons ----

/// `f32`, the tolerance of an fp32 result, widened by one rounding of each side to `y_dtype`:
/// values a few fp32 ulp apart can round to neighbouring values, one ulp of the narrow type apart
/// (bf16 2^-7, f16 2^-10 relative; f16's subnormal spacing 2^-24 near zero). f32 y: `f32` itself.
inline Tolerance rounded_to(DType y_dtype, const Tolerance& f32) {
  if (y_dtype == DType::kBF16)
    return {.atol = f32.atol,
            .rtol = 1.0 / 128 + f32.rtol,
            .why = "one bf16 rounding each side: <= 1 bf16 ulp"};
  if (y_dtype == DType::kF16)
    return {.atol = 6e-8 + f32.atol,
            .rtol = 1.0 / 1024 + f32.rtol,
            .why = "one f16 rounding each side: <= 1 f16 ulp (2^-24 when subnormal)"};
  return f32;
}

/// Every storage element outside `t`'s view holds the same bytes on the device as on the host:
/// neither body wrote past its view (outputs keep their poison, inputs their values).
inline ::testing::AssertionResult same_outside_view(const HostResult& got, const TwinView& t) {
  std::vector<bool> inside(size_t(t.host_storage.numel()), false);
  for (int64_t offset : element_offsets(t.host_storage, t.host)) inside[size_t(offset)] = true;
  const int64_t size = dtype_size(t.host_storage.dtype());
  const auto* got_bytes = static_cast<const char*>(got.storage.view().raw());
  const auto* want_bytes = static_cast<const char*>(t.host_storage.view().raw());
  for (int64_t i = 0; i < t.host_storage.numel(); ++i) {
    if (inside[size_t(i)]) continue;
    if (std::memcmp(got_bytes + i * size, want_bytes + i * size, size_t(size)) != 0)
      return ::testing::AssertionFailure()
             << "storage element " << i << " outside the view differs: written past the view";
  }
  return ::testing::AssertionSuccess();
}

/// The device result matches the host result (the CPU body's) within `tol`, and nothing outside
/// the view changed on either side differently.
inline void expect_twin_close(const TwinView& t, const Tolerance& tol) {
  const HostResult got = device_result(t);
  EXPECT_CLOSE(got.view, t.host, tol);
  EXPECT_TRUE(same_outside_view(got, t));
}

/// Equal values element by element, NaN matching NaN (the GPU writes its own canonical NaN bits,
/// so bitwise_equal would not do); the first 5 differences by coordinates.
inline ::testing::AssertionResult same_values(const TensorView& got, const TensorView& want) {
  const std::vector<double> g = to_f64(got), w = to_f64(want);
  if (g.size() != w.size())
    return ::testing::AssertionFailure()
           << "shape mismatch: " << got.shape_string() << " vs " << want.shape_string();
  int64_t bad = 0;
  std::string first;
  for (size_t i = 0; i < g.size(); ++i) {
    const bool same = std::isnan(w[i]) ? std::isnan(g[i]) : g[i] == w[i];
    if (!same && bad++ < 5)
      first += str_cat("\n  at ", coords(want, int64_t(i)), ": CUDA ", g[i], ", CPU ", w[i]);
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << bad << " of " << g.size() << " elements differ from the CPU body" << first;
}

}  // namespace hyla::testing

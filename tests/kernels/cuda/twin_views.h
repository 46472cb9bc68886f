// Host / device twins for the row-wise GPU tests (header-only): the same values in a host and a
// device buffer, each seen through the same (possibly row-strided, misaligned) view, so the CPU
// body runs on one and the CUDA body on the other; the device result comes back as a host view
// for all_close / untouched_outside. Seeds: HYLA_TEST_SEED replays a run, else a fresh one.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "core/tensor.h"
#include "kernels/cuda/cuda_testing.h"
#include "kernels/strided_views.h"
#include "testing.h"

namespace hyla::testing {

/// The run's base seed: HYLA_TEST_SEED when set (to replay a failure), else std::random_device.
/// Each test prints it in its trace.
inline uint32_t gpu_test_seed() {
  if (const char* env = std::getenv("HYLA_TEST_SEED"))
    return uint32_t(std::strtoul(env, nullptr, 10));
  return std::random_device{}();
}

/// One tensor as a host view and a device view of equal values and layout.
struct TwinView {
  Tensor host_storage, device_storage;
  TensorView host, device;
  std::vector<int64_t> shape;
  int64_t pad = 0, offset = 0;
};

/// Normal(mean, stddev) values of `dtype` in `shape`, rows `pad` elements longer than the last
/// dim, starting `offset` elements into the storage (padding random too).
inline TwinView twin_random(const std::vector<int64_t>& shape, DType dtype, std::mt19937& rng,
                            float mean = 0.0f, float stddev = 1.0f, int64_t pad = 0,
                            int64_t offset = 0) {
  TwinView t;
  t.shape = shape;
  t.pad = pad;
  t.offset = offset;
  t.host_storage = random_normal({padded_numel(shape, pad, offset)}, dtype, rng, mean, stddev);
  t.device_storage = on_gpu(t.host_storage);
  t.host = padded_view(t.host_storage, shape, pad, offset);
  t.device = padded_view(t.device_storage, shape, pad, offset);
  return t;
}

/// An output: both storages NaN-poisoned (0xff bytes), so anything left unwritten fails.
inline TwinView twin_poisoned(const std::vector<int64_t>& shape, DType dtype, int64_t pad = 0,
                              int64_t offset = 0) {
  TwinView t;
  t.shape = shape;
  t.pad = pad;
  t.offset = offset;
  const int64_t numel = padded_numel(shape, pad, offset);
  t.host_storage = poisoned({numel}, dtype);
  t.device_storage = poisoned_gpu({numel}, dtype);
  t.host = padded_view(t.host_storage, shape, pad, offset);
  t.device = padded_view(t.device_storage, shape, pad, offset);
  return t;
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

}  // namespace hyla::testing

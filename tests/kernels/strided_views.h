// Strided and misaligned views for kernel tests (header-only): a view whose rows are longer than
// its last dimension and that starts a few elements into its storage, checks that a kernel left
// everything outside its output view alone, and bitwise comparison of two views.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/tensor.h"
#include "testing.h"

namespace hyla::testing {

/// Elements a flat storage needs for padded_view(storage, shape, pad, offset).
inline int64_t padded_numel(const std::vector<int64_t>& shape, int64_t pad, int64_t offset) {
  int64_t n = shape.back() + pad;
  for (size_t d = 0; d + 1 < shape.size(); ++d) n *= shape[d];
  return n + offset;
}

/// A row-major view of `shape` over flat `storage` whose rows are `pad` elements longer than the
/// last dimension and which starts `offset` elements in. pad = offset = 0 gives a contiguous view;
/// otherwise the kernel must honour strides (and cope with a misaligned start).
inline TensorView padded_view(const Tensor& storage, const std::vector<int64_t>& shape, int64_t pad,
                              int64_t offset) {
  HYLA_CHECK(storage.numel() >= padded_numel(shape, pad, offset), "padded_view: storage too small");
  std::vector<int64_t> stride(shape.size());
  int64_t s = 1;
  for (size_t d = shape.size(); d-- > 0;) {
    stride[d] = s;
    s *= d + 1 == shape.size() ? shape[d] + pad : shape[d];
  }
  char* base = static_cast<char*>(storage.view().raw()) + offset * dtype_size(storage.dtype());
  return TensorView(base, storage.dtype(), int(shape.size()), shape.data(), stride.data(),
                    storage.device());
}

/// Element offsets of every element of `view` relative to the start of `storage`.
inline std::vector<int64_t> element_offsets(const Tensor& storage, const TensorView& view) {
  const int64_t base =
      (static_cast<const char*>(view.raw()) - static_cast<const char*>(storage.view().raw())) /
      dtype_size(view.dtype());
  std::vector<int64_t> offsets;
  std::vector<int64_t> idx(size_t(view.ndim()), 0);
  for (int64_t i = 0; i < view.numel(); ++i) {
    int64_t offset = base;
    for (int d = 0; d < view.ndim(); ++d) offset += idx[size_t(d)] * view.stride(d);
    offsets.push_back(offset);
    for (int d = view.ndim() - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < view.size(d)) break;
      idx[size_t(d)] = 0;
    }
  }
  return offsets;
}

/// Every element of poisoned `storage` outside `view` still holds the poison (0xff bytes).
inline ::testing::AssertionResult untouched_outside(const Tensor& storage, const TensorView& view) {
  std::vector<bool> inside(size_t(storage.numel()), false);
  for (int64_t offset : element_offsets(storage, view)) inside[size_t(offset)] = true;
  const int64_t size = dtype_size(storage.dtype());
  const auto* bytes = static_cast<const uint8_t*>(storage.view().raw());
  for (int64_t i = 0; i < storage.numel(); ++i) {
    if (inside[size_t(i)]) continue;
    for (int64_t k = 0; k < size; ++k) {
      if (bytes[i * size + k] != 0xff)
        return ::testing::AssertionFailure()
               << "storage element " << i << " outside the output view was written";
    }
  }
  return ::testing::AssertionSuccess();
}

/// Same shape, dtype and bytes element by element (NaN payloads included).
inline ::testing::AssertionResult bitwise_equal(const TensorView& got, const TensorView& want) {
  if (got.dtype() != want.dtype() || got.ndim() != want.ndim() || got.numel() != want.numel())
    return ::testing::AssertionFailure()
           << "layout mismatch: " << got.to_string() << " vs " << want.to_string();
  const int64_t size = dtype_size(got.dtype());
  std::vector<int64_t> idx(size_t(got.ndim()), 0);
  for (int64_t i = 0; i < got.numel(); ++i) {
    int64_t got_offset = 0, want_offset = 0;
    for (int d = 0; d < got.ndim(); ++d) {
      got_offset += idx[size_t(d)] * got.stride(d);
      want_offset += idx[size_t(d)] * want.stride(d);
    }
    if (std::memcmp(static_cast<const char*>(got.raw()) + got_offset * size,
                    static_cast<const char*>(want.raw()) + want_offset * size, size_t(size)) != 0)
      return ::testing::AssertionFailure() << "first difference at " << coords(got, i);
    for (int d = got.ndim() - 1; d >= 0; --d) {
      if (++idx[size_t(d)] < got.size(d)) break;
      idx[size_t(d)] = 0;
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace hyla::testing

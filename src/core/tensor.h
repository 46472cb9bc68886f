// TensorView: a non-owning view (pointer, dtype, device, shape, strides in elements).
// Tensor: an owned, contiguous buffer on one device that hands out views.
// Kernels take views; only runtime code owns memory.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <span>
#include <string>

#include "core/dtype.h"
#include "core/error.h"

namespace hyla {

enum class DeviceKind : uint8_t { kCpu, kCuda };

struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;

  static Device cpu() { return {}; }
  static Device cuda(int index = 0) { return {DeviceKind::kCuda, index}; }
  bool is_cpu() const { return kind == DeviceKind::kCpu; }
  bool is_cuda() const { return kind == DeviceKind::kCuda; }
  friend bool operator==(const Device&, const Device&) = default;
};
std::string device_name(Device d);
/// "[4, 32, 128]"
std::string shape_string(std::span<const int64_t> shape);

/// A CUDA stream handle (cudaStream_t) carried through kernel calls; null = default stream.
struct Stream {
  void* handle = nullptr;
};

inline constexpr int kMaxDims = 6;

class TensorView {
 public:
  TensorView() = default;
  /// A contiguous (row-major) view of `shape` at `data`.
  TensorView(void* data, DType dtype, std::initializer_list<int64_t> shape,
             Device device = Device::cpu());
  TensorView(void* data, DType dtype, int ndim, const int64_t* shape, const int64_t* stride,
             Device device = Device::cpu());

  bool defined() const { return data_ != nullptr; }
  void* raw() const { return data_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int ndim() const { return ndim_; }
  /// Size of dimension d; negative d counts from the end.
  int64_t size(int d) const { return shape_[d < 0 ? d + ndim_ : d]; }
  /// Stride of dimension d in elements; negative d counts from the end.
  int64_t stride(int d) const { return stride_[d < 0 ? d + ndim_ : d]; }
  const int64_t* shape() const { return shape_; }
  const int64_t* strides() const { return stride_; }
  int64_t numel() const;
  bool is_contiguous() const;
  /// Bytes spanned from the first to one past the last element.
  int64_t span_bytes() const;

  /// Typed pointer; aborts if T does not match the dtype (a programming error, not an input one).
  template <typename T>
  T* data() const {
    HYLA_CHECK(DTypeOf<T>::value == dtype_, "TensorView::data<", dtype_name(DTypeOf<T>::value),
               "> on a ", dtype_name(dtype_), " tensor");
    return static_cast<T*>(data_);
  }

  /// Typed pointer for host code: as data<T>(), and aborts when the view is on a CUDA device (a
  /// host dereference of device memory is a programming error that would otherwise segfault).
  template <typename T>
  T* host() const {
    HYLA_CHECK(device_.is_cpu(), "TensorView::host<", dtype_name(DTypeOf<T>::value), "> on a ",
               device_.is_cuda() ? "CUDA" : "non-host", " tensor ", shape_string());
    return data<T>();
  }

  /// View of index i along dimension 0 (drops that dimension).
  TensorView select(int64_t i) const;
  /// View of rows [begin, end) along dimension 0.
  TensorView slice(int64_t begin, int64_t end) const;
  /// View of elements [begin, begin + length) along dimension d (same rank, same strides).
  TensorView narrow(int d, int64_t begin, int64_t length) const;
  /// Splits the last dimension (stride 1) into [heads, dim]: [..., heads * dim] -> [..., heads,
  /// dim].
  TensorView unflatten_last(int64_t heads, int64_t dim) const;
  /// Same data, new contiguous shape (requires a contiguous view with the same numel).
  TensorView reshape(std::initializer_list<int64_t> shape) const;

  /// "[4, 32, 128] bf16 cpu"
  std::string to_string() const;
  std::string shape_string() const;

 private:
  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  Device device_{};
  int ndim_ = 0;
  int64_t shape_[kMaxDims] = {};
  int64_t stride_[kMaxDims] = {};
};

/// An owned contiguous tensor. Copies share the buffer (shared_ptr); use clone() for a deep copy.
class Tensor {
 public:
  Tensor() = default;
  /// Uninitialised memory (64-byte aligned on the host).
  static Tensor empty(std::initializer_list<int64_t> shape, DType dtype,
                      Device device = Device::cpu());
  static Tensor empty(int ndim, const int64_t* shape, DType dtype, Device device = Device::cpu());
  static Tensor zeros(std::initializer_list<int64_t> shape, DType dtype,
                      Device device = Device::cpu());

  bool defined() const { return view_.defined(); }
  const TensorView& view() const { return view_; }
  operator TensorView() const { return view_; }  // NOLINT: a Tensor is usable wherever a view is
  template <typename T>
  T* data() const {
    return view_.data<T>();
  }
  template <typename T>
  T* host() const {
    return view_.host<T>();
  }
  DType dtype() const { return view_.dtype(); }
  Device device() const { return view_.device(); }
  int64_t size(int d) const { return view_.size(d); }
  int ndim() const { return view_.ndim(); }
  int64_t numel() const { return view_.numel(); }
  int64_t nbytes() const { return numel() * dtype_size(dtype()); }

  /// Deep copy onto `device` (host <-> CUDA copies need a CUDA build).
  Tensor to(Device device) const;
  Tensor clone() const { return to(device()); }
  /// Fills every byte with `byte` (0xff poisons floats as NaN).
  void fill_bytes(uint8_t byte);

 private:
  std::shared_ptr<void> buffer_;
  TensorView view_;
};

}  // namespace hyla

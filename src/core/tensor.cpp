// TensorView and Tensor (see tensor.h).
#include "core/tensor.h"

#include <algorithm>

#include "core/device_memory.h"

namespace hyla {

std::string device_name(Device d) {
  return d.is_cpu() ? std::string("cpu") : str_cat("cuda:", d.index);
}

TensorView::TensorView(void* data, DType dtype, std::initializer_list<int64_t> shape, Device device)
    : data_(data), dtype_(dtype), device_(device), ndim_(int(shape.size())) {
  HYLA_CHECK(ndim_ <= kMaxDims, "at most ", kMaxDims, " dims, got ", ndim_);
  std::copy(shape.begin(), shape.end(), shape_);
  int64_t s = 1;
  for (int d = ndim_ - 1; d >= 0; --d) {
    stride_[d] = s;
    s *= shape_[d];
  }
}

TensorView::TensorView(void* data, DType dtype, int ndim, const int64_t* shape,
                       const int64_t* stride, Device device)
    : data_(data), dtype_(dtype), device_(device), ndim_(ndim) {
  HYLA_CHECK(ndim_ >= 0 && ndim_ <= kMaxDims, "at most ", kMaxDims, " dims, got ", ndim_);
  std::copy(shape, shape + ndim, shape_);
  std::copy(stride, stride + ndim, stride_);
}

int64_t TensorView::numel() const {
  int64_t n = 1;
  for (int d = 0; d < ndim_; ++d) n *= shape_[d];
  return n;
}

bool TensorView::is_contiguous() const {
  int64_t s = 1;
  for (int d = ndim_ - 1; d >= 0; --d) {
    if (shape_[d] != 1 && stride_[d] != s) return false;
    s *= shape_[d];
  }
  return true;
}

int64_t TensorView::span_bytes() const {
  if (numel() == 0) return 0;
  int64_t last = 0;
  for (int d = 0; d < ndim_; ++d) last += (shape_[d] - 1) * stride_[d];
  return (last + 1) * dtype_size(dtype_);
}

TensorView TensorView::select(int64_t i) const {
  HYLA_CHECK(ndim_ >= 1 && i >= 0 && i < shape_[0], "select(", i, ") on ", shape_string());
  char* p = static_cast<char*>(data_) + i * stride_[0] * dtype_size(dtype_);
  return TensorView(p, dtype_, ndim_ - 1, shape_ + 1, stride_ + 1, device_);
}

TensorView TensorView::slice(int64_t begin, int64_t end) const {
  HYLA_CHECK(ndim_ >= 1 && 0 <= begin && begin <= end && end <= shape_[0], "slice(", begin, ", ",
             end, ") on ", shape_string());
  TensorView v = *this;
  v.data_ = static_cast<char*>(data_) + begin * stride_[0] * dtype_size(dtype_);
  v.shape_[0] = end - begin;
  return v;
}

TensorView TensorView::narrow(int d, int64_t begin, int64_t length) const {
  if (d < 0) d += ndim_;
  HYLA_CHECK(d >= 0 && d < ndim_ && begin >= 0 && length >= 0 && begin + length <= shape_[d],
             "narrow(", d, ", ", begin, ", ", length, ") on ", shape_string());
  TensorView v = *this;
  v.data_ = static_cast<char*>(data_) + begin * stride_[d] * dtype_size(dtype_);
  v.shape_[d] = length;
  return v;
}

TensorView TensorView::unflatten_last(int64_t heads, int64_t dim) const {
  HYLA_CHECK(ndim_ >= 1 && ndim_ < kMaxDims && heads * dim == shape_[ndim_ - 1] &&
                 (stride_[ndim_ - 1] == 1 || shape_[ndim_ - 1] <= 1),
             "unflatten_last(", heads, ", ", dim, ") on ", shape_string());
  TensorView v = *this;
  v.shape_[ndim_ - 1] = heads;
  v.stride_[ndim_ - 1] = dim;
  v.shape_[ndim_] = dim;
  v.stride_[ndim_] = 1;
  ++v.ndim_;
  return v;
}

TensorView TensorView::reshape(std::initializer_list<int64_t> shape) const {
  TensorView v(data_, dtype_, shape, device_);
  HYLA_CHECK(is_contiguous() && v.numel() == numel(), "reshape of ", shape_string(), " to ",
             v.shape_string());
  return v;
}

std::string shape_string(std::span<const int64_t> shape) {
  std::string s = "[";
  for (size_t d = 0; d < shape.size(); ++d) s += str_cat(d ? ", " : "", shape[d]);
  return s + "]";
}

std::string TensorView::shape_string() const {
  return hyla::shape_string(std::span<const int64_t>(shape_, size_t(ndim_)));
}

std::string TensorView::to_string() const {
  return str_cat(shape_string(), " ", dtype_name(dtype_), " ", device_name(device_));
}

Tensor Tensor::empty(int ndim, const int64_t* shape, DType dtype, Device device) {
  HYLA_CHECK(ndim >= 0 && ndim <= kMaxDims, "at most ", kMaxDims, " dims, got ", ndim);
  int64_t stride[kMaxDims];
  int64_t n = 1;
  for (int d = ndim - 1; d >= 0; --d) {
    HYLA_CHECK(shape[d] >= 0, "negative dimension ", shape[d]);
    stride[d] = n;
    n *= shape[d];
  }
  Tensor t;
  void* p = device_alloc(device, size_t(n * dtype_size(dtype)));
  t.buffer_ = std::shared_ptr<void>(p, [device](void* q) { device_free(device, q); });
  t.view_ = TensorView(p, dtype, ndim, shape, stride, device);
  return t;
}

Tensor Tensor::empty(std::initializer_list<int64_t> shape, DType dtype, Device device) {
  HYLA_CHECK(shape.size() <= size_t(kMaxDims), "at most ", kMaxDims, " dims");
  return empty(int(shape.size()), shape.begin(), dtype, device);
}

Tensor Tensor::zeros(std::initializer_list<int64_t> shape, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_bytes(0);
  return t;
}

Tensor Tensor::to(Device device) const {
  Tensor t = empty(view_.ndim(), view_.shape(), view_.dtype(), device);
  device_copy(t.view_.raw(), device, view_.raw(), view_.device(), size_t(nbytes()));
  return t;
}

void Tensor::fill_bytes(uint8_t byte) {
  device_fill_bytes(device(), view_.raw(), byte, size_t(nbytes()));
}

}  // namespace hyla

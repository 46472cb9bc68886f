// Argument checks for op entry points (see check.h).
#include "core/check.h"

#include <cmath>
#include <vector>

namespace hyla {

namespace {
std::string expected_shape_string(std::initializer_list<int64_t> shape) {
  std::string s = "[";
  int d = 0;
  for (int64_t n : shape)
    s += str_cat(d++ ? ", " : "", n == kAnyDim ? std::string("*") : std::to_string(n));
  return s + "]";
}

/// "[4, 1]"
std::string list_string(const int64_t* values, int n) {
  std::string s = "[";
  for (int d = 0; d < n; ++d) s += str_cat(d ? ", " : "", values[d]);
  return s + "]";
}

/// The strides of a contiguous (row-major) tensor of t's shape.
std::string contiguous_strides_string(const TensorView& t) {
  int64_t stride[kMaxDims];
  int64_t n = 1;
  for (int d = t.ndim() - 1; d >= 0; --d) {
    stride[d] = n;
    n *= t.size(d);
  }
  return list_string(stride, t.ndim());
}
}  // namespace

Status check_shape(std::string_view op, std::string_view name, const TensorView& t,
                   std::initializer_list<int64_t> shape, std::string_view dims) {
  if (!t.defined()) return invalid_argument(op, ": ", name, " is missing");
  bool match = t.ndim() == int(shape.size());
  int d = 0;
  for (int64_t n : shape) {
    if (!match) break;
    match = n == kAnyDim || t.size(d) == n;
    ++d;
  }
  if (match) return ok_status();
  return invalid_argument(op, ": ", name, " has shape ", t.shape_string(), ", expected ",
                          expected_shape_string(shape), " (", dims, ")");
}

Status check_dtype(std::string_view op, std::string_view name, const TensorView& t,
                   std::initializer_list<DType> dtypes) {
  std::string allowed;
  for (DType d : dtypes) {
    if (t.dtype() == d) return ok_status();
    allowed += str_cat(allowed.empty() ? "" : " or ", dtype_name(d));
  }
  return invalid_argument(op, ": ", name, " has dtype ", dtype_name(t.dtype()), ", expected ",
                          allowed);
}

Status check_device(std::string_view op, std::string_view name, const TensorView& t,
                    Device device) {
  if (t.device() == device) return ok_status();
  return invalid_argument(op, ": ", name, " is on ", device_name(t.device()), ", expected ",
                          device_name(device));
}

Status check_last_dim_contiguous(std::string_view op, std::string_view name, const TensorView& t) {
  if (t.ndim() == 0 || t.stride(-1) == 1 || t.size(-1) == 1) return ok_status();
  return invalid_argument(op, ": ", name, " must have a contiguous last dimension: stride is ",
                          t.stride(-1), ", expected 1");
}

Status check_contiguous(std::string_view op, std::string_view name, const TensorView& t) {
  if (t.is_contiguous()) return ok_status();
  return invalid_argument(op, ": ", name, " ", t.shape_string(),
                          " must be contiguous: has strides ", list_string(t.strides(), t.ndim()),
                          ", expected ", contiguous_strides_string(t));
}

Status check_cu_seqlens(std::string_view op, const TensorView& cu, int64_t total_tokens,
                        Device device) {
  HYLA_RETURN_IF_ERROR(check_shape(op, "cu_seqlens", cu, {kAnyDim}, "B+1"));
  HYLA_RETURN_IF_ERROR(check_dtype(op, "cu_seqlens", cu, {DType::kI32}));
  HYLA_RETURN_IF_ERROR(check_device(op, "cu_seqlens", cu, device));
  if (cu.size(0) < 2)
    return invalid_argument(op, ": cu_seqlens has ", cu.size(0), " entries, expected at least 2",
                            " (B + 1 with B >= 1)");
  if (!device.is_cpu()) return ok_status();  // values not read on device calls
  const int32_t* c = cu.host<int32_t>();
  const int64_t s = cu.stride(0);
  if (c[0] != 0) return invalid_argument(op, ": cu_seqlens[0] is ", c[0], ", expected 0");
  for (int64_t b = 1; b < cu.size(0); ++b) {
    if (c[b * s] < c[(b - 1) * s])
      return invalid_argument(op, ": cu_seqlens is not non-decreasing: cu_seqlens[", b,
                              "] = ", c[b * s], " < cu_seqlens[", b - 1, "] = ", c[(b - 1) * s]);
  }
  const int64_t last = c[(cu.size(0) - 1) * s];
  if (last != total_tokens)
    return invalid_argument(op, ": cu_seqlens[B] is ", last, ", expected ", total_tokens,
                            " (the number of tokens T)");
  return ok_status();
}

Status check_slots(std::string_view op, std::string_view name, const TensorView& slots,
                   int64_t batch, int64_t num_slots, Device device) {
  HYLA_RETURN_IF_ERROR(check_shape(op, name, slots, {batch}, "B"));
  HYLA_RETURN_IF_ERROR(check_dtype(op, name, slots, {DType::kI32}));
  HYLA_RETURN_IF_ERROR(check_device(op, name, slots, device));
  if (!device.is_cpu()) return ok_status();  // values not read on device calls
  const int32_t* p = slots.host<int32_t>();
  for (int64_t b = 0; b < batch; ++b) {
    const int32_t s = p[b * slots.stride(0)];
    if (s < -1 || s >= num_slots)
      return out_of_range(op, ": ", name, "[", b, "] = ", s, " is outside [0, ", num_slots,
                          ") and is not -1 (skip)");
  }
  return ok_status();
}

Status check_positive_finite(std::string_view op, std::string_view name, float value,
                             std::string_view why) {
  if (value > 0.0f && std::isfinite(value)) return ok_status();
  if (why.empty())
    return invalid_argument(op, ": ", name, " is ", value, ", expected a finite value > 0");
  return invalid_argument(op, ": ", name, " is ", value, ", expected a finite value > 0 (", why,
                          ")");
}

Status check_in_place(std::string_view op, std::string_view out_name, const TensorView& out,
                      std::string_view in_name, const TensorView& in) {
  if (out.raw() != in.raw()) return ok_status();
  bool same_layout = out.dtype() == in.dtype() && out.ndim() == in.ndim();
  for (int d = 0; same_layout && d < in.ndim(); ++d) same_layout = out.stride(d) == in.stride(d);
  if (same_layout) return ok_status();
  return invalid_argument(op, ": ", out_name, " aliases ", in_name,
                          " with a different dtype or strides (", out_name, " ",
                          dtype_name(out.dtype()), ", ", in_name, " ", dtype_name(in.dtype()),
                          "); in place needs the same layout");
}

namespace {
int32_t slot_at(const TensorView& slots, int64_t b) {
  return slots.host<int32_t>()[b * slots.stride(0)];
}
}  // namespace

Status check_slot_ownership(std::string_view op, const TensorView& read_slots,
                            std::string_view read_name, const TensorView& write_slots,
                            std::string_view write_name, int64_t num_slots) {
  const auto in_device_memory = [](const TensorView& t) {
    return t.defined() && !t.device().is_cpu();
  };
  if (in_device_memory(read_slots) || in_device_memory(write_slots)) return ok_status();
  std::vector<int64_t> writer(size_t(num_slots), -1);
  if (write_slots.defined()) {
    for (int64_t b = 0; b < write_slots.size(0); ++b) {
      const int32_t s = slot_at(write_slots, b);
      if (s < 0) continue;
      if (writer[size_t(s)] >= 0)
        return invalid_argument(op, ": ", write_name, "[", b, "] = ", s, " repeats ", write_name,
                                "[", writer[size_t(s)], "]; each slot is written by one ",
                                "sequence only");
      writer[size_t(s)] = b;
    }
  }
  if (read_slots.defined()) {
    for (int64_t b = 0; b < read_slots.size(0); ++b) {
      const int32_t s = slot_at(read_slots, b);
      if (s >= 0 && writer[size_t(s)] >= 0 && writer[size_t(s)] != b)
        return invalid_argument(op, ": ", read_name, "[", b, "] = ", s, " is written by ",
                                write_name, "[", writer[size_t(s)],
                                "] in the same call; a sequence may only read its own slot");
    }
  }
  return ok_status();
}

bool spans_overlap(const TensorView& a, const TensorView& b) {
  if (!a.defined() || !b.defined()) return false;
  const char* a0 = static_cast<const char*>(a.raw());
  const char* b0 = static_cast<const char*>(b.raw());
  return a0 < b0 + b.span_bytes() && b0 < a0 + a.span_bytes();
}

}  // namespace hyla

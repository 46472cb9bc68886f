// Argument checks for op entry points. Each returns a Status whose message names the op, the
// argument, what it got and what was expected, e.g.
//   "gated_delta_rule_chunk: k has shape [64, 2, 128], expected [64, 2, 64] (T, H, d_k)".
#pragma once

#include <initializer_list>
#include <string_view>

#include "core/tensor.h"

namespace hyla {

inline constexpr int64_t kAnyDim = -1;

/// `t` must be defined, with exactly `shape.size()` dims, each equal to `shape[d]` unless kAnyDim.
/// `dims` names the dimensions for the message ("T, H, d_k").
Status check_shape(std::string_view op, std::string_view name, const TensorView& t,
                   std::initializer_list<int64_t> shape, std::string_view dims);
/// `t` must have one of `dtypes`.
Status check_dtype(std::string_view op, std::string_view name, const TensorView& t,
                   std::initializer_list<DType> dtypes);
/// `t` must live on `device`.
Status check_device(std::string_view op, std::string_view name, const TensorView& t, Device device);
/// The innermost dimension of `t` must have stride 1.
Status check_last_dim_contiguous(std::string_view op, std::string_view name, const TensorView& t);
/// `t` must be fully contiguous.
Status check_contiguous(std::string_view op, std::string_view name, const TensorView& t);

// Index tensors (cu_seqlens, slots) live on the kernel's `device`. Their values are read here
// only when that is the CPU: a CUDA call is not synchronised to copy them back, and its body
// trusts them (the caller built them on the host and checked them there, or computed them).

/// Validates packed-varlen sequence offsets: int32 [B+1] on `device`; on the CPU also cu[0] == 0,
/// non-decreasing, cu[B] == total_tokens.
Status check_cu_seqlens(std::string_view op, const TensorView& cu_seqlens, int64_t total_tokens,
                        Device device = Device::cpu());
/// Validates int32 [B] slot ids on `device`; on the CPU also each in [0, num_slots) or -1 (skip).
Status check_slots(std::string_view op, std::string_view name, const TensorView& slots,
                   int64_t batch, int64_t num_slots, Device device = Device::cpu());

/// A scalar parameter (eps, theta, a scale) must be finite and > 0; `why`, when given, ends the
/// message in parentheses ("keeps zero rows finite").
Status check_positive_finite(std::string_view op, std::string_view name, float value,
                             std::string_view why = {});

/// True when the byte ranges of two defined views intersect (pointer arithmetic only: no memory
/// is read, so device views are fine).
bool spans_overlap(const TensorView& a, const TensorView& b);

/// In-place use: when `out` starts where `in` does, it must have in's dtype and strides (a
/// partial overlap with another layout would read values already overwritten).
Status check_in_place(std::string_view op, std::string_view out_name, const TensorView& out,
                      std::string_view in_name, const TensorView& in);

/// Every slot in `write_slots` is written by one sequence only, and no sequence reads (through
/// `read_slots`) a slot another sequence writes: parallel kernel bodies visit sequences in any
/// order, so either would make the result depend on that order. Either array may be undefined;
/// both must already have passed check_slots. Slot arrays in device memory are not read (see
/// above): the check passes for them.
Status check_slot_ownership(std::string_view op, const TensorView& read_slots,
                            std::string_view read_name, const TensorView& write_slots,
                            std::string_view write_name, int64_t num_slots);

}  // namespace hyla

// Entry point of causal attention over a KV cache: argument checks, then dispatch to the CPU or
// CUDA body.
#include "kernels/attention.h"

#include <cmath>

#include "core/check.h"

namespace hyla::kernels {

namespace {

Status check_attention(const AttentionParams& p) {
  constexpr const char* op = "attention";
  HYLA_RETURN_IF_ERROR(check_shape(op, "q", p.q, {kAnyDim, kAnyDim, kAnyDim}, "T, HQ, d_qk"));
  const int64_t T = p.q.size(0), HQ = p.q.size(1), d_qk = p.q.size(2);
  HYLA_RETURN_IF_ERROR(
      check_shape(op, "k_cache", p.k_cache, {kAnyDim, kAnyDim, d_qk}, "S, HKV, d_qk"));
  const int64_t S = p.k_cache.size(0), HKV = p.k_cache.size(1);
  HYLA_RETURN_IF_ERROR(check_shape(op, "v_cache", p.v_cache, {S, HKV, kAnyDim}, "S, HKV, d_v"));
  const int64_t d_v = p.v_cache.size(2);
  HYLA_RETURN_IF_ERROR(check_shape(op, "o", p.o, {T, HQ, d_v}, "T, HQ, d_v"));
  const Device device = p.q.device();
  for (const auto& [name, t] :
       {std::pair{"q", &p.q}, {"k_cache", &p.k_cache}, {"v_cache", &p.v_cache}, {"o", &p.o}}) {
    HYLA_RETURN_IF_ERROR(check_dtype(op, name, *t, {DType::kF32}));
    HYLA_RETURN_IF_ERROR(check_last_dim_contiguous(op, name, *t));
    HYLA_RETURN_IF_ERROR(check_device(op, name, *t, device));
  }
  if (HQ < 1 || HKV < 1 || HQ % HKV != 0)
    return invalid_argument(op, ": HQ = ", HQ, " query heads and HKV = ", HKV,
                            " kv heads, expected HKV >= 1 and HQ a positive multiple of HKV");
  if (d_qk < 1 || d_v < 1)
    return invalid_argument(op, ": d_qk = ", d_qk, ", d_v = ", d_v, ", expected both >= 1");
  if (p.past < 0) return invalid_argument(op, ": past is ", p.past, ", expected >= 0");
  if (S < p.past + T)
    return invalid_argument(op, ": k_cache / v_cache hold S = ", S,
                            " rows, expected >= past + T = ", p.past, " + ", T, " = ", p.past + T);
  if (!(p.scale >= 0.0f) || !std::isfinite(p.scale))
    return invalid_argument(op, ": scale is ", p.scale,
                            ", expected a finite value > 0, or 0 for d_qk^-1/2");
  if (p.o.raw() == p.k_cache.raw() || p.o.raw() == p.v_cache.raw())
    return invalid_argument(op, ": o aliases the KV cache; the output needs its own memory");
  if (p.o.raw() == p.q.raw() &&
      (d_v != d_qk || p.o.stride(0) != p.q.stride(0) || p.o.stride(1) != p.q.stride(1)))
    return invalid_argument(op, ": o aliases q with a different layout (d_v = ", d_v,
                            ", d_qk = ", d_qk, "); in place needs d_v = d_qk and the same strides");
  return ok_status();
}

}  // namespace

Status attention(const AttentionParams& p, Stream) {
  HYLA_RETURN_IF_ERROR(check_attention(p));
  if (p.q.device().is_cuda()) return unsupported("attention: no CUDA body yet");
  cpu::attention(p);
  return ok_status();
}

}  // namespace hyla::kernels

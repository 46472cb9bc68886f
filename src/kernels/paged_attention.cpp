// Entry point of paged attention (see paged_attention.h): argument checks, then dispatch to the
// CPU or CUDA body.
#include "kernels/paged_attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "core/check.h"
#include "kernels/dispatch.h"

namespace hyla::kernels {

namespace {

Status check_paged_attention(const PagedAttentionParams& p) {
  constexpr std::string_view op = "paged_attention";
  HYLA_RETURN_IF_ERROR(check_shape(op, "q", p.q, {kAnyDim, kAnyDim, kAnyDim}, "T, HQ, d_qk"));
  const int64_t T = p.q.size(0), HQ = p.q.size(1), d_qk = p.q.size(2);
  const bool rope = p.k_rope_pages.defined();
  const int64_t d_rope = rope ? p.k_rope_pages.size(-1) : 0;
  HYLA_RETURN_IF_ERROR(check_shape(op, "k_pages", p.k_pages, {kAnyDim, kAnyDim, kAnyDim, kAnyDim},
                                   "num_pages, page_size, HKV, d_k"));
  const int64_t num_pages = p.k_pages.size(0), page_size = p.k_pages.size(1),
                HKV = p.k_pages.size(2), d_k = p.k_pages.size(3);
  if (d_k + d_rope != d_qk)
    return invalid_argument(op, ": q has d_qk = ", d_qk, ", the keys d_k = ", d_k,
                            rope ? " + d_rope = " : "", rope ? std::to_string(d_rope) : "",
                            ", expected equal");
  if (rope)
    HYLA_RETURN_IF_ERROR(check_shape(op, "k_rope_pages", p.k_rope_pages,
                                     {num_pages, page_size, 1, kAnyDim},
                                     "num_pages, page_size, 1, d_rope"));
  HYLA_RETURN_IF_ERROR(check_shape(op, "v_pages", p.v_pages, {num_pages, page_size, HKV, kAnyDim},
                                   "num_pages, page_size, HKV, d_v"));
  const int64_t d_v = p.v_pages.size(3);
  HYLA_RETURN_IF_ERROR(check_shape(op, "o", p.o, {T, HQ, d_v}, "T, HQ, d_v"));
  if (p.gate.defined())
    HYLA_RETURN_IF_ERROR(check_shape(op, "gate", p.gate, {T, HQ, d_v}, "T, HQ, d_v"));
  const Device device = p.q.device();
  for (const auto& [name, t] : {std::pair{"q", &p.q}, {"o", &p.o}, {"gate", &p.gate}}) {
    if (!t->defined()) continue;
    HYLA_RETURN_IF_ERROR(check_dtype(op, name, *t, {DType::kF32}));
    HYLA_RETURN_IF_ERROR(check_last_dim_contiguous(op, name, *t));
    HYLA_RETURN_IF_ERROR(check_device(op, name, *t, device));
  }
  for (const auto& [name, t] : {std::pair{"k_pages", &p.k_pages},
                                {"k_rope_pages", &p.k_rope_pages},
                                {"v_pages", &p.v_pages}}) {
    if (!t->defined()) continue;
    HYLA_RETURN_IF_ERROR(check_dtype(op, name, *t, {DType::kF32, DType::kBF16}));
    HYLA_RETURN_IF_ERROR(check_dtype(op, name, *t, {p.k_pages.dtype()}));
    HYLA_RETURN_IF_ERROR(check_last_dim_contiguous(op, name, *t));
    HYLA_RETURN_IF_ERROR(check_device(op, name, *t, device));
  }
  if (HQ < 1 || HKV < 1 || HQ % HKV != 0)
    return invalid_argument(op, ": HQ = ", HQ, " query heads and HKV = ", HKV,
                            " kv heads, expected HKV >= 1 and HQ a positive multiple of HKV");
  if (d_k < 1 || d_v < 1 || (rope && d_rope < 1))
    return invalid_argument(op, ": d_k = ", d_k, ", d_v = ", d_v, ", d_rope = ", d_rope,
                            ", expected each >= 1");
  if (num_pages < 1 || page_size < 1)
    return invalid_argument(op, ": k_pages has shape ", p.k_pages.shape_string(),
                            ", expected at least one page of at least one row");
  if (device.is_cuda() && (d_qk > kPagedAttentionMaxHeadDim || d_v > kPagedAttentionMaxHeadDim))
    return invalid_argument(op, ": d_qk = ", d_qk, ", d_v = ", d_v,
                            ", the CUDA body takes each up to ", kPagedAttentionMaxHeadDim);
  if (!(p.scale >= 0.0f) || !std::isfinite(p.scale))
    return invalid_argument(op, ": scale is ", p.scale,
                            ", expected a finite value > 0, or 0 for d_qk^-1/2");
  for (const TensorView* in : {&p.q, &p.k_pages, &p.k_rope_pages, &p.v_pages, &p.gate})
    if (in->defined() && in->raw() == p.o.raw())
      return invalid_argument(op, ": o aliases an input; the output needs its own memory");
  if (p.decode_splits < 0 || p.decode_splits > kPagedAttentionMaxSplits)
    return invalid_argument(op, ": decode_splits is ", p.decode_splits, ", expected 0 (auto) to ",
                            kPagedAttentionMaxSplits);
  HYLA_RETURN_IF_ERROR(
      check_page_index(op, p.index, T, num_pages, page_size, device, /*writes=*/false));
  const int64_t need = paged_attention_workspace_bytes(p);
  if (need == 0) return ok_status();
  if (!p.workspace.defined())
    return invalid_argument(op, ": workspace is missing; this call needs ", need,
                            " bytes (paged_attention_workspace_bytes)");
  HYLA_RETURN_IF_ERROR(check_contiguous(op, "workspace", p.workspace));
  HYLA_RETURN_IF_ERROR(check_device(op, "workspace", p.workspace, device));
  const int64_t have = p.workspace.numel() * dtype_size(p.workspace.dtype());
  if (have < need)
    return invalid_argument(op, ": workspace holds ", have, " bytes, expected at least ", need,
                            " (paged_attention_workspace_bytes)");
  if (reinterpret_cast<uintptr_t>(p.workspace.raw()) % 16 != 0)
    return invalid_argument(op, ": workspace is not 16-byte aligned");
  return ok_status();
}

}  // namespace

int64_t paged_attention_splits(const PagedAttentionParams& p) {
  const int64_t T = p.q.size(0), B = p.index.cu_seqlens.size(0) - 1;
  if (!p.q.device().is_cuda() || T != B || T < 1) return 1;
  if (p.decode_splits > 0) return p.decode_splits;
  // two waves of 132 SMs; a split of fewer than 64 keys costs more in the merge than it saves
  constexpr int64_t kTargetBlocks = 2 * 132, kMinKeysPerSplit = 64;
  const int64_t max_context = p.index.page_table.size(1) * p.k_pages.size(1);
  const int64_t units = T * p.k_pages.size(2);
  const int64_t by_blocks = (kTargetBlocks + units - 1) / units;
  const int64_t by_keys = (max_context + kMinKeysPerSplit - 1) / kMinKeysPerSplit;
  return std::clamp<int64_t>(std::min(by_blocks, by_keys), 1, kPagedAttentionMaxSplits);
}

int64_t paged_attention_workspace_bytes(const PagedAttentionParams& p) {
  const int64_t splits = paged_attention_splits(p);
  if (splits <= 1) return 0;
  // [T, HQ, splits] (max, sum) pairs, padded to 16 bytes, then [T, HQ, splits, d_v] outputs
  const int64_t partials = p.q.size(0) * p.q.size(1) * splits;
  return int64_t(sizeof(float)) * ((2 * partials + 3) / 4 * 4 + partials * p.v_pages.size(3));
}

Status paged_attention(const PagedAttentionParams& p, Stream stream) {
  HYLA_RETURN_IF_ERROR(check_paged_attention(p));
  return dispatch(
      "paged_attention", p.q.device(), stream, [&] { cpu::paged_attention(p); },
      HYLA_CUDA_BODY(cuda::paged_attention(p, stream)));
}

}  // namespace hyla::kernels

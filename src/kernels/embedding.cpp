// Entry point of the embedding lookup: argument checks, then dispatch to the CPU or CUDA body.
#include "kernels/embedding.h"

#include "core/check.h"
#include "kernels/dispatch.h"

namespace hyla::kernels {

namespace {

Status check_embedding(const EmbeddingParams& p) {
  constexpr const char* op = "embedding";
  HYLA_RETURN_IF_ERROR(check_shape(op, "table", p.table, {kAnyDim, kAnyDim}, "V, H"));
  const int64_t V = p.table.size(0), H = p.table.size(1);
  HYLA_RETURN_IF_ERROR(check_shape(op, "ids", p.ids, {kAnyDim}, "T"));
  const int64_t T = p.ids.size(0);
  HYLA_RETURN_IF_ERROR(check_shape(op, "y", p.y, {T, H}, "T (as ids), H (as table)"));
  const Device device = p.table.device();
  HYLA_RETURN_IF_ERROR(check_dtype(op, "table", p.table, {DType::kF32, DType::kBF16}));
  HYLA_RETURN_IF_ERROR(check_dtype(op, "ids", p.ids, {DType::kI32}));
  HYLA_RETURN_IF_ERROR(check_dtype(op, "y", p.y, {DType::kF32}));
  HYLA_RETURN_IF_ERROR(check_last_dim_contiguous(op, "table", p.table));
  HYLA_RETURN_IF_ERROR(check_contiguous(op, "ids", p.ids));
  HYLA_RETURN_IF_ERROR(check_last_dim_contiguous(op, "y", p.y));
  for (const auto& [name, t] : {std::pair{"table", &p.table}, {"ids", &p.ids}, {"y", &p.y}})
    HYLA_RETURN_IF_ERROR(check_device(op, name, *t, device));
  if (device.is_cpu()) {
    const int32_t* ids = p.ids.host<int32_t>();
    for (int64_t t = 0; t < T; ++t)
      if (ids[t] < 0 || ids[t] >= V)
        return out_of_range(op, ": ids[", t, "] is ", ids[t], ", outside [0, ", V, ")");
  }
  return ok_status();
}

}  // namespace

Status embedding(const EmbeddingParams& p, Stream stream) {
  HYLA_RETURN_IF_ERROR(check_embedding(p));
  return dispatch(
      "embedding", p.table.device(), stream, [&] { cpu::embedding(p); },
      HYLA_CUDA_BODY(cuda::embedding(p, stream)));
}

}  // namespace hyla::kernels

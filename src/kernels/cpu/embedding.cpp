// CPU body of the embedding lookup (see kernels/embedding.h): one row copy per token, widened to
// f32, tokens split into parallel blocks.
#include "kernels/embedding.h"

#include "kernels/cpu/tensor_access.h"

namespace hyla::kernels::cpu {

void embedding(const EmbeddingParams& p) {
  const int64_t T = p.ids.size(0), H = p.table.size(1);
  const int32_t* ids = p.ids.host<int32_t>();
  float* y = p.y.host<float>();
  dispatch_float(p.table.dtype(), [&]<typename TT>(TT) {
    const TT* table = static_cast<const TT*>(p.table.raw());
    parallel_for_blocks(T, rows_per_task(H), [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        const TT* row = table + int64_t(ids[t]) * p.table.stride(0);
        float* out = y + t * p.y.stride(0);
        for (int64_t i = 0; i < H; ++i) out[i] = load_f32(row + i);
      }
    });
  });
}

}  // namespace hyla::kernels::cpu

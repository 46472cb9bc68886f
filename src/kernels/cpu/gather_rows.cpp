// CPU body of the row gather (see kernels/gather_rows.h): one row copy per output row, converted
// through fp32, rows split into parallel blocks.
#include "kernels/gather_rows.h"

#include "kernels/cpu/tensor_access.h"

namespace hyla::kernels::cpu {

void gather_rows(const GatherRowsParams& p) {
  const int64_t M = p.index.size(0), W = p.x.size(1);
  const int32_t* index = p.index.host<int32_t>();
  dispatch_float(p.x.dtype(), [&]<typename TX>(TX) {
    dispatch_float(p.y.dtype(), [&]<typename TY>(TY) {
      const TX* x = static_cast<const TX*>(p.x.raw());
      TY* y = static_cast<TY*>(p.y.raw());
      parallel_for_blocks(M, rows_per_task(W), [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) {
          const TX* in = x + int64_t(index[i]) * p.x.stride(0);
          TY* out = y + i * p.y.stride(0);
          for (int64_t c = 0; c < W; ++c) store_f32(out + c, load_f32(in + c));
        }
      });
    });
  });
}

}  // namespace hyla::kernels::cpu

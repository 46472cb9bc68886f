// CPU body of the strided copy (see kernels/copy.h): rows (every dimension but the last) split
// into parallel blocks, each row converted element by element through fp32.
#include "kernels/copy.h"

#include "kernels/cpu/tensor_access.h"

namespace hyla::kernels::cpu {

void copy(const CopyParams& p) {
  const int64_t n = p.x.size(-1), sx = p.x.stride(-1), sy = p.y.stride(-1);
  dispatch_float(p.x.dtype(), [&]<typename TX>(TX) {
    dispatch_float(p.y.dtype(), [&]<typename TY>(TY) {
      const TX* x = static_cast<const TX*>(p.x.raw());
      TY* y = static_cast<TY*>(p.y.raw());
      parallel_for_blocks(num_rows(p.x), rows_per_task(n), [&](int64_t begin, int64_t end) {
        for (int64_t row = begin; row < end; ++row) {
          const TX* in = x + row_offset(p.x, row);
          TY* out = y + row_offset(p.y, row);
          for (int64_t i = 0; i < n; ++i) store_f32(out + i * sy, load_f32(in + i * sx));
        }
      });
    });
  });
}

}  // namespace hyla::kernels::cpu

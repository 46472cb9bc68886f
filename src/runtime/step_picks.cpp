// One step's picks (see step_picks.h).
#include "runtime/step_picks.h"

#include <cmath>

#include "kernels/argmax.h"

namespace hyla::runtime {

std::string StepPicks::non_finite(int64_t b, int64_t vocab) const {
  const float value = first_bad_value(b);
  return str_cat(std::isnan(value) ? "NaN"
                 : value > 0       ? "+inf"
                                   : "-inf",
                 " at token ", first_bad(b), " (", bad(b), " of ", vocab, " logits not finite)");
}

Result<StepPicks> pick(const Tensor& logits, bool host_rows) {
  const int64_t B = logits.size(0);
  const Device device = logits.device();
  Tensor summary = Tensor::empty({4, B}, DType::kI32, device);
  const TensorView rows = summary.view(), value_bits = rows.select(3);
  const int64_t shape[] = {B}, stride[] = {1};
  HYLA_RETURN_IF_ERROR(kernels::argmax(
      {.logits = logits,
       .ids = rows.select(0),
       .non_finite = rows.select(1),
       .first_bad = rows.select(2),
       .first_bad_value = TensorView(value_bits.raw(), DType::kF32, 1, shape, stride, device)}));
  StepPicks picks;
  picks.summary = device.is_cpu() ? summary : summary.to(Device::cpu());
  picks.rows = picks.summary.host<int32_t>();
  picks.stride = B;
  if (host_rows) picks.host_logits = device.is_cpu() ? logits : logits.to(Device::cpu());
  return picks;
}

}  // namespace hyla::runtime

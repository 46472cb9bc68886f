// LayerTimes (see layer_times.h).
#include "model/layer_times.h"

#include "core/device_memory.h"

namespace hyla::model {

const char* layer_part_name(LayerPart part) {
  switch (part) {
    case LayerPart::kEmbedding: return "embedding";
    case LayerPart::kGatedDeltaNet: return "gated_deltanet";
    case LayerPart::kKimiDelta: return "kimi_delta";
    case LayerPart::kFullAttention: return "full_attention";
    case LayerPart::kLatentAttention: return "latent_attention";
    case LayerPart::kDenseMlp: return "dense_mlp";
    case LayerPart::kMoe: return "moe";
    case LayerPart::kAttnResidual: return "attn_residual";
    case LayerPart::kHead: return "head";
    case LayerPart::kCount: break;
  }
  return "?";
}

void LayerTimes::start(Device device) {
  device_ = device;
  device_synchronize(device_);
  last_ = Clock::now();
}

void LayerTimes::mark(LayerPart part) {
  device_synchronize(device_);
  const Clock::time_point now = Clock::now();
  seconds_[size_t(part)] += std::chrono::duration<double>(now - last_).count();
  last_ = now;
}

double LayerTimes::total_seconds() const {
  double sum = 0;
  for (double s : seconds_) sum += s;
  return sum;
}

void LayerTimes::add(const LayerTimes& other) {
  for (size_t i = 0; i < seconds_.size(); ++i) seconds_[i] += other.seconds_[i];
}

}  // namespace hyla::model

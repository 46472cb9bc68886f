// StatePool (see state_pool.h): slot bookkeeping plus one conv and one SSM pool tensor per linear
// layer.
#include "runtime/memory/state_pool.h"

#include <limits>

#include "core/device_memory.h"

namespace hyla::runtime {

using model::MixerKind;
using model::ModelConfig;

namespace {

/// Per-slot geometry of one linear layer (the same for every linear layer of a model).
struct LinearGeometry {
  int64_t D;   // conv channels: q, k, v
  int64_t K1;  // K-1 inputs kept per channel
  int64_t HV;  // value heads
  int64_t d_v;
  int64_t d_k;
};

LinearGeometry geometry_of(const ModelConfig& c) {
  const model::LinearAttentionConfig& l = c.linear;
  return {l.conv_dim(), l.conv_kernel - 1, l.num_v_heads, l.head_v_dim, l.head_k_dim};
}

int64_t num_linear_layers(const ModelConfig& c) {
  return c.num_layers_of(MixerKind::kGatedDeltaNet) + c.num_layers_of(MixerKind::kKimiDelta);
}

Status check_dtype_option(const char* name, DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kBF16)
    return invalid_argument("state_pool: ", name, " is ", dtype_name(dtype),
                            ", expected f32 or bf16");
  return ok_status();
}

Status check_config(const ModelConfig& c) {
  const model::LinearAttentionConfig& l = c.linear;
  if (num_linear_layers(c) == 0)
    return invalid_argument("state_pool: ", c.model_type,
                            " has no linear-attention layer, so it needs no state pool");
  if (l.num_k_heads <= 0 || l.num_v_heads <= 0 || l.head_k_dim <= 0 || l.head_v_dim <= 0 ||
      l.conv_kernel < 1)
    return invalid_argument("state_pool: linear attention needs H, HV, d_k, d_v, K >= 1, got ",
                            l.num_k_heads, ", ", l.num_v_heads, ", ", l.head_k_dim, ", ",
                            l.head_v_dim, ", ", l.conv_kernel);
  // KDA state is [H, d, d] with conv 3 H d (layers/kda.cpp): one head count, one head dim.
  if (c.num_layers_of(MixerKind::kKimiDelta) > 0 &&
      (l.num_k_heads != l.num_v_heads || l.head_k_dim != l.head_v_dim))
    return invalid_argument("state_pool: KDA needs H == HV and d_k == d_v, got H ", l.num_k_heads,
                            ", HV ", l.num_v_heads, ", d_k ", l.head_k_dim, ", d_v ", l.head_v_dim);
  return ok_status();
}

}  // namespace

int64_t StatePool::bytes_per_slot(const ModelConfig& config, StatePoolOptions options) {
  const LinearGeometry g = geometry_of(config);
  const int64_t conv = g.D * g.K1 * dtype_size(options.conv_dtype);
  const int64_t ssm = g.HV * g.d_v * g.d_k * dtype_size(options.ssm_dtype);
  return num_linear_layers(config) * (conv + ssm);
}

Result<StatePool> StatePool::create(const ModelConfig& config, int64_t num_slots,
                                    StatePoolOptions options) {
  HYLA_RETURN_IF_ERROR(check_dtype_option("conv_dtype", options.conv_dtype));
  HYLA_RETURN_IF_ERROR(check_dtype_option("ssm_dtype", options.ssm_dtype));
  HYLA_RETURN_IF_ERROR(check_config(config));
  if (num_slots < 1 || num_slots > std::numeric_limits<int32_t>::max())
    return invalid_argument("state_pool: num_slots is ", num_slots, ", expected [1, 2^31)");

  StatePool pool;
  pool.options_ = options;
  pool.capacity_ = num_slots;
  pool.slot_bytes_ = bytes_per_slot(config, options);
  const LinearGeometry g = geometry_of(config);
  for (MixerKind kind : config.mixers) {
    if (!model::is_linear_mixer(kind)) {
      pool.linear_index_.push_back(-1);
      continue;
    }
    pool.linear_index_.push_back(int(pool.conv_.size()));
    pool.conv_.push_back(Tensor::zeros({num_slots, g.D, g.K1}, options.conv_dtype, options.device));
    pool.ssm_.push_back(
        Tensor::zeros({num_slots, g.HV, g.d_v, g.d_k}, options.ssm_dtype, options.device));
  }
  pool.allocated_.assign(size_t(num_slots), 0);
  pool.free_list_.reserve(size_t(num_slots));
  for (int64_t s = num_slots - 1; s >= 0; --s) pool.free_list_.push_back(int32_t(s));
  return pool;
}

bool StatePool::is_allocated(int32_t slot) const {
  return slot >= 0 && slot < capacity_ && allocated_[size_t(slot)] != 0;
}

Status StatePool::check_allocated(const char* op, int32_t slot) const {
  if (slot < 0 || slot >= capacity_)
    return out_of_range("state_pool.", op, ": slot ", slot, " is outside [0, ", capacity_, ")");
  if (allocated_[size_t(slot)] == 0)
    return invalid_argument("state_pool.", op, ": slot ", slot,
                            " is not allocated (already freed, or never allocated)");
  return ok_status();
}

Result<int32_t> StatePool::allocate() {
  if (free_list_.empty())
    return Status(ErrorCode::kOutOfMemory,
                  str_cat("state_pool.allocate: no free slot: ", used_slots(), " of ", capacity_,
                          " slots are in use; free one or plan more slots"));
  const int32_t slot = free_list_.back();
  free_list_.pop_back();
  allocated_[size_t(slot)] = 1;
  return slot;
}

Status StatePool::free(int32_t slot) {
  HYLA_RETURN_IF_ERROR(check_allocated("free", slot));
  allocated_[size_t(slot)] = 0;
  free_list_.push_back(slot);
  return ok_status();
}

Status StatePool::zero(int32_t slot) {
  HYLA_RETURN_IF_ERROR(check_allocated("zero", slot));
  for (size_t i = 0; i < conv_.size(); ++i) {
    for (const Tensor* pool : {&conv_[i], &ssm_[i]}) {
      const TensorView s = pool->view().select(slot);
      device_fill_bytes(options_.device, s.raw(), 0, size_t(s.span_bytes()));
    }
  }
  return ok_status();
}

Status StatePool::copy(int32_t from, int32_t to) {
  HYLA_RETURN_IF_ERROR(check_allocated("copy", from));
  HYLA_RETURN_IF_ERROR(check_allocated("copy", to));
  if (from == to) return ok_status();
  for (size_t i = 0; i < conv_.size(); ++i) {
    for (const Tensor* pool : {&conv_[i], &ssm_[i]}) {
      const TensorView src = pool->view().select(from);
      const TensorView dst = pool->view().select(to);
      device_copy(dst.raw(), options_.device, src.raw(), options_.device, size_t(src.span_bytes()));
    }
  }
  return ok_status();
}

int StatePool::linear_index(int layer) const {
  HYLA_CHECK(layer >= 0 && size_t(layer) < linear_index_.size(), "linear_index(", layer,
             ") of a model with ", linear_index_.size(), " layers");
  return linear_index_[size_t(layer)];
}

TensorView StatePool::conv_state(int linear_layer_index) const {
  HYLA_CHECK(linear_layer_index >= 0 && linear_layer_index < num_layers(), "conv_state(",
             linear_layer_index, ") of ", num_layers(), " linear layers");
  return conv_[size_t(linear_layer_index)].view();
}

TensorView StatePool::ssm_state(int linear_layer_index) const {
  HYLA_CHECK(linear_layer_index >= 0 && linear_layer_index < num_layers(), "ssm_state(",
             linear_layer_index, ") of ", num_layers(), " linear layers");
  return ssm_[size_t(linear_layer_index)].view();
}

}  // namespace hyla::runtime

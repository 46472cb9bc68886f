// pool_views (see pool_views.h).
#include "runtime/memory/pool_views.h"

namespace hyla::runtime {

model::BatchMemory pool_views(const model::ModelConfig& config, const StatePool* states,
                              const KvPagePool* pages, int64_t page_size) {
  const int L = int(config.num_layers), kv_layers = L + int(config.num_mtp_layers);
  model::BatchMemory memory;
  memory.conv_state.assign(size_t(L), TensorView());
  memory.ssm_state.assign(size_t(L), TensorView());
  memory.k_pages.assign(size_t(kv_layers), TensorView());
  memory.v_pages.assign(size_t(kv_layers), TensorView());
  memory.page_size = page_size;
  for (int layer = 0; layer < kv_layers; ++layer) {
    if (layer < L && states && states->linear_index(layer) >= 0) {
      memory.conv_state[size_t(layer)] = states->conv_state(states->linear_index(layer));
      memory.ssm_state[size_t(layer)] = states->ssm_state(states->linear_index(layer));
    }
    if (pages && pages->attention_index(layer) >= 0) {
      memory.k_pages[size_t(layer)] = pages->k_cache(pages->attention_index(layer));
      memory.v_pages[size_t(layer)] = pages->v_cache(pages->attention_index(layer));
    }
  }
  return memory;
}

}  // namespace hyla::runtime

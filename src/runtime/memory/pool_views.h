// The views of a model's pools that Model::forward_batch reads and writes (model::BatchMemory),
// shared by the engine and the draft-model drafter, which each own pools of their own.
#pragma once

#include <cstdint>

#include "model/batch.h"
#include "model/config.h"
#include "runtime/memory/kv_page_pool.h"
#include "runtime/memory/state_pool.h"

namespace hyla::runtime {

/// Per global layer id: the conv and SSM state of linear layers (`states`), the K and V pages of
/// attention layers (`pages`; its MTP-head layers after the model's, global ids num_layers + k),
/// undefined for the other kind or a pool that is absent (nullptr); `page_size` as given. The
/// optional fields (decode scratch, staging, verify, ...) are left for the caller.
model::BatchMemory pool_views(const model::ModelConfig& config, const StatePool* states,
                              const KvPagePool* pages, int64_t page_size);

}  // namespace hyla::runtime
